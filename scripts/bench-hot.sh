#!/usr/bin/env bash
# One hot source, this build against the program as issue 8 was filed
# (b971b4a, sluice 0.2: build-previous/sluice), measured in the same run.
# Each program is attached by its own sluice to a veth of a scratch network
# namespace, with the same two rules (192.0.2.0/24 and 2001:db8::/32, 1000/s),
# and a frame from one source of each is run through BPF_PROG_TEST_RUN
# (`bpftool prog run`) on one CPU, the two programs taking turns round by
# round, so that both see the same machine. Prints ns per packet (minimum and
# median of the rounds) and the difference; nothing fails on a figure.
# Run as root; builds what is missing.
#   scripts/bench-hot.sh [--rounds N] [--repeat N] [--sluice BIN]
# --sluice times another build's sluice (e.g. an earlier commit's) as "now".
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=41 repeat=500000 now=build/sluice
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --sluice) now=$2; shift 2 ;;
    *) echo "scripts/bench-hot.sh: unknown option '$1' (use --rounds N, --repeat N, --sluice BIN)" >&2; exit 2 ;;
  esac
done
./scripts/setup.sh >&2
./scripts/build-previous.sh >&2
[ -x "$now" ] || { echo "scripts/bench-hot.sh: $now is not an executable sluice" >&2; exit 2; }

ns=sluice-hot-bench
old_pin=/sys/fs/bpf/sluice_hot_old new_pin=/sys/fs/bpf/sluice_hot_new
work=$(mktemp -d)
cleanup() {
  for side in old new; do
    pin=$old_pin bin=build-previous/sluice
    [ $side = new ] && pin=$new_pin bin=$now
    SLUICE_PIN_DIR=$pin nsenter --net=/run/netns/$ns "$bin" detach --all >/dev/null 2>&1 || true
    rmdir "$pin" 2>/dev/null || true
  done
  ip netns del $ns 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
ip netns del $ns 2>/dev/null || true
ip netns add $ns
for side in old new; do
  ip -n $ns link add hot-$side type veth peer name hot-$side-p
  ip -n $ns link set hot-$side up
  ip -n $ns link set hot-$side-p up
  pin=$old_pin bin=build-previous/sluice
  [ $side = new ] && pin=$new_pin bin=$now
  export SLUICE_PIN_DIR=$pin
  run() { nsenter --net=/run/netns/$ns "$@" >/dev/null; }
  run "$bin" detach --all 2>/dev/null || true
  run "$bin" attach hot-$side
  run "$bin" rule add 192.0.2.0/24 --rate 1000/s
  run "$bin" rule add 2001:db8::/32 --rate 1000/s
done
unset SLUICE_PIN_DIR

# The frames: UDP to port 53 with 32 bytes of payload, from 192.0.2.10 and 2001:db8::10.
python3 - "$work" <<'EOF'
import socket, struct, sys
def csum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    return ~(s + (s >> 16)) & 0xffff
eth = lambda t: bytes.fromhex('020000000002020000000001') + struct.pack('!H', t)
payload = b'x' * 32
udp = struct.pack('!HHHH', 40000, 53, 8 + len(payload), 0) + payload
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 0x1234, 0, 64, 17, 0,
                 socket.inet_aton('192.0.2.10'), socket.inet_aton('198.51.100.1'))
ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
open(sys.argv[1] + '/v4', 'wb').write(eth(0x0800) + ip + udp)
ip6 = struct.pack('!IHBB16s16s', 6 << 28, len(udp), 17, 64, socket.inet_pton(socket.AF_INET6, '2001:db8::10'),
                  socket.inet_pton(socket.AF_INET6, '2001:db8:ffff::1'))
open(sys.argv[1] + '/v6', 'wb').write(eth(0x86dd) + ip6 + udp)
EOF

cpu=$(( $(nproc) > 1 ? 1 : 0 ))
sample() { # PIN FRAME: ns per packet of one run
  taskset -c $cpu bpftool prog run pinned "$1/prog" data_in "$2" repeat "$repeat" |
    sed -n 's/.*duration (average): \([0-9]*\)ns.*/\1/p'
}
for ((r = 0; r < rounds; r++)); do
  for fam in v4 v6; do
    sample $old_pin "$work/$fam" >>"$work/$fam.old"
    sample $new_pin "$work/$fam" >>"$work/$fam.new"
  done
done
stat() { sort -n "$1" | awk '{a[NR] = $1} END {printf "%d %d", a[1], a[int((NR + 1) / 2)]}'; }
echo "# One hot source: this build against b971b4a (issue 8 as filed), same run"
echo
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, kernel $(uname -r)." \
  "$rounds rounds of $repeat packets through BPF_PROG_TEST_RUN on CPU $cpu, the programs taking turns;" \
  "one limit rule of 1000/s, so the source is dropped. ns per packet. Now: $now, b971b4a: build-previous/sluice."
echo
echo "| source | b971b4a min | now min | now − b971b4a | b971b4a median | now median | now − b971b4a |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for fam in v4 v6; do
  read -r omin omed <<<"$(stat "$work/$fam.old")"
  read -r nmin nmed <<<"$(stat "$work/$fam.new")"
  name=IPv4; [ $fam = v6 ] && name=IPv6
  echo "| $name | $omin | $nmin | $((nmin - omin)) | $omed | $nmed | $((nmed - omed)) |"
done
