//! # Replacing devices: replace, attach, detach
//!
//! Through a private rzfsd on file vdevs, each pool checked by OpenZFS's zdb:
//! * [`replace_a_missing_device`]: a raidz2 leaf vanishes; `zpool replace` with a new file
//!   resilvers it (status shows `replacing-1` and `(resilvering)` meanwhile, slowed down so
//!   it can be seen, and an export in the middle resumes at import); the old leaf is
//!   detached at the end. Then two *other* devices are taken away: every file reads back
//!   from what is left, so the new device holds its share.
//! * [`replace_by_the_device_at_the_same_path`]: a raidz1 leaf's file is replaced by a
//!   blank one while the pool is exported; `zpool replace POOL DEV` rebuilds it in place.
//! * [`attach_and_detach`]: a single disk becomes a mirror (attach), a three-way mirror, and
//!   loses its original devices (detach) down to the attached one, which alone holds every
//!   file; the leaf left alone takes over the mirror's guid, so the labels keep naming
//!   the same top-level vdev (OpenZFS's `vdev_remove_parent`).
//! * [`replace_is_done_when_the_wait_returns`]: with no periodic sync to help
//!   (`RZFS_TXG_TIMEOUT=3600`), `zpool wait -t resilver` after a replace, and `replace -w`,
//!   return with the old device already detached, in `status` and in the new device's
//!   label (the detach is synced, as OpenZFS's `spa_vdev_resilver_done` does; found by the
//!   fault atlas, where `status` showed `replacing-N` until the next txg).
//! * [`refusals`]: what zpool refuses, with its messages.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The top-level vdev's guid in zdb's view of the exported pool's config.
fn top_guid(dir: &Path, pool: &str) -> String {
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", pool]);
    let top = cfg.split("children[0]:").nth(1).unwrap_or_else(|| panic!("no children[0]:\n{cfg}"));
    top.lines().find(|l| l.trim_start().starts_with("guid:")).unwrap().trim().to_string()
}

fn leaf_lines(status: &str) -> Vec<String> {
    status
        .lines()
        .filter(|l| l.trim_start().starts_with('/') || l.trim_start().starts_with("replacing-"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn replace_a_missing_device() {
    if skip_without_fuse_zdb("replace_a_missing_device") {
        return;
    }
    let mut rng = common::rng::Rng::new(31);
    let dir = scratch("replace-missing");
    let d = Daemon::with_env("replace-missing", &[("RZFS_SCAN_BATCH", "16"), ("RZFS_SCAN_DELAY_MS", "100")]);
    let l = Layout {
        name: "raidz2",
        words: &["raidz2", "{}", "{}", "{}", "{}", "{}"],
        ndev: 5,
        groups: &[&[0, 1, 2, 3, 4]],
        parity: 2,
    };
    let (devs, mnt) = create(&d, &dir, "rm", &l, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 6, 200_000..2_500_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rm@s"]);
    for (k, v) in want.clone() {
        want.insert(format!(".zfs/snapshot/s/{k}"), v);
    }
    write_files(&mnt, "b", 2, 200_000..2_500_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "rm"]);
    set_aside(&dir, &devs, &[1]);
    import(&d, &dir, "rm", &mnt, false);
    let st = d.ok("rzpool", &["status", "rm"]);
    assert!(st.contains("state: DEGRADED") && st.contains("cannot open"), "{st}");
    let new = blank(&dir, "new", 1).remove(0);
    d.ok("rzpool", &["replace", "rm", &devs[1], &new]);
    let st = d.ok("rzpool", &["status", "rm"]);
    assert!(st.contains("replacing-1") && st.contains("resilver in progress"), "{st}");
    assert!(st.contains("currently being resilvered"), "{st}");
    // An export in the middle: zdb reads the replacing vdev; the import resumes.
    d.ok("rzpool", &["export", "rm"]);
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "rm"]);
    assert!(cfg.contains("type: 'replacing'") && cfg.contains(&new), "{cfg}");
    zdb_check(&dir, "rm");
    import(&d, &dir, "rm", &mnt, false);
    d.ok("rzpool", &["wait", "-t", "replace", "rm"]);
    let st = d.ok("rzpool", &["status", "-p", "rm"]);
    assert!(st.contains("state: ONLINE") && scan_line(&st).contains("with 0 errors"), "{st}");
    let mut all = devs.clone();
    all[1] = new.clone();
    assert_eq!(leaf_lines(&st), all, "the old device is detached:\n{st}");
    assert!(counters(&st, &all).iter().all(|&c| c == (0, 0, 0)), "{st}");
    check_files(&mnt, &want, "after the replace", false);
    d.ok("rzpool", &["export", "rm"]);
    zdb_check(&dir, "rm");
    // The new device holds its share: two others may go.
    set_aside(&dir, &devs, &[0, 3]);
    import(&d, &dir, "rm", &mnt, true);
    check_files(&mnt, &want, "raidz2 without d0 and d3 after replacing d1", true);
    d.ok("rzpool", &["export", "rm"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replace_by_the_device_at_the_same_path() {
    if skip_without_fuse_zdb("replace_by_the_device_at_the_same_path") {
        return;
    }
    let mut rng = common::rng::Rng::new(37);
    let dir = scratch("replace-same");
    let d = Daemon::new("replace-same");
    let (devs, mnt) = create(&d, &dir, "rs", &RAIDZ1, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 6, 200_000..2_500_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "rs"]);
    // The disk is swapped for a blank one at the same place.
    std::fs::remove_file(&devs[0]).unwrap();
    std::fs::File::create(&devs[0]).unwrap().set_len(128 << 20).unwrap();
    import(&d, &dir, "rs", &mnt, false);
    d.ok("rzpool", &["replace", "-w", "rs", &devs[0]]);
    let st = d.ok("rzpool", &["status", "-p", "rs"]);
    assert!(st.contains("state: ONLINE") && scan_line(&st).starts_with("scan: resilvered"), "{st}");
    assert_eq!(leaf_lines(&st), devs, "{st}");
    d.ok("rzpool", &["export", "rs"]);
    zdb_check(&dir, "rs");
    set_aside(&dir, &devs, &[1]);
    import(&d, &dir, "rs", &mnt, true);
    check_files(&mnt, &want, "raidz1 without d1 after rebuilding d0 in place", false);
    d.ok("rzpool", &["export", "rs"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn attach_and_detach() {
    if skip_without_fuse_zdb("attach_and_detach") {
        return;
    }
    let mut rng = common::rng::Rng::new(41);
    let dir = scratch("attach");
    let d = Daemon::new("attach");
    let l = Layout { name: "single", words: &["{}"], ndev: 1, groups: &[&[0]], parity: 0 };
    let (devs, mnt) = create(&d, &dir, "at", &l, 128 << 20);
    let extra = blank(&dir, "more", 2);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 5, 200_000..2_500_000, &mut rng, &mut want);
    d.ok("rzpool", &["attach", "-w", "at", &devs[0], &extra[0]]);
    let st = d.ok("rzpool", &["status", "at"]);
    assert!(st.contains("mirror-0") && scan_line(&st).starts_with("scan: resilvered"), "{st}");
    write_files(&mnt, "b", 2, 200_000..2_500_000, &mut rng, &mut want);
    d.ok("rzpool", &["attach", "-w", "at", &extra[0], &extra[1]]);
    assert_eq!(
        leaf_lines(&d.ok("rzpool", &["status", "at"])),
        vec![devs[0].clone(), extra[0].clone(), extra[1].clone()]
    );
    d.ok("rzpool", &["export", "at"]);
    zdb_check(&dir, "at");
    // The mirror is the top-level vdev now (a guid of its own, as OpenZFS's
    // vdev_add_parent gives it); its last leaf will inherit that guid.
    let guid = top_guid(&dir, "at");
    import(&d, &dir, "at", &mnt, false);
    d.ok("rzpool", &["detach", "at", &devs[0]]);
    d.ok("rzpool", &["detach", "at", &extra[0]]);
    let st = d.ok("rzpool", &["status", "at"]);
    assert!(!st.contains("mirror-0") && leaf_lines(&st) == vec![extra[1].clone()], "{st}");
    check_files(&mnt, &want, "on the attached device alone", false);
    d.ok("rzpool", &["export", "at"]);
    zdb_check(&dir, "at");
    assert_eq!(top_guid(&dir, "at"), guid, "the top-level vdev keeps its guid");
    // A detached device no longer belongs to the pool: as OpenZFS's detach, it keeps its
    // config at txg 0, which no import assembles (the imports below find the pool without
    // it) and which the attach below may overwrite without -f.
    let top = run_zdb(&["-l", &devs[0]]);
    assert!(top.contains("name: 'at'") && top.contains("txg: 0\n"), "detached device's label:\n{top}");
    // A device detached from an imported, mounted pool, during a scrub, is let go at once:
    // it can be attached again right away (ZTS zpool_scrub_005_pos; the pool's views kept
    // the devices found at import open, the detached one with its exclusive lock).
    import(&d, &dir, "at", &mnt, false);
    d.ok("rzpool", &["attach", "-w", "at", &extra[1], &devs[0]]);
    d.ok("rzpool", &["scrub", "at"]);
    d.ok("rzpool", &["detach", "at", &devs[0]]);
    d.ok("rzpool", &["attach", "-w", "at", &extra[1], &devs[0]]);
    d.ok("rzpool", &["detach", "at", &devs[0]]);
    check_files(&mnt, &want, "after a detach during a scrub", false);
    d.ok("rzpool", &["export", "at"]);
    zdb_check(&dir, "at");
    import(&d, &dir, "at", &mnt, true);
    check_files(&mnt, &want, "after export", false);
    d.ok("rzpool", &["export", "at"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replace_is_done_when_the_wait_returns() {
    if skip_without_fuse_zdb("replace_is_done_when_the_wait_returns") {
        return;
    }
    let mut rng = common::rng::Rng::new(47);
    let dir = scratch("replace-done");
    let d = Daemon::with_env("replace-done", &[("RZFS_TXG_TIMEOUT", "3600")]);
    let (mut devs, mnt) = create(&d, &dir, "rd", &RAIDZ1, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 4, 200_000..1_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "rd"]);
    set_aside(&dir, &devs, &[1]);
    import(&d, &dir, "rd", &mnt, false);
    let new = blank(&dir, "new", 2);
    // A missing device, replaced; `wait` returns once the replace is done.
    d.ok("rzpool", &["replace", "rd", &devs[1], &new[0]]);
    d.ok("rzpool", &["wait", "-t", "resilver", "rd"]);
    let st = d.ok("rzpool", &["status", "rd"]);
    devs[1] = new[0].clone();
    assert!(st.contains("state: ONLINE") && leaf_lines(&st) == devs, "{st}");
    let label = run_zdb(&["-l", &new[0]]);
    assert!(!label.contains("replacing") && !label.contains("/d1'"), "the detach is not durable:\n{label}");
    // A healthy device replaced with -w.
    d.ok("rzpool", &["replace", "-w", "rd", &devs[2], &new[1]]);
    let st = d.ok("rzpool", &["status", "rd"]);
    devs[2] = new[1].clone();
    assert!(st.contains("state: ONLINE") && leaf_lines(&st) == devs, "{st}");
    check_files(&mnt, &want, "after two replaces", false);
    d.ok("rzpool", &["export", "rd"]);
    zdb_check(&dir, "rd");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refusals() {
    if skip_without_fuse_zdb("refusals") {
        return;
    }
    let mut rng = common::rng::Rng::new(43);
    let dir = scratch("refusals");
    // Slow scans, so that a replace can be cancelled while it runs.
    let d = Daemon::with_env("refusals", &[("RZFS_SCAN_BATCH", "8"), ("RZFS_SCAN_DELAY_MS", "200")]);
    let (devs, mnt) = create(&d, &dir, "rf", &RAIDZ1, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 2, 200_000..2_500_000, &mut rng, &mut want);
    let small = dir.join("small");
    std::fs::File::create(&small).unwrap().set_len(80 << 20).unwrap();
    let small = small.to_string_lossy().into_owned();
    let spare = blank(&dir, "x", 1).remove(0);
    let expect = |args: &[&str], what: &str| {
        let (code, _, err) = d.run("rzpool", args);
        assert!(code != 0 && err.contains(what), "{args:?}: {code} {err}");
    };
    expect(&["attach", "rf", &devs[0], &spare], "raidz");
    expect(&["replace", "rf", &devs[0], &small], "device is too small");
    expect(&["replace", "rf", &devs[0], &devs[1]], "part of");
    expect(&["detach", "rf", &devs[0]], "only applicable to mirror and replacing vdevs");
    expect(&["replace", "rf", "/nope", &spare], "no such device in pool");
    // Another pool's device.
    let other = blank(&dir, "o", 1).remove(0);
    d.ok("rzpool", &["create", "-m", "none", "other", &other]);
    expect(&["replace", "rf", &devs[0], &other], "active pool 'other'");
    d.ok("rzpool", &["export", "other"]);
    // A replace is cancelled by detaching the new device: the old one stays.
    d.ok("rzpool", &["replace", "rf", &devs[0], &spare]);
    let st = d.ok("rzpool", &["status", "rf"]);
    assert!(st.contains("replacing-0"), "{st}");
    d.ok("rzpool", &["detach", "rf", &spare]);
    let st = d.ok("rzpool", &["status", "rf"]);
    assert!(!st.contains("replacing-0") && leaf_lines(&st) == devs, "{st}");
    d.ok("rzpool", &["wait", "rf"]);
    check_files(&mnt, &want, "after the refusals", false);
    d.ok("rzpool", &["export", "rf"]);
    zdb_check(&dir, "rf");
    let _ = std::fs::remove_dir_all(&dir);
}
