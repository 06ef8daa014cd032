//! # The NBD wire format (fixed newstyle handshake, simple replies)
//!
//! Facts from the NBD protocol (`doc/proto.md` of the nbd project); all integers are
//! big-endian.
//!
//! Handshake. The server sends `NBDMAGIC` (u64), `IHAVEOPT` (u64) and its handshake flags
//! (u16: FIXED_NEWSTYLE | NO_ZEROES); the client answers with its flags (u32). Then the
//! client sends options, each `IHAVEOPT` (u64), option (u32), length (u32), data; the server
//! answers each with replies `REPLY_MAGIC` (u64), option (u32), reply type (u32), length
//! (u32), data. `EXPORT_NAME` is answered without a reply header: size (u64), transmission
//! flags (u16), and 124 zero bytes unless the client set NO_ZEROES. `GO` (and `INFO`, which
//! does not end the handshake) carry the export name as u32 length + bytes, then a u16 count
//! of u16 information requests; the answer is `INFO` replies (EXPORT: u16 0, size u64,
//! flags u16; BLOCK_SIZE: u16 3, minimum, preferred, maximum u32) then `ACK`.
//!
//! Transmission. A request is `REQUEST_MAGIC` (u32), command flags (u16), type (u16), cookie
//! (u64), offset (u64), length (u32) — 28 bytes — followed by `length` bytes for a WRITE. A
//! simple reply is `SIMPLE_REPLY_MAGIC` (u32), error (u32, an NBD errno), cookie (u64), then
//! `length` bytes for a successful READ.
//!
//! Every parser here takes untrusted bytes and returns an error, never panics.

/// `NBDMAGIC`: "NBDMAGIC".
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: "IHAVEOPT".
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of an option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flags (server).
pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flags.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;

/// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

/// Information types of `INFO`/`GO`.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command flags.
pub const CMD_FLAG_FUA: u16 = 1;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

/// NBD errors (the protocol's own numbers, which are Linux's).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Longest option data a client may send (an export name is at most 4096 bytes).
pub const MAX_OPTION_DATA: u32 = 64 * 1024;

/// Malformed wire data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WireError {}

fn err(s: impl Into<String>) -> WireError {
    WireError(s.into())
}

/// A cursor over untrusted bytes.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(err(format!("{what}: {} bytes left, {n} needed", self.b.len())));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u16(&mut self, what: &str) -> Result<u16, WireError> {
        let s = self.take(2, what)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        let s = self.take(4, what)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64, WireError> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }
}

/// An option header (16 bytes): the option and the length of its data.
pub fn parse_option_header(b: &[u8; 16]) -> Result<(u32, u32), WireError> {
    let mut c = Cur { b };
    let magic = c.u64("option magic")?;
    if magic != IHAVEOPT {
        return Err(err(format!("bad option magic {magic:#x}")));
    }
    Ok((c.u32("option")?, c.u32("option length")?))
}

/// The data of `INFO`/`GO`: the export name and the information types asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub infos: Vec<u16>,
}

/// Parses the data of an `INFO` or `GO` option.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, WireError> {
    let mut c = Cur { b: data };
    let n = c.u32("export name length")? as usize;
    let name = c.take(n, "export name")?;
    let name = std::str::from_utf8(name).map_err(|_| err("export name is not UTF-8"))?.to_string();
    let count = c.u16("information request count")? as usize;
    let mut infos = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        infos.push(c.u16("information request")?);
    }
    if !c.b.is_empty() {
        return Err(err(format!("{} bytes after the information requests", c.b.len())));
    }
    Ok(InfoRequest { name, infos })
}

/// The data of `EXPORT_NAME`: the name itself.
pub fn parse_export_name(data: &[u8]) -> Result<String, WireError> {
    std::str::from_utf8(data).map(str::to_string).map_err(|_| err("export name is not UTF-8"))
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

/// Parses a 28-byte request header.
pub fn parse_request(b: &[u8; 28]) -> Result<Request, WireError> {
    let mut c = Cur { b };
    let magic = c.u32("request magic")?;
    if magic != REQUEST_MAGIC {
        return Err(err(format!("bad request magic {magic:#x}")));
    }
    Ok(Request {
        flags: c.u16("command flags")?,
        kind: c.u16("command")?,
        cookie: c.u64("cookie")?,
        offset: c.u64("offset")?,
        len: c.u32("length")?,
    })
}

/// The server's greeting.
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// An option reply.
pub fn option_reply(opt: u32, kind: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// The data of an `INFO` reply of type EXPORT.
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b
}

/// The data of an `INFO` reply of type BLOCK_SIZE.
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    for v in [min, preferred, max] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b
}

/// A simple reply header.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// The NBD error for a Linux errno from the storage below.
pub fn nbd_errno(e: i32) -> u32 {
    match e {
        libc::EPERM | libc::EROFS | libc::EACCES => EPERM,
        libc::ENOMEM => ENOMEM,
        libc::EINVAL => EINVAL,
        libc::ENOSPC | libc::EDQUOT => ENOSPC,
        libc::EOVERFLOW | libc::EFBIG => EOVERFLOW,
        libc::ENOTSUP => ENOTSUP,
        libc::ESHUTDOWN => ESHUTDOWN,
        _ => EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refusals() {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        h[8..12].copy_from_slice(&OPT_GO.to_be_bytes());
        h[12..].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(parse_option_header(&h), Ok((OPT_GO, 9)));
        h[0] ^= 1;
        assert!(parse_option_header(&h).is_err());

        let mut d = Vec::new();
        d.extend_from_slice(&3u32.to_be_bytes());
        d.extend_from_slice(b"p/v");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        let r = parse_info_request(&d).unwrap();
        assert_eq!(r, InfoRequest { name: "p/v".into(), infos: vec![3, 0] });
        assert!(parse_info_request(&d[..d.len() - 1]).is_err(), "truncated");
        let mut long = d.clone();
        long.push(0);
        assert!(parse_info_request(&long).is_err(), "trailing bytes");
        let mut huge = d.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info_request(&huge).is_err(), "name longer than the data");
        assert!(parse_export_name(&[0xff, 0xfe]).is_err());

        let mut q = [0u8; 28];
        q[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        q[4..6].copy_from_slice(&CMD_FLAG_FUA.to_be_bytes());
        q[6..8].copy_from_slice(&CMD_WRITE.to_be_bytes());
        q[8..16].copy_from_slice(&7u64.to_be_bytes());
        q[16..24].copy_from_slice(&4096u64.to_be_bytes());
        q[24..].copy_from_slice(&512u32.to_be_bytes());
        assert_eq!(
            parse_request(&q),
            Ok(Request { flags: CMD_FLAG_FUA, kind: CMD_WRITE, cookie: 7, offset: 4096, len: 512 })
        );
        q[3] ^= 1;
        assert!(parse_request(&q).is_err());

        let r = option_reply(OPT_LIST, REP_ACK, b"");
        assert_eq!(r.len(), 20);
        assert_eq!(&r[..8], &REPLY_MAGIC.to_be_bytes());
        assert_eq!(&simple_reply(EIO, 9)[4..8], &5u32.to_be_bytes());
        assert_eq!(nbd_errno(libc::EDQUOT), ENOSPC);
        assert_eq!(nbd_errno(libc::EROFS), EPERM);
        assert_eq!(nbd_errno(libc::ENOENT), EIO);
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse_info_request(&b);
            let _ = parse_export_name(&b);
            if b.len() >= 28 {
                let mut q = [0u8; 28];
                q.copy_from_slice(&b[..28]);
                let _ = parse_request(&q);
            }
            if b.len() >= 16 {
                let mut h = [0u8; 16];
                h.copy_from_slice(&b[..16]);
                let _ = parse_option_header(&h);
            }
        }
    }
}
