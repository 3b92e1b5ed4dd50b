#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.cli_errors: every command of the CLI's help tree (the subcommand
# table, as --help prints it) refuses an unknown option with one line that
# names it and exit 2, whether or not the command's required argument is
# given (an unknown option is named, not the argument missing); a command
# that needs a subcommand says so when given none; `--prog-array` without
# `--index` is refused (no slot is taken by default). Reads the tree from the
# binary's --help; loads nothing (no root needed).
# Usage: cli_errors.sh SLUICE_BIN
set -euo pipefail
bin=$1
fail() { echo "packaging.cli_errors: $*" >&2; exit 1; }
subs_of() { "$bin" "$@" --help | awk '/^Subcommands:/ { s = 1; next } /^[A-Z]/ { s = 0 } s && /^  [a-z]/ { print $1 }'; }

checked=0
required=0
walk() { # PATH...
	local status out sub
	status=0
	out=$("$bin" "$@" --no-such-option 2>&1 >/dev/null) || status=$?
	[ "$status" -eq 2 ] || fail "'sluice $* --no-such-option' exits $status, not 2"
	[ "$out" = "sluice: The following argument was not expected: --no-such-option" ] ||
		fail "'sluice $* --no-such-option' says: $out"
	checked=$((checked + 1))
	if "$bin" "$@" --help | grep -q REQUIRED; then
		required=$((required + 1))
	fi
	if [ -n "$(subs_of "$@")" ]; then
		status=0
		out=$("$bin" "$@" 2>&1 >/dev/null) || status=$?
		[ "$status" -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "subcommand" <<<"$out" ||
			fail "'sluice $*' with no subcommand exits $status and says: $out"
	fi
	for sub in $(subs_of "$@"); do
		walk "$@" "$sub"
	done
}
walk
[ "$checked" -ge 18 ] || fail "only $checked commands checked"
[ "$required" -ge 5 ] || fail "only $required commands with a required argument checked"

for cmd in attach detach; do
	status=0
	out=$("$bin" "$cmd" --prog-array /sys/fs/bpf/no-such-array 2>&1 >/dev/null) || status=$?
	[ "$status" -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q -- "--index" <<<"$out" ||
		fail "'sluice $cmd --prog-array MAP' without --index exits $status and says: $out"
	status=0
	out=$("$bin" "$cmd" --prog-array /sys/fs/bpf/no-such-array --no-such-option 2>&1 >/dev/null) || status=$?
	[ "$status" -eq 2 ] && [ "$out" = "sluice: The following argument was not expected: --no-such-option" ] ||
		fail "'sluice $cmd --prog-array MAP --no-such-option' exits $status and says: $out"
done
echo "packaging.cli_errors: $checked commands ($required with a required argument) name an unknown option" \
	"in one line and exit 2; --prog-array needs --index"
