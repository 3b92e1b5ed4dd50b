#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds the Debian package, build/sluice_VERSION_ARCH.deb: the sluice command,
# its man page, the boot and agent systemd units, the bash completion, the
# example policy and the Grafana dashboard, under /usr (CPack, from what
# `cmake --install` puts in place). Installs the build's dependencies first
# (scripts/setup.sh). Run as root.
#   scripts/package.sh            builds and prints the package's path
#   sudo apt install ./build/sluice_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >&2
cd build
cpack -G DEB >/dev/null
deb=$(ls -t sluice_*.deb | head -1)
echo "$PWD/$deb"
