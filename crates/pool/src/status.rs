//! Pool and device health, space, and their zpool-style renderings (`zpool import` listing,
//! `zpool status`).
//!
//! Health rules (OpenZFS `vdev_propagate_state`): a leaf whose device is absent is UNAVAIL;
//! a mirror/replacing/spare is DEGRADED while at least one child works; a RAID-Z is
//! DEGRADED while no more than `nparity` children are unusable; beyond that a vdev is
//! UNAVAIL, and an UNAVAIL top-level vdev makes the pool UNAVAIL.

use crate::discover::PoolCandidate;
use crate::{DataError, Pool};
use ondisk::label::VdevTreeConfig;
use std::fmt::Write;
use vdev::{Vdev, VdevKind};

/// Health of a vdev or pool, as zpool prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolHealth {
    Online,
    Degraded,
    Faulted,
    Unavail,
    Offline,
}

impl PoolHealth {
    /// Upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolHealth::Online => "ONLINE",
            PoolHealth::Degraded => "DEGRADED",
            PoolHealth::Faulted => "FAULTED",
            PoolHealth::Unavail => "UNAVAIL",
            PoolHealth::Offline => "OFFLINE",
        }
    }

    fn is_lost(self) -> bool {
        matches!(self, PoolHealth::Unavail | PoolHealth::Faulted | PoolHealth::Offline)
    }
}

/// One row of the config tree.
#[derive(Clone, Debug)]
pub struct VdevStatus {
    pub name: String,
    pub health: PoolHealth,
    pub read: u64,
    pub write: u64,
    pub cksum: u64,
    pub note: String,
    pub children: Vec<VdevStatus>,
    /// A top-level log vdev: listed under `logs`, after the pool's own tree.
    pub log: bool,
}

/// Everything `zpool status` shows.
#[derive(Clone, Debug)]
pub struct PoolStatus {
    pub name: String,
    pub health: PoolHealth,
    pub root: VdevStatus,
    pub errors: Vec<DataError>,
    /// Set when the pool is suspended after I/O failures (the reason, for the log).
    pub suspended: Option<String>,
    /// The scan lines after "  scan: " (None: no scan line, as for read-only pools).
    pub scan: Option<String>,
    /// A resilver is under way (`ZPOOL_STATUS_RESILVERING`).
    pub resilvering: bool,
    /// The hot spares section.
    pub spares: Vec<crate::spares::SpareRow>,
    /// The cache devices section.
    pub caches: Vec<crate::l2cache::CacheRow>,
    /// Features this software would enable (and the pool's `compatibility` allows) are
    /// disabled on the pool (libzfs `ZPOOL_STATUS_FEAT_DISABLED`).
    pub features_disabled: bool,
}

fn kind_name(kind: &VdevKind, id: u64) -> String {
    match kind {
        VdevKind::Mirror => format!("mirror-{id}"),
        VdevKind::Raidz { nparity } => format!("raidz{nparity}-{id}"),
        VdevKind::Replacing => format!("replacing-{id}"),
        VdevKind::Spare => format!("spare-{id}"),
        VdevKind::Hole => format!("hole-{id}"),
        _ => format!("missing-{id}"),
    }
}

/// Combines children's health into the parent's by redundancy.
fn combine(kind: &VdevKind, kids: &[PoolHealth]) -> PoolHealth {
    let bad = kids.iter().filter(|h| h.is_lost()).count();
    let degraded = kids.contains(&PoolHealth::Degraded);
    let tolerated = match kind {
        VdevKind::Mirror | VdevKind::Replacing | VdevKind::Spare => kids.len().saturating_sub(1),
        VdevKind::Raidz { nparity } => *nparity as usize,
        _ => 0,
    };
    if bad > tolerated {
        PoolHealth::Unavail
    } else if bad > 0 || degraded {
        PoolHealth::Degraded
    } else {
        PoolHealth::Online
    }
}

/// The health `zpool status` shows for a vdev in state `s`.
pub fn health_of(s: vdev::VdevState) -> PoolHealth {
    match s {
        vdev::VdevState::Online => PoolHealth::Online,
        vdev::VdevState::Degraded => PoolHealth::Degraded,
        vdev::VdevState::Faulted => PoolHealth::Faulted,
        vdev::VdevState::Unavail => PoolHealth::Unavail,
        vdev::VdevState::Offline => PoolHealth::Offline,
    }
}

fn vdev_status(v: &Vdev, paths: &dyn Fn(u64) -> Option<String>, activity: Option<&str>) -> VdevStatus {
    let (read, write, cksum) = v.errors();
    let health = health_of(v.state());
    let is_leaf = v.kind().is_leaf();
    let mut note = match health {
        PoolHealth::Unavail if is_leaf => "cannot open".to_string(),
        // A leaf faulted by failed writes or flushes (`VDEV_AUX_ERR_EXCEEDED`).
        PoolHealth::Faulted if is_leaf => "too many errors".to_string(),
        _ => String::new(),
    };
    // zpool marks the leaves the running scan has rewritten (`vs_scan_processed`).
    if let Some(what) = activity.filter(|_| v.scan_processed() > 0) {
        if !note.is_empty() {
            note.push_str("  ");
        }
        note.push_str(&format!("({what})"));
    }
    // A device that was not found has no name of its own: show the path the config records.
    let name =
        if is_leaf && v.device().is_none() { paths(v.guid()).unwrap_or_else(|| v.name()) } else { v.name() };
    VdevStatus {
        name,
        health,
        read,
        write,
        cksum,
        note,
        children: v
            .children()
            .iter()
            .filter(|c| *c.kind() != VdevKind::Hole)
            .map(|c| vdev_status(c, paths, activity))
            .collect(),
        log: v.is_log(),
    }
}

/// One row of `zpool iostat`: a vdev (or the pool, depth 0), its capacity when it has one
/// (the pool and its top-level vdevs), and the I/O it completed since it was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoRow {
    pub depth: usize,
    pub name: String,
    pub guid: u64,
    /// (allocated, free) bytes.
    pub space: Option<(u64, u64)>,
    pub io: vdev::IoCounts,
    /// The heading of an allocation class (`logs`), no vdev: zpool prints dashes for it.
    pub class: bool,
}

/// The rows of `zpool iostat -v` for `pool`, pool first, in `zpool status` order and names.
/// `pool_space` is the pool's (allocated, free); `top_space(id)` a top-level vdev's.
pub fn iostat_rows(
    pool: &Pool,
    pool_space: Option<(u64, u64)>,
    top_space: &dyn Fn(u64) -> Option<(u64, u64)>,
) -> Vec<IoRow> {
    let paths =
        |guid: u64| pool.leaf_paths.get(&guid).cloned().or_else(|| config_path(&pool.candidate, guid));
    fn walk(v: &Vdev, depth: usize, paths: &dyn Fn(u64) -> Option<String>, out: &mut Vec<IoRow>) {
        let is_leaf = v.kind().is_leaf();
        let name = if is_leaf && v.device().is_none() {
            paths(v.guid()).unwrap_or_else(|| v.name())
        } else {
            v.name()
        };
        out.push(IoRow { depth, name, guid: v.guid(), space: None, io: v.io_counts(), class: false });
        for c in v.children().iter().filter(|c| *c.kind() != VdevKind::Hole) {
            walk(c, depth + 1, paths, out);
        }
    }
    let mut out = vec![IoRow {
        depth: 0,
        name: pool.name().to_string(),
        guid: pool.guid(),
        space: pool_space,
        io: vdev::IoCounts::default(),
        class: false,
    }];
    let mut total = vdev::IoCounts::default();
    // The pool's own vdevs, then the log class under its heading (zpool's print_vdev_stats).
    let (logs, main): (Vec<&std::sync::Arc<Vdev>>, Vec<&std::sync::Arc<Vdev>>) =
        pool.tops.iter().filter(|t| *t.kind() != VdevKind::Hole).partition(|t| t.is_log());
    let heading = (!logs.is_empty()).then_some(IoRow {
        depth: 0,
        name: "logs".into(),
        guid: 0,
        space: None,
        io: vdev::IoCounts::default(),
        class: true,
    });
    for (i, t) in main.iter().chain(&logs).enumerate() {
        if i == main.len() {
            out.extend(heading.clone());
        }
        let first = out.len();
        walk(t, 1, &paths, &mut out);
        out[first].space = top_space(t.id());
        let io = out[first].io;
        total.read_ops += io.read_ops;
        total.write_ops += io.write_ops;
        total.read_bytes += io.read_bytes;
        total.write_bytes += io.write_bytes;
    }
    out[0].io = total;
    // Cache devices under their heading (zpool's print_iostat_vdevs of the l2cache list),
    // empty here: a pool open for writing fills in what its second-level cache holds.
    let caches = crate::l2cache::rows(pool);
    if !caches.is_empty() {
        out.push(IoRow {
            depth: 0,
            name: "cache".into(),
            guid: 0,
            space: None,
            io: vdev::IoCounts::default(),
            class: true,
        });
        for c in caches {
            out.push(IoRow {
                depth: 1,
                name: c.name,
                guid: c.guid,
                space: Some((0, c.size)),
                io: vdev::IoCounts::default(),
                class: false,
            });
        }
    }
    out
}

/// The root vdev's health from its top-level vdevs': a lost normal vdev loses the pool, a
/// lost log vdev only degrades it (OpenZFS `vdev_propagate_state` counts a top-level log
/// that cannot open as degraded).
fn root_health(tops: &[VdevStatus]) -> PoolHealth {
    tops.iter().fold(PoolHealth::Online, |acc, t| match t.health {
        PoolHealth::Unavail | PoolHealth::Faulted | PoolHealth::Offline if !t.log => PoolHealth::Unavail,
        PoolHealth::Online => acc,
        _ if acc == PoolHealth::Online => PoolHealth::Degraded,
        _ => acc,
    })
}

/// Status of an imported pool.
pub fn pool_status(pool: &Pool) -> PoolStatus {
    pool_status_scanning(pool, None)
}

/// Status of an imported pool while a scan runs: `activity` ("resilvering", "repairing")
/// marks the leaves it has rewritten.
pub fn pool_status_scanning(pool: &Pool, activity: Option<&str>) -> PoolStatus {
    let paths =
        |guid: u64| pool.leaf_paths.get(&guid).cloned().or_else(|| config_path(&pool.candidate, guid));
    let tops: Vec<VdevStatus> = pool
        .tops
        .iter()
        .filter(|t| *t.kind() != VdevKind::Hole)
        .map(|t| vdev_status(t, &paths, activity))
        .collect();
    let health = root_health(&tops);
    let root = VdevStatus {
        name: pool.name().to_string(),
        health,
        read: 0,
        write: 0,
        cksum: 0,
        note: String::new(),
        children: tops,
        log: false,
    };
    PoolStatus {
        name: pool.name().to_string(),
        health,
        root,
        errors: pool.errors(),
        suspended: None,
        scan: None,
        resilvering: false,
        spares: crate::spares::rows(pool),
        caches: crate::l2cache::rows(pool),
        features_disabled: false,
    }
}

/// The features enabled on `pool` (by short name).
pub fn enabled_features(pool: &Pool) -> std::collections::BTreeSet<&'static str> {
    let dir = crate::import::DMU_POOL_DIRECTORY_OBJECT;
    let zap_of = |key: &str| zap::lookup_u64(&pool.mos, dir, key).ok().flatten();
    let (read, write) = (zap_of("features_for_read"), zap_of("features_for_write"));
    crate::feature_table::all()
        .iter()
        .filter(|f| {
            let obj = if f.readonly_compat() { write } else { read };
            obj.and_then(|o| zap::lookup_u64(&pool.mos, o, f.guid).ok().flatten()).is_some()
        })
        .map(|f| f.name)
        .collect()
}

/// The features `zpool upgrade` would enable on `pool` here, in the feature table's order:
/// disabled ones that rzfs writes and the pool's `compatibility` property allows (an
/// unreadable compatibility file counts as `off`, as libzfs falls back to).
pub fn features_to_enable(pool: &Pool) -> Vec<&'static crate::feature_table::Feature> {
    let dir = crate::import::DMU_POOL_DIRECTORY_OBJECT;
    let compat_value = zap::lookup_u64(&pool.mos, dir, "pool_props")
        .ok()
        .flatten()
        .and_then(|obj| zap::lookup(&pool.mos, obj, "compatibility").ok().flatten())
        .map(|e| e.string_value())
        .unwrap_or_else(|| "off".into());
    let compat = crate::compat::load(&compat_value).unwrap_or(crate::compat::CompatSet::Off);
    let Ok(wanted) = crate::feature_table::create_set(&compat) else { return Vec::new() };
    let enabled = enabled_features(pool);
    crate::feature_table::all()
        .iter()
        .filter(|f| wanted.contains(f.name) && !enabled.contains(f.name))
        .collect()
}

/// Does `pool` lack features `zpool upgrade` would enable ([`features_to_enable`])?
pub fn features_disabled(pool: &Pool) -> bool {
    !features_to_enable(pool).is_empty()
}

/// The tree cut to what `zpool status -e` shows: vdevs that are not ONLINE or have errors,
/// with the vdevs above them (the root always).
pub fn unhealthy_only(v: &VdevStatus) -> VdevStatus {
    fn keep(v: &VdevStatus) -> Option<VdevStatus> {
        let children: Vec<VdevStatus> = v.children.iter().filter_map(keep).collect();
        let bad = v.health != PoolHealth::Online || v.read + v.write + v.cksum > 0;
        (bad || !children.is_empty()).then(|| VdevStatus { children, ..v.clone() })
    }
    VdevStatus { children: v.children.iter().filter_map(keep).collect(), ..v.clone() }
}

fn render_tree(out: &mut String, v: &VdevStatus, depth: usize, width: usize, parsable: bool) {
    let indent = "  ".repeat(depth);
    let name = format!("{indent}{}", v.name);
    let num = |n: u64| {
        if parsable {
            n.to_string()
        } else {
            crate_nicenum(n)
        }
    };
    let _ = write!(
        out,
        "\t{name:<width$}  {:<8} {:>5} {:>5} {:>5}",
        v.health.as_str(),
        num(v.read),
        num(v.write),
        num(v.cksum)
    );
    if !v.note.is_empty() {
        let _ = write!(out, "  {}", v.note);
    }
    out.push('\n');
    for c in &v.children {
        render_tree(out, c, depth + 1, width, parsable);
    }
}

/// zpool's error counters use the same short units as sizes but without a 'B'.
fn crate_nicenum(n: u64) -> String {
    const UNITS: [&str; 7] = ["", "K", "M", "G", "T", "P", "E"];
    let mut i = 0;
    let mut v = n;
    while v >= 1000 && i < UNITS.len() - 1 {
        v /= 1000;
        i += 1;
    }
    format!("{v}{}", UNITS[i])
}

fn tree_width_with_spares(st: &PoolStatus) -> usize {
    let aux = st.spares.iter().map(|s| &s.name).chain(st.caches.iter().map(|c| &c.name));
    aux.map(|n| 2 + n.len()).fold(tree_width(&st.root, 0), usize::max)
}

fn tree_width(v: &VdevStatus, depth: usize) -> usize {
    let own = 2 * depth + v.name.len();
    v.children.iter().map(|c| tree_width(c, depth + 1)).fold(own, usize::max)
}

fn has_leaf_in(v: &VdevStatus, h: PoolHealth) -> bool {
    (v.children.is_empty() && v.health == h) || v.children.iter().any(|c| has_leaf_in(c, h))
}

/// Is some unavailable leaf missing altogether (no file or device at the path it is
/// shown by, a guid for a name)? libzfs tells a missing device (`VDEV_AUX_OPEN_FAILED`)
/// from one whose label is wrong; rzfs finds devices by their labels, so a path that is
/// there but was not taken holds something else.
fn unavail_leaf_gone(v: &VdevStatus) -> bool {
    if v.children.is_empty() {
        // zpool shows disks without their /dev/ prefix.
        let path = std::path::Path::new("/dev").join(&v.name);
        return v.health == PoolHealth::Unavail && !path.exists();
    }
    v.children.iter().any(unavail_leaf_gone)
}

fn has_faulted_leaf(v: &VdevStatus) -> bool {
    has_leaf_in(v, PoolHealth::Faulted)
}

fn has_errors(v: &VdevStatus) -> bool {
    v.read + v.write + v.cksum > 0 || v.children.iter().any(has_errors)
}

/// Renders `zpool status` for one pool.
pub fn render_status(st: &PoolStatus, verbose: bool, parsable: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "  pool: {}", st.name);
    if st.suspended.is_some() {
        // libzfs's ZPOOL_STATUS_IO_FAILURE_WAIT/CONTINUE.
        out.push_str(" state: SUSPENDED\n");
        out.push_str("status: One or more devices are faulted in response to IO failures.\n");
        out.push_str("action: Make sure the affected devices are connected, then run 'zpool clear'.\n");
        out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-HC\n");
    } else {
        let _ = writeln!(out, " state: {}", st.health.as_str());
    }
    if st.suspended.is_some() {
    } else if st.resilvering {
        // libzfs ZPOOL_STATUS_RESILVERING.
        out.push_str("status: One or more devices is currently being resilvered.  The pool will\n\tcontinue to function, possibly in a degraded state.\n");
        out.push_str("action: Wait for the resilver to complete.\n");
    } else if has_faulted_leaf(&st.root) {
        if st.health == PoolHealth::Degraded {
            out.push_str("status: One or more devices are faulted in response to persistent errors.\n\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\n");
        } else {
            out.push_str("status: One or more devices are faulted in response to persistent errors.  There are insufficient replicas for the pool to\n\tcontinue functioning.\n");
        }
        out.push_str(
            "action: Replace the faulted device, or use 'zpool clear' to mark the device\n\trepaired.\n",
        );
        out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-K4\n");
    } else if has_leaf_in(&st.root, PoolHealth::Unavail) {
        if unavail_leaf_gone(&st.root) {
            // libzfs ZPOOL_STATUS_MISSING_DEV_R: nothing at the device's path.
            out.push_str("status: One or more devices could not be opened.  Sufficient replicas exist for\n\tthe pool to continue functioning in a degraded state.\n");
            out.push_str("action: Attach the missing device and online it using 'zpool online'.\n");
            out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-2Q\n");
        } else {
            // libzfs ZPOOL_STATUS_CORRUPT_LABEL_R: something else is at its path.
            out.push_str("status: One or more devices could not be used because the label is missing or\n\tinvalid.  Sufficient replicas exist for the pool to continue\n\tfunctioning in a degraded state.\n");
            out.push_str("action: Replace the device using 'zpool replace'.\n");
            out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-4J\n");
        }
    } else if !st.errors.is_empty() {
        // libzfs ZPOOL_STATUS_CORRUPT_DATA.
        out.push_str("status: One or more devices has experienced an error resulting in data\n\tcorruption.  Applications may be affected.\n");
        out.push_str("action: Restore the file in question if possible.  Otherwise restore the\n\tentire pool from backup.\n");
        out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-8A\n");
    } else if has_errors(&st.root) {
        out.push_str("status: One or more devices has experienced an unrecoverable error.  An\n\tattempt was made to correct the error.  Applications are unaffected.\n");
        out.push_str("action: Determine if the device needs to be replaced, and clear the errors\n\tusing 'zpool clear' or replace the device with 'zpool replace'.\n");
        out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-9P\n");
    } else if has_leaf_in(&st.root, PoolHealth::Offline) {
        // libzfs ZPOOL_STATUS_OFFLINE_DEV.
        out.push_str("status: One or more devices has been taken offline by the administrator.\n\tSufficient replicas exist for the pool to continue functioning in a\n\tdegraded state.\n");
        out.push_str(
            "action: Online the device using 'zpool online' or replace the device with\n\t'zpool replace'.\n",
        );
    } else if st.health != PoolHealth::Online {
        out.push_str("status: One or more devices could not be used because the label is missing or\n\tinvalid.  Sufficient replicas exist for the pool to continue\n\tfunctioning in a degraded state.\n");
        out.push_str("action: Replace the device using 'zpool replace'.\n");
    } else if st.features_disabled {
        // libzfs ZPOOL_STATUS_FEAT_DISABLED.
        out.push_str("status: Some supported and requested features are not enabled on the pool.\n\tThe pool can still be used, but some features are unavailable.\n");
        out.push_str("action: Enable all features using 'zpool upgrade'. Once this is done,\n\tthe pool may no longer be accessible by software that does not support\n\tthe features. See zpool-features(7) for details.\n");
    }
    if let Some(scan) = &st.scan {
        let _ = write!(out, "  scan: {scan}");
    }
    out.push_str("config:\n\n");
    let width = tree_width_with_spares(st).max(10);
    let _ = writeln!(out, "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}", "NAME", "STATE", "READ", "WRITE", "CKSUM");
    let (logs, main): (Vec<VdevStatus>, Vec<VdevStatus>) =
        st.root.children.iter().cloned().partition(|c| c.log);
    render_tree(&mut out, &VdevStatus { children: main, ..st.root.clone() }, 0, width, parsable);
    if !logs.is_empty() {
        // zpool's print_class_vdevs: the class name, then its vdevs as top-level ones.
        out.push_str("\tlogs\t\n");
        for l in &logs {
            render_tree(&mut out, l, 1, width, parsable);
        }
    }
    if !st.caches.is_empty() {
        // zpool's print_l2cache: the devices as leaves, with error counters.
        out.push_str("\tcache\n");
        for c in &st.caches {
            let name = format!("  {}", c.name);
            let line = format!("\t{name:<width$}  {:<8} {:>5} {:>5} {:>5}", c.state, 0, 0, 0);
            if c.note.is_empty() {
                let _ = writeln!(out, "{line}");
            } else {
                let _ = writeln!(out, "{line}  {}", c.note);
            }
        }
    }
    if !st.spares.is_empty() {
        // zpool's print_spares: state only (AVAIL, INUSE), no error counters.
        out.push_str("\tspares\n");
        for sp in &st.spares {
            let name = format!("  {}", sp.name);
            let line = format!("\t{name:<width$}  {:<8}", sp.state);
            if sp.note.is_empty() {
                let _ = writeln!(out, "{line}");
            } else {
                let _ = writeln!(out, "{line}  {}", sp.note);
            }
        }
    }
    out.push('\n');
    if st.errors.is_empty() {
        out.push_str("errors: No known data errors\n");
    } else if !verbose {
        let _ = writeln!(out, "errors: {} data errors, use '-v' for a list", st.errors.len());
    } else {
        out.push_str("errors: Permanent errors have been detected in the following files:\n\n");
        for e in &st.errors {
            match &e.path {
                Some(p) => {
                    let _ = writeln!(out, "        {}:{}", e.dataset, p);
                }
                None => {
                    let _ = writeln!(out, "        {}:<0x{:x}>", e.dataset, e.object);
                }
            }
        }
    }
    out
}

/// Who holds a pool that is not exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InUse {
    /// A process of this system has its devices open for writing (an exclusive lock).
    ThisSystem,
    /// Its labels say ACTIVE, last written by another host (`hostid` differs).
    OtherSystem { hostname: String, hostid: u64 },
}

/// Is pool `c` in use: its devices locked by an owner on this system, or left ACTIVE by
/// another host (OpenZFS's check in `zpool import`: a non-zero label hostid that is not
/// ours)? A pool left ACTIVE by this host (a crash) is not in use.
pub fn in_use(c: &PoolCandidate) -> Option<InUse> {
    if c.devices.iter().any(|d| vdev::FileDevice::is_locked(&d.path)) {
        return Some(InUse::ThisSystem);
    }
    let best = &c.best().config;
    if c.state() == ondisk::label::PoolState::Active {
        let hostid = best.hostid.unwrap_or(0);
        if hostid != 0 && hostid != crate::writer::host_id() {
            return Some(InUse::OtherSystem { hostname: best.hostname.clone().unwrap_or_default(), hostid });
        }
    }
    None
}

/// The `zpool import` listing of one importable pool, from its labels alone.
pub fn import_listing(c: &PoolCandidate) -> String {
    let mut out = String::new();
    let best = c.best();
    let _ = writeln!(out, "   pool: {}", c.name);
    let _ = writeln!(out, "     id: {}", c.guid);
    let tops = label_tops(c);
    let present = |g: u64| c.devices.iter().any(|d| d.config.guid == g);
    let rows: Vec<VdevStatus> = tops.iter().map(|t| config_status(t, &present)).collect();
    let health = rows
        .iter()
        .map(|r| if r.log { r.health.min(PoolHealth::Degraded) } else { r.health })
        .max()
        .unwrap_or(PoolHealth::Unavail);
    // A top-level vdev no found label describes (every device of it is gone): the labels
    // count the pool's tops, so the pool is known to be incomplete (zpool's "missing
    // device"; such a pool cannot be imported).
    // Holes (removed tops, OpenZFS's `hole_array`) have no labels and are not missing.
    let holes = best.raw.get_u64_array("hole_array").map_or(0, <[u64]>::len);
    let known_tops = (best.config.vdev_children.unwrap_or(0) as usize).saturating_sub(holes);
    let missing_tops = known_tops > tops.len();
    let health = if health == PoolHealth::Faulted || missing_tops { PoolHealth::Unavail } else { health };
    let _ = writeln!(out, "  state: {}", health.as_str());
    if !ondisk::uberblock::spa_version_is_supported(best.config.version) {
        let _ = writeln!(
            out,
            " status: The pool is formatted using an unsupported version ({}).",
            best.config.version
        );
        out.push_str(" action: The pool cannot be imported.\n");
    } else if let Some(owner) = in_use(c) {
        match owner {
            InUse::ThisSystem => {
                out.push_str(" status: The pool is currently imported by another process on this system.\n");
                out.push_str(" action: Export the pool there before importing it here.\n");
            }
            InUse::OtherSystem { hostname, hostid } => {
                let _ = writeln!(
                    out,
                    " status: The pool was last accessed by another system ({hostname}, hostid={hostid:x})."
                );
                out.push_str(
                    " action: The pool can be imported using its name or numeric identifier and\n\tthe '-f' flag.\n",
                );
            }
        }
    } else if health == PoolHealth::Online {
        out.push_str(" action: The pool can be imported using its name or numeric identifier.\n");
    } else if health == PoolHealth::Degraded {
        out.push_str(" status: One or more devices are missing from the system.\n");
        out.push_str(" action: The pool can be imported despite missing or damaged devices.\n");
    } else {
        out.push_str(" status: One or more devices are missing from the system.\n");
        out.push_str(" action: The pool cannot be imported. Attach the missing\n\tdevices and try again.\n");
        if missing_tops {
            out.push_str("   see: https://openzfs.github.io/openzfs-docs/msg/ZFS-8000-6X\n");
        }
    }
    out.push_str(" config:\n\n");
    let root = VdevStatus {
        name: c.name.clone(),
        health,
        read: 0,
        write: 0,
        cksum: 0,
        note: if missing_tops { "missing device".to_string() } else { String::new() },
        children: rows,
        log: false,
    };
    let width = tree_width(&root, 0).max(10);
    let (logs, main): (Vec<VdevStatus>, Vec<VdevStatus>) = root.children.iter().cloned().partition(|c| c.log);
    render_import_tree(&mut out, &VdevStatus { children: main, ..root.clone() }, 0, width);
    if !logs.is_empty() {
        out.push_str("\tlogs\t\n");
        for l in &logs {
            render_import_tree(&mut out, l, 1, width);
        }
    }
    if missing_tops {
        out.push_str(
            "\n\tAdditional devices are known to be part of this pool, though their\n\texact configuration cannot be determined.\n",
        );
    }
    out.push('\n');
    out
}

fn render_import_tree(out: &mut String, v: &VdevStatus, depth: usize, width: usize) {
    let name = format!("{}{}", "  ".repeat(depth), v.name);
    let _ = write!(out, "\t{name:<width$}  {}", v.health.as_str());
    if !v.note.is_empty() {
        let _ = write!(out, "  {}", v.note);
    }
    out.push('\n');
    for c in &v.children {
        render_import_tree(out, c, depth + 1, width);
    }
}

/// The path the newest label records for leaf `guid`.
fn config_path(c: &PoolCandidate, guid: u64) -> Option<String> {
    label_tops(c).iter().flat_map(|t| t.walk()).find(|v| v.guid == guid).and_then(|v| v.path.clone())
}

/// Top-level configs known from labels, by id (newest label wins).
fn label_tops(c: &PoolCandidate) -> Vec<VdevTreeConfig> {
    let mut tops: std::collections::BTreeMap<u64, (u64, VdevTreeConfig)> = Default::default();
    for d in &c.devices {
        if let Some(t) = &d.config.tree {
            let id = t.id.unwrap_or(0);
            let txg = d.config.txg.unwrap_or(0);
            if tops.get(&id).is_none_or(|(x, _)| txg > *x) {
                tops.insert(id, (txg, t.clone()));
            }
        }
    }
    tops.into_values().map(|(_, t)| t).collect()
}

fn config_status(t: &VdevTreeConfig, present: &dyn Fn(u64) -> bool) -> VdevStatus {
    let children: Vec<VdevStatus> = t.children.iter().map(|c| config_status(c, present)).collect();
    let (name, health) = if t.is_leaf() {
        let ok = present(t.guid);
        (
            t.path.clone().unwrap_or_else(|| t.guid.to_string()),
            if ok { PoolHealth::Online } else { PoolHealth::Unavail },
        )
    } else {
        let kind = match t.kind.as_str() {
            "mirror" => VdevKind::Mirror,
            "raidz" => VdevKind::Raidz { nparity: t.nparity.unwrap_or(1) as u8 },
            "replacing" => VdevKind::Replacing,
            "spare" => VdevKind::Spare,
            _ => VdevKind::Missing,
        };
        let kids: Vec<PoolHealth> = children.iter().map(|c| c.health).collect();
        (kind_name(&kind, t.id.unwrap_or(0)), combine(&kind, &kids))
    };
    VdevStatus { name, health, read: 0, write: 0, cksum: 0, note: String::new(), children, log: t.is_log }
}

/// Pool size and allocation, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Space {
    pub size: u64,
    pub alloc: u64,
}

impl Space {
    /// What datasets can still take, as `zfs list` shows `AVAIL`: the free space deflated
    /// (parity and padding taken out, `vdev_deflated_space`) less the slop
    /// ([`crate::space::slop_space`]), never negative.
    pub fn available(&self, pool: &Pool) -> u64 {
        let ratio = pool
            .tops
            .iter()
            .find(|t| !matches!(t.kind(), VdevKind::Missing | VdevKind::Hole) && !t.is_log())
            .map(|t| (1u64 << 17) / (t.asize(1 << 17) >> 9).max(1))
            .unwrap_or(512);
        let deflate = |x: u64| (x >> 9).saturating_mul(ratio);
        let free = deflate(self.size.saturating_sub(self.alloc));
        free.saturating_sub(crate::space::slop_space(deflate(self.size)))
    }
}

/// (top-level vdev id, size, allocated) of each top-level vdev with metaslabs, from the MOS
/// config and the space maps' headers (a pool read here, not held by a writer).
pub fn top_spaces(pool: &Pool) -> crate::Result<Vec<(u64, u64, u64)>> {
    let cfg = crate::mos_config(pool)?;
    let mut out = Vec::new();
    for (i, t) in cfg.iter().enumerate().filter(|(_, t)| !t.is_hole) {
        let ms_shift = t.metaslab_shift.unwrap_or(0);
        let asize = t.asize.unwrap_or(0);
        let size = if ms_shift > 0 && ms_shift < 64 { (asize >> ms_shift) << ms_shift } else { asize };
        let alloc = match t.metaslab_array.filter(|a| *a != 0) {
            Some(arr) => crate::metaslab_alloc(pool, arr)?,
            None => 0,
        };
        out.push((t.id.unwrap_or(i as u64), size, alloc));
    }
    Ok(out)
}

/// Size from the top-level vdevs' `asize`; allocation from the metaslab space maps' headers.
pub fn space(pool: &Pool) -> crate::Result<Space> {
    let mut s = Space::default();
    let cfg = crate::mos_config(pool)?;
    for t in cfg.iter() {
        if t.is_log || t.is_hole {
            continue;
        }
        let ms_shift = t.metaslab_shift.unwrap_or(0);
        let asize = t.asize.unwrap_or(0);
        // zpool reports the usable metaslab space: whole metaslabs only.
        s.size += if ms_shift > 0 && ms_shift < 64 { (asize >> ms_shift) << ms_shift } else { asize };
        if let Some(arr) = t.metaslab_array.filter(|a| *a != 0) {
            s.alloc += crate::metaslab_alloc(pool, arr)?;
        }
    }
    Ok(s)
}
