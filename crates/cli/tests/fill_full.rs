//! # A full pool answers ENOSPC and loses nothing
//!
//! For each layout (single disk, mirror of 2, raidz1 of 3, raidz2 of 4 file vdevs, and a
//! mixed pool of a mirror of 2 beside a raidz2 of 3) and two ways of syncing — writes racing
//! a background sync every 0.1 s, and writes forcing syncs
//! themselves (a 2 MiB dirty limit, `fsync` after every file) — files are written through
//! the FUSE mount of a private rzfsd until a `write()` fails. Then:
//!
//! * that failure is ENOSPC (not EIO), and further writes and creations get ENOSPC at once;
//! * deleting files works on the full pool, and after deleting, new files can be written
//!   (the writer syncs txgs to release the space freed, which stays unallocatable for two
//!   txgs);
//! * `fsync` of every file whose writes returned success succeeds;
//! * `statfs` never reports more room than the pool takes;
//! * after export, OpenZFS's `zdb -bcc` finds no leak and no referenced-but-free block, and
//!   after a new import every acknowledged file reads back identical, every deleted one stays
//!   deleted and every listed name can be stat'ed.
//!
//! Needs FUSE and root (skipped otherwise); zdb as for every oracle test.

mod common;

use common::rng::Rng;
use common::tools::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const DEV: u64 = 96 << 20;

/// Writes `data` to `path` and (optionally) fsyncs it: the error of the first failing call.
fn write_file(path: &Path, data: &[u8], fsync: bool) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    if fsync {
        f.sync_all()?;
    }
    Ok(())
}

fn statfs_avail(dir: &Path) -> u64 {
    let out = std::process::Command::new("stat").args(["-f", "-c", "%a %S"]).arg(dir).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    v.first().copied().unwrap_or(0) * v.get(1).copied().unwrap_or(0)
}

fn run(layout: (&str, &[&str], usize), forcing: bool, seed: u64) {
    let (kind, words, n) = layout;
    let mode = if forcing { "forcing" } else { "racing" };
    let tag = format!("fill-{kind}-{mode}");
    let dir = scratch(&tag);
    let devs = files(&dir, n, DEV);
    let env: &[(&str, &str)] = if forcing {
        &[("RZFS_DIRTY_MAX", "2097152"), ("RZFS_TXG_TIMEOUT", "5")]
    } else {
        &[("RZFS_TXG_TIMEOUT", "0.1")]
    };
    let d = Daemon::with_env(&tag, env);
    let mnt = dir.join("mnt");
    let pool = "fill";
    // `-f`: a mixed layout needs it (zpool's replication check); "{}" in `words` stands for
    // the next device, otherwise the devices follow the words.
    let mut args = vec!["create", "-f", "-m", mnt.to_str().unwrap(), pool];
    if words.contains(&"{}") {
        let mut it = devs.iter();
        args.extend(words.iter().map(|w| if *w == "{}" { it.next().unwrap().as_str() } else { *w }));
    } else {
        args.extend_from_slice(words);
        args.extend(devs.iter().map(|s| s.as_str()));
    }
    d.ok("rzpool", &args);
    let mut rng = Rng::new(seed);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let size_cap = d.ok("rzpool", &["list", "-H", "-p", "-o", "size", pool]).trim().parse::<u64>().unwrap();
    // Fill: every write either succeeds or fails with ENOSPC. While racing, an ENOSPC may
    // come from the worst-case estimate of a large open txg while the pool still has room
    // (the txg's sync shows it): the half-written file goes and the pool is synced, and the
    // fill goes on until a write fails right after a sync, when the pool is really full.
    let mut i = 0;
    let mut just_synced = false;
    let full = loop {
        let name = format!("f{i:04}");
        let data = rng.data_in(512 << 10, 3 << 20);
        let avail = statfs_avail(&mnt);
        assert!(avail <= size_cap, "{tag}: statfs reports {avail} available in a pool of {size_cap}");
        match write_file(&mnt.join(&name), &data, forcing) {
            Ok(()) => {
                model.insert(name, data);
                just_synced = false;
            }
            Err(e) if !forcing && !just_synced && e.raw_os_error() == Some(libc::ENOSPC) => {
                std::fs::remove_file(mnt.join(&name)).unwrap();
                d.ok("rzpool", &["sync", pool]);
                just_synced = true;
            }
            Err(e) => break (name, e),
        }
        i += 1;
        assert!(i < 10_000, "{tag}: the pool never filled");
    };
    let (partial, e) = full;
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{tag}: a full pool answered {e} to {partial}");
    eprintln!(
        "fill_full: {tag}: ENOSPC after {} files ({} MiB)",
        model.len(),
        model.values().map(Vec::len).sum::<usize>() >> 20
    );
    // The pool stays full for new data and names, at once.
    let e = write_file(&mnt.join("more"), &rng.data(2 << 20), true).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{tag}: second write after full: {e}");
    // Everything acknowledged is made durable.
    for name in model.keys() {
        std::fs::File::open(mnt.join(name))
            .unwrap()
            .sync_all()
            .unwrap_or_else(|e| panic!("{tag}: fsync {name}: {e}"));
    }
    // Deleting works on a full pool (the half-written file and the refused one first).
    for n in [partial.as_str(), "more"] {
        let _ = std::fs::remove_file(mnt.join(n));
    }
    let names: Vec<String> = model.keys().cloned().collect();
    let mut deleted = Vec::new();
    for (k, name) in names.iter().enumerate() {
        if k % 2 == 0 {
            std::fs::remove_file(mnt.join(name))
                .unwrap_or_else(|e| panic!("{tag}: unlink {name} on a full pool: {e}"));
            model.remove(name);
            deleted.push(name.clone());
        }
    }
    // And space comes back: new files fit again.
    let mut written_after = 0;
    for k in 0..3 {
        let name = format!("after{k}");
        let data = rng.data_in(256 << 10, 1 << 20);
        write_file(&mnt.join(&name), &data, true)
            .unwrap_or_else(|e| panic!("{tag}: write after deleting: {e}"));
        model.insert(name, data);
        written_after += 1;
    }
    assert_eq!(written_after, 3);
    d.ok("rzpool", &["export", pool]);
    zdb_check(&dir, pool);
    // Read back through a new import.
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["import", "-N", "-d", dir_s, pool]);
    d.ok("rzfs", &["mount", pool, mnt.to_str().unwrap()]);
    let mut listed = 0;
    for e in std::fs::read_dir(&mnt).unwrap() {
        let e = e.unwrap();
        e.metadata()
            .unwrap_or_else(|err| panic!("{tag}: {:?} is listed but stat fails: {err}", e.file_name()));
        listed += 1;
    }
    assert_eq!(listed, model.len(), "{tag}: directory lists {listed} names, model has {}", model.len());
    for (name, data) in &model {
        let got = std::fs::read(mnt.join(name)).unwrap_or_else(|e| panic!("{tag}: read {name}: {e}"));
        assert!(
            got == *data,
            "{tag}: {name} reads back {} bytes, differing from the {} written",
            got.len(),
            data.len()
        );
    }
    for name in &deleted {
        assert!(!mnt.join(name).exists(), "{tag}: deleted {name} came back");
    }
    d.ok("rzpool", &["export", pool]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fill_to_full_every_layout() {
    if zdb().is_none() || !fuse_usable() {
        eprintln!("fill_full: needs FUSE, root and zdb; skipped");
        return;
    }
    let seed = std::env::var("RZFS_FILL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    eprintln!("fill_full: seed {seed} (RZFS_FILL_SEED)");
    let layouts: [(&str, &[&str], usize); 5] = [
        ("single", &[], 1),
        ("mirror", &["mirror"], 2),
        ("raidz1", &["raidz1"], 3),
        ("raidz2", &["raidz2"], 4),
        // Top-level vdevs of different kinds: each fills at its own asize per block.
        ("mixed", &["mirror", "{}", "{}", "raidz2", "{}", "{}", "{}"], 5),
    ];
    for l in layouts {
        for forcing in [false, true] {
            run(l, forcing, seed);
        }
    }
}

/// Writes 1 MiB files named `prefix{i}` into `dir` until a write fails; returns the bytes
/// of the files written whole and the error.
fn fill_dir(dir: &Path, prefix: &str, rng: &mut Rng) -> (u64, std::io::Error) {
    let mut total = 0u64;
    for i in 0..10_000 {
        let data = rng.data_in(1 << 20, (1 << 20) + 1);
        match write_file(&dir.join(format!("{prefix}{i:04}")), &data, false) {
            Ok(()) => total += data.len() as u64,
            Err(e) => return (total, e),
        }
    }
    panic!("{}: no limit reached", dir.display());
}

/// `quota` and `refquota`: writes stop with EDQUOT near the limit (within OpenZFS's slack:
/// one change, and 1/32 of a quota), `available` and `statfs` show what is left, deleting
/// makes room (not under a `quota` while a snapshot holds the data, but under a
/// `refquota`), quotas below what is used are refused, and zdb is clean.
#[test]
fn quotas_answer_edquot() {
    if zdb().is_none() || !fuse_usable() {
        eprintln!("quotas_answer_edquot: needs FUSE, root and zdb; skipped");
        return;
    }
    const EDQUOT: i32 = 122;
    const MB: u64 = 1 << 20;
    let dir = scratch("quotas");
    let devs = files(&dir, 1, 256 << 20);
    let d = Daemon::with_env("quotas", &[("RZFS_TXG_TIMEOUT", "0.2")]);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "qt", &devs[0]]);
    let mut rng = Rng::new(0x9707a);
    let refused = |args: &[&str], why: &str| {
        let (code, _, err) = d.run("rzfs", args);
        assert!(code != 0 && err.contains(why), "{args:?}: {err}");
    };
    let num = |p: &str, n: &str| -> u64 {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", p, n]).trim().parse().unwrap()
    };
    // quota on a parent limits what a child writes.
    d.ok("rzfs", &["create", "-o", "quota=12M", "qt/a"]);
    d.ok("rzfs", &["create", "qt/a/b"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value,source", "quota", "qt/a"]), "12M\tlocal\n");
    assert!(num("available", "qt/a/b") <= 12 * MB);
    let (written, e) = fill_dir(&mnt.join("a/b"), "f", &mut rng);
    assert_eq!(e.raw_os_error(), Some(EDQUOT), "{e}");
    d.ok("rzpool", &["sync", "qt"]);
    let used = num("used", "qt/a");
    assert!(written >= 8 * MB && used <= 12 * MB + 12 * MB / 32 + 2 * MB, "written {written}, used {used}");
    assert!(num("available", "qt/a/b") < MB, "{}", num("available", "qt/a/b"));
    let avail = statfs_avail(&mnt.join("a/b"));
    assert!(avail < MB, "statfs: {avail}");
    // A snapshot holds the data: deleting frees nothing under the quota.
    d.ok("rzfs", &["snapshot", "qt/a/b@s"]);
    std::fs::remove_file(mnt.join("a/b/f0000")).unwrap();
    d.ok("rzpool", &["sync", "qt"]);
    let e = write_file(&mnt.join("a/b/again"), &vec![1u8; MB as usize], false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EDQUOT), "{e}");
    d.ok("rzfs", &["destroy", "qt/a/b@s"]);
    d.ok("rzpool", &["sync", "qt"]);
    write_file(&mnt.join("a/b/again"), &vec![1u8; MB as usize / 2], false).unwrap();
    // refquota: snapshots are not charged.
    d.ok("rzfs", &["create", "-o", "refquota=6M", "qt/r"]);
    let (written, e) = fill_dir(&mnt.join("r"), "g", &mut rng);
    assert_eq!(e.raw_os_error(), Some(EDQUOT), "{e}");
    d.ok("rzpool", &["sync", "qt"]);
    let refd = num("referenced", "qt/r");
    assert!(written >= 3 * MB && refd <= 8 * MB, "written {written}, referenced {refd}");
    d.ok("rzfs", &["snapshot", "qt/r@s"]);
    for i in 0..3 {
        std::fs::remove_file(mnt.join(format!("r/g{i:04}"))).unwrap();
    }
    d.ok("rzpool", &["sync", "qt"]);
    write_file(&mnt.join("r/after"), &vec![2u8; MB as usize], false).unwrap();
    // Refusals (libzfs and the kernel's checks).
    refused(&["set", "quota=0", "qt/a"], "use 'none'");
    refused(&["set", "quota=1M", "qt/a"], "less than current used");
    refused(&["set", "refquota=1M", "qt/r"], "less than current used");
    d.ok("rzfs", &["set", "quota=none", "qt/a"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "quota", "qt/a"]), "none\n");
    write_file(&mnt.join("a/b/free"), &vec![3u8; 2 * MB as usize], false).unwrap();
    d.ok("rzfs", &["set", "quota=100M", "qt/a"]);
    d.ok("rzpool", &["export", "qt"]);
    // zdb reads dd_quota from the directory itself.
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "qt"]);
    assert!(dump.contains("quota = 100M"), "dd_quota is in the directory");
    zdb_check(&dir, "qt");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `reservation` and `refreservation`: space reserved for a dataset is taken from what the
/// others have (`available`, and their writes stop with ENOSPC before eating into it), the
/// reserved dataset can still write its reservation on a pool the others filled, sizes
/// beyond the free space or a quota are refused, destroying the dataset gives the space
/// back, and OpenZFS's zdb reads `dd_reserved` and finds the pool clean.
#[test]
fn reservations_hold_space() {
    if zdb().is_none() || !fuse_usable() {
        eprintln!("reservations_hold_space: needs FUSE, root and zdb; skipped");
        return;
    }
    const ENOSPC: i32 = 28;
    const MB: u64 = 1 << 20;
    let dir = scratch("reservations");
    let devs = files(&dir, 1, 512 << 20);
    let d = Daemon::with_env("reservations", &[("RZFS_TXG_TIMEOUT", "0.2")]);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "rv", &devs[0]]);
    let mut rng = Rng::new(0x7e5e7);
    let refused = |args: &[&str], why: &str| {
        let (code, _, err) = d.run("rzfs", args);
        assert!(code != 0 && err.contains(why), "{args:?}: {err}");
    };
    let num = |p: &str, n: &str| -> u64 {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", p, n]).trim().parse().unwrap()
    };
    d.ok("rzfs", &["create", "rv/free"]);
    let before = num("available", "rv/free");
    d.ok("rzfs", &["create", "-o", "reservation=60M", "rv/res"]);
    d.ok("rzfs", &["create", "rv/ref"]);
    d.ok("rzfs", &["set", "refreservation=30M", "rv/ref"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value,source", "reservation", "rv/res"]), "60M\tlocal\n");
    // The others lose what is reserved; the reserved ones keep it.
    let after = num("available", "rv/free");
    assert!(before - after >= 90 * MB && before - after < 92 * MB, "available {before} -> {after}");
    assert!(num("available", "rv/res") >= after + 59 * MB, "{}", num("available", "rv/res"));
    assert!(num("usedbychildren", "rv") >= 90 * MB);
    assert!(num("usedbyrefreservation", "rv/ref") >= 29 * MB);
    refused(&["set", "reservation=10G", "rv/res"], "greater than available space");
    refused(&["set", "refreservation=10G", "rv/ref"], "greater than available space");
    refused(&["set", "quota=20M", "rv/res"], "less than current used or reserved");
    let sf = statfs_avail(&mnt.join("free"));
    assert!(sf <= after + MB && sf + 2 * MB >= after, "statfs {sf}, available {after}");
    // Fill the pool from the unreserved file system: ENOSPC before the reservations.
    let (written, e) = fill_dir(&mnt.join("free"), "f", &mut rng);
    assert_eq!(e.raw_os_error(), Some(ENOSPC), "{e}");
    d.ok("rzpool", &["sync", "rv"]);
    let used = num("used", "rv/free");
    assert!(
        used <= after + 2 * MB && used + 8 * MB >= after,
        "wrote {written}, used {used} of {after} available"
    );
    // The reserved file systems still write what they reserved.
    for i in 0..50 {
        write_file(&mnt.join(format!("res/r{i:03}")), &rng.data_in(MB, MB + 1), false)
            .unwrap_or_else(|e| panic!("reservation file {i}: {e}"));
    }
    for i in 0..24 {
        write_file(&mnt.join(format!("ref/r{i:03}")), &rng.data_in(MB, MB + 1), false)
            .unwrap_or_else(|e| panic!("refreservation file {i}: {e}"));
    }
    d.ok("rzpool", &["sync", "rv"]);
    // Destroying a reserved dataset gives its space back to the others.
    let full = num("available", "rv/free");
    d.ok("rzfs", &["destroy", "-r", "rv/res"]);
    d.ok("rzpool", &["sync", "rv"]);
    assert!(num("available", "rv/free") > full + 50 * MB, "{full} -> {}", num("available", "rv/free"));
    d.ok("rzfs", &["create", "-o", "reservation=5M", "rv/small"]);
    d.ok("rzfs", &["rename", "rv/small", "rv/ref/small"]);
    d.ok("rzpool", &["export", "rv"]);
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "rv"]);
    assert!(dump.contains("reserved = 5M"), "dd_reserved is in the directory");
    zdb_check(&dir, "rv");
    let _ = std::fs::remove_dir_all(&dir);
}

/// User, group and object quotas (`userquota@`, `groupquota@`, `userobjquota@`): a user at
/// its limit gets EDQUOT for writes and new files once the txg that reached it synced (as in
/// OpenZFS, usage is the synced count), others are not limited, `none` lifts a limit, the
/// limits show in `zfs get` and `zfs userspace`, `zfs create -o` sets them, and zdb is
/// clean with the accounting right.
#[test]
fn user_quotas_answer_edquot() {
    use std::os::unix::process::CommandExt;
    if zdb().is_none() || !fuse_usable() {
        eprintln!("user_quotas_answer_edquot: needs FUSE, root and zdb; skipped");
        return;
    }
    let dir = scratch("uquota");
    let devs = files(&dir, 1, 256 << 20);
    let d = Daemon::with_env("uquota", &[("RZFS_TXG_TIMEOUT", "0.2")]);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "uq", &devs[0]]);
    std::fs::set_permissions(&mnt, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    // Runs `sh -c script` as uid:gid in the mount; its status and stderr.
    let as_user = |uid: u32, gid: u32, script: &str| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(&mnt)
            .uid(uid)
            .gid(gid)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let quota_hit = |(ok, err): (bool, String), what: &str| {
        assert!(!ok && err.contains("Disk quota exceeded"), "{what}: {ok} {err}");
    };
    d.ok("rzfs", &["set", "userquota@1000=1M", "userobjquota@3000=3", "uq"]);
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value", "userquota@1000,userobjquota@3000,groupquota@100", "uq"]),
        "1M\n3\nnone\n"
    );
    // 1.5 MiB in one txg passes (usage is counted at sync); then nothing more.
    assert!(as_user(1000, 100, "head -c 1572864 /dev/urandom > a").0);
    d.ok("rzpool", &["sync", "uq"]);
    quota_hit(as_user(1000, 100, "head -c 65536 /dev/urandom >> a"), "append over userquota");
    quota_hit(as_user(1000, 100, "touch b"), "create over userquota");
    // Others are not limited by it; a group quota limits every member's files.
    assert!(as_user(2000, 100, "head -c 65536 /dev/urandom > c").0);
    d.ok("rzfs", &["set", "groupquota@100=1M", "uq"]);
    quota_hit(as_user(2000, 100, "head -c 65536 /dev/urandom >> c"), "append over groupquota");
    assert!(as_user(2000, 200, "head -c 65536 /dev/urandom > c2").0);
    // `none` lifts both.
    d.ok("rzfs", &["set", "userquota@1000=none", "groupquota@100=none", "uq"]);
    assert!(as_user(1000, 100, "head -c 65536 /dev/urandom >> a && touch b").0);
    // Object quota: three objects, then no new one (writes to them go on).
    assert!(as_user(3000, 300, "touch o1 o2 o3").0);
    d.ok("rzpool", &["sync", "uq"]);
    quota_hit(as_user(3000, 300, "touch o4"), "create over userobjquota");
    assert!(as_user(3000, 300, "echo more >> o1").0);
    let users = d.ok("rzfs", &["userspace", "-Hpn", "-o", "name,objused,objquota", "uq"]);
    assert!(users.lines().any(|l| l == "3000\t3\t3"), "{users}");
    d.ok("rzfs", &["set", "userobjquota@3000=none", "uq"]);
    assert_eq!(d.ok("rzfs", &["get", "-Hp", "-o", "value", "userobjquota@3000", "uq"]), "0\n");
    let (code, _, err) = d.run("rzfs", &["set", "userquota@no-such-user=1M", "uq"]);
    assert!(code != 0 && err.contains("invalid user/group name"), "{err}");
    // Quotas given at creation; a bad one creates nothing.
    d.ok("rzfs", &["create", "-o", "userquota@1000=2M", "-o", "groupobjquota@100=7", "uq/qc"]);
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value", "userquota@1000,groupobjquota@100", "uq/qc"]),
        "2M\n7\n"
    );
    let (code, _, err) = d.run("rzfs", &["create", "-o", "userquota@1000=lots", "uq/bad"]);
    assert!(code != 0 && err.contains("bad numeric value"), "{err}");
    assert_eq!(d.run("rzfs", &["list", "uq/bad"]).0, 1);
    d.ok("rzpool", &["export", "uq"]);
    zdb_check(&dir, "uq");
}
