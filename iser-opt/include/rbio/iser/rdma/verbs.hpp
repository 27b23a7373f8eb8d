#pragma once
// Ownership of RDMA CM and verbs objects. Every object a connection or device
// creates is held by one of these handles, so an error thrown half-way
// through setting a connection up releases what was made so far, in the
// reverse order of creation (members are declared in creation order).
//
// Teardown order the verbs impose, which the declaring classes follow:
// QP before its CQs and SRQ, CQs before their completion channel, MRs before
// their PD, the CM id after its QP and before its event channel, and every CQ
// event acknowledged before the CQ is destroyed (CompletionPoller does that).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace rbio::iser::rdma {

// A verbs or CM call failed: what was being done, and errno's text.
class RdmaError : public std::runtime_error {
public:
    RdmaError(const std::string& what, int err);
    int error_code() const { return err_; }

private:
    int err_;
};

// Throws RdmaError("<what>: <strerror(err)>"), err defaulting to errno.
[[noreturn]] void throw_rdma(const std::string& what, int err = 0);

struct EventChannelDeleter {
    void operator()(rdma_event_channel* c) const { rdma_destroy_event_channel(c); }
};
struct CmIdDeleter {
    void operator()(rdma_cm_id* id) const { rdma_destroy_id(id); }
};
struct PdDeleter {
    void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); }
};
struct MrDeleter {
    void operator()(ibv_mr* mr) const { ibv_dereg_mr(mr); }
};
struct CompChannelDeleter {
    void operator()(ibv_comp_channel* c) const { ibv_destroy_comp_channel(c); }
};
struct CqDeleter {
    void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
};
struct SrqDeleter {
    void operator()(ibv_srq* srq) const { ibv_destroy_srq(srq); }
};

using EventChannelPtr = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, CmIdDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using SrqPtr = std::unique_ptr<ibv_srq, SrqDeleter>;

// The QP an rdma_cm_id owns (rdma_create_qp); destroyed with rdma_destroy_qp
// while the id lives on, so a CM id can outlive its QP during teardown.
class CmQp {
public:
    CmQp() = default;
    CmQp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr& attr);  // throws RdmaError
    CmQp(CmQp&& o) noexcept : id_(o.id_) { o.id_ = nullptr; }
    CmQp& operator=(CmQp&& o) noexcept;
    CmQp(const CmQp&) = delete;
    CmQp& operator=(const CmQp&) = delete;
    ~CmQp() { reset(); }

    ibv_qp* get() const { return id_ ? id_->qp : nullptr; }
    void reset();

private:
    rdma_cm_id* id_ = nullptr;
};

// A CM event that is acknowledged (rdma_ack_cm_event) when it goes out of
// scope; the event's id and private data are valid until then.
class CmEvent {
public:
    CmEvent() = default;
    explicit CmEvent(rdma_cm_event* e) : e_(e) {}
    CmEvent(CmEvent&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
    CmEvent& operator=(CmEvent&&) = delete;
    CmEvent(const CmEvent&) = delete;
    ~CmEvent() {
        if (e_) rdma_ack_cm_event(e_);
    }
    rdma_cm_event* operator->() const { return e_; }
    rdma_cm_event* get() const { return e_; }
    explicit operator bool() const { return e_ != nullptr; }

private:
    rdma_cm_event* e_ = nullptr;
};

// The next CM event on `channel`: blocks unless the channel's fd is
// non-blocking, in which case an empty CmEvent means none is pending.
CmEvent next_cm_event(rdma_event_channel* channel);

const char* wc_status_name(ibv_wc_status s);

}  // namespace rbio::iser::rdma
