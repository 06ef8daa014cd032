//! # zle — zero-length encoding
//!
//! Meant for blocks that are mostly zeros with some data. OpenZFS runs it with the
//! parameter n = 64 (the `ci_level` of "zle" in module/zfs/zio_compress.c). A stream
//! is a sequence of records, each led by one byte `b`:
//!
//! ```text
//! b in 0 ..= n-1     : b+1 literal bytes follow            (1 ..= 64)
//! b in n ..= 255     : a run of b+1-n zero bytes, no data  (1 ..= 192)
//! ```
//!
//! Decoding stops when the output is full (remaining input is padding) or the input is
//! exhausted; the output must then be exactly full, and a record may not overrun it.
//!
//! The encoder is OpenZFS's greedy one: a zero byte opens a zero run of up to 192; a
//! non-zero byte opens a literal run of up to 64 that continues through single zeros
//! and stops before a pair of zeros (module/zfs/zle.c).

use super::corrupt;
use crate::Result;

/// The split between literal and zero-run record headers.
const N: usize = 64;
/// Longest zero run one record can express.
const MAX_ZERO_RUN: usize = 256 - N;

const ALGO: &str = "zle";

/// Decompress a zle stream into exactly `dst.len()` bytes.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let mut ip = 0usize;
    let mut op = 0usize;
    while ip < src.len() && op < dst.len() {
        let len = 1 + usize::from(src[ip]);
        ip += 1;
        if len <= N {
            let lit = src
                .get(ip..ip + len)
                .ok_or_else(|| corrupt(ALGO, format!("literal run of {len} passes input end")))?;
            let out = dst
                .get_mut(op..op + len)
                .ok_or_else(|| corrupt(ALGO, format!("literal run of {len} at {op} passes output end")))?;
            out.copy_from_slice(lit);
            ip += len;
            op += len;
        } else {
            let zeros = len - N;
            let out = dst
                .get_mut(op..op + zeros)
                .ok_or_else(|| corrupt(ALGO, format!("zero run of {zeros} at {op} passes output end")))?;
            out.fill(0);
            op += zeros;
        }
    }
    if op != dst.len() {
        return Err(corrupt(ALGO, format!("stream yields {op} bytes, expected {}", dst.len())));
    }
    Ok(())
}

/// Compress `src` into `dst`; `None` if the whole input does not fit.
pub fn compress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let mut ip = 0usize;
    let mut op = 0usize;
    // A record needs its header byte plus at least one more byte of room.
    while ip < src.len() && op + 1 < dst.len() {
        let hdr = op;
        op += 1;
        let start = ip;
        if src[ip] == 0 {
            let limit = src.len().min(ip + MAX_ZERO_RUN);
            while ip < limit && src[ip] == 0 {
                ip += 1;
            }
            // Range N..=255 by construction (1..=192 zeros).
            dst[hdr] = (ip - start - 1 + N) as u8;
        } else {
            // Literal records reserve a full N bytes of room, as OpenZFS does.
            if dst.len() - op < N {
                break;
            }
            let limit = src.len().min(ip + N);
            // Copy through single zeros; stop before two zeros in a row.
            while ip + 1 < limit && (src[ip] | src[ip + 1]) != 0 {
                dst[op] = src[ip];
                op += 1;
                ip += 1;
            }
            if src[ip] != 0 {
                dst[op] = src[ip];
                op += 1;
                ip += 1;
            }
            // Range 0..=63 by construction (1..=64 literals).
            dst[hdr] = (ip - start - 1) as u8;
        }
    }
    (ip == src.len()).then_some(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_stream() {
        // "ab", then 5 zeros, then "c", then padding that must be ignored.
        let src = [1, b'a', b'b', 64 + 4, 0, b'c', 0xFF, 0xFF];
        let mut dst = [9u8; 8];
        decompress(&src, &mut dst).unwrap();
        assert_eq!(&dst, b"ab\0\0\0\0\0c");
        let mut enc = [0u8; 128];
        let n = compress(&dst, &mut enc).unwrap();
        assert_eq!(&enc[..n], &src[..6]);
    }

    #[test]
    fn single_zeros_stay_in_literals() {
        let data = b"a\0b\0\0c";
        let mut enc = [0u8; 128];
        let n = compress(data, &mut enc).unwrap();
        assert_eq!(&enc[..n], &[2, b'a', 0, b'b', 64 + 1, 0, b'c']);
    }

    #[test]
    fn rejects_short_and_overlong() {
        let mut dst = [0u8; 4];
        assert!(decompress(&[64 + 2], &mut dst).is_err()); // 3 zeros, want 4
        assert!(decompress(&[64 + 4], &mut dst).is_err()); // 5 zeros overrun
        assert!(decompress(&[3, 1, 2, 3], &mut dst).is_err()); // literal passes input
        assert!(decompress(&[4, 1, 2, 3, 4, 5], &mut dst).is_err()); // passes output
        decompress(&[64 + 3, 7, 7], &mut dst).unwrap(); // trailing padding ok
    }

    #[test]
    fn max_zero_run() {
        let zeros = [0u8; 4096];
        let mut enc = [0u8; 64];
        let n = compress(&zeros, &mut enc).unwrap();
        // 4096 = 21 * 192 + 64
        assert_eq!(n, 22);
        assert!(enc[..21].iter().all(|&b| b == 255));
        assert_eq!(enc[21], 64 + 63);
    }
}
