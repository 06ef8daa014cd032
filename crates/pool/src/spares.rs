//! # Hot spares (`spa_load_spares`, `spa_sync_aux_dev`, zed's retire agent)
//!
//! Theory. A hot spare is a device the pool keeps in reserve: it belongs to no top-level
//! vdev until one of their leaves fails, then it stands in for it.
//!
//! * **On disk, as OpenZFS keeps them.** The list is a packed nvlist object of the MOS
//!   (`DMU_OT_PACKED_NVLIST`, named `spares` in the object directory) holding one array,
//!   `spares`, of leaf configs (`type`, `guid`, `path`, `is_spare` = 1). An available spare's
//!   own labels are *aux* labels (`version`, `state` = `POOL_STATE_SPARE`, `guid`, `path`,
//!   no pool name), so no import mistakes it for a pool member; a spare in use carries the
//!   pool's labels like any leaf, with `is_spare` = 1 in its config.
//! * **In use** means the spare's guid is in the tree, under a `spare` vdev next to the leaf
//!   it stands in for (`zpool replace POOL DEV SPARE`, or automatically, see below); it
//!   resilvers like any new device. It goes back to the list (its aux label rewritten)
//!   when it is detached, when the leaf it stood in for was itself replaced (the replace
//!   detaches both), or when that leaf came back (`zpool clear`/`online` mark it
//!   `unspare`) and has resilvered. Detaching the original instead keeps the spare in the
//!   pool for good: it leaves the list.
//! * **Automatic activation** (zed's retire agent has no daemon here, so the pool's owner
//!   does it): after a sync, a leaf that is FAULTED or cannot be opened, in a top-level vdev
//!   that can spare it and not already spared or being replaced, gets the first available
//!   spare large enough. With `autoreplace=on`, a leaf that cannot be opened is first
//!   replaced by a blank device found at its own path (a new disk in the old slot).

use crate::create::{leaf_asize, NewLeaf};
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use codec::checksum::{self, ChecksumCtx, ChecksumKind};
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::label::{self, PoolState};
use ondisk::nvlist::NvList;
use std::sync::Arc;
use vdev::{BlockDevice, Vdev, VdevKind};

/// MOS directory entry naming the spares object (`DMU_POOL_SPARES`).
pub const DMU_POOL_SPARES: &str = "spares";
/// The array inside it (`ZPOOL_CONFIG_SPARES`).
pub const ZPOOL_CONFIG_SPARES: &str = "spares";

/// A hot spare of the pool.
#[derive(Clone)]
pub struct Spare {
    pub guid: u64,
    pub path: String,
    /// Opened device (`None`: not found at its path).
    pub device: Option<Arc<dyn BlockDevice>>,
    pub is_disk: bool,
}

impl std::fmt::Debug for Spare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spare").field("guid", &self.guid).field("path", &self.path).finish()
    }
}

/// A spare as `zpool status` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpareRow {
    pub name: String,
    /// `AVAIL`, `INUSE` or `UNAVAIL`.
    pub state: &'static str,
    pub note: &'static str,
}

fn bad(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(format!("hot spares: {e}"))
}

/// The aux label of an available spare (`vdev_aux_label_generate`).
fn aux_label(guid: u64, path: &str) -> NvList {
    let mut nv = NvList::new();
    nv.add_u64("version", crate::writer::SPA_VERSION);
    nv.add_u64("state", PoolState::Spare as u64);
    nv.add_u64("guid", guid);
    nv.add_str("path", path);
    nv
}

/// Writes the aux label into the four label areas of `dev` (uberblock rings zeroed).
pub(crate) fn write_aux_label(dev: &dyn BlockDevice, guid: u64, path: &str) -> Result<()> {
    write_bare_label(dev, &aux_label(guid, path))
}

/// Writes `nv` as the config of all four labels of `dev`, uberblock rings zeroed (an aux
/// label, or the txg-0 label a detached device keeps).
pub(crate) fn write_bare_label(dev: &dyn BlockDevice, nv: &NvList) -> Result<()> {
    crate::create::clear_leaf_labels(dev)?;
    let area = label::encode_vdev_phys(nv)?;
    let ctx = ChecksumCtx::default();
    for l in 0..label::VDEV_LABELS {
        let off = label::vdev_phys_device_offset(dev.size(), l)?;
        let mut buf = area.clone();
        checksum::seal_embedded(ChecksumKind::Sha256, &mut buf, checksum::label_verifier(off), &ctx)
            .map_err(|e| bad(format!("sealing a label: {e:?}")))?;
        dev.write_at(&buf, off).map_err(|e| bad(format!("{}: {e}", dev.name())))?;
    }
    dev.flush().map_err(|e| bad(format!("{}: {e}", dev.name())))?;
    Ok(())
}

/// The guid an aux spare label on `dev` names, if it carries one.
pub fn spare_label_guid(dev: &dyn BlockDevice) -> Option<u64> {
    (0..label::VDEV_LABELS)
        .filter_map(|l| crate::discover::read_label(dev, l))
        .find(|(c, _)| c.state == PoolState::Spare)
        .map(|(c, _)| c.guid)
}

/// The leaf configs of an aux device list of the MOS (`spares` or `l2cache`): a packed
/// nvlist object named `key` in the object directory, holding one array named `key`
/// (`spa_load_spares`/`spa_load_l2cache` read both the same way).
pub(crate) fn read_aux_list(mos: &dmu::Objset, key: &str) -> Result<Vec<NvList>> {
    let bad = |e: &dyn std::fmt::Display| PoolError::Invalid(format!("{key} list: {e}"));
    let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
    let Some(obj) = zap::lookup_u64(mos, dir, key).map_err(|e| bad(&e))? else {
        return Ok(Vec::new());
    };
    let dn = mos.dnode(obj)?;
    let len = mos.dnode_byte_order().u64_at(&dn.bonus, 0, "packed nvlist size").map_err(|e| bad(&e))?;
    let buf = mos.read_all(&dn, Some(len), crate::PACKED_NVLIST_MAX)?;
    let nv = NvList::decode(&buf).map_err(|e| bad(&e))?;
    Ok(nv.get_nvlist_array(key).unwrap_or(&[]).to_vec())
}

/// The spares recorded in a pool's MOS: (guid, path, type).
pub fn recorded(mos: &dmu::Objset) -> Result<Vec<(u64, String, String)>> {
    let mut out = Vec::new();
    for c in read_aux_list(mos, ZPOOL_CONFIG_SPARES)? {
        let Some(guid) = c.get_u64("guid") else { continue };
        let path = c.get_str("path").unwrap_or("").to_string();
        out.push((guid, path, c.get_str("type").unwrap_or("file").to_string()));
    }
    Ok(out)
}

/// `zpool status`'s spares section for a pool (read-only or not): in use when the guid
/// is in the tree, available when the device at the recorded path carries the spare's
/// aux label, else unavailable.
pub fn rows(pool: &crate::Pool) -> Vec<SpareRow> {
    let Ok(list) = recorded(&pool.mos) else { return Vec::new() };
    list.into_iter()
        .map(|(guid, path, _)| {
            let in_use = pool.tops.iter().any(|t| t.find(guid).is_some());
            let present = || {
                vdev::FileDevice::open(std::path::Path::new(&path), false)
                    .ok()
                    .and_then(|d| spare_label_guid(&d))
                    .is_some_and(|g| g == guid)
            };
            let (state, note) = if in_use {
                ("INUSE", "currently in use")
            } else if present() {
                ("AVAIL", "")
            } else {
                ("UNAVAIL", "cannot open")
            };
            SpareRow { name: if path.is_empty() { guid.to_string() } else { path }, state, note }
        })
        .collect()
}

impl PoolWriter {
    /// Is spare `guid` standing in for a leaf (in the tree)?
    pub fn spare_in_use(&self, guid: u64) -> bool {
        self.tops.iter().any(|t| t.find(guid).is_some())
    }

    /// The spare recorded at `path` (or with that guid / file name).
    pub fn spare_named(&self, name: &str) -> Option<&Spare> {
        let by_name = |s: &&Spare| {
            s.path == name
                || s.guid.to_string() == name
                || std::path::Path::new(&s.path).file_name().is_some_and(|f| f == name)
        };
        self.spares.iter().find(by_name)
    }

    /// Loads the spares list (read-write import): available spares are opened at their
    /// recorded path (exclusively) when the device there carries their aux label; a spare
    /// in use shares the device of its leaf in the tree.
    pub(crate) fn load_spares(&mut self, mos: &dmu::Objset) -> Result<()> {
        for (guid, path, kind) in recorded(mos)? {
            let in_tree = self.tops.iter().find_map(|t| t.find(guid)).and_then(|v| v.device().cloned());
            let device = in_tree.or_else(|| {
                let p = std::path::Path::new(&path);
                let dev = vdev::FileDevice::open_exclusive(p).ok()?;
                (spare_label_guid(&dev) == Some(guid))
                    .then(|| vdev::inject::InjectDevice::wrap(Arc::new(dev), &path))
            });
            self.spares.push(Spare { guid, path, device, is_disk: kind == "disk" });
        }
        Ok(())
    }

    /// `zpool add POOL spare DEV...`: the devices become hot spares (aux labels written now;
    /// the list is written by the next sync).
    pub fn add_spares(&mut self, leaves: &[NewLeaf]) -> Result<()> {
        for l in leaves {
            if self.paths.values().any(|p| *p == l.path) || self.spares.iter().any(|s| s.path == l.path) {
                return Err(PoolError::Invalid(format!(
                    "{} is already part of pool '{}'",
                    l.path, self.name
                )));
            }
            let min = self
                .tops
                .iter()
                .filter(|t| *t.kind() != vdev::VdevKind::Hole)
                .map(|t| self.leaf_need(t))
                .min()
                .unwrap_or(0);
            if leaf_asize(l.device.as_ref()) < min {
                return Err(PoolError::Invalid(format!(
                    "{} is too small to stand in for the pool's devices",
                    l.path
                )));
            }
        }
        for l in leaves {
            let mut taken = self.all_guids();
            let guid = crate::create::random_guid(&mut taken);
            write_aux_label(l.device.as_ref(), guid, &l.path)?;
            self.spares.push(Spare {
                guid,
                path: l.path.clone(),
                device: Some(l.device.clone()),
                is_disk: l.is_disk,
            });
            crate::events::sysevent("vdev_add", (&self.name, self.guid), Some((guid, &l.path)));
        }
        self.spares_dirty = true;
        Ok(())
    }

    /// `zpool remove POOL SPARE`: an inactive spare leaves the list. Its aux label stays, as
    /// OpenZFS leaves it (`spa_vdev_remove_aux` only rewrites the list): no pool claims it,
    /// so `labelclear` takes it without `-f` and any pool may add it again. Returns the
    /// device, for the caller to release once the list without it is on disk.
    pub fn remove_spare(&mut self, name: &str) -> Result<Option<Arc<dyn BlockDevice>>> {
        let s = self.spare_named(name).cloned().ok_or_else(|| {
            PoolError::Unsupported(format!(
                "cannot remove {name}: only inactive hot spares can be removed by rzfs (no such spare in pool '{}')",
                self.name
            ))
        })?;
        if self.spare_in_use(s.guid) {
            return Err(PoolError::Busy(format!(
                "cannot remove {name}: Pool busy; removal may already be in progress"
            )));
        }
        self.spares.retain(|x| x.guid != s.guid);
        self.spares_dirty = true;
        crate::events::sysevent("vdev_remove_aux", (&self.name, self.guid), Some((s.guid, &s.path)));
        Ok(s.device)
    }

    /// Bytes of allocatable space a leaf of top-level vdev `t` must have.
    pub(crate) fn leaf_need(&self, t: &Vdev) -> u64 {
        let asize = self.top_info.get(t.id() as usize).map_or(0, |i| i.asize);
        match t.kind() {
            VdevKind::Raidz { .. } => asize / t.children().len().max(1) as u64,
            _ => asize,
        }
    }

    /// Writes an aux device list into the MOS (see [`read_aux_list`]), in object `obj`
    /// (0: the one the directory names, or a new one); returns the object (syncing context).
    /// An emptied list keeps its object, as OpenZFS's `spa_sync_aux_dev` does.
    pub(crate) fn write_aux_list(&mut self, obj: u64, key: &str, list: Vec<NvList>) -> Result<u64> {
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        let mut obj = obj;
        if obj == 0 {
            if let Some(o) = self.mos_zaps.lookup_u64(&self.mos, dir, key).map_err(bad)? {
                obj = o;
            } else {
                obj = self.mos.alloc_object(
                    T::PackedNvlist.to_u8(),
                    16 << 10,
                    T::PackedNvlistSize.to_u8(),
                    vec![0; 8],
                )?;
                self.mos_zaps.update_u64(&self.mos, dir, key, obj).map_err(bad)?;
            }
        }
        let mut nv = NvList::new();
        nv.add_nvlist_array(key, list);
        let packed = nv.encode();
        self.mos.free_range(obj, 0, u64::MAX)?;
        self.mos.write(obj, 0, &packed)?;
        self.mos.set_bonus(obj, (packed.len() as u64).to_le_bytes().to_vec())?;
        Ok(obj)
    }

    /// Writes the spares list into the MOS when it changed (syncing context).
    pub(crate) fn sync_spares(&mut self) -> Result<()> {
        if !self.spares_dirty {
            return Ok(());
        }
        let list: Vec<NvList> = self
            .spares
            .iter()
            .map(|s| {
                let mut nv = NvList::new();
                nv.add_str("type", if s.is_disk { "disk" } else { "file" });
                nv.add_u64("guid", s.guid);
                nv.add_str("path", &s.path);
                if s.is_disk {
                    nv.add_u64("whole_disk", 0);
                }
                nv.add_u64("is_spare", 1);
                nv
            })
            .collect();
        self.spares_obj = self.write_aux_list(self.spares_obj, DMU_POOL_SPARES, list)?;
        self.spares_dirty = false;
        Ok(())
    }

    /// The leaf a hot spare should stand in for now, and the spare (zed's retire agent):
    /// a FAULTED leaf, or one that cannot be opened, whose top-level vdev still works, not
    /// already under a spare or replacing vdev; the first available spare large enough.
    pub fn spare_candidate(&self) -> Option<(u64, Spare)> {
        for t in &self.tops {
            if t.state().is_lost() {
                continue;
            }
            for leaf in t.leaves() {
                let gone =
                    leaf.is_faulted() || (leaf.device().is_none() && leaf.offline() == vdev::Offline::No);
                if !gone || self.spares.iter().any(|s| s.guid == leaf.guid()) {
                    continue;
                }
                if parent_is_mirror_like_aux(t, leaf.guid()) {
                    continue;
                }
                let need = self.leaf_need(t);
                let spare = self.spares.iter().find(|s| {
                    !self.spare_in_use(s.guid)
                        && s.device.as_ref().is_some_and(|d| leaf_asize(d.as_ref()) >= need)
                });
                if let Some(s) = spare {
                    return Some((leaf.guid(), s.clone()));
                }
            }
        }
        None
    }
}

/// Is leaf `guid` already under a `spare` or `replacing` vdev?
fn parent_is_mirror_like_aux(v: &Vdev, guid: u64) -> bool {
    v.children().iter().any(|c| {
        (matches!(c.kind(), VdevKind::Spare | VdevKind::Replacing)
            && c.children().iter().any(|g| g.guid() == guid))
            || parent_is_mirror_like_aux(c, guid)
    })
}
