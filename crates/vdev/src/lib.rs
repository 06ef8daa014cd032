//! # vdev — the device layer of rzfs
//!
//! Turns a DVA (top-level vdev + offset + size) into device I/O, the way OpenZFS's vdev layer
//! does, with byte-identical layouts:
//! - [`BlockDevice`] and its implementations: files and block devices ([`FileDevice`]),
//!   memory ([`MemDevice`]) and a fault injector for tests ([`FaultyDevice`]);
//! - the vdev tree ([`VdevSpec`] → [`Vdev`]): leaves (disk, file, missing), mirror, replacing,
//!   spare, RAID-Z 1/2/3, root and hole, with per-vdev READ/WRITE/CKSUM counters, states and a
//!   `zpool status` walk ([`Vdev::stats`]);
//! - block reads that take the caller's checksum as a `verify` closure, so that mirrors can
//!   pick a good copy and RAID-Z can do combinatorial reconstruction; reads report the repairs
//!   they found necessary ([`ReadOutcome`]), and writes lay out parity exactly as OpenZFS;
//! - dirty time logs ([`dtl`]): the txgs each leaf is missing; reads of a block born in one
//!   of them avoid that leaf, and a scrub or resilver rewrites it there;
//! - raw I/O of the label areas ([`label_io`]).
//!
//! Not implemented yet: dRAID I/O (configuration is accepted, I/O returns `Unsupported`),
//! RAID-Z expansion (reflow), load balancing across mirror children.
#![forbid(unsafe_code)]

pub mod device;
pub mod dtl;
mod error;
pub mod inject;
pub mod label_io;
mod mirror;
pub mod raidz;
mod tree;

pub use device::{BlockDevice, FaultyDevice, FileDevice, MemDevice};
pub use error::{Result, VdevError};
pub use raidz::{raidz_asize, RaidzCol, RaidzMap};
pub use tree::{
    ErrorKind, ErrorRecord, ErrorReport, IoCounts, Offline, ReadOutcome, Repair, Vdev, VdevKind, VdevSpec,
    VdevStat, VdevState, ASHIFT_MAX, ASHIFT_MIN, ERROR_RECORDS_MAX, VDEV_LABEL_END_SIZE,
    VDEV_LABEL_START_SIZE,
};
