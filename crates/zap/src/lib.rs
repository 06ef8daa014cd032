//! # zap — ZFS Attribute Processor objects over the DMU (read side)
//!
//! A ZAP object is a name → value map stored in an object's data blocks (OpenZFS
//! `module/zfs/zap.c`, `zap_micro.c`, `zap_leaf.c`):
//! - **micro ZAP**: one block of 64-byte entries (name ≤ 49 bytes, one u64 value each);
//! - **fat ZAP**: block 0 is a header with a pointer table (embedded in the second half of
//!   block 0, or external blocks); the table maps the top bits of a name's 64-bit hash to a
//!   leaf block; each leaf chains entries by hash and stores names and values in 24-byte
//!   array chunks (values as big-endian integers of 1, 2, 4 or 8 bytes).
//!
//! Lookups go straight to the leaf named by the hash; ZAPs with name normalization
//! (case-insensitive or Unicode-normalized ZPL directories) fall back to a scan that compares
//! names exactly — correct, only slower, and documented as such.
//! Listing follows the pointer table (`ondisk::zap::fat_zap_entries`): every distinct leaf
//! it names is read once (a block repeated under two block ids is corruption), and the walk
//! stops at the header's entry count, so a crafted `maxblkid` or table cannot make a listing
//! read or hold more than the leaves really stored.
#![forbid(unsafe_code)]

pub mod write;

use dmu::{Dnode, Objset};
use ondisk::zap::{self as z, FatZapHeader, MicroZap, ZapBlockKind};
use ondisk::ByteOrder;

/// Errors of the ZAP layer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ZapError {
    #[error(transparent)]
    Dmu(#[from] dmu::DmuError),
    #[error("corrupt ZAP object {obj}: {detail}")]
    Corrupt { obj: u64, detail: String },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ZapError>;

/// `MZAP_MAX_BLKSZ`: a micro ZAP is one block of at most 128 KiB.
const MZAP_MAX_BLKSZ: usize = 128 << 10;

/// One entry, values decoded to integers of `int_size` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapEntry {
    /// The key: name bytes (no NUL) or, for u64-keyed ZAPs, the key words as big-endian bytes.
    pub name: Vec<u8>,
    /// Bytes per value integer: 1, 2, 4 or 8.
    pub int_size: u8,
    /// The values, widened to u64.
    pub values: Vec<u64>,
}

impl ZapEntry {
    /// The name as a string (lossy for non-UTF-8 bytes).
    pub fn name_string(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
    /// The first value, if any.
    pub fn first_u64(&self) -> Option<u64> {
        self.values.first().copied()
    }
    /// The values as bytes (meaningful for `int_size` 1: strings and byte arrays).
    pub fn bytes(&self) -> Vec<u8> {
        self.values.iter().map(|v| *v as u8).collect()
    }
    /// The value as a string, up to the first NUL.
    pub fn string_value(&self) -> String {
        let b = self.bytes();
        let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    }
}

fn corrupt(obj: u64, e: impl std::fmt::Display) -> ZapError {
    ZapError::Corrupt { obj, detail: e.to_string() }
}

/// Byte order of the object's blocks.
fn order_of(dn: &Dnode) -> ByteOrder {
    dn.blkptr.iter().find(|b| !b.is_hole()).map(|b| b.byte_order()).unwrap_or(ByteOrder::NATIVE)
}

/// The parsed first block of a ZAP.
enum Head {
    Micro(MicroZap),
    Fat(FatZapHeader),
}

fn head(os: &Objset, dn: &Dnode) -> Result<(Head, ByteOrder)> {
    let order = order_of(dn);
    let b0 = os.read_block(dn, 0)?;
    let h = match z::block_kind(&b0, order).map_err(|e| corrupt(dn.object, e))? {
        ZapBlockKind::Micro => {
            if b0.len() > MZAP_MAX_BLKSZ {
                return Err(corrupt(dn.object, format!("micro ZAP block of {} bytes", b0.len())));
            }
            Head::Micro(MicroZap::parse(&b0, order).map_err(|e| corrupt(dn.object, e))?)
        }
        ZapBlockKind::Header => {
            Head::Fat(FatZapHeader::parse(&b0, order).map_err(|e| corrupt(dn.object, e))?)
        }
        ZapBlockKind::Leaf => return Err(corrupt(dn.object, "block 0 is a leaf")),
    };
    Ok((h, order))
}

fn micro_entries(m: &MicroZap) -> Vec<ZapEntry> {
    m.entries.iter().map(|e| ZapEntry { name: e.name.clone(), int_size: 8, values: vec![e.value] }).collect()
}

fn to_entry(e: z::ZapLeafEntry) -> ZapEntry {
    let values = e.values_u64();
    let name = match e.name {
        z::ZapName::Str(s) => s,
        z::ZapName::U64(w) => w.iter().flat_map(|x| x.to_be_bytes()).collect(),
    };
    ZapEntry { name, int_size: e.value_intlen, values }
}

/// The blocks of a ZAP object, for `ondisk::zap::fat_zap_entries`: identity is the first
/// DVA of a real block, the pointer itself (its payload) of an embedded one.
struct ObjBlocks<'a> {
    os: &'a Objset,
    dn: &'a Dnode,
}

impl z::FatZapBlocks for ObjBlocks<'_> {
    type Error = ZapError;
    fn block(&mut self, blkid: u64) -> Result<Option<(Vec<u8>, std::sync::Arc<Vec<u8>>)>> {
        let Some(bp) = self.os.block_pointer(self.dn, 0, blkid)?.filter(|b| !b.is_hole()) else {
            return Ok(None);
        };
        let id = if bp.is_embedded() {
            bp.encode(bp.byte_order()).to_vec()
        } else {
            [bp.dva[0].vdev(), bp.dva[0].offset()].iter().flat_map(|w| w.to_le_bytes()).collect()
        };
        Ok(Some((id, self.os.read_block(self.dn, blkid)?)))
    }
}

impl From<ondisk::Error> for ZapError {
    fn from(e: ondisk::Error) -> Self {
        ZapError::Corrupt { obj: 0, detail: e.to_string() }
    }
}

/// Every entry of a fat ZAP, bounded against crafted objects (`ondisk::zap::walk`).
fn fat_list(os: &Objset, dn: &Dnode, hdr: &FatZapHeader, order: ByteOrder) -> Result<Vec<ZapEntry>> {
    let b0 = os.read_block(dn, 0)?;
    let shape = z::FatZapObject { block_size: dn.data_block_size(), maxblkid: dn.maxblkid, order };
    let entries = z::fat_zap_entries(hdr, &b0, shape, &mut ObjBlocks { os, dn }).map_err(|e| match e {
        ZapError::Corrupt { obj: 0, detail } => ZapError::Corrupt { obj: dn.object, detail },
        e => e,
    })?;
    Ok(entries.into_iter().map(to_entry).collect())
}

/// Lists every entry of ZAP object `obj`.
pub fn list(os: &Objset, obj: u64) -> Result<Vec<ZapEntry>> {
    let dn = os.dnode(obj)?;
    let (h, order) = head(os, &dn)?;
    match h {
        Head::Micro(m) => Ok(micro_entries(&m)),
        Head::Fat(hdr) => fat_list(os, &dn, &hdr, order),
    }
}

/// Looks `name` up in ZAP object `obj`.
pub fn lookup(os: &Objset, obj: u64, name: &str) -> Result<Option<ZapEntry>> {
    lookup_bytes(os, obj, name.as_bytes())
}

/// Looks a byte-string name up.
pub fn lookup_bytes(os: &Objset, obj: u64, name: &[u8]) -> Result<Option<ZapEntry>> {
    let dn = os.dnode(obj)?;
    let (h, order) = head(os, &dn)?;
    match h {
        Head::Micro(m) => Ok(m.entries.iter().find(|e| e.name == name).map(|e| ZapEntry {
            name: e.name.clone(),
            int_size: 8,
            values: vec![e.value],
        })),
        Head::Fat(hdr) => {
            // A normalized ZAP hashes the normalized name; the entry keeps the name as given.
            let key = z::build::norm_key(name, hdr.normflags).map_err(|e| corrupt(obj, e))?;
            let hash = z::zap_hash(hdr.salt, z::ZapKey::Str(&key), hdr.flags).map_err(|e| corrupt(obj, e))?;
            let blkid = leaf_for_hash(os, &dn, &hdr, hash)?;
            let b = os.read_block(&dn, blkid)?;
            let shift = b.len().trailing_zeros();
            let leaf = z::ZapLeaf::parse(&b, order, shift).map_err(|e| corrupt(obj, e))?;
            let found = leaf.lookup(z::ZapKey::Str(name), hash).map_err(|e| corrupt(obj, e))?;
            Ok(found.map(to_entry))
        }
    }
}

/// Looks `name` up in a normalized ZAP the way a normalized directory lookup does
/// (`MT_NORMALIZE`): the entry whose name normalizes as `name` does under the ZAP's flags —
/// without its case fold when `match_case`. An exact lookup on a ZAP without flags.
pub fn lookup_normalized(os: &Objset, obj: u64, name: &[u8], match_case: bool) -> Result<Option<ZapEntry>> {
    let (_, normflags) = salt_and_norm(os, obj)?;
    if normflags == 0 {
        return lookup_bytes(os, obj, name);
    }
    if let Some(e) = lookup_bytes(os, obj, name)? {
        return Ok(Some(e));
    }
    let flags = if match_case { normflags & !z::norm::U8_TEXTPREP_TOUPPER } else { normflags };
    let want = z::norm::normalize(name, flags);
    Ok(list(os, obj)?.into_iter().find(|e| z::norm::normalize(&e.name, flags) == want))
}

/// Follows the pointer table to the leaf block that holds `hash`.
fn leaf_for_hash(os: &Objset, dn: &Dnode, hdr: &FatZapHeader, hash: u64) -> Result<u64> {
    let block_shift = dn.data_block_size().trailing_zeros();
    match hdr.ptrtbl_slot(hash, block_shift).map_err(|e| corrupt(dn.object, e))? {
        z::PtrTblSlot::Embedded { index } => {
            let b0 = os.read_block(dn, 0)?;
            z::embedded_ptrtbl_entry(&b0, order_of(dn), index).map_err(|e| corrupt(dn.object, e))
        }
        z::PtrTblSlot::External { blkid, word } => {
            let b = os.read_block(dn, blkid)?;
            z::ptrtbl_block_entry(&b, order_of(dn), word).map_err(|e| corrupt(dn.object, e))
        }
    }
}

/// Looks up a name whose value is a single u64.
pub fn lookup_u64(os: &Objset, obj: u64, name: &str) -> Result<Option<u64>> {
    Ok(lookup(os, obj, name)?.and_then(|e| e.first_u64()))
}

/// The hash salt and normalization flags of ZAP object `obj`.
pub fn salt_and_norm(os: &Objset, obj: u64) -> Result<(u64, u64)> {
    let dn = os.dnode(obj)?;
    let (h, _) = head(os, &dn)?;
    Ok(match h {
        Head::Micro(m) => (m.salt, m.normflags),
        Head::Fat(f) => (f.salt, f.normflags),
    })
}
