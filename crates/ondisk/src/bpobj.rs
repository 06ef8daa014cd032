//! `bpobj_phys_t`: the bonus of a block-pointer object (`DMU_OT_BPOBJ`, bonus type
//! `DMU_OT_BPOBJ_HDR`), the list of blocks used by deadlists, the free list and the
//! sync-to-convergence list (OpenZFS include/sys/bpobj.h).
//!
//! ```text
//! off field              present from
//!   0 bpo_num_blkptrs    V0 (16-byte bonus)
//!   8 bpo_bytes          V0
//!  16 bpo_comp           V1 (32-byte bonus)
//!  24 bpo_uncomp         V1
//!  32 bpo_subobjs        V2 (48-byte bonus): object of u64 sub-bpobj numbers
//!  40 bpo_num_subobjs    V2
//!  48 bpo_num_freed      V3 (56-byte bonus, with the livelist feature: FREE-marked entries)
//! ```
//!
//! The object's data is an array of `bpo_num_blkptrs` 128-byte block pointers. Fields past the
//! bonus length read as 0, as OpenZFS treats them.

use crate::bytes::ByteOrder;
use crate::error::{Error, Result};

/// `BPOBJ_SIZE_V0`.
pub const BPOBJ_SIZE_V0: usize = 16;
/// `BPOBJ_SIZE_V1`.
pub const BPOBJ_SIZE_V1: usize = 32;
/// `BPOBJ_SIZE_V2`.
pub const BPOBJ_SIZE_V2: usize = 48;
/// Full `sizeof (bpobj_phys_t)`.
pub const BPOBJ_SIZE_V3: usize = 56;

/// A decoded `bpobj_phys_t`; `bonus_len` records which version it was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpobjPhys {
    pub num_blkptrs: u64,
    pub bytes: u64,
    pub comp: u64,
    pub uncomp: u64,
    pub subobjs: u64,
    pub num_subobjs: u64,
    pub num_freed: u64,
    /// Bytes of the bonus that held fields (16, 32, 48 or 56).
    pub bonus_len: usize,
}

impl BpobjPhys {
    /// Decodes a bonus of at least 16 bytes; absent later fields are 0.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<BpobjPhys> {
        if buf.len() < BPOBJ_SIZE_V0 {
            return Err(Error::corrupt("bpobj_phys", format!("bonus of {} bytes", buf.len())));
        }
        let n = (buf.len() / 8).min(7);
        let mut w = [0u64; 7];
        for (i, v) in w.iter_mut().enumerate().take(n) {
            *v = order.u64_at(buf, i * 8, "bpobj_phys")?;
        }
        Ok(BpobjPhys {
            num_blkptrs: w[0],
            bytes: w[1],
            comp: w[2],
            uncomp: w[3],
            subobjs: w[4],
            num_subobjs: w[5],
            num_freed: w[6],
            bonus_len: n * 8,
        })
    }

    /// Encodes the first `bonus_len` bytes (16 to 56, a multiple of 8).
    pub fn encode(&self, order: ByteOrder) -> Result<Vec<u8>> {
        if !(BPOBJ_SIZE_V0..=BPOBJ_SIZE_V3).contains(&self.bonus_len) || !self.bonus_len.is_multiple_of(8) {
            return Err(Error::corrupt("bpobj_phys", format!("bonus_len {}", self.bonus_len)));
        }
        let w = [
            self.num_blkptrs,
            self.bytes,
            self.comp,
            self.uncomp,
            self.subobjs,
            self.num_subobjs,
            self.num_freed,
        ];
        let mut b = vec![0u8; self.bonus_len];
        for (i, &v) in w.iter().take(self.bonus_len / 8).enumerate() {
            order.put_u64(&mut b, i * 8, v);
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let p = BpobjPhys {
            num_blkptrs: 7,
            bytes: 0x3000,
            comp: 0x1000,
            uncomp: 0x1000,
            bonus_len: BPOBJ_SIZE_V1,
            ..Default::default()
        };
        let b = p.encode(ByteOrder::Big).unwrap();
        assert_eq!(b.len(), 32);
        assert_eq!(BpobjPhys::parse(&b, ByteOrder::Big).unwrap(), p);
        let v0 = BpobjPhys::parse(&b[..16], ByteOrder::Big).unwrap();
        assert_eq!((v0.comp, v0.bonus_len), (0, 16));
        assert!(BpobjPhys::parse(&b[..15], ByteOrder::Big).is_err());
        assert!(BpobjPhys { bonus_len: 12, ..p }.encode(ByteOrder::Big).is_err());
    }
}
