//! Dnodes (`dnode_phys_t`): the on-disk description of one DMU object.
//!
//! Facts from OpenZFS `include/sys/dnode.h`. A dnode occupies 1 to 32 slots of 512 bytes
//! (`dn_extra_slots` counts the slots after the first: large dnodes). Layout:
//!
//! ```text
//! offset  size  field
//!      0     1  type            (dmu_object_type)
//!      1     1  indblkshift     log2 of the indirect block size
//!      2     1  nlevels         1 = the block pointers point at data
//!      3     1  nblkptr         1..=3 block pointers
//!      4     1  bonustype
//!      5     1  checksum        (zio_checksum for the object's blocks)
//!      6     1  compress
//!      7     1  flags           USED_BYTES=1, USERUSED_ACCOUNTED=2, SPILL_BLKPTR=4, USEROBJUSED=8
//!      8     2  datablkszsec    data block size / 512
//!     10     2  bonuslen
//!     12     1  extra_slots
//!     13     3  pad
//!     16     8  maxblkid
//!     24     8  used            bytes if USED_BYTES, else 512-byte sectors
//!     32    32  pad
//!     64   ...  blkptr[nblkptr], then the bonus buffer; with SPILL_BLKPTR the last 128 bytes of
//!               the dnode are the spill block pointer.
//! ```

use crate::blkptr::{BlkPtr, BLKPTR_SIZE};
use crate::bytes::{slice, ByteOrder};
use crate::error::{Error, Result};

/// log2 of the dnode slot size.
pub const DNODE_SHIFT: u32 = 9;
/// One dnode slot.
pub const DNODE_SLOT_SIZE: usize = 1 << DNODE_SHIFT;
/// Bytes before the block pointers (`DNODE_CORE_SIZE`).
pub const DNODE_CORE_SIZE: usize = 64;
/// Dnode blocks of the meta-dnode are 16 KiB (`DNODE_BLOCK_SHIFT`).
pub const DNODE_BLOCK_SHIFT: u32 = 14;
/// Most slots one dnode may take (a whole 16 KiB block).
pub const DNODE_MAX_SLOTS: usize = 32;
/// Most block pointers in the core (`DN_MAX_NBLKPTR`).
pub const DN_MAX_NBLKPTR: u8 = 3;
/// Deepest tree the format allows; bounds recursion. OpenZFS `DN_MAX_LEVELS`: enough levels
/// of the smallest indirect blocks (4 KiB = 32 pointers, 5 bits each) to address 2^64 bytes
/// of 512-byte blocks: ceil((64 - 9) / (12 - 7)) + 1 = 12. ztest makes 10-level objects.
pub const DN_MAX_LEVELS: u8 = 12;

pub const DNODE_FLAG_USED_BYTES: u8 = 1 << 0;
pub const DNODE_FLAG_USERUSED_ACCOUNTED: u8 = 1 << 1;
pub const DNODE_FLAG_SPILL_BLKPTR: u8 = 1 << 2;
pub const DNODE_FLAG_USEROBJUSED_ACCOUNTED: u8 = 1 << 3;

/// A decoded dnode. `bonus` holds exactly `bonuslen` bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnodePhys {
    pub object_type: u8,
    pub indblkshift: u8,
    pub nlevels: u8,
    pub nblkptr: u8,
    pub bonustype: u8,
    pub checksum: u8,
    pub compress: u8,
    pub flags: u8,
    pub datablkszsec: u16,
    pub bonuslen: u16,
    pub extra_slots: u8,
    pub maxblkid: u64,
    pub used: u64,
    pub blkptr: Vec<BlkPtr>,
    pub bonus: Vec<u8>,
    pub spill: Option<BlkPtr>,
}

impl DnodePhys {
    /// Decodes the dnode starting at `buf[0]` (`buf` may extend past it: the dnode's real size
    /// comes from `extra_slots`). A free slot (type 0) decodes to a dnode with type 0.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<DnodePhys> {
        let core = slice(buf, 0, DNODE_CORE_SIZE, "dnode")?;
        let mut dn = DnodePhys {
            object_type: core[0],
            indblkshift: core[1],
            nlevels: core[2],
            nblkptr: core[3],
            bonustype: core[4],
            checksum: core[5],
            compress: core[6],
            flags: core[7],
            datablkszsec: order.u16_at(core, 8, "dnode")?,
            bonuslen: order.u16_at(core, 10, "dnode")?,
            extra_slots: core[12],
            maxblkid: order.u64_at(core, 16, "dnode")?,
            used: order.u64_at(core, 24, "dnode")?,
            ..Default::default()
        };
        if dn.object_type == 0 {
            return Ok(dn);
        }
        let size = dn.size_bytes();
        if dn.extra_slots as usize >= DNODE_MAX_SLOTS {
            return Err(Error::corrupt("dnode", format!("extra_slots {}", dn.extra_slots)));
        }
        let whole = slice(buf, 0, size, "dnode")?;
        if dn.nblkptr == 0 || dn.nblkptr > DN_MAX_NBLKPTR && dn.extra_slots == 0 {
            return Err(Error::corrupt("dnode", format!("nblkptr {}", dn.nblkptr)));
        }
        // Indirect blocks are 512 B to 128 KiB (OpenZFS DN_MAX_INDBLKSHIFT = 17; old pools use
        // 14): anything else would make tree arithmetic meaningless.
        if !(9..=17).contains(&dn.indblkshift) {
            return Err(Error::corrupt("dnode", format!("indblkshift {}", dn.indblkshift)));
        }
        if dn.nlevels == 0 || dn.nlevels > DN_MAX_LEVELS {
            return Err(Error::corrupt("dnode", format!("nlevels {}", dn.nlevels)));
        }
        let bp_end = DNODE_CORE_SIZE + dn.nblkptr as usize * BLKPTR_SIZE;
        let has_spill = dn.flags & DNODE_FLAG_SPILL_BLKPTR != 0;
        let tail_end = if has_spill { size - BLKPTR_SIZE } else { size };
        if bp_end > tail_end {
            return Err(Error::corrupt("dnode", "block pointers overflow the dnode"));
        }
        for i in 0..dn.nblkptr as usize {
            let off = DNODE_CORE_SIZE + i * BLKPTR_SIZE;
            dn.blkptr.push(BlkPtr::parse(&whole[off..], order)?);
        }
        let bonuslen = dn.bonuslen as usize;
        if bp_end + bonuslen > tail_end {
            return Err(Error::corrupt(
                "dnode",
                format!("bonuslen {bonuslen} does not fit a {size}-byte dnode"),
            ));
        }
        dn.bonus = whole[bp_end..bp_end + bonuslen].to_vec();
        if has_spill {
            dn.spill = Some(BlkPtr::parse(&whole[size - BLKPTR_SIZE..], order)?);
        }
        Ok(dn)
    }

    /// Size of this dnode in bytes (slots × 512).
    pub fn size_bytes(&self) -> usize {
        (1 + self.extra_slots as usize) * DNODE_SLOT_SIZE
    }
    /// Slots this dnode takes.
    pub fn slots(&self) -> usize {
        1 + self.extra_slots as usize
    }
    /// Data block size in bytes.
    pub fn data_block_size(&self) -> u64 {
        (self.datablkszsec as u64) << 9
    }
    /// Indirect block size in bytes.
    pub fn indirect_block_size(&self) -> u64 {
        1u64 << self.indblkshift.min(31)
    }
    /// Space charged to the object, in bytes.
    pub fn used_bytes(&self) -> u64 {
        if self.flags & DNODE_FLAG_USED_BYTES != 0 {
            self.used
        } else {
            self.used << 9
        }
    }
    /// True if the slot is free.
    pub fn is_free(&self) -> bool {
        self.object_type == 0
    }

    /// Encodes into `buf` (which must be at least `size_bytes()` long) in `order`.
    pub fn encode_into(&self, buf: &mut [u8], order: ByteOrder) -> Result<()> {
        let size = self.size_bytes();
        if buf.len() < size {
            return Err(Error::corrupt("dnode", "encode buffer too small"));
        }
        let bp_end = DNODE_CORE_SIZE + self.blkptr.len() * BLKPTR_SIZE;
        let tail_end = if self.spill.is_some() { size - BLKPTR_SIZE } else { size };
        if bp_end + self.bonus.len() > tail_end || self.blkptr.len() != self.nblkptr as usize {
            return Err(Error::corrupt("dnode", "fields do not fit the dnode"));
        }
        buf[..size].fill(0);
        buf[0] = self.object_type;
        buf[1] = self.indblkshift;
        buf[2] = self.nlevels;
        buf[3] = self.nblkptr;
        buf[4] = self.bonustype;
        buf[5] = self.checksum;
        buf[6] = self.compress;
        buf[7] = self.flags;
        order.put_u16(buf, 8, self.datablkszsec);
        order.put_u16(buf, 10, self.bonus.len() as u16);
        buf[12] = self.extra_slots;
        order.put_u64(buf, 16, self.maxblkid);
        order.put_u64(buf, 24, self.used);
        for (i, bp) in self.blkptr.iter().enumerate() {
            let off = DNODE_CORE_SIZE + i * BLKPTR_SIZE;
            buf[off..off + BLKPTR_SIZE].copy_from_slice(&bp.encode(order));
        }
        buf[bp_end..bp_end + self.bonus.len()].copy_from_slice(&self.bonus);
        if let Some(sp) = &self.spill {
            buf[size - BLKPTR_SIZE..size].copy_from_slice(&sp.encode(order));
        }
        Ok(())
    }
}

/// The dnodes of one dnode block: `(slot, parse result)` for every slot that is not free,
/// stepping over the extra slots of large dnodes (a slot that does not parse is reported and
/// stepped over alone). Only slots the block really holds are read, at most `max_slots`: a
/// block shorter than its meta-dnode's block size is parsed as far as it goes.
pub fn dnode_block_entries(
    block: &[u8],
    max_slots: usize,
    order: ByteOrder,
) -> Vec<(usize, Result<DnodePhys>)> {
    let slots = (block.len() / DNODE_SLOT_SIZE).min(max_slots);
    let mut out = Vec::new();
    let mut slot = 0;
    while slot < slots {
        match DnodePhys::parse(&block[slot * DNODE_SLOT_SIZE..], order) {
            Ok(d) if d.is_free() => slot += 1,
            Ok(d) => {
                let n = d.slots();
                out.push((slot, Ok(d)));
                slot += n;
            }
            Err(e) => {
                out.push((slot, Err(e)));
                slot += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_with_bonus_and_spill() {
        let mut bp = BlkPtr::default();
        bp.set_prop(4096, 512, 15, 7, 19, 0, ByteOrder::Little);
        let dn = DnodePhys {
            object_type: 19,
            indblkshift: 17,
            nlevels: 1,
            nblkptr: 1,
            bonustype: 44,
            checksum: 0,
            compress: 0,
            flags: DNODE_FLAG_USED_BYTES | DNODE_FLAG_SPILL_BLKPTR,
            datablkszsec: 8,
            bonuslen: 100,
            extra_slots: 1,
            maxblkid: 0,
            used: 512,
            blkptr: vec![bp],
            bonus: vec![7u8; 100],
            spill: Some(bp),
        };
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let mut buf = vec![0u8; 1024];
            dn.encode_into(&mut buf, order).unwrap();
            assert_eq!(DnodePhys::parse(&buf, order).unwrap(), dn);
        }
        assert_eq!(dn.data_block_size(), 4096);
        assert_eq!(dn.used_bytes(), 512);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = DnodePhys::parse(&bytes, ByteOrder::Little);
            let _ = DnodePhys::parse(&bytes, ByteOrder::Big);
        }
    }
}
