//! Errors of the codec layer.

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, CodecError>;

/// What went wrong in a kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// A compressed stream is malformed or does not expand to the expected size.
    #[error("corrupt {algo} stream: {detail}")]
    Corrupt { algo: &'static str, detail: String },
    /// An algorithm (or parameter) this build does not implement.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Reconstruction asked for more missing columns than there is parity.
    #[error("cannot reconstruct {missing} columns with {parity} parity")]
    TooManyMissing { missing: usize, parity: usize },
}
