// Task management (RFC 7143 §11.5, §11.6): ABORT TASK for a command past its
// timeout, LOGICAL UNIT RESET when the target cannot abort it (and as a
// library call), and their responses.
#include <algorithm>

#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "session_impl.hpp"

namespace rbio::initiator {

using iser::BhsView;
using iser::Opcode;

namespace {

// Function codes (RFC 7143 §11.5.1).
constexpr uint8_t kAbortTask = 1;
constexpr uint8_t kLogicalUnitReset = 5;

const char* function_name(uint8_t f) {
    switch (f) {
        case kAbortTask: return "ABORT TASK";
        case kLogicalUnitReset: return "LOGICAL UNIT RESET";
        default: return "task management function";
    }
}

void put32(iser::Bhs& b, size_t at, uint32_t v) {
    auto raw = b.raw();
    raw[at] = uint8_t(v >> 24);
    raw[at + 1] = uint8_t(v >> 16);
    raw[at + 2] = uint8_t(v >> 8);
    raw[at + 3] = uint8_t(v);
}

}  // namespace

std::string to_string(TmfResponse r) {
    switch (r) {
        case TmfResponse::Complete: return "function complete";
        case TmfResponse::NoSuchTask: return "task does not exist";
        case TmfResponse::NoSuchLun: return "LUN does not exist";
        case TmfResponse::TaskStillAllegiant: return "task still allegiant";
        case TmfResponse::ReassignmentNotSupported: return "task allegiance reassignment not supported";
        case TmfResponse::NotSupported: return "task management function not supported";
        case TmfResponse::AuthorizationFailed: return "function authorization failed";
        case TmfResponse::Rejected: return "function rejected";
    }
    return "response " + std::to_string(int(r));
}

void Session::Impl::send_tmf(uint8_t function, uint64_t lun, uint32_t ref_itt, uint32_t ref_cmd_sn,
                             std::chrono::milliseconds timeout, std::function<void(uint8_t)> done) {
    uint32_t itt = allocate_itt();
    // Immediate: a closed CmdSN window must not hold back the request that
    // is to unblock it; it takes no CmdSN of its own.
    iser::Bhs b;
    b.set_opcode(Opcode::TaskMgmtRequest, true)
        .set_flags(uint8_t(0x80 | function))
        .set_lun(encode_lun(lun))
        .set_itt(itt)
        .set_ttt(ref_itt)  // Referenced Task Tag
        .set_cmd_sn(cmd_sn_)
        .set_exp_stat_sn(exp_stat_sn_);
    put32(b, 32, ref_cmd_sn);  // RefCmdSN; ExpDataSN stays 0 (no data acknowledgement at level 0)
    tmfs_[itt] = Tmf{function, lun, ref_itt, Clock::now() + timeout, std::move(done)};
    queue_pdu(b, {}, kNoTag);
}

void Session::Impl::handle_tmf_response(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    auto it = tmfs_.find(h.itt());
    if (it == tmfs_.end())
        protocol_error("Task Management Function Response for ITT " + std::to_string(h.itt()) +
                       ", which names no request in flight");
    if (!pdu.data.empty()) protocol_error("Task Management Function Response with a data segment");
    update_window(h);
    check_stat_sn(h, "Task Management Function Response");
    uint8_t response = h.bytes()[2];
    Tmf tmf = std::move(it->second);
    tmfs_.erase(it);
    RBIO_LOG(Info, function_name(tmf.function)
                       << " (LUN " << tmf.lun << ") answered: " << to_string(TmfResponse(response)));
    tmf.done(response);
}

void Session::Impl::check_tmf_deadlines(Clock::time_point now) {
    for (const auto& [itt, tmf] : tmfs_)
        if (now >= tmf.deadline)
            fail(ErrorKind::Timeout, "target " + portal_.to_string() + ": " + function_name(tmf.function) +
                                         " (LUN " + std::to_string(tmf.lun) + ") got no answer in time");
}

void Session::Impl::resend(Task& t) {
    if (++t.resends > options_.command_retries)
        fail(ErrorKind::Timeout, "target " + portal_.to_string() + ": command ITT " + std::to_string(t.itt) +
                                     " (opcode " + std::to_string(t.cmd.cdb[0]) + ") failed " +
                                     std::to_string(t.resends) + " times");
    std::erase_if(dataout_, [&](const DataOutWork& w) { return w.itt == t.itt; });
    release_slot(t);
    t.restart();
    t.deadline = Clock::now() + t.cmd.timeout;
    // The target ended the task and will not answer for this ITT again,
    // so the command may go out under it once more (RFC 7143 §11.5.1).
    pending_.push_front(t.itt);
    stats_.commands_retried++;
}

void Session::Impl::abort_timed_out(Task& t) {
    t.aborting = true;
    stats_.tasks_aborted++;
    RBIO_LOG(Warning, "target " << portal_.to_string() << ": SCSI command (ITT " << t.itt
                                << ") got no status within " << t.cmd.timeout.count()
                                << " ms; aborting it (ABORT TASK)");
    const uint32_t itt = t.itt;
    const uint64_t lun = t.cmd.lun;
    const unsigned resends = t.resends;
    send_tmf(kAbortTask, lun, itt, t.cmd_sn, options_.abort_timeout, [this, itt, lun, resends](uint8_t r) {
        auto it = tasks_.find(itt);
        if (it == tasks_.end() || it->second.outcome) return;  // its status came first
        // A LU reset answered first has re-sent the command already, and
        // the copy in flight is not the one this answer is about: a
        // second re-send would run it twice under one ITT.
        if (it->second.resends != resends || !it->second.aborting) return;
        if (r == uint8_t(TmfResponse::Complete) || r == uint8_t(TmfResponse::NoSuchTask))
            return resend(it->second);
        RBIO_LOG(Warning, "ABORT TASK (ITT " << itt << ") answered: " << to_string(TmfResponse(r))
                                             << "; resetting LUN " << lun);
        reset_lun(lun, options_.lu_reset_timeout, [this, lun](uint8_t rr) {
            if (rr != uint8_t(TmfResponse::Complete))
                fail(ErrorKind::Timeout, "target " + portal_.to_string() + ": LOGICAL UNIT RESET of LUN " +
                                             std::to_string(lun) +
                                             " answered: " + to_string(TmfResponse(rr)));
        });
    });
}

void Session::Impl::reset_lun(uint64_t lun, std::chrono::milliseconds timeout,
                              std::function<void(uint8_t)> after) {
    stats_.lun_resets++;
    // (itt, resends) of the tasks this reset takes out of their timeouts.
    std::vector<std::pair<uint32_t, unsigned>> marked;
    for (auto& [itt, t] : tasks_)
        if (t.cmd.lun == lun && t.sent && !t.outcome && !t.aborting) {
            t.aborting = true;
            marked.emplace_back(itt, t.resends);
        }
    send_tmf(kLogicalUnitReset, lun, kNoTag, 0, timeout,
             [this, lun, marked = std::move(marked), after = std::move(after)](uint8_t r) {
                 if (r != uint8_t(TmfResponse::Complete)) {
                     // The LU was not reset: its tasks still run on the target. Back
                     // under their own timeouts, or one that hangs would wait for
                     // ever (an aborting task has none) and never escalate.
                     for (const auto& [itt, resends] : marked)
                         if (auto it = tasks_.find(itt);
                             it != tasks_.end() && !it->second.outcome && it->second.resends == resends)
                             it->second.aborting = false;
                 } else {
                     // The reset ended the LU's tasks that were sent before it (marked
                     // above); re-send those in their order. Commands sent while it
                     // was on its way came after it on the connection: the target
                     // runs and answers them, and a second copy would run twice.
                     std::vector<std::pair<uint64_t, uint32_t>> again;
                     for (auto& [itt, t] : tasks_)
                         if (t.cmd.lun == lun && t.sent && t.aborting && !t.outcome)
                             again.emplace_back(t.order, itt);
                     std::sort(again.rbegin(), again.rend());  // push_front: the oldest ends up first
                     for (const auto& [order, itt] : again) resend(tasks_.at(itt));
                 }
                 after(r);
             });
}

TmfResponse Session::Impl::lun_reset(uint64_t lun, std::chrono::milliseconds timeout) {
    check_lun(lun, "LOGICAL UNIT RESET");
    if (down_) fail(ErrorKind::ConnectionLost, "LOGICAL UNIT RESET: the session is being reinstated");
    std::optional<uint8_t> answer;
    reset_lun(lun, timeout, [&answer](uint8_t r) { answer = r; });
    while (!answer) {
        run_once(std::chrono::milliseconds(1000));
        if (down_)
            fail(ErrorKind::ConnectionLost, "LOGICAL UNIT RESET of LUN " + std::to_string(lun) +
                                                ": the session failed before the answer");
    }
    return TmfResponse(*answer);
}

}  // namespace rbio::initiator
