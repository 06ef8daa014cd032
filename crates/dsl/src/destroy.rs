//! # Destroying snapshots and head datasets (the DSL half of `zfs destroy`)
//!
//! Theory (OpenZFS `dsl_destroy.c`, new-format deadlists). A deadlist is a ZAP from a key
//! txg to a bpobj; the bpobj of key K holds blocks the dataset killed that were born after K
//! (and at or before the next key). Destroying snapshot S (previous P, next N) in txg T:
//!
//! 1. N takes over S's place in the chain: `N.prev_snap = S.prev_snap`, and P's next pointer
//!    (or, past a branch point, P's `next_clones` entry) names N.
//! 2. Blocks in N's deadlist born after `S.prev_snap_txg` were referenced by S alone: they
//!    are freed, their keys leave N's deadlist and their space leaves the directory's SNAP
//!    breakdown. Blocks in N's deadlist born between P's and S's previous snapshots were
//!    shared by P and S only: P's unique space grows by them.
//! 3. S's own deadlist (blocks S killed, all born before S's previous snapshot) merges into
//!    N's, key by key (into the same key, or the nearest smaller one).
//! 4. If N is a snapshot, blocks born between S's previous snapshot and S that died between
//!    N and its successor were shared by S and N only: N's unique space grows by them (they
//!    are in the successor's deadlist), and the head's deadlist key for S collapses into the
//!    key before it. If N is the head, its unique space is recomputed from its referenced
//!    bytes, P's referenced bytes and its deadlist total (`dsl_dataset_recalc_head_uniq`).
//! 5. S leaves the head's snapshot-name ZAP; its objects are freed.
//!
//! Freed blocks are released at once (OpenZFS queues them on the pool's free bpobj and frees
//! them in the same or a later txg; freeing now is the synchronous equivalent).
//!
//! A head without snapshots is destroyed by freeing every block born after its previous
//! snapshot (its origin), done by the pool layer, which walks the objset; here its
//! directory's space is released and its objects and directory are removed
//! (`dsl_destroy_head_sync_impl`, `dsl_dir_destroy_sync`).
//!
//! 6. Clones that branched off after S (listed in the directory's `dd_clones`, and their
//!    own clones) started their deadlists as copies of the head's keys: S's key collapses
//!    in each of them as in the head (`dsl_dir_remove_clones_key`).
//!
//! Not handled (refused by the callers' checks): snapshots that are themselves the origin
//! of a clone or have holds, bpobjs with sub-bpobjs.

use crate::write::{
    dir_diduse, dir_phys, dmu, ds_phys, set_dir_phys, set_ds_phys, zerr, SpaceDelta, DEADLIST_PHYS_SIZE,
};
use crate::{DslError, Result};
use dmu::tx::DirtyObjset;
use ondisk::blkptr::BlkPtr;
use ondisk::bpobj::BpobjPhys;
use ondisk::dsl::{DD_USED_HEAD, DD_USED_SNAP};
use ondisk::ByteOrder;
use zap::write::ZapCache;

const LE: ByteOrder = ByteOrder::Little;

fn bad(detail: impl Into<String>) -> DslError {
    DslError::Corrupt { what: "DSL destroy", detail: detail.into() }
}

/// Why a destroy cannot proceed (shown to the user).
fn refuse(detail: impl Into<String>) -> DslError {
    DslError::Unsupported(detail.into())
}

/// A bpobj's header and block pointers.
pub fn bpobj_read(os: &DirtyObjset, obj: u64) -> Result<(BpobjPhys, Vec<BlkPtr>)> {
    let dn = os.dnode(obj).map_err(dmu)?.ok_or_else(|| bad(format!("no bpobj {obj}")))?;
    let hdr = BpobjPhys::parse(&dn.bonus, LE)?;
    if hdr.num_subobjs != 0 || hdr.subobjs != 0 {
        return Err(refuse(format!("bpobj {obj} has sub-bpobjs, which rzfs does not edit yet")));
    }
    let n = usize::try_from(hdr.num_blkptrs).map_err(|_| bad("bpobj too large"))?;
    let mut raw = vec![0u8; n.checked_mul(128).ok_or_else(|| bad("bpobj too large"))?];
    os.read(obj, 0, &mut raw).map_err(dmu)?;
    let bps = raw.chunks_exact(128).map(|c| BlkPtr::parse(c, LE)).collect::<std::result::Result<_, _>>()?;
    Ok((hdr, bps))
}

fn bpobj_space(h: &BpobjPhys) -> SpaceDelta {
    SpaceDelta { used: h.bytes as i64, comp: h.comp as i64, uncomp: h.uncomp as i64 }
}

/// Appends bpobj `src`'s pointers to bpobj `dst` and frees `src`.
fn bpobj_absorb(os: &mut DirtyObjset, dst: u64, src: u64) -> Result<()> {
    let (sh, bps) = bpobj_read(os, src)?;
    let dn = os.dnode(dst).map_err(dmu)?.ok_or_else(|| bad(format!("no bpobj {dst}")))?;
    let mut dh = BpobjPhys::parse(&dn.bonus, LE)?;
    if !bps.is_empty() {
        let raw: Vec<u8> = bps.iter().flat_map(|b| b.encode(LE)).collect();
        os.write(dst, dh.num_blkptrs * 128, &raw).map_err(dmu)?;
    }
    dh.num_blkptrs += sh.num_blkptrs;
    dh.bytes += sh.bytes;
    dh.comp += sh.comp;
    dh.uncomp += sh.uncomp;
    os.set_bonus(dst, dh.encode(LE)?).map_err(dmu)?;
    os.free_object(src).map_err(dmu)
}

/// Keys of a deadlist with their bpobjs, ascending.
fn dl_keys(os: &DirtyObjset, zaps: &mut ZapCache, dl: u64) -> Result<Vec<(u64, u64)>> {
    let mut keys: Vec<(u64, u64)> = zaps
        .entries(os, dl)
        .map_err(zerr)?
        .iter()
        .filter_map(|(k, v)| Some((std::str::from_utf8(k).ok()?.parse::<u64>().ok()?, *v.values.first()?)))
        .collect();
    keys.sort_unstable();
    Ok(keys)
}

/// Space of the keys in `[mintxg, maxtxg)` (`dsl_deadlist_space_range`); none for no
/// deadlist (object 0).
pub(crate) fn dl_space_range(
    os: &DirtyObjset,
    zaps: &mut ZapCache,
    dl: u64,
    mintxg: u64,
    maxtxg: u64,
) -> Result<SpaceDelta> {
    let mut total = SpaceDelta::default();
    if dl == 0 {
        return Ok(total);
    }
    for (k, bpo) in dl_keys(os, zaps, dl)? {
        if k >= mintxg && k < maxtxg {
            let dn = os.dnode(bpo).map_err(dmu)?.ok_or_else(|| bad(format!("no bpobj {bpo}")))?;
            total.add(bpobj_space(&BpobjPhys::parse(&dn.bonus, LE)?));
        }
    }
    Ok(total)
}

/// Adds `d` to a deadlist header's used/comp/uncomp (`dl_used`, `dl_comp`, `dl_uncomp`).
pub(crate) fn dl_adjust(os: &mut DirtyObjset, dl: u64, d: SpaceDelta) -> Result<()> {
    let dn = os.dnode(dl).map_err(dmu)?.ok_or_else(|| bad(format!("no deadlist {dl}")))?;
    let mut b = dn.bonus.clone();
    b.resize(DEADLIST_PHYS_SIZE, 0);
    for (i, delta) in [d.used, d.comp, d.uncomp].into_iter().enumerate() {
        let cur = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        b[i * 8..i * 8 + 8].copy_from_slice(&(cur as i64).saturating_add(delta).max(0).to_le_bytes()[..]);
    }
    os.set_bonus(dl, b).map_err(dmu)
}

/// A deadlist header's totals (`dsl_deadlist_space`).
pub(crate) fn dl_space(os: &DirtyObjset, dl: u64) -> Result<SpaceDelta> {
    let dn = os.dnode(dl).map_err(dmu)?.ok_or_else(|| bad(format!("no deadlist {dl}")))?;
    let w = |i: usize| dn.bonus.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let v = |i| w(i).unwrap_or(0) as i64;
    Ok(SpaceDelta { used: v(0), comp: v(1), uncomp: v(2) })
}

fn dl_used(os: &DirtyObjset, dl: u64) -> Result<u64> {
    let dn = os.dnode(dl).map_err(dmu)?.ok_or_else(|| bad(format!("no deadlist {dl}")))?;
    Ok(dn.bonus.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0))
}

/// Frees a deadlist: every key's bpobj object (not the blocks in it) and the ZAP.
pub fn dl_free(os: &mut DirtyObjset, zaps: &mut ZapCache, dl: u64) -> Result<()> {
    for (_, bpo) in dl_keys(os, zaps, dl)? {
        os.free_object(bpo).map_err(dmu)?;
    }
    zaps.destroy(os, dl).map_err(zerr)
}

/// Removes key `txg` of deadlist `dl`, its bpobj joining the key before it
/// (`dsl_deadlist_remove_key`).
fn dl_remove_key(os: &mut DirtyObjset, zaps: &mut ZapCache, dl: u64, txg: u64) -> Result<()> {
    let keys = dl_keys(os, zaps, dl)?;
    let Some(pos) = keys.iter().position(|&(k, _)| k == txg) else { return Ok(()) };
    let Some(&(_, prev_bpo)) = pos.checked_sub(1).and_then(|p| keys.get(p)) else { return Ok(()) };
    bpobj_absorb(os, prev_bpo, keys[pos].1)?;
    zaps.remove(os, dl, txg.to_string().as_bytes()).map_err(zerr)?;
    Ok(())
}

/// Removes `obj` from a ZAP of object numbers keyed by their hex form (`zap_remove_int`).
pub(crate) fn remove_int(os: &DirtyObjset, zaps: &mut ZapCache, zap: u64, obj: u64) -> Result<()> {
    if zap != 0 {
        zaps.remove(os, zap, format!("{obj:x}").as_bytes()).map_err(zerr)?;
    }
    Ok(())
}

/// Entries of ZAP `zap` (0 = none) in the open txg.
pub fn zap_count(os: &DirtyObjset, zaps: &mut ZapCache, zap: u64) -> Result<usize> {
    zap_len(os, zaps, zap)
}

fn zap_len(os: &DirtyObjset, zaps: &mut ZapCache, zap: u64) -> Result<usize> {
    if zap == 0 {
        return Ok(0);
    }
    zaps.len(os, zap).map_err(zerr)
}

/// The name under which `snap` is listed in its head's snapshot-name ZAP.
pub(crate) fn snap_name(
    os: &DirtyObjset,
    zaps: &mut ZapCache,
    head_snapnames: u64,
    snap: u64,
) -> Result<Vec<u8>> {
    zaps.entries(os, head_snapnames)
        .map_err(zerr)?
        .into_iter()
        .find(|(_, v)| v.values.first() == Some(&snap))
        .map(|(k, _)| k)
        .ok_or_else(|| bad(format!("snapshot {snap} is not in its head's snapshot names")))
}

/// Refuses a snapshot destroy rzfs cannot carry out exactly.
pub fn check_destroy_snapshot(os: &DirtyObjset, zaps: &mut ZapCache, snap: u64) -> Result<()> {
    let s = ds_phys(os, snap)?;
    if s.next_snap_obj == 0 {
        return Err(bad(format!("dataset {snap} is not a snapshot")));
    }
    if s.num_children > 1 || zap_len(os, zaps, s.next_clones_obj)? > 0 {
        return Err(refuse("snapshot has dependent clones"));
    }
    if zap_len(os, zaps, s.userrefs_obj)? > 0 {
        return Err(refuse("snapshot has holds (zfs release them first)"));
    }
    // Everything the destroy will edit is checked now, so it cannot stop half-way.
    let n = ds_phys(os, s.next_snap_obj)?;
    check_dl_plain(os, zaps, s.deadlist_obj)?;
    check_dl_plain(os, zaps, n.deadlist_obj)?;
    if n.next_snap_obj != 0 {
        let head = dir_phys(os, s.dir_obj)?.head_dataset_obj;
        check_dl_plain(os, zaps, ds_phys(os, head)?.deadlist_obj)?;
    }
    // Of a clone's deadlist only the snapshot's key and the one before it change
    // ([`dl_remove_key`]).
    for clone in clones_keyed_after(os, zaps, s.dir_obj, s.creation_txg)? {
        let dl = ds_phys(os, clone)?.deadlist_obj;
        let keys = dl_keys(os, zaps, dl)?;
        if let Some(pos) = keys.iter().position(|&(k, _)| k == s.creation_txg) {
            for &(_, bpo) in &keys[pos.saturating_sub(1)..=pos] {
                check_bpobj_plain(os, bpo)?;
            }
        }
    }
    Ok(())
}

/// The clone heads whose deadlists carry key `mintxg` of a snapshot of directory `dir`:
/// the clones listed in `dir`'s `dd_clones` that branched off after `mintxg`, and, the
/// same way, the clones of those clones (`dsl_dir_remove_clones_key`). A clone's deadlist
/// starts as a copy of its origin head's keys, so a snapshot destroyed before the branch
/// point must leave the clone's deadlist too.
fn clones_keyed_after(os: &DirtyObjset, zaps: &mut ZapCache, dir: u64, mintxg: u64) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let mut todo = vec![dir];
    while let Some(d) = todo.pop() {
        let clones = dir_phys(os, d)?.clones;
        if clones == 0 {
            continue;
        }
        for (_, v) in zaps.entries(os, clones).map_err(zerr)? {
            let Some(&head) = v.values.first() else { continue };
            let h = ds_phys(os, head)?;
            let origin = dir_phys(os, h.dir_obj)?.origin_obj;
            let origin_txg = if origin != 0 { ds_phys(os, origin)?.creation_txg } else { 0 };
            if origin_txg > mintxg && !out.contains(&head) {
                // A pool whose clone links loop would otherwise never end.
                if out.len() >= 1 << 20 {
                    return Err(bad("too many clones (or a loop in dd_clones)"));
                }
                out.push(head);
                todo.push(h.dir_obj);
            }
        }
    }
    Ok(out)
}

/// Every bpobj of deadlist `dl` exists and has no sub-bpobjs. Only the headers (dnode
/// bonuses) are read: a clone chain's deadlists each carry a key per snapshot of its
/// origins, so reading every block pointer here made one destroy in a chain of N clones
/// read O(N²) bpobjs. A block pointer array that turns out unreadable later fails the
/// sync task, whose txg is then undone as a whole.
fn check_dl_plain(os: &DirtyObjset, zaps: &mut ZapCache, dl: u64) -> Result<()> {
    for (_, bpo) in dl_keys(os, zaps, dl)? {
        check_bpobj_plain(os, bpo)?;
    }
    Ok(())
}

/// Bpobj `bpo` exists and has no sub-bpobjs (its header only).
fn check_bpobj_plain(os: &DirtyObjset, bpo: u64) -> Result<()> {
    let dn = os.dnode(bpo).map_err(dmu)?.ok_or_else(|| bad(format!("no bpobj {bpo}")))?;
    let hdr = BpobjPhys::parse(&dn.bonus, LE)?;
    if hdr.num_subobjs != 0 || hdr.subobjs != 0 {
        return Err(refuse(format!("bpobj {bpo} has sub-bpobjs, which rzfs does not edit yet")));
    }
    Ok(())
}

/// Destroys snapshot `snap` (see the module comment). `free` releases a block's DVAs.
pub fn destroy_snapshot(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    snap: u64,
    free: &mut dyn FnMut(&BlkPtr) -> Result<()>,
) -> Result<()> {
    check_destroy_snapshot(os, zaps, snap)?;
    let s = ds_phys(os, snap)?;
    let n_obj = s.next_snap_obj;
    let mut n = ds_phys(os, n_obj)?;
    if n.prev_snap_obj != snap {
        return Err(bad(format!("snapshot {snap}'s next ({n_obj}) does not point back")));
    }
    // 1. Unlink from the chain.
    if s.prev_snap_obj != 0 {
        let mut p = ds_phys(os, s.prev_snap_obj)?;
        let after_branch = p.next_snap_obj != snap;
        if after_branch && p.next_clones_obj != 0 {
            remove_int(os, zaps, p.next_clones_obj, snap)?;
            zaps.update_u64(os, p.next_clones_obj, &format!("{n_obj:x}"), n_obj).map_err(zerr)?;
        }
        if !after_branch {
            p.next_snap_obj = n_obj;
        }
        // 2a. Blocks only P and S shared become P's own.
        if !after_branch {
            let d = dl_space_range(os, zaps, n.deadlist_obj, p.prev_snap_txg, s.prev_snap_txg)?;
            p.unique_bytes = p.unique_bytes.saturating_add(d.used as u64);
        }
        set_ds_phys(os, s.prev_snap_obj, &p)?;
    }
    n.prev_snap_obj = s.prev_snap_obj;
    n.prev_snap_txg = s.prev_snap_txg;
    // 2b. Blocks only S referenced are freed.
    let mut freed = SpaceDelta::default();
    for (k, bpo) in dl_keys(os, zaps, n.deadlist_obj)? {
        if k < s.prev_snap_txg {
            continue;
        }
        let (h, bps) = bpobj_read(os, bpo)?;
        for bp in &bps {
            free(bp)?;
        }
        freed.add(bpobj_space(&h));
        os.free_object(bpo).map_err(dmu)?;
        zaps.remove(os, n.deadlist_obj, k.to_string().as_bytes()).map_err(zerr)?;
    }
    dl_adjust(os, n.deadlist_obj, freed.negated())?;
    dir_diduse(os, s.dir_obj, DD_USED_SNAP, freed.negated())?;
    // 3. S's deadlist merges into N's.
    let n_keys = dl_keys(os, zaps, n.deadlist_obj)?;
    let mut merged = SpaceDelta::default();
    for (k, bpo) in dl_keys(os, zaps, s.deadlist_obj)? {
        let dn = os.dnode(bpo).map_err(dmu)?.ok_or_else(|| bad(format!("no bpobj {bpo}")))?;
        merged.add(bpobj_space(&BpobjPhys::parse(&dn.bonus, LE)?));
        match n_keys.iter().rev().find(|&&(nk, _)| nk <= k) {
            Some(&(_, target)) => bpobj_absorb(os, target, bpo)?,
            None => zaps.update_u64(os, n.deadlist_obj, &k.to_string(), bpo).map_err(zerr)?,
        }
    }
    dl_adjust(os, n.deadlist_obj, merged)?;
    zaps.destroy(os, s.deadlist_obj).map_err(zerr)?;
    // Clones that branched off later carry S's key too: it collapses there as well.
    for clone in clones_keyed_after(os, zaps, s.dir_obj, s.creation_txg)? {
        let dl = ds_phys(os, clone)?.deadlist_obj;
        dl_remove_key(os, zaps, dl, s.creation_txg)?;
    }
    // 4. Unique space of the next dataset.
    let head = dir_phys(os, s.dir_obj)?.head_dataset_obj;
    if n.next_snap_obj != 0 {
        let nn = ds_phys(os, n.next_snap_obj)?;
        let d = dl_space_range(os, zaps, nn.deadlist_obj, s.prev_snap_txg, s.creation_txg)?;
        n.unique_bytes = n.unique_bytes.saturating_add(d.used as u64);
        set_ds_phys(os, n_obj, &n)?;
        let h = ds_phys(os, head)?;
        dl_remove_key(os, zaps, h.deadlist_obj, s.creation_txg)?;
    } else {
        let prev_refd = if s.prev_snap_obj != 0 { ds_phys(os, s.prev_snap_obj)?.referenced_bytes } else { 0 };
        let dlused = dl_used(os, n.deadlist_obj)?;
        n.unique_bytes = n.referenced_bytes.saturating_sub(prev_refd.saturating_sub(dlused));
        set_ds_phys(os, n_obj, &n)?;
    }
    // 5. Out of the namespace; free the objects.
    let h = ds_phys(os, head)?;
    let name = snap_name(os, zaps, h.snapnames_zapobj, snap)?;
    zaps.remove(os, h.snapnames_zapobj, &name).map_err(zerr)?;
    crate::limits::adjust(os, zaps, s.dir_obj, crate::limits::Count::Snapshots, -1)?;
    for z in [s.next_clones_obj, s.props_obj, s.userrefs_obj] {
        if z != 0 {
            zaps.destroy(os, z).map_err(zerr)?;
        }
    }
    zaps.destroy(os, snap).map_err(zerr)
}

/// Refuses a head destroy rzfs cannot carry out exactly: snapshots or child file systems
/// must go first (`zfs destroy -r`), and clones of it must not exist.
pub fn check_destroy_head(os: &DirtyObjset, zaps: &mut ZapCache, ds: u64) -> Result<()> {
    let h = ds_phys(os, ds)?;
    if h.next_snap_obj != 0 {
        return Err(bad(format!("dataset {ds} is a snapshot")));
    }
    let d = dir_phys(os, h.dir_obj)?;
    if d.parent_obj == 0 {
        return Err(refuse("the pool's root file system is destroyed with the pool"));
    }
    if zap_len(os, zaps, h.snapnames_zapobj)? > 0 {
        return Err(refuse("filesystem has children (snapshots)"));
    }
    if zap_len(os, zaps, d.child_dir_zapobj)? > 0 {
        return Err(refuse("filesystem has children"));
    }
    if zap_len(os, zaps, d.clones)? > 0 {
        return Err(refuse("filesystem has dependent clones"));
    }
    Ok(())
}

/// Removes head dataset `ds` and its directory after the pool layer freed its blocks,
/// whose total is `freed`.
pub fn destroy_head(os: &mut DirtyObjset, zaps: &mut ZapCache, ds: u64, freed: SpaceDelta) -> Result<()> {
    check_destroy_head(os, zaps, ds)?;
    let h = ds_phys(os, ds)?;
    let dir = h.dir_obj;
    // Its `reservation` goes first, so what follows releases exactly what the ancestors
    // were charged (`dsl_destroy_head_sync_impl`).
    crate::write::set_dir_reserved(os, dir, 0)?;
    dir_diduse(os, dir, DD_USED_HEAD, freed.negated())?;
    // Whatever the directory still charges (rounding of older accounting) leaves its
    // ancestors too, so their totals stay the sum of their children.
    let d = dir_phys(os, dir)?;
    for (kind, &v) in d.used_breakdown.iter().enumerate() {
        if v != 0 {
            dir_diduse(os, dir, kind, SpaceDelta { used: -(v as i64), comp: 0, uncomp: 0 })?;
        }
    }
    let d = dir_phys(os, dir)?;
    let rest = SpaceDelta {
        used: -(d.used_bytes as i64),
        comp: -(d.compressed_bytes as i64),
        uncomp: -(d.uncompressed_bytes as i64),
    };
    if !rest.is_zero() {
        dir_diduse(os, dir, DD_USED_HEAD, rest)?;
    }
    if h.prev_snap_obj != 0 {
        let mut o = ds_phys(os, h.prev_snap_obj)?;
        remove_int(os, zaps, o.next_clones_obj, ds)?;
        o.num_children = o.num_children.saturating_sub(1);
        set_ds_phys(os, h.prev_snap_obj, &o)?;
        let od = dir_phys(os, o.dir_obj)?;
        remove_int(os, zaps, od.clones, ds)?;
    }
    dl_free(os, zaps, h.deadlist_obj)?;
    zaps.destroy(os, h.snapnames_zapobj).map_err(zerr)?;
    for z in [h.next_clones_obj, h.props_obj, h.userrefs_obj] {
        if z != 0 {
            zaps.destroy(os, z).map_err(zerr)?;
        }
    }
    zaps.destroy(os, ds).map_err(zerr)?;
    destroy_dir(os, zaps, dir)
}

/// Frees an empty directory and its name in the parent (`dsl_dir_destroy_sync`).
fn destroy_dir(os: &mut DirtyObjset, zaps: &mut ZapCache, dir: u64) -> Result<()> {
    let mut d = dir_phys(os, dir)?;
    d.head_dataset_obj = 0;
    set_dir_phys(os, dir, &d)?;
    for z in [d.child_dir_zapobj, d.props_zapobj, d.clones, d.deleg_zapobj] {
        if z != 0 {
            zaps.destroy(os, z).map_err(zerr)?;
        }
    }
    let parent = dir_phys(os, d.parent_obj)?;
    let name = zaps
        .entries(os, parent.child_dir_zapobj)
        .map_err(zerr)?
        .into_iter()
        .find(|(_, v)| v.values.first() == Some(&dir))
        .map(|(k, _)| k)
        .ok_or_else(|| bad(format!("directory {dir} is not in its parent's children")))?;
    zaps.remove(os, parent.child_dir_zapobj, &name).map_err(zerr)?;
    crate::limits::adjust(os, zaps, d.parent_obj, crate::limits::Count::Filesystems, -1)?;
    zaps.destroy(os, dir).map_err(zerr)
}

/// The end of `zfs receive -F` into an existing file system `head`: the stream went into
/// `tmp`, a file system in a child directory of `head`'s (OpenZFS's `HEAD/%recv`), and here
/// the two heads exchange contents, as `dsl_dataset_clone_swap` does: root pointers,
/// referenced and unique sizes and deadlists trade places, the datasets stay in their
/// directories (names, properties, children and guid stay with `head`). Afterwards `tmp`
/// holds the old contents and the caller destroys it.
///
/// Two shapes:
/// - a full stream: both are heads without snapshots of their own, with the same previous
///   snapshot (`$ORIGIN`, or none on pools without it). Every block each references was
///   born after that snapshot and is unique to it, so each directory's HEAD breakdown is its
///   head's unique space. `head`'s directory gains the unique-space difference in HEAD and
///   loses it in CHILD (the one in `tmp`'s directory moves the other way), so no ancestor's
///   total changes.
/// - an incremental stream: `tmp` is a clone of `head`'s latest snapshot S (the caller
///   destroyed the ones after it). Both reference S's blocks less what each killed (its
///   deadlist) plus what each wrote (its unique space), so HEAD moves by the difference of
///   (referenced + deadlist) as above; the deadlist blocks born after `head`'s directory
///   origin move between HEAD and SNAP with the deadlists, and S's unique space becomes what
///   `tmp`'s deadlist holds of blocks born after S's previous snapshot (dsl_dataset.c,
///   `dsl_dataset_clone_swap_sync_impl`).
///
/// With a `refreservation` on `head`, its directory is charged max(unique, refreservation)
/// before and after, the rest in REFRSRV.
pub fn swap_heads(os: &mut DirtyObjset, zaps: &mut ZapCache, head: u64, tmp: u64) -> Result<()> {
    let mut h = ds_phys(os, head)?;
    let mut t = ds_phys(os, tmp)?;
    let own_snapshot = |p: &ondisk::dsl::DslDatasetPhys, os: &DirtyObjset| -> Result<bool> {
        Ok(p.prev_snap_obj != 0 && ds_phys(os, p.prev_snap_obj)?.dir_obj == p.dir_obj)
    };
    if h.next_snap_obj != 0 || t.next_snap_obj != 0 {
        return Err(bad("swap_heads: a snapshot is not a head"));
    }
    if dir_phys(os, t.dir_obj)?.parent_obj != h.dir_obj {
        return Err(bad("swap_heads: the received file system is not in a child directory"));
    }
    let t_origin = dir_phys(os, t.dir_obj)?.origin_obj;
    let incremental =
        t_origin != 0 && t_origin == h.prev_snap_obj && ds_phys(os, t_origin)?.dir_obj == h.dir_obj;
    if incremental {
        if t.prev_snap_obj != t_origin {
            return Err(bad("swap_heads: the received clone has snapshots of its own"));
        }
    } else {
        if own_snapshot(&h, os)? || own_snapshot(&t, os)? {
            return Err(refuse(
                "destination has snapshots
must destroy them to overwrite it",
            ));
        }
        if h.prev_snap_obj != t.prev_snap_obj
            || dir_phys(os, h.dir_obj)?.origin_obj != dir_phys(os, t.dir_obj)?.origin_obj
        {
            return Err(refuse(
                "destination is a clone
must destroy it to overwrite it",
            ));
        }
    }
    let reserved = crate::write::head_reserved(os, zaps, head)?;
    let d = if incremental {
        let (tdl, hdl) = (dl_space(os, t.deadlist_obj)?, dl_space(os, h.deadlist_obj)?);
        SpaceDelta {
            used: t.referenced_bytes as i64 + tdl.used - (h.referenced_bytes as i64 + hdl.used),
            comp: t.compressed_bytes as i64 + tdl.comp - (h.compressed_bytes as i64 + hdl.comp),
            uncomp: t.uncompressed_bytes as i64 + tdl.uncomp - (h.uncompressed_bytes as i64 + hdl.uncomp),
        }
    } else {
        SpaceDelta {
            used: t.unique_bytes as i64 - h.unique_bytes as i64,
            comp: t.compressed_bytes as i64 - h.compressed_bytes as i64,
            uncomp: t.uncompressed_bytes as i64 - h.uncompressed_bytes as i64,
        }
    };
    // tmp's directory first: its change reaches head's as CHILD.
    dir_diduse(os, t.dir_obj, DD_USED_HEAD, d.negated())?;
    dir_diduse(os, h.dir_obj, DD_USED_HEAD, d)?;
    if incremental {
        // Deadlist space born after head's directory origin is SNAP space of head's
        // directory: it follows the deadlists.
        let from = crate::write::dir_origin_txg(os, h.dir_obj)?;
        let moved = dl_space_range(os, zaps, t.deadlist_obj, from, u64::MAX)?.used
            - dl_space_range(os, zaps, h.deadlist_obj, from, u64::MAX)?.used;
        if moved != 0 {
            let mut dd = dir_phys(os, h.dir_obj)?;
            let head_b = dd.used_breakdown[DD_USED_HEAD] as i64 - moved;
            let snap_b = dd.used_breakdown[DD_USED_SNAP] as i64 + moved;
            if head_b < 0 || snap_b < 0 {
                return Err(bad(format!(
                    "swap_heads: space breakdown of directory {} goes negative",
                    h.dir_obj
                )));
            }
            dd.used_breakdown[DD_USED_HEAD] = head_b as u64;
            dd.used_breakdown[DD_USED_SNAP] = snap_b as u64;
            set_dir_phys(os, h.dir_obj, &dd)?;
        }
        let mut s = ds_phys(os, t_origin)?;
        s.unique_bytes =
            dl_space_range(os, zaps, t.deadlist_obj, s.prev_snap_txg, u64::MAX)?.used.max(0) as u64;
        set_ds_phys(os, t_origin, &s)?;
    }
    let refrsrv = |unique: u64| reserved.saturating_sub(unique) as i64;
    let r = refrsrv(t.unique_bytes) - refrsrv(h.unique_bytes);
    if r != 0 {
        dir_diduse(os, h.dir_obj, ondisk::dsl::DD_USED_REFRSRV, SpaceDelta { used: r, comp: 0, uncomp: 0 })?;
    }
    std::mem::swap(&mut h.bp, &mut t.bp);
    std::mem::swap(&mut h.referenced_bytes, &mut t.referenced_bytes);
    std::mem::swap(&mut h.compressed_bytes, &mut t.compressed_bytes);
    std::mem::swap(&mut h.uncompressed_bytes, &mut t.uncompressed_bytes);
    std::mem::swap(&mut h.unique_bytes, &mut t.unique_bytes);
    std::mem::swap(&mut h.deadlist_obj, &mut t.deadlist_obj);
    // What a receive left half-done stays with the old contents.
    h.flags &= !ondisk::dsl::DS_FLAG_INCONSISTENT;
    set_ds_phys(os, head, &h)?;
    set_ds_phys(os, tmp, &t)?;
    Ok(())
}

/// Rolls head dataset `ds` back to its latest snapshot, after the pool layer freed every
/// block born since that snapshot (total `freed`). OpenZFS (`dsl_dataset_rollback_sync`)
/// swaps in a clone of the snapshot and destroys the old head; the outcome written here is
/// the same:
///
/// - the head's root pointer and referenced sizes become the snapshot's; head and snapshot
///   then share every block, so both have no unique space;
/// - the blocks the head killed since the snapshot (its deadlist) are referenced by the head
///   again: their space moves from the SNAP breakdown back to HEAD, and the head starts an
///   empty deadlist with the same keys;
/// - the freed blocks leave HEAD; with a `refreservation`, the unused part of the
///   reservation grows back to the whole reservation (`max(refreservation - unique, 0)`).
pub fn rollback_head(os: &mut DirtyObjset, zaps: &mut ZapCache, ds: u64, freed: SpaceDelta) -> Result<()> {
    let mut h = ds_phys(os, ds)?;
    let snap = h.prev_snap_obj;
    if h.next_snap_obj != 0 {
        return Err(bad(format!("dataset {ds} is a snapshot")));
    }
    let mut s = if snap != 0 { ds_phys(os, snap)? } else { Default::default() };
    if snap == 0 || s.dir_obj != h.dir_obj {
        return Err(refuse("the dataset has no snapshot to roll back to"));
    }
    let reserved = crate::write::head_reserved(os, zaps, ds)?;
    let dir = h.dir_obj;
    // Its `reservation` goes first, so what follows releases exactly what the ancestors
    // were charged (`dsl_destroy_head_sync_impl`).
    crate::write::set_dir_reserved(os, dir, 0)?;
    dir_diduse(os, dir, DD_USED_HEAD, freed.negated())?;
    let grown = h.unique_bytes.min(reserved) as i64;
    if grown != 0 {
        dir_diduse(os, dir, ondisk::dsl::DD_USED_REFRSRV, SpaceDelta { used: grown, comp: 0, uncomp: 0 })?;
    }
    let killed = dl_used(os, h.deadlist_obj)?;
    if killed != 0 {
        let mut d = dir_phys(os, dir)?;
        d.used_breakdown[DD_USED_SNAP] = d.used_breakdown[DD_USED_SNAP].saturating_sub(killed);
        d.used_breakdown[DD_USED_HEAD] = d.used_breakdown[DD_USED_HEAD].saturating_add(killed);
        set_dir_phys(os, dir, &d)?;
    }
    let old_dl = h.deadlist_obj;
    h.deadlist_obj = crate::write::clone_deadlist(os, zaps, old_dl, u64::MAX)?;
    dl_free(os, zaps, old_dl)?;
    h.bp = s.bp;
    // Whatever a receive left half-written is gone with the rest.
    h.flags &= !ondisk::dsl::DS_FLAG_INCONSISTENT;
    h.referenced_bytes = s.referenced_bytes;
    h.compressed_bytes = s.compressed_bytes;
    h.uncompressed_bytes = s.uncompressed_bytes;
    h.unique_bytes = 0;
    set_ds_phys(os, ds, &h)?;
    if s.unique_bytes != 0 {
        s.unique_bytes = 0;
        set_ds_phys(os, snap, &s)?;
    }
    Ok(())
}
