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

# A binary built once is kept in $SLUICE_BUILD_CACHE (default
# /var/cache/sluice-build), by commit and toolchain, so that a fresh clone on
# the same machine (CI) copies it instead of building it again.
cache_root=${SLUICE_BUILD_CACHE:-/var/cache/sluice-build}
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
fi

# Keeps a copy of OUT/sluice in the cache, if the cache can be written.
keep() { # OUT CACHED
  [ -x "$2" ] && return 0
  if mkdir -p "${2%/*}" 2>/dev/null && cp "$1/sluice" "$2.tmp" 2>/dev/null; then
    mv "$2.tmp" "$2"
  fi
}

build() { # COMMIT DIR WHAT
  local prev=$1 out=$2 what=$3 commit toolchain cached
  toolchain=$({ c++ --version; clang --version; pkg-config --modversion libbpf libxdp; } 2>&1 | sha256sum | cut -c1-16)
  if [ -x "$out/sluice" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$(git rev-parse "$prev^{commit}" 2>/dev/null)" ]; then
    keep "$out" "$cache_root/$(cat "$out/commit")-$toolchain/sluice"
    return 0
  fi
  if ! git rev-parse -q --verify "$prev^{commit}" >/dev/null; then
    echo "scripts/build-previous.sh: commit $prev is not in this clone (a shallow clone? git fetch --unshallow)" >&2
    exit 1
  fi
  commit=$(git rev-parse "$prev^{commit}")
  cached=$cache_root/$commit-$toolchain/sluice
  rm -rf "$out"
  mkdir -p "$out"
  if [ -x "$cached" ]; then
    cp "$cached" "$out/sluice"
    echo "$commit" >"$out/commit"
    echo "== $out/sluice ($what) from $cached"
    return 0
  fi
  git archive "$prev" | tar -x -C "$out" --one-top-level=src
  cmake -S "$out/src" -B "$out/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF "${launcher[@]}" >/dev/null
  cmake --build "$out/build" -j"$(nproc)" --target sluice >/dev/null
  cp "$out/build/sluice" "$out/sluice"
  echo "$commit" >"$out/commit"
  keep "$out" "$cached"
  echo "== built $out/sluice ($what)"
}

if [ "${1:-}" = issue8 ]; then
  build df24dfab5df6c69f732620195cbeb34293f383b7 build-issue8 "the program as issue 8 was filed"
  exit 0
fi
build 309bd1c01386ec0c37fb15f18b926153ff57641c build-previous "sluice 0.2.7, state ABI 7: the previous release"
