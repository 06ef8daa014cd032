//! # lz4 — LZ4 block behind a 4-byte length
//!
//! ```text
//! offset  size  field
//! 0       4     bufsiz: big-endian length of the LZ4 block that follows
//! 4       bufsiz  raw LZ4 block (no frame, no checksum)
//! 4+bufsiz ...  padding up to psize (ignored)
//! ```
//!
//! The length exists because psize is rounded up to the allocation unit and an LZ4
//! block must be decoded from its exact extent (see OpenZFS module/zfs/lz4_zfs.c).
//! OpenZFS rejects `bufsiz + 4 > psize` and any block that does not expand to exactly
//! lsize. Its decoder is the reference `LZ4_decompress_safe`; lz4_flex accepts every
//! block that one accepts and decodes it identically, and its encoder honours the
//! reference end-of-block rules (last 5 bytes literal, no match starting in the last
//! 12 bytes), so OpenZFS can read what we write.

use super::corrupt;
use crate::Result;

/// Size of the big-endian length prefix.
const HDR: usize = 4;

const ALGO: &str = "lz4";

/// Decompress an OpenZFS lz4 block into exactly `dst.len()` bytes.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let hdr: [u8; HDR] = src
        .get(..HDR)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| corrupt(ALGO, format!("{} bytes cannot hold the header", src.len())))?;
    let bufsiz = u32::from_be_bytes(hdr) as usize;
    let payload = src.get(HDR..HDR.saturating_add(bufsiz)).ok_or_else(|| {
        corrupt(
            ALGO,
            format!("payload length {bufsiz} exceeds the {} bytes after the header", src.len() - HDR),
        )
    })?;
    // The reference decoder refuses an empty block outright.
    if payload.is_empty() {
        return Err(corrupt(ALGO, "empty payload"));
    }
    let n = lz4_flex::block::decompress_into(payload, dst).map_err(|e| corrupt(ALGO, e.to_string()))?;
    if n != dst.len() {
        return Err(corrupt(ALGO, format!("block yields {n} bytes, expected {}", dst.len())));
    }
    Ok(())
}

/// Compress `src` into `dst` (header included); `None` if it does not fit.
pub fn compress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let room = dst.len().checked_sub(HDR)?;
    // lz4_flex wants worst-case room; compress aside, then keep it only if it fits.
    let mut scratch = vec![0u8; lz4_flex::block::get_maximum_output_size(src.len())];
    let n = lz4_flex::block::compress_into(src, &mut scratch).ok()?;
    if n > room {
        return None;
    }
    let bufsiz = u32::try_from(n).ok()?;
    dst[..HDR].copy_from_slice(&bufsiz.to_be_bytes());
    dst[HDR..HDR + n].copy_from_slice(&scratch[..n]);
    Some(HDR + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_block() {
        // LZ4 block for "abcdabcdabcdabcdabcdX" + 5 literal bytes: token 0x4C = 4
        // literals "abcd", then a match at offset 4 of length 4+12 = 16; then the
        // final token 0x60 = 6 literals "Xyzzy!". Padding after it is ignored.
        let block = [0x4C, b'a', b'b', b'c', b'd', 0x04, 0x00, 0x60, b'X', b'y', b'z', b'z', b'y', b'!'];
        let mut src = (block.len() as u32).to_be_bytes().to_vec();
        src.extend_from_slice(&block);
        src.extend_from_slice(&[0; 10]);
        let mut dst = [0u8; 26];
        decompress(&src, &mut dst).unwrap();
        assert_eq!(&dst, b"abcdabcdabcdabcdabcdXyzzy!");
        // Wrong lsize either way is an error.
        assert!(decompress(&src, &mut [0u8; 25]).is_err());
        assert!(decompress(&src, &mut [0u8; 27]).is_err());
        // A length prefix larger than what follows is an error.
        src[3] = 200;
        assert!(decompress(&src, &mut dst).is_err());
    }

    #[test]
    fn header_is_big_endian() {
        let data = vec![7u8; 4096];
        let mut dst = vec![0u8; 4096];
        let n = compress(&data, &mut dst).unwrap();
        assert_eq!(u32::from_be_bytes(dst[..4].try_into().unwrap()) as usize, n - 4);
    }
}
