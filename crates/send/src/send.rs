//! # Generating a send stream from a snapshot (`zfs send`)
//!
//! The stream describes the snapshot's objset as OpenZFS's `dmu_send.c` does, record for
//! record, so that OpenZFS's `zfs receive` rebuilds it:
//!
//! - A pre-order walk of the meta-dnode's tree in block order. Each dnode block visited
//!   yields, per dnode slot (object 0 excepted), an OBJECT record (the dnode's type, block
//!   size, bonus) followed at once by a FREE of everything past its last block, then the
//!   object's own blocks; a free slot yields a FREEOBJECTS of one object; a hole in the
//!   meta-dnode a FREEOBJECTS of every object it could hold.
//! - Within an object, level-0 blocks become WRITE records (WRITE_EMBEDDED for embedded
//!   pointers when the stream allows them), holes FREE records, in increasing offset, so
//!   each (object, offset) is written at most once; a spill block becomes a SPILL record.
//! - Incremental (`from_txg` > 0): only subtrees born after `from_txg` are walked (block
//!   births are what make an incremental send cheap). A hole is sent when it was punched
//!   after `from_txg` (`hole_birth`) or when it has no birth at all: such a hole may be one
//!   that existed before `hole_birth` was enabled, and sending its FREE is always correct
//!   (the range is a hole in the snapshot), only sometimes unnecessary — the cautious side
//!   of OpenZFS's `traverse_visitbp` rule.
//! - Consecutive FREE records of one object, and consecutive FREEOBJECTS, are merged into
//!   one (OpenZFS `dump_free`/`dump_freeobjects`); FREEOBJECTS never names objects past what
//!   the meta-dnode could hold (old receivers looped on huge ones).
//! - Without `LARGE_BLOCKS`, blocks above 128 KiB are sent as 128 KiB WRITE records and
//!   their objects announced with 128 KiB blocks; with `COMPRESSED`, compressed data blocks
//!   are sent as stored (metadata always logical).
//!
//! Throughput: each object's blocks are read ahead in batches on several threads (reading
//! verifies checksums, rebuilds parity, decompresses: CPU work), and the records go through
//! a bounded queue to a writer thread that owns the [`StreamWriter`] (the stream's running
//! fletcher-4 and the writes), so neither half waits for the other.
//!
//! Encrypted datasets (which need raw sends, `-w`) and redacted ones are refused.

use crate::stream::*;
use dmu::{DmuError, Objset};
use ondisk::blkptr::{BlkPtr, BLKPTR_SIZE};
use ondisk::dmu_types::DmuObjectType;
use ondisk::dnode::{DnodePhys, DNODE_FLAG_SPILL_BLKPTR, DNODE_SLOT_SIZE};
use std::collections::HashSet;
use std::io::Write;

/// Errors of a send.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("{0}")]
    Dmu(#[from] DmuError),
    #[error("cannot write the stream: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Unsupported(String),
    #[error("interrupted")]
    Interrupted,
}

pub type Result<T> = std::result::Result<T, SendError>;

/// `SPA_OLD_MAXBLOCKSIZE`: the largest WRITE without the `LARGE_BLOCKS` stream feature.
const OLD_MAX_BLOCK: u64 = 128 << 10;
/// `ZIO_CHECKSUM_OFF`, the checksum type of WRITE records whose data has no usable
/// block checksum (split large blocks, embedded blocks).
const ZIO_CHECKSUM_OFF: u8 = 2;
/// `ZIO_COMPRESS_LZ4`/`ZSTD`: embedded blocks so compressed need the matching stream feature.
const ZIO_COMPRESS_LZ4: u8 = 15;
const ZIO_COMPRESS_ZSTD: u8 = 16;
/// `BP_EMBEDDED_TYPE_DATA`.
const EMBEDDED_TYPE_DATA: u8 = 0;

/// What to send.
#[derive(Clone, Debug, Default)]
pub struct SendParams {
    /// `pool/fs@snap` (BEGIN `drr_toname`).
    pub toname: String,
    /// The snapshot's guid.
    pub toguid: u64,
    /// The incremental source's guid (0: a full stream).
    pub fromguid: u64,
    /// The incremental source's creation txg (0: a full stream).
    pub from_txg: u64,
    /// The snapshot's creation time.
    pub creation_time: u64,
    /// BEGIN `drr_flags` (`DRR_FLAG_CLONE`, `DRR_FLAG_CI_DATA`; FREERECORDS and SPILL_BLOCK
    /// are always added, as OpenZFS does).
    pub flags: u32,
    /// Stream feature flags (`FEATURE_*`), decided by the caller from the pool's features
    /// and the options (`-L`, `-e`, `-c`) as OpenZFS's `setup_featureflags` does.
    pub features: u64,
    /// Resume a stream a receive kept (`zfs send -t`): start at this (object, byte offset),
    /// the object's OBJECT record sent again (receiving it twice is harmless). The stream
    /// then carries `FEATURE_RESUMING` and the point in its BEGIN payload.
    pub resume: Option<(u64, u64)>,
    /// Leave out the END record: a `send --saved` of a partially received stream, which
    /// its receiver must keep as partial too (`dmu_send_impl` with `savedok`).
    pub no_end: bool,
}

/// Totals of a send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendStats {
    pub records: u64,
    /// Bytes of block contents in WRITE/SPILL/WRITE_EMBEDDED payloads.
    pub data_bytes: u64,
}

enum Pending {
    None,
    Free(Free),
    FreeObjects(FreeObjects),
}

/// One position in an object's block tree reached by the walk.
enum Event {
    /// A level-0 block that is not a hole.
    Data(u64, BlkPtr),
    /// A hole covering level-0 blocks `[first, end)` (`end` saturates at 2^64).
    Hole(u64, u64),
}

/// Records on their way to the writer thread.
type Outbox = std::sync::mpsc::SyncSender<(Record, Vec<u8>)>;

/// Records queued between the reading thread and the writer thread (with 16 MiB blocks,
/// 128 MiB at most).
const QUEUE: usize = 8;

struct Sender<'a> {
    os: &'a Objset,
    p: &'a SendParams,
    /// To the writer thread, which owns the [`StreamWriter`] (the stream's fletcher-4 and
    /// its writes run there, beside the reads and their checksums).
    out: Outbox,
    /// Bytes of the stream so far (records and payloads).
    bytes: u64,
    pending: Pending,
    /// Objects the meta-dnode can hold (FREEOBJECTS are clamped to it).
    max_object: u64,
    stats: SendStats,
    /// Called with the stream's byte count after every data record; `false` interrupts.
    progress: &'a mut dyn FnMut(u64) -> bool,
}

/// Writes the stream of `os` (a snapshot's objset) to `out`: BEGIN, the records, END.
/// `progress` is called with the byte count as the stream grows; returning `false`
/// interrupts the send (the stream is then left without its END record).
pub fn send<W: Write + Send>(
    os: &Objset,
    p: &SendParams,
    out: &mut StreamWriter<W>,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<SendStats> {
    if os.phys.meta_dnode.blkptr.first().is_some_and(|bp| bp.uses_crypt()) {
        return Err(SendError::Unsupported(
            "the dataset is encrypted: only raw sends (-w) can send it, which rzfs does not support yet"
                .into(),
        ));
    }
    let md = &os.phys.meta_dnode;
    let per_block = md.data_block_size() / DNODE_SLOT_SIZE as u64;
    let max_object = per_block.saturating_mul(md.maxblkid.saturating_add(1));
    let mut features = p.features;
    let mut payload = Vec::new();
    if let Some((obj, off)) = p.resume {
        features |= FEATURE_RESUMING;
        let mut nv = ondisk::nvlist::NvList::new();
        nv.add_u64("resume_object", obj).add_u64("resume_offset", off);
        payload = nv.encode();
    }
    let begin = Begin {
        magic: BACKUP_MAGIC,
        versioninfo: HDRTYPE_SUBSTREAM | (features << 2),
        creation_time: p.creation_time,
        objset_type: os.os_type() as u32,
        flags: p.flags | DRR_FLAG_FREERECORDS | DRR_FLAG_SPILL_BLOCK,
        toguid: p.toguid,
        fromguid: p.fromguid,
        toname: p.toname.clone(),
    };
    std::thread::scope(|sc| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Record, Vec<u8>)>(QUEUE);
        let writer = sc.spawn(move || -> std::io::Result<()> {
            for (rec, payload) in rx {
                out.write(&rec, &payload)?;
            }
            Ok(())
        });
        let mut s = Sender {
            os,
            p,
            out: tx,
            bytes: 0,
            pending: Pending::None,
            max_object,
            stats: SendStats::default(),
            progress,
        };
        let r = (|| {
            s.emit(Record::Begin(begin), payload)?;
            s.meta_dnode()?;
            s.flush()?;
            if !p.no_end {
                s.emit(Record::End(End { checksum: [0; 4], toguid: p.toguid }), Vec::new())?;
            }
            Ok(s.stats)
        })();
        drop(s);
        match writer.join() {
            // The writer's error explains a closed queue better than the reader's.
            Ok(Err(e)) => Err(SendError::Io(e)),
            Err(_) => Err(SendError::Io(std::io::Error::other("the stream writer panicked"))),
            Ok(Ok(())) => r,
        }
    })
}

impl Sender<'_> {
    fn feature(&self, f: u64) -> bool {
        self.p.features & f != 0
    }

    fn emit(&mut self, rec: Record, payload: Vec<u8>) -> Result<()> {
        self.bytes += (RECORD_SIZE + payload.len()) as u64;
        self.out.send((rec, payload)).map_err(|_| std::io::Error::other("the stream writer stopped"))?;
        self.stats.records += 1;
        Ok(())
    }

    /// Writes the pending FREE/FREEOBJECTS record, if any.
    fn flush(&mut self) -> Result<()> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => Ok(()),
            Pending::Free(f) => self.emit(Record::Free(f), Vec::new()),
            Pending::FreeObjects(f) => self.emit(Record::FreeObjects(f), Vec::new()),
        }
    }

    /// A FREE of `[offset, offset + length)` of `object` (`length` = [`OBJECT_END`]: to the
    /// end), merged with the pending one when they touch.
    fn free(&mut self, object: u64, offset: u64, length: u64) -> Result<()> {
        if let Pending::Free(f) = &mut self.pending {
            if f.object == object && f.offset.checked_add(f.length) == Some(offset) {
                f.length = match f.length.checked_add(length) {
                    Some(l) if length != OBJECT_END => l,
                    _ => OBJECT_END,
                };
                return Ok(());
            }
        }
        self.flush()?;
        let length = if offset.checked_add(length).is_none() { OBJECT_END } else { length };
        let f = Free { object, offset, length, toguid: self.p.toguid };
        if length == OBJECT_END {
            // Nothing can follow a free to the end: written at once.
            return self.emit(Record::Free(f), Vec::new());
        }
        self.pending = Pending::Free(f);
        Ok(())
    }

    /// FREEOBJECTS of `[first, first + count)`, clamped to what the meta-dnode can hold and
    /// merged with the pending one when they touch.
    fn free_objects(&mut self, first: u64, count: u64) -> Result<()> {
        let mut count = count;
        let mut first = first;
        if let Some((obj, _)) = self.p.resume {
            // Resuming: what lies before the resume point was received already.
            if first.saturating_add(count) <= obj {
                return Ok(());
            }
            if first < obj {
                count -= obj - first;
                first = obj;
            }
        }
        if self.max_object > 0 {
            if self.max_object <= first {
                return Ok(());
            }
            count = count.min(self.max_object - first);
        }
        if let Pending::FreeObjects(f) = &mut self.pending {
            if f.firstobj.checked_add(f.numobjs) == Some(first) {
                f.numobjs = f.numobjs.saturating_add(count);
                return Ok(());
            }
        }
        self.flush()?;
        self.pending =
            Pending::FreeObjects(FreeObjects { firstobj: first, numobjs: count, toguid: self.p.toguid });
        Ok(())
    }

    fn meta_dnode(&mut self) -> Result<()> {
        let md = self.os.phys.meta_dnode.clone();
        let per_block = md.data_block_size() / DNODE_SLOT_SIZE as u64;
        if per_block == 0 {
            return Err(
                DmuError::Corrupt { what: "meta-dnode", detail: "block size below a dnode".into() }.into()
            );
        }
        let order = self.os.dnode_byte_order();
        let os = self.os;
        let from = self.p.from_txg;
        walk(os, &md, from, &mut |e| match e {
            Event::Hole(first, end) => {
                let f = first.saturating_mul(per_block);
                let n = end.saturating_sub(first).saturating_mul(per_block);
                self.free_objects(f, n)
            }
            Event::Data(blkid, bp) => {
                let block = os.reader().read_bp(&bp)?;
                let mut slot = 0usize;
                while (slot as u64) < per_block {
                    let object = blkid.saturating_mul(per_block).saturating_add(slot as u64);
                    let raw = block.get(slot * DNODE_SLOT_SIZE..).unwrap_or(&[]);
                    let dn =
                        if raw.len() >= DNODE_SLOT_SIZE { DnodePhys::parse(raw, order).ok() } else { None };
                    let step = dn.as_ref().map_or(1, |d| usize::from(d.extra_slots) + 1);
                    if object != 0 {
                        match dn {
                            Some(d) if d.object_type != 0 => self.object(object, &d)?,
                            _ => self.free_objects(object, 1)?,
                        }
                    }
                    slot += step;
                }
                Ok(())
            }
        })
    }

    fn object(&mut self, object: u64, dn: &DnodePhys) -> Result<()> {
        let resume_at = match self.p.resume {
            Some((obj, _)) if object < obj => return Ok(()),
            Some((obj, off)) if object == obj => off,
            _ => 0,
        };
        self.flush()?;
        let large = self.feature(FEATURE_LARGE_BLOCKS);
        let blksz = dn.data_block_size();
        let sent_blksz = if large { blksz } else { blksz.min(OLD_MAX_BLOCK) };
        let mut bonus = dn.bonus.clone();
        bonus.resize(dn.bonus.len().div_ceil(8) * 8, 0);
        let rec = Object {
            object,
            object_type: u32::from(dn.object_type),
            bonustype: u32::from(dn.bonustype),
            blksz: sent_blksz as u32,
            bonuslen: u32::from(dn.bonuslen),
            checksumtype: dn.checksum,
            compress: dn.compress,
            dn_slots: dn.extra_slots.saturating_add(1),
            flags: if dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0 { DRR_OBJECT_SPILL } else { 0 },
            raw_bonuslen: 0,
            toguid: self.p.toguid,
            indblkshift: 0,
            nlevels: 0,
            nblkptr: 0,
            maxblkid: 0,
        };
        self.emit(Record::Object(rec), bonus)?;
        // Everything past the last block is free (a truncation since the source).
        let end = dn.maxblkid.checked_add(1).and_then(|n| n.checked_mul(blksz));
        if let Some(end) = end {
            self.free(object, end, OBJECT_END)?;
        }
        let metadata = DmuObjectType::from_u8(dn.object_type).is_metadata();
        let os = self.os;
        // Events are handled in batches whose blocks are read in parallel (read-ahead).
        let mut batch: Vec<Event> = Vec::new();
        walk(os, dn, self.p.from_txg, &mut |e| {
            let keep = match &e {
                Event::Hole(first, end) => {
                    (metadata || *first <= dn.maxblkid) && end.saturating_mul(blksz) > resume_at
                }
                Event::Data(blkid, _) => {
                    (metadata || *blkid <= dn.maxblkid)
                        && blkid.saturating_add(1).saturating_mul(blksz) > resume_at
                }
            };
            if keep {
                batch.push(e);
            }
            if batch.len() >= READ_AHEAD || (batch.len() as u64).saturating_mul(blksz) >= READ_AHEAD_BYTES {
                self.run_batch(object, dn, resume_at, &mut batch)?;
            }
            Ok(())
        })?;
        self.run_batch(object, dn, resume_at, &mut batch)?;
        if let Some(bp) = dn.spill.filter(|b| !b.is_hole() && dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0) {
            self.spill(object, &bp)?;
        }
        Ok(())
    }

    fn spill(&mut self, object: u64, bp: &BlkPtr) -> Result<()> {
        self.flush()?;
        let data = self.os.reader().read_bp(bp)?;
        let rec = Spill {
            object,
            length: data.len() as u64,
            toguid: self.p.toguid,
            // Sent although unchanged since the source (OpenZFS sends them for old receivers
            // that would otherwise drop the spill block).
            flags: if bp.logical_birth() <= self.p.from_txg { DRR_SPILL_UNMODIFIED } else { 0 },
            object_type: u32::from(bp.object_type()),
            ..Default::default()
        };
        self.stats.data_bytes += data.len() as u64;
        self.emit(Record::Spill(rec), data.to_vec())?;
        self.tick()
    }

    fn tick(&mut self) -> Result<()> {
        if (self.progress)(self.bytes) {
            Ok(())
        } else {
            Err(SendError::Interrupted)
        }
    }

    /// How the data of a block travels: as its embedded payload, as stored (compressed
    /// send), or logical (read and decompressed).
    fn read_kind(&self, dn: &DnodePhys, bp: &BlkPtr) -> ReadKind {
        if bp.is_embedded() && self.embed_ok(bp) {
            return ReadKind::None;
        }
        let metadata = DmuObjectType::from_u8(dn.object_type).is_metadata();
        let split = dn.data_block_size() > OLD_MAX_BLOCK && !self.feature(FEATURE_LARGE_BLOCKS);
        if self.feature(FEATURE_COMPRESSED) && !bp.is_embedded() && bp.compress() != 2 && !metadata && !split
        {
            ReadKind::Physical
        } else {
            ReadKind::Logical
        }
    }

    /// Emits a batch of an object's events in order, its blocks read first, in parallel.
    fn run_batch(
        &mut self,
        object: u64,
        dn: &DnodePhys,
        resume_at: u64,
        batch: &mut Vec<Event>,
    ) -> Result<()> {
        let jobs: Vec<(BlkPtr, ReadKind)> = batch
            .iter()
            .filter_map(|e| match e {
                Event::Data(_, bp) => Some((*bp, self.read_kind(dn, bp))),
                Event::Hole(..) => None,
            })
            .collect();
        let mut data = read_parallel(self.os, &jobs).into_iter();
        let blksz = dn.data_block_size();
        for e in batch.drain(..) {
            match e {
                Event::Hole(first, end) => {
                    let Some(offset) = first.checked_mul(blksz) else { continue };
                    let stop = end.saturating_mul(blksz);
                    let offset = offset.max(resume_at);
                    self.free(object, offset, stop - offset)?;
                }
                Event::Data(blkid, bp) => {
                    let d = data.next().unwrap_or(Ok(None))?;
                    self.write(object, dn, blkid, &bp, d)?;
                }
            }
        }
        Ok(())
    }

    fn write(
        &mut self,
        object: u64,
        dn: &DnodePhys,
        blkid: u64,
        bp: &BlkPtr,
        read: Option<Vec<u8>>,
    ) -> Result<()> {
        self.flush()?;
        let blksz = dn.data_block_size();
        let offset = blkid.checked_mul(blksz).ok_or_else(|| {
            SendError::Dmu(DmuError::Corrupt {
                what: "object",
                detail: format!("object {object}: block {blkid} beyond 2^64 bytes"),
            })
        })?;
        if bp.is_embedded() && self.embed_ok(bp) {
            let payload = bp
                .embedded_payload()
                .map_err(|e| DmuError::Corrupt { what: "embedded block", detail: e.to_string() })?;
            let psize = payload.len() as u32;
            let mut padded = payload;
            padded.resize(padded.len().div_ceil(8) * 8, 0);
            let rec = WriteEmbedded {
                object,
                offset,
                length: blksz,
                toguid: self.p.toguid,
                compression: bp.compress(),
                etype: bp.embedded_type(),
                lsize: bp.lsize() as u32,
                psize,
            };
            self.stats.data_bytes += padded.len() as u64;
            self.emit(Record::WriteEmbedded(rec), padded)?;
            return self.tick();
        }
        let metadata = DmuObjectType::from_u8(dn.object_type).is_metadata();
        let split = blksz > OLD_MAX_BLOCK && !self.feature(FEATURE_LARGE_BLOCKS);
        let raw_compressed = self.feature(FEATURE_COMPRESSED)
            && !bp.is_embedded()
            && bp.compress() != 2
            && !metadata
            && !split;
        let mut rec = WriteRec {
            object,
            object_type: u32::from(dn.object_type),
            offset,
            logical_size: blksz,
            toguid: self.p.toguid,
            checksumtype: ZIO_CHECKSUM_OFF,
            ..Default::default()
        };
        let read = match read {
            Some(r) => r,
            None if raw_compressed => self.os.reader().zio.read_physical(bp).map_err(DmuError::from)?,
            None => self.os.reader().zio.read(bp).map_err(DmuError::from)?,
        };
        if raw_compressed {
            let phys = read;
            rec.compressiontype = bp.compress();
            rec.compressed_size = phys.len() as u64;
            rec.logical_size = bp.lsize();
            self.set_key(&mut rec, bp);
            self.stats.data_bytes += phys.len() as u64;
            self.emit(Record::Write(rec), phys)?;
            return self.tick();
        }
        let mut data = read;
        data.resize(blksz as usize, 0);
        if split {
            for (i, piece) in data.chunks(OLD_MAX_BLOCK as usize).enumerate() {
                let r = WriteRec {
                    offset: offset + i as u64 * OLD_MAX_BLOCK,
                    logical_size: piece.len() as u64,
                    ..rec.clone()
                };
                self.stats.data_bytes += piece.len() as u64;
                self.emit(Record::Write(r), piece.to_vec())?;
            }
            return self.tick();
        }
        if !bp.is_embedded() {
            self.set_key(&mut rec, bp);
        }
        self.stats.data_bytes += data.len() as u64;
        self.emit(Record::Write(rec), data)?;
        self.tick()
    }

    /// The dedup key of a WRITE: the block's checksum and sizes (`drr_key`), and the
    /// checksum type, flagged dedup-capable for the cryptographic ones.
    fn set_key(&self, rec: &mut WriteRec, bp: &BlkPtr) {
        rec.checksumtype = bp.checksum();
        // sha256 (8), sha512 (11), skein (12), blake3 (14): ZCHECKSUM_FLAG_DEDUP.
        if matches!(bp.checksum(), 8 | 11 | 12 | 14) {
            rec.flags |= DRR_CHECKSUM_DEDUP;
        }
        rec.key_cksum = bp.cksum;
        // DDK_SET_LSIZE/PSIZE (in 512-byte sectors minus one), COMPRESS, CRYPT.
        let lsize = (bp.lsize() >> 9).saturating_sub(1) & 0xffff;
        let psize = (bp.psize() >> 9).saturating_sub(1) & 0xffff;
        rec.key_prop = lsize | (psize << 16) | ((u64::from(bp.compress()) & 0x7f) << 32);
    }

    /// May this embedded pointer travel as WRITE_EMBEDDED (`send_do_embed`)?
    fn embed_ok(&self, bp: &BlkPtr) -> bool {
        self.feature(FEATURE_EMBED_DATA)
            && bp.embedded_type() == EMBEDDED_TYPE_DATA
            && (bp.compress() < ZIO_COMPRESS_LZ4 || self.feature(FEATURE_LZ4))
            && (bp.compress() != ZIO_COMPRESS_ZSTD || self.feature(FEATURE_ZSTD))
    }
}

/// Walks `dn`'s block tree in block order, reporting level-0 blocks and holes born after
/// `from_txg` (holes without a birth too; see the module comment). An indirect block reached twice is
/// corruption (a crafted tree whose walk would be exponential).
fn walk(os: &Objset, dn: &DnodePhys, from_txg: u64, f: &mut dyn FnMut(Event) -> Result<()>) -> Result<()> {
    if dn.nlevels == 0 || dn.indblkshift < 7 {
        return Ok(());
    }
    let epbs = u32::from(dn.indblkshift - 7);
    let top = dn.nlevels - 1;
    let mut seen = HashSet::new();
    for (i, bp) in dn.blkptr.iter().enumerate() {
        visit(os, bp, top, i as u64, epbs, from_txg, &mut seen, f)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn visit(
    os: &Objset,
    bp: &BlkPtr,
    level: u8,
    blkid: u64,
    epbs: u32,
    from_txg: u64,
    seen: &mut HashSet<(u64, u64)>,
    f: &mut dyn FnMut(Event) -> Result<()>,
) -> Result<()> {
    let shift = epbs.saturating_mul(u32::from(level));
    let first = shl(blkid, shift);
    if bp.is_hole() {
        let birth = bp.logical_birth();
        if birth == 0 || birth > from_txg {
            if let Some(first) = first {
                let end = blkid.checked_add(1).and_then(|b| shl(b, shift)).unwrap_or(u64::MAX);
                f(Event::Hole(first, end))?;
            }
        }
        return Ok(());
    }
    if bp.logical_birth() <= from_txg {
        return Ok(());
    }
    let Some(first) = first else {
        return Err(
            DmuError::Corrupt { what: "block tree", detail: format!("{bp}: block ids beyond 2^64") }.into()
        );
    };
    if level == 0 {
        return f(Event::Data(first, *bp));
    }
    if !bp.is_embedded() && !seen.insert((bp.dva[0].vdev(), bp.dva[0].offset())) {
        return Err(DmuError::Corrupt {
            what: "indirect block",
            detail: format!("{bp} is referenced twice in one object"),
        }
        .into());
    }
    let block = os.reader().read_bp(bp)?;
    let order = bp.byte_order();
    for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
        let child = BlkPtr::parse(raw, order).map_err(DmuError::from)?;
        let Some(cid) = shl(blkid, epbs).and_then(|b| b.checked_add(i as u64)) else {
            if child.is_hole() {
                continue;
            }
            return Err(DmuError::Corrupt {
                what: "indirect block",
                detail: format!("{bp}: block ids beyond 2^64"),
            }
            .into());
        };
        visit(os, &child, level - 1, cid, epbs, from_txg, seen, f)?;
    }
    Ok(())
}

/// Blocks read ahead of the stream (per object), and at most this many bytes of them.
const READ_AHEAD: usize = 64;
const READ_AHEAD_BYTES: u64 = 8 << 20;
/// Threads reading them.
const READERS: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadKind {
    None,
    Physical,
    Logical,
}

/// Reads blocks on up to [`READERS`] threads (checksums, parity and decompression are CPU
/// work; device reads overlap), results in the order of `jobs`. Data blocks are read past
/// the block cache: a send streams through a whole dataset once.
fn read_parallel(os: &Objset, jobs: &[(BlkPtr, ReadKind)]) -> Vec<Result<Option<Vec<u8>>>> {
    type Read = Result<Option<Vec<u8>>>;
    let one = |(bp, kind): &(BlkPtr, ReadKind)| -> Read {
        let zio = &os.reader().zio;
        Ok(match kind {
            ReadKind::None => None,
            ReadKind::Physical => Some(zio.read_physical(bp).map_err(DmuError::from)?),
            ReadKind::Logical => Some(zio.read(bp).map_err(DmuError::from)?),
        })
    };
    let reads = jobs.iter().filter(|(_, k)| *k != ReadKind::None).count();
    if reads < 2 {
        return jobs.iter().map(one).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Read>>> =
        jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|sc| {
        for _ in 0..READERS.min(reads) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else { break };
                let r = one(job);
                *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    slots.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()).unwrap_or(Ok(None))).collect()
}

/// `x << s` when no bit is lost.
fn shl(x: u64, s: u32) -> Option<u64> {
    if x == 0 {
        return Some(0);
    }
    x.checked_shl(s).filter(|v| v >> s == x)
}
