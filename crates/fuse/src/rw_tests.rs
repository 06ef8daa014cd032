//! Tests of the read-write adapter: its logic against an in-memory dataset (an objset that
//! is never synced, over a pipeline with no vdevs), and, where /dev/fuse is usable, a real
//! mount exercised through std::fs.

use super::*;
use proptest::prelude::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

struct MemState {
    zpl: ZplWriter,
    os: DirtyObjset,
    zaps: ZapCache,
}

/// A dataset that lives only in its open txg.
struct MemBackend {
    st: Mutex<MemState>,
    ro: AtomicBool,
    syncs: AtomicU64,
    /// Operations run (to see how large the kernel's WRITE requests are).
    calls: AtomicU64,
    /// Refuse changes that need space (Write, Meta) with ENOSPC, as a full pool does.
    full: AtomicBool,
    /// The kinds of the operations run.
    ops: Mutex<Vec<Op>>,
    /// The dataset's access-time policy.
    atime: Mutex<Atime>,
    /// The dataset's `readonly` property (set while mounted).
    prop_ro: AtomicBool,
    /// The dataset's `xattr` property is `off`.
    prop_noxattr: AtomicBool,
}

impl MemBackend {
    fn new() -> Arc<MemBackend> {
        let zio = Arc::new(zio::Zio::new(Vec::new(), codec::checksum::ChecksumCtx::default()));
        let reader = dmu::Reader::new(zio, Arc::new(arc::BlockCache::new(1 << 20)));
        let mut os = DirtyObjset::create(&reader, ondisk::objset::DMU_OST_ZFS);
        let mut zaps = ZapCache::new();
        let zpl = ZplWriter::create_fs(&mut os, &mut zaps, now(), 0, 0).expect("create_fs");
        Arc::new(MemBackend {
            st: Mutex::new(MemState { zpl, os, zaps }),
            ro: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            full: AtomicBool::new(false),
            ops: Mutex::new(Vec::new()),
            atime: Mutex::new(Atime::Off),
            prop_ro: AtomicBool::new(false),
            prop_noxattr: AtomicBool::new(false),
        })
    }
}

impl RwBackend for MemBackend {
    fn with(
        &self,
        op: Op,
        f: &mut dyn FnMut(RwCtx<'_>) -> Result<(), ZplWriteError>,
    ) -> Result<(), ZplWriteError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
        if self.full.load(Ordering::Relaxed) && matches!(op, Op::Write { .. } | Op::Meta) {
            return Err(ZplWriteError::Errno(libc::ENOSPC, "pool is full".into()));
        }
        let mut g = self.st.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *g;
        let atime = *self.atime.lock().unwrap_or_else(|p| p.into_inner());
        let readonly = self.prop_ro.load(Ordering::Relaxed);
        f(RwCtx {
            zpl: &mut st.zpl,
            os: &mut st.os,
            zaps: &mut st.zaps,
            recordsize: 128 << 10,
            atime,
            readonly,
            xattr: !self.prop_noxattr.load(Ordering::Relaxed),
        })
    }
    fn sync(&self) -> Result<(), String> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn readonly(&self) -> bool {
        self.ro.load(Ordering::Relaxed)
    }
    fn space(&self) -> (u64, u64, u64, u64) {
        (1 << 30, 1 << 29, 10, 1000)
    }
}

fn fs() -> (RwFs<MemBackend>, Arc<MemBackend>) {
    let b = MemBackend::new();
    (RwFs::new(b.clone()).unwrap(), b)
}

const ME: (u32, u32) = (1000, 100);

/// On a full pool, changes that need space fail with ENOSPC and change nothing, while
/// changes that free space (unlink, truncate, rmdir) still work.
#[test]
fn full_pool_refuses_growth_and_allows_frees() {
    let (mut f, b) = fs();
    let a = mkfile(&mut f, 1, "a", &[7u8; 5000]);
    let ((d, _), _) = f.do_create(ME, 1, b"big", 0o644, 0o022).unwrap();
    f.do_write(d.ino, 0, &[1u8; 100]).unwrap();
    b.full.store(true, Ordering::Relaxed);
    assert_eq!(f.do_write(d.ino, 100, &[2u8; 100]), Err(libc::ENOSPC));
    assert_eq!(f.do_mkdir(ME, 1, b"dir", 0o755, 0o022).err(), Some(libc::ENOSPC));
    assert_eq!(f.do_read(d.ino, 0, 300).unwrap(), vec![1u8; 100], "the refused write changed nothing");
    let shrink = SetAttr { size: Some(10), ..SetAttr::default() };
    assert_eq!(f.do_setattr(d.ino, shrink).unwrap().size, 10);
    f.do_release(d.ino).unwrap();
    f.do_unlink(1, b"a").unwrap();
    assert!(f.do_lookup(1, b"a").is_err());
    let _ = a;
    let ops = b.ops.lock().unwrap().clone();
    assert!(
        ops.contains(&Op::Free)
            && ops.iter().any(|o| matches!(o, Op::Write { len: 100, .. }))
            && ops.contains(&Op::Meta)
    );
}

fn mkfile(f: &mut RwFs<MemBackend>, dir: u64, name: &str, data: &[u8]) -> u64 {
    let ((a, _), _) = f.do_create(ME, dir, name.as_bytes(), 0o644, 0).unwrap();
    f.do_write(a.ino, 0, data).unwrap();
    f.do_release(a.ino).unwrap();
    a.ino
}

fn names(f: &mut RwFs<MemBackend>, dir: u64) -> Vec<String> {
    let fh = f.do_opendir(dir).unwrap();
    let l = f.do_readdir(dir, fh, 0).unwrap();
    l.into_iter().map(|(_, e)| String::from_utf8(e.name).unwrap()).collect()
}

#[test]
fn root_is_inode_one_and_its_own_parent() {
    let (f, _) = fs();
    let a = f.do_getattr(1).unwrap();
    assert_eq!((a.ino, a.kind, a.perm, a.nlink), (1, FType::Directory, 0o755, 2));
    let (dotdot, _) = f.do_lookup(1, b"..").unwrap();
    assert_eq!(dotdot.ino, 1);
    assert_eq!(f.do_lookup(1, b"nope").unwrap_err(), libc::ENOENT);
}

#[test]
fn create_write_read_and_attributes() {
    let (mut f, _) = fs();
    let ino = mkfile(&mut f, 1, "a", b"hello world");
    let (a, gen) = f.do_lookup(1, b"a").unwrap();
    assert_eq!(
        (a.ino, a.size, a.kind, a.perm, a.uid, a.gid),
        (ino, 11, FType::RegularFile, 0o644, 1000, 100)
    );
    assert!(gen > 0);
    assert_eq!(f.do_read(ino, 6, 100).unwrap(), b"world");
    assert_eq!(f.do_read(ino, 100, 10).unwrap(), b"");
    // A write past the end leaves a hole that reads as zeros.
    f.do_write(ino, 300_000, b"x").unwrap();
    assert_eq!(f.do_getattr(ino).unwrap().size, 300_001);
    assert_eq!(f.do_read(ino, 299_998, 3).unwrap(), b"\0\0x");
    assert_eq!(f.do_read(ino, -1, 3).unwrap_err(), libc::EINVAL);
    assert_eq!(names(&mut f, 1), [".", "..", "a"]);
    assert_eq!(f.do_create(ME, 1, b"a", 0o644, 0).unwrap_err(), libc::EEXIST);
}

#[test]
fn setattr_mode_owner_size_and_times() {
    let (mut f, _) = fs();
    let ino = mkfile(&mut f, 1, "a", &[7u8; 5000]);
    let t = UNIX_EPOCH + Duration::new(1_000_000, 5);
    let sa =
        set_attr(Some(0o100600), Some(1), Some(2), Some(10), Some(TimeOrNow::SpecificTime(t)), None, now());
    let a = f.do_setattr(ino, sa).unwrap();
    assert_eq!((a.perm, a.uid, a.gid, a.size, a.atime), (0o600, 1, 2, 10, t));
    assert_eq!(f.do_read(ino, 0, 100).unwrap(), [7u8; 10]);
    // Growing again reads zeros past the old end, not the truncated bytes.
    f.do_setattr(ino, set_attr(None, None, None, Some(20), None, None, now())).unwrap();
    assert_eq!(f.do_read(ino, 8, 100).unwrap(), [7, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let before = SystemTime::now() - Duration::from_secs(2);
    let a = f.do_setattr(ino, set_attr(None, None, None, None, None, Some(TimeOrNow::Now), now())).unwrap();
    assert!(a.mtime > before && a.ctime > before);
    let pre_epoch = UNIX_EPOCH - Duration::new(100, 250);
    let a = f.do_setattr(
        ino,
        set_attr(None, None, None, None, None, Some(TimeOrNow::SpecificTime(pre_epoch)), now()),
    );
    assert_eq!(a.unwrap().mtime, pre_epoch);
    // Nothing to change is a getattr.
    assert_eq!(f.do_setattr(ino, SetAttr::default()).unwrap().ino, ino);
    let d = f.do_mkdir(ME, 1, b"d", 0o755, 0).unwrap().0.ino;
    assert_eq!(
        f.do_setattr(d, set_attr(None, None, None, Some(0), None, None, now())).unwrap_err(),
        libc::EISDIR
    );
}

#[test]
fn directories_links_symlinks_and_devices() {
    let (mut f, _) = fs();
    let d = f.do_mkdir(ME, 1, b"d", 0o750, 0).unwrap().0;
    assert_eq!((d.kind, d.perm, d.nlink), (FType::Directory, 0o750, 2));
    assert_eq!(f.do_getattr(1).unwrap().nlink, 3);
    let ino = mkfile(&mut f, d.ino, "f", b"abc");
    let (l, _) = f.do_link(ino, 1, b"hard").unwrap();
    assert_eq!((l.ino, l.nlink), (ino, 2));
    let (s, _) = f.do_symlink(ME, 1, b"sym", b"d/f").unwrap();
    assert_eq!((s.kind, s.size), (FType::Symlink, 3));
    assert_eq!(f.do_readlink(s.ino).unwrap(), b"d/f");
    assert_eq!(f.do_readlink(ino).unwrap_err(), libc::EINVAL);
    let dev = (8 << 8) | 1; // userspace makedev(8, 1)
    let (c, _) = f.do_mknod(ME, 1, b"sda1", libc::S_IFBLK | 0o600, 0, dev).unwrap();
    assert_eq!((c.kind, c.rdev), (FType::BlockDevice, dev));
    let (p, _) = f.do_mknod(ME, 1, b"fifo", libc::S_IFIFO | 0o600, 0, 0).unwrap();
    assert_eq!(p.kind, FType::NamedPipe);
    assert_eq!(f.do_rmdir(1, b"d").unwrap_err(), libc::ENOTEMPTY);
    assert_eq!(f.do_unlink(1, b"d").unwrap_err(), libc::EISDIR);
    f.do_unlink(d.ino, b"f").unwrap();
    assert_eq!(f.do_getattr(ino).unwrap().nlink, 1);
    f.do_rmdir(1, b"d").unwrap();
    assert_eq!(f.do_getattr(1).unwrap().nlink, 2);
    assert_eq!(names(&mut f, 1), [".", "..", "fifo", "hard", "sda1", "sym"]);
    // `..` of a subdirectory names its parent.
    let d2 = f.do_mkdir(ME, 1, b"d2", 0o755, 0).unwrap().0.ino;
    let d3 = f.do_mkdir(ME, d2, b"d3", 0o755, 0).unwrap().0.ino;
    let l = f.do_readdir(d3, 0, 0).unwrap();
    assert_eq!((l[1].1.ino, l[1].1.name.as_slice()), (d2, &b".."[..]));
}

#[test]
fn unlink_while_open_keeps_the_file_until_the_last_release() {
    let (mut f, _) = fs();
    let ((a, _), _) = f.do_create(ME, 1, b"tmp", 0o600, 0).unwrap();
    f.do_write(a.ino, 0, b"still here").unwrap();
    f.do_open(a.ino, libc::O_RDONLY).unwrap();
    f.do_unlink(1, b"tmp").unwrap();
    assert_eq!(f.do_lookup(1, b"tmp").unwrap_err(), libc::ENOENT);
    assert_eq!(f.do_getattr(a.ino).unwrap().nlink, 0);
    f.do_write(a.ino, 10, b"!").unwrap();
    f.do_release(a.ino).unwrap();
    assert_eq!(f.do_read(a.ino, 0, 100).unwrap(), b"still here!");
    f.do_release(a.ino).unwrap();
    assert_eq!(f.do_getattr(a.ino).unwrap_err(), libc::ENOENT);
    {
        let files = lock(&f.files);
        assert!(files.orphans.is_empty() && files.opens.is_empty());
    }
    // A closed file's last unlink frees it at once.
    let ino = mkfile(&mut f, 1, "b", b"x");
    f.do_unlink(1, b"b").unwrap();
    assert_eq!(f.do_getattr(ino).unwrap_err(), libc::ENOENT);
}

#[test]
fn rename_over_an_open_file_and_flags() {
    let (mut f, _) = fs();
    let a = mkfile(&mut f, 1, "a", b"new");
    let b = mkfile(&mut f, 1, "b", b"old");
    f.do_open(b, libc::O_RDONLY).unwrap();
    assert_eq!(f.do_rename(ME, (1, b"a"), (1, b"b"), libc::RENAME_NOREPLACE).unwrap_err(), libc::EEXIST);
    let both = libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE;
    assert_eq!(f.do_rename(ME, (1, b"a"), (1, b"b"), both).unwrap_err(), libc::EINVAL);
    assert_eq!(f.do_rename(ME, (1, b"a"), (1, b"b"), 1 << 7).unwrap_err(), libc::EINVAL);
    f.do_rename(ME, (1, b"a"), (1, b"b"), 0).unwrap();
    assert_eq!(f.do_lookup(1, b"b").unwrap().0.ino, a);
    assert_eq!(f.do_read(b, 0, 10).unwrap(), b"old");
    f.do_release(b).unwrap();
    assert_eq!(f.do_getattr(b).unwrap_err(), libc::ENOENT);
    let d = f.do_mkdir(ME, 1, b"d", 0o755, 0).unwrap().0.ino;
    f.do_rename(ME, (1, b"b"), (d, b"c"), libc::RENAME_NOREPLACE).unwrap();
    assert_eq!(names(&mut f, d), [".", "..", "c"]);
    assert_eq!(f.do_rename(ME, (1, b"d"), (d, b"x"), 0).unwrap_err(), libc::EINVAL);
}

/// RENAME_EXCHANGE swaps two entries (a file and a directory across parents moves the
/// directory's `..` link); RENAME_WHITEOUT leaves a character device 0:0 at the old name.
#[test]
fn rename_exchange_and_whiteout() {
    let (mut f, _) = fs();
    let x = mkfile(&mut f, 1, "x", b"x");
    let d = f.do_mkdir(ME, 1, b"d", 0o755, 0).unwrap().0.ino;
    let e = f.do_mkdir(ME, d, b"e", 0o755, 0).unwrap().0.ino;
    assert_eq!(f.do_rename(ME, (1, b"x"), (1, b"nope"), libc::RENAME_EXCHANGE).unwrap_err(), libc::ENOENT);
    f.do_rename(ME, (1, b"x"), (1, b"x"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(f.do_lookup(1, b"x").unwrap().0.ino, x);
    // x (in the root) and d/e (a directory) trade places.
    let links = |f: &mut RwFs<MemBackend>, i: u64| f.do_getattr(i).unwrap().nlink;
    let (root_links, d_links) = (links(&mut f, 1), links(&mut f, d));
    f.do_rename(ME, (1, b"x"), (d, b"e"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(f.do_lookup(1, b"x").unwrap().0.ino, e);
    assert_eq!(f.do_lookup(d, b"e").unwrap().0.ino, x);
    assert_eq!(f.do_lookup(e, b"..").unwrap().0.ino, 1);
    assert_eq!((links(&mut f, 1), links(&mut f, d)), (root_links + 1, d_links - 1));
    assert_eq!(f.do_read(x, 0, 10).unwrap(), b"x");
    // '.' and '..' are not names that can be swapped.
    assert_eq!(f.do_rename(ME, (1, b"x"), (e, b"."), libc::RENAME_EXCHANGE).unwrap_err(), libc::EINVAL);
    f.do_rename(ME, (d, b"e"), (1, b"moved"), libc::RENAME_WHITEOUT).unwrap();
    assert_eq!(f.do_lookup(1, b"moved").unwrap().0.ino, x);
    let w = f.do_lookup(d, b"e").unwrap().0;
    assert_eq!((w.kind, w.perm, w.rdev), (fuser::FileType::CharDevice, 0, 0));
}

#[test]
fn readdir_offsets_survive_removals_between_calls() {
    let (mut f, _) = fs();
    for i in 0..6 {
        mkfile(&mut f, 1, &format!("f{i}"), b"");
    }
    let fh = f.do_opendir(1).unwrap();
    let first = f.do_readdir(1, fh, 0).unwrap();
    assert_eq!(first.len(), 8);
    // The caller consumed three entries, then removed them (rm -r does this).
    for (_, e) in &first[2..5] {
        f.do_unlink(1, &e.name).unwrap();
    }
    let rest = f.do_readdir(1, fh, first[4].0).unwrap();
    let got: Vec<_> = rest.iter().map(|(_, e)| e.name.clone()).collect();
    assert_eq!(got, [b"f3".to_vec(), b"f4".to_vec(), b"f5".to_vec()]);
    // Offset 0 (rewinddir) reads the directory again.
    assert_eq!(f.do_readdir(1, fh, 0).unwrap().len(), 5);
    let plain = mkfile(&mut f, 1, "plain", b"");
    assert_eq!(f.do_opendir(plain).unwrap_err(), libc::ENOTDIR);
}

#[test]
fn xattrs_probe_erange_and_flags() {
    let (mut f, _) = fs();
    let ino = mkfile(&mut f, 1, "x", b"");
    assert_eq!(f.do_getxattr(ino, b"user.a", 0).unwrap_err(), libc::ENODATA);
    assert_eq!(f.do_listxattr(0, ino, 0).unwrap(), XattrAnswer::Size(0));
    f.do_setxattr(0, ino, b"user.a", b"value", 0).unwrap();
    f.do_setxattr(0, ino, b"user.bb", b"", 0).unwrap();
    assert_eq!(f.do_setxattr(0, ino, b"user.a", b"v", libc::XATTR_CREATE).unwrap_err(), libc::EEXIST);
    assert_eq!(f.do_setxattr(0, ino, b"user.c", b"v", libc::XATTR_REPLACE).unwrap_err(), libc::ENODATA);
    assert_eq!(f.do_getxattr(ino, b"user.a", 0).unwrap(), XattrAnswer::Size(5));
    assert_eq!(f.do_getxattr(ino, b"user.a", 4).unwrap_err(), libc::ERANGE);
    assert_eq!(f.do_getxattr(ino, b"user.a", 5).unwrap(), XattrAnswer::Data(b"value".to_vec()));
    assert_eq!(f.do_getxattr(ino, b"user.bb", 10).unwrap(), XattrAnswer::Data(Vec::new()));
    let list = b"user.a\0user.bb\0".to_vec();
    assert_eq!(f.do_listxattr(0, ino, 0).unwrap(), XattrAnswer::Size(list.len() as u32));
    assert_eq!(f.do_listxattr(0, ino, 3).unwrap_err(), libc::ERANGE);
    let XattrAnswer::Data(got) = f.do_listxattr(0, ino, 100).unwrap() else { panic!("no data") };
    let mut got: Vec<&[u8]> = got.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    got.sort();
    assert_eq!(got, [&b"user.a"[..], &b"user.bb"[..]]);
    f.do_removexattr(0, ino, b"user.a").unwrap();
    assert_eq!(f.do_removexattr(0, ino, b"user.a").unwrap_err(), libc::ENODATA);
    assert_eq!(f.do_listxattr(0, ino, 100).unwrap(), XattrAnswer::Data(b"user.bb\0".to_vec()));
    // Files with xattrs are freed with them.
    f.do_unlink(1, b"x").unwrap();
    assert_eq!(f.do_getattr(ino).unwrap_err(), libc::ENOENT);
}

#[test]
fn fallocate_modes() {
    let (mut f, _) = fs();
    let ino = mkfile(&mut f, 1, "f", &[1u8; 4096]);
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    f.do_fallocate(ino, 1000, 100, punch).unwrap();
    let d = f.do_read(ino, 0, 4096).unwrap();
    assert_eq!(d.len(), 4096);
    assert!(d[..1000].iter().all(|&b| b == 1) && d[1000..1100].iter().all(|&b| b == 0));
    assert!(d[1100..].iter().all(|&b| b == 1));
    f.do_fallocate(ino, 4000, 200, libc::FALLOC_FL_KEEP_SIZE).unwrap();
    assert_eq!(f.do_getattr(ino).unwrap().size, 4096);
    f.do_fallocate(ino, 4000, 200, 0).unwrap();
    assert_eq!(f.do_getattr(ino).unwrap().size, 4200);
    f.do_fallocate(ino, 0, 10, 0).unwrap();
    assert_eq!(f.do_getattr(ino).unwrap().size, 4200);
    assert_eq!(f.do_fallocate(ino, 0, 10, libc::FALLOC_FL_PUNCH_HOLE).unwrap_err(), libc::EOPNOTSUPP);
    assert_eq!(f.do_fallocate(ino, 0, 10, libc::FALLOC_FL_ZERO_RANGE).unwrap_err(), libc::EOPNOTSUPP);
    assert_eq!(f.do_fallocate(ino, 0, 0, 0).unwrap_err(), libc::EINVAL);
    assert_eq!(f.do_fallocate(ino, i64::MAX, 10, 0).unwrap_err(), libc::EFBIG);
    assert_eq!(f.do_fallocate(1, 0, 10, 0).unwrap_err(), libc::ENODEV);
}

#[test]
fn readonly_backend_refuses_changes() {
    let (mut f, b) = fs();
    let ino = mkfile(&mut f, 1, "f", b"data");
    b.ro.store(true, Ordering::Relaxed);
    assert_eq!(f.do_write(ino, 0, b"x").unwrap_err(), libc::EROFS);
    assert_eq!(f.do_create(ME, 1, b"g", 0o644, 0).unwrap_err(), libc::EROFS);
    assert_eq!(f.do_open(ino, libc::O_WRONLY).unwrap_err(), libc::EROFS);
    assert_eq!(f.do_open(ino, libc::O_RDONLY | libc::O_TRUNC).unwrap_err(), libc::EROFS);
    assert_eq!(f.do_unlink(1, b"f").unwrap_err(), libc::EROFS);
    assert_eq!(f.do_setxattr(0, ino, b"user.a", b"", 0).unwrap_err(), libc::EROFS);
    assert_eq!(
        f.do_setattr(ino, set_attr(Some(0o600), None, None, None, None, None, now())).unwrap_err(),
        libc::EROFS
    );
    assert_eq!(f.do_access(ino, libc::W_OK).unwrap_err(), libc::EROFS);
    f.do_access(ino, libc::R_OK).unwrap();
    f.do_open(ino, libc::O_RDONLY).unwrap();
    assert_eq!(f.do_read(ino, 0, 10).unwrap(), b"data");
    f.do_sync().unwrap();
    assert_eq!(b.syncs.load(Ordering::Relaxed), 0);
}

/// An adapter over a fresh dataset mounted with `opts`.
fn fs_with(opts: MountOpts) -> (RwFs<MemBackend>, Arc<MemBackend>) {
    let b = MemBackend::new();
    (RwFs::with_opts(b.clone(), opts).unwrap(), b)
}

fn posix() -> MountOpts {
    MountOpts { acltype: AclType::Posix, ..MountOpts::default() }
}

/// `system.posix_acl_*` bytes: user::rwx, user:ID:PERM, group::r-x, mask::rwx, other::---.
fn acl_granting(id: u32, perm: u16) -> Vec<u8> {
    use zpl::acl::*;
    let e = |tag, perm, id| AclEntry { tag, perm, id };
    let u = ACL_UNDEFINED_ID;
    PosixAcl {
        entries: vec![
            e(ACL_USER_OBJ, 7, u),
            e(ACL_USER, perm, id),
            e(ACL_GROUP_OBJ, 5, u),
            e(ACL_MASK, 7, u),
            e(ACL_OTHER, 0, u),
        ],
    }
    .encode()
}

#[test]
fn posix_acls_through_the_adapter() {
    const ACCESS: &[u8] = b"system.posix_acl_access";
    const DEFAULT: &[u8] = b"system.posix_acl_default";
    // acltype=off: refused, never listed; the umask applies as before.
    let (f, _) = fs();
    let d = f.do_mkdir(ME, 1, b"d", 0o777, 0o022).unwrap().0;
    assert_eq!(d.perm, 0o755);
    assert_eq!(f.do_setxattr(0, d.ino, DEFAULT, &acl_granting(7, 6), 0).unwrap_err(), libc::EOPNOTSUPP);
    assert_eq!(f.do_getxattr(d.ino, ACCESS, 0).unwrap_err(), libc::EOPNOTSUPP);
    assert_eq!(f.do_setxattr(0, d.ino, b"nonamespace", b"", 0).unwrap_err(), libc::EOPNOTSUPP);
    // acltype=posix.
    let (mut f, _) = fs_with(posix());
    let d = f.do_mkdir(ME, 1, b"d", 0o777, 0o022).unwrap().0;
    assert_eq!(d.perm, 0o755, "no default ACL: the umask applies");
    // Only the owner (uid 1000) or root sets ACLs.
    assert_eq!(f.do_setxattr(2000, d.ino, DEFAULT, &acl_granting(7, 6), 0).unwrap_err(), libc::EPERM);
    f.do_setxattr(ME.0, d.ino, DEFAULT, &acl_granting(7, 6), 0).unwrap();
    // A file created in it: umask ignored, mode and ACL from the default ACL.
    let ((a, _), _) = f.do_create(ME, d.ino, b"f", 0o666, 0o077).unwrap();
    assert_eq!(a.perm, 0o660);
    let XattrAnswer::Data(acl) = f.do_getxattr(a.ino, ACCESS, 1024).unwrap() else { panic!() };
    let mut want = zpl::acl::PosixAcl::parse(&acl_granting(7, 6)).unwrap().unwrap();
    want.entries[0].perm = 6; // owner and mask limited by the requested mode (rw-)
    want.entries[3].perm = 6;
    assert_eq!(acl, want.encode());
    let XattrAnswer::Data(names) = f.do_listxattr(1000, a.ino, 1024).unwrap() else { panic!() };
    assert_eq!(names, b"system.posix_acl_access\0");
    // Directories inherit the default ACL too; mknod'd files as well.
    let sub = f.do_mkdir(ME, d.ino, b"sub", 0o777, 0o077).unwrap().0;
    assert_eq!(sub.perm, 0o770);
    assert_eq!(f.do_getxattr(sub.ino, DEFAULT, 0).unwrap(), XattrAnswer::Size(44));
    let (p, _) = f.do_mknod(ME, d.ino, b"fifo", libc::S_IFIFO | 0o644, 0o077, 0).unwrap();
    assert_eq!(p.perm, 0o640);
    // chmod keeps the mask in step: 0604 makes the mask ---.
    let a = f.do_setattr(a.ino, set_attr(Some(0o604), None, None, None, None, None, now())).unwrap();
    assert_eq!(a.perm, 0o604);
    let XattrAnswer::Data(acl) = f.do_getxattr(a.ino, ACCESS, 1024).unwrap() else { panic!() };
    let got = zpl::acl::PosixAcl::parse(&acl).unwrap().unwrap();
    assert_eq!(got.entries.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 6, 5, 0, 4]);
    // Removing the access ACL keeps the mode.
    f.do_removexattr(ME.0, a.ino, ACCESS).unwrap();
    assert_eq!(f.do_getxattr(a.ino, ACCESS, 0).unwrap_err(), libc::ENODATA);
    assert_eq!(f.do_getattr(a.ino).unwrap().perm, 0o604);
    // A mount forced read-only refuses changes on a writable backend.
    let (f, _) = fs_with(MountOpts { readonly: true, ..posix() });
    assert_eq!(f.do_mkdir(ME, 1, b"d", 0o777, 0).unwrap_err(), libc::EROFS);
    assert_eq!(f.do_setxattr(0, 1, DEFAULT, &acl_granting(7, 6), 0).unwrap_err(), libc::EROFS);
}

#[test]
fn mount_options_from_properties() {
    let o = MountOpts { exec: false, setuid: false, devices: false, ..MountOpts::default() };
    assert_eq!(o.kernel_options(true), [MountOption::NoExec, MountOption::NoSuid, MountOption::NoDev]);
    let o = MountOpts { exec: true, setuid: true, devices: true, ..MountOpts::default() };
    assert_eq!(o.kernel_options(true), [MountOption::Suid, MountOption::Dev]);
    // Only root may mount suid or dev.
    assert_eq!(o.kernel_options(false), [MountOption::NoSuid, MountOption::NoDev]);
}

#[test]
fn statfs_and_sync() {
    let (f, b) = fs();
    assert_eq!(f.do_statfs().unwrap(), (8192, 4096, 1010, 1000, 128 << 10));
    f.do_sync().unwrap();
    assert_eq!(b.syncs.load(Ordering::Relaxed), 1);
}

#[test]
fn rdev_known_values() {
    // makedev(8, 1) in userspace; the kernel's MKDEV(8, 1).
    assert_eq!(rdev_to_zfs(0x801), (8 << 20) | 1);
    // makedev(300, 70000): minor bits above 8 sit at bit 20 of the userspace encoding.
    let user = (70000 & 0xff) | (300 << 8) | ((70000 & !0xff) << 12);
    assert_eq!(rdev_to_zfs(user), (300 << 20) | 70000);
}

proptest! {
    #[test]
    fn time_round_trips(s in -(1i64 << 40)..(1i64 << 40), ns in 0u32..1_000_000_000) {
        let t = if s >= 0 {
            UNIX_EPOCH + Duration::new(s as u64, ns)
        } else {
            UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + Duration::from_nanos(u64::from(ns))
        };
        let z = time_to_zfs(t);
        prop_assert_eq!(z.0 as i64, s);
        prop_assert_eq!(z.1, u64::from(ns));
        prop_assert_eq!(time_from_zfs(z), t);
    }

    #[test]
    fn stored_times_never_panic(s: u64, ns: u64) {
        let _ = time_from_zfs((s, ns));
    }

    #[test]
    fn rdev_round_trips(major in 0u32..4096, minor in 0u32..(1 << 20)) {
        let user = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
        let z = rdev_to_zfs(user);
        prop_assert_eq!(z, (u64::from(major) << 20) | u64::from(minor));
        prop_assert_eq!(rdev_from_zfs(z), user);
    }
}

// ----- through the kernel -----------------------------------------------------------------

/// A mount of a fresh in-memory dataset, or None (with a note) where FUSE is unusable.
struct TestMount {
    dir: std::path::PathBuf,
    handle: Option<MountHandle>,
    backend: Arc<MemBackend>,
}

impl TestMount {
    fn new(tag: &str) -> Option<TestMount> {
        Self::with_opts(tag, &MountOpts::default())
    }

    fn with_opts(tag: &str, opts: &MountOpts) -> Option<TestMount> {
        if std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_err() {
            eprintln!("skipping: /dev/fuse is not usable");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("rzfs-rw-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let backend = MemBackend::new();
        match mount_rw_with(backend.clone(), &dir, "test/rw", opts) {
            Ok(h) => Some(TestMount { dir, handle: Some(h), backend }),
            Err(e) => {
                eprintln!("skipping: cannot mount FUSE here: {e}");
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    fn p(&self, rel: &str) -> std::path::PathBuf {
        self.dir.join(rel)
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if let Some(mut h) = self.handle.take() {
            let _ = h.detach(true);
            h.wait();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn err_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.unwrap_err().raw_os_error().unwrap_or(0)
}

#[test]
fn mounted_files_dirs_and_links() {
    let Some(m) = TestMount::new("files") else { return };
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut fh = std::fs::File::create(m.p("big")).unwrap();
    let calls = m.backend.calls.load(Ordering::Relaxed);
    fh.write_all(&big).unwrap();
    // Large WRITE requests (1 MiB where the kernel allows it), not one per page.
    let writes = m.backend.calls.load(Ordering::Relaxed) - calls;
    eprintln!("3 MB written in {writes} requests");
    assert!(writes <= 30, "{writes} requests for 3 MB");
    drop(fh);
    assert_eq!(std::fs::read(m.p("big")).unwrap(), big);
    assert_eq!(std::fs::metadata(m.p("big")).unwrap().len(), big.len() as u64);
    let mut g = m.backend.st.lock().unwrap();
    let MemState { zpl, os, zaps } = &mut *g;
    let obj = zpl.lookup(os, zaps, zpl.root(), b"big").unwrap().expect("written through the mount");
    assert_eq!(zpl.getattr(os, obj).unwrap().size, big.len() as u64);
    drop(g);
    // Rewrite in the middle, append, truncate.
    let mut fh = std::fs::OpenOptions::new().read(true).write(true).open(m.p("big")).unwrap();
    fh.seek(SeekFrom::Start(1_000_000)).unwrap();
    fh.write_all(b"MIDDLE").unwrap();
    fh.set_len(1_000_003).unwrap();
    drop(fh);
    let mut fh = std::fs::OpenOptions::new().append(true).open(m.p("big")).unwrap();
    fh.write_all(b"END").unwrap();
    drop(fh);
    let back = std::fs::read(m.p("big")).unwrap();
    assert_eq!(back.len(), 1_000_006);
    let mut want = big[999_998..1_000_000].to_vec();
    want.extend_from_slice(b"MIDEND");
    assert_eq!(&back[999_998..], want.as_slice());
    assert_eq!(&back[..999_998], &big[..999_998]);
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::create_dir(m.p("d/e")).unwrap();
    std::fs::write(m.p("d/e/f"), b"inner").unwrap();
    assert_eq!(std::fs::metadata(m.p("d")).unwrap().nlink(), 3);
    assert_eq!(err_of(std::fs::remove_dir(m.p("d"))), libc::ENOTEMPTY);
    std::fs::hard_link(m.p("d/e/f"), m.p("hard")).unwrap();
    assert_eq!(std::fs::metadata(m.p("hard")).unwrap().nlink(), 2);
    assert_eq!(std::fs::metadata(m.p("hard")).unwrap().ino(), std::fs::metadata(m.p("d/e/f")).unwrap().ino());
    std::os::unix::fs::symlink("d/e/f", m.p("sym")).unwrap();
    assert_eq!(std::fs::read_link(m.p("sym")).unwrap(), Path::new("d/e/f"));
    assert_eq!(std::fs::read(m.p("sym")).unwrap(), b"inner");
    assert!(std::fs::symlink_metadata(m.p("sym")).unwrap().file_type().is_symlink());
    // Rename over an existing file, and a directory move.
    std::fs::write(m.p("new"), b"new").unwrap();
    std::fs::rename(m.p("new"), m.p("hard")).unwrap();
    assert_eq!(std::fs::read(m.p("hard")).unwrap(), b"new");
    assert_eq!(std::fs::metadata(m.p("d/e/f")).unwrap().nlink(), 1);
    std::fs::rename(m.p("d/e"), m.p("e2")).unwrap();
    assert_eq!(std::fs::read(m.p("e2/f")).unwrap(), b"inner");
    assert_eq!(std::fs::metadata(m.p("d")).unwrap().nlink(), 2);
    let mut list: Vec<String> =
        std::fs::read_dir(&m.dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    list.sort();
    assert_eq!(list, ["big", "d", "e2", "hard", "sym"]);
    std::fs::remove_file(m.p("e2/f")).unwrap();
    std::fs::remove_dir(m.p("e2")).unwrap();
    assert_eq!(err_of(std::fs::metadata(m.p("e2"))), libc::ENOENT);
}

#[test]
fn mounted_attributes_xattrs_and_open_unlinked() {
    let Some(m) = TestMount::new("attrs") else { return };
    std::fs::write(m.p("f"), b"0123456789").unwrap();
    std::fs::set_permissions(m.p("f"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().mode() & 0o7777, 0o640);
    let t = UNIX_EPOCH + Duration::from_secs(1_234_567_890);
    std::fs::File::options().write(true).open(m.p("f")).unwrap().set_modified(t).unwrap();
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().modified().unwrap(), t);
    std::fs::File::options().write(true).open(m.p("f")).unwrap().set_len(4).unwrap();
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"0123");
    // O_TRUNC through open.
    std::fs::write(m.p("f"), b"ab").unwrap();
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"ab");
    // An unlinked file stays readable and writable through its descriptor.
    let mut fh = std::fs::OpenOptions::new().read(true).write(true).open(m.p("f")).unwrap();
    std::fs::remove_file(m.p("f")).unwrap();
    assert_eq!(err_of(std::fs::metadata(m.p("f"))), libc::ENOENT);
    fh.seek(SeekFrom::End(0)).unwrap();
    fh.write_all(b"cd").unwrap();
    fh.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    fh.read_to_string(&mut s).unwrap();
    assert_eq!(s, "abcd");
    assert_eq!(fh.metadata().unwrap().nlink(), 0);
    drop(fh);
    // RELEASE is sent after close(2) returns: wait for it to free the orphan.
    let orphans = || {
        let mut g = m.backend.st.lock().unwrap();
        let MemState { zpl, os, zaps } = &mut *g;
        zaps.len(os, zpl.unlinked_set()).unwrap()
    };
    let t0 = std::time::Instant::now();
    while orphans() != 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(orphans(), 0, "the last close frees the orphan");
    // Special files.
    let fifo = m.p("fifo");
    let ok = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
    if ok {
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    }
    xattrs_through_setfattr(&m);
    let sv = std::process::Command::new("stat").args(["-f", "-c", "%S %b"]).arg(&m.dir).output();
    if let Ok(o) = sv {
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "131072 8192");
    }
    std::fs::File::open(&m.dir).unwrap().sync_all().unwrap();
    assert!(m.backend.syncs.load(Ordering::Relaxed) >= 1);
}

/// xattrs through the `attr` tools (the crate forbids the unsafe libc calls).
fn xattrs_through_setfattr(m: &TestMount) {
    std::fs::write(m.p("x"), b"").unwrap();
    let set =
        std::process::Command::new("setfattr").args(["-n", "user.k", "-v", "val"]).arg(m.p("x")).status();
    if !set.is_ok_and(|s| s.success()) {
        eprintln!("skipping xattrs: setfattr unavailable or failed");
        return;
    }
    let out = std::process::Command::new("getfattr")
        .args(["-d", "--absolute-names"])
        .arg(m.p("x"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("user.k=\"val\""), "{out:?}");
    let rm = std::process::Command::new("setfattr").args(["-x", "user.k"]).arg(m.p("x")).status().unwrap();
    assert!(rm.success());
    let out = std::process::Command::new("getfattr")
        .args(["-d", "--absolute-names"])
        .arg(m.p("x"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("user.k"));
}

/// Runs `prog args` as uid/gid 65534 with no supplementary groups; true when it succeeds.
fn as_nobody(prog: &str, args: &[&std::ffi::OsStr]) -> bool {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", prog])
        .args(args)
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn sh(script: &str) -> std::process::Output {
    let out = std::process::Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The kernel enforces POSIX ACLs on an acltype=posix mount: a user the mode shuts out is
/// let in by an ACL entry and shut out again by another; chmod moves the mask; default ACLs
/// reach new files and directories (the umask ignored); and exec=off is noexec, nosuid and
/// nodev in /proc/self/mountinfo. Needs root, setfacl/getfacl and setpriv.
#[test]
fn mounted_posix_acls_are_enforced() {
    let have = |p: &str| std::process::Command::new("sh").args(["-c", &format!("command -v {p}")]).output();
    if !crate::is_root()
        || ["setfacl", "getfacl", "setpriv"].iter().any(|p| !have(p).is_ok_and(|o| o.status.success()))
    {
        eprintln!("skipping: needs root, setfacl/getfacl (package acl) and setpriv");
        return;
    }
    let opts = MountOpts { exec: false, ..posix() };
    let Some(m) = TestMount::with_opts("acl", &opts) else { return };
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line =
        mi.lines().find(|l| l.split(' ').nth(4) == Some(m.dir.to_str().unwrap())).expect("in mountinfo");
    let mount_opts: Vec<&str> = line.split(' ').nth(5).unwrap().split(',').collect();
    for o in ["rw", "noexec", "nosuid", "nodev"] {
        assert!(mount_opts.contains(&o), "{o} missing: {line}");
    }
    let p = |rel: &str| m.p(rel).into_os_string();
    // A file only its owner (root) may read.
    std::fs::write(m.p("secret"), b"s3cret").unwrap();
    std::fs::set_permissions(m.p("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!as_nobody("cat", &[&p("secret")]));
    sh(&format!("setfacl -m u:65534:r {}", m.p("secret").display()));
    assert!(as_nobody("cat", &[&p("secret")]), "the ACL grants read");
    assert_eq!(std::fs::metadata(m.p("secret")).unwrap().mode() & 0o777, 0o640, "mask r-- in the group bits");
    // chmod moves the mask: g-r takes the named user's read away.
    std::fs::set_permissions(m.p("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let facl = sh(&format!("getfacl -c {}", m.p("secret").display()));
    let facl = String::from_utf8_lossy(&facl.stdout);
    assert!(facl.contains("mask::---") && facl.contains("user:nobody:r--\t#effective:---"), "{facl}");
    assert!(!as_nobody("cat", &[&p("secret")]), "the mask denies");
    std::fs::set_permissions(m.p("secret"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert!(as_nobody("cat", &[&p("secret")]));
    // An explicit deny entry for the user beats the other bits.
    std::fs::set_permissions(m.p("secret"), std::fs::Permissions::from_mode(0o644)).unwrap();
    // (The group entry gets r--: with a mask of --- Linux skips the ACL and uses the other
    // bits, on any file system.)
    sh(&format!("setfacl -m u:65534:-,g::r {}", m.p("secret").display()));
    assert!(!as_nobody("cat", &[&p("secret")]), "user:nobody:--- denies although other has r");
    // Writes to a directory need w on it: granted by ACL, checked by the kernel.
    std::fs::create_dir(m.p("shared")).unwrap();
    assert!(!as_nobody("touch", &[&p("shared/by-nobody")]));
    sh(&format!("setfacl -m u:65534:rwx {}", m.p("shared").display()));
    assert!(as_nobody("touch", &[&p("shared/by-nobody")]));
    assert_eq!(std::fs::metadata(m.p("shared/by-nobody")).unwrap().uid(), 65534);
    // Default ACLs: inherited by files and directories created below, umask ignored.
    sh(&format!("setfacl -d -m u:65534:rw {}", m.p("shared").display()));
    sh(&format!(
        "umask 077; echo new > {}; mkdir {}",
        m.p("shared/new").display(),
        m.p("shared/sub").display()
    ));
    let facl = sh(&format!("getfacl -c {}", m.p("shared/new").display()));
    let facl = String::from_utf8_lossy(&facl.stdout);
    assert!(facl.contains("user:nobody:rw-"), "inherited entry: {facl}");
    // 0666 cut by the default ACL (owner rwx, mask rwx, other r-x); umask 077 would say 0600.
    assert_eq!(std::fs::metadata(m.p("shared/new")).unwrap().mode() & 0o777, 0o664, "{facl}");
    assert!(as_nobody(
        "sh",
        &[
            std::ffi::OsStr::new("-c"),
            std::ffi::OsStr::new(&format!("echo more >> {}", m.p("shared/new").display()))
        ]
    ));
    let facl = sh(&format!("getfacl -c {}", m.p("shared/sub").display()));
    let facl = String::from_utf8_lossy(&facl.stdout);
    assert!(facl.contains("default:user:nobody:rw-") && facl.contains("user:nobody:rw-"), "{facl}");
    // Without a default ACL the umask applies.
    sh(&format!("umask 077; echo x > {}", m.p("plain").display()));
    assert_eq!(std::fs::metadata(m.p("plain")).unwrap().mode() & 0o777, 0o600);
    // The ACL is stored under its full name.
    let mut g = m.backend.st.lock().unwrap();
    let MemState { zpl, os, zaps } = &mut *g;
    let obj = zpl.lookup(os, zaps, zpl.root(), b"secret").unwrap().unwrap();
    assert_eq!(zpl.listxattr(os, zaps, obj).unwrap(), vec![b"system.posix_acl_access".to_vec()]);
    drop(g);
    // Only the owner changes an ACL.
    assert!(!as_nobody(
        "setfacl",
        &[std::ffi::OsStr::new("-m"), std::ffi::OsStr::new("u:65534:rwx"), &p("secret")]
    ));
    // exec=off: executing fails with EACCES even for root.
    std::fs::write(m.p("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(m.p("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(err_of(std::process::Command::new(m.p("run.sh")).status()), libc::EACCES);
    drop(m);
    // acltype=off: setfacl is refused (EOPNOTSUPP), getfacl shows the mode.
    let Some(m) = TestMount::new("noacl") else { return };
    std::fs::write(m.p("f"), b"").unwrap();
    let out =
        std::process::Command::new("setfacl").arg("-m").arg("u:65534:r").arg(m.p("f")).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Operation not supported")
    );
    let facl = sh(&format!("getfacl -c {}", m.p("f").display()));
    assert_eq!(String::from_utf8_lossy(&facl.stdout), "user::rw-\ngroup::r--\nother::r--\n\n");
}

/// Serves an in-memory dataset for outside test suites (pjdfstest):
/// `RZFS_RW_MOUNT=/mnt/x RZFS_RW_SERVE_SECS=600 cargo test -p rzfs-fuse serve_in_memory -- --ignored`.
#[test]
#[ignore]
fn serve_in_memory() {
    let Ok(dir) = std::env::var("RZFS_RW_MOUNT") else { return };
    let secs = std::env::var("RZFS_RW_SERVE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut h = mount_rw(MemBackend::new(), Path::new(&dir), "mem/rw").unwrap();
    std::thread::sleep(Duration::from_secs(secs));
    h.unmount().unwrap();
}

/// What a mount keeps of its files through a replacement of its dataset underneath
/// (rollback, receive): open files the new contents lack or hold as another file turn
/// stale, orphans of the old contents are forgotten, names leading elsewhere are noted.
#[test]
fn revalidation_after_the_dataset_is_replaced() {
    let files = Mutex::new(Files { root: 34, ..Files::default() });
    {
        let mut f = lock(&files);
        f.open(100, 7); // the same file afterwards
        f.open(101, 3); // its object now holds another file (generation 4)
        f.open(102, 1); // an orphan: gone
        f.orphans.insert(102);
        f.learn(fuser::FUSE_ROOT_ID, b"a", 100);
        f.learn(fuser::FUSE_ROOT_ID, b"b", 101);
        f.learn(100, b"c", 103);
    }
    struct Now;
    impl Revalidator for Now {
        fn gen(&mut self, obj: u64) -> Option<u64> {
            match obj {
                100 => Some(7),
                101 => Some(4),
                _ => None,
            }
        }
        fn lookup(&mut self, dir: u64, name: &[u8]) -> Option<u64> {
            match (dir, name) {
                (34, b"a") => Some(100),
                (34, b"b") => Some(105),
                (100, b"c") => Some(103),
                _ => None,
            }
        }
    }
    Files::revalidate(&files, &mut Now);
    let mut f = lock(&files);
    assert!(!f.stale.contains(&100));
    assert!(f.stale.contains(&101) && f.stale.contains(&102));
    assert!(f.orphans.is_empty());
    assert_eq!(f.take_moved(), vec![(fuser::FUSE_ROOT_ID, b"b".to_vec())]);
    assert!(f.take_moved().is_empty());
    assert_eq!(f.known(), vec![1, 100, 101, 103]);
}

/// `atime`/`relatime`: with relatime a read records its time while the access time is not
/// after the last change, then no more; with atime=on every read (at most once a second);
/// with atime=off never. The change time stays.
#[test]
fn reads_record_access_times_as_atime_and_relatime_say() {
    let (mut f, b) = fs();
    let ((a, _), _) = f.do_create(ME, 1, b"f", 0o644, 0o022).unwrap();
    f.do_write(a.ino, 0, b"hello").unwrap();
    let attrs = |f: &RwFs<MemBackend>| f.run(|c| c.zpl.getattr(c.os, a.ino)).unwrap();
    // Pretend the file was last changed and read a minute ago.
    let old = (now().0 - 60, 0);
    f.run(|c| {
        c.zpl.setattr(
            c.os,
            c.zaps,
            a.ino,
            SetAttr { atime: Some(old), mtime: Some(old), ..SetAttr::default() },
            old,
        )
    })
    .unwrap();
    let set = |p| *b.atime.lock().unwrap() = p;

    f.note_access(a.ino, Atime::Off);
    assert_eq!(attrs(&f).atime, old, "atime=off");

    set(Atime::Relatime);
    f.note_access(a.ino, Atime::Relatime);
    let first = attrs(&f);
    assert!(first.atime > old && first.ctime == old, "relatime: first read after a change: {first:?}");
    f.accessed.clear(); // past the once-a-second limit
    f.note_access(a.ino, Atime::Relatime);
    assert_eq!(attrs(&f).atime, first.atime, "relatime: the access time is after the change");

    // atime=on: again (once the second has passed).
    f.run(|c| c.zpl.setattr(c.os, c.zaps, a.ino, SetAttr { atime: Some(old), ..SetAttr::default() }, old))
        .unwrap();
    f.accessed.clear();
    f.note_access(a.ino, Atime::On);
    assert!(attrs(&f).atime > old);

    // Read-only: nothing.
    f.run(|c| c.zpl.setattr(c.os, c.zaps, a.ino, SetAttr { atime: Some(old), ..SetAttr::default() }, old))
        .unwrap();
    f.accessed.clear();
    b.ro.store(true, Ordering::Relaxed);
    f.note_access(a.ino, Atime::On);
    assert_eq!(attrs(&f).atime, old);
}

/// `zfs set readonly=on` on a mounted file system: changes fail with EROFS at once, reads
/// go on, and it takes writes again when the property goes off.
#[test]
fn readonly_property_applies_to_a_live_mount() {
    let (mut f, b) = fs();
    let ((a, _), _) = f.do_create(ME, 1, b"f", 0o644, 0o022).unwrap();
    f.do_write(a.ino, 0, b"data").unwrap();
    b.prop_ro.store(true, Ordering::Relaxed);
    assert_eq!(f.do_write(a.ino, 0, b"x").unwrap_err(), libc::EROFS);
    assert_eq!(f.do_create(ME, 1, b"g", 0o644, 0o022).unwrap_err(), libc::EROFS);
    assert_eq!(f.do_read(a.ino, 0, 10).unwrap(), b"data");
    b.prop_ro.store(false, Ordering::Relaxed);
    f.do_write(a.ino, 0, b"D").unwrap();
    assert_eq!(f.do_read(a.ino, 0, 10).unwrap(), b"Data");
}

/// `xattr=off` (followed while mounted) and the `noxattr`/`xattr` mount options: `user.`
/// attributes answer EOPNOTSUPP and are left out of listings, but stay on disk; other
/// namespaces are unaffected (ZTS xattr_013_pos).
#[test]
fn xattr_property_and_mount_options() {
    let (mut f, b) = fs();
    let ((a, _), _) = f.do_create(ME, 1, b"f", 0o644, 0o022).unwrap();
    f.do_setxattr(0, a.ino, b"user.k", b"v", 0).unwrap();
    f.do_setxattr(0, a.ino, b"trusted.t", b"w", 0).unwrap();
    b.prop_noxattr.store(true, Ordering::Relaxed);
    for r in [
        f.do_getxattr(a.ino, b"user.k", 10).map(|_| ()),
        f.do_setxattr(0, a.ino, b"user.n", b"x", 0),
        f.do_removexattr(0, a.ino, b"user.k"),
    ] {
        assert_eq!(r.unwrap_err(), libc::EOPNOTSUPP);
    }
    assert_eq!(f.do_listxattr(0, a.ino, 100).unwrap(), XattrAnswer::Data(b"trusted.t\0".to_vec()));
    assert_eq!(f.do_getxattr(a.ino, b"trusted.t", 10).unwrap(), XattrAnswer::Data(b"w".to_vec()));
    b.prop_noxattr.store(false, Ordering::Relaxed);
    assert_eq!(f.do_getxattr(a.ino, b"user.k", 10).unwrap(), XattrAnswer::Data(b"v".to_vec()));
    // The mount options win over the property, either way.
    let (mut g, gb) = fs_with(MountOpts { xattr: Some(false), ..MountOpts::default() });
    let ((c, _), _) = g.do_create(ME, 1, b"g", 0o644, 0o022).unwrap();
    assert_eq!(g.do_setxattr(0, c.ino, b"user.k", b"v", 0).unwrap_err(), libc::EOPNOTSUPP);
    let (mut h, hb) = fs_with(MountOpts { xattr: Some(true), ..MountOpts::default() });
    hb.prop_noxattr.store(true, Ordering::Relaxed);
    let ((d, _), _) = h.do_create(ME, 1, b"h", 0o644, 0o022).unwrap();
    h.do_setxattr(0, d.ino, b"user.k", b"v", 0).unwrap();
    drop(gb);
}

#[test]
fn inode_ioctls_answer_generation_and_linux_flags() {
    use ondisk::znode::{ZFS_APPENDONLY, ZFS_ARCHIVE, ZFS_IMMUTABLE, ZFS_NODUMP, ZFS_PROJINHERIT};
    let a = zpl::Attrs {
        gen: 0x1_0000_0abc,
        flags: ZFS_IMMUTABLE | ZFS_NODUMP | ZFS_ARCHIVE,
        ..Default::default()
    };
    // FS_IOC_GETVERSION (64- and 32-bit): i_generation's 32 bits.
    assert_eq!(ioctl_answer(0x8008_7601, &a), Ok(0xabcu32.to_le_bytes()));
    assert_eq!(ioctl_answer(0x8004_7601, &a), Ok(0xabcu32.to_le_bytes()));
    // FS_IOC_GETFLAGS: immutable (0x10) and nodump (0x40); archive has no Linux flag.
    assert_eq!(ioctl_answer(0x8008_6601, &a), Ok(0x50u32.to_le_bytes()));
    let b = zpl::Attrs { flags: ZFS_APPENDONLY | ZFS_PROJINHERIT, ..Default::default() };
    assert_eq!(ioctl_answer(0x8004_6601, &b), Ok(0x2000_0020u32.to_le_bytes()));
    // Anything else (FS_IOC_SETFLAGS among them) is not supported.
    assert_eq!(ioctl_answer(0x4008_6602, &a), Err(libc::ENOTTY));
}
