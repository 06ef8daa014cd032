//! # Volumes (`rzfs create -V`) end to end
//!
//! Through a private rzfsd: a volume on a raidz1 pool is served as a file of the volume
//! tree and as a loop device (`/dev/zvol/POOL/VOL` links to it); ext4 made through the
//! link survives export/import; a snapshot and a clone keep the data of their time;
//! `volsize` grows and shrinks the device; a mounted (busy) volume refuses destroy and
//! export; the properties are OpenZFS's (volsize, volblocksize, refreservation as libzfs
//! computes it and charged as the DSL charges it); bad sizes are refused; a sparse volume
//! larger than its pool fills it to ENOSPC with nothing fsync'd lost. After each
//! export zdb -bcc (checksums of every block, no leaks) and `zdb -dddd` see the volume's
//! objects as OpenZFS lays them out.
//!
//! Needs FUSE, root and zdb (skipped otherwise); the loop-device half also needs
//! `/dev/loop-control`, mkfs.ext4 and mount (else it checks the file half only).

mod common;

use common::tools::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn skip() -> bool {
    if !fuse_usable() || zdb().is_none() {
        eprintln!("volumes: needs FUSE, root and zdb; skipped");
        return true;
    }
    false
}

/// Detaches loop devices left on this test's files if it fails half-way.
struct LoopGuard(PathBuf);

impl Drop for LoopGuard {
    fn drop(&mut self) {
        let out = Command::new("losetup").arg("-a").output();
        let Ok(out) = out else { return };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.contains(&*self.0.to_string_lossy()) {
                if let Some(dev) = line.split(':').next() {
                    let _ = Command::new("losetup").args(["-d", dev]).status();
                }
            }
        }
        lazy_unmount(&self.0);
    }
}

fn loops_usable() -> bool {
    Path::new("/dev/loop-control").exists()
        && Command::new("mkfs.ext4").arg("-V").output().is_ok_and(|o| o.status.success())
}

fn get(d: &Daemon, prop: &str, name: &str) -> String {
    d.ok("rzfs", &["get", "-Hp", "-o", "value", prop, name]).trim().to_string()
}

fn sh(cmd: &str) -> (bool, String) {
    let o = Command::new("sh").args(["-c", cmd]).output().unwrap();
    (
        o.status.success(),
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
    )
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    common::rng::Rng::new(seed).data(len)
}

fn read_at(path: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).unwrap();
    b
}

fn write_at(path: &Path, off: u64, data: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(data, off).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn volumes_are_block_devices_openzfs_can_read() {
    if skip() {
        return;
    }
    let dir = scratch("volumes");
    let vols = dir.join("vols");
    let links = dir.join("zvol");
    let _guard = LoopGuard(vols.clone());
    let d = Daemon::with_env(
        "volumes",
        &[("RZFS_VOL_DIR", vols.to_str().unwrap()), ("RZFS_ZVOL_DIR", links.to_str().unwrap())],
    );
    let devs = files(&dir, 3, 256 << 20);
    let mnt = dir.join("mnt");
    let mut args = vec!["create", "-m", mnt.to_str().unwrap(), "tv", "raidz1"];
    args.extend(devs.iter().map(|s| s.as_str()));
    d.ok("rzpool", &args);

    // Bad sizes are refused and create nothing.
    for (argv, want) in [
        (vec!["create", "-V", "10x", "tv/bad"], "bad volume size"),
        (vec!["create", "-V", "0", "tv/bad"], "cannot be zero"),
        (vec!["create", "-V", "1000k", "-b", "3k", "tv/bad"], "power of 2"),
        (vec!["create", "-V", "100k", "-b", "64k", "tv/bad"], "multiple of volume block size"),
        (vec!["create", "-V", "1m", "-o", "mountpoint=/x", "tv/bad"], "does not apply"),
    ] {
        let (code, _, err) = d.run("rzfs", &argv);
        assert_ne!(code, 0, "{argv:?} succeeded");
        assert!(err.contains(want), "{argv:?}: {err}");
    }
    assert!(d.run("rzfs", &["list", "tv/bad"]).0 != 0);

    // A 64 MiB volume of 8 KiB blocks: properties as OpenZFS reports them.
    d.ok("rzfs", &["create", "-V", "64m", "-b", "8k", "tv/v"]);
    assert_eq!(get(&d, "type", "tv/v"), "volume");
    assert_eq!(get(&d, "volsize", "tv/v"), (64u64 << 20).to_string());
    assert_eq!(get(&d, "volblocksize", "tv/v"), "8192");
    assert_eq!(get(&d, "mountpoint", "tv/v"), "-");
    // libzfs's zvol_volsize_to_reservation on a raidz1 of 3 (ashift 12): an 8 KiB block
    // takes 2 data + 1 parity sectors padded to 4, 128 KiB 32 + 16; plus 7 + 8 + 1
    // indirect blocks of 128 KiB, two copies each.
    let data = (8192u128 * (4 * 4096) * (128 << 10) / (48 * 4096)) as u64;
    let want_resv = data + (7 + 8 + 1) * 2 * (128 << 10);
    assert_eq!(get(&d, "refreservation", "tv/v"), want_resv.to_string());
    let used: u64 = get(&d, "used", "tv/v").parse().unwrap();
    let by_resv: u64 = get(&d, "usedbyrefreservation", "tv/v").parse().unwrap();
    let by_ds: u64 = get(&d, "usedbydataset", "tv/v").parse().unwrap();
    assert_eq!(used, by_resv + by_ds, "used is the sum of its breakdown");
    assert!(used >= want_resv);
    // A sparse volume has no reservation.
    d.ok("rzfs", &["create", "-s", "-V", "16m", "tv/sparse"]);
    assert_eq!(get(&d, "refreservation", "tv/sparse"), "0");
    assert_eq!(get(&d, "volblocksize", "tv/sparse"), "16384");
    let (code, _, err) = d.run("rzfs", &["mount", "tv/v"]);
    assert!(code != 0 && err.contains("not a filesystem"), "{err}");

    // The file of the volume tree: writes land, reads return them, holes read as zeros.
    let file = vols.join("tv/v");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 64 << 20);
    let a = pattern(1, 3 << 20);
    write_at(&file, 5 << 20, &a);
    assert_eq!(read_at(&file, 5 << 20, a.len()), a);
    assert_eq!(read_at(&file, 0, 4096), vec![0u8; 4096]);
    // Writing all of it stays within the reservation: the directory is charged no more.
    let used_before: u64 = get(&d, "used", "tv/v").parse().unwrap();
    assert_eq!(used_before, used, "writes inside the refreservation are already charged");

    let use_loops = loops_usable();
    let link = links.join("tv/v");
    if use_loops {
        let target = std::fs::read_link(&link).unwrap();
        assert!(target.to_string_lossy().starts_with("/dev/loop"), "{}", target.display());
        let (ok, out) = sh(&format!("mkfs.ext4 -q -F {}", link.display()));
        assert!(ok, "mkfs: {out}");
        let m = dir.join("ext4");
        std::fs::create_dir_all(&m).unwrap();
        let (ok, out) = sh(&format!("mount {} {}", link.display(), m.display()));
        assert!(ok, "mount: {out}");
        std::fs::write(m.join("hello"), pattern(7, 5 << 20)).unwrap();
        // Busy: a mounted volume is neither destroyed nor exported.
        let (code, _, err) = d.run("rzfs", &["destroy", "tv/v"]);
        assert!(code != 0 && err.contains("busy"), "{err}");
        let (code, _, err) = d.run("rzpool", &["export", "tv"]);
        assert!(code != 0 && err.contains("busy"), "{err}");
        let (ok, out) = sh(&format!("umount {}", m.display()));
        assert!(ok, "umount: {out}");
    } else {
        eprintln!("volumes: no loop devices or mkfs.ext4; the loop half is skipped");
        let target = std::fs::read_link(&link).unwrap();
        assert_eq!(target, file);
    }
    let before = common::sha256_file(&file);

    // A snapshot keeps the data of its time; a clone of it starts from there.
    d.ok("rzfs", &["snapshot", "tv/v@s1"]);
    d.ok("rzfs", &["clone", "tv/v@s1", "tv/c"]);
    let b = pattern(2, 1 << 20);
    write_at(&file, 5 << 20, &b);
    let clone = vols.join("tv/c");
    assert_eq!(common::sha256_file(&clone), before);
    assert_eq!(get(&d, "volsize", "tv/v@s1"), (64u64 << 20).to_string());

    // volsize: grow, then shrink (the tail is gone, and reads as zeros after growing again).
    d.ok("rzfs", &["set", "volsize=96m", "tv/v"]);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 96 << 20);
    write_at(&file, 90 << 20, &pattern(3, 8192));
    d.ok("rzfs", &["set", "volsize=80m", "tv/v"]);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 80 << 20);
    d.ok("rzfs", &["set", "volsize=96m", "tv/v"]);
    assert_eq!(read_at(&file, 90 << 20, 8192), vec![0u8; 8192]);
    let (code, _, err) = d.run("rzfs", &["set", "volsize=1001k", "tv/v"]);
    assert!(code != 0 && err.contains("multiple"), "{err}");
    let after = common::sha256_file(&file);

    d.ok("rzpool", &["export", "tv"]);
    assert!(!links.join("tv/v").exists(), "the link goes with the pool");
    let (_, l) = sh("losetup -a");
    assert!(!l.contains(&*vols.to_string_lossy()), "loop devices detached: {l}");
    zdb_check(&dir, "tv");
    let objs = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "tv/v", "1", "2"]);
    assert!(objs.contains("zvol object") && objs.contains("zvol prop"), "{objs}");
    assert!(objs.contains(&format!("size = {}", 96u64 << 20)), "{objs}");
    let list = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-d", "tv"]);
    assert!(list.contains("tv/v [ZVOL]") && list.contains("tv/c [ZVOL]"), "{list}");

    // Back again: the volumes are served, with their data.
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "tv"]);
    assert_eq!(common::sha256_file(&file), after);
    assert_eq!(common::sha256_file(&clone), before);
    if use_loops {
        let m = dir.join("ext4");
        let (ok, out) = sh(&format!("mount -o ro {} {}", links.join("tv/c").display(), m.display()));
        assert!(ok, "mount clone: {out}");
        assert_eq!(std::fs::read(m.join("hello")).unwrap(), pattern(7, 5 << 20));
        let (ok, out) = sh(&format!("umount {}", m.display()));
        assert!(ok, "{out}");
    }
    // A sparse volume larger than the pool: writes get ENOSPC once the pool is full (never
    // a silent loss), everything fsync'd before reads back, and destroying it frees the
    // space on the full pool.
    d.ok("rzfs", &["create", "-s", "-V", "2g", "tv/big"]);
    let big = vols.join("tv/big");
    let chunk = 8usize << 20;
    let mut written = 0u64;
    let err = loop {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
        let r = f.write_all_at(&pattern(written + 11, chunk), written).and_then(|_| f.sync_all());
        match r {
            Ok(()) => written += chunk as u64,
            Err(e) => break e,
        }
        assert!(written < 2 << 30, "2 GiB written to a 768 MiB pool");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert!(written >= 64 << 20, "only {written} bytes fit");
    for off in (0..written).step_by(chunk) {
        assert_eq!(read_at(&big, off, chunk), pattern(off + 11, chunk), "chunk at {off}");
    }
    d.ok("rzfs", &["destroy", "tv/big"]);
    write_at(&file, 0, &pattern(5, 1 << 20));
    d.ok("rzfs", &["destroy", "tv/c"]);
    d.ok("rzfs", &["destroy", "-r", "tv/v"]);
    assert!(!vols.join("tv/v").exists());
    d.ok("rzpool", &["export", "tv"]);
    zdb_check(&dir, "tv");
}

/// NBD (`RZFS_NBD_SOCKET`, `RZFS_NBD_LISTEN`): a 1 GiB ext4 image (made with `mkfs.ext4 -d`
/// from a directory of files) goes into a volume with `nbdcopy` over the Unix socket, and
/// after export and import comes back out over TCP identical, and fsck-clean; `nbdinfo`
/// sees the exports; zdb -bcc finds every block's checksum right and nothing leaked.
/// Needs nbdcopy/nbdinfo (libnbd-bin) and mkfs.ext4 besides FUSE, root and zdb.
#[test]
fn volumes_over_nbd() {
    if skip() {
        return;
    }
    let have = |t: &str| Command::new("which").arg(t).output().is_ok_and(|o| o.status.success());
    if !have("nbdcopy") || !have("nbdinfo") || !have("mkfs.ext4") || !have("e2fsck") {
        eprintln!("volumes_over_nbd: needs nbdcopy, nbdinfo (libnbd-bin), mkfs.ext4, e2fsck; skipped");
        return;
    }
    let dir = scratch("nbd");
    let sock = dir.join("nbd.sock");
    let port = 20000 + std::process::id() % 20000;
    let listen = format!("127.0.0.1:{port}");
    let d = Daemon::with_env(
        "nbd",
        &[
            ("RZFS_VOL_DIR", dir.join("vols").to_str().unwrap()),
            ("RZFS_ZVOL_DIR", dir.join("zvol").to_str().unwrap()),
            ("RZFS_VOL_LOOP", "0"),
            ("RZFS_NBD_SOCKET", sock.to_str().unwrap()),
            ("RZFS_NBD_LISTEN", &listen),
        ],
    );
    let _guard = LoopGuard(dir.join("vols"));
    let devs = files(&dir, 1, 1536 << 20);
    d.ok("rzpool", &["create", "-m", "none", "nb", &devs[0]]);
    d.ok("rzfs", &["create", "-s", "-V", "1g", "nb/vol"]);
    d.ok("rzfs", &["create", "-V", "16m", "nb/small"]);
    let unix = |name: &str| format!("nbd+unix:///{name}?socket={}", sock.display());
    let tcp = |name: &str| format!("nbd://127.0.0.1:{port}/{name}");

    let (ok, out) = sh(&format!("nbdinfo --list '{}'", unix("")));
    assert!(ok && out.contains("export=\"nb/vol\"") && out.contains("export=\"nb/small\""), "{out}");
    let (ok, out) = sh(&format!("nbdinfo --size '{}'", unix("nb/vol")));
    assert!(ok && out.trim() == (1u64 << 30).to_string(), "{out}");
    let (ok, out) = sh(&format!("nbdinfo '{}'", tcp("nb/nope")));
    assert!(!ok, "an unknown export: {out}");

    // The image: ext4 over 1 GiB, filled from a directory of incompressible files.
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..24u64 {
        let sub = if i % 3 == 0 { "sub/" } else { "" };
        std::fs::write(src.join(format!("{sub}f{i}")), pattern(100 + i, (1 + i as usize) << 20)).unwrap();
    }
    let img = dir.join("img");
    std::fs::File::create(&img).unwrap().set_len(1 << 30).unwrap();
    let (ok, out) = sh(&format!("mkfs.ext4 -q -F -d {} {}", src.display(), img.display()));
    assert!(ok, "mkfs: {out}");
    let (ok, out) = sh(&format!("nbdcopy --flush {} '{}'", img.display(), unix("nb/vol")));
    assert!(ok, "nbdcopy in: {out}");

    d.ok("rzpool", &["export", "nb"]);
    zdb_check(&dir, "nb");
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "nb/vol"]);
    assert!(dump.contains("zvol object"), "zdb sees the volume's objects:\n{dump}");
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "nb"]);

    let back = dir.join("back");
    let (ok, out) = sh(&format!("nbdcopy '{}' {}", tcp("nb/vol"), back.display()));
    assert!(ok, "nbdcopy out: {out}");
    assert_eq!(common::sha256_file(&back), common::sha256_file(&img), "the image comes back as it went in");
    let (ok, out) = sh(&format!("e2fsck -fn {}", back.display()));
    assert!(ok, "fsck of the copy: {out}");
    d.ok("rzpool", &["export", "nb"]);
    zdb_check(&dir, "nb");
}
