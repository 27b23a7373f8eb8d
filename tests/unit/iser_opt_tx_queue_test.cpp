// TxQueue: message coalescing on the send side, checked against a writer
// that records bytes and calls and can cut writes short or refuse them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <deque>
#include <random>

#include "iser_opt_test_pdus.hpp"
#include "rbio/iser/tx_queue.hpp"

namespace {

using namespace rbio::iser;
using namespace rbio::iser::test;

// Each write takes what the next scripted step allows: a byte budget (> 0),
// or an error (-EAGAIN, -EPIPE, ...). Without steps it takes everything.
class ScriptedWriter : public StreamWriter {
public:
    std::deque<ssize_t> script;
    Bytes written;
    std::vector<size_t> iov_counts;  // per call

    ssize_t write(std::span<const iovec> iov) override {
        iov_counts.push_back(iov.size());
        size_t budget = SIZE_MAX;
        if (!script.empty()) {
            ssize_t step = script.front();
            script.pop_front();
            if (step < 0) return step;
            budget = size_t(step);
        }
        size_t done = 0;
        for (const iovec& v : iov) {
            size_t k = std::min(v.iov_len, budget - done);
            const auto* p = static_cast<const uint8_t*>(v.iov_base);
            written.insert(written.end(), p, p + k);
            done += k;
            if (done == budget) break;
        }
        return ssize_t(done);
    }
    size_t calls() const { return iov_counts.size(); }
};

struct Harness {
    ScriptedWriter writer;
    ConnectionCounters counters;
    std::vector<std::pair<uint64_t, int>> completed;
    TxQueue tx;
    explicit Harness(const TxConfig& cfg)
        : tx(
              cfg, writer, [this](uint64_t ud, int st) { completed.emplace_back(ud, st); }, counters) {}
    void enqueue_all(const std::vector<Parts>& pdus) {
        for (size_t i = 0; i < pdus.size(); ++i)
            ASSERT_EQ(tx.enqueue({pdus[i].header, pdus[i].data, i}), TxAccept::Queued);
    }
};

TxConfig digests(bool hd, bool dd) {
    TxConfig c;
    c.header_digest = hd;
    c.data_digest = dd;
    return c;
}

TEST(TxQueue, ManyPdusLeaveInOneWriteWithDigestsAndPadding) {
    for (int d = 0; d < 4; ++d) {
        bool hd = d & 1, dd = d & 2;
        SCOPED_TRACE(d);
        Harness h(digests(hd, dd));
        auto pdus = varied_pdus(100, 50);
        h.enqueue_all(pdus);
        EXPECT_EQ(h.writer.calls(), 0u);  // nothing before the end of the pass
        EXPECT_EQ(h.tx.state(), TxState::Pending);
        EXPECT_EQ(h.tx.flush(), TxState::Idle);
        EXPECT_EQ(h.writer.calls(), 1u);
        EXPECT_EQ(h.writer.written, concat(pdus, hd, dd));
        ASSERT_EQ(h.completed.size(), 100u);
        for (size_t i = 0; i < 100; ++i) EXPECT_EQ(h.completed[i], std::make_pair(uint64_t(i), 0));
        EXPECT_EQ(h.counters[Counter::SendCalls], 1u);
        EXPECT_EQ(h.counters[Counter::PdusOut], 100u);
        EXPECT_EQ(h.counters[Counter::BytesOut], h.writer.written.size());
        EXPECT_DOUBLE_EQ(h.counters.pdus_per_send(), 100.0);
        EXPECT_EQ(h.tx.flush(), TxState::Idle);  // nothing queued: no call
        EXPECT_EQ(h.writer.calls(), 1u);
    }
}

TEST(TxQueue, CoalescingOffSwitchWritesEachPduAsQueued) {
    TxConfig cfg;
    cfg.coalesce = false;
    Harness h(cfg);
    auto pdus = varied_pdus(10, 20);
    h.enqueue_all(pdus);
    EXPECT_EQ(h.writer.calls(), 10u);
    EXPECT_EQ(h.completed.size(), 10u);
    EXPECT_EQ(h.tx.flush(), TxState::Idle);
    EXPECT_EQ(h.writer.written, concat(pdus, false, false));
}

TEST(TxQueue, IovecLimitWritesEarlyAndNeverExceedsIt) {
    TxConfig cfg = digests(true, true);
    cfg.max_iov = 16;
    Harness h(cfg);
    auto pdus = varied_pdus(50, 30);
    h.enqueue_all(pdus);
    EXPECT_GT(h.writer.calls(), 0u);  // wrote while queueing
    h.tx.flush();
    EXPECT_EQ(h.writer.written, concat(pdus, true, true));
    for (size_t n : h.writer.iov_counts) EXPECT_LE(n, 16u);
    EXPECT_EQ(h.completed.size(), 50u);
}

TEST(TxQueue, ByteLimitWritesEarly) {
    TxConfig cfg;
    cfg.max_queued_bytes = 10000;
    Harness h(cfg);
    std::vector<Parts> pdus;
    for (uint32_t i = 0; i < 5; ++i) pdus.push_back(make_pdu(Opcode::DataOut, i, 0, 4096));
    h.enqueue_all(pdus);
    EXPECT_EQ(h.writer.calls(), 1u);  // at the third PDU: 3 * 4144 >= 10000
    EXPECT_EQ(h.completed.size(), 3u);
    h.tx.flush();
    EXPECT_EQ(h.writer.calls(), 2u);
    EXPECT_EQ(h.writer.written, concat(pdus, false, false));
}

TEST(TxQueue, ShortWriteAtEveryByteBoundaryResumesOnWritable) {
    auto pdus = varied_pdus(6, 9);
    Bytes expect = concat(pdus, true, true);
    // Where each PDU ends in the stream.
    std::vector<size_t> ends;
    ends.reserve(pdus.size());
    size_t at = 0;
    for (const Parts& p : pdus) ends.push_back(at += encode(p, true, true).size());
    for (size_t k = 1; k < expect.size(); ++k) {
        Harness h(digests(true, true));
        h.enqueue_all(pdus);
        h.writer.script = {ssize_t(k)};
        ASSERT_EQ(h.tx.flush(), TxState::Blocked) << k;
        EXPECT_EQ(h.counters[Counter::WouldBlock], 1u);
        size_t done = 0;
        while (done < ends.size() && ends[done] <= k) ++done;
        ASSERT_EQ(h.completed.size(), done) << k;
        EXPECT_EQ(h.tx.queued_bytes(), expect.size() - k);
        // Still blocked: flush() makes no call until the socket is writable.
        EXPECT_EQ(h.tx.flush(), TxState::Blocked);
        EXPECT_EQ(h.writer.calls(), 1u);
        ASSERT_EQ(h.tx.on_writable(), TxState::Idle) << k;
        ASSERT_EQ(h.writer.written, expect) << k;
        ASSERT_EQ(h.completed.size(), pdus.size());
        for (size_t i = 0; i < pdus.size(); ++i) ASSERT_EQ(h.completed[i].first, i);
    }
}

TEST(TxQueue, RandomTinyWritesDeliverEveryByteInOrder) {
    std::mt19937 rng(5);
    Harness h(digests(true, true));
    auto pdus = varied_pdus(40, 100);
    h.enqueue_all(pdus);
    for (int i = 0; i < 100000; ++i) h.writer.script.push_back(ssize_t(1 + rng() % 7));
    TxState s = h.tx.flush();
    while (s == TxState::Blocked) s = h.tx.on_writable();
    EXPECT_EQ(s, TxState::Idle);
    EXPECT_EQ(h.writer.written, concat(pdus, true, true));
    EXPECT_EQ(h.completed.size(), 40u);
}

TEST(TxQueue, EagainThenResume) {
    Harness h(TxConfig{});
    auto pdus = varied_pdus(3, 10);
    h.enqueue_all(pdus);
    h.writer.script = {-EAGAIN};
    EXPECT_EQ(h.tx.flush(), TxState::Blocked);
    EXPECT_TRUE(h.writer.written.empty());
    EXPECT_TRUE(h.completed.empty());
    EXPECT_EQ(h.counters[Counter::WouldBlock], 1u);
    // More work queued while blocked waits too, without system calls.
    Parts extra = make_pdu(Opcode::NopOut, 9, 0, 3);
    EXPECT_EQ(h.tx.enqueue({extra.header, extra.data, 3}), TxAccept::Queued);
    EXPECT_EQ(h.tx.flush(), TxState::Blocked);
    EXPECT_EQ(h.writer.calls(), 1u);
    EXPECT_EQ(h.tx.on_writable(), TxState::Idle);
    pdus.push_back(extra);
    EXPECT_EQ(h.writer.written, concat(pdus, false, false));
    EXPECT_EQ(h.writer.calls(), 2u);
    EXPECT_EQ(h.completed.size(), 4u);
}

TEST(TxQueue, InterruptedWriteIsRetried) {
    Harness h(TxConfig{});
    auto pdus = varied_pdus(2, 4);
    h.enqueue_all(pdus);
    h.writer.script = {-EINTR};
    EXPECT_EQ(h.tx.flush(), TxState::Idle);
    EXPECT_EQ(h.writer.calls(), 2u);
    EXPECT_EQ(h.writer.written, concat(pdus, false, false));
}

TEST(TxQueue, FullQueueRefusesUntilFlushed) {
    TxConfig cfg;
    cfg.max_queued_pdus = 4;
    Harness h(cfg);
    auto pdus = varied_pdus(5, 4);
    for (size_t i = 0; i < 4; ++i)
        EXPECT_EQ(h.tx.enqueue({pdus[i].header, pdus[i].data, i}), TxAccept::Queued);
    EXPECT_EQ(h.tx.enqueue({pdus[4].header, pdus[4].data, 4}), TxAccept::Full);
    h.tx.flush();
    EXPECT_EQ(h.tx.enqueue({pdus[4].header, pdus[4].data, 4}), TxAccept::Queued);
    h.tx.flush();
    EXPECT_EQ(h.writer.written, concat(pdus, false, false));
}

TEST(TxQueue, HeaderThatDisagreesWithItsSpansIsInvalid) {
    Harness h(TxConfig{});
    Parts p = make_pdu(Opcode::DataIn, 1, 1, 10);
    Bytes short_data(9);
    EXPECT_EQ(h.tx.enqueue({p.header, short_data, 0}), TxAccept::Invalid);
    EXPECT_EQ(h.tx.enqueue({std::span(p.header).first(48), p.data, 0}), TxAccept::Invalid);
    EXPECT_EQ(h.tx.enqueue({std::span(p.header).first(40), {}, 0}), TxAccept::Invalid);
    EXPECT_EQ(h.tx.enqueue({p.header, p.data, 0}), TxAccept::Queued);
}

TEST(TxQueue, BrokenStreamDropsEveryPduWithTheError) {
    Harness h(TxConfig{});
    auto pdus = varied_pdus(3, 10);
    h.enqueue_all(pdus);
    h.writer.script = {10, -EPIPE};
    EXPECT_EQ(h.tx.flush(), TxState::Blocked);  // short write
    EXPECT_EQ(h.tx.on_writable(), TxState::Failed);
    EXPECT_THAT(h.tx.error(), ::testing::HasSubstr("Broken pipe"));
    ASSERT_EQ(h.completed.size(), 3u);
    for (auto& [ud, st] : h.completed) EXPECT_EQ(st, -EPIPE);
    EXPECT_EQ(h.tx.enqueue({pdus[0].header, pdus[0].data, 0}), TxAccept::Failed);
    EXPECT_EQ(h.counters[Counter::PdusOut], 0u);
}

TEST(TxQueue, CompletionMayQueueTheNextPduOfTheSameFlush) {
    ScriptedWriter writer;
    ConnectionCounters counters;
    auto pdus = varied_pdus(4, 10);
    std::vector<uint64_t> order;
    TxQueue* txp = nullptr;
    TxQueue tx(
        TxConfig{}, writer,
        [&](uint64_t ud, int) {
            order.push_back(ud);
            if (ud < 3) txp->enqueue({pdus[ud + 1].header, pdus[ud + 1].data, ud + 1});
        },
        counters);
    txp = &tx;
    tx.enqueue({pdus[0].header, pdus[0].data, 0});
    EXPECT_EQ(tx.flush(), TxState::Idle);
    EXPECT_EQ(order, (std::vector<uint64_t>{0, 1, 2, 3}));
    EXPECT_EQ(writer.written, concat(pdus, false, false));
}

TEST(TxQueue, CancelAllReleasesQueuedPdus) {
    Harness h(TxConfig{});
    h.enqueue_all(varied_pdus(3, 3));
    h.tx.cancel_all(-ECANCELED);
    ASSERT_EQ(h.completed.size(), 3u);
    EXPECT_EQ(h.completed[2], std::make_pair(uint64_t(2), -ECANCELED));
    EXPECT_EQ(h.tx.state(), TxState::Idle);
    EXPECT_EQ(h.tx.queued_bytes(), 0u);
}

TEST(TxQueue, BadLimitsAreRejected) {
    ScriptedWriter w;
    ConnectionCounters c;
    TxConfig cfg;
    cfg.max_iov = IOV_MAX + 1;
    EXPECT_THROW(TxQueue(cfg, w, nullptr, c), std::invalid_argument);
    cfg.max_iov = 0;
    EXPECT_THROW(TxQueue(cfg, w, nullptr, c), std::invalid_argument);
}

}  // namespace
