//! System attributes and trivial ACLs for the ZPL write layer.
//!
//! Theory. A znode's bonus buffer is an SA record: an ordered list of (attribute number,
//! bytes) under a header naming a layout (see `ondisk::sa`). [`SaRecord`] holds that list in
//! memory; changing an attribute replaces it in place and adding one appends it at the end,
//! which is what OpenZFS `sa_modify_attrs` does, so the layouts we register are the ones
//! OpenZFS itself would register for the same sequence of operations. Re-encoding looks the
//! attribute list up among the known layouts and registers a new one when needed, numbered
//! as `sa_find_layout` numbers them: the count of known layouts, the two built-in ones (0 =
//! legacy znode, 1 = empty) included, so the first registered layout is 2.
//!
//! The registry (`REGISTRY` ZAP) is written the way `sa_attr_register_sync` writes it: every
//! ZPL attribute of `zfs_attr_table` that is not yet on disk, before the first record that
//! uses the tables.
//!
//! ACLs. A Linux dataset (acltype=off or posix, aclmode=discard, aclinherit=restricted) with
//! no inheritable ACEs stores, per znode, the *trivial* NFSv4 ACL that OpenZFS derives from
//! the mode (`zfs_acl_chmod` with `acl_trivial_access_masks`, module/os/linux/zfs/zfs_acl.c):
//! optional owner@ allow / owner@ deny / group@ deny entries for modes where the owner has
//! fewer rights than group or others, then owner@, group@ and everyone@ allow entries. Each
//! entry is a `zfs_ace_hdr_t` (8 bytes: type u16, flags u16, access mask u32), the form FUID
//! ACLs use for owner@/group@/everyone@ entries; they go in `ZPL_DACL_ACES` with their count
//! in `ZPL_DACL_COUNT`.

use crate::attrs::Attrs;
use crate::write::{Result, ZplWriteError};
use dmu::tx::DirtyObjset;
use ondisk::dnode::DnodePhys;
use ondisk::sa::{self, SaRegistry, ZplAttr};
use ondisk::ByteOrder;
use std::collections::BTreeMap;
use zap::write::{ZapCache, ZapVal};

/// DMU object types used here (include/sys/dmu.h).
pub(crate) const DMU_OT_SA_ATTR_REGISTRATION: u8 = 46;
pub(crate) const DMU_OT_SA_ATTR_LAYOUTS: u8 = 47;

// NFSv4 ACE bits (include/os/linux/spl/sys/acl.h).
const ACE_READ_DATA: u32 = 0x1;
const ACE_WRITE_DATA: u32 = 0x2;
const ACE_APPEND_DATA: u32 = 0x4;
const ACE_READ_NAMED_ATTRS: u32 = 0x8;
const ACE_WRITE_NAMED_ATTRS: u32 = 0x10;
const ACE_EXECUTE: u32 = 0x20;
const ACE_DELETE_CHILD: u32 = 0x40;
const ACE_READ_ATTRIBUTES: u32 = 0x80;
const ACE_WRITE_ATTRIBUTES: u32 = 0x100;
const ACE_READ_ACL: u32 = 0x20000;
const ACE_WRITE_ACL: u32 = 0x40000;
const ACE_WRITE_OWNER: u32 = 0x80000;
const ACE_SYNCHRONIZE: u32 = 0x100000;
const ACE_IDENTIFIER_GROUP: u16 = 0x40;
const ACE_OWNER: u16 = 0x1000;
const ACE_GROUP: u16 = 0x2000;
const ACE_EVERYONE: u16 = 0x4000;
const ACE_TYPE_FLAGS: u16 = ACE_OWNER | ACE_GROUP | ACE_EVERYONE | ACE_IDENTIFIER_GROUP;
const ACE_INHERIT_ONLY_ACE: u16 = 0x8;
/// group@ entries carry both flags (`OWNING_GROUP` in zfs_acl.c).
const OWNING_GROUP: u16 = ACE_GROUP | ACE_IDENTIFIER_GROUP;
const ALLOW: u16 = 0;
const DENY: u16 = 1;

/// `z_pflags` bits (include/sys/zfs_znode.h).
pub(crate) const ZFS_XATTR: u64 = 0x1;
pub(crate) const ZFS_ACL_TRIVIAL: u64 = 0x4;
pub(crate) const ZFS_INHERIT_ACE: u64 = 0x2;
pub(crate) const ZFS_ACL_OBJ_ACE: u64 = 0x8;
pub(crate) const ZFS_ACL_PROTECTED: u64 = 0x10;
pub(crate) const ZFS_ACL_DEFAULTED: u64 = 0x20;
pub(crate) const ZFS_ACL_AUTO_INHERIT: u64 = 0x40;
pub(crate) const ZFS_NO_EXECS_DENIED: u64 = 0x100;
pub(crate) const ZFS_ARCHIVE: u64 = 0x8_0000_0000;
pub(crate) const ZFS_AV_MODIFIED: u64 = 0x400_0000_0000;
/// Flags the ACL owns (`V4_ACL_WIDE_FLAGS` / `ZFS_ACL_WIDE_FLAGS`, zfs_acl.c).
pub(crate) const V4_ACL_WIDE_FLAGS: u64 = ZFS_ACL_AUTO_INHERIT | ZFS_ACL_DEFAULTED | ZFS_ACL_PROTECTED;
pub(crate) const ZFS_ACL_WIDE_FLAGS: u64 =
    V4_ACL_WIDE_FLAGS | ZFS_ACL_TRIVIAL | ZFS_INHERIT_ACE | ZFS_ACL_OBJ_ACE;

fn corrupt(detail: impl Into<String>) -> ZplWriteError {
    ZplWriteError::Zpl(crate::ZplError::Corrupt { what: "system attributes", detail: detail.into() })
}

/// Attribute numbers of the ZPL attributes this layer writes, resolved once per objset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nums {
    pub mode: u16,
    pub size: u16,
    pub gen: u16,
    pub uid: u16,
    pub gid: u16,
    pub parent: u16,
    pub flags: u16,
    pub atime: u16,
    pub mtime: u16,
    pub ctime: u16,
    pub crtime: u16,
    pub links: u16,
    pub rdev: u16,
    pub xattr: u16,
    pub dacl_count: u16,
    pub dacl_aces: u16,
    pub symlink: u16,
}

/// The SA tables of one objset, as the writer keeps them.
pub(crate) struct SaTables {
    /// The SA master node (`SA_ATTRS` in the ZPL master node).
    pub master: u64,
    /// REGISTRY and LAYOUTS ZAPs (0 until created).
    pub reg_obj: u64,
    pub lay_obj: u64,
    pub registry: SaRegistry,
    /// Every layout, the built-in 0 and 1 included.
    pub layouts: BTreeMap<u64, Vec<u16>>,
    pub nums: Nums,
}

impl SaTables {
    /// Tables of a new SA master node: nothing on disk yet.
    pub fn new(master: u64) -> Result<SaTables> {
        SaTables::build(master, 0, 0, SaRegistry::for_zpl([]), BTreeMap::new())
    }

    fn build(
        master: u64,
        reg_obj: u64,
        lay_obj: u64,
        registry: SaRegistry,
        mut layouts: BTreeMap<u64, Vec<u16>>,
    ) -> Result<SaTables> {
        layouts.insert(0, sa::LEGACY_ZPL_LAYOUT.to_vec());
        layouts.insert(1, Vec::new());
        let n = |a: ZplAttr| {
            registry.zpl(a).ok_or_else(|| corrupt(format!("attribute {} has no number", a.name())))
        };
        let nums = Nums {
            mode: n(ZplAttr::Mode)?,
            size: n(ZplAttr::Size)?,
            gen: n(ZplAttr::Gen)?,
            uid: n(ZplAttr::Uid)?,
            gid: n(ZplAttr::Gid)?,
            parent: n(ZplAttr::Parent)?,
            flags: n(ZplAttr::Flags)?,
            atime: n(ZplAttr::Atime)?,
            mtime: n(ZplAttr::Mtime)?,
            ctime: n(ZplAttr::Ctime)?,
            crtime: n(ZplAttr::Crtime)?,
            links: n(ZplAttr::Links)?,
            rdev: n(ZplAttr::Rdev)?,
            xattr: n(ZplAttr::Xattr)?,
            dacl_count: n(ZplAttr::DaclCount)?,
            dacl_aces: n(ZplAttr::DaclAces)?,
            symlink: n(ZplAttr::Symlink)?,
        };
        Ok(SaTables { master, reg_obj, lay_obj, registry, layouts, nums })
    }

    /// Loads the tables named by the SA master node `master`.
    pub fn load(os: &DirtyObjset, zaps: &mut ZapCache, master: u64) -> Result<SaTables> {
        let reg_obj = zaps.lookup_u64(os, master, sa::SA_REGISTRY)?.unwrap_or(0);
        let lay_obj = zaps.lookup_u64(os, master, sa::SA_LAYOUTS)?.unwrap_or(0);
        let mut reg = Vec::new();
        if reg_obj != 0 {
            for (name, v) in zaps.entries(os, reg_obj)? {
                if let (Ok(s), Some(&x)) = (String::from_utf8(name), v.values.first()) {
                    reg.push((s, x));
                }
            }
        }
        let registry = SaRegistry::for_zpl(reg.iter().map(|(s, v)| (s.as_str(), *v)));
        let mut layouts = BTreeMap::new();
        if lay_obj != 0 {
            for (name, v) in zaps.entries(os, lay_obj)? {
                let num: u64 = std::str::from_utf8(&name)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| corrupt(format!("layout name {:?} is not a number", name)))?;
                let attrs = v.values.iter().map(|&x| u16::try_from(x).unwrap_or(u16::MAX)).collect();
                layouts.insert(num, attrs);
            }
        }
        SaTables::build(master, reg_obj, lay_obj, registry, layouts)
    }

    /// Writes the attributes not yet in the REGISTRY ZAP (creating it first if needed).
    fn register(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache) -> Result<()> {
        if self.registry.iter().all(|a| a.registered) {
            return Ok(());
        }
        if self.reg_obj == 0 {
            self.reg_obj = zaps.create(os, DMU_OT_SA_ATTR_REGISTRATION, 0, Vec::new())?;
            zaps.update_u64(os, self.master, sa::SA_REGISTRY, self.reg_obj)?;
        }
        let pending: Vec<(String, u64)> = self
            .registry
            .iter()
            .filter(|a| !a.registered)
            .map(|a| (a.name.clone(), sa::encode_registry_value(a.num, a.length, a.bswap)))
            .collect();
        for (name, v) in &pending {
            zaps.update(os, self.reg_obj, name.as_bytes(), ZapVal::u64(*v))?;
        }
        let mut all: Vec<(String, u64)> = Vec::new();
        for (name, v) in zaps.entries(os, self.reg_obj)? {
            if let (Ok(s), Some(&x)) = (String::from_utf8(name), v.values.first()) {
                all.push((s, x));
            }
        }
        self.registry = SaRegistry::for_zpl(all.iter().map(|(s, v)| (s.as_str(), *v)));
        Ok(())
    }

    /// The number of the layout listing `attrs`, registered if new.
    fn layout_for(&mut self, os: &mut DirtyObjset, zaps: &mut ZapCache, attrs: &[u16]) -> Result<u16> {
        if let Some((&n, _)) = self.layouts.iter().find(|(&n, l)| n > 1 && l.as_slice() == attrs) {
            return u16::try_from(n).map_err(|_| corrupt(format!("layout number {n} too large")));
        }
        let num = self.layouts.len() as u64;
        if num > 0x3ff {
            return Err(corrupt("no layout numbers left (1023 in use)"));
        }
        if self.lay_obj == 0 {
            self.lay_obj = zaps.create(os, DMU_OT_SA_ATTR_LAYOUTS, 0, Vec::new())?;
            zaps.update_u64(os, self.master, sa::SA_LAYOUTS, self.lay_obj)?;
        }
        let val = ZapVal { int_size: 2, values: attrs.iter().map(|&a| u64::from(a)).collect() };
        zaps.update(os, self.lay_obj, num.to_string().as_bytes(), val)?;
        self.layouts.insert(num, attrs.to_vec());
        Ok(num as u16)
    }

    /// Decodes an SA record (bonus or spill) into its attributes.
    pub fn decode(&self, buf: &[u8]) -> Result<SaRecord> {
        let order = sa::sa_byte_order(buf).ok_or_else(|| corrupt("bonus has no SA magic"))?;
        let hdr = sa::SaHdrPhys::parse(buf, order)?;
        let layout = self
            .layouts
            .get(&hdr.effective_layout())
            .ok_or_else(|| corrupt(format!("unknown layout {}", hdr.effective_layout())))?;
        let attrs = sa::decode_attrs(buf, order, layout, &self.registry)?;
        Ok(SaRecord { attrs: attrs.into_iter().map(|(n, b)| (n, b.to_vec())).collect(), order })
    }

    /// Encodes `rec` (registering tables and layout as needed) and stores it as the bonus of
    /// `obj`. Fails when it does not fit the bonus: spill blocks are not written.
    pub fn store(
        &mut self,
        os: &mut DirtyObjset,
        zaps: &mut ZapCache,
        obj: u64,
        rec: &SaRecord,
    ) -> Result<()> {
        let dn = os.dnode(obj)?.ok_or(dmu::DmuError::NoSuchObject(obj))?;
        let room = bonus_room(&dn);
        let need = self.encoded_len(rec)?;
        if need > room {
            return Err(ZplWriteError::new(
                crate::write::EOPNOTSUPP,
                format!("object {obj}: {need} bytes of attributes exceed the {room}-byte bonus (no spill support)"),
            ));
        }
        if rec.order != ByteOrder::Little {
            return Err(ZplWriteError::new(
                crate::write::EOPNOTSUPP,
                format!("object {obj}: rewriting big-endian attributes is not supported"),
            ));
        }
        self.register(os, zaps)?;
        let list: Vec<u16> = rec.attrs.iter().map(|(n, _)| *n).collect();
        let num = self.layout_for(os, zaps, &list)?;
        let values: Vec<&[u8]> = rec.attrs.iter().map(|(_, v)| v.as_slice()).collect();
        let buf = sa::encode_attrs(ByteOrder::Little, num, &list, &self.registry, &values)?;
        os.set_bonus(obj, buf)?;
        Ok(())
    }

    /// Size of the encoded record (header + 8-byte aligned attributes).
    pub fn encoded_len(&self, rec: &SaRecord) -> Result<usize> {
        let mut nvar = 0usize;
        let mut total = 0usize;
        for (n, v) in &rec.attrs {
            let reg =
                self.registry.get(*n).ok_or_else(|| corrupt(format!("attribute {n} not registered")))?;
            if reg.length == 0 {
                nvar += 1;
            }
            total = (total + v.len() + 7) & !7;
        }
        Ok(((6 + 2 * nvar + 7) & !7) + total)
    }
}

/// Bonus bytes the DMU lets a dnode use with its size and number of block pointers (832
/// for a 1 KiB dnode of `dnodesize=auto`, 320 for a 512-byte one).
pub(crate) fn bonus_room(dn: &DnodePhys) -> usize {
    dmu::tx::bonus_room(dn)
}

/// The attributes of one znode, in record order.
#[derive(Clone, Debug)]
pub(crate) struct SaRecord {
    pub attrs: Vec<(u16, Vec<u8>)>,
    pub order: ByteOrder,
}

impl SaRecord {
    pub fn new() -> SaRecord {
        SaRecord { attrs: Vec::new(), order: ByteOrder::Little }
    }

    pub fn get(&self, num: u16) -> Option<&[u8]> {
        self.attrs.iter().find(|(n, _)| *n == num).map(|(_, v)| v.as_slice())
    }

    pub fn u64(&self, num: u16) -> u64 {
        self.get(num).and_then(|b| self.order.u64_at(b, 0, "sa attribute").ok()).unwrap_or(0)
    }

    /// Replaces attribute `num` in place, or appends it (as `sa_modify_attrs` does).
    pub fn set(&mut self, num: u16, bytes: Vec<u8>) {
        match self.attrs.iter_mut().find(|(n, _)| *n == num) {
            Some(slot) => slot.1 = bytes,
            None => self.attrs.push((num, bytes)),
        }
    }

    pub fn set_u64(&mut self, num: u16, v: u64) {
        self.set(num, v.to_le_bytes().to_vec());
    }

    pub fn set_time(&mut self, num: u16, t: (u64, u64)) {
        self.set(num, time_bytes(t));
    }
}

/// A `[seconds, nanoseconds]` time attribute.
pub(crate) fn time_bytes(t: (u64, u64)) -> Vec<u8> {
    let mut v = t.0.to_le_bytes().to_vec();
    v.extend_from_slice(&t.1.to_le_bytes());
    v
}

/// Fills `Attrs` from one or more records (bonus, then spill).
pub(crate) fn apply_record(t: &SaTables, rec: &SaRecord, a: &mut Attrs) -> Result<()> {
    let o = rec.order;
    for (num, b) in &rec.attrs {
        let Some(reg) = t.registry.get(*num) else { continue };
        let u = |i: usize| o.u64_at(b, i * 8, "sa attribute").unwrap_or(0);
        match reg.name.as_str() {
            "ZPL_MODE" => a.mode = u(0),
            "ZPL_SIZE" => a.size = u(0),
            "ZPL_UID" => a.uid = u(0),
            "ZPL_GID" => a.gid = u(0),
            "ZPL_LINKS" => a.links = u(0),
            "ZPL_PARENT" => a.parent = u(0),
            "ZPL_GEN" => a.gen = u(0),
            "ZPL_RDEV" => a.rdev = u(0),
            "ZPL_FLAGS" => a.flags = u(0),
            "ZPL_XATTR" => a.xattr_dir = u(0),
            "ZPL_ATIME" => a.atime = (u(0), u(1)),
            "ZPL_MTIME" => a.mtime = (u(0), u(1)),
            "ZPL_CTIME" => a.ctime = (u(0), u(1)),
            "ZPL_CRTIME" => a.crtime = (u(0), u(1)),
            "ZPL_SYMLINK" => a.symlink = Some(b.clone()),
            "ZPL_DXATTR" => a.sa_xattrs = Some(b.clone()),
            _ => {}
        }
    }
    Ok(())
}

/// One ACE in its `zfs_ace_hdr_t` form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ace {
    pub ace_type: u16,
    pub flags: u16,
    pub mask: u32,
}

/// The trivial ACL OpenZFS derives from `mode` (`acl_trivial_access_masks` + `zfs_acl_chmod`
/// on an empty ACL).
pub(crate) fn trivial_acl(mode: u64, isdir: bool) -> Vec<Ace> {
    let m = |bit: u64| mode & bit != 0;
    let (r, x) = (ACE_READ_DATA, ACE_EXECUTE);
    let w = ACE_WRITE_DATA | ACE_APPEND_DATA | if isdir { ACE_DELETE_CHILD } else { 0 };
    let pick = |cond: [bool; 3]| {
        (if cond[0] { r } else { 0 }) | (if cond[1] { w } else { 0 }) | (if cond[2] { x } else { 0 })
    };
    // Owner lacks a right that group or others have: deny it to the owner explicitly.
    let deny1 = pick([!m(0o400) && m(0o044), !m(0o200) && m(0o022), !m(0o100) && m(0o011)]);
    // Group lacks a right that others have.
    let deny2 = pick([!m(0o040) && m(0o004), !m(0o020) && m(0o002), !m(0o010) && m(0o001)]);
    // Owner has a right the group lacks but others have: grant it before group@ deny.
    let allow0 = pick([
        m(0o400) && !m(0o040) && m(0o004),
        m(0o200) && !m(0o020) && m(0o002),
        m(0o100) && !m(0o010) && m(0o001),
    ]);
    let base = ACE_READ_ACL | ACE_READ_ATTRIBUTES | ACE_READ_NAMED_ATTRS | ACE_SYNCHRONIZE;
    let owner = base
        | ACE_WRITE_ATTRIBUTES
        | ACE_WRITE_OWNER
        | ACE_WRITE_ACL
        | ACE_WRITE_NAMED_ATTRS
        | pick([m(0o400), m(0o200), m(0o100)]);
    let group = base | pick([m(0o040), m(0o020), m(0o010)]);
    let everyone = base | pick([m(0o004), m(0o002), m(0o001)]);
    let mut out = Vec::with_capacity(6);
    let ace = |ace_type, flags, mask| Ace { ace_type, flags, mask };
    if allow0 != 0 {
        out.push(ace(ALLOW, ACE_OWNER, allow0));
    }
    if deny1 != 0 {
        out.push(ace(DENY, ACE_OWNER, deny1));
    }
    if deny2 != 0 {
        out.push(ace(DENY, OWNING_GROUP, deny2));
    }
    out.push(ace(ALLOW, ACE_OWNER, owner));
    out.push(ace(ALLOW, OWNING_GROUP, group));
    out.push(ace(ALLOW, ACE_EVERYONE, everyone));
    out
}

/// `ZPL_DACL_ACES` bytes of an ACL.
pub(crate) fn encode_aces(aces: &[Ace]) -> Vec<u8> {
    let mut v = Vec::with_capacity(aces.len() * 8);
    for a in aces {
        v.extend_from_slice(&a.ace_type.to_le_bytes());
        v.extend_from_slice(&a.flags.to_le_bytes());
        v.extend_from_slice(&a.mask.to_le_bytes());
    }
    v
}

/// The mode an ACL grants (`zfs_mode_compute` for owner@/group@/everyone@ entries) and
/// whether everyone may execute (`ZFS_NO_EXECS_DENIED`).
pub(crate) fn mode_compute(fmode: u64, aces: &[Ace]) -> (u64, bool) {
    let mut mode = fmode & (0o170000 | 0o7000);
    let mut seen = 0u64;
    let mut grant = |bits: [u64; 3], ace: &Ace, mode: &mut u64| {
        for (i, right) in [ACE_READ_DATA, ACE_WRITE_DATA, ACE_EXECUTE].iter().enumerate() {
            if ace.mask & right != 0 {
                let b = bits[i];
                if seen & b == 0 {
                    seen |= b;
                    if ace.ace_type == ALLOW {
                        *mode |= b;
                    }
                }
            }
        }
    };
    for a in aces {
        if a.flags & ACE_INHERIT_ONLY_ACE != 0 || (a.ace_type != ALLOW && a.ace_type != DENY) {
            continue;
        }
        match a.flags & ACE_TYPE_FLAGS {
            ACE_OWNER => grant([0o400, 0o200, 0o100], a, &mut mode),
            OWNING_GROUP => grant([0o040, 0o020, 0o010], a, &mut mode),
            // everyone@ fills in every class not yet decided, per right.
            ACE_EVERYONE => {
                grant([0o400, 0o200, 0o100], a, &mut mode);
                grant([0o040, 0o020, 0o010], a, &mut mode);
                grant([0o004, 0o002, 0o001], a, &mut mode);
            }
            _ => {}
        }
    }
    let all_x = 0o111;
    (mode, seen & all_x == all_x && mode & all_x == all_x)
}

/// ACL attributes and flags of a znode with `mode` (create or chmod with aclmode=discard):
/// returns (DACL count, DACL bytes, the mode after `zfs_mode_compute`, new flags).
pub(crate) fn acl_for_mode(
    mode: u64,
    isdir: bool,
    old_flags: u64,
    creating: bool,
) -> (u64, Vec<u8>, u64, u64) {
    let aces = trivial_acl(mode, isdir);
    // zfs_acl_ids_create: a fresh ACL is trivial, directories auto-inherit; zfs_acl_chmod_setattr
    // keeps the V4-wide flags of the old ACL.
    let hints = if creating {
        ZFS_ACL_TRIVIAL | if isdir { ZFS_ACL_AUTO_INHERIT } else { 0 }
    } else {
        (old_flags & V4_ACL_WIDE_FLAGS) | ZFS_ACL_TRIVIAL
    };
    let (mode2, no_exec_denied) = mode_compute(mode, &aces);
    let mut flags = (old_flags & !ZFS_ACL_WIDE_FLAGS) | hints;
    if no_exec_denied {
        flags |= ZFS_NO_EXECS_DENIED;
    } else {
        flags &= !ZFS_NO_EXECS_DENIED;
    }
    (aces.len() as u64, encode_aces(&aces), mode2, flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trivial_acls() {
        // 0755 directory: owner@, group@, everyone@ only (24 bytes), all execs allowed.
        let a = trivial_acl(0o40755, true);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0], Ace { ace_type: ALLOW, flags: ACE_OWNER, mask: 0x1e01ff });
        assert_eq!(a[1], Ace { ace_type: ALLOW, flags: 0x2040, mask: 0x1200a9 });
        assert_eq!(a[2], Ace { ace_type: ALLOW, flags: 0x4000, mask: 0x1200a9 });
        assert_eq!(mode_compute(0o40755, &a), (0o40755, true));
        // 0644 file: no exec for anyone.
        let a = trivial_acl(0o100644, false);
        assert_eq!(a.len(), 3);
        assert_eq!(mode_compute(0o100644, &a), (0o100644, false));
        // 0604: group lacks read that others have -> allow0 + deny2.
        let a = trivial_acl(0o100604, false);
        assert_eq!(a.len(), 5);
        assert_eq!(a[0], Ace { ace_type: ALLOW, flags: ACE_OWNER, mask: ACE_READ_DATA });
        assert_eq!(a[1], Ace { ace_type: DENY, flags: OWNING_GROUP, mask: ACE_READ_DATA });
        // 0077: owner denied everything group/others have.
        let a = trivial_acl(0o100077, false);
        assert_eq!(a[0].ace_type, DENY);
        for m in [0o0, 0o7, 0o70, 0o700, 0o604, 0o4755, 0o1777, 0o123, 0o765, 0o077] {
            for dir in [false, true] {
                let t = if dir { 0o40000 } else { 0o100000 };
                assert_eq!(mode_compute(t | m, &trivial_acl(t | m, dir)).0, t | m, "mode {m:o}");
            }
        }
    }

    #[test]
    fn flags_of_new_znodes() {
        // A new 0755 root as zdb shows it: 0x40800000144.
        let (n, aces, mode, flags) = acl_for_mode(0o40755, true, ZFS_ARCHIVE | ZFS_AV_MODIFIED, true);
        assert_eq!((n, aces.len(), mode, flags), (3, 24, 0o40755, 0x408_0000_0144));
        let (_, _, _, flags) = acl_for_mode(0o100644, false, ZFS_ARCHIVE | ZFS_AV_MODIFIED, true);
        assert_eq!(flags, 0x408_0000_0004);
        // chmod keeps the directory's auto-inherit flag and recomputes the exec flag.
        let (_, _, _, f2) = acl_for_mode(0o40700, true, 0x408_0000_0144, false);
        assert_eq!(f2, 0x408_0000_0044);
    }

    proptest::proptest! {
        /// Decoding arbitrary bonus bytes never panics.
        #[test]
        fn decode_never_panics(buf in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
                               layout in 0u16..8) {
            let mut t = SaTables::new(2).unwrap();
            t.layouts.insert(2, vec![5, 6, 17, 19, 20]);
            let mut b = buf.clone();
            if b.len() >= 6 {
                b[..4].copy_from_slice(&sa::SA_MAGIC.to_le_bytes());
                b[4] = layout as u8;
            }
            for input in [&buf, &b] {
                if let Ok(rec) = t.decode(input) {
                    let mut a = Attrs::default();
                    let _ = apply_record(&t, &rec, &mut a);
                    let _ = t.encoded_len(&rec);
                }
            }
        }
    }
}
