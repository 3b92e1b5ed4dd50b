#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Two builds' rows of sluice-bench sections 1 and 2, taken in turns: for each
# round and each row, this build's sluice-bench and the other build's measure
# that row alone (`--rows`), one right after the other, the order swapped
# every round. On a VM, runs of one build after the other differ by more than
# the change being measured; in turns both see the same machine. Prints, per
# row, each build's mean over the rounds (ns per packet, or per frame in
# section 2) and the median over the rounds of this build's figure against the
# other's in the same round; nothing fails on a figure. The other build's
# sluice-bench must know `--rows`.
# Run as root on a built tree.
#   scripts/bench-turns.sh --base BENCH [--rounds N] [--quick] ROW...
# ROW is SECTION:TEXT, the rows whose name holds TEXT: 1:"one hot source, IPv4",
# 1:"1000 CIDR rules", 2:"256 sources" (section 2's are "1 source",
# "256 sources" and "1000000 sources": Sluice's row).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="scripts/bench-turns.sh --base BENCH [--rounds N] [--quick] SECTION:TEXT..."
base='' rounds=5 quick=() rows=()
while [ $# -gt 0 ]; do
  case "$1" in
    --base) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; base=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "scripts/bench-turns.sh: --rounds takes a count of 1 or more" >&2; exit 2; }
      rounds=$2; shift 2 ;;
    --quick) quick=(--quick); shift ;;
    [12]:?*) rows+=("$1"); shift ;;
    *) echo "scripts/bench-turns.sh: '$1' is not a row (SECTION:TEXT, section 1 or 2); usage: $usage" >&2; exit 2 ;;
  esac
done
now=build/tests/sluice-bench
for b in "$now" "$base"; do
  [ -n "$b" ] && [ -x "$b" ] || { echo "scripts/bench-turns.sh: '${b:-(no --base)}' is not an executable sluice-bench; usage: $usage" >&2; exit 2; }
done
[ ${#rows[@]} -gt 0 ] || { echo "scripts/bench-turns.sh: no row given; usage: $usage" >&2; exit 2; }

# Sluice's figures in one run's output, one "name<TAB>ns" line each: section
# 1's scenario rows (the two CPUs' row gives one CPU alone, CPU 0 and CPU 1),
# section 2's "Sluice (XDP)" row.
figures() {
  awk -F' *\\| *' '
    $3 == "Sluice (XDP)" { print "section 2 at " $2 ($2 == 1 ? " source" : " sources") ", Sluice\t" $4; next }
    $2 != "" && $2 != "scenario" && $2 !~ /^-+$/ && $5 ~ /^[0-9.]+( \/ [0-9.]+)?$/ {
      if (seen[$2]++) next
      if ($5 ~ /\//) {
        split($5, c, " / "); sub(/, CPU 0 \/ CPU 1$/, "", $2)
        print $2 ", one CPU alone\t" $4; print $2 ", CPU 0\t" c[1]; print $2 ", CPU 1\t" c[2]
      } else print $2 "\t" $5
    }'
}

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < rounds; r++)); do
  for row in "${rows[@]}"; do
    order=(base now)
    ((r % 2)) && order=(now base)
    for who in "${order[@]}"; do
      bin=$now
      [ "$who" = base ] && bin=$base
      out=$("$bin" "${quick[@]}" --sections "${row%%:*}" --rows "${row#*:}") ||
        { echo "scripts/bench-turns.sh: $bin --rows '${row#*:}' failed" >&2; exit 1; }
      f=$(figures <<<"$out")
      [ -n "$f" ] || { echo "scripts/bench-turns.sh: $bin measured no row named '${row#*:}' in section ${row%%:*}" >&2; exit 1; }
      sed "s/^/$who\t/" <<<"$f" >>"$results"
    done
  done
  echo "round $((r + 1)) of $rounds done" >&2
done
# Per row: each build's mean over the rounds, and the median over the rounds
# of this build's figure against the other's of the same round (the two ran
# one right after the other: the machine's drift between rounds cancels).
echo "| row | rounds | base ns | this build ns | this build vs base, median of the rounds | rounds this build was slower |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
awk -F'\t' '
  !($2 in row) { row[$2] = ++rows; name[rows] = $2 }
  { i = ++n[$1, $2]; v[$1, $2, i] = $3; sum[$1, $2] += $3 }
  END {
    for (r = 1; r <= rows; r++) {
      k = name[r]; m = n["base", k] < n["now", k] ? n["base", k] : n["now", k]
      if (!m) continue
      slower = 0
      for (i = 1; i <= m; i++) {
        d[i] = v["now", k, i] / v["base", k, i] - 1
        slower += d[i] > 0
        for (j = i; j > 1 && d[j - 1] > d[j]; j--) { t = d[j]; d[j] = d[j - 1]; d[j - 1] = t }
      }
      med = m % 2 ? d[(m + 1) / 2] : (d[m / 2] + d[m / 2 + 1]) / 2
      printf "| %s | %d | %.1f | %.1f | %+.1f %% | %d of %d |\n", k, m, sum["base", k] / n["base", k],
        sum["now", k] / n["now", k], 100 * med, slower, m
    }
  }' "$results"
