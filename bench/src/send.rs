//! Issue 14: `rzfs send` and `rzfs receive` next to the raw device and to rzfs's own write
//! rate, in one run.
//!
//! One pool on one zero-filled image file (never sparse; compression off, ashift 12, atime
//! off), a private `rzfsd` on its own socket:
//!
//! - **setup** (untimed but for the write): D MiB of PRNG data (incompressible) written
//!   through the FUSE mount in 1 MiB writes and fsynced — rzfs's own write rate, the
//!   reference of the receive —, `rzfs snapshot POOL@a`, `rzpool sync`, the allocated bytes
//!   (`rzpool list -Hp -o alloc`). The full stream is saved to a file next to the image
//!   (`rzfs send POOL@a > FILE`) and its size compared with `rzfs send -nP`'s estimate. Then
//!   1% of the file's 128 KiB blocks (the recordsize) are overwritten at random block-aligned
//!   offsets with fresh PRNG bytes, fsync, `rzfs snapshot POOL@b`, `rzpool sync`; export.
//! - **raw read**: the allocated bytes read from the start of the image in 1 MiB reads, cold
//!   (page cache evicted, `sys::evict`), right before and right after the full send; the
//!   mean is its reference. The VM host's cache of the disk cannot be dropped from inside, so
//!   those bytes are read once beforehand, untimed, with O_DIRECT (all reads then meet the
//!   same warm host cache, as in the end-to-end section); a third read after the receive is
//!   recorded, not counted.
//! - each timed operation runs on a fresh `rzfsd` that imports the pool (no ARC carried
//!   over) with the image (and the stream file) evicted, and is exported afterwards: the full
//!   send `rzfs send POOL@a > /dev/null`, the incremental send `rzfs send -i @a POOL@b >
//!   /dev/null` and the receive `rzfs receive -u POOL/copy < FILE` (the received snapshot is
//!   written in a sync task at its end, so its time includes the data reaching the image).
//!   Every command is timed from its start to its exit (client, daemon, stream I/O), under
//!   coreutils `timeout` (the cap turns a hang into an error).
//!
//! Goals are reported as met or missed, never asserted.

use crate::e2e;
use crate::kernels::Prng;
use crate::layouts::{images, write_file};
use crate::libpool::Layout;
use crate::report::f0;
use crate::sys::{self, mbps};
use crate::Ctx;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const MIB: u64 = 1 << 20;
/// The recordsize: the unit the incremental change is made of.
const BLOCK: u64 = 128 << 10;
const POOL: &str = "rzsend";
const FILE: &str = "data.bin";
/// Cold runs of each send, and raw reads around the full sends; the fastest of each counts.
const RUNS: usize = 3;
/// The goals of issue 14: (key, text, target, whether the ratio must stay at or under it).
const GOALS: [(&str, &str, f64, bool); 3] = [
    ("send_raw", "full send ≥ 0.9× the raw sequential read rate of its allocated bytes", 0.9, false),
    (
        "recv_write",
        "receive ≥ 0.9× rzfs's own write rate (the same data written through the FUSE mount)",
        0.9,
        false,
    ),
    (
        "incr_full",
        "incremental send after changing 1% of the blocks ≤ 5% of the full send's time",
        0.05,
        true,
    ),
];

/// Sizes of one run.
#[derive(Clone, Debug, PartialEq)]
struct Sizes {
    data_mib: u64,
    /// Cap on one command.
    cap_s: u64,
    /// Why the data is smaller than asked for, if it is.
    note: Option<String>,
}

/// The image: the data twice (the source and its received copy), the 1% change and
/// metadata, with room to spare (the allocator is not pushed near full).
fn image_mib(data_mib: u64) -> u64 {
    data_mib * 5 / 2 + 256
}

/// What the work directory must hold: the image, the saved stream (the data plus its
/// records) and 1 GiB of margin.
fn need_bytes(data_mib: u64) -> u64 {
    (image_mib(data_mib) + data_mib * 102 / 100 + 1024) * MIB
}

impl Sizes {
    /// `avail`: free bytes under the work directory, if known.
    fn choose(full: bool, avail: Option<u64>) -> Result<Sizes, String> {
        if !full {
            return Ok(Sizes { data_mib: 32, cap_s: 60, note: None });
        }
        let fits = |mib: u64| avail.is_none_or(|a| a >= need_bytes(mib));
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        if fits(4096) {
            Ok(Sizes { data_mib: 4096, cap_s: 900, note: None })
        } else if fits(2048) {
            let a = avail.unwrap_or(0);
            Ok(Sizes {
                data_mib: 2048,
                cap_s: 900,
                note: Some(format!(
                    "2048 MiB instead of 4096: {:.1} GiB free in the work directory, 4096 MiB needs {:.1} GiB",
                    gib(a),
                    gib(need_bytes(4096))
                )),
            })
        } else {
            Err(format!(
                "{:.1} GiB free in the work directory; even 2048 MiB of data needs {:.1} GiB",
                gib(avail.unwrap_or(0)),
                gib(need_bytes(2048))
            ))
        }
    }
}

/// Free bytes of the filesystem holding `dir` (`df`), if it can tell.
pub(crate) fn avail_bytes(dir: &Path) -> Option<u64> {
    let out = sys::must(&["df", "--output=avail", "-B1", &dir.to_string_lossy()], &[]).ok()?;
    out.lines().last()?.trim().parse().ok()
}

/// The last line of `rzfs send -nP`: `size\tN`.
fn parse_size(out: &str) -> Option<u64> {
    out.lines().rev().find_map(|l| l.strip_prefix("size\t")).and_then(|n| n.trim().parse().ok())
}

/// The image, the stream file, the mount point and the daemon's socket.
struct Rig<'a> {
    c: &'a Ctx,
    s: Sizes,
    dir: PathBuf,
    /// The directory `rzpool import -d` searches: the image alone.
    img_dir: PathBuf,
    img: PathBuf,
    mnt: PathBuf,
    stream: PathBuf,
    sock: String,
}

impl Rig<'_> {
    fn env(&self) -> [(&str, &str); 1] {
        [("RZFS_SOCKET", self.sock.as_str())]
    }
    fn data_bytes(&self) -> u64 {
        self.s.data_mib * MIB
    }
    fn path_s(p: &Path) -> String {
        p.to_string_lossy().into_owned()
    }
    fn start(&self) -> Result<e2e::Daemon, String> {
        e2e::start_rzfsd(&self.c.bin_dir, Path::new(&self.sock), &self.env(), &self.dir.join("rzfsd.log"))
    }
    /// A FUSE mount left behind by a daemon that failed would stand in the next one's way.
    fn unmount_stale(&self) {
        if sys::is_mounted(&self.mnt) {
            let _ = sys::run(&["fusermount", "-u", "-z", &Self::path_s(&self.mnt)], &[]);
        }
    }
    /// `argv` under `timeout` with standard input from `stdin` (else /dev/null) and standard
    /// output to `stdout` (else /dev/null: never a terminal, never a pipe we would have to
    /// drain); returns the seconds from start to exit.
    fn timed(&self, argv: &[&str], stdin: Option<&Path>, stdout: Option<&Path>) -> Result<f64, String> {
        let open = |p: &Path, w: bool| {
            if w { File::create(p) } else { File::open(p) }.map_err(|e| format!("{}: {e}", p.display()))
        };
        let mut cmd = Command::new("timeout");
        cmd.arg(self.s.cap_s.to_string()).args(argv).envs(self.env());
        cmd.stdin(match stdin {
            Some(p) => Stdio::from(open(p, false)?),
            None => Stdio::null(),
        });
        cmd.stdout(match stdout {
            Some(p) => Stdio::from(open(p, true)?),
            None => Stdio::null(),
        });
        cmd.stderr(Stdio::piped());
        let t0 = Instant::now();
        let o = cmd.output().map_err(|e| format!("cannot run timeout: {e}"))?;
        let secs = t0.elapsed().as_secs_f64();
        match o.status.code() {
            Some(0) => Ok(secs),
            Some(124) => Err(format!("`{}` did not finish within {} s", argv.join(" "), self.s.cap_s)),
            _ => Err(format!(
                "`{}` failed ({}): {}",
                argv.join(" "),
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        }
    }
    /// A fresh `rzfsd` importing the pool runs `f`; the pool is exported and the daemon
    /// stopped whatever happened.
    fn session(&self, f: impl FnOnce() -> Result<Value, String>) -> Value {
        let env = self.env();
        let rzpool = self.c.bin("rzpool");
        let mut dm = match self.start() {
            Ok(d) => d,
            Err(e) => return json!({"error": e}),
        };
        let res = sys::must(&[&rzpool, "import", "-N", "-d", &Self::path_s(&self.img_dir), POOL], &env)
            .and_then(|_| f());
        let ex = sys::must(&[&rzpool, "export", POOL], &env);
        dm.stop();
        self.unmount_stale();
        outcome(res, ex)
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

/// The fastest of `runs` (rows or {"error": ...}) with all of them under "runs"; the first
/// error when none succeeded.
fn fastest(runs: Vec<Value>) -> Value {
    let secs = |x: &Value| x["secs"].as_f64().unwrap_or(f64::INFINITY);
    let best = runs.iter().filter(|x| x["secs"].is_f64()).min_by(|a, b| secs(a).total_cmp(&secs(b)));
    let mut v = best
        .or_else(|| runs.iter().find(|x| x.get("error").is_some()))
        .cloned()
        .unwrap_or_else(|| json!({"error": "no run"}));
    v["runs"] = json!(runs);
    v
}

/// A timed measurement: `bytes` per `secs` is its MB/s.
fn row(what: &str, bytes: u64, secs: f64, resident: Option<u64>) -> Value {
    json!({"what": what, "bytes": bytes, "secs": secs, "mbps": mbps(bytes, secs),
           "resident_after_evict": resident, "loadavg": sys::loadavg()})
}

/// Reads the first `n` bytes of `p` in 1 MiB reads; returns the bytes read.
fn read_prefix(p: &Path, n: u64) -> Result<u64, String> {
    let mut f = File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
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

/// The allocated bytes read sequentially from the start of the image, cold.
fn raw_read(r: &Rig, bytes: u64) -> Value {
    let res = (|| {
        let left = sys::evict(std::slice::from_ref(&r.img))?;
        let t0 = Instant::now();
        let n = read_prefix(&r.img, bytes)?;
        let secs = t0.elapsed().as_secs_f64();
        Ok(row("raw sequential read of the allocated bytes from the image, 1 MiB reads, cold", n, secs, left))
    })();
    res.unwrap_or_else(|e: String| json!({"error": e}))
}

/// The blocks the incremental change overwrites: 1% of `total` (at least one), distinct,
/// in random order.
fn pick_blocks(total: u64, seed: u64) -> Vec<u64> {
    let n = ((total as f64 * 0.01).round() as u64).clamp(1, total.max(1));
    let mut rng = Prng::new(seed);
    let mut seen = HashSet::new();
    let mut v = Vec::with_capacity(n as usize);
    while (v.len() as u64) < n {
        let b = rng.next_u64() % total.max(1);
        if seen.insert(b) {
            v.push(b);
        }
    }
    v
}

/// Overwrites `blocks` of `path` (128 KiB each, block-aligned) with fresh PRNG bytes, then
/// fsync.
fn change_blocks(path: &Path, blocks: &[u64], seed: u64) -> Result<(), String> {
    let f =
        std::fs::OpenOptions::new().write(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rng = Prng::new(seed);
    let mut buf = vec![0u8; BLOCK as usize];
    for &b in blocks {
        rng.fill(&mut buf);
        f.write_all_at(&buf, b * BLOCK).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    f.sync_all().map_err(|e| format!("fsync {}: {e}", path.display()))
}

/// The pool, its data, the two snapshots and the saved full stream (see the module comment).
fn setup(r: &Rig, log: &mut dyn FnMut(&str)) -> Result<Value, String> {
    std::fs::create_dir_all(&r.mnt).map_err(|e| format!("{}: {e}", r.mnt.display()))?;
    e2e::zero_fill(std::slice::from_ref(&r.img), image_mib(r.s.data_mib))?;
    let env = r.env();
    let (rzpool, rzfs) = (r.c.bin("rzpool"), r.c.bin("rzfs"));
    let (m, img) = (Rig::path_s(&r.mnt), Rig::path_s(&r.img));
    let (snap_a, snap_b) = (format!("{POOL}@a"), format!("{POOL}@b"));
    let mut dm = r.start()?;
    let res = (|| -> Result<Value, String> {
        let mut argv = vec![rzpool.as_str(), "create", "-f", "-o", "ashift=12", "-O", "compression=off"];
        argv.extend(["-O", "atime=off", "-m", &m, POOL, &img]);
        sys::must(&argv, &env)?;
        let file = r.mnt.join(FILE);
        let secs = write_file(&file, r.s.data_mib, 0x5E4D)?;
        let write = row("write through the FUSE mount, 1 MiB writes then fsync", r.data_bytes(), secs, None);
        log(&format!("send: wrote {} MiB through FUSE at {} MB/s", r.s.data_mib, f0(&write["mbps"])));
        sys::must(&[&rzfs, "snapshot", &snap_a], &env)?;
        sys::must(&[&rzpool, "sync", POOL], &env)?;
        let a = sys::must(&[&rzpool, "list", "-Hp", "-o", "alloc", POOL], &env)?;
        let alloc: u64 = a.trim().parse().map_err(|_| format!("rzpool list -Hp -o alloc said {a:?}"))?;
        let save_secs = r.timed(&[&rzfs, "send", &snap_a], None, Some(&r.stream))?;
        let stream_bytes = std::fs::metadata(&r.stream).map_err(|e| e.to_string())?.len();
        let est = sys::must(&[&rzfs, "send", "-nP", &snap_a], &env)?;
        let total = r.data_bytes() / BLOCK;
        let blocks = pick_blocks(total, 0x1D1F);
        change_blocks(&file, &blocks, 0xB10C)?;
        sys::must(&[&rzfs, "snapshot", &snap_b], &env)?;
        sys::must(&[&rzpool, "sync", POOL], &env)?;
        let est_i = sys::must(&[&rzfs, "send", "-nP", "-i", "@a", &snap_b], &env)?;
        Ok(json!({"write": write, "alloc_bytes": alloc, "stream_bytes": stream_bytes,
                  "stream_save_secs": save_secs, "stream_estimate_bytes": parse_size(&est),
                  "incr_stream_estimate_bytes": parse_size(&est_i),
                  "blocks_total": total, "blocks_changed": blocks.len()}))
    })();
    let ex = sys::must(&[&rzpool, "export", POOL], &env);
    dm.stop();
    r.unmount_stale();
    let v = res?;
    ex.map_err(|e| format!("export afterwards: {e}"))?;
    Ok(v)
}

/// A goal's verdict: the ratio, whether it is met, and how far off it is.
fn verdict(id: &str, text: &str, target: f64, at_most: bool, ratio: Result<f64, String>) -> Value {
    match ratio {
        Ok(x) => {
            let met = if at_most { x <= target } else { x >= target };
            let speedup = match (met, at_most) {
                (true, _) => 1.0,
                (false, true) => x / target,
                (false, false) => target / x,
            };
            json!({"id": id, "goal": text, "target": target, "at_most": at_most, "ratio": x, "met": met,
                   "speedup_needed": speedup})
        }
        Err(e) => {
            json!({"id": id, "goal": text, "target": target, "at_most": at_most, "met": null, "missing": e})
        }
    }
}

fn goals(v: &Value) -> Value {
    let get = |k: &str, f: &str| -> Result<f64, String> {
        if let Some(e) = v[k]["error"].as_str() {
            return Err(format!("{k}: {e}"));
        }
        v[k][f].as_f64().filter(|x| *x > 0.0).ok_or(format!("no {k} figure"))
    };
    let raw = v["raw"]["mbps"].as_f64().ok_or_else(|| "no raw read figure".to_string());
    let g: Vec<Value> = GOALS
        .iter()
        .map(|&(id, text, target, at_most)| {
            let ratio = match id {
                "send_raw" => get("full_send", "mbps").and_then(|s| raw.clone().map(|r| s / r)),
                "recv_write" => get("receive", "mbps").and_then(|x| get("write", "mbps").map(|w| x / w)),
                _ => get("incr_send", "secs").and_then(|i| get("full_send", "secs").map(|f| i / f)),
            };
            verdict(id, text, target, at_most, ratio)
        })
        .collect();
    json!(g)
}

/// The section.
pub fn run(c: &Ctx, log: &mut dyn FnMut(&str)) -> Value {
    let t0 = Instant::now();
    let dir = c.work.join("send");
    let s = match std::fs::create_dir_all(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))
        .and_then(|_| Sizes::choose(c.full, avail_bytes(&c.work)))
    {
        Ok(s) => s,
        Err(e) => return json!({"error": e}),
    };
    if let Some(n) = &s.note {
        log(&format!("send: {n}"));
    }
    let img_dir = dir.join("img");
    let img = images(&img_dir, Layout::Single).remove(0);
    let r = Rig {
        c,
        s: s.clone(),
        img_dir,
        img,
        mnt: dir.join("mnt"),
        stream: dir.join("full.zstream"),
        sock: Rig::path_s(&dir.join("rzfsd.sock")),
        dir,
    };
    let mut v = json!({"data_mib": s.data_mib, "data_bytes": r.data_bytes(), "image_mib": image_mib(s.data_mib),
                       "cap_s": s.cap_s, "size_note": s.note, "block_bytes": BLOCK});
    let set = match setup(&r, log) {
        Ok(x) => x,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&r.dir);
            v["error"] = json!(format!("setup: {e}"));
            return v;
        }
    };
    for (k, x) in set.as_object().into_iter().flatten() {
        v[k] = x.clone();
    }
    let alloc = v["alloc_bytes"].as_u64().unwrap_or(0);
    let stream_bytes = v["stream_bytes"].as_u64().unwrap_or(0);
    let rzfs = c.bin("rzfs");
    // The VM host caches the virtual disk and cannot be told to drop it: the allocated bytes
    // are read once, untimed, with O_DIRECT, so the raw reads and the sends meet the same
    // (warm) host cache, as in the end-to-end section.
    let mib = alloc.div_ceil(MIB).to_string();
    let (ifile, count) = (format!("if={}", Rig::path_s(&r.img)), format!("count={mib}"));
    let warm =
        sys::must(&["dd", &ifile, "of=/dev/null", "bs=1M", &count, "iflag=direct", "status=none"], &[]);
    v["host_cache_warmup"] = json!(warm.err().unwrap_or_else(|| "ok".into()));
    // Rounds of (raw read, full send), closed by a raw read: every send is bracketed by raw
    // reads taken in the same state of the disk and of the host cache.
    let mut raws = vec![raw_read(&r, alloc)];
    log(&format!("send: raw read {} MB/s", f0(&raws[0]["mbps"])));
    let mut fulls = Vec::new();
    for i in 1..=RUNS {
        let f = r.session(|| {
            let left = sys::evict(std::slice::from_ref(&r.img))?;
            let secs = r.timed(&[&rzfs, "send", &format!("{POOL}@a")], None, None)?;
            let mut x = row("rzfs send POOL@a > /dev/null, cold", alloc, secs, left);
            x["stream_bytes"] = json!(stream_bytes);
            x["stream_mbps"] = json!(mbps(stream_bytes, secs));
            Ok(x)
        });
        log(&format!("send: full send {i}/{RUNS}: {}", brief(&f)));
        fulls.push(f);
        let raw = raw_read(&r, alloc);
        log(&format!("send: raw read {} MB/s", f0(&raw["mbps"])));
        raws.push(raw);
    }

    let incr_bytes = v["incr_stream_estimate_bytes"].as_u64().unwrap_or(0);
    let mut incrs = Vec::new();
    for i in 1..=RUNS {
        let x = r.session(|| {
            let left = sys::evict(std::slice::from_ref(&r.img))?;
            let secs = r.timed(&[&rzfs, "send", "-i", "@a", &format!("{POOL}@b")], None, None)?;
            Ok(row("rzfs send -i @a POOL@b > /dev/null, cold", incr_bytes, secs, left))
        });
        log(&format!("send: incremental send {i}/{RUNS}: {}", brief(&x)));
        incrs.push(x);
    }

    let data = r.data_bytes();
    let mut recv = r.session(|| {
        let left = sys::evict(&[r.img.clone(), r.stream.clone()])?;
        let secs = r.timed(&[&rzfs, "receive", "-u", &format!("{POOL}/copy")], Some(&r.stream), None)?;
        // Untimed: the received snapshot is there, with the source's referenced bytes.
        let l = sys::must(&[&rzfs, "list", "-Hp", "-t", "snapshot", "-o", "name,referenced"], &r.env())?;
        let refd = |name: &str| {
            l.lines().find_map(|x| {
                let (n, b) = x.split_once('\t')?;
                (n == name).then(|| b.trim().parse::<u64>().ok()).flatten()
            })
        };
        let copy = refd(&format!("{POOL}/copy@a"))
            .ok_or_else(|| format!("no {POOL}/copy@a after the receive: {l}"))?;
        let mut x = row("rzfs receive -u POOL/copy < the saved full stream, cold", data, secs, left);
        x["stream_mbps"] = json!(mbps(stream_bytes, secs));
        x["referenced_source"] = json!(refd(&format!("{POOL}@a")));
        x["referenced_copy"] = json!(copy);
        Ok(x)
    });
    log(&format!("send: receive {}", brief(&recv)));
    if recv.get("secs").is_some() && recv["referenced_copy"] != recv["referenced_source"] {
        recv["note"] = json!("referenced bytes of the copy differ from the source's");
    }

    // Not in the reference: the same read once the pool has grown by the received copy (the
    // host cache of the image may have changed since).
    let after = raw_read(&r, alloc);
    log(&format!("send: raw read after the receive {} MB/s", f0(&after["mbps"])));
    let _ = std::fs::remove_dir_all(&r.dir);
    let ok: Vec<f64> = raws.iter().filter_map(|x| x["mbps"].as_f64()).collect();
    let mean = (!ok.is_empty()).then(|| ok.iter().sum::<f64>() / ok.len() as f64);
    let mut raw = fastest(raws);
    raw["mean_mbps"] = json!(mean);
    raw["after_receive"] = after;
    v["raw"] = raw;
    v["full_send"] = fastest(fulls);
    v["incr_send"] = fastest(incrs);
    v["receive"] = recv;
    v["goals"] = goals(&v);
    v["wall_secs"] = json!(t0.elapsed().as_secs_f64());
    v
}

fn brief(x: &Value) -> String {
    match (x["error"].as_str(), x["secs"].as_f64()) {
        (Some(e), _) => format!("error: {e}"),
        (_, Some(s)) => format!("{s:.2} s, {} MB/s", f0(&x["mbps"])),
        _ => "n/a".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// RESULTS.md

fn mb(v: &Value) -> String {
    v.as_f64().map_or_else(|| "n/a".into(), |b| format!("{:.1}", b / MIB as f64))
}

/// "MET (0.950x)", "MISSED: 0.620x, needs 1.452x faster", or "n/a: why".
fn goal_cell(g: &Value) -> String {
    let x = g["ratio"].as_f64().unwrap_or(0.0);
    match g["met"].as_bool() {
        Some(true) => format!("MET ({x:.3}x)"),
        Some(false) => format!(
            "MISSED: {x:.3}x, {} {}x (needs {:.3}x faster)",
            if g["at_most"] == true { "above" } else { "below" },
            g["target"],
            g["speedup_needed"].as_f64().unwrap_or(0.0)
        ),
        None => format!("n/a: {}", g["missing"].as_str().unwrap_or("?")),
    }
}

/// The section in RESULTS.md.
pub fn render(v: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## Send and receive (issue 14)\n");
    // Measured in a run of its own (`--only send`) and merged into a full run's results.
    if let Some(run) = v["separate_run"].as_str() {
        let _ = writeln!(o, "*{run}*\n");
    }
    if let Some(e) = v["error"].as_str() {
        let _ = writeln!(o, "not available: {e}\n");
        return o;
    }
    let _ = writeln!(
        o,
        "{} MiB of random bytes written through the FUSE mount of a pool on one zero-filled image file \
         ({} MiB; compression off, ashift 12, atime off) and fsynced: rzfs's own write rate. Then `rzfs \
         snapshot POOL@a` and `rzpool sync`; the full stream saved to a file next to the image (`rzfs send \
         POOL@a > FILE`, untimed); {} of the file's {} 128 KiB blocks (1%) overwritten at random \
         block-aligned offsets with fresh random bytes, fsync, `rzfs snapshot POOL@b`. Each timed command \
         then runs on a fresh `rzfsd` importing the pool (no cache carried over), with the image and the \
         stream file evicted from the page cache, from its start to its exit (client, daemon and stream \
         I/O): `rzfs send POOL@a > /dev/null`, `rzfs send -i @a POOL@b > /dev/null`, `rzfs receive -u \
         POOL/copy < FILE` (it ends with the sync of the received snapshot: its time includes the data \
         reaching the image). Raw read = the allocated bytes (`rzpool list -Hp -o alloc` after @a) read \
         from the start of the image in 1 MiB reads, cold. The full send runs {} times, each between two \
         raw reads; the incremental send {} times; the fastest run of each counts (all listed); the \
         receive and the write run once. The VM host's cache of the disk cannot be dropped from \
         inside, so the allocated bytes are read once beforehand, untimed, with O_DIRECT: the raw reads \
         and the sends meet the same warm host cache. A last raw read after the receive (the pool then \
         holds the copy too) is shown, not counted.{}\n",
        v["data_mib"],
        v["image_mib"],
        v["blocks_changed"],
        v["blocks_total"],
        v["full_send"]["runs"].as_array().map_or(0, Vec::len),
        v["incr_send"]["runs"].as_array().map_or(0, Vec::len),
        v["size_note"].as_str().map_or_else(String::new, |n| format!(" Size: {n}."))
    );
    let _ = writeln!(
        o,
        "MB/s: raw read and full send = allocated bytes / s; write and receive = data bytes / s; \
         incremental send = its stream bytes / s; the stream rate (stream bytes / s) alongside. The image \
         and the stream file are on one disk: the receive reads the stream and writes the pool on it at \
         the same time, the write through FUSE only writes.\n"
    );
    let _ = writeln!(
        o,
        "| measurement | MiB | s | MB/s | runs, MB/s | stream MB/s | image bytes resident after eviction | load |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---|---:|---:|---:|");
    let mut notes = Vec::new();
    for (k, label) in [
        ("raw", "raw sequential read of the allocated bytes (1 MiB reads)"),
        ("full_send", "full send: `rzfs send POOL@a > /dev/null`"),
        ("receive", "receive: `rzfs receive -u POOL/copy < FILE`"),
        ("write", "write through the FUSE mount (1 MiB writes, fsync)"),
        ("incr_send", "incremental send: `rzfs send -i @a POOL@b > /dev/null`"),
    ] {
        let x = &v[k];
        let mut runs: Vec<String> = Vec::new();
        for (i, r) in x["runs"].as_array().into_iter().flatten().enumerate() {
            match r["error"].as_str() {
                Some(e) => {
                    runs.push("error".into());
                    notes.push(format!("- {label}, run {}: not available: {}", i + 1, e.trim()));
                }
                None => runs.push(f0(&r["mbps"])),
            }
        }
        let mut cell = runs.join(", ");
        if k == "raw" {
            if let Some(m) = x["mean_mbps"].as_f64() {
                let _ = write!(cell, "; mean {m:.0}");
            }
            let a = &x["after_receive"];
            match (a["mbps"].as_f64(), a["error"].as_str()) {
                (Some(m), _) => {
                    let _ = write!(cell, "; after the receive, not counted: {m:.0}");
                }
                (_, Some(e)) => {
                    notes.push(format!("- raw read after the receive: not available: {}", e.trim()))
                }
                _ => {}
            }
        }
        if let Some(e) = x["error"].as_str() {
            let _ = writeln!(o, "| {label} | not available: {} | | | {cell} | | | |", e.trim());
            continue;
        }
        let _ = writeln!(
            o,
            "| {label} | {} | {} | {} | {cell} | {} | {} | {} |",
            mb(&x["bytes"]),
            secs(&x["secs"]),
            f0(&x["mbps"]),
            x["stream_mbps"].as_f64().map_or_else(String::new, |s| format!("{s:.0}")),
            res(&x["resident_after_evict"]),
            load(&x["loadavg"]),
        );
    }
    if !notes.is_empty() {
        let _ = writeln!(o, "\n{}", notes.join("\n"));
    }
    let _ = writeln!(
        o,
        "\nStreams: full {} bytes (`rzfs send -nP` estimate {}), incremental {} bytes (estimate) for {} \
         changed bytes; allocated {} bytes. Received copy: {} referenced bytes (source {}).{}\n",
        res(&v["stream_bytes"]),
        res(&v["stream_estimate_bytes"]),
        res(&v["incr_stream_estimate_bytes"]),
        v["blocks_changed"].as_u64().unwrap_or(0) * BLOCK,
        res(&v["alloc_bytes"]),
        res(&v["receive"]["referenced_copy"]),
        res(&v["receive"]["referenced_source"]),
        v["receive"]["note"].as_str().map_or_else(String::new, |n| format!(" Note: {n}.")),
    );
    let _ = writeln!(o, "| goal | ratio | verdict |\n|---|---:|---|");
    for g in v["goals"].as_array().into_iter().flatten() {
        let ratio = g["ratio"].as_f64().map_or_else(|| "n/a".into(), |x| format!("{x:.3}"));
        let _ = writeln!(o, "| {} | {ratio} | {} |", g["goal"].as_str().unwrap_or("?"), goal_cell(g));
    }
    let _ = writeln!(
        o,
        "\nRatios: fastest full send MB/s / fastest raw read MB/s (the same allocated bytes); receive \
         MB/s / write MB/s (the same data bytes); fastest incremental send s / fastest full send s.\n"
    );
    o
}

fn secs(v: &Value) -> String {
    v.as_f64().map_or_else(|| "n/a".into(), |x| format!("{x:.3}"))
}

fn res(v: &Value) -> String {
    v.as_u64().map_or_else(|| "n/a".into(), |b| b.to_string())
}

fn load(v: &Value) -> String {
    v.as_f64().map_or_else(|| "n/a".into(), |x| format!("{x:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_space() {
        assert_eq!(Sizes::choose(false, Some(0)).unwrap().data_mib, 32);
        let big = Sizes::choose(true, Some(100 << 30)).unwrap();
        assert_eq!((big.data_mib, big.note.clone()), (4096, None));
        assert_eq!(Sizes::choose(true, None).unwrap().data_mib, 4096);
        let mid = Sizes::choose(true, Some(need_bytes(2048) + 1)).unwrap();
        assert_eq!(mid.data_mib, 2048);
        assert!(mid.note.unwrap().contains("instead of 4096"));
        assert!(Sizes::choose(true, Some(1 << 30)).is_err());
        // Room for the source, its received copy and the change.
        for d in [32, 2048, 4096] {
            assert!(image_mib(d) as f64 > 2.0 * d as f64 * 1.15 + 128.0);
        }
    }

    #[test]
    fn blocks_and_parsing() {
        let b = pick_blocks(32768, 7);
        assert_eq!(b.len(), 328);
        assert_eq!(b.iter().collect::<HashSet<_>>().len(), 328);
        assert!(b.iter().all(|x| *x < 32768));
        assert_eq!(pick_blocks(256, 7).len(), 3);
        assert_eq!(pick_blocks(10, 7).len(), 1);
        assert_eq!(parse_size("full\tp@a\t123\nsize\t123\n"), Some(123));
        assert_eq!(parse_size("nothing"), None);
    }

    #[test]
    fn goals_and_render() {
        let raw1 = json!({"bytes": 34_000_000u64, "secs": 0.1, "mbps": 340.0, "resident_after_evict": 0, "loadavg": 1.0});
        let raw2 = json!({"bytes": 34_000_000u64, "secs": 0.2, "mbps": 170.0});
        let mut raw = fastest(vec![raw2, json!({"error": "boom"}), raw1]);
        raw["mean_mbps"] = json!(255.0);
        raw["after_receive"] = json!({"mbps": 99.0});
        let full = fastest(vec![
            json!({"bytes": 34_000_000u64, "secs": 0.2, "mbps": 170.0, "stream_mbps": 168.0, "resident_after_evict": 0}),
            json!({"bytes": 34_000_000u64, "secs": 0.4, "mbps": 85.0}),
        ]);
        assert!(fastest(vec![json!({"error": "a"}), json!({"error": "b"})])["error"] == "a");
        let mut v = json!({"data_mib": 32, "image_mib": 336, "blocks_total": 256, "blocks_changed": 3,
            "alloc_bytes": 34_000_000u64, "stream_bytes": 33_600_000u64,
            "write": {"bytes": 33_554_432u64, "secs": 0.5, "mbps": 100.0},
            "raw": raw, "full_send": full,
            "incr_send": fastest(vec![json!({"secs": 0.02, "mbps": 20.0})]),
            "receive": {"error": "cannot receive: boom"}});
        v["goals"] = goals(&v);
        let g = v["goals"].as_array().unwrap();
        assert_eq!(g[0]["met"], json!(false));
        assert!((g[0]["ratio"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        assert!(g[1]["met"].is_null());
        assert!((g[2]["ratio"].as_f64().unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(g[2]["met"], json!(false));
        assert!((g[2]["speedup_needed"].as_f64().unwrap() - 2.0).abs() < 1e-9);
        let md = render(&v);
        assert!(
            md.contains("| 32.4 | 0.100 | 340 | 170, error, 340; mean 255; after the receive, not counted: 99 |  | 0 | 1.00 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "- raw sequential read of the allocated bytes (1 MiB reads), run 2: not available: boom"
            ),
            "{md}"
        );
        assert!(md.contains("| 32.4 | 0.200 | 170 | 170, 85 | 168 | 0 | n/a |"), "{md}");
        assert!(md.contains("The full send runs 2 times"), "{md}");
        assert!(
            md.contains(
                "| receive: `rzfs receive -u POOL/copy < FILE` | not available: cannot receive: boom |"
            ),
            "{md}"
        );
        assert!(md.contains("(`rzfs send -nP` estimate n/a)"), "{md}");
        assert!(md.contains("MISSED: 0.500x, below 0.9x (needs 1.800x faster)"), "{md}");
        assert!(md.contains("MISSED: 0.100x, above 0.05x (needs 2.000x faster)"), "{md}");
        assert!(md.contains("n/a: receive: cannot receive: boom"), "{md}");
        let ok = verdict("x", "t", 0.05, true, Ok(0.01));
        assert_eq!(goal_cell(&ok), "MET (0.010x)");
        assert!(render(&json!({"error": "skipped"})).contains("not available: skipped"));
        let sep = render(&json!({"separate_run": "Measured apart", "error": "e"}));
        assert!(sep.contains("*Measured apart*"));
    }
}
