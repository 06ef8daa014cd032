//! Block devices under the leaf vdevs: regular files and block devices ([`FileDevice`]),
//! memory ([`MemDevice`], for tests) and a fault injector ([`FaultyDevice`], for tests).
//!
//! Offsets here are raw device byte offsets: the 4 MiB label/boot area at the front is the
//! caller's concern (see [`crate::VDEV_LABEL_START_SIZE`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Positional, thread-safe access to one device.
pub trait BlockDevice: Send + Sync {
    /// Fill all of `buf` from `off`; a short device is an error.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write all of `buf` at `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Make completed writes durable.
    fn flush(&self) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Path or other human name, as `zpool status` would print it.
    fn name(&self) -> &str;
    /// Was the device opened for writing? (Repairs are attempted only then.)
    fn writable(&self) -> bool {
        true
    }
    /// Lets go of the exclusive claim on the device (the `flock` of
    /// [`FileDevice::open_exclusive`]) before the handle itself is dropped: a pool that was
    /// exported or halted sends it no more I/O, and another importer must not wait for the
    /// last reference of a thread finishing up. No-op where there is nothing to release.
    fn release(&self) {}
    /// Looks at the device's size again (it may have grown: a file extended, a LUN
    /// resized) and returns it. A device never shrinks here: a smaller answer keeps the
    /// size it had (OpenZFS refuses a device that shrank; rzfs's reads would fail past the
    /// new end anyway). `zpool online -e` and `autoexpand` use it.
    fn refresh_size(&self) -> io::Result<u64> {
        Ok(self.size())
    }
}

fn out_of_range(name: &str, off: u64, len: usize, size: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("{name}: {len} bytes at {off:#x} beyond device size {size:#x}"),
    )
}

/// Is `[off, off+len)` inside a device of `size` bytes?
fn in_range(off: u64, len: usize, size: u64) -> bool {
    off.checked_add(len as u64).is_some_and(|end| end <= size)
}

/// A regular file or a block device, accessed with `pread`/`pwrite`.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    /// Bytes, from seeking to the end at open and at each [`BlockDevice::refresh_size`].
    size: AtomicU64,
    name: String,
    writable: bool,
}

impl FileDevice {
    /// Open `path` read-only or read-write. The size comes from seeking to the end, which also
    /// works for block devices (whose metadata length is 0).
    pub fn open(path: impl AsRef<Path>, writable: bool) -> io::Result<Self> {
        let path = path.as_ref();
        let mut file = OpenOptions::new().read(true).write(writable).open(path)?;
        let size = AtomicU64::new(file.seek(SeekFrom::End(0))?);
        Ok(Self { file, size, name: path.display().to_string(), writable })
    }
}

impl FileDevice {
    /// Opens `path` read-write for a pool imported read-write, as its only owner: an
    /// exclusive advisory lock (`flock`) on the file, plus `O_EXCL` for a block device (the
    /// kernel then refuses other exclusive openers and mounts). Another process holding it
    /// makes this fail with `ErrorKind::ResourceBusy`. The lock lasts as long as the device
    /// is open.
    pub fn open_exclusive(path: impl AsRef<Path>) -> io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let path = path.as_ref();
        let is_block = std::fs::metadata(path)?.file_type().is_block_device();
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if is_block {
            o.custom_flags(libc::O_EXCL);
        }
        let busy = || {
            io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("{} is in use by another process", path.display()),
            )
        };
        let mut file =
            o.open(path).map_err(|e| if e.raw_os_error() == Some(libc::EBUSY) { busy() } else { e })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(busy()),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let size = AtomicU64::new(file.seek(SeekFrom::End(0))?);
        Ok(Self { file, size, name: path.display().to_string(), writable: true })
    }

    /// Is `path` held by an exclusive owner ([`FileDevice::open_exclusive`]) right now?
    pub fn is_locked(path: impl AsRef<Path>) -> bool {
        let Ok(f) = File::open(path) else { return false };
        match f.try_lock_shared() {
            Ok(()) => {
                let _ = f.unlock();
                false
            }
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(_) => false,
        }
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let size = self.size();
        if !in_range(off, buf.len(), size) {
            return Err(out_of_range(&self.name, off, buf.len(), size));
        }
        self.file.read_exact_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} opened read-only", self.name),
            ));
        }
        let size = self.size();
        if !in_range(off, buf.len(), size) {
            return Err(out_of_range(&self.name, off, buf.len(), size));
        }
        self.file.write_all_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        if self.writable {
            self.file.sync_data()
        } else {
            Ok(())
        }
    }
    fn release(&self) {
        // Unlocking a file this handle never locked is harmless.
        let _ = self.file.unlock();
    }
    fn size(&self) -> u64 {
        self.size.load(Ordering::SeqCst)
    }
    fn name(&self) -> &str {
        &self.name
    }

    fn writable(&self) -> bool {
        self.writable
    }

    fn refresh_size(&self) -> io::Result<u64> {
        // Seeking a shared handle moves only the offset, which pread/pwrite never use.
        let now = (&self.file).seek(SeekFrom::End(0))?;
        Ok(self.size.fetch_max(now, Ordering::SeqCst).max(now))
    }
}

/// A fixed-size device held in memory.
#[derive(Debug)]
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
    name: String,
}

impl MemDevice {
    /// A zero-filled device of `size` bytes.
    pub fn new(name: impl Into<String>, size: usize) -> Self {
        Self::from_vec(name, vec![0; size])
    }
    /// A device holding exactly `bytes`.
    pub fn from_vec(name: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self { bytes: RwLock::new(bytes), name: name.into() }
    }
    /// A copy of the whole content.
    pub fn contents(&self) -> Vec<u8> {
        self.bytes.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let bytes = self.bytes.read().unwrap_or_else(|e| e.into_inner());
        let size = bytes.len() as u64;
        let src = usize::try_from(off)
            .ok()
            .and_then(|o| bytes.get(o..o.checked_add(buf.len())?))
            .ok_or_else(|| out_of_range(&self.name, off, buf.len(), size))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut bytes = self.bytes.write().unwrap_or_else(|e| e.into_inner());
        let size = bytes.len() as u64;
        let dst = usize::try_from(off)
            .ok()
            .and_then(|o| bytes.get_mut(o..o.checked_add(buf.len())?))
            .ok_or_else(|| out_of_range(&self.name, off, buf.len(), size))?;
        dst.copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.bytes.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// Wraps a device and injects faults: failed reads or writes, a vanished device (every call
/// fails), and bit flips in the data returned for given raw byte ranges.
pub struct FaultyDevice {
    inner: Arc<dyn BlockDevice>,
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    vanished: AtomicBool,
    flips: Mutex<Vec<Range<u64>>>,
}

impl FaultyDevice {
    /// A wrapper that, until told otherwise, passes everything through.
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        Self {
            inner,
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            vanished: AtomicBool::new(false),
            flips: Mutex::new(Vec::new()),
        }
    }
    /// Make every read fail (EIO) or succeed again.
    pub fn set_fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::SeqCst);
    }
    /// Make every write fail (EIO) or succeed again.
    pub fn set_fail_writes(&self, on: bool) {
        self.fail_writes.store(on, Ordering::SeqCst);
    }
    /// Make the device disappear (ENXIO on every call) or come back.
    pub fn set_vanished(&self, on: bool) {
        self.vanished.store(on, Ordering::SeqCst);
    }
    /// Invert every bit of the bytes in `range` (raw device offsets) in future reads.
    pub fn flip_bits(&self, range: Range<u64>) {
        self.flips.lock().unwrap_or_else(|e| e.into_inner()).push(range);
    }
    /// Forget all bit-flip ranges.
    pub fn clear_flips(&self) {
        self.flips.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn check_present(&self) -> io::Result<()> {
        if self.vanished.load(Ordering::SeqCst) {
            Err(io::Error::new(io::ErrorKind::NotFound, format!("{} vanished", self.inner.name())))
        } else {
            Ok(())
        }
    }
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} error"))
}

impl BlockDevice for FaultyDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.check_present()?;
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected("read"));
        }
        self.inner.read_at(buf, off)?;
        let end = off.saturating_add(buf.len() as u64);
        for r in self.flips.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let (lo, hi) = (r.start.max(off), r.end.min(end));
            for pos in lo..hi {
                if let Some(b) = buf.get_mut((pos - off) as usize) {
                    *b = !*b;
                }
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.check_present()?;
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(injected("write"));
        }
        self.inner.write_at(buf, off)
    }
    fn flush(&self) -> io::Result<()> {
        self.check_present()?;
        self.inner.flush()
    }
    fn release(&self) {
        self.inner.release()
    }
    fn refresh_size(&self) -> io::Result<u64> {
        self.inner.refresh_size()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_device_bounds() {
        let d = MemDevice::new("m", 16);
        d.write_at(&[1, 2, 3], 13).unwrap();
        assert!(d.write_at(&[1, 2, 3], 14).is_err());
        assert!(d.write_at(&[1], u64::MAX).is_err());
        let mut b = [0u8; 3];
        d.read_at(&mut b, 13).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(d.read_at(&mut b, 15).is_err());
        assert_eq!(d.size(), 16);
    }

    #[test]
    fn faulty_device_injects() {
        let inner: Arc<dyn BlockDevice> = Arc::new(MemDevice::new("m", 16));
        let f = FaultyDevice::new(inner);
        f.write_at(&[0u8; 16], 0).unwrap();
        f.flip_bits(2..4);
        let mut b = [0u8; 4];
        f.read_at(&mut b, 1).unwrap();
        assert_eq!(b, [0, 0xff, 0xff, 0]);
        f.clear_flips();
        f.set_fail_reads(true);
        assert!(f.read_at(&mut b, 0).is_err());
        f.set_fail_reads(false);
        f.set_vanished(true);
        assert!(f.write_at(&b, 0).is_err());
        assert!(f.flush().is_err());
    }

    #[test]
    fn file_device_roundtrip() {
        let path = std::env::temp_dir().join(format!("rzfs-vdev-filedev-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        let d = FileDevice::open(&path, true).unwrap();
        assert_eq!(d.size(), 8192);
        d.write_at(b"hello", 4096).unwrap();
        d.flush().unwrap();
        let ro = FileDevice::open(&path, false).unwrap();
        let mut b = [0u8; 5];
        ro.read_at(&mut b, 4096).unwrap();
        assert_eq!(&b, b"hello");
        assert!(ro.write_at(b"x", 0).is_err());
        assert!(ro.read_at(&mut b, 8190).is_err());
        std::fs::remove_file(&path).unwrap();
    }
}
