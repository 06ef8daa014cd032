#!/usr/bin/env bash
# Installs what the tests need, then runs every tier with bounded budgets:
#   1. fast: fmt, clippy, unit + property tests of every crate;
#   2. oracle: fixtures made by OpenZFS's tools and zfs-fuse, read back by rzfs; pools rzfs
#      writes (every layout, a randomized POSIX workload, crashes), checked by OpenZFS's zdb;
#      pjdfstest on a read-write mount; scripts/install.sh into a staging directory (units
#      verified, man pages rendered, a pool through the zfs/zpool compat names);
#   3. fuzz: every parser's fuzz target for a bounded time (cargo-fuzz is installed by
#      install-test-deps.sh; a missing cargo-fuzz fails the tier rather than skipping it).
#   4. bench: the benchmark harness in smoke mode (seconds), so it keeps working; the full
#      run (bench/run.sh --full) is manual and writes bench/RESULTS.md.
#   5. zts: a fixed subset of OpenZFS's own test suite (tests/zts/ci.sh; fails when a test
#      listed in tests/zts/ci-expected.txt no longer passes). The whole suite: scripts/zts.sh.
# Tiers can be chosen with RZFS_TIERS="fast oracle zts bench fuzz" (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
TIERS=${RZFS_TIERS:-"fast oracle zts bench fuzz"}
export CARGO_TERM_COLOR=never
export RZFS_TESTDATA=${RZFS_TESTDATA:-$PWD/test-data}

./scripts/install-test-deps.sh

# Scratch directories of earlier test processes that are gone (a failed test keeps its vdev
# files for a look; they add up to gigabytes over many runs and once filled the CI disk).
# Only ours (rzfs-<kind>-<pid>-...), only of dead pids, never with anything mounted below.
tmp=${TMPDIR:-/tmp}
for d in "$tmp"/rzfs-*-[0-9]*-*; do
  [ -d "$d" ] || continue
  pid=${d#"$tmp"/rzfs-*-}; pid=${pid%%-*}
  case $pid in '' | *[!0-9]*) continue ;; esac
  [ -e "/proc/$pid" ] && continue
  grep -q " $d[/ ]" /proc/self/mounts && continue
  rm -rf "$d"
done
echo "disk free: target $(df -h --output=avail "$PWD" | tail -1 | tr -d ' '), $tmp $(df -h --output=avail "$tmp" | tail -1 | tr -d ' ')"

has() { case " $TIERS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# Each tier's time, so the whole run can be kept within CI's budget.
t0=$(date +%s)
tier_start=$t0
took() {
  local now
  now=$(date +%s)
  echo "== tier $1 took $((now - tier_start))s ($((now - t0))s so far)"
  tier_start=$now
}

if has fast; then
  echo "== tier fast: fmt, clippy, unit and property tests"
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --quiet -- -D warnings
  # Oracle-backed integration tests belong to the oracle tier (release build, fixtures).
  RZFS_ORACLE=0 cargo test --workspace --quiet 2>&1 | tee /tmp/rzfs-fast.log
  took fast
fi

if has oracle; then
  echo "== tier oracle: pools written by OpenZFS and zfs-fuse"
  ./tests/oracle/make_all.sh "$RZFS_TESTDATA"
  RZFS_ORACLE=1 cargo test --release -p rzfs-cli -p rzfs-send --tests -- --test-threads=2 2>&1 | tee /tmp/rzfs-oracle.log
  echo "== tier oracle: the demo (its pool must pass zdb -bcc)"
  ./scripts/demo.sh >/tmp/rzfs-demo.log 2>&1 || { tail -40 /tmp/rzfs-demo.log; exit 1; }
  tail -1 /tmp/rzfs-demo.log
  echo "== tier oracle: pjdfstest on a read-write mount, then zdb"
  ./tests/pjdfstest/run.sh | tail -3
  took oracle
fi

if has zts; then
  echo "== tier zts: a subset of OpenZFS's test suite (ZTS)"
  cargo build --release --workspace --bins --quiet
  ./tests/zts/ci.sh target/release
  took zts
fi

if has bench; then
  echo "== tier bench: harness smoke run"
  ./bench/run.sh --smoke
  took bench
fi

if has fuzz; then
  echo "== tier fuzz: bounded runs of every parser target"
  ./scripts/fuzz.sh "${RZFS_FUZZ_SECONDS:-12}"
  took fuzz
fi
echo "== all tiers passed: $TIERS"
