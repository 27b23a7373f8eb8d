// RbdReopen's attempts: how often it tries again, what it reports, and that
// the LU's close never waits out a pause. (Opening a real image again, after
// a real fence, is tested in integration.rbd-takeover; here the opener stands
// in for librbd, since what is tested is the retrying around it.)
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "rbio/bs/rbd_reopen.hpp"

using namespace std::chrono_literals;
using rbio::bs::RbdImage;
using rbio::bs::RbdReopen;

namespace {

// Counts wake-ups, as tgtd's loop would see the eventfd become readable.
class Wakes {
public:
    void operator()() {
        std::lock_guard lock(m_);
        ++n_;
        cv_.notify_all();
    }
    bool wait_for_count(unsigned n, std::chrono::milliseconds limit) {
        std::unique_lock lock(m_);
        return cv_.wait_for(lock, limit, [&] { return n_ >= n; });
    }
    unsigned count() {
        std::lock_guard lock(m_);
        return n_;
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    unsigned n_ = 0;
};

}  // namespace

TEST(RbdReopen, PausesDoubleFromOneSecondUpToThirty) {
    const RbdReopen::Pauses p;
    const std::chrono::milliseconds want[] = {1s, 2s, 4s, 8s, 16s, 30s, 30s};
    for (unsigned a = 1; a <= 7; ++a) EXPECT_EQ(RbdReopen::pause_after(a, p), want[a - 1]) << "attempt " << a;
    EXPECT_EQ(RbdReopen::pause_after(1000, p), 30s);
}

TEST(RbdReopen, TriesAgainAfterEachFailureAndReportsEach) {
    Wakes wakes;
    unsigned calls = 0;
    RbdReopen r;
    r.start(
        [&]() -> std::unique_ptr<RbdImage> {
            ++calls;
            throw std::runtime_error("no monitor answered (" + std::to_string(calls) + ")");
        },
        [&] { wakes(); }, {10ms, 40ms});
    ASSERT_TRUE(wakes.wait_for_count(4, 5s)) << "only " << wakes.count() << " attempts reported";
    r.stop();
    ASSERT_TRUE(r.has_news());
    RbdReopen::News news = r.take();
    EXPECT_FALSE(r.has_news());
    EXPECT_FALSE(news.opened);
    EXPECT_EQ(news.image, nullptr);
    ASSERT_GE(news.failures.size(), 4u);
    const std::chrono::milliseconds pauses[] = {10ms, 20ms, 40ms, 40ms};
    for (unsigned i = 0; i < 4; ++i) {
        EXPECT_EQ(news.failures[i].attempt, i + 1);
        EXPECT_EQ(news.failures[i].why, "no monitor answered (" + std::to_string(i + 1) + ")");
        EXPECT_EQ(news.failures[i].next_in, pauses[i]);
    }
}

TEST(RbdReopen, StopsTryingOnceOpened) {
    Wakes wakes;
    unsigned calls = 0;
    RbdReopen r;
    // The third attempt succeeds; a null image stands for the new client.
    r.start(
        [&]() -> std::unique_ptr<RbdImage> {
            if (++calls < 3) throw std::runtime_error("pool 'rbd' does not exist");
            return nullptr;
        },
        [&] { wakes(); }, {1ms, 1ms});
    ASSERT_TRUE(wakes.wait_for_count(3, 5s));
    RbdReopen::News news = r.take();
    r.stop();  // joins: the thread has returned after the success
    EXPECT_TRUE(news.opened);
    EXPECT_EQ(news.failures.size(), 2u);
    EXPECT_EQ(calls, 3u);
    EXPECT_EQ(wakes.count(), 3u) << "attempts went on after the image was opened";
}

TEST(RbdReopen, CloseDoesNotWaitOutAPause) {
    Wakes wakes;
    RbdReopen r;
    r.start([]() -> std::unique_ptr<RbdImage> { throw std::runtime_error("refused"); }, [&] { wakes(); },
            {60s, 60s});
    ASSERT_TRUE(wakes.wait_for_count(1, 5s));
    const auto t0 = std::chrono::steady_clock::now();
    r.stop();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "stop() waited for the 60 s pause";
    EXPECT_EQ(r.take().failures.size(), 1u);
}

TEST(RbdReopen, StartAgainBeginsAtTheFirstAttempt) {
    Wakes wakes;
    RbdReopen r;
    auto failing = []() -> std::unique_ptr<RbdImage> { throw std::runtime_error("refused"); };
    r.start(failing, [&] { wakes(); }, {1ms, 1ms});
    ASSERT_TRUE(wakes.wait_for_count(3, 5s));
    const unsigned before = wakes.count();           // before: the first attempt wakes at once
    r.start(failing, [&] { wakes(); }, {60s, 60s});  // a later fence
    ASSERT_TRUE(wakes.wait_for_count(before + 1, 5s));
    r.stop();
    RbdReopen::News news = r.take();
    ASSERT_EQ(news.failures.size(), 1u) << "news of the earlier attempts was kept";
    EXPECT_EQ(news.failures[0].attempt, 1u);
}
