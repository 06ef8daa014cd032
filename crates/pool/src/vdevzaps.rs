//! # Per-vdev ZAPs and the vdev properties stored in them
//!
//! Facts (OpenZFS `vdev.c` `vdev_construct_zaps`, `vdev_top_transfer`, `spa.c`
//! `spa_sync_config_object`, `vdev_label.c` `vdev_config_generate`):
//! - Every concrete leaf owns a ZAP object in the MOS (`com.delphix:vdev_zap_leaf` in its
//!   configuration), every top-level vdev one (`com.delphix:vdev_zap_top`; a top-level leaf
//!   has both), and, once the feature `vdev_zaps_v2` is enabled, the root one
//!   (`com.klarasystems:vdev_zap_root`; creating it activates the feature, refcount 1).
//!   Holes, missing vdevs and interior vdevs below the top (replacing, spare) have none.
//! - All of them are listed in the AVZ, the MOS directory's `com.delphix:vdev_zap_map`, a
//!   ZAP of type `DMU_OTN_ZAP_METADATA` whose entries are named by the object number in
//!   lower-case hex and hold it as one u64 (`zap_add_int`).
//! - The MOS copy of the configuration carries the sentinel `com.delphix:has_per_vdev_zaps`
//!   (a valueless boolean) while it names these objects. OpenZFS refuses to load a pool
//!   whose MOS config has the sentinel but whose directory has no AVZ, and destroys every
//!   vdev ZAP of a pool whose AVZ lacks the sentinel; rzfs creates the AVZ and sentinel
//!   together and leaves an AVZ without sentinel alone.
//! - Only the MOS config holds the ZAP numbers and the sentinel; the labels do not.
//! - When the top-level vdev changes identity (a single disk becomes a mirror by `attach`,
//!   a mirror collapses to its last side by `detach`, a replacing vdev appears above a
//!   top-level disk), the top ZAP moves to the new top-level vdev (`vdev_top_transfer`), so
//!   the properties set on the top stay with it.
//!
//! Vdev properties (`zpool get/set PROP POOL VDEV`) live in the vdev's own ZAP: the root's
//! if it has one, else the top's, else the leaf's (`vdev_props_set_sync`). Strings are
//! stored as one-byte integers with their terminating NUL, numeric and index properties as
//! one u64, user properties (`module:name`) as strings; setting a user property to the empty
//! string removes it.

use crate::space::{Reserve, SpaceCheck};
use crate::txg::Spa;
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use ondisk::dsl::mos_keys as K;
use ondisk::nvlist::{NvList, NvValue};
use std::sync::Arc;
use vdev::{Vdev, VdevKind};
use zap::write::ZapVal;

/// Configuration key of a leaf's ZAP.
pub const LEAF_ZAP: &str = "com.delphix:vdev_zap_leaf";
/// Configuration key of a top-level vdev's ZAP.
pub const TOP_ZAP: &str = "com.delphix:vdev_zap_top";
/// Entry of a top-level vdev's ZAP naming its allocation class (`VDEV_TOP_ZAP_ALLOCATION_BIAS`).
pub const ALLOCATION_BIAS: &str = "org.zfsonlinux:allocation_bias";
/// Configuration key of the root vdev's ZAP (feature `vdev_zaps_v2`).
pub const ROOT_ZAP: &str = "com.klarasystems:vdev_zap_root";
/// The MOS config's sentinel: the vdev ZAPs it names are listed in the AVZ.
pub const HAS_ZAPS: &str = "com.delphix:has_per_vdev_zaps";
/// Keys only the MOS copy of the configuration carries.
pub const MOS_ONLY: &[&str] = &[LEAF_ZAP, TOP_ZAP, ROOT_ZAP, HAS_ZAPS];

fn bad(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(e.to_string())
}

/// Removes the MOS-only keys from a label's configuration, header and vdev tree, in place
/// (the order of the other pairs is kept).
pub fn strip_mos_only(nv: &mut NvList) {
    fn walk(nv: &mut NvList, depth: u32) {
        nv.pairs.retain(|(k, _)| !MOS_ONLY.contains(&k.as_str()));
        if depth > 8 {
            return;
        }
        for (k, v) in nv.pairs.iter_mut() {
            match v {
                NvValue::NvList(t) if k == "vdev_tree" => walk(t, depth + 1),
                NvValue::NvListArray(kids) if k == "children" => {
                    kids.iter_mut().for_each(|c| walk(c, depth + 1))
                }
                _ => {}
            }
        }
    }
    walk(nv, 0);
}

/// Every vdev of a subtree, pre-order.
fn subtree(v: &Vdev) -> Vec<&Vdev> {
    let mut out = vec![v];
    for c in v.children() {
        out.extend(subtree(c));
    }
    out
}

/// A vdev that gets ZAPs: not a hole, not missing, not a dRAID rzfs only describes.
fn concrete(v: &Vdev) -> bool {
    !matches!(v.kind(), VdevKind::Hole | VdevKind::Missing | VdevKind::Draid { .. })
}

impl PoolWriter {
    fn kept_u64(&self, guid: u64, key: &str) -> Option<u64> {
        self.kept_config.get(&guid)?.iter().find_map(|(k, v)| match v {
            NvValue::Uint64(o) if k == key && *o != 0 => Some(*o),
            _ => None,
        })
    }

    fn take_kept(&mut self, guid: u64, key: &str) -> Option<u64> {
        let o = self.kept_u64(guid, key)?;
        if let Some(list) = self.kept_config.get_mut(&guid) {
            list.retain(|(k, _)| k != key);
        }
        Some(o)
    }

    fn put_kept(&mut self, guid: u64, key: &str, obj: u64) {
        let list = self.kept_config.entry(guid).or_default();
        list.retain(|(k, _)| k != key);
        list.push((key.to_string(), NvValue::Uint64(obj)));
        self.config_dirty = true;
    }

    fn avz(&mut self) -> Result<Option<u64>> {
        self.mos_zaps.lookup_u64(&self.mos, K::DIRECTORY_OBJECT, K::VDEV_ZAP_MAP).map_err(bad)
    }

    fn new_vdev_zap(&mut self, avz: u64) -> Result<u64> {
        let obj = self
            .mos_zaps
            .create(&mut self.mos, crate::dsfeatures::OTN_ZAP_METADATA, 0, Vec::new())
            .map_err(bad)?;
        self.mos_zaps.update(&self.mos, avz, format!("{obj:x}").as_bytes(), ZapVal::u64(obj)).map_err(bad)?;
        Ok(obj)
    }

    fn drop_vdev_zap(&mut self, avz: u64, obj: u64) -> Result<()> {
        self.mos_zaps.destroy(&mut self.mos, obj).map_err(bad)?;
        self.mos_zaps.remove(&self.mos, avz, format!("{obj:x}").as_bytes()).map_err(bad)?;
        Ok(())
    }

    /// Gives every concrete vdev the ZAPs OpenZFS would have given it, moves top ZAPs to the
    /// vdev that is now top-level, and creates the AVZ on a pool that has none. Runs in
    /// syncing context before the configuration is written (the config is dirty whenever
    /// the tree changed).
    pub(crate) fn ensure_vdev_zaps(&mut self) -> Result<()> {
        let sentinel = self.kept_config.get(&0).is_some_and(|h| h.iter().any(|(k, _)| k == HAS_ZAPS));
        let avz = match self.avz()? {
            Some(a) if sentinel => a,
            // An AVZ an older ZFS orphaned: OpenZFS destroys it at its next import.
            Some(_) => return Ok(()),
            None => {
                let named = self.kept_config.values().flatten().any(|(k, _)| MOS_ONLY.contains(&k.as_str()));
                if named {
                    // ZAPs named without an AVZ: not a state OpenZFS writes; leave it be.
                    return Ok(());
                }
                let a = self
                    .mos_zaps
                    .create(&mut self.mos, crate::dsfeatures::OTN_ZAP_METADATA, 0, Vec::new())
                    .map_err(bad)?;
                self.mos_zaps.update_u64(&self.mos, K::DIRECTORY_OBJECT, K::VDEV_ZAP_MAP, a).map_err(bad)?;
                let head = self.kept_config.entry(0).or_default();
                head.push((HAS_ZAPS.to_string(), NvValue::Boolean));
                self.config_dirty = true;
                a
            }
        };
        let tops: Vec<Arc<Vdev>> = self.tops.clone();
        for t in tops.iter().filter(|t| concrete(t)) {
            let below: Vec<u64> = subtree(t).iter().skip(1).map(|v| v.guid()).collect();
            // A top ZAP left on a vdev that is no longer top-level moves up (the first one
            // found); any other is destroyed.
            for g in below {
                if let Some(obj) = self.take_kept(g, TOP_ZAP) {
                    self.config_dirty = true;
                    if self.kept_u64(t.guid(), TOP_ZAP).is_none() {
                        self.put_kept(t.guid(), TOP_ZAP, obj);
                    } else {
                        self.drop_vdev_zap(avz, obj)?;
                    }
                }
            }
            if self.kept_u64(t.guid(), TOP_ZAP).is_none() {
                let obj = self.new_vdev_zap(avz)?;
                if t.is_log() {
                    // vdev_zap_allocation_data: the class of a new top-level vdev that has
                    // one, read back at import (`vdev_derive_alloc_bias`).
                    self.mos_zaps
                        .update(&self.mos, obj, ALLOCATION_BIAS.as_bytes(), ZapVal::string("log"))
                        .map_err(bad)?;
                }
                self.put_kept(t.guid(), TOP_ZAP, obj);
            }
            for v in subtree(t).into_iter().filter(|v| matches!(v.kind(), VdevKind::Disk | VdevKind::File)) {
                if self.kept_u64(v.guid(), LEAF_ZAP).is_none() {
                    let obj = self.new_vdev_zap(avz)?;
                    self.put_kept(v.guid(), LEAF_ZAP, obj);
                }
            }
        }
        if self.kept_u64(self.guid, ROOT_ZAP).is_none() && self.feature_refcount("vdev_zaps_v2")?.is_some() {
            let obj = self.new_vdev_zap(avz)?;
            self.put_kept(self.guid, ROOT_ZAP, obj);
            if self.feature_refcount("vdev_zaps_v2")? == Some(0) {
                self.feature_adjust("vdev_zaps_v2", 1)?;
            }
        }
        Ok(())
    }

    /// The ZAP holding the properties of vdev `guid` (the pool's guid names the root).
    pub fn vdev_prop_zap(&self, guid: u64) -> Option<u64> {
        if guid == self.guid {
            return self.kept_u64(guid, ROOT_ZAP);
        }
        self.kept_u64(guid, TOP_ZAP).or_else(|| self.kept_u64(guid, LEAF_ZAP))
    }

    /// The guid of the vdev `zpool get/set` names: `root`/`root-0`, a top-level or interior
    /// vdev by its status name, a leaf by path or guid.
    pub fn vdev_guid_named(&self, name: &str) -> Option<u64> {
        if name == "root" || name == "root-0" || name.parse::<u64>().ok() == Some(self.guid) {
            return Some(self.guid);
        }
        self.find_vdev(name).map(|v| v.guid())
    }
}

/// A value `zpool set PROP=VALUE POOL VDEV` stores in a vdev's ZAP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VdevPropValue {
    Str(String),
    Num(u64),
    /// A user property set to the empty string: removed.
    Remove,
}

impl Spa {
    /// `zpool set PROP=VALUE POOL VDEV` for a property kept in the vdev's ZAP; `prop` is
    /// validated by the caller. Fails with NotFound for an unknown vdev and Unsupported for
    /// one that has no ZAP (an interior vdev below the top, a missing one).
    pub fn set_vdev_prop(self: &Arc<Self>, vdev: &str, prop: &str, value: VdevPropValue) -> Result<()> {
        let name = vdev.to_string();
        let (k, v) = (prop.to_string(), value);
        let find = move |w: &mut PoolWriter| -> Result<u64> {
            w.vdev_guid_named(&name)
                .ok_or_else(|| PoolError::NotFound(format!("cannot find '{name}' in pool: no such device")))
        };
        let check_name = vdev.to_string();
        self.sync_task(
            SpaceCheck::ExtraReserved,
            Reserve::Meta,
            |w| {
                w.vdev_guid_named(&check_name).map(|_| ()).ok_or_else(|| {
                    PoolError::NotFound(format!("cannot find '{check_name}' in pool: no such device"))
                })
            },
            move |w| {
                let guid = find(w)?;
                w.ensure_vdev_zaps()?;
                let obj = w.vdev_prop_zap(guid).ok_or_else(|| {
                    PoolError::Unsupported("this vdev has no property object (EINVAL)".to_string())
                })?;
                match &v {
                    VdevPropValue::Str(s) => w.mos_zaps.update(&w.mos, obj, k.as_bytes(), ZapVal::string(s)),
                    VdevPropValue::Num(n) => w.mos_zaps.update(&w.mos, obj, k.as_bytes(), ZapVal::u64(*n)),
                    VdevPropValue::Remove => w.mos_zaps.remove(&w.mos, obj, k.as_bytes()).map(|_| ()),
                }
                .map_err(bad)?;
                let shown = match &v {
                    VdevPropValue::Str(s) => s.clone(),
                    VdevPropValue::Num(n) => n.to_string(),
                    VdevPropValue::Remove => String::new(),
                };
                w.note_internal("vdev set", &format!("vdev_guid={guid}: {k}={shown}"));
                Ok(())
            },
        )
    }
}

/// The ZAP numbers of an imported pool's vdevs, from its MOS config: (guid, key, object)
/// for every `com.delphix:vdev_zap_*` / `com.klarasystems:vdev_zap_root` entry.
pub fn vdev_zaps(pool: &crate::Pool) -> Vec<(u64, &'static str, u64)> {
    fn walk(nv: &NvList, out: &mut Vec<(u64, &'static str, u64)>, depth: u32) {
        if let Some(g) = nv.get_u64("guid") {
            for k in [LEAF_ZAP, TOP_ZAP, ROOT_ZAP] {
                if let Some(o) = nv.get_u64(k).filter(|&o| o != 0) {
                    out.push((g, k, o));
                }
            }
        }
        if depth < 8 {
            for c in nv.get_nvlist_array("children").unwrap_or(&[]) {
                walk(c, out, depth + 1);
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(nv) = crate::mos_config_nvlist(pool) {
        if let Some(root) = nv.get_nvlist("vdev_tree") {
            walk(root, &mut out, 0);
        }
    }
    out
}

/// The property ZAP of vdev `guid` of an imported pool (root's, else top's, else leaf's).
pub fn vdev_prop_zap_of(pool: &crate::Pool, guid: u64) -> Option<u64> {
    let z = vdev_zaps(pool);
    let of = |k: &str| z.iter().find(|(g, key, _)| *g == guid && *key == k).map(|x| x.2);
    of(ROOT_ZAP).or_else(|| of(TOP_ZAP)).or_else(|| of(LEAF_ZAP))
}
