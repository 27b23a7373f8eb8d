#include "rbio/iser/counters.hpp"

namespace rbio::iser {

const char* counter_name(Counter c) {
    switch (c) {
        case Counter::PdusIn: return "pdus_in";
        case Counter::BytesIn: return "bytes_in";
        case Counter::RecvCalls: return "recv_calls";
        case Counter::PdusOut: return "pdus_out";
        case Counter::BytesOut: return "bytes_out";
        case Counter::SendCalls: return "send_calls";
        case Counter::WouldBlock: return "would_block";
        case Counter::EventCtl: return "epoll_ctl_calls";
        case Counter::WorkRequests: return "work_requests";
        case Counter::PostCalls: return "post_calls";
        case Counter::RecvRequests: return "recv_requests";
        case Counter::RecvPostCalls: return "recv_post_calls";
        case Counter::Signaled: return "signaled";
        case Counter::Completions: return "completions";
        case Counter::PollCalls: return "poll_calls";
        case Counter::ChannelWakeups: return "channel_wakeups";
        case Counter::RdmaReads: return "rdma_reads";
        case Counter::SpinHits: return "spin_hits";
        case Counter::SpinMisses: return "spin_misses";
        case Counter::Lent: return "lent";
        case Counter::LendRefused: return "lend_refused";
        case Counter::RxWaitCalls: return "rx_wait_calls";
        case Counter::RxWaitExpired: return "rx_wait_expired";
        case Counter::DirectCommands: return "direct_commands";
        case Counter::PassesYielded: return "passes_yielded";
        case Counter::Count_: break;
    }
    return "unknown";
}

}  // namespace rbio::iser
