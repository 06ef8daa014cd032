//! Pools through a private rzfsd for the scan tests (scrub, resilver, device management):
//! layouts, creating and importing them, reading `zpool status`, comparing files.
#![allow(dead_code)]

use super::tools::Daemon;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Per-device (READ, WRITE, CKSUM) from `zpool status -p`.
pub fn counters(status: &str, devs: &[String]) -> Vec<(u64, u64, u64)> {
    devs.iter()
        .map(|d| {
            let line = status
                .lines()
                .find(|l| l.split_whitespace().next() == Some(d.as_str()))
                .unwrap_or_else(|| panic!("{d} not in status:\n{status}"));
            let w: Vec<u64> = line.split_whitespace().skip(2).take(3).map(|x| x.parse().unwrap()).collect();
            (w[0], w[1], w[2])
        })
        .collect()
}

pub fn scan_line(status: &str) -> String {
    status.lines().find(|l| l.trim_start().starts_with("scan:")).unwrap_or("").trim().to_string()
}

/// Compares the files under `mnt` with `want`; snapshot entries only when `snapshots`
/// (the read-write mount has no `.zfs` directory yet; the read-only one has).
pub fn check_files(mnt: &Path, want: &BTreeMap<String, Vec<u8>>, what: &str, snapshots: bool) {
    for (k, v) in want.iter().filter(|(k, _)| snapshots || !k.starts_with(".zfs/")) {
        let got = std::fs::read(mnt.join(k)).unwrap_or_else(|e| panic!("{what}: reading {k}: {e}"));
        assert!(got == *v, "{what}: {k} differs ({} bytes, want {})", got.len(), v.len());
    }
}

pub struct Layout {
    pub name: &'static str,
    /// `zpool create` vdev words with `{}` for each device in turn.
    pub words: &'static [&'static str],
    pub ndev: usize,
    /// Device groups that share redundancy, and how many of each may be lost.
    pub groups: &'static [&'static [usize]],
    pub parity: usize,
}

/// Imports `pool` from `dir` and mounts its root file system at `mnt`.
pub fn import(d: &Daemon, dir: &Path, pool: &str, mnt: &Path, readonly: bool) {
    let mut args = vec!["import", "-d", dir.to_str().unwrap()];
    if readonly {
        args.extend(["-o", "readonly=on"]);
    }
    args.push(pool);
    d.ok("rzpool", &args);
    d.ok("rzfs", &["mount", pool, mnt.to_str().unwrap()]);
}

pub fn create(d: &Daemon, dir: &Path, pool: &str, l: &Layout, size: u64) -> (Vec<String>, PathBuf) {
    let devs = super::tools::files(dir, l.ndev, size);
    let mnt = dir.join("mnt");
    let mut args: Vec<String> = vec!["create".into(), "-m".into(), mnt.to_string_lossy().into(), pool.into()];
    let mut next = devs.iter();
    for w in l.words {
        args.push(if *w == "{}" { next.next().unwrap().clone() } else { w.to_string() });
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    d.ok("rzpool", &args);
    (devs, mnt)
}
