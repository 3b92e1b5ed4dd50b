#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# packaging.deb: the package scripts/package.sh builds (cpack in BUILD_DIR),
# installed with dpkg into a scratch root of its own (its own dpkg database),
# holds the files `cmake --install` puts in place, under /usr; its sluice runs
# and names the build's version; systemd-analyze accepts its units; its
# dependencies were computed (dpkg-shlibdeps); and `dpkg --purge` leaves
# nothing of it behind.
# Usage: deb.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
fail() { echo "packaging.deb: $*" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

(cd "$scratch" && cpack -G DEB --config "$build/CPackConfig.cmake" >"$scratch/cpack.log" 2>&1) || fail "cpack failed: $(tail -5 "$scratch/cpack.log")"
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
deb=$scratch/sluice_${version}_${arch}.deb
[ -f "$deb" ] || fail "no $(basename "$deb"); cpack made: $(ls "$scratch")"

# The control fields an operator's apt reads.
[ "$(dpkg-deb -f "$deb" Package)" = sluice ] || fail "Package is not sluice"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version is not $version"
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libbpf libxdp libyaml-cpp libyaml-0-2 libhiredis libc6; do
	grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done

# The files, as `cmake --install --prefix /usr` lays them out.
want=$(printf '%s\n' /usr/sbin/sluice /usr/share/man/man8/sluice.8 /usr/share/doc/sluice/sluice.yaml.example \
	/usr/share/doc/sluice/sluice-dashboard.json /usr/share/bash-completion/completions/sluice \
	/usr/lib/systemd/system/sluice.service /usr/lib/systemd/system/sluice-agent.service | sort)
got=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { sub(/^\./, "", $6); print $6 }' | sort)
[ "$got" = "$want" ] || fail "the package's files differ:
expected:
$want
packaged:
$got"

# Installed into a scratch root with a dpkg database of its own (the host's
# is not touched): dependencies are the host's, so they are not checked there.
root=$scratch/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
dpkg --root="$root" --log=/dev/null --force-depends --force-not-root -i "$deb" >/dev/null 2>"$scratch/dpkg.err" ||
	fail "dpkg -i failed: $(cat "$scratch/dpkg.err")"
dpkg --root="$root" -s sluice | grep -qx "Status: install ok installed" || fail "dpkg does not list sluice as installed"
out=$("$root/usr/sbin/sluice" --version) || fail "the installed sluice does not run"
grep -q "^sluice $version\b" <<<"$out" || fail "the installed sluice says '$out', not version $version"
grep -qx "ExecStart=/usr/sbin/sluice apply /etc/sluice/sluice.yaml" "$root/usr/lib/systemd/system/sluice.service" ||
	fail "sluice.service does not run /usr/sbin/sluice"
for unit in sluice.service sluice-agent.service; do
	out=$(MANPATH=$root/usr/share/man systemd-analyze verify --root="$root" "$root/usr/lib/systemd/system/$unit" 2>&1) ||
		fail "systemd-analyze verify of $unit failed: $out"
	[ -z "$out" ] || fail "systemd-analyze verify warns about $unit: $out"
done

dpkg --root="$root" --log=/dev/null --force-not-root --purge sluice >/dev/null 2>"$scratch/dpkg.err" ||
	fail "dpkg --purge failed: $(cat "$scratch/dpkg.err")"
left=$(cd "$root" && find usr -type f 2>/dev/null || true)
[ -z "$left" ] || fail "files left after dpkg --purge: $left"
echo "packaging.deb: $(basename "$deb") installs $(wc -l <<<"$want") files, runs ($("$build/sluice" --version | head -1)), verifies its units and purges cleanly"
