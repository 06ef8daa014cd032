//! # Snapshot tools run unchanged against rzfs (issue 14)
//!
//! With `zfs` and `zpool` on PATH resolving to rzfs and rzpool (two-line wrappers in a
//! private bin directory), Debian's own packages run as cron would run them:
//! * [`zfs_auto_snapshot`]: zfs-auto-snapshot 1.2.4 (unpacked by
//!   `scripts/install-test-deps.sh`): `//` honours `com.sun:auto-snapshot=false`, sets
//!   `com.sun:auto-snapshot-desc`, `--keep` destroys the oldest of the label (newest first
//!   by `creation`) with `zfs destroy -d`, `-r NAME` snapshots a subtree atomically.
//! * [`sanoid`]: sanoid 2.1.0: `--take-snapshots` (hourly, daily, `recursive = yes` and
//!   `recursive = zfs`),
//!   `--monitor-snapshots`, `--monitor-health`, and `--prune-snapshots` once a frequent
//!   snapshot is older than its one-minute period (the test waits for it).
//! * [`syncoid`]: syncoid 2.1.0: a first run (full send of the oldest snapshot, then
//!   `zfs send -I` through its sync snapshot, received with `receive -s -F`), an incremental
//!   run, `--no-sync-snap --create-bookmark`, and a run whose only common point is that
//!   bookmark; the target's files and snapshot guids match the source's.
//!
//! Each pool is checked by zdb at the end. Needs FUSE, root, zdb and the tools (skipped
//! otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const ZAS: &str = "/opt/rzfs-oracles/zfs-auto-snapshot/usr/sbin/zfs-auto-snapshot";
const SANOID: &str = "/usr/sbin/sanoid";

/// A bin directory whose `zfs` and `zpool` are this build's rzfs and rzpool on `d`'s socket.
fn wrappers(dir: &Path, d: &Daemon) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, exe) in [("zfs", env!("CARGO_BIN_EXE_rzfs")), ("zpool", env!("CARGO_BIN_EXE_rzpool"))] {
        let p = bin.join(name);
        let text = format!("#!/bin/sh\nRZFS_SOCKET='{}' exec '{exe}' \"$@\"\n", d.sock.display());
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    bin
}

/// Runs `prog args` with the wrappers first on PATH; (exit code, stdout + stderr).
fn tool(bin: &Path, prog: &str, args: &[&str]) -> (i32, String) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(prog).args(args).env("PATH", path).env("LC_ALL", "C").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn snapshots(d: &Daemon, of: &str) -> Vec<String> {
    d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", of]).lines().map(str::to_string).collect()
}

#[test]
fn zfs_auto_snapshot() {
    if skip_without_fuse_zdb("zfs_auto_snapshot") {
        return;
    }
    if !Path::new(ZAS).exists() {
        eprintln!("zfs_auto_snapshot: skipped ({ZAS} missing; scripts/install-test-deps.sh unpacks it)");
        return;
    }
    let dir = scratch("zas");
    let d = Daemon::new("zas");
    let (_devs, _mnt) = create(&d, &dir, "za", &SINGLE, 256 << 20);
    for fs in ["za/a", "za/a/b", "za/c"] {
        d.ok("rzfs", &["create", fs]);
    }
    d.ok("rzfs", &["set", "com.sun:auto-snapshot=false", "za/c"]);
    // Three older hourly snapshots of za/a, a second apart (creation has second resolution).
    for t in ["0000", "0100", "0200"] {
        d.ok("rzfs", &["snapshot", &format!("za/a@zfs-auto-snap_hourly-2020-01-01-{t}")]);
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let bin = wrappers(&dir, &d);
    let (code, out) = tool(&bin, ZAS, &["--label=hourly", "--keep=2", "//"]);
    assert_eq!(code, 0, "{out}");
    let a = snapshots(&d, "za/a");
    assert_eq!(a.len(), 2, "keep=2 on za/a: {a:?}\n{out}");
    assert_eq!(a[0], "za/a@zfs-auto-snap_hourly-2020-01-01-0200", "the newest old one stays: {a:?}");
    assert!(a[1].starts_with("za/a@zfs-auto-snap_hourly-2"), "{a:?}");
    assert_eq!(snapshots(&d, "za").len(), 1);
    assert_eq!(snapshots(&d, "za/a/b").len(), 1);
    assert!(snapshots(&d, "za/c").is_empty(), "com.sun:auto-snapshot=false is honoured");
    let desc = d.ok("rzfs", &["get", "-H", "-o", "value", "com.sun:auto-snapshot-desc", &a[1]]);
    assert_eq!(desc, "-\n");
    // -r on a subtree: one recursive snapshot.
    let (code, out) = tool(&bin, ZAS, &["-r", "--label=daily", "--keep=1", "za/a"]);
    assert_eq!(code, 0, "{out}");
    for fs in ["za/a", "za/a/b"] {
        let s = snapshots(&d, fs);
        assert_eq!(s.iter().filter(|n| n.contains("_daily-")).count(), 1, "{fs}: {s:?}");
    }
    d.ok("rzpool", &["export", "za"]);
    zdb_check(&dir, "za");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sanoid() {
    if skip_without_fuse_zdb("sanoid") {
        return;
    }
    if !Path::new(SANOID).exists() {
        eprintln!("sanoid: skipped ({SANOID} missing; scripts/install-test-deps.sh installs it)");
        return;
    }
    let dir = scratch("sanoid");
    let d = Daemon::new("sanoid");
    let (_devs, _mnt) = create(&d, &dir, "sn", &SINGLE, 256 << 20);
    for fs in ["sn/data", "sn/data/child", "sn/other", "sn/other/kid"] {
        d.ok("rzfs", &["create", fs]);
    }
    let conf = dir.join("conf");
    let state = dir.join("state");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        conf.join("sanoid.conf"),
        "[sn/data]\n\tuse_template = test\n\trecursive = yes\n\n\
         [sn/other]\n\tuse_template = test\n\trecursive = zfs\n\n\
         [template_test]\n\tfrequent_period = 1\n\tfrequently = 1\n\thourly = 2\n\tdaily = 1\n\
         \tmonthly = 0\n\tyearly = 0\n\tautosnap = yes\n\tautoprune = yes\n\
         \tfrequently_warn = 0\n\tfrequently_crit = 0\n\thourly_warn = 90m\n\thourly_crit = 360m\n\
         \tdaily_warn = 48h\n\tdaily_crit = 60h\n",
    )
    .unwrap();
    // sanoid needs the defaults file beside its config.
    std::fs::copy("/usr/share/sanoid/sanoid.defaults.conf", conf.join("sanoid.defaults.conf")).unwrap();
    let bin = wrappers(&dir, &d);
    let dirs = [
        format!("--configdir={}", conf.display()),
        format!("--cache-dir={}", state.display()),
        format!("--run-dir={}", state.display()),
    ];
    let run = |what: &str| {
        let mut args: Vec<&str> = dirs.iter().map(String::as_str).collect();
        args.push(what);
        tool(&bin, SANOID, &args)
    };
    let (code, out) = run("--take-snapshots");
    assert_eq!(code, 0, "{out}");
    // recursive = yes: one snapshot per dataset; recursive = zfs: one `zfs snapshot -r`.
    for fs in ["sn/data", "sn/data/child", "sn/other", "sn/other/kid"] {
        let s = snapshots(&d, fs);
        for kind in ["frequently", "hourly", "daily"] {
            assert_eq!(
                s.iter().filter(|n| n.ends_with(&format!("_{kind}"))).count(),
                1,
                "{fs} {kind}: {s:?}"
            );
        }
    }
    assert!(snapshots(&d, "sn").is_empty(), "only the configured tree");
    let (code, out) = run("--monitor-snapshots");
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("OK"), "{out}");
    let (code, out) = run("--monitor-health");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("OK"), "{out}");
    // One frequent snapshot a minute is kept: once the first is older than that, the next
    // run takes another and the prune removes the old one.
    std::thread::sleep(std::time::Duration::from_secs(62));
    let (code, out) = run("--take-snapshots");
    assert_eq!(code, 0, "{out}");
    assert_eq!(snapshots(&d, "sn/data").iter().filter(|n| n.ends_with("_frequently")).count(), 2);
    let (code, out) = run("--prune-snapshots");
    assert_eq!(code, 0, "{out}");
    for fs in ["sn/data", "sn/data/child", "sn/other", "sn/other/kid"] {
        let s = snapshots(&d, fs);
        assert_eq!(s.iter().filter(|n| n.ends_with("_frequently")).count(), 1, "{fs}: {s:?}\n{out}");
        assert_eq!(s.iter().filter(|n| n.ends_with("_daily")).count(), 1, "{fs}: {s:?}");
    }
    d.ok("rzpool", &["export", "sn"]);
    zdb_check(&dir, "sn");
    let _ = std::fs::remove_dir_all(&dir);
}

const SYNCOID: &str = "/usr/sbin/syncoid";

/// Every file under `root` (relative path → contents), `.zfs` left out.
fn manifest(root: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if rel != ".zfs" {
                    walk(root, &p, out);
                }
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// syncoid 2.1.0 (Debian's sanoid package) replicating one file system to another of the
/// same pool: the first run sends the oldest snapshot in full and the rest as a stream
/// package (`zfs send -I`), later runs incrementally from the newest common snapshot, each
/// with its own sync snapshot; `--no-sync-snap` sends existing snapshots only. The target's
/// files and snapshots match the source's.
#[test]
fn syncoid() {
    if skip_without_fuse_zdb("syncoid") {
        return;
    }
    if !Path::new(SYNCOID).exists() {
        eprintln!("syncoid: skipped ({SYNCOID} missing; scripts/install-test-deps.sh installs sanoid)");
        return;
    }
    let dir = scratch("syncoid");
    let d = Daemon::new("syncoid");
    let (_devs, _mnt) = create(&d, &dir, "sy", &SINGLE, 256 << 20);
    d.ok("rzpool", &["set", "feature@bookmarks=enabled", "sy"]);
    let src = dir.join("src");
    let dst = dir.join("dst");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "sy/src"]);
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", dir.join("backup").display()), "sy/backup"]);
    let mut rng = common::rng::Rng::new(5);
    for i in 0..10 {
        std::fs::write(src.join(format!("f{i}")), rng.data_in(1, 300_000)).unwrap();
    }
    d.ok("rzfs", &["snapshot", "sy/src@one"]);
    std::fs::write(src.join("f0"), b"changed before two").unwrap();
    d.ok("rzfs", &["snapshot", "sy/src@two"]);
    let bin = wrappers(&dir, &d);
    let (code, out) = tool(&bin, SYNCOID, &["--debug", "sy/src", "sy/backup/dst"]);
    assert_eq!(code, 0, "first syncoid run:\n{out}");
    d.ok("rzfs", &["set", &format!("mountpoint={}", dst.display()), "sy/backup/dst"]);
    let names = |fs: &str| -> Vec<String> {
        snapshots(&d, fs).into_iter().map(|s| s.split_once('@').unwrap().1.to_string()).collect()
    };
    assert_eq!(names("sy/src"), names("sy/backup/dst"), "{out}");
    assert_eq!(names("sy/src").len(), 3, "one, two and syncoid's sync snapshot: {:?}", names("sy/src"));
    assert!(manifest(&src) == manifest(&dst), "the target holds the source's files");

    // Later runs: incremental from the newest common snapshot. (Sync snapshots are named to
    // the second: runs a second apart, as cron's would be.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(src.join("new"), rng.data(100_000)).unwrap();
    std::fs::remove_file(src.join("f3")).unwrap();
    let (code, out) = tool(&bin, SYNCOID, &["sy/src", "sy/backup/dst"]);
    assert_eq!(code, 0, "second syncoid run:\n{out}");
    assert!(manifest(&src) == manifest(&dst), "after an incremental run");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(src.join("f5"), b"for --no-sync-snap").unwrap();
    d.ok("rzfs", &["snapshot", "sy/src@three"]);
    let (code, out) =
        tool(&bin, SYNCOID, &["--no-sync-snap", "--create-bookmark", "sy/src", "sy/backup/dst"]);
    assert_eq!(code, 0, "--no-sync-snap:\n{out}");
    // --create-bookmark: a bookmark of the snapshot just sent, by its name.
    let bms = d.ok("rzfs", &["list", "-H", "-t", "bookmark", "-o", "name", "sy/src"]);
    assert_eq!(bms, "sy/src#three\n", "{out}");
    assert!(manifest(&src) == manifest(&dst), "after --no-sync-snap");
    assert_eq!(names("sy/backup/dst").last().map(String::as_str), Some("three"));
    // Source and target hold the same snapshots (syncoid prunes its old sync snapshots on both).
    let g = |fs: &str| -> Vec<String> {
        d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "guid", "-s", "createtxg", fs])
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(g("sy/src"), g("sy/backup/dst"));
    // With every snapshot gone from the source, the bookmark is the common point: syncoid
    // sends incrementally from it (`zfs send -i sy/src#three`).
    for s in snapshots(&d, "sy/src") {
        d.ok("rzfs", &["destroy", &s]);
    }
    std::fs::write(src.join("after-bookmark"), rng.data(50_000)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (code, out) = tool(&bin, SYNCOID, &["sy/src", "sy/backup/dst"]);
    assert_eq!(code, 0, "from a bookmark:\n{out}");
    assert!(manifest(&src) == manifest(&dst), "after the send from a bookmark");
    d.ok("rzpool", &["export", "sy"]);
    zdb_check(&dir, "sy");
}

/// syncoid's resumable transfers: a transfer as syncoid runs it (`zfs send | zfs receive -s
/// -F`) cut after 20 MB leaves the target's `receive_resume_token`; the next syncoid run
/// resumes from it (`zfs send -t`) and the target ends identical to the source.
#[test]
fn syncoid_resumes() {
    if skip_without_fuse_zdb("syncoid_resumes") {
        return;
    }
    if !Path::new(SYNCOID).exists() {
        eprintln!(
            "syncoid_resumes: skipped ({SYNCOID} missing; scripts/install-test-deps.sh installs sanoid)"
        );
        return;
    }
    let dir = scratch("syncoid-resume");
    let d = Daemon::new("syncoid-resume");
    let (_devs, _mnt) = create(&d, &dir, "sr", &SINGLE, 512 << 20);
    let src = dir.join("src");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", src.display()), "sr/src"]);
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", dir.join("backup").display()), "sr/backup"]);
    let mut rng = common::rng::Rng::new(8);
    for i in 0..12 {
        std::fs::write(src.join(format!("f{i}")), rng.data(4 << 20)).unwrap();
    }
    d.ok("rzfs", &["snapshot", "sr/src@one"]);
    let bin = wrappers(&dir, &d);
    // The transfer syncoid would run (`zfs send | zfs receive -s -F`), killed after 20 MB.
    let (code, out) =
        tool(&bin, "sh", &["-c", "zfs send sr/src@one | head -c 20000000 | zfs receive -s -F sr/backup/dst"]);
    assert!(code != 0, "the cut transfer fails: {out}");
    let token =
        |d: &Daemon| d.run("rzfs", &["get", "-H", "-o", "value", "receive_resume_token", "sr/backup/dst"]);
    let tok = token(&d).1;
    assert!(tok.starts_with("1-"), "a killed transfer leaves a resume token: {tok}\n{out}");
    let (code, out) = tool(&bin, SYNCOID, &["--no-sync-snap", "sr/src", "sr/backup/dst"]);
    assert_eq!(code, 0, "the run that resumes:\n{out}");
    assert!(out.contains("Resuming") || out.contains("resum"), "syncoid resumed:\n{out}");
    assert_eq!(token(&d).1, "-\n");
    let dst = dir.join("dst");
    d.ok("rzfs", &["set", &format!("mountpoint={}", dst.display()), "sr/backup/dst"]);
    assert!(manifest(&src) == manifest(&dst), "the resumed target holds the source's files");
    d.ok("rzpool", &["export", "sr"]);
    zdb_check(&dir, "sr");
}
