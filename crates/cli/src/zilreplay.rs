//! Replaying the intent logs a writable import claimed (OpenZFS `zil_replay` with the ZPL's
//! `zfs_replay.c` and the volumes' `zvol_replay_*`), in the import's first txg, before
//! anything else can change the datasets. `pool::zil` claims and ends the logs; this layer
//! knows what a file is.
//!
//! Semantics kept from OpenZFS: a write whose object is gone is skipped (writes are logged
//! out of order, `TX_OOO`); a write record without copied data names a whole block
//! written directly (`WR_INDIRECT`), which is written whole at its block-aligned offset
//! while the file's size grows only to the record's end (`z_replay_eof`); a truncate of
//! length 0 cuts the file at the offset; `TX_WRITE2` only extends the size; `TX_SETATTR`
//! sets what its mask names (on Linux the kernel's `ATTR_*` bits), the extended attributes
//! that may follow it excepted.

use ondisk::zil::{self as lr, LogRecord, LrBody};
use pool::writer::PoolWriter;
use pool::zil::PendingLog;
use zpl::write::{SetAttr, ZplWriter};

/// `LR_FOID_OBJ_MASK`: the object number part of `lr_foid` (the top bits count dnode slots).
const FOID_OBJ_MASK: u64 = (1 << 48) - 1;
/// The largest block (`SPA_MAXBLOCKSIZE`): a write record without copied data covers one.
const MAX_BLOCK: u64 = 16 << 20;
/// Object 1 of a volume's objset holds its data (`ZVOL_OBJ`).
const ZVOL_OBJ: u64 = 1;

fn now() -> (u64, u64) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_nanos()))
}

/// Replays and ends every log claimed by the import of `w`.
pub fn replay_all(w: &mut PoolWriter) -> Result<(), String> {
    for log in std::mem::take(&mut w.pending_logs) {
        let n = replay(w, &log).map_err(|e| format!("replaying the intent log of '{}': {e}", log.name))?;
        w.finish_intent_log(&log).map_err(|e| format!("ending the intent log of '{}': {e}", log.name))?;
        eprintln!("rzfs: '{}': replayed {n} intent log records", log.name);
    }
    Ok(())
}

/// What a write record writes: (object, offset, bytes, end of the record's range).
type WriteData = (u64, u64, Vec<u8>, u64);

/// The data a write record puts at which offset, and the size it gives the file.
fn write_data(w: &PoolWriter, r: &LogRecord) -> Result<Option<WriteData>, String> {
    let LrBody::Write { foid, offset, length, bp, data, .. } = &r.body else { return Ok(None) };
    let obj = foid & FOID_OBJ_MASK;
    let end = offset.checked_add(*length).ok_or("write record past the largest offset")?;
    Ok(Some(match data {
        Some(d) => (obj, *offset, d.clone(), end),
        // A hole: zeros, never more than a block (the length comes from disk).
        None if bp.is_hole() => {
            if *length > MAX_BLOCK {
                return Err(format!("write record of {length} bytes without data"));
            }
            (obj, *offset, vec![0u8; *length as usize], end)
        }
        None => {
            let block = w.reader.zio.read(bp).map_err(|e| format!("block of a write record: {e}"))?;
            let bs = block.len() as u64;
            if bs == 0 {
                return Err("empty block in a write record".into());
            }
            (obj, offset - offset % bs, block, end)
        }
    }))
}

fn replay(w: &mut PoolWriter, log: &PendingLog) -> Result<usize, String> {
    let txg = w.txg;
    let mut writes = Vec::with_capacity(log.records.len());
    for r in &log.records {
        writes.push(write_data(w, r)?);
    }
    let d = w.datasets.get_mut(&log.ds).ok_or("dataset not open")?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    if log.volume {
        for (r, wd) in log.records.iter().zip(writes) {
            match (&r.body, wd) {
                (_, Some((_, off, data, _))) => d.os.write(ZVOL_OBJ, off, &data).map_err(|x| e(&x))?,
                (LrBody::Truncate { offset, length, .. }, None) => {
                    let len = if *length == 0 { u64::MAX } else { *length };
                    d.os.free_range(ZVOL_OBJ, *offset, len).map_err(|x| e(&x))?
                }
                _ => {}
            }
        }
        return Ok(log.records.len());
    }
    let mut z = ZplWriter::open(&d.os, &mut d.zaps).map_err(|x| e(&x))?;
    z.txg = txg;
    z.copies = d.policy.copies;
    z.recordsize = d.recordsize;
    let rs = d.recordsize;
    let mut n = 0;
    for (r, wd) in log.records.iter().zip(writes) {
        let foid = match &r.body {
            LrBody::Write { foid, .. }
            | LrBody::Truncate { foid, .. }
            | LrBody::Write2 { foid, .. }
            | LrBody::Setattr { foid, .. } => foid & FOID_OBJ_MASK,
            LrBody::Other { .. } => return Err(format!("record type {} is not replayed", r.kind())),
        };
        // Logged out of order: the object may be gone since, which is no error.
        let Ok(before) = z.getattr(&d.os, foid) else { continue };
        match (&r.body, wd) {
            (LrBody::Write { data, .. }, Some((_, off, bytes, end))) => {
                z.write(&mut d.os, &mut d.zaps, foid, off, &bytes, rs, now()).map_err(|x| e(&x))?;
                if data.is_none() {
                    let keep = before.size.max(end);
                    if z.getattr(&d.os, foid).map_err(|x| e(&x))?.size > keep {
                        z.truncate(&mut d.os, &mut d.zaps, foid, keep, now()).map_err(|x| e(&x))?;
                    }
                }
            }
            (LrBody::Truncate { offset, length, .. }, _) => {
                if *length == 0 {
                    z.truncate(&mut d.os, &mut d.zaps, foid, *offset, now()).map_err(|x| e(&x))?;
                } else {
                    z.punch_hole(&mut d.os, &mut d.zaps, foid, *offset, *length, now()).map_err(|x| e(&x))?;
                }
            }
            (LrBody::Setattr { mask, mode, uid, gid, size, atime, mtime, xvattr, .. }, _) => {
                if !xvattr.is_empty() || mask & lr::AT_XVATTR != 0 {
                    // DOS and BSD-flag attributes: rzfs keeps none of them.
                    eprintln!(
                        "rzfs: '{}': extended attributes of a TX_SETATTR record not replayed",
                        log.name
                    );
                }
                let has = |b: u64| mask & b != 0;
                let id = |v: u64| u32::try_from(v).map_err(|_| format!("id {v} in a TX_SETATTR record"));
                let sa = SetAttr {
                    mode: has(lr::AT_MODE).then_some((*mode & 0o7777) as u32),
                    uid: if has(lr::AT_UID) { Some(id(*uid)?) } else { None },
                    gid: if has(lr::AT_GID) { Some(id(*gid)?) } else { None },
                    size: has(lr::AT_SIZE).then_some(*size),
                    atime: has(lr::AT_ATIME).then_some((atime[0], atime[1])),
                    mtime: has(lr::AT_MTIME).then_some((mtime[0], mtime[1])),
                };
                z.setattr(&mut d.os, &mut d.zaps, foid, sa, now()).map_err(|x| e(&x))?;
            }
            (LrBody::Write2 { offset, length, .. }, _) => {
                let end = offset.saturating_add(*length);
                if end > before.size {
                    z.truncate(&mut d.os, &mut d.zaps, foid, end, now()).map_err(|x| e(&x))?;
                }
            }
            _ => {}
        }
        n += 1;
    }
    Ok(n)
}
