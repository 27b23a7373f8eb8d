// rbio: the command-line front end of the userspace initiator.
#include <cstring>
#include <iostream>

#include "commands.hpp"
#include "options.hpp"
#include "rbio/initiator/error.hpp"
#include "rbio/initiator/log.hpp"
#include "rbio/version.h"
#include "session_state.hpp"

namespace {

const char kHelp[] = R"(usage: rbio [--log-level LEVEL] COMMAND [OPTIONS]
       rbio --version

commands:
  discover -p HOST[:PORT] [--no-store]
                                 SendTargets discovery; prints "ADDRESS,TPGT IQN" per portal
                                 and stores each as an open-iscsi node record (iscsiadm -m node)
  login -T IQN [-p HOST[:PORT]...] [--mount DIR] [--state-dir DIR]
                                 log in and hold the session in a background process; with
                                 --mount, each disk LU is the file DIR/lun<N> (FUSE): reads and
                                 writes go to the LU, fsync is SYNCHRONIZE CACHE. Returns once
                                 the files are usable. Without -p: the target's node record.
                                 Several -p: gateways of one LU, one session each (multipath
                                 with ALUA, as for bench); rbio session lists the paths.
  logout [-T IQN] [--state-dir DIR]
                                 unmount, synchronize every LU's cache, log out, end the process
                                 (all sessions without -T); refused (12) while a file is open
  session [-T IQN] [--state-dir DIR]
                                 list the sessions: portal, LUs, negotiated parameters, counters
  bench -T IQN -p HOST[:PORT] [-p HOST[:PORT]...]
                                 load one LU over one session and report
        [--lun N] [--bs SIZE] [--iodepth N] [--rw read|write|randread|randwrite|rw]
        [--time S] [--size SIZE] [--verify] [--timeout S]
        --verify writes known data first (for reads) or reads every written
        block back (for writes) and compares it byte for byte.
        Several -p: portals (gateways) of the same LU, one session each
        (multipath, TCP only): I/O goes to the paths whose ALUA state is
        best (active/optimized, else active/non-optimized; REPORT TARGET
        PORT GROUPS), round robin; on a path failure or a NOT READY /
        state-change answer the commands move to another path; a failed
        path logs in again every second and takes I/O back when its state
        is best. --replacement-timeout S: how long I/O waits while no path
        serves it (then exit 10). Prints the paths' states and commands on
        each progress line and per-path counters at the end.
  inquiry -T IQN -p HOST[:PORT] [--lun N] [--vpd PAGE]
                                 identify one LU (default LUN 0): standard INQUIRY, capacity and
                                 the supported VPD pages; --vpd decodes one page: serial (0x80),
                                 devid (0x83), limits (0xb0: transfer and UNMAP limits), lbp
                                 (0xb2: LBPU/LBPWS), supported (0x00), all, or any code in hex
  discard -T IQN -p HOST[:PORT] [--lun N] --offset BYTES --length BYTES [--write-same]
                                 deallocate a range of a thin-provisioned LU with UNMAP (split
                                 to the LU's advertised limits), or with WRITE SAME(16) UNMAP;
                                 offset and length in multiples of the block size, inside
                                 the LU (else exit 2). An LU without UNMAP (Block Limits) or
                                 a command the target refuses: exit 7 with the sense
  target-metrics [--file PATH | --control-port N]
                                 print the metrics tgtd (with rbio's module) writes once a second,
                                 in Prometheus' text format: per LU and per connection. PATH
                                 defaults to RBIO_METRICS_FILE, else metrics_file of
                                 /etc/rbio/tgtd.conf (or $RBIO_CONFIG), its %c being N (the
                                 tgtd's control port, tgtadm -C; 0 by default); none: exit 14

options of every command that logs in:
  --initiator-name IQN           (default: InitiatorName of /etc/iscsi/initiatorname.iscsi,
                                 else iqn.2026-11.io.rbio:initiator)
  --chap-user NAME --chap-secret SECRET   one-way CHAP (or the secret in RBIO_CHAP_SECRET)
  --chap-user-in NAME --chap-secret-in SECRET
                                 mutual CHAP (with --chap-user): the target must answer the
                                 initiator's challenge as NAME with SECRET (or the secret in
                                 RBIO_CHAP_SECRET_IN); tgtadm --op bind --mode account --outgoing
  --transport tcp|iser           tcp (default), or iSER over RDMA (rdma_cm, e.g. soft-RoCE;
                                 the portal is the RDMA device's address): no digests,
                                 SCSI data moved by the target's RDMA WRITE/READ
  --header-digest, --data-digest none|accept|prefer|crc32c
                                 accept (default): offer "None,CRC32C"; prefer:
                                 "CRC32C,None"; crc32c: require it
  --connect-timeout S (5), --login-timeout S (10)
  --replacement-timeout S (120)  after a lost connection, a command timeout or an unanswered
                                 ping, log in again (same ISID, TSIH 0: session reinstatement)
                                 and re-send every command without status, for at most S
                                 seconds; then the commands fail (exit 10). 0: no recovery.
                                 With several -p: how long commands wait while no path
                                 serves I/O (each path fails over at once instead)
  --abort-timeout S (15), --lu-reset-timeout S (30)
                                 a command without status after 30 s (bench: --timeout) is
                                 aborted (ABORT TASK) and re-sent;
                                 if the target cannot abort it, the LU is reset (LOGICAL UNIT
                                 RESET) and its commands re-sent; no answer within these times
                                 reinstates the session. --abort-timeout 0: reinstate at once
  --noop-out-interval S (5), --noop-out-timeout S (5)
                                 NOP-Out ping after S seconds without a PDU from the target;
                                 no answer in time is handled as a lost connection. 0: no pings
  --fence lu-reset|none          with several -p, when a path fails, its writes (and other
                                 commands that may change the LU) wait until that gateway has
                                 ended its copies of them: a LOGICAL UNIT RESET answered there
                                 after a new login, or its portal refusing connections (its
                                 tgtd exited); at most --replacement-timeout, then exit 10.
                                 Reads move at once. none: re-send them at once, as
                                 dm-multipath does (a gateway cut off but alive may then apply
                                 an old write over a newer one). Default lu-reset
  --log-level trace|debug|info|warning|error (default warning; logs go to stderr,
                                 for a login's background process to STATE_DIR/IQN.log, or
                                 to the journal when stderr is systemd's, as in
                                 rbio-session@.service: journalctl -u rbio-session@NAME)
  --state-dir DIR                where login/logout/session keep their state
                                 (default /run/rbio/initiator)

exit codes:
  0   success
  1   internal error
  2   bad command line
  3   portal unreachable (no TCP connection)
  4   login refused by the target (or negotiation failed)
  5   authentication failure (CHAP refused, or the target requires CHAP)
  6   unknown target (not found or removed)
  7   I/O error (a SCSI command failed, or --verify found different data)
  8   timeout (a command or login step got no answer in time)
  9   protocol error (the target sent a malformed or unexpected PDU)
  10  connection lost (the target closed or reset the connection)
  11  no such session (logout/session -T: not logged in to that target)
  12  busy (login: already logged in to that target; logout: a file of the mount is open)
  13  mount failed (--mount DIR is not a directory, or FUSE could not mount it)
  14  no metrics (target-metrics: no metrics file set, or none written there)
)";

}  // namespace

int main(int argc, char** argv) {
    using namespace rbio;
    initiator::LogLevel level = initiator::LogLevel::Warning;
    // Global options come before the command; --log-level also after it.
    int i = 1;
    for (int k = 1; k < argc; ++k) {
        std::string a = argv[k];
        std::string v;
        if (a.rfind("--log-level=", 0) == 0) v = a.substr(12);
        else if (a == "--log-level" && k + 1 < argc) v = argv[k + 1];
        else continue;
        if (!initiator::parse_log_level(v, level)) {
            std::cerr << "rbio: --log-level: trace, debug, info, warning or error\n";
            return cli::kExitUsage;
        }
    }
    while (i < argc && (!std::strcmp(argv[i], "--log-level") || !std::strncmp(argv[i], "--log-level=", 12)))
        i += std::strchr(argv[i], '=') ? 1 : 2;
    initiator::set_log_level(level);
    if (i >= argc || !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h") ||
        !std::strcmp(argv[i], "help")) {
        std::cout << kHelp;
        return i >= argc ? cli::kExitUsage : cli::kExitOk;
    }
    if (!std::strcmp(argv[i], "--version")) {
        std::cout << "rbio " RBIO_VERSION "\n";
        return cli::kExitOk;
    }
    // `rbio COMMAND --help` (or -h): the help, which covers every command,
    // rather than "--help needs a value".
    for (int k = i + 1; k < argc; ++k)
        if (!std::strcmp(argv[k], "--help") || !std::strcmp(argv[k], "-h")) {
            std::cout << kHelp;
            return cli::kExitOk;
        }
    std::string cmd = argv[i];
    try {
        if (cmd == "discover") return cli::discover_main(argc - i, argv + i);
        if (cmd == "bench") return cli::bench_main(argc - i, argv + i);
        if (cmd == "login") return cli::login_main(argc - i, argv + i);
        if (cmd == "logout") return cli::logout_main(argc - i, argv + i);
        if (cmd == "session") return cli::session_main(argc - i, argv + i);
        if (cmd == "inquiry") return cli::inquiry_main(argc - i, argv + i);
        if (cmd == "discard") return cli::discard_main(argc - i, argv + i);
        if (cmd == "target-metrics") return cli::target_metrics_main(argc - i, argv + i);
        throw cli::UsageError("unknown command '" + cmd + "'");
    } catch (const cli::UsageError& e) {
        std::cerr << "rbio: " << e.what() << " (rbio --help)\n";
        return cli::kExitUsage;
    } catch (const cli::CommandError& e) {
        std::cerr << "rbio: " << e.what() << "\n";
        return e.code;
    } catch (const initiator::InitiatorError& e) {
        std::cerr << "rbio: " << initiator::to_string(e.kind()) << ": " << e.what() << "\n";
        return e.exit_code();
    } catch (const std::exception& e) {
        std::cerr << "rbio: internal error: " << e.what() << "\n";
        return cli::kExitInternal;
    }
}
