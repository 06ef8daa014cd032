#!/usr/bin/env python3
"""Fixture 3: pools torture-written by OpenZFS `ztest`, checked by `zdb -bcc`.

ztest (libzpool in userspace) builds a pool from file vdevs, runs its
random workload (datasets, ZIL, snapshots, clones, dedup, vdev add/attach/
detach/remove, fault injection, kill -9 of the worker process), and
verifies the result with zdb after each pass.  We then run our own
`zdb -bbcc -P` and record the block statistics, leak verdict, config and
feature refcounts.  rzfs can then traverse the same pool and compare
block counts/sizes.

ztest has no seed option: it draws randomness from /dev/urandom
(random_force_pseudo in ztest.c), so runs are not byte-reproducible.  A
"seed" here is a label selecting the raid layout (see LAYOUTS); the JSON
records what actually happened.

usage: ztest_pools.py OUT [SEED ...]      (default seeds 1 2 3)
env:   RZFS_ZTEST_TIME (seconds, default 10), RZFS_ZTEST_SIZE (128m)
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402

# seed -> extra ztest args; cycles when there are more seeds.
LAYOUTS = [
    ("raidz1", ["-K", "raidz", "-R", "1"]),
    ("raidz2", ["-K", "raidz", "-R", "2"]),
    ("draid1", ["-K", "draid", "-R", "1"]),
]
POOL = "ztest"


def zdb(args: list[str], **kw) -> dict:
    return oc.run([oc.zdb_path()] + args, **kw)


def parse_block_stats(text: str) -> dict:
    """Summary and per-type table of `zdb -bb -P` output."""
    out: dict = {}
    pats = {
        "bp_count": r"bp count:\s+(\d+)",
        "ganged_count": r"ganged count:\s+(\d+)",
        "lsize": r"bp logical:\s+(\d+)",
        "psize": r"bp physical:\s+(\d+)",
        "asize": r"bp allocated:\s+(\d+)",
        "deduped": r"bp deduped:\s+(\d+)",
        "cloned": r"bp cloned:\s+(\d+)",
        "embedded_count": r"bp embedded:\s+(\d+)",
        "non_pointer_bps": r"additional, non-pointer bps of type 0:\s+(\d+)",
        "dittoed_same_vdev": r"Dittoed blocks on same vdev:\s+(\d+)",
    }
    for k, p in pats.items():
        m = re.search(p, text)
        if m:
            out[k] = int(m.group(1))
    out["no_leaks_line"] = "No leaks (block sum matches space maps exactly)" \
        in text
    out["leak_lines"] = [ln.strip() for ln in text.splitlines()
                         if "leaked space" in ln or "space map refcount"
                         in ln][:20]
    table: dict = {}
    in_table = False
    for ln in text.splitlines():
        if ln.startswith("Blocks\tLSIZE"):
            in_table = True
            continue
        if in_table:
            cols = ln.split("\t")
            if len(cols) < 8:
                if ln.strip() == "" and table:
                    break
                continue
            name = cols[-1].strip()
            try:
                table[name] = {"blocks": int(cols[0]), "lsize": int(cols[1]),
                               "psize": int(cols[2]), "asize": int(cols[3])}
            except ValueError:
                continue  # "-" rows: no blocks of that type
    out["by_type"] = table
    return out


def features(d: str) -> dict:
    """Feature refcounts from the MOS features_for_read/write ZAPs."""
    r = zdb(["-e", "-p", d, "-dddd", POOL + "/0", "1"])
    objs = oc.parse_objects(r["stdout"])
    zap = objs.get(1, {}).get("zap", {})
    ids = [zap[k].split()[0] for k in ("features_for_read",
                                       "features_for_write") if k in zap]
    res: dict = {"enabled": {}, "zdb_exit": r["exit"]}
    if not ids:
        return res
    r2 = zdb(["-e", "-p", d, "-dddd", POOL + "/0"] + ids)
    for o in oc.parse_objects(r2["stdout"]).values():
        for k, v in o.get("zap", {}).items():
            try:
                res["enabled"][k] = int(v.split()[0])
            except ValueError:
                pass
    res["active"] = sorted(k for k, v in res["enabled"].items() if v > 0)
    return res


def vdev_paths(tree: dict | None) -> list[str]:
    out: list[str] = []
    if not isinstance(tree, dict):
        return out
    if "path" in tree:
        out.append(tree["path"])
    for c in tree.get("children", []):
        out += vdev_paths(c)
    return out


def vdev_types(tree: dict | None) -> list[str]:
    if not isinstance(tree, dict):
        return []
    t = [tree.get("type", "?") + (str(tree["nparity"]) if "nparity" in tree
                                  else "")]
    for c in tree.get("children", []):
        t += vdev_types(c)
    return t


def do_seed(out: str, seed: int) -> dict:
    d = os.path.join(out, f"seed{seed}")
    if os.path.exists(os.path.join(d, ".done")):
        return {"seed": seed, "skipped": True}
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    layout, extra = LAYOUTS[(seed - 1) % len(LAYOUTS)]
    ttime = os.environ.get("RZFS_ZTEST_TIME", "10")
    size = os.environ.get("RZFS_ZTEST_SIZE", "128m")
    argv = [os.path.join(oc.SBIN, "ztest"), "-V", "-T", ttime, "-s", size,
            "-f", d] + extra
    t0 = time.monotonic()
    zr = oc.run(argv, timeout=int(ttime) * 12 + 120)
    exp: dict = {"pool": POOL, "seed": seed, "layout_requested": layout,
                 "ztest_argv": argv[1:], "ztest_exit": zr["exit"],
                 "ztest_seconds": zr["seconds"]}
    with open(os.path.join(d, "ztest_stdout.txt"), "w") as fh:
        fh.write(zr["stdout"][-200000:] + zr["stderr"][-50000:])
    m = re.search(r"^\d+ vdevs, .*$", zr["stdout"], re.M)
    if m:
        exp["ztest_banner"] = m.group(0)
    m = re.search(r"(\d+) killed, (\d+) completed", zr["stdout"])
    if m:
        exp["ztest_passes"] = {"killed": int(m.group(1)),
                               "completed": int(m.group(2))}
    if zr["exit"] != 0:
        exp["ztest_failure"] = oc.failure_note(zr)
    br = zdb(["-e", "-p", d, "-bbcc", "-P", POOL], timeout=600)
    with open(os.path.join(d, "zdb_bbcc.txt"), "w") as fh:
        fh.write(br["stdout"] + br["stderr"])
    exp["zdb_exit"] = br["exit"]
    exp["zdb_argv"] = br["argv"][1:]
    stats = parse_block_stats(br["stdout"])
    exp.update({k: stats.get(k) for k in ("bp_count", "lsize", "psize",
                                          "asize")})
    exp["leaks"] = not stats["no_leaks_line"]
    exp["block_stats"] = stats
    if br["exit"] != 0:
        exp["zdb_failure"] = oc.failure_note(br)
    cr = zdb(["-e", "-p", d, "-C", "-d", POOL])
    cfg = oc.parse_zdb_C(cr["stdout"]) or {}
    exp["guid"] = cfg.get("pool_guid")
    exp["version"] = cfg.get("version")
    exp["vdev_tree"] = cfg.get("vdev_tree")
    exp["vdev_types"] = sorted(set(vdev_types(cfg.get("vdev_tree"))))
    exp["mos_config"] = cfg
    exp["datasets"] = oc.parse_dataset_list(cr["stdout"])
    exp["features"] = features(d)
    in_tree = set(vdev_paths(cfg.get("vdev_tree")))
    exp["files"] = []
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if not f.startswith(POOL + ".") or not os.path.isfile(p):
            continue
        lr = zdb(["-l", p])
        lab = oc.parse_zdb_l(lr["stdout"])
        cfgl = lab["config"] or {}
        exp["files"].append({
            "path": f, "size": os.path.getsize(p),
            "in_vdev_tree": p in in_tree,
            "label_state": cfgl.get("state"),
            "label_txg": cfgl.get("txg"),
            "labels_valid": lab["labels_valid"]})
    exp["generator_seconds"] = round(time.monotonic() - t0, 2)
    oc.write_json(os.path.join(d, "expected.json"), exp)
    open(os.path.join(d, ".done"), "w").close()
    return {"seed": seed, "layout": layout, "ztest_exit": zr["exit"],
            "zdb_exit": br["exit"], "leaks": exp["leaks"],
            "bp_count": exp["bp_count"], "vdev_types": exp["vdev_types"],
            "files": len(exp["files"]), "seconds": exp["generator_seconds"]}


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "RZFS_TESTDATA", "/work/main/test-data")
    seeds = [int(s) for s in sys.argv[2:]] or [1, 2, 3]
    out = os.path.join(base, "ztest")
    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(len(seeds)) as ex:
        results = list(ex.map(lambda s: do_seed(out, s), seeds))
    for r in results:
        print("ztest:", " ".join(f"{k}={v}" for k, v in r.items()))
    print(f"ztest: {len(seeds)} seeds in {time.monotonic() - t0:.1f}s")
    # A ztest run ends with its pool still active (ztest kills itself mid-pass), so zdb may
    # report leaked space that a clean export would have settled; that is recorded, not
    # fatal: the fixture is for comparing block traversals, which zdb completes either way.
    bad = [r for r in results if not r.get("skipped") and r["zdb_exit"] != 0]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
