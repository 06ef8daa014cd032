//! End to end through the daemon and the kernel: `rzfsd` started on demand by `rzpool`,
//! `rzpool import -o readonly=on`, `rzfs mount`, then every file of a zfs-fuse pool read
//! through the FUSE mount (stat fields, contents, symlinks, xattrs) and through
//! `.zfs/snapshot/NAME`, compared with what zfs-fuse recorded; then unmount and export.
//! Needs /dev/fuse and fusermount3 (installed by scripts/install-test-deps.sh).

mod common;

use common::tools::Daemon;
use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

fn hash(p: &Path) -> String {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(p).unwrap(), &mut h).unwrap();
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn xattrs(p: &Path) -> Value {
    let out = Command::new("getfattr")
        .args(["-d", "-h", "-e", "hex", "-m", "-", "--absolute-names"])
        .arg(p)
        .output();
    let mut m = serde_json::Map::new();
    if let Ok(out) = out {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = line.split_once('=') {
                m.insert(k.to_string(), Value::String(v.trim_start_matches("0x").to_string()));
            }
        }
    }
    Value::Object(m)
}

/// Compares a mounted tree with the expected file list.
fn compare_mount(root: &Path, files: &[Value]) -> Vec<String> {
    let mut probs = Vec::new();
    for f in files {
        let rel = f["path"].as_str().unwrap();
        if rel == "/" {
            continue;
        }
        let p = root.join(rel.trim_start_matches('/'));
        let md = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                probs.push(format!("{rel}: {e}"));
                continue;
            }
        };
        let checks = [
            ("size", md.size()),
            ("mode", md.mode() as u64),
            ("uid", md.uid() as u64),
            ("gid", md.gid() as u64),
            ("links", md.nlink()),
        ];
        for (k, v) in checks {
            if f[k].as_u64() != Some(v) {
                probs.push(format!("{rel}: {k} expected {} got {v}", f[k]));
            }
        }
        if f["mtime"].as_i64() != Some(md.mtime()) {
            probs.push(format!("{rel}: mtime expected {} got {}", f["mtime"], md.mtime()));
        }
        if let Some(h) = f["sha256"].as_str() {
            if hash(&p) != h {
                probs.push(format!("{rel}: content differs"));
            }
        }
        if let Some(t) = f["target"].as_str() {
            let got = std::fs::read_link(&p).map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
            if got != t {
                probs.push(format!("{rel}: target expected {t} got {got}"));
            }
        }
        if let Some(xa) = f.get("xattrs") {
            let got = xattrs(&p);
            if *xa != got {
                probs.push(format!("{rel}: xattrs expected {xa} got {got}"));
            }
        }
    }
    probs
}

#[test]
fn fuse_mount_serves_files_and_snapshots() {
    for layout in ["stripe", "mirror", "raidz1", "raidz2", "raidz3"] {
        mount_and_compare(layout);
    }
}

fn mount_and_compare(layout: &str) {
    let Some(root) = testdata("zfsfuse") else { return };
    let dir = root.join(layout);
    let exp = expected(&dir);
    let pool = exp["pool"].as_str().unwrap();
    let d = Daemon::new(layout);
    let dirs = dir.to_string_lossy().into_owned();
    let listing = d.ok("rzpool", &["import", "-N", "-d", &dirs]);
    assert!(listing.contains(&format!("pool: {pool}")) && listing.contains("ONLINE"), "{listing}");
    // zfs-fuse pools are version 23: a read-write import is refused, pointing at readonly=on.
    let (code, _, err) = d.run("rzpool", &["import", "-N", "-d", &dirs, pool]);
    assert_ne!(code, 0);
    assert!(err.contains("readonly=on"), "{err}");
    d.ok("rzpool", &["import", "-N", "-d", &dirs, "-o", "readonly=on", pool]);
    let status = d.ok("rzpool", &["status", "-v", pool]);
    assert!(status.contains("state: ONLINE"), "{status}");
    let list = d.ok("rzfs", &["list", "-H", "-p", "-t", "all", "-o", "name,type"]);
    assert!(list.contains(&format!("{pool}@mid\tsnapshot")), "{list}");

    let mnt = d.sock.parent().unwrap().join("mnt");
    let mnts = mnt.to_string_lossy().into_owned();
    d.ok("rzfs", &["mount", pool, &mnts]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", pool]).trim(), "yes");
    let mut probs = Vec::new();
    for ds in readable_datasets(&exp) {
        let name = ds["name"].as_str().unwrap();
        let files = ds["files"].as_array().unwrap();
        if name == pool {
            probs.extend(compare_mount(&mnt, files));
        } else if let Some(snap) = name.strip_prefix(&format!("{pool}@")) {
            let sroot = mnt.join(".zfs/snapshot").join(snap);
            probs.extend(compare_mount(&sroot, files).into_iter().map(|p| format!("@{snap}: {p}")));
        }
    }
    // Writes are refused on a read-only mount.
    assert!(std::fs::write(mnt.join("new-file"), b"x").is_err());
    d.ok("rzfs", &["unmount", &mnts]);
    d.ok("rzpool", &["export", pool]);
    let (_, out, _) = d.run("rzpool", &["list"]);
    assert!(out.contains("no pools available"), "{out}");
    assert!(probs.is_empty(), "{layout}: {} problems:\n{}", probs.len(), probs.join("\n"));
}

/// A block destroyed on both sides of a mirror cannot be rebuilt: the read fails with EIO
/// and `rzpool status -v` names the file, while every other file still reads.
#[test]
fn unrecoverable_damage_is_reported_by_path() {
    let Some(root) = testdata("zfsfuse") else { return };
    let dir = scratch_copy(&root.join("mirror"), "perm-error");
    let exp = expected(&dir);
    let pool = exp["pool"].as_str().unwrap().to_string();
    // Find the first data block of /random.bin with rzfs itself.
    let (off, len) = {
        let p = open(&dir, &pool).unwrap();
        let ds = p.dsl().find(&pool).unwrap();
        let z = rzfs_cli::zplopen::open_zpl_only(&p, &ds).unwrap();
        let obj = z.resolve("/random.bin").unwrap();
        let dn = z.file_dnode(obj).unwrap();
        let bp = z.os.block_pointer(&dn, 0, 0).unwrap().unwrap();
        (bp.dva[0].offset() + vdev::VDEV_LABEL_START_SIZE, bp.dva[0].asize())
    };
    for img in images(&dir) {
        scramble(&img, off, off + len, 7);
    }
    let d = Daemon::new("perm");
    let dirs = dir.to_string_lossy().into_owned();
    d.ok("rzpool", &["import", "-N", "-d", &dirs, "-o", "readonly=on", &pool]);
    let mnt = d.sock.parent().unwrap().join("mnt");
    let mnts = mnt.to_string_lossy().into_owned();
    d.ok("rzfs", &["mount", &pool, &mnts]);
    let err = std::fs::read(mnt.join("random.bin")).expect_err("read of a destroyed block must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(std::fs::read(mnt.join("compressible.txt")).is_ok());
    let status = d.ok("rzpool", &["status", "-v", &pool]);
    assert!(status.contains(&format!("{pool}:/random.bin")), "{status}");
    assert!(status.contains("Permanent errors"), "{status}");
    // Both copies were bad: each mirror side has its checksum errors counted.
    let cksum_lines =
        status.lines().filter(|l| l.contains(".img") && l.split_whitespace().nth(4) != Some("0")).count();
    assert_eq!(cksum_lines, 2, "{status}");
    d.ok("rzfs", &["unmount", &mnts]);
    d.ok("rzpool", &["export", &pool]);
    let _ = std::fs::remove_dir_all(&dir);
}
