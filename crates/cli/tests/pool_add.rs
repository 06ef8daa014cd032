//! `rzpool add`, checked by OpenZFS's own checker: a pool (one file, a mirror, a raidz1) is
//! created and written through FUSE, a top-level vdev of the same layout is added, more is
//! written (and must land on the new vdev too), the pool is exported and must pass
//! `zdb -e -bcc` ("No leaks", verified refcounts); rzfs then imports it from the directory
//! (assembling both vdevs from their labels) and reads every file back. The added vdev may
//! differ from the pool's (a raidz2 next to a mirror, a 4 KiB-sector mirror next to a
//! 512-byte disk) when `-f`/`--allow-*-mismatch` say so. Refusals: a mismatched replication
//! level or ashift without the override, a raidz log, and `-n`, which must write nothing.
//! Separate log vdevs (`log ...` at create and add) are in the pool's config as OpenZFS
//! writes them and hold none of its blocks nor its space.
//! Needs OpenZFS's zdb (scripts/install-test-deps.sh) and /dev/fuse; `RZFS_ORACLE=0` skips.

mod common;

use common::tools::*;
use std::io::Read;
use std::path::{Path, PathBuf};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-add-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Incompressible bytes, different per seed.
fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn usable() -> bool {
    zdb().is_some() && Path::new("/dev/fuse").exists()
}

/// Allocated bytes of each top-level vdev of an exported pool, from its space maps.
fn per_top_alloc(dir: &Path, pool: &str) -> Vec<u64> {
    let p = common::open(dir, pool).unwrap();
    let tops = pool::mos_config(&p).unwrap();
    tops.iter().map(|t| pool::metaslab_alloc(&p, t.metaslab_array.unwrap()).unwrap()).collect()
}

/// Creates `layout` (words, "-" standing for the next device), writes, adds `added` (with
/// the options `flags`), writes more, and checks the result with zdb and by reading it back.
fn add_case(tag: &str, layout: &[&str], flags: &[&str], added: &[&str]) {
    let dir = scratch(tag);
    let n_old = layout.iter().filter(|w| **w == "-").count();
    let n_new = added.iter().filter(|w| **w == "-").count();
    let old = common::pools::blank(&dir, "a", n_old);
    let new = common::pools::blank(&dir, "b", n_new);
    let fill = |words: &[&str], devs: &[String]| -> Vec<String> {
        let mut it = devs.iter();
        words.iter().map(|w| if *w == "-" { it.next().unwrap().clone() } else { w.to_string() }).collect()
    };
    let d = Daemon::new(tag);
    let pool = format!("add{tag}");
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    // Words of `layout` that are options ("-f") go before the pool's name.
    let (opts, words): (Vec<&str>, Vec<&str>) =
        layout.iter().partition(|w| w.len() > 1 && w.starts_with('-'));
    let mut args: Vec<String> =
        ["create", "-o", "ashift=9", "-m", &mnt_s].iter().map(|s| s.to_string()).collect();
    args.extend(opts.iter().map(|o| o.to_string()));
    args.push(pool.clone());
    args.extend(fill(&words, &old));
    d.ok("rzpool", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let before: Vec<Vec<u8>> = (0..3).map(|i| noise(700_000, i)).collect();
    for (i, b) in before.iter().enumerate() {
        std::fs::write(mnt.join(format!("before{i}")), b).unwrap();
    }
    let size0: u64 = d.ok("rzpool", &["list", "-Hp", "-o", "size", &pool]).trim().parse().unwrap();

    let mut args: Vec<String> = vec!["add".into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    args.push(pool.clone());
    args.extend(fill(added, &new));
    d.ok("rzpool", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let st = d.ok("rzpool", &["status", &pool]);
    assert!(new.iter().all(|p| st.contains(p.as_str())), "status after add:\n{st}");
    let size1: u64 = d.ok("rzpool", &["list", "-Hp", "-o", "size", &pool]).trim().parse().unwrap();
    assert!(size1 > size0 + size0 / 8, "size {size0} -> {size1}");

    let after: Vec<Vec<u8>> = (0..6).map(|i| noise(2_000_000, 100 + i)).collect();
    for (i, b) in after.iter().enumerate() {
        std::fs::write(mnt.join(format!("after{i}")), b).unwrap();
    }
    d.ok("rzpool", &["export", &pool]);
    let out = zdb_check(&dir, &pool);
    for l in out.lines().filter(|l| l.contains("No leaks") || l.contains("bp count")) {
        eprintln!("{tag}: zdb: {}", l.trim());
    }
    let alloc = per_top_alloc(&dir, &pool);
    eprintln!("{tag}: allocated bytes per top-level vdev: {alloc:?}");
    assert!(alloc.len() >= 2, "{tag}: tops {alloc:?}");
    let last = alloc[alloc.len() - 1];
    assert!(last >= 2 << 20, "{tag}: the new top-level vdev got too little: {alloc:?}");

    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["import", "-N", "-d", dir_s, &pool]);
    d.ok("rzfs", &["mount", &pool, &mnt_s]);
    for (i, b) in before.iter().enumerate() {
        assert!(std::fs::read(mnt.join(format!("before{i}"))).unwrap() == *b, "{tag}: before{i}");
    }
    for (i, b) in after.iter().enumerate() {
        assert!(std::fs::read(mnt.join(format!("after{i}"))).unwrap() == *b, "{tag}: after{i}");
    }
    let hist = d.ok("rzpool", &["history", &pool]);
    assert!(hist.lines().any(|l| l.contains("rzpool add") && l.contains(&pool)), "{tag}: history:\n{hist}");
    // The long form names user, host and zone as zpool's ("[user 0 (root) on HOST:linux]").
    let long = d.ok("rzpool", &["history", "-l", &pool]);
    let recs: Vec<&str> = long.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert!(
        !recs.is_empty() && recs.iter().all(|l| l.contains(" [user ") && l.ends_with(":linux]")),
        "{long}"
    );
    d.ok("rzpool", &["export", &pool]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn add_stripe_mirror_raidz() {
    if !usable() {
        return;
    }
    add_case("stripe", &["-"], &[], &["-"]);
    add_case("mirror", &["mirror", "-", "-"], &[], &["mirror", "-", "-"]);
    add_case("raidz", &["raidz1", "-", "-", "-"], &[], &["raidz1", "-", "-", "-"]);
}

/// Top-level vdevs that differ: each block's allocated size depends on the vdev it lands on
/// (parity and padding of a raidz2, the 4 KiB sectors of an ashift-12 mirror), ditto copies
/// of metadata spanning both kinds; zdb must find every size right and no leak.
#[test]
fn add_mixed_layouts() {
    if !usable() {
        return;
    }
    add_case("mixed", &["mirror", "-", "-"], &["-f"], &["raidz2", "-", "-", "-"]);
    add_case("mixedz", &["raidz1", "-", "-", "-"], &[], &["mirror", "-", "-"]);
    // A pool created mixed (zpool -f) has no one replication level: anything may be added.
    add_case("createmix", &["-f", "mirror", "-", "-", "raidz2", "-", "-", "-"], &[], &["-"]);
    add_case("ashift", &["-"], &["--allow-ashift-mismatch", "-o", "ashift=12"], &["-"]);
}

/// A scratch directory with `n` blank devices, a daemon and a mount point for the log
/// tests; `None` (the test is skipped) without zdb or /dev/fuse.
fn log_setup(tag: &str, n: usize) -> Option<(PathBuf, Vec<String>, Daemon, PathBuf)> {
    if !usable() {
        eprintln!("SKIP {tag}: needs zdb and /dev/fuse");
        return None;
    }
    let dir = scratch(tag);
    let devs = common::pools::blank(&dir, tag, n);
    let d = Daemon::new(&format!("add{tag}"));
    let mnt = dir.join("mnt");
    Some((dir, devs, d, mnt))
}

/// Log vdevs: `create ... log mirror A B`, `add POOL log C`. They are listed under `logs`
/// by status, iostat and the import listing, count in no pool size, receive no block, and
/// the config says `is_log` as OpenZFS's does (checked through zdb -C and zdb -bcc).
/// `remove` takes them out, leaving holes (`hole_array`) that later imports and adds keep.
#[test]
fn log_vdevs() {
    let Some((dir, devs, d, mnt)) = log_setup("log", 5) else { return };
    let mnt_s = mnt.to_string_lossy().into_owned();
    let dry = d.ok(
        "rzpool",
        &["create", "-n", "addlog", "mirror", &devs[0], &devs[1], "log", "mirror", &devs[2], &devs[3]],
    );
    assert!(dry.ends_with(&format!("\tlogs\n\t  mirror\n\t    {}\n\t    {}\n", devs[2], devs[3])), "{dry}");
    let (code, _, err) = d.run("rzpool", &["create", "addlog", "log", &devs[0]]);
    assert_eq!(code, 1, "a pool of logs alone: {err}");
    d.ok(
        "rzpool",
        &[
            "create", "-m", &mnt_s, "addlog", "mirror", &devs[0], &devs[1], "log", "mirror", &devs[2],
            &devs[3],
        ],
    );
    let size = || -> u64 { d.ok("rzpool", &["list", "-Hp", "-o", "size", "addlog"]).trim().parse().unwrap() };
    let size0 = size();
    let dry = d.ok("rzpool", &["add", "-n", "addlog", "log", &devs[4]]);
    assert!(dry.contains("\tlogs\n\t  mirror\n") && dry.ends_with(&format!("\t  {}\n", devs[4])), "{dry}");
    d.ok("rzpool", &["add", "addlog", "log", &devs[4]]);
    assert_eq!(size(), size0, "a log vdev adds no pool space");
    let data: Vec<Vec<u8>> = (0..4).map(|i| noise(1_500_000, 300 + i)).collect();
    for (i, b) in data.iter().enumerate() {
        std::fs::write(mnt.join(format!("f{i}")), b).unwrap();
    }
    let st = d.ok("rzpool", &["status", "addlog"]);
    let logs = st.find("\tlogs\t\n").unwrap_or_else(|| panic!("no logs section:\n{st}"));
    let (main, tail) = st.split_at(logs);
    assert!(main.contains("mirror-0") && !main.contains(&devs[2]) && !main.contains(&devs[4]), "{st}");
    assert!(tail.contains("mirror-1") && tail.contains(&devs[3]) && tail.contains(&devs[4]), "{st}");
    // zpool list -v: the vdevs under the pool, top-level ones with their space, the log
    // class under a heading of dashes; -H: a vdev's row starts with a tab.
    let lv = d.ok("rzpool", &["list", "-v", "addlog"]);
    let rows: Vec<Vec<&str>> = lv.lines().map(|l| l.split_whitespace().collect()).collect();
    let row = |name: &str| rows.iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("no {name}:\n{lv}"));
    assert_eq!(row("mirror-0").len(), 10, "{lv}");
    assert!(row("mirror-0")[1].ends_with('M') && row(&devs[0])[1] == "-", "{lv}");
    assert_eq!(row("logs")[1..], ["-"; 9], "{lv}");
    let (logs_at, m1) = (lv.find("\nlogs ").unwrap(), lv.find("  mirror-1 ").unwrap());
    assert!(logs_at < m1 && lv.find(&format!("  {} ", devs[4])).unwrap() > logs_at, "{lv}");
    let lvh = d.ok("rzpool", &["list", "-vH", "addlog"]);
    assert!(lvh.contains(&format!("\n\t{}\t", devs[4])), "{lvh}");
    let io = d.ok("rzpool", &["iostat", "-v", "addlog"]);
    let heading = io.lines().position(|l| l.starts_with("logs ")).unwrap_or_else(|| panic!("{io}"));
    assert!(io.lines().skip(heading).any(|l| l.trim_start().starts_with("mirror-1")), "{io}");
    d.ok("rzpool", &["export", "addlog"]);
    zdb_check(&dir, "addlog");
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "addlog"]);
    assert_eq!(cfg.matches("is_log: 1").count(), 2, "{cfg}");
    let alloc = per_top_alloc(&dir, "addlog");
    assert!(alloc[0] > 6 << 20 && alloc[1] == 0 && alloc[2] == 0, "allocated per top-level vdev: {alloc:?}");
    let listing = d.ok("rzpool", &["import", "-d", dir.to_str().unwrap()]);
    assert!(listing.contains("\tlogs\t\n"), "{listing}");
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "addlog"]);
    for (i, b) in data.iter().enumerate() {
        assert!(std::fs::read(mnt.join(format!("f{i}"))).unwrap() == *b, "f{i}");
    }
    std::fs::write(mnt.join("again"), noise(3_000_000, 9)).unwrap();

    // `zpool remove`: a log vdev leaves a hole at its id; a leaf inside a log mirror or a
    // vdev holding data cannot be removed.
    let (code, _, err) = d.run("rzpool", &["remove", "addlog", &devs[2]]);
    assert!(code == 1 && err.contains("operation not supported on this type of pool"), "{err}");
    let (code, _, err) = d.run("rzpool", &["remove", "addlog", "mirror-0"]);
    assert!(code == 1 && err.contains("cannot remove devices that hold data"), "{err}");
    d.ok("rzpool", &["remove", "addlog", "mirror-1"]);
    d.ok("rzpool", &["remove", "addlog", &devs[4]]);
    let st = d.ok("rzpool", &["status", "addlog"]);
    assert!(!st.contains("logs") && !st.contains(&devs[2]) && !st.contains(&devs[4]), "{st}");
    // The removed devices carry OpenZFS's label of a removed device (txg 0), which
    // labelclear clears without -f.
    let label = run_zdb(&["-l", &devs[3]]);
    assert!(label.contains("txg: 0"), "{label}");
    d.ok("rzpool", &["labelclear", &devs[3]]);
    d.ok("rzpool", &["export", "addlog"]);
    zdb_check(&dir, "addlog");
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "addlog"]);
    assert!(cfg.contains("hole_array[0]: 1") && cfg.contains("hole_array[1]: 2"), "{cfg}");
    assert_eq!(cfg.matches("type: 'hole'").count(), 2, "{cfg}");
    if Path::new(ZHACK).exists() {
        // OpenZFS's own import takes the holes and writes the pool.
        openzfs_import(&dir, "addlog", "com.example:rzfs_holes");
        zdb_check(&dir, "addlog");
    }
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "addlog"]);
    d.ok("rzpool", &["add", "addlog", "log", &devs[3]]);
    std::fs::write(mnt.join("after-holes"), noise(2_000_000, 10)).unwrap();
    d.ok("rzpool", &["export", "addlog"]);
    zdb_check(&dir, "addlog");
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "addlog"]);
    for (i, b) in data.iter().enumerate() {
        assert!(std::fs::read(mnt.join(format!("f{i}"))).unwrap() == *b, "f{i} after the removals");
    }
    assert!(std::fs::read(mnt.join("after-holes")).unwrap() == noise(2_000_000, 10));
    let st = d.ok("rzpool", &["status", "addlog"]);
    assert!(st.contains("\tlogs\t\n") && st.contains(&devs[3]), "{st}");
    d.ok("rzpool", &["export", "addlog"]);
}

/// A log vdev whose device fails every write and flush: the pool's own blocks are not there,
/// so the pool keeps syncing (labels and uberblocks reach the other vdevs), status blames
/// the log device and says DEGRADED, and after export zdb -bcc is clean and the files read
/// back (OpenZFS counts good label writes over all vdevs and does not suspend for a log).
#[test]
fn failing_log_vdev_does_not_stop_the_pool() {
    let Some((dir, devs, d, mnt)) = log_setup("logfail", 3) else { return };
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok("rzpool", &["create", "-m", &mnt_s, "logfail", "mirror", &devs[0], &devs[1], "log", &devs[2]]);
    d.ok("rzinject", &["-d", &devs[2], "-e", "io", "-T", "write", "logfail"]);
    d.ok("rzinject", &["-d", &devs[2], "-e", "io", "-T", "flush", "logfail"]);
    let data = noise(3_000_000, 77);
    std::fs::write(mnt.join("f"), &data).unwrap();
    d.ok("rzpool", &["sync", "logfail"]);
    d.ok("rzpool", &["set", "comment=after the failure", "logfail"]);
    d.ok("rzpool", &["sync", "logfail"]);
    let st = d.ok("rzpool", &["status", "logfail"]);
    assert!(st.contains(" state: DEGRADED"), "{st}");
    let row = st.lines().find(|l| l.contains(devs[2].as_str())).unwrap_or_else(|| panic!("{st}"));
    let writes: u64 = row.split_whitespace().nth(3).unwrap().parse().unwrap_or(0);
    assert!(writes > 0, "the log device's write errors are counted: {st}");
    d.ok("rzinject", &["-c", "all"]);
    d.ok("rzpool", &["export", "logfail"]);
    zdb_check(&dir, "logfail");
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "logfail"]);
    assert!(std::fs::read(mnt.join("f")).unwrap() == data);
    let comment = d.ok("rzpool", &["get", "-H", "-o", "value", "comment", "logfail"]);
    assert_eq!(comment.trim(), "after the failure");
    d.ok("rzpool", &["export", "logfail"]);
}

#[test]
fn add_refusals_and_dry_run() {
    if !usable() {
        return;
    }
    let dir = scratch("neg");
    let devs = common::pools::blank(&dir, "d", 6);
    let d = Daemon::new("neg");
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["create", "-o", "ashift=9", "-m", "none", "addneg", "mirror", &devs[0], &devs[1]]);

    // zpool's replication check: refused unless -f or --allow-replication-mismatch says so
    // (then the pool takes it: see add_mixed_layouts).
    let (code, _, err) = d.run("rzpool", &["add", "addneg", "raidz2", &devs[2], &devs[3], &devs[4]]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "use '-f' to override the following errors:\nmismatched replication level: pool and new vdev with different redundancy"
        ),
        "{err}"
    );
    for flag in ["-f", "--allow-replication-mismatch"] {
        d.ok("rzpool", &["add", "-n", flag, "addneg", "raidz2", &devs[2], &devs[3], &devs[4]]);
    }
    // A raidz1 next to 2-way mirrors has the same redundancy: zpool accepts it as it is.
    d.ok("rzpool", &["add", "-n", "addneg", "raidz1", &devs[2], &devs[3], &devs[4]]);
    let (code, _, err) = d.run("rzpool", &["add", "addneg", &devs[2]]);
    assert_eq!(code, 1);
    assert!(err.contains("pool uses mirror and new vdev is file"), "{err}");
    let (code, _, err) = d.run("rzpool", &["add", "addneg", "mirror", &devs[2], &devs[3], &devs[4]]);
    assert_eq!(code, 1);
    assert!(err.contains("pool uses 2-way mirror and new vdev uses 3-way mirror"), "{err}");
    let (code, _, err) = d.run("rzpool", &["add", "addneg", "log", "raidz1", &devs[2], &devs[3]]);
    assert_eq!(code, 1);
    assert!(err.contains("unsupported 'log' device: raidz"), "{err}");
    let (code, _, err) = d.run("rzpool", &["add", "addneg", "mirror", &devs[0], &devs[2]]);
    assert_eq!(code, 1);
    assert!(err.contains("is part of active pool 'addneg'"), "{err}");
    let (code, _, err) = d.run("rzpool", &["add", "addneg", "mirror", &devs[2], &devs[2]]);
    assert_eq!(code, 1);
    assert!(err.contains("a device may be used only once"), "{err}");

    // The ashift pool property: what `create -o` gave, then `set`; new vdevs get it (or
    // `add -o ashift=`); one that differs from the pool's needs --allow-ashift-mismatch.
    let ashift = || d.ok("rzpool", &["get", "-H", "-o", "value,source", "ashift", "addneg"]);
    assert_eq!(ashift(), "9\tlocal\n");
    let (code, _, err) = d.run("rzpool", &["set", "ashift=17", "addneg"]);
    assert!(code != 0 && err.contains("only values between 9 and 16 are allowed"), "{err}");
    let (code, _, err) = d.run("rzpool", &["add", "-o", "ashift=12", "addneg", "mirror", &devs[2], &devs[3]]);
    assert!(
        code != 0 && err.contains("adding devices with different physical sector sizes is not allowed"),
        "{err}"
    );
    d.ok("rzpool", &["set", "ashift=12", "addneg"]);
    assert_eq!(ashift(), "12\tlocal\n");
    d.ok("rzpool", &["add", "-n", "--allow-ashift-mismatch", "addneg", "mirror", &devs[2], &devs[3]]);
    let (code, _, err) = d.run("rzpool", &["add", "-o", "copies=2", "addneg", "mirror", &devs[2], &devs[3]]);
    assert!(code != 0 && err.contains("only ashift"), "{err}");
    d.ok("rzpool", &["set", "ashift=0", "addneg"]);

    let out = d.ok("rzpool", &["add", "-n", "addneg", "mirror", &devs[2], &devs[3]]);
    let want = format!(
        "would update 'addneg' to the following configuration:\n\n\taddneg\n\t  mirror-0\n\t    {}\n\t    {}\n\t  mirror\n\t    {}\n\t    {}\n",
        devs[0], devs[1], devs[2], devs[3]
    );
    assert_eq!(out, want);
    let st = d.ok("rzpool", &["status", "addneg"]);
    assert!(!st.contains(devs[2].as_str()), "{st}");
    d.ok("rzpool", &["export", "addneg"]);
    // -n wrote nothing: the devices are still all zeros where labels would go, and the
    // pool imports with one top-level vdev.
    let mut head = Vec::new();
    std::fs::File::open(&devs[2]).unwrap().take(4 << 20).read_to_end(&mut head).unwrap();
    assert!(head.len() == 4 << 20 && head.iter().all(|&b| b == 0), "-n wrote to {}", devs[2]);
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "addneg"]);
    let st = d.ok("rzpool", &["status", "addneg"]);
    assert!(st.contains("mirror-0") && !st.contains("mirror-1"), "{st}");
    d.ok("rzpool", &["export", "addneg"]);
    zdb_check(&dir, "addneg");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A loop device (and, when given, `swapon`) undone however the test ends.
struct Loop {
    dev: String,
    swap: bool,
}

impl Loop {
    fn attach(file: &Path) -> Option<Loop> {
        let o = std::process::Command::new("losetup").args(["-f", "--show"]).arg(file).output().ok()?;
        o.status
            .success()
            .then(|| Loop { dev: String::from_utf8_lossy(&o.stdout).trim().to_string(), swap: false })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if self.swap {
            let _ = std::process::Command::new("swapoff").arg(&self.dev).status();
        }
        let _ = std::process::Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// A block device with a file system on it is refused without -f (OpenZFS asks libblkid;
/// rzfs reads the signatures), and one held by another user (active swap) even with -f,
/// also for -n. Needs root, losetup and mkfs.ext4; swap only where swapon works.
#[test]
fn create_refuses_used_block_devices() {
    let have =
        |t: &str| std::process::Command::new("which").arg(t).output().is_ok_and(|o| o.status.success());
    if !usable() || !have("losetup") || !have("mkfs.ext4") || !have("mkswap") {
        eprintln!("create_refuses_used_block_devices: needs losetup, mkfs.ext4, mkswap; skipped");
        return;
    }
    let dir = scratch("blk");
    let (f1, f2) = (dir.join("f1"), dir.join("f2"));
    for f in [&f1, &f2] {
        std::fs::File::create(f).unwrap().set_len(128 << 20).unwrap();
    }
    assert!(std::process::Command::new("mkfs.ext4").arg("-q").arg(&f1).status().unwrap().success());
    let Some(l1) = Loop::attach(&f1) else {
        eprintln!("create_refuses_used_block_devices: no loop device; skipped");
        return;
    };
    let d = Daemon::new("blk");
    let (code, _, err) = d.run("rzpool", &["create", "-m", "none", "bk", &l1.dev]);
    assert!(code != 0 && err.contains(&format!("{} contains a filesystem of type 'ext4'", l1.dev)), "{err}");
    assert!(err.contains("use '-f' to override"), "{err}");
    d.ok("rzpool", &["create", "-f", "-m", "none", "bk", &l1.dev]);
    d.ok("rzpool", &["destroy", "bk"]);
    let quiet = |c: &mut std::process::Command| {
        c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status()
    };
    assert!(quiet(std::process::Command::new("mkswap").arg(&f2)).unwrap().success());
    let Some(mut l2) = Loop::attach(&f2) else { return };
    if !quiet(std::process::Command::new("swapon").arg(&l2.dev)).is_ok_and(|s| s.success()) {
        eprintln!("create_refuses_used_block_devices: swapon refused here; the busy case is skipped");
        return;
    }
    l2.swap = true;
    for args in [vec!["create", "-f", "bk2"], vec!["create", "-n", "-f", "bk2"], vec!["create", "bk2"]] {
        let mut args = args;
        args.push(&l2.dev);
        let (code, _, err) = d.run("rzpool", &args);
        assert!(
            code != 0 && err.contains(&format!("{} is in use and contains a swap filesystem", l2.dev)),
            "{args:?}: {err}"
        );
    }
}

/// Vdev properties and the per-vdev ZAPs that hold them, as OpenZFS lays them out: every
/// leaf and top-level vdev gets a ZAP listed in the AVZ, the root one with vdev_zaps_v2
/// (which becomes active), only in the MOS config; a top ZAP follows its top-level vdev
/// through attach, replace and detach. `zpool get all POOL root` lists OpenZFS 2.3's 50
/// properties (ZTS vdev_get_001_pos); comment and user properties are set, read back after
/// export and import, and an empty value removes a user property (ZTS
/// zpool_set_clear_userprop); zdb checks the pool (MOS object leaks included) and reads
/// the properties from the ZAPs itself.
#[test]
fn vdev_properties() {
    if zdb().is_none() {
        return;
    }
    let dir = scratch("vprops");
    let devs = common::pools::blank(&dir, "d", 5);
    let d = Daemon::new("vprops");
    let get = |args: &[&str]| d.ok("rzpool", &[&["get", "-Hp", "-o", "value,source"], args].concat());
    d.ok("rzpool", &["create", "-m", "none", "vz", &devs[0]]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "all", "vz", "root"]).lines().count(), 50);
    assert_eq!(get(&["feature@vdev_zaps_v2", "vz"]), "active\tlocal\n");
    d.ok("rzpool", &["set", "comment=openzfs", "vz", "root"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "comment", "vz", "root"]), "openzfs\n");
    d.ok("rzpool", &["set", "cool:vdev=goodbye", "vz", "root"]);
    assert_eq!(get(&["cool:vdev", "vz", "root"]), "goodbye\tlocal\n");
    d.ok("rzpool", &["set", "cool:vdev=", "vz", "root"]);
    assert_eq!(get(&["cool:vdev", "vz", "root"]), "-\tdefault\n");
    // The top-level disk's properties stay with the top-level vdev when it becomes a mirror,
    // is replaced, and collapses back to one disk.
    d.ok("rzpool", &["set", "org:top=t0", "vz", &devs[0]]);
    d.ok("rzpool", &["set", "io_n=10", "vz", &devs[0]]);
    d.ok("rzpool", &["attach", "-w", "vz", &devs[0], &devs[1]]);
    assert_eq!(get(&["org:top,io_n", "vz", "mirror-0"]), "t0\tlocal\n10\tlocal\n");
    d.ok("rzpool", &["set", "org:leaf=l1", "vz", &devs[1]]);
    d.ok("rzpool", &["replace", "-w", "vz", &devs[1], &devs[2]]);
    d.ok("rzpool", &["detach", "vz", &devs[0]]);
    assert_eq!(get(&["org:top,org:leaf,failfast", "vz", &devs[2]]), "t0\tlocal\n-\tdefault\non\tdefault\n");
    d.ok("rzpool", &["add", "vz", &devs[3]]);
    d.ok("rzpool", &["set", "failfast=off", "vz", &devs[3]]);
    // Refusals: read-only and unknown properties, unknown vdevs, bad values.
    for (args, why) in [
        (vec!["set", "size=1", "vz", "root"], "'size' is readonly"),
        (vec!["set", "nosuch=1", "vz", "root"], "invalid property 'nosuch'"),
        (vec!["set", "failfast=maybe", "vz", "root"], "'failfast' must be one of"),
        (vec!["set", "comment=x", "vz", "nodev"], "device not in pool"),
    ] {
        let (code, _, err) = d.run("rzpool", &args);
        assert!(code != 0 && err.contains(why), "{args:?}: {err}");
    }
    let (code, _, err) = d.run("rzpool", &["get", "size", "vz", "nodev"]);
    assert!(code == 2 && err.contains("Expected a list of vdevs in \"vz\""), "{err}");
    let names = d.ok("rzpool", &["get", "-H", "-o", "name", "guid", "vz", "all-vdevs"]);
    assert_eq!(names.lines().count(), 3, "{names}");
    d.ok("rzpool", &["export", "vz"]);
    // zdb: no leaked MOS objects, the ZAP numbers only in the MOS config.
    zdb_check(&dir, "vz");
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "vz"]);
    for key in ["com.delphix:has_per_vdev_zaps", "com.klarasystems:vdev_zap_root", "com.delphix:vdev_zap_top"]
    {
        assert!(cfg.contains(key), "{key} missing from the MOS config:\n{cfg}");
    }
    assert_eq!(cfg.matches("com.delphix:vdev_zap_top").count(), 2, "{cfg}");
    assert_eq!(cfg.matches("com.delphix:vdev_zap_leaf").count(), 2, "{cfg}");
    let label = run_zdb(&["-l", &devs[2]]);
    assert!(!label.contains("vdev_zap"), "labels carry no vdev ZAPs:\n{label}");
    let root_zap: String = cfg
        .lines()
        .find(|l| l.contains("com.klarasystems:vdev_zap_root"))
        .and_then(|l| l.rsplit(": ").next())
        .unwrap()
        .trim()
        .to_string();
    let zap = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "vz", &root_zap]);
    assert!(zap.contains("comment = openzfs"), "{zap}");
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "vz"]);
    assert_eq!(get(&["comment", "vz", "root"]), "openzfs\tlocal\n");
    assert_eq!(get(&["org:top,failfast", "vz", &devs[2]]), "t0\tlocal\non\tdefault\n");
    assert_eq!(get(&["failfast", "vz", &devs[3]]), "off\tlocal\n");
    d.ok("rzpool", &["destroy", "vz"]);
}

/// The sector shift of vdevs made of files follows OpenZFS's tunables when the daemon's
/// tunables directory sets them (`vdev_file_physical_ashift`, read at each create and add,
/// bounded by `zfs_vdev_max_auto_ashift`), as ZTS's add-o_ashift checks; without them rzfs
/// gives files 4 KiB sectors. zdb reads every label's ashift and checks the pool.
#[test]
fn file_ashift_tunables() {
    if !usable() {
        eprintln!("SKIP file_ashift_tunables: needs zdb and /dev/fuse");
        return;
    }
    let dir = scratch("ashift-tun");
    let tun = dir.join("tunables");
    std::fs::create_dir_all(&tun).unwrap();
    let physical = tun.join("vdev_file_physical_ashift");
    let devs: Vec<String> = (0..2)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(128 << 20).unwrap();
            p.to_str().unwrap().to_string()
        })
        .collect();
    let label_ashift = |dev: &str| -> Vec<String> {
        let out = run_zdb(&["-l", dev]);
        let mut v: Vec<String> =
            out.lines().filter_map(|l| l.trim().strip_prefix("ashift: ")).map(str::to_string).collect();
        v.dedup();
        v
    };
    let dir_s = dir.to_str().unwrap();

    // No tunables: rzfs's 4 KiB for files.
    let d = Daemon::new("ashift-none");
    d.ok("rzpool", &["create", "-m", "none", "ashnone", &devs[0]]);
    d.ok("rzpool", &["add", "ashnone", &devs[1]]);
    d.ok("rzpool", &["export", "ashnone"]);
    assert_eq!(label_ashift(&devs[0]), ["12"]);
    assert_eq!(label_ashift(&devs[1]), ["12"]);
    zdb_check(&dir, "ashnone");
    d.ok("rzpool", &["labelclear", "-f", &devs[0]]);
    d.ok("rzpool", &["labelclear", "-f", &devs[1]]);
    drop(d);

    std::fs::write(tun.join("vdev_file_logical_ashift"), "9\n").unwrap();
    std::fs::write(&physical, "9\n").unwrap();
    let d = Daemon::with_env("ashift-tun", &[("RZFS_TUNABLES_DIR", tun.to_str().unwrap())]);
    // (physical shift set before the add, the shift the added vdev must get)
    for (set, want) in [(9, "9"), (12, "12"), (15, "9")] {
        std::fs::write(&physical, "9\n").unwrap();
        d.ok("rzpool", &["create", "-m", "none", "ashtun", &devs[0]]);
        std::fs::write(&physical, format!("{set}\n")).unwrap();
        let mut args = vec!["add"];
        if want != "9" {
            // Differs from the pool's first vdev: zpool's check applies.
            let (code, _, err) = d.run("rzpool", &["add", "ashtun", &devs[1]]);
            assert!(code != 0 && err.contains("different physical sector sizes"), "{set}: {err}");
            args.push("--allow-ashift-mismatch");
        }
        args.extend(["ashtun", devs[1].as_str()]);
        d.ok("rzpool", &args);
        d.ok("rzpool", &["export", "ashtun"]);
        assert_eq!(label_ashift(&devs[0]), ["9"], "physical {set}");
        assert_eq!(label_ashift(&devs[1]), [want], "physical {set}");
        zdb_check(&dir, "ashtun");
        d.ok("rzpool", &["import", "-N", "-d", dir_s, "ashtun"]);
        d.ok("rzpool", &["destroy", "ashtun"]);
        d.ok("rzpool", &["labelclear", "-f", &devs[0]]);
        d.ok("rzpool", &["labelclear", "-f", &devs[1]]);
    }
    // -o ashift still wins over the tunables.
    d.ok("rzpool", &["create", "-o", "ashift=13", "-m", "none", "ashtun", &devs[0]]);
    d.ok("rzpool", &["export", "ashtun"]);
    assert_eq!(label_ashift(&devs[0]), ["13"]);
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Cache devices: `create ... cache A`, `add POOL cache B`. They are listed under `cache` by
/// status, list -v and iostat -v, carry OpenZFS's aux label (`state: 4`, no pool name), are
/// recorded in the MOS's `l2cache` list (zdb -bcc finds no leak, OpenZFS's import opens
/// them), survive export and import, cannot be labelcleared while the pool has them, and
/// `remove` lets them go (their aux label then clears without -f).
#[test]
fn cache_devices() {
    let Some((dir, devs, d, mnt)) = log_setup("cache", 5) else { return };
    let mnt_s = mnt.to_string_lossy().into_owned();
    let dry = d.ok("rzpool", &["create", "-n", "addc", &devs[0], "cache", &devs[1], "spare", &devs[4]]);
    assert!(dry.ends_with(&format!("\tcache\n\t  {}\n\tspares\n\t  {}\n", devs[1], devs[4])), "{dry}");
    let (code, _, err) = d.run("rzpool", &["create", "addc", &devs[0], "cache"]);
    assert!(code != 0 && err.contains("cache requires at least 1 device"), "{err}");
    d.ok("rzpool", &["create", "-m", &mnt_s, "addc", &devs[0], "cache", &devs[1]]);
    let size = || -> u64 { d.ok("rzpool", &["list", "-Hp", "-o", "size", "addc"]).trim().parse().unwrap() };
    let size0 = size();
    let dry = d.ok("rzpool", &["add", "-n", "addc", "cache", &devs[2]]);
    assert!(dry.ends_with(&format!("\tcache\n\t  {}\n\t  {}\n", devs[1], devs[2])), "{dry}");
    d.ok("rzpool", &["add", "addc", "cache", &devs[2]]);
    assert_eq!(size(), size0, "a cache device adds no pool space");
    let (code, _, err) = d.run("rzpool", &["add", "addc", "cache", &devs[2]]);
    assert!(code == 1 && err.contains("already part of pool"), "{err}");
    let data: Vec<Vec<u8>> = (0..3).map(|i| noise(1_500_000, 400 + i)).collect();
    for (i, b) in data.iter().enumerate() {
        std::fs::write(mnt.join(format!("f{i}")), b).unwrap();
    }
    let rows = |st: &str| -> Vec<String> {
        let Some(at) = st.find("\tcache\n") else { return Vec::new() };
        st[at + 7..].lines().take_while(|l| l.starts_with("\t  ")).map(|l| l.trim().to_string()).collect()
    };
    let st = d.ok("rzpool", &["status", "addc"]);
    let r = rows(&st);
    assert_eq!(r.len(), 2, "{st}");
    assert!(r[0].starts_with(&devs[1]) && r[0].ends_with("ONLINE       0     0     0"), "{st}");
    let lv = d.ok("rzpool", &["list", "-v", "addc"]);
    let heading = lv.find("\ncache ").unwrap_or_else(|| panic!("{lv}"));
    assert!(lv[heading..].contains(&format!("  {} ", devs[2])), "{lv}");
    let io = d.ok("rzpool", &["iostat", "-v", "addc"]);
    let at = io.lines().position(|l| l.starts_with("cache ")).unwrap_or_else(|| panic!("{io}"));
    assert!(io.lines().nth(at + 1).is_some_and(|l| l.trim_start().starts_with(&devs[1])), "{io}");
    // In use: labelclear refuses, with or without -f.
    for f in [&[][..], &["-f"][..]] {
        let mut args = vec!["labelclear"];
        args.extend_from_slice(f);
        args.push(&devs[1]);
        let (code, _, err) = d.run("rzpool", &args);
        assert!(code == 1 && err.contains("L2CACHE"), "{err}");
    }
    let label = run_zdb(&["-l", &devs[1]]);
    assert!(label.contains("state: 4") && !label.contains("name:"), "{label}");
    d.ok("rzpool", &["export", "addc"]);
    zdb_check(&dir, "addc");
    if Path::new(ZHACK).exists() {
        // OpenZFS's own import loads the list and opens the devices.
        openzfs_import(&dir, "addc", "com.example:rzfs_cache");
        zdb_check(&dir, "addc");
    }
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "addc"]);
    assert_eq!(rows(&d.ok("rzpool", &["status", "addc"])).len(), 2);
    for (i, b) in data.iter().enumerate() {
        assert!(std::fs::read(mnt.join(format!("f{i}"))).unwrap() == *b, "f{i}");
    }
    // Removal: the device goes from the list; its aux label stays for labelclear.
    d.ok("rzpool", &["remove", "addc", &devs[1]]);
    let st = d.ok("rzpool", &["status", "addc"]);
    assert_eq!(rows(&st).len(), 1, "{st}");
    assert!(!st.contains(&devs[1]), "{st}");
    d.ok("rzpool", &["labelclear", &devs[1]]);
    let (zdb_bin, lib) = zdb().unwrap();
    let cleared = std::process::Command::new(zdb_bin)
        .args(["-lq", &devs[1]])
        .env("LD_LIBRARY_PATH", lib)
        .output()
        .unwrap();
    assert!(!cleared.status.success(), "zdb -lq still finds a label after labelclear");
    // A missing cache device leaves the pool ONLINE, listed UNAVAIL.
    d.ok("rzpool", &["export", "addc"]);
    std::fs::remove_file(&devs[2]).unwrap();
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "addc"]);
    let st = d.ok("rzpool", &["status", "addc"]);
    assert!(st.contains("state: ONLINE") && rows(&st)[0].contains("UNAVAIL"), "{st}");
    d.ok("rzpool", &["remove", "addc", &devs[2]]);
    assert!(rows(&d.ok("rzpool", &["status", "addc"])).is_empty());
    d.ok("rzpool", &["export", "addc"]);
    zdb_check(&dir, "addc");
}

/// Drops the kernel's page cache of `path` (FUSE pages are clean once read), so that the
/// next read reaches the daemon.
fn drop_page_cache(path: &Path) {
    use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    posix_fadvise(f.as_raw_fd(), 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED)
        .unwrap_or_else(|e| panic!("fadvise {}: {e}", path.display()));
}

/// The cache section of `zpool iostat -vp`: (alloc, read ops, write ops) per device.
fn cache_io(d: &Daemon, pool: &str) -> Vec<(u64, u64, u64)> {
    let io = d.ok("rzpool", &["iostat", "-vp", pool]);
    let lines: Vec<&str> = io.lines().collect();
    let Some(at) = lines.iter().position(|l| l.starts_with("cache ")) else { return Vec::new() };
    lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].parse().unwrap_or(0), w[3].parse().unwrap_or(0), w[4].parse().unwrap_or(0))
        })
        .collect()
}

/// The cache device serves reads: with a 1 MiB ARC, files read once are written to the
/// cache device (iostat counts the writes and the space), and read again they come from it
/// (its read count grows, the files are identical). Noise written over the cache device's
/// ring costs nothing but speed: every copy from it is verified, the files still read back
/// right from the pool. `secondarycache=none` keeps a file's blocks off it, `all` lets them
/// go. zdb is clean after.
#[test]
fn cache_devices_serve_reads() {
    if !usable() {
        eprintln!("SKIP cache_devices_serve_reads: needs zdb and /dev/fuse");
        return;
    }
    let dir = scratch("l2read");
    let devs = common::pools::blank(&dir, "l2read", 2);
    let d = Daemon::with_env("addl2read", &[("RZFS_ARC_MAX", "1048576")]);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "l2r", &devs[0], "cache", &devs[1]]);
    d.ok("rzfs", &["set", "compression=off", "l2r"]);
    let data: Vec<Vec<u8>> = (0..4).map(|i| noise(1_500_000, 500 + i)).collect();
    for (i, b) in data.iter().enumerate() {
        std::fs::write(mnt.join(format!("f{i}")), b).unwrap();
    }
    d.ok("rzpool", &["export", "l2r"]);
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "l2r"]);
    let total: u64 = data.iter().map(|b| b.len() as u64).sum();
    let read_all = |what: &str| {
        for (i, b) in data.iter().enumerate() {
            let p = mnt.join(format!("f{i}"));
            drop_page_cache(&p);
            assert!(std::fs::read(&p).unwrap() == *b, "f{i} {what}");
        }
    };
    read_all("cold");
    // The feeder writes behind the reads: wait until the blocks are on the cache device.
    let t0 = std::time::Instant::now();
    let mut io = cache_io(&d, "l2r");
    while io.first().is_none_or(|c| c.0 < total) && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        io = cache_io(&d, "l2r");
    }
    let (alloc, reads0, writes) = io[0];
    assert!(alloc >= total && writes >= 4, "cache device after a cold read: {io:?}");
    read_all("from the cache device");
    let (_, reads1, _) = cache_io(&d, "l2r")[0];
    eprintln!("cache device: {alloc} bytes, {writes} writes; reads {reads0} -> {reads1}");
    assert!(reads1 >= reads0 + 40, "second read: {reads0} -> {reads1} cache reads");
    // Noise over the ring: the copies there fail verification and the pool serves them.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&devs[1]).unwrap();
        let start = (4 << 20) + 4096;
        f.write_all_at(&noise(8 << 20, 77), start).unwrap();
        f.sync_all().unwrap();
    }
    read_all("over a cache device full of noise");
    let st = d.ok("rzpool", &["status", "-x", "l2r"]);
    assert!(st.contains("healthy"), "{st}");
    // secondarycache=none: the file's blocks stay off the cache device; =all: they go.
    d.ok("rzfs", &["set", "secondarycache=none", "l2r"]);
    let g = noise(1_500_000, 510);
    std::fs::write(mnt.join("g"), &g).unwrap();
    d.ok("rzpool", &["export", "l2r"]);
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "l2r"]);
    let settle = |min: u64| {
        let t0 = std::time::Instant::now();
        let mut a = cache_io(&d, "l2r")[0].0;
        while a < min && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            a = cache_io(&d, "l2r")[0].0;
        }
        a
    };
    let read_g = || {
        drop_page_cache(&mnt.join("g"));
        assert!(std::fs::read(mnt.join("g")).unwrap() == g);
    };
    read_g();
    // Nothing to wait for but what the feeder may still have queued.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let none = cache_io(&d, "l2r")[0].0;
    assert!(none < 1 << 20, "secondarycache=none still cached {none} bytes");
    d.ok("rzfs", &["set", "secondarycache=all", "l2r"]);
    read_g();
    let all = settle(none + 1_500_000);
    assert!(all >= none + 1_500_000, "secondarycache=all: {none} -> {all} bytes");
    d.ok("rzpool", &["export", "l2r"]);
    zdb_check(&dir, "l2r");
}

/// A log device gone while the pool was exported (ZTS `import_log_missing`): import refuses
/// and names it, `import -m` goes on without it (DEGRADED, the log UNAVAIL, cache and spare
/// still listed, files intact and writable), and `remove` of the missing log makes the pool
/// whole again: a plain import then works, zdb is clean.
#[test]
fn import_with_a_missing_log_device() {
    let Some((dir, devs, d, mnt)) = log_setup("mlog", 4) else { return };
    let mnt_s = mnt.to_string_lossy().into_owned();
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["create", "-m", &mnt_s, "mlog", &devs[0]]);
    d.ok("rzpool", &["add", "mlog", "cache", &devs[1], "spare", &devs[2], "log", &devs[3]]);
    let data = noise(2_000_000, 600);
    std::fs::write(mnt.join("f"), &data).unwrap();
    d.ok("rzpool", &["export", "mlog"]);
    // Out of the search directory (a subdirectory is not searched).
    let away = dir.join("away");
    std::fs::create_dir_all(&away).unwrap();
    std::fs::rename(&devs[3], away.join("log")).unwrap();
    let (code, _, err) = d.run("rzpool", &["import", "-d", dir_s, "mlog"]);
    assert!(code == 1 && err.contains("use '-m'") && err.contains(&devs[3]), "{code} {err}");
    d.ok("rzpool", &["import", "-m", "-d", dir_s, "mlog"]);
    let st = d.ok("rzpool", &["status", "-v", "mlog"]);
    assert!(st.contains("state: DEGRADED") && st.contains(&devs[1]) && st.contains(&devs[2]), "{st}");
    // libzfs's words for a device that is not there (ZPOOL_STATUS_MISSING_DEV_R).
    assert!(st.contains("could not be opened") && st.contains("ZFS-8000-2Q"), "{st}");
    let logs = st.find("\tlogs").unwrap_or_else(|| panic!("{st}"));
    assert!(st[logs..].lines().nth(1).is_some_and(|l| l.contains(&devs[3]) && l.contains("UNAVAIL")), "{st}");
    assert!(std::fs::read(mnt.join("f")).unwrap() == data);
    std::fs::write(mnt.join("g"), noise(500_000, 601)).unwrap();
    d.ok("rzpool", &["export", "mlog"]);
    zdb_check(&dir, "mlog");
    d.ok("rzpool", &["import", "-m", "-d", dir_s, "mlog"]);
    d.ok("rzpool", &["remove", "mlog", &devs[3]]);
    let st = d.ok("rzpool", &["status", "mlog"]);
    assert!(st.contains("state: ONLINE") && !st.contains("logs"), "{st}");
    d.ok("rzpool", &["export", "mlog"]);
    d.ok("rzpool", &["import", "-d", dir_s, "mlog"]);
    assert!(std::fs::read(mnt.join("g")).unwrap() == noise(500_000, 601));
    d.ok("rzpool", &["export", "mlog"]);
    zdb_check(&dir, "mlog");
}

/// `zpool status` tells a device that is gone from one whose path holds something else, in
/// libzfs's words: a mirror side replaced by a blank file of the same name is "label is
/// missing or invalid" (ZFS-8000-4J), a side removed "could not be opened" (ZFS-8000-2Q).
#[test]
fn status_tells_missing_from_unlabelled() {
    let Some((dir, devs, d, _mnt)) = log_setup("unlab", 2) else { return };
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["create", "-m", "none", "unlab", "mirror", &devs[0], &devs[1]]);
    d.ok("rzpool", &["export", "unlab"]);
    std::fs::remove_file(&devs[1]).unwrap();
    std::fs::File::create(&devs[1]).unwrap().set_len(128 << 20).unwrap();
    d.ok("rzpool", &["import", "-d", dir_s, "unlab"]);
    let st = d.ok("rzpool", &["status", "unlab"]);
    assert!(st.contains("label is missing or") && st.contains("ZFS-8000-4J"), "{st}");
    d.ok("rzpool", &["export", "unlab"]);
    std::fs::remove_file(&devs[1]).unwrap();
    d.ok("rzpool", &["import", "-d", dir_s, "unlab"]);
    let st = d.ok("rzpool", &["status", "unlab"]);
    assert!(st.contains("could not be opened") && st.contains("ZFS-8000-2Q"), "{st}");
    d.ok("rzpool", &["export", "unlab"]);
    zdb_check(&dir, "unlab");
}
