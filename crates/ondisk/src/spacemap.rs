//! Space maps: the `space_map_phys_t` bonus and the u64 entry stream of a space map object
//! (OpenZFS include/sys/space_map.h, module/zfs/space_map.c).
//!
//! ```text
//! debug entry (one word)
//!  63 62 | 61 60 | 59      50 | 49                         0
//!   1  0 | action|  sync pass |  txg
//!
//! one-word entry
//!  63 | 62                 16 | 15   | 14       0
//!   0 | offset (47 bits)      | type | run - 1
//!
//! two-word entry (spacemap_v2)
//!  63 62 | 61 60 | 59               24 | 23        0      63   | 62              0
//!   1  1 |  pad  | run - 1 (36 bits)   | vdev            type  | offset (63 bits)
//! ```
//!
//! Offsets and runs are in units of the map's shift (the vdev's ashift for metaslabs); offsets
//! are relative to the map's start. Type 0 = allocated, 1 = freed. A two-word entry never
//! straddles a block boundary: the last word of a block is then a padding debug entry with
//! action, pass and txg all 0. The object's length (`smp_length`) bounds the stream.
//!
//! `space_map_phys_t` (the bonus): `smp_object`, `smp_length`, `smp_alloc` (signed), 5 pad
//! words, then `smp_histogram[32]` - absent from old 24-byte bonuses (`SPACE_MAP_SIZE_V0`).

use crate::bytes::ByteOrder;
use crate::error::{Error, Result};

/// `SPACE_MAP_SIZE_V0`: bonus size before histograms.
pub const SPACE_MAP_SIZE_V0: usize = 24;
/// `SPACE_MAP_HISTOGRAM_SIZE`.
pub const SPACE_MAP_HISTOGRAM_SIZE: usize = 32;
/// Full `space_map_phys_t` size.
pub const SPACE_MAP_PHYS_SIZE: usize = 64 + 8 * SPACE_MAP_HISTOGRAM_SIZE;
/// `SM_RUN_MAX`: longest run of a one-word entry.
pub const SM_RUN_MAX: u64 = 1 << 15;
/// `SM_OFFSET_MAX` + 1: offsets of one-word entries are below this.
pub const SM_OFFSET_LIMIT: u64 = 1 << 47;
/// `SM2_RUN_MAX`: longest run of a two-word entry.
pub const SM2_RUN_MAX: u64 = 1 << 36;
/// Offsets of two-word entries are below this.
pub const SM2_OFFSET_LIMIT: u64 = 1 << 63;
/// `SPA_VDEVBITS`: width of the vdev field.
pub const SM2_VDEV_LIMIT: u32 = 1 << 24;

const SM_DEBUG_PREFIX: u64 = 2;
const SM2_PREFIX: u64 = 3;

/// A decoded `space_map_phys_t`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpaceMapPhys {
    pub object: u64,
    /// Bytes of entries in the object.
    pub length: u64,
    /// Net allocated bytes described by the map.
    pub alloc: i64,
    /// Free-segment histogram, when the bonus is large enough to have one.
    pub histogram: Option<[u64; SPACE_MAP_HISTOGRAM_SIZE]>,
}

impl SpaceMapPhys {
    /// Decodes the bonus; 24 bytes is enough (no histogram), 320 carries the histogram.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<SpaceMapPhys> {
        let w = |i: usize| order.u64_at(buf, i * 8, "space_map_phys");
        let histogram = if buf.len() >= SPACE_MAP_PHYS_SIZE {
            let mut h = [0u64; SPACE_MAP_HISTOGRAM_SIZE];
            for (i, v) in h.iter_mut().enumerate() {
                *v = w(8 + i)?;
            }
            Some(h)
        } else {
            None
        };
        Ok(SpaceMapPhys { object: w(0)?, length: w(1)?, alloc: w(2)? as i64, histogram })
    }

    /// Encodes: 24 bytes without a histogram, 320 with one.
    pub fn encode(&self, order: ByteOrder) -> Vec<u8> {
        let size = if self.histogram.is_some() { SPACE_MAP_PHYS_SIZE } else { SPACE_MAP_SIZE_V0 };
        let mut b = vec![0u8; size];
        order.put_u64(&mut b, 0, self.object);
        order.put_u64(&mut b, 8, self.length);
        order.put_u64(&mut b, 16, self.alloc as u64);
        if let Some(h) = &self.histogram {
            for (i, &v) in h.iter().enumerate() {
                order.put_u64(&mut b, 64 + 8 * i, v);
            }
        }
        b
    }
}

/// Allocated or freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmType {
    Alloc,
    Free,
}

impl SmType {
    fn from_bit(b: u64) -> SmType {
        if b & 1 == 0 {
            SmType::Alloc
        } else {
            SmType::Free
        }
    }

    fn bit(self) -> u64 {
        match self {
            SmType::Alloc => 0,
            SmType::Free => 1,
        }
    }
}

/// One space map entry, in the form it has on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmEntry {
    /// Marks the txg and sync pass of the entries that follow; `action` 0 = alloc, 1 = free.
    Debug {
        action: u8,
        sync_pass: u16,
        txg: u64,
    },
    OneWord {
        kind: SmType,
        offset: u64,
        run: u64,
    },
    TwoWord {
        kind: SmType,
        offset: u64,
        run: u64,
        vdev: u32,
    },
}

impl SmEntry {
    /// A range entry in the smallest form that holds it, as `space_map_write_seg` chooses:
    /// one word unless a vdev id is recorded or offset/run are too large.
    pub fn range(kind: SmType, offset: u64, run: u64, vdev: Option<u32>) -> Result<SmEntry> {
        let e = match vdev {
            None if run <= SM_RUN_MAX && offset < SM_OFFSET_LIMIT => SmEntry::OneWord { kind, offset, run },
            v => SmEntry::TwoWord { kind, offset, run, vdev: v.unwrap_or(0) },
        };
        e.check()?;
        Ok(e)
    }

    /// Is this the padding debug entry (all fields zero)?
    pub fn is_padding(&self) -> bool {
        *self == SmEntry::Debug { action: 0, sync_pass: 0, txg: 0 }
    }

    /// Number of u64 words this entry takes.
    pub fn words(&self) -> usize {
        match self {
            SmEntry::TwoWord { .. } => 2,
            _ => 1,
        }
    }

    fn check(&self) -> Result<()> {
        let ok = match *self {
            SmEntry::Debug { action, sync_pass, txg } => action < 4 && sync_pass < 1 << 10 && txg < 1 << 50,
            SmEntry::OneWord { offset, run, .. } => {
                (1..=SM_RUN_MAX).contains(&run) && offset < SM_OFFSET_LIMIT
            }
            SmEntry::TwoWord { offset, run, vdev, .. } => {
                (1..=SM2_RUN_MAX).contains(&run) && offset < SM2_OFFSET_LIMIT && vdev < SM2_VDEV_LIMIT
            }
        };
        if ok {
            Ok(())
        } else {
            Err(Error::corrupt("space map entry", format!("fields out of range: {self:?}")))
        }
    }

    /// The entry's words.
    pub fn encode(&self) -> Result<Vec<u64>> {
        self.check()?;
        Ok(match *self {
            SmEntry::Debug { action, sync_pass, txg } => {
                vec![SM_DEBUG_PREFIX << 62 | u64::from(action) << 60 | u64::from(sync_pass) << 50 | txg]
            }
            SmEntry::OneWord { kind, offset, run } => {
                vec![offset << 16 | kind.bit() << 15 | (run - 1)]
            }
            SmEntry::TwoWord { kind, offset, run, vdev } => {
                vec![SM2_PREFIX << 62 | (run - 1) << 24 | u64::from(vdev), kind.bit() << 63 | offset]
            }
        })
    }
}

/// Decodes every entry of `buf` (the first `smp_length` bytes of the object).
pub fn decode_entries(buf: &[u8], order: ByteOrder) -> Result<Vec<SmEntry>> {
    if !buf.len().is_multiple_of(8) {
        return Err(Error::corrupt("space map", format!("length {} not whole words", buf.len())));
    }
    let n = buf.len() / 8;
    let word = |i: usize| order.u64_at(buf, i * 8, "space map word");
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let e = word(i)?;
        let entry = match e >> 62 {
            SM_DEBUG_PREFIX => SmEntry::Debug {
                action: ((e >> 60) & 3) as u8,
                sync_pass: ((e >> 50) & 0x3ff) as u16,
                txg: e & ((1 << 50) - 1),
            },
            SM2_PREFIX => {
                if i + 1 >= n {
                    return Err(Error::corrupt("space map", "two-word entry cut off at the end"));
                }
                let e2 = word(i + 1)?;
                i += 1;
                SmEntry::TwoWord {
                    kind: SmType::from_bit(e2 >> 63),
                    offset: e2 & (SM2_OFFSET_LIMIT - 1),
                    run: ((e >> 24) & (SM2_RUN_MAX - 1)) + 1,
                    vdev: (e & u64::from(SM2_VDEV_LIMIT - 1)) as u32,
                }
            }
            _ => SmEntry::OneWord {
                kind: SmType::from_bit(e >> 15),
                offset: (e >> 16) & (SM_OFFSET_LIMIT - 1),
                run: (e & (SM_RUN_MAX - 1)) + 1,
            },
        };
        out.push(entry);
        i += 1;
    }
    Ok(out)
}

/// Encodes entries as a stream for blocks of `block_size` bytes, inserting a padding debug
/// entry wherever a two-word entry would straddle a block boundary.
pub fn encode_entries(entries: &[SmEntry], order: ByteOrder, block_size: usize) -> Result<Vec<u8>> {
    if block_size < 16 || !block_size.is_multiple_of(8) {
        return Err(Error::corrupt("space map", format!("bad block size {block_size}")));
    }
    let per_block = block_size / 8;
    let mut words: Vec<u64> = Vec::new();
    for e in entries {
        let w = e.encode()?;
        if w.len() == 2 && words.len() % per_block == per_block - 1 {
            words.push(SM_DEBUG_PREFIX << 62);
        }
        words.extend(w);
    }
    let mut out = vec![0u8; words.len() * 8];
    for (i, w) in words.into_iter().enumerate() {
        order.put_u64(&mut out, i * 8, w);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_and_round_trip() {
        let es = vec![
            SmEntry::Debug { action: 1, sync_pass: 3, txg: 12345 },
            SmEntry::range(SmType::Alloc, 0x10, 9, None).unwrap(),
            SmEntry::range(SmType::Free, 0x20, SM_RUN_MAX + 1, None).unwrap(),
            SmEntry::range(SmType::Alloc, 5, 1, Some(7)).unwrap(),
        ];
        assert!(matches!(es[1], SmEntry::OneWord { .. }));
        assert!(matches!(es[2], SmEntry::TwoWord { vdev: 0, .. }));
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let b = encode_entries(&es, order, 4096).unwrap();
            assert_eq!(decode_entries(&b, order).unwrap(), es);
        }
        assert!(SmEntry::range(SmType::Alloc, 0, 0, None).is_err());
        assert!(SmEntry::range(SmType::Alloc, 0, 1, Some(1 << 24)).is_err());
    }

    #[test]
    fn two_word_entries_do_not_straddle_blocks() {
        let one = SmEntry::range(SmType::Alloc, 1, 1, None).unwrap();
        let two = SmEntry::range(SmType::Free, 2, 2, Some(3)).unwrap();
        let b = encode_entries(&[one, two], ByteOrder::Little, 16).unwrap();
        let d = decode_entries(&b, ByteOrder::Little).unwrap();
        assert_eq!(d.len(), 3);
        assert!(d[1].is_padding());
        assert_eq!(d[2], two);
        assert!(decode_entries(&b[..24], ByteOrder::Little).is_err());
    }
}
