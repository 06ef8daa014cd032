#!/usr/bin/env python3
"""Print a sanity summary of built oracle fixtures and check their shape.

usage: summary.py OUT      exit status 1 if a fixture is missing/malformed
"""

from __future__ import annotations

import json
import os
import sys

FILE_KEYS = {"path", "object", "type", "size", "mode", "uid", "gid", "links"}


def check_files(where: str, files: list, errs: list) -> None:
    for f in files:
        miss = FILE_KEYS - set(f)
        if miss:
            errs.append(f"{where}:{f.get('path')}: missing {sorted(miss)}")
        if f.get("type") == "f" and "sha256" not in f:
            errs.append(f"{where}:{f.get('path')}: file without sha256")
        if f.get("type") == "l" and "target" not in f:
            errs.append(f"{where}:{f.get('path')}: symlink without target")


def upgrade(base: str, errs: list) -> None:
    d = os.path.join(base, "upgrade")
    if not os.path.exists(os.path.join(d, ".done")):
        errs.append("upgrade: not built")
        return
    pools = json.load(open(os.path.join(d, "index.json")))["pools"]
    by: dict = {}
    for p in pools:
        e = json.load(open(os.path.join(d, p, "expected.json")))
        by.setdefault(e["expect"], []).append(f"{p}(v{e['version']})")
        for ds in e["datasets"]:
            check_files(f"upgrade/{p}/{ds['name']}", ds["files"], errs)
            if ds.get("crosscheck") and not ds["crosscheck"]["match"]:
                errs.append(f"upgrade/{p}: zdb -r disagrees with stream")
        for img in e["files"]:
            if not os.path.exists(os.path.join(d, p, img["path"])):
                errs.append(f"upgrade/{p}: image {img['path']} missing")
    nfiles = sum(len(ds["files"]) for p in pools for ds in json.load(
        open(os.path.join(d, p, "expected.json")))["datasets"])
    print(f"upgrade: {len(pools)} pools, {nfiles} paths")
    for k, v in sorted(by.items()):
        print(f"  expect={k}: {', '.join(v)}")


def ztest(base: str, errs: list) -> None:
    d = os.path.join(base, "ztest")
    seeds = sorted(x for x in os.listdir(d)) if os.path.isdir(d) else []
    if not seeds:
        errs.append("ztest: not built")
    for s in seeds:
        p = os.path.join(d, s, "expected.json")
        if not os.path.exists(p):
            errs.append(f"ztest/{s}: no expected.json")
            continue
        e = json.load(open(p))
        print(f"ztest/{s}: layout={e['layout_requested']} ztest_exit="
              f"{e['ztest_exit']} zdb_exit={e['zdb_exit']} leaks="
              f"{e['leaks']} bp_count={e['bp_count']} lsize={e['lsize']} "
              f"psize={e['psize']} asize={e['asize']} vdevs="
              f"{sum(f['in_vdev_tree'] for f in e['files'])}/"
              f"{len(e['files'])} types={e['vdev_types']}")
        if e["zdb_exit"] != 0 or e["bp_count"] is None:
            errs.append(f"ztest/{s}: zdb not clean")


def zfsfuse(base: str, errs: list) -> None:
    d = os.path.join(base, "zfsfuse")
    if not os.path.exists(os.path.join(d, ".done")):
        errs.append("zfsfuse: not built")
        return
    for lay in sorted(os.listdir(d)):
        p = os.path.join(d, lay, "expected.json")
        if not os.path.exists(p):
            continue
        e = json.load(open(p))
        cc = e["zdb_crosscheck"]
        print(f"zfsfuse/{lay}: pool={e['pool']} v{e['version']} datasets="
              f"{[x['name'] for x in e['datasets']]} paths="
              f"{sum(len(x['files']) for x in e['datasets'])} zdb_agrees="
              f"{cc['ok']}")
        for ds in e["datasets"]:
            check_files(f"zfsfuse/{lay}/{ds['name']}", ds["files"], errs)
        if not cc["ok"]:
            errs.append(f"zfsfuse/{lay}: {len(cc['mismatches'])} mismatches")


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "RZFS_TESTDATA", "/work/main/test-data")
    errs: list = []
    for f in (upgrade, ztest, zfsfuse):
        try:
            f(base, errs)
        except (OSError, ValueError, KeyError) as e:
            errs.append(f"{f.__name__}: {e!r}")
    for e in errs[:50]:
        print("PROBLEM:", e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
