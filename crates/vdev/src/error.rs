//! Errors of the vdev layer.

use codec::CodecError;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, VdevError>;

/// What went wrong reading, writing or building a vdev tree.
#[derive(Debug, thiserror::Error)]
pub enum VdevError {
    /// A device returned an I/O error (leaf reads and writes).
    #[error("I/O error on {device}: {source}")]
    Io {
        device: String,
        #[source]
        source: std::io::Error,
    },
    /// No copy / reconstruction of the block passed the caller's checksum.
    #[error("{vdev}: no valid copy of block at offset {offset:#x} size {size:#x}")]
    Checksum { vdev: String, offset: u64, size: u64 },
    /// Too many children are missing or failed to serve the request.
    #[error("{vdev}: {detail}")]
    Unavailable { vdev: String, detail: String },
    /// The vdev configuration is not usable (bad parity count, empty mirror, ...).
    #[error("invalid vdev config: {0}")]
    InvalidConfig(String),
    /// A request is malformed (zero size, offset overflow, unaligned write...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A vdev type this build cannot do I/O to yet (dRAID).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Parity math rejected its input.
    #[error(transparent)]
    Codec(#[from] CodecError),
}
