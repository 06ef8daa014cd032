//! Traversal of every block pointer of an objset (the basis of scrub, `zdb -b`-style block
//! statistics and copy verification), following OpenZFS `module/zfs/dmu_traverse.c`.
//!
//! Order: the meta-dnode's tree depth first; inside every level-0 dnode block, each allocated
//! dnode's tree (and spill block); then the user/group/project accounting dnodes. Every
//! pointer is visited before its children (`TRAVERSE_PRE`). Holes are not visited. Blocks
//! born at or before `min_birth` are skipped together with their subtrees — a snapshot's
//! blocks are then visited once, by the oldest dataset that references them.
//!
//! Reading: indirect blocks and dnode blocks must be read to descend, so they are always
//! verified; level-0 data blocks (and spill blocks) are read only when `read_data` is set, and
//! then *raw*: only the physical bytes are checksum-verified, not decompressed (what `zdb -cc`
//! does with `ZIO_FLAG_RAW`). This is what lets a traversal verify encrypted datasets without
//! their keys: data blocks stay ciphertext, and dnode blocks are read with
//! `Zio::read_keyless` (their dnode cores and block pointers are plaintext). A block that
//! fails to read is reported to the error hook and its subtree skipped (`TRAVERSE_HARD`).
//!
//! The intent log is walked separately by [`traverse_zil`] (only for head datasets, as
//! OpenZFS `traverse_impl` does).

use crate::{DmuError, Objset, Reader, Result};
use ondisk::blkptr::{BlkPtr, BLKPTR_SIZE};
use ondisk::dnode::{DnodePhys, DNODE_SLOT_SIZE};
use ondisk::objset::ZilHeaderPhys;
use ondisk::zil;
use ondisk::ByteOrder;
use std::collections::HashSet;
use std::sync::Arc;

/// `Visit::level` of intent-log blocks and of the blocks named by their write records
/// (OpenZFS `ZB_ZIL_LEVEL` = -2, stored here as an unsigned byte).
pub const ZIL_LEVEL: u8 = 0xfe;

/// One visited block pointer.
#[derive(Debug)]
pub struct Visit<'a> {
    pub bp: &'a BlkPtr,
    /// Object number (0 = the meta-dnode; u64::MAX-n = accounting objects; for ZIL blocks 0,
    /// for ZIL write records the file's object).
    pub object: u64,
    /// Indirection level, or [`ZIL_LEVEL`].
    pub level: u8,
    /// Block id (u64::MAX for spill blocks; the log sequence number for ZIL blocks).
    pub blkid: u64,
}

/// Options of a traversal.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraverseOpts {
    /// Skip blocks with logical birth ≤ this txg.
    pub min_birth: u64,
    /// Read (and so verify) level-0 data blocks too.
    pub read_data: bool,
    /// Resume point `(object, level-0 block id)` of an interrupted walk (a scan bookmark):
    /// subtrees that lie wholly before it are skipped, and pointers whose range starts
    /// before it are descended without being visited again (pre-order: they were visited
    /// before the interruption). Blocks of the meta-dnode count as the objects they hold.
    pub resume: Option<(u64, u64)>,
}

/// Where a visited pointer's subtree lies for [`TraverseOpts::resume`]: the first and one
/// past the last `(object, level-0 block id)` it covers.
fn span_of(object: u64, level: u8, blkid: u64, epbs: u32, dnodes_per_block: u64) -> ((u64, u64), (u64, u64)) {
    let shift = epbs.saturating_mul(u32::from(level));
    let first = blkid.checked_shl(shift).filter(|v| v >> shift == blkid).unwrap_or(u64::MAX);
    let end =
        blkid.saturating_add(1).checked_shl(shift).filter(|v| *v >> shift == blkid + 1).unwrap_or(u64::MAX);
    if object == 0 {
        // Dnode blocks: the objects they hold.
        let f = first.saturating_mul(dnodes_per_block);
        let e = end.saturating_mul(dnodes_per_block);
        ((f, 0), (e, 0))
    } else {
        ((object, first), (object, end))
    }
}

/// Visitor callback type; an `Err` aborts the traversal.
pub type Visitor<'v> = dyn FnMut(&Visit) -> Result<()> + 'v;

/// Errors met on individual blocks when the caller wants to go on (scrub): the visitor gets
/// them through this hook instead of aborting.
pub type ErrorHook<'v> = dyn FnMut(&BlkPtr, u64, &DmuError) + 'v;

/// Walks every block pointer of `os`.
pub fn traverse_objset(
    os: &Objset,
    opts: TraverseOpts,
    visit: &mut Visitor,
    on_error: &mut ErrorHook,
) -> Result<()> {
    let md = os.phys.meta_dnode.clone();
    let dnodes_per_block = (u64::from(md.datablkszsec) << 9) / DNODE_SLOT_SIZE as u64;
    let mut t = Walker { reader: os.reader(), opts, visit, on_error, seen: HashSet::new(), dnodes_per_block };
    t.dnode(0, &md)?;
    // The accounting objects, in increasing object number (so a resume point orders them).
    let acct = [(2u64, &os.phys.projectused), (1, &os.phys.groupused), (0, &os.phys.userused)];
    for (i, dn) in acct {
        if let Some(dn) = dn {
            if !dn.is_free() {
                t.dnode(u64::MAX - i, dn)?;
            }
        }
    }
    Ok(())
}

struct Walker<'a, 'v> {
    reader: &'a Reader,
    opts: TraverseOpts,
    visit: &'a mut Visitor<'v>,
    on_error: &'a mut ErrorHook<'v>,
    /// Indirect and dnode blocks already descended into (first DVA). In one objset no two
    /// pointers share such a block (dedup and block cloning share only data blocks), so a
    /// second visit is a crafted DAG whose walk would be exponential in its height: it is
    /// reported and not descended again.
    seen: HashSet<(u64, u64)>,
    /// Dnodes per meta-dnode block (for resume points).
    dnodes_per_block: u64,
}

impl Walker<'_, '_> {
    fn dnode(&mut self, object: u64, dn: &DnodePhys) -> Result<()> {
        if let Some((r, _)) = self.opts.resume {
            if object != 0 && object < r {
                return Ok(());
            }
        }
        if dn.indblkshift < 7 || dn.nlevels == 0 {
            return Err(DmuError::Corrupt {
                what: "dnode",
                detail: format!("object {object}: bad tree shape"),
            });
        }
        let epbs = (dn.indblkshift - 7) as u32;
        let top = dn.nlevels - 1;
        for (i, bp) in dn.blkptr.iter().enumerate() {
            let span = epbs.saturating_mul(top as u32);
            let blkid = if span >= 64 { 0 } else { (i as u64) << span };
            self.bp(object, bp, top, blkid, epbs)?;
        }
        let spill_done = self.opts.resume.is_some_and(|r| r > (object, u64::MAX));
        if let Some(sp) = dn.spill.as_ref().filter(|_| !spill_done) {
            if !sp.is_hole() && sp.birth > self.opts.min_birth {
                (self.visit)(&Visit { bp: sp, object, level: 0, blkid: u64::MAX })?;
                if self.opts.read_data && !sp.is_embedded() {
                    if let Err(e) = self.reader.zio.read_physical(sp) {
                        (self.on_error)(sp, object, &e.into());
                    }
                }
            }
        }
        Ok(())
    }

    fn bp(&mut self, object: u64, bp: &BlkPtr, level: u8, blkid: u64, epbs: u32) -> Result<()> {
        if bp.is_hole() || bp.is_redacted() || bp.birth <= self.opts.min_birth {
            return Ok(());
        }
        let mut revisit = false;
        if let Some(r) = self.opts.resume {
            let (first, end) = span_of(object, level, blkid, epbs, self.dnodes_per_block);
            if end <= r {
                return Ok(());
            }
            revisit = first < r;
        }
        if !revisit {
            (self.visit)(&Visit { bp, object, level, blkid })?;
        }
        let is_dnode_block = object == 0 && level == 0;
        if level == 0 && !is_dnode_block {
            if self.opts.read_data && !bp.is_embedded() {
                if let Err(e) = self.reader.zio.read_physical(bp) {
                    (self.on_error)(bp, object, &e.into());
                }
            }
            return Ok(());
        }
        if !bp.is_embedded() && !self.seen.insert((bp.dva[0].vdev(), bp.dva[0].offset())) {
            let e = DmuError::Corrupt {
                what: "block tree",
                detail: "block referenced twice in one objset".into(),
            };
            (self.on_error)(bp, object, &e);
            return Ok(());
        }
        let block = match self.read_meta(bp, is_dnode_block) {
            Ok(b) => b,
            Err(e) => {
                (self.on_error)(bp, object, &e);
                return Ok(());
            }
        };
        if level > 0 {
            let order = bp.byte_order();
            for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
                let child = BlkPtr::parse(raw, order)?;
                let child_blkid = (blkid << epbs) + i as u64;
                self.bp(object, &child, level - 1, child_blkid, epbs)?;
            }
        } else {
            self.dnode_block(&block, blkid, bp)?;
        }
        Ok(())
    }

    /// Reads a block the walk must look into. Dnode blocks of encrypted datasets go through
    /// `read_keyless` (not cached: their bonus buffers are still ciphertext).
    fn read_meta(&self, bp: &BlkPtr, is_dnode_block: bool) -> Result<arc::Block> {
        if is_dnode_block && bp.is_encrypted() {
            return Ok(Arc::new(self.reader.zio.read_keyless(bp)?));
        }
        self.reader.read_bp(bp)
    }

    fn dnode_block(&mut self, block: &[u8], blkid: u64, bp: &BlkPtr) -> Result<()> {
        let per_block = block.len() / DNODE_SLOT_SIZE;
        for (slot, dn) in ondisk::dnode::dnode_block_entries(block, per_block, bp.byte_order()) {
            let object = blkid.saturating_mul(per_block as u64).saturating_add(slot as u64);
            match dn {
                Ok(dn) => self.dnode(object, &dn)?,
                Err(e) => (self.on_error)(bp, object, &DmuError::from(e)),
            }
        }
        Ok(())
    }
}

/// Walks the intent log of a head dataset as OpenZFS `traverse_zil` / `zil_parse` do for a
/// read-only pool: each log block in the chain is visited *before* it is read (so the last,
/// allocated but never written, block of a chain is visited too), the walk stops at the first
/// block that does not read and verify or whose sequence breaks the chain. For a log that was
/// never claimed (`claim_txg` 0) the walk stops at the first block born at or after
/// `min_claim_txg` (`spa_min_claim_txg`: last synced txg + 1) and write records are not
/// followed; for a claimed log, blocks up to `claim_blk_seq` are visited and the blocks of
/// write records born at or after `claim_txg`. Every block is visited once (first DVA).
/// Read failures are expected at the end of a chain and are not errors.
pub fn traverse_zil(
    reader: &Reader,
    zh: &ZilHeaderPhys,
    min_claim_txg: u64,
    visit: &mut Visitor,
) -> Result<()> {
    let claimed = zh.claim_txg != 0;
    let claim_blk_seq = if claimed { zh.claim_blk_seq } else { u64::MAX };
    let mut seen = HashSet::new();
    let mut blk = zh.log;
    let mut expected_seq = None;
    while !blk.is_hole() {
        let seq = blk.cksum[zil::ZIL_ZC_SEQ];
        if seq > claim_blk_seq || expected_seq.is_some_and(|s| s != seq) {
            break;
        }
        if !claimed && blk.birth >= min_claim_txg {
            break;
        }
        if seen.insert(blk.dva[0]) {
            (visit)(&Visit { bp: &blk, object: 0, level: ZIL_LEVEL, blkid: seq })?;
        }
        let Ok(data) = reader.zio.read_physical(&blk) else { break };
        let Ok((next, records, order)) = zil::open_block(&blk, &data) else { break };
        if claimed {
            for (foid, bp) in write_records(records, order) {
                if bp.is_hole() || bp.birth < zh.claim_txg || !seen.insert(bp.dva[0]) {
                    continue;
                }
                let blkid = 0; // the record's offset / lsize; not needed by callers
                (visit)(&Visit { bp: &bp, object: foid, level: ZIL_LEVEL, blkid })?;
            }
        }
        let mut want = blk.cksum;
        want[zil::ZIL_ZC_SEQ] = want[zil::ZIL_ZC_SEQ].wrapping_add(1);
        if next.cksum != want {
            break;
        }
        expected_seq = Some(want[zil::ZIL_ZC_SEQ]);
        blk = next;
    }
    Ok(())
}

/// The (object, block pointer) of every `TX_WRITE` record in `records` (parsing stops at the
/// first malformed record, as `zil_parse` does).
fn write_records(records: &[u8], order: ByteOrder) -> Vec<(u64, BlkPtr)> {
    let (recs, _) = zil::parse_records(records, order);
    recs.into_iter()
        .filter_map(|r| match r.body {
            zil::LrBody::Write { foid, bp, .. } => Some((foid, bp)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(txtype: u64, reclen: usize, foid: u64) -> Vec<u8> {
        let mut r = vec![0u8; reclen];
        r[..8].copy_from_slice(&txtype.to_le_bytes());
        r[8..16].copy_from_slice(&(reclen as u64).to_le_bytes());
        r[32..40].copy_from_slice(&foid.to_le_bytes());
        r
    }

    #[test]
    fn write_records_are_found_and_bad_lengths_stop_the_parse() {
        let mut recs = record(zil::TX_WRITE, 192, 7);
        recs.extend(record(2, 48, 9)); // TX_MKDIR-like record: skipped
        recs.extend(record(zil::TX_WRITE, 192, 8));
        let found = write_records(&recs, ByteOrder::Little);
        assert_eq!(found.iter().map(|(o, _)| *o).collect::<Vec<_>>(), vec![7, 8]);
        recs[192 + 8] = 0xff; // reclen past the end: parsing stops there
        assert_eq!(write_records(&recs, ByteOrder::Little).len(), 1);
    }

    #[test]
    fn zil_blocks_never_panic() {
        let mut bp = BlkPtr::default();
        bp.set_prop(4096, 4096, 2, zil::ZIO_CHECKSUM_ZILOG2, 9, 0, ByteOrder::Little);
        for len in [0usize, 100, 184, 4096] {
            for fill in [0u8, 0xff] {
                let data = vec![fill; len];
                let _ = zil::open_block(&bp, &data);
                let _ = write_records(&data, ByteOrder::Big);
            }
        }
        let mut block = vec![0u8; 4096];
        block[136..144].copy_from_slice(&184u64.to_le_bytes());
        let (next, recs, _) = zil::open_block(&bp, &block).unwrap();
        assert!(next.is_hole() && recs.is_empty());
    }
}
