//! # Per-dataset features: activation, inheritance and release
//!
//! Facts (OpenZFS `dsl_dataset.c`, `zfeature.c`, `dmu_object.c`):
//! - A per-dataset feature (`ZFEATURE_FLAG_PER_DATASET`: large_blocks, sha512, skein, edonr,
//!   blake3, zstd_compress, ...) is *active on a dataset* when the dataset's MOS object holds a
//!   ZAP entry named by the feature's guid (value: one uint64 0 for boolean features). The
//!   pool-wide refcount in `features_for_read`/`features_for_write` counts such datasets,
//!   heads and snapshots alike, so `zdb` can verify it.
//! - A dataset object gets its ZAP by being *zapified*: its dnode type becomes
//!   `DMU_OTN_ZAP_METADATA` (0xc4), an empty micro ZAP is written into it, its bonus (the
//!   `dsl_dataset_phys_t`) is untouched, and `extensible_dataset`'s refcount grows by one;
//!   freeing a zapified object gives that reference back.
//! - A head dataset activates a feature in the txg its first block needing it is born
//!   (`dsl_dataset_block_born`: lsize above 128 KiB → large_blocks; the block's checksum or
//!   compression → its feature), or when `compression` is set to a value that needs one.
//!   A snapshot starts with its head's active features; destroying a dataset releases them.
//! - large_dnode becomes active on a dataset when a dnode of more than one slot is synced in
//!   it (`dnode_sync`), not when `dnodesize` is set; setting it only needs the feature
//!   enabled.

use crate::feature_table::{self, Feature};
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use ondisk::blkptr::BlkPtr;
use ondisk::dsl::mos_keys as K;
use zap::write::ZapVal;

/// `DMU_OTN_ZAP_METADATA`: new-style type (0x80), metadata (0x40), ZAP byteswap (4).
pub const OTN_ZAP_METADATA: u8 = 0xc4;
/// `SPA_OLD_MAXBLOCKSIZE`: blocks above it need large_blocks.
const OLD_MAXBLOCKSIZE: u64 = 128 << 10;

fn bad(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(e.to_string())
}

/// The feature a block checksum needs (`zio_checksum_to_feature`).
pub fn checksum_feature(cksum: u8) -> Option<&'static str> {
    match cksum {
        11 => Some("sha512"),
        12 => Some("skein"),
        13 => Some("edonr"),
        14 => Some("blake3"),
        _ => None,
    }
}

/// The feature a compression algorithm needs (`zio_compress_to_feature`).
pub fn compress_feature(compress: u8) -> Option<&'static str> {
    (compress == 16).then_some("zstd_compress")
}

/// Per-dataset features a newly born block makes active.
pub fn features_of_bp(bp: &BlkPtr, out: &mut Vec<&'static str>) {
    if bp.is_hole() {
        return;
    }
    let mut add = |f: &'static str| {
        if !out.contains(&f) {
            out.push(f);
        }
    };
    if bp.lsize() > OLD_MAXBLOCKSIZE {
        add("large_blocks");
    }
    if !bp.is_embedded() {
        if let Some(f) = checksum_feature(bp.checksum()) {
            add(f);
        }
    }
    if let Some(f) = compress_feature(bp.compress()) {
        add(f);
    }
}

fn feature(short: &str) -> Result<&'static Feature> {
    feature_table::by_name(short).ok_or_else(|| bad(format!("internal error: unknown feature '{short}'")))
}

impl PoolWriter {
    /// The MOS ZAP that holds `f`'s refcount.
    fn feature_table_obj(&mut self, f: &Feature) -> Result<u64> {
        let key = if f.readonly_compat() { K::FEATURES_FOR_WRITE } else { K::FEATURES_FOR_READ };
        self.mos_zaps
            .lookup_u64(&self.mos, K::DIRECTORY_OBJECT, key)
            .map_err(bad)?
            .ok_or_else(|| bad(format!("pool has no {key} object")))
    }

    /// The refcount of feature `short`: None when the pool does not have it enabled.
    pub fn feature_refcount(&mut self, short: &str) -> Result<Option<u64>> {
        let f = feature(short)?;
        let obj = self.feature_table_obj(f)?;
        self.mos_zaps.lookup_u64(&self.mos, obj, f.guid).map_err(bad)
    }

    /// Adds `delta` to feature `short`'s refcount (`spa_feature_incr/decr`); the feature must
    /// be enabled.
    pub fn feature_adjust(&mut self, short: &str, delta: i64) -> Result<()> {
        let f = feature(short)?;
        let obj = self.feature_table_obj(f)?;
        let cur = self.mos_zaps.lookup_u64(&self.mos, obj, f.guid).map_err(bad)?.ok_or_else(|| {
            PoolError::Unsupported(format!("feature '{short}' is not enabled on this pool"))
        })?;
        let new = cur
            .checked_add_signed(delta)
            .ok_or_else(|| bad(format!("feature '{short}' refcount {cur} cannot change by {delta}")))?;
        self.mos_zaps.update_u64(&self.mos, obj, f.guid, new).map_err(bad)
    }

    pub(crate) fn is_zapified(&self, obj: u64) -> Result<bool> {
        let dn = self.mos.dnode(obj)?.ok_or_else(|| bad(format!("no MOS object {obj}")))?;
        Ok(dn.object_type == OTN_ZAP_METADATA)
    }

    /// Per-dataset features active on dataset object `ds`.
    pub fn ds_features(&mut self, ds: u64) -> Result<Vec<&'static str>> {
        if !self.is_zapified(ds)? {
            return Ok(Vec::new());
        }
        let entries = self.mos_zaps.entries(&self.mos, ds).map_err(bad)?;
        Ok(feature_table::all()
            .iter()
            .filter(|f| f.per_dataset() && entries.iter().any(|(k, _)| k == f.guid.as_bytes()))
            .map(|f| f.name)
            .collect())
    }

    /// Makes feature `short` active on dataset `ds` (`dsl_dataset_activate_feature`);
    /// nothing if it already is.
    pub fn ds_activate(&mut self, ds: u64, short: &str) -> Result<()> {
        let f = feature(short)?;
        if !f.per_dataset() || f.array_type {
            return Err(bad(format!("internal error: '{short}' is not a boolean per-dataset feature")));
        }
        if self.feature_refcount(short)?.is_none() {
            return Err(PoolError::Unsupported(format!(
                "feature '{short}' is not enabled on pool '{}' (rzpool set feature@{short}=enabled)",
                self.name
            )));
        }
        if self.ds_features(ds)?.contains(&f.name) {
            return Ok(());
        }
        self.zapify(ds)?;
        self.mos_zaps.update(&self.mos, ds, f.guid.as_bytes(), ZapVal::u64(0)).map_err(bad)?;
        self.feature_adjust(short, 1)
    }

    /// Gives dataset or directory object `ds` its ZAP (`dsl_dataset_zapify`,
    /// `dsl_dir_zapify`), if it has none yet.
    pub(crate) fn zapify(&mut self, ds: u64) -> Result<()> {
        if !self.is_zapified(ds)? {
            self.mos.dirty(ds)?.phys.object_type = OTN_ZAP_METADATA;
            self.mos_zaps.adopt_empty(ds);
            self.feature_adjust("extensible_dataset", 1)?;
        }
        Ok(())
    }

    /// Records now as when the snapshots of dataset `ds`'s directory changed (a snapshot
    /// taken, destroyed or renamed; OpenZFS's `dsl_dir_snap_cmtime_update`): the field
    /// `com.ixsystems:snapshots_changed` of the directory, zapified for it. A pool without
    /// extensible_dataset enabled keeps no such time (OpenZFS keeps it in memory only).
    pub fn snapshots_changed(&mut self, ds: u64) -> Result<()> {
        // A pool of version 1-28 has no feature objects at all.
        let featured =
            self.mos_zaps.lookup_u64(&self.mos, K::DIRECTORY_OBJECT, K::FEATURES_FOR_READ).map_err(bad)?;
        if featured.is_none() || self.feature_refcount("extensible_dataset")?.is_none() {
            return Ok(());
        }
        let dir = dsl::write::ds_phys(&self.mos, ds)?.dir_obj;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        self.zapify(dir)?;
        let val = ZapVal { int_size: 8, values: vec![now.as_secs(), u64::from(now.subsec_nanos())] };
        self.mos_zaps.update(&self.mos, dir, dsl::DD_FIELD_SNAPSHOTS_CHANGED.as_bytes(), val).map_err(bad)
    }

    /// Releases everything dataset `ds` holds on features before its object is freed: each
    /// active per-dataset feature and, if zapified, `extensible_dataset`.
    pub fn ds_release_features(&mut self, ds: u64) -> Result<()> {
        for f in self.ds_features(ds)? {
            self.feature_adjust(f, -1)?;
        }
        if self.is_zapified(ds)? {
            self.feature_adjust("extensible_dataset", -1)?;
        }
        Ok(())
    }

    /// Activates on `ds` every feature the blocks just born in it need.
    pub fn ds_activate_for_blocks(&mut self, ds: u64, needed: &[&'static str]) -> Result<()> {
        for f in needed {
            self.ds_activate(ds, f)?;
        }
        Ok(())
    }
}

/// Features that dataset properties about to be set need enabled (`zfs set` refuses
/// `compression=zstd` without zstd_compress, `recordsize=1M` without large_blocks...).
pub fn props_features(props: &[(String, ZapVal)]) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (k, v) in props {
        let Some(&n) = v.values.first() else { continue };
        let f = match k.as_str() {
            "compression" if n & 0x7f == 15 => Some("lz4_compress"),
            "compression" => compress_feature((n & 0x7f) as u8),
            "checksum" => u8::try_from(n).ok().and_then(checksum_feature),
            "recordsize" if n > OLD_MAXBLOCKSIZE => Some("large_blocks"),
            // Any dnode size but legacy (0) (`zfs_prop_set_special`'s check).
            "dnodesize" if n != 0 => Some("large_dnode"),
            "filesystem_limit" | "snapshot_limit" if n != u64::MAX => Some(crate::fslimits::FEATURE),
            _ => None,
        };
        if let Some(f) = f {
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

impl PoolWriter {
    /// Enables feature `short` (and first, recursively, what it depends on) in the open txg
    /// (`feature_enable_sync`): an entry in its refcount ZAP (1 if it activates on enable),
    /// its description, and its enabling txg when `enabled_txg` is enabled (which then
    /// counts one more reference).
    pub fn enable_feature(&mut self, short: &str) -> Result<()> {
        let f = feature(short)?;
        if self.feature_refcount(short)?.is_some() {
            return Ok(());
        }
        if !feature_table::implemented_for_write(short) {
            return Err(PoolError::Unsupported(format!(
                "feature '{short}' is not supported by rzfs for writing yet"
            )));
        }
        for dep in f.deps {
            self.enable_feature(dep)?;
        }
        let table = self.feature_table_obj(f)?;
        let refcount = u64::from(f.activate_on_enable());
        self.mos_zaps.update_u64(&self.mos, table, f.guid, refcount).map_err(bad)?;
        let dir = K::DIRECTORY_OBJECT;
        if let Some(descr) = self.mos_zaps.lookup_u64(&self.mos, dir, K::FEATURE_DESCRIPTIONS).map_err(bad)? {
            self.mos_zaps
                .update(&self.mos, descr, f.guid.as_bytes(), ZapVal::string(f.description))
                .map_err(bad)?;
        }
        if let Some(etxg) = self.mos_zaps.lookup_u64(&self.mos, dir, K::FEATURE_ENABLED_TXG).map_err(bad)? {
            let txg = self.txg;
            self.mos_zaps.update_u64(&self.mos, etxg, f.guid, txg).map_err(bad)?;
            if self.feature_refcount("enabled_txg")?.is_some() {
                self.feature_adjust("enabled_txg", 1)?;
            }
        }
        Ok(())
    }

    /// Refuses properties whose features the pool does not have enabled.
    pub fn check_props_features(&mut self, props: &[(String, ZapVal)]) -> Result<()> {
        for f in props_features(props) {
            if self.feature_refcount(f)?.is_none() {
                return Err(PoolError::Unsupported(format!(
                    "pool '{}' does not have feature '{f}' enabled, which this property value needs",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// After `props` were set on dataset `ds`: activates what `zfs set` activates at once
    /// (`dsl_dataset_set_compression`: the compression's feature).
    pub fn activate_for_props(&mut self, ds: u64, props: &[(String, ZapVal)]) -> Result<()> {
        if props.iter().any(|(k, v)| crate::fslimits::sets_limit(k, v)) {
            let dir = dsl::write::ds_phys(&self.mos, ds)?.dir_obj;
            self.limits_activate(dir)?;
        }
        for (k, v) in props {
            if k == "compression" {
                if let Some(f) = v.values.first().and_then(|&n| compress_feature((n & 0x7f) as u8)) {
                    self.ds_activate(ds, f)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_and_compress_map_to_features() {
        assert_eq!(checksum_feature(7), None);
        assert_eq!(checksum_feature(11), Some("sha512"));
        assert_eq!(checksum_feature(14), Some("blake3"));
        assert_eq!(compress_feature(15), None);
        assert_eq!(compress_feature(16), Some("zstd_compress"));
        for name in ["sha512", "skein", "edonr", "blake3", "zstd_compress", "large_blocks"] {
            let f = feature(name).unwrap();
            assert!(f.per_dataset() && !f.array_type, "{name}");
        }
    }
}
