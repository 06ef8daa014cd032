//! ZAP (ZFS Attribute Processor) block layouts: micro ZAP, fat ZAP header, fat ZAP leaf.
//!
//! Theory. A ZAP object maps names to arrays of integers. Its first block starts with a u64
//! block-type word that says which of two encodings the object uses:
//!
//! * **micro ZAP** (`ZBT_MICRO`): the whole object is one block of 64-byte slots; slot 0 is the
//!   header (block type, salt, normalization flags), every other slot holds one name of at most
//!   49 bytes and one u64 value. See [`MicroZap`].
//! * **fat ZAP** (`ZBT_HEADER` in block 0): block 0 holds a [`FatZapHeader`] and, in its second
//!   half, an embedded pointer table; once that table outgrows the block it moves to blocks of
//!   its own (`zt_blk`, `zt_numblks`). The table is indexed by the top `zt_shift` bits of a
//!   name's hash and yields the block id of a leaf (`ZBT_LEAF`, see [`ZapLeaf`]). A leaf holds a
//!   small hash table of u16 chunk indexes followed by 24-byte chunks: entry chunks (hash,
//!   collision differentiator, where the name and value live) and array chunks (21 payload
//!   bytes each, chained). Integers inside array chunks are always **big-endian**, whatever the
//!   block's byte order; everything else follows the block's byte order.
//!
//! The hash ([`zap_hash`]) is a CRC-64 (ECMA-182, reflected) seeded with the object's salt,
//! truncated to its top 28 bits (48 with `ZAP_FLAG_HASH64`). Names of string-keyed ZAPs are
//! stored with their terminating NUL, which the hash does not cover.
//!
//! Every parser here takes the block's byte order from the caller (it comes from the block
//! pointer that led to the block) and returns `Error::Corrupt` instead of panicking.
//! Sources: OpenZFS include/sys/zap_impl.h, include/sys/zap_leaf.h, module/zfs/zap_micro.c,
//! zap_fat.c, zap_leaf.c, zap_impl.c.

pub mod build;
mod fat;
mod leaf;
mod micro;
pub mod norm;
mod walk;

pub use fat::{
    embedded_ptrtbl_entry, embedded_ptrtbl_shift, encode_fat_header_block, ptrtbl_block_entry, ptrtbl_index,
    FatZapHeader, PtrTblSlot, ZapTablePhys, FAT_ZAP_HEADER_SIZE,
};
pub use leaf::{
    build_leaf, leaf_hash_index, EntryChunk, KeyKind, LeafChunk, LeafGeometry, ZapLeaf, ZapLeafEntry,
    ZapLeafHeader, ZapName, CHAIN_END, ZAP_CHUNK_ARRAY, ZAP_CHUNK_ENTRY, ZAP_CHUNK_FREE,
    ZAP_LEAF_ARRAY_BYTES, ZAP_LEAF_CHUNKSIZE, ZLF_ENTRIES_CDSORTED,
};
pub use micro::{MicroZap, MzapEntry, MZAP_ENT_LEN, MZAP_NAME_LEN};
pub use walk::{fat_zap_entries, FatZapBlocks, FatZapObject};

use crate::bytes::ByteOrder;
use crate::error::{Error, Result};

/// Block type of a fat ZAP leaf (`ZBT_LEAF`).
pub const ZBT_LEAF: u64 = 1 << 63;
/// Block type of a fat ZAP header, block 0 (`ZBT_HEADER`).
pub const ZBT_HEADER: u64 = (1 << 63) + 1;
/// Block type of a micro ZAP (`ZBT_MICRO`).
pub const ZBT_MICRO: u64 = (1 << 63) + 3;
/// `zap_magic` of a fat ZAP header.
pub const ZAP_MAGIC: u64 = 0x2F52AB2AB;
/// `lh_magic` of a fat ZAP leaf.
pub const ZAP_LEAF_MAGIC: u32 = 0x2AB1EAF;

/// `ZAP_FLAG_HASH64`: 48 significant hash bits instead of 28.
pub const ZAP_FLAG_HASH64: u64 = 1 << 0;
/// `ZAP_FLAG_UINT64_KEY`: keys are arrays of u64, not strings.
pub const ZAP_FLAG_UINT64_KEY: u64 = 1 << 1;
/// `ZAP_FLAG_PRE_HASHED_KEY`: the first key word is already random and is the hash.
pub const ZAP_FLAG_PRE_HASHED_KEY: u64 = 1 << 2;

/// `ZFS_CRC64_POLY`, ECMA-182 in reflected form (see OpenZFS include/sys/dmu.h).
pub const ZFS_CRC64_POLY: u64 = 0xC96C_5795_D787_0F42;

const fn crc64_table() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ ZFS_CRC64_POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// `zfs_crc64_table`: the reflected CRC-64 table used by the ZAP hash and the SA layout hash.
pub static ZFS_CRC64_TABLE: [u64; 256] = crc64_table();

/// What the first word of a ZAP block says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZapBlockKind {
    Micro,
    Header,
    Leaf,
}

/// Reads the block-type word of a ZAP block in `order`.
pub fn block_kind(buf: &[u8], order: ByteOrder) -> Result<ZapBlockKind> {
    match order.u64_at(buf, 0, "zap block type")? {
        ZBT_MICRO => Ok(ZapBlockKind::Micro),
        ZBT_HEADER => Ok(ZapBlockKind::Header),
        ZBT_LEAF => Ok(ZapBlockKind::Leaf),
        other => {
            let hint = if other.swap_bytes() & (1 << 63) != 0 && other & (1 << 63) == 0 {
                " (looks byteswapped: wrong byte order?)"
            } else {
                ""
            };
            Err(Error::corrupt("zap block type", format!("unknown block type {other:#x}{hint}")))
        }
    }
}

/// Number of significant hash bits (`zap_hashbits`): 48 with `ZAP_FLAG_HASH64`, else 28.
/// Micro ZAPs have no flags and use 28.
pub fn zap_hashbits(zap_flags: u64) -> u32 {
    if zap_flags & ZAP_FLAG_HASH64 != 0 {
        48
    } else {
        28
    }
}

/// Largest collision differentiator (exclusive bound) a ZAP with these flags may use
/// (`zap_maxcd`): 16 bits with `ZAP_FLAG_HASH64`, else 32 bits.
pub fn zap_maxcd(zap_flags: u64) -> u32 {
    if zap_flags & ZAP_FLAG_HASH64 != 0 {
        (1 << 16) - 1
    } else {
        u32::MAX
    }
}

/// A ZAP key as the hash sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZapKey<'a> {
    /// A string name, **without** its terminating NUL.
    Str(&'a [u8]),
    /// A key of u64 words (ZAPs created with `ZAP_FLAG_UINT64_KEY`, e.g. the DDT and BRT).
    U64(&'a [u64]),
}

/// Feeds one byte into the reflected CRC-64.
fn crc64_step(h: u64, byte: u8) -> u64 {
    (h >> 8) ^ ZFS_CRC64_TABLE[((h ^ u64::from(byte)) & 0xff) as usize]
}

/// The ZAP hash of a (normalized) key (`zap_hash`, OpenZFS module/zfs/zap_impl.c).
///
/// `zap_flags` are the fat ZAP header's `zap_flags` (0 for a micro ZAP). The result keeps only
/// the top [`zap_hashbits`] bits; the low bits are zero, as on disk in `le_hash`.
/// A `ZAP_FLAG_PRE_HASHED_KEY` ZAP takes the first key word as the hash. Word keys are fed to
/// the CRC least significant byte first (the hash is of the integer, not of its stored bytes).
pub fn zap_hash(salt: u64, key: ZapKey<'_>, zap_flags: u64) -> Result<u64> {
    let h = if zap_flags & ZAP_FLAG_PRE_HASHED_KEY != 0 {
        match key {
            ZapKey::U64(words) => {
                *words.first().ok_or_else(|| Error::corrupt("zap key", "pre-hashed key has no words"))?
            }
            ZapKey::Str(_) => {
                return Err(Error::corrupt("zap key", "pre-hashed ZAP needs a u64 key"));
            }
        }
    } else {
        let mut h = salt;
        match key {
            ZapKey::Str(bytes) => {
                for &b in bytes {
                    h = crc64_step(h, b);
                }
            }
            ZapKey::U64(words) => {
                for w in words {
                    for b in w.to_le_bytes() {
                        h = crc64_step(h, b);
                    }
                }
            }
        }
        h
    };
    let bits = zap_hashbits(zap_flags);
    Ok(h & !((1u64 << (64 - bits)) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_table_matches_the_polynomial() {
        // OpenZFS asserts zfs_crc64_table[128] == ZFS_CRC64_POLY.
        assert_eq!(ZFS_CRC64_TABLE[128], ZFS_CRC64_POLY);
        assert_eq!(ZFS_CRC64_TABLE[0], 0);
    }

    #[test]
    fn hash_keeps_top_bits_only() {
        let h = zap_hash(0x1234, ZapKey::Str(b"ROOT"), 0).unwrap();
        assert_eq!(h & ((1 << 36) - 1), 0);
        let h64 = zap_hash(0x1234, ZapKey::Str(b"ROOT"), ZAP_FLAG_HASH64).unwrap();
        assert_eq!(h64 & ((1 << 16) - 1), 0);
        assert_eq!(h64 >> 36, h >> 36);
    }

    #[test]
    fn pre_hashed_keys() {
        let f = ZAP_FLAG_PRE_HASHED_KEY | ZAP_FLAG_UINT64_KEY | ZAP_FLAG_HASH64;
        let h = zap_hash(7, ZapKey::U64(&[0xabcd_ef01_2345_6789, 5]), f).unwrap();
        assert_eq!(h, 0xabcd_ef01_2345_0000);
        assert!(zap_hash(7, ZapKey::U64(&[]), f).is_err());
        assert!(zap_hash(7, ZapKey::Str(b"x"), f).is_err());
    }

    #[test]
    fn block_kinds() {
        let mut b = [0u8; 8];
        ByteOrder::Big.put_u64(&mut b, 0, ZBT_MICRO);
        assert_eq!(block_kind(&b, ByteOrder::Big).unwrap(), ZapBlockKind::Micro);
        assert!(block_kind(&b, ByteOrder::Little).is_err());
        assert!(block_kind(&b[..4], ByteOrder::Big).is_err());
    }
}
