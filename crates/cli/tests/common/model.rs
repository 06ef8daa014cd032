//! The POSIX model of the randomized workloads: random operations applied both to a FUSE
//! mount and to an in-memory model (create, write, overwrite, append, truncate, rename over
//! existing targets and across directories, unlink, link, mkdir, rmdir, symlink, xattrs),
//! and the comparison of a mount with the model. `posix_model` runs it alone; `fault_model`
//! mixes it with injected device faults and crashes of the daemon.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
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
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        (!v.is_empty()).then(|| &v[self.below(v.len() as u64) as usize])
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    File(u64),
    Dir,
    Symlink(String),
}

#[derive(Clone, Default)]
pub struct Model {
    pub names: BTreeMap<String, Node>,
    pub inodes: BTreeMap<u64, Vec<u8>>,
    pub xattrs: BTreeMap<u64, BTreeMap<String, Vec<u8>>>,
    pub next_ino: u64,
}

impl Model {
    pub fn dirs(&self) -> Vec<String> {
        let mut d: Vec<String> = vec![String::new()];
        d.extend(self.names.iter().filter(|(_, n)| **n == Node::Dir).map(|(k, _)| k.clone()));
        d
    }
    pub fn files(&self) -> Vec<String> {
        self.names.iter().filter(|(_, n)| matches!(n, Node::File(_))).map(|(k, _)| k.clone()).collect()
    }
    pub fn links(&self, ino: u64) -> usize {
        self.names.values().filter(|n| **n == Node::File(ino)).count()
    }
    pub fn is_empty_dir(&self, d: &str) -> bool {
        let prefix = format!("{d}/");
        !self.names.keys().any(|k| k.starts_with(&prefix))
    }
    pub fn remove_name(&mut self, name: &str) {
        if let Some(Node::File(ino)) = self.names.remove(name) {
            if self.links(ino) == 0 {
                self.inodes.remove(&ino);
                self.xattrs.remove(&ino);
            }
        }
    }
}

pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

pub fn fresh_name(rng: &mut Rng, m: &Model, dir: &str) -> String {
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
pub fn step(rng: &mut Rng, m: &mut Model, root: &Path) {
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

pub fn getfattr(p: &Path) -> BTreeMap<String, Vec<u8>> {
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
pub fn compare_mount(m: &Model, root: &Path) {
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
