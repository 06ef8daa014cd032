//! End-to-end reads: one big file of random bytes on a raidz1 pool of 3 file vdevs written by
//! zfs-fuse, read back by rzfs (in-process library, `rzdb -r`, FUSE through `rzfsd`), by
//! zfs-fuse through its own mount (the peer), and compared with the raw read rate of the
//! three backing files in the same run.
//!
//! Every timed read starts from a cold page cache for the images (see `sys::evict`; the
//! residency left after eviction is recorded per measurement) and, for the daemons, a freshly
//! started process, so no ARC carries over. The backing files are fully written (zero-filled
//! before `zpool create`), never sparse: a hole would read back as zeros without any I/O and
//! make the raw rate meaningless. The raw rate is measured before and after the pool reads;
//! ratios use their mean. zfs-fuse reads last, because its import is read-write and rewrites
//! labels and uberblocks.

use crate::kernels::Prng;
use crate::sys::{self, mbps};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const POOL: &str = "rzbench";
const FS: &str = "rzbench/fs";
const FILE: &str = "/big.bin";
const MIB: u64 = 1 << 20;
pub const ZFS_FUSE: &str = "/usr/sbin/zfs-fuse";
pub const ZPOOL: &str = "/usr/sbin/zpool";
pub const ZFS: &str = "/usr/sbin/zfs";
const ZFS_FUSE_SOCKET: &str = "/var/run/zfs/zfs_socket";
/// The bounded cache size of the memory runs (the brief's 64 MiB).
pub const ARC_SMALL: usize = 64 << 20;

/// What to build and where the tools are.
pub struct Cfg {
    pub file_mib: u64,
    pub work: PathBuf,
    pub bin_dir: PathBuf,
    pub self_exe: PathBuf,
}

impl Cfg {
    fn disks(&self) -> PathBuf {
        self.work.join("disks")
    }
    fn images(&self) -> Vec<PathBuf> {
        (0..3).map(|i| self.disks().join(format!("vdev{i}.img"))).collect()
    }
    /// Per-vdev size: raidz1 of 3 stores 1.5x the file; leave a quarter of slack and room
    /// for labels and metadata, never below OpenZFS's 64 MiB device minimum.
    pub fn disk_mib(&self) -> u64 {
        (self.file_mib / 2 + self.file_mib / 4 + 32).max(96)
    }
    fn bin(&self, name: &str) -> String {
        self.bin_dir.join(name).to_string_lossy().into_owned()
    }
}

/// A child process stopped (SIGTERM, then SIGKILL) when dropped, so an error path never
/// leaves a daemon behind.
pub struct Daemon(pub Option<Child>);

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
    pub fn alive(&mut self) -> bool {
        matches!(self.0.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
    pub fn stop(&mut self) {
        if let Some(mut c) = self.0.take() {
            sys::terminate(&mut c, 30);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

fn zfs_fuse_answers() -> bool {
    Path::new(ZFS_FUSE_SOCKET).exists() && sys::run(&[ZPOOL, "list"], &[]).is_ok_and(|o| o.ok)
}

/// Starts our own zfs-fuse (only one may run per machine: waits up to `wait_s` for another).
pub fn start_zfs_fuse(log: &Path, wait_s: u64) -> Result<Daemon, String> {
    if !Path::new(ZFS_FUSE).exists() {
        return Err(format!("{ZFS_FUSE} not installed"));
    }
    if !sys::wait_for(wait_s, || !zfs_fuse_answers()) {
        return Err("another zfs-fuse daemon is running (one per machine)".into());
    }
    std::fs::create_dir_all("/var/run/zfs").map_err(|e| e.to_string())?;
    let logf = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let errf = logf.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(ZFS_FUSE)
        .args(["--no-daemon", "--no-kstat-mount"])
        .stdin(Stdio::null())
        .stdout(logf)
        .stderr(errf)
        .spawn()
        .map_err(|e| format!("cannot start zfs-fuse: {e}"))?;
    let mut d = Daemon(Some(child));
    if !sys::wait_for(20, zfs_fuse_answers) || !d.alive() {
        return Err(format!("zfs-fuse did not come up; see {}", log.display()));
    }
    Ok(d)
}

/// Zero-fills the three images (so they are fully allocated, see the module comment).
fn make_images(cfg: &Cfg) -> Result<(), String> {
    zero_fill(&cfg.images(), cfg.disk_mib())
}

/// Writes `mib` MiB of zeros to each of `imgs` (creating their directory) and fsyncs.
pub fn zero_fill(imgs: &[PathBuf], mib: u64) -> Result<(), String> {
    let zeros = vec![0u8; MIB as usize];
    for img in imgs {
        if let Some(d) = img.parent() {
            std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
        }
        let mut f = std::fs::File::create(img).map_err(|e| format!("{}: {e}", img.display()))?;
        for _ in 0..mib {
            f.write_all(&zeros).map_err(|e| e.to_string())?;
        }
        f.sync_all().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Writes `mib` MiB of PRNG bytes to `path`, fsyncs; returns (MB/s, blake3 hex).
pub fn write_random(path: &Path, mib: u64) -> Result<(f64, String), String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = Prng::new(0x5EED_B16F);
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; MIB as usize];
    let t0 = Instant::now();
    for _ in 0..mib {
        r.fill(&mut buf);
        h.update(&buf);
        f.write_all(&buf).map_err(|e| e.to_string())?;
    }
    f.sync_all().map_err(|e| e.to_string())?;
    Ok((mbps(mib * MIB, t0.elapsed().as_secs_f64()), h.finalize().to_hex().to_string()))
}

/// Creates the pool with zfs-fuse and writes the big file; returns facts about it.
fn create_pool(cfg: &Cfg, wait_s: u64) -> Result<Value, String> {
    make_images(cfg)?;
    let mnt = cfg.work.join("mnt-zfsfuse");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let mut zd = start_zfs_fuse(&cfg.work.join("zfs-fuse-create.log"), wait_s)?;
    let imgs: Vec<String> = cfg.images().iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let m = mnt.to_string_lossy().into_owned();
    let mut argv = vec![ZPOOL, "create", "-o", "cachefile=none", "-m", &m, POOL, "raidz1"];
    argv.extend(imgs.iter().map(String::as_str));
    sys::must(&argv, &[])?;
    sys::must(&[ZFS, "create", "-o", "compression=off", "-o", "atime=off", FS], &[])?;
    let fsdir = mnt.join("fs");
    if !sys::wait_for(10, || fsdir.is_dir()) {
        return Err("zfs-fuse did not mount the new dataset".into());
    }
    let (wr, hash) = write_random(&fsdir.join(FILE.trim_start_matches('/')), cfg.file_mib)?;
    let props =
        sys::must(&[ZFS, "get", "-H", "-o", "property,value", "checksum,compression,recordsize", FS], &[])?;
    let version = sys::must(&[ZPOOL, "get", "version", POOL], &[])?;
    sys::must(&[ZPOOL, "export", POOL], &[])?;
    zd.stop();
    Ok(json!({
        "writer": "zfs-fuse 0.7 (Debian), pool created by the harness",
        "layout": "raidz1 of 3 file vdevs",
        "vdev_mib": cfg.disk_mib(), "file_mib": cfg.file_mib, "blake3": hash,
        "zfsfuse_write_mbps": wr,
        "props": props.split_whitespace().collect::<Vec<_>>().join(" "),
        "pool_version": version.lines().last().unwrap_or("").split_whitespace().nth(2).unwrap_or(""),
    }))
}

/// Reads a whole file in 1 MiB reads (what `cat`/`dd bs=1M` do); returns bytes.
pub fn read_all(p: &Path) -> Result<u64, String> {
    let mut f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut buf = vec![0u8; MIB as usize];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).map_err(|e| format!("{}: {e}", p.display()))?;
        if k == 0 {
            return Ok(n);
        }
        n += k as u64;
    }
}

pub fn result(
    id: &str,
    label: &str,
    bytes: u64,
    secs: f64,
    resident: Option<u64>,
    hwm: Option<u64>,
) -> Value {
    json!({"id": id, "label": label, "bytes": bytes, "secs": secs, "mbps": mbps(bytes, secs),
           "resident_after_evict": resident, "vmhwm_kib": hwm})
}

/// The three images read in parallel, cold: buffered 1 MiB reads (like `cat`, and like
/// rzfs's preads) or `dd iflag=direct bs=1M` (O_DIRECT, no page cache at all).
fn raw_read(cfg: &Cfg, direct: bool) -> Result<Value, String> {
    let imgs = cfg.images();
    let left = sys::evict(&imgs)?;
    let t0 = Instant::now();
    let total: Result<Vec<u64>, String> = std::thread::scope(|s| {
        let hs: Vec<_> =
            imgs.iter().map(|p| s.spawn(move || if direct { dd_direct(p) } else { read_all(p) })).collect();
        hs.into_iter().map(|h| h.join().unwrap_or(Err("reader panicked".into()))).collect()
    });
    let bytes: u64 = total?.iter().sum();
    let secs = t0.elapsed().as_secs_f64();
    let label = if direct {
        "raw: 3 backing files read in parallel, O_DIRECT (dd iflag=direct bs=1M)"
    } else {
        "raw: 3 backing files read in parallel, buffered (cat-like 1 MiB reads)"
    };
    Ok(result("raw", label, bytes, secs, left, None))
}

/// `dd if=P of=/dev/null bs=1M iflag=direct`; returns the file size on success.
pub fn dd_direct(p: &Path) -> Result<u64, String> {
    let ps = p.to_string_lossy();
    sys::must(&["dd", &format!("if={ps}"), "of=/dev/null", "bs=1M", "iflag=direct", "status=none"], &[])?;
    std::fs::metadata(p).map(|m| m.len()).map_err(|e| e.to_string())
}

/// Our own `copyout` subcommand in a fresh process (clean peak RSS).
fn inproc(cfg: &Cfg, arc: Option<usize>, hash: bool) -> Result<Value, String> {
    let left = sys::evict(&cfg.images())?;
    let exe = cfg.self_exe.to_string_lossy().into_owned();
    let d = cfg.disks().to_string_lossy().into_owned();
    let arcs = arc.map(|a| a.to_string());
    let mut argv = vec![exe.as_str(), "copyout", "--dir", &d, "--fs", FS, "--path", FILE];
    if let Some(a) = &arcs {
        argv.extend(["--arc-max", a.as_str()]);
    }
    if hash {
        argv.push("--hash");
    }
    let out = sys::must(&argv, &[])?;
    let mut v: Value = serde_json::from_str(out.trim()).map_err(|e| format!("copyout output: {e}: {out}"))?;
    v["resident_after_evict"] = json!(left);
    Ok(v)
}

/// `rzdb -e -p DISKS -r POOL/FS PATH /dev/null`, cold, peak RSS sampled.
fn rzdb(cfg: &Cfg, arc: Option<usize>) -> Result<Value, String> {
    let left = sys::evict(&cfg.images())?;
    let mut cmd = Command::new(cfg.bin("rzdb"));
    cmd.arg("-e").arg("-p").arg(cfg.disks()).args(["-r", FS, FILE, "/dev/null"]);
    if let Some(a) = arc {
        cmd.args(["--arc-max", &a.to_string()]);
    }
    let t0 = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run rzdb: {e}"))?;
    let (ok, secs, hwm, err) = sys::wait_sampling(child, t0)?;
    if !ok {
        return Err(format!("rzdb -r failed: {err}"));
    }
    let bytes = cfg.file_mib * MIB;
    let label = format!("rzdb -r (copy-out to /dev/null), cache {}", arc_label(arc));
    Ok(result("rzdb", &label, bytes, secs, left, Some(hwm)))
}

fn arc_label(arc: Option<usize>) -> String {
    match arc {
        Some(a) => format!("{} MiB", a >> 20),
        None => format!("default ({} MiB)", arc::DEFAULT_LIMIT_BYTES >> 20),
    }
}

/// Starts a fresh `rzfsd` from `bin_dir` on its own socket `sock` (never the system one, so
/// a benchmark cannot disturb another daemon), with extra environment `env`, logging to `log`.
pub fn start_rzfsd(bin_dir: &Path, sock: &Path, env: &[(&str, &str)], log: &Path) -> Result<Daemon, String> {
    let _ = std::fs::remove_file(sock);
    let logf = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let child = Command::new(bin_dir.join("rzfsd"))
        .arg("--socket")
        .arg(sock)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(logf.try_clone().map_err(|e| e.to_string())?)
        .stderr(logf)
        .spawn()
        .map_err(|e| format!("cannot start rzfsd: {e}"))?;
    let d = Daemon(Some(child));
    if !sys::wait_for(10, || std::os::unix::net::UnixStream::connect(sock).is_ok()) {
        return Err("rzfsd did not open its socket".into());
    }
    Ok(d)
}

/// Reads the big file through an rzfs FUSE mount served by a fresh `rzfsd`.
fn rzfs_fuse(cfg: &Cfg, arc: Option<usize>) -> Result<Value, String> {
    let sock = cfg.work.join("rzfsd.sock");
    let mnt = cfg.work.join("mnt-rzfs");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let socks = sock.to_string_lossy().into_owned();
    let arcs = arc.map(|a| a.to_string());
    let mut env: Vec<(&str, &str)> = vec![("RZFS_SOCKET", &socks)];
    if let Some(a) = &arcs {
        env.push(("RZFS_ARC_MAX", a));
    }
    let mut d = start_rzfsd(&cfg.bin_dir, &sock, &env, &cfg.work.join("rzfsd.log"))?;
    let disks = cfg.disks().to_string_lossy().into_owned();
    let m = mnt.to_string_lossy().into_owned();
    let (rzpool, rzfs) = (cfg.bin("rzpool"), cfg.bin("rzfs"));
    sys::must(&[&rzpool, "import", "-N", "-d", &disks, "-o", "readonly=on", POOL], &env)?;
    let r = fuse_read(cfg, &env, &rzfs, &m, &mut d, arc);
    let _ = sys::run(&[&rzfs, "unmount", FS], &env);
    if sys::is_mounted(&mnt) {
        let _ = sys::run(&["fusermount", "-u", "-z", &m], &[]);
    }
    let _ = sys::run(&[&rzpool, "export", POOL], &env);
    d.stop();
    r
}

fn fuse_read(
    cfg: &Cfg,
    env: &[(&str, &str)],
    rzfs: &str,
    m: &str,
    d: &mut Daemon,
    arc: Option<usize>,
) -> Result<Value, String> {
    sys::must(&[rzfs, "mount", FS, m], env)?;
    let file = Path::new(m).join(FILE.trim_start_matches('/'));
    if !sys::wait_for(10, || file.exists()) {
        return Err("rzfs mount: file not visible".into());
    }
    let left = sys::evict(&cfg.images())?;
    let t0 = Instant::now();
    let bytes = read_all(&file)?;
    let secs = t0.elapsed().as_secs_f64();
    let hwm = sys::vmhwm_kib(d.pid());
    let label = format!("rzfs FUSE mount (rzfsd), cache {}", arc_label(arc));
    Ok(result("fuse", &label, bytes, secs, left, hwm))
}

/// The peer: zfs-fuse imports the pool (read-write; it has no read-only import) and we read
/// the file through its FUSE mount.
fn zfsfuse_read(cfg: &Cfg, wait_s: u64) -> Result<Value, String> {
    let mut zd = start_zfs_fuse(&cfg.work.join("zfs-fuse-read.log"), wait_s)?;
    let disks = cfg.disks().to_string_lossy().into_owned();
    sys::must(&[ZPOOL, "import", "-d", &disks, POOL], &[])?;
    let file = cfg.work.join("mnt-zfsfuse/fs").join(FILE.trim_start_matches('/'));
    let r = (|| {
        if !sys::wait_for(10, || file.exists()) {
            return Err("zfs-fuse did not mount the dataset".to_string());
        }
        let left = sys::evict(&cfg.images())?;
        let t0 = Instant::now();
        let bytes = read_all(&file)?;
        let secs = t0.elapsed().as_secs_f64();
        let hwm = sys::vmhwm_kib(zd.pid());
        Ok(result("zfsfuse", "peer: zfs-fuse 0.7 through its FUSE mount", bytes, secs, left, hwm))
    })();
    let _ = sys::run(&[ZPOOL, "export", POOL], &[]);
    zd.stop();
    r
}

/// Runs one measurement `reps` times (each cold); keeps the fastest run and lists all
/// rates in `runs_mbps`. A failure becomes a "not available" row with the reason.
fn attempt(
    out: &mut Vec<Value>,
    id: &str,
    reps: usize,
    log: &mut dyn FnMut(&str),
    mut f: impl FnMut() -> Result<Value, String>,
) {
    let load = sys::loadavg();
    let mut best: Option<Value> = None;
    let mut best_rate = f64::NEG_INFINITY;
    let mut runs = Vec::new();
    let mut err = None;
    for _ in 0..reps.max(1) {
        match f() {
            Ok(v) => {
                let x = v["mbps"].as_f64().unwrap_or(0.0);
                runs.push(x);
                if x > best_rate {
                    best_rate = x;
                    best = Some(v);
                }
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let mut v = match (best, err) {
        (Some(b), None) => b,
        (_, Some(e)) => json!({"error": e}),
        (None, None) => json!({"error": "no run"}),
    };
    v["id"] = json!(id);
    v["loadavg"] = json!(load);
    v["runs_mbps"] = json!(runs);
    let what = match v.get("mbps") {
        Some(m) => format!("{:.0} MB/s (runs: {runs:.0?})", m.as_f64().unwrap_or(0.0)),
        None => v["error"].to_string(),
    };
    log(&format!("e2e {id}: {what}"));
    out.push(v);
}

/// The whole end-to-end section; each rzfs and zfs-fuse read runs `reps` times.
pub fn run(cfg: &Cfg, wait_s: u64, reps: usize, log: &mut dyn FnMut(&str)) -> Value {
    let t0 = Instant::now();
    let pool = match create_pool(cfg, wait_s) {
        Ok(p) => p,
        Err(e) => return json!({"error": format!("could not build the pool: {e}")}),
    };
    log(&format!("e2e pool written ({:.0} s)", t0.elapsed().as_secs_f64()));
    // The VM's host may cache the virtual disk, which the guest cannot drop: read every image
    // once (O_DIRECT, untimed) so all timed reads meet the same, warm, host-cache state.
    for img in cfg.images() {
        if let Err(e) = dd_direct(&img) {
            log(&format!("host-cache warm-up of {} failed: {e}", img.display()));
        }
    }
    let mut m = Vec::new();
    let l = log;
    attempt(&mut m, "raw_before", 1, l, || raw_read(cfg, false));
    attempt(&mut m, "raw_direct_before", 1, l, || raw_read(cfg, true));
    attempt(&mut m, "inproc", reps, l, || inproc(cfg, None, false));
    attempt(&mut m, "inproc_64m", reps, l, || inproc(cfg, Some(ARC_SMALL), false));
    attempt(&mut m, "rzdb", reps, l, || rzdb(cfg, None));
    attempt(&mut m, "rzdb_64m", reps, l, || rzdb(cfg, Some(ARC_SMALL)));
    attempt(&mut m, "fuse", reps, l, || rzfs_fuse(cfg, None));
    attempt(&mut m, "fuse_64m", reps, l, || rzfs_fuse(cfg, Some(ARC_SMALL)));
    attempt(&mut m, "raw_middle", 1, l, || raw_read(cfg, false));
    attempt(&mut m, "raw_direct_middle", 1, l, || raw_read(cfg, true));
    let verify = inproc(cfg, None, true);
    attempt(&mut m, "zfsfuse", reps, l, || zfsfuse_read(cfg, wait_s));
    if crate::btrfs::unavailable().is_none() {
        attempt(&mut m, "btrfs", 1, l, || crate::btrfs::run(cfg));
    }
    attempt(&mut m, "raw_after", 1, l, || raw_read(cfg, false));
    attempt(&mut m, "raw_direct_after", 1, l, || raw_read(cfg, true));
    let verified = match &verify {
        Ok(v) => json!({"ok": v["blake3"] == pool["blake3"], "read_blake3": v["blake3"]}),
        Err(e) => json!({"ok": false, "error": e}),
    };
    finish(pool, m, verified)
}

/// Mean rate of the measurements `ids` that succeeded.
fn mean_rate(m: &[Value], ids: &[&str]) -> Option<f64> {
    let v: Vec<f64> = ids
        .iter()
        .filter_map(|id| m.iter().find(|x| x["id"] == *id).and_then(|x| x["mbps"].as_f64()))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Adds ratios to both raw rates (each the mean of before, middle and after) and the key figures:
/// the headline ratio divides by the faster of the two raw rates (the stricter ceiling).
fn finish(pool: Value, mut m: Vec<Value>, verified: Value) -> Value {
    let raw = mean_rate(&m, &["raw_before", "raw_middle", "raw_after"]);
    let direct = mean_rate(&m, &["raw_direct_before", "raw_direct_middle", "raw_direct_after"]);
    for v in m.iter_mut() {
        if let Some(x) = v["mbps"].as_f64() {
            v["ratio_to_raw"] = json!(raw.map(|r| x / r));
            v["ratio_to_raw_direct"] = json!(direct.map(|r| x / r));
        }
    }
    let ceiling = match (raw, direct) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let key = |id: &str| {
        let x = mean_rate(&m, &[id]);
        json!({"mbps": x, "raw_mbps": raw, "raw_direct_mbps": direct, "ceiling_mbps": ceiling,
               "ratio_buffered": x.zip(raw).map(|(a, b)| a / b),
               "ratio_direct": x.zip(direct).map(|(a, b)| a / b),
               "ratio": x.zip(ceiling).map(|(a, b)| a / b)})
    };
    let (key_rzdb, key_inproc) = (key("rzdb"), key("inproc"));
    json!({
        "pool": pool, "raw_mbps_mean": raw, "raw_direct_mbps_mean": direct,
        "measurements": m, "verify": verified,
        "cache_defeat": "drop_caches is refused in this sandbox; before every timed read: sync, then per-file posix_fadvise(POSIX_FADV_DONTNEED) via `dd if=IMG iflag=nocache count=0`, verified with fincore (column \"resident after eviction\"); daemons restarted per run; raw rate measured both buffered (cat-like 1 MiB reads, the path rzfs uses) and with O_DIRECT (`dd iflag=direct bs=1M`)",
        "key_rzdb": key_rzdb, "key_inproc": key_inproc,
    })
}
