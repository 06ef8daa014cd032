//! # Growing top-level vdevs onto bigger devices (`zpool online -e`, `autoexpand`)
//!
//! Theory. A top-level vdev's allocatable size (`asize` in its configuration) is fixed when
//! it is created: what its smallest leaf allows (a mirror: that leaf's allocatable bytes; a
//! RAID-Z of n: n times them). When every leaf has been replaced by a bigger device, or
//! the devices themselves grew (a file extended, a LUN resized), the vdev may grow into the
//! new space. As OpenZFS's `vdev_expand`:
//!
//! * the leaves' sizes are looked at again ([`vdev::BlockDevice::refresh_size`]) and the
//!   vdev's *potential* size computed as at creation (leaf: the device aligned down to a
//!   whole label, less the front and back labels; mirror-like: the smallest child; RAID-Z:
//!   the smallest child times the width), aligned down to a sector; a leaf without a
//!   device leaves the vdev as it is (it could come back small);
//! * `asize` becomes the potential size, and the metaslabs that now fit (`asize >>
//!   ms_shift`, the metaslab size never changes) are appended: zero entries in the
//!   vdev's `metaslab_array` (a metaslab's space map object is created when it is first
//!   changed) and free metaslabs in the allocator;
//! * the configuration is dirty: the next sync writes it to the MOS and to every label;
//!   the back labels go to the new end of each device (their offsets follow the device's
//!   size), and the old back labels, now inside the allocatable space, are plain free
//!   space.
//!
//! `zpool online -e POOL DEV` expands the top-level vdev holding DEV (after bringing DEV
//! online as `online` does); with the `autoexpand` pool property on, the sync thread's
//! periodic device check (`Spa::retire_check`) expands every vdev that can grow, so a
//! mirror whose last small disk was replaced grows by itself.

use crate::txg::Spa;
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use std::sync::Arc;
use vdev::{Vdev, VdevKind};

/// The allocatable bytes `v`'s leaves allow now (sizes looked at again); `None` when a leaf
/// has no device or `v` is not a mirror, RAID-Z or leaf.
fn potential(v: &Vdev) -> Option<u64> {
    match v.kind() {
        k if k.is_leaf() => {
            let dev = v.device()?;
            dev.refresh_size().ok()?;
            Some(crate::create::leaf_asize(dev.as_ref()))
        }
        k if k.is_mirror_like() => {
            v.children().iter().map(potential).collect::<Option<Vec<_>>>()?.into_iter().min()
        }
        VdevKind::Raidz { .. } => {
            let min = v.children().iter().map(potential).collect::<Option<Vec<_>>>()?.into_iter().min()?;
            Some(min * v.children().len() as u64)
        }
        _ => None,
    }
}

impl PoolWriter {
    /// The size top-level vdev `id` could grow to now (its current size when it cannot
    /// grow), without changing anything.
    pub fn expandable(&self, id: usize) -> Option<(u64, u64)> {
        let t = self.tops.get(id)?;
        let info = self.top_info.get(id)?;
        let sector = 1u64 << t.ashift();
        let pot = potential(t).map_or(info.asize, |p| p - p % sector);
        Some((info.asize, pot.max(info.asize)))
    }

    /// Grows top-level vdev `id` to what its leaves allow (see the module comment); the
    /// change is the open txg's. Returns (old, new) allocatable bytes when it grew.
    pub fn expand_top(&mut self, id: usize) -> Result<Option<(u64, u64)>> {
        let Some((old, new)) = self.expandable(id) else {
            return Err(PoolError::Invalid(format!("no top-level vdev {id}")));
        };
        if new <= old {
            return Ok(None);
        }
        let info = self.top_info[id].clone();
        let (have, want) = (old >> info.ms_shift, new >> info.ms_shift);
        if want > have {
            let zeros = vec![0u8; ((want - have) * 8) as usize];
            self.mos.write(info.ms_array, have * 8, &zeros)?;
            self.alloc.grow_top(id as u64, new)?;
        }
        self.top_info[id].asize = new;
        self.config_dirty = true;
        let name = self.vdev_label(&self.tops[id].clone());
        self.note_internal("vdev online", &format!("expand vdev={name} asize={old}->{new}"));
        Ok(Some((old, new)))
    }
}

impl Spa {
    /// `zpool online -e POOL DEV`: brings DEV online (as [`Spa::online`]) and grows its
    /// top-level vdev to what its leaves allow now. Returns `online`'s warning, if any.
    pub fn online_expand(self: &Arc<Self>, name: &str) -> Result<Option<String>> {
        let warn = self.online(name)?;
        self.run_syncing(|w| {
            let leaf = w.find_vdev(name).filter(|v| v.kind().is_leaf()).map(|v| v.guid());
            let leaf = leaf.ok_or_else(|| {
                PoolError::NotFound(format!("cannot expand {name}: no such device in pool"))
            })?;
            let id = w.top_of(leaf).map(|t| t.id() as usize).ok_or_else(|| {
                PoolError::NotFound(format!("cannot expand {name}: no such device in pool"))
            })?;
            if w.expand_top(id)?.is_some() {
                w.sync()?;
            }
            Ok(())
        })?;
        Ok(warn)
    }

    /// Bytes the pool could grow by with `zpool online -e` (`expandsize`): per top-level
    /// vdev, its potential growth in whole metaslabs (OpenZFS's `vs_esize`).
    pub fn expand_size(&self) -> u64 {
        let w = self.writer_locked();
        (0..w.tops.len())
            .filter_map(|id| {
                let (old, new) = w.expandable(id)?;
                let ms = 1u64 << w.top_info.get(id)?.ms_shift;
                Some((new - old) / ms * ms)
            })
            .sum()
    }

    /// With `autoexpand=on`, grows every top-level vdev whose leaves allow more space (run
    /// by the sync thread's device check). Returns how many grew.
    pub(crate) fn autoexpand_check(self: &Arc<Self>) -> usize {
        // The common case (nothing to grow) looks without a txg's bookkeeping.
        {
            let mut w = self.writer_locked();
            if !self.is_active() || w.pool_prop_u64("autoexpand").ok().flatten().unwrap_or(0) != 1 {
                return 0;
            }
            if !(0..w.tops.len()).any(|id| w.expandable(id).is_some_and(|(old, new)| new > old)) {
                return 0;
            }
        }
        let r = self.run_syncing(|w| {
            if w.pool_prop_u64("autoexpand").ok().flatten().unwrap_or(0) != 1 {
                return Ok(0);
            }
            let mut grew = 0;
            for id in 0..w.tops.len() {
                if let Some((old, new)) = w.expand_top(id)? {
                    eprintln!(
                        "rzfsd: pool '{}': autoexpand: top-level vdev {id} grew from {old} to {new} bytes",
                        w.name
                    );
                    grew += 1;
                }
            }
            if grew > 0 {
                w.sync()?;
            }
            Ok(grew)
        });
        r.unwrap_or_else(|e| {
            eprintln!("rzfsd: pool '{}': autoexpand: {e}", self.name());
            0
        })
    }
}
