//! Translation between metaslab trees and space map entries (OpenZFS module/zfs/space_map.c).
//!
//! On disk a metaslab's history is a log of entries whose offset and run are in units of
//! `2^sm_shift` (the vdev's ashift), relative to the metaslab start. Each `space_map_write`
//! call first appends a debug entry carrying the action (0 alloc, 1 free), the sync pass and
//! the txg (`space_map_write_intro_debug`), then one entry per segment. A segment becomes
//! one-word entries of at most `SM_RUN_MAX` units, or, when the spacemap_v2 feature is active
//! and the segment's offset or run does not fit one word, two-word entries of at most
//! `SM2_RUN_MAX` units (`space_map_write_impl` / `space_map_write_seg`); longer segments are
//! split. The vdev field of two-word entries in a metaslab's own map is `SM_NO_VDEVID`,
//! which the 24-bit field stores as 0, and loading ignores it.
//!
//! Loading (`space_map_load` into `ms_allocatable`) starts from "all free" and replays the
//! log: ALLOC removes space, FREE adds it back. A map whose ALLOC hits free-less space, whose
//! FREE hits already free space, or whose range leaves the metaslab is damaged; this is
//! reported instead of silently merged (OpenZFS would `zfs_panic_recover`).

use ondisk::spacemap::{SmEntry, SmType, SM2_RUN_MAX, SM_OFFSET_LIMIT, SM_RUN_MAX};

use crate::allocator::{Allocator, MetaslabDelta};
use crate::range_tree::RangeTree;
use crate::{Error, Result};

/// Debug-entry field limits (10-bit sync pass, 50-bit txg; include/sys/space_map.h).
const SM_DEBUG_SYNCPASS_LIMIT: u32 = 1 << 10;
const SM_DEBUG_TXG_LIMIT: u64 = 1 << 50;

/// Appends what one `space_map_write` of `segs` (metaslab-relative bytes) writes.
fn write_group(
    out: &mut Vec<SmEntry>,
    kind: SmType,
    segs: &[(u64, u64)],
    ashift: u8,
    debug: (u16, u64),
    spacemap_v2: bool,
) -> Result<()> {
    if segs.is_empty() {
        return Ok(());
    }
    let action = match kind {
        SmType::Alloc => 0,
        SmType::Free => 1,
    };
    out.push(SmEntry::Debug { action, sync_pass: debug.0, txg: debug.1 });
    let mask = (1u64 << ashift) - 1;
    for &(off, len) in segs {
        if len == 0 || off & mask != 0 || len & mask != 0 {
            return Err(Error::Invalid(format!("segment {off:#x}+{len:#x} not in whole 2^{ashift} units")));
        }
        let (mut start, mut size) = (off >> ashift, len >> ashift);
        let two_words = spacemap_v2 && (start >= SM_OFFSET_LIMIT || size > SM_RUN_MAX);
        if !two_words && start >= SM_OFFSET_LIMIT {
            return Err(Error::Invalid(format!("offset {start:#x} units needs spacemap_v2")));
        }
        let run_max = if two_words { SM2_RUN_MAX } else { SM_RUN_MAX };
        while size != 0 {
            let run = size.min(run_max);
            out.push(if two_words {
                SmEntry::TwoWord { kind, offset: start, run, vdev: 0 }
            } else {
                SmEntry::OneWord { kind, offset: start, run }
            });
            start += run;
            size -= run;
        }
    }
    Ok(())
}

fn check_debug(txg: u64, pass: u32) -> Result<(u16, u64)> {
    if pass >= SM_DEBUG_SYNCPASS_LIMIT || txg >= SM_DEBUG_TXG_LIMIT {
        return Err(Error::Invalid(format!("sync pass {pass} / txg {txg} do not fit a debug entry")));
    }
    Ok((pass as u16, txg))
}

/// The replay of one metaslab's space map: the allocated space, built entry by entry from
/// "nothing allocated" (OpenZFS `space_map_load` with `SM_ALLOC`). ALLOC of space already
/// allocated, FREE of space not allocated, and ranges outside the metaslab are damage and
/// reported with the entry's index, never merged silently.
#[derive(Clone, Debug)]
pub struct SpaceMapReplay {
    pub vdev: u64,
    pub ms: u64,
    /// The metaslab's first byte (vdev offset) and length.
    pub start: u64,
    pub size: u64,
    ashift: u8,
    /// Allocated space, in vdev offsets.
    pub allocated: RangeTree,
    entries: u64,
}

impl SpaceMapReplay {
    /// An empty replay of the metaslab at `[start, start + size)` of `vdev` whose map
    /// counts in units of `2^ashift` bytes.
    pub fn new(vdev: u64, ms: u64, start: u64, size: u64, ashift: u8) -> SpaceMapReplay {
        SpaceMapReplay { vdev, ms, start, size, ashift, allocated: RangeTree::new(), entries: 0 }
    }

    /// Applies the next entry.
    pub fn apply(&mut self, e: &SmEntry) -> Result<()> {
        let i = self.entries;
        self.entries += 1;
        let (kind, offset, run) = match *e {
            SmEntry::Debug { .. } => return Ok(()),
            SmEntry::OneWord { kind, offset, run } | SmEntry::TwoWord { kind, offset, run, .. } => {
                (kind, offset, run)
            }
        };
        let bad = |why: String| Error::BadSpaceMap { vdev: self.vdev, ms: self.ms, why };
        let unit = 1u64 << self.ashift.min(63);
        let off = offset.checked_mul(unit);
        let len = run.checked_mul(unit).filter(|&l| l > 0);
        let range = off.zip(len).filter(|&(o, l)| o.checked_add(l).is_some_and(|e| e <= self.size));
        let Some((off, len)) = range else {
            return Err(bad(format!("entry {i} ({e:?}) outside the metaslab of {:#x} bytes", self.size)));
        };
        let res = match kind {
            SmType::Alloc => self.allocated.add(self.start + off, len),
            SmType::Free => self.allocated.remove(self.start + off, len),
        };
        res.map_err(|_| {
            let what =
                if kind == SmType::Alloc { "allocates space not free" } else { "frees space already free" };
            bad(format!("entry {i} ({e:?}) {what}"))
        })
    }

    /// Allocated bytes so far.
    pub fn alloc_space(&self) -> u64 {
        self.allocated.space()
    }
}

fn relative(t: &RangeTree, start: u64) -> Vec<(u64, u64)> {
    t.iter().map(|(s, e)| (s - start, e - s)).collect()
}

impl Allocator {
    /// The entries `metaslab_sync` appends to the metaslab's space map for `delta` in sync pass
    /// `pass` of `txg`: a debug entry and the ALLOC entries (if any allocs), then a debug entry
    /// and the FREE entries (if any frees). `spacemap_v2`: whether that pool feature is active
    /// (it allows two-word entries for long runs).
    pub fn sm_entries(
        delta: &MetaslabDelta,
        ashift: u8,
        txg: u64,
        pass: u32,
        spacemap_v2: bool,
    ) -> Result<Vec<SmEntry>> {
        let debug = check_debug(txg, pass)?;
        let mut out = Vec::new();
        write_group(&mut out, SmType::Alloc, &delta.allocs, ashift, debug, spacemap_v2)?;
        write_group(&mut out, SmType::Free, &delta.frees, ashift, debug, spacemap_v2)?;
        Ok(out)
    }

    /// Rebuilds metaslab `ms` of `vdev` from its space map entries (replayed in order from
    /// "all free"). The metaslab must have no pending or deferred changes. On any error the
    /// metaslab is left as it was. Returns the allocated bytes (compare with `smp_alloc`).
    pub fn load_metaslab(&mut self, vdev: u64, ms: u64, entries: &[SmEntry]) -> Result<u64> {
        let mut r = self.replay(vdev, ms)?;
        for e in entries {
            r.apply(e)?;
        }
        self.install(r)
    }

    /// A replay of metaslab `ms` of `vdev`'s space map, to feed entry by entry (a space map
    /// can be far larger than memory should hold at once) and then [`Allocator::install`].
    pub fn replay(&self, vdev: u64, ms: u64) -> Result<SpaceMapReplay> {
        let t = self.top(vdev)?;
        let m = usize::try_from(ms).ok().and_then(|i| t.ms.get(i));
        let m =
            m.ok_or_else(|| Error::Invalid(format!("vdev {vdev} has {} metaslabs, not {ms}", t.ms.len())))?;
        Ok(SpaceMapReplay::new(vdev, ms, m.start, m.size, t.ashift))
    }

    /// Makes a finished replay the metaslab's state: what it did not allocate is free. The
    /// metaslab must have no pending or deferred changes. Returns the allocated bytes.
    pub fn install(&mut self, r: SpaceMapReplay) -> Result<u64> {
        let (vdev, ms) = (r.vdev, r.ms);
        let m = self.metaslab_mut(vdev, ms)?;
        if !m.is_quiet() {
            return Err(Error::BadSpaceMap {
                vdev,
                ms,
                why: "metaslab has changes in flight; load it before use".into(),
            });
        }
        let mut free = RangeTree::full(r.start, r.size)?;
        for (s, e) in r.allocated.iter() {
            free.remove(s, e - s)?;
        }
        m.free = free;
        Ok(m.alloc_space())
    }
    /// Entries that replace metaslab `ms`'s whole space map with its current state, as OpenZFS
    /// `metaslab_condense` writes them: ALLOC of the whole metaslab, FREE of the allocatable
    /// space, FREE of the deferred frees and of allocations not yet taken (those still get their
    /// ALLOC from a later delta; frees not yet taken stay allocated here and get their FREE
    /// later). Write these into the truncated map instead of the deltas taken so far.
    pub fn condense_entries(
        &self,
        vdev: u64,
        ms: u64,
        txg: u64,
        pass: u32,
        spacemap_v2: bool,
    ) -> Result<Vec<SmEntry>> {
        let t = self.top(vdev)?;
        let m = usize::try_from(ms).ok().and_then(|i| t.ms.get(i));
        let m = m.ok_or_else(|| Error::Invalid(format!("vdev {vdev} has no metaslab {ms}")))?;
        let debug = check_debug(txg, pass)?;
        let mut condense = RangeTree::new();
        for tree in m.deferred.values().chain(m.allocating.values()) {
            condense.add_tree(tree)?;
        }
        let mut out = Vec::new();
        write_group(&mut out, SmType::Alloc, &[(0, m.size)], t.ashift, debug, spacemap_v2)?;
        write_group(&mut out, SmType::Free, &relative(&m.free, m.start), t.ashift, debug, spacemap_v2)?;
        write_group(&mut out, SmType::Free, &relative(&condense, m.start), t.ashift, debug, spacemap_v2)?;
        Ok(out)
    }
}
