//! # cli — `rzpool`, `rzfs`, `rzfsd` and `rzdb`
//!
//! Thin adapters: argument parsing that mirrors zpool(8)/zfs(8), output formatting that
//! matches theirs (including `-H` and `-p`), the control-socket protocol, and the daemon's
//! command loop. Pool logic lives in the library crates below.
#![forbid(unsafe_code)]

pub mod access;
pub mod blockstats;
pub mod cache;
pub mod client;
pub mod cmd;
pub mod daemon;
pub mod diff;
pub mod format;
pub mod inspect;
pub mod mountopts;
pub mod proto;
pub mod recover;
pub mod rwadd;
pub mod rwattach;
pub mod rwpool;
pub mod sendrecv;
pub mod vdevprops;
pub mod volumes;
pub mod zilreplay;
pub mod zplopen;
