#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds the `sluice` binaries of earlier layouts, for the end-to-end tests of
# `sluice upgrade` from deployments they made:
#   build-previous/sluice  sluice 0.2, whose pinned state has no layout record (ABI 1)
#   build-abi3/sluice      the last binary of ABI 3 (rule info of 80 bytes, no scope)
#   build-abi4/sluice      the last binary of ABI 4 (rules and lookups flip together)
#   build-abi5/sluice      the last binary of ABI 5 (pending-drops slots of 48 bytes, no memo in them)
#   build-abi6/sluice      the last binary of ABI 6 (no owed passes)
# `scripts/build-previous.sh issue8` builds only build-issue8/sluice, the
# program as issue 8 was filed (df24dfa), which scripts/bench-hot.sh times.
# Needs the repository's history (a shallow clone lacks it).
set -euo pipefail
cd "$(dirname "$0")/.."

build() { # COMMIT DIR WHAT
  local prev=$1 out=$2 what=$3
  if [ -x "$out/sluice" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$(git rev-parse "$prev^{commit}" 2>/dev/null)" ]; then
    return 0
  fi
  if ! git rev-parse -q --verify "$prev^{commit}" >/dev/null; then
    echo "scripts/build-previous.sh: commit $prev is not in this clone (a shallow clone? git fetch --unshallow)" >&2
    exit 1
  fi
  rm -rf "$out"
  mkdir -p "$out"
  git archive "$prev" | tar -x -C "$out" --one-top-level=src
  cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/dev/null
  cmake --build "$out/build" -j"$(nproc)" --target sluice >/dev/null
  cp "$out/build/sluice" "$out/sluice"
  git rev-parse "$prev^{commit}" >"$out/commit"
  echo "== built $out/sluice ($what)"
}

if [ "${1:-}" = issue8 ]; then
  build df24dfab5df6c69f732620195cbeb34293f383b7 build-issue8 "the program as issue 8 was filed"
  exit 0
fi
build b971b4a707d91f0282d8d58c7f43b5d4b66cf46a build-previous "sluice 0.2, the last commit before the state recorded its layout"
build 60632a981fef7f5b59e639301766407d3a57156a build-abi3 "the last commit of ABI 3"
build 6d07b18a0e18f2c9be710351e311afabecc1f479 build-abi4 "the last commit of ABI 4"
build 1c74400adbf59cf0e419e38956eba05c3d78547b build-abi5 "the last commit of ABI 5"
build a2dba1b35a3fa742166d02a21564e4ed6cd63d34 build-abi6 "the last commit of ABI 6"
