#include "rbio/iser/rdma/verbs.hpp"

#include <cerrno>
#include <cstring>

namespace rbio::iser::rdma {

RdmaError::RdmaError(const std::string& what, int err)
    : std::runtime_error(what + ": " + std::strerror(err)), err_(err) {}

void throw_rdma(const std::string& what, int err) {
    throw RdmaError(what, err != 0 ? err : (errno != 0 ? errno : EIO));
}

CmQp::CmQp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr& attr) {
    if (rdma_create_qp(id, pd, &attr) != 0) throw_rdma("rdma_create_qp");
    id_ = id;
}

CmQp& CmQp::operator=(CmQp&& o) noexcept {
    if (this != &o) {
        reset();
        id_ = o.id_;
        o.id_ = nullptr;
    }
    return *this;
}

void CmQp::reset() {
    if (id_) {
        rdma_destroy_qp(id_);
        id_ = nullptr;
    }
}

CmEvent next_cm_event(rdma_event_channel* channel) {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(channel, &e) != 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return CmEvent();
        throw_rdma("rdma_get_cm_event");
    }
    return CmEvent(e);
}

const char* wc_status_name(ibv_wc_status s) { return ibv_wc_status_str(s); }

}  // namespace rbio::iser::rdma
