//! `rzfs-bench copyout`: stream one file out of an exported pool through the library, in
//! process (pool → DSL → DMU objset → ZPL), the way `rzdb -r` does but without writing
//! anywhere. Prints one JSON object: bytes, total and streaming seconds, MB/s, peak RSS.
//! Run as a child of the harness so its peak RSS belongs to this copy alone.

use crate::sys::{self, mbps};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// What to copy.
pub struct Args {
    pub dir: PathBuf,
    pub fs: String,
    pub path: String,
    pub arc_max: Option<usize>,
    pub hash: bool,
}

/// Streams the file in 1 MiB reads (rzdb's chunk); returns the JSON line.
pub fn run(a: &Args) -> Result<String, String> {
    let t0 = Instant::now();
    let pool_name = a.fs.split('/').next().unwrap_or(&a.fs);
    let cands = pool::discover(std::slice::from_ref(&a.dir), false).map_err(|e| e.to_string())?;
    let cand = pool::discover::select(&cands, pool_name).map_err(|e| e.to_string())?;
    let opts = pool::ImportOpts {
        readonly: true,
        cache_bytes: a.arc_max.unwrap_or(arc::DEFAULT_LIMIT_BYTES),
        ..Default::default()
    };
    let p = pool::import(cand, &opts).map_err(|e| format!("import: {e}"))?;
    let dsl = p.dsl();
    let ds = dsl.find(&a.fs).map_err(|e| e.to_string())?;
    let os = dsl.open_objset(&ds).map_err(|e| e.to_string())?;
    let z = zpl::Zpl::open(os).map_err(|e| e.to_string())?;
    let obj = z.resolve(&a.path).map_err(|e| e.to_string())?;
    let size = z.getattr(obj).map_err(|e| e.to_string())?.size;
    let dn = z.file_dnode(obj).map_err(|e| e.to_string())?;
    let t1 = Instant::now();
    let mut h = a.hash.then(blake3::Hasher::new);
    let mut off = 0u64;
    while off < size {
        let d = z.read_with(&dn, size, off, 1 << 20).map_err(|e| format!("read at {off}: {e}"))?;
        if d.is_empty() {
            break;
        }
        if let Some(h) = h.as_mut() {
            h.update(&d);
        }
        std::hint::black_box(&d);
        off += d.len() as u64;
    }
    let stream = t1.elapsed().as_secs_f64();
    let total = t0.elapsed().as_secs_f64();
    let arc = a.arc_max.unwrap_or(arc::DEFAULT_LIMIT_BYTES);
    let v = json!({
        "label": format!("in-process library copy-out (ZPL read_with, 1 MiB reads), cache {} MiB{}",
                         arc >> 20, if a.arc_max.is_none() { " (default)" } else { "" }),
        "bytes": off, "secs": total, "secs_stream": stream, "mbps": mbps(off, total),
        "mbps_stream": mbps(off, stream), "vmhwm_kib": sys::self_vmhwm_kib(),
        "blake3": h.map(|h| h.finalize().to_hex().to_string()),
    });
    Ok(v.to_string())
}
