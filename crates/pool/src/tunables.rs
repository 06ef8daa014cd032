//! OpenZFS's module tunables, read from a directory of files.
//!
//! OpenZFS is configured at run time through its kernel module's parameters, one file each
//! under `/sys/module/zfs/parameters` (zfs(4)). rzfs has no module; `rzfsd` reads the same
//! names from the directory `RZFS_TUNABLES_DIR` names (unset: every tunable has OpenZFS's
//! default), one file per tunable holding its value in decimal, as the kernel's files do.
//! A file is read each time its value is wanted, so writing it takes effect at once, as
//! writing a module parameter does; a missing or unreadable file, or one that does not hold
//! a number, means the default. Only the tunables below are honoured; the rest of zfs(4)
//! describes a kernel rzfs does not have.
//!
//! Reads happen only where the value decides something rare (a name check, a scan batch, a new
//! vdev's sector size),
//! never per block.

use std::path::PathBuf;

/// Environment variable naming the tunables directory.
pub const TUNABLES_DIR_ENV: &str = "RZFS_TUNABLES_DIR";

/// `zfs_max_dataset_nesting` default (zfs(4)): names may nest at most this deep, less one.
pub const DEFAULT_MAX_DATASET_NESTING: u64 = 50;

fn dir() -> Option<PathBuf> {
    std::env::var_os(TUNABLES_DIR_ENV).filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// The value of tunable `name`, if the tunables directory sets one.
pub fn get_u64(name: &str) -> Option<u64> {
    get_in(&dir()?, name)
}

fn get_in(dir: &std::path::Path, name: &str) -> Option<u64> {
    // Names are fixed identifiers of this module, never user input; refuse anything that
    // could leave the directory all the same.
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    text.trim().parse().ok()
}

/// `zfs_max_dataset_nesting`: a dataset name must nest less deep than this (its `/`s).
pub fn max_dataset_nesting() -> usize {
    let v = get_u64("zfs_max_dataset_nesting").unwrap_or(DEFAULT_MAX_DATASET_NESTING);
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// `zfs_scan_suspend_progress`: while non-zero, a scrub or resilver stays in progress but
/// issues nothing (OpenZFS checks it at every scan sync; tests use it to hold a scan open).
pub fn scan_suspend_progress() -> bool {
    get_u64("zfs_scan_suspend_progress").is_some_and(|v| v != 0)
}

/// OpenZFS's defaults for the auto-ashift tunables (zfs(4)): `zfs_vdev_min_auto_ashift`
/// (`ASHIFT_MIN`), `zfs_vdev_max_auto_ashift`, and the file vdev sector shifts
/// `vdev_file_logical_ashift`/`vdev_file_physical_ashift` (`SPA_MINBLOCKSHIFT`).
const DEFAULT_MIN_AUTO_ASHIFT: u64 = 9;
const DEFAULT_MAX_AUTO_ASHIFT: u64 = 14;
const DEFAULT_FILE_ASHIFT: u64 = 9;

/// The sector shift OpenZFS would give a new top-level vdev made of files, when the
/// tunables directory sets `vdev_file_logical_ashift` or `vdev_file_physical_ashift`;
/// `None` when it sets neither (rzfs then uses its own default, 4 KiB sectors, where
/// OpenZFS uses 512 bytes for files).
///
/// The rule is `vdev_ashift_optimize`'s (vdev.c): start from the logical shift; a larger
/// physical shift is taken when it is at most `zfs_vdev_max_auto_ashift` (and at least
/// `zfs_vdev_min_auto_ashift`), otherwise the logical shift stands, raised to the minimum.
pub fn file_vdev_ashift() -> Option<u8> {
    file_vdev_ashift_in(&dir()?)
}

fn file_vdev_ashift_in(dir: &std::path::Path) -> Option<u8> {
    let logical = get_in(dir, "vdev_file_logical_ashift");
    let physical = get_in(dir, "vdev_file_physical_ashift");
    if logical.is_none() && physical.is_none() {
        return None;
    }
    let logical = logical.unwrap_or(DEFAULT_FILE_ASHIFT);
    let physical = physical.unwrap_or(DEFAULT_FILE_ASHIFT);
    let min_auto = get_in(dir, "zfs_vdev_min_auto_ashift").unwrap_or(DEFAULT_MIN_AUTO_ASHIFT);
    let max_auto = get_in(dir, "zfs_vdev_max_auto_ashift").unwrap_or(DEFAULT_MAX_AUTO_ASHIFT);
    let a = if logical < physical && physical <= max_auto {
        max_auto.max(logical).min(min_auto.max(physical))
    } else {
        min_auto.max(logical)
    };
    // ASHIFT_MIN..=ASHIFT_MAX: the sector shifts a vdev label can describe.
    u8::try_from(a.clamp(9, 16)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_set_values_and_bad_ones_mean_the_default() {
        let d = std::env::temp_dir().join(format!("rzfs-tunables-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let n = "zfs_max_dataset_nesting";
        assert_eq!(get_in(&d, n), None);
        std::fs::write(d.join(n), "64\n").unwrap();
        assert_eq!(get_in(&d, n), Some(64));
        std::fs::write(d.join(n), "many\n").unwrap();
        assert_eq!(get_in(&d, n), None);
        assert_eq!(get_in(&d, &format!("../{n}")), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn file_ashift_follows_vdev_ashift_optimize() {
        let d = std::env::temp_dir().join(format!("rzfs-tunables-ashift-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        assert_eq!(file_vdev_ashift_in(&d), None, "no file tunable: rzfs's own default");
        std::fs::write(d.join("vdev_file_logical_ashift"), "9\n").unwrap();
        // As ZTS's add-o_ashift expects: the physical shift up to the maximum, else the logical.
        for (physical, want) in [(9, 9), (10, 10), (12, 12), (14, 14), (15, 9), (16, 9)] {
            std::fs::write(d.join("vdev_file_physical_ashift"), format!("{physical}\n")).unwrap();
            assert_eq!(file_vdev_ashift_in(&d), Some(want), "physical {physical}");
        }
        std::fs::write(d.join("zfs_vdev_max_auto_ashift"), "16\n").unwrap();
        assert_eq!(file_vdev_ashift_in(&d), Some(16));
        std::fs::write(d.join("zfs_vdev_min_auto_ashift"), "12\n").unwrap();
        std::fs::write(d.join("vdev_file_physical_ashift"), "9\n").unwrap();
        assert_eq!(file_vdev_ashift_in(&d), Some(12), "raised to the minimum");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
