//! # codec — pure compute kernels the on-disk format demands
//!
//! Checksums (fletcher2/4, sha256, sha512/256, skein, edonr, blake3), compression (lzjb, lz4,
//! gzip-1..9, zle, zstd with OpenZFS's header) and RAID-Z parity (P/Q/R generation and
//! reconstruction). No I/O, no allocation-heavy state, no panics on untrusted input:
//! decompressors return `Err` on any malformed stream.
// Denied, not forbidden: `checksum::fletcher::simd` calls its AVX2 build (one audited block).
#![deny(unsafe_code)]

pub mod checksum;
pub mod compress;
pub mod raidz;

mod error;
pub use error::{CodecError, Result};
