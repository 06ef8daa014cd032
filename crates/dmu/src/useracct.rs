//! # User, group and project space accounting (`userused`, `groupused`, `projectused`)
//!
//! Facts (OpenZFS `dmu_objset.c`: `userquota_updates_task`, `do_userquota_update`,
//! `dmu_objset_userquota_get_ids`; `dnode_sync.c`):
//! - A ZPL objset (`DMU_OST_ZFS`) whose header is at least 2 KiB holds two special dnodes,
//!   objects -1 (userused) and -2 (groupused); a 4 KiB header adds -3 (projectused). Each is
//!   a ZAP of type `DMU_OT_USERGROUP_USED` mapping an id in lower-case hex ("3e8") to the
//!   bytes charged to it, and, with `userobj_accounting` enabled, "obj-" + hex id to the
//!   number of objects. An entry that reaches 0 is removed (`zap_increment`).
//! - What one object is charged: 512 bytes (`DNODE_MIN_SIZE`, whatever the dnode's size)
//!   plus its `dn_used` in bytes, to the user, group and project read from its bonus
//!   ([`ondisk::znode::accounting_ids`]); objects whose bonus is not a znode or an SA (ZAPs
//!   without bonus, the master node, the delete queue) are charged to no one.
//! - Every txg, for each dnode synced: its committed state is taken off (if its committed
//!   flags carried `DNODE_FLAG_USERUSED_ACCOUNTED`; the object count if they carried
//!   `DNODE_FLAG_USEROBJUSED_ACCOUNTED`) and its new state added (a freed dnode adds
//!   nothing), and the synced dnode gets those flags — every dnode, counted or not. So an
//!   objset written before accounting existed converges object by object, and a count is
//!   never taken off that was not added.
//! - `os_flags` says whether the counts are complete (`OBJSET_FLAG_*_COMPLETE`): set when
//!   the objset is created with the feature enabled, never by an incremental walk here
//!   (OpenZFS's background upgrade of an old objset is not implemented).
//!
//! rzfs computes the deltas while [`crate::tx::DirtyObjset::sync`] writes the dnodes (the
//! old state is the committed dnode, the new one the dnode just synced), then hands them to
//! the objset's owner ([`Accounting::apply`]), which edits the three ZAPs through the ZAP
//! layer inside the same sync; their blocks and dnodes are written before the objset block,
//! in the same txg, so the counts are always those of the tree they sit beside.

use crate::tx::DirtyObjset;
use crate::Result;
use ondisk::dnode::{
    DnodePhys, DNODE_FLAG_USED_BYTES, DNODE_FLAG_USEROBJUSED_ACCOUNTED, DNODE_FLAG_USERUSED_ACCOUNTED,
};
use ondisk::objset::{ObjsetPhys, DMU_OBJACCT_PREFIX};
use ondisk::znode::{accounting_ids, FileIds};
use ondisk::ByteOrder;
use std::collections::BTreeMap;

/// The accounting objects as object numbers: OpenZFS's -1, -2 and -3 as unsigned.
pub const USERUSED_OBJECT: u64 = u64::MAX;
pub const GROUPUSED_OBJECT: u64 = u64::MAX - 1;
pub const PROJECTUSED_OBJECT: u64 = u64::MAX - 2;

/// `DNODE_MIN_SIZE`: what every counted object is charged besides its blocks.
const DNODE_MIN_SIZE: i64 = 512;

/// Is `obj` one of the three accounting objects?
pub fn is_accounting_object(obj: u64) -> bool {
    obj >= PROJECTUSED_OBJECT
}

/// The dnode of accounting object `obj` in an objset header (None when the header has no
/// room for it).
pub fn accounting_dnode(phys: &ObjsetPhys, obj: u64) -> Option<&DnodePhys> {
    match obj {
        USERUSED_OBJECT => phys.userused.as_ref(),
        GROUPUSED_OBJECT => phys.groupused.as_ref(),
        PROJECTUSED_OBJECT => phys.projectused.as_ref(),
        _ => None,
    }
}

/// The slot of accounting object `obj` in an objset header.
pub(crate) fn accounting_slot(phys: &mut ObjsetPhys, obj: u64) -> Option<&mut Option<DnodePhys>> {
    match obj {
        USERUSED_OBJECT => Some(&mut phys.userused),
        GROUPUSED_OBJECT => Some(&mut phys.groupused),
        PROJECTUSED_OBJECT => Some(&mut phys.projectused),
        _ => None,
    }
}

/// How a sync keeps the accounting objects of a ZPL objset: which counts the pool's
/// features ask for, and the owner's way to edit the ZAPs.
pub struct Accounting<'a> {
    /// `userobj_accounting` is enabled: object counts too.
    pub userobj: bool,
    /// `project_quota` is enabled: the projectused object is kept where the header has it.
    pub project: bool,
    /// Adds the deltas to the ZAPs (creating them when missing, removing entries that reach
    /// 0), writing into the objset passed; called at most once per sync.
    pub apply: &'a (dyn Fn(&mut DirtyObjset, &UsedDeltas) -> Result<()> + Sync),
}

/// What one sync changes in the accounting ZAPs: per accounting object, per key, the amount
/// to add (negative to take off).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsedDeltas {
    pub by_object: BTreeMap<u64, BTreeMap<String, i64>>,
}

impl UsedDeltas {
    /// Nothing to change?
    pub fn is_empty(&self) -> bool {
        self.by_object.values().all(|m| m.values().all(|d| *d == 0))
    }

    fn add(&mut self, obj: u64, key: String, delta: i64) {
        // Wrapping, as the u64 counts themselves: a crafted `dn_used` must not overflow.
        let e = self.by_object.entry(obj).or_default().entry(key).or_default();
        *e = e.wrapping_add(delta);
    }

    fn charge(&mut self, ids: FileIds, project: bool, bytes: i64, objects: Option<i64>) {
        let mut owners = vec![(USERUSED_OBJECT, ids.user), (GROUPUSED_OBJECT, ids.group)];
        if project {
            owners.push((PROJECTUSED_OBJECT, ids.project));
        }
        for (obj, id) in owners {
            if bytes != 0 {
                self.add(obj, format!("{id:x}"), bytes);
            }
            if let Some(n) = objects {
                self.add(obj, format!("{DMU_OBJACCT_PREFIX}{id:x}"), n);
            }
        }
    }

    /// Counts one synced dnode: `old` its committed state (None for an object new in this
    /// txg), `new` what was just written (None when freed). `new`'s accounting flags must
    /// already be set.
    pub fn count(
        &mut self,
        old: Option<&DnodePhys>,
        new: Option<&DnodePhys>,
        project: bool,
        order: ByteOrder,
    ) {
        let used = |dn: &DnodePhys| -> i64 {
            let b = if dn.flags & DNODE_FLAG_USED_BYTES != 0 { dn.used } else { dn.used << 9 };
            DNODE_MIN_SIZE.saturating_add(i64::try_from(b).unwrap_or(i64::MAX))
        };
        for (dn, sign) in [(old, -1i64), (new, 1)] {
            let Some(dn) = dn.filter(|d| !d.is_free()) else { continue };
            if dn.flags & DNODE_FLAG_USERUSED_ACCOUNTED == 0 {
                continue;
            }
            let Some(ids) = accounting_ids(dn.bonustype, &dn.bonus, order) else { continue };
            let objects = (dn.flags & DNODE_FLAG_USEROBJUSED_ACCOUNTED != 0).then_some(sign);
            self.charge(ids, project, sign.wrapping_mul(used(dn)), objects);
        }
    }
}

/// The flags a dnode synced with accounting on carries.
pub fn accounted_flags(userobj: bool) -> u8 {
    DNODE_FLAG_USERUSED_ACCOUNTED | if userobj { DNODE_FLAG_USEROBJUSED_ACCOUNTED } else { 0 }
}

/// Adds `delta` to a stored count as `zap_increment` does (wrapping, as the u64 it is).
pub fn incremented(current: u64, delta: i64) -> u64 {
    current.wrapping_add(delta as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa_bonus(uid: u64, gid: u64, flags: u64, projid: Option<u64>) -> Vec<u8> {
        // Header of 8 bytes (layout_info 1 << 10), then MODE SIZE GEN UID GID PARENT FLAGS
        // ... and PROJID at 128 as OpenZFS lays a ZPL SA out.
        let mut b = vec![0u8; 8 + 136];
        b[..4].copy_from_slice(&ondisk::sa::SA_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&(1u16 << 10 | 2).to_le_bytes());
        b[8 + 24..8 + 32].copy_from_slice(&uid.to_le_bytes());
        b[8 + 32..8 + 40].copy_from_slice(&gid.to_le_bytes());
        b[8 + 48..8 + 56].copy_from_slice(&flags.to_le_bytes());
        if let Some(p) = projid {
            b[8 + 128..8 + 136].copy_from_slice(&p.to_le_bytes());
        }
        b
    }

    fn file(uid: u64, gid: u64, used: u64, flags: u8) -> DnodePhys {
        DnodePhys {
            object_type: 19,
            bonustype: 44,
            bonus: sa_bonus(uid, gid, 0, None),
            used,
            flags: DNODE_FLAG_USED_BYTES | flags,
            ..Default::default()
        }
    }

    #[test]
    fn new_changed_and_freed_objects() {
        let all = accounted_flags(true);
        let mut d = UsedDeltas::default();
        d.count(None, Some(&file(1000, 100, 4096, all)), false, ByteOrder::Little);
        let u = &d.by_object[&USERUSED_OBJECT];
        assert_eq!((u["3e8"], u["obj-3e8"]), (4608, 1));
        assert_eq!(d.by_object[&GROUPUSED_OBJECT]["64"], 4608);
        assert!(!d.by_object.contains_key(&PROJECTUSED_OBJECT));
        // chown 1000 -> 0 and growth: all moves, the object count too.
        let mut d = UsedDeltas::default();
        d.count(Some(&file(1000, 100, 4096, all)), Some(&file(0, 100, 8192, all)), true, ByteOrder::Little);
        let u = &d.by_object[&USERUSED_OBJECT];
        assert_eq!((u["3e8"], u["obj-3e8"], u["0"], u["obj-0"]), (-4608, -1, 8704, 1));
        assert_eq!(d.by_object[&GROUPUSED_OBJECT]["64"], 4096);
        assert_eq!(d.by_object[&GROUPUSED_OBJECT]["obj-64"], 0);
        assert_eq!(d.by_object[&PROJECTUSED_OBJECT]["0"], 4096);
        // Freed: taken off.
        let mut d = UsedDeltas::default();
        d.count(Some(&file(7, 7, 512, all)), None, false, ByteOrder::Little);
        assert_eq!(d.by_object[&USERUSED_OBJECT]["7"], -1024);
        // A committed dnode never counted is not taken off; one counted by space only
        // loses no object count.
        let mut d = UsedDeltas::default();
        d.count(Some(&file(7, 7, 512, 0)), None, false, ByteOrder::Little);
        assert!(d.is_empty());
        let mut d = UsedDeltas::default();
        d.count(Some(&file(7, 7, 512, DNODE_FLAG_USERUSED_ACCOUNTED)), None, false, ByteOrder::Little);
        assert_eq!(d.by_object[&USERUSED_OBJECT].get("obj-7"), None);
    }

    #[test]
    fn project_ids_and_uncounted_objects() {
        let mut dn = file(5, 6, 0, accounted_flags(true));
        dn.bonus = sa_bonus(5, 6, ondisk::znode::ZFS_PROJID, Some(42));
        let mut d = UsedDeltas::default();
        d.count(None, Some(&dn), true, ByteOrder::Little);
        assert_eq!(d.by_object[&PROJECTUSED_OBJECT]["2a"], 512);
        // A ZAP without bonus, a bonus that is not an SA: no one is charged.
        let zap = DnodePhys { object_type: 20, flags: accounted_flags(true), ..Default::default() };
        let junk =
            DnodePhys { bonustype: 44, bonus: vec![1, 2, 3], flags: accounted_flags(true), ..zap.clone() };
        let mut d = UsedDeltas::default();
        d.count(None, Some(&zap), true, ByteOrder::Little);
        d.count(None, Some(&junk), true, ByteOrder::Little);
        assert!(d.is_empty());
        assert_eq!(incremented(10, -10), 0);
        assert_eq!(incremented(1, -2), u64::MAX);
    }
}
