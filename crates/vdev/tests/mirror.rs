//! Mirror-like vdevs: bad, failing and missing children.

mod common;

use common::*;
use rzfs_vdev::{Vdev, VdevError, VdevKind, VdevSpec, VdevState};

const DEV: usize = 5 << 20;

fn mirror(leaves: &[Leaf]) -> Vdev {
    let kids = leaves.iter().enumerate().map(|(i, l)| leaf_spec(l, i as u64)).collect();
    Vdev::new(top_spec(VdevKind::Mirror, 12, kids)).unwrap()
}

fn leaves(n: usize) -> Vec<Leaf> {
    (0..n).map(|i| leaf(&format!("d{i}"), 10 + i as u64, DEV)).collect()
}

#[test]
fn bad_copy_is_skipped_counted_and_repaired() {
    let ls = leaves(3);
    let vd = mirror(&ls);
    let data = Rng(1).bytes(6000); // not sector aligned: padded to 8 KiB on write
    vd.write(0x3000, &data).unwrap();
    assert_eq!(vd.asize(6000), 8192);
    scribble(&ls[0], 0x3000 + 100, &[0xee; 50]);
    ls[1].faulty.set_fail_reads(true);
    let out = vd.read(0x3000, 6000, &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
    assert_eq!(vd.children()[0].errors(), (0, 0, 1));
    assert_eq!(vd.children()[1].errors(), (1, 0, 0));
    assert_eq!(vd.children()[2].errors(), (0, 0, 0));
    let guids: Vec<u64> = out.repairs.iter().map(|r| r.vdev_guid).collect();
    assert_eq!(guids, vec![10, 11]);
    ls[1].faulty.set_fail_reads(false);
    vd.apply_repairs(&out.repairs).unwrap();
    let mut padded = data.clone();
    padded.resize(8192, 0);
    assert_eq!(raw(&ls[0], 0x3000, 8192), padded);
    assert_eq!(raw(&ls[1], 0x3000, 8192), padded);
}

#[test]
fn missing_child_is_skipped_without_counts() {
    let ls = leaves(2);
    let kids = vec![missing_spec(99, 0), leaf_spec(&ls[0], 1), leaf_spec(&ls[1], 2)];
    let vd = Vdev::new(top_spec(VdevKind::Mirror, 9, kids)).unwrap();
    assert_eq!(vd.state(), VdevState::Degraded);
    let data = Rng(2).bytes(4096);
    vd.write(0, &data).unwrap();
    let out = vd.read(0, 4096, &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
    assert!(out.repairs.is_empty());
    let stats = vd.stats();
    assert_eq!(stats[0].name, "mirror-0");
    assert_eq!(stats[1].name, "99");
    assert_eq!(stats[1].state, VdevState::Unavail);
    assert!(stats.iter().all(|s| s.read_errors + s.cksum_errors == 0));
}

#[test]
fn all_copies_bad_is_a_checksum_error() {
    let ls = leaves(2);
    let vd = mirror(&ls);
    let data = Rng(3).bytes(4096);
    vd.write(0, &data).unwrap();
    let err = vd.read(0, 4096, &|_| false).unwrap_err();
    assert!(matches!(err, VdevError::Checksum { .. }), "{err}");
    assert_eq!(vd.errors().2, 1);
    assert_eq!(vd.children()[0].errors().2, 1);
    assert_eq!(vd.children()[1].errors().2, 1);
    vd.clear_errors();
    assert_eq!(vd.children()[1].errors(), (0, 0, 0));
}

#[test]
fn faulted_and_unavailable_states() {
    let ls = leaves(2);
    let vd = mirror(&ls);
    assert_eq!(vd.state(), VdevState::Online);
    vd.children()[0].set_faulted(true);
    assert_eq!(vd.state(), VdevState::Degraded);
    assert_eq!(vd.children()[0].state().to_string(), "FAULTED");
    let data = Rng(4).bytes(4096);
    vd.write(0, &data).unwrap();
    // The faulted child got no write.
    assert_eq!(raw(&ls[0], 0, 16), vec![0; 16]);
    vd.children()[1].set_faulted(true);
    assert_eq!(vd.state(), VdevState::Unavail);
    assert!(vd.read(0, 4096, &|_| true).is_err());
}

#[test]
fn replacing_under_mirror_and_nested_repairs() {
    let ls = leaves(3);
    let replacing = VdevSpec {
        kind: VdevKind::Replacing,
        id: 1,
        guid: 500,
        ashift: 0,
        children: vec![leaf_spec(&ls[1], 0), leaf_spec(&ls[2], 1)],
        device: None,
    };
    let vd = Vdev::new(top_spec(VdevKind::Mirror, 9, vec![leaf_spec(&ls[0], 0), replacing])).unwrap();
    let data = Rng(5).bytes(1024);
    vd.write(512, &data).unwrap();
    scribble(&ls[0], 512, &[1; 8]);
    scribble(&ls[1], 512, &[1; 8]);
    let out = vd.read(512, 1024, &|b| b == &data[..]).unwrap();
    assert_eq!(out.data, data);
    let guids: Vec<u64> = out.repairs.iter().map(|r| r.vdev_guid).collect();
    assert_eq!(guids, vec![11, 10]);
    let names: Vec<String> = vd.stats().iter().map(|s| s.name.clone()).collect();
    assert_eq!(names, vec!["mirror-0", "d0", "replacing-1", "d1", "d2"]);
}

#[test]
fn leaf_top_level_and_bad_configs() {
    let ls = leaves(1);
    let mut spec = leaf_spec(&ls[0], 0);
    spec.ashift = 9;
    let vd = Vdev::new(spec).unwrap();
    let data = Rng(6).bytes(700);
    vd.write(0x10000, &data).unwrap();
    assert_eq!(vd.read(0x10000, 700, &|b| b == &data[..]).unwrap().data, data);
    scribble(&ls[0], 0x10000, &[0; 4]);
    assert!(vd.read(0x10000, 700, &|b| b == &data[..]).is_err());
    assert_eq!(vd.errors().2, 1);
    assert!(vd.read(u64::MAX - 10, 512, &|_| true).is_err());
    assert!(vd.read(0, 0, &|_| true).is_err());

    assert!(Vdev::new(top_spec(VdevKind::Mirror, 9, vec![])).is_err());
    let kids = vec![leaf_spec(&ls[0], 0)];
    assert!(Vdev::new(top_spec(VdevKind::Raidz { nparity: 1 }, 9, kids.clone())).is_err());
    assert!(Vdev::new(top_spec(VdevKind::Raidz { nparity: 4 }, 9, kids.clone())).is_err());
    assert!(Vdev::new(top_spec(VdevKind::Mirror, 30, kids)).is_err());
    let draid = VdevKind::Draid { nparity: 1, ndata: 2, nspares: 0, children: 3 };
    let kids = (0..3).map(|i| missing_spec(i, i)).collect();
    let d = Vdev::new(top_spec(draid, 12, kids)).unwrap();
    assert!(matches!(d.read(0, 512, &|_| true), Err(VdevError::Unsupported(_))));
}

/// Every error a vdev counts is kept for the pool's error reports (`ereport.fs.zfs.*`),
/// with the vdev and its parent, bounded per vdev between two takes.
#[test]
fn errors_are_kept_for_error_reports() {
    use rzfs_vdev::{ErrorKind, ERROR_RECORDS_MAX};
    let ls: Vec<Leaf> = (0..2).map(|i| leaf(&format!("r{i}"), 30 + i, DEV)).collect();
    let kids = ls.iter().enumerate().map(|(i, l)| leaf_spec(l, i as u64)).collect();
    let vd = Vdev::new(top_spec(VdevKind::Mirror, 9, kids)).unwrap();
    let data = Rng(5).bytes(4096);
    vd.write(0x2000, &data).unwrap();
    scribble(&ls[0], 0x2000, &[0xee; 512]);
    let out = vd.scrub(0x2000, 4096, &|b| b == &data[..]).unwrap();
    assert_eq!(out.repairs.len(), 1);
    let r = vd.take_error_reports(77);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (r[0].vdev_guid, r[0].vdev_type, r[0].parent_guid, r[0].parent_type),
        (30, "file", 1000, "mirror")
    );
    assert_eq!(
        (r[0].record.kind, r[0].record.offset, r[0].record.size),
        (ErrorKind::Checksum, Some(0x2000), 4096)
    );
    assert_eq!(r[0].counts, (0, 0, 1));
    assert!(vd.take_error_reports(77).is_empty(), "taken once");
    // A flood of damaged blocks is counted in full but kept bounded.
    let n = ERROR_RECORDS_MAX as u64 + 5;
    for i in 0..n {
        vd.write(0x10000 + i * 4096, &data).unwrap();
        scribble(&ls[0], 0x10000 + i * 4096, &[0xee; 512]);
        vd.scrub(0x10000 + i * 4096, 4096, &|b| b == &data[..]).unwrap();
    }
    let r = vd.take_error_reports(77);
    assert_eq!(r.len(), ERROR_RECORDS_MAX);
    assert!(r.iter().all(|x| x.vdev_guid == 30 && x.record.kind == ErrorKind::Checksum));
    assert_eq!(r[0].record.offset, Some(0x10000));
    assert_eq!(vd.find(30).unwrap().errors(), (0, 0, 1 + n));
    // A failed write of r1: an I/O record (and the leaf is faulted: no more writes to it).
    ls[1].faulty.set_fail_writes(true);
    vd.write(0x8000, &data).unwrap();
    let r = vd.take_error_reports(77);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].vdev_guid, r[0].record.kind, r[0].record.offset), (31, ErrorKind::Write, Some(0x8000)));
}

#[test]
fn mirror_of_raidz_allocates_what_a_raidz_side_needs() {
    // ztest builds top-level mirrors whose sides are RAID-Z vdevs: a block's allocation (and
    // so the space a DVA of it claims, e.g. a gang header) is the RAID-Z size, parity and
    // padding included, not the mirror's plain sector rounding (OpenZFS vdev_default_asize).
    let ls = leaves(8);
    let side = |n: usize| {
        let kids = (0..4).map(|i| leaf_spec(&ls[n * 4 + i], i as u64)).collect();
        rzfs_vdev::VdevSpec {
            kind: VdevKind::Raidz { nparity: 1 },
            id: n as u64,
            guid: 500 + n as u64,
            ashift: 0,
            children: kids,
            device: None,
        }
    };
    let vd = Vdev::new(top_spec(VdevKind::Mirror, 9, vec![side(0), side(1)])).unwrap();
    // One sector of data: one parity sector, then padding to a multiple of nparity+1 sectors.
    assert_eq!(vd.asize(512), 1024);
    assert_eq!(vd.asize(1024), 2048);
    assert_eq!(vd.asize(1536), 2048);
    // A plain mirror still rounds up to its sector size.
    let plain = mirror(&leaves(2));
    assert_eq!(plain.asize(512), 4096);
}
