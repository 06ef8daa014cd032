//! RAID-Z: writes are the exact inverse of reads, and reads survive any ≤ nparity destroyed
//! columns (random bytes, vanished device, faulted device), counting on the right leaves and
//! producing repairs that restore the on-disk bytes.

mod common;

use common::*;
use rzfs_vdev::{RaidzMap, Vdev, VdevKind, VdevState};

const DEV: usize = (4 << 20) + (2 << 20);
const ASHIFT: u8 = 9;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Damage {
    Scribble,
    Vanish,
    Fault,
}

fn raidz(nparity: u8, width: usize) -> (Vec<Leaf>, Vdev) {
    let ls: Vec<Leaf> = (0..width).map(|i| leaf(&format!("d{i}"), 10 + i as u64, DEV)).collect();
    let kids = ls.iter().enumerate().map(|(i, l)| leaf_spec(l, i as u64)).collect();
    let vd = Vdev::new(top_spec(VdevKind::Raidz { nparity }, ASHIFT, kids)).unwrap();
    (ls, vd)
}

/// Every subset of `0..n` of size 1..=k.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    fn rec(start: usize, n: usize, k: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if !cur.is_empty() {
            out.push(cur.clone());
        }
        if cur.len() == k {
            return;
        }
        for c in start..n {
            cur.push(c);
            rec(c + 1, n, k, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    rec(0, n, k, &mut Vec::new(), &mut out);
    out
}

/// (child, offset, size) of every column and padding sector of a block.
fn footprint(map: &RaidzMap) -> Vec<(usize, u64, u64)> {
    let mut v: Vec<(usize, u64, u64)> =
        map.cols[..map.acols].iter().map(|c| (c.devidx, c.offset, c.size)).collect();
    v.extend(map.skip_sectors().into_iter().map(|(d, o)| (d, o, 1 << ASHIFT)));
    v
}

#[test]
fn write_then_read_is_identity() {
    let mut rng = Rng(42);
    for nparity in 1..=3u8 {
        for width in (nparity as usize + 1).max(3)..=8 {
            let (ls, vd) = raidz(nparity, width);
            let mut off = 0u64;
            for sectors in [1u64, 2, 3, 5, 7, 8, 13, 16, 31, 64, 129] {
                let psize = sectors << ASHIFT;
                let data = rng.bytes(psize as usize);
                vd.write(off, &data).unwrap();
                let out = vd.read(off, psize, &|b| b == &data[..]).unwrap();
                assert_eq!(out.data, data);
                assert!(out.repairs.is_empty());
                // Padding sectors were written as zeros; columns hold exactly the data.
                let map = RaidzMap::new(off, psize, ASHIFT, width, nparity as usize).unwrap();
                for (d, o) in map.skip_sectors() {
                    assert_eq!(raw(&ls[d], o, 512), vec![0; 512]);
                }
                let mut pos = 0usize;
                for c in &map.cols[nparity as usize..map.acols] {
                    assert_eq!(
                        raw(&ls[c.devidx], c.offset, c.size as usize),
                        &data[pos..pos + c.size as usize]
                    );
                    pos += c.size as usize;
                }
                off += vd.asize(psize) + (rng.below(3) << ASHIFT);
                // Cross the 1 MiB boundary to exercise the single-parity column swap.
                if off > 0x10_0000 - 0x2_0000 && off < 0x10_0000 {
                    off = 0x10_0000 + (rng.below(8) << ASHIFT);
                }
            }
            assert!(vd.stats().iter().all(|s| s.read_errors + s.write_errors + s.cksum_errors == 0));
        }
    }
}

#[test]
fn reconstruct_any_destroyed_columns() {
    let mut rng = Rng(7);
    for nparity in 1..=3u8 {
        for width in (nparity as usize + 1).max(3)..=8 {
            let (ls, vd) = raidz(nparity, width);
            let np = nparity as usize;
            for (i, bad) in subsets(width, np).into_iter().enumerate() {
                let sectors = 1 + rng.below(3 * width as u64);
                let psize = sectors << ASHIFT;
                // Alternate between even and odd megabytes (the raidz1 swap rule).
                let off = ((rng.below(64) + if i % 2 == 1 { 2048 } else { 0 }) << ASHIFT) % (3 << 20);
                let data = rng.bytes(psize as usize);
                vd.write(off, &data).unwrap();
                let map = RaidzMap::new(off, psize, ASHIFT, width, np).unwrap();
                let fp = footprint(&map);
                let pristine: Vec<Vec<u8>> = fp.iter().map(|&(d, o, s)| raw(&ls[d], o, s as usize)).collect();
                check_damage(&ls, &vd, &map, &bad, &data, off, &mut rng);
                for (&(d, o, _), bytes) in fp.iter().zip(&pristine) {
                    assert_eq!(
                        &raw(&ls[d], o, bytes.len()),
                        bytes,
                        "np {np} w {width} bad {bad:?} child {d}"
                    );
                }
            }
        }
    }
}

fn check_damage(ls: &[Leaf], vd: &Vdev, map: &RaidzMap, bad: &[usize], data: &[u8], off: u64, rng: &mut Rng) {
    let np = map.nparity;
    vd.clear_errors();
    let damage: Vec<Damage> = bad
        .iter()
        .map(|_| [Damage::Scribble, Damage::Vanish, Damage::Fault][rng.below(3) as usize])
        .collect();
    let col_of = |d: usize| map.cols[..map.acols].iter().position(|c| c.devidx == d);
    for (&d, &how) in bad.iter().zip(&damage) {
        match how {
            Damage::Scribble => {
                if let Some(c) = col_of(d) {
                    let col = map.cols[c];
                    let junk = rng.bytes(col.size as usize);
                    scribble(&ls[d], col.offset, &junk);
                }
            }
            Damage::Vanish => ls[d].faulty.set_vanished(true),
            Damage::Fault => vd.children()[d].set_faulted(true),
        }
    }
    let ctx =
        format!("np {np} width {} bad {bad:?} damage {damage:?} off {off:#x} len {}", ls.len(), data.len());
    let out = vd.read(off, data.len() as u64, &|b| b == data).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(out.data, data, "{ctx}");

    // Parity is read only when some data column failed.
    let data_hit = bad.iter().any(|&d| col_of(d).is_some_and(|c| c >= np));
    for (d, child) in vd.children().iter().enumerate() {
        let (r, w, ck) = child.errors();
        assert_eq!(w, 0);
        let pos = bad.iter().position(|&b| b == d);
        let read_tried = col_of(d).is_some_and(|c| c >= np || data_hit);
        let exp_read = u64::from(pos.is_some_and(|p| damage[p] == Damage::Vanish) && read_tried);
        let exp_ck = u64::from(pos.is_some_and(|p| damage[p] == Damage::Scribble) && read_tried);
        assert_eq!((r, ck), (exp_read, exp_ck), "{ctx} child {d}");
    }
    assert_eq!(vd.errors(), (0, 0, 0), "{ctx}");
    let want_state = if damage.contains(&Damage::Fault) { VdevState::Degraded } else { VdevState::Online };
    assert_eq!(vd.state(), want_state, "{ctx}");

    for (&d, &how) in bad.iter().zip(&damage) {
        match how {
            Damage::Vanish => ls[d].faulty.set_vanished(false),
            Damage::Fault => vd.children()[d].set_faulted(false),
            Damage::Scribble => {}
        }
    }
    vd.apply_repairs(&out.repairs).unwrap();
    // Faulted columns were not read, and parity is not read when the data verifies, so neither
    // is repaired by a plain read: rewrite the block as a resilver or scrub would.
    if damage.contains(&Damage::Fault) || !data_hit {
        vd.write(off, data).unwrap();
    }
}

#[test]
fn too_many_failures_fail_cleanly() {
    let (ls, vd) = raidz(2, 5);
    let data = Rng(9).bytes(4096);
    vd.write(0, &data).unwrap();
    for l in &ls[..3] {
        l.faulty.set_vanished(true);
    }
    assert!(vd.read(0, 4096, &|b| b == &data[..]).is_err());
    assert_eq!(vd.state(), VdevState::Online); // vanished devices still look present
    for l in &ls[..3] {
        l.faulty.set_vanished(false);
    }
    // Three silently corrupt columns: no reconstruction verifies.
    let map = RaidzMap::new(0, 4096, ASHIFT, 5, 2).unwrap();
    for c in &map.cols[2..5] {
        scribble(&ls[c.devidx], c.offset, &[0x55; 16]);
    }
    assert!(vd.read(0, 4096, &|b| b == &data[..]).is_err());
    assert_eq!(vd.errors().2, 1);
}

#[test]
fn bad_parity_found_when_data_is_reconstructed() {
    // raidz2: one data column vanished, P scribbled: Q rebuilds the data, P is then found
    // wrong against the verified data and repaired.
    let (ls, vd) = raidz(2, 6);
    let data = Rng(10).bytes(8 << 9);
    vd.write(0, &data).unwrap();
    let map = RaidzMap::new(0, 8 << 9, ASHIFT, 6, 2).unwrap();
    let p = map.cols[0];
    let d0 = map.cols[2];
    scribble(&ls[p.devidx], p.offset, &[9; 8]);
    ls[d0.devidx].faulty.set_vanished(true);
    let out = vd.read(0, 8 << 9, &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
    assert_eq!(vd.children()[p.devidx].errors(), (0, 0, 1));
    assert_eq!(vd.children()[d0.devidx].errors(), (1, 0, 0));
    let mut guids: Vec<u64> = out.repairs.iter().map(|r| r.vdev_guid).collect();
    guids.sort_unstable();
    let mut want = vec![10 + p.devidx as u64, 10 + d0.devidx as u64];
    want.sort_unstable();
    assert_eq!(guids, want);
}

/// Damage an ordinary read never sees — a parity column, the second side of a mirror — is
/// found by a scrub read, charged to the right leaf, and repaired to the exact bytes.
#[test]
fn scrub_reads_check_parity_and_every_side() {
    let mut rng = Rng(7);
    for nparity in 1..=3u8 {
        for width in (nparity as usize + 1).max(3)..=7 {
            let (ls, vd) = raidz(nparity, width);
            let psize = 9u64 << ASHIFT;
            let data = rng.bytes(psize as usize);
            vd.write(0, &data).unwrap();
            let map = RaidzMap::new(0, psize, ASHIFT, width, nparity as usize).unwrap();
            let p = map.cols[(rng.below(u64::from(nparity))) as usize];
            let before = raw(&ls[p.devidx], p.offset, p.size as usize);
            scribble(&ls[p.devidx], p.offset, &rng.bytes(p.size as usize));
            let plain = vd.read(0, psize, &|b| b == &data[..]).unwrap();
            assert!(plain.repairs.is_empty(), "an ordinary read reads no parity");
            let out = vd.scrub(0, psize, &|b| b == &data[..]).unwrap();
            assert_eq!(out.data, data);
            assert_eq!(out.repairs.len(), 1, "raidz{nparity}-{width}: {:?}", out.repairs);
            vd.apply_repairs(&out.repairs).unwrap();
            assert_eq!(raw(&ls[p.devidx], p.offset, p.size as usize), before);
            let cksums: Vec<u64> = vd.children().iter().map(|c| c.errors().2).collect();
            for (i, c) in cksums.iter().enumerate() {
                assert_eq!(*c, u64::from(i == p.devidx), "raidz{nparity}-{width}: {cksums:?}");
            }
            assert!(vd.scrub(0, psize, &|b| b == &data[..]).unwrap().repairs.is_empty());
        }
    }
    // A mirror: the first side verifies, so only a scrub reads the second.
    let ls: Vec<Leaf> = (0..2).map(|i| leaf(&format!("m{i}"), 50 + i as u64, DEV)).collect();
    let kids = ls.iter().enumerate().map(|(i, l)| leaf_spec(l, i as u64)).collect();
    let vd = Vdev::new(top_spec(VdevKind::Mirror, ASHIFT, kids)).unwrap();
    let data = rng.bytes(4096);
    vd.write(8192, &data).unwrap();
    scribble(&ls[1], 8192, &rng.bytes(512));
    assert!(vd.read(8192, 4096, &|b| b == &data[..]).unwrap().repairs.is_empty());
    let out = vd.scrub(8192, 4096, &|b| b == &data[..]).unwrap();
    assert_eq!(out.repairs.len(), 1);
    assert_eq!(out.repairs[0].vdev_guid, 51);
    vd.apply_repairs(&out.repairs).unwrap();
    assert_eq!(raw(&ls[1], 8192, 4096), data);
}
