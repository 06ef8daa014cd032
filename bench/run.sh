#!/usr/bin/env bash
# Benchmarks (issue 4): rzfs against the raw devices and its peers, side by side.
#
#   bench/run.sh --smoke   tiny sizes, ~2 min after the build; what CI runs to keep the
#                          harness working. Writes $CARGO_TARGET_DIR/bench-smoke/{RESULTS.md,results.json}
#                          so it never overwrites the committed results.
#   bench/run.sh --full    the real run (~40 min, see bench/README.md): writes bench/RESULTS.md and bench/results.json.
#
# Extra options are passed to `rzfs-bench run`: --out-dir DIR, --work DIR (pool images; must be on
# a disk-backed filesystem, default $TMPDIR), --keep (keep the images), --only SECTIONS (a subset of
# kernels,raidz,peer,e2e,layouts,meta,scan,send,vol; e.g. `--full --only scan --out-dir /tmp/scan`).
# See bench/README.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
mode=""
extra=()
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke|--full) mode=$1 ;;
        --out-dir) out=$2; shift ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) extra+=("$1") ;;
    esac
    shift
done
[ -n "$mode" ] || { echo "usage: bench/run.sh --smoke|--full [--out-dir DIR] [--work DIR] [--keep] [--only SECTIONS]" >&2; exit 2; }

target=${CARGO_TARGET_DIR:-$repo/target}
export CARGO_TARGET_DIR=$target
(cd "$repo" && cargo build --release --quiet -p rzfs-bench -p rzfs-cli)
bin=$target/release

# raidz_test filter (see raidz_test_shim.c); without a C compiler raidz_test runs unfiltered
# under a time cap and the report says so.
shim=$bin/raidz_test_shim.so
if command -v cc >/dev/null 2>&1; then
    if [ ! -e "$shim" ] || [ "$here/raidz_test_shim.c" -nt "$shim" ]; then
        cc -O2 -shared -fPIC -o "$shim" "$here/raidz_test_shim.c" -ldl
    fi
else
    shim=""
fi

if [ -z "$out" ]; then
    if [ "$mode" = --full ]; then out=$here; else out=$target/bench-smoke; fi
fi
args=(run "$mode" --out-dir "$out" --bin-dir "$bin")
[ -n "$shim" ] && args+=(--shim "$shim")
exec "$bin/rzfs-bench" "${args[@]}" "${extra[@]+"${extra[@]}"}"
