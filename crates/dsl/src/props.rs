//! Dataset properties: the on-disk props ZAP and the table of native properties.
//!
//! A DSL directory's props ZAP maps a property name to either a u64 (numbers and indexes,
//! e.g. `compression` = 15 for lz4) or a string (e.g. `mountpoint`). Properties not set
//! locally are inherited from the parent directory, else take their default
//! (OpenZFS `module/zcommon/zfs_prop.c`, `module/zfs/dsl_prop.c`). Received values
//! (`name$recvd`) and internal entries (containing `$`) are skipped for now.

use crate::Result;
use dmu::Objset;

/// A property value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawProp {
    Num(u64),
    Str(String),
}

/// Reads a props ZAP (object 0 = none).
pub fn read_props_zap(mos: &Objset, obj: u64) -> Result<Vec<(String, RawProp)>> {
    if obj == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in zap::list(mos, obj)? {
        let name = e.name_string();
        if name.contains('$') {
            continue;
        }
        let v = if e.int_size == 1 {
            RawProp::Str(e.string_value())
        } else {
            match e.first_u64() {
                Some(n) => RawProp::Num(n),
                None => continue,
            }
        };
        out.push((name, v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Index properties: (property, on-disk number, name) for the values rzfs displays.
pub const INDEX_VALUES: &[(&str, u64, &str)] = &[
    ("compression", 0, "inherit"),
    ("compression", 1, "on"),
    ("compression", 2, "off"),
    ("compression", 3, "lzjb"),
    ("compression", 4, "empty"),
    ("compression", 5, "gzip-1"),
    ("compression", 6, "gzip-2"),
    ("compression", 7, "gzip-3"),
    ("compression", 8, "gzip-4"),
    ("compression", 9, "gzip-5"),
    ("compression", 10, "gzip-6"),
    ("compression", 11, "gzip-7"),
    ("compression", 12, "gzip-8"),
    ("compression", 13, "gzip-9"),
    ("compression", 14, "zle"),
    ("compression", 15, "lz4"),
    ("compression", 16, "zstd"),
    ("checksum", 0, "inherit"),
    ("checksum", 1, "on"),
    ("checksum", 2, "off"),
    ("checksum", 6, "fletcher2"),
    ("checksum", 7, "fletcher4"),
    ("checksum", 8, "sha256"),
    ("checksum", 10, "noparity"),
    ("checksum", 11, "sha512"),
    ("checksum", 12, "skein"),
    ("checksum", 13, "edonr"),
    ("checksum", 14, "blake3"),
    ("atime", 0, "off"),
    ("atime", 1, "on"),
    ("relatime", 0, "off"),
    ("relatime", 1, "on"),
    ("readonly", 0, "off"),
    ("readonly", 1, "on"),
    ("canmount", 0, "off"),
    ("canmount", 1, "on"),
    ("canmount", 2, "noauto"),
    ("xattr", 0, "off"),
    ("xattr", 1, "on"),
    ("xattr", 2, "sa"),
    ("xattr", 3, "dir"),
    ("copies", 1, "1"),
    ("copies", 2, "2"),
    ("copies", 3, "3"),
    ("dedup", 0, "off"),
    ("dedup", 1, "on"),
    ("exec", 0, "off"),
    ("exec", 1, "on"),
    ("setuid", 0, "off"),
    ("setuid", 1, "on"),
    ("devices", 0, "off"),
    ("devices", 1, "on"),
    ("snapdir", 0, "hidden"),
    ("snapdir", 1, "visible"),
    ("sync", 0, "standard"),
    ("sync", 1, "always"),
    ("sync", 2, "disabled"),
];

/// Default values of the inheritable properties rzfs reports (`zfs get` with source
/// `default`).
pub const DEFAULTS: &[(&str, &str)] = &[
    ("compression", "off"),
    ("checksum", "on"),
    ("atime", "on"),
    ("relatime", "on"),
    ("readonly", "off"),
    ("canmount", "on"),
    ("xattr", "on"),
    ("copies", "1"),
    ("dedup", "off"),
    ("exec", "on"),
    ("setuid", "on"),
    ("devices", "on"),
    ("snapdir", "hidden"),
    ("sync", "standard"),
    ("recordsize", "131072"),
    ("quota", "0"),
    ("reservation", "0"),
];

/// Renders a stored value for display (index names for index properties).
pub fn display_value(prop: &str, v: &RawProp) -> String {
    match v {
        RawProp::Str(s) => s.clone(),
        RawProp::Num(n) => {
            if prop == "compression" && *n & 0x7f == 16 && *n >> 7 != 0 {
                // zstd-N stores the level above the 7 compression bits (OpenZFS
                // ZIO_COMPRESS_RAW); fast levels are 1000 + N.
                let level = *n >> 7;
                return match level {
                    1..=19 => format!("zstd-{level}"),
                    1001..=1100 => format!("zstd-fast-{}", level - 1000),
                    _ => format!("zstd-{level}"),
                };
            }
            INDEX_VALUES
                .iter()
                .find(|(p, num, _)| *p == prop && num == n)
                .map(|(_, _, name)| name.to_string())
                .unwrap_or_else(|| n.to_string())
        }
    }
}

/// Whether a property is inherited by child datasets.
pub fn is_inheritable(prop: &str) -> bool {
    !matches!(prop, "quota" | "reservation" | "refquota" | "refreservation" | "volsize")
}

/// Parses `zfs set`/`-O` input for a property rzfs can set, into the value stored in a
/// props ZAP. Errors name the problem the way zfs(8) does.
pub fn parse_value(prop: &str, value: &str) -> std::result::Result<RawProp, String> {
    let bad = || format!("'{prop}' must be one of {}", choices(prop));
    match prop {
        "mountpoint" => {
            if value == "none" || value == "legacy" || value.starts_with('/') {
                Ok(RawProp::Str(value.to_string()))
            } else {
                Err("'mountpoint' must be an absolute path, 'none', or 'legacy'".to_string())
            }
        }
        "recordsize" => {
            let n = parse_size(value).ok_or_else(|| format!("bad numeric value '{value}'"))?;
            if !(512..=(128 << 10)).contains(&n) || !n.is_power_of_two() {
                return Err("'recordsize' must be a power of 2 from 512B to 128K \
                            (larger records need the large_blocks feature, not supported yet)"
                    .into());
            }
            Ok(RawProp::Num(n))
        }
        "compression" => {
            if value.starts_with("zstd") {
                return Err(
                    "compression 'zstd' needs the zstd_compress feature, which rzfs cannot write yet".into(),
                );
            }
            let v = if value == "gzip" { "gzip-6" } else { value };
            index_of(prop, v).map(RawProp::Num).ok_or_else(bad)
        }
        "checksum" => match value {
            "on" | "off" | "fletcher2" | "fletcher4" | "sha256" => {
                index_of(prop, value).map(RawProp::Num).ok_or_else(bad)
            }
            "sha512" | "skein" | "edonr" | "blake3" => {
                Err(format!("checksum '{value}' needs the {value} feature, which rzfs cannot write yet"))
            }
            _ => Err(bad()),
        },
        "atime" | "relatime" | "readonly" | "canmount" | "xattr" | "copies" | "exec" | "setuid"
        | "devices" | "snapdir" | "sync" => index_of(prop, value).map(RawProp::Num).ok_or_else(bad),
        _ => Err(format!("property '{prop}' cannot be set by rzfs yet")),
    }
}

fn index_of(prop: &str, value: &str) -> Option<u64> {
    INDEX_VALUES.iter().find(|(p, _, n)| *p == prop && *n == value).map(|(_, v, _)| *v)
}

fn choices(prop: &str) -> String {
    let names: Vec<&str> = INDEX_VALUES
        .iter()
        .filter(|(p, v, n)| *p == prop && (*v != 0 || *n != "inherit"))
        .map(|x| x.2)
        .collect();
    names.join(" | ")
}

/// Parses sizes like `128K`, `1M`, `4096`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}
