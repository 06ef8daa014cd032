//! Embedded checksums: the `zio_eck_t` tail (labels, gang headers, zilog v1) and the
//! `zil_chain_t` head (zilog2). Layouts are in the parent module's comment; behaviour follows
//! OpenZFS module/zfs/zio_checksum.c (`zio_checksum_compute`, `zio_checksum_error_impl`).
//!
//! ```text
//! zio_eck_t (40 bytes)      0 zec_magic u64 (ZEC_MAGIC in the block's byte order)
//!                           8 zec_cksum 4 × u64
//! ```
//!
//! Verification copies the checksummed range, writes the verifier over `zec_cksum` (in the
//! block's byte order, as OpenZFS byteswaps the verifier for foreign blocks), checksums the copy
//! and compares with the stored `zec_cksum` decoded in the block's byte order. The caller's
//! buffer is never modified.

use super::{compute, ChecksumCtx, ChecksumKind, Cksum};

/// `zio_eck_t.zec_magic` (OpenZFS include/sys/zio.h). Read in the other byte order it marks a
/// foreign-endian block.
pub const ZEC_MAGIC: u64 = 0x0210_da7a_b10c_7a11;

/// zilog2 checksums `roundup(zc_nused, ZIL_MIN_BLKSZ)` bytes (OpenZFS include/sys/zil.h).
pub const ZIL_MIN_BLKSZ: u64 = 4096;

/// Offset of `zc_nused` in `zil_chain_t` (after zc_pad u64 and the 128-byte zc_next_blk blkptr).
pub const ZIL_CHAIN_NUSED_OFFSET: usize = 136;

/// Offset of `zc_eck` in `zil_chain_t`.
pub const ZIL_CHAIN_ECK_OFFSET: usize = 144;

/// `sizeof (zio_eck_t)`.
const ECK_SIZE: usize = 40;

/// `sizeof (zil_chain_t)`.
const ZIL_CHAIN_SIZE: usize = ZIL_CHAIN_ECK_OFFSET + ECK_SIZE;

/// Why an embedded checksum did not verify (or could not be sealed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbeddedError {
    /// The block cannot hold the structure that carries the checksum.
    #[error("block of {len} bytes is too small for an embedded checksum (needs {need})")]
    TooSmall { len: usize, need: usize },
    /// `zec_magic` is neither ZEC_MAGIC nor its byteswap (value shown as read little endian).
    #[error("embedded checksum magic {found:#018x} is neither ZEC_MAGIC nor its byteswap")]
    BadMagic { found: u64 },
    /// zilog2: `zc_nused` rounded up to 4 KiB exceeds the block.
    #[error("zil_chain zc_nused {nused} rounds past the {len}-byte block")]
    NusedTooLarge { nused: u64, len: usize },
    /// The checksum computed with the verifier in place differs from the stored one.
    #[error("{kind:?} embedded checksum mismatch (big_endian={big_endian}): stored {expected:x?}, computed {actual:x?}")]
    Mismatch { kind: ChecksumKind, big_endian: bool, expected: Cksum, actual: Cksum },
}

/// Verifier of a label item (vdev_phys or an uberblock): `{offset, 0, 0, 0}` where `offset` is the
/// item's absolute byte offset on the leaf device, i.e. `vdev_label_offset(psize, l, off)` (label
/// base + offset within the label). OpenZFS `zio_checksum_label_verifier`.
pub fn label_verifier(offset: u64) -> Cksum {
    Cksum([offset, 0, 0, 0])
}

/// Verifier of a gang header: `{DVA_GET_VDEV, DVA_GET_OFFSET (bytes), physical birth txg, 0}` of
/// the gang blkptr's first DVA (`BP_IDENTITY`); physical birth falls back to the logical birth when
/// the raw physical birth is 0 (`BP_GET_PHYSICAL_BIRTH`). OpenZFS `zio_checksum_gang_verifier`.
/// The gang header is verified over the I/O size, and retried over 512 bytes
/// (`SPA_OLD_GANGBLOCKSIZE`) on failure: pass the corresponding slice.
pub fn gang_verifier(vdev: u64, offset: u64, birth: u64) -> Cksum {
    Cksum([vdev, offset, birth, 0])
}

/// Reads the 8 bytes at `off` as (little-endian value, big-endian value).
fn read_u64_both(block: &[u8], off: usize) -> Option<(u64, u64)> {
    let bytes: [u8; 8] = block.get(off..off.checked_add(8)?)?.try_into().ok()?;
    Some((u64::from_le_bytes(bytes), u64::from_be_bytes(bytes)))
}

/// The block's byte order from the magic at `eck_off`: `Ok(true)` = big endian.
fn eck_byte_order(block: &[u8], eck_off: usize) -> Result<bool, EmbeddedError> {
    let (le, be) = read_u64_both(block, eck_off)
        .ok_or(EmbeddedError::TooSmall { len: block.len(), need: eck_off.saturating_add(ECK_SIZE) })?;
    match (le == ZEC_MAGIC, be == ZEC_MAGIC) {
        (true, _) => Ok(false),
        (_, true) => Ok(true),
        _ => Err(EmbeddedError::BadMagic { found: le }),
    }
}

/// Writes `bytes` at `off` into `buf`, clipped to the buffer (OpenZFS writes the verifier into the
/// whole buffer even when the checksummed size stops short of it).
fn write_clipped(buf: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(off..) {
        let n = dst.len().min(bytes.len());
        dst[..n].copy_from_slice(&bytes[..n]);
    }
}

/// Where the eck lives and how many bytes the checksum covers.
#[derive(Clone, Copy)]
struct Layout {
    eck_off: usize,
    size: usize,
}

/// The shared verification: verifier in place, checksum `block[..size]`, compare.
fn check(
    kind: ChecksumKind,
    block: &[u8],
    at: Layout,
    verifier: Cksum,
    ctx: &ChecksumCtx,
    mac_xor_fold: Option<bool>,
) -> Result<(), EmbeddedError> {
    let big_endian = eck_byte_order(block, at.eck_off)?;
    let cksum_off = at.eck_off + 8;
    let stored: &[u8; 32] = block
        .get(cksum_off..cksum_off + 32)
        .and_then(|s| s.try_into().ok())
        .ok_or(EmbeddedError::TooSmall { len: block.len(), need: at.eck_off + ECK_SIZE })?;
    let mut expected = Cksum::from_bytes(stored, big_endian);
    let mut copy = block.get(..at.size).unwrap_or(block).to_vec();
    write_clipped(&mut copy, cksum_off, &verifier.to_bytes(big_endian));
    let mut actual = compute(kind, &copy, big_endian, ctx);
    if let Some(xor_fold) = mac_xor_fold {
        actual = actual.mac_truncated(xor_fold);
        expected = expected.mac_truncated(false);
    }
    if actual == expected {
        Ok(())
    } else {
        Err(EmbeddedError::Mismatch { kind, big_endian, expected, actual })
    }
}

fn tail_layout(block: &[u8]) -> Result<Layout, EmbeddedError> {
    let len = block.len();
    let eck_off = len.checked_sub(ECK_SIZE).ok_or(EmbeddedError::TooSmall { len, need: ECK_SIZE })?;
    Ok(Layout { eck_off, size: len })
}

/// Verifies a block whose `zio_eck_t` is its last 40 bytes (label items, gang headers, zilog v1).
/// The block's byte order comes from the magic. The whole slice is checksummed.
pub fn verify_embedded(
    kind: ChecksumKind,
    block: &[u8],
    verifier: Cksum,
    ctx: &ChecksumCtx,
) -> Result<(), EmbeddedError> {
    check(kind, block, tail_layout(block)?, verifier, ctx, None)
}

/// [`verify_embedded`] for a block of an encrypted dataset (`BP_USES_CRYPT`, not an objset):
/// words 2–3 of the stored checksum are the MAC, so only words 0–1 are compared, after folding
/// the computed words 2–3 in when `xor_fold` (see [`Cksum::mac_truncated`]).
pub fn verify_embedded_mac(
    kind: ChecksumKind,
    block: &[u8],
    verifier: Cksum,
    ctx: &ChecksumCtx,
    xor_fold: bool,
) -> Result<(), EmbeddedError> {
    check(kind, block, tail_layout(block)?, verifier, ctx, Some(xor_fold))
}

/// The zilog2 layout: `zc_nused` (in the magic's byte order) rounded up to 4 KiB, bounded by the block.
fn zil_layout(block: &[u8]) -> Result<(Layout, bool), EmbeddedError> {
    if block.len() < ZIL_CHAIN_SIZE {
        return Err(EmbeddedError::TooSmall { len: block.len(), need: ZIL_CHAIN_SIZE });
    }
    let big_endian = eck_byte_order(block, ZIL_CHAIN_ECK_OFFSET)?;
    let (le, be) = read_u64_both(block, ZIL_CHAIN_NUSED_OFFSET).unwrap_or((0, 0));
    let nused = if big_endian { be } else { le };
    let too_large = EmbeddedError::NusedTooLarge { nused, len: block.len() };
    let rounded = nused.checked_next_multiple_of(ZIL_MIN_BLKSZ).ok_or(too_large.clone())?;
    let size = usize::try_from(rounded).ok().filter(|&s| s <= block.len()).ok_or(too_large)?;
    let at = Layout { eck_off: ZIL_CHAIN_ECK_OFFSET, size };
    Ok((at, big_endian))
}

/// Verifies a zilog2 block (fletcher4 over `roundup(zc_nused, 4096)` bytes, `zio_eck_t` inside the
/// leading `zil_chain_t`). `verifier` is the blkptr's checksum (the ZIL sequence tuple).
/// `encrypted`: the log block belongs to an encrypted dataset (MAC-truncated compare).
/// Returns the number of bytes the checksum covered.
pub fn verify_zil_chain(
    block: &[u8],
    verifier: Cksum,
    ctx: &ChecksumCtx,
    encrypted: bool,
) -> Result<usize, EmbeddedError> {
    let (at, _) = zil_layout(block)?;
    let mac = encrypted.then_some(true); // fletcher4 is not dedup-capable: fold
    check(ChecksumKind::Fletcher4, block, at, verifier, ctx, mac)?;
    Ok(at.size)
}

/// Writes magic + verifier, checksums `block[..size]`, stores the result in the eck.
fn seal(
    kind: ChecksumKind,
    block: &mut [u8],
    at: Layout,
    verifier: Cksum,
    ctx: &ChecksumCtx,
    big_endian: bool,
) -> Result<(), EmbeddedError> {
    let cksum_off = at.eck_off + 8;
    let len = block.len();
    let magic = if big_endian { ZEC_MAGIC.to_be_bytes() } else { ZEC_MAGIC.to_le_bytes() };
    let eck = block
        .get_mut(at.eck_off..at.eck_off + ECK_SIZE)
        .ok_or(EmbeddedError::TooSmall { len, need: at.eck_off + ECK_SIZE })?;
    eck[..8].copy_from_slice(&magic);
    eck[8..].copy_from_slice(&verifier.to_bytes(big_endian));
    let sum = compute(kind, block.get(..at.size).unwrap_or(&[]), big_endian, ctx);
    write_clipped(block, cksum_off, &sum.to_bytes(big_endian));
    Ok(())
}

/// Fills the last 40 bytes of `block` with magic + the checksum computed with `verifier` in
/// place, little-endian (the order rzfs writes). See [`seal_embedded_order`].
pub fn seal_embedded(
    kind: ChecksumKind,
    block: &mut [u8],
    verifier: Cksum,
    ctx: &ChecksumCtx,
) -> Result<(), EmbeddedError> {
    seal_embedded_order(kind, block, verifier, ctx, false)
}

/// [`seal_embedded`] writing the block in the given byte order (big endian when `big_endian`).
pub fn seal_embedded_order(
    kind: ChecksumKind,
    block: &mut [u8],
    verifier: Cksum,
    ctx: &ChecksumCtx,
    big_endian: bool,
) -> Result<(), EmbeddedError> {
    let at = tail_layout(block)?;
    seal(kind, block, at, verifier, ctx, big_endian)
}

/// Seals a zilog2 block whose `zc_nused` (in `big_endian` order) is already filled in: writes the
/// magic and the fletcher4 checksum (computed with `verifier` in place) into `zc_eck`. Encrypted
/// log blocks (MAC in words 2–3) are not supported. Returns the number of bytes checksummed.
pub fn seal_zil_chain(
    block: &mut [u8],
    verifier: Cksum,
    ctx: &ChecksumCtx,
    big_endian: bool,
) -> Result<usize, EmbeddedError> {
    let magic = if big_endian { ZEC_MAGIC.to_be_bytes() } else { ZEC_MAGIC.to_le_bytes() };
    if block.len() < ZIL_CHAIN_SIZE {
        return Err(EmbeddedError::TooSmall { len: block.len(), need: ZIL_CHAIN_SIZE });
    }
    block[ZIL_CHAIN_ECK_OFFSET..ZIL_CHAIN_ECK_OFFSET + 8].copy_from_slice(&magic);
    let (at, _) = zil_layout(block)?;
    seal(ChecksumKind::Fletcher4, block, at, verifier, ctx, big_endian)?;
    Ok(at.size)
}
