//! A panic in a FUSE handler must not end the mount: [`Guarded`] runs every request of the
//! file system it wraps under `catch_unwind`. The request's reply, dropped while unwinding,
//! answers EIO (fuser replies EIO for a reply that was never sent), and `on_panic` is told
//! so that the daemon suspends the pool behind the mount (its open txg may be half
//! changed: the pool's owner never syncs such a state). The mount keeps serving; requests
//! that need the pool then fail with EIO until it is exported with `-f` and imported again.

use fuser::{
    Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
};
use std::ffi::OsStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::SystemTime;

/// Told of a panic in a handler: (operation, panic message).
pub type OnPanic = Box<dyn Fn(&str, &str) + Send>;

/// A file system whose handlers cannot take the mount down by panicking.
pub struct Guarded<F> {
    fs: F,
    on_panic: OnPanic,
}

impl<F: Filesystem> Guarded<F> {
    pub fn new(fs: F, on_panic: OnPanic) -> Guarded<F> {
        Guarded { fs, on_panic }
    }

    fn panicked(&self, op: &str, p: Box<dyn std::any::Any + Send>) {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        (self.on_panic)(op, &what);
    }
}

/// Delegates each listed handler to the wrapped file system under `catch_unwind`.
macro_rules! guarded {
    ($( fn $name:ident(&mut self $(, $arg:ident : $ty:ty)* $(,)?); )*) => {
        $(
            fn $name(&mut self $(, $arg: $ty)*) {
                let fs = &mut self.fs;
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| Filesystem::$name(fs $(, $arg)*))) {
                    self.panicked(stringify!($name), p);
                }
            }
        )*
    };
}

impl<F: Filesystem> Filesystem for Guarded<F> {
    fn init(&mut self, req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let fs = &mut self.fs;
        match catch_unwind(AssertUnwindSafe(|| fs.init(req, config))) {
            Ok(r) => r,
            Err(p) => {
                self.panicked("init", p);
                Err(libc::EIO)
            }
        }
    }

    fn destroy(&mut self) {
        let fs = &mut self.fs;
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| fs.destroy())) {
            self.panicked("destroy", p);
        }
    }

    guarded! {
        fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry);
        fn forget(&mut self, req: &Request<'_>, ino: u64, nlookup: u64);
        fn getattr(&mut self, req: &Request<'_>, ino: u64, fh: Option<u64>, reply: ReplyAttr);
        fn setattr(
            &mut self,
            req: &Request<'_>,
            ino: u64,
            mode: Option<u32>,
            uid: Option<u32>,
            gid: Option<u32>,
            size: Option<u64>,
            atime: Option<TimeOrNow>,
            mtime: Option<TimeOrNow>,
            ctime: Option<SystemTime>,
            fh: Option<u64>,
            crtime: Option<SystemTime>,
            chgtime: Option<SystemTime>,
            bkuptime: Option<SystemTime>,
            flags: Option<u32>,
            reply: ReplyAttr,
        );
        fn readlink(&mut self, req: &Request<'_>, ino: u64, reply: ReplyData);
        fn mknod(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry);
        fn mkdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry);
        fn unlink(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty);
        fn rmdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty);
        fn symlink(&mut self, req: &Request<'_>, parent: u64, link_name: &OsStr, target: &Path, reply: ReplyEntry);
        fn rename(
            &mut self,
            req: &Request<'_>,
            parent: u64,
            name: &OsStr,
            newparent: u64,
            newname: &OsStr,
            flags: u32,
            reply: ReplyEmpty,
        );
        fn link(&mut self, req: &Request<'_>, ino: u64, newparent: u64, newname: &OsStr, reply: ReplyEntry);
        fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen);
        fn lseek(&mut self, req: &Request<'_>, ino: u64, fh: u64, offset: i64, whence: i32, reply: ReplyLseek);
        fn read(
            &mut self,
            req: &Request<'_>,
            ino: u64,
            fh: u64,
            offset: i64,
            size: u32,
            flags: i32,
            lock_owner: Option<u64>,
            reply: ReplyData,
        );
        fn write(
            &mut self,
            req: &Request<'_>,
            ino: u64,
            fh: u64,
            offset: i64,
            data: &[u8],
            write_flags: u32,
            flags: i32,
            lock_owner: Option<u64>,
            reply: ReplyWrite,
        );
        fn flush(&mut self, req: &Request<'_>, ino: u64, fh: u64, lock_owner: u64, reply: ReplyEmpty);
        fn release(
            &mut self,
            req: &Request<'_>,
            ino: u64,
            fh: u64,
            flags: i32,
            lock_owner: Option<u64>,
            flush: bool,
            reply: ReplyEmpty,
        );
        fn fsync(&mut self, req: &Request<'_>, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty);
        fn opendir(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen);
        fn readdir(&mut self, req: &Request<'_>, ino: u64, fh: u64, offset: i64, reply: ReplyDirectory);
        fn releasedir(&mut self, req: &Request<'_>, ino: u64, fh: u64, flags: i32, reply: ReplyEmpty);
        fn fsyncdir(&mut self, req: &Request<'_>, ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty);
        fn statfs(&mut self, req: &Request<'_>, ino: u64, reply: ReplyStatfs);
        fn setxattr(
            &mut self,
            req: &Request<'_>,
            ino: u64,
            name: &OsStr,
            value: &[u8],
            flags: i32,
            position: u32,
            reply: ReplyEmpty,
        );
        fn getxattr(&mut self, req: &Request<'_>, ino: u64, name: &OsStr, size: u32, reply: ReplyXattr);
        fn listxattr(&mut self, req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr);
        fn removexattr(&mut self, req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty);
        fn access(&mut self, req: &Request<'_>, ino: u64, mask: i32, reply: ReplyEmpty);
        fn create(
            &mut self,
            req: &Request<'_>,
            parent: u64,
            name: &OsStr,
            mode: u32,
            umask: u32,
            flags: i32,
            reply: ReplyCreate,
        );
        fn fallocate(
            &mut self,
            req: &Request<'_>,
            ino: u64,
            fh: u64,
            offset: i64,
            length: i64,
            mode: i32,
            reply: ReplyEmpty,
        );
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
        );
    }
}
