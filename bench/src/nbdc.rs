//! A minimal blocking NBD client (issue 15's benchmark): the fixed newstyle handshake with
//! `NBD_OPT_GO`, then READ, WRITE, FLUSH and DISC with simple replies, one request in flight.
//!
//! Written from the protocol (`doc/proto.md` of the nbd project), not from rzfs's server, so
//! the benchmark also checks that the two agree; all integers are big-endian. Requests are
//! at most [`MAX_IO`] bytes (the callers issue 1 MiB and 4 KiB ones).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943; // "NBDMAGIC"
const IHAVEOPT: u64 = 0x4948_4156_454f_5054; // "IHAVEOPT"
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Server handshake flag: fixed newstyle.
const FLAG_FIXED_NEWSTYLE: u16 = 1;
/// Client flags: FIXED_NEWSTYLE | NO_ZEROES.
const CLIENT_FLAGS: u32 = 3;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const INFO_EXPORT: u16 = 0;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
/// Transmission flag: the export is read-only.
const TFLAG_READ_ONLY: u16 = 1 << 1;
/// Largest request this client sends.
pub const MAX_IO: usize = 1 << 20;
/// Longest option reply accepted.
const MAX_REPLY: u32 = 64 << 10;

/// One connection in the transmission phase.
pub struct Nbd {
    s: UnixStream,
    /// Size of the export, from the INFO_EXPORT reply.
    pub size: u64,
    /// Its transmission flags.
    pub flags: u16,
    cookie: u64,
    /// Header and payload of a WRITE, sent with one write.
    out: Vec<u8>,
    closed: bool,
}

fn io(what: &str, e: std::io::Error) -> String {
    format!("nbd: {what}: {e}")
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

impl Nbd {
    /// Connects to the Unix socket `sock` and negotiates export `name` with `NBD_OPT_GO`;
    /// every read and write on the socket times out after `timeout` (a hung server is an
    /// error, not a hung benchmark).
    pub fn connect(sock: &Path, name: &str, timeout: Duration) -> Result<Nbd, String> {
        let mut s = UnixStream::connect(sock).map_err(|e| io(&format!("connect {}", sock.display()), e))?;
        s.set_read_timeout(Some(timeout)).map_err(|e| io("timeout", e))?;
        s.set_write_timeout(Some(timeout)).map_err(|e| io("timeout", e))?;
        let mut g = [0u8; 18];
        s.read_exact(&mut g).map_err(|e| io("greeting", e))?;
        if be_u64(&g[0..8]) != NBDMAGIC || be_u64(&g[8..16]) != IHAVEOPT {
            return Err(format!("nbd: not a newstyle NBD server (greeting {g:02x?})"));
        }
        if be_u16(&g[16..18]) & FLAG_FIXED_NEWSTYLE == 0 {
            return Err("nbd: the server does not speak the fixed newstyle handshake".into());
        }
        let mut req = Vec::with_capacity(32 + name.len());
        req.extend_from_slice(&CLIENT_FLAGS.to_be_bytes());
        req.extend_from_slice(&IHAVEOPT.to_be_bytes());
        req.extend_from_slice(&OPT_GO.to_be_bytes());
        req.extend_from_slice(&(4 + name.len() as u32 + 2).to_be_bytes());
        req.extend_from_slice(&(name.len() as u32).to_be_bytes());
        req.extend_from_slice(name.as_bytes());
        req.extend_from_slice(&0u16.to_be_bytes()); // no information requests
        s.write_all(&req).map_err(|e| io("option GO", e))?;
        let mut size = None;
        let mut flags = 0u16;
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h).map_err(|e| io("option reply", e))?;
            let (magic, opt, typ, len) =
                (be_u64(&h[0..8]), be_u32(&h[8..12]), be_u32(&h[12..16]), be_u32(&h[16..20]));
            if magic != OPT_REPLY_MAGIC || opt != OPT_GO {
                return Err(format!("nbd: bad option reply (magic {magic:#x}, option {opt})"));
            }
            if len > MAX_REPLY {
                return Err(format!("nbd: option reply of {len} bytes"));
            }
            let mut data = vec![0u8; len as usize];
            s.read_exact(&mut data).map_err(|e| io("option reply data", e))?;
            match typ {
                REP_ACK => break,
                REP_INFO if data.len() >= 12 && be_u16(&data[0..2]) == INFO_EXPORT => {
                    size = Some(be_u64(&data[2..10]));
                    flags = be_u16(&data[10..12]);
                }
                REP_INFO => {}
                t if t & (1 << 31) != 0 => {
                    return Err(format!(
                        "nbd: export '{name}' refused (reply type {t:#x}): {}",
                        String::from_utf8_lossy(&data)
                    ))
                }
                t => return Err(format!("nbd: unexpected option reply type {t}")),
            }
        }
        let size = size.ok_or("nbd: GO acknowledged without INFO_EXPORT")?;
        Ok(Nbd { s, size, flags, cookie: 0, out: Vec::with_capacity(28 + MAX_IO), closed: false })
    }

    /// Whether the export refuses writes.
    pub fn readonly(&self) -> bool {
        self.flags & TFLAG_READ_ONLY != 0
    }

    /// Appends a request header to `self.out` and returns its cookie.
    fn header(&mut self, kind: u16, offset: u64, len: u32) -> u64 {
        self.cookie += 1;
        self.out.clear();
        self.out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        self.out.extend_from_slice(&0u16.to_be_bytes());
        self.out.extend_from_slice(&kind.to_be_bytes());
        self.out.extend_from_slice(&self.cookie.to_be_bytes());
        self.out.extend_from_slice(&offset.to_be_bytes());
        self.out.extend_from_slice(&len.to_be_bytes());
        self.cookie
    }

    /// Reads a simple reply to request `cookie` (`what` names it in errors).
    fn reply(&mut self, cookie: u64, what: &str) -> Result<(), String> {
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h).map_err(|e| io(&format!("{what}: reply"), e))?;
        let (magic, err, c) = (be_u32(&h[0..4]), be_u32(&h[4..8]), be_u64(&h[8..16]));
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(format!("nbd: {what}: bad reply magic {magic:#x}"));
        }
        if c != cookie {
            return Err(format!("nbd: {what}: reply to cookie {c}, expected {cookie}"));
        }
        if err != 0 {
            return Err(format!("nbd: {what}: error {err}"));
        }
        Ok(())
    }

    fn send(&mut self, what: &str) -> Result<(), String> {
        self.s.write_all(&self.out).map_err(|e| io(what, e))
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), String> {
        if buf.len() > MAX_IO {
            return Err(format!("nbd: READ of {} bytes is larger than {MAX_IO}", buf.len()));
        }
        let what = format!("READ at {offset}");
        let c = self.header(CMD_READ, offset, buf.len() as u32);
        self.send(&what)?;
        self.reply(c, &what)?;
        self.s.read_exact(buf).map_err(|e| io(&format!("{what}: data"), e))
    }

    /// Writes `data` at `offset` (durable only after [`Nbd::flush`]).
    pub fn write_at(&mut self, data: &[u8], offset: u64) -> Result<(), String> {
        if data.len() > MAX_IO {
            return Err(format!("nbd: WRITE of {} bytes is larger than {MAX_IO}", data.len()));
        }
        let what = format!("WRITE at {offset}");
        let c = self.header(CMD_WRITE, offset, data.len() as u32);
        self.out.extend_from_slice(data);
        self.send(&what)?;
        self.reply(c, &what)
    }

    /// FLUSH: every completed write is durable when it returns.
    pub fn flush(&mut self) -> Result<(), String> {
        let c = self.header(CMD_FLUSH, 0, 0);
        self.send("FLUSH")?;
        self.reply(c, "FLUSH")
    }

    /// DISC (no reply; the server syncs what was written), sent when the connection is
    /// dropped.
    fn disc(&mut self) -> Result<(), String> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.header(CMD_DISC, 0, 0);
        self.send("DISC")?;
        let _ = self.s.shutdown(std::net::Shutdown::Write);
        Ok(())
    }
}

impl Drop for Nbd {
    fn drop(&mut self) {
        let _ = self.disc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn u32_at(b: &[u8], i: usize) -> u32 {
        be_u32(&b[i..i + 4])
    }

    /// A scripted server: the handshake as the protocol describes it, then READ, WRITE,
    /// FLUSH and DISC on a 4 MiB disk in memory; returns the disk and the FLUSH count.
    fn server(l: UnixListener) -> (Vec<u8>, u32) {
        let mut disk = vec![0u8; 4 << 20];
        let mut flushes = 0;
        for _ in 0..2 {
            let (mut s, _) = l.accept().unwrap();
            let mut g = NBDMAGIC.to_be_bytes().to_vec();
            g.extend_from_slice(&IHAVEOPT.to_be_bytes());
            g.extend_from_slice(&3u16.to_be_bytes());
            s.write_all(&g).unwrap();
            let mut h = [0u8; 20];
            s.read_exact(&mut h).unwrap();
            assert_eq!(u32_at(&h, 0), CLIENT_FLAGS);
            assert_eq!(be_u64(&h[4..12]), IHAVEOPT);
            assert_eq!(u32_at(&h, 12), OPT_GO);
            let mut data = vec![0u8; u32_at(&h, 16) as usize];
            s.read_exact(&mut data).unwrap();
            let n = u32_at(&data, 0) as usize;
            let name = String::from_utf8(data[4..4 + n].to_vec()).unwrap();
            assert_eq!(&data[4 + n..], &[0, 0]);
            let reply = |s: &mut UnixStream, typ: u32, d: &[u8]| {
                let mut r = OPT_REPLY_MAGIC.to_be_bytes().to_vec();
                r.extend_from_slice(&OPT_GO.to_be_bytes());
                r.extend_from_slice(&typ.to_be_bytes());
                r.extend_from_slice(&(d.len() as u32).to_be_bytes());
                r.extend_from_slice(d);
                s.write_all(&r).unwrap();
            };
            if name != "p/vol" {
                reply(&mut s, (1 << 31) + 6, b"no such export");
                continue;
            }
            let mut info = INFO_EXPORT.to_be_bytes().to_vec();
            info.extend_from_slice(&(disk.len() as u64).to_be_bytes());
            info.extend_from_slice(&0x0005u16.to_be_bytes());
            reply(&mut s, REP_INFO, &info);
            reply(&mut s, REP_INFO, &[0, 3, 0, 0, 0, 1, 0, 0, 16, 0, 0, 0, 16, 0]);
            reply(&mut s, REP_ACK, b"");
            loop {
                let mut q = [0u8; 28];
                s.read_exact(&mut q).unwrap();
                assert_eq!(u32_at(&q, 0), REQUEST_MAGIC);
                let (kind, cookie) = (be_u16(&q[6..8]), be_u64(&q[8..16]));
                let (off, len) = (be_u64(&q[16..24]) as usize, u32_at(&q, 24) as usize);
                let mut r = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
                let bad = off + len > disk.len();
                r.extend_from_slice(&(if bad { 22u32 } else { 0 }).to_be_bytes());
                r.extend_from_slice(&cookie.to_be_bytes());
                match kind {
                    CMD_READ if !bad => r.extend_from_slice(&disk[off..off + len]),
                    CMD_WRITE => {
                        let mut d = vec![0u8; len];
                        s.read_exact(&mut d).unwrap();
                        disk[off..off + len].copy_from_slice(&d);
                    }
                    CMD_FLUSH => flushes += 1,
                    CMD_DISC => break,
                    _ => {}
                }
                s.write_all(&r).unwrap();
            }
        }
        (disk, flushes)
    }

    #[test]
    fn handshake_and_requests() {
        let dir = std::env::temp_dir().join(format!("rzfs-bench-nbdc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("nbd.sock");
        let _ = std::fs::remove_file(&sock);
        let l = UnixListener::bind(&sock).unwrap();
        let srv = std::thread::spawn(move || server(l));
        let t = Duration::from_secs(10);
        let e = Nbd::connect(&sock, "p/nope", t).err().unwrap();
        assert!(e.contains("refused") && e.contains("no such export"), "{e}");
        let mut c = Nbd::connect(&sock, "p/vol", t).unwrap();
        assert_eq!((c.size, c.flags), (4 << 20, 5));
        assert!(!c.readonly());
        let data: Vec<u8> = (0..MAX_IO).map(|i| (i * 7 + 3) as u8).collect();
        c.write_at(&data, 1 << 20).unwrap();
        c.write_at(&[9u8; 4096], 3 << 20).unwrap();
        c.flush().unwrap();
        let mut back = vec![0u8; MAX_IO];
        c.read_at(&mut back, 1 << 20).unwrap();
        assert!(back == data);
        let mut small = [0u8; 4096];
        c.read_at(&mut small, 3 << 20).unwrap();
        assert_eq!(small, [9u8; 4096]);
        // Past the end: the server's error, and the connection stays in step.
        assert!(c.read_at(&mut small, 4 << 20).unwrap_err().contains("error 22"));
        assert!(c.read_at(&mut back, 0).is_ok());
        assert!(c.write_at(&vec![0u8; MAX_IO + 1], 0).is_err());
        drop(c); // DISC
        let (disk, flushes) = srv.join().unwrap();
        assert_eq!(flushes, 1);
        assert!(disk[(1 << 20)..(2 << 20)] == data[..]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
