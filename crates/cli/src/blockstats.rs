//! Pool-wide block traversal and statistics (`rzdb -b`), counting exactly what `zdb -b`
//! counts (OpenZFS `cmd/zdb/zdb.c` `dump_block_stats`, `module/zfs/dmu_traverse.c`
//! `traverse_pool`):
//!
//! 1. the blocks of the deferred-free bpobj (`sync_bplist`) and of the pool's `free_bpobj`
//!    (freed, not yet reclaimed: still allocated), as type "deferred free";
//! 2. the MOS: its root block and its whole tree;
//! 3. every MOS object whose bonus is a DSL dataset (heads, snapshots, `$ORIGIN`), in object
//!    order: blocks born after the dataset's `prev_snap_txg` (older ones belong to, and were
//!    counted with, an earlier snapshot), starting at the objset root block; for head
//!    datasets also the intent log chain (and, for claimed logs, the blocks of write records).
//!
//! Units: `lsize` and `psize` as in the block pointer, except that embedded pointers have
//! psize 0; `asize` sums every real DVA (all copies; an encrypted pointer's DVA[2] is salt and
//! IV, not a copy). Holes and redacted pointers are not counted. With `verify` every counted
//! block is read and checksum-verified, data included (`zdb -cc`); failures are counted in
//! `errors` and the walk goes on. Read failures of intent-log blocks are expected (a chain
//! ends in an allocated but unwritten block) and are not errors, as in zdb.
//!
//! Not counted (noted in `notes` when present): the async-destroy `bptree` and deleted clone
//! livelists, which zdb also walks.
//!
//! **Space check** (zdb's leak detection, `zdb_leak_init` / `zdb_leak_fini`): before the
//! walk every metaslab's space map is replayed into the allocated space of its vdev
//! ([`pool::spacemaps`]); each counted block then claims the extents of its DVAs (a gang
//! block: the gang header's own sectors on every gang DVA, then its children, recursively).
//! A claim of space the maps call free is a *referenced but free* block (a live block the
//! allocator may hand out again); a claim of space an earlier block already claimed is a
//! *double allocation* (dedup blocks, counted once per DVA, excepted); whatever stays
//! allocated but unclaimed at the end is *leaked*. Pools whose space accounting needs what
//! rzfs does not read yet (checkpoints, device removal, block cloning, an async-destroy
//! queue) are counted but not checked, and say so. Changes still only in the log space maps
//! (`log_spacemap`: a pool not exported cleanly) are replayed onto the metaslabs' maps first.

use dmu::traverse::{traverse_objset, traverse_zil, TraverseOpts, Visit};
use dmu::Objset;
use metaslab::RangeTree;
use ondisk::blkptr::BlkPtr;
use ondisk::dmu_types::DmuObjectType;
use ondisk::dsl::mos_keys as K;
use ondisk::dsl::DslDatasetPhys;
use pool::Pool;
use std::collections::{BTreeMap, HashSet};

/// Counters of one block type (or of the total).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeStats {
    pub count: u64,
    pub lsize: u64,
    pub psize: u64,
    pub asize: u64,
}

/// Block statistics, in the units `zdb -b` prints.
#[derive(Default, Debug, Clone)]
pub struct BlockStats {
    pub count: u64,
    pub lsize: u64,
    pub psize: u64,
    pub asize: u64,
    pub errors: u64,
    pub embedded: u64,
    pub gang: u64,
    /// Per type, keyed by the name zdb prints ("DMU dnode", "other", "deferred free", ...).
    pub by_type: BTreeMap<String, TypeStats>,
    /// What could not be counted or verified, and the first errors met.
    pub notes: Vec<String>,
    /// The space check, when it could be done.
    pub space: Option<SpaceReport>,
}

/// One extent of a top-level vdev.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    pub vdev: u64,
    pub offset: u64,
    pub size: u64,
}

/// What the space check found.
#[derive(Clone, Debug, Default)]
pub struct SpaceReport {
    /// Bytes allocated according to the space maps.
    pub alloc: u64,
    /// Bytes claimed by the blocks counted.
    pub claimed: u64,
    /// Allocated in the space maps, referenced by no block.
    pub leaked: Vec<Extent>,
    /// Referenced by a block, free in the space maps: `(extent, the block)`.
    pub referenced_free: Vec<(Extent, String)>,
    /// Referenced by two blocks: `(extent, the second block)`.
    pub double_alloc: Vec<(Extent, String)>,
}

impl SpaceReport {
    /// True when the block sum matches the space maps exactly.
    pub fn clean(&self) -> bool {
        self.leaked.is_empty() && self.referenced_free.is_empty() && self.double_alloc.is_empty()
    }
}

/// `DMU_OT_DSL_DATASET`: bonus type of dataset objects in the MOS.
const DMU_OT_DSL_DATASET: u8 = 16;
/// The type row zdb uses for blocks of the deferred/free bpobjs.
const DEFERRED: &str = "deferred free";
/// Errors quoted in `notes` (the rest are only counted).
const MAX_ERROR_NOTES: usize = 20;

/// Traverses the whole pool as `zdb -b` does, reading every block when `verify`, and
/// checks the space maps against the blocks found (see the module comment).
pub fn block_stats(p: &Pool, verify: bool) -> Result<BlockStats, String> {
    let mut st = BlockStats::default();
    let mos = &p.mos;
    let dir = 1; // DMU_POOL_DIRECTORY_OBJECT
    let mut space = match SpaceCheck::load(p) {
        Ok(sc) => Some(sc),
        Err(Unchecked::Unsupported(why)) => {
            st.notes.push(format!("space maps not checked: {why}"));
            None
        }
        Err(Unchecked::Damaged(why)) => {
            error(&mut st, format!("space maps not checked: {why}"));
            None
        }
    };
    for name in [K::SYNC_BPOBJ, K::FREE_BPOBJ] {
        if let Some(obj) = zap::lookup_u64(mos, dir, name).map_err(|e| e.to_string())? {
            count_bpobj(p, &mut st, &mut space, obj, 0);
        }
    }
    for name in [K::BPTREE_OBJ, K::DELETED_CLONES] {
        if zap::lookup_u64(mos, dir, name).map_err(|e| e.to_string())?.is_some() {
            st.notes.push(format!("MOS directory '{name}' present: its blocks are not counted"));
        }
    }
    count(&mut st, &mut space, &mos.bp, None);
    walk(&mut st, &mut space, mos, 0, verify, "MOS");
    let order = mos.dnode_byte_order();
    let mut datasets = Vec::new();
    mos.for_each_dnode(|dn| {
        if dn.bonustype == DMU_OT_DSL_DATASET {
            datasets.push((dn.object, DslDatasetPhys::parse(&dn.bonus, order)));
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    for (obj, ds) in datasets {
        match ds {
            Ok(ds) => dataset(p, &mut st, &mut space, obj, &ds, verify),
            Err(e) => error(&mut st, format!("dataset object {obj}: {e}")),
        }
    }
    st.space = space.map(SpaceCheck::finish);
    Ok(st)
}

/// One dataset: its intent log (heads only), then its blocks born after `prev_snap_txg`.
fn dataset(
    p: &Pool,
    st: &mut BlockStats,
    space: &mut Option<SpaceCheck>,
    obj: u64,
    ds: &DslDatasetPhys,
    verify: bool,
) {
    let bp = match BlkPtr::parse(&ds.bp, p.mos.dnode_byte_order()) {
        Ok(bp) => bp,
        Err(e) => return error(st, format!("dataset {obj}: root pointer: {e}")),
    };
    if bp.is_hole() {
        return;
    }
    let os = match Objset::open(&p.reader, &bp) {
        Ok(os) => os,
        Err(e) => {
            if bp.birth > ds.prev_snap_txg {
                count(st, space, &bp, None);
            }
            return error(st, format!("dataset {obj}: objset {bp}: {e}"));
        }
    };
    if !ds.is_snapshot() {
        let ub = &p.uberblock;
        let min_claim_txg = if ub.checkpoint_txg != 0 { ub.checkpoint_txg + 1 } else { ub.txg + 1 };
        let mut v = |x: &Visit| {
            count(st, space, x.bp, None);
            if verify && !x.bp.is_embedded() {
                // Intent-log reads are speculative in zdb: failures are not errors.
                let _ = p.reader.zio.read_physical(x.bp);
            }
            Ok(())
        };
        if let Err(e) = traverse_zil(&p.reader, &os.phys.zil, min_claim_txg, &mut v) {
            error(st, format!("dataset {obj}: intent log: {e}"));
        }
    }
    if bp.birth <= ds.prev_snap_txg {
        return;
    }
    count(st, space, &bp, None);
    walk(st, space, &os, ds.prev_snap_txg, verify, &format!("dataset {obj}"));
}

/// Counts every block of `os` born after `min_birth`.
fn walk(
    st: &mut BlockStats,
    space: &mut Option<SpaceCheck>,
    os: &Objset,
    min_birth: u64,
    verify: bool,
    what: &str,
) {
    let opts = TraverseOpts { min_birth, read_data: verify, resume: None };
    let errors = std::cell::RefCell::new(Vec::new());
    let mut counted = Vec::new();
    let mut v = |x: &Visit| {
        counted.push(*x.bp);
        Ok(())
    };
    let mut on_err = |bp: &BlkPtr, object: u64, e: &dmu::DmuError| {
        errors.borrow_mut().push(format!("{what} object {object}: {bp}: {e}"));
    };
    let res = traverse_objset(os, opts, &mut v, &mut on_err);
    for bp in &counted {
        count(st, space, bp, None);
    }
    for e in errors.into_inner() {
        error(st, e);
    }
    if let Err(e) = res {
        error(st, format!("{what}: traversal stopped: {e}"));
    }
}

/// Block pointers read from a bpobj at a time (1 MiB): bpobjs of freed blocks can be large.
const BPOBJ_CHUNK: u64 = 8192;

/// Counts the block pointers of bpobj `obj` and of its sub-bpobjs (`bpobj_iterate_nofree`).
/// Each bpobj is counted once (a crafted sub-bpobj list naming one bpobj many times, or
/// itself, would otherwise multiply the walk), and entries are read in pieces.
fn count_bpobj(p: &Pool, st: &mut BlockStats, space: &mut Option<SpaceCheck>, obj: u64, depth: u32) {
    let mut seen = HashSet::new();
    count_bpobj_once(p, st, space, obj, depth, &mut seen);
}

fn count_bpobj_once(
    p: &Pool,
    st: &mut BlockStats,
    space: &mut Option<SpaceCheck>,
    obj: u64,
    depth: u32,
    seen: &mut HashSet<u64>,
) {
    if depth > 16 {
        return error(st, format!("bpobj {obj}: sub-bpobjs nested too deep"));
    }
    if !seen.insert(obj) {
        return error(st, format!("bpobj {obj}: listed twice among sub-bpobjs"));
    }
    let mos = &p.mos;
    let order = mos.dnode_byte_order();
    let res = (|| -> Result<Vec<u64>, String> {
        let dn = mos.dnode(obj).map_err(|e| e.to_string())?;
        let hdr = ondisk::bpobj::BpobjPhys::parse(&dn.bonus, order).map_err(|e| e.to_string())?;
        let size = Objset::object_size(&dn).map_err(|e| e.to_string())?;
        if hdr.num_blkptrs.checked_mul(128).is_none_or(|n| n > size) {
            return Err(format!("{} block pointers do not fit the object's {size} bytes", hdr.num_blkptrs));
        }
        // Entries are blocks already freed: counted (they still hold space until the free
        // is processed) but never read — their contents are dead and OpenZFS stores them
        // with the checksum zeroed (bpobj_enqueue), as zdb knows.
        let mut i = 0;
        while i < hdr.num_blkptrs {
            let n = (hdr.num_blkptrs - i).min(BPOBJ_CHUNK);
            let mut raw = vec![0u8; (n * 128) as usize];
            mos.read(&dn, i * 128, &mut raw).map_err(|e| e.to_string())?;
            for c in raw.chunks_exact(128) {
                let bp = BlkPtr::parse(c, order).map_err(|e| e.to_string())?;
                if !bp.is_hole() {
                    count(st, space, &bp, Some(DEFERRED));
                }
            }
            i += n;
        }
        let mut subs = Vec::new();
        if hdr.subobjs != 0 && hdr.num_subobjs != 0 {
            let sdn = mos.dnode(hdr.subobjs).map_err(|e| e.to_string())?;
            // One u64 per sub-bpobj; 1M of them is far beyond any real pool.
            let raw = mos
                .read_all(&sdn, Some(hdr.num_subobjs.saturating_mul(8)), 8 << 20)
                .map_err(|e| e.to_string())?;
            for c in raw.chunks_exact(8) {
                subs.push(order.u64_at(c, 0, "bpobj subobj").map_err(|e| e.to_string())?);
            }
        }
        Ok(subs)
    })();
    match res {
        Ok(subs) => {
            for s in subs {
                count_bpobj_once(p, st, space, s, depth + 1, seen);
            }
        }
        Err(e) => error(st, format!("bpobj {obj}: {e}")),
    }
}

fn error(st: &mut BlockStats, msg: String) {
    st.errors += 1;
    if st.notes.len() < MAX_ERROR_NOTES {
        st.notes.push(msg);
    }
}

/// Adds one block pointer (`zdb_count_block`): `type_name` overrides the pointer's type row.
fn count(st: &mut BlockStats, space: &mut Option<SpaceCheck>, bp: &BlkPtr, type_name: Option<&str>) {
    if bp.is_hole() || bp.is_redacted() {
        return;
    }
    if let Some(sc) = space {
        sc.claim(bp, 0);
    }
    let psize = if bp.is_embedded() { 0 } else { bp.psize() };
    let (lsize, asize) = (bp.lsize(), bp.asize());
    st.count += 1;
    st.lsize += lsize;
    st.psize += psize;
    st.asize += asize;
    st.gang += bp.gang_count();
    if bp.is_embedded() {
        st.embedded += 1;
    }
    let name = match type_name {
        Some(n) => n.to_string(),
        None => type_row(bp.object_type()),
    };
    let t = st.by_type.entry(name).or_default();
    t.count += 1;
    t.lsize += lsize;
    t.psize += psize;
    t.asize += asize;
}

/// The row zdb files a block type under: new-style types (bit 7) are all "other".
fn type_row(t: u8) -> String {
    let ot = DmuObjectType::from_u8(t);
    if t & 0x80 != 0 || !ot.is_valid() {
        "other".to_string()
    } else {
        ot.name().to_string()
    }
}

/// Lines printed per kind of space problem (all are counted).
const MAX_SPACE_LINES: usize = 1000;

/// Features whose space accounting the check does not model yet (see the module comment).
const UNCHECKED_FEATURES: [&str; 4] =
    ["device_removal", "obsolete_counts", "block_cloning", "zpool_checkpoint"];

/// The space check under way: per vdev, the space the maps call allocated and not yet
/// claimed, and the space claimed so far.
struct SpaceCheck {
    zio: std::sync::Arc<zio::Zio>,
    unclaimed: BTreeMap<u64, RangeTree>,
    claimed: BTreeMap<u64, RangeTree>,
    /// Bytes a gang header takes on each vdev (`vdev_gang_header_asize`).
    gang_asize: BTreeMap<u64, u64>,
    /// First DVAs of dedup blocks already claimed (the DDT shares them among pointers).
    dedup: HashSet<(u64, u64)>,
    report: SpaceReport,
}

/// Why the space check was not done.
enum Unchecked {
    /// The pool uses something the check does not model (a note, not an error).
    Unsupported(String),
    /// The space maps or the config describing them are damaged (an error).
    Damaged(String),
}

impl From<String> for Unchecked {
    fn from(s: String) -> Self {
        Unchecked::Damaged(s)
    }
}

impl SpaceCheck {
    /// Replays every space map; `Err` says why the check cannot be done on this pool.
    fn load(p: &Pool) -> Result<SpaceCheck, Unchecked> {
        use Unchecked::Unsupported;
        let mos = &p.mos;
        let dir = K::DIRECTORY_OBJECT;
        for key in [K::ZPOOL_CHECKPOINT, K::REMOVING, K::BPTREE_OBJ, K::DELETED_CLONES] {
            if zap::lookup(mos, dir, key).map_err(|e| e.to_string())?.is_some() {
                return Err(Unsupported(format!(
                    "the MOS directory has '{key}', whose space rzdb does not account for yet"
                )));
            }
        }
        if p.uberblock.checkpoint_txg != 0 {
            return Err(Unsupported("the pool has a checkpoint".into()));
        }
        for key in [K::FEATURES_FOR_READ, K::FEATURES_FOR_WRITE] {
            let Some(obj) = zap::lookup_u64(mos, dir, key).map_err(|e| e.to_string())? else { continue };
            for e in zap::list(mos, obj).map_err(|e| e.to_string())? {
                let guid = e.name_string();
                let short = pool::feature_table::by_name(&guid).map(|f| f.name).unwrap_or(guid.as_str());
                if e.first_u64().unwrap_or(0) > 0 && UNCHECKED_FEATURES.contains(&short) {
                    return Err(Unsupported(format!("feature {short} is active")));
                }
            }
        }
        let tops = pool::spacemaps::top_geometry(p).map_err(|e| e.to_string())?;
        let mut sc = SpaceCheck {
            zio: p.reader.zio.clone(),
            unclaimed: BTreeMap::new(),
            claimed: BTreeMap::new(),
            gang_asize: BTreeMap::new(),
            dedup: HashSet::new(),
            report: SpaceReport::default(),
        };
        for t in &tops {
            if t.kind == "indirect" {
                return Err(Unsupported(format!("vdev {} is an indirect (removed) vdev", t.vdev)));
            }
            if t.ms_array == 0 || t.kind == "hole" {
                continue;
            }
            let Some(top) = usize::try_from(t.vdev).ok().and_then(|i| p.tops.get(i)) else {
                return Err(Unsupported(format!("vdev {} of the config is not assembled", t.vdev)));
            };
            sc.gang_asize.insert(t.vdev, top.asize(ondisk::blkptr::SPA_GANGBLOCKSIZE as u64));
            let objs = pool::spacemaps::metaslab_objects(mos, t.ms_array, t.ms_count())
                .map_err(|e| e.to_string())?;
            let mut allocated = RangeTree::new();
            for (m, obj) in objs.into_iter().enumerate() {
                if obj == 0 {
                    continue;
                }
                let m = m as u64;
                let start = m << t.ms_shift;
                let mut r = metaslab::SpaceMapReplay::new(t.vdev, m, start, 1u64 << t.ms_shift, t.ashift);
                let phys = pool::spacemaps::replay(mos, obj, &mut r).map_err(|e| e.to_string())?;
                if r.alloc_space() as i64 != phys.alloc {
                    return Err(Unchecked::Damaged(format!(
                        "space map of vdev {} metaslab {m} (object {obj}) replays to {} allocated bytes, its header says {}",
                        t.vdev,
                        r.alloc_space(),
                        phys.alloc
                    )));
                }
                allocated.add_tree(&r.allocated).map_err(|e| e.to_string())?;
            }
            sc.unclaimed.insert(t.vdev, allocated);
            sc.claimed.insert(t.vdev, RangeTree::new());
        }
        sc.replay_logs(p, &tops)?;
        sc.report.alloc = sc.unclaimed.values().map(RangeTree::space).sum();
        Ok(sc)
    }

    /// Adds what the log space maps (`log_spacemap`) hold and the metaslabs' own maps do not
    /// yet: every entry of a log written in txg T applies to its metaslab when T is at or
    /// after the metaslab's unflushed txg (what was flushed before is already in its map), in
    /// txg order — zdb's `load_unflushed_to_ms_allocatables`. Entries of vdevs without
    /// metaslabs (holes, removed vdevs) are skipped, as there.
    fn replay_logs(&mut self, p: &Pool, tops: &[pool::spacemaps::TopGeometry]) -> Result<(), Unchecked> {
        let mos = &p.mos;
        let logs = pool::spacemaps::log_spacemaps(mos).map_err(|e| e.to_string())?;
        if logs.is_empty() {
            return Ok(());
        }
        let mut unflushed = BTreeMap::new();
        for t in tops.iter().filter(|t| self.unclaimed.contains_key(&t.vdev)) {
            unflushed
                .insert(t.vdev, (t, pool::spacemaps::unflushed_txgs(mos, t).map_err(|e| e.to_string())?));
        }
        pool::spacemaps::for_each_log_entry(mos, &mut |_, _| {}, &mut |e| {
            let bad = |why: String| pool::PoolError::Load {
                phase: "log space maps",
                detail: format!("log space map of txg {}: entry {e:?} {why}", e.txg),
            };
            let (Some((t, txgs)), Some(tree)) = (unflushed.get(&e.vdev), self.unclaimed.get_mut(&e.vdev))
            else {
                return Ok(());
            };
            let ms = e.offset >> t.ms_shift;
            let Some(&ms_txg) = txgs.get(ms as usize) else {
                return Err(bad(format!("is past the vdev's {} metaslabs", txgs.len())));
            };
            if e.txg < ms_txg {
                return Ok(());
            }
            let res = match e.kind {
                ondisk::spacemap::SmType::Alloc => tree.add(e.offset, e.len),
                ondisk::spacemap::SmType::Free => tree.remove(e.offset, e.len),
            };
            res.map_err(|_| bad("contradicts the metaslab's space map".into()))
        })
        .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Claims the space of block `bp` (and of its gang tree).
    fn claim(&mut self, bp: &BlkPtr, depth: u32) {
        if bp.is_hole() || bp.is_embedded() {
            return;
        }
        if bp.dedup() && !self.dedup.insert((bp.dva[0].vdev(), bp.dva[0].offset())) {
            return;
        }
        let mut gang = false;
        for d in bp.dvas() {
            let size = if d.is_gang() {
                gang = true;
                self.gang_asize.get(&d.vdev()).copied().unwrap_or(d.asize())
            } else {
                d.asize()
            };
            self.claim_extent(Extent { vdev: d.vdev(), offset: d.offset(), size }, bp);
        }
        if gang {
            // OpenZFS gang trees are at most a few levels deep; a deeper one is corrupt.
            if depth >= 8 {
                return;
            }
            if let Ok(children) = self.zio.gang_children(bp) {
                for c in children {
                    self.claim(&c, depth + 1);
                }
            }
        }
    }

    fn claim_extent(&mut self, x: Extent, bp: &BlkPtr) {
        let (Some(un), Some(cl)) = (self.unclaimed.get_mut(&x.vdev), self.claimed.get_mut(&x.vdev)) else {
            self.report.referenced_free.push((x, format!("{bp} (no such vdev)")));
            return;
        };
        if x.size == 0 {
            return;
        }
        if un.contains(x.offset, x.size) {
            let _ = un.remove(x.offset, x.size);
            let _ = cl.add(x.offset, x.size);
            self.report.claimed += x.size;
            return;
        }
        // Part of it is not allocated-and-unclaimed: take what is, then sort out the rest.
        let mut pos = x.offset;
        let end = x.offset.saturating_add(x.size);
        let mut gaps = Vec::new();
        for (s, e) in un.overlaps(x.offset, x.size) {
            if s > pos {
                gaps.push((pos, s));
            }
            let _ = un.remove(s, e - s);
            let _ = cl.add(s, e - s);
            self.report.claimed += e - s;
            pos = e;
        }
        if pos < end {
            gaps.push((pos, end));
        }
        for (s, e) in gaps {
            let gap = Extent { vdev: x.vdev, offset: s, size: e - s };
            if cl.intersects(s, e - s) {
                self.report.double_alloc.push((gap, bp.to_string()));
            } else {
                self.report.referenced_free.push((gap, bp.to_string()));
            }
        }
    }

    fn finish(mut self) -> SpaceReport {
        for (&vdev, t) in &self.unclaimed {
            for (s, e) in t.iter() {
                self.report.leaked.push(Extent { vdev, offset: s, size: e - s });
            }
        }
        self.report
    }
}

/// The lines `rzdb -b` prints for a space check, in zdb's words where zdb has them.
pub fn space_lines(r: &SpaceReport) -> String {
    let mut out = String::new();
    for x in r.leaked.iter().take(MAX_SPACE_LINES) {
        out.push_str(&format!("leaked space: vdev {}, offset {:#x}, size {}\n", x.vdev, x.offset, x.size));
    }
    for (x, bp) in r.referenced_free.iter().take(MAX_SPACE_LINES) {
        out.push_str(&format!(
            "referenced but free: vdev {}, offset {:#x}, size {} by {bp}\n",
            x.vdev, x.offset, x.size
        ));
    }
    for (x, bp) in r.double_alloc.iter().take(MAX_SPACE_LINES) {
        out.push_str(&format!(
            "double allocation: vdev {}, offset {:#x}, size {} by {bp}\n",
            x.vdev, x.offset, x.size
        ));
    }
    let more = [r.leaked.len(), r.referenced_free.len(), r.double_alloc.len()];
    if more.iter().any(|&n| n > MAX_SPACE_LINES) {
        out.push_str(&format!(
            "({} leaked, {} referenced-but-free, {} double-allocated extents in all)\n",
            more[0], more[1], more[2]
        ));
    }
    if r.clean() {
        out.push_str("No leaks (block sum matches space maps exactly)\n");
    } else {
        let leaked: u64 = r.leaked.iter().map(|x| x.size).sum();
        let free: u64 = r.referenced_free.iter().map(|(x, _)| x.size).sum();
        out.push_str(&format!(
            "block traversal size {} != alloc {} (leaked {leaked}, referenced but free {free})\n",
            r.claimed + free,
            r.alloc
        ));
    }
    out
}
