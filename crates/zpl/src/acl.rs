//! Access control of a ZPL dataset as OpenZFS on Linux does it: the `acltype` property, the
//! POSIX ACL rules that tie an ACL to the file mode, and the names under which extended
//! attributes of each Linux namespace are stored.
//!
//! Facts (OpenZFS `module/os/linux/zfs/zpl_xattr.c`, `zfs_prop.c`, `zfs_ioctl.h`):
//! * `acltype` is an index property: 0 = off (also spelled `noacl`, `disabled`), 1 = posix
//!   (`posixacl`), 2 = nfsv4. It is inherited; the Linux default is off.
//! * With posix, an ACL is an ordinary xattr named `system.posix_acl_access` or
//!   `system.posix_acl_default` holding the Linux `posix_acl_xattr` bytes
//!   ([`ondisk::posix_acl`]). Setting an access ACL that the mode can express exactly stores
//!   no xattr (it is removed) and only sets the mode; otherwise the mode's group bits become
//!   the mask (`posix_acl_equiv_mode`). A default ACL on anything but a directory is refused
//!   (EACCES). chmod rewrites the owner, mask (or group when there is no mask) and other
//!   entries of an existing access ACL (`zpl_chmod_acl`). A new file takes its mode and access
//!   ACL from the parent's default ACL instead of the umask, and a new directory also takes
//!   the default ACL itself (`zpl_init_acl`). With off or nfsv4 the two names are refused
//!   (EOPNOTSUPP) and not listed.
//! * Other names: `user.`, `trusted.` and `security.` names are stored with their prefix
//!   (the default `zfs_xattr_compat=0`). A stored name in no Linux namespace (written by
//!   Solaris, FreeBSD or `zfs_xattr_compat=1`) is a user attribute: listed with `user.` in
//!   front and found by `user.NAME` when `user.NAME` itself is absent; FreeBSD's
//!   `freebsd:system:` names are not shown. So a user name whose rest starts with another
//!   namespace's prefix (`user.trusted.x`) is refused (EINVAL). Any requested name outside these namespaces is
//!   EOPNOTSUPP, as the Linux VFS answers for a namespace the file system has no handler for.

pub use ondisk::posix_acl::{
    AclEntry, PosixAcl, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_UNDEFINED_ID, ACL_USER,
    ACL_USER_OBJ, XATTR_ACCESS, XATTR_DEFAULT,
};

/// The `acltype` property.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AclType {
    /// No ACLs: permissions are the mode bits (the Linux default).
    #[default]
    Off,
    /// POSIX ACLs in `system.posix_acl_*` xattrs.
    Posix,
    /// NFSv4 ACLs (the ZFS native ACL); rzfs does not enforce them.
    Nfsv4,
    /// A value this code does not know.
    Unknown(u64),
}

impl AclType {
    /// From the stored property value.
    pub fn from_prop(n: u64) -> AclType {
        match n {
            0 => AclType::Off,
            1 => AclType::Posix,
            2 => AclType::Nfsv4,
            n => AclType::Unknown(n),
        }
    }

    /// From the displayed property value (`zfs get acltype`), aliases included.
    pub fn from_name(s: &str) -> Option<AclType> {
        Some(match s {
            "off" | "noacl" | "disabled" => AclType::Off,
            "posix" | "posixacl" => AclType::Posix,
            "nfsv4" => AclType::Nfsv4,
            _ => return None,
        })
    }
}

const S_IRWXU: u64 = 0o700;
const S_IRWXG: u64 = 0o070;
const S_IRWXO: u64 = 0o007;
const S_IRWXUGO: u64 = 0o777;

/// The permission bits an ACL implies for a file of `mode`, and whether the ACL says no
/// more than those bits (only owner, group and other entries), so that it need not be
/// stored. The group bits are the mask's when there is one.
pub fn equiv_mode(acl: &PosixAcl, mode: u64) -> (u64, bool) {
    let perm = |tag| acl.entry(tag).map(|e| u64::from(e.perm) & S_IRWXO);
    let owner = perm(ACL_USER_OBJ).unwrap_or(0);
    let group = perm(ACL_MASK).or(perm(ACL_GROUP_OBJ)).unwrap_or(0);
    let other = perm(ACL_OTHER).unwrap_or(0);
    let exact = acl.entries.iter().all(|e| matches!(e.tag, ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_OTHER));
    ((mode & !S_IRWXUGO) | (owner << 6) | (group << 3) | other, exact)
}

/// Rewrites an access ACL for a chmod to `mode`: the owner, other, and mask entries (the
/// group entry when there is no mask) take the new bits; named entries keep theirs.
pub fn chmod(acl: &mut PosixAcl, mode: u64) {
    let has_mask = acl.entry(ACL_MASK).is_some();
    for e in &mut acl.entries {
        let bits = match e.tag {
            ACL_USER_OBJ => (mode & S_IRWXU) >> 6,
            ACL_MASK => (mode & S_IRWXG) >> 3,
            ACL_GROUP_OBJ if !has_mask => (mode & S_IRWXG) >> 3,
            ACL_OTHER => mode & S_IRWXO,
            _ => continue,
        };
        e.perm = bits as u16;
    }
}

/// What a new file gets from its directory's default ACL: the access ACL (the default ACL
/// with the owner, group-class and other entries cut down to what `mode` asks for), the
/// resulting mode (`mode` cut down to what the ACL grants; the umask does not apply), and
/// whether that access ACL says more than the mode (it is stored only then).
pub fn inherit(default: &PosixAcl, mode: u64) -> (PosixAcl, u64, bool) {
    let mut acl = default.clone();
    let want = |shift: u32| ((mode >> shift) & S_IRWXO) as u16;
    let has_mask = acl.entry(ACL_MASK).is_some();
    for e in &mut acl.entries {
        match e.tag {
            ACL_USER_OBJ => e.perm &= want(6),
            // The group class is bounded by the mask when there is one.
            ACL_MASK => e.perm &= want(3),
            ACL_GROUP_OBJ if !has_mask => e.perm &= want(3),
            ACL_OTHER => e.perm &= want(0),
            _ => {}
        }
    }
    let (new_mode, exact) = equiv_mode(&acl, mode);
    (acl, new_mode, !exact)
}

/// The Linux namespace of a requested xattr name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrNs<'a> {
    /// `user.` + the rest (non-empty).
    User(&'a [u8]),
    Trusted,
    Security,
    AclAccess,
    AclDefault,
}

const USER: &[u8] = b"user.";
const TRUSTED: &[u8] = b"trusted.";
const SECURITY: &[u8] = b"security.";
const FREEBSD: &[u8] = b"freebsd:";
const SYSTEM: &[u8] = b"system.";

/// Classifies a name given to getxattr/setxattr/removexattr: EOPNOTSUPP outside the
/// namespaces OpenZFS on Linux handles, EINVAL for a bare prefix (as the VFS answers).
pub fn classify(name: &[u8]) -> Result<XattrNs<'_>, i32> {
    const EINVAL: i32 = 22;
    const EOPNOTSUPP: i32 = 95;
    if name == XATTR_ACCESS {
        return Ok(XattrNs::AclAccess);
    }
    if name == XATTR_DEFAULT {
        return Ok(XattrNs::AclDefault);
    }
    let (ns, rest) = if let Some(r) = name.strip_prefix(USER) {
        (XattrNs::User(r), r)
    } else if let Some(r) = name.strip_prefix(TRUSTED) {
        (XattrNs::Trusted, r)
    } else if let Some(r) = name.strip_prefix(SECURITY) {
        (XattrNs::Security, r)
    } else {
        return Err(EOPNOTSUPP);
    };
    if rest.is_empty() {
        return Err(EINVAL);
    }
    // A user name must not look like a name of another namespace once its prefix is gone
    // (OpenZFS `ZFS_XA_NS_PREFIX_FORBIDDEN`): it could be stored without the prefix.
    if matches!(ns, XattrNs::User(_))
        && [FREEBSD, SECURITY, SYSTEM, TRUSTED, USER].iter().any(|p| rest.starts_with(p))
    {
        return Err(EINVAL);
    }
    Ok(ns)
}

/// How a stored xattr name is listed (None: not shown). `privileged`: the caller may see
/// `trusted.` names (CAP_SYS_ADMIN; here: uid 0).
pub fn listed_name(stored: &[u8], acl: AclType, privileged: bool) -> Option<Vec<u8>> {
    if stored == XATTR_ACCESS || stored == XATTR_DEFAULT {
        return (acl == AclType::Posix).then(|| stored.to_vec());
    }
    if stored.starts_with(TRUSTED) {
        return privileged.then(|| stored.to_vec());
    }
    if stored.starts_with(USER) || stored.starts_with(SECURITY) {
        return Some(stored.to_vec());
    }
    if stored.starts_with(FREEBSD) {
        return None;
    }
    let mut v = USER.to_vec();
    v.extend_from_slice(stored);
    Some(v)
}

/// Stored names to look up, in order, for a requested name: `user.X` may also be stored
/// as plain `X`.
pub fn stored_names(name: &[u8]) -> Vec<&[u8]> {
    match classify(name) {
        Ok(XattrNs::User(rest)) => vec![name, rest],
        _ => vec![name],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: u32 = ACL_UNDEFINED_ID;

    fn acl(entries: &[(u16, u16, u32)]) -> PosixAcl {
        PosixAcl { entries: entries.iter().map(|&(tag, perm, id)| AclEntry { tag, perm, id }).collect() }
    }

    #[test]
    fn acltype_values() {
        assert_eq!(AclType::from_prop(0), AclType::Off);
        assert_eq!(AclType::from_prop(1), AclType::Posix);
        assert_eq!(AclType::from_prop(2), AclType::Nfsv4);
        assert_eq!(AclType::from_prop(9), AclType::Unknown(9));
        assert_eq!(AclType::from_name("posixacl"), Some(AclType::Posix));
        assert_eq!(AclType::from_name("noacl"), Some(AclType::Off));
        assert_eq!(AclType::from_name("x"), None);
    }

    #[test]
    fn mode_and_acl_agree() {
        // Three entries: exactly the mode.
        let base = acl(&[(ACL_USER_OBJ, 6, U), (ACL_GROUP_OBJ, 4, U), (ACL_OTHER, 0, U)]);
        assert_eq!(equiv_mode(&base, 0o100777), (0o100640, true));
        // A named user and a mask: group bits are the mask's.
        let named = acl(&[
            (ACL_USER_OBJ, 7, U),
            (ACL_USER, 6, 65534),
            (ACL_GROUP_OBJ, 4, U),
            (ACL_MASK, 6, U),
            (ACL_OTHER, 0, U),
        ]);
        assert_eq!(equiv_mode(&named, 0o4100000), (0o4100760, false));
        // chmod 0751: owner 7, mask 5, other 1; the group entry and the named user stay.
        let mut c = named.clone();
        chmod(&mut c, 0o751);
        let perms: Vec<u16> = c.entries.iter().map(|e| e.perm).collect();
        assert_eq!(perms, [7, 6, 4, 5, 1]);
        // Without a mask, chmod sets the group entry.
        let mut b = base.clone();
        chmod(&mut b, 0o705);
        assert_eq!(b.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [7, 0, 5]);
    }

    #[test]
    fn inheritance_from_default_acls() {
        let def = acl(&[
            (ACL_USER_OBJ, 7, U),
            (ACL_USER, 5, 65534),
            (ACL_GROUP_OBJ, 5, U),
            (ACL_MASK, 7, U),
            (ACL_OTHER, 5, U),
        ]);
        // A file created 0666: owner rw, mask rw, other r; the named entry keeps r-x (the
        // mask limits it when checked).
        let (a, mode, store) = inherit(&def, 0o100666);
        assert_eq!(mode, 0o100664);
        assert!(store);
        assert_eq!(a.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 5, 5, 6, 4]);
        // A trivial default ACL yields a mode only.
        let trivial = acl(&[(ACL_USER_OBJ, 7, U), (ACL_GROUP_OBJ, 0, U), (ACL_OTHER, 0, U)]);
        let (_, mode, store) = inherit(&trivial, 0o40777);
        assert_eq!((mode, store), (0o40700, false));
        // Set-id bits pass through.
        assert_eq!(inherit(&trivial, 0o102755).1, 0o102700);
    }

    #[test]
    fn namespaces() {
        assert_eq!(classify(b"user.a"), Ok(XattrNs::User(b"a")));
        assert_eq!(classify(b"trusted.x"), Ok(XattrNs::Trusted));
        assert_eq!(classify(b"security.selinux"), Ok(XattrNs::Security));
        assert_eq!(classify(b"system.posix_acl_access"), Ok(XattrNs::AclAccess));
        assert_eq!(classify(b"system.posix_acl_default"), Ok(XattrNs::AclDefault));
        assert_eq!(classify(b"system.posix_acl_accessx"), Err(95));
        assert_eq!(classify(b"system.nfs4_acl"), Err(95));
        assert_eq!(classify(b"plain"), Err(95));
        assert_eq!(classify(b"user."), Err(22));
        assert_eq!(classify(b"user.trusted.x"), Err(22));
        assert_eq!(classify(b"user.user.x"), Err(22));
        let l = |n: &[u8], t, p| listed_name(n, t, p);
        assert_eq!(l(b"user.a", AclType::Off, false), Some(b"user.a".to_vec()));
        assert_eq!(l(b"plain", AclType::Off, false), Some(b"user.plain".to_vec()));
        assert_eq!(l(b"system.posix_acl_access", AclType::Off, true), None);
        assert_eq!(l(b"system.posix_acl_access", AclType::Posix, false), Some(XATTR_ACCESS.to_vec()));
        assert_eq!(l(b"trusted.t", AclType::Off, false), None);
        assert_eq!(l(b"trusted.t", AclType::Off, true), Some(b"trusted.t".to_vec()));
        assert_eq!(l(b"freebsd:system:x", AclType::Off, true), None);
        assert_eq!(stored_names(b"user.k"), [&b"user.k"[..], &b"k"[..]]);
        assert_eq!(stored_names(b"security.k"), [&b"security.k"[..]]);
    }
}
