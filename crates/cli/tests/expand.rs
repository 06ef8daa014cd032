//! # Growing a pool onto bigger devices: `zpool online -e`, `autoexpand`
//!
//! Through a private rzfsd on file vdevs, each pool checked by OpenZFS's zdb:
//! * [`online_e_grows_a_mirror_whose_devices_grew`]: the files of a mirror are extended
//!   while imported (a LUN resized); `expandsize` shows what `online -e` would add, nothing
//!   grows until it runs, then `size` grows by it; more data than the old size could hold
//!   is written; zdb (which finds the labels at the new ends) is clean; the size survives
//!   export and import and each side alone holds every file.
//! * [`autoexpand_after_replacing_every_device`]: a raidz1 with `autoexpand=on` has each of
//!   its devices replaced by a bigger one: it grows by itself once the last small one is
//!   gone (not before), and with one device taken away still reads every file.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::tools::*;
use std::collections::BTreeMap;

fn prop(d: &Daemon, pool: &str, p: &str) -> String {
    d.ok("rzpool", &["list", "-Hp", "-o", p, pool]).trim().to_string()
}

fn size(d: &Daemon, pool: &str) -> u64 {
    prop(d, pool, "size").parse().unwrap()
}

#[test]
fn online_e_grows_a_mirror_whose_devices_grew() {
    if skip_without_fuse_zdb("online_e_grows_a_mirror_whose_devices_grew") {
        return;
    }
    let mut rng = common::rng::Rng::new(41);
    let dir = scratch("expand-mirror");
    let d = Daemon::new("expand-mirror");
    let (devs, mnt) = create(&d, &dir, "em", &MIRROR2, 128 << 20);
    // Uncompressed, so the files below need more room than the old size had.
    d.ok("rzfs", &["set", "compression=off", "em"]);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 8, 1_000_000..4_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "em"]);
    let before = size(&d, "em");
    assert_eq!(prop(&d, "em", "expandsz"), "-");
    let (code, _, err) = d.run("rzpool", &["online", "-e", "em", "/nonexistent"]);
    assert!(code != 0 && err.contains("/nonexistent"), "{err}");
    // Both devices grow by 192 MiB while the pool is imported; only one is expanded first.
    for p in &devs {
        std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(320 << 20).unwrap();
    }
    let esize: u64 =
        d.ok("rzpool", &["get", "-Hp", "-o", "value", "expandsize", "em"]).trim().parse().unwrap();
    assert!((160 << 20..=192 << 20).contains(&esize), "expandsize {esize}");
    assert_eq!(size(&d, "em"), before, "nothing grows without online -e or autoexpand");
    d.ok("rzpool", &["online", "-e", "em", &devs[0]]);
    let after = size(&d, "em");
    assert_eq!(after, before + esize, "size {before} -> {after}, expandsize was {esize}");
    assert_eq!(prop(&d, "em", "expandsz"), "-");
    let hist = d.ok("rzpool", &["history", "-i", "em"]);
    assert!(hist.contains("vdev online") && hist.contains("expand"), "{hist}");
    // More than the old size could hold.
    write_files(&mnt, "b", 40, 3_000_000..4_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "em"]);
    assert!(allocated(&d, "em") > before, "allocated {} of {after}", allocated(&d, "em"));
    d.ok("rzpool", &["export", "em"]);
    zdb_check(&dir, "em");
    // All four labels, the back two at the new end, agree (zdb prints one for all).
    for p in &devs {
        let l = run_zdb(&["-l", p]);
        assert!(l.contains("labels = 0 1 2 3"), "{p}:\n{l}");
    }
    import(&d, &dir, "em", &mnt, false);
    assert_eq!(size(&d, "em"), after, "the size survives export and import");
    check_files(&mnt, &want, "expanded mirror", false);
    d.ok("rzpool", &["export", "em"]);
    for i in 0..2 {
        set_aside(&dir, &devs, &[i]);
        import(&d, &dir, "em", &mnt, true);
        check_files(&mnt, &want, &format!("expanded mirror without d{i}"), false);
        d.ok("rzpool", &["export", "em"]);
        bring_back(&dir, &devs, &[i]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn autoexpand_after_replacing_every_device() {
    if skip_without_fuse_zdb("autoexpand_after_replacing_every_device") {
        return;
    }
    let mut rng = common::rng::Rng::new(43);
    let dir = scratch("expand-auto");
    let d = Daemon::new("expand-auto");
    let (devs, mnt) = create(&d, &dir, "ea", &RAIDZ1, 128 << 20);
    d.ok("rzpool", &["set", "autoexpand=on", "ea"]);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 6, 1_000_000..3_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["sync", "ea"]);
    let before = size(&d, "ea");
    let big: Vec<String> = (0..3)
        .map(|i| {
            let p = dir.join(format!("big{i}"));
            std::fs::File::create(&p).unwrap().set_len(256 << 20).unwrap();
            p.to_string_lossy().into_owned()
        })
        .collect();
    for i in 0..3 {
        d.ok("rzpool", &["replace", "-w", "ea", &devs[i], &big[i]]);
        // The sync thread's device check runs every few seconds; give it time to act.
        std::thread::sleep(std::time::Duration::from_millis(if i < 2 { 1500 } else { 0 }));
        if i < 2 {
            assert_eq!(size(&d, "ea"), before, "grew with a small device left (after replace {i})");
        }
    }
    let t0 = std::time::Instant::now();
    while size(&d, "ea") == before && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let after = size(&d, "ea");
    assert!(after >= before + (300 << 20), "autoexpand: {before} -> {after}");
    write_files(&mnt, "b", 30, 3_000_000..4_000_000, &mut rng, &mut want);
    d.ok("rzpool", &["export", "ea"]);
    zdb_check(&dir, "ea");
    for p in &devs {
        let _ = std::fs::remove_file(p);
    }
    set_aside(&dir, &big, &[1]);
    import(&d, &dir, "ea", &mnt, true);
    check_files(&mnt, &want, "autoexpanded raidz1 without big1", false);
    d.ok("rzpool", &["export", "ea"]);
    let _ = std::fs::remove_dir_all(&dir);
}
