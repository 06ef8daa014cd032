//! Who may talk to `rzfsd`, and the file-system checks around its control socket.
//!
//! The rules (README "Access", docs/ARCHITECTURE.md):
//! - The socket's directory is created 0700 and the socket 0600 whatever the umask, so by
//!   default only the daemon's own user (and root) can even connect. With a read group
//!   (`rzfsd --read-group GROUP` or `RZFS_READ_GROUP`) they are 0750 and 0660, group GROUP.
//! - On every request the daemon reads the peer's credentials (`SO_PEERCRED`, taken by the
//!   kernel at `connect`, so a client cannot claim another identity). uid 0 and the daemon's
//!   own uid may run anything. Other users may run read-only commands (`classify`) when they
//!   belong to the read group; everything else is answered "permission denied" (exit 1). The
//!   file modes alone are not trusted: a socket chmod-ed wide open still refuses strangers.
//! - A directory the socket lives in must be a real directory (not a symbolic link), owned
//!   by the expected user, and writable by nobody else; otherwise daemon and client refuse
//!   to use it (someone else could plant a socket that impersonates the daemon, or swap the
//!   log file for a link).
//! - Bounded resources: at most `MAX_CONNECTIONS` connections are served at once (beyond
//!   that the daemon answers "too many connections"), a request line must arrive within
//!   `REQUEST_TIMEOUT` and is at most `proto::MAX_REQUEST_BYTES` long ("request too large"
//!   is answered, not reset). The timeout covers reading the request only: a long command
//!   (pool create, import) runs as long as it needs.

use crate::proto::Response;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Default bound on connections served at once (each has its own thread).
pub const MAX_CONNECTIONS: usize = 64;

/// Default time a client has to send its whole request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What a command may do to the daemon's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only reads state (listings, properties, status, history, help).
    ReadOnly,
    /// Changes pools, datasets or mounts, or reads devices with the daemon's privileges.
    Change,
}

/// Classifies a request by its program and argv (as `cmd::zpool::run`/`cmd::zfs::run`
/// parse it: the first word is the subcommand; neither program has options before it).
///
/// A whitelist: anything not known to be read-only — an unknown or misspelt subcommand, a
/// future one — counts as a change, so a new command is root-only until listed here.
/// `rzpool import` without a pool name only lists pools, but it opens the devices under
/// `-d DIR` with the daemon's privileges, so (as with zpool(8), which needs root to scan)
/// it is a change too: otherwise a read-group member could probe files it cannot read.
pub fn classify(prog: &str, argv: &[String]) -> Access {
    let sub = argv.first().map(String::as_str);
    let read_only = match (prog, sub) {
        // No subcommand prints usage; help prints help.
        ("rzpool" | "rzfs", None | Some("help" | "-h" | "--help")) => true,
        ("rzpool", Some("list" | "status" | "get" | "history" | "iostat")) => true,
        ("rzfs", Some("list" | "get")) => true,
        // `rzfs mount` alone lists mounts; with a dataset it mounts.
        ("rzfs", Some("mount")) => argv.len() == 1,
        _ => false,
    };
    if read_only {
        Access::ReadOnly
    } else {
        Access::Change
    }
}

/// The identity of a connected client, as the kernel recorded it at `connect`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: i32,
}

/// The peer credentials of a connected Unix socket (`SO_PEERCRED`).
pub fn peer_of(conn: &UnixStream) -> std::io::Result<Peer> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let c = getsockopt(conn, PeerCredentials).map_err(std::io::Error::from)?;
    Ok(Peer { uid: c.uid(), gid: c.gid(), pid: c.pid() })
}

/// A group allowed to run read-only commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadGroup {
    pub name: String,
    pub gid: u32,
}

impl ReadGroup {
    /// Looks a group up by name (or takes a numeric gid).
    pub fn resolve(name: &str) -> Result<ReadGroup, String> {
        if let Ok(gid) = name.parse::<u32>() {
            return Ok(ReadGroup { name: name.to_string(), gid });
        }
        match nix::unistd::Group::from_name(name) {
            Ok(Some(g)) => Ok(ReadGroup { name: name.to_string(), gid: g.gid.as_raw() }),
            Ok(None) => Err(format!("read group '{name}' does not exist")),
            Err(e) => Err(format!("cannot look up read group '{name}': {e}")),
        }
    }
}

/// The groups the user database lists `uid` in (primary and supplementary), empty when
/// the uid has no entry.
pub fn groups_of_uid(uid: u32) -> Vec<u32> {
    use nix::unistd::{getgrouplist, Uid, User};
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else { return Vec::new() };
    let Ok(name) = std::ffi::CString::new(user.name) else { return vec![user.gid.as_raw()] };
    match getgrouplist(&name, user.gid) {
        Ok(gs) => gs.into_iter().map(|g| g.as_raw()).collect(),
        Err(_) => vec![user.gid.as_raw()],
    }
}

/// The user database's name of `uid`, if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
}

/// The daemon's access policy.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The uid the daemon runs as (besides root, the only one allowed to change state).
    pub daemon_uid: u32,
    /// Members may run read-only commands.
    pub read_group: Option<ReadGroup>,
}

impl Policy {
    /// Decides whether `peer` may run a command of class `access`. `groups` lists the
    /// peer's groups from the user database; it is called only when membership matters.
    pub fn check(
        &self,
        peer: &Peer,
        access: Access,
        groups: impl FnOnce(u32) -> Vec<u32>,
    ) -> Result<(), String> {
        if peer.uid == 0 || peer.uid == self.daemon_uid {
            return Ok(());
        }
        let owners = if self.daemon_uid == 0 {
            "root".to_string()
        } else {
            format!("root and uid {}", self.daemon_uid)
        };
        match (&self.read_group, access) {
            (None, _) => Err(format!("permission denied: rzfsd serves only {owners}; you are uid {}", peer.uid)),
            (Some(g), Access::Change) => Err(format!(
                "permission denied: this command changes state and needs {owners}; uid {} may only run read-only commands (group '{}')",
                peer.uid, g.name
            )),
            (Some(g), Access::ReadOnly) => {
                if peer.gid == g.gid || groups(peer.uid).contains(&g.gid) {
                    Ok(())
                } else {
                    Err(format!(
                        "permission denied: uid {} is not in group '{}', which may run read-only commands; changes need {owners}",
                        peer.uid, g.name
                    ))
                }
            }
        }
    }
}

/// Why a request line could not be read.
#[derive(Debug)]
pub enum ReadFail {
    /// More than the limit arrived without a newline.
    TooLarge,
    /// The line did not arrive in time.
    TimedOut,
    Io(std::io::Error),
}

impl ReadFail {
    /// The answer sent to the client (when it is still there to read it).
    pub fn response(&self, limit: usize, timeout: Duration) -> Response {
        match self {
            ReadFail::TooLarge => Response::err(format!("request too large (more than {limit} bytes)")),
            ReadFail::TimedOut => {
                Response::err(format!("request not received within {} s", timeout.as_secs_f64()))
            }
            ReadFail::Io(e) => Response::err(format!("cannot read request: {e}")),
        }
    }
}

/// Reads one request line (without its newline) of at most `limit` bytes, which must be
/// complete within `timeout`. End of input also ends the line (the parser then judges it).
/// Memory stays bounded by `limit`: the read stops one byte past it.
pub fn read_request(conn: &UnixStream, limit: usize, timeout: Duration) -> Result<Vec<u8>, ReadFail> {
    read_request_fds(conn, limit, timeout, &mut Vec::new())
}

/// Most file descriptors a client may pass with its request (`rzfs send` passes its
/// standard output, `rzfs receive` its standard input).
pub const MAX_PASSED_FDS: usize = 2;

/// [`read_request`], also collecting the file descriptors the client passed with the
/// request (`SCM_RIGHTS`; closed when `fds` is dropped). Descriptors beyond
/// [`MAX_PASSED_FDS`] are closed and refused.
pub fn read_request_fds(
    conn: &UnixStream,
    limit: usize,
    timeout: Duration,
    fds: &mut Vec<std::os::fd::OwnedFd>,
) -> Result<Vec<u8>, ReadFail> {
    let deadline = Instant::now() + timeout;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 16 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadFail::TimedOut);
        }
        conn.set_read_timeout(Some(left)).map_err(ReadFail::Io)?;
        let want = (limit + 1 - buf.len()).min(chunk.len());
        match recv_with_fds(conn, &mut chunk[..want], fds) {
            Ok(0) => return Ok(buf),
            Ok(n) => {
                if let Some(i) = chunk[..n].iter().position(|&b| b == b'\n') {
                    if buf.len() + i > limit {
                        return Err(ReadFail::TooLarge);
                    }
                    buf.extend_from_slice(&chunk[..i]);
                    return Ok(buf);
                }
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > limit {
                    return Err(ReadFail::TooLarge);
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ReadFail::TimedOut)
            }
            Err(e) => return Err(ReadFail::Io(e)),
        }
    }
}

/// One `recvmsg` on the control connection: data into `buf`, passed descriptors onto `fds`.
fn recv_with_fds(
    conn: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<std::os::fd::OwnedFd>,
) -> std::io::Result<usize> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        conn,
        &mut [std::io::IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(passed) = msg {
            fds.extend(passed);
        }
    }
    if got.flags.contains(rustix::net::ReturnFlags::CTRUNC) || fds.len() > MAX_PASSED_FDS {
        fds.clear();
        return Err(std::io::Error::other(format!("more than {MAX_PASSED_FDS} file descriptors passed")));
    }
    Ok(got.bytes)
}

/// Checks an existing directory that holds (or will hold) the socket: a directory, not a
/// symbolic link, owned by one of `owners`, writable by nobody else. `Ok(false)` if it
/// does not exist.
pub fn check_dir(dir: &Path, owners: &[u32]) -> Result<bool, String> {
    let md = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot inspect socket directory {}: {e}", dir.display())),
    };
    let d = dir.display();
    if md.file_type().is_symlink() {
        return Err(format!("socket directory {d} is a symbolic link; refusing to use it"));
    }
    if !md.is_dir() {
        return Err(format!("socket directory {d} is not a directory"));
    }
    if !owners.contains(&md.uid()) {
        let want: Vec<String> =
            owners.iter().map(|u| if *u == 0 { "root".into() } else { format!("uid {u}") }).collect();
        return Err(format!(
            "socket directory {d} is owned by uid {}, not by {}; refusing to use it",
            md.uid(),
            want.join(" or ")
        ));
    }
    let mode = md.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "socket directory {d} is writable by group or others (mode {mode:04o}); refusing to use it"
        ));
    }
    Ok(true)
}

/// Makes sure the socket directory exists and is safe: an existing one must pass
/// `check_dir`; a missing one is created (parents too) mode 0700 — 0750 with group
/// `group` when a read group must reach the socket — whatever the umask.
pub fn ensure_dir(dir: &Path, owners: &[u32], group: Option<u32>) -> Result<(), String> {
    if check_dir(dir, owners)? {
        return Ok(());
    }
    // The mode passed to mkdir is only narrowed by the umask, so the directory is never
    // wider than 0700 while it is being set up.
    match DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create socket directory {}: {e}", dir.display())),
    }
    if !check_dir(dir, owners)? {
        return Err(format!("socket directory {} vanished while being created", dir.display()));
    }
    let d = dir.display();
    if let Some(g) = group {
        std::os::unix::fs::lchown(dir, None, Some(g))
            .map_err(|e| format!("cannot give socket directory {d} to group {g}: {e}"))?;
    }
    let mode = if group.is_some() { 0o750 } else { 0o700 };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of socket directory {d}: {e}"))?;
    Ok(())
}

/// Opens (creating, mode 0600) the daemon's log for appending, without following a
/// symbolic link, close-on-exec (the standard library's default), and only if it is a
/// regular file (non-blocking open: a FIFO planted there fails instead of hanging).
pub fn open_log(path: &Path) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    // An older log may have been created with a wider mode.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn classification() {
        use Access::*;
        for (prog, a, want) in [
            ("rzpool", "list", ReadOnly),
            ("rzpool", "list -H -o name tank", ReadOnly),
            ("rzpool", "status -v tank", ReadOnly),
            ("rzpool", "get all tank", ReadOnly),
            ("rzpool", "history tank", ReadOnly),
            ("rzpool", "", ReadOnly),
            ("rzpool", "--help", ReadOnly),
            ("rzpool", "help create", ReadOnly),
            ("rzfs", "list -r tank", ReadOnly),
            ("rzfs", "get -H compression tank/fs", ReadOnly),
            ("rzfs", "mount", ReadOnly),
            ("rzpool", "create -m none tank /tmp/f1", Change),
            ("rzpool", "destroy tank", Change),
            ("rzpool", "add tank /tmp/f2", Change),
            ("rzpool", "add -n tank /tmp/f2", Change),
            ("rzpool", "import -d /tmp", Change),
            ("rzpool", "import -d /tmp tank", Change),
            ("rzpool", "export tank", Change),
            ("rzpool", "set comment=x tank", Change),
            ("rzpool", "scrub tank", Change),
            ("rzpool", "-- list", Change),
            ("rzpool", "LIST", Change),
            ("rzfs", "mount tank/fs", Change),
            ("rzfs", "mount tank/fs /mnt", Change),
            ("rzfs", "unmount /mnt", Change),
            ("rzfs", "umount /mnt", Change),
            ("rzfs", "create tank/fs", Change),
            ("rzfs", "destroy -n tank/fs", Change),
            ("rzfs", "snapshot tank/fs@a", Change),
            ("rzfs", "set compression=lz4 tank", Change),
            ("rzfs", "inherit compression tank", Change),
            ("rzfs", "clone tank@a tank/c", Change),
            ("rzfs", "status", Change),
            ("rzdb", "list", Change),
            ("other", "", Change),
        ] {
            assert_eq!(classify(prog, &args(a)), want, "{prog} {a}");
        }
    }

    #[test]
    fn policy() {
        let peer = |uid, gid| Peer { uid, gid, pid: 1 };
        let none = Policy { daemon_uid: 0, read_group: None };
        let no_groups = |_| Vec::new();
        assert!(none.check(&peer(0, 0), Access::Change, no_groups).is_ok());
        let e = none.check(&peer(1000, 1000), Access::ReadOnly, no_groups).unwrap_err();
        assert!(e.starts_with("permission denied:") && e.contains("uid 1000"), "{e}");
        assert!(none.check(&peer(1000, 1000), Access::Change, no_groups).is_err());

        let user_daemon = Policy { daemon_uid: 1000, read_group: None };
        assert!(user_daemon.check(&peer(1000, 1000), Access::Change, no_groups).is_ok());
        assert!(user_daemon.check(&peer(0, 0), Access::Change, no_groups).is_ok());
        assert!(user_daemon.check(&peer(1001, 1000), Access::ReadOnly, no_groups).is_err());

        let g = Policy { daemon_uid: 0, read_group: Some(ReadGroup { name: "rzfs".into(), gid: 500 }) };
        // Member by the connecting process's gid, or by the user database.
        assert!(g.check(&peer(1000, 500), Access::ReadOnly, no_groups).is_ok());
        assert!(g.check(&peer(1000, 1000), Access::ReadOnly, |_| vec![1000, 500]).is_ok());
        let e = g.check(&peer(1000, 1000), Access::ReadOnly, |_| vec![1000]).unwrap_err();
        assert!(e.contains("not in group 'rzfs'"), "{e}");
        // Members still may not change anything.
        let e = g.check(&peer(1000, 500), Access::Change, |_| vec![500]).unwrap_err();
        assert!(e.starts_with("permission denied:") && e.contains("changes state"), "{e}");
    }

    #[test]
    fn request_line_limits() {
        let t = Duration::from_secs(30);
        // A line within the limit, with and without its newline.
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"hello\nrest").unwrap();
        assert_eq!(read_request(&b, 5, t).unwrap(), b"hello");
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"hello").unwrap();
        drop(a);
        assert_eq!(read_request(&b, 5, t).unwrap(), b"hello");
        // One byte over, with or without a newline.
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"hello!\n").unwrap();
        assert!(matches!(read_request(&b, 5, t), Err(ReadFail::TooLarge)));
        let (a, b) = UnixStream::pair().unwrap();
        let w = std::thread::spawn(move || {
            let _ = (&a).write_all(&vec![b'x'; 1 << 20]);
        });
        assert!(matches!(read_request(&b, 64 << 10, t), Err(ReadFail::TooLarge)));
        drop(b);
        w.join().unwrap();
        let r = ReadFail::TooLarge.response(65536, t);
        assert_eq!((r.exit, r.stderr.as_str()), (1, "request too large (more than 65536 bytes)\n"));
        // Nothing arrives: the read gives up instead of holding the thread.
        let (_a, b) = UnixStream::pair().unwrap();
        assert!(matches!(read_request(&b, 5, Duration::from_millis(50)), Err(ReadFail::TimedOut)));
    }

    proptest::proptest! {
        /// Whatever a peer sends, the reader returns exactly the first line when it fits the
        /// limit and "too large" when it does not; what parses is then classified.
        #[test]
        fn any_request_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000), limit in 1usize..2000) {
            let (a, b) = UnixStream::pair().unwrap();
            (&a).write_all(&bytes).unwrap();
            drop(a);
            let first = bytes.split(|&c| c == b'\n').next().unwrap_or(&[]);
            match read_request(&b, limit, Duration::from_secs(30)) {
                Ok(line) => {
                    proptest::prop_assert!(first.len() <= limit);
                    proptest::prop_assert_eq!(&line[..], first);
                    if let Ok(r) = crate::proto::parse_request(&line) {
                        let _ = classify(&r.prog, &r.argv);
                    }
                }
                Err(ReadFail::TooLarge) => proptest::prop_assert!(first.len() > limit),
                Err(e) => proptest::prop_assert!(false, "{:?}", e),
            }
        }
    }

    fn tmp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rzfs-access-unit-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn socket_directory_checks() {
        let me = nix::unistd::geteuid().as_raw();
        let base = tmp("dirs");
        std::fs::create_dir_all(&base).unwrap();
        // Created 0700 (an explicit chmod after mkdir: the result does not depend on the umask).
        let d = base.join("a/b");
        ensure_dir(&d, &[me], None).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o7777, 0o700);
        assert!(check_dir(&d, &[me]).unwrap());
        // Group- or world-writable, a symbolic link, a file: refused.
        let w = base.join("wide");
        std::fs::create_dir(&w).unwrap();
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(ensure_dir(&w, &[me], None).unwrap_err().contains("writable by group or others"));
        let l = base.join("link");
        std::os::unix::fs::symlink(&d, &l).unwrap();
        assert!(ensure_dir(&l, &[me], None).unwrap_err().contains("symbolic link"));
        let f = base.join("file");
        std::fs::write(&f, b"").unwrap();
        assert!(check_dir(&f, &[me]).unwrap_err().contains("not a directory"));
        // Owned by someone else.
        assert!(check_dir(&d, &[me.wrapping_add(1)]).unwrap_err().contains("owned by uid"));
        assert!(!check_dir(&base.join("missing"), &[me]).unwrap());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn log_is_not_opened_through_a_link() {
        let base = tmp("log");
        std::fs::create_dir_all(&base).unwrap();
        let target = base.join("target");
        std::fs::write(&target, b"keep").unwrap();
        let link = base.join("rzfsd.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_log(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::remove_file(&link).unwrap();
        let mut f = open_log(&link).unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(std::fs::metadata(&link).unwrap().mode() & 0o777, 0o600);
        let fifo = base.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_log(&fifo).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
