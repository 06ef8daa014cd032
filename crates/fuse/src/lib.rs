//! # fuse — serves a ZPL dataset over FUSE (read-only for now)
//!
//! A thin adapter from `fuser::Filesystem` to `zpl::Zpl`. Inode numbers:
//! - the dataset's own objects keep their object numbers, except that the ZPL root object
//!   is FUSE inode 1 (object 1 is the master node, never a file, so the swap is safe);
//! - `.zfs` and `.zfs/snapshot` are virtual directories with inodes in the reserved range
//!   `0xFFFF << 48`;
//! - objects of snapshot *i* (1-based, in the order the `Snapshots` source lists them) are
//!   `(i << 48) | object` (object numbers are below 2^48: `DN_MAX_OBJECT_SHIFT`).
//!
//! Errors map to errno at this edge only: a block no copy of which verifies becomes EIO.
//!
//! Mount options come from dataset properties ([`MountOpts`]): `exec`, `setuid` and
//! `devices` become noexec/nosuid/nodev, and with acltype=posix the kernel enforces POSIX
//! ACLs (`FUSE_POSIX_ACL`), asking for `system.posix_acl_*` through getxattr.
#![forbid(unsafe_code)]

mod guard;
pub mod rw;
pub mod zvol;

use fuser::{
    FileAttr, FileType as FType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};
use zpl::acl::AclType;
use zpl::{Attrs, FileType, Zpl};

/// How long the kernel may cache attributes and entries: the mount is read-only and a
/// snapshot of a txg, so nothing changes underneath it.
const TTL: Duration = Duration::from_secs(60);
const OBJ_BITS: u32 = 48;
const OBJ_MASK: u64 = (1 << OBJ_BITS) - 1;
pub(crate) const CTL_DIR: u64 = (0xFFFF << OBJ_BITS) | 1;
pub(crate) const SNAP_DIR: u64 = (0xFFFF << OBJ_BITS) | 2;

/// The snapshots of the mounted dataset, opened on demand for `.zfs/snapshot/NAME`.
pub trait Snapshots: Send + Sync {
    /// Snapshot short names (after the `@`), oldest first.
    fn list(&self) -> Vec<String>;
    /// The snapshots with an identity each (their guid): a snapshot destroyed and taken
    /// again under the same name is another one. Sources whose snapshots cannot change
    /// need not say (0).
    fn list_ids(&self) -> Vec<(String, u64)> {
        self.list().into_iter().map(|n| (n, 0)).collect()
    }
    /// Opens one snapshot's ZPL.
    fn open(&self, name: &str) -> Result<Zpl, String>;
    /// The `snapdir` setting now, `(visible, disabled)`, for a source whose setting can
    /// change while mounted (`zfs set snapdir=` applies at once, as on OpenZFS); `None`: the
    /// setting given at mount stands.
    fn snapdir_now(&self) -> Option<(bool, bool)> {
        None
    }
    /// When the snapshot list last changed (`snapshots_changed`: seconds, nanoseconds),
    /// the modification and change time of `.zfs/snapshot` as OpenZFS shows it; (0, 0)
    /// when never.
    fn changed(&self) -> (u64, u32) {
        (0, 0)
    }
    /// `mkdir .zfs/snapshot/NAME`: takes snapshot NAME of the file system (OpenZFS with
    /// `zfs_admin_snapshot` set). An errno on failure; EROFS where snapshots cannot change.
    fn create(&self, _name: &str) -> Result<(), i32> {
        Err(libc::EROFS)
    }
    /// `rmdir .zfs/snapshot/NAME`: destroys snapshot NAME.
    fn destroy(&self, _name: &str) -> Result<(), i32> {
        Err(libc::EROFS)
    }
    /// `mv .zfs/snapshot/OLD .zfs/snapshot/NEW`: renames a snapshot.
    fn rename(&self, _old: &str, _new: &str) -> Result<(), i32> {
        Err(libc::EROFS)
    }
}

/// What to mount: the dataset and its snapshots.
pub struct MountSource {
    pub head: Zpl,
    pub snapshots: Box<dyn Snapshots>,
    /// `snapdir=visible`: list `.zfs` in the root directory (reachable by name unless
    /// `snapdir_disabled`).
    pub snapdir_visible: bool,
    /// `snapdir=disabled`: no `.zfs` at all (OpenZFS 2.3's `ZFS_SNAPDIR_DISABLED`).
    pub snapdir_disabled: bool,
    /// Told of every read that failed for lack of a good copy: (snapshot name or None,
    /// object, error). The pool's permanent-error log (`zpool status -v`) is fed from here.
    pub on_error: ErrorSink,
}

/// Receiver of unrecoverable read errors.
pub type ErrorSink = std::sync::Arc<dyn Fn(Option<&str>, u64, &zpl::ZplError) + Send + Sync>;

/// A live mount. Unmounting is explicit ([`MountHandle::detach`], then
/// [`MountHandle::wait`]) so that a busy mount can be refused and a forced one aborted;
/// dropping a handle that is still mounted tries a plain unmount.
pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    dir: PathBuf,
    /// A read-write mount's open files and known inodes, shared with its server so that the
    /// daemon can carry the mount through a change of its dataset underneath (see
    /// [`MountHandle::revalidate`]).
    files: Option<std::sync::Arc<std::sync::Mutex<rw::Files>>>,
    /// Which snapshots of its `.zfs/snapshot` are in use.
    snap_use: Option<SnapshotUse>,
}

/// How long [`MountHandle::wait`] waits for the serving thread after the kernel let go.
const UNMOUNT_WAIT: Duration = Duration::from_secs(10);
/// How long an unmount retries EBUSY before reporting the mount busy (see `detach`).
const BUSY_RETRY: Duration = Duration::from_secs(1);

impl MountHandle {
    fn new(session: fuser::BackgroundSession, dir: &Path) -> MountHandle {
        MountHandle { session: Some(session), dir: dir.to_path_buf(), files: None, snap_use: None }
    }

    /// Has snapshot `name` (after the `@`) of the mounted file system a file or directory
    /// open under `.zfs/snapshot`? A snapshot in use is not destroyed (EBUSY).
    pub fn snapshot_busy(&self, name: &str) -> bool {
        self.snap_use.as_ref().is_some_and(|u| u.busy(name))
            || cwd_under(&self.dir.join(".zfs").join("snapshot").join(name))
    }

    /// A read-write mount (served by [`rw`]), which can be carried through a change of its
    /// dataset underneath ([`MountHandle::revalidate`]).
    pub fn can_revalidate(&self) -> bool {
        self.files.is_some()
    }

    /// After the dataset of a read-write mount was replaced underneath it (a rollback, a
    /// receive's swap; as OpenZFS's `zfs_resume_fs`), while the mount's requests are held
    /// by the backend: `now` answers from the new contents. Open files whose object is
    /// gone or is now another file (another generation) become stale (their I/O fails
    /// with ESTALE); the files kept for open handles after their last unlink were in the
    /// old contents only and are forgotten; names the kernel caches that now lead
    /// elsewhere are noted for [`MountHandle::invalidate_cache`]. False when this is not
    /// a read-write mount.
    pub fn revalidate(&self, now: &mut dyn rw::Revalidator) -> bool {
        let Some(files) = &self.files else { return false };
        rw::Files::revalidate(files, now);
        true
    }

    /// Drops the kernel's cached attributes of the root directory, whose link count counts
    /// `.zfs` while snapdir=visible (after that property changes).
    pub fn invalidate_root_attrs(&self) {
        if let Some(s) = &self.session {
            let _ = s.notifier().inval_inode(fuser::FUSE_ROOT_ID, -1, 0);
        }
    }

    /// Drops the kernel's cached name `.zfs/snapshot/NAME` after that snapshot was destroyed
    /// or renamed: without it, a snapshot created again under the name within the entry
    /// timeout would be reached through the old one's directory (as OpenZFS unmounts a
    /// destroyed snapshot's automount).
    ///
    /// The notification is sent from a thread of its own: the caller may be serving a
    /// request of this very mount (a rename or rmdir in `.zfs/snapshot`), and the kernel
    /// takes the notification only once that request is done with the directory.
    pub fn invalidate_snapshot(&self, name: &str) {
        if let Some(s) = &self.session {
            let n = s.notifier();
            let name = name.to_string();
            std::thread::spawn(move || {
                let _ = n.inval_entry(SNAP_DIR, std::ffi::OsStr::new(&name));
            });
        }
    }

    /// Drops what the kernel caches of this mount's inodes (attributes and pages) and the
    /// names found leading elsewhere, after [`MountHandle::revalidate`] and once the mount
    /// serves again. Returns how many inodes the kernel was told of.
    pub fn invalidate_cache(&self) -> usize {
        let (Some(files), Some(session)) = (&self.files, &self.session) else { return 0 };
        let (inos, moved) = {
            let mut f = files.lock().unwrap_or_else(|p| p.into_inner());
            (f.known(), f.take_moved())
        };
        let notifier = session.notifier();
        // ENOENT below: the kernel has already dropped the entry or inode.
        for (parent, name) in moved {
            let _ = notifier.inval_entry(parent, std::ffi::OsStr::from_bytes(&name));
        }
        let mut n = 0;
        for ino in inos {
            if notifier.inval_inode(ino, 0, 0).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Has the mount ended (unmounted, by us or from outside: `umount`, `fusermount -u`)?
    pub fn is_finished(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmounts in the kernel. Without `force`, a busy mount (open files, a current
    /// directory, mounts below it) is refused with EBUSY and left as it was. With `force`
    /// the FUSE connection is aborted (requests in flight and later ones fail with EIO, no
    /// more reach the daemon) and the mount detached from the tree (`MNT_FORCE |
    /// MNT_DETACH`). A mount that has already ended is not an error.
    pub fn detach(&self, force: bool) -> std::io::Result<()> {
        use nix::errno::Errno;
        use nix::mount::{umount2, MntFlags};
        if self.is_finished() {
            return Ok(());
        }
        let flags = if force { MntFlags::MNT_FORCE | MntFlags::MNT_DETACH } else { MntFlags::empty() };
        // A file closed just before stays a reference on the mount until the kernel's
        // asynchronous RELEASE of it is answered, so a mount that nothing uses any more can
        // still answer EBUSY for a moment (seen after a test read its files and exported at
        // once). EBUSY is retried for a short bounded time before it is believed.
        let t0 = std::time::Instant::now();
        let mut res = umount2(&self.dir, flags);
        while res == Err(Errno::EBUSY) && !force && t0.elapsed() < BUSY_RETRY {
            std::thread::sleep(Duration::from_millis(20));
            res = umount2(&self.dir, flags);
        }
        match res {
            Ok(()) => Ok(()),
            // Only root may umount; others go through the setuid fusermount.
            Err(Errno::EPERM) => fusermount_unmount(&self.dir, force),
            Err(Errno::EINVAL) if self.is_finished() => Ok(()),
            Err(e) => Err(std::io::Error::from(e)),
        }
    }

    /// Waits (a bounded time) for the serving thread to end after [`MountHandle::detach`];
    /// true when it did.
    pub fn wait(&mut self) -> bool {
        let t0 = std::time::Instant::now();
        while !self.is_finished() && t0.elapsed() < UNMOUNT_WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
        let done = self.is_finished();
        if done {
            let session = self.session.take();
            // fuser 0.15 unmounts the mount point once more when a session is dropped after
            // the kernel let go (its liveness poll takes the dead connection's POLLERR for
            // "mounted"). That is harmless when nothing is left at the directory, but would
            // take down what is mounted there underneath (another file system mounted on
            // the same directory, an overlay mount): then the session is not dropped (its
            // /dev/fuse descriptor stays open; only such stacked mounts pay that).
            if is_mount_point(&self.dir) {
                std::mem::forget(session);
            }
        }
        done
    }

    /// Plain unmount then wait (refused with EBUSY when busy).
    pub fn unmount(&mut self) -> std::io::Result<()> {
        self.detach(false)?;
        self.wait();
        Ok(())
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if self.session.is_some() && self.detach(false).is_ok() {
            self.wait();
        }
    }
}

/// Is `dir` a mount point now (listed in /proc/self/mountinfo, whose paths escape space,
/// tab, newline and backslash as octal)?
fn is_mount_point(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines().filter_map(|l| l.split(' ').nth(4)).any(|p| Path::new(&unescape_octal(p)) == dir)
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct =
            b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `fusermount3 -u [-z] DIR` for a daemon that is not root.
fn fusermount_unmount(dir: &Path, lazy: bool) -> std::io::Result<()> {
    let mut c = std::process::Command::new("fusermount3");
    c.arg(if lazy { "-uz" } else { "-u" }).arg(dir);
    let out = c.output()?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr);
    if msg.contains("busy") {
        return Err(std::io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(std::io::Error::other(format!("fusermount3: {}", msg.trim())))
}

/// How a dataset is mounted: the dataset properties that become mount options or change
/// what the adapters do. The default is what a FUSE mount gets without options (exec,
/// nosuid, nodev, no ACLs); the daemon fills it from the properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOpts {
    /// `acltype`: with [`AclType::Posix`] the kernel enforces POSIX ACLs.
    pub acltype: AclType,
    /// `exec=off` mounts noexec.
    pub exec: bool,
    /// `setuid=on` mounts suid (only a mount by root may), else nosuid.
    pub setuid: bool,
    /// `devices=on` mounts dev (only a mount by root may), else nodev.
    pub devices: bool,
    /// Serve read-only even when the dataset is writable.
    pub readonly: bool,
    /// Serve read-write even when the dataset's `readonly` property is on (a temporary
    /// `rw` mount option; later changes of the property do not apply to this mount).
    pub writable: bool,
    /// How reads record access times on this mount, over the dataset's `atime` and
    /// `relatime` (the temporary `atime`/`noatime`/`relatime`/`norelatime` options).
    pub atime: Option<rw::Atime>,
    /// The temporary `xattr`/`noxattr` option: serve `user.` extended attributes or not,
    /// whatever the dataset's `xattr` property says.
    pub xattr: Option<bool>,
    /// The dataset's `xattr` property is not `off` (at mount time: what a read-only mount,
    /// whose dataset cannot change, follows; read-write mounts follow the live property).
    pub xattr_prop: bool,
}

impl Default for MountOpts {
    fn default() -> Self {
        MountOpts {
            acltype: AclType::Off,
            exec: true,
            setuid: false,
            devices: false,
            readonly: false,
            writable: false,
            atime: None,
            xattr: None,
            xattr_prop: true,
        }
    }
}

impl MountOpts {
    /// The kernel mount flags for these options. suid and dev are asked for only by root:
    /// fusermount refuses them to others (and the kernel would ignore them).
    pub fn kernel_options(&self, root: bool) -> Vec<MountOption> {
        let mut v = Vec::new();
        if !self.exec {
            v.push(MountOption::NoExec);
        }
        v.push(if self.setuid && root { MountOption::Suid } else { MountOption::NoSuid });
        v.push(if self.devices && root { MountOption::Dev } else { MountOption::NoDev });
        v
    }
}

/// Changes the `noexec`, `nosuid` and `nodev` flags of the mount at `dir` in place, as
/// `zfs set exec=off` (setuid, devices) does on OpenZFS: a bind remount (`MS_REMOUNT |
/// MS_BIND`) sets the mount's own flags without involving the file system or its open
/// files. Its other flags (read-only, the atime ones) are kept as `statvfs` reports them.
/// Needs root (`CAP_SYS_ADMIN`); the caller falls back to the next mount.
pub fn set_mount_flags(dir: &Path, opts: &MountOpts, root: bool) -> Result<(), String> {
    use nix::mount::MsFlags;
    use nix::sys::statvfs::{statvfs, FsFlags};
    let now = statvfs(dir).map_err(|e| format!("{}: {e}", dir.display()))?.flags();
    let mut f = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
    for (have, set) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if now.contains(have) {
            f |= set;
        }
    }
    for o in opts.kernel_options(root) {
        f |= match o {
            MountOption::NoExec => MsFlags::MS_NOEXEC,
            MountOption::NoSuid => MsFlags::MS_NOSUID,
            MountOption::NoDev => MsFlags::MS_NODEV,
            _ => MsFlags::empty(),
        };
    }
    nix::mount::mount(None::<&str>, dir, None::<&str>, f, None::<&str>)
        .map_err(|e| format!("cannot change the mount flags of {}: {e}", dir.display()))
}

/// Asks the kernel to enforce POSIX ACLs when the dataset has them (`FUSE_POSIX_ACL`) and
/// to leave the umask to us (`FUSE_DONT_MASK`: a default ACL replaces it). A kernel without
/// the capability gets an error: serving such a dataset with its ACLs ignored would grant
/// access they deny.
fn acl_init(config: &mut KernelConfig, acl: AclType) -> Result<(), libc::c_int> {
    if acl != AclType::Posix {
        return Ok(());
    }
    use fuser::consts::{FUSE_DONT_MASK, FUSE_POSIX_ACL};
    config.add_capabilities(FUSE_POSIX_ACL | FUSE_DONT_MASK).map_err(|missing| {
        eprintln!("rzfs: the kernel lacks FUSE capabilities {missing:#x}: cannot enforce POSIX ACLs");
        libc::ENOSYS
    })
}

/// Mounts `src` read-only on `dir` with [`MountOpts::default`].
pub fn mount(src: MountSource, dir: &Path, fsname: &str) -> std::io::Result<MountHandle> {
    mount_with(src, dir, fsname, &MountOpts::default())
}

/// Mounts `src` read-only on `dir`, served by a background thread.
pub fn mount_with(
    src: MountSource,
    dir: &Path,
    fsname: &str,
    mo: &MountOpts,
) -> std::io::Result<MountHandle> {
    let names = src.snapshots.list_ids();
    let fs = ZfsFuse {
        head: Some(src.head),
        snapdir_visible: src.snapdir_visible && !src.snapdir_disabled,
        snapdir_disabled: src.snapdir_disabled,
        on_error: src.on_error,
        snap_source: src.snapshots,
        snaps: Arc::new(Mutex::new(names.into_iter().map(|(n, id)| (n, None, true, id)).collect())),
        opens: Arc::default(),
        acl: mo.acltype,
        user_xattrs: mo.xattr.unwrap_or(mo.xattr_prop),
        live: false,
        ttl: TTL,
    };
    let mut opts = vec![
        MountOption::RO,
        MountOption::FSName(fsname.to_string()),
        MountOption::Subtype("rzfs".into()),
        MountOption::DefaultPermissions,
    ];
    // allow_other lets users other than the daemon's read the mount; only root may ask
    // for it without `user_allow_other` in /etc/fuse.conf.
    if is_root() {
        opts.push(MountOption::AllowOther);
    }
    opts.extend(mo.kernel_options(is_root()));
    let name = fsname.to_string();
    let fs = guard::Guarded::new(
        fs,
        Box::new(move |op, what| eprintln!("rzfs: {name}: internal error in FUSE {op}: {what}")),
    );
    let session = fuser::spawn_mount2(fs, dir, &opts)?;
    Ok(MountHandle::new(session, dir))
}

/// A snapshot's place in the inode space: its name, its ZPL once opened, and whether it
/// still exists (a destroyed one keeps its slot, so no index is ever reused).
type SnapSlot = (String, Option<Zpl>, bool, u64);

/// Which snapshots of a mount's `.zfs/snapshot` are in use: have files or directories open
/// (OpenZFS refuses to destroy a snapshot whose automount is busy, EBUSY).
#[derive(Clone)]
pub struct SnapshotUse {
    snaps: Arc<Mutex<Vec<SnapSlot>>>,
    opens: Arc<Mutex<HashMap<u64, usize>>>,
}

impl SnapshotUse {
    /// Has snapshot `name` (the part after `@`) a file or directory open in this view?
    pub fn busy(&self, name: &str) -> bool {
        let snaps = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
        let opens = self.opens.lock().unwrap_or_else(|p| p.into_inner());
        snaps
            .iter()
            .enumerate()
            .any(|(i, s)| s.2 && s.0 == name && opens.get(&(i as u64 + 1)).is_some_and(|&n| n > 0))
    }
}

/// What `.zfs/snapshot` of a read-write mount serves ([`rw`] hands it every inode of the
/// snapshot range): the dataset's snapshots, listed again as they come and go.
pub struct SnapshotSource {
    pub snapshots: Box<dyn Snapshots>,
    /// `snapdir=visible`: list `.zfs` in the root directory.
    pub snapdir_visible: bool,
    pub on_error: ErrorSink,
}

pub(crate) struct ZfsFuse {
    /// The mounted dataset; `None` when serving only `.zfs` for a read-write mount.
    head: Option<Zpl>,
    pub(crate) snapdir_visible: bool,
    /// No `.zfs` (`snapdir=disabled`; a read-write mount is given no snapshot view then).
    snapdir_disabled: bool,
    on_error: ErrorSink,
    snap_source: Box<dyn Snapshots>,
    snaps: Arc<Mutex<Vec<SnapSlot>>>,
    /// Open files and directories per snapshot index (what makes a snapshot busy).
    opens: Arc<Mutex<HashMap<u64, usize>>>,
    /// The dataset's acltype (snapshots share it).
    acl: AclType,
    /// `user.` extended attributes are served (`xattr` property or mount option).
    user_xattrs: bool,
    /// Snapshots come and go (a read-write mount): the list is read again on lookups and
    /// listings of `.zfs/snapshot`.
    live: bool,
    /// How long the kernel may cache entries and attributes.
    ttl: Duration,
}

impl ZfsFuse {
    /// `(visible, disabled)`: `.zfs` listed in the root / not there at all.
    pub(crate) fn snapdir(&self) -> (bool, bool) {
        self.snap_source.snapdir_now().unwrap_or((self.snapdir_visible, self.snapdir_disabled))
    }

    /// The `.zfs` tree of a read-write mount: snapshots only, their list kept current,
    /// entries cached briefly (a destroyed snapshot disappears within a second).
    pub(crate) fn snapshot_view(src: SnapshotSource, acl: AclType) -> ZfsFuse {
        let names = src.snapshots.list_ids();
        ZfsFuse {
            head: None,
            snapdir_visible: src.snapdir_visible,
            snapdir_disabled: false,
            on_error: src.on_error,
            snap_source: src.snapshots,
            snaps: Arc::new(Mutex::new(names.into_iter().map(|(n, id)| (n, None, true, id)).collect())),
            opens: Arc::default(),
            acl,
            user_xattrs: true,
            live: true,
            ttl: Duration::from_secs(1),
        }
    }

    /// The snapshots behind the view, for what `mkdir`, `rmdir` and `mv` in `.zfs/snapshot`
    /// do to them.
    pub(crate) fn source(&self) -> &dyn Snapshots {
        self.snap_source.as_ref()
    }

    /// What tells which snapshots are in use, for the mount's handle.
    pub(crate) fn usage(&self) -> SnapshotUse {
        SnapshotUse { snaps: self.snaps.clone(), opens: self.opens.clone() }
    }

    /// A file or directory of a snapshot was opened (`ino` in a snapshot, not `.zfs` itself).
    pub(crate) fn note_open(&self, ino: u64) {
        let idx = ino >> OBJ_BITS;
        if idx != 0 && !is_virtual(ino) {
            *self.opens.lock().unwrap_or_else(|p| p.into_inner()).entry(idx).or_default() += 1;
        }
    }

    /// ... and released.
    pub(crate) fn note_release(&self, ino: u64) {
        let idx = ino >> OBJ_BITS;
        let mut opens = self.opens.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = opens.get_mut(&idx) {
            *n -= 1;
            if *n == 0 {
                opens.remove(&idx);
            }
        }
    }

    /// Reads the snapshot list again (a live view): gone ones lose their ZPL, new ones get
    /// new slots at the end.
    fn refresh(&self) {
        if !self.live {
            return;
        }
        let names = self.snap_source.list_ids();
        let mut snaps = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
        for slot in snaps.iter_mut() {
            if slot.2 && !names.iter().any(|(n, id)| *n == slot.0 && *id == slot.3) {
                slot.1 = None;
                slot.2 = false;
            }
        }
        for (n, id) in names {
            if !snaps.iter().any(|s| s.2 && s.0 == n) {
                snaps.push((n, None, true, id));
            }
        }
    }

    /// (snapshot index, ZPL) for an inode; index 0 is the head dataset.
    fn zpl_of(&self, ino: u64) -> Option<(u64, Zpl)> {
        let idx = ino >> OBJ_BITS;
        if idx == 0 {
            return self.head.clone().map(|h| (0, h));
        }
        let mut snaps = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
        let slot = snaps.get_mut(idx as usize - 1).filter(|s| s.2)?;
        if slot.1.is_none() {
            slot.1 = self.snap_source.open(&slot.0).ok();
        }
        slot.1.clone().map(|z| (idx, z))
    }

    fn obj_of(z: &Zpl, ino: u64) -> u64 {
        let o = ino & OBJ_MASK;
        if o == 1 {
            z.root
        } else {
            o
        }
    }

    fn ino_of(z: &Zpl, idx: u64, obj: u64) -> u64 {
        let o = if obj == z.root { 1 } else { obj };
        (idx << OBJ_BITS) | o
    }

    /// Passes an unrecoverable error to the sink, naming the snapshot the inode lives in.
    fn report(&self, ino: u64, obj: u64, e: &zpl::ZplError) {
        if e.errno() != libc::EIO {
            return;
        }
        let idx = (ino >> OBJ_BITS) as usize;
        let snaps = self.snaps.lock().unwrap_or_else(|p| p.into_inner());
        let snap = if idx == 0 { None } else { snaps.get(idx - 1).map(|(n, _, _, _)| n.clone()) };
        drop(snaps);
        (self.on_error)(snap.as_deref(), obj, e);
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, i32> {
        if ino == SNAP_DIR {
            // As OpenZFS's zpl_snapdir_getattr: two links plus one per snapshot, and the
            // time the snapshot list last changed.
            self.refresh();
            let n = self.snaps.lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|s| s.2).count();
            let (sec, nsec) = self.snap_source.changed();
            let t = UNIX_EPOCH + Duration::new(sec, nsec);
            return Ok(FileAttr { nlink: 2 + n as u32, mtime: t, ctime: t, ..virtual_dir(ino) });
        }
        if is_virtual(ino) {
            return Ok(virtual_dir(ino));
        }
        // Snapshot files keep their modes, as in OpenZFS: the mount itself is read-only.
        let (_, z) = self.zpl_of(ino).ok_or(libc::ENOENT)?;
        let a = z.getattr(Self::obj_of(&z, ino)).map_err(|e| e.errno())?;
        let mut attr = to_fuse_attr(ino, &a);
        // The root of the file system counts a visible `.zfs` as a subdirectory (zfs_getattr).
        if ino == 1 && self.head.is_some() && matches!(self.snapdir(), (true, false)) {
            attr.nlink += 1;
        }
        Ok(attr)
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn virtual_dir(ino: u64) -> FileAttr {
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FType::Directory,
        perm: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 512,
        flags: 0,
    }
}

fn ftype(t: FileType) -> FType {
    match t {
        FileType::Regular => FType::RegularFile,
        FileType::Directory => FType::Directory,
        FileType::Symlink => FType::Symlink,
        FileType::CharDevice => FType::CharDevice,
        FileType::BlockDevice => FType::BlockDevice,
        FileType::Fifo => FType::NamedPipe,
        FileType::Socket => FType::Socket,
    }
}

fn ts((s, ns): (u64, u64)) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::new(s, ns.min(999_999_999) as u32)
}

fn to_fuse_attr(ino: u64, a: &Attrs) -> FileAttr {
    FileAttr {
        ino,
        size: a.size,
        blocks: a.blocks512(),
        atime: ts(a.atime),
        mtime: ts(a.mtime),
        ctime: ts(a.ctime),
        crtime: ts(a.crtime),
        kind: ftype(a.kind()),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.links as u32,
        uid: a.uid as u32,
        gid: a.gid as u32,
        rdev: a.rdev as u32,
        blksize: a.blksize.max(512) as u32,
        flags: 0,
    }
}

fn dtype_to_ftype(d: u8) -> FType {
    match d {
        4 => FType::Directory,
        10 => FType::Symlink,
        2 => FType::CharDevice,
        6 => FType::BlockDevice,
        1 => FType::NamedPipe,
        12 => FType::Socket,
        _ => FType::RegularFile,
    }
}

impl Filesystem for ZfsFuse {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        acl_init(config, self.acl)
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let name = name.as_bytes();
        let ttl = self.ttl;
        if parent == 1 && name == b".zfs" && !self.snapdir().1 {
            return reply.entry(&ttl, &virtual_dir(CTL_DIR), 0);
        }
        if parent == CTL_DIR {
            return if name == b"snapshot" {
                match self.attr(SNAP_DIR) {
                    Ok(a) => reply.entry(if self.live { &Duration::ZERO } else { &ttl }, &a, 0),
                    Err(e) => reply.error(e),
                }
            } else {
                reply.error(libc::ENOENT)
            };
        }
        if parent == SNAP_DIR {
            self.refresh();
            let pos = self
                .snaps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .position(|(n, _, live, _)| *live && n.as_bytes() == name);
            let Some(i) = pos else {
                return reply.error(libc::ENOENT);
            };
            let ino = ((i as u64 + 1) << OBJ_BITS) | 1;
            // Not cached by the kernel: snapshots come and go under a live mount (destroy,
            // rename, promote moves them to another file system), and a cached entry would
            // show one that is gone.
            return match self.attr(ino) {
                Ok(a) => reply.entry(&Duration::ZERO, &a, 0),
                Err(e) => reply.error(e),
            };
        }
        let Some((idx, z)) = self.zpl_of(parent) else {
            return reply.error(libc::ENOENT);
        };
        match z.lookup(Self::obj_of(&z, parent), name) {
            Ok(Some(e)) => {
                let ino = Self::ino_of(&z, idx, e.object);
                match self.attr(ino) {
                    Ok(a) => reply.entry(&ttl, &a, 0),
                    Err(e) => reply.error(e),
                }
            }
            Ok(None) => reply.error(libc::ENOENT),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        // `.zfs/snapshot` of a live mount changes with every snapshot taken or destroyed.
        let ttl = if self.live && ino == SNAP_DIR { Duration::ZERO } else { self.ttl };
        match self.attr(ino) {
            Ok(a) => reply.attr(&ttl, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        let Some((_, z)) = self.zpl_of(ino) else {
            return reply.error(libc::ENOENT);
        };
        match z.readlink(Self::obj_of(&z, ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e.errno()),
        }
    }

    /// `FS_IOC_GETVERSION` and `FS_IOC_GETFLAGS` (see [`rw::ioctl_answer`]).
    fn ioctl(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _flags: u32,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let Some((_, z)) = self.zpl_of(ino) else {
            return reply.error(libc::ENOENT);
        };
        match z.getattr(Self::obj_of(&z, ino)).map_err(|e| e.errno()).and_then(|a| rw::ioctl_answer(cmd, &a))
        {
            Ok(b) => reply.ioctl(0, &b),
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        self.note_open(ino);
        reply.opened(0, fuser::consts::FOPEN_KEEP_CACHE);
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
        self.note_release(ino);
        reply.ok();
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        self.note_open(ino);
        reply.opened(0, 0);
    }

    fn releasedir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _flags: i32, reply: ReplyEmpty) {
        self.note_release(ino);
        reply.ok();
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock: Option<u64>,
        reply: ReplyData,
    ) {
        let Some((_, z)) = self.zpl_of(ino) else {
            return reply.error(libc::ENOENT);
        };
        let obj = Self::obj_of(&z, ino);
        match z.read(obj, offset.max(0) as u64, size as usize) {
            Ok(d) => reply.data(&d),
            Err(e) => {
                self.report(ino, obj, &e);
                reply.error(e.errno())
            }
        }
    }

    /// `lseek(SEEK_DATA/SEEK_HOLE)` over the committed (read-only) blocks.
    fn lseek(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        whence: i32,
        reply: fuser::ReplyLseek,
    ) {
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return reply.error(libc::EINVAL),
        };
        let Some((_, z)) = self.zpl_of(ino) else {
            return reply.error(libc::ENOENT);
        };
        let obj = Self::obj_of(&z, ino);
        let Ok(off) = u64::try_from(offset) else { return reply.error(libc::ENXIO) };
        match z.seek(obj, off, data) {
            Ok(Some(at)) => reply.offset(i64::try_from(at).unwrap_or(i64::MAX)),
            Ok(None) => reply.error(libc::ENXIO),
            Err(e) => {
                self.report(ino, obj, &e);
                reply.error(e.errno())
            }
        }
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let mut entries: Vec<(u64, FType, Vec<u8>)> = Vec::new();
        if ino == CTL_DIR {
            entries.push((CTL_DIR, FType::Directory, b".".to_vec()));
            entries.push((1, FType::Directory, b"..".to_vec()));
            entries.push((SNAP_DIR, FType::Directory, b"snapshot".to_vec()));
        } else if ino == SNAP_DIR {
            entries.push((SNAP_DIR, FType::Directory, b".".to_vec()));
            entries.push((CTL_DIR, FType::Directory, b"..".to_vec()));
            if offset == 0 {
                self.refresh();
            }
            let names: Vec<(usize, String)> = self
                .snaps
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .enumerate()
                .filter(|(_, s)| s.2)
                .map(|(i, s)| (i, s.0.clone()))
                .collect();
            for (i, n) in names {
                entries.push((((i as u64 + 1) << OBJ_BITS) | 1, FType::Directory, n.into_bytes()));
            }
        } else {
            let Some((idx, z)) = self.zpl_of(ino) else {
                return reply.error(libc::ENOENT);
            };
            let obj = Self::obj_of(&z, ino);
            let list = match z.readdir(obj) {
                Ok(l) => l,
                Err(e) => return reply.error(e.errno()),
            };
            let parent = z.getattr(obj).map(|a| a.parent).unwrap_or(obj);
            entries.push((ino, FType::Directory, b".".to_vec()));
            entries.push((Self::ino_of(&z, idx, parent), FType::Directory, b"..".to_vec()));
            if ino == 1 && self.snapdir().0 {
                entries.push((CTL_DIR, FType::Directory, b".zfs".to_vec()));
            }
            // Names no file can have (crafted `..`, `a/b`, NUL) are left out: the kernel
            // would reject the whole listing over one of them.
            for e in list.into_iter().filter(|e| zpl::host_name_problem(&e.name).is_none()) {
                entries.push((Self::ino_of(&z, idx, e.object), dtype_to_ftype(e.dtype), e.name));
            }
        }
        for (i, (eino, kind, name)) in entries.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(eino, (i + 1) as i64, kind, OsStr::from_bytes(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 512);
    }

    fn getxattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr) {
        if is_virtual(ino) {
            return reply.error(libc::ENODATA);
        }
        let Some((_, z)) = self.zpl_of(ino) else {
            return reply.error(libc::ENOENT);
        };
        if name.as_bytes().starts_with(b"user.") && !self.user_xattrs {
            return reply.error(libc::EOPNOTSUPP);
        }
        match z.xattr_get(Self::obj_of(&z, ino), name.as_bytes(), self.acl) {
            Ok(Some(v)) => xattr_reply(reply, &v, size),
            Ok(None) => reply.error(libc::ENODATA),
            Err(e) => reply.error(e.errno()),
        }
    }

    fn listxattr(&mut self, req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        if is_virtual(ino) {
            return xattr_reply(reply, &[], size);
        }
        let Some((_, z)) = self.zpl_of(ino) else {
            return reply.error(libc::ENOENT);
        };
        match z.xattr_list(Self::obj_of(&z, ino), self.acl, req.uid() == 0) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names.into_iter().filter(|n| self.user_xattrs || !n.starts_with(b"user.")) {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                xattr_reply(reply, &buf, size)
            }
            Err(e) => reply.error(e.errno()),
        }
    }
}

/// `.zfs` and `.zfs/snapshot` have no ZPL object behind them.
fn is_virtual(ino: u64) -> bool {
    ino == CTL_DIR || ino == SNAP_DIR
}

/// Is `ino` one of `.zfs`'s (a snapshot's object or a virtual directory), not the head's?
pub(crate) fn in_snapshot_space(ino: u64) -> bool {
    ino >> OBJ_BITS != 0
}

fn xattr_reply(reply: ReplyXattr, v: &[u8], size: u32) {
    if size == 0 {
        reply.size(v.len() as u32);
    } else if (size as usize) < v.len() {
        reply.error(libc::ERANGE);
    } else {
        reply.data(v);
    }
}

/// Does a process have its current directory at or below `dir`? A current directory holds
/// no FUSE handle (chdir sends no OPENDIR), so the kernel's own view is asked: OpenZFS's
/// snapshots are automounts on Linux, and a process sitting in one makes its unmount, and
/// so the snapshot's destroy, fail with EBUSY (ZTS `zfs_unmount_009_pos`).
fn cwd_under(dir: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.flatten().any(|e| {
        e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
    })
}
