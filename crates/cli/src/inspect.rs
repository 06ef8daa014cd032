//! What `rzdb` does: open an exported pool directly (read-only) and inspect or copy out.

use crate::zplopen;
use pool::{ImportOpts, Pool};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zpl::{FileType, Zpl};

/// Where to look for devices, and cache bound.
pub struct Opts {
    pub dirs: Vec<PathBuf>,
    pub arc_max: Option<usize>,
}

type R = Result<String, String>;

/// Opens pool `name` (the part of `target` before '/' or '@').
pub fn open(opts: &Opts, target: &str) -> Result<Arc<Pool>, String> {
    let name = target.split(['/', '@']).next().unwrap_or(target);
    let cands = pool::discover(&opts.dirs, false).map_err(|e| e.to_string())?;
    let c = pool::discover::select(&cands, name).map_err(|e| e.to_string())?;
    let mut io = ImportOpts::default();
    if let Some(m) = opts.arc_max {
        io.cache_bytes = m;
    }
    pool::import(c, &io).map(Arc::new).map_err(|e| format!("cannot open '{name}': {e}"))
}

/// `-l`: the labels of one device.
pub fn labels(dev: &str) -> R {
    let d = vdev::FileDevice::open(Path::new(dev), false).map_err(|e| format!("cannot open {dev}: {e}"))?;
    let mut out = String::new();
    for l in 0..4 {
        let _ = writeln!(
            out,
            "------------------------------------\nLABEL {l}\n------------------------------------"
        );
        match pool::discover::read_label(&d, l) {
            Some((_, nv)) => {
                let _ = writeln!(out, "{nv}");
            }
            None => out.push_str("    failed to unpack label\n"),
        }
    }
    Ok(out)
}

/// `-u`: the uberblock in use.
pub fn uberblock(opts: &Opts, target: &str) -> R {
    let p = open(opts, target)?;
    let ub = &p.uberblock;
    let bp = ondisk::blkptr::BlkPtr::parse(&ub.rootbp_raw, ub.byte_order).map_err(|e| e.to_string())?;
    Ok(format!(
        "Uberblock:\n\tmagic = 0000000000bab10c\n\tversion = {}\n\ttxg = {}\n\tguid_sum = {}\n\ttimestamp = {}\n\trootbp = {bp}\n",
        ub.version, ub.txg, ub.guid_sum, ub.timestamp
    ))
}

/// `-d`: datasets (one line each, zdb style).
pub fn datasets(opts: &Opts, target: &str, _level: u8) -> R {
    let p = open(opts, target)?;
    let dsl = p.dsl();
    let mut out = String::new();
    for ds in dsl.list().map_err(|e| e.to_string())? {
        if !(ds.name == target
            || ds.name.starts_with(&format!("{target}/"))
            || ds.name.starts_with(&format!("{target}@"))
            || !target.contains('/'))
        {
            continue;
        }
        let objs = dsl.open_objset(&ds).map(|os| os.object_limit()).unwrap_or(0);
        let _ = writeln!(
            out,
            "Dataset {} [{}], ID {}, cr_txg {}, {} bytes, {} objects",
            ds.name,
            match ds.kind {
                dsl::DatasetKind::Volume => "ZVOL",
                _ => "ZPL",
            },
            ds.ds_obj,
            ds.ds.creation_txg,
            ds.ds.referenced_bytes,
            objs
        );
    }
    Ok(out)
}

/// `rzdb -i`: the intent log of each file system and volume (zdb -ivv): its header, then
/// every record of the chain as a replay would read it (`pool::zil::read_log`).
pub fn intent_logs(opts: &Opts, target: &str) -> R {
    use ondisk::zil::LrBody;
    let p = open(opts, target)?;
    let dsl = p.dsl();
    let mut out = String::new();
    for ds in dsl.list().map_err(|e| e.to_string())? {
        let ours = ds.name == target || ds.name.starts_with(&format!("{target}/")) || !target.contains('/');
        if !ours || !matches!(ds.kind, dsl::DatasetKind::Filesystem | dsl::DatasetKind::Volume) {
            continue;
        }
        let Ok(os) = dsl.open_objset(&ds) else { continue };
        let zh = &os.phys.zil;
        let _ = writeln!(out, "Dataset {}, ID {}", ds.name, ds.ds_obj);
        if zh.log.is_hole() {
            let _ = writeln!(out, "    no intent log");
            continue;
        }
        let _ = writeln!(
            out,
            "    ZIL header: claim_txg {}, claim_blk_seq {}, claim_lr_seq {} replay_seq {}, flags {:#x}",
            zh.claim_txg, zh.claim_blk_seq, zh.claim_lr_seq, zh.replay_seq, zh.flags
        );
        let chain = pool::zil::read_log(&p.reader.zio, zh, 1 << 20);
        let _ = writeln!(out, "    {} log blocks, {} records", chain.blocks.len(), chain.records.len());
        for r in &chain.records {
            let name = ondisk::zil::txtype_name(r.txtype).to_uppercase();
            let _ = write!(out, "        TX_{name:<16} txg {}, seq {}", r.txg, r.seq);
            match &r.body {
                LrBody::Write { foid, offset, length, data, .. } => {
                    let how = if data.is_some() { "copied" } else { "indirect" };
                    let _ = writeln!(out, ": foid {foid}, offset {offset:#x}, length {length:#x} ({how})");
                }
                LrBody::Truncate { foid, offset, length } | LrBody::Write2 { foid, offset, length } => {
                    let _ = writeln!(out, ": foid {foid}, offset {offset:#x}, length {length:#x}");
                }
                LrBody::Setattr { foid, mask, mode, uid, gid, size, atime, mtime, .. } => {
                    use ondisk::zil::{AT_ATIME, AT_GID, AT_MODE, AT_MTIME, AT_SIZE, AT_UID};
                    let _ = write!(out, ": foid {foid}, mask {mask:#x}");
                    for (bit, what) in [
                        (AT_MODE, format!("mode {mode:o}")),
                        (AT_UID, format!("uid {uid}")),
                        (AT_GID, format!("gid {gid}")),
                        (AT_SIZE, format!("size {size}")),
                        (AT_ATIME, format!("atime {}.{:09}", atime[0], atime[1])),
                        (AT_MTIME, format!("mtime {}.{:09}", mtime[0], mtime[1])),
                    ] {
                        if mask & bit != 0 {
                            let _ = write!(out, ", {what}");
                        }
                    }
                    let _ = writeln!(out);
                }
                LrBody::Other { .. } => {
                    let _ = writeln!(out);
                }
            }
        }
        if let Some(why) = &chain.stop {
            let _ = writeln!(out, "    the chain ends early: {why}");
        }
    }
    Ok(out)
}

fn open_fs(opts: &Opts, target: &str) -> Result<(Arc<Pool>, Zpl), String> {
    let p = open(opts, target)?;
    let ds = p.dsl().find(target).map_err(|e| e.to_string())?;
    let z = zplopen::open_zpl_only(&p, &ds).map_err(|e| e.to_string())?;
    Ok((p, z))
}

/// `-r`: copies one file out (sparsely: holes stay holes).
pub fn copy_file(opts: &Opts, target: &str, path: &str, dest: &str) -> R {
    let (_p, z) = open_fs(opts, target)?;
    let obj = z.resolve(path).map_err(|e| e.to_string())?;
    let a = z.getattr(obj).map_err(|e| e.to_string())?;
    if a.kind() != FileType::Regular {
        return Err(format!("{path} is not a regular file"));
    }
    let f = std::fs::File::create(dest).map_err(|e| format!("cannot create {dest}: {e}"))?;
    // A device such as /dev/null cannot take a length; only regular files get one.
    let n = if f.metadata().map(|m| m.is_file()).unwrap_or(false) {
        crate::recover::copy_sparse(&z, &a, &f)?;
        a.size
    } else {
        let mut f = f;
        copy_object(&z, obj, &mut f)?
    };
    Ok(format!("Copied {path} to {dest} ({n} bytes)\n"))
}

/// Streams a file's contents in 1 MiB pieces; returns the byte count.
fn copy_object(z: &Zpl, obj: u64, w: &mut dyn std::io::Write) -> Result<u64, String> {
    let a = z.getattr(obj).map_err(|e| e.to_string())?;
    let dn = z.file_dnode(obj).map_err(|e| e.to_string())?;
    let mut off = 0u64;
    const CHUNK: usize = 1 << 20;
    while off < a.size {
        let d =
            z.read_with(&dn, a.size, off, CHUNK).map_err(|e| format!("read error at offset {off}: {e}"))?;
        if d.is_empty() {
            break;
        }
        w.write_all(&d).map_err(|e| e.to_string())?;
        off += d.len() as u64;
    }
    Ok(off)
}

/// `-R`: copies a whole dataset out into an empty DEST (see [`crate::recover`] for the
/// rules). Entries that could not be reproduced are reported on stderr as they are met; the
/// result is an error (exit 1) when there were any.
pub fn copy_tree(opts: &Opts, target: &str, dest: &str, same_owner: bool) -> R {
    let (_p, z) = open_fs(opts, target)?;
    let rep = crate::recover::copy_tree(&z, dest, crate::recover::CopyOpts { same_owner })?;
    let out = format!("copied {} entries ({} bytes of data) to {dest}\n", rep.copied, rep.bytes);
    if !rep.skipped.is_empty() {
        return Err(format!("{out}{} entries skipped (listed above)", rep.skipped.len()));
    }
    Ok(out)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `--manifest`: JSON description of every entry (used by the oracle tests).
pub fn manifest(opts: &Opts, target: &str) -> R {
    let (_p, z) = open_fs(opts, target)?;
    let mut files = Vec::new();
    let skipped = z
        .walk_report(&mut |path, e| {
            files.push(entry_json(&z, path, e.object));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    for (path, why) in skipped {
        files.push(serde_json::json!({ "path": path, "error": why }));
    }
    let v = serde_json::json!({ "dataset": target, "files": files });
    Ok(format!("{}\n", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?))
}

fn entry_json(z: &Zpl, path: &str, obj: u64) -> serde_json::Value {
    let a = match z.getattr(obj) {
        Ok(a) => a,
        Err(e) => return serde_json::json!({ "path": path, "error": e.to_string() }),
    };
    let t = match a.kind() {
        FileType::Regular => "f",
        FileType::Directory => "d",
        FileType::Symlink => "l",
        _ => "o",
    };
    let mut v = serde_json::json!({
        "path": path, "type": t, "object": obj, "size": a.size, "mode": a.mode, "uid": a.uid, "gid": a.gid,
        "links": a.links, "mtime": [a.mtime.0, a.mtime.1], "atime": [a.atime.0, a.atime.1], "ctime": [a.ctime.0, a.ctime.1],
    });
    if a.kind() == FileType::Regular {
        let mut h = Sha256::new();
        let mut w = HashWriter(&mut h);
        match copy_object(z, obj, &mut w) {
            Ok(_) => v["sha256"] = hex(&h.finalize()).into(),
            Err(e) => v["error"] = e.into(),
        }
    }
    if a.kind() == FileType::Symlink {
        match z.readlink(obj) {
            Ok(t) => v["target"] = String::from_utf8_lossy(&t).into_owned().into(),
            Err(e) => v["error"] = e.to_string().into(),
        }
    }
    if let Ok(names) = z.listxattr(obj) {
        let mut m = serde_json::Map::new();
        for n in names {
            if let Ok(Some(val)) = z.getxattr(obj, &n) {
                m.insert(String::from_utf8_lossy(&n).into_owned(), hex(&val).into());
            }
        }
        if !m.is_empty() {
            v["xattrs"] = serde_json::Value::Object(m);
        }
    }
    v
}

struct HashWriter<'a>(&'a mut Sha256);
impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `-b`: block statistics, then the space check (leaks, blocks the space maps call free,
/// double allocations) in zdb's words. Returns the report and whether it found a problem
/// (errors or space mismatches: exit status 1, the report still goes to stdout as zdb's does).
pub fn blocks(opts: &Opts, target: &str, verify: bool) -> Result<(String, bool), String> {
    let p = open(opts, target)?;
    let st = crate::blockstats::block_stats(&p, verify)?;
    let mut out = format!(
        "bp count: {}\nbp logical: {}\nbp physical: {}\nbp allocated: {}\nembedded: {}\ngang: {}\nerrors: {}\n",
        st.count, st.lsize, st.psize, st.asize, st.embedded, st.gang, st.errors
    );
    for n in &st.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let mut bad = st.errors > 0;
    if let Some(sp) = &st.space {
        out.push_str(&crate::blockstats::space_lines(sp));
        bad |= !sp.clean();
    }
    Ok((out, bad))
}
