//! Pools driven through the library, in this process (no daemon, no FUSE): what the "DMU-level
//! API" rows of the benchmarks measure. Creation mirrors `rzpool create` (the default feature
//! set, a ZPL root file system); the root dataset is written with compression off and fletcher4,
//! so the bytes that reach the vdevs are the bytes written (as in the raw and peer rows).

use pool::create::{CreateSpec, NewLeaf, NewTop};
use pool::writer::{Policy, PoolWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A top-level layout of file vdevs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One file.
    Single,
    /// An n-way mirror.
    Mirror(usize),
    /// raidz`p` of n files.
    Raidz(u8, usize),
}

impl Layout {
    /// Parses "single", "mirror2", "raidz1x4", "raidz2x6".
    pub fn parse(s: &str) -> Option<Layout> {
        if s == "single" {
            return Some(Layout::Single);
        }
        if let Some(n) = s.strip_prefix("mirror") {
            return n.parse().ok().filter(|n| *n >= 2).map(Layout::Mirror);
        }
        let (p, n) = s.strip_prefix("raidz")?.split_once('x')?;
        let (p, n): (u8, usize) = (p.parse().ok()?, n.parse().ok()?);
        ((1..=3).contains(&p) && n > usize::from(p)).then_some(Layout::Raidz(p, n))
    }

    pub fn name(self) -> String {
        match self {
            Layout::Single => "single".into(),
            Layout::Mirror(n) => format!("mirror{n}"),
            Layout::Raidz(p, n) => format!("raidz{p}x{n}"),
        }
    }

    /// Human label: "raidz1 of 4 files".
    pub fn label(self) -> String {
        match self {
            Layout::Single => "single file".into(),
            Layout::Mirror(n) => format!("mirror of {n} files"),
            Layout::Raidz(p, n) => format!("raidz{p} of {n} files"),
        }
    }

    pub fn disks(self) -> usize {
        match self {
            Layout::Single => 1,
            Layout::Mirror(n) | Layout::Raidz(_, n) => n,
        }
    }

    /// Bytes stored on the vdevs per byte of file data (before metadata and RAID-Z padding).
    pub fn expansion(self) -> f64 {
        match self {
            Layout::Single => 1.0,
            Layout::Mirror(n) => n as f64,
            Layout::Raidz(p, n) => n as f64 / (n - usize::from(p)) as f64,
        }
    }

    /// The vdev spec words of `zpool create` / `rzpool create` after the pool name.
    pub fn vdev_args(self, imgs: &[PathBuf]) -> Vec<String> {
        let mut v = match self {
            Layout::Single => Vec::new(),
            Layout::Mirror(_) => vec!["mirror".to_string()],
            Layout::Raidz(p, _) => vec![format!("raidz{p}")],
        };
        v.extend(imgs.iter().map(|p| p.to_string_lossy().into_owned()));
        v
    }
}

/// fletcher4 (7), compression off (2): what the benchmarks write.
pub fn policy() -> Policy {
    Policy::dataset(7, 2, 1)
}

pub fn now() -> (u64, u64) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_nanos()))
}

/// Creates pool `name` (ashift 12, default features, a ZPL root) on the existing files `imgs`.
pub fn create(
    name: &str,
    layout: Layout,
    imgs: &[PathBuf],
    cache_bytes: usize,
) -> Result<PoolWriter, String> {
    let mut leaves = Vec::new();
    for p in imgs {
        let dev = vdev::device::FileDevice::open(p, true).map_err(|e| format!("{}: {e}", p.display()))?;
        leaves.push(NewLeaf {
            path: p.to_string_lossy().into_owned(),
            device: Arc::new(dev),
            is_disk: false,
        });
    }
    let top = match layout {
        Layout::Single => NewTop::Single(leaves.pop().ok_or("no image")?),
        Layout::Mirror(_) => NewTop::Mirror(leaves),
        Layout::Raidz(parity, _) => NewTop::Raidz { parity, leaves },
    };
    let none: [&str; 0] = [];
    let (set, _) = pool::feature_table::resolve_create(&pool::compat::CompatSet::Off, &none, &none)
        .map_err(|e| e.to_string())?;
    let features = set.iter().filter_map(|n| pool::feature_table::by_name(n)).collect();
    let init = |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
        zpl::write::ZplWriter::create_fs(os, z, now(), 0, 0)
            .map(|_| ())
            .map_err(|e| pool::PoolError::Invalid(e.to_string()))
    };
    let spec = CreateSpec {
        name: name.into(),
        tops: vec![top],
        log: Vec::new(),
        ashift: 12,
        features,
        root_props: vec![("compression".into(), zap::write::ZapVal::u64(2))],
        pool_props: vec![],
        init_root: &init,
        root_policy: policy(),
        cache_bytes,
        label_name: None,
    };
    pool::create::create(&spec).map_err(|e| format!("create {name}: {e}"))
}

/// Imports pool `name` from the files in `dir`, read-write, for the library.
pub fn import_rw(dir: &Path, name: &str, cache_bytes: usize) -> Result<PoolWriter, String> {
    let p = import(dir, name, false, cache_bytes)?;
    let mut w = pool::open_rw::open_rw(&p).map_err(|e| format!("open {name} read-write: {e}"))?;
    w.sync().map_err(|e| e.to_string())?;
    Ok(w)
}

/// Imports pool `name` from the files in `dir`.
pub fn import(dir: &Path, name: &str, readonly: bool, cache_bytes: usize) -> Result<pool::Pool, String> {
    let cands = pool::discover(&[dir.to_path_buf()], false).map_err(|e| e.to_string())?;
    let cand = pool::discover::select(&cands, name).map_err(|e| e.to_string())?;
    pool::import(cand, &pool::ImportOpts { readonly, cache_bytes, ..Default::default() })
        .map_err(|e| format!("import {name}: {e}"))
}

/// The head dataset object of the pool's root file system.
pub fn root_ds(w: &mut PoolWriter) -> Result<u64, String> {
    let root_dir = w
        .mos_zaps
        .lookup_u64(&w.mos, 1, "root_dataset")
        .map_err(|e| e.to_string())?
        .ok_or("no root_dataset in the MOS directory")?;
    Ok(dsl::write::dir_phys(&w.mos, root_dir).map_err(|e| e.to_string())?.head_dataset_obj)
}

/// Opens the root file system for writing: (dataset object, its ZPL).
pub fn open_root(w: &mut PoolWriter) -> Result<(u64, zpl::write::ZplWriter), String> {
    let ds = root_ds(w)?;
    w.open_dataset(ds, policy()).map_err(|e| e.to_string())?;
    let d = w.dataset(ds).ok_or("root dataset not open")?;
    let z = zpl::write::ZplWriter::open(&d.os, &mut d.zaps).map_err(|e| e.to_string())?;
    Ok((ds, z))
}

/// Syncs when the open txg holds more than `dirty_max` bytes (the daemon's write throttle).
pub fn throttle(w: &mut PoolWriter, dirty_max: u64) -> Result<(), String> {
    if w.dirty_bytes() > dirty_max {
        w.sync().map_err(|e| format!("txg sync: {e}"))?;
    }
    Ok(())
}

/// Syncs and exports.
pub fn export(mut w: PoolWriter) -> Result<(), String> {
    w.close(ondisk::label::PoolState::Exported).map_err(|e| format!("export: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_and_name() {
        for s in ["single", "mirror2", "raidz1x4", "raidz2x6", "raidz3x5"] {
            assert_eq!(Layout::parse(s).map(Layout::name).as_deref(), Some(s));
        }
        for s in ["", "mirror1", "raidz4x6", "raidz2x2", "raidzx4", "stripe"] {
            assert_eq!(Layout::parse(s), None, "{s}");
        }
        assert_eq!(Layout::Raidz(2, 6).expansion(), 1.5);
    }
}
