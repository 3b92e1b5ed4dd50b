#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Installs what is missing, builds, and runs every test: unit, BPF (the real
# program through BPF_PROG_TEST_RUN) and end-to-end (namespaces, veth, real
# traffic), then the parser fuzzers. Fails, never skips, if the kernel tests
# cannot run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The previous release's binary (0.2.7), for the tests of `sluice upgrade` from its state.
./scripts/build-previous.sh

# Every layer must be present: a build that lost the kernel tests must not pass.
listed=$(ctest --test-dir build -N)
for layer in unit bpf e2e redis; do
  n=$(grep -c "Test *#[0-9]*: ${layer}\." <<<"$listed" || true)
  if [ "$n" -eq 0 ]; then
    echo "scripts/test.sh: no ${layer} tests were found; refusing to pass" >&2
    exit 1
  fi
  echo "== ${layer}: ${n} tests"
done

# The parser fuzzers, 60 s each, one per CPU at a time; any finding fails the run.
echo "== fuzz: parsers, 60 s each"
./scripts/fuzz.sh 60

# Last, so that its closing line ("N% tests passed, 0 tests failed out of N") ends the run.
# One test per CPU: the kernel tests (and the CPU-bound stress test) take the
# resource lock "kernel" and run one at a time; the others run beside them.
ctest --test-dir build --output-on-failure -j"$(nproc)"
