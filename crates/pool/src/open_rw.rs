//! # Opening an imported pool for writing (`spa_load` for a read-write import)
//!
//! The read-only import (`import.rs`) has already verified labels, picked the uberblock and
//! opened the MOS. Here the writer is assembled from it: the metaslab geometry of every
//! top-level vdev comes from the MOS config, each metaslab's free space is rebuilt by
//! replaying its space map (a map that does not replay cleanly refuses the import: writing
//! on top of a wrong free-space picture would overwrite live data), and the features in use
//! are checked against what rzfs can keep correct while writing.
//!
//! Space freed in the last two txgs before the pool was exported becomes allocatable at
//! once, as in OpenZFS (deferred-free state is not persistent).

use crate::feature_table;
use crate::writer::{DatasetWriter, LogFold, Policy, PoolWriter, TopInfo};
use crate::{import, mos_config_nvlist, Pool, PoolError, Result};
use dmu::tx::DirtyObjset;
pub use dmu::CachePolicy;
use dmu::Objset;
use ondisk::blkptr::BlkPtr;
use ondisk::dsl::mos_keys as K;
use ondisk::label::VdevTreeConfig;
use ondisk::spacemap::SmType;
use ondisk::ByteOrder;
use vdev::{Vdev, VdevKind};
use zap::write::ZapCache;

fn bad(detail: impl Into<String>) -> PoolError {
    PoolError::Load { phase: "open_rw", detail: detail.into() }
}

/// Features rzfs keeps correct while writing (enabled or active).
fn writable_feature(short: &str) -> bool {
    feature_table::implemented_for_write(short)
}

/// Refuses pools with a feature in use that rzfs would write incorrectly: the error
/// [`open_rw`] gives for them (the CLI asks first, to print zpool's list).
pub fn check_write_features(pool: &Pool) -> Result<()> {
    let mos = &pool.mos;
    let dir = import::DMU_POOL_DIRECTORY_OBJECT;
    let mut refused = Vec::new();
    for key in [K::FEATURES_FOR_READ, K::FEATURES_FOR_WRITE] {
        let Some(obj) = zap::lookup_u64(mos, dir, key).map_err(|e| bad(e.to_string()))? else { continue };
        for e in zap::list(mos, obj).map_err(|e| bad(e.to_string()))? {
            let guid = e.name_string();
            let short = feature_table::by_name(&guid).map(|f| f.name).unwrap_or(guid.as_str()).to_string();
            // Enabled-but-inactive features only matter if rzfs would have to activate them,
            // which it never does for features it does not implement.
            if e.first_u64().unwrap_or(0) > 0 && !writable_feature(&short) {
                refused.push(short);
            }
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    // Listed by guid, as zpool lists them.
    let guids = refused
        .iter()
        .map(|s| feature_table::by_name(s).map_or_else(|| s.clone(), |f| f.guid.to_string()))
        .collect();
    Err(crate::import::unsupported_features(pool.name(), &pool.mos, guids, true))
}

/// Metaslab geometry and deflate ratio of each top-level vdev, from the MOS config.
fn top_infos(pool: &Pool) -> Result<Vec<TopInfo>> {
    let nv = mos_config_nvlist(pool)?;
    let root = nv.get_nvlist("vdev_tree").ok_or_else(|| bad("MOS config has no vdev_tree"))?;
    let root = VdevTreeConfig::from_nvlist(root).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for (i, c) in root.children.iter().enumerate() {
        let top =
            pool.tops.get(i).ok_or_else(|| bad(format!("config names top-level vdev {i} not assembled")))?;
        if *top.kind() == VdevKind::Hole {
            // A removed top-level vdev keeps its id: nothing to allocate, nothing to load.
            out.push(TopInfo::hole());
            continue;
        }
        if *top.kind() == VdevKind::Missing {
            return Err(PoolError::Unsupported(format!(
                "top-level vdev {i} is missing; rzfs writes only to pools whose top-level vdevs are all present"
            )));
        }
        let ms_array = c.metaslab_array.ok_or_else(|| bad(format!("vdev {i} has no metaslab_array")))?;
        let ms_shift = c.metaslab_shift.ok_or_else(|| bad(format!("vdev {i} has no metaslab_shift")))? as u32;
        let asize = c.asize.ok_or_else(|| bad(format!("vdev {i} has no asize")))?;
        let deflate_ratio = (1u64 << 17) / (top.asize(1 << 17) >> 9);
        out.push(TopInfo { ms_array, ms_shift, asize, create_txg: c.create_txg.unwrap_or(4), deflate_ratio });
    }
    Ok(out)
}

/// Opens `pool` (imported from writable devices) for writing.
pub fn open_rw(pool: &Pool) -> Result<PoolWriter> {
    if pool.version() != crate::writer::SPA_VERSION {
        return Err(PoolError::Unsupported(format!(
            "pool '{}' has version {}; rzfs writes only version 5000 pools: import it with -o readonly=on (or zpool upgrade it first)",
            pool.name(),
            pool.version()
        )));
    }
    if pool.uberblock.byte_order != ByteOrder::Little {
        return Err(PoolError::Unsupported(
            "writing big-endian pools is not supported yet: import it with -o readonly=on".into(),
        ));
    }
    check_write_features(pool)?;
    // A top-level vdev that lost more devices than its redundancy covers cannot take the
    // first txg (OpenZFS refuses such an import: the root vdev cannot be opened).
    // A lost log vdev is let go with `import -m` (OpenZFS's ZFS_IMPORT_MISSING_LOG): it holds
    // no block of the pool but intent log blocks, whose records a replay then misses (as in
    // OpenZFS: the log device's contents are given up).
    let lost_ok = |t: &Vdev| pool.opts.missing_log && t.is_log() && *t.kind() != VdevKind::Missing;
    if let Some((i, t)) = pool
        .tops
        .iter()
        .enumerate()
        .find(|(_, t)| *t.kind() != VdevKind::Hole && t.state().is_lost() && !lost_ok(t))
    {
        if t.is_log() && *t.kind() != VdevKind::Missing {
            // The missing leaves by the paths the configuration gives them.
            let known = leaf_config(pool).map(|c| c.2).unwrap_or_default();
            let paths: Vec<String> = t
                .leaves()
                .iter()
                .filter(|l| l.device().is_none())
                .map(|l| {
                    known
                        .iter()
                        .find(|p| p.0 == l.guid())
                        .map_or_else(|| l.guid().to_string(), |p| p.1.clone())
                })
                .collect();
            return Err(PoolError::Unsupported(format!(
                "one or more devices is currently unavailable\nThe devices below are missing or corrupted, use '-m' to import the pool anyway:\n{}",
                paths.iter().map(|p| format!("\t  {p}")).collect::<Vec<_>>().join("\n")
            )));
        }
        let what = if *t.kind() == VdevKind::Missing {
            format!("top-level vdev {i} is missing")
        } else {
            format!("{} is {}", t.name(), t.state())
        };
        return Err(PoolError::Unsupported(format!(
            "one or more devices is currently unavailable ({what}): import it with -o readonly=on to read what is left"
        )));
    }
    let infos = top_infos(pool)?;
    if pool.tops.is_empty() {
        return Err(bad("no top-level vdev"));
    }
    let rootbp = BlkPtr::parse(&pool.uberblock.rootbp_raw, ByteOrder::Little)?;
    let mos = DirtyObjset::open(&pool.reader, &rootbp)?;
    let mut ms = metaslab::Allocator::new();
    let mut sm = std::collections::BTreeMap::new();
    let mut logs = read_log_spacemaps(pool)?;
    for (i, info) in infos.iter().enumerate() {
        let v = i as u64;
        let top = &pool.tops[i];
        if *top.kind() == VdevKind::Hole {
            continue;
        }
        ms.add_top(v, info.asize, top.ashift(), info.ms_shift).map_err(|e| bad(e.to_string()))?;
        ms.set_log(v, top.is_log()).map_err(|e| bad(e.to_string()))?;
        load_metaslabs(pool, v, info, &mut ms, &mut sm, logs.as_mut())?;
    }
    let dir = import::DMU_POOL_DIRECTORY_OBJECT;
    let lookup = |k: &str| zap::lookup_u64(&pool.mos, dir, k).map_err(|e| bad(e.to_string()));
    let config_obj = lookup(K::CONFIG)?.ok_or_else(|| bad("no config object"))?;
    let root_dir = lookup(K::ROOT_DATASET)?.ok_or_else(|| bad("no root_dataset"))?;
    let mos_dir = {
        let rd = dsl::write::dir_phys(&mos, root_dir)?;
        let entries = zap::list(&pool.mos, rd.child_dir_zapobj).map_err(|e| bad(e.to_string()))?;
        entries.iter().find(|e| e.name == b"$MOS").and_then(|e| e.first_u64()).unwrap_or(0)
    };
    let tops = pool.tops.clone();
    let mut w = PoolWriter::new(
        pool.name(),
        pool.guid(),
        tops,
        infos,
        pool.reader.clone(),
        ms,
        mos,
        ZapCache::new(),
        pool.uberblock.txg + 1,
    );
    w.config_obj = config_obj;
    if pool.opts.temp_name {
        // `import -t`: the labels keep the name they carry.
        w.label_name = pool.candidate.best().config.name.clone();
    }
    w.mos_dir = mos_dir;
    w.sm = sm;
    // Nothing to fold when there are no logs and no metaslab waits for one.
    w.log_fold = logs
        .map(|l| l.fold)
        .filter(|f| !f.logs.is_empty() || f.unflushed_txgs.values().flatten().any(|&t| t != 0));
    w.features_for_read = pool.candidate.best().config.features_for_read.clone();
    w.uberblock = Some(pool.uberblock.clone());
    let (dtls, offline, config_paths, unspare) = leaf_config(pool)?;
    // Where the configuration says the leaves are (missing ones keep their path), then
    // where they were found.
    w.paths.extend(config_paths);
    for d in &pool.candidate.devices {
        w.paths.insert(d.config.guid, d.path.to_string_lossy().into_owned());
    }
    w.kept_config = kept_config(pool)?;
    w.config_dirty = true;
    w.load_dtls(&pool.mos, &dtls)?;
    w.unspare = unspare.into_iter().collect();
    w.load_spares(&pool.mos)?;
    w.load_caches(&pool.mos)?;
    w.install_l2arc();
    for guid in offline {
        if let Some(l) = w.tops.iter().find_map(|t| t.find(guid)) {
            l.set_offline(vdev::Offline::Persistent);
        }
    }
    w.load_scan()?;
    // Reads objset headers and intent logs: only once the leaves' DTLs are known, so that a
    // stale leaf is not read for blocks it missed (and charged a checksum error for them).
    // Logs are claimed before anything can allocate (`crate::zil`).
    let mut w = w;
    w.claim_intent_logs(pool)?;
    Ok(w)
}

/// From the configuration: the leaves' DTL objects, as (guid, object), the guids of the
/// leaves recorded as offline, every leaf's path, as (guid, path), and the guids marked
/// `unspare`.
type LeafConfig = (Vec<(u64, u64)>, Vec<u64>, Vec<(u64, String)>, Vec<u64>);

fn leaf_config(pool: &Pool) -> Result<LeafConfig> {
    let nv = mos_config_nvlist(pool)?;
    let root = nv.get_nvlist("vdev_tree").ok_or_else(|| bad("MOS config has no vdev_tree"))?;
    let root = VdevTreeConfig::from_nvlist(root).map_err(|e| bad(e.to_string()))?;
    let (mut dtls, mut offline, mut paths, mut unspare) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for v in root.walk() {
        if let Some(obj) = v.dtl.filter(|&o| o != 0) {
            dtls.push((v.guid, obj));
        }
        if v.offline {
            offline.push(v.guid);
        }
        if let (true, Some(p)) = (v.is_leaf(), &v.path) {
            paths.push((v.guid, p.clone()));
        }
        if v.unspare {
            unspare.push(v.guid);
        }
    }
    Ok((dtls, offline, paths, unspare))
}

/// Config entries written by OpenZFS that rzfs must carry over when it rewrites the config:
/// per-vdev ZAP objects (`com.delphix:vdev_zap_*`, `com.klarasystems:vdev_zap_root`), the
/// `has_per_vdev_zaps` flag, DTL objects. Dropping them would orphan their MOS objects.
fn kept_config(
    pool: &Pool,
) -> Result<std::collections::BTreeMap<u64, Vec<(String, ondisk::nvlist::NvValue)>>> {
    fn keep(name: &str) -> bool {
        // DTL objects are the writer's own (`crate::dtl`), written back from `dtl_objs`.
        name.starts_with("com.") || name.starts_with("org.")
    }
    fn walk(
        nv: &ondisk::nvlist::NvList,
        out: &mut std::collections::BTreeMap<u64, Vec<(String, ondisk::nvlist::NvValue)>>,
        depth: u32,
    ) {
        if depth > 8 {
            return;
        }
        if let Some(g) = nv.get_u64("guid") {
            let kept: Vec<_> = nv
                .names()
                .filter(|n| keep(n))
                .filter_map(|n| Some((n.to_string(), nv.get(n)?.clone())))
                .collect();
            if !kept.is_empty() {
                out.insert(g, kept);
            }
        }
        for c in nv.get_nvlist_array("children").unwrap_or(&[]) {
            walk(c, out, depth + 1);
        }
    }
    let nv = mos_config_nvlist(pool)?;
    let mut out = std::collections::BTreeMap::new();
    // The header also keeps the pool's comment and compatibility (`zpool set` updates them).
    let header: Vec<_> = nv
        .names()
        .filter(|n| keep(n) || matches!(*n, "comment" | "compatibility"))
        .filter_map(|n| Some((n.to_string(), nv.get(n)?.clone())))
        .collect();
    if !header.is_empty() {
        out.insert(0, header);
    }
    if let Some(root) = nv.get_nvlist("vdev_tree") {
        walk(root, &mut out, 0);
    }
    Ok(out)
}

/// OpenZFS's log space maps (`log_spacemap`), read whole at import: their entries by
/// top-level vdev, and what folding them into the metaslabs' maps takes.
struct Logs {
    /// Per top-level vdev: (log txg, kind, vdev offset, bytes), in replay order.
    entries: std::collections::BTreeMap<u64, Vec<(u64, SmType, u64, u64)>>,
    fold: LogFold,
}

/// Reads the log space maps, if the pool has any (`None` when it has none).
///
/// With `log_spacemap` active OpenZFS writes a txg's allocations and frees of every
/// metaslab to one log space map per txg, and only now and then *flushes* a metaslab
/// (writes what the logs hold for it into its own map, then records the txg from which its
/// changes are in the logs only: its "unflushed txg", in the top-level vdev's
/// `com.delphix:ms_unflushed_phys_txgs` object). A metaslab's space is therefore its map
/// plus the entries of every log written at or after its unflushed txg, in txg order
/// (`spa_ld_log_sm_data`). rzfs writes no logs: its first txg folds all of them into the
/// metaslabs' maps, frees the logs (each one counted by `spacemap_histogram` when it has a
/// histogram header), empties their ZAP (kept: OpenZFS counts `log_spacemap` once, when it
/// makes it) and sets every unflushed txg to 0 — the state of a pool whose metaslabs have
/// not been synced since the feature was enabled, which OpenZFS imports and resumes logging
/// from (`spa_log_spacemap.c`); any other value would need a log of that txg.
fn read_log_spacemaps(pool: &Pool) -> Result<Option<Logs>> {
    let mos = &pool.mos;
    let dir = import::DMU_POOL_DIRECTORY_OBJECT;
    let Some(zap_obj) =
        zap::lookup_u64(mos, dir, ondisk::dsl::mos_keys::LOG_SPACEMAP_ZAP).map_err(|e| bad(e.to_string()))?
    else {
        return Ok(None);
    };
    let mut fold = LogFold { zap: zap_obj, ..LogFold::default() };
    for g in crate::spacemaps::top_geometry(pool)? {
        if g.top_zap == 0 {
            continue;
        }
        if let Some(obj) = zap::lookup_u64(mos, g.top_zap, crate::spacemaps::MS_UNFLUSHED_PHYS_TXGS)
            .map_err(|e| bad(e.to_string()))?
        {
            let size = Objset::object_size(&mos.dnode(obj)?.phys)?;
            fold.unflushed.push((obj, size));
            fold.unflushed_txgs.insert(g.vdev, crate::spacemaps::unflushed_txgs(mos, &g)?);
        }
    }
    let mut entries: std::collections::BTreeMap<u64, Vec<(u64, SmType, u64, u64)>> = Default::default();
    let mut logs = Vec::new();
    crate::spacemaps::for_each_log_entry(mos, &mut |txg, obj| logs.push((txg, obj)), &mut |e| {
        entries.entry(e.vdev).or_default().push((e.txg, e.kind, e.offset, e.len));
        Ok(())
    })?;
    fold.logs = logs;
    Ok(Some(Logs { entries, fold }))
}

/// The parts of `a` not in `b`, as (offset, length).
fn difference(a: &metaslab::RangeTree, b: &metaslab::RangeTree) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (s, e) in a.iter() {
        let mut at = s;
        for (os, oe) in b.overlaps(s, e - s) {
            if os > at {
                out.push((at, os - at));
            }
            at = at.max(oe);
        }
        if at < e {
            out.push((at, e - at));
        }
    }
    out
}

/// Replays every metaslab's space map of top-level vdev `v` into the allocator, one map
/// block at a time (`spacemaps::replay`): a map's claimed length never becomes an
/// allocation. With `logs`, each metaslab's unflushed log entries are applied on top, and
/// what they change is noted for the first txg to write into the metaslab's map.
fn load_metaslabs(
    pool: &Pool,
    v: u64,
    info: &TopInfo,
    ms: &mut metaslab::Allocator,
    sm: &mut std::collections::BTreeMap<(u64, u64), (u64, u64, i64)>,
    mut logs: Option<&mut Logs>,
) -> Result<()> {
    let mos = &pool.mos;
    let count = ms.metaslab_count(v).map_err(|e| bad(e.to_string()))?;
    let objs = crate::spacemaps::metaslab_objects(mos, info.ms_array, count)?;
    // This vdev's log entries by metaslab, in replay order, each kept only when its log is
    // at or after the metaslab's unflushed txg.
    let mut per_ms: std::collections::BTreeMap<u64, Vec<(SmType, u64, u64)>> = Default::default();
    if let Some(l) = logs.as_deref() {
        let txgs = l.fold.unflushed_txgs.get(&v);
        for &(txg, kind, off, len) in l.entries.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
            let m = off >> info.ms_shift;
            if m >= count {
                return Err(bad(format!(
                    "log space map of txg {txg}: vdev {v} offset {off:#x} is past its metaslabs"
                )));
            }
            let since = txgs.and_then(|t| t.get(m as usize)).copied().unwrap_or(0);
            if txg >= since {
                per_ms.entry(m).or_default().push((kind, off, len));
            }
        }
    }
    for (m, obj) in (0..count).zip(objs) {
        let log = per_ms.remove(&m);
        if obj == 0 && log.is_none() {
            continue;
        }
        let mut r = ms.replay(v, m).map_err(|e| bad(e.to_string()))?;
        let phys = if obj == 0 {
            ondisk::spacemap::SpaceMapPhys { object: 0, length: 0, alloc: 0, histogram: None }
        } else {
            crate::spacemaps::replay(mos, obj, &mut r)?
        };
        let mut expect = phys.alloc;
        if let (Some(log), Some(l)) = (log, logs.as_deref_mut()) {
            let before = r.allocated.clone();
            for (kind, off, len) in log {
                let res = match kind {
                    SmType::Alloc => r.allocated.add(off, len),
                    SmType::Free => r.allocated.remove(off, len),
                };
                res.map_err(|_| {
                    bad(format!(
                        "log space maps: {kind:?} of {len:#x} bytes at {off:#x} contradicts vdev {v} metaslab {m}"
                    ))
                })?;
            }
            let start = m << info.ms_shift;
            let rel = |x: Vec<(u64, u64)>| x.into_iter().map(|(o, n)| (o - start, n)).collect::<Vec<_>>();
            let (allocs, frees) =
                (rel(difference(&r.allocated, &before)), rel(difference(&before, &r.allocated)));
            expect += allocs.iter().map(|x| x.1 as i64).sum::<i64>()
                - frees.iter().map(|x| x.1 as i64).sum::<i64>();
            if !allocs.is_empty() || !frees.is_empty() {
                l.fold.runs.insert((v, m), (allocs, frees));
            }
        }
        let alloc = ms
            .install(r)
            .map_err(|e| bad(format!("space map of vdev {v} metaslab {m} (object {obj}): {e}")))?;
        if alloc as i64 != expect {
            return Err(bad(format!(
                "space map of vdev {v} metaslab {m} replays to {alloc} allocated bytes, header says {}",
                phys.alloc
            )));
        }
        if obj != 0 {
            sm.insert((v, m), (obj, phys.length, phys.alloc));
        }
    }
    Ok(())
}

impl PoolWriter {
    /// Opens head dataset `ds` (a `dsl_dataset` object) for writing.
    pub fn open_dataset(&mut self, ds: u64, policy: Policy) -> Result<()> {
        if self.datasets.contains_key(&ds) {
            return Ok(());
        }
        let phys = dsl::write::ds_phys(&self.mos, ds)?;
        if phys.num_children != 0 {
            return Err(PoolError::Invalid("snapshots are read-only".into()));
        }
        let bp = BlkPtr::parse(&phys.bp, ByteOrder::Little)?;
        let os = if bp.is_hole() {
            DirtyObjset::create(&self.reader, ondisk::objset::DMU_OST_ZFS)
        } else {
            DirtyObjset::open(&self.reader, &bp)?
        };
        let s = self.dataset_settings(phys.dir_obj)?;
        let mut os = os;
        os.set_dnode_slots(s.dnode_slots);
        os.set_cache_policy(s.primarycache);
        os.set_l2_policy(s.secondarycache);
        let (recordsize, atime, readonly, xattr) = (s.recordsize, s.atime, s.readonly, s.xattr);
        let mut zil = crate::zil::Zil::default();
        zil.sync_mode = s.sync;
        self.datasets.insert(
            ds,
            DatasetWriter {
                os,
                zaps: ZapCache::new(),
                policy,
                recordsize,
                atime,
                readonly,
                xattr,
                resume: None,
                zil,
            },
        );
        Ok(())
    }

    /// Opens head dataset `ds` for writing with the settings its properties give.
    pub fn open_dataset_inherited(&mut self, ds: u64) -> Result<()> {
        let dir = dsl::write::ds_phys(&self.mos, ds)?.dir_obj;
        let policy = self.dataset_settings(dir)?.policy();
        self.open_dataset(ds, policy)
    }

    /// The dataset writer of `ds` (opened with [`PoolWriter::open_dataset`]).
    pub fn dataset(&mut self, ds: u64) -> Option<&mut DatasetWriter> {
        self.datasets.get_mut(&ds)
    }

    /// Marks the pool exported (or destroyed) and syncs; the writer must not be used after.
    pub fn close(&mut self, state: ondisk::label::PoolState) -> Result<()> {
        self.sync()?;
        self.state = state;
        self.config_dirty = true;
        // A config-only txg: the MOS config object records the new state too.
        self.sync()
    }

    /// A read-only [`Pool`] view of the last synced txg (for listing, status and reads).
    pub fn read_view(&self, base: &Pool) -> Result<Pool> {
        let ub = self.uberblock.clone().ok_or_else(|| bad("nothing synced yet"))?;
        let rootbp = BlkPtr::parse(&ub.rootbp_raw, ByteOrder::Little)?;
        let mos = dmu::Objset::open(&self.reader, &rootbp)?;
        // The devices found at import that are no longer leaves of the pool (detached,
        // replaced) are let go: a view lives on (mounts, commands in flight), and would
        // otherwise keep such a device open with its exclusive lock, so that it could not be
        // attached again or given to another pool. Their labels stay for what the view
        // reports of the import.
        let mut candidate = base.candidate.clone();
        let leaves: std::collections::BTreeSet<u64> =
            self.tops.iter().flat_map(|t| t.leaves().into_iter().map(|l| l.guid())).collect();
        let in_use = |d: &crate::discover::DeviceLabel| {
            leaves.contains(&d.config.guid) || self.paths.values().any(|p| std::path::Path::new(p) == d.path)
        };
        for d in candidate.devices.iter_mut().filter(|d| !in_use(d)) {
            d.device = std::sync::Arc::new(vdev::MemDevice::new(d.path.display().to_string(), 0));
        }
        let mut p = Pool::new(candidate, self.tops.clone(), ub, self.reader.clone(), mos, base.opts.clone());
        p.load_guid = base.load_guid;
        p.leaf_paths = self.paths.clone();
        Ok(p)
    }
}

/// Effective settings of a dataset for writing (inherited through the directory chain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatasetSettings {
    pub policy_checksum: u8,
    pub policy_compress: u8,
    /// zstd level (`zio_zstd_levels`; 0 = default) when `policy_compress` is zstd.
    pub zstd_level: u8,
    pub copies: u8,
    pub recordsize: u64,
    pub readonly: bool,
    /// The pool has `lz4_compress` (metadata and `compression=on` use lz4, else lzjb).
    pub lz4: bool,
    /// The pool has `embedded_data` (tiny compressed blocks go in their pointers).
    pub embed: bool,
    /// Slots of the dnodes of new files and directories (`dnodesize`).
    pub dnode_slots: u8,
    /// `redundant_metadata` (0 all .. 3 none).
    pub redundant_metadata: u8,
    /// `primarycache`: which of the dataset's blocks the block cache keeps.
    pub primarycache: CachePolicy,
    /// `secondarycache`: which of the dataset's blocks go to the cache devices.
    pub secondarycache: CachePolicy,
    /// `atime` and `relatime` ([`crate::writer::ATIME_RELATIME`], ...).
    pub atime: u8,
    /// `xattr` is not `off`.
    pub xattr: bool,
    /// `sync`: 0 standard, 1 always, 2 disabled.
    pub sync: u8,
}

/// The dnode size a stored `dnodesize` value asks for, in 512-byte slots: legacy (0) is
/// one, auto (1) two (`dnodesize_changed_cb`: auto is `DNODE_MIN_SIZE * 2`), 1k..16k their
/// size.
pub fn dnode_slots_of(raw: Option<u64>) -> u8 {
    match raw.unwrap_or(0) {
        0 => 1,
        1 => 2,
        n => (n / 512).clamp(1, 32) as u8,
    }
}

impl DatasetSettings {
    pub fn policy(&self) -> Policy {
        Policy {
            mos: false,
            data_checksum: self.policy_checksum,
            data_compress: self.policy_compress,
            zstd_level: self.zstd_level,
            copies: self.copies,
            meta_compress: crate::writer::meta_compress(self.lz4),
            embed: self.embed,
            redundant_metadata: self.redundant_metadata,
        }
    }
}

impl PoolWriter {
    /// The numeric value of `prop` for directory `dir` in the open txg: local, else
    /// inherited ([`dsl::props::resolve`]); `None` for the default.
    pub fn inherited_prop(&mut self, dir: u64, prop: &str) -> Result<Option<u64>> {
        let (mos, zaps) = (&self.mos, &mut self.mos_zaps);
        let found = dsl::props::resolve(dir, prop, |d| -> Result<_> {
            let p = dsl::write::dir_phys(mos, d)?;
            let v = dsl::write::dir_value(mos, zaps, p.props_zapobj, prop)?;
            let v = v.and_then(|v| (v.int_size == 8).then(|| v.values.first().copied()).flatten());
            Ok((v.map(dsl::props::RawProp::Num), p.parent_obj))
        })?;
        Ok(found.and_then(|(v, _)| match v {
            dsl::props::RawProp::Num(n) => Some(n),
            dsl::props::RawProp::Str(_) => None,
        }))
    }

    /// The settings a dataset in directory `dir` is written with: `compression=on` is lz4
    /// (the pool has lz4_compress), `checksum=on` is fletcher4. A `compression` set nowhere
    /// up the tree is `on`, OpenZFS 2.2+'s default (`ZIO_COMPRESS_DEFAULT`).
    pub fn dataset_settings(&mut self, dir: u64) -> Result<DatasetSettings> {
        let lz4 = self.feature_refcount("lz4_compress")?.is_some();
        let embed = self.feature_refcount("embedded_data")?.is_some();
        let (compress, zstd_level) =
            decode_compression(self.inherited_prop(dir, "compression")?.unwrap_or(DEFAULT_COMPRESSION), lz4);
        let checksum = decode_checksum(self.inherited_prop(dir, "checksum")?.unwrap_or(1));
        let copies = self.inherited_prop(dir, "copies")?.unwrap_or(1).clamp(1, 3) as u8;
        let recordsize = self.inherited_prop(dir, "recordsize")?.unwrap_or(128 << 10);
        let readonly = self.inherited_prop(dir, "readonly")?.unwrap_or(0) == 1;
        let dnode_slots = dnode_slots_of(self.inherited_prop(dir, "dnodesize")?);
        let redundant_metadata = self.inherited_prop(dir, "redundant_metadata")?.unwrap_or(0).min(3) as u8;
        let primarycache = CachePolicy::from_prop(self.inherited_prop(dir, "primarycache")?);
        let secondarycache = CachePolicy::from_prop(self.inherited_prop(dir, "secondarycache")?);
        let atime = atime_of(self.inherited_prop(dir, "atime")?, self.inherited_prop(dir, "relatime")?);
        let xattr = self.inherited_prop(dir, "xattr")?.unwrap_or(1) != 0;
        let sync = self.inherited_prop(dir, "sync")?.unwrap_or(0).min(2) as u8;
        Ok(DatasetSettings {
            atime,
            xattr,
            sync,
            dnode_slots,
            redundant_metadata,
            primarycache,
            secondarycache,
            policy_checksum: checksum,
            policy_compress: compress,
            zstd_level,
            copies,
            recordsize,
            readonly,
            lz4,
            embed,
        })
    }
}

/// `compression` where no dataset up the tree set it: `on` (OpenZFS 2.2+'s
/// `ZIO_COMPRESS_DEFAULT`; before 2.2 it was `off`).
pub const DEFAULT_COMPRESSION: u64 = codec::compress::ZIO_COMPRESS_ON as u64;

/// A stored `compression` value as the block compression and zstd level to write with:
/// `on` is lz4 on pools with `lz4_compress` (`lz4`), lzjb on others, and the level of
/// zstd-N sits above the 7 algorithm bits (`ZIO_COMPRESS_RAW`).
pub fn decode_compression(raw: u64, lz4: bool) -> (u8, u8) {
    match (raw & 0x7f, raw >> 7) {
        (0 | 2, _) => (2, 0),
        (1, _) => (if lz4 { 15 } else { 3 }, 0),
        (16, l) => (16, u8::try_from(l).unwrap_or(0)),
        (c, _) => (c as u8, 0),
    }
}

/// The access-time policy of stored `atime` and `relatime` values (both on where no dataset
/// up the tree set them, as in OpenZFS 2.x): [`crate::writer::ATIME_RELATIME`], ...
pub fn atime_of(atime: Option<u64>, relatime: Option<u64>) -> u8 {
    match (atime.unwrap_or(1), relatime.unwrap_or(1)) {
        (0, _) => crate::writer::ATIME_OFF,
        (_, 0) => crate::writer::ATIME_ON,
        _ => crate::writer::ATIME_RELATIME,
    }
}

/// A stored `checksum` value as the block checksum to write with: `on` is fletcher4.
pub fn decode_checksum(raw: u64) -> u8 {
    match raw {
        0 | 1 => 7,
        c => c as u8,
    }
}
