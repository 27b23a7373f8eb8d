#pragma once
// Prometheus' text exposition format (version 0.0.4), as node_exporter's
// textfile collector reads it: one "# HELP" and one "# TYPE" line per
// family, then every sample of that family, grouped (the format forbids a
// family's samples to be split), no timestamps (the collector refuses them).
//
// The rules the format and Prometheus' naming conventions set are checked
// here, so no caller can write a file that node_exporter rejects: metric and
// label names are validated, a counter's name ends in _total and a gauge's
// does not, label values are escaped and made valid UTF-8, and a second
// sample with the same labels in one family is dropped (the collector would
// drop the whole file for it).
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace rbio::bs::metrics {

enum class MetricType { Counter, Gauge };

// What a family is; names and help are the caller's constants.
struct Family {
    std::string_view name;
    MetricType type;
    std::string_view help;
};

struct Label {
    std::string_view name;
    std::string_view value;
};

// A name, type or label the format or the conventions reject: a bug of the
// caller, not of the data.
struct FormatError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool valid_metric_name(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved by Prometheus).
bool valid_label_name(std::string_view name);
// A label value between double quotes: backslash, double quote and line
// feed escaped; bytes that are not valid UTF-8 become U+FFFD (an initiator
// name comes from the wire; the parser refuses invalid UTF-8).
std::string escape_label_value(std::string_view value);
// A HELP text: backslash and line feed escaped.
std::string escape_help(std::string_view help);

// Labels checked, escaped and rendered once ("{a=\"1\",b=\"2\"}", or ""
// for none), for the many samples of an LU or a connection that share
// them. Throws FormatError for a bad or repeated label name.
class LabelSet {
public:
    LabelSet() = default;
    explicit LabelSet(std::span<const Label> labels);
    const std::string& text() const { return text_; }

private:
    std::string text_;
};

class Exposition {
public:
    Exposition() = default;
    // `common` goes first on every sample: what tells this process's series
    // from another's that a collector merges with them.
    explicit Exposition(std::span<const Label> common);

    // Adds one sample of `family` (declared on first use; families appear in
    // the order they were first used). Throws FormatError for a bad name,
    // a bad or repeated label name, or a family used again with another type
    // or help. Returns false, adding nothing, when the family has a sample
    // with these labels (in this order) already.
    bool add(const Family& family, const LabelSet& labels, uint64_t value);
    bool add(const Family& family, std::span<const Label> labels, uint64_t value) {
        return add(family, LabelSet(labels), value);
    }
    bool add(const Family& family, uint64_t value) { return add(family, LabelSet(), value); }

    // The whole exposition, ending with a line feed.
    std::string text() const;
    size_t samples() const { return samples_; }

private:
    struct Series {
        Family family;
        // Hashes of the LabelSets added, to find duplicates without a copy
        // of each: a hash seen before is checked against `lines`.
        std::unordered_set<size_t> label_hashes;
        std::string lines;  // the samples, rendered
    };
    Series& series_of(const Family& family);
    static bool has_sample(const Series& s, const std::string& labels);

    std::vector<Series> families_;
    std::vector<std::string> common_names_;
    std::string common_;  // rendered, without braces
    size_t samples_ = 0;
};

}  // namespace rbio::bs::metrics
