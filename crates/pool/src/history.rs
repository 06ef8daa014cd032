//! # Pool history (`zpool history`), the SPA history object
//!
//! On disk (OpenZFS `module/zfs/spa_history.c`, `include/sys/spa_impl.h`): a MOS object of
//! type `SPA history` (128 KiB blocks), named `history` in the object directory, whose bonus
//! (`spa_history_phys_t`, type `SPA history offsets`) holds five u64: `sh_pool_create_len`
//! (the first record, the create command, is kept forever), `sh_phys_max_off` (the object's
//! physical size: 0.1% of the pool, between 128 KiB and 1 GiB), `sh_bof`/`sh_eof` (logical
//! start and end of the ring), `sh_records_lost`. A record is its length as a little-endian
//! u64 followed by an nvlist packed with `NV_ENCODE_NATIVE` (`history time`, `history
//! command`, `history who`, `history hostname`, `history zone`). Logical offsets past the create record wrap
//! onto `[sh_pool_create_len, sh_phys_max_off)`; when the ring is full the oldest records
//! are dropped (the logical BOF advances record by record).

use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::nvlist::NvList;
use ondisk::ByteOrder;

const PHYS_SIZE: usize = 40;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct HistoryPhys {
    create_len: u64,
    max_off: u64,
    bof: u64,
    eof: u64,
    lost: u64,
}

impl HistoryPhys {
    fn parse(b: &[u8]) -> HistoryPhys {
        let w =
            |i: usize| b.get(i * 8..i * 8 + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_le_bytes);
        HistoryPhys { create_len: w(0), max_off: w(1), bof: w(2), eof: w(3), lost: w(4) }
    }
    fn encode(&self) -> Vec<u8> {
        [self.create_len, self.max_off, self.bof, self.eof, self.lost]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }
    /// Physical offset of logical offset `off` (`spa_history_log_to_phys`).
    fn phys(&self, off: u64) -> u64 {
        let ring = self.max_off - self.create_len;
        if off < self.create_len || ring == 0 {
            off
        } else {
            (off - self.create_len) % ring + self.create_len
        }
    }
}

fn bad(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(format!("pool history: {e}"))
}

impl PoolWriter {
    /// The history object, created on first use.
    fn history_object(&mut self) -> Result<u64> {
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        if let Some(o) = self.mos_zaps.lookup_u64(&self.mos, dir, "history").map_err(bad)? {
            return Ok(o);
        }
        // Sized by the normal class, as spa_history_create_obj does.
        let size: u64 = self
            .top_info
            .iter()
            .zip(&self.tops)
            .filter(|(_, v)| !v.is_log())
            .map(|(t, _)| (t.asize >> t.ms_shift) << t.ms_shift)
            .sum();
        let phys = HistoryPhys { max_off: (size / 1000).clamp(128 << 10, 1 << 30), ..Default::default() };
        let obj = self.mos.alloc_object(
            T::SpaHistory.to_u8(),
            128 << 10,
            T::SpaHistoryOffsets.to_u8(),
            phys.encode(),
        )?;
        self.mos_zaps.update_u64(&self.mos, dir, "history", obj).map_err(bad)?;
        Ok(obj)
    }

    /// Appends a command to the pool history (written with the next txg).
    pub fn log_history(&mut self, command: &str, who: u64) -> Result<()> {
        let mut nv = NvList::new();
        nv.add_u64("history time", (self.now)());
        nv.add_str("history command", command);
        nv.add_u64("history who", who);
        nv.add_str("history hostname", &self.hostname);
        // `spa_history_zone()`: OpenZFS on Linux names the zone "linux".
        nv.add_str("history zone", "linux");
        self.append_history(&nv)
    }

    /// Appends an internal event to the pool history (`spa_history_log_internal`: what the
    /// pool did, shown by `zpool history -i` as `[txg:N] NAME TEXT`).
    pub fn log_internal(&mut self, name: &str, text: &str) -> Result<()> {
        let mut nv = NvList::new();
        nv.add_u64("history time", (self.now)());
        nv.add_str("internal_name", name);
        nv.add_str("history internal str", text);
        nv.add_u64("history txg", self.txg);
        nv.add_str("history hostname", &self.hostname);
        self.append_history(&nv)
    }

    /// Internal history that must not fail what it records: an error is only reported.
    pub(crate) fn note_internal(&mut self, name: &str, text: &str) {
        if let Err(e) = self.log_internal(name, text) {
            eprintln!("rzfsd: pool '{}': history: {e}", self.name);
        }
    }

    fn append_history(&mut self, nv: &NvList) -> Result<()> {
        let obj = self.history_object()?;
        let dn = self.mos.dnode(obj)?.ok_or_else(|| bad("history object vanished"))?;
        let mut h = HistoryPhys::parse(&dn.bonus);
        let packed = nv.encode_native(ByteOrder::Little);
        let mut rec = (packed.len() as u64).to_le_bytes().to_vec();
        rec.extend_from_slice(&packed);
        let len = rec.len() as u64;
        if h.max_off.saturating_sub(h.create_len) <= len + 8 {
            h.lost += 1;
            self.mos.set_bonus(obj, h.encode())?;
            return Ok(());
        }
        // Drop the oldest records until this one fits (spa_history_advance_bof).
        while h.max_off - h.create_len - (h.eof - h.bof) <= len {
            let mut l = [0u8; 8];
            self.read_ring(obj, &h, h.bof, &mut l)?;
            h.bof += 8 + u64::from_le_bytes(l);
            h.lost += 1;
        }
        self.write_ring(obj, &h, h.eof, &rec)?;
        h.eof += len;
        if h.create_len == 0 {
            h.create_len = h.eof;
            h.bof = h.eof;
        }
        self.mos.set_bonus(obj, h.encode())?;
        Ok(())
    }

    fn read_ring(&self, obj: u64, h: &HistoryPhys, off: u64, buf: &mut [u8]) -> Result<()> {
        for (i, b) in buf.iter_mut().enumerate() {
            let mut one = [0u8; 1];
            self.mos.read(obj, h.phys(off + i as u64), &mut one)?;
            *b = one[0];
        }
        Ok(())
    }

    fn write_ring(&mut self, obj: u64, h: &HistoryPhys, off: u64, data: &[u8]) -> Result<()> {
        let start = h.phys(off);
        let room = (h.max_off - start) as usize;
        let first = data.len().min(room);
        self.mos.write(obj, start, &data[..first])?;
        if first < data.len() {
            self.mos.write(obj, h.create_len, &data[first..])?;
        }
        Ok(())
    }
}

/// One record of a pool's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A command (`zpool history`): time, command line, uid, host, zone.
    Command { time: u64, command: String, who: Option<u64>, host: Option<String>, zone: Option<String> },
    /// An internal event (`zpool history -i`): time, txg, name, text, host.
    Internal { time: u64, txg: u64, name: String, text: String, host: Option<String> },
}

/// Reads every record of a pool's history: (time, command) pairs, oldest first.
pub fn read_history(pool: &crate::Pool) -> Result<Vec<(u64, String)>> {
    Ok(read_records(pool)?
        .into_iter()
        .filter_map(|r| match r {
            Record::Command { time, command, .. } => Some((time, command)),
            Record::Internal { .. } => None,
        })
        .collect())
}

/// Reads every record of a pool's history, oldest first.
pub fn read_records(pool: &crate::Pool) -> Result<Vec<Record>> {
    let mos = &pool.mos;
    let dir = crate::import::DMU_POOL_DIRECTORY_OBJECT;
    let Some(obj) = zap::lookup_u64(mos, dir, "history").map_err(bad)? else { return Ok(Vec::new()) };
    let dn = mos.dnode(obj)?;
    let h = HistoryPhys::parse(&dn.bonus);
    if h.eof < h.bof || h.max_off < h.create_len || dn.bonus.len() < PHYS_SIZE {
        return Err(bad("corrupt header"));
    }
    let get = |off: u64, n: usize| -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n);
        let mut pos = off;
        while out.len() < n {
            let p = h.phys(pos);
            let chunk = (n - out.len()).min((h.max_off - p) as usize).max(1);
            let mut b = vec![0u8; chunk];
            mos.read(&dn, p, &mut b)?;
            out.extend_from_slice(&b);
            pos += chunk as u64;
        }
        Ok(out)
    };
    let mut out = Vec::new();
    let mut regions = vec![(0, h.create_len), (h.bof, h.eof)];
    if h.create_len == h.bof {
        regions = vec![(0, h.eof)];
    }
    for (mut off, end) in regions {
        while off + 8 <= end {
            let len = u64::from_le_bytes(get(off, 8)?.try_into().map_err(|_| bad("length"))?);
            if len == 0 || len > 1 << 20 || off + 8 + len > end {
                return Err(bad(format!("record at {off} has length {len}")));
            }
            let rec = NvList::decode(&get(off + 8, len as usize)?).map_err(bad)?;
            let time = rec.get_u64("history time").unwrap_or(0);
            let host = rec.get_str("history hostname").map(str::to_string);
            if let Some(cmd) = rec.get_str("history command") {
                out.push(Record::Command {
                    time,
                    command: cmd.to_string(),
                    who: rec.get_u64("history who"),
                    host,
                    zone: rec.get_str("history zone").map(str::to_string),
                });
            } else if let Some(name) = rec.get_str("internal_name") {
                out.push(Record::Internal {
                    time,
                    txg: rec.get_u64("history txg").unwrap_or(0),
                    name: name.to_string(),
                    text: rec.get_str("history internal str").unwrap_or("").to_string(),
                    host,
                });
            }
            off += 8 + len;
        }
    }
    Ok(out)
}
