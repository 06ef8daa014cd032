//! A randomized POSIX workload through the read-write FUSE mount, checked against an
//! in-memory model: create, write, overwrite, append, truncate, rename (over existing
//! targets, across directories), unlink, link, mkdir, rmdir, symlink and xattrs over about a
//! thousand files. After the workload the mount must equal the model; then the pool is
//! exported, must pass OpenZFS's `zdb -bcc` (no leaks, every checksum), and `zdb -r` of every
//! file must equal the model. The seed is printed; `RZFS_MODEL_SEED` and `RZFS_MODEL_OPS`
//! reproduce or lengthen a run.

mod common;

use common::model::{compare_mount, step, Model, Node, Rng};
use common::tools::*;
use std::collections::BTreeSet;
use std::path::Path;

/// Sort key of the zdb sample: big or multiply-linked files first, then a seeded shuffle.
type SampleKey = (std::cmp::Reverse<usize>, u64);

/// `zdb -r` costs about a second per file (it imports the pool each time), so the long run
/// has zdb extract a sample of files (every file is compared through the mount), and a short
/// run has zdb extract every file.
#[test]
fn long_random_workload_matches_model_and_zdb() {
    let ops: usize = std::env::var("RZFS_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    run_model("long", ops, Some(40));
}

#[test]
fn short_random_workload_every_file_extracted_by_zdb() {
    run_model("short", 300, None);
}

fn run_model(tag: &str, ops: usize, zdb_sample: Option<usize>) {
    if zdb().is_none() || !Path::new("/dev/fuse").exists() {
        return;
    }
    let seed: u64 = std::env::var("RZFS_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    eprintln!("posix model {tag}: seed {seed}, {ops} operations (RZFS_MODEL_SEED/RZFS_MODEL_OPS to change)");
    let dir = std::env::temp_dir().join(format!("rzfs-model-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let devs: Vec<String> = (0..3)
        .map(|i| {
            let p = dir.join(format!("d{i}"));
            std::fs::File::create(&p).unwrap().set_len(256 << 20).unwrap();
            p.to_string_lossy().into_owned()
        })
        .collect();
    let mnt = dir.join("mnt");
    let d = Daemon::new(tag);
    let mnt_s = mnt.to_string_lossy().into_owned();
    d.ok(
        "rzpool",
        &[
            "create",
            "-o",
            "ashift=9",
            "-O",
            "compression=on",
            "-m",
            &mnt_s,
            "model",
            "raidz1",
            &devs[0],
            &devs[1],
            &devs[2],
        ],
    );
    let mut rng = Rng(seed);
    let mut m = Model::default();
    let t0 = std::time::Instant::now();
    for i in 0..ops {
        step(&mut rng, &mut m, &mnt);
        if i % 1000 == 999 {
            compare_mount(&m, &mnt);
        }
    }
    compare_mount(&m, &mnt);
    eprintln!("posix model: workload and mount comparison took {:?}", t0.elapsed());
    d.ok("rzpool", &["export", "model"]);
    zdb_check(&dir, "model");
    eprintln!("posix model: zdb -bcc done at {:?}", t0.elapsed());
    // zdb extracts every file (each hard link once) and must agree with the model.
    let mut done = BTreeSet::new();
    let out = dir.join("zdb.out");
    let mut candidates: Vec<(&String, u64)> = m
        .names
        .iter()
        .filter_map(|(n, node)| if let Node::File(i) = node { Some((n, *i)) } else { None })
        .collect();
    if let Some(k) = zdb_sample {
        // A seeded sample, always including the largest files and hard-linked ones.
        let mut keyed: Vec<(SampleKey, (&String, u64))> = candidates
            .into_iter()
            .map(|(n, i)| {
                ((std::cmp::Reverse(m.inodes[&i].len() / 65536 + m.links(i)), rng.next() % 1000), (n, i))
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0).then(a.1 .0.cmp(b.1 .0)));
        candidates = keyed.into_iter().map(|(_, c)| c).take(k).collect();
    }
    for (name, ino) in candidates {
        let ino = &ino;
        if !done.insert(*ino) {
            continue;
        }
        let _ = std::fs::remove_file(&out);
        let log = run_zdb(&["-e", "-p", dir.to_str().unwrap(), "-r", "model", name, out.to_str().unwrap()]);
        let got = std::fs::read(&out).unwrap_or_else(|_| panic!("zdb -r model {name}: {log}"));
        assert!(
            got == m.inodes[ino],
            "zdb -r {name}: {} bytes, model {} bytes",
            got.len(),
            m.inodes[ino].len()
        );
    }
    eprintln!(
        "posix model: {} names, {} files checked by zdb -r, total {:?}",
        m.names.len(),
        done.len(),
        t0.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
