//! Pools the daemon holds open for writing: creation, read-write import, the txg sync
//! thread, export and destroy.
//!
//! Each read-write pool is one [`pool::writer::PoolWriter`] behind a mutex (every change
//! and every sync takes it; FUSE requests are serialized through it). A thread per pool
//! syncs the open txg when it has been dirty for `RZFS_TXG_TIMEOUT` seconds (default 5, like
//! `zfs_txg_timeout`); `fsync` syncs at once. After each sync the read-only view used by
//! `status`, `list` and `get` is refreshed from the new uberblock.

use crate::daemon::State;
use pool::create::{CreateSpec, NewLeaf, NewTop};
use pool::open_rw::DatasetSettings;
use pool::vdevspec::TopSpec;
use pool::writer::PoolWriter;
use pool::Pool;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zap::write::ZapVal;

/// A pool open for writing.
pub struct RwPool {
    pub name: String,
    w: Mutex<PoolWriter>,
    /// The read-only view the pool was imported as (device list, candidate).
    base: Mutex<Arc<Pool>>,
    stop: AtomicBool,
    /// ZPL state of the mounted datasets, by dataset object.
    pub zpl: Mutex<BTreeMap<u64, zpl::write::ZplWriter>>,
}

impl RwPool {
    pub fn lock(&self) -> MutexGuard<'_, PoolWriter> {
        self.w.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Syncs the open txg and refreshes the daemon's read view.
    pub fn sync(&self, state: &State) -> Result<(), String> {
        let mut w = self.lock();
        w.sync().map_err(|e| format!("txg sync of '{}' failed: {e}", self.name))?;
        self.refresh(state, &w)
    }

    fn refresh(&self, state: &State, w: &PoolWriter) -> Result<(), String> {
        let mut base = self.base.lock().unwrap_or_else(|p| p.into_inner());
        let view = Arc::new(w.read_view(&base).map_err(|e| e.to_string())?);
        *base = view.clone();
        state.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(self.name.clone(), view);
        Ok(())
    }
}

/// Dirty data a pool may hold before a write forces a txg sync (`zfs_dirty_data_max`):
/// `RZFS_DIRTY_MAX` bytes, default 64 MiB, so memory stays bounded on small machines.
pub fn dirty_max() -> u64 {
    std::env::var("RZFS_DIRTY_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(64 << 20)
}

fn txg_timeout() -> Duration {
    let secs = std::env::var("RZFS_TXG_TIMEOUT").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(5.0);
    Duration::from_secs_f64(secs.max(0.05))
}

/// Registers a writer with the daemon and starts its sync thread.
fn register(state: &Arc<State>, w: PoolWriter, base: Pool) -> Result<Arc<RwPool>, String> {
    let name = w.name.clone();
    let view = Arc::new(w.read_view(&base).map_err(|e| e.to_string())?);
    let rw = Arc::new(RwPool {
        name: name.clone(),
        w: Mutex::new(w),
        base: Mutex::new(view.clone()),
        stop: AtomicBool::new(false),
        zpl: Mutex::new(BTreeMap::new()),
    });
    state.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), view);
    state.writers.lock().unwrap_or_else(|p| p.into_inner()).insert(name, rw.clone());
    let (st, r) = (Arc::downgrade(state), rw.clone());
    std::thread::spawn(move || sync_loop(st, r));
    Ok(rw)
}

fn sync_loop(state: std::sync::Weak<State>, rw: Arc<RwPool>) {
    let period = txg_timeout();
    let mut dirty_since: Option<Instant> = None;
    while !rw.stop.load(Ordering::Acquire) {
        std::thread::sleep(period.min(Duration::from_millis(200)));
        let Some(state) = state.upgrade() else { return };
        let dirty = rw.lock().is_dirty();
        match (dirty, dirty_since) {
            (false, _) => dirty_since = None,
            (true, None) => dirty_since = Some(Instant::now()),
            (true, Some(t)) if t.elapsed() >= period => {
                if let Err(e) = rw.sync(&state) {
                    eprintln!("rzfsd: {e}");
                }
                dirty_since = None;
            }
            _ => {}
        }
    }
}

/// Stops the sync thread, marks the pool exported/destroyed and syncs it a last time.
pub fn close(state: &State, name: &str, destroy: bool) -> Result<(), String> {
    let rw = state.writers.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    let Some(rw) = rw else { return Ok(()) };
    rw.stop.store(true, Ordering::Release);
    let st = if destroy { ondisk::label::PoolState::Destroyed } else { ondisk::label::PoolState::Exported };
    let r = rw.lock().close(st).map_err(|e| format!("cannot export '{name}': {e}"));
    r
}

/// Opens an imported pool for writing (the devices were opened read-write by the import).
pub fn open(state: &Arc<State>, p: Pool) -> Result<Arc<RwPool>, String> {
    let name = p.name().to_string();
    let mut w = pool::open_rw::open_rw(&p).map_err(|e| format!("cannot import '{name}': {e}"))?;
    // The first txg of a read-write import records the new state in the labels.
    w.sync().map_err(|e| format!("cannot import '{name}': {e}"))?;
    register(state, w, p)
}

/// `rzpool create` arguments after parsing.
pub struct CreateArgs {
    pub name: String,
    pub force: bool,
    pub vdev_words: Vec<String>,
    pub pool_props: Vec<String>,
    pub fs_props: Vec<String>,
    pub mountpoint: Option<String>,
    pub cwd: PathBuf,
}

/// Pool names as zpool accepts them (`pool_namecheck`).
fn check_pool_name(name: &str) -> Result<(), String> {
    let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let chars_ok = name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c));
    if !first_ok || !chars_ok || name.len() > 255 {
        return Err(format!(
            "cannot create '{name}': invalid character or name does not begin with a letter"
        ));
    }
    let reserved = ["mirror", "raidz", "draid", "spare", "log", "cache", "special", "dedup"];
    if reserved.iter().any(|r| name.starts_with(r))
        || name.starts_with('c') && name[1..].starts_with(char::is_numeric)
    {
        return Err(format!("cannot create '{name}': name is reserved"));
    }
    Ok(())
}

struct PoolOpts {
    ashift: u8,
    compat: pool::compat::CompatSet,
    compat_value: String,
    enable: Vec<String>,
    disable: Vec<String>,
    comment: Option<String>,
}

fn parse_pool_props(props: &[String]) -> Result<PoolOpts, String> {
    let mut o = PoolOpts {
        ashift: 12,
        compat: pool::compat::CompatSet::Off,
        compat_value: "off".into(),
        enable: Vec::new(),
        disable: Vec::new(),
        comment: None,
    };
    for p in props {
        let (k, v) =
            p.split_once('=').ok_or_else(|| format!("invalid property '{p}': expected name=value"))?;
        match k {
            "ashift" => {
                let a: u8 = v.parse().map_err(|_| format!("property 'ashift' must be a number: '{v}'"))?;
                if !(9..=16).contains(&a) {
                    return Err(format!("property 'ashift' number {a} is invalid: must be between 9 and 16"));
                }
                o.ashift = a;
            }
            "compatibility" => {
                o.compat = pool::compat::load(v)?;
                o.compat_value = v.to_string();
            }
            "comment" => o.comment = Some(v.to_string()),
            "cachefile" | "altroot" | "autoexpand" | "autoreplace" | "failmode" => {}
            _ if k.starts_with("feature@") => {
                let f = &k["feature@".len()..];
                match v {
                    "enabled" => o.enable.push(f.to_string()),
                    "disabled" => o.disable.push(f.to_string()),
                    _ => return Err(format!("property '{k}' must be 'enabled' or 'disabled'")),
                }
            }
            _ => {
                return Err(format!("property '{k}' is not a valid pool property (or not supported by rzfs)"))
            }
        }
    }
    Ok(o)
}

fn parse_fs_props(props: &[String], mountpoint: &Option<String>) -> Result<Vec<(String, ZapVal)>, String> {
    let mut out = Vec::new();
    let mut all: Vec<(String, String)> = Vec::new();
    for p in props {
        let (k, v) =
            p.split_once('=').ok_or_else(|| format!("invalid property '{p}': expected name=value"))?;
        all.push((k.to_string(), v.to_string()));
    }
    if let Some(m) = mountpoint {
        all.push(("mountpoint".into(), m.clone()));
    }
    for (k, v) in all {
        let raw = dsl::props::parse_value(&k, &v).map_err(|e| format!("invalid property '{k}': {e}"))?;
        let zv = match raw {
            dsl::props::RawProp::Num(n) => ZapVal::u64(n),
            dsl::props::RawProp::Str(s) => ZapVal::string(&s),
        };
        out.push((k, zv));
    }
    Ok(out)
}

fn open_leaf(path: &Path, is_disk: bool) -> Result<NewLeaf, String> {
    let dev =
        vdev::FileDevice::open(path, true).map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
    Ok(NewLeaf { path: path.to_string_lossy().into_owned(), device: Arc::new(dev), is_disk })
}

/// `rzpool create`: validates everything, then creates, syncs and registers the pool.
pub fn create(state: &Arc<State>, a: CreateArgs) -> Result<Arc<RwPool>, String> {
    check_pool_name(&a.name)?;
    if state.pools.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&a.name) {
        return Err(format!("cannot create '{}': pool already exists", a.name));
    }
    let po = parse_pool_props(&a.pool_props)?;
    let root_props = parse_fs_props(&a.fs_props, &a.mountpoint)?;
    let tops = pool::vdevspec::parse(&a.vdev_words, &a.cwd)?;
    if tops.is_empty() {
        return Err("invalid vdev specification: at least one device is required".into());
    }
    let infos = pool::vdevspec::validate(&tops, a.force)?;
    let (set, _warnings) = pool::feature_table::resolve_create(&po.compat, &po.enable, &po.disable)?;
    let features: Vec<&'static pool::feature_table::Feature> =
        set.iter().filter_map(|n| pool::feature_table::by_name(n)).collect();
    let needed = pool::dsfeatures::props_features(&root_props);
    if let Some(f) = needed.iter().find(|f| !set.contains(*f)) {
        return Err(format!(
            "cannot create '{}': a property given with -O needs feature '{f}', which this pool would not have enabled",
            a.name
        ));
    }
    let is_disk = |p: &Path| infos.iter().any(|d| d.path == p && d.is_block);
    let mut new_tops = Vec::new();
    for t in &tops {
        new_tops.push(match t {
            TopSpec::Disk(p) => NewTop::Single(open_leaf(p, is_disk(p))?),
            TopSpec::Mirror(ds) => {
                NewTop::Mirror(ds.iter().map(|p| open_leaf(p, is_disk(p))).collect::<Result<_, _>>()?)
            }
            TopSpec::Raidz { parity, devs } => NewTop::Raidz {
                parity: *parity,
                leaves: devs.iter().map(|p| open_leaf(p, is_disk(p))).collect::<Result<_, _>>()?,
            },
        });
    }
    let mut pool_props = vec![("compatibility".to_string(), ZapVal::string(&po.compat_value))];
    if let Some(c) = &po.comment {
        pool_props.push(("comment".into(), ZapVal::string(c)));
    }
    let settings = settings_from(&root_props);
    let now = now_pair();
    let init = |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
        zpl::write::ZplWriter::create_fs(os, z, now, 0, 0)
            .map(|_| ())
            .map_err(|e| pool::PoolError::Invalid(format!("creating the root file system: {e}")))
    };
    let spec = CreateSpec {
        name: a.name.clone(),
        tops: new_tops,
        ashift: po.ashift,
        features,
        root_props,
        pool_props,
        init_root: &init,
        root_policy: settings.policy(),
        cache_bytes: cache_bytes()?,
    };
    let mut w = pool::create::create(&spec).map_err(|e| format!("cannot create '{}': {e}", a.name))?;
    if !needed.is_empty() {
        let root_ds = w.datasets.keys().next().copied().ok_or("cannot create: no root dataset")?;
        w.activate_for_props(root_ds, &spec.root_props).map_err(|e| e.to_string())?;
        w.sync().map_err(|e| format!("cannot create '{}': {e}", a.name))?;
    }
    // A read view needs a candidate: discover the new pool's devices.
    let dirs: Vec<PathBuf> = infos.iter().map(|d| d.path.clone()).collect();
    let cands = pool::discover(&dirs, false).map_err(|e| e.to_string())?;
    let cand = pool::discover::select(&cands, &a.name).map_err(|e| e.to_string())?;
    let opts = pool::ImportOpts { readonly: true, ..Default::default() };
    let base = pool::import(cand, &opts).map_err(|e| format!("cannot open new pool '{}': {e}", a.name))?;
    register(state, w, base)
}

fn settings_from(props: &[(String, ZapVal)]) -> DatasetSettings {
    let get = |k: &str| props.iter().find(|(n, _)| n == k).and_then(|(_, v)| v.values.first().copied());
    let (policy_compress, zstd_level) = pool::open_rw::decode_compression(get("compression").unwrap_or(2));
    DatasetSettings {
        policy_checksum: pool::open_rw::decode_checksum(get("checksum").unwrap_or(1)),
        policy_compress,
        zstd_level,
        copies: get("copies").unwrap_or(1) as u8,
        recordsize: get("recordsize").unwrap_or(128 << 10),
        readonly: get("readonly") == Some(1),
    }
}

/// The block cache bound: `RZFS_ARC_MAX` bytes, default 64 MiB.
fn cache_bytes() -> Result<usize, String> {
    match std::env::var("RZFS_ARC_MAX") {
        Ok(v) => v.parse().map_err(|_| format!("RZFS_ARC_MAX={v} is not a byte count")),
        Err(_) => Ok(arc::DEFAULT_LIMIT_BYTES),
    }
}

/// (seconds, nanoseconds) now.
pub fn now_pair() -> (u64, u64) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_nanos()))
}

/// The writable pool holding dataset `name` (`pool/fs`), if any.
pub fn writer_of(state: &State, name: &str) -> Option<Arc<RwPool>> {
    let pool = name.split(['/', '@']).next().unwrap_or(name);
    state.writers.lock().unwrap_or_else(|p| p.into_inner()).get(pool).cloned()
}

fn find_ds(state: &State, name: &str) -> Result<dsl::Dataset, String> {
    let pool = name.split(['/', '@']).next().unwrap_or(name);
    let view = state.pool(pool)?;
    view.dsl().find(name).map_err(|_| format!("cannot open '{name}': dataset does not exist"))
}

/// `rzfs snapshot POOL/FS@NAME...`: taken at the next sync, which runs at once.
pub fn snapshot(state: &State, names: &[String]) -> Result<(), String> {
    for full in names {
        let (fs, snap) =
            full.split_once('@').ok_or_else(|| format!("cannot create snapshot '{full}': missing '@'"))?;
        if snap.is_empty() || snap.contains(['@', '/']) || snap.len() > 255 {
            return Err(format!("cannot create snapshot '{full}': invalid name"));
        }
        let rw = writer_of(state, fs)
            .ok_or_else(|| format!("cannot create snapshot '{full}': pool is read-only"))?;
        let ds = find_ds(state, fs)?;
        if find_ds(state, full).is_ok() {
            return Err(format!("cannot create snapshot '{full}': dataset already exists"));
        }
        rw.lock().pending_snapshots.push((ds.ds_obj, snap.to_string()));
        rw.sync(state)?;
    }
    Ok(())
}

/// `rzfs create [-o prop=value]... POOL/FS`: a new ZPL file system (a clone of `$ORIGIN`).
pub fn create_fs(state: &State, name: &str, props: &[String]) -> Result<(), String> {
    let (parent, leaf) =
        name.rsplit_once('/').ok_or_else(|| format!("cannot create '{name}': missing pool name"))?;
    check_leaf(name, leaf)?;
    let rw = writer_of(state, name).ok_or_else(|| format!("cannot create '{name}': pool is read-only"))?;
    if find_ds(state, name).is_ok() {
        return Err(format!("cannot create '{name}': dataset already exists"));
    }
    let parent_ds =
        find_ds(state, parent).map_err(|_| format!("cannot create '{name}': parent does not exist"))?;
    let fs_props = parse_fs_props(props, &None)?;
    let view = state.pool(name.split('/').next().unwrap_or(name))?;
    let origin = view.dsl().find(&format!("{}/$ORIGIN", view.name())).ok();
    let now = now_pair();
    {
        let mut w = rw.lock();
        let txg = w.txg;
        let w = &mut *w;
        w.check_props_features(&fs_props).map_err(|e| format!("cannot create '{name}': {e}"))?;
        let dir = dsl::write::create_dir(&mut w.mos, &mut w.mos_zaps, Some(parent_ds.dir_obj), leaf, now.0)
            .map_err(|e| format!("cannot create '{name}': {e}"))?;
        let origin_snap = match origin {
            Some(o) => Some(o.ds.prev_snap_obj),
            None => origin_snapshot(w)?,
        };
        let ds = dsl::write::create_dataset(&mut w.mos, &mut w.mos_zaps, dir, origin_snap, txg, now.0)
            .map_err(|e| format!("cannot create '{name}': {e}"))?;
        for (k, v) in &fs_props {
            dsl::write::set_prop(&mut w.mos, &mut w.mos_zaps, dir, k, Some(v.clone()))
                .map_err(|e| e.to_string())?;
        }
        w.activate_for_props(ds, &fs_props).map_err(|e| e.to_string())?;
        let settings = w.dataset_settings(dir).map_err(|e| e.to_string())?;
        let mut os = dmu::tx::DirtyObjset::create(&w.reader, ondisk::objset::DMU_OST_ZFS);
        let mut zaps = zap::write::ZapCache::new();
        zpl::write::ZplWriter::create_fs(&mut os, &mut zaps, now, 0, 0).map_err(|e| e.to_string())?;
        w.datasets.insert(ds, pool::writer::DatasetWriter { os, zaps, policy: settings.policy() });
    }
    rw.sync(state)
}

/// `rzfs clone [-o prop=value]... POOL/FS@SNAP POOL/NEW`: a file system whose first state is
/// the snapshot's (`dsl_dataset_create_sync` with an origin): it shares the snapshot's
/// blocks, starts with the origin head's deadlist keys, and inherits the snapshot's
/// per-dataset features.
pub fn clone_fs(state: &State, snapshot: &str, name: &str, props: &[String]) -> Result<(), String> {
    let (fs, _) = snapshot
        .split_once('@')
        .ok_or_else(|| format!("cannot clone '{snapshot}': not a snapshot (expected POOL/FS@SNAP)"))?;
    if pool_of(fs) != pool_of(name) {
        return Err(format!("cannot create '{name}': source and target pools differ"));
    }
    let (parent, leaf) =
        name.rsplit_once('/').ok_or_else(|| format!("cannot create '{name}': missing pool name"))?;
    check_leaf(name, leaf)?;
    let rw = writer_of(state, name).ok_or_else(|| format!("cannot create '{name}': pool is read-only"))?;
    let snap =
        find_ds(state, snapshot).map_err(|_| format!("cannot open '{snapshot}': dataset does not exist"))?;
    if find_ds(state, name).is_ok() {
        return Err(format!("cannot create '{name}': dataset already exists"));
    }
    let parent_ds =
        find_ds(state, parent).map_err(|_| format!("cannot create '{name}': parent does not exist"))?;
    let fs_props = parse_fs_props(props, &None)?;
    let now = now_pair();
    {
        let mut w = rw.lock();
        let txg = w.txg;
        let w = &mut *w;
        w.check_props_features(&fs_props).map_err(|e| format!("cannot create '{name}': {e}"))?;
        let dir = dsl::write::create_dir(&mut w.mos, &mut w.mos_zaps, Some(parent_ds.dir_obj), leaf, now.0)
            .map_err(|e| format!("cannot create '{name}': {e}"))?;
        let ds = dsl::write::create_dataset(&mut w.mos, &mut w.mos_zaps, dir, Some(snap.ds_obj), txg, now.0)
            .map_err(|e| format!("cannot create '{name}': {e}"))?;
        for f in w.ds_features(snap.ds_obj).map_err(|e| e.to_string())? {
            w.ds_activate(ds, f).map_err(|e| e.to_string())?;
        }
        for (k, v) in &fs_props {
            dsl::write::set_prop(&mut w.mos, &mut w.mos_zaps, dir, k, Some(v.clone()))
                .map_err(|e| e.to_string())?;
        }
        w.activate_for_props(ds, &fs_props).map_err(|e| e.to_string())?;
    }
    rw.sync(state)
}

fn pool_of(name: &str) -> &str {
    name.split(['/', '@']).next().unwrap_or(name)
}

fn check_leaf(name: &str, leaf: &str) -> Result<(), String> {
    if leaf.is_empty()
        || leaf.contains('@')
        || !leaf.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c))
    {
        return Err(format!("cannot create '{name}': invalid character in name"));
    }
    Ok(())
}

/// The `$ORIGIN@$ORIGIN` snapshot object, read from the MOS of the open txg.
fn origin_snapshot(w: &mut PoolWriter) -> Result<Option<u64>, String> {
    let root_dir = w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").map_err(|e| e.to_string())?.unwrap_or(0);
    let child = dsl::write::dir_phys(&w.mos, root_dir).map_err(|e| e.to_string())?.child_dir_zapobj;
    let Some(odir) = w.mos_zaps.lookup_u64(&w.mos, child, "$ORIGIN").map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let head = dsl::write::dir_phys(&w.mos, odir).map_err(|e| e.to_string())?.head_dataset_obj;
    Ok(Some(dsl::write::ds_phys(&w.mos, head).map_err(|e| e.to_string())?.prev_snap_obj))
}

/// `rzfs set PROP=VALUE NAME...`.
pub fn set(state: &State, assignment: &str, names: &[String]) -> Result<(), String> {
    let (k, v) = assignment
        .split_once('=')
        .ok_or_else(|| format!("invalid property '{assignment}': expected name=value"))?;
    let parsed = parse_fs_props(&[assignment.to_string()], &None)?;
    for name in names {
        let rw = writer_of(state, name)
            .ok_or_else(|| format!("cannot set property for '{name}': pool is read-only"))?;
        let ds = find_ds(state, name)?;
        if name.contains('@') {
            return Err(format!(
                "cannot set property for '{name}': this property can not be modified for snapshots"
            ));
        }
        {
            let mut w = rw.lock();
            let w = &mut *w;
            w.check_props_features(&parsed).map_err(|e| format!("cannot set property for '{name}': {e}"))?;
            for (pk, pv) in &parsed {
                dsl::write::set_prop(&mut w.mos, &mut w.mos_zaps, ds.dir_obj, pk, Some(pv.clone()))
                    .map_err(|e| e.to_string())?;
            }
            w.activate_for_props(ds.ds_obj, &parsed).map_err(|e| e.to_string())?;
            let settings = w.dataset_settings(ds.dir_obj).map_err(|e| e.to_string())?;
            if let Some(d) = w.datasets.get_mut(&ds.ds_obj) {
                d.policy = settings.policy();
            }
        }
        let _ = (k, v);
        rw.sync(state)?;
    }
    Ok(())
}

/// Records a successful command in the pool history (synced with the next txg).
pub fn log_history(state: &State, pool: &str, command: &str) {
    let rw = state.writers.lock().unwrap_or_else(|p| p.into_inner()).get(pool).cloned();
    if let Some(rw) = rw {
        if let Err(e) = rw.lock().log_history(command, 0) {
            eprintln!("rzfsd: history of '{pool}': {e}");
        }
    }
}

/// `rzpool set PROP=VALUE POOL` for the pool properties rzfs stores (`comment`,
/// `compatibility`); the value goes into the MOS `pool_props` ZAP, as OpenZFS keeps it.
pub fn set_pool_prop(state: &State, assignment: &str, pool: &str) -> Result<(), String> {
    let (k, v) = assignment
        .split_once('=')
        .ok_or_else(|| format!("invalid property '{assignment}': expected name=value"))?;
    if let Some(f) = k.strip_prefix("feature@") {
        return enable_feature(state, pool, f, v);
    }
    let onoff = |v: &str| match v {
        "on" => Ok(1u64),
        "off" => Ok(0),
        _ => Err(format!("property '{k}' must be 'on' or 'off'")),
    };
    // Values are stored as OpenZFS stores them in the MOS pool_props ZAP: strings as
    // strings, index properties as uint64, bootfs as the dataset's object number.
    let val = match k {
        "comment" if v.len() > 32 || v.chars().any(|c| c.is_control()) => {
            return Err("comment must be at most 32 printable characters".into())
        }
        "comment" => Some(ZapVal::string(v)),
        "compatibility" => {
            pool::compat::load(v)?;
            Some(ZapVal::string(v))
        }
        "autoexpand" | "autoreplace" | "autotrim" | "listsnapshots" | "delegation" => {
            Some(ZapVal::u64(onoff(v)?))
        }
        "multihost" if v == "on" => {
            return Err(format!(
                "cannot set property for '{pool}': multihost protection (MMP) is not supported by rzfs"
            ))
        }
        "multihost" => Some(ZapVal::u64(onoff(v)?)),
        "failmode" => Some(ZapVal::u64(match v {
            "wait" => 0,
            "continue" => 1,
            "panic" => 2,
            _ => return Err("property 'failmode' must be one of 'wait', 'continue', 'panic'".into()),
        })),
        "bootfs" if v.is_empty() => None,
        "bootfs" => {
            if pool_of(v) != pool {
                return Err(format!("cannot set property for '{pool}': '{v}' is not in this pool"));
            }
            let ds = find_ds(state, v)?;
            if v.contains('@') {
                return Err(format!("cannot set property for '{pool}': '{v}' is not a file system"));
            }
            Some(ZapVal::u64(ds.ds_obj))
        }
        _ => return Err(format!("cannot set property for '{pool}': '{k}' cannot be set by rzfs yet")),
    };
    let rw = state
        .writers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(pool)
        .cloned()
        .ok_or_else(|| format!("cannot set property for '{pool}': pool is not imported read-write"))?;
    {
        let mut w = rw.lock();
        let w = &mut *w;
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        let obj = match w.mos_zaps.lookup_u64(&w.mos, dir, "pool_props").map_err(|e| e.to_string())? {
            Some(o) => o,
            None => {
                let o = w.mos_zaps.create(&mut w.mos, 31, 0, Vec::new()).map_err(|e| e.to_string())?;
                w.mos_zaps.update_u64(&w.mos, dir, "pool_props", o).map_err(|e| e.to_string())?;
                o
            }
        };
        match val {
            Some(val) => w.mos_zaps.update(&w.mos, obj, k.as_bytes(), val).map_err(|e| e.to_string())?,
            None => {
                w.mos_zaps.remove(&w.mos, obj, k.as_bytes()).map_err(|e| e.to_string())?;
            }
        }
    }
    rw.sync(state)
}

/// `rzpool set feature@NAME=enabled POOL` (`spa_feature_enable`): the feature and any
/// features it depends on must be ones rzfs writes correctly.
fn enable_feature(state: &State, pool: &str, f: &str, v: &str) -> Result<(), String> {
    if v != "enabled" {
        return Err(format!("property 'feature@{f}' can only be set to 'enabled'"));
    }
    pool::feature_table::check_requested(&[f])?;
    let rw = writer_of(state, pool)
        .ok_or_else(|| format!("cannot set property for '{pool}': pool is not imported read-write"))?;
    rw.lock().enable_feature(f).map_err(|e| format!("cannot set property for '{pool}': {e}"))?;
    rw.sync(state)
}

/// `rzfs inherit PROP NAME...`: removes the local value.
pub fn inherit(state: &State, prop: &str, names: &[String]) -> Result<(), String> {
    // Only properties rzfs can set can be inherited (the same table validates both).
    if dsl::props::parse_value(prop, "").is_err()
        && !dsl::props::DEFAULTS.iter().any(|(p, _)| *p == prop)
        && prop != "mountpoint"
    {
        return Err(format!("invalid property '{prop}'"));
    }
    for name in names {
        let rw = writer_of(state, name)
            .ok_or_else(|| format!("cannot inherit '{prop}' for '{name}': pool is read-only"))?;
        let ds = find_ds(state, name)?;
        {
            let mut w = rw.lock();
            let w = &mut *w;
            dsl::write::set_prop(&mut w.mos, &mut w.mos_zaps, ds.dir_obj, prop, None)
                .map_err(|e| e.to_string())?;
            let settings = w.dataset_settings(ds.dir_obj).map_err(|e| e.to_string())?;
            if let Some(d) = w.datasets.get_mut(&ds.ds_obj) {
                d.policy = settings.policy();
            }
        }
        rw.sync(state)?;
    }
    Ok(())
}

/// The FUSE backend of a dataset of a writable pool.
pub struct DsBackend {
    pub rw: Arc<RwPool>,
    pub ds: u64,
    pub dir: u64,
    pub state: std::sync::Weak<State>,
    pub readonly: bool,
}

impl DsBackend {
    /// Opens dataset `name` for a read-write mount.
    pub fn open(state: &Arc<State>, rw: Arc<RwPool>, name: &str) -> Result<DsBackend, String> {
        let ds = find_ds(state, name)?;
        if name.contains('@') {
            return Err(format!("cannot mount '{name}': snapshots are mounted read-only under .zfs"));
        }
        let readonly;
        {
            let mut w = rw.lock();
            let settings = w.dataset_settings(ds.dir_obj).map_err(|e| e.to_string())?;
            readonly = settings.readonly;
            w.open_dataset(ds.ds_obj, settings.policy())
                .map_err(|e| format!("cannot mount '{name}': {e}"))?;
            let w = &mut *w;
            let d = w.datasets.get_mut(&ds.ds_obj).ok_or("dataset vanished")?;
            let mut zpl = rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
            if let std::collections::btree_map::Entry::Vacant(e) = zpl.entry(ds.ds_obj) {
                let z = zpl::write::ZplWriter::open(&d.os, &mut d.zaps)
                    .map_err(|e| format!("cannot mount '{name}': {e}"))?;
                e.insert(z);
            }
        }
        Ok(DsBackend { rw, ds: ds.ds_obj, dir: ds.dir_obj, state: Arc::downgrade(state), readonly })
    }
}

impl rzfs_fuse::rw::RwBackend for DsBackend {
    fn with(
        &self,
        f: &mut dyn FnMut(rzfs_fuse::rw::RwCtx<'_>) -> Result<(), zpl::write::ZplWriteError>,
    ) -> Result<(), zpl::write::ZplWriteError> {
        let mut w = self.rw.lock();
        let recordsize = w.dataset_settings(self.dir).map(|s| s.recordsize).unwrap_or(128 << 10);
        let txg = w.txg;
        let d = w.datasets.get_mut(&self.ds).ok_or_else(|| {
            zpl::write::ZplWriteError::Errno(5, "dataset is no longer open for writing".into())
        })?;
        let mut zpl = self.rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
        let z = zpl
            .get_mut(&self.ds)
            .ok_or_else(|| zpl::write::ZplWriteError::Errno(5, "dataset is not mounted".into()))?;
        z.txg = txg;
        let r = f(rzfs_fuse::rw::RwCtx { zpl: z, os: &mut d.os, zaps: &mut d.zaps, recordsize });
        drop(zpl);
        // Write throttle: past the dirty limit the writer itself syncs the txg.
        if w.dirty_bytes() > dirty_max() {
            let synced = w.sync();
            drop(w);
            match synced {
                Ok(()) => {
                    if let Some(state) = self.state.upgrade() {
                        let w = self.rw.lock();
                        let _ = self.rw.refresh(&state, &w);
                    }
                }
                Err(e) => return Err(zpl::write::ZplWriteError::Errno(5, format!("txg sync failed: {e}"))),
            }
        }
        r
    }

    fn sync(&self) -> Result<(), String> {
        let state = self.state.upgrade().ok_or("daemon is shutting down")?;
        self.rw.sync(&state)
    }

    fn readonly(&self) -> bool {
        self.readonly
    }

    fn space(&self) -> (u64, u64, u64, u64) {
        let s = self.rw.lock().alloc.space();
        let objs = 1u64 << 32;
        (s.size, s.free, 0, objs)
    }
}
