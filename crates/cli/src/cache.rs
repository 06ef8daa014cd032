//! # The pool cache (OpenZFS's `zpool.cache`, the `cachefile` pool property)
//!
//! Theory. A pool imported read-write (or created) is recorded in the daemon's cache file;
//! when the daemon starts again (a reboot, a restart, a crash) it imports every recorded
//! pool and mounts their file systems, as `zfs-import-cache.service` and `zfs mount -a` do
//! for OpenZFS, so cron jobs and services find their pools without an `rzpool import`.
//! `zpool export` and `zpool destroy` remove the record; `-o cachefile=none` at create or
//! import, an `altroot` without an explicit `cachefile` (OpenZFS implies `cachefile=none`
//! with it) and `rzpool set cachefile=none` keep a pool out of it. Read-only imports are
//! not recorded.
//!
//! `cachefile=PATH` (create, import, set) records the pool in a file of its own instead,
//! as OpenZFS does: shared by every pool naming it, rewritten when the pool's
//! configuration changes (devices added, attached, detached, replaced, removed), left by
//! the pool at export and destroy (and removed once empty). `zpool import -c FILE` lists
//! or imports the pools such a file names, finding their devices where it says they were
//! (the directories of the cached paths, so devices added since are found too). Only the
//! daemon's own cache is imported at daemon start.
//!
//! Where. `RZFS_CACHEFILE` names the daemon's file (`none`: no cache). Otherwise the system
//! daemon (root, serving the default socket) keeps `/etc/rzfs/rzpool.cache`: apart from
//! OpenZFS's `/etc/zfs/zpool.cache`, so the two systems never both import a pool at boot.
//! A private daemon (its own `RZFS_SOCKET`: tests, the demo, benchmarks) keeps none unless
//! told, so it never imports another instance's pools.
//!
//! Format: OpenZFS's. An XDR-packed nvlist with one entry per pool, named after the pool,
//! holding its configuration as the MOS config object has it (`spa_config_generate`: name,
//! guid, state, txg, hostid, the whole vdev tree with every leaf's path), so `zdb -U FILE`
//! and `zpool import -c FILE` of OpenZFS read what rzfs writes and the reverse. Each write
//! goes whole to a temporary file, flushed, and renamed over the old one: a crash leaves
//! the old list or the new one. Caches rzfs wrote before (JSON: name, guid, directories)
//! are still read; their pools are written back in OpenZFS's format. An entry whose pool
//! cannot be imported at start (a device missing) stays, and the failure goes to the
//! daemon's log.

use crate::daemon::State;
use ondisk::nvlist::NvList;
use serde::Deserialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The system daemon's cache.
pub const SYSTEM_CACHEFILE: &str = "/etc/rzfs/rzpool.cache";

/// One cached pool.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: String,
    pub guid: u64,
    /// Directories holding its devices (the import searches them).
    pub dirs: Vec<PathBuf>,
    /// Its configuration in OpenZFS's form (none for entries of an old JSON cache).
    pub config: Option<NvList>,
}

/// An entry of a JSON cache written by earlier rzfs versions.
#[derive(Deserialize)]
struct LegacyEntry {
    name: String,
    guid: u64,
    dirs: Vec<PathBuf>,
}

/// Where a pool is cached: what its `cachefile` property says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Setting {
    /// `cachefile=` (the default): the daemon's cache.
    Daemon,
    /// `cachefile=none`.
    None,
    /// `cachefile=PATH`: a file of its own.
    File(PathBuf),
}

/// Parses a `cachefile` value as zpool does: empty, `none`, or an absolute path.
pub fn parse_setting(v: &str) -> Result<Setting, String> {
    match v {
        "" => Ok(Setting::Daemon),
        "none" => Ok(Setting::None),
        p if p.starts_with('/') && !p.ends_with('/') => Ok(Setting::File(PathBuf::from(p))),
        _ => Err(format!(
            "invalid value '{v}' for property 'cachefile': must be an absolute path to a file, 'none', or an empty string"
        )),
    }
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

/// Every leaf path of a vdev tree.
fn leaf_paths(tree: &NvList, out: &mut Vec<PathBuf>) {
    if let Some(p) = tree.get_str("path") {
        out.push(PathBuf::from(p));
    }
    for c in tree.get_nvlist_array("children").unwrap_or(&[]) {
        leaf_paths(c, out);
    }
    for key in ["spares", "l2cache"] {
        for c in tree.get_nvlist_array(key).unwrap_or(&[]) {
            leaf_paths(c, out);
        }
    }
}

/// The entries of a packed cache nvlist (`None` when `b` is not one).
fn parse_nvlist(b: &[u8]) -> Option<Vec<Entry>> {
    let top = NvList::decode(b).ok()?;
    let mut out = Vec::new();
    for name in top.names() {
        let Some(cfg) = top.get_nvlist(name) else { continue };
        let Some(guid) = cfg.get_u64("pool_guid") else { continue };
        let mut paths = Vec::new();
        if let Some(tree) = cfg.get_nvlist("vdev_tree") {
            leaf_paths(tree, &mut paths);
        }
        for key in ["spares", "l2cache"] {
            if let Some(aux) = cfg.get_nvlist(key) {
                leaf_paths(aux, &mut paths);
            }
        }
        let mut dirs: Vec<PathBuf> = paths.iter().filter_map(|p| p.parent().map(Path::to_path_buf)).collect();
        dirs.extend(cfg.get_str_array(LEGACY_DIRS).unwrap_or(&[]).iter().map(PathBuf::from));
        dirs.sort();
        dirs.dedup();
        out.push(Entry { name: name.to_string(), guid, dirs, config: Some(cfg.clone()) });
    }
    Some(out)
}

/// Where an entry carried over from a JSON cache keeps its directories (it has no vdev
/// tree to name its devices).
const LEGACY_DIRS: &str = "com.rzfs:dirs";

/// The entries of cache file `path` (none when it is missing or unreadable, which is
/// logged).
pub fn load(path: &Path) -> Vec<Entry> {
    match std::fs::read(path) {
        Ok(b) if b.is_empty() => Vec::new(),
        Ok(b) => parse_nvlist(&b)
            .or_else(|| {
                let legacy: Vec<LegacyEntry> = serde_json::from_slice(&b).ok()?;
                Some(
                    legacy
                        .into_iter()
                        .map(|e| Entry { name: e.name, guid: e.guid, dirs: e.dirs, config: None })
                        .collect(),
                )
            })
            .unwrap_or_else(|| {
                eprintln!("rzfsd: ignoring the pool cache {}: not a pool cache", path.display());
                Vec::new()
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            eprintln!("rzfsd: cannot read the pool cache {}: {e}", path.display());
            Vec::new()
        }
    }
}

/// Writes `entries` to `path` in OpenZFS's format (an empty list removes the file, as
/// OpenZFS does).
fn store(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    if entries.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let mut top = NvList::new();
    for e in entries {
        let cfg = e.config.clone().unwrap_or_else(|| {
            let mut nv = NvList::new();
            nv.add_str("name", &e.name);
            nv.add_u64("pool_guid", e.guid);
            nv.add_str_array(LEGACY_DIRS, e.dirs.iter().map(|d| d.to_string_lossy().into_owned()).collect());
            nv
        });
        top.add_nvlist(&e.name, cfg);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&top.encode())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Changes cache file `path` under the state's lock (one writer at a time).
fn update(state: &State, path: &Path, f: impl FnOnce(&mut Vec<Entry>)) {
    let _guard = state.cache_lock.lock().unwrap_or_else(|p| p.into_inner());
    let mut entries = load(path);
    f(&mut entries);
    if let Err(e) = store(path, &entries) {
        eprintln!("rzfsd: cannot write the pool cache {}: {e}", path.display());
    }
}

/// Pool `name`'s `cachefile` setting: a file of its own, the daemon's cache (when it is
/// recorded there), or none.
pub fn setting(state: &State, name: &str) -> Setting {
    if let Some(p) = state.pool_cachefiles.lock().unwrap_or_else(|p| p.into_inner()).get(name) {
        return Setting::File(p.clone());
    }
    if state.cachefile.as_deref().is_some_and(|p| load(p).iter().any(|e| e.name == name)) {
        Setting::Daemon
    } else {
        Setting::None
    }
}

/// The cache entry of pool `name`, imported read-write here: its configuration as of the
/// last synced txg.
fn entry_of(state: &State, name: &str, own_file: Option<&Path>) -> Option<Entry> {
    let rw = crate::rwpool::writer_of(state, name)?;
    let mut dirs: Vec<PathBuf> =
        rw.spa.leaf_paths().iter().filter_map(|p| Path::new(p).parent().map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    let mut config = rw.spa.read(|w| {
        let txg = w.uberblock.as_ref().map_or(w.txg, |u| u.txg);
        w.config_nvlist(txg)
    });
    // The in-core name (a pool imported under a new name is cached under it).
    config.add_str("name", name);
    if let Some(p) = own_file {
        config.add_str("cachefile", &p.to_string_lossy());
    }
    Some(Entry { name: name.to_string(), guid: rw.spa.guid(), dirs, config: Some(config) })
}

/// Records (or refreshes) pool `name`, imported read-write here, where `how` says.
pub fn record_as(state: &State, name: &str, how: &Setting) {
    // The daemon's own cache named as a path is the default (zpool shows `-` for it).
    let how = match how {
        Setting::File(p) if state.cachefile.as_ref() == Some(p) => &Setting::Daemon,
        h => h,
    };
    let path = match how {
        Setting::None => None,
        Setting::Daemon => state.cachefile.clone(),
        Setting::File(p) => Some(p.clone()),
    };
    // Out of every other file first; the destination is rewritten in one step below, so a
    // crash never leaves the pool out of the file it stays in.
    forget_except(state, name, path.as_deref());
    let Some(path) = path else { return };
    if let Setting::File(p) = how {
        state.pool_cachefiles.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), p.clone());
    }
    let own = matches!(how, Setting::File(_)).then_some(path.as_path());
    let Some(entry) = entry_of(state, name, own) else { return };
    update(state, &path, |v| {
        v.retain(|e| e.name != name && e.guid != entry.guid);
        v.push(entry);
    });
}

/// Records pool `name` in the daemon's cache.
pub fn record(state: &State, name: &str) {
    record_as(state, name, &Setting::Daemon);
}

/// Rewrites pool `name`'s entry wherever it is cached (after its configuration changed).
pub fn refresh(state: &State, name: &str) {
    let how = setting(state, name);
    if how != Setting::None {
        record_as(state, name, &how);
    }
}

/// Removes pool `name` from the daemon's cache and from a file of its own.
pub fn forget(state: &State, name: &str) {
    forget_except(state, name, None);
}

/// [`forget`], leaving file `keep` alone.
fn forget_except(state: &State, name: &str, keep: Option<&Path>) {
    let own = state.pool_cachefiles.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    for path in own.iter().chain(state.cachefile.iter()).filter(|p| Some(p.as_path()) != keep) {
        if load(path).iter().any(|e| e.name == name) {
            update(state, path, |v| v.retain(|e| e.name != name));
        }
    }
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
