//! `zpool get PROPS POOL VDEV...` and `zpool set PROP=VALUE POOL VDEV`: vdev properties.
//!
//! The table is OpenZFS 2.3's (`vdev_prop_init`, in `vdev_prop_t` order; `name` is hidden).
//! Read-only properties come from the vdev tree and its counters; the settable ones and
//! user properties (`module:name`) are kept in the vdev's ZAP (`pool::vdevzaps`). Values are
//! shown as libzfs shows them (`zpool_get_vdev_prop_value`): sizes and counters through
//! `zfs_nicenum` unless `-p`, unset strings `-`, thresholds of UINT64_MAX `-`, and the
//! source `default` when a settable property holds its default value.
//!
//! Scope: rzfs stores `failfast`, `checksum_n/_t`, `io_n/_t` and `slow_io_n/_t` where
//! OpenZFS and its event daemon read them; rzfs's own fault handling does not consult them
//! yet. `allocating=off` (no new allocations on a vdev) and `path` changes are refused.

use crate::daemon::State;
use crate::format::nicenum;
use crate::proto::Response;
use pool::vdevzaps::VdevPropValue;
use pool::Pool;
use std::sync::Arc;
use vdev::{Vdev, VdevKind};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Num,
    Index(&'static [(&'static str, u64)]),
}

const ONOFF: &[(&str, u64)] = &[("off", 0), ("on", 1)];
/// `ZPROP_BOOLEAN_NA` shows as `-`.
const ONOFF_NA: &[(&str, u64)] = &[("off", 0), ("on", 1), ("-", 2)];
/// `ZPROP_BOOLEAN_INHERIT`.
const ONOFF_INHERIT: &[(&str, u64)] = &[("off", 0), ("on", 1), ("inherit", 2)];

/// (name, kind, settable, default for numeric and index properties).
const PROPS: &[(&str, Kind, bool, u64)] = &[
    ("capacity", Kind::Num, false, 0),
    ("state", Kind::Num, false, 0),
    ("guid", Kind::Num, false, 0),
    ("asize", Kind::Num, false, 0),
    ("psize", Kind::Num, false, 0),
    ("ashift", Kind::Num, false, 0),
    ("size", Kind::Num, false, 0),
    ("free", Kind::Num, false, 0),
    ("allocated", Kind::Num, false, 0),
    ("comment", Kind::Str, true, 0),
    ("expandsize", Kind::Num, false, 0),
    ("fragmentation", Kind::Num, false, 0),
    ("bootsize", Kind::Num, false, 0),
    ("parity", Kind::Num, false, 0),
    ("path", Kind::Str, true, 0),
    ("devid", Kind::Str, false, 0),
    ("physpath", Kind::Str, false, 0),
    ("encpath", Kind::Str, false, 0),
    ("fru", Kind::Str, false, 0),
    ("parent", Kind::Str, false, 0),
    ("children", Kind::Str, false, 0),
    ("numchildren", Kind::Num, false, 0),
    ("read_errors", Kind::Num, false, 0),
    ("write_errors", Kind::Num, false, 0),
    ("checksum_errors", Kind::Num, false, 0),
    ("initialize_errors", Kind::Num, false, 0),
    ("null_ops", Kind::Num, false, 0),
    ("read_ops", Kind::Num, false, 0),
    ("write_ops", Kind::Num, false, 0),
    ("free_ops", Kind::Num, false, 0),
    ("claim_ops", Kind::Num, false, 0),
    ("trim_ops", Kind::Num, false, 0),
    ("null_bytes", Kind::Num, false, 0),
    ("read_bytes", Kind::Num, false, 0),
    ("write_bytes", Kind::Num, false, 0),
    ("free_bytes", Kind::Num, false, 0),
    ("claim_bytes", Kind::Num, false, 0),
    ("trim_bytes", Kind::Num, false, 0),
    ("removing", Kind::Index(ONOFF), false, 0),
    ("allocating", Kind::Index(ONOFF_NA), true, 1),
    ("failfast", Kind::Index(ONOFF_INHERIT), true, 1),
    ("checksum_n", Kind::Num, true, u64::MAX),
    ("checksum_t", Kind::Num, true, u64::MAX),
    ("io_n", Kind::Num, true, u64::MAX),
    ("io_t", Kind::Num, true, u64::MAX),
    ("raidz_expanding", Kind::Index(ONOFF), false, 0),
    ("slow_io_n", Kind::Num, true, u64::MAX),
    ("slow_io_t", Kind::Num, true, u64::MAX),
    ("trim_support", Kind::Index(ONOFF), false, 0),
    ("trim_errors", Kind::Num, false, 0),
    ("slow_ios", Kind::Num, false, 0),
];

fn def(name: &str) -> Option<&'static (&'static str, Kind, bool, u64)> {
    PROPS.iter().find(|p| p.0 == name)
}

/// A vdev as `zpool get` names and measures it.
struct View<'a> {
    /// None: the root.
    v: Option<&'a Vdev>,
    /// Its name in the kernel's style (`vdev_name`): the pool for the root, `TYPE-ID` for
    /// interior vdevs (type without parity: `raidz-0`), the path for leaves.
    kname: String,
    parent: Option<String>,
    top: bool,
}

fn leaf_path(p: &Pool, v: &Vdev) -> String {
    p.leaf_paths.get(&v.guid()).cloned().unwrap_or_else(|| v.name())
}

fn kernel_name(p: &Pool, v: &Vdev) -> String {
    if v.kind().is_leaf() {
        leaf_path(p, v)
    } else {
        format!("{}-{}", v.kind().type_name(), v.id())
    }
}

/// The status name `zpool` prints for a vdev (`all-vdevs` rows).
fn status_name(p: &Pool, v: &Vdev) -> String {
    if v.kind().is_leaf() {
        leaf_path(p, v)
    } else {
        v.name()
    }
}

fn all_views(p: &Pool) -> Vec<(String, View<'_>)> {
    fn walk<'a>(p: &'a Pool, v: &'a Vdev, parent: String, top: bool, out: &mut Vec<(String, View<'a>)>) {
        let kname = kernel_name(p, v);
        out.push((status_name(p, v), View { v: Some(v), kname: kname.clone(), parent: Some(parent), top }));
        for c in v.children().iter().filter(|c| *c.kind() != VdevKind::Hole) {
            walk(p, c, kname.clone(), false, out);
        }
    }
    let mut out =
        vec![("root-0".to_string(), View { v: None, kname: p.name().to_string(), parent: None, top: false })];
    for t in p.tops.iter().filter(|t| *t.kind() != VdevKind::Hole) {
        walk(p, t, p.name().to_string(), true, &mut out);
    }
    out
}

/// The vdev a command-line name designates (OpenZFS's `zpool_find_vdev` rules, roughly):
/// `root`/`root-0`, a guid, a leaf's path (whole, without `/dev/`, or its last component
/// when unique), an interior vdev's status name (`mirror-0`, `raidz1-0`, `raidz-0`).
fn find<'a>(p: &'a Pool, name: &str) -> Option<View<'a>> {
    let views = all_views(p);
    let guid_of = |v: &View| v.v.map_or(p.guid(), |x| x.guid());
    let mut hit = None;
    for (i, (sname, view)) in views.iter().enumerate() {
        let leaf = view.v.is_some_and(|v| v.kind().is_leaf());
        let matches = (view.v.is_none() && (name == "root" || name == "root-0"))
            || name.parse::<u64>().ok() == Some(guid_of(view))
            || (!leaf && view.v.is_some() && (name == sname || name == view.kname))
            || (leaf && (name == sname || sname.strip_prefix("/dev/") == Some(name)));
        if matches {
            hit = Some(i);
            break;
        }
    }
    if hit.is_none() {
        let base: Vec<usize> = views
            .iter()
            .enumerate()
            .filter(|(_, (s, v))| {
                v.v.is_some_and(|x| x.kind().is_leaf())
                    && std::path::Path::new(s).file_name().is_some_and(|f| f == name)
            })
            .map(|(i, _)| i)
            .collect();
        if base.len() == 1 {
            hit = Some(base[0]);
        }
    }
    hit.and_then(|i| views.into_iter().nth(i)).map(|(_, v)| v)
}

/// Is `name` a vdev of pool `p`?
pub fn is_vdev(p: &Pool, name: &str) -> bool {
    find(p, name).is_some()
}

/// libzfs's `zpool_state_to_name` for our health, and the `vdev_state_t` number (`-p`).
fn state_of(h: pool::status::PoolHealth) -> (&'static str, u64) {
    use pool::status::PoolHealth as H;
    match h {
        H::Online => ("ONLINE", 7),
        H::Degraded => ("DEGRADED", 6),
        H::Faulted => ("FAULTED", 5),
        H::Unavail => ("UNAVAIL", 4),
        H::Offline => ("OFFLINE", 2),
    }
}

fn health_of(v: &Vdev) -> pool::status::PoolHealth {
    pool::status::health_of(v.state())
}

/// What a property read yields before formatting.
enum Raw {
    Str(String),
    Num(u64),
    /// Not reported for this vdev: libzfs shows the default (or `-`).
    Absent,
    /// Not a property of this vdev at all (`raidz_expanding` off RAID-Z): no row.
    Skip,
}

/// Everything the read-only properties need about one pool, gathered once.
struct Ctx<'a> {
    p: &'a Pool,
    health: pool::status::PoolHealth,
    pool_space: (u64, u64),
    top_space: Vec<(u64, u64, u64)>,
    geometry: Vec<pool::spacemaps::TopGeometry>,
}

fn raw(c: &Ctx, view: &View, prop: &str) -> Raw {
    let v = view.v;
    let leaf = v.is_some_and(|v| v.kind().is_leaf());
    let space = || -> (u64, u64) {
        match v {
            None => c.pool_space,
            Some(v) if view.top => c.top_space.iter().find(|t| t.0 == v.id()).map_or((0, 0), |t| (t.1, t.2)),
            Some(_) => (0, 0),
        }
    };
    let dev_size = v.and_then(|v| v.device().map(|d| d.size())).unwrap_or(0);
    // Leaves: the device less its labels (`vdev_open`: aligned to a label's 256 KiB, less
    // 4 MiB in front and 512 KiB behind).
    let leaf_asize = (dev_size & !((256 << 10) - 1)).saturating_sub((4 << 20) + (512 << 10));
    let child_asize = |v: &Vdev| -> u64 {
        let min = v
            .leaves()
            .iter()
            .filter_map(|l| l.device().map(|d| (d.size() & !((256 << 10) - 1)).saturating_sub(4608 << 10)))
            .min()
            .unwrap_or(0);
        match v.kind() {
            VdevKind::Raidz { .. } => min * v.children().len() as u64,
            _ => min,
        }
    };
    let io = v.map(|v| v.io_counts()).unwrap_or_else(|| {
        let mut t = vdev::IoCounts::default();
        for top in &c.p.tops {
            let io = top.io_counts();
            t.read_ops += io.read_ops;
            t.write_ops += io.write_ops;
            t.read_bytes += io.read_bytes;
            t.write_bytes += io.write_bytes;
        }
        t
    });
    let (re, we, ce) = v.map(|v| v.errors()).unwrap_or((0, 0, 0));
    match prop {
        "capacity" => {
            let (size, alloc) = space();
            Raw::Num((alloc * 100).checked_div(size).unwrap_or(0))
        }
        "state" => Raw::Num(state_of(v.map_or(c.health, health_of)).1),
        "guid" => Raw::Num(v.map_or(c.p.guid(), |v| v.guid())),
        "asize" => Raw::Num(match v {
            None => 0,
            Some(v) if view.top => c.geometry.iter().find(|g| g.vdev == v.id()).map_or(0, |g| g.asize),
            Some(_) if leaf => leaf_asize,
            Some(v) => child_asize(v),
        }),
        "psize" => Raw::Num(match v {
            None => 0,
            Some(_) if leaf => dev_size,
            Some(v) => child_asize(v),
        }),
        "ashift" => Raw::Num(match v {
            Some(v) => u64::from(v.ashift()),
            None => c.p.tops.iter().map(|t| u64::from(t.ashift())).max().unwrap_or(0),
        }),
        "size" => Raw::Num(space().0),
        "free" => Raw::Num(space().0.saturating_sub(space().1)),
        "allocated" => Raw::Num(space().1),
        "expandsize" | "fragmentation" | "bootsize" => Raw::Num(0),
        "parity" => Raw::Num(match v.map(|v| v.kind()) {
            Some(VdevKind::Raidz { nparity }) => u64::from(*nparity),
            _ => 0,
        }),
        "path" => match v.filter(|_| leaf) {
            Some(v) => Raw::Str(leaf_path(c.p, v)),
            None => Raw::Absent,
        },
        "devid" | "physpath" | "encpath" | "fru" => Raw::Absent,
        "parent" => view.parent.clone().map_or(Raw::Absent, Raw::Str),
        "children" => {
            let kids: Vec<String> = match v {
                None => {
                    c.p.tops
                        .iter()
                        .filter(|t| *t.kind() != VdevKind::Hole)
                        .map(|t| kernel_name(c.p, t))
                        .collect()
                }
                Some(v) => v.children().iter().map(|k| kernel_name(c.p, k)).collect(),
            };
            if kids.is_empty() {
                Raw::Absent
            } else {
                Raw::Str(kids.join(","))
            }
        }
        "numchildren" => Raw::Num(match v {
            None => c.p.tops.len() as u64,
            Some(v) => v.children().len() as u64,
        }),
        "read_errors" => Raw::Num(re),
        "write_errors" => Raw::Num(we),
        "checksum_errors" => Raw::Num(ce),
        "read_ops" => Raw::Num(io.read_ops),
        "write_ops" => Raw::Num(io.write_ops),
        "read_bytes" => Raw::Num(io.read_bytes),
        "write_bytes" => Raw::Num(io.write_bytes),
        "initialize_errors" | "null_ops" | "free_ops" | "claim_ops" | "trim_ops" | "null_bytes"
        | "free_bytes" | "claim_bytes" | "trim_bytes" | "trim_errors" | "slow_ios" => Raw::Num(0),
        "removing" => Raw::Num(0),
        "raidz_expanding" => match v.map(|v| v.kind()) {
            Some(VdevKind::Raidz { .. }) => Raw::Num(0),
            _ => Raw::Skip,
        },
        // File vdevs free space by punching holes; block devices may discard.
        "trim_support" if leaf => Raw::Num(1),
        "trim_support" => Raw::Absent,
        _ => Raw::Absent,
    }
}

/// One property of one vdev as (value, source), or None for no row.
fn get_one(
    c: &Ctx,
    view: &View,
    prop: &str,
    zap: Option<u64>,
    literal: bool,
) -> Result<Option<(String, String)>, String> {
    let stored = |name: &str| zap.and_then(|z| zap::lookup(&c.p.mos, z, name).ok().flatten());
    if pool_user_prop(prop) {
        return Ok(Some(match stored(prop) {
            Some(e) => (e.string_value(), "local".into()),
            None => ("-".into(), "default".into()),
        }));
    }
    let Some(&(name, kind, _, dflt)) = def(prop) else {
        return Err(format!("bad property list: invalid property '{prop}'"));
    };
    let leaf_below_top = view.v.is_some_and(|v| v.kind().is_leaf()) && !view.top;
    // Settable properties: the ZAP's value, else the default.
    let (raw, src) = match name {
        "comment" => match stored(name) {
            Some(e) => (Raw::Str(e.string_value()), "local"),
            None => (Raw::Absent, "default"),
        },
        "allocating" if leaf_below_top => (Raw::Num(2), "-"),
        "allocating" | "failfast" | "checksum_n" | "checksum_t" | "io_n" | "io_t" | "slow_io_n"
        | "slow_io_t" => {
            let n = stored(name).filter(|e| e.int_size == 8).and_then(|e| e.first_u64()).unwrap_or(dflt);
            (Raw::Num(n), if n == dflt { "default" } else { "local" })
        }
        _ => (raw(c, view, name), "-"),
    };
    let src = src.to_string();
    Ok(Some(match (kind, raw) {
        (_, Raw::Skip) => return Ok(None),
        (Kind::Str, Raw::Str(s)) => (s, src),
        (Kind::Str, _) => ("-".into(), "default".into()),
        (Kind::Index(_), Raw::Absent) if name == "trim_support" => ("-".into(), "-".into()),
        (Kind::Index(t), r) => {
            let n = match r {
                Raw::Num(n) => n,
                _ => dflt,
            };
            let s = t.iter().find(|(_, v)| *v == n).map_or("-", |(s, _)| s);
            (s.to_string(), src)
        }
        (Kind::Num, r) => {
            let (n, src) = match r {
                Raw::Num(n) => (n, src),
                _ => (dflt, "default".to_string()),
            };
            let text = match name {
                "asize" | "psize" | "size" | "bootsize" | "allocated" | "free" | "read_errors"
                | "write_errors" | "checksum_errors" | "initialize_errors" | "trim_errors" | "slow_ios" => {
                    num(n, literal)
                }
                _ if name.ends_with("_ops") || name.ends_with("_bytes") => num(n, literal),
                "expandsize" if n == 0 => "-".into(),
                "expandsize" => num(n, literal),
                "capacity" if literal => n.to_string(),
                "capacity" => format!("{n}%"),
                "checksum_n" | "checksum_t" | "io_n" | "io_t" | "slow_io_n" | "slow_io_t"
                    if n == u64::MAX =>
                {
                    "-".into()
                }
                "fragmentation" if n == u64::MAX => "-".into(),
                "fragmentation" => format!("{n}%"),
                "state" if !literal => state_name(n).into(),
                _ => n.to_string(),
            };
            (text, src)
        }
    }))
}

fn state_name(n: u64) -> &'static str {
    match n {
        7 => "ONLINE",
        6 => "DEGRADED",
        5 => "FAULTED",
        4 => "UNAVAIL",
        3 => "REMOVED",
        2 | 1 => "OFFLINE",
        _ => "UNKNOWN",
    }
}

fn num(n: u64, literal: bool) -> String {
    if literal {
        n.to_string()
    } else {
        nicenum(n)
    }
}

fn pool_user_prop(name: &str) -> bool {
    dsl::props::is_user_prop(name)
}

/// The user properties stored in a vdev's ZAP, by name.
fn user_props(p: &Pool, zap_obj: Option<u64>) -> Vec<String> {
    let Some(z) = zap_obj else { return Vec::new() };
    let mut names: Vec<String> = zap::list(&p.mos, z)
        .map(|l| l.into_iter().map(|e| e.name_string()).filter(|n| pool_user_prop(n)).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// `zpool get [-Hp] [-o FIELDS] PROPS POOL VDEV...|all-vdevs|root`.
pub fn get(
    state: &State,
    p: &Arc<Pool>,
    props: &str,
    vdevs: &[String],
    scripted: bool,
    literal: bool,
    fields: &[String],
) -> Result<Response, String> {
    let rw = crate::rwpool::writer_of(state, p.name());
    let st = crate::rwpool::pool_status(state, p);
    let health = if st.suspended.is_some() { pool::status::PoolHealth::Unavail } else { st.health };
    let (pool_space, top_space) = match &rw {
        Some(rw) => (rw.spa.raw_space(), rw.spa.top_space()),
        None => (pool::status::space(p).map(|s| (s.size, s.alloc)).unwrap_or((0, 0)), Vec::new()),
    };
    let c = Ctx {
        p,
        health,
        pool_space,
        top_space,
        geometry: pool::spacemaps::top_geometry(p).unwrap_or_default(),
    };
    let targets: Vec<(String, View)> = if vdevs.len() == 1 && vdevs[0] == "all-vdevs" {
        all_views(p)
    } else {
        let mut t = Vec::new();
        for n in vdevs {
            let v = find(p, n)
                .ok_or_else(|| format!("cannot find '{n}' in '{}': no such device in pool", p.name()))?;
            let shown = if n == "root" { "root-0".to_string() } else { n.clone() };
            t.push((shown, v));
        }
        t
    };
    let (cols, mut table) = crate::cmd::zpool::get_table(fields);
    for (shown, view) in &targets {
        let guid = view.v.map_or(p.guid(), |v| v.guid());
        let zap_obj = pool::vdevzaps::vdev_prop_zap_of(p, guid);
        let mut wanted: Vec<String> = if props == "all" {
            let mut w: Vec<String> = PROPS.iter().map(|d| d.0.to_string()).collect();
            w.extend(user_props(p, zap_obj));
            w
        } else {
            props.split(',').map(str::to_string).collect()
        };
        if props != "all" && wanted.iter().any(|w| w == "all") {
            return Err("bad property list: 'all' must be the only property".into());
        }
        wanted.dedup();
        for prop in &wanted {
            if prop == "name" {
                let row = crate::cmd::zpool::get_row(&cols, shown, prop, &view.kname, "-")?;
                table.rows.push(row);
                continue;
            }
            let Some((value, source)) = get_one(&c, view, prop, zap_obj, literal)? else { continue };
            table.rows.push(crate::cmd::zpool::get_row(&cols, shown, prop, &value, &source)?);
        }
    }
    Ok(Response::ok(table.render(scripted)))
}

/// `zpool set PROP=VALUE POOL VDEV`.
pub fn set(state: &State, assignment: &str, pool_name: &str, vdev_name: &str) -> Result<(), String> {
    let shown = if vdev_name == "root" { "root-0" } else { vdev_name };
    let (k, v) =
        assignment.split_once('=').ok_or_else(|| "missing value in property=value argument".to_string())?;
    let errbuf = format!("cannot set property {k} for {shown} on {pool_name}");
    let view_pool = state.pool(pool_name)?;
    if !is_vdev(&view_pool, vdev_name) {
        return Err(format!("cannot find '{shown}' in '{pool_name}': device not in pool"));
    }
    let rw =
        crate::rwpool::writer_of(state, pool_name).ok_or_else(|| format!("{errbuf}: pool is read-only"))?;
    let value = if pool_user_prop(k) {
        if k.len() >= dsl::props::MAX_PROP_NAME {
            return Err(format!("{errbuf}: property name '{k}' is too long"));
        }
        if v.len() >= dsl::props::MAX_PROP_VALUE {
            return Err(format!("{errbuf}: property value '{v}' is too long"));
        }
        if v.is_empty() {
            VdevPropValue::Remove
        } else {
            VdevPropValue::Str(v.to_string())
        }
    } else {
        let Some(&(name, kind, settable, _)) = def(k) else {
            return Err(format!("{errbuf}: invalid property '{k}'"));
        };
        if !settable {
            return Err(format!("{errbuf}: '{k}' is readonly"));
        }
        match (name, kind) {
            ("path", _) => {
                return Err(format!(
                    "{errbuf}: {}",
                    if v.starts_with("/dev/") {
                        "rzfs does not change a device's path in place; export the pool and import it with -d"
                    } else {
                        "invalid argument (a path must start with /dev/)"
                    }
                ))
            }
            ("comment", _) => {
                if v.len() >= dsl::props::MAX_PROP_VALUE {
                    return Err(format!("{errbuf}: property value is too long"));
                }
                VdevPropValue::Str(v.to_string())
            }
            (_, Kind::Index(table)) => {
                let n =
                    table.iter().filter(|(s, _)| *s != "-").find(|(s, _)| *s == v).map(|x| x.1).ok_or_else(
                        || {
                            let choices: Vec<&str> =
                                table.iter().map(|x| x.0).filter(|s| *s != "-").collect();
                            format!("{errbuf}: '{k}' must be one of '{}'", choices.join(" | "))
                        },
                    )?;
                if name == "allocating" {
                    if n == 0 {
                        return Err(format!(
                            "{errbuf}: rzfs cannot stop allocations on a vdev (allocating=off is not supported)"
                        ));
                    }
                    // Already allocating: nothing to change, as OpenZFS skips it.
                    return Ok(());
                }
                VdevPropValue::Num(n)
            }
            (_, _) => VdevPropValue::Num(
                dsl::props::parse_size(v).ok_or_else(|| format!("{errbuf}: bad numeric value '{v}'"))?,
            ),
        }
    };
    rw.spa.set_vdev_prop(vdev_name, k, value).map_err(|e| match e {
        pool::PoolError::NotFound(_) => format!("cannot find '{shown}' in '{pool_name}': device not in pool"),
        pool::PoolError::Unsupported(m) => format!("{errbuf}: {m}"),
        e => format!("{errbuf}: {e}"),
    })
}
