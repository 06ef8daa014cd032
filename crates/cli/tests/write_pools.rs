//! Pools written by rzfs, checked by OpenZFS's own checker: every layout `rzpool create`
//! accepts (stripe, two mirrors, raidz1/2/3 at widths 3 to 8, ashift 9 and 12; a seeded
//! sample of the RAID-Z ones per run, `RZFS_LAYOUTS=all` for every one) is created through
//! the daemon, exported, and must pass `zdb -e -bcc` with "No leaks", verified feature
//! refcounts and no leaked MOS objects; the root dataset's referenced bytes must match zdb's.
//! Needs OpenZFS's userland (scripts/install-test-deps.sh puts it in /opt/rzfs-oracles);
//! `RZFS_ORACLE=0` skips, `RZFS_ORACLE=1` turns a missing zdb into a failure.

mod common;

use common::tools::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// zdb's human size ("95.9K") in bytes.
fn human(s: &str) -> f64 {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1024.0),
        Some('M') => (&s[..s.len() - 1], 1024.0 * 1024.0),
        Some('G') => (&s[..s.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (s.trim_end_matches('B'), 1.0),
    };
    num.parse::<f64>().unwrap() * mult
}

/// The referenced size zdb prints for dataset `name` ("Dataset NAME [ZPL], ID n, cr_txg n, SIZE, ...").
fn zdb_referenced(out: &str, name: &str) -> f64 {
    let line =
        out.lines().find(|l| l.starts_with(&format!("Dataset {name} "))).unwrap_or_else(|| panic!("{out}"));
    human(line.split(", ").nth(3).unwrap())
}

fn check_layout(tag: &str, layout: &[&str], n: usize, ashift: u8) {
    let dir = scratch(tag);
    let devs = files(&dir, n, 128 << 20);
    let d = Daemon::new(tag);
    let pool = format!("p{tag}");
    let ashift_opt = format!("ashift={ashift}");
    let mut args: Vec<&str> = vec!["create", "-o", &ashift_opt, "-m", "none", &pool];
    let mut it = devs.iter();
    for w in layout {
        if *w == "-" {
            args.push(it.next().unwrap());
        } else {
            args.push(w);
        }
    }
    args.extend(it.map(|s| s.as_str()));
    d.ok("rzpool", &args);
    let refer: u64 = d.ok("rzfs", &["list", "-Hp", "-o", "refer", &pool]).trim().parse().unwrap();
    d.ok("rzpool", &["export", &pool]);
    let out = zdb_check(&dir, &pool);
    let theirs = zdb_referenced(&out, &pool);
    let diff = (refer as f64 - theirs).abs() / theirs.max(1.0);
    assert!(diff < 0.01, "{pool}: rzfs refer {refer}, zdb {theirs}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// RAID-Z layouts checked per CI run; the other ones of the 30 (`RZFS_LAYOUTS=all`) in turn,
/// as the printed seed draws them.
const RAIDZ_SAMPLE: usize = 8;

/// Every layout: stripes of one and two disks and two mirrors always; of the 30 RAID-Z
/// layouts (raidz1/2/3, widths 3–8, ashift 9 and 12) a seeded sample of [`RAIDZ_SAMPLE`]
/// (`RZFS_LAYOUTS_SEED=N` replays a run, `RZFS_LAYOUTS=all` checks all, about 3 minutes):
/// the whole matrix once took a tenth of CI's budget for what differs only in widths.
#[test]
fn every_layout_passes_zdb() {
    if zdb().is_none() {
        return;
    }
    check_layout("stripe1", &[], 1, 9);
    check_layout("stripe2", &[], 2, 12);
    check_layout("mirrors", &["mirror", "-", "-", "mirror", "-", "-"], 4, 9);
    let mut raidz = Vec::new();
    for width in 3..=8usize {
        for (p, min) in [(1u8, 3usize), (2, 4), (3, 5)] {
            if width >= min {
                raidz.extend([9u8, 12].map(|ashift| (p, width, ashift)));
            }
        }
    }
    if std::env::var("RZFS_LAYOUTS").as_deref() != Ok("all") {
        let mut rng =
            common::rng::Rng::new(common::rng::env_seed("RZFS_LAYOUTS_SEED", "every_layout_passes_zdb"));
        while raidz.len() > RAIDZ_SAMPLE {
            raidz.swap_remove(rng.below(raidz.len() as u64) as usize);
        }
    }
    for (p, width, ashift) in raidz {
        let tag = format!("rz{p}w{width}a{ashift}");
        eprintln!("every_layout_passes_zdb: {tag}");
        check_layout(&tag, &[format!("raidz{p}").as_str()], width, ashift);
    }
}

/// OpenZFS writes into a pool rzfs created, then rzfs writes on top of what OpenZFS wrote:
/// `zhack` (a libzpool tool: a real `spa_import` read-write, txg syncs, export) enables a
/// read-only-compatible feature and moves its refcount up and down — several OpenZFS txgs
/// with space-map updates in rzfs's metaslabs; rzfs then imports read-write, writes files
/// over FUSE, exports; zdb must find the pool clean and rzfs must read every file back.
///
/// libzpool asks the kernel whether a pool is imported by opening /dev/zfs; without the
/// module that check fails closed, so the test provides an empty placeholder file while
/// zhack runs (and removes it), when it may.
#[test]
fn openzfs_writes_then_rzfs_writes() {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let placeholder = !Path::new("/dev/zfs").exists();
    if placeholder && std::fs::write("/dev/zfs", b"").is_err() {
        assert!(
            !std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"),
            "cannot create the /dev/zfs placeholder"
        );
        eprintln!("cannot create /dev/zfs placeholder (not root?): skipped");
        return;
    }
    let dir = scratch("zhack");
    let devs = files(&dir, 3, 128 << 20);
    let d = Daemon::new("zhack");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok(
        "rzpool",
        &["create", "-o", "ashift=9", "-m", &mnt_s, "interop", "raidz1", &devs[0], &devs[1], &devs[2]],
    );
    std::fs::write(mnt.join("before.txt"), b"written by rzfs before OpenZFS\n").unwrap();
    d.ok("rzpool", &["export", "interop"]);
    let (zhack_bin, lib) = zdb().unwrap();
    let zhack_bin = zhack_bin.with_file_name("zhack");
    let dir_s = dir.to_str().unwrap();
    let zh = |args: &[&str]| {
        let out = Command::new(&zhack_bin)
            .arg("-d")
            .arg(dir_s)
            .args(args)
            .env("LD_LIBRARY_PATH", &lib)
            .output()
            .unwrap();
        assert!(out.status.success(), "zhack {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    zh(&["feature", "enable", "-r", "-d", "rzfs interop probe", "interop", "org.rzfs:probe"]);
    zh(&["feature", "ref", "interop", "org.rzfs:probe"]);
    zh(&["feature", "ref", "-d", "interop", "org.rzfs:probe"]);
    if placeholder {
        let _ = std::fs::remove_file("/dev/zfs");
    }
    let labels = run_zdb(&["-l", &devs[0]]);
    let txg: u64 = labels
        .lines()
        .find_map(|l| l.trim().strip_prefix("txg: "))
        .and_then(|t| t.parse().ok())
        .expect("label txg");
    assert!(txg > 8, "OpenZFS should have synced several txgs (label txg {txg})");
    zdb_check(&dir, "interop");
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "interop"]);
    d.ok("rzfs", &["mount", "interop", &mnt_s]);
    let props = d.ok(
        "rzpool",
        &["get", "-H", "-o", "value", "feature@lz4_compress,feature@hole_birth,readonly", "interop"],
    );
    assert_eq!(props, "active\ndisabled\noff\n");
    d.ok("rzpool", &["set", "comment=moved between rzfs and OpenZFS", "interop"]);
    assert_eq!(
        d.ok("rzpool", &["get", "-H", "-o", "value", "comment", "interop"]),
        "moved between rzfs and OpenZFS\n"
    );
    assert_eq!(std::fs::read(mnt.join("before.txt")).unwrap(), b"written by rzfs before OpenZFS\n");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(mnt.join("after.bin"), &big).unwrap();
    d.ok("rzpool", &["export", "interop"]);
    zdb_check(&dir, "interop");
    // OpenZFS reads the history rzfs wrote (its own records from zhack are internal events).
    let hist = run_zdb(&["-e", "-p", dir_s, "-h", "interop"]);
    assert!(
        hist.contains("rzpool create -o ashift=9") && hist.contains("rzpool set comment="),
        "zdb -h:\n{hist}"
    );
    let out = dir.join("after.out");
    let log = run_zdb(&["-e", "-p", dir_s, "-r", "interop", "after.bin", out.to_str().unwrap()]);
    assert!(std::fs::read(&out).unwrap_or_default() == big, "zdb -r after.bin: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files over 4 GiB: sparse writes at 4.5 GiB and 6 GiB through FUSE need a three-level block
/// tree; the pool must pass zdb and the file read back (through rzfs's reader, without
/// extracting 6 GiB) with its size, its data and holes of zeros.
#[test]
fn files_over_4_gib() {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let dir = scratch("big");
    let devs = files(&dir, 3, 128 << 20);
    let d = Daemon::new("big");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok(
        "rzpool",
        &["create", "-o", "ashift=9", "-m", &mnt_s, "bigf", "raidz1", &devs[0], &devs[1], &devs[2]],
    );
    let chunk: Vec<u8> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(mnt.join("huge")).unwrap();
        f.seek(SeekFrom::Start(4608 << 20)).unwrap();
        f.write_all(&chunk).unwrap();
        f.seek(SeekFrom::Start(6 << 30)).unwrap();
        f.write_all(b"tail-data").unwrap();
        f.sync_all().unwrap();
    }
    d.ok("rzpool", &["export", "bigf"]);
    let out = zdb_check(&dir, "bigf");
    assert!(out.contains("No leaks"));
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "-o", "readonly=on", "bigf"]);
    d.ok("rzfs", &["mount", "bigf", &mnt_s]);
    let md = std::fs::metadata(mnt.join("huge")).unwrap();
    assert_eq!(md.len(), (6 << 30) + 9);
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(mnt.join("huge")).unwrap();
        let mut got = vec![0u8; chunk.len()];
        f.seek(SeekFrom::Start(4608 << 20)).unwrap();
        f.read_exact(&mut got).unwrap();
        assert!(got == chunk, "data at 4.5 GiB");
        let mut hole = vec![1u8; 4096];
        f.seek(SeekFrom::Start(5 << 30)).unwrap();
        f.read_exact(&mut hole).unwrap();
        assert!(hole.iter().all(|&b| b == 0), "hole at 5 GiB");
        let mut tail = Vec::new();
        f.seek(SeekFrom::Start(6 << 30)).unwrap();
        f.read_to_end(&mut tail).unwrap();
        assert_eq!(tail, b"tail-data");
    }
    d.ok("rzpool", &["export", "bigf"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Per-dataset features written by rzfs: zstd (default, numbered and fast levels), records
/// above 128 KiB (large_blocks), sha512/skein/edonr/blake3 checksums. Each is active on exactly
/// the datasets (and snapshots) that use it: zdb verifies every feature refcount against the
/// datasets' own feature entries, checksums every block, and extracts the files.
#[test]
fn dataset_features_pass_zdb() {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let dir = scratch("feat");
    let devs = files(&dir, 3, 160 << 20);
    let d = Daemon::new("feat");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok(
        "rzpool",
        &[
            "create",
            "-o",
            "ashift=12",
            "-O",
            "compression=zstd",
            "-m",
            &mnt_s,
            "feat",
            "raidz1",
            &devs[0],
            &devs[1],
            &devs[2],
        ],
    );
    let sets: [(&str, &[&str]); 6] = [
        ("big", &["recordsize=1M", "checksum=sha512", "compression=zstd-19"]),
        ("fast", &["compression=zstd-fast-10", "checksum=blake3"]),
        ("sk", &["checksum=skein", "compression=lz4"]),
        ("ed", &["checksum=edonr", "compression=off"]),
        ("plain", &["compression=off"]),
        ("np", &["checksum=noparity", "compression=off"]),
    ];
    let text: Vec<u8> = (0..3_000_000u32)
        .flat_map(|i| format!("line {} of a compressible file\n", i % 5000).into_bytes())
        .take(3 << 20)
        .collect();
    let noise: Vec<u8> = (0..2_500_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    for (fs, props) in sets {
        let name = format!("feat/{fs}");
        let mut args = vec!["create"];
        for p in props {
            args.push("-o");
            args.push(p);
        }
        args.push(&name);
        d.ok("rzfs", &args);
    }
    for (fs, _) in sets {
        std::fs::write(mnt.join(fs).join("text"), &text).unwrap();
        std::fs::write(mnt.join(fs).join("noise"), &noise).unwrap();
    }
    std::fs::write(mnt.join("root.txt"), &text[..100_000]).unwrap();
    d.ok("rzfs", &["snapshot", "feat/big@s1", "feat/fast@s1"]);
    // Changing a dataset's compression to zstd activates the feature at once.
    d.ok("rzfs", &["set", "compression=zstd-3", "feat/plain"]);
    std::fs::write(mnt.join("big").join("after"), &noise[..1_500_000]).unwrap();
    let get = |f: &str| d.ok("rzpool", &["get", "-H", "-o", "value", f, "feat"]).trim().to_string();
    for f in ["zstd_compress", "large_blocks", "sha512", "skein", "edonr", "blake3"] {
        assert_eq!(get(&format!("feature@{f}")), "active", "feature@{f}");
    }
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value", "compression", "feat/fast"]).trim(),
        "zstd-fast-10"
    );
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "recordsize", "feat/big"]).trim(), "1M");
    // A property whose feature the pool lacks is refused, naming the feature.
    std::fs::create_dir_all(dir.join("x")).unwrap();
    let other = files(&dir.join("x"), 1, 64 << 20);
    d.ok("rzpool", &["create", "-o", "feature@blake3=disabled", "-m", "none", "featx", &other[0]]);
    let (rc, _, err) = d.run("rzfs", &["set", "checksum=blake3", "featx"]);
    assert!(rc != 0 && err.contains("blake3"), "{err}");
    d.ok("rzpool", &["destroy", "featx"]);
    d.ok("rzpool", &["export", "feat"]);
    let out = zdb_check(&dir, "feat");
    // zdb: zstd_compress on root, big, big@s1, fast, fast@s1, plain = 6 datasets.
    assert!(out.contains("Verified zstd_compress feature refcount of 6 is correct"), "{out}");
    assert!(out.contains("Verified large_blocks feature refcount of 2 is correct"), "{out}");
    assert!(out.contains("Verified blake3 feature refcount of 2 is correct"), "{out}");
    assert!(out.contains("Verified skein feature refcount of 1 is correct"), "{out}");
    let dir_s = dir.to_str().unwrap();
    for (fs, _) in sets {
        for (file, want) in [("text", &text), ("noise", &noise)] {
            let out_path = dir.join(format!("{fs}-{file}.out"));
            let log =
                run_zdb(&["-e", "-p", dir_s, "-r", &format!("feat/{fs}"), file, out_path.to_str().unwrap()]);
            assert!(std::fs::read(&out_path).unwrap_or_default() == *want, "zdb -r feat/{fs} {file}: {log}");
        }
    }
    // The pool reads back through rzfs too, and a zstd-compressed 1 MiB-record file is intact.
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "feat"]);
    d.ok("rzfs", &["mount", "feat", &mnt_s]);
    for fs in ["big", "fast", "sk", "ed", "plain"] {
        d.ok("rzfs", &["mount", &format!("feat/{fs}"), mnt.join(fs).to_str().unwrap()]);
    }
    assert!(std::fs::read(mnt.join("big").join("after")).unwrap() == noise[..1_500_000]);
    assert!(std::fs::read(mnt.join("fast").join("text")).unwrap() == text);
    d.ok("rzpool", &["export", "feat"]);
    let _ = std::fs::remove_dir_all(&dir);
}

fn pseudo(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32).map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 13) as u8).collect()
}

/// `rzfs destroy`: snapshots in the middle and at the start of a chain (their unique blocks
/// freed, the rest handed to the next dataset), a file system without snapshots, and `-r`
/// of a tree with snapshots. zdb must find no leaks and no double frees after each round,
/// per-dataset feature refcounts must drop with the datasets, and what remains must read back.
#[test]
fn destroy_passes_zdb() {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let dir = scratch("destroy");
    let devs = files(&dir, 3, 128 << 20);
    let dir_s = dir.to_str().unwrap();
    let d = Daemon::new("destroy");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok("rzpool", &["create", "-o", "ashift=9", "-m", &mnt_s, "dp", "raidz1", &devs[0], &devs[1], &devs[2]]);
    d.ok("rzfs", &["create", "-o", "compression=zstd", "dp/a"]);
    d.ok("rzfs", &["create", "-p", "dp/a/b/c"]);
    d.ok("rzfs", &["create", "-o", "compression=zstd", "dp/gone"]);
    d.ok("rzfs", &["create", "dp/keep"]);
    let a = mnt.join("a");
    let w = |p: PathBuf, n: usize, seed: u32| std::fs::write(p, pseudo(n, seed)).unwrap();
    for i in 0..6 {
        w(a.join(format!("f{i}")), 300_000 + i * 1000, i as u32);
    }
    w(mnt.join("a/b/c/deep"), 200_000, 77);
    w(mnt.join("gone/x"), 500_000, 5);
    w(mnt.join("keep/k"), 400_000, 6);
    d.ok("rzfs", &["snapshot", "dp/a@s1"]);
    std::fs::remove_file(a.join("f0")).unwrap();
    w(a.join("f1"), 250_000, 101);
    w(a.join("n1"), 350_000, 102);
    d.ok("rzfs", &["snapshot", "dp/a@s2"]);
    std::fs::remove_file(a.join("f2")).unwrap();
    std::fs::remove_file(a.join("n1")).unwrap();
    w(a.join("n2"), 150_000, 103);
    d.ok("rzfs", &["snapshot", "dp/a@s3"]);
    w(a.join("f3"), 120_000, 104);
    std::fs::remove_file(a.join("f4")).unwrap();
    d.ok("rzfs", &["snapshot", "dp/a@s4"]);
    w(a.join("n3"), 90_000, 105);
    // Refusals first: a file system with children, the pool's root, a snapshot typo.
    let (rc, _, err) = d.run("rzfs", &["destroy", "dp/a"]);
    assert!(rc != 0 && err.contains("filesystem has children") && err.contains("dp/a@s1"), "{err}");
    let (rc, _, err) = d.run("rzfs", &["destroy", "dp"]);
    assert!(rc != 0 && err.contains("does not apply to pools"), "{err}");
    let (rc, _, _) = d.run("rzfs", &["destroy", "dp/a@nope"]);
    assert!(rc != 0);
    assert_eq!(d.ok("rzfs", &["destroy", "-nv", "dp/gone"]), "would destroy dp/gone\n");
    // Round 1: a middle snapshot, the oldest, a plain file system.
    d.ok("rzfs", &["destroy", "dp/a@s2"]);
    d.ok("rzfs", &["destroy", "dp/a@s1"]);
    d.ok("rzfs", &["destroy", "dp/gone"]);
    assert!(!mnt.join("gone/x").exists());
    let names = d.ok("rzfs", &["list", "-H", "-o", "name", "-t", "all", "-r", "dp"]);
    assert_eq!(names, "dp\ndp/a\ndp/a@s3\ndp/a@s4\ndp/a/b\ndp/a/b/c\ndp/keep\n");
    d.ok("rzpool", &["export", "dp"]);
    let out = zdb_check(&dir, "dp");
    assert!(out.contains("Verified zstd_compress feature refcount of 4 is correct"), "{out}");
    // The survivors read back, from the head and from the remaining snapshots.
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "dp"]);
    d.ok("rzfs", &["mount", "dp", &mnt_s]);
    d.ok("rzfs", &["mount", "dp/a", a.to_str().unwrap()]);
    assert!(std::fs::read(a.join("f1")).unwrap() == pseudo(250_000, 101));
    assert!(std::fs::read(a.join("n3")).unwrap() == pseudo(90_000, 105));
    assert!(!a.join("f4").exists());
    let s3 = dir.join("s3");
    d.ok("rzfs", &["mount", "dp/a@s3", s3.to_str().unwrap()]);
    assert!(std::fs::read(s3.join("f4")).unwrap() == pseudo(304_000, 4));
    assert!(std::fs::read(s3.join("n2")).unwrap() == pseudo(150_000, 103));
    d.ok("rzfs", &["unmount", "dp/a@s3"]);
    // Round 2: the newest snapshot, then -r of a tree that still has snapshots.
    d.ok("rzfs", &["destroy", "dp/a@s4"]);
    d.ok("rzfs", &["destroy", "-r", "dp/a"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-o", "name", "-t", "all", "-r", "dp"]), "dp\ndp/keep\n");
    // Space left the directory tree with the datasets: the pool's used is its own
    // referenced bytes plus dp/keep's (plus the MOS), not what the destroyed datasets held.
    let num = |prop: &str, ds: &str| -> u64 {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", prop, ds]).trim().parse().unwrap()
    };
    let (used, refer, keep) = (num("used", "dp"), num("referenced", "dp"), num("used", "dp/keep"));
    assert!(used >= refer + keep && used < refer + keep + (1 << 20), "used {used} refer {refer} keep {keep}");
    d.ok("rzpool", &["export", "dp"]);
    let out = zdb_check(&dir, "dp");
    assert!(!out.contains("zstd_compress feature refcount of") || out.contains("refcount of 0"), "{out}");
    let k = dir.join("k.out");
    let log = run_zdb(&["-e", "-p", dir_s, "-r", "dp/keep", "k", k.to_str().unwrap()]);
    assert!(std::fs::read(&k).unwrap_or_default() == pseudo(400_000, 6), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rzfs clone`: a clone reads as its snapshot, diverges on its own, keeps the snapshot
/// from being destroyed while it exists, and is destroyed without touching the origin's
/// blocks; zdb finds both states clean.
#[test]
fn clone_passes_zdb() {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let dir = scratch("clone");
    let devs = files(&dir, 2, 128 << 20);
    let dir_s = dir.to_str().unwrap();
    let d = Daemon::new("clone");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok("rzpool", &["create", "-m", &mnt_s, "cp", "mirror", &devs[0], &devs[1]]);
    d.ok("rzfs", &["create", "-o", "compression=zstd", "cp/src"]);
    for i in 0..4u32 {
        std::fs::write(mnt.join(format!("src/f{i}")), pseudo(200_000, i)).unwrap();
    }
    d.ok("rzfs", &["snapshot", "cp/src@s"]);
    d.ok("rzfs", &["clone", "-p", "cp/src@s", "cp/x/cl"]);
    let cl = mnt.join("x/cl");
    assert!(std::fs::read(cl.join("f1")).unwrap() == pseudo(200_000, 1));
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "origin", "cp/x/cl"]).trim(), "cp/src@s");
    std::fs::write(cl.join("f1"), pseudo(100_000, 50)).unwrap();
    std::fs::remove_file(cl.join("f2")).unwrap();
    std::fs::write(cl.join("new"), pseudo(300_000, 51)).unwrap();
    std::fs::write(mnt.join("src/f3"), pseudo(50_000, 52)).unwrap();
    let (rc, _, err) = d.run("rzfs", &["destroy", "cp/src@s"]);
    assert!(rc != 0 && err.contains("clones"), "{err}");
    d.ok("rzpool", &["export", "cp"]);
    let out = zdb_check(&dir, "cp");
    assert!(out.contains("Verified zstd_compress feature refcount of 3 is correct"), "{out}");
    for (fs, file, want) in [
        ("cp/x/cl", "f1", pseudo(100_000, 50)),
        ("cp/x/cl", "f0", pseudo(200_000, 0)),
        ("cp/x/cl", "new", pseudo(300_000, 51)),
        ("cp/src", "f2", pseudo(200_000, 2)),
        ("cp/src", "f3", pseudo(50_000, 52)),
    ] {
        let o = dir.join("o");
        let log = run_zdb(&["-e", "-p", dir_s, "-r", fs, file, o.to_str().unwrap()]);
        assert!(std::fs::read(&o).unwrap_or_default() == want, "zdb -r {fs} {file}: {log}");
    }
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "cp"]);
    d.ok("rzfs", &["destroy", "-r", "cp/x"]);
    d.ok("rzfs", &["destroy", "cp/src@s"]);
    d.ok("rzfs", &["mount", "cp/src", mnt.join("src").to_str().unwrap()]);
    assert!(std::fs::read(mnt.join("src/f1")).unwrap() == pseudo(200_000, 1));
    d.ok("rzpool", &["export", "cp"]);
    zdb_check(&dir, "cp");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pool properties persist in the MOS as OpenZFS keeps them, and a feature left disabled at
/// create can be enabled later (`zpool set feature@X=enabled`): zdb verifies the refcounts
/// (enabled_txg counts the newly recorded feature) and the pool stays clean.
#[test]
fn pool_props_and_late_feature_enable() {
    if zdb().is_none() {
        return;
    }
    let dir = scratch("pprops");
    let devs = files(&dir, 1, 96 << 20);
    let dir_s = dir.to_str().unwrap();
    let d = Daemon::new("pprops");
    let mut create = vec!["create", "-o", "feature@blake3=disabled", "-m", "none"];
    // Every on/off property `zpool set` takes is taken by `create -o` too (ZTS
    // zpool_create_018_pos, zpool_create_tempname).
    for p in ["delegation=off", "listsnapshots=on", "autotrim=on", "multihost=off"] {
        create.extend(["-o", p]);
    }
    create.extend(["pp", &devs[0]]);
    d.ok("rzpool", &create);
    d.ok("rzfs", &["create", "pp/boot"]);
    let get = |p: &str| d.ok("rzpool", &["get", "-H", "-o", "value", p, "pp"]).trim().to_string();
    for (k, v) in [("delegation", "off"), ("listsnapshots", "on"), ("autotrim", "on"), ("multihost", "off")] {
        assert_eq!(get(k), v, "{k} from create -o");
    }
    d.ok("rzpool", &["set", "autotrim=off", "pp"]);
    assert_eq!(get("feature@blake3"), "disabled");
    let (rc, _, err) = d.run("rzfs", &["set", "checksum=blake3", "pp/boot"]);
    assert!(rc != 0 && err.contains("blake3"), "{err}");
    d.ok("rzpool", &["set", "feature@blake3=enabled", "pp"]);
    assert_eq!(get("feature@blake3"), "enabled");
    d.ok("rzfs", &["set", "checksum=blake3", "pp/boot"]);
    for (k, v) in [
        ("autoexpand", "on"),
        ("autoreplace", "on"),
        ("failmode", "continue"),
        ("delegation", "off"),
        ("listsnapshots", "on"),
        ("bootfs", "pp/boot"),
    ] {
        d.ok("rzpool", &["set", &format!("{k}={v}"), "pp"]);
        assert_eq!(get(k), v, "{k}");
    }
    // A snapshot is a bootfs too; a volume is not (ZTS bootfs_001/002).
    d.ok("rzfs", &["snapshot", "pp/boot@s"]);
    d.ok("rzpool", &["set", "bootfs=pp/boot@s", "pp"]);
    assert_eq!(get("bootfs"), "pp/boot@s");
    d.ok("rzfs", &["create", "-V", "8m", "pp/vol"]);
    let (rc, _, err) = d.run("rzpool", &["set", "bootfs=pp/vol", "pp"]);
    assert!(rc != 0 && err.contains("volume"), "{err}");
    d.ok("rzfs", &["destroy", "pp/vol"]);
    d.ok("rzpool", &["set", "bootfs=pp/boot", "pp"]);
    let (rc, _, err) = d.run("rzpool", &["set", "failmode=sometimes", "pp"]);
    assert!(rc != 0 && err.contains("failmode"), "{err}");
    let (rc, _, _) = d.run("rzpool", &["set", "multihost=on", "pp"]);
    assert!(rc != 0);
    d.ok("rzpool", &["export", "pp"]);
    let out = zdb_check(&dir, "pp");
    assert!(out.contains("Verified blake3 feature refcount of 0 is correct"), "{out}");
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "pp"]);
    assert_eq!(get("failmode"), "continue");
    assert_eq!(get("bootfs"), "pp/boot");
    assert_eq!(get("feature@blake3"), "enabled");
    d.ok("rzpool", &["set", "bootfs=", "pp"]);
    assert_eq!(get("bootfs"), "-");
    d.ok("rzpool", &["export", "pp"]);
    zdb_check(&dir, "pp");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zpool create -d`: no feature enabled but those named with `-o feature@...`; the pool
/// is written without them (lz4 refused until enabled) and passes zdb.
#[test]
fn create_without_features() {
    if zdb().is_none() {
        return;
    }
    let dir = scratch("nofeat");
    let devs = files(&dir, 1, 96 << 20);
    let d = Daemon::new("nofeat");
    d.ok("rzpool", &["create", "-d", "-o", "feature@hole_birth=enabled", "-m", "none", "nf", &devs[0]]);
    let all = d.ok("rzpool", &["get", "-H", "-o", "property,value", "all", "nf"]);
    let enabled: Vec<&str> = all
        .lines()
        .filter(|l| l.starts_with("feature@") && !l.ends_with("\tdisabled"))
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    // hole_birth needs enabled_txg, which comes with it (as zpool does).
    assert_eq!(enabled, ["feature@enabled_txg", "feature@hole_birth"], "{all}");
    let (rc, _, err) = d.run("rzfs", &["create", "-o", "compression=lz4", "nf/fs"]);
    assert!(rc != 0 && err.contains("lz4"), "{err}");
    // compression=on is lzjb without lz4_compress, and so is metadata.
    let mnt = dir.join("fs");
    d.ok(
        "rzfs",
        &["create", "-o", "compression=on", "-o", &format!("mountpoint={}", mnt.display()), "nf/fs"],
    );
    std::fs::write(mnt.join("text"), "compressible text, again and again. ".repeat(20_000)).unwrap();
    d.ok("rzfs", &["snapshot", "nf/fs@s"]);
    d.ok("rzpool", &["export", "nf"]);
    zdb_check(&dir, "nf");
    let blocks = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddddd", "nf/fs"]);
    assert!(blocks.contains("Z=inherit=lzjb") && !blocks.contains("lz4"), "{blocks}");
}

/// Every answer of `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` at every offset of interest of
/// `path`, from the data blocks (of `bs` bytes) the file should have and its `size`: data
/// from an offset is the first data block at or after it (ENXIO past the last), a hole the
/// first hole block or the end of the file.
fn check_seek(path: &Path, data_blocks: &[u64], bs: u64, size: u64, what: &str) {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let is_data = |b: u64| data_blocks.contains(&b);
    let mut offsets: Vec<u64> = (0..size.div_ceil(bs) + 1).flat_map(|b| [b * bs, b * bs + bs / 3]).collect();
    offsets.extend(size.checked_sub(1));
    for off in offsets {
        let expect_data = (off / bs..size.div_ceil(bs)).find(|&b| is_data(b)).map(|b| (b * bs).max(off));
        let expect_data = expect_data.filter(|_| off < size);
        let expect_hole = if off >= size {
            None
        } else {
            Some((off / bs..).find(|&b| !is_data(b)).map_or(size, |b| (b * bs).max(off).min(size)))
        };
        for (whence, want) in [(libc::SEEK_DATA, expect_data), (libc::SEEK_HOLE, expect_hole)] {
            // SAFETY: lseek on a file descriptor owned by `f`, which outlives the call.
            let got = unsafe { libc::lseek(f.as_raw_fd(), off as libc::off_t, whence) };
            let got = if got < 0 {
                assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ENXIO), "{what} {off}");
                None
            } else {
                Some(got as u64)
            };
            assert_eq!(
                got,
                want,
                "{what}: lseek({off}, {})",
                if whence == libc::SEEK_DATA { "DATA" } else { "HOLE" }
            );
        }
    }
}

/// `lseek(SEEK_DATA/SEEK_HOLE)` through the mount answers from the file's blocks, as
/// OpenZFS does: right after the writes (the open txg is synced first, like OpenZFS's
/// `zfs_dmu_offset_next_sync`), after a hole is punched, in a snapshot (read-only view), and
/// after export/import; the data blocks are the level-0 blocks zdb lists for the object.
#[test]
fn seek_data_and_holes_match_zdb() {
    if skip_without_fuse_zdb("seek_data_and_holes_match_zdb") {
        return;
    }
    let dir = scratch("seek");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("seek");
    let mnt = dir.join("mnt");
    d.ok(
        "rzpool",
        &[
            "create",
            "-O",
            "recordsize=16k",
            "-O",
            "compression=off",
            "-m",
            mnt.to_str().unwrap(),
            "sk",
            &devs[0],
        ],
    );
    // In a child file system: zdb takes the pool's name for its MOS.
    d.ok("rzfs", &["create", "sk/fs"]);
    let mnt = mnt.join("fs");
    let bs = 16u64 << 10;
    let path = mnt.join("sparse");
    let mut blocks = vec![0u64, 1, 5, 9, 10, 40, 41, 63];
    let size = 70 * bs + 123;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path).unwrap();
        for &b in &blocks {
            f.write_all_at(&pseudo(bs as usize, b as u32 + 1), b * bs).unwrap();
        }
        f.set_len(size).unwrap();
    }
    check_seek(&path, &blocks, bs, size, "new in the open txg");
    d.ok("rzpool", &["sync", "sk"]);
    check_seek(&path, &blocks, bs, size, "synced");
    // In the next txg: a committed block punched out, a new block written (the answers
    // combine the open txg's changes with the committed tree), then synced.
    {
        use std::os::unix::fs::FileExt;
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // SAFETY: fallocate on a descriptor owned by `f`.
        let rc = unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (9 * bs) as i64,
                bs as i64,
            )
        };
        assert_eq!(rc, 0, "punch: {}", std::io::Error::last_os_error());
        f.write_all_at(&pseudo(bs as usize, 99), 20 * bs).unwrap();
    }
    blocks.retain(|&b| b != 9);
    blocks.push(20);
    blocks.sort_unstable();
    check_seek(&path, &blocks, bs, size, "changed in the open txg");
    d.ok("rzpool", &["sync", "sk"]);
    check_seek(&path, &blocks, bs, size, "changes synced");
    d.ok("rzfs", &["snapshot", "sk/fs@s"]);
    check_seek(&mnt.join(".zfs/snapshot/s/sparse"), &blocks, bs, size, "snapshot");
    // An empty file and one of holes only.
    std::fs::write(mnt.join("empty"), b"").unwrap();
    check_seek(&mnt.join("empty"), &[], bs, 0, "empty");
    let holes = mnt.join("holes");
    std::fs::File::create(&holes).unwrap().set_len(5 * bs).unwrap();
    check_seek(&holes, &[], bs, 5 * bs, "holes only");
    let obj = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    d.ok("rzpool", &["export", "sk"]);
    zdb_check(&dir, "sk");
    // zdb's level-0 blocks of the object are exactly the data blocks.
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddddd", "sk/fs", &obj.to_string()]);
    let mut l0: Vec<u64> = dump
        .lines()
        .filter(|l| l.contains(" L0 ") && !l.contains("HOLE"))
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().next()?, 16).ok())
        .map(|off| off / bs)
        .collect();
    l0.sort_unstable();
    assert_eq!(l0, blocks, "zdb's L0 blocks of object {obj}:\n{dump}");
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "sk"]);
    check_seek(&path, &blocks, bs, size, "after import");
    d.ok("rzpool", &["export", "sk"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// User, group and project accounting (`userused`/`groupused`/`projectused`, objects -1,
/// -2, -3) through a life of changes: files of several owners written over FUSE, chown,
/// growth, truncation, unlink, directory xattrs, a snapshot and a clone, an export and a
/// second import between two rounds; `zfs userspace`, `groupspace`, `projectspace` and
/// `userobjused@` report the counts. After each round zdb's dump of every object, recounted
/// with OpenZFS's rule, must equal the accounting ZAPs (common::useracct, part of
/// `zdb_check`), and the per-dataset features refcounts must verify.
#[test]
fn user_accounting_matches_zdb() {
    use std::os::unix::fs::chown;
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let dir = scratch("acct");
    let devs = files(&dir, 1, 256 << 20);
    let d = Daemon::new("acct");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok("rzpool", &["create", "-m", &mnt_s, "acct", &devs[0]]);
    assert_eq!(
        d.ok(
            "rzpool",
            &["get", "-H", "-o", "value", "feature@userobj_accounting,feature@project_quota", "acct"]
        ),
        "active\nactive\n"
    );
    d.ok("rzfs", &["create", "-o", "xattr=dir", "acct/fs"]);
    let fs = mnt.join("fs");
    let data = |n: usize| (0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>();
    std::fs::write(mnt.join("a"), data(100_000)).unwrap();
    chown(mnt.join("a"), Some(1000), Some(100)).unwrap();
    std::fs::create_dir(fs.join("d")).unwrap();
    chown(fs.join("d"), Some(2000), Some(200)).unwrap();
    for i in 0..20 {
        let p = fs.join("d").join(format!("f{i}"));
        std::fs::write(&p, data(1000 * i)).unwrap();
        chown(&p, Some(2000 + i as u32 % 3), Some(100)).unwrap();
    }
    std::fs::write(fs.join("x"), b"has a directory xattr").unwrap();
    chown(fs.join("x"), Some(3000), Some(300)).unwrap();
    let st = Command::new("setfattr").args(["-n", "user.k", "-v", "value"]).arg(fs.join("x")).status();
    assert!(st.map(|s| s.success()).unwrap_or(true));
    std::os::unix::fs::symlink("a", mnt.join("l")).unwrap();
    d.ok("rzfs", &["snapshot", "acct/fs@s1"]);
    // What zfs userspace/groupspace/projectspace and userobjused@ read back (after a sync:
    // they read the committed counts, as OpenZFS's do).
    d.ok("rzpool", &["sync", "acct"]);
    let users = d.ok("rzfs", &["userspace", "-Hpn", "-o", "name,objused", "acct/fs"]);
    for want in ["2000\t8", "2001\t7", "2002\t6", "3000\t"] {
        assert!(users.lines().any(|l| l.starts_with(want)), "userspace:\n{users}");
    }
    let groups = d.ok("rzfs", &["groupspace", "-Hpn", "-o", "name,objused", "acct/fs@s1"]);
    for want in ["100\t20", "200\t1", "300\t"] {
        assert!(groups.lines().any(|l| l.starts_with(want)), "groupspace:\n{groups}");
    }
    let total: u64 =
        d.ok("rzfs", &["projectspace", "-Hp", "-o", "objused", "acct/fs"]).trim().parse().unwrap();
    assert!(total >= 23, "projectspace counts {total} objects");
    assert_eq!(d.ok("rzfs", &["get", "-Hp", "-o", "value", "userobjused@2001", "acct/fs"]), "7\n");
    let used: u64 =
        d.ok("rzfs", &["get", "-Hp", "-o", "value", "userused@2001", "acct/fs"]).trim().parse().unwrap();
    // f1, f4, ... f19: 70,000 bytes of data (compressed: lz4 is on) plus 512 per object.
    assert!((8 * 512..200_000).contains(&used), "userused@2001 = {used}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "userquota@2001", "acct/fs"]), "none\n");
    d.ok("rzfs", &["clone", "acct/fs@s1", "acct/clone"]);
    chown(mnt.join("clone").join("x"), Some(4000), Some(400)).unwrap();
    d.ok("rzpool", &["export", "acct"]);
    zdb_check(&dir, "acct");

    // Second round after a re-import: owners change, files grow, shrink and go away.
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "acct"]);
    chown(mnt.join("a"), Some(0), Some(0)).unwrap();
    std::fs::OpenOptions::new().append(true).open(fs.join("d/f3")).unwrap().set_len(2_000_000).unwrap();
    std::fs::OpenOptions::new().write(true).open(fs.join("d/f19")).unwrap().set_len(10).unwrap();
    for i in 0..10 {
        std::fs::remove_file(fs.join("d").join(format!("f{i}"))).unwrap();
    }
    std::fs::hard_link(fs.join("x"), fs.join("x2")).unwrap();
    std::fs::remove_file(fs.join("x")).unwrap();
    std::fs::write(mnt.join("clone/new"), data(300_000)).unwrap();
    chown(mnt.join("clone/new"), Some(1000), None).unwrap();
    d.ok("rzfs", &["destroy", "-r", "acct/clone"]);
    d.ok("rzfs", &["destroy", "acct/fs@s1"]);
    d.ok("rzpool", &["export", "acct"]);
    zdb_check(&dir, "acct");
}
