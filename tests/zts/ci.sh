#!/usr/bin/env bash
# The ZTS tier of CI: a fixed subset of OpenZFS's test suite against this build, failing when a
# test that passed before fails now.
#
#   tests/zts/ci.sh [BIN_DIR]        (default BIN_DIR: target/release, built beforehand)
#
# Runs the groups of tests/zts/ci-groups.txt through the project's runner (tests/zts/runner,
# a sandbox; needs root) with OpenZFS's userland and ZTS from the prefix
# scripts/install-test-deps.sh unpacks, then compares with tests/zts/ci-expected.txt (one
# `group/test` per line: every test of those groups that passes with rzfs today).
#   - an expected test that does not pass now: a regression, the tier fails and prints the
#     test's cause and first error (its logs stay in the results directory printed);
#   - a test that passes and is not listed: printed, to be added to ci-expected.txt.
# The whole suite (about 35 minutes) is scripts/zts.sh, which also writes RESULTS.md.
# Environment: RZFS_ZTS_OUT (results directory; default a new one under /var/tmp),
# RZFS_ZTS_BUDGET (seconds before groups are left unstarted; default 420).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-$ROOT/target/release}
OUT=${RZFS_ZTS_OUT:-/var/tmp/zts-rzfs-results/ci-$(date +%Y%m%dT%H%M%S)}
export RZFS_ZTS_ROOT=${RZFS_ZTS_ROOT:-${RZFS_ORACLE_PREFIX:-/opt/rzfs-oracles/openzfs}}
unset RZFS_ORACLE

start=$(date +%s)
mkdir -p "$(dirname "$OUT")"
bash "$HERE/runner/run-zts.sh" -g "$HERE/ci-groups.txt" -b "${RZFS_ZTS_BUDGET:-420}" -o "$OUT" "$BIN" \
  >"$OUT.console.log" 2>&1 || { tail -30 "$OUT.console.log"; echo "zts: the runner failed (log $OUT.console.log)"; exit 1; }
tail -1 "$OUT.console.log"

rc=0
python3 - "$OUT/results.tsv" "$HERE/ci-expected.txt" <<'PY' || rc=$?
import sys
results, expected_file = sys.argv[1], sys.argv[2]
got = {}
with open(results) as f:
    for line in f:
        p = line.rstrip("\n").split("\t")
        if len(p) >= 3 and p[0] != "group":
            got[f"{p[0]}/{p[1]}"] = p
expected = []
with open(expected_file) as f:
    for line in f:
        t = line.split("#")[0].strip()
        if t:
            expected.append(t)
lost = [t for t in expected if t not in got or got[t][2] != "PASS"]
new = sorted(t for t, p in got.items() if p[2] == "PASS" and t not in expected)
for t in lost:
    p = got.get(t)
    why = f"{p[2]}: {p[4]} | {p[5][:300]}" if p and len(p) >= 6 else (p[2] if p else "not run")
    print(f"zts: REGRESSION {t}: {why}")
for t in new:
    print(f"zts: now passing (add to tests/zts/ci-expected.txt): {t}")
print(f"zts: {len(expected) - len(lost)} of {len(expected)} expected passes pass, {len(new)} new")
sys.exit(1 if lost else 0)
PY

echo "zts: tier took $(($(date +%s) - start))s; results in $OUT"
exit $rc
