//! Reading the metaslabs' space maps from the MOS, for a read-write import (rebuilding the
//! allocator) and for `rzdb -b` (comparing what is allocated with what is referenced).
//!
//! Each top-level vdev's config names a `metaslab_array` object: one u64 per metaslab, the
//! MOS object of its space map (0 for a metaslab never written). A space map object holds
//! `smp_length` bytes of entries (see `ondisk::spacemap`) in blocks of the object's block
//! size; its bonus is the `space_map_phys_t`. Entries never straddle a block, so a map is
//! read and decoded one block at a time: memory is one block whatever the map's length, and
//! a length claiming more than the object holds is refused before anything is read.

use crate::{data_order, mos_config_nvlist, Pool, PoolError, Result, METASLAB_ARRAY_MAX};
use dmu::Objset;
use ondisk::label::VdevTreeConfig;
use ondisk::spacemap::{decode_entries, SmEntry, SpaceMapPhys};

fn bad(detail: impl Into<String>) -> PoolError {
    PoolError::Load { phase: "space maps", detail: detail.into() }
}

/// The metaslab geometry of one top-level vdev, from the MOS config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopGeometry {
    /// Top-level vdev id.
    pub vdev: u64,
    /// `type` of the vdev ("mirror", "raidz", "file", "hole", "missing", "indirect", ...).
    pub kind: String,
    pub is_log: bool,
    pub ms_array: u64,
    pub ms_shift: u32,
    /// Allocatable bytes (`asize`); `asize >> ms_shift` metaslabs.
    pub asize: u64,
    pub ashift: u8,
    /// The top-level vdev's ZAP (`com.delphix:vdev_zap_top`), 0 if it has none.
    pub top_zap: u64,
}

impl TopGeometry {
    /// Number of metaslabs (a tail shorter than one metaslab is never used).
    pub fn ms_count(&self) -> u64 {
        self.asize.checked_shr(self.ms_shift).unwrap_or(0)
    }
}

/// The geometry of every top-level vdev named by the MOS config, in id order. Vdevs without
/// metaslabs (holes, missing or indirect vdevs) have `ms_array` 0.
pub fn top_geometry(pool: &Pool) -> Result<Vec<TopGeometry>> {
    let nv = mos_config_nvlist(pool)?;
    let root = nv.get_nvlist("vdev_tree").ok_or_else(|| bad("MOS config has no vdev_tree"))?;
    let root = VdevTreeConfig::from_nvlist(root).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    for (i, c) in root.children.iter().enumerate() {
        let ms_shift = c.metaslab_shift.unwrap_or(0);
        let ashift = c.ashift.unwrap_or(9);
        if ms_shift > 63 || ashift > 24 {
            return Err(bad(format!("vdev {i}: metaslab_shift {ms_shift}, ashift {ashift}")));
        }
        out.push(TopGeometry {
            vdev: c.id.unwrap_or(i as u64),
            kind: c.kind.clone(),
            is_log: c.is_log,
            ms_array: c.metaslab_array.unwrap_or(0),
            ms_shift: ms_shift as u32,
            asize: c.asize.unwrap_or(0),
            ashift: ashift as u8,
            top_zap: c.top_zap.unwrap_or(0),
        });
    }
    Ok(out)
}

/// The space map object of each of the `count` metaslabs of array `ms_array` (0 = none).
/// OpenZFS writes a metaslab's slot only when the metaslab first gets a space map, so the
/// array object may end before `count` slots: the missing ones are 0.
pub fn metaslab_objects(mos: &Objset, ms_array: u64, count: u64) -> Result<Vec<u64>> {
    let len = count.checked_mul(8).filter(|&l| l <= METASLAB_ARRAY_MAX).ok_or_else(|| {
        bad(format!("{count} metaslabs: more than a metaslab array can hold ({METASLAB_ARRAY_MAX} bytes)"))
    })?;
    let arr = mos.dnode(ms_array)?;
    let order = data_order(&arr);
    let stored = len.min(Objset::object_size(&arr)?);
    let raw = mos.read_all(&arr, Some(stored), METASLAB_ARRAY_MAX)?;
    let mut out = raw
        .chunks_exact(8)
        .map(|c| order.u64_at(c, 0, "metaslab array").map_err(|e| bad(e.to_string())))
        .collect::<Result<Vec<u64>>>()?;
    out.resize(count as usize, 0);
    Ok(out)
}

/// Calls `f` for every entry of space map object `obj`, in order, reading one block at a
/// time; returns the map's header.
pub fn for_each_entry(
    mos: &Objset,
    obj: u64,
    f: &mut dyn FnMut(&SmEntry) -> Result<()>,
) -> Result<SpaceMapPhys> {
    let dn = mos.dnode(obj)?;
    let phys = SpaceMapPhys::parse(&dn.bonus, mos.dnode_byte_order())?;
    let size = Objset::object_size(&dn)?;
    if phys.length > size || !phys.length.is_multiple_of(8) {
        return Err(bad(format!(
            "space map object {obj}: smp_length {} (the object holds {size} bytes)",
            phys.length
        )));
    }
    let bs = dn.data_block_size();
    let order = data_order(&dn);
    let mut off = 0u64;
    while off < phys.length {
        let n = (phys.length - off).min(bs) as usize;
        let mut buf = vec![0u8; n];
        mos.read(&dn, off, &mut buf)?;
        for e in decode_entries(&buf, order).map_err(|e| bad(format!("space map object {obj}: {e}")))? {
            f(&e)?;
        }
        off += n as u64;
    }
    Ok(phys)
}

/// `VDEV_TOP_ZAP_MS_UNFLUSHED_PHYS_TXGS`: the top-level vdev ZAP entry naming the object
/// that holds, per metaslab, the first txg whose changes are still only in the log space
/// maps (`metaslab_unflushed_phys_t`, one u64 per metaslab id).
pub const MS_UNFLUSHED_PHYS_TXGS: &str = "com.delphix:ms_unflushed_phys_txgs";

/// The unflushed txg of each of `top`'s metaslabs (OpenZFS `spa_ld_unflushed_txgs`): 0 for
/// every metaslab when the vdev has no such object, and for slots past the object's end.
pub fn unflushed_txgs(mos: &Objset, top: &TopGeometry) -> Result<Vec<u64>> {
    let count = top.ms_count();
    let mut out = Vec::new();
    if top.top_zap != 0 {
        if let Some(obj) =
            zap::lookup_u64(mos, top.top_zap, MS_UNFLUSHED_PHYS_TXGS).map_err(|e| bad(e.to_string()))?
        {
            let len = count.checked_mul(8).filter(|&l| l <= METASLAB_ARRAY_MAX).ok_or_else(|| {
                bad(format!("vdev {}: {count} metaslabs: too many unflushed txgs", top.vdev))
            })?;
            let dn = mos.dnode(obj)?;
            let order = data_order(&dn);
            let stored = len.min(Objset::object_size(&dn)?);
            let raw = mos.read_all(&dn, Some(stored), METASLAB_ARRAY_MAX)?;
            for c in raw.chunks_exact(8) {
                out.push(order.u64_at(c, 0, "unflushed txg").map_err(|e| bad(e.to_string()))?);
            }
        }
    }
    out.resize(count as usize, 0);
    Ok(out)
}

/// The log space maps (`log_spacemap` feature) named by the MOS directory's
/// `com.delphix:log_spacemap_zap` — keys are txgs in hex (`zap_add_int_key`), values space
/// map objects — as (txg, object) in txg order, the order OpenZFS replays them. Their
/// entries are two-word entries naming the top-level vdev, with offsets and runs in
/// 512-byte units from the vdev's start (`SPA_MINBLOCKSHIFT`).
pub fn log_spacemaps(mos: &Objset) -> Result<Vec<(u64, u64)>> {
    let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
    let Some(zap_obj) =
        zap::lookup_u64(mos, dir, ondisk::dsl::mos_keys::LOG_SPACEMAP_ZAP).map_err(|e| bad(e.to_string()))?
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in zap::list(mos, zap_obj).map_err(|e| bad(e.to_string()))? {
        let name = e.name_string();
        let txg = u64::from_str_radix(&name, 16)
            .map_err(|_| bad(format!("log space map ZAP {zap_obj}: key '{name}' is not a txg")))?;
        let obj = e
            .first_u64()
            .ok_or_else(|| bad(format!("log space map ZAP {zap_obj}: '{name}' has no object")))?;
        out.push((txg, obj));
    }
    out.sort_unstable();
    Ok(out)
}

/// One entry of a log space map: the txg of its log, allocation or free, the top-level
/// vdev it names, and the byte range on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub txg: u64,
    pub kind: ondisk::spacemap::SmType,
    pub vdev: u64,
    pub offset: u64,
    pub len: u64,
}

/// Calls `f` for every entry of every log space map ([`log_spacemaps`]), in replay order
/// (logs by txg, entries in file order), after `on_log(txg, object)` for each log. Offsets
/// and runs are in 512-byte units (`SPA_MINBLOCKSHIFT`); an entry naming no vdev (one
/// word) or out of range is an error.
pub fn for_each_log_entry(
    mos: &Objset,
    on_log: &mut dyn FnMut(u64, u64),
    f: &mut dyn FnMut(LogEntry) -> Result<()>,
) -> Result<()> {
    for (txg, obj) in log_spacemaps(mos)? {
        on_log(txg, obj);
        for_each_entry(mos, obj, &mut |e| {
            let (kind, offset, run, vdev) = match *e {
                SmEntry::Debug { .. } => return Ok(()),
                SmEntry::TwoWord { kind, offset, run, vdev } => (kind, offset, run, vdev),
                SmEntry::OneWord { .. } => {
                    return Err(bad(format!(
                        "log space map of txg {txg} (object {obj}): entry {e:?} names no vdev"
                    )))
                }
            };
            let (Some(offset), Some(len)) = (offset.checked_mul(512), run.checked_mul(512)) else {
                return Err(bad(format!(
                    "log space map of txg {txg} (object {obj}): entry {e:?} is out of range"
                )));
            };
            f(LogEntry { txg, kind, vdev: u64::from(vdev), offset, len })
        })?;
    }
    Ok(())
}

/// Replays the space map of metaslab `ms` (object `obj`) into `r`; returns the header.
pub fn replay(mos: &Objset, obj: u64, r: &mut metaslab::SpaceMapReplay) -> Result<SpaceMapPhys> {
    let (v, m) = (r.vdev, r.ms);
    for_each_entry(mos, obj, &mut |e| {
        r.apply(e).map_err(|e| bad(format!("space map of vdev {v} metaslab {m} (object {obj}): {e}")))
    })
}
