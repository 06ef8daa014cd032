//! Writing znodes of ZPL versions 1–4: the `znode_phys_t` bonus (`DMU_OT_ZNODE`) instead of
//! system attributes.
//!
//! The writer keeps every znode as an [`SaRecord`] whatever its form on disk; this module
//! converts a `znode_phys_t` bonus to such a record and back. The facts it relies on
//! (include/sys/zfs_znode.h, include/sys/zfs_acl.h, module/zfs/zfs_sa.c, zfs_acl.c):
//!
//! * the 264-byte `znode_phys_t` (layout in [`ondisk::znode`]) fills the start of a 320-byte
//!   bonus of a 512-byte dnode with one block pointer; a symlink target of up to 56 bytes
//!   follows it in the bonus, a longer one is the first data block (`zfs_sa_symlink`);
//! * the ACL sits in `zp_acl` (`zfs_acl_phys_t`, 88 bytes at offset 176). ZPL versions 1 and
//!   2 write `ZFS_ACL_VERSION_INITIAL` entries (`zfs_oldace_t`: who u32, access mask u32,
//!   flags u16, type u16) with the count at offset 8; versions 3 and later
//!   `ZFS_ACL_VERSION_FUID` entries (the `zfs_ace_hdr_t` form SA files keep in
//!   `ZPL_DACL_ACES`) with the byte size at 8 and the count at 14. Entries beyond the 72
//!   embedded bytes live in an external object `z_acl_extern_obj`;
//! * directory entries carry the file type in their top 4 bits from ZPL version 2
//!   (`ZPL_VERSION_DIRENT_TYPE`; version 1 stores the object number alone);
//! * when a file system is upgraded to version 5, its old znodes stay as they are until
//!   they change, and are rewritten as system attributes then (`zfs_sa_upgrade`).
//!
//! Only little-endian znodes are rewritten; a big-endian one (written on SPARC) is refused.

use crate::sa_write::{Nums, SaRecord};
use crate::write::{Result, ZplWriteError, EOPNOTSUPP};
use ondisk::znode::{
    fuid_to_oldaces, oldaces_to_fuid, ZnodePhys, OLDACE_SIZE as OLDACE, S_IFBLK, S_IFCHR, S_IFLNK, S_IFMT,
    ZFS_ACE_SPACE, ZNODE_PHYS_SIZE,
};
use ondisk::ByteOrder;

/// `DMU_OT_ZNODE`: the bonus type of a ZPL < 5 znode.
pub(crate) const DMU_OT_ZNODE: u8 = 17;
/// Offset of `zp_acl` in `znode_phys_t`.
const ACL_OFF: usize = 176;
/// `ZFS_ACL_VERSION_INITIAL` and `ZFS_ACL_VERSION_FUID`.
const ACL_VERSION_INITIAL: u16 = 0;
const ACL_VERSION_FUID: u16 = 1;
/// The ZPL version from which ACLs hold FUID entries (`ZPL_VERSION_FUID`).
const ZPL_VERSION_FUID: u64 = 3;

/// A znode as it was read from a `znode_phys_t`: the bonus bytes (kept for the fields the
/// writer does not model: `zp_zap`, padding, a scanstamp) and the ACL it decoded to.
#[derive(Clone, Debug)]
pub(crate) struct LegacyBonus {
    pub bonus: Vec<u8>,
    pub acl_count: u64,
    pub acl_aces: Vec<u8>,
    /// `z_acl_extern_obj`: the object holding the entries, 0 when embedded.
    pub extern_obj: u64,
}

fn unsupported(what: String) -> ZplWriteError {
    ZplWriteError::new(EOPNOTSUPP, what)
}

/// An ACL whose entries have no form in the other version (an object entry, a FUID of a
/// Windows domain) or are cut short: the znode is not rewritten.
fn acl_error(e: ondisk::Error) -> ZplWriteError {
    unsupported(e.to_string())
}

/// Decodes a `znode_phys_t` bonus into a record in the attribute order new SA znodes use
/// (MODE SIZE GEN UID GID PARENT FLAGS first, which OpenZFS's accounting reads at fixed
/// offsets). `extern_acl` reads `size` bytes of an external ACL object; `long_symlink`
/// reads a symlink target kept in the data block.
pub(crate) fn decode(
    nums: &Nums,
    bonus: &[u8],
    order: ByteOrder,
    extern_acl: impl FnOnce(u64, usize) -> Result<Vec<u8>>,
    long_symlink: impl FnOnce(usize) -> Result<Vec<u8>>,
) -> Result<(SaRecord, LegacyBonus)> {
    let z = ZnodePhys::parse(bonus, order)?;
    let mut r = SaRecord::new();
    r.order = order;
    let t = |v: [u64; 2]| crate::sa_write::time_bytes((v[0], v[1]));
    for (n, v) in [
        (nums.mode, z.mode),
        (nums.size, z.size),
        (nums.gen, z.gen),
        (nums.uid, z.uid),
        (nums.gid, z.gid),
        (nums.parent, z.parent),
        (nums.flags, z.flags),
    ] {
        r.set_u64(n, v);
    }
    r.set(nums.atime, t(z.atime));
    r.set(nums.mtime, t(z.mtime));
    r.set(nums.ctime, t(z.ctime));
    r.set(nums.crtime, t(z.crtime));
    r.set_u64(nums.links, z.links);
    if matches!(z.mode & S_IFMT, S_IFCHR | S_IFBLK) {
        r.set_u64(nums.rdev, z.rdev);
    }
    if z.xattr != 0 {
        r.set_u64(nums.xattr, z.xattr);
    }
    let acl = &z.acl;
    let (count, raw) = match acl.version {
        ACL_VERSION_INITIAL => {
            // v0 keeps a 32-bit count where v1 keeps the size (zfs_acl_phys_v0_t).
            let count = (acl.size as usize).min(1 << 16);
            let raw = if acl.extern_obj != 0 {
                extern_acl(acl.extern_obj, count * OLDACE)?
            } else {
                acl.ace_data.to_vec()
            };
            (count as u64, oldaces_to_fuid(&raw, count).map_err(acl_error)?)
        }
        ACL_VERSION_FUID => {
            let size = acl.size as usize;
            let raw = if acl.extern_obj != 0 {
                extern_acl(acl.extern_obj, size)?
            } else {
                acl.ace_data
                    .get(..size)
                    .ok_or_else(|| unsupported(format!("embedded ACL of {size} bytes")))?
                    .to_vec()
            };
            (u64::from(acl.count), raw)
        }
        v => return Err(unsupported(format!("ACL version {v}"))),
    };
    r.set_u64(nums.dacl_count, count);
    r.set(nums.dacl_aces, raw.clone());
    if z.mode & S_IFMT == S_IFLNK {
        let target = match z.inline_symlink(bonus)? {
            Some(t) => t.to_vec(),
            None => long_symlink(usize::try_from(z.size).unwrap_or(usize::MAX))?,
        };
        r.set(nums.symlink, target);
    }
    let legacy =
        LegacyBonus { bonus: bonus.to_vec(), acl_count: count, acl_aces: raw, extern_obj: acl.extern_obj };
    Ok((r, legacy))
}

/// How [`encode`] placed a symlink target: in the bonus, or to be written as the first
/// data block by the caller.
pub(crate) enum SymlinkPlace {
    None,
    Bonus,
    DataBlock(Vec<u8>),
}

/// Encodes `rec` as the bonus of a znode of ZPL `version` (1–4). `old` is what the znode
/// was read as (None for a new one): its unmodelled bytes are kept, and so is its ACL when
/// the record's ACL did not change. Returns the bonus and where a symlink target goes.
pub(crate) fn encode(
    nums: &Nums,
    rec: &SaRecord,
    old: Option<&LegacyBonus>,
    version: u64,
    bonus_max: usize,
) -> Result<(Vec<u8>, SymlinkPlace)> {
    if rec.order != ByteOrder::Little {
        return Err(unsupported("rewriting a big-endian znode is not supported".into()));
    }
    let mut b = match old {
        Some(o) => o.bonus.get(..ZNODE_PHYS_SIZE).unwrap_or(&o.bonus).to_vec(),
        None => Vec::new(),
    };
    b.resize(ZNODE_PHYS_SIZE, 0);
    let put = |b: &mut Vec<u8>, off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    let time = |n: u16| -> [u64; 2] {
        let raw = rec.get(n).unwrap_or(&[]);
        let w = |i: usize| {
            raw.get(i * 8..i * 8 + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
        };
        [w(0), w(1)]
    };
    for (i, n) in [nums.atime, nums.mtime, nums.ctime, nums.crtime].into_iter().enumerate() {
        let [s, ns] = time(n);
        put(&mut b, i * 16, s);
        put(&mut b, i * 16 + 8, ns);
    }
    let mode = rec.u64(nums.mode);
    for (off, n) in [
        (64, nums.gen),
        (72, nums.mode),
        (80, nums.size),
        (88, nums.parent),
        (96, nums.links),
        (104, nums.xattr),
        (112, nums.rdev),
        (120, nums.flags),
        (128, nums.uid),
        (136, nums.gid),
    ] {
        put(&mut b, off, rec.u64(n));
    }
    let count = rec.u64(nums.dacl_count);
    let aces = rec.get(nums.dacl_aces).unwrap_or(&[]);
    let unchanged = old.is_some_and(|o| o.acl_count == count && o.acl_aces == aces);
    if !unchanged {
        let mut acl = [0u8; 16 + ZFS_ACE_SPACE];
        let (data, head) = if version < ZPL_VERSION_FUID {
            let (data, n) = fuid_to_oldaces(aces).map_err(acl_error)?;
            let mut head = [0u8; 8];
            head[0..4].copy_from_slice(&(n as u32).to_le_bytes());
            head[4..6].copy_from_slice(&ACL_VERSION_INITIAL.to_le_bytes());
            (data, head)
        } else {
            let mut head = [0u8; 8];
            head[0..4].copy_from_slice(&(aces.len() as u32).to_le_bytes());
            head[4..6].copy_from_slice(&ACL_VERSION_FUID.to_le_bytes());
            head[6..8].copy_from_slice(&(count as u16).to_le_bytes());
            (aces.to_vec(), head)
        };
        if data.len() > ZFS_ACE_SPACE {
            return Err(unsupported(format!(
                "an ACL of {} bytes does not fit a version-{version} znode (external ACL objects are not written)",
                data.len()
            )));
        }
        acl[8..16].copy_from_slice(&head);
        acl[16..16 + data.len()].copy_from_slice(&data);
        b[ACL_OFF..ACL_OFF + 16 + ZFS_ACE_SPACE].copy_from_slice(&acl);
    }
    let mut place = SymlinkPlace::None;
    if mode & S_IFMT == S_IFLNK {
        let target = rec.get(nums.symlink).unwrap_or(&[]);
        // The size is the target's length, which is how a reader finds it in the bonus.
        put(&mut b, 80, target.len() as u64);
        if ZNODE_PHYS_SIZE + target.len() <= bonus_max {
            b.extend_from_slice(target);
            place = SymlinkPlace::Bonus;
        } else {
            place = SymlinkPlace::DataBlock(target.to_vec());
        }
    } else if let Some(o) = old {
        // A scanstamp (or other tail) stays.
        b.extend_from_slice(o.bonus.get(ZNODE_PHYS_SIZE..).unwrap_or(&[]));
    }
    Ok((b, place))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Decoding an arbitrary bonus (ACL version, count, size, external object and
        /// symlink length all hostile) never panics, and what decodes re-encodes.
        #[test]
        fn decode_never_panics(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..340),
                               version in 0u16..3) {
            let nums = crate::sa_write::SaTables::new(0).unwrap().nums;
            let mut b = buf.clone();
            if b.len() >= 192 {
                b[188..190].copy_from_slice(&version.to_le_bytes());
            }
            for input in [&buf, &b] {
                let got = decode(&nums, input, ByteOrder::Little, |_, n| Ok(vec![0u8; n.min(4096)]), |n| Ok(vec![b'x'; n.min(4096)]));
                if let Ok((rec, old)) = got {
                    for v in 1..=4 {
                        let _ = encode(&nums, &rec, Some(&old), v, 320);
                        let _ = encode(&nums, &rec, None, v, 320);
                    }
                }
            }
        }
    }
}
