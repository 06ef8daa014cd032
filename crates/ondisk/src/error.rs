//! The one error type of the `ondisk` layer: bytes that do not parse.

use std::fmt;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a byte layout could not be decoded (or encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The bytes contradict the format: `what` names the structure, `detail` says what is wrong.
    Corrupt { what: &'static str, detail: String },
    /// The bytes are valid but use a version or feature this code does not understand.
    Unsupported { what: &'static str, detail: String },
}

impl Error {
    /// Shorthand for a `Corrupt` error.
    pub fn corrupt(what: &'static str, detail: impl Into<String>) -> Error {
        Error::Corrupt { what, detail: detail.into() }
    }
    /// Shorthand for an `Unsupported` error.
    pub fn unsupported(what: &'static str, detail: impl Into<String>) -> Error {
        Error::Unsupported { what, detail: detail.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Corrupt { what, detail } => write!(f, "corrupt {what}: {detail}"),
            Error::Unsupported { what, detail } => write!(f, "unsupported {what}: {detail}"),
        }
    }
}

impl std::error::Error for Error {}
