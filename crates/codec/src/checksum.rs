//! # Block checksums, exactly as OpenZFS computes and stores them
//!
//! Every blkptr carries a 256-bit checksum (`zio_cksum_t`, four u64 words) of the block's physical
//! (psize) bytes, and an algorithm number (`enum zio_checksum`, OpenZFS include/sys/zio.h).
//! This module computes those four words for every algorithm and implements the *embedded*
//! checksums that live inside the block itself (labels, gang headers, ZIL blocks).
//!
//! ## How the four words relate to the digest bytes (the subtle part)
//! [`Cksum`] holds the words as integers, i.e. after the blkptr has been decoded from whatever byte
//! order it was stored in. `big_endian` passed to [`compute`] is the byte order *of the checksummed
//! block* (blkptr byteorder bit: 0 = big endian, 1 = little endian, see `BP_GET_BYTEORDER` in
//! OpenZFS include/sys/spa.h). OpenZFS writes checksums in the writer's host order and has a
//! `_byteswap` variant for reading foreign blocks; expressed independently of any host:
//!
//! | algorithm                         | how the words are formed                                          |
//! |-----------------------------------|-------------------------------------------------------------------|
//! | fletcher2 / fletcher4             | sums of the block's 64/32-bit words, read in the block's order    |
//! | sha256 (also label, gang_header)  | digest bytes 8i..8i+8 read **big endian**, whatever the block's order (sha2_zfs.c forces `BE_64`; there is no byteswap variant) |
//! | sha512 (= SHA-512/256), skein, edonr, blake3 | digest bytes 8i..8i+8 read in the **block's** order (native variant memcpys the digest into the words, byteswap variant swaps them) |
//!
//! Salted algorithms use the pool's 32-byte checksum salt ([`ChecksumCtx`]): skein is Skein-512-256
//! in MAC mode keyed by the salt, blake3 is BLAKE3 `keyed_hash` with the salt as key, edonr is
//! Edon-R-512 over a salt-derived prefix block (see the `edonr` submodule), first 32 bytes kept.
//! sha256, sha512/256 and fletcher are unsalted (OpenZFS module/zfs/*_zfs.c, `zio_checksum_table`).
//!
//! Note: OpenZFS's `abd_checksum_edonr_byteswap` swaps the wrong variable (it never copies its
//! temporary), so OpenZFS itself cannot verify foreign-endian edonr blocks. We implement the
//! consistent rule from the table above, which is what a same-endian reader sees.
//!
//! ## Embedded checksums (`zio_eck_t`)
//! Labels (vdev_phys, uberblocks), gang headers and ZIL blocks store their checksum inside the block
//! in a `zio_eck_t` (u64 magic [`ZEC_MAGIC`] + 4 × u64 checksum). To verify, the stored checksum is
//! replaced by a *verifier* known to the reader, the block is checksummed, and the result must equal
//! the stored value. The magic also tells the block's byte order. Where the `zio_eck_t` lives:
//!
//! ```text
//! label / gang_header / zilog (v1):  [ ...payload... | magic u64 | cksum 4×u64 ]   last 40 bytes
//! zilog2 (zil_chain_t, block head):  0 zc_pad u64 | 8 zc_next_blk blkptr (128) | 136 zc_nused u64
//!                                    | 144 magic u64 | 152 cksum 4×u64 | 184 log records…
//!                                    only the first roundup(zc_nused, 4096) bytes are checksummed
//! ```
//! (OpenZFS module/zfs/zio_checksum.c `zio_checksum_error_impl`, include/sys/zil.h.)

mod edonr;
mod embedded;
mod fletcher;
mod skein;

use sha2::Digest;

/// Four 64-bit words as stored in a blkptr's checksum field (already decoded to host integers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Cksum(pub [u64; 4]);

impl Cksum {
    /// Decodes 32 on-disk bytes (four u64) in the given byte order.
    pub fn from_bytes(bytes: &[u8; 32], big_endian: bool) -> Cksum {
        let mut w = [0u64; 4];
        for (word, chunk) in w.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *word = if big_endian { u64::from_be_bytes(b) } else { u64::from_le_bytes(b) };
        }
        Cksum(w)
    }

    /// Encodes the four words as 32 bytes in the given byte order.
    pub fn to_bytes(&self, big_endian: bool) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.0) {
            let b = if big_endian { w.to_be_bytes() } else { w.to_le_bytes() };
            chunk.copy_from_slice(&b);
        }
        out
    }

    /// The value an encrypted block's checksum is compared on (OpenZFS `zio_checksum_error_impl`
    /// for `BP_USES_CRYPT` blocks other than objsets): words 2 and 3 hold the encryption MAC, so
    /// only words 0 and 1 are compared; for checksums not strong enough for dedup the dropped words
    /// are first folded in by XOR (`xor_fold = !zio_checksum_dedup_capable(v)`).
    pub fn mac_truncated(self, xor_fold: bool) -> Cksum {
        let [mut w0, mut w1, w2, w3] = self.0;
        if xor_fold {
            w0 ^= w2;
            w1 ^= w3;
        }
        Cksum([w0, w1, 0, 0])
    }
}

/// Per-pool context: the 32-byte checksum salt (MOS directory entry "org.illumos:checksum_salt").
/// Used by skein (MAC key), edonr (salt prefix block) and blake3 (keyed hash key).
#[derive(Clone, Debug, Default)]
pub struct ChecksumCtx {
    pub salt: [u8; 32],
}

impl ChecksumCtx {
    pub fn new(salt: [u8; 32]) -> ChecksumCtx {
        ChecksumCtx { salt }
    }
}

/// A checksum function proper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChecksumKind {
    Fletcher2,
    Fletcher4,
    Sha256,
    /// ZFS "sha512": SHA-512/256 (FIPS 180-4 truncated variant with its own IV), 32-byte digest.
    Sha512_256,
    Skein,
    Edonr,
    Blake3,
}

impl ChecksumKind {
    /// Every kind, for tests and tools.
    pub const ALL: [ChecksumKind; 7] = [
        ChecksumKind::Fletcher2,
        ChecksumKind::Fletcher4,
        ChecksumKind::Sha256,
        ChecksumKind::Sha512_256,
        ChecksumKind::Skein,
        ChecksumKind::Edonr,
        ChecksumKind::Blake3,
    ];

    /// Whether the pool salt changes the result (`ZCHECKSUM_FLAG_SALTED`).
    pub fn is_salted(self) -> bool {
        matches!(self, ChecksumKind::Skein | ChecksumKind::Edonr | ChecksumKind::Blake3)
    }

    /// The zio_checksum value that selects this kind for plain (non-embedded) blocks.
    pub fn zio_value(self) -> u8 {
        match self {
            ChecksumKind::Fletcher2 => ZIO_CHECKSUM_FLETCHER_2,
            ChecksumKind::Fletcher4 => ZIO_CHECKSUM_FLETCHER_4,
            ChecksumKind::Sha256 => ZIO_CHECKSUM_SHA256,
            ChecksumKind::Sha512_256 => ZIO_CHECKSUM_SHA512,
            ChecksumKind::Skein => ZIO_CHECKSUM_SKEIN,
            ChecksumKind::Edonr => ZIO_CHECKSUM_EDONR,
            ChecksumKind::Blake3 => ZIO_CHECKSUM_BLAKE3,
        }
    }
}

/// `enum zio_checksum` values (OpenZFS include/sys/zio.h).
pub const ZIO_CHECKSUM_INHERIT: u8 = 0;
pub const ZIO_CHECKSUM_ON: u8 = 1;
pub const ZIO_CHECKSUM_OFF: u8 = 2;
pub const ZIO_CHECKSUM_LABEL: u8 = 3;
pub const ZIO_CHECKSUM_GANG_HEADER: u8 = 4;
pub const ZIO_CHECKSUM_ZILOG: u8 = 5;
pub const ZIO_CHECKSUM_FLETCHER_2: u8 = 6;
pub const ZIO_CHECKSUM_FLETCHER_4: u8 = 7;
pub const ZIO_CHECKSUM_SHA256: u8 = 8;
pub const ZIO_CHECKSUM_ZILOG2: u8 = 9;
pub const ZIO_CHECKSUM_NOPARITY: u8 = 10;
pub const ZIO_CHECKSUM_SHA512: u8 = 11;
pub const ZIO_CHECKSUM_SKEIN: u8 = 12;
pub const ZIO_CHECKSUM_EDONR: u8 = 13;
pub const ZIO_CHECKSUM_BLAKE3: u8 = 14;
/// Number of defined values (`ZIO_CHECKSUM_FUNCTIONS`).
pub const ZIO_CHECKSUM_FUNCTIONS: u8 = 15;
/// What the `checksum=on` property resolves to (`ZIO_CHECKSUM_ON_VALUE`).
pub const ZIO_CHECKSUM_ON_VALUE: u8 = ZIO_CHECKSUM_FLETCHER_4;

/// What a blkptr/zio checksum value means for verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChecksumSpec {
    /// No checksum ("off", "noparity"): nothing to verify.
    Off,
    /// The checksum is in the blkptr; compare [`compute`] of the psize bytes with it.
    Plain(ChecksumKind),
    /// A `zio_eck_t` in the last 40 bytes of the block ("label" and "gang_header" = sha256,
    /// "zilog" = fletcher2): see [`verify_embedded`].
    Embedded(ChecksumKind),
    /// "zilog2" (fletcher4): the `zio_eck_t` sits inside the `zil_chain_t` at the *start* of the
    /// block and covers only `roundup(zc_nused, 4096)` bytes: see [`verify_zil_chain`].
    ZilChain(ChecksumKind),
}

/// Interprets a zio checksum value as found in a blkptr (or a zio's checksum property).
///
/// `inherit` (0) and `on` (1) are property-level values that are resolved before anything is
/// written; OpenZFS's `zio_checksum_error_impl` rejects them (no function, `EINVAL`), so they map
/// to `None` like unknown values. Use [`ZIO_CHECKSUM_ON_VALUE`] to resolve `on` yourself.
pub fn spec_from_zio(v: u8) -> Option<ChecksumSpec> {
    use ChecksumKind::*;
    use ChecksumSpec::*;
    Some(match v {
        ZIO_CHECKSUM_OFF | ZIO_CHECKSUM_NOPARITY => Off,
        ZIO_CHECKSUM_LABEL | ZIO_CHECKSUM_GANG_HEADER => Embedded(Sha256),
        ZIO_CHECKSUM_ZILOG => Embedded(Fletcher2),
        ZIO_CHECKSUM_ZILOG2 => ZilChain(Fletcher4),
        ZIO_CHECKSUM_FLETCHER_2 => Plain(Fletcher2),
        ZIO_CHECKSUM_FLETCHER_4 => Plain(Fletcher4),
        ZIO_CHECKSUM_SHA256 => Plain(Sha256),
        ZIO_CHECKSUM_SHA512 => Plain(Sha512_256),
        ZIO_CHECKSUM_SKEIN => Plain(Skein),
        ZIO_CHECKSUM_EDONR => Plain(Edonr),
        ZIO_CHECKSUM_BLAKE3 => Plain(Blake3),
        _ => return None,
    })
}

/// The name zdb and `zfs get checksum` print (`ci_name` in OpenZFS `zio_checksum_table`);
/// "unknown" for values past the table.
pub fn zio_checksum_name(v: u8) -> &'static str {
    const NAMES: [&str; ZIO_CHECKSUM_FUNCTIONS as usize] = [
        "inherit",
        "on",
        "off",
        "label",
        "gang_header",
        "zilog",
        "fletcher2",
        "fletcher4",
        "sha256",
        "zilog2",
        "noparity",
        "sha512",
        "skein",
        "edonr",
        "blake3",
    ];
    NAMES.get(usize::from(v)).copied().unwrap_or("unknown")
}

/// Whether the zio checksum value carries `ZCHECKSUM_FLAG_DEDUP` (sha256, sha512, skein, blake3).
/// Decides the XOR fold of [`Cksum::mac_truncated`] for encrypted blocks.
pub fn zio_checksum_dedup_capable(v: u8) -> bool {
    matches!(v, ZIO_CHECKSUM_SHA256 | ZIO_CHECKSUM_SHA512 | ZIO_CHECKSUM_SKEIN | ZIO_CHECKSUM_BLAKE3)
}

/// Words of a 32-byte digest in the given byte order.
fn digest_words(digest: &[u8], big_endian: bool) -> Cksum {
    let mut b = [0u8; 32];
    let n = digest.len().min(32);
    b[..n].copy_from_slice(&digest[..n]);
    Cksum::from_bytes(&b, big_endian)
}

/// Computes the checksum of `data` (the block's psize bytes) as OpenZFS stores it in a blkptr.
///
/// `big_endian` = the block's byte order is big endian (blkptr byteorder bit 0). See the module
/// comment for how each algorithm uses it. Never panics; fletcher ignores a trailing partial word
/// (see the `fletcher` submodule), the other algorithms hash every byte.
pub fn compute(kind: ChecksumKind, data: &[u8], big_endian: bool, ctx: &ChecksumCtx) -> Cksum {
    match kind {
        ChecksumKind::Fletcher2 => Cksum(fletcher::fletcher2(data, big_endian)),
        ChecksumKind::Fletcher4 => Cksum(fletcher::fletcher4(data, big_endian)),
        // Always big-endian words: OpenZFS sha2_zfs.c applies BE_64 on every host.
        ChecksumKind::Sha256 => digest_words(&sha2::Sha256::digest(data), true),
        ChecksumKind::Sha512_256 => digest_words(&sha2::Sha512_256::digest(data), big_endian),
        ChecksumKind::Skein => {
            let mut out = [0u8; 32];
            skein::skein512(&ctx.salt, data, &mut out);
            digest_words(&out, big_endian)
        }
        ChecksumKind::Edonr => digest_words(&edonr::edonr_zfs(&ctx.salt, data), big_endian),
        ChecksumKind::Blake3 => digest_words(blake3::keyed_hash(&ctx.salt, data).as_bytes(), big_endian),
    }
}

/// Fletcher-4 of `data` read in the given byte order: the hot path (every metadata block of a
/// default pool), exposed for callers that do not need the [`ChecksumKind`] dispatch.
pub fn fletcher4(data: &[u8], big_endian: bool) -> Cksum {
    Cksum(fletcher::fletcher4(data, big_endian))
}

/// Continues the four fletcher-4 running sums `state` (`[a, b, c, d]`) over `data`, read as
/// 32-bit words in the given byte order; a trailing partial word is ignored, as OpenZFS's
/// `fletcher_4_incremental_*` do. `fletcher4_incremental([0; 4], x)` equals [`fletcher4`]`(x)`,
/// and feeding a buffer in pieces cut at 4-byte boundaries gives the sums of the whole. Used for
/// the running checksum of send streams, which covers every byte of the stream.
pub fn fletcher4_incremental(state: [u64; 4], data: &[u8], big_endian: bool) -> [u64; 4] {
    fletcher::fletcher4_incremental(state, data, big_endian)
}

pub use embedded::{
    gang_verifier, label_verifier, seal_embedded, seal_embedded_order, seal_zil_chain, verify_embedded,
    verify_embedded_mac, verify_zil_chain, EmbeddedError, ZEC_MAGIC, ZIL_CHAIN_ECK_OFFSET,
    ZIL_CHAIN_NUSED_OFFSET, ZIL_MIN_BLKSZ,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table() {
        assert_eq!(spec_from_zio(0), None);
        assert_eq!(spec_from_zio(1), None);
        assert_eq!(spec_from_zio(2), Some(ChecksumSpec::Off));
        assert_eq!(spec_from_zio(10), Some(ChecksumSpec::Off));
        assert_eq!(spec_from_zio(3), Some(ChecksumSpec::Embedded(ChecksumKind::Sha256)));
        assert_eq!(spec_from_zio(9), Some(ChecksumSpec::ZilChain(ChecksumKind::Fletcher4)));
        assert_eq!(spec_from_zio(15), None);
        for k in ChecksumKind::ALL {
            assert_eq!(spec_from_zio(k.zio_value()), Some(ChecksumSpec::Plain(k)));
        }
        assert_eq!(zio_checksum_name(7), "fletcher4");
        assert_eq!(zio_checksum_name(11), "sha512");
        assert_eq!(zio_checksum_name(14), "blake3");
        assert_eq!(zio_checksum_name(200), "unknown");
    }

    #[test]
    fn mac_truncation() {
        let c = Cksum([1, 2, 4, 8]);
        assert_eq!(c.mac_truncated(true), Cksum([5, 10, 0, 0]));
        assert_eq!(c.mac_truncated(false), Cksum([1, 2, 0, 0]));
        assert!(zio_checksum_dedup_capable(ZIO_CHECKSUM_SHA256));
        assert!(!zio_checksum_dedup_capable(ZIO_CHECKSUM_EDONR));
        assert!(!zio_checksum_dedup_capable(ZIO_CHECKSUM_FLETCHER_4));
    }

    #[test]
    fn cksum_bytes_round_trip() {
        let c = Cksum([1, 0x0102_0304_0506_0708, u64::MAX, 42]);
        for be in [false, true] {
            assert_eq!(Cksum::from_bytes(&c.to_bytes(be), be), c);
        }
        assert_eq!(c.to_bytes(true)[8..16], [1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
