//! # Dirty time logs in the MOS (OpenZFS `vdev_dtl_sync`, `vdev_dtl_load`)
//!
//! Theory. Each leaf's DTL ([`vdev::dtl`]) lives in memory on the leaf and, once it has
//! ever been non-empty, in a space map object of the MOS named by the leaf's `DTL` config
//! entry: offsets are txgs (start 0, shift 0), every range an ALLOC entry, the map
//! rewritten whole (truncated, then one debug entry and the ranges) whenever it changed,
//! as `vdev_dtl_sync` does. The object is created in the txg that first needs it, and the
//! configuration (which names it) is rewritten in that txg.
//!
//! What goes in: at the start of the sync of txg T, T is added to every leaf that cannot
//! take writes (offline, faulted, absent), and to every leaf a write to which failed since
//! the last look (`Vdev::take_missed`); the DTL of the synced txg is written in the same
//! MOS. A leaf that fails during the MOS passes of T is recorded when T commits and written
//! with T + 1. What comes out: a scan that finishes without errors excises `[0, max_txg]`
//! from the leaves it covered ([`PoolWriter::dtl_scan_done`]).
//!
//! [`PoolWriter::dtl_written`] is what the MOS holds for each leaf; it is part of the txg
//! checkpoint, so a failed sync attempt rewrites the DTLs on its retry.

use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use ondisk::spacemap::{SmEntry, SmType, SpaceMapPhys, SM_RUN_MAX};
use ondisk::ByteOrder;
use vdev::dtl::Dtl;
use vdev::Vdev;

/// Block size of DTL space map objects (`zfs_vdev_dtl_sm_blksz`).
pub const DTL_SM_BLKSZ: u64 = 4096;

fn err(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(format!("DTL: {e}"))
}

/// The space map entries of a DTL written in `txg`: a debug entry, then each range as
/// one-word ALLOC entries of at most `SM_RUN_MAX` txgs.
pub fn dtl_entries(d: &Dtl, txg: u64) -> Result<Vec<SmEntry>> {
    let mut out = Vec::new();
    if d.is_empty() {
        return Ok(out);
    }
    out.push(SmEntry::Debug { action: 0, sync_pass: 1, txg });
    for (mut start, mut left) in d.ranges() {
        while left > 0 {
            let run = left.min(SM_RUN_MAX);
            out.push(SmEntry::range(SmType::Alloc, start, run, None).map_err(err)?);
            start += run;
            left -= run;
        }
    }
    Ok(out)
}

/// Reads DTL space map `obj` of the MOS.
pub fn load_dtl(mos: &dmu::Objset, obj: u64) -> Result<Dtl> {
    let mut d = Dtl::new();
    crate::spacemaps::for_each_entry(mos, obj, &mut |e| {
        match *e {
            SmEntry::OneWord { kind: SmType::Alloc, offset, run }
            | SmEntry::TwoWord { kind: SmType::Alloc, offset, run, .. } => d.add(offset, run),
            SmEntry::OneWord { kind: SmType::Free, offset, run }
            | SmEntry::TwoWord { kind: SmType::Free, offset, run, .. } => {
                d.remove(offset, offset.saturating_add(run))
            }
            SmEntry::Debug { .. } => {}
        }
        Ok(())
    })?;
    Ok(d)
}

/// Every leaf of `tops`.
pub fn all_leaves(tops: &[std::sync::Arc<Vdev>]) -> Vec<&Vdev> {
    tops.iter().flat_map(|t| t.leaves()).collect()
}

impl PoolWriter {
    /// Does some leaf's DTL differ from what the MOS holds (a sync must write it)?
    pub fn dtl_pending(&self) -> bool {
        all_leaves(&self.tops).iter().any(|l| {
            let d = l.dtl();
            match self.dtl_written.get(&l.guid()) {
                Some(w) => *w != d,
                None => !d.is_empty(),
            }
        })
    }

    /// Records txg `txg` on the leaves that will miss it or missed writes since the last
    /// look; writes every DTL that changed (before the MOS passes of `txg`).
    pub(crate) fn sync_dtls(&mut self, txg: u64) -> Result<()> {
        let leaves: Vec<(u64, Dtl)> = all_leaves(&self.tops)
            .into_iter()
            .map(|l| {
                if !l.writable() || l.take_missed() {
                    l.dtl_add(txg, 1);
                }
                (l.guid(), l.dtl())
            })
            .collect();
        for (guid, d) in leaves {
            let same = match self.dtl_written.get(&guid) {
                Some(w) => *w == d,
                None => d.is_empty(),
            };
            if same {
                continue;
            }
            let obj = match self.dtl_objs.get(&guid) {
                Some(&o) => o,
                None => {
                    let o = self.alloc_space_map(DTL_SM_BLKSZ)?;
                    self.dtl_objs.insert(guid, o);
                    // The configuration names the object.
                    self.config_dirty = true;
                    o
                }
            };
            let entries = dtl_entries(&d, txg)?;
            let bytes = ondisk::spacemap::encode_entries(&entries, ByteOrder::Little, DTL_SM_BLKSZ as usize)
                .map_err(err)?;
            self.mos.free_range(obj, 0, u64::MAX)?;
            if !bytes.is_empty() {
                self.mos.write(obj, 0, &bytes)?;
            }
            // DTL maps get a histogram header too when `spacemap_histogram` is enabled, which
            // nothing fills in (OpenZFS's `vdev_dtl_sync` neither): it keeps size and contents.
            let histogram = match self.mos.dnode(obj)? {
                Some(dn) if usize::from(dn.bonuslen) >= ondisk::spacemap::SPACE_MAP_PHYS_SIZE => {
                    SpaceMapPhys::parse(&dn.bonus, ByteOrder::Little).map_err(err)?.histogram
                }
                _ => None,
            };
            let phys =
                SpaceMapPhys { object: obj, length: bytes.len() as u64, alloc: d.len() as i64, histogram };
            self.mos.set_bonus(obj, phys.encode(ByteOrder::Little))?;
            self.dtl_written.insert(guid, d);
        }
        Ok(())
    }

    /// After txg `txg` committed: leaves whose writes failed during its MOS passes missed it.
    pub(crate) fn dtl_note_missed(&mut self, txg: u64) {
        for l in all_leaves(&self.tops) {
            if l.take_missed() {
                l.dtl_add(txg, 1);
            }
        }
    }

    /// Loads the DTLs named by the configuration, (leaf guid, object) pairs read from the
    /// committed MOS `mos`, into the leaves (import).
    pub(crate) fn load_dtls(&mut self, mos: &dmu::Objset, objs: &[(u64, u64)]) -> Result<()> {
        for &(guid, obj) in objs {
            let d = load_dtl(mos, obj).map_err(|e| err(format!("leaf {guid}, object {obj}: {e}")))?;
            // Added to what the import found missing (a leaf behind on uberblocks).
            if let Some(l) = self.tops.iter().find_map(|t| t.find(guid)) {
                let mut all = l.dtl();
                all.union(&d);
                l.set_dtl(all);
            }
            self.dtl_objs.insert(guid, obj);
            self.dtl_written.insert(guid, d);
        }
        Ok(())
    }

    /// The txg range a resilver must cover: every txg some *writable* leaf is missing,
    /// as (min, max) (`vdev_resilver_needed`). `None` when no leaf needs one.
    pub fn resilver_range(&self) -> Option<(u64, u64)> {
        let mut range: Option<(u64, u64)> = None;
        for l in all_leaves(&self.tops).into_iter().filter(|l| l.writable()) {
            let d = l.dtl();
            if let (Some(lo), Some(hi)) = (d.min(), d.max()) {
                range = Some(match range {
                    Some((a, b)) => (a.min(lo), b.max(hi)),
                    None => (lo, hi),
                });
            }
        }
        range
    }

    /// A scan that ran to `max_txg` finished. If it found no errors, every leaf that could
    /// take writes throughout it holds every block born up to `max_txg`: those txgs leave
    /// its DTL (`vdev_dtl_reassess` with `scrub_done`). Returns the guids of the leaves
    /// whose DTL became empty.
    pub fn dtl_scan_done(&mut self, max_txg: u64, errors: u64) -> Vec<u64> {
        let mut emptied = Vec::new();
        if errors != 0 {
            return emptied;
        }
        for l in all_leaves(&self.tops) {
            if l.scan_gap() || !l.writable() {
                continue;
            }
            let mut d = l.dtl();
            if d.is_empty() {
                continue;
            }
            d.remove(0, max_txg.saturating_add(1));
            if d.is_empty() {
                emptied.push(l.guid());
            }
            l.set_dtl(d);
        }
        emptied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_split_long_ranges() {
        let mut d = Dtl::new();
        d.add(4, 1);
        d.add(100, SM_RUN_MAX + 5);
        let e = dtl_entries(&d, 77).unwrap();
        assert_eq!(e[0], SmEntry::Debug { action: 0, sync_pass: 1, txg: 77 });
        assert_eq!(e.len(), 4);
        assert_eq!(e[1], SmEntry::OneWord { kind: SmType::Alloc, offset: 4, run: 1 });
        assert_eq!(e[2], SmEntry::OneWord { kind: SmType::Alloc, offset: 100, run: SM_RUN_MAX });
        assert_eq!(e[3], SmEntry::OneWord { kind: SmType::Alloc, offset: 100 + SM_RUN_MAX, run: 5 });
        assert!(dtl_entries(&Dtl::new(), 5).unwrap().is_empty());
    }
}
