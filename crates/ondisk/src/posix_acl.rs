//! POSIX ACLs as Linux passes them through `system.posix_acl_access` and
//! `system.posix_acl_default`, and as OpenZFS on Linux stores them (acltype=posix): the value
//! of an ordinary extended attribute with that full name, in the xattr directory or the SA
//! xattr nvlist (`zpl_set_posix_acl` in module/os/linux/zfs/zpl_xattr.c writes what
//! `posix_acl_to_xattr` produces, and reads it back with `posix_acl_from_xattr`).
//!
//! Format (`include/uapi/linux/posix_acl_xattr.h`), little-endian whatever the host:
//! a 4-byte header holding version 2, then 8-byte entries `{ tag u16, perm u16, id u32 }`.
//! Tags: USER_OBJ 0x01, USER 0x02, GROUP_OBJ 0x04, GROUP 0x08, MASK 0x10, OTHER 0x20; perm is
//! r=4 w=2 x=1; `id` is a uid or gid for USER and GROUP entries and `ACL_UNDEFINED_ID`
//! (0xffffffff) for the others. A header with no entries means "no ACL".
//!
//! Validity (the kernel's `posix_acl_valid`): exactly one USER_OBJ first, then USER entries,
//! one GROUP_OBJ, GROUP entries, a MASK (required when any USER or GROUP entry exists, else
//! optional) and one OTHER last; permissions use only the rwx bits.

use crate::{Error, Result};

pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;
/// The `id` of entries that name no user or group.
pub const ACL_UNDEFINED_ID: u32 = 0xffff_ffff;
/// `POSIX_ACL_XATTR_VERSION`.
pub const XATTR_VERSION: u32 = 2;
/// The rwx bits of an entry.
pub const PERM_BITS: u16 = 0o7;

/// The xattr holding a file's access ACL.
pub const XATTR_ACCESS: &[u8] = b"system.posix_acl_access";
/// The xattr holding a directory's default ACL (inherited by what is created in it).
pub const XATTR_DEFAULT: &[u8] = b"system.posix_acl_default";

/// Most entries accepted: a value is at most `XATTR_SIZE_MAX` (64 KiB) bytes.
const MAX_ENTRIES: usize = (65536 - 4) / 8;

/// One ACL entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A POSIX ACL: its entries in stored order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PosixAcl {
    pub entries: Vec<AclEntry>,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::corrupt("POSIX ACL", detail)
}

impl PosixAcl {
    /// Decodes an xattr value. `Ok(None)` for a header without entries ("no ACL", as
    /// `posix_acl_from_xattr` treats it). The entries are not checked for validity here;
    /// see [`PosixAcl::validate`].
    pub fn parse(buf: &[u8]) -> Result<Option<PosixAcl>> {
        let hdr = buf.get(..4).ok_or_else(|| bad(format!("{} bytes, shorter than the header", buf.len())))?;
        let version = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        if version != XATTR_VERSION {
            return Err(Error::unsupported("POSIX ACL", format!("version {version} (only 2 exists)")));
        }
        let body = &buf[4..];
        if !body.len().is_multiple_of(8) {
            return Err(bad(format!("{} bytes of entries, not a multiple of 8", body.len())));
        }
        if body.len() / 8 > MAX_ENTRIES {
            return Err(bad(format!("{} entries", body.len() / 8)));
        }
        if body.is_empty() {
            return Ok(None);
        }
        let mut entries = Vec::with_capacity(body.len() / 8);
        for e in body.chunks_exact(8) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let id = match tag {
                ACL_USER | ACL_GROUP => id,
                ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => ACL_UNDEFINED_ID,
                other => return Err(bad(format!("unknown entry tag {other:#x}"))),
            };
            entries.push(AclEntry { tag, perm, id });
        }
        Ok(Some(PosixAcl { entries }))
    }

    /// Encodes as the xattr value (`posix_acl_to_xattr`'s bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.entries.len());
        v.extend_from_slice(&XATTR_VERSION.to_le_bytes());
        for e in &self.entries {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            let id = if matches!(e.tag, ACL_USER | ACL_GROUP) { e.id } else { ACL_UNDEFINED_ID };
            v.extend_from_slice(&id.to_le_bytes());
        }
        v
    }

    /// Checks the entry order and permissions the kernel requires (module comment).
    pub fn validate(&self) -> Result<()> {
        // Position in the required sequence: 0 expects USER_OBJ, 1 USER* then GROUP_OBJ,
        // 2 GROUP* then MASK or OTHER, 3 (after MASK) OTHER, 4 done.
        let mut stage = 0;
        let mut named = false;
        for (i, e) in self.entries.iter().enumerate() {
            if e.perm & !PERM_BITS != 0 {
                return Err(bad(format!("entry {i}: permission bits {:#o}", e.perm)));
            }
            stage = match (e.tag, stage) {
                (ACL_USER_OBJ, 0) => 1,
                (ACL_USER, 1) => {
                    named = true;
                    1
                }
                (ACL_GROUP_OBJ, 1) => 2,
                (ACL_GROUP, 2) => {
                    named = true;
                    2
                }
                (ACL_MASK, 2) => 3,
                (ACL_OTHER, 3) => 4,
                (ACL_OTHER, 2) if !named => 4,
                (tag, _) => {
                    return Err(bad(format!("entry {i}: tag {tag:#x} out of order or missing a mask")));
                }
            };
        }
        if stage != 4 {
            return Err(bad("an ACL needs user::, group:: and other:: entries"));
        }
        Ok(())
    }

    /// The entry with `tag` (the first one), for the single-instance tags.
    pub fn entry(&self, tag: u16) -> Option<&AclEntry> {
        self.entries.iter().find(|e| e.tag == tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Bytes the Linux kernel produced (`setfacl -m u:65534:r,g:100:rw f` on ext4, then
    /// `getfattr -n system.posix_acl_access -e hex f`).
    const KERNEL_ACCESS: &str = "0200000001000600ffffffff02000400feff000004000400ffffffff080006006400000010000600ffffffff20000400ffffffff";

    #[test]
    fn kernel_bytes_round_trip() {
        let b = hex(KERNEL_ACCESS);
        let acl = PosixAcl::parse(&b).unwrap().unwrap();
        let want = [
            (ACL_USER_OBJ, 6, ACL_UNDEFINED_ID),
            (ACL_USER, 4, 65534),
            (ACL_GROUP_OBJ, 4, ACL_UNDEFINED_ID),
            (ACL_GROUP, 6, 100),
            (ACL_MASK, 6, ACL_UNDEFINED_ID),
            (ACL_OTHER, 4, ACL_UNDEFINED_ID),
        ];
        let got: Vec<(u16, u16, u32)> = acl.entries.iter().map(|e| (e.tag, e.perm, e.id)).collect();
        assert_eq!(got, want);
        acl.validate().unwrap();
        assert_eq!(acl.encode(), b);
    }

    #[test]
    fn empty_bad_and_invalid() {
        assert_eq!(PosixAcl::parse(&[2, 0, 0, 0]).unwrap(), None);
        assert!(PosixAcl::parse(&[2, 0, 0]).is_err());
        assert!(PosixAcl::parse(&[1, 0, 0, 0]).is_err());
        assert!(PosixAcl::parse(&[2, 0, 0, 0, 1, 0]).is_err());
        // Unknown tag.
        assert!(PosixAcl::parse(&[2, 0, 0, 0, 0x40, 0, 7, 0, 0, 0, 0, 0]).is_err());
        let e = |tag, perm, id| AclEntry { tag, perm, id };
        let u = ACL_UNDEFINED_ID;
        let ok =
            PosixAcl { entries: vec![e(ACL_USER_OBJ, 7, u), e(ACL_GROUP_OBJ, 5, u), e(ACL_OTHER, 0, u)] };
        ok.validate().unwrap();
        // A named user without a mask.
        let mut no_mask = ok.clone();
        no_mask.entries.insert(1, e(ACL_USER, 4, 5));
        assert!(no_mask.validate().is_err());
        let mut with_mask = no_mask.clone();
        with_mask.entries.insert(3, e(ACL_MASK, 4, u));
        with_mask.validate().unwrap();
        // Out of order, missing other, bad permission bits.
        let mut swapped = ok.clone();
        swapped.entries.swap(0, 1);
        assert!(swapped.validate().is_err());
        assert!(PosixAcl { entries: ok.entries[..2].to_vec() }.validate().is_err());
        let mut perm = ok.clone();
        perm.entries[2].perm = 0o10;
        assert!(perm.validate().is_err());
        // Ids of unnamed entries are normalized to ACL_UNDEFINED_ID.
        let mut b = ok.encode();
        b[8..12].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(PosixAcl::parse(&b).unwrap().unwrap(), ok);
    }

    proptest::proptest! {
        /// Parsing arbitrary bytes never panics, and what parses and validates re-encodes to
        /// bytes that parse to the same ACL.
        #[test]
        fn parse_never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120)) {
            let mut with_hdr = vec![2, 0, 0, 0];
            with_hdr.extend_from_slice(&b);
            for input in [&b, &with_hdr] {
                if let Ok(Some(acl)) = PosixAcl::parse(input) {
                    let _ = acl.validate();
                    proptest::prop_assert_eq!(PosixAcl::parse(&acl.encode()).unwrap(), Some(acl));
                }
            }
        }
    }
}
