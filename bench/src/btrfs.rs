//! Kernel peer: the same big file on btrfs, data raid5 (the analogue of raidz1) and metadata
//! raid1 over 3 loop devices whose backing files sit next to the ZFS images (same size, same
//! filesystem, zero-filled). Loop devices do buffered I/O on their backing files, so evicting
//! the backing files (and remounting, which drops btrfs's own caches) makes the read cold.

use crate::e2e::{read_all, result, write_random, Cfg};
use crate::sys;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;

/// Attached loop devices and the mount point; unmounted and detached when dropped.
pub struct Loops {
    pub devs: Vec<String>,
    pub mnt: PathBuf,
}

impl Drop for Loops {
    fn drop(&mut self) {
        if sys::is_mounted(&self.mnt) {
            let _ = sys::run(&["umount", &self.mnt.to_string_lossy()], &[]);
        }
        for d in &self.devs {
            let _ = sys::run(&["losetup", "-d", d], &[]);
        }
    }
}

/// Why btrfs cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !fs.lines().any(|l| l.trim_end().ends_with("btrfs")) {
        return Some("the kernel has no btrfs".into());
    }
    if sys::run(&["losetup", "-f"], &[]).map_or(true, |o| !o.ok) {
        return Some("no free loop device (`losetup -f` fails)".into());
    }
    if sys::run(&["mkfs.btrfs", "--version"], &[]).is_err() {
        return Some(
            "loop devices and the btrfs module work here, but mkfs.btrfs (btrfs-progs) is not installed"
                .into(),
        );
    }
    None
}

fn mount(l: &Loops, ro: bool) -> Result<(), String> {
    let devs: Vec<String> = l.devs.iter().map(|d| format!("device={d}")).collect();
    let opts = format!("{}{}", if ro { "ro," } else { "" }, devs.join(","));
    let m = l.mnt.to_string_lossy();
    sys::must(&["mount", "-t", "btrfs", "-o", &opts, &l.devs[0], &m], &[]).map(|_| ())
}

/// Builds the btrfs volume, writes the file, remounts read-only cold and reads it.
pub fn run(cfg: &Cfg) -> Result<Value, String> {
    if let Some(r) = unavailable() {
        return Err(r);
    }
    let dir = cfg.work.join("btrfs");
    let imgs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("dev{i}.img"))).collect();
    // mkfs.btrfs refuses devices under 125 MiB.
    crate::e2e::zero_fill(&imgs, cfg.disk_mib().max(128))?;
    let mut l = Loops { devs: Vec::new(), mnt: dir.join("mnt") };
    std::fs::create_dir_all(&l.mnt).map_err(|e| e.to_string())?;
    for img in &imgs {
        let d = sys::must(&["losetup", "-f", "--show", &img.to_string_lossy()], &[])?;
        l.devs.push(d.trim().to_string());
    }
    let mut mk = vec!["mkfs.btrfs", "-f", "-q", "-d", "raid5", "-m", "raid1"];
    mk.extend(l.devs.iter().map(String::as_str));
    sys::must(&mk, &[])?;
    mount(&l, false)?;
    let file = l.mnt.join("big.bin");
    let (wr, hash) = write_random(&file, cfg.file_mib)?;
    sys::must(&["umount", &l.mnt.to_string_lossy()], &[])?;
    for img in &imgs {
        // Same host-cache state as the ZFS images (see e2e::run).
        crate::e2e::dd_direct(img)?;
    }
    mount(&l, true)?;
    let left = sys::evict(&imgs)?;
    let t0 = Instant::now();
    let bytes = read_all(&file)?;
    let secs = t0.elapsed().as_secs_f64();
    let mut v = result(
        "btrfs",
        "peer: Linux btrfs (data raid5, metadata raid1) on 3 loop devices",
        bytes,
        secs,
        left,
        None,
    );
    v["write_mbps"] = serde_json::json!(wr);
    v["blake3_written"] = serde_json::json!(hash);
    drop(l);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(v)
}
