#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds the controller's parser fuzzers (libFuzzer, ASan, UBSan; clang) in
# build-fuzz/ and runs each for SECONDS (default 60), starting from its seed
# corpus in tests/fuzz/corpus/NAME/. Prints one line per fuzzer with its
# executions and findings; exits non-zero on any finding and prints the
# reproducer's path. The fuzzers run side by side, one per CPU. Inputs libFuzzer finds interesting collect in
# build-fuzz/run/NAME/corpus, so later runs start from where earlier ones got.
#   scripts/fuzz.sh [SECONDS]             all fuzzers
#   FUZZERS="rate cidr" scripts/fuzz.sh   some of them
# Reproduce a finding: build-fuzz/fuzz_NAME build-fuzz/run/NAME/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]" >&2
  exit 2
fi
read -r -a fuzzers <<<"${FUZZERS:-cidr rate ports duration_count rule_line}"

# The configure step checks that clang++ and its libFuzzer runtime are there
# (scripts/setup.sh installs them).
cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz -j"$(nproc)" >/dev/null

export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# One fuzzer: its line into $run/result, its status as the function's.
fuzz_one() {
  local name=$1 bin=build-fuzz/fuzz_$1 run=build-fuzz/run/$1 rc=0 execs findings
  mkdir -p "$run/corpus"
  rm -f "$run"/crash-* "$run"/leak-* "$run"/timeout-* "$run"/oom-* "$run"/slow-unit-* "$run/result"
  local dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
  # -timeout: an input taking over 10 s is a hang, and a finding.
  "$bin" -max_total_time="$seconds" -timeout=10 -max_len=512 -print_final_stats=1 \
    -artifact_prefix="$run/" "${dict[@]}" "$run/corpus" "tests/fuzz/corpus/$name" \
    >"$run/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  mapfile -t found < <(find "$run" -maxdepth 1 -type f \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  findings=${#found[@]}
  if [ "$rc" -ne 0 ] && [ "$findings" -eq 0 ]; then
    findings=1 # failed without writing an input (e.g. it could not start)
  fi
  {
    printf 'fuzz %-15s %12s executions in %ss, %d findings\n' "$name" "${execs:-0}" "$seconds" "$findings"
    if [ "$findings" -ne 0 ]; then
      grep -aE 'ERROR|runtime error|fuzz property broken|deadly signal|SUMMARY' "$run/log" | head -5 || true
      for f in "${found[@]}"; do
        echo "fuzz $name: reproducer $f (run: $bin $f)"
      done
      [ ${#found[@]} -eq 0 ] && echo "fuzz $name: exit status $rc, see $run/log"
    fi
  } >"$run/result"
  [ "$findings" -eq 0 ]
}

failed=0
running=0
for name in "${fuzzers[@]}"; do
  if [ ! -x "build-fuzz/fuzz_$name" ] || [ ! -d "tests/fuzz/corpus/$name" ]; then
    echo "fuzz $name: no such fuzzer" >&2
    failed=1
    continue
  fi
  if [ "$running" -ge "$(nproc)" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
wait || true
for name in "${fuzzers[@]}"; do
  result=build-fuzz/run/$name/result
  if [ ! -f "$result" ]; then
    [ -x "build-fuzz/fuzz_$name" ] && { echo "fuzz $name: no result (see build-fuzz/run/$name/log)" >&2; failed=1; }
    continue
  fi
  head -1 "$result"
  if [ "$(wc -l <"$result")" -gt 1 ] || ! grep -q ', 0 findings$' "$result"; then
    failed=1
    tail -n +2 "$result" >&2
  fi
done
exit "$failed"
