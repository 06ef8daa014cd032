//! `rzfsd`: owns imported pools and FUSE mounts, serves the control socket.
//!
//! One thread per connection, at most `Config::max_connections` at once; each checks the
//! client's credentials and runs one command against the shared state (access rules:
//! `crate::access`). Pools are `Arc`s, so a long read (a mount serving files) never blocks
//! the control socket; the pool table lock is held only while looking up or changing the table.

use crate::access;
use crate::cmd;
use crate::proto::{parse_request, Request, Response, MAX_REQUEST_BYTES};
use nix::sys::stat::{umask, Mode};
use pool::Pool;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A dataset served over FUSE.
pub struct Mount {
    pub dataset: String,
    pub dir: PathBuf,
    pub session: rzfs_fuse::MountHandle,
}

/// Everything the daemon owns.
#[derive(Default)]
pub struct State {
    pub pools: Mutex<BTreeMap<String, Arc<Pool>>>,
    pub mounts: Mutex<Vec<Mount>>,
    /// Pools open for writing (a subset of `pools`).
    pub writers: Mutex<BTreeMap<String, Arc<crate::rwpool::RwPool>>>,
    /// Volumes served as files and loop devices.
    pub vols: crate::volumes::Volumes,
    /// The pool cache this daemon keeps (`crate::cache`), if any.
    pub cachefile: Option<PathBuf>,
    /// Serializes changes of the cache files.
    pub cache_lock: Mutex<()>,
    /// Pools cached in a file of their own (`cachefile=PATH`), by name.
    pub pool_cachefiles: Mutex<BTreeMap<String, PathBuf>>,
    /// Directories that held the devices of pools this daemon exported: an import without
    /// `-d` searches them after `/dev`, so `export` then `import POOL` finds a pool of file
    /// vdevs again (OpenZFS searches only `/dev` and needs `-d DIR` for files).
    pub exported_dirs: Mutex<Vec<PathBuf>>,
}

impl State {
    /// The imported pool `name`, or zpool's error text.
    pub fn pool(&self, name: &str) -> Result<Arc<Pool>, String> {
        self.pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| format!("cannot open '{name}': no such pool"))
    }

    /// All imported pools, by name.
    pub fn all_pools(&self) -> Vec<Arc<Pool>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }
}

/// How the daemon serves its socket (README "Access").
#[derive(Clone, Debug)]
pub struct Config {
    /// Group whose members may run read-only commands (`--read-group`, `RZFS_READ_GROUP`).
    pub read_group: Option<String>,
    /// Connections served at once; more are answered "too many connections".
    pub max_connections: usize,
    /// Time a client has to send its request line.
    pub request_timeout: Duration,
    /// Unix socket to serve volumes on over NBD (`--nbd-socket`, `RZFS_NBD_SOCKET`).
    pub nbd_socket: Option<PathBuf>,
    /// TCP address to serve volumes on over NBD (`--nbd-listen`, `RZFS_NBD_LISTEN`).
    pub nbd_listen: Option<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            read_group: None,
            max_connections: access::MAX_CONNECTIONS,
            request_timeout: access::REQUEST_TIMEOUT,
            nbd_socket: None,
            nbd_listen: None,
        }
    }
}

/// Binds the socket (replacing a stale one) and serves forever, with the default access rules.
pub fn serve(sock: &Path) -> std::io::Result<()> {
    serve_with(sock, &Config::default())
}

/// Binds the socket and serves forever. The socket's directory is created 0700 (0750 with
/// a read group) and the socket 0600 (0660) whatever the umask; an existing directory must
/// be ours, not a symbolic link, and writable by nobody else.
pub fn serve_with(sock: &Path, cfg: &Config) -> std::io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    let group = match &cfg.read_group {
        Some(name) => Some(access::ReadGroup::resolve(name).map_err(std::io::Error::other)?),
        None => None,
    };
    let gid = group.as_ref().map(|g| g.gid);
    let dir = match sock.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    access::ensure_dir(&dir, &[me], gid).map_err(std::io::Error::other)?;
    if let Some(g) = &group {
        let md = std::fs::metadata(&dir)?;
        if md.gid() != g.gid || md.mode() & 0o010 == 0 {
            eprintln!(
                "rzfsd: warning: members of group '{}' cannot reach {}: its directory is mode {:04o}, group {}",
                g.name,
                sock.display(),
                md.mode() & 0o7777,
                md.gid()
            );
        }
    }
    if let Ok(md) = std::fs::symlink_metadata(sock) {
        if !md.file_type().is_socket() {
            return Err(std::io::Error::other(format!("{} exists and is not a socket", sock.display())));
        }
        if UnixStream::connect(sock).is_ok() {
            return Err(std::io::Error::other(format!("another rzfsd already serves {}", sock.display())));
        }
        std::fs::remove_file(sock)?;
    }
    // bind() creates the socket file with 0777 less the umask; a umask of 0177 makes it
    // 0600 from the start, so it never exists with a wider mode. The daemon has no other
    // threads yet, so changing the process-wide umask here races with nothing.
    let old = umask(Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(sock);
    umask(old);
    let listener = bound?;
    if let Some(g) = gid {
        std::os::unix::fs::lchown(sock, None, Some(g))?;
    }
    let mode = if gid.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(sock, std::fs::Permissions::from_mode(mode))?;

    let policy = Arc::new(access::Policy { daemon_uid: me, read_group: group });
    let state = Arc::new(State { cachefile: crate::cache::path_for(sock), ..State::default() });
    // Pools recorded in the cache come back before the first request is served.
    crate::cache::import_all(&state);
    // Volumes over NBD, for as long as the daemon runs (the servers stop when dropped).
    let mut nbd = Vec::new();
    if let Some(p) = &cfg.nbd_socket {
        let s = rzfs_nbd::serve_unix(state.vols.table(), p)
            .map_err(|e| std::io::Error::other(format!("cannot serve NBD on {}: {e}", p.display())))?;
        nbd.push(s);
    }
    if let Some(a) = &cfg.nbd_listen {
        let s = rzfs_nbd::serve_tcp(state.vols.table(), a)
            .map_err(|e| std::io::Error::other(format!("cannot serve NBD on {a}: {e}")))?;
        nbd.push(s);
    }
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(_) => {
                // Out of descriptors or similar: do not spin.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if active.load(Ordering::SeqCst) >= cfg.max_connections {
            // Answered from the accept loop: a small reply fits the socket buffer, and the
            // write timeout bounds the rare case where it does not.
            let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
            let msg = format!("rzfsd: too many connections (limit {}); try again", cfg.max_connections);
            let _ = reply(&conn, &Response::err(msg));
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(active.clone());
        let (st, pol, timeout) = (state.clone(), policy.clone(), cfg.request_timeout);
        // If the thread cannot be spawned, the closure (connection and slot) is dropped.
        let _ = std::thread::Builder::new().name("rzfsd-conn".into()).spawn(move || {
            let _ = handle(&st, &pol, &conn, timeout);
            // The slot is freed before the connection closes, so a client that saw the
            // end of its answer finds the slot free when it connects again.
            drop(slot);
            drop(conn);
        });
    }
    Ok(())
}

/// One counted connection; frees its place when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes the answer line. The connection is closed by its owner afterwards, after the
/// connection's place is freed (no `shutdown` here: the client would see the end early).
fn reply(conn: &UnixStream, resp: &Response) -> std::io::Result<()> {
    let mut out = serde_json::to_vec(resp).map_err(std::io::Error::other)?;
    out.push(b'\n');
    (&*conn).write_all(&out)
}

fn handle(
    state: &Arc<State>,
    policy: &access::Policy,
    conn: &UnixStream,
    timeout: Duration,
) -> std::io::Result<()> {
    // A client that stops reading its answer must not hold the thread forever either.
    conn.set_write_timeout(Some(timeout))?;
    let peer = match access::peer_of(conn) {
        Ok(p) => p,
        Err(e) => {
            return reply(conn, &Response::err(format!("permission denied: cannot identify the client: {e}")))
        }
    };
    let mut fds = Vec::new();
    let line = match access::read_request_fds(conn, MAX_REQUEST_BYTES, timeout, &mut fds) {
        Ok(l) => l,
        Err(f) => return reply(conn, &f.response(MAX_REQUEST_BYTES, timeout)),
    };
    let req = match parse_request(&line) {
        Ok(r) => r,
        Err(e) => return reply(conn, &Response::err(e)),
    };
    let class = access::classify(&req.prog, &req.argv);
    if let Err(e) = policy.check(&peer, class, access::groups_of_uid) {
        eprintln!(
            "rzfsd: refused {} {} from uid {} (pid {}): {e}",
            req.prog,
            req.argv.join(" "),
            peer.uid,
            peer.pid
        );
        return reply(conn, &Response::err(e));
    }
    // A panic in a command answers an error instead of killing the connection's thread
    // silently; pool state it may have left half-changed is poisoned by the pool's owner
    // (pool::txg), which catches panics around every change it lends out.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match req.prog.as_str() {
        "rzpool" => cmd::zpool::run_as(state, &req.argv, &req.cwd, shown_name(&req, "zpool")),
        "rzfs" => {
            cmd::zfs::run_with(state, &req.argv, &req.cwd, std::mem::take(&mut fds), shown_name(&req, "zfs"))
        }
        "rzinject" => cmd::zinject::run(state, &req.argv, &req.cwd),
        other => Response::err(format!("unknown program '{other}'")),
    }));
    let resp = run.unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        eprintln!("rzfsd: internal error in '{} {}': {what}", req.prog, req.argv.join(" "));
        Response::err(format!("internal error: {what}"))
    });
    reply(conn, &resp)
}

/// Mounted datasets with the temporary property values of their mounts (`zfs mount -o`
/// options that differ from the properties), for the `mounted` property and the
/// `temporary` source (read by property code that has no handle on the daemon state; kept
/// in step with `State::mounts` by `track_mount`).
type Temps = Vec<(String, String)>;
static MOUNTED: Mutex<std::collections::BTreeMap<String, Temps>> =
    Mutex::new(std::collections::BTreeMap::new());

/// True if `dataset` is mounted by this process.
pub fn is_mounted(dataset: &str) -> bool {
    MOUNTED.lock().unwrap_or_else(|p| p.into_inner()).contains_key(dataset)
}

/// Records a mount (`on`) or unmount of `dataset`.
pub fn track_mount(dataset: &str, on: bool) {
    let mut m = MOUNTED.lock().unwrap_or_else(|p| p.into_inner());
    if on {
        m.entry(dataset.to_string()).or_default();
    } else {
        m.remove(dataset);
    }
}

/// Records the temporary property values of `dataset`'s mount.
pub fn set_mount_temps(dataset: &str, temps: Temps) {
    MOUNTED.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.to_string(), temps);
}

/// Was mounted `dataset` given temporary mount options (`zfs mount -o`)?
pub fn has_mount_temps(dataset: &str) -> bool {
    MOUNTED.lock().unwrap_or_else(|p| p.into_inner()).get(dataset).is_some_and(|t| !t.is_empty())
}

/// The temporary value of `prop` on mounted `dataset`, if its mount has one.
pub fn mount_temp(dataset: &str, prop: &str) -> Option<String> {
    let m = MOUNTED.lock().unwrap_or_else(|p| p.into_inner());
    m.get(dataset)?.iter().find(|(k, _)| k == prop).map(|(_, v)| v.clone())
}

/// The program name pool history records for `req`: `alias` when the client ran under that
/// name (zpool, zfs), the program's own otherwise.
fn shown_name<'a>(req: &'a Request, alias: &'a str) -> &'a str {
    match req.invoked_as.as_deref() {
        Some(a) if a == alias => alias,
        _ => req.prog.as_str(),
    }
}
