//! Pool import (read-only), in named phases like OpenZFS's `spa_ld_*` steps. Each phase's
//! error names the phase so that a user learns *where* a damaged pool stopped loading.
//!
//! 1. `check_version`: the label's SPA version must be 1..=28 or 5000.
//! 2. `assemble`: top-level vdev configs from every device's best label (highest txg wins per
//!    top-level), leaves matched to devices by guid; absent leaves become missing children,
//!    so mirrors and RAID-Z run degraded.
//! 3. `select_uberblock`: every slot of every valid label of every device; a slot counts only
//!    if its embedded SHA-256 verifies (verifier = its device offset); the best by
//!    (txg, timestamp, MMP sequence).
//! 4. `open_mos`: the MOS objset from the uberblock's root block pointer.
//! 5. `check_features`: every active feature in `features_for_read` must be known to rzfs;
//!    unknown ones refuse the import, naming them.
//! 6. `load_salt`: the checksum salt for salted checksums (skein, edonr, blake3).

use crate::features;
use crate::{Pool, PoolError, Result};
use codec::checksum::{self, ChecksumCtx, ChecksumKind};
use dmu::{Objset, Reader};
use ondisk::blkptr::BlkPtr;
use ondisk::label::{self, VdevTreeConfig, VDEV_LABELS};
use ondisk::uberblock::{spa_version_is_supported, UberblockPhys};
use std::collections::BTreeMap;
use std::sync::Arc;
use vdev::{BlockDevice, Vdev, VdevKind, VdevSpec};

use crate::discover::{DeviceLabel, PoolCandidate};

/// The MOS object directory is always object 1 (`DMU_POOL_DIRECTORY_OBJECT`).
pub const DMU_POOL_DIRECTORY_OBJECT: u64 = 1;

/// Import options.
#[derive(Clone, Debug)]
pub struct ImportOpts {
    pub readonly: bool,
    /// Byte bound of the block cache.
    pub cache_bytes: usize,
    /// `altroot`: prefixed to every mountpoint of the pool's datasets while imported.
    pub altroot: Option<std::path::PathBuf>,
    /// The name the pool goes by while imported, when it is not the name its labels carry
    /// (`zpool import POOL NEWNAME`).
    pub rename: Option<String>,
    /// With `rename`: the new name is temporary (`zpool import -t`): labels and the MOS
    /// config keep the old name, as OpenZFS's `ZFS_IMPORT_TEMP_NAME`.
    pub temp_name: bool,
    /// Read-write import even when a log vdev is missing (`zpool import -m`,
    /// `ZFS_IMPORT_MISSING_LOG`): the pool goes on without it.
    pub missing_log: bool,
}

impl Default for ImportOpts {
    fn default() -> Self {
        ImportOpts {
            readonly: true,
            cache_bytes: arc::DEFAULT_LIMIT_BYTES,
            altroot: None,
            rename: None,
            temp_name: false,
            missing_log: false,
        }
    }
}

fn phase<T>(name: &'static str, r: std::result::Result<T, impl std::fmt::Display>) -> Result<T> {
    r.map_err(|e| PoolError::Load { phase: name, detail: e.to_string() })
}

/// Imports `cand`: read-only, or with every device reopened for writing (the caller then
/// opens the writer with `open_rw::open_rw`).
pub fn import(cand: &PoolCandidate, opts: &ImportOpts) -> Result<Pool> {
    let writable;
    let cand = if opts.readonly {
        cand
    } else {
        writable = reopen_writable(cand)?;
        &writable
    };
    // A pool imported under another name is that name in core: its datasets are named
    // after it and (unless temporary) the next config sync writes it into every label.
    let renamed;
    let cand = match &opts.rename {
        Some(n) => {
            renamed = PoolCandidate { name: n.clone(), ..cand.clone() };
            &renamed
        }
        None => cand,
    };
    check_version(cand)?;
    let tops = assemble(cand)?;
    let ub = select_uberblock(cand)?;
    stale_leaves_dtl(cand, &tops, ub.txg);
    let rootbp = phase("select_uberblock", BlkPtr::parse(&ub.rootbp_raw, ub.byte_order))?;
    let ios: Vec<Option<Arc<dyn zio::VdevIo>>> = tops
        .iter()
        .map(|t| match t.kind() {
            VdevKind::Missing | VdevKind::Hole => None,
            _ => Some(t.clone() as Arc<dyn zio::VdevIo>),
        })
        .collect();
    let zio = Arc::new(zio::Zio::new(ios, ChecksumCtx::default()));
    let cache = Arc::new(arc::BlockCache::new(opts.cache_bytes));
    let reader = Reader::new(zio.clone(), cache);
    let mos = phase("open_mos", Objset::open(&reader, &rootbp))?;
    let missing = check_features(cand, &mos)?;
    if !missing.is_empty() {
        return Err(unsupported_features(&cand.name, &mos, missing, false));
    }
    if let Some(s) = load_salt(&mos)? {
        zio.set_checksum_ctx(ChecksumCtx::new(s));
    }
    let mut pool = Pool::new(cand.clone(), tops, ub, reader, mos, opts.clone());
    // A log vdev none of whose devices is here is known only from the MOS config (read only
    // then: a block read this early may meet a stale device before its DTL is known). It
    // is rebuilt from there with its leaves unopened, so that status shows what is missing
    // (and `import -m` can go on without it); a data vdev stays a `missing` one.
    let missing = pool.tops.iter().any(|t| *t.kind() == VdevKind::Missing);
    if let Some(cfg) = missing.then(|| crate::mos_config(&pool).ok()).flatten() {
        for (i, c) in cfg.iter().enumerate().filter(|(_, c)| c.is_log) {
            let id = c.id.and_then(|id| usize::try_from(id).ok()).unwrap_or(i);
            let Some(t) = pool.tops.get(id) else { continue };
            t.set_log(true);
            if *t.kind() != VdevKind::Missing || c.id != Some(id as u64) {
                continue;
            }
            let no_devices: Vec<DeviceLabel> = Vec::new();
            let Ok(v) = spec_for(c, &no_devices, None, 0).and_then(|s| phase("assemble", Vdev::new(s)))
            else {
                continue;
            };
            v.set_log(true);
            let v = Arc::new(v);
            pool.reader.zio.set_vdev(id, Some(v.clone() as Arc<dyn zio::VdevIo>));
            pool.tops[id] = v;
        }
    }
    Ok(pool)
}

/// The candidate with every device opened read-write.
fn reopen_writable(cand: &PoolCandidate) -> Result<PoolCandidate> {
    let mut c = cand.clone();
    for d in &mut c.devices {
        let dev = vdev::FileDevice::open_exclusive(&d.path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::ResourceBusy {
                PoolError::Busy(format!(
                    "cannot import '{}': device '{}' is in use by another process (is the pool imported by another rzfsd?)",
                    cand.name,
                    d.path.display()
                ))
            } else {
                PoolError::Invalid(format!("cannot open '{}' for writing: {e}", d.path.display()))
            }
        })?;
        let path = d.path.to_string_lossy().into_owned();
        d.device = vdev::inject::InjectDevice::wrap(Arc::new(dev), &path);
    }
    Ok(c)
}

fn check_version(cand: &PoolCandidate) -> Result<()> {
    let v = cand.best().config.version;
    if !spa_version_is_supported(v) {
        return Err(PoolError::Unsupported(format!(
            "pool '{}' has version {v}, which rzfs does not support (it reads versions 1-28 and 5000)",
            cand.name
        )));
    }
    Ok(())
}

/// Builds the root vdev: top-level configs by id, from the newest label that describes each.
fn assemble(cand: &PoolCandidate) -> Result<Vec<Arc<Vdev>>> {
    let mut tops: BTreeMap<u64, (u64, VdevTreeConfig)> = BTreeMap::new();
    for d in &cand.devices {
        let Some(tree) = &d.config.tree else { continue };
        let id = tree.id.unwrap_or(0);
        let txg = d.config.txg.unwrap_or(0);
        if tops.get(&id).is_none_or(|(t, _)| txg > *t) {
            tops.insert(id, (txg, tree.clone()));
        }
    }
    let nchildren = cand.best().config.vdev_children.unwrap_or(tops.len() as u64);
    if tops.is_empty() {
        return Err(PoolError::Load { phase: "assemble", detail: "no device carries a vdev tree".into() });
    }
    // Ids of removed top-level vdevs (OpenZFS's `hole_array`): no device describes them.
    let holes = cand.best().raw.get_u64_array("hole_array").unwrap_or_default().to_vec();
    let mut out = Vec::new();
    let n = nchildren.max(tops.keys().max().map(|m| m + 1).unwrap_or(0));
    for id in 0..n {
        let spec = match tops.get(&id) {
            Some((_, cfg)) => spec_for(cfg, &cand.devices, None, 0)?,
            None => VdevSpec {
                kind: if holes.contains(&id) { VdevKind::Hole } else { VdevKind::Missing },
                id,
                guid: 0,
                ashift: 9,
                children: Vec::new(),
                device: None,
            },
        };
        let v = phase("assemble", Vdev::new(spec))?;
        v.set_log(tops.get(&id).is_some_and(|(_, cfg)| cfg.is_log));
        out.push(Arc::new(v));
    }
    Ok(out)
}

const MAX_DEPTH: usize = 8;

/// Translates one config node (and children) into a vdev spec, attaching opened devices.
fn spec_for(
    cfg: &VdevTreeConfig,
    devs: &[DeviceLabel],
    ashift: Option<u64>,
    depth: usize,
) -> Result<VdevSpec> {
    if depth > MAX_DEPTH {
        return Err(PoolError::Load { phase: "assemble", detail: "vdev tree too deep".into() });
    }
    let ashift = cfg.ashift.or(ashift).unwrap_or(9);
    let kind = match cfg.kind.as_str() {
        "disk" => VdevKind::Disk,
        "file" => VdevKind::File,
        "mirror" => VdevKind::Mirror,
        "replacing" => VdevKind::Replacing,
        "spare" => VdevKind::Spare,
        "raidz" => VdevKind::Raidz { nparity: cfg.nparity.unwrap_or(1) as u8 },
        "hole" => VdevKind::Hole,
        "missing" => VdevKind::Missing,
        other => {
            return Err(PoolError::Unsupported(format!("vdev type '{other}' is not supported yet")));
        }
    };
    let mut children = Vec::new();
    for c in &cfg.children {
        children.push(spec_for(c, devs, Some(ashift), depth + 1)?);
    }
    let device: Option<Arc<dyn BlockDevice>> = if cfg.is_leaf() {
        devs.iter().find(|d| d.config.guid == cfg.guid).map(|d| d.device.clone())
    } else {
        None
    };
    Ok(VdevSpec { kind, id: cfg.id.unwrap_or(0), guid: cfg.guid, ashift: ashift as u8, children, device })
}

/// Scans every uberblock slot of every valid label and returns the best verified one.
pub fn select_uberblock(cand: &PoolCandidate) -> Result<UberblockPhys> {
    let mut best: Option<UberblockPhys> = None;
    for d in &cand.devices {
        if let Some(ub) = device_uberblock(d) {
            if best.as_ref().is_none_or(|b| ub.better_than(b)) {
                best = Some(ub);
            }
        }
    }
    best.ok_or_else(|| PoolError::Load {
        phase: "select_uberblock",
        detail: "no valid uberblock found".into(),
    })
}

/// The best verified uberblock among the slots of one device's valid labels.
fn device_uberblock(d: &DeviceLabel) -> Option<UberblockPhys> {
    let ctx = ChecksumCtx::default();
    let ashift = d.config.tree.as_ref().and_then(|t| t.ashift).unwrap_or(9) as u32;
    let dev = d.device.as_ref();
    let slot = label::uberblock_slot_size(ashift);
    let mut best: Option<UberblockPhys> = None;
    for l in 0..VDEV_LABELS {
        if !d.valid_labels[l as usize] {
            continue;
        }
        let Ok(first) = label::uberblock_device_offset(dev.size(), l, ashift, 0) else {
            continue;
        };
        let mut ring = vec![0u8; label::VDEV_UBERBLOCK_RING];
        if dev.read_at(&mut ring, first).is_err() {
            continue;
        }
        for (n, s) in ring.chunks_exact(slot).enumerate() {
            let off = first + (n * slot) as u64;
            let Ok(ub) = UberblockPhys::parse(s) else {
                continue;
            };
            if ub.txg == 0 {
                continue;
            }
            if checksum::verify_embedded(ChecksumKind::Sha256, s, checksum::label_verifier(off), &ctx)
                .is_err()
            {
                continue;
            }
            if best.as_ref().is_none_or(|b| ub.better_than(b)) {
                best = Some(ub);
            }
        }
    }
    best
}

/// Leaves whose newest uberblock is older than the pool's missed the txgs in between:
/// every healthy leaf gets each txg's uberblock only after that txg's data is flushed on
/// it, so a leaf stopping at txg L holds nothing newer. Those txgs go into its DTL before
/// anything is read, so the import's own reads avoid its stale copies (the MOS's DTLs are
/// added later, by a read-write open). A leaf without any uberblock says nothing.
fn stale_leaves_dtl(cand: &PoolCandidate, tops: &[Arc<Vdev>], pool_txg: u64) {
    for d in &cand.devices {
        let Some(txg) = device_uberblock(d).map(|u| u.txg) else { continue };
        if txg >= pool_txg {
            continue;
        }
        if let Some(leaf) = tops.iter().find_map(|t| t.find(d.config.guid)) {
            leaf.dtl_add(txg + 1, pool_txg - txg);
        }
    }
}

/// Returns the names of active read-features rzfs does not know.
fn check_features(cand: &PoolCandidate, mos: &Objset) -> Result<Vec<String>> {
    let mut active: Vec<String> = cand.best().config.features_for_read.clone();
    if cand.best().config.version >= ondisk::uberblock::SPA_VERSION_FEATURES {
        let dir = DMU_POOL_DIRECTORY_OBJECT;
        if let Some(obj) = phase("check_features", zap::lookup_u64(mos, dir, "features_for_read"))? {
            for e in phase("check_features", zap::list(mos, obj))? {
                if e.first_u64().unwrap_or(0) > 0 {
                    active.push(e.name_string());
                }
            }
        }
    }
    active.sort();
    active.dedup();
    Ok(active.into_iter().filter(|f| !features::readable(f)).collect())
}

/// The error naming `guids`, each with the description the pool's `feature_descriptions`
/// ZAP gives it (empty when there is none).
pub(crate) fn unsupported_features(
    pool: &str,
    mos: &Objset,
    guids: Vec<String>,
    readonly_ok: bool,
) -> PoolError {
    let descs = zap::lookup_u64(mos, DMU_POOL_DIRECTORY_OBJECT, "feature_descriptions")
        .ok()
        .flatten()
        .and_then(|obj| zap::list(mos, obj).ok())
        .unwrap_or_default();
    let features = guids
        .into_iter()
        .map(|g| {
            let d = descs.iter().find(|e| e.name_string() == g).map(|e| e.string_value()).unwrap_or_default();
            (g, d)
        })
        .collect();
    PoolError::UnsupportedFeatures { pool: pool.to_string(), features, readonly_ok }
}

/// The 32-byte salt of salted checksums, from the MOS directory./// The 32-byte salt of salted checksums, from the MOS directory.
fn load_salt(mos: &Objset) -> Result<Option<[u8; 32]>> {
    let e = phase("load_salt", zap::lookup(mos, DMU_POOL_DIRECTORY_OBJECT, "org.illumos:checksum_salt"))?;
    Ok(e.and_then(|e| {
        let b = e.bytes();
        (b.len() >= 32).then(|| {
            let mut s = [0u8; 32];
            s.copy_from_slice(&b[..32]);
            s
        })
    }))
}
