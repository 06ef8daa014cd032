#!/usr/bin/env python3
"""Fixture 1: OpenZFS's historic zpool_upgrade pool images + zdb's view.

Unpacks every blockfile shipped with the zfs-test package (pools written by
Solaris/early ZFS, versions 1..15, plus v999 and broken ones), groups them
into pools with zpool_upgrade.cfg, and records what OpenZFS 2.3 `zdb` reads
from each: config, datasets and - for every ZPL dataset - every path with
its znode attributes and content sha256.  See README.md for the schema.

usage: upgrade_pools.py OUT      (fixture lands in OUT/upgrade/)
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402

TESTS = os.path.join(oc.PREFIX, "usr/share/zfs/zfs-tests/tests/functional/"
                     "cli_root/zpool_upgrade")
BLOCKFILES = os.path.join(TESTS, "blockfiles")
CFG = os.path.join(TESTS, "zpool_upgrade.cfg")
# zdb idles ~1 s in teardown, so more jobs than cores still pays off.
JOBS = int(os.environ.get("RZFS_ORACLE_JOBS", "4"))


def parse_cfg(path: str) -> list[dict]:
    """ZPOOL_VERSION_<key>_FILES / _NAME pairs from zpool_upgrade.cfg."""
    text = open(path).read().replace("\\\n", " ")
    files = dict(re.findall(r'^ZPOOL_VERSION_(\w+?)_FILES="([^"]*)"', text,
                            re.M))
    names = dict(re.findall(r'^ZPOOL_VERSION_(\w+?)_NAME="([^"]*)"', text,
                            re.M))
    m = re.search(r'^CONFIGS="([^"]*)"', text, re.M)
    upgradable = set(m.group(1).split()) if m else set()
    out = []
    for key, flist in files.items():
        out.append({"config": key, "pool": names.get(key, key),
                    "images": flist.split(),
                    "cfg_upgradable": key in upgradable})
    return out


def groups() -> list[dict]:
    """Pool groups from the cfg, plus one group per image it does not name."""
    g = parse_cfg(CFG)
    named = {f for x in g for f in x["images"]}
    for f in sorted(os.listdir(BLOCKFILES)):
        img = f[:-4] if f.endswith(".bz2") else f
        if img not in named:
            key = re.sub(r"^zfs-pool-|\.dat$", "", img)
            g.append({"config": key, "pool": None, "images": [img],
                      "cfg_upgradable": False})
    for x in g:
        x["dir"] = x["pool"] or x["config"]
    return g


def stage(out: str, grp: dict) -> None:
    d = os.path.join(out, grp["dir"])
    os.makedirs(d, exist_ok=True)
    for img in grp["images"]:
        dst = os.path.join(d, img)
        if not os.path.exists(dst):
            oc.bunzip_sparse(os.path.join(BLOCKFILES, img + ".bz2"), dst)


def zdb(args: list[str], **kw) -> dict:
    return oc.run([oc.zdb_path()] + args, **kw)


def assertions(res: dict) -> list[str]:
    """Assertion failures zdb reported (with -A they do not abort)."""
    text = res.get("stdout", "") + res.get("stderr", "")
    out = []
    for m in re.finditer(r"ASSERT at (\S+)\n(.*)", text):
        out.append(m.group(1) + " " + m.group(2).strip())
    return out


def crosscheck(d: str, dsname: str, ent: dict, tmp: str) -> dict:
    """Extract one file with `zdb -r` and compare with the stream hash."""
    dest = os.path.join(tmp, "copy.bin")
    r = zdb(["-e", "-p", d, "-r", dsname, ent["path"].lstrip("/"), dest])
    res = {"path": ent["path"], "exit": r["exit"]}
    if r["exit"] == 0 and os.path.exists(dest):
        res["sha256"] = oc.sha256_file(dest)
        res["match"] = res["sha256"] == ent.get("sha256")
    else:
        res["failure"] = oc.failure_note(r)
        res["match"] = False
    return res


def do_dataset(d: str, pool: str, ds: dict, tmp: str, notes: list) -> dict:
    name = ds["name"]
    rec = {k: ds[k] for k in ("name", "type", "objset_type", "objset_id",
                              "cr_txg", "objects")}
    if ds["objset_type"] != "ZPL":
        rec["files"] = []
        return rec
    target = name if ("/" in name or "@" in name) else name + "/"
    r = zdb(["-A", "-e", "-p", d, "-dddd", target])
    rec["zdb_dddd_exit"] = r["exit"]
    a = assertions(r)
    if a:
        rec["zdb_assertions"] = a
    if r["exit"] != 0:
        notes.append(oc.failure_note(r))
    objs = oc.parse_objects(r["stdout"])
    master = objs.get(1, {}).get("zap", {})
    if "VERSION" in master:
        rec["zpl_version"] = int(master["VERSION"].split()[0])
    stream = os.path.join(tmp, "send.bin")
    s = zdb(["-e", "-p", d, "-B", f"{pool}/{ds['objset_id']}"],
            stdout_file=stream)
    rec["zdb_send_exit"] = s["exit"]
    ss = None
    if s["exit"] == 0:
        ss = oc.read_send_stream(stream)
        if ss["errors"]:
            rec["send_stream_errors"] = ss["errors"][:20]
    else:
        notes.append(oc.failure_note(s))
    if os.path.exists(stream):
        os.unlink(stream)
    files, problems = oc.walk_zpl(objs, ss)
    rec["files"] = files
    if problems:
        rec["walk_problems"] = problems[:50]
    regs = [f for f in files if f["type"] == "f" and f.get("size")]
    if regs and ss is not None:
        big = max(regs, key=lambda f: (f["size"], f["path"]))
        rec["crosscheck"] = crosscheck(d, name, big, tmp)
    return rec


def do_pool(out: str, grp: dict) -> dict:
    d = os.path.join(out, grp["dir"])
    done = os.path.join(d, ".done")
    exp_path = os.path.join(d, "expected.json")
    if os.path.exists(done) and os.path.exists(exp_path):
        return {"dir": grp["dir"], "skipped": True}
    t0 = time.monotonic()
    stage(out, grp)
    notes: list = []
    exp: dict = {"config": grp["config"], "cfg_upgradable":
                 grp["cfg_upgradable"], "files": [], "labels": {}}
    for img in grp["images"]:
        p = os.path.join(d, img)
        exp["files"].append({"path": img, "size": os.path.getsize(p),
                             "sha256": oc.sha256_file(p)})
        lr = zdb(["-l", p])
        lab = oc.parse_zdb_l(lr["stdout"])
        exp["labels"][img] = {"labels_valid": lab["labels_valid"],
                              "labels_failed": lab["labels_failed"],
                              "zdb_l_exit": lr["exit"]}
        if "label0" not in exp and lab["config"]:
            exp["label0"] = lab["config"]
    lab0 = exp.get("label0") or {}
    pool = grp["pool"] or lab0.get("name")
    exp["pool"] = pool
    exp["guid"] = lab0.get("pool_guid")
    exp["version"] = lab0.get("version")
    # One zdb run for config and dataset list: each run costs ~1 s.
    cr = zdb(["-e", "-p", d, "-C", "-d", pool])
    exp["zdb_exit"] = cr["exit"]
    cfg = oc.parse_zdb_C(cr["stdout"]) if cr["exit"] == 0 else None
    if cfg:
        exp["guid"] = cfg.get("pool_guid", exp["guid"])
        exp["version"] = cfg.get("version", exp["version"])
        exp["vdev_tree"] = cfg.get("vdev_tree")
        exp["mos_config"] = cfg
    else:
        notes.append(oc.failure_note(cr))
        exp["vdev_tree"] = lab0.get("vdev_tree")
    exp["datasets"] = []
    tmp = tempfile.mkdtemp(prefix="rzfs-oracle-")
    try:
        for ds in oc.parse_dataset_list(cr["stdout"]):
            exp["datasets"].append(do_dataset(d, pool, ds, tmp, notes))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    exp["expect"] = classify(exp, cr)
    exp["zdb_failures"] = notes
    exp["generator_seconds"] = round(time.monotonic() - t0, 2)
    oc.write_json(exp_path, exp)
    open(done, "w").close()
    return {"dir": grp["dir"], "expect": exp["expect"],
            "datasets": len(exp["datasets"]),
            "files": sum(len(x.get("files", [])) for x in exp["datasets"]),
            "seconds": exp["generator_seconds"]}


def classify(exp: dict, cr: dict) -> str:
    """ok: zdb read everything; refuse: zdb declined to open the pool
    (e.g. unsupported version); error: zdb opened it but hit failures."""
    if cr["exit"] != 0:
        return "refuse" if not exp["datasets"] else "error"
    for ds in exp["datasets"]:
        if ds.get("zdb_dddd_exit", 0) != 0 or ds.get("walk_problems") or \
                ds.get("zdb_send_exit", 0) != 0 or \
                not ds.get("crosscheck", {"match": True})["match"]:
            return "error"
    return "ok"


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "RZFS_TESTDATA", "/work/main/test-data")
    out = os.path.join(base, "upgrade")
    if os.path.exists(os.path.join(out, ".done")):
        print(f"upgrade: complete fixture at {out}, skipping")
        return 0
    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    gs = groups()
    with cf.ThreadPoolExecutor(JOBS) as ex:
        results = list(ex.map(lambda g: do_pool(out, g), gs))
    index = {"pools": [g["dir"] for g in gs], "source": BLOCKFILES,
             "generator": "tests/oracle/upgrade_pools.py"}
    oc.write_json(os.path.join(out, "index.json"), index)
    for r in results:
        print("upgrade:", " ".join(f"{k}={v}" for k, v in r.items()))
    open(os.path.join(out, ".done"), "w").close()
    print(f"upgrade: {len(gs)} pools in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
