#!/usr/bin/env bash
# criu.sh DIR: print the path of a criu that works on this kernel.
#
# The system's criu when `criu check` passes; otherwise Debian unstable's
# (4.2 works on 6.x kernels where Debian 12's 3.17 fails its vDSO check and
# 4.1 hangs in dump: /work/shared/CRIU.md), downloaded as Debian packages
# into DIR and run from there with its own dynamic loader, the system left
# as it is.  The mirror is the one in this machine's own apt sources.
#
# Exit status: 0 with the path on stdout; 1 when no criu can run here,
# with the reason on stderr (no CAP_SYS_ADMIN, no apt, no network).
set -euo pipefail

D=${1:?usage: criu.sh DIR}
# apt takes a relative Dir::Etc::SourceList as relative to /etc/apt.
D=$(realpath -m "$D")
# The set that satisfies criu 4.2's libraries (checked with ldd).
PKGS=(criu libcompel1 libc6 libbsd0 libmd0 libgnutls30t64 libnet9 libnftables1 libnl-3-200
      libprotobuf-c1 libuuid1 libp11-kit0 libidn2-0 libunistring5 libtasn1-6 libnettle8t64
      libhogweed6t64 libgmp10 libjansson4 libmnl0 libnftnl11 libxtables12 libffi8 libedit2
      libtinfo6 libbz2-1.0 libcap2 libzstd1 zlib1g)

die() { echo "criu.sh: $*" >&2; exit 1; }

# works CRIU: criu check passes (its warnings aside).
works() { "$1" check >/dev/null 2>&1; }

if command -v criu >/dev/null && works "$(command -v criu)"; then
    command -v criu
    exit 0
fi
if [ -x "$D/criu" ] && works "$D/criu"; then
    echo "$D/criu"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "criu needs root (CAP_SYS_ADMIN) and this is uid $(id -u)"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "no apt-get/dpkg to fetch criu"

# The machine's Debian mirror: the first URI of a source for the
# distribution itself (not security, not a third party).
mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '/^URIs:/ { u = $2 } /^Suites:/ { if ($0 !~ /security/ && u ~ /debian/) { print u; exit } }' "$f"
    done
    [ -f /etc/apt/sources.list ] &&
        awk '$1 == "deb" && $2 ~ /debian/ && $3 !~ /security/ { print $2; exit }' /etc/apt/sources.list
    return 0
}
uri=$(mirror | head -n 1)
[ -n "$uri" ] || die "no Debian mirror in this machine's apt sources to fetch criu from"

rm -rf "$D/apt" "$D/root" "$D/debs"
mkdir -p "$D/apt/lists/partial" "$D/apt/cache/archives/partial" "$D/debs" "$D/root"
# Checked against the archive keys the machine trusts already.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "no $keyring to check unstable's signatures with"
echo "deb [signed-by=$keyring] $uri unstable main" >"$D/apt/sources.list"
APT=(-o "Dir::Etc::SourceList=$D/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$D/apt/lists" -o "Dir::Cache=$D/apt/cache"
     -o Debug::NoLocking=1 -o APT::Get::List-Cleanup=0)
apt-get "${APT[@]}" update >"$D/apt/update.log" 2>&1 ||
    { tail -n 5 "$D/apt/update.log" >&2; die "apt-get update of unstable ($uri) failed"; }
(cd "$D/debs" && apt-get "${APT[@]}" download "${PKGS[@]}") >"$D/apt/download.log" 2>&1 ||
    { tail -n 5 "$D/apt/download.log" >&2; die "downloading criu's packages failed"; }
for deb in "$D"/debs/*.deb; do
    dpkg -x "$deb" "$D/root"
done
lib="$D/root/usr/lib/x86_64-linux-gnu:$D/root/lib/x86_64-linux-gnu"
cat >"$D/criu" <<EOF
#!/bin/sh
# criu from Debian unstable, run with its own loader and libraries (tests/servers/criu.sh).
exec "$D/root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$lib" "$D/root/usr/sbin/criu" "\$@"
EOF
chmod +x "$D/criu"
works "$D/criu" || { "$D/criu" check >&2 || true; die "criu from unstable does not pass 'criu check' here"; }
echo "$D/criu"
