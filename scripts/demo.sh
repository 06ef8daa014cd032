#!/usr/bin/env bash
# The rzfs demo: what works today, end to end, on file-backed vdevs, no kernel module.
#
#   1. rzfs creates a raidz1 pool of 3 files, mounts it over FUSE, and writes files,
#      a directory tree, a symlink and an xattr; takes a snapshot; changes a file.
#   2. The pool is exported and checked by OpenZFS's own checker (zdb -bcc: every block's
#      checksum, no leaked space) and zdb extracts a file — when the OpenZFS userland from
#      scripts/install-test-deps.sh is present.
#   3. One disk is destroyed; rzfs imports the pool DEGRADED and every file still reads back
#      identical (RAID-Z reconstruction); a read-write import and `rzpool scrub` rebuild the
#      disk (status shows what was repaired), and the pool without another disk proves it.
#   4. rzdb copies a file out without any daemon or mount (the recovery path).
#   5. rzinject makes a disk fail every write: the pool syncs around it (DEGRADED, the disk
#      FAULTED with WRITE errors) and `rzpool clear` brings it back, resilvering just the
#      txgs it missed (its DTL); then the pool is filled until a write gets ENOSPC, files
#      are deleted on the full pool and writes work again; zdb -bcc checks the result.
#   6. A disk dies for good: `rzpool replace` puts a new one in its place, which resilvers
#      (status shows the progress), the old one is detached, a scrub finds nothing to
#      repair, and the pool without another disk proves the new one holds its share.
#   7. Replication: the snapshot is sent to a second pool (`rzfs send | rzfs receive`),
#      then only what changed since (`send -i`); OpenZFS's zstream checks the stream, the
#      copy holds the same files, and zdb checks the backup pool.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
./scripts/install-test-deps.sh >/dev/null
cargo build --release --quiet -p rzfs-cli
BIN=$ROOT/target/release
WORK=$(mktemp -d /tmp/rzfs-demo.XXXXXX)
export RZFS_SOCKET=$WORK/rzfsd.sock
# Scans in small, slightly paced batches, so that a resilver's progress can be seen.
export RZFS_SCAN_BATCH=64 RZFS_SCAN_DELAY_MS=40
ZDB=/opt/rzfs-oracles/openzfs/sbin/zdb
export LD_LIBRARY_PATH=/opt/rzfs-oracles/openzfs/lib/x86_64-linux-gnu
cleanup() {
  "$BIN/rzpool" export backup >/dev/null 2>&1 || true
  fusermount3 -u -z "$WORK/backup" 2>/dev/null || true
  "$BIN/rzpool" export demo >/dev/null 2>&1 || true
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  pkill -f "rzfsd.*$RZFS_SOCKET" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }
files() { (cd "$WORK/mnt" && sha256sum random.bin numbers.txt docs/deep/deeper/hello.txt); }

echo "== 1. rzfs creates a raidz1 pool on three 256 MiB files and writes to it"
for i in 0 1 2; do truncate -s 256M "$WORK/disk$i.img"; done
run "$BIN/rzpool" create -O compression=on -m "$WORK/mnt" demo raidz1 "$WORK"/disk{0,1,2}.img
head -c 24M /dev/urandom >"$WORK/mnt/random.bin"
seq 1 200000 >"$WORK/mnt/numbers.txt"
mkdir -p "$WORK/mnt/docs/deep/deeper"
echo "hello from rzfs" >"$WORK/mnt/docs/deep/deeper/hello.txt"
ln -s docs/deep/deeper/hello.txt "$WORK/mnt/link-to-hello"
setfattr -n user.colour -v blue "$WORK/mnt/numbers.txt"
run "$BIN/rzfs" snapshot demo@before
echo "changed after the snapshot" >"$WORK/mnt/docs/deep/deeper/hello.txt"
sync
sha_orig=$(files)
run ls -la "$WORK/mnt"
run cat "$WORK/mnt/link-to-hello"
run getfattr -n user.colour "$WORK/mnt/numbers.txt"
run "$BIN/rzpool" status demo
run "$BIN/rzpool" list
run "$BIN/rzfs" list -t all -o name,used,refer,compressratio,mountpoint
run "$BIN/rzpool" export demo

echo; echo "== 2. OpenZFS's checker on the pool rzfs wrote"
if [ -x "$ZDB" ]; then
  say "$ZDB -e -p $WORK -bcc demo"
  "$ZDB" -e -p "$WORK" -bcc demo | tee "$WORK/zdb.out"
  grep -q "No leaks" "$WORK/zdb.out" || { echo "zdb found a problem" >&2; exit 1; }
  run "$ZDB" -e -p "$WORK" -r demo@before docs/deep/deeper/hello.txt "$WORK/hello.before"
  run cat "$WORK/hello.before"
else
  echo "(zdb not installed: run scripts/install-test-deps.sh to see OpenZFS check this pool)"
fi

echo; echo "== 3. fail a disk: disk1 is overwritten with noise"
head -c 256M /dev/urandom >"$WORK/disk1.img.noise"
# Keep disk1's labels readable but destroy its data area (4 MiB .. end - 512 KiB).
dd if="$WORK/disk1.img.noise" of="$WORK/disk1.img" bs=1M seek=4 skip=4 count=250 conv=notrunc status=none
rm "$WORK/disk1.img.noise"
run "$BIN/rzpool" import -N -d "$WORK" -o readonly=on demo
run "$BIN/rzfs" mount demo "$WORK/mnt"
sha_degraded=$(files)
[ "$sha_orig" = "$sha_degraded" ] || { echo "degraded read differs" >&2; exit 1; }
echo "every file still identical, rebuilt from parity"
run "$BIN/rzpool" status -v demo
run "$BIN/rzpool" export demo
say "read-write import, then a scrub: every copy of every block is checked, disk1 rebuilt"
run "$BIN/rzpool" import -N -d "$WORK" demo
"$BIN/rzfs" mount demo "$WORK/mnt" 2>/dev/null || true
run "$BIN/rzpool" scrub -w demo
run "$BIN/rzpool" status demo
[ "$sha_orig" = "$(files)" ] || { echo "read-write import read differs" >&2; exit 1; }
run "$BIN/rzpool" clear demo
run "$BIN/rzpool" scrub -w demo
run "$BIN/rzpool" status demo
run "$BIN/rzpool" export demo
say "proof: without disk0, the rebuilt disk1 and disk2 hold every file"
mv "$WORK/disk0.img" "$WORK/disk0.aside"
run "$BIN/rzpool" import -N -d "$WORK" -o readonly=on demo
"$BIN/rzfs" mount demo "$WORK/mnt"
[ "$sha_orig" = "$(files)" ] || { echo "the scrubbed disk does not hold the data" >&2; exit 1; }
echo "every file identical, read from the scrubbed disk and its partner"
run "$BIN/rzpool" export demo
mv "$WORK/disk0.aside" "$WORK/disk0.img"

echo; echo "== 4. recovery without a daemon or a mount: rzdb copies a file out"
run "$BIN/rzdb" -e -p "$WORK" -r demo /random.bin "$WORK/random.out"
[ "$(sha256sum <"$WORK/random.out" | cut -d' ' -f1)" = "$(echo "$sha_orig" | awk '/random.bin/ {print $1}')" ] \
  && echo "random.bin copied out intact"
echo; echo "== 5. a disk fails writes while the pool is in use; then the pool fills up"
run "$BIN/rzpool" import -N -d "$WORK" demo
"$BIN/rzfs" mount demo "$WORK/mnt" 2>/dev/null || true
run "$BIN/rzinject" -d "$WORK/disk2.img" -e io -T write demo
head -c 8M /dev/urandom >"$WORK/mnt/during-failure.bin"
say "sync $WORK/mnt/during-failure.bin   # fsync: the txg is written around the failing disk"
sync "$WORK/mnt/during-failure.bin"
run "$BIN/rzpool" status demo
run "$BIN/rzinject" -c all
say "rzpool clear demo   # disk2 comes back and resilvers what it missed (its DTL)"
"$BIN/rzpool" clear demo
run "$BIN/rzpool" wait -t resilver demo
run "$BIN/rzpool" status demo
say "fill the pool: the write that does not fit fails at once with ENOSPC"
i=0
while [ $i -lt 200 ] && head -c 16M /dev/urandom >"$WORK/mnt/fill$i" 2>"$WORK/fill.err"; do
  i=$((i + 1))
done
grep -q "No space left on device" "$WORK/fill.err" || { echo "the full pool did not answer ENOSPC" >&2; exit 1; }
echo "file $i: $(cat "$WORK/fill.err")"
run df -h "$WORK/mnt"
run "$BIN/rzfs" list -o name,used,avail demo
say "rm $WORK/mnt/fill*   # deletes always work on a full pool"
rm "$WORK/mnt"/fill*
head -c 16M /dev/urandom >"$WORK/mnt/after-delete.bin"
sync "$WORK/mnt/after-delete.bin"
echo "after deleting, new writes succeed again"
[ "$sha_orig" = "$(files)" ] || { echo "files changed under faults and a full pool" >&2; exit 1; }
echo "every earlier file still identical"
run "$BIN/rzpool" export demo
if [ -x "$ZDB" ]; then
  say "$ZDB -e -p $WORK -bcc demo"
  "$ZDB" -e -p "$WORK" -bcc demo >"$WORK/zdb.out" 2>&1 || true
  grep -E "No leaks|leaked|errors|bp count" "$WORK/zdb.out"
  grep -q "No leaks" "$WORK/zdb.out" || { echo "zdb found a problem" >&2; exit 1; }
fi

echo; echo "== 6. a disk dies: a new one takes its place and resilvers"
rm "$WORK/disk1.img"
run "$BIN/rzpool" import -N -d "$WORK" demo
"$BIN/rzfs" mount demo "$WORK/mnt" 2>/dev/null || true
run "$BIN/rzpool" status demo
truncate -s 256M "$WORK/disk3.img"
run "$BIN/rzpool" replace demo "$WORK/disk1.img" "$WORK/disk3.img"
sleep 0.5
run "$BIN/rzpool" status demo
run "$BIN/rzpool" wait -t resilver demo
run "$BIN/rzpool" status demo
"$BIN/rzpool" status demo | grep -q "disk1.img" && { echo "the dead disk was not detached" >&2; exit 1; }
run "$BIN/rzpool" scrub -w demo
run "$BIN/rzpool" status demo
"$BIN/rzpool" status demo | grep -q "scrub repaired 0B.*with 0 errors" || { echo "the scrub after the replace found damage" >&2; exit 1; }
[ "$sha_orig" = "$(files)" ] || { echo "files differ after the replace" >&2; exit 1; }
run "$BIN/rzpool" export demo
say "proof: without disk0, the new disk3 and disk2 hold every file"
mv "$WORK/disk0.img" "$WORK/disk0.aside"
run "$BIN/rzpool" import -N -d "$WORK" -o readonly=on demo
"$BIN/rzfs" mount demo "$WORK/mnt"
[ "$sha_orig" = "$(files)" ] || { echo "the new disk does not hold its share" >&2; exit 1; }
echo "every file identical, read from the new disk and its partner"
run "$BIN/rzpool" export demo
mv "$WORK/disk0.aside" "$WORK/disk0.img"
if [ -x "$ZDB" ]; then
  say "$ZDB -e -p $WORK -bcc demo"
  "$ZDB" -e -p "$WORK" -bcc demo >"$WORK/zdb.out" 2>&1 || true
  grep -E "No leaks|leaked|errors|bp count" "$WORK/zdb.out"
  grep -q "No leaks" "$WORK/zdb.out" || { echo "zdb found a problem" >&2; exit 1; }
fi

echo; echo "== 7. replication: send the snapshot to a second pool, then only what changed"
run "$BIN/rzpool" import -N -d "$WORK" demo
"$BIN/rzfs" mount demo "$WORK/mnt" 2>/dev/null || true
truncate -s 256M "$WORK/backup.img"
run "$BIN/rzpool" create -m "$WORK/backup" backup "$WORK/backup.img"
say "$BIN/rzfs send demo@before | $BIN/rzfs receive backup/demo"
"$BIN/rzfs" send demo@before | "$BIN/rzfs" receive backup/demo
echo "another change" >>"$WORK/mnt/numbers.txt"
run "$BIN/rzfs" snapshot demo@after
say "$BIN/rzfs send -i @before demo@after > $WORK/incremental.zstream"
"$BIN/rzfs" send -i @before demo@after >"$WORK/incremental.zstream"
ls -l "$WORK/incremental.zstream"
if [ -x "$ZDB" ]; then
  say "zstream dump $WORK/incremental.zstream (OpenZFS's stream checker)"
  "${ZDB%/zdb}/zstream" dump "$WORK/incremental.zstream" | grep -E "Total|checksum" | head -14
fi
say "$BIN/rzfs receive backup/demo < $WORK/incremental.zstream"
"$BIN/rzfs" receive backup/demo <"$WORK/incremental.zstream"
run "$BIN/rzfs" list -t all -r -o name,used,refer,guid backup
run "$BIN/rzfs" list -t snapshot -o name,guid demo
src_sum=$(cd "$WORK/mnt" && sha256sum random.bin numbers.txt docs/deep/deeper/hello.txt)
copy_sum=$(cd "$WORK/backup/demo" && sha256sum random.bin numbers.txt docs/deep/deeper/hello.txt)
[ "$src_sum" = "$copy_sum" ] || { echo "the copy differs from the source" >&2; exit 1; }
echo "the copy in backup/demo holds the same files as demo"
run "$BIN/rzpool" export backup
if [ -x "$ZDB" ]; then
  say "$ZDB -e -p $WORK -bcc backup"
  "$ZDB" -e -p "$WORK" -bcc backup >"$WORK/zdb.out" 2>&1 || true
  grep -E "No leaks|leaked|errors|bp count" "$WORK/zdb.out"
  grep -q "No leaks" "$WORK/zdb.out" || { echo "zdb found a problem" >&2; exit 1; }
fi

echo; echo "demo finished: create, write over FUSE, snapshot, zdb check, degraded raidz1, scrub, copy-out, a disk failing writes and resilvering, a full pool, a dead disk replaced and resilvered, send and receive to a second pool"
