//! Opening a dataset's ZPL (and its snapshots, for `.zfs/snapshot`).

use dsl::Dataset;
use pool::Pool;
use std::sync::Arc;
use zpl::Zpl;

/// Opens the ZPL of one dataset or snapshot.
pub fn open_zpl_only(pool: &Pool, ds: &Dataset) -> Result<Zpl, String> {
    let os = pool.dsl().open_objset(ds).map_err(|e| e.to_string())?;
    Zpl::open(os).map_err(|e| e.to_string())
}

/// When `head`'s snapshots last changed, as a time for `.zfs/snapshot` (nanoseconds kept
/// below a second whatever the pool holds); (0, 0) when never or unreadable.
fn snapshots_changed(pool: &Pool, head: &Dataset) -> (u64, u32) {
    let (sec, nsec) = pool.dsl().snapshots_changed(head.dir_obj).unwrap_or((0, 0));
    (sec, nsec.min(999_999_999) as u32)
}

/// The snapshots of one head dataset, opened lazily.
struct PoolSnapshots {
    pool: Arc<Pool>,
    head: Dataset,
    names: Vec<String>,
}

impl rzfs_fuse::Snapshots for PoolSnapshots {
    fn list(&self) -> Vec<String> {
        self.names.clone()
    }
    fn open(&self, name: &str) -> Result<Zpl, String> {
        let ds = self.pool.dsl().find(&format!("{}@{name}", self.head.name)).map_err(|e| e.to_string())?;
        open_zpl_only(&self.pool, &ds)
    }
    fn changed(&self) -> (u64, u32) {
        snapshots_changed(&self.pool, &self.head)
    }
}

/// The snapshots of a file system mounted read-write: listed and opened from the pool as
/// it is committed at each call (snapshots come and go while it is mounted).
/// The head is known by its dataset object, not its name: `zfs rename -u` renames a file
/// system under a live mount.
struct LiveSnapshots {
    state: Arc<crate::daemon::State>,
    pool: String,
    head_obj: u64,
}

impl LiveSnapshots {
    fn head(&self) -> Result<(Arc<Pool>, Dataset), String> {
        let pool = self.state.pool(&self.pool)?;
        let head = pool
            .dsl()
            .list()
            .map_err(|e| e.to_string())?
            .into_iter()
            .find(|d| d.ds_obj == self.head_obj && d.kind != dsl::DatasetKind::Snapshot)
            .ok_or_else(|| "the file system is gone".to_string())?;
        Ok((pool, head))
    }
}

impl LiveSnapshots {
    /// The file system's name, when `mkdir`/`rmdir`/`mv` in `.zfs/snapshot` may change its
    /// snapshots: only with the daemon's `RZFS_ADMIN_SNAPSHOT=1` (OpenZFS's module tunable
    /// `zfs_admin_snapshot`, off by default on Linux, where these get EACCES).
    fn admin(&self) -> Result<String, i32> {
        if std::env::var("RZFS_ADMIN_SNAPSHOT").as_deref() != Ok("1") {
            return Err(libc::EACCES);
        }
        self.head().map(|(_, h)| h.name).map_err(|_| libc::ENOENT)
    }
}

/// The errno a failed snapshot change under `.zfs/snapshot` gives, from zfs's message.
fn errno(msg: String) -> i32 {
    if msg.contains("busy") {
        libc::EBUSY
    } else if msg.contains("already exists") || msg.contains("dependent clones") {
        libc::EEXIST
    } else if msg.contains("does not exist") {
        libc::ENOENT
    } else if msg.contains("out of space") || msg.contains("No space") {
        libc::ENOSPC
    } else if msg.contains("invalid") || msg.contains("too long") {
        libc::EINVAL
    } else {
        libc::EPERM
    }
}

impl rzfs_fuse::Snapshots for LiveSnapshots {
    fn list(&self) -> Vec<String> {
        let Ok((pool, head)) = self.head() else { return Vec::new() };
        pool.dsl()
            .snapshots(&head)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| s.name.split_once('@').map(|(_, n)| n.to_string()))
            .collect()
    }
    fn list_ids(&self) -> Vec<(String, u64)> {
        let Ok((pool, head)) = self.head() else { return Vec::new() };
        pool.dsl()
            .snapshots(&head)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| s.name.split_once('@').map(|(_, n)| (n.to_string(), s.ds.guid)))
            .collect()
    }
    fn open(&self, name: &str) -> Result<Zpl, String> {
        let (pool, head) = self.head()?;
        let ds = pool.dsl().find(&format!("{}@{name}", head.name)).map_err(|e| e.to_string())?;
        open_zpl_only(&pool, &ds)
    }
    fn changed(&self) -> (u64, u32) {
        self.head().map_or((0, 0), |(pool, head)| snapshots_changed(&pool, &head))
    }
    fn create(&self, name: &str) -> Result<(), i32> {
        let fs = self.admin()?;
        crate::cmd::zfs::snapdir_snapshot(&self.state, &format!("{fs}@{name}")).map_err(errno)
    }
    fn destroy(&self, name: &str) -> Result<(), i32> {
        let fs = self.admin()?;
        crate::cmd::zfs::snapdir_destroy(&self.state, &format!("{fs}@{name}")).map_err(errno)
    }
    fn rename(&self, old: &str, new: &str) -> Result<(), i32> {
        let fs = self.admin()?;
        crate::cmd::zfs::snapdir_rename(&self.state, &format!("{fs}@{old}"), &format!("{fs}@{new}"))
            .map_err(errno)
    }
    fn snapdir_now(&self) -> Option<(bool, bool)> {
        let (pool, head) = self.head().ok()?;
        let v = crate::cmd::zfs::prop_value(&pool, &pool.dsl(), &head, "snapdir").ok()?.exact;
        Some((v == "visible", v == "disabled"))
    }
}

/// `.zfs/snapshot` of file system `ds`, mounted read-write. Its `snapdir` is read at each
/// lookup of `.zfs` and listing of the root, so `zfs set snapdir=` applies at once.
pub fn live_snapshots(
    state: &Arc<crate::daemon::State>,
    pool: &Arc<Pool>,
    ds: &Dataset,
) -> Option<rzfs_fuse::SnapshotSource> {
    let dsl = pool.dsl();
    let snapdir = crate::cmd::zfs::prop_value(pool, &dsl, ds, "snapdir").map(|v| v.exact).unwrap_or_default();
    Some(rzfs_fuse::SnapshotSource {
        snapshots: Box::new(LiveSnapshots {
            state: state.clone(),
            pool: pool.name().to_string(),
            head_obj: ds.ds_obj,
        }),
        snapdir_visible: snapdir == "visible",
        on_error: live_error_sink(state.clone(), pool.name().to_string(), ds.name.clone()),
    })
}

/// [`error_sink`] for a mount of a pool being written: the pool's current view is looked up
/// at each error, as the mount must not keep an old view (and with it the devices of the
/// vdev tree of its time: a detached leaf would stay open and locked).
fn live_error_sink(state: Arc<crate::daemon::State>, pool: String, dataset: String) -> rzfs_fuse::ErrorSink {
    Arc::new(move |snap: Option<&str>, obj: u64, e: &zpl::ZplError| {
        if let Ok(p) = state.pool(&pool) {
            error_sink(p, dataset.clone())(snap, obj, e);
        }
    })
}

/// Everything a mount needs: the head's ZPL and its snapshots.
pub fn open_zpl(pool: &Arc<Pool>, ds: &Dataset) -> Result<rzfs_fuse::MountSource, String> {
    let head = open_zpl_only(pool, ds)?;
    let names = if ds.kind == dsl::DatasetKind::Snapshot {
        Vec::new()
    } else {
        pool.dsl()
            .snapshots(ds)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter_map(|s| s.name.split_once('@').map(|(_, n)| n.to_string()))
            .collect()
    };
    let dsl = pool.dsl();
    let snapdir = crate::cmd::zfs::prop_value(pool, &dsl, ds, "snapdir").map(|v| v.exact).unwrap_or_default();
    Ok(rzfs_fuse::MountSource {
        head,
        snapshots: Box::new(PoolSnapshots { pool: pool.clone(), head: ds.clone(), names }),
        snapdir_visible: snapdir == "visible",
        snapdir_disabled: snapdir == "disabled",
        on_error: error_sink(pool.clone(), ds.name.clone()),
    })
}

/// Records unreadable blocks in the pool's error log, with the file's path when it can be
/// found (the path walk itself may hit the damage; then the object number is shown).
fn error_sink(pool: Arc<Pool>, dataset: String) -> rzfs_fuse::ErrorSink {
    Arc::new(move |snap: Option<&str>, obj: u64, e: &zpl::ZplError| {
        let name = match snap {
            Some(s) => format!("{dataset}@{s}"),
            None => dataset.clone(),
        };
        let path = pool
            .dsl()
            .find(&name)
            .ok()
            .and_then(|ds| open_zpl_only(&pool, &ds).ok())
            .and_then(|z| z.path_of(obj));
        pool.record_error(pool::DataError { dataset: name, object: obj, path, detail: e.to_string() });
    })
}
