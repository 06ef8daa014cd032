//! `rzinject` (zinject(8)): inject device faults into a pool imported read-write, for
//! testing how rzfs survives them.
//!
//! ```text
//! rzinject                                            list the handlers
//! rzinject -d DEVICE [-e io|nxio|checksum] [-T read|write|flush|all]
//!          [-f PERCENT] [-A AFTER] [-N COUNT] POOL    add a handler
//! rzinject -c ID|all                                  clear one or every handler
//! rzinject -p any POOL                                 panic in the next change (zinject -p)
//! ```
//!
//! `-e io` fails matching I/Os with EIO (default), `nxio` makes the device vanish (every
//! call fails with ENXIO, whatever `-T`), `checksum` corrupts the data read or written.
//! `-A AFTER` lets the first AFTER matching I/Os through and `-N COUNT` stops after COUNT
//! faults (rzfs extensions: they aim a fault at one phase of a txg sync). Faults apply to
//! the devices of pools imported read-write (or created) by this daemon.

use crate::cmd::{abs, clap_error};
use crate::daemon::State;
use crate::proto::Response;
use clap::Parser;
use std::path::{Path, PathBuf};
use vdev::inject::{self, FaultKind, FaultRule, IoKind};

#[derive(Parser)]
#[command(name = "rzinject", about = "inject device faults into an rzfs pool", disable_version_flag = true)]
struct Cli {
    /// Device (path, as `rzpool status` shows it, or vdev guid) to inject into.
    #[arg(short = 'd')]
    device: Option<String>,
    /// Error: io (EIO), nxio (device gone), checksum (corrupted data).
    #[arg(short = 'e', default_value = "io")]
    error: String,
    /// I/O type: read, write, flush or all.
    #[arg(short = 'T', default_value = "all")]
    io: String,
    /// Percentage of matching I/Os that fail (1-100).
    #[arg(short = 'f', default_value_t = 100)]
    freq: u32,
    /// Let this many matching I/Os through first.
    #[arg(short = 'A', default_value_t = 0)]
    after: u64,
    /// Fail at most this many I/Os (0: no limit).
    #[arg(short = 'N', default_value_t = 0)]
    count: u64,
    /// Clear handler ID, or `all`.
    #[arg(short = 'c')]
    clear: Option<String>,
    /// Panic in the next change of the pool's open txg (`any`: the only target rzfs has),
    /// which then suspends the pool for good: export -f and import it again.
    #[arg(short = 'p')]
    panic: Option<String>,
    /// The pool the device belongs to.
    pool: Option<String>,
}

/// Runs one `rzinject` command.
pub fn run(state: &State, argv: &[String], cwd: &Path) -> Response {
    let cli = match Cli::try_parse_from(std::iter::once("rzinject".to_string()).chain(argv.iter().cloned())) {
        Ok(c) => c,
        Err(e) => return clap_error(e),
    };
    let r = if let Some(c) = &cli.clear {
        clear(c)
    } else if let Some(target) = &cli.panic {
        arm_panic(state, target, cli.pool.as_deref())
    } else if let Some(d) = &cli.device {
        add(state, &cli, d, cwd)
    } else {
        Ok(list())
    };
    r.map(Response::ok).unwrap_or_else(Response::err)
}

fn arm_panic(state: &State, target: &str, pool: Option<&str>) -> Result<String, String> {
    let pool = pool.ok_or("missing pool name")?;
    if target != "any" {
        return Err(format!("invalid panic target '{target}': rzfs can panic 'any' next change"));
    }
    let rw = crate::rwpool::writer_of(state, pool)
        .ok_or_else(|| format!("cannot inject into '{pool}': not imported read-write"))?;
    rw.spa.inject_panic();
    Ok(format!("the next change of '{pool}' will panic\n"))
}

fn clear(which: &str) -> Result<String, String> {
    if which == "all" {
        let n = inject::clear_all(None);
        return Ok(format!("removed {n} handlers\n"));
    }
    let id: u64 = which.parse().map_err(|_| format!("invalid handler id '{which}'"))?;
    if inject::clear(id) {
        Ok(String::new())
    } else {
        Err(format!("no such handler {id}"))
    }
}

fn list() -> String {
    let rules = inject::list();
    if rules.is_empty() {
        return "No handlers registered.\n".into();
    }
    let mut out = format!(
        "{:>3}  {:<40} {:<5}  {:<8} {:>4}  {:>6} {:>6} {:>7} {:>6}\n",
        "ID", "DEVICE", "TYPE", "ERROR", "FREQ", "AFTER", "COUNT", "SEEN", "HITS"
    );
    out.push_str(&format!("{}\n", "-".repeat(100)));
    for r in rules {
        let io = match r.rule.io {
            IoKind::Read => "read",
            IoKind::Write => "write",
            IoKind::Flush => "flush",
            IoKind::All => "all",
        };
        let kind = match r.rule.kind {
            FaultKind::Error => "io",
            FaultKind::Corrupt => "checksum",
            FaultKind::Vanish => "nxio",
        };
        out.push_str(&format!(
            "{:>3}  {:<40} {:<5}  {:<8} {:>3}%  {:>6} {:>6} {:>7} {:>6}\n",
            r.id, r.device, io, kind, r.rule.freq_pct, r.rule.after, r.rule.count, r.seen, r.fired
        ));
    }
    out
}

fn add(state: &State, cli: &Cli, device: &str, cwd: &Path) -> Result<String, String> {
    let pool = cli.pool.as_deref().ok_or("missing pool name")?;
    let p = state.pool(pool)?;
    if crate::rwpool::writer_of(state, pool).is_none() {
        return Err(format!("cannot inject into '{pool}': faults apply to pools imported read-write"));
    }
    let kind = match cli.error.as_str() {
        "io" => FaultKind::Error,
        "nxio" => FaultKind::Vanish,
        "checksum" | "corrupt" => FaultKind::Corrupt,
        e => return Err(format!("invalid error type '{e}': use io, nxio or checksum")),
    };
    let io = match cli.io.as_str() {
        "read" => IoKind::Read,
        "write" => IoKind::Write,
        "flush" => IoKind::Flush,
        "all" => IoKind::All,
        t => return Err(format!("invalid I/O type '{t}': use read, write, flush or all")),
    };
    if !(1..=100).contains(&cli.freq) {
        return Err(format!("invalid frequency {}: must be 1 to 100 (percent)", cli.freq));
    }
    // The device: a leaf of the pool named by path (relative to the caller) or guid.
    let want = abs(cwd, &PathBuf::from(device));
    let guid =
        device.parse::<u64>().ok().or_else(|| u64::from_str_radix(device.trim_start_matches("0x"), 16).ok());
    let leaf = p
        .tops
        .iter()
        .flat_map(|t| {
            t.leaves()
                .into_iter()
                .map(|l| (l.guid(), l.device().map(|d| d.name().to_string())))
                .collect::<Vec<_>>()
        })
        .find(|(g, name)| Some(*g) == guid || name.as_deref() == Some(want.to_string_lossy().as_ref()));
    let Some((g, Some(path))) = leaf else {
        return Err(format!("cannot find device '{device}' in pool '{pool}'"));
    };
    let rule = FaultRule { kind, io, after: cli.after, count: cli.count, freq_pct: cli.freq };
    let id = inject::add(&path, rule);
    Ok(format!(
        "Added handler {id} with the following properties:\n  pool: {pool}\n  vdev: {g:x}\n  path: {path}\n"
    ))
}
