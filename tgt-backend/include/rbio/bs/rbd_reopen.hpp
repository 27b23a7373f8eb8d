#pragma once
// Opening an RBD image again after the cluster fenced this gateway's client
// (another gateway broke its lock, which blocklists it; rbd_reopen=auto).
//
// librbd's open waits for the cluster (up to rbd_timeout per attempt), so
// it runs on a thread of its own, never in tgtd's event loop. A gateway
// fenced because it had lost the cluster, and not only its hosts, cannot
// open the image either until the cluster is back: a failed attempt is
// followed by another after a pause that doubles from 1 s up to 30 s, until
// one succeeds or the LU closes, so that the gateway serves again without
// a restart. tgtd's loop hears of every outcome through `wake` (the
// engine's eventfd) and takes it with take().
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "rbio/bs/rbd_image.hpp"

namespace rbio::bs {

class RbdReopen {
public:
    // Builds the new client; throws std::exception with the reason. What it
    // returns without throwing counts as opened (the engine's opener never
    // returns null).
    using Opener = std::function<std::unique_ptr<RbdImage>()>;
    struct Pauses {
        std::chrono::milliseconds first{1000};
        std::chrono::milliseconds max{30000};
    };
    struct Failure {
        unsigned attempt = 0;
        std::string why;
        std::chrono::milliseconds next_in{0};  // the pause before the next attempt
    };
    // What happened since the last take(): the attempts that failed, and the
    // image once one succeeded (then the thread has ended).
    struct News {
        std::vector<Failure> failures;
        std::unique_ptr<RbdImage> image;
        bool opened = false;
    };

    RbdReopen() = default;
    ~RbdReopen() { stop(); }
    RbdReopen(const RbdReopen&) = delete;
    RbdReopen& operator=(const RbdReopen&) = delete;

    // Starts attempting (after stopping attempts that are still running).
    // Throws std::system_error if no thread can be started.
    void start(Opener open, std::function<void()> wake, Pauses pauses);
    void start(Opener open, std::function<void()> wake);  // the pauses above: 1 s doubling up to 30 s
    // Cheap enough for every pass of the event loop: one atomic load.
    bool has_news() const noexcept { return news_.load(std::memory_order_acquire); }
    News take();
    // Ends the attempts and waits for the thread: an attempt in progress
    // first runs to its end (librados cannot be interrupted; rbd_timeout
    // bounds its connection, as at the LU's creation). Its outcome is left
    // for take().
    void stop() noexcept;

    // The pause after failed attempt `attempt` (1, 2, ...).
    static std::chrono::milliseconds pause_after(unsigned attempt, const Pauses& p) noexcept;

private:
    void run(const std::stop_token& stop, const Opener& open, const std::function<void()>& wake,
             Pauses pauses);

    std::mutex m_;
    std::condition_variable_any paused_;
    News news_pending_;
    std::atomic<bool> news_{false};
    std::jthread worker_;  // last: stopped and joined before the rest goes
};

}  // namespace rbio::bs
