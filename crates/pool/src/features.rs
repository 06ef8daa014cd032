//! Feature flags (pool version 5000): which ones rzfs can read.
//!
//! A pool lists in `features_for_read` the features a reader must understand; OpenZFS refuses
//! to open a pool with an active one it does not know (`module/zfs/zfeature.c`). rzfs does the
//! same with this table. A feature is listed here only when the read path handles what it
//! changes on disk; the comment says why each is harmless or where it is handled.

/// Read-compatible features: (guid, short name, how the read path deals with it).
pub const READABLE: &[(&str, &str, &str)] = &[
    ("com.delphix:async_destroy", "async_destroy", "bptree of pending frees; not read"),
    ("com.delphix:empty_bpobj", "empty_bpobj", "shared empty bpobj; not read"),
    ("com.delphix:spacemap_histogram", "spacemap_histogram", "space map header only"),
    ("com.delphix:enabled_txg", "enabled_txg", "bookkeeping"),
    ("com.delphix:hole_birth", "hole_birth", "holes carry births; reads see zeros"),
    ("com.delphix:extensible_dataset", "extensible_dataset", "dataset ZAPs; read as ZAP"),
    ("com.delphix:bookmarks", "bookmarks", "bookmark ZAPs listed by zfs list -t bookmark"),
    ("com.delphix:embedded_data", "embedded_data", "zio decodes embedded pointers"),
    ("org.open-zfs:large_blocks", "large_blocks", "blocks up to 16 MiB"),
    ("org.zfsonlinux:large_dnode", "large_dnode", "dmu parses multi-slot dnodes"),
    ("org.illumos:lz4_compress", "lz4_compress", "codec lz4"),
    ("org.illumos:sha512", "sha512", "codec sha512/256"),
    ("org.illumos:skein", "skein", "codec skein (salted)"),
    ("org.illumos:edonr", "edonr", "codec edonr (salted)"),
    ("org.openzfs:blake3", "blake3", "codec blake3 (salted)"),
    ("org.freebsd:zstd_compress", "zstd_compress", "codec zstd with OpenZFS header"),
    ("com.delphix:obsolete_counts", "obsolete_counts", "space accounting only"),
    ("org.zfsonlinux:userobj_accounting", "userobj_accounting", "accounting objects"),
    ("org.zfsonlinux:project_quota", "project_quota", "accounting objects"),
    ("org.zfsonlinux:allocation_classes", "allocation_classes", "special/dedup vdevs read like others"),
    ("com.datto:resilver_defer", "resilver_defer", "scan state only"),
    ("org.openzfs:device_rebuild", "device_rebuild", "scan state only"),
    ("com.delphix:log_spacemap", "log_spacemap", "space maps are not needed to read"),
    ("com.delphix:livelist", "livelist", "clone livelists are not needed to read"),
    ("com.delphix:zpool_checkpoint", "zpool_checkpoint", "current state is read"),
    ("com.joyent:filesystem_limits", "filesystem_limits", "limits are properties"),
    ("com.joyent:multi_vdev_crash_dump", "multi_vdev_crash_dump", "dump zvols read as zvols"),
    ("com.delphix:bookmark_written", "bookmark_written", "written sizes of bookmarks; not shown"),
    ("com.delphix:redaction_bookmarks", "redaction_bookmarks", "redaction lists; not read"),
    ("com.delphix:redacted_datasets", "redacted_datasets", "redacted blocks read as errors"),
    ("com.delphix:head_errlog", "head_errlog", "error log"),
    ("com.fudosecurity:block_cloning", "block_cloning", "cloned blocks are ordinary pointers to readers"),
    ("com.truenas:block_cloning_endian", "block_cloning_endian", "BRT not needed to read"),
    ("com.delphix:redaction_list_spill", "redaction_list_spill", "redaction lists not read"),
    ("org.openzfs:zilsaxattr", "zilsaxattr", "ZIL records are not replayed read-only"),
    ("com.klarasystems:fast_dedup", "fast_dedup", "DDT not needed to read"),
    ("com.klarasystems:vdev_zaps_v2", "vdev_zaps_v2", "vdev ZAPs"),
    ("org.zfsonlinux:longname", "longname", "long names in ZAP entries"),
    // The MOS is never encrypted and every block verifies without a key (zio compares the
    // MAC-truncated checksum); dnode blocks of encrypted datasets are traversed (their dnode
    // cores are plaintext). Reading an encrypted block's contents fails with
    // `ZioError::Unsupported` until keys are supported.
    ("com.datto:encryption", "encryption", "keyless: metadata and traversal; encrypted contents unsupported"),
    ("com.klarasystems:large_microzap", "large_microzap", "micro ZAPs larger than 128 KiB"),
];

/// True if rzfs can read a pool on which feature `guid` is active.
pub fn readable(guid: &str) -> bool {
    READABLE.iter().any(|(g, _, _)| *g == guid)
}

/// Short name of a feature guid, for messages.
pub fn short_name(guid: &str) -> &str {
    READABLE.iter().find(|(g, _, _)| *g == guid).map(|(_, n, _)| *n).unwrap_or(guid)
}
