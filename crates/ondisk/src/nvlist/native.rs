//! `NV_ENCODE_NATIVE`: libnvpair's in-memory pair records copied out verbatim, in the writer's
//! byte order (see OpenZFS module/nvpair/nvpair.c, the `nvs_native_*` functions). Pool history
//! records are packed this way (module/zfs/spa_history.c).
//!
//! After the 4-byte header:
//!
//! ```text
//! top     := version:i32  nvflag:u32  pairs
//! pairs   := (record  embedded*)*  0:i32
//! ```
//!
//! A record is an `nvpair_t` of exactly `nvp_size` bytes (`NVP_SIZE_CALC`, a multiple of 8;
//! records are not themselves 8-aligned in the stream, the top header being 12 bytes):
//!
//! | off              | size    | field                                         |
//! |------------------|---------|-----------------------------------------------|
//! | 0                | 4       | `nvp_size` (i32; 0 here = end of list)        |
//! | 4                | 2       | `nvp_name_sz` (i16, includes the NUL)         |
//! | 6                | 2       | reserved                                      |
//! | 8                | 4       | `nvp_value_elem` (nelem)                      |
//! | 12               | 4       | `nvp_type`                                    |
//! | 16               | name_sz | name, NUL-terminated                          |
//! | align8(16+name_sz) | ...   | value, zero-padded to `nvp_size`              |
//!
//! Values are stored as in memory: integers at their natural width, `boolean_t` as i32,
//! strings NUL-terminated; string arrays and nvlist arrays start with one 8-byte pointer slot
//! per element (zeroed when packed). An nvlist value is a 24-byte `nvlist_t` (version i32,
//! nvflag u32, priv u64 = 0, flag u32, pad i32) whose pairs follow the record in the stream
//! as an `embedded` list, each ended by its own 4-byte zero; an nvlist array's elements follow
//! it in order. Embedded lists carry no version/nvflag words of their own: those live in the
//! `nvlist_t` inside the parent's record.

use super::xdr::{boolean, check_nelem};
use super::{
    c_str_bytes, nv_align8, nvp_size_calc, string_from_disk, DataType, NvList, NvValue, MAX_NVLIST_DEPTH,
    NV_VERSION,
};
use crate::bytes::slice;
use crate::error::{Error, Result};
use crate::ByteOrder;

const WHAT: &str = "native nvlist";
const NVLIST_T: usize = 24;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    order: ByteOrder,
}

/// Decodes the native body of a packed nvlist (everything after the header).
pub(super) fn decode(body: &[u8], order: ByteOrder) -> Result<NvList> {
    let _version = order.u32_at(body, 0, "native nvlist version")?;
    let nvflag = order.u32_at(body, 4, "native nvlist nvflag")?;
    let mut r = Reader { buf: body, pos: 8, order };
    decode_pairs(&mut r, nvflag, 0)
}

/// A pair record parsed up to its value: name, type, nelem and the value bytes.
struct Record<'a> {
    name: String,
    name_len: usize,
    ty: DataType,
    nelem: usize,
    value: &'a [u8],
}

fn decode_pairs(r: &mut Reader<'_>, nvflag: u32, depth: usize) -> Result<NvList> {
    if depth > MAX_NVLIST_DEPTH {
        return Err(Error::corrupt(WHAT, format!("nested deeper than {MAX_NVLIST_DEPTH}")));
    }
    let mut list = NvList::with_nvflag(nvflag);
    loop {
        let size = r.order.u32_at(r.buf, r.pos, "native nvpair size")? as i32;
        if size == 0 {
            r.pos += 4;
            return Ok(list);
        }
        if size < 0 {
            return Err(Error::corrupt(WHAT, format!("nvp_size {size}")));
        }
        let rec = slice(r.buf, r.pos, size as usize, "native nvpair")?;
        r.pos += size as usize;
        let rec = parse_record(rec, r.order)?;
        let (value, vsize) = decode_value(r, &rec, depth)?;
        let want = nvp_size_calc(rec.name_len, vsize);
        if size as usize != want {
            return Err(Error::corrupt(
                WHAT,
                format!("pair {:?}: nvp_size {size}, expected {want}", rec.name),
            ));
        }
        list.pairs.push((rec.name, value));
    }
}

fn parse_record(rec: &[u8], order: ByteOrder) -> Result<Record<'_>> {
    let name_sz = order.u16_at(rec, 4, "native nvpair name_sz")? as i16;
    let nelem = order.u32_at(rec, 8, "native nvpair nelem")?;
    let code = order.u32_at(rec, 12, "native nvpair type")? as i32;
    if name_sz <= 0 {
        return Err(Error::corrupt(WHAT, format!("name_sz {name_sz}")));
    }
    let raw = slice(rec, 16, name_sz as usize, "native nvpair name")?;
    let name_len = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    if name_len + 1 != raw.len() {
        return Err(Error::corrupt(WHAT, "pair name not NUL-terminated at name_sz"));
    }
    let name = string_from_disk(raw);
    let ty = DataType::from_code(code)
        .ok_or_else(|| Error::corrupt(WHAT, format!("pair {name:?}: unknown type {code}")))?;
    let nelem = check_nelem(ty, nelem, &name)?;
    let valoff = nv_align8(16 + raw.len());
    let value = rec.get(valoff..).unwrap_or(&[]);
    Ok(Record { name, name_len, ty, nelem, value })
}

/// Decodes a record's value (and, for nvlists, the embedded lists that follow it).
fn decode_value(r: &mut Reader<'_>, rec: &Record<'_>, depth: usize) -> Result<(NvValue, usize)> {
    use NvValue as V;
    let (o, b, n) = (r.order, rec.value, rec.nelem);
    const W: &str = "native nvpair value";
    let v = match rec.ty {
        DataType::Boolean => V::Boolean,
        DataType::String => {
            let raw = c_string(b, 0)?;
            return Ok((V::String(string_from_disk(raw)), raw.len() + 1));
        }
        DataType::StringArray => {
            let mut off = n
                .checked_mul(8)
                .filter(|&x| x <= b.len())
                .ok_or_else(|| Error::corrupt(W, format!("{n} strings past end of pair")))?;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let raw = c_string(b, off)?;
                off += raw.len() + 1;
                out.push(string_from_disk(raw));
            }
            return Ok((V::StringArray(out), off));
        }
        DataType::NvList => {
            let nvflag = o.u32_at(b, 4, "native embedded nvlist_t")?;
            V::NvList(decode_pairs(r, nvflag, depth + 1)?)
        }
        DataType::NvListArray => {
            if n.saturating_mul(8 + NVLIST_T) > b.len() {
                return Err(Error::corrupt(W, format!("{n} nvlists past end of pair")));
            }
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let nvflag = o.u32_at(b, 8 * n + NVLIST_T * i + 4, "native nvlist_t")?;
                out.push(decode_pairs(r, nvflag, depth + 1)?);
            }
            V::NvListArray(out)
        }
        ty => decode_fixed(b, o, ty, n)?,
    };
    let size = v.native_value_size();
    Ok((v, size))
}

/// The NUL-terminated string at `off` in `b` (without its NUL).
fn c_string(b: &[u8], off: usize) -> Result<&[u8]> {
    let s = b.get(off..).unwrap_or(&[]);
    let len = s
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| Error::corrupt("native nvpair string", "not NUL-terminated"))?;
    Ok(&s[..len])
}

/// `n` elements of `width` bytes from `b`, after checking they are all present.
fn elems<T>(b: &[u8], n: usize, width: usize, f: impl Fn(&[u8], usize) -> Result<T>) -> Result<Vec<T>> {
    if n.saturating_mul(width) > b.len() {
        return Err(Error::corrupt("native nvpair array", format!("{n} elements past end")));
    }
    (0..n).map(|i| f(b, i * width)).collect()
}

fn decode_fixed(b: &[u8], o: ByteOrder, ty: DataType, n: usize) -> Result<NvValue> {
    use NvValue as V;
    const W: &str = "native nvpair value";
    let u8_at = |b: &[u8], off: usize| -> Result<u8> {
        b.get(off).copied().ok_or_else(|| Error::corrupt(W, "short value"))
    };
    let u16_at = |b: &[u8], off| o.u16_at(b, off, W);
    let u32_at = |b: &[u8], off| o.u32_at(b, off, W);
    let u64_at = |b: &[u8], off| o.u64_at(b, off, W);
    Ok(match ty {
        DataType::Byte => V::Byte(u8_at(b, 0)?),
        DataType::Int8 => V::Int8(u8_at(b, 0)? as i8),
        DataType::Uint8 => V::Uint8(u8_at(b, 0)?),
        DataType::Int16 => V::Int16(u16_at(b, 0)? as i16),
        DataType::Uint16 => V::Uint16(u16_at(b, 0)?),
        DataType::Int32 => V::Int32(u32_at(b, 0)? as i32),
        DataType::Uint32 => V::Uint32(u32_at(b, 0)?),
        DataType::BooleanValue => V::BooleanValue(boolean(u32_at(b, 0)?)?),
        DataType::Int64 => V::Int64(u64_at(b, 0)? as i64),
        DataType::Uint64 => V::Uint64(u64_at(b, 0)?),
        DataType::HrTime => V::HrTime(u64_at(b, 0)? as i64),
        DataType::Double => V::Double(f64::from_bits(u64_at(b, 0)?)),
        DataType::ByteArray => V::ByteArray(elems(b, n, 1, u8_at)?),
        DataType::Uint8Array => V::Uint8Array(elems(b, n, 1, u8_at)?),
        DataType::Int8Array => V::Int8Array(elems(b, n, 1, |b, i| Ok(u8_at(b, i)? as i8))?),
        DataType::Int16Array => V::Int16Array(elems(b, n, 2, |b, i| Ok(u16_at(b, i)? as i16))?),
        DataType::Uint16Array => V::Uint16Array(elems(b, n, 2, u16_at)?),
        DataType::Int32Array => V::Int32Array(elems(b, n, 4, |b, i| Ok(u32_at(b, i)? as i32))?),
        DataType::Uint32Array => V::Uint32Array(elems(b, n, 4, u32_at)?),
        DataType::BooleanArray => V::BooleanArray(elems(b, n, 4, |b, i| boolean(u32_at(b, i)?))?),
        DataType::Int64Array => V::Int64Array(elems(b, n, 8, |b, i| Ok(u64_at(b, i)? as i64))?),
        DataType::Uint64Array => V::Uint64Array(elems(b, n, 8, u64_at)?),
        DataType::Boolean
        | DataType::String
        | DataType::StringArray
        | DataType::NvList
        | DataType::NvListArray => return Err(Error::corrupt(W, "variable-size type in fixed decoder")),
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding

/// Appends the native body of `list` (no header) in byte order `o`.
pub(super) fn encode_into(list: &NvList, o: ByteOrder, out: &mut Vec<u8>) {
    let mut w = [0u8; 8];
    o.put_u32(&mut w, 0, NV_VERSION as u32);
    o.put_u32(&mut w, 4, list.nvflag);
    out.extend_from_slice(&w);
    encode_pairs(list, o, out);
}

fn encode_pairs(list: &NvList, o: ByteOrder, out: &mut Vec<u8>) {
    for (name, value) in &list.pairs {
        encode_record(name, value, o, out);
        match value {
            NvValue::NvList(l) => encode_pairs(l, o, out),
            NvValue::NvListArray(a) => a.iter().for_each(|l| encode_pairs(l, o, out)),
            _ => {}
        }
    }
    out.extend_from_slice(&[0; 4]);
}

/// Writes one `nvpair_t` record. Names longer than `i16::MAX` cannot be represented (libnvpair
/// refuses them) and would be recorded with a truncated `nvp_name_sz`.
fn encode_record(name: &str, value: &NvValue, o: ByteOrder, out: &mut Vec<u8>) {
    let name_b = c_str_bytes(name);
    let size = nvp_size_calc(name_b.len(), value.native_value_size());
    let start = out.len();
    out.resize(start + size, 0);
    let rec = &mut out[start..];
    o.put_u32(rec, 0, size as u32);
    o.put_u16(rec, 4, (name_b.len() + 1) as u16);
    o.put_u32(rec, 8, value.nelem() as u32);
    o.put_u32(rec, 12, value.data_type() as i32 as u32);
    rec[16..16 + name_b.len()].copy_from_slice(name_b);
    let valoff = nv_align8(16 + name_b.len() + 1);
    put_value(&mut rec[valoff..], value, o);
}

fn put_value(b: &mut [u8], value: &NvValue, o: ByteOrder) {
    use NvValue as V;
    match value {
        V::Boolean => {}
        V::Byte(v) | V::Uint8(v) => b[0] = *v,
        V::Int8(v) => b[0] = *v as u8,
        V::Int16(v) => o.put_u16(b, 0, *v as u16),
        V::Uint16(v) => o.put_u16(b, 0, *v),
        V::Int32(v) => o.put_u32(b, 0, *v as u32),
        V::Uint32(v) => o.put_u32(b, 0, *v),
        V::BooleanValue(v) => o.put_u32(b, 0, u32::from(*v)),
        V::Int64(v) | V::HrTime(v) => o.put_u64(b, 0, *v as u64),
        V::Uint64(v) => o.put_u64(b, 0, *v),
        V::Double(v) => o.put_u64(b, 0, v.to_bits()),
        V::String(s) => put_c_string(b, 0, s),
        V::ByteArray(a) | V::Uint8Array(a) => b[..a.len()].copy_from_slice(a),
        V::Int8Array(a) => a.iter().enumerate().for_each(|(i, v)| b[i] = *v as u8),
        V::Int16Array(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u16(b, 2 * i, *v as u16)),
        V::Uint16Array(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u16(b, 2 * i, *v)),
        V::Int32Array(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u32(b, 4 * i, *v as u32)),
        V::Uint32Array(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u32(b, 4 * i, *v)),
        V::BooleanArray(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u32(b, 4 * i, u32::from(*v))),
        V::Int64Array(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u64(b, 8 * i, *v as u64)),
        V::Uint64Array(a) => a.iter().enumerate().for_each(|(i, v)| o.put_u64(b, 8 * i, *v)),
        V::StringArray(a) => {
            // Pointer slots stay zero; the strings follow them back to back.
            let mut off = 8 * a.len();
            for s in a {
                put_c_string(b, off, s);
                off += c_str_bytes(s).len() + 1;
            }
        }
        V::NvList(l) => put_nvlist_t(b, 0, l, o),
        V::NvListArray(a) => {
            let base = 8 * a.len();
            a.iter().enumerate().for_each(|(i, l)| put_nvlist_t(b, base + NVLIST_T * i, l, o));
        }
    }
}

fn put_c_string(b: &mut [u8], off: usize, s: &str) {
    let s = c_str_bytes(s);
    b[off..off + s.len()].copy_from_slice(s);
}

/// A packed `nvlist_t`: version, nvflag; priv, flag and pad stay zero.
fn put_nvlist_t(b: &mut [u8], off: usize, l: &NvList, o: ByteOrder) {
    o.put_u32(b, off, NV_VERSION as u32);
    o.put_u32(b, off + 4, l.nvflag);
}
