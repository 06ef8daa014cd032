//! # zvol — volumes (`zfs create -V`): an objset holding one flat object of bytes
//!
//! On-disk facts (OpenZFS `zvol.c`, `zvol_create_cb`; `zfs_prop.c` for the defaults):
//! * The objset's type is `DMU_OST_ZVOL` (3).
//! * Object 1 (`ZVOL_OBJ`) is the volume's data: type `DMU_OT_ZVOL` (23), no bonus buffer,
//!   its data block size is the `volblocksize` property (fixed at creation; 16 KiB by
//!   default since OpenZFS 2.2). Offsets in the object are offsets on the device.
//! * Object 2 (`ZVOL_ZAP_OBJ`) is a ZAP of type `DMU_OT_ZVOL_PROP` (24) whose entry `size`
//!   is the `volsize` property (one u64). `volsize` is a multiple of `volblocksize`.
//! * Nothing beyond `volsize` is ever stored: shrinking frees the tail.
//!
//! The DSL knows nothing of this layout; this module is the volume's counterpart of the
//! ZPL's file layer, used by the daemon to serve the volume as a file or block device.

use dmu::tx::DirtyObjset;
use ondisk::dmu_types::DmuObjectType as T;
use thiserror::Error;
use zap::write::{ZapCache, ZapVal};

/// The volume's data object.
pub const ZVOL_OBJ: u64 = 1;
/// The ZAP holding `size`.
pub const ZVOL_ZAP_OBJ: u64 = 2;
/// `volblocksize` when none is given (`ZVOL_DEFAULT_BLOCKSIZE`, OpenZFS 2.2 and later).
pub const DEFAULT_VOLBLOCKSIZE: u64 = 16 << 10;
/// Largest `volblocksize` without the large_blocks feature (`SPA_OLD_MAXBLOCKSIZE`).
pub const MAX_VOLBLOCKSIZE: u64 = 128 << 10;

#[derive(Debug, Error)]
pub enum ZvolError {
    #[error("{0}")]
    Invalid(String),
    #[error("volume object: {0}")]
    Dmu(#[from] dmu::DmuError),
    #[error("volume properties: {0}")]
    Zap(#[from] zap::ZapError),
}

pub type Result<T> = std::result::Result<T, ZvolError>;

/// Checks a `volblocksize` value as `zfs create -b` does: a power of two from 512 bytes
/// to 128 KiB.
pub fn check_volblocksize(bs: u64) -> Result<()> {
    if !bs.is_power_of_two() || !(512..=MAX_VOLBLOCKSIZE).contains(&bs) {
        return Err(ZvolError::Invalid(format!(
            "'volblocksize' must be power of 2 from 512B to {}KB",
            MAX_VOLBLOCKSIZE >> 10
        )));
    }
    Ok(())
}

/// Checks a `volsize` for a volume of block size `bs` (`zvol_check_volsize`): not zero, a
/// multiple of the block size.
pub fn check_volsize(volsize: u64, bs: u64) -> Result<()> {
    if volsize == 0 {
        return Err(ZvolError::Invalid("volume size cannot be zero".into()));
    }
    if !volsize.is_multiple_of(bs) {
        return Err(ZvolError::Invalid(format!(
            "volume size must be a multiple of volume block size ({bs})"
        )));
    }
    Ok(())
}

/// Fills the empty objset `os` (type `DMU_OST_ZVOL`) of a new volume.
pub fn create(os: &mut DirtyObjset, zaps: &mut ZapCache, volsize: u64, volblocksize: u64) -> Result<()> {
    check_volblocksize(volblocksize)?;
    check_volsize(volsize, volblocksize)?;
    os.claim_object(ZVOL_OBJ, T::Zvol.to_u8(), volblocksize, T::None.to_u8(), Vec::new())?;
    zaps.create_claim(os, ZVOL_ZAP_OBJ, T::ZvolProp.to_u8())?;
    zaps.update(os, ZVOL_ZAP_OBJ, b"size", ZapVal::u64(volsize))?;
    Ok(())
}

/// The volume's size (`volsize`).
pub fn volsize(os: &DirtyObjset, zaps: &mut ZapCache) -> Result<u64> {
    zaps.lookup_u64(os, ZVOL_ZAP_OBJ, "size")?
        .ok_or_else(|| ZvolError::Invalid("volume has no 'size' entry".into()))
}

/// The volume's block size (`volblocksize`): its data object's block size.
pub fn volblocksize(os: &DirtyObjset) -> Result<u64> {
    let dn = os.dnode(ZVOL_OBJ)?.ok_or(dmu::DmuError::NoSuchObject(ZVOL_OBJ))?;
    Ok(dn.data_block_size())
}

/// Changes the volume's size; shrinking frees everything past the new end
/// (`zvol_update_volsize`).
pub fn set_volsize(os: &mut DirtyObjset, zaps: &mut ZapCache, new: u64) -> Result<()> {
    let bs = volblocksize(os)?;
    check_volsize(new, bs)?;
    let old = volsize(os, zaps)?;
    if new < old {
        os.free_range(ZVOL_OBJ, new, u64::MAX - new)?;
    }
    zaps.update(os, ZVOL_ZAP_OBJ, b"size", ZapVal::u64(new))?;
    Ok(())
}

/// (`volsize`, `volblocksize`) of a committed volume objset (a head or a snapshot).
pub fn info(os: &dmu::Objset) -> Result<(u64, u64)> {
    let size = zap::lookup_u64(os, ZVOL_ZAP_OBJ, "size")?
        .ok_or_else(|| ZvolError::Invalid("volume has no 'size' entry".into()))?;
    let dn = os.dnode(ZVOL_OBJ)?;
    Ok((size, dn.data_block_size()))
}

fn check_range(os: &DirtyObjset, zaps: &mut ZapCache, offset: u64, len: u64) -> Result<u64> {
    let size = volsize(os, zaps)?;
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(size),
        _ => Err(ZvolError::Invalid(format!("I/O at {offset}+{len} is past the volume's end ({size})"))),
    }
}

/// Reads `buf.len()` bytes at `offset` (holes read as zeros); the range must lie inside
/// the volume.
pub fn read(os: &DirtyObjset, zaps: &mut ZapCache, offset: u64, buf: &mut [u8]) -> Result<()> {
    check_range(os, zaps, offset, buf.len() as u64)?;
    os.read(ZVOL_OBJ, offset, buf)?;
    Ok(())
}

/// Writes `data` at `offset`; the range must lie inside the volume.
pub fn write(os: &mut DirtyObjset, zaps: &mut ZapCache, offset: u64, data: &[u8]) -> Result<()> {
    check_range(os, zaps, offset, data.len() as u64)?;
    os.write(ZVOL_OBJ, offset, data)?;
    Ok(())
}

/// Discards `len` bytes at `offset` (TRIM/punch hole): whole blocks become holes, partial
/// blocks are zeroed.
pub fn discard(os: &mut DirtyObjset, zaps: &mut ZapCache, offset: u64, len: u64) -> Result<()> {
    let size = volsize(os, zaps)?;
    if offset >= size {
        return Ok(());
    }
    os.free_range(ZVOL_OBJ, offset, len.min(size - offset))?;
    Ok(())
}

/// The `refreservation` a non-sparse volume gets (`zvol_volsize_to_reservation` in libzfs):
/// the data blocks as the widest RAID-Z top-level vdev would allocate them, scaled as the
/// pool's space accounting deflates them, plus every indirect block level of 128 KiB
/// blocks and the meta-dnode's seven levels, times the number of copies. `raidz` lists the
/// (children, parity, ashift) of each RAID-Z top-level vdev.
pub fn reservation_for(volsize: u64, volblocksize: u64, copies: u64, raidz: &[(u64, u64, u64)]) -> u64 {
    const OLD_MAXBLOCKSIZE: u64 = 128 << 10;
    // A pointer is 128 bytes: 1024 per 128 KiB indirect block.
    const PER_INDIRECT: u64 = 1024;
    let copies = copies.clamp(1, 3);
    let nblocks = volsize / volblocksize;
    let mut data = 0u64;
    for &(width, parity, ashift) in raidz {
        if width <= parity {
            continue;
        }
        let full = raidz_asize(width, parity, ashift, OLD_MAXBLOCKSIZE);
        let one = raidz_asize(width, parity, ashift, volblocksize);
        let scaled = (nblocks as u128 * one as u128 * OLD_MAXBLOCKSIZE as u128 / full.max(1) as u128) as u64;
        data = data.max(scaled);
    }
    if data == 0 {
        data = nblocks * volblocksize;
    }
    let mut indirects = 7u64;
    let mut n = nblocks;
    while n > 1 {
        n = n.div_ceil(PER_INDIRECT);
        indirects += n;
    }
    indirects *= (copies + 1).min(3);
    data.saturating_mul(copies).saturating_add(indirects.saturating_mul(OLD_MAXBLOCKSIZE))
}

/// Bytes a RAID-Z vdev of `width` children and `parity` allocates for a block of `psize`
/// bytes: data sectors, one parity sector per row, rounded up to a multiple of parity + 1.
fn raidz_asize(width: u64, parity: u64, ashift: u64, psize: u64) -> u64 {
    let sectors = ((psize - 1) >> ashift) + 1;
    let rows = sectors.div_ceil(width - parity);
    let total = sectors + parity * rows;
    (total.div_ceil(parity + 1) * (parity + 1)) << ashift
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservation_matches_openzfs_examples() {
        // A 150 MiB volume of 16 KiB blocks on a plain disk: the data plus 7 + 10 + 1
        // indirect blocks of 128 KiB, doubled (metadata keeps two copies).
        let v = 150 << 20;
        assert_eq!(reservation_for(v, 16 << 10, 1, &[]), v + (7 + 10 + 1) * 2 * (128 << 10));
        // On a raidz1 of 3 with 4 KiB sectors a 16 KiB block takes 6 sectors (4 data,
        // 2 parity) where 128 KiB takes 48: the data counts 6/48 of 128 KiB per block.
        let r = reservation_for(v, 16 << 10, 1, &[(3, 1, 12)]);
        assert_eq!(r, 9600 * (16 << 10) + 36 * (128 << 10));
        // A 512-byte block on a raidz2 of 6 with 512-byte sectors: 1 data + 2 parity
        // sectors, padded to 3; 128 KiB takes 256 + 128 = 384 sectors.
        let r = reservation_for(1 << 20, 512, 1, &[(6, 2, 9)]);
        assert_eq!(r, 2048 * 3 * 512 * (128 << 10) / (384 * 512) + (7 + 2 + 1) * 2 * (128 << 10));
    }

    #[test]
    fn sizes_are_checked() {
        assert!(check_volblocksize(16 << 10).is_ok());
        assert!(check_volblocksize(3000).is_err());
        assert!(check_volblocksize(256 << 10).is_err());
        assert!(check_volsize(0, 8192).is_err());
        assert!(check_volsize(8192 * 3 + 1, 8192).is_err());
        assert!(check_volsize(8192 * 3, 8192).is_ok());
    }
}
