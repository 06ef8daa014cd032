//! Metaslab allocator: the in-memory half of ZFS block allocation.
//!
//! # Theory
//!
//! Each top-level vdev's allocatable space (DVA offsets; 0 is the first byte after the front
//! labels and boot area) is cut into metaslabs of `2^ms_shift` bytes; a tail shorter than one
//! metaslab is never used (OpenZFS `vdev_metaslab_init`: `count = asize >> ms_shift`). Every
//! allocation lies inside one metaslab.
//!
//! Per metaslab this crate keeps, as range trees (see [`range_tree`]):
//! * `free` - allocatable now (OpenZFS `ms_allocatable`);
//! * `allocating[txg]` - allocated in `txg`, not yet handed to the caller for the space map;
//! * `freeing[txg]` - freed in `txg`, not yet handed out (`ms_freeing`);
//! * `deferred[txg]` - freed in `txg`, already handed out, waiting out [`TXG_DEFER_SIZE`] txgs
//!   (`ms_freed` + `ms_defer[]`).
//!
//! Everything not in one of `free`, `freeing` or `deferred` is allocated. The lifecycle of a
//! txg T, driven by the pool layer:
//! 1. [`Allocator::alloc`] / [`Allocator::free`] during T's sync passes.
//! 2. [`Allocator::take_changes`] after each pass returns the pass's allocs and frees per
//!    metaslab; [`Allocator::sm_entries`] turns one into space map entries (what
//!    `metaslab_sync` -> `space_map_write` append: ALLOC entries, then FREE entries, each
//!    group preceded by a debug entry).
//! 3. [`Allocator::sync_done`]`(T)` once T is on disk: space freed in txg `T - TXG_DEFER_SIZE`
//!    becomes allocatable (OpenZFS `metaslab_sync_done` moves `ms_defer[T % 2]` back to
//!    `ms_allocatable`, so space freed in T is reusable only after T + 2 synced: the last
//!    uberblocks still reference it, which keeps rewind possible).
//!
//! A block freed in the txg that allocated it, before its allocation was taken for the space
//! map, goes straight back to `free` and never appears in a space map (OpenZFS
//! `metaslab_unalloc_dva`): no committed txg can reference it.
//!
//! Placement follows OpenZFS in spirit (module/zfs/metaslab.c): a rotor walks the top vdevs,
//! moving on after an "aliquot" of bytes scaled by the vdev's free space
//! (`metaslab_class_balance`); copies of one block go to consecutive distinct vdevs when there
//! are enough; within a vdev one active metaslab is used with a cursor-based first fit
//! (`metaslab_df_alloc`) until it cannot satisfy a request, then the metaslab with the most
//! free space that can takes over.

#![forbid(unsafe_code)]

mod allocator;
mod metaslab;
pub mod range_tree;
mod smap;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod tests;

pub use allocator::{Allocator, MetaslabDelta, SpaceStats, TopSpace};
pub use range_tree::RangeTree;
pub use smap::SpaceMapReplay;

/// Txgs a freed range waits before reuse (OpenZFS include/sys/txg.h `TXG_DEFER_SIZE`).
pub const TXG_DEFER_SIZE: u64 = 2;
/// Most DVAs in a block pointer (OpenZFS include/sys/spa.h `SPA_DVAS_PER_BP`).
pub const SPA_DVAS_PER_BP: usize = 3;

// Tunables of vdev_metaslab_set_size (OpenZFS module/zfs/vdev.c).
const ZFS_VDEV_DEFAULT_MS_COUNT: u64 = 200;
const ZFS_VDEV_MIN_MS_COUNT: u64 = 16;
const ZFS_VDEV_MS_COUNT_LIMIT: u64 = 1 << 17;
const ZFS_VDEV_DEFAULT_MS_SHIFT: u32 = 29;
const ZFS_VDEV_MAX_MS_SHIFT: u32 = 34;
/// `SPA_MAXBLOCKSHIFT` (include/sys/fs/zfs.h): a metaslab holds at least one largest block.
const SPA_MAXBLOCKSHIFT: u32 = 24;

/// Errors of the allocator. Every variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("no space for {copies} copies of {asize:#x} bytes")]
    NoSpace { asize: u64, copies: usize },
    #[error("unknown top-level vdev {0}")]
    UnknownVdev(u64),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("range tree: {0}")]
    Range(String),
    #[error("bad free of vdev {vdev} offset {offset:#x} asize {asize:#x}: {why}")]
    BadFree { vdev: u64, offset: u64, asize: u64, why: String },
    #[error("space map of vdev {vdev} metaslab {ms}: {why}")]
    BadSpaceMap { vdev: u64, ms: u64, why: String },
    #[error("txg {txg} has changes not yet taken with take_changes")]
    Undrained { txg: u64 },
}

pub type Result<T> = std::result::Result<T, Error>;

/// 1-based index of the highest set bit, 0 for 0 (OpenZFS `highbit64`).
fn highbit64(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// The metaslab shift OpenZFS `vdev_metaslab_set_size` (module/zfs/vdev.c) picks for a new top
/// vdev of `asize` allocatable bytes: aim for 2^29-byte metaslabs, but at least 16 and about
/// 200 of them, metaslabs between 2^24 and 2^34 bytes, and no more than 2^17 of them.
pub fn metaslab_shift(asize: u64) -> u32 {
    let ms_count = asize >> ZFS_VDEV_DEFAULT_MS_SHIFT;
    let mut ms_shift = if ms_count < ZFS_VDEV_MIN_MS_COUNT {
        highbit64(asize / ZFS_VDEV_MIN_MS_COUNT)
    } else if ms_count > ZFS_VDEV_DEFAULT_MS_COUNT {
        highbit64(asize / ZFS_VDEV_DEFAULT_MS_COUNT)
    } else {
        ZFS_VDEV_DEFAULT_MS_SHIFT
    };
    if ms_shift < SPA_MAXBLOCKSHIFT {
        ms_shift = SPA_MAXBLOCKSHIFT;
    } else if ms_shift > ZFS_VDEV_MAX_MS_SHIFT {
        ms_shift = ZFS_VDEV_MAX_MS_SHIFT;
        if (asize >> ms_shift) > ZFS_VDEV_MS_COUNT_LIMIT {
            ms_shift = highbit64(asize / ZFS_VDEV_MS_COUNT_LIMIT);
        }
    }
    ms_shift
}
