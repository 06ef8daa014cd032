//! The allocator over all top-level vdevs: placement (rotor, copies, active metaslab), frees,
//! and the per-txg hand-off of changes to the pool layer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::metaslab::Metaslab;
use crate::{highbit64, Error, Result, SPA_DVAS_PER_BP, TXG_DEFER_SIZE};
use ondisk::spacemap::SPACE_MAP_HISTOGRAM_SIZE as HISTOGRAM_SIZE;

/// Bytes a rotor stop gets before scaling (OpenZFS `metaslab_aliquot`).
const METASLAB_ALIQUOT: u64 = 2 << 20;
/// Supported `ashift` range (OpenZFS `ASHIFT_MIN` / `ASHIFT_MAX`).
const ASHIFT_MIN: u8 = 9;
const ASHIFT_MAX: u8 = 16;
/// A sanity bound on metaslabs per vdev, far above what `metaslab_shift` yields (2^17).
const MAX_MS_COUNT: u64 = 1 << 20;

/// The changes of one metaslab since the last [`Allocator::take_changes`]: offsets relative to
/// the metaslab start, in bytes; each list sorted and coalesced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaslabDelta {
    pub vdev: u64,
    pub ms: u64,
    /// `(offset, length)` newly allocated.
    pub allocs: Vec<(u64, u64)>,
    /// `(offset, length)` newly freed.
    pub frees: Vec<(u64, u64)>,
}

impl MetaslabDelta {
    /// Change of the space map's `smp_alloc` once this delta is written.
    pub fn alloc_delta(&self) -> i64 {
        let sum = |v: &[(u64, u64)]| v.iter().map(|&(_, l)| l as i128).sum::<i128>();
        (sum(&self.allocs) - sum(&self.frees)) as i64
    }
}

/// Space of one top vdev. `size = alloc + free + deferred`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TopSpace {
    pub vdev: u64,
    /// Bytes in metaslabs (`vs_space`).
    pub size: u64,
    /// Allocated bytes, including this txg's allocations.
    pub alloc: u64,
    /// Allocatable now.
    pub free: u64,
    /// Freed, waiting out the defer window.
    pub deferred: u64,
    /// A log vdev: not in the sums of [`SpaceStats`].
    pub log: bool,
}

/// Space of every top vdev and the sums over the normal class.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SpaceStats {
    pub size: u64,
    pub alloc: u64,
    pub free: u64,
    pub deferred: u64,
    pub tops: Vec<TopSpace>,
}

#[derive(Clone)]
pub(crate) struct TopVdev {
    pub ashift: u8,
    pub ms_shift: u32,
    pub ms: Vec<Metaslab>,
    /// The metaslab allocations go to first (OpenZFS's primary active metaslab).
    active: Option<usize>,
    /// Bytes the rotor leaves here before moving on (`mg_aliquot`).
    aliquot: u64,
    /// A log vdev (OpenZFS's log class): never chosen for pool blocks, and its space is not
    /// the pool's. Its metaslabs still take frees and keep their space maps.
    log: bool,
}

impl TopVdev {
    fn size(&self) -> u64 {
        self.ms.iter().map(|m| m.size).sum()
    }

    fn free(&self) -> u64 {
        self.ms.iter().map(|m| m.free.space()).sum()
    }

    /// Allocates in this vdev, avoiding the metaslabs in `avoid` if it can (ditto copies).
    /// Returns `(metaslab, offset)`.
    fn alloc(&mut self, asize: u64, txg: u64, avoid: &[usize]) -> Result<Option<(usize, u64)>> {
        if asize == 0 || asize & ((1u64 << self.ashift) - 1) != 0 || asize > (1u64 << self.ms_shift) {
            return Ok(None);
        }
        if let Some(a) = self.active.filter(|a| !avoid.contains(a)) {
            if let Some(off) = self.ms.get_mut(a).map_or(Ok(None), |m| m.alloc(asize, txg))? {
                return Ok(Some((a, off)));
            }
        }
        // Switch: the metaslab with the most free space that has a large enough segment.
        let pick = |avoid: &[usize]| {
            self.ms
                .iter()
                .enumerate()
                .filter(|(i, m)| !avoid.contains(i) && m.free.largest() >= asize)
                .max_by_key(|(i, m)| (m.free.space(), std::cmp::Reverse(*i)))
                .map(|(i, _)| i)
        };
        let Some(i) = pick(avoid).or_else(|| pick(&[])) else { return Ok(None) };
        let off = self.ms[i].alloc(asize, txg)?;
        if avoid.is_empty() {
            self.active = Some(i);
        }
        Ok(off.map(|o| (i, o)))
    }
}

/// Block allocator over the top-level vdevs of one pool. Not synchronized: wrap it in a
/// `Mutex`.
#[derive(Clone, Default)]
pub struct Allocator {
    pub(crate) tops: BTreeMap<u64, TopVdev>,
    /// Top vdev ids in rotor order.
    order: Vec<u64>,
    /// Index into `order` of the vdev first copies go to.
    rotor: usize,
    /// Bytes allocated at the rotor vdev since it became the rotor (`mca_aliquot`).
    rotor_bytes: u64,
    /// Metaslabs with untaken changes.
    pending: BTreeSet<(u64, u64)>,
    /// Metaslabs with deferred frees.
    deferring: BTreeSet<(u64, u64)>,
    /// While set, space freed in this txg or later stays deferred (a scan is reading blocks
    /// of a committed view older than those frees: their space must not be reused yet).
    hold_from: Option<u64>,
}

impl fmt::Debug for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Allocator {{ rotor: {:?}, rotor_bytes: {:#x}",
            self.order.get(self.rotor),
            self.rotor_bytes
        )?;
        for (id, t) in &self.tops {
            writeln!(
                f,
                "  top {id}: ashift {} ms_shift {} metaslabs {} size {:#x} free {:#x} active {:?} aliquot {:#x}",
                t.ashift,
                t.ms_shift,
                t.ms.len(),
                t.size(),
                t.free(),
                t.active,
                t.aliquot
            )?;
            for (i, m) in t.ms.iter().enumerate().filter(|(_, m)| !m.is_quiet() || m.free.space() != m.size) {
                writeln!(f, "    ms {i}: {m:?}")?;
            }
        }
        write!(f, "}}")
    }
}

impl Allocator {
    pub fn new() -> Allocator {
        Allocator::default()
    }

    /// Adds top vdev `vdev` with `usable` allocatable bytes, all free. Metaslab `i` covers
    /// `[i << ms_shift, (i + 1) << ms_shift)`; the tail past the last whole metaslab is unused.
    pub fn add_top(&mut self, vdev: u64, usable: u64, ashift: u8, ms_shift: u32) -> Result<()> {
        if self.tops.contains_key(&vdev) {
            return Err(Error::Invalid(format!("top vdev {vdev} added twice")));
        }
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
            return Err(Error::Invalid(format!("ashift {ashift} out of range")));
        }
        if ms_shift < u32::from(ashift) || ms_shift >= 63 {
            return Err(Error::Invalid(format!("ms_shift {ms_shift} with ashift {ashift}")));
        }
        let count = usable >> ms_shift;
        if count == 0 || count > MAX_MS_COUNT {
            return Err(Error::Invalid(format!("{count} metaslabs of 2^{ms_shift} in {usable:#x} bytes")));
        }
        let ms =
            (0..count).map(|i| Metaslab::new(i << ms_shift, 1 << ms_shift)).collect::<Result<Vec<_>>>()?;
        self.tops.insert(vdev, TopVdev { ashift, ms_shift, ms, active: None, aliquot: 0, log: false });
        self.reorder();
        Ok(())
    }

    /// Puts top vdev `vdev` in the log class (`log`) or the normal one. Log vdevs take no
    /// allocations through [`Allocator::alloc`] and count in no total of [`SpaceStats`].
    pub fn set_log(&mut self, vdev: u64, log: bool) -> Result<()> {
        self.tops.get_mut(&vdev).ok_or(Error::UnknownVdev(vdev))?.log = log;
        self.reorder();
        Ok(())
    }

    /// Takes top vdev `vdev` out (a removed log vdev): it must hold no allocated or deferred
    /// space and no change not yet taken.
    pub fn remove_top(&mut self, vdev: u64) -> Result<()> {
        let t = self.top(vdev)?;
        let busy = t.ms.iter().any(|m| m.free.space() != m.size || !m.is_quiet());
        if busy || self.pending.iter().chain(&self.deferring).any(|&(v, _)| v == vdev) {
            return Err(Error::Invalid(format!("top vdev {vdev} still holds allocated space")));
        }
        self.tops.remove(&vdev);
        self.reorder();
        Ok(())
    }

    /// Rebuilds the rotor over the normal-class vdevs.
    fn reorder(&mut self) {
        self.order = self.tops.iter().filter(|(_, t)| !t.log).map(|(&v, _)| v).collect();
        if self.rotor >= self.order.len() {
            self.rotor = 0;
            self.rotor_bytes = 0;
        }
        self.rebalance();
    }

    /// Grows top vdev `vdev` to `usable` allocatable bytes (`zpool online -e`): metaslabs
    /// `count..usable >> ms_shift` are appended, all free; the existing ones are untouched.
    /// Returns how many were added (none when `usable` holds no further whole metaslab).
    pub fn grow_top(&mut self, vdev: u64, usable: u64) -> Result<u64> {
        let t = self.tops.get_mut(&vdev).ok_or(Error::UnknownVdev(vdev))?;
        let (have, want) = (t.ms.len() as u64, usable >> t.ms_shift);
        if want > MAX_MS_COUNT {
            return Err(Error::Invalid(format!("{want} metaslabs of 2^{} in {usable:#x} bytes", t.ms_shift)));
        }
        for i in have..want {
            t.ms.push(Metaslab::new(i << t.ms_shift, 1 << t.ms_shift)?);
        }
        self.rebalance();
        Ok(want.saturating_sub(have))
    }

    /// Number of metaslabs of `vdev`.
    pub fn metaslab_count(&self, vdev: u64) -> Result<u64> {
        Ok(self.top(vdev)?.ms.len() as u64)
    }

    /// `(ashift, ms_shift)` of `vdev`.
    pub fn top_shifts(&self, vdev: u64) -> Result<(u8, u32)> {
        let t = self.top(vdev)?;
        Ok((t.ashift, t.ms_shift))
    }

    pub(crate) fn top(&self, vdev: u64) -> Result<&TopVdev> {
        self.tops.get(&vdev).ok_or(Error::UnknownVdev(vdev))
    }

    pub(crate) fn metaslab_mut(&mut self, vdev: u64, ms: u64) -> Result<&mut Metaslab> {
        let t = self.tops.get_mut(&vdev).ok_or(Error::UnknownVdev(vdev))?;
        let n = t.ms.len();
        usize::try_from(ms)
            .ok()
            .and_then(|i| t.ms.get_mut(i))
            .ok_or_else(|| Error::Invalid(format!("vdev {vdev} has {n} metaslabs, not {ms}")))
    }

    /// Recomputes each vdev's aliquot, as OpenZFS `metaslab_class_balance` does on sync: the
    /// base aliquot scaled by the vdev's size relative to the average and by its free fraction
    /// relative to the pool's, so the rotor spends time on each vdev in proportion to its free
    /// space. (Fixed point as in OpenZFS: 256 = average. One data disk per top vdev assumed.)
    fn rebalance(&mut self) {
        let groups = self.order.len() as u64;
        let (mc_space, mc_free) = self
            .tops
            .values()
            .filter(|t| !t.log)
            .fold((0u64, 0u64), |(s, f), t| (s + t.size(), f + t.free()));
        for t in self.tops.values_mut().filter(|t| !t.log) {
            let (vs_space, vs_free) = (t.size(), t.free());
            let mut aliquot = METASLAB_ALIQUOT as u128;
            if mc_space > 0 && vs_space > 0 {
                let ratio = vs_space / (mc_space / (groups * 256) + 1);
                aliquot = aliquot * ratio as u128 / 256;
                let vs_fr = vs_free / (vs_space / 65536 + 1);
                let mc_fr = mc_free / (mc_space / 256 + 1);
                aliquot = aliquot * (vs_fr / (mc_fr + 1)) as u128 / 256;
            }
            t.aliquot = u64::try_from(aliquot).unwrap_or(u64::MAX);
        }
    }

    /// Moves the rotor after an attempt on `order[idx]` (OpenZFS `metaslab_class_rotate`): on
    /// failure at once; on success once the vdev's aliquot is (nearly) used.
    fn rotate(&mut self, idx: usize, asize: u64, success: bool) {
        if self.order.len() < 2 || idx != self.rotor {
            return;
        }
        if success {
            self.rotor_bytes = self.rotor_bytes.saturating_add(asize);
            let aliquot = self.order.get(idx).and_then(|v| self.tops.get(v)).map_or(0, |t| t.aliquot);
            if self.rotor_bytes.saturating_add(asize / 2) < aliquot {
                return;
            }
        }
        self.rotor = (idx + 1) % self.order.len();
        self.rotor_bytes = 0;
    }

    /// Allocates `copies` regions of `asize` bytes in `txg`; returns `(vdev, offset)` per copy.
    /// Copies go to distinct top vdevs while there are enough (the next vdev after the previous
    /// copy's, as OpenZFS spreads ditto blocks), else to distinct metaslabs of a vdev already
    /// used if possible, else anywhere free; regions never overlap. All or nothing.
    pub fn alloc(&mut self, asize: u64, txg: u64, copies: usize) -> Result<Vec<(u64, u64)>> {
        if asize == 0 {
            return Err(Error::Invalid("zero-byte allocation".into()));
        }
        let got = self.alloc_sized(&|_| Some(asize), txg, copies)?;
        Ok(got.into_iter().map(|(v, off, _)| (v, off)).collect())
    }

    /// As [`Allocator::alloc`], for pools whose top-level vdevs differ in layout: the size a
    /// copy takes depends on the vdev it lands on (a RAID-Z vdev adds parity and padding, a
    /// larger ashift rounds further), so `asize_of(vdev)` gives it, or `None` when the block
    /// cannot go there. Returns `(vdev, offset, asize)` per copy.
    pub fn alloc_sized(
        &mut self,
        asize_of: &dyn Fn(u64) -> Option<u64>,
        txg: u64,
        copies: usize,
    ) -> Result<Vec<(u64, u64, u64)>> {
        if !(1..=SPA_DVAS_PER_BP).contains(&copies) {
            return Err(Error::Invalid(format!("{copies} copies")));
        }
        // The size a NoSpace error reports: the largest the block takes on any vdev.
        let report = self.order.iter().filter_map(|&v| asize_of(v)).max().unwrap_or(0);
        if self.order.is_empty() {
            return Err(Error::NoSpace { asize: report, copies });
        }
        let mut got: Vec<(usize, usize, u64, u64)> = Vec::with_capacity(copies);
        for _ in 0..copies {
            match self.alloc_copy(asize_of, txg, &got) {
                Ok(Some(x)) => got.push(x),
                res => {
                    // All or nothing: give back the copies already placed.
                    for &(idx, ms, off, asize) in &got {
                        let v = self.order[idx];
                        self.metaslab_mut(v, ms as u64)?.unalloc(off, asize, txg)?;
                    }
                    res?;
                    return Err(Error::NoSpace { asize: report, copies });
                }
            }
        }
        let mut out = Vec::with_capacity(copies);
        for (idx, ms, off, asize) in got {
            let v = self.order[idx];
            self.pending.insert((v, ms as u64));
            out.push((v, off, asize));
        }
        Ok(out)
    }

    /// One copy; `got` holds the copies already placed as `(order index, metaslab, offset,
    /// asize)`.
    fn alloc_copy(
        &mut self,
        asize_of: &dyn Fn(u64) -> Option<u64>,
        txg: u64,
        got: &[(usize, usize, u64, u64)],
    ) -> Result<Option<(usize, usize, u64, u64)>> {
        let n = self.order.len();
        let start = got.last().map_or(self.rotor, |&(idx, ..)| (idx + 1) % n);
        let first = got.is_empty();
        for reuse in [false, true] {
            if reuse && first {
                break;
            }
            for k in 0..n {
                let idx = (start + k) % n;
                let on_vdev: Vec<usize> = got.iter().filter(|g| g.0 == idx).map(|g| g.1).collect();
                if !reuse && !on_vdev.is_empty() {
                    continue;
                }
                let vdev = self.order[idx];
                let Some(asize) = asize_of(vdev).filter(|&a| a > 0) else {
                    if first {
                        self.rotate(idx, 0, false);
                    }
                    continue;
                };
                let top = self.tops.get_mut(&vdev).ok_or(Error::UnknownVdev(vdev))?;
                let res = top.alloc(asize, txg, &on_vdev)?;
                if first {
                    self.rotate(idx, asize, res.is_some());
                }
                if let Some((ms, off)) = res {
                    return Ok(Some((idx, ms, off, asize)));
                }
            }
        }
        Ok(None)
    }

    /// Allocates one copy of an intent log block (OpenZFS `zio_alloc_zil`): on a log vdev
    /// when the pool has one that takes it, else as [`Allocator::alloc_sized`] would.
    pub fn alloc_zil(&mut self, asize_of: &dyn Fn(u64) -> Option<u64>, txg: u64) -> Result<(u64, u64, u64)> {
        let logs: Vec<u64> = self.tops.iter().filter(|(_, t)| t.log).map(|(&v, _)| v).collect();
        for vdev in logs {
            let Some(asize) = asize_of(vdev).filter(|&a| a > 0) else { continue };
            let top = self.tops.get_mut(&vdev).ok_or(Error::UnknownVdev(vdev))?;
            if let Some((ms, off)) = top.alloc(asize, txg, &[])? {
                self.pending.insert((vdev, ms as u64));
                return Ok((vdev, off, asize));
            }
        }
        let got = self.alloc_sized(asize_of, txg, 1)?;
        got.into_iter().next().ok_or(Error::NoSpace { asize: 0, copies: 1 })
    }

    /// Allocates exactly `[offset, offset + asize)` of `vdev` in `txg` (OpenZFS
    /// `metaslab_claim`): the intent log blocks a crash left outside every space map are
    /// claimed at import, and a failed sync's undo gives them back. Fails, changing
    /// nothing, unless the range is free.
    pub fn claim(&mut self, vdev: u64, offset: u64, asize: u64, txg: u64) -> Result<()> {
        let bad = |why: &str| Error::BadFree { vdev, offset, asize, why: format!("claim: {why}") };
        let (ms, m) = self.locate(vdev, offset, asize).map_err(|e| bad(&e.to_string()))?;
        m.claim(offset, asize, txg).map_err(|e| bad(&e.to_string()))?;
        self.pending.insert((vdev, ms));
        Ok(())
    }

    /// Frees `[offset, offset + asize)` of `vdev` in syncing txg `txg`; the block was born in
    /// `birth_txg`. If it was allocated in `txg` and that allocation has not been taken yet,
    /// the space is free again at once and nothing reaches the space map (OpenZFS
    /// `metaslab_unalloc_dva`). Otherwise the free is recorded for `txg` and the space is
    /// reusable after `txg + TXG_DEFER_SIZE` has synced. Any inconsistency is an error and
    /// changes nothing.
    pub fn free(&mut self, vdev: u64, offset: u64, asize: u64, birth_txg: u64, txg: u64) -> Result<()> {
        let bad = |why: &str| Error::BadFree { vdev, offset, asize, why: why.to_string() };
        if birth_txg > txg {
            return Err(bad("born after the freeing txg"));
        }
        let (ms, m) = self.locate(vdev, offset, asize).map_err(|e| bad(&e.to_string()))?;
        let this_txg = m.allocating.get(&txg);
        let pending_whole = this_txg.is_some_and(|t| t.contains(offset, asize));
        let pending_part = this_txg.is_some_and(|t| t.intersects(offset, asize));
        let res = if birth_txg == txg && pending_whole {
            m.unalloc(offset, asize, txg)
        } else if pending_part {
            Err(Error::Range("overlaps an allocation of this txg that does not match the block".into()))
        } else {
            m.free(offset, asize, txg)
        };
        res.map_err(|e| bad(&e.to_string()))?;
        self.pending.insert((vdev, ms));
        Ok(())
    }

    /// Frees an intent log block in syncing txg `txg` as [`Allocator::free`] does, except
    /// that one allocated in `txg` itself does not become allocatable before `txg` has
    /// synced: the last durable ZIL header may still lead to it until then.
    pub fn free_zil(&mut self, vdev: u64, offset: u64, asize: u64, birth_txg: u64, txg: u64) -> Result<bool> {
        let bad = |why: &str| Error::BadFree { vdev, offset, asize, why: why.to_string() };
        let (ms, m) = self.locate(vdev, offset, asize).map_err(|e| bad(&e.to_string()))?;
        let pending_whole = m.allocating.get(&txg).is_some_and(|t| t.contains(offset, asize));
        if birth_txg == txg && pending_whole {
            m.unalloc_held(offset, asize, txg).map_err(|e| bad(&e.to_string()))?;
            self.pending.insert((vdev, ms));
            self.deferring.insert((vdev, ms));
            return Ok(true);
        }
        self.free(vdev, offset, asize, birth_txg, txg)?;
        Ok(false)
    }

    /// The metaslab holding all of `[offset, offset + len)`, checking alignment.
    fn locate(&mut self, vdev: u64, offset: u64, len: u64) -> Result<(u64, &mut Metaslab)> {
        let t = self.tops.get_mut(&vdev).ok_or(Error::UnknownVdev(vdev))?;
        let mask = (1u64 << t.ashift) - 1;
        if len == 0 || offset & mask != 0 || len & mask != 0 {
            return Err(Error::Invalid(format!("not a non-empty multiple of 2^{}", t.ashift)));
        }
        let ms = offset >> t.ms_shift;
        let m = usize::try_from(ms).ok().and_then(|i| t.ms.get_mut(i));
        match m {
            Some(m) if offset.checked_add(len).is_some_and(|e| e <= m.start + m.size) => Ok((ms, m)),
            Some(_) => Err(Error::Invalid("crosses a metaslab boundary".into())),
            None => Err(Error::Invalid("beyond the last metaslab".into())),
        }
    }

    /// Takes every allocation and free recorded for txgs `<= txg` since the last call, per
    /// metaslab (call after each sync pass). Taken frees start their defer wait.
    pub fn take_changes(&mut self, txg: u64) -> Result<Vec<MetaslabDelta>> {
        let mut out = Vec::new();
        for (vdev, ms) in std::mem::take(&mut self.pending) {
            let m = self.metaslab_mut(vdev, ms)?;
            let (allocs, frees) = m.take(txg)?;
            let start = m.start;
            let (still_pending, deferring) =
                (!m.allocating.is_empty() || !m.freeing.is_empty(), !m.deferred.is_empty());
            if still_pending {
                self.pending.insert((vdev, ms));
            }
            if deferring {
                self.deferring.insert((vdev, ms));
            }
            if allocs.is_empty() && frees.is_empty() {
                continue;
            }
            let rel = |t: &crate::RangeTree| t.iter().map(|(s, e)| (s - start, e - s)).collect();
            out.push(MetaslabDelta { vdev, ms, allocs: rel(&allocs), frees: rel(&frees) });
        }
        Ok(out)
    }

    /// Undoes every allocation and free recorded for `txg` and not yet taken: the sync of
    /// `txg` failed before its uberblock was written, so nothing durable references what it
    /// allocated (free again at once), and what it freed is still referenced (allocated
    /// again). The pool then retries the txg from its state before the sync.
    pub fn rollback_txg(&mut self, txg: u64) -> Result<()> {
        for (vdev, ms) in std::mem::take(&mut self.pending) {
            let m = self.metaslab_mut(vdev, ms)?;
            if let Some(t) = m.allocating.remove(&txg) {
                m.free.add_tree(&t)?;
            }
            if let Some(t) = m.held.remove(&txg) {
                m.free.add_tree(&t)?;
            }
            m.freeing.remove(&txg);
            if !m.allocating.is_empty() || !m.freeing.is_empty() {
                self.pending.insert((vdev, ms));
            }
        }
        Ok(())
    }

    /// `txg` has synced: space freed in txg `txg - TXG_DEFER_SIZE` (or earlier) becomes
    /// allocatable, and the rotor's per-vdev aliquots are recomputed. Fails, changing nothing,
    /// if changes of a txg `<= txg` were never taken.
    pub fn sync_done(&mut self, txg: u64) -> Result<()> {
        // Frees of txg >= hold stay deferred: release up to hold - 1 at most.
        let release_txg = match self.hold_from {
            Some(h) => txg.min((h + TXG_DEFER_SIZE).saturating_sub(1)),
            None => txg,
        };
        for &(vdev, ms) in &self.pending {
            if self.top(vdev)?.ms.get(ms as usize).is_some_and(|m| m.has_undrained(txg)) {
                return Err(Error::Undrained { txg });
            }
        }
        for (vdev, ms) in std::mem::take(&mut self.deferring) {
            let m = self.metaslab_mut(vdev, ms)?;
            m.release(release_txg)?;
            if !m.deferred.is_empty() || !m.held.is_empty() {
                self.deferring.insert((vdev, ms));
            }
        }
        self.rebalance();
        Ok(())
    }

    /// Keeps space freed in txg `from` or later deferred until [`Allocator::hold_frees`] is
    /// called with `None` (the next [`Allocator::sync_done`] then releases what is due).
    /// A scan sets it while it reads blocks of a committed view: blocks freed after that
    /// view must not be reallocated and overwritten under it.
    pub fn hold_frees(&mut self, from: Option<u64>) {
        self.hold_from = from;
    }

    /// Space per top vdev and in total.
    pub fn space(&self) -> SpaceStats {
        let mut s = SpaceStats::default();
        for (&vdev, t) in &self.tops {
            let mut ts = TopSpace { vdev, ..TopSpace::default() };
            for m in &t.ms {
                ts.size += m.size;
                ts.free += m.free.space();
                ts.deferred += m.deferred_space();
            }
            ts.alloc = ts.size - ts.free - ts.deferred;
            ts.log = t.log;
            s.tops.push(ts);
            if t.log {
                continue;
            }
            s.size += ts.size;
            s.alloc += ts.alloc;
            s.free += ts.free;
            s.deferred += ts.deferred;
        }
        s
    }

    /// Allocated bytes of one metaslab. Once every change is taken this is what the metaslab's
    /// space map says (`smp_alloc`).
    pub fn ms_alloc(&self, vdev: u64, ms: u64) -> Result<u64> {
        let t = self.top(vdev)?;
        let m = usize::try_from(ms).ok().and_then(|i| t.ms.get(i));
        m.map(|m| m.alloc_space()).ok_or_else(|| Error::Invalid(format!("vdev {vdev} has no metaslab {ms}")))
    }

    /// The free-segment histogram of one metaslab as its space map header keeps it
    /// (`smp_histogram`, feature `spacemap_histogram`), for a map of sector shift `sm_shift`.
    ///
    /// What OpenZFS's `metaslab_sync` writes for a loaded metaslab: the histogram rebuilt
    /// from the allocatable segments, then those freed but not yet allocatable (each tree
    /// counted on its own, as `space_map_histogram_add` does). A segment of `s` bytes counts
    /// in bucket `floor(log2 s) - sm_shift`; segments too big for the last bucket count
    /// there, weighted by how many last-bucket sizes they are (a power of two).
    pub fn free_histogram(&self, vdev: u64, ms: u64, sm_shift: u8) -> Result<[u64; HISTOGRAM_SIZE]> {
        let t = self.top(vdev)?;
        let m = usize::try_from(ms)
            .ok()
            .and_then(|i| t.ms.get(i))
            .ok_or_else(|| Error::Invalid(format!("vdev {vdev} has no metaslab {ms}")))?;
        let mut h = [0u64; HISTOGRAM_SIZE];
        let trees = std::iter::once(&m.free).chain(m.freeing.values()).chain(m.deferred.values());
        for (start, end) in trees.flat_map(|t| t.iter()) {
            let len = end - start;
            let Some(bucket) = (highbit64(len) as usize).checked_sub(1 + usize::from(sm_shift)) else {
                continue;
            };
            let last = HISTOGRAM_SIZE - 1;
            if bucket <= last {
                h[bucket] += 1;
            } else {
                let weight = 1u64.checked_shl((bucket - last) as u32).unwrap_or(u64::MAX);
                h[last] = h[last].saturating_add(weight);
            }
        }
        Ok(h)
    }

    /// Is all of `[offset, offset + len)` of `vdev` allocated (neither free nor freed)? The
    /// range may span metaslabs but must lie within them.
    pub fn is_allocated(&self, vdev: u64, offset: u64, len: u64) -> Result<bool> {
        self.walk_range(vdev, offset, len, |m, o, l| m.is_allocated(o, l))
    }

    /// Is all of `[offset, offset + len)` of `vdev` allocatable now?
    pub fn is_free(&self, vdev: u64, offset: u64, len: u64) -> Result<bool> {
        self.walk_range(vdev, offset, len, |m, o, l| m.free.contains(o, l))
    }

    fn walk_range(
        &self,
        vdev: u64,
        offset: u64,
        len: u64,
        f: impl Fn(&Metaslab, u64, u64) -> bool,
    ) -> Result<bool> {
        let t = self.top(vdev)?;
        let end = offset.checked_add(len).filter(|_| len > 0);
        let end = end.ok_or_else(|| Error::Invalid(format!("range {offset:#x}+{len:#x}")))?;
        let mut off = offset;
        let mut all = true;
        while off < end {
            let m = usize::try_from(off >> t.ms_shift).ok().and_then(|i| t.ms.get(i));
            let m = m.ok_or_else(|| Error::Invalid(format!("offset {off:#x} beyond the last metaslab")))?;
            let piece = end.min(m.start + m.size) - off;
            all &= f(m, off, piece);
            off += piece;
        }
        Ok(all)
    }
}
