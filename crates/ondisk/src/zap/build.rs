//! ZAP object encoder for the write path: a whole object, from a list of entries, at once.
//!
//! Theory. The write path keeps a dirty ZAP object in memory as a sorted map and, at txg sync,
//! re-encodes it from scratch. [`build_zap`] turns the entries into the object's block images
//! (block id order), choosing the encoding OpenZFS itself would have ended up with:
//!
//! * **micro ZAP** when no ZAP flags are asked for, `force_fat` is off, every entry is one u64
//!   (`int_size` 8) under a non-empty name of at most 49 bytes, no hash has so many names that
//!   they could not move to one fat leaf later (`mze_canfit_fzap_leaf`), and the entries fit a
//!   block of at most the micro ZAP size limit. The block is the size OpenZFS would have grown
//!   it to: a ZAP object starts with one 512-byte block (`zap_create` asks for a
//!   `1 << 0`-byte block, which `dnode_allocate` rounds up to `SPA_MINBLOCKSIZE`), and each time
//!   an add finds every slot used the block grows by **another 512 bytes** (not doubling:
//!   `newsz = db_size + SPA_MINBLOCKSIZE`, OpenZFS module/zfs/zap_impl.c `zap_lock_impl`) until
//!   the next size would pass `zap_get_micro_max_size()` (128 KiB by default, at most 1 MiB;
//!   module/zfs/zap_micro.c); then the object becomes fat. So `n` entries take the smallest
//!   multiple of 512 bytes with at least `n + 1` 64-byte slots. Such a block size is legal
//!   because the object has one block only (`dn_datablkszsec` counts 512-byte sectors).
//! * **fat ZAP** otherwise, with `1 << fat_block_shift`-byte blocks: block 0 is the header,
//!   blocks `1..=L` the leaves (in hash order), and, when the pointer table is too big for the
//!   second half of block 0, the table blocks after the leaves (`zt_blk = L + 1`). That is the
//!   order OpenZFS allocates them in: the first leaf at block 1 (`fzap_upgrade`), the table
//!   from `zap_freeblk` when it first outgrows block 0 (`zap_grow_ptrtbl`); see the layout
//!   comment in include/sys/zap_impl.h. Leaves come from splitting the hash space: a prefix
//!   whose entries do not fit one leaf is split by one more hash bit, as `zap_expand_leaf`
//!   would, so the leaves form a complete binary trie and a leaf with a short prefix owns
//!   several table slots. The table's `zt_shift` is the longest prefix, but never less than
//!   the embedded table's `block_shift - 4`. An external table has `2^(zt_shift - (bs - 3))`
//!   blocks, `zt_nextblk = zt_blks_copied = 0` (no resize under way). Prefixes stop at
//!   `zap_hashbits - 2` bits, where OpenZFS stops growing the table (`ENOSPC`).
//!
//! Collision differentiators: names are taken in sorted order; each gets the lowest cd not yet
//! used by an earlier name of the same masked hash (`mze_find_unused_cd`, `zap_entry_create`
//! with `ZAP_NEED_CD`), i.e. 0, 1, 2, ... per hash.
//!
//! Keys are strings (stored with their NUL) unless `ZAP_FLAG_UINT64_KEY` is set; then a
//! [`BuildEntry::name`] is the key words as big-endian bytes, the form `rzfs-zap` lists them in.
//! With non-zero `normflags` names hash by their normalized form ([`super::norm`]).

use std::collections::HashMap;

use super::{
    build_leaf, embedded_ptrtbl_shift, encode_fat_header_block, zap_hash, zap_hashbits, zap_maxcd,
    FatZapHeader, LeafGeometry, MicroZap, MzapEntry, ZapKey, ZapLeafEntry, ZapName, ZapTablePhys,
    MZAP_ENT_LEN, MZAP_NAME_LEN, ZAP_FLAG_HASH64, ZAP_FLAG_PRE_HASHED_KEY, ZAP_FLAG_UINT64_KEY,
    ZAP_LEAF_ARRAY_BYTES,
};
use crate::bytes::ByteOrder;
use crate::error::{Error, Result};

/// `ZAP_MAXNAMELEN`: longest key in bytes, string NUL included (include/sys/fs/zfs.h).
/// The 1024-byte `ZAP_MAXNAMELEN_NEW` of long-name directories is not supported here.
pub const ZAP_MAXNAMELEN: usize = 256;
/// `ZAP_MAXVALUELEN`: longest value in bytes, `int_size * values.len()` (include/sys/fs/zfs.h).
pub const ZAP_MAXVALUELEN: usize = 8 * 1024;
/// `SPA_MINBLOCKSIZE`: a new ZAP object's block size, and the micro ZAP growth step.
pub const MZAP_GROWTH_STEP: usize = 512;
/// `MZAP_MAX_SIZE`: hard cap of a micro ZAP block (`mze_chunkid` is a u16), zap_micro.c.
pub const MZAP_MAX_SIZE: usize = 1 << 20;
/// `SPA_OLD_MAXBLOCKSIZE`: default `zap_micro_max_size`.
pub const MZAP_DEFAULT_MAX_SIZE: usize = 128 << 10;
/// `fzap_default_block_shift`: 16 KiB fat ZAP blocks (module/zfs/zap_fat.c).
pub const FZAP_DEFAULT_BLOCK_SHIFT: u32 = 14;
/// Longest leaf prefix / table shift this encoder makes, whatever the hash width: OpenZFS stops
/// at `zap_hashbits - 2` (26 for 28-bit hashes); capping HASH64 ZAPs there too keeps a pointer
/// table at most 2^26 slots (512 MiB) instead of 2^46.
pub const MAX_BUILD_PTRTBL_SHIFT: u32 = 26;

/// One entry to encode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildEntry {
    /// The key: string bytes without NUL, or for `ZAP_FLAG_UINT64_KEY` ZAPs the key words as
    /// big-endian bytes (a multiple of 8).
    pub name: Vec<u8>,
    /// Bytes per value integer: 1, 2, 4 or 8.
    pub int_size: u8,
    /// The value integers; each must fit in `int_size` bytes.
    pub values: Vec<u64>,
}

impl BuildEntry {
    /// An entry whose value is a single u64 (the only kind a micro ZAP holds).
    pub fn u64(name: &[u8], value: u64) -> BuildEntry {
        BuildEntry { name: name.to_vec(), int_size: 8, values: vec![value] }
    }

    /// An entry whose value is a byte string (`int_size` 1), e.g. a property string with its NUL.
    pub fn bytes(name: &[u8], value: &[u8]) -> BuildEntry {
        BuildEntry { name: name.to_vec(), int_size: 1, values: value.iter().map(|&b| u64::from(b)).collect() }
    }
}

/// How to encode the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZapBuildOpts {
    /// Hash salt (`mz_salt` / `zap_salt`); OpenZFS picks a random odd one at creation and it
    /// must stay the object's salt for life.
    pub salt: u64,
    /// Name normalization flags; only 0 is supported.
    pub normflags: u64,
    /// `ZAP_FLAG_*` of a fat ZAP; any flag makes the object fat, as `mzap_create_impl` does.
    pub zap_flags: u64,
    /// log2 of the fat ZAP block size, 9..=17 ([`FZAP_DEFAULT_BLOCK_SHIFT`] normally).
    pub fat_block_shift: u32,
    /// `zap_micro_max_size`: largest micro ZAP block in bytes (rounded up to 512, capped at
    /// 1 MiB; above 128 KiB the pool needs `large_microzap`, which is the caller's business).
    pub micro_max: usize,
    /// Encode as a fat ZAP even when a micro ZAP would do.
    pub force_fat: bool,
}

impl ZapBuildOpts {
    /// OpenZFS defaults for a plain ZAP with this salt.
    pub fn new(salt: u64) -> ZapBuildOpts {
        ZapBuildOpts {
            salt,
            normflags: 0,
            zap_flags: 0,
            fat_block_shift: FZAP_DEFAULT_BLOCK_SHIFT,
            micro_max: MZAP_DEFAULT_MAX_SIZE,
            force_fat: false,
        }
    }
}

/// The encoded object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapImage {
    /// The object's data block size (`dn_datablksz`): a multiple of 512 for a micro ZAP, a
    /// power of two for a fat one.
    pub block_size: usize,
    /// Blocks in block id order, each `block_size` bytes. A fat ZAP has `zap_freeblk` blocks.
    pub blocks: Vec<Vec<u8>>,
    /// Whether this is a micro ZAP (one block).
    pub micro: bool,
}

/// `U8_TEXTPREP_TOUPPER` (include/sys/u8_textprep.h): snapshot-name ZAPs hash names
/// upper-cased, as do the directories of case-insensitive and mixed file systems.
pub const U8_TEXTPREP_TOUPPER: u64 = super::norm::U8_TEXTPREP_TOUPPER;

/// The key a name is hashed by under `normflags` (`zap_normalize`).
pub fn norm_key(name: &[u8], normflags: u64) -> Result<Vec<u8>> {
    if !super::norm::valid_normflags(normflags) {
        return Err(Error::unsupported(
            "zap normalization",
            format!("name {:?} under normflags {normflags:#x}", show(name)),
        ));
    }
    Ok(super::norm::normalize(name, normflags))
}

/// Encodes `entries` (any order, names unique) as a whole ZAP object in `order`.
pub fn build_zap(entries: &[BuildEntry], opts: &ZapBuildOpts, order: ByteOrder) -> Result<ZapImage> {
    if !super::norm::valid_normflags(opts.normflags) {
        return Err(Error::unsupported("zap build", format!("normflags {:#x}", opts.normflags)));
    }
    let known = ZAP_FLAG_HASH64 | ZAP_FLAG_UINT64_KEY | ZAP_FLAG_PRE_HASHED_KEY;
    if opts.zap_flags & !known != 0 {
        return Err(Error::unsupported("zap build", format!("unknown zap_flags {:#x}", opts.zap_flags)));
    }
    let mut sorted: Vec<&BuildEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = sorted.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::corrupt("zap build", format!("duplicate name {:?}", show(&w[0].name))));
    }
    if let Some(img) = try_micro(&sorted, opts, order)? {
        return Ok(img);
    }
    build_fat(&sorted, opts, order)
}

/// A name for error messages (lossy, shortened).
fn show(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s.into_owned()
    }
}

/// Collision differentiators for keys with these masked hashes, in insertion order: each key
/// gets the lowest cd not used by an earlier key of the same hash. Fails once a hash has
/// `maxcd` keys ([`zap_maxcd`] is an exclusive bound).
pub fn assign_cds(hashes: &[u64], maxcd: u32) -> Result<Vec<u32>> {
    let mut next: HashMap<u64, u32> = HashMap::new();
    let mut out = Vec::with_capacity(hashes.len());
    for &h in hashes {
        let cd = next.entry(h).or_insert(0);
        if *cd >= maxcd {
            return Err(Error::corrupt("zap build", format!("more than {maxcd} names share hash {h:#x}")));
        }
        out.push(*cd);
        *cd += 1;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Micro ZAP
// ---------------------------------------------------------------------------------------------

/// The effective micro ZAP size limit for a `zap_micro_max_size` of `micro_max` bytes: rounded
/// up to 512, capped at 1 MiB (`zap_get_micro_max_size`). A new object's first 512-byte block
/// exists whatever the limit, since growth is only checked when a full block is added to.
pub fn micro_max_size(micro_max: usize) -> usize {
    let rounded = micro_max.div_ceil(MZAP_GROWTH_STEP).saturating_mul(MZAP_GROWTH_STEP);
    rounded.clamp(MZAP_GROWTH_STEP, MZAP_MAX_SIZE)
}

/// The block size OpenZFS grows a micro ZAP to for `n` entries: the smallest multiple of 512
/// with at least `n + 1` slots (slot 0 is the header).
pub fn micro_block_size(n: usize) -> usize {
    let bytes = n.saturating_add(1).saturating_mul(MZAP_ENT_LEN);
    bytes.div_ceil(MZAP_GROWTH_STEP).saturating_mul(MZAP_GROWTH_STEP).max(MZAP_GROWTH_STEP)
}

/// Chunks an entry takes in a leaf: entry chunk, name array, value array
/// (`zap_entry_create`; `MZAP_ENT_CHUNKS` is the micro worst case).
fn leaf_chunks(name_bytes: usize, value_bytes: usize) -> usize {
    1 + name_bytes.div_ceil(ZAP_LEAF_ARRAY_BYTES) + value_bytes.div_ceil(ZAP_LEAF_ARRAY_BYTES)
}

/// Whether a micro ZAP may hold this entry (`zap_add_impl`'s test before `mzap_addent`). Empty
/// names are excluded too: an empty `mze_name` marks a free slot.
fn micro_entry_ok(e: &BuildEntry) -> bool {
    e.int_size == 8
        && e.values.len() == 1
        && !e.name.is_empty()
        && e.name.len() < MZAP_NAME_LEN
        && !e.name.contains(&0)
}

/// Encodes a micro ZAP, or says `None` when OpenZFS would have made the object fat.
fn try_micro(sorted: &[&BuildEntry], opts: &ZapBuildOpts, order: ByteOrder) -> Result<Option<ZapImage>> {
    if opts.force_fat || opts.zap_flags != 0 || !sorted.iter().all(|e| micro_entry_ok(e)) {
        return Ok(None);
    }
    let size = micro_block_size(sorted.len());
    if size > micro_max_size(opts.micro_max) {
        return Ok(None);
    }
    let hashes = sorted
        .iter()
        .map(|e| zap_hash(opts.salt, ZapKey::Str(&norm_key(&e.name, opts.normflags)?), 0))
        .collect::<Result<Vec<u64>>>()?;
    // `mze_canfit_fzap_leaf`: all names of one hash must still fit one default-size fat leaf,
    // counting each at its worst case (49-byte name, one u64).
    let per_entry = leaf_chunks(MZAP_NAME_LEN, 8);
    let leaf_chunks_def = LeafGeometry::new(FZAP_DEFAULT_BLOCK_SHIFT)?.num_chunks;
    let mut per_hash: HashMap<u64, usize> = HashMap::new();
    for &h in &hashes {
        let n = per_hash.entry(h).or_insert(0);
        *n += 1;
        if *n * per_entry >= leaf_chunks_def {
            return Ok(None);
        }
    }
    let cds = assign_cds(&hashes, zap_maxcd(0))?;
    let mut mz = MicroZap { salt: opts.salt, normflags: opts.normflags, entries: Vec::new() };
    for (chunk, (e, cd)) in sorted.iter().zip(cds).enumerate() {
        let value =
            *e.values.first().ok_or_else(|| Error::corrupt("zap build", "micro entry without value"))?;
        mz.entries.push(MzapEntry { chunk, value, cd, name: e.name.clone() });
    }
    let block = mz.encode(size, order)?;
    Ok(Some(ZapImage { block_size: size, blocks: vec![block], micro: true }))
}

// ---------------------------------------------------------------------------------------------
// Fat ZAP
// ---------------------------------------------------------------------------------------------

/// An entry ready for a leaf, plus the chunks it takes.
struct Prepared {
    entry: ZapLeafEntry,
    chunks: usize,
}

/// The key of `e` as the leaf stores it, checked against `ZAP_MAXNAMELEN`.
fn leaf_key(e: &BuildEntry, zap_flags: u64) -> Result<(ZapName, usize)> {
    let what = "zap build";
    if zap_flags & ZAP_FLAG_UINT64_KEY != 0 {
        if e.name.is_empty() || !e.name.len().is_multiple_of(8) || e.name.len() > ZAP_MAXNAMELEN {
            return Err(Error::corrupt(
                what,
                format!("u64 key of {} bytes is not 1..=32 big-endian words", e.name.len()),
            ));
        }
        let words = e.name.chunks_exact(8).map(|c| c.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)));
        return Ok((ZapName::U64(words.collect()), e.name.len()));
    }
    if e.name.contains(&0) {
        return Err(Error::corrupt(what, format!("name {:?} contains a NUL byte", show(&e.name))));
    }
    if e.name.len() + 1 > ZAP_MAXNAMELEN {
        return Err(Error::corrupt(
            what,
            format!("name of {} bytes exceeds ZAP_MAXNAMELEN ({ZAP_MAXNAMELEN} with NUL)", e.name.len()),
        ));
    }
    Ok((ZapName::Str(e.name.clone()), e.name.len() + 1))
}

/// The value array as stored: big-endian integers of `int_size` bytes (`zap_leaf_array_create`).
fn leaf_value(e: &BuildEntry) -> Result<Vec<u8>> {
    let what = "zap build";
    let size = usize::from(e.int_size);
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(Error::corrupt(
            what,
            format!("{:?}: int_size {size} is not 1, 2, 4 or 8", show(&e.name)),
        ));
    }
    let len = e.values.len().saturating_mul(size);
    if len > ZAP_MAXVALUELEN {
        return Err(Error::corrupt(
            what,
            format!("{:?}: value of {len} bytes exceeds ZAP_MAXVALUELEN ({ZAP_MAXVALUELEN})", show(&e.name)),
        ));
    }
    let mut out = Vec::with_capacity(len);
    for &v in &e.values {
        if size < 8 && v >> (8 * size) != 0 {
            return Err(Error::corrupt(
                what,
                format!("{:?}: value {v:#x} does not fit {size} bytes", show(&e.name)),
            ));
        }
        out.extend_from_slice(&v.to_be_bytes()[8 - size..]);
    }
    Ok(out)
}

/// Validates, hashes and assigns cds to the sorted entries; returns them sorted by (hash, cd).
fn prepare(sorted: &[&BuildEntry], opts: &ZapBuildOpts, geom: &LeafGeometry) -> Result<Vec<Prepared>> {
    let mut keyed = Vec::with_capacity(sorted.len());
    for e in sorted {
        let (name, name_bytes) = leaf_key(e, opts.zap_flags)?;
        let value = leaf_value(e)?;
        let chunks = leaf_chunks(name_bytes, value.len());
        if chunks > geom.num_chunks {
            return Err(Error::corrupt(
                "zap build",
                format!(
                    "{:?} needs {chunks} chunks, a {}-byte leaf has {}",
                    show(&e.name),
                    geom.block_size(),
                    geom.num_chunks
                ),
            ));
        }
        let hash = match &name {
            ZapName::Str(b) => {
                zap_hash(opts.salt, ZapKey::Str(&norm_key(b, opts.normflags)?), opts.zap_flags)?
            }
            other => zap_hash(opts.salt, other.as_key(), opts.zap_flags)?,
        };
        keyed.push((name, hash, value, chunks, e.int_size));
    }
    let hashes: Vec<u64> = keyed.iter().map(|k| k.1).collect();
    let cds = assign_cds(&hashes, zap_maxcd(opts.zap_flags))?;
    let mut out: Vec<Prepared> = keyed
        .into_iter()
        .zip(cds)
        .map(|((name, hash, value, chunks, value_intlen), cd)| Prepared {
            entry: ZapLeafEntry { chunk: 0, hash, cd, name, value_intlen, value },
            chunks,
        })
        .collect();
    out.sort_by_key(|p| (p.entry.hash, p.entry.cd));
    Ok(out)
}

/// One planned leaf: its hash prefix and the range of (hash-sorted) entries it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeafPlan {
    prefix: u64,
    prefix_len: u32,
    start: usize,
    end: usize,
}

/// Splits the hash space into leaves whose entries fit `capacity` chunks, depth first, so the
/// leaves come out in ascending prefix order. `chunks_before[i]` is the chunk total of entries
/// `0..i`.
fn plan_leaves(ents: &[Prepared], capacity: usize, max_prefix: u32) -> Result<Vec<LeafPlan>> {
    let mut chunks_before = Vec::with_capacity(ents.len() + 1);
    let mut total = 0usize;
    chunks_before.push(0);
    for p in ents {
        total += p.chunks;
        chunks_before.push(total);
    }
    let mut out = Vec::new();
    let mut stack = vec![LeafPlan { prefix: 0, prefix_len: 0, start: 0, end: ents.len() }];
    while let Some(p) = stack.pop() {
        if chunks_before[p.end] - chunks_before[p.start] <= capacity {
            out.push(p);
            continue;
        }
        if p.prefix_len >= max_prefix {
            return Err(Error::corrupt(
                "zap build",
                format!(
                    "{} entries share the {}-bit hash prefix {:#x} and do not fit one leaf",
                    p.end - p.start,
                    p.prefix_len,
                    p.prefix
                ),
            ));
        }
        // Entries of one prefix are sorted by hash, so the next bit is 0s then 1s.
        let bit = 63 - p.prefix_len;
        let mid = p.start + ents[p.start..p.end].partition_point(|e| (e.entry.hash >> bit) & 1 == 0);
        let len = p.prefix_len + 1;
        stack.push(LeafPlan { prefix: (p.prefix << 1) | 1, prefix_len: len, start: mid, end: p.end });
        stack.push(LeafPlan { prefix: p.prefix << 1, prefix_len: len, start: p.start, end: mid });
    }
    Ok(out)
}

/// Encodes a fat ZAP: header, leaves, then (if needed) the external pointer table.
fn build_fat(sorted: &[&BuildEntry], opts: &ZapBuildOpts, order: ByteOrder) -> Result<ZapImage> {
    let bs = opts.fat_block_shift;
    let geom = LeafGeometry::new(bs)?;
    let ents = prepare(sorted, opts, &geom)?;
    let max_prefix = (zap_hashbits(opts.zap_flags) - 2).min(MAX_BUILD_PTRTBL_SHIFT);
    let plans = plan_leaves(&ents, geom.num_chunks, max_prefix)?;
    let emb_shift = embedded_ptrtbl_shift(bs);
    let shift = plans.iter().map(|p| p.prefix_len).max().unwrap_or(0).max(emb_shift);
    let nleaves = plans.len() as u64;
    let mut blocks = Vec::with_capacity(plans.len() + 1);
    blocks.push(Vec::new()); // block 0, the header, is filled in last
    for p in &plans {
        let entries: Vec<ZapLeafEntry> = ents[p.start..p.end].iter().map(|e| e.entry.clone()).collect();
        // lh_flags: ZLF_ENTRIES_CDSORTED is set only for normalized ZAPs (zap_leaf_init).
        let prefix_len = u16::try_from(p.prefix_len).map_err(|_| Error::corrupt("zap build", "prefix"))?;
        let lflags = if opts.normflags != 0 { super::leaf::ZLF_ENTRIES_CDSORTED } else { 0 };
        blocks.push(build_leaf(bs, order, p.prefix, prefix_len, lflags, &entries)?);
    }
    let mut hdr = FatZapHeader {
        ptrtbl: ZapTablePhys::default(),
        freeblk: 1 + nleaves,
        num_leafs: nleaves,
        num_entries: ents.len() as u64,
        salt: opts.salt,
        normflags: opts.normflags,
        flags: opts.zap_flags,
    };
    if shift == emb_shift {
        let ptrs = fill_ptrtbl(&plans, shift)?;
        blocks[0] = encode_fat_header_block(&hdr, bs, order, &ptrs)?;
    } else {
        let per_block_shift = bs - 3;
        let numblks = 1u64 << (shift - per_block_shift);
        hdr.ptrtbl =
            ZapTablePhys { blk: 1 + nleaves, numblks, shift: u64::from(shift), nextblk: 0, blks_copied: 0 };
        hdr.freeblk = 1 + nleaves + numblks;
        blocks.extend(external_ptrtbl(&plans, shift, bs, order)?);
        let mut b0 = vec![0u8; geom.block_size()];
        hdr.encode_into(&mut b0, order)?;
        blocks[0] = b0;
    }
    Ok(ZapImage { block_size: geom.block_size(), blocks, micro: false })
}

/// The table slots (`2^shift` of them) of leaves `plans`: leaf `i` is block `i + 1` and owns the
/// `2^(shift - prefix_len)` slots starting at `prefix << (shift - prefix_len)`.
fn for_each_slot_run(
    plans: &[LeafPlan],
    shift: u32,
    mut f: impl FnMut(u64, u64, u64) -> Result<()>,
) -> Result<()> {
    for (i, p) in plans.iter().enumerate() {
        let span = shift
            .checked_sub(p.prefix_len)
            .ok_or_else(|| Error::corrupt("zap build", "leaf prefix longer than the table shift"))?;
        f(p.prefix << span, 1u64 << span, i as u64 + 1)?;
    }
    Ok(())
}

/// The embedded table of `2^shift` slots.
fn fill_ptrtbl(plans: &[LeafPlan], shift: u32) -> Result<Vec<u64>> {
    let mut ptrs = vec![0u64; 1usize << shift];
    for_each_slot_run(plans, shift, |first, n, blkid| {
        let run = usize::try_from(first)
            .ok()
            .zip(usize::try_from(n).ok())
            .and_then(|(a, n)| ptrs.get_mut(a..a.checked_add(n)?))
            .ok_or_else(|| Error::corrupt("zap build", "pointer table slot out of range"))?;
        run.fill(blkid);
        Ok(())
    })?;
    Ok(ptrs)
}

/// The external table: `2^(shift - (bs - 3))` blocks of `2^(bs - 3)` u64 slots in `order`.
fn external_ptrtbl(plans: &[LeafPlan], shift: u32, bs: u32, order: ByteOrder) -> Result<Vec<Vec<u8>>> {
    let per_block_shift = bs - 3;
    let numblks = 1usize << (shift - per_block_shift);
    let mut tbl = vec![vec![0u8; 1usize << bs]; numblks];
    let mask = (1u64 << per_block_shift) - 1;
    for_each_slot_run(plans, shift, |first, n, blkid| {
        for slot in first..first + n {
            let blk = usize::try_from(slot >> per_block_shift).ok().and_then(|b| tbl.get_mut(b));
            let blk = blk.ok_or_else(|| Error::corrupt("zap build", "pointer table slot out of range"))?;
            order.put_u64(blk, ((slot & mask) as usize) * 8, blkid);
        }
        Ok(())
    })?;
    Ok(tbl)
}

#[cfg(test)]
mod tests {
    use super::super::{
        block_kind, embedded_ptrtbl_entry, ptrtbl_block_entry, KeyKind, PtrTblSlot, ZapBlockKind, ZapLeaf,
    };
    use super::*;
    use proptest::prelude::*;

    const ORDERS: [ByteOrder; 2] = [ByteOrder::Little, ByteOrder::Big];

    fn opts() -> ZapBuildOpts {
        ZapBuildOpts::new(0x1234_5678_9abc_def1)
    }

    fn names(n: usize) -> Vec<BuildEntry> {
        (0..n).map(|i| BuildEntry::u64(format!("file-{i:06}").as_bytes(), i as u64 * 7 + 1)).collect()
    }

    fn sorted(mut v: Vec<BuildEntry>) -> Vec<BuildEntry> {
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn leaf_to_build(e: ZapLeafEntry) -> BuildEntry {
        let values = e.values_u64();
        let name = match e.name {
            ZapName::Str(s) => s,
            ZapName::U64(w) => w.iter().flat_map(|x| x.to_be_bytes()).collect(),
        };
        BuildEntry { name, int_size: e.value_intlen, values }
    }

    /// Checks that every name's cd is its rank among the names of its hash, in name order.
    fn check_cds(mut got: Vec<(Vec<u8>, u64, u32)>) {
        got.sort();
        let mut next: HashMap<u64, u32> = HashMap::new();
        for (name, h, cd) in got {
            let want = next.entry(h).or_insert(0);
            assert_eq!(cd, *want, "cd of {name:?}");
            *want += 1;
        }
    }

    /// Lists the object the way `rzfs-zap` does (every leaf block found by its type), checking
    /// header counts, the pointer table and cds on the way. Returns entries sorted by name.
    fn read_back(img: &ZapImage, o: &ZapBuildOpts, order: ByteOrder) -> Vec<BuildEntry> {
        assert!(img.blocks.iter().all(|b| b.len() == img.block_size));
        let b0 = &img.blocks[0];
        if img.micro {
            assert_eq!(img.blocks.len(), 1);
            let mz = MicroZap::parse(b0, order).unwrap();
            assert_eq!((mz.salt, mz.normflags), (o.salt, o.normflags));
            check_cds(mz.entries.iter().map(|e| (e.name.clone(), mz.hash_of(&e.name), e.cd)).collect());
            return sorted(mz.entries.iter().map(|e| BuildEntry::u64(&e.name, e.value)).collect());
        }
        let bs = img.block_size.trailing_zeros();
        let hdr = FatZapHeader::parse(b0, order).unwrap();
        assert_eq!((hdr.salt, hdr.normflags, hdr.flags), (o.salt, o.normflags, o.zap_flags));
        assert_eq!(hdr.freeblk, img.blocks.len() as u64);
        assert_eq!((hdr.ptrtbl.nextblk, hdr.ptrtbl.blks_copied), (0, 0));
        let kind = KeyKind::from_zap_flags(hdr.flags);
        let (mut out, mut leaves, mut cds) = (Vec::new(), 0, Vec::new());
        for b in &img.blocks[1..] {
            if block_kind(b, order) == Ok(ZapBlockKind::Leaf) {
                leaves += 1;
                let leaf = ZapLeaf::parse(b, order, bs).unwrap();
                let ents = leaf.entries(kind).unwrap();
                assert_eq!(usize::from(leaf.header.nentries), ents.len());
                for e in ents {
                    assert!(leaf.header.covers(e.hash));
                    let b = leaf_to_build(e.clone());
                    cds.push((b.name.clone(), e.hash, e.cd));
                    out.push(b);
                }
            }
        }
        assert_eq!((hdr.num_leafs, hdr.num_entries), (leaves, out.len() as u64));
        check_cds(cds);
        check_ptrtbl(img, &hdr, order);
        sorted(out)
    }

    /// Every table slot names a leaf whose prefix covers the slot.
    fn check_ptrtbl(img: &ZapImage, hdr: &FatZapHeader, order: ByteOrder) {
        let bs = img.block_size.trailing_zeros();
        let shift = hdr.ptrtbl.shift;
        assert!(shift >= u64::from(bs - 4));
        assert_eq!(hdr.uses_embedded_ptrtbl(), shift == u64::from(bs - 4));
        for slot in 0..(1u64 << shift) {
            let hash = slot << (64 - shift);
            let blk = leaf_blkid(img, hdr, hash, order);
            let leaf = ZapLeaf::parse(&img.blocks[blk as usize], order, bs).unwrap();
            assert!(leaf.header.covers(hash), "slot {slot} -> block {blk}");
            assert!(u64::from(leaf.header.prefix_len) <= shift);
        }
    }

    fn leaf_blkid(img: &ZapImage, hdr: &FatZapHeader, hash: u64, order: ByteOrder) -> u64 {
        let bs = img.block_size.trailing_zeros();
        match hdr.ptrtbl_slot(hash, bs).unwrap() {
            PtrTblSlot::Embedded { index } => embedded_ptrtbl_entry(&img.blocks[0], order, index).unwrap(),
            PtrTblSlot::External { blkid, word } => {
                ptrtbl_block_entry(&img.blocks[blkid as usize], order, word).unwrap()
            }
        }
    }

    /// Looks `name` up the way `rzfs-zap` does: hash, pointer table, leaf.
    fn lookup(img: &ZapImage, order: ByteOrder, name: &[u8]) -> Option<BuildEntry> {
        if img.micro {
            let mz = MicroZap::parse(&img.blocks[0], order).unwrap();
            return mz.lookup(name).unwrap().map(|e| BuildEntry::u64(&e.name, e.value));
        }
        let hdr = FatZapHeader::parse(&img.blocks[0], order).unwrap();
        let words: Vec<u64>;
        let key = if hdr.flags & ZAP_FLAG_UINT64_KEY != 0 {
            words = name.chunks_exact(8).map(|c| u64::from_be_bytes(c.try_into().unwrap())).collect();
            ZapKey::U64(&words)
        } else {
            ZapKey::Str(name)
        };
        let hash = zap_hash(hdr.salt, key, hdr.flags).unwrap();
        let blk = leaf_blkid(img, &hdr, hash, order);
        let bs = img.block_size.trailing_zeros();
        let leaf = ZapLeaf::parse(&img.blocks[blk as usize], order, bs).unwrap();
        leaf.lookup(key, hash).unwrap().map(leaf_to_build)
    }

    fn round_trip(entries: &[BuildEntry], o: &ZapBuildOpts, order: ByteOrder) -> ZapImage {
        let img = build_zap(entries, o, order).unwrap();
        assert_eq!(read_back(&img, o, order), sorted(entries.to_vec()));
        for e in entries {
            assert_eq!(lookup(&img, order, &e.name).as_ref(), Some(e));
        }
        assert_eq!(lookup(&img, order, b"no such name at all"), None);
        img
    }

    #[test]
    fn micro_sizes_follow_openzfs_growth() {
        assert_eq!(micro_block_size(0), 512);
        assert_eq!(micro_block_size(7), 512);
        assert_eq!(micro_block_size(8), 1024);
        assert_eq!(micro_block_size(2047), 128 << 10);
        assert_eq!(micro_max_size(0), 512);
        assert_eq!(micro_max_size(1000), 1024);
        assert_eq!(micro_max_size(usize::MAX), MZAP_MAX_SIZE);
        for order in ORDERS {
            for (n, size) in [(0, 512), (1, 512), (7, 512), (8, 1024), (10, 1024), (2047, 128 << 10)] {
                let img = round_trip(&names(n), &opts(), order);
                assert!(img.micro, "{n} entries");
                assert_eq!((img.block_size, img.blocks.len()), (size, 1));
            }
        }
    }

    #[test]
    fn empty_micro_is_what_zap_create_makes() {
        let img = build_zap(&[], &opts(), ByteOrder::Little).unwrap();
        let mut want = vec![0u8; 512];
        ByteOrder::Little.put_u64(&mut want, 0, super::super::ZBT_MICRO);
        ByteOrder::Little.put_u64(&mut want, 8, opts().salt);
        assert_eq!(img.blocks, vec![want]);
    }

    #[test]
    fn micro_limits_send_to_fat() {
        let o = opts();
        assert!(!round_trip(&names(2048), &o, ByteOrder::Little).micro);
        let big = ZapBuildOpts { micro_max: 1 << 20, ..o };
        let img = round_trip(&names(2048), &big, ByteOrder::Little);
        assert!(img.micro && img.block_size == 128 * 1024 + 512);
        let tiny = ZapBuildOpts { micro_max: 0, ..o };
        assert!(round_trip(&names(7), &tiny, ByteOrder::Little).micro);
        assert!(!round_trip(&names(8), &tiny, ByteOrder::Little).micro);
        let fat = |e: BuildEntry| !round_trip(&[BuildEntry::u64(b"a", 1), e], &o, ByteOrder::Big).micro;
        assert!(fat(BuildEntry::u64(&[b'n'; 50], 1)));
        assert!(!fat(BuildEntry::u64(&[b'n'; 49], 1)));
        assert!(fat(BuildEntry::u64(b"", 1)));
        assert!(fat(BuildEntry { name: b"two".to_vec(), int_size: 8, values: vec![1, 2] }));
        assert!(fat(BuildEntry { name: b"four".to_vec(), int_size: 4, values: vec![1] }));
        assert!(!round_trip(&names(3), &ZapBuildOpts { force_fat: true, ..o }, ByteOrder::Big).micro);
        let h64 = ZapBuildOpts { zap_flags: ZAP_FLAG_HASH64, ..o };
        assert!(!round_trip(&names(3), &h64, ByteOrder::Big).micro);
    }

    #[test]
    fn empty_fat_is_what_fzap_upgrade_makes() {
        let o = ZapBuildOpts { force_fat: true, ..opts() };
        let img = round_trip(&[], &o, ByteOrder::Little);
        assert_eq!(img.blocks.len(), 2);
        let hdr = FatZapHeader::parse(&img.blocks[0], ByteOrder::Little).unwrap();
        assert_eq!((hdr.freeblk, hdr.num_leafs, hdr.num_entries, hdr.ptrtbl.shift), (2, 1, 0, 10));
        assert!((0..1024).all(|i| embedded_ptrtbl_entry(&img.blocks[0], ByteOrder::Little, i) == Ok(1)));
        let leaf = ZapLeaf::parse(&img.blocks[1], ByteOrder::Little, 14).unwrap();
        assert_eq!((leaf.header.prefix_len, leaf.header.nfree, leaf.header.flags), (0, 638, 0));
    }

    #[test]
    fn name_lengths_and_multi_values() {
        let mut v: Vec<BuildEntry> =
            (1..=255).map(|n| BuildEntry::u64(&vec![b'a' + (n % 26) as u8; n], n as u64)).collect();
        v.push(BuildEntry::bytes(b"com.example:prop", b"some string value\0"));
        v.push(BuildEntry { name: b"u16s".to_vec(), int_size: 2, values: vec![0, 1, 0xffff] });
        v.push(BuildEntry { name: b"u32s".to_vec(), int_size: 4, values: vec![0xdead_beef; 30] });
        v.push(BuildEntry {
            name: b"u64s".to_vec(),
            int_size: 8,
            values: (0..100).map(|i| u64::MAX / 99 * i).collect(),
        });
        v.push(BuildEntry { name: b"empty".to_vec(), int_size: 8, values: vec![] });
        v.push(BuildEntry::u64(b"", 42));
        v.push(BuildEntry::bytes(b"max value", &[7u8; ZAP_MAXVALUELEN]));
        for order in ORDERS {
            let img = round_trip(&v, &opts(), order);
            assert!(!img.micro && img.block_size == 1 << 14);
        }
    }

    #[test]
    fn bad_entries_are_errors() {
        let o = opts();
        let bad = |e: BuildEntry| build_zap(&[BuildEntry::u64(b"ok", 1), e], &o, ByteOrder::Little).is_err();
        assert!(bad(BuildEntry::u64(&[b'x'; 256], 1)));
        assert!(bad(BuildEntry::u64(b"nul\0inside", 1)));
        assert!(bad(BuildEntry::u64(b"ok", 2)));
        assert!(bad(BuildEntry { name: b"i3".to_vec(), int_size: 3, values: vec![1] }));
        assert!(bad(BuildEntry { name: b"i0".to_vec(), int_size: 0, values: vec![] }));
        assert!(bad(BuildEntry { name: b"wide".to_vec(), int_size: 1, values: vec![256] }));
        assert!(bad(BuildEntry { name: b"wide".to_vec(), int_size: 4, values: vec![1 << 32] }));
        assert!(bad(BuildEntry::bytes(b"too big", &[1u8; ZAP_MAXVALUELEN + 1])));
        // An 8 KiB value fits a 16 KiB leaf but not a 4 KiB one.
        let v = [BuildEntry::bytes(b"big", &[1u8; ZAP_MAXVALUELEN])];
        assert!(build_zap(&v, &ZapBuildOpts { fat_block_shift: 12, ..o }, ByteOrder::Little).is_err());
        for shift in [8, 18, 0, u32::MAX] {
            let o2 = ZapBuildOpts { fat_block_shift: shift, force_fat: true, ..o };
            assert!(build_zap(&[], &o2, ByteOrder::Little).is_err());
        }
        assert!(build_zap(&[], &ZapBuildOpts { normflags: 1, ..o }, ByteOrder::Little).is_err());
        assert!(build_zap(&[], &ZapBuildOpts { zap_flags: 1 << 9, ..o }, ByteOrder::Little).is_err());
        let pre = ZapBuildOpts { zap_flags: ZAP_FLAG_PRE_HASHED_KEY, ..o };
        assert!(build_zap(&[BuildEntry::u64(b"s", 1)], &pre, ByteOrder::Little).is_err());
    }

    #[test]
    fn cds_count_up_per_hash() {
        let h = [5u64 << 40, 7 << 40, 5 << 40, 5 << 40, 7 << 40, 9 << 40];
        assert_eq!(assign_cds(&h, u32::MAX).unwrap(), vec![0, 0, 1, 2, 1, 0]);
        assert!(assign_cds(&h, 2).is_err());
        assert_eq!(assign_cds(&h, 3).unwrap()[3], 2);
        assert_eq!(assign_cds(&[], 0).unwrap(), Vec::<u32>::new());
    }

    /// Prepared entries with given hashes (bypassing the hash function), cds assigned.
    fn with_hashes(hashes: &[u64]) -> Vec<Prepared> {
        let cds = assign_cds(hashes, u32::MAX).unwrap();
        let mut ents: Vec<Prepared> = hashes
            .iter()
            .zip(&cds)
            .enumerate()
            .map(|(i, (&hash, &cd))| {
                let name = ZapName::Str(format!("n{i}").into_bytes());
                Prepared { entry: ZapLeafEntry::with_u64s(name, hash, cd, &[i as u64]), chunks: 3 }
            })
            .collect();
        ents.sort_by_key(|p| (p.entry.hash, p.entry.cd));
        ents
    }

    /// Forced collisions through the fat-ZAP planner and leaf writer: equal hashes share a leaf,
    /// get cds 0, 1, ... and are found by (name, hash); too many of one hash is an error.
    #[test]
    fn colliding_hashes_share_a_leaf() {
        let geom = LeafGeometry::new(9).unwrap(); // 18 chunks: 6 three-chunk entries
        let hashes: Vec<u64> = (0..40u64).map(|i| (i % 8) << 61).collect();
        let ents = with_hashes(&hashes);
        let plans = plan_leaves(&ents, geom.num_chunks, 26).unwrap();
        assert_eq!(plans.len(), 8);
        for (i, p) in plans.iter().enumerate() {
            assert_eq!((p.prefix, p.prefix_len), (i as u64, 3));
            let group = &ents[p.start..p.end];
            assert_eq!(group.iter().map(|e| e.entry.cd).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
            assert!(group.iter().all(|e| e.entry.hash == (i as u64) << 61));
            let entries: Vec<ZapLeafEntry> = group.iter().map(|p| p.entry.clone()).collect();
            let blk = build_leaf(9, ByteOrder::Big, p.prefix, 3, 0, &entries).unwrap();
            let leaf = ZapLeaf::parse(&blk, ByteOrder::Big, 9).unwrap();
            for e in &entries {
                let ZapName::Str(n) = &e.name else { unreachable!() };
                let got = leaf.lookup(ZapKey::Str(n), e.hash).unwrap().unwrap();
                assert_eq!((got.cd, got.values_u64()), (e.cd, e.values_u64()));
            }
        }
        // Seven entries of one hash need 21 chunks: no prefix split can separate them.
        let ents = with_hashes(&[3 << 36; 7]);
        assert!(plan_leaves(&ents, geom.num_chunks, 26).is_err());
        // Six fit exactly; an empty ZAP is one leaf.
        assert_eq!(plan_leaves(&with_hashes(&[3 << 36; 6]), geom.num_chunks, 26).unwrap().len(), 1);
        assert_eq!(plan_leaves(&[], geom.num_chunks, 26).unwrap().len(), 1);
    }

    /// Two entries that only fit apart, with hashes equal in their top 20 bits: the planner
    /// splits 21 levels deep, leaving empty siblings, and the table grows to match.
    #[test]
    fn deep_split_makes_empty_siblings() {
        let ents = with_hashes(&[0x1234_5000_0000_0000, 0x1234_5800_0000_0000]);
        let plans = plan_leaves(&ents, 5, 26).unwrap();
        assert_eq!(plans.len(), 22);
        assert_eq!(plans.iter().map(|p| p.end - p.start).sum::<usize>(), 2);
        assert!(plans.iter().all(|p| p.prefix_len <= 21));
        let ptrs = fill_ptrtbl(&plans, 21).unwrap();
        assert!(ptrs.iter().all(|b| (1..=22).contains(b)));
        assert!(plan_leaves(&ents, 5, 20).is_err());
    }

    #[test]
    fn ten_thousand_entries() {
        for order in ORDERS {
            let v = names(10_000);
            let img = round_trip(&v, &opts(), order);
            let hdr = FatZapHeader::parse(&img.blocks[0], order).unwrap();
            assert!(hdr.uses_embedded_ptrtbl());
            // Smaller blocks push the same set into an external table.
            let o = ZapBuildOpts { fat_block_shift: 10, ..opts() };
            let img = round_trip(&v, &o, order);
            let hdr = FatZapHeader::parse(&img.blocks[0], order).unwrap();
            assert!(!hdr.uses_embedded_ptrtbl());
            assert_eq!(hdr.ptrtbl.blk, 1 + hdr.num_leafs);
            assert_eq!(hdr.ptrtbl.numblks << 7, 1 << hdr.ptrtbl.shift);
        }
    }

    #[test]
    fn hundred_thousand_entries_external_table() {
        let order = ByteOrder::Little;
        let v: Vec<BuildEntry> = (0..100_000u64)
            .map(|i| BuildEntry { name: format!("obj{i}").into_bytes(), int_size: 8, values: vec![i; 8] })
            .collect();
        let img = round_trip(&v, &opts(), order);
        let hdr = FatZapHeader::parse(&img.blocks[0], order).unwrap();
        assert!(!hdr.uses_embedded_ptrtbl());
        assert_eq!(hdr.num_entries, 100_000);
        assert_eq!(hdr.ptrtbl.numblks << 11, 1 << hdr.ptrtbl.shift);
    }

    #[test]
    fn u64_keys_and_hash64() {
        let o = ZapBuildOpts { zap_flags: ZAP_FLAG_HASH64 | ZAP_FLAG_UINT64_KEY, ..opts() };
        let key = |w: &[u64]| w.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        let v: Vec<BuildEntry> = (0..3000u64)
            .map(|i| BuildEntry { name: key(&[i, !i, 7]), int_size: 8, values: vec![i; 5] })
            .collect();
        for order in ORDERS {
            round_trip(&v, &o, order);
            let pre = ZapBuildOpts { zap_flags: o.zap_flags | ZAP_FLAG_PRE_HASHED_KEY, ..o };
            let v2: Vec<BuildEntry> = (0..500u64)
                .map(|i| BuildEntry {
                    name: key(&[i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i]),
                    int_size: 1,
                    values: vec![1, 2],
                })
                .collect();
            round_trip(&v2, &pre, order);
        }
        let bad = |name: Vec<u8>| {
            build_zap(&[BuildEntry { name, int_size: 8, values: vec![1] }], &o, ByteOrder::Little).is_err()
        };
        assert!(bad(vec![]));
        assert!(bad(vec![1; 9]));
        assert!(bad(vec![1; 264]));
        assert!(!bad(vec![1; 256]));
    }

    #[test]
    fn duplicates_are_refused_and_order_does_not_matter() {
        let o = opts();
        assert!(
            build_zap(&[BuildEntry::u64(b"a", 1), BuildEntry::u64(b"a", 2)], &o, ByteOrder::Little).is_err()
        );
        let mut v = names(500);
        let a = build_zap(&v, &ZapBuildOpts { force_fat: true, ..o }, ByteOrder::Little).unwrap();
        v.reverse();
        let b = build_zap(&v, &ZapBuildOpts { force_fat: true, ..o }, ByteOrder::Little).unwrap();
        assert_eq!(a, b);
    }

    fn arb_entry() -> impl Strategy<Value = BuildEntry> {
        let name = prop_oneof![
            proptest::collection::vec(b'a'..=b'z', 0..60),
            proptest::collection::vec(any::<u8>(), 0..300),
        ];
        let int_size = prop_oneof![Just(1u8), Just(2), Just(4), Just(8), Just(8), Just(3), Just(0)];
        let values = prop_oneof![
            proptest::collection::vec(0u64..256, 1..2),
            proptest::collection::vec(any::<u64>(), 0..40),
            proptest::collection::vec(0u64..256, 0..600),
        ];
        (name, int_size, values).prop_map(|(name, int_size, values)| BuildEntry { name, int_size, values })
    }

    fn arb_opts() -> impl Strategy<Value = ZapBuildOpts> {
        (any::<u64>(), 0u64..2, 0u64..8, 8u32..18, 0usize..4096, any::<bool>()).prop_map(
            |(salt, normflags, zap_flags, fat_block_shift, micro_max, force_fat)| ZapBuildOpts {
                salt,
                normflags,
                zap_flags,
                fat_block_shift,
                micro_max,
                force_fat,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        #[test]
        fn never_panics_and_round_trips(
            entries in proptest::collection::vec(arb_entry(), 0..12),
            o in arb_opts(),
            big in any::<bool>(),
        ) {
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            if let Ok(img) = build_zap(&entries, &o, order) {
                let got = read_back(&img, &o, order);
                prop_assert_eq!(&got, &sorted(entries.clone()));
                for e in &entries {
                    let found = lookup(&img, order, &e.name);
                    prop_assert_eq!(found.as_ref(), Some(e));
                }
            }
        }

        #[test]
        fn valid_mixed_sets_round_trip(
            raw in proptest::collection::btree_map(
                proptest::collection::vec(1u8..=255, 0..256),
                (0usize..4, proptest::collection::vec(any::<u64>(), 0..70)),
                0..60,
            ),
            salt in any::<u64>(),
            shift in 9u32..=17,
            hash64 in any::<bool>(),
            micro_max in 0usize..(1 << 21),
            big in any::<bool>(),
        ) {
            let entries: Vec<BuildEntry> = raw
                .into_iter()
                .map(|(name, (k, vals))| {
                    let int_size = 1u8 << k;
                    let mask = if k == 3 { u64::MAX } else { (1u64 << (8 << k)) - 1 };
                    BuildEntry { name, int_size, values: vals.into_iter().map(|v| v & mask).collect() }
                })
                .collect();
            let zap_flags = if hash64 { ZAP_FLAG_HASH64 } else { 0 };
            let o = ZapBuildOpts { fat_block_shift: shift, zap_flags, micro_max, ..ZapBuildOpts::new(salt) };
            let order = if big { ByteOrder::Big } else { ByteOrder::Little };
            let geom = LeafGeometry::new(shift).unwrap();
            let too_big = entries.iter().any(|e| {
                leaf_chunks(e.name.len() + 1, e.values.len() * usize::from(e.int_size)) > geom.num_chunks
            });
            match build_zap(&entries, &o, order) {
                Ok(img) => {
                    prop_assert!(!too_big || img.micro);
                    prop_assert_eq!(read_back(&img, &o, order), entries.clone());
                    for e in &entries {
                        let found = lookup(&img, order, &e.name);
                        prop_assert_eq!(found.as_ref(), Some(e));
                    }
                }
                Err(err) => prop_assert!(too_big || err.to_string().contains("do not fit one leaf"), "{}", err),
            }
        }

        #[test]
        fn valid_string_sets_always_build(
            names in proptest::collection::btree_set(proptest::collection::vec(1u8..=255, 0..255), 0..120),
            salt in any::<u64>(),
            shift in 11u32..=17,
            force_fat in any::<bool>(),
        ) {
            let entries: Vec<BuildEntry> = names
                .iter()
                .enumerate()
                .map(|(i, n)| BuildEntry { name: n.clone(), int_size: 8, values: vec![i as u64; i % 3 + 1] })
                .collect();
            let o = ZapBuildOpts { fat_block_shift: shift, force_fat, ..ZapBuildOpts::new(salt) };
            let img = build_zap(&entries, &o, ByteOrder::Little).unwrap();
            prop_assert_eq!(read_back(&img, &o, ByteOrder::Little), entries);
        }
    }
}
