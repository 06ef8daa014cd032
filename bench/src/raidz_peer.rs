//! OpenZFS `raidz_test -B` on the same machine, parsed, as the peer of the parity kernels.
//!
//! raidz_test's benchmark loops over every implementation it knows ("original", "scalar",
//! "sse2", "ssse3", "avx2", ...), 13 zio sizes and 3 generate + 7 reconstruct methods, with
//! 4 GiB of work per generate line: "original" alone needs tens of minutes. The harness
//! therefore preloads a tiny shim (bench/raidz_test_shim.c) that makes
//! `vdev_raidz_impl_set()` refuse every implementation except those listed in `RZT_IMPLS`,
//! so only the implementation OpenZFS itself would pick on this CPU (its "fastest") runs.
//! Without the shim (no C compiler) raidz_test runs unfiltered under a timeout and we report
//! whatever lines it printed.
//!
//! Output lines (after a CSV header) look like
//! `      avx2,    gen_p, 8,     131072, 1952.82, 17575.45, 32768`:
//! impl, method, data columns, zio size, per-disk MiB/s, total MiB/s over all columns,
//! iterations. The data rate is per-disk × data columns (the zio bytes per second); we
//! convert MiB/s to MB/s. Method names: gen_p/gen_pq/gen_pqr generate P, PQ, PQR (raidz1/2/3
//! at width dcols+1/+2/+3); rec_p, rec_q, rec_r rebuild one data column from that parity,
//! rec_pq/pr/qr two, rec_pqr three, always on a PQR map of width dcols+3.

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One parsed benchmark line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub imp: String,
    pub method: String,
    pub dcols: usize,
    pub iosize: u64,
    pub disk_mibps: f64,
}

impl Line {
    /// Data rate in MB/s (10^6 B/s): per-disk MiB/s × data columns.
    pub fn data_mbps(&self) -> f64 {
        self.disk_mibps * self.dcols as f64 * 1.048_576
    }
}

/// Parses raidz_test -B output; lines that are not benchmark rows are skipped.
pub fn parse(out: &str) -> Vec<Line> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() != 7 {
                return None;
            }
            Some(Line {
                imp: f[0].to_string(),
                method: f[1].to_string(),
                dcols: f[2].parse().ok()?,
                iosize: f[3].parse().ok()?,
                disk_mibps: f[4].parse().ok()?,
            })
        })
        .collect()
}

/// Where OpenZFS userland lives here.
pub const OPENZFS_ROOT: &str = "/opt/rzfs-oracles/openzfs";

/// Runs `raidz_test -B -d dcols` (filtered to `impls` when `shim` exists), with a wall-clock
/// cap; returns the parsed lines and a note on how it ran.
pub fn run_one(
    dcols: usize,
    shim: Option<&Path>,
    impls: &str,
    cap: Duration,
) -> Result<(Vec<Line>, String), String> {
    let bin = format!("{OPENZFS_ROOT}/usr/bin/raidz_test");
    if !Path::new(&bin).exists() {
        return Err(format!("{bin} not installed"));
    }
    let mut cmd = Command::new(&bin);
    cmd.args(["-B", "-d", &dcols.to_string()])
        .env("LD_LIBRARY_PATH", format!("{OPENZFS_ROOT}/lib/x86_64-linux-gnu"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(s) = shim {
        cmd.env("LD_PRELOAD", s).env("RZT_IMPLS", impls);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot run {bin}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    // Read on a thread so the pipe never fills while we watch the clock.
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let t0 = Instant::now();
    let mut timed_out = false;
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if t0.elapsed() > cap {
            let _ = child.kill();
            let _ = child.wait();
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = reader.join().unwrap_or_default();
    let note = format!(
        "raidz_test -B -d {dcols}{}: {:.0} s{}",
        if shim.is_some() { format!(" (impls: {impls})") } else { " (all impls)".into() },
        t0.elapsed().as_secs_f64(),
        if timed_out { ", stopped at the time cap (partial output)" } else { "" }
    );
    Ok((parse(&out), note))
}

/// Runs the peer over `dcols_list`; JSON with every line, the notes, and the impls used.
pub fn run_all(dcols_list: &[usize], shim: Option<&Path>, impls: &str, cap: Duration) -> Value {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for &d in dcols_list {
        match run_one(d, shim, impls, cap) {
            Ok((l, n)) => {
                lines.extend(l);
                notes.push(n);
            }
            Err(e) => {
                notes.push(e);
                break;
            }
        }
    }
    let rows: Vec<Value> = lines
        .iter()
        .map(|l| {
            json!({"impl": l.imp, "method": l.method, "dcols": l.dcols, "iosize": l.iosize,
                   "disk_mibps": l.disk_mibps, "data_mbps": l.data_mbps()})
        })
        .collect();
    json!({"notes": notes, "lines": rows, "shim": shim.is_some()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_and_skips_headers() {
        let s = "impl, math, dcols, iosize, disk_bw, total_bw, iter\n      avx2,    gen_p, 8,     131072, 1952.828780, 17575.459020, 32768\ngarbage\n";
        let l = parse(s);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].method, "gen_p");
        assert_eq!(l[0].dcols, 8);
        assert_eq!(l[0].iosize, 131072);
        assert!((l[0].data_mbps() - 1952.82878 * 8.0 * 1.048576).abs() < 1e-6);
    }
}
