//! # One owner per pool, honest exports, failing devices through the daemon
//!
//! End to end through private rzfsd instances and FUSE mounts:
//! * [`busy_export_and_unmount_are_refused`]: a process inside a nested mount makes
//!   `rzfs unmount` and `rzpool export` fail with zfs's "pool or dataset is busy", leaving
//!   the pool imported and usable; once it leaves, export takes every mount down (deepest
//!   first) and zdb is clean.
//! * [`forced_export_fences_the_pool`]: `export -f` with a file open: later calls through the
//!   old mount fail, nothing more reaches the devices (their bytes do not change), and the
//!   pool imports again with what was synced.
//! * [`freeze_leaves_the_pool_as_a_crash_would`]: `zpool freeze`, then nothing reaches the
//!   devices; the export leaves the labels ACTIVE; the pool comes back as of the freeze.
//! * [`external_unmount_is_followed`]: after `umount` from outside, `rzfs mount` works again.
//! * [`mount_all_unmount_all_and_sync`]: `mount -a`, `unmount -a`, `zpool sync`; `unmount FS`
//!   takes the file systems mounted below FS down first.
//! * [`one_owner_per_pool`]: a second daemon cannot import a pool the first holds
//!   read-write (and its listing says so); a pool left ACTIVE by another host (another
//!   hostid) needs `-f`.
//! * [`altroot_prefixes_mountpoints`]: `-R` keeps a pool's `mountpoint=/etc`-style paths
//!   under the altroot.
//! * [`import_under_a_new_name`]: `import POOL NEWNAME` renames for good (labels too, as zdb
//!   sees), `-t` only in core.
//! * [`upgrade_and_status_notes`]: `zpool upgrade` and the status note of a pool lacking the
//!   features its `compatibility` asks for; `status -e`; `load_guid`; pool user properties.
//! * [`failing_devices_degrade_or_suspend`]: `rzinject` write errors: a mirror goes on
//!   DEGRADED with the leaf FAULTED; a single-disk pool suspends (failmode=continue: EIO at
//!   once; failmode=wait: `fsync` waits) and `rzpool clear` resumes it with nothing lost.
//!
//! Needs FUSE and root (skipped otherwise).

mod common;

use common::tools::*;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn skip() -> bool {
    if !fuse_usable() || zdb().is_none() {
        eprintln!("pool_owner: needs FUSE, root and zdb; skipped");
        return true;
    }
    false
}

fn sha_all(devs: &[String]) -> Vec<String> {
    devs.iter().map(|d| common::sha256_file(Path::new(d))).collect()
}

#[test]
fn busy_export_and_unmount_are_refused() {
    if skip() {
        return;
    }
    let dir = scratch("own-busy");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-busy");
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "busy", "mirror", &devs[0], &devs[1]]);
    d.ok("rzfs", &["create", "busy/a"]);
    d.ok("rzfs", &["create", "busy/a/b"]);
    std::fs::write(mnt.join("a/b/file"), b"hello").unwrap();
    // A process whose working directory is inside the deepest mount.
    let mut holder =
        std::process::Command::new("sleep").arg("600").current_dir(mnt.join("a/b")).spawn().unwrap();
    // Nor with -f, nor -fa: as OpenZFS on Linux (ZTS zfs_unmount_009_pos).
    for args in [&["unmount", "busy/a/b"][..], &["unmount", "-f", "busy/a/b"], &["unmount", "-fa"]] {
        let (rc, _, err) = d.run("rzfs", args);
        assert!(
            rc != 0 && err.contains("pool or dataset is busy"),
            "{args:?} of a busy dataset: rc {rc}: {err}"
        );
    }
    let (rc, _, err) = d.run("rzpool", &["export", "busy"]);
    assert!(rc != 0 && err.contains("busy"), "export of a busy pool: rc {rc}: {err}");
    // Nor is a busy file system destroyed, even with -f (OpenZFS on Linux).
    for args in [&["destroy", "busy/a/b"][..], &["destroy", "-f", "busy/a/b"], &["destroy", "-rf", "busy/a"]]
    {
        let (rc, _, err) = d.run("rzfs", args);
        assert!(rc != 0 && err.contains("busy"), "{args:?} of a busy dataset: rc {rc}: {err}");
    }
    assert_eq!(std::fs::read(mnt.join("a/b/file")).unwrap(), b"hello");
    // Still imported, mounted and writable.
    std::fs::write(mnt.join("a/b/after"), b"still here").unwrap();
    assert!(d.ok("rzpool", &["list", "-H", "-o", "name"]).contains("busy"));
    holder.kill().unwrap();
    holder.wait().unwrap();
    d.ok("rzpool", &["export", "busy"]);
    let left = mounts_under(&mnt);
    assert!(left.is_empty(), "export left mounts behind: {left:?}");
    zdb_check(&dir, "busy");
    // Everything written before the export is there after a new import.
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "busy"]);
    d.ok("rzfs", &["mount", "busy", mnt.to_str().unwrap()]);
    d.ok("rzfs", &["mount", "busy/a", mnt.join("a").to_str().unwrap()]);
    d.ok("rzfs", &["mount", "busy/a/b", mnt.join("a/b").to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("a/b/after")).unwrap(), b"still here");
    d.ok("rzpool", &["export", "busy"]);
    assert!(mounts_under(&mnt).is_empty());
}

#[test]
fn forced_export_fences_the_pool() {
    if skip() {
        return;
    }
    let dir = scratch("own-force");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-force");
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "fence", &devs[0]]);
    let mut f = std::fs::File::create(mnt.join("kept")).unwrap();
    f.write_all(b"synced before the export").unwrap();
    f.sync_all().unwrap();
    d.ok("rzpool", &["export", "-f", "fence"]);
    let before = sha_all(&devs);
    // The open file belongs to an aborted mount: writes fail, nothing reaches the pool.
    let late = f.write_all(b"after").and_then(|_| f.sync_all());
    assert!(late.is_err(), "a write through a fenced mount succeeded");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(sha_all(&devs), before, "the devices changed after a forced export");
    drop(f);
    assert!(mounts_under(&mnt).is_empty(), "forced export left a mount");
    zdb_check(&dir, "fence");
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "fence"]);
    d.ok("rzfs", &["mount", "fence", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("kept")).unwrap(), b"synced before the export");
    d.ok("rzpool", &["export", "fence"]);
}

/// `zpool freeze` (ZTS's way to leave a pool as a crash would): what was written before
/// the freeze is on disk, nothing after it reaches the devices, and the export leaves the
/// labels ACTIVE. The same host imports it again with what was there at the freeze; another
/// host (hostid) needs `-f`, as after a crash. zdb checks the result.
#[test]
fn freeze_leaves_the_pool_as_a_crash_would() {
    if skip() {
        return;
    }
    let dir = scratch("own-freeze");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::with_env("own-freeze", &[("RZFS_HOSTID", "0x1234abcd")]);
    let mnt = dir.join("mnt");
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "frz", &devs[0]]);
    std::fs::write(mnt.join("before"), b"written before the freeze").unwrap();
    let (rc, _, err) = d.run("rzpool", &["freeze", "nosuch"]);
    assert!(rc != 0 && err.contains("no such pool"), "{err}");
    d.ok("rzpool", &["freeze", "frz"]);
    let frozen = sha_all(&devs);
    // Changes go on in memory, and an fsync or `zpool sync` writes nothing.
    let mut f = std::fs::File::create(mnt.join("after")).unwrap();
    f.write_all(b"written after the freeze").unwrap();
    f.sync_all().unwrap();
    drop(f);
    d.ok("rzpool", &["sync", "frz"]);
    assert_eq!(std::fs::read(mnt.join("after")).unwrap(), b"written after the freeze");
    d.ok("rzpool", &["export", "frz"]);
    assert_eq!(sha_all(&devs), frozen, "a frozen pool wrote to its device");
    assert!(mounts_under(&mnt).is_empty(), "export of a frozen pool left a mount");
    let label = run_zdb(&["-l", &devs[0]]);
    assert!(label.contains("state: 0"), "labels say ACTIVE after a frozen export:\n{label}");
    // Another host must force it, as after a crash.
    let other = Daemon::with_env("own-freeze-b", &[("RZFS_HOSTID", "0xdeadbeef")]);
    let (rc, _, err) = other.run("rzpool", &["import", "-N", "-d", dir_s, "frz"]);
    assert!(rc != 0 && err.contains("previously in use from another system"), "{err}");
    drop(other);
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "frz"]);
    d.ok("rzfs", &["mount", "frz", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("before")).unwrap(), b"written before the freeze");
    assert!(!mnt.join("after").exists(), "a change after the freeze survived the export");
    d.ok("rzpool", &["export", "frz"]);
    zdb_check(&dir, "frz");
}

#[test]
fn external_unmount_is_followed() {
    if skip() {
        return;
    }
    let dir = scratch("own-ext");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-ext");
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "ext", &devs[0]]);
    std::fs::write(mnt.join("x"), b"x").unwrap();
    let st = std::process::Command::new("umount").arg(&mnt).status().unwrap();
    assert!(st.success());
    assert!(mounts_under(&mnt).is_empty());
    assert!(!d.ok("rzfs", &["mount"]).contains("ext"), "rzfs mount still lists the unmounted dataset");
    d.ok("rzfs", &["mount", "ext", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("x")).unwrap(), b"x");
    d.ok("rzpool", &["export", "ext"]);
}

#[test]
fn one_owner_per_pool() {
    if skip() {
        return;
    }
    let dir = scratch("own-two");
    let devs = files(&dir, 1, 128 << 20);
    let a = Daemon::new("own-two-a");
    let b = Daemon::new("own-two-b");
    let dir_s = dir.to_str().unwrap();
    a.ok("rzpool", &["create", "-m", "none", "twice", &devs[0]]);
    // A second daemon on this host: refused, even with -f, and the listing says why.
    let (rc, _, err) = b.run("rzpool", &["import", "-N", "-d", dir_s, "twice"]);
    assert!(rc != 0 && err.contains("in use"), "second importer: rc {rc}: {err}");
    let (rc, _, err) = b.run("rzpool", &["import", "-N", "-f", "-d", dir_s, "twice"]);
    assert!(rc != 0 && err.contains("in use"), "second importer with -f: rc {rc}: {err}");
    let listing = b.ok("rzpool", &["import", "-N", "-d", dir_s]);
    assert!(listing.contains("currently imported by another process"), "{listing}");
    a.ok("rzpool", &["export", "twice"]);
    // Another host (another hostid) imports it and dies with the pool ACTIVE.
    let other = Daemon::with_env("own-two-c", &[("RZFS_HOSTID", "0xdeadbeef")]);
    other.ok("rzpool", &["import", "-N", "-d", dir_s, "twice"]);
    drop(other); // kills its rzfsd: the labels still say ACTIVE, hostid deadbeef
    std::thread::sleep(Duration::from_millis(300));
    let listing = a.ok("rzpool", &["import", "-N", "-d", dir_s]);
    assert!(listing.contains("last accessed by another system"), "{listing}");
    let (rc, _, err) = a.run("rzpool", &["import", "-N", "-d", dir_s, "twice"]);
    assert!(
        rc != 0 && err.contains("previously in use from another system") && err.contains("deadbeef"),
        "{err}"
    );
    a.ok("rzpool", &["import", "-N", "-f", "-d", dir_s, "twice"]);
    a.ok("rzpool", &["export", "twice"]);
    zdb_check(&dir, "twice");
}

#[test]
fn altroot_prefixes_mountpoints() {
    if skip() {
        return;
    }
    let dir = scratch("own-alt");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-alt");
    let root = dir.join("alt");
    d.ok("rzpool", &["create", "-R", root.to_str().unwrap(), "-m", "/etc-like", "alt", &devs[0]]);
    let mp = d.ok("rzfs", &["get", "-H", "-o", "value", "mountpoint", "alt"]);
    assert_eq!(mp.trim(), root.join("etc-like").to_str().unwrap());
    assert!(!mounts_under(&root.join("etc-like")).is_empty(), "not mounted under the altroot");
    assert!(!Path::new("/etc-like").exists(), "mounted outside the altroot");
    assert_eq!(
        d.ok("rzpool", &["get", "-H", "-o", "value", "altroot", "alt"]).trim(),
        root.to_str().unwrap()
    );
    // ZTS's poolexists asks for `name`; a pool held read-write is not readonly.
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "name,readonly", "alt"]), "alt\noff\n");
    d.ok("rzpool", &["export", "alt"]);
    // With no pool, `list -H` prints nothing (scripts parse it); plain `list` says so.
    assert_eq!(d.ok("rzpool", &["list", "-H"]), "");
    assert_eq!(d.ok("rzpool", &["list"]), "no pools available\n");
    // An import with -R puts the mountpoint under the new root.
    let root2 = dir.join("alt2");
    d.ok("rzpool", &["import", "-N", "-R", root2.to_str().unwrap(), "-d", dir.to_str().unwrap(), "alt"]);
    d.ok("rzfs", &["mount", "alt"]);
    assert!(!mounts_under(&root2.join("etc-like")).is_empty());
    d.ok("rzpool", &["export", "alt"]);
    // An altroot implies cachefile=none, unless a cache file is asked for.
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["import", "-N", "-R", root2.to_str().unwrap(), "-d", dir_s, "alt"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "alt"]), "none\n");
    d.ok("rzpool", &["export", "alt"]);
    let cf = dir.join("alt.cache");
    let opt = format!("cachefile={}", cf.display());
    d.ok("rzpool", &["import", "-N", "-R", root2.to_str().unwrap(), "-o", &opt, "-d", dir_s, "alt"]);
    assert_eq!(
        d.ok("rzpool", &["get", "-H", "-o", "value", "cachefile", "alt"]),
        format!("{}\n", cf.display())
    );
    assert!(cf.exists());
    d.ok("rzpool", &["export", "alt"]);
    let (rc, _, err) = d.run("rzpool", &["import", "-N", "-o", "cachefile=relative", "-d", dir_s, "alt"]);
    assert!(rc != 0 && err.contains("must be an absolute path"), "{err}");
}

/// `zpool import POOL NEWNAME` renames the pool for good (datasets, snapshots and every
/// label follow; zdb finds it under the new name, clean); `-t` gives a temporary name that
/// the labels never see (the pool exports under its old name); bad names are refused.
#[test]
fn import_under_a_new_name() {
    if skip() {
        return;
    }
    let dir = scratch("own-rename");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-rename");
    let dir_s = dir.to_str().unwrap();
    let mnt = dir.join("m");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "old", "mirror", &devs[0], &devs[1]]);
    std::fs::write(mnt.join("f"), b"kept across renames").unwrap();
    d.ok("rzfs", &["create", "old/a"]);
    d.ok("rzfs", &["snapshot", "-r", "old@s1"]);
    d.ok("rzpool", &["export", "old"]);

    d.ok("rzpool", &["import", "-d", dir_s, "old", "new"]);
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "new\n");
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "all", "-o", "name"]), "new\nnew@s1\nnew/a\nnew/a@s1\n");
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"kept across renames");
    d.ok("rzfs", &["create", "new/b"]);
    d.ok("rzpool", &["export", "new"]);
    let listing = d.ok("rzpool", &["import", "-d", dir_s]);
    assert!(listing.contains("pool: new\n") && !listing.contains("pool: old"), "{listing}");
    let cfg = run_zdb(&["-e", "-p", dir_s, "-C", "new"]);
    assert!(cfg.contains("name: 'new'"), "{cfg}");
    assert!(zdb_check(&dir, "new").contains("No leaks"));

    // -t: in core only.
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "-t", "new", "tmp"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "tmp"]), "tmp\ntmp/a\ntmp/b\n");
    d.ok("rzfs", &["snapshot", "tmp/b@s2"]);
    d.ok("rzpool", &["export", "tmp"]);
    let listing = d.ok("rzpool", &["import", "-d", dir_s]);
    assert!(listing.contains("pool: new\n") && !listing.contains("pool: tmp"), "{listing}");
    assert!(zdb_check(&dir, "new").contains("No leaks"));

    for (args, want) in [
        (vec!["import", "-d", dir_s, "-t", "new"], "-t needs a new name"),
        (vec!["import", "-d", dir_s, "new", "9lives"], "does not begin with a letter"),
        (vec!["import", "-d", dir_s, "new", "mirror2"], "name is reserved"),
        (vec!["import", "-a", "-d", dir_s, "new"], "too many arguments"),
    ] {
        let (rc, _, err) = d.run("rzpool", &args);
        assert!(rc != 0 && err.contains(want), "{args:?}: {err}");
    }
    // Nothing was imported by the refusals.
    assert_eq!(d.ok("rzpool", &["list", "-H"]), "");
    d.ok("rzpool", &["import", "-d", dir_s, "new"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "new/b"]), "new/b@s2\n");
    d.ok("rzpool", &["export", "new"]);
}

/// `zpool upgrade` (listing, a pool, -a, -v, bad -V), the status note of a pool whose
/// `compatibility` asks for features it lacks, `status -e`, `load_guid` (new at each
/// import) and the read-only properties `get all` lists; zdb checks the features enabled.
#[test]
fn upgrade_and_status_notes() {
    if skip() {
        return;
    }
    let dir = scratch("own-upgrade");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-upgrade");
    let dir_s = dir.to_str().unwrap();
    d.ok(
        "rzpool",
        &["create", "-o", "compatibility=compat-2018", "-m", "none", "up", "mirror", &devs[0], &devs[1]],
    );
    const NOTE: &str = "Some supported and requested features are not enabled";
    assert!(!d.ok("rzpool", &["status", "up"]).contains(NOTE));
    let listing = d.ok("rzpool", &["upgrade"]);
    assert!(
        listing.contains("All pools are formatted using feature flags.") && listing.contains("\nup\n"),
        "{listing}"
    );
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "feature@sha512", "up"]), "disabled\n");

    d.ok("rzpool", &["set", "compatibility=compat-2020", "up"]);
    assert!(d.ok("rzpool", &["status", "up"]).contains(NOTE));
    let out = d.ok("rzpool", &["upgrade", "up"]);
    assert!(out.contains("Enabled the following features on 'up':\n") && out.contains("  sha512\n"), "{out}");
    assert!(!d.ok("rzpool", &["status", "up"]).contains(NOTE));
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "feature@sha512", "up"]), "enabled\n");
    let again = d.ok("rzpool", &["upgrade", "up"]);
    assert!(again.contains("Pool 'up' already has all supported and requested features enabled."), "{again}");
    assert!(d.ok("rzpool", &["upgrade", "-a"]).contains("Every feature flags pool already has all"));
    assert!(d.ok("rzpool", &["upgrade", "-v"]).contains("The following legacy versions are also supported"));
    for args in [vec!["upgrade", "-V", "29", "up"], vec!["upgrade", "-a", "up"], vec!["upgrade", "-v", "up"]]
    {
        assert_eq!(d.run("rzpool", &args).0, 2, "{args:?}");
    }

    // status -e: only what is not ONLINE (and what is above it); -s is accepted.
    d.ok("rzpool", &["offline", "up", &devs[1]]);
    let st = d.ok("rzpool", &["status", "-es", "up"]);
    assert!(
        st.contains(devs[1].as_str()) && !st.contains(devs[0].as_str()) && st.contains("mirror-0"),
        "{st}"
    );
    d.ok("rzpool", &["online", "up", &devs[1]]);
    // Repeated flags, as getopt takes them.
    d.ok("rzpool", &["history", "-lil", "up"]);

    let all = d.ok("rzpool", &["get", "-H", "-o", "property,value", "all", "up"]);
    for want in [
        "load_guid\t",
        "bcloneused\t0",
        "bcloneratio\t1.00x",
        "dedup_table_quota\tauto",
        "last_scrubbed_txg\t",
    ] {
        assert!(all.contains(want), "{want}: {all}");
    }
    // User properties: set, listed by `get all`, cleared by an empty value; limits.
    let long_name = format!("x:{}", "a".repeat(253));
    let long_value = "V".repeat(8191);
    d.ok("rzpool", &["set", "cool:pool=hello", "up"]);
    d.ok("rzpool", &["set", &format!("{long_name}=v"), "up"]);
    d.ok("rzpool", &["set", &format!("long:value={long_value}"), "up"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value,source", "cool:pool", "up"]), "hello\tlocal\n");
    assert_eq!(
        d.ok("rzpool", &["get", "-H", "-o", "value", "long:value", "up"]).trim_end(),
        long_value.as_str()
    );
    let listed = d.ok("rzpool", &["get", "-H", "-o", "property", "all", "up"]);
    assert!(listed.ends_with(&format!("cool:pool\nlong:value\n{long_name}\n")), "{listed}");
    for bad in [format!("x:{}=v", "a".repeat(254)), format!("long:value={long_value}V"), "Cool:pool=1".into()]
    {
        assert_eq!(d.run("rzpool", &["set", &bad, "up"]).0, 1, "{bad}");
    }
    d.ok("rzpool", &["set", "cool:pool=", "up"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value,source", "cool:pool", "up"]), "-\tdefault\n");

    let guid = |d: &Daemon| {
        d.ok("rzpool", &["get", "-H", "-o", "value", "load_guid", "up"]).trim().parse::<u64>().unwrap()
    };
    let first = guid(&d);
    assert_eq!(guid(&d), first, "load_guid changed within one import");
    d.ok("rzpool", &["export", "up"]);
    d.ok("rzpool", &["import", "-d", dir_s, "up"]);
    assert_ne!(guid(&d), first, "load_guid kept across imports");
    d.ok("rzpool", &["export", "up"]);
    let cfg = zdb_check(&dir, "up");
    assert!(!cfg.is_empty());
}

#[test]
fn failing_devices_degrade_or_suspend() {
    if skip() {
        return;
    }
    let dir = scratch("own-inject");
    let devs = files(&dir, 3, 128 << 20);
    let d = Daemon::new("own-inject");
    let m1 = dir.join("m1");
    let m2 = dir.join("m2");
    // A mirror keeps going on one side.
    d.ok("rzpool", &["create", "-m", m1.to_str().unwrap(), "mir", "mirror", &devs[0], &devs[1]]);
    d.ok("rzinject", &["-d", &devs[0], "-e", "io", "-T", "write", "mir"]);
    let mut f = std::fs::File::create(m1.join("a")).unwrap();
    f.write_all(&vec![7u8; 1 << 20]).unwrap();
    f.sync_all().expect("fsync on a mirror with one failing side");
    let st = d.ok("rzpool", &["status", "mir"]);
    assert!(st.contains("DEGRADED") && st.contains("FAULTED") && st.contains("too many errors"), "{st}");
    assert!(d.ok("rzinject", &[]).contains(&devs[0]));
    d.ok("rzinject", &["-c", "all"]);
    d.ok("rzpool", &["clear", "mir"]);
    assert!(d.ok("rzpool", &["status", "mir"]).contains("state: ONLINE"));
    // A single disk suspends; failmode=continue answers EIO at once.
    d.ok("rzpool", &["create", "-o", "failmode=continue", "-m", m2.to_str().unwrap(), "one", &devs[2]]);
    d.ok("rzpool", &["set", "failmode=continue", "one"]);
    let mut g = std::fs::File::create(m2.join("b")).unwrap();
    g.write_all(b"durable").unwrap();
    g.sync_all().unwrap();
    d.ok("rzinject", &["-d", &devs[2], "-e", "io", "-T", "write", "one"]);
    g.write_all(b" and pending").unwrap();
    let e = g.sync_all().expect_err("fsync with the only disk failing writes");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let st = d.ok("rzpool", &["status", "one"]);
    assert!(st.contains("SUSPENDED") && st.contains("zpool clear"), "{st}");
    assert!(g.write_all(b"x").and_then(|_| g.sync_all()).is_err(), "a suspended pool took a write");
    let (rc, _, _) = d.run("rzpool", &["clear", "one"]);
    assert!(rc != 0, "clear resumed a pool whose disk still fails");
    d.ok("rzinject", &["-c", "all"]);
    d.ok("rzpool", &["clear", "one"]);
    g.sync_all().expect("fsync after clear");
    // failmode=wait: fsync waits for clear instead of failing.
    d.ok("rzpool", &["set", "failmode=wait", "one"]);
    d.ok("rzinject", &["-d", &devs[2], "-e", "io", "-T", "write", "one"]);
    let p = m2.join("c");
    let waiter = std::thread::spawn(move || {
        let mut h = std::fs::File::create(p).unwrap();
        h.write_all(b"waited").unwrap();
        h.sync_all()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(!waiter.is_finished(), "fsync on a suspended failmode=wait pool returned");
    d.ok("rzinject", &["-c", "all"]);
    d.ok("rzpool", &["clear", "one"]);
    waiter.join().unwrap().expect("fsync after clear (failmode=wait)");
    drop((f, g));
    d.ok("rzpool", &["export", "mir"]);
    d.ok("rzpool", &["export", "one"]);
    zdb_check(&dir, "mir");
    zdb_check(&dir, "one");
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "one"]);
    d.ok("rzfs", &["mount", "one", m2.to_str().unwrap()]);
    assert_eq!(std::fs::read(m2.join("b")).unwrap(), b"durable and pending");
    assert_eq!(std::fs::read(m2.join("c")).unwrap(), b"waited");
    d.ok("rzpool", &["export", "one"]);
}

#[test]
fn a_failed_export_keeps_everything() {
    if skip() {
        return;
    }
    let dir = scratch("own-failexp");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-failexp");
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-o", "failmode=continue", "-m", mnt.to_str().unwrap(), "fx", &devs[0]]);
    // Written, not fsync'd: it lives in the open txg only.
    std::fs::write(mnt.join("pending"), b"not yet durable").unwrap();
    d.ok("rzinject", &["-d", &devs[0], "-e", "io", "-T", "write", "fx"]);
    let (rc, _, err) = d.run("rzpool", &["export", "fx"]);
    assert!(rc != 0, "export succeeded with a failing disk");
    assert!(err.contains("cannot export"), "{err}");
    assert!(
        d.ok("rzpool", &["list", "-H", "-o", "name"]).contains("fx"),
        "a failed export released the pool"
    );
    d.ok("rzinject", &["-c", "all"]);
    let _ = d.run("rzpool", &["clear", "fx"]);
    d.ok("rzpool", &["export", "fx"]);
    zdb_check(&dir, "fx");
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "fx"]);
    d.ok("rzfs", &["mount", "fx", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("pending")).unwrap(), b"not yet durable");
    d.ok("rzpool", &["export", "fx"]);
}

#[test]
fn a_panic_poisons_the_pool() {
    if skip() {
        return;
    }
    let dir = scratch("own-panic");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-panic");
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "pp", &devs[0]]);
    let mut f = std::fs::File::create(mnt.join("durable")).unwrap();
    f.write_all(b"synced").unwrap();
    f.sync_all().unwrap();
    drop(f);
    d.ok("rzinject", &["-p", "any", "pp"]);
    let e = std::fs::write(mnt.join("victim"), b"x").expect_err("the panicking change succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let st = d.ok("rzpool", &["status", "pp"]);
    assert!(st.contains("SUSPENDED"), "{st}");
    // The mount still serves what is there; the pool is not synced again.
    assert_eq!(std::fs::read(mnt.join("durable")).unwrap(), b"synced");
    let (rc, _, err) = d.run("rzpool", &["clear", "pp"]);
    assert!(rc != 0 && err.contains("-f"), "clear of a poisoned pool: {err}");
    let (rc, _, _) = d.run("rzpool", &["export", "pp"]);
    assert!(rc != 0, "a poisoned pool exported without -f");
    d.ok("rzpool", &["export", "-f", "pp"]);
    zdb_check(&dir, "pp");
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "pp"]);
    d.ok("rzfs", &["mount", "pp", mnt.to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("durable")).unwrap(), b"synced");
    assert!(!mnt.join("victim").exists());
    d.ok("rzpool", &["export", "pp"]);
}

/// `zfs mount -a` / `zfs unmount -a` and `zpool sync`, as scripts and ZTS use them.
#[test]
fn mount_all_unmount_all_and_sync() {
    if skip() {
        return;
    }
    let dir = scratch("own-all");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-all");
    let mnt = dir.join("m");
    let mnt_s = mnt.to_str().unwrap();
    d.ok("rzpool", &["create", "-m", mnt_s, "mall", &devs[0]]);
    d.ok("rzfs", &["create", "mall/a"]);
    d.ok("rzfs", &["create", "-o", "canmount=off", "mall/off"]);
    std::fs::write(mnt.join("a/f"), b"data").unwrap();
    // The file is durable once `zpool sync` returns; a pool that is not imported is an error.
    d.ok("rzpool", &["sync", "mall"]);
    d.ok("rzpool", &["sync"]);
    d.ok("rzpool", &["sync", "-f", "mall"]);
    let (rc, _, err) = d.run("rzpool", &["sync", "nosuch"]);
    assert!(rc != 0 && err.contains("nosuch"), "{err}");
    // Unmounting a file system takes the ones mounted below it down first (libzfs's
    // zfs_unmountall), with or without -f; none is left served unseen.
    d.ok("rzfs", &["create", "mall/a/b"]);
    for flags in [&[][..], &["-f"][..]] {
        let args: Vec<&str> = ["unmount"].iter().chain(flags).chain(&["mall/a"]).copied().collect();
        d.ok("rzfs", &args);
        let m = mounts_under(&dir);
        assert!(!m.iter().any(|x| x.starts_with(&format!("{mnt_s}/a"))), "{flags:?}: {m:?}");
        let got = d.ok("rzfs", &["get", "-H", "-o", "name,value", "-r", "mounted", "mall/a"]);
        assert_eq!(got, "mall/a\tno\nmall/a/b\tno\n", "{flags:?}");
        d.ok("rzfs", &["mount", "-a"]);
        assert!(mounts_under(&dir).contains(&format!("{mnt_s}/a/b")));
    }
    d.ok("rzfs", &["unmount", "-a"]);
    assert!(mounts_under(&dir).is_empty(), "unmount -a left {:?}", mounts_under(&dir));
    d.ok("rzfs", &["mount", "-a"]);
    let m = mounts_under(&dir);
    assert!(m.contains(&mnt_s.to_string()) && m.contains(&format!("{mnt_s}/a")), "{m:?}");
    assert!(!m.iter().any(|x| x.ends_with("/off")), "canmount=off was mounted: {m:?}");
    assert_eq!(std::fs::read(mnt.join("a/f")).unwrap(), b"data");
    // Again: what is mounted stays so, nothing fails.
    d.ok("rzfs", &["mount", "-a"]);
    // -R: the named file systems and their descendants only.
    d.ok("rzfs", &["unmount", "-a"]);
    d.ok("rzfs", &["mount", "-R", "mall/a"]);
    let m = mounts_under(&dir);
    assert!(m.contains(&format!("{mnt_s}/a")) && m.contains(&format!("{mnt_s}/a/b")), "{m:?}");
    assert!(!m.contains(&mnt_s.to_string()), "-R mall/a mounted the pool's root: {m:?}");
    let (rc, _, err) = d.run("rzfs", &["mount", "-R", "mall/nosuch"]);
    assert!(rc != 0 && err.contains("dataset does not exist"), "{err}");
    // A file system of another pool mounted inside this one's: unmount -a takes it down
    // first (one order over every pool, as zfs sorts the mount table).
    let inner = format!("{mnt_s}/a/other");
    d.ok("rzpool", &["create", "-m", &inner, "mall2", &devs[1]]);
    d.ok("rzfs", &["unmount", "-a"]);
    assert!(mounts_under(&dir).is_empty(), "unmount -a left {:?}", mounts_under(&dir));
    d.ok("rzpool", &["export", "mall2"]);
    d.ok("rzfs", &["mount", "-a"]);
    d.ok("rzpool", &["export", "mall"]);
    assert!(mounts_under(&dir).is_empty());
}

/// `zfs set mountpoint=`/`canmount=` and `zfs inherit mountpoint` move, unmount and mount
/// file systems as zfs does; a busy file system makes the change fail and stay as it was.
#[test]
fn mountpoint_and_canmount_changes_follow_mounts() {
    if skip() {
        return;
    }
    let dir = scratch("own-mp");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-mp");
    let (m, n, o) = (dir.join("m"), dir.join("n"), dir.join("o"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    d.ok("rzpool", &["create", "-m", &s(&m), "mmp", &devs[0]]);
    d.ok("rzfs", &["create", "mmp/a"]);
    d.ok("rzfs", &["create", "mmp/a/b"]);
    std::fs::write(m.join("a/b/f"), b"data").unwrap();
    // A new mountpoint moves the file system and its children.
    d.ok("rzfs", &["set", &format!("mountpoint={}", s(&n)), "mmp/a"]);
    let mounts = mounts_under(&dir);
    assert!(mounts.contains(&s(&n)) && mounts.contains(&format!("{}/b", s(&n))), "{mounts:?}");
    assert!(!mounts.contains(&s(&m.join("a"))), "{mounts:?}");
    assert_eq!(std::fs::read(n.join("b/f")).unwrap(), b"data");
    // Busy: refused, nothing changed.
    let held = std::fs::File::open(n.join("b/f")).unwrap();
    let (rc, _, err) = d.run("rzfs", &["set", &format!("mountpoint={}", s(&o)), "mmp/a"]);
    assert!(rc != 0 && err.contains("busy"), "{err}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "mountpoint", "mmp/a"]).trim(), s(&n));
    assert!(mounts_under(&dir).contains(&format!("{}/b", s(&n))));
    drop(held);
    // canmount=off unmounts (the child stays), =on does not mount what was not mounted.
    d.ok("rzfs", &["set", "canmount=off", "mmp/a"]);
    let mounts = mounts_under(&dir);
    assert!(!mounts.contains(&s(&n)) && mounts.contains(&format!("{}/b", s(&n))), "{mounts:?}");
    d.ok("rzfs", &["set", "canmount=on", "mmp/a"]);
    assert!(!mounts_under(&dir).contains(&s(&n)));
    // Inheriting the mountpoint brings the file systems back under the pool's.
    d.ok("rzfs", &["inherit", "mountpoint", "mmp/a"]);
    let mounts = mounts_under(&dir);
    assert!(mounts.contains(&s(&m.join("a"))) && mounts.contains(&s(&m.join("a/b"))), "{mounts:?}");
    assert!(!mounts.iter().any(|x| x.starts_with(&s(&n))), "{mounts:?}");
    assert_eq!(std::fs::read(m.join("a/b/f")).unwrap(), b"data");
    d.ok("rzpool", &["export", "mmp"]);
    assert!(mounts_under(&dir).is_empty());
}

/// A pool whose devices were wiped under it (ZTS's harness does this between groups) still
/// lists, answers `get`, and can be taken away with `export -f` / `destroy -f`.
#[test]
fn a_pool_with_wiped_devices_still_lists_and_goes_away() {
    if skip() {
        return;
    }
    let dir = scratch("own-wipe");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-wipe");
    let mnt = dir.join("m");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "wipe", &devs[0]]);
    d.ok("rzpool", &["create", "-m", dir.join("m2").to_str().unwrap(), "wipe2", &devs[1]]);
    std::fs::write(mnt.join("f"), vec![7u8; 1 << 20]).unwrap();
    d.ok("rzpool", &["sync"]);
    for dev in &devs {
        let f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
        f.set_len(0).unwrap();
        f.set_len(1 << 20).unwrap();
    }
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "wipe\nwipe2\n");
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "name", "wipe"]), "wipe\n");
    d.ok("rzpool", &["get", "all", "wipe"]);
    d.ok("rzpool", &["status", "wipe"]);
    // Its datasets cannot be read: said, naming the pool (not a hang, not a panic).
    let (rc, _, err) = d.run("rzfs", &["list"]);
    assert!(rc != 0 && err.contains("'wipe'"), "{err}");
    d.ok("rzpool", &["destroy", "-f", "wipe"]);
    d.ok("rzpool", &["export", "-f", "wipe2"]);
    assert_eq!(d.ok("rzpool", &["list", "-H"]), "");
    assert!(mounts_under(&dir).is_empty(), "{:?}", mounts_under(&dir));
}

/// `zpool import` mounts the pool's file systems unless -N (read-only ones read-only), and
/// after an export this daemon finds file vdevs again without -d (it searches where the
/// pool's devices were, after /dev).
#[test]
fn import_mounts_file_systems() {
    if skip() {
        return;
    }
    let dir = scratch("own-mount");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-mount");
    let (top, kid) = (dir.join("top"), dir.join("kid"));
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "im", &devs[0]]);
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", kid.display()), "im/kid"]);
    d.ok("rzfs", &["create", "-o", "canmount=off", "im/off"]);
    std::fs::write(top.join("t"), b"top").unwrap();
    std::fs::write(kid.join("k"), b"kid").unwrap();
    d.ok("rzpool", &["export", "im"]);
    assert!(mounts_under(&top).is_empty() && mounts_under(&kid).is_empty());
    // No -d: found where it was exported from.
    d.ok("rzpool", &["import", "im"]);
    assert_eq!(std::fs::read(top.join("t")).unwrap(), b"top");
    assert_eq!(std::fs::read(kid.join("k")).unwrap(), b"kid");
    let mounted = d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", "im", "im/kid", "im/off"]);
    assert_eq!(mounted, "yes\nyes\nno\n");
    d.ok("rzpool", &["export", "im"]);
    d.ok("rzpool", &["import", "-o", "readonly=on", "im"]);
    assert_eq!(std::fs::read(kid.join("k")).unwrap(), b"kid");
    assert!(std::fs::write(top.join("new"), b"x").is_err(), "a read-only import mounts read-only");
    d.ok("rzpool", &["export", "im"]);
    d.ok("rzpool", &["import", "-N", "im"]);
    assert!(mounts_under(&top).is_empty() && mounts_under(&kid).is_empty(), "-N mounts nothing");
    d.ok("rzpool", &["export", "im"]);
}

/// Native properties OpenZFS 2.3 has and their effects: `compression` defaults to `on`
/// (lz4); `primarycache`, `secondarycache`, `logbias`, `redundant_metadata` are set,
/// inherited and shown with their sources; `snapdir=disabled` takes `.zfs` away;
/// `zoned=on` keeps a file system from being mounted on the host. zdb checks the pool
/// (metadata with one copy under `redundant_metadata=none` included).
#[test]
fn cache_log_zone_and_snapdir_properties() {
    if skip() {
        return;
    }
    let dir = scratch("own-props");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-props");
    let top = dir.join("top");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "np", &devs[0]]);
    let get = |props: &str, names: &[&str]| {
        let mut a = vec!["get", "-H", "-o", "name,property,value,source", props];
        a.extend(names);
        d.ok("rzfs", &a)
    };
    assert_eq!(get("compression", &["np"]), "np\tcompression\ton\tdefault\n");
    d.ok("rzfs", &["create", "-o", "primarycache=metadata", "-o", "logbias=throughput", "np/a"]);
    d.ok("rzfs", &["set", "secondarycache=none", "redundant_metadata=none", "np"]);
    assert_eq!(
        get("primarycache,secondarycache,logbias,redundant_metadata,zoned", &["np/a"]),
        "np/a\tprimarycache\tmetadata\tlocal\n\
         np/a\tsecondarycache\tnone\tinherited from np\n\
         np/a\tlogbias\tthroughput\tlocal\n\
         np/a\tredundant_metadata\tnone\tinherited from np\n\
         np/a\tzoned\toff\tdefault\n"
    );
    let (code, _, err) = d.run("rzfs", &["set", "primarycache=some", "np/a"]);
    assert!(code != 0 && err.contains("primarycache"), "{err}");
    // Compressible data under the default compression takes less room than it holds.
    let text: Vec<u8> = b"rzfs compresses what OpenZFS would\n".repeat(64 << 10);
    std::fs::write(top.join("a/text"), &text).unwrap();
    for _ in 0..2 {
        assert_eq!(std::fs::read(top.join("a/text")).unwrap(), text, "primarycache=metadata reads");
    }
    d.ok("rzpool", &["sync", "np"]);
    let ratio = d.ok("rzfs", &["get", "-Hp", "-o", "value", "compressratio", "np/a"]);
    let ratio: f64 = ratio.trim().trim_end_matches('x').parse().unwrap();
    assert!(ratio > 4.0, "compression=on (lz4) by default: ratio {ratio}");
    // snapdir=disabled: no .zfs once mounted again; the pool's own stays.
    d.ok("rzfs", &["snapshot", "-r", "np@s"]);
    assert!(top.join("a/.zfs/snapshot/s/text").exists());
    d.ok("rzfs", &["set", "snapdir=disabled", "np/a"]);
    // At once on the mounted file system (the kernel may keep a `.zfs` it looked up for the
    // entry's TTL, a second), and after mounting again.
    let gone = (0..40).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !top.join("a/.zfs").exists()
    });
    assert!(gone, "snapdir=disabled applies to the mounted file system");
    d.ok("rzfs", &["unmount", "np/a"]);
    d.ok("rzfs", &["mount", "np/a"]);
    assert!(!top.join("a/.zfs").exists(), "snapdir=disabled");
    assert!(top.join(".zfs/snapshot/s").exists());
    let listed = |p: &Path| std::fs::read_dir(p).unwrap().any(|e| e.unwrap().file_name() == ".zfs");
    d.ok("rzfs", &["set", "snapdir=visible", "np/a"]);
    assert!(listed(&top.join("a")), "snapdir=visible lists .zfs at once");
    assert!(top.join("a/.zfs/snapshot/s/text").exists());
    d.ok("rzfs", &["inherit", "snapdir", "np/a"]);
    assert!(!listed(&top.join("a")), "snapdir=hidden");
    assert!(top.join("a/.zfs/snapshot/s/text").exists(), "hidden, not gone");
    // zoned=on: not mounted at create, and `zfs mount` refuses it, as on an OpenZFS host.
    d.ok("rzfs", &["create", "-o", "zoned=on", "np/z"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", "np/z"]).trim(), "no");
    let (code, _, err) = d.run("rzfs", &["mount", "np/z"]);
    assert!(code != 0 && err.contains("dataset is exported to a local zone"), "{err}");
    d.ok("rzfs", &["set", "zoned=off", "np/z"]);
    d.ok("rzfs", &["mount", "np/z"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", "np/z"]).trim(), "yes");
    d.ok("rzpool", &["export", "np"]);
    zdb_check(&dir, "np");
}

/// `zfs inherit`/`get`/`set` without their arguments list the properties (PROPERTY, EDIT,
/// INHERIT, VALUES, as libzfs's usage does; ZTS's rsend tests read the table), and every
/// property the table calls editable and inherited can be got, set back and inherited.
/// The ZPL's creation-time properties (`version`, `utf8only`, `normalization`,
/// `casesensitivity`) are read from the master node. Export removes inherited mount points.
#[test]
fn property_table_and_zpl_properties() {
    if skip() {
        return;
    }
    let dir = scratch("own-ptable");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-ptable");
    let top = dir.join("top");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "pt", &devs[0]]);
    let (code, _, table) = d.run("rzfs", &["inherit"]);
    assert_eq!(code, 2, "{table}");
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    let row = |p: &str| rows.iter().find(|r| r.first() == Some(&p)).unwrap_or_else(|| panic!("{p}: {table}"));
    assert_eq!(row("compression")[1..3], ["YES", "YES"]);
    assert_eq!(row("used")[1..3], ["NO", "NO"]);
    assert_eq!(row("quota")[1..3], ["YES", "NO"]);
    assert_eq!(
        row("aclinherit")[1..],
        [
            "YES",
            "YES",
            "discard",
            "|",
            "noallow",
            "|",
            "restricted",
            "|",
            "passthrough",
            "|",
            "secure",
            "|",
            "passthrough-x"
        ]
    );
    for cmd in ["get", "set"] {
        let (code, _, err) = d.run("rzfs", &[cmd]);
        assert!(code == 2 && err.contains("PROPERTY       EDIT  INHERIT   VALUES"), "{cmd}: {err}");
    }
    // What rsend_012 does: get every editable one, set them all back at once, inherit
    // (volmode too: OpenZFS registers it for file systems, which pass it to their volumes).
    let editable: Vec<&str> = rows
        .iter()
        .filter(|r| r.len() > 2 && r[1] == "YES" && !matches!(r[0], "volsize" | "volblocksize"))
        .map(|r| r[0])
        .collect();
    let got = d.ok("rzfs", &["get", "-Ho", "property,value", &editable.join(","), "pt"]);
    let pairs: Vec<String> = got.lines().map(|l| l.replacen('\t', "=", 1)).collect();
    let mut args = vec!["set"];
    args.extend(pairs.iter().map(String::as_str));
    args.push("pt");
    d.ok("rzfs", &args);
    assert_eq!(d.ok("rzfs", &["get", "-Ho", "property,value", &editable.join(","), "pt"]), got);
    // (Not mountpoint: the pool's default one would be /pt.)
    for r in rows.iter().filter(|r| r.len() > 2 && r[1] == "YES" && r[2] == "YES" && r[0] != "mountpoint") {
        d.ok("rzfs", &["inherit", r[0], "pt"]);
    }
    d.ok("rzfs", &["set", "aclinherit=secure", "aclmode=passthrough", "pt"]);
    assert_eq!(
        d.ok("rzfs", &["get", "-Ho", "value", "aclinherit,aclmode", "pt"]),
        "restricted\npassthrough\n"
    );
    d.ok("rzfs", &["snapshot", "pt@s"]);
    assert_eq!(
        d.ok(
            "rzfs",
            &["get", "-Ho", "value", "version,utf8only,normalization,casesensitivity,aclmode", "pt@s"]
        ),
        "5\noff\nnone\nsensitive\n-\n"
    );
    // Export removes the mount point directories it inherited (libzfs remove_mountpoint);
    // the root's, set by `create -m`, is local and stays.
    d.ok("rzfs", &["create", "pt/c"]);
    assert!(top.join("c").is_dir());
    d.ok("rzpool", &["export", "pt"]);
    assert!(!top.join("c").exists() && top.is_dir(), "export leaves {}", top.display());
    zdb_check(&dir, "pt");
}

/// `normalization`, `casesensitivity` and `utf8only` as OpenZFS: chosen at creation (libzfs's
/// rules: normalizing turns utf8only on, refuses utf8only=off; utf8only=off alone means no
/// normalization), inherited by new children, read-only afterwards; a mounted file system
/// finds every spelling its settings make equal, keeps case where mixed, refuses non-UTF-8
/// names. OpenZFS's zdb checks the pool and finds the files by their stored names in
/// directories hashed by normalized names.
#[test]
fn names_normalize_and_fold_case_as_created() {
    if skip() {
        return;
    }
    let dir = scratch("own-casenorm");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-casenorm");
    let top = dir.join("top");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "-O", "normalization=formD", "cn", &devs[0]]);
    d.ok("rzfs", &["create", "-o", "casesensitivity=insensitive", "cn/ci"]);
    d.ok("rzfs", &["create", "-o", "casesensitivity=mixed", "-o", "utf8only=off", "cn/mx"]);
    d.ok("rzfs", &["create", "cn/ci/kid"]);
    let get = |n: &str| d.ok("rzfs", &["get", "-Ho", "value", "normalization,utf8only,casesensitivity", n]);
    assert_eq!(get("cn"), "formD\non\nsensitive\n");
    assert_eq!(get("cn/ci"), "formD\non\ninsensitive\n");
    assert_eq!(get("cn/ci/kid"), "formD\non\ninsensitive\n", "inherited at creation");
    assert_eq!(get("cn/mx"), "none\noff\nmixed\n");
    let (rc, _, err) =
        d.run("rzfs", &["create", "-o", "utf8only=off", "-o", "normalization=formC", "cn/bad"]);
    assert!(rc != 0 && err.contains("'utf8only' must be set 'on'"), "{rc}: {err}");
    let (rc, _, err) = d.run("rzfs", &["create", "-o", "casesensitivity=upper", "cn/bad"]);
    assert!(rc != 0 && err.contains("'casesensitivity' must be one of"), "{rc}: {err}");
    let (rc, _, err) = d.run("rzfs", &["set", "normalization=formC", "cn/ci"]);
    assert!(rc != 0 && err.contains("'normalization' is readonly"), "{rc}: {err}");

    // Composed "Ä" and decomposed "A" + U+0308 are one name under formD; case folds in ci.
    let (composed, decomposed) = ("K\u{c4}se", "KA\u{308}se");
    std::fs::write(top.join("ci").join(composed), b"cheese").unwrap();
    for n in [composed, decomposed, "ka\u{308}SE", "k\u{e4}se"] {
        assert_eq!(std::fs::read(top.join("ci").join(n)).unwrap(), b"cheese", "{n}");
    }
    let e = std::fs::write(top.join("ci").join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EILSEQ));
    std::fs::remove_file(top.join("ci").join("KA\u{308}SE")).unwrap();
    assert!(!top.join("ci").join(composed).exists());
    std::fs::write(top.join("ci").join("Stays"), b"1").unwrap();
    // A snapshot's read-only view matches names the same way.
    d.ok("rzfs", &["snapshot", "cn/ci@s"]);
    assert_eq!(std::fs::read(top.join("ci/.zfs/snapshot/s/STAYS")).unwrap(), b"1");
    assert!(!top.join("ci/.zfs/snapshot/s/Gone").exists());
    std::fs::write(top.join(decomposed), b"root").unwrap();
    assert_eq!(std::fs::read(top.join(composed)).unwrap(), b"root");
    assert!(!top.join("kA\u{308}se").exists(), "case-sensitive at the root");
    // Mixed: case variants are different files.
    std::fs::write(top.join("mx/foo"), b"lower").unwrap();
    std::fs::write(top.join("mx/FOO"), b"upper").unwrap();
    assert_eq!(std::fs::read(top.join("mx/foo")).unwrap(), b"lower");
    assert!(!top.join("mx/Foo").exists());
    d.ok("rzpool", &["export", "cn"]);
    zdb_check(&dir, "cn");
    let out = dir.join("extracted");
    let got = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-r", "cn/ci", "Stays", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap_or_default(), b"1", "{got}");
}

/// `acltype` and `snapdir` apply to a mounted file system at once, as in OpenZFS: POSIX
/// ACLs become settable (the mount is made again, with the one below it; a busy one keeps
/// its behaviour and says so), and the root's link count counts a visible `.zfs`.
#[test]
fn acltype_and_snapdir_apply_to_mounts() {
    if skip() {
        return;
    }
    let dir = scratch("own-aclsnap");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-aclsnap");
    let top = dir.join("top");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "tas", &devs[0]]);
    d.ok("rzfs", &["create", "tas/fs"]);
    d.ok("rzfs", &["create", "tas/fs/sub"]);
    let f = top.join("fs/f");
    std::fs::write(&f, b"x").unwrap();
    let setfacl = |p: &Path| {
        std::process::Command::new("setfacl")
            .args(["-m", "u:nobody:rw"])
            .arg(p)
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(!setfacl(&f), "acltype=off: no POSIX ACLs");
    d.ok("rzfs", &["set", "acltype=posix", "tas/fs"]);
    assert!(setfacl(&f), "acltype=posix applies to the mounted file system");
    std::fs::write(top.join("fs/sub/g"), b"y").unwrap();
    assert!(setfacl(&top.join("fs/sub/g")), "and to the one mounted below it (inherited)");
    // Busy (a process's current directory): it stays as it was, and is said to.
    let busy = std::process::Command::new("sleep").arg("30").current_dir(top.join("fs")).spawn().unwrap();
    let (rc, _, err) = d.run("rzfs", &["set", "acltype=off", "tas/fs"]);
    assert_eq!(rc, 0, "{err}");
    assert!(err.contains("keeps its ACL behaviour until it is mounted again"), "{err}");
    let mounts = d.ok("rzfs", &["mount"]);
    assert!(
        mounts.lines().any(|l| l.starts_with("tas/fs/sub\t")),
        "the one below is mounted again: {mounts}"
    );
    let mut busy = busy;
    let _ = busy.kill();
    let _ = busy.wait();
    // snapdir=visible: the root has one more link (.zfs), at once.
    let links = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().nlink()
    };
    let fs = top.join("fs");
    assert_eq!(links(&fs), 3, "., the entry in its parent, sub/..");
    d.ok("rzfs", &["set", "snapdir=visible", "tas/fs"]);
    assert_eq!(links(&fs), 4);
    d.ok("rzfs", &["set", "snapdir=hidden", "tas/fs"]);
    assert_eq!(links(&fs), 3);
    d.ok("rzpool", &["destroy", "tas"]);
}

/// `overlay=off` refuses a mount point that is not empty (libzfs's zfs_mount_at); `-O` or
/// `overlay=on` stacks the mount; unmounting the top one leaves the one underneath mounted
/// (fuser's second unmount of a dropped session would have taken it down).
#[test]
fn overlay_property_and_stacked_mounts() {
    if skip() {
        return;
    }
    let dir = scratch("own-overlay");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-overlay");
    let top = dir.join("top");
    let a = dir.join("a");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "tov", &devs[0]]);
    d.ok("rzfs", &["create", "-o", &format!("mountpoint={}", a.display()), "tov/fs"]);
    std::fs::write(a.join("file.1"), b"lower").unwrap();
    d.ok("rzfs", &["create", "-o", "overlay=off", "tov/fs1"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value,source", "overlay", "tov/fs"]), "on\tdefault\n");
    d.ok("rzfs", &["unmount", "tov/fs1"]);
    // Moving it onto a directory that is not empty: the property changes, the mount is
    // refused with libzfs's message (zfs set still succeeds, as changelist_postfix).
    let (rc, _, err) = d.run("rzfs", &["set", &format!("mountpoint={}", a.display()), "tov/fs1"]);
    assert_eq!(rc, 0, "{err}");
    assert!(err.contains("directory is not empty"), "{err}");
    let (rc, _, err) = d.run("rzfs", &["mount", "tov/fs1"]);
    assert_eq!(
        (rc, err.trim()),
        (1, format!("cannot mount '{}': directory is not empty", a.display()).as_str())
    );
    // -O, or overlay=on, stacks it over tov/fs; unmounting it leaves tov/fs mounted.
    for how in [&["mount", "-O", "tov/fs1"][..], &["mount", "tov/fs1"][..]] {
        if how.len() == 2 {
            d.ok("rzfs", &["set", "overlay=on", "tov/fs1"]);
        }
        d.ok("rzfs", how);
        assert!(!a.join("file.1").exists(), "tov/fs1 covers tov/fs");
        d.ok("rzfs", &["unmount", "tov/fs1"]);
        assert_eq!(std::fs::read(a.join("file.1")).unwrap(), b"lower", "tov/fs is still mounted");
        if how.len() == 2 {
            d.ok("rzfs", &["mount", "tov/fs1"]);
            d.ok("rzfs", &["unmount", "-f", "tov/fs1"]);
            assert!(a.join("file.1").exists());
        }
    }
    assert!(d.ok("rzfs", &["mount"]).lines().any(|l| l.starts_with("tov/fs\t")));
    d.ok("rzpool", &["destroy", "tov"]);
}

/// `zfs mount -o` options last as long as the mount: `zfs get` shows each that differs
/// from its property with the source `temporary` (ZTS zfs_mount_007_pos, zfs_get_003_pos),
/// `noatime` stops reads from recording access times, `rw` serves a readonly=on file
/// system read-write, `remount` mounts again with new options, and a plain mount reverts.
#[test]
fn mount_options_are_temporary_properties() {
    if skip() {
        return;
    }
    let dir = scratch("own-tempopts");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-tempopts");
    let top = dir.join("top");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "tmo", &devs[0]]);
    d.ok("rzfs", &["create", "-o", "atime=on", "-o", "relatime=off", "tmo/fs"]);
    let file = top.join("fs/f");
    std::fs::write(&file, b"x").unwrap();
    let get = |p: &str| d.ok("rzfs", &["get", "-H", "-o", "value,source", p, "tmo/fs"]);
    d.ok("rzfs", &["mount", "-o", "remount,noatime,noexec", "tmo/fs"]);
    assert_eq!(get("atime"), "off\ttemporary\n");
    assert_eq!(get("exec"), "off\ttemporary\n");
    assert_eq!(get("setuid"), "on\tdefault\n");
    let all = d.ok("rzfs", &["get", "-H", "-o", "property,value,source", "all", "tmo/fs"]);
    assert!(all.lines().any(|l| l == "atime\toff\ttemporary"), "{all}");
    let atime = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().atime()
    };
    let before = atime(&file);
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    assert_eq!(atime(&file), before, "noatime: reads leave the access time");
    // A plain mount reverts to the properties.
    d.ok("rzfs", &["unmount", "tmo/fs"]);
    d.ok("rzfs", &["mount", "tmo/fs"]);
    assert_eq!(get("atime"), "on\tlocal\n");
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::read(&file).unwrap();
    assert!(atime(&file) > before, "atime=on: a read records the access time");
    // rw over readonly=on.
    d.ok("rzfs", &["set", "readonly=on", "tmo/fs"]);
    assert!(std::fs::write(top.join("fs/g"), b"y").is_err());
    d.ok("rzfs", &["mount", "-o", "remount,rw", "tmo/fs"]);
    assert_eq!(get("readonly"), "off\ttemporary\n");
    std::fs::write(top.join("fs/g"), b"y").unwrap();
    // exec=off on a mounted file system (or its parent) applies at once, as OpenZFS
    // remounts it; a temporary exec from `mount -o` still wins until the next mount.
    let prog = top.join("fs/prog");
    std::fs::copy("/bin/true", &prog).unwrap();
    let runs = || std::process::Command::new(&prog).status().is_ok_and(|s| s.success());
    assert!(runs(), "exec=on");
    d.ok("rzfs", &["set", "exec=off", "tmo"]);
    assert!(!runs(), "exec=off inherited from the pool's root applies to the mount");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts.lines().find(|l| l.contains(&*top.join("fs").to_string_lossy())).unwrap();
    assert!(line.contains("noexec"), "{line}");
    d.ok("rzfs", &["inherit", "exec", "tmo"]);
    assert!(runs(), "exec back on");
    d.ok("rzfs", &["unmount", "tmo/fs"]);
    let (rc, _, err) = d.run("rzfs", &["mount", "-o", "noatime,bogus", "tmo/fs"]);
    assert!(rc != 0 && err.contains("unsupported mount option 'bogus'"), "{rc}: {err}");
    d.ok("rzpool", &["export", "tmo"]);
    zdb_check(&dir, "tmo");
}

/// The pool's comment and compatibility are in its configuration (labels, MOS config, cache
/// file) as OpenZFS puts them there, also after `zpool set`; `zpool export -F` syncs but
/// leaves the pool active and in its cache file, from which it imports again (ZTS
/// zpool_create_features_009_pos). OpenZFS's zdb reads them.
#[test]
fn comment_and_compatibility_are_in_the_config() {
    if skip() {
        return;
    }
    let dir = scratch("own-cfgprops");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-cfgprops");
    let cf = dir.join("cachefile");
    let cfs = format!("cachefile={}", cf.display());
    d.ok("rzpool", &["create", "-o", &cfs, "-o", "compatibility=legacy", "-m", "none", "cfg", &devs[0]]);
    let dump = |args: &[&str]| run_zdb(args);
    let cached = dump(&["-C", "-U", cf.to_str().unwrap()]);
    assert!(cached.contains("compatibility: 'legacy'") && !cached.contains("comment:"), "{cached}");
    d.ok("rzpool", &["set", "comment=hello there", "cfg"]);
    let cached = dump(&["-C", "-U", cf.to_str().unwrap()]);
    assert!(cached.contains("comment: 'hello there'"), "{cached}");
    d.ok("rzpool", &["export", "-F", "cfg"]);
    d.ok("rzpool", &["import", "-c", cf.to_str().unwrap(), "cfg"]);
    assert_eq!(
        d.ok("rzpool", &["get", "-H", "-o", "value", "comment,compatibility", "cfg"]),
        "hello there\nlegacy\n"
    );
    d.ok("rzpool", &["export", "cfg"]);
    let label = dump(&["-l", &devs[0]]);
    assert!(label.contains("comment: 'hello there'") && label.contains("compatibility: 'legacy'"), "{label}");
    zdb_check(&dir, "cfg");
}

/// `.zfs/snapshot` on a read-write mount: each snapshot's files as they were, read-only;
/// snapshots taken or destroyed while mounted come and go; `.zfs` is reachable by name but
/// not listed (snapdir=hidden, the default).
#[test]
fn snapshot_directory_on_read_write_mounts() {
    if skip() {
        return;
    }
    let dir = scratch("own-snapdir");
    let devs = files(&dir, 1, 128 << 20);
    let d = Daemon::new("own-snapdir");
    let top = dir.join("top");
    d.ok("rzpool", &["create", "-m", top.to_str().unwrap(), "sd", &devs[0]]);
    std::fs::write(top.join("a"), b"first").unwrap();
    d.ok("rzfs", &["snapshot", "sd@s1"]);
    std::fs::write(top.join("a"), b"second").unwrap();
    std::fs::write(top.join("b"), b"only in s2").unwrap();
    d.ok("rzfs", &["snapshot", "sd@s2"]);
    let snapdir = top.join(".zfs/snapshot");
    let names = |p: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&snapdir), ["s1", "s2"]);
    assert_eq!(std::fs::read(snapdir.join("s1/a")).unwrap(), b"first");
    assert_eq!(std::fs::read(snapdir.join("s2/a")).unwrap(), b"second");
    assert!(!snapdir.join("s1/b").exists());
    assert_eq!(std::fs::read(top.join("a")).unwrap(), b"second");
    assert!(std::fs::write(snapdir.join("s1/new"), b"x").is_err(), "snapshots are read-only");
    assert!(std::fs::remove_file(snapdir.join("s1/a")).is_err(), "snapshots are read-only");
    assert!(std::fs::write(snapdir.join("s1/a"), b"x").is_err(), "snapshots are read-only");
    assert!(!names(&top).contains(&".zfs".to_string()), "snapdir=hidden: .zfs is not listed");
    // Taken and destroyed while mounted.
    std::fs::write(top.join("c"), b"third").unwrap();
    d.ok("rzfs", &["snapshot", "sd@s3"]);
    assert_eq!(std::fs::read(snapdir.join("s3/c")).unwrap(), b"third");
    // A process sitting in a snapshot's directory makes it busy (OpenZFS's snapshot
    // automount cannot be unmounted then), even with -f, and for a recursive destroy of
    // the file system's snapshots.
    let mut sitter =
        std::process::Command::new("sleep").arg("30").current_dir(snapdir.join("s1")).spawn().unwrap();
    for args in [&["destroy", "sd@s1"][..], &["destroy", "-f", "sd@s1"], &["destroy", "-rf", "sd@s1"]] {
        let (code, _, err) = d.run("rzfs", args);
        assert!(code != 0 && err.contains("busy"), "{args:?} with a process in it: {err}");
    }
    assert!(snapdir.join("s1/a").exists());
    sitter.kill().unwrap();
    sitter.wait().unwrap();
    d.ok("rzfs", &["destroy", "sd@s1"]);
    assert_eq!(names(&snapdir), ["s2", "s3"]);
    assert!(!snapdir.join("s1").exists(), "a destroyed snapshot goes at once");
    assert!(!snapdir.join("s1/a").exists());
    // promote moves a snapshot between live mounts, back and forth (ZTS zfs_promote_001).
    d.ok("rzfs", &["clone", "sd@s2", "sd/cl"]);
    let cl = top.join("cl/.zfs/snapshot");
    for (from, to) in [(&snapdir, &cl), (&cl, &snapdir)] {
        assert_eq!(std::fs::read(from.join("s2/b")).unwrap(), b"only in s2");
        let who = if to == &cl { "sd/cl" } else { "sd" };
        d.ok("rzfs", &["promote", who]);
        assert!(!from.join("s2/b").exists(), "promoted away from {}", from.display());
        assert_eq!(std::fs::read(to.join("s2/b")).unwrap(), b"only in s2");
    }
    d.ok("rzfs", &["destroy", "sd/cl"]);
    d.ok("rzpool", &["export", "sd"]);
    zdb_check(&dir, "sd");
}

/// `zpool iostat`: the default columns for the pool and (-v) every vdev, in zpool's layout
/// (ZTS's get_disklist reads the device names from it), counts that add up from the leaves
/// to the pool, intervals and counts (-y leaves out the report since the import), and
/// zpool's errors for an unknown pool and a zero interval.
#[test]
fn iostat_reports_io_per_vdev() {
    if skip() {
        return;
    }
    let dir = scratch("own-iostat");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-iostat");
    d.ok("rzpool", &["create", "-m", "none", "io", "mirror", &devs[0], &devs[1]]);
    d.ok("rzpool", &["scrub", "-w", "io"]);

    let rows: Vec<Vec<u64>> = d
        .ok("rzpool", &["iostat", "-Hpv", "io"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 7, "{l}");
            f[1..].iter().map(|x| x.parse().unwrap()).collect()
        })
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}"); // io, mirror-0, two leaves
    let (pool, top, a, b) = (&rows[0], &rows[1], &rows[2], &rows[3]);
    assert!(pool[0] > 0 && pool[1] > 0 && pool[..2] == top[..2], "{rows:?}");
    assert!(a[..2] == [0, 0] && b[..2] == [0, 0], "leaves have no capacity columns: {rows:?}");
    assert!(a[3] > 0 && b[3] > 0 && a[5] > 0 && b[5] > 0, "labels and uberblocks were written: {rows:?}");
    for i in 2..6 {
        // Rates per second, each rounded down on its own.
        assert!(top[i].abs_diff(a[i] + b[i]) <= 1, "column {i} of mirror-0 is its leaves' sum: {rows:?}");
        assert_eq!(pool[i], top[i], "{rows:?}");
    }
    assert!(pool[2] > 0 && pool[4] > 0, "the scrub read: {rows:?}");

    // Human form: three header lines, the pool, its vdevs, dashes (get_disklist's view).
    let human = d.ok("rzpool", &["iostat", "-v", "io"]);
    let lines: Vec<&str> = human.lines().collect();
    assert!(lines[0].contains("capacity     operations     bandwidth"), "{human}");
    assert!(lines[1].starts_with("pool") && lines[1].ends_with("alloc   free   read  write   read  write"));
    assert!(lines[2].starts_with("----------") && lines[3].starts_with("io "), "{human}");
    let names: Vec<&str> = lines[4..].iter().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, ["mirror-0", devs[0].as_str(), devs[1].as_str(), names[3]], "{human}");
    assert!(names[3].starts_with("-----"));
    assert_eq!(d.ok("rzpool", &["iostat", "io"]).lines().count(), 4);

    // INTERVAL COUNT: COUNT reports; -y leaves out the one since the import.
    assert_eq!(d.ok("rzpool", &["iostat", "-Hp", "io", "0.2", "3"]).lines().count(), 3);
    let later = d.ok("rzpool", &["iostat", "-Hpy", "io", "0.2", "2"]);
    assert_eq!(later.lines().count(), 2, "{later}");
    assert!(later.lines().all(|l| l.starts_with("io\t") && l.split('\t').count() == 7), "{later}");
    // -T u: a timestamp before each report (its value is no pool name).
    let stamped = d.ok("rzpool", &["iostat", "-Hp", "-T", "u", "io", "0.2", "2"]);
    let lines: Vec<&str> = stamped.lines().collect();
    assert!(lines.len() == 4 && lines[0].parse::<u64>().is_ok() && lines[1].starts_with("io\t"), "{stamped}");

    assert_eq!(d.run("rzpool", &["iostat", "nopool"]).0, 1);
    assert_eq!(d.run("rzpool", &["iostat", "io", "0"]).0, 2);
    assert_ne!(d.run("rzpool", &["iostat", "-l", "io"]).0, 0);

    // zpool's subcommands take no -h (a usage error); `zpool clear POOL DEV` wants a device
    // of the pool.
    assert_eq!(d.run("rzpool", &["scrub", "-h"]).0, 2);
    // Nor clustered: a property name starting with -h is a usage error, not help (ZTS
    // user_property_002_neg draws random names).
    assert_eq!(d.run("rzpool", &["set", "-hP=x", "io"]).0, 2);
    assert!(d.ok("rzpool", &["set", "--help"]).contains("Usage: rzpool set"));
    assert_eq!(d.run("rzpool", &["clear", "io", "/no/such/dev"]).0, 1);
    d.ok("rzpool", &["clear", "io", &devs[0]]);

    // Run through a link named `zpool` (as scripts written for ZFS do), the command goes
    // into pool history as typed; run as rzpool, under rzpool.
    let link = dir.join("zpool");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rzpool"), &link).unwrap();
    let out = std::process::Command::new(&link)
        .args(["set", "comment=via-link", "io"])
        .env("RZFS_SOCKET", &d.sock)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let hist = d.ok("rzpool", &["history", "io"]);
    assert!(hist.contains(" zpool set comment=via-link io\n"), "{hist}");
    assert!(hist.contains(&format!(" rzpool create -m none io mirror {} {}\n", devs[0], devs[1])), "{hist}");
    // An export is logged before it happens, so the history shows it after an import.
    d.ok("rzpool", &["export", "io"]);
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "io"]);
    let hist = d.ok("rzpool", &["history", "io"]);
    assert!(hist.contains(" rzpool export io\n"), "{hist}");
    // So is a destroy: a pool imported again with -D shows it.
    d.ok("rzpool", &["destroy", "io"]);
    d.ok("rzpool", &["import", "-D", "-f", "-d", dir.to_str().unwrap(), "io"]);
    let hist = d.ok("rzpool", &["history", "io"]);
    assert!(hist.contains(" rzpool destroy io\n"), "{hist}");
}

/// `zpool create -n` and `zfs create -n/-v/-P/-u` as zpool and zfs have them: dry runs check
/// everything and create nothing, verbose runs describe what they create; names may hold
/// spaces but not be `.` or `..`; file system properties are refused on volumes.
#[test]
fn create_dry_runs_describe_and_check() {
    if skip() {
        return;
    }
    let dir = scratch("own-dry");
    let devs = files(&dir, 2, 128 << 20);
    let d = Daemon::new("own-dry");
    let layout = d.ok("rzpool", &["create", "-n", "dp", "mirror", &devs[0], &devs[1]]);
    assert_eq!(
        layout,
        format!(
            "would create 'dp' with the following layout:\n\n\tdp\n\t  mirror\n\t    {}\n\t    {}\n",
            devs[0], devs[1]
        )
    );
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "");
    // ... and a relative alternate root is refused, as zpool refuses it.
    for bad in [["-O", "doesnotexist=on"], ["-O", "volsize=10M"], ["-R", "nodir"]] {
        assert_eq!(d.run("rzpool", &["create", "-n", bad[0], bad[1], "dp", &devs[0]]).0, 1, "{bad:?}");
    }
    d.ok("rzpool", &["create", "-m", "none", "dp", "mirror", &devs[0], &devs[1]]);

    assert_eq!(d.ok("rzfs", &["create", "-n", "dp/a"]), "");
    let p = d.ok("rzfs", &["create", "-nP", "-p", "-o", "compression=on", "dp/a/b"]);
    assert_eq!(p, "create_ancestors\tdp/a/b\ncreate\tdp/a/b\nproperty\tcompression\ton\n");
    let v = d.ok("rzfs", &["create", "-nv", "-s", "-b", "4k", "-V", "10m", "dp/a"]);
    assert_eq!(v, "would create dp/a\n\tvolsize=10485760\n\tvolblocksize=4096\n");
    for bad in [
        vec!["create", "-n", "-o", "nosuchprop=42", "dp/a"],
        vec!["create", "-n", "-b", "1234", "-V", "10m", "dp/a"],
        vec!["create", "-n", "dp/missing/a"],
        vec!["create", "-n", "dp/.."],
        vec!["create", "-u", "-V", "1m", "dp/v"],
    ] {
        assert_eq!(d.run("rzfs", &bad).0, 1, "{bad:?}");
    }
    assert_eq!(d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "dp"]), "dp\n");

    let made = d.ok("rzfs", &["create", "-P", "-p", "-o", "compression=on", "dp/a/with a space"]);
    assert!(made.starts_with("create_ancestors\tdp/a/with a space\ncreate\tdp/a/with a space\n"), "{made}");
    d.ok("rzfs", &["create", "-u", "-o", "mountpoint=/nonexistent-rzfs-u", "dp/u"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "mounted", "dp/u"]), "no\n");
    // set -u changes the mountpoint and mounts nothing.
    d.ok("rzfs", &["set", "-u", "mountpoint=/nonexistent-rzfs-u2", "dp/u"]);
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value", "mounted,mountpoint", "dp/u"]),
        "no\n/nonexistent-rzfs-u2\n"
    );
    assert!(!Path::new("/nonexistent-rzfs-u2").exists());
    assert_eq!(
        d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "dp"]),
        "dp\ndp/a\ndp/a/with a space\ndp/u\n"
    );

    d.ok("rzfs", &["create", "-s", "-V", "16m", "dp/vol"]);
    for prop in ["atime=on", "mountpoint=/x", "snapdir=hidden"] {
        let (code, _, err) = d.run("rzfs", &["set", prop, "dp/vol"]);
        assert!(code == 1 && err.contains("does not apply to datasets of this type"), "{prop}: {err}");
    }
    d.ok("rzfs", &["set", "compression=lz4", "dp/vol"]);
    d.ok("rzpool", &["export", "dp"]);
    zdb_check(&dir, "dp");
}

/// `zpool labelclear`: a device of a pool imported here is refused (an offline one may be
/// wiped with -f), an exported pool's needs -f, a device without labels is wiped all the
/// same; a wiped device is no longer found by import, and the pool that lost it is
/// still imported DEGRADED and zdb-clean.
#[test]
fn labelclear_wipes_only_what_no_pool_uses() {
    if skip() {
        return;
    }
    let dir = scratch("own-lclr");
    let devs = files(&dir, 3, 128 << 20);
    let d = Daemon::new("own-lclr");
    d.ok("rzpool", &["create", "-m", "none", "lc", "mirror", &devs[0], &devs[1]]);
    let (code, _, err) = d.run("rzpool", &["labelclear", &devs[0]]);
    assert!(code == 1 && err.contains("is a member (ACTIVE) of pool \"lc\""), "{err}");
    let (code, _, err) = d.run("rzpool", &["labelclear", "-f", &devs[0]]);
    assert!(code == 1 && err.contains("Offline the disk first"), "{err}");
    // A file with no labels: nothing to clear, which zpool calls a failure.
    let (code, _, err) = d.run("rzpool", &["labelclear", &devs[2]]);
    assert!(code == 1 && err.contains("failed to clear label for"), "{err}");
    // A detached device keeps a label of no pool (txg 0, as OpenZFS's detach leaves it):
    // cleared without -f, and then there is nothing left to clear.
    d.ok("rzpool", &["attach", "-w", "lc", &devs[0], &devs[2]]);
    d.ok("rzpool", &["detach", "lc", &devs[2]]);
    d.ok("rzpool", &["labelclear", &devs[2]]);
    assert_eq!(d.run("rzpool", &["labelclear", &devs[2]]).0, 1);
    assert_eq!(d.run("rzpool", &["labelclear", "/no/such/device"]).0, 1);

    d.ok("rzpool", &["offline", "lc", &devs[1]]);
    d.ok("rzpool", &["labelclear", "-f", &devs[1]]);
    d.ok("rzpool", &["export", "lc"]);
    let (code, _, err) = d.run("rzpool", &["labelclear", &devs[0]]);
    assert!(code == 1 && err.contains("is a member of exported pool \"lc\""), "{err}");
    // The wiped device is no part of the pool any more: the pool comes back degraded.
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "lc"]);
    let st = d.ok("rzpool", &["status", "lc"]);
    assert!(st.contains("DEGRADED"), "{st}");
    d.ok("rzpool", &["clear", "lc"]);
    assert!(d.ok("rzpool", &["history", "lc"]).contains(" rzpool clear lc\n"));
    d.ok("rzpool", &["export", "lc"]);
    zdb_check(&dir, "lc");
    // A pool imported read-only cannot be marked destroyed: `destroy` lets go of it as an
    // export does, and says so.
    d.ok("rzpool", &["import", "-o", "readonly=on", "-d", dir.to_str().unwrap(), "lc"]);
    let (code, _, err) = d.run("rzpool", &["destroy", "lc"]);
    assert!(code == 0 && err.contains("exported, not destroyed"), "{err}");
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "");
    d.ok("rzpool", &["labelclear", "-f", &devs[0]]);
    assert_ne!(d.run("rzpool", &["import", "-d", dir.to_str().unwrap(), "lc"]).0, 0);
}

/// `zpool destroy -f` and `export -f` of a pool suspended with failmode=wait answer (they
/// logged to the history first, which waited for a `clear` that never came), and the pool
/// is gone.
#[test]
fn a_suspended_pool_can_be_destroyed() {
    if skip() {
        return;
    }
    let dir = scratch("own-susp");
    let devs = files(&dir, 2, 128 << 20);
    let d = std::sync::Arc::new(Daemon::new("own-susp"));
    for (pool, dev) in [("sa", &devs[0]), ("sb", &devs[1])] {
        let m = dir.join(pool);
        d.ok("rzpool", &["create", "-m", m.to_str().unwrap(), pool, dev]);
        d.ok("rzinject", &["-d", dev, "-e", "io", "-T", "write", pool]);
        std::fs::write(m.join("f"), vec![5u8; 1 << 20]).unwrap();
        // The sync fails and suspends the pool (it waits for `clear`: left behind).
        let d2 = d.clone();
        let p = pool.to_string();
        std::thread::spawn(move || d2.run("rzpool", &["sync", &p]));
        assert!(
            wait_until(Duration::from_secs(30), || d.ok("rzpool", &["status", pool]).contains("SUSPENDED")),
            "{pool} never suspended"
        );
    }
    // `status -x` names a suspended pool although its vdevs are ONLINE.
    let x = d.ok("rzpool", &["status", "-x"]);
    assert!(x.contains("pool: sa") && x.contains("SUSPENDED"), "{x}");
    for (pool, args) in [("sa", ["destroy", "-f", "sa"]), ("sb", ["export", "-f", "sb"])] {
        let (tx, rx) = std::sync::mpsc::channel();
        let d2 = d.clone();
        std::thread::spawn(move || tx.send(d2.run("rzpool", &args)));
        let (code, _, err) = rx.recv_timeout(Duration::from_secs(60)).expect("the command answers");
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!d.ok("rzpool", &["list", "-H", "-o", "name"]).contains(pool), "{pool} is gone");
    }
    // (Their labels still say ACTIVE: the devices failed every write. As with OpenZFS,
    // `labelclear -f` frees them for reuse.)
    d.ok("rzinject", &["-c", "all"]);
}

/// Polls `cond` every 100 ms until it holds or `limit` passes.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

/// A file whose indirect (L1) blocks are damaged on every copy is removed and truncated
/// without suspending the pool (ZTS checksum/filetest_002_pos): the free fails in open
/// context — truncate answers EIO, an unlink keeps the object in the unlinked set with its
/// space, as OpenZFS's zfs_rmnode does — instead of failing every later txg sync.
#[test]
fn damaged_indirect_blocks_do_not_suspend_the_pool() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    if skip() {
        return;
    }
    let dir = scratch("own-l1");
    let devs = files(&dir, 1, 256 << 20);
    let d = Daemon::new("own-l1");
    let m = dir.join("m");
    d.ok("rzpool", &["create", "-O", "compression=off", "-m", m.to_str().unwrap(), "ind", &devs[0]]);
    let pattern: Vec<u8> = (0..5u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut objs = Vec::new();
    for name in ["gone", "cut"] {
        std::fs::write(m.join(name), &pattern).unwrap();
        objs.push(std::fs::metadata(m.join(name)).unwrap().ino());
    }
    std::fs::write(m.join("kept"), b"unharmed").unwrap();
    d.ok("rzpool", &["export", "ind"]);
    // Every copy (DVA) of every L1 block of both files, from zdb's listing of their blocks
    // (six d's: every DVA, not only the first).
    let dev = std::fs::OpenOptions::new().write(true).open(&devs[0]).unwrap();
    let mut hit = 0;
    for obj in &objs {
        let out = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddddd", "ind/", &obj.to_string()]);
        for line in out.lines().filter(|l| l.split_whitespace().nth(1) == Some("L1")) {
            for dva in line.split_whitespace().filter(|w| w.matches(':').count() == 2) {
                let f: Vec<&str> = dva.split(':').collect();
                let (off, size) =
                    (u64::from_str_radix(f[1], 16).unwrap(), u64::from_str_radix(f[2], 16).unwrap());
                dev.write_all_at(&vec![0x5a; size as usize], off + (4 << 20)).unwrap();
                hit += 1;
            }
        }
    }
    assert!(hit >= 4, "found {hit} L1 copies to damage (two per file)");
    dev.sync_all().unwrap();
    // A fresh daemon: nothing of the files cached.
    drop(d);
    let d = Daemon::new("own-l1b");
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "ind"]);
    assert!(std::fs::read(m.join("cut")).is_err(), "the damage is real: the file cannot be read");
    std::fs::remove_file(m.join("gone")).expect("unlink of a file with damaged L1 blocks");
    let trunc = std::fs::OpenOptions::new().write(true).open(m.join("cut")).unwrap().set_len(0);
    assert!(trunc.is_err(), "a truncate that cannot walk its indirect blocks fails");
    std::fs::write(m.join("after"), b"still writable").unwrap();
    d.ok("rzpool", &["sync", "ind"]);
    let st = d.ok("rzpool", &["status", "ind"]);
    assert!(!st.contains("SUSPENDED"), "{st}");
    assert!(!m.join("gone").exists());
    d.ok("rzpool", &["export", "ind"]);
    d.ok("rzpool", &["import", "-d", dir.to_str().unwrap(), "ind"]);
    assert_eq!(std::fs::read(m.join("kept")).unwrap(), b"unharmed");
    assert_eq!(std::fs::read(m.join("after")).unwrap(), b"still writable");
    assert!(!d.ok("rzpool", &["status", "ind"]).contains("SUSPENDED"));
    d.ok("rzpool", &["export", "ind"]);
}
