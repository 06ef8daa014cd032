//! # User properties (`module:name`), as zfs-auto-snapshot, sanoid and syncoid use them
//!
//! Through a private rzfsd on a file vdev: `set` (several at once), `get` (an unset one is
//! `-`, not an error), inheritance and its source, `inherit`, `create -o`, `snapshot -r -o`,
//! user properties on snapshots (their own `ds_props_obj`), `get all`, `list -o`, the
//! refusals, persistence across export/import, and OpenZFS's zdb finding no leaked or
//! damaged object (also after destroying a snapshot with properties).
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;

fn get(d: &Daemon, props: &str, names: &[&str]) -> String {
    let mut args = vec!["get", "-H", "-o", "name,property,value,source", props];
    args.extend(names);
    d.ok("rzfs", &args)
}

#[test]
fn user_properties() {
    if skip_without_fuse_zdb("user_properties") {
        return;
    }
    let dir = scratch("user-props");
    let d = Daemon::new("user-props");
    let (_devs, mnt) = create(&d, &dir, "up", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "up/a"]);
    d.ok("rzfs", &["create", "up/a/b"]);
    // Unset: `-`, exit 0 (syncoid's first call).
    assert_eq!(get(&d, "syncoid:sync", &["up"]), "up\tsyncoid:sync\t-\t-\n");
    d.ok("rzfs", &["set", "com.sun:auto-snapshot=true", "foo:bar=x y", "up/a"]);
    assert_eq!(
        get(&d, "com.sun:auto-snapshot,foo:bar", &["up", "up/a", "up/a/b"]),
        "up\tcom.sun:auto-snapshot\t-\t-\nup\tfoo:bar\t-\t-\n\
         up/a\tcom.sun:auto-snapshot\ttrue\tlocal\nup/a\tfoo:bar\tx y\tlocal\n\
         up/a/b\tcom.sun:auto-snapshot\ttrue\tinherited from up/a\nup/a/b\tfoo:bar\tx y\tinherited from up/a\n"
    );
    d.ok("rzfs", &["set", "com.sun:auto-snapshot=false", "up/a/b"]);
    d.ok("rzfs", &["create", "-o", "x:y=1", "up/c"]);
    assert_eq!(get(&d, "x:y", &["up/c"]), "up/c\tx:y\t1\tlocal\n");
    // Recursive snapshot with a property: every snapshot gets it, in one txg.
    d.ok("rzfs", &["snapshot", "-r", "-o", "my:tag=one", "up/a@s1"]);
    assert_eq!(
        get(&d, "my:tag,foo:bar", &["up/a@s1", "up/a/b@s1"]),
        "up/a@s1\tmy:tag\tone\tlocal\nup/a@s1\tfoo:bar\tx y\tinherited from up/a\n\
         up/a/b@s1\tmy:tag\tone\tlocal\nup/a/b@s1\tfoo:bar\tx y\tinherited from up/a\n"
    );
    d.ok("rzfs", &["set", "my:tag=two", "up/a@s1"]);
    d.ok("rzfs", &["inherit", "my:tag", "up/a/b@s1"]);
    assert_eq!(
        get(&d, "my:tag", &["up/a@s1", "up/a/b@s1"]),
        "up/a@s1\tmy:tag\ttwo\tlocal\nup/a/b@s1\tmy:tag\t-\t-\n"
    );
    let all = d.ok("rzfs", &["get", "-H", "-o", "property,value,source", "all", "up/a/b"]);
    assert!(all.contains("com.sun:auto-snapshot\tfalse\tlocal\n"), "{all}");
    assert!(all.contains("foo:bar\tx y\tinherited from up/a\n"), "{all}");
    assert!(all.contains("compression\t"), "native ones too:\n{all}");
    // `get all` in OpenZFS's order, quota and reservation among them.
    let order: Vec<&str> = all.lines().filter_map(|l| l.split('\t').next()).collect();
    let at = |p: &str| order.iter().position(|x| *x == p).unwrap_or_else(|| panic!("{p} missing:\n{all}"));
    assert!(
        at("mounted") < at("quota")
            && at("quota") < at("reservation")
            && at("reservation") < at("recordsize")
    );
    assert!(at("mountpoint") < at("sharenfs") && at("sharenfs") < at("checksum"));
    assert!(at("casesensitivity") < at("sharesmb") && at("sharesmb") < at("refquota"));
    // The share properties: kept, inherited, checked as OpenZFS on Linux checks them; rzfs
    // says that it does not share.
    let (code, _, err) = d.run("rzfs", &["set", "sharenfs=ro,no_root_squash", "up/a"]);
    assert!(code == 0 && err.contains("does not share"), "{err}");
    d.ok("rzfs", &["set", "sharesmb=on", "up"]);
    assert_eq!(
        get(&d, "sharenfs,sharesmb", &["up/a/b"]),
        "up/a/b\tsharenfs\tro,no_root_squash\tinherited from up/a\nup/a/b\tsharesmb\ton\tinherited from up\n"
    );
    for bad in ["sharenfs=bogus", "sharenfs=ro rw", "sharesmb=guest"] {
        let (code, _, err) = d.run("rzfs", &["set", bad, "up/a"]);
        assert!(code != 0 && err.contains("'share"), "{bad}: {err}");
    }
    // lsattr through the mount: FS_IOC_GETFLAGS and FS_IOC_GETVERSION (the generation is
    // the txg that created the file, the same in a snapshot).
    std::fs::write(mnt.join("a/gen"), b"x").unwrap();
    d.ok("rzfs", &["snapshot", "up/a@gen"]);
    let lsattr = |p: &std::path::Path| {
        let o = std::process::Command::new("lsattr").arg("-v").arg(p).output().expect("lsattr (e2fsprogs)");
        assert!(o.status.success(), "lsattr {}: {}", p.display(), String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut w = out.split_whitespace();
        (w.next().unwrap().parse::<u64>().unwrap(), w.next().unwrap().to_string())
    };
    let (gen, flags) = lsattr(&mnt.join("a/gen"));
    assert!(gen > 0 && !flags.contains(|c: char| c != '-'), "{gen} {flags}");
    assert_eq!(lsattr(&mnt.join("a/.zfs/snapshot/gen/gen")).0, gen);
    d.ok("rzfs", &["inherit", "sharenfs", "up/a"]);
    assert_eq!(get(&d, "sharenfs", &["up/a/b"]), "up/a/b\tsharenfs\toff\tdefault\n");
    let list = d.ok("rzfs", &["list", "-H", "-t", "all", "-o", "name,my:tag,com.sun:auto-snapshot"]);
    assert!(list.contains("up/a@s1\ttwo\ttrue\n") && list.contains("up/a/b\t-\tfalse\n"), "{list}");
    d.ok("rzfs", &["inherit", "foo:bar", "up/a"]);
    assert_eq!(get(&d, "foo:bar", &["up/a/b"]), "up/a/b\tfoo:bar\t-\t-\n");
    // Refusals, with the reason.
    let refused = |args: &[&str], why: &str| {
        let (code, _, err) = d.run("rzfs", args);
        assert!(code != 0 && err.contains(why), "{args:?}: {err}");
    };
    refused(&["set", "compression=off", "up/a@s1"], "can not be modified for snapshots");
    refused(&["snapshot", "-o", "compression=off", "up@x"], "only user properties");
    refused(&["set", "Foo:x=1", "up"], "lowercase");
    refused(&["set", &format!("a:b={}", "v".repeat(9000)), "up"], "too long");
    refused(&["set", "a:b=1"], "missing");
    assert!(!d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name"]).contains("up@x"));

    d.ok("rzpool", &["export", "up"]);
    zdb_check(&dir, "up");
    import(&d, &dir, "up", &mnt, false);
    assert_eq!(get(&d, "my:tag", &["up/a@s1"]), "up/a@s1\tmy:tag\ttwo\tlocal\n");
    assert_eq!(get(&d, "com.sun:auto-snapshot", &["up/a"]), "up/a\tcom.sun:auto-snapshot\ttrue\tlocal\n");
    // Destroying a snapshot frees its properties object (zdb would count it leaked).
    d.ok("rzfs", &["destroy", "up/a@s1"]);
    d.ok("rzpool", &["export", "up"]);
    zdb_check(&dir, "up");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What zfs-auto-snapshot and sanoid ask `list`/`get` for: `-t snapshot FS` (FS's own
/// snapshots), `-s`/`-S` sorting, `-d`, `get -s SOURCES`.
#[test]
fn listing_options() {
    if skip_without_fuse_zdb("listing_options") {
        return;
    }
    let dir = scratch("list-opts");
    let d = Daemon::new("list-opts");
    let (_devs, mnt) = create(&d, &dir, "lo", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "lo/a"]);
    // The short names zfs(8) accepts (compress, recsize) are the properties themselves.
    d.ok("rzfs", &["create", "-o", "compress=lz4", "-o", "recsize=64K", "lo/a/b"]);
    let vals = d.ok("rzfs", &["get", "-Hp", "-o", "value", "compression,recordsize", "lo/a/b"]);
    assert_eq!(vals, "lz4\n65536\n");
    let (code, _, err) = d.run("rzfs", &["create", "-o", "compress=lz4", "-o", "compression=off", "lo/dup"]);
    assert!(code != 0 && err.contains("specified multiple times"), "{err}");
    d.ok("rzfs", &["snapshot", "-r", "lo/a@s1"]);
    // Creation times are in seconds: the second snapshot is a second younger.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    d.ok("rzfs", &["snapshot", "lo/a@s2"]);
    let names = |args: &[&str]| {
        let mut a = vec!["list", "-H", "-o", "name"];
        a.extend(args);
        d.ok("rzfs", &a)
    };
    assert_eq!(names(&["-t", "snapshot", "lo/a"]), "lo/a@s1\nlo/a@s2\n");
    // Properties that do not apply to snapshots read `-` there and are not in `get all`
    // (zfs_prop.c's types); those that do are inherited as on the file system.
    let vals =
        d.ok("rzfs", &["get", "-H", "-o", "value,source", "compression,recordsize,atime,exec", "lo/a/b@s1"]);
    assert_eq!(vals, "-\t-\n-\t-\n-\t-\non\tdefault\n");
    let all = d.ok("rzfs", &["get", "-H", "-o", "property", "all", "lo/a/b@s1"]);
    assert!(all.contains("\nexec\n") && !all.contains("compression") && !all.contains("available"), "{all}");
    assert_eq!(names(&["-t", "snapshot", "-r", "lo/a"]), "lo/a@s1\nlo/a@s2\nlo/a/b@s1\n");
    assert_eq!(names(&["-t", "snapshot", "-S", "creation", "lo/a"]), "lo/a@s2\nlo/a@s1\n");
    assert_eq!(names(&["-t", "snapshot", "-s", "creation", "lo/a"]), "lo/a@s1\nlo/a@s2\n");
    assert_eq!(names(&["-S", "name", "-r", "lo"]), "lo/a/b\nlo/a\nlo\n");
    assert_eq!(names(&["-d", "1", "lo"]), "lo\nlo/a\n");
    assert_eq!(names(&["-t", "all", "-d", "1", "lo/a"]), "lo/a\nlo/a@s1\nlo/a@s2\nlo/a/b\n");
    d.ok("rzfs", &["set", "x:y=1", "lo/a"]);
    let got = d.ok("rzfs", &["get", "-H", "-s", "local", "-o", "name,property,value", "all", "lo/a"]);
    assert_eq!(got, "lo/a\tx:y\t1\n");
    let got = d.ok("rzfs", &["get", "-H", "-s", "inherited,none", "-o", "name,source", "x:y", "-r", "lo"]);
    let inh = "inherited from lo/a";
    assert_eq!(got, format!("lo\t-\nlo/a@s1\t{inh}\nlo/a@s2\t{inh}\nlo/a/b\t{inh}\nlo/a/b@s1\t{inh}\n"));
    let got = d.ok("rzfs", &["get", "-H", "-d", "1", "-o", "name", "type", "lo"]);
    assert_eq!(got, "lo\nlo/a\n");
    let got = d.ok("rzfs", &["get", "-H", "-t", "snapshot", "-o", "name", "type", "lo/a"]);
    assert_eq!(got, "lo/a@s1\nlo/a@s2\n");
    let (code, _, err) = d.run("rzfs", &["get", "-s", "bogus", "all", "lo"]);
    assert!(code != 0 && err.contains("invalid source 'bogus'"), "{err}");
    // A path names the file system it lives in (libzfs's zfs_path_to_zhandle).
    let sub = mnt.join("a/b/dir");
    std::fs::create_dir_all(&sub).unwrap();
    assert_eq!(names(&[sub.to_str().unwrap()]), "lo/a/b\n");
    assert_eq!(names(&["-r", mnt.join("a").to_str().unwrap()]), "lo/a\nlo/a/b\n");
    let got = d.ok("rzfs", &["get", "-H", "-o", "value", "recordsize", mnt.to_str().unwrap()]);
    assert_eq!(got, "128K\n");
    d.ok("rzfs", &["set", "x:y=2", sub.to_str().unwrap()]);
    assert_eq!(get(&d, "x:y", &["lo/a/b"]), "lo/a/b\tx:y\t2\tlocal\n");
    let (code, _, err) = d.run("rzfs", &["list", "/proc"]);
    assert!(code != 0 && err.contains("'/proc': not a ZFS filesystem"), "{err}");
    d.ok("rzpool", &["export", "lo"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zfs destroy` of snapshot specs as zfs-auto-snapshot and sanoid prune: `fs@a,b`,
/// ranges `a%b`, `-r` across descendants, `-d` (deferred while a clone holds the
/// snapshot, carried out when the clone goes), checked by zdb.
#[test]
fn destroy_snapshot_specs() {
    if skip_without_fuse_zdb("destroy_snapshot_specs") {
        return;
    }
    let dir = scratch("destroy-specs");
    let d = Daemon::new("destroy-specs");
    let (_devs, mnt) = create(&d, &dir, "ds", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "ds/a"]);
    d.ok("rzfs", &["create", "ds/a/b"]);
    for s in ["s1", "s2", "s3", "s4", "s5", "s6"] {
        std::fs::write(mnt.join("a").join(s), s.repeat(20_000)).unwrap();
        d.ok("rzfs", &["snapshot", "-r", &format!("ds/a@{s}")]);
    }
    let snaps = || d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "ds"]);
    let dry = d.ok("rzfs", &["destroy", "-nv", "ds/a@s1,s3%s4"]);
    assert_eq!(dry, "would destroy ds/a@s1\nwould destroy ds/a@s3\nwould destroy ds/a@s4\n");
    d.ok("rzfs", &["destroy", "-r", "ds/a@s2%s3"]);
    d.ok("rzfs", &["destroy", "ds/a@%s1"]);
    assert_eq!(snaps(), "ds/a@s4\nds/a@s5\nds/a@s6\nds/a/b@s1\nds/a/b@s4\nds/a/b@s5\nds/a/b@s6\n");
    let (code, _, err) = d.run("rzfs", &["destroy", "ds/a@nope,gone"]);
    assert!(code != 0 && err.contains("could not find any snapshots"), "{err}");
    // A clone holds s4: refused without -d, deferred with it.
    d.ok("rzfs", &["clone", "ds/a@s4", "ds/c"]);
    let (code, _, err) = d.run("rzfs", &["destroy", "ds/a@s4"]);
    assert!(code != 0 && err.contains("dependent clones"), "{err}");
    // (Other snapshots of a file system with clones are refused by rzfs for now: s4 only.)
    d.ok("rzfs", &["destroy", "-d", "-r", "ds/a@s4"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "defer_destroy", "ds/a@s4"]), "on\n");
    assert_eq!(snaps(), "ds/a@s4\nds/a@s5\nds/a@s6\nds/a/b@s1\nds/a/b@s5\nds/a/b@s6\n");
    d.ok("rzpool", &["export", "ds"]);
    zdb_check(&dir, "ds");
    import(&d, &dir, "ds", &mnt, false);
    d.ok("rzfs", &["mount", "ds/c", mnt.join("c").to_str().unwrap()]);
    assert_eq!(std::fs::read(mnt.join("c").join("s4")).unwrap(), "s4".repeat(20_000).as_bytes());
    d.ok("rzfs", &["destroy", "ds/c"]);
    assert_eq!(
        snaps(),
        "ds/a@s5\nds/a@s6\nds/a/b@s1\nds/a/b@s5\nds/a/b@s6\n",
        "the deferred destroy is carried out"
    );
    let (code, _, err) = d.run("rzfs", &["destroy", "-d", "ds/a"]);
    assert!(code != 0 && err.contains("snapshots only"), "{err}");
    d.ok("rzpool", &["export", "ds"]);
    zdb_check(&dir, "ds");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zfs hold`/`holds`/`release` (`-r`), `userrefs`: a held snapshot cannot be destroyed;
/// `destroy -d` defers it until the last hold is released. Checked by zdb.
#[test]
fn holds_and_release() {
    if skip_without_fuse_zdb("holds_and_release") {
        return;
    }
    let dir = scratch("holds");
    let d = Daemon::new("holds");
    let (_devs, _mnt) = create(&d, &dir, "ho", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "ho/a"]);
    d.ok("rzfs", &["create", "ho/a/b"]);
    d.ok("rzfs", &["snapshot", "-r", "ho/a@s1"]);
    d.ok("rzfs", &["hold", "-r", "keep", "ho/a@s1"]);
    d.ok("rzfs", &["hold", "backup", "ho/a@s1"]);
    let (code, _, err) = d.run("rzfs", &["hold", "keep", "ho/a@s1"]);
    assert!(code != 0 && err.contains("already exists"), "{err}");
    let h = d.ok("rzfs", &["holds", "-H", "-r", "ho/a@s1"]);
    let rows: Vec<Vec<&str>> = h.lines().map(|l| l.split('\t').collect()).collect();
    let pairs: Vec<(&str, &str)> = rows.iter().map(|r| (r[0], r[1])).collect();
    assert_eq!(pairs, [("ho/a@s1", "backup"), ("ho/a@s1", "keep"), ("ho/a/b@s1", "keep")], "{h}");
    assert!(rows.iter().all(|r| r.len() == 3 && !r[2].is_empty()), "{h}");
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "userrefs", "ho/a@s1"]), "2\n");
    let (code, _, err) = d.run("rzfs", &["destroy", "ho/a/b@s1"]);
    assert!(code != 0 && err.contains("holds"), "{err}");
    d.ok("rzfs", &["destroy", "-d", "ho/a@s1"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "defer_destroy", "ho/a@s1"]), "on\n");
    d.ok("rzfs", &["release", "-r", "keep", "ho/a@s1"]);
    d.ok("rzfs", &["destroy", "ho/a/b@s1"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "ho"]), "ho/a@s1\n");
    let (code, _, err) = d.run("rzfs", &["release", "keep", "ho/a@s1"]);
    assert!(code != 0 && err.contains("no such tag"), "{err}");
    // The last hold goes: the deferred destroy is carried out.
    d.ok("rzfs", &["release", "backup", "ho/a@s1"]);
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "ho"]), "");
    d.ok("rzfs", &["snapshot", "ho/a@s2"]);
    d.ok("rzfs", &["hold", "t", "ho/a@s2"]);
    d.ok("rzpool", &["export", "ho"]);
    zdb_check(&dir, "ho");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zfs rename`: a file system moved under another parent (space and inherited properties
/// follow, mounts move), snapshots renamed (`-r`, `@new` shorthand), refusals, `-p` (parents
/// created), `-u` (a busy mount kept, under its new name), name depth and length limits.
/// zdb clean.
#[test]
fn rename_datasets() {
    if skip_without_fuse_zdb("rename_datasets") {
        return;
    }
    let dir = scratch("rename");
    let d = Daemon::new("rename");
    let (_devs, mnt) = create(&d, &dir, "rn", &SINGLE, 256 << 20);
    for fs in ["rn/a", "rn/a/b", "rn/x"] {
        d.ok("rzfs", &["create", fs]);
    }
    d.ok("rzfs", &["set", "u:p=from-x", "rn/x"]);
    std::fs::write(mnt.join("a/b/f"), vec![7u8; 300_000]).unwrap();
    d.ok("rzfs", &["snapshot", "-r", "rn/a@s1"]);
    d.ok("rzpool", &["sync", "rn"]);
    let used =
        |n: &str| -> u64 { d.ok("rzfs", &["get", "-Hp", "-o", "value", "used", n]).trim().parse().unwrap() };
    let (a0, x0, b0) = (used("rn/a"), used("rn/x"), used("rn/a/b"));
    d.ok("rzfs", &["rename", "rn/a/b", "rn/x/c"]);
    assert_eq!(std::fs::read(mnt.join("x/c/f")).unwrap(), vec![7u8; 300_000], "mounted at its new place");
    assert!(!mnt.join("a/b/f").exists());
    assert_eq!((used("rn/a"), used("rn/x")), (a0 - b0, x0 + b0), "space moves with it");
    assert_eq!(
        d.ok("rzfs", &["get", "-H", "-o", "value,source", "u:p", "rn/x/c"]),
        "from-x\tinherited from rn/x\n"
    );
    assert_eq!(
        d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "rn"]),
        "rn/a@s1\nrn/x/c@s1\n"
    );
    d.ok("rzfs", &["rename", "-r", "rn/x/c@s1", "rn/x/c@t1"]);
    d.ok("rzfs", &["rename", "rn/a@s1", "@t2"]);
    assert_eq!(
        d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "rn"]),
        "rn/a@t2\nrn/x/c@t1\n"
    );
    let refused = |args: &[&str], why: &str| {
        let (code, _, err) = d.run("rzfs", args);
        assert!(code != 0 && err.contains(why), "{args:?}: {err}");
    };
    refused(&["rename", "rn/a", "rn/a/z"], "below itself");
    refused(&["rename", "rn/a", "other/a"], "same pool");
    refused(&["rename", "rn/a", "rn/x"], "already exists");
    refused(&["rename", "rn/a", "rn/nope/a"], "does not exist");
    refused(&["rename", "rn/a@t2", "rn/x@t2"], "same dataset");
    refused(&["rename", "-r", "rn/a", "rn/z"], "only be used on snapshots");
    // -p: the missing parents are created (and mounted), the file system moves under them.
    d.ok("rzfs", &["rename", "-p", "rn/a", "rn/n1/n2/a"]);
    let names = d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "rn"]);
    assert_eq!(names, "rn\nrn/n1\nrn/n1/n2\nrn/n1/n2/a\nrn/x\nrn/x/c\n", "{names}");
    assert!(d.ok("rzfs", &["mount"]).contains(&format!("rn/n1/n2/a\t{}", mnt.join("n1/n2/a").display())));
    refused(&["rename", "-p", "rn/x/c@t1", "rn/q/c@t1"], "snapshots");
    // A bare snapshot name as the target; the same name is no change.
    d.ok("rzfs", &["rename", "rn/x/c@t1", "t9"]);
    d.ok("rzfs", &["rename", "rn/x/c@t9", "rn/x/c@t9"]);
    d.ok("rzfs", &["rename", "rn/x/c@t9", "@t1"]);
    // -u: a busy file system is renamed without an unmount; the mount stays where it was
    // under its new name, open files and .zfs/snapshot keep working.
    let open = std::fs::File::open(mnt.join("x/c/f")).unwrap();
    refused(&["rename", "rn/x/c", "rn/d"], "busy");
    d.ok("rzfs", &["rename", "-u", "rn/x/c", "rn/d"]);
    let mounts = d.ok("rzfs", &["mount"]);
    assert!(mounts.contains(&format!("rn/d\t{}\n", mnt.join("x/c").display())), "{mounts}");
    assert!(!mounts.contains("rn/x/c"), "{mounts}");
    assert_eq!(std::io::Read::bytes(&open).count(), 300_000);
    assert_eq!(std::fs::read(mnt.join("x/c/.zfs/snapshot/t1/f")).unwrap(), vec![7u8; 300_000]);
    std::fs::write(mnt.join("x/c/g"), b"after -u").unwrap();
    drop(open);
    d.ok("rzfs", &["unmount", "rn/d"]);
    d.ok("rzfs", &["mount", "rn/d"]);
    assert_eq!(std::fs::read(mnt.join("d/g")).unwrap(), b"after -u");
    d.ok("rzfs", &["rename", "rn/d", "rn/x/c"]);
    d.ok("rzfs", &["rename", "rn/n1/n2/a", "rn/a"]);
    // Names: at most 49 levels below the pool (zfs_max_dataset_nesting) and 255 bytes,
    // snapshots included; a rename may not break either anywhere below the renamed.
    d.ok("rzfs", &["create", "-o", "mountpoint=none", "rn/z"]);
    let deep = |n: usize| format!("rn/z{}", "/z".repeat(n - 1));
    d.ok("rzfs", &["create", "-p", &deep(49)]);
    refused(&["create", "-p", &deep(50)], "nesting depth exceeded");
    refused(&["create", &deep(50)], "nesting depth exceeded");
    assert!(d.run("rzfs", &["list", &deep(48)]).0 == 0 && d.run("rzfs", &["list", &deep(50)]).0 != 0);
    d.ok("rzfs", &["create", "-p", "rn/z/y/q"]);
    // Again with -p: the target exists, which is success (zfs_do_create); without, refused.
    assert_eq!(d.ok("rzfs", &["create", "-p", "rn/z/y/q"]), "");
    refused(&["create", "rn/z/y/q"], "already exists");
    refused(&["rename", &deep(3), "rn/z/y/q/w"], "too long");
    d.ok("rzfs", &["rename", &deep(3), "rn/z/w"]);
    let long = format!("rn/x/c@{}", "s".repeat(255 - "rn/x/c@".len()));
    d.ok("rzfs", &["snapshot", &long]);
    refused(&["snapshot", &format!("{long}s")], "too long");
    refused(&["rename", "rn/x/c", "rn/x/cc"], "too long");
    d.ok("rzfs", &["destroy", &long]);
    d.ok("rzfs", &["destroy", "-r", "rn/z"]);
    d.ok("rzpool", &["sync", "rn"]);
    let x1 = used("rn/x");
    d.ok("rzpool", &["export", "rn"]);
    zdb_check(&dir, "rn");
    import(&d, &dir, "rn", &mnt, true);
    assert_eq!(used("rn/x"), x1, "after import");
    d.ok("rzpool", &["export", "rn"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `written` (since the previous snapshot) and `written@SNAP` (since SNAP): what was
/// written in between, counting data a later snapshot or the head no longer references.
#[test]
fn written_properties() {
    if skip_without_fuse_zdb("written_properties") {
        return;
    }
    let dir = scratch("written");
    let d = Daemon::new("written");
    let (_devs, mnt) = create(&d, &dir, "wr", &SINGLE, 256 << 20);
    const MB: u64 = 1 << 20;
    let mut rng = common::rng::Rng::new(5);
    d.ok("rzfs", &["create", "-o", "compression=off", "wr/fs"]);
    std::fs::write(mnt.join("fs/a"), rng.data_in(MB, MB + 1)).unwrap();
    d.ok("rzfs", &["snapshot", "wr/fs@s1"]);
    std::fs::write(mnt.join("fs/b"), rng.data_in(2 * MB, 2 * MB + 1)).unwrap();
    d.ok("rzfs", &["snapshot", "wr/fs@s2"]);
    std::fs::remove_file(mnt.join("fs/a")).unwrap();
    std::fs::write(mnt.join("fs/c"), rng.data_in(MB / 2, MB / 2 + 1)).unwrap();
    d.ok("rzpool", &["sync", "wr"]);
    let n = |p: &str, name: &str| -> u64 {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", p, name]).trim().parse().unwrap()
    };
    let near = |got: u64, want: u64, what: &str| {
        assert!(got >= want && got <= want + want / 10 + 64 * 1024, "{what}: {got}, about {want}");
    };
    near(n("written", "wr/fs@s1"), MB, "written of s1");
    assert_eq!(n("written", "wr/fs@s1"), n("referenced", "wr/fs@s1"));
    near(n("written", "wr/fs@s2"), 2 * MB, "written of s2");
    near(n("written", "wr/fs"), MB / 2, "written of the head");
    // Since s1: b and c, although a (from before s1) is gone.
    near(n("written@s1", "wr/fs"), 2 * MB + MB / 2, "written@s1 of the head");
    assert_eq!(n("written@wr/fs@s1", "wr/fs"), n("written@s1", "wr/fs"));
    near(n("written@s1", "wr/fs@s2"), 2 * MB, "written@s1 of s2");
    // A later or missing snapshot reads as "-" (zfs get prints that, and -r goes on), a
    // value's source is `local`, as zfs's.
    let get = |p: &str, ds: &str| d.ok("rzfs", &["get", "-H", "-o", "value,source", p, ds]);
    assert_eq!(get("written@s2", "wr/fs@s1"), "-\t-\n");
    assert_eq!(get("written@nope", "wr/fs"), "-\t-\n");
    assert!(get("written@s1", "wr/fs").ends_with("\tlocal\n"));
    d.ok("rzpool", &["export", "wr"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zfs diff`: added, removed, modified, renamed and linked files between two snapshots
/// and against the live file system, with `-F`, `-H`, `-t` and `-h`, paths under the
/// mount point escaped as OpenZFS escapes them.
#[test]
fn diff_snapshots() {
    if skip_without_fuse_zdb("diff_snapshots") {
        return;
    }
    let dir = scratch("diff");
    let d = Daemon::new("diff");
    let (_devs, mnt) = create(&d, &dir, "df", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "df/fs"]);
    let fs = mnt.join("fs");
    for f in ["a", "b", "e"] {
        std::fs::write(fs.join(f), f).unwrap();
    }
    std::fs::create_dir(fs.join("d")).unwrap();
    std::fs::write(fs.join("d/x"), "x").unwrap();
    d.ok("rzfs", &["snapshot", "df/fs@s1"]);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(fs.join("a"), "changed").unwrap();
    std::fs::remove_file(fs.join("b")).unwrap();
    std::fs::write(fs.join("c"), "new").unwrap();
    std::fs::rename(fs.join("d/x"), fs.join("d/y")).unwrap();
    std::fs::hard_link(fs.join("e"), fs.join("e2")).unwrap();
    d.ok("rzfs", &["snapshot", "df/fs@s2"]);
    let m = fs.display().to_string();
    let sorted = |s: String| {
        let mut v: Vec<String> = s.lines().map(String::from).collect();
        v.sort();
        v
    };
    let mut want = vec![
        format!("M\t{m}/"),
        format!("M\t{m}/a"),
        format!("-\t{m}/b"),
        format!("+\t{m}/c"),
        format!("M\t{m}/d"),
        format!("R\t{m}/d/x -> {m}/d/y"),
        format!("M\t{m}/e\t(+1)"),
    ];
    want.sort();
    assert_eq!(sorted(d.ok("rzfs", &["diff", "df/fs@s1", "df/fs@s2"])), want);
    assert_eq!(sorted(d.ok("rzfs", &["diff", "df/fs@s1", "@s2"])), want);
    // Against the live file system, after one more change.
    std::fs::write(fs.join("sp ace"), "s").unwrap();
    let live = sorted(d.ok("rzfs", &["diff", "df/fs@s2"]));
    assert_eq!(live, [format!("+\t{m}/sp\\0040ace"), format!("M\t{m}/")], "{live:?}");
    let raw = d.ok("rzfs", &["diff", "-h", "df/fs@s2", "df/fs"]);
    assert!(raw.contains(&format!("+\t{m}/sp ace\n")), "{raw}");
    let fh = d.ok("rzfs", &["diff", "-FH", "df/fs@s1", "df/fs@s2"]);
    assert!(fh.contains(&format!("R\tF\t{m}/d/x\t{m}/d/y\n")), "{fh}");
    assert!(fh.contains(&format!("M\t/\t{m}/d\n")), "{fh}");
    let t = d.ok("rzfs", &["diff", "-t", "df/fs@s1", "df/fs@s2"]);
    for line in t.lines() {
        let (ts, _) = line.split_once('\t').unwrap();
        let (s, ns) = ts.trim_start().split_once('.').unwrap();
        assert!(s.parse::<u64>().is_ok() && ns.len() == 9, "{line}");
    }
    assert_eq!(d.ok("rzfs", &["diff", "df/fs@s2", "df/fs@s2"]), "");
    let (code, _, err) = d.run("rzfs", &["diff", "df/fs@s2", "df/fs@s1"]);
    assert!(code != 0 && err.contains("not an earlier snapshot"), "{err}");
    let (code, _, err) = d.run("rzfs", &["diff", "df/fs"]);
    assert!(code != 0 && err.contains("snapshot"), "{err}");
    d.ok("rzpool", &["export", "df"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `snapshots_changed`: `-` until a snapshot of the file system is taken, then the time of
/// the last snapshot taken, renamed or destroyed (seconds; `_nsecs` in nanoseconds), the
/// mtime of `.zfs/snapshot` as OpenZFS shows it (ZTS snapshot_018), kept in the directory's
/// ZAP across export/import (zdb counts the zapified directory's extensible_dataset
/// reference), and given back when the file system is destroyed.
#[test]
fn snapshots_changed() {
    if skip_without_fuse_zdb("snapshots_changed") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("snap-changed");
    let d = Daemon::new("snap-changed");
    let (_devs, mnt) = create(&d, &dir, "sc", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "sc/fs"]);
    let get = |name: &str| {
        d.ok("rzfs", &["get", "-Hp", "-o", "value", "snapshots_changed", name]).trim().to_string()
    };
    let mtime = |fs: &str| std::fs::metadata(mnt.join(fs).join(".zfs/snapshot")).unwrap().mtime();
    let now = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert_eq!(get("sc"), "-");
    assert_eq!(get("sc/fs"), "-");
    assert_eq!(mtime("fs"), 0);
    let all = d.ok("rzfs", &["get", "-H", "all", "sc/fs"]);
    assert!(!all.contains("snapshots_changed"), "unset: not in get all\n{all}");

    let t0 = now();
    d.ok("rzfs", &["snapshot", "sc/fs@a"]);
    let v1: i64 = get("sc/fs").parse().unwrap();
    assert!(v1 >= t0 && v1 <= now(), "{v1} vs {t0}");
    assert_eq!(mtime("fs"), v1);
    assert_eq!(get("sc"), "-", "the parent's snapshots did not change");
    let ns: i64 = d
        .ok("rzfs", &["get", "-Hp", "-o", "value", "snapshots_changed_nsecs", "sc/fs"])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(ns / 1_000_000_000, v1);
    let human = d.ok("rzfs", &["get", "-H", "-o", "value", "snapshots_changed", "sc/fs"]);
    assert!(human.trim().len() >= 20 && human.contains(':'), "{human}");
    let all = d.ok("rzfs", &["get", "-H", "all", "sc/fs"]);
    assert!(all.contains("snapshots_changed"), "{all}");
    // Snapshots have none.
    assert_eq!(get("sc/fs@a"), "-");

    std::thread::sleep(std::time::Duration::from_millis(1100));
    d.ok("rzfs", &["rename", "sc/fs@a", "sc/fs@b"]);
    let v2: i64 = get("sc/fs").parse().unwrap();
    assert!(v2 > v1, "rename: {v2} after {v1}");
    assert_eq!(mtime("fs"), v2);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    d.ok("rzfs", &["snapshot", "sc/fs@c"]);
    d.ok("rzfs", &["destroy", "sc/fs@b"]);
    let v3: i64 = get("sc/fs").parse().unwrap();
    assert!(v3 > v2, "destroy: {v3} after {v2}");
    assert_eq!(mtime("fs"), v3);

    d.ok("rzpool", &["export", "sc"]);
    zdb_check(&dir, "sc");
    import(&d, &dir, "sc", &mnt, false);
    d.ok("rzfs", &["mount", "sc/fs"]);
    assert_eq!(get("sc/fs"), v3.to_string(), "kept across export/import");
    assert_eq!(mtime("fs"), v3);
    d.ok("rzfs", &["destroy", "-r", "sc/fs"]);
    d.ok("rzpool", &["export", "sc"]);
    zdb_check(&dir, "sc");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A snapshot with a file or directory open under `.zfs/snapshot` is busy: `destroy` (also
/// `-f`, and `-r` of its file system) refuses it with zfs's words, as OpenZFS on Linux
/// (ZTS zfs_destroy_001_pos); once closed it goes.
#[test]
fn busy_snapshot_is_not_destroyed() {
    if skip_without_fuse_zdb("busy_snapshot_is_not_destroyed") {
        return;
    }
    let dir = scratch("snap-busy");
    let d = Daemon::new("snap-busy");
    let (_devs, mnt) = create(&d, &dir, "sb", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "sb/fs"]);
    std::fs::write(mnt.join("fs/f"), b"snapshot bytes").unwrap();
    d.ok("rzfs", &["snapshot", "sb/fs@s"]);
    let snapdir = mnt.join("fs/.zfs/snapshot/s");
    let refused = |args: &[&str]| {
        let (code, _, err) = d.run("rzfs", args);
        assert!(
            code != 0 && err.contains("cannot destroy snapshot sb/fs@s: dataset is busy"),
            "{args:?}: {err}"
        );
    };
    {
        let f = std::fs::File::open(snapdir.join("f")).unwrap();
        refused(&["destroy", "sb/fs@s"]);
        refused(&["destroy", "-f", "sb/fs@s"]);
        refused(&["destroy", "-r", "sb/fs"]);
        drop(f);
    }
    {
        let listing = std::fs::read_dir(&snapdir).unwrap();
        refused(&["destroy", "sb/fs@s"]);
        drop(listing);
    }
    assert_eq!(std::fs::read(mnt.join("fs/f")).unwrap(), b"snapshot bytes");
    d.ok("rzfs", &["destroy", "sb/fs@s"]);
    assert!(!d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name"]).contains("sb/fs@s"));
    d.ok("rzpool", &["export", "sb"]);
    zdb_check(&dir, "sb");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A recursive destroy is a best effort, as libzfs's: a busy dataset stays with what cannot
/// go while it does (its parents; the origin of a clone that stays); everything else goes,
/// and the command fails naming the busy one (ZTS zfs_destroy_005_neg).
#[test]
fn recursive_destroy_is_a_best_effort() {
    if skip_without_fuse_zdb("recursive_destroy_is_a_best_effort") {
        return;
    }
    let dir = scratch("destroy-best");
    let d = Daemon::new("destroy-best");
    let (_devs, mnt) = create(&d, &dir, "db", &SINGLE, 256 << 20);
    for fs in ["db/ctr", "db/ctr/busy", "db/ctr/idle"] {
        d.ok("rzfs", &["create", fs]);
    }
    d.ok("rzfs", &["snapshot", "-r", "db/ctr@s"]);
    d.ok("rzfs", &["clone", "db/ctr/idle@s", "db/idleclone"]);
    let names = || d.ok("rzfs", &["list", "-H", "-r", "-t", "all", "-o", "name", "db"]);
    {
        let f = std::fs::File::create(mnt.join("ctr/busy/open")).unwrap();
        let (code, _, err) = d.run("rzfs", &["destroy", "-R", "db/ctr"]);
        assert!(code != 0 && err.contains("mnt/ctr/busy': pool or dataset is busy"), "{err}");
        // The busy file system, its parent, and nothing else stays (its snapshot goes).
        assert_eq!(names(), "db\ndb/ctr\ndb/ctr/busy\n");
        drop(f);
    }
    // A busy snapshot with a clone: -R takes the clone and leaves the snapshot.
    d.ok("rzfs", &["snapshot", "db/ctr/busy@t"]);
    d.ok("rzfs", &["clone", "db/ctr/busy@t", "db/tclone"]);
    {
        let listing = std::fs::read_dir(mnt.join("ctr/busy/.zfs/snapshot/t")).unwrap();
        let (code, _, err) = d.run("rzfs", &["destroy", "-R", "db/ctr/busy@t"]);
        assert!(code != 0 && err.contains("cannot destroy snapshot db/ctr/busy@t: dataset is busy"), "{err}");
        assert_eq!(names(), "db\ndb/ctr\ndb/ctr/busy\ndb/ctr/busy@t\n");
        drop(listing);
    }
    d.ok("rzfs", &["destroy", "-r", "db/ctr"]);
    assert_eq!(names(), "db\n");
    d.ok("rzpool", &["export", "db"]);
    zdb_check(&dir, "db");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the daemon's `RZFS_ADMIN_SNAPSHOT=1` (OpenZFS's `zfs_admin_snapshot`), `mkdir`,
/// `mv` and `rmdir` in `.zfs/snapshot` take, rename and destroy snapshots (ZTS snapshot_015,
/// snapshot_016); a snapshot with a clone is not removed; without the setting they get
/// EACCES, as on Linux by default.
#[test]
fn snapshot_directory_changes_snapshots() {
    if skip_without_fuse_zdb("snapshot_directory_changes_snapshots") {
        return;
    }
    let dir = scratch("snapdir-admin");
    let d = Daemon::with_env("snapdir-admin", &[("RZFS_ADMIN_SNAPSHOT", "1")]);
    let (_devs, mnt) = create(&d, &dir, "sa", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "sa/fs"]);
    std::fs::write(mnt.join("fs/f"), b"one").unwrap();
    let sd = mnt.join("fs/.zfs/snapshot");
    let snaps = || d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "sa"]);
    std::fs::create_dir(sd.join("a")).unwrap();
    assert_eq!(snaps(), "sa/fs@a\n");
    assert_eq!(std::fs::read(sd.join("a/f")).unwrap(), b"one");
    let e = std::fs::create_dir(sd.join("a")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}");
    // mv(1), which asks for RENAME_NOREPLACE.
    let st = std::process::Command::new("mv").arg(sd.join("a")).arg(sd.join("b")).status().unwrap();
    assert!(st.success());
    assert_eq!(snaps(), "sa/fs@b\n");
    std::fs::rename(sd.join("b"), sd.join("a")).unwrap();
    std::fs::rename(sd.join("a"), sd.join("b")).unwrap();
    assert_eq!(std::fs::read(sd.join("b/f")).unwrap(), b"one");
    d.ok("rzfs", &["clone", "sa/fs@b", "sa/c"]);
    let e = std::fs::remove_dir(sd.join("b")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "a snapshot with a clone stays: {e}");
    d.ok("rzfs", &["destroy", "sa/c"]);
    std::fs::remove_dir(sd.join("b")).unwrap();
    assert_eq!(snaps(), "");
    assert!(!sd.join("b").exists());
    // A snapshot destroyed and taken again under its name is the new one at once, though
    // the old one was looked at just before (ZTS xattr_006_pos, then xattr_007_neg).
    d.ok("rzfs", &["snapshot", "sa/fs@s"]);
    assert_eq!(std::fs::read(sd.join("s/f")).unwrap(), b"one");
    d.ok("rzfs", &["destroy", "sa/fs@s"]);
    std::fs::write(mnt.join("fs/g"), b"two").unwrap();
    d.ok("rzfs", &["snapshot", "sa/fs@s"]);
    assert_eq!(std::fs::read(sd.join("s/g")).unwrap(), b"two");
    d.ok("rzfs", &["destroy", "sa/fs@s"]);
    d.ok("rzpool", &["export", "sa"]);
    zdb_check(&dir, "sa");
    drop(d);

    // Without the setting: EACCES, nothing changes.
    let d = Daemon::new("snapdir-admin");
    import(&d, &dir, "sa", &mnt, false);
    d.ok("rzfs", &["mount", "sa/fs"]);
    let e = std::fs::create_dir(sd.join("x")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    assert_eq!(d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name", "-r", "sa"]), "");
    d.ok("rzpool", &["export", "sa"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zfs list`/`zfs get` of several names, some missing, print what exists and fail naming the
/// others, as zfs_for_each (ZTS zfs_clone_010_pos lists a snapshot and a clone list as two
/// names); an empty listing says "no datasets available"; `clone -p` onto an existing
/// dataset succeeds doing nothing (zfs_clone_002_pos), the `clones` property stops at
/// libzfs's 8191 bytes, and a volume's clone refuses file system properties.
#[test]
fn listings_go_on_past_missing_names() {
    if skip_without_fuse_zdb("listings_go_on_past_missing_names") {
        return;
    }
    let dir = scratch("list-missing");
    let d = Daemon::new("list-missing");
    let (_devs, _mnt) = create(&d, &dir, "lm", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "lm/a"]);
    d.ok("rzfs", &["snapshot", "lm/a@s"]);
    let (code, out, err) = d.run("rzfs", &["list", "-H", "-o", "name", "lm/a@s", "lm/nope", "nopool/x"]);
    assert_eq!((code, out.as_str()), (1, "lm/a@s\n"), "{err}");
    assert_eq!(
        err,
        "cannot open 'lm/nope': dataset does not exist\ncannot open 'nopool/x': dataset does not exist\n"
    );
    let (code, out, err) = d.run("rzfs", &["get", "-H", "-o", "name,value", "type", "lm/nope", "lm/a"]);
    assert_eq!((code, out.as_str()), (1, "lm/a\tfilesystem\n"), "{err}");
    let (code, out, err) = d.run("rzfs", &["list", "-t", "snapshot", "lm"]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", "no datasets available\n"));
    d.ok("rzfs", &["clone", "-p", "lm/a@s", "lm/x/y/c"]);
    d.ok("rzfs", &["clone", "-p", "lm/a@s", "lm/x/y/c"]);
    let (code, _, _) = d.run("rzfs", &["clone", "lm/a@s", "lm/x/y/c"]);
    assert_ne!(code, 0, "without -p an existing target is an error");
    // 41 clones of 200-byte names: the list is cut at 8191 bytes.
    let long = "x".repeat(200);
    for i in 0..41 {
        d.ok("rzfs", &["clone", "lm/a@s", &format!("lm/a/{long}.{i}")]);
    }
    let clones = d.ok("rzfs", &["get", "-H", "-o", "value", "clones", "lm/a@s"]);
    assert_eq!(clones.trim_end_matches('\n').len(), 8191);
    d.ok("rzfs", &["destroy", "-R", "lm/a@s"]);
    // A clone of a volume is a volume: file system properties are refused (zfs_clone_009_neg).
    d.ok("rzfs", &["create", "-V", "8M", "lm/v"]);
    d.ok("rzfs", &["snapshot", "lm/v@s"]);
    let (code, _, err) = d.run("rzfs", &["clone", "-o", "quota=4M", "lm/v@s", "lm/vc"]);
    assert!(code != 0 && err.contains("'quota' does not apply to datasets of this type"), "{err}");
    d.ok("rzfs", &["clone", "-o", "compression=lz4", "lm/v@s", "lm/vc"]);
    d.ok("rzfs", &["destroy", "-R", "lm/v"]);
    d.ok("rzpool", &["export", "lm"]);
    zdb_check(&dir, "lm");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zfs upgrade` as zfs prints it: the current version and that every file system is at it,
/// `-v` the versions, `-a`/names counting those already current; `create`/`clone -o
/// version=` take the current version and refuse older ones (ZTS zfs_clone_007_pos).
#[test]
fn zfs_upgrade_and_version() {
    if skip_without_fuse_zdb("zfs_upgrade_and_version") {
        return;
    }
    let dir = scratch("zfs-upgrade");
    let d = Daemon::new("zfs-upgrade");
    let (_devs, _mnt) = create(&d, &dir, "zu", &SINGLE, 256 << 20);
    d.ok("rzfs", &["create", "-o", "version=5", "zu/a"]);
    assert_eq!(
        d.ok("rzfs", &["upgrade"]),
        "This system is currently running ZFS filesystem version 5.\n\n\
         All filesystems are formatted with the current version.\n"
    );
    assert!(d.ok("rzfs", &["upgrade", "-v"]).contains(" 5   System attributes\n"));
    assert_eq!(
        d.ok("rzfs", &["upgrade", "-a"]),
        "0 filesystems upgraded\n2 filesystems already at this version\n"
    );
    assert_eq!(
        d.ok("rzfs", &["upgrade", "zu/a"]),
        "0 filesystems upgraded\n1 filesystems already at this version\n"
    );
    let (code, out, _) = d.run("rzfs", &["upgrade", "-V", "4", "zu/a"]);
    assert_eq!(code, 1);
    assert!(out.contains("zu/a: can not be downgraded; it is already at version 5\n"), "{out}");
    d.ok("rzfs", &["snapshot", "zu/a@s"]);
    d.ok("rzfs", &["clone", "-o", "version=5", "zu/a@s", "zu/c"]);
    let (code, _, err) = d.run("rzfs", &["clone", "-o", "version=4", "zu/a@s", "zu/d"]);
    assert!(code != 0 && err.contains("version"), "{err}");
    assert!(!d.ok("rzfs", &["list", "-H", "-o", "name"]).contains("zu/d"));
    d.ok("rzpool", &["export", "zu"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// File systems of ZPL versions 1 to 4 (`create -o version=N`): written through the
/// mount as `znode_phys_t` znodes (files, directories, short and long symlinks, xattrs,
/// hard links, chmod/chown, removal), listed by `zfs upgrade`, upgraded by `zfs upgrade`
/// and `zfs set version=` (never downgraded), old znodes rewritten as system attributes
/// once they change, clones taking their origin's version. OpenZFS's zdb checks every
/// block, the user accounting and the ZPL fields; `zdb -r` extracts a file of a version-1
/// file system; everything reads back after export and import.
#[test]
fn old_zpl_versions() {
    if skip_without_fuse_zdb("old_zpl_versions") {
        return;
    }
    let dir = scratch("zpl-versions");
    let d = Daemon::new("zpl-versions");
    let (_devs, mnt) = create(&d, &dir, "zv", &SINGLE, 256 << 20);
    let mut want: Vec<(String, Vec<u8>)> = Vec::new();
    let long_target = "t".repeat(200);
    for v in 1..=4 {
        let fs = format!("zv/v{v}");
        d.ok("rzfs", &["create", "-o", &format!("version={v}"), &fs]);
        assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "version", &fs]), format!("{v}\n"));
        let m = mnt.join(format!("v{v}"));
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + v) as u8).collect();
        std::fs::write(m.join("big"), &data).unwrap();
        std::fs::write(m.join("f"), format!("hello {v}")).unwrap();
        std::fs::create_dir(m.join("d")).unwrap();
        std::os::unix::fs::symlink("/short", m.join("d/s")).unwrap();
        std::os::unix::fs::symlink(&long_target, m.join("d/l")).unwrap();
        std::fs::hard_link(m.join("f"), m.join("d/f2")).unwrap();
        std::fs::write(m.join("gone"), b"x").unwrap();
        std::fs::remove_file(m.join("gone")).unwrap();
        let x = std::process::Command::new("setfattr")
            .args(["-n", "user.k", "-v", "val"])
            .arg(m.join("f"))
            .status();
        assert!(x.is_ok_and(|s| s.success()), "setfattr on version {v}");
        std::fs::set_permissions(m.join("f"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(m.join("big"), Some(1234), Some(567)).unwrap();
        want.push((format!("v{v}/big"), data));
        want.push((format!("v{v}/d/f2"), format!("hello {v}").into_bytes()));
    }
    // Quotas per owner need version 4, per project 5.
    let (code, _, err) = d.run("rzfs", &["set", "userquota@1234=10M", "zv/v3"]);
    assert!(code != 0 && err.contains("must be upgraded"), "{err}");
    d.ok("rzfs", &["set", "userquota@1234=10M", "zv/v4"]);
    assert_ne!(d.run("rzfs", &["set", "projectquota@5=10M", "zv/v4"]).0, 0);
    // Versions 1 and 2 take no name-handling properties; no version past 5 exists.
    let (code, _, err) =
        d.run("rzfs", &["create", "-o", "version=2", "-o", "casesensitivity=mixed", "zv/ci"]);
    assert!(code != 0 && err.contains("version-2"), "{err}");
    let (code, _, _) = d.run("rzfs", &["create", "-o", "version=6", "zv/v6"]);
    assert_ne!(code, 0);
    let listing = d.ok("rzfs", &["upgrade"]);
    for v in 1..=4 {
        assert!(listing.contains(&format!(" {v}   zv/v{v}\n")), "{listing}");
    }
    // A clone keeps its origin's version, may go up, never down.
    d.ok("rzfs", &["snapshot", "zv/v2@s"]);
    d.ok("rzfs", &["clone", "zv/v2@s", "zv/c2"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "version", "zv/c2"]), "2\n");
    d.ok("rzfs", &["clone", "-o", "version=4", "zv/v2@s", "zv/c4"]);
    assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "version", "zv/c4"]), "4\n");
    assert_ne!(d.run("rzfs", &["clone", "-o", "version=1", "zv/v2@s", "zv/c1"]).0, 0);
    // Upgrades: v1 to 5 (mounted), v3 to 4 by `set`; no downgrade.
    assert_eq!(d.ok("rzfs", &["upgrade", "zv/v1"]), "1 filesystems upgraded\n");
    d.ok("rzfs", &["set", "version=4", "zv/v3"]);
    let (code, out, _) = d.run("rzfs", &["upgrade", "-V", "3", "zv/v4"]);
    assert_eq!(code, 1);
    assert!(out.contains("zv/v4: can not be downgraded; it is already at version 4"), "{out}");
    assert_ne!(d.run("rzfs", &["set", "version=2", "zv/v4"]).0, 0);
    for (fs, v) in [("zv/v1", 5), ("zv/v2", 2), ("zv/v3", 4), ("zv/v4", 4)] {
        assert_eq!(d.ok("rzfs", &["get", "-H", "-o", "value", "version", fs]), format!("{v}\n"), "{fs}");
    }
    // The upgraded file system: a changed old znode becomes SA, new ones are SA.
    let m1 = mnt.join("v1");
    std::fs::set_permissions(m1.join("f"), std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    std::fs::write(m1.join("new"), b"new file").unwrap();
    want.push(("v1/new".into(), b"new file".to_vec()));
    d.ok("rzpool", &["export", "zv"]);
    let out = zdb_check(&dir, "zv");
    assert!(out.contains("zv/v2 [ZPL]"), "{out}");
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "zv/v2"]);
    assert!(dump.contains("bonus  ZFS znode"), "{dump}");
    assert!(dump.contains("VERSION = 2"), "{dump}");
    let dump1 = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "zv/v1"]);
    assert!(dump1.contains("bonus  ZFS znode") && dump1.contains("bonus  System attributes"), "{dump1}");
    assert!(dump1.contains("SA_ATTRS = "), "{dump1}");
    let out_file = dir.join("extracted");
    run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-r", "zv/v1", "big", out_file.to_str().unwrap()]);
    assert!(std::fs::read(&out_file).unwrap() == want[0].1, "zdb -r of a version-1 file");
    import(&d, &dir, "zv", &mnt, false);
    d.ok("rzfs", &["mount", "-a"]);
    for (path, data) in &want {
        assert!(std::fs::read(mnt.join(path)).unwrap() == *data, "{path} after import");
    }
    for v in 1..=4 {
        let m = mnt.join(format!("v{v}"));
        assert_eq!(std::fs::read_link(m.join("d/s")).unwrap().to_str(), Some("/short"));
        assert_eq!(std::fs::read_link(m.join("d/l")).unwrap().to_str(), Some(long_target.as_str()));
        let meta = std::fs::metadata(m.join("big")).unwrap();
        assert_eq!(
            (std::os::unix::fs::MetadataExt::uid(&meta), std::os::unix::fs::MetadataExt::gid(&meta)),
            (1234, 567)
        );
        let x = std::process::Command::new("getfattr")
            .args(["--only-values", "-n", "user.k"])
            .arg(m.join("f"))
            .output()
            .unwrap();
        assert_eq!(x.stdout, b"val", "xattr of version {v}");
    }
    d.ok("rzpool", &["export", "zv"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Checks every `filesystem_count`/`snapshot_count` that is kept (not `none`) against a
/// recount from the names `zfs list` gives: file systems and volumes below, snapshots at
/// and below.
fn check_counts(d: &Daemon, pool: &str) -> usize {
    let names = d.ok("rzfs", &["list", "-H", "-t", "all", "-o", "name", "-r", pool]);
    let names: Vec<&str> = names.lines().collect();
    let below = |n: &str, x: &str| x.starts_with(&format!("{n}/")) || x.starts_with(&format!("{n}@"));
    let mut kept = 0;
    for n in names.iter().filter(|n| !n.contains('@') && !n.contains('#')) {
        let got = d.ok("rzfs", &["get", "-Hp", "-o", "value", "filesystem_count,snapshot_count", n]);
        let got: Vec<&str> = got.lines().collect();
        let fs = names.iter().filter(|x| below(n, x) && !x.contains('@')).count();
        let ss = names.iter().filter(|x| below(n, x) && x.contains('@')).count();
        assert_eq!(got[0] == "none", got[1] == "none", "{n}: both counts kept or neither: {got:?}");
        if got[0] != "none" {
            assert_eq!(got, vec![fs.to_string(), ss.to_string()], "{n}: counts (file systems, snapshots)");
            kept += 1;
        }
    }
    kept
}

#[test]
fn filesystem_and_snapshot_counts() {
    if skip_without_fuse_zdb("filesystem_and_snapshot_counts") {
        return;
    }
    let dir = scratch("fslimits");
    let d = Daemon::new("fslimits");
    let (_devs, _mnt) = create(&d, &dir, "fl", &SINGLE, 256 << 20);
    let sh = |script: &str| {
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("RZFS_SOCKET", &d.sock)
            .env(
                "PATH",
                format!(
                    "{}:/usr/bin:/bin",
                    std::path::Path::new(env!("CARGO_BIN_EXE_rzfs")).parent().unwrap().display()
                ),
            )
            .output()
            .unwrap();
        assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
    };
    for fs in ["fl/a", "fl/a/b", "fl/u"] {
        d.ok("rzfs", &["create", fs]);
    }
    d.ok("rzfs", &["snapshot", "fl/a@s0", "fl/a/b@s1"]);
    assert_eq!(
        get(&d, "filesystem_limit,filesystem_count", &["fl/a"]),
        "fl/a\tfilesystem_limit\tnone\tdefault\nfl/a\tfilesystem_count\tnone\tdefault\n"
    );
    assert_eq!(check_counts(&d, "fl"), 0, "nothing counts before a limit is set");
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "feature@filesystem_limits", "fl"]), "enabled\n");
    // A limit activates the feature and counts the subtree at once.
    d.ok("rzfs", &["set", "filesystem_limit=100", "fl/a"]);
    assert_eq!(d.ok("rzpool", &["get", "-H", "-o", "value", "feature@filesystem_limits", "fl"]), "active\n");
    assert_eq!(
        get(&d, "filesystem_limit,filesystem_count,snapshot_count", &["fl/a"]),
        "fl/a\tfilesystem_limit\t100\tlocal\nfl/a\tfilesystem_count\t1\tlocal\nfl/a\tsnapshot_count\t2\tlocal\n"
    );
    assert_eq!(check_counts(&d, "fl"), 2);
    // New datasets start counted (the feature is active), even outside a limit.
    d.ok("rzfs", &["create", "fl/a/c"]);
    d.ok("rzfs", &["snapshot", "fl/a/c@x"]);
    d.ok("rzfs", &["clone", "fl/a/c@x", "fl/a/cl"]);
    d.ok("rzfs", &["create", "fl/u/n"]);
    assert_eq!(check_counts(&d, "fl"), 5);
    // Renames move counts between chains; promote moves snapshots.
    d.ok("rzfs", &["rename", "fl/a/c", "fl/u/c"]);
    d.ok("rzfs", &["promote", "fl/a/cl"]);
    d.ok("rzfs", &["rename", "fl/u/n", "fl/a/n"]);
    assert_eq!(check_counts(&d, "fl"), 5);
    // Send and receive into the limited tree, full and incremental.
    d.ok("rzfs", &["snapshot", "fl/u/c@y"]);
    sh("rzfs send fl/u/c@y | rzfs receive fl/a/r");
    d.ok("rzfs", &["snapshot", "fl/u/c@z"]);
    sh("rzfs send -i @y fl/u/c@z | rzfs receive fl/a/r");
    assert_eq!(d.ok("rzfs", &["get", "-Hp", "-o", "value", "snapshot_count", "fl/a/r"]), "2\n");
    assert_eq!(check_counts(&d, "fl"), 6);
    // Destroys give them back.
    d.ok("rzfs", &["destroy", "-r", "fl/a/b"]);
    d.ok("rzfs", &["destroy", "fl/a/r@y"]);
    assert_eq!(check_counts(&d, "fl"), 5);
    // `none` is stored as a value; bad values and snapshots are refused.
    d.ok("rzfs", &["set", "snapshot_limit=none", "fl/a"]);
    assert_eq!(get(&d, "snapshot_limit", &["fl/a"]), "fl/a\tsnapshot_limit\tnone\tlocal\n");
    let (code, _, err) = d.run("rzfs", &["set", "filesystem_limit=lots", "fl/a"]);
    assert!(code != 0 && err.contains("bad numeric value"), "{err}");
    let (code, _, _) = d.run("rzfs", &["set", "snapshot_limit=3", "fl/a@s0"]);
    assert!(code != 0);
    // As zfs_do_inherit: a limit is not inherited, a count is read-only.
    let (code, _, err) = d.run("rzfs", &["inherit", "filesystem_limit", "fl/a"]);
    assert!(code != 0 && err.contains("'filesystem_limit' property cannot be inherited"), "{err}");
    let (code, _, err) = d.run("rzfs", &["inherit", "snapshot_count", "fl/a"]);
    assert!(code != 0 && err.contains("snapshot_count property is read-only"), "{err}");
    let (code, _, err) = d.run("rzfs", &["inherit", "quota", "fl/a"]);
    assert!(code != 0 && err.contains("use 'zfs set quota=none' to clear"), "{err}");
    d.ok("rzpool", &["export", "fl"]);
    // OpenZFS reads the counts where it keeps them, in the directories' own ZAPs.
    let dump = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", "fl"]);
    assert!(dump.contains("com.joyent:filesystem_count"), "zdb shows no count field");
    assert!(dump.contains("com.joyent:filesystem_limits = 1"), "feature refcount");
    zdb_check(&dir, "fl");
    d.ok("rzpool", &["import", "-N", "-d", dir.to_str().unwrap(), "fl"]);
    assert_eq!(check_counts(&d, "fl"), 5, "counts survive export and import");
    // A pool without the feature enabled refuses a limit until it is enabled.
    std::fs::create_dir_all(dir.join("np")).unwrap();
    let devs = files(&dir.join("np"), 1, 128 << 20);
    d.ok("rzpool", &["create", "-m", "none", "-o", "feature@filesystem_limits=disabled", "np", &devs[0]]);
    let (code, _, err) = d.run("rzfs", &["set", "filesystem_limit=5", "np"]);
    assert!(code != 0 && err.contains("filesystem_limits"), "{err}");
    d.ok("rzpool", &["set", "feature@filesystem_limits=enabled", "np"]);
    d.ok("rzfs", &["set", "filesystem_limit=5", "np"]);
    assert_eq!(check_counts(&d, "np"), 1);
    d.ok("rzpool", &["export", "np"]);
    d.ok("rzpool", &["export", "fl"]);
    zdb_check(&dir.join("np"), "np");
}

/// `zfs_max_dataset_nesting` from the daemon's tunables directory: names nest less deep
/// than it; raising it admits deeper names, and once it is lowered again a rename may not
/// make such a name deeper, though it may keep its depth (OpenZFS's zfs_rename_014_neg).
#[test]
fn nesting_limit_tunable() {
    if skip_without_fuse_zdb("nesting_limit_tunable") {
        return;
    }
    let dir = scratch("nesting");
    let tun = dir.join("tunables");
    std::fs::create_dir_all(&tun).unwrap();
    let limit = tun.join("zfs_max_dataset_nesting");
    let d = Daemon::with_env("nesting", &[("RZFS_TUNABLES_DIR", tun.to_str().unwrap())]);
    let (_devs, _mnt) = create(&d, &dir, "ns", &SINGLE, 128 << 20);
    // `depth` slashes: the pool name, then `depth` components.
    let name = |first: &str, depth: usize| {
        let mut n = String::from("ns");
        for i in 0..depth {
            n.push('/');
            n.push_str(if i == 0 { first } else { "a" });
        }
        n
    };
    d.ok("rzfs", &["create", "-p", "-u", &name("a", 49)]);
    let (code, _, err) = d.run("rzfs", &["create", "-p", "-u", &name("b", 50)]);
    assert!(code != 0 && err.contains("nesting depth"), "{code} {err}");
    std::fs::write(&limit, "64\n").unwrap();
    d.ok("rzfs", &["create", "-p", "-u", &name("b", 50)]);
    std::fs::write(&limit, "50\n").unwrap();
    // ns/b/a.../a (50) may not get deeper, but may be renamed at its depth or shallower.
    let deep = name("b", 50);
    d.ok("rzfs", &["create", "-u", "ns/p"]);
    let (code, _, err) = d.run("rzfs", &["rename", "-u", "ns/b", "ns/p/b"]);
    assert!(code != 0 && err.contains("nested too deep"), "a rename deeper past the limit: {code} {err}");
    let same = format!("{}/z", deep.rsplit_once('/').unwrap().0);
    d.ok("rzfs", &["rename", "-u", &deep, &same]);
    d.ok("rzfs", &["rename", "-u", "ns/b/a", "ns/c"]);
    let listed = d.ok("rzfs", &["list", "-H", "-o", "name", "-r", "ns/c"]);
    assert_eq!(listed.lines().map(|l| l.matches('/').count()).max(), Some(49), "{listed}");
    d.ok("rzpool", &["export", "ns"]);
    zdb_check(&dir, "ns");
    let _ = std::fs::remove_dir_all(&dir);
}
