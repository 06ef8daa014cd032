//! # Hot spares and autoreplace
//!
//! Through a private rzfsd on file vdevs, each pool checked by OpenZFS's zdb:
//! * [`a_spare_stands_in_and_steps_back`]: a raidz1 created with two spares; a device that
//!   fails every write is faulted and the first spare stands in for it by itself
//!   (`spare-1`, `INUSE`), resilvering; once the device is cleared and has resilvered what
//!   it missed, the spare goes back to `AVAIL`. The list survives export and import.
//! * [`replace_with_a_spare_then_keep_it`]: `zpool replace` with a spare, then detaching the
//!   original keeps the spare in the pool for good (it leaves the spares list) and it alone
//!   then holds every file.
//! * [`a_missing_device_gets_a_spare_until_replaced`]: a device missing at import gets a spare
//!   at once; replacing the missing device releases the spare; the new device holds its share.
//! * [`autoreplace_takes_the_new_disk_at_the_old_path`]: with `autoreplace=on`, a blank
//!   device at a missing device's path is resilvered in its place at import.
//! * [`spare_refusals`]: removing spares (an available one goes, keeping its aux label for
//!   labelclear, as OpenZFS's; an active one may not),
//!   a spare too small, a data device `zpool remove` cannot take.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The spares section of `zpool status`: (name, state).
fn spare_rows(status: &str) -> Vec<(String, String)> {
    let Some(at) = status.find("\tspares\n") else { return Vec::new() };
    status[at + 8..]
        .lines()
        .take_while(|l| l.starts_with("\t  "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[1].to_string())
        })
        .collect()
}

/// Waits (up to 20 s) until `status` satisfies `ok`; returns the last status.
fn until(d: &Daemon, pool: &str, ok: impl Fn(&str) -> bool) -> String {
    let t0 = std::time::Instant::now();
    loop {
        let st = d.ok("rzpool", &["status", pool]);
        if ok(&st) || t0.elapsed() > std::time::Duration::from_secs(20) {
            return st;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Creates a raidz1 of 3 with `spares` hot spares (`s0`...): (devices, spares, mount).
fn raidz1_with_spares(
    d: &Daemon,
    dir: &Path,
    pool: &str,
    spares: usize,
) -> (Vec<String>, Vec<String>, std::path::PathBuf) {
    let devs = files(dir, 3, 128 << 20);
    let sp = blank(dir, "s", spares);
    let mnt = dir.join("mnt");
    let mut args: Vec<&str> = vec!["create", "-m", mnt.to_str().unwrap(), pool, "raidz1"];
    args.extend(devs.iter().map(String::as_str));
    if spares > 0 {
        args.push("spare");
        args.extend(sp.iter().map(String::as_str));
    }
    d.ok("rzpool", &args);
    (devs, sp, mnt)
}

#[test]
fn a_spare_stands_in_and_steps_back() {
    if skip_without_fuse_zdb("a_spare_stands_in_and_steps_back") {
        return;
    }
    let mut rng = common::rng::Rng::new(51);
    let dir = scratch("spare-auto");
    let d = Daemon::with_env("spare-auto", &[("RZFS_TXG_TIMEOUT", "1")]);
    let (devs, sp, mnt) = raidz1_with_spares(&d, &dir, "sa", 2);
    let st = d.ok("rzpool", &["status", "sa"]);
    assert_eq!(
        spare_rows(&st),
        vec![(sp[0].clone(), "AVAIL".into()), (sp[1].clone(), "AVAIL".into())],
        "{st}"
    );
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 5, 200_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "sa"]);
    // d1 fails every write: it is faulted, and a spare steps in by itself.
    d.ok("rzinject", &["-d", &devs[1], "-e", "io", "-T", "write", "sa"]);
    write_files(&mnt, "b", 3, 200_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "sa"]);
    let st = until(&d, "sa", |s| s.contains("spare-1"));
    assert!(st.contains("spare-1") && st.contains("FAULTED"), "{st}");
    assert_eq!(spare_rows(&st)[0], (sp[0].clone(), "INUSE".into()), "{st}");
    assert!(st.contains("INUSE     currently in use"), "{st}");
    d.ok("rzpool", &["wait", "-t", "resilver", "sa"]);
    check_files(&mnt, &want, "with the spare in", false);
    // The device comes back: it resilvers what it missed and the spare steps back.
    d.ok("rzinject", &["-c", "all"]);
    d.ok("rzpool", &["clear", "sa"]);
    let st = until(&d, "sa", |s| !s.contains("spare-1") && !s.contains("resilver in progress"));
    assert!(!st.contains("spare-1") && st.contains("state: ONLINE"), "the spare stayed:\n{st}");
    assert_eq!(
        spare_rows(&st),
        vec![(sp[0].clone(), "AVAIL".into()), (sp[1].clone(), "AVAIL".into())],
        "{st}"
    );
    d.ok("rzpool", &["export", "sa"]);
    zdb_check(&dir, "sa");
    let label = run_zdb(&["-l", &sp[0]]);
    assert!(
        label.contains("state: 3") && !label.contains("name:"),
        "an available spare carries an aux label:\n{label}"
    );
    import(&d, &dir, "sa", &mnt, false);
    let st = d.ok("rzpool", &["status", "sa"]);
    assert_eq!(spare_rows(&st).len(), 2, "the spares survive export and import:\n{st}");
    check_files(&mnt, &want, "after import", false);
    d.ok("rzpool", &["export", "sa"]);
    // d1 really holds its share again.
    set_aside(&dir, &devs, &[0]);
    import(&d, &dir, "sa", &mnt, true);
    check_files(&mnt, &want, "without d0", false);
    d.ok("rzpool", &["export", "sa"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replace_with_a_spare_then_keep_it() {
    if skip_without_fuse_zdb("replace_with_a_spare_then_keep_it") {
        return;
    }
    let mut rng = common::rng::Rng::new(53);
    let dir = scratch("spare-keep");
    let d = Daemon::new("spare-keep");
    let devs = files(&dir, 2, 128 << 20);
    let sp = blank(&dir, "s", 1);
    let mnt = dir.join("mnt");
    d.ok("rzpool", &["create", "-m", mnt.to_str().unwrap(), "sk", "mirror", &devs[0], &devs[1]]);
    d.ok("rzpool", &["add", "sk", "spare", &sp[0]]);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 5, 200_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["replace", "-w", "sk", &devs[0], &sp[0]]);
    let st = d.ok("rzpool", &["status", "sk"]);
    assert!(st.contains("spare-0") && spare_rows(&st) == vec![(sp[0].clone(), "INUSE".into())], "{st}");
    d.ok("rzpool", &["export", "sk"]);
    zdb_check(&dir, "sk");
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "sk"]);
    assert!(cfg.contains("type: 'spare'") && cfg.contains("is_spare: 1"), "{cfg}");
    import(&d, &dir, "sk", &mnt, false);
    // Detaching the original keeps the spare for good.
    d.ok("rzpool", &["detach", "sk", &devs[0]]);
    let st = d.ok("rzpool", &["status", "sk"]);
    assert!(!st.contains("spare-0") && spare_rows(&st).is_empty() && st.contains(&sp[0]), "{st}");
    d.ok("rzpool", &["export", "sk"]);
    zdb_check(&dir, "sk");
    set_aside(&dir, &devs, &[1]);
    import(&d, &dir, "sk", &mnt, true);
    check_files(&mnt, &want, "from the former spare alone", false);
    d.ok("rzpool", &["export", "sk"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_device_gets_a_spare_until_replaced() {
    if skip_without_fuse_zdb("a_missing_device_gets_a_spare_until_replaced") {
        return;
    }
    let mut rng = common::rng::Rng::new(57);
    let dir = scratch("spare-missing");
    let d = Daemon::new("spare-missing");
    let (devs, sp, mnt) = raidz1_with_spares(&d, &dir, "sm", 1);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 5, 200_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "sm"]);
    set_aside(&dir, &devs, &[2]);
    import(&d, &dir, "sm", &mnt, false);
    d.ok("rzpool", &["wait", "-t", "resilver", "sm"]);
    let st = d.ok("rzpool", &["status", "sm"]);
    assert!(st.contains("spare-2") && spare_rows(&st) == vec![(sp[0].clone(), "INUSE".into())], "{st}");
    write_files(&mnt, "b", 2, 200_000..2_000_000, &mut rng, &mut want);
    let new = blank(&dir, "n", 1).remove(0);
    d.ok("rzpool", &["replace", "-w", "sm", &devs[2], &new]);
    let st = until(&d, "sm", |s| !s.contains("spare-2"));
    assert!(!st.contains("spare-2") && !st.contains("replacing") && st.contains("state: ONLINE"), "{st}");
    assert_eq!(spare_rows(&st), vec![(sp[0].clone(), "AVAIL".into())], "{st}");
    check_files(&mnt, &want, "after the replace", false);
    d.ok("rzpool", &["export", "sm"]);
    zdb_check(&dir, "sm");
    set_aside(&dir, &devs, &[0]);
    import(&d, &dir, "sm", &mnt, true);
    check_files(&mnt, &want, "without d0: the new device holds its share", false);
    d.ok("rzpool", &["export", "sm"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn autoreplace_takes_the_new_disk_at_the_old_path() {
    if skip_without_fuse_zdb("autoreplace_takes_the_new_disk_at_the_old_path") {
        return;
    }
    let mut rng = common::rng::Rng::new(59);
    let dir = scratch("autoreplace");
    let d = Daemon::new("autoreplace");
    let (devs, mnt) = create(&d, &dir, "ar", &RAIDZ1, 128 << 20);
    d.ok("rzpool", &["set", "autoreplace=on", "ar"]);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 5, 200_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "ar"]);
    // The disk in slot d1 dies and a blank one is put in its place.
    std::fs::remove_file(&devs[1]).unwrap();
    std::fs::File::create(&devs[1]).unwrap().set_len(128 << 20).unwrap();
    import(&d, &dir, "ar", &mnt, false);
    let st = until(&d, "ar", |s| s.contains("state: ONLINE") && !s.contains("replacing"));
    assert!(st.contains("state: ONLINE") && scan_line(&st).starts_with("scan: resilvered"), "{st}");
    check_files(&mnt, &want, "after autoreplace", false);
    d.ok("rzpool", &["export", "ar"]);
    zdb_check(&dir, "ar");
    set_aside(&dir, &devs, &[2]);
    import(&d, &dir, "ar", &mnt, true);
    check_files(&mnt, &want, "without d2: the new d1 holds its share", false);
    d.ok("rzpool", &["export", "ar"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spare_refusals() {
    if skip_without_fuse_zdb("spare_refusals") {
        return;
    }
    let dir = scratch("spare-refusals");
    let d = Daemon::new("spare-refusals");
    let (devs, sp, _mnt) = raidz1_with_spares(&d, &dir, "sr", 2);
    let small = dir.join("tiny").to_string_lossy().into_owned();
    std::fs::File::create(&small).unwrap().set_len(80 << 20).unwrap();
    let expect = |args: &[&str], what: &str| {
        let (code, _, err) = d.run("rzpool", args);
        assert!(code != 0 && err.contains(what), "{args:?}: {code} {err}");
    };
    expect(&["add", "sr", "spare", &small], "too small");
    expect(&["add", "sr", "spare", &sp[0]], "already part of pool");
    expect(&["remove", "sr", &devs[0]], "cannot remove");
    d.ok("rzpool", &["replace", "sr", &devs[0], &sp[0]]);
    d.ok("rzpool", &["wait", "sr"]);
    expect(&["remove", "sr", &sp[0]], "busy");
    d.ok("rzpool", &["remove", "sr", &sp[1]]);
    let st = d.ok("rzpool", &["status", "sr"]);
    assert_eq!(spare_rows(&st), vec![(sp[0].clone(), "INUSE".into())], "{st}");
    // As OpenZFS's, the removed spare keeps its aux label, which no pool claims now:
    // labelclear takes it without -f.
    let label = run_zdb(&["-l", &sp[1]]);
    assert!(label.contains("state: 3"), "{label}");
    d.ok("rzpool", &["labelclear", &sp[1]]);
    let label = run_zdb(&["-l", &sp[1]]);
    assert!(!label.contains("state: 3"), "labelclear left the label:\n{label}");
    // Detaching the spare puts it back in the list.
    d.ok("rzpool", &["detach", "sr", &sp[0]]);
    let st = d.ok("rzpool", &["status", "sr"]);
    assert_eq!(spare_rows(&st), vec![(sp[0].clone(), "AVAIL".into())], "{st}");
    d.ok("rzpool", &["export", "sr"]);
    zdb_check(&dir, "sr");
    let _ = std::fs::remove_dir_all(&dir);
}
