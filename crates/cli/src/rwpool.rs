//! Pools the daemon holds open for writing: creation, read-write import, export and destroy,
//! and the command-line side of administrative changes.
//!
//! Each read-write pool is a [`pool::txg::Spa`]: the pool layer owns its open txg, its sync
//! thread and its failure model. This module parses arguments, resolves what the daemon
//! needs (names, the read-only view that `status`, `list` and `get` use, refreshed after
//! every sync), and calls the Spa; it never edits the MOS itself.

use crate::daemon::State;
use pool::admin::PoolPropValue;
use pool::create::{CreateSpec, NewLeaf, NewTop};
use pool::open_rw::DatasetSettings;
use pool::space::{Reserve, SpaceCheck};
use pool::txg::{FailMode, Spa, Tunables};
use pool::vdevspec::TopSpec;
use pool::writer::PoolWriter;
use pool::Pool;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zap::write::ZapVal;

/// A pool open for writing.
pub struct RwPool {
    pub name: String,
    pub spa: Arc<Spa>,
    /// ZPL state of the mounted datasets, by dataset object (taken inside the Spa's
    /// dataset calls: Spa first, then this).
    pub zpl: Mutex<BTreeMap<u64, zpl::write::ZplWriter>>,
    /// Datasets whose mounts wait (their FUSE requests held in [`DsBackend::with`]) while
    /// the dataset is replaced underneath them: OpenZFS's `zfs_suspend_fs`/`zfs_resume_fs`.
    suspended: Mutex<std::collections::BTreeSet<u64>>,
    resumed: std::sync::Condvar,
}

impl RwPool {
    /// Holds the requests of dataset `ds`'s mounts from now on (one in progress finishes
    /// first: it holds the pool, which the change needs).
    pub fn suspend(&self, ds: u64) {
        self.suspended.lock().unwrap_or_else(|p| p.into_inner()).insert(ds);
    }

    /// Lets the held requests of `ds`'s mounts go on.
    pub fn resume(&self, ds: u64) {
        self.suspended.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
        self.resumed.notify_all();
    }

    fn is_suspended(&self, ds: u64) -> bool {
        self.suspended.lock().unwrap_or_else(|p| p.into_inner()).contains(&ds)
    }

    fn wait_resumed(&self, ds: u64) {
        let mut s = self.suspended.lock().unwrap_or_else(|p| p.into_inner());
        while s.contains(&ds) {
            s = self.resumed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The ZPL state of mounted dataset `ds` built anew from its current contents (after a
    /// rollback or a receive replaced them); returns its root object. On error the old
    /// state is dropped (the mount's requests then fail with EIO).
    pub fn reopen_zpl(&self, ds: u64) -> Result<u64, String> {
        let mut root = 0;
        self.zpl.lock().unwrap_or_else(|p| p.into_inner()).remove(&ds);
        // A rollback or swap closed the dataset's writer; it opens on the new contents.
        self.spa.open_dataset(ds).map_err(|e| e.to_string())?;
        let r = self.spa.with_dataset(ds, SpaceCheck::Normal, Reserve::None, |tx| {
            let mut zpl = self.zpl.lock().unwrap_or_else(|p| p.into_inner());
            let z = zpl::write::ZplWriter::open(&tx.ds.os, &mut tx.ds.zaps)
                .map_err(|e| pool::PoolError::Invalid(e.to_string()))?;
            root = z.root();
            zpl.insert(ds, z);
            Ok(())
        });
        r.map(|_| root).map_err(|e| e.to_string())
    }

    /// The root object of mounted dataset `ds`'s ZPL state, if it has one.
    pub fn zpl_root(&self, ds: u64) -> Option<u64> {
        self.zpl.lock().unwrap_or_else(|p| p.into_inner()).get(&ds).map(|z| z.root())
    }

    /// Makes everything changed so far durable (the read view follows through the Spa's
    /// callback).
    pub fn sync(&self) -> Result<(), String> {
        self.spa.sync_now().map_err(|e| format!("cannot sync '{}': {e}", self.name))
    }
}

/// The current contents of mounted dataset `ds`, as a mount carried through their
/// replacement asks them (see `cmd::zfs::in_place`).
pub struct Contents<'a> {
    pub rw: &'a RwPool,
    pub ds: u64,
}

impl Contents<'_> {
    fn with_zpl<T>(
        &self,
        f: impl FnOnce(&mut zpl::write::ZplWriter, &mut pool::writer::DatasetWriter) -> Option<T>,
    ) -> Option<T> {
        let mut out = None;
        let _ = self.rw.spa.with_dataset(self.ds, SpaceCheck::Normal, Reserve::None, |tx| {
            let mut zpl = self.rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(z) = zpl.get_mut(&self.ds) {
                out = f(z, tx.ds);
            }
            Ok(())
        });
        out
    }
}

impl rzfs_fuse::rw::Revalidator for Contents<'_> {
    fn gen(&mut self, obj: u64) -> Option<u64> {
        self.with_zpl(|z, d| z.getattr(&d.os, obj).ok().map(|a| a.gen))
    }

    fn lookup(&mut self, dir: u64, name: &[u8]) -> Option<u64> {
        self.with_zpl(|z, d| z.lookup(&d.os, &mut d.zaps, dir, name).ok().flatten())
    }
}

/// The txg tunables from the environment: `RZFS_DIRTY_MAX` bytes (`zfs_dirty_data_max`,
/// default 64 MiB so memory stays bounded on small machines) and `RZFS_TXG_TIMEOUT`
/// seconds (`zfs_txg_timeout`, default 5).
pub fn tunables() -> Tunables {
    let d = Tunables::default();
    let dirty_max = std::env::var("RZFS_DIRTY_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(d.dirty_max);
    let secs = std::env::var("RZFS_TXG_TIMEOUT").ok().and_then(|v| v.parse::<f64>().ok());
    let txg_timeout = secs.map(|s| Duration::from_secs_f64(s.max(0.05))).unwrap_or(d.txg_timeout);
    Tunables { dirty_max, txg_timeout }
}

/// Hands a writer to a new Spa and registers it with the daemon.
fn register(state: &Arc<State>, mut w: PoolWriter, base: Pool) -> Result<Arc<RwPool>, String> {
    let name = w.name.clone();
    let view = Arc::new(w.read_view(&base).map_err(|e| e.to_string())?);
    let failmode = FailMode::from_prop(w.pool_prop_u64("failmode").ok().flatten().unwrap_or(0));
    let base = Arc::new(Mutex::new(view.clone()));
    let spa = Spa::start(w, tunables(), failmode);
    let (st, b, n) = (Arc::downgrade(state), base.clone(), name.clone());
    spa.set_on_synced(Box::new(move |w: &PoolWriter| {
        let Some(state) = st.upgrade() else { return };
        let mut base = b.lock().unwrap_or_else(|p| p.into_inner());
        match w.read_view(&base) {
            Ok(v) => {
                let v = Arc::new(v);
                *base = v.clone();
                state.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(n.clone(), v);
            }
            Err(e) => eprintln!("rzfsd: refreshing the view of '{n}': {e}"),
        }
    }));
    let rw = Arc::new(RwPool {
        name: name.clone(),
        spa,
        zpl: Mutex::new(BTreeMap::new()),
        suspended: Mutex::new(Default::default()),
        resumed: std::sync::Condvar::new(),
    });
    state.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), view);
    state.writers.lock().unwrap_or_else(|p| p.into_inner()).insert(name, rw.clone());
    // What Spa::start did before the callback was set (a replace another system finished
    // is detached and synced at import) is shown from the start.
    rw.spa.refresh_view_now();
    Ok(rw)
}

/// Exports (or destroys) a pool: a last sync, then the pool is released. On failure the pool
/// stays imported with its changes (retrying syncs them) unless `force` fences it.
pub fn close(state: &State, name: &str, destroy: bool, force: bool) -> Result<(), String> {
    close_as(state, name, destroy, force, false)
}

/// [`close`]; `keep_active`: the labels keep the pool active (`zpool export -F`).
pub fn close_as(
    state: &State,
    name: &str,
    destroy: bool,
    force: bool,
    keep_active: bool,
) -> Result<(), String> {
    let rw = state.writers.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned();
    let Some(rw) = rw else { return Ok(()) };
    let what = if destroy { "destroy" } else { "export" };
    let id = rw.spa.read(|w| (w.name.clone(), w.guid));
    let r = if keep_active {
        rw.spa.export_as(force, ondisk::label::PoolState::Active)
    } else {
        rw.spa.export(force, destroy)
    };
    r.map_err(|e| format!("cannot {what} '{name}': {e}"))?;
    if destroy {
        pool::events::sysevent("pool_destroy", (&id.0, id.1), None);
    }
    state.writers.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    Ok(())
}

/// Opens an imported pool for writing (the devices were opened read-write by the import).
pub fn open(state: &Arc<State>, p: Pool) -> Result<Arc<RwPool>, String> {
    let name = p.name().to_string();
    let mut w = pool::open_rw::open_rw(&p).map_err(|e| format!("cannot import '{name}': {e}"))?;
    // Intent logs go back into their datasets in the first txg, before anything can
    // change them (OpenZFS replays at mount; nothing here mounts before the import ends).
    crate::zilreplay::replay_all(&mut w).map_err(|e| format!("cannot import '{name}': {e}"))?;
    let rw = register(state, w, p)?;
    // The first txg of a read-write import records the new state in the labels. If it
    // cannot be written, the import is undone (fenced: nothing more reaches the devices)
    // rather than left suspended.
    if let Err(e) = rw.spa.sync_or_fail() {
        let _ = close(state, &name, false, true);
        state.pools.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
        return Err(format!("cannot import '{name}': {e}"));
    }
    rw.spa.read(|w| w.event("pool_import", None));
    undo_interrupted_receives(state, &rw);
    Ok(rw)
}

/// Undoes what receives cut short by a crash left (heads marked inconsistent, see
/// `pool::admin::Spa::undo_inconsistent`), reporting each on the daemon's log.
fn undo_interrupted_receives(state: &State, rw: &RwPool) {
    let Ok(p) = state.pool(&rw.name) else { return };
    let Ok(all) = p.dsl().list() else { return };
    let doomed: Vec<(String, bool)> = all
        .iter()
        .filter(|d| {
            d.kind != dsl::DatasetKind::Snapshot && d.ds.flags & ondisk::dsl::DS_FLAG_INCONSISTENT != 0
        })
        // A resumable receive's partial state stays for `zfs send -t` (or `receive -A`).
        .filter(|d| crate::sendrecv::resume_state(&p, d.ds_obj).is_none())
        .map(|d| {
            let own = all.iter().any(|s| s.kind == dsl::DatasetKind::Snapshot && s.dir_obj == d.dir_obj);
            (d.name.clone(), own)
        })
        .collect();
    for (name, r) in rw.spa.undo_inconsistent(&doomed) {
        match r {
            Ok(()) => eprintln!("rzfsd: '{name}' held an unfinished receive: undone"),
            Err(e) => eprintln!("rzfsd: '{name}' holds an unfinished receive that could not be undone: {e}"),
        }
    }
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
    /// `zpool create -t`: the name on disk, when `name` is the temporary in-core one.
    pub label_name: Option<String>,
}

/// Pool names as zpool accepts them (`pool_namecheck`).
pub(crate) fn check_pool_name(name: &str) -> Result<(), String> {
    let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let chars_ok = name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c));
    if !first_ok || !chars_ok || name.len() > 255 {
        return Err(format!(
            "cannot create '{name}': invalid character or name does not begin with a letter"
        ));
    }
    // libzfs's zpool_name_valid at create and import: these prefixes, and `log` itself.
    let reserved = ["mirror", "raidz", "draid", "spare"];
    if reserved.iter().any(|r| name.starts_with(r))
        || name == "log"
        || name.starts_with('c') && name[1..].starts_with(char::is_numeric)
    {
        return Err(format!("cannot create '{name}': name is reserved"));
    }
    Ok(())
}

/// zpool create's check of where the root file system will be mounted (`-m`, else
/// `/POOL`, under the altroot): refused when it is a directory that is not empty, or cannot
/// be read (zpool_main.c, `zpool_do_create`). `legacy` and `none` are not mounted.
fn check_root_mountpoint(name: &str, mountpoint: Option<&str>, altroot: Option<&Path>) -> Result<(), String> {
    if matches!(mountpoint, Some("legacy" | "none")) {
        return Ok(());
    }
    let at = mountpoint.map_or_else(|| format!("/{name}"), str::to_string);
    let dir = match altroot {
        Some(r) => PathBuf::from(format!("{}{at}", r.display())),
        None => PathBuf::from(&at),
    };
    let hint = "use '-m' option to provide a different default";
    match std::fs::read_dir(&dir) {
        Ok(mut entries) => match entries.next() {
            Some(_) => Err(format!("mountpoint '{}' exists and is not empty\n{hint}", dir.display())),
            None => Ok(()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A file there: the mount fails later with a clearer message.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(()),
        Err(e) => Err(format!("mountpoint '{}' : {e}\n{hint}", dir.display())),
    }
}

struct PoolOpts {
    /// `-o ashift=N` (not 0); None: chosen from the devices (see [`default_ashift`]).
    ashift: Option<u8>,
    compat: pool::compat::CompatSet,
    compat_value: String,
    enable: Vec<String>,
    disable: Vec<String>,
    comment: Option<String>,
    altroot: Option<PathBuf>,
    /// Index properties stored in the MOS `pool_props` ZAP (autoexpand, autoreplace,
    /// failmode).
    numeric: Vec<(String, u64)>,
}

fn parse_pool_props(props: &[String]) -> Result<PoolOpts, String> {
    let mut o = PoolOpts {
        ashift: None,
        compat: pool::compat::CompatSet::Off,
        compat_value: "off".into(),
        enable: Vec::new(),
        disable: Vec::new(),
        comment: None,
        altroot: None,
        numeric: Vec::new(),
    };
    for p in props {
        let (k, v) =
            p.split_once('=').ok_or_else(|| format!("invalid property '{p}': expected name=value"))?;
        match k {
            "ashift" => {
                let a = parse_ashift(v)?;
                if a != 0 {
                    o.ashift = u8::try_from(a).ok();
                }
                // Kept as a pool property: what `zpool add` gives new vdevs.
                o.numeric.push(("ashift".into(), a));
            }
            "compatibility" => {
                o.compat = pool::compat::load(v)?;
                o.compat_value = v.to_string();
            }
            "comment" => o.comment = Some(v.to_string()),
            "altroot" => {
                if !v.starts_with('/') {
                    return Err(format!(
                        "invalid value '{v}' for property 'altroot': must be an absolute path"
                    ));
                }
                o.altroot = Some(PathBuf::from(v));
            }
            "cachefile" => {
                crate::cache::parse_setting(v)?;
            }
            "multihost" if v == "on" => {
                return Err("multihost protection (MMP) is not supported by rzfs".into());
            }
            "autoexpand" | "autoreplace" | "autotrim" | "listsnapshots" | "delegation" | "multihost" => o.numeric.push((
                k.to_string(),
                match v {
                    "on" => 1,
                    "off" => 0,
                    _ => return Err(format!("property '{k}' must be 'on' or 'off'")),
                },
            )),
            "failmode" => o.numeric.push((
                k.to_string(),
                match v {
                    "wait" => 0,
                    "continue" => 1,
                    "panic" => return Err("failmode=panic is not supported by rzfs (a userspace daemon does not panic the machine); use wait or continue".into()),
                    _ => return Err("property 'failmode' must be one of 'wait', 'continue', 'panic'".into()),
                },
            )),
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

/// Checks `P=V` assignments as `zfs set` would take them.
pub(crate) fn check_fs_props(props: &[String]) -> Result<(), String> {
    let (rest, _) = split_quotas(props, "cannot create")?;
    parse_fs_props(&rest, &None).map(|_| ())
}

pub(crate) fn parse_fs_props(
    props: &[String],
    mountpoint: &Option<String>,
) -> Result<Vec<(String, ZapVal)>, String> {
    let mut out = Vec::new();
    let mut all: Vec<(String, String)> = Vec::new();
    for p in props {
        let (k, v) =
            p.split_once('=').ok_or_else(|| format!("invalid property '{p}': expected name=value"))?;
        let k = dsl::props::canonical(k);
        if all.iter().any(|(a, _)| a == k) {
            // As zfs(8) refuses `-o P=V -o P=V`.
            return Err(format!("property '{k}' specified multiple times"));
        }
        all.push((k.to_string(), v.to_string()));
    }
    if let Some(m) = mountpoint {
        all.push(("mountpoint".into(), m.clone()));
    }
    for (k, v) in all {
        if ZPL_NAME_PROPS.contains(&k.as_str()) {
            // Kept in the new file system's master node, not among its properties: see
            // [`zpl_choices`] (checked there too, so a dry run refuses what a create would).
            zpl_value(&k, &v)?;
            continue;
        }
        if k == "version" {
            // The ZPL version lives in the master node, not among the properties (see
            // [`zpl_choices`]).
            zpl_version(&v)?;
            continue;
        }
        let raw = dsl::props::parse_value(&k, &v).map_err(|e| format!("invalid property '{k}': {e}"))?;
        let zv = match raw {
            dsl::props::RawProp::Num(n) => ZapVal::u64(n),
            dsl::props::RawProp::Str(s) => ZapVal::string(&s),
        };
        out.push((k, zv));
    }
    Ok(out)
}

/// A `version` value of `zfs create -o`: 1 to 5, or `current` (5).
fn zpl_version(v: &str) -> Result<u64, String> {
    match v {
        "current" => Ok(zpl::write::ZPL_VERSION),
        _ => v.parse::<u64>().ok().filter(|n| (1..=zpl::write::ZPL_VERSION).contains(n)).ok_or_else(|| {
            format!("invalid property 'version': '{v}' is not a file system version (1 to 5, or current)")
        }),
    }
}

/// The creation-time properties that decide how a file system matches names.
const ZPL_NAME_PROPS: [&str; 3] = ["normalization", "utf8only", "casesensitivity"];

/// The number a name-handling property's value is stored as in the master node.
fn zpl_value(prop: &str, v: &str) -> Result<u64, String> {
    let choice = match prop {
        // U8_TEXTPREP_NFC/NFD/NFKC/NFKD (include/sys/u8_textprep.h).
        "normalization" => match v {
            "none" => Some(0),
            "formD" => Some(0x10),
            "formKD" => Some(0x20),
            "formC" => Some(0x50),
            "formKC" => Some(0x60),
            _ => None,
        },
        "utf8only" => match v {
            "off" => Some(0),
            "on" => Some(1),
            _ => None,
        },
        _ => match v {
            "sensitive" => Some(zpl::write::ZFS_CASE_SENSITIVE),
            "insensitive" => Some(zpl::write::ZFS_CASE_INSENSITIVE),
            "mixed" => Some(zpl::write::ZFS_CASE_MIXED),
            _ => None,
        },
    };
    let values = match prop {
        "normalization" => "none | formC | formD | formKC | formKD",
        "utf8only" => "on | off",
        _ => "sensitive | insensitive | mixed",
    };
    choice.ok_or_else(|| format!("'{prop}' must be one of '{values}'"))
}

/// What `-o` chose of the name-handling properties, with libzfs's rules
/// (`zfs_valid_proplist`): normalizing without a utf8only choice turns utf8only on;
/// normalizing with utf8only=off is refused; utf8only=off alone means no normalization.
#[derive(Clone, Copy, Debug, Default)]
struct ZplChoices {
    /// `version`: the ZPL version (not inherited: a new file system gets the current one).
    version: Option<u64>,
    normalization: Option<u64>,
    utf8only: Option<bool>,
    casesensitivity: Option<u64>,
}

fn zpl_choices(props: &[String]) -> Result<ZplChoices, String> {
    let mut c = ZplChoices::default();
    for p in props {
        let Some((k, v)) = p.split_once('=') else { continue };
        match dsl::props::canonical(k) {
            "normalization" => c.normalization = Some(zpl_value("normalization", v)?),
            "utf8only" => c.utf8only = Some(zpl_value("utf8only", v)? != 0),
            "casesensitivity" => c.casesensitivity = Some(zpl_value("casesensitivity", v)?),
            "version" => c.version = Some(zpl_version(v)?),
            _ => {}
        }
    }
    match (c.normalization, c.utf8only) {
        (Some(n), None) if n != 0 => c.utf8only = Some(true),
        (Some(n), Some(false)) if n != 0 => {
            return Err("'utf8only' must be set 'on' if normalization chosen".into());
        }
        (None, Some(false)) => c.normalization = Some(0),
        _ => {}
    }
    Ok(c)
}

impl ZplChoices {
    /// The properties of a new file system: what was chosen, the rest from `parent` (its
    /// parent file system's, `zfs_fill_zplprops`); normalizing forces utf8only on.
    fn resolve(self, parent: zpl::write::ZplProps) -> ZplNew {
        let normalization = self.normalization.unwrap_or(parent.normalization);
        let names = zpl::write::ZplProps {
            normalization,
            utf8only: normalization != 0 || self.utf8only.unwrap_or(parent.utf8only),
            casesensitivity: self.casesensitivity.unwrap_or(parent.casesensitivity),
        };
        ZplNew { names, version: self.version.unwrap_or(zpl::write::ZPL_VERSION) }
    }
}

/// How a new file system's ZPL is made: its name handling and its version.
#[derive(Clone, Copy, Debug)]
struct ZplNew {
    names: zpl::write::ZplProps,
    version: u64,
}

impl ZplNew {
    fn create(
        self,
        os: &mut dmu::tx::DirtyObjset,
        z: &mut zap::write::ZapCache,
        now: (u64, u64),
    ) -> Result<(), zpl::write::ZplWriteError> {
        zpl::write::ZplWriter::create_fs_version(os, z, now, 0, 0, self.names, self.version).map(|_| ())
    }
}

/// The name-handling properties of file system `name`'s master node (defaults when it has
/// none or cannot be read).
fn zpl_props_of(state: &State, name: &str) -> zpl::write::ZplProps {
    let read = || -> Option<zpl::write::ZplProps> {
        let pool = state.pool(pool_of(name)).ok()?;
        let dsl = pool.dsl();
        let ds = dsl.find(name).ok()?;
        let os = dsl.open_objset(&ds).ok()?;
        zpl::write::ZplProps::read(&os).ok()
    };
    read().unwrap_or_default()
}

fn open_leaf(path: &Path, is_disk: bool) -> Result<NewLeaf, String> {
    let dev = vdev::FileDevice::open_exclusive(path)
        .map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
    let p = path.to_string_lossy().into_owned();
    Ok(NewLeaf { device: vdev::inject::InjectDevice::wrap(Arc::new(dev), &p), path: p, is_disk })
}

/// `rzpool create`: validates everything, then creates, syncs and registers the pool.
pub fn create(state: &Arc<State>, mut a: CreateArgs) -> Result<Arc<RwPool>, String> {
    let name = a.name.clone();
    let (rest, quotas) = split_quotas(&a.fs_props, &format!("cannot create '{name}'"))?;
    a.fs_props = rest;
    match create_or_describe(state, a, false)? {
        Created::Pool(rw) => {
            apply_quotas(state, &name, &quotas)?;
            Ok(rw)
        }
        Created::Layout(_) => Err("cannot create: a dry run created nothing".into()),
    }
}

/// `userquota@`-family assignments: (property, value).
type Quotas = Vec<(String, String)>;

/// Takes the `userquota@`-family assignments out of `props` (checked: a bad one fails
/// before anything is created, as libzfs validates the whole list first).
fn split_quotas(props: &[String], what: &str) -> Result<(Vec<String>, Quotas), String> {
    let mut rest = Vec::new();
    let mut quotas = Vec::new();
    for a in props {
        match a.split_once('=') {
            Some((k, v)) if zpl::space::SpaceProp::parse(k).is_some() => {
                check_quota(what, k, v)?;
                quotas.push((k.to_string(), v.to_string()));
            }
            _ => rest.push(a.clone()),
        }
    }
    Ok((rest, quotas))
}

/// Sets the quotas of a file system just created (synced first, so it can be found).
fn apply_quotas(state: &State, name: &str, quotas: &[(String, String)]) -> Result<(), String> {
    if quotas.is_empty() {
        return Ok(());
    }
    writable(state, name, &format!("cannot create '{name}'"))?.sync()?;
    for (k, v) in quotas {
        set_space_quota(state, name, k, v)?;
    }
    Ok(())
}

/// `rzpool create -n`: validates everything as [`create`] does and returns the layout the
/// pool would have ("would create 'POOL' with the following layout:"), creating nothing.
pub fn create_dry_run(state: &Arc<State>, a: CreateArgs) -> Result<String, String> {
    match create_or_describe(state, a, true)? {
        Created::Layout(s) => Ok(s),
        Created::Pool(_) => Err("cannot create: a dry run created a pool".into()),
    }
}

enum Created {
    Pool(Arc<RwPool>),
    Layout(String),
}

fn create_or_describe(state: &Arc<State>, a: CreateArgs, dry_run: bool) -> Result<Created, String> {
    check_pool_name(&a.name)?;
    if let Some(l) = &a.label_name {
        check_pool_name(l)?;
    }
    if state.pools.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&a.name) {
        return Err(format!("cannot create '{}': pool already exists", a.name));
    }
    let po = parse_pool_props(&a.pool_props)?;
    let root_props = parse_fs_props(&a.fs_props, &a.mountpoint)?;
    let root_names = zpl_choices(&a.fs_props)?.resolve(zpl::write::ZplProps::default());
    let parsed = pool::vdevspec::parse_spec(&a.vdev_words, &a.cwd)?;
    let (tops, log, spare_paths) = (&parsed.tops, &parsed.log, &parsed.spares);
    let cache_paths = &parsed.caches;
    if tops.is_empty() {
        return Err("invalid vdev specification: at least one toplevel vdev must be specified".into());
    }
    let infos = pool::vdevspec::validate_classes(tops, log, a.force)?;
    let spares = crate::rwadd::spare_leaves(spare_paths, a.force, true)?;
    let caches = crate::rwadd::spare_leaves(cache_paths, a.force, true)?;
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
    check_root_mountpoint(&a.name, a.mountpoint.as_deref(), po.altroot.as_deref())?;
    if dry_run {
        let mut out = format!("would create '{}' with the following layout:\n\n\t{}\n", a.name, a.name);
        out.push_str(&crate::rwadd::render_new_tops(tops, log, cache_paths, spare_paths));
        return Ok(Created::Layout(out));
    }
    let is_disk = |p: &Path| infos.iter().any(|d| d.path == p && d.is_block);
    let mut new_tops = Vec::new();
    for t in tops {
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
    for (k, v) in &po.numeric {
        pool_props.push((k.clone(), ZapVal::u64(*v)));
    }
    let settings = settings_from(&root_props, set.contains("lz4_compress"), set.contains("embedded_data"));
    let now = now_pair();
    let init = |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
        root_names
            .create(os, z, now)
            .map_err(|e| pool::PoolError::Invalid(format!("creating the root file system: {e}")))
    };
    let ashift = po.ashift.unwrap_or_else(|| default_ashift(new_tops.iter().flat_map(|t| t.leaves())));
    let spec = CreateSpec {
        name: a.name.clone(),
        label_name: a.label_name.clone(),
        tops: new_tops,
        log: log.clone(),
        ashift,
        features,
        root_props,
        pool_props,
        init_root: &init,
        root_policy: settings.policy(),
        cache_bytes: cache_bytes()?,
    };
    let w = pool::create::create(&spec).map_err(|e| format!("cannot create '{}': {e}", a.name))?;
    // A read view needs a candidate: discover the new pool's devices.
    let dirs: Vec<PathBuf> = infos.iter().map(|d| d.path.clone()).collect();
    let cands = pool::discover(&dirs, false).map_err(|e| e.to_string())?;
    let cand = pool::discover::select(&cands, a.label_name.as_deref().unwrap_or(&a.name))
        .map_err(|e| e.to_string())?;
    let opts = pool::ImportOpts {
        readonly: true,
        altroot: po.altroot.clone(),
        rename: a.label_name.is_some().then(|| a.name.clone()),
        temp_name: a.label_name.is_some(),
        ..Default::default()
    };
    let base = pool::import(cand, &opts).map_err(|e| format!("cannot open new pool '{}': {e}", a.name))?;
    let rw = register(state, w, base)?;
    rw.spa.read(|w| w.event("pool_create", None));
    if !caches.is_empty() {
        rw.spa
            .add_caches(&caches, u64::from(ashift))
            .map_err(|e| format!("cannot add the cache devices of '{}': {e}", a.name))?;
    }
    if !spares.is_empty() {
        rw.spa.add_spares(&spares).map_err(|e| format!("cannot add the hot spares of '{}': {e}", a.name))?;
    }
    Ok(Created::Pool(rw))
}

fn settings_from(props: &[(String, ZapVal)], lz4: bool, embed: bool) -> DatasetSettings {
    let get = |k: &str| props.iter().find(|(n, _)| n == k).and_then(|(_, v)| v.values.first().copied());
    let (policy_compress, zstd_level) = pool::open_rw::decode_compression(
        get("compression").unwrap_or(pool::open_rw::DEFAULT_COMPRESSION),
        lz4,
    );
    DatasetSettings {
        policy_checksum: pool::open_rw::decode_checksum(get("checksum").unwrap_or(1)),
        policy_compress,
        zstd_level,
        copies: get("copies").unwrap_or(1) as u8,
        recordsize: get("recordsize").unwrap_or(128 << 10),
        readonly: get("readonly") == Some(1),
        lz4,
        embed,
        dnode_slots: pool::open_rw::dnode_slots_of(get("dnodesize")),
        redundant_metadata: get("redundant_metadata").unwrap_or(0).min(3) as u8,
        primarycache: dmu::CachePolicy::from_prop(get("primarycache")),
        secondarycache: dmu::CachePolicy::from_prop(get("secondarycache")),
        atime: pool::open_rw::atime_of(get("atime"), get("relatime")),
        xattr: get("xattr").unwrap_or(1) != 0,
        sync: get("sync").unwrap_or(0).min(2) as u8,
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

/// `zpool status` of an imported pool: the vdev tree's view plus the owner's (suspended).
pub fn pool_status(state: &State, p: &Pool) -> pool::status::PoolStatus {
    let rw = writer_of(state, p.name());
    let scan = rw.as_ref().and_then(|rw| rw.spa.scan_status());
    let running = scan.as_ref().filter(|s| s.phys.is_scanning() && !s.phys.is_paused());
    let resilvering = running.is_some_and(|s| s.phys.func == pool::scan::ScanFunc::Resilver as u64);
    let activity = running.map(|_| if resilvering { "resilvering" } else { "repairing" });
    let mut st = pool::status::pool_status_scanning(p, activity);
    st.resilvering = resilvering;
    if let Some(rw) = rw {
        if let pool::txg::SpaHealth::Suspended { reason, .. } = rw.spa.health() {
            st.suspended = Some(reason);
        }
        let now = now_pair().0;
        st.scan = Some(match scan {
            Some(s) => crate::format::scan_text(&s, now),
            None => "none requested\n".into(),
        });
        let mut found = rw.spa.scan_errors();
        found.extend(rw.spa.data_errors());
        if !found.is_empty() {
            let dsl = p.dsl();
            let datasets = dsl.list().unwrap_or_default();
            for (dsobj, object, detail) in found {
                let e = match datasets.iter().find(|d| d.ds_obj == dsobj) {
                    Some(ds) => {
                        let path = crate::zplopen::open_zpl_only(p, ds).ok().and_then(|z| z.path_of(object));
                        pool::DataError { dataset: ds.name.clone(), object, path, detail }
                    }
                    None if dsobj == 0 => {
                        pool::DataError { dataset: "<metadata>".into(), object, path: None, detail }
                    }
                    None => pool::DataError { dataset: format!("<0x{dsobj:x}>"), object, path: None, detail },
                };
                if !st.errors.contains(&e) {
                    st.errors.push(e);
                }
            }
            st.errors.sort();
            st.errors.dedup_by(|a, b| a.dataset == b.dataset && a.object == b.object);
        }
    }
    st
}

/// The HEALTH column of `zpool list` / the `health` property.
pub fn health_str(state: &State, p: &Pool) -> String {
    let st = pool_status(state, p);
    if st.suspended.is_some() {
        "SUSPENDED".into()
    } else {
        st.health.as_str().into()
    }
}

/// The writable pool holding dataset `name` (`pool/fs`), if any.
pub fn writer_of(state: &State, name: &str) -> Option<Arc<RwPool>> {
    state.writers.lock().unwrap_or_else(|p| p.into_inner()).get(pool_of(name)).cloned()
}

fn find_ds(state: &State, name: &str) -> Result<dsl::Dataset, String> {
    let view = state.pool(pool_of(name))?;
    view.dsl().find(name).map_err(|_| format!("cannot open '{name}': dataset does not exist"))
}

/// The pool a dataset, snapshot or bookmark name belongs to.
pub(crate) fn pool_of(name: &str) -> &str {
    name.split(['/', '@', '#']).next().unwrap_or(name)
}

/// The writable pool of `name`, or zfs's message for a read-only one.
fn writable(state: &State, name: &str, what: &str) -> Result<Arc<RwPool>, String> {
    if state.pool(pool_of(name)).is_err() {
        return Err(format!("{what}: no such pool '{}'", pool_of(name)));
    }
    writer_of(state, name).ok_or_else(|| format!("{what}: pool is read-only"))
}

/// `rzfs snapshot POOL/FS@NAME...`: all in one txg, synced at once.
pub fn snapshot(state: &State, names: &[String], props: &[String], recursive: bool) -> Result<(), String> {
    let Some(first) = names.first() else { return Ok(()) };
    let rw = writable(state, first, &format!("cannot create snapshot '{first}'"))?;
    if let Some(other) = names.iter().find(|n| pool_of(n) != rw.name) {
        return Err(format!("cannot create snapshot '{other}': snapshots must be in the same pool"));
    }
    // Snapshots take user properties only.
    if let Some(p) =
        props.iter().find(|p| !p.split_once('=').is_some_and(|(k, _)| dsl::props::is_user_prop(k)))
    {
        let k = p.split_once('=').map_or(p.as_str(), |(k, _)| k);
        return Err(format!(
            "cannot create snapshot '{first}': property '{k}': only user properties can be set on snapshots"
        ));
    }
    let parsed = parse_fs_props(props, &None)?;
    let mut all = names.to_vec();
    if recursive {
        // Every descendant file system and volume, as of the open txg's changes.
        rw.sync()?;
        let pool = state.pool(&rw.name)?;
        let list = pool.dsl().list().map_err(|e| e.to_string())?;
        for n in names {
            let Some((fs, snap)) = n.split_once('@') else { continue };
            for ds in list.iter().filter(|d| d.kind != dsl::DatasetKind::Snapshot) {
                if ds.name.starts_with(&format!("{fs}/")) {
                    all.push(format!("{}@{snap}", ds.name));
                }
            }
        }
    }
    rw.spa.snapshot(&all, parsed, now_pair().0).map_err(|e| e.to_string())
}

/// The ZPL's initial content of a new file system.
fn zpl_init(new: ZplNew) -> pool::admin::ObjsetInit {
    Arc::new(move |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
        new.create(os, z, now_pair())
            .map_err(|e| pool::PoolError::Invalid(format!("creating the file system: {e}")))
    })
}

/// `rzfs create [-o prop=value]... POOL/FS`: a new ZPL file system (a clone of `$ORIGIN`).
pub fn create_fs(state: &State, name: &str, props: &[String]) -> Result<(), String> {
    let rw = writable(state, name, &format!("cannot create '{name}'"))?;
    let (props, quotas) = split_quotas(props, &format!("cannot create '{name}'"))?;
    let props = props.as_slice();
    let fs_props = parse_fs_props(props, &None)?;
    let choices = zpl_choices(props).map_err(|e| format!("cannot create '{name}': {e}"))?;
    let parent = match name.rsplit_once('/') {
        Some((parent, _)) => {
            // The parent may have been made in the open txg (`create -p`): read it synced.
            let visible =
                |s: &State| s.pool(pool_of(parent)).ok().is_some_and(|p| p.dsl().find(parent).is_ok());
            if !visible(state) {
                rw.sync()?;
            }
            zpl_props_of(state, parent)
        }
        None => zpl::write::ZplProps::default(),
    };
    let names = choices.resolve(parent);
    rw.spa
        .create_filesystem(name, fs_props, zpl_init(names), now_pair().0)
        .map(|_| ())
        .map_err(|e| e.to_string())?;
    apply_quotas(state, name, &quotas)
}

/// What `zfs create -n` checks of a new dataset without creating it: the pool is writable,
/// the name is valid and free, and its parent exists (unless `parents`).
pub fn check_create(state: &State, name: &str, parents: bool) -> Result<(), String> {
    writable(state, name, &format!("cannot create '{name}'"))?;
    pool::admin::validate_new_name(name).map_err(|e| e.to_string())?;
    if find_ds(state, name).is_ok() {
        return Err(format!("cannot create '{name}': dataset already exists"));
    }
    let parent = name.rsplit_once('/').map_or(name, |(p, _)| p);
    if !parents && find_ds(state, parent).is_err() {
        return Err(format!("cannot create '{name}': parent does not exist"));
    }
    Ok(())
}

/// (children, parity, ashift) of each RAID-Z top-level vdev, for the volume reservation.
fn raidz_shapes(pool: &Pool) -> Vec<(u64, u64, u64)> {
    pool.tops
        .iter()
        .map(|t| pool::space::Layout::of(t))
        .filter(|l| l.nparity > 0)
        .map(|l| (l.ndata + l.nparity, l.nparity, u64::from(l.ashift)))
        .collect()
}

/// `rzfs create -V SIZE [-b BLOCKSIZE] [-s] [-o prop=value]... POOL/VOL`: a new volume.
/// Unless sparse (`-s`) or given one, it gets the `refreservation` that libzfs computes
/// (`zvol_volsize_to_reservation`), so writing it whole can never fail for lack of space.
pub fn create_volume(
    state: &State,
    name: &str,
    volsize: &str,
    blocksize: Option<&str>,
    sparse: bool,
    props: &[String],
    dry_run: bool,
) -> Result<Vec<(String, String)>, String> {
    let rw = writable(state, name, &format!("cannot create '{name}'"))?;
    let bad_size = |what: &str, v: &str| format!("bad {what} '{v}'");
    let mut volsize_s = volsize.to_string();
    let mut bs_s = blocksize.map(str::to_string);
    let mut rest = Vec::new();
    for p in props {
        match p.split_once('=') {
            Some(("volblocksize", v)) => bs_s = Some(v.to_string()),
            Some(("volsize", v)) => volsize_s = v.to_string(),
            _ => rest.push(p.clone()),
        }
    }
    let volsize = dsl::props::parse_size(&volsize_s).ok_or_else(|| bad_size("volume size", &volsize_s))?;
    let bs = match &bs_s {
        Some(v) => dsl::props::parse_size(v).ok_or_else(|| bad_size("volume block size", v))?,
        None => zpl::zvol::DEFAULT_VOLBLOCKSIZE,
    };
    zpl::zvol::check_volblocksize(bs).map_err(|e| format!("cannot create '{name}': {e}"))?;
    zpl::zvol::check_volsize(volsize, bs).map_err(|e| format!("cannot create '{name}': {e}"))?;
    let mut fs_props = parse_fs_props(&rest, &None)?;
    if fs_props.iter().any(|(k, _)| k == "mountpoint" || k == "canmount") {
        return Err(format!("cannot create '{name}': 'mountpoint' does not apply to datasets of this type"));
    }
    if !sparse && !fs_props.iter().any(|(k, _)| k == "refreservation") {
        let copies = fs_props
            .iter()
            .find(|(k, _)| k == "copies")
            .and_then(|(_, v)| v.values.first().copied())
            .unwrap_or(1);
        let pool = state.pool(&rw.name)?;
        let raidz = raidz_shapes(&pool);
        let resv = zpl::zvol::reservation_for(volsize, bs, copies, &raidz);
        fs_props.push(("refreservation".into(), ZapVal::u64(resv)));
    }
    // What `zfs create -v` lists: the sizes, and the reservation computed.
    let mut shown = vec![("volsize".to_string(), volsize.to_string())];
    if bs_s.is_some() {
        shown.push(("volblocksize".to_string(), bs.to_string()));
    }
    if let Some((_, v)) = fs_props.iter().find(|(k, _)| k == "refreservation") {
        shown.push(("refreservation".to_string(), v.values.first().copied().unwrap_or(0).to_string()));
    }
    if dry_run {
        return Ok(shown);
    }
    let init: pool::admin::ObjsetInit = Arc::new(move |os, z| {
        zpl::zvol::create(os, z, volsize, bs)
            .map_err(|e| pool::PoolError::Invalid(format!("creating the volume: {e}")))
    });
    rw.spa.create_volume(name, fs_props, init, now_pair().0).map_err(|e| e.to_string())?;
    Ok(shown)
}

/// `rzfs clone [-o prop=value]... POOL/FS@SNAP POOL/NEW`: a file system whose first state is
/// the snapshot's.
pub fn clone_fs(state: &State, snapshot: &str, name: &str, props: &[String]) -> Result<(), String> {
    if !snapshot.contains('@') {
        return Err(format!("cannot clone '{snapshot}': not a snapshot (expected POOL/FS@SNAP)"));
    }
    if pool_of(snapshot) != pool_of(name) {
        return Err(format!("cannot create '{name}': source and target pools differ"));
    }
    let rw = writable(state, name, &format!("cannot create '{name}'"))?;
    // A clone of a volume's snapshot is a volume: file system properties do not apply
    // (zfs_valid_proplist).
    let head = snapshot.split('@').next().unwrap_or(snapshot);
    if find_ds(state, head).is_ok_and(|d| d.kind == dsl::DatasetKind::Volume) {
        for p in props {
            let k = p.split_once('=').map_or(p.as_str(), |(k, _)| k);
            let k = dsl::props::canonical(k);
            if !dsl::props::is_user_prop(k) && !crate::cmd::zfs::applies_to_type(k, 'V') {
                return Err(format!("cannot create '{name}': '{k}' does not apply to datasets of this type"));
            }
        }
    }
    let (props, quotas) = split_quotas(props, &format!("cannot create '{name}'"))?;
    let fs_props = parse_fs_props(&props, &None)?;
    // `-o version=`: the clone starts at its origin's version and may only go up
    // (zfs_set_version refuses a downgrade, and the clone is not made).
    let version = zpl_choices(&props).map_err(|e| format!("cannot create '{name}': {e}"))?.version;
    if let Some(v) = version {
        let origin = zpl_version_of(state, snapshot);
        if v < origin {
            return Err(format!(
                "cannot create '{name}': 'version' cannot go below the origin's version {origin} ({v} given)"
            ));
        }
    }
    rw.spa.clone_filesystem(snapshot, name, fs_props, now_pair().0).map_err(|e| e.to_string())?;
    if let Some(v) = version.filter(|&v| v > zpl_version_of(state, snapshot)) {
        upgrade_fs(state, name, v)?;
    }
    apply_quotas(state, name, &quotas)
}

/// The ZPL version of file system or snapshot `name` (its master node's `VERSION`; the
/// current version when it cannot be read, as for a volume).
fn zpl_version_of(state: &State, name: &str) -> u64 {
    let read = || -> Option<u64> {
        let pool = state.pool(pool_of(name)).ok()?;
        let dsl = pool.dsl();
        let os = dsl.open_objset(&dsl.find(name).ok()?).ok()?;
        zap::lookup_u64(&os, zpl::MASTER_NODE_OBJ, "VERSION").ok()?
    };
    read().unwrap_or(zpl::write::ZPL_VERSION)
}

/// `rzfs set volsize=SIZE VOL`: the volume's size changes (shrinking frees the tail), and
/// a refreservation that was the computed one for the old size follows to the new one, as
/// libzfs does. Synced before it returns, so listings show it.
fn set_volsize(state: &State, name: &str, value: &str) -> Result<(), String> {
    let fail = |e: String| format!("cannot set property for '{name}': {e}");
    let rw = writable(state, name, &format!("cannot set property for '{name}'"))?;
    let pool = state.pool(&rw.name)?;
    let dsl = pool.dsl();
    let ds = find_ds(state, name)?;
    if ds.kind != dsl::DatasetKind::Volume {
        return Err(fail("'volsize' does not apply to datasets of this type".into()));
    }
    let new = dsl::props::parse_size(value).ok_or_else(|| fail(format!("bad volume size '{value}'")))?;
    let os = dsl.open_objset(&ds).map_err(|e| fail(e.to_string()))?;
    let (old, bs) = zpl::zvol::info(&os).map_err(|e| fail(e.to_string()))?;
    zpl::zvol::check_volsize(new, bs).map_err(|e| fail(e.to_string()))?;
    let resv = crate::cmd::zfs::prop_value(&pool, &dsl, &ds, "refreservation")
        .ok()
        .and_then(|v| v.exact.parse::<u64>().ok())
        .unwrap_or(0);
    let raidz = raidz_shapes(&pool);
    let copies = crate::cmd::zfs::prop_value(&pool, &dsl, &ds, "copies")
        .ok()
        .and_then(|v| v.exact.parse::<u64>().ok())
        .unwrap_or(1);
    rw.spa.open_dataset(ds.ds_obj).map_err(|e| fail(e.to_string()))?;
    let check = if new < old { SpaceCheck::Reserved } else { SpaceCheck::Normal };
    rw.spa
        .with_dataset(ds.ds_obj, check, Reserve::Meta, |tx| {
            zpl::zvol::set_volsize(&mut tx.ds.os, &mut tx.ds.zaps, new)
                .map_err(|e| pool::PoolError::Invalid(e.to_string()))
        })
        .map_err(|e| fail(e.to_string()))?;
    if resv != 0 && resv == zpl::zvol::reservation_for(old, bs, copies, &raidz) {
        let r = zpl::zvol::reservation_for(new, bs, copies, &raidz);
        rw.spa
            .set_props(name, vec![("refreservation".into(), Some(ZapVal::u64(r)))])
            .map_err(|e| fail(e.to_string()))?;
    }
    rw.sync()?;
    crate::volumes::resized(state, name);
    Ok(())
}

/// `rzfs set PROP=VALUE... NAME...`.
pub fn set(state: &State, assignments: &[String], names: &[String]) -> Result<(), String> {
    let mut rest = Vec::new();
    let mut quotas = Vec::new();
    for a in assignments {
        match a.split_once('=') {
            Some((k, v)) if zpl::space::SpaceProp::parse(k).is_some() => quotas.push((k, v)),
            Some(("volblocksize", _)) => {
                return Err("cannot set property: 'volblocksize' is readonly".into());
            }
            // Set once, when the file system is made (`PROP_ONETIME`).
            Some((k, _)) if ZPL_NAME_PROPS.contains(&dsl::props::canonical(k)) => {
                let name = names.first().map(String::as_str).unwrap_or_default();
                return Err(format!(
                    "cannot set property for '{name}': '{}' is readonly",
                    dsl::props::canonical(k)
                ));
            }
            Some(("volsize", _)) => {}
            Some(("version", v)) => {
                let to = zpl_version(v).map_err(|e| format!("cannot set property: {e}"))?;
                for name in names {
                    upgrade_fs(state, name, to)?;
                }
            }
            _ => rest.push(a.clone()),
        }
    }
    for name in names {
        for (k, v) in &quotas {
            set_space_quota(state, name, k, v)?;
        }
    }
    let parsed = parse_fs_props(&rest, &None)?;
    for a in assignments {
        if let Some(("volsize", v)) = a.split_once('=') {
            for name in names {
                set_volsize(state, name, v)?;
            }
        }
    }
    if parsed.is_empty() {
        return Ok(());
    }
    for name in names {
        let rw = writable(state, name, &format!("cannot set property for '{name}'"))?;
        let props = parsed.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
        rw.spa.set_props(name, props).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The pool version a file system of ZPL version `v` needs (`zfs_spa_version_map`:
/// FUIDs came with pool version 9, user accounting with 15, system attributes with 24).
pub fn spa_version_for_zpl(v: u64) -> u64 {
    match v {
        0..=2 => 1,
        3 => 9,
        4 => 15,
        _ => 24,
    }
}

/// `zfs upgrade -V TO NAME` and `zfs set version=TO NAME` (`zfs_set_version`): raises
/// file system `name`'s ZPL version; a mounted one goes on with the new version at once.
/// A lower version is refused; so is one the pool's version cannot hold.
pub fn upgrade_fs(state: &State, name: &str, to: u64) -> Result<(), String> {
    let what = format!("cannot set property for '{name}'");
    let rw = writable(state, name, &what)?;
    let pool = state.pool(pool_of(name)).map_err(|e| format!("{what}: {e}"))?;
    let ds = pool.dsl().find(name).map_err(|_| format!("{what}: dataset does not exist"))?;
    if ds.kind != dsl::DatasetKind::Filesystem {
        return Err(format!("{what}: 'version' does not apply to datasets of this type"));
    }
    if pool.version() < spa_version_for_zpl(to) {
        return Err(format!("{what}: pool must be upgraded to set this property or value"));
    }
    rw.spa.open_dataset(ds.ds_obj).map_err(|e| format!("{what}: {e}"))?;
    rw.spa
        .with_dataset(ds.ds_obj, SpaceCheck::Reserved, Reserve::Meta, |tx| {
            let mut zpl = rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
            let mut fresh = None;
            let z = match zpl.get_mut(&ds.ds_obj) {
                Some(z) => z,
                None => fresh.insert(
                    zpl::write::ZplWriter::open(&tx.ds.os, &mut tx.ds.zaps)
                        .map_err(|e| pool::PoolError::Invalid(e.to_string()))?,
                ),
            };
            if to < z.version() {
                return Err(pool::PoolError::Invalid(format!(
                    "'version' cannot go down from {} to {to}",
                    z.version()
                )));
            }
            z.upgrade(&mut tx.ds.os, &mut tx.ds.zaps, to).map_err(|e| pool::PoolError::Invalid(e.to_string()))
        })
        .map_err(|e| format!("{what}: {e}"))?;
    rw.sync().map_err(|e| format!("{what}: {e}"))
}

/// `zfs set userquota@WHO=LIMIT|none` and the other quotas of that family on file system
/// `name` (libzfs `zfs_valid_proplist`, `zfs_set_userquota`).
fn set_space_quota(state: &State, name: &str, k: &str, v: &str) -> Result<(), String> {
    let what = format!("cannot set property for '{name}'");
    let (p, id, limit) = check_quota(&what, k, v)?;
    let rw = writable(state, name, &what)?;
    let ds = state.pool(pool_of(name)).map_err(|e| format!("{what}: {e}"))?;
    let ds = ds.dsl().find(name).map_err(|_| format!("{what}: dataset does not exist"))?;
    match ds.kind {
        dsl::DatasetKind::Filesystem => {}
        dsl::DatasetKind::Snapshot => {
            return Err(format!("{what}: this property can not be modified for snapshots"))
        }
        _ => return Err(format!("{what}: '{k}' does not apply to datasets of this type")),
    }
    // Quotas per owner came with ZPL version 4 (`ZPL_VERSION_USERSPACE`, checked in
    // zfs_set_userquota); project quotas need system attributes (version 5).
    let needed = if k.starts_with("project") { 5 } else { 4 };
    if zpl_version_of(state, name) < needed {
        return Err(format!("{what}: pool and or dataset must be upgraded to set this property or value"));
    }
    rw.spa.open_dataset(ds.ds_obj).map_err(|e| format!("{what}: {e}"))?;
    rw.spa
        .with_dataset(ds.ds_obj, SpaceCheck::Reserved, Reserve::Meta, |tx| {
            zpl::space::set_quota(&mut tx.ds.os, &mut tx.ds.zaps, p, id, limit)
                .map_err(|e| pool::PoolError::Invalid(e.to_string()))
        })
        .map_err(|e| format!("{what}: {e}"))?;
    // `zfs get` and `userspace` read committed state; OpenZFS's read the open txg's ZAP,
    // where the limit shows at once.
    rw.sync().map_err(|e| format!("{what}: {e}"))
}

/// Parses `userquota@WHO=LIMIT`: the property, the id and the limit (0 for `none`), or
/// libzfs's complaint prefixed by `what`.
fn check_quota(what: &str, k: &str, v: &str) -> Result<(zpl::space::SpaceProp, u64, u64), String> {
    let (p, who) =
        zpl::space::SpaceProp::parse(k).ok_or_else(|| format!("{what}: invalid property '{k}'"))?;
    if !p.quota {
        return Err(format!("{what}: '{k}' is readonly"));
    }
    let id = crate::cmd::userspace::resolve(p.owner, who)
        .ok_or_else(|| format!("{what}: '{k}' has an invalid user/group name"))?;
    let limit = if v == "none" {
        0
    } else {
        dsl::props::parse_size(v).ok_or_else(|| format!("{what}: bad numeric value '{v}'"))?
    };
    Ok((p, id, limit))
}

/// `rzfs inherit PROP NAME...`: removes the local value.
/// `zfs inherit [-S] PROP NAME...`: the local value goes; with `received` (-S) the
/// received value applies again, else the value is inherited (hiding a received one).
pub fn inherit(state: &State, prop: &str, names: &[String], received: bool) -> Result<(), String> {
    let prop = dsl::props::canonical(prop);
    // zfs_do_inherit's refusals, before any dataset is looked at.
    if !dsl::props::is_user_prop(prop) {
        if dsl::props::is_readonly(prop) {
            return Err(format!("{prop} property is read-only"));
        }
        if !dsl::props::is_inheritable(prop) && !received {
            let mut msg = format!("'{prop}' property cannot be inherited");
            if ["quota", "reservation", "refquota", "refreservation"].contains(&prop) {
                msg.push_str(&format!(
                    "\nuse 'zfs set {prop}=none' to clear\nuse 'zfs inherit -S {prop}' to revert to received value"
                ));
            }
            return Err(msg);
        }
        if received && (prop == "volsize" || prop == "version") {
            return Err(format!("'{prop}' property cannot be reverted to a received value"));
        }
    }
    // Only properties rzfs can set can be inherited (the same table validates both).
    if dsl::props::parse_value(prop, "").is_err()
        && !dsl::props::DEFAULTS.iter().any(|(p, _)| *p == prop)
        && prop != "mountpoint"
    {
        return Err(format!("invalid property '{prop}'"));
    }
    for name in names {
        let rw = writable(state, name, &format!("cannot inherit '{prop}' for '{name}'"))?;
        if received {
            rw.spa.revert_to_received(name, prop).map_err(|e| e.to_string())?;
        } else {
            rw.spa.set_props(name, vec![(prop.to_string(), None)]).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// `rzfs destroy` of `names`, in order (snapshots and deeper datasets first), in one txg.
pub fn destroy(state: &State, names: &[String], objs: &[u64], defer: bool) -> Result<(), String> {
    let Some(first) = names.first() else { return Ok(()) };
    let rw = writable(state, first, &format!("cannot destroy '{first}'"))?;
    rw.spa.destroy_datasets_defer(names, defer).map_err(|e| e.to_string())?;
    // Their object numbers may be reused by the next dataset created.
    {
        let mut z = rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
        for o in objs {
            z.remove(o);
        }
    }
    forget_snapshot_names(state, names);
    Ok(())
}

/// Snapshots `fs@snap` that no longer exist under that name: the mounts of `fs` drop the
/// kernel's cached `.zfs/snapshot/snap`.
pub fn forget_snapshot_names(state: &State, names: &[String]) {
    let mounts = state.mounts.lock().unwrap_or_else(|p| p.into_inner());
    for n in names {
        let Some((fs, snap)) = n.split_once('@') else { continue };
        for m in mounts.iter().filter(|m| m.dataset == fs) {
            m.session.invalidate_snapshot(snap);
        }
    }
}

/// Records a successful command in the pool history (synced with the next txg).
pub fn log_history(state: &State, pool: &str, command: &str) {
    if let Some(rw) = writer_of(state, pool) {
        if let Err(e) = rw.spa.log_history(command) {
            eprintln!("rzfsd: history of '{pool}': {e}");
        }
    }
}

/// `rzpool set PROP=VALUE POOL` for the pool properties rzfs stores; the value goes into the
/// MOS `pool_props` ZAP, as OpenZFS keeps it.
pub fn set_pool_prop(state: &State, assignment: &str, pool: &str) -> Result<(), String> {
    let (k, v) = assignment
        .split_once('=')
        .ok_or_else(|| format!("invalid property '{assignment}': expected name=value"))?;
    let rw = writer_of(state, pool)
        .ok_or_else(|| format!("cannot set property for '{pool}': pool is not imported read-write"))?;
    if let Some(f) = k.strip_prefix("feature@") {
        if v != "enabled" {
            return Err(format!("property 'feature@{f}' can only be set to 'enabled'"));
        }
        pool::feature_table::check_requested(&[f])?;
        return rw.spa.enable_feature(f).map_err(|e| format!("cannot set property for '{pool}': {e}"));
    }
    // User properties (OpenZFS 2.2 `zpool set module:name=value`): strings in the same
    // pool_props ZAP; an empty value removes one (zpool_valid_proplist's limits).
    if k.contains(':') {
        if !dsl::props::is_user_prop(k) {
            return Err(format!("invalid property '{k}'"));
        }
        if k.len() >= dsl::props::MAX_PROP_NAME {
            return Err(format!("property name '{k}' is too long"));
        }
        if v.len() >= dsl::props::MAX_PROP_VALUE {
            return Err(format!("property value '{v}' is too long"));
        }
        let val = if v.is_empty() { PoolPropValue::Remove } else { PoolPropValue::Str(v.into()) };
        return rw.spa.set_pool_prop(k, val).map_err(|e| format!("cannot set property for '{pool}': {e}"));
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
        "comment" => PoolPropValue::Str(v.into()),
        "ashift" => PoolPropValue::Num(parse_ashift(v)?),
        "compatibility" => {
            pool::compat::load(v)?;
            PoolPropValue::Str(v.into())
        }
        "autoexpand" | "autoreplace" | "autotrim" | "listsnapshots" | "delegation" => {
            PoolPropValue::Num(onoff(v)?)
        }
        "multihost" if v == "on" => {
            return Err(format!(
                "cannot set property for '{pool}': multihost protection (MMP) is not supported by rzfs"
            ))
        }
        "multihost" => PoolPropValue::Num(onoff(v)?),
        "failmode" => PoolPropValue::Num(match v {
            "wait" => 0,
            "continue" => 1,
            "panic" => {
                return Err(format!(
                    "cannot set property for '{pool}': failmode=panic is not supported by rzfs (a userspace daemon does not panic the machine); use wait or continue"
                ))
            }
            _ => return Err("property 'failmode' must be one of 'wait', 'continue', 'panic'".into()),
        }),
        "bootfs" if v.is_empty() => PoolPropValue::Remove,
        // A file system or a snapshot of one in this pool (bootfs_name_valid; the kernel's
        // spa_prop_validate refuses other objset types, ZTS bootfs_001/002).
        "bootfs" => {
            if pool_of(v) != pool {
                return Err(format!("cannot set property for '{pool}': '{v}' is an invalid name"));
            }
            let ds = state.pool(pool)?.dsl().find(v).map_err(|e| format!("cannot set property for '{pool}': {e}"))?;
            if ds.kind == dsl::DatasetKind::Volume {
                return Err(format!(
                    "cannot set property for '{pool}': '{v}' is a volume; bootfs must be a file system or a snapshot"
                ));
            }
            PoolPropValue::Dataset(v.into())
        }
        _ => return Err(format!("cannot set property for '{pool}': '{k}' cannot be set by rzfs yet")),
    };
    rw.spa.set_pool_prop(k, val).map_err(|e| format!("cannot set property for '{pool}': {e}"))
}

/// The sector shift of a new pool's vdevs when `-o ashift` gives none. OpenZFS takes each
/// device's own (its physical sector size; for files the `vdev_file_*_ashift` tunables,
/// 512 bytes by default). rzfs uses 4 KiB sectors, which no disk sold today is smaller
/// than, unless every device is a file and the tunables directory sets the file sector
/// size (as ZTS's sandbox does): then OpenZFS's rule for files applies.
pub fn default_ashift<'a>(mut leaves: impl Iterator<Item = &'a NewLeaf>) -> u8 {
    const RZFS_DEFAULT_ASHIFT: u8 = 12;
    if leaves.all(|l| !l.is_disk) {
        pool::tunables::file_vdev_ashift().unwrap_or(RZFS_DEFAULT_ASHIFT)
    } else {
        RZFS_DEFAULT_ASHIFT
    }
}

/// An `ashift` pool property value: 0 (each device's own) or 9 to 16
/// (zpool_valid_proplist's check).
pub fn parse_ashift(v: &str) -> Result<u64, String> {
    let n: u64 = v.parse().map_err(|_| format!("property 'ashift' must be a number: '{v}'"))?;
    if n != 0 && !(9..=16).contains(&n) {
        return Err(format!(
            "property 'ashift' number {n} is invalid, only values between 9 and 16 are allowed."
        ));
    }
    Ok(n)
}

/// The FUSE backend of a dataset of a writable pool.
pub struct DsBackend {
    pub rw: Arc<RwPool>,
    pub ds: u64,
    pub readonly: bool,
}

impl DsBackend {
    /// Opens dataset `name` for a read-write mount.
    pub fn open(state: &Arc<State>, rw: Arc<RwPool>, name: &str) -> Result<DsBackend, String> {
        let ds = find_ds(state, name)?;
        if name.contains('@') {
            return Err(format!("cannot mount '{name}': snapshots are mounted read-only under .zfs"));
        }
        let settings = rw.spa.open_dataset(ds.ds_obj).map_err(|e| format!("cannot mount '{name}': {e}"))?;
        rw.spa
            .with_dataset(ds.ds_obj, SpaceCheck::Normal, Reserve::None, |tx| {
                let mut zpl = rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
                if let std::collections::btree_map::Entry::Vacant(e) = zpl.entry(ds.ds_obj) {
                    let z = zpl::write::ZplWriter::open(&tx.ds.os, &mut tx.ds.zaps)
                        .map_err(|e| pool::PoolError::Invalid(e.to_string()))?;
                    e.insert(z);
                }
                Ok(())
            })
            .map_err(|e| format!("cannot mount '{name}': {e}"))?;
        let readonly = settings.readonly;
        Ok(DsBackend { rw, ds: ds.ds_obj, readonly })
    }
}

/// A write-layer error for a pool-layer one (its errno and message).
fn zpl_err(e: pool::PoolError) -> zpl::write::ZplWriteError {
    zpl::write::ZplWriteError::Errno(e.errno(), e.to_string())
}

impl rzfs_fuse::rw::RwBackend for DsBackend {
    fn with(
        &self,
        op: rzfs_fuse::rw::Op,
        f: &mut dyn FnMut(rzfs_fuse::rw::RwCtx<'_>) -> Result<(), zpl::write::ZplWriteError>,
    ) -> Result<(), zpl::write::ZplWriteError> {
        use rzfs_fuse::rw::Op;
        let (check, reserve) = match op {
            Op::Read => (SpaceCheck::Normal, Reserve::None),
            Op::Write { len, .. } => (SpaceCheck::Normal, Reserve::Write { len, block: 0 }),
            Op::Setattr { sa, .. } if sa.size.is_none() => (SpaceCheck::Normal, Reserve::Meta),
            Op::Meta | Op::Atime => (SpaceCheck::Normal, Reserve::Meta),
            Op::Free | Op::Setattr { .. } => (SpaceCheck::Reserved, Reserve::Meta),
        };
        loop {
            // Held while the dataset is replaced underneath the mount (checked again with
            // the pool held, which the replacement takes).
            self.rw.wait_resumed(self.ds);
            let mut held = false;
            let mut always = false;
            let mut inner = Ok(());
            let r = self.rw.spa.with_dataset(self.ds, check, reserve, |tx| {
                if self.rw.is_suspended(self.ds) {
                    held = true;
                    return Ok(());
                }
                let mut zpl = self.rw.zpl.lock().unwrap_or_else(|p| p.into_inner());
                let Some(z) = zpl.get_mut(&self.ds) else {
                    inner = Err(zpl::write::ZplWriteError::Errno(5, "dataset is not mounted".into()));
                    return Ok(());
                };
                z.txg = tx.txg;
                let recordsize = tx.ds.recordsize;
                let atime = match tx.ds.atime {
                    pool::writer::ATIME_OFF => rzfs_fuse::rw::Atime::Off,
                    pool::writer::ATIME_ON => rzfs_fuse::rw::Atime::On,
                    _ => rzfs_fuse::rw::Atime::Relatime,
                };
                let d = tx.ds;
                z.copies = d.policy.copies;
                let (readonly, xattr) = (d.readonly, d.xattr);
                inner = f(rzfs_fuse::rw::RwCtx {
                    zpl: z,
                    os: &mut d.os,
                    zaps: &mut d.zaps,
                    recordsize,
                    atime,
                    readonly,
                    xattr,
                });
                always = d.zil.sync_mode == pool::zil::SYNC_ALWAYS && op != Op::Read;
                // What the intent log can describe of this change (see pool::zil).
                match (op, &inner) {
                    (Op::Read | Op::Atime, _) => {}
                    (Op::Write { obj, off, len }, Ok(())) => d.zil.note_write(obj, off, len),
                    (Op::Setattr { obj, sa }, Ok(())) => {
                        let change = pool::zil::AttrChange {
                            mode: sa.mode.map(u64::from),
                            uid: sa.uid.map(u64::from),
                            gid: sa.gid.map(u64::from),
                            size: sa.size,
                            atime: sa.atime,
                            mtime: sa.mtime,
                        };
                        d.zil.note_setattr(obj, change)
                    }
                    _ => d.zil.taint(),
                }
                Ok(())
            });
            r.map_err(zpl_err)?;
            if !held {
                // sync=always: the change is durable before the call returns (OpenZFS
                // commits the log at the end of each operation).
                if always && inner.is_ok() {
                    self.rw.spa.zil_commit(self.ds).map_err(zpl_err)?;
                }
                return inner;
            }
        }
    }

    fn sync(&self) -> Result<(), String> {
        self.rw.sync()
    }

    fn fsync(&self) -> Result<(), String> {
        self.rw.spa.zil_commit(self.ds).map_err(|e| format!("cannot sync '{}': {e}", self.rw.name))
    }

    fn readonly(&self) -> bool {
        self.readonly
    }

    fn poison(&self, what: &str) {
        self.rw.spa.poison_from(what);
    }

    fn read_error(&self, obj: u64) {
        self.rw.spa.record_data_error(self.ds, obj, "read failed: no copy of a block verifies".into());
    }

    /// As OpenZFS's `zfs_statfs`: the size is what the dataset references plus what it can
    /// still take (within its quotas), so `df` shows the dataset's own use, not the pool's,
    /// and never counts the slop as used.
    fn space(&self) -> (u64, u64, u64, u64) {
        let (refd, avail) = self.rw.spa.head_space(self.ds).unwrap_or_else(|_| (0, self.rw.spa.space().1));
        (refd.saturating_add(avail), avail, 0, 1u64 << 32)
    }
}

#[cfg(test)]
mod tests {
    /// libzfs's reserved pool names: the vdev-type prefixes, `log` alone, disk-like names.
    #[test]
    fn reserved_pool_names() {
        for bad in ["mirror", "mirror2", "raidz1x", "draid", "spares", "log", "c0t0d0"] {
            assert!(super::check_pool_name(bad).unwrap_err().ends_with("name is reserved"), "{bad}");
        }
        for ok in ["logs", "logfail", "cache", "special", "dedup", "tank", "c", "cx1"] {
            assert_eq!(super::check_pool_name(ok), Ok(()), "{ok}");
        }
    }
}
