// extern "C" entry points for the ALUA glue. Each one catches everything:
// no C++ exception may unwind into tgtd.
#include "rbio/bs/alua.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "rbio/bs/alua.hpp"
#include "rbio/bs/alua_gateway.hpp"
#include "rbio/bs/metrics.h"

struct rbio_alua {
    explicit rbio_alua(rbio::bs::alua::Settings s) : gateway(std::move(s)) {}
    rbio::bs::alua::Gateway gateway;
};

static_assert(RBIO_ALUA_PORT_DESIGNATORS == rbio::bs::alua::port_designators_size);
static_assert(RBIO_ALUA_INQUIRY_TPGS == rbio::bs::alua::inquiry_tpgs_implicit);

namespace {

void put_msg(char* buf, size_t len, const char* msg) {
    if (buf && len) std::snprintf(buf, len, "%s", msg);
}

}  // namespace

extern "C" {

int rbio_alua_create(rbio_alua** out, char* err, size_t errlen) {
    *out = nullptr;
    try {
        auto s = rbio::bs::alua::load_settings();
        if (!s.enabled()) return 0;
        // The groups file is first read by the first rbio_alua_poll, whose
        // caller logs what is wrong with it.
        *out = std::make_unique<rbio_alua>(std::move(s)).release();
        return 0;
    } catch (const std::exception& e) {
        put_msg(err, errlen, e.what());
    } catch (...) {
        put_msg(err, errlen, "unexpected error reading the ALUA settings");
    }
    return -1;
}

void rbio_alua_destroy(rbio_alua* a) { std::unique_ptr<rbio_alua> owned(a); }

enum rbio_alua_poll rbio_alua_poll(rbio_alua* a, unsigned wait_ms, char* msg, size_t msglen) {
    using Poll = rbio::bs::alua::Gateway::Poll;
    try {
        switch (a->gateway.poll(std::chrono::milliseconds(wait_ms))) {
            case Poll::unchanged: return RBIO_ALUA_UNCHANGED;
            case Poll::changed: return RBIO_ALUA_CHANGED;
            case Poll::bad: put_msg(msg, msglen, a->gateway.message().c_str()); return RBIO_ALUA_BAD;
            case Poll::answering:
                put_msg(msg, msglen, a->gateway.message().c_str());
                return RBIO_ALUA_ANSWERING;
        }
    } catch (const std::exception& e) {
        put_msg(msg, msglen, e.what());
    } catch (...) {
        put_msg(msg, msglen, "unexpected error reading the ALUA groups file");
    }
    return RBIO_ALUA_BAD;
}

int rbio_alua_check(const rbio_alua* a, const uint8_t* cdb, uint32_t cdb_len, int atomic_caw, int unavailable,
                    uint8_t* key, uint16_t* asc) {
    const auto state = unavailable ? rbio::bs::alua::State::unavailable : a->gateway.own_state();
    auto r = rbio::bs::alua::check_access(state, {cdb, cdb_len}, atomic_caw != 0);
    if (!r) return 0;
    *key = r->key;
    *asc = r->asc;
    return 1;
}

int rbio_alua_refused_everywhere(uint8_t op) { return rbio::bs::alua::refused_everywhere(op) ? 1 : 0; }

int rbio_alua_is_rtpg(const uint8_t* cdb, uint32_t cdb_len) {
    return rbio::bs::alua::is_report_target_port_groups({cdb, cdb_len}) ? 1 : 0;
}

long rbio_alua_rtpg(const rbio_alua* a, const uint8_t* cdb, uint32_t cdb_len, int unavailable, uint8_t* buf,
                    size_t len) {
    auto n = rbio::bs::alua::report_target_port_groups(
        a->gateway.groups(), {cdb, cdb_len}, a->gateway.changed_implicitly(), {buf, len},
        unavailable ? std::optional<uint16_t>(a->gateway.port_group()) : std::nullopt);
    return n ? long(*n) : -1;
}

size_t rbio_alua_port_designators(const rbio_alua* a, uint8_t* buf, size_t len) {
    return rbio::bs::alua::port_designators(a->gateway.port_group(), {buf, len});
}

int rbio_alua_backing_check(const rbio_alua*, int fd, int oflags, char* err, size_t errlen) {
    try {
        auto problem = rbio::bs::alua::shared_backing_problem(fd, oflags);
        if (!problem) return 0;
        put_msg(err, errlen, problem->c_str());
    } catch (...) {
        put_msg(err, errlen, "cannot check the backing store");
    }
    return -1;
}

void rbio_alua_describe(const rbio_alua* a, char* buf, size_t len) {
    try {
        put_msg(buf, len, a->gateway.describe().c_str());
    } catch (...) {
        put_msg(buf, len, "(cannot describe the ALUA state)");
    }
}

void rbio_alua_add_metrics(const rbio_alua* a, rbio_metrics* m) {
    using rbio::bs::alua::state_name;
    try {
        const auto& gw = a->gateway;
        // state_name gives views of static strings: NUL-terminated.
        std::vector<rbio_metrics_alua_group> groups;
        groups.reserve(gw.groups().size());
        for (const auto& g : gw.groups()) groups.push_back({g.id, state_name(g.state).data()});
        const rbio_metrics_alua v{gw.port_group(),
                                  state_name(gw.own_state()).data(),
                                  gw.settings().groups_file.c_str(),
                                  gw.file_ok() ? 1 : 0,
                                  groups.data(),
                                  groups.size()};
        rbio_metrics_set_alua(m, &v);
    } catch (...) {
        // Out of memory: this second's file lacks the ALUA families.
    }
}

}  // extern "C"
