//! One metaslab: its trees, the dynamic-fit block picker and the per-txg bookkeeping.
//!
//! Offsets in every tree are vdev offsets (not metaslab-relative); translation to
//! metaslab-relative units happens only at the space map boundary (`smap.rs`).

use std::collections::BTreeMap;
use std::fmt;

use crate::range_tree::RangeTree;
use crate::{highbit64, Error, Result, TXG_DEFER_SIZE};

/// Below this largest free segment the cursor walk is skipped (OpenZFS
/// `metaslab_df_alloc_threshold` = `SPA_OLD_MAXBLOCKSIZE`).
const DF_ALLOC_THRESHOLD: u64 = 128 << 10;
/// Below this percentage of free space the cursor walk is skipped (`metaslab_df_free_pct`).
const DF_FREE_PCT: u64 = 4;
/// How far the cursor walk looks (`metaslab_df_max_search`).
const DF_MAX_SEARCH: u64 = 16 << 20;
/// Segments the cursor walk looks at whatever the distance (`metaslab_min_search_count`).
const DF_MIN_SEARCH_COUNT: usize = 100;

/// Merges the trees keyed by txg `<= txg` into one and removes them from `map`.
fn drain_upto(map: &mut BTreeMap<u64, RangeTree>, txg: u64) -> BTreeMap<u64, RangeTree> {
    match txg.checked_add(1) {
        Some(next) => {
            let later = map.split_off(&next);
            std::mem::replace(map, later)
        }
        None => std::mem::take(map),
    }
}

#[derive(Clone)]
pub(crate) struct Metaslab {
    pub start: u64,
    pub size: u64,
    /// Allocatable now (`ms_allocatable`).
    pub free: RangeTree,
    /// Allocations per txg, not yet taken (`ms_allocating`).
    pub allocating: BTreeMap<u64, RangeTree>,
    /// Frees per txg, not yet taken (`ms_freeing`).
    pub freeing: BTreeMap<u64, RangeTree>,
    /// Frees per txg, taken, not yet allocatable (`ms_freed` / `ms_defer`).
    pub deferred: BTreeMap<u64, RangeTree>,
    /// Allocations undone in the txg that made them, kept out of reach until that txg has
    /// synced (intent log blocks that became obsolete in their own txg: the last durable
    /// header may still lead to them until then). Never in a space map.
    pub held: BTreeMap<u64, RangeTree>,
    /// Dynamic-fit cursors per alignment bucket (`ms_lbas`), kept sparse.
    cursors: Vec<(u32, u64)>,
}

impl fmt::Debug for Metaslab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metaslab")
            .field("start", &format_args!("{:#x}", self.start))
            .field("size", &format_args!("{:#x}", self.size))
            .field("alloc", &format_args!("{:#x}", self.alloc_space()))
            .field("free", &self.free)
            .field("allocating", &self.allocating)
            .field("freeing", &self.freeing)
            .field("deferred", &self.deferred)
            .finish()
    }
}

impl Metaslab {
    pub fn new(start: u64, size: u64) -> Result<Metaslab> {
        Ok(Metaslab {
            start,
            size,
            free: RangeTree::full(start, size)?,
            allocating: BTreeMap::new(),
            freeing: BTreeMap::new(),
            deferred: BTreeMap::new(),
            held: BTreeMap::new(),
            cursors: Vec::new(),
        })
    }

    /// Bytes freed but not yet allocatable.
    pub fn deferred_space(&self) -> u64 {
        self.freeing
            .values()
            .chain(self.deferred.values())
            .chain(self.held.values())
            .map(RangeTree::space)
            .sum()
    }

    /// Bytes allocated (including allocations not yet taken).
    pub fn alloc_space(&self) -> u64 {
        self.size - self.free.space() - self.deferred_space()
    }

    /// No pending or deferred state: the trees are exactly what the space map says.
    pub fn is_quiet(&self) -> bool {
        self.allocating.is_empty()
            && self.freeing.is_empty()
            && self.deferred.is_empty()
            && self.held.is_empty()
    }

    fn cursor(&mut self, bucket: u32) -> &mut u64 {
        let i = match self.cursors.iter().position(|&(b, _)| b == bucket) {
            Some(i) => i,
            None => {
                self.cursors.push((bucket, 0));
                self.cursors.len() - 1
            }
        };
        &mut self.cursors[i].1
    }

    /// Picks `size` bytes from `free` like OpenZFS `metaslab_df_alloc`: first fit from the
    /// cursor of the request's alignment bucket while the metaslab is roomy, else (or if that
    /// walk finds nothing) the smallest segment that fits. Does not modify `free`.
    fn df_pick(&mut self, size: u64) -> Option<u64> {
        if self.free.largest() < size {
            return None;
        }
        // Requests of the same power-of-two alignment share a cursor, so they tend to pack
        // together.
        let bucket = highbit64(size & size.wrapping_neg());
        let free_pct = self.free.space().saturating_mul(100) / self.size;
        let mut offset = None;
        if self.free.largest() >= DF_ALLOC_THRESHOLD && free_pct >= DF_FREE_PCT {
            let cur = *self.cursor(bucket);
            let from = if cur == 0 { self.start } else { cur };
            offset = self.free.first_fit_from(from, size, DF_MAX_SEARCH, DF_MIN_SEARCH_COUNT);
            if offset.is_none() {
                *self.cursor(bucket) = 0;
            }
        }
        let offset = offset.or_else(|| self.free.best_fit(size))?;
        *self.cursor(bucket) = offset + size;
        Some(offset)
    }

    /// Allocates `size` bytes in `txg`; `None` when no free segment is large enough.
    pub fn alloc(&mut self, size: u64, txg: u64) -> Result<Option<u64>> {
        let Some(off) = self.df_pick(size) else { return Ok(None) };
        self.free.remove(off, size)?;
        self.allocating.entry(txg).or_default().add(off, size)?;
        Ok(Some(off))
    }

    /// Allocates exactly `[off, off + len)` in `txg` (OpenZFS `metaslab_claim`: a block
    /// written before its allocation was recorded, an intent log block after a crash).
    /// Fails, changing nothing, unless the whole range is free.
    pub fn claim(&mut self, off: u64, len: u64, txg: u64) -> Result<()> {
        if !self.free.contains(off, len) {
            return Err(Error::Range("range is not (entirely) free".into()));
        }
        self.free.remove(off, len)?;
        self.allocating.entry(txg).or_default().add(off, len)
    }

    /// Is all of `[off, off + len)` allocated (not free, not freed)?
    pub fn is_allocated(&self, off: u64, len: u64) -> bool {
        !self.free.intersects(off, len)
            && !self.freeing.values().chain(self.deferred.values()).any(|t| t.intersects(off, len))
    }

    /// Undoes an allocation of `txg` not yet taken (OpenZFS `metaslab_unalloc_dva`).
    pub fn unalloc(&mut self, off: u64, len: u64, txg: u64) -> Result<()> {
        let t = self.allocating.get_mut(&txg).ok_or_else(|| Error::Range("no pending allocation".into()))?;
        t.remove(off, len)?;
        if t.is_empty() {
            self.allocating.remove(&txg);
        }
        self.free.add(off, len)
    }

    /// Undoes an allocation of `txg` not yet taken, keeping the space unallocatable until
    /// `txg` has synced ([`Metaslab::held`]).
    pub fn unalloc_held(&mut self, off: u64, len: u64, txg: u64) -> Result<()> {
        let t = self.allocating.get_mut(&txg).ok_or_else(|| Error::Range("no pending allocation".into()))?;
        t.remove(off, len)?;
        if t.is_empty() {
            self.allocating.remove(&txg);
        }
        self.held.entry(txg).or_default().add(off, len)
    }

    /// Records a free in `txg` (OpenZFS `metaslab_free_concrete` adding to `ms_freeing`).
    pub fn free(&mut self, off: u64, len: u64, txg: u64) -> Result<()> {
        if !self.is_allocated(off, len) {
            return Err(Error::Range("range is not (entirely) allocated".into()));
        }
        self.freeing.entry(txg).or_default().add(off, len)
    }

    /// Takes allocations and frees of txgs `<= txg`, merged and sorted; frees move on to
    /// `deferred` under the txg they were freed in.
    pub fn take(&mut self, txg: u64) -> Result<(RangeTree, RangeTree)> {
        let mut allocs = RangeTree::new();
        for (_, t) in drain_upto(&mut self.allocating, txg) {
            allocs.add_tree(&t)?;
        }
        let mut frees = RangeTree::new();
        for (t_free, t) in drain_upto(&mut self.freeing, txg) {
            frees.add_tree(&t)?;
            self.deferred.entry(t_free).or_default().add_tree(&t)?;
        }
        Ok((allocs, frees))
    }

    /// Has changes of a txg `<= txg` not yet taken?
    pub fn has_undrained(&self, txg: u64) -> bool {
        self.allocating.range(..=txg).next().is_some() || self.freeing.range(..=txg).next().is_some()
    }

    /// `txg` is synced: space freed in txgs `<= txg - TXG_DEFER_SIZE` becomes allocatable.
    pub fn release(&mut self, txg: u64) -> Result<()> {
        for (_, t) in drain_upto(&mut self.held, txg) {
            self.free.add_tree(&t)?;
        }
        let Some(upto) = txg.checked_sub(TXG_DEFER_SIZE) else { return Ok(()) };
        for (_, t) in drain_upto(&mut self.deferred, upto) {
            self.free.add_tree(&t)?;
        }
        Ok(())
    }
}
