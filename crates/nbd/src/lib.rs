//! # NBD — volumes served over the Network Block Device protocol
//!
//! A front end beside FUSE: the daemon's volumes (`zfs create -V`) become NBD exports, by
//! dataset name (`pool/vol`), on a Unix socket and/or a TCP address, for `qemu`,
//! `qemu-img`, `nbdcopy`, `nbdinfo`, `nbd-client` and other NBD clients. The storage below
//! is whatever implements [`Exports`] (the daemon's volume table).
//!
//! Theory.
//! * **Protocol**: fixed newstyle handshake with `EXPORT_NAME`, `LIST`, `INFO`, `GO` and
//!   `ABORT`; other options are answered "unsupported" (structured replies, meta contexts,
//!   TLS, extended headers), which clients fall back from. Transmission with simple
//!   replies: READ, WRITE, FLUSH, TRIM, WRITE_ZEROES, DISC. The wire format and its limits
//!   are in [`wire`].
//! * **Durability**: a write reaches the pool's open txg; FLUSH, a write or trim with FUA,
//!   and a disconnect sync the pool, so what a client flushed survives a crash. A sync
//!   covers every connection's writes, so the exports advertise `CAN_MULTI_CONN`.
//! * **Discard**: TRIM frees the blocks (they read back as zeros afterwards, as ZFS volume
//!   holes do); WRITE_ZEROES frees them too unless the client asked for `NO_HOLE`, when
//!   zeros are written.
//! * **Bounds**: a request past the end of the export fails (EINVAL for reads, ENOSPC for
//!   writes) without touching the volume; requests larger than [`MAX_REQUEST`] are refused
//!   (a WRITE that large ends the connection: its payload is not read). A read-only volume
//!   is exported `READ_ONLY` and refuses changes with EPERM.
//! * **Memory**: a request's data passes through a 1 MiB buffer per connection, whatever
//!   its length (a read's later pieces follow its reply header; an error there can only
//!   close the connection, as simple replies allow).
//! * **Sessions**: one thread per connection, requests served in order; at most
//!   [`MAX_CONNECTIONS`] at once (more are closed at once). The export's size is fixed at
//!   `GO` (the protocol has no resize here): `zfs set volsize` shows to new connections.
//! * **Access**: NBD has no authentication. The Unix socket is created 0600 (the daemon's
//!   user); a TCP address is the administrator's choice — loopback unless the network is
//!   trusted.

pub mod wire;

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use wire::*;

/// Largest READ or WRITE served (and the maximum block size advertised).
pub const MAX_REQUEST: u32 = 32 << 20;
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Option data a server drains to answer "too big" rather than closing.
const MAX_DRAIN: u32 = 16 << 20;

/// What the exports are: volumes by full dataset name. Errors are Linux errnos.
pub trait Exports: Send + Sync + 'static {
    /// The exports served now.
    fn list(&self) -> Vec<String>;
    /// Size in bytes of an export.
    fn size(&self, name: &str) -> Result<u64, i32>;
    /// Whether the export can only be read.
    fn readonly(&self, name: &str) -> bool;
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), i32>;
    fn write(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), i32>;
    /// Frees a range (it reads back as zeros).
    fn discard(&self, name: &str, offset: u64, len: u64) -> Result<(), i32>;
    /// Makes every write so far durable.
    fn sync(&self, name: &str) -> Result<(), i32>;
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// A listening NBD server; dropping it stops accepting (open connections run on).
pub struct Server {
    stop: Arc<AtomicBool>,
    wake: Wake,
    thread: Option<JoinHandle<()>>,
}

/// How to wake the accept loop to see `stop`.
enum Wake {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
}

impl Server {
    /// The TCP address listened on (with the port chosen when 0 was asked), if TCP.
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.wake {
            Wake::Tcp(a) => Some(*a),
            Wake::Unix(_) => None,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        match &self.wake {
            Wake::Unix(p) => {
                let _ = UnixStream::connect(p);
            }
            Wake::Tcp(a) => {
                let _ = TcpStream::connect(a);
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Wake::Unix(p) = &self.wake {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Serves `exports` on a Unix socket at `path` (replacing a stale socket file there).
pub fn serve_unix<E: Exports>(exports: Arc<E>, path: &Path) -> io::Result<Server> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    start(exports, Listener::Unix(l), Wake::Unix(path.to_path_buf()))
}

/// Serves `exports` on TCP address `addr` (`127.0.0.1:10809`; port 0 picks one).
pub fn serve_tcp<E: Exports>(exports: Arc<E>, addr: &str) -> io::Result<Server> {
    let l = TcpListener::bind(addr)?;
    let a = l.local_addr()?;
    start(exports, Listener::Tcp(l), Wake::Tcp(a))
}

fn start<E: Exports>(exports: Arc<E>, l: Listener, wake: Wake) -> io::Result<Server> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::Builder::new().name("rzfs-nbd-accept".into()).spawn(move || {
        let active = Arc::new(AtomicUsize::new(0));
        loop {
            let conn: io::Result<Box<dyn Conn>> = match &l {
                Listener::Unix(u) => u.accept().map(|(c, _)| Box::new(c) as Box<dyn Conn>),
                Listener::Tcp(t) => t.accept().map(|(c, _)| {
                    let _ = c.set_nodelay(true);
                    Box::new(c) as Box<dyn Conn>
                }),
            };
            if s.load(Ordering::SeqCst) {
                return;
            }
            let Ok(conn) = conn else { continue };
            if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                continue; // dropped: closed
            }
            active.fetch_add(1, Ordering::SeqCst);
            let (e, a) = (exports.clone(), active.clone());
            let spawned = std::thread::Builder::new().name("rzfs-nbd".into()).spawn(move || {
                if let Err(err) = serve_connection(&*e, conn) {
                    if err.kind() != io::ErrorKind::UnexpectedEof {
                        eprintln!("rzfs: nbd: connection ended: {err}");
                    }
                }
                a.fetch_sub(1, Ordering::SeqCst);
            });
            if spawned.is_err() {
                active.fetch_sub(1, Ordering::SeqCst);
            }
        }
    })?;
    Ok(Server { stop, wake, thread: Some(thread) })
}

/// A connection: a byte stream both ways that can be split into a reader and a writer.
pub trait Conn: Read + Write + Send {
    fn clone_box(&self) -> io::Result<Box<dyn Conn>>;
}

impl Conn for UnixStream {
    fn clone_box(&self) -> io::Result<Box<dyn Conn>> {
        Ok(Box::new(self.try_clone()?))
    }
}

impl Conn for TcpStream {
    fn clone_box(&self) -> io::Result<Box<dyn Conn>> {
        Ok(Box::new(self.try_clone()?))
    }
}

fn proto(e: WireError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.0)
}

/// One client, from greeting to disconnect.
pub fn serve_connection<E: Exports + ?Sized>(exports: &E, conn: Box<dyn Conn>) -> io::Result<()> {
    let mut w = conn.clone_box()?;
    let mut r = BufReader::with_capacity(256 * 1024, conn);
    w.write_all(&greeting())?;
    let mut cf = [0u8; 4];
    r.read_exact(&mut cf)?;
    let cflags = u32::from_be_bytes(cf);
    // Only the fixed newstyle handshake is spoken; unknown client flags end it (the spec's
    // rule for a server that does not know them).
    if cflags & FLAG_C_FIXED_NEWSTYLE == 0 || cflags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Ok(());
    }
    let no_zeroes = cflags & FLAG_C_NO_ZEROES != 0;
    let Some(export) = negotiate(exports, &mut r, &mut *w, no_zeroes)? else { return Ok(()) };
    transmit(exports, &mut r, &mut *w, &export)
}

/// The default export (empty name): the only one, when there is exactly one.
fn resolve(exports: &(impl Exports + ?Sized), name: &str) -> Option<(String, u64)> {
    let name = if name.is_empty() {
        let l = exports.list();
        if l.len() != 1 {
            return None;
        }
        l.into_iter().next()?
    } else {
        name.to_string()
    };
    if !exports.list().contains(&name) {
        return None;
    }
    let size = exports.size(&name).ok()?;
    Some((name, size))
}

fn tflags(readonly: bool) -> u16 {
    let mut f = TFLAG_HAS_FLAGS
        | TFLAG_SEND_FLUSH
        | TFLAG_SEND_FUA
        | TFLAG_SEND_TRIM
        | TFLAG_SEND_WRITE_ZEROES
        | TFLAG_CAN_MULTI_CONN;
    if readonly {
        f |= TFLAG_READ_ONLY;
    }
    f
}

/// An export chosen by the handshake.
struct Export {
    name: String,
    size: u64,
    readonly: bool,
}

/// Option haggling; None when the client aborted or named no export we have.
fn negotiate<E: Exports + ?Sized>(
    exports: &E,
    r: &mut impl Read,
    w: &mut dyn Write,
    no_zeroes: bool,
) -> io::Result<Option<Export>> {
    loop {
        let mut h = [0u8; 16];
        r.read_exact(&mut h)?;
        let (opt, len) = parse_option_header(&h).map_err(proto)?;
        if len > MAX_OPTION_DATA {
            if opt == OPT_EXPORT_NAME || len > MAX_DRAIN {
                return Ok(None);
            }
            io::copy(&mut (&mut *r).take(u64::from(len)), &mut io::sink())?;
            w.write_all(&option_reply(opt, REP_ERR_TOO_BIG, b"option data too long"))?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data)?;
        match opt {
            OPT_EXPORT_NAME => {
                let Ok(name) = parse_export_name(&data) else { return Ok(None) };
                let Some((name, size)) = resolve(exports, &name) else { return Ok(None) };
                let readonly = exports.readonly(&name);
                w.write_all(&size.to_be_bytes())?;
                w.write_all(&tflags(readonly).to_be_bytes())?;
                if !no_zeroes {
                    w.write_all(&[0u8; 124])?;
                }
                return Ok(Some(Export { name, size, readonly }));
            }
            OPT_ABORT => {
                w.write_all(&option_reply(opt, REP_ACK, b""))?;
                return Ok(None);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    w.write_all(&option_reply(opt, REP_ERR_INVALID, b"LIST takes no data"))?;
                    continue;
                }
                for n in exports.list() {
                    let mut d = (n.len() as u32).to_be_bytes().to_vec();
                    d.extend_from_slice(n.as_bytes());
                    w.write_all(&option_reply(opt, REP_SERVER, &d))?;
                }
                w.write_all(&option_reply(opt, REP_ACK, b""))?;
            }
            OPT_INFO | OPT_GO => {
                let req = match parse_info_request(&data) {
                    Ok(q) => q,
                    Err(e) => {
                        w.write_all(&option_reply(opt, REP_ERR_INVALID, e.0.as_bytes()))?;
                        continue;
                    }
                };
                let Some((name, size)) = resolve(exports, &req.name) else {
                    let msg = format!("no volume '{}' is exported", req.name);
                    w.write_all(&option_reply(opt, REP_ERR_UNKNOWN, msg.as_bytes()))?;
                    continue;
                };
                let readonly = exports.readonly(&name);
                w.write_all(&option_reply(opt, REP_INFO, &info_export(size, tflags(readonly))))?;
                w.write_all(&option_reply(opt, REP_INFO, &info_block_size(1, 4096, MAX_REQUEST)))?;
                w.write_all(&option_reply(opt, REP_ACK, b""))?;
                if opt == OPT_GO {
                    return Ok(Some(Export { name, size, readonly }));
                }
            }
            _ => w.write_all(&option_reply(opt, REP_ERR_UNSUP, b""))?,
        }
    }
}

/// Whether `[offset, offset + len)` lies inside an export of `size` bytes.
fn inside(offset: u64, len: u64, size: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// Reads, writes and WRITE_ZEROES with NO_HOLE go through the volume in pieces of this
/// size: a connection holds at most one piece.
const CHUNK: u64 = 1 << 20;

/// The transmission phase: requests until DISC or the end of the stream.
fn transmit<E: Exports + ?Sized>(
    exports: &E,
    r: &mut impl Read,
    w: &mut dyn Write,
    ex: &Export,
) -> io::Result<()> {
    let name = ex.name.as_str();
    let mut buf = Vec::new();
    loop {
        let mut h = [0u8; 28];
        if let Err(e) = r.read_exact(&mut h) {
            // A client gone without DISC: what it wrote still reaches the next sync.
            return if e.kind() == io::ErrorKind::UnexpectedEof { Ok(()) } else { Err(e) };
        }
        let q = parse_request(&h).map_err(proto)?;
        let (off, len) = (q.offset, u64::from(q.len));
        let fua = q.flags & CMD_FLAG_FUA != 0;
        let done = |res: Result<(), i32>| -> Result<(), i32> {
            match res {
                Ok(()) if fua => exports.sync(name),
                other => other,
            }
        };
        let status: Result<(), u32> = match q.kind {
            CMD_DISC => {
                let _ = exports.sync(name);
                return Ok(());
            }
            CMD_READ => {
                if q.len > MAX_REQUEST || !inside(off, len, ex.size) {
                    Err(EINVAL)
                } else {
                    // In pieces, so a connection holds at most CHUNK bytes. The reply's
                    // header goes with the first piece; an error after it can only end the
                    // connection (simple replies carry one error, before the data).
                    let mut at = off;
                    let mut status = Ok(());
                    while at < off + len {
                        let n = CHUNK.min(off + len - at) as usize;
                        buf.resize(n, 0);
                        match exports.read(name, at, &mut buf[..n]) {
                            Ok(()) => {}
                            Err(e) if at == off => {
                                status = Err(nbd_errno(e));
                                break;
                            }
                            Err(e) => {
                                return Err(io::Error::other(format!(
                                    "read of {name} at {at} failed after its reply began (errno {e})"
                                )))
                            }
                        }
                        if at == off {
                            w.write_all(&simple_reply(0, q.cookie))?;
                        }
                        w.write_all(&buf[..n])?;
                        at += n as u64;
                    }
                    if status.is_ok() {
                        if len == 0 {
                            w.write_all(&simple_reply(0, q.cookie))?;
                        }
                        continue;
                    }
                    status
                }
            }
            CMD_WRITE => {
                if q.len > MAX_REQUEST {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("WRITE of {} bytes is larger than {MAX_REQUEST}", q.len),
                    ));
                }
                let refused = if ex.readonly {
                    Some(EPERM)
                } else if !inside(off, len, ex.size) {
                    Some(ENOSPC)
                } else {
                    None
                };
                // The payload is read (and written) in pieces of at most CHUNK bytes; a
                // refused one is read all the same, to stay in step with the stream.
                // (Counted from 0: a refused request's offset may be anywhere up to 2^64.)
                let mut got = 0u64;
                let mut res = Ok(());
                while got < len {
                    let n = CHUNK.min(len - got) as usize;
                    buf.resize(n, 0);
                    r.read_exact(&mut buf[..n])?;
                    if refused.is_none() && res.is_ok() {
                        res = exports.write(name, off + got, &buf[..n]);
                    }
                    got += n as u64;
                }
                match refused {
                    Some(e) => Err(e),
                    None => done(res).map_err(nbd_errno),
                }
            }
            CMD_FLUSH => exports.sync(name).map_err(nbd_errno),
            CMD_TRIM | CMD_WRITE_ZEROES => {
                if ex.readonly {
                    Err(EPERM)
                } else if !inside(off, len, ex.size) {
                    Err(ENOSPC)
                } else if q.kind == CMD_WRITE_ZEROES && q.flags & CMD_FLAG_NO_HOLE != 0 {
                    let zeros = vec![0u8; CHUNK.min(len) as usize];
                    let mut res = Ok(());
                    let mut at = off;
                    while res.is_ok() && at < off + len {
                        let n = CHUNK.min(off + len - at);
                        res = exports.write(name, at, &zeros[..n as usize]);
                        at += n;
                    }
                    done(res).map_err(nbd_errno)
                } else if len == 0 {
                    Ok(())
                } else {
                    done(exports.discard(name, off, len)).map_err(nbd_errno)
                }
            }
            _ => Err(EINVAL),
        };
        w.write_all(&simple_reply(status.err().unwrap_or(0), q.cookie))?;
    }
}

#[cfg(test)]
mod tests;
