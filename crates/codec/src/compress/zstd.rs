//! # zstd — magicless zstd frame behind OpenZFS's 8-byte header
//!
//! ```text
//! offset  size  field
//! 0       4     c_len: big-endian length of the zstd frame that follows
//! 4       4     version/level word (see below)
//! 8       c_len zstd frame in the "magicless" format (no 4-byte magic number),
//!               written without content size and without checksum
//! 8+c_len ...   padding up to psize (ignored)
//! ```
//!
//! The version/level word was once a C bitfield, so its layout depended on the
//! writer's endianness (see OpenZFS include/sys/zstd/zstd.h, `zfs_get_hdrmeta`).
//! Read as a big-endian u32 `raw`, current writers put the level in bits 24..32 and
//! the zstd version number (e.g. 10405 for 1.4.5) in bits 0..24, i.e. on disk
//! `[level, Vhigh, Vmid, Vlow]`. Old big-endian writers produced
//! `[Vhigh, Vmid, Vlow, level]`. Readers tell them apart by which byte of `raw`,
//! scanning from the least significant, is the first zero (Vhigh is zero for any
//! zstd before 6.55.35):
//!
//! | first zero byte of raw | level from   | version from                    |
//! |------------------------|--------------|---------------------------------|
//! | bits 0..8   (disk [7]) | disk byte 4  | disk bytes 5,6,7 little-endian  |
//! | bits 8..16  (disk [6]) | disk byte 7  | disk bytes 4,5,6 little-endian  |
//! | bits 16..24 (disk [5]) | disk byte 4  | disk bytes 5,6,7 big-endian     |
//! | bits 24..32 (disk [4]) | disk byte 7  | disk bytes 4,5,6 big-endian     |
//! | none                   | 0 (invalid)  | 0                               |
//!
//! The level is the OpenZFS `enum zio_zstd_levels` value, not zstd's own number:
//! 1..=19 are zstd 1..=19; 103..=112 are zstd-fast-1..10 (zstd levels -1..-10);
//! 113..=121 are fast-20..fast-100 in steps of 10; 122 and 123 are fast-500 and
//! fast-1000 (include/sys/zio_compress.h, module/zstd/zfs_zstd.c `zstd_levels`).
//! OpenZFS refuses to decode a block whose header level is not one of these.
//!
//! The `zstd` crate cannot select the magicless format without its experimental API,
//! so we convert: a magicless frame is a standard frame minus its first four bytes.
//! We strip the magic after compressing and put it back before decompressing.

use ::zstd::zstd_safe::{self, CCtx, CParameter, DCtx};

use super::corrupt;
use crate::Result;

/// Size of OpenZFS's block header.
pub const ZSTD_HDR_SIZE: usize = 8;
/// Standard zstd frame magic number, stored little-endian at the start of a frame.
const ZSTD_MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
/// `ZIO_ZSTD_LEVEL_DEFAULT` (zstd-3), used for levels 0 (inherit) and 255 (default).
pub const ZIO_ZSTD_LEVEL_DEFAULT: u8 = 3;
/// `ZIO_ZSTD_LEVEL_FAST_1`, the first fast level.
pub const ZIO_ZSTD_LEVEL_FAST_1: u8 = 103;
/// `ZIO_ZSTD_LEVEL_FAST_1000`, the last fast level.
pub const ZIO_ZSTD_LEVEL_FAST_1000: u8 = 123;

const ALGO: &str = "zstd";

/// The parsed 8-byte OpenZFS zstd header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZstdHeader {
    /// Length of the magicless zstd frame after the header.
    pub c_len: u32,
    /// zstd library version number of the writer (major*10000 + minor*100 + patch).
    pub version: u32,
    /// OpenZFS `enum zio_zstd_levels` value the block was written with.
    pub level: u8,
}

impl ZstdHeader {
    /// Parse the header at the start of `src`, accepting every historical layout of
    /// the version/level word. The level is returned as found (even if invalid).
    pub fn parse(src: &[u8]) -> Result<ZstdHeader> {
        let h: [u8; ZSTD_HDR_SIZE] = src
            .get(..ZSTD_HDR_SIZE)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| corrupt(ALGO, format!("{} bytes cannot hold the header", src.len())))?;
        let c_len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let w = [h[4], h[5], h[6], h[7]];
        let (level, version) = if w[3] == 0 {
            (w[0], u32::from_le_bytes([w[1], w[2], w[3], 0]))
        } else if w[2] == 0 {
            (w[3], u32::from_le_bytes([w[0], w[1], w[2], 0]))
        } else if w[1] == 0 {
            (w[0], u32::from_be_bytes([0, w[1], w[2], w[3]]))
        } else if w[0] == 0 {
            (w[3], u32::from_be_bytes([0, w[0], w[1], w[2]]))
        } else {
            (0, 0)
        };
        Ok(ZstdHeader { c_len, version, level })
    }

    /// Serialize as current OpenZFS writes it: `[c_len BE][level][version BE 24 bits]`.
    pub fn to_bytes(&self) -> [u8; ZSTD_HDR_SIZE] {
        let c = self.c_len.to_be_bytes();
        let word = (u32::from(self.level) << 24) | (self.version & 0x00FF_FFFF);
        let w = word.to_be_bytes();
        [c[0], c[1], c[2], c[3], w[0], w[1], w[2], w[3]]
    }
}

/// Map an OpenZFS `enum zio_zstd_levels` value to zstd's native level; `None` for
/// values OpenZFS does not accept (0, 20..=102, 124..).
pub fn native_level(level: u8) -> Option<i32> {
    const FAST: [i32; 21] =
        [-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -20, -30, -40, -50, -60, -70, -80, -90, -100, -500, -1000];
    match level {
        1..=19 => Some(i32::from(level)),
        ZIO_ZSTD_LEVEL_FAST_1..=ZIO_ZSTD_LEVEL_FAST_1000 => {
            FAST.get(usize::from(level - ZIO_ZSTD_LEVEL_FAST_1)).copied()
        }
        _ => None,
    }
}

/// Property-style name of a level: "zstd-3", "zstd-fast-10"; `None` if invalid.
pub fn level_name(level: u8) -> Option<String> {
    let n = native_level(level)?;
    Some(if n > 0 { format!("zstd-{n}") } else { format!("zstd-fast-{}", -n) })
}

/// Decompress an OpenZFS zstd block into exactly `dst.len()` bytes; returns the level
/// recorded in its header (as `zfs_zstd_decompress_level` does).
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<u8> {
    let hdr = ZstdHeader::parse(src)?;
    if native_level(hdr.level).is_none() {
        return Err(corrupt(ALGO, format!("invalid level {} in header", hdr.level)));
    }
    let frames =
        src.get(ZSTD_HDR_SIZE..ZSTD_HDR_SIZE.saturating_add(hdr.c_len as usize)).ok_or_else(|| {
            corrupt(
                ALGO,
                format!(
                    "c_len {} exceeds the {} bytes after the header",
                    hdr.c_len,
                    src.len() - ZSTD_HDR_SIZE
                ),
            )
        })?;
    let n = decompress_magicless(frames, dst)?;
    if n != dst.len() {
        return Err(corrupt(ALGO, format!("frame yields {n} bytes, expected {}", dst.len())));
    }
    Ok(hdr.level)
}

/// Decode consecutive magicless frames (normally exactly one) into `dst`, as
/// `ZSTD_decompressDCtx` in magicless mode would; returns the bytes produced.
///
/// The frames are copied once behind a 4-byte gap. Each frame is decoded with the
/// magic written into the gap just before it; for the next frame, the magic goes over
/// the last four bytes of the frame just decoded, so the work stays linear.
fn decompress_magicless(frames: &[u8], dst: &mut [u8]) -> Result<usize> {
    let zerr =
        |what: &str, code: usize| corrupt(ALGO, format!("{what}: {}", zstd_safe::get_error_name(code)));
    let mut dctx = DCtx::try_create().ok_or_else(|| corrupt(ALGO, "cannot allocate a DCtx"))?;
    let mut buf = Vec::with_capacity(frames.len() + ZSTD_MAGIC.len());
    buf.extend_from_slice(&ZSTD_MAGIC);
    buf.extend_from_slice(frames);
    let mut at = 0usize; // where the current frame's (synthetic) magic starts
    let mut out = 0usize;
    while at + ZSTD_MAGIC.len() < buf.len() {
        let framed = buf.get_mut(at..).unwrap_or_default();
        framed[..ZSTD_MAGIC.len()].copy_from_slice(&ZSTD_MAGIC);
        let flen = zstd_safe::find_frame_compressed_size(framed).map_err(|c| zerr("bad frame", c))?;
        let one = framed
            .get(..flen)
            .filter(|f| f.len() > ZSTD_MAGIC.len())
            .ok_or_else(|| corrupt(ALGO, format!("frame size {flen} out of range")))?;
        let room = dst.get_mut(out..).unwrap_or_default();
        out += dctx.decompress(room, one).map_err(|c| zerr("decode", c))?;
        at += flen - ZSTD_MAGIC.len();
    }
    Ok(out)
}

/// Compress `src` at OpenZFS zstd `level` into `dst` (header included); `None` if the
/// level is invalid or the result does not fit.
pub fn compress(level: u8, src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let level = match level {
        0 | 255 => ZIO_ZSTD_LEVEL_DEFAULT,
        l => l,
    };
    let native = native_level(level)?;
    let room = dst.len().checked_sub(ZSTD_HDR_SIZE)?;
    let mut cctx = CCtx::try_create()?;
    // As OpenZFS: no content size, no checksum (ZFS checksums the block itself).
    cctx.set_parameter(CParameter::CompressionLevel(native)).ok()?;
    cctx.set_parameter(CParameter::ContentSizeFlag(false)).ok()?;
    cctx.set_parameter(CParameter::ChecksumFlag(false)).ok()?;
    // The standard frame carries 4 magic bytes we drop afterwards.
    let mut framed: Vec<u8> = Vec::with_capacity(room + ZSTD_MAGIC.len());
    cctx.compress2(&mut framed, src).ok()?;
    let frame = framed.strip_prefix(&ZSTD_MAGIC[..])?;
    if frame.len() > room {
        return None;
    }
    let hdr =
        ZstdHeader { c_len: u32::try_from(frame.len()).ok()?, version: zstd_safe::version_number(), level };
    dst[..ZSTD_HDR_SIZE].copy_from_slice(&hdr.to_bytes());
    dst[ZSTD_HDR_SIZE..ZSTD_HDR_SIZE + frame.len()].copy_from_slice(frame);
    Some(ZSTD_HDR_SIZE + frame.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layouts() {
        // Level 3, version 1.4.5 = 10405 = 0x0028A5, as in zstd.h's worked example.
        let le = ZstdHeader::parse(&[0, 0, 0, 9, 0x03, 0x00, 0x28, 0xA5]).unwrap();
        assert_eq!((le.c_len, le.level, le.version), (9, 3, 10405));
        let be = ZstdHeader::parse(&[0, 0, 0, 9, 0x00, 0x28, 0xA5, 0x03]).unwrap();
        assert_eq!((be.level, be.version), (3, 10405));
        // Byte-swapped variants of both layouts.
        let sw = ZstdHeader::parse(&[0, 0, 0, 9, 0x03, 0xA5, 0x28, 0x00]).unwrap();
        assert_eq!((sw.level, sw.version), (3, 10405));
        let sw2 = ZstdHeader::parse(&[0, 0, 0, 9, 0xA5, 0x28, 0x00, 0x03]).unwrap();
        assert_eq!((sw2.level, sw2.version), (3, 10405));
        let none = ZstdHeader::parse(&[0, 0, 0, 9, 1, 2, 3, 4]).unwrap();
        assert_eq!(none.level, 0);
        assert_eq!(le.to_bytes(), [0, 0, 0, 9, 0x03, 0x00, 0x28, 0xA5]);
        assert!(ZstdHeader::parse(&[0; 7]).is_err());
    }

    #[test]
    fn levels() {
        assert_eq!(native_level(0), None);
        assert_eq!(native_level(1), Some(1));
        assert_eq!(native_level(19), Some(19));
        assert_eq!(native_level(20), None);
        assert_eq!(native_level(102), None);
        assert_eq!(native_level(103), Some(-1));
        assert_eq!(native_level(112), Some(-10));
        assert_eq!(native_level(113), Some(-20));
        assert_eq!(native_level(121), Some(-100));
        assert_eq!(native_level(122), Some(-500));
        assert_eq!(native_level(123), Some(-1000));
        assert_eq!(native_level(124), None);
        assert_eq!(level_name(112).as_deref(), Some("zstd-fast-10"));
        assert_eq!(level_name(7).as_deref(), Some("zstd-7"));
    }
}
