// The event loop and the full feature phase: commands, Data-In, R2T and
// Data-Out, status, NOP-In, asynchronous messages.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "iser_connection.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "session_impl.hpp"
#include "tcp_connection.hpp"

namespace rbio::initiator {

using iser::BhsView;
using iser::Opcode;

namespace {

std::string hex32(uint32_t v) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%08x", v);
    return b;
}

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

}  // namespace

uint64_t encode_lun(uint64_t lun) {
    if (lun < 256) return lun << 48;
    return (0x4000 | (lun & kMaxLun)) << 48;
}

void check_lun(uint64_t lun, const char* what) {
    // LUN 16384 would go out as LUN 0: another LU's data.
    if (lun > kMaxLun)
        throw std::invalid_argument(std::string(what) + ": LUN " + std::to_string(lun) + " is beyond " +
                                    std::to_string(kMaxLun) + ", the largest single-level LUN");
}

Session::Impl::Impl(UniqueFd fd, const SessionOptions& options, Portal portal, bool reconnectable)
    : options_(options), portal_(portal), home_portal_(std::move(portal)), reconnectable_(reconnectable) {
    if (options_.transport == Transport::Iser) IserConnection::restrict_offer(options_.offer);
    if (fd) conn_ = std::make_unique<TcpConnection>(std::move(fd), portal_, options_, counters_, events());
    uint64_t r = uint64_t(Clock::now().time_since_epoch().count()) ^ (uint64_t(::getpid()) << 20);
    // ISID of the random format (RFC 7143 §11.12.5): T=10b and A reserved,
    // then B and C random, and a random qualifier.
    isid_ = {uint8_t(0x80),    uint8_t(r >> 32), uint8_t(r >> 24),
             uint8_t(r >> 16), uint8_t(r >> 8),  uint8_t(r)};
    if (options_.isid) isid_ = *options_.isid;
}

Session::Impl::~Impl() {
    // Queued PDUs point into tasks' buffers; dropping them calls back into tasks_.
    conn_.reset();
}

void Session::Impl::protocol_error(const std::string& what) {
    fail(ErrorKind::Protocol, "target " + portal_.to_string() + ": " + what);
}

void Session::Impl::enter_full_feature() {
    conn_->enter_full_feature(params_);
    full_feature_ = true;
    last_rx_ = Clock::now();
}

// ---------------------------------------------------------------- sending

void Session::Impl::queue_pdu(const iser::Bhs& bhs, std::vector<uint8_t> data, uint32_t task_itt,
                              std::span<const uint8_t> ext) {
    // Recovery between two connections: a request has nowhere to go.
    if (!conn_) fail(ErrorKind::ConnectionLost, "target " + portal_.to_string() + ": not connected");
    conn_->send_pdu(bhs, std::move(data), ext, task_itt);
}

void Session::Impl::buffer_released(uint32_t itt) {
    auto it = tasks_.find(itt);
    if (it != tasks_.end() && --it->second.tx_refs == 0) finish_if_released(itt);
}

bool Session::Impl::room() const { return conn_->room(); }

bool Session::Impl::pump() {
    // Commands waiting from before a reinstatement wait for its login.
    if (!full_feature_) return false;
    bool queued = false;
    no_slot_ = false;
    while (!dataout_.empty() && room()) {
        emit_data_out(dataout_.front());
        if (dataout_.front().offset == dataout_.front().end) dataout_.pop_front();
        queued = true;
    }
    while (!pending_.empty() && room() && sn_le(cmd_sn_, max_cmd_sn_)) {
        if (!start_command(tasks_.at(pending_.front()))) {
            no_slot_ = true;  // until a response frees one: nothing to do before
            break;
        }
        pending_.pop_front();
        queued = true;
    }
    return queued;
}

// The SCSI Command PDU of a task, with the next CmdSN (not consumed here:
// the connection may still refuse the send).
iser::Bhs Session::Impl::command_bhs(const Task& t, uint8_t flags, uint32_t immediate, uint32_t edtl) const {
    const ScsiCommand& c = t.cmd;
    iser::Bhs b(Opcode::ScsiCommand);
    b.set_flags(flags)
        .set_data_segment_length(immediate)
        .set_lun(encode_lun(c.lun))
        .set_itt(t.itt)
        .set_expected_data_transfer_length(edtl)
        .set_cmd_sn(cmd_sn_)
        .set_exp_stat_sn(exp_stat_sn_)
        .set_cdb(std::span<const uint8_t>(c.cdb.data(), c.cdb_length));
    return b;
}

bool Session::Impl::start_command(Task& t) {
    const ScsiCommand& c = t.cmd;
    const NegotiatedParams& p = params_;
    const uint32_t edtl = uint32_t(c.buffer.size());
    const bool write = c.direction == DataDirection::Write;
    // Immediate data rides in the command PDU; the rest of the first burst
    // follows as unsolicited Data-Out unless InitialR2T=Yes (always so over
    // iSER, where the target fetches the rest with RDMA READ).
    uint32_t immediate = 0, unsolicited_end = 0;
    if (write) {
        uint32_t first_burst = std::min(edtl, p.first_burst_length);
        if (p.immediate_data) immediate = std::min(first_burst, p.target_max_recv_data_segment_length);
        unsolicited_end = p.initial_r2t ? immediate : first_burst;
    }
    uint8_t flags = 0x01;  // ATTR: simple task
    if (c.direction == DataDirection::Read) flags |= 0x40;
    if (write) flags |= 0x20;
    if (unsolicited_end == immediate) flags |= 0x80;  // no unsolicited Data-Out follows
    const iser::Bhs b = command_bhs(t, flags, immediate, edtl);
    // Sent before the PDU is queued: queueing may write early, and a failed
    // send must count against the command's retries.
    t.sent = true;
    t.cmd_sn = cmd_sn_++;
    t.data_sent = write && conn_->rdma_data() ? edtl : unsolicited_end;
    if (!conn_->send_command(b, t.itt, t.cmd.buffer, c.direction, immediate, t.slot)) {
        --cmd_sn_;
        t.sent = false;
        t.data_sent = 0;
        return false;
    }
    if (unsolicited_end > immediate) dataout_.push_back({t.itt, kNoTag, immediate, unsolicited_end, 0});
    stats_.commands++;
    return true;
}

void Session::Impl::release_slot(Task& t) {
    if (conn_) conn_->release_slot(t.slot);
    if (t.slot != Connection::kNoSlot) no_slot_ = false;
    t.slot = Connection::kNoSlot;
}

void Session::Impl::emit_data_out(DataOutWork& w) {
    Task& t = tasks_.at(w.itt);
    uint32_t len = std::min(w.end - w.offset, params_.target_max_recv_data_segment_length);
    iser::Bhs b(Opcode::DataOut);
    b.set_final(w.offset + len == w.end)
        .set_data_segment_length(len)
        .set_lun(encode_lun(t.cmd.lun))
        .set_itt(t.itt)
        .set_ttt(w.ttt)
        .set_exp_stat_sn(exp_stat_sn_)
        .set_data_sn(w.data_sn++)
        .set_buffer_offset(w.offset);
    queue_pdu(b, {}, t.itt, std::span<const uint8_t>(t.cmd.buffer.data() + w.offset, len));
    w.offset += len;
}

// ---------------------------------------------------------------- the loop

void Session::Impl::submit(ScsiCommand command) {
    if (command.cdb_length < 6 || command.cdb_length > 16)
        throw std::invalid_argument("SCSI command: CDB of " + std::to_string(command.cdb_length) + " bytes");
    if (command.buffer.size() > UINT32_MAX) throw std::invalid_argument("SCSI command: buffer beyond 4 GiB");
    if (command.direction == DataDirection::None && !command.buffer.empty())
        throw std::invalid_argument("SCSI command: a buffer without a data direction");
    check_lun(command.lun, "SCSI command");
    // Checked here, not when it is sent: recovery may have no connection yet.
    if (options_.transport == Transport::Iser)
        IserConnection::check_buffer(command.buffer, options_.iser_regions);
    uint32_t itt = allocate_itt();
    Task& t = tasks_[itt];
    t.itt = itt;
    t.deadline = Clock::now() + command.timeout;
    t.order = next_order_++;
    t.cmd = std::move(command);
    pending_.push_back(itt);
}

uint32_t Session::Impl::allocate_itt() {
    for (;;) {
        uint32_t itt = next_itt_++;
        if (itt != kNoTag && !tasks_.contains(itt) && !tmfs_.contains(itt) && itt != ping_itt_) return itt;
    }
}

void Session::Impl::run_once(std::chrono::milliseconds max_wait) {
    Clock::time_point until = Clock::now() + max_wait;
    if (down_) return recover(until);
    for (const auto& [itt, t] : tasks_)
        if (!t.aborting) until = std::min(until, t.deadline);
    for (const auto& [itt, tmf] : tmfs_) until = std::min(until, tmf.deadline);
    step(ping_wake(until), false);
}

void Session::Impl::run_nowait() {
    if (down_) return recover(Clock::now());
    step(Clock::now(), true);
}

void Session::Impl::step(Clock::time_point wait_until, bool nowait) {
    try {
        pass(wait_until, nowait);
        check_deadlines();
        check_ping(Clock::now());
    } catch (const InitiatorError& e) {
        if (e.kind() == ErrorKind::Protocol || !may_recover()) throw;
        connection_failed(e);
    }
}

void Session::Impl::pass(Clock::time_point wait_until, bool nowait) {
    pump();
    const bool blocked = conn_->flush(tasks_.empty());
    const bool more =
        (!dataout_.empty() || (!pending_.empty() && sn_le(cmd_sn_, max_cmd_sn_) && !no_slot_)) && room();
    int timeout_ms = 0;
    if (!nowait && (!more || blocked)) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - Clock::now());
        timeout_ms = int(std::clamp<int64_t>(left.count() + 1, 0, 60000));
    }
    stats_.poll_calls++;
    stats_.passes++;
    if (conn_->wait_and_receive(timeout_ms, options_.wake_fd, more)) last_rx_ = Clock::now();
}

void Session::Impl::check_deadlines() {
    Clock::time_point now = Clock::now();
    check_tmf_deadlines(now);
    // Aborted after the scan: queueing a PDU may send and complete others,
    // which removes finished tasks from tasks_. (No allocation unless one expired.)
    std::vector<uint32_t> to_abort;
    for (auto& [itt, t] : tasks_) {
        if (now < t.deadline || t.outcome || t.aborting) continue;
        if (t.sent && options_.abort_timeout.count() > 0) {
            to_abort.push_back(itt);
            continue;
        }
        fail(
            ErrorKind::Timeout, "target " + portal_.to_string() + ": SCSI command 0x" +
                                    [op = t.cmd.cdb[0]] {
                                        char b[4];
                                        std::snprintf(b, sizeof b, "%02x", op);
                                        return std::string(b);
                                    }() +
                                    " (ITT " + hex32(itt) + ") got no status within " +
                                    std::to_string(t.cmd.timeout.count()) + " ms" +
                                    (t.sent ? "" : " (never sent: the target's CmdSN window stayed closed)"));
    }
    for (uint32_t itt : to_abort)
        if (auto it = tasks_.find(itt); it != tasks_.end() && !it->second.outcome)
            abort_timed_out(it->second);
}

SessionStats Session::Impl::stats() const {
    SessionStats s = stats_;
    s.transport = counters_;
    return s;
}

// ---------------------------------------------------------------- receiving

Session::Impl::Task& Session::Impl::task_for(BhsView h, const char* what) {
    auto it = tasks_.find(h.itt());
    if (it == tasks_.end() || !it->second.sent || it->second.outcome)
        protocol_error(std::string(what) + " for ITT " + hex32(h.itt()) +
                       ", which names no command in flight");
    return it->second;
}

void Session::Impl::update_window(BhsView h) {
    uint32_t exp = h.exp_cmd_sn(), max = h.max_cmd_sn();
    if (sn_gt(exp, cmd_sn_))
        protocol_error("ExpCmdSN " + std::to_string(exp) + " is beyond the next CmdSN " +
                       std::to_string(cmd_sn_));
    if (sn_lt(max, exp - 1)) return;  // RFC 7143 §4.2.2.1: such values are ignored
    if (sn_gt(exp, exp_cmd_sn_)) exp_cmd_sn_ = exp;
    if (sn_gt(max, max_cmd_sn_)) max_cmd_sn_ = max;
}

void Session::Impl::check_stat_sn(BhsView h, const char* what) {
    if (h.stat_sn() != exp_stat_sn_)
        protocol_error(std::string(what) + " with StatSN " + std::to_string(h.stat_sn()) + ", expected " +
                       std::to_string(exp_stat_sn_));
    exp_stat_sn_++;
}

std::span<uint8_t> Session::Impl::data_destination(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    if (h.opcode() != Opcode::DataIn) return {};
    uint32_t len = h.data_segment_length();
    Task& t = task_for(h, "Data-In");
    uint64_t off = h.buffer_offset();
    if (t.cmd.direction != DataDirection::Read || off != t.received || off + len > t.cmd.buffer.size())
        protocol_error("Data-In for ITT " + hex32(t.itt) + " at offset " + std::to_string(off) + " with " +
                       std::to_string(len) + " bytes does not fit the command (" +
                       std::to_string(t.cmd.buffer.size()) + " bytes, " + std::to_string(t.received) +
                       " received)");
    stats_.data_direct_bytes += len;
    return t.cmd.buffer.subspan(off, len);
}

void Session::Impl::dispatch(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    Opcode op = h.opcode();
    if (!full_feature_ && op != Opcode::LoginResponse) {
        // The target is in full feature phase as soon as it has sent the
        // final Login Response, and tgt's iSER driver pings such connections
        // every 5 s: its NOP-In can arrive in the same pass, before the
        // login code has taken that response in. Unsolicited (ITT and TTT
        // reserved), it asks for nothing and advances no StatSN.
        if (op == Opcode::NopIn && h.itt() == kNoTag && h.ttt() == kNoTag && final_login_captured()) {
            RBIO_LOG(Debug, "unsolicited NOP-In right behind the final Login Response: nothing to do");
            return;
        }
        protocol_error(std::string("unexpected ") + iser::opcode_name(h.opcode_byte()) + " PDU during login");
    }
    switch (op) {
        case Opcode::ScsiResponse: handle_scsi_response(pdu); return;
        case Opcode::DataIn: handle_data_in(pdu); return;
        case Opcode::R2t: handle_r2t(pdu); return;
        case Opcode::NopIn: handle_nop_in(pdu); return;
        case Opcode::AsyncMessage: handle_async(pdu); return;
        case Opcode::TaskMgmtResponse: handle_tmf_response(pdu); return;
        case Opcode::Reject:
            protocol_error("target rejected a PDU (reason 0x" + [&] {
                char b[4];
                std::snprintf(b, sizeof b, "%02x", h.bytes()[2]);
                return std::string(b);
            }() + ")");
        case Opcode::LoginResponse:
        case Opcode::TextResponse:
        case Opcode::LogoutResponse:
            if (!awaiting_ || *awaiting_ != op || captured_)
                protocol_error(std::string("unexpected ") + iser::opcode_name(h.opcode_byte()) + " PDU");
            if (op != Opcode::LoginResponse) {
                // A Logout Response ends the session, so its window does not
                // matter; istgt counts the immediate Logout Request's CmdSN
                // into ExpCmdSN there, which update_window would reject.
                if (op != Opcode::LogoutResponse) update_window(h);
                check_stat_sn(h, iser::opcode_name(h.opcode_byte()));
            }
            captured_.emplace(Captured{});
            std::copy(pdu.bhs.begin(), pdu.bhs.end(), captured_->bhs.begin());
            captured_->data.assign(pdu.data.begin(), pdu.data.end());
            return;
        default: protocol_error(std::string("unexpected ") + iser::opcode_name(h.opcode_byte()) + " PDU");
    }
}

void Session::Impl::handle_scsi_response(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    Task& t = task_for(h, "SCSI Response");
    update_window(h);
    check_stat_sn(h, "SCSI Response");
    ScsiOutcome o;
    uint8_t flags = h.flags();
    o.overflow = flags & 0x04;
    o.underflow = flags & 0x02;
    if (o.overflow && o.underflow) protocol_error("SCSI Response with both overflow and underflow");
    o.response = h.bytes()[2];
    o.status = h.bytes()[3];
    o.residual = (o.overflow || o.underflow) ? h.residual_count() : 0;
    if (pdu.data.size() >= 2) {
        uint16_t sense_len = be16(pdu.data.data());
        if (sense_len > pdu.data.size() - 2)
            protocol_error("SCSI Response: SenseLength " + std::to_string(sense_len) + " beyond its " +
                           std::to_string(pdu.data.size() - 2) + " bytes of data");
        o.sense.assign(pdu.data.begin() + 2, pdu.data.begin() + 2 + sense_len);
    } else if (pdu.data.size() == 1) {
        protocol_error("SCSI Response with a 1-byte data segment");
    }
    uint32_t edtl = uint32_t(t.cmd.buffer.size());
    if (o.underflow && o.residual > edtl)
        protocol_error("SCSI Response: residual " + std::to_string(o.residual) + " beyond the expected " +
                       std::to_string(edtl) + " bytes");
    if (conn_->rdma_data()) {
        // The target RDMA WROTE the read data before this SEND (RC ordering).
        // The residual says how much only for a command that completed
        // (RFC 7143 11.4.5): after an error, nothing is known to have come,
        // and a bounce slot still holds an earlier command's bytes.
        if (t.cmd.direction == DataDirection::Read)
            t.received = o.good() ? edtl - (o.underflow ? o.residual : 0) : 0;
        conn_->finish_command(t.slot, t.cmd.buffer, t.received, t.cmd.direction == DataDirection::Read);
        if (t.slot != Connection::kNoSlot) no_slot_ = false;
        t.slot = Connection::kNoSlot;
    }
    if (t.cmd.direction == DataDirection::Read) {
        if (o.good() && t.received != edtl - (o.underflow ? o.residual : 0))
            protocol_error("read (ITT " + hex32(t.itt) + ") completed with " + std::to_string(t.received) +
                           " of " + std::to_string(edtl) + " bytes and residual " +
                           std::to_string(o.residual));
        o.bytes_transferred = t.received;
    } else {
        o.bytes_transferred = t.data_sent;
    }
    complete(t, std::move(o));
}

void Session::Impl::handle_data_in(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    if (conn_->rdma_data()) protocol_error("Data-In PDU over iSER (RFC 7145: read data comes as RDMA WRITE)");
    Task& t = task_for(h, "Data-In");
    uint32_t len = uint32_t(pdu.data.size());
    uint64_t off = h.buffer_offset();
    if (t.cmd.direction != DataDirection::Read)
        protocol_error("Data-In for ITT " + hex32(t.itt) + ", which is not a read");
    if (h.data_sn() != t.exp_data_sn)
        protocol_error("Data-In for ITT " + hex32(t.itt) + " with DataSN " + std::to_string(h.data_sn()) +
                       ", expected " + std::to_string(t.exp_data_sn));
    if (off != t.received || off + len > t.cmd.buffer.size())
        protocol_error("Data-In for ITT " + hex32(t.itt) + " at offset " + std::to_string(off) + " with " +
                       std::to_string(len) + " bytes does not fit the command (" +
                       std::to_string(t.cmd.buffer.size()) + " bytes, " + std::to_string(t.received) +
                       " received)");
    t.exp_data_sn++;
    uint8_t* dst = t.cmd.buffer.data() + off;
    if (len && pdu.data.data() != dst) std::memcpy(dst, pdu.data.data(), len);
    t.received += len;
    update_window(h);
    uint8_t flags = h.flags();
    if (!(flags & 0x01)) return;  // no status in this PDU
    if (!(flags & 0x80)) protocol_error("Data-In with status (S) but without F");
    check_stat_sn(h, "Data-In with status");
    ScsiOutcome o;
    o.overflow = flags & 0x04;
    o.underflow = flags & 0x02;
    if (o.overflow && o.underflow) protocol_error("Data-In with both overflow and underflow");
    o.status = h.bytes()[3];
    o.residual = (o.overflow || o.underflow) ? h.residual_count() : 0;
    uint32_t edtl = uint32_t(t.cmd.buffer.size());
    if (o.underflow && (o.residual > edtl || t.received != edtl - o.residual))
        protocol_error("Data-In status for ITT " + hex32(t.itt) + ": " + std::to_string(t.received) +
                       " bytes received, residual " + std::to_string(o.residual) + " of " +
                       std::to_string(edtl));
    if (!o.underflow && t.received != edtl)
        protocol_error("Data-In status for ITT " + hex32(t.itt) + " after " + std::to_string(t.received) +
                       " of " + std::to_string(edtl) + " bytes");
    o.bytes_transferred = t.received;
    complete(t, std::move(o));
}

void Session::Impl::handle_r2t(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    if (conn_->rdma_data()) protocol_error("R2T PDU over iSER (RFC 7145: the target RDMA READs write data)");
    Task& t = task_for(h, "R2T");
    if (t.cmd.direction != DataDirection::Write)
        protocol_error("R2T for ITT " + hex32(t.itt) + ", which is not a write");
    uint32_t r2tsn = h.data_sn();
    uint64_t off = h.buffer_offset();
    uint32_t len = h.residual_count();  // DesiredDataTransferLength
    if (r2tsn != t.exp_r2t_sn)
        protocol_error("R2T for ITT " + hex32(t.itt) + " with R2TSN " + std::to_string(r2tsn) +
                       ", expected " + std::to_string(t.exp_r2t_sn));
    if (len == 0 || len > params_.max_burst_length || off + len > t.cmd.buffer.size())
        protocol_error("R2T for ITT " + hex32(t.itt) + " asks for " + std::to_string(len) +
                       " bytes at offset " + std::to_string(off) + " (command " +
                       std::to_string(t.cmd.buffer.size()) + " bytes, MaxBurstLength " +
                       std::to_string(params_.max_burst_length) + ")");
    if (h.ttt() == kNoTag) protocol_error("R2T with the reserved Target Transfer Tag 0xffffffff");
    update_window(h);
    t.exp_r2t_sn++;
    t.data_sent += len;
    dataout_.push_back({t.itt, h.ttt(), uint32_t(off), uint32_t(off + len), 0});
}

void Session::Impl::handle_nop_in(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    if (h.itt() != kNoTag) return handle_ping_answer(h);
    update_window(h);
    if (h.ttt() == kNoTag) return;  // unsolicited, needs no answer
    if (pdu.data.size() > params_.target_max_recv_data_segment_length)
        protocol_error("NOP-In ping data of " + std::to_string(pdu.data.size()) + " bytes");
    RBIO_LOG(Debug, "answering NOP-In ping TTT " << hex32(h.ttt()));
    iser::Bhs b;
    b.set_opcode(Opcode::NopOut, true)
        .set_final(true)
        .set_data_segment_length(uint32_t(pdu.data.size()))
        .set_lun(h.lun())
        .set_itt(kNoTag)
        .set_ttt(h.ttt())
        .set_cmd_sn(cmd_sn_)
        .set_exp_stat_sn(exp_stat_sn_);
    queue_pdu(b, std::vector<uint8_t>(pdu.data.begin(), pdu.data.end()), kNoTag);
    stats_.pings_answered++;
}

void Session::Impl::handle_async(const iser::RxPdu& pdu) {
    BhsView h = pdu.header();
    update_window(h);
    check_stat_sn(h, "Async Message");
    uint8_t event = h.bytes()[36];
    switch (event) {
        case 0: RBIO_LOG(Info, "target reported a SCSI asynchronous event"); return;
        case 1: fail(ErrorKind::ConnectionLost, "target " + portal_.to_string() + " requested logout");
        case 2:
        case 3: fail(ErrorKind::ConnectionLost, "target " + portal_.to_string() + " is dropping the session");
        default: RBIO_LOG(Warning, "ignoring asynchronous event " << int(event)); return;
    }
}

void Session::Impl::complete(Task& t, ScsiOutcome outcome) {
    t.outcome = std::move(outcome);
    std::erase_if(dataout_, [&](const DataOutWork& w) { return w.itt == t.itt; });
    if (t.tx_refs == 0) finish_if_released(t.itt);
}

void Session::Impl::finish_if_released(uint32_t itt) {
    auto it = tasks_.find(itt);
    if (it == tasks_.end() || !it->second.outcome || it->second.tx_refs != 0) return;
    auto done = std::move(it->second.cmd.done);
    ScsiOutcome o = std::move(*it->second.outcome);
    tasks_.erase(it);
    if (done) done(o);
}

// ---------------------------------------------------------------- Session

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

std::unique_ptr<Session> Session::login(const Portal& portal, const SessionOptions& options) {
    auto impl = std::make_unique<Impl>(UniqueFd(), options, portal, true);
    impl->connect_and_login(portal, options.connect_timeout);
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

std::unique_ptr<Session> Session::login_on(int fd, const Portal& portal, const SessionOptions& options) {
    UniqueFd owned(fd);
    if (options.transport != Transport::Tcp)
        throw std::invalid_argument("Session::login_on: a socket carries TCP only, not iSER");
    auto impl = std::make_unique<Impl>(std::move(owned), options, portal, false);
    try {
        impl->login();
    } catch (const Impl::LoginRedirect& r) {
        fail(ErrorKind::LoginRefused, "login at " + portal.to_string() + " redirected to " +
                                          r.to.to_string() + ", which a given connection cannot follow");
    }
    return std::unique_ptr<Session>(new Session(std::move(impl)));
}

const NegotiatedParams& Session::params() const { return impl_->params(); }
const Portal& Session::portal() const { return impl_->portal(); }
std::vector<DiscoveredTarget> Session::send_targets() { return impl_->send_targets(); }
void Session::submit(ScsiCommand command) { impl_->submit(std::move(command)); }
size_t Session::outstanding() const { return impl_->outstanding(); }
void Session::run_once(std::chrono::milliseconds max_wait) { impl_->run_once(max_wait); }
void Session::run_nowait() { impl_->run_nowait(); }
void Session::logout(std::chrono::milliseconds timeout) { impl_->logout(timeout); }
bool Session::recovering() const { return impl_->recovering(); }
TmfResponse Session::lun_reset(uint64_t lun, std::chrono::milliseconds timeout) {
    return impl_->lun_reset(lun, timeout);
}
SessionStats Session::stats() const { return impl_->stats(); }

Clock::time_point Session::poll_fds(std::vector<pollfd>& fds) const { return impl_->poll_fds(fds); }

Clock::time_point Session::Impl::poll_fds(std::vector<pollfd>& fds) const {
    Clock::time_point until = Clock::time_point::max();
    if (down_ || !conn_) return Clock::now();  // recovery runs in passes of its own
    conn_->poll_fds(fds);
    // What the last pass received may have made work to send (Data-Out for
    // an R2T, a NOP-Out answer, commands the window now admits): it leaves
    // with the next pass, which is due now.
    const bool ready = full_feature_ && room() &&
                       (!dataout_.empty() || (!pending_.empty() && sn_le(cmd_sn_, max_cmd_sn_) && !no_slot_));
    if (ready || conn_->unsent()) return Clock::now();
    for (const auto& [itt, t] : tasks_)
        if (!t.aborting) until = std::min(until, t.deadline);
    for (const auto& [itt, tmf] : tmfs_) until = std::min(until, tmf.deadline);
    return ping_wake(until);
}

ScsiOutcome IoSession::execute(ScsiCommand command) {
    std::optional<ScsiOutcome> result;
    command.done = [&](const ScsiOutcome& o) { result = o; };
    submit(std::move(command));
    while (!result) run_once(std::chrono::milliseconds(1000));
    return *result;
}

}  // namespace rbio::initiator
