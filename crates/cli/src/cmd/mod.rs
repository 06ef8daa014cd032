//! Command implementations, run inside the daemon (or directly by `rzdb`).

pub mod userspace;
pub mod zfs;
pub mod zinject;
pub mod zpool;

use crate::proto::Response;

/// Turns a clap parse failure into zpool/zfs's usage error (exit 2) — or help text (exit 0).
pub fn clap_error(e: clap::Error) -> Response {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Response::ok(e.to_string()),
        _ => Response::usage(e.to_string()),
    }
}

/// Resolves a path argument against the client's working directory.
pub fn abs(cwd: &std::path::Path, p: &std::path::Path) -> std::path::PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}
