//! The write half of the pipeline: compress → checksum → allocate → issue.
//!
//! 1. **compress**: an all-zero logical block with compression enabled becomes a hole (an
//!    all-zero block pointer: without `hole_birth` OpenZFS keeps no birth in holes). Other
//!    blocks are compressed; the result is kept only when it saves at least 1/8 of the block
//!    and, once rounded up to the pool's smallest sector, is still smaller than the block
//!    (OpenZFS `zio_write_compress` / `zio_compress_data`). The tail is zero-padded, which
//!    every decompressor ignores (lz4 and zstd carry their length in a header).
//!    A level-0 block that compresses to at most 112 bytes on a pool with `embedded_data`
//!    is stored inside its block pointer instead (`BP_EMBEDDED_TYPE_DATA`): no allocation,
//!    no checksum (the pointer's own checksum covers it).
//! 2. **checksum** over exactly `psize` physical bytes, little-endian words.
//! 3. **allocate**: the caller decides where; [`Allocate`] picks fresh space, or the caller
//!    passes the DVAs of a block born in the same txg to rewrite it in place (the sync loop's
//!    convergence rule: see `pool::sync`).
//! 4. **issue** to every DVA's top-level vdev (which writes parity or mirror copies).
//!
//! Nothing here flushes: the txg sync flushes all vdevs before it writes uberblocks.

use super::{Result, Zio, ZioError};
use codec::checksum::{self, ChecksumSpec, Cksum};
use codec::compress::{self, CompressKind};
use ondisk::blkptr::{BlkPtr, Dva};
use ondisk::ByteOrder;

/// How one block is to be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteProps {
    /// `enum zio_checksum` value (resolved: never inherit/on).
    pub checksum: u8,
    /// `enum zio_compress` value (resolved: never inherit/on).
    pub compress: u8,
    /// zstd level (`enum zio_zstd_levels`); ignored by other algorithms.
    pub zstd_level: u8,
    /// Number of DVAs (1..=3).
    pub copies: u8,
    pub object_type: u8,
    pub level: u8,
    /// The pool has `embedded_data`: a level-0 block that compresses to at most
    /// [`BPE_PAYLOAD_SIZE`] bytes lives inside its block pointer.
    pub embed: bool,
}

/// Bytes of payload an embedded block pointer holds (`BPE_PAYLOAD_SIZE`).
pub const BPE_PAYLOAD_SIZE: usize = 112;
/// `DMU_OT_DNODE` and `DMU_OT_OBJSET`: their block pointers carry a fill count, so their
/// blocks are never embedded (`DMU_OT_HAS_FILL`).
const OT_DNODE: u8 = 10;
const OT_OBJSET: u8 = 11;

/// A block after the compression stage: what will be written and how it is described.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Physical bytes (`psize` long, zero-padded); empty for a hole.
    pub phys: Vec<u8>,
    pub lsize: u64,
    pub compress: u8,
    /// The block is all zeros and compression is on: it becomes a hole.
    pub hole: bool,
    /// The compressed bytes (`phys`, unpadded) go inside the block pointer: nothing is
    /// allocated or written.
    pub embedded: bool,
    /// The checksum of `phys` for a checksum type, when already computed (a nop-write test
    /// that found the old block different): [`Zio::issue`] then does not compute it again.
    pub cksum: Option<(u8, Cksum)>,
}

impl Prepared {
    pub fn psize(&self) -> u64 {
        self.phys.len() as u64
    }

    /// Pads the physical bytes up to `psize` (for an in-place rewrite into a slot that was
    /// allocated for a larger compressed block). Uncompressed blocks cannot grow: their
    /// psize is their lsize.
    pub fn pad_to(&mut self, psize: u64) -> bool {
        if psize < self.psize() || (self.compress == compress::ZIO_COMPRESS_OFF && psize != self.psize()) {
            return false;
        }
        if psize != self.psize() {
            self.phys.resize(psize as usize, 0);
            self.cksum = None;
        }
        true
    }
}

/// Picks space for new blocks.
pub trait Allocate: Sync {
    /// `copies` DVAs for a block of `psize` physical bytes, born in `txg`. The allocator asks
    /// `zio.top_asize` for the allocated size on the top-level vdev it chooses.
    fn allocate(&self, zio: &Zio, psize: u64, copies: usize, txg: u64) -> Result<Vec<Dva>>;
}

impl Zio {
    /// Allocated size of `psize` physical bytes on top-level vdev `vdev`.
    pub fn top_asize(&self, vdev: u64, psize: u64) -> Option<u64> {
        Some(self.vdev(vdev)?.psize_to_asize(psize))
    }

    /// Stage 1: compression and hole detection. `sector` is the smallest sector size of the
    /// pool's top-level vdevs (1 << min ashift).
    pub fn prepare(&self, data: &[u8], props: &WriteProps, sector: u64) -> Result<Prepared> {
        let lsize = data.len() as u64;
        if lsize == 0 || !lsize.is_multiple_of(512) {
            return Err(ZioError::Corrupt(format!("logical block size {lsize} is not a multiple of 512")));
        }
        let kind = compress::kind_from_zio(props.compress)
            .ok_or_else(|| ZioError::Unsupported(format!("compression value {}", props.compress)))?;
        if kind != CompressKind::Off && data.iter().all(|&b| b == 0) {
            return Ok(Prepared {
                phys: Vec::new(),
                lsize,
                compress: props.compress,
                hole: true,
                embedded: false,
                cksum: None,
            });
        }
        if kind != CompressKind::Off && kind != CompressKind::Empty {
            // Keep compression only if it saves 1/8 (zio_compress_data's rule).
            let limit = (lsize - (lsize >> 3)) as usize;
            let mut dst = vec![0u8; limit];
            if let Some(n) = compress::compress(kind, props.zstd_level, data, &mut dst) {
                // Small enough to embed (`zio_write_compress`): level 0, not a block whose
                // pointer needs a fill count (dnode and objset blocks).
                if props.embed
                    && n <= BPE_PAYLOAD_SIZE
                    && n <= limit
                    && props.level == 0
                    && !matches!(props.object_type, OT_DNODE | OT_OBJSET)
                {
                    dst.truncate(n.max(1));
                    return Ok(Prepared {
                        phys: dst,
                        lsize,
                        compress: props.compress,
                        hole: false,
                        embedded: true,
                        cksum: None,
                    });
                }
                let rounded = (n as u64).max(1).next_multiple_of(sector.max(512));
                if n <= limit && rounded < lsize {
                    dst.truncate(n);
                    dst.resize(rounded as usize, 0);
                    return Ok(Prepared {
                        phys: dst,
                        lsize,
                        compress: props.compress,
                        hole: false,
                        embedded: false,
                        cksum: None,
                    });
                }
            }
        }
        Ok(Prepared {
            phys: data.to_vec(),
            lsize,
            compress: compress::ZIO_COMPRESS_OFF,
            hole: false,
            embedded: false,
            cksum: None,
        })
    }

    /// Stages 2 and 4: checksums the prepared block, writes it to every DVA and returns its
    /// block pointer (fill 1; callers of indirect and dnode blocks set the fill).
    pub fn issue(&self, p: &Prepared, props: &WriteProps, txg: u64, dvas: &[Dva]) -> Result<BlkPtr> {
        if p.hole {
            return Ok(BlkPtr::default());
        }
        if p.embedded {
            return BlkPtr::new_embedded(
                &p.phys,
                p.lsize,
                p.compress,
                props.object_type,
                props.level,
                txg,
                ByteOrder::Little,
            )
            .map_err(|e| ZioError::Corrupt(e.to_string()));
        }
        if dvas.is_empty() || dvas.len() > 3 {
            return Err(ZioError::Corrupt(format!("{} DVAs for one block", dvas.len())));
        }
        let mut bp = BlkPtr::default();
        for (slot, d) in bp.dva.iter_mut().zip(dvas) {
            *slot = *d;
        }
        bp.set_prop(
            p.lsize,
            p.psize(),
            p.compress,
            props.checksum,
            props.object_type,
            props.level,
            ByteOrder::Little,
        );
        bp.birth = txg;
        bp.phys_birth = 0;
        bp.fill = 1;
        bp.cksum = match p.cksum {
            Some((kind, c)) if kind == props.checksum => c.0,
            _ => self.block_checksum(props.checksum, &p.phys)?.0,
        };
        for d in dvas {
            let vd = self.top_vdev(&bp, d)?;
            vd.write_block(d.offset(), &p.phys)
                .map_err(|detail| ZioError::Io { bp: bp.to_string(), detail })?;
        }
        self.stats.blocks_written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .bytes_written
            .fetch_add(p.psize() * dvas.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(bp)
    }

    /// The whole pipeline with fresh allocation.
    pub fn write(
        &self,
        data: &[u8],
        props: &WriteProps,
        txg: u64,
        sector: u64,
        alloc: &dyn Allocate,
    ) -> Result<BlkPtr> {
        let p = self.prepare(data, props, sector)?;
        if p.hole || p.embedded {
            return self.issue(&p, props, txg, &[]);
        }
        let dvas = alloc.allocate(self, p.psize(), usize::from(props.copies.clamp(1, 3)), txg)?;
        self.issue(&p, props, txg, &dvas)
    }

    /// Would writing `p` with `props` give the block `old` points to, bit for bit? Same
    /// checksum type, compression, sizes and number of copies, and an equal checksum of the
    /// physical bytes (`zio_nop_write`'s test; the caller allows only checksums for which
    /// equal means the same bytes). Holes, embedded, gang, encrypted and dedup blocks never.
    /// The checksum computed for the test stays with `p`, for its write when it differs.
    pub fn same_block(&self, p: &mut Prepared, props: &WriteProps, old: &BlkPtr) -> Result<bool> {
        if p.hole || p.embedded || old.is_hole() || old.is_embedded() || old.is_gang() {
            return Ok(false);
        }
        if old.is_encrypted() || old.dedup() {
            return Ok(false);
        }
        if old.checksum() != props.checksum
            || old.compress() != p.compress
            || old.lsize() != p.lsize
            || old.psize() != p.psize()
            || old.ndvas() != usize::from(props.copies.clamp(1, 3))
        {
            return Ok(false);
        }
        let c = self.block_checksum(props.checksum, &p.phys)?;
        let same = c.0 == old.cksum;
        p.cksum = Some((props.checksum, c));
        Ok(same)
    }

    /// The checksum a block pointer of checksum type `cksum` stores for `phys`.
    pub fn block_checksum(&self, cksum: u8, phys: &[u8]) -> Result<Cksum> {
        match checksum::spec_from_zio(cksum) {
            Some(ChecksumSpec::Plain(kind)) => Ok(checksum::compute(kind, phys, false, self.ctx())),
            Some(ChecksumSpec::Off) => Ok(Cksum::default()),
            _ => Err(ZioError::Unsupported(format!("writing blocks with checksum value {cksum}"))),
        }
    }

    /// Writes each block's bytes as they are at every DVA of its pointer, then flushes the
    /// vdevs written, each once (intent log blocks: the pointer was made when the block was
    /// allocated, the checksum is embedded in the bytes, and the caller acknowledges
    /// `fsync` only once they are durable).
    pub fn write_sealed(&self, blocks: &[(BlkPtr, Vec<u8>)]) -> Result<()> {
        let mut written = std::collections::BTreeSet::new();
        for (bp, phys) in blocks {
            for d in bp.dva.iter().take(bp.ndvas()) {
                let vd = self.top_vdev(bp, d)?;
                vd.write_block(d.offset(), phys)
                    .map_err(|detail| ZioError::Io { bp: bp.to_string(), detail })?;
                written.insert(d.vdev());
            }
            self.stats.blocks_written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.stats
                .bytes_written
                .fetch_add(phys.len() as u64 * bp.ndvas() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        for v in written {
            let vd = self.vdev(v).ok_or_else(|| ZioError::Io {
                bp: "flush".into(),
                detail: format!("top-level vdev {v} is missing"),
            })?;
            vd.flush_writes().map_err(|detail| ZioError::Io { bp: "flush".into(), detail })?;
        }
        Ok(())
    }

    /// Flushes the write caches of every present top-level vdev.
    pub fn flush_all(&self) -> Result<()> {
        for vd in self.all_vdevs() {
            vd.flush_writes().map_err(|detail| ZioError::Io { bp: "flush".into(), detail })?;
        }
        Ok(())
    }
}
