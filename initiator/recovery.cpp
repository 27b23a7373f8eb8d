// Keep-alive and recovery: NOP-Out pings (RFC 7143 §11.18) and session
// reinstatement at ErrorRecoveryLevel 0 (§6.3.5): a new connection, a login
// with the same ISID and TSIH 0, and every command without status re-sent.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "session_impl.hpp"

namespace rbio::initiator {

using iser::BhsView;
using iser::Opcode;

namespace {

constexpr std::chrono::milliseconds kFirstBackoff{250};
constexpr std::chrono::milliseconds kMaxBackoff{4000};

long long ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace

// ---------------------------------------------------------------- pings

Clock::time_point Session::Impl::ping_wake(Clock::time_point until) const {
    if (!full_feature_ || options_.noop_out_interval.count() <= 0) return until;
    if (ping_itt_ != kNoTag) return std::min(until, ping_deadline_);
    return std::min(until, last_rx_ + options_.noop_out_interval);
}

void Session::Impl::check_ping(Clock::time_point now) {
    if (!full_feature_ || options_.noop_out_interval.count() <= 0) return;
    if (ping_itt_ != kNoTag) {
        if (now >= ping_deadline_)
            fail(ErrorKind::Timeout, "target " + portal_.to_string() + ": NOP-Out ping unanswered for " +
                                         std::to_string(options_.noop_out_timeout.count()) + " ms");
        return;
    }
    if (now - last_rx_ < options_.noop_out_interval) return;
    // Immediate (I bit) so a closed CmdSN window cannot hold it back; it
    // takes no CmdSN of its own.
    ping_itt_ = allocate_itt();
    ping_deadline_ = now + options_.noop_out_timeout;
    iser::Bhs b;
    b.set_opcode(Opcode::NopOut, true)
        .set_final(true)
        .set_itt(ping_itt_)
        .set_ttt(kNoTag)
        .set_cmd_sn(cmd_sn_)
        .set_exp_stat_sn(exp_stat_sn_);
    queue_pdu(b, {}, kNoTag);
    stats_.pings_sent++;
    RBIO_LOG(Trace, "NOP-Out ping to " << portal_.to_string() << " after " << ms(now - last_rx_)
                                       << " ms of silence");
}

void Session::Impl::handle_ping_answer(BhsView h) {
    if (h.itt() != ping_itt_)
        protocol_error("NOP-In answering ITT " + std::to_string(h.itt()) +
                       ", but no such ping is outstanding");
    if (h.ttt() != kNoTag) protocol_error("NOP-In answering a ping carries a Target Transfer Tag");
    // An answer is a response: it advances StatSN (RFC 7143 §11.19.5).
    update_window(h);
    check_stat_sn(h, "NOP-In");
    ping_itt_ = kNoTag;
}

// ---------------------------------------------------------------- recovery

bool Session::Impl::may_recover() const {
    return reconnectable_ && !options_.discovery && options_.replacement_timeout.count() > 0 && full_feature_;
}

void Session::Impl::connection_failed(const InitiatorError& error) {
    const std::string why = error.what();
    const Clock::time_point now = Clock::now();
    // Dropping queued PDUs releases the buffers they point into: commands
    // that already have their status complete here.
    // Slots (iSER bounce slots) go with the connection's registrations.
    for (auto& [itt, t] : tasks_) t.slot = Connection::kNoSlot;
    conn_.reset();
    dataout_.clear();
    full_feature_ = false;
    ping_itt_ = kNoTag;
    tmfs_.clear();  // the new session starts without them; their commands are re-sent
    awaiting_.reset();
    captured_.reset();

    // Every command without status goes back to the queue in submission
    // order: the target may or may not have executed it, and at this level
    // only re-sending it tells. Completed ones were acknowledged and stay done.
    std::vector<std::pair<uint64_t, uint32_t>> again;
    for (auto& [itt, t] : tasks_) {
        if (t.outcome) continue;
        if (t.sent && ++t.resends > options_.command_retries)
            fail(error.kind(), "target " + portal_.to_string() + ": command ITT " + std::to_string(itt) +
                                   " (opcode " + std::to_string(t.cmd.cdb[0]) + ") failed " +
                                   std::to_string(t.resends) + " times; last: " + why);
        t.restart();
        again.emplace_back(t.order, itt);
    }
    std::sort(again.begin(), again.end());
    pending_.clear();
    for (const auto& [order, itt] : again) pending_.push_back(itt);

    down_ = true;
    down_since_ = now;
    next_attempt_ = now;
    backoff_ = kFirstBackoff;
    down_reason_ = why;
    last_attempt_error_.clear();
    RBIO_LOG(Warning, "session to " << options_.target_name << " at " << portal_.to_string()
                                    << " failed: " << why << "; reinstating it (" << again.size()
                                    << " commands to re-send, replacement timeout "
                                    << options_.replacement_timeout.count() << " ms)");
}

void Session::Impl::recover(Clock::time_point until) {
    Clock::time_point now = Clock::now();
    const Clock::time_point give_up = down_since_ + options_.replacement_timeout;
    if (now >= give_up)
        fail(ErrorKind::ConnectionLost,
             "session to " + options_.target_name + " at " + portal_.to_string() +
                 " not reinstated within the replacement timeout of " +
                 std::to_string(options_.replacement_timeout.count()) + " ms (" +
                 std::to_string(stats_.reconnect_attempts) + " attempts so far; failure: " + down_reason_ +
                 (last_attempt_error_.empty() ? "" : "; last attempt: " + last_attempt_error_) + "); " +
                 std::to_string(tasks_.size()) + " commands failed");
    if (now < next_attempt_) {
        // Sleep until the attempt is due, the caller's limit, or a wake-up.
        auto wait = std::min({until, next_attempt_, give_up}) - now;
        int timeout_ms = int(std::clamp<long long>(ms(wait) + 1, 0, 60000));
        pollfd pfd{options_.wake_fd, POLLIN, 0};
        if (::poll(&pfd, options_.wake_fd >= 0 ? 1 : 0, timeout_ms) < 0 && errno != EINTR)
            fail(ErrorKind::ConnectionLost, std::string("poll: ") + std::strerror(errno));
        stats_.poll_calls++;
        return;
    }
    stats_.reconnect_attempts++;
    RBIO_LOG(Info, "reconnect attempt " << stats_.reconnect_attempts << " to " << portal_.to_string() << " ("
                                        << ms(now - down_since_) << " ms after the failure)");
    try {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - now);
        // TSIH 0 and the same ISID: a new session that ends the old one.
        connect_and_login(home_portal_, std::min(options_.connect_timeout, left));
    } catch (const InitiatorError& e) {
        // Any login failure may be the target still starting (no target or
        // account configured yet): keep trying until the replacement timeout.
        last_attempt_error_ = e.what();
        conn_.reset();
        full_feature_ = false;
        awaiting_.reset();
        captured_.reset();
        next_attempt_ = Clock::now() + backoff_;
        backoff_ = std::min(backoff_ * 2, kMaxBackoff);
        RBIO_LOG(Warning, "reconnect attempt " << stats_.reconnect_attempts << " to " << portal_.to_string()
                                               << " failed: " << e.what());
        return;
    }
    down_ = false;
    stats_.reinstatements++;
    now = Clock::now();
    for (uint32_t itt : pending_) {
        Task& t = tasks_.at(itt);
        t.deadline = now + t.cmd.timeout;
        if (t.resends) stats_.commands_retried++;
    }
    RBIO_LOG(Warning, "session to " << options_.target_name << " at " << portal_.to_string()
                                    << " reinstated after " << ms(now - down_since_) << " ms (TSIH " << tsih_
                                    << "); re-sending " << pending_.size() << " commands");
}

}  // namespace rbio::initiator
