//! Issue 15: volumes served as a loop device and over NBD, next to a file of the same pool
//! through its FUSE mount and to a raw file, in one run.
//!
//! One pool on one zero-filled image file (never sparse; ashift 12, compression off, atime
//! off), served by a private `rzfsd` on its own socket whose environment puts the volume
//! tree (`RZFS_VOL_DIR`), the `/dev/zvol` links (`RZFS_ZVOL_DIR`) and the NBD socket
//! (`RZFS_NBD_SOCKET`) under the work directory. Four systems get the same workloads:
//!
//! - **raw**: a plain file of D MiB on the work directory's file system (the reference every
//!   ratio divides by);
//! - **fuse**: a file in the pool's root file system, through its FUSE mount (recordsize 128K);
//! - **loop**: `rzfs create -V D POOL/vol` (volblocksize 16K), opened at the link
//!   `RZFS_ZVOL_DIR/POOL/vol`, which points at the loop device the daemon attached to the
//!   volume's file (or at the file itself where no loop device can be had: recorded);
//!   buffered I/O on the block device, as mkfs or a database on it would do;
//! - **nbd**: the same volume destroyed and created afresh, through the daemon's NBD socket
//!   with the harness's own blocking client (`nbdc.rs`: one request in flight, no cache);
//!   these daemons run with `RZFS_VOL_LOOP=0` so no loop device is attached beside it.
//!
//! Workloads, each pool-backed one on a fresh `rzfsd` importing the pool (no cache carried
//! over), exported afterwards: sequential 1 MiB writes of D MiB of PRNG bytes, then
//! fsync/FLUSH, timed to the end of the flush; a cold sequential read in 1 MiB reads (the
//! image, or the raw file, read once untimed with O_DIRECT — the VM host's cache cannot be
//! dropped, so every timed read meets the same warm host cache — then evicted from the page
//! cache with `sys::evict`; the first and last MiB are compared with what was written); QD1
//! random 4 KiB reads over the D MiB, cold likewise; QD1 random 4 KiB writes, then
//! fsync/FLUSH inside the timing. Random I/O stops after a fixed number of requests or a time
//! cap, whichever comes first (as in layouts.rs).
//!
//! Every failure becomes an {"error": ...} in its cell; every path exports the pool, stops
//! the daemon, detaches loop devices left on the volume files (the daemon does that on export;
//! this is for a daemon that died) and unmounts what is left mounted.

use crate::e2e;
use crate::kernels::Prng;
use crate::layouts::{self, images, iops_row, rate_row};
use crate::libpool::Layout;
use crate::nbdc::Nbd;
use crate::report::f0;
use crate::sys;
use crate::Ctx;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const POOL: &str = "rzvol";
const VOL: &str = "rzvol/vol";
const FILE: &str = "data.bin";
/// Seed of the sequential data (the same bytes for every system).
const SEED: u64 = 0x0701_5EED;

/// Sizes of one run.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// The sequential data, the volume's size, and the range random I/O goes to.
    data_mib: u64,
    /// Requests per random measurement (fewer if `cap` runs out first).
    ops: u64,
    cap: Duration,
    /// Bound on one NBD request (a hung server is an error).
    io_timeout: Duration,
    /// Cold runs of each read measurement (sequential and random); the fastest counts.
    runs: usize,
}

impl Sizes {
    fn of(full: bool) -> Sizes {
        if full {
            Sizes {
                data_mib: 1024,
                ops: 5000,
                cap: Duration::from_secs(15),
                io_timeout: Duration::from_secs(300),
                runs: 3,
            }
        } else {
            Sizes {
                data_mib: 32,
                ops: 300,
                cap: Duration::from_secs(3),
                io_timeout: Duration::from_secs(60),
                runs: 1,
            }
        }
    }
    /// The image: the file and the volume (its refreservation too), with room to spare.
    fn image_mib(self) -> u64 {
        self.data_mib * 3 + 256
    }
    /// What the work directory must hold: the image, the raw file and 512 MiB of margin.
    fn need_bytes(self) -> u64 {
        (self.image_mib() + self.data_mib + 512) * MIB
    }
    fn data_bytes(self) -> u64 {
        self.data_mib * MIB
    }
}

// ---------------------------------------------------------------------------------------------
// The I/O loops, the same for every system

/// Positioned I/O on a file, a block device or an NBD export.
trait Blk {
    fn write_at(&mut self, data: &[u8], off: u64) -> Result<(), String>;
    fn read_at(&mut self, buf: &mut [u8], off: u64) -> Result<(), String>;
    /// fsync, or NBD FLUSH.
    fn flush(&mut self) -> Result<(), String>;
}

impl Blk for File {
    fn write_at(&mut self, data: &[u8], off: u64) -> Result<(), String> {
        self.write_all_at(data, off).map_err(|e| format!("write at {off}: {e}"))
    }
    fn read_at(&mut self, buf: &mut [u8], off: u64) -> Result<(), String> {
        self.read_exact_at(buf, off).map_err(|e| format!("read at {off}: {e}"))
    }
    fn flush(&mut self) -> Result<(), String> {
        self.sync_all().map_err(|e| format!("fsync: {e}"))
    }
}

impl Blk for Nbd {
    fn write_at(&mut self, data: &[u8], off: u64) -> Result<(), String> {
        Nbd::write_at(self, data, off)
    }
    fn read_at(&mut self, buf: &mut [u8], off: u64) -> Result<(), String> {
        Nbd::read_at(self, buf, off)
    }
    fn flush(&mut self) -> Result<(), String> {
        Nbd::flush(self)
    }
}

/// `mib` MiB of PRNG bytes (seed [`SEED`]) in 1 MiB writes from offset 0, then flush;
/// returns the seconds from the first write to the end of the flush.
fn seq_write(d: &mut dyn Blk, mib: u64) -> Result<f64, String> {
    let mut r = Prng::new(SEED);
    let mut buf = vec![0u8; MIB as usize];
    let t0 = Instant::now();
    for i in 0..mib {
        r.fill(&mut buf);
        d.write_at(&buf, i * MIB)?;
    }
    d.flush()?;
    Ok(t0.elapsed().as_secs_f64())
}

/// The first `mib` MiB in 1 MiB reads; returns the seconds. With `verify`, the first and
/// last MiB read are compared (untimed) with what [`seq_write`] wrote.
fn seq_read(d: &mut dyn Blk, mib: u64, verify: bool) -> Result<f64, String> {
    let mut buf = vec![0u8; MIB as usize];
    let mut first = Vec::new();
    let t0 = Instant::now();
    for i in 0..mib {
        d.read_at(&mut buf, i * MIB)?;
        if i == 0 && verify {
            first = buf.clone();
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if verify && mib > 0 {
        let mut r = Prng::new(SEED);
        let mut want = vec![0u8; MIB as usize];
        r.fill(&mut want);
        if first != want {
            return Err("the first MiB read back differs from what was written".into());
        }
        for _ in 1..mib {
            r.fill(&mut want);
        }
        if buf != want {
            return Err("the last MiB read back differs from what was written".into());
        }
    }
    Ok(secs)
}

/// QD1 random 4 KiB I/O at 4 KiB-aligned offsets in the first `len` bytes: up to `ops`
/// requests or until `cap` has passed; writes end with a flush, inside the timing (the
/// pattern and the seeds of layouts.rs). Returns (requests done, seconds).
fn random_io(d: &mut dyn Blk, len: u64, write: bool, ops: u64, cap: Duration) -> Result<(u64, f64), String> {
    let blocks = (len / 4096).max(1);
    let mut r = Prng::new(0x10_4B1D ^ u64::from(write));
    let mut buf = vec![0u8; 4096];
    r.fill(&mut buf);
    let t0 = Instant::now();
    let mut done = 0;
    while done < ops && t0.elapsed() < cap {
        let off = (r.next_u64() % blocks) * 4096;
        if write {
            buf[..8].copy_from_slice(&done.to_le_bytes());
            d.write_at(&buf, off)?;
        } else {
            d.read_at(&mut buf, off)?;
        }
        done += 1;
    }
    if write {
        d.flush()?;
    }
    Ok((done, t0.elapsed().as_secs_f64()))
}

// ---------------------------------------------------------------------------------------------
// The rig: paths, daemons, sessions

#[derive(Clone, Copy, Debug, PartialEq)]
enum Sys {
    Raw,
    Fuse,
    Loop,
    Nbd,
}

impl Sys {
    fn id(self) -> &'static str {
        match self {
            Sys::Raw => "raw",
            Sys::Fuse => "fuse",
            Sys::Loop => "loop",
            Sys::Nbd => "nbd",
        }
    }
}

/// The four measurements of a system.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Write,
    Read,
    RandRead,
    RandWrite,
}

impl Step {
    const ALL: [Step; 4] = [Step::Write, Step::Read, Step::RandRead, Step::RandWrite];
    fn key(self) -> &'static str {
        match self {
            Step::Write => "seq_write",
            Step::Read => "seq_read",
            Step::RandRead => "rand_read",
            Step::RandWrite => "rand_write",
        }
    }
}

struct Rig<'a> {
    c: &'a Ctx,
    s: Sizes,
    dir: PathBuf,
    /// The directory `rzpool import -d` searches: the image alone.
    img_dir: PathBuf,
    img: PathBuf,
    raw: PathBuf,
    mnt: PathBuf,
    vols: PathBuf,
    zvol: PathBuf,
    sock: String,
    vols_s: String,
    zvol_s: String,
    nbd_s: String,
}

fn path_s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

impl<'a> Rig<'a> {
    fn new(c: &'a Ctx, s: Sizes, dir: PathBuf) -> Rig<'a> {
        let img_dir = dir.join("img");
        let img = images(&img_dir, Layout::Single).remove(0);
        let (vols, zvol) = (dir.join("vols"), dir.join("zvol"));
        Rig {
            c,
            s,
            img_dir,
            img,
            raw: dir.join("raw.bin"),
            mnt: dir.join("mnt"),
            sock: path_s(&dir.join("rzfsd.sock")),
            vols_s: path_s(&vols),
            zvol_s: path_s(&zvol),
            nbd_s: path_s(&dir.join("nbd.sock")),
            vols,
            zvol,
            dir,
        }
    }

    /// The daemon's (and the clients') environment; `with_loop` false keeps the daemon from
    /// attaching loop devices.
    fn env(&self, with_loop: bool) -> Vec<(&str, &str)> {
        let mut e = vec![
            ("RZFS_SOCKET", self.sock.as_str()),
            ("RZFS_VOL_DIR", self.vols_s.as_str()),
            ("RZFS_ZVOL_DIR", self.zvol_s.as_str()),
            ("RZFS_NBD_SOCKET", self.nbd_s.as_str()),
        ];
        if !with_loop {
            e.push(("RZFS_VOL_LOOP", "0"));
        }
        e
    }

    /// Loop devices on our volume files (a daemon that died leaves them), then whatever is
    /// still mounted (the FUSE mount, the volume tree).
    fn cleanup(&self) {
        if let Ok(o) = sys::run(&["losetup", "-a"], &[]) {
            for line in o.stdout.lines().filter(|l| l.contains(&self.vols_s)) {
                if let Some(dev) = line.split(':').next() {
                    let _ = sys::run(&["losetup", "-d", dev], &[]);
                }
            }
        }
        for m in [&self.mnt, &self.vols] {
            if sys::is_mounted(m) {
                let _ = sys::run(&["fusermount", "-u", "-z", &path_s(m)], &[]);
            }
        }
    }

    /// A fresh `rzfsd` (its log `rzfsd-TAG.log`); `create` makes the pool, else it is
    /// imported (and with `mount` its root file system mounted); then `f`; then the pool is
    /// exported and the daemon stopped whatever happened.
    fn session<T>(
        &self,
        tag: &str,
        create: bool,
        with_loop: bool,
        mount: bool,
        f: impl FnOnce(&[(&str, &str)]) -> Result<T, String>,
    ) -> Result<T, String> {
        let env = self.env(with_loop);
        let (rzpool, rzfs) = (self.c.bin("rzpool"), self.c.bin("rzfs"));
        let log = self.dir.join(format!("rzfsd-{tag}.log"));
        let mut dm = match e2e::start_rzfsd(&self.c.bin_dir, Path::new(&self.sock), &env, &log) {
            Ok(d) => d,
            Err(e) => {
                self.cleanup();
                return Err(e);
            }
        };
        let (m, img) = (path_s(&self.mnt), path_s(&self.img));
        let res = if create {
            let mut argv = vec![rzpool.as_str(), "create", "-f", "-o", "ashift=12", "-O", "compression=off"];
            argv.extend(["-O", "atime=off", "-m", &m, POOL, &img]);
            sys::must(&argv, &env).map(|_| ())
        } else {
            sys::must(&[&rzpool, "import", "-N", "-d", &path_s(&self.img_dir), POOL], &env).and_then(|_| {
                if mount {
                    sys::must(&[&rzfs, "mount", POOL, &m], &env).map(|_| ())
                } else {
                    Ok(())
                }
            })
        }
        .and_then(|_| f(&env));
        let ex = sys::must(&[&rzpool, "export", POOL], &env);
        dm.stop();
        self.cleanup();
        let v = res?;
        ex.map_err(|e| format!("export afterwards: {e}"))?;
        Ok(v)
    }

    /// The image (or for raw the file) read once, untimed, with O_DIRECT (the host cache),
    /// then evicted with `more` from the page cache; returns the bytes left resident.
    fn cold(&self, who: Sys, more: &[PathBuf], warm: bool) -> Result<Option<u64>, String> {
        let base = if who == Sys::Raw { &self.raw } else { &self.img };
        if warm {
            e2e::dd_direct(base)?;
        }
        let mut files = vec![base.clone()];
        files.extend_from_slice(more);
        sys::evict(&files)
    }

    /// Where the link of the volume points now.
    fn vol_target(&self) -> Result<PathBuf, String> {
        let link = self.zvol.join(VOL);
        std::fs::read_link(&link).map_err(|e| format!("{}: {e}", link.display()))
    }
}

fn open_rw(p: &Path, create: bool) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(p)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// What a measurement opened: the handle, the extra files to evict before a cold read and
/// facts to record (the loop device behind the link).
type Opened = (Box<dyn Blk>, Vec<PathBuf>, Value);

/// Opens what `sys` measures.
fn open(r: &Rig, sys: Sys, create: bool) -> Result<Opened, String> {
    match sys {
        Sys::Raw => Ok((Box::new(open_rw(&r.raw, create)?), Vec::new(), json!({}))),
        Sys::Fuse => {
            let p = r.mnt.join(FILE);
            Ok((Box::new(open_rw(&p, create)?), vec![p], json!({})))
        }
        Sys::Loop => {
            let t = r.vol_target()?;
            let dev = t.to_string_lossy().starts_with("/dev/loop");
            let f = open_rw(&t, false)?;
            // The block device's read-ahead (the sequential read depends on it).
            let ra = t.file_name().and_then(|n| {
                let p = format!("/sys/block/{}/queue/read_ahead_kb", n.to_string_lossy());
                std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok()
            });
            let facts = json!({"device": path_s(&t), "loop_device": dev, "read_ahead_kb": ra});
            Ok((Box::new(f), vec![t.clone()], facts))
        }
        Sys::Nbd => {
            let c = Nbd::connect(Path::new(&r.nbd_s), VOL, r.s.io_timeout)?;
            if c.readonly() {
                return Err(format!("NBD export {VOL} is read-only"));
            }
            if c.size != r.s.data_bytes() {
                return Err(format!("NBD export {VOL} is {} bytes, expected {}", c.size, r.s.data_bytes()));
            }
            Ok((Box::new(c), Vec::new(), json!({})))
        }
    }
}

/// `rzfs create -V D POOL/vol` (destroying an older one first); returns its stderr (the
/// daemon's note when no loop device could be attached) and its volblocksize.
fn make_volume(r: &Rig, env: &[(&str, &str)]) -> Result<(String, Option<u64>), String> {
    let rzfs = r.c.bin("rzfs");
    let l = sys::must(&[&rzfs, "list", "-H", "-o", "name"], env)?;
    if l.lines().any(|x| x.trim() == VOL) {
        sys::must(&[&rzfs, "destroy", VOL], env)?;
    }
    let size = format!("{}M", r.s.data_mib);
    let o = sys::run(&[&rzfs, "create", "-V", &size, VOL], env)?;
    if !o.ok {
        return Err(format!("`rzfs create -V {size} {VOL}` failed: {}{}", o.stderr.trim(), o.stdout.trim()));
    }
    let b = sys::must(&[&rzfs, "get", "-Hp", "-o", "value", "volblocksize", VOL], env)?;
    Ok((o.stderr.trim().to_string(), b.trim().parse().ok()))
}

/// One measurement of `sys`, on a fresh daemon for the pool-backed ones.
fn step(r: &Rig, sys: Sys, st: Step) -> Result<Value, String> {
    let s = r.s;
    let d = s.data_bytes();
    let measure = |env: &[(&str, &str)]| -> Result<Value, String> {
        let mut facts = json!({});
        if st == Step::Write && matches!(sys, Sys::Loop | Sys::Nbd) {
            let (note, vbs) = make_volume(r, env)?;
            facts["volblocksize"] = json!(vbs);
            if !note.is_empty() {
                facts["create_note"] = json!(note);
            }
        }
        let (mut h, more, f) = open(r, sys, st == Step::Write)?;
        for (k, x) in f.as_object().into_iter().flatten() {
            facts[k] = x.clone();
        }
        let mut v = match st {
            Step::Write => {
                let secs = seq_write(h.as_mut(), s.data_mib)?;
                rate_row("sequential 1 MiB writes, then fsync/FLUSH", d, secs, None)
            }
            Step::Read => {
                let left = r.cold(sys, &more, true)?;
                let secs = seq_read(h.as_mut(), s.data_mib, true)?;
                rate_row("sequential 1 MiB reads, cold", d, secs, left)
            }
            Step::RandRead => {
                let left = r.cold(sys, &more, true)?;
                let (n, secs) = random_io(h.as_mut(), d, false, s.ops, s.cap)?;
                iops_row("random 4 KiB reads, QD1, cold", n, secs, left)
            }
            Step::RandWrite => {
                let left = r.cold(sys, &more, false)?;
                let (n, secs) = random_io(h.as_mut(), d, true, s.ops, s.cap)?;
                iops_row("random 4 KiB writes, QD1, then fsync/FLUSH", n, secs, left)
            }
        };
        drop(h);
        for (k, x) in facts.as_object().into_iter().flatten() {
            v[k] = x.clone();
        }
        Ok(v)
    };
    match sys {
        Sys::Raw => measure(&[]),
        Sys::Fuse => r.session(&format!("fuse-{}", st.key()), false, true, true, measure),
        Sys::Loop => r.session(&format!("loop-{}", st.key()), false, true, false, measure),
        Sys::Nbd => r.session(&format!("nbd-{}", st.key()), false, false, false, measure),
    }
}

fn label(sys: Sys) -> &'static str {
    match sys {
        Sys::Raw => "raw file",
        Sys::Fuse => "rzfs file (FUSE)",
        Sys::Loop => "volume via loop device",
        Sys::Nbd => "volume via NBD",
    }
}

/// A measurement's rate: MB/s or IOPS.
fn rate(x: &Value) -> Option<f64> {
    x["mbps"].as_f64().or_else(|| x["iops"].as_f64())
}

/// The fastest of `runs` (rows or {"error": ...}) with all of them under "runs" when there
/// are several; the first error when none succeeded.
fn best(mut runs: Vec<Value>) -> Value {
    if runs.len() == 1 {
        return runs.pop().unwrap_or_default();
    }
    let top = runs
        .iter()
        .filter_map(|x| rate(x).map(|r| (r, x)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, x)| x)
        .or_else(|| runs.first());
    let mut v = top.cloned().unwrap_or_else(|| json!({"error": "no run"}));
    v["runs"] = json!(runs);
    v
}

/// The four measurements of `sys`, the reads `r.s.runs` times each; after a failed write
/// the others are skipped.
fn system(r: &Rig, sys: Sys, log: &mut dyn FnMut(&str)) -> Value {
    let t0 = Instant::now();
    let mut v = json!({"system": sys.id(), "label": label(sys)});
    let mut wrote = true;
    for st in Step::ALL {
        let n = if matches!(st, Step::Read | Step::RandRead) { r.s.runs } else { 1 };
        v[st.key()] = if wrote {
            best((0..n).map(|_| step(r, sys, st).unwrap_or_else(|e| json!({"error": e}))).collect())
        } else {
            json!({"error": "skipped: the sequential write failed"})
        };
        if st == Step::Write && v[st.key()].get("error").is_some() {
            wrote = false;
        }
    }
    if sys == Sys::Loop {
        // Which device the link pointed at (the write's session; a later one may differ).
        let w = v["seq_write"].clone();
        for k in ["device", "loop_device", "create_note", "read_ahead_kb"] {
            v[k] = w[k].clone();
        }
    }
    log(&format!("vol {}: {} ({:.0} s)", sys.id(), brief(&v), t0.elapsed().as_secs_f64()));
    v
}

fn brief(v: &Value) -> String {
    Step::ALL
        .iter()
        .map(|st| {
            let x = &v[st.key()];
            match (x["error"].as_str(), x["mbps"].as_f64(), x["iops"].as_f64()) {
                (Some(e), _, _) => format!("{}: error: {e}", st.key()),
                (_, Some(m), _) => format!("{} {m:.0} MB/s", st.key()),
                (_, _, Some(i)) => format!("{} {i:.0} IOPS", st.key()),
                _ => format!("{} n/a", st.key()),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pool on the zero-filled image (untimed).
fn setup(r: &Rig) -> Result<(), String> {
    for d in [&r.mnt, &r.vols, &r.zvol] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    e2e::zero_fill(std::slice::from_ref(&r.img), r.s.image_mib())?;
    r.session("create", true, true, false, |_| Ok(()))
}

/// The section.
pub fn run(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let t0 = Instant::now();
    let s = Sizes::of(c.full);
    let dir = c.work.join("vol");
    let mut v = json!({"data_mib": s.data_mib, "image_mib": s.image_mib(), "ops": s.ops,
                       "cap_s": s.cap.as_secs(), "runs": s.runs, "pool": POOL, "volume": VOL});
    if let Err(e) = std::fs::create_dir_all(&dir) {
        v["error"] = json!(format!("{}: {e}", dir.display()));
        return v;
    }
    if let Some(a) = crate::send::avail_bytes(&c.work).filter(|a| *a < s.need_bytes()) {
        v["error"] = json!(format!(
            "{:.1} GiB free in the work directory, {:.1} GiB needed",
            a as f64 / (1u64 << 30) as f64,
            s.need_bytes() as f64 / (1u64 << 30) as f64
        ));
        let _ = std::fs::remove_dir_all(&dir);
        return v;
    }
    let r = Rig::new(c, s, dir);
    let mut rows = vec![system(&r, Sys::Raw, log)];
    match setup(&r) {
        Ok(()) => {
            for sys in [Sys::Fuse, Sys::Loop, Sys::Nbd] {
                rows.push(system(&r, sys, log));
            }
        }
        Err(e) => {
            log(&format!("vol: pool setup: {e}"));
            for sys in [Sys::Fuse, Sys::Loop, Sys::Nbd] {
                rows.push(
                    json!({"system": sys.id(), "label": label(sys), "error": format!("pool setup: {e}")}),
                );
            }
        }
    }
    // The raw read once more after all systems; the ratios divide by the mean of the two.
    let raw_after = best(
        (0..s.runs)
            .map(|_| {
                (|| {
                    let left = r.cold(Sys::Raw, &[], true)?;
                    let mut f = open_rw(&r.raw, false)?;
                    let secs = seq_read(&mut f, s.data_mib, false)?;
                    let what = "sequential 1 MiB reads of the raw file, cold, after all systems";
                    Ok(rate_row(what, s.data_bytes(), secs, left))
                })()
                .unwrap_or_else(|e: String| json!({"error": e}))
            })
            .collect(),
    );
    log(&format!("vol: raw read after all systems {} MB/s", f0(&raw_after["mbps"])));
    layouts::ratios(&mut rows, &raw_after);
    r.cleanup();
    if !c.keep {
        let _ = std::fs::remove_dir_all(&r.dir);
    }
    v["rows"] = json!(rows);
    v["raw_read_after"] = raw_after;
    v["wall_secs"] = json!(t0.elapsed().as_secs_f64());
    v
}

// ---------------------------------------------------------------------------------------------
// RESULTS.md

/// The section in RESULTS.md.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## Volumes: loop device and NBD (issue 15)\n");
    // Measured in a run of its own (`--only vol`) and merged into a full run's results.
    if let Some(run) = v["separate_run"].as_str() {
        let _ = writeln!(o, "*{run}*\n");
    }
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(o, "not available: {e}\n");
        return o;
    }
    let rows: Vec<&Value> = v["rows"].as_array().into_iter().flatten().collect();
    let lp = rows.iter().find(|x| x["system"] == "loop");
    let dev = match lp.map(|x| (x["loop_device"].as_bool(), x["device"].as_str())) {
        Some((Some(true), Some(d))) => format!(
            "a loop device ({d} in the write's session; its read-ahead {} KiB)",
            lp.map_or_else(|| "n/a".into(), |x| f0(&x["read_ahead_kb"]))
        ),
        Some((Some(false), Some(d))) => format!(
            "NOT a loop device: no loop device could be attached, so the link points at the volume's \
             file in the FUSE volume tree ({d}){}",
            lp.and_then(|x| x["create_note"].as_str())
                .map_or_else(String::new, |n| format!("; rzfs said: {n}"))
        ),
        _ => "(not recorded)".into(),
    };
    let _ = writeln!(
        o,
        "**Method.** One pool on one zero-filled (not sparse) image file of {img} MiB (ashift 12, \
         compression off, atime off), served by a private `rzfsd` on its own socket with \
         `RZFS_VOL_DIR`, `RZFS_ZVOL_DIR` and `RZFS_NBD_SOCKET` under the work directory. Every \
         system gets the same workloads over {d} MiB: sequential 1 MiB writes of {d} MiB of random \
         bytes from offset 0, then fsync (NBD: FLUSH), timed from the first write to the end of the \
         flush; a cold sequential read of them in 1 MiB reads (the first and last MiB compared with \
         what was written); QD1 random 4 KiB reads at 4 KiB-aligned offsets in the {d} MiB, cold; \
         QD1 random 4 KiB writes likewise, then fsync/FLUSH inside the timing; random I/O stops \
         after {ops} requests or {cap} s, whichever comes first. Each measurement on the pool runs \
         on a fresh `rzfsd` that imports the pool (no cache carried over) and exports it afterwards; \
         {runs}. \
         Cold = the image (for the raw file, the file) read once untimed with O_DIRECT, so every \
         timed read meets the same warm VM host cache as in the other sections, then evicted from \
         the page cache (`posix_fadvise` DONTNEED, checked with `fincore`; the file or device read \
         is evicted too). Rows: *raw file* = a plain file of {d} MiB on the work directory's file \
         system, the reference every ratio divides by (the read by the mean of the raw read before \
         and after all systems); *rzfs file (FUSE)* = a file in the pool's root file system through \
         its FUSE mount (recordsize 128K); *volume via loop device* = `rzfs create -V {d}M \
         {vol}` (volblocksize {vbs}), opened at the link `$RZFS_ZVOL_DIR/{vol}`, which pointed at \
         {dev}; buffered I/O on the block device (fsync flushes the device, and the loop driver's \
         flush reaches the daemon as an fsync of the volume's file); *volume via NBD* = the same \
         volume destroyed and created afresh, through the daemon's NBD Unix socket (export name \
         `{vol}`) with the harness's own blocking client (`bench/src/nbdc.rs`: fixed newstyle \
         handshake with NBD_OPT_GO, simple replies, one request in flight, no client cache; those \
         daemons run with `RZFS_VOL_LOOP=0`, so no loop device sits beside it). A 4 KiB random \
         write rewrites a 16 KiB volume block or a 128 KiB file record (copy-on-write).\n",
        img = v["image_mib"],
        d = v["data_mib"],
        ops = v["ops"],
        cap = v["cap_s"],
        vol = v["volume"].as_str().unwrap_or(VOL),
        runs = match v["runs"].as_u64() {
            Some(n) if n > 1 => format!(
                "the writes run once, each read (sequential and random) {n} times, every run cold, \
                 and the fastest counts (all runs listed below the table)"
            ),
            _ => "every measurement runs once".into(),
        },
        vbs = lp
            .and_then(|x| x["seq_write"]["volblocksize"].as_u64())
            .map_or_else(|| "n/a".into(), |b| format!("{}K", b >> 10)),
    );
    let _ = writeln!(o, "Each cell: rate (ratio to the raw file in the same run).\n");
    let _ = writeln!(
        o,
        "| system | seq write MB/s | cold seq read MB/s | 4K rand read IOPS | 4K rand write IOPS | random requests read / write |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    let mut notes = Vec::new();
    for x in &rows {
        let lab = x["label"].as_str().or(x["system"].as_str()).unwrap_or("?");
        if let Some(e) = x["error"].as_str() {
            let _ = writeln!(o, "| {lab} | not available: {e} | | | | |");
            continue;
        }
        let cells: Vec<String> = Step::ALL
            .iter()
            .map(|st| {
                let unit = if matches!(st, Step::Write | Step::Read) { "mbps" } else { "iops" };
                match x[st.key()]["error"].as_str() {
                    Some(e) => {
                        notes.push(format!("- {lab}, {}: not available: {}", st.key(), e.trim()));
                        "error".into()
                    }
                    None => layouts::cell(x, st.key(), unit),
                }
            })
            .collect();
        let n = |k: &str| x[k]["ops"].as_u64().map_or_else(|| "n/a".into(), |n| n.to_string());
        let _ = writeln!(o, "| {lab} | {} | {} / {} |", cells.join(" | "), n("rand_read"), n("rand_write"));
    }
    if !notes.is_empty() {
        let _ = writeln!(o, "\n{}", notes.join("\n"));
    }
    let mut runs_txt = Vec::new();
    for x in rows.iter().filter(|x| x.get("error").is_none()) {
        let r = |k: &str| {
            let l: Vec<String> = all_runs(&x[k])
                .iter()
                .map(|y| rate(y).map_or("error".into(), |r| format!("{r:.0}")))
                .collect();
            l.join(", ")
        };
        if x["seq_read"]["runs"].is_array() || x["rand_read"]["runs"].is_array() {
            runs_txt.push(format!(
                "{} {} / {}",
                x["label"].as_str().unwrap_or("?"),
                r("seq_read"),
                r("rand_read")
            ));
        }
    }
    if !runs_txt.is_empty() {
        let after: Vec<String> = all_runs(&v["raw_read_after"])
            .iter()
            .map(|y| rate(y).map_or("error".into(), |r| format!("{r:.0}")))
            .collect();
        let _ = writeln!(
            o,
            "\nRead runs, cold sequential MB/s / random IOPS (the fastest counts): {}; the raw file's read \
             after all systems: {}.",
            runs_txt.join("; "),
            after.join(", ")
        );
    }
    let left: Vec<String> = rows
        .iter()
        .flat_map(|x| Step::ALL.iter().flat_map(move |st| all_runs(&x[st.key()])))
        .chain(all_runs(&v["raw_read_after"]))
        .filter_map(|y| y["resident_after_evict"].as_u64())
        .map(|b| b.to_string())
        .collect();
    let _ = writeln!(
        o,
        "\nRaw read again after all systems: {} MB/s. Bytes left resident after each eviction: {}. \
         Load average during the measurements: {}.\n",
        f0(&v["raw_read_after"]["mbps"]),
        if left.iter().all(|b| b == "0") { "0 everywhere".to_string() } else { left.join(", ") },
        loads(&rows),
    );
    o
}

/// The runs of a measurement: its "runs", or itself.
fn all_runs(x: &Value) -> Vec<&Value> {
    match x["runs"].as_array() {
        Some(a) => a.iter().collect(),
        None => vec![x],
    }
}

/// "min–max" of the load averages recorded per measurement.
fn loads(rows: &[&Value]) -> String {
    let l: Vec<f64> = rows
        .iter()
        .flat_map(|x| Step::ALL.iter().flat_map(move |st| all_runs(&x[st.key()])))
        .filter_map(|y| y["loadavg"].as_f64())
        .collect();
    if l.is_empty() {
        return "n/a".into();
    }
    let (lo, hi) = l.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    format!("{lo:.2}–{hi:.2}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory disk.
    struct Mem(Vec<u8>, u32);

    impl Blk for Mem {
        fn write_at(&mut self, d: &[u8], off: u64) -> Result<(), String> {
            let o = off as usize;
            if o + d.len() > self.0.len() {
                self.0.resize(o + d.len(), 0);
            }
            self.0[o..o + d.len()].copy_from_slice(d);
            Ok(())
        }
        fn read_at(&mut self, b: &mut [u8], off: u64) -> Result<(), String> {
            let o = off as usize;
            b.copy_from_slice(self.0.get(o..o + b.len()).ok_or("past the end")?);
            Ok(())
        }
        fn flush(&mut self) -> Result<(), String> {
            self.1 += 1;
            Ok(())
        }
    }

    #[test]
    fn loops_write_read_verify_and_flush() {
        let mut m = Mem(Vec::new(), 0);
        seq_write(&mut m, 3).unwrap();
        assert_eq!((m.0.len() as u64, m.1), (3 * MIB, 1));
        seq_read(&mut m, 3, true).unwrap();
        let (n, _) = random_io(&mut m, 3 * MIB, true, 50, Duration::from_secs(5)).unwrap();
        assert_eq!((n, m.1, m.0.len() as u64), (50, 2, 3 * MIB));
        let (n, _) = random_io(&mut m, 3 * MIB, false, 40, Duration::from_secs(5)).unwrap();
        assert_eq!((n, m.1), (40, 2));
        assert!(seq_read(&mut m, 3, true).is_err(), "the random writes changed the data");
        seq_write(&mut m, 3).unwrap();
        seq_read(&mut m, 3, true).unwrap();
        m.0[3 * MIB as usize - 1] ^= 1;
        assert!(seq_read(&mut m, 3, true).unwrap_err().contains("last MiB"));
        m.0[0] ^= 1;
        assert!(seq_read(&mut m, 3, true).unwrap_err().contains("first MiB"));
        assert!(seq_read(&mut m, 3, false).is_ok());
    }

    #[test]
    fn best_of_runs() {
        let one = best(vec![json!({"mbps": 5.0})]);
        assert!(one.get("runs").is_none() && one["mbps"] == 5.0);
        let b = best(vec![json!({"mbps": 5.0}), json!({"error": "x"}), json!({"mbps": 9.0})]);
        assert_eq!((b["mbps"].as_f64(), b["runs"].as_array().map(Vec::len)), (Some(9.0), Some(3)));
        let i = best(vec![json!({"iops": 50.0}), json!({"iops": 40.0})]);
        assert_eq!(i["iops"], 50.0);
        let e = best(vec![json!({"error": "a"}), json!({"error": "b"})]);
        assert_eq!(e["error"], "a");
    }

    #[test]
    fn sizes() {
        let (f, s) = (Sizes::of(true), Sizes::of(false));
        assert!(f.image_mib() > 2 * f.data_mib + 200 && s.image_mib() > 2 * s.data_mib + 200);
        assert!(s.data_mib <= 64 && s.ops <= 500 && s.cap.as_secs() <= 5);
        assert!(f.need_bytes() > (f.image_mib() + f.data_mib) * MIB);
    }

    #[test]
    fn render_rows_ratios_and_errors() {
        let mut rows = vec![
            json!({"system": "raw", "label": "raw file", "seq_write": {"mbps": 200.0, "loadavg": 1.0},
                   "seq_read": {"mbps": 400.0, "resident_after_evict": 0},
                   "rand_read": {"iops": 1000.0, "ops": 300}, "rand_write": {"iops": 500.0, "ops": 300}}),
            json!({"system": "loop", "label": "volume via loop device", "device": "/dev/loop3",
                   "loop_device": true, "seq_write": {"mbps": 100.0, "volblocksize": 16384, "loadavg": 2.5},
                   "read_ahead_kb": 128,
                   "seq_read": {"error": "boom"},
                   "rand_read": best(vec![json!({"iops": 250.0, "ops": 120, "resident_after_evict": 0}),
                                         json!({"iops": 200.0, "ops": 100, "resident_after_evict": 4096})]),
                   "rand_write": {"iops": 50.0, "ops": 300}}),
            json!({"system": "nbd", "label": "volume via NBD", "error": "pool setup: no"}),
        ];
        layouts::ratios(&mut rows, &json!({"mbps": 200.0}));
        let v = json!({"data_mib": 32, "image_mib": 352, "ops": 300, "cap_s": 3, "volume": VOL, "runs": 2,
                       "rows": rows, "raw_read_after": {"mbps": 200.0}, "separate_run": "Later."});
        let md = render(&v);
        assert!(md.contains("## Volumes: loop device and NBD (issue 15)"), "{md}");
        assert!(md.contains("*Later.*"), "{md}");
        assert!(md.contains("| raw file | 200 | 400 | 1000 | 500 | 300 / 300 |"), "{md}");
        assert!(
            md.contains(
                "| volume via loop device | 100 (0.50) | error | 250 (0.25) | 50 (0.10) | 120 / 300 |"
            ),
            "{md}"
        );
        assert!(md.contains("- volume via loop device, seq_read: not available: boom"), "{md}");
        assert!(md.contains("| volume via NBD | not available: pool setup: no |"), "{md}");
        assert!(md.contains("a loop device (/dev/loop3"), "{md}");
        assert!(md.contains("volblocksize 16K"), "{md}");
        assert!(md.contains("1.00–2.50"), "{md}");
        assert!(md.contains("read-ahead 128 KiB"), "{md}");
        assert!(md.contains("each read (sequential and random) 2 times"), "{md}");
        assert!(md.contains("volume via loop device error / 250, 200"), "{md}");
        assert!(md.contains("after each eviction: 0, 0, 4096"), "{md}");
        let nl =
            render(&json!({"rows": [{"system": "loop", "loop_device": false, "device": "/x/vols/rzvol/vol",
                                          "create_note": "note: no loop"}]}));
        assert!(nl.contains("NOT a loop device") && nl.contains("note: no loop"), "{nl}");
        assert!(render(&json!({"error": "skipped (--only)"})).contains("not available: skipped"));
    }
}
