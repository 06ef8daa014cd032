//! # Resilver by DTL: devices that miss writes catch up on exactly what they missed
//!
//! Through a private rzfsd on file vdevs, each case checked by OpenZFS's zdb:
//! * [`offline_online_resilvers_what_was_missed`]: on a mirror, a raidz1 and a raidz2, one
//!   device (chosen by the seed, `RZFS_RESILVER_SEED`) is taken offline, files are written,
//!   changed, deleted and snapshotted, the pool is exported and imported (the offline state
//!   and the device's DTL persist: zdb shows both in the config), the device is brought
//!   online and resilvers: less than the pool holds, 0 errors, no device blamed. Then the
//!   *other* devices, as many as the parity allows, are taken away and every file, the
//!   snapshot's too, reads back from what is left: the resilvered device holds the data.
//! * [`offline_rules`]: no offline without valid replicas (a single disk; the only
//!   complete side of a mirror), `-t` lasts until the next import (whose resilver then
//!   runs by itself), unknown devices and interior vdevs refused with zpool's messages;
//!   `zpool history -i` and `zpool events` record what the pool did.
//! * [`faulted_device_resilvers_after_clear`]: a raidz1 leaf failing every write is
//!   faulted while writes go on (a `statechange` event says so); `zpool clear` brings it
//!   back and resilvers it.
//! * [`absent_device_resilvers_at_import`]: a mirror leg missing for a whole import comes
//!   back at the next one: the import resilvers it without charging it checksum errors
//!   (its older uberblocks tell which txgs it missed), and it alone then holds every file.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::collections::BTreeMap;

const LAYOUTS: &[Layout] = &[
    Layout { name: "mirror2", words: &["mirror", "{}", "{}"], ndev: 2, groups: &[&[0, 1]], parity: 1 },
    Layout {
        name: "raidz1",
        words: &["raidz1", "{}", "{}", "{}", "{}"],
        ndev: 4,
        groups: &[&[0, 1, 2, 3]],
        parity: 1,
    },
    Layout {
        name: "raidz2",
        words: &["raidz2", "{}", "{}", "{}", "{}", "{}"],
        ndev: 5,
        groups: &[&[0, 1, 2, 3, 4]],
        parity: 2,
    },
];

#[test]
fn offline_online_resilvers_what_was_missed() {
    if skip_without_fuse_zdb("offline_online_resilvers_what_was_missed") {
        return;
    }
    let mut rng = common::rng::Rng::new(common::rng::env_seed("RZFS_RESILVER_SEED", "resilver"));
    for l in LAYOUTS {
        let pool = format!("rs{}", l.name);
        let dir = scratch(&format!("resilver-{}", l.name));
        let d = Daemon::new(&format!("resilver-{}", l.name));
        let (devs, mnt) = create(&d, &dir, &pool, l, 128 << 20);
        let mut want = BTreeMap::new();
        write_files(&mnt, "a", 8, 100_000..2_000_000, &mut rng, &mut want);
        d.ok("rzpool", &["sync", &pool]);

        let k = rng.below(l.ndev as u64) as usize;
        d.ok("rzpool", &["offline", &pool, &devs[k]]);
        let st = d.ok("rzpool", &["status", &pool]);
        assert_eq!(dev_state(&st, &devs[k]), "OFFLINE", "{}:\n{st}", l.name);
        assert!(st.contains("state: DEGRADED") && st.contains("taken offline by the administrator"), "{st}");

        // Writes while it is away: new files, a changed one, a deleted one, a snapshot.
        write_files(&mnt, "b", 4, 100_000..2_000_000, &mut rng, &mut want);
        d.ok("rzfs", &["snapshot", &format!("{pool}@while")]);
        for (k2, v) in want.clone() {
            want.insert(format!(".zfs/snapshot/while/{k2}"), v);
        }
        let data = rng.data_in(300_000, 1_500_000);
        std::fs::write(mnt.join("a0"), &data).unwrap();
        want.insert("a0".into(), data);
        std::fs::remove_file(mnt.join("a1")).unwrap();
        want.remove("a1");
        d.ok("rzpool", &["sync", &pool]);

        // The offline state and the DTL are in the configuration OpenZFS reads.
        d.ok("rzpool", &["export", &pool]);
        zdb_check(&dir, &pool);
        let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", &pool]);
        let leaf = cfg.split("children[").find(|c| c.contains(&format!("path: '{}'", devs[k]))).unwrap();
        assert!(leaf.contains("offline: 1") && leaf.contains("DTL: "), "{}: leaf config:\n{cfg}", l.name);
        let ddd = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddd", &pool]);
        assert!(ddd.contains("Dirty time logs:") && ddd.contains("missing"), "{}: zdb DTLs:\n{ddd}", l.name);

        import(&d, &dir, &pool, &mnt, false);
        let st = d.ok("rzpool", &["status", &pool]);
        assert_eq!(dev_state(&st, &devs[k]), "OFFLINE", "{}: offline across import:\n{st}", l.name);
        let total = allocated(&d, &pool);
        d.ok("rzpool", &["online", &pool, &devs[k]]);
        d.ok("rzpool", &["wait", "-t", "resilver", &pool]);
        let st = d.ok("rzpool", &["status", "-p", &pool]);
        assert!(
            scan_line(&st).contains("with 0 errors") && st.contains("state: ONLINE"),
            "{}:\n{st}",
            l.name
        );
        let r = resilvered(&st);
        assert!(r > 0 && r < total, "{}: resilvered {r} of {total} allocated:\n{st}", l.name);
        assert!(counters(&st, &devs).iter().all(|&c| c == (0, 0, 0)), "{}: devices blamed:\n{st}", l.name);
        eprintln!("{}: resilvered {r} bytes of {total} allocated", l.name);
        check_files(&mnt, &want, l.name, false);
        d.ok("rzpool", &["export", &pool]);
        zdb_check(&dir, &pool);

        // The onlined device really holds what it missed: read without the others.
        let others: Vec<usize> = l.groups[0].iter().copied().filter(|&i| i != k).take(l.parity).collect();
        set_aside(&dir, &devs, &others);
        import(&d, &dir, &pool, &mnt, true);
        check_files(&mnt, &want, &format!("{} without {others:?}", l.name), true);
        d.ok("rzpool", &["export", &pool]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn offline_rules() {
    if skip_without_fuse_zdb("offline_rules") {
        return;
    }
    let mut rng = common::rng::Rng::new(17);
    let dir = scratch("offline-rules");
    let d = Daemon::new("offline-rules");
    let (devs, mnt) = create(&d, &dir, "or", &LAYOUTS[0], 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "x", 3, 100_000..2_000_000, &mut rng, &mut want);

    // Names zpool refuses.
    let (code, _, err) = d.run("rzpool", &["offline", "or", "/nonexistent"]);
    assert!(code != 0 && err.contains("no such device in pool"), "{err}");
    let (code, _, err) = d.run("rzpool", &["offline", "or", "mirror-0"]);
    assert!(code != 0 && err.contains("operation not supported"), "{err}");

    // -t: offline until the next import, whose resilver catches the device up.
    d.ok("rzpool", &["offline", "-t", "or", &devs[0]]);
    write_files(&mnt, "t", 3, 100_000..2_000_000, &mut rng, &mut want);
    // The only complete side may not go.
    let (code, _, err) = d.run("rzpool", &["offline", "or", &devs[1]]);
    assert!(code != 0 && err.contains("no valid replicas"), "{code} {err}");
    d.ok("rzpool", &["export", "or"]);
    import(&d, &dir, "or", &mnt, false);
    d.ok("rzpool", &["wait", "-t", "resilver", "or"]);
    let st = d.ok("rzpool", &["status", "or"]);
    assert_eq!(dev_state(&st, &devs[0]), "ONLINE", "{st}");
    assert!(scan_line(&st).starts_with("scan: resilvered") && st.contains("with 0 errors"), "{st}");

    // Persistent offline, more writes; d1 is now required, d0 is not.
    d.ok("rzpool", &["offline", "or", &devs[0]]);
    write_files(&mnt, "p", 2, 100_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "or"]);
    let (code, _, err) = d.run("rzpool", &["offline", "or", &devs[1]]);
    assert!(code != 0 && err.contains("no valid replicas"), "{err}");
    // By file name, as zpool also accepts.
    d.ok("rzpool", &["online", "or", "d0"]);
    d.ok("rzpool", &["wait", "or"]);
    // Once resilvered, either side may go.
    d.ok("rzpool", &["offline", "or", &devs[1]]);
    check_files(&mnt, &want, "with d1 offline", false);
    d.ok("rzpool", &["online", "or", &devs[1]]);
    d.ok("rzpool", &["wait", "or"]);
    let hist = d.ok("rzpool", &["history", "or"]);
    assert!(hist.contains("rzpool offline -t or") && hist.contains("rzpool online or d0"), "{hist}");
    assert!(!hist.contains("scan setup"), "internal events only with -i:\n{hist}");
    // What the pool did, in OpenZFS's internal-history and event forms.
    d.ok("rzpool", &["sync", "or"]);
    let hist = d.ok("rzpool", &["history", "-i", "or"]);
    assert!(hist.contains("] scan setup func=2 mintxg=") && hist.contains("] scan done errors=0"), "{hist}");
    let ev = d.ok("rzpool", &["events", "or"]);
    for class in ["pool_create", "resilver_start", "resilver_finish", "vdev_online", "pool_import"] {
        assert!(ev.contains(&format!("sysevent.fs.zfs.{class}")), "no {class} event:\n{ev}");
    }
    let ev = d.ok("rzpool", &["events", "-v", "or"]);
    assert!(
        ev.contains("        class = \"sysevent.fs.zfs.vdev_online\"") && ev.contains("vdev_path = "),
        "{ev}"
    );
    assert!(d.ok("rzpool", &["events", "-c"]).starts_with("cleared "));
    assert_eq!(d.ok("rzpool", &["events", "-H"]), "");
    // `events -f` prints what comes, once each, under one header, until killed.
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_rzpool"))
        .args(["events", "-f", "or"])
        .env("RZFS_SOCKET", &d.sock)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
        text
    });
    std::thread::sleep(std::time::Duration::from_millis(700));
    d.ok("rzpool", &["offline", "-t", "or", &devs[1]]);
    std::thread::sleep(std::time::Duration::from_millis(700));
    d.ok("rzpool", &["online", "or", &devs[1]]);
    d.ok("rzpool", &["wait", "or"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    follow.kill().unwrap();
    let _ = follow.wait();
    let seen = reader.join().unwrap();
    assert_eq!(seen.matches("CLASS").count(), 1, "{seen}");
    assert_eq!(seen.matches("sysevent.fs.zfs.vdev_online").count(), 1, "{seen}");
    let state = seen.find("resource.fs.zfs.statechange").unwrap_or_else(|| panic!("{seen}"));
    assert!(state < seen.find("sysevent.fs.zfs.vdev_online").unwrap(), "{seen}");
    d.ok("rzpool", &["export", "or"]);
    zdb_check(&dir, "or");

    // A single disk has nothing to spare.
    let one = dir.join("one");
    std::fs::create_dir_all(&one).unwrap();
    let dev = files(&one, 1, 128 << 20);
    d.ok("rzpool", &["create", "-m", "none", "single", &dev[0]]);
    let (code, _, err) = d.run("rzpool", &["offline", "single", &dev[0]]);
    assert!(code != 0 && err.contains("no valid replicas"), "{err}");
    // Nothing to grow into: `online -e` changes nothing (tests/expand.rs grows pools).
    let size = d.ok("rzpool", &["list", "-Hp", "-o", "size", "single"]);
    d.ok("rzpool", &["online", "-e", "single", &dev[0]]);
    assert_eq!(d.ok("rzpool", &["list", "-Hp", "-o", "size", "single"]), size);
    d.ok("rzpool", &["export", "single"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn faulted_device_resilvers_after_clear() {
    if skip_without_fuse_zdb("faulted_device_resilvers_after_clear") {
        return;
    }
    let mut rng = common::rng::Rng::new(23);
    let dir = scratch("fault-clear");
    let d = Daemon::new("fault-clear");
    let (devs, mnt) = create(&d, &dir, "fc", &LAYOUTS[1], 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 4, 100_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "fc"]);
    d.ok("rzinject", &["-d", &devs[2], "-e", "io", "-T", "write", "fc"]);
    write_files(&mnt, "b", 4, 100_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "fc"]);
    write_files(&mnt, "c", 2, 100_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "fc"]);
    let st = d.ok("rzpool", &["status", "fc"]);
    assert_eq!(dev_state(&st, &devs[2]), "FAULTED", "{st}");
    // The fault is an event too (resource.fs.zfs.statechange, vdev_state 5 = FAULTED).
    let t0 = std::time::Instant::now();
    let ev = loop {
        let ev = d.ok("rzpool", &["events", "-v", "fc"]);
        if ev.contains("resource.fs.zfs.statechange") || t0.elapsed().as_secs() > 5 {
            break ev;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(ev.contains("resource.fs.zfs.statechange") && ev.contains("vdev_state = 0x5"), "{ev}");
    // Before it, the failed write's error report: an I/O ereport (zio_err EIO) of that leaf.
    let io = ev.find("ereport.fs.zfs.io").unwrap_or_else(|| panic!("no io ereport:\n{ev}"));
    assert!(io < ev.find("resource.fs.zfs.statechange").unwrap(), "{ev}");
    let report = &ev[io..];
    let report = &report[..report.find("eid = ").unwrap()];
    assert!(report.contains(&format!("vdev_path = \"{}\"", devs[2])), "{report}");
    assert!(report.contains("zio_err = 0x5") && report.contains("zio_type = 0x2"), "{report}");
    assert!(report.contains("parent_type = \"raidz\"") && report.contains("zio_offset = "), "{report}");
    d.ok("rzinject", &["-c", "all"]);
    d.ok("rzpool", &["clear", "fc"]);
    d.ok("rzpool", &["wait", "-t", "resilver", "fc"]);
    let st = d.ok("rzpool", &["status", "-p", "fc"]);
    assert!(st.contains("state: ONLINE") && scan_line(&st).contains("with 0 errors"), "{st}");
    assert!(resilvered(&st) > 0, "{st}");
    assert!(counters(&st, &devs).iter().all(|&c| c.2 == 0), "{st}");
    d.ok("rzpool", &["export", "fc"]);
    zdb_check(&dir, "fc");
    set_aside(&dir, &devs, &[0]);
    import(&d, &dir, "fc", &mnt, true);
    check_files(&mnt, &want, "raidz1 without d0 after the fault", false);
    d.ok("rzpool", &["export", "fc"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn absent_device_resilvers_at_import() {
    if skip_without_fuse_zdb("absent_device_resilvers_at_import") {
        return;
    }
    let mut rng = common::rng::Rng::new(29);
    let dir = scratch("absent");
    let d = Daemon::new("absent");
    let l = Layout {
        name: "mirror3",
        words: &["mirror", "{}", "{}", "{}"],
        ndev: 3,
        groups: &[&[0, 1, 2]],
        parity: 2,
    };
    let (devs, mnt) = create(&d, &dir, "ab", &l, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 3, 100_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "ab"]);
    set_aside(&dir, &devs, &[2]);
    import(&d, &dir, "ab", &mnt, false);
    write_files(&mnt, "b", 4, 100_000..2_000_000, &mut rng, &mut want);
    std::fs::remove_file(mnt.join("a0")).unwrap();
    want.remove("a0");
    d.ok("rzpool", &["export", "ab"]);
    bring_back(&dir, &devs, &[2]);
    import(&d, &dir, "ab", &mnt, false);
    d.ok("rzpool", &["wait", "-t", "resilver", "ab"]);
    let st = d.ok("rzpool", &["status", "-p", "ab"]);
    assert!(scan_line(&st).starts_with("scan: resilvered") && st.contains("state: ONLINE"), "{st}");
    assert!(counters(&st, &devs).iter().all(|&c| c == (0, 0, 0)), "the returning device was blamed:\n{st}");
    d.ok("rzpool", &["export", "ab"]);
    zdb_check(&dir, "ab");
    set_aside(&dir, &devs, &[0, 1]);
    import(&d, &dir, "ab", &mnt, true);
    check_files(&mnt, &want, "mirror3 from the returned device alone", false);
    d.ok("rzpool", &["export", "ab"]);
    let _ = std::fs::remove_dir_all(&dir);
}
