//! Model check: random alloc / free / sync-pass / txg-sync sequences against a per-sector
//! state model. After every step: no overlap, exact accounting, states agree. At the end, the
//! space map entries emitted along the way (encoded and decoded through `ondisk`) replayed
//! from scratch give the same allocated set.

use std::collections::BTreeMap;

use ondisk::spacemap::{decode_entries, encode_entries, SmEntry};
use ondisk::ByteOrder;
use proptest::prelude::*;

use crate::{Allocator, Error, SPA_DVAS_PER_BP, TXG_DEFER_SIZE};

const ASHIFT: u8 = 9;
const MS_SHIFT: u32 = 15;
const SECTOR: u64 = 1 << ASHIFT;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Free,
    Alloc,
    /// Freed in this txg; not allocatable.
    Freed(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        sectors: u64,
        copies: usize,
    },
    Free {
        pick: usize,
    },
    /// End of a sync pass: take the changes.
    Take,
    /// End of the txg: take, then sync_done.
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1u64..=24, 1usize..=SPA_DVAS_PER_BP).prop_map(|(sectors, copies)| Op::Alloc { sectors, copies }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => Just(Op::Take),
        2 => Just(Op::Sync),
    ]
}

struct Block {
    dvas: Vec<(u64, u64)>,
    asize: u64,
    birth: u64,
    /// Its allocation has been taken for the space map.
    taken: bool,
}

struct Harness {
    a: Allocator,
    /// Per vdev, per sector.
    model: BTreeMap<u64, Vec<Unit>>,
    blocks: Vec<Block>,
    txg: u64,
    pass: u32,
    v2: bool,
    /// Everything emitted, per (vdev, metaslab).
    logs: BTreeMap<(u64, u64), Vec<SmEntry>>,
}

impl Harness {
    fn new(sizes: &[u64], v2: bool) -> Harness {
        let mut a = Allocator::new();
        let mut model = BTreeMap::new();
        for (v, &n_ms) in sizes.iter().enumerate() {
            // A tail shorter than a metaslab is never used.
            a.add_top(v as u64, (n_ms << MS_SHIFT) + 3 * SECTOR, ASHIFT, MS_SHIFT).unwrap();
            model.insert(v as u64, vec![Unit::Free; (n_ms << (MS_SHIFT - u32::from(ASHIFT))) as usize]);
        }
        Harness { a, model, blocks: Vec::new(), txg: 4, pass: 1, v2, logs: BTreeMap::new() }
    }

    fn set(&mut self, vdev: u64, off: u64, asize: u64, want_before: impl Fn(Unit) -> bool, to: Unit) {
        let m = self.model.get_mut(&vdev).unwrap();
        for u in &mut m[(off / SECTOR) as usize..((off + asize) / SECTOR) as usize] {
            assert!(want_before(*u), "vdev {vdev} {off:#x}+{asize:#x}: unit was {u:?}");
            *u = to;
        }
    }

    fn alloc(&mut self, sectors: u64, copies: usize) {
        let asize = sectors * SECTOR;
        let before = self.a.space();
        match self.a.alloc(asize, self.txg, copies) {
            Ok(dvas) => {
                assert_eq!(dvas.len(), copies);
                for &(v, off) in &dvas {
                    assert_eq!(off >> MS_SHIFT, (off + asize - 1) >> MS_SHIFT, "inside one metaslab");
                    self.set(v, off, asize, |u| u == Unit::Free, Unit::Alloc);
                }
                self.blocks.push(Block { dvas, asize, birth: self.txg, taken: false });
            }
            Err(Error::NoSpace { .. }) => {
                assert_eq!(self.a.space(), before);
                if copies == 1 {
                    assert!(!self.model_has_room(sectors), "NoSpace but {sectors} sectors fit somewhere");
                }
            }
            Err(e) => panic!("alloc: {e}"),
        }
    }

    /// Does some metaslab have `sectors` consecutive free sectors?
    fn model_has_room(&self, sectors: u64) -> bool {
        let per_ms = 1usize << (MS_SHIFT - u32::from(ASHIFT));
        self.model.values().any(|m| {
            m.chunks(per_ms).any(|ms| ms.split(|&u| u != Unit::Free).any(|run| run.len() as u64 >= sectors))
        })
    }

    fn free(&mut self, pick: usize) {
        if self.blocks.is_empty() {
            return;
        }
        let b = self.blocks.swap_remove(pick % self.blocks.len());
        let unalloc = b.birth == self.txg && !b.taken;
        for &(v, off) in &b.dvas {
            self.a.free(v, off, b.asize, b.birth, self.txg).unwrap();
            let to = if unalloc { Unit::Free } else { Unit::Freed(self.txg) };
            self.set(v, off, b.asize, |u| u == Unit::Alloc, to);
            // Freeing it again must fail and change nothing.
            assert!(self.a.free(v, off, b.asize, b.birth, self.txg).is_err());
        }
    }

    fn take(&mut self) {
        for d in self.a.take_changes(self.txg).unwrap() {
            let e = Allocator::sm_entries(&d, ASHIFT, self.txg, self.pass, self.v2).unwrap();
            self.logs.entry((d.vdev, d.ms)).or_default().extend(e);
        }
        for b in &mut self.blocks {
            b.taken = true;
        }
        self.pass += 1;
    }

    fn sync(&mut self) {
        self.take();
        self.a.sync_done(self.txg).unwrap();
        let txg = self.txg;
        for m in self.model.values_mut() {
            for u in m.iter_mut() {
                if matches!(*u, Unit::Freed(t) if t + TXG_DEFER_SIZE <= txg) {
                    *u = Unit::Free;
                }
            }
        }
        self.txg += 1;
        self.pass = 1;
    }

    /// Every sector's state and every counter agree with the model.
    fn check(&self) {
        let s = self.a.space();
        for ts in &s.tops {
            let m = &self.model[&ts.vdev];
            let count = |f: &dyn Fn(Unit) -> bool| m.iter().filter(|&&u| f(u)).count() as u64 * SECTOR;
            assert_eq!(ts.free, count(&|u| u == Unit::Free));
            assert_eq!(ts.alloc, count(&|u| u == Unit::Alloc));
            assert_eq!(ts.deferred, count(&|u| matches!(u, Unit::Freed(_))));
            for (i, &u) in m.iter().enumerate() {
                let off = i as u64 * SECTOR;
                assert_eq!(self.a.is_free(ts.vdev, off, SECTOR).unwrap(), u == Unit::Free, "{off:#x} {u:?}");
                assert_eq!(self.a.is_allocated(ts.vdev, off, SECTOR).unwrap(), u == Unit::Alloc, "{off:#x}");
            }
        }
    }

    /// Replays all emitted entries, through the on-disk encoding, into a fresh allocator.
    fn check_replay(&mut self, sizes: &[u64]) {
        self.take();
        let mut fresh = Harness::new(sizes, self.v2).a;
        for (&(v, ms), entries) in &self.logs {
            let bytes = encode_entries(entries, ByteOrder::Little, 4096).unwrap();
            let back = decode_entries(&bytes, ByteOrder::Little).unwrap();
            let alloc = fresh.load_metaslab(v, ms, &back).unwrap();
            assert_eq!(alloc, self.a.ms_alloc(v, ms).unwrap(), "vdev {v} ms {ms}");
        }
        for (&v, m) in &self.model {
            for (i, &u) in m.iter().enumerate() {
                // On disk, deferred frees are already free.
                let off = i as u64 * SECTOR;
                assert_eq!(
                    fresh.is_allocated(v, off, SECTOR).unwrap(),
                    u == Unit::Alloc,
                    "replay {v}:{off:#x}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn allocator_matches_model(
        sizes in prop::collection::vec(1u64..=4, 1..=3),
        v2 in any::<bool>(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut h = Harness::new(&sizes, v2);
        for op in ops {
            match op {
                Op::Alloc { sectors, copies } => h.alloc(sectors, copies),
                Op::Free { pick } => h.free(pick),
                Op::Take => h.take(),
                Op::Sync => h.sync(),
            }
            h.check();
        }
        h.check_replay(&sizes);
    }

    /// Arbitrary entries never panic the loader, and a failed load changes nothing.
    #[test]
    fn load_never_panics(words in prop::collection::vec(any::<u64>(), 0..64)) {
        let mut bytes = Vec::new();
        for w in &words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        let mut a = Allocator::new();
        a.add_top(0, 2 << MS_SHIFT, ASHIFT, MS_SHIFT).unwrap();
        if let Ok(entries) = decode_entries(&bytes, ByteOrder::Little) {
            match a.load_metaslab(0, 1, &entries) {
                Ok(n) => prop_assert_eq!(n, a.ms_alloc(0, 1).unwrap()),
                Err(_) => prop_assert_eq!(a.ms_alloc(0, 1).unwrap(), 0),
            }
        }
    }
}
