//! # zpl — the POSIX view of a ZPL objset (read side)
//!
//! A ZPL objset (OpenZFS `module/zfs/zfs_znode.c`, `zfs_dir.c`, `zfs_sa.c`) has a *master
//! node* (object 1, a ZAP) naming the root directory (`ROOT`), the ZPL version (`VERSION`),
//! and, from ZPL version 5, the system-attribute tables (`SA_ATTRS`). Each file is a DMU
//! object whose bonus buffer holds its attributes: a `znode_phys_t` for ZPL < 5, or an SA
//! header + attributes laid out by a numbered layout (extra attributes spill into a spill
//! block). Directories are ZAPs whose values pack the object number (low 48 bits) and the
//! file type (top 4 bits). Extended attributes live in a hidden xattr directory
//! (`ZPL_XATTR`) or, with `xattr=sa`, in a packed nvlist attribute (`ZPL_DXATTR`).
//!
//! This crate knows nothing about FUSE; it answers lookups, attribute and data reads by
//! object number, and is what the FUSE adapter and `rzdb -r` both use.
#![forbid(unsafe_code)]

pub mod acl;
pub mod attrs;
mod legacy;
mod sa_write;
pub mod space;
pub mod write;
pub mod zvol;

use dmu::{Dnode, Objset};
use std::sync::Arc;

pub use attrs::{Attrs, FileType};

/// Errors of the ZPL.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ZplError {
    #[error(transparent)]
    Dmu(#[from] dmu::DmuError),
    #[error(transparent)]
    Zap(#[from] zap::ZapError),
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("not a directory: {0}")]
    NotDir(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
}

impl From<ondisk::Error> for ZplError {
    fn from(e: ondisk::Error) -> Self {
        ZplError::Corrupt { what: "ZPL structure", detail: e.to_string() }
    }
}

impl ZplError {
    /// The errno a POSIX caller should see.
    pub fn errno(&self) -> i32 {
        match self {
            ZplError::NotFound(_) => 2,     // ENOENT
            ZplError::NotDir(_) => 20,      // ENOTDIR
            ZplError::Unsupported(_) => 95, // EOPNOTSUPP
            ZplError::Invalid(_) => 22,     // EINVAL
            _ => 5,                         // EIO: checksum or structure damage
        }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ZplError>;

/// Why a directory entry's name cannot name a file on a host (a crafted ZAP can hold any
/// bytes), if it cannot: empty, `.`, `..`, or holding `/` or NUL. Copy-out and the FUSE
/// adapters skip such entries (the kernel itself refuses a `/` in a FUSE dirent and fails
/// the whole listing).
pub fn host_name_problem(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name")
    } else if name == b"." || name == b".." {
        Some("name is '.' or '..'")
    } else if name.contains(&b'/') {
        Some("name contains '/'")
    } else if name.contains(&0) {
        Some("name contains NUL")
    } else {
        None
    }
}

/// Longest symlink target read (`MAXPATHLEN`: OpenZFS refuses longer ones when creating).
pub const SYMLINK_MAX: u64 = 4096;

/// Largest extended-attribute value read from an xattr directory file. Linux caps values at
/// 64 KiB (`XATTR_SIZE_MAX`); other systems allow more, so leave room, but a size read from
/// disk must never become an allocation of whatever it claims.
pub const XATTR_MAX: u64 = 16 << 20;

/// Object number of the master node.
pub const MASTER_NODE_OBJ: u64 = 1;

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub object: u64,
    /// File type from the entry's top 4 bits (DT_* values: 4 dir, 8 reg, 10 lnk, ...).
    pub dtype: u8,
}

/// An open ZPL filesystem.
#[derive(Clone)]
pub struct Zpl {
    pub os: Objset,
    pub version: u64,
    pub root: u64,
    sa: Arc<Option<attrs::SaTables>>,
    /// How names match (`normalization`, `casesensitivity`; see `write::ZplProps`).
    names: write::ZplProps,
}

impl Zpl {
    /// Opens the ZPL on an objset of type ZFS.
    pub fn open(os: Objset) -> Result<Zpl> {
        if os.os_type() != ondisk::objset::DMU_OST_ZFS {
            return Err(ZplError::Unsupported(format!("objset type {} is not a filesystem", os.os_type())));
        }
        let version = zap::lookup_u64(&os, MASTER_NODE_OBJ, "VERSION")?.unwrap_or(1);
        let root = zap::lookup_u64(&os, MASTER_NODE_OBJ, "ROOT")?
            .ok_or_else(|| ZplError::Corrupt { what: "master node", detail: "no ROOT entry".into() })?;
        let sa = match zap::lookup_u64(&os, MASTER_NODE_OBJ, "SA_ATTRS")? {
            Some(obj) => Some(attrs::SaTables::load(&os, obj)?),
            None => None,
        };
        let names = write::ZplProps::read(&os)?;
        Ok(Zpl { os, version, root, sa: Arc::new(sa), names })
    }

    /// Attributes of object `obj`.
    pub fn getattr(&self, obj: u64) -> Result<Attrs> {
        let dn = self.dnode(obj)?;
        attrs::decode(&self.os, &dn, self.sa.as_ref().as_ref())
    }

    fn dnode(&self, obj: u64) -> Result<Dnode> {
        match self.os.dnode(obj) {
            Ok(d) => Ok(d),
            Err(dmu::DmuError::NoSuchObject(o)) => Err(ZplError::NotFound(format!("object {o}"))),
            Err(e) => Err(e.into()),
        }
    }

    /// Entries of directory `dir` (without `.` and `..`), in ZAP order.
    pub fn readdir(&self, dir: u64) -> Result<Vec<DirEntry>> {
        let a = self.getattr(dir)?;
        if a.kind() != FileType::Directory {
            return Err(ZplError::NotDir(format!("object {dir}")));
        }
        let mut out = Vec::new();
        for e in zap::list(&self.os, dir)? {
            let v = e.first_u64().ok_or_else(|| ZplError::Corrupt {
                what: "directory entry",
                detail: format!("{} has no value", e.name_string()),
            })?;
            out.push(DirEntry { name: e.name, object: v & ((1u64 << 48) - 1), dtype: (v >> 60) as u8 });
        }
        Ok(out)
    }

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<Option<DirEntry>> {
        if name == b"." {
            return Ok(Some(DirEntry { name: name.to_vec(), object: dir, dtype: 4 }));
        }
        if name == b".." {
            let p = self.getattr(dir)?.parent;
            return Ok(Some(DirEntry { name: name.to_vec(), object: p, dtype: 4 }));
        }
        // A directory of a normalizing file system finds every spelling of a name.
        let found = if self.names.dir_normflags() == 0 {
            zap::lookup_bytes(&self.os, dir, name)?
        } else {
            zap::lookup_normalized(&self.os, dir, name, self.names.casesensitivity == write::ZFS_CASE_MIXED)?
        };
        Ok(found.and_then(|e| {
            e.first_u64().map(|v| DirEntry {
                name: e.name,
                object: v & ((1u64 << 48) - 1),
                dtype: (v >> 60) as u8,
            })
        }))
    }

    /// Resolves an absolute path (symlinks are not followed).
    pub fn resolve(&self, path: &str) -> Result<u64> {
        let mut cur = self.root;
        for comp in path.split('/').filter(|c| !c.is_empty()) {
            match self.lookup(cur, comp.as_bytes())? {
                Some(e) => cur = e.object,
                None => return Err(ZplError::NotFound(path.to_string())),
            }
        }
        Ok(cur)
    }

    /// Reads up to `len` bytes at `offset` of a file (short at end of file).
    pub fn read(&self, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        // One dnode fetch serves both the size (from its attributes) and the data.
        let dn = self.dnode(obj)?;
        let a = attrs::decode(&self.os, &dn, self.sa.as_ref().as_ref())?;
        self.read_with(&dn, a.size, offset, len)
    }

    /// `lseek(SEEK_DATA)` (`data`) or `lseek(SEEK_HOLE)` from `offset` in file `obj`: the
    /// offset found, or None for ENXIO (at or past the end, or no data after `offset`).
    pub fn seek(&self, obj: u64, offset: u64, data: bool) -> Result<Option<u64>> {
        let dn = self.dnode(obj)?;
        let a = attrs::decode(&self.os, &dn, self.sa.as_ref().as_ref())?;
        seek_in(&self.os, &dn.phys, a.size, offset, data)
    }

    /// Reads with an already-fetched dnode and size (avoids re-decoding attributes per call).
    pub fn read_with(&self, dn: &Dnode, size: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset >= size {
            return Ok(Vec::new());
        }
        let n = (size - offset).min(len as u64) as usize;
        let mut buf = vec![0u8; n];
        self.os.read(dn, offset, &mut buf)?;
        Ok(buf)
    }

    /// The dnode of a file, for repeated reads.
    pub fn file_dnode(&self, obj: u64) -> Result<Dnode> {
        self.dnode(obj)
    }

    /// Target of a symbolic link.
    pub fn readlink(&self, obj: u64) -> Result<Vec<u8>> {
        let a = self.getattr(obj)?;
        if a.kind() != FileType::Symlink {
            return Err(ZplError::Unsupported(format!("object {obj} is not a symlink")));
        }
        if let Some(t) = a.symlink {
            return Ok(t);
        }
        // Long targets of pre-SA symlinks live in the object's data.
        if a.size > SYMLINK_MAX {
            return Err(ZplError::Corrupt {
                what: "symlink",
                detail: format!("object {obj}: target of {} bytes (at most {SYMLINK_MAX})", a.size),
            });
        }
        self.read(obj, 0, a.size as usize)
    }

    /// Names of extended attributes (SA xattrs first, then the xattr directory's).
    pub fn listxattr(&self, obj: u64) -> Result<Vec<Vec<u8>>> {
        let a = self.getattr(obj)?;
        let mut out: Vec<Vec<u8>> = attrs::sa_xattrs(&a)?.into_iter().map(|(k, _)| k).collect();
        if a.xattr_dir != 0 {
            for e in self.readdir(a.xattr_dir)? {
                if !out.contains(&e.name) {
                    out.push(e.name);
                }
            }
        }
        Ok(out)
    }

    /// Value of extended attribute `name`.
    pub fn getxattr(&self, obj: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        let a = self.getattr(obj)?;
        if let Some((_, v)) = attrs::sa_xattrs(&a)?.into_iter().find(|(k, _)| k == name) {
            return Ok(Some(v));
        }
        if a.xattr_dir != 0 {
            if let Some(e) = self.lookup(a.xattr_dir, name)? {
                let xa = self.getattr(e.object)?;
                if xa.size > XATTR_MAX {
                    return Err(ZplError::Corrupt {
                        what: "xattr",
                        detail: format!(
                            "object {}: value of {} bytes (at most {XATTR_MAX})",
                            e.object, xa.size
                        ),
                    });
                }
                return Ok(Some(self.read(e.object, 0, xa.size as usize)?));
            }
        }
        Ok(None)
    }

    /// Extended attribute `name` as Linux shows it on a dataset with ACL type `acl`
    /// (namespace rules and POSIX ACLs as in [`acl`]); `Ok(None)` when absent.
    pub fn xattr_get(&self, obj: u64, name: &[u8], acl: acl::AclType) -> Result<Option<Vec<u8>>> {
        match acl::classify(name) {
            Ok(acl::XattrNs::AclAccess | acl::XattrNs::AclDefault) => {
                if acl != acl::AclType::Posix {
                    return Err(ZplError::Unsupported(
                        "POSIX ACLs on a dataset without acltype=posix".into(),
                    ));
                }
                match self.getxattr(obj, name)? {
                    Some(v) => checked_acl(obj, &v),
                    None => Ok(None),
                }
            }
            Ok(_) => {
                for n in acl::stored_names(name) {
                    if let Some(v) = self.getxattr(obj, n)? {
                        return Ok(Some(v));
                    }
                }
                Ok(None)
            }
            Err(e) => Err(ns_error(e, name)),
        }
    }

    /// Names of the extended attributes of `obj` as Linux lists them (see [`acl::listed_name`]).
    pub fn xattr_list(&self, obj: u64, acl: acl::AclType, privileged: bool) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        for n in self.listxattr(obj)? {
            if let Some(shown) = acl::listed_name(&n, acl, privileged) {
                if !out.contains(&shown) {
                    out.push(shown);
                }
            }
        }
        Ok(out)
    }

    /// Best-effort path of an object, through parent pointers (for error reports).
    pub fn path_of(&self, obj: u64) -> Option<String> {
        let mut parts = Vec::new();
        let mut cur = obj;
        for _ in 0..256 {
            if cur == self.root {
                parts.reverse();
                return Some(format!("/{}", parts.join("/")));
            }
            let parent = self.getattr(cur).ok()?.parent;
            let name = self.readdir(parent).ok()?.into_iter().find(|e| e.object == cur)?.name;
            parts.push(String::from_utf8_lossy(&name).into_owned());
            cur = parent;
        }
        None
    }

    /// Walks the whole tree depth first, calling `f(path, entry)` for every entry below the
    /// root. A directory reached a second time (a corrupt cycle, or one directory under two
    /// names, which would make the walk exponential) is an error; see [`Zpl::walk_report`].
    pub fn walk(&self, f: &mut dyn FnMut(&str, &DirEntry) -> Result<()>) -> Result<()> {
        let skipped = self.walk_report(f)?;
        match skipped.into_iter().next() {
            Some((path, why)) => {
                Err(ZplError::Corrupt { what: "directory tree", detail: format!("{path}: {why}") })
            }
            None => Ok(()),
        }
    }

    /// Like [`Zpl::walk`], but a directory already visited (by object number) is passed to
    /// `f` and not descended into again, and returned as `(path, reason)`; so are
    /// directories deeper than 2048 levels. Every directory is listed at most once, so the
    /// work is linear in the entries stored.
    pub fn walk_report(
        &self,
        f: &mut dyn FnMut(&str, &DirEntry) -> Result<()>,
    ) -> Result<Vec<(String, String)>> {
        let mut seen = std::collections::HashMap::new();
        seen.insert(self.root, String::from("/"));
        let mut skipped = Vec::new();
        self.walk_dir(self.root, "", 0, &mut seen, &mut skipped, f)?;
        Ok(skipped)
    }

    fn walk_dir(
        &self,
        dir: u64,
        prefix: &str,
        depth: usize,
        seen: &mut std::collections::HashMap<u64, String>,
        skipped: &mut Vec<(String, String)>,
        f: &mut dyn FnMut(&str, &DirEntry) -> Result<()>,
    ) -> Result<()> {
        const MAX_DEPTH: usize = 2048;
        let mut entries = match self.readdir(dir) {
            Ok(e) => e,
            // A subdirectory that cannot be listed is reported; the root fails the walk.
            Err(e) if depth > 0 => {
                skipped.push((prefix.to_string(), format!("cannot list: {e}")));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            f(&path, &e)?;
            if e.dtype != 4 {
                continue;
            }
            if let Some(first) = seen.get(&e.object) {
                let why = format!(
                    "directory object {} already listed as {first} (loop or shared directory)",
                    e.object
                );
                skipped.push((path, why));
                continue;
            }
            if depth + 1 > MAX_DEPTH {
                skipped.push((path, format!("deeper than {MAX_DEPTH} levels")));
                continue;
            }
            seen.insert(e.object, path.clone());
            self.walk_dir(e.object, &path, depth + 1, seen, skipped, f)?;
        }
        Ok(())
    }
}

/// The error for a name [`acl::classify`] refuses.
pub(crate) fn ns_error(errno: i32, name: &[u8]) -> ZplError {
    let shown = String::from_utf8_lossy(name);
    if errno == 22 {
        ZplError::Invalid(format!("xattr name '{shown}'"))
    } else {
        ZplError::Unsupported(format!("xattr name '{shown}' is in no namespace this file system handles"))
    }
}

/// A stored POSIX ACL value, checked and re-encoded (`Ok(None)`: an empty ACL). Damaged
/// bytes are EIO: an ACL that cannot be read must not be guessed at.
pub(crate) fn checked_acl(obj: u64, v: &[u8]) -> Result<Option<Vec<u8>>> {
    let damaged =
        |e: ondisk::Error| ZplError::Corrupt { what: "POSIX ACL", detail: format!("object {obj}: {e}") };
    match ondisk::posix_acl::PosixAcl::parse(v).map_err(damaged)? {
        Some(a) => {
            a.validate().map_err(damaged)?;
            Ok(Some(a.encode()))
        }
        None => Ok(None),
    }
}

/// `lseek(SEEK_DATA/SEEK_HOLE)` over the committed blocks of a file of `size` bytes
/// (`zfs_holey_common`): the first data (or hole) at or after `offset`, in whole blocks;
/// the end of the file is a hole. None for ENXIO: `offset` at or past the end, or (for
/// data) nothing but holes after it.
pub fn seek_in(
    os: &Objset,
    dn: &ondisk::dnode::DnodePhys,
    size: u64,
    offset: u64,
    data: bool,
) -> Result<Option<u64>> {
    seek_with(dn.data_block_size(), size, offset, data, |blk| Ok(os.next_l0(dn, blk, data)?))
}

/// The answer of `lseek(SEEK_DATA/SEEK_HOLE)` from `offset` in a file of `size` bytes in
/// blocks of `block_size`, given `next(blk)`: the first data (or hole) block at or after
/// `blk` (None: no data left). Shared by the read-only view and the writer, which differ
/// only in how they find that block.
pub(crate) fn seek_with<E>(
    block_size: u64,
    size: u64,
    offset: u64,
    data: bool,
    next: impl FnOnce(u64) -> std::result::Result<Option<u64>, E>,
) -> std::result::Result<Option<u64>, E> {
    if offset >= size {
        return Ok(None);
    }
    let bs = block_size.max(512);
    let found = next(offset / bs)?;
    let at = |blk: u64| offset.max(blk.saturating_mul(bs));
    Ok(match (data, found) {
        (true, Some(b)) if at(b) < size => Some(at(b)),
        (true, _) => None,
        (false, Some(b)) => Some(at(b).min(size)),
        (false, None) => Some(size),
    })
}
