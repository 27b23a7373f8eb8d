// Prometheus' text format: names, types, escaping, grouping, duplicates.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "metrics_test_files.hpp"
#include "rbio/bs/metrics.hpp"

using namespace rbio::bs::metrics;
using rbio::test::count_of;

namespace {

constexpr Family kThings{"test_things_total", MetricType::Counter, "Things done"};
constexpr Family kLevel{"test_level_bytes", MetricType::Gauge, "A level"};

}  // namespace

TEST(MetricsFormat, MetricAndLabelNames) {
    for (const char* ok : {"rbio_lu_commands_total", "a", "_x", "ns:sub_metric", "A9"})
        EXPECT_TRUE(valid_metric_name(ok)) << ok;
    for (const char* bad : {"", "9a", "a-b", "a b", "a.b", "é"}) EXPECT_FALSE(valid_metric_name(bad)) << bad;
    for (const char* ok : {"target", "_x", "lun2"}) EXPECT_TRUE(valid_label_name(ok)) << ok;
    for (const char* bad : {"", "__name__", "__x", "a:b", "1x", "a-b"})
        EXPECT_FALSE(valid_label_name(bad)) << bad;
}

TEST(MetricsFormat, LabelValuesAreEscaped) {
    EXPECT_EQ(escape_label_value("iqn.2026-11.io.rbio:plain"), "iqn.2026-11.io.rbio:plain");
    EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    EXPECT_EQ(escape_label_value("tab\there"), "tab\there");  // allowed as is
    EXPECT_EQ(escape_label_value(""), "");
}

TEST(MetricsFormat, LabelValuesBecomeValidUtf8) {
    const std::string fffd = "\xEF\xBF\xBD";
    // Valid sequences of 2, 3 and 4 bytes stay.
    EXPECT_EQ(escape_label_value("\xC3\xA9\xE2\x82\xAC\xF0\x90\x8D\x88"),
              "\xC3\xA9\xE2\x82\xAC\xF0\x90\x8D\x88");
    EXPECT_EQ(escape_label_value("a\xFF"
                                 "b"),
              "a" + fffd + "b");
    EXPECT_EQ(escape_label_value("\xC0\xAF"), fffd + fffd);                        // overlong '/'
    EXPECT_EQ(escape_label_value("\xE0\x80\xAF"), fffd + fffd + fffd);             // overlong, 3 bytes
    EXPECT_EQ(escape_label_value("\xED\xA0\x80"), fffd + fffd + fffd);             // a surrogate
    EXPECT_EQ(escape_label_value("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
    EXPECT_EQ(escape_label_value("x\xE2\x82"), "x" + fffd + fffd);                 // cut short
    EXPECT_EQ(escape_label_value("\x80\""), fffd + "\\\"");                        // stray continuation
}

TEST(MetricsFormat, HelpIsEscaped) {
    EXPECT_EQ(escape_help("back\\slash\nnew \"quotes\" stay"), "back\\\\slash\\nnew \"quotes\" stay");
}

TEST(MetricsFormat, FamiliesAreGroupedWithHelpAndTypeOnce) {
    Exposition e;
    const std::array<Label, 1> a{{{"who", "a"}}}, b{{{"who", "b"}}};
    e.add(kThings, a, 1);
    e.add(kLevel, 4096);
    e.add(kThings, b, 18446744073709551615ull);
    EXPECT_EQ(e.samples(), 3u);
    EXPECT_EQ(e.text(),
              "# HELP test_things_total Things done\n"
              "# TYPE test_things_total counter\n"
              "test_things_total{who=\"a\"} 1\n"
              "test_things_total{who=\"b\"} 18446744073709551615\n"
              "# HELP test_level_bytes A level\n"
              "# TYPE test_level_bytes gauge\n"
              "test_level_bytes 4096\n");
}

TEST(MetricsFormat, EscapedLabelValuesInSamples) {
    Exposition e;
    const std::array<Label, 2> l{{{"target", "t\"1"}, {"initiator", "i\\n\n"}}};
    e.add(kThings, l, 7);
    EXPECT_NE(e.text().find("test_things_total{target=\"t\\\"1\",initiator=\"i\\\\n\\n\"} 7\n"),
              std::string::npos)
        << e.text();
}

TEST(MetricsFormat, ALabelSetIsRenderedOnceForManySamples) {
    const std::array<Label, 2> l{{{"target", "t"}, {"lun", "1"}}};
    const LabelSet set(l);
    EXPECT_EQ(set.text(), "{target=\"t\",lun=\"1\"}");
    EXPECT_EQ(LabelSet().text(), "");
    Exposition e;
    EXPECT_TRUE(e.add(kThings, set, 1));
    EXPECT_TRUE(e.add(kLevel, set, 2));
    EXPECT_FALSE(e.add(kThings, LabelSet(l), 3)) << "the same labels, rendered again";
    EXPECT_EQ(e.samples(), 2u);
}

TEST(MetricsFormat, ConventionsAreEnforced) {
    Exposition e;
    EXPECT_THROW(e.add({"test_things", MetricType::Counter, "x"}, 1), FormatError);
    EXPECT_THROW(e.add({"test_level_total", MetricType::Gauge, "x"}, 1), FormatError);
    EXPECT_THROW(e.add({"test-things_total", MetricType::Counter, "x"}, 1), FormatError);
    EXPECT_THROW(e.add({"test_no_help_total", MetricType::Counter, ""}, 1), FormatError);
    const std::array<Label, 1> reserved{{{"__name__", "x"}}};
    EXPECT_THROW(e.add(kThings, reserved, 1), FormatError);
    const std::array<Label, 2> twice{{{"a", "1"}, {"a", "2"}}};
    EXPECT_THROW(e.add(kThings, twice, 1), FormatError);
    e.add(kLevel, 1);
    EXPECT_THROW(e.add({"test_level_bytes", MetricType::Gauge, "Another help"}, 2), FormatError);
    EXPECT_EQ(e.samples(), 1u);
}

TEST(MetricsFormat, ASecondSampleWithTheSameLabelsIsDropped) {
    Exposition e;
    const std::array<Label, 1> a{{{"who", "a"}}};
    EXPECT_TRUE(e.add(kThings, a, 1));
    EXPECT_FALSE(e.add(kThings, a, 2));
    EXPECT_TRUE(e.add(kThings, 3));
    EXPECT_FALSE(e.add(kThings, 4));
    EXPECT_EQ(e.samples(), 2u);
    EXPECT_EQ(count_of(e.text(), "test_things_total{who=\"a\"}"), 1u);
}

TEST(MetricsFormat, CommonLabelsGoFirstOnEverySample) {
    const std::array<Label, 1> common{{{"control_port", "7"}}};
    Exposition e(common);
    const std::array<Label, 1> a{{{"who", "a"}}};
    EXPECT_TRUE(e.add(kThings, a, 1));
    EXPECT_TRUE(e.add(kThings, 2));
    EXPECT_FALSE(e.add(kThings, a, 3));
    // A value that looks like the common label is no clash: its quotes are escaped.
    const std::array<Label, 1> tricky{{{"who", "x,control_port=\"7"}}};
    EXPECT_TRUE(e.add(kThings, tricky, 4));
    const std::array<Label, 2> clash{{{"who", "b"}, {"control_port", "8"}}};
    EXPECT_THROW(e.add(kThings, clash, 5), FormatError);
    const std::string x = e.text();
    EXPECT_NE(x.find("test_things_total{control_port=\"7\",who=\"a\"} 1\n"), std::string::npos) << x;
    EXPECT_NE(x.find("test_things_total{control_port=\"7\"} 2\n"), std::string::npos) << x;
    EXPECT_EQ(e.samples(), 3u);
}
