//! # ondisk — byte layouts of the OpenZFS on-disk format
//!
//! This crate owns the *shape* of every structure rzfs reads or writes: vdev labels and their XDR
//! nvlists, uberblocks, block pointers (DVAs, embedded data, gang headers), dnodes, objsets, micro
//! and fat ZAP blocks, system attributes, the older `znode_phys` bonus, DSL directory and dataset
//! records, space-map entries and bpobj headers, and the POSIX ACL xattr format.
//!
//! Invariants:
//! 1. No I/O. Every function takes bytes and returns values (or bytes).
//! 2. No panics on any input. Every parser returns `Err(Error::Corrupt { .. })` on bad bytes and
//!    bounds every loop and recursion by the format's own limits. Fuzz targets in `fuzz/` hold
//!    us to this.
//! 3. Endianness is explicit. Multi-byte fields are decoded with `from_le_bytes`/`from_be_bytes`
//!    according to the byte order recorded in the block pointer (or the magic number) that led to
//!    the block; nothing is cast from a byte slice.
//! 4. On-disk record types end in `Phys`.
#![forbid(unsafe_code)]

pub mod bytes;
pub mod error;

// Labels, nvlists, uberblocks.
pub mod label;
pub mod nvlist;
pub mod uberblock;

// Block pointers, dnodes, objsets.
pub mod blkptr;
pub mod dnode;
pub mod objset;

// Object contents: ZAP, SA, znode, DSL records, space maps, bpobj, object types.
pub mod bpobj;
pub mod dmu_types;
pub mod dsl;
pub mod posix_acl;
pub mod sa;
pub mod spacemap;
pub mod zap;
pub mod znode;

// The intent log.
pub mod zil;

pub use bytes::ByteOrder;
pub use error::{Error, Result};
