//! Listing a whole fat ZAP, bounded against crafted objects.
//!
//! A reader lists a fat ZAP the way `zap_cursor_retrieve` does: through the pointer table,
//! in table (hash) order. The table is embedded in the second half of block 0 while
//! `zt_numblks` is 0, else it fills `zt_numblks` blocks from `zt_blk`, exactly
//! `2^zt_shift` u64 slots; each slot names the leaf block holding that hash prefix, and a
//! leaf covering a short prefix fills a run of slots.
//!
//! Everything here comes from disk, so the walk is shaped to cost no more than what the
//! object really stores:
//! - the table must fit the object (`zt_blk + zt_numblks <= maxblkid + 1`), be whole (2^shift
//!   slots in `zt_numblks` blocks) and be no wider than the hash (`zt_shift <= 28`, or 48 with
//!   `ZAP_FLAG_HASH64`);
//! - every table block and leaf is read once, and must be a block of its own: a block that
//!   comes back with the identity of one already read (its first DVA, or the payload of an
//!   embedded pointer) is corruption, so pointers repeating one leaf cannot multiply it;
//! - a slot must name a block inside the object that is neither block 0 nor the table;
//! - the walk stops as soon as the header's entry count (`zap_num_entries`) is reached.
//!
//! The walk never allocates by a count read from disk: its memory is the leaves it has read
//! (each a distinct block of the pool) and their entries.

use super::fat::{embedded_ptrtbl_entry, embedded_ptrtbl_shift, ptrtbl_block_entry, FatZapHeader};
use super::leaf::{KeyKind, ZapLeaf, ZapLeafEntry};
use crate::bytes::ByteOrder;
use crate::error::Error;
use std::collections::HashSet;

/// Where a fat-ZAP walk reads blocks.
pub trait FatZapBlocks {
    /// The caller's error type (I/O and checksum errors stay the caller's own).
    type Error: From<Error>;

    /// Block `blkid` of the object and the identity of its contents (two ids returning the
    /// same identity are one block), or `None` for a hole.
    #[allow(clippy::type_complexity)]
    fn block(&mut self, blkid: u64) -> Result<Option<(Vec<u8>, std::sync::Arc<Vec<u8>>)>, Self::Error>;
}

/// The shape of the object being walked.
#[derive(Clone, Copy, Debug)]
pub struct FatZapObject {
    /// The object's data block size (a power of two, 512 B..128 KiB).
    pub block_size: u64,
    /// The object's highest block id.
    pub maxblkid: u64,
    pub order: ByteOrder,
}

struct Walk<'a, S: FatZapBlocks> {
    src: &'a mut S,
    obj: FatZapObject,
    hdr: &'a FatZapHeader,
    table: std::ops::Range<u64>,
    ids: HashSet<Vec<u8>>,
    leaves: HashSet<u64>,
    out: Vec<ZapLeafEntry>,
}

fn corrupt(detail: String) -> Error {
    Error::corrupt("fat zap", detail)
}

impl<S: FatZapBlocks> Walk<'_, S> {
    fn distinct(&mut self, blkid: u64, what: &str) -> Result<std::sync::Arc<Vec<u8>>, S::Error> {
        let Some((id, data)) = self.src.block(blkid)? else {
            return Err(corrupt(format!("{what} block {blkid} is a hole")).into());
        };
        if !self.ids.insert(id) {
            return Err(corrupt(format!("{what} block {blkid} repeats a block already read")).into());
        }
        Ok(data)
    }

    /// Reads the leaf of one slot unless already read; false once the listing is complete.
    fn slot(&mut self, id: u64) -> Result<bool, S::Error> {
        if self.out.len() as u64 >= self.hdr.num_entries {
            return Ok(false);
        }
        if !self.leaves.insert(id) {
            return Ok(true);
        }
        if id == 0 || id > self.obj.maxblkid || self.table.contains(&id) {
            return Err(corrupt(format!("pointer table names block {id}, not a leaf")).into());
        }
        let b = self.distinct(id, "leaf")?;
        let shift = self.obj.block_size.trailing_zeros();
        let leaf = ZapLeaf::parse(&b, self.obj.order, shift)?;
        self.out.extend(leaf.entries(KeyKind::from_zap_flags(self.hdr.flags))?);
        Ok(true)
    }
}

/// Every entry of the fat ZAP whose header is `hdr` and block 0 is `b0` (see the module
/// comment for the bounds).
pub fn fat_zap_entries<S: FatZapBlocks>(
    hdr: &FatZapHeader,
    b0: &[u8],
    obj: FatZapObject,
    src: &mut S,
) -> Result<Vec<ZapLeafEntry>, S::Error> {
    let bs = obj.block_size;
    let block_shift = bs.trailing_zeros();
    if !bs.is_power_of_two() || !(9..=17).contains(&block_shift) {
        return Err(corrupt(format!("block size {bs}")).into());
    }
    let t = hdr.ptrtbl;
    let mut w =
        Walk { src, obj, hdr, table: 0..0, ids: HashSet::new(), leaves: HashSet::new(), out: Vec::new() };
    if hdr.uses_embedded_ptrtbl() {
        if t.shift > u64::from(embedded_ptrtbl_shift(block_shift)) {
            return Err(corrupt(format!("embedded pointer table with zt_shift {}", t.shift)).into());
        }
        for idx in 0..(1u64 << t.shift) {
            if !w.slot(embedded_ptrtbl_entry(b0, obj.order, idx)?)? {
                break;
            }
        }
        return Ok(w.out);
    }
    let per_block_shift = block_shift - 3;
    let whole = t.shift <= u64::from(hdr.hash_bits())
        && t.shift >= u64::from(per_block_shift)
        && t.numblks == 1u64 << (t.shift - u64::from(per_block_shift));
    let end = t.blk.checked_add(t.numblks).filter(|&e| t.blk >= 1 && e <= obj.maxblkid.saturating_add(1));
    let (true, Some(end)) = (whole, end) else {
        return Err(corrupt(format!(
            "pointer table of {} blocks at block {} (zt_shift {}) does not fit an object of {} blocks",
            t.numblks,
            t.blk,
            t.shift,
            obj.maxblkid.saturating_add(1)
        ))
        .into());
    };
    w.table = t.blk..end;
    'table: for blkid in t.blk..end {
        let b = w.distinct(blkid, "pointer-table")?;
        for word in 0..(1usize << per_block_shift) {
            if !w.slot(ptrtbl_block_entry(&b, obj.order, word)?)? {
                break 'table;
            }
        }
    }
    Ok(w.out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zap::build::{build_zap, BuildEntry, ZapBuildOpts};
    use std::sync::Arc;

    /// Blocks of an in-memory object; the identity is the block id unless `alias` maps it.
    struct Mem {
        blocks: Vec<Vec<u8>>,
        alias: Vec<(u64, u64)>,
        reads: usize,
    }

    impl FatZapBlocks for Mem {
        type Error = Error;
        fn block(&mut self, blkid: u64) -> Result<Option<(Vec<u8>, Arc<Vec<u8>>)>, Error> {
            self.reads += 1;
            let src = self.alias.iter().find(|a| a.0 == blkid).map_or(blkid, |a| a.1);
            Ok(self.blocks.get(src as usize).map(|b| (src.to_le_bytes().to_vec(), Arc::new(b.clone()))))
        }
    }

    fn image(n: usize) -> (Vec<Vec<u8>>, u64) {
        let entries: Vec<BuildEntry> = (0..n)
            .map(|i| BuildEntry {
                name: format!("{i:0>60}").into_bytes(),
                int_size: 8,
                values: vec![i as u64],
            })
            .collect();
        let mut opts = ZapBuildOpts::new(0x1234_5678);
        opts.fat_block_shift = 9;
        let img = build_zap(&entries, &opts, ByteOrder::Little).unwrap();
        (img.blocks, img.block_size as u64)
    }

    fn walk(m: &mut Mem, bs: u64, maxblkid: u64) -> Result<Vec<ZapLeafEntry>, Error> {
        let b0 = m.blocks[0].clone();
        let hdr = FatZapHeader::parse(&b0, ByteOrder::Little)?;
        let obj = FatZapObject { block_size: bs, maxblkid, order: ByteOrder::Little };
        fat_zap_entries(&hdr, &b0, obj, m)
    }

    #[test]
    fn lists_every_entry_once_and_refuses_repeats() {
        let (blocks, bs) = image(300);
        let n = blocks.len() as u64;
        let mut m = Mem { blocks: blocks.clone(), alias: vec![], reads: 0 };
        let got = walk(&mut m, bs, n - 1).unwrap();
        assert_eq!(got.len(), 300);
        assert!(m.reads as u64 <= n, "{} reads of {n} blocks", m.reads);
        // A maxblkid claiming 2^40 blocks changes nothing: only named blocks are read.
        let mut m = Mem { blocks: blocks.clone(), alias: vec![], reads: 0 };
        assert_eq!(walk(&mut m, bs, 1 << 40).unwrap().len(), 300);
        assert!(m.reads as u64 <= n);
        // Leaf 2 returning leaf 1's block: the same leaf twice is corruption.
        let mut m = Mem { blocks: blocks.clone(), alias: vec![(2, 1)], reads: 0 };
        assert!(walk(&mut m, bs, n - 1).is_err());
        // A header claiming fewer entries stops the walk early.
        let mut b0 = blocks[0].clone();
        let mut hdr = FatZapHeader::parse(&b0, ByteOrder::Little).unwrap();
        hdr.num_entries = 1;
        hdr.encode_into(&mut b0, ByteOrder::Little).unwrap();
        let mut m = Mem { blocks: blocks.clone(), alias: vec![], reads: 0 };
        m.blocks[0] = b0.clone();
        assert!(walk(&mut m, bs, n - 1).unwrap().len() < 300);
        // A table claiming 2^24 blocks and 2^35 slots is refused before any read.
        hdr.ptrtbl = super::super::ZapTablePhys { blk: 1, numblks: 1 << 24, shift: 35, ..Default::default() };
        hdr.encode_into(&mut b0, ByteOrder::Little).unwrap();
        let mut m = Mem { blocks, alias: vec![], reads: 0 };
        m.blocks[0] = b0;
        assert!(walk(&mut m, bs, 1 << 30).is_err());
        assert_eq!(m.reads, 0);
    }
}
