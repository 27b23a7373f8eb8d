// The process's data-buffer total and the rule that keeps it
// (rbio/bs/data_budget.h). Runs only when a buffer would pass the total:
// a walk over the connections is fine there.
#include "rbio/bs/data_budget.h"

#include <cstdio>

extern "C" {

struct rbio_data_total rbio_all_data = {0, 0, nullptr};
}

namespace {

constexpr size_t kMiB = size_t(1) << 20;

size_t mib_up(size_t bytes) { return (bytes + kMiB - 1) / kMiB; }

// The bytes the total's rule counts: those of connections not closing.
size_t counted() {
    size_t closing = 0;
    for (const rbio_data_budget* c = rbio_all_data.first; c; c = c->next)
        if (c->closing) closing += c->held;
    return rbio_all_data.held - closing;
}

bool fits(size_t held, size_t size) {
    const size_t limit = rbio_all_data.limit;
    return held <= limit && size <= limit - held;
}

// The connection other than b, not closing, that holds the most.
rbio_data_budget* largest_other(const rbio_data_budget* b) {
    rbio_data_budget* most = nullptr;
    for (rbio_data_budget* c = rbio_all_data.first; c; c = c->next)
        if (c != b && !c->closing && (!most || c->held > most->held)) most = c;
    return most;
}

// What closing every connection that holds more than b would free: the
// most the rule may take from others for b.
size_t held_by_larger(const rbio_data_budget* b) {
    size_t bytes = 0;
    for (const rbio_data_budget* c = rbio_all_data.first; c; c = c->next)
        if (c != b && !c->closing && c->held > b->held) bytes += c->held;
    return bytes;
}

}  // namespace

extern "C" {

void rbio_data_total_set_limit_mib(unsigned mib) { rbio_all_data.limit = size_t(mib) * kMiB; }

void rbio_data_budget_join(rbio_data_budget* b, void (*close)(void*, const char*), void* ctx) {
    b->close = close;
    b->ctx = ctx;
    b->closing = 0;
    b->prev = nullptr;
    b->next = rbio_all_data.first;
    if (b->next) b->next->prev = b;
    rbio_all_data.first = b;
}

void rbio_data_budget_leave(rbio_data_budget* b) {
    if (b->prev) b->prev->next = b->next;
    else if (rbio_all_data.first == b) rbio_all_data.first = b->next;
    if (b->next) b->next->prev = b->prev;
    b->prev = b->next = nullptr;
}

int rbio_data_total_make_room(rbio_data_budget* b, size_t size) {
    size_t held = counted();
    if (fits(held, size)) return 1;
    // Others are closed only when that makes room: else b goes (it holds
    // the most, ties included, or the buffer would not fit anyway), or,
    // holding nothing, is served alone as under its own budget, and
    // nobody is closed for a buffer that would pass the total by itself.
    if (!fits(held - held_by_larger(b), size)) {
        if (b->held == 0) return 1;
        b->closing = 1;
        return 0;
    }
    while (!fits(held, size)) {
        // while it does not fit, one holding more than b is left
        rbio_data_budget* most = largest_other(b);
        char why[384];  // three numbers of up to 20 digits each, and the text
        // "Not being closed": one command may close several, and the
        // bytes of those closed before are held until they are freed.
        std::snprintf(
            why, sizeof why,
            "it holds %zu MiB of data buffers, the most of the connections not being closed, and a "
            "command of %zu MiB on another would take tgtd's over data_budget_total_mib=%zu (a host "
            "that does not read its responses keeps their buffers held)",
            mib_up(most->held), mib_up(size), rbio_all_data.limit / kMiB);
        most->closing = 1;
        held -= most->held;
        if (most->close) most->close(most->ctx, why);
    }
    return 1;
}

void rbio_data_budget_why(const rbio_data_budget* b, size_t size, char* out, size_t len) {
    if (!rbio_data_budget_admits(b, size)) {
        std::snprintf(out, len,
                      "a command wants %zu MiB of data buffers while the connection holds %zu MiB, over "
                      "data_budget_mib=%zu (a host that does not read its responses keeps their buffers "
                      "held)",
                      mib_up(size), mib_up(b->held), b->limit / kMiB);
        return;
    }
    // Refused holding the most, or because closing those that hold more
    // would not make room.
    const bool most = held_by_larger(b) == 0;
    std::snprintf(out, len,
                  "a command wants %zu MiB of data buffers while the connection holds %zu MiB%s, and tgtd's "
                  "would go over data_budget_total_mib=%zu%s (a host that does not read its responses keeps "
                  "their buffers held)",
                  mib_up(size), mib_up(b->held), most ? ", the most of any connection" : "",
                  rbio_all_data.limit / kMiB,
                  most ? "" : " even with every connection that holds more closed");
}

}  // extern "C"
