#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.bpf_size: the data plane stays readable (docs/design.md, "From a
# packet to its verdict"): the program file bpf/sluice.bpf.c is an outline of at
# most 300 lines, no file under bpf/ is over 700 lines, and no function in
# them is over 80 lines (from its signature's first line to its closing
# brace, in the kernel style the files are written in: a definition's body
# opens with a "{" line and closes with a "}" line).
# Usage: bpf_size.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: bpf_size.sh SOURCE_DIR}"
max_program=300 max_file=700 max_function=80
bad=0 files=0 functions=0

n=$(wc -l <bpf/sluice.bpf.c)
if [ "$n" -gt "$max_program" ]; then
	echo "bpf/sluice.bpf.c: $n lines, more than $max_program: move the work into its room under bpf/lib/"
	bad=$((bad + 1))
fi
while IFS= read -r -d '' f; do
	files=$((files + 1))
	n=$(wc -l <"$f")
	if [ "$n" -gt "$max_file" ]; then
		echo "$f: $n lines, more than $max_file"
		bad=$((bad + 1))
	fi
	out=$(awk -v max="$max_function" -v file="$f" '
		/^[A-Za-z_]/ && !body { sig = NR }
		/^\{[[:space:]]*$/ && !body { body = 1; start = sig ? sig : NR; next }
		/^\}[[:space:]]*$/ && body {
			body = 0; count++
			if (NR - start + 1 > max)
				printf "%s:%d: a function of %d lines, more than %d\n", file, start, NR - start + 1, max
			sig = 0
		}
		END { printf "count %d\n", count }' "$f")
	functions=$((functions + $(sed -n 's/^count //p' <<<"$out")))
	if grep -v '^count ' <<<"$out"; then
		bad=$((bad + $(grep -vc '^count ' <<<"$out")))
	fi
done < <(find bpf -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)

if [ "$functions" -eq 0 ]; then
	echo "packaging.bpf_size: found no function under bpf/: the check is broken"
	exit 1
fi
if [ "$bad" -ne 0 ]; then
	echo "packaging.bpf_size: $bad size limits broken in $files files under bpf/"
	exit 1
fi
echo "packaging.bpf_size: $files files, $functions functions under bpf/ within their limits"
