#!/usr/bin/env python3
"""Damage a *copy* of an oracle fixture, to test rzfs's redundancy paths.

Library:
    copy_fixture(src_dir, dst_dir) -> dst_dir        sparse-aware copy
    scramble_vdev(path, seed=None, offset=0, length=None)
        overwrite [offset, offset+length) (default: the whole file) with
        random bytes; the file keeps its size
    delete_vdev(path)
    zero_labels(path, which=(0, 1, 2, 3))
        zero the 256 KiB vdev labels (L0/L1 at the front, L2/L3 at the end)

CLI:
    damage.py copy SRC DST
    damage.py scramble VDEV [--seed N] [--offset B] [--length B]
    damage.py delete VDEV
    damage.py zero-labels VDEV [--labels 0,1,2,3]

The tools refuse to touch anything whose path contains no "damaged"
component unless --force is given, so pristine fixtures stay pristine.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys

LABEL_SIZE = 256 * 1024          # vdev_label_t, see OpenZFS vdev_impl.h
CHUNK = 1 << 20


def _guard(path: str, force: bool) -> None:
    if not force and "damaged" not in os.path.abspath(path):
        raise PermissionError(
            f"{path}: refusing to damage a path without 'damaged' in it "
            "(copy the fixture first, or pass force=True)")


def copy_fixture(src: str, dst: str) -> str:
    """Copy a fixture directory, keeping holes in sparse vdev files."""
    os.makedirs(dst, exist_ok=True)
    zero = bytes(CHUNK)
    for name in sorted(os.listdir(src)):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(s):
            copy_fixture(s, d)
            continue
        if not os.path.isfile(s):
            continue
        with open(s, "rb") as fi, open(d, "wb") as fo:
            while True:
                b = fi.read(CHUNK)
                if not b:
                    break
                if b == zero[: len(b)]:
                    fo.seek(len(b), os.SEEK_CUR)
                else:
                    fo.write(b)
            fo.truncate(os.path.getsize(s))
        shutil.copystat(s, d)
    return dst


def scramble_vdev(path: str, seed: int | None = None, offset: int = 0,
                  length: int | None = None, force: bool = False) -> int:
    """Overwrite a byte range (default: all) with random bytes; returns the
    number of bytes written.  The file size never changes."""
    _guard(path, force)
    size = os.path.getsize(path)
    end = size if length is None else min(size, offset + length)
    rng = random.Random(seed)
    done = 0
    with open(path, "r+b") as fh:
        fh.seek(offset)
        pos = offset
        while pos < end:
            n = min(CHUNK, end - pos)
            fh.write(rng.randbytes(n))
            pos += n
            done += n
    return done


def delete_vdev(path: str, force: bool = False) -> None:
    _guard(path, force)
    os.unlink(path)


def zero_labels(path: str, which=(0, 1, 2, 3), force: bool = False) -> None:
    """Zero chosen vdev labels.  L2/L3 sit at the end of the device, aligned
    down to a label boundary (see OpenZFS vdev_label_offset)."""
    _guard(path, force)
    size = os.path.getsize(path)
    aligned = size - size % LABEL_SIZE
    offs = {0: 0, 1: LABEL_SIZE, 2: aligned - 2 * LABEL_SIZE,
            3: aligned - LABEL_SIZE}
    with open(path, "r+b") as fh:
        for i in which:
            if 0 <= offs[i] <= size - LABEL_SIZE:
                fh.seek(offs[i])
                fh.write(bytes(LABEL_SIZE))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true",
                    help="allow paths without 'damaged' in them")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("copy")
    c.add_argument("src")
    c.add_argument("dst")
    s = sub.add_parser("scramble")
    s.add_argument("vdev")
    s.add_argument("--seed", type=int)
    s.add_argument("--offset", type=int, default=0)
    s.add_argument("--length", type=int)
    d = sub.add_parser("delete")
    d.add_argument("vdev")
    z = sub.add_parser("zero-labels")
    z.add_argument("vdev")
    z.add_argument("--labels", default="0,1,2,3")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "copy":
            print(copy_fixture(a.src, a.dst))
        elif a.cmd == "scramble":
            n = scramble_vdev(a.vdev, a.seed, a.offset, a.length, a.force)
            print(f"scrambled {n} bytes of {a.vdev}")
        elif a.cmd == "delete":
            delete_vdev(a.vdev, a.force)
            print(f"deleted {a.vdev}")
        else:
            which = tuple(int(x) for x in a.labels.split(",") if x != "")
            zero_labels(a.vdev, which, a.force)
            print(f"zeroed labels {which} of {a.vdev}")
    except (OSError, ValueError) as e:
        print(f"damage.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
