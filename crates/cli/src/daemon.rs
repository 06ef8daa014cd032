//! `rzfsd`: owns imported pools and FUSE mounts, serves the control socket.
//!
//! One thread per connection; each runs one command against the shared state. Pools are
//! `Arc`s, so a long read (a mount serving files) never blocks the control socket; the pool
//! table lock is held only while looking up or changing the table.

use crate::cmd;
use crate::proto::{parse_request, Response};
use pool::Pool;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

/// Binds the socket (replacing a stale one) and serves forever.
pub fn serve(sock: &Path) -> std::io::Result<()> {
    if let Some(dir) = sock.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if sock.exists() {
        if UnixStream::connect(sock).is_ok() {
            return Err(std::io::Error::other(format!("another rzfsd already serves {}", sock.display())));
        }
        std::fs::remove_file(sock)?;
    }
    let listener = UnixListener::bind(sock)?;
    let state = Arc::new(State::default());
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let st = state.clone();
        std::thread::spawn(move || {
            let _ = handle(&st, conn);
        });
    }
    Ok(())
}

fn handle(state: &Arc<State>, conn: UnixStream) -> std::io::Result<()> {
    let mut line = Vec::new();
    BufReader::new((&conn).take(crate::proto::MAX_MESSAGE_BYTES as u64 + 1)).read_until(b'\n', &mut line)?;
    let resp = match parse_request(&line) {
        Ok(req) => match req.prog.as_str() {
            "rzpool" => cmd::zpool::run(state, &req.argv, &req.cwd),
            "rzfs" => cmd::zfs::run(state, &req.argv, &req.cwd),
            other => Response::err(format!("unknown program '{other}'")),
        },
        Err(e) => Response::err(e),
    };
    let mut out = serde_json::to_vec(&resp).map_err(std::io::Error::other)?;
    out.push(b'\n');
    (&conn).write_all(&out)
}

/// Names of mounted datasets, for the `mounted` property (read by property code that has no
/// handle on the daemon state; kept in step with `State::mounts` by `track_mount`).
static MOUNTED: Mutex<std::collections::BTreeSet<String>> = Mutex::new(std::collections::BTreeSet::new());

/// True if `dataset` is mounted by this process.
pub fn is_mounted(dataset: &str) -> bool {
    MOUNTED.lock().unwrap_or_else(|p| p.into_inner()).contains(dataset)
}

/// Records a mount (`on`) or unmount of `dataset`.
pub fn track_mount(dataset: &str, on: bool) {
    let mut m = MOUNTED.lock().unwrap_or_else(|p| p.into_inner());
    if on {
        m.insert(dataset.to_string());
    } else {
        m.remove(dataset);
    }
}
