//! The control-socket protocol between `rzpool`/`rzfs` and `rzfsd`.
//!
//! One request per connection: the client writes one JSON line, the daemon answers with one
//! JSON line and closes. The request carries the program name and its argv exactly as typed,
//! so the daemon parses arguments with the same definitions a local run would use, and
//! messages and exit codes are the same whichever side produced them.
//! `version` guards against a client and daemon from different builds: a mismatch is
//! answered with a clear error, never misparsed.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Bumped whenever a field's meaning changes.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest request line the daemon accepts (bounds its memory per connection against a
/// hostile peer; a longer request is answered "request too large").
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// Largest response line a client accepts: listings of many datasets can be long, and
/// the daemon is the trusted side, so this only guards the client against a runaway.
pub const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// `zpool events -f` is followed by the client, which asks for the events after the last
/// one it printed (hidden `--after EID`); the daemon ends its answer's stderr with this
/// marker and the newest event id, a line the client takes out.
pub const EVENTS_LAST_EID: &str = "rzfs-events-last-eid ";

/// A command to run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Request {
    pub version: u32,
    /// "rzpool" or "rzfs".
    pub prog: String,
    /// Arguments after the program name.
    pub argv: Vec<String>,
    /// The client's working directory (relative paths in arguments are resolved against it).
    pub cwd: PathBuf,
    /// The name the client was run as when it is zpool's or zfs's (a link or alias named
    /// `zpool` or `zfs`): pool history records the command as typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoked_as: Option<String>,
}

/// The result of a command.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Response {
    pub version: u32,
    pub exit: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Response {
    /// A successful response with output.
    pub fn ok(stdout: String) -> Response {
        Response { version: PROTOCOL_VERSION, exit: 0, stdout, stderr: String::new() }
    }
    /// A failed response with a message (exit 1, zpool/zfs's code for errors).
    pub fn err(msg: impl Into<String>) -> Response {
        let mut m: String = msg.into();
        if !m.ends_with('\n') {
            m.push('\n');
        }
        Response { version: PROTOCOL_VERSION, exit: 1, stdout: String::new(), stderr: m }
    }
    /// A usage error (exit 2, as zpool/zfs use).
    pub fn usage(msg: impl Into<String>) -> Response {
        let mut r = Response::err(msg);
        r.exit = 2;
        r
    }
}

/// Parses one request line; errors are user-facing.
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!("request too large (more than {MAX_REQUEST_BYTES} bytes)"));
    }
    let r: Request = serde_json::from_slice(line).map_err(|e| format!("malformed request: {e}"))?;
    if r.version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version mismatch: client speaks {}, rzfsd speaks {PROTOCOL_VERSION}; restart rzfsd",
            r.version
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let r = Request {
            version: 1,
            prog: "rzpool".into(),
            argv: vec!["list".into()],
            cwd: "/".into(),
            invoked_as: None,
        };
        let line = serde_json::to_vec(&r).unwrap();
        assert_eq!(parse_request(&line).unwrap(), r);
        let mut old = r.clone();
        old.version = 0;
        assert!(parse_request(&serde_json::to_vec(&old).unwrap()).unwrap_err().contains("mismatch"));
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_request(&bytes);
        }
    }
}
