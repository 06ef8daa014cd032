//! The send-stream record codec: `dmu_replay_record_t` layouts, payload sizes, and the running
//! fletcher-4 that protects the stream.
//!
//! ## The record (312 bytes, OpenZFS include/sys/zfs_ioctl.h)
//! ```text
//!   0  u32 drr_type          0 BEGIN 1 OBJECT 2 FREEOBJECTS 3 WRITE 4 FREE 5 END 6 WRITE_BYREF
//!                            7 SPILL 8 WRITE_EMBEDDED 9 OBJECT_RANGE 10 REDACT
//!   4  u32 drr_payloadlen    only BEGIN sets it (length of its packed nvlist payload)
//!   8  304-byte union       one `struct drr_*` per type, C layout with natural alignment
//! 280  zio_cksum_t           drr_checksum (4 × u64), overlaid on the union's tail; not in BEGIN
//! ```
//! `struct drr_begin` is 304 bytes (48 bytes of fields + the 256-byte `drr_toname`), so in a
//! BEGIN record bytes 280..312 are the end of the name, not a checksum. Every other struct ends
//! before offset 280, which is what lets `drr_checksum` share the union.
//!
//! ## The running checksum (OpenZFS `dump_record` in module/zfs/dmu_send.c and
//! lib/libzfs/libzfs_sendrecv.c; checked by `receive_read_payload_and_next_header` in
//! module/zfs/dmu_recv.c and by `zstream dump`)
//! One fletcher-4 state, starting at zero with each BEGIN, is continued over, in stream order:
//! a record's first 280 bytes; then (all types but BEGIN) the state so far is stored in the
//! record's bytes 280..312; then those 32 bytes themselves; then the record's payload. An END
//! record also stores, at offset 8 (`drr_end.drr_checksum`), the state before the END record. A
//! reader accepts an all-zero `drr_checksum` unchecked, as the kernel's receive does (old
//! senders, and the ENDs that libzfs writes without `dump_record`). An all-zero END checksum is
//! accepted too: the kernel compares that one strictly, but the all-zero closing END of a
//! compound stream never reaches it (libzfs consumes it). Words are summed in the sender's byte order,
//! and the stored checksum words are integers in that order too.
//!
//! What follows an END is summed from zero again: in a compound stream that is the next
//! substream's BEGIN (which restarts anyway) or the closing END that libzfs writes all zero
//! (`send_conclusion_record`). `zstream dump` (old and new) restarts its sum after every END
//! the same way, and the new one checks the closing END's end checksum against that zero sum,
//! so the writer and reader here do likewise.
//!
//! ## Payload sizes (the `DRR_*_PAYLOAD_SIZE` macros)
//! BEGIN `drr_payloadlen`; OBJECT `raw_bonuslen` if nonzero, else `bonuslen` rounded up to 8;
//! WRITE `compressed_size` if `compressiontype != 0`, else `logical_size`; SPILL
//! `compressed_size` if nonzero, else `length`; WRITE_EMBEDDED `psize` rounded up to 8; the
//! rest none. The reader refuses announced sizes above [`MAX_PAYLOAD`] ([`MAX_BEGIN_PAYLOAD`]
//! for BEGIN) before allocating anything.

use std::io::{self, BufReader, Read, Write};

use codec::checksum::fletcher4_incremental;

/// Size of one `dmu_replay_record_t`.
pub const RECORD_SIZE: usize = 312;
/// Offset of `drr_checksum` inside a record (the last 32 bytes).
pub const CHECKSUM_OFFSET: usize = 280;
/// `DMU_BACKUP_MAGIC`, the first field of a BEGIN record.
pub const BACKUP_MAGIC: u64 = 0x2F5B_ACBAC;
/// `drr_versioninfo` header type (bits 0-1): a plain stream of one snapshot.
pub const HDRTYPE_SUBSTREAM: u64 = 1;
/// `drr_versioninfo` header type: a compound (`-R`/`-p`) stream header.
pub const HDRTYPE_COMPOUNDSTREAM: u64 = 2;
/// Size of `drr_toname` (MAXNAMELEN); a name holds at most 255 bytes plus its NUL.
pub const MAXNAMELEN: usize = 256;

/// Largest payload a non-BEGIN record may announce: SPA_MAXBLOCKSIZE (16 MiB) plus slack.
pub const MAX_PAYLOAD: u64 = (16 << 20) + (4 << 10);
/// Largest BEGIN payload (a packed nvlist) accepted.
pub const MAX_BEGIN_PAYLOAD: u64 = 64 << 20;

// Stream feature flags: bits of DMU_GET_FEATUREFLAGS(drr_versioninfo), i.e. of
// `drr_versioninfo >> 2` (`DMU_BACKUP_FEATURE_*`).
pub const FEATURE_DEDUP: u64 = 1 << 0;
pub const FEATURE_DEDUPPROPS: u64 = 1 << 1;
pub const FEATURE_SA_SPILL: u64 = 1 << 2;
// Bits 3-15 are reserved for closed-source implementations.
pub const FEATURE_EMBED_DATA: u64 = 1 << 16;
pub const FEATURE_LZ4: u64 = 1 << 17;
// Bit 18 is reserved for a Delphix feature.
pub const FEATURE_LARGE_BLOCKS: u64 = 1 << 19;
pub const FEATURE_RESUMING: u64 = 1 << 20;
pub const FEATURE_REDACTED: u64 = 1 << 21;
pub const FEATURE_COMPRESSED: u64 = 1 << 22;
pub const FEATURE_LARGE_DNODE: u64 = 1 << 23;
pub const FEATURE_RAW: u64 = 1 << 24;
pub const FEATURE_ZSTD: u64 = 1 << 25;
pub const FEATURE_HOLDS: u64 = 1 << 26;
pub const FEATURE_SWITCH_TO_LARGE_BLOCKS: u64 = 1 << 27;
pub const FEATURE_LONGNAME: u64 = 1 << 28;
pub const FEATURE_LARGE_MICROZAP: u64 = 1 << 29;
/// `DMU_BACKUP_FEATURE_MASK`: what a current OpenZFS receiver accepts. DEDUP and DEDUPPROPS are
/// not in it (dedup streams were retired; `zstream redup` converts them).
pub const SUPPORTED_FEATURES: u64 = FEATURE_SA_SPILL
    | FEATURE_EMBED_DATA
    | FEATURE_LZ4
    | FEATURE_RESUMING
    | FEATURE_LARGE_BLOCKS
    | FEATURE_COMPRESSED
    | FEATURE_LARGE_DNODE
    | FEATURE_RAW
    | FEATURE_HOLDS
    | FEATURE_REDACTED
    | FEATURE_SWITCH_TO_LARGE_BLOCKS
    | FEATURE_ZSTD
    | FEATURE_LONGNAME
    | FEATURE_LARGE_MICROZAP;

// `drr_begin.drr_flags`.
pub const DRR_FLAG_CLONE: u32 = 1 << 0;
pub const DRR_FLAG_CI_DATA: u32 = 1 << 1;
/// A full stream that carries FREE/FREEOBJECTS records (receivable as a clone).
pub const DRR_FLAG_FREERECORDS: u32 = 1 << 2;
/// DRR_OBJECT_SPILL / DRR_SPILL_UNMODIFIED are meaningful in this stream.
pub const DRR_FLAG_SPILL_BLOCK: u32 = 1 << 3;

// `drr_flags` of WRITE, SPILL, OBJECT, WRITE_BYREF and OBJECT_RANGE records.
pub const DRR_CHECKSUM_DEDUP: u8 = 1 << 0;
pub const DRR_RAW_BYTESWAP: u8 = 1 << 1;
/// OBJECT: the object has a spill block.
pub const DRR_OBJECT_SPILL: u8 = 1 << 2;
/// SPILL: sent only for older receivers; the block is unmodified.
pub const DRR_SPILL_UNMODIFIED: u8 = 1 << 2;

/// `DMU_OBJECT_END`: a FREE of this length frees to the end of the object.
pub const OBJECT_END: u64 = u64::MAX;

// `drr_type` values.
pub const DRR_BEGIN: u32 = 0;
pub const DRR_OBJECT: u32 = 1;
pub const DRR_FREEOBJECTS: u32 = 2;
pub const DRR_WRITE: u32 = 3;
pub const DRR_FREE: u32 = 4;
pub const DRR_END: u32 = 5;
pub const DRR_WRITE_BYREF: u32 = 6;
pub const DRR_SPILL: u32 = 7;
pub const DRR_WRITE_EMBEDDED: u32 = 8;
pub const DRR_OBJECT_RANGE: u32 = 9;
pub const DRR_REDACT: u32 = 10;
/// Number of record types (`DRR_NUMTYPES`).
pub const DRR_NUMTYPES: u32 = 11;

/// Byte offsets of every field, from the start of the record (the union starts at 8, so each
/// is 8 + the member's offset in its `struct drr_*`, laid out with C natural alignment).
mod off {
    pub const TYPE: usize = 0; // u32
    pub const PAYLOADLEN: usize = 4; // u32

    // struct drr_begin: fills all 304 union bytes (toname runs to 312).
    pub const BEGIN_MAGIC: usize = 8;
    pub const BEGIN_VERSIONINFO: usize = 16;
    pub const BEGIN_CREATION_TIME: usize = 24;
    pub const BEGIN_TYPE: usize = 32; // u32 dmu_objset_type_t
    pub const BEGIN_FLAGS: usize = 36; // u32
    pub const BEGIN_TOGUID: usize = 40;
    pub const BEGIN_FROMGUID: usize = 48;
    pub const BEGIN_TONAME: usize = 56; // char[256], 56..312

    // struct drr_end
    pub const END_CHECKSUM: usize = 8; // zio_cksum_t, 8..40
    pub const END_TOGUID: usize = 40;

    // struct drr_object
    pub const OBJECT_OBJECT: usize = 8;
    pub const OBJECT_TYPE: usize = 16; // u32
    pub const OBJECT_BONUSTYPE: usize = 20; // u32
    pub const OBJECT_BLKSZ: usize = 24; // u32
    pub const OBJECT_BONUSLEN: usize = 28; // u32
    pub const OBJECT_CHECKSUMTYPE: usize = 32; // u8
    pub const OBJECT_COMPRESS: usize = 33; // u8
    pub const OBJECT_DN_SLOTS: usize = 34; // u8
    pub const OBJECT_FLAGS: usize = 35; // u8
    pub const OBJECT_RAW_BONUSLEN: usize = 36; // u32
    pub const OBJECT_TOGUID: usize = 40;
    pub const OBJECT_INDBLKSHIFT: usize = 48; // u8
    pub const OBJECT_NLEVELS: usize = 49; // u8
    pub const OBJECT_NBLKPTR: usize = 50; // u8, then 5 pad bytes
    pub const OBJECT_MAXBLKID: usize = 56;

    // struct drr_freeobjects
    pub const FREEOBJECTS_FIRSTOBJ: usize = 8;
    pub const FREEOBJECTS_NUMOBJS: usize = 16;
    pub const FREEOBJECTS_TOGUID: usize = 24;

    // struct drr_write (ends at 140, padded to 144)
    pub const WRITE_OBJECT: usize = 8;
    pub const WRITE_TYPE: usize = 16; // u32, then u32 pad
    pub const WRITE_OFFSET: usize = 24;
    pub const WRITE_LOGICAL_SIZE: usize = 32;
    pub const WRITE_TOGUID: usize = 40;
    pub const WRITE_CHECKSUMTYPE: usize = 48; // u8
    pub const WRITE_FLAGS: usize = 49; // u8
    pub const WRITE_COMPRESSIONTYPE: usize = 50; // u8, then 5 pad bytes
    pub const WRITE_KEY_CKSUM: usize = 56; // ddt_key_t: zio_cksum_t 56..88 ...
    pub const WRITE_KEY_PROP: usize = 88; // ... and u64 ddk_prop
    pub const WRITE_COMPRESSED_SIZE: usize = 96;
    pub const WRITE_SALT: usize = 104; // u8[8]
    pub const WRITE_IV: usize = 112; // u8[12]
    pub const WRITE_MAC: usize = 124; // u8[16], to 140

    // struct drr_free
    pub const FREE_OBJECT: usize = 8;
    pub const FREE_OFFSET: usize = 16;
    pub const FREE_LENGTH: usize = 24;
    pub const FREE_TOGUID: usize = 32;

    // struct drr_write_byref (ends at 112)
    pub const BYREF_OBJECT: usize = 8;
    pub const BYREF_OFFSET: usize = 16;
    pub const BYREF_LENGTH: usize = 24;
    pub const BYREF_TOGUID: usize = 32;
    pub const BYREF_REFGUID: usize = 40;
    pub const BYREF_REFOBJECT: usize = 48;
    pub const BYREF_REFOFFSET: usize = 56;
    pub const BYREF_CHECKSUMTYPE: usize = 64; // u8
    pub const BYREF_FLAGS: usize = 65; // u8, then 6 pad bytes
    pub const BYREF_KEY_CKSUM: usize = 72; // 72..104
    pub const BYREF_KEY_PROP: usize = 104;

    // struct drr_spill (ends at 88)
    pub const SPILL_OBJECT: usize = 8;
    pub const SPILL_LENGTH: usize = 16;
    pub const SPILL_TOGUID: usize = 24;
    pub const SPILL_FLAGS: usize = 32; // u8
    pub const SPILL_COMPRESSIONTYPE: usize = 33; // u8, then 6 pad bytes
    pub const SPILL_COMPRESSED_SIZE: usize = 40;
    pub const SPILL_SALT: usize = 48; // u8[8]
    pub const SPILL_IV: usize = 56; // u8[12]
    pub const SPILL_MAC: usize = 68; // u8[16]
    pub const SPILL_TYPE: usize = 84; // u32 dmu_object_type_t (4-aligned right after the MAC)

    // struct drr_write_embedded
    pub const EMBEDDED_OBJECT: usize = 8;
    pub const EMBEDDED_OFFSET: usize = 16;
    pub const EMBEDDED_LENGTH: usize = 24;
    pub const EMBEDDED_TOGUID: usize = 32;
    pub const EMBEDDED_COMPRESSION: usize = 40; // u8
    pub const EMBEDDED_ETYPE: usize = 41; // u8, then 6 pad bytes
    pub const EMBEDDED_LSIZE: usize = 48; // u32
    pub const EMBEDDED_PSIZE: usize = 52; // u32

    // struct drr_object_range
    pub const RANGE_FIRSTOBJ: usize = 8;
    pub const RANGE_NUMSLOTS: usize = 16;
    pub const RANGE_TOGUID: usize = 24;
    pub const RANGE_SALT: usize = 32; // u8[8]
    pub const RANGE_IV: usize = 40; // u8[12]
    pub const RANGE_MAC: usize = 52; // u8[16]
    pub const RANGE_FLAGS: usize = 68; // u8, then 3 pad bytes

    // struct drr_redact
    pub const REDACT_OBJECT: usize = 8;
    pub const REDACT_OFFSET: usize = 16;
    pub const REDACT_LENGTH: usize = 24;
    pub const REDACT_TOGUID: usize = 32;
}

/// `struct drr_begin`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Begin {
    /// [`BACKUP_MAGIC`] (as decoded in the stream's byte order); kept for dumps.
    pub magic: u64,
    /// Header type in bits 0-1, feature flags in bits 2-57.
    pub versioninfo: u64,
    pub creation_time: u64,
    /// `dmu_objset_type_t` of the sent dataset (2 = ZFS, 3 = ZVOL).
    pub objset_type: u32,
    /// `DRR_FLAG_*`.
    pub flags: u32,
    pub toguid: u64,
    pub fromguid: u64,
    /// `drr_toname` up to its first NUL (invalid UTF-8 replaced).
    pub toname: String,
}

/// Builds `drr_versioninfo` from a header type and feature flags (bits above 56 are dropped).
pub fn versioninfo(hdrtype: u64, features: u64) -> u64 {
    (hdrtype & 0x3) | ((features & FEATURE_FIELD_MASK) << 2)
}

/// The 56 bits of feature flags in `drr_versioninfo` (bits 2..58).
const FEATURE_FIELD_MASK: u64 = (1 << 56) - 1;

impl Begin {
    /// `DMU_GET_STREAM_HDRTYPE`: [`HDRTYPE_SUBSTREAM`] or [`HDRTYPE_COMPOUNDSTREAM`].
    pub fn hdrtype(&self) -> u64 {
        self.versioninfo & 0x3
    }

    /// `DMU_GET_FEATUREFLAGS`: the `FEATURE_*` bits.
    pub fn features(&self) -> u64 {
        (self.versioninfo >> 2) & FEATURE_FIELD_MASK
    }
}

/// `struct drr_object`: create or reallocate an object; its bonus buffer is the payload.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Object {
    pub object: u64,
    pub object_type: u32,
    pub bonustype: u32,
    pub blksz: u32,
    pub bonuslen: u32,
    pub checksumtype: u8,
    pub compress: u8,
    pub dn_slots: u8,
    pub flags: u8,
    pub raw_bonuslen: u32,
    pub toguid: u64,
    pub indblkshift: u8,
    pub nlevels: u8,
    pub nblkptr: u8,
    pub maxblkid: u64,
}

/// `struct drr_freeobjects`: free `numobjs` objects starting at `firstobj`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FreeObjects {
    pub firstobj: u64,
    pub numobjs: u64,
    pub toguid: u64,
}

/// `struct drr_write`: one block of an object; the (possibly compressed) data is the payload.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WriteRec {
    pub object: u64,
    pub object_type: u32,
    pub offset: u64,
    pub logical_size: u64,
    pub toguid: u64,
    pub checksumtype: u8,
    pub flags: u8,
    pub compressiontype: u8,
    /// `drr_key.ddk_cksum`.
    pub key_cksum: [u64; 4],
    /// `drr_key.ddk_prop`.
    pub key_prop: u64,
    pub compressed_size: u64,
    pub salt: [u8; 8],
    pub iv: [u8; 12],
    pub mac: [u8; 16],
}

/// `struct drr_free`: free a byte range of an object (`length` [`OBJECT_END`] = to the end).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Free {
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub toguid: u64,
}

/// `struct drr_end`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct End {
    /// Running checksum of everything before this record (zero = not checked).
    pub checksum: [u64; 4],
    pub toguid: u64,
}

/// `struct drr_write_byref`: a block identical to one sent earlier (dedup streams).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WriteByref {
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub toguid: u64,
    pub refguid: u64,
    pub refobject: u64,
    pub refoffset: u64,
    pub checksumtype: u8,
    pub flags: u8,
    pub key_cksum: [u64; 4],
    pub key_prop: u64,
}

/// `struct drr_spill`: an object's spill block; the data is the payload.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Spill {
    pub object: u64,
    pub length: u64,
    pub toguid: u64,
    pub flags: u8,
    pub compressiontype: u8,
    pub compressed_size: u64,
    pub salt: [u8; 8],
    pub iv: [u8; 12],
    pub mac: [u8; 16],
    pub object_type: u32,
}

/// `struct drr_write_embedded`: a block small enough to live in its blkptr; the payload is
/// the `psize` bytes of embedded data, padded to 8.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WriteEmbedded {
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub toguid: u64,
    pub compression: u8,
    pub etype: u8,
    pub lsize: u32,
    pub psize: u32,
}

/// `struct drr_object_range`: a range of dnode slots (raw streams carry its MAC).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ObjectRange {
    pub firstobj: u64,
    pub numslots: u64,
    pub toguid: u64,
    pub salt: [u8; 8],
    pub iv: [u8; 12],
    pub mac: [u8; 16],
    pub flags: u8,
}

/// `struct drr_redact`: a range left out of a redacted stream.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Redact {
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub toguid: u64,
}

/// One decoded `dmu_replay_record_t`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Begin(Begin),
    Object(Object),
    FreeObjects(FreeObjects),
    Write(WriteRec),
    Free(Free),
    End(End),
    WriteByref(WriteByref),
    Spill(Spill),
    WriteEmbedded(WriteEmbedded),
    ObjectRange(ObjectRange),
    Redact(Redact),
}

/// The name `zstream dump` uses for a record type (without its `DRR_` prefix).
fn type_name(ty: u32) -> Option<&'static str> {
    Some(match ty {
        DRR_BEGIN => "BEGIN",
        DRR_OBJECT => "OBJECT",
        DRR_FREEOBJECTS => "FREEOBJECTS",
        DRR_WRITE => "WRITE",
        DRR_FREE => "FREE",
        DRR_END => "END",
        DRR_WRITE_BYREF => "WRITE_BYREF",
        DRR_SPILL => "SPILL",
        DRR_WRITE_EMBEDDED => "WRITE_EMBEDDED",
        DRR_OBJECT_RANGE => "OBJECT_RANGE",
        DRR_REDACT => "REDACT",
        _ => return None,
    })
}

/// Rounds up to a multiple of 8 without overflow (inputs are u32 widened to u64).
fn roundup8(x: u64) -> u64 {
    x.saturating_add(7) & !7
}

impl Record {
    /// The record's `drr_type` value.
    pub fn drr_type(&self) -> u32 {
        match self {
            Record::Begin(_) => DRR_BEGIN,
            Record::Object(_) => DRR_OBJECT,
            Record::FreeObjects(_) => DRR_FREEOBJECTS,
            Record::Write(_) => DRR_WRITE,
            Record::Free(_) => DRR_FREE,
            Record::End(_) => DRR_END,
            Record::WriteByref(_) => DRR_WRITE_BYREF,
            Record::Spill(_) => DRR_SPILL,
            Record::WriteEmbedded(_) => DRR_WRITE_EMBEDDED,
            Record::ObjectRange(_) => DRR_OBJECT_RANGE,
            Record::Redact(_) => DRR_REDACT,
        }
    }

    /// "BEGIN", "OBJECT", "FREEOBJECTS", "WRITE", … (`zstream dump`'s names without `DRR_`).
    pub fn kind(&self) -> &'static str {
        type_name(self.drr_type()).unwrap_or("UNKNOWN")
    }

    /// Payload length the record's fields announce (the `DRR_*_PAYLOAD_SIZE` rules). BEGIN's
    /// length is not in its fields (it is `drr_payloadlen`): 0 here. Saturates at `usize::MAX`.
    pub fn payload_len(&self) -> usize {
        usize::try_from(self.announced_payload()).unwrap_or(usize::MAX)
    }

    /// [`Record::payload_len`] as u64, before any cap.
    fn announced_payload(&self) -> u64 {
        match self {
            Record::Object(o) if o.raw_bonuslen != 0 => u64::from(o.raw_bonuslen),
            Record::Object(o) => roundup8(u64::from(o.bonuslen)),
            Record::Write(w) if w.compressiontype != 0 => w.compressed_size,
            Record::Write(w) => w.logical_size,
            Record::Spill(s) if s.compressed_size != 0 => s.compressed_size,
            Record::Spill(s) => s.length,
            Record::WriteEmbedded(e) => roundup8(u64::from(e.psize)),
            _ => 0,
        }
    }
}

/// Errors of reading a send stream.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("reading the send stream: {0}")]
    Io(#[from] io::Error),
    /// The input ended inside a record or its payload (`offset` = where that item starts).
    #[error("the stream ends in the middle of {what} at byte {offset}: incomplete or interrupted send")]
    Truncated { offset: u64, what: String },
    /// The first record is not a BEGIN with [`BACKUP_MAGIC`] in either byte order.
    #[error("not a ZFS send stream (bad magic)")]
    BadMagic,
    /// A record's `drr_checksum`, or an END's end checksum, disagrees with the running sum.
    #[error("checksum mismatch in the DRR_{record} record at byte {offset}: the stream is damaged")]
    Checksum { offset: u64, record: &'static str },
    /// Anything else that makes the stream unreadable (the message names record and offset).
    #[error("invalid send stream: {0}")]
    Invalid(String),
}

/// Writes fields into a record buffer in one byte order. Offsets are the constants of [`off`],
/// all inside the record; an out-of-range write would be skipped rather than panic.
struct Enc {
    buf: [u8; RECORD_SIZE],
    be: bool,
}

impl Enc {
    fn bytes(&mut self, at: usize, src: &[u8]) {
        if let Some(dst) = at.checked_add(src.len()).and_then(|end| self.buf.get_mut(at..end)) {
            dst.copy_from_slice(src);
        }
    }
    fn u64(&mut self, at: usize, v: u64) {
        let b = if self.be { v.to_be_bytes() } else { v.to_le_bytes() };
        self.bytes(at, &b);
    }
    fn u32(&mut self, at: usize, v: u32) {
        let b = if self.be { v.to_be_bytes() } else { v.to_le_bytes() };
        self.bytes(at, &b);
    }
    fn u8(&mut self, at: usize, v: u8) {
        self.bytes(at, &[v]);
    }
    fn cksum(&mut self, at: usize, words: &[u64; 4]) {
        for (i, w) in words.iter().enumerate() {
            self.u64(at + 8 * i, *w);
        }
    }
}

/// Reads fields from a record in one byte order (same offsets as [`Enc`]).
struct Dec<'a> {
    buf: &'a [u8; RECORD_SIZE],
    be: bool,
}

impl Dec<'_> {
    fn arr<const N: usize>(&self, at: usize) -> [u8; N] {
        at.checked_add(N)
            .and_then(|end| self.buf.get(at..end))
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .unwrap_or([0; N])
    }
    fn u64(&self, at: usize) -> u64 {
        let b = self.arr::<8>(at);
        if self.be {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    }
    fn u32(&self, at: usize) -> u32 {
        let b = self.arr::<4>(at);
        if self.be {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }
    fn u8(&self, at: usize) -> u8 {
        self.buf.get(at).copied().unwrap_or(0)
    }
    fn cksum(&self, at: usize) -> [u64; 4] {
        std::array::from_fn(|i| self.u64(at + 8 * i))
    }
}

/// Encodes a record's fields (`drr_payloadlen` = `payloadlen`) with the checksum area zero.
/// A BEGIN's `toname` is cut to 255 bytes (at a character boundary) so its NUL fits.
pub fn encode_record(rec: &Record, payloadlen: u32, big_endian: bool) -> [u8; RECORD_SIZE] {
    use off::*;
    let mut e = Enc { buf: [0; RECORD_SIZE], be: big_endian };
    e.u32(TYPE, rec.drr_type());
    e.u32(PAYLOADLEN, payloadlen);
    match rec {
        Record::Begin(b) => {
            e.u64(BEGIN_MAGIC, b.magic);
            e.u64(BEGIN_VERSIONINFO, b.versioninfo);
            e.u64(BEGIN_CREATION_TIME, b.creation_time);
            e.u32(BEGIN_TYPE, b.objset_type);
            e.u32(BEGIN_FLAGS, b.flags);
            e.u64(BEGIN_TOGUID, b.toguid);
            e.u64(BEGIN_FROMGUID, b.fromguid);
            let mut n = b.toname.len().min(MAXNAMELEN - 1);
            while !b.toname.is_char_boundary(n) {
                n -= 1;
            }
            e.bytes(BEGIN_TONAME, b.toname.as_bytes().get(..n).unwrap_or_default());
        }
        Record::Object(o) => {
            e.u64(OBJECT_OBJECT, o.object);
            e.u32(OBJECT_TYPE, o.object_type);
            e.u32(OBJECT_BONUSTYPE, o.bonustype);
            e.u32(OBJECT_BLKSZ, o.blksz);
            e.u32(OBJECT_BONUSLEN, o.bonuslen);
            e.u8(OBJECT_CHECKSUMTYPE, o.checksumtype);
            e.u8(OBJECT_COMPRESS, o.compress);
            e.u8(OBJECT_DN_SLOTS, o.dn_slots);
            e.u8(OBJECT_FLAGS, o.flags);
            e.u32(OBJECT_RAW_BONUSLEN, o.raw_bonuslen);
            e.u64(OBJECT_TOGUID, o.toguid);
            e.u8(OBJECT_INDBLKSHIFT, o.indblkshift);
            e.u8(OBJECT_NLEVELS, o.nlevels);
            e.u8(OBJECT_NBLKPTR, o.nblkptr);
            e.u64(OBJECT_MAXBLKID, o.maxblkid);
        }
        Record::FreeObjects(f) => {
            e.u64(FREEOBJECTS_FIRSTOBJ, f.firstobj);
            e.u64(FREEOBJECTS_NUMOBJS, f.numobjs);
            e.u64(FREEOBJECTS_TOGUID, f.toguid);
        }
        Record::Write(w) => {
            e.u64(WRITE_OBJECT, w.object);
            e.u32(WRITE_TYPE, w.object_type);
            e.u64(WRITE_OFFSET, w.offset);
            e.u64(WRITE_LOGICAL_SIZE, w.logical_size);
            e.u64(WRITE_TOGUID, w.toguid);
            e.u8(WRITE_CHECKSUMTYPE, w.checksumtype);
            e.u8(WRITE_FLAGS, w.flags);
            e.u8(WRITE_COMPRESSIONTYPE, w.compressiontype);
            e.cksum(WRITE_KEY_CKSUM, &w.key_cksum);
            e.u64(WRITE_KEY_PROP, w.key_prop);
            e.u64(WRITE_COMPRESSED_SIZE, w.compressed_size);
            e.bytes(WRITE_SALT, &w.salt);
            e.bytes(WRITE_IV, &w.iv);
            e.bytes(WRITE_MAC, &w.mac);
        }
        Record::Free(f) => {
            e.u64(FREE_OBJECT, f.object);
            e.u64(FREE_OFFSET, f.offset);
            e.u64(FREE_LENGTH, f.length);
            e.u64(FREE_TOGUID, f.toguid);
        }
        Record::End(x) => {
            e.cksum(END_CHECKSUM, &x.checksum);
            e.u64(END_TOGUID, x.toguid);
        }
        Record::WriteByref(w) => {
            e.u64(BYREF_OBJECT, w.object);
            e.u64(BYREF_OFFSET, w.offset);
            e.u64(BYREF_LENGTH, w.length);
            e.u64(BYREF_TOGUID, w.toguid);
            e.u64(BYREF_REFGUID, w.refguid);
            e.u64(BYREF_REFOBJECT, w.refobject);
            e.u64(BYREF_REFOFFSET, w.refoffset);
            e.u8(BYREF_CHECKSUMTYPE, w.checksumtype);
            e.u8(BYREF_FLAGS, w.flags);
            e.cksum(BYREF_KEY_CKSUM, &w.key_cksum);
            e.u64(BYREF_KEY_PROP, w.key_prop);
        }
        Record::Spill(s) => {
            e.u64(SPILL_OBJECT, s.object);
            e.u64(SPILL_LENGTH, s.length);
            e.u64(SPILL_TOGUID, s.toguid);
            e.u8(SPILL_FLAGS, s.flags);
            e.u8(SPILL_COMPRESSIONTYPE, s.compressiontype);
            e.u64(SPILL_COMPRESSED_SIZE, s.compressed_size);
            e.bytes(SPILL_SALT, &s.salt);
            e.bytes(SPILL_IV, &s.iv);
            e.bytes(SPILL_MAC, &s.mac);
            e.u32(SPILL_TYPE, s.object_type);
        }
        Record::WriteEmbedded(w) => {
            e.u64(EMBEDDED_OBJECT, w.object);
            e.u64(EMBEDDED_OFFSET, w.offset);
            e.u64(EMBEDDED_LENGTH, w.length);
            e.u64(EMBEDDED_TOGUID, w.toguid);
            e.u8(EMBEDDED_COMPRESSION, w.compression);
            e.u8(EMBEDDED_ETYPE, w.etype);
            e.u32(EMBEDDED_LSIZE, w.lsize);
            e.u32(EMBEDDED_PSIZE, w.psize);
        }
        Record::ObjectRange(r) => {
            e.u64(RANGE_FIRSTOBJ, r.firstobj);
            e.u64(RANGE_NUMSLOTS, r.numslots);
            e.u64(RANGE_TOGUID, r.toguid);
            e.bytes(RANGE_SALT, &r.salt);
            e.bytes(RANGE_IV, &r.iv);
            e.bytes(RANGE_MAC, &r.mac);
            e.u8(RANGE_FLAGS, r.flags);
        }
        Record::Redact(r) => {
            e.u64(REDACT_OBJECT, r.object);
            e.u64(REDACT_OFFSET, r.offset);
            e.u64(REDACT_LENGTH, r.length);
            e.u64(REDACT_TOGUID, r.toguid);
        }
    }
    e.buf
}

/// Decodes a record's fields in the given byte order; returns it with its `drr_payloadlen`.
/// Checks nothing but the type (checksums and magic are the reader's business).
pub fn decode_record(buf: &[u8; RECORD_SIZE], big_endian: bool) -> Result<(Record, u32), StreamError> {
    use off::*;
    let d = Dec { buf, be: big_endian };
    let ty = d.u32(TYPE);
    let payloadlen = d.u32(PAYLOADLEN);
    let rec = match ty {
        DRR_BEGIN => {
            let name = buf.get(BEGIN_TONAME..).unwrap_or_default();
            let name = name.split(|&c| c == 0).next().unwrap_or_default();
            Record::Begin(Begin {
                magic: d.u64(BEGIN_MAGIC),
                versioninfo: d.u64(BEGIN_VERSIONINFO),
                creation_time: d.u64(BEGIN_CREATION_TIME),
                objset_type: d.u32(BEGIN_TYPE),
                flags: d.u32(BEGIN_FLAGS),
                toguid: d.u64(BEGIN_TOGUID),
                fromguid: d.u64(BEGIN_FROMGUID),
                toname: String::from_utf8_lossy(name).into_owned(),
            })
        }
        DRR_OBJECT => Record::Object(Object {
            object: d.u64(OBJECT_OBJECT),
            object_type: d.u32(OBJECT_TYPE),
            bonustype: d.u32(OBJECT_BONUSTYPE),
            blksz: d.u32(OBJECT_BLKSZ),
            bonuslen: d.u32(OBJECT_BONUSLEN),
            checksumtype: d.u8(OBJECT_CHECKSUMTYPE),
            compress: d.u8(OBJECT_COMPRESS),
            dn_slots: d.u8(OBJECT_DN_SLOTS),
            flags: d.u8(OBJECT_FLAGS),
            raw_bonuslen: d.u32(OBJECT_RAW_BONUSLEN),
            toguid: d.u64(OBJECT_TOGUID),
            indblkshift: d.u8(OBJECT_INDBLKSHIFT),
            nlevels: d.u8(OBJECT_NLEVELS),
            nblkptr: d.u8(OBJECT_NBLKPTR),
            maxblkid: d.u64(OBJECT_MAXBLKID),
        }),
        DRR_FREEOBJECTS => Record::FreeObjects(FreeObjects {
            firstobj: d.u64(FREEOBJECTS_FIRSTOBJ),
            numobjs: d.u64(FREEOBJECTS_NUMOBJS),
            toguid: d.u64(FREEOBJECTS_TOGUID),
        }),
        DRR_WRITE => Record::Write(WriteRec {
            object: d.u64(WRITE_OBJECT),
            object_type: d.u32(WRITE_TYPE),
            offset: d.u64(WRITE_OFFSET),
            logical_size: d.u64(WRITE_LOGICAL_SIZE),
            toguid: d.u64(WRITE_TOGUID),
            checksumtype: d.u8(WRITE_CHECKSUMTYPE),
            flags: d.u8(WRITE_FLAGS),
            compressiontype: d.u8(WRITE_COMPRESSIONTYPE),
            key_cksum: d.cksum(WRITE_KEY_CKSUM),
            key_prop: d.u64(WRITE_KEY_PROP),
            compressed_size: d.u64(WRITE_COMPRESSED_SIZE),
            salt: d.arr(WRITE_SALT),
            iv: d.arr(WRITE_IV),
            mac: d.arr(WRITE_MAC),
        }),
        DRR_FREE => Record::Free(Free {
            object: d.u64(FREE_OBJECT),
            offset: d.u64(FREE_OFFSET),
            length: d.u64(FREE_LENGTH),
            toguid: d.u64(FREE_TOGUID),
        }),
        DRR_END => Record::End(End { checksum: d.cksum(END_CHECKSUM), toguid: d.u64(END_TOGUID) }),
        DRR_WRITE_BYREF => Record::WriteByref(WriteByref {
            object: d.u64(BYREF_OBJECT),
            offset: d.u64(BYREF_OFFSET),
            length: d.u64(BYREF_LENGTH),
            toguid: d.u64(BYREF_TOGUID),
            refguid: d.u64(BYREF_REFGUID),
            refobject: d.u64(BYREF_REFOBJECT),
            refoffset: d.u64(BYREF_REFOFFSET),
            checksumtype: d.u8(BYREF_CHECKSUMTYPE),
            flags: d.u8(BYREF_FLAGS),
            key_cksum: d.cksum(BYREF_KEY_CKSUM),
            key_prop: d.u64(BYREF_KEY_PROP),
        }),
        DRR_SPILL => Record::Spill(Spill {
            object: d.u64(SPILL_OBJECT),
            length: d.u64(SPILL_LENGTH),
            toguid: d.u64(SPILL_TOGUID),
            flags: d.u8(SPILL_FLAGS),
            compressiontype: d.u8(SPILL_COMPRESSIONTYPE),
            compressed_size: d.u64(SPILL_COMPRESSED_SIZE),
            salt: d.arr(SPILL_SALT),
            iv: d.arr(SPILL_IV),
            mac: d.arr(SPILL_MAC),
            object_type: d.u32(SPILL_TYPE),
        }),
        DRR_WRITE_EMBEDDED => Record::WriteEmbedded(WriteEmbedded {
            object: d.u64(EMBEDDED_OBJECT),
            offset: d.u64(EMBEDDED_OFFSET),
            length: d.u64(EMBEDDED_LENGTH),
            toguid: d.u64(EMBEDDED_TOGUID),
            compression: d.u8(EMBEDDED_COMPRESSION),
            etype: d.u8(EMBEDDED_ETYPE),
            lsize: d.u32(EMBEDDED_LSIZE),
            psize: d.u32(EMBEDDED_PSIZE),
        }),
        DRR_OBJECT_RANGE => Record::ObjectRange(ObjectRange {
            firstobj: d.u64(RANGE_FIRSTOBJ),
            numslots: d.u64(RANGE_NUMSLOTS),
            toguid: d.u64(RANGE_TOGUID),
            salt: d.arr(RANGE_SALT),
            iv: d.arr(RANGE_IV),
            mac: d.arr(RANGE_MAC),
            flags: d.u8(RANGE_FLAGS),
        }),
        DRR_REDACT => Record::Redact(Redact {
            object: d.u64(REDACT_OBJECT),
            offset: d.u64(REDACT_OFFSET),
            length: d.u64(REDACT_LENGTH),
            toguid: d.u64(REDACT_TOGUID),
        }),
        other => return Err(StreamError::Invalid(format!("unknown record type {other}"))),
    };
    Ok((rec, payloadlen))
}

/// Continues `state` over a payload followed by `pad` zero bytes, as one buffer (OpenZFS sums
/// each payload in one call, so only the very end may hold an ignored partial word).
fn sum_payload(state: [u64; 4], payload: &[u8], pad: usize, be: bool) -> [u64; 4] {
    let aligned = payload.len() - payload.len() % 4;
    let (body, rest) = payload.split_at(aligned);
    let state = fletcher4_incremental(state, body, be);
    if rest.is_empty() && pad == 0 {
        return state;
    }
    // rest < 4 bytes and pad < 8: the joined tail fits in 12 bytes.
    let mut tail = [0u8; 12];
    let n = (rest.len() + pad).min(tail.len());
    if let Some(dst) = tail.get_mut(..rest.len()) {
        dst.copy_from_slice(rest);
    }
    fletcher4_incremental(state, tail.get(..n).unwrap_or_default(), be)
}

/// Writes a send stream: encodes records, maintains the running fletcher-4 and fills in every
/// `drr_checksum` and the END checksum, like OpenZFS's `dump_record`.
pub struct StreamWriter<W: Write> {
    inner: W,
    cksum: [u64; 4],
    written: u64,
    big_endian: bool,
}

impl<W: Write> StreamWriter<W> {
    /// A little-endian stream (what OpenZFS on x86/ARM writes).
    pub fn new(inner: W) -> Self {
        Self::with_byte_order(inner, false)
    }

    /// A stream in the given byte order (big endian = what a SPARC/POWER BE host writes).
    pub fn with_byte_order(inner: W, big_endian: bool) -> Self {
        StreamWriter { inner, cksum: [0; 4], written: 0, big_endian }
    }

    /// Writes one record and its payload; `payload.len()` must be what the record announces
    /// ([`Record::payload_len`]; for BEGIN any length, `drr_payloadlen` is set from it after
    /// zero-padding to a multiple of 8, as OpenZFS pads packed nvlists). Fills in `drr_checksum`
    /// (all but BEGIN) and, for END, the end checksum (the caller's `End::checksum` is ignored).
    /// A BEGIN restarts the running checksum from zero, as every OpenZFS sender does, and so
    /// does the end of an END (a closing END written here thus gets an end checksum of zero, as
    /// libzfs writes it). A BEGIN must carry [`BACKUP_MAGIC`] and a name of at most 255 bytes
    /// without NUL.
    pub fn write(&mut self, rec: &Record, payload: &[u8]) -> io::Result<()> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        let len = u64::try_from(payload.len()).unwrap_or(u64::MAX);
        let (payloadlen, pad) = match rec {
            Record::Begin(b) => {
                if b.magic != BACKUP_MAGIC {
                    return Err(invalid(format!("BEGIN magic {:#x} is not DMU_BACKUP_MAGIC", b.magic)));
                }
                if b.toname.len() >= MAXNAMELEN || b.toname.contains('\0') {
                    return Err(invalid(format!("BEGIN toname {:?} does not fit drr_toname", b.toname)));
                }
                let padded = roundup8(len);
                let payloadlen = u32::try_from(padded)
                    .ok()
                    .filter(|_| padded <= MAX_BEGIN_PAYLOAD)
                    .ok_or_else(|| invalid(format!("BEGIN payload of {len} bytes is too large")))?;
                // padded - len < 8.
                (payloadlen, usize::try_from(padded - len).unwrap_or(0))
            }
            other => {
                let want = other.announced_payload();
                if want != len {
                    return Err(invalid(format!(
                        "DRR_{} record announces a {want}-byte payload but {len} bytes were given",
                        other.kind()
                    )));
                }
                if want > MAX_PAYLOAD {
                    return Err(invalid(format!(
                        "DRR_{} payload of {want} bytes is too large",
                        other.kind()
                    )));
                }
                (0, 0)
            }
        };
        let be = self.big_endian;
        let is_begin = matches!(rec, Record::Begin(_));
        if is_begin {
            self.cksum = [0; 4];
        }
        let mut e = Enc { buf: encode_record(rec, payloadlen, be), be };
        if matches!(rec, Record::End(_)) {
            e.cksum(off::END_CHECKSUM, &self.cksum);
        }
        let (head, _) = e.buf.split_at(CHECKSUM_OFFSET);
        self.cksum = fletcher4_incremental(self.cksum, head, be);
        if !is_begin {
            let sum = self.cksum;
            e.cksum(CHECKSUM_OFFSET, &sum);
        }
        let (_, tail) = e.buf.split_at(CHECKSUM_OFFSET);
        self.cksum = fletcher4_incremental(self.cksum, tail, be);
        self.inner.write_all(&e.buf)?;
        self.inner.write_all(payload)?;
        self.inner.write_all(&[0u8; 8][..pad.min(8)])?;
        self.cksum = sum_payload(self.cksum, payload, pad, be);
        if matches!(rec, Record::End(_)) {
            self.cksum = [0; 4];
        }
        self.written =
            self.written.saturating_add(RECORD_SIZE as u64).saturating_add(len.saturating_add(pad as u64));
        Ok(())
    }

    /// Writes a record and payload exactly as given (nothing filled in, no reset), continuing
    /// the running checksum over them. For what libzfs writes without `dump_record`, such as
    /// the all-zero END that closes a compound stream, and for building damaged test streams.
    pub fn write_raw(&mut self, record: &[u8; RECORD_SIZE], payload: &[u8]) -> io::Result<()> {
        self.inner.write_all(record)?;
        self.inner.write_all(payload)?;
        self.cksum = fletcher4_incremental(self.cksum, record, self.big_endian);
        self.cksum = sum_payload(self.cksum, payload, 0, self.big_endian);
        let len = u64::try_from(payload.len()).unwrap_or(u64::MAX);
        self.written = self.written.saturating_add(RECORD_SIZE as u64).saturating_add(len);
        Ok(())
    }

    /// Restarts the running checksum from zero. [`StreamWriter::write`] already does this at
    /// every BEGIN and after every END (each substream of a compound stream, and the compound
    /// header itself, is summed from zero by OpenZFS), so this is only needed with
    /// [`StreamWriter::write_raw`].
    pub fn reset_checksum(&mut self) {
        self.cksum = [0; 4];
    }

    /// The running fletcher-4 over everything written since the last BEGIN/reset.
    pub fn checksum(&self) -> [u64; 4] {
        self.cksum
    }

    /// Bytes written so far (records, payloads and padding).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Whether integers are written big endian.
    pub fn big_endian(&self) -> bool {
        self.big_endian
    }

    pub fn into_inner(self) -> W {
        self.inner
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }
}

/// Buffer size of the reader: large reads keep multi-GiB streams cheap.
const READ_BUFFER: usize = 256 << 10;
/// Most a payload buffer is allocated up front; longer payloads grow as their bytes arrive,
/// so a lying length on a short input costs no more than the input itself.
const PAYLOAD_PREALLOC: u64 = 1 << 20;

/// Reads a send stream record by record, verifying the running checksum.
///
/// A record's payload is covered by the checksum in the *next* record's header (each header
/// sums every byte of the substream before its checksum field), so a record is handed out
/// only once the header after it has been read and verified: a receive never applies a
/// payload whose damage would show one record later (OpenZFS's receive reads ahead the same
/// way). The exception is END, which has no payload and after which nothing is read: the
/// next stream on the same input (successive receives from one pipe) stays unread.
pub struct StreamReader<R: Read> {
    inner: BufReader<R>,
    cksum: [u64; 4],
    /// Bytes read from the input, including a header read ahead.
    read_pos: u64,
    /// Where the last record handed out (with its payload) ends.
    consumed: u64,
    /// The header after the last record handed out, already verified: (bytes, its offset).
    ahead: Option<([u8; RECORD_SIZE], u64)>,
    big_endian: bool,
    seen_begin: bool,
}

impl<R: Read> StreamReader<R> {
    pub fn new(inner: R) -> Self {
        StreamReader {
            inner: BufReader::with_capacity(READ_BUFFER, inner),
            cksum: [0; 4],
            read_pos: 0,
            consumed: 0,
            ahead: None,
            big_endian: false,
            seen_begin: false,
        }
    }

    /// Bytes of the records handed out so far (a header read ahead is not counted).
    pub fn offset(&self) -> u64 {
        self.consumed
    }

    /// The stream's byte order (known once the first BEGIN has been read).
    pub fn big_endian(&self) -> bool {
        self.big_endian
    }

    /// Fills `buf` as far as the input allows; returns how many bytes were read.
    fn read_full(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        while let Some(rest) = buf.get_mut(got..).filter(|r| !r.is_empty()) {
            match self.inner.read(rest) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.read_pos = self.read_pos.saturating_add(got as u64);
        Ok(got)
    }

    /// The next record and its payload; `Ok(None)` when the input ends exactly at a record
    /// boundary. Verifies `drr_checksum` (all but BEGIN) and an END's end checksum against the
    /// running sum, each unless all zero. The byte order comes from the first BEGIN's magic and
    /// holds for the whole stream; the running sum restarts at every BEGIN and after every END.
    // Not `Iterator::next`: errors are not items, and reading stops at the first one.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<(Record, Vec<u8>)>, StreamError> {
        let (hdr, start) = match self.ahead.take() {
            Some(h) => h,
            None => match self.read_header()? {
                Some(h) => h,
                None => return Ok(None),
            },
        };
        let d = Dec { buf: &hdr, be: self.big_endian };
        let ty = d.u32(off::TYPE);
        let name = type_name(ty).unwrap_or("?");
        let (rec, payloadlen) = decode_record(&hdr, self.big_endian)?;
        let (len, cap) = match &rec {
            Record::Begin(_) => (u64::from(payloadlen), MAX_BEGIN_PAYLOAD),
            other => (other.announced_payload(), MAX_PAYLOAD),
        };
        if len > cap {
            return Err(StreamError::Invalid(format!(
                "the DRR_{name} record at byte {start} announces a payload of {len} bytes (limit {cap})"
            )));
        }
        let payload = self.read_payload(len, name)?;
        if ty == DRR_END {
            self.cksum = [0; 4];
        } else {
            // The payload is trusted only once the next header's checksum agrees.
            self.ahead = self.read_header()?;
        }
        self.consumed = self.ahead.as_ref().map_or(self.read_pos, |(_, at)| *at);
        Ok(Some((rec, payload)))
    }

    /// Reads one record header and checks it against the running sum (see [`Self::next`]);
    /// `Ok(None)` when the input ends before it. Returns the header and its offset.
    fn read_header(&mut self) -> Result<Option<([u8; RECORD_SIZE], u64)>, StreamError> {
        let start = self.read_pos;
        let mut hdr = [0u8; RECORD_SIZE];
        let got = self.read_full(&mut hdr[..])?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_SIZE {
            return Err(StreamError::Truncated { offset: start, what: "a record".into() });
        }
        if !self.seen_begin {
            self.big_endian = detect_byte_order(&hdr)?;
            self.seen_begin = true;
        }
        let be = self.big_endian;
        let d = Dec { buf: &hdr, be };
        let ty = d.u32(off::TYPE);
        let Some(name) = type_name(ty) else {
            return Err(StreamError::Invalid(format!("unknown record type {ty} at byte {start}")));
        };
        if ty == DRR_BEGIN {
            let magic = d.u64(off::BEGIN_MAGIC);
            if magic != BACKUP_MAGIC {
                return Err(StreamError::Invalid(format!(
                    "the BEGIN record at byte {start} has magic {magic:#x} in the stream's byte order"
                )));
            }
            self.cksum = [0; 4];
        }
        let before = self.cksum;
        let (head, tail) = hdr.split_at(CHECKSUM_OFFSET);
        let sum = fletcher4_incremental(before, head, be);
        let mismatch = |stored: [u64; 4], want: [u64; 4]| stored != [0; 4] && stored != want;
        if ty != DRR_BEGIN && mismatch(d.cksum(CHECKSUM_OFFSET), sum) {
            return Err(StreamError::Checksum { offset: start, record: name });
        }
        if ty == DRR_END && mismatch(d.cksum(off::END_CHECKSUM), before) {
            return Err(StreamError::Checksum { offset: start, record: name });
        }
        self.cksum = fletcher4_incremental(sum, tail, be);
        Ok(Some((hdr, start)))
    }

    /// Reads a payload of `len` (≤ the caps) bytes and continues the running sum over it.
    fn read_payload(&mut self, len: u64, name: &'static str) -> Result<Vec<u8>, StreamError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let start = self.read_pos;
        let mut buf = Vec::with_capacity(usize::try_from(len.min(PAYLOAD_PREALLOC)).unwrap_or(0));
        let got = (&mut self.inner).take(len).read_to_end(&mut buf)?;
        self.read_pos = self.read_pos.saturating_add(got as u64);
        if (got as u64) < len {
            return Err(StreamError::Truncated {
                offset: start,
                what: format!("the {len}-byte payload of a DRR_{name} record"),
            });
        }
        self.cksum = sum_payload(self.cksum, &buf, 0, self.big_endian);
        Ok(buf)
    }
}

/// The byte order of a stream from its first record, which must be a BEGIN with the magic.
fn detect_byte_order(hdr: &[u8; RECORD_SIZE]) -> Result<bool, StreamError> {
    for be in [false, true] {
        let d = Dec { buf: hdr, be };
        if d.u32(off::TYPE) == DRR_BEGIN && d.u64(off::BEGIN_MAGIC) == BACKUP_MAGIC {
            return Ok(be);
        }
    }
    Err(StreamError::BadMagic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use codec::checksum::{fletcher4, Cksum};
    use proptest::prelude::*;

    fn begin(name: &str, hdrtype: u64, features: u64) -> Begin {
        Begin {
            magic: BACKUP_MAGIC,
            versioninfo: versioninfo(hdrtype, features),
            creation_time: 0x5e94_91b0,
            objset_type: 2,
            flags: DRR_FLAG_FREERECORDS,
            toguid: 0x1234_5678_9abc_def0,
            fromguid: 0,
            toname: name.into(),
        }
    }

    /// One record of every type with distinct, non-zero field values.
    fn samples() -> Vec<Record> {
        vec![
            Record::Begin(begin("pool/fs@snap", HDRTYPE_SUBSTREAM, FEATURE_LARGE_BLOCKS | FEATURE_LZ4)),
            Record::Object(Object {
                object: 5,
                object_type: 19,
                bonustype: 44,
                blksz: 131_072,
                bonuslen: 13,
                checksumtype: 7,
                compress: 15,
                dn_slots: 1,
                flags: DRR_OBJECT_SPILL,
                raw_bonuslen: 0,
                toguid: 0x1234,
                indblkshift: 17,
                nlevels: 2,
                nblkptr: 3,
                maxblkid: 0x0102_0304_0506,
            }),
            Record::FreeObjects(FreeObjects { firstobj: 6, numobjs: 26, toguid: 0x1234 }),
            Record::Write(WriteRec {
                object: 5,
                object_type: 19,
                offset: 131_072,
                logical_size: 4096,
                toguid: 0x1234,
                checksumtype: 7,
                flags: DRR_CHECKSUM_DEDUP,
                compressiontype: 15,
                key_cksum: [1, 2, 3, 4],
                key_prop: 0x8000_0000_1f00_0007,
                compressed_size: 512,
                salt: [1; 8],
                iv: [2; 12],
                mac: [3; 16],
            }),
            Record::Free(Free { object: 5, offset: 4096, length: OBJECT_END, toguid: 0x1234 }),
            Record::End(End { checksum: [9, 8, 7, 6], toguid: 0x1234 }),
            Record::WriteByref(WriteByref {
                object: 7,
                offset: 8192,
                length: 4096,
                toguid: 0x1234,
                refguid: 0x5678,
                refobject: 5,
                refoffset: 0,
                checksumtype: 8,
                flags: 1,
                key_cksum: [11, 12, 13, 14],
                key_prop: 99,
            }),
            Record::Spill(Spill {
                object: 5,
                length: 512,
                toguid: 0x1234,
                flags: DRR_SPILL_UNMODIFIED,
                compressiontype: 0,
                compressed_size: 0,
                salt: [4; 8],
                iv: [5; 12],
                mac: [6; 16],
                object_type: 45,
            }),
            Record::WriteEmbedded(WriteEmbedded {
                object: 8,
                offset: 0,
                length: 512,
                toguid: 0x1234,
                compression: 15,
                etype: 0,
                lsize: 512,
                psize: 37,
            }),
            Record::ObjectRange(ObjectRange {
                firstobj: 32,
                numslots: 32,
                toguid: 0x1234,
                salt: [7; 8],
                iv: [8; 12],
                mac: [9; 16],
                flags: DRR_RAW_BYTESWAP,
            }),
            Record::Redact(Redact { object: 9, offset: 0, length: 1 << 20, toguid: 0x1234 }),
        ]
    }

    fn payload_for(rec: &Record) -> Vec<u8> {
        let n = match rec {
            Record::Begin(_) => 24,
            other => other.payload_len(),
        };
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn every_record_round_trips() {
        for be in [false, true] {
            for rec in samples() {
                let buf = encode_record(&rec, 40, be);
                assert_eq!(buf[CHECKSUM_OFFSET..], [0; 32], "{} checksum area", rec.kind());
                let (back, plen) = decode_record(&buf, be).unwrap();
                assert_eq!(back, rec, "be {be}");
                assert_eq!(plen, 40);
            }
        }
        let names: Vec<&str> = samples().iter().map(Record::kind).collect();
        assert_eq!(
            names,
            [
                "BEGIN",
                "OBJECT",
                "FREEOBJECTS",
                "WRITE",
                "FREE",
                "END",
                "WRITE_BYREF",
                "SPILL",
                "WRITE_EMBEDDED",
                "OBJECT_RANGE",
                "REDACT"
            ]
        );
    }

    fn le64(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }
    fn le32(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn known_offsets() {
        // Hand-computed from zfs_ioctl.h with C alignment; the union starts at byte 8.
        let s = samples();
        let b = encode_record(&s[0], 0, false);
        assert_eq!(le64(&b, 8), BACKUP_MAGIC);
        assert_eq!(le32(&b, 32), 2);
        assert_eq!(le64(&b, 40), 0x1234_5678_9abc_def0);
        assert_eq!(&b[56..68], b"pool/fs@snap");
        let b = encode_record(&s[1], 0, false);
        assert_eq!((le32(&b, 28), le32(&b, 36)), (13, 0)); // bonuslen, raw_bonuslen
        assert_eq!((le32(&b, 16), le32(&b, 20), le32(&b, 24)), (19, 44, 131_072));
        assert_eq!(b[34], 1); // dn_slots
        assert_eq!(b[50], 3); // nblkptr
        assert_eq!(le64(&b, 56), 0x0102_0304_0506); // maxblkid
        let b = encode_record(&s[3], 0, false);
        assert_eq!(le64(&b, 24), 131_072); // offset, after type u32 + pad u32
        assert_eq!(b[50], 15); // compressiontype
        assert_eq!(le64(&b, 56), 1); // ddk_cksum word 0
        assert_eq!(le64(&b, 88), 0x8000_0000_1f00_0007); // ddk_prop
        assert_eq!(le64(&b, 96), 512); // compressed_size
        assert_eq!((b[104], b[112], b[124], b[139], b[140]), (1, 2, 3, 3, 0)); // salt, iv, mac
        let b = encode_record(&s[5], 0, false);
        assert_eq!((le64(&b, 8), le64(&b, 32), le64(&b, 40)), (9, 6, 0x1234));
        let b = encode_record(&s[6], 0, false);
        assert_eq!((b[64], b[65], le64(&b, 72), le64(&b, 104)), (8, 1, 11, 99));
        let b = encode_record(&s[7], 0, false);
        assert_eq!((b[32], le64(&b, 40), b[48], b[56], b[68], le32(&b, 84)), (4, 0, 4, 5, 6, 45));
        let b = encode_record(&s[8], 0, false);
        assert_eq!((b[40], le32(&b, 48), le32(&b, 52)), (15, 512, 37));
        let b = encode_record(&s[9], 0, false);
        assert_eq!((b[32], b[40], b[52], b[67], b[68]), (7, 8, 9, 9, DRR_RAW_BYTESWAP));
        // Big endian puts the magic's high bytes first.
        let b = encode_record(&s[0], 0, true);
        assert_eq!(b[8..16], [0, 0, 0, 2, 0xf5, 0xba, 0xcb, 0xac]);
        assert_eq!(b[0..4], [0, 0, 0, 0]);
    }

    #[test]
    fn payload_lengths() {
        let s = samples();
        let lens: Vec<usize> = s.iter().map(Record::payload_len).collect();
        // OBJECT: bonuslen 13 -> 16; WRITE: compressed 512; SPILL: length 512; EMBEDDED: 37 -> 40.
        assert_eq!(lens, [0, 16, 0, 512, 0, 0, 0, 512, 40, 0, 0]);
        let raw = Record::Object(Object { bonuslen: 13, raw_bonuslen: 320, ..Default::default() });
        assert_eq!(raw.payload_len(), 320);
        let plain = Record::Write(WriteRec { logical_size: 8192, compressed_size: 7, ..Default::default() });
        assert_eq!(plain.payload_len(), 8192);
        let sp = Record::Spill(Spill { length: 512, compressed_size: 100, ..Default::default() });
        assert_eq!(sp.payload_len(), 100);
        let big = Record::Object(Object { bonuslen: u32::MAX, ..Default::default() });
        assert_eq!(big.payload_len() as u64, (u64::from(u32::MAX) + 7) & !7);
    }

    #[test]
    fn versioninfo_fields() {
        let b = begin("x", HDRTYPE_COMPOUNDSTREAM, FEATURE_RAW | FEATURE_LARGE_MICROZAP);
        assert_eq!(b.hdrtype(), HDRTYPE_COMPOUNDSTREAM);
        assert_eq!(b.features(), FEATURE_RAW | FEATURE_LARGE_MICROZAP);
        assert_eq!(b.versioninfo, 2 | ((1 << 24 | 1 << 29) << 2));
        assert_eq!(SUPPORTED_FEATURES & (FEATURE_DEDUP | FEATURE_DEDUPPROPS), 0);
        assert_eq!(SUPPORTED_FEATURES, 0x3ffb_0004);
    }

    /// A stream with every record type, plus where each record starts.
    fn sample_stream(be: bool) -> (Vec<u8>, Vec<u64>, Vec<Record>) {
        let mut w = StreamWriter::with_byte_order(Vec::new(), be);
        let mut starts = Vec::new();
        let mut recs = Vec::new();
        for rec in samples().into_iter().filter(|r| !matches!(r, Record::End(_))) {
            starts.push(w.bytes_written());
            w.write(&rec, &payload_for(&rec)).unwrap();
            recs.push(rec);
        }
        starts.push(w.bytes_written());
        let end = Record::End(End { checksum: [0; 4], toguid: 0x1234 });
        w.write(&end, &[]).unwrap();
        recs.push(end);
        starts.push(w.bytes_written());
        let out = w.into_inner();
        assert_eq!(*starts.last().unwrap(), out.len() as u64);
        (out, starts, recs)
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<(Record, Vec<u8>)>, StreamError> {
        let mut r = StreamReader::new(bytes);
        let mut out = Vec::new();
        while let Some(x) = r.next()? {
            out.push(x);
        }
        assert_eq!(r.offset(), bytes.len() as u64);
        Ok(out)
    }

    #[test]
    fn written_stream_reads_back_and_checksums_are_fletcher4_of_the_prefix() {
        for be in [false, true] {
            let (bytes, starts, recs) = sample_stream(be);
            let got = read_all(&bytes).unwrap();
            assert_eq!(got.len(), recs.len());
            for ((rec, payload), want) in got.iter().zip(&recs) {
                match (rec, want) {
                    (Record::End(e), Record::End(_)) => assert_ne!(e.checksum, [0; 4]),
                    (Record::Begin(b), Record::Begin(w)) => {
                        assert_eq!(b, w);
                        // 24-byte payload: padded length announced, padding zero.
                        assert_eq!(payload.len(), 24);
                    }
                    _ => assert_eq!(rec, want),
                }
                if !matches!(rec, Record::Begin(_)) {
                    assert_eq!(payload, &payload_for(rec));
                }
            }
            // Independent check with the one-shot fletcher4: each stored checksum is the sum of
            // the stream from its start up to that field; END's is the sum before the END.
            for (i, &s) in starts[..starts.len() - 1].iter().enumerate() {
                let s = s as usize;
                let stored = Cksum::from_bytes(bytes[s + 280..s + 312].try_into().unwrap(), be);
                if i == 0 {
                    continue; // BEGIN: bytes 280.. are name bytes
                }
                assert_eq!(stored, fletcher4(&bytes[..s + 280], be), "record {i}");
            }
            let end = starts[starts.len() - 2] as usize;
            let stored = Cksum::from_bytes(bytes[end + 8..end + 40].try_into().unwrap(), be);
            assert_eq!(stored, fletcher4(&bytes[..end], be));
            let mut r = StreamReader::new(&bytes[..]);
            r.next().unwrap();
            assert_eq!(r.big_endian(), be);
        }
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let (bytes, _, _) = sample_stream(false);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x5a;
            assert!(read_all_lenient(&bad).is_err(), "flip at byte {i} went unnoticed");
        }
    }

    /// Reads to the end or the first error (no offset assertion).
    fn read_all_lenient(bytes: &[u8]) -> Result<usize, StreamError> {
        let mut r = StreamReader::new(bytes);
        let mut n = 0;
        while r.next()?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    #[test]
    fn truncation_anywhere_is_reported() {
        let (bytes, starts, _) = sample_stream(true);
        for cut in 0..bytes.len() {
            let res = read_all_lenient(&bytes[..cut]);
            if starts.contains(&(cut as u64)) {
                let n = res.unwrap_or_else(|e| panic!("cut at boundary {cut}: {e}"));
                assert_eq!(starts.iter().position(|&s| s == cut as u64), Some(n));
            } else {
                match res {
                    Err(StreamError::Truncated { offset, .. }) => assert!(offset <= cut as u64),
                    other => panic!("cut {cut}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn hand_built_big_endian_stream() {
        // Built without StreamWriter: fields encoded BE, checksums = one-shot BE fletcher4.
        let mut s = encode_record(&Record::Begin(begin("tank/v@1", 1, 0)), 0, true).to_vec();
        let free = Record::Free(Free { object: 3, offset: 0, length: OBJECT_END, toguid: 7 });
        let mut rec = encode_record(&free, 0, true);
        let at = s.len();
        s.extend_from_slice(&rec);
        rec[280..].copy_from_slice(&fletcher4(&s[..at + 280], true).to_bytes(true));
        s[at..].copy_from_slice(&rec);
        let before_end = s.len();
        let mut end = encode_record(&Record::End(End { checksum: [0; 4], toguid: 7 }), 0, true);
        end[8..40].copy_from_slice(&fletcher4(&s, true).to_bytes(true));
        s.extend_from_slice(&end);
        let ck = fletcher4(&s[..before_end + 280], true).to_bytes(true);
        s[before_end + 280..].copy_from_slice(&ck);

        let mut r = StreamReader::new(&s[..]);
        let (b, _) = r.next().unwrap().unwrap();
        assert!(r.big_endian());
        assert_eq!(b, Record::Begin(begin("tank/v@1", 1, 0)));
        assert_eq!(r.next().unwrap().unwrap().0, free);
        assert!(matches!(r.next().unwrap().unwrap().0, Record::End(End { toguid: 7, .. })));
        assert!(r.next().unwrap().is_none());
        // The writer produces the same bytes.
        let mut w = StreamWriter::with_byte_order(Vec::new(), true);
        w.write(&Record::Begin(begin("tank/v@1", 1, 0)), &[]).unwrap();
        w.write(&free, &[]).unwrap();
        w.write(&Record::End(End { checksum: [0; 4], toguid: 7 }), &[]).unwrap();
        assert_eq!(w.into_inner(), s);
    }

    #[test]
    fn compound_stream_with_zero_checksum_ends() {
        // libzfs layout: header BEGIN (hdrtype 2, nvlist payload), its END, substreams, and a
        // final END written as all zeros; each BEGIN restarts the sum, and so does each END.
        let mut w = StreamWriter::new(Vec::new());
        w.write(&Record::Begin(begin("p/fs@s", HDRTYPE_COMPOUNDSTREAM, 0)), &[1; 1028]).unwrap();
        w.write(&Record::End(End::default()), &[]).unwrap();
        for guid in [1, 2] {
            let mut b = begin("p/fs@s", HDRTYPE_SUBSTREAM, 0);
            b.toguid = guid;
            w.write(&Record::Begin(b), &[]).unwrap();
            w.write(&Record::FreeObjects(FreeObjects { firstobj: 0, numobjs: 5, toguid: guid }), &[])
                .unwrap();
            w.write(&Record::End(End { checksum: [0; 4], toguid: guid }), &[]).unwrap();
        }
        w.write_raw(&encode_record(&Record::End(End::default()), 0, false), &[]).unwrap();
        let bytes = w.into_inner();
        let got = read_all(&bytes).unwrap();
        assert_eq!(got.len(), 9);
        // 1028 bytes padded to 1032.
        assert_eq!(got[0].1.len(), 1032);
        assert_eq!(got[8].0, Record::End(End::default()));

        // The closing END written with write(): the sum restarted after the previous END, so its
        // end checksum is zero (as libzfs writes it) and its record checksum covers only itself.
        let mut w = StreamWriter::new(bytes[..bytes.len() - RECORD_SIZE].to_vec());
        w.write(&Record::End(End::default()), &[]).unwrap();
        let again = w.into_inner();
        let last = &again[again.len() - RECORD_SIZE..];
        assert_eq!(last[8..40], [0; 32]);
        assert_eq!(Cksum::from_bytes(last[280..].try_into().unwrap(), false), fletcher4(&last[..280], false));
        assert_eq!(read_all(&again).unwrap().len(), 9);
    }

    #[test]
    fn unpadded_begin_payload_and_zero_checksums_are_accepted() {
        // A raw-send BEGIN with a 1028-byte payload (not a multiple of 8), then records whose
        // drr_checksum is zero (old senders): all read, nothing checked.
        let mut w = StreamWriter::new(Vec::new());
        let rec = encode_record(&Record::Begin(begin("a/b@c", 1, FEATURE_RAW)), 1028, false);
        w.write_raw(&rec, &[0xab; 1028]).unwrap();
        let free = Record::Free(Free { object: 1, offset: 0, length: 10, toguid: 0 });
        w.write_raw(&encode_record(&free, 0, false), &[]).unwrap();
        w.write_raw(&encode_record(&Record::End(End::default()), 0, false), &[]).unwrap();
        let got = read_all(&w.into_inner()).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].1.len(), 1028);
        assert_eq!(got[1].0, free);
    }

    #[test]
    fn bad_input_errors() {
        assert!(read_all(&[]).unwrap().is_empty());
        assert!(matches!(read_all_lenient(&[0u8; 312]), Err(StreamError::BadMagic)));
        assert!(matches!(read_all_lenient(&[0u8; 100]), Err(StreamError::Truncated { offset: 0, .. })));
        // A FREE first is not a stream.
        let free = encode_record(&Record::Free(Free::default()), 0, false);
        assert!(matches!(read_all_lenient(&free), Err(StreamError::BadMagic)));

        // Oversized payloads are refused before any allocation.
        let mut w = StreamWriter::new(Vec::new());
        w.write(&Record::Begin(begin("a@b", 1, 0)), &[]).unwrap();
        let big = Record::Write(WriteRec { logical_size: 32 << 20, ..Default::default() });
        w.write_raw(&encode_record(&big, 0, false), &[]).unwrap();
        let e = read_all_lenient(&w.into_inner()).unwrap_err();
        assert!(matches!(&e, StreamError::Invalid(m) if m.contains("DRR_WRITE record at byte 312")), "{e}");
        let mut w = StreamWriter::new(Vec::new());
        w.write_raw(&encode_record(&Record::Begin(begin("a@b", 1, 0)), 100 << 20, false), &[]).unwrap();
        assert!(matches!(read_all_lenient(&w.into_inner()), Err(StreamError::Invalid(_))));

        // Unknown record type after a BEGIN.
        let mut s = encode_record(&Record::Begin(begin("a@b", 1, 0)), 0, false).to_vec();
        let mut junk = [0u8; RECORD_SIZE];
        junk[0] = 11;
        s.extend_from_slice(&junk);
        let e = read_all_lenient(&s).unwrap_err();
        assert!(e.to_string().contains("unknown record type 11 at byte 312"), "{e}");

        // A second BEGIN in the other byte order.
        let mut s = encode_record(&Record::Begin(begin("a@b", 1, 0)), 0, false).to_vec();
        s.extend_from_slice(&encode_record(&Record::Begin(begin("a@b", 1, 0)), 0, true));
        assert!(matches!(read_all_lenient(&s), Err(StreamError::Invalid(_))));
    }

    #[test]
    fn writer_rejects_inconsistent_records() {
        let mut w = StreamWriter::new(Vec::new());
        assert!(w.write(&Record::Begin(Begin::default()), &[]).is_err()); // no magic
        let long = begin(&"x".repeat(256), 1, 0);
        assert!(w.write(&Record::Begin(long), &[]).is_err());
        let wr = Record::Write(WriteRec { logical_size: 4096, ..Default::default() });
        assert!(w.write(&wr, &[0; 100]).is_err());
        assert_eq!(w.bytes_written(), 0);
        // A 255-byte name fills drr_toname up to its NUL, into the checksum area's bytes.
        let name = "n".repeat(255);
        w.write(&Record::Begin(begin(&name, 1, 0)), &[]).unwrap();
        w.write(&Record::End(End::default()), &[]).unwrap();
        let bytes = w.into_inner();
        assert_eq!(bytes[310], b'n');
        assert_eq!(bytes[311], 0);
        let got = read_all(&bytes).unwrap();
        assert!(matches!(&got[0].0, Record::Begin(b) if b.toname == name));
    }

    #[test]
    fn toname_is_cut_at_a_char_boundary() {
        let name = "é".repeat(200); // 400 bytes
        let buf = encode_record(&Record::Begin(begin(&name, 1, 0)), 0, false);
        let (rec, _) = decode_record(&buf, false).unwrap();
        assert!(matches!(rec, Record::Begin(b) if b.toname == "é".repeat(127)));
    }

    /// Writes the fuzz seeds for `fuzz/corpus/send_stream/`:
    /// `cargo test -p rzfs-send --lib -- --ignored write_fuzz_seeds`.
    #[test]
    #[ignore]
    fn write_fuzz_seeds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/send_stream");
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = StreamWriter::new(Vec::new());
        w.write(&Record::Begin(begin("pool/fs@snap", 1, 0)), &[]).unwrap();
        w.write(&Record::End(End::default()), &[]).unwrap();
        std::fs::write(dir.join("begin-end-le"), w.into_inner()).unwrap();
        std::fs::write(dir.join("all-records-be"), sample_stream(true).0).unwrap();
        let mut w = StreamWriter::new(Vec::new());
        w.write(&Record::Begin(begin("p/fs@s", HDRTYPE_COMPOUNDSTREAM, 0)), &[7; 60]).unwrap();
        w.write(&Record::End(End::default()), &[]).unwrap();
        w.write(&Record::Begin(begin("p/fs@s", 1, FEATURE_EMBED_DATA)), &[]).unwrap();
        let emb = Record::WriteEmbedded(WriteEmbedded {
            object: 2,
            length: 512,
            lsize: 512,
            psize: 12,
            ..Default::default()
        });
        w.write(&emb, &[5; 16]).unwrap();
        w.write(&Record::End(End::default()), &[]).unwrap();
        w.write_raw(&encode_record(&Record::End(End::default()), 0, false), &[]).unwrap();
        std::fs::write(dir.join("compound-le"), w.into_inner()).unwrap();
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = read_all_lenient(&data);
        }

        /// Past the magic check: a valid BEGIN, then records of arbitrary fields whose checksum
        /// areas are zero (unchecked), each followed by arbitrary bytes.
        #[test]
        fn arbitrary_records_never_panic(
            be in any::<bool>(),
            recs in proptest::collection::vec(
                (0u32..13, proptest::collection::vec(any::<u8>(), 272), proptest::collection::vec(any::<u8>(), 0..64)),
                0..8,
            ),
        ) {
            let mut s = encode_record(&Record::Begin(begin("a@b", 1, 0)), 0, be).to_vec();
            for (ty, fields, tail) in recs {
                let mut rec = [0u8; RECORD_SIZE];
                rec[..4].copy_from_slice(&if be { ty.to_be_bytes() } else { ty.to_le_bytes() });
                rec[8..280].copy_from_slice(&fields);
                s.extend_from_slice(&rec);
                s.extend_from_slice(&tail);
            }
            let _ = read_all_lenient(&s);
        }

        #[test]
        fn mutated_stream_never_panics(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let (mut s, _, _) = sample_stream(false);
            let n = s.len();
            for (i, x) in flips {
                s[i % n] ^= x;
            }
            let _ = read_all_lenient(&s);
        }
    }
}
