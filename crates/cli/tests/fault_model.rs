//! Device faults, crashes and the POSIX model together, end to end: rzfsd serves a pool of
//! each layout (single, mirror, raidz1, raidz2) over FUSE, a randomized POSIX workload
//! (`common::model`) runs on the mount, and between bursts of operations the test
//!
//! * injects a write or flush error (or a vanishing device) on one leaf with `rzinject`,
//!   after a random number of I/Os, and syncs with `fsync` of the root directory. A
//!   redundant pool must sync anyway (the leaf FAULTED, the pool DEGRADED); a pool that
//!   cannot spare the leaf must fail the `fsync` with EIO, show SUSPENDED, refuse new
//!   changes with EIO (`failmode=continue`) while still serving every file as the model
//!   has it, and sync everything once the fault is lifted and `rzpool clear` ran;
//! * or kills the daemon with SIGKILL: after a new import the mount must hold exactly what
//!   the last successful `fsync` covered (no timer syncs run: `RZFS_TXG_TIMEOUT` is long),
//!   and the workload continues from there;
//! * or syncs with no fault.
//!
//! Faults always hit the same leaf: without resilver (a later issue), a leaf that missed
//! txgs while faulted must not be the only good copy when another one fails. At the end the
//! pool is exported and checked by OpenZFS's `zdb -bcc` and rzdb's space check.
//!
//! The seed of each layout's run is printed; `RZFS_FAULT_SEED` with `RZFS_FAULT_LAYOUT`
//! replays one, `RZFS_FAULT_ROUNDS` (default 40) lengthens them. About 40 seconds for the
//! four layouts on the 2-core machine.

mod common;

use common::model::{compare_mount, step, Model, Rng};
use common::tools::*;
use std::path::Path;

const LAYOUTS: [(&str, usize); 4] = [("single", 1), ("mirror", 2), ("raidz1", 3), ("raidz2", 4)];

fn env_u64(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

/// `fsync` of the mount's root directory: a whole-txg sync in rzfs.
fn sync_mount(mnt: &Path) -> std::io::Result<()> {
    std::fs::File::open(mnt)?.sync_all()
}

#[test]
fn posix_model_under_faults_and_crashes() {
    if zdb().is_none() || !fuse_usable() {
        return;
    }
    let base = env_u64("RZFS_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    let only = std::env::var("RZFS_FAULT_LAYOUT").ok();
    for (i, (layout, nleaves)) in LAYOUTS.into_iter().enumerate() {
        if only.as_deref().is_some_and(|o| o != layout) {
            continue;
        }
        // One seed per layout, so that a failure replays alone.
        let seed = if only.is_some() { base } else { base.wrapping_add(i as u64) };
        run(layout, nleaves, seed);
    }
}

fn run(layout: &str, nleaves: usize, seed: u64) {
    let rounds = env_u64("RZFS_FAULT_ROUNDS").unwrap_or(40);
    // The model's xorshift wants a well-mixed, non-zero state.
    let mut rng = Rng(common::rng::Rng::new(seed).next() | 1);
    eprintln!(
        "fault_model: {layout}: seed {seed} (RZFS_FAULT_SEED={seed} RZFS_FAULT_LAYOUT={layout} replays), {rounds} rounds"
    );
    let dir = scratch(&format!("fmodel-{layout}"));
    let devs = files(&dir, nleaves, 192 << 20);
    let mnt = dir.join("mnt");
    let mnt_s = mnt.to_string_lossy().into_owned();
    let dir_s = dir.to_string_lossy().into_owned();
    // No timer syncs: what survives a crash is exactly what the last fsync covered.
    let d = Daemon::with_env(&format!("fm-{layout}"), &[("RZFS_TXG_TIMEOUT", "3600")]);
    let mut create: Vec<&str> = vec![
        "create",
        "-o",
        "ashift=9",
        "-o",
        "failmode=continue",
        "-O",
        "compression=on",
        "-m",
        &mnt_s,
        "fm",
    ];
    match layout {
        "single" => {}
        "mirror" => create.push("mirror"),
        "raidz1" => create.push("raidz1"),
        _ => create.push("raidz2"),
    }
    create.extend(devs.iter().map(String::as_str));
    d.ok("rzpool", &create);
    let bad = &devs[rng.below(nleaves as u64) as usize];
    let mut m = Model::default();
    let mut durable = Model::default();
    let (mut faults, mut suspensions, mut crashes, mut ops) = (0, 0, 0, 0);
    for round in 0..rounds {
        let n = 10 + rng.below(60);
        for _ in 0..n {
            step(&mut rng, &mut m, &mnt);
        }
        ops += n;
        let ctx = format!("seed {seed} round {round} ({layout})");
        match rng.below(10) {
            0..=5 => {
                faults += 1;
                let (kind, io) = match rng.below(8) {
                    0 => ("nxio", "all"),
                    1 | 2 => ("io", "flush"),
                    _ => ("io", "write"),
                };
                let after = if io == "flush" { rng.below(3) } else { rng.below(150) }.to_string();
                d.ok("rzinject", &["-d", bad, "-e", kind, "-T", io, "-A", &after, "fm"]);
                let r = sync_mount(&mnt);
                d.ok("rzinject", &["-c", "all"]);
                match r {
                    Ok(()) => durable = m.clone(),
                    Err(e) => {
                        suspensions += 1;
                        assert_eq!(
                            nleaves, 1,
                            "{ctx}: a redundant pool failed a sync with one bad leaf: {e}"
                        );
                        let st = d.ok("rzpool", &["status", "fm"]);
                        assert!(st.contains("SUSPENDED"), "{ctx}: fsync failed ({e}) but status says:\n{st}");
                        // failmode=continue: changes are refused, reads go on.
                        let refused = mnt.join("refused-while-suspended");
                        assert!(
                            std::fs::write(&refused, b"x").is_err(),
                            "{ctx}: a suspended pool took a write"
                        );
                        compare_mount(&m, &mnt);
                        d.ok("rzpool", &["clear", "fm"]);
                        sync_mount(&mnt).unwrap_or_else(|e| panic!("{ctx}: fsync after clear: {e}"));
                        durable = m.clone();
                    }
                }
            }
            6..=7 => {
                sync_mount(&mnt).unwrap_or_else(|e| panic!("{ctx}: fsync: {e}"));
                durable = m.clone();
            }
            _ => {
                crashes += 1;
                d.kill9();
                lazy_unmount(&mnt);
                d.ok("rzpool", &["import", "-N", "-d", &dir_s, "fm"]);
                // A leaf that missed txgs (faulted before the crash) resilvers at import;
                // its syncs would make later changes durable without an fsync, so the
                // model waits for it before going on.
                d.ok("rzpool", &["wait", "fm"]);
                if !mounts_under(&dir).contains(&mnt_s) {
                    d.ok("rzfs", &["mount", "fm", &mnt_s]);
                }
                m = durable.clone();
                compare_mount(&m, &mnt);
            }
        }
    }
    compare_mount(&m, &mnt);
    d.ok("rzpool", &["export", "fm"]);
    assert!(mounts_under(&dir).is_empty(), "export left mounts behind: {:?}", mounts_under(&dir));
    zdb_check(&dir, "fm");
    rzdb_space_check(&dir, "fm");
    eprintln!(
        "fault_model: {layout} done, {rounds} rounds, {ops} operations, {faults} faults, {suspensions} suspensions, {crashes} crashes, {} names at the end",
        m.names.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
