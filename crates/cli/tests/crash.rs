//! # Crash consistency of the write path
//!
//! Theory. ZFS never overwrites live data: a txg writes its new blocks into free space,
//! flushes the devices, writes the uberblock that points at the new tree (to every label's
//! ring), flushes again. Whatever happens to the writes after the last completed flush, an
//! import finds either the new uberblock (and a complete tree under it) or the previous one
//! (whose tree was not touched, because blocks freed in a txg stay unallocatable until the
//! txg is safely on disk: the defer window of the metaslab allocator). Two tests check it:
//!
//! * [`kill_9_during_writes`]: the real thing, end to end. rzfsd serves a raidz1 pool over
//!   FUSE with a 0.2 s txg timeout while this process writes, renames, unlinks and fsyncs
//!   files; the daemon is killed with SIGKILL at a random moment, and a new daemon must
//!   import the pool read-write and show every file exactly as it was fsync'd. A killed
//!   process loses nothing the kernel accepted (the page cache of the device files survives),
//!   so this checks the txg state machine of the daemon, not the device ordering.
//! * [`torn_and_dropped_writes`]: the device ordering, without FUSE. The pool is written with
//!   the library through leaf devices that model a power cut after the k-th write: writes
//!   not followed by a completed flush of their device are lost (in order after the cut, a
//!   torn cut write, or an arbitrary subset: a volatile write cache). Every txg whose sync
//!   returned before the cut must survive, and the pool must import, accept new writes
//!   and pass zdb. Between syncs the workload rewrites files and fsyncs them through the
//!   intent log (`PoolWriter::zil_commit`, as `rzfsd` answers `fsync`): every commit that
//!   returned before the cut must be back after the import replays the log, and a commit
//!   the cut hit may come back only as a mix of its before and after states. The
//!   workloads take four layouts in turn: raidz1, a 3-way mirror, a stripe, and a mirror
//!   with a separate log device (which holds the log blocks).
//!
//! Seeds are printed; `RZFS_CRASH_SEED` replays a run. `RZFS_CRASH_ITERS` (default 100) sets
//! the kill count, `RZFS_CRASH_CUTS` (default 300) the cut points, `RZFS_CRASH_ZDB_EVERY`
//! (default 20) how often a cut is also checked by zdb (about 6 s per run). Measured on the
//! 2-core machine, both tests together: about 2.5 minutes (kills: 100 s, of which zdb 62 s;
//! cuts: 140 s, both running at once). zdb checks are skipped when zdb is not installed
//! (`RZFS_ORACLE=1` makes that a failure); the kill test needs /dev/fuse and fusermount3.

mod common;

use common::rng::Rng;
use common::tools::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ----- shared: randomness, scratch space, trees of files --------------------------------

fn env_u64(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `RZFS_CRASH_SEED`, else a fresh seed; printed either way so a failure can be replayed.
fn seed(test: &str) -> u64 {
    let s = std::env::var("RZFS_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32
    });
    eprintln!("{test}: seed {s} (replay with RZFS_CRASH_SEED={s})");
    s
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-crash-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A file system's contents: "/dir/" → empty for a directory, "/dir/file" → its bytes.
type Tree = BTreeMap<String, Arc<Vec<u8>>>;

/// Why two trees differ (at most a few lines).
fn tree_diff(want: &Tree, got: &Tree) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            None => out.push(format!("{p}: missing")),
            Some(g) if g != w => out.push(format!("{p}: {} bytes, expected {}", g.len(), w.len())),
            _ => {}
        }
    }
    out.extend(got.keys().filter(|p| !want.contains_key(*p)).map(|p| format!("{p}: unexpected")));
    out.truncate(12);
    out
}

// ----- kill -9 of the daemon during FUSE writes --------------------------------------------

const TXG_TIMEOUT: &str = "0.2";

/// One pool served by a private rzfsd (restarted after every kill) and mounted at `mnt`.
struct Rig {
    devdir: PathBuf,
    mnt: PathBuf,
    pool: String,
    d: Daemon,
}

impl Rig {
    fn run(&self, prog: &str, args: &[&str]) -> (i32, String, String) {
        let exe = match prog {
            "rzpool" => env!("CARGO_BIN_EXE_rzpool"),
            _ => env!("CARGO_BIN_EXE_rzfs"),
        };
        let out = Command::new(exe)
            .args(args)
            .env("RZFS_SOCKET", &self.d.sock)
            .env("RZFS_TXG_TIMEOUT", TXG_TIMEOUT)
            .output()
            .unwrap();
        let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), s(&out.stdout), s(&out.stderr))
    }

    fn ok(&self, prog: &str, args: &[&str]) -> String {
        let (code, out, err) = self.run(prog, args);
        let log = std::fs::read_to_string(self.d.sock.with_extension("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        assert_eq!(
            code,
            0,
            "{prog} {args:?} failed: {err}\nrzfsd log (last lines, newest first):\n{}",
            tail.join("\n")
        );
        out
    }

    /// SIGKILL to our daemon; returns once the process is gone.
    fn kill9(&self) {
        self.d.kill9();
    }

    /// The dead daemon's FUSE mount refuses everything (ENOTCONN): detach it.
    fn lazy_unmount(&self) {
        lazy_unmount(&self.mnt);
    }

    fn import_and_mount(&self) {
        let dir = self.devdir.to_string_lossy().into_owned();
        self.ok("rzpool", &["import", "-N", "-d", &dir, &self.pool]);
        self.ok("rzfs", &["mount", &self.pool, &self.mnt.to_string_lossy()]);
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // A failed assertion may leave a live mount: detach it before the daemon goes.
        self.lazy_unmount();
    }
}

/// What the workload did, in terms of what must survive a crash. Op numbers order events:
/// `touched[p]` is the last op that tried to change path `p` (tried: a change the kill cut
/// short may or may not have reached the daemon).
#[derive(Default)]
struct Model {
    /// Contents as the workload left them (completed operations only).
    cur: Tree,
    touched: BTreeMap<String, u64>,
    /// Files fsync'd with `File::sync_all`: contents at that moment, and the op number.
    fsynced: BTreeMap<String, (Arc<Vec<u8>>, u64)>,
    /// The whole tree as of the last completed fsync (rzfsd's fsync syncs the txg, so
    /// everything done before it is durable too), and that op number.
    durable: Tree,
    durable_at: u64,
    op: u64,
    /// An operation failed while the daemon was alive.
    error: Option<String>,
    ops: u64,
    fsyncs: u64,
}

impl Model {
    fn touch(&mut self, p: &str) {
        self.op += 1;
        self.touched.insert(p.to_string(), self.op);
    }

    fn fsynced(&mut self, p: &str) {
        self.op += 1;
        self.fsyncs += 1;
        if let Some(c) = self.cur.get(p) {
            self.fsynced.insert(p.to_string(), (c.clone(), self.op));
        }
        self.durable = self.cur.clone();
        self.durable_at = self.op;
    }

    fn untouched_since(&self, p: &str, at: u64) -> bool {
        self.touched.get(p).is_none_or(|&t| t < at)
    }

    /// What a remount shows that it must not: returns problems (empty = consistent).
    fn check(&self, got: &Tree) -> Vec<String> {
        let mut probs = Vec::new();
        for (p, (want, at)) in &self.fsynced {
            if self.untouched_since(p, *at) && got.get(p) != Some(want) {
                let g = got.get(p).map_or("missing".to_string(), |g| format!("{} bytes", g.len()));
                probs.push(format!("fsync'd file {p}: expected {} bytes, got {g}", want.len()));
            }
        }
        let paths: std::collections::BTreeSet<&String> =
            self.touched.keys().chain(self.durable.keys()).collect();
        for p in paths {
            if self.untouched_since(p, self.durable_at) && got.get(p) != self.durable.get(p) {
                probs.push(format!(
                    "{p}: state of the last fsync'd txg lost (expected {:?} bytes, got {:?})",
                    self.durable.get(p).map(|v| v.len()),
                    got.get(p).map(|v| v.len())
                ));
            }
        }
        probs.truncate(20);
        probs
    }

    /// After a verified remount, what the pool holds is the new durable baseline.
    fn rebase(&mut self, got: Tree) {
        self.op += 1;
        self.cur = got.clone();
        self.durable = got;
        self.durable_at = self.op;
    }
}

/// Every file and directory below `root`, read through the mount.
fn read_mount(root: &Path) -> std::io::Result<Tree> {
    let mut out = Tree::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let name = format!("{rel}/{}", e.file_name().to_string_lossy());
            if e.file_type()?.is_dir() {
                out.insert(format!("{name}/"), Arc::new(Vec::new()));
                stack.push((e.path(), name));
            } else {
                out.insert(name, Arc::new(std::fs::read(e.path())?));
            }
        }
    }
    Ok(out)
}

const DIRS: [&str; 4] = ["", "/a", "/b", "/c"];

fn pick_path(rng: &mut Rng) -> String {
    format!("{}/f{}", DIRS[rng.below(4) as usize], rng.below(20))
}

fn pick_existing(m: &Model, rng: &mut Rng) -> Option<String> {
    let files: Vec<&String> = m.cur.keys().filter(|p| !p.ends_with('/')).collect();
    (!files.is_empty()).then(|| files[rng.below(files.len() as u64) as usize].clone())
}

/// Changes the contents of `p` (`kind`: append, write inside, truncate, or create/replace)
/// and mirrors the change in the model; returns the open file, for an fsync.
fn change_contents(root: &Path, m: &mut Model, rng: &mut Rng, kind: u8, p: &str) -> std::io::Result<File> {
    let at = root.join(p.trim_start_matches('/'));
    let mut c = m.cur.get(p).map(|c| c.to_vec()).unwrap_or_default();
    let f = match kind {
        b'a' => {
            let add = rng.data_in(0, 64 << 10);
            let mut f = std::fs::OpenOptions::new().append(true).open(at)?;
            f.write_all(&add)?;
            c.extend_from_slice(&add);
            f
        }
        b'w' => {
            let off = rng.below(c.len() as u64 + 1) as usize;
            let add = rng.data_in(1, 100 << 10);
            let f = std::fs::OpenOptions::new().write(true).open(at)?;
            f.write_all_at(&add, off as u64)?;
            c.resize(c.len().max(off + add.len()), 0);
            c[off..off + add.len()].copy_from_slice(&add);
            f
        }
        b't' => {
            let len = rng.below(c.len() as u64 + (64 << 10)) as usize;
            let f = std::fs::OpenOptions::new().write(true).open(at)?;
            f.set_len(len as u64)?;
            c.resize(len, 0);
            f
        }
        _ => {
            c = rng.data_in(0, (300 << 10) + 1);
            let mut f = File::create(at)?;
            f.write_all(&c)?;
            f
        }
    };
    m.cur.insert(p.to_string(), Arc::new(c));
    Ok(f)
}

/// Renames, unlinks, or unlinks while open (`kind` r, u, o) the existing file `p`.
fn change_names(
    root: &Path,
    m: &mut Model,
    rng: &mut Rng,
    kind: u8,
    p: &str,
    orphans: &mut Vec<File>,
) -> std::io::Result<()> {
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    m.touch(p);
    match kind {
        b'r' => {
            let to = pick_path(rng);
            if to != p {
                m.touch(&to);
                std::fs::rename(at(p), at(&to))?;
                let c = m.cur.remove(p).unwrap_or_default();
                m.cur.insert(to, c);
            }
        }
        b'u' => {
            std::fs::remove_file(at(p))?;
            m.cur.remove(p);
        }
        _ => {
            // Unlinked while open: the object waits in the unlinked set until the last
            // close; a crash leaves it there for the next mount to drain.
            let f = std::fs::OpenOptions::new().write(true).open(at(p))?;
            std::fs::remove_file(at(p))?;
            m.cur.remove(p);
            f.write_all_at(&rng.data_in(0, 128 << 10), rng.below(64 << 10))?;
            orphans.push(f);
            if orphans.len() > 3 {
                orphans.remove(0);
            }
        }
    }
    Ok(())
}

/// One random operation through the mount; 30% of content changes are fsync'd. Errors end
/// the workload (the daemon is dead).
fn step(root: &Path, m: &mut Model, rng: &mut Rng, orphans: &mut Vec<File>) -> std::io::Result<()> {
    let existing = pick_existing(m, rng);
    let roll = rng.below(100);
    m.ops += 1;
    let (kind, p) = match (roll, existing) {
        (35..=49, Some(p)) => (b'a', p),
        (50..=59, Some(p)) => (b'w', p),
        (60..=64, Some(p)) => (b't', p),
        (65..=79, Some(p)) => return change_names(root, m, rng, b'r', &p, orphans),
        (80..=93, Some(p)) => return change_names(root, m, rng, b'u', &p, orphans),
        (94..=96, Some(p)) => return change_names(root, m, rng, b'o', &p, orphans),
        _ => (b'c', pick_path(rng)),
    };
    m.touch(&p);
    let f = change_contents(root, m, rng, kind, &p)?;
    if rng.percent(30) {
        f.sync_all()?;
        m.fsynced(&p);
    }
    Ok(())
}

/// Runs operations until one fails; a failure before `killed` is a bug and is recorded.
fn workload(root: PathBuf, mut m: Model, seed: u64, killed: Arc<AtomicBool>) -> Model {
    let mut rng = Rng::new(seed);
    let mut orphans = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if let Err(e) = step(&root, &mut m, &mut rng, &mut orphans) {
            if !killed.load(Ordering::SeqCst) {
                m.error = Some(format!("op {} failed while rzfsd was alive: {e}", m.op));
            }
            break;
        }
    }
    m
}

fn fuse_usable() -> bool {
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_ok();
    let tool = Command::new("fusermount3").arg("-V").output().is_ok_and(|o| o.status.success());
    if !(dev && tool) {
        eprintln!("skipping: /dev/fuse or fusermount3 is not usable");
    }
    dev && tool
}

/// Timings of the phases of [`kill_9_during_writes`], in seconds.
#[derive(Default, Debug)]
struct Phases {
    import_mount: f64,
    verify: f64,
    workload: f64,
    kill_unmount: f64,
    zdb: f64,
}

fn timed<T>(acc: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    *acc += t.elapsed().as_secs_f64();
    r
}

fn new_rig() -> Rig {
    let base = scratch("k9");
    let devdir = base.join("devs");
    let mnt = base.join("mnt");
    std::fs::create_dir_all(&devdir).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let rig = Rig { devdir, mnt, pool: "crashk9".into(), d: Daemon::new("crash-k9") };
    let mut args: Vec<String> = ["create", "-o", "ashift=9", "-m"].iter().map(|s| s.to_string()).collect();
    args.extend([rig.mnt.to_string_lossy().into_owned(), rig.pool.clone(), "raidz1".into()]);
    for i in 0..3 {
        let p = rig.devdir.join(format!("d{i}"));
        File::create(&p).unwrap().set_len(128 << 20).unwrap();
        args.push(p.to_string_lossy().into_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    rig.ok("rzpool", &args);
    rig
}

/// Remounts after a kill and checks what must have survived; the result is the new baseline.
fn remount_and_verify(rig: &Rig, m: &mut Model, it: u64, seed: u64, ph: &mut Phases) {
    timed(&mut ph.import_mount, || rig.import_and_mount());
    let got = timed(&mut ph.verify, || read_mount(&rig.mnt)).unwrap();
    let probs = m.check(&got);
    assert!(
        probs.is_empty(),
        "after kill {it} (seed {seed}), the remounted pool lost fsync'd data:\n{}",
        probs.join("\n")
    );
    m.rebase(got);
}

fn export_and_zdb(rig: &Rig, ph: &mut Phases) {
    rig.ok("rzpool", &["export", &rig.pool]);
    if zdb().is_some() {
        timed(&mut ph.zdb, || zdb_check(&rig.devdir, &rig.pool));
    }
}

#[test]
fn kill_9_during_writes() {
    if !fuse_usable() {
        return;
    }
    let iters = env_u64("RZFS_CRASH_ITERS", 100);
    let seed = seed("kill_9_during_writes");
    let mut rng = Rng::new(seed);
    let t0 = Instant::now();
    let rig = new_rig();
    for d in &DIRS[1..] {
        std::fs::create_dir(rig.mnt.join(d.trim_start_matches('/'))).unwrap();
    }
    File::open(&rig.mnt).unwrap().sync_all().unwrap();
    let mut m = Model::default();
    m.rebase(read_mount(&rig.mnt).unwrap());
    let mut ph = Phases::default();
    let (mut ops, mut fsyncs) = (0, 0);
    for it in 0..iters {
        if it > 0 {
            remount_and_verify(&rig, &mut m, it, seed, &mut ph);
            if it % 10 == 0 {
                export_and_zdb(&rig, &mut ph);
                timed(&mut ph.import_mount, || rig.import_and_mount());
            }
        }
        let killed = Arc::new(AtomicBool::new(false));
        let (root, k, wseed) = (rig.mnt.clone(), killed.clone(), rng.next());
        let t = Instant::now();
        let h = std::thread::spawn(move || workload(root, m, wseed, k));
        std::thread::sleep(Duration::from_millis(rng.range(20, 401)));
        killed.store(true, Ordering::SeqCst);
        timed(&mut ph.kill_unmount, || rig.kill9());
        m = h.join().unwrap();
        ph.workload += t.elapsed().as_secs_f64();
        timed(&mut ph.kill_unmount, || rig.lazy_unmount());
        if let Some(e) = m.error.take() {
            panic!("kill {it} (seed {seed}): {e}");
        }
        (ops, fsyncs) = (ops + m.ops, fsyncs + m.fsyncs);
        (m.ops, m.fsyncs) = (0, 0);
    }
    remount_and_verify(&rig, &mut m, iters, seed, &mut ph);
    export_and_zdb(&rig, &mut ph);
    eprintln!(
        "kill_9_during_writes: {iters} kills, {ops} operations, {fsyncs} fsyncs in {:.1}s; {ph:?}",
        t0.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(rig.devdir.parent().unwrap());
    // The daemon's socket and log (kept on failure, for the log).
    let _ = std::fs::remove_dir_all(rig.d.sock.parent().unwrap());
}

// ----- torn and dropped writes under the library --------------------------------------------

/// How a power cut at write k treats the writes not yet made durable by a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Writes before k reach the media, k and later do not (a device that stops).
    Drop,
    /// As `Drop`, but the first half of write k lands (a torn write).
    Tear,
    /// Each unflushed write before k lands or not, independently; k may land torn (a
    /// volatile write cache that reorders).
    Reorder,
    /// Writes from k on fail with EIO, and so do flushes (a device that dies visibly):
    /// syncs must report the failure, and none that returned Ok may be lost.
    Fail,
}

/// A write not yet known durable: where, what it replaced, what it wrote, its number.
struct Logged {
    dev: usize,
    off: u64,
    old: Vec<u8>,
    new: Vec<u8>,
    n: u64,
}

struct FaultState {
    files: Vec<File>,
    /// Writes issued since their device's last flush (or issued after the cut).
    log: Vec<Logged>,
    /// Writes issued so far (all leaves).
    writes: u64,
    /// The number of the first write the power cut hits (`u64::MAX`: none).
    cut: u64,
    /// Writes from `cut` on fail instead of vanishing ([`Fault::Fail`]).
    fail: bool,
}

/// Leaf devices writing through to files while remembering how to undo what a power cut
/// would lose. Reads see every write (the host does not know the power is gone).
struct Faults(Mutex<FaultState>);

struct FaultDev {
    faults: Arc<Faults>,
    idx: usize,
    size: u64,
    name: String,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn writes(&self) -> u64 {
        self.lock().writes
    }
    fn set_cut(&self, n: u64, fail: bool) {
        let mut st = self.lock();
        (st.cut, st.fail) = (n, fail);
    }

    /// Puts the files in the state the power cut leaves: every logged write is undone, then
    /// the survivors are written again in their order. Returns how many survived.
    fn crash(&self, mode: Fault, rng: &mut Rng) -> usize {
        let mut st = self.lock();
        let cut = st.cut;
        let log = std::mem::take(&mut st.log);
        for e in log.iter().rev() {
            st.files[e.dev].write_all_at(&e.old, e.off).unwrap();
        }
        let mut survived = 0;
        for e in &log {
            let keep = match (mode, e.n.cmp(&cut)) {
                (_, std::cmp::Ordering::Greater) => 0,
                (Fault::Drop | Fault::Fail, std::cmp::Ordering::Equal) => 0,
                (Fault::Tear, std::cmp::Ordering::Equal) => e.new.len() / 1024 * 512,
                (Fault::Reorder, std::cmp::Ordering::Equal) => {
                    if rng.percent(50) {
                        e.new.len() / 1024 * 512
                    } else {
                        0
                    }
                }
                (Fault::Reorder, std::cmp::Ordering::Less) => {
                    if rng.percent(50) {
                        e.new.len()
                    } else {
                        0
                    }
                }
                (_, std::cmp::Ordering::Less) => e.new.len(),
            };
            if keep > 0 {
                st.files[e.dev].write_all_at(&e.new[..keep], e.off).unwrap();
                survived += 1;
            }
        }
        survived
    }
}

fn out_of_range(dev: &FaultDev, off: u64, len: usize) -> Option<std::io::Error> {
    let ok = off.checked_add(len as u64).is_some_and(|e| e <= dev.size);
    (!ok).then(|| std::io::Error::other(format!("{}: {len} bytes at {off:#x} beyond the end", dev.name)))
}

impl vdev::BlockDevice for FaultDev {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        if let Some(e) = out_of_range(self, off, buf.len()) {
            return Err(e);
        }
        self.faults.lock().files[self.idx].read_exact_at(buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> std::io::Result<()> {
        if let Some(e) = out_of_range(self, off, buf.len()) {
            return Err(e);
        }
        let mut st = self.faults.lock();
        st.writes += 1;
        let n = st.writes;
        if st.fail && n >= st.cut {
            return Err(std::io::Error::other(format!("{}: injected write error", self.name)));
        }
        let mut old = vec![0u8; buf.len()];
        st.files[self.idx].read_exact_at(&mut old, off)?;
        st.files[self.idx].write_all_at(buf, off)?;
        st.log.push(Logged { dev: self.idx, off, old, new: buf.to_vec(), n });
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut st = self.faults.lock();
        if st.fail && st.writes >= st.cut {
            return Err(std::io::Error::other(format!("{}: injected flush error", self.name)));
        }
        // A flush completed before the cut makes this device's earlier writes durable; after
        // the cut nothing is durable any more.
        if st.writes < st.cut {
            let idx = self.idx;
            st.log.retain(|e| e.dev != idx);
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn name(&self) -> &str {
        &self.name
    }
}

const LIB_POOL: &str = "crashlib";
const LIB_LEAVES: usize = 3;
const LIB_DEV_SIZE: u64 = 64 << 20;

fn lib_policy() -> pool::writer::Policy {
    // fletcher4 (7) and lz4 (15): the defaults of a dataset with compression=on.
    pool::writer::Policy::dataset(7, 15, 1)
}

fn now() -> (u64, u64) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_nanos()))
}

/// Fresh sparse leaf files and fault devices over them.
fn fault_devices(dir: &Path) -> (Arc<Faults>, Vec<Arc<FaultDev>>) {
    let mut files = Vec::new();
    for i in 0..LIB_LEAVES {
        let p = dir.join(format!("d{i}"));
        let f =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        f.set_len(LIB_DEV_SIZE).unwrap();
        files.push(f);
    }
    let faults = Arc::new(Faults(Mutex::new(FaultState {
        files,
        log: Vec::new(),
        writes: 0,
        cut: u64::MAX,
        fail: false,
    })));
    let devs = (0..LIB_LEAVES)
        .map(|i| {
            Arc::new(FaultDev {
                faults: faults.clone(),
                idx: i,
                size: LIB_DEV_SIZE,
                name: dir.join(format!("d{i}")).to_string_lossy().into_owned(),
            })
        })
        .collect();
    (faults, devs)
}

/// The pool layouts of the library trials (a workload's seed picks one).
const LIB_LAYOUTS: [&str; 4] = ["raidz1 of 3", "mirror of 3", "stripe of 3", "mirror of 2 + log"];

/// Creates a pool of layout `LIB_LAYOUTS[layout]` (ashift 9, the default feature set, a
/// ZPL root) on `devs`.
fn lib_create(devs: &[Arc<FaultDev>], layout: usize) -> pool::writer::PoolWriter {
    use pool::create::{CreateSpec, NewLeaf, NewTop};
    let mut leaves: Vec<NewLeaf> =
        devs.iter().map(|d| NewLeaf { path: d.name.clone(), device: d.clone(), is_disk: false }).collect();
    let (tops, log) = match layout {
        0 => (vec![NewTop::Raidz { parity: 1, leaves }], vec![]),
        1 => (vec![NewTop::Mirror(leaves)], vec![]),
        2 => (leaves.into_iter().map(NewTop::Single).collect(), vec![]),
        _ => {
            let slog = leaves.pop().unwrap();
            (vec![NewTop::Mirror(leaves), NewTop::Single(slog)], vec![false, true])
        }
    };
    let none: [&str; 0] = [];
    let (set, _) = pool::feature_table::resolve_create(&pool::compat::CompatSet::Off, &none, &none).unwrap();
    let features = set.iter().filter_map(|n| pool::feature_table::by_name(n)).collect();
    let init = |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
        zpl::write::ZplWriter::create_fs(os, z, now(), 0, 0)
            .map(|_| ())
            .map_err(|e| pool::PoolError::Invalid(e.to_string()))
    };
    let spec = CreateSpec {
        name: LIB_POOL.into(),
        tops,
        log,
        ashift: 9,
        features,
        root_props: vec![],
        pool_props: vec![],
        init_root: &init,
        root_policy: lib_policy(),
        cache_bytes: 64 << 20,
        label_name: None,
    };
    pool::create::create(&spec).expect("create the pool")
}

/// The head dataset object of the pool's root file system.
fn root_ds(w: &mut pool::writer::PoolWriter) -> u64 {
    let root_dir = w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").unwrap().expect("root_dataset");
    dsl::write::dir_phys(&w.mos, root_dir).unwrap().head_dataset_obj
}

/// The ZPL of the pool's root file system, written through the library.
struct LibFs {
    zpl: zpl::write::ZplWriter,
    ds: u64,
    /// Directory objects by path ("" is the root).
    dirs: BTreeMap<String, u64>,
}

const LIB_DIRS: [&str; 3] = ["", "/a", "/b"];

impl LibFs {
    fn open(w: &mut pool::writer::PoolWriter) -> LibFs {
        let ds = root_ds(w);
        w.open_dataset(ds, lib_policy()).unwrap();
        let d = w.dataset(ds).unwrap();
        let zpl = zpl::write::ZplWriter::open(&d.os, &mut d.zaps).unwrap();
        let mut dirs = BTreeMap::new();
        dirs.insert(String::new(), zpl.root());
        for name in &LIB_DIRS[1..] {
            let found = zpl.lookup(&d.os, &mut d.zaps, zpl.root(), &name.as_bytes()[1..]).unwrap();
            if let Some(obj) = found {
                dirs.insert(name.to_string(), obj);
            }
        }
        LibFs { zpl, ds, dirs }
    }

    /// (directory object, name) of a file path such as "/a/f3".
    fn split<'p>(&self, p: &'p str) -> (u64, &'p [u8]) {
        let (d, n) = p.rsplit_once('/').unwrap();
        (self.dirs[d], n.as_bytes())
    }
}

fn lib_pick(rng: &mut Rng) -> String {
    format!("{}/f{}", LIB_DIRS[rng.below(3) as usize], rng.below(12))
}

/// One random change of the open txg, mirrored in `tree`.
fn lib_op(w: &mut pool::writer::PoolWriter, fs: &mut LibFs, tree: &mut Tree, rng: &mut Rng) {
    let files: Vec<String> = tree.keys().filter(|p| !p.ends_with('/')).cloned().collect();
    let existing = (!files.is_empty()).then(|| files[rng.below(files.len() as u64) as usize].clone());
    let roll = rng.below(100);
    if let (40..=69, Some(p)) = (roll, &existing) {
        // Append, or overwrite a range (possibly past the end).
        let len = tree[p].len();
        let off = if roll < 55 { len } else { rng.below(len as u64 + 1) as usize };
        let add = rng.data_in(1, 100 << 10);
        return lib_write_at(w, fs, tree, p, off, &add);
    }
    fs.zpl.txg = w.txg;
    let d = w.dataset(fs.ds).unwrap();
    // Anything but a write is a change the intent log does not describe.
    d.zil.taint();
    let (os, zaps, t) = (&mut d.os, &mut d.zaps, now());
    let rs = 128 << 10;
    match (roll, existing) {
        (70..=79, Some(p)) => {
            let (dir, name) = fs.split(&p);
            let obj = fs.zpl.lookup(os, zaps, dir, name).unwrap().unwrap();
            let mut c = tree[&p].to_vec();
            let len = rng.below(c.len() as u64 + (64 << 10)) as usize;
            fs.zpl.truncate(os, zaps, obj, len as u64, t).unwrap();
            c.resize(len, 0);
            tree.insert(p, Arc::new(c));
        }
        (80..=89, Some(p)) => {
            let to = lib_pick(rng);
            if to != p {
                let ((sd, sn), (dd, dn)) = (fs.split(&p), fs.split(&to));
                fs.zpl.rename(os, zaps, sd, sn, dd, dn, false, false, t).unwrap();
                let c = tree.remove(&p).unwrap();
                tree.insert(to, c);
            }
        }
        (90..=99, Some(p)) => {
            let (dir, name) = fs.split(&p);
            fs.zpl.unlink(os, zaps, dir, name, false, t).unwrap();
            tree.remove(&p);
        }
        _ => {
            // Create, or replace the contents of, a file of 0-300 KiB.
            let p = lib_pick(rng);
            let (dir, name) = fs.split(&p);
            let obj = match fs.zpl.lookup(os, zaps, dir, name).unwrap() {
                Some(obj) => {
                    fs.zpl.truncate(os, zaps, obj, 0, t).unwrap();
                    obj
                }
                None => fs.zpl.create(os, zaps, dir, name, 0o644, 0, 0, 0, t).unwrap(),
            };
            let c = rng.data_in(0, (300 << 10) + 1);
            fs.zpl.write(os, zaps, obj, 0, &c, rs, t).unwrap();
            tree.insert(p, Arc::new(c));
        }
    }
}

/// Writes `add` at `off` of file `p` (which exists), noted for the intent log.
fn lib_write_at(
    w: &mut pool::writer::PoolWriter,
    fs: &mut LibFs,
    tree: &mut Tree,
    p: &str,
    off: usize,
    add: &[u8],
) {
    fs.zpl.txg = w.txg;
    let d = w.dataset(fs.ds).unwrap();
    let (dir, name) = fs.split(p);
    let obj = fs.zpl.lookup(&d.os, &mut d.zaps, dir, name).unwrap().unwrap();
    fs.zpl.write(&mut d.os, &mut d.zaps, obj, off as u64, add, 128 << 10, now()).unwrap();
    d.zil.note_write(obj, off as u64, add.len() as u64);
    let mut c = tree[p].to_vec();
    c.resize(c.len().max(off + add.len()), 0);
    c[off..off + add.len()].copy_from_slice(add);
    tree.insert(p.to_string(), Arc::new(c));
}

/// A write of the kind a database fsyncs: a range of an existing file (mostly small,
/// sometimes large enough to take several log blocks), or nothing when there is no file.
fn lib_rewrite(w: &mut pool::writer::PoolWriter, fs: &mut LibFs, tree: &mut Tree, rng: &mut Rng) {
    let files: Vec<String> = tree.keys().filter(|p| !p.ends_with('/')).cloned().collect();
    if files.is_empty() {
        return;
    }
    let p = files[rng.below(files.len() as u64) as usize].clone();
    if rng.percent(15) {
        // ftruncate, logged as OpenZFS does (TX_SETATTR with AT_SIZE).
        let size = rng.below(tree[&p].len() as u64 + (32 << 10));
        fs.zpl.txg = w.txg;
        let d = w.dataset(fs.ds).unwrap();
        let (dir, name) = fs.split(&p);
        let obj = fs.zpl.lookup(&d.os, &mut d.zaps, dir, name).unwrap().unwrap();
        let sa = zpl::write::SetAttr { size: Some(size), ..Default::default() };
        fs.zpl.setattr(&mut d.os, &mut d.zaps, obj, sa, now()).unwrap();
        d.zil.note_setattr(obj, pool::zil::AttrChange { size: Some(size), ..Default::default() });
        let mut c = tree[&p].to_vec();
        c.resize(size as usize, 0);
        tree.insert(p, Arc::new(c));
        return;
    }
    let off = rng.below(tree[&p].len() as u64 + 1) as usize;
    let most = if rng.percent(20) { 300 << 10 } else { 16 << 10 };
    let add = rng.data_in(1, most);
    lib_write_at(w, fs, tree, &p, off, &add);
}

/// Makes the directories of [`LIB_DIRS`] that do not exist yet.
fn lib_mkdirs(w: &mut pool::writer::PoolWriter, fs: &mut LibFs, tree: &mut Tree) {
    fs.zpl.txg = w.txg;
    let d = w.dataset(fs.ds).unwrap();
    for name in &LIB_DIRS[1..] {
        if !fs.dirs.contains_key(*name) {
            d.zil.taint();
            let obj = fs
                .zpl
                .mkdir(&mut d.os, &mut d.zaps, fs.zpl.root(), &name.as_bytes()[1..], 0o755, 0, 0, now())
                .unwrap();
            fs.dirs.insert(name.to_string(), obj);
            tree.insert(format!("{name}/"), Arc::new(Vec::new()));
        }
    }
}

/// One workload run (with or without a power cut) and what it must leave behind.
struct Run {
    faults: Arc<Faults>,
    /// Writes issued when the pool had been created (cut points count from here).
    base: u64,
    /// Failing devices: a sync that returns Ok claims durability whatever the cut.
    failing: bool,
    rng: Rng,
    tree: Tree,
    /// The tree each txg the workload synced (or tried to) holds.
    models: BTreeMap<u64, Tree>,
    /// The last txg whose sync returned (Ok) before the cut.
    done: u64,
    /// The write count (from `base`) at the end of each sync and each log commit.
    ends: Vec<u64>,
    /// The tree after each log commit that returned, by the open txg it logged.
    commits: BTreeMap<u64, Vec<Tree>>,
    /// The last commit that completed before the cut: (open txg, index in `commits`).
    committed: Option<(u64, usize)>,
}

impl Run {
    /// Notes the outcome of a sync (or export); true when the workload must stop: the cut
    /// has happened, or the sync failed (allowed only on failing devices).
    fn synced(&mut self, w: &pool::writer::PoolWriter, r: pool::Result<()>) -> bool {
        let (n, cut) = {
            let st = self.faults.lock();
            (st.writes, st.cut)
        };
        if let Err(e) = r {
            assert!(self.failing && n >= cut, "sync failed without an injected failure: {e}");
            return true;
        }
        self.ends.push(n - self.base);
        if n < cut || self.failing {
            self.done = w.uberblock.as_ref().unwrap().txg;
        }
        n >= cut
    }

    /// An `fsync`: the intent log commits the open txg's writes, or (when it cannot) the
    /// txg is synced, as `Spa::zil_commit` does. True when the workload must stop.
    fn fsync(&mut self, w: &mut pool::writer::PoolWriter, fs: &LibFs) -> bool {
        let txg = w.txg;
        let r = w.zil_commit(fs.ds);
        let (n, cut) = {
            let st = self.faults.lock();
            (st.writes, st.cut)
        };
        match r {
            Err(e) => {
                assert!(self.failing && n >= cut, "log commit failed without an injected failure: {e}");
                true
            }
            Ok(pool::zil::Commit::NeedSync) => {
                if self.failing && n >= cut {
                    // A commit whose writes failed part way: the blocks written before the
                    // failure may be replayed.
                    self.commits.entry(txg).or_default().push(self.tree.clone());
                }
                self.models.insert(w.txg, self.tree.clone());
                let r = w.sync();
                self.synced(w, r)
            }
            Ok(pool::zil::Commit::Done) => {
                let list = self.commits.entry(txg).or_default();
                list.push(self.tree.clone());
                self.ends.push(n - self.base);
                if n < cut || self.failing {
                    self.committed = Some((txg, list.len() - 1));
                }
                n >= cut
            }
        }
    }

    /// `txgs` txgs of random changes, each followed by a few rewrites answered by the intent
    /// log in the next; stops after the sync or commit the cut hit.
    fn txgs(&mut self, w: &mut pool::writer::PoolWriter, fs: &mut LibFs, txgs: usize) -> bool {
        for _ in 0..txgs {
            lib_mkdirs(w, fs, &mut self.tree);
            for _ in 0..self.rng.range(2, 9) {
                lib_op(w, fs, &mut self.tree, &mut self.rng);
            }
            self.models.insert(w.txg, self.tree.clone());
            let r = w.sync();
            if self.synced(w, r) {
                return true;
            }
            for _ in 0..self.rng.below(4) {
                for _ in 0..self.rng.range(1, 4) {
                    lib_rewrite(w, fs, &mut self.tree, &mut self.rng);
                }
                if self.fsync(w, fs) {
                    return true;
                }
            }
        }
        false
    }

    /// Is `got` a state the import of txg `t` may show after replaying its log? The txg's
    /// tree, or the tree of a commit logged in the txg after it, no older than the last
    /// commit that completed before the cut; or, for the commit the cut hit, any mix of
    /// the two trees it lies between (its records replay in order up to the first log
    /// block that did not land, and a record may be one chunk of a larger write).
    fn accepts(&self, t: u64, got: &Tree) -> Result<(), String> {
        let base = self
            .models
            .get(&t)
            .ok_or_else(|| format!("imported txg {t}, which the workload never synced"))?;
        let mut seq = vec![base];
        seq.extend(self.commits.get(&(t + 1)).into_iter().flatten());
        let floor = match self.committed {
            Some((ct, j)) if ct == t + 1 => j + 1,
            Some((ct, j)) if ct > t + 1 => {
                return Err(format!(
                    "commit {j} of txg {ct} completed before the cut, but txg {t} was imported"
                ))
            }
            _ => 0,
        };
        for i in floor..seq.len() {
            if seq[i] == got || seq.get(i + 1).is_some_and(|next| between(seq[i], next, got)) {
                return Ok(());
            }
        }
        let want = seq[floor.min(seq.len() - 1)];
        Err(format!(
            "txg {t} (last completed sync {}, {} commits logged after it, {floor} of them before the cut) reads back wrong:\n{}",
            self.done,
            seq.len() - 1,
            tree_diff(want, got).join("\n")
        ))
    }
}

/// Does every file of `got` hold, byte for byte, what `a` or `b` holds there (or zeros,
/// where a replayed truncation cut and a later write did not land yet), no longer than
/// the longer of them? (`a` and `b` differ only by writes and truncations, as commits of
/// one txg do.)
fn between(a: &Tree, b: &Tree, got: &Tree) -> bool {
    a.len() == got.len()
        && a.iter().zip(b).zip(got).all(|(((pa, ca), (pb, cb)), (pg, cg))| {
            pa == pg
                && pb == pg
                && cg.len() <= ca.len().max(cb.len())
                && cg.iter().enumerate().all(|(i, x)| *x == 0 || cb.get(i) == Some(x) || ca.get(i) == Some(x))
        })
}

/// Imports the pool in `dir` through the fault devices and opens it for writing (a
/// read-write import with our devices in place of the files `import` would reopen).
fn reopen_faulty(dir: &Path, devs: &[Arc<FaultDev>]) -> (pool::Pool, pool::writer::PoolWriter) {
    let cands = pool::discover(&[dir.to_path_buf()], false).unwrap();
    let mut c = pool::discover::select(&cands, LIB_POOL).unwrap().clone();
    for d in &mut c.devices {
        let dev = devs.iter().find(|x| Path::new(&x.name) == d.path).expect("a fault device per leaf");
        d.device = dev.clone();
    }
    let p = pool::import(&c, &pool::ImportOpts::default()).expect("import through the fault devices");
    let w = pool::open_rw::open_rw(&p).expect("open_rw through the fault devices");
    (p, w)
}

fn lib_layout(wseed: u64) -> usize {
    (wseed % LIB_LAYOUTS.len() as u64) as usize
}

/// Creates the pool, runs 4 txgs, exports, re-imports and runs 3 more, with a power cut at
/// write `cut.0` (counted from the end of pool creation); then applies the cut to the files.
fn lib_trial(dir: &Path, wseed: u64, cut: Option<(u64, Fault)>, crash_seed: u64) -> Run {
    let (faults, devs) = fault_devices(dir);
    let mut w = lib_create(&devs, lib_layout(wseed));
    let base = faults.writes();
    if let Some((k, mode)) = cut {
        faults.set_cut(base + k, mode == Fault::Fail);
    }
    let created = w.uberblock.as_ref().unwrap().txg;
    let mut run = Run {
        faults: faults.clone(),
        base,
        failing: matches!(cut, Some((_, Fault::Fail))),
        rng: Rng::new(wseed),
        tree: Tree::new(),
        models: BTreeMap::from([(created, Tree::new())]),
        done: created,
        ends: Vec::new(),
        commits: BTreeMap::new(),
        committed: None,
    };
    let mut fs = LibFs::open(&mut w);
    let mut stop = run.txgs(&mut w, &mut fs, 4);
    if !stop {
        // An export is a data txg (nothing is dirty here) and a config-only txg.
        run.models.insert(w.txg, run.tree.clone());
        run.models.insert(w.txg + 1, run.tree.clone());
        let r = w.close(ondisk::label::PoolState::Exported);
        stop = run.synced(&w, r);
    }
    drop(w);
    if !stop {
        let (_p, mut w) = reopen_faulty(dir, &devs);
        // The first txg of a read-write import rewrites every label (as rzfsd does).
        run.models.insert(w.txg, run.tree.clone());
        let r = w.sync();
        if !run.synced(&w, r) {
            let mut fs = LibFs::open(&mut w);
            run.txgs(&mut w, &mut fs, 3);
        }
    }
    if let Some((_, mode)) = cut {
        faults.crash(mode, &mut Rng::new(crash_seed));
    }
    run
}

/// Every directory and regular file of the pool's root file system.
fn lib_read_tree(p: &pool::Pool) -> Result<Tree, String> {
    let ds = p.dsl().find(LIB_POOL).map_err(|e| format!("root dataset: {e}"))?;
    let z = rzfs_cli::zplopen::open_zpl_only(p, &ds)?;
    let mut entries = Vec::new();
    z.walk(&mut |path, e| {
        entries.push((path.to_string(), e.object, e.dtype));
        Ok(())
    })
    .map_err(|e| format!("walking the tree: {e}"))?;
    let mut out = Tree::new();
    for (path, obj, dtype) in entries {
        if dtype == 4 {
            out.insert(format!("{path}/"), Arc::new(Vec::new()));
            continue;
        }
        let a = z.getattr(obj).map_err(|e| format!("{path}: {e}"))?;
        let data = z.read(obj, 0, a.size as usize).map_err(|e| format!("{path}: {e}"))?;
        if data.len() as u64 != a.size {
            return Err(format!("{path}: read {} of {} bytes", data.len(), a.size));
        }
        out.insert(path, Arc::new(data));
    }
    Ok(out)
}

/// A read-write import of the pool in `dir` (its intent logs claimed, not replayed).
fn lib_import_rw(dir: &Path) -> Result<(pool::Pool, pool::writer::PoolWriter), String> {
    let cands = pool::discover(&[dir.to_path_buf()], false).map_err(|e| format!("discover: {e}"))?;
    let c = pool::discover::select(&cands, LIB_POOL).map_err(|e| format!("select: {e}"))?;
    let opts = pool::ImportOpts { readonly: false, ..Default::default() };
    let p = pool::import(c, &opts).map_err(|e| format!("import: {e}"))?;
    let w = pool::open_rw::open_rw(&p).map_err(|e| format!("open_rw at txg {}: {e}", p.uberblock.txg))?;
    Ok((p, w))
}

/// After the cut: the pool must import read-write at a txg no older than the last completed
/// sync and, once its intent log is replayed, hold a tree [`Run::accepts`] (every commit
/// that completed is there); then accept a new txg, and export. Returns the imported txg
/// and whether a log was replayed.
fn lib_verify(dir: &Path, run: &Run) -> Result<(u64, bool), String> {
    let (p, mut w) = lib_import_rw(dir)?;
    let t = p.uberblock.txg;
    if t < run.done {
        return Err(format!("imported txg {t}, but txg {} had been synced before the cut", run.done));
    }
    let mut got = lib_read_tree(&p).map_err(|e| format!("txg {t}: {e}"))?;
    let replayed = !w.pending_logs.is_empty();
    rzfs_cli::zilreplay::replay_all(&mut w).map_err(|e| format!("txg {t}: {e}"))?;
    w.sync().map_err(|e| format!("first txg after import: {e}"))?;
    if replayed {
        // Read the replayed tree back as any reader would: from a new import.
        w.close(ondisk::label::PoolState::Exported).map_err(|e| format!("export after the replay: {e}"))?;
        drop((w, p));
        got = lib_read_tree(&*common::open(dir, LIB_POOL)?).map_err(|e| format!("txg {t}, replayed: {e}"))?;
        w = lib_import_rw(dir)?.1;
    }
    run.accepts(t, &got)?;
    // New writes after the crash must not land on anything live.
    let mut fs = LibFs::open(&mut w);
    let mut rng = Rng::new(t);
    let mut after = got;
    lib_mkdirs(&mut w, &mut fs, &mut after);
    for _ in 0..4 {
        lib_op(&mut w, &mut fs, &mut after, &mut rng);
    }
    w.close(ondisk::label::PoolState::Exported).map_err(|e| format!("export after the crash: {e}"))?;
    drop(w);
    let p = common::open(dir, LIB_POOL)?;
    let got = lib_read_tree(&p)?;
    let diff = tree_diff(&after, &got);
    if !diff.is_empty() {
        return Err(format!("after writing on the recovered txg {t}:\n{}", diff.join("\n")));
    }
    Ok((t, replayed))
}

/// Runs `f`, turning a panic into an error (so one failed cut does not hide the others).
fn caught<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|e| {
        let msg =
            e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
        Err(format!("panic: {}", msg.unwrap_or_default()))
    })
}

/// A cut point: uniform over the run, or within the last writes of a sync (labels and
/// uberblocks, where ordering matters most).
fn pick_cut(rng: &mut Rng, ends: &[u64]) -> u64 {
    let total = *ends.last().unwrap();
    if rng.percent(50) {
        rng.range(1, total + 1)
    } else {
        let e = ends[rng.below(ends.len() as u64) as usize];
        e.saturating_sub(rng.below(40)).max(1)
    }
}

#[test]
fn torn_and_dropped_writes() {
    let cuts = env_u64("RZFS_CRASH_CUTS", 300);
    let zdb_every = env_u64("RZFS_CRASH_ZDB_EVERY", 20).max(1);
    let seed = seed("torn_and_dropped_writes");
    let mut rng = Rng::new(seed);
    let dir = scratch("lib");
    let have_zdb = zdb().is_some();
    let t0 = Instant::now();
    let (mut wseed, mut ends) = (0, Vec::new());
    let (mut failures, mut zdb_runs, mut forward, mut replays) = (Vec::new(), 0, 0, 0);
    for i in 0..cuts {
        if i % 50 == 0 {
            // A dry run of a new workload: where its syncs and log commits end, and a clean
            // baseline. Workloads take the layouts in turn (the seed names the layout).
            let nth = i / 50 % LIB_LAYOUTS.len() as u64;
            wseed = rng.next() / LIB_LAYOUTS.len() as u64 * LIB_LAYOUTS.len() as u64 + nth;
            let run = lib_trial(&dir, wseed, None, 0);
            lib_verify(&dir, &run).unwrap_or_else(|e| panic!("workload {wseed} without a cut: {e}"));
            ends = run.ends;
            let layout = LIB_LAYOUTS[lib_layout(wseed)];
            eprintln!("workload {wseed} ({layout}): syncs and log commits end at writes {ends:?}");
        }
        let k = pick_cut(&mut rng, &ends);
        let mode = [Fault::Drop, Fault::Tear, Fault::Reorder, Fault::Fail][(i % 4) as usize];
        let cseed = rng.next();
        let repro = format!(
            "trial {i}: workload seed {wseed}, cut at write {k} of {}, {mode:?}, crash seed {cseed}",
            ends.last().unwrap()
        );
        let mut r = caught(|| {
            let run = lib_trial(&dir, wseed, Some((k, mode)), cseed);
            lib_verify(&dir, &run).map(|(t, replayed)| {
                replays += usize::from(replayed);
                t > run.done
            })
        });
        if r == Ok(true) {
            // The cut spared the uberblock of the txg it hit: the pool moved on to it.
            forward += 1;
        }
        if r.is_ok() && have_zdb && i % zdb_every == 0 {
            zdb_runs += 1;
            r = caught(|| Ok(zdb_check(&dir, LIB_POOL))).map(|_| false);
        }
        if let Err(e) = r {
            eprintln!("FAILED {repro}: {e}");
            failures.push(format!("{repro}: {e}"));
        }
    }
    eprintln!(
        "torn_and_dropped_writes: {cuts} cuts ({zdb_runs} checked by zdb, {forward} recovered the cut txg, \
         {replays} replayed an intent log) in {:.1}s, {} failed",
        t0.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {cuts} cuts failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
