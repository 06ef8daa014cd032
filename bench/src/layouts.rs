//! Issue 4, item 2: sequential 1 MiB write and read and 4 KiB random read/write IOPS, per
//! pool layout (single, mirror of 2, raidz1 of 4, raidz2 of 6 file vdevs), for
//!
//! - raw: the backing files themselves (the ceiling every ratio divides by);
//! - rzfs through the library in this machine's process (`libwrite`/`libiops` children: pool →
//!   DSL → DMU objset → ZPL, no daemon, no FUSE);
//! - rzfs through its FUSE mount (`rzfsd`);
//! - zfs-fuse with the same layout (the userspace peer);
//! - Linux btrfs on loop devices over the same files, matching profile (single/dup, raid1,
//!   raid5, raid6).
//!
//! Everything runs on the *same* image files one system after the other, in the same run, so
//! the ratios compare like with like. The images are written in full first (the raw write
//! measurement itself), so no system ever reads a hole. Reads and IOPS start cold: the images
//! are evicted from the page cache (`sys::evict`, residency verified with fincore) and daemons
//! are restarted (no ARC carries over). Writes include their final fsync / txg sync.
//!
//! Random IOPS are measured at queue depth 1 by one thread (one request in flight, like a
//! single-threaded application): raw picks a random file and 4 KiB-aligned offset per
//! request, the filesystems a random 4 KiB-aligned offset in one file of `iops_mib`. Writes end
//! with fsync, inside the timing. On ZFS a 4 KiB write into a 128 KiB record rewrites the
//! record (copy-on-write), which is the real cost and is what this measures.

use crate::e2e::{self, ZFS, ZPOOL};
use crate::kernels::Prng;
use crate::libpool::{self, Layout};
use crate::report::mib;
use crate::sys::{self, mbps};
use crate::Ctx;
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const POOL: &str = "rzlay";
const BIG: &str = "big.bin";
const SMALL: &str = "iops.bin";
const LAYOUTS: [Layout; 4] = [Layout::Single, Layout::Mirror(2), Layout::Raidz(1, 4), Layout::Raidz(2, 6)];

/// Sizes of one run.
#[derive(Clone, Copy)]
struct Sizes {
    /// The sequential file.
    data_mib: u64,
    /// The file the random I/O goes to.
    iops_mib: u64,
    /// Requests per IOPS measurement (fewer if `iops_cap` runs out first).
    iops_ops: u64,
    iops_cap: Duration,
}

impl Sizes {
    fn of(full: bool) -> Sizes {
        if full {
            Sizes { data_mib: 4096, iops_mib: 512, iops_ops: 20_000, iops_cap: Duration::from_secs(10) }
        } else {
            Sizes { data_mib: 48, iops_mib: 16, iops_ops: 300, iops_cap: Duration::from_secs(5) }
        }
    }

    /// Per-image size: the data times the layout's expansion, spread over its disks, plus a
    /// quarter of slack and 256 MiB for metadata (btrfs needs at least 128 MiB per device).
    fn disk_mib(self, l: Layout) -> u64 {
        let stored = (self.data_mib + self.iops_mib) as f64 * l.expansion() / l.disks() as f64;
        (stored * 1.25) as u64 + 256
    }
}

/// The images of one layout, the mount point and the work directory.
struct Rig<'a> {
    c: &'a Ctx,
    l: Layout,
    s: Sizes,
    dir: PathBuf,
    imgs: Vec<PathBuf>,
    mnt: PathBuf,
}

impl Rig<'_> {
    fn evict(&self) -> Result<Option<u64>, String> {
        sys::evict(&self.imgs)
    }
    fn mnt_s(&self) -> String {
        self.mnt.to_string_lossy().into_owned()
    }
    fn dir_s(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Generic file I/O (raw files and mounted filesystems)

/// Writes `mib` MiB of PRNG bytes to `path` in 1 MiB writes and fsyncs. Returns seconds.
pub(crate) fn write_file(path: &Path, mib: u64, seed: u64) -> Result<f64, String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = Prng::new(seed);
    let mut buf = vec![0u8; MIB as usize];
    let t0 = Instant::now();
    for _ in 0..mib {
        r.fill(&mut buf);
        f.write_all(&buf).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    f.sync_all().map_err(|e| format!("fsync {}: {e}", path.display()))?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Reads `files` in parallel, one thread each, 1 MiB reads; returns (bytes, seconds).
fn read_files(files: &[PathBuf]) -> Result<(u64, f64), String> {
    let t0 = Instant::now();
    let all: Result<Vec<u64>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = files.iter().map(|p| s.spawn(move || e2e::read_all(p))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or(Err("reader panicked".into()))).collect()
    });
    Ok((all?.iter().sum(), t0.elapsed().as_secs_f64()))
}

/// QD1 random 4 KiB I/O over `files` (each at least `len` bytes): up to `ops` requests or
/// until `cap` has passed; writes are followed by fsync of every file, inside the timing.
/// Returns (requests done, seconds).
fn random_io(
    files: &[PathBuf],
    len: u64,
    write: bool,
    ops: u64,
    cap: Duration,
) -> Result<(u64, f64), String> {
    let mut fs = Vec::new();
    for p in files {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        fs.push(f);
    }
    let blocks = (len / 4096).max(1);
    let mut r = Prng::new(0x10_4B1D ^ u64::from(write));
    let mut buf = vec![0u8; 4096];
    r.fill(&mut buf);
    let t0 = Instant::now();
    let mut done = 0;
    while done < ops && t0.elapsed() < cap {
        let f = &fs[(r.next_u64() % fs.len() as u64) as usize];
        let off = (r.next_u64() % blocks) * 4096;
        if write {
            buf[..8].copy_from_slice(&done.to_le_bytes());
            f.write_all_at(&buf, off).map_err(|e| format!("write at {off}: {e}"))?;
        } else {
            f.read_exact_at(&mut buf, off).map_err(|e| format!("read at {off}: {e}"))?;
        }
        done += 1;
    }
    if write {
        for f in &fs {
            f.sync_all().map_err(|e| format!("fsync: {e}"))?;
        }
    }
    Ok((done, t0.elapsed().as_secs_f64()))
}

pub(crate) fn rate_row(what: &str, bytes: u64, secs: f64, resident: Option<u64>) -> Value {
    json!({"what": what, "bytes": bytes, "secs": secs, "mbps": mbps(bytes, secs),
           "resident_after_evict": resident, "loadavg": sys::loadavg()})
}

pub(crate) fn iops_row(what: &str, ops: u64, secs: f64, resident: Option<u64>) -> Value {
    json!({"what": what, "ops": ops, "secs": secs, "iops": if secs > 0.0 { ops as f64 / secs } else { 0.0 },
           "resident_after_evict": resident, "loadavg": sys::loadavg()})
}

/// Cold sequential read and cold random read/write IOPS of the files of a mounted
/// filesystem; `hwm` samples the daemon's peak RSS afterwards.
fn fs_reads(r: &Rig, big: &Path, small: &Path, out: &mut Value) -> Result<(), String> {
    let left = r.evict()?;
    let (b, secs) = read_files(&[big.to_path_buf()])?;
    if b != r.s.data_mib * MIB {
        return Err(format!("read back {b} bytes, wrote {}", r.s.data_mib * MIB));
    }
    out["seq_read"] = rate_row("sequential 1 MiB read, cold", b, secs, left);
    let len = r.s.iops_mib * MIB;
    let left = r.evict()?;
    let (n, secs) = random_io(&[small.to_path_buf()], len, false, r.s.iops_ops, r.s.iops_cap)?;
    out["rand_read"] = iops_row("random 4 KiB read, QD1, cold", n, secs, left);
    let left = r.evict()?;
    let (n, secs) = random_io(&[small.to_path_buf()], len, true, r.s.iops_ops, r.s.iops_cap)?;
    out["rand_write"] = iops_row("random 4 KiB write, QD1, then fsync", n, secs, left);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Raw backing files

fn raw(r: &Rig) -> Result<Value, String> {
    let mib = r.s.disk_mib(r.l);
    let t0 = Instant::now();
    let w: Result<Vec<f64>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = r
            .imgs
            .iter()
            .enumerate()
            .map(|(i, p)| s.spawn(move || write_file(p, mib, 0xD15C + i as u64)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(Err("writer panicked".into()))).collect()
    });
    w?;
    let secs = t0.elapsed().as_secs_f64();
    let total = mib * MIB * r.imgs.len() as u64;
    let mut v =
        json!({"system": "raw", "label": format!("raw: the {} backing files in parallel", r.imgs.len())});
    v["seq_write"] = rate_row("1 MiB writes to every file in parallel, then fsync", total, secs, None);
    v["seq_read"] = raw_read(r)?;
    let len = mib * MIB;
    let left = r.evict()?;
    let (n, secs) = random_io(&r.imgs, len, false, r.s.iops_ops, r.s.iops_cap)?;
    v["rand_read"] = iops_row("random 4 KiB read over the files, QD1, cold", n, secs, left);
    let left = r.evict()?;
    let (n, secs) = random_io(&r.imgs, len, true, r.s.iops_ops, r.s.iops_cap)?;
    v["rand_write"] = iops_row("random 4 KiB write over the files, QD1, then fsync", n, secs, left);
    Ok(v)
}

fn raw_read(r: &Rig) -> Result<Value, String> {
    let left = r.evict()?;
    let (b, secs) = read_files(&r.imgs)?;
    Ok(rate_row("1 MiB reads of every file in parallel, cold", b, secs, left))
}

// ---------------------------------------------------------------------------------------------
// rzfs through the library (child processes)

fn child(r: &Rig, args: &[&str]) -> Result<Value, String> {
    let exe = r.c.self_exe.to_string_lossy().into_owned();
    let mut argv = vec![exe.as_str()];
    argv.extend_from_slice(args);
    let t0 = Instant::now();
    let ch = std::process::Command::new(&exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let out = ch.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", argv.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    let s = String::from_utf8_lossy(&out.stdout);
    let mut v: Value = serde_json::from_str(s.trim()).map_err(|e| format!("child output {s}: {e}"))?;
    v["child_wall_s"] = json!(t0.elapsed().as_secs_f64());
    Ok(v)
}

fn library(r: &Rig) -> Result<Value, String> {
    let (d, l) = (r.dir_s(), r.l.name());
    let (mib, imib) = (r.s.data_mib.to_string(), r.s.iops_mib.to_string());
    let w = child(r, &["libwrite", "--dir", &d, "--layout", &l, "--mib", &mib, "--iops-mib", &imib])?;
    let mut v = json!({"system": "library", "label": "rzfs, library in process (DMU-level API, no FUSE)"});
    let bytes = r.s.data_mib * MIB;
    v["seq_write"] = rate_row(
        "1 MiB ZPL writes, 64 MiB dirty limit, final txg sync",
        bytes,
        w["secs"].as_f64().unwrap_or(0.0),
        None,
    );
    v["seq_write"]["vmhwm_kib"] = w["vmhwm_kib"].clone();
    let left = r.evict()?;
    let path = format!("/{BIG}");
    let c = child(r, &["copyout", "--dir", &d, "--fs", POOL, "--path", &path])?;
    if c["bytes"].as_u64() != Some(bytes) {
        return Err(format!("library read {} bytes, wrote {bytes}", c["bytes"]));
    }
    v["seq_read"] =
        rate_row("1 MiB reads, cold (import included)", bytes, c["secs"].as_f64().unwrap_or(0.0), left);
    v["seq_read"]["vmhwm_kib"] = c["vmhwm_kib"].clone();
    let (ops, cap) = (r.s.iops_ops.to_string(), r.s.iops_cap.as_secs().to_string());
    for (key, mode, what) in [
        ("rand_read", "read", "random 4 KiB read, QD1, cold (after import)"),
        ("rand_write", "write", "random 4 KiB write, QD1, then txg sync"),
    ] {
        let left = r.evict()?;
        let x = child(r, &["libiops", "--dir", &d, "--mode", mode, "--ops", &ops, "--cap", &cap])?;
        let (n, secs) = (x["ops"].as_u64().unwrap_or(0), x["secs"].as_f64().unwrap_or(0.0));
        v[key] = iops_row(what, n, secs, left);
    }
    Ok(v)
}

/// `libwrite`: create the pool on the images, write the big file (timed, with the final txg
/// sync) and the IOPS file (untimed), export.
fn cmd_libwrite(a: &Args) -> Result<String, String> {
    let l = Layout::parse(&a.need("--layout")?).ok_or("bad --layout")?;
    let dir = PathBuf::from(a.need("--dir")?);
    let imgs = images(&dir, l);
    let mib: u64 = a.num("--mib")?;
    let imib: u64 = a.num("--iops-mib")?;
    let mut w = libpool::create(POOL, l, &imgs, arc::DEFAULT_LIMIT_BYTES)?;
    let (ds, mut z) = libpool::open_root(&mut w)?;
    let mut rng = Prng::new(0xB16);
    let mut buf = vec![0u8; MIB as usize];
    let mut t0 = Instant::now();
    let mut secs = 0.0;
    for (name, n) in [(BIG, mib), (SMALL, imib)] {
        z.txg = w.txg;
        let d = w.dataset(ds).ok_or("root dataset closed")?;
        let obj = z.create(&mut d.os, &mut d.zaps, z.root(), name.as_bytes(), 0o644, 0, 0, 0, libpool::now());
        let obj = obj.map_err(|e| e.to_string())?;
        for i in 0..n {
            rng.fill(&mut buf);
            z.txg = w.txg;
            let d = w.dataset(ds).ok_or("root dataset closed")?;
            z.write(&mut d.os, &mut d.zaps, obj, i * MIB, &buf, 128 << 10, libpool::now())
                .map_err(|e| format!("write at {}: {e}", i * MIB))?;
            libpool::throttle(&mut w, 64 << 20)?;
        }
        w.sync().map_err(|e| e.to_string())?;
        if name == BIG {
            secs = t0.elapsed().as_secs_f64();
            t0 = Instant::now();
        }
    }
    let _ = t0;
    libpool::export(w)?;
    Ok(json!({"secs": secs, "vmhwm_kib": sys::self_vmhwm_kib()}).to_string())
}

/// `libiops`: import, then QD1 random 4 KiB reads (read-only import) or writes (read-write
/// import, ending with a txg sync) in the IOPS file.
fn cmd_libiops(a: &Args) -> Result<String, String> {
    let dir = PathBuf::from(a.need("--dir")?);
    let ops: u64 = a.num("--ops")?;
    let cap = Duration::from_secs(a.num("--cap")?);
    let write = a.need("--mode")? == "write";
    let mut rng = Prng::new(0x10_4B1D ^ u64::from(write));
    let mut buf = vec![0u8; 4096];
    rng.fill(&mut buf);
    let mut done = 0u64;
    let (t0, secs);
    if write {
        let mut w = libpool::import_rw(&dir, POOL, arc::DEFAULT_LIMIT_BYTES)?;
        let (ds, mut z) = libpool::open_root(&mut w)?;
        let d = w.dataset(ds).ok_or("root dataset closed")?;
        let obj = z.lookup(&d.os, &mut d.zaps, z.root(), SMALL.as_bytes()).map_err(|e| e.to_string())?;
        let obj = obj.ok_or("no IOPS file")?;
        let blocks = z.getattr(&d.os, obj).map_err(|e| e.to_string())?.size / 4096;
        t0 = Instant::now();
        while done < ops && t0.elapsed() < cap {
            let off = (rng.next_u64() % blocks.max(1)) * 4096;
            buf[..8].copy_from_slice(&done.to_le_bytes());
            z.txg = w.txg;
            let d = w.dataset(ds).ok_or("root dataset closed")?;
            z.write(&mut d.os, &mut d.zaps, obj, off, &buf, 128 << 10, libpool::now())
                .map_err(|e| format!("write at {off}: {e}"))?;
            libpool::throttle(&mut w, 64 << 20)?;
            done += 1;
        }
        w.sync().map_err(|e| e.to_string())?;
        secs = t0.elapsed().as_secs_f64();
        libpool::export(w)?;
    } else {
        let p = libpool::import(&dir, POOL, true, arc::DEFAULT_LIMIT_BYTES)?;
        let dsl = p.dsl();
        let fs = dsl.find(POOL).map_err(|e| e.to_string())?;
        let z =
            zpl::Zpl::open(dsl.open_objset(&fs).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        let obj = z.resolve(&format!("/{SMALL}")).map_err(|e| e.to_string())?;
        let size = z.getattr(obj).map_err(|e| e.to_string())?.size;
        let dn = z.file_dnode(obj).map_err(|e| e.to_string())?;
        t0 = Instant::now();
        while done < ops && t0.elapsed() < cap {
            let off = (rng.next_u64() % (size / 4096).max(1)) * 4096;
            let d = z.read_with(&dn, size, off, 4096).map_err(|e| format!("read at {off}: {e}"))?;
            std::hint::black_box(&d);
            done += 1;
        }
        secs = t0.elapsed().as_secs_f64();
    }
    Ok(json!({"ops": done, "secs": secs, "vmhwm_kib": sys::self_vmhwm_kib()}).to_string())
}

// ---------------------------------------------------------------------------------------------
// rzfs through FUSE

fn rzfs_fuse(r: &Rig) -> Result<Value, String> {
    let sock = r.dir.join("rzfsd.sock");
    let socks = sock.to_string_lossy().into_owned();
    let env = [("RZFS_SOCKET", socks.as_str())];
    let log = r.dir.join("rzfsd.log");
    let (rzpool, rzfs, m) = (r.c.bin("rzpool"), r.c.bin("rzfs"), r.mnt_s());
    let mut v = json!({"system": "fuse", "label": "rzfs FUSE mount (rzfsd)"});
    {
        let mut d = e2e::start_rzfsd(&r.c.bin_dir, &sock, &env, &log)?;
        let mut argv = vec![rzpool.as_str(), "create", "-f", "-o", "ashift=12", "-O", "compression=off"];
        argv.extend(["-O", "atime=off", "-m", &m, POOL]);
        let vd = r.l.vdev_args(&r.imgs);
        argv.extend(vd.iter().map(String::as_str));
        sys::must(&argv, &env)?;
        let secs = write_file(&r.mnt.join(BIG), r.s.data_mib, 0xF05E)?;
        v["seq_write"] = rate_row("1 MiB writes, then fsync", r.s.data_mib * MIB, secs, None);
        v["seq_write"]["vmhwm_kib"] = json!(sys::vmhwm_kib(d.pid()));
        write_file(&r.mnt.join(SMALL), r.s.iops_mib, 0x5A11)?;
        sys::must(&[&rzpool, "export", POOL], &env)?;
        d.stop();
    }
    let mut d = e2e::start_rzfsd(&r.c.bin_dir, &sock, &env, &log)?;
    let res = (|| {
        sys::must(&[&rzpool, "import", "-N", "-d", &r.dir_s(), POOL], &env)?;
        sys::must(&[&rzfs, "mount", POOL, &m], &env)?;
        fs_reads(r, &r.mnt.join(BIG), &r.mnt.join(SMALL), &mut v)?;
        v["seq_read"]["vmhwm_kib"] = json!(sys::vmhwm_kib(d.pid()));
        sys::must(&[&rzpool, "export", POOL], &env).map(|_| ())
    })();
    if sys::is_mounted(&r.mnt) {
        let _ = sys::run(&["fusermount", "-u", "-z", &m], &[]);
    }
    d.stop();
    res.map(|_| v)
}

// ---------------------------------------------------------------------------------------------
// zfs-fuse, the userspace peer

fn zfs_fuse(r: &Rig) -> Result<Value, String> {
    let m = r.mnt_s();
    let mut v = json!({"system": "zfsfuse", "label": "peer: zfs-fuse 0.7 through its FUSE mount"});
    {
        let mut zd = e2e::start_zfs_fuse(&r.dir.join("zfs-fuse.log"), r.c.wait_s)?;
        let mut argv = vec![ZPOOL, "create", "-f", "-o", "cachefile=none", "-m", &m, POOL];
        let vd = r.l.vdev_args(&r.imgs);
        argv.extend(vd.iter().map(String::as_str));
        sys::must(&argv, &[])?;
        let r2 = (|| {
            sys::must(&[ZFS, "set", "compression=off", POOL], &[])?;
            sys::must(&[ZFS, "set", "atime=off", POOL], &[])?;
            let secs = write_file(&r.mnt.join(BIG), r.s.data_mib, 0xF05E)?;
            v["seq_write"] = rate_row("1 MiB writes, then fsync", r.s.data_mib * MIB, secs, None);
            v["seq_write"]["vmhwm_kib"] = json!(sys::vmhwm_kib(zd.pid()));
            write_file(&r.mnt.join(SMALL), r.s.iops_mib, 0x5A11).map(|_| ())
        })();
        let _ = sys::run(&[ZPOOL, "export", POOL], &[]);
        zd.stop();
        r2?;
    }
    let mut zd = e2e::start_zfs_fuse(&r.dir.join("zfs-fuse.log"), r.c.wait_s)?;
    let res = (|| {
        sys::must(&[ZPOOL, "import", "-d", &r.dir_s(), POOL], &[])?;
        if !sys::wait_for(10, || r.mnt.join(BIG).exists()) {
            return Err("zfs-fuse did not mount the pool".to_string());
        }
        fs_reads(r, &r.mnt.join(BIG), &r.mnt.join(SMALL), &mut v)?;
        v["seq_read"]["vmhwm_kib"] = json!(sys::vmhwm_kib(zd.pid()));
        Ok(())
    })();
    let _ = sys::run(&[ZPOOL, "export", POOL], &[]);
    zd.stop();
    res.map(|_| v)
}

// ---------------------------------------------------------------------------------------------
// btrfs, the kernel peer

/// mkfs.btrfs profiles matching a layout: (data, metadata).
pub(crate) fn btrfs_profile(l: Layout) -> (&'static str, &'static str) {
    match l {
        // One device: data single, metadata dup (btrfs's default; ZFS also keeps two copies of
        // its metadata).
        Layout::Single => ("single", "dup"),
        Layout::Mirror(_) => ("raid1", "raid1"),
        Layout::Raidz(1, _) => ("raid5", "raid1"),
        Layout::Raidz(2, _) => ("raid6", "raid1c3"),
        Layout::Raidz(..) => ("raid6", "raid1c4"),
    }
}

fn btrfs(r: &Rig) -> Result<Value, String> {
    if let Some(why) = crate::btrfs::unavailable() {
        return Err(why);
    }
    let mut lp = crate::btrfs::Loops { devs: Vec::new(), mnt: r.mnt.clone() };
    for img in &r.imgs {
        let d = sys::must(&["losetup", "-f", "--show", &img.to_string_lossy()], &[])?;
        lp.devs.push(d.trim().to_string());
    }
    let (dp, mp) = btrfs_profile(r.l);
    let mut mk = vec!["mkfs.btrfs", "-f", "-q", "-d", dp, "-m", mp];
    mk.extend(lp.devs.iter().map(String::as_str));
    sys::must(&mk, &[])?;
    let devs: Vec<String> = lp.devs.iter().map(|d| format!("device={d}")).collect();
    let opts = format!("noatime,{}", devs.join(","));
    let m = r.mnt_s();
    sys::must(&["mount", "-t", "btrfs", "-o", &opts, &lp.devs[0], &m], &[])?;
    let label = format!("peer: Linux btrfs (data {dp}, metadata {mp}) on {} loop devices", lp.devs.len());
    let mut v = json!({"system": "btrfs", "label": label});
    let secs = write_file(&r.mnt.join(BIG), r.s.data_mib, 0xF05E)?;
    v["seq_write"] = rate_row("1 MiB writes, then fsync", r.s.data_mib * MIB, secs, None);
    write_file(&r.mnt.join(SMALL), r.s.iops_mib, 0x5A11)?;
    // A remount drops btrfs's own caches; the loop devices' backing files are evicted per read.
    sys::must(&["umount", &m], &[])?;
    sys::must(&["mount", "-t", "btrfs", "-o", &opts, &lp.devs[0], &m], &[])?;
    fs_reads(r, &r.mnt.join(BIG), &r.mnt.join(SMALL), &mut v)?;
    drop(lp);
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// The section

pub(crate) fn images(dir: &Path, l: Layout) -> Vec<PathBuf> {
    (0..l.disks()).map(|i| dir.join(format!("d{i}.img"))).collect()
}

/// Runs `f`; a failure becomes {"system": id, "error": ...} so the other systems still run.
fn attempt(
    out: &mut Vec<Value>,
    id: &str,
    log: &mut dyn FnMut(&str),
    f: impl FnOnce() -> Result<Value, String>,
) {
    let t0 = Instant::now();
    let v = f().unwrap_or_else(|e| json!({"system": id, "error": e}));
    let brief = match (&v["seq_write"]["mbps"], &v["seq_read"]["mbps"], &v["error"]) {
        (_, _, Value::String(e)) => format!("error: {e}"),
        (w, r, _) => format!(
            "write {:.0} MB/s, read {:.0} MB/s, rand read {:.0} IOPS, rand write {:.0} IOPS",
            w.as_f64().unwrap_or(0.0),
            r.as_f64().unwrap_or(0.0),
            v["rand_read"]["iops"].as_f64().unwrap_or(0.0),
            v["rand_write"]["iops"].as_f64().unwrap_or(0.0)
        ),
    };
    log(&format!("layouts {id}: {brief} ({:.0} s)", t0.elapsed().as_secs_f64()));
    out.push(v);
}

fn one_layout(c: &Ctx, l: Layout, s: Sizes, log: &mut dyn FnMut(&str)) -> Value {
    let dir = c.work.join(format!("lay-{}", l.name()));
    let r = Rig { c, l, s, imgs: images(&dir, l), mnt: dir.join("mnt"), dir };
    if let Err(e) = std::fs::create_dir_all(&r.mnt) {
        return json!({"layout": l.name(), "error": e.to_string()});
    }
    let mut rows = Vec::new();
    attempt(&mut rows, "raw", log, || raw(&r));
    attempt(&mut rows, "library", log, || library(&r));
    attempt(&mut rows, "fuse", log, || rzfs_fuse(&r));
    attempt(&mut rows, "zfsfuse", log, || zfs_fuse(&r));
    attempt(&mut rows, "btrfs", log, || btrfs(&r));
    let raw_after = raw_read(&r).unwrap_or_else(|e| json!({"error": e}));
    let _ = std::fs::remove_dir_all(&r.dir);
    ratios(&mut rows, &raw_after);
    json!({"layout": l.name(), "label": l.label(), "disk_mib": s.disk_mib(l), "rows": rows,
           "raw_read_after": raw_after})
}

/// Each row's rates divided by raw's (raw read: the mean of before and after).
pub(crate) fn ratios(rows: &mut [Value], raw_after: &Value) {
    let Some(raw) = rows.iter().find(|v| v["system"] == "raw" && v.get("error").is_none()).cloned() else {
        return;
    };
    let rr: Vec<f64> =
        [&raw["seq_read"]["mbps"], &raw_after["mbps"]].iter().filter_map(|v| v.as_f64()).collect();
    let raw_read = (!rr.is_empty()).then(|| rr.iter().sum::<f64>() / rr.len() as f64);
    for v in rows.iter_mut() {
        for (k, base) in [
            ("seq_write", raw["seq_write"]["mbps"].as_f64()),
            ("seq_read", raw_read),
            ("rand_read", raw["rand_read"]["iops"].as_f64()),
            ("rand_write", raw["rand_write"]["iops"].as_f64()),
        ] {
            let x = v[k]["mbps"].as_f64().or_else(|| v[k]["iops"].as_f64());
            if let (Some(x), Some(b)) = (x, base) {
                v[k]["ratio_to_raw"] = json!(x / b);
            }
        }
    }
}

/// The section: every layout in turn.
pub fn run(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let s = Sizes::of(c.full);
    let layouts: Vec<Value> = LAYOUTS.iter().map(|&l| one_layout(c, l, s, log)).collect();
    json!({"data_mib": s.data_mib, "iops_mib": s.iops_mib, "iops_ops": s.iops_ops,
           "iops_cap_s": s.iops_cap.as_secs(), "layouts": layouts})
}

// ---------------------------------------------------------------------------------------------
// Child subcommands

struct Args<'a>(&'a [String]);

impl Args<'_> {
    fn need(&self, f: &str) -> Result<String, String> {
        let i = self.0.iter().position(|a| a == f).ok_or(format!("missing {f}"))?;
        self.0.get(i + 1).cloned().ok_or(format!("missing value of {f}"))
    }
    fn num<T: std::str::FromStr>(&self, f: &str) -> Result<T, String> {
        self.need(f)?.parse().map_err(|_| format!("{f}: not a number"))
    }
}

/// `libwrite` and `libiops` (see above).
pub fn cli(cmd: &str, args: &[String]) -> Option<Result<String, String>> {
    let a = Args(args);
    match cmd {
        "libwrite" => Some(cmd_libwrite(&a)),
        "libiops" => Some(cmd_libiops(&a)),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// RESULTS.md

pub(crate) fn cell(v: &Value, k: &str, unit: &str) -> String {
    let x = &v[k];
    let val = x[unit].as_f64();
    match (val, x["ratio_to_raw"].as_f64()) {
        (Some(a), Some(r)) if v["system"] != "raw" => format!("{a:.0} ({r:.2})"),
        (Some(a), _) => format!("{a:.0}"),
        _ => "n/a".into(),
    }
}

/// The section in RESULTS.md.
pub fn render(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "## End to end by layout: sequential 1 MiB and random 4 KiB (issue 4, item 2)\n");
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(o, "not available: {e}\n");
        return o;
    }
    let _ = writeln!(
        o,
        "{} MiB file written then read sequentially; random 4 KiB I/O in a {} MiB file, QD1, up to {} \
         requests or {} s. Each cell: rate (ratio to raw in the same run). Reads and IOPS are cold \
         (page cache of the images evicted, daemons restarted); writes include the final fsync/txg \
         sync. Compression off everywhere; ashift 12; recordsize 128K.\n",
        v["data_mib"], v["iops_mib"], v["iops_ops"], v["iops_cap_s"]
    );
    for lay in v["layouts"].as_array().into_iter().flatten() {
        let _ =
            writeln!(o, "### {} ({} MiB per file)\n", lay["label"].as_str().unwrap_or("?"), lay["disk_mib"]);
        let _ = writeln!(
            o,
            "| system | seq write MB/s | seq read MB/s | rand read IOPS | rand write IOPS | peak RSS write / read |"
        );
        let _ = writeln!(o, "|---|---:|---:|---:|---:|---|");
        for r in lay["rows"].as_array().into_iter().flatten() {
            let label = r["label"].as_str().unwrap_or(r["system"].as_str().unwrap_or("?"));
            if let Some(e) = r["error"].as_str() {
                let _ =
                    writeln!(o, "| {} | not available: {} | | | | |", r["system"].as_str().unwrap_or("?"), e);
                continue;
            }
            let _ = writeln!(
                o,
                "| {label} | {} | {} | {} | {} | {} / {} |",
                cell(r, "seq_write", "mbps"),
                cell(r, "seq_read", "mbps"),
                cell(r, "rand_read", "iops"),
                cell(r, "rand_write", "iops"),
                mib(&r["seq_write"]["vmhwm_kib"]),
                mib(&r["seq_read"]["vmhwm_kib"]),
            );
        }
        let _ = writeln!(
            o,
            "\nRaw read again after all systems: {:.0} MB/s.\n",
            lay["raw_read_after"]["mbps"].as_f64().unwrap_or(0.0)
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_leave_room_for_the_data() {
        let s = Sizes::of(true);
        for l in LAYOUTS {
            let per = s.disk_mib(l) as f64;
            let need = (s.data_mib + s.iops_mib) as f64 * l.expansion() / l.disks() as f64;
            assert!(per > need * 1.2, "{l:?}");
        }
    }

    #[test]
    fn ratios_divide_by_raw_and_render_handles_errors() {
        let mut rows = vec![
            json!({"system": "raw", "seq_write": {"mbps": 200.0}, "seq_read": {"mbps": 400.0},
                   "rand_read": {"iops": 1000.0}, "rand_write": {"iops": 500.0}}),
            json!({"system": "fuse", "seq_write": {"mbps": 100.0}, "seq_read": {"mbps": 300.0},
                   "rand_read": {"iops": 250.0}, "rand_write": {"iops": 50.0}}),
            json!({"system": "zfsfuse", "error": "not installed"}),
        ];
        ratios(&mut rows, &json!({"mbps": 200.0}));
        assert_eq!(rows[1]["seq_write"]["ratio_to_raw"], json!(0.5));
        assert_eq!(rows[1]["seq_read"]["ratio_to_raw"], json!(1.0));
        assert_eq!(rows[1]["rand_write"]["ratio_to_raw"], json!(0.1));
        let doc = render(&json!({"data_mib": 1, "iops_mib": 1, "iops_ops": 1, "iops_cap_s": 1,
            "layouts": [{"label": "single file", "disk_mib": 300, "rows": rows, "raw_read_after": {"mbps": 200.0}}]}));
        assert!(doc.contains("| 100 (0.50) | 300 (1.00) |"), "{doc}");
        assert!(doc.contains("not available: not installed"), "{doc}");
    }

    #[test]
    fn btrfs_profiles_match_the_redundancy() {
        assert_eq!(btrfs_profile(Layout::Raidz(1, 4)), ("raid5", "raid1"));
        assert_eq!(btrfs_profile(Layout::Raidz(2, 6)), ("raid6", "raid1c3"));
        assert_eq!(btrfs_profile(Layout::Mirror(2)), ("raid1", "raid1"));
    }
}
