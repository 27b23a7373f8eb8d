// The transport's statistics file, rewritten every second inside tgtd: its
// content, and that a rewrite allocates nothing (bench/cost.sh counts
// allocations per command over whole runs; at iSER's rates under TCG the
// file's allocations alone came to 0.012 per command).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "metrics_test_files.hpp"
#include "rbio/bs/tcp_transport.h"

namespace {

// operator new calls in this executable while `counting` is set.
std::atomic<bool> counting{false};
std::atomic<size_t> news{0};

}  // namespace

// These replace the global ones: new takes from malloc, so delete gives back
// with free, which g++ cannot see across the replacement.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
    if (counting.load(std::memory_order_relaxed)) news.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

using rbio::test::TempDir;

TEST(StatsFile, WritesTotalsAndConnectionsWithThePid) {
    TempDir dir;
    const std::string pattern = dir.path() + "/stats.%p";
    char err[256] = "";
    ASSERT_EQ(rbio_tp_stats_write(pattern.c_str(), "connection=1 x=2\n", err, sizeof err), 0) << err;
    const std::string text = rbio::test::slurp(dir.path() + "/stats." + std::to_string(::getpid()));
    EXPECT_NE(text.find("transport=rbio\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\nconnections_open="), std::string::npos) << text;
    EXPECT_NE(text.find("\nsyscalls="), std::string::npos) << text;
    EXPECT_NE(text.find("\nconnection=1 x=2\n"), std::string::npos) << text;
}

TEST(StatsFile, RewritingItAllocatesNothing) {
    TempDir dir;
    const std::string pattern = dir.path() + "/stats.%p";
    const std::string conns(3000, 'c');  // a few connections' lines
    char err[256] = "";
    ASSERT_EQ(rbio_tp_stats_write(pattern.c_str(), conns.c_str(), err, sizeof err), 0) << err;
    news = 0;
    counting = true;
    for (int i = 0; i < 3; ++i) rbio_tp_stats_write(pattern.c_str(), conns.c_str(), err, sizeof err);
    counting = false;
    EXPECT_EQ(news.load(), 0u) << "allocations in three rewrites of the statistics file";
}

}  // namespace
