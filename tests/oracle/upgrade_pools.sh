#!/usr/bin/env bash
# Wrapper: see upgrade_pools.py and README.md.  usage: upgrade_pools.sh [OUT] [args...]
# OUT defaults to $RZFS_TESTDATA or /work/main/test-data.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${RZFS_TESTDATA:-/work/main/test-data}}
[ $# -gt 0 ] && shift
exec python3 "$here/upgrade_pools.py" "$out" "$@"
