//! Corrective receive (`zfs receive -c POOL/FS@SNAP`): a block of a snapshot that no copy
//! can produce any more (every copy fails its checksum) is rewritten in place from a send
//! stream of that same snapshot.
//!
//! The facts this rests on (OpenZFS's `do_corrective_recv`, dmu_recv.c):
//! - Only level-0 blocks that a WRITE record carries are healed, and only when the read
//!   fails its checksum; a healthy block is never written, and a device error (EIO) is not
//!   a reason to write.
//! - The block pointer does not change: the bytes written are the block's physical bytes
//!   (compressed as the pointer says), and they are written to every DVA only after they
//!   match the pointer's checksum. So the rewrite restores exactly what the pointer has
//!   always described, as a scrub's repair does; nothing else in the pool can notice.
//! - The snapshot must be the stream's (same guid), so the stream holds the same data.
//!
//! Safety against reuse: a snapshot's blocks stay allocated while it exists. The lookup
//! and the write happen under the pool's writer lock (no txg can sync meanwhile, so no
//! destroy can free the block under the write), and the snapshot is looked up in the open
//! txg each time, not in a possibly older view.

use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use ondisk::blkptr::BlkPtr;
use ondisk::ByteOrder;

/// What became of one block a WRITE record names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heal {
    /// The block reads and verifies: left alone.
    Healthy,
    /// Every copy was bad; the record's bytes matched the pointer and were written to each
    /// copy, and the block now verifies.
    Healed,
    /// The block is bad, but no candidate the record gave matches the pointer's checksum
    /// (a stream of other data, or compressed differently).
    NoMatch,
    /// Nothing stored to heal: a hole, or data embedded in the pointer.
    NotStored,
}

/// The stored level-0 block of `object` at byte `offset` in objset `os`, for a WRITE record
/// of `lsize` logical bytes: `None` for a hole or data embedded in the pointer. A record
/// that does not line up with the object's blocks is refused, as OpenZFS's heal refuses a
/// size mismatch (ENOTSUP). Used under the writer lock and, for the lock-free check of
/// healthy blocks, on a committed view.
pub fn stored_block(os: &dmu::Objset, object: u64, offset: u64, lsize: u64) -> Result<Option<BlkPtr>> {
    let dn = os.dnode(object)?;
    let bsize = dn.data_block_size();
    if bsize == 0 || !offset.is_multiple_of(bsize) || lsize != bsize {
        return Err(PoolError::Unsupported(format!(
            "stream is not compatible with the data in the pool (object {object}: a record of {lsize} bytes at {offset}, blocks of {bsize})"
        )));
    }
    Ok(os.block_pointer(&dn, 0, offset / bsize)?.filter(|bp| !bp.is_hole() && !bp.is_embedded()))
}

impl PoolWriter {
    /// The objset of dataset `name` as the open txg has it, with its `dsl_dataset` guid;
    /// `None` when it does not exist.
    fn open_txg_objset(&mut self, name: &str) -> Result<Option<(u64, dmu::Objset)>> {
        let Some(found) = dsl::write::lookup(&self.mos, &mut self.mos_zaps, name)
            .map_err(|e| PoolError::Invalid(e.to_string()))?
        else {
            return Ok(None);
        };
        let phys = dsl::write::ds_phys(&self.mos, found.ds).map_err(|e| PoolError::Invalid(e.to_string()))?;
        let root = BlkPtr::parse(&phys.bp, ByteOrder::Little)?;
        Ok(Some((phys.guid, dmu::Objset::open(&self.reader, &root)?)))
    }

    /// Heals the block of snapshot `snapshot` (guid `guid`) at `offset` of `object` from a
    /// WRITE record of `lsize` logical bytes, if every copy of it is bad. `candidates`
    /// gives the physical bytes to try (e.g. the record's compressed payload, then its data
    /// compressed as the pointer says); the first that matches the pointer's checksum is
    /// written to every DVA, flushed, and read back.
    pub fn heal_block(
        &mut self,
        snapshot: &str,
        guid: u64,
        object: u64,
        offset: u64,
        lsize: u64,
        candidates: &mut dyn FnMut(&BlkPtr) -> Vec<Vec<u8>>,
    ) -> Result<Heal> {
        let (g, os) = self
            .open_txg_objset(snapshot)?
            .ok_or_else(|| PoolError::Invalid(format!("snapshot '{snapshot}' no longer exists")))?;
        if g != guid {
            return Err(PoolError::Invalid(format!(
                "snapshot '{snapshot}' is no longer the snapshot the stream was checked against"
            )));
        }
        let Some(bp) = stored_block(&os, object, offset, lsize)? else {
            return Ok(Heal::NotStored);
        };
        let zio = self.reader.zio.clone();
        match zio.read_physical(&bp) {
            Ok(_) => return Ok(Heal::Healthy),
            Err(zio::ZioError::Checksum { .. }) => {}
            Err(e) => return Err(PoolError::Dmu(dmu::DmuError::Zio(e))),
        }
        if bp.is_gang() || bp.is_encrypted() {
            return Err(PoolError::Unsupported(format!(
                "object {object} offset {offset}: a {} block cannot be healed by rzfs",
                if bp.is_gang() { "gang" } else { "encrypted" }
            )));
        }
        let psize = bp.psize() as usize;
        let Some(good) = candidates(&bp).into_iter().find(|c| c.len() == psize && zio.checksum_ok(&bp, c))
        else {
            return Ok(Heal::NoMatch);
        };
        for dva in bp.dvas() {
            let top = usize::try_from(dva.vdev())
                .ok()
                .and_then(|i| self.tops.get(i))
                .ok_or_else(|| PoolError::Invalid(format!("{bp}: no top-level vdev {}", dva.vdev())))?;
            top.write(dva.offset(), &good).map_err(|e| PoolError::Io(format!("rewriting {bp}: {e}")))?;
            top.flush().map_err(|e| PoolError::Io(format!("flushing after rewriting {bp}: {e}")))?;
        }
        self.reader.invalidate(&bp);
        match zio.read_physical(&bp) {
            Ok(_) => Ok(Heal::Healed),
            Err(e) => Err(PoolError::Io(format!("the rewritten block still does not read back: {e}"))),
        }
    }

    /// True when every level-0 block of `object` in dataset `name` (a snapshot or file
    /// system, looked up in the open txg) reads and verifies: after a corrective receive,
    /// whether its error-log entries may go.
    pub fn object_verifies(&mut self, name: &str, object: u64) -> Result<bool> {
        let Some((_, os)) = self.open_txg_objset(name)? else { return Ok(false) };
        let Ok(dn) = os.dnode(object) else { return Ok(false) };
        let zio = self.reader.zio.clone();
        let mut ok = true;
        let walked = os.for_each_l0(&dn, &mut |_, bp| {
            if !bp.is_hole() && !bp.is_embedded() && zio.read_physical(bp).is_err() {
                ok = false;
            }
            Ok(())
        });
        Ok(walked.is_ok() && ok)
    }
}
