#!/usr/bin/env bash
# Write path, end to end (issue 3): sequential 1 MiB writes and reads through the read-write
# FUSE mount of a raidz1 pool of three files, next to the raw rate of the same three backing
# files measured in the same run (ratios), plus the cost of fsync (an intent
# log write; the first after the file's creation syncs the txg). Usage: bench/write_fuse.sh [MiB] (default 2048). Appends nothing by itself:
# it prints a Markdown section that bench/RESULTS.md records.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MIB=${1:-2048}
cargo build --release --quiet -p rzfs-cli
BIN=$ROOT/target/release
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rzfs-wbench.XXXXXX")
export RZFS_SOCKET=$WORK/rzfsd.sock
cleanup() {
  "$BIN/rzpool" export wbench >/dev/null 2>&1 || true
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  pkill -f "rzfsd.*$RZFS_SOCKET" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
per_disk=$(( MIB / 2 + 512 ))
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / s / 1e6 }'; }
secs() { date +%s.%N; }
el() { awk -v a="$1" -v b="$2" 'BEGIN { print b - a }'; }
evict() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }

# Raw: the three backing files written in parallel (each a third of the data) with fsync,
# then read back with O_DIRECT.
t0=$(secs)
for i in 0 1 2; do
  dd if=/dev/zero of="$WORK/raw$i" bs=1M count=$(( MIB / 3 )) conv=fsync status=none &
done
wait
t1=$(secs)
raw_w=$(mbps $(( MIB / 3 * 3 * 1048576 )) "$(el "$t0" "$t1")")
t0=$(secs)
for i in 0 1 2; do dd if="$WORK/raw$i" of=/dev/null bs=1M iflag=direct status=none & done
wait
t1=$(secs)
raw_r=$(mbps $(( MIB / 3 * 3 * 1048576 )) "$(el "$t0" "$t1")")
rm -f "$WORK"/raw?

# rzfs: pool images zero-filled (never sparse), like the read benchmarks.
for i in 0 1 2; do dd if=/dev/zero of="$WORK/d$i" bs=1M count=$per_disk status=none; done
"$BIN/rzpool" create -o ashift=12 -m "$WORK/mnt" wbench raidz1 "$WORK"/d0 "$WORK"/d1 "$WORK"/d2
head -c $(( 64 << 20 )) /dev/urandom >"$WORK/chunk"
t0=$(secs)
for _ in $(seq $(( MIB / 64 ))); do cat "$WORK/chunk"; done | dd of="$WORK/mnt/big" bs=1M iflag=fullblock conv=fsync status=none
t1=$(secs)
rz_w=$(mbps $(( MIB / 64 * 64 * 1048576 )) "$(el "$t0" "$t1")")
# fsync cost: 200 small appends, each followed by fsync (an intent log write each).
t0=$(secs)
for i in $(seq 200); do echo "record $i" | dd of="$WORK/mnt/log" bs=4k oflag=append conv=notrunc,fsync status=none; done
t1=$(secs)
fsync_ms=$(awk -v s="$(el "$t0" "$t1")" 'BEGIN { printf "%.1f", s * 1000 / 200 }')
"$BIN/rzpool" export wbench
evict "$WORK"/d0 "$WORK"/d1 "$WORK"/d2
"$BIN/rzpool" import -d "$WORK" wbench
"$BIN/rzfs" mount wbench "$WORK/mnt" 2>/dev/null || true
t0=$(secs)
dd if="$WORK/mnt/big" of=/dev/null bs=1M status=none
t1=$(secs)
rz_r=$(mbps $(( MIB / 64 * 64 * 1048576 )) "$(el "$t0" "$t1")")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
cat <<EOF
### Write path through the FUSE mount ($(date -u +%Y-%m-%d), $(nproc) cores, $MIB MiB, raidz1 of 3 files, ashift 12)

| | rzfs FUSE | raw backing files (same run) | ratio |
|---|---|---|---|
| sequential 1 MiB write + fsync | $rz_w MB/s | $raw_w MB/s | $(ratio "$rz_w" "$raw_w") |
| sequential 1 MiB read, cold | $rz_r MB/s | $raw_r MB/s (O_DIRECT) | $(ratio "$rz_r" "$raw_r") |

fsync of a 4 KiB append (an intent log write each): $fsync_ms ms on average over 200.
Raw writes are three parallel dd streams of a third each with fsync; rzfs writes incompressible
data (compression off), so RAID-Z writes 1.5× the bytes the raw row does.
EOF
