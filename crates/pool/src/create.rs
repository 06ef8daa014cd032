//! # Creating a pool (`spa_create`, `dsl_pool_create`)
//!
//! Order of work: everything is validated and assembled in memory first (vdev tree, sizes,
//! metaslab geometry, the MOS of txg 4 = `TXG_INITIAL`); only then are the label areas of
//! every device cleared and the first txg synced, which writes the labels, the data and
//! finally the uberblocks (see `writer`). A failure before the sync writes nothing.
//!
//! The MOS of a new pool (version 5000) holds: the object directory (object 1) with
//! `root_dataset`, `config`, the three feature ZAPs (and `feature_enabled_txg`),
//! `free_bpobj`, `sync_bplist`, `creation_version`, `deflate` and the checksum salt; the DSL
//! tree of `dsl::write::create_pool_dsl`; one metaslab array per top-level vdev. Space maps
//! appear as metaslabs are first used.

use crate::feature_table::Feature;
use crate::writer::{DatasetWriter, Policy, PoolWriter, TopInfo, SPA_VERSION, TXG_INITIAL};
use crate::{PoolError, Result};
use codec::checksum::ChecksumCtx;
use dmu::tx::DirtyObjset;
use dmu::Reader;
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::dsl::mos_keys as K;
use ondisk::label::VDEV_LABEL_SIZE;
use ondisk::objset::{DMU_OST_META, DMU_OST_ZFS};
use std::sync::Arc;
use vdev::{BlockDevice, Vdev, VdevKind, VdevSpec, VDEV_LABEL_END_SIZE, VDEV_LABEL_START_SIZE};
use zap::write::{ZapCache, ZapVal};

/// A leaf device for a new pool.
#[derive(Clone)]
pub struct NewLeaf {
    pub path: String,
    pub device: Arc<dyn BlockDevice>,
    /// Block device (`disk`) rather than a regular file (`file`).
    pub is_disk: bool,
}

/// A top-level vdev for a new pool.
#[derive(Clone)]
pub enum NewTop {
    Single(NewLeaf),
    Mirror(Vec<NewLeaf>),
    Raidz { parity: u8, leaves: Vec<NewLeaf> },
}

impl NewTop {
    /// The devices of this top-level vdev.
    pub fn leaves(&self) -> &[NewLeaf] {
        match self {
            NewTop::Single(l) => std::slice::from_ref(l),
            NewTop::Mirror(ls) | NewTop::Raidz { leaves: ls, .. } => ls,
        }
    }
}

/// What `rzpool create` asked for.
pub struct CreateSpec<'a> {
    pub name: String,
    pub tops: Vec<NewTop>,
    /// `log[i]`: top-level vdev `i` is a separate intent log (missing entries: not).
    pub log: Vec<bool>,
    pub ashift: u8,
    /// Features to enable (closed under dependencies by the caller).
    pub features: Vec<&'static Feature>,
    /// Properties of the root dataset's directory (`-O`), already validated.
    pub root_props: Vec<(String, ZapVal)>,
    /// Pool properties (`-o`) stored in `pool_props`.
    pub pool_props: Vec<(String, ZapVal)>,
    /// Builds the root dataset's contents (the ZPL) in its new objset.
    pub init_root: &'a dyn Fn(&mut DirtyObjset, &mut ZapCache) -> Result<()>,
    /// Block policy of the root dataset.
    pub root_policy: Policy,
    /// Byte bound of the pool's block cache.
    pub cache_bytes: usize,
    /// The name the labels and the MOS config carry when `name` is only the in-core name
    /// (`zpool create -t`).
    pub label_name: Option<String>,
}

/// A fresh nonzero guid not in `taken` (which records it).
pub(crate) fn random_guid(taken: &mut Vec<u64>) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(taken.len());
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
        );
        let g = h.finish();
        if g != 0 && !taken.contains(&g) {
            taken.push(g);
            return g;
        }
    }
}

/// Allocatable bytes of a leaf (`vdev_open`: the size is aligned down to a whole label,
/// minus the front labels + boot area and the back labels).
pub(crate) fn leaf_asize(dev: &dyn BlockDevice) -> u64 {
    let osize = dev.size() - dev.size() % VDEV_LABEL_SIZE;
    osize.saturating_sub(VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)
}

fn leaf_spec(l: &NewLeaf, id: u64, guids: &mut Vec<u64>) -> VdevSpec {
    VdevSpec {
        kind: if l.is_disk { VdevKind::Disk } else { VdevKind::File },
        id,
        guid: random_guid(guids),
        ashift: 0,
        children: Vec::new(),
        device: Some(l.device.clone()),
    }
}

/// Top-level vdevs, their allocatable sizes, and (guid, path) of every leaf.
type BuiltTops = (Vec<Arc<Vdev>>, Vec<u64>, Vec<(u64, String)>);

/// One top-level vdev built from its spec: the vdev, its allocatable size, and (guid, path)
/// of each of its leaves. New guids are drawn unique against (and recorded in) `guids`.
pub(crate) type BuiltTop = (Arc<Vdev>, u64, Vec<(u64, String)>);

/// Builds top-level vdev `id` of sector shift `ashift` (shared by `create` and `add`).
pub(crate) fn build_top(t: &NewTop, id: u64, ashift: u8, guids: &mut Vec<u64>) -> Result<BuiltTop> {
    let mut paths = Vec::new();
    let (vspec, asize) = match t {
        NewTop::Single(l) => {
            let mut s = leaf_spec(l, id, guids);
            s.ashift = ashift;
            paths.push((s.guid, l.path.clone()));
            (s, leaf_asize(l.device.as_ref()))
        }
        NewTop::Mirror(ls) | NewTop::Raidz { leaves: ls, .. } => {
            let mut children = Vec::new();
            for (j, l) in ls.iter().enumerate() {
                let c = leaf_spec(l, j as u64, guids);
                paths.push((c.guid, l.path.clone()));
                children.push(c);
            }
            let min = ls.iter().map(|l| leaf_asize(l.device.as_ref())).min().unwrap_or(0);
            let (kind, asize) = match t {
                NewTop::Raidz { parity, .. } => (VdevKind::Raidz { nparity: *parity }, min * ls.len() as u64),
                _ => (VdevKind::Mirror, min),
            };
            let s = VdevSpec { kind, id, guid: random_guid(guids), ashift, children, device: None };
            (s, asize)
        }
    };
    let asize = asize - asize % (1u64 << ashift);
    if asize < (16 << 20) {
        return Err(PoolError::Invalid(format!("top-level vdev {id} is too small ({asize} usable bytes)")));
    }
    let vdev = Arc::new(Vdev::new(vspec).map_err(|e| PoolError::Invalid(e.to_string()))?);
    Ok((vdev, asize, paths))
}

/// `vdev_deflate_ratio` of a top-level vdev: 512-byte units of space per 512-byte unit of
/// psize, measured on a 128 KiB block (see OpenZFS vdev.c `vdev_set_deflate_ratio`).
pub(crate) fn deflate_ratio(t: &Vdev) -> u64 {
    (1u64 << 17) / (t.asize(1 << 17) >> 9)
}

/// Builds the top-level vdevs and their allocatable sizes.
fn build_tops(spec: &CreateSpec, guids: &mut Vec<u64>) -> Result<BuiltTops> {
    let mut tops = Vec::new();
    let mut sizes = Vec::new();
    let mut paths = Vec::new();
    for (id, t) in spec.tops.iter().enumerate() {
        let (vdev, asize, p) = build_top(t, id as u64, spec.ashift, guids)?;
        tops.push(vdev);
        sizes.push(asize);
        paths.extend(p);
    }
    Ok((tops, sizes, paths))
}

/// Creates the pool described by `spec` and syncs its first txg. Returns the pool, open
/// for writing.
pub fn create(spec: &CreateSpec) -> Result<PoolWriter> {
    let mut guids = Vec::new();
    let pool_guid = random_guid(&mut guids);
    let (tops, sizes, paths) = build_tops(spec, &mut guids)?;
    let is_log = |i: usize| spec.log.get(i).copied().unwrap_or(false);
    if (0..tops.len()).all(is_log) {
        // spa_create's zfs_allocatable_devs: the pool's blocks need a normal vdev.
        return Err(PoolError::Invalid(
            "invalid vdev specification: at least one top-level vdev must not be a log".into(),
        ));
    }
    let mut ms = metaslab::Allocator::new();
    let mut info = Vec::new();
    for (i, (t, &asize)) in tops.iter().zip(&sizes).enumerate() {
        let shift = metaslab::metaslab_shift(asize);
        ms.add_top(i as u64, asize, t.ashift(), shift).map_err(|e| PoolError::Invalid(e.to_string()))?;
        t.set_log(is_log(i));
        ms.set_log(i as u64, is_log(i)).map_err(|e| PoolError::Invalid(e.to_string()))?;
        let deflate = deflate_ratio(t);
        info.push(TopInfo {
            ms_array: 0,
            ms_shift: shift,
            asize,
            create_txg: TXG_INITIAL,
            deflate_ratio: deflate,
        });
    }
    let io: Vec<Option<Arc<dyn zio::VdevIo>>> =
        tops.iter().map(|t| Some(t.clone() as Arc<dyn zio::VdevIo>)).collect();
    let salt = random_salt();
    let zio = Arc::new(zio::Zio::new(io, ChecksumCtx::default()));
    zio.set_checksum_ctx(ChecksumCtx::new(salt));
    let reader = Reader::new(zio, Arc::new(arc::BlockCache::new(spec.cache_bytes)));
    let mut mos = DirtyObjset::create(&reader, DMU_OST_META);
    let mut zaps = ZapCache::new();
    let txg = TXG_INITIAL;
    let now = crate::writer::now_secs();
    let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
    zaps.create_claim(&mut mos, dir, T::ObjectDirectory.to_u8()).map_err(zerr)?;
    let config =
        mos.alloc_object(T::PackedNvlist.to_u8(), 16 << 10, T::PackedNvlistSize.to_u8(), vec![0u8; 8])?;
    let dsl = dsl::write::create_pool_dsl(&mut mos, &mut zaps, txg, now)?;
    create_feature_objects(&mut mos, &mut zaps, &spec.features, txg)?;
    let sync_bpobj = dsl::write::create_bpobj(&mut mos)?;
    for (k, v) in [
        (K::ROOT_DATASET, dsl.root_dir),
        (K::CONFIG, config),
        (K::FREE_BPOBJ, dsl.free_bpobj),
        (K::SYNC_BPOBJ, sync_bpobj),
        (K::CREATION_VERSION, SPA_VERSION),
        (K::DEFLATE, 1),
    ] {
        zaps.update_u64(&mos, dir, k, v).map_err(zerr)?;
    }
    zaps.update(&mos, dir, K::CHECKSUM_SALT.as_bytes(), ZapVal::bytes(&salt)).map_err(zerr)?;
    for (i, t) in info.iter_mut().enumerate() {
        let count = sizes[i] >> t.ms_shift;
        let arr = mos.alloc_object(T::ObjectArray.to_u8(), 16 << 10, 0, Vec::new())?;
        mos.write(arr, 0, &vec![0u8; (count * 8) as usize])?;
        t.ms_array = arr;
    }
    if !spec.pool_props.is_empty() {
        let pp = zaps.create(&mut mos, T::PoolProps.to_u8(), 0, Vec::new()).map_err(zerr)?;
        for (k, v) in &spec.pool_props {
            zaps.update(&mos, pp, k.as_bytes(), v.clone()).map_err(zerr)?;
        }
        zaps.update_u64(&mos, dir, K::PROPS, pp).map_err(zerr)?;
    }
    for (k, v) in &spec.root_props {
        dsl::write::set_prop(&mut mos, &mut zaps, dsl.root_dir, k, Some(v.clone()))?;
    }
    let mut root_os = DirtyObjset::create(&reader, DMU_OST_ZFS);
    let dnodesize = spec.root_props.iter().find(|(k, _)| k == "dnodesize");
    root_os.set_dnode_slots(crate::open_rw::dnode_slots_of(
        dnodesize.and_then(|(_, v)| v.values.first().copied()),
    ));
    let mut root_zaps = ZapCache::new();
    (spec.init_root)(&mut root_os, &mut root_zaps)?;
    let mut w = PoolWriter::new(&spec.name, pool_guid, tops, info, reader, ms, mos, zaps, txg);
    w.label_name = spec.label_name.clone();
    // The configuration carries the comment and a compatibility other than the default
    // (`spa_config_generate`; zpool create passes compatibility only when given).
    for (k, v) in spec.pool_props.iter().filter(|(k, _)| k == "comment" || k == "compatibility") {
        let s = v.text();
        if !(k == "compatibility" && s == "off") {
            w.set_config_str(k, Some(s));
        }
    }
    w.mos_dir = dsl.mos_dir;
    w.config_obj = config;
    w.paths = paths.into_iter().collect();
    w.features_for_read = Vec::new();
    w.datasets.insert(
        dsl.root_ds,
        DatasetWriter {
            os: root_os,
            zaps: root_zaps,
            policy: Policy {
                mos: false,
                data_checksum: spec.root_policy.data_checksum,
                data_compress: spec.root_policy.data_compress,
                zstd_level: spec.root_policy.zstd_level,
                copies: spec.root_policy.copies,
                meta_compress: spec.root_policy.meta_compress,
                embed: spec.root_policy.embed && spec.features.iter().any(|f| f.name == "embedded_data"),
                redundant_metadata: spec.root_policy.redundant_metadata,
            },
            recordsize: 128 << 10,
            atime: crate::writer::ATIME_RELATIME,
            readonly: false,
            xattr: true,
            resume: None,
            zil: Default::default(),
        },
    );
    if let Some(d) = w.datasets.get_mut(&dsl.root_ds) {
        let prop = |name: &str| {
            spec.root_props.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.values.first().copied())
        };
        d.recordsize = prop("recordsize").unwrap_or(128 << 10);
        d.atime = crate::open_rw::atime_of(prop("atime"), prop("relatime"));
        d.readonly = prop("readonly") == Some(1);
        d.xattr = prop("xattr") != Some(0);
        d.zil.sync_mode = prop("sync").unwrap_or(0).min(2) as u8;
    }
    // Properties given at creation activate their features (zstd) in the first txg.
    w.activate_for_props(dsl.root_ds, &spec.root_props)?;
    clear_labels(&w)?;
    w.sync()?;
    Ok(w)
}

fn zerr(e: zap::ZapError) -> PoolError {
    PoolError::Invalid(e.to_string())
}

fn random_salt() -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut taken = Vec::new();
    for chunk in out.chunks_mut(8) {
        chunk.copy_from_slice(&random_guid(&mut taken).to_le_bytes());
    }
    out
}

/// The feature ZAPs (`spa_feature_create_zap_objects`) and the enabled features' entries:
/// refcount 1 for features active once enabled, 0 otherwise; enable txg when `enabled_txg`
/// is among them.
fn create_feature_objects(
    mos: &mut DirtyObjset,
    zaps: &mut ZapCache,
    features: &[&'static Feature],
    txg: u64,
) -> Result<()> {
    let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
    // DMU_OTN_ZAP_METADATA: a new-style type (0x80), metadata (0x40), ZAP byteswap (4).
    let ot = 0xc4;
    let for_read = zaps.create(mos, ot, 0, Vec::new()).map_err(zerr)?;
    let for_write = zaps.create(mos, ot, 0, Vec::new()).map_err(zerr)?;
    let descr = zaps.create(mos, ot, 0, Vec::new()).map_err(zerr)?;
    zaps.update_u64(mos, dir, K::FEATURES_FOR_READ, for_read).map_err(zerr)?;
    zaps.update_u64(mos, dir, K::FEATURES_FOR_WRITE, for_write).map_err(zerr)?;
    zaps.update_u64(mos, dir, K::FEATURE_DESCRIPTIONS, descr).map_err(zerr)?;
    // Features are enabled in table order (spa_create); once `enabled_txg` is enabled, it
    // records the enabling txg of itself and of every later feature, one reference each
    // (zfeature.c feature_enable_sync).
    let mut ordered: Vec<&'static Feature> = features.to_vec();
    ordered.sort_by_key(|f| crate::feature_table::index_of(f.name).unwrap_or(usize::MAX));
    let mut enabled_txg: Option<u64> = None;
    let mut recorded = 0u64;
    for f in ordered {
        let table = if f.readonly_compat() { for_write } else { for_read };
        let refcount = u64::from(f.activate_on_enable());
        zaps.update_u64(mos, table, f.guid, refcount).map_err(zerr)?;
        zaps.update(mos, descr, f.guid.as_bytes(), ZapVal::string(f.description)).map_err(zerr)?;
        if f.name == "enabled_txg" {
            let z = zaps.create(mos, ot, 0, Vec::new()).map_err(zerr)?;
            zaps.update_u64(mos, dir, K::FEATURE_ENABLED_TXG, z).map_err(zerr)?;
            enabled_txg = Some(z);
        }
        if let Some(z) = enabled_txg {
            zaps.update_u64(mos, z, f.guid, txg).map_err(zerr)?;
            recorded += 1;
        }
    }
    if let Some(f) = features.iter().find(|f| f.name == "enabled_txg") {
        let table = if f.readonly_compat() { for_write } else { for_read };
        zaps.update_u64(mos, table, f.guid, recorded).map_err(zerr)?;
    }
    Ok(())
}

/// Zeroes the four label areas of every leaf (a new pool must not inherit an old pool's
/// uberblocks).
fn clear_labels(w: &PoolWriter) -> Result<()> {
    for t in &w.tops {
        clear_top_labels(t)?;
    }
    Ok(())
}

/// Zeroes the four label areas of every leaf under `top`.
pub(crate) fn clear_top_labels(top: &Vdev) -> Result<()> {
    let mut stack = vec![top];
    while let Some(v) = stack.pop() {
        if let Some(d) = v.device() {
            clear_leaf_labels(d.as_ref())?;
        }
        stack.extend(v.children().iter());
    }
    Ok(())
}

/// Zeroes the four label areas of one device.
pub(crate) fn clear_leaf_labels(d: &dyn BlockDevice) -> Result<()> {
    let zeros = vec![0u8; VDEV_LABEL_SIZE as usize];
    for l in 0..ondisk::label::VDEV_LABELS {
        let off = ondisk::label::label_offset(d.size(), l)?;
        d.write_at(&zeros, off).map_err(|e| PoolError::Invalid(format!("{}: {e}", d.name())))?;
    }
    Ok(())
}
