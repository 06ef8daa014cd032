//! Fat ZAP leaf blocks (`zap_leaf_phys_t`, see OpenZFS include/sys/zap_leaf.h).
//!
//! ```text
//! leaf header (48 bytes = 2 chunks)          chunk (24 bytes), by type byte
//! off size field                              entry (252)          array (251)   free (253)
//!   0   8 lh_block_type = ZBT_LEAF             0 1 le_type          0 1 la_type   0 1 lf_type
//!   8   8 lh_pad1                              1 1 le_value_intlen  1 21 la_array 1 21 pad
//!  16   8 lh_prefix    hash prefix of leaf     2 2 le_next          22 2 la_next  22 2 lf_next
//!  24   4 lh_magic = 0x2AB1EAF                 4 2 le_name_chunk
//!  28   2 lh_nfree     free chunks             6 2 le_name_numints
//!  30   2 lh_nentries                          8 2 le_value_chunk
//!  32   2 lh_prefix_len                       10 2 le_value_numints
//!  34   2 lh_freelist  first free chunk       12 4 le_cd
//!  36   1 lh_flags     ZLF_ENTRIES_CDSORTED   16 8 le_hash
//!  37  11 pad
//!  48     l_hash[2^(bs-5)]: u16 chunk index of each bucket's first entry, or CHAIN_END
//!  ...    chunks[((2^bs - 2*2^(bs-5)) / 24) - 2]
//! ```
//!
//! A bucket is picked by the hash bits just below the leaf's prefix (`LEAF_HASH`). Entries of a
//! bucket chain through `le_next`. Names and values are byte arrays spread over array chunks
//! (21 bytes each); integers in them are big-endian in every pool (`zap_leaf_array_read`), and
//! only the chunk framing follows the block's byte order. String names include their NUL.

use super::fat::ptrtbl_index;
use super::{ZapKey, ZAP_FLAG_UINT64_KEY, ZAP_LEAF_MAGIC, ZBT_LEAF};
use crate::bytes::{slice, ByteOrder};
use crate::error::{Error, Result};

/// Size of one leaf chunk.
pub const ZAP_LEAF_CHUNKSIZE: usize = 24;
/// Payload bytes of an array chunk.
pub const ZAP_LEAF_ARRAY_BYTES: usize = ZAP_LEAF_CHUNKSIZE - 3;
/// End of a chunk chain / empty bucket.
pub const CHAIN_END: u16 = 0xffff;
/// Type byte of a free chunk.
pub const ZAP_CHUNK_FREE: u8 = 253;
/// Type byte of an entry chunk.
pub const ZAP_CHUNK_ENTRY: u8 = 252;
/// Type byte of an array chunk.
pub const ZAP_CHUNK_ARRAY: u8 = 251;
/// `lh_flags` bit: hash chains are kept sorted by collision differentiator.
pub const ZLF_ENTRIES_CDSORTED: u8 = 1 << 0;

const LEAF_HEADER_SIZE: usize = 2 * ZAP_LEAF_CHUNKSIZE;

/// Sizes derived from a leaf's block shift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafGeometry {
    pub block_shift: u32,
    /// `ZAP_LEAF_HASH_NUMENTRIES`: buckets, `2^(block_shift - 5)`.
    pub hash_entries: usize,
    /// `ZAP_LEAF_NUMCHUNKS`: chunks after the hash table.
    pub num_chunks: usize,
}

impl LeafGeometry {
    /// Geometry of a leaf of `1 << block_shift` bytes (ZAP blocks are 512 B to 128 KiB).
    pub fn new(block_shift: u32) -> Result<LeafGeometry> {
        if !(9..=17).contains(&block_shift) {
            return Err(Error::unsupported("zap leaf", format!("block shift {block_shift} not in 9..=17")));
        }
        let hash_entries = 1usize << (block_shift - 5);
        let size = 1usize << block_shift;
        let num_chunks = (size - 2 * hash_entries) / ZAP_LEAF_CHUNKSIZE - 2;
        Ok(LeafGeometry { block_shift, hash_entries, num_chunks })
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> usize {
        1 << self.block_shift
    }

    fn chunk_offset(&self, idx: usize) -> usize {
        LEAF_HEADER_SIZE + 2 * self.hash_entries + idx * ZAP_LEAF_CHUNKSIZE
    }
}

/// `LEAF_HASH`: the bucket of `hash` in a leaf with this block shift and prefix length.
pub fn leaf_hash_index(hash: u64, block_shift: u32, prefix_len: u16) -> Result<usize> {
    let g = LeafGeometry::new(block_shift)?;
    let used = (block_shift - 5) + u32::from(prefix_len);
    if used > 64 {
        return Err(Error::corrupt("zap leaf", format!("prefix length {prefix_len} too large")));
    }
    // `used` >= 4, so the shift is at most 60.
    Ok(((hash >> (64 - used)) as usize) & (g.hash_entries - 1))
}

/// The fixed header of a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZapLeafHeader {
    pub prefix: u64,
    pub nfree: u16,
    pub nentries: u16,
    pub prefix_len: u16,
    pub freelist: u16,
    pub flags: u8,
}

impl ZapLeafHeader {
    /// Does this leaf own `hash` (its top `prefix_len` bits equal the prefix)?
    pub fn covers(&self, hash: u64) -> bool {
        ptrtbl_index(hash, u64::from(self.prefix_len)) == self.prefix
    }
}

/// One chunk, decoded by its type byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeafChunk {
    Entry(EntryChunk),
    Array { data: [u8; ZAP_LEAF_ARRAY_BYTES], next: u16 },
    Free { next: u16 },
}

/// The fields of an entry chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryChunk {
    pub value_intlen: u8,
    pub next: u16,
    pub name_chunk: u16,
    pub name_numints: u16,
    pub value_chunk: u16,
    pub value_numints: u16,
    pub cd: u32,
    pub hash: u64,
}

/// How to read entry names: the leaf does not say, the header's `ZAP_FLAG_UINT64_KEY` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// NUL-terminated byte strings (1-byte integers).
    String,
    /// Arrays of u64 (8-byte integers).
    Uint64,
}

impl KeyKind {
    /// The key kind of a fat ZAP with these `zap_flags`.
    pub fn from_zap_flags(flags: u64) -> KeyKind {
        if flags & ZAP_FLAG_UINT64_KEY != 0 {
            KeyKind::Uint64
        } else {
            KeyKind::String
        }
    }

    fn int_size(self) -> usize {
        match self {
            KeyKind::String => 1,
            KeyKind::Uint64 => 8,
        }
    }
}

/// A decoded entry name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZapName {
    /// A string name without its terminating NUL.
    Str(Vec<u8>),
    /// A u64-array key.
    U64(Vec<u64>),
}

impl ZapName {
    /// The key as the hash function takes it.
    pub fn as_key(&self) -> ZapKey<'_> {
        match self {
            ZapName::Str(s) => ZapKey::Str(s),
            ZapName::U64(w) => ZapKey::U64(w),
        }
    }

    /// The bytes stored in the name array, and the integer count (`le_name_numints`).
    fn stored(&self) -> (Vec<u8>, usize) {
        match self {
            ZapName::Str(s) => {
                let mut v = s.clone();
                v.push(0);
                let n = v.len();
                (v, n)
            }
            ZapName::U64(w) => (w.iter().flat_map(|x| x.to_be_bytes()).collect(), w.len()),
        }
    }
}

/// A complete leaf entry: name, hash, cd and value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapLeafEntry {
    /// Chunk index of the entry chunk (ignored by [`build_leaf`]).
    pub chunk: u16,
    pub hash: u64,
    pub cd: u32,
    pub name: ZapName,
    /// Size of each value integer: 1, 2, 4 or 8.
    pub value_intlen: u8,
    /// The value array as stored: `value_numints * value_intlen` big-endian bytes.
    pub value: Vec<u8>,
}

impl ZapLeafEntry {
    /// An entry whose value is an array of u64.
    pub fn with_u64s(name: ZapName, hash: u64, cd: u32, values: &[u64]) -> ZapLeafEntry {
        let value = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        ZapLeafEntry { chunk: 0, hash, cd, name, value_intlen: 8, value }
    }

    /// Number of value integers.
    pub fn value_numints(&self) -> usize {
        self.value.len() / usize::from(self.value_intlen.max(1))
    }

    /// Value integers widened to u64 (each integer is big-endian in the array).
    pub fn values_u64(&self) -> Vec<u64> {
        let n = usize::from(self.value_intlen.max(1));
        self.value.chunks_exact(n).map(|c| c.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))).collect()
    }
}

fn valid_intlen(n: u8) -> bool {
    matches!(n, 1 | 2 | 4 | 8)
}

/// A borrowed, validated leaf block.
#[derive(Clone, Debug)]
pub struct ZapLeaf<'a> {
    buf: &'a [u8],
    order: ByteOrder,
    geom: LeafGeometry,
    pub header: ZapLeafHeader,
}

impl<'a> ZapLeaf<'a> {
    /// Checks block type and magic of a leaf of `1 << block_shift` bytes (`buf` may be longer;
    /// only the first block is used).
    pub fn parse(buf: &'a [u8], order: ByteOrder, block_shift: u32) -> Result<ZapLeaf<'a>> {
        let geom = LeafGeometry::new(block_shift)?;
        let buf = slice(buf, 0, geom.block_size(), "zap leaf")?;
        let bt = order.u64_at(buf, 0, "lh_block_type")?;
        if bt != ZBT_LEAF {
            return Err(Error::corrupt("zap leaf", format!("block type {bt:#x} is not ZBT_LEAF")));
        }
        let magic = order.u32_at(buf, 24, "lh_magic")?;
        if magic != ZAP_LEAF_MAGIC {
            return Err(Error::corrupt("zap leaf", format!("bad magic {magic:#x}")));
        }
        let header = ZapLeafHeader {
            prefix: order.u64_at(buf, 16, "lh_prefix")?,
            nfree: order.u16_at(buf, 28, "lh_nfree")?,
            nentries: order.u16_at(buf, 30, "lh_nentries")?,
            prefix_len: order.u16_at(buf, 32, "lh_prefix_len")?,
            freelist: order.u16_at(buf, 34, "lh_freelist")?,
            flags: *buf.get(36).ok_or_else(|| Error::corrupt("zap leaf", "short header"))?,
        };
        if header.prefix_len > 64 {
            return Err(Error::corrupt("zap leaf", format!("prefix_len {}", header.prefix_len)));
        }
        Ok(ZapLeaf { buf, order, geom, header })
    }

    /// The leaf's geometry.
    pub fn geometry(&self) -> LeafGeometry {
        self.geom
    }

    /// Head of hash bucket `i`.
    pub fn hash_slot(&self, i: usize) -> Result<u16> {
        if i >= self.geom.hash_entries {
            return Err(Error::corrupt("zap leaf hash", format!("bucket {i} out of range")));
        }
        self.order.u16_at(self.buf, LEAF_HEADER_SIZE + 2 * i, "zap leaf hash")
    }

    /// Decodes chunk `idx`.
    pub fn chunk(&self, idx: u16) -> Result<LeafChunk> {
        let i = usize::from(idx);
        if i >= self.geom.num_chunks {
            return Err(Error::corrupt(
                "zap leaf chunk",
                format!("chunk {idx} past the leaf's {} chunks", self.geom.num_chunks),
            ));
        }
        let c = slice(self.buf, self.geom.chunk_offset(i), ZAP_LEAF_CHUNKSIZE, "zap leaf chunk")?;
        let o = self.order;
        let next = o.u16_at(c, 22, "chunk next")?;
        match c[0] {
            ZAP_CHUNK_ENTRY => Ok(LeafChunk::Entry(EntryChunk {
                value_intlen: c[1],
                next: o.u16_at(c, 2, "le_next")?,
                name_chunk: o.u16_at(c, 4, "le_name_chunk")?,
                name_numints: o.u16_at(c, 6, "le_name_numints")?,
                value_chunk: o.u16_at(c, 8, "le_value_chunk")?,
                value_numints: o.u16_at(c, 10, "le_value_numints")?,
                cd: o.u32_at(c, 12, "le_cd")?,
                hash: o.u64_at(c, 16, "le_hash")?,
            })),
            ZAP_CHUNK_ARRAY => {
                let mut data = [0u8; ZAP_LEAF_ARRAY_BYTES];
                data.copy_from_slice(&c[1..1 + ZAP_LEAF_ARRAY_BYTES]);
                Ok(LeafChunk::Array { data, next })
            }
            ZAP_CHUNK_FREE => Ok(LeafChunk::Free { next }),
            t => Err(Error::corrupt("zap leaf chunk", format!("chunk {idx} has type {t}"))),
        }
    }

    fn entry_chunk(&self, idx: u16) -> Result<EntryChunk> {
        match self.chunk(idx)? {
            LeafChunk::Entry(e) => Ok(e),
            _ => Err(Error::corrupt("zap leaf", format!("chunk {idx} is not an entry"))),
        }
    }

    /// Gathers `nbytes` bytes from the array chain starting at `first`. With `used`, every
    /// chunk of the chain is marked there and a chunk already marked (by this chain or an
    /// earlier one of the same leaf) is corruption: arrays never share chunks, and a crafted
    /// leaf whose entries all point at one looping chain would otherwise decode to 512 KiB
    /// per entry from a block of a few KiB.
    fn read_array(&self, first: u16, nbytes: usize, mut used: Option<&mut [bool]>) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(nbytes.min(self.geom.num_chunks * ZAP_LEAF_ARRAY_BYTES));
        let mut chunk = first;
        while out.len() < nbytes {
            if let Some(used) = used.as_deref_mut() {
                let mark = used
                    .get_mut(usize::from(chunk))
                    .ok_or_else(|| Error::corrupt("zap leaf array", format!("chunk {chunk} out of range")))?;
                if std::mem::replace(mark, true) {
                    return Err(Error::corrupt(
                        "zap leaf array",
                        format!("chunk {chunk} belongs to two arrays (or loops)"),
                    ));
                }
            }
            match self.chunk(chunk)? {
                LeafChunk::Array { data, next } => {
                    let take = (nbytes - out.len()).min(ZAP_LEAF_ARRAY_BYTES);
                    out.extend_from_slice(&data[..take]);
                    chunk = next;
                }
                _ => {
                    return Err(Error::corrupt(
                        "zap leaf array",
                        format!("chunk {chunk} in an array chain is not an array chunk"),
                    ))
                }
            }
        }
        Ok(out)
    }

    fn decode_entry(
        &self,
        idx: u16,
        e: &EntryChunk,
        kind: KeyKind,
        mut used: Option<&mut [bool]>,
    ) -> Result<ZapLeafEntry> {
        if !valid_intlen(e.value_intlen) {
            return Err(Error::corrupt(
                "zap leaf entry",
                format!("chunk {idx}: value int size {}", e.value_intlen),
            ));
        }
        let raw = self.read_array(
            e.name_chunk,
            usize::from(e.name_numints) * kind.int_size(),
            used.as_deref_mut(),
        )?;
        let name = match kind {
            KeyKind::String => {
                let mut s = raw;
                if s.last() == Some(&0) {
                    s.pop();
                }
                ZapName::Str(s)
            }
            KeyKind::Uint64 => ZapName::U64(
                raw.chunks_exact(8).map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b))).collect(),
            ),
        };
        let vlen = usize::from(e.value_numints) * usize::from(e.value_intlen);
        Ok(ZapLeafEntry {
            chunk: idx,
            hash: e.hash,
            cd: e.cd,
            name,
            value_intlen: e.value_intlen,
            value: self.read_array(e.value_chunk, vlen, used)?,
        })
    }

    /// Walks one bucket's chain, calling `f` on each entry chunk; detects loops.
    fn walk_bucket(
        &self,
        bucket: usize,
        seen: &mut [bool],
        f: &mut dyn FnMut(u16, &EntryChunk) -> Result<bool>,
    ) -> Result<()> {
        let mut chunk = self.hash_slot(bucket)?;
        while chunk != CHAIN_END {
            let e = self.entry_chunk(chunk)?;
            let mark = seen
                .get_mut(usize::from(chunk))
                .ok_or_else(|| Error::corrupt("zap leaf", format!("chunk {chunk} out of range")))?;
            if std::mem::replace(mark, true) {
                return Err(Error::corrupt(
                    "zap leaf hash chain",
                    format!("chunk {chunk} reached twice (bucket {bucket})"),
                ));
            }
            if !f(chunk, &e)? {
                return Ok(());
            }
            chunk = e.next;
        }
        Ok(())
    }

    /// Every entry reachable from the hash table, bucket by bucket.
    pub fn entries(&self, kind: KeyKind) -> Result<Vec<ZapLeafEntry>> {
        let mut seen = vec![false; self.geom.num_chunks];
        let mut arrays = vec![false; self.geom.num_chunks];
        let mut out = Vec::new();
        for b in 0..self.geom.hash_entries {
            self.walk_bucket(b, &mut seen, &mut |idx, e| {
                out.push(self.decode_entry(idx, e, kind, Some(&mut arrays))?);
                Ok(true)
            })?;
        }
        Ok(out)
    }

    /// Finds the entry named `key` whose hash is `hash` (`zap_leaf_lookup`, exact match).
    pub fn lookup(&self, key: ZapKey<'_>, hash: u64) -> Result<Option<ZapLeafEntry>> {
        let bucket = leaf_hash_index(hash, self.geom.block_shift, self.header.prefix_len)?;
        let (kind, want) = match key {
            ZapKey::Str(s) => (KeyKind::String, ZapName::Str(s.to_vec()).stored().0),
            ZapKey::U64(w) => (KeyKind::Uint64, ZapName::U64(w.to_vec()).stored().0),
        };
        let mut seen = vec![false; self.geom.num_chunks];
        let mut found = None;
        self.walk_bucket(bucket, &mut seen, &mut |idx, e| {
            if e.hash != hash || usize::from(e.name_numints) * kind.int_size() != want.len() {
                return Ok(true);
            }
            if self.read_array(e.name_chunk, want.len(), None)? == want {
                found = Some(self.decode_entry(idx, e, kind, None)?);
                return Ok(false);
            }
            Ok(true)
        })?;
        Ok(found)
    }
}

/// Fills a fresh leaf of `1 << block_shift` bytes with `entries`, in order, the way
/// `zap_entry_create` does on an empty leaf: each entry takes the next free chunk, then its
/// name's array chunks, then its value's; it joins its bucket's chain before the first entry
/// with a larger cd. Unused chunks form the free list in ascending order.
pub fn build_leaf(
    block_shift: u32,
    order: ByteOrder,
    prefix: u64,
    prefix_len: u16,
    flags: u8,
    entries: &[ZapLeafEntry],
) -> Result<Vec<u8>> {
    let geom = LeafGeometry::new(block_shift)?;
    let header = ZapLeafHeader { prefix, nfree: 0, nentries: 0, prefix_len, freelist: 0, flags };
    let mut buf = vec![0u8; geom.block_size()];
    let mut w = LeafWriter { geom, order, buf: &mut buf, next_free: 0 };
    let mut chains: Vec<Vec<(u16, u32)>> = vec![Vec::new(); geom.hash_entries];
    for e in entries {
        if !header.covers(e.hash) {
            return Err(Error::corrupt("zap leaf build", "entry hash outside the leaf prefix"));
        }
        let idx = w.write_entry(e)?;
        let chain = &mut chains[leaf_hash_index(e.hash, block_shift, prefix_len)?];
        let pos = chain.iter().position(|&(_, cd)| cd > e.cd).unwrap_or(chain.len());
        chain.insert(pos, (idx, e.cd));
    }
    let used = w.next_free;
    for (b, chain) in chains.iter().enumerate() {
        let head = chain.first().map_or(CHAIN_END, |c| c.0);
        order.put_u16(w.buf, LEAF_HEADER_SIZE + 2 * b, head);
        for pair in chain.windows(2) {
            let off = geom.chunk_offset(usize::from(pair[0].0));
            order.put_u16(w.buf, off + 2, pair[1].0);
        }
        if let Some(last) = chain.last() {
            order.put_u16(w.buf, geom.chunk_offset(usize::from(last.0)) + 2, CHAIN_END);
        }
    }
    for i in used..geom.num_chunks {
        let off = geom.chunk_offset(i);
        w.buf[off] = ZAP_CHUNK_FREE;
        let next = if i + 1 < geom.num_chunks { i as u16 + 1 } else { CHAIN_END };
        order.put_u16(w.buf, off + 22, next);
    }
    let nfree = (geom.num_chunks - used) as u16;
    let freelist = if nfree == 0 { CHAIN_END } else { used as u16 };
    let nentries =
        u16::try_from(entries.len()).map_err(|_| Error::corrupt("zap leaf build", "too many entries"))?;
    order.put_u64(&mut buf, 0, ZBT_LEAF);
    order.put_u64(&mut buf, 16, prefix);
    order.put_u32(&mut buf, 24, ZAP_LEAF_MAGIC);
    order.put_u16(&mut buf, 28, nfree);
    order.put_u16(&mut buf, 30, nentries);
    order.put_u16(&mut buf, 32, prefix_len);
    order.put_u16(&mut buf, 34, freelist);
    buf[36] = flags;
    Ok(buf)
}

/// Chunk allocator used by [`build_leaf`]; chunk counts stay below 2^16 for shifts <= 17.
struct LeafWriter<'b> {
    geom: LeafGeometry,
    order: ByteOrder,
    buf: &'b mut Vec<u8>,
    next_free: usize,
}

impl LeafWriter<'_> {
    fn alloc(&mut self) -> Result<u16> {
        if self.next_free >= self.geom.num_chunks {
            return Err(Error::corrupt("zap leaf build", "entries do not fit in the leaf"));
        }
        self.next_free += 1;
        Ok((self.next_free - 1) as u16)
    }

    /// Writes `bytes` as an array chain; returns its first chunk (CHAIN_END when empty).
    fn write_array(&mut self, bytes: &[u8]) -> Result<u16> {
        let n = bytes.len().div_ceil(ZAP_LEAF_ARRAY_BYTES);
        let first = if n == 0 { CHAIN_END } else { self.next_free as u16 };
        for (k, part) in bytes.chunks(ZAP_LEAF_ARRAY_BYTES).enumerate() {
            let idx = self.alloc()?;
            let off = self.geom.chunk_offset(usize::from(idx));
            self.buf[off] = ZAP_CHUNK_ARRAY;
            self.buf[off + 1..off + 1 + part.len()].copy_from_slice(part);
            let next = if k + 1 == n { CHAIN_END } else { idx + 1 };
            self.order.put_u16(self.buf, off + 22, next);
        }
        Ok(first)
    }

    fn write_entry(&mut self, e: &ZapLeafEntry) -> Result<u16> {
        let bad = |d: &str| Error::corrupt("zap leaf build", d.to_string());
        if !valid_intlen(e.value_intlen) || !e.value.len().is_multiple_of(usize::from(e.value_intlen)) {
            return Err(bad("value is not a whole number of 1/2/4/8-byte integers"));
        }
        let (name, name_numints) = e.name.stored();
        let name_numints = u16::try_from(name_numints).map_err(|_| bad("name too long"))?;
        let value_numints = u16::try_from(e.value_numints()).map_err(|_| bad("value too long"))?;
        let idx = self.alloc()?;
        let name_chunk = self.write_array(&name)?;
        let value_chunk = self.write_array(&e.value)?;
        let off = self.geom.chunk_offset(usize::from(idx));
        let o = self.order;
        self.buf[off] = ZAP_CHUNK_ENTRY;
        self.buf[off + 1] = e.value_intlen;
        o.put_u16(self.buf, off + 4, name_chunk);
        o.put_u16(self.buf, off + 6, name_numints);
        o.put_u16(self.buf, off + 8, value_chunk);
        o.put_u16(self.buf, off + 10, value_numints);
        o.put_u32(self.buf, off + 12, e.cd);
        o.put_u64(self.buf, off + 16, e.hash);
        Ok(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_matches_openzfs_sizes() {
        let g = LeafGeometry::new(14).unwrap();
        assert_eq!((g.hash_entries, g.num_chunks), (512, 638));
        assert_eq!(g.chunk_offset(0), 0x430);
        let g = LeafGeometry::new(9).unwrap();
        assert_eq!((g.hash_entries, g.num_chunks), (16, 18));
        assert!(LeafGeometry::new(8).is_err());
    }

    #[test]
    fn bucket_index_uses_bits_below_prefix() {
        let h = 0b1011u64 << 60;
        assert_eq!(leaf_hash_index(h, 14, 0).unwrap(), 0b1011 << 5);
        assert_eq!(leaf_hash_index(h, 14, 1).unwrap(), 0b011 << 6);
        assert!(leaf_hash_index(h, 14, 60).is_err());
    }

    #[test]
    fn build_then_parse_both_orders() {
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let long = ZapName::Str(vec![b'n'; 70]);
            let mut bytes = ZapLeafEntry::with_u64s(ZapName::U64(vec![1, 2]), 0x3 << 60, 0, &[]);
            bytes.value_intlen = 2;
            bytes.value = vec![0, 5, 0, 6, 1, 0];
            let entries = vec![
                ZapLeafEntry::with_u64s(ZapName::Str(b"a".to_vec()), 0x8 << 60, 0, &[7]),
                ZapLeafEntry::with_u64s(ZapName::Str(b"b".to_vec()), 0x8 << 60, 1, &[8, 9]),
                ZapLeafEntry::with_u64s(long, 0x9 << 60, 0, &[u64::MAX; 5]),
                ZapLeafEntry::with_u64s(ZapName::Str(vec![]), 0x1 << 60, 0, &[]),
            ];
            let blk = build_leaf(10, order, 0, 0, 0, &entries).unwrap();
            let leaf = ZapLeaf::parse(&blk, order, 10).unwrap();
            assert_eq!(leaf.header.nentries, 4);
            let mut got = leaf.entries(KeyKind::String).unwrap();
            got.sort_by_key(|e| e.chunk);
            for (g, e) in got.iter().zip(&entries) {
                assert_eq!((&g.name, g.hash, g.cd, &g.value), (&e.name, e.hash, e.cd, &e.value));
            }
            let hit = leaf.lookup(ZapKey::Str(b"b"), 0x8 << 60).unwrap().unwrap();
            assert_eq!(hit.values_u64(), vec![8, 9]);
            assert!(leaf.lookup(ZapKey::Str(b"b"), 0x9 << 60).unwrap().is_none());
            // u64 keys with 2-byte values (read as big-endian integers).
            let blk = build_leaf(10, order, 0, 1, 0, &[bytes]).unwrap();
            let leaf = ZapLeaf::parse(&blk, order, 10).unwrap();
            let hit = leaf.lookup(ZapKey::U64(&[1, 2]), 0x3 << 60).unwrap().unwrap();
            assert_eq!(hit.values_u64(), vec![5, 6, 256]);
        }
    }

    #[test]
    fn build_rejects_overflow_and_foreign_hashes() {
        let big = ZapLeafEntry::with_u64s(ZapName::Str(vec![b'x'; 400]), 0, 0, &[1]);
        assert!(build_leaf(9, ByteOrder::Little, 0, 0, 0, &[big]).is_err());
        let e = ZapLeafEntry::with_u64s(ZapName::Str(b"x".to_vec()), 1 << 63, 0, &[1]);
        assert!(build_leaf(9, ByteOrder::Little, 0, 1, 0, &[e]).is_err());
    }

    #[test]
    fn loops_are_reported() {
        let e = ZapLeafEntry::with_u64s(ZapName::Str(b"a".to_vec()), 0, 0, &[1]);
        let mut blk = build_leaf(9, ByteOrder::Little, 0, 0, 0, &[e]).unwrap();
        let g = LeafGeometry::new(9).unwrap();
        // Point the entry's le_next at itself.
        ByteOrder::Little.put_u16(&mut blk, g.chunk_offset(0) + 2, 0);
        let leaf = ZapLeaf::parse(&blk, ByteOrder::Little, 9).unwrap();
        assert!(leaf.entries(KeyKind::String).is_err());
    }
}
