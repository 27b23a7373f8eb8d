#!/usr/bin/env bash
# `rbio login --mount`: the LUs of a tgtd target (bs_rbio.so) as files of a
# FUSE mount, served by rbio's background session process. Checks unaligned
# reads and writes from several threads (read-modify-write) against a
# shadow copy; O_DSYNC writes reaching tgtd's store as RWF_DSYNC writes
# (FUA), plain ones as plain writes; an ext4 file system on a loop device over the LU file whose
# checksummed files survive logout and a second login; `rbio session`;
# logout refused while a loop device holds a file, then clean (no process,
# mount, loop device or state left); CHAP wrong (exit 5, nothing mounted)
# and right; the other exit codes; and `rbio discover` storing open-iscsi
# node records that `iscsiadm -m node` lists and that `rbio login` without
# -p uses. Runs in a private mount namespace with a private copy of
# /etc/iscsi, so neither the host's mounts nor its node database change.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
in_private_mount_namespace "$0" "$@"
tgt_test_init 40
IQN=iqn.2026-11.io.rbio:fuse-test
HOSTNAME_IQN=iqn.2026-11.io.rbio:fuse-test-host
P="127.0.0.1:$PORT"
SD="$WORK/state"
MNT="$WORK/mnt"
MNT2="$WORK/mnt two"  # a space in the folder's name
FS="$WORK/fs"
mkdir -p "$MNT" "$FS"

for t in losetup mkfs.ext4 e2fsck iscsiadm python3 strace; do
  command -v "$t" >/dev/null || skip_test "$t not installed (scripts/setup.sh installs it)"
done
[[ -c /dev/fuse ]] || skip_test "no /dev/fuse"

# Whatever a failed run leaves: loop devices over the LU files, mounts, the
# session process; then the usual tgtd cleanup.
fuse_cleanup() {
  local rc=$?
  set +e  # every step is best effort; tgtd must be stopped whatever fails
  mountpoint -q "$FS" && umount "$FS"
  losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v m="$MNT/" 'index($2, m) == 1 {print $1}' |
    while read -r dev; do losetup -d "$dev" || true; done
  [[ -n ${holder:-} ]] && kill "$holder" 2>/dev/null
  [[ -f $STATE/tgtd.pid ]] && kill -CONT "$(tgtd_pid)" 2>/dev/null  # stopped by a test step
  [[ -x $RBIO ]] && "$RBIO" logout --state-dir "$SD" >/dev/null 2>&1
  [[ -x $RBIO ]] && "$RBIO" logout --state-dir "$WORK/state2" >/dev/null 2>&1
  mountpoint -q "$MNT" && umount -l "$MNT"
  mountpoint -q "$MNT2" && umount -l "$MNT2"
  tgt_test_cleanup "$rc"
}
trap fuse_cleanup EXIT

# A private node database: a copy of /etc/iscsi with no records and our own
# initiator name, bind-mounted over it in this namespace only.
private_etc_iscsi "$HOSTNAME_IQN"

mounted() { grep -q " $1 " /proc/self/mountinfo; }
session_pid() { sed -n 's/^pid=//p' "$SD"/*.state 2>/dev/null | head -1; }
no_process() { [[ -z $1 ]] || ! kill -0 "$1" 2>/dev/null || grep -q '^[^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
no_loop() { ! losetup -l -n -O BACK-FILE | grep -q "$MNT/"; }
login() { rc_is 0 timeout 60 "$RBIO" login -T "$IQN" --mount "$MNT" --state-dir "$SD" "$@"; }
logout() { rc_is 0 timeout 60 "$RBIO" logout --state-dir "$SD" "$@"; }

tgtd_start >/dev/null
tadm --op new --mode target --tid 1 -T "$IQN"
tadm --op bind --mode target --tid 1 -I ALL
truncate -s 128M "$WORK/lun1.img"
truncate -s 16M "$WORK/lun2.img"
new_lun 1 1 "$WORK/lun1.img" rbio
new_lun 1 2 "$WORK/lun2.img" rbio

echo "== discover: open-iscsi node records"
check "discover lists the target and stores its node record" rc_is 0 "$RBIO" discover -p "$P"
check "... which iscsiadm -m node lists" bash -c "iscsiadm -m node 2>/dev/null | grep -qx '$P,1 $IQN'"
check "a second discover keeps the record (1 already there)" \
  bash -c "'$RBIO' discover -p '$P' 2>&1 >/dev/null | grep -q '0 added, 1 already there'"

echo "== login --mount (portal from the node record, initiator name from the file)"
t0=$SECONDS
check "login without -p returns exit 0" login
echo "   login took $((SECONDS - t0)) s"
check "lun1 and lun2 are files of the LU sizes" \
  bash -c "[[ \$(stat -c %s '$MNT/lun1') == 134217728 && \$(stat -c %s '$MNT/lun2') == 16777216 ]]"
check "the mount is a FUSE mount" bash -c "grep ' $MNT ' /proc/self/mountinfo | grep -q fuse"
# The session process reports "state up" once its first pass ran; on a
# loaded machine that can come a moment after login returns.
check "rbio session shows the session, up" \
  wait_for 10 eval 'rc_is 0 "$RBIO" session --state-dir "$SD" && out_has "state up"'
check "... with target, state, LUs, negotiated parameters, counters" \
  bash -c "grep -q '^$IQN' '$WORK/out' && grep -q 'state up' '$WORK/out' && grep -q 'lun2: $MNT/lun2' '$WORK/out' &&
           grep -q 'negotiated HeaderDigest=' '$WORK/out' && grep -q 'io reads=' '$WORK/out' && grep -q 'transport pdus_out=' '$WORK/out'"
check "... and the initiator name of /etc/iscsi/initiatorname.iscsi" out_has "initiator $HOSTNAME_IQN"
check "a second login to the target is refused (exit 12)" \
  rc_is 12 "$RBIO" login -T "$IQN" -p "$P" --mount "$MNT" --state-dir "$SD"

echo "== unaligned reads and writes from 8 threads, against a shadow copy"
check "random unaligned writes in stripes sharing blocks read back exactly" python3 - "$MNT/lun2" <<'EOF'
import os, random, sys, threading
path = sys.argv[1]; size = os.path.getsize(path); stripe = 1000; nthreads = 8
shadow = bytearray(size)
fd = os.open(path, os.O_RDWR)
os.pwrite(fd, bytes(size), 0)
def worker(k):
    rnd = random.Random(k)
    for _ in range(300):
        s = rnd.randrange(k, size // stripe, nthreads)   # this thread's stripes only
        off = s * stripe + rnd.randrange(stripe)
        n = rnd.randrange(1, stripe - (off - s * stripe) + 1)
        data = rnd.randbytes(n)
        assert os.pwrite(fd, data, off) == n
        shadow[off:off + n] = data
ts = [threading.Thread(target=worker, args=(k,)) for k in range(nthreads)]
[t.start() for t in ts]; [t.join() for t in ts]
os.fsync(fd)
got = bytearray()
while len(got) < size:                       # odd-sized reads at odd offsets
    got += os.pread(fd, min(7777, size - len(got)), len(got))
os.close(fd)
bad = next((i for i in range(size) if got[i] != shadow[i]), None)
if bad is not None: sys.exit(f"mismatch at byte {bad}")
EOF
check "reads from 8 threads" python3 - "$MNT/lun2" <<'EOF'
import os, sys, threading
fd = os.open(sys.argv[1], os.O_RDONLY); size = os.path.getsize(sys.argv[1])
def worker(k):
    for off in range(k * 65536, size, 8 * 65536): os.pread(fd, 65536, off)
ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
EOF
"$RBIO" session --state-dir "$SD" > "$WORK/out"
check "... were in flight together (max_in_flight > 1)" grep -Eq "max_in_flight=([2-9]|[1-9][0-9])" "$WORK/out"
check "the session counted read-modify-writes and syncs" \
  bash -c "'$RBIO' session --state-dir '$SD' | grep -Eq 'syncs=[1-9].* rmw=[1-9].* errors=0'"


echo "== O_DSYNC writes reach the target's store as durable writes (FUA)"
# The kernel sends no fsync after a direct-I/O write to a file opened
# O_DSYNC; it passes the flag with the write, which the session sends with
# FUA. tgtd (write cache on, the LU on tmpfs: I/O inline) then writes with
# RWF_DSYNC; a plain write is a plain pwrite. Seen by strace on tgtd.
strace -f -e trace=pwrite64,pwritev2 -o "$WORK/strace" -p "$(tgtd_pid)" 2>"$WORK/strace.err" &
tracer=$!
check "strace attached to tgtd" wait_for 10 grep -q attached "$WORK/strace.err"
check "4 writes of 4 KiB with oflag=dsync" \
  dd if=/dev/urandom of="$MNT/lun2" bs=4k seek=100 count=4 oflag=dsync conv=notrunc status=none
check "4 writes of 4 KiB without" \
  dd if=/dev/urandom of="$MNT/lun2" bs=4k seek=200 count=4 conv=notrunc status=none
end_started "$tracer"
# pwrite64(fd, buf, 4096, OFFSET) / pwritev2(fd, [...], N, OFFSET, FLAGS)
dsync_at() { grep -E "pwritev2\(.*, $1, RWF_DSYNC\)" "$WORK/strace" | wc -l; }
plain_at() { grep -E "pwrite64\(.*, 4096, $1\)" "$WORK/strace" | wc -l; }
check "each dsync write reached the store with RWF_DSYNC" \
  eval '(( $(dsync_at 409600) == 1 && $(dsync_at 413696) == 1 && $(dsync_at 417792) == 1 && $(dsync_at 421888) == 1 ))'
check "... each plain one as a plain pwrite, none with RWF_DSYNC" \
  eval '(( $(plain_at 819200) == 1 && $(plain_at 831488) == 1 && $(grep -c "RWF_DSYNC" "$WORK/strace") == 4 ))'
check "the session counted 4 FUA writes" \
  bash -c "'$RBIO' session --state-dir '$SD' | grep -q ' fua_writes=4 '"
echo "== ext4 on a loop device over the LU file"
LOOP=$(losetup -f --show "$MNT/lun1")
check "losetup attached $MNT/lun1" test -b "$LOOP"
check "mkfs.ext4" rc_is 0 mkfs.ext4 -q -F "$LOOP"
check "mount" mount "$LOOP" "$FS"
for i in 1 2 3 4; do head -c $((i * 3 * 1024 * 1024 + i * 777)) /dev/urandom > "$FS/file$i"; done
mkdir -p "$FS/dir"; for i in $(seq 1 50); do echo "small $i" > "$FS/dir/s$i"; done
(cd "$FS" && find . -type f | sort | xargs sha256sum) > "$WORK/sums"
sync
check "umount" umount "$FS"
check "logout is refused while the loop device holds a file (exit 12)" \
  rc_is 12 "$RBIO" logout --state-dir "$SD"
check "... and the mount stays" mounted "$MNT"
check "losetup -d" losetup -d "$LOOP"

echo "== logout"
pid=$(session_pid)
t0=$SECONDS
check "logout (exit 0)" logout
echo "   logout took $((SECONDS - t0)) s"
check "no session process left (pid $pid)" no_process "$pid"
check "no mount left" bash -c "! grep -q ' $MNT ' /proc/self/mountinfo"
check "no loop device left" no_loop
check "no state file left" bash -c "! ls '$SD'/*.state 2>/dev/null"
check "logout again: no sessions (exit 11)" rc_is 11 "$RBIO" logout --state-dir "$SD"

echo "== login again: the files are identical"
check "login with -p (exit 0)" login -p "$P"
LOOP=$(losetup -f --show "$MNT/lun1")
check "e2fsck finds the file system clean" rc_is 0 e2fsck -fn "$LOOP"
check "mount read-only" mount -o ro "$LOOP" "$FS"
check "every file's checksum matches" bash -c "cd '$FS' && sha256sum --quiet -c '$WORK/sums'"
check "umount" umount "$FS"
check "losetup -d" losetup -d "$LOOP"
pid=$(session_pid)
check "logout -T (exit 0)" logout -T "$IQN"
check "no process, mount or loop device left" \
  bash -c "$(declare -f no_process no_loop); no_process '$pid' && ! grep -q ' $MNT ' /proc/self/mountinfo && no_loop"

echo "== CHAP and errors"
tadm --op new --mode account --user fuseuser --password fuse-secret-1
tadm --op bind --mode account --tid 1 --user fuseuser
check "a wrong CHAP secret: authentication failure (exit 5)" \
  rc_is 5 timeout 60 "$RBIO" login -T "$IQN" -p "$P" --mount "$MNT" --state-dir "$SD" \
  --chap-user fuseuser --chap-secret wrong-secret
check "... on one line" bash -c "[[ \$(wc -l < '$WORK/out') == 1 ]] && grep -q 'auth' '$WORK/out'"
check "... and nothing mounted, no state, no process" \
  bash -c "! grep -q ' $MNT ' /proc/self/mountinfo && ! ls '$SD'/*.state 2>/dev/null && ! pgrep -f '^$RBIO login -T $IQN' >/dev/null"
check "the right CHAP secret logs in" login -p "$P" --chap-user fuseuser --chap-secret fuse-secret-1
check "... and logs out" logout
tadm --op unbind --mode account --tid 1 --user fuseuser
tadm --op delete --mode account --user fuseuser
check "an unknown target (exit 6)" \
  rc_is 6 "$RBIO" login -T iqn.2026-11.io.rbio:nothing -p "$P" --mount "$MNT" --state-dir "$SD"
check "--mount that is not a directory (exit 13)" \
  rc_is 13 "$RBIO" login -T "$IQN" -p "$P" --mount "$WORK/nowhere" --state-dir "$SD"
check "session -T for a target not logged in (exit 11)" rc_is 11 "$RBIO" session -T "$IQN" --state-dir "$SD"
check "no session process or mount after the failures" \
  bash -c "! ls '$SD'/*.state 2>/dev/null && ! grep -q ' $MNT ' /proc/self/mountinfo"

echo "== two logins of one target at once"
SD2="$WORK/state2"
# The session process is a fork of its login: its command line is the
# login's, --state-dir anywhere in it.
sessions_of() { pgrep -f -- "--state-dir $1( |\$)" | wc -l; }
"$RBIO" login -T "$IQN" -p "$P" --state-dir "$SD2" > "$WORK/l1.out" 2>&1 & l1=$!
"$RBIO" login -T "$IQN" -p "$P" --state-dir "$SD2" > "$WORK/l2.out" 2>&1 & l2=$!
rc1=0; wait "$l1" || rc1=$?
rc2=0; wait "$l2" || rc2=$?
check "one logs in, the other is refused as busy (exits $rc1 and $rc2)" \
  eval '[[ "$rc1 $rc2" == "0 12" || "$rc1 $rc2" == "12 0" ]]'
check "... one session process runs" test "$(sessions_of "$SD2")" = 1
check "logout (exit 0)" rc_is 0 "$RBIO" logout --state-dir "$SD2"
check "... and no session process is left" wait_for 5 eval '[[ $(sessions_of "$SD2") == 0 ]]'

echo "== two logouts at once (an admin's and systemd's ExecStop)"
# The session process answers one logout and ends; the other's connection,
# still in its control socket's queue, is closed unanswered. tgtd stopped
# holds the first logout (its SYNCHRONIZE CACHE) while the second queues.
check "login (exit 0)" rc_is 0 "$RBIO" login -T "$IQN" -p "$P" --state-dir "$SD2" --log-level info
sock2=$(sed -n 's/^socket=//p' "$SD2"/*.state)
queued_on() { [[ $(ss -xlnH | awk -v s="$1" '$5 == s { print $3 }') == 1 ]]; }
kill -STOP "$(tgtd_pid)"
"$RBIO" logout --state-dir "$SD2" > "$WORK/lo1.out" 2>&1 & lo1=$!
check "the first logout reached the session process" wait_for 10 grep -q "logout requested" "$SD2"/*.log
"$RBIO" logout --state-dir "$SD2" > "$WORK/lo2.out" 2>&1 & lo2=$!
check "... the second waits in the control socket's queue" wait_for 10 queued_on "$sock2"
kill -CONT "$(tgtd_pid)"
rc1=0; wait "$lo1" || rc1=$?
rc2=0; wait "$lo2" || rc2=$?
check "both exit 0 (exits $rc1 and $rc2)" test "$rc1 $rc2" = "0 0"
check "... the second says another logout did it" grep -q "by another logout at the same time" "$WORK/lo2.out"
check "... and no session process is left" wait_for 5 eval '[[ $(sessions_of "$SD2") == 0 ]]'

echo "== a --mount folder with a space in its name"
mkdir -p "$MNT2"
check "login --mount '$MNT2' (exit 0) lists both files" \
  eval 'rc_is 0 "$RBIO" login -T "$IQN" -p "$P" --mount "$MNT2" --state-dir "$SD2" &&
        out_has "$MNT2/lun1 (134217728 bytes)" && out_has "$MNT2/lun2 (16777216 bytes)"'
check "logout (exit 0)" rc_is 0 "$RBIO" logout --state-dir "$SD2"

echo "== a stale record: its process gone, its pid now another process's"
printf 'pid=1\ntarget=%s\nportal=%s\nsocket=%s\n' "$IQN" "$P" "$SD2/gone.sock" > "$SD2/${IQN//[^A-Za-z0-9._-]/_}.state"
check "rbio session says it ended" eval 'rc_is 0 "$RBIO" session --state-dir "$SD2" && out_has "state ended (stale"'
check "login over it (exit 0)" rc_is 0 "$RBIO" login -T "$IQN" -p "$P" --state-dir "$SD2"
check "... and logout" rc_is 0 "$RBIO" logout --state-dir "$SD2"

# The state files' key replaces every character outside A-Z a-z 0-9 . _ -
# with '_', so two names can share it (non-ASCII IQNs, which RFC 3722
# allows; tgt refuses '_' and non-ASCII names, so the second name here is
# only ever given to rbio, which must not take the first one's session for
# it).
echo "== two target names that share one state key"
TWIN_A=iqn.2026-11.io.rbio:fuse:twin
TWIN_B=iqn.2026-11.io.rbio:fuse_twin
truncate -s 4M "$WORK/twin.img"
tadm --op new --mode target --tid 2 -T "$TWIN_A"
tadm --op bind --mode target --tid 2 -I ALL
new_lun 2 1 "$WORK/twin.img" rbio
check "login to $TWIN_A (exit 0)" rc_is 0 "$RBIO" login -T "$TWIN_A" -p "$P" --state-dir "$SD2"
check "login to $TWIN_B is refused (exit 12), naming the other target's session" \
  eval 'rc_is 12 "$RBIO" login -T "$TWIN_B" -p "$P" --state-dir "$SD2" && out_has "are those of the session of $TWIN_A"'
check "rbio session -T $TWIN_B: no session (exit 11), not $TWIN_A's" \
  rc_is 11 "$RBIO" session -T "$TWIN_B" --state-dir "$SD2"
check "rbio logout -T $TWIN_B: no session (exit 11)" rc_is 11 "$RBIO" logout -T "$TWIN_B" --state-dir "$SD2"
check "... and $TWIN_A's session is still up" \
  eval 'rc_is 0 "$RBIO" session -T "$TWIN_A" --state-dir "$SD2" && out_has "state up"'
check "logout -T $TWIN_A (exit 0)" rc_is 0 "$RBIO" logout -T "$TWIN_A" --state-dir "$SD2"

echo "== a session process killed: its dead mount does not block a restart"
check "login --mount (exit 0)" login -p "$P"
pid=$(session_pid)
kill -KILL "$pid"
check "the session process (pid $pid) is gone" wait_for 5 no_process "$pid"
check "... its mount is left, dead (ENOTCONN)" eval 'mounted "$MNT" && ! stat "$MNT/lun2" 2>/dev/null'
check "login again over it (exit 0; the dead mount detached)" login -p "$P"
check "... it says so" out_has "detached the dead mount of the session that ended (pid $pid)"
check "... and its files answer" test "$(stat -c %s "$MNT/lun2")" = 16777216
check "logout (exit 0)" logout
check "no mount left" bash -c "! grep -q ' $MNT ' /proc/self/mountinfo"

echo "== the target refusing the session past the replacement timeout, then back"
check "login --mount with a 2 s replacement timeout (exit 0)" login -p "$P" --replacement-timeout 2
check "a pattern written and synced" \
  eval 'head -c 65536 /dev/urandom > "$WORK/pattern" && dd if="$WORK/pattern" of="$MNT/lun2" bs=64k seek=3 conv=fsync,notrunc status=none'
nexus=$(tadm --op show --mode target | sed -n 's/^ *I_T nexus: //p' | head -1)
check "the target drops the session (I_T nexus $nexus) and refuses new logins" \
  eval 'tadm --op unbind --mode target --tid 1 -I ALL && tadm --op delete --mode conn --tid 1 --sid "$nexus" --cid 0'
reads_back() { cmp -s -n 65536 "$WORK/pattern" <(dd if="$MNT/lun2" bs=64k skip=3 count=1 iflag=direct status=none 2>/dev/null); }
check "the session fails once the timeout is over" \
  wait_for 30 eval '"$RBIO" session --state-dir "$SD" > "$WORK/out" && out_has "state failed"'
check "... and reads fail (EIO)" \
  eval '! dd if="$MNT/lun2" of=/dev/null bs=4k count=1 iflag=direct status=none 2> "$WORK/err" &&
        grep -q "Input/output error" "$WORK/err"'
check "the target takes logins again" tadm --op bind --mode target --tid 1 -I ALL
check "the session comes back by itself, and the pattern reads back" wait_for 30 reads_back
check "... rbio session says up" eval 'rc_is 0 "$RBIO" session --state-dir "$SD" && out_has "state up"'
check "logout (exit 0)" logout

# A process in a mount namespace made after the mount, so with a copy of
# it (as a service started later with PrivateTmp has).
start_holder() {
  unshare -m sleep 300 & holder=$!
  check "a namespace made after the mount (pid $holder) has a copy" \
    wait_for 5 eval 'grep -q " rbio:$IQN " "/proc/$holder/mountinfo"'
}
stop_holder() {
  kill "$holder"
  wait "$holder" 2>/dev/null || :
  holder=
}

echo "== logout while another mount namespace holds a copy of the mount"
# A service started after the login with PrivateTmp or another sandbox
# copies the mount; the kernel keeps a FUSE connection while any copy
# lives, so logout has to end it itself.
check "login --mount (exit 0)" login -p "$P"
start_holder
check "... which reads the LU" nsenter -t "$holder" -m dd if="$MNT/lun1" of=/dev/null bs=4k count=1 iflag=direct status=none
pid=$(session_pid)
check "logout (exit 0), not held up by the copy" rc_is 0 timeout 30 "$RBIO" logout --state-dir "$SD"
check "no session process left (pid $pid)" wait_for 5 no_process "$pid"
check "the copy answers ENOTCONN" \
  eval '! nsenter -t "$holder" -m stat "$MNT/lun1" 2> "$WORK/err" && grep -q "not connected" "$WORK/err"'
stop_holder

echo "== logout while a read through a copy of the mount is in flight"
# The copy's open file does not hold up the unmount in the session's own
# namespace, so the FUSE loop ends while the read is still at the target
# (stopped here). Ending the connection fails the read in the kernel, but
# the session's answer to it still goes through the FUSE session, which
# must go only after the last answer: the daemon refuses to free it
# earlier, and logs that (libfuse is not instrumented: ASan would not see
# the use after free).
check "login --mount (exit 0)" login -p "$P"
start_holder
pid=$(session_pid)
slog=$(sed -n 's/^log=//p' "$SD"/*.state | head -1)
kill -STOP "$(tgtd_pid)"
nsenter -t "$holder" -m dd if="$MNT/lun1" of=/dev/null bs=4k count=1 iflag=direct status=none & reader=$!
check "a read through the copy is in flight (tgtd stopped)" \
  wait_for 10 eval '"$RBIO" session --state-dir "$SD" > "$WORK/out" && out_has "in_flight=1"'
timeout 60 "$RBIO" logout --state-dir "$SD" > "$WORK/logout.out" 2>&1 & logout=$!
# Unmounted in the session's namespace and the connection ended (the copy
# answers ENOTCONN): the FUSE loop ends with it.
check "logout unmounts and ends the FUSE connection while the read is in flight" \
  wait_for 10 eval '! mountpoint -q "$MNT" && ! nsenter -t "$holder" -m stat "$MNT/lun2" 2> "$WORK/err" &&
    grep -q "not connected" "$WORK/err"'
kill -CONT "$(tgtd_pid)"
check "logout (exit 0) once the target answers the read" wait "$logout"
check "... the read has ended (the ended connection failed it)" wait_for 10 no_process "$reader"
wait "$reader" 2>/dev/null || :
check "no session process left (pid $pid)" wait_for 5 no_process "$pid"
check "... whose log ($slog) says the FUSE session outlived the answers" \
  eval '[[ -s $slog ]] && ! grep -q "released while requests could still be answered" "$slog"'
stop_holder

echo "== node records removed"
check "iscsiadm -m node -o delete" bash -c "iscsiadm -m node -T '$IQN' -o delete >/dev/null 2>&1"
# iscsiadm -m node exits 21 (no records) when none is left at all.
no_record() {
  local rc=0
  iscsiadm -m node > "$WORK/nodes" 2>&1 || rc=$?
  (( rc == 0 || rc == 21 )) || { echo "  iscsiadm -m node exited $rc"; return 1; }
  ! grep -q "$IQN" "$WORK/nodes"
}
check "... and no record is left" no_record
check "tgtd is alive" tgtd_alive

finish
