#pragma once
// Reads the ALUA groups file in a thread of its own. The file lives on a
// file system every gateway shares (NFS, CephFS), and when that stops
// answering (a server gone, a metadata server failing over) open() and
// read() block, on a hard NFS mount for as long as it takes. Read from
// tgtd's event loop, that would stop every LU of the gateway, and since
// all gateways read the same file, every gateway at once. Here only the
// reader waits; the event loop waits at most a bounded time per poll.
//
// One read at a time: a poll while a read is under way starts none, so a
// hung file system holds one thread, not one per second.
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace rbio::bs::alua {

class GroupsFileReader {
public:
    // A groups file lists at most a few hundred groups; anything much
    // larger is the wrong file.
    static constexpr size_t kMaxBytes = 64 * 1024;

    // The file as read: err is 0, or the errno that stopped the read
    // (EFBIG: too large to be a groups file).
    struct Result {
        int err = 0;
        std::string text;
    };

    // std::system_error when the thread cannot be started.
    explicit GroupsFileReader(std::string path);
    // Does not wait for a read that has not returned: the thread is left
    // to finish it alone (it owns what it touches).
    ~GroupsFileReader();
    GroupsFileReader(const GroupsFileReader&) = delete;
    GroupsFileReader& operator=(const GroupsFileReader&) = delete;

    // The result of a read that returned since the last call (it may have
    // started at an earlier call), else starts a read and waits up to
    // `wait` for it. nullopt: the read has not returned; a call while one
    // started earlier is still out returns at once.
    std::optional<Result> read(std::chrono::milliseconds wait);
    // How long the read under way has been waiting; zero when none is.
    std::chrono::steady_clock::duration waiting() const;

    const std::string& path() const { return path_; }

private:
    struct Shared;
    static void run(std::shared_ptr<Shared> s, const std::string& path);

    std::string path_;
    std::shared_ptr<Shared> shared_;
    std::thread thread_;
};

}  // namespace rbio::bs::alua
