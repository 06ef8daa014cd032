//! # zio — the block I/O pipeline
//!
//! Reading a block pointer is a pipeline (OpenZFS `module/zfs/zio.c`):
//!
//! 1. **decode**: an embedded pointer carries its bytes; a hole reads as zeros; a redacted
//!    pointer is refused with a precise error.
//! 2. **issue**: each DVA in turn is read from its top-level vdev. The vdev layer owns
//!    redundancy (mirror copies, RAID-Z reconstruction) and calls back into our checksum
//!    verifier, so a reconstruction is accepted only when the block checksum agrees. A gang DVA
//!    is a 512-byte header (self-checksummed, verifier = DVA + physical birth) naming up to three
//!    children whose physical bytes concatenate into the block.
//! 3. **verify**: the physical bytes must match the pointer's checksum; otherwise the next DVA
//!    is tried, and when none verifies the read fails with `ZioError::Checksum`.
//! 4. **decompress** to exactly `lsize` bytes.
//!
//! Encryption (no keys yet). A pointer with the crypt bit is verified without any key, as
//! OpenZFS `zio_checksum_error_impl` does: checksum words 2..3 hold a MAC, so only words 0..1
//! are compared (after XOR-folding the computed words 2..3 for checksums that are not
//! dedup-capable); objset blocks keep their MACs in the objset header and compare all four
//! words. Hence `read_physical` verifies every block of an encrypted dataset. `read`
//! decompresses, which is impossible for ciphertext: it refuses *encrypted* pointers
//! (level 0, encrypted object type) with `ZioError::Unsupported`, while *authenticated*
//! pointers (plaintext with a MAC: objsets, indirect blocks, unencrypted types) read normally.
//! `read_keyless` additionally opens dnode blocks of encrypted datasets: OpenZFS encrypts only
//! the bonus buffers of their dnodes (`zio_crypt.c`), and writes them uncompressed
//! (`dmu_write_policy` forces `ZIO_COMPRESS_EMPTY` for DNODE and OBJSET blocks of encrypted
//! objsets), so dnode cores, block pointers and spill pointers are plaintext on disk.
//!
//! **Second level** ([`SecondLevel`], the pool's cache devices). [`Zio::read`] and
//! [`Zio::read_keyless`] look a block up there before the pool's vdevs and offer what they
//! read from the vdevs to it; a copy from there is verified against the pointer's checksum
//! like any other (a mismatch is dropped from it and the vdevs are read). `read_physical`
//! never uses it: scrub, heal and the checks that call it must see the pool's own copies.
//!
//! Invariants: nothing unverified leaves this crate (when the checksum type is `off`, the
//! block is returned as is — that is what the pool asked for); no read ever writes.
//! The write half of the pipeline (compress → checksum → allocate → issue) lands with the
//! write path.
#![forbid(unsafe_code)]

use codec::checksum::{self, ChecksumCtx, ChecksumSpec, Cksum};
use codec::compress;
use ondisk::blkptr::{BlkPtr, Dva, BLKPTR_SIZE, SPA_GANGBLOCKSIZE, SPA_GBH_NBLKPTRS};
use ondisk::dmu_types;
use ondisk::ByteOrder;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod vdev_io;
mod write;
pub use vdev_io::VdevIo;
pub use write::{Allocate, Prepared, WriteProps, BPE_PAYLOAD_SIZE};

/// Deepest gang tree we follow (gang children may themselves be gangs; OpenZFS bounds the
/// depth implicitly through block sizes; 8 is far beyond anything a 16 MiB block needs).
const MAX_GANG_DEPTH: u32 = 8;

/// Errors of the I/O pipeline.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ZioError {
    /// Every copy failed its checksum (or could not be read/reconstructed).
    #[error("checksum error: no copy of block {bp} verifies")]
    Checksum { bp: String },
    /// Device-level failure with no good copy left (a read), or a write that too many
    /// devices failed.
    #[error("I/O error on {bp}: {detail}")]
    Io { bp: String, detail: String },
    /// The block pointer or the bytes it led to are malformed.
    #[error("corrupt block: {0}")]
    Corrupt(String),
    /// A feature this build cannot read yet (encryption, an unknown checksum, ...).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// No free space for a block being written (ENOSPC in syncing context).
    #[error("out of space: {0}")]
    NoSpace(String),
}

impl From<ondisk::Error> for ZioError {
    fn from(e: ondisk::Error) -> Self {
        ZioError::Corrupt(e.to_string())
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, ZioError>;

/// Pool-wide read counters.
#[derive(Debug, Default)]
pub struct ZioStats {
    pub blocks_read: AtomicU64,
    pub bytes_read: AtomicU64,
    pub checksum_errors: AtomicU64,
    pub io_errors: AtomicU64,
    /// Blocks served by the second-level cache, and cached copies that failed verification.
    pub l2_hits: AtomicU64,
    pub l2_bad: AtomicU64,
    pub blocks_written: AtomicU64,
    pub bytes_written: AtomicU64,
}

/// The verifier of a gang header's embedded checksum: the *first* DVA of the pointer and
/// its physical birth, whichever DVA the copy is read from (OpenZFS's
/// `zio_checksum_gang_verifier` uses `BP_IDENTITY`, i.e. DVA 0: every copy of the header
/// is sealed with the same verifier).
fn gang_header_verifier(bp: &BlkPtr) -> codec::checksum::Cksum {
    let d0 = bp.dvas().first().copied().unwrap_or_default();
    checksum::gang_verifier(d0.vdev(), d0.offset(), bp.physical_birth())
}

/// Does `hdr` carry a valid gang header for `bp`? The header's SHA-256 is embedded, with
/// [`gang_header_verifier`]; for a pointer with the crypt bit (not an objset) only words 0–1
/// are compared, the computed words 2–3 folded in (the gang-header checksum has no dedup
/// flag; `zio_checksum_error_impl`'s MAC rule): such headers store zeros there.
fn gang_header_ok(bp: &BlkPtr, hdr: &[u8], ctx: &ChecksumCtx) -> bool {
    let v = gang_header_verifier(bp);
    let objset = dmu_types::DmuObjectType::Objset.to_u8();
    if bp.uses_crypt() && bp.object_type() != objset {
        checksum::verify_embedded_mac(checksum::ChecksumKind::Sha256, hdr, v, ctx, true).is_ok()
    } else {
        checksum::verify_embedded(checksum::ChecksumKind::Sha256, hdr, v, ctx).is_ok()
    }
}

/// What names a block in a second-level cache: its first DVA's (vdev, offset) and its
/// physical birth txg. A block's bytes never change while that triple names it, and a
/// cached copy is verified against the pointer's checksum anyway.
pub type BlockKey = (u64, u64, u64);

/// A second-level cache of physical (still compressed) block bytes: the L2ARC, kept on the
/// pool's cache devices. Lookups may return stale or damaged bytes; the pipeline verifies.
pub trait SecondLevel: Send + Sync {
    /// The bytes cached under `key`, if any (`psize` long when they are right).
    fn lookup(&self, key: BlockKey, psize: usize) -> Option<Vec<u8>>;
    /// Offers the verified physical bytes of a block just read from the pool's vdevs (the
    /// cache may ignore it; it must not block on device I/O).
    fn offer(&self, key: BlockKey, data: &[u8]);
    /// Drops `key`: its cached bytes failed verification.
    fn invalidate(&self, key: BlockKey);
}

/// The read pipeline of one pool: its top-level vdevs (indexed by id) and checksum context.
pub struct Zio {
    /// Top-level vdevs by id. Replaceable one at a time ([`Zio::set_vdev`]): a configuration
    /// change (attach, detach, replace) swaps a top-level vdev's tree while reads go on.
    vdevs: std::sync::RwLock<Vec<Option<Arc<dyn VdevIo>>>>,
    /// Unsalted until the pool's salt is known (MOS blocks never use salted checksums).
    base_ctx: ChecksumCtx,
    salted_ctx: std::sync::OnceLock<ChecksumCtx>,
    /// The pool's second-level cache, when it has cache devices.
    l2: std::sync::RwLock<Option<Arc<dyn SecondLevel>>>,
    pub stats: ZioStats,
}

impl Zio {
    /// `vdevs[i]` is top-level vdev `i` (None for holes/missing top-levels).
    pub fn new(vdevs: Vec<Option<Arc<dyn VdevIo>>>, ctx: ChecksumCtx) -> Zio {
        Zio {
            vdevs: std::sync::RwLock::new(vdevs),
            base_ctx: ctx,
            salted_ctx: std::sync::OnceLock::new(),
            l2: std::sync::RwLock::new(None),
            stats: ZioStats::default(),
        }
    }

    /// Installs `v` as top-level vdev `id` (growing the table if needed). Reads already
    /// under way finish on the vdev they started with.
    pub fn set_vdev(&self, id: usize, v: Option<Arc<dyn VdevIo>>) {
        let mut t = self.vdevs.write().unwrap_or_else(|p| p.into_inner());
        if t.len() <= id {
            t.resize(id + 1, None);
        }
        t[id] = v;
    }

    /// Top-level vdev `id`, if present.
    pub fn vdev(&self, id: u64) -> Option<Arc<dyn VdevIo>> {
        let t = self.vdevs.read().unwrap_or_else(|p| p.into_inner());
        t.get(usize::try_from(id).ok()?)?.clone()
    }

    /// Every present top-level vdev.
    pub(crate) fn all_vdevs(&self) -> Vec<Arc<dyn VdevIo>> {
        self.vdevs.read().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect()
    }

    /// Installs (or removes) the second-level cache; returns the one it replaces.
    pub fn set_second_level(&self, l2: Option<Arc<dyn SecondLevel>>) -> Option<Arc<dyn SecondLevel>> {
        std::mem::replace(&mut *self.l2.write().unwrap_or_else(|p| p.into_inner()), l2)
    }

    /// The physical bytes of `bp` from the second-level cache when a verified copy is
    /// there, else from the vdevs (then offered to the cache when `offer`).
    fn read_physical_cached(&self, bp: &BlkPtr, offer: bool) -> Result<Vec<u8>> {
        let l2 = self.l2.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(l2) = l2 else { return self.read_physical(bp) };
        let Some(d0) = bp.dvas().first().copied() else { return self.read_physical(bp) };
        let key = (d0.vdev(), d0.offset(), bp.physical_birth());
        let psize = bp.psize() as usize;
        if let Some(data) = l2.lookup(key, psize) {
            if data.len() == psize && self.checksum_ok(bp, &data) {
                self.stats.l2_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(data);
            }
            self.stats.l2_bad.fetch_add(1, Ordering::Relaxed);
            l2.invalidate(key);
        }
        let data = self.read_physical(bp)?;
        if offer {
            l2.offer(key, &data);
        }
        Ok(data)
    }

    /// Drops a block from the second-level cache: it was rewritten in place (a later sync
    /// pass keeps a block's DVA and birth), so its key no longer names one content.
    pub fn forget_second_level(&self, bp: &BlkPtr) {
        let l2 = self.l2.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let (Some(l2), Some(d0)) = (l2, bp.dvas().first()) {
            l2.invalidate((d0.vdev(), d0.offset(), bp.physical_birth()));
        }
    }

    /// Installs the pool's checksum salt once the MOS has been read (first call wins).
    pub fn set_checksum_ctx(&self, ctx: ChecksumCtx) {
        let _ = self.salted_ctx.set(ctx);
    }

    fn ctx(&self) -> &ChecksumCtx {
        self.salted_ctx.get().unwrap_or(&self.base_ctx)
    }

    /// The checksum context blocks of this pool are sealed with (embedded checksums).
    pub fn checksum_ctx(&self) -> &ChecksumCtx {
        self.ctx()
    }

    /// Number of top-level vdevs (for `BlkPtr::verify`).
    pub fn vdev_count(&self) -> u64 {
        self.vdevs.read().unwrap_or_else(|p| p.into_inner()).len() as u64
    }

    /// Reads, verifies and decompresses the block: exactly `lsize` bytes. Encrypted blocks
    /// are `Unsupported` (they cannot be decrypted without the dataset's key).
    pub fn read(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        self.read_for(bp, true)
    }

    /// [`Zio::read`]; `l2_ok`: a block fetched from the vdevs may be offered to the
    /// second-level cache (the dataset's `secondarycache` allows it).
    pub fn read_for(&self, bp: &BlkPtr, l2_ok: bool) -> Result<Vec<u8>> {
        if bp.is_embedded() {
            return self.read_embedded(bp);
        }
        if bp.is_hole() {
            return Ok(vec![0u8; bp.lsize() as usize]);
        }
        refuse_encrypted(bp)?;
        let phys = self.read_physical_cached(bp, l2_ok)?;
        self.decompress_owned(bp, phys)
    }

    /// Decompresses, reusing the buffer when the block is stored uncompressed (the common
    /// case for incompressible data: no copy of the block's bytes).
    fn decompress_owned(&self, bp: &BlkPtr, mut phys: Vec<u8>) -> Result<Vec<u8>> {
        if bp.compress() == compress::ZIO_COMPRESS_OFF {
            let lsize = bp.lsize() as usize;
            if phys.len() < lsize {
                return Err(ZioError::Corrupt(format!("uncompressed block shorter than lsize: {bp}")));
            }
            phys.truncate(lsize);
            return Ok(phys);
        }
        self.decompress(bp, &phys)
    }

    /// Like [`Zio::read`], but also returns the dnode blocks of encrypted datasets, whose
    /// dnode cores and block pointers are plaintext (only bonus buffers of encrypted bonus
    /// types stay ciphertext in the result). Other encrypted blocks are `Unsupported`.
    pub fn read_keyless(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        if !bp.is_encrypted() || bp.is_embedded() || bp.is_hole() {
            return self.read(bp);
        }
        if bp.object_type() != dmu_types::DmuObjectType::Dnode.to_u8() {
            return refuse_encrypted(bp).map(|_| Vec::new());
        }
        if compress::kind_from_zio(bp.compress()) != Some(compress::CompressKind::Off) {
            return Err(ZioError::Unsupported(format!(
                "compressed encrypted dnode block {bp}: keys are not supported yet"
            )));
        }
        let phys = self.read_physical_cached(bp, true)?;
        self.decompress(bp, &phys)
    }

    /// Reads and verifies the physical (still compressed, possibly encrypted) bytes: exactly
    /// `psize` bytes. Works for every kind of pointer, including encrypted ones and ZIL blocks
    /// (whose checksum is embedded in the block).
    pub fn read_physical(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        self.check_readable(bp)?;
        bp.verify(self.vdev_count())?;
        let mut last_err = None;
        for dva in bp.dvas().iter() {
            let res = if dva.is_gang() { self.read_gang(bp, dva, 0) } else { self.read_dva(bp, dva) };
            match res {
                Ok(data) => {
                    self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
                    self.stats.bytes_read.fetch_add(data.len() as u64, Ordering::Relaxed);
                    return Ok(data);
                }
                Err(e) => last_err = Some(e),
            }
        }
        match &last_err {
            Some(ZioError::Checksum { .. }) => self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed),
            _ => self.stats.io_errors.fetch_add(1, Ordering::Relaxed),
        };
        Err(last_err.unwrap_or_else(|| ZioError::Corrupt(format!("no DVA in {bp}"))))
    }

    fn check_readable(&self, bp: &BlkPtr) -> Result<()> {
        if bp.is_redacted() {
            return Err(ZioError::Unsupported(format!("redacted block {bp}")));
        }
        Ok(())
    }

    fn read_embedded(&self, bp: &BlkPtr) -> Result<Vec<u8>> {
        self.check_readable(bp)?;
        refuse_encrypted(bp)?;
        let payload = bp.embedded_payload()?;
        self.decompress(bp, &payload)
    }

    /// Reads one non-gang copy through the vdev, which retries redundancy until `verify` agrees.
    fn read_dva(&self, bp: &BlkPtr, dva: &Dva) -> Result<Vec<u8>> {
        let vd = self.top_vdev(bp, dva)?;
        let verify = |data: &[u8]| self.checksum_ok(bp, data);
        vd.read_verified(dva.offset(), bp.psize(), bp.physical_birth(), &verify).map_err(|e| match e {
            vdev_io::ReadError::NoValidCopy => ZioError::Checksum { bp: bp.to_string() },
            vdev_io::ReadError::Io(detail) => ZioError::Io { bp: bp.to_string(), detail },
        })
    }

    fn top_vdev(&self, bp: &BlkPtr, dva: &Dva) -> Result<Arc<dyn VdevIo>> {
        self.vdev(dva.vdev()).ok_or_else(|| ZioError::Io {
            bp: bp.to_string(),
            detail: format!("top-level vdev {} is missing", dva.vdev()),
        })
    }

    /// The child block pointers of a gang block: its header is read from the first gang DVA
    /// that verifies (every DVA of a gang pointer holds a copy of the same header). Holes are
    /// left out. Used to account for the space of a gang tree, not to read its data.
    pub fn gang_children(&self, bp: &BlkPtr) -> Result<Vec<BlkPtr>> {
        let mut last = ZioError::Corrupt(format!("{bp} has no gang DVA"));
        for dva in bp.dvas().iter().filter(|d| d.is_gang()) {
            let Ok(vd) = self.top_vdev(bp, dva) else { continue };
            let ctx = self.ctx();
            let verify_hdr = |h: &[u8]| gang_header_ok(bp, h, ctx);
            match vd.read_verified(dva.offset(), SPA_GANGBLOCKSIZE as u64, bp.physical_birth(), &verify_hdr) {
                Ok(hdr) => {
                    let order = gang_header_order(&hdr);
                    let mut out = Vec::new();
                    for i in 0..SPA_GBH_NBLKPTRS {
                        let child = BlkPtr::parse(&hdr[i * BLKPTR_SIZE..], order)?;
                        if !child.is_hole() {
                            out.push(child);
                        }
                    }
                    return Ok(out);
                }
                Err(_) => last = ZioError::Checksum { bp: format!("gang header of {bp}") },
            }
        }
        Err(last)
    }

    /// Reads a gang block: header, then children, concatenated, then the whole is verified.
    fn read_gang(&self, bp: &BlkPtr, dva: &Dva, depth: u32) -> Result<Vec<u8>> {
        if depth >= MAX_GANG_DEPTH {
            return Err(ZioError::Corrupt(format!("gang tree deeper than {MAX_GANG_DEPTH}")));
        }
        let vd = self.top_vdev(bp, dva)?;
        let ctx = self.ctx();
        let verify_hdr = |h: &[u8]| gang_header_ok(bp, h, ctx);
        let hdr = vd
            .read_verified(dva.offset(), SPA_GANGBLOCKSIZE as u64, bp.physical_birth(), &verify_hdr)
            .map_err(|_| ZioError::Checksum { bp: format!("gang header of {bp}") })?;
        // The header's byte order is revealed by its embedded-checksum magic.
        let order = gang_header_order(&hdr);
        let psize = bp.psize() as usize;
        let mut data = Vec::with_capacity(psize);
        for i in 0..SPA_GBH_NBLKPTRS {
            let child = BlkPtr::parse(&hdr[i * BLKPTR_SIZE..], order)?;
            if child.is_hole() || data.len() >= psize {
                continue;
            }
            let part = match child.dvas().first() {
                Some(d) if d.is_gang() => self.read_gang(&child, d, depth + 1)?,
                _ => self.read_physical(&child)?,
            };
            data.extend_from_slice(&part);
        }
        if data.len() < psize {
            return Err(ZioError::Corrupt(format!(
                "gang children of {bp} hold {} < {psize} bytes",
                data.len()
            )));
        }
        data.truncate(psize);
        if !self.checksum_ok(bp, &data) {
            return Err(ZioError::Checksum { bp: bp.to_string() });
        }
        Ok(data)
    }

    /// True if `data` (physical bytes) matches the pointer's checksum. For pointers with the
    /// crypt bit only the words OpenZFS compares without a key are compared (module comment).
    pub fn checksum_ok(&self, bp: &BlkPtr, data: &[u8]) -> bool {
        let expected = Cksum(bp.cksum);
        let mac = mac_compare(bp);
        let ctx = self.ctx();
        match checksum::spec_from_zio(bp.checksum()) {
            Some(ChecksumSpec::Off) => true,
            Some(ChecksumSpec::Plain(kind)) => {
                let big = bp.byte_order() == ByteOrder::Big;
                let actual = checksum::compute(kind, data, big, ctx);
                match mac {
                    Some(fold) => actual.mac_truncated(fold) == expected.mac_truncated(false),
                    None => actual == expected,
                }
            }
            // ZIL blocks: the verifier is the pointer's checksum (the log sequence tuple).
            Some(ChecksumSpec::ZilChain(_)) => {
                checksum::verify_zil_chain(data, expected, ctx, mac.is_some()).is_ok()
            }
            Some(ChecksumSpec::Embedded(kind)) if bp.checksum() == checksum::ZIO_CHECKSUM_ZILOG => {
                match mac {
                    Some(fold) => checksum::verify_embedded_mac(kind, data, expected, ctx, fold).is_ok(),
                    None => checksum::verify_embedded(kind, data, expected, ctx).is_ok(),
                }
            }
            // Label and gang-header checksums are verified by their own readers (their
            // verifier is not the pointer's checksum); a pointer carrying one is corrupt.
            Some(ChecksumSpec::Embedded(_)) | None => false,
        }
    }

    fn decompress(&self, bp: &BlkPtr, phys: &[u8]) -> Result<Vec<u8>> {
        let lsize = bp.lsize() as usize;
        let kind = compress::kind_from_zio(bp.compress())
            .ok_or_else(|| ZioError::Unsupported(format!("compression {} in {bp}", bp.compress())))?;
        if kind == compress::CompressKind::Off {
            if phys.len() < lsize {
                return Err(ZioError::Corrupt(format!("uncompressed block shorter than lsize: {bp}")));
            }
            return Ok(phys[..lsize].to_vec());
        }
        let mut out = vec![0u8; lsize];
        compress::decompress(kind, phys, &mut out).map_err(|e| ZioError::Corrupt(format!("{e} in {bp}")))?;
        Ok(out)
    }
}

/// `Some(xor_fold)` when only the MAC-truncated checksum can be compared: every pointer with
/// the crypt bit except objset blocks (OpenZFS `zio_checksum_error_impl`).
fn mac_compare(bp: &BlkPtr) -> Option<bool> {
    let objset = dmu_types::DmuObjectType::Objset.to_u8();
    (bp.uses_crypt() && bp.object_type() != objset)
        .then(|| !checksum::zio_checksum_dedup_capable(bp.checksum()))
}

/// Ciphertext cannot be decompressed or interpreted without the key.
fn refuse_encrypted(bp: &BlkPtr) -> Result<()> {
    if bp.is_encrypted() {
        return Err(ZioError::Unsupported(format!("encrypted block {bp}: keys are not supported yet")));
    }
    Ok(())
}

/// Byte order of a gang header (or any block with an embedded checksum tail): the magic
/// `ZEC_MAGIC` reads correctly only in the writer's order.
fn gang_header_order(hdr: &[u8]) -> ByteOrder {
    const ZEC_MAGIC: u64 = 0x0210_da7a_b10c_7a11;
    let tail = hdr.len().saturating_sub(40);
    match ByteOrder::Little.u64_at(hdr, tail, "eck") {
        Ok(m) if m == ZEC_MAGIC => ByteOrder::Little,
        Ok(m) if m.swap_bytes() == ZEC_MAGIC => ByteOrder::Big,
        _ => ByteOrder::NATIVE,
    }
}

#[cfg(test)]
mod tests;
