#include "rbio/iser/rdma/completion_poller.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace rbio::iser::rdma {

namespace {
// Acknowledging takes a lock inside libibverbs: do it in bulk.
constexpr unsigned kAckEvery = 64;
}  // namespace

CompletionPoller::CompletionPoller(ibv_context* context, int entries, const PollConfig& config,
                                   ConnectionCounters& counters)
    : config_(config), budget_(config.spin_us, config.adaptive), counters_(counters) {
    config_.batch = std::clamp(config_.batch, 1u, kMaxBatch);
    channel_.reset(ibv_create_comp_channel(context));
    if (!channel_) throw_rdma("ibv_create_comp_channel");
    int flags = fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0)
        throw_rdma("making the completion channel non-blocking");
    cq_.reset(ibv_create_cq(context, entries, nullptr, channel_.get(), 0));
    if (!cq_) throw_rdma("ibv_create_cq of " + std::to_string(entries) + " entries");
    arm();
}

CompletionPoller::~CompletionPoller() {
    // ibv_destroy_cq waits for every event to be acknowledged.
    if (cq_ && unacked_ > 0) ibv_ack_cq_events(cq_.get(), unacked_);
}

// An armed CQ raises one event and is then disarmed, and arm() does nothing
// while armed_: so the channel holds at most one event, and only while
// armed_. One read() takes it; a loop until EAGAIN would cost a second,
// failing read() per wake-up, and a pass run without the fd being readable
// would pay one for nothing.
bool CompletionPoller::on_channel_event() {
    if (!armed_) return false;
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &ctx) != 0) return false;
    armed_ = false;
    counters_[Counter::ChannelWakeups] += 1;
    if (++unacked_ >= kAckEvery) {
        ibv_ack_cq_events(cq_.get(), unacked_);
        unacked_ = 0;
    }
    return true;
}

int CompletionPoller::poll_once() {
    int n = ibv_poll_cq(cq_.get(), int(config_.batch), wcs_.data());
    counters_[Counter::PollCalls] += 1;
    if (n < 0) throw_rdma("ibv_poll_cq", EIO);
    counters_[Counter::Completions] += uint64_t(n);
    return n;
}

void CompletionPoller::arm() {
    if (armed_) return;
    if (ibv_req_notify_cq(cq_.get(), 0) != 0) throw_rdma("ibv_req_notify_cq");
    armed_ = true;
}

}  // namespace rbio::iser::rdma
