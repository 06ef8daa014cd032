//! Text dump of an nvlist in the style of libnvpair's `dump_nvlist()` (what `zdb -l` prints,
//! with an indent of 4): one `name: value` line per scalar, `name[i]: value` per array element,
//! `name:` followed by the embedded list indented 4 more, strings in single quotes, valueless
//! booleans as the bare name. Like libnvpair, hrtime, double and boolean-array values are not printed but
//! reported as `bad config type N for NAME`.

use super::{NvList, NvValue};
use std::fmt::{self, Write};

impl NvList {
    /// The `dump_nvlist(list, indent)` text of this list.
    pub fn dump(&self, indent: usize) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = write_list(&mut s, self, indent);
        s
    }
}

impl fmt::Display for NvList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_list(f, self, 0)
    }
}

fn write_list(w: &mut impl Write, list: &NvList, indent: usize) -> fmt::Result {
    for (name, value) in &list.pairs {
        write_pair(w, name, value, indent)?;
    }
    Ok(())
}

fn each<T>(w: &mut impl Write, pad: &str, name: &str, a: &[T], f: impl Fn(&T) -> String) -> fmt::Result {
    for (i, v) in a.iter().enumerate() {
        writeln!(w, "{pad}{name}[{i}]: {}", f(v))?;
    }
    Ok(())
}

fn write_pair(w: &mut impl Write, name: &str, value: &NvValue, indent: usize) -> fmt::Result {
    use NvValue as V;
    let pad = " ".repeat(indent);
    let quote = |s: &String| format!("'{s}'");
    match value {
        V::Boolean => writeln!(w, "{pad}{name}"),
        V::BooleanValue(b) => writeln!(w, "{pad}{name}: {b}"),
        V::Byte(v) | V::Uint8(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Int8(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Int16(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Uint16(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Int32(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Uint32(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Int64(v) => writeln!(w, "{pad}{name}: {v}"),
        V::Uint64(v) => writeln!(w, "{pad}{name}: {v}"),
        V::String(s) => writeln!(w, "{pad}{name}: '{s}'"),
        V::ByteArray(a) | V::Uint8Array(a) => each(w, &pad, name, a, u8::to_string),
        V::Int8Array(a) => each(w, &pad, name, a, i8::to_string),
        V::Int16Array(a) => each(w, &pad, name, a, i16::to_string),
        V::Uint16Array(a) => each(w, &pad, name, a, u16::to_string),
        V::Int32Array(a) => each(w, &pad, name, a, i32::to_string),
        V::Uint32Array(a) => each(w, &pad, name, a, u32::to_string),
        V::Int64Array(a) => each(w, &pad, name, a, i64::to_string),
        V::Uint64Array(a) => each(w, &pad, name, a, u64::to_string),
        V::StringArray(a) => each(w, &pad, name, a, quote),
        V::NvList(l) => {
            writeln!(w, "{pad}{name}:")?;
            write_list(w, l, indent + 4)
        }
        V::NvListArray(a) => {
            for (i, l) in a.iter().enumerate() {
                writeln!(w, "{pad}{name}[{i}]:")?;
                write_list(w, l, indent + 4)?;
            }
            Ok(())
        }
        V::HrTime(_) | V::Double(_) | V::BooleanArray(_) => {
            writeln!(w, "bad config type {} for {name}", value.data_type() as i32)
        }
    }
}
