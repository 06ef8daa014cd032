//! `rzdb -R`: copying a whole dataset out of a pool onto the host (recovery).
//!
//! The pool is untrusted input and the host is not: nothing the pool says may make the copy
//! write outside DEST or create something more privileged than the caller asked for.
//!
//! - **Names are checked** before use: empty, `.`, `..`, and names holding `/` or NUL are
//!   refused (a crafted ZAP can hold any bytes).
//! - **Everything is created relative to directory file descriptors** (`mkdirat`, `openat`
//!   with `O_CREAT|O_EXCL|O_NOFOLLOW`, `symlinkat`, `mknodat`), one path component at a time:
//!   no path from the pool is ever resolved by the kernel, and no symlink is ever followed,
//!   so a symlink the copy itself created (or a duplicate name) cannot redirect a later write.
//!   An existing name is an error for that entry (`EEXIST`), never an overwrite.
//! - **DEST must be empty** (or absent): merging into a populated directory would let the
//!   pool's names meet existing files and symlinks.
//! - **Ownership** is the caller's unless `same_owner` (like `tar --same-owner`); without it
//!   the setuid and setgid bits are dropped, so a user's setuid file never becomes a setuid
//!   file of the (usually root) caller, and device nodes are not created at all.
//! - **Directory modes and times are applied after their contents** (a read-only directory
//!   must still receive its files).
//! - **A directory is copied once**: a set of visited directory objects turns a crafted cycle
//!   (an entry naming an ancestor) or shared subtree (one directory under many names, which
//!   would make the walk exponential) into a reported skip. A regular file reached again
//!   (hard links) becomes a hard link to its first copy.
//! - **Files are copied sparsely**: only the blocks that exist are read and written, and the
//!   length is set at the end, so a file whose size claims terabytes costs what it stores.
//!
//! Every entry that could not be reproduced is reported (path and reason) and the copy goes
//! on; the caller exits non-zero when anything was skipped.

use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps, CWD};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use zpl::{Attrs, FileType, Zpl};

/// Deepest directory nesting copied (each level holds one open directory descriptor).
pub const MAX_DEPTH: usize = 2048;

/// Options of a copy-out.
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyOpts {
    /// Restore owner and group, keep setuid/setgid, create device nodes.
    pub same_owner: bool,
}

/// What a copy-out did.
#[derive(Debug, Default)]
pub struct CopyReport {
    /// Entries created (directories, files, links, ...).
    pub copied: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// `(path, reason)` of every entry not reproduced (or reproduced only in part).
    pub skipped: Vec<(String, String)>,
}

/// Why a name from the pool cannot be used on the host, if it cannot.
pub fn invalid_name(name: &[u8]) -> Option<&'static str> {
    zpl::host_name_problem(name)
}

/// A name for messages: UTF-8 without control characters as is, anything else escaped.
pub fn show_name(name: &[u8]) -> String {
    match std::str::from_utf8(name) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => name.escape_ascii().to_string(),
    }
}

/// Raises the soft limit of open files to the hard limit: a deep tree holds one directory
/// descriptor per level.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}

/// Opens DEST (creating it if absent) and checks it is an empty directory.
fn open_dest(dest: &str) -> Result<OwnedFd, String> {
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest).map_err(|e| format!("cannot create {dest}: {e}"))?;
        }
        Err(e) => return Err(format!("cannot use {dest}: {e}")),
        Ok(_) => {}
    }
    let fd =
        rustix::fs::openat(CWD, dest, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| format!("cannot open {dest} as a directory: {e}"))?;
    let mut it = std::fs::read_dir(dest).map_err(|e| format!("cannot list {dest}: {e}"))?;
    if it.next().is_some() {
        return Err(format!(
            "{dest} is not empty: copy-out writes only into an empty (or new) directory, so that \
             names from the pool never meet existing files"
        ));
    }
    Ok(fd)
}

/// Copies the whole ZPL tree of `z` into `dest`.
pub fn copy_tree(z: &Zpl, dest: &str, opts: CopyOpts) -> Result<CopyReport, String> {
    raise_fd_limit();
    let root = open_dest(dest)?;
    let mut c = Copier {
        z,
        opts,
        root: &root,
        dirs_seen: HashMap::new(),
        files_seen: HashMap::new(),
        report: CopyReport::default(),
    };
    c.dirs_seen.insert(z.root, String::from("/"));
    c.dir(&root, z.root, "", b"", 0);
    Ok(c.report)
}

struct Copier<'a> {
    z: &'a Zpl,
    opts: CopyOpts,
    root: &'a OwnedFd,
    /// Directory objects copied so far, with their path (for loop reports).
    dirs_seen: HashMap<u64, String>,
    /// Multiply-linked files copied so far: object → path relative to DEST (checked names
    /// joined by '/', so it names exactly what this copy created).
    files_seen: HashMap<u64, Vec<u8>>,
    report: CopyReport,
}

/// ZPL times are `int64` seconds stored in a u64 (times before 1970 are negative).
fn ts((sec, nsec): (u64, u64)) -> Timespec {
    Timespec { tv_sec: sec as i64, tv_nsec: nsec.min(999_999_999) as _ }
}

fn times(a: &Attrs) -> Timestamps {
    Timestamps { last_access: ts(a.atime), last_modification: ts(a.mtime) }
}

/// `dev_t` of a ZPL `rdev`: OpenZFS on Linux stores the major number in the high 32 bits
/// and the minor in the low 32 (`zfs_expldev`).
fn dev_of(rdev: u64) -> rustix::fs::Dev {
    rustix::fs::makedev((rdev >> 32) as u32, rdev as u32)
}

impl Copier<'_> {
    fn skip(&mut self, path: &str, why: impl Into<String>) {
        let why = why.into();
        eprintln!("rzdb: skipped {path}: {why}");
        self.report.skipped.push((path.to_string(), why));
    }

    /// Permission bits to apply: setuid/setgid only when ownership is restored.
    fn mode_bits(&self, mode: u64) -> Mode {
        let keep = if self.opts.same_owner { 0o7777 } else { 0o1777 };
        Mode::from_raw_mode((mode & keep) as _)
    }

    fn owner(&self, a: &Attrs) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
        match (u32::try_from(a.uid), u32::try_from(a.gid)) {
            (Ok(u), Ok(g)) if u != u32::MAX && g != u32::MAX => {
                (Some(rustix::fs::Uid::from_raw(u)), Some(rustix::fs::Gid::from_raw(g)))
            }
            _ => (None, None),
        }
    }

    /// Ownership (when asked), then mode, then times of an open file or directory. The
    /// order matters: changing the owner clears setuid/setgid.
    fn finish_fd(&self, fd: impl AsFd, a: &Attrs) -> std::io::Result<()> {
        if self.opts.same_owner {
            let (u, g) = self.owner(a);
            rustix::fs::fchown(&fd, u, g)?;
        }
        rustix::fs::fchmod(&fd, self.mode_bits(a.mode))?;
        rustix::fs::futimens(&fd, &times(a))?;
        Ok(())
    }

    /// Copies the entries of directory `obj` into `fd`; `path` is for messages, `rel` the
    /// real relative path of the directory under DEST.
    fn dir(&mut self, fd: &OwnedFd, obj: u64, path: &str, rel: &[u8], depth: usize) {
        let mut entries = match self.z.readdir(obj) {
            Ok(e) => e,
            Err(e) => {
                return self.skip(if path.is_empty() { "/" } else { path }, format!("cannot list: {e}"))
            }
        };
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            let shown = format!("{path}/{}", show_name(&e.name));
            if let Some(why) = invalid_name(&e.name) {
                self.skip(&shown, format!("invalid name ({why})"));
                continue;
            }
            let a = match self.z.getattr(e.object) {
                Ok(a) => a,
                Err(err) => {
                    self.skip(&shown, format!("object {}: {err}", e.object));
                    continue;
                }
            };
            let mut child_rel = rel.to_vec();
            if !child_rel.is_empty() {
                child_rel.push(b'/');
            }
            child_rel.extend_from_slice(&e.name);
            match self.entry(fd, &e.name, &shown, &child_rel, &a, depth) {
                Ok(()) => self.report.copied += 1,
                Err(why) => self.skip(&shown, why),
            }
        }
    }

    fn entry(
        &mut self,
        dir: &OwnedFd,
        name: &[u8],
        path: &str,
        rel: &[u8],
        a: &Attrs,
        depth: usize,
    ) -> Result<(), String> {
        let io = |what: &str, e: rustix::io::Errno| format!("{what}: {e}");
        match a.kind() {
            FileType::Directory => {
                if let Some(first) = self.dirs_seen.get(&a.object) {
                    return Err(format!(
                        "directory object {} was already copied as {first} (a loop or a directory \
                         linked twice): not descended again",
                        a.object
                    ));
                }
                if depth + 1 > MAX_DEPTH {
                    return Err(format!("deeper than {MAX_DEPTH} levels"));
                }
                self.dirs_seen.insert(a.object, path.to_string());
                rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)).map_err(|e| io("mkdir", e))?;
                let child = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io("open directory", e))?;
                self.dir(&child, a.object, path, rel, depth + 1);
                self.finish_fd(&child, a).map_err(|e| format!("set attributes: {e}"))
            }
            FileType::Regular => {
                if a.links > 1 {
                    if let Some(first) = self.files_seen.get(&a.object) {
                        // Every component of `first` is a directory this copy created.
                        return rustix::fs::linkat(self.root, first.as_slice(), dir, name, AtFlags::empty())
                            .map_err(|e| io("hard link", e));
                    }
                }
                let fd = rustix::fs::openat(
                    dir,
                    name,
                    OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )
                .map_err(|e| io("create", e))?;
                let f = File::from(fd);
                if a.links > 1 {
                    self.files_seen.insert(a.object, rel.to_vec());
                }
                let res = copy_sparse(self.z, a, &f);
                if let Ok(n) = &res {
                    self.report.bytes += n;
                }
                let fin = self.finish_fd(&f, a).map_err(|e| format!("set attributes: {e}"));
                res.map(|_| ())?;
                fin
            }
            FileType::Symlink => {
                let t = self.z.readlink(a.object).map_err(|e| format!("read target: {e}"))?;
                if t.contains(&0) {
                    return Err("symlink target contains NUL".into());
                }
                rustix::fs::symlinkat(t.as_slice(), dir, name).map_err(|e| io("symlink", e))?;
                self.finish_at(dir, name, a)
            }
            FileType::Fifo => {
                rustix::fs::mknodat(dir, name, rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o600), 0)
                    .map_err(|e| io("mkfifo", e))?;
                self.finish_at(dir, name, a)
            }
            k @ (FileType::CharDevice | FileType::BlockDevice) => {
                if !self.opts.same_owner {
                    return Err("device node not created (only with --same-owner)".into());
                }
                let ft = if k == FileType::CharDevice {
                    rustix::fs::FileType::CharacterDevice
                } else {
                    rustix::fs::FileType::BlockDevice
                };
                rustix::fs::mknodat(dir, name, ft, Mode::from_raw_mode(0o600), dev_of(a.rdev))
                    .map_err(|e| io("mknod", e))?;
                self.finish_at(dir, name, a)
            }
            FileType::Socket => Err("socket not copied".into()),
        }
    }

    /// Owner, mode and times of something that cannot be opened for them (symlinks, fifos,
    /// device nodes), by name in `dir`, never following a symlink.
    fn finish_at(&self, dir: &OwnedFd, name: &[u8], a: &Attrs) -> Result<(), String> {
        if self.opts.same_owner {
            let (u, g) = self.owner(a);
            rustix::fs::chownat(dir, name, u, g, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| format!("chown: {e}"))?;
        }
        if a.kind() != FileType::Symlink {
            // Opening a fifo or device could block or act, so the mode is set by name; the
            // name was just created by mknodat, so it is not a symlink (Linux has no
            // fchmodat(AT_SYMLINK_NOFOLLOW): rustix refuses that flag with EOPNOTSUPP).
            rustix::fs::chmodat(dir, name, self.mode_bits(a.mode), AtFlags::empty())
                .map_err(|e| format!("chmod: {e}"))?;
        }
        rustix::fs::utimensat(dir, name, &times(a), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| format!("utimes: {e}"))
    }
}

/// Writes the blocks of file `a` that exist into `f` at their offsets, then sets the length:
/// holes (and a size past the last block) stay holes on the host. Returns the bytes
/// written. A block that cannot be read fails the file (the blocks before it are kept).
pub fn copy_sparse(z: &Zpl, a: &Attrs, f: &File) -> Result<u64, String> {
    let dn = z.file_dnode(a.object).map_err(|e| e.to_string())?;
    let bs = dn.data_block_size();
    if bs == 0 {
        return Err("dnode has block size 0".into());
    }
    let size = a.size;
    let mut written = 0u64;
    let mut first_err = None;
    let res = z.os.for_each_l0(&dn, &mut |blkid, bp| {
        let Some(off) = blkid.checked_mul(bs).filter(|&o| o < size) else {
            return Ok(());
        };
        let want = (size - off).min(bs) as usize;
        let data = match z.os.reader().read_bp(bp) {
            Ok(d) => d,
            Err(e) => {
                first_err.get_or_insert_with(|| format!("offset {off}: {e}"));
                return Ok(());
            }
        };
        let Some(part) = data.get(..want) else {
            first_err
                .get_or_insert_with(|| format!("offset {off}: block of {} bytes, need {want}", data.len()));
            return Ok(());
        };
        if part.iter().any(|&b| b != 0) {
            if let Err(e) = f.write_all_at(part, off) {
                first_err.get_or_insert_with(|| format!("write at {off}: {e}"));
                return Err(dmu::DmuError::Corrupt { what: "copy-out", detail: e.to_string() });
            }
            written += part.len() as u64;
        }
        Ok(())
    });
    if let Err(e) = res {
        first_err.get_or_insert_with(|| e.to_string());
    }
    f.set_len(size).map_err(|e| format!("set length {size}: {e}"))?;
    match first_err {
        Some(e) => Err(format!("unreadable data ({e}); readable blocks were copied")),
        None => Ok(written),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"x\0y", b"\0"] {
            assert!(invalid_name(bad).is_some(), "{bad:?}");
        }
        for good in [&b"a"[..], b"...", b".hidden", b"a b", b"\xff\xfe", b"-rf"] {
            assert!(invalid_name(good).is_none(), "{good:?}");
        }
        assert_eq!(show_name(b"a\0/\n"), "a\\x00/\\n");
    }

    #[test]
    fn devices_split_major_minor() {
        let d = dev_of((8u64 << 32) | 17);
        assert_eq!((rustix::fs::major(d), rustix::fs::minor(d)), (8, 17));
    }
}
