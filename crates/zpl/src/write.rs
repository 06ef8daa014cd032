//! # ZPL write layer: POSIX operations on the open txg's view of a ZPL objset
//!
//! Theory. [`ZplWriter`] turns POSIX operations into changes of a [`DirtyObjset`] (dnodes,
//! bonus buffers, data) and of ZAPs held in a [`ZapCache`]; the pool layer syncs both. It
//! writes what OpenZFS writes for the same operation, so that OpenZFS (zdb, a kernel mount)
//! reads the result:
//!
//! * a new filesystem is laid out as `zfs_create_fs` does (module/os/linux/zfs/
//!   zfs_znode_os.c): master node = object 1 (VERSION = 5, the zplprops normalization,
//!   utf8only and casesensitivity, SA_ATTRS, DELETE_QUEUE, ROOT), then the SA master node,
//!   the unlinked set, the root directory, and the SA REGISTRY and LAYOUTS ZAPs, which
//!   OpenZFS creates while writing the root's attributes: objects 2..=6 in that order;
//! * a znode is a 512-byte dnode (one block pointer, a 320-byte bonus of type SA) holding
//!   the attributes `zfs_mknode` writes, in its order: MODE SIZE GEN UID GID PARENT FLAGS
//!   ATIME MTIME CTIME CRTIME LINKS [RDEV for devices] DACL_COUNT DACL_ACES; attributes
//!   added later (SYMLINK, XATTR) are appended, as `sa_modify_attrs` appends them;
//! * directories are ZAPs whose values are `(IFTODT(mode) << 60) | object`
//!   (`zfs_dirent`); a directory's size is 2 + its entries and its link count 2 + its
//!   subdirectories (`zfs_mknode`, `zfs_link_create`, `zfs_link_destroy` in zfs_dir.c);
//! * an object whose last link goes while it is open is listed in the unlinked set (name
//!   = object in hex, value = object: `zap_add_int`) until [`ZplWriter::release_unlinked`];
//! * extended attributes live in a hidden directory named by the `ZPL_XATTR` attribute,
//!   one plain file per name (xattr=on / `zpl_xattr_set_dir`), so no spill block is needed;
//!   xattrs OpenZFS stored as SAs (xattr=sa, `ZPL_DXATTR`) are read, and a name changed or
//!   removed leaves the SA nvlist (a changed value moves to the directory, as OpenZFS moves
//!   an xattr that outgrows the SA). Linux namespaces and POSIX ACLs are in `acl_write.rs`.
//!
//! Generation numbers are the txg that creates the znode (`zfs_mknode` uses
//! `dmu_tx_get_txg`): set [`ZplWriter::txg`] when the txg changes. Uids and gids are stored
//! as given (FUIDs of ordinary POSIX ids are the ids). New znodes get the trivial NFSv4 ACL
//! of their mode (see `sa_write`); NFSv4 ACL inheritance is not applied. POSIX ACLs
//! (acltype=posix) are xattrs, inherited through [`ZplWriter::acl_for_new`].
//! Block sizes follow `zfs_write`/`zfs_extend`: while a file fits in one block, the block
//! grows to the file size rounded up to 512 bytes, capped by the recordsize; once the file
//! spans several blocks, its block size is fixed.

use crate::attrs::{Attrs, FileType};
use crate::sa_write::{self, acl_for_mode, apply_record, SaRecord, SaTables};
use crate::ZplError;
use dmu::tx::DirtyObjset;
use ondisk::dnode::DnodePhys;
use zap::write::{ZapCache, ZapVal};

// errno values (Linux).
pub const EPERM: i32 = 1;
pub const ENOENT: i32 = 2;
pub const EIO: i32 = 5;
pub const E2BIG: i32 = 7;
pub const EACCES: i32 = 13;
pub const EEXIST: i32 = 17;
pub const EXDEV: i32 = 18;
pub const ENOTDIR: i32 = 20;
pub const EISDIR: i32 = 21;
pub const EINVAL: i32 = 22;
pub const EFBIG: i32 = 27;
pub const ERANGE: i32 = 34;
pub const ENAMETOOLONG: i32 = 36;
pub const ENOSPC: i32 = 28;
pub const ENOTEMPTY: i32 = 39;
pub const EILSEQ: i32 = 84;
pub const ENODATA: i32 = 61;
pub const EOPNOTSUPP: i32 = 95;
pub const EDQUOT: i32 = 122;

/// `setxattr` flags (linux/xattr.h).
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;

/// Longest name of a directory entry (`ZAP_MAXNAMELEN` - 1).
pub const NAME_MAX: usize = 255;
/// Longest symlink target (`MAXPATHLEN`).
pub const PATH_MAX: usize = 4096;
/// Largest extended attribute value Linux accepts (`XATTR_SIZE_MAX`).
pub const XATTR_SIZE_MAX: usize = 65536;
/// Largest xattr value read back (values written elsewhere may exceed `XATTR_SIZE_MAX`).
const XATTR_READ_MAX: u64 = 16 << 20;
/// Largest file offset (`MAXOFFSET_T` on Linux).
const MAX_OFFSET: u64 = i64::MAX as u64;

/// The ZPL version written (`ZPL_VERSION_5`: system attributes).
pub const ZPL_VERSION: u64 = 5;
/// The first version with name-handling properties and FUIDs (`ZPL_VERSION_NORMALIZATION`).
const ZPL_VERSION_NORMALIZATION: u64 = 3;
/// The first version with system attributes (`ZPL_VERSION_SA`).
const ZPL_VERSION_SA: u64 = 5;

// DMU object types (include/sys/dmu.h) and ZPL constants.
const DMU_OT_PLAIN_FILE_CONTENTS: u8 = 19;
const DMU_OT_DIRECTORY_CONTENTS: u8 = 20;
const DMU_OT_MASTER_NODE: u8 = 21;
const DMU_OT_UNLINKED_SET: u8 = 22;
const DMU_OT_SA: u8 = 44;
const DMU_OT_SA_MASTER_NODE: u8 = 45;
const S_IFMT: u64 = 0o170000;
const S_IFDIR: u64 = 0o040000;
const S_IFREG: u64 = 0o100000;
const S_IFLNK: u64 = 0o120000;
const S_IFCHR: u64 = 0o020000;
const S_IFBLK: u64 = 0o060000;
const S_IFIFO: u64 = 0o010000;
const S_IFSOCK: u64 = 0o140000;
const S_ISGID: u64 = 0o2000;
const S_ISVTX: u64 = 0o1000;

/// Errors of the write layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ZplWriteError {
    /// A POSIX error: errno and what failed.
    #[error("{1} (errno {0})")]
    Errno(i32, String),
    #[error(transparent)]
    Zpl(#[from] ZplError),
}

impl ZplWriteError {
    pub(crate) fn new(errno: i32, what: impl Into<String>) -> ZplWriteError {
        ZplWriteError::Errno(errno, what.into())
    }

    /// The errno a POSIX caller should see.
    pub fn errno(&self) -> i32 {
        match self {
            ZplWriteError::Errno(e, _) => *e,
            ZplWriteError::Zpl(z) => z.errno(),
        }
    }
}

impl From<dmu::DmuError> for ZplWriteError {
    fn from(e: dmu::DmuError) -> Self {
        ZplWriteError::Zpl(e.into())
    }
}

impl From<zap::ZapError> for ZplWriteError {
    fn from(e: zap::ZapError) -> Self {
        ZplWriteError::Zpl(e.into())
    }
}

impl From<ondisk::Error> for ZplWriteError {
    fn from(e: ondisk::Error) -> Self {
        ZplWriteError::Zpl(e.into())
    }
}

/// Result alias of the write layer.
pub type Result<T> = std::result::Result<T, ZplWriteError>;

fn err<T>(errno: i32, what: impl Into<String>) -> Result<T> {
    Err(ZplWriteError::new(errno, what))
}

/// Attribute changes of [`ZplWriter::setattr`]; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (07777); the file type never changes.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<(u64, u64)>,
    pub mtime: Option<(u64, u64)>,
}

/// A znode loaded from the overlay: its dnode and its attributes.
struct Znode {
    obj: u64,
    dn: DnodePhys,
    rec: SaRecord,
    /// Some attributes live in a spill block (read-only here).
    spilled: bool,
    /// The znode is a `znode_phys_t` (ZPL < 5, or not yet upgraded): what it was read as.
    legacy: Option<crate::legacy::LegacyBonus>,
}

/// The write side of one ZPL filesystem.
pub struct ZplWriter {
    sa: SaTables,
    /// The file system's ZPL version (1–5). Below 5 there are no SA tables on disk (`sa`
    /// only numbers the attributes of the in-memory records) and znodes are written as
    /// `znode_phys_t` (see [`crate::legacy`]).
    version: u64,
    root: u64,
    unlinked: u64,
    /// How names are matched: the file system's creation-time properties.
    names: ZplProps,
    /// Generation number of the znodes created from now on: the open txg.
    pub txg: u64,
    /// Recordsize for size changes through `truncate`/`setattr` (`write` takes its own).
    pub recordsize: u64,
    /// The dataset's `copies`: new data of the open txg will take that many times its size,
    /// and `stat` counts it so (see [`ZplWriter::getattr`]).
    pub copies: u8,
}

/// `casesensitivity` values (`ZFS_CASE_*`, include/sys/fs/zfs.h).
pub const ZFS_CASE_SENSITIVE: u64 = 0;
pub const ZFS_CASE_INSENSITIVE: u64 = 1;
pub const ZFS_CASE_MIXED: u64 = 2;

/// The properties a file system gets at creation and keeps in its master node, which decide
/// how directory names match (`zfs_fill_zplprops`, `zfsvfs_init`).
///
/// * `normalization` (0 or a `U8_TEXTPREP_NF*` form): names that differ only in their
///   Unicode composition are the same name;
/// * `casesensitivity`: `insensitive` makes names that differ only in case the same name;
///   `mixed` hashes them alike but matches case on lookup (OpenZFS folds case there only
///   for SMB's case-insensitive requests, which Linux never makes);
/// * `utf8only`: names must be valid UTF-8 (EILSEQ otherwise); on whenever normalizing.
///
/// Directories of such a file system are ZAPs with `normflags` = the form, plus
/// `U8_TEXTPREP_TOUPPER` unless case-sensitive: names hash by their normalized form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZplProps {
    pub normalization: u64,
    pub utf8only: bool,
    pub casesensitivity: u64,
}

impl ZplProps {
    /// The `normflags` of the file system's directories (`zfsvfs->z_norm`).
    pub fn dir_normflags(&self) -> u64 {
        let fold =
            if self.casesensitivity == ZFS_CASE_SENSITIVE { 0 } else { zap::write::U8_TEXTPREP_TOUPPER };
        self.normalization | fold
    }

    /// Checks the values are ones OpenZFS defines (a hostile or newer master node may hold
    /// others).
    pub fn check_known(&self) -> std::result::Result<(), String> {
        if !matches!(self.normalization, 0 | 0x10 | 0x20 | 0x50 | 0x60) {
            return Err(format!("unknown normalization {:#x}", self.normalization));
        }
        if self.casesensitivity > ZFS_CASE_MIXED {
            return Err(format!("unknown casesensitivity {}", self.casesensitivity));
        }
        Ok(())
    }

    /// Checks the combination for a new file system: known values; normalizing needs
    /// utf8only.
    pub fn validate(&self) -> std::result::Result<(), String> {
        self.check_known()?;
        if self.normalization != 0 && !self.utf8only {
            return Err("'utf8only' must be set 'on' if normalization chosen".into());
        }
        Ok(())
    }

    /// The properties a committed file system's master node records (absent entries are
    /// the defaults: an old ZPL version had none of them).
    pub fn read(os: &dmu::Objset) -> std::result::Result<ZplProps, zap::ZapError> {
        let get = |k: &str| zap::lookup_u64(os, crate::MASTER_NODE_OBJ, k).map(|v| v.unwrap_or(0));
        Ok(ZplProps {
            normalization: get("normalization")?,
            utf8only: get("utf8only")? != 0,
            casesensitivity: get("casesensitivity")?,
        })
    }
}

/// Directory-entry type of a mode (`IFTODT`).
fn dtype(mode: u64) -> u64 {
    (mode & S_IFMT) >> 12
}

fn kind_of_dtype(t: u64) -> Option<FileType> {
    Some(match t {
        1 => FileType::Fifo,
        2 => FileType::CharDevice,
        4 => FileType::Directory,
        6 => FileType::BlockDevice,
        8 => FileType::Regular,
        10 => FileType::Symlink,
        12 => FileType::Socket,
        _ => return None,
    })
}

/// Checks a name for a new or looked-up directory entry.
fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return err(ENOENT, "empty name");
    }
    if name.len() > NAME_MAX {
        return err(ENAMETOOLONG, format!("name of {} bytes", name.len()));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return err(EINVAL, format!("name {:?} contains '/' or NUL", String::from_utf8_lossy(name)));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Unlinked-set entry name: the object number in hex (`zap_add_int`).
fn hex_name(obj: u64) -> Vec<u8> {
    format!("{obj:x}").into_bytes()
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The ZPL generation of a file (`ZPL_GEN`: the txg that created it) from a bonus buffer
/// of `bonus_type` in objset `os` (an SA record decoded with the objset's own tables, or a
/// legacy `znode_phys_t`); None for other bonus types or an SA record without it. A
/// receive asks this to tell a file whose block size grew (`send -L` after a stream
/// without it) from another file that reused the object number
/// (`receive_object_is_same_generation`).
pub fn bonus_generation(os: &DirtyObjset, bonus_type: u8, bonus: &[u8]) -> Result<Option<u64>> {
    match bonus_type {
        DMU_OT_SA => {
            let mut zaps = ZapCache::new();
            let Some(master) = zaps.lookup_u64(os, crate::MASTER_NODE_OBJ, "SA_ATTRS")? else {
                return Ok(None);
            };
            let t = SaTables::load(os, &mut zaps, master)?;
            let rec = t.decode(bonus)?;
            Ok(rec.get(t.nums.gen).map(|_| rec.u64(t.nums.gen)))
        }
        17 => Ok(Some(ondisk::znode::ZnodePhys::parse(bonus, ondisk::ByteOrder::Little)?.gen)),
        _ => Ok(None),
    }
}

impl ZplWriter {
    /// Creates a new ZPL version 5 filesystem in an empty objset, as `zfs_create_fs` does,
    /// with the default name handling.
    pub fn create_fs(
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        now: (u64, u64),
        uid: u32,
        gid: u32,
    ) -> Result<ZplWriter> {
        Self::create_fs_with(os, zaps, now, uid, gid, ZplProps::default())
    }

    /// [`ZplWriter::create_fs`] with the given creation-time properties.
    pub fn create_fs_with(
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        now: (u64, u64),
        uid: u32,
        gid: u32,
        names: ZplProps,
    ) -> Result<ZplWriter> {
        Self::create_fs_version(os, zaps, now, uid, gid, names, ZPL_VERSION)
    }

    /// [`ZplWriter::create_fs_with`] at ZPL `version` (1–5; `zfs create -o version=`).
    /// Versions before 3 know no name-handling properties (`zfs_fill_zplprops`).
    pub fn create_fs_version(
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        now: (u64, u64),
        uid: u32,
        gid: u32,
        names: ZplProps,
        version: u64,
    ) -> Result<ZplWriter> {
        names.validate().map_err(|e| ZplWriteError::Errno(EINVAL, e))?;
        if !(1..=ZPL_VERSION).contains(&version) {
            return err(EINVAL, format!("ZPL version {version} (1 to {ZPL_VERSION} exist)"));
        }
        if version < ZPL_VERSION_NORMALIZATION && names != ZplProps::default() {
            return err(
                EOPNOTSUPP,
                format!(
                    "a version-{version} file system cannot have normalization, utf8only or casesensitivity"
                ),
            );
        }
        let master = crate::MASTER_NODE_OBJ;
        zaps.create_claim(os, master, DMU_OT_MASTER_NODE)?;
        let values = [
            ("normalization", names.normalization),
            ("utf8only", u64::from(names.utf8only)),
            ("casesensitivity", names.casesensitivity),
        ];
        for (prop, v) in values {
            zaps.update_u64(os, master, prop, v)?;
        }
        zaps.update_u64(os, master, "VERSION", version)?;
        let sa_master = if version >= ZPL_VERSION_SA {
            let sa_master = zaps.create(os, DMU_OT_SA_MASTER_NODE, 0, Vec::new())?;
            zaps.update_u64(os, master, "SA_ATTRS", sa_master)?;
            sa_master
        } else {
            0
        };
        let unlinked = zaps.create(os, DMU_OT_UNLINKED_SET, 0, Vec::new())?;
        zaps.update_u64(os, master, "DELETE_QUEUE", unlinked)?;
        let mut w = ZplWriter {
            sa: SaTables::new(sa_master)?,
            version,
            root: 0,
            unlinked,
            names,
            txg: 1,
            recordsize: 128 << 10,
            copies: 1,
        };
        let root = w.alloc_znode(os, zaps, true)?;
        // The root is its own parent (`IS_ROOT_NODE` in zfs_mknode).
        let rec = w.new_record(root, 0, S_IFDIR | 0o755, u64::from(uid), u64::from(gid), 0, now, false);
        w.store_rec(os, zaps, root, &rec, None)?;
        zaps.update_u64(os, master, "ROOT", root)?;
        w.root = root;
        Ok(w)
    }

    /// Opens the ZPL of an existing objset for writing.
    pub fn open(os: &DirtyObjset, zaps: &mut ZapCache) -> Result<ZplWriter> {
        if os.phys.os_type != ondisk::objset::DMU_OST_ZFS {
            return err(EINVAL, format!("objset type {} is not a filesystem", os.phys.os_type));
        }
        let master = crate::MASTER_NODE_OBJ;
        let get = |zaps: &mut ZapCache, name: &str| zaps.lookup_u64(os, master, name);
        let version = get(zaps, "VERSION")?.unwrap_or(1);
        if !(1..=ZPL_VERSION).contains(&version) {
            return err(
                EOPNOTSUPP,
                format!("ZPL version {version} (rzfs writes versions 1 to {ZPL_VERSION})"),
            );
        }
        let names = ZplProps {
            normalization: get(zaps, "normalization")?.unwrap_or(0),
            utf8only: get(zaps, "utf8only")?.unwrap_or(0) != 0,
            casesensitivity: get(zaps, "casesensitivity")?.unwrap_or(0),
        };
        names.check_known().map_err(|e| ZplWriteError::Errno(EOPNOTSUPP, e))?;
        let missing = |what: &str| {
            ZplWriteError::Zpl(ZplError::Corrupt { what: "master node", detail: format!("no {what}") })
        };
        let root = get(zaps, "ROOT")?.ok_or_else(|| missing("ROOT"))?;
        let unlinked = get(zaps, "DELETE_QUEUE")?.ok_or_else(|| missing("DELETE_QUEUE"))?;
        let sa = if version >= ZPL_VERSION_SA {
            let sa_master = get(zaps, "SA_ATTRS")?.ok_or_else(|| missing("SA_ATTRS"))?;
            SaTables::load(os, zaps, sa_master)?
        } else {
            SaTables::new(0)?
        };
        Ok(ZplWriter { sa, version, root, unlinked, names, txg: 1, recordsize: 128 << 10, copies: 1 })
    }

    /// The file system's ZPL version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// `zfs upgrade` (`zfs_set_version`): raises the version in the master node; reaching
    /// version 5 creates the SA master node. Existing znodes keep their form until they
    /// change (then they are written as system attributes, as `zfs_sa_upgrade` does).
    /// A lower version is refused (EINVAL).
    pub fn upgrade(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache, to: u64) -> Result<()> {
        if to < self.version || to > ZPL_VERSION {
            return err(EINVAL, format!("cannot change ZPL version {} to {to}", self.version));
        }
        let master = crate::MASTER_NODE_OBJ;
        if to >= ZPL_VERSION_SA && self.version < ZPL_VERSION_SA {
            let sa_master = zaps.create(os, DMU_OT_SA_MASTER_NODE, 0, Vec::new())?;
            zaps.update_u64(os, master, "SA_ATTRS", sa_master)?;
            self.sa = SaTables::new(sa_master)?;
        }
        zaps.update_u64(os, master, "VERSION", to)?;
        self.version = to;
        Ok(())
    }

    /// Object number of the root directory.
    /// The file system's name handling (`normalization`, `utf8only`, `casesensitivity`).
    pub fn names(&self) -> ZplProps {
        self.names
    }

    pub fn root(&self) -> u64 {
        self.root
    }

    /// Object number of the unlinked set (delete queue).
    pub fn unlinked_set(&self) -> u64 {
        self.unlinked
    }

    // ----- znodes -------------------------------------------------------------------------

    fn load(&self, os: &DirtyObjset, obj: u64) -> Result<Znode> {
        let Some(dn) = os.dnode(obj)? else {
            return err(ENOENT, format!("object {obj} does not exist"));
        };
        if dn.bonustype == crate::legacy::DMU_OT_ZNODE {
            let order = os.committed().map_or(ondisk::ByteOrder::Little, |b| b.dnode_byte_order());
            let read = |o: u64, len: usize| -> Result<Vec<u8>> {
                if len > 1 << 20 {
                    return err(EIO, format!("object {obj}: an ACL or symlink of {len} bytes"));
                }
                let mut buf = vec![0u8; len];
                os.read(o, 0, &mut buf)?;
                Ok(buf)
            };
            let (rec, legacy) =
                crate::legacy::decode(&self.sa.nums, &dn.bonus, order, read, |len| read(obj, len))?;
            return Ok(Znode { obj, dn, rec, spilled: false, legacy: Some(legacy) });
        }
        if dn.bonustype != DMU_OT_SA {
            return err(EIO, format!("object {obj} has bonus type {}, not SA", dn.bonustype));
        }
        let mut rec = self.sa.decode(&dn.bonus)?;
        let mut spilled = false;
        if dn.spill.as_ref().is_some_and(|bp| !bp.is_hole()) {
            if let Some(base) = os.committed() {
                if let Some(block) = base.read_spill(&dn)? {
                    let srec = self.sa.decode(&block)?;
                    rec.attrs.extend(srec.attrs);
                    spilled = true;
                }
            }
        }
        Ok(Znode { obj, dn, rec, spilled, legacy: None })
    }

    fn store(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache, z: &Znode) -> Result<()> {
        if z.spilled {
            return err(
                EOPNOTSUPP,
                format!("object {}: attributes in a spill block cannot be rewritten", z.obj),
            );
        }
        self.store_rec(os, zaps, z.obj, &z.rec, z.legacy.as_ref())
    }

    /// Writes a znode's record in the form the file system's version asks: a
    /// `znode_phys_t` below version 5; system attributes from 5 on, an old znode converted
    /// then (`zfs_sa_upgrade`) unless its attributes do not fit the bonus as SA, when it
    /// stays a `znode_phys_t`. `old` is what the znode was read as.
    fn store_rec(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        rec: &SaRecord,
        old: Option<&crate::legacy::LegacyBonus>,
    ) -> Result<()> {
        let legacy_form = if self.version < ZPL_VERSION_SA {
            true
        } else if old.is_some() {
            let dn = os.dnode(obj)?.ok_or(dmu::DmuError::NoSuchObject(obj))?;
            self.sa.encoded_len(rec)? > sa_write::bonus_room(&dn)
        } else {
            false
        };
        if !legacy_form {
            if let Some(o) = old {
                os.dirty(obj)?.phys.bonustype = DMU_OT_SA;
                if o.extern_obj != 0 {
                    os.free_object(o.extern_obj)?;
                }
            }
            return self.sa.store(os, zaps, obj, rec);
        }
        let dn = os.dnode(obj)?.ok_or(dmu::DmuError::NoSuchObject(obj))?;
        let room = sa_write::bonus_room(&dn);
        let (bonus, place) = crate::legacy::encode(&self.sa.nums, rec, old, self.version, room)?;
        if old.is_some_and(|o| o.extern_obj != 0 && bonus[176..184] == [0u8; 8]) {
            // The ACL moved into the znode: its external object goes.
            if let Some(o) = old {
                os.free_object(o.extern_obj)?;
            }
        }
        os.dirty(obj)?.phys.bonustype = crate::legacy::DMU_OT_ZNODE;
        os.set_bonus(obj, bonus)?;
        if let crate::legacy::SymlinkPlace::DataBlock(target) = place {
            let bs = os.dnode(obj)?.map_or(512, |d| d.data_block_size());
            let want = (target.len() as u64).div_ceil(512) * 512;
            if want > bs {
                os.set_block_size(obj, want)?;
            }
            os.write(obj, 0, &target)?;
        }
        Ok(())
    }

    fn mode(&self, z: &Znode) -> u64 {
        z.rec.u64(self.sa.nums.mode)
    }

    fn size(&self, z: &Znode) -> u64 {
        z.rec.u64(self.sa.nums.size)
    }

    fn links(&self, z: &Znode) -> u64 {
        z.rec.u64(self.sa.nums.links)
    }

    fn touch(&self, z: &mut Znode, now: (u64, u64), mtime: bool) {
        let n = self.sa.nums;
        z.rec.set_time(n.ctime, now);
        if mtime {
            z.rec.set_time(n.mtime, now);
        }
    }

    /// A new, empty znode object: a directory ZAP or a plain file.
    fn alloc_znode(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache, dir: bool) -> Result<u64> {
        // OpenZFS reserves the whole bonus (`DN_BONUS_SIZE`), so the dnode keeps a single
        // block pointer; the SA code then shrinks the bonus to what the record uses.
        // The dnode takes the objset's `dnodesize` (`zfs_mknode`, `dmu_objset_dnodesize`).
        let slots = os.dnode_slots();
        let (bonus_type, bonus) = if self.version < ZPL_VERSION_SA {
            // `zfs_mknode` without SA: the bonus is a `znode_phys_t`.
            (crate::legacy::DMU_OT_ZNODE, vec![0u8; ondisk::znode::ZNODE_PHYS_SIZE])
        } else {
            (DMU_OT_SA, vec![0u8; dmu::tx::bonus_len_for_slots(usize::from(slots))])
        };
        let obj = if dir {
            let norm = self.names.dir_normflags();
            zaps.create_dnsize_norm(os, DMU_OT_DIRECTORY_CONTENTS, bonus_type, bonus, slots, norm)?
        } else {
            os.alloc_object_dnsize(DMU_OT_PLAIN_FILE_CONTENTS, 512, bonus_type, bonus, slots)?
        };
        Ok(obj)
    }

    /// The attributes `zfs_mknode` gives a new znode, in its order.
    #[allow(clippy::too_many_arguments)]
    fn new_record(
        &self,
        parent: u64,
        parent_flags: u64,
        mode: u64,
        uid: u64,
        gid: u64,
        rdev: u64,
        now: (u64, u64),
        xattr: bool,
    ) -> SaRecord {
        let n = self.sa.nums;
        let isdir = mode & S_IFMT == S_IFDIR;
        let mut pflags = sa_write::ZFS_ARCHIVE | sa_write::ZFS_AV_MODIFIED;
        if xattr || parent_flags & sa_write::ZFS_XATTR != 0 {
            pflags |= sa_write::ZFS_XATTR;
        }
        let (count, aces, mode, flags) = acl_for_mode(mode, isdir, pflags, true);
        let mut r = SaRecord::new();
        r.set_u64(n.mode, mode);
        r.set_u64(n.size, if isdir { 2 } else { 0 });
        r.set_u64(n.gen, self.txg);
        r.set_u64(n.uid, uid);
        r.set_u64(n.gid, gid);
        r.set_u64(n.parent, parent);
        r.set_u64(n.flags, flags);
        for t in [n.atime, n.mtime, n.ctime, n.crtime] {
            r.set_time(t, now);
        }
        r.set_u64(n.links, if isdir { 2 } else { 1 });
        if matches!(mode & S_IFMT, S_IFCHR | S_IFBLK) {
            r.set_u64(n.rdev, rdev);
        }
        r.set_u64(n.dacl_count, count);
        r.set(n.dacl_aces, aces);
        r
    }

    /// Creates a znode under `parent` (not yet linked) and returns it.
    #[allow(clippy::too_many_arguments)]
    fn mknode(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        parent: &Znode,
        mode: u64,
        uid: u64,
        gid: u64,
        rdev: u64,
        now: (u64, u64),
        extra: Option<(u16, Vec<u8>)>,
    ) -> Result<u64> {
        let pflags = parent.rec.u64(self.sa.nums.flags);
        // A directory whose NFSv4 ACL has inheritable entries (set on FreeBSD or illumos)
        // would give a new entry those entries (`zfs_acl_inherit`); rzfs cannot apply them
        // yet, and a file created with an ACL from its mode alone could grant what they deny.
        if pflags & sa_write::ZFS_INHERIT_ACE != 0 {
            return err(
                EACCES,
                "the directory's NFSv4 ACL has inheritable entries, which rzfs cannot apply yet".to_string(),
            );
        }
        let mut rec = self.new_record(parent.obj, pflags, mode, uid, gid, rdev, now, false);
        if let Some((num, bytes)) = extra {
            rec.set(num, bytes);
        }
        let need = if self.version < ZPL_VERSION_SA { 0 } else { self.sa.encoded_len(&rec)? };
        if need > dmu::tx::bonus_len_for_slots(usize::from(os.dnode_slots())) {
            return err(
                ENAMETOOLONG,
                format!("{need} bytes of attributes do not fit the bonus (no spill support)"),
            );
        }
        // A new object counts against its owners' byte and object quotas
        // (`zfs_acl_ids_overquota`); its project is its parent's.
        if crate::space::owners_over_quota(os, zaps, uid, gid, self.projid(parent), true)? {
            return err(EDQUOT, format!("quota of user {uid}, group {gid} or their project reached"));
        }
        let obj = self.alloc_znode(os, zaps, mode & S_IFMT == S_IFDIR)?;
        self.store_rec(os, zaps, obj, &rec, None)?;
        Ok(obj)
    }

    /// The project of a znode: its `ZPL_PROJID` when its flags have `ZFS_PROJID` (files
    /// OpenZFS gave one), else 0 (`ZFS_DEFAULT_PROJID`).
    fn projid(&self, z: &Znode) -> u64 {
        if z.rec.u64(self.sa.nums.flags) & ondisk::znode::ZFS_PROJID == 0 {
            return 0;
        }
        self.sa.registry.zpl(ondisk::sa::ZplAttr::Projid).map_or(0, |n| z.rec.u64(n))
    }

    /// Frees a znode whose last link went, with its xattr directory.
    fn destroy(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache, z: &Znode) -> Result<()> {
        let xdir = z.rec.u64(self.sa.nums.xattr);
        if xdir != 0 && os.dnode(xdir)?.is_some() {
            for (_, v) in zaps.entries(os, xdir)? {
                let child = v.values.first().copied().unwrap_or(0) & ((1 << 48) - 1);
                if let Some(cdn) = os.dnode(child)? {
                    if cdn.object_type == DMU_OT_DIRECTORY_CONTENTS {
                        zaps.destroy(os, child)?;
                    } else {
                        os.free_object(child)?;
                    }
                }
            }
            zaps.destroy(os, xdir)?;
        }
        if let Some(ext) = z.legacy.as_ref().map(|l| l.extern_obj).filter(|&o| o != 0) {
            // An old znode's ACL kept outside it (`z_acl_extern_obj`) goes with it.
            os.free_object(ext)?;
        }
        if self.mode(z) & S_IFMT == S_IFDIR {
            zaps.destroy(os, z.obj)?;
        } else if let Err(e) = os.free_object(z.obj) {
            // An indirect block of the file cannot be read (damaged beyond its copies): the
            // free would fail the sync. The object stays in the unlinked set with its
            // space, as zfs_rmnode leaves it when dmu_free_long_range fails; the next
            // drain (a mount) tries again. The name is gone all the same.
            if matches!(e, dmu::DmuError::NoSuchObject(_)) {
                return Err(e.into());
            }
            self.store(os, zaps, z)?;
            zaps.update(os, self.unlinked, &hex_name(z.obj), ZapVal::u64(z.obj))?;
        }
        Ok(())
    }

    /// Drops one link of `z` (all of them for a directory). At zero links the znode goes to
    /// the unlinked set (`keep`) or is freed. True when the last link went.
    fn drop_link(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        mut z: Znode,
        keep: bool,
        now: (u64, u64),
    ) -> Result<bool> {
        let isdir = self.mode(&z) & S_IFMT == S_IFDIR;
        let links = if isdir { 0 } else { self.links(&z).saturating_sub(1) };
        z.rec.set_u64(self.sa.nums.links, links);
        if links > 0 {
            self.touch(&mut z, now, false);
            self.store(os, zaps, &z)?;
            return Ok(false);
        }
        if keep {
            self.store(os, zaps, &z)?;
            zaps.update(os, self.unlinked, &hex_name(z.obj), ZapVal::u64(z.obj))?;
        } else {
            self.destroy(os, zaps, &z)?;
        }
        Ok(true)
    }

    // ----- directories --------------------------------------------------------------------

    fn load_dir(&self, os: &DirtyObjset, dir: u64) -> Result<Znode> {
        let z = self.load(os, dir)?;
        if self.mode(&z) & S_IFMT != S_IFDIR {
            return err(ENOTDIR, format!("object {dir} is not a directory"));
        }
        Ok(z)
    }

    /// The object named `name` in `dir` (no `.`/`..`).
    fn entry(&self, os: &DirtyObjset, zaps: &mut ZapCache, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self.entry_named(os, zaps, dir, name)?.map(|(obj, _)| obj))
    }

    /// The object `name` leads to in `dir` and the name it is stored under, which differs
    /// from `name` when the file system matches names by their normalized form (see
    /// [`ZplProps`]; `zfs_dirent_lock`'s `MT_NORMALIZE`, with `MT_MATCH_CASE` when mixed).
    fn entry_named(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
    ) -> Result<Option<(u64, Vec<u8>)>> {
        let match_case = self.names.casesensitivity == ZFS_CASE_MIXED;
        let Some(stored) = zaps.lookup_norm(os, dir, name, match_case)? else {
            return Ok(None);
        };
        let v = zaps.lookup(os, dir, &stored)?.and_then(|v| v.values.first().copied());
        Ok(v.map(|v| (v & ((1 << 48) - 1), stored)))
    }

    /// Refuses a name the file system cannot take as a new entry of `dir`: not UTF-8 where
    /// `utf8only` is on (EILSEQ, as `zfs_create`'s `u8_validate`), or one more spelling of a
    /// name whose spellings no longer fit the directory's hash bucket (ENOSPC).
    fn check_new_name(&self, os: &DirtyObjset, zaps: &mut ZapCache, dir: u64, name: &[u8]) -> Result<()> {
        if self.names.utf8only && std::str::from_utf8(name).is_err() {
            return err(EILSEQ, format!("{} is not valid UTF-8 (utf8only=on)", show(name)));
        }
        if !zaps.can_add(os, dir, name, 8)? {
            return err(ENOSPC, format!("too many names of the same normalized form as {}", show(name)));
        }
        Ok(())
    }

    /// Adds `name` → `obj` to directory `d` (`zfs_link_create`'s directory side).
    #[allow(clippy::too_many_arguments)]
    fn add_entry(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        d: &mut Znode,
        name: &[u8],
        obj: u64,
        mode: u64,
        now: (u64, u64),
    ) -> Result<()> {
        // The type bits came with ZPL version 2 (`ZPL_VERSION_DIRENT_TYPE`, `zfs_dirent`).
        let value = if self.version >= 2 { (dtype(mode) << 60) | obj } else { obj };
        zaps.update(os, d.obj, name, ZapVal::u64(value))?;
        let n = self.sa.nums;
        d.rec.set_u64(n.size, self.size(d) + 1);
        if mode & S_IFMT == S_IFDIR {
            d.rec.set_u64(n.links, self.links(d) + 1);
        }
        self.touch(d, now, true);
        self.store(os, zaps, d)
    }

    /// Removes `name` from directory `d` (`zfs_link_destroy`'s directory side).
    fn remove_entry(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        d: &mut Znode,
        name: &[u8],
        isdir: bool,
        now: (u64, u64),
    ) -> Result<()> {
        zaps.remove(os, d.obj, name)?;
        let n = self.sa.nums;
        d.rec.set_u64(n.size, self.size(d).saturating_sub(1));
        if isdir {
            d.rec.set_u64(n.links, self.links(d).saturating_sub(1));
        }
        self.touch(d, now, true);
        self.store(os, zaps, d)
    }

    /// Attributes of `obj`. `st_blocks` counts the new data of the open txg as it will be
    /// allocated, once per copy: the kernel may keep the answer after the sync (FUSE caches
    /// attributes), and `du` on a `copies=2` file system must read twice the data then.
    pub fn getattr(&self, os: &DirtyObjset, obj: u64) -> Result<Attrs> {
        let z = self.load(os, obj)?;
        let pending = os.pending_bytes(obj).saturating_mul(u64::from(self.copies.clamp(1, 3)));
        let mut a = Attrs {
            object: obj,
            used_bytes: z.dn.used_bytes().saturating_add(pending),
            dnode_slots: z.dn.slots() as u64,
            blksize: z.dn.data_block_size(),
            ..Default::default()
        };
        apply_record(&self.sa, &z.rec, &mut a)?;
        Ok(a)
    }

    /// Looks `name` up in `dir` (`.` and `..` included).
    pub fn lookup(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
    ) -> Result<Option<u64>> {
        let d = self.load_dir(os, dir)?;
        if name == b"." {
            return Ok(Some(dir));
        }
        if name == b".." {
            return Ok(Some(d.rec.u64(self.sa.nums.parent)));
        }
        check_name(name)?;
        self.entry(os, zaps, dir, name)
    }

    /// Entries of `dir` (without `.` and `..`), sorted by name.
    pub fn readdir(
        &self,
        os: &DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
    ) -> Result<Vec<(Vec<u8>, u64, FileType)>> {
        self.load_dir(os, dir)?;
        let mut out = Vec::new();
        for (name, v) in zaps.entries(os, dir)? {
            let raw = v.values.first().copied().unwrap_or(0);
            let obj = raw & ((1 << 48) - 1);
            let kind = match kind_of_dtype(raw >> 60) {
                Some(k) => k,
                None => self.getattr(os, obj)?.kind(),
            };
            out.push((name, obj, kind));
        }
        Ok(out)
    }

    /// Checks that `name` may be created in `dir`; returns the directory.
    fn prepare_create(&self, os: &DirtyObjset, zaps: &mut ZapCache, dir: u64, name: &[u8]) -> Result<Znode> {
        let d = self.load_dir(os, dir)?;
        if is_dot(name) {
            return err(EEXIST, format!("{} exists", show(name)));
        }
        check_name(name)?;
        if d.rec.u64(self.sa.nums.links) == 0 {
            return err(ENOENT, format!("directory {dir} was removed"));
        }
        if self.entry(os, zaps, dir, name)?.is_some() {
            return err(EEXIST, format!("{} exists", show(name)));
        }
        self.check_new_name(os, zaps, dir, name)?;
        Ok(d)
    }

    /// Owner group of a new node: a set-gid directory passes its group on (and its set-gid
    /// bit to subdirectories), as Linux `inode_init_owner` and `zfs_acl_ids_create` do.
    fn inherit_gid(&self, d: &Znode, mode: u64, gid: u32) -> (u64, u64) {
        let dmode = self.mode(d);
        if dmode & S_ISGID == 0 {
            return (mode, u64::from(gid));
        }
        let mode = if mode & S_IFMT == S_IFDIR { mode | S_ISGID } else { mode };
        (mode, d.rec.u64(self.sa.nums.gid))
    }

    /// Creates a file, device, fifo or socket (`mode` carries the `S_IF*` type; 0 = regular).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        now: (u64, u64),
    ) -> Result<u64> {
        let mut mode = u64::from(mode);
        match mode & S_IFMT {
            0 => mode |= S_IFREG,
            S_IFREG | S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK => {}
            S_IFDIR => return self.mkdir(os, zaps, dir, name, mode as u32, uid, gid, now),
            t => return err(EINVAL, format!("cannot create file type {t:o} with create")),
        }
        let mut d = self.prepare_create(os, zaps, dir, name)?;
        let (mode, gid) = self.inherit_gid(&d, mode & (S_IFMT | 0o7777), gid);
        let obj = self.mknode(os, zaps, &d, mode, u64::from(uid), gid, rdev, now, None)?;
        self.add_entry(os, zaps, &mut d, name, obj, mode, now)?;
        Ok(obj)
    }

    /// Creates a directory.
    #[allow(clippy::too_many_arguments)]
    pub fn mkdir(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
        mode: u32,
        uid: u32,
        gid: u32,
        now: (u64, u64),
    ) -> Result<u64> {
        let mut d = self.prepare_create(os, zaps, dir, name)?;
        let (mode, gid) = self.inherit_gid(&d, S_IFDIR | (u64::from(mode) & 0o7777), gid);
        let obj = self.mknode(os, zaps, &d, mode, u64::from(uid), gid, 0, now, None)?;
        self.add_entry(os, zaps, &mut d, name, obj, mode, now)?;
        Ok(obj)
    }

    /// Creates a symbolic link (mode 0777) whose target is kept in the `ZPL_SYMLINK`
    /// attribute, as OpenZFS does on SA filesystems. Targets that do not fit the bonus
    /// would need a spill block: refused with ENAMETOOLONG.
    #[allow(clippy::too_many_arguments)]
    pub fn symlink(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        now: (u64, u64),
    ) -> Result<u64> {
        if target.is_empty() {
            return err(ENOENT, "empty symlink target");
        }
        if target.len() > PATH_MAX {
            return err(ENAMETOOLONG, format!("symlink target of {} bytes", target.len()));
        }
        let mut d = self.prepare_create(os, zaps, dir, name)?;
        let (mode, gid) = self.inherit_gid(&d, S_IFLNK | 0o777, gid);
        let extra = Some((self.sa.nums.symlink, target.to_vec()));
        let obj = self.mknode(os, zaps, &d, mode, u64::from(uid), gid, 0, now, extra)?;
        // zfs_symlink sets the size to the target length after adding the attribute.
        let mut z = self.load(os, obj)?;
        z.rec.set_u64(self.sa.nums.size, target.len() as u64);
        self.store(os, zaps, &z)?;
        self.add_entry(os, zaps, &mut d, name, obj, mode, now)?;
        Ok(obj)
    }

    /// Adds a hard link `dir/name` to `obj` (not a directory).
    pub fn link(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        dir: u64,
        name: &[u8],
        now: (u64, u64),
    ) -> Result<()> {
        let mut z = self.load(os, obj)?;
        if self.mode(&z) & S_IFMT == S_IFDIR {
            return err(EPERM, format!("object {obj} is a directory"));
        }
        let mut d = self.prepare_create(os, zaps, dir, name)?;
        if self.links(&z) == 0 {
            return err(ENOENT, format!("object {obj} has no links left"));
        }
        let n = self.sa.nums;
        z.rec.set_u64(n.links, self.links(&z) + 1);
        // zfs_link_create points the parent at the directory of the newest link.
        z.rec.set_u64(n.parent, dir);
        self.touch(&mut z, now, false);
        self.store(os, zaps, &z)?;
        let mode = self.mode(&z);
        self.add_entry(os, zaps, &mut d, name, obj, mode, now)
    }

    /// Removes a non-directory entry. When its last link goes, the object is put in the
    /// unlinked set if `keep` (still open), else freed. Returns that object.
    pub fn unlink(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
        keep: bool,
        now: (u64, u64),
    ) -> Result<Option<u64>> {
        let mut d = self.load_dir(os, dir)?;
        if is_dot(name) {
            return err(EISDIR, format!("{} is a directory", show(name)));
        }
        check_name(name)?;
        let Some((obj, stored)) = self.entry_named(os, zaps, dir, name)? else {
            return err(ENOENT, format!("{} not found", show(name)));
        };
        let z = self.load(os, obj)?;
        if self.mode(&z) & S_IFMT == S_IFDIR {
            return err(EISDIR, format!("{} is a directory", show(name)));
        }
        self.remove_entry(os, zaps, &mut d, &stored, false, now)?;
        Ok(self.drop_link(os, zaps, z, keep, now)?.then_some(obj))
    }

    /// Frees an object of the unlinked set (the last close of an unlinked file).
    pub fn release_unlinked(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache, obj: u64) -> Result<()> {
        if zaps.lookup(os, self.unlinked, &hex_name(obj))?.is_none() {
            return err(ENOENT, format!("object {obj} is not in the unlinked set"));
        }
        let z = self.load(os, obj)?;
        if self.links(&z) != 0 {
            return err(EINVAL, format!("object {obj} still has links"));
        }
        zaps.remove(os, self.unlinked, &hex_name(obj))?;
        self.destroy(os, zaps, &z)
    }

    /// Frees every object of the unlinked set (what a mount does: `zfs_unlinked_drain`).
    pub fn drain_unlinked(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache) -> Result<usize> {
        let entries = zaps.entries(os, self.unlinked)?;
        for (_, v) in &entries {
            let obj = v.values.first().copied().unwrap_or(0);
            self.release_unlinked(os, zaps, obj)?;
        }
        Ok(entries.len())
    }

    /// Removes an empty directory.
    pub fn rmdir(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        dir: u64,
        name: &[u8],
        now: (u64, u64),
    ) -> Result<()> {
        let mut d = self.load_dir(os, dir)?;
        if name == b"." {
            return err(EINVAL, "cannot remove '.'");
        }
        if name == b".." {
            return err(ENOTEMPTY, "cannot remove '..'");
        }
        check_name(name)?;
        let Some((obj, stored)) = self.entry_named(os, zaps, dir, name)? else {
            return err(ENOENT, format!("{} not found", show(name)));
        };
        let z = self.load(os, obj)?;
        if self.mode(&z) & S_IFMT != S_IFDIR {
            return err(ENOTDIR, format!("{} is not a directory", show(name)));
        }
        if zaps.len(os, obj)? != 0 {
            return err(ENOTEMPTY, format!("{} is not empty", show(name)));
        }
        self.remove_entry(os, zaps, &mut d, &stored, true, now)?;
        self.drop_link(os, zaps, z, false, now)?;
        Ok(())
    }

    /// Is `dir` (a directory) `anc` or below it? Walks parent pointers up to the root.
    fn is_within(&self, os: &DirtyObjset, anc: u64, dir: u64) -> Result<bool> {
        let mut cur = dir;
        for _ in 0..4096 {
            if cur == anc {
                return Ok(true);
            }
            if cur == self.root {
                return Ok(false);
            }
            let z = self.load(os, cur)?;
            let p = z.rec.u64(self.sa.nums.parent);
            if p == cur {
                return Ok(false);
            }
            cur = p;
        }
        err(EIO, "directory tree deeper than 4096 levels (cycle?)")
    }

    /// Renames `sdir/sname` to `ddir/dname` (POSIX `rename`; `noreplace` = RENAME_NOREPLACE).
    /// A replaced target whose last link goes is handled like [`ZplWriter::unlink`] with
    /// `keep`, and returned.
    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        sdir: u64,
        sname: &[u8],
        ddir: u64,
        dname: &[u8],
        noreplace: bool,
        keep: bool,
        now: (u64, u64),
    ) -> Result<Option<u64>> {
        self.load_dir(os, sdir)?;
        self.load_dir(os, ddir)?;
        if is_dot(sname) || is_dot(dname) {
            return err(EINVAL, "cannot rename '.' or '..'");
        }
        check_name(sname)?;
        check_name(dname)?;
        let Some((sobj, sname)) = self.entry_named(os, zaps, sdir, sname)? else {
            return err(ENOENT, format!("{} not found", show(sname)));
        };
        let sname = &sname[..];
        let sz = self.load(os, sobj)?;
        let sisdir = self.mode(&sz) & S_IFMT == S_IFDIR;
        if sisdir && self.is_within(os, sobj, ddir)? {
            return err(EINVAL, format!("cannot move {} into itself", show(sname)));
        }
        let found = self.entry_named(os, zaps, ddir, dname)?;
        // A new spelling of the same entry (`mv foo FOO` where names fold case): the entry
        // is renamed to it, as `zfs_rename` allows when only the case or form differs.
        let respell =
            sdir == ddir && found.as_ref().is_some_and(|(o, n)| *o == sobj && n == sname && n != dname);
        let target = found.filter(|_| !respell);
        if target.is_some() && noreplace {
            return err(EEXIST, format!("{} exists", show(dname)));
        }
        if target.as_ref().is_some_and(|(o, _)| *o == sobj) {
            // Both names link the same object: POSIX says do nothing.
            return Ok(None);
        }
        let mut gone = None;
        if let Some((tobj, tname)) = target {
            gone = self.rename_drop_target(os, zaps, ddir, &tname, tobj, sisdir, keep, now)?;
        } else if !respell {
            self.check_new_name(os, zaps, ddir, dname)?;
        }
        let mut sd = self.load_dir(os, sdir)?;
        self.remove_entry(os, zaps, &mut sd, sname, sisdir, now)?;
        let mut dd = self.load_dir(os, ddir)?;
        let mode = self.mode(&sz);
        self.add_entry(os, zaps, &mut dd, dname, sobj, mode, now)?;
        let mut sz = self.load(os, sobj)?;
        sz.rec.set_u64(self.sa.nums.parent, ddir);
        self.touch(&mut sz, now, false);
        self.store(os, zaps, &sz)?;
        Ok(gone)
    }

    /// Swaps `sdir/sname` and `ddir/dname` (renameat2's RENAME_EXCHANGE, as `zfs_rename`
    /// does it): both must exist; each object takes the other's name and parent, and a
    /// directory moving to another parent moves its `..` link with it.
    #[allow(clippy::too_many_arguments)]
    pub fn exchange(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        sdir: u64,
        sname: &[u8],
        ddir: u64,
        dname: &[u8],
        now: (u64, u64),
    ) -> Result<()> {
        self.load_dir(os, sdir)?;
        self.load_dir(os, ddir)?;
        if is_dot(sname) || is_dot(dname) {
            return err(EINVAL, "cannot exchange '.' or '..'");
        }
        let Some((sobj, sname)) = self.entry_named(os, zaps, sdir, sname)? else {
            return err(ENOENT, format!("{} not found", show(sname)));
        };
        let Some((dobj, dname)) = self.entry_named(os, zaps, ddir, dname)? else {
            return err(ENOENT, format!("{} not found", show(dname)));
        };
        if sobj == dobj {
            return Ok(());
        }
        let (smode, dmode) = (self.mode(&self.load(os, sobj)?), self.mode(&self.load(os, dobj)?));
        let isdir = |m: u64| m & S_IFMT == S_IFDIR;
        // Neither directory may end up inside itself.
        if (isdir(smode) && self.is_within(os, sobj, ddir)?)
            || (isdir(dmode) && self.is_within(os, dobj, sdir)?)
        {
            return err(EINVAL, "cannot move a directory into itself");
        }
        let mut sd = self.load_dir(os, sdir)?;
        self.remove_entry(os, zaps, &mut sd, &sname, isdir(smode), now)?;
        let mut dd = self.load_dir(os, ddir)?;
        self.remove_entry(os, zaps, &mut dd, &dname, isdir(dmode), now)?;
        let mut sd = self.load_dir(os, sdir)?;
        self.add_entry(os, zaps, &mut sd, &sname, dobj, dmode, now)?;
        let mut dd = self.load_dir(os, ddir)?;
        self.add_entry(os, zaps, &mut dd, &dname, sobj, smode, now)?;
        for (obj, parent) in [(sobj, ddir), (dobj, sdir)] {
            let mut z = self.load(os, obj)?;
            z.rec.set_u64(self.sa.nums.parent, parent);
            self.touch(&mut z, now, false);
            self.store(os, zaps, &z)?;
        }
        Ok(())
    }

    /// Removes the entry a rename replaces, after the POSIX type checks.
    #[allow(clippy::too_many_arguments)]
    fn rename_drop_target(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        ddir: u64,
        dname: &[u8],
        tobj: u64,
        sisdir: bool,
        keep: bool,
        now: (u64, u64),
    ) -> Result<Option<u64>> {
        let tz = self.load(os, tobj)?;
        let tisdir = self.mode(&tz) & S_IFMT == S_IFDIR;
        match (sisdir, tisdir) {
            (true, false) => return err(ENOTDIR, format!("{} is not a directory", show(dname))),
            (false, true) => return err(EISDIR, format!("{} is a directory", show(dname))),
            (true, true) if zaps.len(os, tobj)? != 0 => {
                return err(ENOTEMPTY, format!("{} is not empty", show(dname)))
            }
            _ => {}
        }
        let mut dd = self.load_dir(os, ddir)?;
        self.remove_entry(os, zaps, &mut dd, dname, tisdir, now)?;
        Ok(self.drop_link(os, zaps, tz, keep && !tisdir, now)?.then_some(tobj))
    }

    // ----- attributes and data ------------------------------------------------------------

    /// Changes attributes; ctime becomes `now`. Returns the new attributes.
    pub fn setattr(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        sa: SetAttr,
        now: (u64, u64),
    ) -> Result<Attrs> {
        let mut z = self.load(os, obj)?;
        let n = self.sa.nums;
        if let Some(size) = sa.size {
            self.set_size(os, &mut z, size, self.recordsize)?;
            self.touch(&mut z, now, true);
        }
        if let Some(m) = sa.mode {
            let old = self.mode(&z);
            let mode = (old & S_IFMT) | (u64::from(m) & 0o7777);
            let flags = z.rec.u64(n.flags);
            // aclmode=discard: the ACL is rebuilt from the mode (zfs_acl_chmod_setattr).
            let (count, aces, mode, flags) = acl_for_mode(mode, old & S_IFMT == S_IFDIR, flags, false);
            z.rec.set_u64(n.mode, mode);
            z.rec.set_u64(n.flags, flags);
            z.rec.set_u64(n.dacl_count, count);
            z.rec.set(n.dacl_aces, aces);
        }
        if let Some(u) = sa.uid {
            z.rec.set_u64(n.uid, u64::from(u));
        }
        if let Some(g) = sa.gid {
            z.rec.set_u64(n.gid, u64::from(g));
        }
        if let Some(t) = sa.atime {
            z.rec.set_time(n.atime, t);
        }
        if let Some(t) = sa.mtime {
            z.rec.set_time(n.mtime, t);
        }
        self.touch(&mut z, now, false);
        self.store(os, zaps, &z)?;
        self.getattr(os, obj)
    }

    /// Records an access of `obj` at `now` (`zfs_tstamp_update_setup` for a read): the
    /// access time alone changes, not the change time. With `relatime`, only when the
    /// access time is not after the modification or change time, or is a day old (Linux's
    /// relatime rule, which OpenZFS's `relatime=on` follows). Returns whether it changed.
    pub fn touch_atime(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        now: (u64, u64),
        relatime: bool,
    ) -> Result<bool> {
        let mut z = self.load(os, obj)?;
        let n = self.sa.nums;
        let a = self.getattr(os, obj)?;
        if relatime {
            const DAY: u64 = 24 * 60 * 60;
            let stale = a.atime <= a.mtime || a.atime <= a.ctime || now.0.saturating_sub(a.atime.0) >= DAY;
            if !stale {
                return Ok(false);
            }
        }
        if a.atime == now {
            return Ok(false);
        }
        z.rec.set_time(n.atime, now);
        self.store(os, zaps, &z)?;
        Ok(true)
    }

    fn check_regular(&self, z: &Znode) -> Result<()> {
        match self.mode(z) & S_IFMT {
            S_IFREG => Ok(()),
            S_IFDIR => err(EISDIR, format!("object {} is a directory", z.obj)),
            _ => err(EINVAL, format!("object {} is not a regular file", z.obj)),
        }
    }

    /// Grows the block size of a one-block file about to reach `end` bytes
    /// (`zfs_write` / `zfs_extend` / `zfs_grow_blocksize`).
    fn grow_block(&self, os: &mut DirtyObjset, z: &Znode, end: u64, recordsize: u64) -> Result<()> {
        let dn = os.dnode(z.obj)?.ok_or(dmu::DmuError::NoSuchObject(z.obj))?;
        let bs = dn.data_block_size();
        if self.size(z) > bs || dn.maxblkid > 0 {
            return Ok(());
        }
        // A block already above the recordsize (recordsize was lowered) grows to the next
        // power of two only.
        let cap = if bs > recordsize && !bs.is_power_of_two() { bs.next_power_of_two() } else { recordsize };
        let want = cap.min(end.div_ceil(512).saturating_mul(512)).max(bs);
        if want > bs {
            os.set_block_size(z.obj, want)?;
        }
        Ok(())
    }

    /// Sets the size of a regular file: truncation frees the tail, extension grows the
    /// block size as `zfs_extend` does.
    fn set_size(&self, os: &mut DirtyObjset, z: &mut Znode, size: u64, recordsize: u64) -> Result<()> {
        self.check_regular(z)?;
        if size > MAX_OFFSET {
            return err(EFBIG, format!("size {size} too large"));
        }
        let old = self.size(z);
        if size < old {
            os.free_range(z.obj, size, u64::MAX)?;
        } else if size > old {
            self.grow_block(os, z, size, recordsize)?;
        }
        z.rec.set_u64(self.sa.nums.size, size);
        Ok(())
    }

    /// Writes `data` at `offset` of a regular file; mtime and ctime become `now`.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        offset: u64,
        data: &[u8],
        recordsize: u64,
        now: (u64, u64),
    ) -> Result<()> {
        let mut z = self.load(os, obj)?;
        self.check_regular(&z)?;
        if data.is_empty() {
            return Ok(());
        }
        // zfs_write: a file whose user, group or project reached a byte quota takes no more.
        let (uid, gid) = (z.rec.u64(self.sa.nums.uid), z.rec.u64(self.sa.nums.gid));
        if crate::space::owners_over_quota(os, zaps, uid, gid, self.projid(&z), false)? {
            return err(EDQUOT, format!("quota of user {uid}, group {gid} or their project reached"));
        }
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= MAX_OFFSET);
        let Some(end) = end else {
            return err(EFBIG, format!("write of {} bytes at {offset}", data.len()));
        };
        self.grow_block(os, &z, end, recordsize)?;
        os.write(obj, offset, data)?;
        if end > self.size(&z) {
            z.rec.set_u64(self.sa.nums.size, end);
        }
        self.touch(&mut z, now, true);
        self.store(os, zaps, &z)
    }

    /// Reads up to `len` bytes at `offset` (short at end of file).
    pub fn read(&self, os: &DirtyObjset, obj: u64, offset: u64, len: usize) -> Result<Vec<u8>> {
        let z = self.load(os, obj)?;
        self.check_regular(&z)?;
        let size = self.size(&z);
        if offset >= size {
            return Ok(Vec::new());
        }
        let n = (size - offset).min(len as u64) as usize;
        let mut buf = vec![0u8; n];
        os.read(obj, offset, &mut buf)?;
        Ok(buf)
    }

    /// Sets the size of a regular file (with [`ZplWriter::recordsize`]).
    pub fn truncate(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        size: u64,
        now: (u64, u64),
    ) -> Result<()> {
        let mut z = self.load(os, obj)?;
        self.set_size(os, &mut z, size, self.recordsize)?;
        self.touch(&mut z, now, true);
        self.store(os, zaps, &z)
    }

    /// Deallocates `[off, off+len)` of a file without changing its size (fallocate
    /// `PUNCH_HOLE | KEEP_SIZE`, OpenZFS `zfs_free_range`).
    #[allow(clippy::too_many_arguments)]
    pub fn punch_hole(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        off: u64,
        len: u64,
        now: (u64, u64),
    ) -> Result<()> {
        let mut z = self.load(os, obj)?;
        self.check_regular(&z)?;
        let size = self.size(&z);
        if off >= size || len == 0 {
            return Ok(());
        }
        os.free_range(obj, off, len.min(size - off))?;
        self.touch(&mut z, now, true);
        self.store(os, zaps, &z)
    }

    /// `lseek(SEEK_DATA)` (`data`) or `lseek(SEEK_HOLE)` from `offset` in file `obj`, as the
    /// open txg sees it (`zfs_holey_common`; data written but not yet synced is data, a
    /// range freed in the txg a hole, so no sync is needed): the first data (or hole) at or
    /// after `offset`, in whole blocks, the end of the file being a hole. None for ENXIO:
    /// `offset` at or past the end, or (for data) nothing but holes after it.
    pub fn seek(&self, os: &DirtyObjset, obj: u64, offset: u64, data: bool) -> Result<Option<u64>> {
        let z = self.load(os, obj)?;
        if self.mode(&z) & S_IFMT == S_IFDIR {
            return err(EISDIR, format!("object {obj} is a directory"));
        }
        crate::seek_with(z.dn.data_block_size(), self.size(&z), offset, data, |blk| {
            Ok(os.next_l0(obj, blk, data)?)
        })
    }

    /// Target of a symbolic link.
    pub fn readlink(&self, os: &DirtyObjset, obj: u64) -> Result<Vec<u8>> {
        let z = self.load(os, obj)?;
        if self.mode(&z) & S_IFMT != S_IFLNK {
            return err(EINVAL, format!("object {obj} is not a symlink"));
        }
        match z.rec.get(self.sa.nums.symlink) {
            Some(t) => Ok(t.to_vec()),
            None => err(EIO, format!("symlink {obj} has no ZPL_SYMLINK attribute")),
        }
    }

    // ----- extended attributes ------------------------------------------------------------

    fn check_xattr_name(name: &[u8]) -> Result<()> {
        if name.is_empty() || name.len() > NAME_MAX {
            return err(ERANGE, format!("xattr name of {} bytes", name.len()));
        }
        check_name(name).map_err(|e| ZplWriteError::new(EINVAL, e.to_string()))?;
        if is_dot(name) {
            return err(EINVAL, "xattr name '.' or '..'");
        }
        Ok(())
    }

    /// SA xattrs (`ZPL_DXATTR`, xattr=sa) of a znode. New values are never written there
    /// (they go to the xattr directory); a name is only ever removed ([`Self::drop_sa_xattr`]).
    fn sa_xattrs(&self, os: &DirtyObjset, obj: u64) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let a = self.getattr(os, obj)?;
        Ok(crate::attrs::sa_xattrs(&a)?)
    }

    /// Removes `name` from the SA xattr nvlist of `obj` (`zpl_xattr_set_sa` with no value:
    /// the nvlist is re-packed, XDR, without the pair; an empty list stays). The record only
    /// shrinks, so it fits the bonus it came from; attributes in a spill block are refused.
    fn drop_sa_xattr(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
    ) -> Result<()> {
        let num = self
            .sa
            .registry
            .zpl(ondisk::sa::ZplAttr::Dxattr)
            .ok_or_else(|| ZplWriteError::new(EIO, "ZPL_DXATTR has no attribute number"))?;
        let mut z = self.load(os, obj)?;
        let raw =
            z.rec.get(num).ok_or_else(|| ZplWriteError::new(EIO, format!("object {obj}: no SA xattrs")))?;
        let mut nv = ondisk::nvlist::NvList::decode(raw)?;
        nv.pairs.retain(|(n, _)| n.as_bytes() != name);
        z.rec.set(num, nv.encode());
        self.store(os, zaps, &z)
    }

    /// The hidden xattr directory of `z`, created when `create` (`zfs_make_xattrdir`:
    /// mode 01777 directory owned by the file's owner, flagged `ZFS_XATTR`).
    fn xattr_dir(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        z: &mut Znode,
        create: bool,
        now: (u64, u64),
    ) -> Result<Option<u64>> {
        let n = self.sa.nums;
        let x = z.rec.u64(n.xattr);
        if x != 0 || !create {
            return Ok((x != 0).then_some(x));
        }
        let (uid, gid) = (z.rec.u64(n.uid), z.rec.u64(n.gid));
        let rec = self.new_record(z.obj, 0, S_IFDIR | S_ISVTX | 0o777, uid, gid, 0, now, true);
        let xdir = self.alloc_znode(os, zaps, true)?;
        self.store_rec(os, zaps, xdir, &rec, None)?;
        z.rec.set_u64(n.xattr, xdir);
        self.store(os, zaps, z)?;
        Ok(Some(xdir))
    }

    /// Sets extended attribute `name` (`flags`: [`XATTR_CREATE`], [`XATTR_REPLACE`]).
    #[allow(clippy::too_many_arguments)]
    pub fn setxattr(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
        now: (u64, u64),
    ) -> Result<()> {
        Self::check_xattr_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return err(E2BIG, format!("xattr value of {} bytes", value.len()));
        }
        let in_sa = self.sa_xattrs(os, obj)?.iter().any(|(k, _)| k == name);
        let mut z = self.load(os, obj)?;
        let old_dir = z.rec.u64(self.sa.nums.xattr);
        let in_dir = old_dir != 0 && self.entry(os, zaps, old_dir, name)?.is_some();
        match (in_sa || in_dir, flags) {
            (true, f) if f & XATTR_CREATE != 0 => return err(EEXIST, format!("xattr {} exists", show(name))),
            (false, f) if f & XATTR_REPLACE != 0 => return err(ENODATA, format!("no xattr {}", show(name))),
            _ => {}
        }
        if in_sa {
            // The value moves to the directory; a name lives in one place only, as OpenZFS
            // keeps it when an SA xattr outgrows the SA (`zpl_xattr_set`).
            self.drop_sa_xattr(os, zaps, obj, name)?;
            z = self.load(os, obj)?;
        }
        let xdir = self
            .xattr_dir(os, zaps, &mut z, true, now)?
            .ok_or_else(|| ZplWriteError::new(EIO, "no xattr dir"))?;
        let existing = self.entry(os, zaps, xdir, name)?;
        let xobj = match existing {
            Some(x) => x,
            None => {
                let mut xd = self.load_dir(os, xdir)?;
                let (uid, gid) = (z.rec.u64(self.sa.nums.uid), z.rec.u64(self.sa.nums.gid));
                let x = self.mknode(os, zaps, &xd, S_IFREG | 0o644, uid, gid, 0, now, None)?;
                self.add_entry(os, zaps, &mut xd, name, x, S_IFREG, now)?;
                x
            }
        };
        let mut xz = self.load(os, xobj)?;
        self.set_size(os, &mut xz, 0, self.recordsize)?;
        self.store(os, zaps, &xz)?;
        self.write(os, zaps, xobj, 0, value, self.recordsize, now)?;
        let mut z = self.load(os, obj)?;
        self.touch(&mut z, now, false);
        self.store(os, zaps, &z)
    }

    /// Value of extended attribute `name` (ENODATA when absent).
    pub fn getxattr(&self, os: &DirtyObjset, zaps: &mut ZapCache, obj: u64, name: &[u8]) -> Result<Vec<u8>> {
        Self::check_xattr_name(name)?;
        if let Some((_, v)) = self.sa_xattrs(os, obj)?.into_iter().find(|(k, _)| k == name) {
            return Ok(v);
        }
        let z = self.load(os, obj)?;
        let xdir = z.rec.u64(self.sa.nums.xattr);
        if xdir != 0 {
            if let Some(x) = self.entry(os, zaps, xdir, name)? {
                let size = self.getattr(os, x)?.size;
                if size > XATTR_READ_MAX {
                    return err(E2BIG, format!("xattr {} holds {size} bytes", show(name)));
                }
                return self.read(os, x, 0, size as usize);
            }
        }
        err(ENODATA, format!("no xattr {}", show(name)))
    }

    /// Names of the extended attributes of `obj`.
    pub fn listxattr(&self, os: &DirtyObjset, zaps: &mut ZapCache, obj: u64) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = self.sa_xattrs(os, obj)?.into_iter().map(|(k, _)| k).collect();
        let z = self.load(os, obj)?;
        let xdir = z.rec.u64(self.sa.nums.xattr);
        if xdir != 0 {
            for (name, _) in zaps.entries(os, xdir)? {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        Ok(out)
    }

    /// Removes extended attribute `name` (ENODATA when absent).
    pub fn removexattr(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        name: &[u8],
        now: (u64, u64),
    ) -> Result<()> {
        Self::check_xattr_name(name)?;
        let in_sa = self.sa_xattrs(os, obj)?.iter().any(|(k, _)| k == name);
        if in_sa {
            self.drop_sa_xattr(os, zaps, obj, name)?;
        }
        let mut z = self.load(os, obj)?;
        let xdir = self.xattr_dir(os, zaps, &mut z, false, now)?;
        let in_dir = match xdir {
            Some(x) => self.entry(os, zaps, x, name)?.is_some(),
            None => false,
        };
        if !in_sa && !in_dir {
            return err(ENODATA, format!("no xattr {}", show(name)));
        }
        if let (Some(x), true) = (xdir, in_dir) {
            self.unlink(os, zaps, x, name, false, now)?;
        }
        let mut z = self.load(os, obj)?;
        self.touch(&mut z, now, false);
        self.store(os, zaps, &z)
    }
}

#[path = "acl_write.rs"]
mod acl_write;
pub use acl_write::NewAcl;

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
