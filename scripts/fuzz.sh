#!/usr/bin/env bash
# Bounded fuzzing of every parser of on-disk bytes (the targets of fuzz/, see fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Builds all targets once (cargo-fuzz, stable toolchain, no sanitizer: the crates forbid unsafe
# code, so a bug shows as a panic, which libFuzzer catches; release build with debug
# assertions and overflow checks), then runs each TARGET (default: all) for SECONDS (default
# 20), two at a time on the machine's two cores. Every run starts from the committed seeds
# (fuzz/corpus/TARGET) and the saved crashers (fuzz/regressions/TARGET), which thus replay as
# regression tests; what a run discovers goes to a scratch corpus, never into the repository.
# Prints "fuzz TARGET: N runs, ok" per target; exits 1 if any target crashed, timed out or
# ran out of memory, leaving the crashing input in fuzz/artifacts/TARGET/.
#
# Environment: RZFS_FUZZ_JOBS (parallel targets, default 2), RZFS_FUZZ_TARGET_DIR (default
# fuzz/target), RZFS_FUZZ_SANITIZER (default none; "address" needs nightly flags:
# RUSTC_BOOTSTRAP=1 or RUSTUP_TOOLCHAIN=nightly, see fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

SECONDS_PER_TARGET=${1:-20}
[ "$#" -gt 0 ] && shift
JOBS=${RZFS_FUZZ_JOBS:-2}
TARGET_DIR=${RZFS_FUZZ_TARGET_DIR:-$PWD/target}
SANITIZER=${RZFS_FUZZ_SANITIZER:-none}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is missing; run scripts/install-test-deps.sh" >&2
  exit 1
fi

start=$(date +%s)
cargo fuzz build --sanitizer "$SANITIZER" --target-dir "$TARGET_DIR"
echo "fuzz: built all targets in $(($(date +%s) - start))s"

if [ "$#" -gt 0 ]; then targets=("$@"); else mapfile -t targets < <(cargo fuzz list); fi

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/rzfs-fuzz.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
export BIN_DIR="$TARGET_DIR/x86_64-unknown-linux-gnu/release" SCRATCH SECONDS_PER_TARGET

# Runs one target; prints its one-line verdict, or the tail of its log and the crasher.
run_target() {
  local t=$1 log="$SCRATCH/$1.log" seeds=()
  mkdir -p "$SCRATCH/corpus/$t" "artifacts/$t"
  for d in "corpus/$t" "regressions/$t"; do [ -d "$d" ] && seeds+=("$d"); done
  if "$BIN_DIR/$t" "$SCRATCH/corpus/$t" "${seeds[@]}" \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
    local runs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $t: ${runs:-?} runs, ok"
  else
    echo "fuzz $t: FAILED (exit $?)"
    grep -E "panicked at|^==[0-9]+== ERROR|Test unit written to|Base64:" "$log" | sed "s/^/  $t: /" || true
    tail -n 30 "$log" | sed "s/^/  $t| /"
    return 1
  fi
}
export -f run_target

start=$(date +%s)
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_target "$1"' _ {} || status=1
echo "fuzz: ran ${#targets[@]} targets for ${SECONDS_PER_TARGET}s each in $(($(date +%s) - start))s"
# Keep artifacts/ only where something was found.
find artifacts -mindepth 1 -type d -empty -delete 2>/dev/null || true
rmdir artifacts 2>/dev/null || true
if [ "$status" != 0 ]; then
  echo "fuzz: FAILED; crashing inputs are in fuzz/artifacts/ (copy one to fuzz/regressions/TARGET/ once fixed)" >&2
fi
exit "$status"
