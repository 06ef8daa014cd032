//! `NV_ENCODE_XDR`: libnvpair's XDR packing (see OpenZFS module/nvpair/nvpair.c, the
//! `nvs_xdr_*` functions, and the kernel XDR in module/os/linux/spl/spl-xdr.c).
//!
//! Every item is a big-endian 4-byte unit or a multiple of it. After the 4-byte header:
//!
//! ```text
//! nvlist  := version:i32  nvflag:u32  pair*  0:i32 0:i32
//! pair    := encoded_size:i32  decoded_size:i32  name:string  type:i32  nelem:i32  data
//! string  := len:u32  bytes[len]  zero pad to 4
//! ```
//!
//! `encoded_size` is the XDR size of the whole pair as libnvpair *computes* it
//! (`nvs_xdr_nvp_size`), which equals the bytes written except for empty int/bool arrays: their
//! formula counts a 4-byte array length that is never written (no data at all is written when
//! `nelem` is 0). `nvlist_pack` sizes its buffer with that formula too, so a packed list is
//! zero-padded by those phantom words; [`encode_into`] reproduces both. Decoders (libnvpair's
//! and ours) ignore `encoded_size`. `decoded_size` is `NVP_SIZE_CALC` of the in-memory pair
//! and is checked. A pair whose `decoded_size` is 0 ends the list.
//!
//! Data by type (`nelem` > 0):
//!
//! | type                                   | data                                    |
//! |----------------------------------------|-----------------------------------------|
//! | boolean                                | nothing                                 |
//! | byte, int8, uint8, int16, uint16       | one 4-byte unit                         |
//! | int32, uint32, boolean_value           | one 4-byte unit                         |
//! | int64, uint64, hrtime, double          | 8 bytes                                 |
//! | string                                 | string                                  |
//! | byte_array                             | `nelem` bytes, zero pad to 4 (no count) |
//! | int8/uint8/int16/uint16/int32/uint32/boolean arrays | count:u32, then a unit each |
//! | int64/uint64 arrays                    | count:u32, then 8 bytes each            |
//! | string_array                           | `nelem` strings (no count)              |
//! | nvlist                                 | an embedded nvlist                      |
//! | nvlist_array                           | `nelem` embedded nvlists (no count)     |
//!
//! Sub-word integers: the kernel writes them zero-extended, userland's libtirpc sign-extends
//! signed chars and shorts; we write zero-extended and read either.

use super::{
    c_str_bytes, nv_align4, nvp_size_calc, string_from_disk, DataType, NvList, NvValue, MAX_NVLIST_DEPTH,
};
use crate::error::{Error, Result};

const WHAT: &str = "xdr nvlist";

/// A cursor over the XDR body (after the header).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let s = crate::bytes::slice(self.buf, self.pos, n, what)?;
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let v = crate::bytes::ByteOrder::Big.u32_at(self.buf, self.pos, what)?;
        self.pos += 4;
        Ok(v)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        let v = crate::bytes::be_u64(self.buf, self.pos, what)?;
        self.pos += 8;
        Ok(v)
    }

    /// `n` opaque bytes plus their padding to a 4-byte boundary.
    fn opaque(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let s = self.bytes(n, what)?;
        self.bytes(nv_align4(n) - n, what)?;
        Ok(s)
    }

    /// An XDR string: its raw bytes up to the first NUL.
    fn string(&mut self, what: &'static str) -> Result<&'a [u8]> {
        let len = self.u32(what)? as usize;
        if len > self.remaining() {
            return Err(Error::corrupt(what, format!("string of {len} bytes past end")));
        }
        let s = self.opaque(len, what)?;
        Ok(s.iter().position(|&c| c == 0).map_or(s, |n| &s[..n]))
    }

    /// A char or short packed in a 4-byte unit: zero- or sign-extended from `bits`.
    fn small(&mut self, bits: u32, what: &'static str) -> Result<u32> {
        let v = self.u32(what)?;
        let hi = v >> bits;
        let neg = v & (1 << (bits - 1)) != 0;
        if hi == 0 || (neg && hi == u32::MAX >> bits) {
            Ok(v & ((1 << bits) - 1))
        } else {
            Err(Error::corrupt(what, format!("{v:#x} does not fit in {bits} bits")))
        }
    }

    /// An array's count word, which must agree with the pair's `nelem`, after checking that
    /// `nelem` elements of `unit` bytes can still be present.
    fn array_count(&mut self, nelem: usize, unit: usize, what: &'static str) -> Result<()> {
        let count = self.u32(what)? as usize;
        if count != nelem {
            return Err(Error::corrupt(what, format!("array count {count} != nelem {nelem}")));
        }
        if nelem.saturating_mul(unit) > self.remaining() {
            return Err(Error::corrupt(what, format!("{nelem} elements past end")));
        }
        Ok(())
    }
}

/// Decodes the XDR body of a packed nvlist (everything after the 4-byte header).
pub(super) fn decode(body: &[u8]) -> Result<NvList> {
    let mut r = Reader { buf: body, pos: 0 };
    decode_list(&mut r, 0)
}

fn decode_list(r: &mut Reader<'_>, depth: usize) -> Result<NvList> {
    if depth > MAX_NVLIST_DEPTH {
        return Err(Error::corrupt(WHAT, format!("nested deeper than {MAX_NVLIST_DEPTH}")));
    }
    let _version = r.u32("xdr nvlist version")?;
    let nvflag = r.u32("xdr nvlist nvflag")?;
    let mut list = NvList::with_nvflag(nvflag);
    loop {
        let _encoded = r.u32("xdr nvpair encoded size")?;
        let decoded = r.u32("xdr nvpair decoded size")? as usize;
        if decoded == 0 {
            return Ok(list);
        }
        let raw_name = r.string("xdr nvpair name")?;
        let name = string_from_disk(raw_name);
        let code = r.u32("xdr nvpair type")? as i32;
        let ty = DataType::from_code(code)
            .ok_or_else(|| Error::corrupt(WHAT, format!("pair {name:?}: unknown type {code}")))?;
        let nelem = r.u32("xdr nvpair nelem")?;
        let nelem = check_nelem(ty, nelem, &name)?;
        let (value, vsize) = decode_value(r, ty, nelem, depth)?;
        let want = nvp_size_calc(raw_name.len(), vsize);
        if decoded != want {
            return Err(Error::corrupt(
                WHAT,
                format!("pair {name:?}: decoded size {decoded}, expected {want}"),
            ));
        }
        list.pairs.push((name, value));
    }
}

/// Enforces libnvpair's `i_validate_type_nelem`: booleans have 0 elements, scalars 1.
pub(super) fn check_nelem(ty: DataType, nelem: u32, name: &str) -> Result<usize> {
    let ok = match ty {
        DataType::Boolean => nelem == 0,
        t if t.is_scalar() => nelem == 1,
        _ => nelem <= i32::MAX as u32,
    };
    if ok {
        Ok(nelem as usize)
    } else {
        Err(Error::corrupt(WHAT, format!("pair {name:?}: {ty:?} with nelem {nelem}")))
    }
}

/// Decodes one pair's data; returns the value and its in-memory size (from the raw bytes, so
/// the decoded-size check is exact even when strings were not UTF-8).
fn decode_value(r: &mut Reader<'_>, ty: DataType, nelem: usize, depth: usize) -> Result<(NvValue, usize)> {
    use NvValue as V;
    const W: &str = "xdr nvpair value";
    if nelem == 0 {
        let v =
            super::empty_value(ty).ok_or_else(|| Error::corrupt(W, format!("{ty:?} with no elements")))?;
        return Ok((v, 0));
    }
    let v = match ty {
        DataType::String => {
            let raw = r.string(W)?;
            return Ok((V::String(string_from_disk(raw)), raw.len() + 1));
        }
        DataType::StringArray => {
            if nelem.saturating_mul(4) > r.remaining() {
                return Err(Error::corrupt(W, format!("{nelem} strings past end")));
            }
            let mut size = 0usize;
            let mut out = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                let raw = r.string(W)?;
                size += 8 + raw.len() + 1;
                out.push(string_from_disk(raw));
            }
            return Ok((V::StringArray(out), size));
        }
        DataType::NvList => V::NvList(decode_list(r, depth + 1)?),
        DataType::NvListArray => {
            // Each embedded list takes at least 16 bytes.
            if nelem.saturating_mul(16) > r.remaining() {
                return Err(Error::corrupt(W, format!("{nelem} nvlists past end")));
            }
            let mut out = Vec::with_capacity(nelem);
            for _ in 0..nelem {
                out.push(decode_list(r, depth + 1)?);
            }
            V::NvListArray(out)
        }
        _ => decode_fixed(r, ty, nelem)?,
    };
    let size = v.native_value_size();
    Ok((v, size))
}

/// Decodes the fixed-width types (scalars and numeric arrays), `nelem` > 0.
fn decode_fixed(r: &mut Reader<'_>, ty: DataType, n: usize) -> Result<NvValue> {
    use NvValue as V;
    const W: &str = "xdr nvpair value";
    Ok(match ty {
        DataType::Boolean => V::Boolean,
        DataType::Byte => V::Byte(r.small(8, W)? as u8),
        DataType::Int8 => V::Int8(r.small(8, W)? as u8 as i8),
        DataType::Uint8 => V::Uint8(r.small(8, W)? as u8),
        DataType::Int16 => V::Int16(r.small(16, W)? as u16 as i16),
        DataType::Uint16 => V::Uint16(r.small(16, W)? as u16),
        DataType::Int32 => V::Int32(r.u32(W)? as i32),
        DataType::Uint32 => V::Uint32(r.u32(W)?),
        DataType::BooleanValue => V::BooleanValue(boolean(r.u32(W)?)?),
        DataType::Int64 => V::Int64(r.u64(W)? as i64),
        DataType::Uint64 => V::Uint64(r.u64(W)?),
        DataType::HrTime => V::HrTime(r.u64(W)? as i64),
        DataType::Double => V::Double(f64::from_bits(r.u64(W)?)),
        DataType::ByteArray => {
            if n > r.remaining() {
                return Err(Error::corrupt(W, format!("byte array of {n} past end")));
            }
            V::ByteArray(r.opaque(n, W)?.to_vec())
        }
        DataType::Int8Array => V::Int8Array(array(r, n, 4, |r| Ok(r.small(8, W)? as u8 as i8))?),
        DataType::Uint8Array => V::Uint8Array(array(r, n, 4, |r| Ok(r.small(8, W)? as u8))?),
        DataType::Int16Array => V::Int16Array(array(r, n, 4, |r| Ok(r.small(16, W)? as u16 as i16))?),
        DataType::Uint16Array => V::Uint16Array(array(r, n, 4, |r| Ok(r.small(16, W)? as u16))?),
        DataType::Int32Array => V::Int32Array(array(r, n, 4, |r| Ok(r.u32(W)? as i32))?),
        DataType::Uint32Array => V::Uint32Array(array(r, n, 4, |r| r.u32(W))?),
        DataType::BooleanArray => V::BooleanArray(array(r, n, 4, |r| boolean(r.u32(W)?))?),
        DataType::Int64Array => V::Int64Array(array(r, n, 8, |r| Ok(r.u64(W)? as i64))?),
        DataType::Uint64Array => V::Uint64Array(array(r, n, 8, |r| r.u64(W))?),
        DataType::String | DataType::StringArray | DataType::NvList | DataType::NvListArray => {
            return Err(Error::corrupt(W, "variable-size type in fixed decoder"))
        }
    })
}

/// A `boolean_t`: libnvpair rejects anything but 0 and 1.
pub(super) fn boolean(v: u32) -> Result<bool> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::corrupt("nvpair boolean", format!("value {v}"))),
    }
}

fn array<'a, T>(
    r: &mut Reader<'a>,
    n: usize,
    unit: usize,
    f: impl Fn(&mut Reader<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    r.array_count(n, unit, "xdr nvpair array")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(f(r)?);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Encoding

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_opaque(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(b);
    out.resize(out.len() + nv_align4(b.len()) - b.len(), 0);
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    let b = c_str_bytes(s);
    put_u32(out, b.len() as u32);
    put_opaque(out, b);
}

/// Appends the XDR body of `list` (no header) to `out`, zero-padded to libnvpair's computed
/// size, and returns that size.
pub(super) fn encode_into(list: &NvList, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let size = encode_list(list, out);
    out.resize(start + size, 0);
    size
}

/// Size of the XDR body of `list` as `nvlist_size` computes it.
pub(super) fn list_size(list: &NvList) -> usize {
    encode_list(list, &mut Vec::new())
}

/// Writes one (possibly embedded) list; returns its computed size.
fn encode_list(list: &NvList, out: &mut Vec<u8>) -> usize {
    put_u32(out, super::NV_VERSION as u32);
    put_u32(out, list.nvflag);
    // 2 * 4 for version and nvflag, 8 for the end marker (`nvs_xdr_nvlist`).
    let mut size = 16usize;
    for (name, value) in &list.pairs {
        size = size.saturating_add(encode_pair(name, value, out));
    }
    put_u32(out, 0);
    put_u32(out, 0);
    size
}

fn encode_pair(name: &str, value: &NvValue, out: &mut Vec<u8>) -> usize {
    let at = out.len();
    put_u32(out, 0); // encoded size, patched below
    put_u32(out, 0); // decoded size, patched below
    put_string(out, name);
    put_u32(out, value.data_type() as i32 as u32);
    put_u32(out, value.nelem() as u32);
    let name_len = c_str_bytes(name).len();
    let data = encode_value(value, out);
    let encoded = 4 + 4 + 4 + nv_align4(name_len) + 4 + 4 + data;
    let decoded = nvp_size_calc(name_len, value.native_value_size());
    out[at..at + 4].copy_from_slice(&(encoded as u32).to_be_bytes());
    out[at + 4..at + 8].copy_from_slice(&(decoded as u32).to_be_bytes());
    encoded
}

/// Writes a pair's data; returns its computed size (see the module comment on empty arrays).
fn encode_value(value: &NvValue, out: &mut Vec<u8>) -> usize {
    use NvValue as V;
    if value.nelem() == 0 {
        return match value.data_type() {
            DataType::Boolean | DataType::ByteArray | DataType::StringArray | DataType::NvListArray => 0,
            _ => 4,
        };
    }
    let start = out.len();
    match value {
        V::Boolean => {}
        V::Byte(v) | V::Uint8(v) => put_u32(out, u32::from(*v)),
        V::Int8(v) => put_u32(out, u32::from(*v as u8)),
        V::Int16(v) => put_u32(out, u32::from(*v as u16)),
        V::Uint16(v) => put_u32(out, u32::from(*v)),
        V::Int32(v) => put_u32(out, *v as u32),
        V::Uint32(v) => put_u32(out, *v),
        V::BooleanValue(v) => put_u32(out, u32::from(*v)),
        V::Int64(v) | V::HrTime(v) => put_u64(out, *v as u64),
        V::Uint64(v) => put_u64(out, *v),
        V::Double(v) => put_u64(out, v.to_bits()),
        V::String(s) => put_string(out, s),
        V::ByteArray(a) => put_opaque(out, a),
        V::Int8Array(a) => put_words(out, a.iter().map(|v| u32::from(*v as u8))),
        V::Uint8Array(a) => put_words(out, a.iter().map(|v| u32::from(*v))),
        V::Int16Array(a) => put_words(out, a.iter().map(|v| u32::from(*v as u16))),
        V::Uint16Array(a) => put_words(out, a.iter().map(|v| u32::from(*v))),
        V::Int32Array(a) => put_words(out, a.iter().map(|v| *v as u32)),
        V::Uint32Array(a) => put_words(out, a.iter().copied()),
        V::BooleanArray(a) => put_words(out, a.iter().map(|v| u32::from(*v))),
        V::Int64Array(a) => {
            put_u32(out, a.len() as u32);
            a.iter().for_each(|v| put_u64(out, *v as u64));
        }
        V::Uint64Array(a) => {
            put_u32(out, a.len() as u32);
            a.iter().for_each(|v| put_u64(out, *v));
        }
        V::StringArray(a) => a.iter().for_each(|s| put_string(out, s)),
        V::NvList(l) => return encode_list(l, out),
        V::NvListArray(a) => return a.iter().fold(0usize, |acc, l| acc.saturating_add(encode_list(l, out))),
    }
    out.len() - start
}

/// An XDR array of 4-byte units: count, then the units.
fn put_words(out: &mut Vec<u8>, words: impl ExactSizeIterator<Item = u32>) {
    put_u32(out, words.len() as u32);
    words.for_each(|w| put_u32(out, w));
}
