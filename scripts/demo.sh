#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The main job on a built-in virtual network: two namespaces joined by veth,
# sluice attached to the receiving side, a few rules, real UDP traffic from
# six sources, then `sluice stats`. Installs and builds what is missing and
# removes everything it made when it ends, even on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

SRC=sluice-demo-src DST=sluice-demo-dst
SLUICE="$PWD/build/sluice"
TRAFFIC="$PWD/build/tests/sluice-traffic"
# A pin directory of its own, so the demo never touches a real deployment.
export SLUICE_PIN_DIR=/sys/fs/bpf/sluice-demo

cleanup() {
  "$SLUICE" detach --all >/dev/null 2>&1 || true
  rmdir "$SLUICE_PIN_DIR" 2>/dev/null || true
  ip netns del "$SRC" 2>/dev/null || true
  ip netns del "$DST" 2>/dev/null || true
}
trap cleanup EXIT
cleanup

run() { echo "\$ $*" | sed "s|$SLUICE|sluice|"; "$@"; }
in_dst() { nsenter --net="/run/netns/$DST" "$@"; }

echo "== virtual network: $SRC (4 IPv4 + 2 IPv6 sources) --veth--> $DST"
ip netns add "$SRC"
ip netns add "$DST"
ip link add demo-src netns "$SRC" address 02:00:00:00:fa:01 type veth \
  peer name demo-dst netns "$DST" address 02:00:00:00:fa:02
ip -n "$DST" addr add 10.250.0.1/24 dev demo-dst
ip -n "$DST" addr add fd00:250::1/64 dev demo-dst nodad
for i in 11 12 13 14; do ip -n "$SRC" addr add "10.250.0.$i/24" dev demo-src; done
for i in 11 12; do ip -n "$SRC" addr add "fd00:250::$i/64" dev demo-src nodad; done
for ns in "$SRC" "$DST"; do ip -n "$ns" link set lo up; done
ip -n "$SRC" link set demo-src up
ip -n "$DST" link set demo-dst up
# Static neighbours: the first datagrams must not race ARP / neighbour discovery.
ip -n "$SRC" neigh replace 10.250.0.1 lladdr 02:00:00:00:fa:02 dev demo-src nud permanent
ip -n "$SRC" neigh replace fd00:250::1 lladdr 02:00:00:00:fa:02 dev demo-src nud permanent

echo
echo "== attach (inside $DST, where the interface lives; bpffs stays shared)"
run in_dst "$SLUICE" attach demo-dst --mode native --max-sources 100000
run in_dst "$SLUICE" status

echo
echo "== rules"
run "$SLUICE" rule add 10.250.0.0/24 --rate 100/s --burst 50 --proto udp --name per-host
run "$SLUICE" rule add 10.250.0.13 --deny --name blocked
run "$SLUICE" rule add 10.250.0.14 --allow --name trusted
run "$SLUICE" rule add fd00:250::/64 --rate 200/s --burst 100 --algo gcra --proto udp --per 128 --name per-host-v6
run "$SLUICE" rule list

echo
echo "== traffic: every source sends 2000 UDP datagrams at 1000/s (2 s), all at once"
echo "   (the controller is not running: every sluice call above has exited)"
pids=()
for src in 10.250.0.11 10.250.0.12 10.250.0.13 10.250.0.14; do
  ip netns exec "$SRC" "$TRAFFIC" "$src" 10.250.0.1 --count 2000 --pps 1000 & pids+=($!)
done
for src in fd00:250::11 fd00:250::12; do
  ip netns exec "$SRC" "$TRAFFIC" "$src" fd00:250::1 --count 2000 --pps 1000 & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

echo
echo "== what sluice saw"
echo "   per-host: 50 burst + 100/s x 2 s = about 250 of 2000 pass per source"
echo "   per-host-v6 (gcra): 100 burst + 200/s x 2 s = about 500 of 2000 pass per source"
echo "   blocked: all 2000 dropped; trusted: all 2000 pass (per-rule counters)"
run "$SLUICE" stats --top 10

echo
echo "== the same for scripts: sluice stats --top 1 --json (first lines)"
"$SLUICE" stats --top 1 --json | head -12

echo
echo "== cleaning up"
