// rbio bench: a closed-loop load of READ(16)/WRITE(16) at a fixed number in
// flight over one session (or, with several --portal, over one
// MultipathSession of one session per portal), with optional data
// verification.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>

#include "commands.hpp"
#include "latency_histogram.hpp"
#include "options.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "rbio/initiator/multipath.hpp"
#include "rbio/initiator/scsi.hpp"

namespace rbio::cli {
namespace {

using initiator::ErrorKind;
using initiator::InitiatorError;
using Clock = std::chrono::steady_clock;

enum class Mode { Read, Write, RandRead, RandWrite, Mixed };

// --verify's tables (a generation and a busy bit per unit of --bs) stay
// under 1.1 GiB: 1 TiB at 4 KiB. A whole 16 TiB LU at 512 bytes would need
// 132 GiB.
constexpr uint64_t kMaxVerifyUnits = uint64_t(1) << 28;
enum class Op { Read, Write };

struct Config {
    uint64_t lun = 0;
    uint32_t bs = 4096;
    uint32_t iodepth = 32;
    Mode mode = Mode::RandRead;
    std::string mode_name = "randread";
    double seconds = 10;
    bool verify = false;
    uint64_t size = 0;  // bytes of the LU to use; 0 = all
    std::chrono::milliseconds timeout{30000};
};

uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The content of unit `unit` after its write number `gen`: every 8 bytes
// differ, and neither a stale generation nor a misplaced unit matches.
void fill_pattern(std::span<uint8_t> buf, uint64_t unit, uint32_t gen) {
    uint64_t seed = mix64(unit * 0x100000001b3ull ^ (uint64_t(gen) << 40));
    for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
        uint64_t w = mix64(seed + i);
        std::memcpy(buf.data() + i, &w, 8);
    }
}

// Drives `iodepth` slots over the session: each completion records its
// latency, checks its data, and gives its slot to the next I/O at once,
// from inside the completion: the session then sends the I/Os its pass
// freed slots for together (over iSER in the pass's one post).
class Runner {
public:
    // `region` holds iodepth buffers of bs bytes (registered once for iSER).
    // Only --verify keeps a table per unit (see kMaxVerifyUnits): without
    // it, two I/Os may meet on a unit, as fio's do without norandommap.
    Runner(initiator::IoSession& s, const Config& c, uint32_t block_size, uint64_t units,
           std::span<uint8_t> region)
        : s_(s),
          c_(c),
          block_size_(block_size),
          busy_(c.verify ? units : 0, false),
          gen_(c.verify ? units : 0, 0) {
        for (uint32_t i = 0; i < c.iodepth; ++i) bufs_.push_back(region.subspan(size_t(i) * c.bs, c.bs));
    }

    // Runs I/Os from `next` until it says no more (or `seconds` pass when > 0).
    // Returns the I/Os done.
    uint64_t run(const std::function<bool(Op&, uint64_t&)>& next, double seconds, bool progress) {
        const Clock::time_point start = Clock::now();
        const Clock::time_point end =
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        Clock::time_point tick = start + std::chrono::seconds(1);
        uint64_t ios_at_tick = 0, done_before = ios_;
        stop_ = false;
        next_ = &next;
        free_.clear();
        for (uint32_t i = 0; i < c_.iodepth; ++i) free_.push_back(i);
        while (true) {
            refill();
            if (stop_ && free_.size() == c_.iodepth) break;
            s_.run_once(std::chrono::milliseconds(200));
            if (error_) throw InitiatorError(error_->first, error_->second);
            Clock::time_point now = Clock::now();
            if (seconds > 0 && now >= end) stop_ = true;
            if (progress && now >= tick) {
                double secs = std::chrono::duration<double>(now - start).count();
                uint64_t d = ios_ - done_before - ios_at_tick;
                std::string paths = status_ ? status_() : std::string();
                std::fprintf(stderr, "%s[%4.0fs] %s %9.0f IOPS %9.1f MB/s (last second)%s%s",
                             isatty(2) ? "\r" : "", secs, c_.mode_name.c_str(), double(d),
                             double(d) * c_.bs / 1e6, paths.c_str(), isatty(2) ? "" : "\n");
                ios_at_tick = ios_ - done_before;
                tick += std::chrono::seconds(1);
            }
        }
        if (progress && isatty(2)) std::fputc('\n', stderr);
        elapsed_ = std::chrono::duration<double>(Clock::now() - start).count();
        next_ = nullptr;
        return ios_ - done_before;
    }

    bool is_busy(uint64_t u) const { return c_.verify && busy_[u]; }
    uint32_t gen(uint64_t u) const { return gen_[u]; }
    LatencyHistogram& latencies() { return lat_; }
    double elapsed() const { return elapsed_; }
    // The longest time without any completion while I/O was in flight.
    double longest_gap_ms() const { return std::chrono::duration<double, std::milli>(max_gap_).count(); }
    // Appended to each progress line (the paths' states).
    void set_status(std::function<std::string()> f) { status_ = std::move(f); }
    uint64_t verified() const { return verified_; }

private:
    // Starts an I/O on every free slot until the run's source says stop.
    void refill() {
        while (!stop_ && !error_ && !free_.empty()) {
            Op op;
            uint64_t unit;
            if (!(*next_)(op, unit)) {
                stop_ = true;
                break;
            }
            uint32_t slot = free_.back();
            free_.pop_back();
            issue(slot, op, unit);
        }
    }

    void issue(uint32_t slot, Op op, uint64_t unit) {
        if (c_.verify) busy_[unit] = true;
        std::span<uint8_t> buf = bufs_[slot];
        uint32_t g = 0;
        if (op == Op::Write && c_.verify) {
            // 0 is "content unknown": after 2^32 writes the count skips it,
            // or the blocks written then would never be checked.
            if (++write_gen_ == 0) ++write_gen_;
            g = write_gen_;
            fill_pattern(buf, unit, g);
        }
        uint64_t lba = unit * (c_.bs / block_size_);
        uint32_t blocks = c_.bs / block_size_;
        initiator::ScsiCommand cmd = op == Op::Read ? initiator::make_read16(c_.lun, lba, blocks, buf)
                                                    : initiator::make_write16(c_.lun, lba, blocks, buf);
        cmd.timeout = c_.timeout;
        Clock::time_point t0 = Clock::now();
        cmd.done = [this, slot, op, unit, g, t0](const initiator::ScsiOutcome& o) {
            on_done(slot, op, unit, g, t0, o);
        };
        s_.submit(std::move(cmd));
    }

    void on_done(uint32_t slot, Op op, uint64_t unit, uint32_t g, Clock::time_point t0,
                 const initiator::ScsiOutcome& o) {
        // The bound is on unit attentions in a row: every restart of the
        // target brings some (a 25-minute soak with 4 restarts hit 16 in all).
        const size_t bytes = c_.bs;
        if (o.good()) ua_retries_ = 0;
        if (!initiator::good_and_whole(o, bytes)) {
            auto sense = initiator::decode_sense(o.sense);
            if (o.status == initiator::kStatusCheckCondition && sense.valid &&
                sense.key == initiator::kSenseUnitAttention && ua_retries_++ < 16) {
                if (c_.verify) busy_[unit] = false;
                issue(slot, op, unit);  // UNIT ATTENTION: the same I/O again
                return;
            }
            if (!error_)
                error_.emplace(ErrorKind::Io, std::string(op == Op::Read ? "READ(16)" : "WRITE(16)") +
                                                  " of LBA " + std::to_string(unit * (c_.bs / block_size_)) +
                                                  " failed: " + initiator::describe(o, bytes));
        } else if (c_.verify) {
            if (op == Op::Write) {
                gen_[unit] = g;
            } else if (gen_[unit] != 0) {
                expected_.resize(c_.bs);
                fill_pattern(expected_, unit, gen_[unit]);
                std::span<uint8_t> got = bufs_[slot];
                auto diff = std::mismatch(got.begin(), got.end(), expected_.begin());
                if (diff.first != got.end() && !error_)
                    error_.emplace(ErrorKind::Io, "verify: data mismatch at LBA " +
                                                      std::to_string(unit * (c_.bs / block_size_)) +
                                                      " byte " + std::to_string(diff.first - got.begin()) +
                                                      " of " + std::to_string(c_.bs) + " (write #" +
                                                      std::to_string(gen_[unit]) + ")");
                ++verified_;
            }
        }
        const Clock::time_point now = Clock::now();
        lat_.record(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - t0).count()));
        max_gap_ = std::max(max_gap_, now - std::max(last_done_, t0));
        last_done_ = now;
        if (c_.verify) busy_[unit] = false;
        ++ios_;
        free_.push_back(slot);
        refill();
    }

    initiator::IoSession& s_;
    const Config& c_;
    std::function<std::string()> status_;
    Clock::time_point last_done_{};
    Clock::duration max_gap_{};
    uint32_t block_size_;
    std::vector<bool> busy_;
    std::vector<uint32_t> gen_;  // 0: content unknown
    std::vector<std::span<uint8_t>> bufs_;
    std::vector<uint8_t> expected_;
    std::vector<uint32_t> free_;                                 // slots without an I/O
    const std::function<bool(Op&, uint64_t&)>* next_ = nullptr;  // the running run()'s source
    bool stop_ = false;
    LatencyHistogram lat_;
    std::optional<std::pair<ErrorKind, std::string>> error_;
    uint32_t write_gen_ = 0;
    uint64_t ios_ = 0;
    uint64_t verified_ = 0;
    uint32_t ua_retries_ = 0;
    double elapsed_ = 0;
};

Config parse_config(const Args& args) {
    Config c;
    if (args.has("--lun")) c.lun = parse_uint("--lun", args.get("--lun"), 0, 16383);
    if (args.has("--bs")) {
        // Checked before it narrows: 4194305k would wrap to 1024.
        const uint64_t bs = parse_size("--bs", args.get("--bs"));
        if (bs < 512 || bs > (16u << 20) || bs % 512)
            throw UsageError("--bs: a multiple of 512 from 512 to 16M");
        c.bs = uint32_t(bs);
    }
    if (args.has("--iodepth")) c.iodepth = uint32_t(parse_uint("--iodepth", args.get("--iodepth"), 1, 1024));
    if (args.has("--time")) c.seconds = double(parse_uint("--time", args.get("--time"), 1, 86400));
    if (args.has("--timeout"))
        c.timeout = std::chrono::milliseconds(parse_uint("--timeout", args.get("--timeout"), 1, 3600) * 1000);
    if (args.has("--size")) c.size = parse_size("--size", args.get("--size"));
    c.verify = args.has("--verify");
    c.mode_name = args.get("--rw", "randread");
    if (c.mode_name == "read") c.mode = Mode::Read;
    else if (c.mode_name == "write") c.mode = Mode::Write;
    else if (c.mode_name == "randread") c.mode = Mode::RandRead;
    else if (c.mode_name == "randwrite") c.mode = Mode::RandWrite;
    else if (c.mode_name == "rw") c.mode = Mode::Mixed;
    else throw UsageError("--rw: read, write, randread, randwrite or rw");
    return c;
}

}  // namespace

int bench_main(int argc, char** argv) {
    Args args(argc, argv, 1, {"--verify"});
    args.allow_only({"--portal", "--target", "--lun", "--bs", "--iodepth", "--rw", "--time", "--verify",
                     "--size", "--timeout"});
    if (!args.has("--portal") || !args.has("--target"))
        throw UsageError("bench needs -T IQN and -p HOST[:PORT]");
    Config c = parse_config(args);
    std::vector<initiator::Portal> portals = portal_options(args);
    initiator::SessionOptions opts = session_options(args);
    if (portals.size() > 1 && opts.transport != initiator::Transport::Tcp)
        throw UsageError("several --portal work over --transport tcp only");
    opts.target_name = args.get("--target");
    // Our MaxRecvDataSegmentLength: a whole I/O per Data-In up to 256 KiB
    // (larger PDUs measured slower: the target builds them whole before sending).
    opts.offer.max_recv_data_segment_length = std::clamp<uint32_t>(c.bs, 65536, 256u << 10);
    opts.rx_buffer_bytes = std::max<size_t>(1u << 20, 4 * size_t(opts.offer.max_recv_data_segment_length));
    // The I/O buffers, one region made before the session (iSER registers
    // it once per connection, and it must outlive the session).
    std::vector<uint8_t> io_memory;
    try {
        io_memory.resize(size_t(c.iodepth) * c.bs);
    } catch (const std::bad_alloc&) {
        throw UsageError("--iodepth " + std::to_string(c.iodepth) + " x --bs " + std::to_string(c.bs) + ": " +
                         std::to_string((size_t(c.iodepth) * c.bs) >> 20) +
                         " MiB of I/O buffers, more than this host can allocate");
    }
    opts.iser_regions = {std::span<uint8_t>(io_memory)};
    std::unique_ptr<initiator::IoSession> session;
    initiator::MultipathSession* mp = nullptr;
    if (portals.size() == 1) {
        session = initiator::Session::login(portals.front(), opts);
    } else {
        initiator::MultipathOptions mo;
        mo.session = opts;
        mo.lun = c.lun;
        // --replacement-timeout: how long I/O waits for a path.
        mo.no_path_timeout = opts.replacement_timeout;
        std::unique_ptr<initiator::MultipathSession> m;
        try {
            m = initiator::MultipathSession::open(portals, mo);
        } catch (const std::invalid_argument& e) {
            // The options' fault (more than 16 portals, a replacement
            // timeout of 0), found before any login: a usage error.
            throw UsageError(e.what());
        }
        mp = m.get();
        session = std::move(m);
    }

    initiator::test_unit_ready(*session, c.lun);
    initiator::Capacity cap = initiator::read_capacity16(*session, c.lun);
    if (c.bs % cap.block_size)
        throw UsageError("--bs " + std::to_string(c.bs) + " is not a multiple of the LU's block size " +
                         std::to_string(cap.block_size));
    uint64_t region = c.size ? std::min(c.size, cap.bytes()) : cap.bytes();
    uint64_t units = region / c.bs;
    if (units < 2ull * c.iodepth)
        throw UsageError("the LU region holds " + std::to_string(units) + " blocks of " +
                         std::to_string(c.bs) + " bytes; need at least 2 x iodepth");
    if (c.verify && units > kMaxVerifyUnits)
        throw UsageError("--verify keeps a table of 4 bytes per block of --bs: the LU region holds " +
                         std::to_string(units) + " of " + std::to_string(c.bs) +
                         " bytes; use --size (at most " + std::to_string(kMaxVerifyUnits) +
                         " blocks) or a larger --bs");
    RBIO_LOG(Info, "LUN " << c.lun << ": " << cap.blocks << " blocks of " << cap.block_size
                          << " bytes; using " << units << " x " << c.bs << " bytes");

    Runner runner(*session, c, cap.block_size, units, io_memory);
    if (mp)
        runner.set_status([mp] {
            std::string s = " paths";
            for (const auto& p : mp->multipath_stats().paths)
                s += " " + p.portal + "=" + initiator::short_state(p) + ":" + std::to_string(p.commands);
            return s;
        });
    std::mt19937_64 rng(0x7262696f);
    bool reads = c.mode == Mode::Read || c.mode == Mode::RandRead || c.mode == Mode::Mixed;

    if (c.verify && reads) {
        // Known content first, so every read can be checked.
        uint64_t u = 0;
        std::fprintf(stderr, "rbio bench: writing %llu blocks for --verify\n", (unsigned long long)units);
        runner.run(
            [&](Op& op, uint64_t& unit) {
                if (u == units) return false;
                op = Op::Write;
                unit = u++;
                return true;
            },
            0, false);
    }
    runner.latencies().clear();

    auto before = session->stats();
    uint64_t cursor = 0;
    auto next = [&](Op& op, uint64_t& unit) {
        switch (c.mode) {
            case Mode::Read: op = Op::Read; break;
            case Mode::Write: op = Op::Write; break;
            case Mode::RandRead: op = Op::Read; break;
            case Mode::RandWrite: op = Op::Write; break;
            case Mode::Mixed: op = (rng() & 1) ? Op::Read : Op::Write; break;
        }
        bool sequential = c.mode == Mode::Read || c.mode == Mode::Write;
        do {
            unit = sequential ? cursor++ % units : rng() % units;
        } while (runner.is_busy(unit));
        return true;
    };
    uint64_t ios = runner.run(next, c.seconds, true);
    double secs = runner.elapsed();
    auto after = session->stats();
    const LatencyHistogram lat = runner.latencies();

    uint64_t checked = runner.verified();
    if (c.verify && c.mode != Mode::Read && c.mode != Mode::RandRead) {
        uint64_t u = 0;
        runner.run(
            [&](Op& op, uint64_t& unit) {
                while (u < units && runner.gen(u) == 0) ++u;
                if (u == units) return false;
                op = Op::Read;
                unit = u++;
                return true;
            },
            0, false);
        checked = runner.verified();
    }
    initiator::synchronize_cache10(*session, c.lun);
    session->logout();

    iser::ConnectionCounters d = after.transport;
    d -= before.transport;
    uint64_t polls = after.poll_calls - before.poll_calls;
    uint64_t syscalls = d[iser::Counter::RecvCalls] + d[iser::Counter::SendCalls] + polls;
    std::printf("rbio bench: %s bs=%u iodepth=%u lun=%llu time=%.2fs%s\n", c.mode_name.c_str(), c.bs,
                c.iodepth, (unsigned long long)c.lun, secs, c.verify ? " verify" : "");
    std::printf("  session:   %s\n", initiator::describe(session->params()).c_str());
    std::printf("  ios=%llu iops=%.0f MB/s=%.1f\n", (unsigned long long)ios, double(ios) / secs,
                double(ios) * c.bs / secs / 1e6);
    double p50 = lat.percentile_us(50), p99 = lat.percentile_us(99), p999 = lat.percentile_us(99.9);
    std::printf("  latency_us: p50=%.1f p99=%.1f p99.9=%.1f\n", p50, p99, p999);
    std::printf(
        "  transport: pdus_out=%llu pdus_in=%llu send_calls=%llu recv_calls=%llu poll_calls=%llu "
        "pdus_per_send=%.2f pdus_per_recv=%.2f syscalls_per_io=%.2f\n",
        (unsigned long long)d[iser::Counter::PdusOut], (unsigned long long)d[iser::Counter::PdusIn],
        (unsigned long long)d[iser::Counter::SendCalls], (unsigned long long)d[iser::Counter::RecvCalls],
        (unsigned long long)polls, d.pdus_per_send(), d.pdus_per_recv(),
        ios ? double(syscalls) / double(ios) : 0.0);
    if (opts.transport == initiator::Transport::Iser)
        std::printf(
            "  iser: work_requests=%llu post_calls=%llu wrs_per_post=%.2f signaled_per_io=%.3f "
            "completions_per_poll=%.2f channel_wakeups_per_io=%.3f recv_posts=%llu\n",
            (unsigned long long)d[iser::Counter::WorkRequests],
            (unsigned long long)d[iser::Counter::PostCalls], d.wrs_per_post(),
            ios ? double(d[iser::Counter::Signaled]) / double(ios) : 0.0, d.completions_per_poll(),
            ios ? double(d[iser::Counter::ChannelWakeups]) / double(ios) : 0.0,
            (unsigned long long)d[iser::Counter::RecvPostCalls]);
    initiator::SessionStats end = session->stats();
    std::printf(
        "  recovery: reinstatements=%llu reconnect_attempts=%llu commands_retried=%llu pings=%llu "
        "pings_answered=%llu tasks_aborted=%llu lun_resets=%llu\n",
        (unsigned long long)end.reinstatements, (unsigned long long)end.reconnect_attempts,
        (unsigned long long)end.commands_retried, (unsigned long long)end.pings_sent,
        (unsigned long long)end.pings_answered, (unsigned long long)end.tasks_aborted,
        (unsigned long long)end.lun_resets);
    if (mp) {
        initiator::MultipathStats m = mp->multipath_stats();
        std::printf(
            "  multipath: paths=%zu failovers=%llu commands_moved=%llu resends=%llu last_failover_ms=%.1f "
            "max_failover_ms=%.1f longest_io_gap_ms=%.1f last_fence_ms=%.1f max_fence_ms=%.1f\n",
            m.paths.size(), (unsigned long long)m.failovers, (unsigned long long)m.commands_moved,
            (unsigned long long)m.resends, m.last_failover_ms, m.max_failover_ms, runner.longest_gap_ms(),
            m.last_fence_ms, m.max_fence_ms);
        for (const std::string& line : mp->describe_paths()) std::printf("  path %s\n", line.c_str());
    }
    if (c.verify) std::printf("  verify: %llu blocks read back and matched\n", (unsigned long long)checked);
    return kExitOk;
}

}  // namespace rbio::cli
