//! # Cache devices (`zpool add POOL cache DEV`; OpenZFS's `spa_l2cache`, `spa_sync_aux_dev`)
//!
//! Theory. A cache device belongs to a pool without being part of its vdev tree: it holds
//! no block the pool needs, so losing it loses nothing, and it never appears in a
//! top-level vdev's config or in the labels of the pool's members.
//!
//! * **On disk, as OpenZFS keeps them.** The list is a packed nvlist object of the MOS
//!   (`DMU_OT_PACKED_NVLIST`, named `l2cache` in the object directory) holding one array,
//!   `l2cache`, of leaf configs as `vdev_config_generate(.., VDEV_CONFIG_L2CACHE)` writes
//!   them: `type`, `guid`, `path`, `ashift` (no `id`, no `is_log`). A cache device's own
//!   labels are *aux* labels (`vdev_aux_label_generate`): `version`, `state` =
//!   `POOL_STATE_L2CACHE` (4), `guid`, `ashift`, `path`, no pool name or pool guid, so no
//!   import takes it for a pool member and `zpool labelclear` treats it as free once the
//!   pool has let it go.
//! * **OpenZFS's persistent L2ARC header** (`l2arc_dev_hdr_phys_t` at 4 MiB into the device)
//!   is not written: OpenZFS then finds "no header", starts the device empty and rebuilds
//!   nothing, which is what it does for a new device.
//! * **What rzfs does with it.** The list is kept, shown (`status`, `list -v`, `iostat -v`),
//!   carried through export and import and removable at any time, as OpenZFS's. The
//!   devices that are present hold the pool's second-level read cache ([`crate::l2arc`]),
//!   rebuilt empty whenever the list changes or the pool is imported.

use crate::create::NewLeaf;
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use ondisk::label::PoolState;
use ondisk::nvlist::NvList;
use std::sync::Arc;
use vdev::BlockDevice;

/// MOS directory entry naming the cache device list (`DMU_POOL_L2CACHE`).
pub const DMU_POOL_L2CACHE: &str = "l2cache";
/// The array inside it (`ZPOOL_CONFIG_L2CACHE`).
pub const ZPOOL_CONFIG_L2CACHE: &str = "l2cache";

/// A cache device of the pool.
#[derive(Clone)]
pub struct CacheDev {
    pub guid: u64,
    pub path: String,
    /// Opened device (`None`: not found at its path).
    pub device: Option<Arc<dyn BlockDevice>>,
    pub is_disk: bool,
    pub ashift: u64,
}

impl std::fmt::Debug for CacheDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheDev").field("guid", &self.guid).field("path", &self.path).finish()
    }
}

/// The pool's cache devices, their MOS object and whether the list changed since it was
/// written (saved and restored whole with the open txg).
#[derive(Clone, Debug, Default)]
pub struct CacheList {
    pub devs: Vec<CacheDev>,
    pub obj: u64,
    pub dirty: bool,
}

/// A cache device as `zpool status` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheRow {
    pub name: String,
    pub guid: u64,
    /// Usable bytes (between the front labels and boot area and the back labels); 0 when
    /// the device cannot be opened.
    pub size: u64,
    /// `ONLINE` or `UNAVAIL`.
    pub state: &'static str,
    pub note: &'static str,
}

/// The aux label of a cache device (`vdev_aux_label_generate` with `reason_spare` false).
fn aux_label(guid: u64, path: &str, ashift: u64) -> NvList {
    let mut nv = NvList::new();
    nv.add_u64("version", crate::writer::SPA_VERSION);
    nv.add_u64("state", PoolState::L2Cache as u64);
    nv.add_u64("guid", guid);
    nv.add_u64("ashift", ashift);
    nv.add_str("path", path);
    nv
}

/// The guid a cache device's aux label on `dev` names, if it carries one.
pub fn cache_label_guid(dev: &dyn BlockDevice) -> Option<u64> {
    (0..ondisk::label::VDEV_LABELS)
        .filter_map(|l| crate::discover::read_label(dev, l))
        .find(|(c, _)| c.state == PoolState::L2Cache)
        .map(|(c, _)| c.guid)
}

/// The cache devices recorded in a pool's MOS: (guid, path, type, ashift).
pub fn recorded(mos: &dmu::Objset) -> Result<Vec<(u64, String, String, u64)>> {
    let mut out = Vec::new();
    for c in crate::spares::read_aux_list(mos, ZPOOL_CONFIG_L2CACHE)? {
        let Some(guid) = c.get_u64("guid") else { continue };
        let path = c.get_str("path").unwrap_or("").to_string();
        let kind = c.get_str("type").unwrap_or("file").to_string();
        out.push((guid, path, kind, c.get_u64("ashift").unwrap_or(9)));
    }
    Ok(out)
}

/// The usable size of the device at `path` when it carries cache device `guid`'s aux label.
fn present(path: &str, guid: u64) -> Option<u64> {
    let d = vdev::FileDevice::open(std::path::Path::new(path), false).ok()?;
    (cache_label_guid(&d) == Some(guid)).then(|| crate::create::leaf_asize(&d))
}

/// `zpool status`'s cache section for a pool (read-only or not): online when the device at
/// the recorded path carries the cache device's aux label, else unavailable.
pub fn rows(pool: &crate::Pool) -> Vec<CacheRow> {
    let Ok(list) = recorded(&pool.mos) else { return Vec::new() };
    list.into_iter()
        .map(|(guid, path, _, _)| {
            let size = present(&path, guid);
            let (state, note) = if size.is_some() { ("ONLINE", "") } else { ("UNAVAIL", "cannot open") };
            let name = if path.is_empty() { guid.to_string() } else { path };
            CacheRow { name, guid, size: size.unwrap_or(0), state, note }
        })
        .collect()
}

impl PoolWriter {
    /// The cache device recorded at `path` (or with that guid / file name).
    pub fn cache_named(&self, name: &str) -> Option<&CacheDev> {
        self.caches.devs.iter().find(|c| {
            c.path == name
                || c.guid.to_string() == name
                || std::path::Path::new(&c.path).file_name().is_some_and(|f| f == name)
        })
    }

    /// Loads the cache device list (read-write import): each device is opened at its
    /// recorded path (exclusively) when the device there carries its aux label; a missing
    /// one stays listed, unavailable, as OpenZFS keeps it.
    pub(crate) fn load_caches(&mut self, mos: &dmu::Objset) -> Result<()> {
        for (guid, path, kind, ashift) in recorded(mos)? {
            let device = vdev::FileDevice::open_exclusive(std::path::Path::new(&path))
                .ok()
                .filter(|d| cache_label_guid(d) == Some(guid))
                .map(|d| vdev::inject::InjectDevice::wrap(Arc::new(d), &path));
            self.caches.devs.push(CacheDev { guid, path, device, is_disk: kind == "disk", ashift });
        }
        Ok(())
    }

    /// `zpool add POOL cache DEV...`: the devices become cache devices (aux labels written
    /// now; the list is written by the next sync).
    pub fn add_caches(&mut self, leaves: &[NewLeaf], ashift: u64) -> Result<()> {
        for l in leaves {
            let taken = self.paths.values().any(|p| *p == l.path)
                || self.spares.iter().any(|s| s.path == l.path)
                || self.caches.devs.iter().any(|c| c.path == l.path);
            if taken {
                return Err(PoolError::Invalid(format!(
                    "{} is already part of pool '{}'",
                    l.path, self.name
                )));
            }
        }
        for l in leaves {
            let mut taken = self.all_guids();
            let guid = crate::create::random_guid(&mut taken);
            crate::spares::write_bare_label(l.device.as_ref(), &aux_label(guid, &l.path, ashift))?;
            self.caches.devs.push(CacheDev {
                guid,
                path: l.path.clone(),
                device: Some(l.device.clone()),
                is_disk: l.is_disk,
                ashift,
            });
            crate::events::sysevent("vdev_add", (&self.name, self.guid), Some((guid, &l.path)));
        }
        self.caches.dirty = true;
        Ok(())
    }

    /// `zpool remove POOL CACHEDEV`: the device leaves the list (nothing of the pool lives
    /// on it). Its aux label stays, as OpenZFS leaves it (`spa_load_l2cache` frees the vdev
    /// without relabelling): no pool claims it, so `labelclear` takes it without `-f` and
    /// `zpool add` may use it again. Returns the device, for the caller to release once the
    /// list without it is on disk.
    pub fn remove_cache(&mut self, name: &str) -> Result<Option<Arc<dyn BlockDevice>>> {
        let c = self
            .cache_named(name)
            .cloned()
            .ok_or_else(|| PoolError::NotFound(format!("cannot remove {name}: no such device in pool")))?;
        self.caches.devs.retain(|x| x.guid != c.guid);
        self.caches.dirty = true;
        crate::events::sysevent("vdev_remove_aux", (&self.name, self.guid), Some((c.guid, &c.path)));
        Ok(c.device)
    }

    /// Puts a second-level cache over the cache devices present into the read pipeline
    /// (none when there are none), in place of the one there, which is closed first.
    pub fn install_l2arc(&mut self) {
        if let Some(old) = self.l2arc.take() {
            self.reader.zio.set_second_level(None);
            old.close();
        }
        let devs: Vec<_> =
            self.caches.devs.iter().filter_map(|c| Some((c.guid, c.device.clone()?, c.ashift))).collect();
        if devs.is_empty() {
            return;
        }
        let l2 = crate::l2arc::L2Arc::new(devs);
        self.reader.zio.set_second_level(Some(l2.clone() as Arc<dyn zio::SecondLevel>));
        self.l2arc = Some(l2);
    }

    /// Stops the second-level cache (the pool is closing): no write reaches a cache device
    /// after this returns.
    pub(crate) fn close_l2arc(&mut self) {
        if let Some(old) = self.l2arc.take() {
            self.reader.zio.set_second_level(None);
            old.close();
        }
    }

    /// Writes the cache device list into the MOS when it changed (syncing context).
    pub(crate) fn sync_caches(&mut self) -> Result<()> {
        if !self.caches.dirty {
            return Ok(());
        }
        let list: Vec<NvList> = self
            .caches
            .devs
            .iter()
            .map(|c| {
                let mut nv = NvList::new();
                nv.add_str("type", if c.is_disk { "disk" } else { "file" });
                nv.add_u64("guid", c.guid);
                nv.add_str("path", &c.path);
                if c.is_disk {
                    nv.add_u64("whole_disk", 0);
                }
                nv.add_u64("ashift", c.ashift);
                nv
            })
            .collect();
        self.caches.obj = self.write_aux_list(self.caches.obj, DMU_POOL_L2CACHE, list)?;
        self.caches.dirty = false;
        Ok(())
    }
}
