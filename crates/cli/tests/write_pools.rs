//! Pools written by rzfs, checked by OpenZFS's own checker: every layout `rzpool create`
//! accepts (stripe, two mirrors, raidz1/2/3 at widths 3 to 8, ashift 9 and 12) is created
//! through the daemon, exported, and must pass `zdb -e -bcc` with "No leaks", verified feature
//! refcounts and no leaked MOS objects; the root dataset's referenced bytes must match zdb's.
//! Needs OpenZFS's userland (scripts/install-test-deps.sh puts it in /opt/rzfs-oracles);
//! `RZFS_ORACLE=0` skips, `RZFS_ORACLE=1` turns a missing zdb into a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

const ORACLE_ROOT: &str = "/opt/rzfs-oracles/openzfs";

/// The zdb binary and its library path, or None when oracle tests are off.
pub fn zdb() -> Option<(PathBuf, String)> {
    if std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0") {
        eprintln!("oracle tier disabled (RZFS_ORACLE=0)");
        return None;
    }
    let bin = Path::new(ORACLE_ROOT).join("sbin/zdb");
    if !bin.is_file() {
        assert!(
            !std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1"),
            "RZFS_ORACLE=1 but {} is missing",
            bin.display()
        );
        eprintln!("zdb not installed; run scripts/install-test-deps.sh");
        return None;
    }
    Some((bin, format!("{ORACLE_ROOT}/lib/x86_64-linux-gnu")))
}

/// Runs zdb with `args`; returns stdout + stderr.
pub fn run_zdb(args: &[&str]) -> String {
    let (bin, lib) = zdb().expect("zdb");
    let out = Command::new(bin).args(args).env("LD_LIBRARY_PATH", lib).output().unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Checks an exported pool with zdb: checksums of every block, leaks, feature refcounts,
/// MOS object leaks. Returns the `zdb -d` dataset lines.
pub fn zdb_check(dir: &Path, pool: &str) -> String {
    let d = dir.to_str().unwrap();
    let out = run_zdb(&["-e", "-p", d, "-bcc", "-d", pool]);
    assert!(out.contains("No leaks"), "zdb -bcc of {pool} in {d}:\n{out}");
    for bad in ["leaked", "error", "ASSERT", "mismatch", "is not correct"] {
        let hits: Vec<&str> =
            out.lines().filter(|l| l.contains(bad) && !l.contains("verify nothing leaked")).collect();
        assert!(hits.is_empty(), "zdb reports '{bad}' for {pool} in {d}:\n{out}");
    }
    out
}

/// A daemon of our own (socket in a temp dir), stopped on drop.
pub struct Daemon {
    pub sock: PathBuf,
}

impl Daemon {
    pub fn new(tag: &str) -> Daemon {
        let sock = std::env::temp_dir().join(format!("rzfs-w-{}-{tag}/rzfsd.sock", std::process::id()));
        Daemon { sock }
    }
    pub fn run(&self, prog: &str, args: &[&str]) -> (i32, String, String) {
        let exe = match prog {
            "rzpool" => env!("CARGO_BIN_EXE_rzpool"),
            _ => env!("CARGO_BIN_EXE_rzfs"),
        };
        let out = Command::new(exe).args(args).env("RZFS_SOCKET", &self.sock).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    pub fn ok(&self, prog: &str, args: &[&str]) -> String {
        let (code, out, err) = self.run(prog, args);
        assert_eq!(code, 0, "{prog} {args:?} failed: {err}");
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let needle = self.sock.to_string_lossy().into_owned();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
                if String::from_utf8_lossy(&cmd).contains(&needle) {
                    let _ = Command::new("kill").arg(e.file_name()).status();
                }
            }
        }
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-wp-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn files(dir: &Path, n: usize, size: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(size).unwrap();
            p.to_string_lossy().into_owned()
        })
        .collect()
}

/// zdb's human size ("95.9K") in bytes.
fn human(s: &str) -> f64 {
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1024.0),
        Some('M') => (&s[..s.len() - 1], 1024.0 * 1024.0),
        Some('G') => (&s[..s.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (s.trim_end_matches('B'), 1.0),
    };
    num.parse::<f64>().unwrap() * mult
}

/// The referenced size zdb prints for dataset `name` ("Dataset NAME [ZPL], ID n, cr_txg n, SIZE, ...").
fn zdb_referenced(out: &str, name: &str) -> f64 {
    let line =
        out.lines().find(|l| l.starts_with(&format!("Dataset {name} "))).unwrap_or_else(|| panic!("{out}"));
    human(line.split(", ").nth(3).unwrap())
}

fn check_layout(tag: &str, layout: &[&str], n: usize, ashift: u8) {
    let dir = scratch(tag);
    let devs = files(&dir, n, 128 << 20);
    let d = Daemon::new(tag);
    let pool = format!("p{tag}");
    let ashift_opt = format!("ashift={ashift}");
    let mut args: Vec<&str> = vec!["create", "-o", &ashift_opt, "-m", "none", &pool];
    let mut it = devs.iter();
    for w in layout {
        if *w == "-" {
            args.push(it.next().unwrap());
        } else {
            args.push(w);
        }
    }
    args.extend(it.map(|s| s.as_str()));
    d.ok("rzpool", &args);
    let refer: u64 = d.ok("rzfs", &["list", "-Hp", "-o", "refer", &pool]).trim().parse().unwrap();
    d.ok("rzpool", &["export", &pool]);
    let out = zdb_check(&dir, &pool);
    let theirs = zdb_referenced(&out, &pool);
    let diff = (refer as f64 - theirs).abs() / theirs.max(1.0);
    assert!(diff < 0.01, "{pool}: rzfs refer {refer}, zdb {theirs}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_layout_passes_zdb() {
    if zdb().is_none() {
        return;
    }
    check_layout("stripe1", &[], 1, 9);
    check_layout("stripe2", &[], 2, 12);
    check_layout("mirrors", &["mirror", "-", "-", "mirror", "-", "-"], 4, 9);
    for width in 3..=8usize {
        for (p, min) in [(1u8, 3usize), (2, 4), (3, 5)] {
            if width < min {
                continue;
            }
            let kw = format!("raidz{p}");
            for ashift in [9u8, 12] {
                let tag = format!("rz{p}w{width}a{ashift}");
                check_layout(&tag, &[kw.as_str()], width, ashift);
            }
        }
    }
}
