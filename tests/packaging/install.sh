#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.install: `cmake --install` of this build tree into a scratch
# DESTDIR puts exactly the seven files where docs/operations.md says, the units run the
# binary it installed, that binary fails with one line without a policy, and
# systemd-analyze accepts both units (the agent's restarts on failure and
# never detaches).
# Usage: install.sh BUILD_DIR PREFIX SBINDIR MANDIR DATADIR UNITDIR
# (the directories as CMake has them: relative to PREFIX unless absolute).
set -euo pipefail
build=$1 prefix=$2 sbindir=$3 mandir=$4 datadir=$5 unitdir=$6

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "packaging.install: $*" >&2; exit 1; }

# Where DIR lands for an install prefix, as install(DESTINATION) places it.
under() { case $2 in /*) echo "$2" ;; *) echo "$1/$2" ;; esac; }

# Installs into DESTDIR $1 (extra arguments go to cmake --install) and checks
# the files against prefix $2.
check_install() {
  local dest=$1 pfx=$2
  shift 2
  DESTDIR=$dest cmake --install "$build" "$@" >/dev/null
  local sbin man8 doc unit
  sbin=$(under "$pfx" "$sbindir")
  man8=$(under "$pfx" "$mandir")/man8
  doc=$(under "$pfx" "$datadir")/doc/sluice
  unit=$(under "$pfx" "$unitdir")
  local want
  local completions
  completions=$(under "$pfx" "$datadir")/bash-completion/completions
  want=$(printf '%s\n' "$sbin/sluice" "$man8/sluice.8" "$doc/sluice.yaml.example" "$doc/sluice-dashboard.json" \
    "$completions/sluice" "$unit/sluice.service" "$unit/sluice-agent.service" | sort)
  local got
  got=$(cd "$dest" && find . -type f -o -type l | sed 's/^\.//' | sort)
  [ "$got" = "$want" ] || fail "installed files differ (prefix $pfx):
expected:
$want
installed:
$got"
  [ -x "$dest$sbin/sluice" ] || fail "$sbin/sluice is not executable"
  "$dest$sbin/sluice" --version | grep -q '^sluice [0-9]' || fail "the installed sluice does not run"

  local f=$dest$unit/sluice.service
  for line in "ExecStart=$sbin/sluice apply /etc/sluice/sluice.yaml" \
              "ExecReload=$sbin/sluice apply /etc/sluice/sluice.yaml" \
              "ExecStop=$sbin/sluice detach --all"; do
    grep -qxF "$line" "$f" || fail "$unit/sluice.service lacks the line: $line"
  done
  if grep -n '@[A-Za-z_]*@' "$f"; then
    fail "$unit/sluice.service has a placeholder left"
  fi

  f=$dest$unit/sluice-agent.service
  for line in "ExecStart=$sbin/sluice agent \$SLUICE_AGENT_ARGS" "EnvironmentFile=-/etc/default/sluice-agent" "Restart=on-failure"; do
    grep -qxF "$line" "$f" || fail "$unit/sluice-agent.service lacks the line: $line"
  done
  # Stopping the agent must never detach: no command of its runs but the agent.
  if grep -nE '^Exec(Stop|StopPost|Reload|StartPre|StartPost)=' "$f"; then
    fail "$unit/sluice-agent.service runs a command besides the agent"
  fi
  if grep -nE '^(BindsTo|PartOf|Requires)=' "$f"; then
    fail "$unit/sluice-agent.service ties its life to another unit"
  fi
  if grep -n '@[A-Za-z_]*@' "$f"; then
    fail "$unit/sluice-agent.service has a placeholder left"
  fi
}

# A prefix given at install time, as packagers do, moves the unit's paths too.
check_install "$scratch/moved" /opt/sluice-test --prefix /opt/sluice-test
# The configured prefix last, so the unit left in the build tree is its own.
check_install "$scratch/default" "$prefix"

# Without /etc/sluice/sluice.yaml the unit's ExecStart fails, with one line
# saying why (the policy is read before anything else is touched).
sluice=$scratch/default$(under "$prefix" "$sbindir")/sluice
status=0
out=$("$sluice" apply "$scratch/no-such-dir/sluice.yaml" 2>&1) || status=$?
[ "$status" -eq 1 ] && [ "$out" = "sluice: cannot open $scratch/no-such-dir/sluice.yaml: No such file or directory" ] ||
  fail "apply of a missing policy: exit $status, said: $out"

# systemd-analyze verify, inside the DESTDIR (--root): the unit's syntax, its
# commands' executables and its Documentation= man page (found through
# MANPATH). It exits 0 on unknown keys and bad values, warning only, so any
# output is a failure.
if command -v systemd-analyze >/dev/null; then
  dest=$scratch/default
  for name in sluice.service sluice-agent.service; do
    unit=$(under "$prefix" "$unitdir")/$name
    out=$(MANPATH=$dest$(under "$prefix" "$mandir") \
          systemd-analyze verify --root="$dest" "$dest$unit" 2>&1) ||
      fail "systemd-analyze verify of $name failed: $out"
    [ -z "$out" ] || fail "systemd-analyze verify warns about $name: $out"
  done
  echo "packaging.install: files in place; systemd-analyze verify accepts both units"
else
  # Without systemd: every line is a comment, one of the three sections, or a
  # key of that section that systemd knows, as Key=Value.
  units=$scratch/default$(under "$prefix" "$unitdir")
  bad=$(awk '
    /^(#|$)/ { next }
    /^\[(Unit|Service|Install)\]$/ { section = $0; next }
    section == "[Unit]" && /^(Description|Documentation|Wants|Before|After|Conflicts|DefaultDependencies)=./ { next }
    section == "[Service]" && /^(Type|RemainAfterExit|ExecStartPre|ExecStart|ExecReload|ExecStop|Restart|RestartSec)=./ { next }
    section == "[Install]" && /^WantedBy=./ { next }
    { print FILENAME ":" FNR ": " $0 }' "$units/sluice.service" "$units/sluice-agent.service")
  [ -z "$bad" ] || fail "unexpected unit lines: $bad"
  echo "packaging.install: files in place; systemd-analyze not found, so the units' keys were checked by a list"
fi
