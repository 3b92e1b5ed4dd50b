#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.cli_errors: every command of the CLI's help tree that takes no
# required argument refuses an unknown option with one line that names it and
# exit 2; a command that needs a subcommand says so when given none. Reads the
# tree from the binary's --help; loads nothing (no root needed).
# Usage: cli_errors.sh SLUICE_BIN
set -euo pipefail
bin=$1
fail() { echo "packaging.cli_errors: $*" >&2; exit 1; }
subs_of() { "$bin" "$@" --help | awk '/^Subcommands:/ { s = 1; next } /^[A-Z]/ { s = 0 } s && /^  [a-z]/ { print $1 }'; }

checked=0
walk() { # PATH...
	local status out sub
	if ! "$bin" "$@" --help | grep -q REQUIRED; then
		status=0
		out=$("$bin" "$@" --no-such-option 2>&1 >/dev/null) || status=$?
		[ "$status" -eq 2 ] || fail "'sluice $* --no-such-option' exits $status, not 2"
		[ "$out" = "sluice: The following argument was not expected: --no-such-option" ] ||
			fail "'sluice $* --no-such-option' says: $out"
		checked=$((checked + 1))
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
[ "$checked" -ge 10 ] || fail "only $checked commands checked"
echo "packaging.cli_errors: $checked commands name an unknown option in one line and exit 2"
