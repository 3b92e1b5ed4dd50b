#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Installs the Debian 12 packages Sluice needs to build, test and run the demo,
# then configures and builds it in build/. Run as root; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config       # C++20 toolchain
  clang llvm                             # BPF target
  libclang-rt-dev                        # libFuzzer and sanitizer runtimes for clang (scripts/fuzz.sh)
  libbpf-dev bpftool libelf-dev zlib1g-dev
  libxdp-dev                             # attach --multiprog: libxdp's dispatcher shares the XDP hook
  libcli11-dev nlohmann-json3-dev libgtest-dev
  libyaml-cpp-dev                        # policy files (sluice apply, export)
  libyaml-dev                            # policy files: libyaml reads them fast, yaml-cpp where libyaml refuses
  iproute2 util-linux procps             # ip netns/veth, nsenter, pgrep (tests, demo)
  tmux                                   # sluice top's end-to-end test (a terminal to drive and capture)
  iperf3                                 # one TCP flow through a byte limit (e2e.TcpThroughAByteLimit*, bench)
  groff-base mandoc                      # the man page's checks (packaging.man): groff -ww, mandoc -T lint
  prometheus-cpp-dev                     # the agent's metrics exporter (sluice agent)
  prometheus curl                        # a real Prometheus server that scrapes the agent (e2e.Agent*)
  libhiredis-dev                         # the cluster sync's store client (user/cluster)
  libssl-dev                             # libcrypto's SHA-1: the name EVALSHA calls a Lua script by
  redis-server                           # the store's tests start their own servers and clusters (redis.*);
                                         # the package's own service on :6379 is not used
)

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/setup.sh: run as root (installs packages; BPF needs CAP_BPF and CAP_NET_ADMIN)" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# bpffs is where sluice pins its state; sluice mounts it too, but tests expect it.
if ! mount | grep -q ' /sys/fs/bpf type bpf'; then
  mount -t bpf bpf /sys/fs/bpf
fi

echo "== building"
# ccache, where installed, keeps what an earlier build on this machine
# compiled, in any clone (paths taken relative to the clone's root).
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_WERROR=ON "${launcher[@]}" >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
echo "== built build/sluice"
