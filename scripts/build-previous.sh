#!/usr/bin/env bash
# Builds the `sluice` binary of the previous release (0.2, at the commit named below, whose
# pinned state has no layout record: ABI 1) into build-previous/sluice, for
# the end-to-end test of `sluice upgrade` from a deployment it made. Needs the
# repository's history (a shallow clone lacks it).
set -euo pipefail
cd "$(dirname "$0")/.."
prev=b971b4a707d91f0282d8d58c7f43b5d4b66cf46a # sluice 0.2, the last commit before the state recorded its layout
out=build-previous
if [ -x "$out/sluice" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$(git rev-parse "$prev^{commit}" 2>/dev/null)" ]; then
  exit 0
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
echo "== built $out/sluice (sluice 0.2)"
