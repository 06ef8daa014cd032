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

use dmu::traverse::{traverse_objset, traverse_zil, TraverseOpts, Visit};
use dmu::Objset;
use ondisk::blkptr::BlkPtr;
use ondisk::dmu_types::DmuObjectType;
use ondisk::dsl::DslDatasetPhys;
use pool::Pool;
use std::collections::BTreeMap;

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
}

/// `DMU_OT_DSL_DATASET`: bonus type of dataset objects in the MOS.
const DMU_OT_DSL_DATASET: u8 = 16;
/// The type row zdb uses for blocks of the deferred/free bpobjs.
const DEFERRED: &str = "deferred free";
/// Errors quoted in `notes` (the rest are only counted).
const MAX_ERROR_NOTES: usize = 20;

/// Traverses the whole pool as `zdb -b` does, reading every block when `verify`.
pub fn block_stats(p: &Pool, verify: bool) -> Result<BlockStats, String> {
    let mut st = BlockStats::default();
    let mos = &p.mos;
    let dir = 1; // DMU_POOL_DIRECTORY_OBJECT
    for name in ["sync_bplist", "free_bpobj"] {
        if let Some(obj) = zap::lookup_u64(mos, dir, name).map_err(|e| e.to_string())? {
            count_bpobj(p, &mut st, obj, 0);
        }
    }
    for name in ["bptree_obj", "deleted_clones"] {
        if zap::lookup_u64(mos, dir, name).map_err(|e| e.to_string())?.is_some() {
            st.notes.push(format!("MOS directory '{name}' present: its blocks are not counted"));
        }
    }
    count(&mut st, &mos.bp, None);
    walk(&mut st, mos, 0, verify, "MOS");
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
            Ok(ds) => dataset(p, &mut st, obj, &ds, verify),
            Err(e) => error(&mut st, format!("dataset object {obj}: {e}")),
        }
    }
    Ok(st)
}

/// One dataset: its intent log (heads only), then its blocks born after `prev_snap_txg`.
fn dataset(p: &Pool, st: &mut BlockStats, obj: u64, ds: &DslDatasetPhys, verify: bool) {
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
                count(st, &bp, None);
            }
            return error(st, format!("dataset {obj}: objset {bp}: {e}"));
        }
    };
    if !ds.is_snapshot() {
        let ub = &p.uberblock;
        let min_claim_txg = if ub.checkpoint_txg != 0 { ub.checkpoint_txg + 1 } else { ub.txg + 1 };
        let mut v = |x: &Visit| {
            count(st, x.bp, None);
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
    count(st, &bp, None);
    walk(st, &os, ds.prev_snap_txg, verify, &format!("dataset {obj}"));
}

/// Counts every block of `os` born after `min_birth`.
fn walk(st: &mut BlockStats, os: &Objset, min_birth: u64, verify: bool, what: &str) {
    let opts = TraverseOpts { min_birth, read_data: verify };
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
        count(st, bp, None);
    }
    for e in errors.into_inner() {
        error(st, e);
    }
    if let Err(e) = res {
        error(st, format!("{what}: traversal stopped: {e}"));
    }
}

/// Counts the block pointers of bpobj `obj` and of its sub-bpobjs (`bpobj_iterate_nofree`).
fn count_bpobj(p: &Pool, st: &mut BlockStats, obj: u64, depth: u32) {
    if depth > 16 {
        return error(st, format!("bpobj {obj}: sub-bpobjs nested too deep"));
    }
    let res = (|| -> Result<(Vec<BlkPtr>, Vec<u64>), String> {
        let mos = &p.mos;
        let dn = mos.dnode(obj).map_err(|e| e.to_string())?;
        let order = mos.dnode_byte_order();
        let hdr = ondisk::bpobj::BpobjPhys::parse(&dn.bonus, order).map_err(|e| e.to_string())?;
        let n = hdr.num_blkptrs;
        let raw = mos.read_all(&dn, Some(n.saturating_mul(128))).map_err(|e| e.to_string())?;
        let bps = raw
            .chunks_exact(128)
            .map(|c| BlkPtr::parse(c, order).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut subs = Vec::new();
        if hdr.subobjs != 0 && hdr.num_subobjs != 0 {
            let sdn = mos.dnode(hdr.subobjs).map_err(|e| e.to_string())?;
            let raw =
                mos.read_all(&sdn, Some(hdr.num_subobjs.saturating_mul(8))).map_err(|e| e.to_string())?;
            for c in raw.chunks_exact(8) {
                subs.push(order.u64_at(c, 0, "bpobj subobj").map_err(|e| e.to_string())?);
            }
        }
        Ok((bps, subs))
    })();
    match res {
        Ok((bps, subs)) => {
            // Entries are blocks already freed: counted (they still hold space until the
            // free is processed) but never read — their contents are dead and OpenZFS
            // stores them with the checksum zeroed (bpobj_enqueue), as zdb knows.
            for bp in bps.iter().filter(|b| !b.is_hole()) {
                count(st, bp, Some(DEFERRED));
            }
            for s in subs {
                count_bpobj(p, st, s, depth + 1);
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
fn count(st: &mut BlockStats, bp: &BlkPtr, type_name: Option<&str>) {
    if bp.is_hole() || bp.is_redacted() {
        return;
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
