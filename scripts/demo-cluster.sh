#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Three hosts share one limit through Redis: three network namespaces, each
# with its own sluice (its own pin directory) and agent, one redis-server on
# loopback. One source sends to all three hosts at 3x the rate; first with
# no agent (each host enforces the rule on its own), then with the agents
# syncing. Installs and builds what is missing; removes what it made.
#   scripts/demo-cluster.sh [SECONDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

SECS=${1:-5}
RATE=300 # per second, cluster-wide
SLUICE="$PWD/build/sluice"
TRAFFIC="$PWD/build/tests/sluice-traffic"
SRC=slcl-src
WORK=$(mktemp -d /tmp/sluice-demo-cluster.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
AGENTS=()

cleanup() {
  for p in "${AGENTS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in 1 2 3; do
    SLUICE_PIN_DIR=/sys/fs/bpf/slcl_h$i "$SLUICE" detach --all >/dev/null 2>&1 || true
    rmdir /sys/fs/bpf/slcl_h$i 2>/dev/null || true
    ip netns del slcl-h$i 2>/dev/null || true
  done
  ip netns del "$SRC" 2>/dev/null || true
  [ -f "$WORK/redis.pid" ] && kill "$(cat "$WORK/redis.pid")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup_first() { for i in 1 2 3; do ip netns del slcl-h$i 2>/dev/null || true; done; ip netns del "$SRC" 2>/dev/null || true; }
cleanup_first

host() { local i=$1; shift; SLUICE_PIN_DIR=/sys/fs/bpf/slcl_h$i nsenter --net=/run/netns/slcl-h$i "$@"; }
passed() { # cluster-wide passed packets of rule `shared`, from each host's counters
  local total=0 n
  for i in 1 2 3; do
    n=$(SLUICE_PIN_DIR=/sys/fs/bpf/slcl_h$i "$SLUICE" stats --json | python3 -c \
      'import json,sys; print(sum(r["passed_packets"] for r in json.load(sys.stdin)["rules"] if r["name"]=="shared"))')
    total=$((total + n))
  done
  echo "$total"
}
send() { # SECS seconds from one source: RATE/s to each of the three hosts, or 3 x RATE/s to h1 alone
  local pids=() hosts=${1:-"1 2 3"} pps=${2:-$RATE}
  for i in $hosts; do
    ip netns exec "$SRC" "$TRAFFIC" 10.240.0.1 10.241.$i.1 --count $((pps * SECS)) --pps "$pps" >/dev/null & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}
passed_on() { # passed packets of rule `shared` on host $1
  SLUICE_PIN_DIR=/sys/fs/bpf/slcl_h$1 "$SLUICE" stats --json | python3 -c \
    'import json,sys; print(sum(r["passed_packets"] for r in json.load(sys.stdin)["rules"] if r["name"]=="shared"))'
}

echo "== redis-server on 127.0.0.1:$PORT (no persistence)"
redis-server --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no --daemonize yes \
  --pidfile "$WORK/redis.pid" --logfile "$WORK/redis.log" --dir "$WORK"
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "== three hosts: slcl-h1..3, each reached from $SRC over its own veth; one source, 10.240.0.1"
ip netns add "$SRC"
ip -n "$SRC" link set lo up
ip -n "$SRC" addr add 10.240.0.1/32 dev lo
for i in 1 2 3; do
  ip netns add slcl-h$i
  ip -n slcl-h$i link set lo up
  ip link add slcl-s$i netns "$SRC" address 02:00:00:00:f$i:01 type veth \
    peer name slcl-h$i netns slcl-h$i address 02:00:00:00:f$i:02
  ip -n slcl-h$i addr add 10.241.$i.1/24 dev slcl-h$i
  ip -n "$SRC" link set slcl-s$i up
  ip -n slcl-h$i link set slcl-h$i up
  ip -n "$SRC" route add 10.241.$i.0/24 dev slcl-s$i src 10.240.0.1
  ip -n "$SRC" neigh replace 10.241.$i.1 lladdr 02:00:00:00:f$i:02 dev slcl-s$i nud permanent
  host $i "$SLUICE" attach slcl-h$i >/dev/null
  host $i "$SLUICE" rule add 10.240.0.0/16 --rate $RATE/s --burst 30 --scope cluster --name shared >/dev/null
done
echo "\$ sluice rule list   (on each host)"
host 1 "$SLUICE" rule list

echo
echo "== no agents: each host holds the rule on its own, so three hosts pass 3x the rate"
send
alone=$(passed)
echo "   passed cluster-wide: $alone in ${SECS}s = $((alone / SECS))/s (the rule says $RATE/s)"

echo
echo "== the agents: sluice agent --redis 127.0.0.1:$PORT --node-id hN (sync every 100 ms)"
for i in 1 2 3; do
  SLUICE_PIN_DIR=/sys/fs/bpf/slcl_h$i SLUICE_RUN_DIR=$WORK/run-h$i \
    "$SLUICE" agent --metrics 127.0.0.1:0 --redis 127.0.0.1:$PORT --node-id h$i \
    >"$WORK/events-h$i.log" 2>"$WORK/agent-h$i.log" &
  AGENTS+=($!)
done
for _ in $(seq 100); do
  [ "$(redis-cli -p "$PORT" zcard '{sluice}:hosts')" = 3 ] && break; sleep 0.1
done
for i in 1 2 3; do # each agent makes its host's local share a third of the rate
  for _ in $(seq 100); do
    SLUICE_PIN_DIR=/sys/fs/bpf/slcl_h$i "$SLUICE" rule list --json | grep -q '"hosts": *3' && break; sleep 0.1
  done
done
echo "\$ sluice status   (on h1)"
SLUICE_RUN_DIR=$WORK/run-h1 host 1 "$SLUICE" status | tail -2
before=$(passed)
send
after=$(passed)
synced=$((after - before))
echo "   passed cluster-wide: $synced in ${SECS}s = $((synced / SECS))/s (the rule says $RATE/s)"

echo
echo "== all the traffic on h1 (3 x $RATE/s): h1's local share is a third, but the store grants it the whole rate"
before=$(passed_on 1)
send 1 $((3 * RATE))
after=$(passed_on 1)
echo "   h1 passed: $((after - before)) in ${SECS}s = $(((after - before) / SECS))/s"

echo
echo "== redis-server stopped: each host keeps its share for the lease (1 s), then falls back to its"
echo "   local share, a third of the rate: h1 alone now passes a third"
kill "$(cat "$WORK/redis.pid")"
sleep 1.5
SLUICE_RUN_DIR=$WORK/run-h1 host 1 "$SLUICE" status | tail -1
before=$(passed_on 1)
send 1 $((3 * RATE))
after=$(passed_on 1)
echo "   h1 passed: $((after - before)) in ${SECS}s = $(((after - before) / SECS))/s"
