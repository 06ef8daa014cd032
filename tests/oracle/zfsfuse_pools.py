#!/usr/bin/env python3
"""Fixture 2: version-23 pools written by zfs-fuse 0.7 through FUSE.

For each layout (stripe of 2, mirror of 2, raidz1 of 3, raidz2 of 4, raidz3 of 5) we
create a pool on sparse files with zfs-fuse's own `zpool`/`zfs`
(/usr/sbin; OpenZFS's tools need the kernel module and are never used
here), make datasets with compression off / on (lzjb) / gzip, fill them
through the FUSE mounts with a fixed content set, snapshot the root dataset
half way, and record a manifest by walking the mounts (os.lstat,
os.listxattr) *before* export.  After `zpool export` and stopping the
daemon, OpenZFS 2.3 `zdb` reads each exported pool and its view is
compared with the manifest ("zdb_crosscheck").

Content is generated from a fixed PRNG seed, so file hashes are identical
across runs; pool bytes are not (guids, timestamps).

zfs-fuse has a single control socket (/var/run/zfs/zfs_socket) and lock
(/var/lock/zfs/zfs_lock), so only one daemon may run on the machine.

usage: zfsfuse_pools.py OUT      (fixture lands in OUT/zfsfuse/)
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import hashlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402

ZFS_FUSE = "/usr/sbin/zfs-fuse"
ZPOOL = "/usr/sbin/zpool"     # zfs-fuse's, not OpenZFS's
ZFS = "/usr/sbin/zfs"
SOCKET = "/var/run/zfs/zfs_socket"
MIB = 1 << 20

# layout -> (vdev count, vdev size MiB, zpool vdev-spec keyword or None)
LAYOUTS = {
    "stripe": (2, 128, None),
    "mirror": (2, 256, "mirror"),
    "raidz1": (3, 128, "raidz1"),
    "raidz2": (4, 128, "raidz2"),
    "raidz3": (5, 128, "raidz3"),
}
DATASETS = [("", {}), ("lzjb", {"compression": "on"}),
            ("gzip", {"compression": "gzip"})]
LONG_TARGET = "../" + "long-symlink-target-component/" * 3 + "leaf.txt"
SEED = 0x5EED2023
LAYOUT_TIMEOUT = 300


def sh(argv: list[str], timeout: float = 120) -> dict:
    env = dict(os.environ, LC_ALL="C")
    return oc.run(argv, timeout=timeout, env=env)


def must(argv: list[str], timeout: float = 120) -> dict:
    r = sh(argv, timeout)
    if r["exit"] != 0:
        raise RuntimeError(f"{argv}: exit {r['exit']}: {r['stderr']}"
                           f"{r['stdout']}")
    return r


# --------------------------------------------------------------------------
# daemon
# --------------------------------------------------------------------------

class Daemon:
    """A foreground zfs-fuse process we own (killed by its pid only)."""

    def __init__(self, logpath: str):
        self.logpath = logpath
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if os.path.exists(SOCKET) and sh([ZPOOL, "list"])["exit"] == 0:
            raise RuntimeError("a zfs-fuse daemon is already running; "
                               "stop it first (one per machine)")
        os.makedirs(os.path.dirname(SOCKET), exist_ok=True)
        self.log = open(self.logpath, "w")
        self.proc = subprocess.Popen(
            [ZFS_FUSE, "--no-daemon", "--no-kstat-mount", "-x",
             "-a", "0", "-e", "0"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("zfs-fuse exited early; see " +
                                   self.logpath)
            if os.path.exists(SOCKET) and sh([ZPOOL, "list"])["exit"] == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("zfs-fuse did not come up in 20 s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode


def lazy_unmount(base: str) -> None:
    """Detach any FUSE mount left under `base` (after a daemon crash)."""
    try:
        with open("/proc/self/mounts") as fh:
            mnts = [ln.split()[1] for ln in fh]
    except OSError:
        return
    for m in mnts:
        if m == base or m.startswith(base.rstrip("/") + "/"):
            if sh(["fusermount", "-u", "-z", m])["exit"] != 0:
                sh(["umount", "-l", m])


# --------------------------------------------------------------------------
# content
# --------------------------------------------------------------------------

def write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def populate_a(root: str, rng: random.Random, sparse_mib: int) -> None:
    """Phase A: everything the mid-way snapshot sees.

    `sparse_mib` is the apparent size of sparse.bin: 1024 in the root
    dataset, smaller in the compressed ones because reading a 1 GiB file
    back through zfs-fuse's FUSE costs ~9 s."""
    deep = os.path.join(root, "d1/d2/d3/d4/d5")
    os.makedirs(deep)
    write(os.path.join(deep, "leaf.txt"), b"leaf at depth five\n")
    write(os.path.join(root, "random.bin"), rng.randbytes(20 * MIB))
    write(os.path.join(root, "empty"), b"")
    write(os.path.join(root, "zeros.bin"), bytes(MIB))
    line = b"All work and no play makes Jack a dull boy. 0123456789\n"
    write(os.path.join(root, "compressible.txt"),
          line * (4 * MIB // len(line)))
    with open(os.path.join(root, "sparse.bin"), "wb") as fh:
        for off in (0, sparse_mib * MIB * 3 // 10 + 12345,
                    sparse_mib * MIB * 3 // 4):
            fh.seek(off)
            fh.write(rng.randbytes(100000))
        fh.truncate(sparse_mib * MIB)
    hl = os.path.join(root, "hardlink-src")
    write(hl, b"one inode, three names\n")
    os.link(hl, os.path.join(root, "hardlink-2"))
    os.link(hl, os.path.join(root, "d1", "hardlink-3"))
    os.symlink("d1/d2/d3/d4/d5/leaf.txt", os.path.join(root, "short-link"))
    os.symlink(LONG_TARGET, os.path.join(root, "d1", "long-link"))
    os.symlink("does-not-exist", os.path.join(root, "dangling-link"))
    write(os.path.join(root, "n" * 255), b"255-byte name\n")
    many = os.path.join(root, "many")
    os.mkdir(many)
    for i in range(200):
        write(os.path.join(many, f"f{i:03d}"), f"small {i}\n".encode())
    fat = os.path.join(root, "fat")
    os.mkdir(fat)
    for i in range(200):
        name = f"small-file-with-a-long-name-that-forces-a-fat-zap-{i:04d}"
        write(os.path.join(fat, name), rng.randbytes(rng.randrange(1, 3000)))
    xf = os.path.join(root, "xattr-file")
    write(xf, b"has xattrs\n")
    os.setxattr(xf, "user.short", b"hello")
    os.setxattr(xf, "user.binary", bytes(range(256)))
    os.setxattr(xf, "user.big", rng.randbytes(1000))
    os.setxattr(os.path.join(root, "d1"), "user.on-dir", b"dir xattr")
    modes = os.path.join(root, "modes")
    os.mkdir(modes)
    for name, mode in (("private", 0o600), ("setuid", 0o4755),
                       ("exec", 0o755)):
        p = os.path.join(modes, name)
        write(p, name.encode())
        os.chmod(p, mode)
    sticky = os.path.join(modes, "sticky-dir")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    own = os.path.join(modes, "owned")
    write(own, b"uid 1234 gid 5678\n")
    os.chown(own, 1234, 5678)
    os.mkfifo(os.path.join(modes, "fifo"))
    os.utime(os.path.join(root, "empty"), ns=(1000000000123456789,
                                               1234567890987654321))


def populate_b(root: str, rng: random.Random) -> None:
    """Phase B, after the snapshot: modify, add, remove."""
    with open(os.path.join(root, "random.bin"), "r+b") as fh:
        fh.seek(MIB)
        fh.write(b"\xAA" * 4096)
        fh.seek(0, os.SEEK_END)
        fh.write(b"appended after snapshot\n")
    write(os.path.join(root, "after-snapshot.txt"), b"only in head\n")
    os.unlink(os.path.join(root, "many", "f199"))
    os.rename(os.path.join(root, "many", "f000"),
              os.path.join(root, "many", "renamed-f000"))


# --------------------------------------------------------------------------
# manifest
# --------------------------------------------------------------------------

def walk_mount(mnt: str) -> list[dict]:
    """Manifest of one mounted dataset (does not cross mount points)."""
    dev = os.lstat(mnt).st_dev
    out = []
    stack = ["/"]
    while stack:
        rel = stack.pop()
        p = mnt + rel if rel != "/" else mnt
        st = os.lstat(p)
        ent = stat_entry(rel, p, st)
        out.append(ent)
        if stat.S_ISDIR(st.st_mode) and st.st_dev == dev:
            for name in sorted(os.listdir(p), reverse=True):
                stack.append(rel.rstrip("/") + "/" + name)
    out.sort(key=lambda e: e["path"])
    return out


_SHA_CACHE: dict[tuple, str] = {}


def fuse_sha256(p: str, st: os.stat_result) -> str:
    """Content hash read through FUSE; cached per unchanged inode so the
    1 GiB sparse file is read once per mount, not once per walk."""
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as fh:
            while True:
                b = fh.read(MIB)
                if not b:
                    break
                h.update(b)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def stat_entry(rel: str, p: str, st: os.stat_result) -> dict:
    t = oc.ftype_letter(st.st_mode)
    ent = {"path": rel, "object": st.st_ino, "type": t, "size": st.st_size,
           "mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid,
           "links": st.st_nlink}
    for k in ("atime", "mtime", "ctime"):
        ns = getattr(st, f"st_{k}_ns")
        ent[k] = ns // 1_000_000_000
        ent[k + "_nsec"] = ns % 1_000_000_000
    if t == "f":
        ent["sha256"] = fuse_sha256(p, st)
    elif t == "l":
        ent["target"] = os.readlink(p)
    if t in ("c", "b"):
        ent["rdev"] = st.st_rdev
    try:
        names = os.listxattr(p, follow_symlinks=False)
    except OSError:
        names = []
    if names:
        ent["xattrs"] = {n: lgetxattr(p, n).hex() for n in sorted(names)}
    return ent


_LIBC = ctypes.CDLL(None, use_errno=True)


def lgetxattr(path: str, name: str) -> bytes:
    """getxattr with a 64 KiB buffer.

    zfs-fuse 0.7 answers a getxattr whose buffer is too small with 8 bytes
    of garbage (0x22 = ERANGE as data) instead of failing with ERANGE, and
    os.getxattr starts with a 128-byte buffer; so ask once, big enough.
    """
    buf = ctypes.create_string_buffer(65536)
    n = _LIBC.lgetxattr(os.fsencode(path), os.fsencode(name), buf, 65536)
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)
    return buf.raw[:n]


# --------------------------------------------------------------------------
# per layout
# --------------------------------------------------------------------------

def build_layout(out: str, mntbase: str, layout: str) -> dict:
    n, mib, kw = LAYOUTS[layout]
    d = os.path.join(out, layout)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    pool = f"zf-{layout}"
    vdevs = []
    for i in range(n):
        p = os.path.join(d, f"vdev{i}.img")
        with open(p, "wb") as fh:
            fh.truncate(mib * MIB)
        vdevs.append(p)
    mnt = os.path.join(mntbase, layout)
    spec = ([kw] if kw else []) + vdevs
    must([ZPOOL, "create", "-o", "cachefile=none", "-m", mnt, pool] + spec)
    exp: dict = {"pool": pool, "layout": layout, "writer": "zfs-fuse 0.7",
                 "files": [os.path.basename(v) for v in vdevs],
                 "vdev_size": mib * MIB, "content_seed": SEED,
                 "datasets": []}
    mounts = {}
    for sub, props in DATASETS:
        name = pool + ("/" + sub if sub else "")
        m = mnt if not sub else f"{mnt}-{sub}"
        if sub:
            args = []
            for k, v in props.items():
                args += ["-o", f"{k}={v}"]
            must([ZFS, "create", "-o", f"mountpoint={m}"] + args + [name])
        must([ZFS, "set", "atime=off", name])
        mounts[name] = m
    rng = random.Random(SEED)
    for name, m in mounts.items():
        populate_a(m, random.Random(SEED), 1024 if name == pool else 64)
    snap_manifest = walk_mount(mounts[pool])
    must([ZFS, "snapshot", pool + "@mid"])
    for name, m in mounts.items():
        populate_b(m, rng)
    for name, m in mounts.items():
        exp["datasets"].append({
            "name": name, "type": "filesystem", "mountpoint": m,
            "props": zfs_props(name), "files": walk_mount(m)})
    exp["datasets"].append({"name": pool + "@mid", "type": "snapshot",
                            "snapshot_of": pool, "files": snap_manifest})
    exp["pool_props"] = zpool_props(pool)
    exp["guid"] = int(exp["pool_props"].get("guid", 0)) or None
    exp["version"] = int(exp["pool_props"].get("version", 0)) or None
    st = sh([ZPOOL, "status", pool])
    exp["zpool_status"] = st["stdout"]
    must([ZPOOL, "export", pool], timeout=300)
    exp["exported"] = True
    for _, m in mounts.items():
        try:
            os.rmdir(m)
        except OSError:
            pass
    return exp


def zfs_props(name: str) -> dict:
    r = sh([ZFS, "get", "-H", "-p", "-o", "property,value",
            "compression,recordsize,version,atime,checksum,copies,"
            "used,referenced", name])
    return dict(ln.split("\t", 1) for ln in r["stdout"].splitlines()
                if "\t" in ln)


def zpool_props(pool: str) -> dict:
    r = sh([ZPOOL, "get", "all", pool])
    props = {}
    for ln in r["stdout"].splitlines()[1:]:
        parts = ln.split()
        if len(parts) >= 3:
            props[parts[1]] = parts[2]
    return props


# --------------------------------------------------------------------------
# zdb cross-check of the exported pool
# --------------------------------------------------------------------------

COMPARE = ("object", "type", "size", "mode", "uid", "gid", "links",
           "sha256", "target", "atime", "mtime", "ctime", "rdev")


def adopt_disk_times(a: dict, b: dict) -> None:
    """zfs-fuse's FUSE layer reports (and sets) whole seconds only, while
    the znodes it writes carry nanoseconds.  Keep the on-disk nanoseconds
    (from zdb's view) as the expectation, FUSE's under "fuse_nsec"."""
    fuse = {}
    for k in ("atime", "mtime", "ctime"):
        nk = k + "_nsec"
        if nk in b and a.get(nk) != b[nk]:
            fuse[k] = a.get(nk)
            a[nk] = b[nk]
    if fuse:
        a["fuse_nsec"] = fuse
    for k in ("crtime", "crtime_nsec"):
        if k in b:
            a[k] = b[k]


def zdb_view(d: str, pool: str) -> dict:
    """What OpenZFS zdb reads from the exported pool, per dataset."""
    z = oc.zdb_path()
    cr = oc.run([z, "-e", "-p", d, "-C", "-d", pool])
    view: dict = {"zdb_exit": cr["exit"], "datasets": {}}
    if cr["exit"] != 0:
        view["failure"] = oc.failure_note(cr)
    cfg = oc.parse_zdb_C(cr["stdout"]) or {}
    view["config"] = cfg
    for ds in oc.parse_dataset_list(cr["stdout"]):
        target = ds["name"] if ("/" in ds["name"] or "@" in ds["name"]) \
            else ds["name"] + "/"
        r = oc.run([z, "-A", "-e", "-p", d, "-dddd", target])
        objs = oc.parse_objects(r["stdout"])
        tmp = os.path.join(d, ".send.tmp")
        s = oc.run([z, "-e", "-p", d, "-B", f"{pool}/{ds['objset_id']}"],
                   stdout_file=tmp)
        stream = oc.read_send_stream(tmp) if s["exit"] == 0 else None
        if os.path.exists(tmp):
            os.unlink(tmp)
        files, problems = oc.walk_zpl(objs, stream)
        view["datasets"][ds["name"]] = {
            "objset_id": ds["objset_id"], "dddd_exit": r["exit"],
            "send_exit": s["exit"], "files": files, "problems": problems}
    return view


def crosscheck(exp: dict, view: dict) -> dict:
    mism: list[str] = []
    for ds in exp["datasets"]:
        zd = view["datasets"].get(ds["name"])
        if zd is None:
            mism.append(f"{ds['name']}: not listed by zdb")
            continue
        ds["objset_id"] = zd["objset_id"]
        mism += [f"{ds['name']}: {p}" for p in zd["problems"]]
        zf = {f["path"]: f for f in zd["files"]}
        mf = {f["path"]: f for f in ds["files"]}
        for p in sorted(set(zf) ^ set(mf)):
            side = "manifest" if p in mf else "zdb"
            mism.append(f"{ds['name']}:{p}: only in {side}")
        if "/" in mf and "/" in zf:
            # FUSE reports inode 1 for every mount root; take zdb's number.
            mf["/"]["object"] = zf["/"]["object"]
            mf["/"]["object_source"] = "zdb"
        for p in sorted(set(zf) & set(mf)):
            a, b = mf[p], zf[p]
            adopt_disk_times(a, b)
            for k in COMPARE:
                if k in a and a.get(k) != b.get(k):
                    mism.append(f"{ds['name']}:{p}: {k} manifest="
                                f"{a.get(k)!r} zdb={b.get(k)!r}")
            ax = a.get("xattrs", {})
            if ax != b.get("xattrs", {}) and (ax or b.get("xattrs")):
                mism.append(f"{ds['name']}:{p}: xattrs manifest={ax} "
                            f"zdb={b.get('xattrs')}")
    return {"ok": not mism and view["zdb_exit"] == 0,
            "zdb_exit": view["zdb_exit"], "mismatches": mism[:200]}


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "RZFS_TESTDATA", "/work/main/test-data")
    out = os.path.join(base, "zfsfuse")
    if os.path.exists(os.path.join(out, ".done")):
        print(f"zfsfuse: complete fixture at {out}, skipping")
        return 0
    os.makedirs(out, exist_ok=True)
    layouts = sys.argv[2:] or list(LAYOUTS)
    mntbase = os.path.join(out, ".mnt")
    os.makedirs(mntbase, exist_ok=True)
    t0 = time.monotonic()
    daemon = Daemon(os.path.join(out, "zfs-fuse.log"))
    results: dict = {}
    try:
        daemon.start()

        for lay in layouts:
            # One layout at a time: populating two pools concurrently
            # deadlocked zfs-fuse 0.7 (all daemon threads parked in futex
            # waits, writers stuck in fuse_get_req).  A watchdog turns any
            # such hang into a failure instead of a stuck test run.
            t1 = time.monotonic()
            with cf.ThreadPoolExecutor(1) as ex:
                fut = ex.submit(build_layout, out, mntbase, lay)
                try:
                    results[lay] = fut.result(timeout=LAYOUT_TIMEOUT)
                except cf.TimeoutError:
                    daemon.kill()
                    lazy_unmount(mntbase)
                    raise RuntimeError(f"{lay}: zfs-fuse hung for "
                                       f"{LAYOUT_TIMEOUT}s; daemon killed")
            results[lay]["fill_seconds"] = round(time.monotonic() - t1, 2)
    finally:
        for lay in layouts:
            pool = f"zf-{lay}"
            if lay in results and results[lay].get("exported"):
                continue
            if sh([ZPOOL, "list", pool])["exit"] == 0:
                sh([ZPOOL, "export", "-f", pool], timeout=300)
        rc = daemon.stop()
        lazy_unmount(mntbase)
        print(f"zfsfuse: daemon exit status {rc}")
        for exp in results.values():
            exp["daemon_exit"] = rc
    shutil.rmtree(mntbase, ignore_errors=True)
    ok = True
    with cf.ThreadPoolExecutor(4) as ex:
        views = dict(zip(results, ex.map(
            lambda lay: zdb_view(os.path.join(out, lay),
                                 results[lay]["pool"]), results)))
    for lay, exp in results.items():
        d = os.path.join(out, lay)
        view = views[lay]
        exp["zdb_crosscheck"] = crosscheck(exp, view)
        exp["vdev_tree"] = view["config"].get("vdev_tree")
        exp["zdb_exit"] = view["zdb_exit"]
        exp["expect"] = "ok"
        oc.write_json(os.path.join(d, "expected.json"), exp)
        cc = exp["zdb_crosscheck"]
        ok &= cc["ok"]
        print(f"zfsfuse: {lay}: pool={exp['pool']} v{exp['version']} "
              f"files={sum(len(x['files']) for x in exp['datasets'])} "
              f"fill={exp['fill_seconds']}s zdb_ok={cc['ok']} "
              f"mismatches={len(cc['mismatches'])}")
        for m in cc["mismatches"][:8]:
            print("   ", m)
    if len(results) == len(layouts):
        open(os.path.join(out, ".done"), "w").close()
    print(f"zfsfuse: {len(results)} layouts in {time.monotonic() - t0:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
