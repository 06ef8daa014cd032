#!/bin/sh
# Installs rzfs: the binaries, their man pages, and on request the zfs/zpool compat names
# and the systemd units. Run it again to update; --uninstall removes what it installs.
#
#   scripts/install.sh [--prefix DIR] [--destdir DIR] [--bin-dir DIR] [--compat] [--systemd]
#                      [--unit-dir DIR] [--no-man] [--uninstall]
#
#   --prefix DIR    where rzfs goes (default /usr/local): DIR/bin/rzfs, rzpool, rzfsd, rzdb,
#                   rzinject; DIR/share/man/man8/*.8; DIR/share/doc/rzfs
#   --destdir DIR   staging root for packagers: files go to DIR/PREFIX/..., and the paths
#                   written into them (units) are PREFIX/... (default: $DESTDIR)
#   --bin-dir DIR   take the five binaries from DIR instead of `cargo build --release`
#   --compat        also provide zfs, zpool, zdb and zinject, as links in a directory of their
#                   own, PREFIX/lib/rzfs/compat/bin (never /usr/sbin, where OpenZFS keeps its
#                   commands): put it first on PATH where rzfs should answer to those names
#   --systemd       install the units rzfsd.service, rzfs-import-cache.service,
#                   rzfs-import.target, rzfs-mount.service and rzfs.target into the unit
#                   directory (PREFIX/lib/systemd/system for /usr and /usr/local, else
#                   /etc/systemd/system; --unit-dir overrides)
#   --no-man        do not generate man pages (they need the binaries to run here)
#   --uninstall     remove every file this script installs under PREFIX (whatever options
#                   installed them) and the directories of its own
#
# Idempotent: files already up to date are left alone. Prints every path it installs or
# removes. Never touches OpenZFS's files, nor the pool cache /etc/rzfs/rzpool.cache.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=/usr/local
DESTDIR=${DESTDIR:-}
BIN_SRC=""
COMPAT=0
SYSTEMD=0
MAN=1
UNINSTALL=0
UNITDIR=""
PROGS="rzfs rzpool rzfsd rzdb rzinject"
# compat name -> rzfs program
COMPAT_LINKS="zfs:rzfs zpool:rzpool zdb:rzdb zinject:rzinject"
UNITS="rzfsd.service rzfs-import-cache.service rzfs-import.target rzfs-mount.service rzfs.target"

die() { echo "install.sh: $*" >&2; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

while [ $# -gt 0 ]; do
  case $1 in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --destdir) DESTDIR=${2:?--destdir needs a directory}; shift 2 ;;
    --destdir=*) DESTDIR=${1#*=}; shift ;;
    --bin-dir) BIN_SRC=${2:?--bin-dir needs a directory}; shift 2 ;;
    --bin-dir=*) BIN_SRC=${1#*=}; shift ;;
    --unit-dir) UNITDIR=${2:?--unit-dir needs a directory}; shift 2 ;;
    --unit-dir=*) UNITDIR=${1#*=}; shift ;;
    --compat) COMPAT=1; shift ;;
    --systemd) SYSTEMD=1; shift ;;
    --no-man) MAN=0; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

case $PREFIX in /*) ;; *) die "--prefix must be an absolute path: $PREFIX" ;; esac
PREFIX=${PREFIX%/}
[ -n "$PREFIX" ] || die "--prefix / is not supported (use /usr)"
if [ -n "$DESTDIR" ]; then
  case $DESTDIR in /*) ;; *) DESTDIR=$(pwd)/$DESTDIR ;; esac
  DESTDIR=${DESTDIR%/}
fi
if [ -z "$UNITDIR" ]; then
  case $PREFIX in
    /usr | /usr/local) UNITDIR=$PREFIX/lib/systemd/system ;;
    *) UNITDIR=/etc/systemd/system ;;
  esac
fi

BINDIR=$PREFIX/bin
MANDIR=$PREFIX/share/man/man8
DOCDIR=$PREFIX/share/doc/rzfs
LIBDIR=$PREFIX/lib/rzfs
COMPATDIR=$LIBDIR/compat/bin

# say VERB PATH: one line per file, the path as it is on this machine (with DESTDIR).
say() { printf '%-10s %s\n' "$1" "$2"; }

# put SRC DEST MODE: DEST (without DESTDIR) becomes a copy of SRC.
put() {
  d=$DESTDIR$2
  mkdir -p "$(dirname "$d")"
  if [ -f "$d" ] && [ ! -L "$d" ] && cmp -s "$1" "$d"; then
    chmod "$3" "$d"
    say unchanged "$d"
  else
    # A new file beside the old one, then a rename: a running binary is never rewritten.
    rm -f "$d.rzfs-new"
    cp "$1" "$d.rzfs-new"
    chmod "$3" "$d.rzfs-new"
    mv -f "$d.rzfs-new" "$d"
    say installed "$d"
  fi
}

# link TARGET LINK: LINK (without DESTDIR) becomes a symbolic link to TARGET.
link() {
  d=$DESTDIR$2
  mkdir -p "$(dirname "$d")"
  if [ -L "$d" ] && [ "$(readlink "$d")" = "$1" ]; then
    say unchanged "$d -> $1"
  else
    [ ! -e "$d" ] || [ -L "$d" ] || die "$d exists and is not a link; not replacing it"
    ln -sfn "$1" "$d"
    say linked "$d -> $1"
  fi
}

# relpath FROM_DIR TO_PATH: TO_PATH relative to FROM_DIR (both absolute, no symlinks).
relpath() {
  from=$1 to=$2 up=""
  while :; do
    case $to in
      "$from"/*) break ;;
    esac
    from=$(dirname "$from")
    up="../$up"
    [ "$from" != / ] || { from=""; break; }
  done
  echo "$up${to#"$from"/}"
}

systemd_running() { [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }

# ---------------------------------------------------------------------------------------
if [ "$UNINSTALL" = 1 ]; then
  if systemd_running; then
    for u in $UNITS; do
      if systemctl is-enabled "$u" >/dev/null 2>&1 || systemctl is-active "$u" >/dev/null 2>&1; then
        echo "install.sh: warning: $u is enabled or running; stop it first:" \
          "systemctl disable --now rzfs.target rzfsd.service" >&2
      fi
    done
  fi
  gone() {
    d=$DESTDIR$1
    if [ -e "$d" ] || [ -L "$d" ]; then
      rm -f "$d"
      say removed "$d"
    fi
  }
  for p in $PROGS; do gone "$BINDIR/$p"; done
  for l in $COMPAT_LINKS; do gone "$COMPATDIR/${l%%:*}"; done
  for p in $PROGS; do gone "$MANDIR/$p.8"; done
  for u in $UNITS; do gone "$UNITDIR/$u"; done
  gone "$DOCDIR/examples/compat-path.conf"
  gone "$DOCDIR/README.md"
  # Directories of rzfs's own, when empty; shared ones (bin, man8, the unit dir) stay.
  for dir in "$COMPATDIR" "$LIBDIR/compat" "$LIBDIR" "$DOCDIR/examples" "$DOCDIR"; do
    if [ -d "$DESTDIR$dir" ] && rmdir "$DESTDIR$dir" 2>/dev/null; then
      say removed "$DESTDIR$dir/"
    fi
  done
  if systemd_running; then systemctl daemon-reload; fi
  echo "rzfs uninstalled from $DESTDIR$PREFIX (pools and /etc/rzfs/rzpool.cache are left as they are)"
  exit 0
fi

# --- the binaries ----------------------------------------------------------------------
if [ -z "$BIN_SRC" ]; then
  command -v cargo >/dev/null || die "cargo not found: install Rust, or give --bin-dir"
  echo "building: cargo build --release -p rzfs-cli --bins"
  (cd "$ROOT" && cargo build --release --locked -p rzfs-cli --bins)
  BIN_SRC=${CARGO_TARGET_DIR:-$ROOT/target}/release
fi
for p in $PROGS; do
  [ -f "$BIN_SRC/$p" ] && [ -x "$BIN_SRC/$p" ] || die "$BIN_SRC/$p is missing or not executable"
done
# The clients start rzfsd from their own directory: all five stay together.
for p in $PROGS; do put "$BIN_SRC/$p" "$BINDIR/$p" 0755; done

# --- man pages -------------------------------------------------------------------------
if [ "$MAN" = 1 ]; then
  MANTMP=$(mktemp -d "${TMPDIR:-/tmp}/rzfs-install.XXXXXX")
  trap 'rm -rf "$MANTMP"' EXIT
  "$ROOT/scripts/gen-man.sh" --bin-dir "$BIN_SRC" --out "$MANTMP" >/dev/null
  for p in $PROGS; do put "$MANTMP/$p.8" "$MANDIR/$p.8" 0644; done
fi
put "$ROOT/README.md" "$DOCDIR/README.md" 0644

# --- compat names ----------------------------------------------------------------------
if [ "$COMPAT" = 1 ]; then
  for l in $COMPAT_LINKS; do
    link "$(relpath "$COMPATDIR" "$BINDIR/${l#*:}")" "$COMPATDIR/${l%%:*}"
  done
  EX=$(mktemp "${TMPDIR:-/tmp}/rzfs-install.XXXXXX")
  cat >"$EX" <<EOF
# A systemd drop-in that makes a service's zfs and zpool commands rzfs's, e.g. for sanoid:
#   systemctl edit sanoid.service      (then paste the lines below)
# or copy this file to /etc/systemd/system/sanoid.service.d/rzfs.conf and run
# systemctl daemon-reload. The same for syncoid, zfs-auto-snapshot's cron jobs (PATH= in
# the crontab) or any script: put $COMPATDIR first on PATH.
[Unit]
After=rzfs.target
Wants=rzfs.target

[Service]
Environment=PATH=$COMPATDIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EOF
  put "$EX" "$DOCDIR/examples/compat-path.conf" 0644
  rm -f "$EX"
fi

# --- systemd units ---------------------------------------------------------------------
if [ "$SYSTEMD" = 1 ]; then
  UT=$(mktemp -d "${TMPDIR:-/tmp}/rzfs-install.XXXXXX")
  for u in $UNITS; do
    src=$ROOT/packaging/systemd/$u
    [ -f "$src" ] || src=$src.in
    sed "s|@BINDIR@|$BINDIR|g" "$src" >"$UT/$u"
    put "$UT/$u" "$UNITDIR/$u" 0644
  done
  rm -rf "$UT"
  if systemd_running; then systemctl daemon-reload; fi
fi

echo
echo "rzfs installed in $DESTDIR$PREFIX."
case ":$PATH:" in
  *":$BINDIR:"*) ;;
  *) echo "  $BINDIR is not on your PATH: add it." ;;
esac
if [ "$MAN" = 1 ]; then echo "  Read: man rzfs, man rzpool, man rzfsd, man rzdb, man rzinject"; fi
if [ "$COMPAT" = 1 ]; then
  echo "  zfs/zpool/zdb/zinject: $COMPATDIR (put it first on PATH, e.g."
  echo "    export PATH=$COMPATDIR:\$PATH; for services see $DOCDIR/examples/compat-path.conf)"
fi
if [ "$SYSTEMD" = 1 ]; then
  echo "  Start at boot and now: systemctl enable --now rzfs.target"
fi
