#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.completion: scripts/sluice.bash-completion against the real binary.
# - every subcommand path of the CLI's help tree completes to exactly its
#   subcommands, and `-` to exactly its long options;
# - each option with a fixed set of values (--algo, --mode, --proto, --scope,
#   --sort) completes to exactly the words its help line names;
# - with a program loaded, rule names complete after `rule del`, `rule set` and
#   `--rule`, and interface names after `attach` and `detach`.
# Loads the program into its own pin directory (root), removed at the end.
# Usage: completion.sh SLUICE_BIN COMPLETION_FILE
set -euo pipefail
bin=$1 completion=$2
fail() { echo "packaging.completion: $*" >&2; exit 1; }

# shellcheck source=/dev/null
source "$completion"

# complete WORD... : what the completion offers for the last word, sorted, one per line.
complete_words() {
	COMP_WORDS=("$bin" "$@")
	COMP_CWORD=$#
	COMPREPLY=()
	_sluice
	printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort
}

# The help tree, read here with its own parser (not the completion's).
help_of() { "$bin" "$@" --help; }
subs_of() { help_of "$@" | awk '/^Subcommands:/ { s = 1; next } /^[A-Z]/ { s = 0 } s && /^  [a-z]/ { print $1 }' | sort; }
opts_of() { help_of "$@" | grep -oE '^  (-[a-z],)?--[a-z][a-z0-9-]*' | sed 's/.*,//; s/^ *//' | sort; }

checked=0
walk() { # PATH...
	local want got sub
	want=$(subs_of "$@")
	if [ -n "$want" ]; then
		got=$(complete_words "$@" "")
		[ "$got" = "$want" ] || fail "'sluice $* <TAB>' offers [$(echo $got)], the CLI has [$(echo $want)]"
	fi
	want=$(opts_of "$@")
	got=$(complete_words "$@" "-")
	[ "$got" = "$want" ] || fail "'sluice $* -<TAB>' offers [$(echo $got)], the CLI has [$(echo $want)]"
	checked=$((checked + 1))
	for sub in $(subs_of "$@"); do
		walk "$@" "$sub"
	done
}
walk
[ "$checked" -ge 15 ] || fail "only $checked subcommand paths found in the help tree"

# OPTION's values as its help line names them: the words before "(", split at
# commas and "or", e.g. "token-bucket (default), gcra, ... or sliding-window".
values_in_help() { # OPTION PATH...
	local opt=$1
	shift
	help_of "$@" | grep -E "^  $opt TEXT" | sed -E "s/^  $opt TEXT *//; s/:.*//; s/\([^)]*\)//g; s/;.*//; s/ or /, /g" |
		tr ',' '\n' | awk '{ print $1 }' | sed '/^$/d' | sort
}
for spec in "--algo rule add" "--mode attach" "--proto rule add" "--scope rule add" "--sort top"; do
	read -r opt path <<<"$spec"
	# shellcheck disable=SC2086
	want=$(values_in_help "$opt" $path)
	[ -n "$want" ] || fail "no values found in the help of 'sluice $path $opt'"
	# shellcheck disable=SC2086
	got=$(complete_words $path "$opt" "")
	[ "$got" = "$want" ] || fail "'sluice $path $opt <TAB>' offers [$(echo $got)], its help names [$(echo $want)]"
done

# Interfaces.
got=$(complete_words attach "")
want=$(ls /sys/class/net | sort)
[ "$got" = "$want" ] || fail "'sluice attach <TAB>' offers [$(echo $got)], not the interfaces [$(echo $want)]"
got=$(complete_words detach l)
[ "$got" = "$(ls /sys/class/net | grep '^l' | sort)" ] || fail "'sluice detach l<TAB>' offers [$(echo $got)]"

# Rule names, from a loaded program of this test's own.
export SLUICE_PIN_DIR=/sys/fs/bpf/sluice-completion-test
export SLUICE_RUN_DIR=/run/sluice-completion-test
cleanup() {
	"$bin" detach --all >/dev/null 2>&1 || true
	rmdir "$SLUICE_PIN_DIR" "$SLUICE_PIN_DIR-lock" 2>/dev/null || true
	rm -rf "$SLUICE_RUN_DIR"
}
trap cleanup EXIT
cleanup
"$bin" rule add 198.51.100.0/24 --rate 100/s --name web-limit >/dev/null
"$bin" rule add 2001:db8::/32 --rate 100/s --name web6 >/dev/null
"$bin" rule add 203.0.113.0/24 --deny --name blocked >/dev/null
for path in "rule del" "rule set" "stats --rule"; do
	# shellcheck disable=SC2086
	got=$(complete_words $path we)
	[ "$got" = "$(printf 'web-limit\nweb6')" ] || fail "'sluice $path we<TAB>' offers [$(echo $got)], not the rules web-limit web6"
done
got=$(complete_words rule del "")
[ "$got" = "$(printf 'blocked\nweb-limit\nweb6')" ] || fail "'sluice rule del <TAB>' offers [$(echo $got)]"

echo "packaging.completion: $checked subcommand paths, 5 value lists, interfaces and rule names complete as the CLI has them"
