//! Machine facts, child processes, peak-RSS sampling and page-cache eviction.
//!
//! Cache defeat: this sandbox refuses `echo 3 > /proc/sys/vm/drop_caches` (even as root), so
//! every image file is evicted on its own with `posix_fadvise(POSIX_FADV_DONTNEED)`, issued by
//! GNU dd (`dd if=F iflag=nocache count=0` advises the whole file), after a global `sync` so no
//! dirty page pins the file. Each eviction is then *verified* with util-linux `fincore` and the
//! resident byte count is recorded next to the measurement: a figure taken from a warm cache
//! would show up as a non-zero residency instead of silently inflating a rate.

use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A command's outcome: exit success, stdout, stderr.
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `argv` to completion (no shell) with extra environment `env`.
pub fn run(argv: &[&str], env: &[(&str, &str)]) -> Result<Out, String> {
    let (prog, args) = argv.split_first().ok_or("empty command")?;
    let o = Command::new(prog)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
    Ok(Out {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    })
}

/// Like [`run`] but a failure is an error quoting the command and its stderr.
pub fn must(argv: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let o = run(argv, env)?;
    if o.ok {
        Ok(o.stdout)
    } else {
        Err(format!("`{}` failed: {}{}", argv.join(" "), o.stderr.trim(), o.stdout.trim()))
    }
}

/// Output of a shell-free command, or "" if it cannot run.
fn quiet(argv: &[&str]) -> String {
    run(argv, &[]).map(|o| o.stdout.trim().to_string()).unwrap_or_default()
}

/// Value of `key` in a `key: value` file such as /proc/cpuinfo or /proc/meminfo.
fn proc_field(path: &str, key: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    s.lines()
        .find(|l| l.split(':').next().map(str::trim) == Some(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The 1-minute load average (other work on the machine disturbs every figure).
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(-1.0)
}

/// Threads the "all threads" measurements use.
pub fn all_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Date, CPU, cores, RAM, kernel, rustc, storage under `work`, and the current load.
pub fn machine_facts(work: &Path) -> Value {
    let cpus = std::fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let mem_kb: u64 = proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0);
    let flags = proc_field("/proc/cpuinfo", "flags").unwrap_or_default();
    let simd: Vec<&str> = flags
        .split_whitespace()
        .filter(|f| ["sse2", "ssse3", "sse4_2", "avx", "avx2", "avx512f", "avx512bw", "sha_ni"].contains(f))
        .collect();
    let wd = work.to_string_lossy();
    json!({
        "date_utc": quiet(&["date", "-u", "+%Y-%m-%d %H:%M:%S UTC"]),
        "cpu_model": proc_field("/proc/cpuinfo", "model name").unwrap_or_default(),
        "cpu_simd_flags": simd.join(" "),
        "logical_cpus": cpus,
        "threads_used": all_threads(),
        "ram_gib": (mem_kb as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        "rustc": quiet(&["rustc", "--version"]),
        "storage": quiet(&["df", "--output=source,fstype", &wd]).lines().last().unwrap_or("").to_string(),
        "virtualization": quiet(&["systemd-detect-virt"]),
        "loadavg_start": loadavg(),
    })
}

/// `VmHWM` (peak resident set) of process `pid`, in KiB.
pub fn vmhwm_kib(pid: u32) -> Option<u64> {
    proc_field(&format!("/proc/{pid}/status"), "VmHWM")
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
}

/// Our own peak RSS, KiB.
pub fn self_vmhwm_kib() -> Option<u64> {
    vmhwm_kib(std::process::id())
}

/// Waits for `child`, sampling its VmHWM every 10 ms (the value is lost once it exits);
/// returns (success, wall seconds since `t0`, peak KiB, stderr).
pub fn wait_sampling(mut child: Child, t0: Instant) -> Result<(bool, f64, u64, String), String> {
    let pid = child.id();
    let mut peak = 0u64;
    loop {
        if let Some(k) = vmhwm_kib(pid) {
            peak = peak.max(k);
        }
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(st) => {
                let secs = t0.elapsed().as_secs_f64();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Ok((st.success(), secs, peak, err));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Sends SIGTERM to `pid` (a process this program started) and waits up to `secs` for it.
pub fn terminate(child: &mut Child, secs: u64) {
    let pid = child.id().to_string();
    let _ = run(&["kill", "-TERM", &pid], &[]);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Bytes of `f` resident in the page cache (per `fincore`), if it can tell.
pub fn resident_bytes(f: &Path) -> Option<u64> {
    let s = quiet(&["fincore", "--bytes", "--noheadings", "--output", "RES", &f.to_string_lossy()]);
    s.trim().parse().ok()
}

/// Drops `files` from the page cache (see the module comment) and returns the bytes still
/// resident afterwards (0 when eviction worked; `None` if fincore is unavailable).
pub fn evict(files: &[PathBuf]) -> Result<Option<u64>, String> {
    must(&["sync"], &[])?;
    let mut left = Some(0u64);
    for f in files {
        let p = f.to_string_lossy();
        must(&["dd", &format!("if={p}"), "iflag=nocache", "count=0", "status=none"], &[])?;
        left = match (left, resident_bytes(f)) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    Ok(left)
}

/// Whether `p` is currently a mount point (per /proc/self/mounts).
pub fn is_mounted(p: &Path) -> bool {
    let want = p.to_string_lossy();
    std::fs::read_to_string("/proc/self/mounts")
        .map(|s| s.lines().any(|l| l.split_whitespace().nth(1) == Some(&want)))
        .unwrap_or(false)
}

/// Polls `cond` every 100 ms for up to `secs`.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

/// MB/s (10^6 bytes per second).
pub fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    bytes as f64 / secs / 1e6
}
