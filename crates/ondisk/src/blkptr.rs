//! Block pointers (`blkptr_t`) and their DVAs.
//!
//! A block pointer names up to three copies of a block (DVAs), its logical and physical sizes,
//! compression, checksum type, object type, indirection level, byte order and birth txgs, plus
//! the 256-bit checksum of the physical (compressed) bytes. Facts from OpenZFS
//! `include/sys/spa.h`.
//!
//! ```text
//! offset  size  field
//!      0    16  dva[0]   word0: vdev(63..32) grid(31..24) asize/512(23..0)
//!     16    16  dva[1]   word1: gang(63) offset/512(62..0)
//!     32    16  dva[2]
//!     48     8  prop     lsize/512-1(15..0) psize/512-1(31..16) compress(38..32) embedded(39)
//!                        checksum(47..40) type(55..48) level(60..56) crypt(61) dedup(62)
//!                        byteorder(63: 1 = little endian)
//!     56     8  prop2
//!     64     8  pad
//!     72     8  physical birth txg (0 = same as logical)
//!     80     8  logical birth txg
//!     88     8  fill count
//!     96    32  checksum words[4]
//! ```
//!
//! An *embedded* block pointer (prop bit 39) carries up to 112 bytes of (compressed) data in
//! every word but `prop` (word 6) and the logical birth (word 10); its prop word then holds
//! lsize-1 in bits 0..25, psize-1 in bits 25..32 and the embedded type where the checksum
//! type would be. The payload bytes are the words, decoded as integers, emitted least
//! significant byte first (OpenZFS `decode_embedded_bp_compressed`).
//!
//! A *hole* is a non-embedded pointer whose first DVA is all zero; holes still carry the
//! logical size, type, level and birth of a block that was once written.
//!
//! The *crypt* bit (prop bit 61) marks three kinds of pointers (OpenZFS include/sys/spa.h):
//! a level-0 block of an encrypted object type is *encrypted*: DVA[2] then holds the 64-bit
//! salt and the first 64 bits of the IV, the upper 32 bits of the fill count hold the rest of
//! the IV, and checksum words 2..3 hold the MAC; a level-0 block of any other type is
//! *authenticated* (plaintext, MAC in checksum words 2..3, except objset blocks whose MACs
//! live in the objset header); a pointer above level 0 carries a checksum of its children's
//! MACs in words 2..3. Only encrypted pointers lose DVA[2] and the fill count's upper half.

use crate::bytes::{slice, ByteOrder};
use crate::dmu_types::DmuObjectType;
use crate::error::{Error, Result};

/// Size of an encoded block pointer.
pub const BLKPTR_SIZE: usize = 128;
/// The minimum block (sector) shift of every size field.
pub const SPA_MINBLOCKSHIFT: u32 = 9;
/// Largest block size the format allows (16 MiB, `SPA_MAXBLOCKSIZE`).
pub const SPA_MAXBLOCKSIZE: u64 = 16 << 20;
/// Size of a (classic) gang header block, `SPA_GANGBLOCKSIZE`.
pub const SPA_GANGBLOCKSIZE: usize = 512;
/// Block pointers in a classic 512-byte gang header, `SPA_GBH_NBLKPTRS`.
pub const SPA_GBH_NBLKPTRS: usize = 3;
/// Bytes of embedded payload (`BPE_PAYLOAD_SIZE`).
pub const BPE_PAYLOAD_SIZE: usize = 112;

/// Embedded block pointer types (`bp_embedded_type_t`).
pub const BP_EMBEDDED_TYPE_DATA: u8 = 0;
/// Redacted block (from a redacted send); reads as an error.
pub const BP_EMBEDDED_TYPE_REDACTED: u8 = 2;

/// One Data Virtual Address: where a copy of a block lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dva {
    pub word: [u64; 2],
}

impl Dva {
    /// Top-level vdev id.
    pub fn vdev(&self) -> u64 {
        self.word[0] >> 32
    }
    /// The "grid" byte (reserved for RAID-Z layouts; zero in practice).
    pub fn grid(&self) -> u8 {
        (self.word[0] >> 24) as u8
    }
    /// Allocated size in bytes (for a gang DVA: header plus all children).
    pub fn asize(&self) -> u64 {
        (self.word[0] & 0x00ff_ffff) << SPA_MINBLOCKSHIFT
    }
    /// Byte offset within the top-level vdev's allocatable space (after the 4 MiB label start).
    pub fn offset(&self) -> u64 {
        (self.word[1] & !(1u64 << 63)) << SPA_MINBLOCKSHIFT
    }
    /// True if this DVA points at a gang header rather than the data itself.
    pub fn is_gang(&self) -> bool {
        self.word[1] >> 63 == 1
    }
    /// True if the DVA is all zero (unused slot).
    pub fn is_empty(&self) -> bool {
        self.word == [0, 0]
    }
    /// Builds a DVA; sizes and offsets must be multiples of 512.
    pub fn new(vdev: u64, offset: u64, asize: u64, gang: bool) -> Dva {
        debug_assert!(offset.is_multiple_of(512) && asize.is_multiple_of(512));
        let w0 = (vdev << 32) | ((asize >> SPA_MINBLOCKSHIFT) & 0x00ff_ffff);
        let w1 = ((gang as u64) << 63) | (offset >> SPA_MINBLOCKSHIFT);
        Dva { word: [w0, w1] }
    }
}

/// A decoded block pointer. All fields are host integers; `byte_order` says how the block it
/// points to is encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlkPtr {
    pub dva: [Dva; 3],
    pub prop: u64,
    pub prop2: u64,
    pub pad: u64,
    pub phys_birth: u64,
    pub birth: u64,
    pub fill: u64,
    pub cksum: [u64; 4],
}

impl BlkPtr {
    /// Decodes 128 bytes in the byte order of the block that contains the pointer.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<BlkPtr> {
        let b = slice(buf, 0, BLKPTR_SIZE, "blkptr")?;
        let mut w = [0u64; 16];
        for (i, word) in w.iter_mut().enumerate() {
            *word = order.u64_at(b, i * 8, "blkptr")?;
        }
        Ok(BlkPtr::from_words(&w))
    }

    fn from_words(w: &[u64; 16]) -> BlkPtr {
        BlkPtr {
            dva: [Dva { word: [w[0], w[1]] }, Dva { word: [w[2], w[3]] }, Dva { word: [w[4], w[5]] }],
            prop: w[6],
            prop2: w[7],
            pad: w[8],
            phys_birth: w[9],
            birth: w[10],
            fill: w[11],
            cksum: [w[12], w[13], w[14], w[15]],
        }
    }

    fn words(&self) -> [u64; 16] {
        let d = &self.dva;
        [
            d[0].word[0],
            d[0].word[1],
            d[1].word[0],
            d[1].word[1],
            d[2].word[0],
            d[2].word[1],
            self.prop,
            self.prop2,
            self.pad,
            self.phys_birth,
            self.birth,
            self.fill,
            self.cksum[0],
            self.cksum[1],
            self.cksum[2],
            self.cksum[3],
        ]
    }

    /// Encodes into 128 bytes in `order`.
    pub fn encode(&self, order: ByteOrder) -> [u8; BLKPTR_SIZE] {
        let mut out = [0u8; BLKPTR_SIZE];
        for (i, w) in self.words().iter().enumerate() {
            order.put_u64(&mut out, i * 8, *w);
        }
        out
    }

    fn bits(&self, shift: u32, len: u32) -> u64 {
        (self.prop >> shift) & ((1u64 << len) - 1)
    }

    /// Embedded-data pointer (payload inside the pointer itself).
    pub fn is_embedded(&self) -> bool {
        self.bits(39, 1) == 1
    }
    /// Never written, or written as zeros: reads as zeros.
    pub fn is_hole(&self) -> bool {
        !self.is_embedded() && self.dva[0].is_empty()
    }
    /// The first DVA is a gang header (`BP_IS_GANG`).
    pub fn is_gang(&self) -> bool {
        !self.is_embedded() && self.dva[0].is_gang()
    }
    /// Number of gang DVAs (`BP_COUNT_GANG`), counting only real DVAs.
    pub fn gang_count(&self) -> u64 {
        self.dvas().iter().filter(|d| d.is_gang()).count() as u64
    }
    /// Embedded type (only meaningful when `is_embedded`).
    pub fn embedded_type(&self) -> u8 {
        self.bits(40, 8) as u8
    }
    /// Redacted (embedded type 2): the data was deliberately not sent.
    pub fn is_redacted(&self) -> bool {
        self.is_embedded() && self.embedded_type() == BP_EMBEDDED_TYPE_REDACTED
    }
    /// Logical (uncompressed) size in bytes.
    pub fn lsize(&self) -> u64 {
        if self.is_embedded() {
            if self.embedded_type() == BP_EMBEDDED_TYPE_DATA {
                self.bits(0, 25) + 1
            } else {
                0
            }
        } else {
            (self.bits(0, 16) + 1) << SPA_MINBLOCKSHIFT
        }
    }
    /// Physical (compressed) size in bytes; for embedded pointers the payload length.
    pub fn psize(&self) -> u64 {
        if self.is_embedded() {
            self.bits(25, 7) + 1
        } else {
            (self.bits(16, 16) + 1) << SPA_MINBLOCKSHIFT
        }
    }
    /// `zio_compress` value.
    pub fn compress(&self) -> u8 {
        self.bits(32, 7) as u8
    }
    /// `zio_checksum` value (OFF = 2 for embedded pointers).
    pub fn checksum(&self) -> u8 {
        if self.is_embedded() {
            2
        } else {
            self.bits(40, 8) as u8
        }
    }
    /// `dmu_object_type` of the block.
    pub fn object_type(&self) -> u8 {
        self.bits(48, 8) as u8
    }
    /// Indirection level (0 = data).
    pub fn level(&self) -> u8 {
        self.bits(56, 5) as u8
    }
    /// Crypt bit: encrypted, authenticated, or an indirect block carrying MACs
    /// (`BP_USES_CRYPT`).
    pub fn uses_crypt(&self) -> bool {
        self.bits(61, 1) == 1
    }
    /// `BP_IS_ENCRYPTED`: crypt bit, level 0, and an object type whose contents are
    /// encrypted. DVA[2] and the fill count's upper 32 bits then carry salt and IV.
    pub fn is_encrypted(&self) -> bool {
        self.uses_crypt() && self.level() == 0 && DmuObjectType::from_u8(self.object_type()).is_encrypted()
    }
    /// `BP_IS_AUTHENTICATED`: crypt bit, level 0, plaintext type protected by a MAC.
    pub fn is_authenticated(&self) -> bool {
        self.uses_crypt() && self.level() == 0 && !DmuObjectType::from_u8(self.object_type()).is_encrypted()
    }
    /// `BP_HAS_INDIRECT_MAC_CKSUM`: an indirect block whose checksum words 2..3 hold a
    /// checksum of the MACs below it.
    pub fn has_indirect_mac_cksum(&self) -> bool {
        self.uses_crypt() && self.level() > 0
    }
    /// Dedup bit.
    pub fn dedup(&self) -> bool {
        self.bits(62, 1) == 1
    }
    /// Byte order of the pointed-to block.
    pub fn byte_order(&self) -> ByteOrder {
        if self.bits(63, 1) == 1 {
            ByteOrder::Little
        } else {
            ByteOrder::Big
        }
    }
    /// Logical birth txg.
    pub fn logical_birth(&self) -> u64 {
        self.birth
    }
    /// Physical birth txg (equal to logical unless dedup/cloning/rewrite set it).
    pub fn physical_birth(&self) -> u64 {
        if self.is_embedded() {
            0
        } else if self.phys_birth != 0 {
            self.phys_birth
        } else {
            self.birth
        }
    }
    /// Fill count (number of non-hole L0 blocks beneath, or allocated dnodes). Encrypted
    /// pointers keep IV2 in the upper 32 bits, which are masked off (`BP_GET_FILL`).
    pub fn fill_count(&self) -> u64 {
        if self.is_embedded() {
            1
        } else if self.is_encrypted() {
            self.fill & 0xffff_ffff
        } else {
            self.fill
        }
    }
    /// The DVA slots that may hold addresses: all three, but only two for encrypted
    /// pointers (DVA[2] is salt + IV) and none for embedded ones.
    fn dva_slots(&self) -> &[Dva] {
        if self.is_embedded() {
            &[]
        } else if self.is_encrypted() {
            &self.dva[..2]
        } else {
            &self.dva[..]
        }
    }
    /// The valid DVAs (non-zero asize, `DVA_IS_VALID`), in slot order.
    pub fn dvas(&self) -> Vec<Dva> {
        self.dva_slots().iter().filter(|d| d.asize() != 0).copied().collect()
    }
    /// Number of valid DVAs (`BP_GET_NDVAS`).
    pub fn ndvas(&self) -> usize {
        self.dva_slots().iter().filter(|d| d.asize() != 0).count()
    }
    /// Allocated bytes of all copies (`BP_GET_ASIZE`; 0 for embedded pointers).
    pub fn asize(&self) -> u64 {
        self.dva_slots().iter().map(|d| d.asize()).sum()
    }

    /// The embedded payload (exactly `psize` bytes). Errors if not embedded or sizes are wrong.
    pub fn embedded_payload(&self) -> Result<Vec<u8>> {
        if !self.is_embedded() {
            return Err(Error::corrupt("blkptr", "not an embedded block pointer"));
        }
        let psize = self.psize() as usize;
        if psize > BPE_PAYLOAD_SIZE {
            return Err(Error::corrupt("blkptr", format!("embedded psize {psize} > 112")));
        }
        let w = self.words();
        let mut out = Vec::with_capacity(BPE_PAYLOAD_SIZE);
        for (i, word) in w.iter().enumerate() {
            if i == 6 || i == 10 {
                continue; // prop and logical birth are not payload
            }
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.truncate(psize);
        Ok(out)
    }

    /// Sets the fields of an embedded-data pointer (used by writers).
    #[allow(clippy::too_many_arguments)]
    pub fn new_embedded(
        payload: &[u8],
        lsize: u64,
        compress: u8,
        object_type: u8,
        level: u8,
        birth: u64,
        order: ByteOrder,
    ) -> Result<BlkPtr> {
        if payload.is_empty() || payload.len() > BPE_PAYLOAD_SIZE || lsize == 0 || lsize > 1 << 25 {
            return Err(Error::corrupt("blkptr", "embedded payload or lsize out of range"));
        }
        let mut padded = [0u8; BPE_PAYLOAD_SIZE];
        padded[..payload.len()].copy_from_slice(payload);
        let mut w = [0u64; 16];
        let mut chunks = padded.chunks_exact(8);
        for (i, word) in w.iter_mut().enumerate() {
            if i == 6 || i == 10 {
                continue;
            }
            let mut b = [0u8; 8];
            if let Some(c) = chunks.next() {
                b.copy_from_slice(c);
            }
            *word = u64::from_le_bytes(b);
        }
        let le = (order == ByteOrder::Little) as u64;
        w[6] = (lsize - 1)
            | ((payload.len() as u64 - 1) << 25)
            | ((compress as u64 & 0x7f) << 32)
            | (1 << 39)
            | ((BP_EMBEDDED_TYPE_DATA as u64) << 40)
            | ((object_type as u64) << 48)
            | (((level & 0x1f) as u64) << 56)
            | (le << 63);
        w[10] = birth;
        Ok(BlkPtr::from_words(&w))
    }

    /// A hole written in txg `txg` as OpenZFS writes holes once `hole_birth` is active
    /// (`zio_write_compress`, `free_blocks` in dnode_sync.c): no DVA, but the logical size,
    /// object type, level and logical birth of the block it replaces, so an incremental send
    /// sees when the range was freed. `lsize` is a multiple of 512 up to 16 MiB.
    pub fn hole_born(lsize: u64, object_type: u8, level: u8, txg: u64) -> BlkPtr {
        let lsize_bits = (lsize >> 9).saturating_sub(1) & 0xffff;
        BlkPtr {
            prop: lsize_bits | (u64::from(object_type) << 48) | (u64::from(level & 0x1f) << 56),
            birth: txg,
            ..Default::default()
        }
    }

    /// Sets the prop word of an ordinary pointer (writers).
    #[allow(clippy::too_many_arguments)]
    pub fn set_prop(
        &mut self,
        lsize: u64,
        psize: u64,
        compress: u8,
        checksum: u8,
        object_type: u8,
        level: u8,
        order: ByteOrder,
    ) {
        debug_assert!(lsize >= 512 && lsize.is_multiple_of(512) && psize >= 512 && psize.is_multiple_of(512));
        let le = (order == ByteOrder::Little) as u64;
        self.prop = ((lsize >> 9) - 1)
            | (((psize >> 9) - 1) << 16)
            | ((compress as u64 & 0x7f) << 32)
            | ((checksum as u64) << 40)
            | ((object_type as u64) << 48)
            | (((level & 0x1f) as u64) << 56)
            | (self.prop & (0b11 << 61))
            | (le << 63);
    }

    /// Checks the fields a reader relies on, so that corrupt pointers fail early with a clear
    /// message (OpenZFS `zfs_blkptr_verify`). `vdev_count` is the number of top-level vdevs.
    pub fn verify(&self, vdev_count: u64) -> Result<()> {
        if self.is_embedded() {
            if self.embedded_type() != BP_EMBEDDED_TYPE_DATA
                && self.embedded_type() != BP_EMBEDDED_TYPE_REDACTED
            {
                return Err(Error::corrupt(
                    "blkptr",
                    format!("unknown embedded type {}", self.embedded_type()),
                ));
            }
            return Ok(());
        }
        if self.lsize() > SPA_MAXBLOCKSIZE || self.psize() > SPA_MAXBLOCKSIZE {
            return Err(Error::corrupt("blkptr", "size beyond SPA_MAXBLOCKSIZE"));
        }
        if self.is_hole() {
            return Ok(());
        }
        for d in self.dva_slots().iter().filter(|d| !d.is_empty()) {
            if d.vdev() >= vdev_count {
                return Err(Error::corrupt(
                    "blkptr",
                    format!("DVA names vdev {} of {}", d.vdev(), vdev_count),
                ));
            }
            if d.asize() == 0 {
                return Err(Error::corrupt("blkptr", "DVA with zero asize"));
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for BlkPtr {
    /// A one-line summary in the spirit of `zdb`'s `snprintf_blkptr`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_embedded() {
            return write!(
                f,
                "EMBEDDED [L{} type {}] et={} comp={} size={:x}L/{:x}P birth={}L",
                self.level(),
                self.object_type(),
                self.embedded_type(),
                self.compress(),
                self.lsize(),
                self.psize(),
                self.birth
            );
        }
        if self.is_hole() {
            return write!(
                f,
                "HOLE [L{} type {}] size={:x}L birth={}L",
                self.level(),
                self.object_type(),
                self.lsize(),
                self.birth
            );
        }
        for d in self.dvas() {
            write!(
                f,
                "DVA[{}:{:x}:{:x}{}] ",
                d.vdev(),
                d.offset(),
                d.asize(),
                if d.is_gang() { "G" } else { "" }
            )?;
        }
        write!(
            f,
            "[L{} type {}] cksum={} comp={} {} size={:x}L/{:x}P birth={}L/{}P fill={} cksum={:x}:{:x}:{:x}:{:x}",
            self.level(),
            self.object_type(),
            self.checksum(),
            self.compress(),
            if self.byte_order() == ByteOrder::Little { "LE" } else { "BE" },
            self.lsize(),
            self.psize(),
            self.birth,
            self.physical_birth(),
            self.fill_count(),
            self.cksum[0],
            self.cksum[1],
            self.cksum[2],
            self.cksum[3]
        )
    }
}

/// A gang header: up to three child pointers whose data, concatenated, forms the block. The
/// 512-byte header ends in an embedded checksum (verified by the caller with the gang
/// verifier); the children sit at offsets 0, 128 and 256.
pub fn parse_gang_header(buf: &[u8], order: ByteOrder) -> Result<Vec<BlkPtr>> {
    if buf.len() < SPA_GANGBLOCKSIZE {
        return Err(Error::corrupt("gang header", "shorter than 512 bytes"));
    }
    let mut out = Vec::with_capacity(SPA_GBH_NBLKPTRS);
    for i in 0..SPA_GBH_NBLKPTRS {
        let bp = BlkPtr::parse(&buf[i * BLKPTR_SIZE..], order)?;
        out.push(bp);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prop_fields_round_trip() {
        let mut bp = BlkPtr::default();
        bp.dva[0] = Dva::new(1, 0x40_0000, 0x2000, false);
        bp.set_prop(0x20000, 0x1800, 15, 7, 19, 0, ByteOrder::Little);
        bp.birth = 42;
        assert_eq!(bp.lsize(), 0x20000);
        assert_eq!(bp.psize(), 0x1800);
        assert_eq!(bp.compress(), 15);
        assert_eq!(bp.checksum(), 7);
        assert_eq!(bp.object_type(), 19);
        assert_eq!(bp.level(), 0);
        assert_eq!(bp.byte_order(), ByteOrder::Little);
        assert_eq!(bp.dva[0].vdev(), 1);
        assert_eq!(bp.dva[0].offset(), 0x40_0000);
        assert_eq!(bp.dva[0].asize(), 0x2000);
        assert!(!bp.is_hole() && !bp.is_embedded() && !bp.is_gang());
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let enc = bp.encode(order);
            assert_eq!(BlkPtr::parse(&enc, order).unwrap(), bp);
        }
    }

    #[test]
    fn embedded_round_trip() {
        let payload: Vec<u8> = (0..100u8).collect();
        let bp = BlkPtr::new_embedded(&payload, 4096, 15, 19, 0, 7, ByteOrder::Little).unwrap();
        assert!(bp.is_embedded() && !bp.is_hole());
        assert_eq!(bp.lsize(), 4096);
        assert_eq!(bp.psize(), 100);
        assert_eq!(bp.birth, 7);
        assert_eq!(bp.embedded_payload().unwrap(), payload);
        let enc = bp.encode(ByteOrder::Big);
        let back = BlkPtr::parse(&enc, ByteOrder::Big).unwrap();
        assert_eq!(back.embedded_payload().unwrap(), payload);
    }

    #[test]
    fn zero_pointer_is_hole() {
        let bp = BlkPtr::parse(&[0u8; 128], ByteOrder::Little).unwrap();
        assert!(bp.is_hole());
        assert_eq!(bp.lsize(), 512);
        assert!(BlkPtr::parse(&[0u8; 127], ByteOrder::Little).is_err());
    }

    /// An encrypted pointer (crypt bit, level 0, encrypted type): DVA[2] is salt + IV and the
    /// fill count's upper half is IV2 (OpenZFS include/sys/spa.h).
    #[test]
    fn encrypted_pointer_hides_salt_and_iv() {
        let mut bp = BlkPtr::default();
        bp.dva[0] = Dva::new(0, 0x1000, 0x600, false);
        bp.dva[1] = Dva::new(1, 0x2000, 0x600, false);
        bp.dva[2] = Dva { word: [0x1122_3344_5566_7788, 0x99aa_bbcc_ddee_ff00] };
        bp.set_prop(0x4000, 0x400, 2, 8, 10, 0, ByteOrder::Little); // DMU_OT_DNODE
        bp.prop |= 1 << 61;
        bp.fill = (0xdead_beef << 32) | 7;
        assert!(bp.is_encrypted() && !bp.is_authenticated() && !bp.has_indirect_mac_cksum());
        assert_eq!(bp.fill_count(), 7);
        assert_eq!(bp.ndvas(), 2);
        assert_eq!(bp.dvas(), vec![bp.dva[0], bp.dva[1]]);
        assert_eq!(bp.asize(), 0xc00);
        assert!(bp.verify(2).is_ok(), "salt must not be checked as a DVA");
        assert!(!bp.to_string().contains("DVA[4380"));
        // The same pointer for an unencrypted type is authenticated and keeps all three DVAs.
        bp.set_prop(0x4000, 0x400, 2, 8, 11, 0, ByteOrder::Little); // DMU_OT_OBJSET
        assert!(bp.is_authenticated() && !bp.is_encrypted());
        assert_eq!(bp.ndvas(), 3);
        assert_eq!(bp.fill_count(), bp.fill);
        // Above level 0 the crypt bit means a checksum of MACs.
        bp.set_prop(0x4000, 0x400, 2, 8, 10, 1, ByteOrder::Little);
        assert!(bp.has_indirect_mac_cksum() && !bp.is_encrypted() && !bp.is_authenticated());
    }

    #[test]
    fn dvas_skip_empty_slots_and_embedded() {
        let mut bp = BlkPtr::default();
        bp.dva[1] = Dva::new(0, 0x1000, 0x200, true);
        assert_eq!(bp.dvas().len(), 1);
        assert_eq!(bp.gang_count(), 1);
        let e = BlkPtr::new_embedded(b"x", 1, 2, 19, 0, 3, ByteOrder::Little).unwrap();
        assert!(e.dvas().is_empty() && e.asize() == 0 && e.ndvas() == 0);
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(bp) = BlkPtr::parse(&bytes, ByteOrder::Little) {
                let _ = bp.embedded_payload();
                let _ = bp.verify(4);
                let _ = bp.to_string();
                let _ = (bp.lsize(), bp.psize(), bp.physical_birth(), bp.fill_count());
                let _ = (bp.dvas(), bp.asize(), bp.gang_count(), bp.is_encrypted());
            }
            let _ = parse_gang_header(&bytes, ByteOrder::Big);
        }
    }
}
