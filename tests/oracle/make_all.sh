#!/usr/bin/env bash
# Build every oracle fixture into OUT (default $RZFS_TESTDATA or
# /work/main/test-data).  Each generator skips work already stamped .done.
# upgrade (zdb mostly idles) and ztest run side by side, then zfs-fuse
# (which must run alone: one daemon per machine).  RZFS_ORACLE_SERIAL=1
# runs them one after the other.  Prints a per-fixture time summary.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${RZFS_TESTDATA:-/work/main/test-data}}
mkdir -p "$out"
declare -A secs rcs

timed() {  # name cmd...
  local name=$1 t0=$SECONDS; shift
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name $rc $((SECONDS - t0))" >> "$out/.make_all.times"
  return $rc
}

rm -f "$out/.make_all.times"
t0=$SECONDS
if [ "${RZFS_ORACLE_SERIAL:-0}" = 1 ]; then
  timed upgrade "$here/upgrade_pools.sh" "$out"
  timed ztest "$here/ztest_pools.sh" "$out"
else
  timed upgrade "$here/upgrade_pools.sh" "$out" & p1=$!
  timed ztest "$here/ztest_pools.sh" "$out" & p2=$!
  wait $p1; wait $p2
fi
timed zfsfuse "$here/zfsfuse_pools.sh" "$out"

fail=0
while read -r name rc s; do
  printf '%-8s exit=%s %4ss   (log: %s)\n' "$name" "$rc" "$s" "$out/$name.log"
  grep -E '^(upgrade|ztest|zfsfuse):' "$out/$name.log" | tail -40 | sed 's/^/    /'
  [ "$rc" = 0 ] || fail=1
done < "$out/.make_all.times"
echo "all fixtures: $((SECONDS - t0))s, status $fail"
python3 "$here/summary.py" "$out" || fail=1
exit $fail
