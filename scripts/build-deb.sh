#!/bin/sh
# Builds Debian packages of rzfs with dpkg-deb, from what scripts/install.sh installs with
# --prefix /usr:
#   rzfs         the binaries (/usr/bin), man pages, systemd units (/usr/lib/systemd/system)
#   rzfs-compat  zfs, zpool, zdb and zinject as links in /usr/lib/rzfs/compat/bin (not on
#                PATH: it never clashes with zfsutils-linux; see README "Install")
#
#   scripts/build-deb.sh [--bin-dir DIR] [--out DIR]      (default out: target/debian)
#
# The maintainer is $DEBFULLNAME <$DEBEMAIL> when set. Binaries are stripped in the
# package; libc6's version comes from the newest glibc symbol version they use.
# Without --bin-dir the binaries are built (cargo build --release). The units are installed,
# not enabled: systemctl enable --now rzfs.target.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_SRC=""
OUT=$ROOT/target/debian
while [ $# -gt 0 ]; do
  case $1 in
    --bin-dir) BIN_SRC=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "build-deb.sh: unknown argument: $1" >&2; exit 1 ;;
  esac
done
command -v dpkg-deb >/dev/null || { echo "build-deb.sh: dpkg-deb not found" >&2; exit 1; }

MAINT="${DEBFULLNAME:-rzfs developers} <${DEBEMAIL:-rzfs@example.org}>"
VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n 1)
ARCH=$(dpkg --print-architecture)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rzfs-deb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/stage

set -- --prefix /usr --destdir "$STAGE" --compat --systemd
[ -z "$BIN_SRC" ] || set -- "$@" --bin-dir "$BIN_SRC"
"$ROOT/scripts/install.sh" "$@" >/dev/null

# Debian keeps man pages compressed, binaries stripped, a copyright file and a changelog
# per package.
gzip -9n "$STAGE"/usr/share/man/man8/*.8
for b in "$STAGE"/usr/bin/rz*; do strip --strip-unneeded --remove-section=.comment "$b"; done
GLIBC=$(objdump -T "$STAGE"/usr/bin/rz* | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  WHEN=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
else
  WHEN=$(git -C "$ROOT" log -1 --format=%aD 2>/dev/null || date -u -R)
fi
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)

copyright() {
  mkdir -p "$1/usr/share/doc/$2"
  cat >"$1/usr/share/doc/$2/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: rzfs

Files: *
Copyright: the rzfs developers
License: Apache-2.0
 On Debian systems the full text of the license is in /usr/share/common-licenses/Apache-2.0.
EOF
  printf '%s (%s) unstable; urgency=medium\n\n  * Built from rzfs commit %s.\n\n -- %s  %s\n' \
    "$2" "$VERSION" "$COMMIT" "$MAINT" "$WHEN" | gzip -9n >"$1/usr/share/doc/$2/changelog.gz"
}

# --- rzfs ------------------------------------------------------------------------------
P=$WORK/rzfs
mkdir -p "$P/DEBIAN"
(cd "$STAGE" && tar cf - --exclude=./usr/lib/rzfs .) | (cd "$P" && tar xf -)
copyright "$P" rzfs
SIZE=$(du -sk "$P" | cut -f1)
cat >"$P/DEBIAN/control" <<EOF
Package: rzfs
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINT
Installed-Size: $SIZE
Depends: libc6 (>= $GLIBC), fuse3
Suggests: rzfs-compat
Section: admin
Priority: optional
Description: ZFS in userspace: pools and datasets over FUSE
 rzfs is an implementation of ZFS that runs wherever FUSE runs, on-disk
 compatible with OpenZFS: rzpool and rzfs (the zpool and zfs of rzfs), the
 daemon rzfsd, rzdb (inspection and recovery without a daemon) and rzinject.
 The systemd units (rzfs.target) import the pools of the pool cache and mount
 their file systems at boot.
EOF
cat >"$P/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
EOF
cat >"$P/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
EOF
chmod 0755 "$P/DEBIAN/postinst" "$P/DEBIAN/postrm"

# --- rzfs-compat -----------------------------------------------------------------------
C=$WORK/rzfs-compat
mkdir -p "$C/DEBIAN" "$C/usr/lib/rzfs"
cp -a "$STAGE/usr/lib/rzfs/compat" "$C/usr/lib/rzfs/"
copyright "$C" rzfs-compat
cat >"$C/DEBIAN/control" <<EOF
Package: rzfs-compat
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINT
Depends: rzfs (= $VERSION)
Section: admin
Priority: optional
Description: zfs and zpool command names for rzfs
 Links named zfs, zpool, zdb and zinject to rzfs's commands, in
 /usr/lib/rzfs/compat/bin only, so that OpenZFS's zfsutils-linux is never
 overwritten. Put that directory first on PATH where tools (sanoid, syncoid,
 zfs-auto-snapshot) should use rzfs, e.g. in a systemd drop-in:
 Environment=PATH=/usr/lib/rzfs/compat/bin:/usr/sbin:/usr/bin:/sbin:/bin
EOF

mkdir -p "$OUT"
for p in "$P" "$C"; do
  name=$(basename "$p")
  deb=$OUT/${name}_${VERSION}_$ARCH.deb
  dpkg-deb --root-owner-group -Zxz --build "$p" "$deb" >/dev/null
  echo "$deb"
done
