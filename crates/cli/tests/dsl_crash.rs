//! # Snapshots, clones, promote, rollback and destroy are all or nothing across a crash
//!
//! Each trial runs a seeded sequence of dataset operations on a pool written through its
//! owner ([`pool::txg::Spa`], in process): file changes in the root file system, snapshots,
//! clones of any snapshot, promotes (snapshots move between file systems, origins flip),
//! rollbacks to the latest snapshot, and destroys of snapshots and of clones with their
//! snapshots. A model follows every operation that succeeds: every file system and
//! snapshot by name, with its files.
//!
//! At one step the pool loses every write after the first `k` on each leaf (a power cut
//! seen from the disks): the step's sync fails (or, past its last write, succeeds), and the
//! owner is dropped there, as a process that dies. The pool is imported again and must
//! hold exactly the datasets and files of the model before that step or (when its sync got
//! through) after it; it takes a new change, exports, and OpenZFS's `zdb -bcc` finds no
//! leaked or doubly referenced block and the DSL's space accounting agrees with the blocks
//! (deadlists, clones' origins, promoted snapshots).
//!
//! `RZFS_DSL_CRASH_TRIALS` (default 10; 3 in the fast tier) trials per run, seeded by
//! `RZFS_DSL_CRASH_SEED` (printed) for replay; every fifth trial runs without a cut.

mod common;

use common::libpool::{self, Files, LibFs, LAYOUTS};
use common::rng::Rng;
use common::tools::*;
use pool::txg::{FailMode, SpaHealth};
use std::collections::BTreeMap;
use vdev::inject::{self, FaultKind, FaultRule, IoKind};

const SIZE: u64 = 96 << 20;
const STEPS: usize = 12;

/// Every file system and snapshot, as the operations that succeeded left them.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    /// Full name -> files.
    files: BTreeMap<String, Files>,
    /// File system -> short names of its snapshots, oldest first.
    snaps: BTreeMap<String, Vec<String>>,
    /// File system -> its origin snapshot (clones).
    origin: BTreeMap<String, Option<String>>,
}

impl Model {
    fn new(root: &str) -> Model {
        let mut m = Model::default();
        m.files.insert(root.into(), Files::new());
        m.snaps.insert(root.into(), Vec::new());
        m.origin.insert(root.into(), None);
        m
    }

    fn snapshots(&self) -> Vec<String> {
        self.files.keys().filter(|k| k.contains('@')).cloned().collect()
    }

    fn clones(&self) -> Vec<String> {
        self.origin.iter().filter(|(_, o)| o.is_some()).map(|(f, _)| f.clone()).collect()
    }

    /// `zfs promote F`: F's origin O@s and O's snapshots before it move to F (same short
    /// names), clones of them now come from F, O becomes a clone of F@s.
    fn promote(&mut self, f: &str) {
        let o_snap = self.origin[f].clone().unwrap();
        let (o, s) = o_snap.split_once('@').unwrap();
        let (o, s) = (o.to_string(), s.to_string());
        let k = self.snaps[&o].iter().position(|x| *x == s).unwrap();
        let moved: Vec<String> = self.snaps.get_mut(&o).unwrap().drain(..=k).collect();
        for short in &moved {
            let (old, new) = (format!("{o}@{short}"), format!("{f}@{short}"));
            let c = self.files.remove(&old).unwrap();
            self.files.insert(new.clone(), c);
            for v in self.origin.values_mut() {
                if v.as_deref() == Some(old.as_str()) {
                    *v = Some(new.clone());
                }
            }
        }
        let mut now = moved;
        now.extend(self.snaps[f].iter().cloned());
        self.snaps.insert(f.to_string(), now);
        let o_origin = self.origin[&o].clone();
        self.origin.insert(f.to_string(), o_origin);
        self.origin.insert(o.clone(), Some(format!("{f}@{s}")));
    }
}

/// One operation: the model it leads to and whether the owner did it.
fn step(fs: &mut LibFs, m: &Model, rng: &mut Rng, n: usize) -> (Model, Result<(), String>, String) {
    let root = fs.name.clone();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let mut next = m.clone();
    let e = |e: pool::PoolError| e.to_string();
    let roll = rng.below(100);
    let snaps = m.snapshots();
    let clones = m.clones();
    let pick = |v: &Vec<String>, rng: &mut Rng| v[rng.below(v.len() as u64) as usize].clone();
    // What the roll asks for, falling back to a snapshot when it does not apply.
    let root_snaps = !m.snaps[&root].is_empty();
    let kind = match roll {
        0..=29 => 0,
        62..=73 if !clones.is_empty() => 3,
        50..=61 | 74..=85 if !snaps.is_empty() => {
            if roll < 62 {
                2
            } else {
                4
            }
        }
        86..=92 if root_snaps => 5,
        93..=99 if !clones.is_empty() => 6,
        _ => 1,
    };
    let (what, r) = if kind == 0 {
        let files = next.files.get_mut(&root).unwrap();
        let mut r = Ok(());
        for _ in 0..rng.range(1, 4) {
            let name = format!("f{}", rng.below(8));
            let data = rng.data_in(1, 200 << 10);
            r = r.and_then(|_| fs.put(&name, &data).map_err(e));
            files.insert(name, data);
        }
        if rng.percent(30) && !files.is_empty() {
            let name = files.keys().next().unwrap().clone();
            r = r.and_then(|_| fs.del(&name).map_err(e));
            files.remove(&name);
        }
        ("write files".to_string(), r.and_then(|_| fs.spa.sync_now().map_err(e)))
    } else if kind == 1 {
        let s = format!("s{n}");
        let full = format!("{root}@{s}");
        let c = next.files[&root].clone();
        next.files.insert(full.clone(), c);
        next.snaps.get_mut(&root).unwrap().push(s);
        (format!("snapshot {full}"), fs.spa.snapshot(std::slice::from_ref(&full), Vec::new(), now).map_err(e))
    } else if kind == 2 {
        let from = pick(&snaps, rng);
        let c = format!("{root}/c{n}");
        let content = next.files[&from].clone();
        next.files.insert(c.clone(), content);
        next.snaps.insert(c.clone(), Vec::new());
        next.origin.insert(c.clone(), Some(from.clone()));
        (format!("clone {from} {c}"), fs.spa.clone_filesystem(&from, &c, Vec::new(), now).map_err(e))
    } else if kind == 3 {
        let f = pick(&clones, rng);
        let origin = m.origin[&f].clone().unwrap();
        next.promote(&f);
        (format!("promote {f} (origin {origin})"), fs.spa.promote(&f, &origin).map_err(e))
    } else if kind == 4 {
        let s = pick(&snaps, rng);
        let (f, short) = s.split_once('@').unwrap();
        next.files.remove(&s);
        next.snaps.get_mut(f).unwrap().retain(|x| x != short);
        (format!("destroy {s}"), fs.spa.destroy_datasets(std::slice::from_ref(&s)).map_err(e))
    } else if kind == 5 {
        let latest = format!("{root}@{}", m.snaps[&root].last().unwrap());
        let c = next.files[&latest].clone();
        next.files.insert(root.clone(), c);
        let r = fs.spa.rollback(&latest, &[]).map_err(e);
        let r = r.and_then(|_| fs.reopen());
        (format!("rollback {latest}"), r)
    } else {
        let c = pick(&clones, rng);
        let mut names: Vec<String> = m.snaps[&c].iter().map(|s| format!("{c}@{s}")).collect();
        names.push(c.clone());
        for n in &names {
            next.files.remove(n);
        }
        next.snaps.remove(&c);
        next.origin.remove(&c);
        (format!("destroy -r {c}"), fs.spa.destroy_datasets(&names).map_err(e))
    };
    (next, r, what)
}

/// Every file system and snapshot of the exported pool, with their files.
fn read_all(dir: &std::path::Path, name: &str) -> Result<BTreeMap<String, Files>, String> {
    let p = common::open(dir, name)?;
    let mut out = BTreeMap::new();
    for d in p.dsl().list().map_err(|e| e.to_string())? {
        if d.name.contains('$') || d.name.contains('%') || d.kind == dsl::DatasetKind::Bookmark {
            continue;
        }
        out.insert(d.name.clone(), libpool::read_dataset(&p, &d.name)?);
    }
    Ok(out)
}

fn describe(m: &BTreeMap<String, Files>) -> String {
    m.iter().map(|(k, v)| format!("{k}: {:?}", v.keys().collect::<Vec<_>>())).collect::<Vec<_>>().join("\n")
}

/// One trial: `STEPS` operations from `seed`, the cut at step `cut` after `k` writes per
/// leaf (None: no cut).
fn trial(seed: u64, cut: Option<(usize, u64)>, layout_ix: usize) -> Result<String, String> {
    let layout = LAYOUTS[layout_ix];
    let name = "dslc";
    let dir = libpool::scratch(&format!("dslc-{seed}-{cut:?}"));
    let mut fs = LibFs::create(&dir, name, layout, SIZE, FailMode::Continue, 1 << 30);
    let mut rng = Rng::new(seed);
    let mut m = Model::new(name);
    let mut log = Vec::new();
    let mut acceptable = Vec::new();
    for n in 0..STEPS {
        let ids: Vec<u64> = match cut {
            Some((at, k)) if at == n => fs
                .leaves
                .iter()
                .map(|l| {
                    inject::add(
                        l,
                        FaultRule {
                            kind: FaultKind::Error,
                            io: IoKind::Write,
                            after: k,
                            count: 0,
                            freq_pct: 100,
                        },
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        let (next, r, what) = step(&mut fs, &m, &mut rng, n);
        log.push(format!("{n}: {what}: {r:?}"));
        if !ids.is_empty() {
            for id in ids {
                inject::clear(id);
            }
            // The process dies here, whatever the step's outcome.
            acceptable = if r.is_ok() { vec![next] } else { vec![m.clone(), next] };
            break;
        }
        if r.is_ok() {
            m = next;
        } else if matches!(fs.spa.health(), SpaHealth::Suspended { .. }) {
            // A refusal (a snapshot with clones, a name taken) changes nothing; a failed
            // sync without an injected fault is a bug.
            return Err(format!("seed {seed}: step {n} ({what}) suspended the pool: {r:?}"));
        }
    }
    if acceptable.is_empty() {
        fs.spa.sync_now().map_err(|e| format!("final sync: {e}"))?;
        acceptable.push(m);
    }
    drop(fs);
    // After the crash: import, take a change, export.
    let fs = LibFs::open_existing(&dir, name, FailMode::Continue, 1 << 30)
        .map_err(|e| format!("seed {seed} {cut:?}: import after the crash: {e}\n{}", log.join("\n")))?;
    fs.put("after-crash", b"written after the import").map_err(|e| format!("write after import: {e}"))?;
    fs.spa.sync_now().map_err(|e| format!("sync after import: {e}"))?;
    fs.spa.export(false, false).map_err(|e| format!("export: {e}"))?;
    drop(fs);
    if zdb().is_some() {
        zdb_check(&dir, name);
    }
    let mut got = read_all(&dir, name)?;
    let mine = got.get_mut(name).and_then(|f| f.remove("after-crash"));
    if mine.as_deref() != Some(&b"written after the import"[..]) {
        return Err(format!("seed {seed} {cut:?}: the write after the import is missing"));
    }
    let found = acceptable.iter().position(|a| a.files == got);
    let Some(which) = found else {
        return Err(format!(
            "seed {seed} {cut:?}: the pool holds neither state around the cut\nsteps:\n{}\ngot:\n{}\nwant (before/after):\n{}",
            log.join("\n"),
            describe(&got),
            acceptable.iter().map(|a| describe(&a.files)).collect::<Vec<_>>().join("\n--\n")
        ));
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "{}\n{} seed {seed} cut {cut:?}: {} datasets, {}",
        log.join("\n"),
        layout.name,
        got.len(),
        match (acceptable.len(), which) {
            (1, _) => "state after the last step",
            (_, 0) => "state before the cut step",
            _ => "the cut step's sync got through",
        }
    ))
}

#[test]
fn dsl_operations_survive_crashes() {
    // The fast tier (RZFS_ORACLE=0, no zdb) runs a few; the oracle tier the default ten.
    let fast = std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0");
    let trials: u64 = std::env::var("RZFS_DSL_CRASH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if fast { 3 } else { 10 });
    let seed: u64 =
        std::env::var("RZFS_DSL_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!(
        "dsl_operations_survive_crashes: seed {seed} (RZFS_DSL_CRASH_SEED={seed} replays), {trials} trials"
    );
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    for t in 0..trials {
        let wseed = rng.next();
        let layout = if t % 2 == 0 { 1 } else { 2 };
        let cut = (t % 5 != 0).then(|| (rng.range(1, STEPS as u64) as usize, rng.below(80)));
        match trial(wseed, cut, layout) {
            Ok(line) => eprintln!("{line}"),
            Err(e) => {
                eprintln!("FAILED: {e}");
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {trials} trials failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
