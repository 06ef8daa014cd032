//! Pools through a private rzfsd for the scan tests (scrub, resilver, device management):
//! layouts, creating and importing them, reading `zpool status`, comparing files.
#![allow(dead_code)]

use super::rng::Rng;
use super::tools::{run_zdb, Daemon};
use std::collections::BTreeMap;
use std::ops::Range;
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

/// One file vdev.
pub const SINGLE: Layout = Layout { name: "single", words: &["{}"], ndev: 1, groups: &[&[0]], parity: 0 };
/// A mirror of two.
pub const MIRROR2: Layout =
    Layout { name: "mirror2", words: &["mirror", "{}", "{}"], ndev: 2, groups: &[&[0, 1]], parity: 1 };
/// A raidz1 of three.
pub const RAIDZ1: Layout = Layout {
    name: "raidz1",
    words: &["raidz1", "{}", "{}", "{}"],
    ndev: 3,
    groups: &[&[0, 1, 2]],
    parity: 1,
};

/// Imports `pool` from `dir` and mounts its root file system at `mnt`.
pub fn import(d: &Daemon, dir: &Path, pool: &str, mnt: &Path, readonly: bool) {
    let mut args = vec!["import", "-N", "-d", dir.to_str().unwrap()];
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

/// Writes `n` files named `{tag}{i}` with sizes in `sizes`; records them in `want`.
pub fn write_files(
    mnt: &Path,
    tag: &str,
    n: usize,
    sizes: Range<u64>,
    rng: &mut Rng,
    want: &mut BTreeMap<String, Vec<u8>>,
) {
    for i in 0..n {
        let data = rng.data_in(sizes.start, sizes.end);
        std::fs::write(mnt.join(format!("{tag}{i}")), &data).unwrap();
        want.insert(format!("{tag}{i}"), data);
    }
}

/// The device's state in `zpool status` (ONLINE, OFFLINE, UNAVAIL, FAULTED...).
pub fn dev_state(status: &str, dev: &str) -> String {
    let line = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(dev))
        .unwrap_or_else(|| panic!("{dev} not in status:\n{status}"));
    line.split_whitespace().nth(1).unwrap().to_string()
}

/// Bytes the finished resilver says it wrote ("resilvered 10.1M in ...", `-p` not needed:
/// parsed from zpool's short units).
pub fn resilvered(status: &str) -> u64 {
    let scan = scan_line(status);
    let amount = scan
        .strip_prefix("scan: resilvered ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no finished resilver:\n{status}"));
    let (num, unit) = amount.split_at(amount.len() - 1);
    let mult = match unit {
        "B" => 1.0,
        "K" => 1024.0,
        "M" => 1048576.0,
        "G" => 1073741824.0,
        _ => panic!("unit of {amount}"),
    };
    (num.parse::<f64>().unwrap() * mult) as u64
}

/// Allocated bytes of the pool (`zpool list -Hp -o alloc`).
pub fn allocated(d: &Daemon, pool: &str) -> u64 {
    d.ok("rzpool", &["list", "-Hp", "-o", "alloc", pool]).trim().parse().unwrap()
}

/// Moves `devs[i]` for each i in `which` into `dir/aside` (out of the import's sight).
pub fn set_aside(dir: &Path, devs: &[String], which: &[usize]) {
    let aside = dir.join("aside");
    std::fs::create_dir_all(&aside).unwrap();
    for &i in which {
        let p = Path::new(&devs[i]);
        std::fs::rename(p, aside.join(p.file_name().unwrap())).unwrap();
    }
}

/// Undoes [`set_aside`].
pub fn bring_back(dir: &Path, devs: &[String], which: &[usize]) {
    for &i in which {
        let p = Path::new(&devs[i]);
        std::fs::rename(dir.join("aside").join(p.file_name().unwrap()), p).unwrap();
    }
}

/// `n` blank 128 MiB devices `{tag}0`... in `dir` (where imports look for devices).
pub fn blank(dir: &Path, tag: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{tag}{i}"));
            std::fs::File::create(&p).unwrap().set_len(128 << 20).unwrap();
            p.to_string_lossy().into_owned()
        })
        .collect()
}

/// Overwrites `len` bytes at `off` of a file with noise.
pub fn noise(path: &Path, off: u64, len: usize, rng: &mut Rng) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    f.write_all_at(&buf, off).unwrap();
}

/// Flips one random bit in each of `n` random bytes within `[from, to)`.
pub fn flips(path: &Path, from: u64, to: u64, n: usize, rng: &mut Rng) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    for _ in 0..n {
        let off = rng.range(from, to);
        let mut b = [0u8];
        f.read_exact_at(&mut b, off).unwrap();
        b[0] ^= 1 << rng.below(8);
        f.write_all_at(&b, off).unwrap();
    }
}

/// Where the first level-0 block of object `obj` of file system `fs` (`POOL/` for the root
/// one: plain `POOL` names the MOS) lives, by zdb: (offset, allocated size) of its first DVA.
pub fn first_l0_dva(dir: &Path, fs: &str, obj: u64) -> (u64, u64) {
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddddd", fs, &obj.to_string()]);
    let dva = dump
        .lines()
        .find(|l| l.contains(" L0 ") && !l.contains("EMBEDDED"))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("0:")))
        .unwrap_or_else(|| panic!("no L0 block in:\n{dump}"))
        .to_string();
    let parts: Vec<u64> = dva.split(':').skip(1).map(|h| u64::from_str_radix(h, 16).unwrap()).collect();
    (parts[0], parts[1])
}
