#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds the `sluice` target (and the BPF object it embeds) in Release and
# Debug with warnings as errors, in build-release/ and build-debug/: the build
# types a user or a packager may pick, beside the RelWithDebInfo build that
# scripts/setup.sh makes for the tests. Other targets are not built.
# Usage: scripts/build-types.sh [JOBS]   (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}

for type in Release Debug; do
  dir=build-${type,,}
  echo "== ${type} in ${dir}/"
  start=$SECONDS
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DSLUICE_WERROR=ON -DBUILD_TESTING=OFF >/dev/null
  cmake --build "$dir" --target sluice -j"$jobs"
  echo "== ${type}: built ${dir}/sluice in $((SECONDS - start)) s"
done
