//! # Space per user, group and project: what `zfs userspace` and `userused@...` read
//!
//! Facts (OpenZFS `zfs_quota.c`: `zfs_userspace_many`, `zfs_userspace_one`):
//! - usage lives in the objset's accounting objects -1/-2/-3 ([`dmu::useracct`]): hex id →
//!   bytes, "obj-" + hex id → objects;
//! - quotas live in ZAPs of type `DMU_OT_USERGROUP_QUOTA` named from the master node by the
//!   property prefix ("userquota@", "groupobjquota@", ...): hex id → limit;
//! - usage is reported only where the objset's `os_flags` say the counts are complete
//!   (space: `OBJSET_FLAG_USERACCOUNTING_COMPLETE`; objects and projects: their own bits),
//!   otherwise the answer is "not supported" (OpenZFS then upgrades the objset; rzfs does
//!   not).
//!
//! Reads go to the committed objset, as OpenZFS's do: a change shows once its txg synced.

use crate::{Result, ZplError, MASTER_NODE_OBJ};
use dmu::tx::DirtyObjset;
use dmu::useracct::{GROUPUSED_OBJECT, PROJECTUSED_OBJECT, USERUSED_OBJECT};
use dmu::Objset;
use ondisk::objset::{
    DMU_OBJACCT_PREFIX, OBJSET_FLAG_PROJECTQUOTA_COMPLETE, OBJSET_FLAG_USERACCOUNTING_COMPLETE,
    OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE,
};
use std::collections::BTreeMap;
use zap::write::ZapCache;

/// Whose space: `zfs_prop_is_user/group/project`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    User,
    Group,
    Project,
}

impl Owner {
    fn used_object(self) -> u64 {
        match self {
            Owner::User => USERUSED_OBJECT,
            Owner::Group => GROUPUSED_OBJECT,
            Owner::Project => PROJECTUSED_OBJECT,
        }
    }
    fn word(self) -> &'static str {
        match self {
            Owner::User => "user",
            Owner::Group => "group",
            Owner::Project => "project",
        }
    }
}

/// One of the twelve `zfs_userquota_prop_t` properties, without its `@who`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceProp {
    pub owner: Owner,
    /// Counts objects (`*objused@`, `*objquota@`), not bytes.
    pub objects: bool,
    /// A limit (`*quota@`), not a usage.
    pub quota: bool,
}

impl SpaceProp {
    /// Parses "userused@who" ... "projectobjquota@who" into the property and `who`.
    pub fn parse(name: &str) -> Option<(SpaceProp, &str)> {
        let (prefix, who) = name.split_once('@')?;
        let (owner, rest) = [("user", Owner::User), ("group", Owner::Group), ("project", Owner::Project)]
            .into_iter()
            .find_map(|(w, o)| prefix.strip_prefix(w).map(|r| (o, r)))?;
        let (objects, quota) = match rest {
            "used" => (false, false),
            "quota" => (false, true),
            "objused" => (true, false),
            "objquota" => (true, true),
            _ => return None,
        };
        Some((SpaceProp { owner, objects, quota }, who))
    }

    /// The property's name without `@who` ("userobjquota").
    pub fn name(&self) -> String {
        let obj = if self.objects { "obj" } else { "" };
        let kind = if self.quota { "quota" } else { "used" };
        format!("{}{obj}{kind}", self.owner.word())
    }
}

/// Is the accounting `p` reads complete in this objset (else OpenZFS answers ENOTSUP)?
pub fn present(os: &Objset, p: SpaceProp) -> bool {
    let f = os.phys.flags;
    let mut need = OBJSET_FLAG_USERACCOUNTING_COMPLETE;
    if p.objects {
        need |= OBJSET_FLAG_USEROBJACCOUNTING_COMPLETE;
    }
    if p.owner == Owner::Project {
        need |= OBJSET_FLAG_PROJECTQUOTA_COMPLETE;
    }
    f & need == need && os.phys.userused.is_some()
}

fn unsupported(p: SpaceProp) -> ZplError {
    ZplError::Unsupported(format!(
        "{} accounting is not complete in this file system (it was written before it was kept)",
        p.name()
    ))
}

/// The ZAP holding `p`'s values: an accounting object, or the quota ZAP the master node names
/// (None when no quota of that kind was ever set).
fn source_object(os: &Objset, p: SpaceProp) -> Result<Option<u64>> {
    if !p.quota {
        return Ok(os.dnode(p.owner.used_object()).ok().map(|_| p.owner.used_object()));
    }
    Ok(zap::lookup_u64(os, MASTER_NODE_OBJ, &format!("{}@", p.name()))?)
}

/// The key of `id` in `p`'s ZAP.
fn key(p: SpaceProp, id: u64) -> String {
    let prefix = if p.objects && !p.quota { DMU_OBJACCT_PREFIX } else { "" };
    format!("{prefix}{id:x}")
}

/// `p` for one id (`zfs_userspace_one`): 0 when it has none.
pub fn one(os: &Objset, p: SpaceProp, id: u64) -> Result<u64> {
    if !present(os, p) {
        return Err(unsupported(p));
    }
    match source_object(os, p)? {
        Some(obj) => Ok(zap::lookup_u64(os, obj, &key(p, id))?.unwrap_or(0)),
        None => Ok(0),
    }
}

/// Every id `p` has a value for (`zfs_userspace_many`), by id.
pub fn many(os: &Objset, p: SpaceProp) -> Result<BTreeMap<u64, u64>> {
    if !present(os, p) {
        return Err(unsupported(p));
    }
    let Some(obj) = source_object(os, p)? else { return Ok(BTreeMap::new()) };
    let want_prefix = p.objects && !p.quota;
    let mut out = BTreeMap::new();
    for e in zap::list(os, obj)? {
        let name = e.name_string();
        let (has_prefix, hex) = match name.strip_prefix(DMU_OBJACCT_PREFIX) {
            Some(h) => (true, h),
            None => (false, name.as_str()),
        };
        if has_prefix != want_prefix {
            continue;
        }
        // Ids of SMB principals (a domain index in the high 32 bits) are kept as they are.
        if let (Ok(id), Some(v)) = (u64::from_str_radix(hex, 16), e.first_u64()) {
            out.insert(id, v);
        }
    }
    Ok(out)
}

/// `DMU_OT_USERGROUP_QUOTA`.
const DMU_OT_USERGROUP_QUOTA: u8 = 40;

/// The master-node key naming the quota ZAP of `p` ("userquota@", "groupobjquota@", ...).
fn quota_key(p: SpaceProp) -> String {
    format!("{}@", SpaceProp { quota: true, ..p }.name())
}

/// Sets quota `p` of `id` to `limit`, or removes it when `limit` is 0 (`zfs_set_userquota`):
/// the quota ZAP is made, and named in the master node, with the first limit.
pub fn set_quota(os: &mut DirtyObjset, zaps: &mut ZapCache, p: SpaceProp, id: u64, limit: u64) -> Result<()> {
    if !p.quota {
        return Err(ZplError::Invalid(format!("{} is not a quota", p.name())));
    }
    let name = quota_key(p);
    let obj = match zaps.lookup_u64(os, MASTER_NODE_OBJ, &name)? {
        Some(o) => o,
        None if limit == 0 => return Ok(()),
        None => {
            let o = zaps.create(os, DMU_OT_USERGROUP_QUOTA, 0, Vec::new())?;
            zaps.update_u64(os, MASTER_NODE_OBJ, &name, o)?;
            o
        }
    };
    let k = format!("{id:x}");
    if limit == 0 {
        zaps.remove(os, obj, k.as_bytes())?;
    } else {
        zaps.update_u64(os, obj, &k, limit)?;
    }
    Ok(())
}

/// Has `id` reached its quota of `owner` — of bytes, or of objects with `objects`
/// (`zfs_id_overblockquota`, `zfs_id_overobjquota`)? The limit is the one set now; the usage
/// is what the last synced txg counted, so a writer may pass its limit by what one txg
/// holds, as in OpenZFS. False where no such quota is set or the counts are not kept.
pub fn over_quota(
    os: &DirtyObjset,
    zaps: &mut ZapCache,
    owner: Owner,
    objects: bool,
    id: u64,
) -> Result<bool> {
    let p = SpaceProp { owner, objects, quota: true };
    let Some(qobj) = zaps.lookup_u64(os, MASTER_NODE_OBJ, &quota_key(p))? else { return Ok(false) };
    let Some(limit) = zaps.lookup_u64(os, qobj, &format!("{id:x}"))? else { return Ok(false) };
    let Some(committed) = os.committed() else { return Ok(false) };
    let used_prop = SpaceProp { quota: false, ..p };
    if !present(committed, used_prop) {
        return Ok(false);
    }
    let used = match committed.dnode(owner.used_object()) {
        Ok(_) => zap::lookup_u64(committed, owner.used_object(), &key(used_prop, id))?.unwrap_or(0),
        Err(_) => 0,
    };
    Ok(used >= limit)
}

/// Would a file of these owners pass a limit by growing (`objects` false) or by a new
/// object (`objects` true: its bytes and object quotas both count, as
/// `zfs_acl_ids_overquota`)? Project 0 is never limited.
pub fn owners_over_quota(
    os: &DirtyObjset,
    zaps: &mut ZapCache,
    uid: u64,
    gid: u64,
    projid: u64,
    objects: bool,
) -> Result<bool> {
    let mut who = vec![(Owner::User, uid), (Owner::Group, gid)];
    if projid != 0 {
        who.push((Owner::Project, projid));
    }
    for (owner, id) in who {
        if over_quota(os, zaps, owner, false, id)? || (objects && over_quota(os, zaps, owner, true, id)?) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn property_names() {
        let (p, who) = SpaceProp::parse("userobjused@root").unwrap();
        assert_eq!((p.owner, p.objects, p.quota, who), (Owner::User, true, false, "root"));
        assert_eq!(p.name(), "userobjused");
        let (p, who) = SpaceProp::parse("projectquota@12").unwrap();
        assert_eq!((p.owner, p.objects, p.quota, who), (Owner::Project, false, true, "12"));
        assert_eq!(key(p, 18), "12");
        assert_eq!(key(SpaceProp { owner: Owner::Group, objects: true, quota: false }, 255), "obj-ff");
        assert_eq!(key(SpaceProp { owner: Owner::Group, objects: true, quota: true }, 255), "ff");
        for bad in ["userused", "usedby@x", "userfoo@x", "written@snap"] {
            assert!(SpaceProp::parse(bad).is_none(), "{bad}");
        }
    }
}
