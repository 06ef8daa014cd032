//! # A full pool answers ENOSPC and loses nothing
//!
//! For each layout (single disk, mirror of 2, raidz1 of 3, raidz2 of 4 file vdevs) and two
//! ways of syncing — writes racing a background sync every 0.1 s, and writes forcing syncs
//! themselves (a 2 MiB dirty limit, `fsync` after every file) — files are written through
//! the FUSE mount of a private rzfsd until a `write()` fails. Then:
//!
//! * that failure is ENOSPC (not EIO), and further writes and creations get ENOSPC at once;
//! * deleting files works on the full pool, and after deleting, new files can be written
//!   (the writer syncs txgs to release the space freed, which stays unallocatable for two
//!   txgs);
//! * `fsync` of every file whose writes returned success succeeds;
//! * `statfs` never reports more room than the pool takes;
//! * after export, OpenZFS's `zdb -bcc` finds no leak and no referenced-but-free block, and
//!   after a new import every acknowledged file reads back identical, every deleted one stays
//!   deleted and every listed name can be stat'ed.
//!
//! Needs FUSE and root (skipped otherwise); zdb as for every oracle test.

mod common;

use common::rng::Rng;
use common::tools::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const DEV: u64 = 96 << 20;

/// Writes `data` to `path` and (optionally) fsyncs it: the error of the first failing call.
fn write_file(path: &Path, data: &[u8], fsync: bool) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)?;
    if fsync {
        f.sync_all()?;
    }
    Ok(())
}

fn statfs_avail(dir: &Path) -> u64 {
    let out = std::process::Command::new("stat").args(["-f", "-c", "%a %S"]).arg(dir).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    v.first().copied().unwrap_or(0) * v.get(1).copied().unwrap_or(0)
}

fn run(layout: (&str, &[&str], usize), forcing: bool, seed: u64) {
    let (kind, words, n) = layout;
    let mode = if forcing { "forcing" } else { "racing" };
    let tag = format!("fill-{kind}-{mode}");
    let dir = scratch(&tag);
    let devs = files(&dir, n, DEV);
    let env: &[(&str, &str)] = if forcing {
        &[("RZFS_DIRTY_MAX", "2097152"), ("RZFS_TXG_TIMEOUT", "5")]
    } else {
        &[("RZFS_TXG_TIMEOUT", "0.1")]
    };
    let d = Daemon::with_env(&tag, env);
    let mnt = dir.join("mnt");
    let pool = "fill";
    let mut args = vec!["create", "-m", mnt.to_str().unwrap(), pool];
    args.extend_from_slice(words);
    args.extend(devs.iter().map(|s| s.as_str()));
    d.ok("rzpool", &args);
    let mut rng = Rng::new(seed);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let size_cap = d.ok("rzpool", &["list", "-H", "-p", "-o", "size", pool]).trim().parse::<u64>().unwrap();
    // Fill: every write either succeeds or fails with ENOSPC.
    let mut i = 0;
    let full = loop {
        let name = format!("f{i:04}");
        let data = rng.data_in(512 << 10, 3 << 20);
        let avail = statfs_avail(&mnt);
        assert!(avail <= size_cap, "{tag}: statfs reports {avail} available in a pool of {size_cap}");
        match write_file(&mnt.join(&name), &data, forcing) {
            Ok(()) => {
                model.insert(name, data);
            }
            Err(e) => break (name, e),
        }
        i += 1;
        assert!(i < 10_000, "{tag}: the pool never filled");
    };
    let (partial, e) = full;
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{tag}: a full pool answered {e} to {partial}");
    eprintln!(
        "fill_full: {tag}: ENOSPC after {} files ({} MiB)",
        model.len(),
        model.values().map(Vec::len).sum::<usize>() >> 20
    );
    // The pool stays full for new data and names, at once.
    let e = write_file(&mnt.join("more"), &rng.data(2 << 20), true).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{tag}: second write after full: {e}");
    // Everything acknowledged is made durable.
    for name in model.keys() {
        std::fs::File::open(mnt.join(name))
            .unwrap()
            .sync_all()
            .unwrap_or_else(|e| panic!("{tag}: fsync {name}: {e}"));
    }
    // Deleting works on a full pool (the half-written file and the refused one first).
    for n in [partial.as_str(), "more"] {
        let _ = std::fs::remove_file(mnt.join(n));
    }
    let names: Vec<String> = model.keys().cloned().collect();
    let mut deleted = Vec::new();
    for (k, name) in names.iter().enumerate() {
        if k % 2 == 0 {
            std::fs::remove_file(mnt.join(name))
                .unwrap_or_else(|e| panic!("{tag}: unlink {name} on a full pool: {e}"));
            model.remove(name);
            deleted.push(name.clone());
        }
    }
    // And space comes back: new files fit again.
    let mut written_after = 0;
    for k in 0..3 {
        let name = format!("after{k}");
        let data = rng.data_in(256 << 10, 1 << 20);
        write_file(&mnt.join(&name), &data, true)
            .unwrap_or_else(|e| panic!("{tag}: write after deleting: {e}"));
        model.insert(name, data);
        written_after += 1;
    }
    assert_eq!(written_after, 3);
    d.ok("rzpool", &["export", pool]);
    zdb_check(&dir, pool);
    // Read back through a new import.
    let dir_s = dir.to_str().unwrap();
    d.ok("rzpool", &["import", "-N", "-d", dir_s, pool]);
    d.ok("rzfs", &["mount", pool, mnt.to_str().unwrap()]);
    let mut listed = 0;
    for e in std::fs::read_dir(&mnt).unwrap() {
        let e = e.unwrap();
        e.metadata()
            .unwrap_or_else(|err| panic!("{tag}: {:?} is listed but stat fails: {err}", e.file_name()));
        listed += 1;
    }
    assert_eq!(listed, model.len(), "{tag}: directory lists {listed} names, model has {}", model.len());
    for (name, data) in &model {
        let got = std::fs::read(mnt.join(name)).unwrap_or_else(|e| panic!("{tag}: read {name}: {e}"));
        assert!(
            got == *data,
            "{tag}: {name} reads back {} bytes, differing from the {} written",
            got.len(),
            data.len()
        );
    }
    for name in &deleted {
        assert!(!mnt.join(name).exists(), "{tag}: deleted {name} came back");
    }
    d.ok("rzpool", &["export", pool]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fill_to_full_every_layout() {
    if zdb().is_none() || !fuse_usable() {
        eprintln!("fill_full: needs FUSE, root and zdb; skipped");
        return;
    }
    let seed = std::env::var("RZFS_FILL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed);
    eprintln!("fill_full: seed {seed} (RZFS_FILL_SEED)");
    let layouts: [(&str, &[&str], usize); 4] = [
        ("single", &[], 1),
        ("mirror", &["mirror"], 2),
        ("raidz1", &["raidz1"], 3),
        ("raidz2", &["raidz2"], 4),
    ];
    for l in layouts {
        for forcing in [false, true] {
            run(l, forcing, seed);
        }
    }
}
