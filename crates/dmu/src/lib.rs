//! # dmu — objsets, dnodes and their block trees (read side)
//!
//! An objset is an array of dnodes stored as the contents of its meta-dnode (object 0); each
//! dnode describes an object whose data is a tree of block pointers: `nlevels` levels, the
//! top level held in the dnode itself (`nblkptr` pointers), each indirect block holding
//! `2^(indblkshift-7)` pointers. OpenZFS `module/zfs/dmu.c`, `dbuf.c`, `dnode.c`.
//!
//! Invariants:
//! 1. Every block comes through `zio::Zio`, so it is checksum-verified before we parse it.
//! 2. Verified, decompressed blocks are cached in the byte-bounded `arc::BlockCache`, keyed by
//!    (vdev, offset, physical birth) of the first DVA: a key never names two contents.
//! 3. Walking a tree is bounded by `nlevels` (≤ 9); a hole anywhere reads as zeros.
//! 4. Nothing here writes. Transactions and dirty buffers arrive with the write path.
#![forbid(unsafe_code)]

use arc::BlockCache;
use ondisk::blkptr::{BlkPtr, BLKPTR_SIZE};
use ondisk::dnode::{DnodePhys, DNODE_SLOT_SIZE};
use ondisk::objset::ObjsetPhys;
use std::sync::Arc;
use zio::{Zio, ZioError};

pub mod traverse;
pub mod tx;
pub mod useracct;

/// Errors of the DMU.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DmuError {
    #[error(transparent)]
    Zio(#[from] ZioError),
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error("object {0} does not exist")]
    NoSuchObject(u64),
}

impl From<ondisk::Error> for DmuError {
    fn from(e: ondisk::Error) -> Self {
        DmuError::Corrupt { what: "on-disk structure", detail: e.to_string() }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, DmuError>;

/// Most threads one read fans out to.
pub const READ_THREADS_MAX: usize = 4;

/// Cache key: the identity of a block's first copy.
pub type BlockKey = (u64, u64, u64);

/// `primarycache` (`ZFS_CACHE_NONE/METADATA/ALL`): which blocks read for a dataset the
/// block cache keeps. OpenZFS (`DBUF_IS_CACHEABLE`) keeps every block with `all`, indirect
/// blocks and metadata objects with `metadata`, nothing with `none`; a block already cached
/// (read for another dataset) is still served from the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CachePolicy {
    None,
    Metadata,
    #[default]
    All,
}

impl CachePolicy {
    /// The policy a stored `primarycache` value asks for (`None`: the default, `all`).
    pub fn from_prop(v: Option<u64>) -> CachePolicy {
        match v {
            Some(0) => CachePolicy::None,
            Some(1) => CachePolicy::Metadata,
            _ => CachePolicy::All,
        }
    }

    /// Whether the cache keeps block `bp` once read.
    pub fn keeps(self, bp: &BlkPtr) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::None => false,
            CachePolicy::Metadata => {
                bp.level() > 0 || ondisk::dmu_types::DmuObjectType::from_u8(bp.object_type()).is_metadata()
            }
        }
    }
}

/// The shared read context of a pool: its pipeline and its cache, and which blocks the
/// cache keeps for the objset this copy reads (`primarycache`).
#[derive(Clone)]
pub struct Reader {
    pub zio: Arc<Zio>,
    pub cache: Arc<BlockCache<BlockKey>>,
    pub keep: CachePolicy,
    /// Which blocks read from the vdevs may go to the second-level cache (the cache
    /// devices; `secondarycache`).
    pub keep_l2: CachePolicy,
}

impl Reader {
    /// A reader of pipeline `zio` through `cache`, keeping every block.
    pub fn new(zio: Arc<Zio>, cache: Arc<BlockCache<BlockKey>>) -> Reader {
        Reader { zio, cache, keep: CachePolicy::All, keep_l2: CachePolicy::All }
    }

    /// This reader with cache policy `keep`.
    pub fn with_policy(&self, keep: CachePolicy) -> Reader {
        Reader { keep, ..self.clone() }
    }

    /// Reads (or finds in the cache) the logical contents of a block.
    pub fn read_bp(&self, bp: &BlkPtr) -> Result<arc::Block> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(Arc::new(self.zio.read(bp)?));
        }
        let d = &bp.dva[0];
        let key = (d.vdev(), d.offset(), bp.physical_birth());
        if let Some(b) = self.cache.get(&key) {
            if b.len() == bp.lsize() as usize {
                return Ok(b);
            }
        }
        let data: arc::Block = Arc::new(self.zio.read_for(bp, self.keep_l2.keeps(bp))?);
        if self.keep.keeps(bp) {
            self.cache.insert(key, data.clone());
        }
        Ok(data)
    }
}

impl Reader {
    /// Forgets the cached contents of a block that was rewritten in place (a block born in
    /// the txg being synced keeps its DVA and birth when a later sync pass rewrites it, so
    /// its cache key no longer names one content).
    pub fn invalidate(&self, bp: &BlkPtr) {
        if bp.is_hole() || bp.is_embedded() {
            return;
        }
        let d = &bp.dva[0];
        self.cache.remove(&(d.vdev(), d.offset(), bp.physical_birth()));
        self.zio.forget_second_level(bp);
    }
}

/// `x << s` when no bit is lost.
fn shl_exact(x: u64, s: u32) -> Option<u64> {
    if x == 0 {
        return Some(0);
    }
    x.checked_shl(s).filter(|v| v >> s == x)
}

/// A dnode together with its object number.
#[derive(Clone, Debug)]
pub struct Dnode {
    pub object: u64,
    pub phys: DnodePhys,
}

impl std::ops::Deref for Dnode {
    type Target = DnodePhys;
    fn deref(&self) -> &DnodePhys {
        &self.phys
    }
}

/// What one slot of the meta-dnode holds.
#[derive(Clone, Debug)]
pub enum Slot {
    /// No dnode.
    Free,
    /// The first slot of a dnode.
    Start(Box<Dnode>),
    /// A later slot of the large dnode that starts at the given object.
    Interior(u64),
}

/// The slot (within one dnode block) where the dnode covering slot `want` starts; None when
/// `want` is free. Walks the dnode headers from the block's start: byte 0 is the type (0:
/// free slot), byte 12 `dn_extra_slots`. A count that would cross the block (corrupt) is
/// taken as one slot, so the slot it claims reads as a dnode and fails its own checks.
pub fn slot_owner(block: &[u8], want: usize) -> Option<usize> {
    let slots = block.len() / DNODE_SLOT_SIZE;
    let mut s = 0;
    while s < slots && s <= want {
        let d = &block[s * DNODE_SLOT_SIZE..];
        if d[0] == 0 {
            if s == want {
                return None;
            }
            s += 1;
            continue;
        }
        let mut n = 1 + usize::from(d[12]);
        if s + n > slots {
            n = 1;
        }
        if want < s + n {
            return Some(s);
        }
        s += n;
    }
    None
}

/// An open objset (read-only).
#[derive(Clone)]
pub struct Objset {
    pub(crate) reader: Reader,
    pub bp: BlkPtr,
    pub phys: Arc<ObjsetPhys>,
}

impl Objset {
    /// Opens the objset whose root block is `bp`.
    pub fn open(reader: &Reader, bp: &BlkPtr) -> Result<Objset> {
        if bp.is_hole() {
            return Err(DmuError::Corrupt { what: "objset", detail: "root block is a hole".into() });
        }
        let buf = reader.read_bp(bp)?;
        let phys = ObjsetPhys::parse(&buf, bp.byte_order())?;
        Ok(Objset { reader: reader.clone(), bp: *bp, phys: Arc::new(phys) })
    }

    /// The shared reader (pipeline + cache).
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    /// This objset read with cache policy `keep` (`primarycache`).
    pub fn with_cache_policy(&self, keep: CachePolicy) -> Objset {
        Objset { reader: self.reader.with_policy(keep), ..self.clone() }
    }

    /// `dmu_objset_type` (1 meta, 2 ZPL, 3 zvol).
    pub fn os_type(&self) -> u64 {
        self.phys.os_type
    }

    /// One past the highest object number the meta-dnode can hold (saturating: the
    /// meta-dnode's `maxblkid` comes from disk).
    pub fn object_limit(&self) -> u64 {
        let md = &self.phys.meta_dnode;
        md.maxblkid.saturating_add(1).saturating_mul(md.data_block_size()) / DNODE_SLOT_SIZE as u64
    }

    /// Reads dnode `object`. A free slot, and a slot inside a large dnode (the second and
    /// later slots of a `dnodesize` > 512 object: they hold its block pointers and bonus, not
    /// a dnode), are `NoSuchObject`.
    pub fn dnode(&self, object: u64) -> Result<Dnode> {
        if useracct::is_accounting_object(object) {
            return match useracct::accounting_dnode(&self.phys, object) {
                Some(phys) if !phys.is_free() => Ok(Dnode { object, phys: phys.clone() }),
                _ => Err(DmuError::NoSuchObject(object)),
            };
        }
        match self.slot(object)? {
            Slot::Start(d) => Ok(*d),
            Slot::Free | Slot::Interior(_) => Err(DmuError::NoSuchObject(object)),
        }
    }

    /// What slot `object` of the meta-dnode holds. Whether a slot is the inside of a large
    /// dnode is known only from the block's first slot on (OpenZFS learns it the same way
    /// when it loads a dnode block, `dnode_hold_impl`): the walk reads two bytes per dnode.
    pub fn slot(&self, object: u64) -> Result<Slot> {
        let md = &self.phys.meta_dnode;
        let blksz = md.data_block_size();
        if blksz == 0 {
            return Err(DmuError::Corrupt { what: "meta-dnode", detail: "zero block size".into() });
        }
        // Past the meta-dnode's last block (or past any possible one): free.
        let Some(byte) = object.checked_mul(DNODE_SLOT_SIZE as u64) else { return Ok(Slot::Free) };
        let blkid = byte / blksz;
        if blkid > md.maxblkid {
            return Ok(Slot::Free);
        }
        let block = self.read_block(md, blkid)?;
        let want = (byte % blksz) as usize / DNODE_SLOT_SIZE;
        match slot_owner(&block, want) {
            None => Ok(Slot::Free),
            Some(s) if s < want => Ok(Slot::Interior(object - (want - s) as u64)),
            Some(_) => {
                let off = want * DNODE_SLOT_SIZE;
                let phys = DnodePhys::parse(block.get(off..).unwrap_or(&[]), self.dnode_byte_order())?;
                Ok(Slot::Start(Box::new(Dnode { object, phys })))
            }
        }
    }

    /// Byte order of dnode blocks: that of the meta-dnode's pointers.
    pub fn dnode_byte_order(&self) -> ondisk::ByteOrder {
        self.phys
            .meta_dnode
            .blkptr
            .iter()
            .find(|b| !b.is_hole())
            .map(|b| b.byte_order())
            .unwrap_or(self.bp.byte_order())
    }

    /// Calls `f` for every allocated dnode (stepping over the slots of large dnodes).
    ///
    /// Only dnode blocks that exist are read: the meta-dnode's tree is walked and holes are
    /// stepped over whole, so a `maxblkid` claiming 2^40 blocks costs nothing. A dnode block
    /// shorter than the meta-dnode's block size (its pointer's `lsize` is what counts) is
    /// parsed as far as it goes.
    pub fn for_each_dnode(&self, mut f: impl FnMut(Dnode) -> Result<()>) -> Result<()> {
        let md = self.phys.meta_dnode.clone();
        let per_block = md.data_block_size() / DNODE_SLOT_SIZE as u64;
        if per_block == 0 {
            return Ok(());
        }
        let order = self.dnode_byte_order();
        self.for_each_l0(&md, &mut |blkid, bp| {
            let block = self.reader.read_bp(bp)?;
            for (slot, dn) in ondisk::dnode::dnode_block_entries(&block, per_block as usize, order) {
                let object = blkid.saturating_mul(per_block).saturating_add(slot as u64);
                if let (Ok(p), true) = (dn, object != 0) {
                    f(Dnode { object, phys: p })?;
                }
            }
            Ok(())
        })
    }

    /// Calls `f(blkid, bp)` for every level-0 block pointer of `dn` that is not a hole, in
    /// block order, reading only the indirect blocks that exist. An indirect block reached
    /// twice within one object (a crafted tree whose pointers share a subtree: walking it
    /// would be exponential in the tree's height) is corruption, as is a block id beyond
    /// 2^64.
    pub fn for_each_l0(&self, dn: &DnodePhys, f: &mut dyn FnMut(u64, &BlkPtr) -> Result<()>) -> Result<()> {
        if dn.nlevels == 0 || dn.indblkshift < 7 {
            return Ok(());
        }
        let epbs = u32::from(dn.indblkshift - 7);
        let top = dn.nlevels - 1;
        let mut seen = std::collections::HashSet::new();
        for (i, bp) in dn.blkptr.iter().enumerate() {
            // Pointers whose first block id would pass 2^64 cannot hold anything reachable.
            let Some(first) = shl_exact(i as u64, epbs.saturating_mul(u32::from(top))) else { break };
            self.l0_walk(bp, top, first, epbs, &mut seen, f)?;
        }
        Ok(())
    }

    fn l0_walk(
        &self,
        bp: &BlkPtr,
        level: u8,
        first: u64,
        epbs: u32,
        seen: &mut std::collections::HashSet<(u64, u64)>,
        f: &mut dyn FnMut(u64, &BlkPtr) -> Result<()>,
    ) -> Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        if level == 0 {
            return f(first, bp);
        }
        if !bp.is_embedded() && !seen.insert((bp.dva[0].vdev(), bp.dva[0].offset())) {
            return Err(DmuError::Corrupt {
                what: "indirect block",
                detail: format!("{bp} is referenced twice in one object"),
            });
        }
        let block = self.reader.read_bp(bp)?;
        let order = bp.byte_order();
        for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
            let child = BlkPtr::parse(raw, order)?;
            if child.is_hole() {
                continue;
            }
            let span = epbs.saturating_mul(u32::from(level - 1));
            let Some(blkid) = shl_exact(i as u64, span).and_then(|o| first.checked_add(o)) else {
                return Err(DmuError::Corrupt {
                    what: "indirect block",
                    detail: format!("{bp}: block ids beyond 2^64"),
                });
            };
            self.l0_walk(&child, level - 1, blkid, epbs, seen, f)?;
        }
        Ok(())
    }

    /// The first level-0 block id at or after `start` that holds data (`data`) or is a hole
    /// (`!data`), as `dnode_next_offset` finds it for `lseek(SEEK_DATA/SEEK_HOLE)`: subtrees
    /// are skipped by their block pointers' fill counts (a hole pointer holds no data; a
    /// pointer whose fill is its whole span holds no hole), so only the indirect blocks on
    /// the way are read. A hole is found past the last block too (the tree's end); None
    /// when no data lies at or after `start`.
    pub fn next_l0(&self, dn: &DnodePhys, start: u64, data: bool) -> Result<Option<u64>> {
        if dn.nlevels == 0 || dn.indblkshift < 7 {
            return Ok(if data { None } else { Some(start) });
        }
        let epbs = u32::from(dn.indblkshift - 7);
        let top = dn.nlevels - 1;
        for (i, bp) in dn.blkptr.iter().enumerate() {
            let Some(first) = shl_exact(i as u64, epbs.saturating_mul(u32::from(top))) else { break };
            if let Some(found) = self.next_walk(bp, top, first, epbs, start, data, 0)? {
                return Ok(Some(found));
            }
        }
        // Past the pointers of the dnode: all hole.
        if data {
            return Ok(None);
        }
        let span_top = epbs.saturating_mul(u32::from(top));
        let end = shl_exact(dn.blkptr.len() as u64, span_top).unwrap_or(u64::MAX);
        Ok(Some(start.max(end)))
    }

    #[allow(clippy::too_many_arguments)]
    fn next_walk(
        &self,
        bp: &BlkPtr,
        level: u8,
        first: u64,
        epbs: u32,
        start: u64,
        data: bool,
        depth: u32,
    ) -> Result<Option<u64>> {
        let shift = epbs.saturating_mul(u32::from(level));
        let span = if shift >= 64 { u64::MAX } else { 1u64 << shift };
        let last = first.saturating_add(span - 1);
        if last < start {
            return Ok(None);
        }
        let at = start.max(first);
        if bp.is_hole() {
            return Ok(if data { None } else { Some(at) });
        }
        if level == 0 {
            return Ok(if data { Some(at) } else { None });
        }
        if !data && !bp.is_embedded() && bp.fill_count() >= span {
            return Ok(None);
        }
        if depth > 64 {
            return Err(DmuError::Corrupt { what: "indirect block", detail: format!("{bp}: tree too deep") });
        }
        let block = self.reader.read_bp(bp)?;
        let order = bp.byte_order();
        let child_shift = epbs.saturating_mul(u32::from(level - 1));
        for (i, raw) in block.chunks_exact(BLKPTR_SIZE).enumerate() {
            let Some(cfirst) = shl_exact(i as u64, child_shift).and_then(|o| first.checked_add(o)) else {
                break;
            };
            let child = BlkPtr::parse(raw, order)?;
            if let Some(found) = self.next_walk(&child, level - 1, cfirst, epbs, start, data, depth + 1)? {
                return Ok(Some(found));
            }
        }
        // An indirect block shorter than its span leaves the rest a hole.
        let covered = (block.len() / BLKPTR_SIZE) as u64;
        let end = shl_exact(covered, child_shift).and_then(|o| first.checked_add(o)).unwrap_or(u64::MAX);
        Ok(if !data && end <= last { Some(at.max(end)) } else { None })
    }

    /// The block pointer for (`level`, `blkid`) of the object, walking indirect blocks.
    /// `None` if the tree does not reach that far; a hole pointer if a hole covers it.
    pub fn block_pointer(&self, dn: &DnodePhys, level: u8, blkid: u64) -> Result<Option<BlkPtr>> {
        if level >= dn.nlevels || dn.indblkshift < 7 {
            return Ok(None);
        }
        let epbs = (dn.indblkshift - 7) as u32;
        let top = dn.nlevels - 1;
        let top_shift = epbs * (top - level) as u32;
        let idx = if top_shift >= 64 { 0 } else { blkid >> top_shift };
        let Some(mut bp) = dn.blkptr.get(idx as usize).copied() else {
            return Ok(None);
        };
        for l in (level + 1..=top).rev() {
            if bp.is_hole() {
                return Ok(Some(bp));
            }
            let block = self.reader.read_bp(&bp)?;
            let shift = epbs * (l - 1 - level) as u32;
            let i = (blkid.checked_shr(shift).unwrap_or(0) & ((1u64 << epbs) - 1)) as usize;
            let order = bp.byte_order();
            let raw = block.get(i * BLKPTR_SIZE..(i + 1) * BLKPTR_SIZE).ok_or_else(|| DmuError::Corrupt {
                what: "indirect block",
                detail: format!("index {i} beyond block"),
            })?;
            bp = BlkPtr::parse(raw, order)?;
        }
        Ok(Some(bp))
    }

    /// The logical contents of level-0 block `blkid` (zeros for holes and blocks past the end).
    pub fn read_block(&self, dn: &DnodePhys, blkid: u64) -> Result<arc::Block> {
        match self.block_pointer(dn, 0, blkid)? {
            Some(bp) if !bp.is_hole() => {
                let data = self.reader.read_bp(&bp)?;
                if (data.len() as u64) < dn.data_block_size() && dn.maxblkid > 0 {
                    return Err(DmuError::Corrupt {
                        what: "data block",
                        detail: format!("lsize {} < block size {}", data.len(), dn.data_block_size()),
                    });
                }
                Ok(data)
            }
            _ => Ok(Arc::new(vec![0u8; dn.data_block_size() as usize])),
        }
    }

    /// Reads `buf.len()` bytes at `offset` of the object (holes are zeros). The caller bounds
    /// the range by the object's logical size (e.g. the ZPL file size). Ranges of several
    /// blocks are fetched by up to [`READ_THREADS_MAX`] threads at once: reading a block is
    /// CPU work (checksum, parity, decompression) that scales with cores.
    pub fn read(&self, dn: &DnodePhys, offset: u64, buf: &mut [u8]) -> Result<()> {
        let blksz = dn.data_block_size();
        if blksz == 0 {
            return Err(DmuError::Corrupt { what: "dnode", detail: "zero block size".into() });
        }
        let mut segs: Vec<(u64, usize, &mut [u8])> = Vec::new();
        let mut rest = buf;
        let mut pos = offset;
        while !rest.is_empty() {
            let within = (pos % blksz) as usize;
            let n = (blksz as usize - within).min(rest.len());
            let (seg, tail) = rest.split_at_mut(n);
            segs.push((pos / blksz, within, seg));
            rest = tail;
            pos += n as u64;
        }
        // One segment never needs threads (nor the CPU count).
        let threads = if segs.len() < 2 { 1 } else { cpu_threads().min(READ_THREADS_MAX) };
        if threads < 2 {
            return segs.into_iter().try_for_each(|s| self.fill(dn, s));
        }
        let mut groups: Vec<Vec<(u64, usize, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, s) in segs.into_iter().enumerate() {
            groups[i % threads].push(s);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|g| scope.spawn(move || g.into_iter().try_for_each(|s| self.fill(dn, s))))
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(DmuError::Corrupt { what: "read", detail: "a reader thread panicked".into() })
                })
            })
        })
    }

    /// Copies one block's part of a read into its slice of the caller's buffer.
    fn fill(&self, dn: &DnodePhys, (blkid, within, out): (u64, usize, &mut [u8])) -> Result<()> {
        if blkid > dn.maxblkid {
            out.fill(0);
            return Ok(());
        }
        let block = self.read_block(dn, blkid)?;
        let src = block.get(within..within + out.len()).ok_or_else(|| DmuError::Corrupt {
            what: "data block",
            detail: format!("block {blkid} shorter than {}", within + out.len()),
        })?;
        out.copy_from_slice(src);
        Ok(())
    }

    /// Bytes the object's block tree can hold: `(maxblkid + 1) × block size`. An error when
    /// that does not fit 64 bits (a corrupt `maxblkid`).
    pub fn object_size(dn: &DnodePhys) -> Result<u64> {
        dn.maxblkid.checked_add(1).and_then(|n| n.checked_mul(dn.data_block_size())).ok_or_else(|| {
            DmuError::Corrupt {
                what: "dnode",
                detail: format!("maxblkid {} × block size {} overflows", dn.maxblkid, dn.data_block_size()),
            }
        })
    }

    /// Reads the first `len` bytes of the object (all of it when `len` is `None`) into
    /// memory. Every length here comes from disk, so it is checked twice before anything is
    /// allocated: it must lie within what the object's tree can hold ([`Objset::object_size`])
    /// and within `max`, the caller's bound for this kind of object (a packed nvlist, a
    /// metaslab array, ...). A `maxblkid` claiming gigabytes therefore costs an error, not
    /// an allocation. Callers with objects that may legitimately be large read in pieces.
    pub fn read_all(&self, dn: &DnodePhys, len: Option<u64>, max: u64) -> Result<Vec<u8>> {
        let size = Self::object_size(dn)?;
        let len = len.unwrap_or(size);
        if len > size {
            return Err(DmuError::Corrupt {
                what: "object",
                detail: format!("{len} bytes claimed, the object holds at most {size}"),
            });
        }
        if len > max {
            return Err(DmuError::Corrupt {
                what: "object",
                detail: format!("{len} bytes exceeds the {max}-byte limit for this kind of object"),
            });
        }
        let len = usize::try_from(len).map_err(|_| DmuError::Corrupt {
            what: "object",
            detail: format!("{len} bytes do not fit memory"),
        })?;
        let mut buf = vec![0u8; len];
        self.read(dn, 0, &mut buf)?;
        Ok(buf)
    }

    /// The spill block of a dnode, if it has one.
    pub fn read_spill(&self, dn: &DnodePhys) -> Result<Option<arc::Block>> {
        match &dn.spill {
            Some(bp) if !bp.is_hole() => Ok(Some(self.reader.read_bp(bp)?)),
            _ => Ok(None),
        }
    }
}

/// The CPUs this process may use, asked once: `available_parallelism` reads the cgroup
/// files under /proc on every call, which cost more than the small reads it sized (a
/// snapshot destroy in a chain of 250 clones spent most of its 600 ms there).
pub fn cpu_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ondisk::ByteOrder;

    fn reader() -> Reader {
        Reader::new(
            Arc::new(Zio::new(Vec::new(), Default::default())),
            Arc::new(arc::BlockCache::new(1 << 20)),
        )
    }

    /// An embedded pointer holding `data` (lz4), so blocks exist without any vdev.
    fn embedded(data: &[u8], object_type: u8, level: u8) -> BlkPtr {
        let mut out = vec![0u8; 112];
        let n = codec::compress::compress(codec::compress::CompressKind::Lz4, 0, data, &mut out)
            .expect("test block compresses into an embedded pointer");
        BlkPtr::new_embedded(
            &out[..n],
            data.len() as u64,
            codec::compress::ZIO_COMPRESS_LZ4,
            object_type,
            level,
            5,
            ByteOrder::Little,
        )
        .unwrap()
    }

    fn small_dnode() -> DnodePhys {
        DnodePhys {
            object_type: 19,
            indblkshift: 17,
            nlevels: 1,
            nblkptr: 1,
            datablkszsec: 1,
            blkptr: vec![BlkPtr::default()],
            ..Default::default()
        }
    }

    fn objset_with_meta(meta: DnodePhys) -> Objset {
        let phys = ObjsetPhys { meta_dnode: meta, os_type: 2, ..Default::default() };
        Objset { reader: reader(), bp: BlkPtr::default(), phys: Arc::new(phys) }
    }

    /// A meta-dnode claiming 32 KiB dnode blocks whose only block is 16 KiB: slots past the
    /// block's end do not exist (this used to index past the block and panic).
    #[test]
    fn short_meta_dnode_block_is_parsed_as_far_as_it_goes() {
        let mut block = vec![0u8; 16 << 10];
        small_dnode().encode_into(&mut block[512..], ByteOrder::Little).unwrap();
        small_dnode().encode_into(&mut block[31 * 512..], ByteOrder::Little).unwrap();
        let mut meta = small_dnode();
        meta.object_type = 10; // DMU_OT_DNODE
        meta.indblkshift = 14;
        meta.datablkszsec = 64; // 32 KiB claimed
        meta.blkptr = vec![embedded(&block, 10, 0)];
        let os = objset_with_meta(meta);
        let mut seen = Vec::new();
        os.for_each_dnode(|d| {
            seen.push(d.object);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![1, 31]);
        assert_eq!(os.dnode(31).unwrap().object, 31);
        assert!(os.dnode(40).is_err());
    }

    /// The slots after a large dnode's first are its inside, not objects: `dnode` refuses
    /// them even when their bytes (its bonus) would parse as a dnode.
    #[test]
    fn large_dnode_slots_are_interior() {
        let mut block = vec![0u8; 4 << 10];
        let mut big = small_dnode();
        big.extra_slots = 2; // objects 2..5
        big.bonus = vec![19u8; 700]; // bonus bytes fill slots 3 and 4 with non-zero "types"
        big.bonuslen = 700;
        big.bonustype = 44;
        big.encode_into(&mut block[2 * 512..], ByteOrder::Little).unwrap();
        small_dnode().encode_into(&mut block[5 * 512..], ByteOrder::Little).unwrap();
        assert_eq!(slot_owner(&block, 0), None);
        assert_eq!(slot_owner(&block, 2), Some(2));
        assert_eq!(slot_owner(&block, 3), Some(2));
        assert_eq!(slot_owner(&block, 4), Some(2));
        assert_eq!(slot_owner(&block, 5), Some(5));
        assert_eq!(slot_owner(&block, 6), None);
        assert_eq!(slot_owner(&block, 7), None);
        assert_eq!(slot_owner(&block, 99), None);
        let mut meta = small_dnode();
        meta.object_type = 10;
        meta.indblkshift = 14;
        meta.datablkszsec = 8;
        meta.blkptr = vec![embedded(&block, 10, 0)];
        let os = objset_with_meta(meta);
        assert_eq!(os.dnode(2).unwrap().bonus.len(), 700);
        assert!(matches!(os.slot(3).unwrap(), Slot::Interior(2)));
        assert!(matches!(os.slot(4).unwrap(), Slot::Interior(2)));
        assert!(matches!(os.dnode(4), Err(DmuError::NoSuchObject(4))));
        assert!(matches!(os.slot(5).unwrap(), Slot::Start(_)));
        assert!(matches!(os.slot(6).unwrap(), Slot::Free));
        // A corrupt count that would cross the block stands for one slot.
        let mut bad = vec![0u8; 2048];
        bad[512] = 19;
        bad[512 + 12] = 31;
        assert_eq!(slot_owner(&bad, 1), Some(1));
        assert_eq!(slot_owner(&bad, 2), None);
    }

    /// Sizes from disk never become allocations larger than the object or the caller's cap.
    #[test]
    fn read_all_is_bounded_by_object_and_cap() {
        let os = objset_with_meta(small_dnode());
        let mut dn = small_dnode();
        dn.blkptr = vec![embedded(&[9u8; 512], 19, 0)];
        assert_eq!(os.read_all(&dn, None, 1 << 20).unwrap(), vec![9u8; 512]);
        assert_eq!(os.read_all(&dn, Some(100), 1 << 20).unwrap(), vec![9u8; 100]);
        // More than the object holds, and more than the cap: errors, nothing allocated.
        assert!(os.read_all(&dn, Some(4 << 30), u64::MAX).is_err());
        assert!(os.read_all(&dn, Some(512), 511).is_err());
        // maxblkid claiming 2^64 blocks overflows the object size: an error, not a panic.
        dn.maxblkid = u64::MAX;
        assert!(Objset::object_size(&dn).is_err());
        assert!(os.read_all(&dn, None, 1 << 20).is_err());
        dn.maxblkid = 1 << 40;
        assert!(os.read_all(&dn, None, 1 << 20).is_err());
        dn.maxblkid = u64::MAX;
        assert_eq!(objset_with_meta(dn).object_limit(), u64::MAX / 512);
    }

    /// `for_each_l0` visits only blocks that exist, whatever `maxblkid` claims.
    #[test]
    fn l0_walk_skips_holes() {
        let os = objset_with_meta(small_dnode());
        let leaf = embedded(&[1u8; 512], 19, 0);
        // One indirect block (512 bytes: 4 pointers) whose pointer 2 is the leaf.
        let mut ind = vec![0u8; 512];
        ind[2 * 128..3 * 128].copy_from_slice(&leaf.encode(ByteOrder::Little));
        let mut dn = small_dnode();
        dn.indblkshift = 9;
        dn.nlevels = 2;
        dn.maxblkid = 1 << 40;
        dn.nblkptr = 2;
        dn.blkptr = vec![BlkPtr::default(), embedded(&ind, 19, 1)];
        let mut got = Vec::new();
        os.for_each_l0(&dn, &mut |blkid, _| {
            got.push(blkid);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec![4 + 2]);
    }

    #[test]
    fn primarycache_keeps_what_openzfs_caches() {
        // Object types 19 (plain file contents) and 20 (directory, metadata); levels 0/1.
        let bp = |ot: u64, level: u64| BlkPtr { prop: (ot << 48) | (level << 56), ..Default::default() };
        let (data, indirect, dir) = (bp(19, 0), bp(19, 1), bp(20, 0));
        for b in [&data, &indirect, &dir] {
            assert!(CachePolicy::All.keeps(b));
            assert!(!CachePolicy::None.keeps(b));
        }
        assert!(!CachePolicy::Metadata.keeps(&data));
        assert!(CachePolicy::Metadata.keeps(&indirect) && CachePolicy::Metadata.keeps(&dir));
        assert_eq!(CachePolicy::from_prop(None), CachePolicy::All);
        assert_eq!(CachePolicy::from_prop(Some(0)), CachePolicy::None);
        assert_eq!(CachePolicy::from_prop(Some(1)), CachePolicy::Metadata);
        assert_eq!(reader().with_policy(CachePolicy::None).keep, CachePolicy::None);
    }
}
