//! Packed name/value lists (libnvpair's `nvlist_t`), as stored in vdev labels, the MOS config
//! object, `zpool.cache`, pool history records, `features_for_read` and friends.
//!
//! # Theory
//!
//! An nvlist is an ordered list of `(name, typed value)` pairs; values may themselves be nvlists
//! (or arrays of them), so a pool config is a tree. On disk an nvlist is *packed* into a byte
//! stream that starts with a 4-byte header (see OpenZFS module/nvpair/nvpair.c, `nvs_header_t`):
//!
//! | off | size | field                                                        |
//! |-----|------|--------------------------------------------------------------|
//! | 0   | 1    | encoding: 0 = `NV_ENCODE_NATIVE`, 1 = `NV_ENCODE_XDR`         |
//! | 1   | 1    | endian of the writer: 0 = big, 1 = little                    |
//! | 2   | 2    | reserved, zero                                               |
//!
//! Two encodings follow the header:
//!
//! * **XDR** (submodule `xdr`) — big-endian, 4-byte units, independent of the writer.
//!   Labels, the MOS config object, send-stream nvlists and xattr SAs use it. This module
//!   decodes and encodes it byte-exactly like the Linux kernel's libnvpair.
//! * **Native** (submodule `native`) — a copy of libnvpair's in-memory `nvpair_t` records in
//!   the writer's byte order. Pool history records (`spa_history.c` packs with
//!   `NV_ENCODE_NATIVE`) and `zpool.cache` files written by userland use it, so we decode it
//!   too (in either byte order, which libnvpair itself refuses) and can encode it.
//!
//! Both encodings record, per pair, the size libnvpair needs to hold the *decoded* pair in
//! memory (`NVP_SIZE_CALC`, see [`NvValue::native_value_size`]); libnvpair checks it on decode,
//! so we compute it exactly and check it too.
//!
//! Parsing is bounded: nesting is limited to [`MAX_NVLIST_DEPTH`] levels and no element count
//! is trusted before the bytes it claims have been seen to exist.

mod display;
mod native;
mod xdr;

use crate::error::{Error, Result};
use crate::ByteOrder;

/// Version of the nvlist implementation; the only one that exists (`NV_VERSION`).
pub const NV_VERSION: i32 = 0;
/// `nvflag` bit: names are unique within the list (what ZFS uses everywhere).
pub const NV_UNIQUE_NAME: u32 = 0x1;
/// `nvflag` bit: (name, type) pairs are unique within the list.
pub const NV_UNIQUE_NAME_TYPE: u32 = 0x2;
/// Header encoding byte: native (in-memory image) encoding.
pub const NV_ENCODE_NATIVE: u8 = 0;
/// Header encoding byte: XDR encoding.
pub const NV_ENCODE_XDR: u8 = 1;
/// Size of the `nvs_header_t` that starts every packed nvlist.
pub const NVS_HEADER_SIZE: usize = 4;
/// Deepest nesting of embedded nvlists we accept. libnvpair allows 20 in the kernel and 100 in
/// userland (`nvpair_max_recursion`); real configs nest about 4 deep.
pub const MAX_NVLIST_DEPTH: usize = 64;

/// The `data_type_t` codes of libnvpair (include/sys/nvpair.h), as stored in packed pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DataType {
    Boolean = 1,
    Byte = 2,
    Int16 = 3,
    Uint16 = 4,
    Int32 = 5,
    Uint32 = 6,
    Int64 = 7,
    Uint64 = 8,
    String = 9,
    ByteArray = 10,
    Int16Array = 11,
    Uint16Array = 12,
    Int32Array = 13,
    Uint32Array = 14,
    Int64Array = 15,
    Uint64Array = 16,
    StringArray = 17,
    HrTime = 18,
    NvList = 19,
    NvListArray = 20,
    BooleanValue = 21,
    Int8 = 22,
    Uint8 = 23,
    BooleanArray = 24,
    Int8Array = 25,
    Uint8Array = 26,
    Double = 27,
}

impl DataType {
    /// Maps an on-disk type code to a type, or `None` for unknown codes.
    pub fn from_code(code: i32) -> Option<DataType> {
        use DataType::*;
        const ALL: [DataType; 27] = [
            Boolean,
            Byte,
            Int16,
            Uint16,
            Int32,
            Uint32,
            Int64,
            Uint64,
            String,
            ByteArray,
            Int16Array,
            Uint16Array,
            Int32Array,
            Uint32Array,
            Int64Array,
            Uint64Array,
            StringArray,
            HrTime,
            NvList,
            NvListArray,
            BooleanValue,
            Int8,
            Uint8,
            BooleanArray,
            Int8Array,
            Uint8Array,
            Double,
        ];
        ALL.into_iter().find(|t| *t as i32 == code)
    }

    /// True for types whose value is a single element (`nelem` must be 1 on disk);
    /// `Boolean` has `nelem` 0 and the array types any count.
    pub fn is_scalar(self) -> bool {
        use DataType::*;
        matches!(
            self,
            BooleanValue
                | Byte
                | Int8
                | Uint8
                | Int16
                | Uint16
                | Int32
                | Uint32
                | Int64
                | Uint64
                | String
                | HrTime
                | NvList
                | Double
        )
    }
}

/// One typed value of an nvpair.
#[derive(Clone, Debug, PartialEq)]
pub enum NvValue {
    /// `DATA_TYPE_BOOLEAN`: a presence flag with no value (e.g. the entries of
    /// `features_for_read`).
    Boolean,
    Byte(u8),
    Int8(i8),
    Uint8(u8),
    Int16(i16),
    Uint16(u16),
    Int32(i32),
    Uint32(u32),
    Int64(i64),
    Uint64(u64),
    String(String),
    ByteArray(Vec<u8>),
    Int8Array(Vec<i8>),
    Uint8Array(Vec<u8>),
    Int16Array(Vec<i16>),
    Uint16Array(Vec<u16>),
    Int32Array(Vec<i32>),
    Uint32Array(Vec<u32>),
    Int64Array(Vec<i64>),
    Uint64Array(Vec<u64>),
    StringArray(Vec<String>),
    /// `hrtime_t`: nanoseconds, signed.
    HrTime(i64),
    NvList(NvList),
    NvListArray(Vec<NvList>),
    /// `DATA_TYPE_BOOLEAN_VALUE`: a `boolean_t` (int32 0 or 1).
    BooleanValue(bool),
    BooleanArray(Vec<bool>),
    /// Userland-only in libnvpair (the kernel cannot pack it).
    Double(f64),
}

impl NvValue {
    /// The on-disk type code of this value.
    pub fn data_type(&self) -> DataType {
        use NvValue as V;
        match self {
            V::Boolean => DataType::Boolean,
            V::Byte(_) => DataType::Byte,
            V::Int8(_) => DataType::Int8,
            V::Uint8(_) => DataType::Uint8,
            V::Int16(_) => DataType::Int16,
            V::Uint16(_) => DataType::Uint16,
            V::Int32(_) => DataType::Int32,
            V::Uint32(_) => DataType::Uint32,
            V::Int64(_) => DataType::Int64,
            V::Uint64(_) => DataType::Uint64,
            V::String(_) => DataType::String,
            V::ByteArray(_) => DataType::ByteArray,
            V::Int8Array(_) => DataType::Int8Array,
            V::Uint8Array(_) => DataType::Uint8Array,
            V::Int16Array(_) => DataType::Int16Array,
            V::Uint16Array(_) => DataType::Uint16Array,
            V::Int32Array(_) => DataType::Int32Array,
            V::Uint32Array(_) => DataType::Uint32Array,
            V::Int64Array(_) => DataType::Int64Array,
            V::Uint64Array(_) => DataType::Uint64Array,
            V::StringArray(_) => DataType::StringArray,
            V::HrTime(_) => DataType::HrTime,
            V::NvList(_) => DataType::NvList,
            V::NvListArray(_) => DataType::NvListArray,
            V::BooleanValue(_) => DataType::BooleanValue,
            V::BooleanArray(_) => DataType::BooleanArray,
            V::Double(_) => DataType::Double,
        }
    }

    /// The element count stored in the pair (`nvp_value_elem`): 0 for `Boolean`, 1 for other
    /// scalars, the length for arrays.
    pub fn nelem(&self) -> usize {
        use NvValue as V;
        match self {
            V::Boolean => 0,
            V::ByteArray(a) | V::Uint8Array(a) => a.len(),
            V::Int8Array(a) => a.len(),
            V::Int16Array(a) => a.len(),
            V::Uint16Array(a) => a.len(),
            V::Int32Array(a) => a.len(),
            V::Uint32Array(a) => a.len(),
            V::Int64Array(a) => a.len(),
            V::Uint64Array(a) => a.len(),
            V::StringArray(a) => a.len(),
            V::NvListArray(a) => a.len(),
            V::BooleanArray(a) => a.len(),
            _ => 1,
        }
    }

    /// Bytes libnvpair needs for this value in memory (`i_get_value_size`): the basis of the
    /// "decoded size" recorded with every packed pair. `boolean_t` is 4 bytes, `nvlist_t` 24,
    /// string arrays and nvlist arrays carry an 8-byte pointer slot per element.
    pub fn native_value_size(&self) -> usize {
        use NvValue as V;
        const NVLIST_T_SIZE: usize = 24;
        match self {
            V::Boolean => 0,
            V::Byte(_) | V::Int8(_) | V::Uint8(_) => 1,
            V::Int16(_) | V::Uint16(_) => 2,
            V::Int32(_) | V::Uint32(_) | V::BooleanValue(_) => 4,
            V::Int64(_) | V::Uint64(_) | V::HrTime(_) | V::Double(_) => 8,
            V::String(s) => c_str_bytes(s).len() + 1,
            V::ByteArray(a) | V::Uint8Array(a) => a.len(),
            V::Int8Array(a) => a.len(),
            V::Int16Array(a) => 2 * a.len(),
            V::Uint16Array(a) => 2 * a.len(),
            V::Int32Array(a) => 4 * a.len(),
            V::Uint32Array(a) => 4 * a.len(),
            V::BooleanArray(a) => 4 * a.len(),
            V::Int64Array(a) => 8 * a.len(),
            V::Uint64Array(a) => 8 * a.len(),
            V::StringArray(a) => a.iter().map(|s| 8 + c_str_bytes(s).len() + 1).sum(),
            V::NvList(_) => NVLIST_T_SIZE,
            V::NvListArray(a) => (8 + NVLIST_T_SIZE) * a.len(),
        }
    }
}

/// `NV_ALIGN`: round up to 8.
pub(crate) fn nv_align8(x: usize) -> usize {
    x.saturating_add(7) & !7
}

/// `NV_ALIGN4`: round up to 4.
pub(crate) fn nv_align4(x: usize) -> usize {
    x.saturating_add(3) & !3
}

/// `NVP_SIZE_CALC`: in-memory size of a pair whose name is `name_len` bytes (without NUL)
/// and whose value needs `value_size` bytes. `sizeof (nvpair_t)` is 16.
pub fn nvp_size_calc(name_len: usize, value_size: usize) -> usize {
    nv_align8(16 + name_len + 1).saturating_add(nv_align8(value_size))
}

/// The bytes a C string would hold: everything before the first NUL (libnvpair measures
/// strings with `strlen`, so nothing after a NUL can be represented).
pub(crate) fn c_str_bytes(s: &str) -> &[u8] {
    let b = s.as_bytes();
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// Turns on-disk string bytes into a `String`: cut at the first NUL like `strlen`, and invalid
/// UTF-8 replaced by U+FFFD (such names cannot then be re-encoded byte-exactly).
pub(crate) fn string_from_disk(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The value of an array type (or `Boolean`) with no elements; `None` for scalar types.
pub(crate) fn empty_value(ty: DataType) -> Option<NvValue> {
    use NvValue as V;
    Some(match ty {
        DataType::Boolean => V::Boolean,
        DataType::ByteArray => V::ByteArray(Vec::new()),
        DataType::Int8Array => V::Int8Array(Vec::new()),
        DataType::Uint8Array => V::Uint8Array(Vec::new()),
        DataType::Int16Array => V::Int16Array(Vec::new()),
        DataType::Uint16Array => V::Uint16Array(Vec::new()),
        DataType::Int32Array => V::Int32Array(Vec::new()),
        DataType::Uint32Array => V::Uint32Array(Vec::new()),
        DataType::Int64Array => V::Int64Array(Vec::new()),
        DataType::Uint64Array => V::Uint64Array(Vec::new()),
        DataType::StringArray => V::StringArray(Vec::new()),
        DataType::NvListArray => V::NvListArray(Vec::new()),
        DataType::BooleanArray => V::BooleanArray(Vec::new()),
        _ => return None,
    })
}

/// A decoded nvlist: its pairs in stream order plus its `nvflag`.
#[derive(Clone, Debug, PartialEq)]
pub struct NvList {
    /// The pairs, in the order they were packed (libnvpair keeps insertion order).
    pub pairs: Vec<(String, NvValue)>,
    /// `nvl_nvflag`: [`NV_UNIQUE_NAME`] and/or [`NV_UNIQUE_NAME_TYPE`].
    pub nvflag: u32,
}

impl Default for NvList {
    fn default() -> Self {
        NvList::new()
    }
}

impl NvList {
    /// An empty list with `NV_UNIQUE_NAME`, as `fnvlist_alloc()` makes.
    pub fn new() -> NvList {
        NvList::with_nvflag(NV_UNIQUE_NAME)
    }

    /// An empty list with the given `nvflag`.
    pub fn with_nvflag(nvflag: u32) -> NvList {
        NvList { pairs: Vec::new(), nvflag }
    }

    /// Decodes a packed nvlist; `buf` starts at the 4-byte `nvs_header_t`. Bytes after the
    /// end-of-list marker are ignored (label areas are zero-padded).
    pub fn decode(buf: &[u8]) -> Result<NvList> {
        let hdr = crate::bytes::take::<4>(buf, 0, "nvlist header")?;
        let body = buf.get(NVS_HEADER_SIZE..).unwrap_or(&[]);
        match hdr[0] {
            NV_ENCODE_XDR => xdr::decode(body),
            NV_ENCODE_NATIVE => {
                let order = match hdr[1] {
                    0 => ByteOrder::Big,
                    1 => ByteOrder::Little,
                    e => return Err(Error::corrupt("nvlist header", format!("endian byte {e}"))),
                };
                native::decode(body, order)
            }
            e => Err(Error::unsupported("nvlist header", format!("encoding {e}"))),
        }
    }

    /// Packs this list with `NV_ENCODE_XDR`, byte-for-byte as the kernel's libnvpair would
    /// (the header's endian byte records this host, as libnvpair does).
    ///
    /// Strings are cut at their first NUL. A single pair above 2 GiB cannot be represented
    /// (its size fields are 32-bit) and would be recorded truncated; ZFS never builds one.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = header(NV_ENCODE_XDR, ByteOrder::NATIVE);
        xdr::encode_into(self, &mut out);
        out
    }

    /// Packs this list with `NV_ENCODE_NATIVE` in byte order `order` (pool history records
    /// are written this way in the writer's order).
    pub fn encode_native(&self, order: ByteOrder) -> Vec<u8> {
        let mut out = header(NV_ENCODE_NATIVE, order);
        native::encode_into(self, order, &mut out);
        out
    }

    /// Size of [`encode`](Self::encode)'s output, like `nvlist_size(.., NV_ENCODE_XDR)`.
    pub fn encoded_size(&self) -> usize {
        NVS_HEADER_SIZE + xdr::list_size(self)
    }

    /// The first value named `name`.
    pub fn get(&self, name: &str) -> Option<&NvValue> {
        self.pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// True when a pair named `name` exists (of any type).
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// True when the list has no pairs.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The pair names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(n, _)| n.as_str())
    }

    /// A `uint64` value.
    pub fn get_u64(&self, name: &str) -> Option<u64> {
        match self.get(name)? {
            NvValue::Uint64(v) => Some(*v),
            _ => None,
        }
    }

    /// An `int64` value.
    pub fn get_i64(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            NvValue::Int64(v) => Some(*v),
            _ => None,
        }
    }

    /// A `uint32` value.
    pub fn get_u32(&self, name: &str) -> Option<u32> {
        match self.get(name)? {
            NvValue::Uint32(v) => Some(*v),
            _ => None,
        }
    }

    /// A `boolean_value` value.
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            NvValue::BooleanValue(v) => Some(*v),
            _ => None,
        }
    }

    /// A `string` value.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            NvValue::String(v) => Some(v),
            _ => None,
        }
    }

    /// An embedded nvlist.
    pub fn get_nvlist(&self, name: &str) -> Option<&NvList> {
        match self.get(name)? {
            NvValue::NvList(v) => Some(v),
            _ => None,
        }
    }

    /// An nvlist array.
    pub fn get_nvlist_array(&self, name: &str) -> Option<&[NvList]> {
        match self.get(name)? {
            NvValue::NvListArray(v) => Some(v),
            _ => None,
        }
    }

    /// A `uint64` array.
    pub fn get_u64_array(&self, name: &str) -> Option<&[u64]> {
        match self.get(name)? {
            NvValue::Uint64Array(v) => Some(v),
            _ => None,
        }
    }

    /// A string array.
    pub fn get_str_array(&self, name: &str) -> Option<&[String]> {
        match self.get(name)? {
            NvValue::StringArray(v) => Some(v),
            _ => None,
        }
    }

    /// A byte array (or uint8 array).
    pub fn get_bytes(&self, name: &str) -> Option<&[u8]> {
        match self.get(name)? {
            NvValue::ByteArray(v) | NvValue::Uint8Array(v) => Some(v),
            _ => None,
        }
    }

    /// Adds a pair like `nvlist_add_*`: with `NV_UNIQUE_NAME` any pair of that name is removed
    /// first, with `NV_UNIQUE_NAME_TYPE` any pair of that name and type; the new pair goes last.
    pub fn add(&mut self, name: &str, value: NvValue) -> &mut Self {
        if self.nvflag & NV_UNIQUE_NAME != 0 {
            self.pairs.retain(|(n, _)| n != name);
        } else if self.nvflag & NV_UNIQUE_NAME_TYPE != 0 {
            let t = value.data_type();
            self.pairs.retain(|(n, v)| n != name || v.data_type() != t);
        }
        self.pairs.push((name.to_string(), value));
        self
    }

    /// Removes every pair named `name`; returns whether any existed.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.pairs.len();
        self.pairs.retain(|(n, _)| n != name);
        before != self.pairs.len()
    }

    /// Adds a `uint64`.
    pub fn add_u64(&mut self, name: &str, v: u64) -> &mut Self {
        self.add(name, NvValue::Uint64(v))
    }

    /// Adds a `string`.
    pub fn add_str(&mut self, name: &str, v: &str) -> &mut Self {
        self.add(name, NvValue::String(v.to_string()))
    }

    /// Adds an embedded nvlist.
    pub fn add_nvlist(&mut self, name: &str, v: NvList) -> &mut Self {
        self.add(name, NvValue::NvList(v))
    }

    /// Adds an nvlist array.
    pub fn add_nvlist_array(&mut self, name: &str, v: Vec<NvList>) -> &mut Self {
        self.add(name, NvValue::NvListArray(v))
    }

    /// Adds a `uint64` array.
    pub fn add_u64_array(&mut self, name: &str, v: Vec<u64>) -> &mut Self {
        self.add(name, NvValue::Uint64Array(v))
    }

    /// Adds a string array.
    pub fn add_str_array(&mut self, name: &str, v: Vec<String>) -> &mut Self {
        self.add(name, NvValue::StringArray(v))
    }

    /// Adds a valueless `boolean` flag (as `features_for_read` entries are).
    pub fn add_boolean(&mut self, name: &str) -> &mut Self {
        self.add(name, NvValue::Boolean)
    }

    /// Adds a `boolean_value`.
    pub fn add_bool(&mut self, name: &str, v: bool) -> &mut Self {
        self.add(name, NvValue::BooleanValue(v))
    }

    /// Adds a byte array.
    pub fn add_bytes(&mut self, name: &str, v: Vec<u8>) -> &mut Self {
        self.add(name, NvValue::ByteArray(v))
    }
}

/// The 4-byte `nvs_header_t`.
fn header(encoding: u8, order: ByteOrder) -> Vec<u8> {
    let endian = match order {
        ByteOrder::Big => 0,
        ByteOrder::Little => 1,
    };
    vec![encoding, endian, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_calc_matches_libnvpair() {
        // "version" uint64: NV_ALIGN(16 + 8) + 8 = 32 (seen in real labels).
        assert_eq!(nvp_size_calc(7, 8), 32);
        // "name" = "v15-pool": NV_ALIGN(16 + 5) + NV_ALIGN(9) = 40.
        assert_eq!(nvp_size_calc(4, 9), 40);
    }

    #[test]
    fn unique_name_replaces() {
        let mut l = NvList::new();
        l.add_u64("a", 1).add_str("b", "x").add_u64("a", 2);
        assert_eq!(l.names().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(l.get_u64("a"), Some(2));
        let mut m = NvList::with_nvflag(0);
        m.add_u64("a", 1).add_u64("a", 2);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn type_codes_round_trip() {
        for c in 1..=27 {
            assert_eq!(DataType::from_code(c).map(|t| t as i32), Some(c));
        }
        assert_eq!(DataType::from_code(0), None);
        assert_eq!(DataType::from_code(28), None);
    }
}
