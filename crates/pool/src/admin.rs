//! # Administrative changes as sync tasks (`zfs create/clone/snapshot/set/inherit/destroy`,
//! `zpool set`)
//!
//! Each change is a pair, as OpenZFS's `dsl_sync_task`: a *check* run in open context that
//! refuses what cannot work (names, existence, features) and changes nothing, then a *sync*
//! function queued on the [`Spa`] and run in syncing context, which checks again (earlier
//! tasks of the same txg may have changed things) and edits the MOS. The txg's
//! all-or-nothing rule makes each task atomic: a task that fails is undone with its txg,
//! which is retried without it. Callers identify datasets by name; object numbers are
//! resolved inside the task from the open txg ([`dsl::write::lookup`]), never from a view
//! that may lag behind.

use crate::space::{Reserve, SpaceCheck};
use crate::txg::Spa;
use crate::writer::{DatasetWriter, PoolWriter};
use crate::{PoolError, Result};
use dmu::tx::DirtyObjset;
use dsl::write::{self as dslw, Found};
use std::sync::{Arc, Mutex};
use zap::write::{ZapCache, ZapVal};

/// Fills a new file system's objset (the ZPL's master node, root directory...): the layer
/// above the pool provides it.
pub type ObjsetInit = Arc<dyn Fn(&mut DirtyObjset, &mut ZapCache) -> Result<()> + Send + Sync>;

/// A pool property value as stored in the MOS `pool_props` ZAP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolPropValue {
    /// A string (stored NUL-terminated).
    Str(String),
    /// An index or number.
    Num(u64),
    /// `bootfs`: a dataset, stored as its object number.
    Dataset(String),
    /// Remove the entry (back to the default).
    Remove,
}

fn not_found(name: &str) -> PoolError {
    PoolError::NotFound(format!("cannot open '{name}': dataset does not exist"))
}

fn lookup(w: &mut PoolWriter, name: &str) -> Result<Option<Found>> {
    Ok(dslw::lookup(&w.mos, &mut w.mos_zaps, name)?)
}

fn must_find(w: &mut PoolWriter, name: &str) -> Result<Found> {
    lookup(w, name)?.ok_or_else(|| not_found(name))
}

/// The last component of a new file system's name, checked as `zfs create` checks it
/// (`dataset_namecheck`: letters, digits, `_-.:`).
pub fn check_new_name(name: &str) -> Result<(&str, &str)> {
    check_name(name, false)
}

/// Where `zfs receive -F` puts a full stream for an existing file system FS: `FS/%recv`
/// (OpenZFS's `recv_clone_name`); `%` keeps it out of every name a user can give.
pub const RECV_TMP: &str = "%recv";

/// How deep a dataset name may nest: OpenZFS refuses a name with this many `/` or more in
/// its dataset part (`zfs_max_dataset_nesting`, default 50, zfs_namecheck.c), so that the
/// recursive code in its kernel has a bounded stack. A tunable here too
/// ([`crate::tunables`]), so pools made where it was raised stay manageable.
pub fn max_dataset_nesting() -> usize {
    crate::tunables::max_dataset_nesting()
}

/// A dataset name is shorter than this (`ZFS_MAX_DATASET_NAME_LEN`, with its NUL).
pub const MAX_DATASET_NAME_LEN: usize = 256;

/// The nesting depth of a dataset, snapshot or bookmark name: its `/`s before any `@`/`#`.
pub fn nesting_depth(name: &str) -> usize {
    name.split(['@', '#']).next().unwrap_or("").matches('/').count()
}

/// Checks a new dataset name's length, characters and depth without creating anything
/// (`zfs create -n`); the error says what is wrong.
pub fn validate_new_name(name: &str) -> Result<()> {
    check_name(name, false).map(|_| ())
}

/// [`check_new_name`]; `hidden` also admits the leaf [`RECV_TMP`].
fn check_name(name: &str, hidden: bool) -> Result<(&str, &str)> {
    let parts = check_syntax(name, hidden)?;
    if nesting_depth(name) >= max_dataset_nesting() {
        return Err(PoolError::Invalid(format!(
            "cannot create '{name}': maximum name nesting depth exceeded"
        )));
    }
    Ok(parts)
}

/// A new dataset name's length and characters, split into parent and leaf. Its depth is
/// the caller's: a new dataset must be shallower than [`max_dataset_nesting`], a rename
/// must not get deeper than it.
fn check_syntax(name: &str, hidden: bool) -> Result<(&str, &str)> {
    let (parent, leaf) = name
        .rsplit_once('/')
        .ok_or_else(|| PoolError::Invalid(format!("cannot create '{name}': missing pool name")))?;
    if name.len() >= MAX_DATASET_NAME_LEN {
        return Err(PoolError::Invalid(format!("cannot create '{name}': name is too long")));
    }
    if hidden && leaf == RECV_TMP {
        return Ok((parent, leaf));
    }
    // zfs_namecheck's valid characters include the space; "." and ".." are no names.
    if leaf == "." || leaf == ".." {
        return Err(PoolError::Invalid(format!(
            "cannot create '{name}': invalid name: '{leaf}' is a reserved name"
        )));
    }
    if leaf.is_empty()
        || leaf.contains('@')
        || name.len() > 255
        || !leaf.chars().all(|c| c.is_ascii_alphanumeric() || "_-.: ".contains(c))
    {
        return Err(PoolError::Invalid(format!("cannot create '{name}': invalid character in name")));
    }
    Ok((parent, leaf))
}

/// The `$ORIGIN@$ORIGIN` snapshot: every new file system is a clone of it.
fn origin_snapshot(w: &mut PoolWriter) -> Result<Option<u64>> {
    let root_dir =
        w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").map_err(|e| PoolError::Invalid(e.to_string()))?;
    let Some(root_dir) = root_dir else { return Ok(None) };
    let child = dslw::dir_phys(&w.mos, root_dir)?.child_dir_zapobj;
    let Some(odir) =
        w.mos_zaps.lookup_u64(&w.mos, child, "$ORIGIN").map_err(|e| PoolError::Invalid(e.to_string()))?
    else {
        return Ok(None);
    };
    let head = dslw::dir_phys(&w.mos, odir)?.head_dataset_obj;
    Ok(Some(dslw::ds_phys(&w.mos, head)?.prev_snap_obj))
}

/// Is a snapshot (or bookmark) of directory `src_dir` taken in txg `txg` part of the history
/// of directory `dir`'s head: `dir` itself, or an origin reached through the clone chain
/// at or after `txg`?
fn is_before(w: &PoolWriter, dir: u64, src_dir: u64, txg: u64) -> Result<bool> {
    let (mut d, mut limit) = (dir, u64::MAX);
    for _ in 0..1024 {
        if d == src_dir {
            return Ok(txg <= limit);
        }
        let origin = dslw::dir_phys(&w.mos, d)?.origin_obj;
        if origin == 0 {
            return Ok(false);
        }
        let o = dslw::ds_phys(&w.mos, origin)?;
        (d, limit) = (o.dir_obj, o.creation_txg);
    }
    Err(PoolError::Invalid(format!("directory {dir}: clone chain too long")))
}

/// Re-reads the effective settings of the open datasets after a property changed: every
/// open one, since descendants inherit (a `compression` set on the pool's root applies to
/// the file systems already being written).
fn refresh_settings(w: &mut PoolWriter) -> Result<()> {
    let open: Vec<u64> = w.datasets.keys().copied().collect();
    for ds in open {
        let dir = dslw::ds_phys(&w.mos, ds)?.dir_obj;
        let s = w.dataset_settings(dir)?;
        if let Some(d) = w.datasets.get_mut(&ds) {
            d.policy = s.policy();
            d.recordsize = s.recordsize;
            d.atime = s.atime;
            d.readonly = s.readonly;
            d.xattr = s.xattr;
            d.zil.sync_mode = s.sync;
            d.os.set_dnode_slots(s.dnode_slots);
            d.os.set_cache_policy(s.primarycache);
            d.os.set_l2_policy(s.secondarycache);
        }
    }
    Ok(())
}

fn check_create(w: &mut PoolWriter, name: &str, props: &[(String, ZapVal)]) -> Result<Found> {
    check_create_as(w, name, props, false)
}

fn check_create_as(
    w: &mut PoolWriter,
    name: &str,
    props: &[(String, ZapVal)],
    hidden: bool,
) -> Result<Found> {
    let (parent, _) = check_name(name, hidden)?;
    if lookup(w, name)?.is_some() {
        return Err(PoolError::Exists(format!("cannot create '{name}': dataset already exists")));
    }
    let p = lookup(w, parent)?
        .ok_or_else(|| PoolError::NotFound(format!("cannot create '{name}': parent does not exist")))?;
    w.check_props_features(props)
        .map_err(|e| PoolError::Unsupported(format!("cannot create '{name}': {e}")))?;
    Ok(p)
}

/// Sets or removes one local property of the dataset `ds` in directory `dir`;
/// `refreservation` also moves the directory's space charge.
fn set_one_prop(w: &mut PoolWriter, dir: u64, ds: u64, k: &str, v: Option<ZapVal>) -> Result<()> {
    if (k == "refreservation" || k == "reservation") && !matches!(&v, None | Some(ZapVal { int_size: 8, .. }))
    {
        return Err(PoolError::Invalid(format!("'{k}' must be a number")));
    }
    let marker = format!("{k}{}", dsl::props::INHERIT_SUFFIX);
    match v {
        // zfs set: a local value, which also lifts an explicit inherit.
        Some(v) => {
            set_entry(w, ds, &marker, None)?;
            set_entry(w, ds, k, Some(v))
        }
        // zfs inherit: the local value goes; on a dataset with received properties a
        // marker keeps the received value from applying (dsl_prop_set_sync_impl,
        // ZPROP_SRC_INHERITED).
        None => {
            set_entry(w, ds, k, None)?;
            if has_entry(w, dir, dsl::props::HAS_RECVD)? {
                set_entry(w, ds, &marker, Some(ZapVal::u64(0)))?;
            }
            Ok(())
        }
    }
}

/// How far a received file system may reference more than the refquota of the one it
/// replaces: what one change can overshoot a refquota by. OpenZFS allows
/// `DMU_MAX_ACCESS` (64 MiB) times `spa_asize_inflation` because its estimates are
/// inflated allocation sizes; rzfs's quota checks count deflated bytes and let one change
/// through, never more than `DMU_MAX_ACCESS`, so that is its slack.
const RECV_REFQUOTA_SLACK: u64 = 64 << 20;

/// Refuses a `reservation` or `refreservation` of `n` bytes that would take more than the
/// space there is (ENOSPC), or exceed the `quota` (`refquota`) of the dataset
/// (`dsl_dir_set_reservation_check`, `dsl_dataset_set_refreservation_check`): what grows
/// is what the reservation takes beyond the space already used (the directory's for
/// `reservation`, the head's unique space for `refreservation`), and it must fit in what
/// the parent directory leaves (for `refreservation`, the dataset's own directory).
fn check_reservation(w: &mut PoolWriter, name: &str, f: &Found, k: &str, n: u64) -> Result<()> {
    let d = dslw::dir_phys(&w.mos, f.dir)?;
    let (used, old, room_dir, limit) = if k == "reservation" {
        (d.used_bytes, d.reserved, d.parent_obj, d.quota)
    } else {
        let h = crate::txg::head_space(w, f.ds)?;
        (h.unique, h.refreservation, f.dir, h.refquota)
    };
    let too_big = || {
        PoolError::NoSpace(format!("cannot set property for '{name}': size is greater than available space"))
    };
    if limit != 0 && n > limit {
        return Err(too_big());
    }
    let grows = used.max(n).saturating_sub(used.max(old));
    if grows == 0 {
        return Ok(());
    }
    let pool_avail = crate::txg::dsl_pool_avail(w)?;
    let room = if room_dir == 0 {
        pool_avail
    } else {
        let mos = &w.mos;
        dsl::quota::dir_available(room_dir, pool_avail, &mut |x| dslw::dir_phys(mos, x))?
    };
    if grows > room {
        return Err(too_big());
    }
    Ok(())
}

/// Sets or removes one entry of head dataset `ds`'s props ZAP (its directory's).
fn set_entry(w: &mut PoolWriter, ds: u64, k: &str, v: Option<ZapVal>) -> Result<()> {
    dslw::set_head_entry(&mut w.mos, &mut w.mos_zaps, ds, k, v)?;
    Ok(())
}

fn has_entry(w: &mut PoolWriter, dir: u64, k: &str) -> Result<bool> {
    let pz = dslw::dir_phys(&w.mos, dir)?.props_zapobj;
    Ok(pz != 0
        && w.mos_zaps
            .lookup(&w.mos, pz, k.as_bytes())
            .map_err(|e| PoolError::Invalid(e.to_string()))?
            .is_some())
}

/// The names of directory `dir`'s received values (`P$recvd` entries, `P` returned).
fn received_names(w: &mut PoolWriter, dir: u64) -> Result<Vec<String>> {
    let pz = dslw::dir_phys(&w.mos, dir)?.props_zapobj;
    if pz == 0 {
        return Ok(Vec::new());
    }
    let entries = w.mos_zaps.entries(&w.mos, pz).map_err(|e| PoolError::Invalid(e.to_string()))?;
    Ok(entries
        .iter()
        .filter_map(|(k, _)| {
            String::from_utf8_lossy(k).strip_suffix(dsl::props::RECVD_SUFFIX).map(str::to_string)
        })
        .collect())
}

impl Spa {
    /// `zfs create`: a new file system `name` (a clone of `$ORIGIN`) with local `props`, its
    /// objset filled by `init`. Returns its dataset object.
    pub fn create_filesystem(
        &self,
        name: &str,
        props: Vec<(String, ZapVal)>,
        init: ObjsetInit,
        now: u64,
    ) -> Result<u64> {
        self.create_dataset(name, ondisk::objset::DMU_OST_ZFS, props, init, now, false)
    }

    /// The file system (or volume, `os_type`) `HEAD/%recv` a full stream is received into
    /// when `zfs receive -F` overwrites the existing `head` ([`Spa::receive_swap`] ends it).
    pub fn create_receive_tmp(&self, head: &str, os_type: u64, now: u64) -> Result<String> {
        let name = format!("{head}/{RECV_TMP}");
        let empty: ObjsetInit = Arc::new(|_, _| Ok(()));
        self.create_dataset(&name, os_type, Vec::new(), empty, now, true)?;
        Ok(name)
    }

    /// The clone `HEAD/%recv` of `head`'s snapshot `from` an incremental stream is received
    /// into when `zfs receive -F` must discard changes (later snapshots, a modified head):
    /// until [`Spa::receive_swap`] ends it, `head` keeps all it had, so a stream that fails
    /// changes nothing (OpenZFS receives every incremental into such a clone).
    pub fn create_receive_clone(&self, head: &str, from: &str, now: u64) -> Result<String> {
        let name = format!("{head}/{RECV_TMP}");
        if !from.starts_with(&format!("{head}@")) {
            return Err(PoolError::Invalid(format!(
                "cannot receive: '{from}' is not a snapshot of '{head}'"
            )));
        }
        let (n, f) = (name.clone(), from.to_string());
        fn check(w: &mut PoolWriter, name: &str, from: &str) -> Result<(Found, Found)> {
            let parent = check_create_as(w, name, &[], true)?;
            Ok((parent, must_find(w, from)?))
        }
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| check(w, &name, from).map(|_| ()),
            move |w| {
                let (parent, snap) = check(w, &n, &f)?;
                let (_, leaf) = check_name(&n, true)?;
                let txg = w.txg;
                let dir = dslw::create_dir(&mut w.mos, &mut w.mos_zaps, Some(parent.dir), leaf, now)?;
                let ds = dslw::create_dataset(&mut w.mos, &mut w.mos_zaps, dir, Some(snap.ds), txg, now)?;
                w.limits_new_dir(dir)?;
                for feat in w.ds_features(snap.ds)? {
                    w.ds_activate(ds, feat)?;
                }
                Ok(())
            },
        )?;
        Ok(name)
    }

    /// `zfs create -V`: a new volume `name` (objset type `DMU_OST_ZVOL`), filled by `init`.
    /// A `refreservation` among `props` is charged as OpenZFS charges it.
    pub fn create_volume(
        &self,
        name: &str,
        props: Vec<(String, ZapVal)>,
        init: ObjsetInit,
        now: u64,
    ) -> Result<u64> {
        self.create_dataset(name, ondisk::objset::DMU_OST_ZVOL, props, init, now, false)
    }

    fn create_dataset(
        &self,
        name: &str,
        os_type: u64,
        props: Vec<(String, ZapVal)>,
        init: ObjsetInit,
        now: u64,
        hidden: bool,
    ) -> Result<u64> {
        let created = Arc::new(Mutex::new(0u64));
        let out = created.clone();
        let (n, p) = (name.to_string(), props.clone());
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| check_create_as(w, name, &props, hidden).map(|_| ()),
            move |w| {
                let parent = check_create_as(w, &n, &p, hidden)?;
                let (_, leaf) = check_name(&n, hidden)?;
                let txg = w.txg;
                let dir = dslw::create_dir(&mut w.mos, &mut w.mos_zaps, Some(parent.dir), leaf, now)?;
                let origin = origin_snapshot(w)?;
                let ds = dslw::create_dataset(&mut w.mos, &mut w.mos_zaps, dir, origin, txg, now)?;
                w.limits_new_dir(dir)?;
                for (k, v) in &p {
                    if k == "reservation" || k == "refreservation" {
                        let bytes = v.values.first().copied().unwrap_or(0);
                        check_reservation(w, &n, &Found { dir, ds }, k, bytes)?;
                    }
                    set_one_prop(w, dir, ds, k, Some(v.clone()))?;
                }
                w.activate_for_props(ds, &p)?;
                let s = w.dataset_settings(dir)?;
                let mut os = DirtyObjset::create(&w.reader, os_type);
                os.set_dnode_slots(s.dnode_slots);
                os.set_cache_policy(s.primarycache);
                os.set_l2_policy(s.secondarycache);
                let mut zaps = ZapCache::new();
                init(&mut os, &mut zaps)?;
                w.datasets.insert(
                    ds,
                    DatasetWriter {
                        os,
                        zaps,
                        policy: s.policy(),
                        recordsize: s.recordsize,
                        atime: s.atime,
                        readonly: s.readonly,
                        xattr: s.xattr,
                        resume: None,
                        zil: Default::default(),
                    },
                );
                *out.lock().unwrap_or_else(|e| e.into_inner()) = ds;
                Ok(())
            },
        )?;
        let ds = *created.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ds)
    }

    /// `zfs clone SNAPSHOT NAME`: a file system whose first state is the snapshot's; it
    /// inherits the snapshot's per-dataset features.
    pub fn clone_filesystem(
        &self,
        snapshot: &str,
        name: &str,
        props: Vec<(String, ZapVal)>,
        now: u64,
    ) -> Result<()> {
        fn check(
            w: &mut PoolWriter,
            snap: &str,
            name: &str,
            props: &[(String, ZapVal)],
        ) -> Result<(Found, Found)> {
            if !snap.contains('@') {
                return Err(PoolError::Invalid(format!("cannot clone '{snap}': not a snapshot")));
            }
            let s = must_find(w, snap)?;
            Ok((check_create(w, name, props)?, s))
        }
        let (s, n, p) = (snapshot.to_string(), name.to_string(), props.clone());
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| check(w, snapshot, name, &props).map(|_| ()),
            move |w| {
                let (parent, snap) = check(w, &s, &n, &p)?;
                let (_, leaf) = check_new_name(&n)?;
                let txg = w.txg;
                let dir = dslw::create_dir(&mut w.mos, &mut w.mos_zaps, Some(parent.dir), leaf, now)?;
                let ds = dslw::create_dataset(&mut w.mos, &mut w.mos_zaps, dir, Some(snap.ds), txg, now)?;
                w.limits_new_dir(dir)?;
                for f in w.ds_features(snap.ds)? {
                    w.ds_activate(ds, f)?;
                }
                for (k, v) in &p {
                    dslw::set_prop(&mut w.mos, &mut w.mos_zaps, dir, k, Some(v.clone()))?;
                }
                w.activate_for_props(ds, &p)?;
                Ok(())
            },
        )
    }

    /// `zfs snapshot [-o PROP=VALUE]... FS@SNAP...`: every snapshot in one txg, after the
    /// file systems' pending changes are written (so each holds its file system exactly as of
    /// that txg), each with the user properties `props`.
    pub fn snapshot(&self, names: &[String], props: Vec<(String, ZapVal)>, now: u64) -> Result<()> {
        fn check(w: &mut PoolWriter, names: &[String]) -> Result<Vec<(Found, String)>> {
            let mut out = Vec::new();
            for full in names {
                let (fs, snap) = full.split_once('@').ok_or_else(|| {
                    PoolError::Invalid(format!("cannot create snapshot '{full}': missing '@'"))
                })?;
                if full.len() >= MAX_DATASET_NAME_LEN {
                    return Err(PoolError::Invalid(format!(
                        "cannot create snapshot '{full}': name is too long"
                    )));
                }
                if snap.is_empty() || snap.contains(['@', '/']) {
                    return Err(PoolError::Invalid(format!("cannot create snapshot '{full}': invalid name")));
                }
                // zfs_component_namecheck: letters, digits and `-_.: `.
                if let Some(c) = snap.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_.: ".contains(*c))) {
                    return Err(PoolError::Invalid(format!(
                        "cannot create snapshot '{full}': invalid character '{c}' in name"
                    )));
                }
                let f = lookup(w, fs)?.ok_or_else(|| {
                    PoolError::NotFound(format!("cannot create snapshot '{full}': dataset does not exist"))
                })?;
                if lookup(w, full)?.is_some() {
                    return Err(PoolError::Exists(format!(
                        "cannot create snapshot '{full}': dataset already exists"
                    )));
                }
                out.push((f, snap.to_string()));
            }
            Ok(out)
        }
        let n = names.to_vec();
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| check(w, names).map(|_| ()),
            move |w| {
                let txg = w.txg;
                for (f, snap) in check(w, &n)? {
                    w.zil_before_snapshot(f.ds)?;
                    let s = dslw::snapshot(&mut w.mos, &mut w.mos_zaps, f.ds, &snap, txg, now)?;
                    for (k, v) in &props {
                        dslw::set_snapshot_prop(&mut w.mos, &mut w.mos_zaps, s, k, Some(v.clone()))?;
                    }
                    w.scan.ds_snapshotted(f.ds, s);
                    w.snapshots_changed(f.ds)?;
                    for feat in w.ds_features(f.ds)? {
                        w.ds_activate(s, feat)?;
                    }
                }
                Ok(())
            },
        )
    }

    /// `zfs rename OLD NEW` of a file system or volume (moved under another parent of the
    /// same pool if NEW says so), or of snapshots: `FS@A` to `FS@B`, with `recursive` the
    /// `@A` of every descendant too (`names`: the snapshots, found by the caller). One txg.
    pub fn rename(&self, old: &str, new: &str, snapshots: &[String]) -> Result<()> {
        let fail = |m: String| PoolError::Invalid(format!("cannot rename '{old}': {m}"));
        if let (Some((ofs, osnap)), Some((nfs, nsnap))) = (old.split_once('@'), new.split_once('@')) {
            if ofs != nfs {
                return Err(fail("snapshots must be part of same dataset".into()));
            }
            if nsnap.is_empty() || nsnap.contains(['@', '/']) || new.len() > 255 {
                return Err(fail(format!("invalid snapshot name '{new}'")));
            }
            let (osnap, nsnap) = (format!("@{osnap}"), format!("@{nsnap}"));
            let list = snapshots.to_vec();
            let check = move |w: &mut PoolWriter| -> Result<Vec<(Found, String, String)>> {
                list.iter()
                    .map(|n| {
                        let f = must_find(w, n)?;
                        let base = n.strip_suffix(&osnap).unwrap_or(n).to_string();
                        if lookup(w, &format!("{base}{nsnap}"))?.is_some() {
                            return Err(PoolError::Exists(format!(
                                "cannot rename to '{base}{nsnap}': dataset already exists"
                            )));
                        }
                        Ok((f, osnap[1..].to_string(), nsnap[1..].to_string()))
                    })
                    .collect()
            };
            let check2 = check.clone();
            return self.sync_task(
                SpaceCheck::Reserved,
                Reserve::Meta,
                move |w| check(w).map(|_| ()),
                move |w| {
                    for (f, o, n) in check2(w)? {
                        let head = dslw::dir_phys(&w.mos, f.dir)?.head_dataset_obj;
                        dslw::rename_snapshot(&mut w.mos, &mut w.mos_zaps, head, f.ds, &o, &n)?;
                        w.snapshots_changed(head)?;
                    }
                    Ok(())
                },
            );
        }
        if old.contains('@') || new.contains('@') {
            return Err(fail("snapshots can only be renamed to snapshots".into()));
        }
        if old.split('/').next() != new.split('/').next() {
            return Err(fail("datasets must be within same pool".into()));
        }
        let (parent, leaf) = check_syntax(new, false).map_err(|e| match e {
            PoolError::Invalid(m) if m.ends_with("too long") => fail("dataset name is too long".into()),
            _ => fail(format!("invalid name '{new}'")),
        })?;
        let (o, p, l) = (old.to_string(), parent.to_string(), leaf.to_string());
        let leaf = l.clone();
        let char_delta = new.len() as isize - old.len() as isize;
        let nest_delta = nesting_depth(new) as isize - nesting_depth(old) as isize;
        let max_nesting = max_dataset_nesting() as isize;
        let check = move |w: &mut PoolWriter| -> Result<(Found, Found)> {
            let f = must_find(w, &o)?;
            // A longer or deeper name must leave every name below it valid, snapshots too
            // (`dsl_valid_rename`); a name already too deep may still get shallower.
            if char_delta > 0 || nest_delta > 0 {
                for n in dslw::subtree_names(&w.mos, &mut w.mos_zaps, f.dir, &o)? {
                    let too_long = n.len() as isize + char_delta >= MAX_DATASET_NAME_LEN as isize;
                    let too_deep = nest_delta > 0 && nesting_depth(&n) as isize + nest_delta >= max_nesting;
                    if too_long || too_deep {
                        return Err(PoolError::Invalid(format!(
                            "cannot rename '{o}': dataset name is too long ('{n}' would be {})",
                            if too_long { "too long" } else { "nested too deep" }
                        )));
                    }
                }
            }
            let np = lookup(w, &p)?.ok_or_else(|| {
                PoolError::NotFound(format!("cannot rename '{o}': parent '{p}' does not exist"))
            })?;
            if lookup(w, &format!("{p}/{l}"))?.is_some() {
                return Err(PoolError::Exists(format!("cannot rename to '{p}/{l}': dataset already exists")));
            }
            Ok((f, np))
        };
        let check2 = check.clone();
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            move |w| check(w).map(|_| ()),
            move |w| {
                let (f, np) = check2(w)?;
                if f.dir != np.dir {
                    w.limits_before_rename(f.dir)?;
                }
                dslw::rename_dir(&mut w.mos, &mut w.mos_zaps, f.dir, np.dir, &leaf)?;
                Ok(())
            },
        )
    }

    /// `zfs hold TAG SNAP...` (`now`: the hold's timestamp), all in one txg.
    pub fn hold(&self, names: &[String], tag: &str, now: u64) -> Result<()> {
        fn check(w: &mut PoolWriter, names: &[String], tag: &str) -> Result<Vec<Found>> {
            if tag.is_empty() || tag.len() >= 256 {
                return Err(PoolError::Invalid(format!("invalid hold tag '{tag}'")));
            }
            names
                .iter()
                .map(|n| {
                    if !n.contains('@') {
                        return Err(PoolError::Invalid(format!("cannot hold '{n}': not a snapshot")));
                    }
                    must_find(w, n)
                })
                .collect()
        }
        let (n, t) = (names.to_vec(), tag.to_string());
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| check(w, names, tag).map(|_| ()),
            move |w| {
                for (f, name) in check(w, &n, &t)?.into_iter().zip(&n) {
                    dslw::hold(&mut w.mos, &mut w.mos_zaps, f.ds, &t, now)
                        .map_err(|e| PoolError::Invalid(format!("cannot hold snapshot '{name}': {e}")))?;
                }
                Ok(())
            },
        )
    }

    /// `zfs release TAG SNAP...`, in one txg; a snapshot marked `defer_destroy` that nothing
    /// holds any more is destroyed with it (`dsl_dataset_user_release_sync_one`).
    pub fn release(&self, names: &[String], tag: &str) -> Result<()> {
        fn check(w: &mut PoolWriter, names: &[String]) -> Result<Vec<Found>> {
            names.iter().map(|n| must_find(w, n)).collect()
        }
        let (n, t) = (names.to_vec(), tag.to_string());
        self.sync_task(
            SpaceCheck::ExtraReserved,
            Reserve::Meta,
            |w| check(w, names).map(|_| ()),
            move |w| {
                for (f, name) in check(w, &n)?.into_iter().zip(&n) {
                    let left = dslw::release(&mut w.mos, &mut w.mos_zaps, f.ds, &t).map_err(|e| {
                        PoolError::Invalid(format!("cannot release hold from snapshot '{name}': {e}"))
                    })?;
                    if left == 0 {
                        w.finish_deferred_destroy(f.ds)?;
                    }
                }
                Ok(())
            },
        )
    }

    /// `zfs set` (`Some`) or `zfs inherit` (`None`) of properties of dataset `name`.
    pub fn set_props(&self, name: &str, props: Vec<(String, Option<ZapVal>)>) -> Result<()> {
        fn check(w: &mut PoolWriter, name: &str, props: &[(String, Option<ZapVal>)]) -> Result<Found> {
            let f = must_find(w, name)?;
            // Snapshots take user properties only (libzfs `zfs_valid_proplist`).
            if name.contains('@') && !props.iter().all(|(k, _)| dsl::props::is_user_prop(k)) {
                return Err(PoolError::Invalid(format!(
                    "cannot set property for '{name}': this property can not be modified for snapshots"
                )));
            }
            let set: Vec<(String, ZapVal)> =
                props.iter().filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v))).collect();
            w.check_props_features(&set)
                .map_err(|e| PoolError::Unsupported(format!("cannot set property for '{name}': {e}")))?;
            // A quota below what is already used would make the dataset unwritable at once
            // (`dsl_dir_set_quota_check`, `dsl_dataset_set_refquota_check`).
            for (k, v) in &set {
                let n = v.values.first().copied().unwrap_or(0);
                if k == "reservation" || k == "refreservation" {
                    check_reservation(w, name, &f, k, n)?;
                    continue;
                }
                let floor = match k.as_str() {
                    // Nor below its reservation (`dsl_dir_set_quota_check`).
                    "quota" => {
                        let d = dslw::dir_phys(&w.mos, f.dir)?;
                        d.used_bytes.max(d.reserved)
                    }
                    "refquota" => dslw::ds_phys(&w.mos, f.ds)?.referenced_bytes.max(dslw::head_reserved(
                        &w.mos,
                        &mut w.mos_zaps,
                        f.ds,
                    )?),
                    _ => continue,
                };
                if n != 0 && n < floor {
                    return Err(PoolError::NoSpace(format!(
                        "cannot set property for '{name}': size is less than current used or reserved space"
                    )));
                }
            }
            Ok(f)
        }
        let (n, p) = (name.to_string(), props.clone());
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| check(w, name, &props).map(|_| ()),
            move |w| {
                let f = check(w, &n, &p)?;
                for (k, v) in &p {
                    if n.contains('@') {
                        dslw::set_snapshot_prop(&mut w.mos, &mut w.mos_zaps, f.ds, k, v.clone())?;
                    } else {
                        set_one_prop(w, f.dir, f.ds, k, v.clone())?;
                    }
                }
                let set: Vec<(String, ZapVal)> =
                    p.iter().filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v))).collect();
                w.activate_for_props(f.ds, &set)?;
                refresh_settings(w)
            },
        )
    }

    /// The properties a `zfs receive` brings for file system (or snapshot) `name`, stored as
    /// received values (`P$recvd`) beside the local ones, which keep priority. With
    /// `replace`, received values not in `props` are removed first (a stream with
    /// properties replaces the set, as `zfs_ioc_recv` clears the old ones). `inherit`:
    /// properties to hide behind an explicit inherit (`receive -x`, and `-o` on the
    /// children of a replication stream). One txg.
    ///
    /// A value the pool cannot hold (one needing a feature the pool has not enabled, such
    /// as `recordsize=1M` without large_blocks) is left out and returned with the reason:
    /// OpenZFS's receive sets the others and warns of it ("cannot receive recordsize
    /// property on ..."), the data is received all the same.
    pub fn set_received_props(
        &self,
        name: &str,
        props: Vec<(String, ZapVal)>,
        replace: bool,
        inherit: Vec<String>,
    ) -> Result<Vec<(String, String)>> {
        let rejected: Vec<(String, String)> = self.read(|w| {
            props
                .iter()
                .filter_map(|(k, v)| {
                    w.check_props_features(&[(k.clone(), v.clone())])
                        .err()
                        .map(|e| (k.clone(), e.to_string()))
                })
                .collect()
        });
        let props: Vec<(String, ZapVal)> =
            props.into_iter().filter(|(k, _)| !rejected.iter().any(|(r, _)| r == k)).collect();
        let (n, p, x) = (name.to_string(), props.clone(), inherit.clone());
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| {
                must_find(w, name)?;
                w.check_props_features(&props).map_err(|e| {
                    PoolError::Unsupported(format!("cannot receive properties of '{name}': {e}"))
                })
            },
            move |w| {
                let f = must_find(w, &n)?;
                let recvd = |k: &str| format!("{k}{}", dsl::props::RECVD_SUFFIX);
                if n.contains('@') {
                    for (k, v) in &p {
                        dslw::set_snapshot_prop(
                            &mut w.mos,
                            &mut w.mos_zaps,
                            f.ds,
                            &recvd(k),
                            Some(v.clone()),
                        )?;
                    }
                    return Ok(());
                }
                if replace {
                    for old in received_names(w, f.dir)? {
                        if !p.iter().any(|(k, _)| *k == old) {
                            set_entry(w, f.ds, &recvd(&old), None)?;
                        }
                    }
                }
                set_entry(w, f.ds, dsl::props::HAS_RECVD, Some(ZapVal::u64(0)))?;
                for (k, v) in &p {
                    set_entry(w, f.ds, &recvd(k), Some(v.clone()))?;
                }
                for k in &x {
                    if !has_entry(w, f.dir, k)? {
                        set_entry(
                            w,
                            f.ds,
                            &format!("{k}{}", dsl::props::INHERIT_SUFFIX),
                            Some(ZapVal::u64(0)),
                        )?;
                    }
                }
                w.activate_for_props(f.ds, &p)?;
                refresh_settings(w)
            },
        )?;
        Ok(rejected)
    }

    /// Puts entries of file system `name`'s props ZAP back as they were: each raw entry
    /// (a value, `P$inherit`, `P$recvd`) set to what it held or removed (`None`). A receive
    /// that fails undoes its `-o`/`-x` changes with it, as `zfs_ioc_recv_impl` restores
    /// its `origprops`.
    pub fn restore_prop_entries(&self, name: &str, entries: Vec<(String, Option<ZapVal>)>) -> Result<()> {
        let n = name.to_string();
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| must_find(w, name).map(|_| ()),
            move |w| {
                let f = must_find(w, &n)?;
                for (k, v) in &entries {
                    set_entry(w, f.ds, k, v.clone())?;
                }
                refresh_settings(w)
            },
        )
    }

    /// `zfs inherit -S PROP NAME`: the local value and any explicit inherit go, so the
    /// received value (if any) applies again (ZPROP_SRC_NONE).
    pub fn revert_to_received(&self, name: &str, prop: &str) -> Result<()> {
        let (n, k) = (name.to_string(), prop.to_string());
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| must_find(w, name).map(|_| ()),
            move |w| {
                let f = must_find(w, &n)?;
                if n.contains('@') {
                    return dslw::set_snapshot_prop(&mut w.mos, &mut w.mos_zaps, f.ds, &k, None)
                        .map_err(Into::into);
                }
                set_entry(w, f.ds, &k, None)?;
                set_entry(w, f.ds, &format!("{k}{}", dsl::props::INHERIT_SUFFIX), None)?;
                refresh_settings(w)
            },
        )
    }

    /// `zfs destroy` of `names` (snapshots and file systems, in the order given: deepest and
    /// snapshots first), all in one txg. Mounted file systems must be unmounted first.
    pub fn destroy_datasets(&self, names: &[String]) -> Result<()> {
        self.destroy_datasets_defer(names, false)
    }

    /// [`Spa::destroy_datasets`]; with `defer` (`zfs destroy -d`), snapshots that clones or
    /// holds keep are marked for deferred destruction instead of refused.
    pub fn destroy_datasets_defer(&self, names: &[String], defer: bool) -> Result<()> {
        fn check(w: &mut PoolWriter, names: &[String]) -> Result<Vec<(String, Found)>> {
            names.iter().map(|n| Ok((n.clone(), must_find(w, n)?))).collect()
        }
        let n = names.to_vec();
        self.sync_task(
            SpaceCheck::ExtraReserved,
            Reserve::Meta,
            |w| check(w, names).map(|_| ()),
            move |w| {
                for (name, f) in check(w, &n)? {
                    let r = match (name.contains('@'), defer) {
                        (true, true) => w.defer_destroy_snapshot(f.ds).map(|_| ()),
                        (true, false) => w.destroy_snapshot(f.ds),
                        (false, _) => w.destroy_head(f.ds),
                    };
                    r.map_err(|e| match e {
                        PoolError::Unsupported(m) => {
                            PoolError::Unsupported(format!("cannot destroy '{name}': {m}"))
                        }
                        e => PoolError::Invalid(format!("cannot destroy '{name}': {e}")),
                    })?;
                }
                Ok(())
            },
        )
    }

    /// The end of `zfs receive`: snapshot `name` (FS@SNAP) of the received file system,
    /// after its data is written, carrying the sender's snapshot guid and creation time (an
    /// incremental stream names its source by that guid; OpenZFS `dmu_recv_end_sync` sets
    /// both the same way). The file system's open writer is dropped with the sync, so the
    /// next user starts from what was received.
    pub fn snapshot_received(&self, name: &str, guid: u64, creation_time: u64) -> Result<()> {
        let (fs, snap) = name
            .split_once('@')
            .ok_or_else(|| PoolError::Invalid(format!("cannot create snapshot '{name}': missing '@'")))?;
        let (f, sn) = (fs.to_string(), snap.to_string());
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| must_find(w, fs).map(|_| ()),
            move |w| {
                let head = must_find(w, &f)?;
                let txg = w.txg;
                w.clear_resume(head.ds)?;
                let mut hp = dslw::ds_phys(&w.mos, head.ds)?;
                if hp.flags & ondisk::dsl::DS_FLAG_INCONSISTENT != 0 {
                    hp.flags &= !ondisk::dsl::DS_FLAG_INCONSISTENT;
                    dslw::set_ds_phys(&mut w.mos, head.ds, &hp)?;
                }
                w.zil_before_snapshot(head.ds)?;
                let snap = dslw::snapshot(&mut w.mos, &mut w.mos_zaps, head.ds, &sn, txg, creation_time)?;
                let mut p = dslw::ds_phys(&w.mos, snap)?;
                p.guid = guid;
                dslw::set_ds_phys(&mut w.mos, snap, &p)?;
                w.scan.ds_snapshotted(head.ds, snap);
                w.snapshots_changed(head.ds)?;
                for feat in w.ds_features(head.ds)? {
                    w.ds_activate(snap, feat)?;
                }
                w.remove_dataset_writer(head.ds)?;
                Ok(())
            },
        )
    }

    /// The end of `zfs receive -F` over the existing file system `head`, received into
    /// `tmp` ([`Spa::create_receive_tmp`] for a full stream, [`Spa::create_receive_clone`]
    /// for an incremental one): in one txg `head`'s snapshots after `tmp`'s origin are
    /// destroyed (incremental), the two heads exchange contents
    /// (`dsl::destroy::swap_heads`), `tmp` (now the old contents) is destroyed and `head`
    /// gets the received snapshot `snap` (HEAD@NAME) with the sender's guid and creation time.
    /// A crash before this txg leaves `head` as it was (and `tmp` half-received).
    pub fn receive_swap(
        &self,
        head: &str,
        tmp: &str,
        snap: &str,
        guid: u64,
        creation_time: u64,
    ) -> Result<()> {
        let short = snap.rsplit_once('@').map_or(snap, |(_, s)| s);
        let (h, t, sn) = (head.to_string(), tmp.to_string(), short.to_string());
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| must_find(w, head).and_then(|_| must_find(w, tmp)).map(|_| ()),
            move |w| {
                let hf = must_find(w, &h)?;
                let tf = must_find(w, &t)?;
                let txg = w.txg;
                // What was received may not be far over head's refquota: by more than one
                // change can overshoot it (`dsl_dataset_clone_swap_check_impl`), so a
                // receive does not override a refquota.
                let refquota = crate::txg::head_space(w, hf.ds)?.refquota;
                let refd = dslw::ds_phys(&w.mos, tf.ds)?.referenced_bytes;
                if refquota != 0 && refd > refquota.saturating_add(RECV_REFQUOTA_SLACK) {
                    return Err(PoolError::QuotaExceeded(format!(
                        "'{h}' would reference {refd} bytes, over its refquota of {refquota}"
                    )));
                }
                w.remove_dataset_writer(hf.ds)?;
                w.remove_dataset_writer(tf.ds)?;
                // An incremental into a clone of one of head's snapshots: the snapshots taken
                // after it go first, newest first (receive -F's "later" snapshots).
                let origin = dslw::dir_phys(&w.mos, dslw::ds_phys(&w.mos, tf.ds)?.dir_obj)?.origin_obj;
                if origin != 0 && dslw::ds_phys(&w.mos, origin)?.dir_obj == hf.dir {
                    let mut cur = dslw::ds_phys(&w.mos, hf.ds)?.prev_snap_obj;
                    while cur != origin {
                        if cur == 0 {
                            return Err(PoolError::Invalid(format!(
                                "cannot receive: the source snapshot is not in the history of '{h}'"
                            )));
                        }
                        let prev = dslw::ds_phys(&w.mos, cur)?.prev_snap_obj;
                        w.destroy_snapshot(cur)?;
                        cur = prev;
                    }
                }
                w.clear_resume(tf.ds)?;
                w.clear_resume(hf.ds)?;
                dsl::destroy::swap_heads(&mut w.mos, &mut w.mos_zaps, hf.ds, tf.ds).map_err(|e| match e {
                    dsl::DslError::Unsupported(m) => {
                        PoolError::Unsupported(format!("cannot receive new filesystem stream: {m}"))
                    }
                    e => PoolError::Invalid(e.to_string()),
                })?;
                for f in w.ds_features(tf.ds)? {
                    w.ds_activate(hf.ds, f)?;
                }
                w.destroy_head(tf.ds)?;
                w.zil_before_snapshot(hf.ds)?;
                let snap = dslw::snapshot(&mut w.mos, &mut w.mos_zaps, hf.ds, &sn, txg, creation_time)?;
                let mut p = dslw::ds_phys(&w.mos, snap)?;
                p.guid = guid;
                dslw::set_ds_phys(&mut w.mos, snap, &p)?;
                w.scan.ds_snapshotted(hf.ds, snap);
                w.snapshots_changed(hf.ds)?;
                for feat in w.ds_features(hf.ds)? {
                    w.ds_activate(snap, feat)?;
                }
                Ok(())
            },
        )
    }

    /// Writes what dataset `name` has pending and drops its open writer (with its caches of
    /// parsed objects), so the next change starts from the dataset as it is on disk: for
    /// changes below the ZPL such as a receive.
    pub fn reset_dataset_writer(&self, name: &str) -> Result<()> {
        let n = name.to_string();
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::None,
            |w| must_find(w, name).map(|_| ()),
            move |w| {
                let f = must_find(w, &n)?;
                w.remove_dataset_writer(f.ds)?;
                Ok(())
            },
        )
    }

    /// `zfs bookmark SNAPSHOT|BOOKMARK FS#NAME`: a bookmark of the snapshot (or a copy of
    /// the bookmark) in the same file system, or in a clone whose history holds it.
    pub fn bookmark(&self, source: &str, new: &str) -> Result<()> {
        fn check(w: &mut PoolWriter, source: &str, new: &str) -> Result<(Found, String, [u64; 3])> {
            let (fs, name) = new
                .split_once('#')
                .ok_or_else(|| PoolError::Invalid(format!("cannot create bookmark '{new}': missing '#'")))?;
            if name.is_empty() || name.len() > 255 || name.contains(['@', '#', '/']) {
                return Err(PoolError::Invalid(format!("cannot create bookmark '{new}': invalid name")));
            }
            let src_fs = source.split(['@', '#']).next().unwrap_or(source);
            let head = must_find(w, fs)?;
            let src_head = must_find(w, src_fs)?;
            let phys = if source.contains('@') {
                let s = must_find(w, source)?;
                let p = dslw::ds_phys(&w.mos, s.ds)?;
                [p.guid, p.creation_txg, p.creation_time]
            } else if let Some((_, b)) = source.split_once('#') {
                let obj = w
                    .mos_zaps
                    .lookup_u64(&w.mos, src_head.ds, dsl::DS_FIELD_BOOKMARK_NAMES)
                    .ok()
                    .flatten()
                    .ok_or_else(|| not_found(source))?;
                let v = w
                    .mos_zaps
                    .lookup(&w.mos, obj, b.as_bytes())
                    .map_err(|e| PoolError::Invalid(e.to_string()))?
                    .ok_or_else(|| not_found(source))?;
                match v.values[..] {
                    [g, t, c, ..] => [g, t, c],
                    _ => return Err(PoolError::Invalid(format!("bookmark '{source}' is damaged"))),
                }
            } else {
                return Err(PoolError::Invalid(format!(
                    "cannot create bookmark '{new}': '{source}' is not a snapshot or bookmark"
                )));
            };
            // The source must be in the new bookmark's file system's history: its own, or
            // through its origins (a clone's), no later than where it branched off
            // (`dsl_dataset_is_before`).
            if !is_before(w, head.dir, src_head.dir, phys[1])? {
                return Err(PoolError::Invalid(format!(
                    "cannot create bookmark '{new}': source is not an ancestor of the new bookmark's dataset"
                )));
            }
            Ok((head, name.to_string(), phys))
        }
        let (s, n) = (source.to_string(), new.to_string());
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| check(w, source, new).map(|_| ()),
            move |w| {
                let (head, name, [guid, txg, time]) = check(w, &s, &n)?;
                w.create_bookmark(head.ds, &name, guid, txg, time).map_err(|e| match e {
                    PoolError::Exists(m) => PoolError::Exists(format!("cannot create bookmark '{n}': {m}")),
                    e => e,
                })
            },
        )
    }

    /// `zfs destroy FS#NAME`.
    pub fn destroy_bookmark(&self, name: &str) -> Result<()> {
        let (fs, bm) = name
            .split_once('#')
            .ok_or_else(|| PoolError::Invalid(format!("cannot destroy '{name}': not a bookmark")))?;
        let (f, b) = (fs.to_string(), bm.to_string());
        self.sync_task(
            SpaceCheck::ExtraReserved,
            Reserve::Meta,
            |w| must_find(w, fs).map(|_| ()),
            move |w| {
                let head = must_find(w, &f)?;
                w.destroy_bookmark(head.ds, &b)
            },
        )
    }

    /// Starts the resume state of a resumable receive (`zfs receive -s`) into head dataset
    /// `name` (OpenZFS `dmu_recv_begin_sync`): the stream's guids and name, the position
    /// (object 1, offset 0) and the stream features a resumed send must use. The position
    /// then advances with every sync of the dataset ([`DatasetWriter::resume`]).
    pub fn begin_resumable(
        &self,
        name: &str,
        fromguid: u64,
        toguid: u64,
        toname: &str,
        features: u64,
    ) -> Result<()> {
        use crate::writer::*;
        let (n, t) = (name.to_string(), toname.to_string());
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| must_find(w, name).map(|_| ()),
            move |w| {
                let f = must_find(w, &n)?;
                w.zapify(f.ds)?;
                let bad = |e: zap::ZapError| PoolError::Invalid(e.to_string());
                let set = |w: &mut PoolWriter, k: &str, v: ZapVal| {
                    w.mos_zaps.update(&w.mos, f.ds, k.as_bytes(), v).map_err(bad)
                };
                if fromguid != 0 {
                    set(w, RESUME_FROMGUID, ZapVal::u64(fromguid))?;
                }
                set(w, RESUME_TOGUID, ZapVal::u64(toguid))?;
                set(w, RESUME_TONAME, ZapVal::string(&t))?;
                set(w, RESUME_OBJECT, ZapVal::u64(1))?;
                set(w, RESUME_OFFSET, ZapVal::u64(0))?;
                set(w, RESUME_BYTES, ZapVal::u64(0))?;
                // Bits of the stream features (`DMU_BACKUP_FEATURE_*`) the resumed send needs.
                for (bit, k) in
                    [(1u64 << 19, RESUME_LARGEBLOCK), (1 << 16, RESUME_EMBEDOK), (1 << 22, RESUME_COMPRESSOK)]
                {
                    if features & bit != 0 {
                        set(w, k, ZapVal::u64(1))?;
                    }
                }
                Ok(())
            },
        )
    }

    /// `zfs receive -A FS`: gives up the partial state a resumable receive kept: the file
    /// system is destroyed when it has no snapshot of its own (a full receive), rolled back
    /// to its latest snapshot otherwise.
    pub fn abort_resumable(&self, name: &str, has_snapshots: bool) -> Result<()> {
        self.undo_inconsistent(&[(name.to_string(), has_snapshots)]).pop().map_or(Ok(()), |(_, r)| r)
    }

    /// Marks head dataset `name` inconsistent (`DS_FLAG_INCONSISTENT`) while a receive
    /// writes into it: a receive cut short by a crash is then undone at the next import
    /// ([`Spa::undo_inconsistent`]) instead of leaving part of a stream looking like a file
    /// system. The flag goes with the snapshot that ends the receive
    /// ([`Spa::snapshot_received`]) or with a rollback.
    pub fn set_inconsistent(&self, name: &str) -> Result<()> {
        let n = name.to_string();
        self.sync_task(
            SpaceCheck::Normal,
            Reserve::Meta,
            |w| must_find(w, name).map(|_| ()),
            move |w| {
                let f = must_find(w, &n)?;
                let mut p = dslw::ds_phys(&w.mos, f.ds)?;
                p.flags |= ondisk::dsl::DS_FLAG_INCONSISTENT;
                dslw::set_ds_phys(&mut w.mos, f.ds, &p)?;
                Ok(())
            },
        )
    }

    /// At import: every head dataset left inconsistent by an interrupted receive is undone,
    /// as OpenZFS's `dsl_destroy_inconsistent` does for its receive datasets: destroyed when
    /// it has no snapshot of its own (a full receive), rolled back to its latest snapshot
    /// otherwise (an incremental one). Returns the names handled, each with what was done.
    pub fn undo_inconsistent(&self, datasets: &[(String, bool)]) -> Vec<(String, Result<()>)> {
        let mut out = Vec::new();
        for (name, has_snapshots) in datasets {
            let r = if *has_snapshots {
                let n = name.clone();
                self.sync_task(
                    SpaceCheck::ExtraReserved,
                    Reserve::Meta,
                    |w| must_find(w, name).map(|_| ()),
                    move |w| {
                        let f = must_find(w, &n)?;
                        w.rollback_head(f.ds)
                    },
                )
            } else {
                self.destroy_datasets(std::slice::from_ref(name))
            };
            out.push((name.clone(), r));
        }
        out
    }

    /// `zfs rollback [-r] FS@SNAP`: the snapshots in `later` (the ones taken after SNAP,
    /// newest first; `-r`) are destroyed and FS returns to SNAP's contents, all in one txg.
    /// Refused, changing nothing, unless SNAP is then FS's latest snapshot.
    pub fn rollback(&self, snapshot: &str, later: &[String]) -> Result<()> {
        fn check(w: &mut PoolWriter, snapshot: &str, later: &[String]) -> Result<(Found, Vec<Found>)> {
            let (fs, _) = snapshot
                .split_once('@')
                .ok_or_else(|| PoolError::Invalid(format!("cannot rollback '{snapshot}': not a snapshot")))?;
            let snap = must_find(w, snapshot)?;
            let head = must_find(w, fs)?;
            let gone = later.iter().map(|n| must_find(w, n)).collect::<Result<Vec<_>>>()?;
            // Walking back from the head over the snapshots to destroy must reach SNAP.
            let mut cur = dslw::ds_phys(&w.mos, head.ds)?.prev_snap_obj;
            for g in &gone {
                if cur != g.ds {
                    return Err(PoolError::Invalid(format!(
                        "cannot rollback to '{snapshot}': more recent snapshots or bookmarks exist\nuse '-r' to force deletion of the following snapshots and bookmarks:\n{}",
                        later.join("\n")
                    )));
                }
                cur = dslw::ds_phys(&w.mos, g.ds)?.prev_snap_obj;
            }
            if cur != snap.ds {
                return Err(PoolError::Invalid(format!(
                    "cannot rollback to '{snapshot}': more recent snapshots or bookmarks exist"
                )));
            }
            Ok((head, gone))
        }
        let (s, l) = (snapshot.to_string(), later.to_vec());
        self.sync_task(
            SpaceCheck::ExtraReserved,
            Reserve::Meta,
            |w| check(w, snapshot, later).map(|_| ()),
            move |w| {
                let (head, gone) = check(w, &s, &l)?;
                for (g, name) in gone.iter().zip(&l) {
                    w.destroy_snapshot(g.ds).map_err(|e| match e {
                        PoolError::Unsupported(m) => {
                            PoolError::Unsupported(format!("cannot destroy '{name}': {m}"))
                        }
                        e => e,
                    })?;
                }
                w.rollback_head(head.ds).map_err(|e| match e {
                    PoolError::Unsupported(m) => {
                        PoolError::Unsupported(format!("cannot rollback to '{s}': {m}"))
                    }
                    PoolError::QuotaExceeded(m) => {
                        PoolError::QuotaExceeded(format!("cannot rollback to '{s}': {m}"))
                    }
                    e => e,
                })
            },
        )
    }

    /// `zfs promote NAME`: clone `name` takes over its origin snapshot and the snapshots
    /// before it, and the file system it was cloned from becomes its clone
    /// (`dsl_dataset_promote`; see `dsl::promote`). `origin` is the clone's origin
    /// snapshot's name, for messages. One sync task: all of it or nothing.
    pub fn promote(&self, name: &str, origin: &str) -> Result<()> {
        fn check(w: &mut PoolWriter, name: &str, origin: &str) -> Result<dsl::promote::Promotion> {
            use dsl::promote::Refusal;
            let f = must_find(w, name)?;
            let pool_origin = origin_snapshot(w)?;
            let why = match dsl::promote::plan(&w.mos, &mut w.mos_zaps, f.ds, pool_origin)? {
                Ok(p) => {
                    let o = dslw::ds_phys(&w.mos, p.origin)?;
                    let moving = w.bookmarks_through(p.origin_head, o.creation_txg)?;
                    let mut clash = Vec::new();
                    for (bm, long) in &moving {
                        if *long {
                            return Err(PoolError::Unsupported(format!(
                                "cannot promote '{name}': bookmark '{bm}' of the origin has the longer (bookmark_v2) form, which rzfs does not move yet"
                            )));
                        }
                        if w.has_bookmark(p.clone_head, bm)? {
                            clash.push(bm.clone());
                        }
                    }
                    match clash.first() {
                        None => return Ok(p),
                        Some(c) => format!("conflicting snapshot '{c}' from parent '{origin}'"),
                    }
                }
                Err(Refusal::Snapshot) => "snapshots can not be promoted".into(),
                Err(Refusal::NotAClone) => "not a cloned filesystem".into(),
                Err(Refusal::NoPromote) => "the file system may not be promoted (DS_FLAG_NOPROMOTE)".into(),
                Err(Refusal::Conflicts(c)) => {
                    return Err(PoolError::Exists(format!(
                        "cannot promote '{name}': conflicting snapshot '{}' from parent '{origin}'",
                        c.first().map(String::as_str).unwrap_or("")
                    )))
                }
                Err(Refusal::Unsupported(m)) => {
                    return Err(PoolError::Unsupported(format!("cannot promote '{name}': {m}")))
                }
            };
            Err(PoolError::Invalid(format!("cannot promote '{name}': {why}")))
        }
        let (n, o) = (name.to_string(), origin.to_string());
        self.sync_task(
            SpaceCheck::ExtraReserved,
            Reserve::Meta,
            |w| check(w, name, origin).map(|_| ()),
            move |w| {
                let p = check(w, &n, &o)?;
                let otxg = dslw::ds_phys(&w.mos, p.origin)?.creation_txg;
                w.move_bookmarks(p.origin_head, p.clone_head, otxg)?;
                dsl::promote::promote(&mut w.mos, &mut w.mos_zaps, &p)?;
                Ok(())
            },
        )
    }

    /// `zpool set PROP=VALUE` for properties stored in the MOS `pool_props` ZAP.
    pub fn set_pool_prop(&self, prop: &str, value: PoolPropValue) -> Result<()> {
        let (k, v) = (prop.to_string(), value.clone());
        let check_v = value.clone();
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| match &check_v {
                PoolPropValue::Dataset(d) => must_find(w, d).map(|_| ()),
                _ => Ok(()),
            },
            move |w| {
                let zv = match &v {
                    PoolPropValue::Str(s) => Some(ZapVal::string(s)),
                    PoolPropValue::Num(n) => Some(ZapVal::u64(*n)),
                    PoolPropValue::Dataset(d) => Some(ZapVal::u64(must_find(w, d)?.ds)),
                    PoolPropValue::Remove => None,
                };
                w.set_pool_prop_raw(&k, zv)
            },
        )?;
        if prop == "failmode" {
            if let PoolPropValue::Num(n) = value {
                self.set_failmode(crate::txg::FailMode::from_prop(n));
            }
        }
        Ok(())
    }

    /// `zpool set feature@NAME=enabled`.
    pub fn enable_feature(&self, short: &str) -> Result<()> {
        let f = short.to_string();
        self.sync_task(SpaceCheck::Reserved, Reserve::Meta, |_| Ok(()), move |w| w.enable_feature(&f))
    }

    /// Opens head dataset `ds` for changes (a mount); returns the settings it is written
    /// with.
    pub fn open_dataset(&self, ds: u64) -> Result<crate::open_rw::DatasetSettings> {
        self.with_writer(|w| {
            let dir = dslw::ds_phys(&w.mos, ds)?.dir_obj;
            let settings = w.dataset_settings(dir)?;
            w.open_dataset(ds, settings.policy())?;
            Ok(settings)
        })
    }

    /// Records a command in the pool history (written with the next txg). Skipped, with the
    /// reason returned, while the pool is not active.
    pub fn log_history(&self, command: &str) -> Result<()> {
        // Never waits for a suspended pool (failmode=wait): `zpool destroy -f` and `export
        // -f` log first and must still get their answer.
        self.check_active()?;
        self.with_writer(|w| w.log_history(command, 0))
    }
}

impl PoolWriter {
    /// Sets (`Some`) or removes an entry of the MOS `pool_props` ZAP, creating the ZAP when
    /// needed (OpenZFS `spa_sync_props`).
    pub fn set_pool_prop_raw(&mut self, k: &str, v: Option<ZapVal>) -> Result<()> {
        let bad = |e: zap::ZapError| PoolError::Invalid(e.to_string());
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        let obj = match self.mos_zaps.lookup_u64(&self.mos, dir, "pool_props").map_err(bad)? {
            Some(o) => o,
            None => {
                let o = self.mos_zaps.create(&mut self.mos, 31, 0, Vec::new()).map_err(bad)?;
                self.mos_zaps.update_u64(&self.mos, dir, "pool_props", o).map_err(bad)?;
                o
            }
        };
        if matches!(k, "comment" | "compatibility") {
            // Also in the pool's configuration (labels, MOS config, cache file), as
            // `spa_config_generate` adds ZPOOL_CONFIG_COMMENT and _COMPATIBILITY.
            self.set_config_str(k, v.as_ref().map(ZapVal::text));
        }
        match v {
            Some(v) => self.mos_zaps.update(&self.mos, obj, k.as_bytes(), v).map_err(bad),
            None => self.mos_zaps.remove(&self.mos, obj, k.as_bytes()).map(|_| ()).map_err(bad),
        }
    }

    /// Sets (or, with None, removes) a string entry of the configuration's header (kept in
    /// `kept_config`, so a failed sync restores it with the rest).
    pub fn set_config_str(&mut self, k: &str, v: Option<String>) {
        let head = self.kept_config.entry(0).or_default();
        head.retain(|(key, _)| key != k);
        if let Some(v) = v {
            head.push((k.to_string(), ondisk::nvlist::NvValue::String(v)));
        }
        self.config_dirty = true;
    }

    /// A pool property from the MOS `pool_props` ZAP of the open txg.
    pub fn pool_prop_u64(&mut self, k: &str) -> Result<Option<u64>> {
        let bad = |e: zap::ZapError| PoolError::Invalid(e.to_string());
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        let Some(obj) = self.mos_zaps.lookup_u64(&self.mos, dir, "pool_props").map_err(bad)? else {
            return Ok(None);
        };
        self.mos_zaps.lookup_u64(&self.mos, obj, k).map_err(bad)
    }
}
