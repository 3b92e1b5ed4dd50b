#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The accuracy report: replays floods, bursts, the window-boundary attack, many
# sources and two CPUs through every algorithm of the real XDP program, prints
# a table per trace and draws docs/accuracy.svg. Run as root; installs and
# builds what is missing. Pass --quick for shorter traces.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >&2
mkdir -p docs
exec ./build/tests/sluice-accuracy --svg docs/accuracy.svg "$@"
