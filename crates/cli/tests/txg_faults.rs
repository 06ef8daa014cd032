//! # A txg is all or nothing: write and flush failures at every phase of a sync
//!
//! Each trial builds a pool of one layout (single disk, mirror of 2, raidz1 of 3, raidz2 of
//! 4) through its owner ([`pool::txg::Spa`], in process), makes a durable baseline, changes
//! files, then injects a fault ([`vdev::inject`]) into the next sync: a write error on one
//! leaf (or on more leaves than the layout survives) after `k` of its writes — `k` spread
//! over the whole sync, so the cut lands in data, indirect, dnode, MOS and space-map
//! writes, labels and uberblocks (the trial says which region it hit) — a flush error
//! after `k` flushes, or the device vanishing mid-sync. Then:
//!
//! * a layout that survives the failed leaves completes the sync: the leaf is FAULTED, the
//!   pool DEGRADED, and the changes are durable;
//! * a layout that does not: the sync fails, the pool suspends (failmode=continue, so the
//!   call returns), every change is still in memory; once the fault is lifted, `zpool
//!   clear` resumes the pool and the same changes become durable.
//!
//! Either way the pool takes more changes, exports, passes OpenZFS's `zdb -bcc`, and reads
//! back exactly as the model says. Trials are a seeded sample (seed printed;
//! `RZFS_FAULT_SEED` replays one); `RZFS_FAULT_TRIALS=N` runs N trials per layout and
//! `RZFS_FAULT_TRIALS=all` the whole matrix (every cut position of the reference sync, every
//! flush, vanishing devices), which takes about an hour on 2 cores.

mod common;

use common::libpool::{self, Files, Layout, LibFs, LAYOUTS};
use common::rng::Rng;
use common::tools::*;
use pool::txg::{FailMode, SpaHealth};
use pool::PoolError;
use vdev::inject::{self, FaultKind, FaultRule, IoKind};

const SIZE: u64 = 96 << 20;

fn env_seed() -> u64 {
    std::env::var("RZFS_FAULT_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    })
}

/// One fault to inject into the sync under test.
#[derive(Clone, Debug)]
struct Fault {
    /// Leaves (indices) that fail.
    leaves: Vec<usize>,
    io: IoKind,
    kind: FaultKind,
    /// Matching I/Os let through first.
    after: u64,
}

/// Random files: small, medium and multi-block, so that data, indirect and dnode blocks
/// all change.
fn some_changes(fs: &LibFs, model: &mut Files, rng: &mut Rng, n: usize) {
    for _ in 0..n {
        let name = format!("f{}", rng.below(12));
        if rng.percent(20) && model.contains_key(&name) {
            fs.del(&name).expect("unlink");
            model.remove(&name);
        } else {
            let data = match rng.below(3) {
                0 => rng.data_in(1, 3000),
                1 => rng.data_in(10_000, 200_000),
                _ => rng.data_in(300_000, 900_000),
            };
            fs.put(&name, &data).expect("write");
            model.insert(name, data);
        }
    }
}

/// How many writes and flushes of leaf 0 the trial's sync issues (a reference run with a
/// counting rule that never fires).
fn reference(layout: Layout, seed: u64) -> (u64, u64) {
    let dir = libpool::scratch(&format!("ref-{}", layout.name));
    let fs = LibFs::create(&dir, "fref", layout, SIZE, FailMode::Continue, 1 << 30);
    let mut rng = Rng::new(seed);
    let mut model = Files::new();
    some_changes(&fs, &mut model, &mut rng, 8);
    fs.spa.sync_now().unwrap();
    some_changes(&fs, &mut model, &mut rng, 8);
    let never = |io| FaultRule { kind: FaultKind::Error, io, after: u64::MAX, count: 0, freq_pct: 100 };
    let w = inject::add(&fs.leaves[0], never(IoKind::Write));
    let f = inject::add(&fs.leaves[0], never(IoKind::Flush));
    fs.spa.sync_now().unwrap();
    let seen = |id| inject::list().into_iter().find(|r| r.id == id).map_or(0, |r| r.seen);
    let out = (seen(w), seen(f));
    inject::clear(w);
    inject::clear(f);
    fs.spa.export(false, false).unwrap();
    drop(fs);
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Where in a sync the `after`-th I/O of a leaf falls (the reference sync wrote `writes`
/// times and flushed twice: data half, then the uberblock half, one uberblock per label).
fn phase(fault: &Fault, writes: u64) -> &'static str {
    match fault.io {
        IoKind::Flush if fault.after == 0 => "flush before the uberblocks",
        IoKind::Flush => "flush after the uberblocks",
        _ if fault.after + 4 >= writes => "uberblock writes",
        _ if fault.after < writes / 3 => "first third: data blocks",
        _ => "indirect, dnode, objset, MOS and space-map writes",
    }
}

/// Runs one trial; returns a line describing it.
fn trial(layout: Layout, seed: u64, fault: &Fault, writes: u64) -> Result<String, String> {
    let tag = format!(
        "{} {:?} {:?} on {} leaves after {} I/Os ({})",
        layout.name,
        fault.kind,
        fault.io,
        fault.leaves.len(),
        fault.after,
        phase(fault, writes)
    );
    let dir = libpool::scratch(&format!("{}-{}-{}", layout.name, fault.leaves.len(), fault.after));
    let name = "ftest";
    let fs = LibFs::create(&dir, name, layout, SIZE, FailMode::Continue, 1 << 30);
    let mut rng = Rng::new(seed);
    let mut model = Files::new();
    some_changes(&fs, &mut model, &mut rng, 8);
    fs.spa.sync_now().map_err(|e| format!("baseline sync: {e}"))?;
    some_changes(&fs, &mut model, &mut rng, 8);
    let ids: Vec<u64> = fault
        .leaves
        .iter()
        .map(|&i| {
            let rule =
                FaultRule { kind: fault.kind, io: fault.io, after: fault.after, count: 0, freq_pct: 100 };
            inject::add(&fs.leaves[i], rule)
        })
        .collect();
    let r = fs.spa.sync_now();
    let fired = inject::list().iter().filter(|x| ids.contains(&x.id) && x.fired > 0).count();
    for id in &ids {
        inject::clear(*id);
    }
    let states = fs.leaf_states();
    let faulted = states.iter().filter(|s| **s == vdev::VdevState::Faulted).count();
    let outcome = if fired > layout.tolerance {
        // More leaves failed than the layout survives: the sync must fail and suspend,
        // keeping every change in memory — unless no single block lost more columns than
        // the parity covers (e.g. on a raidz1 of 3, every write after the cut was a
        // two-column block with one failed side), which OpenZFS's RAID-Z write accepts
        // too. Then the txg is durable, at most `tolerance` leaves may be FAULTED, and the
        // checks below (later syncs, zdb, read back after export) show nothing was lost.
        if r.is_ok() {
            if faulted > layout.tolerance {
                return Err(format!(
                    "{tag}: sync succeeded with {faulted} FAULTED leaves on {}: {states:?}",
                    layout.name
                ));
            }
            "more leaves failed than tolerated, no block lost: durable"
        } else {
            if !matches!(fs.spa.health(), SpaHealth::Suspended { .. }) {
                return Err(format!("{tag}: pool not suspended after a failed sync: {:?}", fs.spa.health()));
            }
            let mem = fs.tree().map_err(|e| format!("{tag}: reading while suspended: {e}"))?;
            let d = libpool::diff(&model, &mem);
            if !d.is_empty() {
                return Err(format!(
                    "{tag}: changes lost in memory after the failed sync:\n{}",
                    d.join("\n")
                ));
            }
            if fs.put("refused", b"x").is_ok() {
                return Err(format!("{tag}: a suspended pool (failmode=continue) accepted a write"));
            }
            fs.spa.clear().map_err(|e| format!("{tag}: zpool clear did not resume: {e}"))?;
            "suspended, resumed by clear"
        }
    } else {
        r.map_err(|e| format!("{tag}: sync failed with {fired} failed leaves on {}: {e}", layout.name))?;
        if faulted < fired {
            return Err(format!("{tag}: {fired} leaves failed but {faulted} are FAULTED: {states:?}"));
        }
        if fired > 0 {
            "degraded, durable"
        } else {
            "fault never fired"
        }
    };
    // The pool keeps working (degraded or resumed) and exports cleanly.
    some_changes(&fs, &mut model, &mut rng, 4);
    fs.spa.sync_now().map_err(|e| format!("{tag}: sync after recovery: {e}"))?;
    fs.spa.export(false, false).map_err(|e| format!("{tag}: export: {e}"))?;
    drop(fs);
    if zdb().is_some() {
        zdb_check(&dir, name);
    }
    let got = libpool::read_back(&dir, name).map_err(|e| format!("{tag}: {e}"))?;
    let d = libpool::diff(&model, &got);
    if !d.is_empty() {
        return Err(format!("{tag}: reads back wrong after export:\n{}", d.join("\n")));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!("{tag}: {fired} leaves failed, {outcome}"))
}

/// The trials of one layout: write cuts across the sync (some in its last writes, the
/// uberblock half), flush cuts, a vanishing device, and more failed leaves than the layout
/// survives.
fn trials_for(layout: Layout, writes: u64, flushes: u64, rng: &mut Rng, all: bool) -> Vec<Fault> {
    let one = |io, kind, after| Fault { leaves: vec![0], io, kind, after };
    let too_many: Vec<usize> = (0..=layout.tolerance.min(layout.leaves - 1)).collect();
    let mut v = Vec::new();
    if all {
        for k in 0..writes {
            v.push(one(IoKind::Write, FaultKind::Error, k));
        }
        for k in 0..flushes {
            v.push(one(IoKind::Flush, FaultKind::Error, k));
        }
        for k in (0..writes).step_by(3) {
            v.push(one(IoKind::All, FaultKind::Vanish, k));
            v.push(Fault { leaves: too_many.clone(), io: IoKind::Write, kind: FaultKind::Error, after: k });
        }
        return v;
    }
    let n = writes.max(1);
    v.push(one(IoKind::Write, FaultKind::Error, rng.below(n / 3 + 1)));
    v.push(one(IoKind::Write, FaultKind::Error, n / 3 + rng.below(n / 3 + 1)));
    // The last writes of a sync are its uberblocks (4 per leaf, one per label).
    v.push(one(IoKind::Write, FaultKind::Error, n.saturating_sub(1 + rng.below(4))));
    v.push(one(IoKind::Flush, FaultKind::Error, rng.below(flushes.max(1))));
    v.push(one(IoKind::All, FaultKind::Vanish, rng.below(n)));
    v.push(Fault { leaves: too_many, io: IoKind::Write, kind: FaultKind::Error, after: rng.below(n) });
    v
}

#[test]
fn write_and_flush_failures_at_every_phase() {
    let seed = env_seed();
    eprintln!("txg_faults: seed {seed} (RZFS_FAULT_SEED={seed} replays this run)");
    let sel = std::env::var("RZFS_FAULT_TRIALS").unwrap_or_default();
    let all = sel == "all";
    let per_layout: usize = sel.parse().unwrap_or(4);
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    for layout in LAYOUTS {
        let wseed = rng.next();
        let (writes, flushes) = reference(layout, wseed);
        eprintln!(
            "txg_faults: {}: the sync under test writes {writes} times and flushes {flushes} times on leaf 0",
            layout.name
        );
        let mut faults = trials_for(layout, writes, flushes, &mut rng, all);
        if !all {
            // The first three cover data, metadata and the uberblock half; the rest are
            // sampled.
            let keep = per_layout.max(3);
            while faults.len() > keep {
                let i = 3 + rng.below((faults.len() - 3) as u64) as usize;
                faults.remove(i);
            }
        }
        for f in faults {
            match trial(layout, wseed, &f, writes) {
                Ok(line) => eprintln!("txg_faults: {line}"),
                Err(e) => {
                    eprintln!("txg_faults: FAILED {e}");
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} trials failed:\n{}", failures.len(), failures.join("\n"));
}

/// A random fault for one sync of `layout`, or none.
fn random_fault(layout: Layout, rng: &mut Rng) -> Option<FaultRule> {
    if rng.percent(40) {
        return None;
    }
    let kind = match rng.below(10) {
        0 => FaultKind::Vanish,
        _ => FaultKind::Error,
    };
    let io = if rng.percent(25) { IoKind::Flush } else { IoKind::Write };
    let after = if io == IoKind::Flush { rng.below(3) } else { rng.below(120) };
    let _ = layout;
    Some(FaultRule { kind, io, after, count: 0, freq_pct: 100 })
}

#[test]
fn random_faults_and_crashes() {
    let seed = env_seed();
    let rounds: u64 = std::env::var("RZFS_RANDOM_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    eprintln!("txg_faults random: seed {seed} (RZFS_FAULT_SEED), {rounds} rounds (RZFS_RANDOM_ROUNDS)");
    let mut rng = Rng::new(seed ^ 0x5eed_f00d);
    let layout = LAYOUTS[rng.below(LAYOUTS.len() as u64) as usize];
    let dir = libpool::scratch(&format!("random-{}", layout.name));
    let name = "frandom";
    let mut fs = LibFs::create(&dir, name, layout, SIZE, FailMode::Continue, 1 << 30);
    let mut model = Files::new();
    let mut durable = Files::new();
    // After a sync that failed in its uberblock half, disk may hold either state.
    let mut maybe: Option<Files> = None;
    let (mut crashes, mut faults, mut suspensions) = (0, 0, 0);
    // Faults hit one leaf: without resilver (a later issue), a leaf that missed txgs while
    // faulted must not be the only copy left when another one fails.
    let bad_leaf = rng.below(layout.leaves as u64) as usize;
    for round in 0..rounds {
        if matches!(fs.spa.health(), SpaHealth::Suspended { .. }) {
            // Left suspended (failmode=continue): changes fail with EIO and change nothing.
            match fs.put("refused", b"x") {
                Err(PoolError::Suspended(_)) => {}
                other => panic!("seed {seed} round {round}: a write to a suspended pool gave {other:?}"),
            }
            let mem = fs.tree().expect("reading while suspended");
            let d = libpool::diff(&model, &mem);
            assert!(
                d.is_empty(),
                "seed {seed} round {round}: a refused write changed memory:\n{}",
                d.join("\n")
            );
        } else {
            let n = 1 + rng.below(5) as usize;
            some_changes(&fs, &mut model, &mut rng, n);
        }
        match rng.below(10) {
            0..=6 => {
                let rule = random_fault(layout, &mut rng);
                let id = rule.map(|r| {
                    faults += 1;
                    inject::add(&fs.leaves[bad_leaf], r)
                });
                let r = fs.spa.sync_now();
                if let Some(id) = id {
                    inject::clear(id);
                }
                match r {
                    Ok(()) => {
                        durable = model.clone();
                        maybe = None;
                    }
                    Err(e) => {
                        suspensions += 1;
                        let mem = fs.tree().expect("reading while suspended");
                        let d = libpool::diff(&model, &mem);
                        assert!(
                            d.is_empty(),
                            "seed {seed} round {round}: memory lost changes after {e}:\n{}",
                            d.join("\n")
                        );
                        maybe = Some(model.clone());
                        if rng.percent(70) {
                            fs.spa
                                .clear()
                                .unwrap_or_else(|e| panic!("seed {seed} round {round}: clear: {e}"));
                            durable = model.clone();
                            maybe = None;
                        }
                    }
                }
            }
            _ => {
                // Crash: the owner goes away without exporting.
                crashes += 1;
                drop(fs);
                fs = LibFs::open_existing(&dir, name, FailMode::Continue, 1 << 30)
                    .unwrap_or_else(|e| panic!("seed {seed} round {round}: import after a crash: {e}"));
                let got = fs.tree().expect("reading after the crash");
                let ok_durable = libpool::diff(&durable, &got).is_empty();
                let ok_maybe = maybe.as_ref().is_some_and(|m| libpool::diff(m, &got).is_empty());
                assert!(
                    ok_durable || ok_maybe,
                    "seed {seed} round {round}: after a crash the pool holds neither the durable state nor the next:\n{}",
                    libpool::diff(&durable, &got).join("\n")
                );
                model = got;
                durable = model.clone();
                maybe = None;
            }
        }
    }
    if matches!(fs.spa.health(), SpaHealth::Suspended { .. }) {
        fs.spa.clear().expect("final clear");
    }
    fs.spa.sync_now().expect("final sync");
    fs.spa.export(false, false).expect("export");
    drop(fs);
    if zdb().is_some() {
        zdb_check(&dir, name);
    }
    let got = libpool::read_back(&dir, name).expect("read back");
    let d = libpool::diff(&model, &got);
    assert!(d.is_empty(), "seed {seed}: final state reads back wrong:\n{}", d.join("\n"));
    eprintln!(
        "txg_faults random: {} ({rounds} rounds): {faults} faults injected, {suspensions} syncs failed, {crashes} crashes",
        layout.name
    );
    let _ = std::fs::remove_dir_all(&dir);
}
