//! Issue 13, item 6: scrub and resilver of the same data on the redundant layouts (mirror of 2,
//! raidz1 of 4, raidz2 of 6 file vdevs), next to the raw devices, btrfs scrub/replace and
//! zfs-fuse scrub/replace, in one run.
//!
//! Per layout, on the same zero-filled image files (never sparse), one system after the other:
//!
//! - **rzfs**: `rzpool create` (a private `rzfsd` on its own socket), D bytes of PRNG data
//!   (incompressible; compression off anyway) written through the FUSE mount and fsynced,
//!   `rzpool sync`, the allocated bytes from `rzpool list -Hp -o alloc`, export. A fresh `rzfsd`
//!   imports the pool, the images are evicted from the page cache (`sys::evict`, residency
//!   recorded) and `rzpool scrub -w` is timed. Then: export, the last image is overwritten with
//!   zeros (a dead disk swapped for a blank one in the same slot), a fresh `rzfsd` imports the
//!   degraded pool, the images are evicted and `rzpool replace -w POOL IMG` (the new disk at
//!   the old path) is timed: the full rebuild of one device. It must end ONLINE with no
//!   `replacing` vdev left, and a scrub afterwards (untimed) must find nothing to repair.
//! - **raw**: the bytes one device holds (see below) read from the start of every image in
//!   parallel (1 MiB reads, cold) — the ceiling of a scrub, which reads every device; and the
//!   bytes the resilver wrote to the new device written sequentially (1 MiB writes of one
//!   prepared random buffer, then fsync) both to a fresh file in the same directory and in
//!   place over the start of the rebuilt device's image, the faster counting — the ceiling of
//!   a resilver, which writes one device. Both are taken after rzfs and again after the
//!   peers; the mean is the reference.
//! - **zfs-fuse**: the same steps with `zpool`/`zfs` (its own pool on the same images).
//!   zfs-fuse 0.7 has no `-w`: `zpool status` is polled every 50 ms until the scan line says
//!   the scrub (resilver) completed and no `replacing` vdev is left.
//! - **btrfs**: loop devices over the images with the matching profile (raid1/raid1,
//!   raid5/raid1, raid6/raid1c3), the same D bytes written, a remount with the images evicted,
//!   `btrfs scrub start -B` timed; then unmount, the last image blanked and attached to a fresh
//!   loop device, a `degraded` mount without it and `btrfs replace start -B -K DEVID NEW MNT`
//!   timed (`-K`: no whole-device TRIM first, which the ZFS replaces do not do either).
//!
//! Bytes. `alloc` is what `rzpool list` reports: one copy for a mirror, data plus parity and
//! padding for RAID-Z. A scrub reads every copy, so it reads alloc × width bytes on a mirror
//! and alloc on RAID-Z; spread evenly, every device holds `per_dev` = those bytes / disks,
//! and what the raw read reads from every image. What the rebuilt device receives is the
//! `resilvered X` figure of `rzpool status` (the bytes the resilver wrote to it, rounded by
//! status to 3 significant digits; RAID-Z skip sectors are allocated but never written, so
//! it is a little under alloc / disks there); the raw write writes that many bytes. rzfs's
//! rates are these bytes per second (the figures compared with raw); all systems also get a
//! data rate, D / seconds, the figure that compares them with one another on the same data
//! (their own layouts and metadata differ).

use crate::e2e::{self, ZFS, ZPOOL};
use crate::layouts::{btrfs_profile, images, write_file};
use crate::libpool::Layout;
use crate::report::f0;
use crate::sys::{self, mbps};
use crate::Ctx;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const POOL: &str = "rzscan";
const FILE: &str = "data.bin";
const LAYOUTS: [Layout; 3] = [Layout::Mirror(2), Layout::Raidz(1, 4), Layout::Raidz(2, 6)];
/// The goals of issue 13, item 6: (key, text, target ratio).
const GOALS: [(&str, &str, f64); 4] = [
    ("scrub_raw", "scrub ≥ 0.9× the raw sequential read of the same bytes", 0.9),
    ("scrub_btrfs", "scrub ≥ 1.0× btrfs scrub (same data)", 1.0),
    ("resilver_raw", "resilver of one device ≥ 0.9× the raw write rate of one device", 0.9),
    ("resilver_btrfs", "resilver ≥ 1.0× btrfs replace (same data)", 1.0),
];

/// Sizes of one run.
#[derive(Clone, Copy)]
struct Sizes {
    /// The data written on every layout.
    data_mib: u64,
    /// Cap on one scrub or resilver (a hang becomes an error row, not a hung run).
    cap_s: u64,
}

impl Sizes {
    fn of(full: bool) -> Sizes {
        if full {
            Sizes { data_mib: 2048, cap_s: 1800 }
        } else {
            Sizes { data_mib: 32, cap_s: 120 }
        }
    }

    /// Per-image size: the data times the layout's expansion spread over its disks, half of
    /// that again as slack, 192 MiB for metadata and btrfs's chunks (at least 128 MiB per
    /// device), and up to 320 MiB more: `btrfs replace` sets every block group read-only in
    /// turn and fails with ENOSPC ("failed setting block group ro: -28") unless it can
    /// allocate a new metadata chunk (up to 256 MiB per device) — with 2 GiB of data, 1.25×
    /// slack left 24 MiB unallocated on the metadata devices of raid6 and it failed on every
    /// layout.
    fn disk_mib(self, l: Layout) -> u64 {
        let stored = self.data_mib as f64 * l.expansion() / l.disks() as f64;
        (stored * 1.5) as u64 + 192 + (stored as u64).min(320)
    }
}

/// Copies of every block a scrub reads: every side of a mirror; RAID-Z's alloc already
/// counts its parity.
fn copies(l: Layout) -> u64 {
    match l {
        Layout::Mirror(n) => n as u64,
        _ => 1,
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
    /// The device that is rebuilt: the last one.
    fn victim(&self) -> &Path {
        self.imgs.last().map(PathBuf::as_path).unwrap_or(Path::new(""))
    }
    fn victim_s(&self) -> String {
        self.victim().to_string_lossy().into_owned()
    }
    fn data_bytes(&self) -> u64 {
        self.s.data_mib * MIB
    }
    /// A dead disk replaced by a blank one in the same slot: the image rewritten with zeros.
    fn blank_victim(&self) -> Result<(), String> {
        e2e::zero_fill(&[self.victim().to_path_buf()], self.s.disk_mib(self.l))
    }
    /// A FUSE mount left behind by a system that failed (its daemon is gone) would stand in
    /// the next one's way.
    fn unmount_stale(&self) {
        if sys::is_mounted(&self.mnt) {
            let _ = sys::run(&["fusermount", "-u", "-z", &self.mnt_s()], &[]);
        }
    }
    /// `argv` under coreutils `timeout` (the section's cap).
    fn capped<'b>(&self, cap: &'b str, argv: &[&'b str]) -> Vec<&'b str> {
        let mut v = vec!["timeout", cap];
        v.extend_from_slice(argv);
        v
    }
}

/// A timed scan: `dev_bytes` are what it reads (scrub) or writes to the new device (resilver).
fn scan_row(what: &str, dev_bytes: Option<u64>, data: u64, secs: f64, resident: Option<u64>) -> Value {
    json!({"what": what, "bytes": dev_bytes, "secs": secs, "mbps": dev_bytes.map(|b| mbps(b, secs)),
           "data_bytes": data, "data_mbps": mbps(data, secs), "resident_after_evict": resident,
           "loadavg": sys::loadavg()})
}

/// Runs a capped command; a timeout says so instead of quoting an empty stderr.
fn must_capped(r: &Rig, argv: &[&str], env: &[(&str, &str)]) -> Result<f64, String> {
    let cap = r.s.cap_s.to_string();
    let t0 = Instant::now();
    let res = sys::must(&r.capped(&cap, argv), env);
    let secs = t0.elapsed().as_secs_f64();
    match res {
        Ok(_) => Ok(secs),
        Err(_) if secs >= r.s.cap_s as f64 => {
            Err(format!("`{}` did not finish within {} s", argv.join(" "), r.s.cap_s))
        }
        Err(e) => Err(e),
    }
}

/// One operation's outcome: its row, or {"error": ...}. A failed export after a good
/// operation is its error too (the next step would meet a pool still imported).
fn outcome(op: Result<Value, String>, export: Result<String, String>) -> Value {
    match (op, export) {
        (Ok(v), Ok(_)) => v,
        (Ok(_), Err(e)) => json!({"error": format!("export afterwards: {e}")}),
        (Err(e), _) => json!({"error": e}),
    }
}

/// Timed right after a resilver: fdatasync of the new device's image (coreutils `sync
/// --data`), so every system's figure includes its writes reaching the disk, as the raw
/// write's fsync does (≈ 0 s when the system flushed them already). Returns seconds.
fn sync_victim(r: &Rig) -> Result<f64, String> {
    let t0 = Instant::now();
    sys::must(&["sync", "--data", &r.victim_s()], &[])?;
    Ok(t0.elapsed().as_secs_f64())
}

/// The `scan:` (rzpool) or `scrub:` (zfs-fuse) line of a status output, trimmed.
fn scan_line(status: &str) -> String {
    status
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("scan:") || l.starts_with("scrub:"))
        .unwrap_or("")
        .to_string()
}

/// The `resilvered X` figure of a scan line ("22.3M"), as printed.
fn resilvered(line: &str) -> Option<String> {
    let mut w = line.split_whitespace();
    w.find(|x| *x == "resilvered").and_then(|_| w.next()).map(str::to_string)
}

/// zfs-fuse's figure: the device line ends in "22.3M resilvered".
fn resilvered_device(status: &str) -> Option<String> {
    status.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let at = w.iter().position(|x| *x == "resilvered")?;
        at.checked_sub(1).map(|i| w[i].to_string())
    })
}

/// A size as zpool prints it ("10.3M", "512B", "1.50G"; powers of 1024) in bytes.
fn human_bytes(s: &str) -> Option<u64> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let x: f64 = num.parse().ok()?;
    let k = match unit {
        "B" => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        "P" => 5,
        _ => return None,
    };
    Some((x * (1u64 << (10 * k)) as f64).round() as u64)
}

// ---------------------------------------------------------------------------------------------
// rzfs

fn rzfs(r: &Rig) -> Result<Value, String> {
    let sock = r.dir.join("rzfsd.sock");
    let socks = sock.to_string_lossy().into_owned();
    let env = [("RZFS_SOCKET", socks.as_str())];
    let log = r.dir.join("rzfsd.log");
    let rzpool = r.c.bin("rzpool");
    let (m, d, victim) = (r.mnt_s(), r.dir_s(), r.victim_s());
    let mut v = json!({"system": "rzfs", "label": "rzfs (rzfsd; rzpool scrub -w, rzpool replace -w)"});
    let alloc: u64 = {
        let mut dm = e2e::start_rzfsd(&r.c.bin_dir, &sock, &env, &log)?;
        let mut argv = vec![rzpool.as_str(), "create", "-f", "-o", "ashift=12", "-O", "compression=off"];
        argv.extend(["-O", "atime=off", "-m", &m, POOL]);
        let vd = r.l.vdev_args(&r.imgs);
        argv.extend(vd.iter().map(String::as_str));
        sys::must(&argv, &env)?;
        let res = (|| {
            let secs = write_file(&r.mnt.join(FILE), r.s.data_mib, 0x5C4B)?;
            v["write_mbps"] = json!(mbps(r.data_bytes(), secs));
            sys::must(&[&rzpool, "sync", POOL], &env)?;
            let a = sys::must(&[&rzpool, "list", "-Hp", "-o", "alloc", POOL], &env)?;
            a.trim().parse::<u64>().map_err(|_| format!("rzpool list -Hp -o alloc said {a:?}"))
        })();
        let ex = sys::must(&[&rzpool, "export", POOL], &env);
        dm.stop();
        let a = res?;
        ex?;
        a
    };
    let scrub_bytes = alloc * copies(r.l);
    let per_dev = scrub_bytes / r.l.disks() as u64;
    v["alloc_bytes"] = json!(alloc);
    v["scrub_device_bytes"] = json!(scrub_bytes);
    v["per_device_bytes"] = json!(per_dev);

    let mut dm = e2e::start_rzfsd(&r.c.bin_dir, &sock, &env, &log)?;
    let res = (|| {
        sys::must(&[&rzpool, "import", "-N", "-d", &d, POOL], &env)?;
        let left = r.evict()?;
        let secs = must_capped(r, &[&rzpool, "scrub", "-w", POOL], &env)?;
        let line = scan_line(&sys::must(&[&rzpool, "status", POOL], &env)?);
        if !line.contains("scrub repaired") || !line.contains("with 0 errors") {
            return Err(format!("scrub -w returned, but status says `{line}`"));
        }
        let mut row = scan_row("rzpool scrub -w, cold", Some(scrub_bytes), r.data_bytes(), secs, left);
        row["status"] = json!(line);
        Ok(row)
    })();
    v["scrub"] = outcome(res, sys::must(&[&rzpool, "export", POOL], &env));
    dm.stop();

    v["resilver"] = outcome(rzfs_resilver(r, &rzpool, &env, &victim), Ok(String::new()));
    Ok(v)
}

/// The full rebuild of the last device (see the module comment).
fn rzfs_resilver(r: &Rig, rzpool: &str, env: &[(&str, &str)], victim: &str) -> Result<Value, String> {
    let sock = r.dir.join("rzfsd.sock");
    let log = r.dir.join("rzfsd.log");
    let d = r.dir_s();
    r.blank_victim()?;
    let mut dm = e2e::start_rzfsd(&r.c.bin_dir, &sock, env, &log)?;
    let res = (|| {
        sys::must(&[rzpool, "import", "-N", "-d", &d, POOL], env)?;
        let before = sys::must(&[rzpool, "status", POOL], env)?;
        if !before.contains("DEGRADED") {
            return Err(format!("the pool is not degraded with a blank device: {before}"));
        }
        let left = r.evict()?;
        let secs = must_capped(r, &[rzpool, "replace", "-w", POOL, victim], env)?;
        let flush = sync_victim(r)?;
        let st = sys::must(&[rzpool, "status", POOL], env)?;
        let line = scan_line(&st);
        if !st.contains("state: ONLINE") || st.contains("replacing") || !line.contains("resilvered") {
            return Err(format!("replace -w returned, but status says: {st}"));
        }
        // Untimed proof that the rebuilt device is right: a scrub that finds nothing to repair.
        must_capped(r, &[rzpool, "scrub", "-w", POOL], env)?;
        let check = scan_line(&sys::must(&[rzpool, "status", POOL], env)?);
        if !check.contains("scrub repaired 0B") || !check.contains("with 0 errors") {
            return Err(format!("the scrub after the resilver says `{check}`"));
        }
        let shown = resilvered(&line);
        let bytes = shown.as_deref().and_then(human_bytes);
        let mut row = scan_row(
            "rzpool replace -w of a blank device at the old path, cold, then fdatasync of it",
            bytes,
            r.data_bytes(),
            secs + flush,
            left,
        );
        row["flush_secs"] = json!(flush);
        row["status"] = json!(line);
        row["status_resilvered"] = json!(shown);
        row["scrub_after"] = json!(check);
        if bytes.is_none() {
            row["error_bytes"] = json!(format!("no `resilvered X` figure in `{line}`"));
        }
        Ok(row)
    })();
    let ex = sys::must(&[rzpool, "export", POOL], env);
    dm.stop();
    let row = res?;
    ex.map_err(|e| format!("export afterwards: {e}"))?;
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// Raw

/// Reads the first `n` bytes of `p` in 1 MiB reads; returns the bytes read.
fn read_prefix(p: &Path, n: u64) -> Result<u64, String> {
    let mut f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut buf = vec![0u8; MIB as usize];
    let mut done = 0u64;
    while done < n {
        let want = (n - done).min(MIB) as usize;
        let k = f.read(&mut buf[..want]).map_err(|e| format!("{}: {e}", p.display()))?;
        if k == 0 {
            break;
        }
        done += k as u64;
    }
    Ok(done)
}

/// `mib` MiB from the start of every image, in parallel, cold.
fn raw_read(r: &Rig, mib: u64) -> Result<Value, String> {
    let left = r.evict()?;
    let t0 = Instant::now();
    let all: Result<Vec<u64>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = r.imgs.iter().map(|p| s.spawn(move || read_prefix(p, mib * MIB))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or(Err("reader panicked".into()))).collect()
    });
    let bytes: u64 = all?.iter().sum();
    let secs = t0.elapsed().as_secs_f64();
    let what = format!("{mib} MiB from the start of each of the {} images in parallel, cold", r.imgs.len());
    Ok(json!({"what": what, "bytes": bytes, "secs": secs, "mbps": mbps(bytes, secs),
              "resident_after_evict": left, "loadavg": sys::loadavg()}))
}

/// Writes `mib` MiB to `p` in 1 MiB writes of one random buffer made beforehand (no PRNG in
/// the timing), then fsync: a fresh file (created, truncated) or in place over the existing
/// bytes of `p` (no truncation). Returns seconds.
fn write_raw(p: &Path, mib: u64, fresh: bool) -> Result<f64, String> {
    let buf = crate::kernels::random_block(0x3A77, MIB as usize);
    let mut o = std::fs::OpenOptions::new();
    o.write(true);
    if fresh {
        o.create(true).truncate(true);
    }
    let t0 = Instant::now();
    let mut f = o.open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    for _ in 0..mib {
        f.write_all(&buf).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    f.sync_all().map_err(|e| format!("fsync {}: {e}", p.display()))?;
    Ok(t0.elapsed().as_secs_f64())
}

/// The write ceiling of a resilver, two ways: `mib` MiB to a fresh file next to the images
/// (removed afterwards), and the same over the start of the rebuilt device's image, in place
/// (what a resilver does: no block allocation; the image is free between systems). Each with
/// fsync; `mbps` is the faster of the two (the stricter ceiling).
fn raw_write(r: &Rig, mib: u64) -> Result<Value, String> {
    let p = r.dir.join("raw-write.img");
    let fresh = write_raw(&p, mib, true);
    let _ = std::fs::remove_file(&p);
    let fresh = fresh?;
    let in_place = write_raw(r.victim(), mib, false)?;
    let bytes = mib * MIB;
    let (f, i) = (mbps(bytes, fresh), mbps(bytes, in_place));
    Ok(
        json!({"what": format!("{mib} MiB, 1 MiB writes then fsync: to a fresh file on the same filesystem, and in place over the start of the rebuilt device's image"),
              "bytes": bytes, "fresh_secs": fresh, "fresh_mbps": f, "in_place_secs": in_place,
              "in_place_mbps": i, "mbps": f.max(i), "loadavg": sys::loadavg()}),
    )
}
// ---------------------------------------------------------------------------------------------
// zfs-fuse

/// Polls `zpool status` every 50 ms until the scan line contains `done` and no vdev is
/// `replacing`; returns the line.
fn zfsfuse_wait(r: &Rig, done: &str) -> Result<String, String> {
    let t0 = Instant::now();
    loop {
        let st = sys::must(&[ZPOOL, "status", POOL], &[])?;
        let line = scan_line(&st);
        if line.contains(done) && !st.contains("replacing") {
            return Ok(line);
        }
        if t0.elapsed() > Duration::from_secs(r.s.cap_s) {
            return Err(format!("no `{done}` within {} s; status: {st}", r.s.cap_s));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn zfs_fuse(r: &Rig) -> Result<Value, String> {
    let (m, d, victim) = (r.mnt_s(), r.dir_s(), r.victim_s());
    let zlog = r.dir.join("zfs-fuse.log");
    let mut v = json!({"system": "zfsfuse", "label": "peer: zfs-fuse 0.7 (zpool scrub / zpool replace, status polled)"});
    {
        let mut zd = e2e::start_zfs_fuse(&zlog, r.c.wait_s)?;
        let mut argv = vec![ZPOOL, "create", "-f", "-o", "cachefile=none", "-m", &m, POOL];
        let vd = r.l.vdev_args(&r.imgs);
        argv.extend(vd.iter().map(String::as_str));
        let res = (|| {
            sys::must(&argv, &[])?;
            sys::must(&[ZFS, "set", "compression=off", POOL], &[])?;
            sys::must(&[ZFS, "set", "atime=off", POOL], &[])?;
            write_file(&r.mnt.join(FILE), r.s.data_mib, 0x5C4B)?;
            let a = sys::must(&[ZPOOL, "list", "-H", "-o", "alloc", POOL], &[])?;
            v["alloc"] = json!(a.trim());
            Ok::<(), String>(())
        })();
        let _ = sys::run(&[ZPOOL, "export", POOL], &[]);
        zd.stop();
        res?;
    }
    {
        let mut zd = e2e::start_zfs_fuse(&zlog, r.c.wait_s)?;
        let res = (|| {
            sys::must(&[ZPOOL, "import", "-d", &d, POOL], &[])?;
            let left = r.evict()?;
            let t0 = Instant::now();
            sys::must(&[ZPOOL, "scrub", POOL], &[])?;
            let line = zfsfuse_wait(r, "scrub completed")?;
            let secs = t0.elapsed().as_secs_f64();
            if !line.contains("with 0 errors") {
                return Err(format!("scrub ended with `{line}`"));
            }
            let mut row = scan_row("zpool scrub, status polled, cold", None, r.data_bytes(), secs, left);
            row["status"] = json!(line);
            Ok(row)
        })();
        v["scrub"] = outcome(res, sys::must(&[ZPOOL, "export", POOL], &[]));
        zd.stop();
    }
    v["resilver"] = outcome(zfs_fuse_resilver(r, &d, &victim, &zlog), Ok(String::new()));
    Ok(v)
}

fn zfs_fuse_resilver(r: &Rig, d: &str, victim: &str, zlog: &Path) -> Result<Value, String> {
    r.blank_victim()?;
    let mut zd = e2e::start_zfs_fuse(zlog, r.c.wait_s)?;
    let res = (|| {
        sys::must(&[ZPOOL, "import", "-d", d, POOL], &[])?;
        let left = r.evict()?;
        let t0 = Instant::now();
        sys::must(&[ZPOOL, "replace", POOL, victim], &[])?;
        let line = zfsfuse_wait(r, "resilver completed")?;
        let flush = sync_victim(r)?;
        let secs = t0.elapsed().as_secs_f64();
        if !line.contains("with 0 errors") {
            return Err(format!("resilver ended with `{line}`"));
        }
        let st = sys::must(&[ZPOOL, "status", POOL], &[])?;
        let mut row = scan_row(
            "zpool replace of a blank device at the old path, status polled, cold, then fdatasync of it",
            None,
            r.data_bytes(),
            secs,
            left,
        );
        row["flush_secs"] = json!(flush);
        row["status"] = json!(line);
        row["status_resilvered"] = json!(resilvered_device(&st));
        Ok(row)
    })();
    let ex = sys::must(&[ZPOOL, "export", POOL], &[]);
    zd.stop();
    let row = res?;
    ex.map_err(|e| format!("export afterwards: {e}"))?;
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// btrfs

/// The devid of `dev` in `btrfs filesystem show` output.
fn btrfs_devid(show: &str, dev: &str) -> Option<String> {
    show.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let at = w.iter().position(|x| *x == "path")?;
        (w.get(at + 1) == Some(&dev) && w.first() == Some(&"devid"))
            .then(|| w.get(1).map(|s| s.to_string()))?
    })
}

fn btrfs(r: &Rig) -> Result<Value, String> {
    if let Some(why) = crate::btrfs::unavailable() {
        return Err(why);
    }
    let m = r.mnt_s();
    let mut lp = crate::btrfs::Loops { devs: Vec::new(), mnt: r.mnt.clone() };
    for img in &r.imgs {
        let d = sys::must(&["losetup", "-f", "--show", &img.to_string_lossy()], &[])?;
        lp.devs.push(d.trim().to_string());
    }
    let (dp, mp) = btrfs_profile(r.l);
    let mut mk = vec!["mkfs.btrfs", "-f", "-q", "-d", dp, "-m", mp];
    mk.extend(lp.devs.iter().map(String::as_str));
    sys::must(&mk, &[])?;
    let opts = |devs: &[String], extra: &str| {
        let d: Vec<String> = devs.iter().map(|d| format!("device={d}")).collect();
        format!("noatime{extra},{}", d.join(","))
    };
    let all = opts(&lp.devs, "");
    sys::must(&["mount", "-t", "btrfs", "-o", &all, &lp.devs[0], &m], &[])?;
    let label = format!("peer: Linux btrfs (data {dp}, metadata {mp}; scrub start -B, replace start -B -K)");
    let mut v = json!({"system": "btrfs", "label": label});
    write_file(&r.mnt.join(FILE), r.s.data_mib, 0x5C4B)?;
    // A remount drops btrfs's own caches; the loop devices' backing files are evicted.
    sys::must(&["umount", &m], &[])?;
    sys::must(&["mount", "-t", "btrfs", "-o", &all, &lp.devs[0], &m], &[])?;
    let scrub = (|| {
        let left = r.evict()?;
        let secs = must_capped(r, &["btrfs", "scrub", "start", "-B", &m], &[])?;
        Ok(scan_row("btrfs scrub start -B, cold", None, r.data_bytes(), secs, left))
    })();
    v["scrub"] = outcome(scrub, Ok(String::new()));
    v["resilver"] = outcome(btrfs_replace(r, &mut lp, &opts), Ok(String::new()));
    drop(lp);
    Ok(v)
}

/// The last device lost and a blank one put in (see the module comment).
fn btrfs_replace(
    r: &Rig,
    lp: &mut crate::btrfs::Loops,
    opts: &dyn Fn(&[String], &str) -> String,
) -> Result<Value, String> {
    let m = r.mnt_s();
    let old = lp.devs.last().cloned().ok_or("no loop device")?;
    let show = sys::must(&["btrfs", "filesystem", "show", &m], &[])?;
    let devid = btrfs_devid(&show, &old).ok_or(format!("no devid for {old} in: {show}"))?;
    sys::must(&["umount", &m], &[])?;
    sys::must(&["losetup", "-d", &old], &[])?;
    lp.devs.pop();
    r.blank_victim()?;
    let new = sys::must(&["losetup", "-f", "--show", &r.victim_s()], &[])?.trim().to_string();
    let degraded = opts(&lp.devs, ",degraded");
    let first = lp.devs[0].clone();
    lp.devs.push(new.clone());
    sys::must(&["mount", "-t", "btrfs", "-o", &degraded, &first, &m], &[])?;
    let left = r.evict()?;
    let t0 = Instant::now();
    must_capped(r, &["btrfs", "replace", "start", "-B", "-K", &devid, &new, &m], &[])?;
    let flush = sync_victim(r)?;
    let secs = t0.elapsed().as_secs_f64();
    let show = sys::must(&["btrfs", "filesystem", "show", &m], &[])?;
    if show.to_lowercase().contains("missing") {
        return Err(format!("btrfs replace returned, but: {show}"));
    }
    let mut row = scan_row(
        "btrfs replace start -B -K of the missing device onto a blank one, degraded mount, cold, then fdatasync of it",
        None,
        r.data_bytes(),
        secs,
        left,
    );
    row["flush_secs"] = json!(flush);
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// The section

/// Runs `f`; a failure becomes {"system": id, "error": ...} so the other systems still run.
fn attempt(id: &str, log: &mut dyn FnMut(&str), f: impl FnOnce() -> Result<Value, String>) -> Value {
    let t0 = Instant::now();
    let v = f().unwrap_or_else(|e| json!({"system": id, "error": e}));
    let op = |k: &str| match (&v[k]["error"], v[k]["secs"].as_f64()) {
        (Value::String(e), _) => format!("{k} error: {e}"),
        (_, Some(x)) => format!("{k} {x:.2} s"),
        _ => format!("{k} n/a"),
    };
    let brief = match &v["error"] {
        Value::String(e) => format!("error: {e}"),
        _ => format!("{}, {}", op("scrub"), op("resilver")),
    };
    log(&format!("scan {id}: {brief} ({:.0} s)", t0.elapsed().as_secs_f64()));
    v
}

fn mean(xs: &[&Value]) -> Option<f64> {
    let v: Vec<f64> = xs.iter().filter_map(|x| x["mbps"].as_f64()).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn one_layout(c: &Ctx, l: Layout, s: Sizes, log: &mut dyn FnMut(&str)) -> Value {
    let dir = c.work.join(format!("scan-{}", l.name()));
    let r = Rig { c, l, s, imgs: images(&dir, l), mnt: dir.join("mnt"), dir };
    let base = json!({"layout": l.name(), "label": l.label(), "disk_mib": s.disk_mib(l),
                      "data_bytes": r.data_bytes()});
    if let Err(e) = std::fs::create_dir_all(&r.mnt)
        .and_then(|_| e2e::zero_fill(&r.imgs, s.disk_mib(l)).map_err(std::io::Error::other))
    {
        let _ = std::fs::remove_dir_all(&r.dir);
        let mut v = base;
        v["error"] = json!(e.to_string());
        return v;
    }
    let rz = attempt("rzfs", log, || rzfs(&r));
    r.unmount_stale();
    // The bytes one device holds; without an rzfs figure, the nominal share of the data (the
    // raw rates are still measured, but no ratio is computed from them).
    let per_dev = rz["per_device_bytes"]
        .as_u64()
        .unwrap_or((s.data_mib as f64 * l.expansion() / l.disks() as f64) as u64 * MIB);
    let mib = per_dev.div_ceil(MIB).max(1);
    // What the rebuilt device received (same fallback).
    let wmib = rz["resilver"]["bytes"].as_u64().map_or(mib, |b| b.div_ceil(MIB).max(1));
    let err = |e: String| json!({"error": e});
    let read1 = raw_read(&r, mib).unwrap_or_else(err);
    let write1 = raw_write(&r, wmib).unwrap_or_else(err);
    let zf = attempt("zfsfuse", log, || zfs_fuse(&r));
    r.unmount_stale();
    let bt = attempt("btrfs", log, || btrfs(&r));
    let read2 = raw_read(&r, mib).unwrap_or_else(err);
    let write2 = raw_write(&r, wmib).unwrap_or_else(err);
    let _ = std::fs::remove_dir_all(&r.dir);
    let (read_mbps, write_mbps) = (mean(&[&read1, &read2]), mean(&[&write1, &write2]));
    let raw = json!({"read": [read1, read2], "write": [write1, write2],
                     "read_mbps": read_mbps, "write_mbps": write_mbps});
    log(&format!(
        "scan raw: read {} MB/s ({mib} MiB per device), write {} MB/s ({wmib} MiB)",
        f0(&raw["read_mbps"]),
        f0(&raw["write_mbps"]),
    ));
    let goals = goals(&rz, &bt, &raw);
    let mut v = base;
    v["shared_ceiling"] = shared_ceiling(l, &rz, &raw);
    v["systems"] = json!([rz, zf, bt]);
    v["raw"] = raw;
    v["goals"] = goals;
    v
}

/// The resilver's ceiling when every device is a file on one shared disk (as in this bench):
/// a rebuild must read what the new device's contents are made from and write them, on the
/// same disk, so it cannot beat reading those bytes at the raw read rate plus writing the new
/// device's bytes at the raw write rate, one after the other. A mirror reads one copy of what
/// it writes; RAID-Z reads the other columns of every row, about (disks − 1) × the new
/// device's share. (On separate disks the reads run on the survivors in parallel and the
/// ceiling is the raw write rate of one device, the goal's reference.)
fn shared_ceiling(l: Layout, rz: &Value, raw: &Value) -> Value {
    let (Some(written), Some(secs), Some(r), Some(w)) = (
        rz["resilver"]["bytes"].as_u64(),
        rz["resilver"]["secs"].as_f64(),
        raw["read_mbps"].as_f64(),
        raw["write_mbps"].as_f64(),
    ) else {
        return json!({"missing": "no rzfs resilver or raw figure"});
    };
    let read = match l {
        Layout::Raidz(_, n) => written * (n as u64 - 1),
        _ => written,
    };
    let ceiling = read as f64 / (r * 1e6) + written as f64 / (w * 1e6);
    json!({"read_bytes": read, "written_bytes": written, "ceiling_secs": ceiling,
           "rzfs_secs": secs, "ratio": ceiling / secs})
}

/// A goal's verdict: the ratio, whether it is met, and by how much it falls short.
fn verdict(text: &str, target: f64, ratio: Result<f64, String>) -> Value {
    match ratio {
        Ok(x) => json!({"goal": text, "target": target, "ratio": x, "met": x >= target,
                        "shortfall_pct": if x < target { (1.0 - x / target) * 100.0 } else { 0.0 },
                        "speedup_needed": if x < target { target / x } else { 1.0 }}),
        Err(e) => json!({"goal": text, "target": target, "met": null, "missing": e}),
    }
}

/// The four goals of one layout.
fn goals(rz: &Value, bt: &Value, raw: &Value) -> Value {
    let get = |sys: &Value, who: &str, op: &str, k: &str| -> Result<f64, String> {
        // The reasons are listed under the tables; the goal says which figure is missing.
        if sys.get("error").is_some() || sys[op].get("error").is_some() {
            return Err(format!("{who} {op} not available"));
        }
        sys[op][k].as_f64().filter(|x| *x > 0.0).ok_or(format!("no {who} {op} figure"))
    };
    let base = |k: &str| raw[k].as_f64().ok_or(format!("raw {} not available", &k[..k.len() - 5]));
    let mut out = serde_json::Map::new();
    for (key, text, target) in GOALS {
        let (op, peer) = key.split_once('_').unwrap_or((key, ""));
        let ratio = if peer == "raw" {
            let b = base(if op == "scrub" { "read_mbps" } else { "write_mbps" });
            get(rz, "rzfs", op, "mbps").and_then(|a| b.map(|b| a / b))
        } else {
            // The same data on both: the ratio of the times.
            get(rz, "rzfs", op, "secs").and_then(|a| get(bt, "btrfs", op, "secs").map(|b| b / a))
        };
        out.insert(key.to_string(), verdict(text, target, ratio));
    }
    Value::Object(out)
}

/// The section: every layout in turn.
pub fn run(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let s = Sizes::of(c.full);
    let t0 = Instant::now();
    let layouts: Vec<Value> = LAYOUTS.iter().map(|&l| one_layout(c, l, s, log)).collect();
    let goals: Vec<Value> = GOALS.iter().map(|(k, t, x)| json!({"id": k, "goal": t, "target": x})).collect();
    json!({"data_mib": s.data_mib, "cap_s": s.cap_s, "goals": goals, "layouts": layouts,
           "wall_secs": t0.elapsed().as_secs_f64()})
}

// ---------------------------------------------------------------------------------------------
// RESULTS.md

fn mb(v: &Value) -> String {
    v.as_f64().map_or_else(|| "n/a".into(), |b| format!("{:.0}", b / MIB as f64))
}

fn ratio(v: &Value) -> String {
    v.as_f64().map_or_else(|| "n/a".into(), |x| format!("{x:.2}"))
}

/// "MET (1.230x)", "MISSED: 0.620x, 31.1% short of 0.9x (needs 1.452x faster)", or "n/a: why".
fn goal_cell(g: &Value) -> String {
    match g["met"].as_bool() {
        Some(true) => format!("MET ({:.3}x)", g["ratio"].as_f64().unwrap_or(0.0)),
        Some(false) => format!(
            "MISSED: {:.3}x, {:.1}% short of {}x (needs {:.3}x faster)",
            g["ratio"].as_f64().unwrap_or(0.0),
            g["shortfall_pct"].as_f64().unwrap_or(0.0),
            g["target"],
            g["speedup_needed"].as_f64().unwrap_or(0.0)
        ),
        None => format!("n/a: {}", g["missing"].as_str().unwrap_or("?")),
    }
}

/// "160 MB/s (0.20 s)" for a peer's data rate, or "not available".
fn peer_cell(sys: &Value, op: &str) -> String {
    if sys.get("error").is_some() || sys[op].get("secs").is_none() {
        return "not available".into();
    }
    format!("{} ({:.2} s)", f0(&sys[op]["data_mbps"]), sys[op]["secs"].as_f64().unwrap_or(0.0))
}

fn resident(systems: &[Value], op: &str) -> String {
    let r: Vec<String> = systems
        .iter()
        .map(|s| s[op]["resident_after_evict"].as_u64().map_or_else(|| "-".into(), |b| b.to_string()))
        .collect();
    r.join(" / ")
}

fn table(o: &mut String, layouts: &[Value], op: &str) {
    let (verb, peer_verb, raw_k, raw_verb, bytes_head) = if op == "scrub" {
        ("scrub", "scrub", "read", "read of the same bytes", "allocated / read by the scrub, MiB")
    } else {
        ("resilver", "replace", "write", "write of one device's bytes", "written to the new device (status)")
    };
    let _ = writeln!(
        o,
        "| layout | data MiB | {bytes_head} | rzfs {verb} s | rzfs MB/s | raw {raw_verb}, MB/s | rzfs / raw | \
         rzfs data MB/s | btrfs {peer_verb}, data MB/s | rzfs / btrfs | zfs-fuse {peer_verb}, data MB/s | \
         goal: ≥ 0.9× raw | goal: ≥ 1.0× btrfs | image bytes resident after eviction (rzfs / zfs-fuse / btrfs) | load |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|");
    for lay in layouts {
        let label = lay["label"].as_str().unwrap_or("?");
        if let Some(e) = lay["error"].as_str() {
            let _ = writeln!(o, "| {label} | not available: {e} |||||||||||||");
            continue;
        }
        let sys = lay["systems"].as_array().cloned().unwrap_or_default();
        let find = |id: &str| sys.iter().find(|s| s["system"] == id).cloned().unwrap_or(Value::Null);
        let (rz, zf, bt) = (find("rzfs"), find("zfsfuse"), find("btrfs"));
        let x = &rz[op];
        let bytes = if op == "scrub" {
            format!("{} / {}", mb(&rz["alloc_bytes"]), mb(&rz["scrub_device_bytes"]))
        } else {
            x["status_resilvered"].as_str().unwrap_or("n/a").to_string()
        };
        let runs = |k: &str| -> String {
            let v: Vec<String> =
                lay["raw"][raw_k].as_array().into_iter().flatten().map(|r| f0(&r[k])).collect();
            v.join(", ")
        };
        let raw_cell = if op == "scrub" {
            format!("{} ({})", f0(&lay["raw"]["read_mbps"]), runs("mbps"))
        } else {
            format!(
                "{} (fresh {}; in place {})",
                f0(&lay["raw"]["write_mbps"]),
                runs("fresh_mbps"),
                runs("in_place_mbps")
            )
        };
        let g = &lay["goals"];
        let rz_secs = if rz.get("error").is_some() || x.get("secs").is_none() {
            "not available".to_string()
        } else {
            format!("{:.2}", x["secs"].as_f64().unwrap_or(0.0))
        };
        let _ = writeln!(
            o,
            "| {label} | {} | {bytes} | {rz_secs} | {} | {raw_cell} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            mb(&lay["data_bytes"]),
            f0(&x["mbps"]),
            ratio(&g[format!("{op}_raw")]["ratio"]),
            f0(&x["data_mbps"]),
            peer_cell(&bt, op),
            ratio(&g[format!("{op}_btrfs")]["ratio"]),
            peer_cell(&zf, op),
            goal_cell(&g[format!("{op}_raw")]),
            goal_cell(&g[format!("{op}_btrfs")]),
            resident(&[rz.clone(), zf.clone(), bt.clone()], op),
            ratio(&x["loadavg"]),
        );
    }
    let _ = writeln!(o);
}

/// The section in RESULTS.md.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## Scrub and resilver (issue 13, item 6)\n");
    // A section measured in a run of its own (`--only scan`) and merged into a full run's
    // results says when, on what, with which command.
    if let Some(run) = v["separate_run"].as_str() {
        let _ = writeln!(o, "*{run}*\n");
    }
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(o, "not available: {e}\n");
        return o;
    }
    let _ = writeln!(
        o,
        "{} MiB of random bytes written through each system's mount (compression off, ashift 12), then, \
         cold (images evicted, daemons restarted, btrfs remounted): a scrub, and the full rebuild of one \
         device — the last image overwritten with zeros, the pool imported degraded, `rzpool replace -w \
         POOL IMG` (zfs-fuse: `zpool replace`, status polled every 50 ms; btrfs: `replace start -B -K` \
         onto a blank loop device, degraded mount). Every resilver time includes an fdatasync of the \
         new device's image right after (`sync --data`; ≈ 0 s when the system flushed it itself), as the \
         raw write includes its fsync.\n",
        v["data_mib"]
    );
    let _ = writeln!(
        o,
        "rzfs MB/s counts device bytes. A scrub reads the allocated bytes (`rzpool list -Hp -o alloc`; parity \
         included on RAID-Z) times the mirror width; raw read = the same bytes per device read from the start \
         of every image in parallel. A resilver writes what `rzpool status` calls `resilvered X` to the new \
         device (3 significant digits); raw write = that many bytes written with fsync, to a fresh file and \
         in place over the start of the rebuilt device's image (what a resilver does), the faster of the \
         two counting (one prepared random buffer, no generation in the timing). Raw rates are measured \
         after rzfs and again after the peers: mean, both runs in brackets. \
         \"data MB/s\" = data written / seconds, the figure that compares the systems on the same data; \
         rzfs / btrfs = btrfs seconds / rzfs seconds.\n"
    );
    let _ = writeln!(o, "Goals:\n");
    for g in v["goals"].as_array().into_iter().flatten() {
        let _ = writeln!(o, "- {}", g["goal"].as_str().unwrap_or("?"));
    }
    let layouts = v["layouts"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(o, "\n### Scrub\n");
    table(&mut o, &layouts, "scrub");
    let _ = writeln!(o, "### Resilver (full rebuild of one device)\n");
    table(&mut o, &layouts, "resilver");
    let _ = writeln!(
        o,
        "Every image here is a file on one disk, so a rebuild's reads and writes share it: its ceiling \
         is the raw read of the bytes it must read (a mirror: one copy of what it writes; RAID-Z: the \
         other columns of every row, ≈ (disks − 1) × what it writes) plus the raw write of what it \
         writes, one after the other (rates from the table above). On separate disks the reads \
         run in parallel on the survivors and the raw write alone is the ceiling (the goal's \
         reference).\n"
    );
    let _ = writeln!(
        o,
        "| layout | read, MiB | written, MiB | shared-disk ceiling s | rzfs resilver s | rzfs / ceiling |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    for lay in &layouts {
        let c = &lay["shared_ceiling"];
        let label = lay["label"].as_str().unwrap_or("?");
        match c["missing"].as_str() {
            Some(m) => {
                let _ = writeln!(o, "| {label} | n/a: {m} |||||");
            }
            None => {
                let _ = writeln!(
                    o,
                    "| {label} | {} | {} | {:.2} | {:.2} | {} |",
                    mb(&c["read_bytes"]),
                    mb(&c["written_bytes"]),
                    c["ceiling_secs"].as_f64().unwrap_or(0.0),
                    c["rzfs_secs"].as_f64().unwrap_or(0.0),
                    ratio(&c["ratio"]),
                );
            }
        }
    }
    let _ = writeln!(o);
    let mut notes = Vec::new();
    for lay in &layouts {
        for s in lay["systems"].as_array().into_iter().flatten() {
            let who =
                format!("{}, {}", lay["label"].as_str().unwrap_or("?"), s["system"].as_str().unwrap_or("?"));
            if let Some(e) = s["error"].as_str() {
                notes.push(format!("- {who}: not available: {}", e.trim()));
            }
            for op in ["scrub", "resilver"] {
                for k in ["error", "error_bytes"] {
                    if let Some(e) = s[op][k].as_str() {
                        notes.push(format!("- {who} {op}: not available: {}", e.trim()));
                    }
                }
            }
        }
        for (k, r) in [("read", &lay["raw"]["read"]), ("write", &lay["raw"]["write"])] {
            for x in r.as_array().into_iter().flatten() {
                if let Some(e) = x["error"].as_str() {
                    notes.push(format!(
                        "- {}, raw {k}: not available: {e}",
                        lay["label"].as_str().unwrap_or("?")
                    ));
                }
            }
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(o, "{}\n", notes.join("\n"));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_leave_room_and_bytes_per_device() {
        for full in [false, true] {
            let s = Sizes::of(full);
            for l in LAYOUTS {
                let need = s.data_mib as f64 * l.expansion() / l.disks() as f64;
                assert!(s.disk_mib(l) as f64 > need * 1.2 + 128.0, "{l:?}");
                if full {
                    // Room for a new 256 MiB btrfs metadata chunk on every device (see disk_mib).
                    assert!(s.disk_mib(l) as f64 > need * 1.3 + 256.0 + 256.0, "{l:?}");
                }
            }
        }
        assert_eq!(copies(Layout::Mirror(2)), 2);
        assert_eq!(copies(Layout::Raidz(2, 6)), 1);
    }

    #[test]
    fn status_parsing() {
        let st = "  pool: tp\n state: ONLINE\n  scan: resilvered 22.3M in 00:00:00 with 0 errors on Wed\nconfig:\n";
        assert_eq!(scan_line(st), "scan: resilvered 22.3M in 00:00:00 with 0 errors on Wed");
        assert_eq!(resilvered(&scan_line(st)).as_deref(), Some("22.3M"));
        let zf = " scrub: resilver completed after 0h0m with 0 errors on Wed\n\t    /x/d0.img  ONLINE       0     0     0  22.3M resilvered\n";
        assert_eq!(scan_line(zf), "scrub: resilver completed after 0h0m with 0 errors on Wed");
        assert_eq!(resilvered("a b"), None);
        assert_eq!(resilvered_device(zf).as_deref(), Some("22.3M"));
        assert_eq!(resilvered_device("errors: none"), None);
        let show = "Label: none\n\tdevid    3 size 256.00MiB used 1 path /dev/loop12\n\tdevid    4 size 256.00MiB used 1 path /dev/loop1\n";
        assert_eq!(btrfs_devid(show, "/dev/loop1").as_deref(), Some("4"));
        assert_eq!(btrfs_devid(show, "/dev/loop3"), None);
    }

    #[test]
    fn goals_and_render() {
        let rz = json!({"system": "rzfs", "alloc_bytes": 100 << 20, "scrub_device_bytes": 200 << 20,
                        "per_device_bytes": 100 << 20,
                        "scrub": {"secs": 2.0, "mbps": 450.0, "data_mbps": 50.0, "resident_after_evict": 0, "loadavg": 1.5},
                        "resilver": {"secs": 4.0, "mbps": 90.0, "data_mbps": 25.0, "status_resilvered": "100M"}});
        let bt = json!({"system": "btrfs", "scrub": {"secs": 1.0, "data_mbps": 100.0}, "resilver": {"secs": 8.0, "data_mbps": 12.0}});
        let zf = json!({"system": "zfsfuse", "error": "zfs-fuse not installed"});
        let raw = json!({"read": [{"mbps": 500.0}, {"error": "boom"}],
                         "write": [{"mbps": 100.0, "fresh_mbps": 80.0, "in_place_mbps": 100.0}],
                         "read_mbps": 500.0, "write_mbps": 100.0});
        let g = goals(&rz, &bt, &raw);
        // RAID-Z of 4: 3 × the written bytes read at 500 MB/s, then written at 100 MB/s.
        let rz_b = json!({"resilver": {"bytes": 100_000_000u64, "secs": 2.0}});
        let c = shared_ceiling(Layout::Raidz(1, 4), &rz_b, &raw);
        assert_eq!(c["read_bytes"], json!(300_000_000u64));
        assert!((c["ceiling_secs"].as_f64().unwrap() - 1.6).abs() < 1e-9, "{c}");
        assert!((c["ratio"].as_f64().unwrap() - 0.8).abs() < 1e-9, "{c}");
        assert_eq!(shared_ceiling(Layout::Mirror(2), &rz_b, &raw)["read_bytes"], json!(100_000_000u64));
        assert!(shared_ceiling(Layout::Mirror(2), &rz, &raw)["missing"].is_string());
        assert_eq!(g["scrub_raw"]["ratio"], json!(0.9));
        assert_eq!(g["scrub_raw"]["met"], json!(true));
        assert_eq!(g["scrub_btrfs"]["ratio"], json!(0.5));
        assert_eq!(g["scrub_btrfs"]["met"], json!(false));
        assert_eq!(g["scrub_btrfs"]["shortfall_pct"], json!(50.0));
        assert_eq!(g["resilver_raw"]["met"], json!(true));
        assert_eq!(g["resilver_btrfs"]["ratio"], json!(2.0));
        let g2 = goals(&json!({"system": "rzfs", "error": "no fuse"}), &bt, &raw);
        assert!(g2["scrub_raw"]["met"].is_null());
        assert_eq!(g2["scrub_raw"]["missing"], json!("rzfs scrub not available"));
        // A failed replace keeps the scrub figure.
        let bt2 = json!({"system": "btrfs", "scrub": {"secs": 1.0, "data_mbps": 100.0},
                         "resilver": {"error": "ENOSPC"}});
        let g3 = goals(&rz, &bt2, &raw);
        assert_eq!(g3["scrub_btrfs"]["ratio"], json!(0.5));
        assert_eq!(g3["resilver_btrfs"]["missing"], json!("btrfs resilver not available"));
        let lay2 = json!({"layout": "raidz2x6", "label": "raidz2 of 6 files", "data_bytes": 32 << 20,
                          "systems": [rz.clone(), bt2], "raw": raw.clone(), "goals": g3});
        let md2 = render(&json!({"data_mib": 32, "goals": [], "layouts": [lay2]}));
        assert!(md2.contains("raidz2 of 6 files, btrfs resilver: not available: ENOSPC"), "{md2}");
        assert!(md2.contains("| 100 (1.00 s) | 0.50 |"), "{md2}");
        assert!(md2.contains("n/a: btrfs resilver not available"), "{md2}");
        let lay = json!({"layout": "mirror2", "label": "mirror of 2 files", "data_bytes": 32 << 20,
                         "systems": [rz, zf, bt], "raw": raw, "goals": g});
        let md = render(&json!({"data_mib": 32, "goals": [{"goal": "scrub ≥ 0.9×"}],
                                "layouts": [lay, {"label": "raidz1 of 4 files", "error": "disk full"}]}));
        assert!(
            md.contains("| mirror of 2 files | 32 | 100 / 200 | 2.00 | 450 | 500 (500, n/a) | 0.90 |"),
            "{md}"
        );
        assert!(md.contains("MET (0.900x)"), "{md}");
        assert!(md.contains("MISSED: 0.500x, 50.0% short of 1.0x (needs 2.000x faster)"), "{md}");
        assert!(md.contains("| 100M | 4.00 | 90 | 100 (fresh 80; in place 100) | 0.90 |"), "{md}");
        assert_eq!(human_bytes("10.3M"), Some(10_800_333));
        assert_eq!(human_bytes("512B"), Some(512));
        assert_eq!(human_bytes("1.50G"), Some(1_610_612_736));
        assert_eq!(human_bytes("12"), None);
        assert!(md.contains("mirror of 2 files, zfsfuse: not available: zfs-fuse not installed"), "{md}");
        assert!(md.contains("mirror of 2 files, raw read: not available: boom"), "{md}");
        assert!(md.contains("| raidz1 of 4 files | not available: disk full |"), "{md}");
        assert!(render(&json!({"error": "skipped"})).contains("not available: skipped"));
    }
}
