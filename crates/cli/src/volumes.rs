//! # volumes — how the daemon serves volumes (`zfs create -V`) as block devices
//!
//! Every volume of a pool imported read-write is a file of the daemon's volume tree, a
//! FUSE file system mounted at `RZFS_VOL_DIR` (default `/run/rzfs/volumes`;
//! [`rzfs_fuse::zvol`]). Unless its `volmode` is `none`, the file is attached to a free
//! loop device (`losetup`) and `/dev/zvol/POOL/VOL` (`RZFS_ZVOL_DIR` moves `/dev/zvol`)
//! links to it, as OpenZFS's udev rules link to `/dev/zdN`; where no loop device can be
//! had (a container without `/dev/loop*`), the link goes to the file itself, which
//! `mkfs` and `mount -o loop` accept. `RZFS_VOL_LOOP=0` skips loop devices.
//!
//! A volume stops being served before it is destroyed and before its pool is exported or
//! destroyed. A loop device somebody holds (a mounted file system, an open `/dev/loopN`)
//! makes that refuse with EBUSY, as OpenZFS refuses to destroy an open zvol; `-f`
//! detaches anyway (the loop device lets go when its last user closes it).
//!
//! Locks: the table's lock is never held while calling into a pool, nor while running
//! `losetup`, whose opens come back to this daemon through FUSE.

use crate::daemon::State;
use crate::rwpool::RwPool;
use pool::space::{Reserve, SpaceCheck};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// One served volume.
#[derive(Clone)]
struct Entry {
    rw: Arc<RwPool>,
    ds: u64,
    block: u64,
    readonly: bool,
}

/// The volumes the FUSE tree shows (its backend).
#[derive(Default)]
pub struct Table {
    vols: Mutex<BTreeMap<String, Entry>>,
}

/// The daemon's volume state: the table, the tree's mount, and each volume's device.
#[derive(Default)]
pub struct Volumes {
    table: Arc<Table>,
    mount: Mutex<Option<rzfs_fuse::MountHandle>>,
    devices: Mutex<BTreeMap<String, Device>>,
}

/// How a volume appears under /dev.
#[derive(Clone, Debug)]
struct Device {
    /// `/dev/loopN`, when one was attached.
    loopdev: Option<String>,
    /// The `/dev/zvol/POOL/VOL` link.
    link: Option<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where the volume tree is mounted.
pub fn vol_dir() -> PathBuf {
    std::env::var_os("RZFS_VOL_DIR").map(PathBuf::from).unwrap_or_else(|| "/run/rzfs/volumes".into())
}

/// Where the `/dev/zvol/POOL/VOL` links go.
pub fn link_dir() -> PathBuf {
    std::env::var_os("RZFS_ZVOL_DIR").map(PathBuf::from).unwrap_or_else(|| "/dev/zvol".into())
}

fn errno(e: pool::PoolError) -> i32 {
    e.errno()
}

impl Table {
    fn get(&self, name: &str) -> Result<Entry, i32> {
        lock(&self.vols).get(name).cloned().ok_or(libc::ENOENT)
    }

    fn with<R>(
        &self,
        name: &str,
        check: SpaceCheck,
        reserve: Reserve,
        f: impl FnOnce(&mut dmu::tx::DirtyObjset, &mut zap::write::ZapCache) -> Result<R, zpl::zvol::ZvolError>,
    ) -> Result<R, i32> {
        let e = self.get(name)?;
        let mut out = Err(libc::EIO);
        e.rw.spa
            .with_dataset(e.ds, check, reserve, |tx| {
                out = f(&mut tx.ds.os, &mut tx.ds.zaps).map_err(|err| match err {
                    zpl::zvol::ZvolError::Invalid(_) => libc::EINVAL,
                    _ => libc::EIO,
                });
                Ok(())
            })
            .map_err(errno)?;
        out
    }
}

impl rzfs_fuse::zvol::VolBackend for Table {
    fn volumes(&self) -> Vec<String> {
        lock(&self.vols).keys().cloned().collect()
    }

    fn size(&self, name: &str) -> Result<u64, i32> {
        self.with(name, SpaceCheck::Normal, Reserve::None, |os, z| zpl::zvol::volsize(os, z))
    }

    fn readonly(&self, name: &str) -> bool {
        self.get(name).map_or(true, |e| e.readonly)
    }

    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), i32> {
        self.with(name, SpaceCheck::Normal, Reserve::None, |os, z| zpl::zvol::read(os, z, offset, buf))
    }

    fn write(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), i32> {
        let block = self.get(name)?.block;
        let reserve = Reserve::Write { len: data.len() as u64, block };
        self.with(name, SpaceCheck::Normal, reserve, |os, z| zpl::zvol::write(os, z, offset, data))
    }

    fn discard(&self, name: &str, offset: u64, len: u64) -> Result<(), i32> {
        self.with(name, SpaceCheck::Reserved, Reserve::Meta, |os, z| zpl::zvol::discard(os, z, offset, len))
    }

    fn sync(&self, name: &str) -> Result<(), i32> {
        let e = self.get(name)?;
        e.rw.spa.sync_now().map_err(errno)
    }

    fn poison(&self, name: &str, what: &str) {
        if let Ok(e) = self.get(name) {
            e.rw.spa.poison_from(what);
        }
    }
}

/// The same volumes as NBD exports (`rzfs_nbd`), by dataset name.
impl rzfs_nbd::Exports for Table {
    fn list(&self) -> Vec<String> {
        rzfs_fuse::zvol::VolBackend::volumes(self)
    }
    fn size(&self, name: &str) -> Result<u64, i32> {
        rzfs_fuse::zvol::VolBackend::size(self, name)
    }
    fn readonly(&self, name: &str) -> bool {
        rzfs_fuse::zvol::VolBackend::readonly(self, name)
    }
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), i32> {
        rzfs_fuse::zvol::VolBackend::read(self, name, offset, buf)
    }
    fn write(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), i32> {
        rzfs_fuse::zvol::VolBackend::write(self, name, offset, data)
    }
    fn discard(&self, name: &str, offset: u64, len: u64) -> Result<(), i32> {
        rzfs_fuse::zvol::VolBackend::discard(self, name, offset, len)
    }
    fn sync(&self, name: &str) -> Result<(), i32> {
        rzfs_fuse::zvol::VolBackend::sync(self, name)
    }
}

impl Volumes {
    /// The table of served volumes (the NBD server's exports).
    pub fn table(&self) -> Arc<Table> {
        self.table.clone()
    }
}

/// Starts serving volume `name` of a read-write pool; returns warnings (no loop device,
/// the tree could not be mounted), never an error: the volume exists either way.
pub fn serve(state: &Arc<State>, name: &str) -> String {
    match serve_inner(state, name) {
        Ok(w) => w,
        Err(e) => format!("warning: volume '{name}' is not served as a device: {e}\n"),
    }
}

fn serve_inner(state: &Arc<State>, name: &str) -> Result<String, String> {
    let Some(rw) = crate::rwpool::writer_of(state, name) else { return Ok(String::new()) };
    let pool = state.pool(&rw.name)?;
    let dsl = pool.dsl();
    let ds = dsl.find(name).map_err(|e| e.to_string())?;
    if ds.kind != dsl::DatasetKind::Volume {
        return Ok(String::new());
    }
    let settings = rw.spa.open_dataset(ds.ds_obj).map_err(|e| e.to_string())?;
    let block = rw
        .spa
        .with_dataset(ds.ds_obj, SpaceCheck::Normal, Reserve::None, |tx| {
            zpl::zvol::volblocksize(&tx.ds.os).map_err(|e| pool::PoolError::Invalid(e.to_string()))
        })
        .map_err(|e| e.to_string())?;
    let volmode =
        crate::cmd::zfs::prop_value(&pool, &dsl, &ds, "volmode").map(|v| v.exact).unwrap_or_default();
    let v = &state.vols;
    lock(&v.table.vols)
        .insert(name.to_string(), Entry { rw, ds: ds.ds_obj, block, readonly: settings.readonly });
    let dir = vol_dir();
    {
        let mut m = lock(&v.mount);
        if m.as_ref().is_none_or(|h| h.is_finished()) {
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let h = rzfs_fuse::zvol::mount_volumes(v.table.clone(), &dir)
                .map_err(|e| format!("cannot mount the volume tree on {}: {e}", dir.display()))?;
            *m = Some(h);
        }
    }
    if volmode == "none" {
        return Ok(String::new());
    }
    let file = dir.join(name);
    let mut warn = String::new();
    let loopdev = if std::env::var("RZFS_VOL_LOOP").as_deref() == Ok("0") {
        None
    } else {
        match attach_loop(&file, settings.readonly) {
            Ok(d) => Some(d),
            Err(e) => {
                warn = format!(
                    "note: volume '{name}' has no loop device ({e}); {} links to its file\n",
                    link_dir().join(name).display()
                );
                None
            }
        }
    };
    let link = link_dir().join(name);
    let target = loopdev.clone().map(PathBuf::from).unwrap_or(file);
    let linked = make_link(&link, &target).map_err(|e| format!("cannot link {}: {e}", link.display()));
    let link = match linked {
        Ok(()) => Some(link),
        Err(e) => {
            warn.push_str(&format!("warning: {e}\n"));
            None
        }
    };
    lock(&v.devices).insert(name.to_string(), Device { loopdev, link });
    Ok(warn)
}

fn attach_loop(file: &Path, readonly: bool) -> Result<String, String> {
    let mut c = Command::new("losetup");
    c.args(["--find", "--show"]);
    if readonly {
        c.arg("--read-only");
    }
    let out = c.arg(file).output().map_err(|e| format!("losetup: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !dev.starts_with("/dev/") {
        return Err(format!("losetup printed '{dev}'"));
    }
    Ok(dev)
}

fn make_link(link: &Path, target: &Path) -> std::io::Result<()> {
    if let Some(p) = link.parent() {
        std::fs::create_dir_all(p)?;
    }
    match std::fs::remove_file(link) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::os::unix::fs::symlink(target, link)
}

/// Whether somebody holds the loop device (a mount, an open with O_EXCL): the kernel
/// refuses an exclusive open of a block device in use.
fn loop_busy(dev: &str) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    matches!(
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_EXCL).open(dev),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY)
    )
}

/// Stops serving the volumes `names` (unknown names are skipped): refused, with nothing
/// changed, when one is busy and not `force`; the error is the busy volume's name.
pub fn unserve(state: &State, names: &[String], force: bool) -> Result<(), String> {
    let v = &state.vols;
    let devs: Vec<(String, Device)> = {
        let d = lock(&v.devices);
        names.iter().filter_map(|n| d.get(n).map(|x| (n.clone(), x.clone()))).collect()
    };
    if !force {
        for (n, d) in &devs {
            if d.loopdev.as_deref().is_some_and(loop_busy) {
                return Err(n.clone());
            }
        }
    }
    for (n, d) in &devs {
        if let Some(l) = &d.link {
            let _ = std::fs::remove_file(l);
            remove_empty_parents(l);
        }
        if let Some(dev) = &d.loopdev {
            if let Ok(o) = Command::new("losetup").args(["-d", dev]).output() {
                if !o.status.success() {
                    eprintln!("rzfsd: losetup -d {dev}: {}", String::from_utf8_lossy(&o.stderr).trim());
                }
            }
        }
        lock(&v.devices).remove(n);
    }
    let mut t = lock(&v.table.vols);
    for n in names {
        t.remove(n);
    }
    Ok(())
}

/// Removes the empty directories a link left under the link directory.
fn remove_empty_parents(link: &Path) {
    let top = link_dir();
    let mut cur = link.parent();
    while let Some(p) = cur {
        if p == top || !p.starts_with(&top) || std::fs::remove_dir(p).is_err() {
            break;
        }
        cur = p.parent();
    }
}

/// The served volumes of `pool`.
pub fn of_pool(state: &State, pool: &str) -> Vec<String> {
    let prefix = format!("{pool}/");
    lock(&state.vols.table.vols).keys().filter(|n| n.starts_with(&prefix)).cloned().collect()
}

/// Serves every volume of pool `pool` (after an import or create); returns warnings.
pub fn serve_pool(state: &Arc<State>, pool: &str) -> String {
    let Ok(p) = state.pool(pool) else { return String::new() };
    let Ok(all) = p.dsl().list() else { return String::new() };
    let mut out = String::new();
    for d in all.iter().filter(|d| d.kind == dsl::DatasetKind::Volume) {
        out.push_str(&serve(state, &d.name));
    }
    out
}

/// Tells the loop device of `name` its volume's new size (`losetup -c`).
pub fn resized(state: &State, name: &str) {
    let dev = lock(&state.vols.devices).get(name).and_then(|d| d.loopdev.clone());
    if let Some(dev) = dev {
        let _ = Command::new("losetup").args(["-c", &dev]).output();
    }
}

/// The device path of a served volume, for messages and tests.
pub fn device_of(state: &State, name: &str) -> Option<String> {
    lock(&state.vols.devices).get(name).and_then(|d| d.loopdev.clone())
}

/// Whether `name` is a served volume.
pub fn device_known(state: &State, name: &str) -> bool {
    lock(&state.vols.table.vols).contains_key(name)
}
