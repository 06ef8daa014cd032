//! # `filesystem_limit` / `snapshot_limit`: activating the feature and initializing counts
//!
//! The counts themselves are kept by the DSL ([`dsl::limits`], where the rules are); this
//! module does what needs the pool: the `filesystem_limits` feature's refcount and the
//! zapify (an `extensible_dataset` reference) of each directory that gets counts.
//!
//! Facts (OpenZFS `dsl_dir.c`, `dsl_dataset.c`, `zfs_ioctl.c`):
//! - Setting either limit to a number (not `none`) makes the feature active — its refcount
//!   goes from 0 to 1 the first time and then stays — and initializes the counts of the
//!   directory and everything below it that has none (`dsl_dir_activate_fs_ss_limit`). The
//!   feature must be enabled; setting `none` needs nothing.
//! - While the feature is active, a directory created for a new file system, volume or
//!   clone is zapified with both counts at zero (`dsl_dataset_create_sync`), and a directory
//!   being renamed is initialized first so its counts can move (`dsl_dir_rename_check`).
//! - Hidden directories (`$MOS`, `$FREE`, `$ORIGIN`) are never counted; temporary (`%`)
//!   snapshots are left out when a subtree is counted.
//!
//! Enforcement: OpenZFS never holds a caller to a limit that caller may change (root in the
//! global zone, or one delegated the property), only other delegated users
//! (`dsl_enforce_ds_ss_limits`). rzfsd takes changes from root and its own user only
//! (`cli::access`) and has no `zfs allow` yet, so every caller is one OpenZFS would not
//! limit: limits are stored, counted and shown, and never refuse a create or snapshot.

use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use dsl::limits::{self, Count};
use ondisk::dsl::mos_keys as K;
use zap::write::ZapVal;

/// The feature's short name.
pub const FEATURE: &str = "filesystem_limits";

fn bad(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(e.to_string())
}

impl PoolWriter {
    /// Whether `filesystem_limits` is active (some limit was ever set). A pool of version
    /// 1-28 has no feature objects and never is.
    pub fn limits_active(&mut self) -> Result<bool> {
        let featured =
            self.mos_zaps.lookup_u64(&self.mos, K::DIRECTORY_OBJECT, K::FEATURES_FOR_READ).map_err(bad)?;
        if featured.is_none() {
            return Ok(false);
        }
        Ok(self.feature_refcount(FEATURE)?.is_some_and(|n| n > 0))
    }

    /// Directory `dir` was just created for a new dataset: zero counts when the feature is
    /// active.
    pub fn limits_new_dir(&mut self, dir: u64) -> Result<()> {
        if !self.limits_active()? {
            return Ok(());
        }
        self.zapify(dir)?;
        for which in [Count::Filesystems, Count::Snapshots] {
            self.mos_zaps.update_u64(&self.mos, dir, which.field(), 0).map_err(bad)?;
        }
        Ok(())
    }

    /// A limit was set on directory `dir`: the feature becomes active if it is not, and the
    /// counts of `dir`'s subtree are initialized.
    pub fn limits_activate(&mut self, dir: u64) -> Result<()> {
        match self.feature_refcount(FEATURE)? {
            None => {
                return Err(PoolError::Unsupported(format!(
                    "pool '{}' does not have feature '{FEATURE}' enabled, which a limit needs",
                    self.name
                )))
            }
            Some(0) => self.feature_adjust(FEATURE, 1)?,
            Some(_) => {}
        }
        self.limits_init(dir)
    }

    /// Before directory `dir` moves to another parent: its counts initialized when the
    /// feature is active, so the rename moves them.
    pub fn limits_before_rename(&mut self, dir: u64) -> Result<()> {
        if self.limits_active()? {
            self.limits_init(dir)?;
        }
        Ok(())
    }

    /// Counts the subtree of `dir` where it has no counts yet (`dsl_dir_init_fs_ss_count`):
    /// a directory that has them already has correct ones below it too.
    fn limits_init(&mut self, dir: u64) -> Result<()> {
        // Depth-first, bounded as dataset names are (a loop in a damaged pool ends here).
        self.limits_init_at(dir, 0).map(|_| ())
    }

    /// Initializes `dir` and returns its (file systems, snapshots) counts.
    fn limits_init_at(&mut self, dir: u64, depth: usize) -> Result<(u64, u64)> {
        if depth > 256 {
            return Err(bad(format!("directory {dir} is nested more than 256 deep")));
        }
        self.zapify(dir)?;
        let have = (
            limits::count(&self.mos, &mut self.mos_zaps, dir, Count::Filesystems)?,
            limits::count(&self.mos, &mut self.mos_zaps, dir, Count::Snapshots)?,
        );
        if let (Some(fs), Some(ss)) = have {
            return Ok((fs, ss));
        }
        let d = dsl::write::dir_phys(&self.mos, dir)?;
        let (mut fs, mut ss) = (0u64, 0u64);
        for (name, v) in self.mos_zaps.entries(&self.mos, d.child_dir_zapobj).map_err(bad)? {
            let Some(&child) = v.values.first() else { continue };
            if name.first() == Some(&b'$') {
                continue;
            }
            let (cfs, css) = self.limits_init_at(child, depth + 1)?;
            fs += 1 + cfs;
            ss += css;
        }
        if d.head_dataset_obj != 0 {
            let names = dsl::write::ds_phys(&self.mos, d.head_dataset_obj)?.snapnames_zapobj;
            if names != 0 {
                let snaps = self.mos_zaps.entries(&self.mos, names).map_err(bad)?;
                ss += snaps.iter().filter(|(n, _)| n.first() != Some(&b'%')).count() as u64;
            }
        }
        for (which, n) in [(Count::Filesystems, fs), (Count::Snapshots, ss)] {
            self.mos_zaps.update(&self.mos, dir, which.field().as_bytes(), ZapVal::u64(n)).map_err(bad)?;
        }
        Ok((fs, ss))
    }
}

/// Whether a property value is a limit being set (`filesystem_limit`/`snapshot_limit` to
/// a number; `none` is UINT64_MAX).
pub fn sets_limit(prop: &str, v: &ZapVal) -> bool {
    matches!(prop, "filesystem_limit" | "snapshot_limit") && v.values.first().is_some_and(|&n| n != u64::MAX)
}
