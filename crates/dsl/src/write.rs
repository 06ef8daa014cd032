//! # Writing the DSL: directories, datasets, deadlists and space accounting
//!
//! Theory. The DSL lives in the MOS: a `dsl_dir` object (bonus `dsl_dir_phys_t`) per
//! name in the tree, a `dsl_dataset` object (bonus `dsl_dataset_phys_t`) per head or
//! snapshot, and ZAPs for child names, properties, snapshot names and deadlists. These
//! functions create and edit them through the open txg's MOS ([`DirtyObjset`] plus its
//! [`ZapCache`]); the pool layer decides when they are synced.
//!
//! Accounting (OpenZFS `dsl_dataset_block_born/kill`, `dsl_dir_diduse_space`): a block born
//! in a head dataset adds its deflated allocated size to the dataset's referenced and unique
//! bytes and to its directory's `used` (breakdown HEAD), and to `used` (breakdown CHILD) of
//! every ancestor directory; compressed and uncompressed sizes go the same way. A killed
//! block born after the dataset's latest snapshot is freed and subtracted; one born earlier
//! is still referenced by that snapshot: it moves to the head's deadlist, leaves the head's
//! referenced bytes and moves from HEAD to SNAP in the directory's breakdown.
//!
//! Pool layout created by [`create_pool_dsl`] (OpenZFS `dsl_pool_create`, version 5000):
//! root dir (`$MOS`, `$FREE`, `$ORIGIN` children), `$ORIGIN` head + `$ORIGIN@$ORIGIN`
//! snapshot (the origin every dataset without another origin is a clone of), the free
//! bpobj, and the root dataset.

use crate::{DslError, Result};
use dmu::tx::DirtyObjset;
use ondisk::blkptr::BlkPtr;
use ondisk::bpobj::{BpobjPhys, BPOBJ_SIZE_V2};
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::dsl::{
    DslDatasetPhys, DslDirPhys, DD_FLAG_USED_BREAKDOWN, DD_USED_CHILD, DD_USED_CHILD_RSRV, DD_USED_HEAD,
    DD_USED_REFRSRV, DD_USED_SNAP,
};
use ondisk::ByteOrder;
use zap::write::{ZapCache, ZapVal, U8_TEXTPREP_TOUPPER};

/// `DS_FLAG_UNIQUE_ACCURATE`.
pub const DS_FLAG_UNIQUE_ACCURATE: u64 = 1 << 2;
/// `sizeof (dsl_deadlist_phys_t)`.
pub const DEADLIST_PHYS_SIZE: usize = 320;
/// `SPA_OLD_MAXBLOCKSIZE`: block size of bpobjs.
pub const BPOBJ_BLOCK_SIZE: u64 = 128 << 10;

const LE: ByteOrder = ByteOrder::Little;

pub(crate) fn dmu(e: impl Into<dmu::DmuError>) -> DslError {
    DslError::from(e.into())
}

pub(crate) fn zerr(e: zap::ZapError) -> DslError {
    DslError::Zap(e)
}

fn bad(detail: impl Into<String>) -> DslError {
    DslError::Corrupt { what: "DSL", detail: detail.into() }
}

/// Reads a directory's phys from its bonus.
pub fn dir_phys(os: &DirtyObjset, dir: u64) -> Result<DslDirPhys> {
    let dn = os.dnode(dir).map_err(dmu)?.ok_or_else(|| bad(format!("no dsl_dir {dir}")))?;
    Ok(DslDirPhys::parse(&dn.bonus, LE)?)
}

pub fn set_dir_phys(os: &mut DirtyObjset, dir: u64, p: &DslDirPhys) -> Result<()> {
    os.set_bonus(dir, p.encode(LE)).map_err(dmu)
}

/// Reads a dataset's phys from its bonus.
pub fn ds_phys(os: &DirtyObjset, ds: u64) -> Result<DslDatasetPhys> {
    let dn = os.dnode(ds).map_err(dmu)?.ok_or_else(|| bad(format!("no dataset {ds}")))?;
    Ok(DslDatasetPhys::parse(&dn.bonus, LE)?)
}

pub fn set_ds_phys(os: &mut DirtyObjset, ds: u64, p: &DslDatasetPhys) -> Result<()> {
    os.set_bonus(ds, p.encode(LE)).map_err(dmu)
}

/// `DMU_POOL_DIRECTORY_OBJECT`: the MOS object directory.
const POOL_DIRECTORY: u64 = 1;
/// Deepest dataset name accepted (`zfs_max_dataset_nesting` is 50; names are at most 255
/// bytes anyway).
pub(crate) const MAX_NESTING: usize = 256;

/// A dataset found by name in the open txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its `dsl_dir` (for a snapshot: its file system's).
    pub dir: u64,
    /// Its `dsl_dataset` (head, or the snapshot).
    pub ds: u64,
}

/// Resolves `pool[/fs...][@snap]` in the open txg of the MOS (`dsl_dataset_hold`'s walk:
/// the root directory, child directory maps, then the head's snapshot-name map). `None`
/// when a component does not exist. The pool name itself is not checked.
pub fn lookup(os: &DirtyObjset, zaps: &mut ZapCache, name: &str) -> Result<Option<Found>> {
    let (path, snap) = match name.split_once('@') {
        Some((p, s)) => (p, Some(s)),
        None => (name, None),
    };
    let Some(mut dir) = zaps.lookup_u64(os, POOL_DIRECTORY, "root_dataset").map_err(zerr)? else {
        return Err(bad("the MOS has no root dataset"));
    };
    for (depth, part) in path.split('/').skip(1).enumerate() {
        if part.is_empty() || depth >= MAX_NESTING {
            return Ok(None);
        }
        let children = dir_phys(os, dir)?.child_dir_zapobj;
        match zaps.lookup_u64(os, children, part).map_err(zerr)? {
            Some(c) => dir = c,
            None => return Ok(None),
        }
    }
    let head = dir_phys(os, dir)?.head_dataset_obj;
    if head == 0 {
        return Ok(None);
    }
    let Some(s) = snap else { return Ok(Some(Found { dir, ds: head })) };
    let names = ds_phys(os, head)?.snapnames_zapobj;
    if names == 0 || s.is_empty() {
        return Ok(None);
    }
    Ok(zaps.lookup_u64(os, names, s).map_err(zerr)?.map(|ds| Found { dir, ds }))
}

/// Creates a directory named `name` under `parent` (None: the pool's root directory).
pub fn create_dir(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    parent: Option<u64>,
    name: &str,
    now: u64,
) -> Result<u64> {
    let props = zaps.create(os, T::DslProps.to_u8(), 0, Vec::new()).map_err(zerr)?;
    let child = zaps.create(os, T::DslDirChildMap.to_u8(), 0, Vec::new()).map_err(zerr)?;
    let phys = DslDirPhys {
        creation_time: now,
        parent_obj: parent.unwrap_or(0),
        child_dir_zapobj: child,
        props_zapobj: props,
        flags: DD_FLAG_USED_BREAKDOWN,
        ..Default::default()
    };
    let dir = os.alloc_object(T::DslDir.to_u8(), 512, T::DslDir.to_u8(), phys.encode(LE)).map_err(dmu)?;
    if let Some(p) = parent {
        let pz = dir_phys(os, p)?.child_dir_zapobj;
        if zaps.lookup(os, pz, name.as_bytes()).map_err(zerr)?.is_some() {
            return Err(bad(format!("'{name}' already exists")));
        }
        zaps.update_u64(os, pz, name, dir).map_err(zerr)?;
        crate::limits::adjust(os, zaps, p, crate::limits::Count::Filesystems, 1)?;
    }
    Ok(dir)
}

/// Creates an empty bpobj (V2 header, 128 KiB blocks).
pub fn create_bpobj(os: &mut DirtyObjset) -> Result<u64> {
    let hdr = BpobjPhys { bonus_len: BPOBJ_SIZE_V2, ..Default::default() };
    let bonus = hdr.encode(LE)?;
    os.alloc_object(T::Bpobj.to_u8(), BPOBJ_BLOCK_SIZE, T::BpobjHdr.to_u8(), bonus).map_err(dmu)
}

/// Creates an empty deadlist (a ZAP from min-txg to bpobj, with a header bonus).
pub fn create_deadlist(os: &mut DirtyObjset, zaps: &mut ZapCache) -> Result<u64> {
    zaps.create(os, T::Deadlist.to_u8(), T::DeadlistHdr.to_u8(), vec![0u8; DEADLIST_PHYS_SIZE]).map_err(zerr)
}

/// Adds key `mintxg` (with a new empty bpobj) to a deadlist.
pub fn deadlist_add_key(os: &mut DirtyObjset, zaps: &mut ZapCache, dl: u64, mintxg: u64) -> Result<u64> {
    let bpo = create_bpobj(os)?;
    zaps.update_u64(os, dl, &mintxg.to_string(), bpo).map_err(zerr)?;
    Ok(bpo)
}

/// A new deadlist with the keys of `src` below `maxtxg`, each with an empty bpobj
/// (`dsl_deadlist_clone`).
pub fn clone_deadlist(os: &mut DirtyObjset, zaps: &mut ZapCache, src: u64, maxtxg: u64) -> Result<u64> {
    let keys: Vec<u64> = zaps
        .entries(os, src)
        .map_err(zerr)?
        .iter()
        .filter_map(|(k, _)| std::str::from_utf8(k).ok()?.parse::<u64>().ok())
        .filter(|&k| k < maxtxg)
        .collect();
    let dl = create_deadlist(os, zaps)?;
    for k in keys {
        deadlist_add_key(os, zaps, dl, k)?;
    }
    Ok(dl)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Creates the head dataset of `dir`, a clone of `origin` (a snapshot) if given
/// (`dsl_dataset_create_sync_dd`). Returns the dataset object.
pub fn create_dataset(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    dir: u64,
    origin: Option<u64>,
    txg: u64,
    now: u64,
) -> Result<u64> {
    let snapnames = zaps.create_norm(os, T::DslDsSnapMap.to_u8(), U8_TEXTPREP_TOUPPER).map_err(zerr)?;
    let mut p = DslDatasetPhys {
        dir_obj: dir,
        fsid_guid: random_u64() & ((1 << 56) - 1),
        guid: random_u64(),
        snapnames_zapobj: snapnames,
        creation_time: now,
        // OpenZFS records datasets made at pool creation (TXG_INITIAL) as born in txg 1.
        creation_txg: if txg == 4 { 1 } else { txg },
        flags: DS_FLAG_UNIQUE_ACCURATE,
        bp: [0u8; 128],
        ..Default::default()
    };
    let ds =
        os.alloc_object(T::DslDataset.to_u8(), 512, T::DslDataset.to_u8(), vec![0u8; 320]).map_err(dmu)?;
    match origin {
        None => p.deadlist_obj = create_deadlist(os, zaps)?,
        Some(o) => {
            let mut op = ds_phys(os, o)?;
            p.prev_snap_obj = o;
            p.prev_snap_txg = op.creation_txg;
            p.referenced_bytes = op.referenced_bytes;
            p.compressed_bytes = op.compressed_bytes;
            p.uncompressed_bytes = op.uncompressed_bytes;
            p.bp = op.bp;
            op.num_children += 1;
            let odir = dir_phys(os, op.dir_obj)?;
            let ohead = ds_phys(os, odir.head_dataset_obj)?;
            p.deadlist_obj = clone_deadlist(os, zaps, ohead.deadlist_obj, p.prev_snap_txg)?;
            if op.next_clones_obj == 0 {
                op.next_clones_obj = zaps.create(os, T::NextClones.to_u8(), 0, Vec::new()).map_err(zerr)?;
            }
            zaps.update_u64(os, op.next_clones_obj, &format!("{ds:x}"), ds).map_err(zerr)?;
            set_ds_phys(os, o, &op)?;
            let mut dp = dir_phys(os, dir)?;
            dp.origin_obj = o;
            set_dir_phys(os, dir, &dp)?;
            let mut odir = dir_phys(os, op.dir_obj)?;
            if odir.clones == 0 {
                odir.clones = zaps.create(os, T::DslClones.to_u8(), 0, Vec::new()).map_err(zerr)?;
                set_dir_phys(os, op.dir_obj, &odir)?;
            }
            zaps.update_u64(os, odir.clones, &format!("{ds:x}"), ds).map_err(zerr)?;
        }
    }
    set_ds_phys(os, ds, &p)?;
    let mut dp = dir_phys(os, dir)?;
    dp.head_dataset_obj = ds;
    set_dir_phys(os, dir, &dp)?;
    Ok(ds)
}

/// Snapshots head dataset `ds` as `name` in txg `txg` (`dsl_dataset_snapshot_sync_impl`).
/// Returns the snapshot's object.
pub fn snapshot(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    ds: u64,
    name: &str,
    txg: u64,
    now: u64,
) -> Result<u64> {
    let mut head = ds_phys(os, ds)?;
    if zaps.lookup(os, head.snapnames_zapobj, name.as_bytes()).map_err(zerr)?.is_some() {
        return Err(bad(format!("snapshot '{name}' already exists")));
    }
    if head.prev_snap_txg >= txg {
        return Err(bad("a snapshot was already taken in this txg"));
    }
    let snap = DslDatasetPhys {
        dir_obj: head.dir_obj,
        prev_snap_obj: head.prev_snap_obj,
        prev_snap_txg: head.prev_snap_txg,
        next_snap_obj: ds,
        num_children: 1,
        creation_time: now,
        creation_txg: txg,
        deadlist_obj: head.deadlist_obj,
        referenced_bytes: head.referenced_bytes,
        compressed_bytes: head.compressed_bytes,
        uncompressed_bytes: head.uncompressed_bytes,
        unique_bytes: 0,
        fsid_guid: random_u64() & ((1 << 56) - 1),
        guid: random_u64(),
        flags: head.flags,
        bp: head.bp,
        ..Default::default()
    };
    let sobj =
        os.alloc_object(T::DslDataset.to_u8(), 512, T::DslDataset.to_u8(), snap.encode(LE)).map_err(dmu)?;
    if head.prev_snap_obj != 0 {
        let mut prev = ds_phys(os, head.prev_snap_obj)?;
        if prev.next_snap_obj == ds {
            prev.next_snap_obj = sobj;
            set_ds_phys(os, head.prev_snap_obj, &prev)?;
        } else if prev.next_clones_obj != 0 {
            // A clone's first snapshot takes the clone's place among its origin's next
            // clones (OpenZFS dsl_dataset_snapshot_sync_impl), which is how a scan walks
            // from the origin to every snapshot of the clone.
            zaps.remove(os, prev.next_clones_obj, format!("{ds:x}").as_bytes()).map_err(zerr)?;
            zaps.update_u64(os, prev.next_clones_obj, &format!("{sobj:x}"), sobj).map_err(zerr)?;
        }
    }
    // The head's blocks are now all shared with the snapshot: both have no unique space
    // (OpenZFS moves no directory breakdown here; kills later move HEAD to SNAP). The head
    // starts a new deadlist with the keys it had plus its old previous-snapshot txg.
    // With a refreservation, the unique space the snapshot takes over leaves the
    // reservation unused again: the directory is charged min(unique, reservation) more.
    let reserved = head_reserved(os, zaps, ds)?;
    if reserved != 0 {
        let d = head.unique_bytes.min(reserved) as i64;
        dir_diduse(os, head.dir_obj, DD_USED_REFRSRV, SpaceDelta { used: d, comp: 0, uncomp: 0 })?;
    }
    let old_prev_txg = head.prev_snap_txg;
    head.deadlist_obj = clone_deadlist(os, zaps, head.deadlist_obj, u64::MAX)?;
    if zaps.lookup(os, head.deadlist_obj, old_prev_txg.to_string().as_bytes()).map_err(zerr)?.is_none() {
        deadlist_add_key(os, zaps, head.deadlist_obj, old_prev_txg)?;
    }
    head.prev_snap_obj = sobj;
    head.prev_snap_txg = txg;
    head.unique_bytes = 0;
    set_ds_phys(os, ds, &head)?;
    zaps.update_u64(os, head.snapnames_zapobj, name, sobj).map_err(zerr)?;
    crate::limits::adjust(os, zaps, head.dir_obj, crate::limits::Count::Snapshots, 1)?;
    Ok(sobj)
}

/// Space deltas to charge to a dataset's directory and its ancestors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceDelta {
    pub used: i64,
    pub comp: i64,
    pub uncomp: i64,
}

impl SpaceDelta {
    pub fn of(bp: &BlkPtr, dsize: u64) -> SpaceDelta {
        SpaceDelta { used: dsize as i64, comp: bp.psize() as i64, uncomp: bp.lsize() as i64 }
    }
    pub fn negated(self) -> SpaceDelta {
        SpaceDelta { used: -self.used, comp: -self.comp, uncomp: -self.uncomp }
    }
    pub fn add(&mut self, o: SpaceDelta) {
        self.used += o.used;
        self.comp += o.comp;
        self.uncomp += o.uncomp;
    }
    pub fn is_zero(&self) -> bool {
        *self == SpaceDelta::default()
    }
}

fn adj(v: &mut u64, d: i64) {
    *v = (*v as i64).saturating_add(d).max(0) as u64;
}

/// Charges `d` to directory `dir` in breakdown `kind`, and to each ancestor what the
/// change does to the space its child takes from it. A directory with a `reservation`
/// (`dd_reserved`) takes max(used, reserved) from its parent, so a change inside its
/// unused reservation does not reach the ancestors (it was charged when the reservation
/// was set). At each ancestor the CHILD breakdown takes the child's real change and
/// CHILD_RSRV the difference (OpenZFS `dsl_dir_diduse_transfer_space`, `parent_delta`).
pub fn dir_diduse(os: &mut DirtyObjset, dir: u64, kind: usize, d: SpaceDelta) -> Result<()> {
    if d.is_zero() {
        return Ok(());
    }
    let mut cur = dir;
    // This level's change of `dd_used_bytes`, and the part of it that goes to `k` (the
    // rest, at ancestors, to CHILD_RSRV).
    let (mut used, mut real, mut k) = (d.used, d.used, kind);
    for _ in 0..256 {
        let mut p = dir_phys(os, cur)?;
        let passed_up = reserved_delta(p.used_bytes, p.reserved, used);
        adj(&mut p.used_bytes, used);
        adj(&mut p.compressed_bytes, d.comp);
        adj(&mut p.uncompressed_bytes, d.uncomp);
        adj(&mut p.used_breakdown[k], real);
        if used != real {
            adj(&mut p.used_breakdown[DD_USED_CHILD_RSRV], used - real);
        }
        set_dir_phys(os, cur, &p)?;
        if p.parent_obj == 0 {
            return Ok(());
        }
        cur = p.parent_obj;
        k = DD_USED_CHILD;
        (real, used) = (used, passed_up);
    }
    Err(bad("dsl_dir parent chain too long"))
}

/// Sets directory `dir`'s `dd_reserved` (the effective `reservation`) and charges its
/// ancestors the change of what it takes from them, max(used, reserved), as CHILD_RSRV
/// (`dsl_dir_set_reservation_sync_impl`).
pub fn set_dir_reserved(os: &mut DirtyObjset, dir: u64, value: u64) -> Result<()> {
    let mut p = dir_phys(os, dir)?;
    let delta = p.used_bytes.max(value) as i64 - p.used_bytes.max(p.reserved) as i64;
    p.reserved = value;
    set_dir_phys(os, dir, &p)?;
    if p.parent_obj != 0 && delta != 0 {
        dir_diduse(os, p.parent_obj, DD_USED_CHILD_RSRV, SpaceDelta { used: delta, comp: 0, uncomp: 0 })?;
    }
    Ok(())
}

/// The `refreservation` held by head dataset `ds` (`ds_reserved`): its local property
/// value, else its received one unless `zfs inherit` hid it (the property is not
/// inherited from parents), 0 for snapshots.
pub fn head_reserved(os: &DirtyObjset, zaps: &mut ZapCache, ds: u64) -> Result<u64> {
    let p = ds_phys(os, ds)?;
    let d = dir_phys(os, p.dir_obj)?;
    if d.head_dataset_obj != ds || d.props_zapobj == 0 {
        return Ok(0);
    }
    let v = dir_value(os, zaps, d.props_zapobj, "refreservation")?;
    Ok(v.and_then(|v| (v.int_size == 8).then(|| v.values.first().copied()).flatten()).unwrap_or(0))
}

/// The value of `prop` that props ZAP `pz` (0: none) gives its own directory in the open
/// txg: the local entry, else the received one unless an explicit inherit hides it — the
/// rule of [`crate::props::applies`] (which reads committed entries), looked up entry by
/// entry. `None`: the parent decides (or the default).
pub fn dir_value(os: &DirtyObjset, zaps: &mut ZapCache, pz: u64, prop: &str) -> Result<Option<ZapVal>> {
    if pz == 0 {
        return Ok(None);
    }
    if let Some(v) = zaps.lookup(os, pz, prop.as_bytes()).map_err(zerr)? {
        return Ok(Some(v));
    }
    let marker = format!("{prop}{}", crate::props::INHERIT_SUFFIX);
    if zaps.lookup(os, pz, marker.as_bytes()).map_err(zerr)?.is_some() {
        return Ok(None);
    }
    let recvd = format!("{prop}{}", crate::props::RECVD_SUFFIX);
    zaps.lookup(os, pz, recvd.as_bytes()).map_err(zerr)
}

/// How much a change of `d` bytes in a head's unique space changes what its directory is
/// charged, given its `refreservation` (`parent_delta`): space inside the reservation was
/// charged when the reservation was set.
fn reserved_delta(unique: u64, reserved: u64, d: i64) -> i64 {
    if reserved == 0 {
        return d;
    }
    let after = (unique as i64).saturating_add(d).max(0) as u64;
    after.max(reserved) as i64 - unique.max(reserved) as i64
}

/// The creation txg of directory `dir`'s origin snapshot (`dd_origin_txg`; 0 without
/// one). Blocks born at or before it were charged to the origin's directory, not this one.
pub fn dir_origin_txg(os: &DirtyObjset, dir: u64) -> Result<u64> {
    let o = dir_phys(os, dir)?.origin_obj;
    Ok(if o == 0 { 0 } else { ds_phys(os, o)?.creation_txg })
}

/// Applies a head dataset's births and frees of one sync: `born` and `freed` are totals of
/// blocks born/freed, `to_deadlist` of blocks killed that a snapshot still references, of
/// which `to_snap` bytes were born after the directory's origin (`dd_origin_txg`): only
/// those move from the HEAD to the SNAP breakdown (`dsl_dataset_block_kill`; a clone that
/// overwrites what it inherited was never charged for it).
/// With a `refreservation`, the directory is charged only what the unique space takes
/// beyond it, and the rest moves between the HEAD and REFRSRV breakdowns
/// (`dsl_dir_diduse_transfer` in OpenZFS's `dsl_dataset_block_born/kill`).
pub fn account_head(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    ds: u64,
    born: SpaceDelta,
    freed: SpaceDelta,
    to_deadlist: SpaceDelta,
    to_snap: u64,
) -> Result<()> {
    let reserved = head_reserved(os, zaps, ds)?;
    let mut p = ds_phys(os, ds)?;
    let mut net = born;
    net.add(freed.negated());
    let mut refd = net;
    refd.add(to_deadlist.negated());
    let charged = reserved_delta(p.unique_bytes, reserved, net.used);
    adj(&mut p.referenced_bytes, refd.used);
    adj(&mut p.compressed_bytes, refd.comp);
    adj(&mut p.uncompressed_bytes, refd.uncomp);
    adj(&mut p.unique_bytes, net.used);
    set_ds_phys(os, ds, &p)?;
    dir_diduse(os, p.dir_obj, DD_USED_HEAD, SpaceDelta { used: charged, ..net })?;
    if charged != net.used {
        let mut dp = dir_phys(os, p.dir_obj)?;
        adj(&mut dp.used_breakdown[DD_USED_HEAD], net.used - charged);
        adj(&mut dp.used_breakdown[DD_USED_REFRSRV], charged - net.used);
        set_dir_phys(os, p.dir_obj, &dp)?;
    }
    if to_snap != 0 {
        let mut dp = dir_phys(os, p.dir_obj)?;
        adj(&mut dp.used_breakdown[DD_USED_HEAD], -(to_snap as i64));
        adj(&mut dp.used_breakdown[DD_USED_SNAP], to_snap as i64);
        set_dir_phys(os, p.dir_obj, &dp)?;
    }
    Ok(())
}

/// Sets (`Some`) or removes the local `refreservation` of head dataset `ds` and charges
/// its directory the change of the unused part (`dsl_dataset_set_refreservation_sync_impl`:
/// the directory carries max(reservation - unique, 0) in its REFRSRV breakdown).
pub fn set_refreservation(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    ds: u64,
    new: Option<u64>,
) -> Result<()> {
    set_head_entry(os, zaps, ds, "refreservation", new.map(ZapVal::u64))
}

/// Sets or removes entry `key` of head `ds`'s props ZAP (a local value, `P$recvd` or
/// `P$inherit`); one that bears on `refreservation` also charges the directory the change
/// of the reservation's unused part, whichever entry made the effective value change.
pub fn set_head_entry(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    ds: u64,
    key: &str,
    val: Option<ZapVal>,
) -> Result<()> {
    let p = ds_phys(os, ds)?;
    let base = key.split('$').next();
    if base == Some("quota") || base == Some("reservation") {
        // OpenZFS's kernel reads these from `dd_quota` and `dd_reserved`
        // (`dsl_dir_set_quota_sync` and `dsl_dir_set_reservation_sync` keep them equal to
        // the effective property).
        set_prop(os, zaps, p.dir_obj, key, val)?;
        let pz = dir_phys(os, p.dir_obj)?.props_zapobj;
        let prop = if base == Some("quota") { "quota" } else { "reservation" };
        let v = dir_value(os, zaps, pz, prop)?.and_then(|v| v.values.first().copied()).unwrap_or(0);
        if prop == "reservation" {
            return set_dir_reserved(os, p.dir_obj, v);
        }
        let mut d = dir_phys(os, p.dir_obj)?;
        d.quota = v;
        return set_dir_phys(os, p.dir_obj, &d);
    }
    if key.split('$').next() != Some("refreservation") {
        return set_prop(os, zaps, p.dir_obj, key, val);
    }
    let old = head_reserved(os, zaps, ds)?;
    set_prop(os, zaps, p.dir_obj, key, val)?;
    let new = head_reserved(os, zaps, ds)?;
    let unused = |r: u64| r.saturating_sub(p.unique_bytes) as i64;
    let d = unused(new) - unused(old);
    dir_diduse(os, p.dir_obj, DD_USED_REFRSRV, SpaceDelta { used: d, comp: 0, uncomp: 0 })
}

/// Objects of a freshly created pool's DSL.
#[derive(Clone, Copy, Debug)]
pub struct PoolDsl {
    pub root_dir: u64,
    pub mos_dir: u64,
    pub free_dir: u64,
    pub origin_dir: u64,
    pub origin_head: u64,
    pub origin_snap: u64,
    pub free_bpobj: u64,
    pub root_ds: u64,
}

/// Builds the DSL of a new pool in txg `txg` (see the module comment); the caller adds the
/// directory entries `root_dataset` and `free_bpobj`.
pub fn create_pool_dsl(os: &mut DirtyObjset, zaps: &mut ZapCache, txg: u64, now: u64) -> Result<PoolDsl> {
    let root_dir = create_dir(os, zaps, None, "", now)?;
    let mos_dir = create_dir(os, zaps, Some(root_dir), "$MOS", now)?;
    let free_dir = create_dir(os, zaps, Some(root_dir), "$FREE", now)?;
    let free_bpobj = create_bpobj(os)?;
    let origin_dir = create_dir(os, zaps, Some(root_dir), "$ORIGIN", now)?;
    let origin_head = create_dataset(os, zaps, origin_dir, None, txg, now)?;
    // The origin snapshot is taken in txg 1 (creation txg of datasets made at TXG_INITIAL).
    let origin_snap = snapshot(os, zaps, origin_head, "$ORIGIN", 1, now)?;
    let root_ds = create_dataset(os, zaps, root_dir, Some(origin_snap), txg, now)?;
    Ok(PoolDsl { root_dir, mos_dir, free_dir, origin_dir, origin_head, origin_snap, free_bpobj, root_ds })
}

/// Sets or removes a local property in a directory's props ZAP (string values are stored
/// as NUL-terminated bytes, numbers as one u64, as OpenZFS does).
pub fn set_prop(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    dir: u64,
    name: &str,
    val: Option<ZapVal>,
) -> Result<()> {
    let pz = dir_phys(os, dir)?.props_zapobj;
    match val {
        Some(v) => zaps.update(os, pz, name.as_bytes(), v).map_err(zerr),
        None => zaps.remove(os, pz, name.as_bytes()).map(|_| ()).map_err(zerr),
    }
}

/// Sets or removes a snapshot's own property (user properties, the only ones a snapshot
/// takes) in its `ds_props_obj`, created on first use as OpenZFS creates it
/// (`dsl_prop_set_sync_impl`: a `DMU_OT_DSL_PROPS` ZAP).
pub fn set_snapshot_prop(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    ds: u64,
    name: &str,
    val: Option<ZapVal>,
) -> Result<()> {
    let mut p = ds_phys(os, ds)?;
    if p.props_obj == 0 {
        if val.is_none() {
            return Ok(());
        }
        p.props_obj = zaps.create(os, T::DslProps.to_u8(), 0, Vec::new()).map_err(zerr)?;
        set_ds_phys(os, ds, &p)?;
    }
    match val {
        Some(v) => zaps.update(os, p.props_obj, name.as_bytes(), v).map_err(zerr),
        None => zaps.remove(os, p.props_obj, name.as_bytes()).map(|_| ()).map_err(zerr),
    }
}

/// `zfs rename` of snapshot `snap` of head dataset `head` from `old` to `new` (its key in
/// the head's snapshot-name ZAP; nothing else names it).
pub fn rename_snapshot(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    head: u64,
    snap: u64,
    old: &str,
    new: &str,
) -> Result<()> {
    let names = ds_phys(os, head)?.snapnames_zapobj;
    if zaps.lookup_u64(os, names, new).map_err(zerr)?.is_some() {
        return Err(DslError::Unsupported(format!("a snapshot named '{new}' already exists")));
    }
    if zaps.lookup_u64(os, names, old).map_err(zerr)? != Some(snap) {
        return Err(bad(format!("snapshot {snap} is not '{old}' of dataset {head}")));
    }
    zaps.remove(os, names, old.as_bytes()).map_err(zerr)?;
    zaps.update(os, names, new.as_bytes(), ZapVal::u64(snap)).map_err(zerr)
}

/// `zfs rename` of directory `dir` (a file system or volume, with everything below it) to
/// `new_leaf` under `new_parent` (`dsl_dir_rename_sync`): its entry moves between the
/// parents' child maps, and its space moves from the old parent's chain to the new one's
/// (charged there as CHILD). Properties follow the new chain by themselves (inheritance is
/// resolved by walking parents).
pub fn rename_dir(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    dir: u64,
    new_parent: u64,
    new_leaf: &str,
) -> Result<()> {
    let mut d = dir_phys(os, dir)?;
    let old_parent = d.parent_obj;
    if old_parent == 0 {
        return Err(DslError::Unsupported("the pool's root file system cannot be renamed".into()));
    }
    // The new parent must not be the directory itself or below it.
    let mut cur = new_parent;
    for _ in 0..256 {
        if cur == dir {
            return Err(DslError::Unsupported("a file system cannot be moved below itself".into()));
        }
        let p = dir_phys(os, cur)?.parent_obj;
        if p == 0 {
            break;
        }
        cur = p;
    }
    let new_children = dir_phys(os, new_parent)?.child_dir_zapobj;
    if zaps.lookup_u64(os, new_children, new_leaf).map_err(zerr)?.is_some() {
        return Err(DslError::Unsupported("dataset already exists".into()));
    }
    let old_children = dir_phys(os, old_parent)?.child_dir_zapobj;
    let old_leaf = zaps
        .entries(os, old_children)
        .map_err(zerr)?
        .into_iter()
        .find(|(_, v)| v.values.first() == Some(&dir))
        .map(|(k, _)| k)
        .ok_or_else(|| bad(format!("directory {dir} is not in its parent's child map")))?;
    zaps.remove(os, old_children, &old_leaf).map_err(zerr)?;
    zaps.update(os, new_children, new_leaf.as_bytes(), ZapVal::u64(dir)).map_err(zerr)?;
    if new_parent != old_parent {
        use crate::limits::{adjust, moved_by_rename, Count};
        let (fs, ss) = moved_by_rename(os, zaps, dir)?;
        adjust(os, zaps, old_parent, Count::Filesystems, -fs)?;
        adjust(os, zaps, new_parent, Count::Filesystems, fs)?;
        adjust(os, zaps, old_parent, Count::Snapshots, -ss)?;
        adjust(os, zaps, new_parent, Count::Snapshots, ss)?;
        let moved = SpaceDelta {
            used: d.used_bytes as i64,
            comp: d.compressed_bytes as i64,
            uncomp: d.uncompressed_bytes as i64,
        };
        let neg = SpaceDelta { used: -moved.used, comp: -moved.comp, uncomp: -moved.uncomp };
        dir_diduse(os, old_parent, DD_USED_CHILD, neg)?;
        dir_diduse(os, new_parent, DD_USED_CHILD, moved)?;
        // The unused part of its `reservation` moves with it (`dsl_dir_rename_sync`).
        let unused = d.reserved.saturating_sub(d.used_bytes) as i64;
        if unused != 0 {
            let r = SpaceDelta { used: unused, comp: 0, uncomp: 0 };
            dir_diduse(os, old_parent, DD_USED_CHILD_RSRV, r.negated())?;
            dir_diduse(os, new_parent, DD_USED_CHILD_RSRV, r)?;
        }
        d = dir_phys(os, dir)?;
        d.parent_obj = new_parent;
        set_dir_phys(os, dir, &d)?;
    }
    Ok(())
}

/// The names of everything at and below directory `dir` (named `name`): file systems and
/// volumes with their snapshots (`dmu_objset_find_dp` with children and snapshots, as
/// `zfs rename` checks the names it would make). Bounded by the name-length limit: a tree
/// deeper than 256 levels is corrupt.
pub fn subtree_names(os: &DirtyObjset, zaps: &mut ZapCache, dir: u64, name: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut todo = vec![(dir, name.to_string(), 0usize)];
    while let Some((d, n, depth)) = todo.pop() {
        if depth > MAX_NESTING {
            return Err(bad(format!("directory {dir} is nested deeper than {MAX_NESTING} levels")));
        }
        let p = dir_phys(os, d)?;
        if p.head_dataset_obj != 0 {
            let snapnames = ds_phys(os, p.head_dataset_obj)?.snapnames_zapobj;
            if snapnames != 0 {
                for (k, _) in zaps.entries(os, snapnames).map_err(zerr)? {
                    out.push(format!("{n}@{}", String::from_utf8_lossy(&k)));
                }
            }
        }
        if p.child_dir_zapobj != 0 {
            for (k, v) in zaps.entries(os, p.child_dir_zapobj).map_err(zerr)? {
                let leaf = String::from_utf8_lossy(&k);
                if let Some(&c) = v.values.first() {
                    todo.push((c, format!("{n}/{leaf}"), depth + 1));
                }
            }
        }
        out.push(n);
    }
    Ok(out)
}

/// `zfs hold TAG SNAP`: adds `tag` (with the time it was placed) to snapshot `ds`'s user
/// holds, the `ds_userrefs_obj` ZAP, created on first use (`DMU_OT_USERREFS`, as
/// `dsl_dataset_user_hold_sync_one_impl`). A held snapshot cannot be destroyed.
pub fn hold(os: &mut DirtyObjset, zaps: &mut ZapCache, ds: u64, tag: &str, now: u64) -> Result<()> {
    let mut p = ds_phys(os, ds)?;
    if p.userrefs_obj == 0 {
        p.userrefs_obj = zaps.create(os, T::Userrefs.to_u8(), 0, Vec::new()).map_err(zerr)?;
        set_ds_phys(os, ds, &p)?;
    } else if zaps.lookup_u64(os, p.userrefs_obj, tag).map_err(zerr)?.is_some() {
        return Err(DslError::Unsupported(format!("tag '{tag}' already exists on this dataset")));
    }
    zaps.update(os, p.userrefs_obj, tag.as_bytes(), ZapVal::u64(now)).map_err(zerr)
}

/// `zfs release TAG SNAP`: removes the hold; returns how many holds are left.
pub fn release(os: &mut DirtyObjset, zaps: &mut ZapCache, ds: u64, tag: &str) -> Result<usize> {
    let p = ds_phys(os, ds)?;
    let gone = p.userrefs_obj != 0 && zaps.remove(os, p.userrefs_obj, tag.as_bytes()).map_err(zerr)?;
    if !gone {
        return Err(DslError::Unsupported(format!("no such tag '{tag}' on this dataset")));
    }
    zaps.len(os, p.userrefs_obj).map_err(zerr)
}

/// Appends blocks killed from head `ds` but still referenced by its latest snapshot to the
/// head's deadlist (`dsl_deadlist_insert`: the bpobj of the largest key below the block's
/// birth), and credits the latest snapshot's unique space for blocks no older snapshot
/// references. `bps` holds each pointer with its deflated size.
pub fn deadlist_insert(
    os: &mut DirtyObjset,
    zaps: &mut ZapCache,
    ds: u64,
    bps: &[(BlkPtr, u64)],
) -> Result<()> {
    let head = ds_phys(os, ds)?;
    let mut keys: Vec<(u64, u64)> = zaps
        .entries(os, head.deadlist_obj)
        .map_err(zerr)?
        .iter()
        .filter_map(|(k, v)| Some((std::str::from_utf8(k).ok()?.parse::<u64>().ok()?, *v.values.first()?)))
        .collect();
    keys.sort_unstable();
    if keys.is_empty() {
        return Err(bad(format!("deadlist {} of dataset {ds} has no keys", head.deadlist_obj)));
    }
    let mut per_bpobj: std::collections::BTreeMap<u64, Vec<(BlkPtr, u64)>> = Default::default();
    for &(bp, dsize) in bps {
        let birth = bp.logical_birth();
        let idx = keys.iter().rposition(|&(k, _)| k < birth).unwrap_or(0);
        per_bpobj.entry(keys[idx].1).or_default().push((bp, dsize));
    }
    let mut total = SpaceDelta::default();
    for (bpo, list) in per_bpobj {
        let dn = os.dnode(bpo).map_err(dmu)?.ok_or_else(|| bad(format!("no bpobj {bpo}")))?;
        let mut hdr = BpobjPhys::parse(&dn.bonus, LE)?;
        let mut raw = Vec::with_capacity(list.len() * 128);
        for (bp, dsize) in &list {
            raw.extend_from_slice(&bp.encode(LE));
            hdr.num_blkptrs += 1;
            hdr.bytes += dsize;
            hdr.comp += bp.psize();
            hdr.uncomp += bp.lsize();
            total.add(SpaceDelta::of(bp, *dsize));
        }
        let at = (hdr.num_blkptrs - list.len() as u64) * 128;
        os.write(bpo, at, &raw).map_err(dmu)?;
        os.set_bonus(bpo, hdr.encode(LE)?).map_err(dmu)?;
    }
    crate::destroy::dl_adjust(os, head.deadlist_obj, total)?;
    // The latest snapshot's unique space grows by what only it still references. Not a
    // clone's origin: the origin's next is in its own file system, whose blocks still
    // reference what the clone let go.
    if head.prev_snap_obj != 0 && ds_phys(os, head.prev_snap_obj)?.next_snap_obj == ds {
        let mut snap = ds_phys(os, head.prev_snap_obj)?;
        let only: u64 =
            bps.iter().filter(|(bp, _)| bp.logical_birth() > snap.prev_snap_txg).map(|(_, d)| d).sum();
        snap.unique_bytes += only;
        set_ds_phys(os, head.prev_snap_obj, &snap)?;
    }
    Ok(())
}
