#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# One hot source: this build against the program as issue 8 was filed
# (df24dfa: build-issue8/sluice, built by scripts/build-previous.sh issue8),
# measured in the same run. Each program is attached by its own sluice to a
# veth of a scratch network namespace, with the same two rules (192.0.2.0/24
# and 2001:db8::/32, 1000/s, so the source is dropped), and a frame from one
# source of each family is run through BPF_PROG_TEST_RUN (`bpftool prog run`)
# on one CPU, every loaded copy taking its turn round by round, so that all
# see the same machine. Each program is loaded --loads times (3): where the
# kernel places a program's code moves its time by up to 10 ns on the test
# VM, so one load alone misleads. Prints ns per packet: the median over the
# loads of each load's minimum over the rounds, and the differences; nothing
# fails on a figure. XDP_DROP (bench_xdp_drop of build/baselines_bpf.bpf.o) is
# loaded and timed the same way: the standing target is at most 25 ns over it.
# Run as root; builds what is missing.
#   scripts/bench-hot.sh [--rounds N] [--repeat N] [--loads N] [--sluice BIN] [--base BIN]
# --sluice times another build's sluice (e.g. an earlier commit's) as "now";
# --base times another build in place of df24dfa's (a change's before and after, in one run).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=15 repeat=300000 loads=3 now=build/sluice old_bin=build-issue8/sluice old_name=df24dfa
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --loads) loads=$2; shift 2 ;;
    --sluice) now=$2; shift 2 ;;
    --base) old_bin=$2 old_name=base; shift 2 ;;
    *) echo "scripts/bench-hot.sh: unknown option '$1' (use --rounds N, --repeat N, --loads N, --sluice BIN, --base BIN)" >&2; exit 2 ;;
  esac
done
./scripts/setup.sh >&2
[ "$old_name" = base ] || ./scripts/build-previous.sh issue8 >&2
[ -x "$old_bin" ] || { echo "scripts/bench-hot.sh: $old_bin is not an executable sluice" >&2; exit 2; }
[ -x "$now" ] || { echo "scripts/bench-hot.sh: $now is not an executable sluice" >&2; exit 2; }

ns=sluice-hot-bench
work=$(mktemp -d)
bin_of() { [ "$1" = old ] && echo "$old_bin" || echo "$now"; }
copies=()
for ((l = 0; l < loads; l++)); do copies+=("old$l" "new$l"); done
bases=()
for ((l = 0; l < loads; l++)); do bases+=("base$l"); done
cleanup() {
  for c in "${bases[@]}"; do rm -rf /sys/fs/bpf/sluice_hot_$c; done
  for c in "${copies[@]}"; do
    SLUICE_PIN_DIR=/sys/fs/bpf/sluice_hot_$c nsenter --net=/run/netns/$ns "$(bin_of "${c%%[0-9]*}")" detach --all \
      >/dev/null 2>&1 || true
    rmdir /sys/fs/bpf/sluice_hot_$c 2>/dev/null || true
  done
  ip netns del $ns 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
ip netns del $ns 2>/dev/null || true
ip netns add $ns
for c in "${copies[@]}"; do
  bin=$(bin_of "${c%%[0-9]*}")
  ip -n $ns link add hot-$c type veth peer name hot-$c-p
  ip -n $ns link set hot-$c up
  ip -n $ns link set hot-$c-p up
  export SLUICE_PIN_DIR=/sys/fs/bpf/sluice_hot_$c
  run() { nsenter --net=/run/netns/$ns "$@" >/dev/null; }
  run "$bin" detach --all 2>/dev/null || true
  run "$bin" attach hot-$c
  run "$bin" rule add 192.0.2.0/24 --rate 1000/s
  run "$bin" rule add 2001:db8::/32 --rate 1000/s
done
unset SLUICE_PIN_DIR
[ -f build/baselines_bpf.bpf.o ] || cmake --build build --target sluice-bench -j"$(nproc)" >&2
for c in "${bases[@]}"; do
  rm -rf /sys/fs/bpf/sluice_hot_$c
  bpftool prog loadall build/baselines_bpf.bpf.o /sys/fs/bpf/sluice_hot_$c type xdp
done

# The frames: UDP to port 53 with 32 bytes of payload, from 192.0.2.10 and 2001:db8::10.
python3 - "$work" <<'PY'
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
PY

cpu=$(( $(nproc) > 1 ? 1 : 0 ))
sample() { # PROG FRAME: ns per packet of one run
  taskset -c $cpu bpftool prog run pinned "$1" data_in "$2" repeat "$repeat" |
    sed -n 's/.*duration (average): \([0-9]*\)ns.*/\1/p'
}
for ((r = 0; r < rounds; r++)); do
  for fam in v4 v6; do
    for c in "${copies[@]}"; do
      sample /sys/fs/bpf/sluice_hot_$c/prog "$work/$fam" >>"$work/$fam.$c"
    done
    for c in "${bases[@]}"; do
      sample /sys/fs/bpf/sluice_hot_$c/bench_xdp_drop "$work/$fam" >>"$work/$fam.$c"
    done
  done
done
# The median over the loads of each load's minimum; and the loads' minima.
figure() { # SIDE FAM
  local mins=()
  for ((l = 0; l < loads; l++)); do mins+=("$(sort -n "$work/$2.$1$l" | head -1)"); done
  printf '%s\n' "${mins[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%d", a[int((NR + 1) / 2)]}'
  printf ' (%s)' "${mins[*]}"
}
echo "# One hot source: this build against $old_name ($old_bin) and XDP_DROP, same run"
echo
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, kernel $(uname -r)." \
  "Each program loaded $loads times; $rounds rounds of $repeat packets through BPF_PROG_TEST_RUN on CPU $cpu," \
  "every copy taking turns; one limit rule of 1000/s, so the source is dropped. ns per packet: the median of" \
  "the loads' minima (each load's minimum in brackets). Now: $now, $old_name: $old_bin."
echo
echo "| source | XDP_DROP | $old_name | now | now − $old_name | now − XDP_DROP |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for fam in v4 v6; do
  read -r base basel <<<"$(figure base $fam)"
  read -r old oldl <<<"$(figure old $fam)"
  read -r new newl <<<"$(figure new $fam)"
  name=IPv4; [ $fam = v6 ] && name=IPv6
  echo "| $name | $base $basel | $old $oldl | $new $newl | $((new - old)) | $((new - base)) |"
done
