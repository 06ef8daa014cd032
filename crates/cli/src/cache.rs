//! # The pool cache (OpenZFS's `zpool.cache`, the `cachefile` pool property)
//!
//! Theory. A pool imported read-write (or created) is recorded in the daemon's cache file;
//! when the daemon starts again (a reboot, a restart, a crash) it imports every recorded
//! pool and mounts their file systems, as `zfs-import-cache.service` and `zfs mount -a` do
//! for OpenZFS, so cron jobs and services find their pools without an `rzpool import`.
//! `zpool export` and `zpool destroy` remove the record; `-o cachefile=none` at create or
//! import, an `altroot` (OpenZFS implies `cachefile=none` with it) and `rzpool set
//! cachefile=none` keep a pool out of it. Read-only imports are not recorded.
//!
//! Where. `RZFS_CACHEFILE` names the file (`none`: no cache). Otherwise the system daemon
//! (root, serving the default socket) keeps `/etc/rzfs/rzpool.cache`: apart from
//! OpenZFS's `/etc/zfs/zpool.cache`, so the two systems never both import a pool at boot.
//! A private daemon (its own `RZFS_SOCKET`: tests, the demo, benchmarks) keeps none unless
//! told, so it never imports another instance's pools.
//!
//! Format: JSON, one entry per pool (name, guid, and the directories of its devices,
//! where the import looks for them by guid), written whole to a temporary file, flushed,
//! and renamed over the old one: a crash leaves the old list or the new one.
//! An entry whose pool cannot be imported at start (a device missing) stays, and the
//! failure goes to the daemon's log.

use crate::daemon::State;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The system daemon's cache.
pub const SYSTEM_CACHEFILE: &str = "/etc/rzfs/rzpool.cache";

/// One cached pool.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub guid: u64,
    /// Directories holding its devices (the import searches them).
    pub dirs: Vec<PathBuf>,
}

/// The cache file of the daemon serving `sock` (see the module comment).
pub fn path_for(sock: &Path) -> Option<PathBuf> {
    match std::env::var_os("RZFS_CACHEFILE") {
        Some(p) if p == "none" || p.is_empty() => None,
        Some(p) => Some(PathBuf::from(p)),
        None => {
            let system = nix::unistd::geteuid().is_root() && sock == Path::new("/run/rzfs/rzfsd.sock");
            system.then(|| PathBuf::from(SYSTEM_CACHEFILE))
        }
    }
}

/// The entries of cache file `path` (none when it is missing or unreadable, which is
/// logged).
pub fn load(path: &Path) -> Vec<Entry> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            eprintln!("rzfsd: ignoring the pool cache {}: {e}", path.display());
            Vec::new()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("rzfsd: cannot read the pool cache {}: {e}", path.display());
            Vec::new()
        }
    }
}

fn store(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(entries).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Changes the cache under the state's lock (one writer at a time).
fn update(state: &State, f: impl FnOnce(&mut Vec<Entry>)) {
    let Some(path) = &state.cachefile else { return };
    let _guard = state.cache_lock.lock().unwrap_or_else(|p| p.into_inner());
    let mut entries = load(path);
    let before = entries.clone();
    f(&mut entries);
    if entries != before {
        if let Err(e) = store(path, &entries) {
            eprintln!("rzfsd: cannot write the pool cache {}: {e}", path.display());
        }
    }
}

/// Records (or refreshes) pool `name`, imported read-write here.
pub fn record(state: &State, name: &str) {
    let Some(rw) = crate::rwpool::writer_of(state, name) else { return };
    let mut dirs: Vec<PathBuf> =
        rw.spa.leaf_paths().iter().filter_map(|p| Path::new(p).parent().map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    let entry = Entry { name: name.to_string(), guid: rw.spa.guid(), dirs };
    update(state, |v| {
        v.retain(|e| e.name != name && e.guid != entry.guid);
        v.push(entry);
    });
}

/// Removes pool `name` from the cache.
pub fn forget(state: &State, name: &str) {
    update(state, |v| v.retain(|e| e.name != name));
}

/// Is pool `name` in the cache?
pub fn contains(state: &State, name: &str) -> bool {
    state.cachefile.as_deref().is_some_and(|p| load(p).iter().any(|e| e.name == name))
}

/// At start: imports every cached pool, then mounts their file systems. Failures are
/// logged; their entries stay.
pub fn import_all(state: &Arc<State>) {
    let Some(path) = &state.cachefile else { return };
    let entries = load(path);
    for e in &entries {
        let r = crate::cmd::zpool::import_cached(state, &e.dirs, e.guid);
        match r {
            Ok(()) => eprintln!("rzfsd: imported '{}' from the pool cache {}", e.name, path.display()),
            Err(err) => eprintln!("rzfsd: cannot import '{}' from the pool cache: {err}", e.name),
        }
    }
    if !entries.is_empty() {
        if let Err(e) = crate::cmd::zfs::mount_all_pub(state) {
            eprintln!("rzfsd: mounting the cached pools' file systems: {e}");
        }
    }
}
