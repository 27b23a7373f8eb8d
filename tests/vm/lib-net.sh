# shellcheck shell=bash
# The guest's way to services on the host's loopback (sourced by VM tests
# that scripts/vm/run.sh started with --net). qemu's user-mode network
# connects the guest's connections to 10.0.2.2 to the host's 127.0.0.1;
# nftables rules in the guest send its connections to 127.0.0.1:PORTS
# there, so clients in the guest use the host's own addresses: a Ceph
# cluster (scripts/ceph-dev.sh) tells its clients where its monitor and
# OSDs are, and says 127.0.0.1. Connections to other ports stay in the
# guest (its own tgtds, on 127.0.0.1 too). The guest is thrown away
# afterwards, so nothing is undone.
GUEST_ADDR=10.0.2.15 HOST_ALIAS=10.0.2.2

# host_ports_up PORTS...: the NIC up and 127.0.0.1:PORTS (numbers or
# ranges A-B) forwarded to the host.
host_ports_up() {
  command -v nft > /dev/null || { echo "no nft (package nftables: scripts/vm/prepare.sh)" >&2; return 1; }
  modprobe virtio_net || return 1
  local dev="" d
  for d in /sys/class/net/*; do
    [[ -e $d/device && $(basename "$(readlink -f "$d/device/driver")") == virtio_net ]] && { dev=${d##*/}; break; }
  done
  [[ -n $dev ]] || { echo "no virtio network device: was the guest started with run.sh --net?" >&2; return 1; }
  ip link set "$dev" up && ip addr add "$GUEST_ADDR/24" dev "$dev" || return 1
  # Packets to 127.0.0.1 that leave by this device (after the rewrite
  # below) are otherwise dropped as martians.
  sysctl -qw "net.ipv4.conf.$dev.route_localnet=1" || return 1
  local ports
  ports=$(IFS=,; echo "$*")
  nft -f - <<NFT || return 1
table ip rbio_vm_host {
  chain out { type nat hook output priority -100; ip daddr 127.0.0.1 tcp dport { ${ports//,/, } } dnat to $HOST_ALIAS; }
  chain post { type nat hook postrouting priority 100; oifname "$dev" masquerade; }
}
NFT
}

# host_port_open PORT: a TCP connection to the host's 127.0.0.1:PORT succeeds.
host_port_open() { timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1"; }
