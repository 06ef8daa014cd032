//! A randomized POSIX workload through the read-write FUSE mount, checked against an
//! in-memory model: create, write, overwrite, append, truncate, rename (over existing
//! targets, across directories), unlink, link, mkdir, rmdir, symlink and xattrs over about a
//! thousand files. After the workload the mount must equal the model; then the pool is
//! exported, must pass OpenZFS's `zdb -bcc` (no leaks, every checksum), and `zdb -r` of every
//! file must equal the model. The seed is printed; `RZFS_MODEL_SEED` and `RZFS_MODEL_OPS`
//! reproduce or lengthen a run.

mod common;

use common::tools::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Sort key of the zdb sample: big or multiply-linked files first, then a seeded shuffle.
type SampleKey = (std::cmp::Reverse<usize>, u64);

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        // Mostly compressible text with random runs, so compression paths see both.
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            let x = self.next();
            if x.is_multiple_of(3) {
                v.extend_from_slice(&x.to_le_bytes());
            } else {
                v.extend_from_slice(format!("{:016x}\n", x % 1000).as_bytes());
            }
        }
        v.truncate(n);
        v
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        (!v.is_empty()).then(|| &v[self.below(v.len() as u64) as usize])
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    File(u64),
    Dir,
    Symlink(String),
}

#[derive(Default)]
struct Model {
    names: BTreeMap<String, Node>,
    inodes: BTreeMap<u64, Vec<u8>>,
    xattrs: BTreeMap<u64, BTreeMap<String, Vec<u8>>>,
    next_ino: u64,
}

impl Model {
    fn dirs(&self) -> Vec<String> {
        let mut d: Vec<String> = vec![String::new()];
        d.extend(self.names.iter().filter(|(_, n)| **n == Node::Dir).map(|(k, _)| k.clone()));
        d
    }
    fn files(&self) -> Vec<String> {
        self.names.iter().filter(|(_, n)| matches!(n, Node::File(_))).map(|(k, _)| k.clone()).collect()
    }
    fn links(&self, ino: u64) -> usize {
        self.names.values().filter(|n| **n == Node::File(ino)).count()
    }
    fn is_empty_dir(&self, d: &str) -> bool {
        let prefix = format!("{d}/");
        !self.names.keys().any(|k| k.starts_with(&prefix))
    }
    fn remove_name(&mut self, name: &str) {
        if let Some(Node::File(ino)) = self.names.remove(name) {
            if self.links(ino) == 0 {
                self.inodes.remove(&ino);
                self.xattrs.remove(&ino);
            }
        }
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn fresh_name(rng: &mut Rng, m: &Model, dir: &str) -> String {
    loop {
        let len = if rng.below(50) == 0 { 200 + rng.below(55) } else { 3 + rng.below(12) };
        let name: String = (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
        let p = join(dir, &name);
        if !m.names.contains_key(&p) {
            return p;
        }
    }
}

/// One random operation, applied to both the mount and the model.
fn step(rng: &mut Rng, m: &mut Model, root: &Path) {
    let at = |p: &str| root.join(p);
    let files = m.files();
    match rng.below(100) {
        0..=29 => {
            let dir = rng.pick(&m.dirs()).cloned().unwrap_or_default();
            let p = fresh_name(rng, m, &dir);
            let size = if rng.below(20) == 0 { rng.below(700_000) } else { rng.below(20_000) } as usize;
            let data = rng.bytes(size);
            std::fs::write(at(&p), &data).unwrap();
            m.next_ino += 1;
            m.inodes.insert(m.next_ino, data);
            m.names.insert(p, Node::File(m.next_ino));
        }
        30..=44 => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            let Node::File(ino) = m.names[&p] else { return };
            let cur = m.inodes.get_mut(&ino).unwrap();
            let off = rng.below(cur.len() as u64 + 5000) as usize;
            let n = 1 + rng.below(40_000) as usize;
            let data = rng.bytes(n);
            let mut f = std::fs::OpenOptions::new().write(true).open(at(&p)).unwrap();
            f.seek(SeekFrom::Start(off as u64)).unwrap();
            f.write_all(&data).unwrap();
            if cur.len() < off + data.len() {
                cur.resize(off + data.len(), 0);
            }
            cur[off..off + data.len()].copy_from_slice(&data);
        }
        45..=49 => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            let Node::File(ino) = m.names[&p] else { return };
            let cur = m.inodes.get_mut(&ino).unwrap();
            let size = rng.below(cur.len() as u64 * 2 + 1000);
            std::fs::OpenOptions::new().write(true).open(at(&p)).unwrap().set_len(size).unwrap();
            cur.resize(size as usize, 0);
        }
        50..=59 => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            let dir = rng.pick(&m.dirs()).cloned().unwrap_or_default();
            let target = if rng.below(3) == 0 {
                rng.pick(&files).cloned().unwrap_or_else(|| fresh_name(rng, m, &dir))
            } else {
                fresh_name(rng, m, &dir)
            };
            if target == p {
                return;
            }
            std::fs::rename(at(&p), at(&target)).unwrap();
            if m.names.get(&target) == m.names.get(&p) {
                // POSIX: renaming a name onto another link of the same file does nothing.
                return;
            }
            let node = m.names.remove(&p).unwrap();
            m.remove_name(&target);
            m.names.insert(target, node);
        }
        60..=67 => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            std::fs::remove_file(at(&p)).unwrap();
            m.remove_name(&p);
        }
        68..=72 => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            let dir = rng.pick(&m.dirs()).cloned().unwrap_or_default();
            let q = fresh_name(rng, m, &dir);
            std::fs::hard_link(at(&p), at(&q)).unwrap();
            let n = m.names[&p].clone();
            m.names.insert(q, n);
        }
        73..=78 => {
            let dirs = m.dirs();
            let dir = rng.pick(&dirs).cloned().unwrap_or_default();
            if dir.matches('/').count() >= 3 {
                return;
            }
            let p = fresh_name(rng, m, &dir);
            std::fs::create_dir(at(&p)).unwrap();
            m.names.insert(p, Node::Dir);
        }
        79..=81 => {
            let empties: Vec<String> =
                m.dirs().into_iter().filter(|d| !d.is_empty() && m.is_empty_dir(d)).collect();
            let Some(d) = rng.pick(&empties).cloned() else { return };
            std::fs::remove_dir(at(&d)).unwrap();
            m.names.remove(&d);
        }
        82..=86 => {
            let dir = rng.pick(&m.dirs()).cloned().unwrap_or_default();
            let p = fresh_name(rng, m, &dir);
            let target: String =
                (0..1 + rng.below(100)).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
            std::os::unix::fs::symlink(&target, at(&p)).unwrap();
            m.names.insert(p, Node::Symlink(target));
        }
        87..=89 => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            let Node::File(ino) = m.names[&p] else { return };
            let key = format!("user.k{}", rng.below(4));
            let val: String = (0..1 + rng.below(60)).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
            let ok = Command::new("setfattr").args(["-n", &key, "-v", &val]).arg(at(&p)).status().unwrap();
            assert!(ok.success(), "setfattr {p}");
            m.xattrs.entry(ino).or_default().insert(key, val.into_bytes());
        }
        _ => {
            let Some(p) = rng.pick(&files).cloned() else { return };
            let Node::File(ino) = m.names[&p] else { return };
            let keys: Vec<String> =
                m.xattrs.get(&ino).map(|x| x.keys().cloned().collect()).unwrap_or_default();
            let Some(k) = rng.pick(&keys).cloned() else { return };
            let ok = Command::new("setfattr").args(["-x", &k]).arg(at(&p)).status().unwrap();
            assert!(ok.success(), "setfattr -x {p}");
            m.xattrs.get_mut(&ino).unwrap().remove(&k);
        }
    }
}

fn getfattr(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let out =
        Command::new("getfattr").args(["-d", "-m", "^user\\.", "--absolute-names"]).arg(p).output().unwrap();
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((k, v)) = line.split_once('=') {
            m.insert(k.to_string(), v.trim_matches('"').as_bytes().to_vec());
        }
    }
    m
}

/// The mount must hold exactly the model.
fn compare_mount(m: &Model, root: &Path) {
    let mut seen = BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let key = r.to_string_lossy().into_owned();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            match m.names.get(&key) {
                Some(Node::Dir) => {
                    assert!(md.is_dir(), "{key} should be a directory");
                    stack.push(r);
                }
                Some(Node::File(ino)) => {
                    let got = std::fs::read(e.path()).unwrap();
                    assert!(
                        got == m.inodes[ino],
                        "{key}: content differs ({} vs {} bytes)",
                        got.len(),
                        m.inodes[ino].len()
                    );
                    assert_eq!(md.nlink() as usize, m.links(*ino), "{key}: link count");
                    let want = m.xattrs.get(ino).cloned().unwrap_or_default();
                    if !want.is_empty() {
                        assert_eq!(getfattr(&e.path()), want, "{key}: xattrs");
                    }
                }
                Some(Node::Symlink(t)) => {
                    assert_eq!(std::fs::read_link(e.path()).unwrap().to_string_lossy(), t.as_str(), "{key}");
                }
                None => panic!("{key} exists on the mount but not in the model"),
            }
            seen.insert(key);
        }
    }
    let missing: Vec<&String> = m.names.keys().filter(|k| !seen.contains(*k)).collect();
    assert!(missing.is_empty(), "missing on the mount: {missing:?}");
}

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
