#pragma once
// Per-connection counters of the transport, and process-wide totals.
//
// A connection is served by one event-loop thread, so its counters are plain
// integers bumped without atomics on the hot path. Totals are shared by all
// connections (possibly on several threads) and take relaxed atomic adds, a
// few per connection per publish, never per PDU.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace rbio::iser {

enum class Counter : uint8_t {
    PdusIn,      // complete PDUs yielded by the receive buffer
    BytesIn,     // bytes received
    RecvCalls,   // read/recv system calls
    PdusOut,     // PDUs whose every byte was written
    BytesOut,    // bytes written
    SendCalls,   // writev/sendmsg calls, including those that would block
    WouldBlock,  // flushes that left bytes queued because the socket was full
    EventCtl,    // epoll_ctl calls the transport made (arming EPOLLOUT)
    // RDMA backend: what doorbell batching, selective signalling, batched
    // reaping and the adaptive completion channel exist to lower or raise.
    WorkRequests,    // send-queue work requests posted (SEND, RDMA WRITE/READ)
    PostCalls,       // ibv_post_send calls
    RecvRequests,    // receive work requests posted
    RecvPostCalls,   // ibv_post_recv / ibv_post_srq_recv calls
    Signaled,        // signalled send-queue work requests
    Completions,     // work completions reaped (send and receive)
    PollCalls,       // ibv_poll_cq calls
    ChannelWakeups,  // completion-channel events taken (ibv_get_cq_event)
    RdmaReads,       // RDMA READs posted: one per R2T a write's data did not avoid
    SpinHits,        // spins on an empty CQ that found a completion (no wake-up)
    SpinMisses,      // spins that found nothing and armed the channel after all
    // TCP, write_in_place: a write's data buffer lent from the receive
    // buffer (executed without a copy), or asked for and refused (not all
    // buffered, or no receive chunk left free: the data is copied).
    // iSER: a command whose immediate data became its data buffer in place
    // (its receive's block), or whose block was refused (smaller than the
    // command, iser_receive_kib, or no fresh one): that data is copied.
    Lent,
    LendRefused,
    // TCP, receive moderation (rbio/iser/rx_moderation.hpp): its system
    // calls (SO_RCVLOWAT changes, the wait timer's arming and reading), and
    // waits the timer ended.
    RxWaitCalls,
    RxWaitExpired,
    // iSER, direct_commands: READs and WRITEs that went past tgt's
    // byte-stream reader and writer (tgt-backend/glue/direct_commands.h).
    DirectCommands,
    // iSER: passes that stopped at iser_pass_completions with the peer
    // still busy, and gave the event loop to the other connections.
    PassesYielded,
    Count_
};

inline constexpr size_t kCounterCount = size_t(Counter::Count_);

// e.g. "pdus_in", for logs and stats output.
const char* counter_name(Counter c);

struct ConnectionCounters {
    std::array<uint64_t, kCounterCount> values{};

    uint64_t& operator[](Counter c) { return values[size_t(c)]; }
    uint64_t operator[](Counter c) const { return values[size_t(c)]; }

    // The two numbers the batching and coalescing exist to raise.
    double pdus_per_recv() const { return ratio(Counter::PdusIn, Counter::RecvCalls); }
    double pdus_per_send() const { return ratio(Counter::PdusOut, Counter::SendCalls); }
    double wrs_per_post() const { return ratio(Counter::WorkRequests, Counter::PostCalls); }
    double completions_per_poll() const { return ratio(Counter::Completions, Counter::PollCalls); }

    ConnectionCounters& operator+=(const ConnectionCounters& o) {
        for (size_t i = 0; i < kCounterCount; ++i) values[i] += o.values[i];
        return *this;
    }
    ConnectionCounters& operator-=(const ConnectionCounters& o) {
        for (size_t i = 0; i < kCounterCount; ++i) values[i] -= o.values[i];
        return *this;
    }
    bool operator==(const ConnectionCounters&) const = default;

private:
    double ratio(Counter num, Counter den) const {
        return (*this)[den] == 0 ? 0.0 : double((*this)[num]) / double((*this)[den]);
    }
};

// Copies up to n values into out (the C ABIs' accessors); returns how many.
inline size_t copy_counters(const ConnectionCounters& c, uint64_t* out, size_t n) {
    const size_t k = n < kCounterCount ? n : kCounterCount;
    for (size_t i = 0; i < k; ++i) out[i] = c.values[i];
    return k;
}

// Sums over all connections; safe to add to and read from any thread.
class CounterTotals {
public:
    void add(const ConnectionCounters& c) {
        for (size_t i = 0; i < kCounterCount; ++i)
            values_[i].fetch_add(c.values[i], std::memory_order_relaxed);
    }
    // Each value is read on its own: a snapshot taken while connections
    // publish may mix before and after of one publish, which stats tolerate.
    ConnectionCounters snapshot() const {
        ConnectionCounters c;
        for (size_t i = 0; i < kCounterCount; ++i) c.values[i] = values_[i].load(std::memory_order_relaxed);
        return c;
    }

private:
    std::array<std::atomic<uint64_t>, kCounterCount> values_{};
};

// Adds what a connection counted since its last publish into the totals, so a
// connection may publish periodically and again at close without counting
// anything twice.
class CounterPublisher {
public:
    void publish(const ConnectionCounters& now, CounterTotals& totals) {
        ConnectionCounters delta = now;
        delta -= published_;
        totals.add(delta);
        published_ = now;
    }

private:
    ConnectionCounters published_;
};

}  // namespace rbio::iser
