//! Unit tests of the allocator rules; the model-based property test is in `model_tests.rs`.

use ondisk::spacemap::{SmEntry, SmType, SM_RUN_MAX};

use crate::*;

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;

fn one_vdev(usable: u64, ms_shift: u32) -> Allocator {
    let mut a = Allocator::new();
    a.add_top(0, usable, 9, ms_shift).unwrap();
    a
}

fn range(kind: SmType, offset: u64, run: u64) -> SmEntry {
    SmEntry::OneWord { kind, offset, run }
}

#[test]
fn metaslab_shift_matches_vdev_metaslab_set_size() {
    // < 8 GB: about 16 metaslabs, but never below 2^24 bytes.
    assert_eq!(metaslab_shift(100 * M), 24);
    assert_eq!(metaslab_shift(1 << 30), 27);
    // 8 - 100 GB: 512 MB each.
    assert_eq!(metaslab_shift(50 << 30), 29);
    // 100 GB - 3 TB: about 200.
    assert_eq!(metaslab_shift(1 << 40), 33);
    // Large: 16 GB each, until more than 2^17 of them.
    assert_eq!(metaslab_shift(1 << 50), 34);
    assert_eq!(metaslab_shift(10 << 50), 37);
}

#[test]
fn add_top_validates_and_counts() {
    let mut a = Allocator::new();
    a.add_top(0, (5 << 24) + 12345, 12, 24).unwrap();
    assert_eq!(a.metaslab_count(0).unwrap(), 5);
    assert_eq!(a.space().size, 5 << 24);
    assert!(a.add_top(0, 1 << 30, 12, 24).is_err());
    assert!(a.add_top(1, 1 << 20, 12, 24).is_err(), "smaller than one metaslab");
    assert!(a.add_top(1, 1 << 30, 8, 24).is_err(), "ashift too small");
    assert!(a.add_top(1, 1 << 30, 12, 11).is_err(), "metaslab smaller than a sector");
    assert!(a.metaslab_count(9).is_err());
    assert!(a.ms_alloc(0, 5).is_err());
}

#[test]
fn grow_top_appends_free_metaslabs() {
    let mut a = one_vdev(2 << 24, 24);
    let (v, off) = a.alloc(128 * K, 5, 1).unwrap()[0];
    assert_eq!(a.grow_top(0, (2 << 24) + 12345).unwrap(), 0, "no further whole metaslab");
    assert_eq!(a.grow_top(0, (5 << 24) + 12345).unwrap(), 3);
    assert_eq!(a.metaslab_count(0).unwrap(), 5);
    assert_eq!(a.space().size, 5 << 24);
    assert_eq!(a.space().alloc, 128 * K, "what was allocated stays allocated");
    assert!(a.is_allocated(v, off, 128 * K).unwrap());
    assert!(a.is_free(0, 4 << 24, 1 << 24).unwrap());
    assert!(a.grow_top(7, 1 << 30).is_err());
    // The new space is used once the old metaslabs fill.
    let mut far = 0;
    for _ in 0..(4 * 8 * 16) {
        far = far.max(a.alloc(128 * K, 6, 1).unwrap()[0].1);
    }
    assert!(far >= 2 << 24, "allocations reached the new metaslabs ({far:#x})");
}

#[test]
fn active_metaslab_is_filled_sequentially() {
    let mut a = one_vdev(4 << 24, 24);
    let mut prev = None;
    for _ in 0..64 {
        let (v, off) = a.alloc(128 * K, 5, 1).unwrap()[0];
        assert_eq!(v, 0);
        if let Some(p) = prev {
            assert_eq!(off, p + 128 * K, "cursor-based first fit packs allocations");
        }
        prev = Some(off);
    }
    assert_eq!(a.ms_alloc(0, 0).unwrap(), 64 * 128 * K);
}

#[test]
fn full_active_metaslab_switches_to_most_free() {
    let mut a = one_vdev(4 << 16, 16);
    // Space maps say: ms 1 is half full, ms 2 is a quarter full, ms 3 is 3/4 full.
    let units = (1u64 << 16) >> 9;
    a.load_metaslab(0, 1, &[range(SmType::Alloc, 0, units / 2)]).unwrap();
    a.load_metaslab(0, 2, &[range(SmType::Alloc, 0, units / 4)]).unwrap();
    a.load_metaslab(0, 3, &[range(SmType::Alloc, 0, 3 * units / 4)]).unwrap();
    // ms 0 is empty: it is chosen first and used until full.
    for i in 0..16 {
        assert_eq!(a.alloc(4 * K, 3, 1).unwrap()[0], (0, i * 4 * K));
    }
    // Then the metaslab with the most free space: ms 2.
    let (_, off) = a.alloc(4 * K, 3, 1).unwrap()[0];
    assert_eq!(off >> 16, 2);
    assert_eq!(off, (2 << 16) + 16 * K);
}

#[test]
fn frees_are_deferred_for_txg_defer_size_txgs() {
    let mut a = one_vdev(4 << 24, 24);
    let (v, off) = a.alloc(64 * K, 5, 1).unwrap()[0];
    assert_eq!(a.take_changes(5).unwrap().len(), 1);
    a.sync_done(5).unwrap();
    a.free(v, off, 64 * K, 5, 10).unwrap();
    assert!(!a.is_allocated(v, off, 64 * K).unwrap());
    assert!(!a.is_free(v, off, 64 * K).unwrap());
    assert_eq!(a.space().deferred, 64 * K);
    let d = a.take_changes(10).unwrap();
    assert_eq!(d, vec![MetaslabDelta { vdev: 0, ms: 0, allocs: vec![], frees: vec![(off, 64 * K)] }]);
    a.sync_done(10).unwrap();
    assert!(!a.is_free(v, off, 64 * K).unwrap(), "not after its own txg");
    a.sync_done(11).unwrap();
    assert!(!a.is_free(v, off, 64 * K).unwrap(), "not after txg + 1");
    a.sync_done(12).unwrap();
    assert!(a.is_free(v, off, 64 * K).unwrap(), "after txg + TXG_DEFER_SIZE synced");
    assert_eq!(a.space().deferred, 0);
    assert_eq!(a.space().free, 4 << 24);
}

#[test]
fn deferred_space_is_not_reallocated() {
    let mut a = one_vdev(1 << 16, 16);
    let blocks: Vec<_> = (0..16).map(|_| a.alloc(4 * K, 1, 1).unwrap()[0]).collect();
    a.take_changes(1).unwrap();
    a.sync_done(1).unwrap();
    for &(v, off) in &blocks {
        a.free(v, off, 4 * K, 1, 2).unwrap();
    }
    a.take_changes(2).unwrap();
    a.sync_done(2).unwrap();
    assert!(matches!(a.alloc(4 * K, 3, 1), Err(Error::NoSpace { .. })));
    a.take_changes(3).unwrap();
    a.sync_done(3).unwrap();
    assert!(matches!(a.alloc(4 * K, 4, 1), Err(Error::NoSpace { .. })));
    a.take_changes(4).unwrap();
    a.sync_done(4).unwrap();
    assert_eq!(a.alloc(4 * K, 5, 1).unwrap().len(), 1);
}

#[test]
fn same_txg_free_before_take_is_unalloc() {
    let mut a = one_vdev(4 << 24, 24);
    let (v, off) = a.alloc(64 * K, 7, 1).unwrap()[0];
    let keep = a.alloc(64 * K, 7, 1).unwrap()[0];
    a.free(v, off, 64 * K, 7, 7).unwrap();
    assert!(a.is_free(v, off, 64 * K).unwrap(), "free again at once");
    assert_eq!(a.space().deferred, 0);
    let d = a.take_changes(7).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].allocs, vec![(keep.1, 64 * K)]);
    assert!(d[0].frees.is_empty(), "never reaches the space map");
    // A second unalloc of the same range is a double free.
    assert!(a.free(v, off, 64 * K, 7, 7).is_err());
}

#[test]
fn same_txg_free_after_take_is_a_deferred_free() {
    let mut a = one_vdev(4 << 24, 24);
    let (v, off) = a.alloc(64 * K, 7, 1).unwrap()[0];
    let d = a.take_changes(7).unwrap();
    assert_eq!(d[0].allocs, vec![(off, 64 * K)]);
    // Sync pass 2 frees it: the ALLOC is already in the map, so a FREE must follow.
    a.free(v, off, 64 * K, 7, 7).unwrap();
    assert!(!a.is_free(v, off, 64 * K).unwrap());
    let d = a.take_changes(7).unwrap();
    assert_eq!(d[0].frees, vec![(off, 64 * K)]);
    a.sync_done(7).unwrap();
    a.sync_done(8).unwrap();
    assert!(!a.is_free(v, off, 64 * K).unwrap());
    a.sync_done(9).unwrap();
    assert!(a.is_free(v, off, 64 * K).unwrap());
}

#[test]
fn bad_frees_are_rejected_without_effect() {
    let mut a = one_vdev(4 << 16, 16);
    let (v, off) = a.alloc(8 * K, 3, 1).unwrap()[0];
    let before = a.space();
    assert!(a.free(v, off + 8 * K, 8 * K, 2, 3).is_err(), "free space");
    assert!(a.free(v, off + 4 * K, 8 * K, 2, 3).is_err(), "partly free");
    assert!(a.free(v, off + 1, 8 * K, 2, 3).is_err(), "misaligned");
    assert!(a.free(v, off, 0, 2, 3).is_err(), "empty");
    assert!(a.free(v, (1 << 16) - 4 * K, 8 * K, 2, 3).is_err(), "crosses metaslabs");
    assert!(a.free(v, 4 << 16, 8 * K, 2, 3).is_err(), "beyond the vdev");
    assert!(a.free(v, u64::MAX - 511, 512, 2, 3).is_err(), "overflow");
    assert!(a.free(5, off, 8 * K, 2, 3).is_err(), "unknown vdev");
    assert!(a.free(v, off, 8 * K, 4, 3).is_err(), "born in the future");
    assert_eq!(a.space(), before);
    assert!(a.free(v, off, 8 * K, 2, 3).is_err(), "allocated in this txg, but birth says earlier");
    assert_eq!(a.space(), before);
    assert!(a.free(v, off, 4 * K, 3, 3).is_ok(), "part of a block may be unallocated");
    assert!(a.free(v, off, 4 * K, 3, 3).is_err(), "but not twice");
    a.take_changes(3).unwrap();
    a.free(v, off + 4 * K, 4 * K, 3, 4).unwrap();
    assert!(a.free(v, off + 4 * K, 4 * K, 3, 4).is_err(), "double free");
    assert!(a.free(v, off + 4 * K, 4 * K, 3, 5).is_err(), "double free across txgs");
}

#[test]
fn copies_go_to_distinct_vdevs() {
    let mut a = Allocator::new();
    for v in 0..3 {
        a.add_top(v, 8 << 24, 9, 24).unwrap();
    }
    for _ in 0..50 {
        let dvas = a.alloc(128 * K, 4, 3).unwrap();
        let mut vdevs: Vec<_> = dvas.iter().map(|d| d.0).collect();
        vdevs.sort();
        assert_eq!(vdevs, vec![0, 1, 2]);
        // Consecutive vdevs after the first copy's.
        assert_eq!(dvas[1].0, (dvas[0].0 + 1) % 3);
    }
}

#[test]
fn copies_share_a_vdev_only_when_needed() {
    let mut a = Allocator::new();
    a.add_top(0, 4 << 24, 9, 24).unwrap();
    a.add_top(1, 4 << 24, 9, 24).unwrap();
    let dvas = a.alloc(128 * K, 4, 3).unwrap();
    assert_ne!(dvas[0].0, dvas[1].0);
    assert_eq!(dvas[2].0, dvas[0].0);
    // Same vdev: another metaslab.
    assert_ne!(dvas[2].1 >> 24, dvas[0].1 >> 24);

    let mut b = one_vdev(1 << 16, 16);
    let dvas = b.alloc(8 * K, 4, 3).unwrap();
    let mut offs: Vec<_> = dvas.iter().map(|d| d.1).collect();
    offs.sort();
    assert!(offs.windows(2).all(|w| w[0] + 8 * K <= w[1]), "{offs:?} overlap");
    assert_eq!(b.space().alloc, 24 * K);
}

#[test]
fn writes_spread_in_proportion_to_free_space() {
    let mut a = Allocator::new();
    a.add_top(0, 1 << 30, 9, 24).unwrap();
    a.add_top(1, 3 << 30, 9, 24).unwrap();
    for _ in 0..4096 {
        a.alloc(128 * K, 4, 1).unwrap();
    }
    let s = a.space();
    let ratio = s.tops[1].alloc as f64 / s.tops[0].alloc as f64;
    assert!((2.7..3.3).contains(&ratio), "ratio {ratio}");

    // Equal sizes, but vdev 0 is mostly full: new writes favour vdev 1.
    let mut b = Allocator::new();
    b.add_top(0, 1 << 30, 9, 24).unwrap();
    b.add_top(1, 1 << 30, 9, 24).unwrap();
    for ms in 0..48 {
        b.load_metaslab(0, ms, &[range(SmType::Alloc, 0, (1 << 24) >> 9)]).unwrap();
    }
    b.sync_done(1).unwrap();
    for _ in 0..1024 {
        b.alloc(128 * K, 4, 1).unwrap();
    }
    let s = b.space();
    let (a0, a1) = (s.tops[0].alloc - (48 << 24), s.tops[1].alloc);
    let ratio = a1 as f64 / a0 as f64;
    assert!((3.0..5.0).contains(&ratio), "free space 1:4, ratio {ratio}");
}

#[test]
fn no_space_is_reported_and_changes_nothing() {
    let mut a = one_vdev(2 << 16, 16);
    assert!(matches!(a.alloc(128 * K, 1, 1), Err(Error::NoSpace { .. })), "larger than a metaslab");
    for _ in 0..2 {
        a.alloc(64 * K, 1, 1).unwrap();
    }
    assert!(matches!(a.alloc(512, 1, 1), Err(Error::NoSpace { .. })));
    assert!(a.alloc(0, 1, 1).is_err());
    assert!(a.alloc(512, 1, 0).is_err());
    assert!(a.alloc(512, 1, 4).is_err());
    assert!(Allocator::new().alloc(512, 1, 1).is_err());

    // All-or-nothing copies: room for one 32K copy only.
    let mut b = one_vdev(1 << 16, 16);
    b.alloc(32 * K, 1, 1).unwrap();
    let before = b.space();
    assert!(matches!(b.alloc(32 * K, 1, 2), Err(Error::NoSpace { .. })));
    assert_eq!(b.space(), before);
    let d = b.take_changes(1).unwrap();
    assert_eq!(d[0].allocs, vec![(0, 32 * K)]);
}

#[test]
fn copies_are_sized_for_their_vdev() {
    // Vdev 0: 512-byte sectors; vdev 1: 4 KiB sectors and twice the size (a RAID-Z's parity).
    let mut a = Allocator::new();
    a.add_top(0, 8 << 24, 9, 24).unwrap();
    a.add_top(1, 8 << 24, 12, 24).unwrap();
    let asize_of = |v: u64| Some(if v == 0 { 3 * K } else { 8 * K });
    let mut on = [0u64; 2];
    for _ in 0..200 {
        let got = a.alloc_sized(&asize_of, 4, 2).unwrap();
        assert_ne!(got[0].0, got[1].0);
        for (v, off, asize) in got {
            assert_eq!(Some(asize), asize_of(v));
            assert_eq!(off % if v == 1 { 4 * K } else { 512 }, 0, "aligned to the vdev's sector");
            on[v as usize] += asize;
        }
    }
    assert_eq!(on, [600 * K, 1600 * K]);
    assert_eq!(a.space().alloc, 2200 * K);
    // A vdev that cannot take the block is passed over; with no room for the second copy
    // anywhere, nothing stays allocated.
    let only0 = |v: u64| (v == 0).then_some(3 * K);
    let got = a.alloc_sized(&only0, 4, 1).unwrap();
    assert_eq!(got[0].0, 0);
    let before = a.space();
    let mut b = one_vdev(1 << 16, 16);
    b.alloc(60 * K, 1, 1).unwrap();
    let before_b = b.space();
    assert!(
        matches!(b.alloc_sized(&|_| Some(4 * K), 1, 2), Err(Error::NoSpace { asize, .. }) if asize == 4 * K)
    );
    assert_eq!(b.space(), before_b);
    assert_eq!(a.space(), before);
}

#[test]
fn misaligned_asize_cannot_be_placed() {
    let mut a = Allocator::new();
    a.add_top(0, 1 << 30, 12, 24).unwrap();
    assert!(matches!(a.alloc(512, 1, 1), Err(Error::NoSpace { .. })));
    assert!(a.alloc(4 * K, 1, 1).is_ok());
}

#[test]
fn sync_done_refuses_untaken_changes() {
    let mut a = one_vdev(1 << 24, 24);
    a.alloc(4 * K, 3, 1).unwrap();
    assert_eq!(a.sync_done(3), Err(Error::Undrained { txg: 3 }));
    a.sync_done(2).unwrap();
    a.take_changes(3).unwrap();
    a.sync_done(3).unwrap();
}

#[test]
fn take_changes_coalesces_and_is_per_pass() {
    let mut a = one_vdev(1 << 24, 24);
    for _ in 0..4 {
        a.alloc(4 * K, 3, 1).unwrap();
    }
    let d = a.take_changes(3).unwrap();
    assert_eq!(d, vec![MetaslabDelta { vdev: 0, ms: 0, allocs: vec![(0, 16 * K)], frees: vec![] }]);
    assert_eq!(d[0].alloc_delta(), 16 * K as i64);
    assert!(a.take_changes(3).unwrap().is_empty());
    // An allocation for a later txg is not taken with this one.
    a.alloc(4 * K, 4, 1).unwrap();
    assert!(a.take_changes(3).unwrap().is_empty());
    assert_eq!(a.take_changes(4).unwrap().len(), 1);
}

#[test]
fn sm_entries_debug_headers_and_run_splitting() {
    let delta = MetaslabDelta {
        vdev: 0,
        ms: 3,
        allocs: vec![(0, 512), (1 << 20, (SM_RUN_MAX + 5) << 9)],
        frees: vec![(4096, 1024)],
    };
    let e = Allocator::sm_entries(&delta, 9, 77, 2, false).unwrap();
    assert_eq!(
        e,
        vec![
            SmEntry::Debug { action: 0, sync_pass: 2, txg: 77 },
            range(SmType::Alloc, 0, 1),
            range(SmType::Alloc, 2048, SM_RUN_MAX),
            range(SmType::Alloc, 2048 + SM_RUN_MAX, 5),
            SmEntry::Debug { action: 1, sync_pass: 2, txg: 77 },
            range(SmType::Free, 8, 2),
        ]
    );
    // With spacemap_v2 the long run is one two-word entry.
    let e = Allocator::sm_entries(&delta, 9, 77, 2, true).unwrap();
    assert_eq!(e[2], SmEntry::TwoWord { kind: SmType::Alloc, offset: 2048, run: SM_RUN_MAX + 5, vdev: 0 });
    assert_eq!(e.len(), 5);
    // No frees: no FREE header.
    let only = MetaslabDelta { frees: vec![], ..delta.clone() };
    assert!(Allocator::sm_entries(&only, 9, 77, 1, false)
        .unwrap()
        .iter()
        .all(|e| !matches!(e, SmEntry::Debug { action: 1, .. })));
    assert!(Allocator::sm_entries(&delta, 12, 77, 1, false).is_err(), "not in whole sectors");
    assert!(Allocator::sm_entries(&delta, 9, 1 << 50, 1, false).is_err());
    assert!(Allocator::sm_entries(&delta, 9, 1, 1 << 10, false).is_err());
    // The entries encode.
    let bytes = ondisk::spacemap::encode_entries(&e, ondisk::ByteOrder::Little, 4096).unwrap();
    assert_eq!(ondisk::spacemap::decode_entries(&bytes, ondisk::ByteOrder::Little).unwrap(), e);
}

#[test]
fn load_replays_and_rejects_damage() {
    let mut a = one_vdev(4 << 16, 16);
    let ok = [
        SmEntry::Debug { action: 0, sync_pass: 1, txg: 4 },
        range(SmType::Alloc, 0, 16),
        SmEntry::TwoWord { kind: SmType::Alloc, offset: 32, run: 8, vdev: 0 },
        range(SmType::Free, 4, 4),
    ];
    assert_eq!(a.load_metaslab(0, 1, &ok).unwrap(), 20 * 512);
    assert!(a.is_allocated(0, 1 << 16, 2 * K).unwrap());
    assert!(a.is_free(0, (1 << 16) + 2 * K, 2 * K).unwrap());
    assert_eq!(a.ms_alloc(0, 1).unwrap(), 20 * 512);

    let damaged: [&[SmEntry]; 6] = [
        &[range(SmType::Alloc, 0, 4), range(SmType::Alloc, 2, 4)],
        &[range(SmType::Free, 0, 1)],
        &[range(SmType::Alloc, 0, 4), range(SmType::Free, 2, 4)],
        &[range(SmType::Alloc, 127, 2)],
        &[SmEntry::TwoWord { kind: SmType::Alloc, offset: u64::MAX >> 1, run: 1, vdev: 0 }],
        &[range(SmType::Alloc, 0, 0)],
    ];
    for d in damaged {
        let err = a.load_metaslab(0, 1, d).unwrap_err();
        assert!(matches!(err, Error::BadSpaceMap { vdev: 0, ms: 1, .. }), "{err}");
        // The metaslab keeps its previous state.
        assert_eq!(a.ms_alloc(0, 1).unwrap(), 20 * 512);
    }
    assert!(a.load_metaslab(0, 4, &ok).is_err());
    assert!(a.load_metaslab(3, 0, &ok).is_err());
    // Not while changes are in flight.
    let (_, off) = a.alloc(512, 9, 1).unwrap()[0];
    let ms = off >> 16;
    assert!(a.load_metaslab(0, ms, &[]).is_err());
}

#[test]
fn condensed_map_replays_to_the_same_state() {
    let mut a = one_vdev(1 << 16, 16);
    let mut log = Vec::new();
    let blocks: Vec<_> = (0..8).map(|_| a.alloc(4 * K, 3, 1).unwrap()[0]).collect();
    for d in a.take_changes(3).unwrap() {
        log.extend(Allocator::sm_entries(&d, 9, 3, 1, true).unwrap());
    }
    a.sync_done(3).unwrap();
    a.free(0, blocks[2].1, 4 * K, 3, 4).unwrap();
    for d in a.take_changes(4).unwrap() {
        log.extend(Allocator::sm_entries(&d, 9, 4, 1, true).unwrap());
    }
    // Now: one deferred free, and one pending allocation in txg 5.
    a.alloc(4 * K, 5, 1).unwrap();
    let condensed = a.condense_entries(0, 0, 5, 1, true).unwrap();
    assert!(matches!(condensed[1], SmEntry::OneWord { kind: SmType::Alloc, offset: 0, run: 128 }));
    let mut later = Vec::new();
    for d in a.take_changes(5).unwrap() {
        later.extend(Allocator::sm_entries(&d, 9, 5, 1, true).unwrap());
    }
    let (mut full, mut short) = (one_vdev(1 << 16, 16), one_vdev(1 << 16, 16));
    log.extend(later.iter().copied());
    let n1 = full.load_metaslab(0, 0, &log).unwrap();
    let n2 = short.load_metaslab(0, 0, &[condensed, later].concat()).unwrap();
    assert_eq!(n1, n2);
    assert_eq!(n1, a.ms_alloc(0, 0).unwrap());
    for u in 0..128u64 {
        assert_eq!(full.is_free(0, u * 512, 512), short.is_free(0, u * 512, 512));
    }
}

#[test]
fn debug_output_is_readable() {
    let mut a = one_vdev(2 << 16, 16);
    a.alloc(4 * K, 3, 1).unwrap();
    let s = format!("{a:?}");
    assert!(s.contains("top 0: ashift 9 ms_shift 16 metaslabs 2"), "{s}");
    assert!(s.contains("ms 0:"), "{s}");
    assert!(!s.contains("ms 1:"), "{s}");
}

#[test]
fn allocator_is_send() {
    fn send<T: Send + Sync>() {}
    send::<Allocator>();
}

#[test]
fn rollback_undoes_a_txgs_allocations_and_frees() {
    let mut a = one_vdev(4 << 24, 24);
    let (v, old) = a.alloc(64 * K, 5, 1).unwrap()[0];
    a.take_changes(5).unwrap();
    a.sync_done(5).unwrap();
    let before = a.space();
    // Txg 6 allocates two blocks, frees one of them at once and frees the old block.
    let (_, new1) = a.alloc(64 * K, 6, 1).unwrap()[0];
    let (_, new2) = a.alloc(128 * K, 6, 1).unwrap()[0];
    a.free(v, new2, 128 * K, 6, 6).unwrap();
    a.free(v, old, 64 * K, 5, 6).unwrap();
    assert!(!a.is_allocated(v, old, 64 * K).unwrap());
    a.rollback_txg(6).unwrap();
    assert_eq!(a.space(), before, "space as before txg 6");
    assert!(a.is_allocated(v, old, 64 * K).unwrap(), "the freed block is live again");
    assert!(a.is_free(v, new1, 64 * K).unwrap(), "the new block is free again");
    assert!(a.take_changes(6).unwrap().is_empty(), "nothing left for the space map");
    // The retried txg allocates and syncs normally.
    a.alloc(64 * K, 6, 1).unwrap();
    assert_eq!(a.take_changes(6).unwrap().len(), 1);
    a.sync_done(6).unwrap();
}

#[test]
fn log_vdevs_take_no_pool_blocks_and_no_pool_space() {
    let mut a = Allocator::new();
    a.add_top(0, 4 << 24, 9, 24).unwrap();
    a.add_top(1, 2 << 24, 9, 24).unwrap();
    a.set_log(1, true).unwrap();
    let s = a.space();
    assert_eq!((s.size, s.tops.len()), (4 << 24, 2));
    assert!(s.tops[1].log && !s.tops[0].log);
    // Every copy lands on the normal vdev, in distinct metaslabs where it can.
    for txg in 4..40 {
        for (v, _) in a.alloc(128 * K, txg, 3).unwrap() {
            assert_eq!(v, 0);
        }
    }
    // A pool of log vdevs alone has nowhere to put a block.
    let mut only = Allocator::new();
    only.add_top(0, 2 << 24, 9, 24).unwrap();
    only.set_log(0, true).unwrap();
    assert!(matches!(only.alloc(4 * K, 4, 1), Err(Error::NoSpace { .. })));
    assert!(only.set_log(7, true).is_err());
    // Back in the normal class, it is used again.
    only.set_log(0, false).unwrap();
    assert_eq!(only.alloc(4 * K, 4, 1).unwrap()[0].0, 0);
    // A vdev holding a block cannot be taken out; an empty log vdev can.
    assert!(only.remove_top(0).is_err());
    a.remove_top(1).unwrap();
    assert_eq!((a.space().tops.len(), a.metaslab_count(1).is_err()), (1, true));
    assert!(a.remove_top(1).is_err());
}

#[test]
fn free_histogram_counts_segments_by_size_class() {
    // One 16 MiB metaslab, 512-byte sectors: free at first as one 2^24-byte segment.
    let mut a = one_vdev(1 << 24, 24);
    let h = a.free_histogram(0, 0, 9).unwrap();
    assert_eq!(h[24 - 9], 1);
    assert_eq!(h.iter().sum::<u64>(), 1);
    // 64 KiB taken from the front leaves one segment of 2^24 - 2^16 bytes (class 2^23);
    // freeing it again counts the freed run on its own (its own tree) until it is allocatable.
    let (v, off) = a.alloc(64 * K, 5, 1).unwrap()[0];
    a.take_changes(5).unwrap();
    a.sync_done(5).unwrap();
    let h = a.free_histogram(0, 0, 9).unwrap();
    assert_eq!((h[23 - 9], h.iter().sum::<u64>()), (1, 1), "{h:?} {off:#x}");
    a.free(v, off, 64 * K, 5, 6).unwrap();
    let h = a.free_histogram(0, 0, 9).unwrap();
    assert_eq!((h[23 - 9], h[16 - 9], h.iter().sum::<u64>()), (1, 1, 2));
    // With 4 KiB sectors the classes move down by three.
    let h = a.free_histogram(0, 0, 12).unwrap();
    assert_eq!((h[23 - 12], h[16 - 12]), (1, 1));
    // A segment beyond the last class (2^(31 + shift)) counts there, weighted.
    let b = one_vdev(1 << 34, 34);
    let h = b.free_histogram(0, 0, 1).unwrap();
    assert_eq!(h[31], 1 << (34 - 1 - 31));
    assert!(b.free_histogram(0, 1, 9).is_err(), "no such metaslab");
}

#[test]
fn zil_blocks_claim_and_held_frees() {
    let mut a = Allocator::new();
    a.add_top(0, 1 << 24, 12, 22).unwrap();
    // A claim takes exactly the range, once; the space map sees it as an allocation.
    a.claim(0, 0x10000, 0x1000, 5).unwrap();
    assert!(a.claim(0, 0x10000, 0x1000, 5).is_err());
    assert!(a.is_allocated(0, 0x10000, 0x1000).unwrap());
    // Freed in its own txg: not allocatable until that txg has synced, never in the map.
    a.free_zil(0, 0x10000, 0x1000, 5, 5).unwrap();
    assert!(!a.is_free(0, 0x10000, 0x1000).unwrap());
    let changes = a.take_changes(5).unwrap();
    assert!(changes.iter().all(|c| c.allocs.is_empty() && c.frees.is_empty()));
    a.sync_done(5).unwrap();
    assert!(a.is_free(0, 0x10000, 0x1000).unwrap());
    // A failed sync gives held space back (the retry claims what is still live).
    a.claim(0, 0x20000, 0x1000, 6).unwrap();
    a.free_zil(0, 0x20000, 0x1000, 6, 6).unwrap();
    a.rollback_txg(6).unwrap();
    assert!(a.is_free(0, 0x20000, 0x1000).unwrap());
    // Log-class first.
    let mut b = Allocator::new();
    b.add_top(0, 1 << 24, 12, 22).unwrap();
    b.add_top(1, 1 << 24, 12, 22).unwrap();
    b.set_log(1, true).unwrap();
    let (v, _, asize) = b.alloc_zil(&|_| Some(0x2000), 3).unwrap();
    assert_eq!((v, asize), (1, 0x2000));
}
