// extern "C" entry points of the metrics for the tgt glue. Nothing here
// lets a C++ exception unwind into tgtd: a failed add is remembered and
// reported by rbio_metrics_write.
#include "rbio/bs/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "rbio/bs/atomic_file.hpp"
#include "rbio/bs/metrics_settings.hpp"
#include "rbio/bs/target_metrics.hpp"
#include "rbio/iser/counters.hpp"

static_assert(rbio::iser::kCounterCount <= RBIO_METRICS_CONN_COUNTERS);

struct rbio_metrics {
    rbio_metrics(const char* tgt_version, unsigned control_port)
        : target(tgt_version ? tgt_version : "", control_port) {}
    rbio::bs::metrics::TargetMetrics target;
    std::string failed;  // the first add that failed
};

namespace {

void put(char* out, size_t len, const std::string& s) {
    if (out && len) std::snprintf(out, len, "%s", s.c_str());
}

const char* or_empty(const char* s) { return s ? s : ""; }

// The lock of the metrics file this process writes; released when it exits.
rbio::UniqueFd& claimed() {
    static rbio::UniqueFd fd;
    return fd;
}

template <typename F>
void guarded(rbio_metrics* m, F&& f) {
    if (!m->failed.empty()) return;
    try {
        f();
    } catch (const std::exception& e) {
        m->failed = e.what();
    } catch (...) {
        m->failed = "unexpected error";
    }
}

}  // namespace

extern "C" {

int rbio_metrics_load_path(char* path, size_t len, unsigned control_port, char* err, size_t errlen) {
    // The lock's storage exists from here, before the glue registers its
    // atexit handler that removes the file: statics built before a handler
    // is registered are destroyed after it runs, so the lock is held until
    // the file is gone (another tgtd waiting for it would otherwise write
    // it and then see it removed).
    (void)claimed();
    try {
        auto s = rbio::bs::metrics::load_settings(control_port);
        if (s.file.size() >= len) {
            put(err, errlen, s.source + ": metrics_file too long");
            return -1;
        }
        put(path, len, s.file);
        return 0;
    } catch (const std::exception& e) {
        put(err, errlen, e.what());
    } catch (...) {
        put(err, errlen, "unexpected error reading the metrics setting");
    }
    return -1;
}

int rbio_metrics_claim(const char* path, char* err, size_t errlen) {
    try {
        claimed().reset();  // a second claim of one path would wait for the first
        claimed() = rbio::bs::claim_file(path);
        if (claimed()) return 0;
        put(err, errlen,
            std::string(path) + ": another process writes this file (it holds " + path +
                ".lock); two tgtds of one box need a metrics_file each (\"%c\" in it becomes the control "
                "port)");
    } catch (const std::exception& e) {
        put(err, errlen, e.what());
    } catch (...) {
        put(err, errlen, "unexpected error locking the metrics file");
    }
    return -1;
}

rbio_metrics* rbio_metrics_new(const char* tgt_version, unsigned control_port) {
    try {
        return std::make_unique<rbio_metrics>(tgt_version, control_port).release();
    } catch (...) {
        return nullptr;
    }
}

void rbio_metrics_free(rbio_metrics* m) { std::unique_ptr<rbio_metrics> owned(m); }

void rbio_metrics_add_lu(rbio_metrics* m, const rbio_metrics_lu* lu, const rbio_bs_counters* counters) {
    guarded(m, [&] {
        m->target.add_lu({or_empty(lu->target), lu->lun, or_empty(lu->backing_store), or_empty(lu->path),
                          lu->size_bytes, *counters});
    });
}

void rbio_metrics_add_connection(rbio_metrics* m, const rbio_metrics_conn* c, const uint64_t* counters,
                                 size_t n) {
    using rbio::bs::metrics::Transport;
    guarded(m, [&] {
        m->target.add_connection({c->transport == RBIO_METRICS_ISER ? Transport::Iser : Transport::Tcp,
                                  or_empty(c->target), or_empty(c->initiator), or_empty(c->portal),
                                  or_empty(c->peer), std::span<const uint64_t>(counters, n),
                                  c->data_buffer_bytes});
    });
}

void rbio_metrics_set_accepted(rbio_metrics* m, uint64_t connections_accepted) {
    m->target.set_connections_accepted(connections_accepted);
}

void rbio_metrics_set_over_data_budget(rbio_metrics* m, uint64_t connections_closed) {
    m->target.set_connections_over_data_budget(connections_closed);
}

void rbio_metrics_set_data_buffers(rbio_metrics* m, uint64_t held, uint64_t limit) {
    m->target.set_data_buffers(held, limit);
}

void rbio_metrics_set_alua(rbio_metrics* m, const rbio_metrics_alua* a) {
    guarded(m, [&] {
        std::vector<rbio::bs::metrics::AluaGroupValues> groups;
        groups.reserve(a->n_groups);
        for (size_t i = 0; i < a->n_groups; ++i)
            groups.push_back({a->groups[i].id, or_empty(a->groups[i].state)});
        m->target.set_alua(
            {a->port_group, or_empty(a->state), or_empty(a->groups_file), a->file_ok != 0, groups});
    });
}

int rbio_metrics_write(rbio_metrics* m, const char* path, char* err, size_t errlen) {
    if (!m->failed.empty()) {
        put(err, errlen, "metrics not written: " + m->failed);
        return -1;
    }
    try {
        rbio::bs::write_file_atomically(path, m->target.text());
        return 0;
    } catch (const std::exception& e) {
        put(err, errlen, e.what());
    } catch (...) {
        put(err, errlen, "unexpected error writing the metrics");
    }
    return -1;
}

void rbio_metrics_remove(const char* path) { ::unlink(path); }

}  // extern "C"
