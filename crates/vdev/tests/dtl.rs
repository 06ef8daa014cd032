//! DTL-aware reads: a child whose DTL holds a block's birth txg is stale for that block.
//! Ordinary reads avoid it (and count nothing against it), thorough reads rewrite it
//! without reading it, and it is still used when nothing else can produce the block.

mod common;

use common::*;
use rzfs_vdev::{Offline, Vdev, VdevKind, VdevState};

const DEV: usize = 5 << 20;

fn leaves(n: usize) -> Vec<Leaf> {
    (0..n).map(|i| leaf(&format!("d{i}"), 10 + i as u64, DEV)).collect()
}

fn tree(kind: VdevKind, ls: &[Leaf]) -> Vdev {
    let kids = ls.iter().enumerate().map(|(i, l)| leaf_spec(l, i as u64)).collect();
    Vdev::new(top_spec(kind, 9, kids)).unwrap()
}

fn leaf_of(vd: &Vdev, i: usize) -> &Vdev {
    vd.find(10 + i as u64).unwrap()
}

#[test]
fn mirror_avoids_and_resilvers_a_stale_child() {
    let ls = leaves(2);
    let vd = tree(VdevKind::Mirror, &ls);
    let data = Rng(3).bytes(8192);
    // The block lands only on d1: d0 was offline while it was written (txg 20).
    leaf_of(&vd, 0).set_offline(Offline::Temporary);
    assert_eq!(vd.state(), VdevState::Degraded);
    vd.write(0x4000, &data).unwrap();
    assert!(leaf_of(&vd, 0).scan_gap(), "an offline leaf marks the scan gap");
    leaf_of(&vd, 0).set_offline(Offline::No);
    leaf_of(&vd, 0).dtl_add(20, 1);
    // d0 holds zeros there, so a read that tried it first would count a checksum error.
    for _ in 0..4 {
        let out = vd.read_born(0x4000, 8192, Some(20), &|b| b == &data[..]).unwrap();
        assert_eq!(out.data, data);
        assert!(out.repairs.is_empty(), "an ordinary read does not resilver");
    }
    assert_eq!(leaf_of(&vd, 0).errors(), (0, 0, 0));
    // Another txg: d0 is not stale and its bad copy counts.
    let out = vd.read_born(0x4000, 8192, Some(21), &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
    // A thorough read of the txg-20 block rewrites d0 without reading (or blaming) it.
    leaf_of(&vd, 0).clear_errors();
    let out = vd.scrub_born(0x4000, 8192, Some(20), &|b| b == &data[..]).unwrap();
    assert_eq!(out.repairs.len(), 1);
    assert_eq!(out.repairs[0].vdev_guid, 10);
    vd.apply_repairs(&out.repairs).unwrap();
    assert_eq!(leaf_of(&vd, 0).errors(), (0, 0, 0));
    assert_eq!(raw(&ls[0], 0x4000, 8192), data);
    // The stale child is the last resort when the fresh one fails.
    ls[1].faulty.set_fail_reads(true);
    let out = vd.read_born(0x4000, 8192, Some(20), &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
}

#[test]
fn raidz_rebuilds_a_stale_column_from_parity() {
    for np in 1..=3u8 {
        let ls = leaves(usize::from(np) + 3);
        let vd = tree(VdevKind::Raidz { nparity: np }, &ls);
        let data = Rng(u64::from(np)).bytes(16 << 10);
        vd.write(0, &data).unwrap();
        // Up to nparity columns went stale (their copies replaced by noise).
        for (i, l) in ls.iter().enumerate().take(usize::from(np)) {
            scribble(l, 0, &Rng(99 + i as u64).bytes(8 << 10));
            leaf_of(&vd, i).dtl_add(30, 5);
        }
        let out = vd.read_born(0, data.len() as u64, Some(32), &|b| b == &data[..]).unwrap();
        assert_eq!(out.data, data);
        assert!(out.repairs.is_empty());
        for i in 0..ls.len() {
            assert_eq!(leaf_of(&vd, i).errors(), (0, 0, 0), "raidz{np}: leaf {i} blamed");
        }
        // A thorough read rewrites exactly the stale columns, none of them blamed.
        let out = vd.scrub_born(0, data.len() as u64, Some(32), &|b| b == &data[..]).unwrap();
        let mut fixed: Vec<u64> = out.repairs.iter().map(|r| r.vdev_guid).collect();
        fixed.sort_unstable();
        fixed.dedup();
        assert_eq!(fixed, (0..u64::from(np)).map(|i| 10 + i).collect::<Vec<_>>(), "raidz{np}");
        vd.apply_repairs(&out.repairs).unwrap();
        // Now the columns are good: a scrub without the DTL finds nothing to do.
        for i in 0..usize::from(np) {
            leaf_of(&vd, i).set_dtl(Default::default());
        }
        let out = vd.scrub(0, data.len() as u64, &|b| b == &data[..]).unwrap();
        assert!(out.repairs.is_empty(), "raidz{np}: {} repairs after resilver", out.repairs.len());
        assert!((0..ls.len()).all(|i| leaf_of(&vd, i).errors() == (0, 0, 0)));
    }
}

#[test]
fn raidz_reads_stale_columns_when_it_must() {
    // raidz1: one column offline, another marked stale though it holds the data (a
    // conservative DTL): the block can only be read with the stale column.
    let ls = leaves(4);
    let vd = tree(VdevKind::Raidz { nparity: 1 }, &ls);
    let data = Rng(7).bytes(12 << 10);
    vd.write(0, &data).unwrap();
    leaf_of(&vd, 0).set_offline(Offline::Temporary);
    leaf_of(&vd, 1).dtl_add(40, 1);
    let out = vd.read_born(0, data.len() as u64, Some(40), &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
}

#[test]
fn outage_says_which_leaves_are_required() {
    let ls = leaves(3);
    let m = tree(VdevKind::Mirror, &ls[..2]);
    assert!(m.outage(0).is_empty());
    assert!(m.outage(10).is_empty(), "either side of a healthy mirror may go");
    leaf_of(&m, 1).dtl_add(50, 3);
    assert!(!m.outage(10).is_empty(), "d0 alone holds txgs 50-52");
    assert!(m.outage(11).is_empty());
    let r = tree(VdevKind::Raidz { nparity: 1 }, &ls);
    leaf_of(&r, 2).set_offline(Offline::Persistent);
    assert!(r.outage(0).is_empty());
    assert!(!r.outage(10).is_empty(), "a second device of a raidz1");
    assert_eq!(r.leaves_with_dtl().len(), 0);
}

#[test]
fn raidz_resilver_fills_a_replacing_column() {
    // raidz1 of 3 whose column 1 is being replaced: the old device is gone, the new one
    // holds nothing yet (its DTL covers every txg). Thorough reads must leave the new
    // device with the column's bytes, whatever the block's size and place.
    let ls: Vec<Leaf> = (0..4).map(|i| leaf(&format!("d{i}"), 10 + i as u64, 24 << 20)).collect();
    let old = missing_spec(500, 0);
    let new = leaf_spec(&ls[3], 1);
    let replacing = rzfs_vdev::VdevSpec {
        kind: VdevKind::Replacing,
        id: 1,
        guid: 600,
        ashift: 0,
        children: vec![old, new],
        device: None,
    };
    let kids = vec![leaf_spec(&ls[0], 0), replacing, leaf_spec(&ls[2], 2)];
    let vd = Vdev::new(top_spec(VdevKind::Raidz { nparity: 1 }, 12, kids)).unwrap();
    let newleaf = vd.find(13).unwrap();
    newleaf.dtl_add(4, 100);
    let mut rng = Rng(5);
    let mut blocks = Vec::new();
    let mut off = 0u64;
    for sectors in [1u64, 2, 3, 4, 5, 8, 17, 32] {
        let data = rng.bytes((sectors << 12) as usize);
        vd.write(off, &data).unwrap();
        blocks.push((off, data));
        off += vd.asize(sectors << 12) + (3 << 12);
    }
    // The new device is blank: it joined after these blocks were written.
    scribble(&ls[3], 0, &vec![0u8; 16 << 20]);
    for (off, data) in &blocks {
        let out = vd.scrub_born(*off, data.len() as u64, Some(50), &|b| b == &data[..]).unwrap();
        assert!(!out.repairs.is_empty(), "block at {off:#x}: nothing to resilver");
        vd.apply_repairs(&out.repairs).unwrap();
    }
    newleaf.set_dtl(Default::default());
    // Without column 0, every block must come from columns 1 (the new device) and 2.
    vd.find(10).unwrap().set_offline(Offline::Temporary);
    for (off, data) in &blocks {
        let out = vd.read(*off, data.len() as u64, &|b| b == &data[..]);
        assert!(out.is_ok(), "block at {off:#x} of {} bytes unreadable without column 0", data.len());
    }
}
