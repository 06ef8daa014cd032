//! # Destroying datasets and snapshots in the open txg (`zfs destroy`)
//!
//! The DSL edits (deadlists, chains, accounting, names) live in `dsl::destroy`; this layer
//! supplies what needs the SPA: freeing DVAs through the allocator, walking a head
//! dataset's objset to free every block it alone references (OpenZFS
//! `old_synchronous_dataset_destroy`: blocks born after the dataset's previous snapshot),
//! and giving back the dataset's per-dataset feature references.
//!
//! Everything that could refuse is checked before the MOS is touched, so a refused destroy
//! leaves the open txg as it was.

use crate::writer::{bp_dsize, PoolWriter};
use crate::{PoolError, Result};
use dmu::traverse::{traverse_objset, TraverseOpts};
use dmu::Objset;
use dsl::write::SpaceDelta;
use ondisk::blkptr::BlkPtr;
use ondisk::ByteOrder;

fn refuse(e: impl std::fmt::Display) -> PoolError {
    PoolError::Unsupported(e.to_string())
}

impl PoolWriter {
    /// Destroys snapshot object `snap` in the open txg.
    pub fn destroy_snapshot(&mut self, snap: u64) -> Result<()> {
        dsl::destroy::check_destroy_snapshot(&self.mos, &mut self.mos_zaps, snap)?;
        let phys = dsl::write::ds_phys(&self.mos, snap)?;
        self.scan.ds_destroyed(snap, &phys);
        self.ds_release_features(snap)?;
        let txg = self.txg;
        let alloc = &self.alloc;
        let mut free = |bp: &BlkPtr| -> dsl::Result<()> {
            if bp.is_hole() || bp.is_embedded() {
                return Ok(());
            }
            for d in bp.dvas() {
                alloc
                    .free_dva(&d, bp.logical_birth(), txg)
                    .map_err(|e| dsl::DslError::Corrupt { what: "free", detail: e.to_string() })?;
            }
            Ok(())
        };
        dsl::destroy::destroy_snapshot(&mut self.mos, &mut self.mos_zaps, snap, &mut free)?;
        // Recorded on the directory while it still has its head (a file system destroyed
        // with its snapshots loses the directory in the same txg).
        let head = dsl::write::dir_phys(&self.mos, phys.dir_obj)?.head_dataset_obj;
        if head != 0 {
            self.snapshots_changed(head)?;
        }
        Ok(())
    }

    /// `zfs destroy -d` of snapshot `snap`: destroyed now when it can be; a snapshot held
    /// by clones or user holds is marked `DS_FLAG_DEFER_DESTROY` instead (OpenZFS
    /// `dsl_destroy_snapshot_check` with `defer`) and goes when its last clone does
    /// ([`PoolWriter::destroy_head`]). Returns whether it was destroyed now.
    pub fn defer_destroy_snapshot(&mut self, snap: u64) -> Result<bool> {
        let mut phys = dsl::write::ds_phys(&self.mos, snap)?;
        let held = phys.num_children > 1
            || dsl::destroy::zap_count(&self.mos, &mut self.mos_zaps, phys.next_clones_obj)? > 0
            || dsl::destroy::zap_count(&self.mos, &mut self.mos_zaps, phys.userrefs_obj)? > 0;
        if !held {
            self.destroy_snapshot(snap)?;
            return Ok(true);
        }
        if phys.flags & ondisk::dsl::DS_FLAG_DEFER_DESTROY == 0 {
            phys.flags |= ondisk::dsl::DS_FLAG_DEFER_DESTROY;
            dsl::write::set_ds_phys(&mut self.mos, snap, &phys)?;
        }
        Ok(false)
    }

    /// Destroys head dataset `ds` (no snapshots, no children) and its directory. A clone's
    /// origin snapshot marked for deferred destruction goes with its last clone, when
    /// nothing else holds it.
    pub fn destroy_head(&mut self, ds: u64) -> Result<()> {
        let origin = dsl::write::ds_phys(&self.mos, ds)
            .and_then(|p| dsl::write::dir_phys(&self.mos, p.dir_obj))
            .map(|d| d.origin_obj)?;
        self.destroy_head_only(ds)?;
        if origin != 0 {
            self.finish_deferred_destroy(origin)?;
        }
        Ok(())
    }

    /// Carries out the deferred destruction of snapshot `snap` (`zfs destroy -d`) once
    /// nothing keeps it: no clone, no hold, and nothing rzfs cannot destroy around. Run when
    /// a clone goes and when a hold is released. Returns whether it was destroyed.
    pub fn finish_deferred_destroy(&mut self, snap: u64) -> Result<bool> {
        let phys = dsl::write::ds_phys(&self.mos, snap)?;
        if phys.flags & ondisk::dsl::DS_FLAG_DEFER_DESTROY == 0
            || dsl::destroy::check_destroy_snapshot(&self.mos, &mut self.mos_zaps, snap).is_err()
        {
            return Ok(false);
        }
        self.destroy_snapshot(snap)?;
        Ok(true)
    }

    /// The blocks head dataset `ds` alone references: those born after its previous
    /// snapshot (or origin), found by walking its objset, and its root block if that is as
    /// young. Refuses when a block cannot be read (nothing may then be freed) or when the
    /// objset has an intent log that is not this writer's chain (its blocks are not in the
    /// walk; the writer's own are freed with it, `Zil::abandon`).
    fn blocks_born_since_snapshot(&self, ds: u64, what: &str) -> Result<Vec<BlkPtr>> {
        let phys = dsl::write::ds_phys(&self.mos, ds)?;
        let root = BlkPtr::parse(&phys.bp, ByteOrder::Little)?;
        let mut doomed = Vec::new();
        if root.is_hole() {
            return Ok(doomed);
        }
        let os = Objset::open(&self.reader, &root)?;
        // A chain this writer keeps is freed with the dataset's writer (`Zil::abandon`).
        let ours = self.datasets.get(&ds).is_some_and(|w| w.zil.owns(&os.phys.zil.log));
        if !os.phys.zil.log.is_hole() && !ours {
            return Err(refuse(
                "the dataset's intent log is not empty; import it with OpenZFS to replay it first",
            ));
        }
        let mut errors = Vec::new();
        let opts = TraverseOpts { min_birth: phys.prev_snap_txg, read_data: false, resume: None };
        traverse_objset(
            &os,
            opts,
            &mut |v| {
                doomed.push(*v.bp);
                Ok(())
            },
            &mut |bp, obj, e| errors.push(format!("object {obj} {bp}: {e}")),
        )?;
        if let Some(e) = errors.first() {
            return Err(refuse(format!("cannot read every block of the dataset ({e}); nothing was {what}")));
        }
        if root.logical_birth() > phys.prev_snap_txg {
            doomed.push(root);
        }
        Ok(doomed)
    }

    /// Removes the resume state of a receive (`DS_FIELD_RESUME_*`) from dataset `ds`, if any.
    pub fn clear_resume(&mut self, ds: u64) -> Result<()> {
        if !self.is_zapified(ds)? {
            return Ok(());
        }
        for k in crate::writer::RESUME_FIELDS {
            self.mos_zaps
                .remove(&self.mos, ds, k.as_bytes())
                .map_err(|e| PoolError::Invalid(e.to_string()))?;
        }
        if let Some(d) = self.datasets.get_mut(&ds) {
            d.resume = None;
        }
        Ok(())
    }

    /// Frees `blocks` in the open txg; returns their total space.
    fn free_blocks(&mut self, blocks: &[BlkPtr]) -> Result<SpaceDelta> {
        let ratios: Vec<u64> = self.top_info.iter().map(|t| t.deflate_ratio).collect();
        let mut freed = SpaceDelta::default();
        for bp in blocks {
            if bp.is_hole() || bp.is_embedded() {
                continue;
            }
            freed.add(SpaceDelta::of(bp, bp_dsize(&ratios, bp)));
            for d in bp.dvas() {
                self.alloc.free_dva(&d, bp.logical_birth(), self.txg)?;
            }
        }
        Ok(freed)
    }

    /// `zfs rollback` of head dataset `ds` to its latest snapshot in the open txg: the
    /// blocks born since are freed, the DSL then points the head at the snapshot's objset
    /// (`dsl::destroy::rollback_head`). Changes of the dataset not yet synced are dropped
    /// with its open writer.
    pub fn rollback_head(&mut self, ds: u64) -> Result<()> {
        let phys = dsl::write::ds_phys(&self.mos, ds)?;
        if phys.prev_snap_obj == 0
            || dsl::write::ds_phys(&self.mos, phys.prev_snap_obj)?.dir_obj != phys.dir_obj
        {
            return Err(refuse("the dataset has no snapshot to roll back to"));
        }
        // The snapshot must fit under the head's refquota (`dsl_dataset_rollback_check`).
        let refquota = crate::txg::head_space(self, ds)?.refquota;
        let snap_refd = dsl::write::ds_phys(&self.mos, phys.prev_snap_obj)?.referenced_bytes;
        if refquota != 0 && snap_refd > refquota {
            return Err(PoolError::QuotaExceeded(format!(
                "disk quota exceeded: the snapshot references {snap_refd} bytes, over the refquota of {refquota}"
            )));
        }
        let doomed = self.blocks_born_since_snapshot(ds, "rolled back")?;
        self.remove_dataset_writer(ds)?;
        self.clear_resume(ds)?;
        let freed = self.free_blocks(&doomed)?;
        dsl::destroy::rollback_head(&mut self.mos, &mut self.mos_zaps, ds, freed)?;
        Ok(())
    }

    fn destroy_head_only(&mut self, ds: u64) -> Result<()> {
        dsl::destroy::check_destroy_head(&self.mos, &mut self.mos_zaps, ds)?;
        let phys = dsl::write::ds_phys(&self.mos, ds)?;
        let doomed = self.blocks_born_since_snapshot(ds, "destroyed")?;
        // The dataset's open writer, if any, goes (back again if this txg is undone).
        self.remove_dataset_writer(ds)?;
        self.scan.ds_destroyed(ds, &phys);
        self.release_bookmarks(ds)?;
        self.ds_release_features(ds)?;
        self.errlog_drop_head(ds)?;
        let freed = self.free_blocks(&doomed)?;
        // A zapified directory (OpenZFS adds fields to some) holds an extensible_dataset
        // reference, given back when its object is freed (`dmu_object_free_zapified`).
        let dir_zapified = self
            .mos
            .dnode(phys.dir_obj)?
            .is_some_and(|d| d.object_type == crate::dsfeatures::OTN_ZAP_METADATA);
        dsl::destroy::destroy_head(&mut self.mos, &mut self.mos_zaps, ds, freed)?;
        if dir_zapified {
            self.feature_adjust("extensible_dataset", -1)?;
        }
        Ok(())
    }
}
