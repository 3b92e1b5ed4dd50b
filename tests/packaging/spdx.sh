#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.spdx: every tracked source file (C, C++, headers, CMake, shell,
# YAML, systemd unit templates, the man page) names its licence on an SPDX line
# within its first three lines, and it is its directory's licence (LICENSE):
# (GPL-2.0 OR BSD-2-Clause) under bpf/ and include/ and for BPF programs
# (*.bpf.c), GPL-2.0-only everywhere else. Data files (fuzzer corpora and
# dictionaries, the SVG, Markdown) are not checked.
# Usage: spdx.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: spdx.sh SOURCE_DIR}"
# The tracked files; outside a git work tree (a source tarball), every file
# but build trees'.
list_files() {
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git ls-files -z
	else
		find . \( -name '.git' -o -name 'build*' \) -prune -o -type f -printf '%P\0'
	fi
}

dual='(GPL-2.0 OR BSD-2-Clause)'
only='GPL-2.0-only'
checked=0 bad=0
while IFS= read -r -d '' f; do
	case "$f" in
	*.c | *.cpp | *.h | *.sh | *.in | *.yaml | *.yml | *.example | *.cmake | */CMakeLists.txt | CMakeLists.txt | *.8 | .ci/*) ;;
	*) continue ;;
	esac
	[ -f "$f" ] || continue # deleted in the work tree, not yet committed
	case "$f" in
	bpf/* | include/* | *.bpf.c) want=$dual ;;
	*) want=$only ;;
	esac
	checked=$((checked + 1))
	line=$(head -n 3 -- "$f" | grep -m1 -o 'SPDX-License-Identifier: .*' || true)
	if [ -z "$line" ]; then
		echo "$f: no SPDX-License-Identifier line in its first three lines (want: $want)"
		bad=$((bad + 1))
		continue
	fi
	# The expression, without a comment's closing "*/".
	got=${line#SPDX-License-Identifier: }
	got=${got%%\*/*}
	got=${got%"${got##*[![:space:]]}"}
	if [ "$got" != "$want" ]; then
		echo "$f: SPDX-License-Identifier is '$got', want '$want'"
		bad=$((bad + 1))
	fi
done < <(list_files)

for t in LICENSE LICENSES/GPL-2.0-only.txt LICENSES/BSD-2-Clause.txt; do
	if [ ! -s "$t" ]; then
		echo "$t: missing"
		bad=$((bad + 1))
	fi
done

if [ "$bad" -ne 0 ]; then
	echo "packaging.spdx: $bad of $checked source files lack their licence line (see LICENSE)"
	exit 1
fi
echo "packaging.spdx: all $checked tracked source files carry their SPDX line"
