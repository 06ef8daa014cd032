//! Fat ZAP header block and pointer table (`zap_phys_t`, see OpenZFS include/sys/zap_impl.h).
//!
//! ```text
//! block 0 of a fat ZAP
//! off  size field
//!   0     8 zap_block_type = ZBT_HEADER
//!   8     8 zap_magic = 0x2F52AB2AB
//!  16    40 zap_ptrtbl: zt_blk, zt_numblks, zt_shift, zt_nextblk, zt_blks_copied
//!  56     8 zap_freeblk      next never-used block id
//!  64     8 zap_num_leafs
//!  72     8 zap_num_entries
//!  80     8 zap_salt
//!  88     8 zap_normflags
//!  96     8 zap_flags        ZAP_FLAG_*
//!  ...      zero padding
//! bs/2      embedded pointer table: 2^(block_shift-4) u64 leaf block ids
//! ```
//!
//! While `zt_numblks == 0` the pointer table is the embedded one and `zt_shift` is
//! `block_shift - 4`. Afterwards it lives in `zt_numblks` blocks starting at block `zt_blk`
//! of the object, each an array of u64 in the block's byte order. A hash selects table slot
//! `hash >> (64 - zt_shift)` (`ZAP_HASH_IDX`); the slot holds the leaf's block id.
//! During a table resize, `zt_nextblk`/`zt_blks_copied` describe the copy under way; readers
//! use the old table.

use super::{zap_hashbits, ZAP_MAGIC, ZBT_HEADER};
use crate::bytes::ByteOrder;
use crate::error::{Error, Result};

/// Bytes of the `zap_phys_t` header fields (the rest of the first half is padding).
pub const FAT_ZAP_HEADER_SIZE: usize = 104;

/// `zap_table_phys_t`: where the pointer table lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZapTablePhys {
    /// First block of the external table (0 while embedded).
    pub blk: u64,
    /// Number of blocks of the external table (0 while embedded).
    pub numblks: u64,
    /// log2 of the number of table slots.
    pub shift: u64,
    /// First block of the next (twice as large) table while it is being built.
    pub nextblk: u64,
    /// Source blocks already copied to the next table.
    pub blks_copied: u64,
}

/// A decoded fat ZAP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatZapHeader {
    pub ptrtbl: ZapTablePhys,
    pub freeblk: u64,
    pub num_leafs: u64,
    pub num_entries: u64,
    pub salt: u64,
    pub normflags: u64,
    pub flags: u64,
}

/// Where the pointer-table slot for a hash lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtrTblSlot {
    /// Slot `index` of the table embedded in block 0 (see [`embedded_ptrtbl_entry`]).
    Embedded { index: u64 },
    /// Word `word` of block `blkid` of the ZAP object (see [`ptrtbl_block_entry`]).
    External { blkid: u64, word: usize },
}

/// `ZAP_EMBEDDED_PTRTBL_SHIFT`: log2 of the embedded table's slot count (it fills the second
/// half of the block, 8 bytes a slot).
pub fn embedded_ptrtbl_shift(block_shift: u32) -> u32 {
    block_shift.saturating_sub(4)
}

/// `ZAP_HASH_IDX`: the top `shift` bits of `hash` (0 when `shift` is 0).
pub fn ptrtbl_index(hash: u64, shift: u64) -> u64 {
    if shift == 0 || shift > 64 {
        0
    } else {
        hash >> (64 - shift)
    }
}

fn check_block_shift(block_shift: u32) -> Result<()> {
    if (9..=17).contains(&block_shift) {
        Ok(())
    } else {
        Err(Error::unsupported("fat zap", format!("block shift {block_shift} not in 9..=17")))
    }
}

/// Reads slot `index` of the embedded pointer table of header block `block`.
pub fn embedded_ptrtbl_entry(block: &[u8], order: ByteOrder, index: u64) -> Result<u64> {
    let half = block.len() / 2;
    let off = usize::try_from(index)
        .ok()
        .and_then(|i| i.checked_mul(8))
        .and_then(|o| o.checked_add(half))
        .filter(|&o| o + 8 <= block.len())
        .ok_or_else(|| Error::corrupt("zap embedded ptrtbl", format!("slot {index} outside the block")))?;
    order.u64_at(block, off, "zap embedded ptrtbl")
}

/// Reads word `word` of an external pointer-table block.
pub fn ptrtbl_block_entry(block: &[u8], order: ByteOrder, word: usize) -> Result<u64> {
    let off = word.checked_mul(8).ok_or_else(|| Error::corrupt("zap ptrtbl block", "word index overflow"))?;
    order.u64_at(block, off, "zap ptrtbl block")
}

impl FatZapHeader {
    /// Decodes the header fields of block 0 (checks block type and magic).
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<FatZapHeader> {
        let w = |i: usize, what| order.u64_at(buf, i * 8, what);
        let bt = w(0, "zap_block_type")?;
        if bt != ZBT_HEADER {
            return Err(Error::corrupt("zap_phys", format!("block type {bt:#x} is not ZBT_HEADER")));
        }
        let magic = w(1, "zap_magic")?;
        if magic != ZAP_MAGIC {
            return Err(Error::corrupt("zap_phys", format!("bad magic {magic:#x}")));
        }
        Ok(FatZapHeader {
            ptrtbl: ZapTablePhys {
                blk: w(2, "zt_blk")?,
                numblks: w(3, "zt_numblks")?,
                shift: w(4, "zt_shift")?,
                nextblk: w(5, "zt_nextblk")?,
                blks_copied: w(6, "zt_blks_copied")?,
            },
            freeblk: w(7, "zap_freeblk")?,
            num_leafs: w(8, "zap_num_leafs")?,
            num_entries: w(9, "zap_num_entries")?,
            salt: w(10, "zap_salt")?,
            normflags: w(11, "zap_normflags")?,
            flags: w(12, "zap_flags")?,
        })
    }

    /// Writes the header fields into `buf` (at least [`FAT_ZAP_HEADER_SIZE`] bytes).
    pub fn encode_into(&self, buf: &mut [u8], order: ByteOrder) -> Result<()> {
        if buf.len() < FAT_ZAP_HEADER_SIZE {
            return Err(Error::corrupt("zap_phys", "buffer too small for the header"));
        }
        let t = &self.ptrtbl;
        let words = [
            ZBT_HEADER,
            ZAP_MAGIC,
            t.blk,
            t.numblks,
            t.shift,
            t.nextblk,
            t.blks_copied,
            self.freeblk,
            self.num_leafs,
            self.num_entries,
            self.salt,
            self.normflags,
            self.flags,
        ];
        for (i, v) in words.into_iter().enumerate() {
            order.put_u64(buf, i * 8, v);
        }
        Ok(())
    }

    /// Significant hash bits of this ZAP.
    pub fn hash_bits(&self) -> u32 {
        zap_hashbits(self.flags)
    }

    /// Whether the pointer table is the one embedded in block 0.
    pub fn uses_embedded_ptrtbl(&self) -> bool {
        self.ptrtbl.numblks == 0
    }

    /// Locates the pointer-table slot for `hash` in a ZAP of `1 << block_shift`-byte blocks
    /// (`zap_idx_to_blk` / `zap_table_load`).
    pub fn ptrtbl_slot(&self, hash: u64, block_shift: u32) -> Result<PtrTblSlot> {
        check_block_shift(block_shift)?;
        let t = &self.ptrtbl;
        if t.shift > 64 {
            return Err(Error::corrupt("zap ptrtbl", format!("zt_shift {} > 64", t.shift)));
        }
        let idx = ptrtbl_index(hash, t.shift);
        if self.uses_embedded_ptrtbl() {
            if t.shift > u64::from(embedded_ptrtbl_shift(block_shift)) {
                return Err(Error::corrupt(
                    "zap ptrtbl",
                    format!("embedded table with zt_shift {} too big for the block", t.shift),
                ));
            }
            return Ok(PtrTblSlot::Embedded { index: idx });
        }
        let per_block_shift = block_shift - 3;
        let blk = idx >> per_block_shift;
        if blk >= t.numblks {
            return Err(Error::corrupt(
                "zap ptrtbl",
                format!("slot {idx} beyond the table's {} blocks", t.numblks),
            ));
        }
        let blkid = t.blk.checked_add(blk).ok_or_else(|| Error::corrupt("zap ptrtbl", "zt_blk overflow"))?;
        // The mask keeps the word index below 2^14, so it fits any usize.
        let word = (idx & ((1u64 << per_block_shift) - 1)) as usize;
        Ok(PtrTblSlot::External { blkid, word })
    }
}

/// Builds a fat ZAP header block with an embedded pointer table `ptrs`, which must have
/// exactly `2^(block_shift-4)` slots; the header's `zt_shift` is set accordingly and
/// `zt_blk`/`zt_numblks` to 0.
pub fn encode_fat_header_block(
    hdr: &FatZapHeader,
    block_shift: u32,
    order: ByteOrder,
    ptrs: &[u64],
) -> Result<Vec<u8>> {
    check_block_shift(block_shift)?;
    let shift = embedded_ptrtbl_shift(block_shift);
    if ptrs.len() != 1usize << shift {
        return Err(Error::corrupt(
            "zap embedded ptrtbl",
            format!("{} slots given, block needs {}", ptrs.len(), 1usize << shift),
        ));
    }
    let size = 1usize << block_shift;
    let mut buf = vec![0u8; size];
    let mut h = *hdr;
    h.ptrtbl = ZapTablePhys { shift: u64::from(shift), ..ZapTablePhys::default() };
    h.encode_into(&mut buf, order)?;
    for (i, &p) in ptrs.iter().enumerate() {
        order.put_u64(&mut buf, size / 2 + i * 8, p);
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> FatZapHeader {
        FatZapHeader {
            ptrtbl: ZapTablePhys::default(),
            freeblk: 2,
            num_leafs: 1,
            num_entries: 15,
            salt: 0x1c563,
            normflags: 0,
            flags: 0,
        }
    }

    #[test]
    fn header_round_trip_and_embedded_slots() {
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let blk = encode_fat_header_block(&hdr(), 14, order, &[1u64; 1024]).unwrap();
            let h = FatZapHeader::parse(&blk, order).unwrap();
            assert_eq!(h.ptrtbl.shift, 10);
            assert_eq!(FatZapHeader { ptrtbl: ZapTablePhys::default(), ..h }, hdr());
            let slot = h.ptrtbl_slot(0xffc0_0000_0000_0000, 14).unwrap();
            assert_eq!(slot, PtrTblSlot::Embedded { index: 1023 });
            assert_eq!(embedded_ptrtbl_entry(&blk, order, 1023).unwrap(), 1);
            assert!(embedded_ptrtbl_entry(&blk, order, 1024).is_err());
        }
    }

    #[test]
    fn external_table_slots() {
        let mut h = hdr();
        h.ptrtbl = ZapTablePhys { blk: 32, numblks: 2, shift: 12, ..Default::default() };
        // 2048 u64 slots per 16K block: slot 2049 is word 1 of the second block.
        let hash = 2049u64 << 52;
        assert_eq!(h.ptrtbl_slot(hash, 14).unwrap(), PtrTblSlot::External { blkid: 33, word: 1 });
        h.ptrtbl.numblks = 1;
        assert!(h.ptrtbl_slot(hash, 14).is_err());
        assert!(h.ptrtbl_slot(hash, 30).is_err());
    }
}
