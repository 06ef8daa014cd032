//! # Scrub: every copy of every block checked and repaired
//!
//! Through a private rzfsd on file vdevs:
//! * [`scrub_repairs_every_layout`]: on mirrors of 2 and 3, raidz1/2/3 and a stripe of two
//!   mirrors, up to parity devices are damaged (noise over the allocated area, random bit
//!   flips) while the pool is exported; `rzpool scrub -w` repairs it: status says how much,
//!   with 0 errors, and charges CKSUM errors to the damaged devices only. A second scrub
//!   finds nothing, zdb -bcc is clean, and the proof that the repairs are real: with the
//!   *undamaged* devices taken away (as many as the parity allows), every file of the head
//!   and of its snapshot still reads back identical. The damage is seeded
//!   (`RZFS_SCRUB_SEED` replays a run; the seed is printed).
//!   The raidz2 case runs `rzpool resilver` + `rzpool wait -t resilver` instead.
//! * [`scrub_pause_export_resume_cancel`]: a scrub slowed down (`RZFS_SCAN_DELAY_MS`) is
//!   paused, exported in that state (zdb accepts the pool and shows the `scan` entry in
//!   OpenZFS's layout: function, state, paused flag), resumed after import, and finishes;
//!   `scrub -s` cancels; the commands' error messages.
//! * [`scan_suspend_progress_tunable`]: with OpenZFS's `zfs_scan_suspend_progress` set in
//!   the daemon's tunables directory, a scrub stays in progress without issuing anything,
//!   a second one is refused, it pauses and resumes, and it runs to its end once the file
//!   says 0 (zdb clean).
//! * [`scrub_while_writing`]: files written, snapshotted, deleted and snapshots destroyed
//!   while a slow scrub runs; it finishes with 0 errors, a second scrub repairs nothing,
//!   zdb is clean and every file reads back.
//! * [`scrub_reports_unrecoverable`]: one block destroyed on both sides of a mirror (found
//!   with `zdb -ddddd`): the scrub counts an error and `status -v` names the file.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes the workload: files, a snapshot, then changes. Returns the expected contents
/// (path relative to the mount → bytes), including the snapshot's view under
/// `.zfs/snapshot/s1/`.
fn workload(mnt: &Path, d: &Daemon, pool: &str, rng: &mut common::rng::Rng) -> BTreeMap<String, Vec<u8>> {
    let mut want = BTreeMap::new();
    for i in 0..6 {
        let data = rng.data_in(200_000, 3_000_000);
        std::fs::write(mnt.join(format!("f{i}")), &data).unwrap();
        want.insert(format!("f{i}"), data);
    }
    d.ok("rzfs", &["snapshot", &format!("{pool}@s1")]);
    for (k, v) in want.clone() {
        want.insert(format!(".zfs/snapshot/s1/{k}"), v);
    }
    let data = rng.data_in(500_000, 2_000_000);
    std::fs::write(mnt.join("f0"), &data).unwrap();
    want.insert("f0".into(), data);
    std::fs::remove_file(mnt.join("f1")).unwrap();
    want.remove("f1");
    let data = rng.data_in(1_000_000, 4_000_000);
    std::fs::write(mnt.join("late"), &data).unwrap();
    want.insert("late".into(), data);
    d.ok("rzpool", &["sync", pool]);
    want
}

const LAYOUTS: &[Layout] = &[
    Layout { name: "mirror2", words: &["mirror", "{}", "{}"], ndev: 2, groups: &[&[0, 1]], parity: 1 },
    Layout {
        name: "mirror3",
        words: &["mirror", "{}", "{}", "{}"],
        ndev: 3,
        groups: &[&[0, 1, 2]],
        parity: 2,
    },
    Layout {
        name: "raidz1",
        words: &["raidz1", "{}", "{}", "{}"],
        ndev: 3,
        groups: &[&[0, 1, 2]],
        parity: 1,
    },
    Layout {
        name: "raidz2",
        words: &["raidz2", "{}", "{}", "{}", "{}", "{}"],
        ndev: 5,
        groups: &[&[0, 1, 2, 3, 4]],
        parity: 2,
    },
    Layout {
        name: "raidz3",
        words: &["raidz3", "{}", "{}", "{}", "{}", "{}", "{}"],
        ndev: 6,
        groups: &[&[0, 1, 2, 3, 4, 5]],
        parity: 3,
    },
    Layout {
        name: "stripe-mirrors",
        words: &["mirror", "{}", "{}", "mirror", "{}", "{}"],
        ndev: 4,
        groups: &[&[0, 1], &[2, 3]],
        parity: 1,
    },
];

/// The MOS directory's `scan` entry of an exported pool as zdb reads it: (line, words).
fn scan_words(dir: &Path, pool: &str) -> (String, Vec<u64>) {
    let mos_dir = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", pool, "1"]);
    let scan = mos_dir
        .lines()
        .find(|l| l.trim_start().starts_with("scan = "))
        .unwrap_or_else(|| panic!("no scan entry in the MOS directory:\n{mos_dir}"))
        .trim()
        .to_string();
    let words = scan.split('=').nth(1).unwrap().split_whitespace().map(|w| w.parse().unwrap()).collect();
    (scan, words)
}

#[test]
fn scrub_repairs_every_layout() {
    if skip_without_fuse_zdb("scrub_repairs_every_layout") {
        return;
    }
    let mut rng = common::rng::Rng::new(common::rng::env_seed("RZFS_SCRUB_SEED", "scrub"));
    for l in LAYOUTS {
        let pool = format!("sc{}", l.name.replace('-', ""));
        let dir = scratch(&format!("scrub-{}", l.name));
        let d = Daemon::new(&format!("scrub-{}", l.name));
        let (devs, mnt) = create(&d, &dir, &pool, l, 128 << 20);
        let want = workload(&mnt, &d, &pool, &mut rng);
        d.ok("rzpool", &["export", &pool]);

        // Damage up to `parity` devices of each group, on disk, while exported.
        let mut damaged = Vec::new();
        for g in l.groups {
            let mut members: Vec<usize> = g.to_vec();
            for _ in 0..l.parity {
                let i = members.remove(rng.below(members.len() as u64) as usize);
                damaged.push(i);
                let p = Path::new(&devs[i]);
                // Noise over a stretch of the allocated area (data starts at 4 MiB), then
                // bit flips anywhere in the first 24 MiB of it.
                let start = (4 << 20) + rng.below(2 << 20);
                noise(p, start, rng.range(1 << 20, 6 << 20) as usize, &mut rng);
                flips(p, 4 << 20, 28 << 20, 300, &mut rng);
            }
        }
        eprintln!("{}: damaged devices {damaged:?}", l.name);

        import(&d, &dir, &pool, &mnt, false);
        // raidz2 goes through `zpool resilver` (a full scan that rewrites what differs).
        let verb = if l.name == "raidz2" {
            d.ok("rzpool", &["resilver", &pool]);
            d.ok("rzpool", &["wait", "-t", "resilver", &pool]);
            "resilvered"
        } else {
            d.ok("rzpool", &["scrub", "-w", &pool]);
            "scrub repaired"
        };
        let st = d.ok("rzpool", &["status", "-p", &pool]);
        let scan = scan_line(&st);
        let ok = scan.starts_with(&format!("scan: {verb}")) && scan.contains("with 0 errors");
        assert!(ok, "{}:\n{st}", l.name);
        assert!(!scan.starts_with(&format!("scan: {verb} 0B")), "{}: nothing repaired:\n{st}", l.name);
        assert!(st.contains("errors: No known data errors"), "{}:\n{st}", l.name);
        for (i, (r, w, c)) in counters(&st, &devs).into_iter().enumerate() {
            assert_eq!((r, w), (0, 0), "{}: device {i} has I/O errors:\n{st}", l.name);
            if damaged.contains(&i) {
                assert!(c > 0, "{}: damaged device {i} shows no CKSUM errors:\n{st}", l.name);
            } else {
                assert_eq!(c, 0, "{}: undamaged device {i} blamed:\n{st}", l.name);
            }
        }
        // The errors are error reports too: checksum ereports of the damaged devices only
        // (every one of them, unless the bounded queue dropped its oldest reports).
        let ev = d.ok("rzpool", &["events", "-v", &pool]);
        let reported: std::collections::BTreeSet<usize> = ev
            .split("\n\n")
            .filter(|e| e.contains("class = \"ereport.fs.zfs.checksum\""))
            .map(|e| {
                let i = devs.iter().position(|p| e.contains(&format!("vdev_path = \"{p}\"")));
                i.unwrap_or_else(|| panic!("{}: checksum ereport of no leaf:\n{e}", l.name))
            })
            .collect();
        assert!(
            !reported.is_empty() && reported.iter().all(|i| damaged.contains(i)),
            "{}: {reported:?}\n{ev}",
            l.name
        );
        assert!(ev.contains("dropped ") || reported.len() == damaged.len(), "{}: {reported:?}\n{ev}", l.name);
        // Everything was repaired: a second scrub finds nothing.
        d.ok("rzpool", &["clear", &pool]);
        d.ok("rzpool", &["scrub", "-w", &pool]);
        let st = d.ok("rzpool", &["status", "-p", &pool]);
        assert!(scan_line(&st).starts_with("scan: scrub repaired 0B"), "{}: second scrub:\n{st}", l.name);
        assert!(counters(&st, &devs).iter().all(|&c| c == (0, 0, 0)), "{}: second scrub:\n{st}", l.name);
        check_files(&mnt, &want, l.name, false);
        d.ok("rzpool", &["export", &pool]);
        zdb_check(&dir, &pool);

        // The repaired copies are real: take the undamaged devices away (as many as each
        // group can lose) and read everything back from what is left.
        let aside = dir.join("aside");
        std::fs::create_dir_all(&aside).unwrap();
        for g in l.groups {
            for &i in g.iter().filter(|i| !damaged.contains(i)).take(l.parity) {
                let p = Path::new(&devs[i]);
                std::fs::rename(p, aside.join(p.file_name().unwrap())).unwrap();
            }
        }
        import(&d, &dir, &pool, &mnt, true);
        check_files(&mnt, &want, &format!("{} without its undamaged devices", l.name), true);
        d.ok("rzpool", &["export", &pool]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn scrub_pause_export_resume_cancel() {
    if skip_without_fuse_zdb("scrub_pause_export_resume_cancel") {
        return;
    }
    let mut rng = common::rng::Rng::new(7);
    let dir = scratch("scrub-pause");
    let d = Daemon::with_env("scrub-pause", &[("RZFS_SCAN_BATCH", "8"), ("RZFS_SCAN_DELAY_MS", "250")]);
    let l = &LAYOUTS[0];
    let (_devs, mnt) = create(&d, &dir, "pz", l, 128 << 20);
    let want = workload(&mnt, &d, "pz", &mut rng);

    let (code, _, err) = d.run("rzpool", &["scrub", "-s", "pz"]);
    assert!(code != 0 && err.contains("there is no active scrub"), "{code} {err}");
    d.ok("rzpool", &["scrub", "pz"]);
    let (code, _, err) = d.run("rzpool", &["scrub", "pz"]);
    assert!(code != 0 && err.contains("currently scrubbing"), "{code} {err}");
    std::thread::sleep(std::time::Duration::from_millis(600));
    let st = d.ok("rzpool", &["status", "pz"]);
    assert!(st.contains("scan: scrub in progress since") && st.contains("scanned"), "{st}");
    d.ok("rzpool", &["scrub", "-p", "pz"]);
    let st = d.ok("rzpool", &["status", "pz"]);
    assert!(st.contains("scan: scrub paused since") && st.contains("scrub started on"), "{st}");
    let (code, _, err) = d.run("rzpool", &["scrub", "-p", "pz"]);
    assert!(code != 0 && err.contains("already paused"), "{code} {err}");

    // Exported paused: OpenZFS sees a paused scrub in its own layout.
    d.ok("rzpool", &["export", "pz"]);
    zdb_check(&dir, "pz");
    let (scan, words) = scan_words(&dir, "pz");
    assert_eq!(words.len(), 24, "{scan}");
    assert_eq!((words[0], words[1]), (1, 1), "scrub, scanning: {scan}");
    assert_ne!(words[2], 0, "a queue object: {scan}");
    assert_eq!(words[23] & 2, 2, "DSF_SCRUB_PAUSED: {scan}");
    assert!(words[10] > 0 && words[10] < words[9], "examined part of to_examine: {scan}");

    // Imported again: still paused; `scrub` resumes it where it stood.
    import(&d, &dir, "pz", &mnt, false);
    let st = d.ok("rzpool", &["status", "pz"]);
    assert!(st.contains("scan: scrub paused since"), "{st}");
    d.ok("rzpool", &["scrub", "pz"]);
    let st = d.ok("rzpool", &["status", "pz"]);
    assert!(st.contains("scan: scrub in progress since"), "{st}");
    d.ok("rzpool", &["wait", "-t", "scrub", "pz"]);
    let st = d.ok("rzpool", &["status", "pz"]);
    assert!(scan_line(&st).starts_with("scan: scrub repaired 0B in") && st.contains("with 0 errors"), "{st}");
    check_files(&mnt, &want, "after the resumed scrub", false);

    // Cancel.
    d.ok("rzpool", &["scrub", "pz"]);
    d.ok("rzpool", &["scrub", "-s", "pz"]);
    let st = d.ok("rzpool", &["status", "pz"]);
    assert!(scan_line(&st).starts_with("scan: scrub canceled on"), "{st}");
    d.ok("rzpool", &["sync", "pz"]);
    let hist = d.ok("rzpool", &["history", "pz"]);
    assert!(hist.contains("rzpool scrub -p pz") && hist.contains("rzpool scrub -s pz"), "{hist}");
    d.ok("rzpool", &["export", "pz"]);
    let (scan, words) = scan_words(&dir, "pz");
    assert_eq!((words[1], words[2]), (3, 0), "canceled, queue object freed: {scan}");
    zdb_check(&dir, "pz");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scan_suspend_progress_tunable() {
    if skip_without_fuse_zdb("scan_suspend_progress_tunable") {
        return;
    }
    let mut rng = common::rng::Rng::new(11);
    let dir = scratch("scrub-tunable");
    let tun = dir.join("tunables");
    std::fs::create_dir_all(&tun).unwrap();
    let suspend = tun.join("zfs_scan_suspend_progress");
    std::fs::write(&suspend, "1\n").unwrap();
    let d = Daemon::with_env("scrub-tunable", &[("RZFS_TUNABLES_DIR", tun.to_str().unwrap())]);
    let (_devs, mnt) = create(&d, &dir, "sz", &LAYOUTS[0], 128 << 20);
    let want = workload(&mnt, &d, "sz", &mut rng);

    d.ok("rzpool", &["scrub", "sz"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let st = d.ok("rzpool", &["status", "sz"]);
    assert!(st.contains("scan: scrub in progress since"), "held open: {st}");
    assert!(
        st.contains("\t0B / ") && st.contains(", 0B / "),
        "nothing scanned or issued while suspended: {st}"
    );
    let (code, _, err) = d.run("rzpool", &["scrub", "sz"]);
    assert!(code != 0 && err.contains("currently scrubbing"), "{code} {err}");
    d.ok("rzpool", &["scrub", "-p", "sz"]);
    assert!(d.ok("rzpool", &["status", "sz"]).contains("scan: scrub paused since"));
    d.ok("rzpool", &["scrub", "sz"]);
    assert!(d.ok("rzpool", &["status", "sz"]).contains("scan: scrub in progress since"));

    std::fs::write(&suspend, "0\n").unwrap();
    d.ok("rzpool", &["wait", "-t", "scrub", "sz"]);
    let st = d.ok("rzpool", &["status", "sz"]);
    assert!(scan_line(&st).starts_with("scan: scrub repaired 0B in") && st.contains("with 0 errors"), "{st}");
    check_files(&mnt, &want, "after the held scrub", false);
    d.ok("rzpool", &["export", "sz"]);
    zdb_check(&dir, "sz");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scrub_while_writing() {
    if skip_without_fuse_zdb("scrub_while_writing") {
        return;
    }
    let mut rng = common::rng::Rng::new(11);
    let dir = scratch("scrub-busy");
    let d = Daemon::with_env(
        "scrub-busy",
        &[("RZFS_SCAN_BATCH", "16"), ("RZFS_SCAN_DELAY_MS", "20"), ("RZFS_TXG_TIMEOUT", "1")],
    );
    let l = &LAYOUTS[2];
    let (_devs, mnt) = create(&d, &dir, "busy", l, 256 << 20);
    let mut want = workload(&mnt, &d, "busy", &mut rng);
    d.ok("rzpool", &["scrub", "busy"]);
    let mut round = 0;
    loop {
        round += 1;
        let name = format!("w{round}");
        let data = rng.data_in(100_000, 1_500_000);
        std::fs::write(mnt.join(&name), &data).unwrap();
        want.insert(name, data);
        if round % 3 == 0 {
            let victim = want.keys().find(|k| k.starts_with('w')).cloned().unwrap();
            std::fs::remove_file(mnt.join(&victim)).unwrap();
            want.remove(&victim);
        }
        if round % 4 == 0 {
            d.ok("rzfs", &["snapshot", &format!("busy@r{round}")]);
        }
        if round % 8 == 0 {
            d.ok("rzfs", &["destroy", &format!("busy@r{}", round - 4)]);
        }
        d.ok("rzpool", &["sync", "busy"]);
        let st = d.ok("rzpool", &["status", "busy"]);
        if !st.contains("scrub in progress") || round > 400 {
            assert!(scan_line(&st).contains("with 0 errors"), "round {round}:\n{st}");
            break;
        }
    }
    assert!(round > 2, "the scrub ended before the writes began ({round} rounds)");
    d.ok("rzpool", &["scrub", "-w", "busy"]);
    let st = d.ok("rzpool", &["status", "busy"]);
    assert!(
        scan_line(&st).starts_with("scan: scrub repaired 0B") && st.contains("No known data errors"),
        "{st}"
    );
    check_files(&mnt, &want, "after scrubbing while writing", false);
    d.ok("rzpool", &["export", "busy"]);
    zdb_check(&dir, "busy");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scrub_reports_unrecoverable() {
    if skip_without_fuse_zdb("scrub_reports_unrecoverable") {
        return;
    }
    let mut rng = common::rng::Rng::new(13);
    let dir = scratch("scrub-lost");
    let d = Daemon::new("scrub-lost");
    let (devs, mnt) = create(&d, &dir, "lost", &LAYOUTS[0], 128 << 20);
    let data = rng.data(1 << 20);
    std::fs::write(mnt.join("victim"), &data).unwrap();
    std::fs::write(mnt.join("bystander"), rng.data(300_000)).unwrap();
    let obj = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mnt.join("victim")).unwrap().ino()
    };
    d.ok("rzpool", &["export", "lost"]);
    // Where the victim's first block lives (DVA of its first level-0 block).
    let (offset, asize) = first_l0_dva(&dir, "lost/", obj);
    for dev in &devs {
        noise(Path::new(dev), (4 << 20) + offset, asize as usize, &mut rng);
    }
    import(&d, &dir, "lost", &mnt, false);
    d.ok("rzpool", &["scrub", "-w", "lost"]);
    let st = d.ok("rzpool", &["status", "-v", "lost"]);
    assert!(scan_line(&st).contains("with 1 errors"), "{st}");
    assert!(st.contains("errors: Permanent errors have been detected") && st.contains("/victim"), "{st}");
    assert!(!st.contains("bystander"), "{st}");
    assert!(std::fs::read(mnt.join("victim")).is_err(), "a lost block must not read");
    d.ok("rzpool", &["export", "lost"]);
    let _ = std::fs::remove_dir_all(&dir);
}
