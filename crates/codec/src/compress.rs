//! # Block compression, as OpenZFS writes it
//!
//! A block pointer records a compression function (`enum zio_compress`, 7 bits of
//! `blk_prop`), an `lsize` (logical, decompressed size) and a `psize` (physical size).
//! The physical bytes are the compressor's output zero-padded up to the allocation unit,
//! so every decoder here receives exactly `psize` bytes and must tolerate trailing
//! padding. That is why lz4 and zstd blocks carry their own exact payload length in a
//! big-endian header, and why lzjb/zle/gzip stop as soon as the output is full or the
//! stream says it ended.
//!
//! Decoding must reproduce what OpenZFS reads (`zio_decompress_data`): every decoder
//! returns `Err` on a malformed stream and when the stream does not regenerate exactly
//! `lsize` bytes, as OpenZFS does; we are never stricter than OpenZFS on streams it can
//! produce. Encoding must produce streams OpenZFS can read; for lzjb and zle we also
//! mirror OpenZFS's own greedy encoders so the bytes (and so checksums and dedup) match.
//!
//! | value | `enum zio_compress` | module            |
//! |-------|---------------------|-------------------|
//! | 0     | inherit             | (property only)   |
//! | 1     | on                  | (property only)   |
//! | 2     | off                 | plain copy        |
//! | 3     | lzjb                | [`lzjb`]          |
//! | 4     | empty               | (write policy)    |
//! | 5..=13| gzip-1 .. gzip-9    | [`gzip`]          |
//! | 14    | zle                 | [`zle`]           |
//! | 15    | lz4                 | [`lz4`]           |
//! | 16    | zstd                | [`zstd`]          |
//!
//! (see OpenZFS include/sys/zio_compress.h and module/zfs/zio_compress.c)
//!
//! "empty" never describes a stored block: OpenZFS uses it as a write policy (an
//! all-zero block becomes a hole, anything else is stored with compression "off",
//! see module/zfs/zio.c `zio_write_compress`) and has no decompressor for it.

pub mod gzip;
pub mod lz4;
pub mod lzjb;
pub mod zle;
pub mod zstd;

use crate::{CodecError, Result};

/// A compression function a block can be written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressKind {
    /// Stored as is (`ZIO_COMPRESS_OFF`).
    Off,
    /// ZFS's original Lempel-Ziv variant (`ZIO_COMPRESS_LZJB`).
    Lzjb,
    /// Write policy "zero blocks become holes" (`ZIO_COMPRESS_EMPTY`).
    Empty,
    /// zlib stream at level 1..=9 (`ZIO_COMPRESS_GZIP_1` ..= `_9`).
    Gzip(u8),
    /// Zero-length encoding (`ZIO_COMPRESS_ZLE`).
    Zle,
    /// LZ4 block with a 4-byte length prefix (`ZIO_COMPRESS_LZ4`).
    Lz4,
    /// Magicless zstd frame behind an 8-byte OpenZFS header (`ZIO_COMPRESS_ZSTD`).
    Zstd,
}

/// `ZIO_COMPRESS_INHERIT`: the property inherits; never in a block pointer.
pub const ZIO_COMPRESS_INHERIT: u8 = 0;
/// `ZIO_COMPRESS_ON`: resolved to lz4 (or lzjb without the lz4 feature) at write time.
pub const ZIO_COMPRESS_ON: u8 = 1;
/// `ZIO_COMPRESS_OFF`.
pub const ZIO_COMPRESS_OFF: u8 = 2;
/// `ZIO_COMPRESS_LZJB`.
pub const ZIO_COMPRESS_LZJB: u8 = 3;
/// `ZIO_COMPRESS_EMPTY`.
pub const ZIO_COMPRESS_EMPTY: u8 = 4;
/// `ZIO_COMPRESS_GZIP_1`; gzip-N is `ZIO_COMPRESS_GZIP_1 + N - 1`.
pub const ZIO_COMPRESS_GZIP_1: u8 = 5;
/// `ZIO_COMPRESS_GZIP_9`.
pub const ZIO_COMPRESS_GZIP_9: u8 = 13;
/// `ZIO_COMPRESS_ZLE`.
pub const ZIO_COMPRESS_ZLE: u8 = 14;
/// `ZIO_COMPRESS_LZ4`.
pub const ZIO_COMPRESS_LZ4: u8 = 15;
/// `ZIO_COMPRESS_ZSTD`.
pub const ZIO_COMPRESS_ZSTD: u8 = 16;
/// `ZIO_COMPRESS_FUNCTIONS`: number of defined values.
pub const ZIO_COMPRESS_FUNCTIONS: u8 = 17;

/// Map an `enum zio_compress` value to the function it names.
///
/// `None` for inherit (0), on (1) and unknown values: "on" must be resolved by the
/// caller (lz4 if the pool has `org.illumos:lz4_compress` active, else lzjb).
pub fn kind_from_zio(v: u8) -> Option<CompressKind> {
    Some(match v {
        ZIO_COMPRESS_OFF => CompressKind::Off,
        ZIO_COMPRESS_LZJB => CompressKind::Lzjb,
        ZIO_COMPRESS_EMPTY => CompressKind::Empty,
        ZIO_COMPRESS_GZIP_1..=ZIO_COMPRESS_GZIP_9 => CompressKind::Gzip(v - ZIO_COMPRESS_GZIP_1 + 1),
        ZIO_COMPRESS_ZLE => CompressKind::Zle,
        ZIO_COMPRESS_LZ4 => CompressKind::Lz4,
        ZIO_COMPRESS_ZSTD => CompressKind::Zstd,
        _ => return None,
    })
}

impl CompressKind {
    /// The `enum zio_compress` value stored in a block pointer.
    /// A gzip level outside 1..=9 is clamped into that range.
    pub fn to_zio(self) -> u8 {
        match self {
            CompressKind::Off => ZIO_COMPRESS_OFF,
            CompressKind::Lzjb => ZIO_COMPRESS_LZJB,
            CompressKind::Empty => ZIO_COMPRESS_EMPTY,
            CompressKind::Gzip(n) => ZIO_COMPRESS_GZIP_1 + n.clamp(1, 9) - 1,
            CompressKind::Zle => ZIO_COMPRESS_ZLE,
            CompressKind::Lz4 => ZIO_COMPRESS_LZ4,
            CompressKind::Zstd => ZIO_COMPRESS_ZSTD,
        }
    }

    /// Name as `zfs get compression` prints it (see [`zio_compress_name`]).
    pub fn name(self) -> &'static str {
        zio_compress_name(self.to_zio())
    }
}

/// The name of an `enum zio_compress` value as `zfs get compression` prints it.
///
/// Property names come from `compress_table` in OpenZFS module/zcommon/zfs_prop.c,
/// where index-to-string returns the first entry with that value: gzip-6 therefore
/// prints as "gzip". "empty" is not a property value; it takes its name from
/// `zio_compress_table`. Unknown values give "unknown".
pub fn zio_compress_name(v: u8) -> &'static str {
    match v {
        ZIO_COMPRESS_INHERIT => "inherit",
        ZIO_COMPRESS_ON => "on",
        ZIO_COMPRESS_OFF => "off",
        10 => "gzip",
        _ => zio_compress_table_name(v),
    }
}

/// The name in OpenZFS's `zio_compress_table` (module/zfs/zio_compress.c), which zdb
/// prints for block pointers: "uncompressed" for off, "gzip-6" rather than "gzip".
pub fn zio_compress_table_name(v: u8) -> &'static str {
    const NAMES: [&str; ZIO_COMPRESS_FUNCTIONS as usize] = [
        "inherit",
        "on",
        "uncompressed",
        "lzjb",
        "empty",
        "gzip-1",
        "gzip-2",
        "gzip-3",
        "gzip-4",
        "gzip-5",
        "gzip-6",
        "gzip-7",
        "gzip-8",
        "gzip-9",
        "zle",
        "lz4",
        "zstd",
    ];
    NAMES.get(usize::from(v)).copied().unwrap_or("unknown")
}

/// Build the error every decoder returns for a malformed stream.
pub(crate) fn corrupt(algo: &'static str, detail: impl Into<String>) -> CodecError {
    CodecError::Corrupt { algo, detail: detail.into() }
}

/// Decompress `src` (exactly the psize bytes of the block, padding included) into
/// `dst`, whose length is the block's lsize.
///
/// Returns `Err` on any malformed stream and whenever the stream does not regenerate
/// exactly `dst.len()` bytes where the format can tell. Never panics.
pub fn decompress(kind: CompressKind, src: &[u8], dst: &mut [u8]) -> Result<()> {
    match kind {
        CompressKind::Off => {
            // OpenZFS never calls a decompressor for "off" (psize == lsize); accept the
            // identity copy so callers need no special case.
            if src.len() != dst.len() {
                return Err(corrupt("off", format!("psize {} differs from lsize {}", src.len(), dst.len())));
            }
            dst.copy_from_slice(src);
            Ok(())
        }
        CompressKind::Empty => Err(CodecError::Unsupported(
            "compression \"empty\" has no decompressor (zero blocks are holes)".into(),
        )),
        CompressKind::Lzjb => lzjb::decompress(src, dst),
        CompressKind::Gzip(_) => gzip::decompress(src, dst),
        CompressKind::Zle => zle::decompress(src, dst),
        CompressKind::Lz4 => lz4::decompress(src, dst),
        CompressKind::Zstd => zstd::decompress(src, dst).map(|_| ()),
    }
}

/// Compress `src` into `dst`; `dst.len()` is the most output we accept (what makes
/// compression worthwhile). Returns `Some(len)` of the stream written at the start of
/// `dst`, or `None` if it did not fit or the kind does not compress.
///
/// `level` matters only for zstd: it is the OpenZFS `enum zio_zstd_levels` value
/// (1..=19, or 103..=123 for zstd-fast-1 .. zstd-fast-1000; 0 and 255 mean the
/// default, zstd-3), and it is recorded in the zstd block header.
///
/// `Off` never compresses. `Empty` returns `Some(0)` for an all-zero `src` (the block
/// becomes a hole) and `None` otherwise (store uncompressed). Other kinds do not detect
/// zero blocks themselves; OpenZFS does that before compressing, in the zio layer.
pub fn compress(kind: CompressKind, level: u8, src: &[u8], dst: &mut [u8]) -> Option<usize> {
    match kind {
        CompressKind::Off => None,
        CompressKind::Empty => src.iter().all(|&b| b == 0).then_some(0),
        CompressKind::Lzjb => lzjb::compress(src, dst),
        CompressKind::Gzip(n) => gzip::compress(n, src, dst),
        CompressKind::Zle => zle::compress(src, dst),
        CompressKind::Lz4 => lz4::compress(src, dst),
        CompressKind::Zstd => zstd::compress(level, src, dst),
    }
}

/// For zstd blocks, the `enum zio_zstd_levels` value recorded in the block header
/// (the block pointer only says "zstd"; zdb reports this level). `None` if `src` is
/// shorter than the header or the recorded level is not one OpenZFS accepts.
pub fn zstd_header_level(src: &[u8]) -> Option<u8> {
    let hdr = zstd::ZstdHeader::parse(src).ok()?;
    zstd::native_level(hdr.level).map(|_| hdr.level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zio_values_round_trip() {
        for v in 0..=255u8 {
            if let Some(k) = kind_from_zio(v) {
                assert_eq!(k.to_zio(), v);
            }
        }
        assert_eq!(kind_from_zio(0), None);
        assert_eq!(kind_from_zio(1), None);
        assert_eq!(kind_from_zio(17), None);
        assert_eq!(kind_from_zio(5), Some(CompressKind::Gzip(1)));
        assert_eq!(kind_from_zio(13), Some(CompressKind::Gzip(9)));
        assert_eq!(kind_from_zio(15), Some(CompressKind::Lz4));
        assert_eq!(kind_from_zio(16), Some(CompressKind::Zstd));
    }

    #[test]
    fn names() {
        assert_eq!(zio_compress_name(2), "off");
        assert_eq!(zio_compress_name(10), "gzip");
        assert_eq!(zio_compress_name(9), "gzip-5");
        assert_eq!(zio_compress_name(15), "lz4");
        assert_eq!(zio_compress_name(200), "unknown");
        assert_eq!(zio_compress_table_name(2), "uncompressed");
        assert_eq!(zio_compress_table_name(10), "gzip-6");
        assert_eq!(CompressKind::Zstd.name(), "zstd");
    }

    #[test]
    fn off_and_empty() {
        let mut d = [1u8; 4];
        decompress(CompressKind::Off, &[9, 8, 7, 6], &mut d).unwrap();
        assert_eq!(d, [9, 8, 7, 6]);
        assert!(decompress(CompressKind::Off, &[9, 8, 7], &mut d).is_err());
        assert!(decompress(CompressKind::Empty, &[], &mut d).is_err());
        assert_eq!(compress(CompressKind::Empty, 0, &[0; 512], &mut d), Some(0));
        assert_eq!(compress(CompressKind::Empty, 0, &[1; 512], &mut d), None);
        assert_eq!(compress(CompressKind::Off, 0, &[0; 4], &mut d), None);
    }
}
