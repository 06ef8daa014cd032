//! System attributes (SA): the attribute records in SA bonus buffers and spill blocks, the
//! attribute registry and layouts (OpenZFS include/sys/sa_impl.h, module/zfs/sa.c,
//! include/sys/zfs_sa.h).
//!
//! Theory. An objset using SAs (ZPL version >= 5) has an "SA master node" ZAP (named
//! `SA_ATTRS` in the ZPL master node) with two entries:
//!
//! * `REGISTRY` -> a ZAP mapping attribute names to a packed u64 (see
//!   [`decode_registry_value`]): attribute number, fixed length (0 = variable) and byteswap kind.
//! * `LAYOUTS` -> a ZAP mapping a layout number, written in decimal, to an array of u16
//!   attribute numbers: the order of the attributes in a record.
//!
//! A record (the bonus of a `DMU_OT_SA` dnode, or its spill block) is:
//!
//! ```text
//! off size field
//!   0    4 sa_magic = 0x2F505A
//!   4    2 sa_layout_info: bits 0-9 layout number, bits 10-15 header size / 8
//!   6  2*n sa_lengths[n]: lengths of the n variable-length attributes, in layout order
//!   H      attribute data, in layout order, each starting 8-byte aligned
//!          (H = 6 + 2n rounded up to 8)
//! ```
//!
//! Multi-byte attribute contents are stored in the writer's byte order, the same order as the
//! record's header; this module returns raw slices and [`attr_u64s`] decodes u64 arrays.
//! Layout number 0 in an SA header means layout 1, the empty "dummy" layout; layout 0 proper is
//! the legacy ZPL layout of `znode_phys_t` bonuses (see [`LEGACY_ZPL_LAYOUT`]).
//! ZPL objsets whose registry lacks the 16 legacy attributes still know them by fixed numbers;
//! [`SaRegistry::for_zpl`] mirrors `sa_attr_table_setup` so such pools decode.
//! Extended attributes stored as SAs (`ZPL_DXATTR`) are a packed nvlist: callers hand the
//! bytes to the nvlist module.

use std::collections::BTreeMap;

use crate::bytes::{slice, ByteOrder};
use crate::error::{Error, Result};

/// `SA_MAGIC`.
pub const SA_MAGIC: u32 = 0x2F505A;
/// Name of the layouts ZAP in the SA master node.
pub const SA_LAYOUTS: &str = "LAYOUTS";
/// Name of the registry ZAP in the SA master node.
pub const SA_REGISTRY: &str = "REGISTRY";

/// `sa_bswap_type_t`: how an attribute is byteswapped.
pub const SA_UINT64_ARRAY: u8 = 0;
pub const SA_UINT32_ARRAY: u8 = 1;
pub const SA_UINT16_ARRAY: u8 = 2;
pub const SA_UINT8_ARRAY: u8 = 3;
pub const SA_ACL: u8 = 4;

/// One registered attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaAttrReg {
    pub num: u16,
    /// Fixed length in bytes; 0 for variable-length attributes.
    pub length: u16,
    /// `SA_UINT64_ARRAY` ... `SA_ACL`.
    pub bswap: u8,
    pub name: String,
    /// Present in the on-disk registry (false for built-in defaults).
    pub registered: bool,
}

/// Unpacks a registry value (`ATTR_NUM`, `ATTR_LENGTH`, `ATTR_BSWAP`):
/// bits 0-15 attribute number, 16-23 byteswap kind, 24-39 length. Returns (num, length, bswap).
pub fn decode_registry_value(v: u64) -> (u16, u16, u8) {
    ((v & 0xffff) as u16, ((v >> 24) & 0xffff) as u16, ((v >> 16) & 0xff) as u8)
}

/// Packs a registry value (`ATTR_ENCODE`).
pub fn encode_registry_value(num: u16, length: u16, bswap: u8) -> u64 {
    u64::from(num) | (u64::from(bswap) << 16) | (u64::from(length) << 24)
}

/// ZPL attributes (`zpl_attr_t`, include/sys/zfs_sa.h), in `zfs_attr_table` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZplAttr {
    Atime,
    Mtime,
    Ctime,
    Crtime,
    Gen,
    Mode,
    Size,
    Parent,
    Links,
    Xattr,
    Rdev,
    Flags,
    Uid,
    Gid,
    Pad,
    ZnodeAcl,
    DaclCount,
    Symlink,
    Scanstamp,
    DaclAces,
    Dxattr,
    Projid,
    Seq,
}

/// All ZPL attributes in table order; the first 16 are the legacy ones, numbered 0..=15.
pub const ZPL_ATTRS: [ZplAttr; 23] = {
    use ZplAttr::*;
    [
        Atime, Mtime, Ctime, Crtime, Gen, Mode, Size, Parent, Links, Xattr, Rdev, Flags, Uid, Gid, Pad,
        ZnodeAcl, DaclCount, Symlink, Scanstamp, DaclAces, Dxattr, Projid, Seq,
    ]
};

/// `sa_legacy_zpl_layout`: layout 0, the attribute order of a `znode_phys_t` bonus.
pub const LEGACY_ZPL_LAYOUT: [u16; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

impl ZplAttr {
    /// (name, length, byteswap) as in `zfs_attr_table` (module/zfs/zfs_sa.c).
    pub fn info(self) -> (&'static str, u16, u8) {
        use ZplAttr::*;
        match self {
            Atime => ("ZPL_ATIME", 16, SA_UINT64_ARRAY),
            Mtime => ("ZPL_MTIME", 16, SA_UINT64_ARRAY),
            Ctime => ("ZPL_CTIME", 16, SA_UINT64_ARRAY),
            Crtime => ("ZPL_CRTIME", 16, SA_UINT64_ARRAY),
            Gen => ("ZPL_GEN", 8, SA_UINT64_ARRAY),
            Mode => ("ZPL_MODE", 8, SA_UINT64_ARRAY),
            Size => ("ZPL_SIZE", 8, SA_UINT64_ARRAY),
            Parent => ("ZPL_PARENT", 8, SA_UINT64_ARRAY),
            Links => ("ZPL_LINKS", 8, SA_UINT64_ARRAY),
            Xattr => ("ZPL_XATTR", 8, SA_UINT64_ARRAY),
            Rdev => ("ZPL_RDEV", 8, SA_UINT64_ARRAY),
            Flags => ("ZPL_FLAGS", 8, SA_UINT64_ARRAY),
            Uid => ("ZPL_UID", 8, SA_UINT64_ARRAY),
            Gid => ("ZPL_GID", 8, SA_UINT64_ARRAY),
            Pad => ("ZPL_PAD", 32, SA_UINT64_ARRAY),
            ZnodeAcl => ("ZPL_ZNODE_ACL", 88, SA_UINT8_ARRAY),
            DaclCount => ("ZPL_DACL_COUNT", 8, SA_UINT64_ARRAY),
            Symlink => ("ZPL_SYMLINK", 0, SA_UINT8_ARRAY),
            Scanstamp => ("ZPL_SCANSTAMP", 32, SA_UINT8_ARRAY),
            DaclAces => ("ZPL_DACL_ACES", 0, SA_ACL),
            Dxattr => ("ZPL_DXATTR", 0, SA_UINT8_ARRAY),
            Projid => ("ZPL_PROJID", 8, SA_UINT64_ARRAY),
            Seq => ("ZPL_SEQ", 8, SA_UINT64_ARRAY),
        }
    }

    /// The attribute's registry name, e.g. "ZPL_MODE".
    pub fn name(self) -> &'static str {
        self.info().0
    }
}

/// The attribute table of one objset: registered attributes plus built-in defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaRegistry {
    by_num: BTreeMap<u16, SaAttrReg>,
}

impl SaRegistry {
    /// The registry as stored: `(name, packed value)` pairs of the REGISTRY ZAP.
    pub fn from_entries<'n>(entries: impl IntoIterator<Item = (&'n str, u64)>) -> SaRegistry {
        let mut r = SaRegistry::default();
        for (name, v) in entries {
            let (num, length, bswap) = decode_registry_value(v);
            let reg = SaAttrReg { num, length, bswap, name: name.to_string(), registered: true };
            r.by_num.entry(num).or_insert(reg);
        }
        r
    }

    /// The table a ZPL objset sees (`sa_attr_table_setup` with `zfs_attr_table`): the
    /// registry, then legacy attributes 0..=15 where the registry has no entry, then every
    /// other ZPL attribute the registry lacks, numbered from the registry's entry count
    /// upwards (from 16 when the registry is empty or absent), as OpenZFS numbers them before
    /// registering them. A number already taken keeps its first owner, as in OpenZFS.
    pub fn for_zpl<'n>(entries: impl IntoIterator<Item = (&'n str, u64)>) -> SaRegistry {
        let mut r = SaRegistry::from_entries(entries);
        let registered = r.by_num.len();
        for (i, a) in ZPL_ATTRS.iter().take(16).enumerate() {
            r.by_num.entry(i as u16).or_insert_with(|| default_reg(*a, i as u16));
        }
        let mut next = if registered == 0 { 16 } else { registered as u16 };
        for a in ZPL_ATTRS.iter().skip(16) {
            if r.by_name(a.name()).is_none() {
                r.by_num.entry(next).or_insert_with(|| default_reg(*a, next));
                next = next.saturating_add(1);
            }
        }
        r
    }

    /// The attribute numbered `num`.
    pub fn get(&self, num: u16) -> Option<&SaAttrReg> {
        self.by_num.get(&num)
    }

    /// The attribute named `name`.
    pub fn by_name(&self, name: &str) -> Option<&SaAttrReg> {
        self.by_num.values().find(|a| a.name == name)
    }

    /// The number of a ZPL attribute in this objset.
    pub fn zpl(&self, attr: ZplAttr) -> Option<u16> {
        self.by_name(attr.name()).map(|a| a.num)
    }

    /// All attributes in number order.
    pub fn iter(&self) -> impl Iterator<Item = &SaAttrReg> {
        self.by_num.values()
    }
}

fn default_reg(a: ZplAttr, num: u16) -> SaAttrReg {
    let (name, length, bswap) = a.info();
    SaAttrReg { num, length, bswap, name: name.to_string(), registered: false }
}

/// The layouts of one objset: the LAYOUTS ZAP plus the two built-in layouts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaLayouts {
    by_num: BTreeMap<u64, Vec<u16>>,
}

impl SaLayouts {
    /// Built-in layouts only: 0 = legacy ZPL, 1 = empty.
    pub fn builtin() -> SaLayouts {
        let mut by_num = BTreeMap::new();
        by_num.insert(0, LEGACY_ZPL_LAYOUT.to_vec());
        by_num.insert(1, Vec::new());
        SaLayouts { by_num }
    }

    /// Adds the LAYOUTS ZAP entries: decimal name -> u16 array.
    pub fn from_entries<'n>(entries: impl IntoIterator<Item = (&'n str, Vec<u16>)>) -> Result<SaLayouts> {
        let mut l = SaLayouts::builtin();
        for (name, attrs) in entries {
            let num: u64 = name
                .parse()
                .map_err(|_| Error::corrupt("sa layouts", format!("layout name {name:?} is not a number")))?;
            l.by_num.insert(num, attrs);
        }
        Ok(l)
    }

    /// The attribute list of layout `num`.
    pub fn get(&self, num: u64) -> Option<&[u16]> {
        self.by_num.get(&num).map(Vec::as_slice)
    }
}

/// A decoded SA header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaHdrPhys {
    pub layout_info: u16,
    /// Layout number as stored (bits 0-9).
    pub layout_num: u16,
    /// Header size in bytes (bits 10-15, times 8).
    pub hdr_size: usize,
}

impl SaHdrPhys {
    /// Decodes the 6 fixed header bytes; the magic must read as `SA_MAGIC` in `order`.
    pub fn parse(buf: &[u8], order: ByteOrder) -> Result<SaHdrPhys> {
        let magic = order.u32_at(buf, 0, "sa_magic")?;
        if magic != SA_MAGIC {
            let hint = if magic.swap_bytes() == SA_MAGIC { " (other byte order)" } else { "" };
            return Err(Error::corrupt("sa_hdr_phys", format!("bad magic {magic:#x}{hint}")));
        }
        let layout_info = order.u16_at(buf, 4, "sa_layout_info")?;
        Ok(SaHdrPhys {
            layout_info,
            layout_num: layout_info & 0x3ff,
            hdr_size: usize::from(layout_info >> 10) * 8,
        })
    }

    /// The layout to use (`SA_LAYOUT_NUM`): stored 0 means the empty layout 1.
    pub fn effective_layout(&self) -> u64 {
        if self.layout_num == 0 {
            1
        } else {
            u64::from(self.layout_num)
        }
    }
}

/// The byte order whose reading of the first 4 bytes is `SA_MAGIC`, if any.
pub fn sa_byte_order(buf: &[u8]) -> Option<ByteOrder> {
    [ByteOrder::Little, ByteOrder::Big]
        .into_iter()
        .find(|o| o.u32_at(buf, 0, "sa_magic").ok() == Some(SA_MAGIC))
}

fn round8(x: usize) -> usize {
    (x + 7) & !7
}

fn attr_length(registry: &SaRegistry, attr: u16) -> Result<u16> {
    registry
        .get(attr)
        .map(|a| a.length)
        .ok_or_else(|| Error::corrupt("sa layout", format!("attribute {attr} is not in the registry")))
}

/// Splits an SA record (bonus or spill) into `(attribute number, bytes)` in layout order.
/// `layout` is the attribute list of the header's layout ([`SaHdrPhys::effective_layout`]).
pub fn decode_attrs<'a>(
    buf: &'a [u8],
    order: ByteOrder,
    layout: &[u16],
    registry: &SaRegistry,
) -> Result<Vec<(u16, &'a [u8])>> {
    let hdr = SaHdrPhys::parse(buf, order)?;
    let mut nvar = 0usize;
    for &a in layout {
        if attr_length(registry, a)? == 0 {
            nvar += 1;
        }
    }
    let data_start = round8(6 + 2 * nvar);
    if hdr.hdr_size != data_start {
        return Err(Error::corrupt(
            "sa_hdr_phys",
            format!("header size {} but {nvar} variable lengths need {data_start}", hdr.hdr_size),
        ));
    }
    let mut out = Vec::with_capacity(layout.len());
    let (mut off, mut var_idx) = (data_start, 0usize);
    for &a in layout {
        let len = match attr_length(registry, a)? {
            0 => {
                var_idx += 1;
                order.u16_at(buf, 6 + 2 * (var_idx - 1), "sa_lengths")?
            }
            n => n,
        };
        out.push((a, slice(buf, off, usize::from(len), "sa attribute")?));
        off = round8(off + usize::from(len));
    }
    Ok(out)
}

/// Builds an SA record for `layout_num` whose attributes (in `layout` order) hold `values`.
pub fn encode_attrs(
    order: ByteOrder,
    layout_num: u16,
    layout: &[u16],
    registry: &SaRegistry,
    values: &[&[u8]],
) -> Result<Vec<u8>> {
    if values.len() != layout.len() || layout_num > 0x3ff {
        return Err(Error::corrupt("sa encode", "values do not match the layout"));
    }
    let mut lengths = Vec::new();
    for (&a, v) in layout.iter().zip(values) {
        match attr_length(registry, a)? {
            0 => lengths.push(u16::try_from(v.len()).map_err(|_| Error::corrupt("sa encode", "too long"))?),
            n if usize::from(n) == v.len() => {}
            n => {
                return Err(Error::corrupt(
                    "sa encode",
                    format!("attribute {a} needs {n} bytes, got {}", v.len()),
                ))
            }
        }
    }
    let hdr_size = round8(6 + 2 * lengths.len());
    if hdr_size / 8 > 0x3f {
        return Err(Error::corrupt("sa encode", "too many variable-length attributes"));
    }
    let total = values.iter().fold(hdr_size, |off, v| round8(off + v.len()));
    let mut buf = vec![0u8; total];
    order.put_u32(&mut buf, 0, SA_MAGIC);
    order.put_u16(&mut buf, 4, ((hdr_size / 8) as u16) << 10 | layout_num);
    for (i, &l) in lengths.iter().enumerate() {
        order.put_u16(&mut buf, 6 + 2 * i, l);
    }
    let mut off = hdr_size;
    for v in values {
        buf[off..off + v.len()].copy_from_slice(v);
        off = round8(off + v.len());
    }
    Ok(buf)
}

/// Decodes an attribute holding u64s (length a multiple of 8) in `order`.
pub fn attr_u64s(data: &[u8], order: ByteOrder) -> Result<Vec<u64>> {
    if !data.len().is_multiple_of(8) {
        return Err(Error::corrupt("sa attribute", format!("{} bytes is not u64s", data.len())));
    }
    (0..data.len() / 8).map(|i| order.u64_at(data, i * 8, "sa attribute")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_packing() {
        // From zdb on a real pool: "ZPL_ZNODE_ACL = 5803000f : [88:3:15]".
        assert_eq!(decode_registry_value(0x5803000f), (15, 88, 3));
        assert_eq!(encode_registry_value(19, 0, SA_ACL), 0x40013);
    }

    #[test]
    fn zpl_defaults_without_registry() {
        let r = SaRegistry::for_zpl([]);
        assert_eq!(r.zpl(ZplAttr::Mode), Some(5));
        assert_eq!(r.zpl(ZplAttr::DaclCount), Some(16));
        assert_eq!(r.zpl(ZplAttr::Seq), Some(22));
        assert_eq!(r.get(17).unwrap().length, 0);
        let r = SaRegistry::for_zpl([("ZPL_SYMLINK", encode_registry_value(40, 0, 3))]);
        assert_eq!(r.zpl(ZplAttr::Symlink), Some(40));
        assert_eq!(r.zpl(ZplAttr::Mode), Some(5));
        // OpenZFS numbers unregistered attributes from the registry's entry count (1 here);
        // number 1 already belongs to legacy ZPL_MTIME, so ZPL_DACL_COUNT gets none.
        assert_eq!(r.zpl(ZplAttr::DaclCount), None);
    }

    #[test]
    fn encode_decode_with_variable_attrs() {
        let r = SaRegistry::for_zpl([]);
        let layout = [5u16, 17, 6, 19];
        for order in [ByteOrder::Little, ByteOrder::Big] {
            let mode = 0o100644u64;
            let mode_b = match order {
                ByteOrder::Little => mode.to_le_bytes(),
                ByteOrder::Big => mode.to_be_bytes(),
            };
            let vals: [&[u8]; 4] = [&mode_b, b"target", &[0u8; 8], &[1, 2, 3]];
            let rec = encode_attrs(order, 3, &layout, &r, &vals).unwrap();
            assert_eq!(sa_byte_order(&rec), Some(order));
            let hdr = SaHdrPhys::parse(&rec, order).unwrap();
            assert_eq!((hdr.layout_num, hdr.hdr_size), (3, 16));
            let attrs = decode_attrs(&rec, order, &layout, &r).unwrap();
            assert_eq!(attrs[1], (17, &b"target"[..]));
            assert_eq!(attr_u64s(attrs[0].1, order).unwrap(), vec![mode]);
            assert_eq!(attrs[3].1, &[1, 2, 3]);
            assert!(decode_attrs(&rec[..42], order, &layout, &r).is_err());
            assert!(decode_attrs(&rec, order, &[5, 1234], &r).is_err());
        }
    }
}
