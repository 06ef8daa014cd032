//! # gzip-N — a zlib stream
//!
//! Despite the name, OpenZFS stores a zlib stream (RFC 1950: 2-byte header, deflate
//! data, big-endian adler32 of the output), produced by `compress2()` at level N and
//! read back with `uncompress()` (see OpenZFS module/zfs/gzip.c). `uncompress()`
//! succeeds only when the stream reaches its end with a valid adler32 and then ignores
//! any input after it (psize padding); OpenZFS then also demands exactly lsize bytes.
//! The level is not needed to decode. Our encoder is miniz_oxide's, whose bytes differ
//! from zlib's but are an equally valid zlib stream.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::corrupt;
use crate::Result;

const ALGO: &str = "gzip";

/// Decompress a zlib stream into exactly `dst.len()` bytes.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let mut z = Decompress::new(true);
    let status = z.decompress(src, dst, FlushDecompress::Finish).map_err(|e| corrupt(ALGO, e.to_string()))?;
    let produced = z.total_out();
    if status != Status::StreamEnd {
        return Err(corrupt(
            ALGO,
            format!("stream does not end within {} output bytes (got {produced})", dst.len()),
        ));
    }
    if produced != dst.len() as u64 {
        return Err(corrupt(ALGO, format!("stream yields {produced} bytes, expected {}", dst.len())));
    }
    Ok(())
}

/// Compress `src` at zlib level `level` (1..=9) into `dst`; `None` if it does not fit
/// or the level is out of range.
pub fn compress(level: u8, src: &[u8], dst: &mut [u8]) -> Option<usize> {
    if !(1..=9).contains(&level) {
        return None;
    }
    let mut z = Compress::new(Compression::new(u32::from(level)), true);
    loop {
        let (in_before, out_before) = (z.total_in(), z.total_out());
        let ip = usize::try_from(in_before).ok()?;
        let op = usize::try_from(out_before).ok()?;
        let status = z.compress(src.get(ip..)?, dst.get_mut(op..)?, FlushCompress::Finish).ok()?;
        if status == Status::StreamEnd {
            return usize::try_from(z.total_out()).ok();
        }
        // No progress means the output is full: it does not fit.
        if z.total_in() == in_before && z.total_out() == out_before {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_stored_stream() {
        // zlib header 78 01, one final stored block of 5 bytes "hello",
        // adler32("hello") = 0x062c0215, then padding.
        let src = [
            0x78, 0x01, 0x01, 0x05, 0x00, 0xFA, 0xFF, b'h', b'e', b'l', b'l', b'o', 0x06, 0x2C, 0x02, 0x15,
            0, 0, 0, 0,
        ];
        let mut dst = [0u8; 5];
        decompress(&src, &mut dst).unwrap();
        assert_eq!(&dst, b"hello");
        assert!(decompress(&src, &mut [0u8; 4]).is_err());
        assert!(decompress(&src, &mut [0u8; 6]).is_err());
        let mut bad = src;
        bad[15] ^= 1; // adler32 mismatch
        assert!(decompress(&bad, &mut dst).is_err());
        assert!(decompress(&src[..14], &mut dst).is_err()); // truncated
    }
}
