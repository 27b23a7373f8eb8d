#pragma once
// Receive moderation for a TCP connection: how many bytes its socket should
// hold before it wakes tgtd (SO_RCVLOWAT), learned from what each pass got.
//
// An initiator that sends one PDU per system call (libiscsi, the kernel's
// iSCSI initiator) wakes a target that keeps up once per PDU: a wake-up, an
// epoll_wait, a recv and a sendmsg for about one command. The seed paper's
// cure is the NIC's: interrupt moderation, waiting for a few requests before
// taking any. Waiting has to be safe at every depth, so the level (requests
// to wait for) only rises to what a pass has seen arrive at once: requests
// queued in one socket at one time were all in flight at the initiator
// together, so an initiator that keeps its depth always sends that many
// again. One whose depth then falls leaves the socket short; a timer ends
// that wait, half of wait_us to all of it after the last pass that took
// requests or answered some, and the level falls to what had come. (The
// timer is set again only when the one running has less than half of the
// wait to go: passes close together share one system call.) A
// connection at one request in flight never moderates: its passes never see
// more than one. Nor does one whose requests already come many per receive
// (an initiator that batches its sends, such as rbio's): waiting would only
// put it in lockstep. So waiting starts only where passes usually see few
// requests yet one saw many.
#include <cstddef>
#include <cstdint>

namespace rbio::iser {

struct RxModerationConfig {
    // The most requests a socket waits for; 0 or 1: wake on every byte.
    uint32_t max_pdus = 16;
    // SO_RCVLOWAT bound (the kernel halves the receive buffer's at most).
    uint32_t max_bytes = 64 * 1024;
    // A pass must see this many requests at once before any waiting starts:
    // below it, waiting costs pipelining and saves little.
    uint32_t min_pdus = 8;
    // The longest wait, in microseconds; a wait lasts half of it at least.
    uint32_t wait_us = 300;
};

class RxModeration {
public:
    // Until passes have shown otherwise, requests are taken to come in
    // batches: a session's first burst starts no wait.
    explicit RxModeration(RxModerationConfig c = {}) : config_(c), usual_x8_(c.min_pdus * 4) {}

    bool enabled() const { return config_.max_pdus > 1; }

    // A request of `bytes` (header, AHS, data, padding, digests) arrived;
    // not a Data-Out, which belongs to a command already counted.
    void on_pdu(size_t bytes) {
        ++pdus_;
        if (bytes < smallest_) smallest_ = bytes;
    }

    // The end of a pass. `timer_fired`: the pass ran because a wait outlasted
    // the timer. `full_feature`: the session is in full feature phase (before
    // it the initiator sends one request at a time, and waits for each
    // answer). `awaited`: bytes of the PDU being received that are still to
    // come (0 at a PDU boundary); SIZE_MAX when unknown (part of a header is
    // in). The initiator sends that rest without waiting for anything, so
    // the wait is for it plus the level's other requests. `answered`: the
    // pass sent responses; the initiator sends more only once it has them,
    // so a wait is timed from the last pass that took requests or answered
    // (a backing store's completions come in passes of their own). Returns
    // what the socket and the timer need.
    struct Step {
        bool set_lowat = false;  // SO_RCVLOWAT := lowat()
        bool arm_timer = false;  // a wait above one request starts now
    };
    Step end_pass(bool timer_fired, bool full_feature, size_t awaited, bool answered);

    // A wait starts at `now_us` (a Step's arm_timer). True when the timer
    // must be set, to deadline_us() (wait_us from now); false when the one
    // already running has half of wait_us or more to go. So a wait lasts
    // from half of wait_us to all of it after the last pass that took
    // requests or answered, and a pass that takes requests and the pass
    // that answers them (a backing store's completions) share one
    // timerfd_settime when they come close together.
    bool rearm_due(uint64_t now_us) {
        if (deadline_us_ >= now_us + config_.wait_us / 2) return false;
        deadline_us_ = now_us + config_.wait_us;
        return true;
    }
    // When the timer, as last set, fires (CLOCK_MONOTONIC, microseconds).
    uint64_t deadline_us() const { return deadline_us_; }

    // Moderation off for good (a socket call it needs failed): lowat() 1.
    void disable() {
        config_.max_pdus = 1;
        level_ = 1;
        lowat_ = 1;
    }

    // Bytes the socket holds before it wakes tgtd; 1 when not moderating.
    uint32_t lowat() const { return lowat_; }
    // Requests waited for now.
    uint32_t level() const { return level_; }

private:
    uint32_t lowat_for(uint32_t level, size_t smallest, size_t awaited) const;

    RxModerationConfig config_;
    uint32_t level_ = 1;
    uint32_t lowat_ = 1;
    // Requests per pass, averaged over the passes that took any while not
    // waiting (x8, a moving average of 1/8 weight per pass).
    uint32_t usual_x8_;
    uint32_t pdus_ = 0;
    size_t smallest_ = SIZE_MAX;
    size_t pdu_bytes_ = 48;  // smallest PDU of the last pass with any
    uint64_t deadline_us_ = 0;
};

}  // namespace rbio::iser
