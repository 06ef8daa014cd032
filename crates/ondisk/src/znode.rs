//! The pre-SA ZPL bonus `znode_phys_t` (ZPL versions < 5), file-type bits of the mode and
//! directory-entry values (OpenZFS include/sys/zfs_sa.h, include/sys/zfs_znode.h,
//! include/sys/zfs_acl.h).
//!
//! ```text
//! znode_phys_t (264 bytes, bonus type DMU_OT_ZNODE)
//! off size field            off size field            off size field
//!   0   16 zp_atime[2]        80    8 zp_size          144    8 zp_zap
//!  16   16 zp_mtime[2]        88    8 zp_parent        152   24 zp_pad[3]
//!  32   16 zp_ctime[2]        96    8 zp_links         176   88 zp_acl (zfs_acl_phys_t)
//!  48   16 zp_crtime[2]      104    8 zp_xattr
//!  64    8 zp_gen            112    8 zp_rdev          zfs_acl_phys_t:
//!  72    8 zp_mode           120    8 zp_flags           0  8 z_acl_extern_obj
//!                            128    8 zp_uid             8  4 z_acl_size
//!                            136    8 zp_gid            12  2 z_acl_version
//!                                                       14  2 z_acl_count
//!                                                       16 72 z_ace_data
//! ```
//!
//! Times are `[seconds, nanoseconds]`. Bytes after the znode in the bonus buffer hold a short
//! symlink target (when `size + 264` fits the bonus buffer) or a 32-byte anti-virus scanstamp
//! (regular files with `ZFS_BONUS_SCANSTAMP`).

use crate::bytes::{slice, ByteOrder};
use crate::error::{Error, Result};

/// `ZFS_OLD_ZNODE_PHYS_SIZE`: size of `znode_phys_t`.
pub const ZNODE_PHYS_SIZE: usize = 0x108;
/// Size of `zfs_acl_phys_t`.
pub const ZFS_ACL_PHYS_SIZE: usize = 88;
/// `ZFS_ACE_SPACE`: bytes of ACEs embedded in `zfs_acl_phys_t`.
pub const ZFS_ACE_SPACE: usize = 72;

/// `S_IFMT` and the file types (as stored in `zp_mode` / `ZPL_MODE`).
pub const S_IFMT: u64 = 0o170000;
pub const S_IFIFO: u64 = 0o010000;
pub const S_IFCHR: u64 = 0o020000;
pub const S_IFDIR: u64 = 0o040000;
pub const S_IFBLK: u64 = 0o060000;
pub const S_IFREG: u64 = 0o100000;
pub const S_IFLNK: u64 = 0o120000;
pub const S_IFSOCK: u64 = 0o140000;
/// Solaris door.
pub const S_IFDOOR: u64 = 0o150000;
/// Solaris event port.
pub const S_IFPORT: u64 = 0o160000;

/// `zp_flags` bits (subset; include/sys/zfs_znode.h).
pub const ZFS_XATTR: u64 = 0x1;
pub const ZFS_INHERIT_ACE: u64 = 0x2;
pub const ZFS_ACL_TRIVIAL: u64 = 0x4;
pub const ZFS_BONUS_SCANSTAMP: u64 = 0x80;
pub const ZFS_READONLY: u64 = 0x1_0000_0000;
pub const ZFS_HIDDEN: u64 = 0x2_0000_0000;
pub const ZFS_SYSTEM: u64 = 0x4_0000_0000;
pub const ZFS_ARCHIVE: u64 = 0x8_0000_0000;
pub const ZFS_IMMUTABLE: u64 = 0x10_0000_0000;
pub const ZFS_NOUNLINK: u64 = 0x20_0000_0000;
pub const ZFS_APPENDONLY: u64 = 0x40_0000_0000;
pub const ZFS_NODUMP: u64 = 0x80_0000_0000;
pub const ZFS_AV_QUARANTINED: u64 = 0x200_0000_0000;
pub const ZFS_AV_MODIFIED: u64 = 0x400_0000_0000;
pub const ZFS_SPARSE: u64 = 0x2000_0000_0000;
pub const ZFS_PROJINHERIT: u64 = 0x4000_0000_0000;
pub const ZFS_PROJID: u64 = 0x8000_0000_0000;

/// The owners a file's space is charged to (`zfs_file_info_t`): user, group and project.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileIds {
    pub user: u64,
    pub group: u64,
    pub project: u64,
}

/// `DMU_OT_ZNODE` and `DMU_OT_SA`: the bonus types whose objects user accounting counts.
const BONUS_ZNODE: u8 = 17;
const BONUS_SA: u8 = 44;
/// Offsets after the SA header of uid, gid, flags and project id (`SA_UID_OFFSET` ... in
/// include/sys/zfs_sa.h). OpenZFS reads them at these fixed places, trusting every ZPL
/// layout to start MODE SIZE GEN UID GID PARENT FLAGS and to put PROJID at 128.
const SA_UID_OFFSET: usize = 24;
const SA_GID_OFFSET: usize = 32;
const SA_FLAGS_OFFSET: usize = 48;
const SA_PROJID_OFFSET: usize = 128;

/// The owners of an object for user/group/project accounting, read from its bonus as
/// OpenZFS's ZPL callback does (`zpl_get_file_info`, module/zfs/zfs_quota.c): None when the
/// object is not counted (another bonus type, a bonus too short or not an SA). An SA whose
/// magic is still 0 belongs to user and group 0. Without `ZFS_PROJID` in the flags the
/// project is 0 (`ZFS_DEFAULT_PROJID`).
pub fn accounting_ids(bonus_type: u8, bonus: &[u8], order: ByteOrder) -> Option<FileIds> {
    let at = |buf: &[u8], off: usize, o: ByteOrder| o.u64_at(buf, off, "owner").ok();
    match bonus_type {
        BONUS_ZNODE => {
            Some(FileIds { user: at(bonus, 128, order)?, group: at(bonus, 136, order)?, project: 0 })
        }
        BONUS_SA => {
            let magic = ByteOrder::Little.u32_at(bonus, 0, "sa_magic").ok()?;
            if magic == 0 {
                return Some(FileIds::default());
            }
            let o = if magic == crate::sa::SA_MAGIC {
                ByteOrder::Little
            } else if magic.swap_bytes() == crate::sa::SA_MAGIC {
                ByteOrder::Big
            } else {
                return None;
            };
            let hdr = usize::from(o.u16_at(bonus, 4, "sa_layout_info").ok()? >> 10) * 8;
            if hdr < 8 {
                return None;
            }
            let data = bonus.get(hdr..)?;
            let flags = at(data, SA_FLAGS_OFFSET, o)?;
            let project = if flags & ZFS_PROJID != 0 { at(data, SA_PROJID_OFFSET, o)? } else { 0 };
            Some(FileIds { user: at(data, SA_UID_OFFSET, o)?, group: at(data, SA_GID_OFFSET, o)?, project })
        }
        _ => None,
    }
}

/// File type from a mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    Fifo,
    CharDevice,
    Directory,
    BlockDevice,
    Regular,
    Symlink,
    Socket,
    Door,
    Port,
    /// Any other `S_IFMT` value (kept shifted down, as in a dirent type).
    Unknown(u8),
}

impl FileType {
    /// The type encoded in `mode & S_IFMT`.
    pub fn from_mode(mode: u64) -> FileType {
        Self::from_dirent_type(((mode & S_IFMT) >> 12) as u8)
    }

    /// The type of a directory entry's top 4 bits (`IFTODT` of the mode).
    pub fn from_dirent_type(t: u8) -> FileType {
        match u64::from(t) << 12 {
            S_IFIFO => FileType::Fifo,
            S_IFCHR => FileType::CharDevice,
            S_IFDIR => FileType::Directory,
            S_IFBLK => FileType::BlockDevice,
            S_IFREG => FileType::Regular,
            S_IFLNK => FileType::Symlink,
            S_IFSOCK => FileType::Socket,
            S_IFDOOR => FileType::Door,
            S_IFPORT => FileType::Port,
            _ => FileType::Unknown(t),
        }
    }

    /// `IFTODT`: the 4-bit type stored in directory entries.
    pub fn dirent_type(self) -> u8 {
        let m = match self {
            FileType::Fifo => S_IFIFO,
            FileType::CharDevice => S_IFCHR,
            FileType::Directory => S_IFDIR,
            FileType::BlockDevice => S_IFBLK,
            FileType::Regular => S_IFREG,
            FileType::Symlink => S_IFLNK,
            FileType::Socket => S_IFSOCK,
            FileType::Door => S_IFDOOR,
            FileType::Port => S_IFPORT,
            FileType::Unknown(t) => return t & 0xf,
        };
        (m >> 12) as u8
    }
}

/// Object number of a directory entry value (`ZFS_DIRENT_OBJ`: low 48 bits).
pub fn dirent_obj(de: u64) -> u64 {
    de & ((1 << 48) - 1)
}

/// Type bits of a directory entry value (`ZFS_DIRENT_TYPE`: top 4 bits).
pub fn dirent_type(de: u64) -> u8 {
    (de >> 60) as u8
}

/// Builds a directory entry value from an object number and a file type.
pub fn make_dirent(obj: u64, ft: FileType) -> Result<u64> {
    if obj >> 48 != 0 {
        return Err(Error::corrupt("zfs dirent", format!("object {obj} needs more than 48 bits")));
    }
    Ok(obj | (u64::from(ft.dirent_type()) << 60))
}

/// `zfs_acl_phys_t`: the ACL header embedded in a znode (ACEs kept raw).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZfsAclPhys {
    pub extern_obj: u64,
    /// Bytes of ACL (FUID-era ACLs) or ACE count (version 0 ACLs).
    pub size: u32,
    pub version: u16,
    pub count: u16,
    pub ace_data: [u8; ZFS_ACE_SPACE],
}

/// A decoded `znode_phys_t`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZnodePhys {
    pub atime: [u64; 2],
    pub mtime: [u64; 2],
    pub ctime: [u64; 2],
    pub crtime: [u64; 2],
    pub gen: u64,
    pub mode: u64,
    pub size: u64,
    pub parent: u64,
    pub links: u64,
    pub xattr: u64,
    pub rdev: u64,
    pub flags: u64,
    pub uid: u64,
    pub gid: u64,
    pub zap: u64,
    pub pad: [u64; 3],
    pub acl: ZfsAclPhys,
}

impl ZnodePhys {
    /// Decodes the first 264 bytes of a `DMU_OT_ZNODE` bonus buffer.
    pub fn parse(bonus: &[u8], order: ByteOrder) -> Result<ZnodePhys> {
        let b = slice(bonus, 0, ZNODE_PHYS_SIZE, "znode_phys")?;
        let w = |i: usize| order.u64_at(b, i * 8, "znode_phys");
        let mut ace_data = [0u8; ZFS_ACE_SPACE];
        ace_data.copy_from_slice(slice(b, 176 + 16, ZFS_ACE_SPACE, "zfs_acl_phys")?);
        Ok(ZnodePhys {
            atime: [w(0)?, w(1)?],
            mtime: [w(2)?, w(3)?],
            ctime: [w(4)?, w(5)?],
            crtime: [w(6)?, w(7)?],
            gen: w(8)?,
            mode: w(9)?,
            size: w(10)?,
            parent: w(11)?,
            links: w(12)?,
            xattr: w(13)?,
            rdev: w(14)?,
            flags: w(15)?,
            uid: w(16)?,
            gid: w(17)?,
            zap: w(18)?,
            pad: [w(19)?, w(20)?, w(21)?],
            acl: ZfsAclPhys {
                extern_obj: w(22)?,
                size: order.u32_at(b, 184, "z_acl_size")?,
                version: order.u16_at(b, 188, "z_acl_version")?,
                count: order.u16_at(b, 190, "z_acl_count")?,
                ace_data,
            },
        })
    }

    /// Encodes into a 264-byte buffer.
    pub fn encode(&self, order: ByteOrder) -> Vec<u8> {
        let mut b = vec![0u8; ZNODE_PHYS_SIZE];
        let words = [
            self.atime[0],
            self.atime[1],
            self.mtime[0],
            self.mtime[1],
            self.ctime[0],
            self.ctime[1],
            self.crtime[0],
            self.crtime[1],
            self.gen,
            self.mode,
            self.size,
            self.parent,
            self.links,
            self.xattr,
            self.rdev,
            self.flags,
            self.uid,
            self.gid,
            self.zap,
            self.pad[0],
            self.pad[1],
            self.pad[2],
            self.acl.extern_obj,
        ];
        for (i, v) in words.into_iter().enumerate() {
            order.put_u64(&mut b, i * 8, v);
        }
        order.put_u32(&mut b, 184, self.acl.size);
        order.put_u16(&mut b, 188, self.acl.version);
        order.put_u16(&mut b, 190, self.acl.count);
        b[192..].copy_from_slice(&self.acl.ace_data);
        b
    }

    /// The file type of `mode`.
    pub fn file_type(&self) -> FileType {
        FileType::from_mode(self.mode)
    }

    /// The target of a symlink stored in the bonus buffer after the znode, or `None` when it
    /// lives in the object's first data block (`zfs_sa_readlink`). `bonus` must be the whole
    /// bonus buffer (its allocated size, not just `dn_bonuslen`).
    pub fn inline_symlink<'a>(&self, bonus: &'a [u8]) -> Result<Option<&'a [u8]>> {
        if self.file_type() != FileType::Symlink {
            return Err(Error::corrupt("znode_phys", "not a symlink"));
        }
        let len =
            usize::try_from(self.size).map_err(|_| Error::corrupt("znode_phys", "symlink size overflow"))?;
        match len.checked_add(ZNODE_PHYS_SIZE) {
            Some(end) if end <= bonus.len() => Ok(Some(&bonus[ZNODE_PHYS_SIZE..end])),
            _ => Ok(None),
        }
    }

    /// The 32-byte scanstamp after the znode, when `ZFS_BONUS_SCANSTAMP` is set.
    pub fn scanstamp<'a>(&self, bonus: &'a [u8]) -> Result<Option<&'a [u8]>> {
        if self.flags & ZFS_BONUS_SCANSTAMP == 0 {
            return Ok(None);
        }
        slice(bonus, ZNODE_PHYS_SIZE, 32, "znode scanstamp").map(Some)
    }
}

// ----- ACL entries of `zfs_acl_phys_t` ------------------------------------------------------
//
// ZPL versions 1 and 2 keep `ZFS_ACL_VERSION_INITIAL` entries (`zfs_oldace_t`, 12 bytes: who
// u32, access mask u32, flags u16, type u16); version 3 and later `ZFS_ACL_VERSION_FUID`
// entries (`zfs_ace_hdr_t`: type u16, flags u16, access mask u32, then a u64 FUID unless the
// entry names owner@, group@ or everyone@), the form SA files keep in `ZPL_DACL_ACES`
// (include/sys/zfs_acl.h). Little-endian: only little-endian znodes are rewritten.

/// `zfs_oldace_t` size.
pub const OLDACE_SIZE: usize = 12;
/// Entry flags that name owner@, group@ or everyone@ (`ACE_TYPE_FLAGS`, `OWNING_GROUP`).
const ACE_OWNER: u16 = 0x1000;
const ACE_GROUP: u16 = 0x2000;
const ACE_EVERYONE: u16 = 0x4000;
const ACE_IDENTIFIER_GROUP: u16 = 0x40;
const ACE_TYPE_FLAGS: u16 = ACE_OWNER | ACE_GROUP | ACE_EVERYONE | ACE_IDENTIFIER_GROUP;
/// Allow/deny/audit/alarm object entry types (`ACE_ACCESS_ALLOWED_OBJECT_ACE_TYPE`..),
/// which carry two GUIDs after the FUID.
const OBJECT_ACE_TYPES: std::ops::RangeInclusive<u16> = 5..=8;

/// Whether an entry (`zfs_ace_hdr_t` flags) names owner@, group@ or everyone@: such entries
/// have no FUID.
fn abstract_entry(flags: u16) -> bool {
    let t = flags & ACE_TYPE_FLAGS;
    t == ACE_OWNER || t == (ACE_GROUP | ACE_IDENTIFIER_GROUP) || t == ACE_EVERYONE
}

/// Size of the FUID-form entry at the start of `b` (`zfs_ace_fuid_size`).
fn fuid_entry_len(b: &[u8]) -> Option<usize> {
    let ty = u16::from_le_bytes(b.get(0..2)?.try_into().ok()?);
    let flags = u16::from_le_bytes(b.get(2..4)?.try_into().ok()?);
    Some(if OBJECT_ACE_TYPES.contains(&ty) {
        48
    } else if ty <= 1 && abstract_entry(flags) {
        8
    } else {
        16
    })
}

/// `zfs_oldace_t` entries → FUID-form entries.
pub fn oldaces_to_fuid(raw: &[u8], count: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..count {
        let e = raw
            .get(i * OLDACE_SIZE..(i + 1) * OLDACE_SIZE)
            .ok_or_else(|| Error::corrupt("zfs_oldace_t", format!("ACL of {count} entries is cut short")))?;
        let who = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let mask = [e[4], e[5], e[6], e[7]];
        let flags = u16::from_le_bytes([e[8], e[9]]);
        let ty = u16::from_le_bytes([e[10], e[11]]);
        if OBJECT_ACE_TYPES.contains(&ty) {
            return Err(Error::unsupported("zfs_oldace_t", format!("ACL entry of object type {ty}")));
        }
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&mask);
        if !(ty <= 1 && abstract_entry(flags)) {
            out.extend_from_slice(&u64::from(who).to_le_bytes());
        }
    }
    Ok(out)
}

/// FUID-form entries → `zfs_oldace_t` entries (owner@, group@ and everyone@ get the who
/// -1, as `ace_who_set` stores it for them). A FUID of a Windows domain does not fit.
pub fn fuid_to_oldaces(aces: &[u8]) -> Result<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut count = 0;
    while at < aces.len() {
        let e = &aces[at..];
        let len = fuid_entry_len(e)
            .filter(|&l| l <= e.len())
            .ok_or_else(|| Error::corrupt("zfs_ace_t", format!("ACL entry at byte {at} is cut short")))?;
        if len == 48 {
            return Err(Error::unsupported("zfs_ace_t", "an object ACL entry has no version-0 form"));
        }
        let who = if len == 16 {
            let fuid = u64::from_le_bytes(e[8..16].try_into().unwrap_or_default());
            u32::try_from(fuid).map_err(|_| {
                Error::unsupported("zfs_ace_t", format!("FUID {fuid:#x} has no version-0 form"))
            })?
        } else {
            u32::MAX
        };
        out.extend_from_slice(&who.to_le_bytes());
        out.extend_from_slice(&e[4..8]);
        out.extend_from_slice(&e[2..4]);
        out.extend_from_slice(&e[0..2]);
        at += len;
        count += 1;
    }
    Ok((out, count))
}

#[cfg(test)]
mod tests {
    fn fuid_trivial() -> Vec<u8> {
        // owner@ allow, group@ allow, everyone@ allow, user 1000 deny.
        let mut v = Vec::new();
        for (ty, flags, mask) in [
            (0u16, ACE_OWNER, 0x1f01ffu32),
            (0, ACE_GROUP | ACE_IDENTIFIER_GROUP, 0x1200a9),
            (0, ACE_EVERYONE, 0x1200a9),
        ] {
            v.extend_from_slice(&ty.to_le_bytes());
            v.extend_from_slice(&flags.to_le_bytes());
            v.extend_from_slice(&mask.to_le_bytes());
        }
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&2u32.to_le_bytes());
        v.extend_from_slice(&1000u64.to_le_bytes());
        v
    }

    #[test]
    fn old_and_fuid_entries_convert_both_ways() {
        let fuid = fuid_trivial();
        let (old, n) = fuid_to_oldaces(&fuid).unwrap();
        assert_eq!((old.len(), n), (48, 4));
        assert_eq!(&old[0..4], &u32::MAX.to_le_bytes());
        assert_eq!(&old[36..40], &1000u32.to_le_bytes());
        assert_eq!(oldaces_to_fuid(&old, n).unwrap(), fuid);
    }
    #[test]
    fn conversions_never_panic() {
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 5) as u8).collect();
            let _ = fuid_to_oldaces(&junk);
            let _ = oldaces_to_fuid(&junk, len);
        }
    }

    use super::*;

    #[test]
    fn dirent_bits() {
        let de = make_dirent(0x1234, FileType::Regular).unwrap();
        assert_eq!(de, 0x8000_0000_0000_1234);
        assert_eq!(dirent_obj(de), 0x1234);
        assert_eq!(FileType::from_dirent_type(dirent_type(de)), FileType::Regular);
        assert!(make_dirent(1 << 48, FileType::Directory).is_err());
        assert_eq!(FileType::from_mode(0o40755), FileType::Directory);
        assert_eq!(FileType::from_mode(0o070000), FileType::Unknown(7));
    }

    #[test]
    fn symlink_inline_and_round_trip() {
        let mut bonus = vec![0u8; 320];
        let z = ZnodePhys {
            mode: S_IFLNK | 0o777,
            size: 5,
            ..ZnodePhys::parse(&bonus, ByteOrder::Little).unwrap()
        };
        bonus[..ZNODE_PHYS_SIZE].copy_from_slice(&z.encode(ByteOrder::Big));
        bonus[ZNODE_PHYS_SIZE..ZNODE_PHYS_SIZE + 5].copy_from_slice(b"/tmp!");
        let back = ZnodePhys::parse(&bonus, ByteOrder::Big).unwrap();
        assert_eq!(back, z);
        assert_eq!(back.inline_symlink(&bonus).unwrap(), Some(&b"/tmp!"[..]));
        let long = ZnodePhys { size: 57, ..z };
        assert_eq!(long.inline_symlink(&bonus).unwrap(), None);
        assert!(ZnodePhys::parse(&bonus[..263], ByteOrder::Big).is_err());
    }

    proptest::proptest! {
        /// Accounting reads the owners of every bonus it syncs, from disk or from a stream:
        /// any bytes, any claimed header size, never a panic.
        #[test]
        fn accounting_ids_never_panic(
            ty in proptest::prelude::any::<u8>(),
            magic in proptest::prelude::any::<bool>(),
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
        ) {
            if magic && bytes.len() >= 4 {
                bytes[..4].copy_from_slice(&crate::sa::SA_MAGIC.to_le_bytes());
            }
            for t in [ty, BONUS_SA, BONUS_ZNODE] {
                let _ = accounting_ids(t, &bytes, ByteOrder::Little);
                let _ = accounting_ids(t, &bytes, ByteOrder::Big);
            }
        }
    }
}
