#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds the previous release's `sluice` (0.2.7, state ABI 7) into
# build-previous/sluice, for the end-to-end tests of `sluice upgrade` from the
# state it makes: `sluice upgrade` reads the previous release's layout and no
# older one, so one earlier binary is all the tests need.
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
build 309bd1c01386ec0c37fb15f18b926153ff57641c build-previous "sluice 0.2.7, state ABI 7: the previous release"
