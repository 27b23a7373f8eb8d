// extern "C" entry points for the tgt glue. Each one catches everything:
// no C++ exception may unwind into tgtd.
#include "rbio/bs/c_api.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "rbio/bs/engine.hpp"
#include "rbio/bs/error.hpp"
#include "rbio/bs/options.hpp"

struct rbio_bs_lu {
    explicit rbio_bs_lu(const rbio::bs::Options& o, const rbio_bs_hooks& h) : engine(o, h) {}
    rbio::bs::Engine engine;
};

namespace {

void put_err(char* err, size_t len, const char* msg) {
    if (err && len) std::snprintf(err, len, "%s", msg);
}

}  // namespace

extern "C" {

int rbio_bs_lu_create(const char* bsopts, const rbio_bs_hooks* hooks, rbio_bs_lu** out, char* err,
                      size_t errlen) {
    try {
        auto opts = rbio::bs::parse_options(bsopts ? bsopts : "");
        *out = std::make_unique<rbio_bs_lu>(opts, *hooks).release();
        return 0;
    } catch (const std::exception& e) {
        put_err(err, errlen, e.what());
    } catch (...) {
        put_err(err, errlen, "unexpected error creating the LU engine");
    }
    return -1;
}

void rbio_bs_lu_destroy(rbio_bs_lu* lu) {
    std::unique_ptr<rbio_bs_lu> owned(lu);  // the destructor drains; it does not throw
}

int rbio_bs_lu_open(rbio_bs_lu* lu, const char* path, int oflags, int* fd, uint64_t* size, uint32_t* blksize,
                    int* readonly, char* err, size_t errlen) {
    try {
        rbio::bs::OpenedFile f = lu->engine.open(path ? path : "", oflags);
        *fd = f.fd;
        *size = f.size;
        *blksize = f.blksize;
        *readonly = f.readonly ? 1 : 0;
        return 0;
    } catch (const std::exception& e) {
        put_err(err, errlen, e.what());
    } catch (...) {
        put_err(err, errlen, "unexpected error opening the backing file");
    }
    return -1;
}

void rbio_bs_lu_close(rbio_bs_lu* lu) { lu->engine.close(); }

int rbio_bs_lu_event_fd(const rbio_bs_lu* lu) { return lu->engine.event_fd(); }

int rbio_bs_lu_rbd(const rbio_bs_lu* lu) { return lu->engine.rbd() ? 1 : 0; }

uint32_t rbio_bs_lu_max_compare_and_write(const rbio_bs_lu* lu, uint32_t block_shift) {
    return lu->engine.max_compare_and_write_blocks(block_shift);
}

int rbio_bs_lu_thin(const rbio_bs_lu* lu) { return lu->engine.options().thin ? 1 : 0; }

int rbio_bs_lu_fenced(const rbio_bs_lu* lu) { return lu->engine.fenced() ? 1 : 0; }

int rbio_bs_submit(rbio_bs_lu* lu, const rbio_bs_cmd* cmd) { return lu->engine.submit(*cmd); }

int rbio_bs_refuse(rbio_bs_lu* lu, const rbio_bs_cmd* cmd) { return lu->engine.refuse(*cmd); }

int rbio_bs_ends_quiet_session(rbio_bs_lu* lu, const rbio_bs_cmd* cmd) {
    return lu->engine.ends_quiet_session(*cmd) ? 1 : 0;
}

uint32_t rbio_bs_lu_rbd_quiet_s(const rbio_bs_lu* lu) {
    return lu->engine.rbd() ? lu->engine.options().rbd.quiet_limit_s() : 0;
}

void rbio_bs_flush(rbio_bs_lu* lu) { lu->engine.flush(); }

void rbio_bs_on_event(rbio_bs_lu* lu) { lu->engine.on_event(); }

void rbio_bs_lu_stats(const rbio_bs_lu* lu, char* buf, size_t len) {
    try {
        put_err(buf, len, lu->engine.stats().c_str());
    } catch (...) {
        put_err(buf, len, "(stats unavailable)");
    }
}

void rbio_bs_lu_counters(const rbio_bs_lu* lu, rbio_bs_counters* out) {
    const rbio::bs::Counters& k = lu->engine.counters();
    *out = rbio_bs_counters{k.commands,
                            k.reads,
                            k.read_bytes,
                            k.writes,
                            k.written_bytes,
                            k.ios,
                            k.merged,
                            k.inline_ios,
                            k.submit_calls,
                            k.passes,
                            k.reaped_inline,
                            k.reaped_event,
                            k.event_wakeups,
                            k.errors,
                            lu->engine.in_flight(),
                            lu->engine.rbd() ? 1u : 0u,
                            lu->engine.fenced() ? 1u : 0u,
                            k.rbd_lock_takeovers,
                            k.rbd_fences,
                            k.rbd_quiet_ends,
                            k.miscompares};
}

}  // extern "C"
