#pragma once
// rbio's metrics of one tgtd, named and typed once here: per logical unit
// (the engine's counters), per connection (the transports' counters) and
// for the process. The glue only gathers the values, once a second, and
// hands them over; docs/metrics.md describes every family.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rbio/bs/c_api.h"
#include "rbio/bs/metrics.hpp"

namespace rbio::bs::metrics {

// One logical unit served by the rbio backing store.
struct LuValues {
    std::string_view target;  // the target's IQN
    uint64_t lun = 0;
    std::string_view backing_store;  // tgt's bs-type: rbio (a file) or rbio_rbd
    std::string_view path;           // the backing file, or rbd:POOL/IMAGE
    uint64_t size_bytes = 0;
    rbio_bs_counters counters{};
};

enum class Transport { Tcp, Iser };

// This gateway's ALUA view: its own port group and every group of its
// copy of the groups file, so that gateways whose copies disagree can be
// told apart (rbio-alerts.yml).
struct AluaGroupValues {
    uint16_t id = 0;
    std::string_view state;
};
struct AluaValues {
    uint16_t port_group = 0;
    std::string_view state;
    std::string_view groups_file;  // empty: none (the gateway alone)
    bool file_ok = true;
    std::span<const AluaGroupValues> groups;
};

// One connection of rbio's TCP or iSER transport.
struct ConnectionValues {
    Transport transport = Transport::Tcp;
    std::string_view target;     // IQN; empty before login and for discovery
    std::string_view initiator;  // IQN the initiator logged in with; empty before
    std::string_view portal;     // local ADDRESS:PORT the connection came in on
    std::string_view peer;       // the initiator's ADDRESS:PORT, unique per connection
    // rbio::iser::Counter order; counters past the end count as 0.
    std::span<const uint64_t> counters;
    uint64_t data_buffer_bytes = 0;  // data buffers it holds now (data_budget_mib)
};

class TargetMetrics {
public:
    // Every sample carries control_port="N", tgtd's control port (-C N,
    // 0 by default): two tgtds of one box serve the same LUs and read the
    // same settings, and a collector merging their files must tell their
    // series apart.
    TargetMetrics(std::string_view tgt_version, unsigned control_port);

    void add_lu(const LuValues& lu);
    void add_connection(const ConnectionValues& conn);
    // Connections accepted by rbio's transports since tgtd started.
    void set_connections_accepted(uint64_t n) { accepted_ = n; }
    // Connections closed for going over data_budget_mib, or for holding the
    // most when tgtd's would go over data_budget_total_mib, since tgtd started.
    void set_connections_over_data_budget(uint64_t n) { over_budget_ = n; }
    // Data buffers all connections hold now, and data_budget_total_mib in
    // bytes (0: none).
    void set_data_buffers(uint64_t held, uint64_t limit) {
        data_buffers_ = held;
        data_buffer_limit_ = limit;
    }
    // At most once; without it (ALUA off) no ALUA family is written.
    void set_alua(const AluaValues& alua);

    // The exposition: process and ALUA families first, then LUs, then
    // connections.
    std::string text() const;

    // Every family this module can write, for the documentation's test.
    static std::vector<Family> families();

private:
    std::string tgt_version_;
    std::string control_port_;
    uint64_t accepted_ = 0;
    uint64_t over_budget_ = 0;
    uint64_t data_buffers_ = 0;
    uint64_t data_buffer_limit_ = 0;
    uint64_t open_[2] = {0, 0};  // per Transport
    Exposition alua_;
    Exposition body_;
};

const char* transport_label(Transport t);

}  // namespace rbio::bs::metrics
