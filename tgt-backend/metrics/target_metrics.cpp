#include "rbio/bs/target_metrics.hpp"

#include <array>

#include "rbio/iser/counters.hpp"
#include "rbio/version.h"

namespace rbio::bs::metrics {

namespace {

using rbio::iser::Counter;
using rbio::iser::kCounterCount;

constexpr MetricType C = MetricType::Counter;
constexpr MetricType G = MetricType::Gauge;

// ---- the process

constexpr Family kBuildInfo{
    "rbio_build_info", G,
    "Always 1; labels: rbio's version and the tgt version the module was built against"};
constexpr Family kOpen{"rbio_open_connections", G, "Connections open now on rbio's transport, per transport"};
constexpr Family kAccepted{"rbio_connections_accepted_total", C,
                           "Connections accepted by rbio's transports since tgtd started"};
constexpr Family kOverBudget{"rbio_connections_over_data_budget_total", C,
                             "Connections closed since tgtd started because their commands wanted more "
                             "data buffers than data_budget_mib, or because they held the most when "
                             "tgtd's would have gone over data_budget_total_mib"};
constexpr Family kDataBuffers{"rbio_data_buffer_bytes", G,
                              "Data buffers all connections of rbio's transports hold now"};
constexpr Family kDataBufferLimit{"rbio_data_buffer_limit_bytes", G,
                                  "What they may hold together (data_budget_total_mib); 0: no limit"};

// ---- ALUA (rbio::bs::alua::Gateway)

constexpr Family kAluaPortState{"rbio_alua_port_state", G,
                                "Always 1; labels: this gateway's target port group, its ALUA state and "
                                "the groups file it reads (empty: none, the gateway alone)"};
constexpr Family kAluaGroupState{"rbio_alua_group_state", G,
                                 "Always 1, one per port group of this gateway's copy of the groups "
                                 "file; labels: the group, its state and the file"};
constexpr Family kAluaFileOk{"rbio_alua_groups_file_ok", G,
                             "1 if the groups file's current version is in use; 0 if it is missing, "
                             "unreadable or wrong (states kept as they were) or not read yet"};

// ---- one logical unit (rbio::bs::Counters)

constexpr Family kLuInfo{"rbio_lu_info", G,
                         "Always 1; labels: the LU's backing store (rbio: a file, rbio_rbd: "
                         "a Ceph RBD image) and its path"};
constexpr Family kLuSize{"rbio_lu_size_bytes", G, "Size of the logical unit"};
constexpr Family kLuCommands{"rbio_lu_commands_total", C, "SCSI commands the rbio backing store took"};
constexpr Family kLuReads{"rbio_lu_reads_total", C, "READ commands taken"};
constexpr Family kLuReadBytes{"rbio_lu_read_bytes_total", C, "Bytes addressed by READ commands"};
constexpr Family kLuWrites{"rbio_lu_writes_total", C, "WRITE and WRITE AND VERIFY commands taken"};
constexpr Family kLuWrittenBytes{"rbio_lu_written_bytes_total", C,
                                 "Bytes addressed by WRITE and WRITE AND VERIFY commands"};
constexpr Family kLuErrors{
    "rbio_lu_failed_commands_total", C,
    "Commands that ended in CHECK CONDITION, other than COMPARE AND WRITE miscompares"};
constexpr Family kLuMiscompares{"rbio_lu_miscompares_total", C,
                                "COMPARE AND WRITE commands that ended in MISCOMPARE (the data differed; "
                                "VMware's ATS locking makes these in normal use)"};
constexpr Family kLuIos{"rbio_lu_ios_total", C,
                        "Reads, writes and flushes issued to the backing file, after coalescing"};
constexpr Family kLuMerged{"rbio_lu_merged_commands_total", C,
                           "Commands that rode in another command's I/O (coalescing)"};
constexpr Family kLuInlineIos{"rbio_lu_inline_ios_total", C,
                              "I/Os done synchronously in tgtd's event loop, not through io_uring"};
constexpr Family kLuSubmitCalls{"rbio_lu_io_uring_submit_calls_total", C,
                                "io_uring_enter calls that submitted I/O"};
constexpr Family kLuPasses{"rbio_lu_passes_total", C, "Event-loop passes that had work for the LU"};
constexpr Family kLuReaped{"rbio_lu_reaped_completions_total", C,
                           "Completions reaped; reaped=inline: right after submitting, "
                           "reaped=event: on an eventfd wake-up"};
constexpr Family kLuWakeups{"rbio_lu_eventfd_wakeups_total", C, "Eventfd wake-ups for completions"};
constexpr Family kLuInFlight{"rbio_lu_ios_in_flight", G, "I/Os handed to io_uring and not yet complete"};
constexpr Family kLuRbdFenced{"rbio_lu_rbd_fenced", G,
                              "1: the Ceph cluster blocklisted this gateway's client for the LU's RBD image "
                              "(another gateway took its lock over); it serves nothing until reopened"};
constexpr Family kLuRbdFences{
    "rbio_lu_rbd_fences_total", C,
    "Times the Ceph cluster fenced this gateway's client for the LU's RBD image "
    "(its sessions are then ended and it is opened again, unless rbd_reopen=manual)"};
constexpr Family kLuRbdQuietEnds{
    "rbio_lu_rbd_quiet_sessions_ended_total", C,
    "Sessions ended because a write to the RBD image came after its connection had been "
    "silent for rbd_quiet_s"};
constexpr Family kLuRbdTakeovers{"rbio_lu_rbd_lock_takeovers_total", C,
                                 "Takeovers of the RBD image's exclusive lock (rbd_lock=takeover)"};

// ---- one connection (rbio::iser::Counter)

constexpr Family kConnDataBuffers{"rbio_connection_data_buffer_bytes", G,
                                  "Data buffers the connection holds now: its commands' and those whose "
                                  "responses are still being sent (data_budget_mib bounds them)"};

enum class Applies { Both, Tcp, Iser };

struct ConnectionFamily {
    Family family;
    Applies applies;
};

// A switch, not a table: a counter added to rbio::iser::Counter without a
// family here fails the build (-Wswitch, -Werror).
ConnectionFamily connection_family(Counter c) {
    switch (c) {
        case Counter::PdusIn:
            return {{"rbio_connection_received_pdus_total", C, "iSCSI PDUs received"}, Applies::Both};
        case Counter::BytesIn:
            return {{"rbio_connection_received_bytes_total", C, "Bytes received"}, Applies::Both};
        case Counter::RecvCalls:
            return {{"rbio_connection_receive_calls_total", C, "recv/read system calls"}, Applies::Tcp};
        case Counter::PdusOut:
            return {{"rbio_connection_sent_pdus_total", C, "iSCSI PDUs sent"}, Applies::Both};
        case Counter::BytesOut: return {{"rbio_connection_sent_bytes_total", C, "Bytes sent"}, Applies::Both};
        case Counter::SendCalls:
            return {{"rbio_connection_send_calls_total", C, "sendmsg/writev system calls"}, Applies::Tcp};
        case Counter::WouldBlock:
            return {{"rbio_connection_send_blocked_total", C,
                     "Flushes that left bytes queued because the socket was full"},
                    Applies::Tcp};
        case Counter::EventCtl:
            return {{"rbio_connection_epoll_ctl_calls_total", C,
                     "epoll_ctl calls the transport made (arming EPOLLOUT)"},
                    Applies::Tcp};
        case Counter::WorkRequests:
            return {{"rbio_connection_rdma_work_requests_total", C,
                     "Send-queue work requests posted (SEND, RDMA WRITE, RDMA READ)"},
                    Applies::Iser};
        case Counter::PostCalls:
            return {{"rbio_connection_rdma_post_send_calls_total", C, "ibv_post_send calls"}, Applies::Iser};
        case Counter::RecvRequests:
            return {{"rbio_connection_rdma_receive_requests_total", C,
                     "Receive work requests posted by the connection (not by a shared receive queue)"},
                    Applies::Iser};
        case Counter::RecvPostCalls:
            return {
                {"rbio_connection_rdma_post_receive_calls_total", C, "ibv_post_recv calls of the connection"},
                Applies::Iser};
        case Counter::Signaled:
            return {{"rbio_connection_rdma_signaled_requests_total", C, "Signalled send-queue work requests"},
                    Applies::Iser};
        case Counter::Completions:
            return {{"rbio_connection_rdma_completions_total", C, "Work completions reaped"}, Applies::Iser};
        case Counter::PollCalls:
            return {{"rbio_connection_rdma_poll_calls_total", C, "ibv_poll_cq calls"}, Applies::Iser};
        case Counter::ChannelWakeups:
            return {{"rbio_connection_rdma_channel_wakeups_total", C, "Completion-channel events taken"},
                    Applies::Iser};
        case Counter::RdmaReads:
            return {{"rbio_connection_rdma_reads_total", C,
                     "RDMA READs posted to fetch write data (one per R2T)"},
                    Applies::Iser};
        case Counter::SpinHits:
            return {{"rbio_connection_rdma_spin_hits_total", C,
                     "Spins on an empty completion queue that found a completion"},
                    Applies::Iser};
        case Counter::SpinMisses:
            return {{"rbio_connection_rdma_spin_misses_total", C,
                     "Spins that found nothing and armed the completion channel"},
                    Applies::Iser};
        case Counter::Lent:
            return {{"rbio_connection_lent_write_buffers_total", C,
                     "Writes whose data was used where it was received, without a copy (TCP: "
                     "write_in_place; iSER: immediate data in its receive's block)"},
                    Applies::Both};
        case Counter::LendRefused:
            return {{"rbio_connection_lend_refused_total", C,
                     "Writes whose received data was copied after all (TCP: not all buffered, or no "
                     "receive chunk free; iSER: larger than iser_receive_kib)"},
                    Applies::Both};
        case Counter::RxWaitCalls:
            return {{"rbio_connection_rx_wait_calls_total", C,
                     "System calls of receive moderation (SO_RCVLOWAT, its wait timer)"},
                    Applies::Tcp};
        case Counter::RxWaitExpired:
            return {{"rbio_connection_rx_wait_expired_total", C,
                     "Receive-moderation waits ended by the timer (the initiator sent fewer requests)"},
                    Applies::Tcp};
        case Counter::DirectCommands:
            return {{"rbio_connection_direct_commands_total", C,
                     "READs and WRITEs past tgt's byte-stream reader and writer (direct_commands)"},
                    Applies::Both};
        case Counter::PassesYielded:
            return {{"rbio_connection_rdma_passes_yielded_total", C,
                     "Completion passes that stopped at iser_pass_completions while the peer kept "
                     "them busy, to let the other connections run"},
                    Applies::Iser};
        case Counter::Count_: break;
    }
    return {{"rbio_connection_unknown_total", C, "unknown counter"}, Applies::Both};
}

bool applies_to(Applies a, Transport t) {
    return a == Applies::Both || (a == Applies::Tcp) == (t == Transport::Tcp);
}

}  // namespace

const char* transport_label(Transport t) { return t == Transport::Tcp ? "tcp" : "iser"; }

namespace {

std::array<Label, 1> common_labels(const std::string& control_port) {
    return {{{"control_port", control_port}}};
}

}  // namespace

TargetMetrics::TargetMetrics(std::string_view tgt_version, unsigned control_port)
    : tgt_version_(tgt_version),
      control_port_(std::to_string(control_port)),
      alua_(common_labels(control_port_)),
      body_(common_labels(control_port_)) {}

void TargetMetrics::add_lu(const LuValues& lu) {
    const std::string lun = std::to_string(lu.lun);
    const std::array<Label, 2> labels{{{"target", lu.target}, {"lun", lun}}};
    const LabelSet l(labels);
    const rbio_bs_counters& k = lu.counters;
    const std::array<Label, 4> info{
        {labels[0], labels[1], {"backing_store", lu.backing_store}, {"path", lu.path}}};
    body_.add(kLuInfo, std::span<const Label>(info), 1);
    body_.add(kLuSize, l, lu.size_bytes);
    body_.add(kLuCommands, l, k.commands);
    body_.add(kLuReads, l, k.reads);
    body_.add(kLuReadBytes, l, k.read_bytes);
    body_.add(kLuWrites, l, k.writes);
    body_.add(kLuWrittenBytes, l, k.written_bytes);
    body_.add(kLuErrors, l, k.errors);
    body_.add(kLuMiscompares, l, k.miscompares);
    body_.add(kLuIos, l, k.ios);
    body_.add(kLuMerged, l, k.merged);
    body_.add(kLuInlineIos, l, k.inline_ios);
    body_.add(kLuSubmitCalls, l, k.submit_calls);
    body_.add(kLuPasses, l, k.passes);
    const std::array<Label, 3> inl{{labels[0], labels[1], {"reaped", "inline"}}};
    const std::array<Label, 3> evt{{labels[0], labels[1], {"reaped", "event"}}};
    body_.add(kLuReaped, std::span<const Label>(inl), k.reaped_inline);
    body_.add(kLuReaped, std::span<const Label>(evt), k.reaped_event);
    body_.add(kLuWakeups, l, k.event_wakeups);
    body_.add(kLuInFlight, l, k.ios_in_flight);
    if (k.rbd) {
        body_.add(kLuRbdFenced, l, k.rbd_fenced);
        body_.add(kLuRbdTakeovers, l, k.rbd_lock_takeovers);
        body_.add(kLuRbdFences, l, k.rbd_fences);
        body_.add(kLuRbdQuietEnds, l, k.rbd_quiet_ends);
    }
}

void TargetMetrics::set_alua(const AluaValues& a) {
    const std::string group = std::to_string(a.port_group);
    const std::array<Label, 3> port{
        {{"port_group", group}, {"state", a.state}, {"groups_file", a.groups_file}}};
    alua_.add(kAluaPortState, std::span<const Label>(port), 1);
    for (const auto& g : a.groups) {
        const std::string id = std::to_string(g.id);
        const std::array<Label, 3> l{{{"group", id}, {"state", g.state}, {"groups_file", a.groups_file}}};
        alua_.add(kAluaGroupState, std::span<const Label>(l), 1);
    }
    const std::array<Label, 1> file{{{"groups_file", a.groups_file}}};
    alua_.add(kAluaFileOk, std::span<const Label>(file), a.file_ok ? 1 : 0);
}

void TargetMetrics::add_connection(const ConnectionValues& conn) {
    const std::array<Label, 5> labels{{{"transport", transport_label(conn.transport)},
                                       {"target", conn.target},
                                       {"initiator", conn.initiator},
                                       {"portal", conn.portal},
                                       {"peer", conn.peer}}};
    const LabelSet l(labels);
    ++open_[conn.transport == Transport::Tcp ? 0 : 1];
    for (size_t i = 0; i < kCounterCount; ++i) {
        const ConnectionFamily f = connection_family(Counter(i));
        if (applies_to(f.applies, conn.transport))
            body_.add(f.family, l, i < conn.counters.size() ? conn.counters[i] : 0);
    }
    body_.add(kConnDataBuffers, l, conn.data_buffer_bytes);
}

std::string TargetMetrics::text() const {
    Exposition head(common_labels(control_port_));
    const std::array<Label, 2> version{{{"version", RBIO_VERSION}, {"tgt_version", tgt_version_}}};
    head.add(kBuildInfo, version, 1);
    for (Transport t : {Transport::Tcp, Transport::Iser}) {
        const std::array<Label, 1> l{{{"transport", transport_label(t)}}};
        head.add(kOpen, l, open_[t == Transport::Tcp ? 0 : 1]);
    }
    head.add(kAccepted, accepted_);
    head.add(kOverBudget, over_budget_);
    head.add(kDataBuffers, data_buffers_);
    head.add(kDataBufferLimit, data_buffer_limit_);
    return head.text() + alua_.text() + body_.text();
}

std::vector<Family> TargetMetrics::families() {
    std::vector<Family> all{kBuildInfo,       kOpen,          kAccepted,       kOverBudget,  kDataBuffers,
                            kDataBufferLimit, kAluaPortState, kAluaGroupState, kAluaFileOk,  kLuInfo,
                            kLuSize,          kLuCommands,    kLuReads,        kLuReadBytes, kLuWrites,
                            kLuWrittenBytes,  kLuErrors,      kLuMiscompares,  kLuIos,       kLuMerged,
                            kLuInlineIos,     kLuSubmitCalls, kLuPasses,       kLuReaped,    kLuWakeups,
                            kLuInFlight,      kLuRbdFenced,   kLuRbdTakeovers, kLuRbdFences, kLuRbdQuietEnds,
                            kConnDataBuffers};
    for (size_t i = 0; i < kCounterCount; ++i) all.push_back(connection_family(Counter(i)).family);
    return all;
}

}  // namespace rbio::bs::metrics
