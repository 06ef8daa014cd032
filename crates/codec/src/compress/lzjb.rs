//! # lzjb — ZFS's original Lempel-Ziv compressor
//!
//! Stream layout (see OpenZFS module/zfs/lzjb.c for the format constants):
//!
//! ```text
//! group := copymap:u8  item x 8        (the last group may stop early)
//! item  := literal:u8                  if the copymap bit is 0
//!        | b0:u8 b1:u8                 if the copymap bit is 1 (bit 0 = first item)
//!           match length = (b0 >> 2) + 3          (3 ..= 66)
//!           match offset = ((b0 & 3) << 8) | b1   (back-reference distance, < 1024)
//! ```
//!
//! There is no length field and no end marker: the decoder runs until the output
//! (lsize) is full, and a match may be cut short by the end of the output. Bytes left
//! in the input after that are padding.
//!
//! The encoder is greedy with a 1024-entry hash table of last-seen positions keyed on
//! the next three bytes. OpenZFS stores the low 16 bits of *addresses* in that table
//! and starts it zeroed, so an empty slot proposes the candidate at distance
//! `address & 1023`; we model the source buffer as 1 KiB aligned (position 0 at an
//! address that is a multiple of 1024), which reproduces OpenZFS's output byte for
//! byte whenever its buffer is so aligned and is a valid stream in any case.

use super::corrupt;
use crate::Result;

/// Bits of the first match byte that hold the length.
const MATCH_BITS: u32 = 6;
/// Shortest match the format can express.
const MATCH_MIN: usize = 3;
/// Longest match: a 6-bit length field on top of `MATCH_MIN`.
const MATCH_MAX: usize = (1 << MATCH_BITS) + MATCH_MIN - 1;
/// Offsets are the remaining 10 bits of the two match bytes.
const OFFSET_MASK: usize = (1 << (16 - MATCH_BITS)) - 1;
/// Hash table slots in the encoder.
const LEMPEL_SIZE: usize = 1024;
/// Items per copymap byte.
const NBBY: usize = 8;

const ALGO: &str = "lzjb";

/// Decompress an lzjb stream until `dst` is full.
///
/// Errors when the input runs out before `dst` is full, when a match reaches before
/// the start of the output, or when a match has offset 0: OpenZFS's encoder never
/// writes one, and its decoder would copy not-yet-written output bytes onto themselves.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<()> {
    let mut ip = 0usize;
    let mut op = 0usize;
    let mut copymap = 0u8;
    let mut item = NBBY; // forces a copymap read before the first item
    while op < dst.len() {
        if item == NBBY {
            copymap = next_byte(src, &mut ip, op)?;
            item = 0;
        }
        let is_match = copymap & (1 << item) != 0;
        item += 1;
        if !is_match {
            dst[op] = next_byte(src, &mut ip, op)?;
            op += 1;
            continue;
        }
        let b0 = usize::from(next_byte(src, &mut ip, op)?);
        let b1 = usize::from(next_byte(src, &mut ip, op)?);
        let mlen = (b0 >> (8 - MATCH_BITS)) + MATCH_MIN;
        let offset = ((b0 << 8) | b1) & OFFSET_MASK;
        if offset == 0 || offset > op {
            return Err(corrupt(ALGO, format!("match offset {offset} invalid at output byte {op}")));
        }
        // Byte-by-byte: a match may overlap the bytes it produces (run-length style).
        let end = dst.len().min(op + mlen);
        while op < end {
            dst[op] = dst[op - offset];
            op += 1;
        }
    }
    Ok(())
}

/// Read one input byte, or report where the stream ran short.
fn next_byte(src: &[u8], ip: &mut usize, op: usize) -> Result<u8> {
    let b = *src
        .get(*ip)
        .ok_or_else(|| corrupt(ALGO, format!("input ends after {} bytes with output at {op}", src.len())))?;
    *ip += 1;
    Ok(b)
}

/// Hash of the three bytes at `p` into the encoder's table (the mixing is part of the
/// format only in that it decides which matches OpenZFS finds).
fn hash3(s: &[u8]) -> usize {
    let mut h = (usize::from(s[0]) << 16) + (usize::from(s[1]) << 8) + usize::from(s[2]);
    h += h >> 9;
    h += h >> 5;
    h & (LEMPEL_SIZE - 1)
}

/// Compress `src` into `dst`, giving up (`None`) when OpenZFS would: before opening
/// a group of eight items, at least 18 bytes must remain (room for a full group and
/// one more byte), so the output never exceeds `dst.len()`.
pub fn compress(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let mut lempel = [0u16; LEMPEL_SIZE];
    let mut ip = 0usize;
    let mut op = 0usize;
    let mut copymap_at = 0usize;
    let mut item = NBBY;
    while ip < src.len() {
        if item == NBBY {
            if op + 1 + 2 * NBBY >= dst.len() {
                return None;
            }
            copymap_at = op;
            dst[op] = 0;
            op += 1;
            item = 0;
        }
        let bit = 1u8 << item;
        item += 1;
        match find_match(src, ip, &mut lempel) {
            Some((mlen, offset)) => {
                dst[copymap_at] |= bit;
                // Truncations are the format: 6-bit length, 2+8-bit offset.
                dst[op] = (((mlen - MATCH_MIN) << (8 - MATCH_BITS)) | (offset >> 8)) as u8;
                dst[op + 1] = offset as u8;
                op += 2;
                ip += mlen;
            }
            None => {
                dst[op] = src[ip];
                op += 1;
                ip += 1;
            }
        }
    }
    Some(op)
}

/// Look up (and update) the hash slot for position `ip`; return `(length, offset)`
/// of a match of at least `MATCH_MIN` bytes, if the candidate is one.
fn find_match(src: &[u8], ip: usize, lempel: &mut [u16; LEMPEL_SIZE]) -> Option<(usize, usize)> {
    // Too close to the end to look for a match: OpenZFS emits the tail as literals.
    if ip + MATCH_MAX > src.len() {
        return None;
    }
    let slot = &mut lempel[hash3(&src[ip..])];
    // Low 16 bits of the position stand in for the address (1 KiB aligned base).
    let offset = ip.wrapping_sub(usize::from(*slot)) & OFFSET_MASK;
    *slot = ip as u16;
    if offset == 0 || offset > ip {
        return None;
    }
    let cpy = ip - offset;
    if src[cpy..cpy + MATCH_MIN] != src[ip..ip + MATCH_MIN] {
        return None;
    }
    let mut mlen = MATCH_MIN;
    while mlen < MATCH_MAX && src[ip + mlen] == src[cpy + mlen] {
        mlen += 1;
    }
    Some((mlen, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_built_stream() {
        // copymap 0b0000_1000: three literals 'a' 'b' 'c', then a match of
        // length 6 at offset 3 ("abcabc"), then literal 'z'.
        let mlen_field = (6 - MATCH_MIN) << 2;
        let src = [0x08, b'a', b'b', b'c', mlen_field as u8, 3, b'z', 0, 0];
        let mut dst = [0u8; 10];
        decompress(&src, &mut dst).unwrap();
        assert_eq!(&dst, b"abcabcabcz");
    }

    #[test]
    fn match_truncated_by_output_end() {
        // literal 'x' then a run of 66 copies of it; lsize 5 stops it early.
        let src = [0x02, b'x', 0xFC, 1];
        let mut dst = [0u8; 5];
        decompress(&src, &mut dst).unwrap();
        assert_eq!(&dst, b"xxxxx");
    }

    #[test]
    fn rejects_bad_streams() {
        let mut dst = [0u8; 8];
        // offset reaching before the start
        assert!(decompress(&[0x01, 0x00, 0x05], &mut dst).is_err());
        // offset 0
        assert!(decompress(&[0x02, b'a', 0x00, 0x00], &mut dst).is_err());
        // input too short
        assert!(decompress(&[0x00, 1, 2, 3], &mut dst).is_err());
        assert!(decompress(&[], &mut dst).is_err());
        // empty output needs no input
        decompress(&[], &mut []).unwrap();
    }

    #[test]
    fn small_inputs_are_literals() {
        let src = b"abcabcabc";
        let mut dst = [0u8; 64];
        let n = compress(src, &mut dst).unwrap();
        assert_eq!(&dst[..n], b"\x00abcabcab\x00c");
    }

    #[test]
    fn zero_block_golden() {
        // 128 zero bytes: position 0 finds the empty slot's candidate at offset 0
        // (no match) and emits a literal; position 1 proposes offset 1 and matches
        // 66 bytes; then the tail of 61 (< 66) bytes is literal.
        let src = [0u8; 128];
        let mut dst = [0u8; 128];
        let n = compress(&src, &mut dst).unwrap();
        let mut back = [1u8; 128];
        decompress(&dst[..n], &mut back).unwrap();
        assert_eq!(back, src);
        assert_eq!(&dst[..4], &[0x02, 0x00, 0xFC, 0x01]);
    }
}
