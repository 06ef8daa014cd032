//! Uberblocks (`uberblock_t`, OpenZFS include/sys/uberblock_impl.h) and SPA versions.
//!
//! An uberblock is the root of a pool's block tree for one txg. Each label holds a ring of
//! uberblock slots (see [`crate::label`]); the pool is opened from the *best* valid uberblock
//! across all labels of all devices ([`UberblockPhys::better_than`]).
//!
//! | off | size | field                                                        |
//! |-----|------|--------------------------------------------------------------|
//! | 0   | 8    | `ub_magic` = 0x00bab10c                                      |
//! | 8   | 8    | `ub_version`: SPA version                                    |
//! | 16  | 8    | `ub_txg`                                                     |
//! | 24  | 8    | `ub_guid_sum`: sum of all vdev guids                         |
//! | 32  | 8    | `ub_timestamp`: seconds since 1970 (UTC)                     |
//! | 40  | 128  | `ub_rootbp`: blkptr of the MOS objset_phys_t                 |
//! | 168 | 8    | `ub_software_version`: highest SPA version of the writer     |
//! | 176 | 8    | `ub_mmp_magic` = 0xa11cea11 when the MMP fields are valid    |
//! | 184 | 8    | `ub_mmp_delay`: ns since the last MMP write (0 = MMP off)    |
//! | 192 | 8    | `ub_mmp_config`: valid bits, write interval, seq, fail count |
//! | 200 | 8    | `ub_checkpoint_txg`: nonzero on a checkpointed uberblock     |
//! | 208 | 8    | `ub_raidz_reflow_info`: raidz expansion progress             |
//!
//! Everything is u64 in the writer's byte order: `uberblock_verify` detects a foreign writer
//! by a byteswapped magic and swaps the whole struct *as u64 words*, root blkptr included,
//! so `rootbp_raw` is to be decoded in [`UberblockPhys::byte_order`] too. Fields written by
//! newer software read as zero in older uberblocks (slots are zero-filled).
//!
//! The slot ends with a `zio_eck_t` (40 bytes): an embedded SHA-256 label checksum whose
//! verifier is the slot's device offset (see [`crate::label::uberblock_device_offset`]).
//! Checking it is the caller's job; [`UberblockPhys::encode`] leaves it zero.

use crate::bytes::{slice, take};
use crate::error::{Error, Result};
use crate::label::ZIO_ECK_SIZE;
use crate::ByteOrder;

/// `UBERBLOCK_MAGIC` ("oo-ba-bloc").
pub const UBERBLOCK_MAGIC: u64 = 0x00ba_b10c;
/// `MMP_MAGIC`: the MMP fields are present.
pub const MMP_MAGIC: u64 = 0xa11c_ea11;
/// `ub_mmp_config` bit: the write interval field is valid.
pub const MMP_INTERVAL_VALID_BIT: u64 = 0x01;
/// `ub_mmp_config` bit: the sequence field is valid.
pub const MMP_SEQ_VALID_BIT: u64 = 0x02;
/// `ub_mmp_config` bit: the fail-intervals field is valid.
pub const MMP_FAIL_INT_VALID_BIT: u64 = 0x04;
/// Bytes of `uberblock_t` in use.
pub const UBERBLOCK_PHYS_SIZE: usize = 216;

/// SPA versions of note (include/sys/fs/zfs.h). Versions 1..=28 are the legacy numbered
/// versions; 5000 means "feature flags" (features listed in the MOS instead).
pub const SPA_VERSION_1: u64 = 1;
/// First version.
pub const SPA_VERSION_INITIAL: u64 = SPA_VERSION_1;
/// Version 3: raidz2, hot spares.
pub const SPA_VERSION_3: u64 = 3;
/// Version 15: user/group space accounting.
pub const SPA_VERSION_15: u64 = 15;
/// Version 28: the last numbered version.
pub const SPA_VERSION_28: u64 = 28;
/// Last version before feature flags.
pub const SPA_VERSION_BEFORE_FEATURES: u64 = SPA_VERSION_28;
/// Feature-flag pools.
pub const SPA_VERSION_FEATURES: u64 = 5000;
/// The version this code writes (`SPA_VERSION`).
pub const SPA_VERSION: u64 = SPA_VERSION_FEATURES;

/// `SPA_VERSION_IS_SUPPORTED`: 1..=28 or 5000.
pub fn spa_version_is_supported(v: u64) -> bool {
    (SPA_VERSION_INITIAL..=SPA_VERSION_BEFORE_FEATURES).contains(&v) || v == SPA_VERSION_FEATURES
}

/// A decoded uberblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UberblockPhys {
    /// Byte order the uberblock (and its root blkptr) was written in.
    pub byte_order: ByteOrder,
    pub version: u64,
    pub txg: u64,
    pub guid_sum: u64,
    /// Seconds since the epoch, UTC.
    pub timestamp: u64,
    /// The root block pointer, 128 raw bytes in `byte_order`.
    pub rootbp_raw: [u8; 128],
    pub software_version: u64,
    pub mmp_magic: u64,
    pub mmp_delay: u64,
    pub mmp_config: u64,
    pub checkpoint_txg: u64,
    pub raidz_reflow_info: u64,
}

impl UberblockPhys {
    /// Decodes an uberblock from the start of `slot`. Fails unless the magic reads as
    /// `UBERBLOCK_MAGIC` in one of the two byte orders (empty slots fail this way).
    pub fn parse(slot: &[u8]) -> Result<UberblockPhys> {
        const WHAT: &str = "uberblock";
        let raw = slice(slot, 0, UBERBLOCK_PHYS_SIZE, WHAT)?;
        let magic = take::<8>(raw, 0, WHAT)?;
        let o = if u64::from_le_bytes(magic) == UBERBLOCK_MAGIC {
            ByteOrder::Little
        } else if u64::from_be_bytes(magic) == UBERBLOCK_MAGIC {
            ByteOrder::Big
        } else {
            return Err(Error::corrupt(WHAT, format!("bad magic {:#018x}", u64::from_le_bytes(magic))));
        };
        let f = |off| o.u64_at(raw, off, WHAT);
        Ok(UberblockPhys {
            byte_order: o,
            version: f(8)?,
            txg: f(16)?,
            guid_sum: f(24)?,
            timestamp: f(32)?,
            rootbp_raw: take::<128>(raw, 40, WHAT)?,
            software_version: f(168)?,
            mmp_magic: f(176)?,
            mmp_delay: f(184)?,
            mmp_config: f(192)?,
            checkpoint_txg: f(200)?,
            raidz_reflow_info: f(208)?,
        })
    }

    /// Encodes into a zeroed slot of `slot_size` bytes (at least 256: the struct plus the
    /// checksum tail; slots are 1..8 KiB), in `self.byte_order`. The trailing `zio_eck_t` is
    /// left zero for the caller to seal with the label checksum.
    pub fn encode(&self, slot_size: usize) -> Vec<u8> {
        let mut b = vec![0u8; slot_size.max(UBERBLOCK_PHYS_SIZE + ZIO_ECK_SIZE)];
        let o = self.byte_order;
        let words = [
            (0, UBERBLOCK_MAGIC),
            (8, self.version),
            (16, self.txg),
            (24, self.guid_sum),
            (32, self.timestamp),
            (168, self.software_version),
            (176, self.mmp_magic),
            (184, self.mmp_delay),
            (192, self.mmp_config),
            (200, self.checkpoint_txg),
            (208, self.raidz_reflow_info),
        ];
        for (off, v) in words {
            o.put_u64(&mut b, off, v);
        }
        b[40..168].copy_from_slice(&self.rootbp_raw);
        b
    }

    /// `MMP_VALID`: the MMP fields were written (by an MMP-aware OpenZFS, 0.7+).
    pub fn mmp_valid(&self) -> bool {
        self.mmp_magic == MMP_MAGIC
    }

    /// `MMP_SEQ` when `MMP_SEQ_VALID`, else `None`.
    pub fn mmp_seq(&self) -> Option<u16> {
        (self.mmp_valid() && self.mmp_config & MMP_SEQ_VALID_BIT != 0)
            .then_some(((self.mmp_config >> 32) & 0xffff) as u16)
    }

    /// `MMP_INTERVAL` (write interval, ms) when valid.
    pub fn mmp_interval_ms(&self) -> Option<u32> {
        (self.mmp_valid() && self.mmp_config & MMP_INTERVAL_VALID_BIT != 0)
            .then_some(((self.mmp_config >> 8) & 0xff_ffff) as u32)
    }

    /// `MMP_FAIL_INT` (fail intervals) when valid.
    pub fn mmp_fail_intervals(&self) -> Option<u16> {
        (self.mmp_valid() && self.mmp_config & MMP_FAIL_INT_VALID_BIT != 0)
            .then_some((self.mmp_config >> 48) as u16)
    }

    /// True for a checkpointed uberblock (`ub_checkpoint_txg` != 0).
    pub fn is_checkpoint(&self) -> bool {
        self.checkpoint_txg != 0
    }

    /// Raidz expansion scratch state (`RRSS_GET_STATE`: top 9 bits of the reflow word).
    pub fn raidz_reflow_state(&self) -> u64 {
        self.raidz_reflow_info >> 55
    }

    /// Raidz expansion reflow offset in bytes (`RRSS_GET_OFFSET`: low 55 bits, in 512-byte
    /// units).
    pub fn raidz_reflow_offset(&self) -> u64 {
        (self.raidz_reflow_info & ((1 << 55) - 1)) << 9
    }

    /// Whether `self` is a better uberblock than `other`, following `vdev_uberblock_compare`
    /// (module/zfs/vdev_label.c): the higher txg wins; on equal txg the later timestamp; on
    /// equal timestamp the higher MMP sequence number, where an uberblock without valid MMP
    /// sequence counts as sequence 0 (MMP writes rewrite the same txg several times a second,
    /// bumping only the sequence). Ties are not better.
    pub fn better_than(&self, other: &UberblockPhys) -> bool {
        let key = |u: &UberblockPhys| (u.txg, u.timestamp, u.mmp_seq().unwrap_or(0));
        key(self) > key(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(o: ByteOrder) -> UberblockPhys {
        let mut rootbp_raw = [0u8; 128];
        rootbp_raw.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        UberblockPhys {
            byte_order: o,
            version: 5000,
            txg: 42,
            guid_sum: 0x1234_5678_9abc_def0,
            timestamp: 1_700_000_000,
            rootbp_raw,
            software_version: 5000,
            mmp_magic: MMP_MAGIC,
            mmp_delay: 0,
            mmp_config: (7u64 << 32) | MMP_SEQ_VALID_BIT,
            checkpoint_txg: 0,
            raidz_reflow_info: 0,
        }
    }

    #[test]
    fn round_trip_both_orders() {
        for o in [ByteOrder::Little, ByteOrder::Big] {
            let ub = sample(o);
            let b = ub.encode(1024);
            assert_eq!(b.len(), 1024);
            assert_eq!(UberblockPhys::parse(&b).unwrap(), ub);
        }
        assert!(UberblockPhys::parse(&[0u8; 1024]).is_err());
        assert!(UberblockPhys::parse(&[0u8; 10]).is_err());
    }

    #[test]
    fn ordering() {
        let a = sample(ByteOrder::Little);
        let mut b = a.clone();
        assert!(!a.better_than(&b) && !b.better_than(&a));
        b.mmp_config = (8u64 << 32) | MMP_SEQ_VALID_BIT;
        assert!(b.better_than(&a));
        b.mmp_magic = 0; // sequence no longer valid: counts as 0
        assert!(a.better_than(&b));
        b.timestamp += 1;
        assert!(b.better_than(&a));
        let mut c = a.clone();
        c.txg += 1;
        c.timestamp = 0;
        assert!(c.better_than(&b));
        assert_eq!(a.mmp_seq(), Some(7));
    }

    #[test]
    fn versions() {
        assert!(spa_version_is_supported(1));
        assert!(spa_version_is_supported(28));
        assert!(!spa_version_is_supported(29));
        assert!(!spa_version_is_supported(0));
        assert!(spa_version_is_supported(5000));
        assert!(!spa_version_is_supported(999));
    }
}
