//! The intent log (`pool::zil`, replay in `zilreplay`), checked against OpenZFS's tools:
//! * [`fsynced_writes_survive_crashes`]: rounds of writes to existing files, some followed
//!   by `fsync`, then `kill -9` of rzfsd; zdb reads the crashed pool's log (`-ivv`) and
//!   finds every block accounted for (`-bcc`, log unclaimed); the import replays it and
//!   every byte fsync'd is back (bytes written after the last fsync may be old or new).
//!   Seeded (`RZFS_ZIL_SEED`), `RZFS_ZIL_ROUNDS` rounds per layout (default 5).
//! * [`openzfs_claims_and_rzfs_replays`]: OpenZFS's import (zhack) claims rzfs's log
//!   (`zh_claim_txg` set, blocks allocated, zdb clean), then rzfs replays the claimed log.
//! * [`log_device_holds_the_chain_until_removed`]: the chain lives on the log device, whose
//!   removal ends it; later fsyncs log to the pool and replay after a crash.
//! * [`a_failed_log_device_falls_back_to_the_pool`]: a log device failing writes is faulted,
//!   the pool stays writable and fsyncs log to its own vdevs.
//! * [`truncates_and_times_are_logged_in_order`]: ftruncate, chmod, chown and utimensat
//!   between writes are logged as `TX_SETATTR` in their place and replayed.
//! * [`snapshots_and_destroy_end_the_log`]: a snapshot taken while the log holds a chain
//!   carries no log, and destroying the file system frees the chain (zdb finds no leak).
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::rng::{env_seed, Rng};
use common::tools::*;
use std::os::unix::fs::FileExt;
use std::path::Path;

const FILES: usize = 3;

/// `TX_WRITE` records zdb -ivv lists for the pool in `dir`.
fn logged_writes(dir: &Path, pool: &str) -> usize {
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ivv", pool]);
    out.lines().filter(|l| l.trim_start().starts_with("TX_WRITE") && l.contains(" len ")).count()
}

fn zil_header(dir: &Path, pool: &str) -> String {
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ivv", pool]);
    out.lines().filter(|l| l.contains("ZIL header")).collect::<Vec<_>>().join("\n")
}

fn write_at(path: &Path, off: u64, data: &[u8], sync: bool) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(data, off).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

fn apply(model: &mut Vec<u8>, off: u64, data: &[u8]) {
    let (off, end) = (off as usize, off as usize + data.len());
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off..end].copy_from_slice(data);
}

#[test]
fn fsynced_writes_survive_crashes() {
    if skip_without_fuse_zdb("fsynced_writes_survive_crashes") {
        return;
    }
    let seed = env_seed("RZFS_ZIL_SEED", "intent_log");
    let rounds = std::env::var("RZFS_ZIL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut rng = Rng::new(seed);
    let mut logged = 0;
    for l in [&SINGLE, &MIRROR2, &RAIDZ1] {
        logged += crash_rounds(l, &mut rng, rounds);
    }
    assert!(logged > 0, "no fsync was answered by the log");
}

/// Returns how many write records the crashed pools' logs held.
fn crash_rounds(l: &Layout, rng: &mut Rng, rounds: usize) -> usize {
    let tag = format!("zil-{}", l.name);
    let dir = scratch(&tag);
    let d = Daemon::new(&tag);
    let (_devs, mnt) = create(&d, &dir, "zl", l, 128 << 20);
    let names: Vec<_> = (0..FILES).map(|i| mnt.join(format!("f{i}"))).collect();
    let mut durable: Vec<Vec<u8>> = Vec::new();
    for p in &names {
        let data = rng.data_in(1, 200_000);
        std::fs::write(p, &data).unwrap();
        durable.push(data);
    }
    d.ok("rzpool", &["sync", "zl"]);
    let mut logged = 0;
    for round in 0..rounds {
        let ctx = format!("{} round {round}", l.name);
        let mut latest = durable.clone();
        // Per file: byte ranges written since the last fsync.
        let mut after: Vec<Vec<(usize, usize)>> = vec![Vec::new(); FILES];
        for _ in 0..rng.range(1, 9) {
            let f = rng.below(FILES as u64) as usize;
            let off = rng.below(latest[f].len() as u64 + 40_000);
            let data = rng.data_in(1, 90_000);
            let sync = rng.percent(60);
            write_at(&names[f], off, &data, sync);
            apply(&mut latest[f], off, &data);
            after[f].push((off as usize, off as usize + data.len()));
            if sync {
                durable = latest.clone();
                after = vec![Vec::new(); FILES];
            }
        }
        d.kill9();
        lazy_unmount(&mnt);
        logged += logged_writes(&dir, "zl");
        zdb_check(&dir, "zl");
        import(&d, &dir, "zl", &mnt, false);
        for f in 0..FILES {
            let got = std::fs::read(&names[f]).unwrap();
            let (lo, hi) = (durable[f].len(), latest[f].len());
            assert!(
                got.len() == lo
                    || (!after[f].is_empty() && got.len() >= lo.min(hi) && got.len() <= lo.max(hi)),
                "{ctx}: f{f} is {} bytes, fsync'd {lo}, written {hi}",
                got.len()
            );
            for (i, &b) in got.iter().enumerate() {
                let old = durable[f].get(i).copied().unwrap_or(0);
                if b == old {
                    continue;
                }
                let newer = after[f].iter().any(|&(s, e)| i >= s && i < e) && latest[f].get(i) == Some(&b);
                assert!(newer, "{ctx}: f{f} byte {i} is {b:#x}, fsync'd {old:#x}");
            }
            durable[f] = got;
        }
    }
    d.ok("rzpool", &["export", "zl"]);
    zdb_check(&dir, "zl");
    eprintln!("intent_log: {} done, {rounds} crashes, {logged} logged writes replayed", l.name);
    logged
}

#[test]
fn openzfs_claims_and_rzfs_replays() {
    if skip_without_fuse_zdb("openzfs_claims_and_rzfs_replays") || !Path::new(ZHACK).exists() {
        return;
    }
    let mut rng = Rng::new(5);
    let dir = scratch("zil-claim");
    let d = Daemon::new("zil-claim");
    let (_devs, mnt) = create(&d, &dir, "zc", &MIRROR2, 128 << 20);
    let f = mnt.join("db");
    let mut want = rng.data(300_000);
    std::fs::write(&f, &want).unwrap();
    d.ok("rzpool", &["sync", "zc"]);
    // The first fsync starts the chain (one sync), the next ones are log writes.
    for (off, len) in [(0u64, 4096usize), (10_000, 50_000), (290_000, 40_000), (123_456, 7)] {
        let data = rng.data(len);
        write_at(&f, off, &data, true);
        apply(&mut want, off, &data);
    }
    d.kill9();
    lazy_unmount(&mnt);
    let n = logged_writes(&dir, "zc");
    assert!(n >= 3, "the log holds {n} writes:\n{}", zil_header(&dir, "zc"));
    // rzdb -i reads the same records.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rzdb"))
        .args(["-e", "-p", dir.to_str().unwrap(), "-i", "zc"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.trim_start().starts_with("TX_WRITE")).count(),
        n,
        "rzdb -i:\n{text}"
    );
    zdb_check(&dir, "zc");
    openzfs_import(&dir, "zc", "com.example:rzfs_zil");
    let h = zil_header(&dir, "zc");
    assert!(!h.contains("claim_txg 0,") && h.contains("flags 0x3"), "claimed by OpenZFS: {h}");
    assert_eq!(logged_writes(&dir, "zc"), n, "the claimed log keeps its records");
    zdb_check(&dir, "zc");
    import(&d, &dir, "zc", &mnt, false);
    assert!(std::fs::read(&f).unwrap() == want, "replayed contents differ");
    d.ok("rzpool", &["export", "zc"]);
    // The replayed log is gone: zdb prints no header for an empty one.
    assert_eq!(zil_header(&dir, "zc"), "", "the log outlived its replay");
    assert_eq!(logged_writes(&dir, "zc"), 0);
    zdb_check(&dir, "zc");
}

#[test]
fn snapshots_and_destroy_end_the_log() {
    if skip_without_fuse_zdb("snapshots_and_destroy_end_the_log") {
        return;
    }
    let mut rng = Rng::new(9);
    let dir = scratch("zil-snap");
    let d = Daemon::new("zil-snap");
    let (_devs, mnt) = create(&d, &dir, "zs", &RAIDZ1, 128 << 20);
    // Mounted beside the root, not below it: a dead mount with another below cannot be
    // detached cleanly after the crash.
    let fs = dir.join("fsmnt");
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", fs.display()), "zs/fs"]);
    let f = fs.join("a");
    let mut want = rng.data(100_000);
    std::fs::write(&f, &want).unwrap();
    d.ok("rzpool", &["sync", "zs"]);
    for off in [0u64, 50_000, 90_000] {
        let data = rng.data(20_000);
        write_at(&f, off, &data, true);
        apply(&mut want, off, &data);
    }
    d.ok("rzfs", &["snapshot", "zs/fs@s"]);
    let data = rng.data(1000);
    write_at(&f, 5, &data, true);
    apply(&mut want, 5, &data);
    d.kill9();
    lazy_unmount(&fs);
    lazy_unmount(&mnt);
    zdb_check(&dir, "zs");
    let snap_header = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ivv", "zs/fs@s"])
        .lines()
        .any(|l| l.contains("ZIL header"));
    assert!(!snap_header, "the snapshot carries a log");
    import(&d, &dir, "zs", &mnt, false);
    d.ok("rzfs", &["mount", "zs/fs"]);
    assert!(std::fs::read(&f).unwrap() == want, "replayed contents differ");
    for off in [0u64, 30_000] {
        write_at(&f, off, &rng.data(3000), true);
    }
    d.ok("rzfs", &["destroy", "-r", "zs/fs"]);
    d.ok("rzpool", &["export", "zs"]);
    zdb_check(&dir, "zs");
}

/// `sync=always`: a write is durable when it returns, without any fsync (logged, so no
/// txg sync per write); `sync=standard`: so is a write through an `O_SYNC`/`O_DSYNC`
/// descriptor; `sync=disabled`: fsync returns without writing a log.
#[test]
fn the_sync_property() {
    if skip_without_fuse_zdb("the_sync_property") {
        return;
    }
    let mut rng = Rng::new(13);
    let dir = scratch("zil-syncprop");
    let d = Daemon::new("zil-syncprop");
    let (_devs, mnt) = create(&d, &dir, "zp", &SINGLE, 128 << 20);
    let f = mnt.join("always");
    let mut want = rng.data(50_000);
    std::fs::write(&f, &want).unwrap();
    d.ok("rzfs", &["set", "sync=always", "zp"]);
    d.ok("rzpool", &["sync", "zp"]);
    for off in [100u64, 20_000, 49_000, 60_000] {
        let data = rng.data(5000);
        write_at(&f, off, &data, false);
        apply(&mut want, off, &data);
    }
    d.kill9();
    lazy_unmount(&mnt);
    assert!(logged_writes(&dir, "zp") >= 3, "sync=always writes went to the log");
    import(&d, &dir, "zp", &mnt, false);
    assert!(std::fs::read(&f).unwrap() == want, "sync=always lost a write");
    // sync=standard: writes through an O_DSYNC or O_SYNC descriptor are durable when they
    // return (the kernel asks for an fsync of each), through the log.
    d.ok("rzfs", &["set", "sync=standard", "zp"]);
    d.ok("rzpool", &["sync", "zp"]);
    for (flag, off) in [(libc::O_DSYNC, 1000u64), (libc::O_SYNC, 30_000), (libc::O_DSYNC, 55_000)] {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new().write(true).custom_flags(flag).open(&f).unwrap();
        let data = rng.data(3000);
        file.write_all_at(&data, off).unwrap();
        apply(&mut want, off, &data);
    }
    d.kill9();
    lazy_unmount(&mnt);
    assert!(logged_writes(&dir, "zp") >= 2, "O_SYNC/O_DSYNC writes went to the log");
    import(&d, &dir, "zp", &mnt, false);
    assert!(std::fs::read(&f).unwrap() == want, "an O_SYNC/O_DSYNC write was lost");
    d.ok("rzfs", &["set", "sync=disabled", "zp"]);
    write_at(&f, 0, &rng.data(100), true);
    d.kill9();
    lazy_unmount(&mnt);
    assert_eq!(logged_writes(&dir, "zp"), 0, "sync=disabled wrote a log");
    zdb_check(&dir, "zp");
}

/// With a log device the chain lives there (`alloc_zil`); `zpool remove` of the log device
/// ends every chain first and succeeds; later fsyncs start a chain on the pool's own vdevs,
/// which a crash then replays.
#[test]
fn log_device_holds_the_chain_until_removed() {
    if skip_without_fuse_zdb("log_device_holds_the_chain_until_removed") {
        return;
    }
    let mut rng = Rng::new(17);
    let dir = scratch("zil-logdev");
    let d = Daemon::new("zil-logdev");
    let devs = files(&dir, 2, 128 << 20);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "zd", &devs[0], "log", &devs[1]]);
    let f = mnt.join("db");
    let mut want = rng.data(200_000);
    std::fs::write(&f, &want).unwrap();
    d.ok("rzpool", &["sync", "zd"]);
    for off in [0u64, 70_000, 150_000] {
        let data = rng.data(30_000);
        write_at(&f, off, &data, true);
        apply(&mut want, off, &data);
    }
    let used = |d: &Daemon| -> u64 {
        let out = d.ok("rzpool", &["list", "-Hpv", "-o", "name,alloc", "zd"]);
        let line = out.lines().find(|l| l.trim_start().starts_with(devs[1].as_str())).unwrap_or("");
        line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    assert!(used(&d) > 0, "the log device holds the chain");
    d.ok("rzpool", &["remove", "zd", &devs[1]]);
    assert!(!d.ok("rzpool", &["status", "zd"]).contains(devs[1].as_str()), "the log device left");
    for off in [10u64, 100_000] {
        let data = rng.data(20_000);
        write_at(&f, off, &data, true);
        apply(&mut want, off, &data);
    }
    d.kill9();
    lazy_unmount(&mnt);
    assert!(logged_writes(&dir, "zd") > 0, "fsyncs after the removal were logged");
    zdb_check(&dir, "zd");
    import(&d, &dir, "zd", &mnt, false);
    assert!(std::fs::read(&f).unwrap() == want, "replayed contents differ");
    d.ok("rzpool", &["export", "zd"]);
    zdb_check(&dir, "zd");
}

/// A log device that fails its writes: the fsync that meets the failure falls back to a txg
/// sync, the device is FAULTED and the pool DEGRADED but writable (a log vdev holds none
/// of the pool's blocks), and later fsyncs log to the pool's own vdevs, from which a
/// crash replays them.
#[test]
fn a_failed_log_device_falls_back_to_the_pool() {
    if skip_without_fuse_zdb("a_failed_log_device_falls_back_to_the_pool") {
        return;
    }
    let mut rng = Rng::new(29);
    let dir = scratch("zil-logfail");
    let d = Daemon::new("zil-logfail");
    let devs = files(&dir, 2, 128 << 20);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "zf", &devs[0], "log", &devs[1]]);
    let f = mnt.join("db");
    let mut want = rng.data(200_000);
    std::fs::write(&f, &want).unwrap();
    d.ok("rzpool", &["sync", "zf"]);
    let fsync_writes = |want: &mut Vec<u8>, rng: &mut Rng, offs: &[u64]| {
        for &off in offs {
            let data = rng.data(25_000);
            write_at(&f, off, &data, true);
            apply(want, off, &data);
        }
    };
    fsync_writes(&mut want, &mut rng, &[0, 90_000]);
    d.ok("rzinject", &["-d", &devs[1], "-e", "io", "-T", "write", "zf"]);
    fsync_writes(&mut want, &mut rng, &[40_000, 160_000]);
    let status = d.ok("rzpool", &["status", "zf"]);
    let line = status.lines().find(|l| l.contains(devs[1].as_str())).unwrap_or("");
    assert!(line.contains("FAULTED"), "the failing log device is faulted:\n{status}");
    assert!(status.contains("state: DEGRADED"), "the pool is degraded:\n{status}");
    fsync_writes(&mut want, &mut rng, &[5_000, 120_000, 199_000]);
    d.kill9();
    lazy_unmount(&mnt);
    assert!(logged_writes(&dir, "zf") >= 3, "fsyncs after the failure were logged to the pool");
    zdb_check(&dir, "zf");
    import(&d, &dir, "zf", &mnt, false);
    assert!(std::fs::read(&f).unwrap() == want, "replayed contents differ");
    d.ok("rzpool", &["export", "zf"]);
    zdb_check(&dir, "zf");
}

/// `ftruncate`, `chmod`, `chown` and `utimensat` between writes are logged in their place
/// (`TX_SETATTR`, as OpenZFS logs them): zdb -ivv lists the records, and the replay after
/// `kill -9` gives the file its fsync'd size, bytes, mode, owner and modification time.
#[test]
fn truncates_and_times_are_logged_in_order() {
    if skip_without_fuse_zdb("truncates_and_times_are_logged_in_order") {
        return;
    }
    let mut rng = Rng::new(31);
    let dir = scratch("zil-setattr");
    let d = Daemon::new("zil-setattr");
    let devs = files(&dir, 1, 128 << 20);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "zs", &devs[0]]);
    let (f, g) = (mnt.join("db"), mnt.join("journal"));
    let mut want = rng.data(300_000);
    std::fs::write(&f, &want).unwrap();
    std::fs::write(&g, rng.data(50_000)).unwrap();
    d.ok("rzpool", &["sync", "zs"]);
    // A first fsync starts the chain (one txg sync), so the ones below are all logged.
    write_at(&f, 0, b"start", true);
    apply(&mut want, 0, b"start");
    let file = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    let data = rng.data(40_000);
    file.write_all_at(&data, 250_000).unwrap();
    apply(&mut want, 250_000, &data);
    file.set_len(100_000).unwrap();
    want.truncate(100_000);
    let data = rng.data(10_000);
    file.write_all_at(&data, 120_000).unwrap();
    apply(&mut want, 120_000, &data);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::new(1_234_567_890, 123_456_789);
    file.set_times(std::fs::FileTimes::new().set_modified(mtime)).unwrap();
    file.sync_all().unwrap();
    // The journal is emptied, as SQLite's journal_mode=TRUNCATE does at each commit.
    let journal = std::fs::OpenOptions::new().write(true).open(&g).unwrap();
    journal.set_len(0).unwrap();
    journal.sync_all().unwrap();
    d.kill9();
    lazy_unmount(&mnt);
    let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ivv", "zs"]);
    let setattrs = out.lines().filter(|l| l.trim_start().starts_with("TX_SETATTR")).count();
    assert!(setattrs >= 5, "zdb -ivv lists the truncations, chmod, chown and the time change:\n{out}");
    // zdb decodes lr_mask with the userland (Solaris) AT_* values, not the Linux kernel's
    // that OpenZFS on Linux writes and replays (and rzfs writes): rzdb -i decodes them.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rzdb"))
        .args(["-e", "-p", dir.to_str().unwrap(), "-i", "zs"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("size 100000") && text.contains("mtime 1234567890.123456789"), "rzdb -i:\n{text}");
    zdb_check(&dir, "zs");
    import(&d, &dir, "zs", &mnt, false);
    let got = std::fs::read(&f).unwrap();
    assert_eq!(got.len(), want.len(), "replayed size");
    assert!(got == want, "replayed contents differ");
    let meta = std::fs::metadata(&f).unwrap();
    assert_eq!(meta.modified().unwrap(), mtime, "replayed modification time");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o640, 1234, 5678),
        "replayed chmod and chown"
    );
    assert_eq!(std::fs::metadata(&g).unwrap().len(), 0, "the emptied journal");
    d.ok("rzpool", &["export", "zs"]);
    zdb_check(&dir, "zs");
}
