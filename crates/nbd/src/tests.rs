//! The server against a client written from the protocol, over a socket pair, with an
//! in-memory export.

use super::*;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Volumes as byte vectors; counts syncs.
#[derive(Default)]
struct Mem {
    vols: Mutex<BTreeMap<String, (Vec<u8>, bool)>>,
    syncs: AtomicUsize,
}

impl Exports for Mem {
    fn list(&self) -> Vec<String> {
        self.vols.lock().unwrap().keys().cloned().collect()
    }
    fn size(&self, name: &str) -> Result<u64, i32> {
        self.vols.lock().unwrap().get(name).map(|v| v.0.len() as u64).ok_or(libc::ENOENT)
    }
    fn readonly(&self, name: &str) -> bool {
        self.vols.lock().unwrap().get(name).is_none_or(|v| v.1)
    }
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), i32> {
        let v = self.vols.lock().unwrap();
        let d = &v.get(name).ok_or(libc::ENOENT)?.0;
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), i32> {
        let mut v = self.vols.lock().unwrap();
        let d = &mut v.get_mut(name).ok_or(libc::ENOENT)?.0;
        if offset == 666 {
            return Err(libc::EDQUOT);
        }
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn discard(&self, name: &str, offset: u64, len: u64) -> Result<(), i32> {
        let mut v = self.vols.lock().unwrap();
        let d = &mut v.get_mut(name).ok_or(libc::ENOENT)?.0;
        d[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
    fn sync(&self, _name: &str) -> Result<(), i32> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn mem() -> Arc<Mem> {
    let m = Mem::default();
    m.vols.lock().unwrap().insert("p/vol".into(), ((0..=255u8).cycle().take(VOL as usize).collect(), false));
    m.vols.lock().unwrap().insert("p/ro".into(), (vec![7u8; 4096], true));
    Arc::new(m)
}

/// A client connection to a server thread serving `m`.
struct Client {
    s: UnixStream,
    server: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl Client {
    fn new(m: &Arc<Mem>, cflags: u32) -> Client {
        let (a, b) = UnixStream::pair().unwrap();
        let m = m.clone();
        let server = std::thread::spawn(move || serve_connection(&*m, Box::new(b)));
        let mut c = Client { s: a, server: Some(server) };
        let g = c.read(18);
        assert_eq!(&g[..], &greeting()[..]);
        c.s.write_all(&cflags.to_be_bytes()).unwrap();
        c
    }
    fn read(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b).unwrap();
        b
    }
    fn option(&mut self, opt: u32, data: &[u8]) {
        let mut b = IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).unwrap();
    }
    /// One option reply: (type, data).
    fn reply(&mut self, opt: u32) -> (u32, Vec<u8>) {
        let h = self.read(20);
        assert_eq!(&h[..8], &REPLY_MAGIC.to_be_bytes());
        assert_eq!(&h[8..12], &opt.to_be_bytes());
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
        (kind, self.read(len))
    }
    fn go(&mut self, name: &str) -> (u32, Option<(u64, u16)>) {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        self.option(OPT_GO, &d);
        let mut export = None;
        loop {
            let (kind, data) = self.reply(OPT_GO);
            if kind == REP_INFO && data[..2] == INFO_EXPORT.to_be_bytes() {
                export = Some((
                    u64::from_be_bytes(data[2..10].try_into().unwrap()),
                    u16::from_be_bytes(data[10..12].try_into().unwrap()),
                ));
            } else if kind != REP_INFO {
                return (kind, export);
            }
        }
    }
    fn request(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, len: u32, data: &[u8]) {
        let mut b = REQUEST_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).unwrap();
    }
    /// A simple reply: its error (after checking the cookie).
    fn simple(&mut self, cookie: u64) -> u32 {
        let h = self.read(16);
        assert_eq!(&h[..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(&h[8..], &cookie.to_be_bytes());
        u32::from_be_bytes(h[4..8].try_into().unwrap())
    }
    fn end(mut self) -> io::Result<()> {
        let _ = self.s.shutdown(std::net::Shutdown::Write);
        self.server.take().unwrap().join().unwrap()
    }
}

/// Size of the writable test volume: three pieces ([`CHUNK`]) of a request.
const VOL: u64 = 3 << 20;

const FIXED: u32 = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;

#[test]
fn handshake_list_info_go() {
    let m = mem();
    let mut c = Client::new(&m, FIXED);
    c.option(OPT_LIST, b"");
    let mut names = Vec::new();
    loop {
        let (kind, d) = c.reply(OPT_LIST);
        if kind == REP_ACK {
            break;
        }
        assert_eq!(kind, REP_SERVER);
        names.push(String::from_utf8(d[4..].to_vec()).unwrap());
    }
    assert_eq!(names, ["p/ro", "p/vol"]);
    // Unknown options, and structured replies, are unsupported; the handshake goes on.
    c.option(8, b"");
    assert_eq!(c.reply(8).0, REP_ERR_UNSUP);
    assert_eq!(c.go("p/nope").0, REP_ERR_UNKNOWN);
    c.option(OPT_GO, b"\x00\x00");
    assert_eq!(c.reply(OPT_GO).0, REP_ERR_INVALID, "malformed GO data");
    let (kind, ex) = c.go("p/vol");
    assert_eq!(kind, REP_ACK);
    let (size, flags) = ex.unwrap();
    assert_eq!(size, VOL);
    assert!(
        flags & TFLAG_READ_ONLY == 0 && flags & TFLAG_SEND_FLUSH != 0 && flags & TFLAG_CAN_MULTI_CONN != 0
    );
    c.request(CMD_DISC, 0, 1, 0, 0, b"");
    c.end().unwrap();
    assert_eq!(m.syncs.load(Ordering::SeqCst), 1, "a disconnect syncs");
}

#[test]
fn reads_writes_flush_trim_zeroes() {
    let m = mem();
    let mut c = Client::new(&m, FIXED);
    assert_eq!(c.go("p/vol").0, REP_ACK);
    c.request(CMD_READ, 0, 10, 256, 16, b"");
    assert_eq!(c.simple(10), 0);
    assert_eq!(c.read(16), (0..16u8).collect::<Vec<_>>());
    c.request(CMD_WRITE, 0, 11, 4096, 5, b"hello");
    assert_eq!(c.simple(11), 0);
    c.request(CMD_WRITE, CMD_FLAG_FUA, 12, 8192, 3, b"fua");
    assert_eq!(c.simple(12), 0);
    assert_eq!(m.syncs.load(Ordering::SeqCst), 1, "FUA syncs");
    c.request(CMD_FLUSH, 0, 13, 0, 0, b"");
    assert_eq!(c.simple(13), 0);
    assert_eq!(m.syncs.load(Ordering::SeqCst), 2);
    c.request(CMD_TRIM, 0, 14, 0, 4096, b"");
    assert_eq!(c.simple(14), 0);
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 15, 8192, 2, b"");
    assert_eq!(c.simple(15), 0);
    c.request(CMD_READ, 0, 16, 4094, 8, b"");
    assert_eq!(c.simple(16), 0);
    assert_eq!(c.read(8), b"\0\0hello\x05");
    c.request(CMD_READ, 0, 17, 8192, 3, b"");
    assert_eq!(c.simple(17), 0);
    assert_eq!(c.read(3), b"\0\0a");
    // Past the end, an unknown command, an error from below.
    c.request(CMD_READ, 0, 18, VOL - 1, 2, b"");
    assert_eq!(c.simple(18), EINVAL);
    c.request(CMD_WRITE, 0, 19, VOL - 1, 2, b"xx");
    assert_eq!(c.simple(19), ENOSPC);
    c.request(CMD_TRIM, 0, 20, u64::MAX, 2, b"");
    assert_eq!(c.simple(20), ENOSPC);
    c.request(CMD_WRITE, 0, 29, u64::MAX - 1, 4, b"wrap");
    assert_eq!(c.simple(29), ENOSPC, "an offset near 2^64 is refused, its payload read");
    c.request(99, 0, 21, 0, 0, b"");
    assert_eq!(c.simple(21), EINVAL);
    c.request(CMD_WRITE, 0, 22, 666, 1, b"q");
    assert_eq!(c.simple(22), ENOSPC, "EDQUOT from below");
    // Requests of several pieces, both ways.
    let big: Vec<u8> = (0..VOL).map(|i| (i * 7 % 251) as u8).collect();
    c.request(CMD_WRITE, 0, 30, 0, VOL as u32, &big);
    assert_eq!(c.simple(30), 0);
    c.request(CMD_READ, 0, 31, 0, VOL as u32, b"");
    assert_eq!(c.simple(31), 0);
    assert!(c.read(VOL as usize) == big, "a 3-piece read returns the 3-piece write");
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 32, 100, (2 << 20) + 5, b"");
    assert_eq!(c.simple(32), 0);
    c.request(CMD_READ, 0, 33, 98, 4, b"");
    assert_eq!(c.simple(33), 0);
    assert_eq!(c.read(4), [big[98], big[99], 0, 0]);
    c.request(CMD_READ, 0, 23, 0, MAX_REQUEST + 1, b"");
    assert_eq!(c.simple(23), EINVAL);
    // A WRITE larger than the limit ends the connection (its payload is not read).
    c.request(CMD_WRITE, 0, 24, 0, MAX_REQUEST + 1, b"");
    assert!(c.end().is_err());
}

#[test]
fn read_only_exports_refuse_changes() {
    let m = mem();
    let mut c = Client::new(&m, FIXED);
    let (kind, ex) = c.go("p/ro");
    assert_eq!(kind, REP_ACK);
    assert!(ex.unwrap().1 & TFLAG_READ_ONLY != 0);
    c.request(CMD_WRITE, 0, 1, 0, 1, b"x");
    assert_eq!(c.simple(1), EPERM);
    c.request(CMD_TRIM, 0, 2, 0, 1, b"");
    assert_eq!(c.simple(2), EPERM);
    c.request(CMD_READ, 0, 3, 0, 2, b"");
    assert_eq!(c.simple(3), 0);
    assert_eq!(c.read(2), [7, 7]);
    c.end().unwrap();
}

#[test]
fn old_style_and_export_name() {
    let m = mem();
    // A client that does not speak fixed newstyle is closed on.
    let c = Client::new(&m, 0);
    c.end().unwrap();
    // EXPORT_NAME without NO_ZEROES: size, flags, 124 zeros.
    let mut c = Client::new(&m, FLAG_C_FIXED_NEWSTYLE);
    c.option(OPT_EXPORT_NAME, b"p/ro");
    let b = c.read(8 + 2 + 124);
    assert_eq!(u64::from_be_bytes(b[..8].try_into().unwrap()), 4096);
    assert!(b[10..].iter().all(|&x| x == 0));
    c.request(CMD_DISC, 0, 1, 0, 0, b"");
    c.end().unwrap();
    // An unknown name ends the connection; ABORT is acknowledged.
    let mut c = Client::new(&m, FIXED);
    c.option(OPT_EXPORT_NAME, b"nope");
    c.end().unwrap();
    let mut c = Client::new(&m, FIXED);
    c.option(OPT_ABORT, b"");
    assert_eq!(c.reply(OPT_ABORT).0, REP_ACK);
    c.end().unwrap();
    // A bad option magic is a protocol error.
    let mut c = Client::new(&m, FIXED);
    c.s.write_all(&[0u8; 16]).unwrap();
    assert!(c.end().is_err());
}

#[test]
fn unix_and_tcp_listeners() {
    let m = mem();
    let dir = std::env::temp_dir().join(format!("rzfs-nbd-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("nbd.sock");
    let srv = serve_unix(m.clone(), &path).unwrap();
    let tcp = serve_tcp(m.clone(), "127.0.0.1:0").unwrap();
    for s in [
        Box::new(UnixStream::connect(&path).unwrap()) as Box<dyn Conn>,
        Box::new(TcpStream::connect(tcp.tcp_addr().unwrap()).unwrap()),
    ] {
        let mut s = s;
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(g, greeting());
        s.write_all(&FIXED.to_be_bytes()).unwrap();
        let mut b = IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&OPT_ABORT.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        s.write_all(&b).unwrap();
        let mut r = [0u8; 20];
        s.read_exact(&mut r).unwrap();
        assert_eq!(&r[12..16], &REP_ACK.to_be_bytes());
    }
    drop(srv);
    drop(tcp);
    assert!(!path.exists(), "the socket goes with the server");
    let _ = std::fs::remove_dir_all(&dir);
}
