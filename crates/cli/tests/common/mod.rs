//! Shared helpers of the oracle tests: locating fixtures and comparing what rzfs reads with
//! what the writer (OpenZFS's zdb, or zfs-fuse through its mount) recorded.
#![allow(dead_code)]

pub mod libpool;
pub mod model;
pub mod pools;
pub mod rng;
pub mod space;
pub mod tools;
pub mod useracct;

use pool::Pool;
use rzfs_cli::inspect::{self, Opts};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The fixture root (`$RZFS_TESTDATA`, else `test-data` at the workspace root), or `None`
/// when oracle tests are not requested. With `RZFS_ORACLE=1` a missing fixture is a failure,
/// never a skip.
pub fn testdata(kind: &str) -> Option<PathBuf> {
    let root = std::env::var_os("RZFS_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../test-data"));
    let dir = root.join(kind);
    if std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "0") {
        eprintln!("oracle tier disabled (RZFS_ORACLE=0): the oracle tier of scripts/test.sh runs this");
        return None;
    }
    let required = std::env::var("RZFS_ORACLE").is_ok_and(|v| v == "1");
    if !dir.is_dir() {
        assert!(
            !required,
            "RZFS_ORACLE=1 but fixture {} is missing: run tests/oracle/make_all.sh",
            dir.display()
        );
        eprintln!(
            "oracle fixtures absent ({}); set RZFS_ORACLE=1 after tests/oracle/make_all.sh",
            dir.display()
        );
        return None;
    }
    Some(dir)
}

/// Every fixture directory of a kind (those holding an expected.json), sorted.
pub fn fixtures(kind: &str) -> Vec<PathBuf> {
    let Some(dir) = testdata(kind) else { return Vec::new() };
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("expected.json").is_file())
        .collect();
    v.sort();
    v
}

pub fn expected(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap()
}

pub fn open(dir: &Path, pool: &str) -> Result<Arc<Pool>, String> {
    inspect::open(&Opts { dirs: vec![dir.to_path_buf()], arc_max: None }, pool)
}

/// The dataset entries of an expected.json that rzfs must reproduce.
pub fn readable_datasets(exp: &Value) -> Vec<Value> {
    exp["datasets"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|d| matches!(d["type"].as_str(), Some("filesystem") | Some("snapshot")))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// Compares a manifest produced by rzfs (`rzdb --manifest` JSON) with the writer's record.
/// Returns one line per difference.
pub fn compare_files(expected: &[Value], got: &[Value]) -> Vec<String> {
    let got: BTreeMap<&str, &Value> = got.iter().filter_map(|f| Some((f["path"].as_str()?, f))).collect();
    let mut probs = Vec::new();
    let mut seen = 0;
    for f in expected {
        let Some(p) = f["path"].as_str() else { continue };
        if p == "/" {
            continue;
        }
        seen += 1;
        let Some(g) = got.get(p) else {
            probs.push(format!("missing {p}"));
            continue;
        };
        if let Some(e) = g.get("error") {
            probs.push(format!("{p}: read error {e}"));
        }
        for k in ["size", "mode", "uid", "gid", "links", "sha256", "target"] {
            if let Some(v) = f.get(k) {
                if g.get(k) != Some(v) {
                    probs.push(format!("{p}: {k} expected {v} got {:?}", g.get(k)));
                }
            }
        }
        if let Some(m) = f.get("mtime").and_then(Value::as_u64) {
            if g["mtime"][0].as_u64() != Some(m) {
                probs.push(format!("{p}: mtime expected {m} got {}", g["mtime"]));
            }
        }
        if let Some(xa) = f.get("xattrs") {
            let gx = g.get("xattrs").cloned().unwrap_or(Value::Object(Default::default()));
            if *xa != gx {
                probs.push(format!("{p}: xattrs expected {xa} got {gx}"));
            }
        }
    }
    if got.len() != seen {
        let exp: std::collections::BTreeSet<&str> =
            expected.iter().filter_map(|f| f["path"].as_str()).collect();
        for p in got.keys().filter(|p| !exp.contains(*p)) {
            probs.push(format!("unexpected {p}"));
        }
    }
    probs
}

/// rzfs's manifest of a dataset, in-process (no daemon, no FUSE).
pub fn manifest(dir: &Path, dataset: &str) -> Result<Vec<Value>, String> {
    let out = inspect::manifest(&Opts { dirs: vec![dir.to_path_buf()], arc_max: None }, dataset)?;
    let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
    Ok(v["files"].as_array().cloned().unwrap_or_default())
}

/// Checks every readable dataset of one fixture; returns the problems.
pub fn check_fixture(dir: &Path) -> Vec<String> {
    let exp = expected(dir);
    let mut probs = Vec::new();
    for ds in readable_datasets(&exp) {
        let name = ds["name"].as_str().unwrap();
        match manifest(dir, name) {
            Ok(got) => {
                let files = ds["files"].as_array().cloned().unwrap_or_default();
                for p in compare_files(&files, &got) {
                    probs.push(format!("{name}: {p}"));
                }
            }
            Err(e) => probs.push(format!("{name}: {e}")),
        }
    }
    probs
}

/// sha256 of a file, hex.
pub fn sha256_file(p: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(p).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Image files of a fixture (everything but the JSON).
pub fn images(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "img" || e == "dat"))
        .collect();
    v.sort();
    v
}

/// Copies a fixture into a fresh temporary directory, keeping images sparse.
pub fn scratch_copy(dir: &Path, tag: &str) -> PathBuf {
    let dst = std::env::temp_dir().join(format!("rzfs-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(&dst).unwrap();
    for f in images(dir) {
        let st = std::process::Command::new("cp").arg("--sparse=always").arg(&f).arg(&dst).status().unwrap();
        assert!(st.success());
    }
    std::fs::copy(dir.join("expected.json"), dst.join("expected.json")).unwrap();
    dst
}

/// Overwrites `[from, to)` of a file with pseudo-random bytes (deterministic per seed).
pub fn scramble(path: &Path, from: u64, to: u64, seed: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(from)).unwrap();
    let mut x = seed | 1;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = to - from;
    while left > 0 {
        for b in buf.iter_mut() {
            // xorshift64: cheap, deterministic noise.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).unwrap();
        left -= n as u64;
    }
}
