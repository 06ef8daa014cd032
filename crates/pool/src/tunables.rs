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
//! Reads happen only where the value decides something rare (a name check, a scan batch),
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
}
