#!/usr/bin/env python3
"""Cuts the seed corpora in fuzz/corpus/TARGET/ from small pools that OpenZFS ships as test data.

The seeds are committed; this script only documents (and can redo) where they came from:

  * zfs-pool-v15.dat   (zpool_upgrade blockfiles): big-endian, lzjb metadata, znode_phys bonuses.
  * unclean_export.dat (zpool_import blockfiles):  little-endian v5000, SA bonuses, fat ZAPs.
  * testpool_zstd      (compression test tarball): lz4 metadata, zstd data, embedded blkptrs.

Blocks are located by walking the on-disk structures here (uberblock -> objset -> dnodes ->
block pointers) and read decompressed through `zdb -R POOL 0:OFFSET:LSIZE/PSIZE:dr`, so the
seeds are what OpenZFS itself wrote and reads. Usage:

    python3 fuzz/make_corpus.py            # needs the oracles of scripts/install-test-deps.sh

Decompressor seeds are `u32 le lsize || compressed stream`, the input format of the
decompressor targets (see fuzz_targets/decompress_common.rs).
"""
import bz2
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zlib

PREFIX = os.environ.get("RZFS_ORACLE_PREFIX", "/opt/rzfs-oracles/openzfs")
ZDB = f"{PREFIX}/sbin/zdb"
LIBS = f"{PREFIX}/lib/x86_64-linux-gnu"
TESTS = f"{PREFIX}/usr/share/zfs/zfs-tests/tests/functional"
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
SCRATCH = os.environ.get("RZFS_FUZZ_SCRATCH", "/tmp/rzfs-fuzz-pools")

LABEL_START = 4 << 20  # two labels + boot area before the allocatable space
VDEV_PHYS = (16 << 10, 112 << 10)
UB_RING = 128 << 10

# dmu_object_type_t values of ZAP objects (include/sys/dmu.h).
MOS_ZAP_TYPES = (1, 13, 14, 15, 27, 31, 32, 37, 40, 41, 42, 47, 49, 50, 52)
ZPL_ZAP_TYPES = (20, 21, 22, 45, 46, 47)

ZIO_COMPRESS = {3: "lzjb", 15: "lz4", 16: "zstd", 14: "zle"}
for _n in range(5, 14):
    ZIO_COMPRESS[_n] = "gzip"


def trim(b, align=8, keep=0):
    """Drops trailing zero bytes (label areas and blocks are zero-padded), keeping `keep`."""
    n = len(b.rstrip(b"\0"))
    n = max(keep, (n + align - 1) // align * align)
    return b[: min(n, len(b))]


class Pool:
    def __init__(self, name, path, order):
        self.name, self.path, self.order = name, path, order
        self.e = "<" if order == "le" else ">"
        with open(path, "rb") as f:
            self.label = f.read(256 << 10)

    def raw(self, off, size):
        with open(self.path, "rb") as f:
            f.seek(LABEL_START + off)
            return f.read(size)

    def zdb_read(self, off, lsize, psize):
        flags = "r" if lsize == psize else "dr"
        spec = f"0:{off:x}:{lsize:x}/{psize:x}:{flags}"
        env = dict(os.environ, LD_LIBRARY_PATH=LIBS)
        out = subprocess.run(
            [ZDB, "-e", "-p", os.path.dirname(self.path), "-R", self.name, spec],
            env=env, capture_output=True, check=True,
        ).stdout
        if len(out) != lsize:
            raise RuntimeError(f"zdb -R {spec}: {len(out)} bytes")
        return out

    def u64s(self, b, n, off=0):
        return struct.unpack_from(f"{self.e}{n}Q", b, off)

    def uberblocks(self):
        ring = self.label[UB_RING : UB_RING + (128 << 10)]
        ubs = []
        for i in range(128):
            slot = ring[i * 1024 : (i + 1) * 1024]
            (magic,) = self.u64s(slot, 1)
            if magic == 0x00BAB10C:
                ubs.append(slot)
        ubs.sort(key=lambda s: self.u64s(s, 1, 16)[0])
        return ubs

    def bp_read(self, bp):
        """Contents of the block `bp` points to (first DVA), decompressed; None if a hole."""
        w = self.u64s(bp, 16)
        prop = w[6]
        if prop >> 39 & 1:  # embedded: payload is in the pointer itself
            return None
        asize = (w[0] & 0xFFFFFF) << 9
        if asize == 0:
            return None
        off = (w[1] & ((1 << 63) - 1)) << 9
        lsize = ((prop & 0xFFFF) + 1) << 9
        psize = ((prop >> 16 & 0xFFFF) + 1) << 9
        return self.zdb_read(off, lsize, psize)

    def bp_raw(self, bp):
        """(compression name, lsize, raw psize bytes) of the block `bp` points to."""
        w = self.u64s(bp, 16)
        prop = w[6]
        if prop >> 39 & 1 or w[0] & 0xFFFFFF == 0:
            return None, 0, b""
        off = (w[1] & ((1 << 63) - 1)) << 9
        lsize = ((prop & 0xFFFF) + 1) << 9
        psize = ((prop >> 16 & 0xFFFF) + 1) << 9
        return ZIO_COMPRESS.get(prop >> 32 & 0x7F), lsize, self.raw(off, psize)

    def dnode_block(self, dn, blkid):
        """Data block `blkid` of the object described by dnode `dn` (walks indirect blocks)."""
        nlevels, nblkptr, ibs = dn[2], dn[3], dn[1]
        per = 1 << (ibs - 7)
        idx = [(blkid // per**lvl) % per for lvl in range(nlevels)]
        if blkid >= nblkptr * per ** (nlevels - 1):
            return None
        bp = dn[64 + 128 * (blkid // per ** (nlevels - 1)) :][:128]
        for lvl in range(nlevels - 1, 0, -1):
            blk = self.bp_read(bp)
            if blk is None:
                return None
            i = idx[lvl - 1]
            bp = blk[128 * i : 128 * (i + 1)]
        return self.bp_read(bp)

    def objset(self, bp):
        os_ = self.bp_read(bp)
        meta = os_[:512]
        (maxblkid,) = self.u64s(meta, 1, 16)
        dnodes = []
        for blkid in range(min(maxblkid, 8) + 1):
            blk = self.dnode_block(meta, blkid) or bytes(512 * struct.unpack_from(f"{self.e}H", meta, 8)[0])
            dnodes += [blk[i : i + 512] for i in range(0, len(blk), 512)]
        return os_, dnodes

    def bonus(self, dn):
        nblkptr = dn[3]
        (bonuslen,) = struct.unpack_from(f"{self.e}H", dn, 10)
        start = 64 + 128 * nblkptr
        return dn[start : start + bonuslen]


class Corpus:
    def __init__(self):
        self.files = {}

    def add(self, target, name, data):
        if not data:
            return
        self.files[(target, name)] = bytes(data)

    def target(self, t):
        return [n for (tt, n) in self.files if tt == t]

    def write(self):
        for t in sorted({t for t, _ in self.files}):
            d = os.path.join(CORPUS, t)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        for (t, name), data in sorted(self.files.items()):
            with open(os.path.join(CORPUS, t, name), "wb") as f:
                f.write(data)
        for t in sorted({t for t, _ in self.files}):
            d = os.path.join(CORPUS, t)
            size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            print(f"corpus {t}: {len(os.listdir(d))} files, {size} bytes")


def unpack_pools():
    os.makedirs(SCRATCH, exist_ok=True)
    pools = []
    for sub, src, name, order in [
        ("v15", "cli_root/zpool_upgrade/blockfiles/zfs-pool-v15.dat.bz2", "v15-pool", "be"),
        ("unclean", "cli_root/zpool_import/blockfiles/unclean_export.dat.bz2", "unclean_export", "le"),
    ]:
        d = os.path.join(SCRATCH, sub)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "pool.dat")
        if not os.path.exists(path):
            with bz2.open(os.path.join(TESTS, src)) as fi, open(path, "wb") as fo:
                shutil.copyfileobj(fi, fo)
        pools.append(Pool(name, path, order))
    d = os.path.join(SCRATCH, "zstd")
    path = os.path.join(d, "testpool_zstd")
    if not os.path.exists(path):
        os.makedirs(d, exist_ok=True)
        with tarfile.open(os.path.join(TESTS, "compression/testpool_zstd.tar.gz")) as t:
            t.extractall(d)
    pools.append(Pool("testpool_zstd", path, "le"))
    return pools


def zle_compress(src, n=64):
    """OpenZFS's zle: runs of zeros (length n) and literals (length n), each length-1 coded."""
    out, i = bytearray(), 0
    while i < len(src):
        j = i
        if src[i] == 0:
            while j < len(src) and src[j] == 0 and j - i < n:
                j += 1
            out.append(n + (j - i) - 1)
        else:
            while j < len(src) and j - i < n and not (src[j] == 0 and src[j + 1 : j + 2] == b"\0"):
                j += 1
            out.append(j - i - 1)
            out += src[i:j]
        i = j
    return bytes(out)


def lz4_literals(src):
    """A valid OpenZFS lz4 block holding `src` as one literal run (BE u32 length prefix)."""
    n = len(src)
    tok = bytearray([min(n, 15) << 4])
    if n >= 15:
        r = n - 15
        while r >= 255:
            tok.append(255)
            r -= 255
        tok.append(r)
    blk = bytes(tok) + src
    return struct.pack(">I", len(blk)) + blk


def is_zap(t):
    """ZAP object types: the classic ones, or a new-style type whose byteswap is DMU_BSWAP_ZAP."""
    return t in MOS_ZAP_TYPES + ZPL_ZAP_TYPES or (t & 0x80 and t & 0x1F == 4)


def add_raw(c, p, bp, name):
    """The block as stored (compressed), as a decompressor seed, if it is small."""
    kind, lsize, raw = p.bp_raw(bp)
    raw = trim(raw)
    if kind and len(raw) <= 8 << 10 and len(c.target(kind)) < 12:
        c.add(kind, name, struct.pack("<I", lsize) + raw)


def add_pool(c, p):
    tag = p.name.split("-")[0].split("_")[0]
    phys = p.label[VDEV_PHYS[0] : VDEV_PHYS[0] + VDEV_PHYS[1] - 40]  # without its zio_eck_t
    c.add("label", f"{tag}-vdev_phys", trim(phys))
    c.add("nvlist", f"{tag}-label", trim(phys))
    c.add("label", f"{tag}-bootenv", trim(p.label[8 << 10 : 16 << 10], keep=8))
    ubs = p.uberblocks()
    for ub in ubs[-2:]:
        (txg,) = p.u64s(ub, 1, 16)
        c.add("uberblock", f"{tag}-txg{txg}", trim(ub, keep=256))
    rootbp = ubs[-1][40:168]
    c.add("blkptr", f"{tag}-rootbp", rootbp)
    add_raw(c, p, rootbp, f"{tag}-mos-objset")
    mos, dnodes = p.objset(rootbp)
    c.add("objset", f"{tag}-mos", mos)
    add_raw(c, p, mos[64:192], f"{tag}-mos-dnodes")
    kinds = set()
    for i, dn in enumerate(dnodes):
        t = dn[0]
        if t == 0:
            continue
        if t not in kinds:
            kinds.add(t)
            c.add("dnode", f"{tag}-mos-obj{i}-type{t}", dn)
            for j in range(dn[3]):
                bp = dn[64 + 128 * j : 192 + 128 * j]
                if any(bp):
                    c.add("blkptr", f"{tag}-mos-obj{i}-bp{j}", bp)
                    add_raw(c, p, bp, f"{tag}-mos-obj{i}-blk{j}")
        add_object(c, p, f"{tag}-mos-obj{i}", dn)
    return dnodes


def add_object(c, p, name, dn):
    """Seeds from one object: its bonus by bonus type, its first blocks by object type."""
    t, bt, bonus = dn[0], dn[4], p.bonus(dn)
    bonus_targets = {12: "dsl", 16: "dsl", 7: "spacemap", 6: "bpobj", 44: "sa", 17: "znode"}
    if bt in bonus_targets:
        c.add(bonus_targets[bt], f"{name}-bonus{bt}", bonus)
    if is_zap(t):
        for k in range(2):
            blk = p.dnode_block(dn, k)
            if blk is not None:
                c.add("zap", f"{name}-blk{k}", blk if len(blk) > 2048 else trim(blk))
    elif t in (3, 5, 8):
        data = p.dnode_block(dn, 0)
        target = {3: "nvlist", 5: "bpobj", 8: "spacemap"}[t]
        if data is not None:
            c.add(target, name, trim(data, align=128 if t == 5 else 8))


def add_datasets(c, p, mos_dnodes):
    tag = p.name.split("-")[0].split("_")[0]
    for i, dn in enumerate(mos_dnodes):
        if dn[4] != 16:  # DSL dataset bonus: its bp at byte 128 of dsl_dataset_phys
            continue
        bp = p.bonus(dn)[128:256]
        if not any(bp):
            continue
        os_, dnodes = p.objset(bp)
        c.add("objset", f"{tag}-ds{i}", os_)
        c.add("blkptr", f"{tag}-ds{i}-rootbp", bp)
        for j, zdn in enumerate(dnodes[:24]):
            if zdn[0] == 0:
                continue
            c.add("dnode", f"{tag}-ds{i}-obj{j}", zdn)
            add_object(c, p, f"{tag}-ds{i}-obj{j}", zdn)


def embedded_payload(p, bp):
    """(compression, lsize, payload) of an embedded block pointer (BPE_GET_* layout)."""
    w = p.u64s(bp, 16)
    prop = w[6]
    lsize = (prop & 0x1FFFFFF) + 1
    psize = (prop >> 25 & 0x7F) + 1
    data = b"".join(struct.pack("<Q", x) for i, x in enumerate(w) if i not in (6, 10))
    return ZIO_COMPRESS.get(prop >> 32 & 0x7F), lsize, data[:psize]


def add_zstd(c, zp):
    """zstd seeds of testpool_zstd: embedded payloads and small data blocks of its files."""
    rootbp = zp.uberblocks()[-1][40:168]
    add_raw(c, zp, rootbp, "zstdpool-mos-objset")
    mos_os, mos = zp.objset(rootbp)
    add_raw(c, zp, mos_os[64:192], "zstdpool-mos-dnodes")
    for i, dn in enumerate(mos):
        if dn[4] != 16:
            continue
        bp = zp.bonus(dn)[128:256]
        if not any(bp) or not zp.u64s(bp, 1, 48)[0] >> 63:  # little-endian datasets only
            continue
        _, dnodes = zp.objset(bp)
        for j, zdn in enumerate(dnodes[:32]):
            if zdn[0] != 19:  # DMU_OT_PLAIN_FILE_CONTENTS
                continue
            bps = [zdn[64 + 128 * k : 192 + 128 * k] for k in range(zdn[3])]
            if zdn[2] == 2:
                l1 = zp.bp_read(bps[0]) or b""
                bps = [l1[128 * k : 128 * (k + 1)] for k in range(3)]
            for k, fbp in enumerate(bps):
                (prop,) = zp.u64s(fbp, 1, 48)
                if prop >> 39 & 1:
                    c.add("blkptr", f"zstdpool-ds{i}-obj{j}-embedded", fbp)
                    kind, lsize, payload = embedded_payload(zp, fbp)
                    if kind:
                        c.add(kind, f"ds{i}-obj{j}-embedded", struct.pack("<I", lsize) + payload)
                else:
                    kind, lsize, raw = zp.bp_raw(fbp)
                    if kind == "zstd" and len(trim(raw)) <= 48 << 10 and len(c.target(kind)) < 3:
                        c.add(kind, f"ds{i}-obj{j}-blk{k}", struct.pack("<I", lsize) + trim(raw))


def add_synthetic(c):
    """Streams made here for the codecs no test pool uses (gzip, zle) or uses little."""
    text = open(__file__, "rb").read()[:4096]
    mixed = text[:1000] + bytes(700) + text[1000:2000] + bytes(3)
    c.add("gzip", "zlib-text", struct.pack("<I", len(text)) + zlib.compress(text, 6))
    c.add("gzip", "zlib-mixed", struct.pack("<I", len(mixed)) + zlib.compress(mixed, 1))
    c.add("zle", "mixed", struct.pack("<I", len(mixed)) + zle_compress(mixed))
    c.add("lz4", "literals", struct.pack("<I", 300) + lz4_literals(text[:300]))
    # A gang header holding three real block pointers (no test pool has gang blocks).
    bps = [d for (t, _), d in sorted(c.files.items()) if t == "blkptr"]
    gh = b"".join(bps[:3]).ljust(512 - 40, b"\0")
    c.add("gang_header", "three-bps", gh + struct.pack("<Q", 0x0210DA7AB10C7A11) + bytes(32))
    # POSIX ACL xattr values as the Linux kernel wrote them (`setfacl -m u:65534:r,g:100:rw f`
    # and `setfacl -d -m u:65534:rx d` on ext4, read back with `getfattr -e hex`), and an
    # empty ACL (header only).
    c.add("posix_acl", "access-named", bytes.fromhex(
        "0200000001000600ffffffff02000400feff000004000400ffffffff"
        "080006006400000010000600ffffffff20000400ffffffff"))
    c.add("posix_acl", "default-named", bytes.fromhex(
        "0200000001000700ffffffff02000500feff000004000500ffffffff"
        "10000500ffffffff20000500ffffffff"))
    c.add("posix_acl", "empty", bytes.fromhex("02000000"))


def add_walk_seeds(c):
    """Seeds of the whole-object targets, assembled from the block seeds cut above.

    zap_walk: flags byte (bit 0 byte order, bits 1-3 block shift - 9, bit 7 maxblkid 2^40),
    maxblkid byte, then the object's blocks: the first two-block fat ZAP (header + leaf) as
    stored, and with maxblkid 2^40 and its leaf repeated at block 2.
    dnode_block: claimed slot count, flags byte, then dnodes side by side: a block shorter
    than its claim (4 real dnodes of a claimed 32) and a full one.
    """
    files = c.files
    for (t, name), blk0 in sorted(files.items()):
        if t != "zap" or not name.endswith("-blk0") or len(blk0) < 512:
            continue
        blk1 = files.get(("zap", name[:-1] + "1"))
        if blk1 is None or len(blk1) != len(blk0):
            continue
        order = 0 if struct.unpack("<Q", blk0[:8])[0] == (1 << 63) + 1 else 1
        shift = len(blk0).bit_length() - 1
        flags = order | (shift - 9) << 1
        stem = name[: -len("-blk0")]
        # The target zero-pads the last block: trimming it keeps the seeds small.
        c.add("zap_walk", stem, bytes([flags, 1]) + blk0 + trim(blk1))
        c.add("zap_walk", stem + "-repeat", bytes([flags | 0x80, 2]) + blk0 + blk1 + trim(blk1))
        break
    dn = [d for (t, n), d in sorted(files.items()) if t == "dnode" and n.startswith("unclean-mos")]
    if len(dn) >= 8:
        c.add("dnode_block", "unclean-mos-short", bytes([32, 0]) + b"".join(dn[:4]))
        c.add("dnode_block", "unclean-mos-full", bytes([8, 0]) + b"".join(dn[:8]))


def main():
    if not os.access(ZDB, os.X_OK):
        sys.exit(f"{ZDB} missing: run scripts/install-test-deps.sh")
    pools = unpack_pools()
    c = Corpus()
    for p in pools[:2]:
        mos = add_pool(c, p)
        add_datasets(c, p, mos)
    add_zstd(c, pools[2])
    add_synthetic(c)
    add_walk_seeds(c)
    c.write()


if __name__ == "__main__":
    main()
