#include "rbio/bs/alua_groups_reader.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>
#include <condition_variable>
#include <mutex>

#include "rbio/common/unique_fd.hpp"

namespace rbio::bs::alua {

namespace {

int read_whole(const std::string& path, std::string& text) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return errno;
    text.clear();
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return 0;
        if (text.size() + size_t(n) > GroupsFileReader::kMaxBytes) return EFBIG;
        text.append(buf, size_t(n));
    }
}

}  // namespace

struct GroupsFileReader::Shared {
    std::mutex m;
    std::condition_variable cv;
    bool requested = false;  // a read is asked for, not yet begun
    bool busy = false;       // the thread is reading
    bool done = false;       // `result` is new
    bool stop = false;
    std::chrono::steady_clock::time_point asked;
    Result result;
};

GroupsFileReader::GroupsFileReader(std::string path)
    : path_(std::move(path)), shared_(std::make_shared<Shared>()), thread_(run, shared_, path_) {}

GroupsFileReader::~GroupsFileReader() {
    bool reading;
    {
        std::lock_guard l(shared_->m);
        shared_->stop = true;
        reading = shared_->busy;
    }
    shared_->cv.notify_all();
    // A thread not reading sees `stop` at once; one held by a file system
    // that does not answer would hold tgtd's exit with it.
    if (reading) thread_.detach();
    else thread_.join();
}

void GroupsFileReader::run(std::shared_ptr<Shared> s, const std::string& path) {
    // tgtd's signals are for its event loop, never for this thread.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::unique_lock l(s->m);
    for (;;) {
        s->cv.wait(l, [&] { return s->requested || s->stop; });
        if (s->stop) return;
        s->requested = false;
        s->busy = true;
        l.unlock();
        Result r;
        try {
            r.err = read_whole(path, r.text);
        } catch (const std::bad_alloc&) {
            r.err = ENOMEM;
        }
        l.lock();
        s->busy = false;
        s->result = std::move(r);
        s->done = true;
        s->cv.notify_all();
    }
}

std::optional<GroupsFileReader::Result> GroupsFileReader::read(std::chrono::milliseconds wait) {
    std::unique_lock l(shared_->m);
    if (!shared_->done) {
        // A read started by an earlier call and still out: its file system
        // is slow or not answering, and waiting again would stall the
        // caller once per call for as long as that lasts.
        if (shared_->busy || shared_->requested) return std::nullopt;
        shared_->requested = true;
        shared_->asked = std::chrono::steady_clock::now();
        shared_->cv.notify_all();
    }
    if (!shared_->cv.wait_for(l, wait, [&] { return shared_->done; })) return std::nullopt;
    shared_->done = false;
    return std::move(shared_->result);
}

std::chrono::steady_clock::duration GroupsFileReader::waiting() const {
    std::lock_guard l(shared_->m);
    if (!shared_->busy && !shared_->requested) return {};
    return std::chrono::steady_clock::now() - shared_->asked;
}

}  // namespace rbio::bs::alua
