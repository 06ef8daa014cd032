//! # dsl — datasets, their directory tree, snapshots and properties (read side)
//!
//! The MOS holds a tree of DSL directories rooted at the object named `root_dataset` in the
//! object directory. Each directory (bonus `dsl_dir_phys_t`) has a head dataset (bonus
//! `dsl_dataset_phys_t`, whose block pointer is the root of the dataset's objset), a ZAP of
//! child directories, and a ZAP of properties. A head dataset's snapshots are named in its
//! `snapnames` ZAP; snapshots chain through `prev_snap_obj`. Directories whose names begin
//! with `$` (`$MOS`, `$FREE`, `$ORIGIN`) are internal and never listed.
//! Facts from OpenZFS `include/sys/dsl_dir.h`, `dsl_dataset.h`, `module/zfs/dsl_*.c`.
//!
//! Invariant: walking is bounded — names are at most 256 components deep
//! (`ZFS_MAX_DATASET_NAME_LEN`), so recursion depth is bounded even on a corrupt (cyclic)
//! directory tree.
#![forbid(unsafe_code)]

pub mod destroy;
pub mod limits;
pub mod promote;
pub mod props;
pub mod quota;
pub mod write;

use dmu::Objset;
use ondisk::blkptr::BlkPtr;
use ondisk::dsl::{DslDatasetPhys, DslDirPhys};

/// Errors of the DSL.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DslError {
    #[error(transparent)]
    Dmu(#[from] dmu::DmuError),
    #[error(transparent)]
    Zap(#[from] zap::ZapError),
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: &'static str, detail: String },
    #[error("dataset does not exist: {0}")]
    NoSuchDataset(String),
    /// An operation rzfs does not carry out (yet) on this dataset; the text says why.
    #[error("{0}")]
    Unsupported(String),
}

impl From<ondisk::Error> for DslError {
    fn from(e: ondisk::Error) -> Self {
        DslError::Corrupt { what: "DSL record", detail: e.to_string() }
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, DslError>;

/// Bound on the depth of the dataset tree (a dataset name has at most 256 bytes, so at most
/// 128 components).
const MAX_DEPTH: usize = 128;

/// What a dataset is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetKind {
    Filesystem,
    Volume,
    Snapshot,
    /// A bookmark (`fs#name`): not a dataset, but listed like one (see
    /// [`DslPool::bookmarks`]).
    Bookmark,
}

impl DatasetKind {
    /// As `zfs list -o type` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetKind::Filesystem => "filesystem",
            DatasetKind::Volume => "volume",
            DatasetKind::Snapshot => "snapshot",
            DatasetKind::Bookmark => "bookmark",
        }
    }
}

/// `DMU_OTN_ZAP_METADATA`: the type of a zapified dataset object.
pub(crate) const OTN_ZAP_METADATA: u8 = 0xc4;
/// The field of a zapified head dataset naming its bookmarks ZAP (`DS_FIELD_BOOKMARK_NAMES`).
pub const DS_FIELD_BOOKMARK_NAMES: &str = "com.delphix:bookmarks";
/// The field of a zapified directory holding when its snapshot namespace last changed
/// (`DD_FIELD_SNAPSHOTS_CHANGED`): two uint64s, seconds and nanoseconds (an
/// `inode_timespec_t`), written at each snapshot create, destroy and rename when the pool
/// has extensible_dataset enabled (`dsl_dir_snap_cmtime_update`).
pub const DD_FIELD_SNAPSHOTS_CHANGED: &str = "com.ixsystems:snapshots_changed";

/// One dataset (head or snapshot) with its records.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub name: String,
    pub kind: DatasetKind,
    pub dir_obj: u64,
    pub ds_obj: u64,
    pub dir: DslDirPhys,
    pub ds: DslDatasetPhys,
    /// Byte order of the MOS records (and so of `ds.bp`).
    pub order: ondisk::ByteOrder,
}

impl Dataset {
    /// Root block pointer of the dataset's objset.
    pub fn objset_bp(&self) -> Result<BlkPtr> {
        Ok(BlkPtr::parse(&self.ds.bp, self.order)?)
    }
}

/// The DSL view of one pool.
pub struct DslPool {
    mos: Objset,
    name: String,
    /// [`DslPool::unused_reservations`], computed once (the MOS here does not change).
    unused_rsrv: std::sync::OnceLock<u64>,
}

impl DslPool {
    /// Wraps an open MOS.
    pub fn new(mos: Objset, name: String) -> DslPool {
        DslPool { mos, name, unused_rsrv: std::sync::OnceLock::new() }
    }

    /// The MOS.
    pub fn mos(&self) -> &Objset {
        &self.mos
    }

    fn dir(&self, obj: u64) -> Result<DslDirPhys> {
        let dn = self.mos.dnode(obj)?;
        Ok(DslDirPhys::parse(&dn.bonus, self.order(&dn))?)
    }

    fn dataset(&self, obj: u64) -> Result<DslDatasetPhys> {
        let dn = self.mos.dnode(obj)?;
        Ok(DslDatasetPhys::parse(&dn.bonus, self.order(&dn))?)
    }

    /// Bonus buffers are in the byte order of the dnode block that holds them.
    fn order(&self, _dn: &dmu::Dnode) -> ondisk::ByteOrder {
        self.mos.dnode_byte_order()
    }

    /// Object number of the root DSL directory.
    pub fn root_dir_obj(&self) -> Result<u64> {
        zap::lookup_u64(&self.mos, 1, "root_dataset")?
            .ok_or_else(|| DslError::Corrupt { what: "MOS directory", detail: "no root_dataset".into() })
    }

    /// Every dataset, depth first in name order, each head followed by its snapshots (oldest
    /// first) — the order `zfs list -t all` uses.
    pub fn list(&self) -> Result<Vec<Dataset>> {
        let mut out = Vec::new();
        let root = self.root_dir_obj()?;
        let mut seen = std::collections::HashSet::new();
        self.walk(root, self.name.clone(), 0, &mut seen, &mut out)?;
        Ok(out)
    }

    /// Depth first through child directories. A directory reached a second time (a crafted
    /// child ZAP naming an ancestor, or one directory under many names at every level, whose
    /// walk would be exponential) is listed under its first name only.
    fn walk(
        &self,
        dir_obj: u64,
        name: String,
        depth: usize,
        seen: &mut std::collections::HashSet<u64>,
        out: &mut Vec<Dataset>,
    ) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(DslError::Corrupt { what: "DSL directory tree", detail: "too deep (cycle?)".into() });
        }
        if !seen.insert(dir_obj) {
            return Ok(());
        }
        let dir = self.dir(dir_obj)?;
        if dir.head_dataset_obj != 0 {
            let head = self.head(dir_obj, &dir, &name)?;
            let snaps = self.snapshots(&head)?;
            out.push(head);
            out.extend(snaps);
        }
        if dir.child_dir_zapobj != 0 {
            let mut kids = zap::list(&self.mos, dir.child_dir_zapobj)?;
            kids.sort_by_key(|a| a.name_string());
            for k in kids {
                let n = k.name_string();
                if n.starts_with('$') {
                    continue;
                }
                let obj = k.first_u64().ok_or_else(|| DslError::Corrupt {
                    what: "child directory ZAP",
                    detail: format!("entry {n} has no object number"),
                })?;
                self.walk(obj, format!("{name}/{n}"), depth + 1, seen, out)?;
            }
        }
        Ok(())
    }

    fn head(&self, dir_obj: u64, dir: &DslDirPhys, name: &str) -> Result<Dataset> {
        let ds = self.dataset(dir.head_dataset_obj)?;
        let kind = self.kind_of(&ds)?;
        Ok(Dataset {
            name: name.to_string(),
            kind,
            dir_obj,
            ds_obj: dir.head_dataset_obj,
            dir: dir.clone(),
            ds,
            order: self.mos.dnode_byte_order(),
        })
    }

    fn kind_of(&self, ds: &DslDatasetPhys) -> Result<DatasetKind> {
        let bp = BlkPtr::parse(&ds.bp, self.mos.dnode_byte_order())?;
        if bp.is_hole() {
            return Ok(DatasetKind::Filesystem);
        }
        let os = Objset::open(self.mos.reader(), &bp)?;
        Ok(if os.os_type() == ondisk::objset::DMU_OST_ZVOL {
            DatasetKind::Volume
        } else {
            DatasetKind::Filesystem
        })
    }

    /// Snapshots of a head dataset, oldest first.
    pub fn snapshots(&self, head: &Dataset) -> Result<Vec<Dataset>> {
        if head.ds.snapnames_zapobj == 0 {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for e in zap::list(&self.mos, head.ds.snapnames_zapobj)? {
            let obj = e.first_u64().ok_or_else(|| DslError::Corrupt {
                what: "snapshot names ZAP",
                detail: format!("entry {} has no object number", e.name_string()),
            })?;
            out.push(self.snapshot_of(head, &e.name_string(), obj)?);
        }
        out.sort_by_key(|d| d.ds.creation_txg);
        Ok(out)
    }

    /// Bookmarks of a head dataset, by name. A bookmark (`dsl_bookmark.c`) is an entry of
    /// the ZAP named by the head's `com.delphix:bookmarks` field: name → `zfs_bookmark_phys_t`
    /// as uint64s (guid, creation txg, creation time, then the V2 fields). Each is returned
    /// as a [`Dataset`] of kind [`DatasetKind::Bookmark`] named `fs#name`, whose `ds` holds
    /// only the guid, creation txg and time (and `ds_obj` is the head's).
    pub fn bookmarks(&self, head: &Dataset) -> Result<Vec<Dataset>> {
        let dn = self.mos.dnode(head.ds_obj)?;
        if dn.phys.object_type != OTN_ZAP_METADATA {
            return Ok(Vec::new());
        }
        let Some(obj) = zap::lookup_u64(&self.mos, head.ds_obj, DS_FIELD_BOOKMARK_NAMES)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for e in zap::list(&self.mos, obj)? {
            let v = &e.values;
            let (Some(&guid), Some(&txg), Some(&time)) = (v.first(), v.get(1), v.get(2)) else {
                return Err(DslError::Corrupt {
                    what: "bookmark",
                    detail: format!("{}#{} has {} values", head.name, e.name_string(), v.len()),
                });
            };
            let ds = DslDatasetPhys {
                guid,
                creation_txg: txg,
                creation_time: time,
                dir_obj: head.dir_obj,
                ..Default::default()
            };
            out.push(Dataset {
                name: format!("{}#{}", head.name, e.name_string()),
                kind: DatasetKind::Bookmark,
                dir_obj: head.dir_obj,
                ds_obj: head.ds_obj,
                dir: head.dir.clone(),
                ds,
                order: self.mos.dnode_byte_order(),
            });
        }
        out.sort_by(|a, b| (a.ds.creation_txg, &a.name).cmp(&(b.ds.creation_txg, &b.name)));
        Ok(out)
    }

    /// Finds a bookmark (`fs#name`).
    pub fn find_bookmark(&self, name: &str) -> Result<Dataset> {
        let (fs, _) = name.split_once('#').ok_or_else(|| DslError::NoSuchDataset(name.to_string()))?;
        let head = self.find(fs)?;
        self.bookmarks(&head)?
            .into_iter()
            .find(|b| b.name == name)
            .ok_or_else(|| DslError::NoSuchDataset(name.to_string()))
    }

    /// Finds a dataset or snapshot by full name: by lookups down the child-directory ZAPs
    /// (and the head's snapshot-name ZAP), as `dsl_dataset_hold` does, so the cost does not
    /// grow with the number of datasets in the pool; when that finds nothing (a name a
    /// normalizing ZAP stores differently, say) the listing decides.
    pub fn find(&self, name: &str) -> Result<Dataset> {
        if let Some(d) = self.lookup(name)? {
            return Ok(d);
        }
        self.list()?
            .into_iter()
            .find(|d| d.name == name)
            .ok_or_else(|| DslError::NoSuchDataset(name.to_string()))
    }

    /// [`DslPool::find`]'s direct path; `None` when it does not find the name.
    fn lookup(&self, name: &str) -> Result<Option<Dataset>> {
        let (path, snap) = match name.split_once('@') {
            Some((p, s)) => (p, Some(s)),
            None => (name, None),
        };
        let mut parts = path.split('/');
        if parts.next() != Some(self.name.as_str()) {
            return Ok(None);
        }
        let mut dir_obj = self.root_dir_obj()?;
        let mut dir = self.dir(dir_obj)?;
        for (depth, part) in parts.enumerate() {
            // Hidden directories ($MOS, $ORIGIN, ...) are not datasets (`walk` skips them).
            if part.is_empty() || part.starts_with('$') || depth >= MAX_DEPTH || dir.child_dir_zapobj == 0 {
                return Ok(None);
            }
            let Some(child) = zap::lookup_u64(&self.mos, dir.child_dir_zapobj, part)? else {
                return Ok(None);
            };
            dir_obj = child;
            dir = self.dir(dir_obj)?;
        }
        if dir.head_dataset_obj == 0 {
            return Ok(None);
        }
        let head = self.head(dir_obj, &dir, path)?;
        let Some(snap) = snap else { return Ok(Some(head)) };
        if head.ds.snapnames_zapobj == 0 {
            return Ok(None);
        }
        let Some(obj) = zap::lookup_u64(&self.mos, head.ds.snapnames_zapobj, snap)? else { return Ok(None) };
        self.snapshot_of(&head, snap, obj).map(Some)
    }

    /// Snapshot `short` (dataset object `obj`) of head dataset `head`.
    fn snapshot_of(&self, head: &Dataset, short: &str, obj: u64) -> Result<Dataset> {
        Ok(Dataset {
            name: format!("{}@{short}", head.name),
            kind: DatasetKind::Snapshot,
            dir_obj: head.dir_obj,
            ds_obj: obj,
            dir: head.dir.clone(),
            ds: self.dataset(obj)?,
            order: self.mos.dnode_byte_order(),
        })
    }

    /// Opens the objset of a dataset.
    pub fn open_objset(&self, ds: &Dataset) -> Result<Objset> {
        let bp = ds.objset_bp()?;
        Ok(Objset::open(self.mos.reader(), &bp)?)
    }

    /// Explicitly set properties of a directory (name → value), from its props ZAP.
    pub fn local_props(&self, dir: &DslDirPhys) -> Result<Vec<(String, props::RawProp)>> {
        props::read_props_zap(&self.mos, dir.props_zapobj)
    }

    /// Every entry of a directory's props ZAP: local and received values and markers
    /// (see [`props::applies`]).
    pub fn all_props(&self, dir: &DslDirPhys) -> Result<Vec<(String, props::RawProp)>> {
        props::read_props_zap_all(&self.mos, dir.props_zapobj)
    }

    /// Parent directory object of a directory (0 at the root).
    pub fn parent_of(&self, dir: &DslDirPhys) -> u64 {
        dir.parent_obj
    }

    /// When the snapshots of directory `dir` last changed (`snapshots_changed`), as
    /// (seconds, nanoseconds); (0, 0) when never recorded (no field, or a directory without
    /// a ZAP), which zfs shows as `-`.
    pub fn snapshots_changed(&self, dir: u64) -> Result<(u64, u64)> {
        if self.mos.dnode(dir)?.phys.object_type != OTN_ZAP_METADATA {
            return Ok((0, 0));
        }
        let Some(e) = zap::lookup(&self.mos, dir, DD_FIELD_SNAPSHOTS_CHANGED)? else {
            return Ok((0, 0));
        };
        match e.values[..] {
            [sec, nsec] => Ok((sec, nsec)),
            _ => Err(DslError::Corrupt {
                what: "dsl_dir",
                detail: format!(
                    "{DD_FIELD_SNAPSHOTS_CHANGED} of directory {dir} has {} values",
                    e.values.len()
                ),
            }),
        }
    }

    /// Directory `dir`'s file system or snapshot count ([`limits`]): None where no limit
    /// made it count.
    pub fn fs_ss_count(&self, dir: u64, which: limits::Count) -> Result<Option<u64>> {
        if self.mos.dnode(dir)?.phys.object_type != OTN_ZAP_METADATA {
            return Ok(None);
        }
        Ok(zap::lookup_u64(&self.mos, dir, which.field())?)
    }

    /// The space reserved and not used anywhere in the pool ([`quota::unused_reservations`]).
    pub fn unused_reservations(&self) -> Result<u64> {
        if let Some(&v) = self.unused_rsrv.get() {
            return Ok(v);
        }
        let root = self.root_dir_obj()?;
        let v = quota::unused_reservations(root, &mut |d| self.dir_phys(d), &mut |p| {
            if p.child_dir_zapobj == 0 {
                return Ok(Vec::new());
            }
            Ok(zap::list(&self.mos, p.child_dir_zapobj)?.iter().filter_map(|k| k.first_u64()).collect())
        })?;
        Ok(*self.unused_rsrv.get_or_init(|| v))
    }

    /// Reads a directory record by object number.
    pub fn dir_phys(&self, obj: u64) -> Result<DslDirPhys> {
        self.dir(obj)
    }

    /// The space written to `new` (a head or a snapshot) since `old`, an earlier snapshot
    /// of its history (`written@old`; `dsl_dataset_space_written`): what `new` references
    /// beyond what `old` did, plus what was freed in between from blocks `old` references
    /// (found in the deadlists of the snapshots after `old`, up to `new`: each deadlist
    /// key at or below `old`'s txg holds blocks born no later than it). `None` when `old`
    /// is not in `new`'s history.
    pub fn space_written(&self, old: &Dataset, new: &Dataset) -> Result<Option<u64>> {
        self.space_written_phys((old.ds_obj, &old.ds), (new.ds_obj, &new.ds))
    }

    /// [`DslPool::space_written`] of datasets given by object number and record.
    pub fn space_written_phys(
        &self,
        old: (u64, &DslDatasetPhys),
        new: (u64, &DslDatasetPhys),
    ) -> Result<Option<u64>> {
        let (old_obj, old) = old;
        let mut used = i128::from(new.1.referenced_bytes) - i128::from(old.referenced_bytes);
        let (mut obj, mut phys) = (new.0, new.1.clone());
        for _ in 0..1_000_000 {
            if obj == old_obj {
                return Ok(Some(used.clamp(0, i128::from(u64::MAX)) as u64));
            }
            if phys.prev_snap_obj == 0 || phys.prev_snap_txg < old.creation_txg {
                return Ok(None);
            }
            let max = if phys.prev_snap_txg == old.creation_txg { u64::MAX } else { old.creation_txg };
            used += i128::from(self.deadlist_space_range(phys.deadlist_obj, max)?);
            obj = phys.prev_snap_obj;
            phys = self.dataset(obj)?;
        }
        Err(DslError::Corrupt { what: "snapshot chain", detail: format!("dataset {} loops", new.0) })
    }

    /// Reads a dataset record by object number.
    pub fn dataset_phys(&self, obj: u64) -> Result<DslDatasetPhys> {
        self.dataset(obj)
    }

    /// The `$ORIGIN@$ORIGIN` snapshot every new file system is a clone of (pools from
    /// version 11 on), if the pool has one.
    pub fn origin_snapshot_obj(&self) -> Result<Option<u64>> {
        let root = self.dir(self.root_dir_obj()?)?;
        let Some(odir) = zap::lookup_u64(&self.mos, root.child_dir_zapobj, "$ORIGIN")? else {
            return Ok(None);
        };
        let head = self.dir(odir)?.head_dataset_obj;
        Ok(Some(self.dataset(head)?.prev_snap_obj).filter(|&o| o != 0))
    }

    /// The bytes of deadlist `dl`'s entries whose key is below `maxtxg`
    /// (`dsl_deadlist_space_range` from 0). A deadlist of the old format (one bpobj, pools
    /// before version 26) counts whole.
    fn deadlist_space_range(&self, dl: u64, maxtxg: u64) -> Result<u64> {
        if dl == 0 {
            return Ok(0);
        }
        let bpobj_bytes = |obj: u64| -> Result<u64> {
            let dn = self.mos.dnode(obj)?;
            Ok(ondisk::bpobj::BpobjPhys::parse(&dn.bonus, self.order(&dn))?.bytes)
        };
        let Ok(entries) = zap::list(&self.mos, dl) else {
            return bpobj_bytes(dl);
        };
        let mut total = 0u64;
        for e in entries {
            let key: Option<u64> = e.name_string().parse().ok();
            if let (Some(k), Some(bpo)) = (key, e.first_u64()) {
                if k < maxtxg {
                    total = total.saturating_add(bpobj_bytes(bpo)?);
                }
            }
        }
        Ok(total)
    }
}
