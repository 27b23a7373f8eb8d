#include <gtest/gtest.h>

#include "rbio/bs/error.hpp"
#include "rbio/bs/options.hpp"

using rbio::bs::Error;
using rbio::bs::Options;
using rbio::bs::parse_options;

namespace {

std::string error_of(const std::string& s) {
    try {
        parse_options(s);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Options, EmptyMeansDefaults) {
    Options d;
    Options o = parse_options("");
    EXPECT_EQ(o.queue_depth, d.queue_depth);
    EXPECT_TRUE(o.batch);
    EXPECT_TRUE(o.coalesce);
    EXPECT_TRUE(o.inline_reap);
    EXPECT_TRUE(o.thin);
    EXPECT_EQ(o.coalesce_max_kib, 1024u);
}

TEST(Options, ParsesEveryKeyWithSpacesAndEmptyItems) {
    Options o = parse_options(
        " queue_depth=64 ; batch=off;;coalesce=no;coalesce_max_kib=256;inline_reap=0;thin=false ;");
    EXPECT_EQ(o.queue_depth, 64u);
    EXPECT_FALSE(o.batch);
    EXPECT_FALSE(o.coalesce);
    EXPECT_EQ(o.coalesce_max_kib, 256u);
    EXPECT_FALSE(o.inline_reap);
    EXPECT_FALSE(o.thin);
    EXPECT_EQ(parse_options("inline_io=on").inline_io, Options::Inline::On);
    EXPECT_EQ(parse_options("inline_io=off").inline_io, Options::Inline::Off);
    EXPECT_EQ(parse_options("inline_io=auto;inline_max_kib=8").inline_max_kib, 8u);
}

TEST(Options, ColonSeparatesItemsToo) {
    Options o = parse_options("queue_depth=16:coalesce=off;thin=off");
    EXPECT_EQ(o.queue_depth, 16u);
    EXPECT_FALSE(o.coalesce);
    EXPECT_FALSE(o.thin);
}

TEST(Options, RoundTripsThroughCanonicalForm) {
    Options o = parse_options("queue_depth=32;batch=off;thin=off");
    Options again = parse_options(rbio::bs::to_string(o));
    EXPECT_EQ(again.queue_depth, 32u);
    EXPECT_FALSE(again.batch);
    EXPECT_FALSE(again.thin);
    EXPECT_TRUE(again.coalesce);
}

TEST(Options, DebugUnsafeFuaIsOffUnlessAskedAndNamedOnlyWhenOn) {
    EXPECT_FALSE(parse_options("").debug_unsafe_fua);
    Options o = parse_options("debug_unsafe_fua=1");
    EXPECT_TRUE(o.debug_unsafe_fua);
    EXPECT_TRUE(parse_options(rbio::bs::to_string(o)).debug_unsafe_fua);
    EXPECT_NE(rbio::bs::to_string(o).find(":debug_unsafe_fua=on"), std::string::npos);
    EXPECT_EQ(rbio::bs::to_string(Options{}).find("debug_unsafe_fua"), std::string::npos);
    EXPECT_NE(error_of("debug_unsafe_fua=maybe").find("expected on or off"), std::string::npos);
}

TEST(Options, UnknownKeyNamesItAndTheKnownOnes) {
    std::string e = error_of("queue_dept=64");
    EXPECT_NE(e.find("unknown key 'queue_dept'"), std::string::npos) << e;
    EXPECT_NE(e.find("queue_depth"), std::string::npos) << e;
}

TEST(Options, MalformedItemsAreRejected) {
    EXPECT_NE(error_of("batch").find("not key=value"), std::string::npos);
    EXPECT_NE(error_of("batch=maybe").find("expected on or off"), std::string::npos);
    EXPECT_NE(error_of("queue_depth=abc").find("whole number"), std::string::npos);
    EXPECT_NE(error_of("queue_depth=0").find("whole number"), std::string::npos);
    EXPECT_NE(error_of("queue_depth=8192").find("whole number"), std::string::npos);
    EXPECT_NE(error_of("queue_depth=100").find("power of two"), std::string::npos);
    EXPECT_NE(error_of("queue_depth=64x").find("whole number"), std::string::npos);
    EXPECT_NE(error_of("coalesce_max_kib=1").find("whole number"), std::string::npos);
    EXPECT_NE(error_of("inline_io=sometimes").find("expected auto, on or off"), std::string::npos);
}

TEST(Options, AKeyGivenTwiceIsRejected) {
    EXPECT_NE(error_of("queue_depth=256:queue_depth=64").find("queue_depth given twice"), std::string::npos);
    EXPECT_NE(error_of("thin=on; batch=off ;thin = off").find("thin given twice"), std::string::npos);
}
