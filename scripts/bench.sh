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
# (sluice-cluster-bench), and one hot source against b971b4a's program
# (scripts/bench-hot.sh). Prints Markdown.
# Run as root; installs and builds what is missing. --quick for a smoke run.
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
./build/tests/sluice-bench "$@"
# The control plane at 100,000 rules (apply, export, rule set) and the cluster
# bench: programs of their own, which take --quick alone of the options.
quick=()
for a in "$@"; do [ "$a" = --quick ] && quick+=(--quick); done
./build/tests/sluice-bench-control "${quick[@]}"
echo
./build/tests/sluice-agent-bench
echo
# One hot source against the program as issue 8 was filed, taking turns in one run.
./scripts/bench-hot.sh
echo
exec ./build/tests/sluice-cluster-bench "${quick[@]}"
