//! Bounds-checked, endian-explicit field access over byte slices.
//!
//! Every on-disk parser reads through these helpers so that a short or hostile buffer yields
//! `Error::Corrupt` instead of a panic.

use crate::error::{Error, Result};

/// Byte order of a block's contents. ZFS records it per block (the blkptr's `B` bit: 1 = little
/// endian) or per structure (a magic number read in the wrong order reveals a foreign writer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    /// The order of this machine.
    pub const NATIVE: ByteOrder =
        if cfg!(target_endian = "little") { ByteOrder::Little } else { ByteOrder::Big };

    /// Decodes a u64 at `off` in this order.
    pub fn u64_at(self, buf: &[u8], off: usize, what: &'static str) -> Result<u64> {
        let b = take::<8>(buf, off, what)?;
        Ok(match self {
            ByteOrder::Little => u64::from_le_bytes(b),
            ByteOrder::Big => u64::from_be_bytes(b),
        })
    }

    /// Decodes a u32 at `off` in this order.
    pub fn u32_at(self, buf: &[u8], off: usize, what: &'static str) -> Result<u32> {
        let b = take::<4>(buf, off, what)?;
        Ok(match self {
            ByteOrder::Little => u32::from_le_bytes(b),
            ByteOrder::Big => u32::from_be_bytes(b),
        })
    }

    /// Decodes a u16 at `off` in this order.
    pub fn u16_at(self, buf: &[u8], off: usize, what: &'static str) -> Result<u16> {
        let b = take::<2>(buf, off, what)?;
        Ok(match self {
            ByteOrder::Little => u16::from_le_bytes(b),
            ByteOrder::Big => u16::from_be_bytes(b),
        })
    }

    /// Encodes a u64 into `buf[off..off + 8]`; panics only on a programmer error (short buffer).
    pub fn put_u64(self, buf: &mut [u8], off: usize, v: u64) {
        let b = match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        };
        buf[off..off + 8].copy_from_slice(&b);
    }

    /// Encodes a u32 into `buf[off..off + 4]`.
    pub fn put_u32(self, buf: &mut [u8], off: usize, v: u32) {
        let b = match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        };
        buf[off..off + 4].copy_from_slice(&b);
    }

    /// Encodes a u16 into `buf[off..off + 2]`.
    pub fn put_u16(self, buf: &mut [u8], off: usize, v: u16) {
        let b = match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        };
        buf[off..off + 2].copy_from_slice(&b);
    }
}

/// Copies `N` bytes at `off`, or fails naming `what`.
pub fn take<const N: usize>(buf: &[u8], off: usize, what: &'static str) -> Result<[u8; N]> {
    let end = off.checked_add(N).ok_or_else(|| Error::corrupt(what, "offset overflow"))?;
    let s = buf
        .get(off..end)
        .ok_or_else(|| Error::corrupt(what, format!("need bytes {off}..{end}, have {}", buf.len())))?;
    let mut out = [0u8; N];
    out.copy_from_slice(s);
    Ok(out)
}

/// Borrows `len` bytes at `off`, or fails naming `what`.
pub fn slice<'a>(buf: &'a [u8], off: usize, len: usize, what: &'static str) -> Result<&'a [u8]> {
    let end = off.checked_add(len).ok_or_else(|| Error::corrupt(what, "offset overflow"))?;
    buf.get(off..end)
        .ok_or_else(|| Error::corrupt(what, format!("need bytes {off}..{end}, have {}", buf.len())))
}

/// Little-endian u64 at `off` (labels and most structures on x86 pools).
pub fn le_u64(buf: &[u8], off: usize, what: &'static str) -> Result<u64> {
    ByteOrder::Little.u64_at(buf, off, what)
}

/// Big-endian u64 at `off` (XDR and checksum words).
pub fn be_u64(buf: &[u8], off: usize, what: &'static str) -> Result<u64> {
    ByteOrder::Big.u64_at(buf, off, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_errors_not_panics() {
        let b = [1u8, 2, 3];
        assert!(le_u64(&b, 0, "x").is_err());
        assert!(ByteOrder::Big.u16_at(&b, 2, "x").is_err());
        assert!(slice(&b, usize::MAX, 2, "x").is_err());
        assert_eq!(ByteOrder::Big.u16_at(&b, 1, "x").unwrap(), 0x0203);
    }
}
