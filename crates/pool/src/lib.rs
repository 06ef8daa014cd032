//! # pool — the SPA's upper half: finding, assembling and opening pools
//!
//! Owns: device discovery (labels), config assembly, uberblock selection, the MOS, feature
//! checks, the pool's error log, and per-device status. Reads go down through `zio` (which
//! owns verification) and `vdev` (which owns redundancy); dataset structure comes from `dsl`.
//!
//! Today an import is read-only: nothing in this crate writes to a device, and devices are
//! opened read-only. The write path (txg sync, space maps, config updates) comes next.
#![forbid(unsafe_code)]

pub mod add;
pub mod admin;
pub mod attach;
pub mod bookmarks;
pub mod compat;
pub mod create;
pub mod destroy;
pub mod devices;
pub mod discover;
pub mod dsfeatures;
pub mod dtl;
pub mod events;
pub mod expand;
pub mod feature_table;
pub mod features;
pub mod fslimits;
pub mod fsprobe;
pub mod heal;
pub mod history;
pub mod import;
pub mod l2arc;
pub mod l2cache;
pub mod open_rw;
pub mod scan;
pub mod space;
pub mod spacemaps;
pub mod spares;
pub mod status;
pub mod tunables;
pub mod txg;
pub mod vdevspec;
pub mod vdevzaps;
pub mod writer;
pub mod zil;

use dmu::{Objset, Reader};
use ondisk::uberblock::UberblockPhys;
use std::sync::{Arc, Mutex};
use vdev::Vdev;

pub use discover::{discover, PoolCandidate};
pub use import::{import, ImportOpts};

/// Errors of the pool layer; `Display` gives the message shown to the user.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PoolError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("pool load failed in phase {phase}: {detail}")]
    Load { phase: &'static str, detail: String },
    #[error(transparent)]
    Dmu(#[from] dmu::DmuError),
    #[error(transparent)]
    Dsl(#[from] dsl::DslError),
    /// A change does not fit in the space left (ENOSPC).
    #[error("{0}")]
    NoSpace(String),
    /// A `quota` or `refquota` is reached (EDQUOT).
    #[error("{0}")]
    QuotaExceeded(String),
    /// Devices failed and what was being written could not be stored with the redundancy
    /// left (EIO).
    #[error("{0}")]
    Io(String),
    /// The pool is suspended after I/O failures (EIO); `zpool clear` resumes it.
    #[error("pool I/O is currently suspended: {0}")]
    Suspended(String),
    /// The pool or dataset is in use (EBUSY).
    #[error("{0}")]
    Busy(String),
    /// Something of that name exists already (EEXIST).
    #[error("{0}")]
    Exists(String),
    /// The pool uses features this system cannot read (or, with `readonly_ok`, only cannot
    /// write): (guid, description from the pool's `feature_descriptions`) each, for the
    /// list zpool prints (`zpool_print_unsup_feat`).
    #[error("pool '{pool}' uses features rzfs cannot {}: {}", if *.readonly_ok { "write yet" } else { "read" }, .features.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(", "))]
    UnsupportedFeatures { pool: String, features: Vec<(String, String)>, readonly_ok: bool },
}

/// Linux errno values the pool layer's errors map to (the FUSE edge replies with them).
pub mod errno {
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const ENOTSUP: i32 = 95;
    pub const EDQUOT: i32 = 122;
}

impl PoolError {
    /// The errno a POSIX caller should see for this error.
    pub fn errno(&self) -> i32 {
        match self {
            PoolError::NotFound(_) => errno::ENOENT,
            PoolError::Invalid(_) => errno::EINVAL,
            PoolError::Unsupported(_) | PoolError::UnsupportedFeatures { .. } => errno::ENOTSUP,
            PoolError::NoSpace(_) => errno::ENOSPC,
            PoolError::QuotaExceeded(_) => errno::EDQUOT,
            PoolError::Busy(_) => errno::EBUSY,
            PoolError::Exists(_) => errno::EEXIST,
            PoolError::Dmu(dmu::DmuError::Zio(zio::ZioError::NoSpace(_))) => errno::ENOSPC,
            PoolError::Dmu(dmu::DmuError::NoSuchObject(_)) => errno::ENOENT,
            PoolError::Dsl(dsl::DslError::NoSuchDataset(_)) => errno::ENOENT,
            PoolError::Dsl(dsl::DslError::Unsupported(_)) => errno::ENOTSUP,
            _ => errno::EIO,
        }
    }

    /// Is this an out-of-space error, wherever it was raised?
    pub fn is_no_space(&self) -> bool {
        self.errno() == errno::ENOSPC
    }
}

impl From<ondisk::Error> for PoolError {
    fn from(e: ondisk::Error) -> Self {
        PoolError::Invalid(e.to_string())
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, PoolError>;

/// A block that could not be read from any copy: the permanent-error log of `zpool status -v`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DataError {
    /// Dataset name (or `<metadata>` for MOS blocks).
    pub dataset: String,
    pub object: u64,
    /// Path within the dataset when known.
    pub path: Option<String>,
    pub detail: String,
}

/// An imported pool.
pub struct Pool {
    pub candidate: PoolCandidate,
    /// Top-level vdevs by id (`Missing` for absent ones, `Hole` for removed ones).
    pub tops: Vec<Arc<Vdev>>,
    pub uberblock: UberblockPhys,
    pub reader: Reader,
    pub mos: Objset,
    pub opts: ImportOpts,
    errors: Mutex<Vec<DataError>>,
    /// Leaf paths as the owner of a read-write pool knows them (a device replaced at its
    /// own path is `PATH/old`, a missing one keeps its configured path); empty for a
    /// read-only import, whose labels say it.
    pub leaf_paths: std::collections::BTreeMap<u64, String>,
    /// A random guid for this load of the pool (`load_guid`, OpenZFS's `spa_load_guid`):
    /// it changes at every import, and read views of one import share it.
    pub load_guid: u64,
}

impl Pool {
    fn new(
        candidate: PoolCandidate,
        tops: Vec<Arc<Vdev>>,
        uberblock: UberblockPhys,
        reader: Reader,
        mos: Objset,
        opts: ImportOpts,
    ) -> Pool {
        Pool {
            candidate,
            tops,
            uberblock,
            reader,
            mos,
            opts,
            errors: Mutex::new(Vec::new()),
            leaf_paths: Default::default(),
            load_guid: create::random_guid(&mut Vec::new()),
        }
    }

    /// Pool name.
    pub fn name(&self) -> &str {
        &self.candidate.name
    }

    /// Pool guid.
    pub fn guid(&self) -> u64 {
        self.candidate.guid
    }

    /// SPA version from the label.
    pub fn version(&self) -> u64 {
        self.candidate.best().config.version
    }

    /// The dataset layer's view of this pool.
    pub fn dsl(&self) -> dsl::DslPool {
        dsl::DslPool::new(self.mos.clone(), self.name().to_string())
    }

    /// Records a permanent data error (no copy could be read).
    pub fn record_error(&self, e: DataError) {
        let mut v = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if !v.contains(&e) {
            v.push(e);
        }
    }

    /// Drops the permanent errors `gone` says were healed (a corrective receive).
    pub fn forget_errors(&self, gone: impl Fn(&DataError) -> bool) {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).retain(|e| !gone(e));
    }

    /// Permanent errors seen since import, sorted.
    pub fn errors(&self) -> Vec<DataError> {
        let mut v = self.errors.lock().unwrap_or_else(|p| p.into_inner()).clone();
        v.sort();
        v
    }
}

/// Largest packed nvlist read from a MOS object (the pool config is a few KiB; OpenZFS
/// keeps it in one `SPA_CONFIG_BLOCKSIZE` block and grows it rarely): a bonus claiming more
/// is corruption, not a reason to allocate.
pub const PACKED_NVLIST_MAX: u64 = 16 << 20;

/// Largest metaslab array read whole: one u64 per metaslab, and OpenZFS keeps a vdev to at
/// most 2^17 metaslabs (`zfs_vdev_ms_count_limit`), i.e. 1 MiB; the object is read in whole
/// blocks, so allow some slack.
pub const METASLAB_ARRAY_MAX: u64 = 4 << 20;

/// Byte order of an object's data blocks: that of its first non-hole block pointer.
fn data_order(dn: &dmu::Dnode) -> ondisk::ByteOrder {
    dn.blkptr.iter().find(|b| !b.is_hole()).map(|b| b.byte_order()).unwrap_or(ondisk::ByteOrder::NATIVE)
}

/// The pool config stored in the MOS (`config` in the object directory: a packed XDR nvlist
/// whose byte length is the u64 in the object's bonus buffer).
pub fn mos_config_nvlist(pool: &Pool) -> Result<ondisk::nvlist::NvList> {
    let mos = &pool.mos;
    let obj = zap::lookup_u64(mos, import::DMU_POOL_DIRECTORY_OBJECT, "config")
        .map_err(|e| PoolError::Load { phase: "mos_config", detail: e.to_string() })?
        .ok_or_else(|| PoolError::Load { phase: "mos_config", detail: "no config object".into() })?;
    let dn = mos.dnode(obj)?;
    let order = mos.dnode_byte_order();
    let len = order
        .u64_at(&dn.bonus, 0, "packed nvlist size")
        .map_err(|e| PoolError::Load { phase: "mos_config", detail: e.to_string() })?;
    let buf = mos
        .read_all(&dn, Some(len), PACKED_NVLIST_MAX)
        .map_err(|e| PoolError::Load { phase: "mos_config", detail: format!("config object {obj}: {e}") })?;
    ondisk::nvlist::NvList::decode(&buf)
        .map_err(|e| PoolError::Load { phase: "mos_config", detail: e.to_string() })
}

/// Top-level vdev configs from the MOS config (falling back to the labels).
pub fn mos_config(pool: &Pool) -> Result<Vec<ondisk::label::VdevTreeConfig>> {
    let from_labels = || {
        pool.candidate.devices.iter().filter_map(|d| d.config.tree.clone()).fold(
            Vec::new(),
            |mut v: Vec<ondisk::label::VdevTreeConfig>, t| {
                if !v.iter().any(|x| x.id == t.id) {
                    v.push(t);
                }
                v
            },
        )
    };
    let Ok(nv) = mos_config_nvlist(pool) else {
        return Ok(from_labels());
    };
    match nv.get_nvlist("vdev_tree").map(ondisk::label::VdevTreeConfig::from_nvlist) {
        Some(Ok(root)) => Ok(root.children),
        _ => Ok(from_labels()),
    }
}

/// Sum of `smp_alloc` over the space maps of one top-level vdev's metaslab array.
pub fn metaslab_alloc(pool: &Pool, array_obj: u64) -> Result<u64> {
    let mos = &pool.mos;
    let dn = mos.dnode(array_obj)?;
    let order = data_order(&dn);
    let data = mos.read_all(&dn, None, METASLAB_ARRAY_MAX)?;
    let mut total = 0u64;
    for chunk in data.chunks_exact(8) {
        let sm = order.u64_at(chunk, 0, "metaslab array").unwrap_or(0);
        if sm == 0 {
            continue;
        }
        let Ok(smdn) = mos.dnode(sm) else { continue };
        // space_map_phys_t: smp_object, smp_length, smp_alloc (offset 16), ...
        let alloc = mos.dnode_byte_order().u64_at(&smdn.bonus, 16, "space map header").unwrap_or(0);
        total = total.wrapping_add(alloc);
    }
    Ok(total)
}
