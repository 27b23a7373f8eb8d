#!/usr/bin/env bash
# Mutual CHAP (RFC 7143 §12.1.3) of the userspace initiator against a real
# tgtd: the target authenticates the initiator (incoming account) and the
# initiator authenticates the target (outgoing account, `tgtadm --op bind
# --mode account --outgoing`). The right names and secrets log in (exit 0);
# a wrong target secret, a wrong target name, or a target without an
# outgoing account are authentication failures (exit 5) that name the
# reason; one-way CHAP still works next to the outgoing account. `rbio
# login` takes both directions from an open-iscsi node record
# (node.session.auth.username/password/username_in/password_in), in a
# private mount namespace with a private copy of /etc/iscsi.
source "$(dirname "$0")/../lib/tgt-test.sh"
source "$(dirname "$0")/../lib/initiator-test.sh"
in_private_mount_namespace "$0" "$@"
tgt_test_init 22
IQN=iqn.2026-11.io.rbio:auth-test
P="127.0.0.1:$PORT"

bench() { "$RBIO" --log-level info bench -T "$IQN" -p "$P" --lun 1 --time 1 --rw randwrite --verify \
            --chap-user rbio-initiator --chap-secret initiator-secret-1 "$@"; }

tgtd_start >/dev/null
tadm --op new --mode target --tid 1 -T "$IQN"
tadm --op bind --mode target --tid 1 -I ALL
truncate -s 16M "$WORK/lun.img"
new_lun 1 1 "$WORK/lun.img" rbio
tadm --op new --mode account --user rbio-initiator --password initiator-secret-1
tadm --op bind --mode account --tid 1 --user rbio-initiator

echo "== mutual CHAP without an outgoing account on the target"
check "the initiator asks the target to authenticate itself: refused (exit 5)" \
  rc_is 5 bench --chap-user-in rbio-target --chap-secret-in target-secret-2
# tgt refuses the login itself (status 0x0201) when it has no outgoing account.
check "... an authentication failure" out_has "authentication failure"
check "... because tgtd has no outgoing account" log_has "no outgoing credentials configured"

tadm --op new --mode account --user rbio-target --password target-secret-2
tadm --op bind --mode account --tid 1 --user rbio-target --outgoing

echo "== mutual CHAP"
check "right names and secrets both ways log in and write (exit 0)" \
  rc_is 0 bench --chap-user-in rbio-target --chap-secret-in target-secret-2
check "the target authenticated itself" out_has "target $IQN authenticated itself as rbio-target"
check "a wrong secret for the target (exit 5)" \
  rc_is 5 bench --chap-user-in rbio-target --chap-secret-in not-the-target-secret
check "... the target's CHAP_R is reported wrong" out_has "the target's CHAP_R is wrong"
check "a wrong name for the target (exit 5)" \
  rc_is 5 bench --chap-user-in someone-else --chap-secret-in target-secret-2
check "... the name is reported" out_has "the target calls itself 'rbio-target', expected 'someone-else'"
check "a wrong initiator secret is still refused by the target (exit 5)" \
  rc_is 5 "$RBIO" bench -T "$IQN" -p "$P" --time 1 --chap-user rbio-initiator \
  --chap-secret wrong-secret-123 --chap-user-in rbio-target --chap-secret-in target-secret-2
check "one-way CHAP still logs in (exit 0)" rc_is 0 bench
check "mutual CHAP needs --chap-user (exit 2)" \
  rc_is 2 "$RBIO" bench -T "$IQN" -p "$P" --chap-user-in rbio-target --chap-secret-in target-secret-2
check "the secret can come from RBIO_CHAP_SECRET_IN (exit 0)" \
  rc_is 0 env RBIO_CHAP_SECRET_IN=target-secret-2 "$RBIO" bench -T "$IQN" -p "$P" --lun 1 --time 1 \
  --chap-user rbio-initiator --chap-secret initiator-secret-1 --chap-user-in rbio-target

echo "== CHAP both ways from an open-iscsi node record"
if command -v iscsiadm >/dev/null; then
  private_etc_iscsi
  SD="$WORK/state"
  node() { iscsiadm -m node -T "$IQN" -p "$P" "$@" >/dev/null 2>&1; }
  set_auth() { node -o update -n "node.session.auth.$1" -v "$2"; }
  check "iscsiadm stores a record" node -o new
  check "... with CHAP both ways" bash -c "$(declare -f node set_auth); IQN='$IQN' P='$P';
    set_auth authmethod CHAP && set_auth username rbio-initiator && set_auth password initiator-secret-1 &&
    set_auth username_in rbio-target && set_auth password_in target-secret-2"
  check "rbio login without CHAP options logs in with the record's (exit 0)" \
    rc_is 0 "$RBIO" --log-level info login -T "$IQN" --state-dir "$SD"
  check "... and authenticated the target" \
    grep -q "authenticated itself as rbio-target" "$SD"/*.log
  check "logout" rc_is 0 "$RBIO" logout -T "$IQN" --state-dir "$SD"
  set_auth password_in not-the-target-secret
  check "a wrong password_in in the record: exit 5" \
    rc_is 5 "$RBIO" login -T "$IQN" --state-dir "$SD"
  check "... the target's CHAP_R is reported wrong" out_has "the target's CHAP_R is wrong"
  # The state folder given relative to where login runs (the session
  # process itself works from /).
  check "options on the command line win over the record (exit 0; --state-dir relative)" \
    eval '(cd "$WORK" && rc_is 0 "$RBIO" login -T "$IQN" --state-dir state --chap-user rbio-initiator \
      --chap-secret initiator-secret-1 --chap-user-in rbio-target --chap-secret-in target-secret-2)'
  check "... the session is found through the absolute path" \
    eval 'rc_is 0 "$RBIO" session --state-dir "$SD" && out_has "state up"'
  check "logout" rc_is 0 "$RBIO" logout -T "$IQN" --state-dir "$SD"
  check "iscsiadm deletes the record" node -o delete
else
  skip_part "CHAP from an open-iscsi node record: iscsiadm not installed (scripts/setup.sh installs open-iscsi)"
fi
check "tgtd is alive" tgtd_alive

finish
