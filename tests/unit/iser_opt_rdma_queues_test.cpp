// The send-queue policy of the RDMA backend, against a recording poster (the
// verbs call is the only thing replaced; the VM test runs it on soft-RoCE):
// doorbell batching, selective signalling, in-order release of what
// unsignalled sends hold, covering a quiet tail, the idle probe, the watch
// on work that gets no completion, and failure handling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "rbio/iser/iser_header.hpp"
#include "rbio/iser/rdma/completion_poller.hpp"
#include "rbio/iser/rdma/quiet_watch.hpp"
#include "rbio/iser/rdma/work_queues.hpp"

namespace rbio::iser::rdma {
namespace {

struct Posted {
    uint64_t wr_id;
    ibv_wr_opcode opcode;
    bool signaled;
    bool inline_data;
    int num_sge;
    uint64_t addr;  // the first segment's
    uint64_t remote_addr;
    uint32_t rkey;
};

class RecordingPoster : public SendPoster {
public:
    int post(ibv_send_wr* first, ibv_send_wr** bad) override {
        ++calls;
        size_t n = 0;
        for (ibv_send_wr* w = first; w; w = w->next, ++n) {
            if (refuse_after >= 0 && int(n) == refuse_after) {
                *bad = w;
                return ENOMEM;
            }
            const bool rdma = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_READ;
            posted.push_back({w->wr_id, w->opcode, (w->send_flags & IBV_SEND_SIGNALED) != 0,
                              (w->send_flags & IBV_SEND_INLINE) != 0, w->num_sge,
                              w->num_sge > 0 ? w->sg_list[0].addr : 0, rdma ? w->wr.rdma.remote_addr : 0,
                              rdma ? w->wr.rdma.rkey : 0});
        }
        return 0;
    }
    // Completes like an RC QP: only signalled requests report, in order.
    std::vector<uint64_t> signaled_ids() const {
        std::vector<uint64_t> ids;
        for (auto& p : posted)
            if (p.signaled) ids.push_back(p.wr_id);
        return ids;
    }
    int calls = 0;
    int refuse_after = -1;
    std::vector<Posted> posted;
};

struct Fixture {
    explicit Fixture(SendConfig c = {}) : q(c, poster, counters) {}
    // What the queue releases, in order.
    auto rel() {
        return [this](uint64_t t, uint32_t, int s) { released.push_back({t, s}); };
    }
    void push_sends(int n, uint64_t first_token = 1) {
        static const ibv_sge sge{0x1000, 512, 7};
        for (int i = 0; i < n; ++i)
            ASSERT_TRUE(q.push({WrKind::Send, {&sge, 1}, 0, 0, first_token + uint64_t(i)}));
    }
    void complete_signaled() {
        for (uint64_t id : poster.signaled_ids())
            if (id >= next_completion) {
                ASSERT_TRUE(q.on_completion(id, 0, rel()));
                next_completion = id + 1;
            }
    }
    RecordingPoster poster;
    ConnectionCounters counters;
    std::vector<std::pair<uint64_t, int>> released;
    SendQueue q;
    uint64_t next_completion = 0;
};

TEST(RdmaSendQueue, OnePostCallPerPassWithEverySendOfThePass) {
    Fixture f;
    f.push_sends(40);
    EXPECT_EQ(f.poster.calls, 0);
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_EQ(f.poster.calls, 1);
    EXPECT_EQ(f.poster.posted.size(), 40u);
    EXPECT_EQ(f.counters[Counter::WorkRequests], 40u);
    EXPECT_EQ(f.counters[Counter::PostCalls], 1u);
    EXPECT_DOUBLE_EQ(f.counters.wrs_per_post(), 40.0);
}

TEST(RdmaSendQueue, SignalsOneSendInSignalEvery) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    f.push_sends(64);
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_EQ(f.poster.signaled_ids(), (std::vector<uint64_t>{15, 31, 47, 63}));
    EXPECT_EQ(f.counters[Counter::Signaled], 4u);
}

TEST(RdmaSendQueue, ACompletionReleasesEveryEarlierSendInOrder) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 8});
    f.push_sends(16, 100);
    ASSERT_EQ(f.q.flush(), 0);
    ASSERT_TRUE(f.q.on_completion(7, 0, f.rel()));
    ASSERT_EQ(f.released.size(), 8u);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(f.released[i], std::make_pair(uint64_t(100 + i), 0));
    EXPECT_EQ(f.q.in_flight(), 8u);
    // A stale or unknown completion is refused, not acted on.
    EXPECT_FALSE(f.q.on_completion(3, 0, f.rel()));
    EXPECT_FALSE(f.q.on_completion(99, 0, f.rel()));
    EXPECT_EQ(f.released.size(), 8u);
}

TEST(RdmaSendQueue, AQuietTailIsCoveredByOneZeroLengthWrite) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    f.push_sends(5);
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_TRUE(f.poster.signaled_ids().empty());
    ASSERT_TRUE(f.q.needs_cover());
    ASSERT_EQ(f.q.cover(), 0);
    ASSERT_EQ(f.poster.posted.size(), 6u);
    const Posted& c = f.poster.posted.back();
    EXPECT_EQ(c.opcode, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(c.signaled);
    EXPECT_FALSE(f.q.needs_cover());
    f.complete_signaled();
    EXPECT_EQ(f.released.size(), 6u);
    EXPECT_EQ(f.q.in_flight(), 0u);
    EXPECT_FALSE(f.q.needs_cover());
}

// A large data buffer freed while its response is queued asks for the
// next flush's last send to be signalled: it comes back with that
// completion, not up to signal_every sends later.
TEST(RdmaSendQueue, SignalNextFlushSignalsItsLastSendOnce) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    f.push_sends(3);
    f.q.signal_next_flush();
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_EQ(f.poster.signaled_ids(), (std::vector<uint64_t>{2}));
    f.push_sends(3, 10);
    ASSERT_EQ(f.q.flush(), 0);  // back to one in 16
    EXPECT_EQ(f.poster.signaled_ids(), (std::vector<uint64_t>{2}));
    f.complete_signaled();
    EXPECT_EQ(f.released.size(), 3u);
}

// Freed once its response had been posted unsignalled, with nothing queued
// after it (a peer that sends only NOP-Outs needing no answer): the next
// flush covers the tail at once. Nothing posted uncovered: nothing to do.
TEST(RdmaSendQueue, SignalNextFlushWithNothingQueuedCoversThePostedTail) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    f.q.signal_next_flush();
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_TRUE(f.poster.posted.empty());  // nothing to cover
    f.push_sends(3);
    ASSERT_EQ(f.q.flush(), 0);  // the flag was dropped: one in 16 again
    EXPECT_TRUE(f.poster.signaled_ids().empty());
    f.q.signal_next_flush();
    ASSERT_EQ(f.q.flush(), 0);
    ASSERT_EQ(f.poster.posted.size(), 4u);
    EXPECT_EQ(f.poster.posted.back().opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(f.poster.signaled_ids(), (std::vector<uint64_t>{3}));
    f.complete_signaled();
    EXPECT_EQ(f.released.size(), 4u);
    ASSERT_EQ(f.q.flush(), 0);  // once
    EXPECT_EQ(f.poster.posted.size(), 4u);
}

TEST(RdmaSendQueue, AProbeGoesOutOnlyWhenNothingIsQueuedOrInFlight) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    f.push_sends(3);
    EXPECT_EQ(f.q.probe(), 0);  // queued: those will complete or fail
    EXPECT_TRUE(f.poster.posted.empty());
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_EQ(f.q.probe(), 0);  // in flight
    ASSERT_EQ(f.poster.posted.size(), 3u);
    ASSERT_EQ(f.q.cover(), 0);
    f.complete_signaled();
    ASSERT_EQ(f.q.in_flight(), 0u);
    ASSERT_EQ(f.q.probe(), 0);
    ASSERT_EQ(f.poster.posted.size(), 5u);
    const Posted& p = f.poster.posted.back();
    EXPECT_EQ(p.opcode, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(p.signaled);
    EXPECT_EQ(f.q.in_flight(), 1u);
    // Its failure is reported like any send's.
    f.released.clear();
    ASSERT_TRUE(f.q.on_completion(f.poster.posted.back().wr_id, -EIO, f.rel()));
    ASSERT_EQ(f.released.size(), 1u);
    EXPECT_EQ(f.released[0], std::make_pair(uint64_t(0), -EIO));
}

// The glue's once-a-second call for a quiet connection, on a real queue:
// `seconds` quiet seconds, the actions the watch asked for.
std::vector<QuietAction> quiet_seconds(Fixture& f, QuietWatch& w, int seconds, uint64_t completions) {
    std::vector<QuietAction> actions;
    for (int i = 0; i < seconds; ++i) {
        int err = -1;
        actions.push_back(quiet_second(f.q, w, completions, err));
        EXPECT_EQ(err, 0);
    }
    return actions;
}

int count(const std::vector<QuietAction>& v, QuietAction a) { return int(std::count(v.begin(), v.end(), a)); }

TEST(QuietWatch, AnIdleConnectionIsProbedEveryFiveQuietSeconds) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    QuietWatch w;
    auto a = quiet_seconds(f, w, 4, 0);
    EXPECT_EQ(count(a, QuietAction::None), 4);
    EXPECT_TRUE(f.poster.posted.empty());
    a = quiet_seconds(f, w, 1, 0);
    ASSERT_EQ(a.back(), QuietAction::Probe);
    ASSERT_EQ(f.poster.posted.size(), 1u);
    EXPECT_EQ(f.poster.posted[0].opcode, IBV_WR_RDMA_WRITE);
    EXPECT_TRUE(f.poster.posted[0].signaled);
    // The peer's adapter answers: progress, and the next probe comes 5
    // quiet seconds later.
    f.complete_signaled();
    a = quiet_seconds(f, w, 5, 1);
    EXPECT_EQ(count(a, QuietAction::Probe), 1);
    EXPECT_EQ(a.back(), QuietAction::Probe);
    EXPECT_EQ(count(a, QuietAction::End), 0);
}

// What vm.iser-faults caught now and then: the link went down under a busy
// session, and a signalled send posted just before got neither an
// acknowledgement nor an error (rxe resends it for ever with a retry count
// of 7). The probe alone never ends such a connection, since it waits for
// the outstanding work; the watch reaps its CQ after 5 s and gives up
// after 15.
TEST(QuietWatch, WorkWithNoCompletionIsReapedThenEnded) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 16});
    f.push_sends(20);
    ASSERT_EQ(f.q.flush(), 0);
    ASSERT_EQ(f.poster.signaled_ids().size(), 1u);  // the 16th: 4 unsignalled after it
    QuietWatch w;
    std::vector<QuietAction> a = quiet_seconds(f, w, 60, 7);
    // The first quiet second covers the unsignalled tail; no probe ever,
    // since work is outstanding: the old policy did nothing else, for ever.
    ASSERT_EQ(f.poster.posted.size(), 21u);
    EXPECT_EQ(f.poster.signaled_ids().size(), 2u);
    EXPECT_EQ(count(a, QuietAction::Probe), 0);
    EXPECT_EQ(f.q.probe(), 0);
    EXPECT_EQ(f.poster.posted.size(), 21u);
    ASSERT_EQ(a.size(), 60u);
    EXPECT_EQ(a[4], QuietAction::Reap);
    EXPECT_EQ(count(a, QuietAction::Reap), 1);
    EXPECT_EQ(a[14], QuietAction::End);
    for (int i = 0; i < 14; ++i) EXPECT_NE(a[size_t(i)], QuietAction::End) << i;
    EXPECT_EQ(w.stalled_seconds(), 60u);
}

TEST(QuietWatch, AnyCompletionIsProgressAndRestartsTheCount) {
    Fixture f(SendConfig{.depth = 256, .signal_every = 1});
    f.push_sends(1);
    ASSERT_EQ(f.q.flush(), 0);
    QuietWatch w;
    uint64_t completions = 0;
    // A slow but live peer: one completion (e.g. a receive) every 10 s
    // while the send stays outstanding: reaped now and then, never ended.
    for (int s = 0; s < 100; ++s) {
        if (s % 10 == 0) ++completions;
        int err = 0;
        EXPECT_NE(quiet_second(f.q, w, completions, err), QuietAction::End) << s;
    }
    EXPECT_LE(w.stalled_seconds(), 10u);
}

TEST(QuietWatch, QueuedButUnpostedWorkCountsAsOutstanding) {
    QuietWatch w({.probe_every = 5, .reap_after = 2, .end_after = 3});
    EXPECT_EQ(w.tick(0, 1), QuietAction::None);
    EXPECT_EQ(w.tick(0, 1), QuietAction::Reap);
    EXPECT_EQ(w.tick(0, 1), QuietAction::End);
    // Nothing outstanding any more: an idle connection again.
    EXPECT_EQ(w.tick(0, 0), QuietAction::None);
    EXPECT_EQ(w.stalled_seconds(), 0u);
}

TEST(RdmaSendQueue, RdmaReadsAreAlwaysSignalled) {
    Fixture f(SendConfig{.depth = 64, .signal_every = 16});
    ibv_sge sge{0x2000, 4096, 9};
    ASSERT_TRUE(f.q.push({WrKind::RdmaRead, {&sge, 1}, 0xabc000, 0x55, 1}));
    ASSERT_EQ(f.q.flush(), 0);
    ASSERT_EQ(f.poster.posted.size(), 1u);
    EXPECT_TRUE(f.poster.posted[0].signaled);
    EXPECT_EQ(f.poster.posted[0].opcode, IBV_WR_RDMA_READ);
}

TEST(RdmaSendQueue, NeverFillsTheQueueWithoutASignalledSendInFlight) {
    // Without completions, a queue of 32 accepts 32 requests and the newest
    // signalled one is always within reach: completing it frees room.
    Fixture f(SendConfig{.depth = 32, .signal_every = 1000});
    int pushed = 0;
    for (int pass = 0; pass < 10 && f.q.has_room(); ++pass) {
        for (int i = 0; i < 5 && f.q.has_room(); ++i, ++pushed) f.push_sends(1, uint64_t(pushed) + 1);
        ASSERT_EQ(f.q.flush(), 0);
    }
    EXPECT_EQ(pushed, 32);
    EXPECT_FALSE(f.q.has_room());
    auto ids = f.poster.signaled_ids();
    ASSERT_FALSE(ids.empty());
    ASSERT_TRUE(f.q.on_completion(ids.back(), 0, f.rel()));
    EXPECT_GE(f.q.config().depth - f.q.in_flight(), 16u);
}

TEST(RdmaSendQueue, RequestsGoRoundTheRingWithNothingLeftFromEarlierOnes) {
    // Work requests are built in place, in a ring larger than the depth
    // (a power of two): requests of every kind go round it several times,
    // and each post carries what its own push said, never what an earlier
    // request at the same place left (a signal, inline data, an address).
    Fixture f(SendConfig{.depth = 24, .signal_every = 4, .max_inline = 100});
    const ibv_sge small{0x1000, 76, 1}, big{0x2000, 4096, 2};
    uint64_t token = 1;
    for (int pass = 0; pass < 20; ++pass) {
        const size_t first = f.poster.posted.size();
        const uint64_t va = 0xa000 + uint64_t(pass) * 0x1000;
        ASSERT_TRUE(f.q.push({WrKind::RdmaRead, {&big, 1}, va, uint32_t(pass), token++}));
        ASSERT_TRUE(f.q.push({WrKind::RdmaWrite, {&big, 1}, va + 1, uint32_t(pass) + 1, token++}));
        ASSERT_TRUE(f.q.push({WrKind::Send, {&small, 1}, 0, 0, token++}));
        ASSERT_EQ(f.q.flush(), 0);
        ASSERT_EQ(f.poster.posted.size(), first + 3);
        const Posted* p = &f.poster.posted[first];
        for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(p[i].wr_id, first + i);
        EXPECT_EQ(p[0].opcode, IBV_WR_RDMA_READ);
        EXPECT_TRUE(p[0].signaled);  // its data is awaited
        EXPECT_EQ(p[0].remote_addr, va);
        EXPECT_EQ(p[0].rkey, uint32_t(pass));
        EXPECT_EQ(p[1].opcode, IBV_WR_RDMA_WRITE);
        EXPECT_FALSE(p[1].signaled);
        EXPECT_FALSE(p[1].inline_data);
        EXPECT_EQ(p[1].remote_addr, va + 1);
        EXPECT_EQ(p[1].rkey, uint32_t(pass) + 1);
        EXPECT_EQ(p[2].opcode, IBV_WR_SEND);
        EXPECT_FALSE(p[2].signaled);
        EXPECT_TRUE(p[2].inline_data);
        EXPECT_EQ(p[2].num_sge, 1);
        EXPECT_EQ(p[2].addr, small.addr);
        f.complete_signaled();
    }
    // Every request but the last pass's unsignalled two was released, in order.
    ASSERT_EQ(f.released.size(), 58u);
    for (size_t i = 0; i < f.released.size(); ++i) EXPECT_EQ(f.released[i].first, i + 1);
    ASSERT_TRUE(f.q.needs_cover());
    ASSERT_EQ(f.q.cover(), 0);
    const Posted& c = f.poster.posted.back();
    EXPECT_EQ(c.opcode, IBV_WR_RDMA_WRITE);
    EXPECT_EQ(c.num_sge, 0);
    EXPECT_EQ(c.remote_addr, 0u);
    EXPECT_EQ(c.rkey, 0u);
    EXPECT_TRUE(c.signaled);
    f.complete_signaled();
    EXPECT_EQ(f.released.size(), 61u);
    EXPECT_EQ(f.q.in_flight(), 0u);
}

TEST(RdmaSendQueue, BatchingOffPostsEachRequestAlone) {
    Fixture f(SendConfig{.depth = 64, .signal_every = 16, .batch = false});
    f.push_sends(10);
    EXPECT_EQ(f.poster.calls, 10);
    EXPECT_EQ(f.q.flush(), 0);
    EXPECT_EQ(f.poster.calls, 10);
    EXPECT_DOUBLE_EQ(f.counters.wrs_per_post(), 1.0);
}

TEST(RdmaSendQueue, SignalEveryOneSignalsEverything) {
    Fixture f(SendConfig{.depth = 64, .signal_every = 1});
    f.push_sends(7);
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_EQ(f.poster.signaled_ids().size(), 7u);
}

TEST(RdmaSendQueue, SmallSendsGoInline) {
    Fixture f(SendConfig{.depth = 64, .signal_every = 16, .max_inline = 512});
    ibv_sge small{0x1000, 76, 1}, big{0x1000, 8192, 1};
    ASSERT_TRUE(f.q.push({WrKind::Send, {&small, 1}, 0, 0, 1}));
    ASSERT_TRUE(f.q.push({WrKind::Send, {&big, 1}, 0, 0, 2}));
    ASSERT_EQ(f.q.flush(), 0);
    EXPECT_TRUE(f.poster.posted[0].inline_data);
    EXPECT_FALSE(f.poster.posted[1].inline_data);
}

TEST(RdmaSendQueue, ARefusedPostIsStickyAndCancelReleasesEverything) {
    Fixture f(SendConfig{.depth = 64, .signal_every = 4});
    f.poster.refuse_after = 3;
    f.push_sends(6, 10);
    EXPECT_EQ(f.q.flush(), ENOMEM);
    EXPECT_EQ(f.q.in_flight(), 3u);
    EXPECT_EQ(f.q.queued(), 3u);
    EXPECT_EQ(f.q.flush(), ENOMEM);
    f.q.cancel_all(-ECANCELED, f.rel());
    ASSERT_EQ(f.released.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(f.released[i], std::make_pair(uint64_t(10 + i), -ECANCELED));
}

TEST(RdmaSendQueue, AnErrorCompletionFailsOnlyItsRequest) {
    Fixture f(SendConfig{.depth = 64, .signal_every = 1});
    f.push_sends(3, 1);
    ASSERT_EQ(f.q.flush(), 0);
    ASSERT_TRUE(f.q.on_completion(0, 0, f.rel()));
    ASSERT_TRUE(f.q.on_completion(1, -EIO, f.rel()));
    EXPECT_EQ(f.released[1], std::make_pair(uint64_t(2), -EIO));
    EXPECT_EQ(f.q.in_flight(), 1u);
}

class RecordingRecvPoster : public RecvPoster {
public:
    int post(ibv_recv_wr* first, ibv_recv_wr** /*bad*/) override {
        ++calls;
        for (ibv_recv_wr* w = first; w; w = w->next) {
            ids.push_back(w->wr_id);
            sges.emplace_back(w->sg_list, w->sg_list + w->num_sge);
        }
        return 0;
    }
    int calls = 0;
    std::vector<uint64_t> ids;
    std::vector<std::vector<ibv_sge>> sges;  // copied at the post, as the device does
};

// A split receive (header slot, then a data buffer) keeps both segments,
// in order, next to one-segment receives of the same batch.
TEST(RdmaRecvQueue, SplitReceivesKeepTheirTwoSegments) {
    RecordingRecvPoster p;
    ConnectionCounters c;
    RecvQueue q(p, 4, c);
    ibv_sge split[2] = {{0x1000, 76, 1}, {0x8000, 8448, 2}};
    ASSERT_EQ(q.repost(0, split, 2), 0);
    ASSERT_EQ(q.repost(1, 0x2000, 8524, 3), 0);
    ASSERT_EQ(q.repost(2, split, 2), 0);
    ASSERT_EQ(q.flush(), 0);
    ASSERT_EQ(p.sges.size(), 3u);
    ASSERT_EQ(p.sges[0].size(), 2u);
    EXPECT_EQ(p.sges[0][0].addr, 0x1000u);
    EXPECT_EQ(p.sges[0][0].length, 76u);
    EXPECT_EQ(p.sges[0][1].addr, 0x8000u);
    EXPECT_EQ(p.sges[0][1].lkey, 2u);
    ASSERT_EQ(p.sges[1].size(), 1u);
    EXPECT_EQ(p.sges[1][0].length, 8524u);
    ASSERT_EQ(p.sges[2].size(), 2u);
    EXPECT_EQ(p.sges[2][1].length, 8448u);
}

TEST(RdmaRecvQueue, RepostsOfAPassLeaveInOneCall) {
    RecordingRecvPoster p;
    ConnectionCounters c;
    RecvQueue q(p, 64, c);
    for (uint32_t i = 0; i < 20; ++i) ASSERT_EQ(q.repost(i, 0x1000 + i * 8192, 8192, 3), 0);
    EXPECT_EQ(p.calls, 0);
    ASSERT_EQ(q.flush(), 0);
    EXPECT_EQ(p.calls, 1);
    ASSERT_EQ(p.ids.size(), 20u);
    EXPECT_TRUE(is_recv_wr(p.ids[5]));
    EXPECT_EQ(recv_slot_of(p.ids[5]), 5u);
    EXPECT_EQ(c[Counter::RecvRequests], 20u);
    EXPECT_EQ(c[Counter::RecvPostCalls], 1u);
}

TEST(SpinBudget, StartsAtTheBoundAndAHitRestoresIt) {
    SpinBudget b(16, true);
    EXPECT_EQ(b.next_us(), 16u);
    b.miss();
    EXPECT_EQ(b.next_us(), 8u);
    b.hit();
    EXPECT_EQ(b.next_us(), 16u);
}

TEST(SpinBudget, MissesHalveItToNothingThenOnlyRareShortProbesRemain) {
    SpinBudget b(16, true);
    for (int i = 0; i < 5; ++i) b.miss();
    EXPECT_EQ(b.current_us(), 0u);
    uint32_t spun = 0, probes = 0;
    for (uint32_t i = 0; i < 10 * SpinBudget::kProbeEvery; ++i)
        if (uint32_t us = b.next_us()) {
            spun += us;
            ++probes;
            b.miss();
        }
    EXPECT_EQ(probes, 10u);
    EXPECT_EQ(spun, 10u * 2u);  // an eighth of the bound each
}

TEST(SpinBudget, AProbeThatHitsBringsTheFullSpinBack) {
    SpinBudget b(16, true);
    for (int i = 0; i < 5; ++i) b.miss();
    uint32_t us = 0;
    while ((us = b.next_us()) == 0) {
    }
    EXPECT_EQ(us, 2u);
    b.hit();
    EXPECT_EQ(b.next_us(), 16u);
}

TEST(SpinBudget, ZeroNeverSpinsAndFixedIgnoresOutcomes) {
    SpinBudget none(0, true);
    for (uint32_t i = 0; i < 3 * SpinBudget::kProbeEvery; ++i) EXPECT_EQ(none.next_us(), 0u);
    SpinBudget fixed(10, false);
    for (int i = 0; i < 8; ++i) fixed.miss();
    EXPECT_EQ(fixed.next_us(), 10u);
}

TEST(IserHeader, RoundTripsWithBothStags) {
    IserHeader h;
    h.write_stag_valid = true;
    h.write_stag = 0x11223344;
    h.write_va = 0x0102030405060708;
    h.read_stag_valid = true;
    h.read_stag = 0x55667788;
    h.read_va = 0x1112131415161718;
    std::array<uint8_t, kIserHeaderLength> b{};
    h.encode(b);
    EXPECT_EQ(b[0], 0x1c);  // Control (1), W and R
    EXPECT_EQ(b[4], 0x11);
    EXPECT_EQ(b[27], 0x18);
    std::string err;
    auto d = IserHeader::decode(b, err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->write_stag, h.write_stag);
    EXPECT_EQ(d->write_va, h.write_va);
    EXPECT_EQ(d->read_stag, h.read_stag);
    EXPECT_EQ(d->read_va, h.read_va);
}

TEST(IserHeader, InvalidStagsAreZeroed) {
    IserHeader h;
    h.read_stag = 5;  // not valid: not sent
    std::array<uint8_t, kIserHeaderLength> b{};
    h.encode(b);
    EXPECT_EQ(b[0], 0x10);
    std::string err;
    auto d = IserHeader::decode(b, err);
    ASSERT_TRUE(d);
    EXPECT_FALSE(d->read_stag_valid);
    EXPECT_EQ(d->read_stag, 0u);
}

TEST(IserHeader, RejectsShortMessagesAndHello) {
    std::array<uint8_t, kIserHeaderLength> b{};
    std::string err;
    EXPECT_FALSE(IserHeader::decode(std::span<const uint8_t>(b).first(27), err));
    EXPECT_NE(err.find("shorter"), std::string::npos);
    b[0] = 0x20;
    EXPECT_FALSE(IserHeader::decode(b, err));
    EXPECT_NE(err.find("Hello"), std::string::npos);
    b[0] = 0xf0;
    EXPECT_FALSE(IserHeader::decode(b, err));
}

TEST(IserCmRequest, FlagsRoundTripAndDefaultWhenAbsent) {
    std::array<uint8_t, kIserCmPrivateLength> b{};
    IserCmRequest{true, false}.encode(b);
    EXPECT_EQ(b[0], 0x80);
    auto r = IserCmRequest::decode(b);
    EXPECT_TRUE(r.zbva_not_supported);
    EXPECT_FALSE(r.send_with_invalidate_not_supported);
    auto none = IserCmRequest::decode({});
    EXPECT_FALSE(none.zbva_not_supported);
}

}  // namespace
}  // namespace rbio::iser::rdma
