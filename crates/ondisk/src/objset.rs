//! Objset header (`objset_phys_t`): the root block of every dataset, snapshot and the MOS.
//!
//! Facts from OpenZFS `include/sys/dmu_objset.h` and `include/sys/zil.h`.
//!
//! ```text
//! offset  size  field
//!      0   512  meta-dnode           (dnode 0: the array of all dnodes)
//!    512   192  ZIL header           (claim txg, replay seq, log blkptr at +16, ...)
//!    704     8  os_type              (DMU_OST_META=1, ZFS=2, ZVOL=3)
//!    712     8  os_flags             (bit 0: userused/groupused dnodes are valid)
//!    720    32  portable MAC
//!    752    32  local MAC
//!   1024   512  userused dnode       (present when the block is >= 2 KiB)
//!   1536   512  groupused dnode
//!   2048   512  projectused dnode    (present when the block is 4 KiB)
//! ```

use crate::blkptr::BlkPtr;
use crate::bytes::ByteOrder;
use crate::dnode::DnodePhys;
use crate::error::{Error, Result};

pub const OBJSET_PHYS_SIZE_V1: usize = 1024;
pub const OBJSET_PHYS_SIZE_V2: usize = 2048;
pub const OBJSET_PHYS_SIZE_V3: usize = 4096;

/// `dmu_objset_type_t`.
pub const DMU_OST_NONE: u64 = 0;
pub const DMU_OST_META: u64 = 1;
pub const DMU_OST_ZFS: u64 = 2;
pub const DMU_OST_ZVOL: u64 = 3;

/// Object numbers of the accounting objects held in the objset header (negative in OpenZFS).
pub const DMU_USERUSED_OBJECT: i64 = -1;
pub const DMU_GROUPUSED_OBJECT: i64 = -2;
pub const DMU_PROJECTUSED_OBJECT: i64 = -3;

/// `os_flags` bits (include/sys/dmu_objset.h): the accounting objects count every object of
/// the objset — by space, by object (`userobj_accounting`), by project (`project_quota`).
/// OpenZFS answers `zfs userspace` only when the matching bit is set, and upgrades an objset
/// without it by dirtying every dnode.
pub const OBJSET_FLAG_USERACCOUNTING_COMPLETE: u64 = 1 << 0;
pub const OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE: u64 = 1 << 1;
pub const OBJSET_FLAG_PROJECTQUOTA_COMPLETE: u64 = 1 << 2;

/// `DMU_OBJACCT_PREFIX`: the accounting ZAPs key object counts as "obj-" + hex id, next to
/// the byte counts keyed by the bare hex id.
pub const DMU_OBJACCT_PREFIX: &str = "obj-";

/// The ZIL header of an objset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZilHeaderPhys {
    pub claim_txg: u64,
    pub replay_seq: u64,
    pub log: BlkPtr,
    pub claim_blk_seq: u64,
    pub flags: u64,
    pub claim_lr_seq: u64,
}

/// A decoded objset header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjsetPhys {
    pub meta_dnode: DnodePhys,
    pub zil: ZilHeaderPhys,
    pub os_type: u64,
    pub flags: u64,
    pub portable_mac: [u8; 32],
    pub local_mac: [u8; 32],
    pub userused: Option<DnodePhys>,
    pub groupused: Option<DnodePhys>,
    pub projectused: Option<DnodePhys>,
}

impl ObjsetPhys {
    /// Decodes an objset block of 1, 2 or 4 KiB.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<ObjsetPhys> {
        if buf.len() < OBJSET_PHYS_SIZE_V1 {
            return Err(Error::corrupt("objset", format!("block of {} bytes", buf.len())));
        }
        let meta_dnode = DnodePhys::parse(&buf[..512], order)?;
        let zil = ZilHeaderPhys {
            claim_txg: order.u64_at(buf, 512, "zil header")?,
            replay_seq: order.u64_at(buf, 520, "zil header")?,
            log: BlkPtr::parse(&buf[528..656], order)?,
            claim_blk_seq: order.u64_at(buf, 656, "zil header")?,
            flags: order.u64_at(buf, 664, "zil header")?,
            claim_lr_seq: order.u64_at(buf, 672, "zil header")?,
        };
        let mut portable_mac = [0u8; 32];
        portable_mac.copy_from_slice(&buf[720..752]);
        let mut local_mac = [0u8; 32];
        local_mac.copy_from_slice(&buf[752..784]);
        let sub = |off: usize| -> Result<Option<DnodePhys>> {
            if buf.len() >= off + 512 {
                let dn = DnodePhys::parse(&buf[off..off + 512], order)?;
                Ok(Some(dn))
            } else {
                Ok(None)
            }
        };
        Ok(ObjsetPhys {
            meta_dnode,
            zil,
            os_type: order.u64_at(buf, 704, "objset")?,
            flags: order.u64_at(buf, 712, "objset")?,
            portable_mac,
            local_mac,
            userused: sub(1024)?,
            groupused: sub(1536)?,
            projectused: sub(2048)?,
        })
    }

    /// Encodes into a block of `size` bytes (1, 2 or 4 KiB).
    pub fn encode(&self, size: usize, order: ByteOrder) -> Result<Vec<u8>> {
        if ![OBJSET_PHYS_SIZE_V1, OBJSET_PHYS_SIZE_V2, OBJSET_PHYS_SIZE_V3].contains(&size) {
            return Err(Error::corrupt("objset", format!("size {size}")));
        }
        let mut buf = vec![0u8; size];
        self.meta_dnode.encode_into(&mut buf[..512], order)?;
        order.put_u64(&mut buf, 512, self.zil.claim_txg);
        order.put_u64(&mut buf, 520, self.zil.replay_seq);
        buf[528..656].copy_from_slice(&self.zil.log.encode(order));
        order.put_u64(&mut buf, 656, self.zil.claim_blk_seq);
        order.put_u64(&mut buf, 664, self.zil.flags);
        order.put_u64(&mut buf, 672, self.zil.claim_lr_seq);
        order.put_u64(&mut buf, 704, self.os_type);
        order.put_u64(&mut buf, 712, self.flags);
        buf[720..752].copy_from_slice(&self.portable_mac);
        buf[752..784].copy_from_slice(&self.local_mac);
        for (off, dn) in [(1024, &self.userused), (1536, &self.groupused), (2048, &self.projectused)] {
            if let Some(dn) = dn {
                if size >= off + 512 {
                    dn.encode_into(&mut buf[off..off + 512], order)?;
                }
            }
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_objset_round_trips() {
        let os = ObjsetPhys { os_type: DMU_OST_ZFS, flags: 1, ..Default::default() };
        let b = os.encode(OBJSET_PHYS_SIZE_V3, ByteOrder::Little).unwrap();
        let back = ObjsetPhys::parse(&b, ByteOrder::Little).unwrap();
        assert_eq!(back.os_type, DMU_OST_ZFS);
        assert_eq!(back.flags, 1);
        assert!(back.projectused.is_some());
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = ObjsetPhys::parse(&bytes, ByteOrder::Little);
        }
    }
}
