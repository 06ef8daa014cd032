//! The one thing the pipeline needs from a top-level vdev: a read that keeps trying the
//! vdev's redundancy (mirror copies, RAID-Z reconstructions) until the caller's verifier
//! accepts the bytes.

/// Why a top-level vdev could not produce verified bytes.
#[derive(Debug, Clone)]
pub enum ReadError {
    /// Every copy/reconstruction was read but none verified.
    NoValidCopy,
    /// Devices failed (or are missing) so that not even a candidate could be assembled.
    Io(String),
}

/// A top-level vdev as seen by the pipeline.
pub trait VdevIo: Send + Sync {
    /// Reads `psize` bytes at `offset` (a DVA offset: relative to the vdev's allocatable
    /// space) of a block born in txg `birth` (0: unknown), returning the first candidate
    /// for which `verify` is true. The birth lets the vdev avoid children that are missing
    /// that txg (their DTL).
    fn read_verified(
        &self,
        offset: u64,
        psize: u64,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>, ReadError>;

    /// Writes a block of physical bytes at a DVA offset (parity and copies are the vdev's
    /// business). Read-only implementations keep the default, which refuses.
    fn write_block(&self, _offset: u64, _data: &[u8]) -> Result<(), String> {
        Err("this vdev is read-only".into())
    }

    /// Allocated size of a block of `psize` physical bytes on this vdev (RAID-Z adds
    /// parity and padding).
    fn psize_to_asize(&self, psize: u64) -> u64 {
        psize.next_multiple_of(512)
    }

    /// Makes every completed write durable (a cache flush on each leaf).
    fn flush_writes(&self) -> Result<(), String> {
        Ok(())
    }

    /// Applies repairs (rewrites of bad copies) found by the last reads, if any; returns
    /// how many were written.
    fn apply_pending_repairs(&self) -> usize {
        0
    }

    /// Can new blocks go here (enough devices left for the vdev's layout)?
    fn can_write(&self) -> bool {
        true
    }
}

/// The vdev layer's tree is the production implementation. Repairs found while reading are
/// dropped here: a read-only pool cannot write them (the write path applies them).
impl VdevIo for vdev::Vdev {
    fn can_write(&self) -> bool {
        !self.state().is_lost()
    }

    fn read_verified(
        &self,
        offset: u64,
        psize: u64,
        birth: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>, ReadError> {
        match self.read_born(offset, psize, (birth != 0).then_some(birth), verify) {
            Ok(out) => {
                // Repair on read: rewrite the copies proven bad with the verified bytes. On a
                // read-only import the devices are opened read-only and the writes fail
                // harmlessly (reading never writes).
                if !out.repairs.is_empty() {
                    let _ = self.apply_repairs(&out.repairs);
                }
                Ok(out.data)
            }
            Err(vdev::VdevError::Checksum { .. }) => Err(ReadError::NoValidCopy),
            Err(e) => Err(ReadError::Io(e.to_string())),
        }
    }

    fn write_block(&self, offset: u64, data: &[u8]) -> Result<(), String> {
        self.write(offset, data).map_err(|e| e.to_string())
    }

    fn psize_to_asize(&self, psize: u64) -> u64 {
        self.asize(psize)
    }

    fn flush_writes(&self) -> Result<(), String> {
        self.flush().map_err(|e| e.to_string())
    }
}
