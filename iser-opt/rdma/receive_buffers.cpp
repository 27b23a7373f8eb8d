#include "rbio/iser/rdma/receive_buffers.hpp"

#include <cerrno>
#include <string>

#include "rbio/iser/iser_header.hpp"
#include "rbio/iser/pdu.hpp"

namespace rbio::iser::rdma {
namespace {

constexpr size_t kHead = kIserHeaderLength + kBhsLength;

}  // namespace

ReceiveBuffers::ReceiveBuffers(ibv_pd* pd, uint32_t count, size_t message_size, RecvBufferSource* source)
    : message_size_(message_size),
      source_(source),
      heads_(pd, source ? kHead : message_size, count, IBV_ACCESS_LOCAL_WRITE),
      sges_(count) {
    for (uint32_t i = 0; i < count; ++i)
        sges_[i][0] = ibv_sge{reinterpret_cast<uintptr_t>(heads_.data(i)),
                              uint32_t(source_ ? kHead : message_size_), heads_.lkey()};
    if (!source_) return;
    parts_.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
        parts_.push_back(source_->acquire(message_size_ - kHead));
        if (!parts_.back().data) {
            parts_.pop_back();
            for (auto& p : parts_) source_->release(p.data);
            throw_rdma("receive buffers: no registered buffer of " + std::to_string(message_size_ - kHead) +
                           " bytes for receive " + std::to_string(i),
                       ENOMEM);
        }
        set_part(i, parts_.back());
    }
}

void ReceiveBuffers::set_part(uint32_t slot, const RecvBufferSource::Buffer& b) {
    sges_[slot][1] = ibv_sge{reinterpret_cast<uintptr_t>(b.data), uint32_t(message_size_ - kHead), b.lkey};
}

ReceiveBuffers::~ReceiveBuffers() {
    for (auto& p : parts_) source_->release(p.data);
}

uint8_t* ReceiveBuffers::take(uint32_t slot, size_t min_size) {
    if (!source_ || parts_[slot].size < min_size) return nullptr;
    auto fresh = source_->acquire(message_size_ - kHead);
    if (!fresh.data) return nullptr;
    uint8_t* taken = parts_[slot].data;
    parts_[slot] = fresh;
    set_part(slot, fresh);
    return taken;
}

}  // namespace rbio::iser::rdma
