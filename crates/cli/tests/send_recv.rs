//! # Rollback, send and receive
//!
//! Through a private rzfsd on file vdevs: `zfs rollback` (latest snapshot; `-r` destroying
//! later ones; a mounted file system comes back with the snapshot's files), checked by
//! OpenZFS's zdb (no leaked or damaged block, space accounting agreeing).
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::rng::Rng;
use common::tools::*;
use std::collections::BTreeMap;

#[test]
fn rollback() {
    if skip_without_fuse_zdb("rollback") {
        return;
    }
    let dir = scratch("rollback");
    let d = Daemon::new("rollback");
    let (_devs, mnt) = create(&d, &dir, "rb", &SINGLE, 256 << 20);
    let mut rng = Rng::new(7);
    let mut want = BTreeMap::new();
    write_files(&mnt, "a", 20, 1..300_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rb@one"]);
    let at_one = want.clone();
    // Changes after the snapshot: new files, a rewritten one, a removed one.
    write_files(&mnt, "b", 10, 1..300_000, &mut rng, &mut want);
    std::fs::write(mnt.join("a0"), b"changed").unwrap();
    std::fs::remove_file(mnt.join("a1")).unwrap();
    // Some of them on disk, the rest still in the open txg.
    let f = std::fs::File::open(mnt.join("b0")).unwrap();
    f.sync_all().unwrap();
    std::fs::write(mnt.join("b1"), b"unsynced").unwrap();
    // A busy file system is not rolled back under its users unless forced.
    let (code, _, err) = d.run("rzfs", &["rollback", "rb@one"]);
    assert!(code != 0 && err.contains("busy"), "{err}");
    drop(f);
    d.ok("rzfs", &["rollback", "rb@one"]);
    check_files(&mnt, &at_one, "after rollback to @one", false);
    let used = d.ok("rzfs", &["get", "-Hp", "-o", "value", "usedbysnapshots", "rb"]);
    assert!(used.starts_with("0\n"), "the snapshot holds nothing of its own after a rollback: {used}");

    // -r: later snapshots go; without it the rollback is refused and names them.
    write_files(&mnt, "c", 5, 1..100_000, &mut rng, &mut want);
    d.ok("rzfs", &["snapshot", "rb@two"]);
    std::fs::write(mnt.join("c0"), b"after two").unwrap();
    d.ok("rzfs", &["snapshot", "rb@three"]);
    let (code, _, err) = d.run("rzfs", &["rollback", "rb@one"]);
    assert!(code != 0 && err.contains("more recent snapshots") && err.contains("rb@three"), "{err}");
    let (code, _, err) = d.run("rzfs", &["rollback", "rb@nosuch"]);
    assert!(code != 0 && err.contains("does not exist"), "{err}");
    d.ok("rzfs", &["rollback", "-r", "rb@one"]);
    check_files(&mnt, &at_one, "after rollback -r to @one", false);
    let snaps = d.ok("rzfs", &["list", "-H", "-t", "snapshot", "-o", "name"]);
    assert_eq!(snaps, "rb@one\n");
    // The file system keeps working, and rolls back again.
    std::fs::write(mnt.join("new"), b"new file").unwrap();
    d.ok("rzfs", &["rollback", "rb@one"]);
    assert!(!mnt.join("new").exists());
    d.ok("rzpool", &["export", "rb"]);
    zdb_check(&dir, "rb");
    rzdb_space_check(&dir, "rb");
}
