#include "rbio/bs/metrics.hpp"

namespace rbio::bs::metrics {

namespace {

bool name_char(char c, bool first, bool colon) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
    if (colon && c == ':') return true;
    return !first && c >= '0' && c <= '9';
}

bool valid_name(std::string_view name, bool colon) {
    if (name.empty()) return false;
    for (size_t i = 0; i < name.size(); ++i)
        if (!name_char(name[i], i == 0, colon)) return false;
    return true;
}

bool ends_with(std::string_view s, std::string_view tail) {
    return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// Length of the valid UTF-8 sequence at s[0] (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF), or 0.
size_t utf8_sequence(std::string_view s) {
    auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
    const unsigned char c = b(0);
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (!cont(1) || !cont(2)) return 0;
        if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
        if (c == 0xED && b(1) > 0x9F) return 0;  // surrogate
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (!cont(1) || !cont(2) || !cont(3)) return 0;
        if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
        if (c == 0xF4 && b(1) > 0x8F) return 0;  // past U+10FFFF
        return 4;
    }
    return 0;
}

const char* type_name(MetricType t) { return t == MetricType::Counter ? "counter" : "gauge"; }

void check_family(const Family& f) {
    const std::string name(f.name);
    if (!valid_metric_name(f.name)) throw FormatError("'" + name + "' is not a valid metric name");
    const bool total = ends_with(f.name, "_total");
    if (f.type == MetricType::Counter && !total)
        throw FormatError("counter '" + name + "' must end in _total");
    if (f.type == MetricType::Gauge && total)
        throw FormatError("gauge '" + name + "' must not end in _total");
    if (f.help.empty()) throw FormatError("'" + name + "' has no help text");
}

}  // namespace

bool valid_metric_name(std::string_view name) { return valid_name(name, true); }

bool valid_label_name(std::string_view name) { return valid_name(name, false) && name.substr(0, 2) != "__"; }

std::string escape_label_value(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    while (!value.empty()) {
        const size_t n = utf8_sequence(value);
        if (n == 0) {
            out += "\xEF\xBF\xBD";  // U+FFFD for one byte that fits no sequence
            value.remove_prefix(1);
            continue;
        }
        if (value[0] == '\\') out += "\\\\";
        else if (value[0] == '"') out += "\\\"";
        else if (value[0] == '\n') out += "\\n";
        else out.append(value.substr(0, n));
        value.remove_prefix(n);
    }
    return out;
}

std::string escape_help(std::string_view help) {
    std::string out;
    out.reserve(help.size());
    for (char c : help) {
        if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

Exposition::Series& Exposition::series_of(const Family& family) {
    for (auto& s : families_) {
        if (s.family.name != family.name) continue;
        if (s.family.type != family.type || s.family.help != family.help)
            throw FormatError("'" + std::string(family.name) + "' declared twice, differently");
        return s;
    }
    check_family(family);
    families_.push_back(Series{family, {}, {}});
    return families_.back();
}

LabelSet::LabelSet(std::span<const Label> labels) {
    for (size_t i = 0; i < labels.size(); ++i) {
        const Label& l = labels[i];
        if (!valid_label_name(l.name))
            throw FormatError("'" + std::string(l.name) + "' is not a valid label name");
        for (size_t j = 0; j < i; ++j)
            if (labels[j].name == l.name)
                throw FormatError("label '" + std::string(l.name) + "' given twice");
        text_ += text_.empty() ? "{" : ",";
        text_.append(l.name).append("=\"").append(escape_label_value(l.value)).append("\"");
    }
    if (!text_.empty()) text_ += "}";
}

Exposition::Exposition(std::span<const Label> common) {
    const std::string text = LabelSet(common).text();
    if (!text.empty()) common_ = text.substr(1, text.size() - 2);
    for (const Label& l : common) common_names_.emplace_back(l.name);
}

bool Exposition::has_sample(const Series& s, const std::string& labels) {
    const std::string line = std::string(s.family.name) + labels + " ";
    for (size_t at = s.lines.find(line); at != std::string::npos; at = s.lines.find(line, at + 1))
        if (at == 0 || s.lines[at - 1] == '\n') return true;
    return false;
}

bool Exposition::add(const Family& family, const LabelSet& labels, uint64_t value) {
    Series& s = series_of(family);
    std::string text;
    if (common_.empty()) {
        text = labels.text();
    } else {
        // Names are identifiers and values have their quotes escaped, so
        // `{name="` or `,name="` can only be a label of that name.
        for (const std::string& name : common_names_)
            if (labels.text().find("{" + name + "=\"") != std::string::npos ||
                labels.text().find("," + name + "=\"") != std::string::npos)
                throw FormatError("label '" + name + "' given twice");
        text = labels.text().empty() ? "{" + common_ + "}" : "{" + common_ + "," + labels.text().substr(1);
    }
    if (!s.label_hashes.insert(std::hash<std::string>{}(text)).second && has_sample(s, text)) return false;
    s.lines.append(family.name).append(text).append(" ").append(std::to_string(value)).append("\n");
    ++samples_;
    return true;
}

std::string Exposition::text() const {
    std::string out;
    for (const auto& s : families_) {
        out.append("# HELP ").append(s.family.name).append(" ").append(escape_help(s.family.help));
        out.append("\n# TYPE ").append(s.family.name).append(" ").append(type_name(s.family.type));
        out.append("\n").append(s.lines);
    }
    return out;
}

}  // namespace rbio::bs::metrics
