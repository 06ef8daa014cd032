//! # pool::zil — a dataset's intent log, in OpenZFS's format
//!
//! Theory. `fsync` must not wait for a txg sync. The intent log answers it by appending
//! records of what changed since the last sync to a chain of log blocks, written and
//! flushed at once; after a crash the next import replays them (OpenZFS `zil.c`; the
//! format is in `ondisk::zil`).
//!
//! **The chain.** The objset's ZIL header points to the first block a replay must read.
//! Every block holds the pointer to the next, allocated before the block is written, so
//! the chain always ends in an allocated block that is not written yet ([`Chain::next`]).
//! A commit fills `next` (and more blocks if needed) with records and writes it: no
//! header changes, so no sync. A new chain is first made durable by a sync (its header
//! points to its unwritten first block), as OpenZFS's `zil_create` waits for one.
//!
//! **What a record covers.** rzfs logs file writes (`TX_WRITE` with the data copied into
//! the record, read from the open txg at commit time, OpenZFS's `WR_NEED_COPY`) and changes
//! of a file's attributes (`TX_SETATTR`: ftruncate, chmod, chown, utimensat). Any other
//! change in the open txg (create, rename, xattrs...) *taints* the log until the next sync: a
//! commit then falls back to a sync, which makes everything durable. That is always
//! correct, and fast for the workloads that fsync most (databases and VM images rewriting
//! existing files, journals emptied by truncation).
//!
//! **Order.** Writes are noted as merged ranges per object and their data is read at
//! commit time, so a record holds the data the file has *then*. An attribute change keeps
//! its place: the writes noted before it on the same object are logged before it
//! ([`Item`]), and a new size cuts those ranges to it, as the data past it is gone. The
//! replay then rebuilds the file exactly: sizes as they were, the data written after the
//! last cut, and times set after the writes that preceded them.
//!
//! **Failures.** A commit whose write fails falls back to a sync, and the chain, which now
//! has a block that may not have landed, is ended by that sync ([`Zil::commit`] marks it
//! broken); the next commit starts a new chain where the allocator finds room, which is
//! not on a log device that lost its leaves (OpenZFS too logs to the pool then).
//!
//! **Sync.** Records carry their txg; once that txg is durable they are obsolete (replay
//! skips records of synced txgs, `lrc_txg < claim_txg`). Each sync therefore moves the
//! header to `next` and frees the written blocks *in the same txg*, so a crash at any point
//! leaves either the old header with its blocks intact or the new one. A block freed in
//! the txg that allocated it stays out of reach of allocations until that txg is durable
//! (`metaslab::Allocator::free_zil`): the last durable header may still lead to it.
//! Nothing of this state changes during the sync itself: [`Zil::synced`] applies it once
//! the txg is durable, and [`Zil::rolled_back`] claims back what a failed sync's undo gave
//! back to the allocator.
//!
//! **Import.** Blocks born after the last durable txg are in no space map; OpenZFS
//! `zil_claim` allocates them in the first txg of a writable import and marks the header
//! (`zh_claim_txg`, `ZIL_REPLAY_NEEDED`). [`read_log`] walks a chain as `zil_parse` does.

use crate::writer::AllocShared;
use crate::{PoolError, Result};
use codec::checksum::{seal_zil_chain, Cksum, ZIO_CHECKSUM_ZILOG, ZIO_CHECKSUM_ZILOG2};
use codec::compress::ZIO_COMPRESS_OFF;
use dmu::tx::DirtyObjset;
use ondisk::blkptr::BlkPtr;
use ondisk::objset::ZilHeaderPhys;
use ondisk::zil::{self as lr, LogRecord, LrBody};
use ondisk::ByteOrder;
use std::collections::{BTreeMap, HashSet};
use zio::Zio;

/// Largest data a write record copies (several fit in a full-size block).
pub const COPY_CHUNK: u64 = 32 << 10;
/// Smallest log block (`ZIL_MIN_BLKSZ`).
const MIN_BLOCK: u64 = 4 << 10;
/// Size of a new chain's first block.
const FIRST_BLOCK: u64 = 32 << 10;
/// `DMU_OT_INTENT_LOG`.
const OT_INTENT_LOG: u8 = 9;

/// What [`Zil::commit`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Everything the log must hold is durable (records written, or nothing to write).
    Done,
    /// The log cannot cover the open txg: the caller syncs it.
    NeedSync,
}

/// Counters of a dataset's log (for tests, `rzdb` and benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZilStats {
    /// Commits answered by log writes.
    pub commits: u64,
    /// Commits that fell back to a sync.
    pub fallbacks: u64,
    pub records: u64,
    pub blocks: u64,
    pub bytes: u64,
}

/// An attribute change the log records (`TX_SETATTR`); None: unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttrChange {
    /// The permission bits (a replay keeps the file's type, OpenZFS's too).
    pub mode: Option<u64>,
    pub uid: Option<u64>,
    pub gid: Option<u64>,
    pub size: Option<u64>,
    pub atime: Option<(u64, u64)>,
    pub mtime: Option<(u64, u64)>,
}

/// A change to log that must keep its place among the others.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    /// Writes noted before a later change of the same object: `[start, end)` ranges whose
    /// data is read at commit time.
    Writes {
        obj: u64,
        ranges: Vec<(u64, u64)>,
    },
    Attr {
        obj: u64,
        change: AttrChange,
    },
}

/// The live part of a chain.
#[derive(Clone, Debug)]
struct Chain {
    /// The allocated, unwritten block the chain continues with.
    next: BlkPtr,
    /// Blocks written since the last sync, in chain order (the header still leads to the
    /// first of them until a sync moves it).
    written: Vec<BlkPtr>,
    /// A durable header leads to this chain: commits may write to it.
    published: bool,
}

/// The intent log state of one dataset's open txg.
#[derive(Clone, Debug, Default)]
pub struct Zil {
    /// Writes of the open txg not logged yet: object → merged `[start, end)` ranges.
    pending: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// Changes not logged yet that come before `pending`, in the order they were made.
    items: Vec<Item>,
    /// The open txg holds a change the log does not describe.
    tainted: bool,
    chain: Option<Chain>,
    /// Record sequence numbers, increasing for the life of the writer.
    lr_seq: u64,
    /// The syncing txg ends the chain (a snapshot of the dataset is taken in it: OpenZFS
    /// snapshots carry no log, `dsl_dataset_zero_zil`).
    ending: bool,
    /// The syncing txg has freed the written blocks already (a dataset may be synced twice
    /// in a txg).
    freed_written: bool,
    /// A snapshot in the syncing txg asked for the chain to end.
    end_requested: bool,
    /// A commit's write failed: the chain has a block that may not have landed, after
    /// which a replay would stop. No commit writes to it; the next sync ends it.
    broken: bool,
    /// The dataset's `sync` property: [`SYNC_STANDARD`], [`SYNC_ALWAYS`] or
    /// [`SYNC_DISABLED`].
    pub sync_mode: u8,
    pub stats: ZilStats,
}

/// `sync=standard`: `fsync` and `O_SYNC` writes are durable when they return.
pub const SYNC_STANDARD: u8 = 0;
/// `sync=always`: every change is durable when its call returns.
pub const SYNC_ALWAYS: u8 = 1;
/// `sync=disabled`: `fsync` returns at once; changes are durable when their txg syncs.
pub const SYNC_DISABLED: u8 = 2;

fn io(e: impl std::fmt::Display) -> PoolError {
    PoolError::Io(e.to_string())
}

impl Zil {
    /// Notes a write of `[off, off + len)` of object `obj` in the open txg.
    pub fn note_write(&mut self, obj: u64, off: u64, len: u64) {
        if len == 0 || self.tainted {
            return;
        }
        let Some(end) = off.checked_add(len) else { return self.taint() };
        let ranges = self.pending.entry(obj).or_default();
        let (mut s, mut e) = (off, end);
        // Merge with every range that touches [s, e).
        // The ranges are disjoint and sorted: walk back from `e` until one ends before `s`.
        let touching: Vec<u64> =
            ranges.range(..=e).rev().take_while(|(_, &re)| re >= s).map(|(&rs, _)| rs).collect();
        for rs in touching {
            if let Some(re) = ranges.remove(&rs) {
                s = s.min(rs);
                e = e.max(re);
            }
        }
        ranges.insert(s, e);
        self.bound();
    }

    /// Bounds the memory of what is noted: past this, a sync is cheaper anyway.
    fn bound(&mut self) {
        if self.pending.values().map(BTreeMap::len).sum::<usize>() + self.items.len() > 65536 {
            self.taint();
        }
    }

    /// Notes an attribute change of object `obj` in the open txg (`TX_SETATTR`). The writes
    /// noted before it are logged before it; a new size cuts what they cover (the data a
    /// commit reads for them is the object's data of that time, which ends there).
    pub fn note_setattr(&mut self, obj: u64, change: AttrChange) {
        if self.tainted {
            return;
        }
        if let Some(r) = self.pending.remove(&obj) {
            self.items.push(Item::Writes { obj, ranges: r.into_iter().collect() });
        }
        if let Some(size) = change.size {
            for it in &mut self.items {
                if let Item::Writes { obj: o, ranges } = it {
                    if *o == obj {
                        ranges.retain_mut(|(s, e)| {
                            *e = (*e).min(size);
                            *s < *e
                        });
                    }
                }
            }
            self.items.retain(|it| !matches!(it, Item::Writes { ranges, .. } if ranges.is_empty()));
        }
        self.items.push(Item::Attr { obj, change });
        self.bound();
    }

    /// A change the log cannot describe: commits sync until the next txg.
    pub fn taint(&mut self) {
        self.tainted = true;
        self.pending.clear();
        self.items.clear();
    }

    /// The header a sync of this dataset writes.
    fn header(&self) -> ZilHeaderPhys {
        match &self.chain {
            Some(c) if !self.ending => ZilHeaderPhys { log: c.next, ..Default::default() },
            _ => ZilHeaderPhys::default(),
        }
    }

    /// Does the next sync have log work (a header to move, blocks to free)?
    pub fn sync_dirty(&self, os: &DirtyObjset) -> bool {
        let Some(c) = &self.chain else { return false };
        (!c.written.is_empty() && !self.freed_written)
            || (self.end_requested && !self.ending)
            || *os.zil_header() != self.header()
    }

    /// Is `bp` a block of this writer's chain?
    pub fn owns(&self, bp: &BlkPtr) -> bool {
        self.chain.as_ref().is_some_and(|c| c.next == *bp || c.written.contains(bp))
    }

    /// Is there a chain (which a snapshot must end)?
    pub fn has_chain(&self) -> bool {
        self.chain.is_some()
    }

    /// A snapshot of the dataset is taken in the syncing txg, or a log vdev leaves: the
    /// chain ends in the next sync.
    pub(crate) fn request_end(&mut self) {
        self.end_requested = true;
    }

    /// Syncing context of `txg`: the header moves past every written block (all their
    /// records are of txgs up to `txg`), which are freed in the same txg; a requested end
    /// frees the unwritten block too and clears the header. Runs again harmlessly when the
    /// dataset is synced twice in a txg. [`Zil::synced`] or [`Zil::rolled_back`] follow.
    pub(crate) fn sync(&mut self, os: &mut DirtyObjset, alloc: &AllocShared, txg: u64) -> Result<()> {
        let Some(c) = &self.chain else { return Ok(()) };
        if !self.freed_written {
            for bp in &c.written {
                free_block(alloc, bp, txg)?;
            }
            self.freed_written = true;
        }
        if self.end_requested && !self.ending {
            free_block(alloc, &c.next, txg)?;
            self.ending = true;
        }
        os.set_zil_header(self.header());
        Ok(())
    }

    /// `txg` is durable: its records are obsolete, the header leads to `next`.
    pub(crate) fn synced(&mut self) {
        self.pending.clear();
        self.items.clear();
        self.tainted = false;
        self.freed_written = false;
        self.end_requested = false;
        self.broken = false;
        if std::mem::take(&mut self.ending) {
            self.chain = None;
        } else if let Some(c) = self.chain.as_mut() {
            c.written.clear();
            c.published = true;
        }
    }

    /// A sync of `txg` failed and was undone: the allocator gave back what `txg` allocated,
    /// including the live log blocks born in it, which are claimed again.
    pub(crate) fn rolled_back(&mut self, alloc: &AllocShared, txg: u64) -> Result<()> {
        self.ending = false;
        self.freed_written = false;
        // A broken chain still has to end.
        self.end_requested = self.broken;
        if let Some(c) = &self.chain {
            for bp in c.written.iter().chain(std::iter::once(&c.next)) {
                if bp.birth == txg {
                    for d in bp.dva.iter().take(bp.ndvas()) {
                        alloc.claim_dva(d, txg)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The dataset goes away in syncing txg `txg` (destroyed, rolled back, replaced by a
    /// receive): its log blocks are freed. Changes nothing in `self` (a failed sync puts
    /// the writer back).
    pub(crate) fn abandon(&self, alloc: &AllocShared, txg: u64) -> Result<()> {
        if let Some(c) = &self.chain {
            for bp in c.written.iter().chain(std::iter::once(&c.next)) {
                free_block(alloc, bp, txg)?;
            }
        }
        Ok(())
    }

    /// Answers an `fsync` of dataset `ds` in open txg `txg`: writes records of every
    /// pending write (data read from `os`) to the chain and flushes them. `NeedSync` when the
    /// log cannot (tainted txg, no published chain yet — one is started for the next sync
    /// to publish — no space, a failed write).
    pub fn commit(
        &mut self,
        os: &DirtyObjset,
        zio: &Zio,
        alloc: &AllocShared,
        ds: u64,
        txg: u64,
    ) -> Result<Commit> {
        if self.tainted || self.ending || self.broken {
            self.stats.fallbacks += 1;
            return Ok(Commit::NeedSync);
        }
        if self.pending.is_empty() && self.items.is_empty() {
            return Ok(Commit::Done);
        }
        let Some(chain) = self.chain.clone() else {
            // zil_create: the first block, made durable by the sync the caller runs.
            let mut taken = Vec::new();
            let guid = [crate::create::random_guid(&mut taken), crate::create::random_guid(&mut taken)];
            let ck = [guid[0], guid[1], ds, 1];
            let next = alloc_block(zio, alloc, FIRST_BLOCK, txg, ck)?;
            self.chain = Some(Chain { next, written: Vec::new(), published: false });
            self.stats.fallbacks += 1;
            return Ok(Commit::NeedSync);
        };
        if !chain.published {
            self.stats.fallbacks += 1;
            return Ok(Commit::NeedSync);
        }
        let records = match self.records(os, txg) {
            Ok(r) => r,
            Err(_) => {
                // An object that no longer reads as written: let the sync decide.
                self.stats.fallbacks += 1;
                return Ok(Commit::NeedSync);
            }
        };
        let total: usize = records.iter().map(Vec::len).sum();
        let mut blocks: Vec<(BlkPtr, Vec<u8>)> = Vec::new();
        let mut fresh: Vec<BlkPtr> = Vec::new();
        let mut cur = chain.next;
        drop(chain);
        let mut i = 0;
        let ctx = zio.checksum_ctx();
        loop {
            let room = lr::block_room(cur.lsize() as usize);
            let start = i;
            let mut used = 0;
            while i < records.len() && used + records[i].len() <= room {
                used += records[i].len();
                i += 1;
            }
            let rest: usize = records[i..].iter().map(Vec::len).sum();
            let want = if rest > 0 { rest } else { total };
            let size = ((lr::ZIL_CHAIN_SIZE + want) as u64)
                .next_multiple_of(MIN_BLOCK)
                .clamp(MIN_BLOCK, lr::ZIL_MAX_BLKSZ);
            let mut ck = cur.cksum;
            ck[lr::ZIL_ZC_SEQ] = ck[lr::ZIL_ZC_SEQ].wrapping_add(1);
            let next = match alloc_block(zio, alloc, size, txg, ck) {
                Ok(b) => b,
                Err(_) => {
                    for b in &fresh {
                        free_block(alloc, b, txg)?;
                    }
                    self.stats.fallbacks += 1;
                    return Ok(Commit::NeedSync);
                }
            };
            fresh.push(next);
            let bytes: Vec<u8> = records[start..i].concat();
            let mut block =
                lr::build_block(cur.lsize() as usize, &next, &bytes, ByteOrder::Little).map_err(io)?;
            seal_zil_chain(&mut block, Cksum(cur.cksum), ctx, false).map_err(io)?;
            blocks.push((cur, block));
            cur = next;
            if i == records.len() {
                break;
            }
        }
        let chain = self.chain.as_mut().ok_or_else(|| io("intent log chain vanished"))?;
        let failed = zio.write_sealed(&blocks).err();
        // Written or not, these blocks are the chain's now: the next sync frees them and
        // moves the header to the new `next`.
        chain.written.extend(blocks.iter().map(|(bp, _)| *bp));
        chain.next = cur;
        if failed.is_some() {
            // The chain cannot go on through a block that did not land (its device may be
            // gone, as a failed log device is): the sync the caller runs now ends it, and
            // the next commit starts a new one wherever the allocator finds room.
            self.broken = true;
            self.end_requested = true;
            self.stats.fallbacks += 1;
            return Ok(Commit::NeedSync);
        }
        self.pending.clear();
        self.items.clear();
        self.stats.commits += 1;
        self.stats.records += records.len() as u64;
        self.stats.blocks += blocks.len() as u64;
        self.stats.bytes += blocks.iter().map(|(_, d)| d.len() as u64).sum::<u64>();
        Ok(Commit::Done)
    }

    /// Encoded records of the noted changes in their order: `TX_SETATTR`s, and `TX_WRITE`s
    /// whose data is read from the open txg.
    fn records(&mut self, os: &DirtyObjset, txg: u64) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        for it in &self.items {
            match it {
                Item::Writes { obj, ranges } => {
                    for &(s, e) in ranges {
                        write_records(os, txg, &mut self.lr_seq, *obj, s, e, &mut out)?;
                    }
                }
                Item::Attr { obj, change: c } => {
                    self.lr_seq += 1;
                    let bit = |set: bool, b: u64| if set { b } else { 0 };
                    let mask = bit(c.mode.is_some(), lr::AT_MODE)
                        | bit(c.uid.is_some(), lr::AT_UID)
                        | bit(c.gid.is_some(), lr::AT_GID)
                        | bit(c.size.is_some(), lr::AT_SIZE)
                        | bit(c.atime.is_some(), lr::AT_ATIME)
                        | bit(c.mtime.is_some(), lr::AT_MTIME);
                    let time = |t: Option<(u64, u64)>| t.map_or([0, 0], |(s, n)| [s, n]);
                    let rec = LogRecord {
                        txtype: lr::TX_SETATTR,
                        txg,
                        seq: self.lr_seq,
                        body: LrBody::Setattr {
                            foid: *obj,
                            mask,
                            mode: c.mode.unwrap_or(0),
                            uid: c.uid.unwrap_or(0),
                            gid: c.gid.unwrap_or(0),
                            size: c.size.unwrap_or(0),
                            atime: time(c.atime),
                            mtime: time(c.mtime),
                            xvattr: Vec::new(),
                        },
                    };
                    out.push(rec.encode(ByteOrder::Little));
                }
            }
        }
        for (&obj, ranges) in &self.pending {
            for (&s, &e) in ranges {
                write_records(os, txg, &mut self.lr_seq, obj, s, e, &mut out)?;
            }
        }
        Ok(out)
    }
}

/// Appends `TX_WRITE` records of `[s, e)` of object `obj` (data copied from the open txg,
/// at most [`COPY_CHUNK`] bytes each, chunks aligned to it).
fn write_records(
    os: &DirtyObjset,
    txg: u64,
    lr_seq: &mut u64,
    obj: u64,
    s: u64,
    e: u64,
    out: &mut Vec<Vec<u8>>,
) -> Result<()> {
    let mut off = s;
    while off < e {
        let len = (e - off).min(COPY_CHUNK - off % COPY_CHUNK);
        let mut data = vec![0u8; len as usize];
        os.read(obj, off, &mut data)?;
        *lr_seq += 1;
        let rec = LogRecord {
            txtype: lr::TX_WRITE,
            txg,
            seq: *lr_seq,
            body: LrBody::Write {
                foid: obj,
                offset: off,
                length: len,
                blkoff: 0,
                bp: BlkPtr::default(),
                data: Some(data),
            },
        };
        out.push(rec.encode(ByteOrder::Little));
        off += len;
    }
    Ok(())
}

/// Allocates a log block of `size` bytes in open txg `txg` whose checksum words are `ck`
/// (`zio_alloc_zil`: no compression, `zilog2`, type intent log, level 0, fill 0).
fn alloc_block(zio: &Zio, alloc: &AllocShared, size: u64, txg: u64, ck: [u64; 4]) -> Result<BlkPtr> {
    let dva = alloc.alloc_zil(zio, size, txg)?;
    let mut bp = BlkPtr::default();
    bp.dva[0] = dva;
    bp.set_prop(size, size, ZIO_COMPRESS_OFF, ZIO_CHECKSUM_ZILOG2, OT_INTENT_LOG, 0, ByteOrder::Little);
    bp.birth = txg;
    bp.cksum = ck;
    Ok(bp)
}

/// Frees a log block in syncing txg `txg`.
fn free_block(alloc: &AllocShared, bp: &BlkPtr, txg: u64) -> Result<()> {
    for d in bp.dva.iter().take(bp.ndvas()) {
        alloc.free_zil_dva(d, bp.birth.min(txg), txg)?;
    }
    Ok(())
}

/// A log as read from disk (`zil_parse`).
#[derive(Clone, Debug, Default)]
pub struct LogChain {
    /// Every block visited, in order: the last one is the first that did not read (the
    /// unwritten end of the chain), visited too.
    pub blocks: Vec<BlkPtr>,
    /// The records of the blocks that read, in order.
    pub records: Vec<LogRecord>,
    /// Why the walk stopped, when it was not the usual unwritten end.
    pub stop: Option<String>,
}

impl LogChain {
    /// The blocks `TX_WRITE` records point to (written directly, `WR_INDIRECT`).
    pub fn indirect_blocks(&self) -> Vec<BlkPtr> {
        let mut out = Vec::new();
        for r in &self.records {
            if let LrBody::Write { bp, data: None, .. } = &r.body {
                if !bp.is_hole() && !bp.is_embedded() {
                    out.push(*bp);
                }
            }
        }
        out
    }
}

/// Walks the chain of `zh` (OpenZFS `zil_parse`): blocks up to `zh_claim_blk_seq` and
/// records up to `zh_claim_lr_seq` once claimed, else until a block does not read or
/// verify or breaks the sequence. Bounded by `max_blocks`.
pub fn read_log(zio: &Zio, zh: &ZilHeaderPhys, max_blocks: usize) -> LogChain {
    let claimed = zh.claim_txg != 0;
    let blk_limit = if claimed { zh.claim_blk_seq } else { u64::MAX };
    let lr_limit =
        if claimed && zh.flags & lr::ZIL_CLAIM_LR_SEQ_VALID != 0 { zh.claim_lr_seq } else { u64::MAX };
    let mut out = LogChain::default();
    let mut seen = HashSet::new();
    let mut blk = zh.log;
    while !blk.is_hole() {
        let seq = blk.cksum[lr::ZIL_ZC_SEQ];
        if seq > blk_limit || !seen.insert(blk.dva[0]) {
            break;
        }
        if out.blocks.len() >= max_blocks {
            out.stop = Some(format!("more than {max_blocks} log blocks"));
            break;
        }
        out.blocks.push(blk);
        let Ok(data) = zio.read_physical(&blk) else { break };
        let (next, recs, order) = match lr::open_block(&blk, &data) {
            Ok(x) => x,
            Err(e) => {
                out.stop = Some(e.to_string());
                break;
            }
        };
        let (recs, err) = lr::parse_records(recs, order);
        let mut past = false;
        for r in recs {
            if r.seq > lr_limit {
                past = true;
                break;
            }
            out.records.push(r);
        }
        if let Some(e) = err {
            out.stop = Some(e.to_string());
            break;
        }
        if past {
            break;
        }
        let mut want = blk.cksum;
        want[lr::ZIL_ZC_SEQ] = want[lr::ZIL_ZC_SEQ].wrapping_add(1);
        if next.cksum != want {
            break;
        }
        blk = next;
    }
    out
}

/// A dataset's intent log found at a writable import: claimed (its blocks allocated in
/// the import's first txg, its header marked), waiting for the layer that knows files to
/// replay [`PendingLog::records`] and then [`PoolWriter::finish_intent_log`].
#[derive(Clone, Debug)]
pub struct PendingLog {
    pub ds: u64,
    pub name: String,
    /// A volume (records name object 1 of its objset) rather than a file system.
    pub volume: bool,
    /// The records to replay, in order: of txgs not synced, not replayed before.
    pub records: Vec<LogRecord>,
    blocks: Vec<BlkPtr>,
    indirect: Vec<BlkPtr>,
    claim_txg: u64,
}

/// Record types rzfs replays.
fn replayable(t: u64) -> bool {
    matches!(t, lr::TX_WRITE | lr::TX_TRUNCATE | lr::TX_WRITE2 | lr::TX_SETATTR)
}

/// Most log blocks read from one chain at import.
const MAX_CHAIN_BLOCKS: usize = 1 << 20;

impl crate::writer::PoolWriter {
    /// Import (OpenZFS `zil_claim` and `zil_check_log_chain`): for every head dataset
    /// whose objset has a log, reads the chain; a log with nothing to replay is destroyed
    /// at once, one with records is claimed and queued in [`PoolWriter::pending_logs`].
    /// Refuses the import, changing nothing, when a log holds records rzfs cannot replay.
    ///
    /// [`PoolWriter::pending_logs`]: crate::writer::PoolWriter::pending_logs
    pub(crate) fn claim_intent_logs(&mut self, pool: &crate::Pool) -> Result<()> {
        let first_txg = self.txg;
        let mut found = Vec::new();
        for ds in pool.dsl().list().map_err(io)? {
            if !matches!(ds.kind, dsl::DatasetKind::Filesystem | dsl::DatasetKind::Volume) {
                continue;
            }
            let bp = ds.objset_bp().map_err(io)?;
            if bp.is_hole() {
                continue;
            }
            let os = dmu::Objset::open(&pool.reader, &bp)?;
            let zh = os.phys.zil.clone();
            if zh.log.is_hole() {
                continue;
            }
            let chain = read_log(&self.reader.zio, &zh, MAX_CHAIN_BLOCKS);
            let claim_txg = if zh.claim_txg != 0 { zh.claim_txg } else { first_txg };
            let records: Vec<LogRecord> = chain
                .records
                .iter()
                .filter(|r| r.txg >= claim_txg && r.seq > zh.replay_seq)
                .cloned()
                .collect();
            if let Some(r) = records.iter().find(|r| !replayable(r.kind())) {
                return Err(PoolError::Unsupported(format!(
                    "dataset '{}' has an intent log with '{}' records, which rzfs cannot replay yet: import the pool with OpenZFS once to replay it, or here with -o readonly=on",
                    ds.name,
                    lr::txtype_name(r.txtype)
                )));
            }
            found.push((ds.ds_obj, ds.name.clone(), ds.kind == dsl::DatasetKind::Volume, zh, chain, records));
        }
        for (ds, name, volume, zh, chain, records) in found {
            let claimed = zh.claim_txg != 0;
            let claim_txg = if claimed { zh.claim_txg } else { first_txg };
            let indirect: Vec<BlkPtr> =
                chain.indirect_blocks().into_iter().filter(|b| b.logical_birth() >= claim_txg).collect();
            self.open_dataset_inherited(ds)?;
            let mut log = PendingLog { ds, name, volume, records, blocks: chain.blocks, indirect, claim_txg };
            if log.records.is_empty() {
                // Nothing to replay: only what is in a space map is freed.
                if !claimed {
                    log.blocks.retain(|b| b.logical_birth() < first_txg);
                    log.indirect.clear();
                }
                self.finish_intent_log(&log)?;
                continue;
            }
            if !claimed {
                for b in log.blocks.iter().chain(&log.indirect).filter(|b| b.logical_birth() >= first_txg) {
                    for d in b.dva.iter().take(b.ndvas()) {
                        self.alloc.claim_dva(d, first_txg).map_err(|e| {
                            PoolError::Io(format!(
                                "cannot claim the intent log of '{}' (block {b}): {e}; import read-only to read it",
                                log.name
                            ))
                        })?;
                    }
                }
                let header = ZilHeaderPhys {
                    claim_txg: first_txg,
                    replay_seq: zh.replay_seq,
                    log: zh.log,
                    claim_blk_seq: log.blocks.last().map_or(0, |b| b.cksum[lr::ZIL_ZC_SEQ]),
                    flags: zh.flags | lr::ZIL_REPLAY_NEEDED | lr::ZIL_CLAIM_LR_SEQ_VALID,
                    claim_lr_seq: log.records.iter().map(|r| r.seq).max().unwrap_or(0),
                };
                if let Some(d) = self.datasets.get_mut(&ds) {
                    d.os.set_zil_header(header);
                }
            }
            self.pending_logs.push(log);
        }
        Ok(())
    }

    /// Answers an `fsync` of dataset `ds` from the intent log ([`Zil::commit`]). `NeedSync`
    /// also when the dataset is not open for writing or a txg is in doubt (a failed sync
    /// not redone yet: the log must not lead past state that may never become durable).
    pub fn zil_commit(&mut self, ds: u64) -> Result<Commit> {
        if !self.is_durable() {
            return Ok(Commit::NeedSync);
        }
        let (txg, zio) = (self.txg, self.reader.zio.clone());
        let Some(d) = self.datasets.get_mut(&ds) else { return Ok(Commit::NeedSync) };
        d.zil.commit(&d.os, &zio, &self.alloc, ds, txg)
    }

    /// Ends a replayed (or empty) log in the open txg (OpenZFS `zil_destroy`): its blocks
    /// and the claimed blocks of its write records are freed, the header cleared.
    pub fn finish_intent_log(&mut self, log: &PendingLog) -> Result<()> {
        let txg = self.txg;
        // A header or record naming a block that is not a log block (a damaged or hostile
        // image) must not free it: only what the log owns is freed.
        let is_log = |b: &&BlkPtr| {
            b.object_type() == OT_INTENT_LOG
                && b.level() == 0
                && matches!(b.checksum(), ZIO_CHECKSUM_ZILOG | ZIO_CHECKSUM_ZILOG2)
        };
        let chain = log.blocks.iter().filter(is_log);
        let data = log.indirect.iter().filter(|b| b.object_type() != OT_INTENT_LOG && !b.is_embedded());
        for b in chain.chain(data) {
            for d in b.dva.iter().take(b.ndvas()) {
                // A block claimed in this txg counts as born in it.
                let lb = b.logical_birth();
                let birth = if lb < log.claim_txg { lb } else { lb.max(log.claim_txg).min(txg) };
                self.alloc.free_zil_dva(d, birth, txg)?;
            }
        }
        let d = self
            .datasets
            .get_mut(&log.ds)
            .ok_or_else(|| PoolError::Io(format!("dataset '{}' is not open for writing", log.name)))?;
        d.os.set_zil_header(ZilHeaderPhys::default());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_writes_merge_into_disjoint_ranges() {
        let mut z = Zil::default();
        for (off, len) in [(100, 10), (0, 5), (200, 50), (105, 20), (5, 10), (300, 1), (240, 70)] {
            z.note_write(7, off, len);
        }
        let got: Vec<(u64, u64)> = z.pending[&7].iter().map(|(&s, &e)| (s, e)).collect();
        assert_eq!(got, vec![(0, 15), (100, 125), (200, 310)]);
        z.note_write(7, 0, 400);
        assert_eq!(z.pending[&7].len(), 1);
        z.taint();
        z.note_write(8, 0, 1);
        assert!(z.pending.is_empty(), "a tainted txg notes nothing");
        z.synced();
        z.note_write(8, 0, 1);
        assert_eq!(z.pending.len(), 1);
    }

    #[test]
    fn attribute_changes_keep_their_place_and_cut_earlier_writes() {
        let mut z = Zil::default();
        z.note_write(7, 0, 100);
        z.note_write(8, 0, 10);
        let cut = AttrChange { size: Some(50), ..Default::default() };
        z.note_setattr(7, cut);
        z.note_write(7, 60, 10);
        let times = AttrChange { mtime: Some((5, 6)), ..Default::default() };
        z.note_setattr(7, times);
        z.note_setattr(7, AttrChange { size: Some(20), ..Default::default() });
        assert_eq!(
            z.items,
            vec![
                Item::Writes { obj: 7, ranges: vec![(0, 20)] },
                Item::Attr { obj: 7, change: cut },
                Item::Attr { obj: 7, change: times },
                Item::Attr { obj: 7, change: AttrChange { size: Some(20), ..Default::default() } },
            ],
            "the write of [60, 70) was cut away whole, [0, 100) to [0, 20)"
        );
        assert_eq!(z.pending.keys().copied().collect::<Vec<_>>(), vec![8], "other objects wait at the end");
        z.taint();
        assert!(z.items.is_empty() && z.pending.is_empty());
    }
}
