//! # Fault atlas: every layout × every way devices fail, healed by scrub or resilver
//!
//! Through a private rzfsd per case, on 128 MiB sparse file vdevs holding a few MiB of
//! random files and a snapshot. A case is a layout and a fault kind. Layouts: `mirror2`,
//! `mirror3`, `raidz1-3`..`raidz1-8`, `raidz2-4`..`raidz2-8`, `raidz3-5`..`raidz3-8`
//! (`raidzP-W`: parity P over W devices) and stripes of two top-level vdevs, `2xmirror2`,
//! `2xraidz1-4`, `2xraidz2-5`, `2xraidz3-6` (the tops of an rzfs pool share one shape): 21
//! layouts, 105 cases. Every fault hits up to the parity's count of devices of each
//! top-level vdev (how many and which are drawn from the seed):
//! * `missing`: devices taken away while the pool is exported; it imports read-write,
//!   DEGRADED with them UNAVAIL, takes more writes, and `zpool replace OLD NEW` puts a blank
//!   device in the place of each; after `zpool wait -t resilver` the old devices are
//!   detached and the pool is ONLINE.
//! * `noise`: stretches of the devices' written area (found with `SEEK_DATA`; never the
//!   labels and boot area, the first 4 MiB, nor the last 512 KiB) overwritten with random
//!   bytes while exported; `zpool scrub -w` repairs them with 0 errors, charging CKSUM
//!   errors to the damaged devices only; after `zpool clear` a second scrub repairs 0B.
//! * `bitflips`: single bits flipped at random in the same area, then as `noise`.
//! * `stale`: devices taken offline one after the other (one more in a vdev already down
//!   to its parity is refused with "no valid replicas") while files are written, changed,
//!   deleted and snapshotted; `zpool online` starts a resilver by itself, which writes less
//!   than rebuilding those devices whole would (their share of every live block, from zdb),
//!   blames no device and leaves the pool ONLINE.
//! * `scan_errors`: while a slowed scrub runs (`RZFS_SCAN_BATCH=8`, `RZFS_SCAN_DELAY_MS=50`)
//!   and files are written, `rzinject` fails every read of one device and every write of
//!   another (in one scrub when the layout can bear both at once, else in two): the scrub
//!   finishes with no data errors and the READ and WRITE counters stand on the injected
//!   devices only; `rzinject -c all`, `zpool clear`, the resilver of the faulted device,
//!   and a last scrub repairs 0B with every counter 0.
//!
//! After every case each file (and each snapshot's) reads back identical, the exported pool
//! passes `zdb -bcc` and `rzdb -b`, and the repair is proven real: as many of the *other*
//! devices as the parity allows (never the damaged, replaced, stale or faulted ones) are
//! taken away, and every file and snapshot reads back through a read-only import.
//!
//! **Running it.** By default a seeded sample of 15 cases runs, three per fault kind (about
//! two minutes in a release build on two cores; a case takes 6–10 s). The seed is printed
//! (`fault_atlas: seed N (RZFS_ATLAS_SEED=N replays)`), and so is each case: its name, the
//! damage, what `status` said. `RZFS_ATLAS` chooses: `all` (every case), a number (a sample
//! that size), or a comma-separated list of `LAYOUT:FAULT`, either side possibly `*`
//! (`raidz2-6:noise`, `*:stale`, `2xmirror2:*`). A case draws its damage from the seed and
//! its name only, so `RZFS_ATLAS_SEED=N RZFS_ATLAS=CASE` replays one case of a sampled run.
//! The whole atlas:
//!
//! ```text
//! RZFS_ORACLE=1 RZFS_ATLAS=all cargo test --release -p rzfs-cli --test fault_atlas
//! ```
//!
//! Every case runs even when one fails; the failures are listed at the end (the failed
//! case's directory is left in place). Not covered: damage beyond the parity (`scrub.rs`
//! names the unrecoverable block), damaged labels, hot spares, crashes during a scan.
//!
//! Needs FUSE, root and zdb (skipped otherwise).

mod common;

use common::pools::*;
use common::rng::Rng;
use common::tools::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Size of every device: small pools keep a case to seconds.
const DEV_BYTES: u64 = 128 << 20;
/// Damage stays clear of labels L0/L1 and the boot area (the first 4 MiB) and of labels
/// L2/L3 (the last 512 KiB): the atlas damages data, not the pool's identity.
const FRONT: u64 = 4 << 20;
const BACK: u64 = 512 << 10;
/// Cases per fault kind in the default sample.
const PER_FAULT: usize = 3;
const POOL: &str = "atlas";

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fault {
    Missing,
    Noise,
    Bitflips,
    Stale,
    ScanErrors,
}

const FAULTS: [Fault; 5] = [Fault::Missing, Fault::Noise, Fault::Bitflips, Fault::Stale, Fault::ScanErrors];

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Missing => "missing",
            Fault::Noise => "noise",
            Fault::Bitflips => "bitflips",
            Fault::Stale => "stale",
            Fault::ScanErrors => "scan_errors",
        }
    }
}

fn leak<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

/// `tops` top-level vdevs of `kind` (`mirror`, `raidz2`...), `width` devices each.
fn layout(name: String, kind: &'static str, width: usize, tops: usize, parity: usize) -> Layout {
    let mut words = Vec::new();
    let mut groups = Vec::new();
    for t in 0..tops {
        words.push(kind);
        words.extend(std::iter::repeat_n("{}", width));
        groups.push(leak((t * width..(t + 1) * width).collect()));
    }
    Layout {
        name: Box::leak(name.into_boxed_str()),
        words: leak(words),
        ndev: width * tops,
        groups: leak(groups),
        parity,
    }
}

fn layouts() -> Vec<Layout> {
    const RAIDZ: [(usize, &str); 3] = [(1, "raidz1"), (2, "raidz2"), (3, "raidz3")];
    let mut v =
        vec![layout("mirror2".into(), "mirror", 2, 1, 1), layout("mirror3".into(), "mirror", 3, 1, 2)];
    for (p, kind) in RAIDZ {
        for w in p + 2..=8 {
            v.push(layout(format!("{kind}-{w}"), kind, w, 1, p));
        }
    }
    v.push(layout("2xmirror2".into(), "mirror", 2, 2, 1));
    for (p, kind) in RAIDZ {
        v.push(layout(format!("2x{kind}-{}", p + 3), kind, p + 3, 2, p));
    }
    v
}

struct Case {
    layout: usize,
    fault: Fault,
    name: String,
}

fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// The cases `RZFS_ATLAS` asks for (see the module comment); a sample draws round-robin
/// over the fault kinds, each kind's layouts shuffled.
fn select(ls: &[Layout], rng: &mut Rng) -> Vec<Case> {
    let sel = std::env::var("RZFS_ATLAS").unwrap_or_default();
    let cases = |f: Fault| {
        ls.iter().enumerate().map(move |(i, l)| Case {
            layout: i,
            fault: f,
            name: format!("{}:{}", l.name, f.name()),
        })
    };
    if sel == "all" {
        return FAULTS.iter().flat_map(|&f| cases(f)).collect();
    }
    if sel.is_empty() || sel.parse::<usize>().is_ok() {
        let n = sel.parse().unwrap_or(PER_FAULT * FAULTS.len());
        let mut per: Vec<Vec<Case>> = FAULTS
            .iter()
            .map(|&f| {
                let mut v: Vec<Case> = cases(f).collect();
                shuffle(&mut v, rng);
                v
            })
            .collect();
        let mut out = Vec::new();
        for i in 0.. {
            if out.len() == n || per.iter().all(Vec::is_empty) {
                break;
            }
            out.extend(per[i % FAULTS.len()].pop());
        }
        return out;
    }
    let wanted = |c: &Case| {
        sel.split(',').any(|s| {
            let (l, f) = s.trim().split_once(':').unwrap_or((s.trim(), "*"));
            (l == "*" || l == ls[c.layout].name) && (f == "*" || f == c.fault.name())
        })
    };
    let picked: Vec<Case> = FAULTS.iter().flat_map(|&f| cases(f)).filter(wanted).collect();
    assert!(!picked.is_empty(), "RZFS_ATLAS={sel} names no case (LAYOUT:FAULT, `all` or a number)");
    picked
}

/// A case's own seed: the run's seed and the case's name, so that one case of a sampled
/// run replays alone.
fn case_seed(seed: u64, name: &str) -> u64 {
    name.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[test]
fn fault_atlas() {
    if skip_without_fuse_zdb("fault_atlas") {
        return;
    }
    let seed = common::rng::env_seed("RZFS_ATLAS_SEED", "fault_atlas");
    let ls = layouts();
    let cases = select(&ls, &mut Rng::new(seed));
    let total = ls.len() * FAULTS.len();
    eprintln!("fault_atlas: {} of {total} cases", cases.len());
    let t0 = Instant::now();
    let mut failed = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        eprintln!(
            "\n[{}/{}] {} (RZFS_ATLAS_SEED={seed} RZFS_ATLAS={} replays it)",
            i + 1,
            cases.len(),
            c.name,
            c.name
        );
        let t = Instant::now();
        let l = &ls[c.layout];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_case(l, c.fault, &c.name, case_seed(seed, &c.name))
        }));
        match r {
            Ok(()) => eprintln!("   ok in {:.1}s", t.elapsed().as_secs_f64()),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                eprintln!("   FAILED in {:.1}s", t.elapsed().as_secs_f64());
                failed.push(format!("{}: {}", c.name, msg.lines().next().unwrap_or("")));
            }
        }
    }
    eprintln!(
        "\nfault_atlas: {} cases in {:.0}s, {} failed",
        cases.len(),
        t0.elapsed().as_secs_f64(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "fault_atlas seed {seed}: {} of {} cases failed \
         (RZFS_ATLAS_SEED={seed} RZFS_ATLAS=CASE replays one):\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

fn run_case(l: &Layout, fault: Fault, name: &str, seed: u64) {
    let env: &[(&str, &str)] = if fault == Fault::ScanErrors {
        &[("RZFS_SCAN_BATCH", "8"), ("RZFS_SCAN_DELAY_MS", "50")]
    } else {
        &[]
    };
    let mut r = Rig::new(l, name, seed, env);
    match fault {
        Fault::Missing => missing(&mut r),
        Fault::Noise | Fault::Bitflips => damaged(&mut r, fault),
        Fault::Stale => stale(&mut r),
        Fault::ScanErrors => scan_errors(&mut r),
    }
}

/// One case's pool, daemon and expected contents.
struct Rig<'a> {
    l: &'a Layout,
    name: &'a str,
    d: Daemon,
    /// After the daemon: fields drop in order, and the directory goes once it is stopped.
    dir: Scratch,
    devs: Vec<String>,
    mnt: PathBuf,
    rng: Rng,
    /// Path under the mount (snapshots under `.zfs/snapshot/`) → contents.
    want: BTreeMap<String, Vec<u8>>,
}

impl<'a> Rig<'a> {
    /// Creates the pool and writes the workload: files, a snapshot, then a changed file, a
    /// deleted one and new ones, synced.
    fn new(l: &'a Layout, name: &'a str, seed: u64, env: &[(&str, &str)]) -> Rig<'a> {
        let tag = format!("atlas-{}", name.replace(':', "-"));
        let dir = scratch(&tag);
        let d = Daemon::with_env(&tag, env);
        let (devs, mnt) = create(&d, &dir, POOL, l, DEV_BYTES);
        let mut r = Rig { l, name, dir, d, devs, mnt, rng: Rng::new(seed), want: BTreeMap::new() };
        write_files(&r.mnt, "a", 5, 100_000..1_200_000, &mut r.rng, &mut r.want);
        r.snapshot("s1");
        r.rewrite("a0");
        r.remove("a1");
        write_files(&r.mnt, "b", 2, 100_000..1_000_000, &mut r.rng, &mut r.want);
        r.rzpool(&["sync", POOL]);
        r
    }

    fn rzpool(&self, args: &[&str]) -> String {
        self.d.ok("rzpool", args)
    }

    fn status(&self) -> String {
        self.rzpool(&["status", "-p", POOL])
    }

    fn snapshot(&mut self, snap: &str) {
        self.d.ok("rzfs", &["snapshot", &format!("{POOL}@{snap}")]);
        let head: Vec<(String, Vec<u8>)> = self
            .want
            .iter()
            .filter(|(k, _)| !k.starts_with(".zfs/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in head {
            self.want.insert(format!(".zfs/snapshot/{snap}/{k}"), v);
        }
    }

    fn rewrite(&mut self, file: &str) {
        let data = self.rng.data_in(100_000, 800_000);
        std::fs::write(self.mnt.join(file), &data).unwrap();
        self.want.insert(file.into(), data);
    }

    fn remove(&mut self, file: &str) {
        std::fs::remove_file(self.mnt.join(file)).unwrap();
        self.want.remove(file);
    }

    fn short(&self, i: usize) -> String {
        Path::new(&self.devs[i]).file_name().unwrap().to_string_lossy().into_owned()
    }

    fn shorts(&self, which: &[usize]) -> String {
        which.iter().map(|&i| self.short(i)).collect::<Vec<_>>().join(" ")
    }

    fn group_of(&self, i: usize) -> usize {
        self.l.groups.iter().position(|g| g.contains(&i)).unwrap()
    }

    /// Up to the parity's count of devices of each top-level vdev, one at least.
    fn victims(&mut self) -> Vec<usize> {
        let p = self.l.parity as u64;
        let mut counts: Vec<u64> = self.l.groups.iter().map(|_| self.rng.below(p + 1)).collect();
        if counts.iter().all(|&k| k == 0) {
            let g = self.rng.below(counts.len() as u64) as usize;
            counts[g] = self.rng.range(1, p + 1);
        }
        let mut out = Vec::new();
        for (g, k) in self.l.groups.iter().zip(counts) {
            let mut members = g.to_vec();
            shuffle(&mut members, &mut self.rng);
            out.extend(members.into_iter().take(k as usize));
        }
        out
    }

    /// What `status` says, on one line: state, scan, errors, and every device that is not
    /// ONLINE or has counts (READ/WRITE/CKSUM).
    fn summary(&self, st: &str) -> String {
        let line = |p: &str| st.lines().map(str::trim).find(|l| l.starts_with(p)).unwrap_or("").to_string();
        let counts = counters(st, &self.devs);
        let devs: Vec<String> = (0..self.devs.len())
            .filter_map(|i| {
                let state = dev_state(st, &self.devs[i]);
                let (r, w, c) = counts[i];
                (state != "ONLINE" || (r, w, c) != (0, 0, 0))
                    .then(|| format!("{} {state} {r}/{w}/{c}", self.short(i)))
            })
            .collect();
        let devs = if devs.is_empty() { "all ONLINE 0/0/0".to_string() } else { devs.join(", ") };
        format!("{} | {} | {} | {devs}", line("state:"), scan_line(st), line("errors:"))
    }

    /// ONLINE, no data errors, every counter 0.
    fn assert_clean(&self, st: &str, what: &str) {
        assert!(
            st.contains("state: ONLINE") && st.contains("errors: No known data errors"),
            "{}: {what}: not ONLINE and clean:\n{st}",
            self.name
        );
        let counts = counters(st, &self.devs);
        assert!(counts.iter().all(|&c| c == (0, 0, 0)), "{}: {what}: devices blamed:\n{st}", self.name);
    }

    /// [`Rig::check_and_export`], then [`Rig::prove`].
    fn finish(&mut self, keep: &[usize], last: &[usize]) {
        self.check_and_export();
        self.prove(keep, last);
    }

    /// Checks every file, exports, has zdb (and `rzdb -b`) check the pool.
    fn check_and_export(&mut self) {
        check_files(&self.mnt, &self.want, self.name, false);
        self.rzpool(&["export", POOL]);
        zdb_check(&self.dir, POOL);
    }

    /// Proves the repair: up to the parity's count of devices per top-level vdev go away —
    /// never those in `keep`, those in `last` only when nothing else is left — and every
    /// file and snapshot reads back through a read-only import.
    fn prove(&mut self, keep: &[usize], last: &[usize]) {
        let mut away = Vec::new();
        for g in self.l.groups {
            let mut cand: Vec<usize> =
                g.iter().copied().filter(|i| !keep.contains(i) && !last.contains(i)).collect();
            shuffle(&mut cand, &mut self.rng);
            cand.extend(g.iter().copied().filter(|i| last.contains(i) && !keep.contains(i)));
            away.extend(cand.into_iter().take(self.l.parity));
        }
        eprintln!("   proof: read-only import without {}", self.shorts(&away));
        set_aside(&self.dir, &self.devs, &away);
        import(&self.d, &self.dir, POOL, &self.mnt, true);
        check_files(&self.mnt, &self.want, &format!("{} without {}", self.name, self.shorts(&away)), true);
        self.rzpool(&["export", POOL]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Rig<'_> {
    /// A failed case leaves its mount behind a daemon about to be stopped.
    fn drop(&mut self) {
        lazy_unmount(&self.mnt);
    }
}

/// Where the exported pool's blocks are, by device index, as `[from, to)` byte ranges.
struct Live {
    /// Blocks of the file system and its snapshots: nothing rewrites them before the scrub.
    files: Vec<Vec<(u64, u64)>>,
    /// Every block, the MOS's too (the next txgs free some of those).
    all: Vec<Vec<(u64, u64)>>,
}

/// Every DVA of every block zdb's traversal visits (`zdb -bbbbb`), mapped onto the devices
/// as OpenZFS maps them: a mirror's copy at the same offset of each child, a RAID-Z's
/// sectors round-robin over its children (`vdev_raidz_map_alloc`), both past the front
/// labels and boot area.
fn live_blocks(dir: &Path, l: &Layout) -> Live {
    let d = dir.to_str().unwrap();
    let cfg = run_zdb(&["-e", "-p", d, "-C", POOL]);
    let ashift: u32 = cfg.lines().find_map(|l| l.trim().strip_prefix("ashift: ")).unwrap().parse().unwrap();
    let sector = 1u64 << ashift;
    let (mut files, mut all) = (vec![Vec::new(); l.ndev], vec![Vec::new(); l.ndev]);
    for line in run_zdb(&["-e", "-p", d, "-bbbbb", POOL]).lines().filter(|l| l.starts_with("objset ")) {
        let mos = line.starts_with("objset 0 ");
        for (v, off, asize) in dvas(line)
            .filter(|&(v, off, asize)| v < l.groups.len() && off % sector == 0 && asize % sector == 0)
        {
            let g = l.groups[v];
            for b in off / sector..(off + asize) / sector {
                let on: Vec<(usize, u64)> = if l.words[0] == "mirror" {
                    g.iter().map(|&i| (i, b)).collect()
                } else {
                    vec![(g[(b % g.len() as u64) as usize], b / g.len() as u64)]
                };
                for (i, row) in on {
                    all[i].push(row);
                    if !mos {
                        files[i].push(row);
                    }
                }
            }
        }
    }
    let extents = |v: Vec<Vec<u64>>| v.into_iter().map(|s| extents(s, sector)).collect();
    Live { files: extents(files), all: extents(all) }
}

/// The `DVA[i]=<VDEV:OFFSET:ASIZE>` of a line of `zdb -bbbbb` (offset and size in hex).
fn dvas(line: &str) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
    line.split(['<', '>']).filter_map(|word| {
        let parts: Vec<&str> = word.split(':').collect();
        let [v, off, asize] = parts[..] else { return None };
        let asize = u64::from_str_radix(asize, 16).ok().filter(|&a| a > 0)?;
        Some((v.parse().ok()?, u64::from_str_radix(off, 16).ok()?, asize))
    })
}

/// Sector numbers of a device → byte ranges on it (after the front labels).
fn extents(mut sectors: Vec<u64>, sector: u64) -> Vec<(u64, u64)> {
    sectors.sort_unstable();
    sectors.dedup();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for b in sectors {
        let at = FRONT + b * sector;
        match out.last_mut() {
            Some(e) if e.1 == at => e.1 += sector,
            _ => out.push((at, at + sector)),
        }
    }
    out
}

/// A uniformly random offset within `extents`.
fn pick(extents: &[(u64, u64)], rng: &mut Rng) -> u64 {
    let total: u64 = extents.iter().map(|(a, b)| b - a).sum();
    let mut x = rng.below(total);
    for &(a, b) in extents {
        if x < b - a {
            return a + x;
        }
        x -= b - a;
    }
    unreachable!()
}

fn missing(r: &mut Rig) {
    let gone = r.victims();
    r.rzpool(&["export", POOL]);
    set_aside(&r.dir, &r.devs, &gone);
    eprintln!("   damage: {} missing", r.shorts(&gone));
    import(&r.d, &r.dir, POOL, &r.mnt, false);
    let st = r.status();
    eprintln!("   imported: {}", r.summary(&st));
    assert!(st.contains("state: DEGRADED"), "{}: import without {}:\n{st}", r.name, r.shorts(&gone));
    for &i in &gone {
        assert_eq!(dev_state(&st, &r.devs[i]), "UNAVAIL", "{}:\n{st}", r.name);
    }
    write_files(&r.mnt, "m", 2, 100_000..1_000_000, &mut r.rng, &mut r.want);
    r.rzpool(&["sync", POOL]);
    let new = blank(&r.dir, "new", gone.len());
    for (&i, n) in gone.iter().zip(&new) {
        r.rzpool(&["replace", POOL, &r.devs[i], n]);
    }
    r.rzpool(&["wait", "-t", "resilver", POOL]);
    let old: Vec<String> = gone.iter().map(|&i| r.devs[i].clone()).collect();
    for (&i, n) in gone.iter().zip(new) {
        r.devs[i] = n;
    }
    let st = r.status();
    eprintln!("   replaced: {}", r.summary(&st));
    for o in &old {
        let listed = st.lines().any(|l| l.split_whitespace().next() == Some(o.as_str()));
        assert!(
            !listed && !st.contains("replacing-"),
            "{}: {o} not detached after the resilver:\n{st}",
            r.name
        );
    }
    let scan = scan_line(&st);
    assert!(scan.starts_with("scan: resilvered") && scan.contains("with 0 errors"), "{}:\n{st}", r.name);
    assert!(resilvered(&st) > 0, "{}:\n{st}", r.name);
    r.assert_clean(&st, "after the replace");
    r.finish(&gone, &[]);
}

/// `noise` and `bitflips`: damage while exported, then scrub.
fn damaged(r: &mut Rig, fault: Fault) {
    let hit = r.victims();
    r.rzpool(&["export", POOL]);
    let live = live_blocks(&r.dir, r.l);
    for &i in &hit {
        let p = PathBuf::from(&r.devs[i]);
        // Every stretch starts, and most flips fall, on a block of the file system: nothing
        // frees those before the scrub reads them, so the device must be charged.
        let (files, all) = (&live.files[i], &live.all[i]);
        let used: u64 = all.iter().map(|(a, b)| b - a).sum();
        let what = if fault == Fault::Noise {
            let n = r.rng.range(1, 4);
            let mut bytes = 0;
            for _ in 0..n {
                let off = pick(files, &mut r.rng);
                let len = r.rng.range(16 << 10, 1 << 20).min(DEV_BYTES - BACK - off);
                noise(&p, off, len as usize, &mut r.rng);
                bytes += len;
            }
            format!("{n} stretches of noise, {} KiB", bytes >> 10)
        } else {
            let n = r.rng.range(16, 200);
            for _ in 0..n {
                let off = if r.rng.percent(75) { pick(files, &mut r.rng) } else { pick(all, &mut r.rng) };
                flips(&p, off, off + 1, 1, &mut r.rng);
            }
            format!("{n} bit flips")
        };
        eprintln!("   damage: {}: {what} over its {} KiB of live blocks", r.short(i), used >> 10);
    }
    import(&r.d, &r.dir, POOL, &r.mnt, false);
    let before = r.status();
    eprintln!("   imported: {}", r.summary(&before));
    r.rzpool(&["scrub", "-w", POOL]);
    let st = r.status();
    eprintln!("   scrub: {}", r.summary(&st));
    let scan = scan_line(&st);
    assert!(scan.starts_with("scan: scrub repaired") && scan.contains("with 0 errors"), "{}:\n{st}", r.name);
    // The import's and mount's own reads heal what they read (self-healing reads): damage
    // confined to such metadata is repaired, and charged, before the scrub starts.
    let healed_before =
        counters(&before, &r.devs).iter().enumerate().any(|(i, c)| hit.contains(&i) && c.2 > 0);
    assert!(
        healed_before || !scan.starts_with("scan: scrub repaired 0B"),
        "{}: nothing repaired:\n{st}",
        r.name
    );
    assert!(st.contains("errors: No known data errors"), "{}:\n{st}", r.name);
    for (i, (rd, wr, ck)) in counters(&st, &r.devs).into_iter().enumerate() {
        assert_eq!((rd, wr), (0, 0), "{}: {} has I/O errors:\n{st}", r.name, r.short(i));
        let blamed = hit.contains(&i);
        assert_eq!(ck > 0, blamed, "{}: {} CKSUM {ck}, damaged: {blamed}:\n{st}", r.name, r.short(i));
    }
    r.rzpool(&["clear", POOL]);
    r.rzpool(&["scrub", "-w", POOL]);
    let st = r.status();
    assert!(scan_line(&st).starts_with("scan: scrub repaired 0B"), "{}: second scrub:\n{st}", r.name);
    r.assert_clean(&st, "second scrub");
    r.finish(&hit, &[]);
}

fn stale(r: &mut Rig) {
    let away = r.victims();
    for &i in &away {
        r.rzpool(&["offline", POOL, &r.devs[i]]);
    }
    // A top-level vdev down to its parity cannot spare one more.
    for g in r.l.groups.iter().filter(|g| g.iter().filter(|i| away.contains(i)).count() == r.l.parity) {
        let more = *g.iter().find(|i| !away.contains(i)).unwrap();
        let (code, _, err) = r.d.run("rzpool", &["offline", POOL, &r.devs[more]]);
        assert!(
            code != 0 && err.contains("no valid replicas"),
            "{}: offline {}: {code} {err}",
            r.name,
            r.short(more)
        );
    }
    let st = r.status();
    eprintln!("   damage: {} offline: {}", r.shorts(&away), r.summary(&st));
    assert!(st.contains("state: DEGRADED"), "{}:\n{st}", r.name);
    for &i in &away {
        assert_eq!(dev_state(&st, &r.devs[i]), "OFFLINE", "{}:\n{st}", r.name);
    }
    // What they miss: new files, a snapshot, a changed and a deleted file.
    write_files(&r.mnt, "s", 3, 100_000..1_000_000, &mut r.rng, &mut r.want);
    r.snapshot("s2");
    r.rewrite("b0");
    r.remove("a2");
    r.rzpool(&["sync", POOL]);
    for &i in &away {
        r.rzpool(&["online", POOL, &r.devs[i]]);
    }
    r.rzpool(&["wait", "-t", "resilver", POOL]);
    let st = r.status();
    eprintln!("   online: {}", r.summary(&st));
    let scan = scan_line(&st);
    assert!(scan.starts_with("scan: resilvered") && scan.contains("with 0 errors"), "{}:\n{st}", r.name);
    let n = resilvered(&st);
    r.assert_clean(&st, "after the resilver");
    r.check_and_export();
    // Only what they missed: less than rebuilding them whole would write (every sector of
    // every live block on them; `zpool list`'s allocation is no yardstick: it counts a
    // mirror's blocks once and a RAID-Z's parity too).
    let live = live_blocks(&r.dir, r.l);
    let whole: u64 = away.iter().flat_map(|&i| &live.all[i]).map(|(a, b)| b - a).sum();
    eprintln!("   resilvered {} KiB of the {} KiB a whole rebuild would write", n >> 10, whole >> 10);
    assert!(n > 0 && n < whole, "{}: resilvered {n} bytes, a whole rebuild {whole}:\n{st}", r.name);
    r.prove(&away, &[]);
}

fn scan_errors(r: &mut Rig) {
    let n = r.devs.len() as u64;
    let rd = r.rng.below(n) as usize;
    let wr = (rd + 1 + r.rng.below(n - 1) as usize) % n as usize;
    // Both at once only where the vdevs can bear two faults together.
    let together = r.l.parity >= 2 || r.group_of(rd) != r.group_of(wr);
    let phases: Vec<Vec<(usize, &str)>> = if together {
        vec![vec![(rd, "read"), (wr, "write")]]
    } else {
        vec![vec![(rd, "read")], vec![(wr, "write")]]
    };
    for (p, inject) in phases.iter().enumerate() {
        r.rzpool(&["scrub", POOL]);
        for &(i, t) in inject {
            r.d.ok("rzinject", &["-d", &r.devs[i], "-e", "io", "-T", t, POOL]);
        }
        let st = r.status();
        assert!(st.contains("scrub in progress"), "{}: the scrub ended before the injection:\n{st}", r.name);
        let what: Vec<String> = inject.iter().map(|&(i, t)| format!("{} fails {t}s", r.short(i))).collect();
        eprintln!("   injected during the scrub: {}", what.join(", "));
        write_files(&r.mnt, &format!("e{p}-"), 2, 100_000..600_000, &mut r.rng, &mut r.want);
        r.rzpool(&["sync", POOL]);
        r.rzpool(&["wait", "-t", "scrub", POOL]);
        let st = r.status();
        eprintln!("   scrub: {}", r.summary(&st));
        let scan = scan_line(&st);
        assert!(
            scan.starts_with("scan: scrub repaired") && scan.contains("with 0 errors"),
            "{}:\n{st}",
            r.name
        );
        assert!(st.contains("errors: No known data errors"), "{}:\n{st}", r.name);
        for (i, (rc, wc, cc)) in counters(&st, &r.devs).into_iter().enumerate() {
            let (reads, writes) = (inject.contains(&(i, "read")), inject.contains(&(i, "write")));
            let ok = (rc > 0) == reads && (wc > 0) == writes && cc == 0;
            assert!(
                ok,
                "{}: {} counts {rc}/{wc}/{cc}, injected read {reads} write {writes}:\n{st}",
                r.name,
                r.short(i)
            );
        }
        r.d.ok("rzinject", &["-c", "all"]);
        r.rzpool(&["clear", POOL]);
        r.rzpool(&["wait", "-t", "resilver", POOL]);
        let st = r.status();
        eprintln!("   cleared: {}", r.summary(&st));
        r.assert_clean(&st, "after clear and resilver");
    }
    r.rzpool(&["scrub", "-w", POOL]);
    let st = r.status();
    eprintln!("   last scrub: {}", r.summary(&st));
    assert!(scan_line(&st).starts_with("scan: scrub repaired 0B"), "{}: last scrub:\n{st}", r.name);
    r.assert_clean(&st, "last scrub");
    r.finish(&[wr], &[rd]);
}
