//! Micro ZAP blocks (`mzap_phys_t`, see OpenZFS include/sys/zap_impl.h).
//!
//! ```text
//! slot 0 (header, 64 bytes)          slot i >= 1 (mzap_ent_phys_t, 64 bytes)
//! off  size field                    off  size field
//!   0     8 mz_block_type=ZBT_MICRO    0     8 mze_value
//!   8     8 mz_salt                    8     4 mze_cd   (collision differentiator)
//!  16     8 mz_normflags              12     2 mze_pad
//!  24    40 mz_pad[5]                 14    50 mze_name (NUL-terminated; "" = free slot)
//! ```
//!
//! The block is the object's only block; its size (a multiple of 64) sets the slot count.

use super::{zap_hash, ZapKey, ZBT_MICRO};
use crate::bytes::{slice, ByteOrder};
use crate::error::{Error, Result};

/// Size of one micro ZAP slot (`MZAP_ENT_LEN`).
pub const MZAP_ENT_LEN: usize = 64;
/// Size of the name field, NUL included (`MZAP_NAME_LEN`): names hold at most 49 bytes.
pub const MZAP_NAME_LEN: usize = MZAP_ENT_LEN - 8 - 4 - 2;

/// One used slot of a micro ZAP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MzapEntry {
    /// Slot index among the entry slots (0 = the first slot after the header).
    pub chunk: usize,
    pub value: u64,
    pub cd: u32,
    /// The name without its NUL.
    pub name: Vec<u8>,
}

impl MzapEntry {
    /// The name as UTF-8, if it is.
    pub fn name_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.name).ok()
    }
}

/// A decoded micro ZAP block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MicroZap {
    pub salt: u64,
    pub normflags: u64,
    /// Used slots in slot order.
    pub entries: Vec<MzapEntry>,
}

impl MicroZap {
    /// An empty micro ZAP with this salt (OpenZFS picks a random non-zero salt).
    pub fn new(salt: u64) -> MicroZap {
        MicroZap { salt, normflags: 0, entries: Vec::new() }
    }

    /// Decodes a whole micro ZAP block.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<MicroZap> {
        if buf.len() < 2 * MZAP_ENT_LEN || !buf.len().is_multiple_of(MZAP_ENT_LEN) {
            return Err(Error::corrupt(
                "mzap_phys",
                format!("block size {} is not a multiple of 64 of at least 128", buf.len()),
            ));
        }
        let bt = order.u64_at(buf, 0, "mzap block type")?;
        if bt != ZBT_MICRO {
            return Err(Error::corrupt("mzap_phys", format!("block type {bt:#x} is not ZBT_MICRO")));
        }
        let salt = order.u64_at(buf, 8, "mz_salt")?;
        let normflags = order.u64_at(buf, 16, "mz_normflags")?;
        let nslots = buf.len() / MZAP_ENT_LEN - 1;
        let mut entries = Vec::new();
        for chunk in 0..nslots {
            let off = (chunk + 1) * MZAP_ENT_LEN;
            let ent = slice(buf, off, MZAP_ENT_LEN, "mzap_ent_phys")?;
            let name_field = slice(ent, 14, MZAP_NAME_LEN, "mze_name")?;
            if name_field.first() == Some(&0) {
                continue;
            }
            let len = name_field.iter().position(|&b| b == 0).ok_or_else(|| {
                Error::corrupt("mze_name", format!("slot {chunk}: name is not NUL-terminated"))
            })?;
            entries.push(MzapEntry {
                chunk,
                value: order.u64_at(ent, 0, "mze_value")?,
                cd: order.u32_at(ent, 8, "mze_cd")?,
                name: name_field[..len].to_vec(),
            });
        }
        Ok(MicroZap { salt, normflags, entries })
    }

    /// Number of entry slots a block of `block_size` bytes has.
    pub fn capacity(block_size: usize) -> usize {
        (block_size / MZAP_ENT_LEN).saturating_sub(1)
    }

    /// The 28-bit ZAP hash of `name` in this ZAP (micro ZAPs have no flags).
    pub fn hash_of(&self, name: &[u8]) -> u64 {
        // A string key with flags 0 cannot fail.
        zap_hash(self.salt, ZapKey::Str(name), 0).unwrap_or(0)
    }

    /// Exact-match lookup (valid in a normalized ZAP too: a name is stored as given).
    pub fn lookup(&self, name: &[u8]) -> Result<Option<&MzapEntry>> {
        Ok(self.entries.iter().find(|e| e.name == name))
    }

    /// Adds an entry in the lowest free slot, with the lowest collision differentiator not
    /// used by another name of the same hash (as `mzap_addent` does).
    pub fn insert(&mut self, name: &[u8], value: u64) -> Result<()> {
        if name.is_empty() || name.len() >= MZAP_NAME_LEN || name.contains(&0) {
            return Err(Error::corrupt(
                "mzap entry",
                format!("name of {} bytes does not fit a micro ZAP slot", name.len()),
            ));
        }
        if self.entries.iter().any(|e| e.name == name) {
            return Err(Error::corrupt("mzap entry", "duplicate name"));
        }
        let h = self.hash_of(name);
        let mut cd = 0u32;
        while self.entries.iter().any(|e| e.cd == cd && self.hash_of(&e.name) == h) {
            cd += 1;
        }
        let mut chunk = 0;
        while self.entries.iter().any(|e| e.chunk == chunk) {
            chunk += 1;
        }
        self.entries.push(MzapEntry { chunk, value, cd, name: name.to_vec() });
        Ok(())
    }

    /// Encodes a block of `block_size` bytes; each entry goes to its `chunk` slot.
    pub fn encode(&self, block_size: usize, order: ByteOrder) -> Result<Vec<u8>> {
        if block_size < 2 * MZAP_ENT_LEN || !block_size.is_multiple_of(MZAP_ENT_LEN) {
            return Err(Error::corrupt("mzap_phys", format!("bad block size {block_size}")));
        }
        let mut buf = vec![0u8; block_size];
        order.put_u64(&mut buf, 0, ZBT_MICRO);
        order.put_u64(&mut buf, 8, self.salt);
        order.put_u64(&mut buf, 16, self.normflags);
        let cap = Self::capacity(block_size);
        let mut used = vec![false; cap];
        for e in &self.entries {
            let slot = used.get_mut(e.chunk).ok_or_else(|| {
                Error::corrupt("mzap entry", format!("slot {} past capacity {cap}", e.chunk))
            })?;
            if std::mem::replace(slot, true) {
                return Err(Error::corrupt("mzap entry", format!("slot {} used twice", e.chunk)));
            }
            if e.name.is_empty() || e.name.len() >= MZAP_NAME_LEN || e.name.contains(&0) {
                return Err(Error::corrupt("mzap entry", "name does not fit a slot"));
            }
            let off = (e.chunk + 1) * MZAP_ENT_LEN;
            order.put_u64(&mut buf, off, e.value);
            order.put_u32(&mut buf, off + 8, e.cd);
            buf[off + 14..off + 14 + e.name.len()].copy_from_slice(&e.name);
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_parse_both_orders() {
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let mut z = MicroZap::new(0x1234_5678);
            z.insert(b"ROOT", 34).unwrap();
            z.insert(b"DELETE_QUEUE", 33).unwrap();
            z.insert(&[b'x'; 49], u64::MAX).unwrap();
            assert!(z.insert(&[b'x'; 50], 1).is_err());
            assert!(z.insert(b"ROOT", 1).is_err());
            let blk = z.encode(512, order).unwrap();
            let back = MicroZap::parse(&blk, order).unwrap();
            assert_eq!(back, z);
            assert_eq!(back.lookup(b"ROOT").unwrap().unwrap().value, 34);
            assert!(back.lookup(b"nope").unwrap().is_none());
        }
    }

    #[test]
    fn rejects_bad_blocks() {
        let z = MicroZap::new(1);
        let mut blk = z.encode(512, ByteOrder::Little).unwrap();
        assert!(MicroZap::parse(&blk, ByteOrder::Big).is_err());
        assert!(MicroZap::parse(&blk[..100], ByteOrder::Little).is_err());
        // A name filling all 50 bytes has no NUL.
        blk[64 + 14..128].fill(b'a');
        assert!(MicroZap::parse(&blk, ByteOrder::Little).is_err());
    }
}
