//! # Promoting a clone (`zfs promote`)
//!
//! Theory (facts from OpenZFS `dsl_dataset.c`, `dsl_dataset_promote_check/sync`). Clone C
//! (head `hds` in directory Cd) branched off snapshot O of file system F (head `ohds` in
//! directory Od):
//!
//! ```text
//!   before:  Od:  S1 <- S2 <- O <- S4 <- ohds          after:  Cd:  S1 <- S2 <- O <- C1 <- hds
//!            Cd:                 `- C1 <- hds                  Od:                 `- S4 <- ohds
//! ```
//!
//! Promoting C moves O and the snapshots before it in Od (back to Od's own origin, the
//! "shared" snapshots) into Cd, so F becomes the clone, of O. Nothing about a block changes
//! owner: every dataset keeps its previous snapshot, so every deadlist (blocks a dataset
//! killed, relative to its previous snapshot) and every head's keys stay exactly as they
//! are. What changes:
//!
//! - O's next snapshot becomes C's first dataset after O (C1, or `hds`), and O's
//!   `next_clones` trades that entry for F's (S4, or `ohds`);
//! - the origins swap: Cd's becomes Od's old origin, Od's becomes O; the `dd_clones` ZAPs
//!   follow (Od's old origin's directory lists `hds` instead of `ohds`; Cd lists `ohds`),
//!   and clones of the moved snapshots move from Od's `dd_clones` to Cd's;
//! - the shared snapshots' names move from `ohds`'s snapshot-name ZAP to `hds`'s, and their
//!   `ds_dir_obj` to Cd;
//! - space: what the shared snapshots hold moves from Od to Cd. The bytes born in them are
//!   `used = O.referenced + Σ deadlist(s)` over the shared snapshots, less what Od's origin
//!   references (each snapshot's referenced space is its predecessor's plus what was born
//!   minus what it killed, so the sum telescopes). Each directory's SNAP breakdown becomes
//!   the deadlist space of its new snapshots born after its new origin; the rest of `used`
//!   moves between the HEAD breakdowns. O's unique space is recomputed against its new
//!   next (C1's deadlist since O's previous snapshot).
//!
//! Bookmarks of F created at or before O move to C with the snapshots (done by the pool
//! layer, which owns bookmarks). Refused (changing nothing): snapshots, file systems that
//! are not clones, `DS_FLAG_NOPROMOTE`, conflicting snapshot names (all of them are
//! reported), and directories with livelists (rzfs does not keep livelists).

use crate::destroy::{dl_space, dl_space_range, remove_int, snap_name};
use crate::write::{dir_diduse, dir_phys, ds_phys, set_dir_phys, set_ds_phys, zerr, SpaceDelta};
use crate::{DslError, Result};
use dmu::tx::DirtyObjset;
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::dsl::mos_keys::DD_LIVELIST;
use ondisk::dsl::{DD_FLAG_USED_BREAKDOWN, DD_USED_HEAD, DD_USED_SNAP, DS_FLAG_NOPROMOTE};
use zap::write::ZapCache;

fn bad(detail: impl Into<String>) -> DslError {
    DslError::Corrupt { what: "DSL promote", detail: detail.into() }
}

/// Bound on a snapshot chain walked here (a corrupt pool could loop).
const MAX_CHAIN: usize = 1 << 20;

/// Why a promote is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A snapshot was named.
    Snapshot,
    /// The file system is not a clone (its origin is none, or the pool's `$ORIGIN`).
    NotAClone,
    /// `DS_FLAG_NOPROMOTE` is set.
    NoPromote,
    /// These snapshot (or bookmark) names of the origin exist in the clone already.
    Conflicts(Vec<String>),
    /// Something rzfs does not edit (the text says what).
    Unsupported(String),
}

/// The datasets a promote touches (OpenZFS's `promotenode` lists), found in the open txg.
#[derive(Debug, Clone)]
pub struct Promotion {
    /// The clone's head (`hds`).
    pub clone_head: u64,
    /// The origin snapshot O.
    pub origin: u64,
    /// F's head (`ohds`).
    pub origin_head: u64,
    /// O and the snapshots before it in Od, back to Od's origin (exclusive), newest first.
    pub shared: Vec<u64>,
    /// `hds` and its snapshots back to O (exclusive), head first.
    pub clone_snaps: Vec<u64>,
    /// `ohds` and its snapshots back to O (exclusive), head first.
    pub origin_snaps: Vec<u64>,
    /// Od's origin (F's own origin snapshot, often `$ORIGIN@$ORIGIN`), if any.
    pub origin_origin: Option<u64>,
}

/// From `last` back along `prev_snap_obj` to `first` (exclusive); `first == 0` means the
/// directory origin of `last` (`snaplist_make`).
fn snaplist(os: &DirtyObjset, mut first: u64, last: u64) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let mut obj = last;
    while obj != first {
        if out.len() >= MAX_CHAIN {
            return Err(bad("snapshot chain too long (a loop?)"));
        }
        let p = ds_phys(os, obj)?;
        if first == 0 {
            first = dir_phys(os, p.dir_obj)?.origin_obj;
        }
        out.push(obj);
        obj = p.prev_snap_obj;
        if obj == 0 && first != 0 {
            return Err(bad(format!("dataset {last}'s chain ends before its origin {first}")));
        }
    }
    Ok(out)
}

/// Collects what promoting head `clone_head` would move. `pool_origin` is the pool's
/// `$ORIGIN@$ORIGIN` snapshot (a file system whose origin it is, is no clone).
pub fn plan(
    os: &DirtyObjset,
    zaps: &mut ZapCache,
    clone_head: u64,
    pool_origin: Option<u64>,
) -> Result<std::result::Result<Promotion, Refusal>> {
    let h = ds_phys(os, clone_head)?;
    if h.next_snap_obj != 0 {
        return Ok(Err(Refusal::Snapshot));
    }
    let cd = dir_phys(os, h.dir_obj)?;
    if cd.head_dataset_obj != clone_head {
        return Ok(Err(Refusal::Snapshot));
    }
    if cd.origin_obj == 0 || Some(cd.origin_obj) == pool_origin {
        return Ok(Err(Refusal::NotAClone));
    }
    if h.flags & DS_FLAG_NOPROMOTE != 0 {
        return Ok(Err(Refusal::NoPromote));
    }
    let origin = cd.origin_obj;
    let shared = snaplist(os, 0, origin)?;
    let clone_snaps = snaplist(os, 0, clone_head)?;
    let o = ds_phys(os, origin)?;
    let od = dir_phys(os, o.dir_obj)?;
    let origin_snaps = snaplist(os, origin, od.head_dataset_obj)?;
    let origin_origin = (od.origin_obj != 0).then_some(od.origin_obj);
    for dir in [h.dir_obj, o.dir_obj] {
        let zapified = os.dnode(dir).map_err(crate::write::dmu)?.is_some_and(|d| d.object_type == 0xc4);
        if zapified && zaps.lookup(os, dir, DD_LIVELIST.as_bytes()).map_err(zerr)?.is_some() {
            return Ok(Err(Refusal::Unsupported(
                "a clone livelist (written by OpenZFS) would have to be removed, which rzfs does not do yet"
                    .into(),
            )));
        }
    }
    if clone_snaps.last().map(|&s| ds_phys(os, s).map(|p| p.prev_snap_obj)).transpose()? != Some(origin) {
        return Err(bad(format!("clone {clone_head}'s chain does not reach its origin {origin}")));
    }
    // Names: every shared snapshot's name must be free in the clone.
    let mut conflicts = Vec::new();
    for &s in &shared {
        let name = snap_name(os, zaps, ds_phys(os, od.head_dataset_obj)?.snapnames_zapobj, s)?;
        if zaps.lookup(os, h.snapnames_zapobj, &name).map_err(zerr)?.is_some() {
            conflicts.push(String::from_utf8_lossy(&name).into_owned());
        }
    }
    if !conflicts.is_empty() {
        return Ok(Err(Refusal::Conflicts(conflicts)));
    }
    Ok(Ok(Promotion {
        clone_head,
        origin,
        origin_head: od.head_dataset_obj,
        shared,
        clone_snaps,
        origin_snaps,
        origin_origin,
    }))
}

/// Σ over `snaps` of their deadlists' space born at or after `mintxg` (`snaplist_space`).
fn snaplist_space(os: &DirtyObjset, zaps: &mut ZapCache, snaps: &[u64], mintxg: u64) -> Result<u64> {
    let mut total = 0u64;
    for &s in snaps {
        let dl = ds_phys(os, s)?.deadlist_obj;
        total = total.saturating_add(dl_space_range(os, zaps, dl, mintxg, u64::MAX)?.used as u64);
    }
    Ok(total)
}

/// Carries out `p` (see the module comment). Bookmarks are the caller's.
pub fn promote(os: &mut DirtyObjset, zaps: &mut ZapCache, p: &Promotion) -> Result<()> {
    let hds = ds_phys(os, p.clone_head)?;
    let dd = hds.dir_obj;
    let mut o = ds_phys(os, p.origin)?;
    let odd = o.dir_obj;
    let ohds = ds_phys(os, p.origin_head)?;

    // Space, computed before anything moves (`dsl_dataset_promote_check` in syncing context).
    let Some(&first_after) = p.clone_snaps.last() else { return Err(bad("clone has no datasets")) };
    let first_after_dl = ds_phys(os, first_after)?.deadlist_obj;
    let unique = dl_space_range(os, zaps, first_after_dl, o.prev_snap_txg, u64::MAX)?.used as u64;
    let mut used = SpaceDelta {
        used: o.referenced_bytes as i64,
        comp: o.compressed_bytes as i64,
        uncomp: o.uncompressed_bytes as i64,
    };
    for &s in &p.shared {
        let sp = ds_phys(os, s)?;
        if sp.prev_snap_obj == 0 {
            continue; // the very first snapshot of an old pool has no deadlist
        }
        used.add(dl_space(os, sp.deadlist_obj)?);
    }
    if let Some(oo) = p.origin_origin {
        let q = ds_phys(os, oo)?;
        used.add(SpaceDelta {
            used: -(q.referenced_bytes as i64),
            comp: -(q.compressed_bytes as i64),
            uncomp: -(q.uncompressed_bytes as i64),
        });
    }
    let od_origin_txg = crate::write::dir_origin_txg(os, odd)?;
    let ddp = dir_phys(os, dd)?;
    let oddp = dir_phys(os, odd)?;
    let clone_used_snap = if ddp.flags & DD_FLAG_USED_BREAKDOWN != 0 {
        snaplist_space(os, zaps, &p.shared, od_origin_txg)?.saturating_add(snaplist_space(
            os,
            zaps,
            &p.clone_snaps,
            od_origin_txg,
        )?)
    } else {
        0
    };
    let origin_used_snap = if oddp.flags & DD_FLAG_USED_BREAKDOWN != 0 {
        snaplist_space(os, zaps, &p.origin_snaps, o.creation_txg)?
    } else {
        0
    };

    // O's next snapshot, and its next_clones entry.
    let old_next = o.next_snap_obj;
    o.next_snap_obj = first_after;
    if o.next_clones_obj != 0 {
        remove_int(os, zaps, o.next_clones_obj, first_after)?;
        zaps.update_u64(os, o.next_clones_obj, &format!("{old_next:x}"), old_next).map_err(zerr)?;
    }
    o.unique_bytes = unique;
    set_ds_phys(os, p.origin, &o)?;

    // The origins swap.
    let mut ddp = dir_phys(os, dd)?;
    ddp.origin_obj = p.origin_origin.unwrap_or(0);
    set_dir_phys(os, dd, &ddp)?;
    let mut oddp = dir_phys(os, odd)?;
    oddp.origin_obj = p.origin;
    set_dir_phys(os, odd, &oddp)?;

    // dd_clones: the old origin's directory lists C instead of F; Cd lists F.
    if oddp.clones != 0 {
        remove_int(os, zaps, oddp.clones, p.clone_head)?;
    }
    if let Some(oo) = p.origin_origin {
        let oo_dir = ds_phys(os, oo)?.dir_obj;
        let ood = dir_phys(os, oo_dir)?;
        if ood.clones != 0 {
            remove_int(os, zaps, ood.clones, p.origin_head)?;
            zaps.update_u64(os, ood.clones, &format!("{:x}", p.clone_head), p.clone_head).map_err(zerr)?;
        }
    }
    let dd_clones = ensure_clones_zap(os, zaps, dd)?;
    zaps.update_u64(os, dd_clones, &format!("{:x}", p.origin_head), p.origin_head).map_err(zerr)?;

    // The shared snapshots move to Cd, with their names and their clones.
    for &s in &p.shared {
        let name = snap_name(os, zaps, ohds.snapnames_zapobj, s)?;
        zaps.remove(os, ohds.snapnames_zapobj, &name).map_err(zerr)?;
        zaps.update_u64(os, hds.snapnames_zapobj, &String::from_utf8_lossy(&name), s).map_err(zerr)?;
        let mut sp = ds_phys(os, s)?;
        if sp.dir_obj != odd {
            return Err(bad(format!("snapshot {s} is not in directory {odd}")));
        }
        sp.dir_obj = dd;
        set_ds_phys(os, s, &sp)?;
        crate::limits::adjust(os, zaps, odd, crate::limits::Count::Snapshots, -1)?;
        crate::limits::adjust(os, zaps, dd, crate::limits::Count::Snapshots, 1)?;
        if sp.next_clones_obj != 0 {
            for (_, v) in zaps.entries(os, sp.next_clones_obj).map_err(zerr)? {
                let Some(&c) = v.values.first() else { continue };
                if c == old_next {
                    continue; // F's own entry, moved above
                }
                let head = dir_phys(os, ds_phys(os, c)?.dir_obj)?.head_dataset_obj;
                let oddp = dir_phys(os, odd)?;
                remove_int(os, zaps, oddp.clones, head)?;
                zaps.update_u64(os, dd_clones, &format!("{head:x}"), head).map_err(zerr)?;
            }
        }
    }

    // Space moves from Od to Cd.
    let ddp = dir_phys(os, dd)?;
    let delta = clone_used_snap as i64 - ddp.used_breakdown[DD_USED_SNAP] as i64;
    dir_diduse(os, dd, DD_USED_SNAP, SpaceDelta { used: delta, comp: 0, uncomp: 0 })?;
    dir_diduse(os, dd, DD_USED_HEAD, SpaceDelta { used: used.used - delta, ..used })?;
    let oddp = dir_phys(os, odd)?;
    let delta = origin_used_snap as i64 - oddp.used_breakdown[DD_USED_SNAP] as i64;
    dir_diduse(os, odd, DD_USED_SNAP, SpaceDelta { used: delta, comp: 0, uncomp: 0 })?;
    dir_diduse(os, odd, DD_USED_HEAD, SpaceDelta { used: -used.used - delta, ..used.negated() })?;
    Ok(())
}

/// Directory `dir`'s `dd_clones` ZAP, created when it has none.
fn ensure_clones_zap(os: &mut DirtyObjset, zaps: &mut ZapCache, dir: u64) -> Result<u64> {
    let mut d = dir_phys(os, dir)?;
    if d.clones == 0 {
        d.clones = zaps.create(os, T::DslClones.to_u8(), 0, Vec::new()).map_err(zerr)?;
        set_dir_phys(os, dir, &d)?;
    }
    Ok(d.clones)
}
