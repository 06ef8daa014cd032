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

/// The shared read context of a pool: its pipeline and its cache.
#[derive(Clone)]
pub struct Reader {
    pub zio: Arc<Zio>,
    pub cache: Arc<BlockCache<BlockKey>>,
}

impl Reader {
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
        let data: arc::Block = Arc::new(self.zio.read(bp)?);
        self.cache.insert(key, data.clone());
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
    }
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

    /// `dmu_objset_type` (1 meta, 2 ZPL, 3 zvol).
    pub fn os_type(&self) -> u64 {
        self.phys.os_type
    }

    /// One past the highest object number the meta-dnode can hold.
    pub fn object_limit(&self) -> u64 {
        let md = &self.phys.meta_dnode;
        (md.maxblkid + 1) * md.data_block_size() / DNODE_SLOT_SIZE as u64
    }

    /// Reads dnode `object`. A free slot is `NoSuchObject`.
    pub fn dnode(&self, object: u64) -> Result<Dnode> {
        let md = &self.phys.meta_dnode;
        let blksz = md.data_block_size();
        if blksz == 0 {
            return Err(DmuError::Corrupt { what: "meta-dnode", detail: "zero block size".into() });
        }
        let byte = object.checked_mul(DNODE_SLOT_SIZE as u64).ok_or(DmuError::NoSuchObject(object))?;
        let blkid = byte / blksz;
        if blkid > md.maxblkid {
            return Err(DmuError::NoSuchObject(object));
        }
        let block = self.read_block(md, blkid)?;
        let off = (byte % blksz) as usize;
        let phys = DnodePhys::parse(block.get(off..).unwrap_or(&[]), self.dnode_byte_order())?;
        if phys.is_free() {
            return Err(DmuError::NoSuchObject(object));
        }
        Ok(Dnode { object, phys })
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
    pub fn for_each_dnode(&self, mut f: impl FnMut(Dnode) -> Result<()>) -> Result<()> {
        let md = &self.phys.meta_dnode;
        let blksz = md.data_block_size() as usize;
        let per_block = blksz / DNODE_SLOT_SIZE;
        let order = self.dnode_byte_order();
        for blkid in 0..=md.maxblkid {
            let bp = self.block_pointer(md, 0, blkid)?;
            if bp.map(|b| b.is_hole()).unwrap_or(true) {
                continue;
            }
            let block = self.read_block(md, blkid)?;
            let mut slot = 0;
            while slot < per_block {
                let object = blkid * per_block as u64 + slot as u64;
                let phys = DnodePhys::parse(&block[slot * DNODE_SLOT_SIZE..], order);
                match phys {
                    Ok(p) if !p.is_free() => {
                        slot += p.slots();
                        if object != 0 {
                            f(Dnode { object, phys: p })?;
                        }
                    }
                    _ => slot += 1,
                }
            }
        }
        Ok(())
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
        let threads =
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(READ_THREADS_MAX);
        if segs.len() < 2 || threads < 2 {
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

    /// Reads the whole object (`(maxblkid+1) × blocksize` bytes, or `len` if given).
    pub fn read_all(&self, dn: &DnodePhys, len: Option<u64>) -> Result<Vec<u8>> {
        let full = (dn.maxblkid + 1) * dn.data_block_size();
        let len = len.unwrap_or(full);
        if len > 1 << 32 {
            return Err(DmuError::Corrupt {
                what: "object",
                detail: format!("{len} bytes is too large to read whole"),
            });
        }
        let mut buf = vec![0u8; len as usize];
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
