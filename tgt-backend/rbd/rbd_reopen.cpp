#include "rbio/bs/rbd_reopen.hpp"

#include <algorithm>
#include <exception>
#include <utility>

namespace rbio::bs {

std::chrono::milliseconds RbdReopen::pause_after(unsigned attempt, const Pauses& p) noexcept {
    auto pause = p.first;
    for (unsigned i = 1; i < attempt && pause < p.max; ++i) pause *= 2;
    return std::min(pause, p.max);
}

void RbdReopen::start(Opener open, std::function<void()> wake, Pauses pauses) {
    stop();
    {
        std::lock_guard lock(m_);
        news_pending_ = News{};
        news_.store(false, std::memory_order_relaxed);
    }
    worker_ = std::jthread([this, open = std::move(open), wake = std::move(wake),
                            pauses](const std::stop_token& st) { run(st, open, wake, pauses); });
}

void RbdReopen::start(Opener open, std::function<void()> wake) {
    start(std::move(open), std::move(wake), Pauses{});
}

void RbdReopen::run(const std::stop_token& stop, const Opener& open, const std::function<void()>& wake,
                    Pauses pauses) {
    for (unsigned attempt = 1;; ++attempt) {
        std::unique_ptr<RbdImage> image;
        std::string why;
        try {
            image = open();
        } catch (const std::exception& e) {
            why = e.what();
            if (why.empty()) why = "failed (no reason given)";
        }
        const bool opened = why.empty();
        const auto next_in = pause_after(attempt, pauses);
        {
            std::lock_guard lock(m_);
            if (opened) {
                news_pending_.image = std::move(image);
                news_pending_.opened = true;
            } else {
                news_pending_.failures.push_back(Failure{attempt, std::move(why), next_in});
            }
            news_.store(true, std::memory_order_release);
        }
        wake();
        if (opened) return;
        std::unique_lock lock(m_);
        // Returns early only when stop() is requested.
        if (paused_.wait_for(lock, stop, next_in, [] { return false; }) || stop.stop_requested()) return;
    }
}

RbdReopen::News RbdReopen::take() {
    std::lock_guard lock(m_);
    News out = std::move(news_pending_);
    news_pending_ = News{};
    news_.store(false, std::memory_order_relaxed);
    return out;
}

void RbdReopen::stop() noexcept {
    if (!worker_.joinable()) return;
    worker_.request_stop();
    worker_.join();
}

}  // namespace rbio::bs
