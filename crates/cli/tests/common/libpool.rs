//! Pools written in-process through the pool's owner ([`pool::txg::Spa`]), on file vdevs
//! wrapped by the fault injector: what the failure-model tests drive. Files live flat in the
//! root directory of the root file system; [`LibFs::tree`] and [`read_back`] compare them
//! with a model.
#![allow(dead_code)]

use pool::create::{CreateSpec, NewLeaf, NewTop};
use pool::space::{Reserve, SpaceCheck};
use pool::txg::{FailMode, Spa, Tunables};
use pool::PoolError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Files by name, as a model or as read back.
pub type Files = BTreeMap<String, Vec<u8>>;

/// A pool layout: name, number of leaves, failed leaves it survives.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub name: &'static str,
    pub leaves: usize,
    pub tolerance: usize,
}

pub const LAYOUTS: [Layout; 4] = [
    Layout { name: "single", leaves: 1, tolerance: 0 },
    Layout { name: "mirror", leaves: 2, tolerance: 1 },
    Layout { name: "raidz1", leaves: 3, tolerance: 1 },
    Layout { name: "raidz2", leaves: 4, tolerance: 2 },
];

impl Layout {
    fn top(&self, leaves: Vec<NewLeaf>) -> NewTop {
        match self.name {
            "single" => NewTop::Single(leaves.into_iter().next().expect("one leaf")),
            "mirror" => NewTop::Mirror(leaves),
            "raidz1" => NewTop::Raidz { parity: 1, leaves },
            _ => NewTop::Raidz { parity: 2, leaves },
        }
    }
}

/// A fresh scratch directory for one test case.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rzfs-lib-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn now() -> (u64, u64) {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs(), u64::from(d.subsec_nanos()))
}

/// A pool written through its Spa, with its root file system open.
pub struct LibFs {
    pub name: String,
    pub spa: Arc<Spa>,
    pub ds: u64,
    zpl: Mutex<zpl::write::ZplWriter>,
    /// Leaf paths, in the order of the layout (fault-injection keys).
    pub leaves: Vec<String>,
}

/// Dropping the owner is a crash: nothing more is written, and its threads let go of the
/// devices before the next import tries them.
impl Drop for LibFs {
    fn drop(&mut self) {
        self.spa.halt();
    }
}

impl LibFs {
    /// Creates pool `name` of `layout` on sparse files of `size` bytes in `dir` (ashift 12)
    /// and starts its owner (syncs only when asked, or past `dirty_max`).
    pub fn create(
        dir: &Path,
        name: &str,
        layout: Layout,
        size: u64,
        failmode: FailMode,
        dirty_max: u64,
    ) -> LibFs {
        let mut leaves = Vec::new();
        let mut paths = Vec::new();
        for i in 0..layout.leaves {
            let p = dir.join(format!("{name}-d{i}"));
            let f = std::fs::File::create(&p).unwrap();
            f.set_len(size).unwrap();
            let path = p.to_string_lossy().into_owned();
            let dev = vdev::FileDevice::open(&p, true).unwrap();
            leaves.push(NewLeaf {
                device: vdev::inject::InjectDevice::wrap(Arc::new(dev), &path),
                path: path.clone(),
                is_disk: false,
            });
            paths.push(path);
        }
        let none: [&str; 0] = [];
        let (set, _) =
            pool::feature_table::resolve_create(&pool::compat::CompatSet::Off, &none, &none).unwrap();
        let features = set.iter().filter_map(|n| pool::feature_table::by_name(n)).collect();
        let init = |os: &mut dmu::tx::DirtyObjset, z: &mut zap::write::ZapCache| {
            zpl::write::ZplWriter::create_fs(os, z, now(), 0, 0)
                .map(|_| ())
                .map_err(|e| PoolError::Invalid(e.to_string()))
        };
        let spec = CreateSpec {
            name: name.into(),
            tops: vec![layout.top(leaves)],
            log: Vec::new(),
            ashift: 12,
            features,
            root_props: vec![],
            pool_props: vec![],
            init_root: &init,
            root_policy: pool::writer::Policy::dataset(7, 15, 1),
            cache_bytes: 32 << 20,
            label_name: None,
        };
        let w = pool::create::create(&spec).expect("create the pool");
        let tun = Tunables { dirty_max, txg_timeout: Duration::from_secs(3600) };
        let spa = Spa::start(w, tun, failmode);
        let ds = spa.read(|w| {
            let root_dir = w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").unwrap().unwrap();
            dsl::write::dir_phys(&w.mos, root_dir).unwrap().head_dataset_obj
        });
        spa.with_writer(|w| w.open_dataset_inherited(ds)).unwrap();
        let zpl = spa.read(|w| {
            let d = w.datasets.get_mut(&ds).unwrap();
            zpl::write::ZplWriter::open(&d.os, &mut d.zaps).unwrap()
        });
        LibFs { name: name.into(), spa, ds, zpl: Mutex::new(zpl), leaves: paths }
    }

    /// Imports pool `name` from `dir` read-write (its leaves wrapped by the fault injector
    /// under their paths) and opens its root file system: what a daemon does after a crash.
    pub fn open_existing(
        dir: &Path,
        name: &str,
        failmode: FailMode,
        dirty_max: u64,
    ) -> Result<LibFs, String> {
        let cands = pool::discover(&[dir.to_path_buf()], false).map_err(|e| format!("discover: {e}"))?;
        let c = pool::discover::select(&cands, name).map_err(|e| format!("select: {e}"))?;
        let opts = pool::ImportOpts { readonly: false, ..Default::default() };
        let p = pool::import(c, &opts).map_err(|e| format!("import: {e}"))?;
        let leaves: Vec<String> = {
            let mut v: Vec<String> =
                c.devices.iter().map(|d| d.path.to_string_lossy().into_owned()).collect();
            v.sort();
            v
        };
        let w = pool::open_rw::open_rw(&p).map_err(|e| format!("open_rw: {e}"))?;
        drop(p);
        let tun = Tunables { dirty_max, txg_timeout: Duration::from_secs(3600) };
        let spa = Spa::start(w, tun, failmode);
        spa.sync_now().map_err(|e| format!("first txg after import: {e}"))?;
        let ds = spa.read(|w| {
            let root_dir = w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").unwrap().unwrap();
            dsl::write::dir_phys(&w.mos, root_dir).unwrap().head_dataset_obj
        });
        spa.open_dataset(ds).map_err(|e| format!("open root: {e}"))?;
        let zpl = spa.read(|w| {
            let d = w.datasets.get_mut(&ds).unwrap();
            zpl::write::ZplWriter::open(&d.os, &mut d.zaps).unwrap()
        });
        Ok(LibFs { name: name.into(), spa, ds, zpl: Mutex::new(zpl), leaves })
    }

    /// Opens the root file system again (after a rollback replaced its contents, or a
    /// promote or destroy changed the datasets around it).
    pub fn reopen(&mut self) -> Result<(), String> {
        let ds = self.spa.read(|w| {
            let root_dir = w.mos_zaps.lookup_u64(&w.mos, 1, "root_dataset").unwrap().unwrap();
            dsl::write::dir_phys(&w.mos, root_dir).unwrap().head_dataset_obj
        });
        self.spa.open_dataset(ds).map_err(|e| format!("open root: {e}"))?;
        let zpl = self.spa.read(|w| {
            let d = w.datasets.get_mut(&ds).unwrap();
            zpl::write::ZplWriter::open(&d.os, &mut d.zaps)
        });
        self.zpl = Mutex::new(zpl.map_err(|e| format!("open the ZPL: {e}"))?);
        self.ds = ds;
        Ok(())
    }

    fn run<R>(
        &self,
        check: SpaceCheck,
        reserve: Reserve,
        f: impl FnOnce(&mut zpl::write::ZplWriter, &mut pool::writer::DatasetWriter) -> Result<R, PoolError>,
    ) -> Result<R, PoolError> {
        self.spa.with_dataset(self.ds, check, reserve, |tx| {
            let mut z = self.zpl.lock().unwrap();
            z.txg = tx.txg;
            f(&mut z, tx.ds)
        })
    }

    /// Writes `name` with `data` (created or replaced).
    pub fn put(&self, name: &str, data: &[u8]) -> Result<(), PoolError> {
        let e = |e: zpl::write::ZplWriteError| PoolError::Io(e.to_string());
        self.run(SpaceCheck::Normal, Reserve::Write { len: data.len() as u64, block: 0 }, |z, d| {
            let root = z.root();
            let obj = match z.lookup(&d.os, &mut d.zaps, root, name.as_bytes()).map_err(e)? {
                Some(o) => {
                    z.truncate(&mut d.os, &mut d.zaps, o, 0, now()).map_err(e)?;
                    o
                }
                None => z
                    .create(&mut d.os, &mut d.zaps, root, name.as_bytes(), 0o100644, 0, 0, 0, now())
                    .map_err(e)?,
            };
            z.write(&mut d.os, &mut d.zaps, obj, 0, data, d.recordsize, now()).map_err(e)
        })
    }

    /// Removes `name`.
    pub fn del(&self, name: &str) -> Result<(), PoolError> {
        let e = |e: zpl::write::ZplWriteError| PoolError::Io(e.to_string());
        self.run(SpaceCheck::Reserved, Reserve::Meta, |z, d| {
            let root = z.root();
            z.unlink(&mut d.os, &mut d.zaps, root, name.as_bytes(), false, now()).map(|_| ()).map_err(e)
        })
    }

    /// Every file as the open txg sees it.
    pub fn tree(&self) -> Result<Files, PoolError> {
        let e = |e: zpl::write::ZplWriteError| PoolError::Io(e.to_string());
        self.run(SpaceCheck::Normal, Reserve::None, |z, d| {
            let root = z.root();
            let mut out = Files::new();
            for (name, obj, _) in z.readdir(&d.os, &mut d.zaps, root).map_err(e)? {
                let a = z.getattr(&d.os, obj).map_err(e)?;
                let data = z.read(&d.os, obj, 0, a.size as usize).map_err(e)?;
                out.insert(String::from_utf8_lossy(&name).into_owned(), data);
            }
            Ok(out)
        })
    }

    /// (state of each leaf, as `zpool status` shows it).
    pub fn leaf_states(&self) -> Vec<vdev::VdevState> {
        self.spa.read(|w| w.tops.iter().flat_map(|t| t.leaves().into_iter().map(|l| l.state())).collect())
    }
}

/// Imports the exported pool `name` from `dir` read-only and reads its root file system.
pub fn read_back(dir: &Path, name: &str) -> Result<Files, String> {
    let p = super::open(dir, name)?;
    read_dataset(&p, name)
}

/// The files of file system or snapshot `name` of an imported pool.
pub fn read_dataset(p: &pool::Pool, name: &str) -> Result<Files, String> {
    let ds = p.dsl().find(name).map_err(|e| format!("{name}: {e}"))?;
    let z = rzfs_cli::zplopen::open_zpl_only(p, &ds)?;
    let mut entries = Vec::new();
    z.walk(&mut |path, e| {
        entries.push((path.to_string(), e.object, e.dtype));
        Ok(())
    })
    .map_err(|e| format!("walking the tree: {e}"))?;
    let mut out = Files::new();
    for (path, obj, dtype) in entries {
        if dtype == 4 {
            continue;
        }
        let a = z.getattr(obj).map_err(|e| format!("{path}: {e}"))?;
        let data = z.read(obj, 0, a.size as usize).map_err(|e| format!("{path}: {e}"))?;
        out.insert(path.trim_start_matches('/').to_string(), data);
    }
    Ok(out)
}

/// The differences between two file sets, one line each.
pub fn diff(want: &Files, got: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in want {
        match got.get(k) {
            None => out.push(format!("missing {k}")),
            Some(g) if g != v => out.push(format!("{k}: {} bytes, want {}", g.len(), v.len())),
            _ => {}
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!("unexpected {k}"));
    }
    out
}
