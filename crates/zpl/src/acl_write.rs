//! Extended attributes as Linux sees them, and POSIX ACLs, on the write side.
//!
//! The raw operations of [`ZplWriter`] (`setxattr`, `getxattr`, ...) store any name as
//! given. The `xattr_*` operations here put the rules of [`crate::acl`] on top, as OpenZFS's
//! Linux xattr handlers do (module/os/linux/zfs/zpl_xattr.c): namespaces, the `user.`
//! compatibility names, and, with acltype=posix, `system.posix_acl_access` /
//! `system.posix_acl_default` kept consistent with the mode. [`ZplWriter::setattr_acl`]
//! carries a chmod into the access ACL; [`ZplWriter::acl_for_new`] and
//! [`ZplWriter::acl_apply_new`] give a new file the mode and ACLs its directory's default
//! ACL prescribes.
//!
//! The kernel enforces the ACLs (FUSE_POSIX_ACL); who may change an ACL is checked here as
//! well (the owner or uid 0: `zpl_inode_owner_or_capable`), so the rule holds whatever the
//! kernel version.

use super::{
    err, Result, SetAttr, ZplWriteError, ZplWriter, EACCES, EEXIST, EINVAL, ENODATA, EOPNOTSUPP, EPERM,
};
use super::{XATTR_CREATE, XATTR_REPLACE};
use crate::acl::{self, AclType, PosixAcl, XattrNs};
use crate::attrs::{Attrs, FileType};
use dmu::tx::DirtyObjset;
use zap::write::ZapCache;

/// The mode and ACLs of a file about to be created ([`ZplWriter::acl_for_new`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewAcl {
    /// The mode to create the file with (file type bits kept).
    pub mode: u32,
    /// `system.posix_acl_access` to store, when the inherited ACL says more than the mode.
    pub access: Option<Vec<u8>>,
    /// `system.posix_acl_default` to store (new directories inherit the default ACL).
    pub default: Option<Vec<u8>>,
}

fn ns_err(errno: i32, name: &[u8]) -> ZplWriteError {
    ZplWriteError::Zpl(crate::ns_error(errno, name))
}

fn is_nodata(e: &ZplWriteError) -> bool {
    e.errno() == ENODATA
}

impl ZplWriter {
    /// A raw xattr value, or None when absent.
    fn raw_get(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        match self.getxattr(os, zaps, obj, name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if is_nodata(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes a raw xattr; true when there was one.
    fn raw_remove(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
        now: (u64, u64),
    ) -> Result<bool> {
        match self.removexattr(os, zaps, obj, name, now) {
            Ok(()) => Ok(true),
            Err(e) if is_nodata(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A stored POSIX ACL of `obj` (None: no ACL of that kind); damaged bytes are EIO.
    fn stored_acl(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
    ) -> Result<Option<PosixAcl>> {
        let Some(v) = self.raw_get(os, zaps, obj, name)? else {
            return Ok(None);
        };
        let damaged = |e: ondisk::Error| {
            ZplWriteError::Zpl(crate::ZplError::Corrupt {
                what: "POSIX ACL",
                detail: format!("object {obj}: {e}"),
            })
        };
        match PosixAcl::parse(&v).map_err(damaged)? {
            Some(a) => {
                a.validate().map_err(damaged)?;
                Ok(Some(a))
            }
            None => Ok(None),
        }
    }

    /// getxattr on a dataset with ACL type `acl` (ENODATA when absent).
    pub fn xattr_get(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
        acl: AclType,
    ) -> Result<Vec<u8>> {
        match acl::classify(name).map_err(|e| ns_err(e, name))? {
            XattrNs::AclAccess | XattrNs::AclDefault => {
                if acl != AclType::Posix {
                    return err(EOPNOTSUPP, "POSIX ACLs on a dataset without acltype=posix");
                }
                match self.stored_acl(os, zaps, obj, name)? {
                    Some(a) => Ok(a.encode()),
                    None => err(ENODATA, "no ACL"),
                }
            }
            _ => {
                for n in acl::stored_names(name) {
                    if let Some(v) = self.raw_get(os, zaps, obj, n)? {
                        return Ok(v);
                    }
                }
                err(ENODATA, format!("no xattr {}", String::from_utf8_lossy(name)))
            }
        }
    }

    /// listxattr on a dataset with ACL type `acl`; `privileged` callers see `trusted.` names.
    pub fn xattr_list(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        acl: AclType,
        privileged: bool,
    ) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        for n in self.listxattr(os, zaps, obj)? {
            if let Some(shown) = acl::listed_name(&n, acl, privileged) {
                if !out.contains(&shown) {
                    out.push(shown);
                }
            }
        }
        Ok(out)
    }

    /// The checks before an ACL of `obj` changes: acltype=posix, not a symlink, and the
    /// caller owns the file (or is uid 0).
    fn acl_change_allowed(&self, os: &DirtyObjset, obj: u64, acl: AclType, caller: u32) -> Result<Attrs> {
        if acl != AclType::Posix {
            return err(EOPNOTSUPP, "POSIX ACLs on a dataset without acltype=posix");
        }
        let a = self.getattr(os, obj)?;
        if a.kind() == FileType::Symlink {
            return err(EOPNOTSUPP, "symbolic links have no ACLs");
        }
        if caller != 0 && u64::from(caller) != a.uid {
            return err(EPERM, format!("only the owner may change the ACL of object {obj}"));
        }
        Ok(a)
    }

    /// setxattr on a dataset with ACL type `acl`, by user `caller`.
    #[allow(clippy::too_many_arguments)]
    pub fn xattr_set(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
        acl: AclType,
        caller: u32,
        now: (u64, u64),
    ) -> Result<()> {
        match acl::classify(name).map_err(|e| ns_err(e, name))? {
            ns @ (XattrNs::AclAccess | XattrNs::AclDefault) => {
                let a = self.acl_change_allowed(os, obj, acl, caller)?;
                let new = PosixAcl::parse(value)
                    .map_err(|e| ZplWriteError::new(EINVAL, e.to_string()))?
                    .map(|p| p.validate().map(|()| p))
                    .transpose()
                    .map_err(|e| ZplWriteError::new(EINVAL, e.to_string()))?;
                if ns == XattrNs::AclDefault {
                    if a.kind() != FileType::Directory {
                        return match new {
                            Some(_) => err(EACCES, "default ACLs exist only on directories"),
                            None => Ok(()),
                        };
                    }
                    return match new {
                        Some(p) => self.setxattr(os, zaps, obj, name, &p.encode(), 0, now),
                        None => self.raw_remove(os, zaps, obj, name, now).map(|_| ()),
                    };
                }
                let Some(p) = new else {
                    return self.raw_remove(os, zaps, obj, name, now).map(|_| ());
                };
                // The mode takes what the ACL grants; an ACL the mode says entirely is not
                // stored (`zpl_set_posix_acl` with `posix_acl_equiv_mode`).
                let (mode, exact) = acl::equiv_mode(&p, a.mode);
                if mode != a.mode {
                    let sa = SetAttr { mode: Some((mode & 0o7777) as u32), ..SetAttr::default() };
                    self.setattr(os, zaps, obj, sa, now)?;
                }
                if exact {
                    self.raw_remove(os, zaps, obj, name, now).map(|_| ())
                } else {
                    self.setxattr(os, zaps, obj, name, &p.encode(), 0, now)
                }
            }
            XattrNs::User(rest) => {
                // `user.X` may also be stored as plain `X`: that copy goes, and counts as
                // the existing value for the flags (`__zpl_xattr_user_set`).
                let mut flags = flags;
                if self.raw_get(os, zaps, obj, rest)?.is_some() {
                    if flags & XATTR_CREATE != 0 {
                        return err(EEXIST, format!("xattr {} exists", String::from_utf8_lossy(name)));
                    }
                    self.raw_remove(os, zaps, obj, rest, now)?;
                    flags &= !XATTR_REPLACE;
                }
                self.setxattr(os, zaps, obj, name, value, flags, now)
            }
            XattrNs::Trusted | XattrNs::Security => self.setxattr(os, zaps, obj, name, value, flags, now),
        }
    }

    /// removexattr on a dataset with ACL type `acl`, by user `caller`. Removing an ACL that
    /// is not there succeeds, as for any Linux file system.
    #[allow(clippy::too_many_arguments)]
    pub fn xattr_remove(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
        acl: AclType,
        caller: u32,
        now: (u64, u64),
    ) -> Result<()> {
        match acl::classify(name).map_err(|e| ns_err(e, name))? {
            XattrNs::AclAccess | XattrNs::AclDefault => {
                self.acl_change_allowed(os, obj, acl, caller)?;
                self.raw_remove(os, zaps, obj, name, now).map(|_| ())
            }
            XattrNs::User(rest) => {
                let a = self.raw_remove(os, zaps, obj, name, now)?;
                let b = self.raw_remove(os, zaps, obj, rest, now)?;
                if a || b {
                    Ok(())
                } else {
                    err(ENODATA, format!("no xattr {}", String::from_utf8_lossy(name)))
                }
            }
            XattrNs::Trusted | XattrNs::Security => self.removexattr(os, zaps, obj, name, now),
        }
    }

    /// [`ZplWriter::setattr`] that, with acltype=posix, also brings an access ACL in line
    /// with a new mode (`zpl_chmod_acl`). The ACL is read before anything changes, so a
    /// damaged one fails the chmod (EIO) instead of leaving the two out of step.
    pub fn setattr_acl(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        sa: SetAttr,
        acl: AclType,
        now: (u64, u64),
    ) -> Result<Attrs> {
        let mut access = None;
        if let (Some(_), AclType::Posix) = (sa.mode, acl) {
            if self.getattr(os, obj)?.kind() != FileType::Symlink {
                access = self.stored_acl(os, zaps, obj, acl::XATTR_ACCESS)?;
            }
        }
        let a = self.setattr(os, zaps, obj, sa, now)?;
        if let Some(mut p) = access {
            acl::chmod(&mut p, a.mode);
            self.setxattr(os, zaps, obj, acl::XATTR_ACCESS, &p.encode(), 0, now)?;
            return self.getattr(os, obj);
        }
        Ok(a)
    }

    /// The mode and ACLs of a file of `mode` (type bits included) about to be created in
    /// `dir`: with acltype=posix and a default ACL on `dir`, what that ACL prescribes (the
    /// umask is ignored); otherwise `mode` less the umask (`zpl_init_acl`).
    pub fn acl_for_new(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        mode: u32,
        umask: u32,
        acl: AclType,
    ) -> Result<NewAcl> {
        let masked = NewAcl { mode: mode & !(umask & 0o777), access: None, default: None };
        if acl != AclType::Posix {
            return Ok(masked);
        }
        let Some(def) = self.stored_acl(os, zaps, dir, acl::XATTR_DEFAULT)? else {
            return Ok(masked);
        };
        let (access, m, store) = acl::inherit(&def, u64::from(mode));
        let is_dir = u64::from(mode) & super::S_IFMT == super::S_IFDIR;
        Ok(NewAcl {
            mode: m as u32,
            access: store.then(|| access.encode()),
            default: is_dir.then(|| def.encode()),
        })
    }

    /// Stores the ACLs [`ZplWriter::acl_for_new`] chose on the new file `obj`.
    pub fn acl_apply_new(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        new: &NewAcl,
        now: (u64, u64),
    ) -> Result<()> {
        if let Some(d) = &new.default {
            self.setxattr(os, zaps, obj, acl::XATTR_DEFAULT, d, 0, now)?;
        }
        if let Some(a) = &new.access {
            self.setxattr(os, zaps, obj, acl::XATTR_ACCESS, a, 0, now)?;
        }
        Ok(())
    }
}
