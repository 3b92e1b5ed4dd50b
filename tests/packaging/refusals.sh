#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.refusals: bad input changes nothing. Every command of the CLI's
# help tree (read from --help, as cli_errors.sh does) is run on an empty pin
# directory with generated input: each positional value of a list (an
# interface that is missing, one that exists, a prefix, a missing file, a
# policy refused for its tables' size, one refused by its checks), and each
# option with each of a list of values (a word, 0, 2^32-1) after an existing
# interface and after a prefix. A command that refuses (exits non-zero) must
# leave the pin directory, its lock directory and the run directory as they
# were: absent. One that is accepted is undone (detach --all) and counted.
# Root, bpffs; makes a veth pair ${SLUICE_REFUSALS_PREFIX}a/b (no address).
# Usage: refusals.sh SLUICE_BIN
set -uo pipefail
bin=$1
prefix=${SLUICE_REFUSALS_PREFIX:-slr-}
export SLUICE_PIN_DIR=${SLUICE_PIN_DIR:-/sys/fs/bpf/sluice-refusals}
unset SLUICE_RUN_DIR
run_dir=/run/sluice-${SLUICE_PIN_DIR##*/}
work=$(mktemp -d)
fail() { echo "packaging.refusals: $*" >&2; exit 1; }
cleanup() {
	"$bin" detach --all >/dev/null 2>&1
	rm -rf "$SLUICE_PIN_DIR" "$SLUICE_PIN_DIR-lock" "$run_dir" "$work"
	ip link del "${prefix}a" 2>/dev/null
}
trap cleanup EXIT
[ "$(id -u)" -eq 0 ] || fail "needs root (bpffs, a veth pair)"
cleanup
work=$(mktemp -d)
ip link add "${prefix}a" type veth peer name "${prefix}b" || fail "cannot make a veth pair"

printf 'tables:\n  max_sources: 4294967295\nrules:\n  - name: a\n    cidr: 10.0.0.0/8\n    rate: 5/s\n' \
	>"$work/too-large.yaml"
printf 'tables:\n  max_rules: 1\nrules:\n  - name: a\n    cidr: 10.0.0.0/8\n    action: deny\n  - name: b\n    cidr: 10.0.0.0/9\n    action: deny\n' \
	>"$work/refused.yaml"
printf 'interfaces:\n  - name: %snosuch\nrules: []\n' "$prefix" >"$work/no-interface.yaml"
positionals=("${prefix}nosuch" "${prefix}a" 10.0.0.0/8 "$work/missing.yaml" "$work/too-large.yaml"
	"$work/refused.yaml" "$work/no-interface.yaml")
values=(bad 0 4294967295)

state() { find "$SLUICE_PIN_DIR" "$SLUICE_PIN_DIR-lock" "$run_dir" 2>/dev/null | sort; }
subs_of() { "$bin" "$@" --help | awk '/^Subcommands:/ { s = 1; next } /^[A-Z]/ { s = 0 } s && /^  [a-z]/ { print $1 }'; }
options_of() { # NAME TAKES-VALUE per option, --help aside
	"$bin" "$@" --help | awk '/^Options:/ { s = 1; next } /^[A-Z]/ { s = 0 }
		s && /^  -/ { n = $1; sub(/^-h,/, "", n); if (n == "--help") next;
			print n, ($2 ~ /^[A-Z]+$/ && $2 != "Needs:" && $2 != "Excludes:") ? 1 : 0 }'
}

refused=0
accepted=0
left=()
try() { # ARGS...
	local before after status
	before=$(state)
	status=0
	timeout 3 "$bin" "$@" </dev/null >/dev/null 2>&1 || status=$?
	after=$(state)
	if [ "$status" -ne 0 ] && [ "$status" -ne 124 ]; then
		refused=$((refused + 1))
		if [ "$after" != "$before" ]; then
			left+=("'sluice $*' (exit $status) left: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')")
			rm -rf "$SLUICE_PIN_DIR" "$SLUICE_PIN_DIR-lock" "$run_dir"
		fi
	else
		accepted=$((accepted + 1))
		"$bin" detach --all >/dev/null 2>&1
		rm -rf "$SLUICE_PIN_DIR" "$SLUICE_PIN_DIR-lock" "$run_dir"
	fi
}

walk() { # PATH...
	local sub p opt takes v
	if [ -n "$(subs_of "$@")" ]; then
		for sub in $(subs_of "$@"); do
			walk "$@" "$sub"
		done
		return
	fi
	try "$@"
	for p in "${positionals[@]}"; do
		try "$@" "$p"
	done
	while read -r opt takes; do
		for p in "${prefix}a" 10.0.0.0/8; do
			if [ "$takes" = 1 ]; then
				for v in "${values[@]}"; do
					try "$@" "$p" "$opt" "$v"
				done
			else
				try "$@" "$p" "$opt"
			fi
		done
	done < <(options_of "$@")
}
walk
if [ ${#left[@]} -gt 0 ]; then
	printf '%s\n' "${left[@]}" >&2
	fail "${#left[@]} of $refused refused commands left something behind"
fi
[ "$refused" -ge 300 ] || fail "only $refused refusals checked"
echo "packaging.refusals: $refused refused commands left the pin, lock and run directories as they were" \
	"($accepted accepted and undone)"
