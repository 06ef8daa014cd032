//! Finding pools on devices: read the four labels of every candidate device, keep the
//! checksum-valid ones, and group devices by pool guid (what `zpool import` lists).
//!
//! Label rules (OpenZFS `module/zfs/vdev_label.c`):
//! - a label's config (vdev_phys) carries an embedded SHA-256 whose verifier is the device
//!   offset of that vdev_phys area; a label that fails it is ignored;
//! - of a device's valid labels, the one with the highest `txg` describes it;
//! - uberblocks are picked later, across all labels of all devices of the pool.

use crate::{PoolError, Result};
use codec::checksum::{self, ChecksumCtx, ChecksumKind};
use ondisk::label::{self, LabelConfig, PoolState, VDEV_LABELS, VDEV_PHYS_SIZE};
use ondisk::nvlist::NvList;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vdev::BlockDevice;

/// One device that carries at least one valid label.
#[derive(Clone)]
pub struct DeviceLabel {
    pub path: PathBuf,
    pub device: Arc<dyn BlockDevice>,
    /// The best (highest txg) valid label.
    pub config: LabelConfig,
    pub raw: NvList,
    /// Which of the four labels verified.
    pub valid_labels: [bool; 4],
}

/// A pool seen on the scanned devices.
#[derive(Clone)]
pub struct PoolCandidate {
    pub name: String,
    pub guid: u64,
    pub devices: Vec<DeviceLabel>,
}

impl PoolCandidate {
    /// The label with the highest txg among the pool's devices.
    pub fn best(&self) -> &DeviceLabel {
        let mut best = &self.devices[0];
        for d in &self.devices {
            if d.config.txg.unwrap_or(0) > best.config.txg.unwrap_or(0) {
                best = d;
            }
        }
        best
    }

    /// When the newest uberblock was written (seconds since the epoch).
    pub fn best_uberblock_time(&self) -> Option<u64> {
        crate::import::select_uberblock(self).ok().map(|u| u.timestamp)
    }

    /// Pool state as recorded in the best label.
    pub fn state(&self) -> PoolState {
        self.best().config.state
    }
}

/// Reads and verifies one label's config area. `None` when the label is blank or damaged.
pub fn read_label(dev: &dyn BlockDevice, l: u32) -> Option<(LabelConfig, NvList)> {
    let off = label::vdev_phys_device_offset(dev.size(), l).ok()?;
    let mut buf = vec![0u8; VDEV_PHYS_SIZE];
    dev.read_at(&mut buf, off).ok()?;
    let ctx = ChecksumCtx::default();
    checksum::verify_embedded(ChecksumKind::Sha256, &buf, checksum::label_verifier(off), &ctx).ok()?;
    let nv = label::parse_vdev_phys(&buf).ok()?;
    let cfg = LabelConfig::from_nvlist(&nv).ok()?;
    Some((cfg, nv))
}

/// Reads all four labels of a device and keeps the best valid one.
///
/// A pool member's label written at txg 0 is no member of anything: OpenZFS writes one when
/// a device is detached (and at the start of a create or add that may fail), and neither
/// its import nor its in-use checks count such labels (libzutil `zpool_read_label`); aux
/// labels (spares, cache devices) carry no txg.
pub fn probe_device(path: &Path, dev: Arc<dyn BlockDevice>) -> Option<DeviceLabel> {
    let mut best: Option<(LabelConfig, NvList)> = None;
    let mut valid = [false; 4];
    for l in 0..VDEV_LABELS {
        if let Some((cfg, nv)) = read_label(dev.as_ref(), l) {
            let aux = matches!(cfg.state, PoolState::Spare | PoolState::L2Cache);
            if !aux && cfg.txg.unwrap_or(0) == 0 {
                continue;
            }
            valid[l as usize] = true;
            let better = match &best {
                None => true,
                Some((b, _)) => cfg.txg.unwrap_or(0) > b.txg.unwrap_or(0),
            };
            if better {
                best = Some((cfg, nv));
            }
        }
    }
    let (config, raw) = best?;
    Some(DeviceLabel { path: path.to_path_buf(), device: dev, config, raw, valid_labels: valid })
}

/// Lists the regular files and block devices directly inside each directory (or the paths
/// themselves when they are files), sorted, without following into subdirectories.
pub fn candidate_paths(dirs: &[PathBuf]) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = Vec::new();
    for d in dirs {
        let Ok(md) = std::fs::metadata(d) else {
            continue;
        };
        if !md.is_dir() {
            out.push(d.clone());
            continue;
        }
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(md) = std::fs::metadata(e.path()) else {
                continue;
            };
            let ft = md.file_type();
            // Labels need at least 4 labels + boot area: skip tiny files quickly.
            if (ft.is_file() && md.len() >= 2 * label::VDEV_LABEL_START_SIZE) || ft.is_block_device() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Scans `dirs` and groups labelled devices into pools (active, exported, or destroyed when
/// `include_destroyed`). Spares and cache devices without a pool guid are not listed.
pub fn discover(dirs: &[PathBuf], include_destroyed: bool) -> Result<Vec<PoolCandidate>> {
    let mut pools: BTreeMap<u64, PoolCandidate> = BTreeMap::new();
    for p in candidate_paths(dirs) {
        let dev = match vdev::FileDevice::open(&p, false) {
            Ok(d) => Arc::new(d) as Arc<dyn BlockDevice>,
            Err(_) => continue,
        };
        let Some(dl) = probe_device(&p, dev) else {
            continue;
        };
        let Some(guid) = dl.config.pool_guid else {
            continue;
        };
        match dl.config.state {
            PoolState::Destroyed if !include_destroyed => continue,
            PoolState::Spare | PoolState::L2Cache => continue,
            _ => {}
        }
        let name = dl.config.name.clone().unwrap_or_default();
        pools
            .entry(guid)
            .or_insert_with(|| PoolCandidate { name, guid, devices: Vec::new() })
            .devices
            .push(dl);
    }
    Ok(pools.into_values().collect())
}

/// Picks the pool named `name_or_guid` among candidates, with zpool's error wording.
pub fn select<'a>(cands: &'a [PoolCandidate], name_or_guid: &str) -> Result<&'a PoolCandidate> {
    let hits: Vec<&PoolCandidate> =
        cands.iter().filter(|c| c.name == name_or_guid || c.guid.to_string() == name_or_guid).collect();
    match hits.len() {
        0 => Err(PoolError::NotFound(format!("cannot import '{name_or_guid}': no such pool available"))),
        1 => Ok(hits[0]),
        _ => Err(PoolError::Invalid(format!(
            "cannot import '{name_or_guid}': more than one matching pool; import by numeric ID instead"
        ))),
    }
}

/// The pool a device's labels name (`zpool labelclear` asks before wiping them): None when
/// no label is valid.
pub fn label_owner(path: &Path) -> std::io::Result<Option<LabelConfig>> {
    let dev: Arc<dyn BlockDevice> = Arc::new(vdev::FileDevice::open(path, false)?);
    Ok(probe_device(path, dev).map(|d| d.config))
}

/// Whether the device at `path` holds a label `zpool labelclear` would clear: any valid
/// one with a vdev guid and a known pool state, whatever its txg (`zpool_clear_label`).
pub fn has_clearable_label(path: &Path) -> std::io::Result<bool> {
    let dev = vdev::FileDevice::open(path, false)?;
    Ok((0..VDEV_LABELS).filter_map(|l| read_label(&dev, l)).any(|(c, _)| clearable(&c)))
}

/// A label `zpool_clear_label` clears: it names a vdev guid and a known pool state.
fn clearable(c: &LabelConfig) -> bool {
    c.guid != 0
        && matches!(
            c.state,
            PoolState::Active
                | PoolState::Exported
                | PoolState::Destroyed
                | PoolState::Spare
                | PoolState::L2Cache
        )
}

/// `zpool labelclear`: zeroes every *valid* label of the device at `path` (one that names a
/// guid and a known pool state, as libzfs's `zpool_clear_label` picks them) and, when one
/// of them was a cache device's, the L2ARC device header after the boot area; then flushes.
/// Damaged labels and whatever else the device holds are left alone (ZTS's
/// `zpool_labelclear_valid` overwrites the first two labels and checks they stay as
/// written). No pool finds the device any more. `exclusive`: open it as an importer does,
/// so that a device another process holds in a pool is refused (busy) rather than wiped
/// under it. Finding no valid label is an error.
pub fn clear_device_labels(path: &Path, exclusive: bool) -> crate::Result<()> {
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        crate::PoolError::Invalid(format!("failed to {what} {}: {e}", path.display()))
    };
    let dev =
        if exclusive { vdev::FileDevice::open_exclusive(path) } else { vdev::FileDevice::open(path, true) }
            .map_err(|e| fail("open", &e))?;
    let zeros = vec![0u8; label::VDEV_LABEL_SIZE as usize];
    let (mut cleared, mut cache) = (0, false);
    for l in 0..VDEV_LABELS {
        let Some((c, _)) = read_label(&dev, l).filter(|(c, _)| clearable(c)) else { continue };
        cache |= c.state == PoolState::L2Cache;
        let off = label::label_offset(dev.size(), l).map_err(|e| fail("clear", &e))?;
        dev.write_at(&zeros, off).map_err(|e| fail("clear", &e))?;
        cleared += 1;
    }
    if cleared == 0 {
        return Err(fail("clear label for", &"no valid label"));
    }
    // OpenZFS's persistent L2ARC header (`l2arc_dev_hdr_phys_t`, 512 bytes at
    // VDEV_LABEL_START_SIZE), so that no stale cache contents are rebuilt from it.
    if cache && dev.size() >= label::VDEV_LABEL_START_SIZE + 512 {
        dev.write_at(&zeros[..512], label::VDEV_LABEL_START_SIZE).map_err(|e| fail("clear", &e))?;
    }
    dev.flush().map_err(|e| fail("flush", &e))
}
