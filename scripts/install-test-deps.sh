#!/usr/bin/env bash
# Installs everything the test tiers need on a fresh Debian bookworm machine:
#   - FUSE userspace (fusermount3) so rzfs can mount datasets;
#   - attr and acl (getfattr/setfattr, getfacl/setfacl) for the xattr and POSIX ACL tests;
#   - libnbd-bin (nbdcopy, nbdinfo): NBD clients for the volume tests;
#   - zfs-fuse (Debian main), a peer that writes real v23 pools;
#   - OpenZFS 2.3 userland (zdb, zstream, ztest) from bookworm-backports/contrib,
#     unpacked into a private prefix because zfsutils-linux conflicts with zfs-fuse;
#   - OpenZFS's test data and test suite (zfs-test package: zpool_upgrade blockfiles, send
#     streams, ZTS and what it runs: ksh, sudo, fio, ...).
# Idempotent: re-running skips what is present. Prints where the oracles live.
set -euo pipefail

ORACLE_PREFIX=${RZFS_ORACLE_PREFIX:-/opt/rzfs-oracles/openzfs}
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

need_apt_update=1
apt_update() {
  if [ "$need_apt_update" = 1 ]; then
    $SUDO apt-get update -qq
    need_apt_update=0
  fi
}

# --- Extra apt sources, without naming a host: the URIs line of the system's own. ----------
# add_source FILE SUITE COMPONENTS
add_source() {
  [ -f "$1" ] && return 0
  local uris signed
  uris=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  signed=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\nSigned-By: %s\n' \
    "$uris" "$2" "$3" "$signed" | $SUDO tee "$1" >/dev/null
  need_apt_update=1
}
# bookworm-backports with contrib (the OpenZFS oracles); bookworm contrib (zfs-auto-snapshot).
add_source /etc/apt/sources.list.d/rzfs-backports.sources bookworm-backports "main contrib"
add_source /etc/apt/sources.list.d/rzfs-contrib.sources bookworm contrib

# --- Debian packages ----------------------------------------------------------------------
# sanoid runs unchanged against rzfs in tests/snapshot_tools.rs (its zfs dependency is met
# by zfs-fuse). man-db (man, groff) and systemd (systemd-analyze) check what
# scripts/install.sh installs (tests/install.rs).
# ksh, sudo and the rest of the second line are what OpenZFS's test suite runs (tests/zts/ci.sh).
pkgs=(fuse3 zfs-fuse bzip2 pkg-config attr acl e2fsprogs xxd btrfs-progs time sanoid pv mbuffer man-db systemd
  ksh sudo sysstat xxhash parted rsync pax fio bc jq file cpio libnbd-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# zfs-fuse's package starts its daemon through an init script; we start our own per test.
$SUDO pkill -x zfs-fuse 2>/dev/null || true

# --- OpenZFS userland in a private prefix --------------------------------------------------
if [ ! -x "$ORACLE_PREFIX/sbin/zdb" ]; then
  apt_update
  tmp=$(mktemp -d)
  (
    cd "$tmp"
    apt-get download -qq -t bookworm-backports zfsutils-linux zfs-test libzpool6linux \
      libzfs6linux libnvpair3linux libuutil3linux >/dev/null
    $SUDO mkdir -p "$ORACLE_PREFIX"
    for d in ./*.deb; do $SUDO dpkg -x "$d" "$ORACLE_PREFIX"; done
  )
  rm -rf "$tmp"
fi

# --- zfs-auto-snapshot: its package depends on zfsutils-linux, so only the script is unpacked
# into a private prefix (as the oracles are), never installed. --------------------------------
ZAS_PREFIX=${RZFS_ZAS_PREFIX:-/opt/rzfs-oracles/zfs-auto-snapshot}
if [ ! -x "$ZAS_PREFIX/usr/sbin/zfs-auto-snapshot" ]; then
  apt_update
  tmp=$(mktemp -d)
  (
    cd "$tmp"
    apt-get download -qq zfs-auto-snapshot >/dev/null
    $SUDO mkdir -p "$ZAS_PREFIX"
    for d in ./*.deb; do $SUDO dpkg -x "$d" "$ZAS_PREFIX"; done
  )
  rm -rf "$tmp"
fi

# --- Rust components used by the checks -----------------------------------------------------
rustup component add clippy rustfmt >/dev/null 2>&1 || true

# --- fuzz: cargo-fuzz for scripts/fuzz.sh (stable toolchain; see fuzz/README.md) -----------
cargo fuzz --version >/dev/null 2>&1 || cargo install -q cargo-fuzz --version 0.13.2 --locked
# --- end fuzz -------------------------------------------------------------------------------

echo "oracles: $ORACLE_PREFIX/sbin (zdb, zstream, ztest); zfs-fuse: $(command -v zfs-fuse || echo missing)"

# --- pjdfstest (POSIX conformance suite, Rust edition) for tests/pjdfstest/run.sh ----------
PJD=/opt/rzfs-oracles/pjdfstest
[ -x "$PJD/bin/pjdfstest" ] || cargo install -q pjdfstest --version 0.2.2 --locked --root "$PJD"
