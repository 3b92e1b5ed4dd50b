#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.docs: the README stays a front door of at most 300 lines; the
# README and the pages under docs/ name no commit hash and no issue number
# (history lives in CHANGELOG.md); and every relative link in them, and in
# CHANGELOG.md, names a file that exists and, for a Markdown page, a heading
# it has (GitHub's anchors: lower case, punctuation dropped, spaces as -).
# Usage: docs.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: docs.sh SOURCE_DIR}"
bad=0
say() {
	echo "$*"
	bad=$((bad + 1))
}

lines=$(wc -l <README.md)
[ "$lines" -le 300 ] || say "README.md: $lines lines; the front door holds at most 300 (move the rest to docs/)"

pages=(README.md docs/*.md)
for f in "${pages[@]}"; do
	# A commit hash: 7 to 40 hex digits with a letter and a digit among them,
	# not part of a 0x number or a longer word.
	grep -noE '(^|[^0-9A-Za-z_x.])[0-9a-f]{7,40}([^0-9A-Za-z_.]|$)' "$f" |
		grep -E ':[^:]*[a-f][^:]*$' | grep -E ':[^:]*[0-9][^:]*$' |
		while IFS=: read -r n m; do echo "$f:$n: a commit hash ($m); history belongs in CHANGELOG.md"; done || true
	grep -noiE '\b(issue|defect) *#?[0-9]+' "$f" |
		while IFS=: read -r n m; do echo "$f:$n: an issue number ($m); history belongs in CHANGELOG.md"; done || true
done >"${TMPDIR:-/tmp}/docs.$$"
if [ -s "${TMPDIR:-/tmp}/docs.$$" ]; then
	cat "${TMPDIR:-/tmp}/docs.$$"
	bad=$((bad + $(wc -l <"${TMPDIR:-/tmp}/docs.$$")))
fi
rm -f "${TMPDIR:-/tmp}/docs.$$"

# The anchors of a Markdown page, one per line (headings outside code blocks).
anchors() {
	awk '/^```/ { code = !code; next }
	     !code && /^#+ / {
		h = $0; sub(/^#+ +/, "", h); h = tolower(h)
		gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h); print h
	     }' "$1"
}

for f in "${pages[@]}" CHANGELOG.md; do
	dir=$(dirname "$f")
	# Links outside code blocks and code spans: ](target)
	links=$(awk '/^```/ { code = !code; next } !code { gsub(/`[^`]*`/, ""); print }' "$f" |
		grep -oE '\]\([^)]+\)' | sed 's/^](//; s/)$//' || true)
	for link in $links; do
		case "$link" in http://* | https://* | mailto:*) continue ;; esac
		path=${link%%#*}
		frag=
		[ "$path" != "$link" ] && frag=${link#*#}
		if [ -z "$path" ]; then target=$f; else target=$dir/$path; fi
		if [ ! -e "$target" ]; then
			say "$f: link to $link: no such file"
			continue
		fi
		if [ -n "$frag" ] && [[ "$target" == *.md ]] && ! anchors "$target" | grep -qxF -- "$frag"; then
			say "$f: link to $link: $target has no heading with that anchor"
		fi
	done
done

if [ "$bad" -ne 0 ]; then
	echo "packaging.docs: $bad problems"
	exit 1
fi
echo "packaging.docs: README.md is $lines lines; ${#pages[@]} pages name no commit or issue, and their links resolve"
