//! File attributes: from system attributes (ZPL ≥ 5) or the legacy `znode_phys_t` bonus.
//!
//! SA facts (OpenZFS `module/zfs/sa.c`, `include/sys/sa_impl.h`): the SA master ZAP names a
//! REGISTRY ZAP (attribute name → packed number/length/byteswap) and a LAYOUTS ZAP (layout
//! number as a decimal string → array of u16 attribute numbers). A bonus (or spill) buffer
//! starts with an SA header naming its layout; attributes follow in layout order, each
//! 8-byte aligned, variable-length ones sized by the header's length array. When the bonus
//! overflows, the remaining attributes live in the spill block under their own header.

use crate::{Result, ZplError};
use dmu::{Dnode, Objset};
use ondisk::nvlist::NvList;
use ondisk::sa::{self, SaLayouts, SaRegistry};
use ondisk::znode::ZnodePhys;
use ondisk::ByteOrder;

/// `DMU_OT_ZNODE`: bonus holds a `znode_phys_t`.
const DMU_OT_ZNODE: u8 = 17;
/// `DMU_OT_SA`: bonus holds system attributes.
const DMU_OT_SA: u8 = 44;

/// File types, from the mode's `S_IFMT` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
}

/// The attributes of one file, decoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub object: u64,
    pub mode: u64,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub links: u64,
    pub parent: u64,
    pub gen: u64,
    pub rdev: u64,
    pub flags: u64,
    pub atime: (u64, u64),
    pub mtime: (u64, u64),
    pub ctime: (u64, u64),
    pub crtime: (u64, u64),
    /// Object of the hidden xattr directory (0 = none).
    pub xattr_dir: u64,
    /// Inline symlink target (SA attribute or legacy bonus tail).
    pub symlink: Option<Vec<u8>>,
    /// SA xattrs: a packed nvlist of name → bytes.
    pub sa_xattrs: Option<Vec<u8>>,
    /// Bytes the object takes on disk (`dn_used`), plus, on a writable mount, the new data
    /// it holds in the open txg (see `DirtyObjset::pending_bytes`).
    pub used_bytes: u64,
    /// Slots of its dnode.
    pub dnode_slots: u64,
    pub blksize: u64,
}

impl Attrs {
    /// `st_blocks` as OpenZFS reports it (`dmu_object_size_from_db`): the used bytes in
    /// 512-byte units, rounded to the nearest, plus one per dnode slot, so that a file
    /// with data never reads as wholly sparse (tools such as `cp` and `mv` punch holes
    /// in a copy whose source looks sparse).
    pub fn blocks512(&self) -> u64 {
        (self.used_bytes.saturating_add(256) >> 9) + self.dnode_slots.max(1)
    }

    /// The file type from the mode.
    pub fn kind(&self) -> FileType {
        match self.mode & 0o170000 {
            0o040000 => FileType::Directory,
            0o120000 => FileType::Symlink,
            0o020000 => FileType::CharDevice,
            0o060000 => FileType::BlockDevice,
            0o010000 => FileType::Fifo,
            0o140000 => FileType::Socket,
            _ => FileType::Regular,
        }
    }
}

/// The objset's SA registry and layouts.
pub struct SaTables {
    registry: SaRegistry,
    layouts: SaLayouts,
}

impl SaTables {
    /// Loads the tables named by the SA master object.
    pub fn load(os: &Objset, master: u64) -> Result<SaTables> {
        let reg_obj = zap::lookup_u64(os, master, sa::SA_REGISTRY)?;
        let lay_obj = zap::lookup_u64(os, master, sa::SA_LAYOUTS)?;
        let reg_entries = match reg_obj {
            Some(o) => zap::list(os, o)?,
            None => Vec::new(),
        };
        let registry = SaRegistry::for_zpl(
            reg_entries
                .iter()
                .filter_map(|e| e.first_u64().map(|v| (std::str::from_utf8(&e.name).unwrap_or(""), v))),
        );
        let lay_entries = match lay_obj {
            Some(o) => zap::list(os, o)?,
            None => Vec::new(),
        };
        let layouts = SaLayouts::from_entries(lay_entries.iter().map(|e| {
            (std::str::from_utf8(&e.name).unwrap_or("?"), e.values.iter().map(|v| *v as u16).collect())
        }))?;
        Ok(SaTables { registry, layouts })
    }

    fn decode_into(&self, buf: &[u8], order: ByteOrder, a: &mut Attrs) -> Result<()> {
        let hdr = sa::SaHdrPhys::parse(buf, order)?;
        let layout = self.layouts.get(hdr.effective_layout()).ok_or_else(|| ZplError::Corrupt {
            what: "SA header",
            detail: format!("object {}: unknown layout {}", a.object, hdr.effective_layout()),
        })?;
        for (num, bytes) in sa::decode_attrs(buf, order, layout, &self.registry)? {
            let Some(reg) = self.registry.get(num) else {
                continue;
            };
            apply(a, &reg.name, bytes, order)?;
        }
        Ok(())
    }
}

fn u64s(b: &[u8], order: ByteOrder) -> Result<Vec<u64>> {
    Ok(sa::attr_u64s(b, order)?)
}

fn one(b: &[u8], order: ByteOrder) -> Result<u64> {
    Ok(u64s(b, order)?.first().copied().unwrap_or(0))
}

fn pair(b: &[u8], order: ByteOrder) -> Result<(u64, u64)> {
    let v = u64s(b, order)?;
    Ok((v.first().copied().unwrap_or(0), v.get(1).copied().unwrap_or(0)))
}

/// Stores one named ZPL attribute.
fn apply(a: &mut Attrs, name: &str, b: &[u8], order: ByteOrder) -> Result<()> {
    match name {
        "ZPL_MODE" => a.mode = one(b, order)?,
        "ZPL_SIZE" => a.size = one(b, order)?,
        "ZPL_UID" => a.uid = one(b, order)?,
        "ZPL_GID" => a.gid = one(b, order)?,
        "ZPL_LINKS" => a.links = one(b, order)?,
        "ZPL_PARENT" => a.parent = one(b, order)?,
        "ZPL_GEN" => a.gen = one(b, order)?,
        "ZPL_RDEV" => a.rdev = one(b, order)?,
        "ZPL_FLAGS" => a.flags = one(b, order)?,
        "ZPL_XATTR" => a.xattr_dir = one(b, order)?,
        "ZPL_ATIME" => a.atime = pair(b, order)?,
        "ZPL_MTIME" => a.mtime = pair(b, order)?,
        "ZPL_CTIME" => a.ctime = pair(b, order)?,
        "ZPL_CRTIME" => a.crtime = pair(b, order)?,
        "ZPL_SYMLINK" => a.symlink = Some(b.to_vec()),
        "ZPL_DXATTR" => a.sa_xattrs = Some(b.to_vec()),
        _ => {}
    }
    Ok(())
}

/// Decodes the attributes of a ZPL object.
pub fn decode(os: &Objset, dn: &Dnode, sa: Option<&SaTables>) -> Result<Attrs> {
    let mut a = Attrs {
        object: dn.object,
        used_bytes: dn.used_bytes(),
        dnode_slots: dn.slots() as u64,
        blksize: dn.data_block_size(),
        ..Default::default()
    };
    let order = os.dnode_byte_order();
    match dn.bonustype {
        DMU_OT_SA => {
            let t = sa.ok_or_else(|| ZplError::Corrupt {
                what: "object",
                detail: format!("object {} has SA attributes but the objset has no SA tables", dn.object),
            })?;
            let border = sa::sa_byte_order(&dn.bonus).unwrap_or(order);
            t.decode_into(&dn.bonus, border, &mut a)?;
            if let Some(spill) = os.read_spill(dn)? {
                let sorder = sa::sa_byte_order(&spill).unwrap_or(order);
                t.decode_into(&spill, sorder, &mut a)?;
            }
        }
        DMU_OT_ZNODE => {
            let z = ZnodePhys::parse(&dn.bonus, order)?;
            a.mode = z.mode;
            a.size = z.size;
            a.uid = z.uid;
            a.gid = z.gid;
            a.links = z.links;
            a.parent = z.parent;
            a.gen = z.gen;
            a.rdev = z.rdev;
            a.flags = z.flags;
            a.xattr_dir = z.xattr;
            a.atime = (z.atime[0], z.atime[1]);
            a.mtime = (z.mtime[0], z.mtime[1]);
            a.ctime = (z.ctime[0], z.ctime[1]);
            a.crtime = (z.crtime[0], z.crtime[1]);
            if a.kind() == FileType::Symlink {
                a.symlink = z.inline_symlink(&dn.bonus)?.map(<[u8]>::to_vec);
            }
        }
        other => {
            return Err(ZplError::Corrupt {
                what: "object",
                detail: format!("object {} has bonus type {other}, not a ZPL file", dn.object),
            })
        }
    }
    Ok(a)
}

/// The SA xattrs of a file as (name, value) pairs.
pub fn sa_xattrs(a: &Attrs) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let Some(raw) = &a.sa_xattrs else {
        return Ok(Vec::new());
    };
    let nv = NvList::decode(raw)?;
    let mut out = Vec::new();
    for (name, _) in &nv.pairs {
        if let Some(v) = nv.get_bytes(name) {
            out.push((name.as_bytes().to_vec(), v.to_vec()));
        }
    }
    Ok(out)
}
