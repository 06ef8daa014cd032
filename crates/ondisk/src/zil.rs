//! The ZFS intent log's on-disk records: log blocks (`zil_chain_t`) and log records (`lr_t`).
//!
//! Facts from OpenZFS `include/sys/zil.h` and `module/zfs/zil.c`.
//!
//! A dataset's log is a chain of blocks hanging off the ZIL header of its objset
//! (`zh_log`). Each block carries, in its own bytes, the pointer to the next one: the
//! writer allocates block n+1 before it writes block n, so a chain always ends in a block
//! that is allocated but not (yet) written, whose checksum does not verify. Blocks of the
//! slim format (`ZIO_CHECKSUM_ZILOG2`, every pool since version 26) start with
//!
//! ```text
//! offset  size  zil_chain_t
//!      0     8  zc_pad
//!      8   128  zc_next_blk   (next block: its checksum words 0-1 are the chain's random
//!                             guid, word 2 the objset id, word 3 the block sequence number)
//!    136     8  zc_nused      (bytes used in this block, records from offset 184)
//!    144    40  zc_eck        (magic + the block's own checksum, `zio_eck_t`)
//! ```
//!
//! and the older format (`ZIO_CHECKSUM_ZILOG`) ends with the same 184 bytes, records from 0.
//!
//! Every record starts with `lr_t` (32 bytes: txtype, reclen, txg, seq) and is `reclen`
//! bytes long, a multiple of 8. A write record (`lr_write_t`, 192 bytes) is followed by
//! its data when the data was copied into the log (`WR_COPIED`, reclen > 192); with
//! reclen == 192 its block pointer names a block written directly (`WR_INDIRECT`), or is a
//! hole (zeros).

use crate::blkptr::{BlkPtr, BLKPTR_SIZE};
use crate::bytes::ByteOrder;
use crate::error::{Error, Result};

/// Size of `zil_chain_t`.
pub const ZIL_CHAIN_SIZE: usize = 184;
/// Offset of `zc_nused` in `zil_chain_t`.
const ZC_NUSED: usize = 136;
/// Size of `lr_t`, the common record header.
pub const LR_SIZE: usize = 32;
/// Size of `lr_write_t` without its data.
pub const LR_WRITE_SIZE: usize = 192;
/// Size of `lr_truncate_t`.
pub const LR_TRUNCATE_SIZE: usize = 56;
/// `sizeof (lr_setattr_t)`: `lr_t`, six words (object, mask, mode, uid, gid, size) and two
/// times of two words; an `lr_attr_t` follows when the mask has [`AT_XVATTR`].
pub const LR_SETATTR_SIZE: usize = 112;
/// The largest log block OpenZFS writes (`zil_maxblocksize` default, 128 KiB).
pub const ZIL_MAX_BLKSZ: u64 = 128 << 10;

/// `ZIO_CHECKSUM_ZILOG2`: the slim layout (chain header first); `ZIO_CHECKSUM_ZILOG` (5):
/// the old one (chain header last).
pub const ZIO_CHECKSUM_ZILOG2: u8 = 9;
/// Offset of the embedded checksum's magic (`zec_magic`) in a slim block's chain header.
const ZC_ECK: usize = 144;
/// `ZEC_MAGIC`: says the byte order of a block with an embedded checksum.
const ZEC_MAGIC: u64 = 0x0210_da7a_b10c_7a11;

/// Checksum words of a log block pointer (`ZIL_ZC_*`).
pub const ZIL_ZC_GUID_0: usize = 0;
pub const ZIL_ZC_GUID_1: usize = 1;
pub const ZIL_ZC_OBJSET: usize = 2;
pub const ZIL_ZC_SEQ: usize = 3;

/// `zh_flags`: replay needed (set by a claim), and `zh_claim_lr_seq` is valid.
pub const ZIL_REPLAY_NEEDED: u64 = 0x1;
pub const ZIL_CLAIM_LR_SEQ_VALID: u64 = 0x2;

/// Record types (`TX_*`) rzfs writes or replays.
pub const TX_WRITE: u64 = 9;
pub const TX_TRUNCATE: u64 = 10;
pub const TX_SETATTR: u64 = 11;
pub const TX_WRITE2: u64 = 20;
/// `TX_MAX_TYPE`: types at or above it are invalid.
pub const TX_MAX_TYPE: u64 = 25;
/// `lr_mask` bits of `TX_SETATTR`: OpenZFS on Linux logs (and replays) the kernel's
/// `ATTR_*` values (`AT_MODE` is `ATTR_MODE`, ..., include/os/linux/spl/sys/vnode.h).
/// The mask is platform-dependent in OpenZFS: FreeBSD and userland (zdb, ztest:
/// `zfs_context.h`) use the Solaris values (`AT_SIZE` 0x80), so zdb -ivv misnames the
/// bits of a log written on Linux.
pub const AT_MODE: u64 = 1 << 0;
pub const AT_UID: u64 = 1 << 1;
pub const AT_GID: u64 = 1 << 2;
pub const AT_SIZE: u64 = 1 << 3;
pub const AT_ATIME: u64 = 1 << 4;
pub const AT_MTIME: u64 = 1 << 5;
pub const AT_CTIME: u64 = 1 << 6;
/// Extended (DOS and BSD-flag) attributes follow the record.
pub const AT_XVATTR: u64 = 1 << 31;
/// The case-insensitive flag of name records (`TX_CI`), not part of the type.
pub const TX_CI: u64 = 1 << 63;

/// OpenZFS's name of a record type, for messages.
pub fn txtype_name(t: u64) -> &'static str {
    const NAMES: [&str; 25] = [
        "invalid",
        "create",
        "mkdir",
        "mkxattr",
        "symlink",
        "remove",
        "rmdir",
        "link",
        "rename",
        "write",
        "truncate",
        "setattr",
        "acl_v0",
        "acl",
        "create_acl",
        "create_attr",
        "create_acl_attr",
        "mkdir_acl",
        "mkdir_attr",
        "mkdir_acl_attr",
        "write2",
        "setsaxattr",
        "rename_exchange",
        "rename_whiteout",
        "clone_range",
    ];
    usize::try_from(t & !TX_CI).ok().and_then(|i| NAMES.get(i)).copied().unwrap_or("unknown")
}

/// What a log record asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LrBody {
    /// `TX_WRITE`: `length` bytes at `offset` of object `foid`; `data` holds them when they
    /// were copied into the record, else `bp` names the block that does (a hole: zeros).
    Write { foid: u64, offset: u64, length: u64, blkoff: u64, bp: BlkPtr, data: Option<Vec<u8>> },
    /// `TX_TRUNCATE`: free `[offset, offset + length)` (length 0: truncate at `offset`).
    Truncate { foid: u64, offset: u64, length: u64 },
    /// `TX_WRITE2`: the file grew to `offset + length` by a write whose block synced.
    Write2 { foid: u64, offset: u64, length: u64 },
    /// `TX_SETATTR`: the attributes `mask` ([`AT_MODE`]...) names take these values; times
    /// are (seconds, nanoseconds). `xvattr` keeps the `lr_attr_t` bytes that may follow.
    Setattr {
        foid: u64,
        mask: u64,
        mode: u64,
        uid: u64,
        gid: u64,
        size: u64,
        atime: [u64; 2],
        mtime: [u64; 2],
        xvattr: Vec<u8>,
    },
    /// Any other type, kept as its bytes after `lr_t`.
    Other { body: Vec<u8> },
}

/// One log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// `lrc_txtype` including [`TX_CI`].
    pub txtype: u64,
    /// The txg the change was made in: a record of a txg that synced is not replayed.
    pub txg: u64,
    /// Sequence number, increasing along the log.
    pub seq: u64,
    pub body: LrBody,
}

impl LogRecord {
    /// The record type without [`TX_CI`].
    pub fn kind(&self) -> u64 {
        self.txtype & !TX_CI
    }

    /// The record's bytes (`reclen` = their length, a multiple of 8).
    pub fn encode(&self, order: ByteOrder) -> Vec<u8> {
        let mut body: Vec<u8> = Vec::new();
        let mut put = |v: u64| {
            let mut b = [0u8; 8];
            order.put_u64(&mut b, 0, v);
            body.extend_from_slice(&b);
        };
        match &self.body {
            LrBody::Write { foid, offset, length, blkoff, bp, data } => {
                for v in [*foid, *offset, *length, *blkoff] {
                    put(v);
                }
                body.extend_from_slice(&bp.encode(order));
                if let Some(d) = data {
                    body.extend_from_slice(d);
                }
            }
            LrBody::Truncate { foid, offset, length } | LrBody::Write2 { foid, offset, length } => {
                for v in [*foid, *offset, *length] {
                    put(v);
                }
            }
            LrBody::Setattr { foid, mask, mode, uid, gid, size, atime, mtime, xvattr } => {
                for v in [*foid, *mask, *mode, *uid, *gid, *size, atime[0], atime[1], mtime[0], mtime[1]] {
                    put(v);
                }
                body.extend_from_slice(xvattr);
            }
            LrBody::Other { body: b } => body.extend_from_slice(b),
        }
        let reclen = (LR_SIZE + body.len()).next_multiple_of(8);
        let mut out = vec![0u8; reclen];
        order.put_u64(&mut out, 0, self.txtype);
        order.put_u64(&mut out, 8, reclen as u64);
        order.put_u64(&mut out, 16, self.txg);
        order.put_u64(&mut out, 24, self.seq);
        out[LR_SIZE..LR_SIZE + body.len()].copy_from_slice(&body);
        out
    }
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt { what: "intent log", detail: detail.into() }
}

/// Decodes the records of a log block (the bytes [`split_block`] returns). Parsing stops
/// with an error at the first record whose length is impossible, as `zil_parse` does; the
/// records before it are returned with the error.
pub fn parse_records(bytes: &[u8], order: ByteOrder) -> (Vec<LogRecord>, Option<Error>) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        match parse_one(&bytes[at..], order) {
            Ok((r, len)) => {
                out.push(r);
                at += len;
            }
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn parse_one(b: &[u8], order: ByteOrder) -> Result<(LogRecord, usize)> {
    if b.len() < LR_SIZE {
        return Err(corrupt(format!("{} bytes left, less than a record header", b.len())));
    }
    let txtype = order.u64_at(b, 0, "lr_t")?;
    let reclen = order.u64_at(b, 8, "lr_t")?;
    let len = usize::try_from(reclen).ok().filter(|&l| l >= LR_SIZE && l <= b.len());
    let Some(len) = len else {
        return Err(corrupt(format!("record length {reclen} with {} bytes left", b.len())));
    };
    let txg = order.u64_at(b, 16, "lr_t")?;
    let seq = order.u64_at(b, 24, "lr_t")?;
    let rec = &b[..len];
    let kind = txtype & !TX_CI;
    let body = match kind {
        TX_WRITE if len >= LR_WRITE_SIZE => {
            let foid = order.u64_at(rec, 32, "lr_write")?;
            let offset = order.u64_at(rec, 40, "lr_write")?;
            let length = order.u64_at(rec, 48, "lr_write")?;
            let blkoff = order.u64_at(rec, 56, "lr_write")?;
            let bp = BlkPtr::parse(&rec[64..64 + BLKPTR_SIZE], order)?;
            let data = if len > LR_WRITE_SIZE {
                // Copied data: `length` bytes follow, padded to 8.
                let n = usize::try_from(length).ok().filter(|&n| n <= len - LR_WRITE_SIZE);
                let Some(n) = n else {
                    return Err(corrupt(format!("write record of {length} bytes in {len}")));
                };
                Some(rec[LR_WRITE_SIZE..LR_WRITE_SIZE + n].to_vec())
            } else {
                None
            };
            LrBody::Write { foid, offset, length, blkoff, bp, data }
        }
        TX_TRUNCATE | TX_WRITE2 if len >= LR_TRUNCATE_SIZE => {
            let foid = order.u64_at(rec, 32, "lr_truncate")?;
            let offset = order.u64_at(rec, 40, "lr_truncate")?;
            let length = order.u64_at(rec, 48, "lr_truncate")?;
            if kind == TX_TRUNCATE {
                LrBody::Truncate { foid, offset, length }
            } else {
                LrBody::Write2 { foid, offset, length }
            }
        }
        TX_SETATTR if len >= LR_SETATTR_SIZE => {
            let w = |i: usize| order.u64_at(rec, LR_SIZE + 8 * i, "lr_setattr");
            LrBody::Setattr {
                foid: w(0)?,
                mask: w(1)?,
                mode: w(2)?,
                uid: w(3)?,
                gid: w(4)?,
                size: w(5)?,
                atime: [w(6)?, w(7)?],
                mtime: [w(8)?, w(9)?],
                xvattr: rec[LR_SETATTR_SIZE..].to_vec(),
            }
        }
        TX_WRITE | TX_TRUNCATE | TX_WRITE2 | TX_SETATTR => {
            return Err(corrupt(format!("{} record of {len} bytes", txtype_name(kind))));
        }
        _ => LrBody::Other { body: rec[LR_SIZE..].to_vec() },
    };
    Ok((LogRecord { txtype, txg, seq, body }, len))
}

/// Where a log block's chain header sits, by its checksum type: at the start for
/// `zilog2` (slim), at the end for `zilog`.
fn chain_at(slim: bool, len: usize) -> Option<usize> {
    if slim {
        (len >= ZIL_CHAIN_SIZE).then_some(0)
    } else {
        len.checked_sub(ZIL_CHAIN_SIZE)
    }
}

/// Splits a verified log block into the pointer to the next block and its record bytes
/// (OpenZFS `zil_read_log_block`). `slim` is `ZIO_CHECKSUM_ZILOG2`.
pub fn split_block(data: &[u8], slim: bool, order: ByteOrder) -> Result<(BlkPtr, &[u8])> {
    let at = chain_at(slim, data.len()).ok_or_else(|| corrupt(format!("{}-byte log block", data.len())))?;
    let chain = &data[at..at + ZIL_CHAIN_SIZE];
    let next = BlkPtr::parse(&chain[8..8 + BLKPTR_SIZE], order)?;
    let nused = order.u64_at(chain, ZC_NUSED, "zil_chain")?;
    let nused = usize::try_from(nused).map_err(|_| corrupt(format!("zc_nused {nused}")))?;
    let records = if slim {
        if nused < ZIL_CHAIN_SIZE || nused > data.len() {
            return Err(corrupt(format!("zc_nused {nused} in a {}-byte block", data.len())));
        }
        &data[ZIL_CHAIN_SIZE..nused]
    } else {
        if nused > at {
            return Err(corrupt(format!("zc_nused {nused} in a {}-byte block", data.len())));
        }
        &data[..nused]
    };
    Ok((next, records))
}

/// A log block's byte order: the magic of its embedded checksum says it, else the pointer.
pub fn block_order(bp: &BlkPtr, data: &[u8]) -> ByteOrder {
    let at = if bp.checksum() == ZIO_CHECKSUM_ZILOG2 { ZC_ECK } else { data.len().saturating_sub(40) };
    match ByteOrder::Little.u64_at(data, at, "zil eck") {
        Ok(m) if m == ZEC_MAGIC => ByteOrder::Little,
        Ok(m) if m.swap_bytes() == ZEC_MAGIC => ByteOrder::Big,
        _ => bp.byte_order(),
    }
}

/// [`split_block`] of the verified block `data` that `bp` points to, in its own layout and
/// byte order: the next block's pointer, the record bytes and their byte order.
pub fn open_block<'d>(bp: &BlkPtr, data: &'d [u8]) -> Result<(BlkPtr, &'d [u8], ByteOrder)> {
    let order = block_order(bp, data);
    let (next, records) = split_block(data, bp.checksum() == ZIO_CHECKSUM_ZILOG2, order)?;
    Ok((next, records, order))
}

/// Builds a slim log block of `size` bytes holding `records` (already encoded) and pointing
/// to `next`; the embedded checksum is the caller's to seal. Fails when they do not fit.
pub fn build_block(size: usize, next: &BlkPtr, records: &[u8], order: ByteOrder) -> Result<Vec<u8>> {
    let nused = ZIL_CHAIN_SIZE + records.len();
    if nused > size {
        return Err(corrupt(format!("{} bytes of records in a {size}-byte log block", records.len())));
    }
    let mut b = vec![0u8; size];
    b[8..8 + BLKPTR_SIZE].copy_from_slice(&next.encode(order));
    order.put_u64(&mut b, ZC_NUSED, nused as u64);
    b[ZIL_CHAIN_SIZE..nused].copy_from_slice(records);
    Ok(b)
}

/// Room for records in a slim log block of `size` bytes.
pub fn block_room(size: usize) -> usize {
    size.saturating_sub(ZIL_CHAIN_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(seq: u64, data: Option<Vec<u8>>) -> LogRecord {
        let length = data.as_ref().map_or(4096, |d| d.len() as u64);
        LogRecord {
            txtype: TX_WRITE,
            txg: 7,
            seq,
            body: LrBody::Write { foid: 3, offset: 8192, length, blkoff: 0, bp: BlkPtr::default(), data },
        }
    }

    #[test]
    fn records_round_trip_in_both_byte_orders() {
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let recs = vec![
                write(1, Some(vec![0xab; 13])),
                write(2, None),
                LogRecord {
                    txtype: TX_TRUNCATE,
                    txg: 8,
                    seq: 3,
                    body: LrBody::Truncate { foid: 3, offset: 100, length: 0 },
                },
                LogRecord { txtype: 5 | TX_CI, txg: 8, seq: 4, body: LrBody::Other { body: vec![1; 24] } },
                LogRecord {
                    txtype: TX_SETATTR,
                    txg: 8,
                    seq: 5,
                    body: LrBody::Setattr {
                        foid: 9,
                        mask: AT_SIZE | AT_MTIME,
                        mode: 0o100644,
                        uid: 1,
                        gid: 2,
                        size: 4097,
                        atime: [0, 0],
                        mtime: [1_700_000_000, 5],
                        xvattr: Vec::new(),
                    },
                },
            ];
            let mut bytes = Vec::new();
            for r in &recs {
                let e = r.encode(order);
                assert_eq!(e.len() % 8, 0);
                bytes.extend(e);
            }
            assert_eq!(recs[0].encode(order).len(), LR_WRITE_SIZE + 16);
            assert_eq!(recs[4].encode(order).len(), LR_SETATTR_SIZE);
            let (got, err) = parse_records(&bytes, order);
            assert!(err.is_none());
            assert_eq!(got, recs);
            assert_eq!(got[3].kind(), 5);
            assert_eq!(txtype_name(got[3].txtype), "remove");
        }
    }

    #[test]
    fn bad_lengths_stop_the_parse_with_what_came_before() {
        let mut bytes = write(1, Some(vec![1; 8])).encode(ByteOrder::Little);
        let first = bytes.len();
        bytes.extend(write(2, Some(vec![2; 8])).encode(ByteOrder::Little));
        bytes[first + 8] = 0xff; // reclen past the end
        let (got, err) = parse_records(&bytes, ByteOrder::Little);
        assert_eq!(got.len(), 1);
        assert!(err.is_some());
        // A write whose length claims more data than the record holds.
        let mut w = write(3, Some(vec![3; 8])).encode(ByteOrder::Little);
        w[48] = 200;
        assert!(parse_records(&w, ByteOrder::Little).1.is_some());
    }

    #[test]
    fn blocks_round_trip_and_never_panic() {
        let next = BlkPtr { cksum: [1, 2, 3, 4], ..Default::default() };
        let recs = write(1, Some(vec![9; 100])).encode(ByteOrder::Little);
        let b = build_block(4096, &next, &recs, ByteOrder::Little).unwrap();
        let (n, r) = split_block(&b, true, ByteOrder::Little).unwrap();
        assert_eq!(n, next);
        assert_eq!(r, &recs[..]);
        assert!(build_block(256, &next, &recs, ByteOrder::Little).is_err());
        // Without an embedded checksum's magic the pointer says the byte order.
        let mut bp = BlkPtr::default();
        bp.set_prop(4096, 4096, 2, ZIO_CHECKSUM_ZILOG2, 9, 0, ByteOrder::Little);
        let (n, r, order) = open_block(&bp, &b).unwrap();
        assert_eq!((n, r, order), (next, &recs[..], ByteOrder::Little));
        for len in [0usize, 100, 184, 4096] {
            for fill in [0u8, 0xff] {
                let d = vec![fill; len];
                for slim in [true, false] {
                    let _ = split_block(&d, slim, ByteOrder::Big);
                }
                let _ = parse_records(&d, ByteOrder::Little);
            }
        }
    }
}
