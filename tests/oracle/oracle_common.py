"""Shared helpers for the rzfs oracle fixture generators (stdlib only).

The generators drive real ZFS implementations (OpenZFS 2.3 `zdb`/`ztest`,
zfs-fuse 0.7) and record what *they* see, so rzfs can be compared against an
independent reader.  This module holds:

  * environment setup for the private OpenZFS prefix;
  * `run()` - a subprocess wrapper that never raises and keeps output;
  * parsers for zdb's text output (`-C`/`-l` nvlist dumps, `-d` dataset
    lists, `-dddd` object dumps);
  * a DMU replay ("send") stream reader used to hash file contents: one
    `zdb -B pool/objset` call yields every file's data, which is much faster
    than one `zdb -r` call (about 1 s each) per file;
  * the ZPL tree walk that turns parsed objects into manifest entries.

zdb prints times through ctime(3); we force TZ=UTC so they parse back to
epoch seconds.
"""

from __future__ import annotations

import bz2
import calendar
import hashlib
import json
import os
import re
import stat
import struct
import subprocess
import time
from typing import Any

PREFIX = os.environ.get("RZFS_ORACLE_PREFIX", "/opt/rzfs-oracles/openzfs")
SBIN = os.path.join(PREFIX, "sbin")
LIBDIR = os.path.join(PREFIX, "lib", "x86_64-linux-gnu")


def oz_env() -> dict[str, str]:
    """Environment for OpenZFS userland tools from the private prefix."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = LIBDIR + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""
    )
    env["PATH"] = SBIN + ":" + env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    env["TZ"] = "UTC"
    env["LC_ALL"] = "C"
    return env


def zdb_path() -> str:
    return os.path.join(SBIN, "zdb")


def run(argv: list[str], timeout: float = 120, env: dict | None = None,
        stdout_file: str | None = None) -> dict[str, Any]:
    """Run a command; return {"argv","exit","stdout","stderr","seconds"}.

    Never raises: a timeout gives exit = -9 and "timeout": True.  With
    `stdout_file`, stdout goes to that file (binary) and "stdout" is "".
    """
    t0 = time.monotonic()
    res: dict[str, Any] = {"argv": argv}
    try:
        if stdout_file:
            with open(stdout_file, "wb") as fh:
                p = subprocess.run(argv, stdout=fh, stderr=subprocess.PIPE,
                                   timeout=timeout, env=env or oz_env())
            res["stdout"] = ""
        else:
            p = subprocess.run(argv, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=timeout,
                               env=env or oz_env())
            res["stdout"] = p.stdout.decode("utf-8", "replace")
        res["exit"] = p.returncode
        res["stderr"] = p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        res.update(exit=-9, timeout=True, stdout=(e.stdout or b"").decode(
            "utf-8", "replace") if not stdout_file else "",
            stderr=(e.stderr or b"").decode("utf-8", "replace"))
    except OSError as e:
        res.update(exit=-1, stdout="", stderr=str(e))
    res["seconds"] = round(time.monotonic() - t0, 3)
    return res


def failure_note(res: dict[str, Any], limit: int = 2000) -> dict[str, Any]:
    """Compact record of a failed command: argv, exit and output tails."""
    out = (res.get("stdout") or "")[-limit:]
    err = (res.get("stderr") or "")[-limit:]
    return {"argv": res["argv"], "exit": res["exit"], "stdout_tail": out,
            "stderr_tail": err}


def write_json(path: str, obj: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1, sort_keys=False)
        fh.write("\n")
    os.replace(tmp, path)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def bunzip_sparse(src: str, dst: str, chunk: int = 65536) -> int:
    """Decompress a .bz2 image to `dst`, leaving all-zero chunks as holes."""
    zero = bytes(chunk)
    size = 0
    tmp = dst + ".part"
    with bz2.open(src, "rb") as inp, open(tmp, "wb") as out:
        while True:
            b = inp.read(chunk)
            if not b:
                break
            if b == zero[: len(b)]:
                out.seek(len(b), os.SEEK_CUR)
            else:
                out.write(b)
            size += len(b)
        out.truncate(size)
    os.replace(tmp, dst)
    return size


# --------------------------------------------------------------------------
# nvlist-style text (zdb -C, zdb -l)
# --------------------------------------------------------------------------

# "key: value" or "key:" (nested); keys may contain ':' (feature names
# such as com.delphix:vdev_zap_top), values follow ": ".
_KV = re.compile(r"^(\s*)(\S+?):(?: (.*))?$")
_FLAG = re.compile(r"^(\s*)(\S+)$")


def _nv_value(v: str) -> Any:
    v = v.strip()
    if len(v) >= 2 and v[0] == "'" and v[-1] == "'":
        return v[1:-1]
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def parse_nvtext(lines: list[str]) -> dict[str, Any]:
    """Parse zdb's indented "key: value" nvlist dump into nested dicts.

    "children[N]:" entries become a list under "children".  Lines that are
    not key/value pairs are ignored.
    """
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for line in lines:
        m = _KV.match(line)
        flag = None if m else _FLAG.match(line)
        if not m and not flag:
            continue
        mm = m or flag
        indent = len(mm.group(1).expandtabs(8))
        key = mm.group(2)
        val = (m.group(3) or "") if m else None
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if val is None:             # boolean nvpair: name only
            parent[key] = True
            continue
        cm = re.fullmatch(r"(\w+)\[(\d+)\]", key)
        if val.strip() == "":
            child: dict[str, Any] = {}
            if cm:
                parent.setdefault(cm.group(1), []).append(child)
            else:
                parent[key] = child
            stack.append((indent, child))
        else:
            parent[key] = _nv_value(val)
    return root


def parse_zdb_C(text: str) -> dict[str, Any] | None:
    """MOS configuration from `zdb -C POOL` output."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "MOS Configuration:":
            body = []
            for ln in lines[i + 1:]:
                if ln and not ln[0].isspace():
                    break
                body.append(ln)
            return parse_nvtext(body)
    return None


def parse_zdb_l(text: str) -> dict[str, Any]:
    """`zdb -l DEVICE`: first label's config plus valid/failed label sets."""
    lines = text.splitlines()
    valid: list[int] = []
    failed: list[int] = []
    config: dict[str, Any] | None = None
    block: list[str] = []
    for line in lines:
        s = line.strip()
        m = re.match(r"labels = ([\d ]+)", s)
        if m:
            valid += [int(x) for x in m.group(1).split()]
            if config is None:
                config = parse_nvtext(block)
            block = []
            continue
        m = re.match(r"failed to (?:unpack|read) label (\d+)", s)
        if m:
            failed.append(int(m.group(1)))
            continue
        if s.startswith("LABEL ") or s.startswith("-----"):
            continue
        block.append(line)
    if config is None and block:
        cfg = parse_nvtext(block)
        config = cfg or None
    return {"config": config, "labels_valid": sorted(valid),
            "labels_failed": sorted(failed)}


# --------------------------------------------------------------------------
# zdb -d : dataset list
# --------------------------------------------------------------------------

_DS = re.compile(r"^Dataset (\S+) \[(\w+)\], ID (\d+), cr_txg (\d+), "
                 r"([^,]+), (\d+) objects")


def parse_dataset_list(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        m = _DS.match(line)
        if not m:
            continue
        name, kind = m.group(1), m.group(2)
        if kind == "META":
            continue
        if "@" in name:
            dtype = "snapshot"
        elif kind == "ZVOL":
            dtype = "volume"
        else:
            dtype = "filesystem"
        out.append({"name": name, "type": dtype, "objset_type": kind,
                    "objset_id": int(m.group(3)), "cr_txg": int(m.group(4)),
                    "used_human": m.group(5), "objects": int(m.group(6))})
    return out


# --------------------------------------------------------------------------
# zdb -dddd : objects of one objset
# --------------------------------------------------------------------------

_OBJ_ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)"
                      r"\s+(\S+)\s+([\d.]+)\s+(.+?)\s*$")
_ZENT = re.compile(r"^\t\t(.*) = (\d+) \(type: (.*)\)$")
_ZENT_PLAIN = re.compile(r"^\t\t(.*) = (.*)$")
_ATTR = re.compile(r"^\t(uid|gid|atime|mtime|ctime|crtime|gen|mode|size|"
                   r"parent|links|pflags|xattr|rdev|target|path|projid)"
                   r"\s+(.*)$")


def _ctime_to_epoch(s: str) -> int | None:
    try:
        return calendar.timegm(
            time.strptime(s.strip(), "%a %b %d %H:%M:%S %Y"))
    except ValueError:
        return None


def parse_objects(text: str) -> dict[int, dict[str, Any]]:
    """Objects from `zdb -dddd POOL/DS`: type, znode attrs, ZAP entries.

    Directory ZAP entries (dump_zpldir) land in obj["entries"] as
    {name: object}; other ZAP name = value lines in obj["zap"].
    """
    objs: dict[int, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("Object  lvl"):
            m = _OBJ_ROW.match(lines[i + 1]) if i + 1 < len(lines) else None
            if m:
                cur = {"object": int(m.group(1)), "dmu_type": m.group(9),
                       "dblk": m.group(4), "lsize": m.group(7)}
                objs[cur["object"]] = cur
                i += 2
                continue
        if cur is not None:
            zm = _ZENT.match(line)
            if zm:
                cur.setdefault("entries", {})[zm.group(1)] = int(zm.group(2))
            elif line.startswith("\t\t"):
                pm = _ZENT_PLAIN.match(line)
                if pm:
                    zap = cur.setdefault("zap", {})
                    zap[pm.group(1)] = pm.group(2).strip()
            else:
                am = _ATTR.match(line)
                if am:
                    k, v = am.group(1), am.group(2)
                    if k in ("atime", "mtime", "ctime", "crtime"):
                        cur[k] = _ctime_to_epoch(v)
                    elif k == "mode":
                        cur[k] = int(v.split()[0], 8)
                    elif k in ("pflags", "rdev"):
                        cur[k] = int(v.split()[0], 16)
                    elif k in ("target", "path"):
                        cur[k] = v
                    else:
                        try:
                            cur[k] = int(v.split()[0], 0)
                        except ValueError:
                            cur[k] = v
                elif "bonus" in line and "System attributes" in line:
                    cur["bonus"] = "SA"
                elif "bonus" in line and "ZFS znode" in line:
                    cur["bonus"] = "znode"
        i += 1
    return objs


# --------------------------------------------------------------------------
# DMU replay stream (zdb -B) -> per-object data
# --------------------------------------------------------------------------
# Record layout (see OpenZFS include/sys/zfs_ioctl.h, dmu_replay_record_t):
#   0  u32 drr_type        4  u32 drr_payloadlen     8.. union (304 bytes)
# total 312 bytes; payload (if any) follows the record.
DRR_BEGIN, DRR_OBJECT, DRR_FREEOBJECTS, DRR_WRITE, DRR_FREE, DRR_END, \
    DRR_WRITE_BYREF, DRR_SPILL, DRR_WRITE_EMBEDDED, DRR_OBJECT_RANGE, \
    DRR_REDACT = range(11)
DRR_SIZE = 312
DMU_BACKUP_MAGIC = 0x2F5BACBAC


def _p2roundup8(n: int) -> int:
    return (n + 7) & ~7


def read_send_stream(path: str) -> dict[str, Any]:
    """Collect DRR_WRITE data per object from an uncompressed full stream.

    Returns {"writes": {obj: [(offset, bytes)]},
    "objects": {obj: {"type", "bonustype", "blksz", "bonus"}},
    "records": count, "errors": [..]}.  Only plain (non-raw, non-compressed,
    non-embedded) streams are fully decoded: that is what `zdb -B` emits
    without flags.
    """
    writes: dict[int, list[tuple[int, bytes]]] = {}
    objects: dict[int, int] = {}
    errors: list[str] = []
    nrec = 0
    with open(path, "rb") as fh:
        data = fh.read()
    pos = 0
    swap = None
    while pos + DRR_SIZE <= len(data):
        rec = data[pos:pos + DRR_SIZE]
        if swap is None:
            # drr_begin.drr_magic (first u64 of the union) tells byte order.
            magic = struct.unpack_from("<Q", rec, 8)[0]
            swap = "<" if magic == DMU_BACKUP_MAGIC else ">"
        e = swap
        rtype, plen = struct.unpack_from(e + "II", rec, 0)
        pos += DRR_SIZE
        nrec += 1
        payload = 0
        if rtype == DRR_BEGIN:
            payload = plen
        elif rtype == DRR_OBJECT:
            obj, otype, btype, blksz, bonuslen = struct.unpack_from(
                e + "QIIII", rec, 8)
            objects[obj] = {"type": otype, "bonustype": btype,
                            "blksz": blksz,
                            "bonus": data[pos:pos + bonuslen]}
            payload = _p2roundup8(bonuslen)
        elif rtype == DRR_WRITE:
            obj, _t, _pad, off, lsz, _g, _ck, _fl, comp = struct.unpack_from(
                e + "QIIQQQBBB", rec, 8)
            csize = struct.unpack_from(e + "Q", rec, 8 + 43 + 5 + 40)[0]
            payload = csize if comp else lsz
            if comp:
                errors.append(f"compressed write obj {obj} off {off}")
            else:
                writes.setdefault(obj, []).append(
                    (off, data[pos:pos + lsz]))
        elif rtype == DRR_SPILL:
            _obj, length = struct.unpack_from(e + "QQ", rec, 8)
            payload = length
        elif rtype == DRR_WRITE_EMBEDDED:
            obj, off, length = struct.unpack_from(e + "QQQ", rec, 8)
            psize = struct.unpack_from(e + "I", rec, 8 + 44)[0]
            payload = _p2roundup8(psize)
            errors.append(f"embedded write obj {obj} off {off}")
        elif rtype == DRR_END:
            break
        elif rtype >= 11:
            errors.append(f"unknown record type {rtype} at {pos - DRR_SIZE}")
            break
        pos += payload
    return {"writes": writes, "objects": objects, "records": nrec,
            "errors": errors, "byteorder": swap or "<"}


_CONTENT_CACHE: dict[tuple, str] = {}


def object_content_sha256(writes: list[tuple[int, bytes]] | None,
                          size: int) -> str:
    """sha256 of a file of `size` bytes built from (offset, data) writes;
    gaps are holes (zeros), data past `size` is dropped.

    Memoised on (size, digest of the writes): hashing a 1 GiB sparse file
    costs ~2 s and the same file appears in a head and its snapshot."""
    d = hashlib.sha256()
    for off, buf in sorted(writes or [], key=lambda w: w[0]):
        d.update(off.to_bytes(8, "little") + len(buf).to_bytes(8, "little"))
        d.update(buf)
    key = (size, d.digest())
    if key not in _CONTENT_CACHE:
        _CONTENT_CACHE[key] = _content_sha256(writes, size)
    return _CONTENT_CACHE[key]


def _content_sha256(writes: list[tuple[int, bytes]] | None,
                    size: int) -> str:
    h = hashlib.sha256()
    pos = 0
    zchunk = bytes(1 << 20)

    def zeros(n: int) -> None:
        while n > 0:
            k = min(n, len(zchunk))
            h.update(zchunk[:k])
            n -= k

    for off, buf in sorted(writes or [], key=lambda w: w[0]):
        if off >= size:
            break
        if off > pos:
            zeros(off - pos)
            pos = off
        if off < pos:  # overlapping write; keep the tail only
            buf = buf[pos - off:]
        buf = buf[: size - pos]
        h.update(buf)
        pos += len(buf)
    zeros(size - pos)
    return h.hexdigest()


def object_content_bytes(writes: list[tuple[int, bytes]] | None,
                         size: int) -> bytes:
    out = bytearray(size)
    for off, buf in sorted(writes or [], key=lambda w: w[0]):
        if off >= size:
            continue
        chunk = buf[: size - off]
        out[off:off + len(chunk)] = chunk
    return bytes(out)


# --------------------------------------------------------------------------
# ZPL walk
# --------------------------------------------------------------------------

def ftype_letter(mode: int) -> str:
    fmt = stat.S_IFMT(mode)
    return {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l",
            stat.S_IFCHR: "c", stat.S_IFBLK: "b", stat.S_IFIFO: "p",
            stat.S_IFSOCK: "s"}.get(fmt, "?")


DMU_OT_ZNODE = 17          # see OpenZFS include/sys/dmu.h
ZNODE_PHYS_SIZE = 264      # legacy znode_phys_t; short symlinks follow it


def walk_zpl(objs: dict[int, dict[str, Any]], stream: dict[str, Any] | None
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """Walk the ZPL tree from the master node's ROOT entry.

    `stream` is a read_send_stream() result (file data, bonus buffers) or
    None.  Returns (entries, problems); a hard link yields one entry per
    path.
    """
    problems: list[str] = []
    master = objs.get(1, {})
    root = None
    for k, v in master.get("zap", {}).items():
        if k == "ROOT":
            try:
                root = int(v.split()[0])
            except ValueError:
                pass
    if root is None:
        return [], ["no ROOT in master node"]
    out: list[dict[str, Any]] = []
    stack = [("/", root)]
    seen_dirs: set[int] = set()
    while stack:
        path, obj = stack.pop()
        o = objs.get(obj)
        if o is None or "mode" not in o:
            problems.append(f"{path}: object {obj} missing from dump")
            continue
        ent = znode_entry(path, o, objs, stream, problems)
        out.append(ent)
        if ent["type"] == "d":
            if obj in seen_dirs:
                problems.append(f"{path}: directory cycle at {obj}")
                continue
            seen_dirs.add(obj)
            for name, child in sorted(o.get("entries", {}).items(),
                                      reverse=True):
                cpath = (path.rstrip("/") + "/" + name)
                stack.append((cpath, child))
    out.sort(key=lambda e: e["path"])
    return out, problems


def symlink_target(o: dict[str, Any], stream: dict[str, Any] | None
                   ) -> str | None:
    """Target of a symlink znode: zdb's own print (SA znodes), else the
    legacy bonus tail (short links), else the object's data block."""
    if "target" in o:
        return o["target"]
    if stream is None:
        return None
    size = o.get("size") or 0
    meta = stream["objects"].get(o["object"], {})
    bonus = meta.get("bonus", b"")
    writes = stream["writes"].get(o["object"])
    if not writes and meta.get("bonustype") == DMU_OT_ZNODE and \
            len(bonus) >= ZNODE_PHYS_SIZE + size:
        raw = bonus[ZNODE_PHYS_SIZE:ZNODE_PHYS_SIZE + size]
    else:
        raw = object_content_bytes(writes, size)
    return raw.decode("utf-8", "surrogateescape")


def znode_times(o: dict[str, Any], stream: dict[str, Any] | None,
                problems: list[str], path: str) -> dict[str, int]:
    """Nanoseconds of the four znode times from a legacy znode bonus.

    zdb prints times with ctime(3) (seconds only); the send stream carries
    the bonus buffer, where znode_phys_t starts with atime, mtime, ctime,
    crtime as {seconds, nanoseconds} u64 pairs (see OpenZFS
    include/sys/zfs_sa.h).  SA bonuses are not decoded here."""
    if stream is None:
        return {}
    meta = stream["objects"].get(o["object"], {})
    bonus = meta.get("bonus", b"")
    if meta.get("bonustype") != DMU_OT_ZNODE or len(bonus) < 64:
        return {}
    vals = struct.unpack_from(stream["byteorder"] + "8Q", bonus, 0)
    out = {}
    for i, k in enumerate(("atime", "mtime", "ctime", "crtime")):
        sec, nsec = vals[2 * i], vals[2 * i + 1]
        if o.get(k) is not None and o[k] != sec:
            problems.append(f"{path}: {k} zdb={o[k]} bonus={sec}")
        out[k + "_nsec"] = nsec
    return out


def znode_entry(path: str, o: dict[str, Any], objs: dict[int, dict],
                stream: dict[str, Any] | None, problems: list[str]
                ) -> dict[str, Any]:
    mode = o["mode"]
    t = ftype_letter(mode)
    writes = stream["writes"] if stream is not None else None
    ent: dict[str, Any] = {
        "path": path, "object": o["object"], "type": t,
        "size": o.get("size"), "mode": mode, "uid": o.get("uid"),
        "gid": o.get("gid"), "links": o.get("links"),
    }
    for k in ("atime", "mtime", "ctime", "crtime"):
        if o.get(k) is not None:
            ent[k] = o[k]
    ent.update(znode_times(o, stream, problems, path))
    if t == "f" and writes is not None:
        ent["sha256"] = object_content_sha256(writes.get(o["object"]),
                                              o.get("size") or 0)
    if t == "l":
        tgt = symlink_target(o, stream)
        if tgt is None:
            problems.append(f"{path}: symlink target unknown")
        else:
            ent["target"] = tgt
    if t in ("c", "b"):
        ent["rdev"] = o.get("rdev")
    xobj = o.get("xattr") or 0
    if xobj:
        xd = objs.get(xobj)
        xattrs: dict[str, str] = {}
        if xd is None:
            problems.append(f"{path}: xattr dir {xobj} missing")
        elif writes is not None:
            for name, xo in sorted(xd.get("entries", {}).items()):
                xf = objs.get(xo, {})
                xattrs[name] = object_content_bytes(
                    writes.get(xo), xf.get("size") or 0).hex()
        ent["xattrs"] = xattrs
    return ent
