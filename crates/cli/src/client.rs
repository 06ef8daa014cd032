//! The client side of the control socket: find (or start) `rzfsd`, send one request, print
//! the answer, exit with its code.

use crate::proto::{Request, Response, MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a client waits for a daemon it started to open its socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The control socket path: `$RZFS_SOCKET`, else `/run/rzfs/rzfsd.sock` for root, else
/// `$XDG_RUNTIME_DIR/rzfs/rzfsd.sock` (or `/tmp/rzfs-$UID/rzfsd.sock`).
pub fn socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os("RZFS_SOCKET") {
        return PathBuf::from(p);
    }
    let uid = current_uid();
    if uid == 0 {
        return PathBuf::from("/run/rzfs/rzfsd.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => Path::new(&d).join("rzfs/rzfsd.sock"),
        None => PathBuf::from(format!("/tmp/rzfs-{uid}/rzfsd.sock")),
    }
}

fn current_uid() -> u32 {
    // Reading /proc avoids an unsafe libc call: the Uid line's first field is the real uid.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Sends `req` to the daemon at `sock` and returns its answer.
pub fn call(sock: &Path, req: &Request) -> std::io::Result<Response> {
    let mut s = UnixStream::connect(sock)?;
    let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut r = BufReader::new(s.take(MAX_MESSAGE_BYTES as u64));
    let mut buf = Vec::new();
    r.read_until(b'\n', &mut buf)?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::other(format!("bad response from rzfsd: {e}")))
}

use std::io::Read;

/// Starts `rzfsd` (found next to this executable, else on PATH) detached, listening on `sock`.
pub fn start_daemon(sock: &Path) -> std::io::Result<()> {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("rzfsd")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("rzfsd"));
    if let Some(dir) = sock.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = sock.with_extension("log");
    let logf = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
    std::process::Command::new(exe)
        .arg("--socket")
        .arg(sock)
        .stdin(std::process::Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .process_group(0)
        .spawn()?;
    let t0 = Instant::now();
    while t0.elapsed() < START_TIMEOUT {
        if UnixStream::connect(sock).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(std::io::Error::other(format!("rzfsd did not start within {START_TIMEOUT:?}; see {}", log.display())))
}

/// Entry point of `rzpool` and `rzfs`: forward argv to the daemon (starting it if needed).
pub fn main_forward(prog: &str) -> ! {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let req = Request { version: PROTOCOL_VERSION, prog: prog.to_string(), argv, cwd };
    let sock = socket_path();
    let resp = match call(&sock, &req) {
        Ok(r) => Ok(r),
        Err(_) => start_daemon(&sock).and_then(|_| call(&sock, &req)),
    };
    match resp {
        Ok(r) => {
            print!("{}", r.stdout);
            eprint!("{}", r.stderr);
            std::process::exit(r.exit);
        }
        Err(e) => {
            eprintln!("{prog}: cannot reach rzfsd at {}: {e}", sock.display());
            std::process::exit(1);
        }
    }
}
