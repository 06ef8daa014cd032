//! # Scans handed between rzfs and OpenZFS
//!
//! OpenZFS's own pool code (libzpool) imports an rzfs pool read-write through `zhack`, whose
//! txgs run OpenZFS's `dsl_scan_sync`: a scan rzfs left in the MOS is carried on by OpenZFS
//! and the other way round.
//!
//! libzpool asks `/dev/zfs` whether the kernel holds the pool (no kernel module here), and
//! records imports in `/etc/zfs/zpool.cache`; `zhack` therefore runs in a private mount
//! namespace (`unshare -m`, private propagation) with a tmpfs `/dev` holding a `zfs` node
//! whose ioctls fail ("not active") and a tmpfs `/etc/zfs`, so nothing outside changes. The
//! import is `zhack feature enable` of a made-up feature (enabled, never active: rzfs and
//! zdb accept it), which syncs txgs.
//!
//! * [`openzfs_finishes_a_scrub_rzfs_started`]: an rzfs scrub interrupted by an export
//!   (zdb: scanning, part examined) is finished by OpenZFS (zdb: finished, bookmark at the
//!   end; a loaded machine may need more than one short zhack import); rzfs reports it as
//!   done.
//! * [`a_paused_scrub_stays_paused_through_openzfs`]: a scrub rzfs paused is still paused,
//!   where it stood, after OpenZFS's import; rzfs resumes and finishes it.
//! * [`openzfs_resilvers_from_rzfs_dtls_and_rzfs_finishes`]: a device offline in rzfs (`-t`,
//!   so it is back at the next import) leaves a DTL; OpenZFS's import sets up a resilver
//!   over exactly its txgs (min/max from the DTL); rzfs resumes OpenZFS's resilver where it
//!   stood (or shows it finished), the DTL ends empty, and the device then holds every file.
//! * [`openzfs_takes_spares_and_a_replace_in_progress`]: a pool with hot spares (one in use
//!   in a `spare` vdev) and a `replacing` vdev still resilvering goes through OpenZFS's
//!   read-write import and back; rzfs finishes the replace.
//! * [`unknown_features_are_listed_as_zpool_lists_them`]: features zhack makes up, enabled
//!   then active, as `zpool import` and `unsupported@GUID` show them.
//! * [`rzfs_folds_openzfs_log_spacemaps`]: after OpenZFS wrote to a pool, its metaslabs'
//!   latest changes are only in OpenZFS's log space maps (`log_spacemap`), and its space maps
//!   carry histograms (`spacemap_histogram`); rzfs imports it read-write, frees and writes:
//!   zdb finds no leak, no log left and every unflushed txg 0, with the feature refcounts
//!   right; OpenZFS imports it again and logs anew; every file reads back.
//! * [`openzfs_error_log_rotates_at_rzfs_scrub_end`]: a block lost on a single-device pool is
//!   found by OpenZFS's scrub, which records it in its per-dataset error log (`head_errlog`);
//!   the file removed and a scrub run by rzfs, the error logs rotate as OpenZFS rotates them:
//!   `errlog_last` and its per-dataset object are freed (zdb finds no leaked MOS object).
//!
//! Needs FUSE, root, zdb/zhack and `unshare` (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::collections::BTreeMap;
use std::path::Path;

fn skip(name: &str) -> bool {
    if !Path::new(ZHACK).exists() {
        eprintln!("{name}: needs zhack; skipped");
        return true;
    }
    skip_without_fuse_zdb(name)
}

/// The MOS `scan` entry's 24 words (`dsl_scan_phys_t`) as zdb reads them.
fn scan_words(dir: &Path, pool: &str) -> Vec<i128> {
    let mos_dir = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", pool, "1"]);
    let line = mos_dir
        .lines()
        .find(|l| l.trim_start().starts_with("scan = "))
        .unwrap_or_else(|| panic!("no scan entry:\n{mos_dir}"));
    line.split('=').nth(1).unwrap().split_whitespace().map(|w| w.parse().unwrap()).collect()
}

#[test]
fn openzfs_finishes_a_scrub_rzfs_started() {
    if skip("openzfs_finishes_a_scrub_rzfs_started") {
        return;
    }
    let mut rng = common::rng::Rng::new(61);
    let dir = scratch("ozscan-finish");
    let d = Daemon::with_env("ozscan-finish", &[("RZFS_SCAN_BATCH", "8"), ("RZFS_SCAN_DELAY_MS", "300")]);
    let (_devs, mnt) = create(&d, &dir, "of", &RAIDZ1, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "f", 6, 500_000..3_000_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "of@s"]);
    d.ok("rzpool", &["sync", "of"]);
    d.ok("rzpool", &["scrub", "of"]);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    d.ok("rzpool", &["export", "of"]);
    let w = scan_words(&dir, "of");
    assert_eq!((w[0], w[1]), (1, 1), "an interrupted scrub: {w:?}");
    assert!(w[10] > 0 && w[10] < w[9], "part examined: {w:?}");
    // Each zhack import syncs only a few txgs, and OpenZFS's sorted scrub finishes in two
    // phases (traverse, then issue the queued reads): on a loaded machine one import can end
    // between them (bookmark at the end, state still scanning). OpenZFS carries the scan on
    // at its next import, so import again (a new made-up feature each time) until it is done.
    let mut w = Vec::new();
    for i in 0..6 {
        openzfs_import(&dir, "of", &format!("com.example:rzfs_scan{i}"));
        w = scan_words(&dir, "of");
        if w[1] != 1 {
            break;
        }
        assert_eq!(w[0], 1, "still a scrub after import {i}: {w:?}");
    }
    assert_eq!((w[0], w[1]), (1, 2), "OpenZFS finished the scrub: {w:?}");
    assert_eq!(w[19], -1, "bookmark at the end (ZB_DESTROYED_OBJSET): {w:?}");
    zdb_check(&dir, "of");
    import(&d, &dir, "of", &mnt, false);
    let st = d.ok("rzpool", &["status", "of"]);
    assert!(scan_line(&st).starts_with("scan: scrub repaired 0B") && st.contains("with 0 errors"), "{st}");
    check_files(&mnt, &want, "after OpenZFS's scrub", false);
    d.ok("rzpool", &["export", "of"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_paused_scrub_stays_paused_through_openzfs() {
    if skip("a_paused_scrub_stays_paused_through_openzfs") {
        return;
    }
    let mut rng = common::rng::Rng::new(67);
    let dir = scratch("ozscan-paused");
    let d = Daemon::with_env("ozscan-paused", &[("RZFS_SCAN_BATCH", "8"), ("RZFS_SCAN_DELAY_MS", "300")]);
    let (_devs, mnt) = create(&d, &dir, "op", &RAIDZ1, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "f", 6, 500_000..3_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "op"]);
    d.ok("rzpool", &["scrub", "op"]);
    std::thread::sleep(std::time::Duration::from_millis(900));
    d.ok("rzpool", &["scrub", "-p", "op"]);
    d.ok("rzpool", &["export", "op"]);
    let before = scan_words(&dir, "op");
    assert_eq!((before[0], before[1], before[23] & 2), (1, 1, 2), "paused: {before:?}");
    openzfs_import(&dir, "op", "com.example:rzfs_pause");
    let after = scan_words(&dir, "op");
    assert_eq!((after[1], after[23] & 2), (1, 2), "still paused after OpenZFS: {after:?}");
    assert_eq!((&before[10], &before[19..23]), (&after[10], &after[19..23]), "same place: {after:?}");
    zdb_check(&dir, "op");
    let d = Daemon::new("ozscan-paused-2");
    import(&d, &dir, "op", &mnt, false);
    assert!(d.ok("rzpool", &["status", "op"]).contains("scrub paused since"));
    d.ok("rzpool", &["scrub", "-w", "op"]);
    let st = d.ok("rzpool", &["status", "op"]);
    assert!(scan_line(&st).starts_with("scan: scrub repaired 0B") && st.contains("with 0 errors"), "{st}");
    check_files(&mnt, &want, "after the resumed scrub", false);
    d.ok("rzpool", &["export", "op"]);
    zdb_check(&dir, "op");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openzfs_resilvers_from_rzfs_dtls_and_rzfs_finishes() {
    if skip("openzfs_resilvers_from_rzfs_dtls_and_rzfs_finishes") {
        return;
    }
    let mut rng = common::rng::Rng::new(71);
    let dir = scratch("ozscan-dtl");
    let d = Daemon::new("ozscan-dtl");
    let (devs, mnt) = create(&d, &dir, "od", &RAIDZ1, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "f", 3, 500_000..3_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "od"]);
    // Offline until the next import: the txgs written meanwhile are d1's DTL.
    d.ok("rzpool", &["offline", "-t", "od", &devs[1]]);
    let mut more = BTreeMap::new();
    for i in 0..3 {
        let data = rng.data_in(500_000, 2_000_000);
        std::fs::write(mnt.join(format!("g{i}")), &data).unwrap();
        more.insert(format!("g{i}"), data);
    }
    want.extend(more);
    d.ok("rzpool", &["export", "od"]);
    let ddd = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddd", "od"]);
    let missing = ddd
        .lines()
        .find(|l| l.trim_start().starts_with("missing ["))
        .unwrap_or_else(|| panic!("zdb shows no DTL:\n{ddd}"))
        .trim()
        .to_string();
    // "missing [A,B) length N": the resilver covers (A - 1, B].
    let range: Vec<i128> = missing
        .trim_start_matches("missing [")
        .split(')')
        .next()
        .unwrap()
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    openzfs_import(&dir, "od", "com.example:rzfs_dtl");
    let w = scan_words(&dir, "od");
    assert_eq!(w[0], 2, "OpenZFS set up a resilver: {w:?} (DTL {missing})");
    assert_eq!((w[3], w[4]), (range[0] - 1, range[1]), "over the DTL's txgs: {w:?} (DTL {missing})");
    zdb_check(&dir, "od");
    import(&d, &dir, "od", &mnt, false);
    d.ok("rzpool", &["wait", "od"]);
    let st = d.ok("rzpool", &["status", "-p", "od"]);
    assert!(scan_line(&st).starts_with("scan: resilvered") && st.contains("with 0 errors"), "{st}");
    assert!(counters(&st, &devs).iter().all(|&c| c == (0, 0, 0)), "{st}");
    d.ok("rzpool", &["export", "od"]);
    let ddd = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-ddd", "od"]);
    assert!(!ddd.contains("missing ["), "the DTL is empty after the resilver:\n{ddd}");
    zdb_check(&dir, "od");
    let aside = dir.join("aside");
    std::fs::create_dir_all(&aside).unwrap();
    std::fs::rename(&devs[0], aside.join("d0")).unwrap();
    import(&d, &dir, "od", &mnt, true);
    check_files(&mnt, &want, "without d0: the resilvered d1 holds its share", false);
    d.ok("rzpool", &["export", "od"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openzfs_takes_spares_and_a_replace_in_progress() {
    if skip("openzfs_takes_spares_and_a_replace_in_progress") {
        return;
    }
    let mut rng = common::rng::Rng::new(73);
    let dir = scratch("ozscan-spares");
    let d = Daemon::with_env("ozscan-spares", &[("RZFS_SCAN_BATCH", "8"), ("RZFS_SCAN_DELAY_MS", "300")]);
    let devs = files(&dir, 3, 128 << 20);
    let mut sp = blank(&dir, "s", 2);
    sp.extend(blank(&dir, "n", 1));
    let mnt = dir.join("mnt");
    let m = mnt.to_string_lossy().into_owned();
    d.ok(
        "rzpool",
        &["create", "-m", &m, "os", "raidz1", &devs[0], &devs[1], &devs[2], "spare", &sp[0], &sp[1]],
    );
    let mut want = BTreeMap::new();
    write_files(&mnt, "f", 6, 500_000..3_000_000, &mut rng, &mut want);
    // A spare in use, and a replace that is still resilvering at export.
    d.ok("rzpool", &["replace", "os", &devs[1], &sp[0]]);
    d.ok("rzpool", &["wait", "os"]);
    d.ok("rzpool", &["replace", "os", &devs[2], &sp[2]]);
    let st = d.ok("rzpool", &["status", "os"]);
    assert!(
        st.contains("spare-1") && st.contains("replacing-2") && st.contains("resilver in progress"),
        "{st}"
    );
    d.ok("rzpool", &["export", "os"]);
    zdb_check(&dir, "os");
    openzfs_import(&dir, "os", "com.example:rzfs_spares");
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "os"]);
    assert!(cfg.contains("type: 'spare'") && cfg.contains(&sp[0]), "OpenZFS kept the spare vdev:\n{cfg}");
    zdb_check(&dir, "os");
    import(&d, &dir, "os", &mnt, false);
    d.ok("rzpool", &["wait", "os"]);
    let st = d.ok("rzpool", &["status", "os"]);
    assert!(!st.contains("replacing-2") && st.contains(&sp[2]) && st.contains("spare-1"), "{st}");
    assert!(st.contains("INUSE") && st.contains("AVAIL"), "both spares still listed:\n{st}");
    check_files(&mnt, &want, "after OpenZFS's import", false);
    // OpenZFS gave every vdev its ZAPs (the AVZ); a vdev leaving the pool here takes its
    // ZAPs with it (zdb would call them leaked): the spare goes back to AVAIL.
    let cfg = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-C", "os"]);
    assert!(cfg.contains("com.delphix:vdev_zap_leaf"), "OpenZFS made per-vdev ZAPs:\n{cfg}");
    d.ok("rzpool", &["detach", "os", &sp[0]]);
    let st = d.ok("rzpool", &["status", "os"]);
    assert!(!st.contains("spare-1"), "{st}");
    d.ok("rzpool", &["export", "os"]);
    zdb_check(&dir, "os");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Features this system does not know, as zpool shows them (ZTS zpool_import_features_*):
/// inactive ones leave the pool importable read-write and read as `unsupported@GUID`
/// `inactive`; an active read-only-compatible one refuses a read-write import with zpool's
/// list and hint on stdout, and a read-only import shows it `readonly`; an active one needed
/// for reading refuses every import, listed without the hint.
#[test]
fn unknown_features_are_listed_as_zpool_lists_them() {
    if skip("unknown_features_are_listed_as_zpool_lists_them") {
        return;
    }
    let dir = scratch("ozscan-unsup");
    let d = Daemon::new("ozscan-unsup");
    let (_devs, _mnt) = create(&d, &dir, "uf", &SINGLE, 128 << 20);
    d.ok("rzpool", &["export", "uf"]);
    zhack(&dir, &["feature", "enable", "uf", "com.test:unsup_read"]);
    zhack(&dir, &["feature", "enable", "-r", "-d", "only for writing", "uf", "com.test:unsup_write"]);
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["import", "-N", "-d", dir_s, "uf"]);
    let got = d.ok(
        "rzpool",
        &["list", "-Ho", "unsupported@com.test:unsup_read,unsupported@com.test:unsup_write", "uf"],
    );
    assert_eq!(got, "inactive\tinactive\n");
    let all = d.ok("rzpool", &["get", "-H", "all", "uf"]);
    assert!(all.contains("uf\tunsupported@com.test:unsup_write\tinactive\tlocal"), "{all}");
    d.ok("rzpool", &["export", "uf"]);

    zhack(&dir, &["feature", "ref", "uf", "com.test:unsup_write"]);
    let (code, out, err) = d.run("rzpool", &["import", "-N", "-d", dir_s, "uf"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        out,
        "This pool uses the following feature(s) not supported by this system:\n\
         \tcom.test:unsup_write (only for writing)\n\
         All unsupported features are only required for writing to the pool.\n\
         The pool can be imported using '-o readonly=on'.\n"
    );
    assert_eq!(err, "cannot import 'uf': unsupported version or feature\n");
    d.ok("rzpool", &["import", "-N", "-o", "readonly=on", "-d", dir_s, "uf"]);
    assert_eq!(
        d.ok("rzpool", &["get", "-Ho", "value", "unsupported@com.test:unsup_write", "uf"]),
        "readonly\n"
    );
    d.ok("rzpool", &["export", "uf"]);

    zhack(&dir, &["feature", "ref", "uf", "com.test:unsup_read"]);
    let (code, out, _) = d.run("rzpool", &["import", "-N", "-o", "readonly=on", "-d", dir_s, "uf"]);
    assert_eq!(code, 1);
    assert!(out.contains("\tcom.test:unsup_read") && !out.contains("readonly"), "{out}");
    assert_eq!(d.ok("rzpool", &["list", "-H", "-o", "name"]), "");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rzfs_folds_openzfs_log_spacemaps() {
    if skip("rzfs_folds_openzfs_log_spacemaps") {
        return;
    }
    let mut rng = common::rng::Rng::new(83);
    let dir = scratch("ozscan-logsm");
    let d = Daemon::new("ozscan-logsm");
    let (_devs, mnt) = create(&d, &dir, "lg", &RAIDZ1, 128 << 20);
    let feats = d.ok("rzpool", &["get", "-H", "-o", "property,value", "all", "lg"]);
    for f in
        ["log_spacemap\tenabled", "spacemap_histogram\tactive", "spacemap_v2\tactive", "head_errlog\tactive"]
    {
        assert!(feats.contains(&format!("feature@{f}")), "a new pool has {f}:\n{feats}");
    }
    let mut want = BTreeMap::new();
    write_files(&mnt, "f", 6, 300_000..2_000_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "lg@s"]);
    d.ok("rzpool", &["export", "lg"]);
    let p = dir.to_str().unwrap();
    let unflushed = |mmm: &str| -> Vec<u64> {
        mmm.lines()
            .filter_map(|l| l.trim().strip_prefix("unflushed txg="))
            .map(|t| t.trim().parse().unwrap())
            .collect()
    };

    // OpenZFS writes: its last txgs' changes are in a log space map only.
    openzfs_import(&dir, "lg", "com.example:rzfs_log_1");
    let mmm = run_zdb(&["-e", "-p", p, "-mmm", "lg"]);
    assert!(mmm.contains("Log Spacemap object"), "OpenZFS left log space maps:\n{mmm}");
    assert!(unflushed(&mmm).iter().any(|&t| t != 0), "metaslabs wait for their logs:\n{mmm}");
    zdb_check(&dir, "lg");

    // rzfs writes: the logs are folded in by its first txg.
    import(&d, &dir, "lg", &mnt, false);
    check_files(&mnt, &want, "after OpenZFS's import", false);
    for k in ["f1", "f4"] {
        std::fs::remove_file(mnt.join(k)).unwrap();
        want.remove(k);
    }
    d.ok("rzfs", &["destroy", "lg@s"]);
    write_files(&mnt, "g", 4, 300_000..2_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "lg"]);
    let mmm = run_zdb(&["-e", "-p", p, "-mmm", "lg"]);
    assert!(!mmm.contains("Log Spacemap object"), "no log space map left:\n{mmm}");
    let txgs = unflushed(&mmm);
    assert!(!txgs.is_empty() && txgs.iter().all(|&t| t == 0), "every metaslab flushed:\n{mmm}");
    zdb_check(&dir, "lg");

    // OpenZFS takes the pool back and logs again; rzfs folds again and reads everything.
    openzfs_import(&dir, "lg", "com.example:rzfs_log_2");
    assert!(run_zdb(&["-e", "-p", p, "-mmm", "lg"]).contains("Log Spacemap object"));
    zdb_check(&dir, "lg");
    import(&d, &dir, "lg", &mnt, false);
    write_files(&mnt, "h", 2, 100_000..500_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "lg"]);
    zdb_check(&dir, "lg");
    import(&d, &dir, "lg", &mnt, true);
    check_files(&mnt, &want, "after rzfs and OpenZFS took turns", false);
    d.ok("rzpool", &["export", "lg"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The MOS directory's `errlog_last` and `errlog_scrub` entries, as zdb shows them (0 when
/// absent).
fn errlogs(dir: &Path, pool: &str) -> (u64, u64) {
    let mos_dir = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-dddd", pool, "1"]);
    let get = |k: &str| {
        mos_dir
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(&format!("{k} = ")))
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0)
    };
    (get("errlog_last"), get("errlog_scrub"))
}

/// The block at `obj`'s first level-0 DVA in file system `fs` of pool `pool` (single device
/// `dev`, exported) is lost; an rzfs scrub, slowed down, is exported while still in the MOS,
/// and OpenZFS (zhack imports, property `tag{i}` set) carries it on to its end, meeting the
/// lost block. Returns the scan words after OpenZFS finished it.
#[allow(clippy::too_many_arguments)]
fn openzfs_scrub_meets_lost_block(
    d: &Daemon,
    dir: &Path,
    dev: &str,
    mnt: &Path,
    pool: &str,
    fs: &str,
    obj: u64,
    rng: &mut common::rng::Rng,
    tag: &str,
) -> Vec<i128> {
    let (offset, asize) = first_l0_dva(dir, fs, obj);
    noise(Path::new(dev), (4 << 20) + offset, asize as usize, rng);
    import(d, dir, pool, mnt, false);
    d.ok("rzpool", &["scrub", pool]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    d.ok("rzpool", &["export", pool]);
    let mut w = Vec::new();
    for i in 0..6 {
        openzfs_import(dir, pool, &format!("{tag}{i}"));
        w = scan_words(dir, pool);
        if w[1] != 1 {
            break;
        }
    }
    assert_eq!((w[0], w[1]), (1, 2), "OpenZFS finished the scrub: {w:?}");
    w
}

#[test]
fn openzfs_error_log_rotates_at_rzfs_scrub_end() {
    if skip("openzfs_error_log_rotates_at_rzfs_scrub_end") {
        return;
    }
    let mut rng = common::rng::Rng::new(89);
    let dir = scratch("ozscan-errlog");
    let d = Daemon::with_env("ozscan-errlog", &[("RZFS_SCAN_BATCH", "4"), ("RZFS_SCAN_DELAY_MS", "1000")]);
    let (devs, mnt) = create(&d, &dir, "el", &SINGLE, 128 << 20);
    let mut want = BTreeMap::new();
    write_files(&mnt, "f", 3, 300_000..1_000_000, &mut rng, &mut want);
    std::fs::write(mnt.join("victim"), rng.data(1 << 20)).unwrap();
    let obj = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(mnt.join("victim")).unwrap().ino()
    };
    d.ok("rzpool", &["export", "el"]);
    let p = dir.to_str().unwrap();
    let w = openzfs_scrub_meets_lost_block(
        &d,
        &dir,
        &devs[0],
        &mnt,
        "el",
        "el/",
        obj,
        &mut rng,
        "com.example:rzfs_errlog",
    );
    assert!(w[13] >= 1, "OpenZFS's scrub counted the lost block (scn_errors): {w:?}");
    let (last, scrub) = errlogs(&dir, "el");
    assert!(last != 0 && scrub == 0, "OpenZFS's error log is the last one: last {last}, scrub {scrub}");
    let heads = run_zdb(&["-e", "-p", p, "-dddd", "el", &last.to_string()]);
    let head_obj: u64 = heads
        .lines()
        .find_map(|l| l.split_once(" = ").filter(|(k, _)| k.trim().chars().all(|c| c.is_ascii_hexdigit())))
        .map(|(_, v)| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("a per-dataset error log in:\n{heads}"));
    assert_ne!(head_obj, 0, "head_errlog's layout: dataset -> its own error ZAP:\n{heads}");

    // rzfs: the lost file goes, a scrub runs to its end; the logs rotate.
    import(&d, &dir, "el", &mnt, false);
    std::fs::remove_file(mnt.join("victim")).unwrap();
    d.ok("rzpool", &["sync", "el"]);
    d.ok("rzpool", &["scrub", "-w", "el"]);
    d.ok("rzpool", &["export", "el"]);
    assert_eq!(errlogs(&dir, "el"), (0, 0), "the last error log deleted, no scrub log");
    // zdb's MOS leak check (below) finds the per-dataset log object if it was left behind.
    zdb_check(&dir, "el");
    import(&d, &dir, "el", &mnt, true);
    check_files(&mnt, &want, "after the error log rotated", false);
    d.ok("rzpool", &["export", "el"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file system destroyed by rzfs takes its entries in OpenZFS's error logs with it
/// (`spa_delete_dataset_errlog` with head_errlog): OpenZFS's scrub left a per-dataset error
/// log for a child file system; after rzfs destroys it, the log has no key for it and its
/// per-dataset object is gone (zdb cannot dump it), zdb -bcc clean. Fails without
/// `errlog_drop_head` (the entry and its object stay).
#[test]
fn destroyed_file_system_leaves_openzfs_error_logs() {
    if skip("destroyed_file_system_leaves_openzfs_error_logs") {
        return;
    }
    let mut rng = common::rng::Rng::new(97);
    let dir = scratch("ozscan-errlog-destroy");
    let d = Daemon::with_env("ozscan-errlog-d", &[("RZFS_SCAN_BATCH", "4"), ("RZFS_SCAN_DELAY_MS", "1000")]);
    let (devs, mnt) = create(&d, &dir, "ed", &SINGLE, 128 << 20);
    d.ok("rzfs", &["create", "ed/kid"]);
    let kid = mnt.join("kid");
    std::fs::write(kid.join("victim"), rng.data(1 << 20)).unwrap();
    std::fs::write(mnt.join("bystander"), rng.data(300_000)).unwrap();
    let obj = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(kid.join("victim")).unwrap().ino()
    };
    d.ok("rzpool", &["export", "ed"]);
    let p = dir.to_str().unwrap();
    openzfs_scrub_meets_lost_block(
        &d,
        &dir,
        &devs[0],
        &mnt,
        "ed",
        "ed/kid",
        obj,
        &mut rng,
        "com.example:rzfs_errlog_d",
    );
    let (last, _) = errlogs(&dir, "ed");
    assert_ne!(last, 0, "OpenZFS left an error log");
    let per_head = |dump: &str| -> Option<(String, u64)> {
        dump.lines().find_map(|l| {
            l.split_once(" = ")
                .filter(|(k, _)| k.trim().chars().all(|c| c.is_ascii_hexdigit()) && !k.trim().is_empty())
                .map(|(k, v)| (k.trim().to_string(), v.trim().parse().unwrap()))
        })
    };
    let (key, head_log) = per_head(&run_zdb(&["-e", "-p", p, "-dddd", "ed", &last.to_string()]))
        .unwrap_or_else(|| panic!("no per-dataset error log"));
    let kid_ds = run_zdb(&["-e", "-p", p, "-d", "ed/kid"]);
    assert!(kid_ds.contains("ed/kid"), "{kid_ds}");

    import(&d, &dir, "ed", &mnt, false);
    d.ok("rzfs", &["destroy", "ed/kid"]);
    d.ok("rzpool", &["export", "ed"]);
    let (last2, scrub2) = errlogs(&dir, "ed");
    assert_eq!((last2, scrub2), (last, 0), "the logs themselves stay until a scan rotates them");
    let dump = run_zdb(&["-e", "-p", p, "-dddd", "ed", &last.to_string()]);
    assert!(per_head(&dump).is_none(), "the destroyed head's key {key} is still in the log:\n{dump}");
    let gone = run_zdb(&["-e", "-p", p, "-dddd", "ed", &head_log.to_string()]);
    assert!(!gone.contains("persistent error log"), "per-dataset log {head_log} left:\n{gone}");
    zdb_check(&dir, "ed");
    let _ = std::fs::remove_dir_all(&dir);
}
