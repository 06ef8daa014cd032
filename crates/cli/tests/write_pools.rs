//! Pools written by rzfs, checked by OpenZFS's own checker: every layout `rzpool create`
//! accepts (stripe, two mirrors, raidz1/2/3 at widths 3 to 8, ashift 9 and 12) is created
//! through the daemon, exported, and must pass `zdb -e -bcc` with "No leaks", verified feature
//! refcounts and no leaked MOS objects; the root dataset's referenced bytes must match zdb's.
//! Needs OpenZFS's userland (scripts/install-test-deps.sh puts it in /opt/rzfs-oracles);
//! `RZFS_ORACLE=0` skips, `RZFS_ORACLE=1` turns a missing zdb into a failure.

mod common;

use common::tools::*;
use std::path::{Path, PathBuf};

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
