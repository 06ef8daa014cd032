//! # zvol — volumes served as files over FUSE
//!
//! The kernel here has neither nbd nor ublk, so a volume reaches block-device users as a
//! regular file of a FUSE file system (one per daemon), which the daemon attaches to a
//! loop device (`/dev/zvol/POOL/VOL` links to it, as udev makes for OpenZFS). The tree
//! mirrors dataset names: `POOL/` and parent file systems are directories, each volume a
//! file of `volsize` bytes.
//!
//! Theory.
//! * **Inodes** are handed out per path on first sight and never reused while mounted, so
//!   a volume destroyed and re-created under the same name keeps its inode; the size is
//!   asked of the backend on every getattr, so `volsize` changes show at once.
//! * **I/O** goes to [`VolBackend`] one request at a time; reads and writes outside
//!   `[0, volsize)` are refused (EINVAL) or cut at the end (reads), as a block device
//!   does. Writes reach the open txg; `fsync` (the loop driver's flush) makes them durable
//!   and is answered off the request thread, so a sync never stalls other requests.
//!   `fallocate(PUNCH_HOLE)` (the loop driver's discard) frees blocks.
//! * **Sizes cannot change through the file**: truncate is refused (EPERM); `zfs set
//!   volsize` is the way, and `losetup -c` tells the loop device.
//! * **Permissions**: files are 0660 root:disk (as OpenZFS's udev rules give /dev/zdN),
//!   checked by the kernel (`default_permissions`).

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::MountHandle;

/// Attribute cache time: short, since volumes come and go with `zfs create/destroy`.
const TTL: Duration = Duration::from_millis(200);
/// Largest WRITE request asked of the kernel.
const MAX_WRITE: u32 = 1 << 20;
/// The `disk` group, owner of block devices on Debian.
const DISK_GID: u32 = 6;

/// What the daemon provides: its volumes by full dataset name (`pool/a/vol`).
pub trait VolBackend: Send + Sync + 'static {
    /// The volumes served now.
    fn volumes(&self) -> Vec<String>;
    /// `volsize` of a volume (errno if it is gone).
    fn size(&self, name: &str) -> Result<u64, i32>;
    /// Whether the volume can only be read (read-only pool, `readonly=on`, a snapshot).
    fn readonly(&self, name: &str) -> bool;
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), i32>;
    fn write(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), i32>;
    fn discard(&self, name: &str, offset: u64, len: u64) -> Result<(), i32>;
    /// Makes every write so far durable.
    fn sync(&self, name: &str) -> Result<(), i32>;
    /// A handler panicked (the daemon suspends the pool of `name`).
    fn poison(&self, _name: &str, _what: &str) {}
}

/// Mounts the volume tree of `backend` on `dir`.
pub fn mount_volumes<B: VolBackend>(backend: Arc<B>, dir: &Path) -> std::io::Result<MountHandle> {
    let fs =
        VolFs { backend: backend.clone(), inodes: HashMap::new(), paths: vec![String::new(), String::new()] };
    let fs = crate::guard::Guarded::new(
        fs,
        Box::new(move |op, what| {
            eprintln!("rzfs: volumes: internal error in FUSE {op}: {what}");
            for v in backend.volumes() {
                backend.poison(&v, &format!("internal error in FUSE {op} on the volume tree: {what}"));
            }
        }),
    );
    let mut opts = vec![MountOption::FSName("rzfs-volumes".into()), MountOption::Subtype("rzfs".into())];
    opts.push(MountOption::DefaultPermissions);
    if super::is_root() {
        opts.push(MountOption::AllowOther);
    }
    opts.push(MountOption::NoExec);
    opts.push(MountOption::NoSuid);
    opts.push(MountOption::NoDev);
    let session = fuser::spawn_mount2(fs, dir, &opts)?;
    Ok(MountHandle::new(session, dir))
}

struct VolFs<B: VolBackend> {
    backend: Arc<B>,
    /// Path (`""` root, `pool`, `pool/a`, `pool/a/vol`) to inode.
    inodes: HashMap<String, u64>,
    /// Inode to path (index = inode; 0 unused).
    paths: Vec<String>,
}

enum Node {
    Dir,
    Vol(u64),
}

impl<B: VolBackend> VolFs<B> {
    fn ino_of(&mut self, path: &str) -> u64 {
        if path.is_empty() {
            return 1;
        }
        if let Some(&i) = self.inodes.get(path) {
            return i;
        }
        let i = self.paths.len() as u64;
        self.paths.push(path.to_string());
        self.inodes.insert(path.to_string(), i);
        i
    }

    fn path_of(&self, ino: u64) -> Result<String, i32> {
        self.paths.get(ino as usize).cloned().filter(|p| ino == 1 || !p.is_empty()).ok_or(libc::ENOENT)
    }

    /// What `path` is now: a directory on the way to some volume, or a volume.
    fn node(&self, path: &str) -> Result<Node, i32> {
        if path.is_empty() {
            return Ok(Node::Dir);
        }
        let vols = self.backend.volumes();
        if vols.iter().any(|v| v == path) {
            return Ok(Node::Vol(self.backend.size(path)?));
        }
        let prefix = format!("{path}/");
        if vols.iter().any(|v| v.starts_with(&prefix)) {
            return Ok(Node::Dir);
        }
        Err(libc::ENOENT)
    }

    fn attr(&mut self, path: &str) -> Result<FileAttr, i32> {
        let ino = self.ino_of(path);
        let now = SystemTime::now();
        let (kind, perm, size, nlink, gid) = match self.node(path)? {
            Node::Dir => (FileType::Directory, 0o755, 0, 2, 0),
            Node::Vol(size) => {
                let perm = if self.backend.readonly(path) { 0o440 } else { 0o660 };
                (FileType::RegularFile, perm, size, 1, DISK_GID)
            }
        };
        Ok(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind,
            perm,
            nlink,
            uid: 0,
            gid,
            rdev: 0,
            blksize: 1 << 16,
            flags: 0,
        })
    }

    fn vol_path(&self, ino: u64) -> Result<String, i32> {
        let p = self.path_of(ino)?;
        match self.node(&p)? {
            Node::Vol(_) => Ok(p),
            Node::Dir => Err(libc::EISDIR),
        }
    }

    /// Children of directory `path`: (name, is_dir).
    fn children(&self, path: &str) -> Vec<(String, bool)> {
        let mut out = BTreeSet::new();
        for v in self.backend.volumes() {
            let rest = if path.is_empty() {
                Some(v.as_str())
            } else {
                v.strip_prefix(path).and_then(|r| r.strip_prefix('/'))
            };
            if let Some(rest) = rest {
                match rest.split_once('/') {
                    Some((d, _)) => out.insert((d.to_string(), true)),
                    None => out.insert((rest.to_string(), false)),
                };
            }
        }
        out.into_iter().collect()
    }

    fn do_read(&mut self, ino: u64, offset: i64, size: u32) -> Result<Vec<u8>, i32> {
        let p = self.vol_path(ino)?;
        let vsize = self.backend.size(&p)?;
        let off = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        if off >= vsize {
            return Ok(Vec::new());
        }
        let n = u64::from(size).min(vsize - off) as usize;
        let mut buf = vec![0u8; n];
        self.backend.read(&p, off, &mut buf)?;
        Ok(buf)
    }

    fn do_write(&mut self, ino: u64, offset: i64, data: &[u8]) -> Result<u32, i32> {
        let p = self.vol_path(ino)?;
        if self.backend.readonly(&p) {
            return Err(libc::EROFS);
        }
        let vsize = self.backend.size(&p)?;
        let off = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        if off >= vsize {
            return Err(libc::ENOSPC);
        }
        // A write running past the end is cut there, as on a block device.
        let n = (data.len() as u64).min(vsize - off) as usize;
        self.backend.write(&p, off, &data[..n])?;
        Ok(n as u32)
    }
}

impl<B: VolBackend> Filesystem for VolFs<B> {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_write(MAX_WRITE);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let dir = self.path_of(parent)?;
            let name = name.to_str().ok_or(libc::ENOENT)?;
            let path = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
            self.attr(&path)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.path_of(ino).and_then(|p| self.attr(&p)) {
            Ok(a) => reply.attr(&TTL, &a),
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
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let r = (|| {
            let p = self.path_of(ino)?;
            let a = self.attr(&p)?;
            // A device's size and ownership are not the file's to change; times are
            // accepted and not kept.
            if size.is_some_and(|s| s != a.size) || mode.is_some() || uid.is_some() || gid.is_some() {
                return Err(libc::EPERM);
            }
            Ok(a)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let r = self.vol_path(ino).and_then(|p| {
            let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
            if write && self.backend.readonly(&p) {
                return Err(libc::EROFS);
            }
            Ok(())
        });
        match r {
            // DIRECT_IO keeps the kernel from caching a second copy of what the loop
            // device above already caches.
            Ok(()) => reply.opened(0, fuser::consts::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
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
        match self.do_read(ino, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
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
        match self.do_write(ino, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        let p = match self.vol_path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let backend = self.backend.clone();
        let spawned =
            std::thread::Builder::new().name("rzfs-vol-fsync".into()).spawn(move || match backend.sync(&p) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            });
        if let Err(e) = spawned {
            eprintln!("rzfs: volumes: cannot start an fsync thread: {e}");
        }
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        let dir = match self.path_of(ino) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let mut list =
            vec![(ino, FileType::Directory, ".".to_string()), (1, FileType::Directory, "..".into())];
        for (name, is_dir) in self.children(&dir) {
            let path = if dir.is_empty() { name.clone() } else { format!("{dir}/{name}") };
            let kind = if is_dir { FileType::Directory } else { FileType::RegularFile };
            list.push((self.ino_of(&path), kind, name));
        }
        for (i, (ino, kind, name)) in list.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(ino, (i + 1) as i64, kind, OsStr::new(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let total: u64 = self.backend.volumes().iter().filter_map(|v| self.backend.size(v).ok()).sum();
        reply.statfs(total / 4096, 0, 0, 0, 0, 4096, 255, 4096);
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
        let r = (|| {
            let p = self.vol_path(ino)?;
            if self.backend.readonly(&p) {
                return Err(libc::EROFS);
            }
            let (off, len) = (
                u64::try_from(offset).map_err(|_| libc::EINVAL)?,
                u64::try_from(length).map_err(|_| libc::EINVAL)?,
            );
            if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 {
                return self.backend.discard(&p, off, len);
            }
            // Plain preallocation within the device: every block already exists.
            let size = self.backend.size(&p)?;
            if mode & !libc::FALLOC_FL_KEEP_SIZE == 0 && off.saturating_add(len) <= size {
                return Ok(());
            }
            Err(libc::EOPNOTSUPP)
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
