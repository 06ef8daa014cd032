//! Metadata and memory (issue 4, items 3 and 4).
//!
//! **Metadata rates.** The same tree — 100 directories of N/100 files, 512 bytes of non-zero
//! data each — is created, stat'ed, listed and removed on three file systems built on the same
//! storage: four zero-filled image files of the same size (never sparse) under the scratch
//! directory. rzfs (FUSE mount served by our own `rzfsd`, raidz1 of the 4 files, ashift 12),
//! zfs-fuse (raidz1 of the 4 files) and Linux btrfs (data raid5, metadata raid1, on 4 loop
//! devices over the files); compression and atime off everywhere (`noatime` for btrfs). Every
//! phase runs in this process through the mount with plain `std::fs` calls, one thread:
//!
//! - *create*: mkdir, then create + write 512 bytes + close each file; the phase ends once the
//!   tree is durable: `sync -f MNT` (syncfs, which commits btrfs but is not passed to ordinary
//!   FUSE daemons by Linux) and an fsync of every directory (which reaches the FUSE daemons:
//!   rzfs syncs its txg, zfs-fuse commits its ZIL);
//! - *stat*: cold — unmount (export the pool and stop the daemon), evict the images from the
//!   page cache (`sys::evict`, residency checked with fincore and recorded), start the daemon
//!   again, import and mount — then `metadata()` of every file (its size is checked);
//! - *readdir*: cold again the same way, then every directory listed (entries counted, must
//!   be N);
//! - *unlink*: every file removed, every directory removed, then syncfs + fsync of the root.
//!
//! Each phase is capped by wall clock; a system that fails (or exceeds the cap) gets an error
//! row and the others still run. The daemon's peak RSS (VmHWM) is the maximum over the daemon
//! processes of the run (one per mount).
//!
//! **Memory while walking.** A raidz1 pool of 4 *sparse* files of 512 GiB each (2 TiB of vdevs;
//! only what is written occupies disk) is populated in a child process through the library
//! (`rzfs-bench populate`: 225 directories × 1000 files of 1 KiB, the write throttle checked
//! after every file and syncing the txg past 64 MiB of dirty data), then imported read-only by
//! a fresh `rzfsd` (private socket) and walked through its FUSE mount — recursive readdir and
//! `symlink_metadata()` of every entry — once with `RZFS_ARC_MAX` = 64 MiB and once with the
//! variable unset (the default, also 64 MiB). The images are evicted before each walk; the
//! daemon's VmHWM is read after it.

use crate::btrfs::Loops;
use crate::e2e::{self, Daemon, ZFS, ZPOOL};
use crate::libpool::{self, Layout};
use crate::report::{f0, mib};
use crate::sys;
use crate::Ctx;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const POOL: &str = "rzmeta";
const WALK_POOL: &str = "rzwalk";
const FILE_BYTES: usize = 512;
const WALK_FILE_BYTES: usize = 1024;
const WALK_PER_DIR: usize = 1000;
const META_DIRS: usize = 100;
/// The phases of the metadata measurement, with what each one does (for the report).
const PHASES: [(&str, &str); 4] = [
    ("create", "mkdir + create/write 512 B/close of every file, then syncfs + fsync of each directory"),
    ("stat", "cold remount, then metadata() of every file"),
    ("readdir", "cold remount, then every directory listed (entries/s)"),
    ("unlink", "unlink of every file and rmdir of every directory, then syncfs + fsync of the root"),
];

// ----- the tree ----------------------------------------------------------------------------

/// `dirs` directories of `per_dir` files each, directly under the root of a file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tree {
    dirs: usize,
    per_dir: usize,
}

impl Tree {
    /// About `files` files spread over `dirs` directories (rounded up to fill every directory).
    fn new(files: usize, dirs: usize) -> Tree {
        let dirs = dirs.max(1);
        Tree { dirs, per_dir: files.div_ceil(dirs).max(1) }
    }

    /// The walk's tree: directories of 1000 files (225 of them for 225,000 files).
    fn walk(files: usize) -> Tree {
        Tree::new(files, files.div_ceil(WALK_PER_DIR))
    }

    fn files(self) -> usize {
        self.dirs * self.per_dir
    }

    fn dir(self, root: &Path, i: usize) -> PathBuf {
        root.join(dir_name(i))
    }
}

fn dir_name(i: usize) -> String {
    format!("d{i:04}")
}

fn file_name(j: usize) -> String {
    format!("f{j:06}")
}

/// `len` bytes, none of them zero, different for every file index (no run of zeros a file
/// system could store as a hole).
fn payload(idx: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| ((idx.wrapping_mul(31).wrapping_add(k * 7)) % 255) as u8 + 1).collect()
}

// ----- the timed phases --------------------------------------------------------------------

/// A wall-clock limit for one phase, checked as the loop goes.
struct Cap {
    t0: Instant,
    limit: Duration,
}

impl Cap {
    fn start(limit: Duration) -> Cap {
        Cap { t0: Instant::now(), limit }
    }
    fn check(&self, done: usize, total: usize) -> Result<(), String> {
        if self.t0.elapsed() > self.limit {
            return Err(format!(
                "exceeded cap of {} s after {done} of {total} operations",
                self.limit.as_secs()
            ));
        }
        Ok(())
    }
    fn secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

fn io<T>(r: std::io::Result<T>, what: &Path) -> Result<T, String> {
    r.map_err(|e| format!("{}: {e}", what.display()))
}

/// Creates the tree under `root` (mkdir, create + write + close per file).
fn create_tree(root: &Path, t: Tree, cap: &Cap) -> Result<(), String> {
    for i in 0..t.dirs {
        let d = t.dir(root, i);
        io(std::fs::create_dir(&d), &d)?;
        for j in 0..t.per_dir {
            let p = d.join(file_name(j));
            let mut f = io(std::fs::File::create(&p), &p)?;
            io(f.write_all(&payload(i * t.per_dir + j, FILE_BYTES)), &p)?;
            drop(f);
            if j % 64 == 0 {
                cap.check(i * t.per_dir + j, t.files())?;
            }
        }
    }
    Ok(())
}

/// Makes the tree durable: syncfs, then fsync of the listed directories (see the module doc).
fn durable(root: &Path, dirs: &[PathBuf]) -> Result<(), String> {
    sys::must(&["sync", "-f", &root.to_string_lossy()], &[])?;
    for d in dirs {
        let f = io(std::fs::File::open(d), d)?;
        io(f.sync_all(), d)?;
    }
    Ok(())
}

/// `metadata()` of every file; each must be a regular file of the size written.
fn stat_tree(root: &Path, t: Tree, cap: &Cap) -> Result<(), String> {
    for i in 0..t.dirs {
        let d = t.dir(root, i);
        for j in 0..t.per_dir {
            let p = d.join(file_name(j));
            let m = io(std::fs::metadata(&p), &p)?;
            if !m.is_file() || m.len() != FILE_BYTES as u64 {
                return Err(format!("{}: {} bytes, expected a {FILE_BYTES}-byte file", p.display(), m.len()));
            }
            if j % 64 == 0 {
                cap.check(i * t.per_dir + j, t.files())?;
            }
        }
    }
    Ok(())
}

/// Lists every directory; returns the number of entries seen.
fn readdir_tree(root: &Path, t: Tree, cap: &Cap) -> Result<usize, String> {
    let mut n = 0;
    for i in 0..t.dirs {
        let d = t.dir(root, i);
        for e in io(std::fs::read_dir(&d), &d)? {
            io(e, &d)?;
            n += 1;
        }
        cap.check(n, t.files())?;
    }
    Ok(n)
}

/// Removes every file and directory of the tree.
fn unlink_tree(root: &Path, t: Tree, cap: &Cap) -> Result<(), String> {
    for i in 0..t.dirs {
        let d = t.dir(root, i);
        for j in 0..t.per_dir {
            let p = d.join(file_name(j));
            io(std::fs::remove_file(&p), &p)?;
            if j % 64 == 0 {
                cap.check(i * t.per_dir + j, t.files())?;
            }
        }
        io(std::fs::remove_dir(&d), &d)?;
    }
    Ok(())
}

/// One phase's figures: operations, seconds, operations per second, and the page-cache
/// residency of the images left after eviction (cold phases only).
fn phase(ops: usize, secs: f64, resident: Option<Option<u64>>) -> Value {
    let mut v =
        json!({"ops": ops, "secs": secs, "ops_per_s": if secs > 0.0 { ops as f64 / secs } else { 0.0 }});
    if let Some(r) = resident {
        v["resident_after_evict"] = json!(r);
    }
    v
}

// ----- the three file systems --------------------------------------------------------------

/// A mounted file system under test.
trait MetaFs {
    fn mnt(&self) -> PathBuf;
    /// Unmounts (exporting the pool, stopping its daemon), evicts the images, mounts again;
    /// returns the image bytes still resident after eviction.
    fn cold(&mut self) -> Result<Option<u64>, String>;
    /// Peak RSS of the daemons that served the mount so far, KiB (None: kernel file system).
    fn peak_kib(&self) -> Option<u64>;
}

fn images(dir: &Path) -> Vec<PathBuf> {
    (0..4).map(|i| dir.join(format!("f{i}.img"))).collect()
}

fn strs(p: &[PathBuf]) -> Vec<String> {
    p.iter().map(|x| x.to_string_lossy().into_owned()).collect()
}

fn wait_mounted(mnt: &Path, who: &str) -> Result<(), String> {
    if sys::wait_for(20, || sys::is_mounted(mnt)) {
        Ok(())
    } else {
        Err(format!("{who}: {} not mounted", mnt.display()))
    }
}

fn lazy_unmount(mnt: &Path) {
    if sys::is_mounted(mnt) {
        let _ = sys::run(&["fusermount", "-u", "-z", &mnt.to_string_lossy()], &[]);
    }
}

/// Our own `rzfsd` (private socket under the scratch directory, never the system one) and the
/// pool it serves, mounted at `mnt`; on drop: export (which unmounts), stop the daemon.
struct RzSession {
    bin_dir: PathBuf,
    env: Vec<(String, String)>,
    daemon: Daemon,
    pool: String,
    mnt: PathBuf,
    imported: bool,
}

impl RzSession {
    fn start(
        bin_dir: &Path,
        work: &Path,
        tag: &str,
        arc: Option<usize>,
        pool: &str,
        mnt: &Path,
    ) -> Result<Self, String> {
        let sock = work.join(format!("{tag}-rzfsd.sock"));
        let mut env = vec![("RZFS_SOCKET".to_string(), sock.to_string_lossy().into_owned())];
        if let Some(a) = arc {
            env.push(("RZFS_ARC_MAX".into(), a.to_string()));
        }
        let e: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let daemon = e2e::start_rzfsd(bin_dir, &sock, &e, &work.join(format!("{tag}-rzfsd.log")))?;
        io(std::fs::create_dir_all(mnt), mnt)?;
        let (pool, mnt) = (pool.to_string(), mnt.to_path_buf());
        Ok(RzSession { bin_dir: bin_dir.to_path_buf(), env, daemon, pool, mnt, imported: false })
    }

    /// Runs `rzpool`/`rzfs` against this daemon.
    fn cmd(&self, tool: &str, args: &[&str]) -> Result<String, String> {
        let prog = self.bin_dir.join(tool).to_string_lossy().into_owned();
        let mut argv = vec![prog.as_str()];
        argv.extend_from_slice(args);
        let e: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        sys::must(&argv, &e)
    }

    /// `rzpool create` of a raidz1 on `imgs` (compression and atime off), root mounted at `mnt`.
    fn create(&mut self, imgs: &[PathBuf]) -> Result<(), String> {
        let m = self.mnt.to_string_lossy().into_owned();
        let imgs = strs(imgs);
        let mut a = vec!["create", "-f", "-o", "ashift=12", "-O", "compression=off", "-O", "atime=off"];
        a.extend(["-m", &m, &self.pool, "raidz1"]);
        a.extend(imgs.iter().map(String::as_str));
        let pool = self.pool.clone();
        self.cmd("rzpool", &a).map_err(|e| format!("create {pool}: {e}"))?;
        self.imported = true;
        wait_mounted(&self.mnt, "rzfs")
    }

    /// Imports the pool from `dir` and mounts its root file system at `mnt`.
    fn import(&mut self, dir: &Path, readonly: bool) -> Result<(), String> {
        let (d, m, pool) =
            (dir.to_string_lossy().into_owned(), self.mnt.to_string_lossy().into_owned(), self.pool.clone());
        let mut a = vec!["import", "-N", "-d", &d];
        if readonly {
            a.extend(["-o", "readonly=on"]);
        }
        a.push(&pool);
        self.cmd("rzpool", &a)?;
        self.imported = true;
        self.cmd("rzfs", &["mount", &pool, &m])?;
        wait_mounted(&self.mnt, "rzfs")
    }

    fn hwm(&self) -> Option<u64> {
        sys::vmhwm_kib(self.daemon.pid())
    }

    /// Exports (unmounting) and stops the daemon; safe to call twice.
    fn close(&mut self) -> Result<(), String> {
        let mut r = Ok(());
        if self.imported {
            self.imported = false;
            r = self.cmd("rzpool", &["export", &self.pool.clone()]).map(|_| ());
        }
        lazy_unmount(&self.mnt);
        self.daemon.stop();
        r
    }
}

impl Drop for RzSession {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// rzfs: a fresh `rzfsd` per mount.
struct RzfsMeta {
    bin_dir: PathBuf,
    work: PathBuf,
    dir: PathBuf,
    session: Option<RzSession>,
    peak: u64,
}

impl RzfsMeta {
    fn setup(c: &Ctx, mib: u64) -> Result<RzfsMeta, String> {
        let dir = c.work.join("meta-rzfs");
        let mut m =
            RzfsMeta { bin_dir: c.bin_dir.clone(), work: c.work.clone(), dir, session: None, peak: 0 };
        e2e::zero_fill(&images(&m.dir), mib)?;
        let mut s = RzSession::start(&m.bin_dir, &m.work, "meta", None, POOL, &m.dir.join("mnt"))?;
        s.create(&images(&m.dir))?;
        m.session = Some(s);
        Ok(m)
    }
}

impl MetaFs for RzfsMeta {
    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
    fn cold(&mut self) -> Result<Option<u64>, String> {
        if let Some(mut s) = self.session.take() {
            self.peak = self.peak.max(s.hwm().unwrap_or(0));
            s.close()?;
        }
        let left = sys::evict(&images(&self.dir))?;
        let mut s = RzSession::start(&self.bin_dir, &self.work, "meta", None, POOL, &self.mnt())?;
        s.import(&self.dir, false)?;
        self.session = Some(s);
        Ok(left)
    }
    fn peak_kib(&self) -> Option<u64> {
        Some(self.peak.max(self.session.as_ref().and_then(RzSession::hwm).unwrap_or(0)))
    }
}

impl Drop for RzfsMeta {
    fn drop(&mut self) {
        drop(self.session.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// zfs-fuse: the one daemon of the machine, restarted for every mount.
struct ZfsFuseMeta {
    dir: PathBuf,
    daemon: Daemon,
    wait_s: u64,
    imported: bool,
    peak: u64,
}

impl ZfsFuseMeta {
    fn setup(c: &Ctx, mib: u64) -> Result<ZfsFuseMeta, String> {
        let dir = c.work.join("meta-zfsfuse");
        let mut z = ZfsFuseMeta { dir, daemon: Daemon(None), wait_s: c.wait_s, imported: false, peak: 0 };
        e2e::zero_fill(&images(&z.dir), mib)?;
        io(std::fs::create_dir_all(z.mnt()), &z.mnt())?;
        z.daemon = e2e::start_zfs_fuse(&z.dir.join("zfs-fuse.log"), z.wait_s)?;
        let (m, imgs) = (z.mnt().to_string_lossy().into_owned(), strs(&images(&z.dir)));
        let mut a = vec![ZPOOL, "create", "-f", "-o", "cachefile=none", "-m", &m, POOL, "raidz1"];
        a.extend(imgs.iter().map(String::as_str));
        sys::must(&a, &[])?;
        z.imported = true;
        sys::must(&[ZFS, "set", "compression=off", POOL], &[])?;
        sys::must(&[ZFS, "set", "atime=off", POOL], &[])?;
        wait_mounted(&z.mnt(), "zfs-fuse")?;
        Ok(z)
    }

    fn export(&mut self) -> Result<(), String> {
        if self.imported {
            self.imported = false;
            sys::must(&[ZPOOL, "export", POOL], &[])?;
        }
        Ok(())
    }
}

impl MetaFs for ZfsFuseMeta {
    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
    fn cold(&mut self) -> Result<Option<u64>, String> {
        self.peak = self.peak.max(sys::vmhwm_kib(self.daemon.pid()).unwrap_or(0));
        self.export()?;
        self.daemon.stop();
        lazy_unmount(&self.mnt());
        let left = sys::evict(&images(&self.dir))?;
        self.daemon = e2e::start_zfs_fuse(&self.dir.join("zfs-fuse.log"), self.wait_s)?;
        sys::must(&[ZPOOL, "import", "-d", &self.dir.to_string_lossy(), POOL], &[])?;
        self.imported = true;
        wait_mounted(&self.mnt(), "zfs-fuse")?;
        Ok(left)
    }
    fn peak_kib(&self) -> Option<u64> {
        Some(self.peak.max(sys::vmhwm_kib(self.daemon.pid()).unwrap_or(0)))
    }
}

impl Drop for ZfsFuseMeta {
    fn drop(&mut self) {
        let _ = self.export();
        self.daemon.stop();
        lazy_unmount(&self.mnt());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// btrfs, data raid5 and metadata raid1, on 4 loop devices over the images.
struct BtrfsMeta {
    dir: PathBuf,
    loops: Option<Loops>,
}

impl BtrfsMeta {
    fn setup(c: &Ctx, mib: u64) -> Result<BtrfsMeta, String> {
        if let Some(r) = crate::btrfs::unavailable() {
            return Err(r);
        }
        let dir = c.work.join("meta-btrfs");
        let mut b = BtrfsMeta { loops: None, dir };
        // mkfs.btrfs refuses devices under 125 MiB.
        e2e::zero_fill(&images(&b.dir), mib.max(128))?;
        let mut l = Loops { devs: Vec::new(), mnt: b.mnt() };
        io(std::fs::create_dir_all(&l.mnt), &l.mnt)?;
        for img in images(&b.dir) {
            let d = sys::must(&["losetup", "-f", "--show", &img.to_string_lossy()], &[])?;
            l.devs.push(d.trim().to_string());
        }
        b.loops = Some(l);
        let devs = b.devs();
        let mut mk = vec!["mkfs.btrfs", "-f", "-q", "-d", "raid5", "-m", "raid1"];
        mk.extend(devs.iter().map(String::as_str));
        sys::must(&mk, &[])?;
        b.mount()?;
        Ok(b)
    }

    fn devs(&self) -> Vec<String> {
        self.loops.as_ref().map(|l| l.devs.clone()).unwrap_or_default()
    }

    fn mount(&self) -> Result<(), String> {
        let devs = self.devs();
        let first = devs.first().ok_or("no loop device")?;
        let opts: Vec<String> = devs.iter().map(|d| format!("device={d}")).collect();
        let opts = format!("noatime,{}", opts.join(","));
        sys::must(&["mount", "-t", "btrfs", "-o", &opts, first, &self.mnt().to_string_lossy()], &[])
            .map(|_| ())
    }
}

impl MetaFs for BtrfsMeta {
    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }
    fn cold(&mut self) -> Result<Option<u64>, String> {
        sys::must(&["umount", &self.mnt().to_string_lossy()], &[])?;
        for d in self.devs() {
            // The loop devices' own buffer cache, then the backing files.
            let _ = sys::run(&["blockdev", "--flushbufs", &d], &[]);
        }
        let left = sys::evict(&images(&self.dir))?;
        self.mount()?;
        Ok(left)
    }
    fn peak_kib(&self) -> Option<u64> {
        None
    }
}

impl Drop for BtrfsMeta {
    fn drop(&mut self) {
        drop(self.loops.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ----- item 3: the metadata section ---------------------------------------------------------

/// The four phases on `fs`, recorded into `out` as they complete.
fn phases(fs: &mut dyn MetaFs, t: Tree, limit: Duration, out: &mut Map<String, Value>) -> Result<(), String> {
    let root = fs.mnt();
    let dirs: Vec<PathBuf> = (0..t.dirs).map(|i| t.dir(&root, i)).collect();
    let cap = Cap::start(limit);
    create_tree(&root, t, &cap)?;
    durable(&root, &dirs)?;
    out.insert("create".into(), phase(t.files(), cap.secs(), None));
    let left = fs.cold()?;
    let cap = Cap::start(limit);
    stat_tree(&root, t, &cap)?;
    out.insert("stat".into(), phase(t.files(), cap.secs(), Some(left)));
    let left = fs.cold()?;
    let cap = Cap::start(limit);
    let n = readdir_tree(&root, t, &cap)?;
    if n != t.files() {
        return Err(format!("readdir found {n} entries, expected {}", t.files()));
    }
    out.insert("readdir".into(), phase(n, cap.secs(), Some(left)));
    let cap = Cap::start(limit);
    unlink_tree(&root, t, &cap)?;
    durable(&root, std::slice::from_ref(&root))?;
    out.insert("unlink".into(), phase(t.files(), cap.secs(), None));
    Ok(())
}

/// Builds one system, runs the phases, tears it down; errors become the row's "error".
fn system(
    id: &str,
    label: &str,
    t: Tree,
    limit: Duration,
    log: &mut dyn FnMut(&str),
    setup: impl FnOnce() -> Result<Box<dyn MetaFs>, String>,
) -> Value {
    let t0 = Instant::now();
    let mut row = json!({"id": id, "label": label, "loadavg_start": sys::loadavg()});
    let mut ph = Map::new();
    let r = setup().and_then(|mut fs| {
        row["setup_secs"] = json!(t0.elapsed().as_secs_f64());
        let r = phases(fs.as_mut(), t, limit, &mut ph);
        row["vmhwm_kib"] = json!(fs.peak_kib());
        r
    });
    for (k, v) in &ph {
        let rate = v["ops_per_s"].as_f64().unwrap_or(0.0);
        log(&format!("meta {id} {k}: {rate:.0} ops/s"));
    }
    row["phases"] = Value::Object(ph);
    if let Err(e) = r {
        log(&format!("meta {id}: error: {e}"));
        row["error"] = json!(e);
    }
    row["wall_secs"] = json!(t0.elapsed().as_secs_f64());
    row
}

/// rzfs ops/s divided by each peer's, per phase (null where either side has no figure).
fn ratios(systems: &[Value]) -> Value {
    let rate = |id: &str, p: &str| {
        systems
            .iter()
            .find(|s| s["id"] == id)
            .and_then(|s| s["phases"][p]["ops_per_s"].as_f64())
            .filter(|x| *x > 0.0)
    };
    let mut out = Map::new();
    for peer in ["zfsfuse", "btrfs"] {
        let mut m = Map::new();
        for (p, _) in PHASES {
            m.insert(p.into(), json!(rate("rzfs", p).zip(rate(peer, p)).map(|(a, b)| a / b)));
        }
        out.insert(peer.into(), Value::Object(m));
    }
    Value::Object(out)
}

/// Why the FUSE-based measurements cannot run here, if they cannot.
fn fuse_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|v| v.split_whitespace().next());
    if uid != Some("0") {
        return Some("not running as root (mounts, loop devices and zfs-fuse need it)".into());
    }
    None
}

/// Item 3: metadata rates on rzfs, zfs-fuse and btrfs.
fn metadata(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let files = if c.full { 100_000 } else { 2_000 };
    let t = Tree::new(files, META_DIRS);
    let mib: u64 = if c.full { 1024 } else { 128 };
    let limit = Duration::from_secs(if c.full { 600 } else { 120 });
    let mut rows = Vec::new();
    let fuse = fuse_unavailable();
    let label_rz = "rzfs: rzfsd FUSE mount, raidz1 of 4 files, ashift 12";
    let label_zf = "peer: zfs-fuse 0.7 FUSE mount, raidz1 of 4 files";
    let label_bt = "peer: Linux btrfs, data raid5 / metadata raid1 on 4 loop devices";
    for (id, label) in [("rzfs", label_rz), ("zfsfuse", label_zf)] {
        if let Some(r) = &fuse {
            rows.push(json!({"id": id, "label": label, "error": r}));
            continue;
        }
        rows.push(system(id, label, t, limit, log, || {
            if id == "rzfs" {
                RzfsMeta::setup(c, mib).map(|x| Box::new(x) as Box<dyn MetaFs>)
            } else {
                ZfsFuseMeta::setup(c, mib).map(|x| Box::new(x) as Box<dyn MetaFs>)
            }
        }));
    }
    rows.push(system("btrfs", label_bt, t, limit, log, || {
        BtrfsMeta::setup(c, mib).map(|x| Box::new(x) as Box<dyn MetaFs>)
    }));
    json!({
        "files": t.files(), "dirs": t.dirs, "files_per_dir": t.per_dir, "file_bytes": FILE_BYTES,
        "image_mib": mib, "images": 4, "phase_cap_s": limit.as_secs(),
        "phases": PHASES.iter().map(|(p, d)| json!({"id": p, "what": d})).collect::<Vec<_>>(),
        "systems": rows, "ratios": ratios(&rows),
    })
}

// ----- item 4: memory while walking ---------------------------------------------------------

fn walk_images(dir: &Path) -> Vec<PathBuf> {
    (0..4).map(|i| dir.join(format!("v{i}.img"))).collect()
}

/// Creates the sparse vdev files (nothing written: `set_len` only).
fn sparse_images(dir: &Path, bytes: u64) -> Result<(), String> {
    io(std::fs::create_dir_all(dir), dir)?;
    for p in walk_images(dir) {
        let f = io(std::fs::File::create(&p), &p)?;
        io(f.set_len(bytes), &p)?;
    }
    Ok(())
}

/// Bytes the files under `dir` occupy on disk (allocated blocks, like `du`).
fn allocated(files: &[PathBuf]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    files.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.blocks() * 512).sum()
}

/// `rzfs-bench populate`: creates the pool on the sparse files of `dir` and its tree through
/// the library, in this process; returns JSON with the timings.
fn populate(dir: &Path, pool: &str, files: usize) -> Result<String, String> {
    let imgs = walk_images(dir);
    let t0 = Instant::now();
    let mut w = libpool::create(pool, Layout::Raidz(1, 4), &imgs, e2e::ARC_SMALL)?;
    let create_secs = t0.elapsed().as_secs_f64();
    let (ds, mut z) = libpool::open_root(&mut w)?;
    let t = Tree::walk(files);
    let t1 = Instant::now();
    for i in 0..t.dirs {
        z.txg = w.txg;
        let d = w.dataset(ds).ok_or("root dataset not open")?;
        let root = z.root();
        let dobj = z
            .mkdir(&mut d.os, &mut d.zaps, root, dir_name(i).as_bytes(), 0o755, 0, 0, libpool::now())
            .map_err(|e| format!("mkdir {}: {e}", dir_name(i)))?;
        for j in 0..t.per_dir {
            z.txg = w.txg;
            let d = w.dataset(ds).ok_or("root dataset not open")?;
            let (name, now) = (file_name(j), libpool::now());
            let f = z
                .create(&mut d.os, &mut d.zaps, dobj, name.as_bytes(), 0o644, 0, 0, 0, now)
                .map_err(|e| format!("create {}/{name}: {e}", dir_name(i)))?;
            let data = payload(i * t.per_dir + j, WALK_FILE_BYTES);
            z.write(&mut d.os, &mut d.zaps, f, 0, &data, 128 << 10, now)
                .map_err(|e| format!("write {}/{name}: {e}", dir_name(i)))?;
            // The daemon's write throttle, asked after every file as rzfsd does.
            libpool::throttle(&mut w, 64 << 20)?;
        }
    }
    libpool::export(w)?;
    let secs = t1.elapsed().as_secs_f64();
    Ok(json!({"files": t.files(), "dirs": t.dirs, "file_bytes": WALK_FILE_BYTES,
              "pool_create_secs": create_secs, "populate_secs": secs,
              "files_per_s": t.files() as f64 / secs, "vmhwm_kib": sys::self_vmhwm_kib()})
    .to_string())
}

/// Counts every entry under `root` (recursive readdir, `symlink_metadata` of each entry).
fn walk(root: &Path) -> Result<usize, String> {
    let mut stack = vec![root.to_path_buf()];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        for e in io(std::fs::read_dir(&d), &d)? {
            let p = io(e, &d)?.path();
            let m = io(std::fs::symlink_metadata(&p), &p)?;
            n += 1;
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    Ok(n)
}

/// One walk through a fresh `rzfsd` (read-only import) with cache limit `arc` (None: unset).
fn walk_once(c: &Ctx, dir: &Path, arc: Option<usize>, expect: usize) -> Result<Value, String> {
    let mnt = c.work.join("walk-mnt");
    let mut s = RzSession::start(&c.bin_dir, &c.work, "walk", arc, WALK_POOL, &mnt)?;
    s.import(dir, true)?;
    let left = sys::evict(&walk_images(dir))?;
    let before = s.hwm();
    let t0 = Instant::now();
    let n = walk(&mnt)?;
    let secs = t0.elapsed().as_secs_f64();
    let after = s.hwm();
    s.close()?;
    if n != expect {
        return Err(format!("walk found {n} entries, expected {expect}"));
    }
    let label = match arc {
        Some(a) => format!("RZFS_ARC_MAX={a} ({} MiB)", a >> 20),
        None => format!("RZFS_ARC_MAX unset (default {} MiB)", arc::DEFAULT_LIMIT_BYTES >> 20),
    };
    Ok(json!({"cache": label, "entries": n, "secs": secs, "entries_per_s": n as f64 / secs,
              "vmhwm_after_mount_kib": before, "vmhwm_kib": after, "resident_after_evict": left}))
}

/// Item 4: populate the sparse 2 TiB pool (child), then walk it with both cache settings.
fn walk_section(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let files = if c.full { 225_000 } else { 3_000 };
    let vdev: u64 = if c.full { 512 << 30 } else { 2 << 30 };
    let t = Tree::walk(files);
    let mut v = json!({"files": t.files(), "dirs": t.dirs, "vdevs": 4, "vdev_bytes": vdev,
                       "vdev_total_bytes": 4 * vdev, "layout": "raidz1 of 4 sparse files"});
    if let Some(r) = fuse_unavailable() {
        v["error"] = json!(r);
        return v;
    }
    let dir = c.work.join("walk");
    let r = walk_inner(c, &dir, vdev, t, &mut v, log);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = r {
        log(&format!("walk: error: {e}"));
        v["error"] = json!(e);
    }
    v
}

fn walk_inner(
    c: &Ctx,
    dir: &Path,
    vdev: u64,
    t: Tree,
    v: &mut Value,
    log: &mut dyn FnMut(&str),
) -> Result<(), String> {
    sparse_images(dir, vdev)?;
    let exe = c.self_exe.to_string_lossy().into_owned();
    let (d, n) = (dir.to_string_lossy().into_owned(), t.files().to_string());
    let out = sys::must(&[&exe, "populate", "--dir", &d, "--pool", WALK_POOL, "--files", &n], &[])?;
    let pop: Value = serde_json::from_str(out.trim()).map_err(|e| format!("populate output: {e}: {out}"))?;
    log(&format!("walk populate: {:.0} files/s", pop["files_per_s"].as_f64().unwrap_or(0.0)));
    v["populate"] = pop;
    v["allocated_bytes"] = json!(allocated(&walk_images(dir)));
    let mut runs = Vec::new();
    for arc in [Some(e2e::ARC_SMALL), None] {
        let r = walk_once(c, dir, arc, t.files() + t.dirs).unwrap_or_else(|e| json!({"error": e}));
        log(&format!("walk {arc:?}: {} entries/s, peak {} KiB", r["entries_per_s"], r["vmhwm_kib"]));
        runs.push(r);
    }
    v["runs"] = json!(runs);
    Ok(())
}

// ----- public entry points -----------------------------------------------------------------

/// The section's results: item 3 under "metadata", item 4 under "walk".
pub fn run(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let t0 = Instant::now();
    let metadata = metadata(c, log);
    let meta_secs = t0.elapsed().as_secs_f64();
    let walk = walk_section(c, log);
    json!({"metadata": metadata, "metadata_wall_secs": meta_secs, "walk": walk,
           "walk_wall_secs": t0.elapsed().as_secs_f64() - meta_secs,
           "arc_default_mib": arc::DEFAULT_LIMIT_BYTES >> 20})
}

/// This module's child subcommands of `rzfs-bench`; `None` if `cmd` is not one of them.
pub fn cli(cmd: &str, args: &[String]) -> Option<Result<String, String>> {
    if cmd != "populate" {
        return None;
    }
    let get = |f: &str| args.iter().position(|a| a == f).and_then(|i| args.get(i + 1)).cloned();
    let need = |f: &str| get(f).ok_or(format!("populate: missing {f}"));
    Some((|| {
        let dir = PathBuf::from(need("--dir")?);
        let pool = need("--pool")?;
        let files: usize = need("--files")?.parse().map_err(|_| "populate: --files is not a number")?;
        populate(&dir, &pool, files)
    })())
}

// ----- the report --------------------------------------------------------------------------

/// "12345 files/s (8.1 s)" or "not available" for a phase.
fn rate_cell(p: &Value, unit: &str) -> String {
    match (p["ops_per_s"].as_f64(), p["secs"].as_f64()) {
        (Some(r), Some(s)) => format!("{r:.0} {unit}/s ({s:.1} s)"),
        _ => "not available".into(),
    }
}

fn render_metadata(o: &mut String, m: &Value) {
    let _ = writeln!(
        o,
        "## Metadata: create, stat, readdir, unlink of {} small files\n\n\
         {} directories × {} files of {} bytes (non-zero data), one thread through the mount; each \
         file system on 4 zero-filled image files of {} MiB. stat and readdir are cold: unmount \
         (pool exported, daemon stopped), images evicted from the page cache, remount. Each phase \
         capped at {} s. Daemon peak RSS = VmHWM, maximum over the daemon processes of the run.\n",
        f0(&m["files"]),
        f0(&m["dirs"]),
        f0(&m["files_per_dir"]),
        f0(&m["file_bytes"]),
        f0(&m["image_mib"]),
        f0(&m["phase_cap_s"])
    );
    for p in m["phases"].as_array().into_iter().flatten() {
        let _ = writeln!(o, "- **{}**: {}", p["id"].as_str().unwrap_or(""), p["what"].as_str().unwrap_or(""));
    }
    let _ = writeln!(
        o,
        "\n| system | create | stat (cold) | readdir (cold) | unlink | daemon peak RSS | \
         image bytes cached after eviction (stat, readdir) |\n|---|---|---|---|---|---|---|"
    );
    for s in m["systems"].as_array().into_iter().flatten() {
        let ph = &s["phases"];
        let unit = |p: &str| if p == "readdir" { "entries" } else { "files" };
        let cells: Vec<String> = PHASES.iter().map(|(p, _)| rate_cell(&ph[*p], unit(p))).collect();
        let hwm = if s["id"] == "btrfs" { "n/a (kernel)".into() } else { mib(&s["vmhwm_kib"]) };
        let left = |p: &str| ph[p]["resident_after_evict"].as_u64().map_or("n/a".into(), |b| b.to_string());
        let label = s["label"].as_str().unwrap_or("");
        let _ = writeln!(
            o,
            "| {label} | {} | {hwm} | {}, {} |",
            cells.join(" | "),
            left("stat"),
            left("readdir")
        );
        if let Some(e) = s["error"].as_str() {
            let _ = writeln!(o, "| {label} | not available: {} | | | | | |", e.replace('|', "/"));
        }
    }
    let _ = writeln!(
        o,
        "\n| phase | rzfs / zfs-fuse (ops/s ratio) | rzfs / btrfs (ops/s ratio) |\n|---|---|---|"
    );
    let ratio = |x: &Value| x.as_f64().map_or_else(|| "not available".into(), |r| format!("{r:.2}×"));
    for (p, _) in PHASES {
        let r = &m["ratios"];
        let _ = writeln!(o, "| {p} | {} | {} |", ratio(&r["zfsfuse"][p]), ratio(&r["btrfs"][p]));
    }
    let _ = writeln!(o);
}

fn render_walk(o: &mut String, w: &Value, arc_default: &Value) {
    let total = w["vdev_total_bytes"].as_f64().unwrap_or(0.0);
    let _ = writeln!(
        o,
        "## Memory while walking {} files (rzfs FUSE mount)\n\n\
         Pool: {} of {} GiB each, {:.0} GiB = {:.3} TiB of vdevs in total ({:.0} GB); written by the \
         library in a child process; disk actually used by the sparse files: {} bytes ({}). \
         Walk: fresh rzfsd, read-only import, images evicted, then recursive readdir + \
         symlink_metadata() of every entry ({} files + {} directories). The default cache \
         (RZFS_ARC_MAX unset) is {} MiB, the same as the explicit setting.\n",
        f0(&w["files"]),
        w["layout"].as_str().unwrap_or(""),
        f0(&json!(w["vdev_bytes"].as_f64().map(|b| b / (1u64 << 30) as f64))),
        total / (1u64 << 30) as f64,
        total / (1u64 << 40) as f64,
        total / 1e9,
        f0(&w["allocated_bytes"]),
        mib(&json!(w["allocated_bytes"].as_f64().map(|b| b / 1024.0))),
        f0(&w["files"]),
        f0(&w["dirs"]),
        f0(arc_default)
    );
    if let Some(e) = w["error"].as_str() {
        let _ = writeln!(o, "not available: {e}\n");
    }
    let p = &w["populate"];
    if p.is_object() {
        let _ = writeln!(
            o,
            "Library create rate (populate, in-process, 1 KiB files, txg synced past 64 MiB dirty, \
             including the final export): {} files/s ({:.1} s; pool creation {:.2} s; peak RSS {}).\n",
            f0(&p["files_per_s"]),
            p["populate_secs"].as_f64().unwrap_or(0.0),
            p["pool_create_secs"].as_f64().unwrap_or(0.0),
            mib(&p["vmhwm_kib"])
        );
    }
    let _ = writeln!(
        o,
        "| cache | entries | walk | entries/s | rzfsd peak RSS after mount | rzfsd peak RSS after walk |\n\
         |---|---|---|---|---|---|"
    );
    for r in w["runs"].as_array().into_iter().flatten() {
        match r["error"].as_str() {
            Some(e) => {
                let _ = writeln!(
                    o,
                    "| {} | not available: {} | | | | |",
                    r["cache"].as_str().unwrap_or("?"),
                    e.replace('|', "/")
                );
            }
            None => {
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.1} s | {} | {} | {} |",
                    r["cache"].as_str().unwrap_or(""),
                    f0(&r["entries"]),
                    r["secs"].as_f64().unwrap_or(0.0),
                    f0(&r["entries_per_s"]),
                    mib(&r["vmhwm_after_mount_kib"]),
                    mib(&r["vmhwm_kib"])
                );
            }
        }
    }
    let _ = writeln!(o);
}

/// The section in RESULTS.md.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(o, "## Metadata and memory while walking\n\nnot available: {e}\n");
        return o;
    }
    render_metadata(&mut o, &v["metadata"]);
    render_walk(&mut o, &v["walk"], &v["arc_default_mib"]);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shapes_and_names() {
        assert_eq!(Tree::new(100_000, META_DIRS), Tree { dirs: 100, per_dir: 1000 });
        assert_eq!(Tree::new(2_000, META_DIRS).files(), 2_000);
        assert_eq!(Tree::walk(225_000), Tree { dirs: 225, per_dir: 1000 });
        assert_eq!(Tree::walk(3_000), Tree { dirs: 3, per_dir: 1000 });
        assert_eq!(Tree::new(5, 0), Tree { dirs: 1, per_dir: 5 });
        assert_eq!(dir_name(7), "d0007");
        assert_eq!(file_name(999), "f000999");
        assert!(dir_name(9) < dir_name(10), "names sort in creation order");
        let p = payload(12345, FILE_BYTES);
        assert_eq!(p.len(), FILE_BYTES);
        assert!(p.iter().all(|b| *b != 0));
        assert_ne!(p, payload(12346, FILE_BYTES));
    }

    #[test]
    fn phases_on_a_local_directory() {
        let root = std::env::temp_dir().join(format!("rzfs-meta-test-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let t = Tree::new(40, 4);
        let cap = Cap::start(Duration::from_secs(60));
        create_tree(&root, t, &cap).unwrap();
        stat_tree(&root, t, &cap).unwrap();
        assert_eq!(readdir_tree(&root, t, &cap).unwrap(), 40);
        assert_eq!(walk(&root).unwrap(), 44);
        unlink_tree(&root, t, &cap).unwrap();
        assert_eq!(walk(&root).unwrap(), 0);
        assert!(Cap::start(Duration::ZERO).check(1, 2).unwrap_err().contains("exceeded cap"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn ratio_per_phase_and_missing_figures() {
        let sys = |id: &str, c: f64| {
            let phases = json!({"create": {"ops_per_s": c}, "stat": {"ops_per_s": 10.0}});
            json!({"id": id, "phases": phases})
        };
        let rows = vec![sys("rzfs", 300.0), sys("zfsfuse", 100.0), json!({"id": "btrfs", "error": "x"})];
        let r = ratios(&rows);
        assert_eq!(r["zfsfuse"]["create"].as_f64(), Some(3.0));
        assert_eq!(r["zfsfuse"]["stat"].as_f64(), Some(1.0));
        assert!(r["zfsfuse"]["readdir"].is_null());
        assert!(r["btrfs"]["create"].is_null());
    }

    #[test]
    fn render_with_errors() {
        let rows = vec![
            json!({"id": "rzfs", "label": "rzfs", "vmhwm_kib": 2048,
                   "phases": {"create": {"ops_per_s": 1000.0, "secs": 2.0}}, "error": "stat: boom"}),
            json!({"id": "btrfs", "label": "btrfs", "error": "no btrfs"}),
        ];
        let phases: Vec<Value> = PHASES.iter().map(|(p, d)| json!({"id": p, "what": d})).collect();
        let v = json!({
            "metadata": {"files": 2000, "dirs": 100, "files_per_dir": 20, "file_bytes": 512, "image_mib": 128,
                         "phase_cap_s": 120, "systems": rows, "ratios": ratios(&rows),
                         "phases": phases},
            "walk": {"files": 3000, "dirs": 3, "vdev_bytes": 1u64 << 31, "vdev_total_bytes": 1u64 << 33,
                     "layout": "raidz1", "error": "no /dev/fuse"},
            "arc_default_mib": 64,
        });
        let md = render(&v);
        assert!(md.contains("## Metadata: create, stat, readdir, unlink of 2000 small files"));
        assert!(md.contains("1000 files/s (2.0 s)"));
        assert!(md.contains("not available: stat: boom"));
        assert!(md.contains("not available: no btrfs"));
        assert!(md.contains("2.0 MiB"));
        assert!(md.contains("## Memory while walking 3000 files"));
        assert!(md.contains("not available: no /dev/fuse"));
        assert!(render(&json!({"error": "skipped"})).contains("not available: skipped"));
    }
}
