//! DSL records: `dsl_dir_phys_t` and `dsl_dataset_phys_t` (bonus buffers of MOS objects of
//! type `DMU_OT_DSL_DIR` / `DMU_OT_DSL_DATASET`), and the names used in MOS ZAPs
//! (OpenZFS include/sys/dsl_dir.h, include/sys/dsl_dataset.h, include/sys/dmu.h).
//!
//! ```text
//! dsl_dir_phys_t (256 bytes)              dsl_dataset_phys_t (320 bytes)
//! off field                               off field
//!   0 dd_creation_time                      0 ds_dir_obj            128 ds_bp (blkptr, 128 B)
//!   8 dd_head_dataset_obj                   8 ds_prev_snap_obj      256 ds_next_clones_obj
//!  16 dd_parent_obj                        16 ds_prev_snap_txg      264 ds_props_obj
//!  24 dd_origin_obj                        24 ds_next_snap_obj      272 ds_userrefs_obj
//!  32 dd_child_dir_zapobj                  32 ds_snapnames_zapobj   280 ds_pad[5]
//!  40 dd_used_bytes                        40 ds_num_children
//!  48 dd_compressed_bytes                  48 ds_creation_time
//!  56 dd_uncompressed_bytes                56 ds_creation_txg
//!  64 dd_quota                             64 ds_deadlist_obj
//!  72 dd_reserved                          72 ds_referenced_bytes
//!  80 dd_props_zapobj                      80 ds_compressed_bytes
//!  88 dd_deleg_zapobj                      88 ds_uncompressed_bytes
//!  96 dd_flags                             96 ds_unique_bytes
//! 104 dd_used_breakdown[5]                104 ds_fsid_guid
//! 144 dd_clones                           112 ds_guid
//! 152 dd_pad[13]                          120 ds_flags
//! ```
//!
//! The dataset's block pointer is kept raw; the blkptr module decodes it.

use crate::bytes::{slice, ByteOrder};
use crate::error::Result;

/// Size of `dsl_dir_phys_t`.
pub const DSL_DIR_PHYS_SIZE: usize = 256;
/// Size of `dsl_dataset_phys_t`.
pub const DSL_DATASET_PHYS_SIZE: usize = 320;

/// `DD_FLAG_USED_BREAKDOWN`: `dd_used_breakdown` is maintained.
pub const DD_FLAG_USED_BREAKDOWN: u64 = 1 << 0;
/// Indexes of `dd_used_breakdown` (`dd_used_t`).
pub const DD_USED_HEAD: usize = 0;
pub const DD_USED_SNAP: usize = 1;
pub const DD_USED_CHILD: usize = 2;
pub const DD_USED_CHILD_RSRV: usize = 3;
pub const DD_USED_REFRSRV: usize = 4;
/// `DD_USED_NUM`.
pub const DD_USED_NUM: usize = 5;

/// `ds_flags` bits.
pub const DS_FLAG_INCONSISTENT: u64 = 1 << 0;
pub const DS_FLAG_NOPROMOTE: u64 = 1 << 1;
pub const DS_FLAG_UNIQUE_ACCURATE: u64 = 1 << 2;
pub const DS_FLAG_DEFER_DESTROY: u64 = 1 << 3;
pub const DS_FLAG_CI_DATASET: u64 = 1 << 16;

/// Names of special DSL directories under the root (include/sys/dsl_dir.h).
pub const MOS_DIR_NAME: &str = "$MOS";
pub const ORIGIN_DIR_NAME: &str = "$ORIGIN";
pub const FREE_DIR_NAME: &str = "$FREE";
pub const LEAK_DIR_NAME: &str = "$LEAK";

/// Keys of the MOS object directory (object 1) and related MOS ZAPs.
pub mod mos_keys {
    /// Object number of the MOS object directory.
    pub const DIRECTORY_OBJECT: u64 = 1;
    pub const CONFIG: &str = "config";
    pub const FEATURES_FOR_WRITE: &str = "features_for_write";
    pub const FEATURES_FOR_READ: &str = "features_for_read";
    pub const FEATURE_DESCRIPTIONS: &str = "feature_descriptions";
    pub const FEATURE_ENABLED_TXG: &str = "feature_enabled_txg";
    pub const ROOT_DATASET: &str = "root_dataset";
    pub const SYNC_BPOBJ: &str = "sync_bplist";
    pub const ERRLOG_SCRUB: &str = "errlog_scrub";
    pub const ERRLOG_LAST: &str = "errlog_last";
    pub const SPARES: &str = "spares";
    pub const DEFLATE: &str = "deflate";
    pub const HISTORY: &str = "history";
    pub const PROPS: &str = "pool_props";
    pub const L2CACHE: &str = "l2cache";
    pub const TMP_USERREFS: &str = "tmp_userrefs";
    /// `DDT-%s-%s-%s` (checksum, type, class) prefix.
    pub const DDT_PREFIX: &str = "DDT-";
    pub const DDT_STATS: &str = "DDT-statistics";
    pub const CREATION_VERSION: &str = "creation_version";
    pub const SCAN: &str = "scan";
    pub const ERRORSCRUB: &str = "error_scrub";
    pub const LAST_SCRUBBED_TXG: &str = "last_scrubbed_txg";
    pub const FREE_BPOBJ: &str = "free_bpobj";
    pub const BPTREE_OBJ: &str = "bptree_obj";
    pub const EMPTY_BPOBJ: &str = "empty_bpobj";
    pub const CHECKSUM_SALT: &str = "org.illumos:checksum_salt";
    pub const VDEV_ZAP_MAP: &str = "com.delphix:vdev_zap_map";
    pub const REMOVING: &str = "com.delphix:removing";
    pub const OBSOLETE_BPOBJ: &str = "com.delphix:obsolete_bpobj";
    pub const CONDENSING_INDIRECT: &str = "com.delphix:condensing_indirect";
    pub const ZPOOL_CHECKPOINT: &str = "com.delphix:zpool_checkpoint";
    pub const LOG_SPACEMAP_ZAP: &str = "com.delphix:log_spacemap_zap";
    pub const DELETED_CLONES: &str = "com.delphix:deleted_clones";
    pub const TXG_LOG_TIME_MINUTES: &str = "com.klarasystems:txg_log_time:minutes";
    pub const TXG_LOG_TIME_DAYS: &str = "com.klarasystems:txg_log_time:days";
    pub const TXG_LOG_TIME_MONTHS: &str = "com.klarasystems:txg_log_time:months";

    /// Extensible dsl_dir ZAP fields (`DD_FIELD_*`).
    pub const DD_FILESYSTEM_COUNT: &str = "com.joyent:filesystem_count";
    pub const DD_SNAPSHOT_COUNT: &str = "com.joyent:snapshot_count";
    pub const DD_CRYPTO_KEY_OBJ: &str = "com.datto:crypto_key_obj";
    pub const DD_LIVELIST: &str = "com.delphix:livelist";
    pub const DD_SNAPSHOTS_CHANGED: &str = "com.ixsystems:snapshots_changed";

    /// Extensible dataset ZAP fields (`DS_FIELD_*`, subset).
    pub const DS_BOOKMARK_NAMES: &str = "com.delphix:bookmarks";
    pub const DS_LARGE_DNODE: &str = "org.zfsonlinux:large_dnode";
    pub const DS_REMAP_DEADLIST: &str = "com.delphix:remap_deadlist";
    pub const DS_IVSET_GUID: &str = "com.datto:ivset_guid";
    pub const DS_RAW_RECEIVED: &str = "org.openzfs:raw_received";
}

/// A decoded `dsl_dir_phys_t`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DslDirPhys {
    /// "not actually used" by OpenZFS, but zdb prints it.
    pub creation_time: u64,
    pub head_dataset_obj: u64,
    pub parent_obj: u64,
    pub origin_obj: u64,
    pub child_dir_zapobj: u64,
    pub used_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub quota: u64,
    pub reserved: u64,
    pub props_zapobj: u64,
    pub deleg_zapobj: u64,
    pub flags: u64,
    pub used_breakdown: [u64; DD_USED_NUM],
    pub clones: u64,
}

fn words<const N: usize>(buf: &[u8], order: ByteOrder, what: &'static str) -> Result<[u64; N]> {
    let b = slice(buf, 0, N * 8, what)?;
    let mut out = [0u64; N];
    for (i, w) in out.iter_mut().enumerate() {
        *w = order.u64_at(b, i * 8, what)?;
    }
    Ok(out)
}

fn put_words(buf: &mut [u8], order: ByteOrder, words: &[u64]) {
    for (i, &w) in words.iter().enumerate() {
        order.put_u64(buf, i * 8, w);
    }
}

impl DslDirPhys {
    /// Decodes a DSL directory bonus (at least the 152 meaningful bytes).
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<DslDirPhys> {
        let w: [u64; 19] = words(buf, order, "dsl_dir_phys")?;
        Ok(DslDirPhys {
            creation_time: w[0],
            head_dataset_obj: w[1],
            parent_obj: w[2],
            origin_obj: w[3],
            child_dir_zapobj: w[4],
            used_bytes: w[5],
            compressed_bytes: w[6],
            uncompressed_bytes: w[7],
            quota: w[8],
            reserved: w[9],
            props_zapobj: w[10],
            deleg_zapobj: w[11],
            flags: w[12],
            used_breakdown: [w[13], w[14], w[15], w[16], w[17]],
            clones: w[18],
        })
    }

    /// Encodes into a 256-byte bonus (padding zeroed).
    pub fn encode(&self, order: ByteOrder) -> Vec<u8> {
        let mut b = vec![0u8; DSL_DIR_PHYS_SIZE];
        let u = &self.used_breakdown;
        put_words(
            &mut b,
            order,
            &[
                self.creation_time,
                self.head_dataset_obj,
                self.parent_obj,
                self.origin_obj,
                self.child_dir_zapobj,
                self.used_bytes,
                self.compressed_bytes,
                self.uncompressed_bytes,
                self.quota,
                self.reserved,
                self.props_zapobj,
                self.deleg_zapobj,
                self.flags,
                u[0],
                u[1],
                u[2],
                u[3],
                u[4],
                self.clones,
            ],
        );
        b
    }
}

/// A decoded `dsl_dataset_phys_t`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DslDatasetPhys {
    pub dir_obj: u64,
    pub prev_snap_obj: u64,
    pub prev_snap_txg: u64,
    pub next_snap_obj: u64,
    /// Snapshot name -> dataset ZAP (`DMU_OT_DSL_DS_SNAP_MAP`).
    pub snapnames_zapobj: u64,
    pub num_children: u64,
    pub creation_time: u64,
    pub creation_txg: u64,
    pub deadlist_obj: u64,
    pub referenced_bytes: u64,
    pub compressed_bytes: u64,
    pub uncompressed_bytes: u64,
    pub unique_bytes: u64,
    pub fsid_guid: u64,
    pub guid: u64,
    pub flags: u64,
    /// `ds_bp`, raw.
    pub bp: [u8; 128],
    pub next_clones_obj: u64,
    /// Properties of a snapshot (`DMU_OT_DSL_PROPS`).
    pub props_obj: u64,
    pub userrefs_obj: u64,
}

impl DslDatasetPhys {
    /// Decodes a DSL dataset bonus (at least the 280 meaningful bytes).
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<DslDatasetPhys> {
        let w: [u64; 16] = words(buf, order, "dsl_dataset_phys")?;
        let mut bp = [0u8; 128];
        bp.copy_from_slice(slice(buf, 128, 128, "ds_bp")?);
        let t: [u64; 3] = words(slice(buf, 256, 24, "dsl_dataset_phys")?, order, "ds tail")?;
        Ok(DslDatasetPhys {
            dir_obj: w[0],
            prev_snap_obj: w[1],
            prev_snap_txg: w[2],
            next_snap_obj: w[3],
            snapnames_zapobj: w[4],
            num_children: w[5],
            creation_time: w[6],
            creation_txg: w[7],
            deadlist_obj: w[8],
            referenced_bytes: w[9],
            compressed_bytes: w[10],
            uncompressed_bytes: w[11],
            unique_bytes: w[12],
            fsid_guid: w[13],
            guid: w[14],
            flags: w[15],
            bp,
            next_clones_obj: t[0],
            props_obj: t[1],
            userrefs_obj: t[2],
        })
    }

    /// Encodes into a 320-byte bonus (padding zeroed; `bp` copied as is).
    pub fn encode(&self, order: ByteOrder) -> Vec<u8> {
        let mut b = vec![0u8; DSL_DATASET_PHYS_SIZE];
        put_words(
            &mut b,
            order,
            &[
                self.dir_obj,
                self.prev_snap_obj,
                self.prev_snap_txg,
                self.next_snap_obj,
                self.snapnames_zapobj,
                self.num_children,
                self.creation_time,
                self.creation_txg,
                self.deadlist_obj,
                self.referenced_bytes,
                self.compressed_bytes,
                self.uncompressed_bytes,
                self.unique_bytes,
                self.fsid_guid,
                self.guid,
                self.flags,
            ],
        );
        b[128..256].copy_from_slice(&self.bp);
        put_words(&mut b[256..], order, &[self.next_clones_obj, self.props_obj, self.userrefs_obj]);
        b
    }

    /// Is this a snapshot? OpenZFS decides by `ds_num_children != 0`: a snapshot counts its
    /// successor and its clones, a head dataset has 0 (see module/zfs/dsl_dataset.c).
    pub fn is_snapshot(&self) -> bool {
        self.num_children != 0
    }
}

impl Default for DslDatasetPhys {
    fn default() -> Self {
        DslDatasetPhys {
            dir_obj: 0,
            prev_snap_obj: 0,
            prev_snap_txg: 0,
            next_snap_obj: 0,
            snapnames_zapobj: 0,
            num_children: 0,
            creation_time: 0,
            creation_txg: 0,
            deadlist_obj: 0,
            referenced_bytes: 0,
            compressed_bytes: 0,
            uncompressed_bytes: 0,
            unique_bytes: 0,
            fsid_guid: 0,
            guid: 0,
            flags: 0,
            bp: [0u8; 128],
            next_clones_obj: 0,
            props_obj: 0,
            userrefs_obj: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_round_trip() {
        let d = DslDirPhys {
            head_dataset_obj: 54,
            child_dir_zapobj: 34,
            flags: DD_FLAG_USED_BREAKDOWN,
            used_breakdown: [1, 2, 3, 4, 5],
            clones: 9,
            ..Default::default()
        };
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let b = d.encode(order);
            assert_eq!(DslDirPhys::parse(&b, order).unwrap(), d);
            assert!(DslDirPhys::parse(&b[..150], order).is_err());
        }
    }

    #[test]
    fn dataset_round_trip() {
        let mut bp = [0u8; 128];
        bp[0] = 0xaa;
        bp[127] = 0x55;
        let b = vec![0u8; DSL_DATASET_PHYS_SIZE];
        let d = DslDatasetPhys {
            guid: 0x1234,
            props_obj: 77,
            userrefs_obj: 78,
            bp,
            ..DslDatasetPhys::parse(&b, ByteOrder::Little).unwrap()
        };
        let e = d.encode(ByteOrder::Big);
        assert_eq!(DslDatasetPhys::parse(&e, ByteOrder::Big).unwrap(), d);
        assert!(DslDatasetPhys::parse(&e[..279], ByteOrder::Big).is_err());
    }
}
