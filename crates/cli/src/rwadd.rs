//! `rzpool add [-f] [-n] POOL VDEVSPEC...`: new top-level vdevs for a pool imported
//! read-write (zpool-add(8)).
//!
//! The spec is parsed and every device checked as `rzpool create` checks them (missing,
//! too small, named twice, member of another pool; `-f` allows an exported pool's device);
//! then the new vdevs must match the pool's layout (see `pool::add`). `-n` prints the
//! configuration the pool would have and writes nothing — its devices are opened read-only.
//! Otherwise the vdevs are added and synced at once, and the daemon's read view refreshed so
//! `status` and `list` show them.

use crate::daemon::State;
use pool::create::{NewLeaf, NewTop};
use pool::vdevspec::{DevInfo, TopSpec};
use pool::writer::PoolWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vdev::Vdev;

/// `rzpool add` arguments after parsing.
pub struct AddArgs {
    pub pool: String,
    pub force: bool,
    pub dryrun: bool,
    pub vdev_words: Vec<String>,
    pub cwd: PathBuf,
    /// `-o ashift=N`.
    pub ashift: Option<u64>,
    /// `--allow-ashift-mismatch`.
    pub allow_ashift_mismatch: bool,
    /// `--allow-replication-mismatch` (`-f` also allows it).
    pub allow_replication_mismatch: bool,
}

/// The `-o` options of `zpool add`: only `ashift=N` (zpool_do_add), 0 or 9..=16.
pub fn ashift_option(props: &[String]) -> Result<Option<u64>, String> {
    let mut out = None;
    for p in props {
        let (k, v) = p.split_once('=').ok_or_else(|| format!("missing '=' for property argument '{p}'"))?;
        if k != "ashift" {
            return Err(format!("property '{k}' is not valid for 'zpool add' (only ashift is)"));
        }
        out = Some(crate::rwpool::parse_ashift(v)?);
    }
    Ok(out)
}

fn open_leaf(path: &Path, is_disk: bool, writable: bool) -> Result<NewLeaf, String> {
    let dev =
        if writable { vdev::FileDevice::open_exclusive(path) } else { vdev::FileDevice::open(path, false) }
            .map_err(|e| format!("cannot open '{}': {e}", path.display()))?;
    let p = path.to_string_lossy().into_owned();
    Ok(NewLeaf { device: vdev::inject::InjectDevice::wrap(Arc::new(dev), &p), path: p, is_disk })
}

fn new_tops(tops: &[TopSpec], infos: &[DevInfo], writable: bool) -> Result<Vec<NewTop>, String> {
    let is_disk = |p: &Path| infos.iter().any(|d| d.path == p && d.is_block);
    let leaves = |ds: &[PathBuf]| -> Result<Vec<NewLeaf>, String> {
        ds.iter().map(|p| open_leaf(p, is_disk(p), writable)).collect()
    };
    tops.iter()
        .map(|t| {
            Ok(match t {
                TopSpec::Disk(p) => NewTop::Single(open_leaf(p, is_disk(p), writable)?),
                TopSpec::Mirror(ds) => NewTop::Mirror(leaves(ds)?),
                TopSpec::Raidz { parity, devs } => NewTop::Raidz { parity: *parity, leaves: leaves(devs)? },
            })
        })
        .collect()
}

/// Runs `rzpool add`; returns what it prints.
pub fn add(state: &Arc<State>, a: &AddArgs) -> Result<String, String> {
    let name = &a.pool;
    state.pool(name)?;
    let rw = crate::rwpool::writer_of(state, name)
        .ok_or_else(|| format!("cannot add to '{name}': pool is read-only"))?;
    let parsed = pool::vdevspec::parse_spec(&a.vdev_words, &a.cwd)?;
    let (specs, log, spare_paths) = (&parsed.tops, &parsed.log, &parsed.spares);
    let cache_paths = &parsed.caches;
    let infos =
        if specs.is_empty() { Vec::new() } else { pool::vdevspec::validate_classes(specs, log, a.force)? };
    for p in spare_paths.iter().chain(cache_paths).chain(specs.iter().flat_map(|t| t.devs())) {
        let p = p.to_string_lossy();
        let ours = rw.spa.read(|w| {
            w.spare_named(&p).is_some() || w.cache_named(&p).is_some() || w.paths.values().any(|q| *q == p)
        });
        if ours {
            return Err(format!("cannot add to '{name}': {p} is already part of pool '{name}'"));
        }
    }
    // The sector shift the new top-level vdevs get: -o ashift, else the pool's ashift
    // property when set (libzfs puts it in the vdevs' nvlist), else, for files when the
    // tunables set the file sector size, OpenZFS's rule for files (as a new pool's,
    // `rwpool::default_ashift`), else the pool's first vdev's. One that differs from the
    // pool's needs --allow-ashift-mismatch, as zpool's (ZFS_ERR_ASHIFT_MISMATCH).
    let mut ashift = None;
    if !specs.is_empty() {
        let (have, prop) = rw
            .spa
            .read(|w| {
                Ok::<_, pool::PoolError>((
                    w.tops.first().map(|t| u64::from(t.ashift())),
                    w.pool_prop_u64("ashift")?,
                ))
            })
            .map_err(|e| format!("cannot add to '{name}': {e}"))?;
        let all_files = infos.iter().all(|d| !d.is_block);
        let want = a
            .ashift
            .filter(|&n| n != 0)
            .or(prop.filter(|&n| n != 0))
            .or_else(|| all_files.then(pool::tunables::file_vdev_ashift).flatten().map(u64::from));
        if let (Some(have), Some(want)) = (have, want) {
            if want != have && !a.allow_ashift_mismatch {
                return Err(format!(
                    "cannot add to '{name}': adding devices with different physical sector sizes is not allowed"
                ));
            }
        }
        ashift = want.and_then(|n| u8::try_from(n).ok());
    }
    let spares = spare_leaves(spare_paths, a.force, !a.dryrun)?;
    let caches = spare_leaves(cache_paths, a.force, !a.dryrun)?;
    let tops = new_tops(specs, &infos, !a.dryrun)?;
    if !a.force && !a.allow_replication_mismatch {
        if let Some(msg) = rw.spa.read(|w| pool::add::replication_error(&w.tops, &tops, log)) {
            return Err(msg);
        }
    }
    let refuse = |e: pool::PoolError| match e {
        pool::PoolError::Unsupported(m) => m,
        e => format!("cannot add to '{name}': {e}"),
    };
    if a.dryrun {
        return rw
            .spa
            .read(|w| {
                if !tops.is_empty() {
                    w.check_add(&tops, log, ashift)?;
                }
                Ok(render_dry_run(w, specs, log, cache_paths, spare_paths))
            })
            .map_err(refuse);
    }
    if !tops.is_empty() {
        rw.spa.run_syncing(|w| w.add_tops(&tops, log, ashift)).map_err(refuse)?;
    }
    if !caches.is_empty() {
        let ashift =
            a.ashift.filter(|&n| n != 0).unwrap_or(u64::from(crate::rwpool::default_ashift(caches.iter())));
        rw.spa.add_caches(&caches, ashift).map_err(refuse)?;
    }
    if !spares.is_empty() {
        rw.spa.add_spares(&spares).map_err(refuse)?;
    }
    Ok(String::new())
}

/// Hot spares named after `spare` (or cache devices after `cache`): checked as any new device, opened (exclusively when
/// they will be written).
pub fn spare_leaves(paths: &[PathBuf], force: bool, writable: bool) -> Result<Vec<NewLeaf>, String> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let specs: Vec<TopSpec> = paths.iter().cloned().map(TopSpec::Disk).collect();
    let infos = pool::vdevspec::validate(&specs, force)?;
    paths.iter().map(|p| open_leaf(p, infos.iter().any(|d| d.path == *p && d.is_block), writable)).collect()
}

/// A leaf's name as zpool prints it (`zpool_vdev_name`: the path, less `/dev/`).
fn leaf_name(path: &str) -> &str {
    path.strip_prefix("/dev/").unwrap_or(path)
}

/// `zpool add -n`'s output: the pool's tree (its vdevs named with their ids) with the new
/// vdevs (named by type only) after it, then the log vdevs, old and new (zpool names a
/// class's vdevs by type only), then the cache devices and the spares.
fn render_dry_run(
    w: &PoolWriter,
    specs: &[TopSpec],
    log: &[bool],
    caches: &[PathBuf],
    spares: &[PathBuf],
) -> String {
    let mut out = format!("would update '{}' to the following configuration:\n\n\t{}\n", w.name, w.name);
    let path_of = |v: &Vdev| w.paths.get(&v.guid()).cloned().unwrap_or_else(|| v.name());
    let existing = |out: &mut String, t: &Vdev, name: String| {
        if t.children().is_empty() {
            out.push_str(&format!("\t  {}\n", leaf_name(&path_of(t))));
            return;
        }
        out.push_str(&format!("\t  {name}\n"));
        for c in t.children() {
            out.push_str(&format!("\t    {}\n", leaf_name(&path_of(c))));
        }
    };
    let is_log = |i: usize| log.get(i).copied().unwrap_or(false);
    for t in w.tops.iter().filter(|t| !t.is_log() && *t.kind() != vdev::VdevKind::Hole) {
        existing(&mut out, t, t.name());
    }
    out.push_str(&render_specs(specs.iter().enumerate().filter(|(i, _)| !is_log(*i)).map(|(_, s)| s)));
    let old_logs: Vec<&Arc<Vdev>> = w.tops.iter().filter(|t| t.is_log()).collect();
    if !old_logs.is_empty() || (0..specs.len()).any(is_log) {
        out.push_str("\tlogs\n");
        for t in old_logs {
            existing(&mut out, t, t.kind().type_name().to_string());
        }
        out.push_str(&render_specs(specs.iter().enumerate().filter(|(i, _)| is_log(*i)).map(|(_, s)| s)));
    }
    let existing: Vec<&str> = w.caches.devs.iter().map(|c| c.path.as_str()).collect();
    out.push_str(&render_aux("cache", &existing, caches));
    let existing: Vec<&str> = w.spares.iter().map(|s| s.path.as_str()).collect();
    out.push_str(&render_aux("spares", &existing, spares));
    out
}

/// The lines `zpool create -n` shows under the pool's name: the new top-level vdevs, the
/// log vdevs under `logs`, the cache devices and the spares.
pub(crate) fn render_new_tops(
    specs: &[TopSpec],
    log: &[bool],
    caches: &[PathBuf],
    spares: &[PathBuf],
) -> String {
    let is_log = |i: usize| log.get(i).copied().unwrap_or(false);
    let mut out = render_specs(specs.iter().enumerate().filter(|(i, _)| !is_log(*i)).map(|(_, s)| s));
    if (0..specs.len()).any(is_log) {
        out.push_str("\tlogs\n");
        out.push_str(&render_specs(specs.iter().enumerate().filter(|(i, _)| is_log(*i)).map(|(_, s)| s)));
    }
    out.push_str(&render_aux("cache", &[], caches));
    out.push_str(&render_aux("spares", &[], spares));
    out
}

fn render_specs<'a>(specs: impl Iterator<Item = &'a TopSpec>) -> String {
    let mut out = String::new();
    for s in specs {
        let group = match s {
            TopSpec::Disk(p) => {
                out.push_str(&format!("\t  {}\n", leaf_name(&p.to_string_lossy())));
                continue;
            }
            TopSpec::Mirror(_) => "mirror".to_string(),
            TopSpec::Raidz { parity, .. } => format!("raidz{parity}"),
        };
        out.push_str(&format!("\t  {group}\n"));
        for p in s.devs() {
            out.push_str(&format!("\t    {}\n", leaf_name(&p.to_string_lossy())));
        }
    }
    out
}

/// A class of aux devices under its heading (`cache`, `spares`), the pool's first.
fn render_aux(heading: &str, existing: &[&str], spares: &[PathBuf]) -> String {
    let mut out = String::new();
    if !existing.is_empty() || !spares.is_empty() {
        out.push_str(&format!("\t{heading}\n"));
        for p in existing
            .iter()
            .map(|s| s.to_string())
            .chain(spares.iter().map(|p| p.to_string_lossy().into_owned()))
        {
            out.push_str(&format!("\t  {}\n", leaf_name(&p)));
        }
    }
    out
}
