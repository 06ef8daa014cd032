#!/usr/bin/env bash
# fsync through the intent log (issue 12): fio 4 KiB random writes with an fsync after each
# (`--fsync=1`) on a file of an rzfs mount (mirror of two file vdevs), next to the same job
# on a raw file of the same file system in the same run (ratio), with 1 and 4 jobs. Usage:
# bench/fsync.sh [seconds per job] (default 10). Prints a Markdown section for
# bench/RESULTS.md; appends nothing by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SECS=${1:-10}
cargo build --release --quiet -p rzfs-cli
BIN=$ROOT/target/release
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/rzfs-fsbench.XXXXXX")
export RZFS_SOCKET=$WORK/rzfsd.sock
cleanup() {
  "$BIN/rzpool" export fsbench >/dev/null 2>&1 || true
  fusermount3 -u -z "$WORK/mnt" 2>/dev/null || true
  pkill -f "rzfsd.*$RZFS_SOCKET" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# fio's write IOPS of a job over DIR (files laid out first, then timed).
iops() {
  local dir=$1 jobs=$2
  fio --name=fsync --directory="$dir" --rw=randwrite --bs=4k --size=64m --fsync=1 \
    --numjobs="$jobs" --group_reporting --time_based --runtime="$SECS" --ioengine=psync \
    --output-format=terse --terse-version=3 | awk -F';' '{ print $49 }'
}
mkdir -p "$WORK/raw"
raw1=$(iops "$WORK/raw" 1)
raw4=$(iops "$WORK/raw" 4)
rm -rf "$WORK/raw"
for i in 0 1; do dd if=/dev/zero of="$WORK/d$i" bs=1M count=1024 status=none; done
"$BIN/rzpool" create -o ashift=12 -m "$WORK/mnt" fsbench mirror "$WORK"/d0 "$WORK"/d1
rz1=$(iops "$WORK/mnt" 1)
rz4=$(iops "$WORK/mnt" 4)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
cat <<MD
### fsync through the intent log ($(date -u +%F), $(nproc) cores, ${SECS}s per job)

| fio 4 KiB randwrite, fsync=1 | rzfs (mirror of 2 files) IOPS | raw file IOPS | rzfs / raw |
|---|---:|---:|---:|
| 1 job | $rz1 | $raw1 | $(ratio "$rz1" "$raw1") |
| 4 jobs | $rz4 | $raw4 | $(ratio "$rz4" "$raw4") |
MD
