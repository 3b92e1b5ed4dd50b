#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.man_options: the man page documents every subcommand and option
# the CLI has, and nothing the CLI lacks. The CLI's side is read from the
# binary: `sluice --help`, then `--help` of every subcommand, recursively
# (CLI11's "Options:" and "Subcommands:" sections). The man page's side is
# read from docs/sluice.8: the .TP items of OPTIONS (sluice's own options),
# and in COMMANDS each top-level .TP item (a command: its leading lowercase
# words, e.g. "rule add") with the options named in its heading and in the
# headings of the .TP items nested under it (.RS ... .RE).
# -h/--help, which every subcommand has, is documented once, under OPTIONS.
# Usage: man_options.sh SLUICE_BINARY PAGE
set -euo pipefail
bin=${1:?usage: man_options.sh SLUICE_BINARY PAGE}
page=${2:?usage: man_options.sh SLUICE_BINARY PAGE}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One record per line: "PATH<TAB>" for a command, "PATH<TAB>OPTION" for each
# of its options; PATH is empty for sluice's own options.
walk() {
	local path=$1 help section= line word opt
	local -a subs=() opts=()
	# shellcheck disable=SC2086 # PATH is words
	if ! help=$("$bin" $path --help 2>&1); then
		echo "man_options.sh: '$bin $path --help' failed:" >&2
		echo "$help" >&2
		exit 1
	fi
	while IFS= read -r line; do
		case "$line" in
		Options:) section=options ;;
		Subcommands:) section=subcommands ;;
		Positionals:) section=positionals ;;
		"  -"*)
			[ "$section" = options ] || continue
			word=${line#  }
			word=${word%% *}
			IFS=, read -r -a opts <<<"$word"
			for opt in "${opts[@]}"; do
				[ -n "$path" ] && { [ "$opt" = -h ] || [ "$opt" = --help ]; } && continue
				printf '%s\t%s\n' "$path" "$opt"
			done
			;;
		"  "[a-z]*)
			[ "$section" = subcommands ] || continue
			word=${line#  }
			subs+=("${word%% *}")
			;;
		esac
	done <<<"$help"
	if [ ${#subs[@]} -eq 0 ]; then
		printf '%s\t\n' "$path"
	fi
	for word in "${subs[@]}"; do
		walk "${path:+$path }$word"
	done
}
walk "" | sort -u >"$tmp/cli"

awk '
	# A roff line as text: fonts, quotes and the leading macro gone, \- as -.
	function plain(s) {
		gsub(/\\f[BIRP]/, "", s)
		gsub(/\\-/, "-", s)
		gsub(/\\&/, "", s)
		gsub(/"/, "", s)
		sub(/^\.(B|BI|BR|I|IR|RB|RI)[ \t]+/, "", s)
		return s
	}
	# Every option named in a heading: --long, or -x (one lowercase letter).
	function options(s, path,    t) {
		s = " " s
		while (match(s, /[ [|,(](--[a-z0-9][a-z0-9-]*|-[a-z])([^a-zA-Z0-9-]|$)/)) {
			t = substr(s, RSTART + 1, RLENGTH - 1)
			sub(/[^a-z0-9-]$/, "", t)
			printf "%s\t%s\n", path, t
			s = substr(s, RSTART + RLENGTH - 1)
		}
	}
	/^\.SH/ { section = $2; depth = 0; heading = 0; next }
	/^\.RS/ { depth++; next }
	/^\.RE/ { if (depth) depth--; next }
	/^\.TP/ { heading = 1; next }
	heading {
		heading = 0
		line = plain($0)
		if (section == "OPTIONS") {
			options(line, "")
		} else if (section == "COMMANDS") {
			if (depth == 0) {
				n = split(line, w, /[ \t]+/)
				cmd = ""
				for (i = 1; i <= n && w[i] ~ /^[a-z][a-z-]*$/; i++)
					cmd = cmd (cmd == "" ? "" : " ") w[i]
				printf "%s\t\n", cmd
			}
			options(line, cmd)
		}
	}
' "$page" | sort -u >"$tmp/man"

status=0
while IFS=$'\t' read -r path opt; do
	status=1
	if [ -z "$opt" ]; then
		echo "sluice $path: a subcommand of the CLI that sluice(8) has no entry for"
	else
		echo "sluice ${path:+$path }$opt: an option of the CLI that sluice(8) does not document${path:+ under $path}"
	fi
done < <(comm -23 "$tmp/cli" "$tmp/man")
while IFS=$'\t' read -r path opt; do
	status=1
	if [ -z "$opt" ]; then
		echo "sluice $path: documented in sluice(8), but the CLI has no such subcommand"
	else
		echo "sluice ${path:+$path }$opt: documented in sluice(8)${path:+ under $path}, but the CLI has no such option"
	fi
done < <(comm -13 "$tmp/cli" "$tmp/man")
if [ "$status" -eq 0 ]; then
	echo "packaging.man_options: sluice(8) documents the CLI's $(grep -c $'\t$' "$tmp/cli") commands and $(grep -vc $'\t$' "$tmp/cli") options, and nothing else"
fi
exit "$status"
