#!/usr/bin/env bash
# pjdfstest on a read-write rzfs mount: a fresh raidz1 pool of file vdevs, the whole suite,
# then export and OpenZFS's zdb -bcc on what the suite left behind. Exits non-zero on any
# failed test case or zdb complaint. Skipped cases are listed with pjdfstest's reason; see
# tests/pjdfstest/README.md for why each does not apply.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PJD=${PJDFSTEST:-/opt/rzfs-oracles/pjdfstest/bin/pjdfstest}
ZDB=/opt/rzfs-oracles/openzfs/sbin/zdb
export LD_LIBRARY_PATH=/opt/rzfs-oracles/openzfs/lib/x86_64-linux-gnu
BIN=$ROOT/target/release
[ -x "$BIN/rzpool" ] || cargo build --release --quiet -p rzfs-cli
WORK=$(mktemp -d /tmp/rzfs-pjd.XXXXXX)
SECOND=$(mktemp -d /dev/shm/rzfs-pjd2.XXXXXX)
# The suite switches to unprivileged users, who must reach the mount point.
chmod 755 "$WORK" "$SECOND"
export RZFS_SOCKET=$WORK/rzfsd.sock
cleanup() {
  "$BIN/rzpool" export pjd >/dev/null 2>&1 || true
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  pkill -f "rzfsd.*$RZFS_SOCKET" 2>/dev/null || true
  rm -rf "$WORK" "$SECOND"
}
trap cleanup EXIT
for i in 0 1 2; do truncate -s 256M "$WORK/d$i"; done
"$BIN/rzpool" create -o ashift=9 -m "$WORK/mnt" pjd raidz1 "$WORK"/d{0,1,2}
(cd "$WORK/mnt" && "$PJD" -c "$ROOT/tests/pjdfstest/rzfs.toml" -p "$WORK/mnt" -s "$SECOND") | tee "$WORK/pjd.log" | grep -v " ok$"
summary=$(grep '^Summary' "$WORK/pjd.log")
"$BIN/rzpool" export pjd
out=$("$ZDB" -e -p "$WORK" -bcc pjd 2>&1)
echo "$out" | grep -q "No leaks" || { echo "$out"; echo "zdb found leaks"; exit 1; }
echo "zdb -bcc: clean, no leaks"
case "$summary" in
  "Summary: 0 failed,"*) echo "pjdfstest: $summary" ;;
  *) echo "pjdfstest failed: $summary"; exit 1 ;;
esac
