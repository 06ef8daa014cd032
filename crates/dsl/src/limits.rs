//! # File system and snapshot counts (`filesystem_limit`, `snapshot_limit`)
//!
//! Facts (OpenZFS `dsl_dir.c`, the big comment above `dsl_dir_init_fs_ss_count`; feature
//! `com.joyent:filesystem_limits`):
//! - A directory's counts live in its own MOS object, made a ZAP (`dsl_dir_zapify`):
//!   `com.joyent:filesystem_count`, the file systems and volumes below it (not itself), and
//!   `com.joyent:snapshot_count`, the snapshots of it and of everything below it. Each is
//!   one uint64.
//! - Counts exist only where they were *initialized*: on every directory at and below one
//!   that was given a limit (the whole subtree is counted then), and on every directory
//!   created while the feature is active (with zeros: a new directory is a leaf).
//! - Every change walks up from the directory it touches, adding to each ancestor's count
//!   until the first directory without one (`dsl_fs_ss_count_adjust`): above an
//!   uninitialized directory no limit can apply. A new file system adds one to its parent's
//!   chain, a destroyed one takes it away, a snapshot adds one to its own directory's
//!   chain, a rename moves the directory's counts (plus itself) from the old chain to the
//!   new, and a promote moves the promoted snapshots' counts.
//! - Limits are ordinary non-inherited properties in the props ZAP (UINT64_MAX: none).
//!   OpenZFS does not enforce them against a caller allowed to change the limit (root, or
//!   one delegated the permission), only against other delegated users.
//!
//! This module keeps the counts; initializing them needs a zapify, which the pool layer
//! owns (it charges `extensible_dataset`).

use crate::write::{dir_phys, zerr};
use crate::{DslError, Result};
use dmu::tx::DirtyObjset;
use zap::write::ZapCache;

/// `DD_FIELD_FILESYSTEM_COUNT`.
pub const FILESYSTEM_COUNT: &str = "com.joyent:filesystem_count";
/// `DD_FIELD_SNAPSHOT_COUNT`.
pub const SNAPSHOT_COUNT: &str = "com.joyent:snapshot_count";

/// Which count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Filesystems,
    Snapshots,
}

impl Count {
    pub fn field(self) -> &'static str {
        match self {
            Count::Filesystems => FILESYSTEM_COUNT,
            Count::Snapshots => SNAPSHOT_COUNT,
        }
    }
}

/// Whether MOS object `obj` has been made a ZAP (its type is `DMU_OTN_ZAP_METADATA`).
pub fn is_zapified(os: &DirtyObjset, obj: u64) -> Result<bool> {
    Ok(os.dnode(obj).map_err(crate::write::dmu)?.is_some_and(|d| d.object_type == crate::OTN_ZAP_METADATA))
}

/// Directory `dir`'s count, None where it was never initialized.
pub fn count(os: &DirtyObjset, zaps: &mut ZapCache, dir: u64, which: Count) -> Result<Option<u64>> {
    if !is_zapified(os, dir)? {
        return Ok(None);
    }
    zaps.lookup_u64(os, dir, which.field()).map_err(zerr)
}

/// Adds `delta` to `dir`'s count and to each ancestor's, up to the first directory without
/// one (`dsl_fs_ss_count_adjust`). A count that would go below zero (a damaged pool: it
/// cannot happen to counts kept by these rules) stops at zero rather than failing the txg.
pub fn adjust(os: &mut DirtyObjset, zaps: &mut ZapCache, dir: u64, which: Count, delta: i64) -> Result<()> {
    if delta == 0 {
        return Ok(());
    }
    let mut cur = dir;
    // Deeper than the name-length limit allows: a loop in a damaged pool.
    for _ in 0..256 {
        let Some(n) = count(os, zaps, cur, which)? else { return Ok(()) };
        let new = n.saturating_add_signed(delta);
        zaps.update_u64(os, cur, which.field(), new).map_err(zerr)?;
        cur = dir_phys(os, cur)?.parent_obj;
        if cur == 0 {
            return Ok(());
        }
    }
    Err(DslError::Corrupt { what: "dsl_dir", detail: format!("directory {dir} has more than 256 ancestors") })
}

/// What a rename moving directory `dir` elsewhere takes from the old parent's chain and
/// gives the new one (file systems counting `dir` itself, snapshots), when `dir`'s counts
/// are initialized; zeros otherwise (`dsl_dir_rename_sync`).
pub fn moved_by_rename(os: &DirtyObjset, zaps: &mut ZapCache, dir: u64) -> Result<(i64, i64)> {
    let fs = count(os, zaps, dir, Count::Filesystems)?;
    let ss = count(os, zaps, dir, Count::Snapshots)?;
    match (fs, ss) {
        (Some(fs), Some(ss)) => Ok((fs as i64 + 1, ss as i64)),
        _ => Ok((0, 0)),
    }
}
