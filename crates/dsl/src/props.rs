//! Dataset properties: the on-disk props ZAP and the table of native properties.
//!
//! A DSL directory's props ZAP maps a property name to either a u64 (numbers and indexes,
//! e.g. `compression` = 15 for lz4) or a string (e.g. `mountpoint`). Properties not set
//! locally are inherited from the parent directory, else take their default
//! (OpenZFS `module/zcommon/zfs_prop.c`, `module/zfs/dsl_prop.c`).
//!
//! Received properties (`zfs receive` of a stream with properties) sit beside the local
//! ones in the same ZAP as `name$recvd`; `zfs inherit` on a dataset that has received
//! values (marked by `$hasrecvd`) leaves `name$inherit`, so the received value stops
//! applying; `zfs inherit -S` removes the local value and that marker, and the received
//! value applies again. At each directory a local value wins, then (unless the marker is
//! there) the received one ([`applies`], as `dsl_prop_get_dd` decides).

use crate::Result;
use dmu::Objset;

/// A property value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawProp {
    Num(u64),
    Str(String),
}

/// Suffix of a received value's entry.
pub const RECVD_SUFFIX: &str = "$recvd";
/// Suffix of an explicit-inherit marker.
pub const INHERIT_SUFFIX: &str = "$inherit";
/// Entry marking a dataset that has received properties.
pub const HAS_RECVD: &str = "$hasrecvd";

/// Reads a props ZAP (object 0 = none): the local values only.
pub fn read_props_zap(mos: &Objset, obj: u64) -> Result<Vec<(String, RawProp)>> {
    Ok(read_props_zap_all(mos, obj)?.into_iter().filter(|(k, _)| !k.contains('$')).collect())
}

/// Every entry of a props ZAP, the received values and markers (`$`) included.
pub fn read_props_zap_all(mos: &Objset, obj: u64) -> Result<Vec<(String, RawProp)>> {
    if obj == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in zap::list(mos, obj)? {
        let name = e.name_string();
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

/// The value of `prop` that a directory's (or snapshot's) props ZAP entries `all` give
/// the dataset itself: the local value, else the received one unless an explicit-inherit
/// marker hides it; `true` with a received value. `None`: look at the parent.
pub fn applies(all: &[(String, RawProp)], prop: &str) -> Option<(RawProp, bool)> {
    let get = |k: &str| all.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if let Some(v) = get(prop) {
        return Some((v, false));
    }
    if get(&format!("{prop}{INHERIT_SUFFIX}")).is_some() {
        return None;
    }
    get(&format!("{prop}{RECVD_SUFFIX}")).map(|v| (v, true))
}

/// The received value of `prop` among entries `all`, if any (`zfs get -o received`).
pub fn received(all: &[(String, RawProp)], prop: &str) -> Option<RawProp> {
    let k = format!("{prop}{RECVD_SUFFIX}");
    all.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
}

/// Names of the properties entries `all` hold a local or received value of.
pub fn names_set(all: &[(String, RawProp)]) -> Vec<String> {
    let mut out: Vec<String> = all
        .iter()
        .filter_map(|(k, _)| if k.contains('$') { k.strip_suffix(RECVD_SUFFIX) } else { Some(k.as_str()) })
        .filter(|k| !k.is_empty() && !k.contains('$'))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
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
    // Shown as `gzip` (zfs_prop.c lists it before `gzip-6`, the same value).
    ("compression", 10, "gzip"),
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
    ("overlay", 0, "off"),
    ("overlay", 1, "on"),
    ("readonly", 0, "off"),
    ("readonly", 1, "on"),
    ("canmount", 0, "off"),
    ("canmount", 1, "on"),
    ("canmount", 2, "noauto"),
    // ZFS_XATTR_OFF 0, ZFS_XATTR_DIR 1, ZFS_XATTR_SA 2 (include/sys/fs/zfs.h); "on" is
    // stored as 1, the directory form rzfs writes.
    ("xattr", 0, "off"),
    ("xattr", 1, "on"),
    ("xattr", 2, "sa"),
    ("xattr", 1, "dir"),
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
    // ZFS_ACLTYPE_OFF/POSIX/NFSV4 (include/sys/zfs_ioctl.h); the aliases noacl, disabled
    // and posixacl are taken by `parse_value`.
    ("acltype", 0, "off"),
    ("acltype", 1, "posix"),
    ("acltype", 2, "nfsv4"),
    // ZFS_SNAPDIR_HIDDEN/VISIBLE/DISABLED (include/sys/fs/zfs.h; disabled since 2.3).
    ("snapdir", 0, "hidden"),
    ("snapdir", 1, "visible"),
    ("snapdir", 2, "disabled"),
    // ZFS_CACHE_NONE/METADATA/ALL (include/sys/fs/zfs.h).
    ("primarycache", 0, "none"),
    ("primarycache", 1, "metadata"),
    ("primarycache", 2, "all"),
    ("secondarycache", 0, "none"),
    ("secondarycache", 1, "metadata"),
    ("secondarycache", 2, "all"),
    // ZFS_LOGBIAS_LATENCY/THROUGHPUT.
    ("logbias", 0, "latency"),
    ("logbias", 1, "throughput"),
    // ZFS_REDUNDANT_METADATA_ALL/MOST/SOME/NONE.
    ("redundant_metadata", 0, "all"),
    ("redundant_metadata", 1, "most"),
    ("redundant_metadata", 2, "some"),
    ("redundant_metadata", 3, "none"),
    ("zoned", 0, "off"),
    ("zoned", 1, "on"),
    // ZFS_ACL_DISCARD .. ZFS_ACL_PASSTHROUGH_X (include/sys/zfs_acl.h); "secure" is the old
    // name of restricted. They govern NFSv4 ACLs, which a Linux mount does not apply.
    ("aclinherit", 0, "discard"),
    ("aclinherit", 1, "noallow"),
    ("aclinherit", 4, "restricted"),
    ("aclinherit", 3, "passthrough"),
    ("aclinherit", 4, "secure"),
    ("aclinherit", 5, "passthrough-x"),
    ("aclmode", 0, "discard"),
    ("aclmode", 2, "groupmask"),
    ("aclmode", 3, "passthrough"),
    ("aclmode", 4, "restricted"),
    ("sync", 0, "standard"),
    ("sync", 1, "always"),
    ("sync", 2, "disabled"),
    // ZFS_VOLMODE_DEFAULT/GEOM/DEV/NONE (include/sys/fs/zfs.h).
    ("volmode", 0, "default"),
    ("volmode", 1, "geom"),
    ("volmode", 1, "full"),
    ("volmode", 2, "dev"),
    ("volmode", 3, "none"),
    // ZFS_DNSIZE_LEGACY 0, AUTO 1, then the size in bytes (include/sys/fs/zfs.h).
    ("dnodesize", 0, "legacy"),
    ("dnodesize", 1, "auto"),
    ("dnodesize", 1024, "1k"),
    ("dnodesize", 2048, "2k"),
    ("dnodesize", 4096, "4k"),
    ("dnodesize", 8192, "8k"),
    ("dnodesize", 16384, "16k"),
];

/// Default values of the inheritable properties rzfs reports (`zfs get` with source
/// `default`).
pub const DEFAULTS: &[(&str, &str)] = &[
    // OpenZFS 2.2+ registers `compression` with ZIO_COMPRESS_DEFAULT = ON (zfs_prop.c,
    // zio.h): a dataset that never set it is written with lz4 (lzjb without lz4_compress).
    ("compression", "on"),
    ("checksum", "on"),
    ("atime", "on"),
    ("relatime", "on"),
    // Mounting over a directory that is not empty is allowed (zfs_prop.c registers
    // `overlay` with 1 since OpenZFS 2.0).
    ("overlay", "on"),
    ("readonly", "off"),
    ("canmount", "on"),
    ("xattr", "on"),
    ("copies", "1"),
    ("dedup", "off"),
    ("exec", "on"),
    ("setuid", "on"),
    ("devices", "on"),
    // Linux's default; FreeBSD's is nfsv4.
    ("acltype", "off"),
    ("snapdir", "hidden"),
    ("sync", "standard"),
    ("recordsize", "131072"),
    ("quota", "0"),
    ("refquota", "0"),
    ("sharenfs", "off"),
    ("sharesmb", "off"),
    ("reservation", "0"),
    ("refreservation", "0"),
    ("volmode", "default"),
    ("dnodesize", "legacy"),
    ("primarycache", "all"),
    ("secondarycache", "all"),
    ("logbias", "latency"),
    ("redundant_metadata", "all"),
    ("zoned", "off"),
    ("aclinherit", "restricted"),
    ("aclmode", "discard"),
];

/// Renders a stored value for display (index names for index properties).
pub fn display_value(prop: &str, v: &RawProp) -> String {
    match v {
        RawProp::Str(s) => s.clone(),
        RawProp::Num(n) => {
            if prop == "compression" && *n & 0x7f == 16 && *n >> 7 != 0 {
                // zstd-N stores the level (an OpenZFS `zio_zstd_levels` value: 1..19, fast
                // levels from 103) above the 7 compression bits (ZIO_COMPRESS_RAW).
                return zstd_level_name(*n >> 7);
            }
            INDEX_VALUES
                .iter()
                .find(|(p, num, _)| *p == prop && num == n)
                .map(|(_, _, name)| name.to_string())
                .unwrap_or_else(|| n.to_string())
        }
    }
}

/// Where an inheritable property's value comes from: the value set on the dataset's
/// directory or the nearest ancestor's, and how many directories up that is (0: local).
/// `lookup(dir)` gives a directory's local value of the property and its parent (0 at the
/// root). The one rule both `zfs get` (on a committed view) and the writer (settings a
/// dataset is written with, on the open txg) follow (OpenZFS `dsl_prop_get_dd`); `None`
/// means the default. Chains longer than 256 directories (a damaged pool) end at the
/// default.
pub fn resolve<E>(
    dir: u64,
    prop: &str,
    mut lookup: impl FnMut(u64) -> std::result::Result<(Option<RawProp>, u64), E>,
) -> std::result::Result<Option<(RawProp, usize)>, E> {
    let mut cur = dir;
    for hops in 0..256 {
        let (v, parent) = lookup(cur)?;
        if let Some(v) = v {
            return Ok(Some((v, hops)));
        }
        if parent == 0 || !is_inheritable(prop) {
            break;
        }
        cur = parent;
    }
    Ok(None)
}

/// Whether a property is inherited by child datasets (OpenZFS registers the others
/// `PROP_DEFAULT` in zfs_prop.c: canmount and version among them).
pub fn is_inheritable(prop: &str) -> bool {
    !matches!(
        prop,
        "quota"
            | "reservation"
            | "refquota"
            | "refreservation"
            | "volsize"
            | "canmount"
            | "version"
            | "filesystem_limit"
            | "snapshot_limit"
    )
}

/// Native properties zfs(8) cannot change on an existing dataset (`zfs_prop_readonly`:
/// `PROP_READONLY`, and the `PROP_ONETIME` ones fixed at creation).
pub fn is_readonly(prop: &str) -> bool {
    matches!(
        prop,
        "type"
            | "creation"
            | "used"
            | "available"
            | "referenced"
            | "compressratio"
            | "refcompressratio"
            | "mounted"
            | "origin"
            | "usedbysnapshots"
            | "usedbydataset"
            | "usedbychildren"
            | "usedbyrefreservation"
            | "userrefs"
            | "written"
            | "logicalused"
            | "logicalreferenced"
            | "createtxg"
            | "guid"
            | "objsetid"
            | "clones"
            | "receive_resume_token"
            | "defer_destroy"
            | "filesystem_count"
            | "snapshot_count"
            | "snapshots_changed"
            | "snapshots_changed_nsecs"
            | "encryptionroot"
            | "keystatus"
            | "redact_snaps"
            | "normalization"
            | "utf8only"
            | "casesensitivity"
            | "volblocksize"
            | "encryption"
    )
}

/// A user property (`module:name`): only lowercase letters, digits, `-`, `_`, `.` and
/// `:`, with at least one `:` (OpenZFS `zfs_prop_user`, `zprop_valid_char`). They are
/// stored as strings in the same props ZAPs as native properties and inherited the same
/// way; a snapshot's own are in its `ds_props_obj`.
pub fn is_user_prop(name: &str) -> bool {
    name.contains(':')
        && name.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_.:".contains(&c))
}

/// Longest property name (`ZAP_MAXNAMELEN`, counting the NUL).
pub const MAX_PROP_NAME: usize = 256;
/// Longest property value (`ZAP_MAXVALUELEN`, counting the NUL).
pub const MAX_PROP_VALUE: usize = 8192;

/// Parses `zfs set`/`-O` input for a property rzfs can set, into the value stored in a
/// props ZAP. Errors name the problem the way zfs(8) does.
/// The full name of a property given by one of the short names zfs(8) accepts
/// (`compress`, `recsize`, ...); other names are returned as they are.
pub fn canonical(prop: &str) -> &str {
    match prop {
        "compress" => "compression",
        "rdonly" => "readonly",
        "avail" => "available",
        "recsize" => "recordsize",
        "refer" => "referenced",
        "reserv" => "reservation",
        "refreserv" => "refreservation",
        "volblock" => "volblocksize",
        "dnsize" => "dnodesize",
        "ratio" => "compressratio",
        "refratio" => "refcompressratio",
        "lused" => "logicalused",
        "lrefer" => "logicalreferenced",
        p => p,
    }
}

pub fn parse_value(prop: &str, value: &str) -> std::result::Result<RawProp, String> {
    let bad = || format!("'{prop}' must be one of {}", choices(prop));
    if is_user_prop(prop) {
        if prop.len() >= MAX_PROP_NAME {
            return Err(format!("property name '{prop}' is too long"));
        }
        if value.len() >= MAX_PROP_VALUE {
            return Err("property value too long".into());
        }
        if value.contains('\0') {
            return Err("property values cannot contain NUL".into());
        }
        return Ok(RawProp::Str(value.to_string()));
    }
    if prop.contains(':') {
        return Err("user property names are lowercase letters, digits, '-', '_', '.' and ':'".into());
    }
    match prop {
        "mountpoint" => {
            if value == "none" || value == "legacy" {
                Ok(RawProp::Str(value.to_string()))
            } else if !value.starts_with('/') {
                Err("'mountpoint' must be an absolute path, 'none', or 'legacy'".to_string())
            } else if value.split('/').any(|c| c.len() >= 256) {
                // mountpoint_namecheck: a component as long as a dataset name may be at most.
                Err("component of 'mountpoint' is too long".to_string())
            } else {
                Ok(RawProp::Str(value.to_string()))
            }
        }
        "recordsize" => {
            let n = parse_size(value).ok_or_else(|| format!("bad numeric value '{value}'"))?;
            if !(512..=MAX_RECORDSIZE).contains(&n) || !n.is_power_of_two() {
                return Err("'recordsize' must be a power of 2 from 512B to 16M".into());
            }
            Ok(RawProp::Num(n))
        }
        "compression" => {
            if let Some(level) = parse_zstd(value) {
                return level.map(|l| RawProp::Num(16 | (l << 7))).ok_or_else(|| {
                    "'compression' zstd levels are zstd-1 .. zstd-19, zstd-fast-1 .. zstd-fast-10, \
                     zstd-fast-20 .. zstd-fast-100 by 10, zstd-fast-500, zstd-fast-1000"
                        .to_string()
                });
            }
            let v = if value == "gzip" { "gzip-6" } else { value };
            index_of(prop, v).map(RawProp::Num).ok_or_else(bad)
        }
        "checksum" => match value {
            // noparity: no checksum, and RAID-Z reads skip the parity check (OpenZFS's
            // raidz_parity_verify); rzfs reads such blocks as it reads checksum=off ones.
            "on" | "off" | "fletcher2" | "fletcher4" | "sha256" | "noparity" | "sha512" | "skein"
            | "edonr" | "blake3" => index_of(prop, value).map(RawProp::Num).ok_or_else(bad),
            _ => Err(bad()),
        },
        "acltype" => {
            let v = match value {
                "noacl" | "disabled" => "off",
                "posixacl" => "posix",
                v => v,
            };
            index_of(prop, v).map(RawProp::Num).ok_or_else(bad)
        }
        "quota" | "refquota" => match value {
            "none" => Ok(RawProp::Num(0)),
            v => match parse_size(v) {
                Some(0) => Err("use 'none' to disable quota/refquota".into()),
                Some(n) => Ok(RawProp::Num(n)),
                None => Err(format!("bad numeric value '{v}'")),
            },
        },
        // A count, or `none` (UINT64_MAX, as OpenZFS stores it).
        "filesystem_limit" | "snapshot_limit" => match value {
            "none" => Ok(RawProp::Num(u64::MAX)),
            v => parse_size(v).map(RawProp::Num).ok_or_else(|| format!("bad numeric value '{v}'")),
        },
        "refreservation" | "reservation" => match value {
            "none" => Ok(RawProp::Num(0)),
            v => parse_size(v).map(RawProp::Num).ok_or_else(|| format!("bad numeric value '{v}'")),
        },
        "sharenfs" => valid_sharenfs(value).map(|()| RawProp::Str(value.to_string())),
        "sharesmb" => match value {
            "on" | "off" => Ok(RawProp::Str(value.to_string())),
            _ => Err("'sharesmb' must be 'on' or 'off'".into()),
        },
        "atime" | "relatime" | "overlay" | "readonly" | "canmount" | "xattr" | "copies" | "exec"
        | "setuid" | "devices" | "snapdir" | "sync" | "volmode" | "dnodesize" | "primarycache"
        | "secondarycache" | "logbias" | "redundant_metadata" | "zoned" | "aclinherit" | "aclmode" => {
            index_of(prop, value).map(RawProp::Num).ok_or_else(bad)
        }
        _ => Err(format!("property '{prop}' cannot be set by rzfs yet")),
    }
}

/// Checks a `sharenfs` value as OpenZFS on Linux does before storing it: `on`, `off`, or
/// comma-separated options of exportfs(8) — `ro`/`rw` (optionally `=host[:host...]`),
/// `sec=...`, or one of the Linux export options OpenZFS passes on (its libzfs
/// `get_linux_shareopts_cb` list). rzfs keeps the property for OpenZFS and for tools that
/// read it; it does not export file systems itself.
fn valid_sharenfs(value: &str) -> std::result::Result<(), String> {
    const KEYS: &[&str] = &[
        "all_squash",
        "anongid",
        "anonuid",
        "async",
        "auth_nlm",
        "crossmnt",
        "fsid",
        "fsuid",
        "hide",
        "insecure",
        "insecure_locks",
        "mountpoint",
        "mp",
        "no_acl",
        "no_all_squash",
        "no_auth_nlm",
        "no_root_squash",
        "no_subtree_check",
        "no_wdelay",
        "nohide",
        "refer",
        "replicas",
        "root_squash",
        "secure",
        "secure_locks",
        "subtree_check",
        "sync",
        "wdelay",
    ];
    if value == "on" || value == "off" {
        return Ok(());
    }
    if value.is_empty()
        || value.len() >= MAX_PROP_VALUE
        || value.contains(|c: char| c.is_whitespace() || c == '\0')
    {
        return Err(format!("'sharenfs' cannot be '{value}': not 'on', 'off' or share options"));
    }
    for opt in value.split(',') {
        let key = opt.split_once('=').map_or(opt, |(k, _)| k);
        if !(matches!(key, "ro" | "rw" | "sec") || KEYS.contains(&key)) {
            return Err(format!("'sharenfs' cannot be '{value}': unknown share option '{key}'"));
        }
    }
    Ok(())
}

/// Largest `recordsize` (`SPA_MAXBLOCKSIZE`; OpenZFS 2.2+ allows it by default).
pub const MAX_RECORDSIZE: u64 = 16 << 20;

/// OpenZFS `zio_zstd_levels` values of the fast levels, in order: 1..=10, 20..=100 by 10,
/// 500, 1000 map to 103..=123.
const ZSTD_FAST: [u64; 21] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 500, 1000];
const ZSTD_LEVEL_FAST_1: u64 = 103;

/// `zstd`, `zstd-N`, `zstd-fast`, `zstd-fast-N`: Some(level value stored above the
/// compression bits; 0 = the default level) or Some(None) for a bad level; None if `value`
/// is not a zstd name.
fn parse_zstd(value: &str) -> Option<Option<u64>> {
    let rest = value.strip_prefix("zstd")?;
    if rest.is_empty() {
        return Some(Some(0));
    }
    if let Some(fast) = rest.strip_prefix("-fast") {
        if fast.is_empty() {
            return Some(Some(ZSTD_LEVEL_FAST_1));
        }
        let n: u64 = fast.strip_prefix('-')?.parse().ok()?;
        return Some(ZSTD_FAST.iter().position(|&x| x == n).map(|i| ZSTD_LEVEL_FAST_1 + i as u64));
    }
    let n: u64 = rest.strip_prefix('-')?.parse().ok()?;
    Some((1..=19).contains(&n).then_some(n))
}

/// Display name of a zstd level value ([`parse_zstd`]'s inverse).
fn zstd_level_name(level: u64) -> String {
    match level {
        0 => "zstd".into(),
        1..=19 => format!("zstd-{level}"),
        ZSTD_LEVEL_FAST_1..=123 => format!("zstd-fast-{}", ZSTD_FAST[(level - ZSTD_LEVEL_FAST_1) as usize]),
        _ => format!("zstd-{level}"),
    }
}

fn index_of(prop: &str, value: &str) -> Option<u64> {
    INDEX_VALUES.iter().find(|(p, _, n)| *p == prop && *n == value).map(|(_, v, _)| *v)
}

pub fn choices(prop: &str) -> String {
    let names: Vec<&str> = INDEX_VALUES
        .iter()
        .filter(|(p, v, n)| *p == prop && (*v != 0 || *n != "inherit"))
        .map(|x| x.2)
        .collect();
    names.join(" | ")
}

/// Parses sizes as `zfs_nicestrtonum` does: a number (a fraction allowed with a suffix),
/// then an optional suffix `B K M G T P E` (any case), optionally followed by `B` or `iB`:
/// `4096`, `128K`, `150m`, `1.5G`, `8KB`, `2TiB`, `1eb`. Overflow is `None`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() {
        return None;
    }
    let upper = suffix.to_ascii_uppercase();
    let letter = match upper.as_str() {
        "" => "",
        u if u.len() == 1 => u,
        u if u.len() == 2 && u.ends_with('B') && u != "BB" => &u[..1],
        u if u.len() == 3 && u.ends_with("IB") && !u.starts_with('B') => &u[..1],
        _ => return None,
    };
    let shift = match letter {
        "" | "B" => 0u32,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        "E" => 60,
        _ => return None,
    };
    if let Some((whole, frac)) = num.split_once('.') {
        if shift == 0 || frac.contains('.') {
            return None;
        }
        let v: f64 = format!("{}.{frac}", if whole.is_empty() { "0" } else { whole }).parse().ok()?;
        let r = v * (1u64 << shift) as f64;
        return (r.is_finite() && r < u64::MAX as f64).then_some(r as u64);
    }
    num.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(prop: &str, v: &str) -> u64 {
        match parse_value(prop, v) {
            Ok(RawProp::Num(n)) => n,
            other => panic!("{prop}={v}: {other:?}"),
        }
    }

    #[test]
    fn user_properties() {
        for ok in ["com.sun:auto-snapshot", "syncoid:sync", "a:b", ":x", "org.znapzend:src_plan"] {
            assert!(is_user_prop(ok), "{ok}");
        }
        for bad in ["compression", "Com.sun:x", "a b:c", "a:b@c", "", "a/b:c"] {
            assert!(!is_user_prop(bad), "{bad}");
        }
        assert_eq!(parse_value("com.sun:auto-snapshot", "true"), Ok(RawProp::Str("true".into())));
        assert_eq!(parse_value("x:y", ""), Ok(RawProp::Str(String::new())));
        assert!(parse_value("x:y", &"v".repeat(MAX_PROP_VALUE)).unwrap_err().contains("too long"));
        assert!(parse_value(&format!("x:{}", "n".repeat(300)), "1").unwrap_err().contains("too long"));
        assert!(is_inheritable("x:y"));
    }

    #[test]
    fn mountpoints() {
        assert_eq!(parse_value("mountpoint", "/a/b"), Ok(RawProp::Str("/a/b".into())));
        assert_eq!(parse_value("mountpoint", "legacy"), Ok(RawProp::Str("legacy".into())));
        assert!(parse_value("mountpoint", "a/b").unwrap_err().contains("absolute path"));
        let long = format!("/x/{}", "c".repeat(256));
        assert_eq!(parse_value("mountpoint", &long).unwrap_err(), "component of 'mountpoint' is too long");
        assert!(parse_value("mountpoint", &format!("/x/{}", "c".repeat(255))).is_ok());
    }

    #[test]
    fn sizes_parse_as_zfs_nicestrtonum() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("128K"), Some(128 << 10));
        assert_eq!(parse_size("150m"), Some(150 << 20));
        assert_eq!(parse_size("8KB"), Some(8 << 10));
        assert_eq!(parse_size("2TiB"), Some(2 << 40));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("1eb"), Some(1 << 60));
        assert_eq!(parse_size("512B"), Some(512));
        assert_eq!(parse_size("16E"), None);
        for bad in ["", "K", "12Q", "1.5", "1..5K", "3BB", "-1", "1KK"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn zstd_levels_round_trip() {
        assert_eq!(num("compression", "zstd"), 16);
        assert_eq!(num("compression", "zstd-3"), 16 | (3 << 7));
        assert_eq!(num("compression", "zstd-fast"), 16 | (103 << 7));
        assert_eq!(num("compression", "zstd-fast-1000"), 16 | (123 << 7));
        for name in ["zstd-1", "zstd-19", "zstd-fast-1", "zstd-fast-10", "zstd-fast-90", "zstd-fast-500"] {
            let n = num("compression", name);
            assert_eq!(display_value("compression", &RawProp::Num(n)), name);
        }
        for bad in ["zstd-0", "zstd-20", "zstd-fast-11", "zstd-x", "zstd-fast-"] {
            assert!(parse_value("compression", bad).is_err(), "{bad}");
        }
        assert_eq!(display_value("compression", &RawProp::Num(16)), "zstd");
    }

    #[test]
    fn access_control_properties() {
        assert_eq!(num("acltype", "off"), 0);
        assert_eq!(num("acltype", "posix"), 1);
        assert_eq!(num("acltype", "posixacl"), 1);
        assert_eq!(num("acltype", "nfsv4"), 2);
        assert_eq!(num("acltype", "noacl"), 0);
        assert_eq!(num("acltype", "disabled"), 0);
        assert_eq!(display_value("acltype", &RawProp::Num(1)), "posix");
        assert_eq!(
            parse_value("acltype", "bogus").unwrap_err(),
            "'acltype' must be one of off | posix | nfsv4"
        );
        for p in ["exec", "setuid", "devices"] {
            assert_eq!((num(p, "off"), num(p, "on")), (0, 1));
        }
        assert_eq!(num("xattr", "dir"), 1);
        assert_eq!(num("xattr", "sa"), 2);
        assert!(DEFAULTS.contains(&("acltype", "off")));
    }

    #[test]
    fn checksums_and_recordsize() {
        assert_eq!(num("checksum", "sha512"), 11);
        assert_eq!(num("checksum", "blake3"), 14);
        assert_eq!(num("checksum", "noparity"), 10);
        assert_eq!(num("recordsize", "1M"), 1 << 20);
        assert_eq!(num("recordsize", "16M"), 16 << 20);
        assert!(parse_value("recordsize", "32M").is_err());
        assert!(parse_value("recordsize", "3K").is_err());
    }
}
