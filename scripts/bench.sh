#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The benchmark: Sluice's per-packet cost against XDP_DROP and parse-only
# baselines, Sluice against nftables and iptables hashlimit on the same frames,
# kernel memory per tracked source, and control-plane times (sluice-bench), then
# the control plane at 100,000 rules: apply, export, rule set
# (sluice-bench-control), the cost of one agent scrape at 1,000,000 sources
# and 10,000 rules (sluice-agent-bench), and what cluster rules cost: the sync
# at 1,000 rules and 10,000 buckets per host with the real agent and Redis,
# and a cluster rule's per-packet cost against a local one's
# (sluice-cluster-bench), and one hot source against df24dfa's program
# (scripts/bench-hot.sh). Prints Markdown.
# Run as root; installs and builds what is missing. --quick for a smoke run.
# --base DIR compares against another build directory (an earlier commit's
# `build/`) in the same run: its sluice-bench's sections 1 and 2 run after this
# build's, and the hot source is timed against DIR/sluice instead of df24dfa.
# Other options go to sluice-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >&2
# The peers: nftables, and iptables for its legacy hashlimit.
for p in nftables iptables; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="${missing:-} $p"
done
if [ -n "${missing:-}" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
base='' args=() quick=()
while [ $# -gt 0 ]; do
  case "$1" in
    --base)
      [ $# -ge 2 ] || { echo "scripts/bench.sh: --base needs a build directory" >&2; exit 2; }
      base=$2; shift 2
      for f in "$base/sluice" "$base/tests/sluice-bench"; do
        [ -x "$f" ] || { echo "scripts/bench.sh: --base $base: $f is not an executable" >&2; exit 2; }
      done ;;
    --quick) quick+=(--quick); args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
echo "Commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), $(date -u '+%Y-%m-%d %H:%M UTC')."
echo
./build/tests/sluice-bench "${args[@]}"
if [ -n "$base" ]; then
  echo
  echo "# The base build ($base), sections 1 and 2, in the same run"
  echo
  "$base/tests/sluice-bench" "${quick[@]}" --sections 1,2
fi
# The control plane at 100,000 rules (apply, export, rule set) and the cluster
# bench: programs of their own, which take --quick alone of the options.
./build/tests/sluice-bench-control "${quick[@]}"
echo
./build/tests/sluice-agent-bench
echo
# One hot source against the program as issue 8 was filed, taking turns in one run.
if [ -n "$base" ]; then ./scripts/bench-hot.sh --base "$base/sluice"; else ./scripts/bench-hot.sh; fi
echo
exec ./build/tests/sluice-cluster-bench "${quick[@]}"
