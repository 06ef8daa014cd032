//! # Dirty objsets and their sync (the write side of the DMU)
//!
//! Theory. A [`DirtyObjset`] is the open transaction group's view of one objset: the
//! committed tree (an [`Objset`], or nothing for a new objset) plus, per modified object, a
//! [`DirtyDnode`]: the dnode as it will be, its dirty level-0 blocks (whole blocks, already
//! merged with the committed contents) and the block ranges to free. Reads go through the
//! overlay, so a writer sees its own writes before they are synced.
//!
//! Until sync, a dirty dnode's block pointers are those of the committed tree: the overlay
//! never edits pointers. [`DirtyObjset::sync`] then writes copy-on-write, bottom-up:
//!
//! 1. level-0 blocks of every dirty object (compress + checksum + allocate + write, in
//!    parallel), turning freed ranges into holes;
//! 2. indirect blocks, level by level, each rebuilt from its committed version with the
//!    changed children patched in (a tree that must grow gains levels above the old top);
//! 3. the dnode blocks holding every dirty dnode (the meta-dnode's level 0), then its
//!    indirect blocks, the same way;
//! 4. the objset block; its pointer is returned to the caller (the dataset or uberblock).
//!
//! Every block replaced is handed to [`BlockSink::kill`] (the DSL decides between freeing
//! and the deadlist); every block written to [`BlockSink::born`]. A block born in the txg
//! being synced is rewritten *in place* when the new version fits its slot (a later sync
//! pass of the MOS): no allocation, no free, so the space maps converge (OpenZFS
//! `zio_write_bp_init`'s rewrite rule). Fill counts follow OpenZFS: 1 per data block, the
//! number of allocated dnodes per dnode block, the sum of the children for indirects.
//! `dn_used` counts deflated allocated bytes (`bp_get_dsize`) with `DNODE_FLAG_USED_BYTES`.

use crate::useracct::{self, Accounting, UsedDeltas};
use crate::{DmuError, Objset, Reader, Result};
use ondisk::blkptr::{BlkPtr, BLKPTR_SIZE};
use ondisk::dmu_types::DmuObjectType;
use ondisk::dnode::{
    DnodePhys, DNODE_BLOCK_SHIFT, DNODE_CORE_SIZE, DNODE_FLAG_USED_BYTES, DNODE_MAX_SLOTS, DNODE_SLOT_SIZE,
};
use ondisk::objset::{
    ObjsetPhys, DMU_OST_ZFS, OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USERACCOUNTING_COMPLETE,
    OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE, OBJSET_PHYS_SIZE_V2, OBJSET_PHYS_SIZE_V3,
};
use ondisk::ByteOrder;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use zio::{Allocate, Prepared, WriteProps, Zio, BPE_PAYLOAD_SIZE};

/// Indirect blocks are 128 KiB (`DN_MAX_INDBLKSHIFT`), as OpenZFS creates them.
pub const INDBLKSHIFT: u8 = 17;
/// Size of a dnode's bonus area with one block pointer in a 512-byte dnode.
pub const DN_MAX_BONUSLEN_512: usize = 320;

/// The bonus room of a dnode of `slots` slots with one block pointer and room for a spill
/// pointer (`DN_SLOTS_TO_BONUSLEN`): 320 bytes for 512-byte dnodes, 832 for 1 KiB ...
pub fn bonus_len_for_slots(slots: usize) -> usize {
    slots * DNODE_SLOT_SIZE - DNODE_CORE_SIZE - BLKPTR_SIZE
}
/// Largest object number we hand out (object numbers fit 48 bits in OpenZFS).
pub const OBJECT_LIMIT: u64 = 1 << 48;

/// Where new and dead blocks are reported during a sync.
pub trait BlockSink {
    /// A block was written (counted by the objset's owner).
    fn born(&mut self, bp: &BlkPtr);
    /// A block of the committed tree is no longer referenced by this objset.
    fn kill(&mut self, bp: &BlkPtr) -> Result<()>;
    /// A dnode of more than one slot was written: the dataset's `large_dnode` feature
    /// becomes active (`dnode_sync`). The MOS has none.
    fn large_dnode(&mut self) {
        self.activate("large_dnode");
    }
    /// The dataset's per-dataset feature `name` (short name) becomes active.
    fn activate(&mut self, name: &'static str) {
        let _ = name;
    }
}

/// How blocks of an object are written: the owner of the objset resolves properties.
pub trait WritePolicy: Sync {
    /// Properties for a block of `dn` at `level` (level > 0 and dnode/objset blocks are
    /// metadata).
    fn props(&self, dn: &DnodePhys, level: u8) -> WriteProps;
}

/// Everything a sync needs from the pool.
pub struct SyncCtx<'a> {
    pub zio: &'a Zio,
    pub alloc: &'a dyn Allocate,
    pub txg: u64,
    /// Smallest sector of the pool (1 << min ashift).
    pub sector: u64,
    pub policy: &'a dyn WritePolicy,
    /// Deflated size of a DVA (`vdev_deflated_space`), for `dn_used`.
    pub dsize: &'a (dyn Fn(&ondisk::blkptr::Dva) -> u64 + Sync),
    /// The pool's `hole_birth` feature is active: holes written now keep their birth
    /// ([`BlkPtr::hole_born`]), which incremental sends (OpenZFS's and ours) rely on to
    /// send the frees of ranges that existed in the earlier snapshot.
    pub hole_birth: bool,
    /// User/group/project accounting of ZPL objsets (see [`crate::useracct`]); None where
    /// the owner keeps none (tests, the MOS).
    pub accounting: Option<&'a Accounting<'a>>,
}

impl SyncCtx<'_> {
    /// The pointer of a hole written in this txg in place of a block of `lsize` bytes.
    fn hole(&self, lsize: u64, object_type: u8, level: u8) -> BlkPtr {
        if self.hole_birth {
            BlkPtr::hole_born(lsize, object_type, level, self.txg)
        } else {
            BlkPtr::default()
        }
    }

    fn bp_dsize(&self, bp: &BlkPtr) -> u64 {
        if bp.is_hole() || bp.is_embedded() {
            return 0;
        }
        bp.dvas().iter().map(|d| (self.dsize)(d)).sum()
    }
}

/// A dirty level-0 block. Shared so that saving the open txg before a sync
/// ([`DirtyObjset::checkpoint`]) copies pointers, not data; a write to a shared block copies
/// it first (`Arc::make_mut`).
pub type DirtyBlock = Arc<Vec<u8>>;

/// What syncing the open txg of one objset may write, in logical (uncompressed) units. The
/// pool turns it into a worst-case allocation (sector padding, parity, copies) and reserves
/// that much free space before it accepts a change (OpenZFS counts the same things in
/// `dmu_tx_count_write`/`dmu_tx_count_dnode` to reserve space for a transaction).
///
/// Data counts are exact (they follow every insert and removal of a dirty block); metadata
/// counts only grow within a txg, so they over-estimate after frees, never under-estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxgCost {
    /// Dirty level-0 blocks and their bytes: written with the dataset's copies.
    pub data_blocks: u64,
    pub data_bytes: u64,
    /// Metadata the sync may write: the indirect blocks above dirty level-0 blocks and
    /// freed ranges, the dnode blocks holding dirty dnodes, the meta-dnode's indirect blocks
    /// and the objset block. Metadata gets one more copy than data.
    pub meta_blocks: u64,
    pub meta_bytes: u64,
}

impl TxgCost {
    /// Adds another objset's cost.
    pub fn add(&mut self, o: &TxgCost) {
        self.data_blocks += o.data_blocks;
        self.data_bytes += o.data_bytes;
        self.meta_blocks += o.meta_blocks;
        self.meta_bytes += o.meta_bytes;
    }

    fn meta(&mut self, blocks: u64, block_bytes: u64) {
        self.meta_blocks += blocks;
        self.meta_bytes += blocks * block_bytes;
    }
}

/// How many of the indirect blocks above level-0 block `blkid` would be newly dirtied by
/// dirtying it, given `present(lo, hi)`: whether a dirty level-0 block already lies in
/// `[lo, hi)`. The parents at level `l` cover `2^(epbs*l)` level-0 blocks; a tree of
/// `levels` levels has indirect blocks at levels 1 to `levels - 1` (the top pointers live in
/// the dnode). Once a parent is already dirty, so are all above it.
fn new_parents(present: impl Fn(u64, u64) -> bool, blkid: u64, epbs: u32, levels: u32) -> u64 {
    let mut n = 0;
    for l in 1..levels {
        let Some(span) = 1u64.checked_shl(epbs * l).filter(|_| epbs * l < 64) else { break };
        let lo = blkid & !(span - 1);
        if present(lo, lo.saturating_add(span)) {
            break;
        }
        n += 1;
    }
    n
}

/// Levels a tree needs so that `nblkptr` top pointers cover block `maxblkid`.
fn levels_for(maxblkid: u64, nblkptr: u8, epbs: u32) -> u32 {
    let mut levels = 1u32;
    while levels < 16 {
        match u64::from(nblkptr.max(1)).checked_shl(epbs * (levels - 1)).filter(|_| epbs * (levels - 1) < 64)
        {
            Some(c) if c > maxblkid => break,
            None => break,
            _ => levels += 1,
        }
    }
    levels
}

/// One modified object of the open txg.
#[derive(Clone, Debug, Default)]
pub struct DirtyDnode {
    /// The dnode as it will be synced; its block pointers are still the committed ones.
    pub phys: DnodePhys,
    /// Whole dirty level-0 blocks.
    pub blocks: BTreeMap<u64, DirtyBlock>,
    /// Level-0 block ranges `[start, end)` that become holes.
    pub frees: Vec<(u64, u64)>,
    /// Dirty blocks whose on-disk form came with them ([`RawBlock`]), by block id.
    raw: BTreeMap<u64, RawBlock>,
    /// The object was freed in this txg (its whole committed tree dies at sync).
    pub freed: bool,
    /// The object was started over in this txg under the same number
    /// ([`DirtyObjset::reclaim_object`]): its committed tree dies at sync and `phys` is
    /// written as a new object's.
    pub reclaimed: bool,
    /// The committed dnode (None for an object new in this txg).
    committed: Option<DnodePhys>,
}

impl DirtyDnode {
    fn is_freed_block(&self, blkid: u64) -> bool {
        self.frees.iter().any(|&(s, e)| blkid >= s && blkid < e)
    }
}

/// A dirty level-0 block whose on-disk bytes are already known: a block received
/// compressed (a WRITE record of a `send -c` stream) or as an embedded pointer's payload
/// (WRITE_EMBEDDED). It is written as it came, with the sender's compression, as OpenZFS's
/// receive does (`receive_write` hands the DMU a compressed ARC buffer, and
/// `receive_write_embedded` an embedded pointer), so a received dataset takes the space
/// its source took whatever its own `compression`.
///
/// It stands only while the block's data is the very `Arc` it was made with: the record
/// shares it, so any later change to the block copies the data first (`Arc::make_mut`) and
/// the sync then compresses the new data by the dataset's properties.
#[derive(Clone, Debug)]
struct RawBlock {
    logical: DirtyBlock,
    /// ZIO compression of `phys`.
    compress: u8,
    /// The compressed bytes (`psize` long; a multiple of 512 unless embedded).
    phys: Arc<Vec<u8>>,
    /// `phys` goes inside the block pointer (at most 112 bytes).
    embedded: bool,
}

/// The open txg's view of one objset.
pub struct DirtyObjset {
    reader: Reader,
    /// Committed state (None until the first sync of a new objset).
    base: Option<Objset>,
    /// The objset header as it will be written (meta-dnode pointers committed).
    pub phys: ObjsetPhys,
    dnodes: BTreeMap<u64, Arc<DirtyDnode>>,
    /// Objects freed in this txg: not reused before the next one.
    freed_now: BTreeSet<u64>,
    next_object: u64,
    order: ByteOrder,
    /// Slots of the dnodes [`DirtyObjset::alloc_object_dnsize`] callers ask for by default:
    /// the objset's `dnodesize` (1 = legacy 512 bytes; `os_dnodesize`).
    dnode_slots: u8,
    /// What syncing this objset may write; `cost.data_bytes` is the bytes of the dirty
    /// level-0 blocks in `dnodes`, kept up to date by every insert and removal: the write
    /// throttle asks after every operation, and summing the map each time made the work of
    /// one txg quadratic in the number of files it creates.
    cost: TxgCost,
    /// Bytes of [`RawBlock`] payloads added in this txg (memory on top of `cost`; not
    /// decreased when a raw form is dropped before the sync: an over-estimate).
    raw_bytes: u64,
    /// A sync is updating the accounting objects: only then may they be dirtied (a
    /// receive naming object -1 must not reach them).
    accounting_open: bool,
    /// The objset header changed without any object (the ZIL header moved): the next sync
    /// rewrites the objset block.
    header_dirty: bool,
}

/// The open txg of one objset as it was before a sync began ([`DirtyObjset::checkpoint`]):
/// restoring it undoes everything the sync did to the objset in memory. Blocks and dnodes
/// are shared, not copied.
#[derive(Clone)]
pub struct OsCheckpoint {
    base: Option<Objset>,
    phys: ObjsetPhys,
    dnodes: BTreeMap<u64, Arc<DirtyDnode>>,
    freed_now: BTreeSet<u64>,
    next_object: u64,
    cost: TxgCost,
    raw_bytes: u64,
    header_dirty: bool,
}

/// What one dirty object costs in memory besides its blocks, as the throttle counts it: a
/// rough estimate of the in-memory dnode (512-byte phys with its bonus and block pointers
/// unpacked) and its map entries. Without it, a txg creating many small files grew far past
/// the dirty limit (the 225,000-file populate run in bench/ peaked near 400 MiB).
pub const DIRTY_DNODE_COST: u64 = 1024;

/// Total length of a set of dirty blocks.
fn blocks_len<'a>(blocks: impl IntoIterator<Item = &'a DirtyBlock>) -> u64 {
    blocks.into_iter().map(|b| b.len() as u64).sum()
}

fn corrupt(what: &'static str, detail: impl Into<String>) -> DmuError {
    DmuError::Corrupt { what, detail: detail.into() }
}

/// The dnode of a new object of `slots` slots: as many block pointers as the bonus leaves
/// room for, up to three, one for SA bonuses (`dnode_allocate`).
fn fresh_dnode(
    object_type: u8,
    block_size: u64,
    bonus_type: u8,
    bonus: Vec<u8>,
    slots: usize,
) -> Result<DnodePhys> {
    if !(1..=DNODE_MAX_SLOTS).contains(&slots) {
        return Err(corrupt("dnode", format!("{slots} slots")));
    }
    let room = bonus_len_for_slots(slots);
    if bonus.len() > room {
        return Err(corrupt("dnode", format!("bonus of {} bytes does not fit", bonus.len())));
    }
    check_block_size(block_size)?;
    // SA bonuses keep a single block pointer: the rest of the dnode is bonus.
    let nblkptr = if bonus_type == DmuObjectType::Sa.to_u8() {
        1
    } else {
        1 + ((room - bonus.len()) / BLKPTR_SIZE).min(2)
    };
    Ok(DnodePhys {
        extra_slots: (slots - 1) as u8,
        object_type,
        indblkshift: INDBLKSHIFT,
        nlevels: 1,
        nblkptr: nblkptr as u8,
        bonustype: bonus_type,
        datablkszsec: (block_size >> 9) as u16,
        bonuslen: bonus.len() as u16,
        flags: DNODE_FLAG_USED_BYTES,
        blkptr: vec![BlkPtr::default(); nblkptr],
        bonus,
        ..Default::default()
    })
}

/// A fresh meta-dnode (16 KiB dnode blocks, 128 KiB indirects, three pointers).
pub fn new_meta_dnode() -> DnodePhys {
    DnodePhys {
        object_type: DmuObjectType::Dnode.to_u8(),
        indblkshift: INDBLKSHIFT,
        nlevels: 1,
        nblkptr: 3,
        datablkszsec: (1u16 << DNODE_BLOCK_SHIFT) >> 9,
        flags: DNODE_FLAG_USED_BYTES,
        blkptr: vec![BlkPtr::default(); 3],
        ..Default::default()
    }
}

impl DirtyObjset {
    /// A brand-new, empty objset of type `os_type`.
    pub fn create(reader: &Reader, os_type: u64) -> DirtyObjset {
        let phys = ObjsetPhys { meta_dnode: new_meta_dnode(), os_type, ..Default::default() };
        DirtyObjset {
            reader: reader.clone(),
            base: None,
            phys,
            dnodes: BTreeMap::new(),
            freed_now: BTreeSet::new(),
            next_object: 1,
            order: ByteOrder::Little,
            dnode_slots: 1,
            cost: TxgCost::default(),
            raw_bytes: 0,
            accounting_open: false,
            header_dirty: false,
        }
    }

    /// Reads of this objset keep blocks in the cache by `keep` (`primarycache`).
    pub fn set_cache_policy(&mut self, keep: crate::CachePolicy) {
        self.reader.keep = keep;
        if let Some(b) = self.base.as_mut() {
            b.reader.keep = keep;
        }
    }

    /// Reads of this objset offer blocks to the second-level cache by `keep`
    /// (`secondarycache`).
    pub fn set_l2_policy(&mut self, keep: crate::CachePolicy) {
        self.reader.keep_l2 = keep;
        if let Some(b) = self.base.as_mut() {
            b.reader.keep_l2 = keep;
        }
    }

    /// Opens the committed objset for writing.
    pub fn open(reader: &Reader, bp: &BlkPtr) -> Result<DirtyObjset> {
        let os = Objset::open(reader, bp)?;
        let order = os.dnode_byte_order();
        if order != ByteOrder::Little {
            return Err(corrupt("objset", "writing big-endian objsets is not supported"));
        }
        let phys = (*os.phys).clone();
        Ok(DirtyObjset {
            reader: reader.clone(),
            base: Some(os),
            phys,
            dnodes: BTreeMap::new(),
            freed_now: BTreeSet::new(),
            next_object: 1,
            order,
            dnode_slots: 1,
            cost: TxgCost::default(),
            raw_bytes: 0,
            accounting_open: false,
            header_dirty: false,
        })
    }

    /// The committed objset (None before the first sync of a new objset).
    pub fn committed(&self) -> Option<&Objset> {
        self.base.as_ref()
    }

    /// Memory the open txg holds (the write throttle's measure): the dirty level-0 blocks,
    /// plus [`DIRTY_DNODE_COST`] per dirty object, so that a txg of many small files or
    /// directory entries is bounded too, not only one of big writes.
    pub fn dirty_bytes(&self) -> u64 {
        debug_assert_eq!(
            self.cost.data_bytes,
            self.dnodes.values().map(|d| blocks_len(d.blocks.values())).sum::<u64>()
        );
        debug_assert_eq!(
            self.cost.data_blocks,
            self.dnodes.values().map(|d| d.blocks.len() as u64).sum::<u64>()
        );
        self.cost.data_bytes + self.raw_bytes + self.dnodes.len() as u64 * DIRTY_DNODE_COST
    }

    /// What syncing this objset's open txg may write (see [`TxgCost`]).
    pub fn cost(&self) -> TxgCost {
        self.cost
    }

    /// Saves the open txg's state before a sync (cheap: dnodes and blocks are shared).
    pub fn checkpoint(&self) -> OsCheckpoint {
        OsCheckpoint {
            base: self.base.clone(),
            phys: self.phys.clone(),
            dnodes: self.dnodes.clone(),
            freed_now: self.freed_now.clone(),
            next_object: self.next_object,
            cost: self.cost,
            raw_bytes: self.raw_bytes,
            header_dirty: self.header_dirty,
        }
    }

    /// Puts back the state saved by [`DirtyObjset::checkpoint`]: the sync that followed it
    /// failed, and everything it changed in memory is undone (what it wrote to disk lies in
    /// space the allocator gives back, referenced by no uberblock).
    pub fn restore(&mut self, c: OsCheckpoint) {
        self.base = c.base;
        self.phys = c.phys;
        self.dnodes = c.dnodes;
        self.freed_now = c.freed_now;
        self.next_object = c.next_object;
        self.cost = c.cost;
        self.raw_bytes = c.raw_bytes;
        self.header_dirty = c.header_dirty;
    }

    /// Sets the ZIL header the next sync writes into the objset block.
    pub fn set_zil_header(&mut self, zh: ondisk::objset::ZilHeaderPhys) {
        if self.phys.zil != zh {
            self.phys.zil = zh;
            self.header_dirty = true;
        }
    }

    /// The ZIL header as the open txg has it.
    pub fn zil_header(&self) -> &ondisk::objset::ZilHeaderPhys {
        &self.phys.zil
    }

    /// Charges the metadata that dirtying `object` (not dirty yet) makes the sync write: its
    /// dnode block, the meta-dnode's indirect blocks above it, and the objset block for the
    /// first dirty object.
    fn charge_new_dnode(&mut self, object: u64) {
        if useracct::is_accounting_object(object) {
            return;
        }
        let meta = &self.phys.meta_dnode;
        let bs = meta.data_block_size().max(DNODE_SLOT_SIZE as u64);
        let per_block = bs / DNODE_SLOT_SIZE as u64;
        if self.dnodes.is_empty() {
            self.cost.meta(1, OBJSET_PHYS_SIZE_V2 as u64);
        }
        let blk = object / per_block;
        let dirty = &self.dnodes;
        let present = |lo: u64, hi: u64| {
            dirty.range(lo.saturating_mul(per_block)..hi.saturating_mul(per_block)).next().is_some()
        };
        if !present(blk, blk + 1) {
            self.cost.meta(1, bs);
            let epbs = u32::from(meta.indblkshift.max(8)) - 7;
            let levels = levels_for(meta.maxblkid.max(blk), meta.nblkptr, epbs);
            let n = new_parents(present, blk, epbs, levels);
            self.cost.meta(n, 1u64 << meta.indblkshift.max(8));
        }
    }

    /// Objects with pending changes (for diagnostics).
    pub fn dirty_objects(&self) -> Vec<u64> {
        self.dnodes.keys().copied().collect()
    }

    /// Does the open txg free blocks or objects of the committed tree?
    pub fn has_frees(&self) -> bool {
        self.dnodes
            .values()
            .any(|d| ((d.freed || d.reclaimed) && d.committed.is_some()) || !d.frees.is_empty())
    }

    /// Is anything waiting to be synced?
    pub fn is_dirty(&self) -> bool {
        !self.dnodes.is_empty() || self.header_dirty
    }

    /// The dnode of `object` as the open txg sees it (None if free).
    pub fn dnode(&self, object: u64) -> Result<Option<DnodePhys>> {
        if let Some(d) = self.dnodes.get(&object) {
            return Ok((!d.freed && !d.phys.is_free()).then(|| d.phys.clone()));
        }
        self.committed_dnode(object)
    }

    fn committed_dnode(&self, object: u64) -> Result<Option<DnodePhys>> {
        let Some(base) = &self.base else { return Ok(None) };
        if useracct::is_accounting_object(object) {
            return Ok(useracct::accounting_dnode(&base.phys, object).filter(|d| !d.is_free()).cloned());
        }
        match base.dnode(object) {
            Ok(d) => Ok(Some(d.phys)),
            Err(DmuError::NoSuchObject(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The first level-0 block of object `obj` at or after `start` that holds data (`data`)
    /// or is a hole (`!data`) as the open txg sees it: blocks written in it are data, blocks
    /// freed in it holes, the rest as the committed tree has them ([`Objset::next_l0`]). A
    /// hole is found past the last block; None when no data lies at or after `start`.
    pub fn next_l0(&self, obj: u64, start: u64, data: bool) -> Result<Option<u64>> {
        let dn = self.dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
        let d = self.dnodes.get(&obj);
        // The committed tree counts unless the object is new, freed or started over here.
        let base = match (&self.base, d) {
            (Some(b), Some(d)) if !(d.freed || d.reclaimed || d.committed.is_none()) => Some(b),
            (Some(b), None) => Some(b),
            _ => None,
        };
        let cdn = d.and_then(|d| d.committed.clone()).unwrap_or(dn);
        let written = |b: u64| d.is_some_and(|d| d.blocks.contains_key(&b) || d.raw.contains_key(&b));
        let freed_until = |b: u64| -> Option<u64> {
            d.and_then(|d| d.frees.iter().filter(|&&(s, e)| b >= s && b < e).map(|&(_, e)| e).max())
        };
        if data {
            let first_written = d.and_then(|d| {
                let a = d.blocks.range(start..).next().map(|(k, _)| *k);
                let r = d.raw.range(start..).next().map(|(k, _)| *k);
                a.into_iter().chain(r).min()
            });
            let Some(base) = base else { return Ok(first_written) };
            let mut b = start;
            loop {
                let found = base.next_l0(&cdn, b, true)?;
                match found {
                    // A committed block freed in this txg is no data: look past its range.
                    Some(x) if first_written.is_none_or(|w| x < w) => match freed_until(x) {
                        Some(end) => b = end,
                        None => return Ok(Some(x)),
                    },
                    _ => return Ok(first_written.into_iter().chain(found).min()),
                }
            }
        }
        let mut b = start;
        loop {
            while written(b) {
                b = b.checked_add(1).ok_or_else(|| corrupt("dnode", "block ids beyond 2^64"))?;
            }
            let Some(base) = base else { return Ok(Some(b)) };
            if freed_until(b).is_some() {
                return Ok(Some(b));
            }
            let hole = base.next_l0(&cdn, b, false)?.unwrap_or(u64::MAX);
            // A range freed in this txg may start before the committed tree's next hole.
            let freed = d
                .into_iter()
                .flat_map(|d| d.frees.iter())
                .filter(|&&(s, e)| e > b && s.max(b) < hole)
                .map(|&(s, _)| s.max(b))
                .min();
            let cand = freed.map_or(hole, |f| f.min(hole));
            if !written(cand) {
                return Ok(Some(cand));
            }
            b = cand;
        }
    }

    /// The dirty record of an existing object, created on first modification.
    pub fn dirty(&mut self, object: u64) -> Result<&mut DirtyDnode> {
        if useracct::is_accounting_object(object) && !self.accounting_open {
            return Err(DmuError::NoSuchObject(object));
        }
        if !self.dnodes.contains_key(&object) {
            let phys = self.committed_dnode(object)?.ok_or(DmuError::NoSuchObject(object))?;
            let d = DirtyDnode { phys: phys.clone(), committed: Some(phys), ..Default::default() };
            self.charge_new_dnode(object);
            self.dnodes.insert(object, Arc::new(d));
        }
        let d = self.dnodes.get_mut(&object).map(Arc::make_mut).ok_or(DmuError::NoSuchObject(object))?;
        if d.freed || d.phys.is_free() {
            return Err(DmuError::NoSuchObject(object));
        }
        Ok(d)
    }

    /// The objset's default dnode size in slots (`dnodesize`; 1 is 512 bytes).
    pub fn dnode_slots(&self) -> u8 {
        self.dnode_slots
    }

    /// Sets the default dnode size (the dataset's `dnodesize`: 1 for legacy, 2 for auto).
    pub fn set_dnode_slots(&mut self, slots: u8) {
        self.dnode_slots = slots.clamp(1, DNODE_MAX_SLOTS as u8);
    }

    /// Dnode slots per block of the meta-dnode (32 with its 16 KiB blocks).
    fn slots_per_block(&self) -> u64 {
        (self.phys.meta_dnode.data_block_size() / DNODE_SLOT_SIZE as u64).max(1)
    }

    /// The dirty, live dnode whose slots cover `slot` (it may start there), if any.
    fn dirty_owner(&self, slot: u64) -> Option<u64> {
        let lo = slot.saturating_sub(DNODE_MAX_SLOTS as u64 - 1);
        self.dnodes
            .range(lo..=slot)
            .rev()
            .find(|(&o, d)| !d.freed && !d.phys.is_free() && slot < o + d.phys.slots() as u64)
            .map(|(&o, _)| o)
    }

    /// Can `slot` become part of a new dnode (as its first slot when `first`)? Not when a
    /// live dirty dnode covers it, nor when the committed dnode covering it is still there
    /// in the open txg. A first slot must also not be an object freed in this txg (its number
    /// is not reused before the next); a later slot may be: its old dnode is zeroed at sync
    /// before the new one is written over it. `owner` is an object whose own slots may be
    /// taken (an object being started over with another size).
    fn slot_available(&self, slot: u64, first: bool, owner: Option<u64>) -> Result<bool> {
        if first && self.freed_now.contains(&slot) {
            return Ok(false);
        }
        if let Some(o) = self.dirty_owner(slot) {
            return Ok(Some(o) == owner);
        }
        let Some(base) = &self.base else { return Ok(true) };
        let committed = match base.slot(slot)? {
            crate::Slot::Free => return Ok(true),
            crate::Slot::Start(_) => slot,
            crate::Slot::Interior(o) => o,
        };
        // Still committed: only if nothing in the open txg freed, started over or resized it
        // (a dirty record that does not cover `slot` any more is one of those).
        Ok(Some(committed) == owner || self.dnodes.contains_key(&committed))
    }

    /// Are slots `obj .. obj + slots` free for a new dnode, within one dnode block?
    fn slots_available(&self, obj: u64, slots: usize, owner: Option<u64>) -> Result<bool> {
        let per_block = self.slots_per_block();
        if obj % per_block + slots as u64 > per_block {
            return Ok(false);
        }
        for (i, s) in (obj..obj + slots as u64).enumerate() {
            if !self.slot_available(s, i == 0 && owner != Some(s), owner)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Allocates a new object (512-byte dnode) and returns its number.
    pub fn alloc_object(
        &mut self,
        object_type: u8,
        block_size: u64,
        bonus_type: u8,
        bonus: Vec<u8>,
    ) -> Result<u64> {
        self.alloc_object_dnsize(object_type, block_size, bonus_type, bonus, 1)
    }

    /// Allocates a new object whose dnode takes `slots` slots (`dmu_object_alloc_dnsize`): the
    /// first run of free slots, from the allocation cursor on, that does not cross a dnode
    /// block.
    pub fn alloc_object_dnsize(
        &mut self,
        object_type: u8,
        block_size: u64,
        bonus_type: u8,
        bonus: Vec<u8>,
        slots: u8,
    ) -> Result<u64> {
        let slots = usize::from(slots.max(1));
        let mut obj = self.next_object.max(1);
        while !self.slots_available(obj, slots, None)? {
            obj += 1;
            if obj >= OBJECT_LIMIT {
                return Err(corrupt("objset", "no free object numbers"));
            }
        }
        self.next_object = obj + slots as u64;
        self.claim_object_dnsize(obj, object_type, block_size, bonus_type, bonus, slots as u8)?;
        Ok(obj)
    }

    /// Creates object `obj` at a fixed number (the MOS object directory is object 1).
    pub fn claim_object(
        &mut self,
        obj: u64,
        object_type: u8,
        block_size: u64,
        bonus_type: u8,
        bonus: Vec<u8>,
    ) -> Result<()> {
        self.claim_object_dnsize(obj, object_type, block_size, bonus_type, bonus, 1)
    }

    /// Creates object `obj` with a dnode of `slots` slots at a fixed number (a receive).
    pub fn claim_object_dnsize(
        &mut self,
        obj: u64,
        object_type: u8,
        block_size: u64,
        bonus_type: u8,
        bonus: Vec<u8>,
        slots: u8,
    ) -> Result<()> {
        let slots = usize::from(slots.max(1));
        if obj == 0 || !self.slots_available(obj, slots, None)? {
            return Err(corrupt("objset", format!("object {obj} is in use")));
        }
        let phys = fresh_dnode(object_type, block_size, bonus_type, bonus, slots)?;
        let old = self.take_dirty(obj);
        if old.is_none() {
            self.charge_new_dnode(obj);
        }
        let committed = old.and_then(|d| d.committed.clone());
        self.dnodes.insert(obj, Arc::new(DirtyDnode { phys, committed, ..Default::default() }));
        Ok(())
    }

    /// Creates accounting object `obj` (an empty dnode of type `DMU_OT_USERGROUP_USED` in
    /// the objset header) while a sync updates the accounting ([`Accounting::apply`]);
    /// OpenZFS's `zap_create_claim` of object -1, -2 or -3.
    pub fn claim_accounting(&mut self, obj: u64) -> Result<()> {
        if !self.accounting_open || !useracct::is_accounting_object(obj) || self.dnode(obj)?.is_some() {
            return Err(corrupt("objset", format!("accounting object {obj:#x} cannot be created now")));
        }
        let ot = DmuObjectType::UsergroupUsed.to_u8();
        let phys = fresh_dnode(ot, 512, 0, Vec::new(), 1)?;
        let committed = self.committed_dnode(obj)?;
        self.dnodes.insert(obj, Arc::new(DirtyDnode { phys, committed, ..Default::default() }));
        Ok(())
    }

    /// The live objects whose dnodes start in slots `obj + 1 .. obj + slots`: what must be
    /// freed before `obj` can grow to `slots` slots (a receive frees them,
    /// `receive_object`).
    pub fn objects_in_slots(&self, obj: u64, slots: u8) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for s in obj + 1..obj + u64::from(slots.max(1)) {
            if self.dnode(s)?.is_some() {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Takes object `obj`'s dirty record out of the open txg (its dirty blocks leave the
    /// txg's cost).
    fn take_dirty(&mut self, obj: u64) -> Option<Arc<DirtyDnode>> {
        let old = self.dnodes.remove(&obj);
        if let Some(d) = &old {
            self.cost.data_bytes -= blocks_len(d.blocks.values());
            self.cost.data_blocks -= d.blocks.len() as u64;
        }
        old
    }

    /// Starts existing object `obj` over as a new object of another type, block size, bonus
    /// or dnode size (`slots`; OpenZFS `dmu_object_reclaim_dnsize`, what a receive does when
    /// the sender reused an object number): everything it held dies at sync, the number
    /// stays allocated. Slots the object did not have before must be free (see
    /// [`DirtyObjset::objects_in_slots`]).
    pub fn reclaim_object(
        &mut self,
        obj: u64,
        object_type: u8,
        block_size: u64,
        bonus_type: u8,
        bonus: Vec<u8>,
        slots: u8,
    ) -> Result<()> {
        if self.dnode(obj)?.is_none() {
            return Err(DmuError::NoSuchObject(obj));
        }
        let slots = usize::from(slots.max(1));
        if !self.slots_available(obj, slots, Some(obj))? {
            return Err(corrupt(
                "objset",
                format!("object {obj} cannot grow to {slots} slots: they are in use"),
            ));
        }
        let phys = fresh_dnode(object_type, block_size, bonus_type, bonus, slots)?;
        let committed = match self.take_dirty(obj) {
            Some(d) => d.committed.clone(),
            None => {
                self.charge_new_dnode(obj);
                self.committed_dnode(obj)?
            }
        };
        let reclaimed = committed.is_some();
        self.dnodes.insert(obj, Arc::new(DirtyDnode { phys, committed, reclaimed, ..Default::default() }));
        Ok(())
    }

    /// Reads every indirect block of `obj`'s committed tree that covers level-0 blocks
    /// `[s, e)`: the blocks the sync's free of that range walks. An unreadable one fails the
    /// free now, in open context, with the read's error (EIO/checksum to the caller), as
    /// OpenZFS's `dmu_tx_hold_free` reads them before the free is accepted — instead of
    /// failing the txg sync, which would suspend the pool with no way to resume.
    fn check_free_walk(&self, obj: u64, s: u64, e: u64) -> Result<()> {
        let Some(dn) = self.committed_dnode(obj)? else { return Ok(()) };
        if dn.is_free() || dn.nlevels <= 1 || s >= e {
            return Ok(());
        }
        let epbs = u32::from(dn.indblkshift).saturating_sub(7).max(1);
        let top = dn.nlevels - 1;
        for (i, bp) in dn.blkptr.iter().enumerate() {
            let first = (i as u64).checked_shl(epbs * u32::from(top)).unwrap_or(u64::MAX);
            self.check_free_subtree(bp, top, first, epbs, s, e, 0)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn check_free_subtree(
        &self,
        bp: &BlkPtr,
        level: u8,
        first: u64,
        epbs: u32,
        s: u64,
        e: u64,
        depth: u32,
    ) -> Result<()> {
        // Level 0 is not read (it is only freed); a tree deeper than any dnode allows is
        // left to the sync's own checks.
        if bp.is_hole() || level == 0 || depth > 16 {
            return Ok(());
        }
        let span = 1u64.checked_shl(epbs * u32::from(level)).unwrap_or(u64::MAX);
        if first >= e || first.saturating_add(span) <= s {
            return Ok(());
        }
        let block = self.reader.read_bp(bp)?;
        let child_span = span >> epbs;
        for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
            let child = BlkPtr::parse(raw, bp.byte_order())?;
            let at = first.saturating_add((i as u64).saturating_mul(child_span));
            self.check_free_subtree(&child, level - 1, at, epbs, s, e, depth + 1)?;
        }
        Ok(())
    }

    /// Frees object `obj` and all its blocks (at sync). Fails, changing nothing, when an
    /// indirect block the free must walk cannot be read ([`Self::check_free_walk`]).
    pub fn free_object(&mut self, obj: u64) -> Result<()> {
        self.check_free_walk(obj, 0, u64::MAX)?;
        let d = self.dirty(obj)?;
        d.freed = true;
        let gone = blocks_len(d.blocks.values());
        let count = d.blocks.len() as u64;
        d.blocks.clear();
        d.raw.clear();
        d.frees.clear();
        self.cost.data_bytes -= gone;
        self.cost.data_blocks -= count;
        self.freed_now.insert(obj);
        Ok(())
    }

    /// Replaces the bonus buffer (same or smaller length than the dnode allows).
    pub fn set_bonus(&mut self, obj: u64, bonus: Vec<u8>) -> Result<()> {
        let d = self.dirty(obj)?;
        let room = bonus_room(&d.phys);
        if bonus.len() > room {
            return Err(corrupt("dnode", format!("bonus of {} bytes exceeds {room}", bonus.len())));
        }
        d.phys.bonuslen = bonus.len() as u16;
        d.phys.bonus = bonus;
        Ok(())
    }

    /// Changes the data block size of an object that has at most one block; its content
    /// (first block) is kept up to the new size.
    pub fn set_block_size(&mut self, obj: u64, block_size: u64) -> Result<()> {
        check_block_size(block_size)?;
        let dn = self.dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
        if dn.data_block_size() == block_size {
            return Ok(());
        }
        if dn.maxblkid > 0 {
            return Err(corrupt("dnode", "block size can change only while the object has one block"));
        }
        // A block 0 that is a hole stays one: only the size changes (`dnode_set_blksz` on an
        // object without data), so extending an empty file allocates nothing.
        let has_data = match self.dnodes.get(&obj) {
            Some(d) if d.blocks.contains_key(&0) || d.raw.contains_key(&0) => true,
            Some(d) if d.freed || d.reclaimed || d.committed.is_none() || d.is_freed_block(0) => false,
            _ => match &self.base {
                Some(base) => base.block_pointer(&dn, 0, 0)?.is_some_and(|bp| !bp.is_hole()),
                None => false,
            },
        };
        if !has_data {
            self.dirty(obj)?.phys.datablkszsec = (block_size >> 9) as u16;
            return Ok(());
        }
        let old = self.read_block_overlay(obj, &dn, 0)?;
        let mut newb = vec![0u8; block_size as usize];
        let n = old.len().min(newb.len());
        newb[..n].copy_from_slice(&old[..n]);
        let d = self.dirty(obj)?;
        d.frees.push((0, 1));
        let gone = blocks_len(d.blocks.values());
        let count = d.blocks.len() as u64;
        d.blocks.clear();
        d.raw.clear();
        d.phys.datablkszsec = (block_size >> 9) as u16;
        let added = newb.len() as u64;
        d.blocks.insert(0, Arc::new(newb));
        self.cost.data_bytes = self.cost.data_bytes - gone + added;
        self.cost.data_blocks = self.cost.data_blocks - count + 1;
        Ok(())
    }

    /// Level-0 block `blkid` as the open txg sees it.
    fn read_block_overlay(&self, obj: u64, dn: &DnodePhys, blkid: u64) -> Result<Vec<u8>> {
        let bs = dn.data_block_size() as usize;
        if let Some(d) = self.dnodes.get(&obj) {
            if let Some(b) = d.blocks.get(&blkid) {
                return Ok(b.to_vec());
            }
            if d.is_freed_block(blkid) || d.committed.is_none() {
                return Ok(vec![0u8; bs]);
            }
        }
        let Some(base) = &self.base else { return Ok(vec![0u8; bs]) };
        // The committed tree with the current block size (block pointers are committed).
        let block = base.read_block(dn, blkid)?;
        let mut v = block.to_vec();
        v.resize(bs, 0);
        Ok(v)
    }

    /// Reads `buf.len()` bytes at `offset` (zeros past the end and in holes).
    pub fn read(&self, obj: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        let dn = self.dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
        let clean = self.dnodes.get(&obj).is_none_or(|d| d.blocks.is_empty() && d.frees.is_empty());
        if clean {
            if let Some(base) = &self.base {
                if let Ok(c) = base.dnode(obj) {
                    if c.phys.data_block_size() == dn.data_block_size() {
                        return base.read(&dn, offset, buf);
                    }
                }
            }
        }
        let bs = dn.data_block_size();
        let mut pos = offset;
        let mut done = 0usize;
        while done < buf.len() {
            let blkid = pos / bs;
            let within = (pos % bs) as usize;
            let n = (bs as usize - within).min(buf.len() - done);
            if blkid > dn.maxblkid && !self.dnodes.get(&obj).is_some_and(|d| d.blocks.contains_key(&blkid)) {
                buf[done..done + n].fill(0);
            } else {
                let b = self.read_block_overlay(obj, &dn, blkid)?;
                buf[done..done + n].copy_from_slice(&b[within..within + n]);
            }
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    /// Writes `data` at `offset`, extending the object as needed.
    pub fn write(&mut self, obj: u64, offset: u64, data: &[u8]) -> Result<()> {
        let dn = self.dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
        let bs = dn.data_block_size();
        let mut pos = offset;
        let mut done = 0usize;
        while done < data.len() {
            let blkid = pos / bs;
            let within = (pos % bs) as usize;
            let n = (bs as usize - within).min(data.len() - done);
            let has = self.dnodes.get(&obj).is_some_and(|d| d.blocks.contains_key(&blkid));
            let mut block = if has || n == bs as usize {
                None
            } else if blkid > dn.maxblkid {
                Some(vec![0u8; bs as usize])
            } else {
                Some(self.read_block_overlay(obj, &dn, blkid)?)
            };
            let d = self.dirty(obj)?;
            let mut added = 0;
            let mut parents = 0;
            if !d.blocks.contains_key(&blkid) {
                let epbs = u32::from(d.phys.indblkshift.max(8)) - 7;
                let levels = levels_for(d.phys.maxblkid.max(blkid), d.phys.nblkptr, epbs);
                let dirty = &d.blocks;
                parents = new_parents(|lo, hi| dirty.range(lo..hi).next().is_some(), blkid, epbs, levels);
            }
            let ibs = 1u64 << d.phys.indblkshift.max(8);
            let b = match d.blocks.entry(blkid) {
                std::collections::btree_map::Entry::Occupied(e) => Arc::make_mut(e.into_mut()),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let b = e.insert(Arc::new(block.take().unwrap_or_else(|| vec![0u8; bs as usize])));
                    added = b.len() as u64;
                    Arc::make_mut(b)
                }
            };
            b[within..within + n].copy_from_slice(&data[done..done + n]);
            if blkid > d.phys.maxblkid {
                d.phys.maxblkid = blkid;
            }
            if added > 0 {
                self.cost.data_bytes += added;
                self.cost.data_blocks += 1;
                self.cost.meta(parents, ibs);
            }
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    /// Bytes of new data `obj` holds in the open txg: its dirty blocks past the end of its
    /// committed data (all of them for an object that had none). Overwrites of committed
    /// blocks are not counted: their space is already in `dn_used`. What `stat` adds to
    /// `st_blocks` before the sync, as other file systems count delayed allocations.
    pub fn pending_bytes(&self, obj: u64) -> u64 {
        let Some(d) = self.dnodes.get(&obj) else { return 0 };
        let bs = d.phys.data_block_size();
        let n = match &d.committed {
            Some(c) if !d.reclaimed && c.used_bytes() > 0 => {
                d.blocks.range(c.maxblkid.saturating_add(1)..).count() as u64
            }
            _ => d.blocks.len() as u64,
        };
        n.saturating_mul(bs)
    }

    /// Writes whole level-0 block `blkid` of `obj` whose on-disk form is known: `logical`
    /// is its content (the object's block size), `phys` those bytes compressed with ZIO
    /// compression `compress` (`embedded`: the payload of an embedded block pointer). The
    /// sync writes `phys` as it is when the pool can hold it that way (see [`RawBlock`]),
    /// otherwise it compresses `logical` as any write. The caller vouches that `phys`
    /// decompresses to `logical` (a receive decompresses every payload to check it).
    pub fn write_compressed(
        &mut self,
        obj: u64,
        blkid: u64,
        logical: &[u8],
        compress: u8,
        phys: Vec<u8>,
        embedded: bool,
    ) -> Result<()> {
        let dn = self.dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
        let bs = dn.data_block_size();
        if logical.len() as u64 != bs || phys.is_empty() || phys.len() > logical.len() {
            return Err(corrupt(
                "compressed block",
                format!(
                    "{} bytes compressed to {} for object {obj} of {bs}-byte blocks",
                    logical.len(),
                    phys.len()
                ),
            ));
        }
        let offset =
            blkid.checked_mul(bs).ok_or_else(|| corrupt("compressed block", format!("block {blkid}")))?;
        self.write(obj, offset, logical)?;
        let d = self.dirty(obj)?;
        let Some(block) = d.blocks.get(&blkid).cloned() else {
            return Err(corrupt("compressed block", format!("block {blkid} of object {obj} is not dirty")));
        };
        let added = phys.len() as u64;
        d.raw.insert(blkid, RawBlock { logical: block, compress, phys: Arc::new(phys), embedded });
        self.raw_bytes += added;
        Ok(())
    }

    /// Frees `[offset, offset+len)` (`len = u64::MAX`: to the end, a truncate). Whole
    /// blocks become holes; partial blocks are zeroed.
    pub fn free_range(&mut self, obj: u64, offset: u64, len: u64) -> Result<()> {
        let dn = self.dnode(obj)?.ok_or(DmuError::NoSuchObject(obj))?;
        let bs = dn.data_block_size();
        let end = offset.saturating_add(len);
        let first_whole = offset.div_ceil(bs);
        let last_whole = end / bs; // exclusive
                                   // Before anything changes: the indirect blocks the sync will walk must be readable.
        self.check_free_walk(obj, first_whole, last_whole)?;
        let maxblkid = dn.maxblkid;
        // Partial head block: zero from offset to the end of its block (or of the range).
        if !offset.is_multiple_of(bs) && offset / bs <= maxblkid {
            let e = end.min((offset / bs + 1) * bs);
            self.write(obj, offset, &vec![0u8; (e - offset) as usize])?;
        }
        // Partial tail block, unless the head already covered it.
        let tail = last_whole * bs;
        if end != u64::MAX
            && !end.is_multiple_of(bs)
            && tail >= offset
            && (tail > offset || offset.is_multiple_of(bs))
            && tail / bs <= maxblkid
        {
            self.write(obj, tail, &vec![0u8; (end - tail) as usize])?;
        }
        if first_whole < last_whole {
            let d = self.dirty(obj)?;
            let gone = blocks_len(d.blocks.range(first_whole..last_whole).map(|(_, b)| b));
            let count = d.blocks.range(first_whole..last_whole).count() as u64;
            // Freeing committed blocks rewrites the indirect blocks at the range's two edges
            // on every level (the ones in between become holes).
            let edges = 2 * u64::from(d.phys.nlevels.saturating_sub(1));
            let ibs = 1u64 << d.phys.indblkshift.max(8);
            d.blocks.retain(|&b, _| b < first_whole || b >= last_whole);
            d.raw.retain(|&b, _| b < first_whole || b >= last_whole);
            d.frees.push((first_whole, last_whole));
            if len == u64::MAX || last_whole > d.phys.maxblkid {
                d.phys.maxblkid = first_whole.saturating_sub(1).min(d.phys.maxblkid);
                if let Some((&m, _)) = d.blocks.iter().next_back() {
                    d.phys.maxblkid = d.phys.maxblkid.max(m);
                }
            }
            self.cost.data_bytes -= gone;
            self.cost.data_blocks -= count;
            self.cost.meta(edges, ibs);
        }
        Ok(())
    }

    /// Iterates over the objects that are allocated in the open txg, in order.
    pub fn objects(&self) -> Result<Vec<u64>> {
        let mut out = BTreeSet::new();
        if let Some(base) = &self.base {
            base.for_each_dnode(|d| {
                out.insert(d.object);
                Ok(())
            })?;
        }
        for (&o, d) in &self.dnodes {
            if d.freed || d.phys.is_free() {
                out.remove(&o);
            } else {
                out.insert(o);
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Writes everything dirty and returns the new objset block pointer.
    pub fn sync(&mut self, ctx: &SyncCtx, sink: &mut dyn BlockSink) -> Result<BlkPtr> {
        let dirty = std::mem::take(&mut self.dnodes);
        self.header_dirty = false;
        self.cost = TxgCost::default();
        // Per object: the slots its committed dnode took (0 if none), and its new dnode.
        let mut new_dnodes: BTreeMap<u64, (usize, DnodePhys)> = BTreeMap::new();
        let mut writes = Vec::new();
        let mut by_obj: BTreeMap<u64, BTreeMap<u64, Prepared>> = BTreeMap::new();
        for (obj, d) in &dirty {
            if !d.freed {
                let props = ctx.policy.props(&d.phys, 0);
                for (blkid, data) in &d.blocks {
                    match d.raw.get(blkid).and_then(|r| raw_prepared(ctx, &props, r, data)) {
                        Some(p) => {
                            by_obj.entry(*obj).or_default().insert(*blkid, p);
                        }
                        None => writes.push((*obj, *blkid, data.as_slice(), props)),
                    }
                }
            }
        }
        let written = write_blocks_parallel(ctx, &writes)?;
        for ((obj, blkid, _, _), p) in writes.iter().zip(written) {
            by_obj.entry(*obj).or_default().insert(*blkid, p);
        }
        self.raw_bytes = 0;
        let acct = self.accounting_for(ctx, sink);
        let mut deltas = UsedDeltas::default();
        for (obj, d) in dirty {
            let prepared = by_obj.remove(&obj).unwrap_or_default();
            let mut phys = self.sync_object(ctx, sink, &d, prepared)?;
            if let Some(a) = acct {
                if !phys.is_free() {
                    phys.flags |= useracct::accounted_flags(a.userobj);
                }
                let old = d.committed.as_ref();
                let project = a.project && self.phys.projectused.is_some();
                deltas.count(old, Some(&phys), project, self.order);
            }
            let old_slots = d.committed.as_ref().map_or(0, |c| c.slots());
            new_dnodes.insert(obj, (old_slots, phys));
        }
        if let Some(a) = acct {
            if !deltas.is_empty() {
                self.sync_accounting(ctx, sink, a, &deltas)?;
            }
        }
        self.sync_meta(ctx, sink, &new_dnodes)?;
        let bp = self.write_objset_block(ctx, sink)?;
        // Every object below the allocation cursor is in use, except those freed in this
        // txg, which become reusable now: the cursor goes back to the first of them rather
        // than to 1, so allocating does not test every object of the objset again after
        // each sync (a MOS with thousands of datasets made each `zfs create` scan them all).
        if let Some(&low) = self.freed_now.first() {
            self.next_object = self.next_object.min(low);
        }
        self.freed_now.clear();
        Ok(bp)
    }

    /// Whether this sync keeps user accounting: a ZPL objset whose owner asked for it and
    /// whose header has room for the accounting objects. A new objset gets them here, with
    /// its counts marked complete (it is counted from its first object on), and the
    /// per-dataset features that say so become active (`dmu_objset_create_impl_dnstats`).
    fn accounting_for<'c>(
        &mut self,
        ctx: &SyncCtx<'c>,
        sink: &mut dyn BlockSink,
    ) -> Option<&'c Accounting<'c>> {
        let a = ctx.accounting?;
        if self.phys.os_type != DMU_OST_ZFS {
            return None;
        }
        if self.base.is_none() && self.phys.userused.is_none() {
            self.phys.userused = Some(DnodePhys::default());
            self.phys.groupused = Some(DnodePhys::default());
            self.phys.flags |= OBJSET_FLAG_USERACCOUNTING_COMPLETE;
            if a.userobj {
                self.phys.flags |= OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE;
                sink.activate("userobj_accounting");
            }
            if a.project {
                self.phys.projectused = Some(DnodePhys::default());
                self.phys.flags |= OBJSET_FLAG_PROJECTQUOTA_COMPLETE;
                sink.activate("project_quota");
            }
        }
        self.phys.userused.is_some().then_some(a)
    }

    /// Applies one sync's accounting deltas through the owner and writes the accounting
    /// objects (their blocks, then their dnodes into the objset header).
    fn sync_accounting(
        &mut self,
        ctx: &SyncCtx,
        sink: &mut dyn BlockSink,
        a: &Accounting,
        deltas: &UsedDeltas,
    ) -> Result<()> {
        self.accounting_open = true;
        let r = (a.apply)(self, deltas);
        self.accounting_open = false;
        r?;
        let dirty = std::mem::take(&mut self.dnodes);
        if let Some(&other) = dirty.keys().find(|o| !useracct::is_accounting_object(**o)) {
            return Err(corrupt("objset", format!("object {other} dirtied while accounting")));
        }
        for (obj, d) in dirty {
            let props = ctx.policy.props(&d.phys, 0);
            let writes: Vec<_> = d.blocks.iter().map(|(b, data)| (obj, *b, data.as_slice(), props)).collect();
            let written = write_blocks_parallel(ctx, &writes)?;
            let prepared = writes.iter().map(|w| w.1).zip(written).collect();
            let phys = self.sync_object(ctx, sink, &d, prepared)?;
            if let Some(slot) = useracct::accounting_slot(&mut self.phys, obj) {
                *slot = Some(phys);
            }
        }
        self.cost = TxgCost::default();
        Ok(())
    }

    /// Syncs one object's tree; returns its final dnode.
    fn sync_object(
        &self,
        ctx: &SyncCtx,
        sink: &mut dyn BlockSink,
        d: &DirtyDnode,
        prepared: BTreeMap<u64, Prepared>,
    ) -> Result<DnodePhys> {
        let empty = DnodePhys::default();
        let old = d.committed.as_ref().unwrap_or(&empty);
        if d.freed {
            if d.committed.is_some() {
                self.kill_tree(ctx, sink, old)?;
            }
            return Ok(DnodePhys::default());
        }
        let old = if d.reclaimed {
            // Started over: the old tree dies, the new one grows from nothing.
            self.kill_tree(ctx, sink, old)?;
            &empty
        } else {
            old
        };
        let mut tree = TreeUpdate::new(self, ctx, sink, old, &d.phys)?;
        for &(s, e) in &d.frees {
            tree.free_range(s, e)?;
        }
        for (blkid, mut p) in prepared {
            let props = ctx.policy.props(&d.phys, 0);
            if nop_write_eligible(&d.phys, &props) && !tree.changes[0].contains_key(&blkid) {
                if let Some(o) = tree.old_bp(0, blkid)? {
                    if ctx.zio.same_block(&mut p, &props, &o)? {
                        // The committed block already holds these bytes: it stays, nothing
                        // is written, freed or born (OpenZFS's nop-write).
                        tree.changes[0].insert(blkid, o);
                        continue;
                    }
                }
            }
            tree.set_l0(blkid, p, props)?;
        }
        tree.finish()
    }

    /// Kills every block of a committed tree.
    fn kill_tree(&self, ctx: &SyncCtx, sink: &mut dyn BlockSink, dn: &DnodePhys) -> Result<()> {
        let _ = ctx;
        for bp in dn.blkptr.iter().chain(dn.spill.iter()) {
            self.kill_subtree(sink, bp, 0)?;
        }
        Ok(())
    }

    fn kill_subtree(&self, sink: &mut dyn BlockSink, bp: &BlkPtr, depth: u32) -> Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        if depth > 16 {
            return Err(corrupt("block tree", "deeper than the format allows"));
        }
        if bp.level() > 0 && !bp.is_embedded() {
            let block = self.reader.read_bp(bp)?;
            let order = bp.byte_order();
            for raw in block.chunks_exact(BLKPTR_SIZE) {
                let child = BlkPtr::parse(raw, order)?;
                self.kill_subtree(sink, &child, depth + 1)?;
            }
        }
        sink.kill(bp)
    }

    /// Writes the dnode blocks holding `new_dnodes` and updates the meta-dnode.
    ///
    /// Every slot a committed dnode took is zeroed first (a freed large dnode leaves no
    /// bytes behind, as `dnode_sync_free` clears all its slots), then the live dnodes are
    /// written: a new large dnode may lie over the slots of objects freed in the same txg.
    fn sync_meta(
        &mut self,
        ctx: &SyncCtx,
        sink: &mut dyn BlockSink,
        new_dnodes: &BTreeMap<u64, (usize, DnodePhys)>,
    ) -> Result<()> {
        let meta = self.phys.meta_dnode.clone();
        let bs = meta.data_block_size();
        let per_block = bs / DNODE_SLOT_SIZE as u64;
        let mut blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for &obj in new_dnodes.keys() {
            let blkid = obj / per_block;
            if let std::collections::btree_map::Entry::Vacant(e) = blocks.entry(blkid) {
                e.insert(match &self.base {
                    Some(base) if blkid <= meta.maxblkid => base.read_block(&meta, blkid)?.to_vec(),
                    _ => vec![0u8; bs as usize],
                });
            }
        }
        let place = |obj: u64, slots: usize| -> Result<(u64, usize)> {
            let off = ((obj % per_block) as usize) * DNODE_SLOT_SIZE;
            if off + slots * DNODE_SLOT_SIZE > bs as usize {
                return Err(corrupt("dnode", format!("object {obj}'s {slots} slots cross its dnode block")));
            }
            Ok((obj / per_block, off))
        };
        for (&obj, &(old_slots, _)) in new_dnodes {
            let slots = old_slots.max(1);
            let (blkid, off) = place(obj, slots)?;
            if let Some(b) = blocks.get_mut(&blkid) {
                b[off..off + slots * DNODE_SLOT_SIZE].fill(0);
            }
        }
        let mut large = false;
        for (&obj, (_, dn)) in new_dnodes {
            if dn.is_free() {
                continue;
            }
            let (blkid, off) = place(obj, dn.slots())?;
            if let Some(b) = blocks.get_mut(&blkid) {
                dn.encode_into(&mut b[off..], self.order)?;
            }
            large |= dn.extra_slots > 0;
        }
        if large {
            sink.large_dnode();
        }
        if blocks.is_empty() {
            return Ok(());
        }
        let mut target = meta.clone();
        if let Some((&m, _)) = blocks.iter().next_back() {
            target.maxblkid = target.maxblkid.max(m);
        }
        let props = ctx.policy.props(&meta, 0);
        let mut tree = TreeUpdate::new(self, ctx, sink, &meta, &target)?;
        for (blkid, data) in blocks {
            let fill = dnode_block_fill(&data, self.order);
            let mut p = ctx.zio.prepare(&data, &props, ctx.sector)?;
            if fill == 0 {
                p = Prepared {
                    phys: Vec::new(),
                    lsize: bs,
                    compress: props.compress,
                    hole: true,
                    embedded: false,
                    cksum: None,
                };
            }
            tree.set_l0_with_fill(blkid, p, props, fill)?;
        }
        let new_meta = tree.finish()?;
        self.phys.meta_dnode = new_meta;
        Ok(())
    }

    fn write_objset_block(&mut self, ctx: &SyncCtx, sink: &mut dyn BlockSink) -> Result<BlkPtr> {
        let meta = &self.phys.meta_dnode;
        // A header with a projectused dnode is 4 KiB (`OBJSET_PHYS_SIZE_V3`), else 2 KiB.
        let size = if self.phys.projectused.is_some() { OBJSET_PHYS_SIZE_V3 } else { OBJSET_PHYS_SIZE_V2 };
        let data = self.phys.encode(size, self.order)?;
        let props = ctx.policy.props(meta, u8::MAX);
        let p = ctx.zio.prepare(&data, &props, ctx.sector)?;
        let old = self.base.as_ref().map(|b| b.bp);
        let mut bp = place(&self.reader, ctx, sink, p, &props, old.as_ref())?;
        bp.fill = meta.blkptr.iter().map(|b| b.fill_count()).sum();
        let phys = Arc::new(self.phys.clone());
        self.base = Some(Objset { reader: self.reader.clone(), bp, phys });
        Ok(bp)
    }
}

/// May a rewritten level-0 block of `dn` keep its committed block when the bytes are the
/// same? OpenZFS's nop-write (`dmu_write_policy`, `zio_nop_write`): only file and volume
/// data, only with a checksum strong enough that equal checksums mean equal bytes (sha256,
/// sha512, skein, edonr, blake3: `ZCHECKSUM_FLAG_NOPWRITE`), and only with compression on.
/// That is what makes `receive -o origin=` of a full stream onto a clone of the same data,
/// or a rewrite of a file with what it holds, take no new space.
fn nop_write_eligible(dn: &DnodePhys, props: &WriteProps) -> bool {
    const PLAIN_FILE_CONTENTS: u8 = 19;
    const ZVOL: u8 = 23;
    // enum zio_checksum: sha256, sha512, skein, edonr, blake3.
    const NOPWRITE_CHECKSUMS: [u8; 5] = [8, 11, 12, 13, 14];
    // enum zio_compress: the write policy resolves inherit (0) and on (1); off is 2.
    const ZIO_COMPRESS_OFF: u8 = 2;
    matches!(dn.object_type, PLAIN_FILE_CONTENTS | ZVOL)
        && NOPWRITE_CHECKSUMS.contains(&props.checksum)
        && props.compress != ZIO_COMPRESS_OFF
}

/// Bonus bytes dnode `dn` can hold with its block pointers, keeping room for a spill pointer
/// (`DN_MAX_BONUS_LEN`).
pub fn bonus_room(dn: &DnodePhys) -> usize {
    bonus_len_for_slots(dn.slots()).saturating_sub(usize::from(dn.nblkptr.max(1)) * BLKPTR_SIZE - BLKPTR_SIZE)
}

fn check_block_size(bs: u64) -> Result<()> {
    if !(512..=(16 << 20)).contains(&bs) || !bs.is_multiple_of(512) {
        return Err(corrupt("dnode", format!("block size {bs} is not a multiple of 512 in 512..16M")));
    }
    Ok(())
}

/// Number of allocated dnodes in a dnode block (large dnodes count once).
fn dnode_block_fill(block: &[u8], order: ByteOrder) -> u64 {
    let mut fill = 0;
    let mut slot = 0;
    while slot * DNODE_SLOT_SIZE < block.len() {
        let off = slot * DNODE_SLOT_SIZE;
        match DnodePhys::parse(&block[off..], order) {
            Ok(d) if !d.is_free() => {
                fill += 1;
                slot += d.slots();
            }
            _ => slot += 1,
        }
    }
    fill
}

/// The prepared form of raw block `r` whose dirty data is `data`, if it still stands (the
/// block was not changed since) and the pool can hold it so: an embedded pointer only where
/// the dataset embeds (the pool has `embedded_data`), a compressed block only if it still
/// saves space once padded to the pool's sector, as `zio_write_compress` requires of any
/// compressed block.
fn raw_prepared(ctx: &SyncCtx, props: &WriteProps, r: &RawBlock, data: &DirtyBlock) -> Option<Prepared> {
    if !Arc::ptr_eq(&r.logical, data) {
        return None;
    }
    let lsize = data.len() as u64;
    if r.embedded {
        if !props.embed || r.phys.len() > BPE_PAYLOAD_SIZE {
            return None;
        }
        return Some(Prepared {
            phys: r.phys.to_vec(),
            lsize,
            compress: r.compress,
            hole: false,
            embedded: true,
            cksum: None,
        });
    }
    let rounded = (r.phys.len() as u64).next_multiple_of(ctx.sector.max(512));
    if rounded >= lsize {
        return None;
    }
    let mut phys = Vec::with_capacity(rounded as usize);
    phys.extend_from_slice(&r.phys);
    phys.resize(rounded as usize, 0);
    Some(Prepared { phys, lsize, compress: r.compress, hole: false, embedded: false, cksum: None })
}

/// Compresses and checksums level-0 blocks on up to 4 threads (allocation and issue happen
/// later, in tree order, so that placement is deterministic).
fn write_blocks_parallel(ctx: &SyncCtx, writes: &[(u64, u64, &[u8], WriteProps)]) -> Result<Vec<Prepared>> {
    let threads = crate::cpu_threads().min(4);
    if writes.len() < 4 || threads < 2 {
        return writes.iter().map(|w| Ok(ctx.zio.prepare(w.2, &w.3, ctx.sector)?)).collect();
    }
    let chunk = writes.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = writes
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    c.iter().map(|w| ctx.zio.prepare(w.2, &w.3, ctx.sector)).collect::<zio::Result<Vec<_>>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(writes.len());
        for h in handles {
            let part = h.join().map_err(|_| corrupt("sync", "a compression thread panicked"))??;
            out.extend(part);
        }
        Ok(out)
    })
}

/// Writes a prepared block where it belongs: in place over `old` when `old` was born in
/// this txg and the new bytes fit its slot, else at fresh space (killing `old`).
fn place(
    reader: &Reader,
    ctx: &SyncCtx,
    sink: &mut dyn BlockSink,
    mut p: Prepared,
    props: &WriteProps,
    old: Option<&BlkPtr>,
) -> Result<BlkPtr> {
    if let Some(o) = old.filter(|o| !o.is_hole() && !o.is_embedded()) {
        if o.logical_birth() == ctx.txg
            && !p.hole
            && !p.embedded
            && o.ndvas() == usize::from(props.copies.clamp(1, 3))
        {
            let same_dvas = o.dvas();
            if p.pad_to(o.psize()) {
                let bp = ctx.zio.issue(&p, props, ctx.txg, &same_dvas)?;
                reader.invalidate(o);
                return Ok(bp);
            }
        }
        sink.kill(o)?;
    }
    if p.hole {
        return Ok(BlkPtr::default());
    }
    if p.embedded {
        // Nothing to allocate: the data is in the pointer, charged as OpenZFS charges it
        // (no allocated bytes; its payload and logical size count).
        let bp = ctx.zio.issue(&p, props, ctx.txg, &[])?;
        sink.born(&bp);
        return Ok(bp);
    }
    let dvas = ctx.alloc.allocate(ctx.zio, p.psize(), usize::from(props.copies.clamp(1, 3)), ctx.txg)?;
    let bp = ctx.zio.issue(&p, props, ctx.txg, &dvas)?;
    // Space freed earlier in this txg can be reused at once, so an older block with the
    // same (DVA, birth) cache key may still be cached: forget it.
    reader.invalidate(&bp);
    sink.born(&bp);
    Ok(bp)
}

/// Copy-on-write update of one object's block tree.
struct TreeUpdate<'a, 'b> {
    os: &'a DirtyObjset,
    ctx: &'a SyncCtx<'b>,
    sink: &'a mut dyn BlockSink,
    old: &'a DnodePhys,
    new: DnodePhys,
    /// Changed pointers per level: level → blkid → new pointer.
    changes: Vec<BTreeMap<u64, BlkPtr>>,
    used_delta: i128,
}

impl<'a, 'b> TreeUpdate<'a, 'b> {
    fn new(
        os: &'a DirtyObjset,
        ctx: &'a SyncCtx<'b>,
        sink: &'a mut dyn BlockSink,
        old: &'a DnodePhys,
        target: &DnodePhys,
    ) -> Result<Self> {
        let mut new = target.clone();
        // Block pointers start as the committed ones (a new object: holes).
        new.blkptr = if old.is_free() {
            vec![BlkPtr::default(); usize::from(new.nblkptr)]
        } else {
            old.blkptr.clone()
        };
        if old.is_free() {
            new.nlevels = 1;
        } else {
            new.nlevels = old.nlevels.max(1);
        }
        Ok(TreeUpdate { os, ctx, sink, old, new, changes: vec![BTreeMap::new()], used_delta: 0 })
    }

    fn epbs(&self) -> u32 {
        u32::from(self.new.indblkshift) - 7
    }

    /// The committed pointer at (level, blkid), or None beyond the committed tree.
    fn old_bp(&self, level: u8, blkid: u64) -> Result<Option<BlkPtr>> {
        if self.old.is_free() {
            return Ok(None);
        }
        match &self.os.base {
            Some(base) => base.block_pointer(self.old, level, blkid),
            None => Ok(None),
        }
    }

    fn kill(&mut self, bp: &BlkPtr) -> Result<()> {
        if !bp.is_hole() {
            self.used_delta -= i128::from(self.ctx.bp_dsize(bp));
        }
        self.sink.kill(bp)
    }

    fn set_l0(&mut self, blkid: u64, p: Prepared, props: WriteProps) -> Result<()> {
        self.set_l0_with_fill(blkid, p, props, 1)
    }

    fn set_l0_with_fill(&mut self, blkid: u64, p: Prepared, props: WriteProps, fill: u64) -> Result<()> {
        // A block already killed by a free range of this sync has no old version left.
        let already_freed = self.changes[0].contains_key(&blkid);
        let old = if already_freed { None } else { self.old_bp(0, blkid)?.filter(|b| !b.is_hole()) };
        let lsize = p.lsize;
        let mut bp = self.place_counted(p, &props, old.as_ref())?;
        if bp.is_hole() {
            bp = self.ctx.hole(lsize, self.new.object_type, 0);
        } else if !bp.is_embedded() {
            // (An embedded pointer's fill word is payload; its fill is 1 by definition.)
            bp.fill = fill;
        }
        self.changes[0].insert(blkid, bp);
        Ok(())
    }

    /// `place` with `dn_used` bookkeeping.
    fn place_counted(&mut self, p: Prepared, props: &WriteProps, old: Option<&BlkPtr>) -> Result<BlkPtr> {
        let old_dsize = old.map(|o| self.ctx.bp_dsize(o)).unwrap_or(0);
        let bp = place(&self.os.reader, self.ctx, self.sink, p, props, old)?;
        let in_place = old.is_some_and(|o| o.dva == bp.dva && !bp.is_hole() && !bp.is_embedded());
        if !in_place {
            self.used_delta -= i128::from(old_dsize);
            self.used_delta += i128::from(self.ctx.bp_dsize(&bp));
        }
        Ok(bp)
    }

    /// Turns level-0 blocks `[s, e)` into holes (walking only the non-hole parts).
    fn free_range(&mut self, s: u64, e: u64) -> Result<()> {
        if self.old.is_free() {
            return Ok(());
        }
        let mut found = Vec::new();
        let top = self.old.nlevels.saturating_sub(1);
        let epbs = self.epbs();
        for (i, bp) in self.old.blkptr.iter().enumerate() {
            let span_shift = epbs * u32::from(top);
            let first = (i as u64).checked_shl(span_shift).unwrap_or(u64::MAX);
            self.collect(bp, top, first, s, e, &mut found, 0)?;
        }
        for (blkid, bp) in found {
            // Overlapping free ranges (a truncate, then a block-size change) must kill a
            // block once.
            if self.changes[0].contains_key(&blkid) {
                continue;
            }
            self.kill(&bp)?;
            let hole = self.ctx.hole(self.new.data_block_size(), self.new.object_type, 0);
            self.changes[0].insert(blkid, hole);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn collect(
        &mut self,
        bp: &BlkPtr,
        level: u8,
        first: u64,
        s: u64,
        e: u64,
        out: &mut Vec<(u64, BlkPtr)>,
        depth: u32,
    ) -> Result<()> {
        if bp.is_hole() || depth > 16 {
            return Ok(());
        }
        let epbs = self.epbs();
        let span = 1u64.checked_shl(epbs * u32::from(level)).unwrap_or(u64::MAX);
        if first >= e || first.saturating_add(span) <= s {
            return Ok(());
        }
        if level == 0 {
            out.push((first, *bp));
            return Ok(());
        }
        let block = self.os.reader.read_bp(bp)?;
        let order = bp.byte_order();
        let child_span = span >> epbs;
        for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
            let child = BlkPtr::parse(raw, order)?;
            self.collect(&child, level - 1, first + i as u64 * child_span, s, e, out, depth + 1)?;
        }
        Ok(())
    }

    /// Levels needed so that the top pointers cover `maxblkid`.
    fn levels_for(&self, maxblkid: u64) -> u8 {
        let epbs = self.epbs();
        let mut levels = 1u8;
        loop {
            let cover = u64::from(self.new.nblkptr).checked_shl(epbs * u32::from(levels - 1));
            match cover {
                Some(c) if c > maxblkid => return levels,
                None => return levels,
                _ => levels += 1,
            }
        }
    }

    /// Rebuilds indirect blocks level by level and returns the synced dnode.
    fn finish(mut self) -> Result<DnodePhys> {
        let max_changed =
            self.changes[0].iter().filter(|(_, b)| !b.is_hole()).map(|(k, _)| *k).next_back().unwrap_or(0);
        let maxblkid = self.new.maxblkid.max(max_changed);
        let want = self.levels_for(maxblkid).max(self.new.nlevels);
        let old_levels = if self.old.is_free() { 1 } else { self.old.nlevels.max(1) };
        let epbs = self.epbs();
        if want > old_levels && !self.old.is_free() {
            // The old top pointers become children of the new level's first block: list
            // them as (unchanged) pointers so that block is built.
            while self.changes.len() < usize::from(old_levels) {
                self.changes.push(BTreeMap::new());
            }
            let lvl = usize::from(old_levels - 1);
            for (i, b) in self.old.blkptr.iter().enumerate() {
                self.changes[lvl].entry(i as u64).or_insert(*b);
            }
        }
        let props_for = |s: &Self, level: u8| s.ctx.policy.props(&s.new, level);
        let mut level = 0u8;
        while level + 1 < want {
            let changes = std::mem::take(&mut self.changes[usize::from(level)]);
            let mut parents: BTreeMap<u64, Vec<(u64, BlkPtr)>> = BTreeMap::new();
            for (blkid, bp) in changes {
                parents.entry(blkid >> epbs).or_default().push((blkid, bp));
            }
            let mut up = BTreeMap::new();
            for (pblk, kids) in parents {
                let plevel = level + 1;
                let old_p = if plevel < old_levels { self.old_bp(plevel, pblk)? } else { None };
                let ibs = 1usize << self.new.indblkshift;
                let mut content = match old_p.filter(|b| !b.is_hole()) {
                    Some(b) => {
                        let mut v = self.os.reader.read_bp(&b)?.to_vec();
                        v.resize(ibs, 0);
                        v
                    }
                    None => vec![0u8; ibs],
                };
                for (blkid, bp) in kids {
                    let i = (blkid & ((1u64 << epbs) - 1)) as usize;
                    content[i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE]
                        .copy_from_slice(&bp.encode(self.os.order));
                }
                let mut fill = 0u64;
                let mut any = false;
                for raw in content.chunks_exact(BLKPTR_SIZE) {
                    let b = BlkPtr::parse(raw, self.os.order)?;
                    if !b.is_hole() {
                        any = true;
                        fill += b.fill_count();
                    }
                }
                let props = props_for(&self, plevel);
                let p = if any {
                    self.ctx.zio.prepare(&content, &props, self.ctx.sector)?
                } else {
                    Prepared {
                        phys: Vec::new(),
                        lsize: ibs as u64,
                        compress: props.compress,
                        hole: true,
                        embedded: false,
                        cksum: None,
                    }
                };
                let mut nbp = self.place_counted(p, &props, old_p.filter(|b| !b.is_hole()).as_ref())?;
                if nbp.is_hole() {
                    nbp = self.ctx.hole(ibs as u64, self.new.object_type, level + 1);
                } else {
                    nbp.fill = fill;
                }
                up.insert(pblk, nbp);
            }
            level += 1;
            if self.changes.len() <= usize::from(level) {
                self.changes.push(BTreeMap::new());
            }
            self.changes[usize::from(level)].extend(up);
        }
        // Top level: pointers live in the dnode.
        let top = usize::from(want - 1);
        if want > old_levels && !self.old.is_free() {
            // The old top pointers moved into the new level's first block.
            for b in self.new.blkptr.iter_mut() {
                *b = BlkPtr::default();
            }
        }
        let top_changes = std::mem::take(&mut self.changes[top]);
        for (blkid, bp) in top_changes {
            let slot = self
                .new
                .blkptr
                .get_mut(blkid as usize)
                .ok_or_else(|| corrupt("dnode", format!("top-level block {blkid} beyond nblkptr")))?;
            *slot = bp;
        }
        self.new.nlevels = want;
        self.new.maxblkid = maxblkid;
        let used = i128::from(self.old.used) + self.used_delta;
        self.new.used = u64::try_from(used.max(0)).unwrap_or(0);
        if self.old.is_free() {
            self.new.used = u64::try_from(self.used_delta.max(0)).unwrap_or(0);
        }
        self.new.flags |= DNODE_FLAG_USED_BYTES;
        Ok(self.new)
    }
}
