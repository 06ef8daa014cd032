//! # rw — serves a writable ZPL dataset over FUSE
//!
//! A thin adapter from `fuser::Filesystem` to [`zpl::write::ZplWriter`], which changes the
//! open txg of one dataset (a [`DirtyObjset`] and its [`ZapCache`]). The daemon owns that
//! state and syncs it; this module reaches it only through [`RwBackend::with`], one
//! operation at a time.
//!
//! Theory.
//! * **Inodes** are object numbers, except that the ZPL root object is FUSE inode 1 (object 1
//!   is the master node, never a file, so the swap is safe both ways). The mapping is
//!   stateless, so `forget` has nothing to do and lookup counts are not kept.
//! * **Open files that lose their last link.** FUSE passes `unlink`/`rename` of a file
//!   that is still open straight through, so this adapter counts opens per inode. When the
//!   last link of an open file goes, the ZPL keeps the object in the unlinked set
//!   (`keep`), and the last `release` frees it (`release_unlinked`), as OpenZFS does in
//!   `zfs_zinactive`. The unlinked set is drained when mounting (`zfs_unlinked_drain`):
//!   nothing is open yet, so whatever it holds was orphaned by a crash.
//! * **Caching.** Entries and attributes are cached by the kernel for [`TTL`] = 1 s and
//!   file pages are kept across opens (`FOPEN_KEEP_CACHE`). That is safe because every
//!   change of the dataset goes through this mount's kernel inodes: the kernel refreshes
//!   attributes from the replies of setattr/create/link, invalidates the parent's and the
//!   victim's attributes on create/unlink/rename/link, updates size on write and drops
//!   pages on truncate and hole punching. Nothing else writes the dataset while it is
//!   mounted, except a rollback or a receive that replaces it whole; see below. Lookups
//!   still revalidate after one second,
//!   which bounds the damage should that assumption ever break, while path walks stay
//!   cheap (a TTL of 0 sends a LOOKUP per path component per syscall). Negative entries are
//!   not cached (errors carry no TTL).
//! * **Replaced underneath** (rollback, a receive's swap): as OpenZFS's
//!   `zfs_suspend_fs`/`zfs_resume_fs`, the mount stays. The daemon holds the mount's
//!   requests in the backend while it changes the dataset, then revalidates [`Files`]
//!   (`MountHandle::revalidate`): an open file whose object is gone or holds another file
//!   (another generation) turns stale (ESTALE), orphans of the old contents are forgotten
//!   (never freed: their object numbers may be live files now), and cached names that
//!   lead elsewhere now are noted. Once requests flow again, the kernel is told to drop
//!   those names and the attributes and pages of every inode it holds
//!   (`MountHandle::invalidate_cache`); to know them, entry replies are recorded until
//!   FORGET. A request already past the hold when the change began finishes first (the
//!   change needs the pool it holds).
//! * **Directory listings** are snapshotted per open directory handle and refreshed at
//!   offset 0 (`rewinddir`), so entries removed between two READDIR calls (`rm -r`) do not
//!   shift offsets and skip names; POSIX allows a listing not to reflect later changes.
//! * **Locking.** fuser serves requests on one thread; `with` additionally serializes
//!   against the daemon's txg sync.
//! * **Permissions** are checked by the kernel (`default_permissions`) from mode, uid and
//!   gid; set-id bits on chown/write are dropped by the kernel's setattr as well. With
//!   acltype=posix the kernel also enforces POSIX ACLs (`FUSE_POSIX_ACL`): it reads them
//!   through getxattr, and leaves to this side what a Linux file system does itself —
//!   keeping the mode and the ACL in step on setxattr and chmod, and giving new files the
//!   mode and ACLs of their directory's default ACL, with the umask applied only when there
//!   is none (`FUSE_DONT_MASK`). The rules are the ZPL's (`zpl::acl`, `ZplWriter::xattr_*`).
//! * **Errors**: the errno of [`ZplWriteError`]; every change on a read-only backend is
//!   EROFS (the mount is also made read-only in the kernel).
//! * **Devices**: FUSE carries rdev in the userspace `dev_t` encoding; OpenZFS on Linux
//!   stores the kernel's (`major << 20 | minor`, see OpenZFS `zfs_cmpldev` and
//!   `zpl_mknod`), so both directions convert.

use dmu::tx::DirtyObjset;
use fuser::{
    FileAttr, FileType as FType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow,
};
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zap::write::ZapCache;
use zpl::write::{SetAttr, ZplWriteError, ZplWriter};
use zpl::Attrs;

use crate::{MountHandle, MountOpts};
use zpl::acl::AclType;

/// How long the kernel may cache entries and attributes (see the module comment).
const TTL: Duration = Duration::from_secs(1);
/// Largest WRITE request asked of the kernel (it caps this at its `max_pages`).
const MAX_WRITE: u32 = 1 << 20;
/// Longest name (`ZAP_MAXNAMELEN` - 1).
const NAME_MAX: u32 = 255;

/// The open txg of one dataset, lent to one operation.
pub struct RwCtx<'a> {
    pub zpl: &'a mut ZplWriter,
    pub os: &'a mut DirtyObjset,
    pub zaps: &'a mut ZapCache,
    /// The dataset's `recordsize` property.
    pub recordsize: u64,
    /// Whether reads record access times (the `atime` and `relatime` properties).
    pub atime: Atime,
    /// The dataset's `readonly` property now: changes fail with EROFS (a mount follows
    /// `zfs set readonly` at once, as OpenZFS's does).
    pub readonly: bool,
    /// The dataset's `xattr` property is not `off` (followed at once, like `readonly`).
    pub xattr: bool,
}

/// How reads change access times (`atime`, `relatime`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// `atime=off`.
    #[default]
    Off,
    /// `atime=on relatime=off`: every read.
    On,
    /// `atime=on relatime=on`: a read when the access time is not after the last
    /// modification or change, or is a day old.
    Relatime,
}

/// What an operation does to the dataset, so that the backend can check for space (and
/// suspension) before a change, and let reads through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Reads only.
    Read,
    /// Writes `len` bytes of file data at `off` of object `obj` (the intent log records
    /// exactly this).
    Write { obj: u64, off: u64, len: u64 },
    /// Creates names or changes attributes.
    Meta,
    /// Sets these attributes of object `obj` (None: unchanged; `mode`: the permission
    /// bits), and changes nothing else (the intent log records exactly this, `TX_SETATTR`;
    /// a chmod that also rewrites a POSIX ACL is an [`Op::Meta`]). A size change frees: it
    /// must work on a full pool, as [`Op::Free`].
    Setattr { obj: u64, sa: SetAttr },
    /// Records an access time: a change, but none that `fsync` must make durable (OpenZFS
    /// logs no access times).
    Atime,
    /// Removes names or data: must work on a full pool (space comes back).
    Free,
}

/// What the daemon provides for one writable mount.
pub trait RwBackend: Send + Sync + 'static {
    /// Runs `f` with the dataset's open-txg state locked (one op at a time is fine); `op`
    /// says what `f` will do.
    fn with(
        &self,
        op: Op,
        f: &mut dyn FnMut(RwCtx<'_>) -> Result<(), ZplWriteError>,
    ) -> Result<(), ZplWriteError>;
    /// Makes everything written so far durable (the daemon syncs the txg); fsyncdir and
    /// syncfs call it.
    fn sync(&self) -> Result<(), String>;
    /// fsync/fdatasync of a file: what was written to files must be durable (the daemon's
    /// intent log writes it, or the txg is synced).
    fn fsync(&self) -> Result<(), String> {
        self.sync()
    }
    fn readonly(&self) -> bool;
    /// A handler panicked: the backend's state may be half changed and must not be
    /// written (the daemon suspends the pool).
    fn poison(&self, _what: &str) {}
    /// (total bytes, free bytes, used objects, free objects estimate) for statfs.
    fn space(&self) -> (u64, u64, u64, u64);
    /// A read of object `obj` failed with EIO (no copy of a block verified): the daemon
    /// lists it among the pool's permanent errors (`zpool status -v`).
    fn read_error(&self, _obj: u64) {}
}

/// Mounts the dataset of `backend` on `dir` with [`MountOpts::default`].
pub fn mount_rw<B: RwBackend>(backend: Arc<B>, dir: &Path, fsname: &str) -> std::io::Result<MountHandle> {
    mount_rw_with(backend, dir, fsname, &MountOpts::default())
}

/// Mounts the dataset of `backend` on `dir`, served by a background thread. Frees what the
/// unlinked set holds first (files orphaned by a crash), unless the mount is read-only.
pub fn mount_rw_with<B: RwBackend>(
    backend: Arc<B>,
    dir: &Path,
    fsname: &str,
    mo: &MountOpts,
) -> std::io::Result<MountHandle> {
    mount_rw_snapshots(backend, dir, fsname, mo, None)
}

/// [`mount_rw_with`], with the dataset's snapshots served read-only under `.zfs/snapshot`
/// (every inode of the snapshot range goes to a [`crate::ZfsFuse`] view of them).
pub fn mount_rw_snapshots<B: RwBackend>(
    backend: Arc<B>,
    dir: &Path,
    fsname: &str,
    mo: &MountOpts,
    snapshots: Option<crate::SnapshotSource>,
) -> std::io::Result<MountHandle> {
    let readonly = (backend.readonly() && !mo.writable) || mo.readonly;
    let mut fs = RwFs::with_opts(backend.clone(), mo.clone())?;
    let files = fs.files.clone();
    let notifier = fs.notifier.clone();
    fs.snaps = snapshots.map(|src| crate::ZfsFuse::snapshot_view(src, mo.acltype));
    let snap_use = fs.snaps.as_ref().map(|v| v.usage());
    let name = fsname.to_string();
    let fs = crate::guard::Guarded::new(
        fs,
        Box::new(move |op, what| {
            eprintln!("rzfs: {name}: internal error in FUSE {op}: {what}");
            backend.poison(&format!("internal error in FUSE {op} on {name}: {what}"));
        }),
    );
    let mut opts = vec![
        MountOption::FSName(fsname.to_string()),
        MountOption::Subtype("rzfs".into()),
        MountOption::DefaultPermissions,
    ];
    // allow_other lets users other than the daemon's use the mount; only root may ask for
    // it without `user_allow_other` in /etc/fuse.conf.
    if super::is_root() {
        opts.push(MountOption::AllowOther);
    }
    opts.extend(mo.kernel_options(super::is_root()));
    opts.push(if readonly { MountOption::RO } else { MountOption::RW });
    let session = fuser::spawn_mount2(fs, dir, &opts)?;
    let _ = notifier.set(session.notifier());
    let mut handle = MountHandle::new(session, dir);
    handle.files = Some(files);
    handle.snap_use = snap_use;
    Ok(handle)
}

type Res<T> = Result<T, i32>;

/// A name under `.zfs/snapshot` as a snapshot name (UTF-8; zfs checks the rest).
fn snap_name(name: &OsStr) -> Res<&str> {
    name.to_str().ok_or(libc::EINVAL)
}
type ZRes<T> = Result<T, ZplWriteError>;

/// One name of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DirEntry {
    ino: u64,
    kind: FType,
    name: Vec<u8>,
}

/// The attributes FUSE wants for an entry reply.
type Entry = (FileAttr, u64);

/// The FUSE filesystem over one dataset.
struct RwFs<B: RwBackend> {
    backend: Arc<B>,
    /// Object number of the ZPL root (FUSE inode 1).
    root: u64,
    /// Open files, orphans and the inodes the kernel knows, shared with the mount's handle.
    files: Arc<Mutex<Files>>,
    /// Listing snapshots per open directory handle.
    dirs: HashMap<u64, Option<Vec<DirEntry>>>,
    next_fh: u64,
    /// How the dataset is mounted (ACL type; read-only even on a writable backend).
    opts: MountOpts,
    /// fsync requests, answered by the syncer thread (see [`Syncer`]).
    syncer: Syncer,
    /// `.zfs` and the snapshots under it (read-only), when the mount serves them.
    snaps: Option<crate::ZfsFuse>,
    /// Tells the kernel to drop cached attributes (set once the session runs).
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
    /// When each file's access was last recorded (seconds): at most once a second each.
    accessed: HashMap<u64, u64>,
    /// How long the kernel may cache a name: [`TTL`], or nothing where names match by
    /// their normalized form (`normalization`, `casesensitivity`). There one file has many
    /// spellings, the kernel caches each it is asked for as a separate name, and an unlink
    /// or rename through one spelling could not drop the others.
    entry_ttl: Duration,
}

/// The replaced contents of a mounted dataset, as [`MountHandle::revalidate`] asks them.
pub trait Revalidator {
    /// The generation of object `obj` (None: no such file).
    fn gen(&mut self, obj: u64) -> Option<u64>;
    /// The object `name` leads to in directory object `dir` (None: no such name).
    fn lookup(&mut self, dir: u64, name: &[u8]) -> Option<u64>;
}

/// What a read-write mount knows of its files, shared between its server thread and its
/// [`MountHandle`] (the daemon revalidates it while the mount's requests are held).
#[derive(Default)]
pub(crate) struct Files {
    /// Open handles per object, and the object's generation when first opened.
    opens: HashMap<u64, (u32, u64)>,
    /// Objects whose last link went while open: in the unlinked set until the last release.
    orphans: HashSet<u64>,
    /// Open objects the dataset no longer has (or has as another file, by generation)
    /// since it was replaced underneath the mount: their I/O fails with ESTALE.
    stale: HashSet<u64>,
    /// Inodes the kernel holds (entry replies, until FORGET), whose cached attributes
    /// and pages are dropped when the dataset is replaced, with the names (parent inode,
    /// name) it caches for each: those that lead elsewhere then are invalidated.
    names: HashMap<u64, Vec<(u64, Vec<u8>)>>,
    /// Names found leading elsewhere by the last revalidation, for the kernel to drop.
    moved: Vec<(u64, Vec<u8>)>,
    /// Object number of the ZPL root (FUSE inode 1).
    root: u64,
}

impl Files {
    fn is_open(&self, obj: u64) -> bool {
        self.opens.get(&obj).is_some_and(|&(n, _)| n > 0)
    }

    fn open(&mut self, obj: u64, gen: u64) {
        let e = self.opens.entry(obj).or_insert((0, gen));
        e.0 += 1;
    }

    fn learn(&mut self, parent: u64, name: &[u8], ino: u64) {
        let v = self.names.entry(ino).or_default();
        if !v.iter().any(|(p, n)| *p == parent && n == name) {
            v.push((parent, name.to_vec()));
        }
    }

    /// See [`MountHandle::revalidate`]. The callbacks run without this lock held (they
    /// take the pool's, which the server takes before this one).
    pub(crate) fn revalidate(files: &Mutex<Files>, now: &mut dyn Revalidator) {
        let (open, names, root) = {
            let f = lock(files);
            let open: Vec<(u64, u64)> = f.opens.iter().map(|(&o, &(_, g))| (o, g)).collect();
            let names: Vec<(u64, u64, Vec<u8>)> =
                f.names.iter().flat_map(|(&i, v)| v.iter().map(move |(p, n)| (i, *p, n.clone()))).collect();
            (open, names, f.root)
        };
        let obj = |ino: u64| if ino == fuser::FUSE_ROOT_ID { root } else { ino };
        let gone: Vec<u64> =
            open.into_iter().filter(|&(o, g)| now.gen(o) != Some(g)).map(|(o, _)| o).collect();
        let moved: Vec<(u64, u64, Vec<u8>)> = names
            .into_iter()
            .filter(|(ino, parent, name)| now.lookup(obj(*parent), name) != Some(obj(*ino)))
            .collect();
        let mut f = lock(files);
        f.orphans.clear();
        f.stale.extend(gone);
        for (ino, p, n) in &moved {
            if let Some(v) = f.names.get_mut(ino) {
                v.retain(|(vp, vn)| !(vp == p && vn == n));
            }
        }
        f.moved = moved.into_iter().map(|(_, p, n)| (p, n)).collect();
    }

    /// The names found leading elsewhere by the last revalidation (taken).
    pub(crate) fn take_moved(&mut self) -> Vec<(u64, Vec<u8>)> {
        std::mem::take(&mut self.moved)
    }

    /// The inodes the kernel holds, the root always among them.
    pub(crate) fn known(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.names.keys().copied().collect();
        v.push(fuser::FUSE_ROOT_ID);
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Answers `fsync` off the request loop: a sync may wait (a txg to write, or a pool
/// suspended with failmode=wait until `zpool clear`), and the single request thread must
/// keep serving the mount meanwhile — the kernel sends FLUSH on every close, including
/// the implicit closes of a fork+exec, and those must not queue behind a waiting fsync.
/// Requests that arrive while a sync runs are answered together by the next one (every
/// write they cover reached the open txg before their fsync was sent).
struct Syncer {
    /// (reply, whole file system): fsyncdir needs the txg synced, a file's fsync the log.
    tx: std::sync::mpsc::Sender<(ReplyEmpty, bool)>,
}

impl Syncer {
    fn start<B: RwBackend>(backend: Arc<B>, readonly: bool) -> Syncer {
        let (tx, rx) = std::sync::mpsc::channel::<(ReplyEmpty, bool)>();
        std::thread::Builder::new()
            .name("rzfs-fsync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let whole = batch.iter().any(|(_, w)| *w);
                    let r = if readonly {
                        Ok(())
                    } else if whole {
                        backend.sync().map_err(|_| libc::EIO)
                    } else {
                        backend.fsync().map_err(|_| libc::EIO)
                    };
                    for (reply, _) in batch {
                        reply_empty(reply, r);
                    }
                }
            })
            .expect("spawning the fsync thread");
        Syncer { tx }
    }

    fn sync(&self, reply: ReplyEmpty, whole: bool) {
        // The thread ends only when this sender is dropped.
        if let Err(std::sync::mpsc::SendError((reply, _))) = self.tx.send((reply, whole)) {
            reply.error(libc::EIO);
        }
    }
}

fn io_err(e: ZplWriteError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// The errno to reply for a write-layer error (never 0).
fn errno(e: &ZplWriteError) -> i32 {
    match e.errno() {
        n if n > 0 => n,
        _ => libc::EIO,
    }
}

/// The current time as (seconds, nanoseconds) since the epoch.
fn now() -> (u64, u64) {
    time_to_zfs(SystemTime::now())
}

/// A time as ZFS stores it: signed seconds (two's complement in a u64) and nanoseconds
/// (`ZFS_TIME_ENCODE`).
fn time_to_zfs(t: SystemTime) -> (u64, u64) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), u64::from(d.subsec_nanos())),
        Err(e) => {
            let d = e.duration();
            let (mut s, mut ns) = (-(d.as_secs() as i64), u64::from(d.subsec_nanos()));
            if ns > 0 {
                s -= 1;
                ns = 1_000_000_000 - ns;
            }
            (s as u64, ns)
        }
    }
}

/// The inverse of [`time_to_zfs`]; out-of-range values (corrupt or far future) clamp to
/// the epoch instead of overflowing.
pub(crate) fn time_from_zfs((s, ns): (u64, u64)) -> SystemTime {
    let ns = Duration::from_nanos(ns.min(999_999_999));
    let s = s as i64;
    let t = if s >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(s as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(s.unsigned_abs()))
    };
    t.and_then(|t| t.checked_add(ns)).unwrap_or(UNIX_EPOCH)
}

/// Userspace `dev_t` (what FUSE carries) to the kernel's `major << 20 | minor` that
/// OpenZFS on Linux stores in `ZPL_RDEV`.
fn rdev_to_zfs(r: u32) -> u64 {
    let major = (r >> 8) & 0xfff;
    let minor = (r & 0xff) | ((r >> 12) & 0xfff00);
    (u64::from(major) << 20) | u64::from(minor)
}

/// `ZPL_RDEV` (kernel encoding) to the userspace `dev_t` FUSE carries.
pub(crate) fn rdev_from_zfs(d: u64) -> u32 {
    let major = ((d >> 20) & 0xfff) as u32;
    let minor = (d & 0xfffff) as u32;
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// FUSE attributes of a znode whose inode is `ino`.
fn to_attr(ino: u64, a: &Attrs) -> FileAttr {
    FileAttr {
        ino,
        size: a.size,
        blocks: a.blocks512(),
        atime: time_from_zfs(a.atime),
        mtime: time_from_zfs(a.mtime),
        ctime: time_from_zfs(a.ctime),
        crtime: time_from_zfs(a.crtime),
        kind: super::ftype(a.kind()),
        perm: (a.mode & 0o7777) as u16,
        nlink: u32::try_from(a.links).unwrap_or(u32::MAX),
        uid: a.uid as u32,
        gid: a.gid as u32,
        rdev: rdev_from_zfs(a.rdev),
        blksize: a.blksize.clamp(512, 1 << 24) as u32,
        flags: 0,
    }
}

/// FUSE inode of an object: the root is inode 1.
fn ino_of(root: u64, obj: u64) -> u64 {
    if obj == root {
        fuser::FUSE_ROOT_ID
    } else {
        obj
    }
}

/// The answer to an inode ioctl of a Linux file system, from the file's attributes: 4
/// bytes, as OpenZFS's `zpl_ioctl` gives them, or the errno (ENOTTY: not supported).
/// - `FS_IOC_GETVERSION` (`_IOR('v', 1, long)`, and the 32-bit form): the generation (the
///   txg that created the file, `ZPL_GEN`) cut to the 32 bits of `i_generation`;
/// - `FS_IOC_GETFLAGS` (`_IOR('f', 1, long)`, and the 32-bit form): the ZPL flags Linux
///   has names for (`flags_lookup` in zpl_file.c: immutable, append-only, nodump,
///   project inherit), so `lsattr` works.
pub(crate) fn ioctl_answer(cmd: u32, a: &zpl::Attrs) -> Res<[u8; 4]> {
    use ondisk::znode::{ZFS_APPENDONLY, ZFS_IMMUTABLE, ZFS_NODUMP, ZFS_PROJINHERIT};
    // Each ZPL flag and the FS_*_FL bit (linux/fs.h) it is shown as.
    const MAP: [(u64, u32); 4] = [
        (ZFS_IMMUTABLE, 0x0000_0010),   // FS_IMMUTABLE_FL
        (ZFS_APPENDONLY, 0x0000_0020),  // FS_APPEND_FL
        (ZFS_NODUMP, 0x0000_0040),      // FS_NODUMP_FL
        (ZFS_PROJINHERIT, 0x2000_0000), // FS_PROJINHERIT_FL
    ];
    match cmd {
        0x8008_7601 | 0x8004_7601 => Ok((a.gen as u32).to_le_bytes()),
        0x8008_6601 | 0x8004_6601 => {
            let f = MAP.iter().filter(|(z, _)| a.flags & z != 0).fold(0u32, |acc, (_, l)| acc | l);
            Ok(f.to_le_bytes())
        }
        _ => Err(libc::ENOTTY),
    }
}

/// Attributes and generation of `obj`, for an entry reply.
fn entry_of(c: &RwCtx<'_>, root: u64, obj: u64) -> ZRes<Entry> {
    let a = c.zpl.getattr(c.os, obj)?;
    Ok((to_attr(ino_of(root, obj), &a), a.gen))
}

fn sys_err(errno: i32, what: &str) -> ZplWriteError {
    ZplWriteError::Errno(errno, what.to_string())
}

/// What a getxattr/listxattr reply carries: the size alone for a size-0 probe, ERANGE when
/// the caller's buffer is too small, else the bytes.
#[derive(Debug, PartialEq, Eq)]
enum XattrAnswer {
    Size(u32),
    Data(Vec<u8>),
}

fn xattr_answer(v: Vec<u8>, size: u32) -> Res<XattrAnswer> {
    let len = u32::try_from(v.len()).map_err(|_| libc::E2BIG)?;
    if size == 0 {
        Ok(XattrAnswer::Size(len))
    } else if size < len {
        Err(libc::ERANGE)
    } else {
        Ok(XattrAnswer::Data(v))
    }
}

fn reply_xattr(reply: ReplyXattr, r: Res<XattrAnswer>) {
    match r {
        Ok(XattrAnswer::Size(n)) => reply.size(n),
        Ok(XattrAnswer::Data(v)) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

fn reply_entry(reply: ReplyEntry, r: Res<Entry>, ttl: Duration) {
    match r {
        Ok((a, gen)) => reply.entry(&ttl, &a, gen),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// The changes of a FUSE setattr, as the write layer takes them.
fn set_attr(
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    now: (u64, u64),
) -> SetAttr {
    let t = |x: Option<TimeOrNow>| {
        x.map(|x| match x {
            TimeOrNow::Now => now,
            TimeOrNow::SpecificTime(t) => time_to_zfs(t),
        })
    };
    SetAttr { mode: mode.map(|m| m & 0o7777), uid, gid, size, atime: t(atime), mtime: t(mtime) }
}

impl<B: RwBackend> RwFs<B> {
    #[cfg(test)]
    fn new(backend: Arc<B>) -> std::io::Result<Self> {
        Self::with_opts(backend, MountOpts::default())
    }

    fn with_opts(backend: Arc<B>, opts: MountOpts) -> std::io::Result<Self> {
        let (mut root, mut normalized) = (0, false);
        backend
            .with(Op::Read, &mut |c| {
                root = c.zpl.root();
                normalized = c.zpl.names().dir_normflags() != 0;
                Ok(())
            })
            .map_err(io_err)?;
        let readonly = (backend.readonly() && !opts.writable) || opts.readonly;
        if !readonly {
            // Best effort, as `zfs_unlinked_drain`: an object that cannot be freed now stays
            // listed and is retried at the next mount.
            let _ = backend.with(Op::Free, &mut |c| c.zpl.drain_unlinked(c.os, c.zaps).map(|_| ()));
        }
        let syncer = Syncer::start(backend.clone(), readonly);
        Ok(RwFs {
            backend,
            root,
            files: Arc::new(Mutex::new(Files { root, ..Files::default() })),
            dirs: HashMap::new(),
            next_fh: 1,
            opts,
            syncer,
            snaps: None,
            notifier: Arc::new(std::sync::OnceLock::new()),
            accessed: HashMap::new(),
            entry_ttl: if normalized { Duration::ZERO } else { TTL },
        })
    }

    /// Read-only: the backend's dataset is, or the mount was asked to be.
    fn readonly(&self) -> bool {
        self.opts.readonly || (self.backend.readonly() && !self.opts.writable)
    }

    fn acl(&self) -> AclType {
        self.opts.acltype
    }

    /// Object number of an inode.
    fn obj(&self, ino: u64) -> u64 {
        if ino == fuser::FUSE_ROOT_ID {
            self.root
        } else {
            ino
        }
    }

    /// Object number of an inode that is not stale (see [`Files::stale`]): ESTALE for an
    /// open file whose object the dataset lost when it was replaced underneath the mount.
    fn live(&self, ino: u64) -> Res<u64> {
        let obj = self.obj(ino);
        if lock(&self.files).stale.contains(&obj) {
            return Err(libc::ESTALE);
        }
        Ok(obj)
    }

    /// Records that the kernel holds an inode (an entry reply).
    fn learn(&self, parent: u64, name: &[u8], r: &Res<Entry>) {
        if let Ok((a, _)) = r {
            lock(&self.files).learn(parent, name, a.ino);
        }
    }

    /// Runs `f`, which only reads, on the locked open txg.
    fn run<T>(&self, f: impl FnOnce(RwCtx<'_>) -> ZRes<T>) -> Res<T> {
        self.run_op(Op::Read, f)
    }

    /// Runs `f`, which does `op`, on the locked open txg.
    fn run_op<T>(&self, op: Op, f: impl FnOnce(RwCtx<'_>) -> ZRes<T>) -> Res<T> {
        let mut f = Some(f);
        let mut out = None;
        self.backend
            .with(op, &mut |c| {
                let f = f.take().ok_or_else(|| sys_err(libc::EIO, "backend ran an operation twice"))?;
                out = Some(f(c)?);
                Ok(())
            })
            .map_err(|e| errno(&e))?;
        out.ok_or(libc::EIO)
    }

    /// [`RwFs::run`] for an operation that changes the dataset: EROFS when read-only.
    fn run_mut<T>(&self, op: Op, f: impl FnOnce(RwCtx<'_>) -> ZRes<T>) -> Res<T> {
        if self.readonly() {
            return Err(libc::EROFS);
        }
        let writable = self.opts.writable;
        self.run_op(op, |c| {
            if c.readonly && !writable {
                return Err(ZplWriteError::Errno(
                    libc::EROFS,
                    "the file system is read-only (readonly=on)".into(),
                ));
            }
            f(c)
        })
    }

    fn fresh_fh(&mut self) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        fh
    }

    fn do_lookup(&self, parent: u64, name: &[u8]) -> Res<Entry> {
        let (dir, root) = (self.obj(parent), self.root);
        self.run(|c| match c.zpl.lookup(c.os, c.zaps, dir, name)? {
            Some(obj) => entry_of(&c, root, obj),
            None => Err(sys_err(libc::ENOENT, "no such entry")),
        })
    }

    fn do_getattr(&self, ino: u64) -> Res<FileAttr> {
        let obj = self.live(ino)?;
        let mut a = self.run(|c| Ok(to_attr(ino, &c.zpl.getattr(c.os, obj)?)))?;
        // With snapdir=visible the root counts `.zfs` among its subdirectories, as
        // OpenZFS's zfs_getattr adds one link to the root when it shows the control dir.
        if ino == 1 && self.snaps.as_ref().is_some_and(|v| matches!(v.snapdir(), (true, false))) {
            a.nlink += 1;
        }
        Ok(a)
    }

    /// What inode ioctl `cmd` answers for `ino` ([`ioctl_answer`]).
    fn do_ioctl(&self, ino: u64, cmd: u32) -> Res<[u8; 4]> {
        let obj = self.live(ino)?;
        let a = self.run(|c| c.zpl.getattr(c.os, obj))?;
        ioctl_answer(cmd, &a)
    }

    fn do_setattr(&self, ino: u64, sa: SetAttr) -> Res<FileAttr> {
        if sa == SetAttr::default() {
            return self.do_getattr(ino);
        }
        let (obj, acl) = (self.live(ino)?, self.acl());
        // A size change frees (or only extends, sparsely): it must work on a full pool.
        // The intent log describes it, unless a chmod rewrites a POSIX ACL too.
        let op = match sa {
            SetAttr { mode: Some(_), .. } if acl == AclType::Posix => {
                if sa.size.is_some() {
                    Op::Free
                } else {
                    Op::Meta
                }
            }
            _ => Op::Setattr { obj, sa },
        };
        self.run_mut(op, |c| {
            c.zpl.recordsize = c.recordsize;
            let a = c.zpl.setattr_acl(c.os, c.zaps, obj, sa, acl, now())?;
            Ok(to_attr(ino, &a))
        })
    }

    /// Creates a file of any type but directory and symlink (`mode` carries `S_IF*`). The
    /// mode and ACLs come from the directory's default ACL, else `umask` applies; the ACLs
    /// are stored in the same operation, so no sync sees the file without them.
    #[allow(clippy::too_many_arguments)]
    fn do_mknod(
        &self,
        ids: (u32, u32),
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    ) -> Res<Entry> {
        let (dir, root, acl) = (self.obj(parent), self.root, self.acl());
        self.run_mut(Op::Meta, |c| {
            let t = now();
            let na = c.zpl.acl_for_new(c.os, c.zaps, dir, mode, umask, acl)?;
            let obj = c.zpl.create(c.os, c.zaps, dir, name, na.mode, ids.0, ids.1, rdev_to_zfs(rdev), t)?;
            c.zpl.acl_apply_new(c.os, c.zaps, obj, &na, t)?;
            entry_of(&c, root, obj)
        })
    }

    fn do_mkdir(&self, ids: (u32, u32), parent: u64, name: &[u8], mode: u32, umask: u32) -> Res<Entry> {
        let (dir, root, acl) = (self.obj(parent), self.root, self.acl());
        self.run_mut(Op::Meta, |c| {
            let t = now();
            let mode = (mode & 0o7777) | libc::S_IFDIR;
            let na = c.zpl.acl_for_new(c.os, c.zaps, dir, mode, umask, acl)?;
            let obj = c.zpl.mkdir(c.os, c.zaps, dir, name, na.mode & 0o7777, ids.0, ids.1, t)?;
            c.zpl.acl_apply_new(c.os, c.zaps, obj, &na, t)?;
            entry_of(&c, root, obj)
        })
    }

    fn do_symlink(&self, ids: (u32, u32), parent: u64, name: &[u8], target: &[u8]) -> Res<Entry> {
        let (dir, root) = (self.obj(parent), self.root);
        self.run_mut(Op::Meta, |c| {
            let obj = c.zpl.symlink(c.os, c.zaps, dir, name, target, ids.0, ids.1, now())?;
            entry_of(&c, root, obj)
        })
    }

    fn do_link(&self, ino: u64, parent: u64, name: &[u8]) -> Res<Entry> {
        let (obj, dir, root) = (self.obj(ino), self.obj(parent), self.root);
        self.run_mut(Op::Meta, |c| {
            c.zpl.link(c.os, c.zaps, obj, dir, name, now())?;
            entry_of(&c, root, obj)
        })
    }

    fn do_readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let obj = self.obj(ino);
        self.run(|c| c.zpl.readlink(c.os, obj))
    }

    /// Removes a name; an open file losing its last link becomes an orphan.
    fn do_unlink(&mut self, parent: u64, name: &[u8]) -> Res<()> {
        let dir = self.obj(parent);
        let files = &self.files;
        let kept = self.run_mut(Op::Free, |c| {
            let target = c.zpl.lookup(c.os, c.zaps, dir, name)?;
            let keep = target.is_some_and(|o| lock(files).is_open(o));
            Ok(c.zpl.unlink(c.os, c.zaps, dir, name, keep, now())?.filter(|_| keep))
        })?;
        lock(&self.files).orphans.extend(kept);
        Ok(())
    }

    fn do_rmdir(&self, parent: u64, name: &[u8]) -> Res<()> {
        let dir = self.obj(parent);
        self.run_mut(Op::Free, |c| c.zpl.rmdir(c.os, c.zaps, dir, name, now()))
    }

    /// POSIX rename; RENAME_NOREPLACE is honoured, RENAME_EXCHANGE and RENAME_WHITEOUT are
    /// not supported (EINVAL, what the kernel answers for filesystems without them).
    /// rename(2) and renameat2's flags as OpenZFS on Linux takes them: RENAME_NOREPLACE,
    /// RENAME_EXCHANGE (alone) and RENAME_WHITEOUT (the source name becomes a whiteout: a
    /// character device 0:0 owned by the caller, as overlayfs expects); others are EINVAL.
    fn do_rename(&mut self, ids: (u32, u32), from: (u64, &[u8]), to: (u64, &[u8]), flags: u32) -> Res<()> {
        let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT;
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let whiteout = flags & libc::RENAME_WHITEOUT != 0;
        if flags & !known != 0 || (exchange && flags != libc::RENAME_EXCHANGE) {
            return Err(libc::EINVAL);
        }
        let noreplace = flags & libc::RENAME_NOREPLACE != 0;
        let (sdir, ddir) = (self.obj(from.0), self.obj(to.0));
        if exchange {
            return self.run_mut(Op::Meta, |c| c.zpl.exchange(c.os, c.zaps, sdir, from.1, ddir, to.1, now()));
        }
        let files = &self.files;
        let kept = self.run_mut(Op::Meta, |c| {
            let target = c.zpl.lookup(c.os, c.zaps, ddir, to.1)?;
            let keep = target.is_some_and(|o| lock(files).is_open(o));
            let t = now();
            let gone = c.zpl.rename(c.os, c.zaps, sdir, from.1, ddir, to.1, noreplace, keep, t)?;
            if whiteout {
                // Linux's WHITEOUT_MODE and WHITEOUT_DEV are both 0.
                c.zpl.create(c.os, c.zaps, sdir, from.1, libc::S_IFCHR, ids.0, ids.1, 0, t)?;
            }
            Ok(gone.filter(|_| keep))
        })?;
        lock(&self.files).orphans.extend(kept);
        Ok(())
    }

    /// Opens a file: checks it exists (and EROFS for writing a read-only dataset), counts the
    /// handle. Returns the handle number.
    fn do_open(&mut self, ino: u64, flags: i32) -> Res<u64> {
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        if writes && self.readonly() {
            return Err(libc::EROFS);
        }
        let obj = self.live(ino)?;
        let gen = self.run(|c| c.zpl.getattr(c.os, obj).map(|a| a.gen))?;
        lock(&self.files).open(obj, gen);
        Ok(self.fresh_fh())
    }

    /// Creates and opens a regular file.
    fn do_create(
        &mut self,
        ids: (u32, u32),
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> Res<(Entry, u64)> {
        let mode = (mode & 0o7777) | libc::S_IFREG;
        let e = self.do_mknod(ids, parent, name, mode, umask, 0)?;
        lock(&self.files).open(self.obj(e.0.ino), e.1);
        Ok((e, self.fresh_fh()))
    }

    /// Drops one handle; the last one of an orphan frees it.
    fn do_release(&mut self, ino: u64) -> Res<()> {
        let obj = self.obj(ino);
        let orphan = {
            let mut f = lock(&self.files);
            let Some((n, _)) = f.opens.get_mut(&obj) else {
                return Ok(());
            };
            *n = n.saturating_sub(1);
            if *n > 0 {
                return Ok(());
            }
            f.opens.remove(&obj);
            f.stale.remove(&obj);
            f.orphans.remove(&obj)
        };
        if orphan {
            self.run_op(Op::Free, |c| c.zpl.release_unlinked(c.os, c.zaps, obj))?;
        }
        Ok(())
    }

    /// `lseek(SEEK_DATA/SEEK_HOLE)`, as the open txg sees the file (see [`ZplWriter::seek`]).
    fn do_lseek(&self, ino: u64, offset: i64, whence: i32) -> Res<i64> {
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(libc::EINVAL),
        };
        let obj = self.live(ino)?;
        let off = u64::try_from(offset).map_err(|_| libc::ENXIO)?;
        match self.run(|c| c.zpl.seek(c.os, obj, off, data))? {
            Some(at) => i64::try_from(at).map_err(|_| libc::EOVERFLOW),
            None => Err(libc::ENXIO),
        }
    }

    #[cfg(test)]
    fn do_read(&self, ino: u64, offset: i64, size: u32) -> Res<Vec<u8>> {
        self.do_read_atime(ino, offset, size).map(|(d, _)| d)
    }

    /// A read, and the dataset's access-time policy.
    fn do_read_atime(&self, ino: u64, offset: i64, size: u32) -> Res<(Vec<u8>, Atime)> {
        let obj = self.live(ino)?;
        let off = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        let temp = self.opts.atime;
        self.run(|c| Ok((c.zpl.read(c.os, obj, off, size as usize)?, temp.unwrap_or(c.atime))))
    }

    /// The dataset's access-time policy.
    fn atime_policy(&self) -> Atime {
        let temp = self.opts.atime;
        self.run(|c| Ok(temp.unwrap_or(c.atime))).unwrap_or_default()
    }

    /// Records an access of `ino` (a read, or an open for reading: reads the kernel serves
    /// from its page cache never reach us) as the dataset's `atime`/`relatime` ask, at most
    /// once a second per file, and has the kernel drop the attributes it caches so that a
    /// `stat` right after shows it. Best effort: a full pool or a read-only mount records
    /// nothing, and the read does not fail for it.
    fn note_access(&mut self, ino: u64, policy: Atime) {
        if policy == Atime::Off || self.readonly() {
            return;
        }
        let Ok(obj) = self.live(ino) else { return };
        let t = now();
        if self.accessed.get(&obj).is_some_and(|&last| last >= t.0) {
            return;
        }
        if self.accessed.len() >= 4096 {
            self.accessed.clear();
        }
        self.accessed.insert(obj, t.0);
        let relatime = policy == Atime::Relatime;
        let writable = self.opts.writable;
        let changed = self.run_op(Op::Atime, |c| {
            if c.readonly && !writable {
                Ok(false)
            } else {
                c.zpl.touch_atime(c.os, c.zaps, obj, t, relatime)
            }
        });
        if changed == Ok(true) {
            if let Some(n) = self.notifier.get() {
                // Attributes only (offset < 0): no page is touched, so this is safe from
                // within a request.
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
    }

    fn do_write(&self, ino: u64, offset: i64, data: &[u8]) -> Res<u32> {
        let obj = self.live(ino)?;
        let off = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        let n = u32::try_from(data.len()).map_err(|_| libc::EINVAL)?;
        self.run_mut(Op::Write { obj, off, len: u64::from(n) }, |c| {
            c.zpl.write(c.os, c.zaps, obj, off, data, c.recordsize, now())
        })?;
        Ok(n)
    }

    /// fallocate: hole punching (with KEEP_SIZE, as Linux requires), size extension for
    /// mode 0, and nothing for KEEP_SIZE alone (copy-on-write cannot reserve blocks, as in
    /// OpenZFS `zpl_fallocate_common`).
    fn do_fallocate(&self, ino: u64, offset: i64, length: i64, mode: i32) -> Res<()> {
        let (off, len) = match (u64::try_from(offset), u64::try_from(length)) {
            (Ok(o), Ok(l)) if l > 0 => (o, l),
            _ => return Err(libc::EINVAL),
        };
        let end = off.checked_add(len).filter(|&e| e <= i64::MAX as u64).ok_or(libc::EFBIG)?;
        let obj = self.live(ino)?;
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        if mode == punch {
            return self.run_mut(Op::Free, |c| c.zpl.punch_hole(c.os, c.zaps, obj, off, len, now()));
        }
        if mode != 0 && mode != libc::FALLOC_FL_KEEP_SIZE {
            return Err(libc::EOPNOTSUPP);
        }
        self.run_mut(Op::Meta, |c| {
            let a = c.zpl.getattr(c.os, obj)?;
            if a.kind() != zpl::FileType::Regular {
                return Err(sys_err(libc::ENODEV, "fallocate of a non-regular file"));
            }
            if mode == 0 && end > a.size {
                c.zpl.recordsize = c.recordsize;
                c.zpl.truncate(c.os, c.zaps, obj, end, now())?;
            }
            Ok(())
        })
    }

    /// The full listing of a directory: `.`, `..`, then the entries.
    fn listing(&self, ino: u64) -> Res<Vec<DirEntry>> {
        let (obj, root) = (self.obj(ino), self.root);
        self.run(|c| {
            let parent = c.zpl.getattr(c.os, obj)?.parent;
            let list = c.zpl.readdir(c.os, c.zaps, obj)?;
            let mut out = Vec::with_capacity(list.len() + 2);
            out.push(DirEntry { ino, kind: FType::Directory, name: b".".to_vec() });
            out.push(DirEntry { ino: ino_of(root, parent), kind: FType::Directory, name: b"..".to_vec() });
            // A name the kernel would refuse ('.', '..', a '/', NUL: a damaged or hostile
            // pool) is left out rather than failing the whole listing.
            for (name, o, kind) in list.into_iter().filter(|(n, _, _)| zpl::host_name_problem(n).is_none()) {
                out.push(DirEntry { ino: ino_of(root, o), kind: super::ftype(kind), name });
            }
            Ok(out)
        })
    }

    /// The `.zfs` view when `ino` (or a lookup's parent) belongs to it.
    fn snap_view(&mut self, ino: u64) -> Option<&mut crate::ZfsFuse> {
        self.snaps.as_mut().filter(|_| crate::in_snapshot_space(ino))
    }

    fn do_opendir(&mut self, ino: u64) -> Res<u64> {
        let obj = self.obj(ino);
        self.run(|c| match c.zpl.getattr(c.os, obj)?.kind() {
            zpl::FileType::Directory => Ok(()),
            _ => Err(sys_err(libc::ENOTDIR, "not a directory")),
        })?;
        let fh = self.fresh_fh();
        self.dirs.insert(fh, None);
        Ok(fh)
    }

    /// The entries of handle `fh` from `offset` on, each with the offset of the next one.
    /// The listing is read at offset 0 and kept for the handle's later calls.
    fn do_readdir(&mut self, ino: u64, fh: u64, offset: i64) -> Res<Vec<(i64, DirEntry)>> {
        let skip = usize::try_from(offset).map_err(|_| libc::EINVAL)?;
        let cached = self.dirs.get(&fh).and_then(|d| d.clone()).filter(|_| skip > 0);
        let list = match cached {
            Some(l) => l,
            None => {
                let mut l = self.listing(ino)?;
                if ino == 1 && self.snaps.as_ref().is_some_and(|v| v.snapdir().0) {
                    // After `.` and `..`, as OpenZFS lists it (snapdir=visible).
                    let at = l.len().min(2);
                    l.insert(
                        at,
                        DirEntry { ino: crate::CTL_DIR, kind: FType::Directory, name: b".zfs".to_vec() },
                    );
                }
                if let Some(slot) = self.dirs.get_mut(&fh) {
                    *slot = Some(l.clone());
                }
                l
            }
        };
        Ok(list.into_iter().enumerate().skip(skip).map(|(i, e)| (i as i64 + 1, e)).collect())
    }

    fn do_statfs(&self) -> Res<(u64, u64, u64, u64, u32)> {
        let rs = self.run(|c| Ok(c.recordsize))?;
        let bsize = rs.clamp(512, 1 << 24);
        let (total, free, used_objs, free_objs) = self.backend.space();
        Ok((total / bsize, free / bsize, used_objs.saturating_add(free_objs), free_objs, bsize as u32))
    }

    /// setxattr by user `caller`; names and POSIX ACLs follow the ZPL's rules for the
    /// dataset's acltype.
    /// Are `user.` extended attributes served? The `xattr`/`noxattr` mount option, else the
    /// dataset's `xattr` property as it is now (OpenZFS on Linux: `xattr=off` answers
    /// EOPNOTSUPP for the user namespace; ACLs and other namespaces are unaffected).
    fn user_xattrs(&self) -> bool {
        match self.opts.xattr {
            Some(on) => on,
            None => self.run(|c| Ok(c.xattr)).unwrap_or(true),
        }
    }

    fn check_user_xattr(&self, name: &[u8]) -> Res<()> {
        if name.starts_with(b"user.") && !self.user_xattrs() {
            return Err(libc::EOPNOTSUPP);
        }
        Ok(())
    }

    fn do_setxattr(&self, caller: u32, ino: u64, name: &[u8], value: &[u8], flags: i32) -> Res<()> {
        self.check_user_xattr(name)?;
        let (obj, acl) = (self.obj(ino), self.acl());
        let flags = u32::try_from(flags).map_err(|_| libc::EINVAL)?;
        self.run_mut(Op::Meta, |c| c.zpl.xattr_set(c.os, c.zaps, obj, name, value, flags, acl, caller, now()))
    }

    fn do_getxattr(&self, ino: u64, name: &[u8], size: u32) -> Res<XattrAnswer> {
        self.check_user_xattr(name)?;
        let (obj, acl) = (self.obj(ino), self.acl());
        xattr_answer(self.run(|c| c.zpl.xattr_get(c.os, c.zaps, obj, name, acl))?, size)
    }

    /// listxattr; `trusted.` names only for uid 0 (CAP_SYS_ADMIN in the kernel).
    fn do_listxattr(&self, caller: u32, ino: u64, size: u32) -> Res<XattrAnswer> {
        let (obj, acl) = (self.obj(ino), self.acl());
        let names = self.run(|c| c.zpl.xattr_list(c.os, c.zaps, obj, acl, caller == 0))?;
        let user = self.user_xattrs();
        let mut buf = Vec::new();
        for n in names.into_iter().filter(|n| user || !n.starts_with(b"user.")) {
            buf.extend_from_slice(&n);
            buf.push(0);
        }
        xattr_answer(buf, size)
    }

    fn do_removexattr(&self, caller: u32, ino: u64, name: &[u8]) -> Res<()> {
        self.check_user_xattr(name)?;
        let (obj, acl) = (self.obj(ino), self.acl());
        self.run_mut(Op::Free, |c| c.zpl.xattr_remove(c.os, c.zaps, obj, name, acl, caller, now()))
    }

    /// access(2): the kernel checks permissions itself (default_permissions); this only
    /// answers existence and EROFS for W_OK on a read-only dataset.
    fn do_access(&self, ino: u64, mask: i32) -> Res<()> {
        self.do_getattr(ino)?;
        if mask & libc::W_OK != 0 && self.readonly() {
            return Err(libc::EROFS);
        }
        Ok(())
    }

    /// fsync and friends: the daemon syncs the open txg.
    #[cfg(test)]
    fn do_sync(&self) -> Res<()> {
        if self.readonly() {
            return Ok(());
        }
        self.backend.sync().map_err(|_| libc::EIO)
    }
}

fn lock(files: &Mutex<Files>) -> std::sync::MutexGuard<'_, Files> {
    files.lock().unwrap_or_else(|p| p.into_inner())
}

fn ids(req: &Request<'_>) -> (u32, u32) {
    (req.uid(), req.gid())
}

impl<B: RwBackend> Filesystem for RwFs<B> {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        // The kernel caps max_write at what it allows; a refusal leaves fuser's default.
        let _ = config.set_max_write(MAX_WRITE);
        crate::acl_init(config, self.acl())
    }

    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        // With snapdir=disabled there is no `.zfs`: the name is looked up in the file system.
        let dotzfs =
            parent == 1 && name.as_bytes() == b".zfs" && self.snaps.as_ref().is_some_and(|v| !v.snapdir().1);
        if let Some(v) = self.snaps.as_mut().filter(|_| dotzfs || crate::in_snapshot_space(parent)) {
            return v.lookup(req, parent, name, reply);
        }
        let r = self.do_lookup(parent, name.as_bytes());
        self.learn(parent, name.as_bytes(), &r);
        reply_entry(reply, r, self.entry_ttl);
    }

    /// The kernel dropped the inode: its cache needs no invalidation any more.
    fn forget(&mut self, _req: &Request<'_>, ino: u64, _nlookup: u64) {
        lock(&self.files).names.remove(&ino);
    }

    fn getattr(&mut self, req: &Request<'_>, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
        if let Some(v) = self.snap_view(ino) {
            return v.getattr(req, ino, fh, reply);
        }
        match self.do_getattr(ino) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    /// `FS_IOC_GETVERSION` and `FS_IOC_GETFLAGS` ([`ioctl_answer`]); other ioctls are not
    /// supported (ENOTTY).
    fn ioctl(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        flags: u32,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        if let Some(v) = self.snap_view(ino) {
            return v.ioctl(req, ino, fh, flags, cmd, in_data, out_size, reply);
        }
        match self.do_ioctl(ino, cmd) {
            Ok(b) => reply.ioctl(0, &b),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        if crate::in_snapshot_space(ino) {
            return reply.error(libc::EROFS);
        }
        let sa = set_attr(mode, uid, gid, size, atime, mtime, now());
        match self.do_setattr(ino, sa) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, req: &Request<'_>, ino: u64, reply: ReplyData) {
        if let Some(v) = self.snap_view(ino) {
            return v.readlink(req, ino, reply);
        }
        match self.do_readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        if crate::in_snapshot_space(parent) {
            return reply.error(libc::EROFS);
        }
        let r = self.do_mknod(ids(req), parent, name.as_bytes(), mode, umask, rdev);
        self.learn(parent, name.as_bytes(), &r);
        reply_entry(reply, r, self.entry_ttl);
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        if parent == crate::SNAP_DIR {
            // A snapshot taken by name (OpenZFS's zpl_snapdir_mkdir), then looked up.
            if let Some(v) = self.snaps.as_mut() {
                return match snap_name(name).and_then(|n| v.source().create(n)) {
                    Ok(()) => v.lookup(req, parent, name, reply),
                    Err(e) => reply.error(e),
                };
            }
        }
        if crate::in_snapshot_space(parent) {
            return reply.error(libc::EROFS);
        }
        let r = self.do_mkdir(ids(req), parent, name.as_bytes(), mode, umask);
        self.learn(parent, name.as_bytes(), &r);
        reply_entry(reply, r, self.entry_ttl);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        if crate::in_snapshot_space(parent) {
            return reply.error(libc::EROFS);
        }
        reply_empty(reply, self.do_unlink(parent, name.as_bytes()));
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        if parent == crate::SNAP_DIR {
            if let Some(v) = self.snaps.as_ref() {
                return reply_empty(reply, snap_name(name).and_then(|n| v.source().destroy(n)));
            }
        }
        if crate::in_snapshot_space(parent) {
            return reply.error(libc::EROFS);
        }
        reply_empty(reply, self.do_rmdir(parent, name.as_bytes()));
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        if crate::in_snapshot_space(parent) {
            return reply.error(libc::EROFS);
        }
        let r = self.do_symlink(ids(req), parent, link_name.as_bytes(), target.as_os_str().as_bytes());
        self.learn(parent, link_name.as_bytes(), &r);
        reply_entry(reply, r, self.entry_ttl);
    }

    fn rename(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        // mv(1) asks for RENAME_NOREPLACE, which a snapshot rename keeps anyway.
        if parent == crate::SNAP_DIR && newparent == crate::SNAP_DIR && flags & !libc::RENAME_NOREPLACE == 0 {
            if let Some(v) = self.snaps.as_ref() {
                let r =
                    snap_name(name).and_then(|o| snap_name(newname).and_then(|n| v.source().rename(o, n)));
                return reply_empty(reply, r);
            }
        }
        if crate::in_snapshot_space(parent) || crate::in_snapshot_space(newparent) {
            // Across the snapshot space and the head: EXDEV, as between two mounts.
            let both = crate::in_snapshot_space(parent) && crate::in_snapshot_space(newparent);
            return reply.error(if both { libc::EROFS } else { libc::EXDEV });
        }
        reply_empty(
            reply,
            self.do_rename(ids(req), (parent, name.as_bytes()), (newparent, newname.as_bytes()), flags),
        );
    }

    fn link(&mut self, _req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry) {
        if crate::in_snapshot_space(ino) || crate::in_snapshot_space(newparent) {
            return reply.error(libc::EXDEV);
        }
        let r = self.do_link(ino, newparent, newname.as_bytes());
        self.learn(newparent, newname.as_bytes(), &r);
        reply_entry(reply, r, self.entry_ttl);
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        if let Some(v) = self.snap_view(ino) {
            return v.open(req, ino, flags, reply);
        }
        match self.do_open(ino, flags) {
            Ok(fh) => {
                // The reads of a file whose pages the kernel keeps do not reach us: its
                // opening for reading stands for them.
                if flags & libc::O_ACCMODE != libc::O_WRONLY {
                    let policy = self.atime_policy();
                    self.note_access(ino, policy);
                }
                reply.opened(fh, fuser::consts::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if crate::in_snapshot_space(parent) {
            return reply.error(libc::EROFS);
        }
        match self.do_create(ids(req), parent, name.as_bytes(), mode, umask) {
            Ok(((a, gen), fh)) => {
                lock(&self.files).learn(parent, name.as_bytes(), a.ino);
                reply.created(&self.entry_ttl, &a, gen, fh, fuser::consts::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        flags: i32,
        lock: Option<u64>,
        reply: ReplyData,
    ) {
        if let Some(v) = self.snap_view(ino) {
            return v.read(req, ino, fh, offset, size, flags, lock, reply);
        }
        match self.do_read_atime(ino, offset, size) {
            Ok((d, policy)) => {
                self.note_access(ino, policy);
                reply.data(&d)
            }
            Err(e) => {
                if e == libc::EIO {
                    if let Ok(obj) = self.live(ino) {
                        self.backend.read_error(obj);
                    }
                }
                reply.error(e)
            }
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyWrite,
    ) {
        if crate::in_snapshot_space(ino) {
            return reply.error(libc::EROFS);
        }
        match self.do_write(ino, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(&mut self, req: &Request<'_>, ino: u64, fh: u64, offset: i64, whence: i32, reply: ReplyLseek) {
        if let Some(v) = self.snap_view(ino) {
            return v.lseek(req, ino, fh, offset, whence, reply);
        }
        match self.do_lseek(ino, offset, whence) {
            Ok(at) => reply.offset(at),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        // Writes reach the open txg synchronously; close(2) promises no durability.
        reply.ok();
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if crate::in_snapshot_space(ino) {
            if let Some(v) = self.snap_view(ino) {
                v.note_release(ino);
            }
            return reply.ok();
        }
        reply_empty(reply, self.do_release(ino));
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        self.syncer.sync(reply, false);
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if let Some(v) = self.snap_view(ino) {
            // The view lists at every call: no handle state, only the count that makes the
            // snapshot busy.
            v.note_open(ino);
            return reply.opened(0, 0);
        }
        match self.do_opendir(ino) {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&mut self, req: &Request<'_>, ino: u64, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        if let Some(v) = self.snap_view(ino) {
            return v.readdir(req, ino, fh, offset, reply);
        }
        match self.do_readdir(ino, fh, offset) {
            Ok(list) => {
                for (next, e) in list {
                    if reply.add(e.ino, next, e.kind, OsStr::from_bytes(&e.name)) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&mut self, _req: &Request<'_>, ino: u64, fh: u64, _flags: i32, reply: ReplyEmpty) {
        if let Some(v) = self.snap_view(ino) {
            v.note_release(ino);
            return reply.ok();
        }
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        self.syncer.sync(reply, true);
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        match self.do_statfs() {
            Ok((blocks, bfree, files, ffree, bsize)) => {
                reply.statfs(blocks, bfree, bfree, files, ffree, bsize, NAME_MAX, bsize)
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        if position != 0 {
            return reply.error(libc::EINVAL);
        }
        if crate::in_snapshot_space(ino) {
            return reply.error(libc::EROFS);
        }
        reply_empty(reply, self.do_setxattr(req.uid(), ino, name.as_bytes(), value, flags));
    }

    fn getxattr(&mut self, req: &Request<'_>, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        if let Some(v) = self.snap_view(ino) {
            return v.getxattr(req, ino, name, size, reply);
        }
        reply_xattr(reply, self.do_getxattr(ino, name.as_bytes(), size));
    }

    fn listxattr(&mut self, req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        if let Some(v) = self.snap_view(ino) {
            return v.listxattr(req, ino, size, reply);
        }
        reply_xattr(reply, self.do_listxattr(req.uid(), ino, size));
    }

    fn removexattr(&mut self, req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        if crate::in_snapshot_space(ino) {
            return reply.error(libc::EROFS);
        }
        reply_empty(reply, self.do_removexattr(req.uid(), ino, name.as_bytes()));
    }

    fn access(&mut self, _req: &Request<'_>, ino: u64, mask: i32, reply: ReplyEmpty) {
        if crate::in_snapshot_space(ino) {
            // Read and search only: the kernel checks modes itself (default_permissions).
            return if mask & libc::W_OK != 0 { reply.error(libc::EROFS) } else { reply.ok() };
        }
        reply_empty(reply, self.do_access(ino, mask));
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if crate::in_snapshot_space(ino) {
            return reply.error(libc::EROFS);
        }
        reply_empty(reply, self.do_fallocate(ino, offset, length, mode));
    }
}

#[cfg(test)]
#[path = "rw_tests.rs"]
mod tests;
