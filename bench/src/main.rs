//! `rzfs-bench`: rzfs against the raw devices and its peers, side by side (issue 4).
//!
//! ```text
//! rzfs-bench run (--smoke|--full) --out-dir DIR --bin-dir DIR [--work DIR] [--shim SO] [--keep]
//!                [--only kernels,raidz,peer,e2e,layouts,meta,scan,send,vol]
//! rzfs-bench copyout --dir DISKS --fs POOL/FS --path PATH [--arc-max BYTES] [--hash]
//! rzfs-bench render --json results.json --md RESULTS.md
//! ```
//!
//! `run` measures, in order: codec kernels (next to memcpy), OpenZFS raidz_test on the same
//! machine, end-to-end reads of a big file on a raidz1 pool written by zfs-fuse, the
//! per-layout end-to-end rates, metadata and the memory walk, then scrub and resilver per
//! layout, then send and receive, then volumes (loop device and NBD), and writes
//! DIR/results.json and DIR/RESULTS.md (`--only` runs a subset). `copyout` is one in-process library read, run as a child so its peak RSS
//! is its own. bench/run.sh builds everything and calls `run`.
#![forbid(unsafe_code)]

mod btrfs;
mod copyout;
mod e2e;
mod kernels;
mod layouts;
mod libpool;
mod meta;
mod nbdc;
mod raidz_peer;
mod report;
mod scan;
mod send;
mod sys;
mod vol;

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The raidz_test implementations kept by the shim: the fastest OpenZFS has for each
/// architecture (on a CPU without one of them, raidz_test skips it as unsupported).
const PEER_IMPLS: &str = "avx512bw,avx2,aarch64_neonx2,powerpc_altivec";

/// What every end-to-end section needs: the mode, where to put images, the tools.
pub struct Ctx {
    pub full: bool,
    /// Scratch directory for pool images (disk-backed, not tmpfs).
    pub work: PathBuf,
    /// Where rzpool, rzfs, rzfsd and rzdb are.
    pub bin_dir: PathBuf,
    /// This program, for child subcommands (clean peak RSS, crash isolation).
    pub self_exe: PathBuf,
    /// How long to wait for another zfs-fuse daemon to go away.
    pub wait_s: u64,
    /// `--keep`: sections leave their images in place.
    pub keep: bool,
}

impl Ctx {
    pub fn bin(&self, name: &str) -> String {
        self.bin_dir.join(name).to_string_lossy().into_owned()
    }
}

/// Options of `run`.
struct RunOpts {
    full: bool,
    out_dir: PathBuf,
    bin_dir: PathBuf,
    work: PathBuf,
    shim: Option<PathBuf>,
    keep: bool,
    /// Sections to run (kernels, raidz, peer, e2e, layouts, meta, scan, send, vol); all by default. For development only:
    /// a partial run still writes complete-looking files with empty sections.
    only: Option<String>,
}

impl RunOpts {
    fn wants(&self, section: &str) -> bool {
        match &self.only {
            None => true,
            Some(o) => o.split(',').any(|x| x == section),
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: rzfs-bench run (--smoke|--full) --out-dir DIR --bin-dir DIR [--work DIR] [--shim SO] [--keep] [--only kernels,raidz,peer,e2e,layouts,meta,scan,send,vol]\n       \
         rzfs-bench copyout --dir DISKS --fs POOL/FS --path PATH [--arc-max BYTES] [--hash]\n       \
         rzfs-bench render --json results.json --md RESULTS.md"
    );
    std::process::exit(2)
}

/// `--name value` pairs and bare `--flags` after the subcommand.
struct Flags(Vec<String>);

impl Flags {
    fn has(&self, f: &str) -> bool {
        self.0.iter().any(|a| a == f)
    }
    fn get(&self, f: &str) -> Option<String> {
        self.0.iter().position(|a| a == f).and_then(|i| self.0.get(i + 1).cloned())
    }
    fn need(&self, f: &str) -> String {
        self.get(f).unwrap_or_else(|| {
            eprintln!("rzfs-bench: missing {f}");
            usage()
        })
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = argv.split_first() else { usage() };
    let f = Flags(rest.to_vec());
    let r = match cmd.as_str() {
        "copyout" => copyout::run(&copyout::Args {
            dir: PathBuf::from(f.need("--dir")),
            fs: f.need("--fs"),
            path: f.need("--path"),
            arc_max: f.get("--arc-max").and_then(|v| v.parse().ok()),
            hash: f.has("--hash"),
        }),
        "run" => {
            if f.has("--smoke") == f.has("--full") {
                usage()
            }
            let work = f.get("--work").map_or_else(
                || std::env::temp_dir().join(format!("rzfs-bench-{}", std::process::id())),
                PathBuf::from,
            );
            run(&RunOpts {
                full: f.has("--full"),
                out_dir: PathBuf::from(f.need("--out-dir")),
                bin_dir: PathBuf::from(f.need("--bin-dir")),
                work,
                shim: f.get("--shim").map(PathBuf::from).filter(|p| p.exists()),
                keep: f.has("--keep"),
                only: f.get("--only"),
            })
        }
        // Re-renders RESULTS.md from an existing results.json (after report changes).
        "render" => std::fs::read_to_string(f.need("--json"))
            .map_err(|e| e.to_string())
            .and_then(|j| serde_json::from_str::<Value>(&j).map_err(|e| e.to_string()))
            .and_then(|v| std::fs::write(f.need("--md"), report::render(&v)).map_err(|e| e.to_string()))
            .map(|_| "rendered".to_string()),
        other => match layouts::cli(other, rest).or_else(|| meta::cli(other, rest)) {
            Some(r) => r,
            None => usage(),
        },
    };
    match r {
        Ok(out) => println!("{out}"),
        Err(e) => {
            eprintln!("rzfs-bench: {e}");
            std::process::exit(1);
        }
    }
}

/// Progress on stderr with the elapsed time.
fn logger(t0: Instant) -> impl FnMut(&str) {
    move |m| eprintln!("[{:6.1} s] {m}", t0.elapsed().as_secs_f64())
}

fn run(o: &RunOpts) -> Result<String, String> {
    let t0 = Instant::now();
    let mut log = logger(t0);
    std::fs::create_dir_all(&o.work).map_err(|e| format!("{}: {e}", o.work.display()))?;
    let machine = sys::machine_facts(&o.work);
    let threads = sys::all_threads();
    let b = if o.full { kernels::Budget::full() } else { kernels::Budget::smoke() };
    let scalar = if o.wants("kernels") { kernels::scalar_kernels(b, threads, &mut log)? } else { Vec::new() };
    let rz = if o.wants("raidz") { kernels::raidz_kernels(b, threads, &mut log)? } else { Vec::new() };
    // One raidz_test run per data-column count d covers raidz1/2/3 generation at widths
    // d+1, d+2, d+3 and reconstruction at width d+3: 3, 6, 9 cover widths 4 to 12 once.
    let (dcols, cap): (&[usize], u64) = if o.full { (&[3, 6, 9], 150) } else { (&[3], 3) };
    let peer = if o.wants("peer") {
        let p = raidz_peer::run_all(dcols, o.shim.as_deref(), PEER_IMPLS, Duration::from_secs(cap));
        log("raidz_test");
        p
    } else {
        json!({"notes": ["skipped (--only)"]})
    };
    let cfg = e2e::Cfg {
        file_mib: if o.full { 1024 } else { 64 },
        work: o.work.clone(),
        bin_dir: o.bin_dir.clone(),
        self_exe: std::env::current_exe().map_err(|e| e.to_string())?,
    };
    let e2e = if o.wants("e2e") {
        e2e::run(&cfg, if o.full { 300 } else { 10 }, if o.full { 3 } else { 1 }, &mut log)
    } else {
        json!({"error": "skipped (--only)"})
    };
    let ctx = Ctx {
        full: o.full,
        work: o.work.clone(),
        bin_dir: o.bin_dir.clone(),
        self_exe: cfg.self_exe.clone(),
        wait_s: if o.full { 300 } else { 10 },
        keep: o.keep,
    };
    let lay =
        if o.wants("layouts") { layouts::run(&ctx, &mut log) } else { json!({"error": "skipped (--only)"}) };
    let meta = if o.wants("meta") { meta::run(&ctx, &mut log) } else { json!({"error": "skipped (--only)"}) };
    let scan = if o.wants("scan") { scan::run(&ctx, &mut log) } else { json!({"error": "skipped (--only)"}) };
    let send = if o.wants("send") { send::run(&ctx, &mut log) } else { json!({"error": "skipped (--only)"}) };
    let vol = if o.wants("vol") { vol::run(&ctx, &mut log) } else { json!({"error": "skipped (--only)"}) };
    if !o.keep {
        let _ = std::fs::remove_dir_all(&o.work);
    }
    let results = json!({
        "mode": if o.full { "full" } else { "smoke" },
        "machine": machine,
        "runtime_s": t0.elapsed().as_secs_f64(),
        "loadavg_end": sys::loadavg(),
        "arc_default_mib": arc::DEFAULT_LIMIT_BYTES >> 20,
        "kernels": {"threads": threads, "block_bytes": kernels::BLOCK,
                    "working_set_bytes": b.working_set, "per_rep_ms": b.per_rep.as_millis() as u64,
                    "reps": b.reps, "rows": scalar, "raidz": rz},
        "raidz_test": peer,
        "e2e": e2e,
        "layouts": lay,
        "meta": meta,
        "scan": scan,
        "send": send,
        "vol": vol,
        "not_available": not_available(&[
            ("end-to-end by layout (item 2)", &lay),
            ("metadata and the 225k-file walk (items 3, 4)", &meta),
            ("scrub and resilver (issue 13, item 6)", &scan),
            ("send and receive (issue 14)", &send),
            ("volumes: loop device and NBD (issue 15)", &vol),
        ]),
        "method": method_notes(),
    });
    write_outputs(&o.out_dir, &results)?;
    Ok(format!(
        "wrote {} and {} ({:.0} s)",
        o.out_dir.join("results.json").display(),
        o.out_dir.join("RESULTS.md").display(),
        t0.elapsed().as_secs_f64()
    ))
}

fn write_outputs(dir: &Path, results: &Value) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let js = serde_json::to_string_pretty(results).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("results.json"), js + "\n").map_err(|e| e.to_string())?;
    std::fs::write(dir.join("RESULTS.md"), report::render(results)).map_err(|e| e.to_string())
}

/// Issue 4 items that cannot be measured (yet), with the reason (never estimated).
fn not_available(sections: &[(&str, &Value)]) -> Value {
    let mut v = Vec::new();
    for (what, s) in sections {
        if let Some(e) = s.get("error").and_then(Value::as_str) {
            v.push(json!({"what": what, "reason": e}));
        }
    }
    if let Some(r) = btrfs::unavailable() {
        v.push(json!({"what": "btrfs peer", "reason": r}));
    }
    json!(v)
}

fn method_notes() -> Value {
    json!([
        "Kernels: 128 KiB blocks cycled over a per-thread working set; each figure is the best of N timed repetitions, in bytes per CPU-second of the worker (schedstat), the wall-clock rate alongside; \"all threads\" = one independent worker per CPU.",
        "Compression: compress throughput counts input bytes with OpenZFS's 12.5% rule (output must fit in 7/8 of the block, so incompressible input ends in a failed attempt, as in ZFS); decompress counts output bytes; incompressible streams for decompression were produced with room to expand. zstd at level 3 (the OpenZFS default).",
        "RAID-Z: a 128 KiB block dealt in 4 KiB sectors over the data columns as OpenZFS maps it; reconstruction rebuilds the first k data columns (the hardest case: needs the matrix solve for k > 1).",
        "raidz_test: OpenZFS's own raidz_test -B, restricted by an LD_PRELOAD shim to the implementation OpenZFS picks on this CPU (see src/raidz_peer.rs).",
        "End-to-end: images zero-filled (never sparse), pool written by zfs-fuse, each read cold in the guest (page cache of the images evicted and checked with fincore, daemons restarted); the VM host's cache cannot be dropped from inside, so every image is read once untimed (O_DIRECT) first and all timed reads meet a warm host cache; raw rates measured before, between and after the filesystem reads; zfs-fuse reads last because its import writes to the pool.",
    ])
}
