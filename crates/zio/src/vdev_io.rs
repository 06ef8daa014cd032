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
    /// space), returning the first candidate for which `verify` is true.
    fn read_verified(
        &self,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>, ReadError>;
}

/// The vdev layer's tree is the production implementation. Repairs found while reading are
/// dropped here: a read-only pool cannot write them (the write path applies them).
impl VdevIo for vdev::Vdev {
    fn read_verified(
        &self,
        offset: u64,
        psize: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<Vec<u8>, ReadError> {
        match self.read(offset, psize, verify) {
            Ok(out) => Ok(out.data),
            Err(vdev::VdevError::Checksum { .. }) => Err(ReadError::NoValidCopy),
            Err(e) => Err(ReadError::Io(e.to_string())),
        }
    }
}
