//! # The write side of the SPA: transaction groups and their sync
//!
//! Theory. A [`PoolWriter`] owns an imported (or just created) pool for writing: its
//! top-level vdevs, the block allocator, the open txg's MOS ([`DirtyObjset`] + ZAP cache)
//! and one dirty objset per dataset being written. All changes of the open txg live in
//! memory until [`PoolWriter::sync`] writes them, in this order (OpenZFS `spa_sync`):
//!
//! 1. every dirty dataset objset, copy-on-write; its new root pointer and space accounting
//!    go into the dataset's MOS records; killed blocks are freed or, when a snapshot still
//!    references them, appended to the dataset's deadlist;
//! 2. the MOS, in *passes*: each pass writes what is dirty, then charges the MOS's own
//!    space to `$MOS` and rewrites this txg's tail of every touched metaslab's space map.
//!    Blocks born in this txg are rewritten in place when the new bytes fit (space map
//!    blocks are written uncompressed, so they always do), so no pass after the first few
//!    allocates anything and the loop converges (bounded by [`MAX_SYNC_PASSES`]);
//! 3. flush every vdev; when the configuration changed, write the even labels (L0, L2);
//!    flush; write the uberblock into every label of every leaf; flush; odd labels; flush
//!    (`vdev_config_sync`). A crash at any point leaves the previous uberblock (and every
//!    block it references: nothing live is overwritten) or the new one.
//!
//! Space freed in txg T is reusable only after T + 2 has synced (`TXG_DEFER_SIZE`), so
//! blocks an older uberblock still references survive the next two txgs.
//!
//! ## Failure: a txg is all or nothing
//!
//! A sync has two halves with different failure rules.
//!
//! * **Data half** (steps 1–2 and the flush that ends them): everything is written to free
//!   space, referenced by no uberblock. Before it starts, [`PoolWriter::sync`] saves the
//!   open txg ([`TxgCheckpoint`]: the MOS and every dataset's dirty state, shared not
//!   copied, the space-map bookkeeping, the configuration). If any step fails — a top-level
//!   vdev that can no longer take a write or a flush with the redundancy it has left, no
//!   space, a block that cannot be read — the checkpoint is put back, the allocator forgets
//!   the attempt's allocations and frees (`Allocator::rollback_txg`), and the cache forgets
//!   the attempt's blocks: memory is exactly as before the sync and the same txg can be
//!   retried. Nothing on disk changed that an uberblock references.
//! * **Uberblock half** (step 3): once the data is durable, the txg is committed in memory
//!   (the next txg builds on it) and its uberblock and labels are written. A leaf that
//!   fails is faulted; the half succeeds when every top-level vdev kept at least one good
//!   copy of each label and uberblock written (OpenZFS's rule, `vdev_label_sync_top_done`).
//!   If it fails, the txg is *committed but not durable*: it is never undone (some leaves may
//!   already hold its uberblock), and the next [`PoolWriter::sync`] writes the uberblock
//!   again before anything else (OpenZFS retries `vdev_config_sync` the same way, suspended
//!   until `zpool clear`). Nothing a later txg writes can overwrite what it references: its
//!   frees are deferred like any other.
//!
//! Sync tasks ([`SyncTask`], OpenZFS `dsl_sync_task`) run in syncing context between the
//! datasets and the MOS. A task that fails undoes the whole attempt, is dropped with its
//! error, and the txg is retried without it, so each task is applied entirely or not at all.

use crate::{PoolError, Result};
use codec::checksum::{self, ChecksumCtx, ChecksumKind};
use dmu::tx::{BlockSink, DirtyObjset, SyncCtx, WritePolicy};
use dmu::useracct::{self, Accounting, UsedDeltas};
use dmu::Reader;
use dsl::write::{self as dslw, SpaceDelta};
use ondisk::blkptr::{BlkPtr, Dva};
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::dnode::DnodePhys;
use ondisk::label::{self, PoolState};
use ondisk::nvlist::NvList;
use ondisk::spacemap::{SmEntry, SmType, SpaceMapPhys};
use ondisk::uberblock::UberblockPhys;
use ondisk::ByteOrder;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use vdev::{BlockDevice, Vdev, VdevKind};
use zap::write::{ZapCache, ZapVal};
use zio::{Allocate, WriteProps, Zio};

/// `SPA_VERSION_FEATURES`.
pub const SPA_VERSION: u64 = 5000;
/// First txg of a new pool (`TXG_INITIAL`).
pub const TXG_INITIAL: u64 = 4;
/// A sync that needs more MOS passes than this is a bug (OpenZFS warns past 100).
pub const MAX_SYNC_PASSES: u32 = 40;
/// Space map data blocks (written uncompressed, so rewrites in place always fit).
pub const SM_BLOCK_SIZE: u64 = 4096;
/// `SPACE_MAP_SIZE_V0`: the bonus without histograms (no `spacemap_histogram`).
const SM_BONUS_V0: usize = 24;

const FLETCHER4: u8 = 7;
const LZ4: u8 = 15;
const LZJB: u8 = 3;
const OFF: u8 = 2;

fn err(e: impl std::fmt::Display) -> PoolError {
    PoolError::Invalid(e.to_string())
}

/// Per-top-level-vdev facts the configuration records.
#[derive(Clone, Debug)]
pub struct TopInfo {
    pub ms_array: u64,
    pub ms_shift: u32,
    pub asize: u64,
    pub create_txg: u64,
    /// `vdev_deflate_ratio`.
    pub deflate_ratio: u64,
}

impl TopInfo {
    /// A hole (a removed top-level vdev): no metaslabs, no space.
    pub fn hole() -> TopInfo {
        TopInfo { ms_array: 0, ms_shift: 0, asize: 0, create_txg: 0, deflate_ratio: 512 }
    }
}

/// The allocator shared by the sync threads plus this txg's record of what it did (the
/// source of the space map entries written at the end of each pass).
pub struct AllocShared {
    inner: Mutex<AllocInner>,
}

struct AllocInner {
    ms: metaslab::Allocator,
    /// This txg's allocations and frees: (vdev, offset) → asize.
    allocs: BTreeMap<(u64, u64), u64>,
    frees: BTreeMap<(u64, u64), u64>,
}

impl AllocShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, AllocInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases a DVA of a block born in `birth` during txg `txg`.
    pub fn free_dva(&self, d: &Dva, birth: u64, txg: u64) -> Result<()> {
        if std::env::var_os("RZFS_DEBUG_FREE").is_some() {
            eprintln!("free {}:{:#x}:{:#x} birth {birth} txg {txg}", d.vdev(), d.offset(), d.asize());
        }
        let mut g = self.lock();
        g.ms.free(d.vdev(), d.offset(), d.asize(), birth, txg).map_err(err)?;
        if birth == txg {
            g.allocs.remove(&(d.vdev(), d.offset()));
        } else {
            g.frees.insert((d.vdev(), d.offset()), d.asize());
        }
        Ok(())
    }

    pub fn space(&self) -> metaslab::SpaceStats {
        self.lock().ms.space()
    }

    /// One DVA for an intent log block of `psize` bytes, on a log vdev if the pool has one
    /// (`zio_alloc_zil`), allocated in open txg `txg`.
    pub fn alloc_zil(&self, zio: &Zio, psize: u64, txg: u64) -> Result<Dva> {
        // Not on a vdev that lost its devices (a failed log device: OpenZFS then logs to
        // the pool's own vdevs).
        let asize_of = |v: u64| zio.vdev(v).filter(|t| t.can_write()).and_then(|_| zio.top_asize(v, psize));
        let mut g = self.lock();
        let (vdev, off, asize) = g.ms.alloc_zil(&asize_of, txg).map_err(|e| match e {
            metaslab::Error::NoSpace { .. } => PoolError::NoSpace(format!("intent log block: {e}")),
            e => err(e),
        })?;
        g.allocs.insert((vdev, off), asize);
        Ok(Dva::new(vdev, off, asize, false))
    }

    /// Allocates exactly the space of `d` in `txg` (an intent log block claimed at import,
    /// or given back by a failed sync while the log still needs it).
    pub fn claim_dva(&self, d: &Dva, txg: u64) -> Result<()> {
        let mut g = self.lock();
        g.ms.claim(d.vdev(), d.offset(), d.asize(), txg).map_err(err)?;
        g.allocs.insert((d.vdev(), d.offset()), d.asize());
        Ok(())
    }

    /// Frees an intent log block's DVA in syncing txg `txg` (see
    /// `metaslab::Allocator::free_zil`: one allocated in `txg` stays out of reach until
    /// `txg` has synced).
    pub fn free_zil_dva(&self, d: &Dva, birth: u64, txg: u64) -> Result<()> {
        let mut g = self.lock();
        let held = g.ms.free_zil(d.vdev(), d.offset(), d.asize(), birth, txg).map_err(err)?;
        if held {
            g.allocs.remove(&(d.vdev(), d.offset()));
        } else {
            g.frees.insert((d.vdev(), d.offset()), d.asize());
        }
        Ok(())
    }

    /// See `metaslab::Allocator::hold_frees` (used by the scan).
    pub fn hold_frees(&self, from: Option<u64>) {
        self.lock().ms.hold_frees(from);
    }

    /// Makes a newly added top-level vdev's metaslabs allocatable (`zpool add`).
    pub fn add_top(&self, vdev: u64, asize: u64, ashift: u8, ms_shift: u32) -> Result<()> {
        self.lock().ms.add_top(vdev, asize, ashift, ms_shift).map_err(err)
    }
    /// [`metaslab::Allocator::remove_top`]; refused while this txg has changes on it.
    pub fn remove_top(&self, vdev: u64) -> Result<()> {
        let mut g = self.lock();
        if g.allocs.keys().chain(g.frees.keys()).any(|&(v, _)| v == vdev) {
            return Err(err(format!("top vdev {vdev} has changes in this txg")));
        }
        g.ms.remove_top(vdev).map_err(err)
    }
    /// [`metaslab::Allocator::set_log`].
    pub fn set_log(&self, vdev: u64, log: bool) -> Result<()> {
        self.lock().ms.set_log(vdev, log).map_err(err)
    }
    /// [`metaslab::Allocator::grow_top`].
    pub fn grow_top(&self, vdev: u64, asize: u64) -> Result<u64> {
        self.lock().ms.grow_top(vdev, asize).map_err(err)
    }
}

impl Allocate for AllocShared {
    fn allocate(&self, zio: &Zio, psize: u64, copies: usize, txg: u64) -> zio::Result<Vec<Dva>> {
        // Each top-level vdev maps psize to asize its own way (RAID-Z parity and padding,
        // its ashift), so the size of a copy is known only once its vdev is chosen.
        let asize_of = |v: u64| zio.top_asize(v, psize);
        let mut g = self.lock();
        let got = g.ms.alloc_sized(&asize_of, txg, copies).map_err(|e| match e {
            metaslab::Error::NoSpace { .. } => zio::ZioError::NoSpace(e.to_string()),
            e => zio::ZioError::Io { bp: "allocation".into(), detail: e.to_string() },
        })?;
        let mut out = Vec::with_capacity(got.len());
        for (vdev, off, asize) in got {
            g.allocs.insert((vdev, off), asize);
            out.push(Dva::new(vdev, off, asize, false));
        }
        Ok(out)
    }
}

/// Block properties: metadata is fletcher4 + lz4 with extra copies; data follows the
/// dataset's properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub mos: bool,
    pub data_checksum: u8,
    pub data_compress: u8,
    pub zstd_level: u8,
    pub copies: u8,
    /// Compression of metadata: lz4 when the pool has `lz4_compress`, else lzjb
    /// (`zio_compress_select` of `ZIO_COMPRESS_ON`).
    pub meta_compress: u8,
    /// The pool has `embedded_data`: tiny compressed level-0 blocks of datasets live in
    /// their block pointers. (OpenZFS embeds MOS blocks too; rzfs keeps the MOS plain.)
    pub embed: bool,
    /// `redundant_metadata` (`ZFS_REDUNDANT_METADATA_*`: 0 all, 1 most, 2 some, 3 none):
    /// which metadata gets one copy more than `copies`.
    pub redundant_metadata: u8,
}

impl Policy {
    /// A dataset's policy on a pool with `lz4_compress` (what library users and tests
    /// create): data written with `data_checksum`/`data_compress` and `copies` copies.
    pub fn dataset(data_checksum: u8, data_compress: u8, copies: u8) -> Policy {
        Policy {
            mos: false,
            data_checksum,
            data_compress,
            zstd_level: 0,
            copies,
            meta_compress: LZ4,
            embed: true,
            redundant_metadata: 0,
        }
    }
}

/// The metadata compression of a pool with (`lz4`) or without the `lz4_compress` feature.
pub fn meta_compress(lz4: bool) -> u8 {
    if lz4 {
        LZ4
    } else {
        LZJB
    }
}

impl Policy {
    /// 1 if metadata of type `ot` at `level` (`u8::MAX`: the objset block) gets a copy more
    /// than the dataset's `copies` under its `redundant_metadata` (OpenZFS
    /// `dmu_write_policy`): all of it; with `most`, indirect blocks from level 2 up and
    /// metadata objects; with `some`, the critical ones (`DMU_OT_IS_CRITICAL`: metadata but
    /// level-0 dnode blocks, directories and SA objects); with `none`, nothing.
    fn meta_extra_copy(&self, ot: T, level: u8) -> u8 {
        let objset = level == u8::MAX;
        let md = objset || ot.is_metadata();
        let extra = match self.redundant_metadata {
            1 => objset || level >= 2 || md,
            2 => md && (objset || ot != T::Dnode || level > 0) && ot != T::DirectoryContents && ot != T::Sa,
            3 => false,
            _ => true,
        };
        u8::from(extra)
    }
}

impl WritePolicy for Policy {
    fn props(&self, dn: &DnodePhys, level: u8) -> WriteProps {
        let ot = T::from_u8(dn.object_type);
        let is_meta = level > 0 || ot.is_metadata();
        let extra = self.meta_extra_copy(ot, level);
        let object_type = if level == u8::MAX { T::Objset.to_u8() } else { dn.object_type };
        let level = if level == u8::MAX { 0 } else { level };
        let mut p = WriteProps {
            checksum: FLETCHER4,
            compress: self.meta_compress,
            zstd_level: 0,
            copies: if self.mos { 3 } else { (self.copies + extra).min(3) },
            object_type,
            level,
            embed: self.embed && !self.mos,
        };
        if self.mos && ot == T::SpaceMap && level == 0 {
            p.compress = OFF;
        }
        if !is_meta && !self.mos {
            p.checksum = self.data_checksum;
            p.compress = self.data_compress;
            p.zstd_level = self.zstd_level;
            p.copies = self.copies;
        }
        p
    }
}

/// The MOS's sink: every killed block is freed; births and frees are charged to `$MOS`.
struct MosSink<'a> {
    alloc: &'a AllocShared,
    txg: u64,
    delta: SpaceDelta,
    dsize: &'a dyn Fn(&BlkPtr) -> u64,
}

impl BlockSink for MosSink<'_> {
    fn born(&mut self, bp: &BlkPtr) {
        self.delta.add(SpaceDelta::of(bp, (self.dsize)(bp)));
    }
    fn kill(&mut self, bp: &BlkPtr) -> dmu::Result<()> {
        if bp.is_hole() || bp.is_embedded() {
            return Ok(());
        }
        self.delta.add(SpaceDelta::of(bp, (self.dsize)(bp)).negated());
        for d in bp.dvas() {
            self.alloc
                .free_dva(&d, bp.logical_birth(), self.txg)
                .map_err(|e| dmu::DmuError::Corrupt { what: "free", detail: e.to_string() })?;
        }
        Ok(())
    }
}

/// A head dataset's sink (`dsl_dataset_block_born/kill`).
pub struct DatasetSink<'a> {
    pub alloc: &'a AllocShared,
    pub txg: u64,
    pub prev_snap_txg: u64,
    pub born: SpaceDelta,
    pub freed: SpaceDelta,
    pub dead: Vec<(BlkPtr, u64)>,
    pub dsize: &'a dyn Fn(&BlkPtr) -> u64,
    /// Per-dataset features the born blocks need (see `dsfeatures`).
    pub features: Vec<&'static str>,
}

impl BlockSink for DatasetSink<'_> {
    fn born(&mut self, bp: &BlkPtr) {
        self.born.add(SpaceDelta::of(bp, (self.dsize)(bp)));
        crate::dsfeatures::features_of_bp(bp, &mut self.features);
    }
    fn activate(&mut self, name: &'static str) {
        if !self.features.contains(&name) {
            self.features.push(name);
        }
    }
    fn kill(&mut self, bp: &BlkPtr) -> dmu::Result<()> {
        if bp.is_hole() {
            return Ok(());
        }
        if bp.is_embedded() {
            // Nothing to free, but its payload and logical size leave the dataset, or go
            // to the deadlist (stored without the payload) as `dsl_dataset_block_kill` and
            // `bpobj_enqueue` do.
            if bp.logical_birth() > self.prev_snap_txg {
                self.freed.add(SpaceDelta::of(bp, 0));
            } else {
                let stored = BlkPtr { prop: bp.prop, birth: bp.birth, ..BlkPtr::default() };
                self.dead.push((stored, 0));
            }
            return Ok(());
        }
        let ds = (self.dsize)(bp);
        if bp.logical_birth() > self.prev_snap_txg {
            self.freed.add(SpaceDelta::of(bp, ds));
            for d in bp.dvas() {
                self.alloc
                    .free_dva(&d, bp.logical_birth(), self.txg)
                    .map_err(|e| dmu::DmuError::Corrupt { what: "free", detail: e.to_string() })?;
            }
        } else {
            self.dead.push((*bp, ds));
        }
        Ok(())
    }
}

/// A leaf device of the pool and its place in the configuration.
#[derive(Clone)]
pub struct LeafInfo {
    pub path: String,
    pub guid: u64,
    pub device: Arc<dyn BlockDevice>,
}

/// The open dataset objsets of a pool being written.
pub struct DatasetWriter {
    pub os: DirtyObjset,
    pub zaps: ZapCache,
    pub policy: Policy,
    /// The dataset's `recordsize` (block size of files that grow past one block).
    pub recordsize: u64,
    /// Whether reads record access times: [`ATIME_OFF`], [`ATIME_ON`] or [`ATIME_RELATIME`]
    /// (the `atime` and `relatime` properties).
    pub atime: u8,
    /// The `readonly` property: mounts refuse changes while it is on (set at any time).
    pub readonly: bool,
    /// The `xattr` property is not `off`: user extended attributes are served (with `off`,
    /// OpenZFS on Linux answers EOPNOTSUPP for the `user.` namespace).
    pub xattr: bool,
    /// Where a resumable receive (`zfs receive -s`) into this dataset stands: (object, offset,
    /// stream bytes) of the last WRITE record applied. Each sync of the dataset records it in
    /// the dataset's resume fields with the data of the same txg, so the point a resumed
    /// stream starts from is always covered by what is on disk.
    pub resume: Option<(u64, u64, u64)>,
    /// The dataset's intent log (`fsync` without a txg sync).
    pub zil: crate::zil::Zil,
}

/// `atime=off`: reads leave access times alone.
pub const ATIME_OFF: u8 = 0;
/// `atime=on relatime=off`: every read records its time.
pub const ATIME_ON: u8 = 1;
/// `atime=on relatime=on` (the default): a read records its time when the access time is
/// not after the last change, or is a day old.
pub const ATIME_RELATIME: u8 = 2;

/// Fields of a dataset with a resumable receive in progress (`DS_FIELD_RESUME_*`).
pub const RESUME_FROMGUID: &str = "com.delphix:resume_fromguid";
pub const RESUME_TOGUID: &str = "com.delphix:resume_toguid";
pub const RESUME_TONAME: &str = "com.delphix:resume_toname";
pub const RESUME_OBJECT: &str = "com.delphix:resume_object";
pub const RESUME_OFFSET: &str = "com.delphix:resume_offset";
pub const RESUME_BYTES: &str = "com.delphix:resume_bytes";
pub const RESUME_LARGEBLOCK: &str = "com.delphix:resume_largeblockok";
pub const RESUME_EMBEDOK: &str = "com.delphix:resume_embedok";
pub const RESUME_COMPRESSOK: &str = "com.delphix:resume_compressok";
pub const RESUME_RAWOK: &str = "com.delphix:resume_rawok";
/// All of them, for clearing.
pub const RESUME_FIELDS: [&str; 10] = [
    RESUME_FROMGUID,
    RESUME_TOGUID,
    RESUME_TONAME,
    RESUME_OBJECT,
    RESUME_OFFSET,
    RESUME_BYTES,
    RESUME_LARGEBLOCK,
    RESUME_EMBEDOK,
    RESUME_COMPRESSOK,
    RESUME_RAWOK,
];

/// A change made in syncing context (OpenZFS `dsl_sync_task`): it runs after the dirty
/// datasets are written and before the MOS, inside the txg's all-or-nothing scope.
pub struct SyncTask {
    /// Identifies the task's result in [`PoolWriter::take_task_results`].
    pub id: u64,
    /// The change; on error the txg is retried without it. It may run more than once (a
    /// failed attempt is undone before the retry), each time from the same state.
    pub run: Box<TaskFn>,
}

/// The change a [`SyncTask`] makes.
pub type TaskFn = dyn FnMut(&mut PoolWriter) -> Result<()> + Send;

/// OpenZFS's log space maps, folded into the metaslabs' own maps by the first txg rzfs
/// syncs (see `open_rw::read_log_spacemaps`); kept until a txg that did it commits.
#[derive(Clone, Debug, Default)]
pub struct LogFold {
    /// Per (vdev, metaslab): what only the logs hold, as (allocations, frees), offsets
    /// relative to the metaslab.
    pub runs: BTreeMap<(u64, u64), (Runs, Runs)>,
    /// The log space maps, as (txg, object).
    pub logs: Vec<(u64, u64)>,
    /// The MOS directory's `com.delphix:log_spacemap_zap`.
    pub zap: u64,
    /// Each top-level vdev's unflushed-txgs object, with its size in bytes.
    pub unflushed: Vec<(u64, u64)>,
    /// The unflushed txg of each metaslab, by top-level vdev.
    pub unflushed_txgs: BTreeMap<u64, Vec<u64>>,
}

/// Everything a sync changes in memory, saved before it starts (see "Failure" above).
struct TxgCheckpoint {
    mos: dmu::tx::OsCheckpoint,
    mos_zaps: ZapCache,
    datasets: BTreeMap<u64, (dmu::tx::OsCheckpoint, Policy)>,
    sm: BTreeMap<(u64, u64), (u64, u64, i64)>,
    config_dirty: bool,
    config_obj_dirty: bool,
    state: PoolState,
    tops: Vec<Arc<Vdev>>,
    top_info: Vec<TopInfo>,
    paths: BTreeMap<u64, String>,
    kept_config: BTreeMap<u64, Vec<(String, ondisk::nvlist::NvValue)>>,
    features_for_read: Vec<String>,
    mos_dir: u64,
    config_obj: u64,
    pending_snapshots: Vec<(u64, String)>,
    scan: crate::scan::ScanState,
    dtl_objs: BTreeMap<u64, u64>,
    dtl_written: BTreeMap<u64, vdev::dtl::Dtl>,
    /// Every leaf's in-memory DTL (a failed attempt's additions are undone with it).
    leaf_dtls: BTreeMap<u64, vdev::dtl::Dtl>,
    spares: Vec<crate::spares::Spare>,
    spares_obj: u64,
    spares_dirty: bool,
    caches: crate::l2cache::CacheList,
    unspare: std::collections::BTreeSet<u64>,
}

/// Why a sync attempt failed.
enum Failure {
    /// Task number `0` failed: the attempt is undone and retried without it.
    Task(usize, PoolError),
    /// The txg could not be written: the attempt is undone and the error returned.
    Sync(PoolError),
}

impl From<PoolError> for Failure {
    fn from(e: PoolError) -> Self {
        Failure::Sync(e)
    }
}

/// Clean ZAPs a dataset keeps cached across syncs.
const DATASET_ZAP_CACHE_KEEP: usize = 4096;

/// A pool open for writing.
pub struct PoolWriter {
    pub name: String,
    /// The name written into labels and the MOS config when it differs from `name`: the
    /// on-disk name of a pool imported under a temporary one (`zpool import -t`).
    pub label_name: Option<String>,
    pub guid: u64,
    pub hostname: String,
    /// This host's id, recorded in the labels so that another host sees the pool in use
    /// ([`host_id`]; 0 records none, as OpenZFS does without a hostid).
    pub hostid: u64,
    pub tops: Vec<Arc<Vdev>>,
    pub top_info: Vec<TopInfo>,
    pub reader: Reader,
    pub alloc: AllocShared,
    pub mos: DirtyObjset,
    pub mos_zaps: ZapCache,
    pub datasets: BTreeMap<u64, DatasetWriter>,
    /// The open txg.
    pub txg: u64,
    /// Uberblock of the last synced txg.
    pub uberblock: Option<UberblockPhys>,
    pub state: PoolState,
    pub config_dirty: bool,
    pub mos_dir: u64,
    pub config_obj: u64,
    /// features_for_read guids (for label configs).
    pub features_for_read: Vec<String>,
    /// Space map of each metaslab: (vdev, ms) → (object, committed length, committed alloc).
    pub sm: BTreeMap<(u64, u64), (u64, u64, i64)>,
    /// This txg's space map tails as last written: (vdev, ms) → (bytes, alloc delta).
    sm_tail: BTreeMap<(u64, u64), (Vec<u8>, i64)>,
    /// OpenZFS's log space maps still to fold into the metaslabs' maps.
    pub log_fold: Option<LogFold>,
    /// Leaf paths by guid (for the configuration).
    pub paths: BTreeMap<u64, String>,
    /// Configuration entries rzfs does not generate but must keep (per-vdev ZAPs that
    /// OpenZFS adds, DTL objects): vdev guid → entries; guid 0 is the config header, the
    /// pool guid the root vdev.
    pub kept_config: BTreeMap<u64, Vec<(String, ondisk::nvlist::NvValue)>>,
    /// The MOS root written by the last sync pass.
    pending_root: Option<BlkPtr>,
    /// Snapshots to take in the next sync, after the datasets are written (a sync task in
    /// OpenZFS: the snapshot holds the dataset exactly as of its txg).
    pub pending_snapshots: Vec<(u64, String)>,
    /// Intent logs claimed at import, waiting for their replay (see [`crate::zil`]).
    pub pending_logs: Vec<crate::zil::PendingLog>,
    /// The scan's persistent state (MOS `scan` entry and queue object).
    pub scan: crate::scan::ScanState,
    /// DTL space map object of each leaf that has one: guid → MOS object (`crate::dtl`).
    pub dtl_objs: BTreeMap<u64, u64>,
    /// The DTL each leaf's object holds in the MOS being built.
    pub dtl_written: BTreeMap<u64, vdev::dtl::Dtl>,
    /// Hot spares (`crate::spares`), their MOS object, and whether the list changed.
    pub spares: Vec<crate::spares::Spare>,
    pub spares_obj: u64,
    pub spares_dirty: bool,
    /// Cache devices (`crate::l2cache`).
    pub caches: crate::l2cache::CacheList,
    /// The second-level cache on them, installed in the read pipeline (`crate::l2arc`).
    pub l2arc: Option<Arc<crate::l2arc::L2Arc>>,
    /// Leaves under a spare vdev whose return releases the spare once they are whole
    /// (`vdev_unspare`, config `unspare`).
    pub unspare: std::collections::BTreeSet<u64>,
    pub now: fn() -> u64,
    /// Sync tasks queued for the next sync.
    tasks: Vec<SyncTask>,
    /// Results of tasks that ran (or failed) since the last [`PoolWriter::take_task_results`].
    task_results: Vec<(u64, Result<()>)>,
    /// Dataset writers removed by a destroy in the txg being synced (back on rollback).
    txg_removed: Vec<(u64, DatasetWriter)>,
    /// [`PoolWriter::unused_reservations`] as of the end of the txg before the open one:
    /// (open txg, bytes). The DSL's accounting changes only in syncing context.
    unused_rsrv: Option<(u64, u64)>,
    /// The MOS config object must be rewritten in the next sync even though the labels
    /// need not change (a txg with nothing else to write, see [`PoolWriter::sync_forced`]).
    config_obj_dirty: bool,
    /// MOS root of the last txg committed in memory (its uberblock may not be durable).
    committed_root: Option<BlkPtr>,
    /// Last txg whose uberblock is durable.
    durable_txg: u64,
}

pub fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl PoolWriter {
    /// Builds a writer around already-assembled parts (create and import fill it).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &str,
        guid: u64,
        tops: Vec<Arc<Vdev>>,
        top_info: Vec<TopInfo>,
        reader: Reader,
        ms: metaslab::Allocator,
        mos: DirtyObjset,
        mos_zaps: ZapCache,
        txg: u64,
    ) -> PoolWriter {
        PoolWriter {
            name: name.to_string(),
            label_name: None,
            guid,
            hostname: hostname(),
            hostid: host_id(),
            tops,
            top_info,
            reader,
            alloc: AllocShared {
                inner: Mutex::new(AllocInner { ms, allocs: BTreeMap::new(), frees: BTreeMap::new() }),
            },
            mos,
            mos_zaps,
            datasets: BTreeMap::new(),
            txg,
            uberblock: None,
            state: PoolState::Active,
            config_dirty: true,
            mos_dir: 0,
            config_obj: 0,
            features_for_read: Vec::new(),
            sm: BTreeMap::new(),
            sm_tail: BTreeMap::new(),
            log_fold: None,
            paths: BTreeMap::new(),
            kept_config: BTreeMap::new(),
            pending_root: None,
            pending_snapshots: Vec::new(),
            pending_logs: Vec::new(),
            scan: crate::scan::ScanState::default(),
            dtl_objs: BTreeMap::new(),
            dtl_written: BTreeMap::new(),
            spares: Vec::new(),
            spares_obj: 0,
            spares_dirty: false,
            caches: Default::default(),
            l2arc: None,
            unspare: Default::default(),
            now: now_secs,
            tasks: Vec::new(),
            task_results: Vec::new(),
            txg_removed: Vec::new(),
            unused_rsrv: None,
            config_obj_dirty: false,
            committed_root: None,
            durable_txg: txg.saturating_sub(1),
        }
    }

    /// Smallest sector of the pool.
    pub fn sector(&self) -> u64 {
        self.tops
            .iter()
            .filter(|t| *t.kind() != VdevKind::Hole)
            .map(|t| 1u64 << t.ashift())
            .min()
            .unwrap_or(512)
    }

    fn ratios(&self) -> Vec<u64> {
        self.top_info.iter().map(|t| t.deflate_ratio).collect()
    }

    /// Deflated size of a DVA (`vdev_deflated_space`).
    pub fn dva_dsize(&self, d: &Dva) -> u64 {
        dva_dsize(&self.ratios(), d)
    }

    /// Syncs the open txg and opens the next one. On success everything changed before the
    /// call is durable. On failure nothing is lost: either the attempt was undone and the
    /// open txg holds the same changes as before (retry by calling again), or the txg was
    /// committed in memory and only its uberblock is missing (the next call writes it
    /// first); see the module comment.
    pub fn sync(&mut self) -> Result<()> {
        if !self.is_durable() {
            self.uberblock_phase(self.txg - 1)?;
        }
        loop {
            if !self.is_dirty() {
                return Ok(());
            }
            let txg = self.txg;
            for d in self.datasets.values_mut() {
                d.zaps.flush(&mut d.os, DATASET_ZAP_CACHE_KEEP).map_err(err)?;
            }
            let ckpt = self.checkpoint();
            match self.sync_attempt(txg) {
                Ok(()) => break,
                Err(Failure::Task(i, e)) => {
                    self.rollback(ckpt, txg)?;
                    let t = self.tasks.remove(i);
                    self.task_results.push((t.id, Err(e)));
                }
                Err(Failure::Sync(e)) => {
                    self.rollback(ckpt, txg)?;
                    return Err(e);
                }
            }
        }
        let txg = self.txg;
        self.commit_txg(txg)?;
        self.uberblock_phase(txg)
    }

    /// Syncs a txg even when nothing is dirty (its MOS rewrites the config object): frees
    /// wait [`metaslab::TXG_DEFER_SIZE`] txgs before they can be allocated again, so a
    /// writer short of space moves txgs on to get them.
    pub fn sync_forced(&mut self) -> Result<()> {
        if !self.is_dirty() {
            self.config_obj_dirty = true;
        }
        self.sync()
    }

    /// Queues a sync task for the next sync.
    pub fn queue_task(&mut self, task: SyncTask) {
        self.tasks.push(task);
    }

    /// Results of the sync tasks that ran or failed since the last call.
    pub fn take_task_results(&mut self) -> Vec<(u64, Result<()>)> {
        std::mem::take(&mut self.task_results)
    }

    /// Drops queued task `id` if it has not run yet.
    pub fn cancel_task(&mut self, id: u64) {
        self.tasks.retain(|t| t.id != id);
    }

    /// Does the open txg free anything (space that a sync, then two more, would release)?
    pub fn has_pending_frees(&self) -> bool {
        self.datasets.values().any(|d| d.os.has_frees())
    }

    /// Drops queued tasks that have not run yet (an export that gives up on them).
    pub fn cancel_tasks(&mut self, why: &str) {
        for t in std::mem::take(&mut self.tasks) {
            self.task_results.push((t.id, Err(PoolError::Io(why.to_string()))));
        }
    }

    /// Is the last committed txg's uberblock on disk?
    pub fn is_durable(&self) -> bool {
        self.durable_txg + 1 >= self.txg
    }

    /// The last txg whose uberblock is durable.
    pub fn durable_txg(&self) -> u64 {
        self.durable_txg
    }

    /// One attempt at the data half of txg `txg` (see the module comment).
    fn sync_attempt(&mut self, txg: u64) -> std::result::Result<(), Failure> {
        self.sync_datasets(txg)?;
        for (ds, name) in self.pending_snapshots.clone() {
            self.zil_before_snapshot(ds)?;
            let now = (self.now)();
            let snap = dslw::snapshot(&mut self.mos, &mut self.mos_zaps, ds, &name, txg, now)
                .map_err(PoolError::from)?;
            self.scan.ds_snapshotted(ds, snap);
            self.snapshots_changed(ds)?;
            for f in self.ds_features(ds)? {
                self.ds_activate(snap, f)?;
            }
        }
        self.pending_snapshots.clear();
        let mut tasks = std::mem::take(&mut self.tasks);
        for (i, t) in tasks.iter_mut().enumerate() {
            if let Err(e) = (t.run)(self) {
                self.tasks = tasks;
                return Err(Failure::Task(i, e));
            }
        }
        self.tasks = tasks;
        // Datasets a task created (or dirtied) are written in the same txg.
        self.sync_datasets(txg)?;
        self.sync_scan()?;
        self.sync_dtls(txg)?;
        self.sync_spares()?;
        self.sync_caches()?;
        self.sync_mos(txg)?;
        // Everything of the txg must be durable before its uberblock is written.
        self.flush_tops()?;
        Ok(())
    }

    /// Saves the open txg before a sync attempt.
    fn checkpoint(&self) -> TxgCheckpoint {
        TxgCheckpoint {
            mos: self.mos.checkpoint(),
            mos_zaps: self.mos_zaps.clone(),
            datasets: self
                .datasets
                .iter()
                .map(|(&k, d)| (k, (d.os.checkpoint(), d.policy.clone())))
                .collect(),
            sm: self.sm.clone(),
            config_dirty: self.config_dirty,
            config_obj_dirty: self.config_obj_dirty,
            state: self.state,
            tops: self.tops.clone(),
            top_info: self.top_info.clone(),
            paths: self.paths.clone(),
            kept_config: self.kept_config.clone(),
            features_for_read: self.features_for_read.clone(),
            mos_dir: self.mos_dir,
            config_obj: self.config_obj,
            pending_snapshots: self.pending_snapshots.clone(),
            scan: self.scan.clone(),
            dtl_objs: self.dtl_objs.clone(),
            dtl_written: self.dtl_written.clone(),
            leaf_dtls: crate::dtl::all_leaves(&self.tops).iter().map(|l| (l.guid(), l.dtl())).collect(),
            spares: self.spares.clone(),
            spares_obj: self.spares_obj,
            spares_dirty: self.spares_dirty,
            caches: self.caches.clone(),
            unspare: self.unspare.clone(),
        }
    }

    /// Undoes a failed sync attempt of `txg`: memory as it was before, the attempt's space
    /// free again, its cached blocks forgotten.
    fn rollback(&mut self, c: TxgCheckpoint, txg: u64) -> Result<()> {
        self.mos.restore(c.mos);
        self.mos_zaps = c.mos_zaps;
        for (ds, w) in std::mem::take(&mut self.txg_removed) {
            self.datasets.insert(ds, w);
        }
        self.datasets.retain(|k, _| c.datasets.contains_key(k));
        for (k, (os, policy)) in c.datasets {
            if let Some(d) = self.datasets.get_mut(&k) {
                d.os.restore(os);
                d.policy = policy;
            }
        }
        self.sm = c.sm;
        self.sm_tail.clear();
        self.config_dirty = c.config_dirty;
        self.config_obj_dirty = c.config_obj_dirty;
        self.state = c.state;
        // The read pipeline follows the tree back (attach and detach swap top-level vdevs).
        for (i, t) in c.tops.iter().enumerate() {
            self.reader.zio.set_vdev(i, Some(t.clone() as Arc<dyn zio::VdevIo>));
        }
        self.tops = c.tops;
        self.top_info = c.top_info;
        self.paths = c.paths;
        self.kept_config = c.kept_config;
        self.features_for_read = c.features_for_read;
        self.mos_dir = c.mos_dir;
        self.config_obj = c.config_obj;
        self.pending_snapshots = c.pending_snapshots;
        self.scan = c.scan;
        self.dtl_objs = c.dtl_objs;
        self.dtl_written = c.dtl_written;
        self.spares = c.spares;
        self.spares_obj = c.spares_obj;
        self.spares_dirty = c.spares_dirty;
        self.caches = c.caches;
        self.unspare = c.unspare;
        // The retry writes the whole txg again, to every leaf that can take it: what the
        // failed attempt noted as missed does not stand (a leaf that cannot take writes now
        // is noted again by the retry).
        for l in crate::dtl::all_leaves(&self.tops) {
            l.take_missed();
            if let Some(d) = c.leaf_dtls.get(&l.guid()) {
                l.set_dtl(d.clone());
            }
        }
        self.pending_root = None;
        {
            let mut g = self.alloc.lock();
            g.ms.rollback_txg(txg).map_err(err)?;
            g.allocs.clear();
            g.frees.clear();
        }
        // The undo gave back the intent log blocks allocated in `txg`; the log still needs them.
        for d in self.datasets.values_mut() {
            d.zil.rolled_back(&self.alloc, txg)?;
        }
        // The retry reuses the txg number and may put other contents at the same DVAs.
        self.reader.cache.retain(|k| k.2 != txg);
        Ok(())
    }

    /// The data half of `txg` is durable: it becomes the committed state in memory.
    fn commit_txg(&mut self, txg: u64) -> Result<()> {
        self.commit_space_maps();
        // The logs are folded, freed and forgotten on disk.
        self.log_fold = None;
        {
            let mut g = self.alloc.lock();
            let _ = g.ms.take_changes(txg).map_err(err)?;
            g.ms.sync_done(txg).map_err(err)?;
            g.allocs.clear();
            g.frees.clear();
        }
        for d in self.datasets.values_mut() {
            d.zaps.flush_committed();
            d.zil.synced();
        }
        self.mos_zaps.flush_committed();
        self.txg_removed.clear();
        for t in std::mem::take(&mut self.tasks) {
            self.task_results.push((t.id, Ok(())));
        }
        self.config_obj_dirty = false;
        self.committed_root = self.pending_root.take();
        self.dtl_note_missed(txg);
        self.txg += 1;
        Ok(())
    }

    /// Removes dataset `ds`'s writer in the txg being synced (a destroy); a rollback puts it
    /// back.
    pub fn remove_dataset_writer(&mut self, ds: u64) -> Result<()> {
        if let Some(w) = self.datasets.remove(&ds) {
            let r = w.zil.abandon(&self.alloc, self.txg);
            self.txg_removed.push((ds, w));
            r?;
        }
        Ok(())
    }

    /// Ends every dataset's intent log chain at the next sync (a log vdev leaves the pool);
    /// returns whether there was any.
    pub fn zil_end_all(&mut self) -> bool {
        let mut any = false;
        for d in self.datasets.values_mut().filter(|d| d.zil.has_chain()) {
            d.zil.request_end();
            any = true;
        }
        any
    }

    /// Syncing context: a snapshot of head `ds` is about to be taken in this txg. A
    /// snapshot carries no intent log (`dsl_dataset_zero_zil`): the head's chain ends and
    /// its objset is written again without one, so the snapshot shares a clean header.
    pub fn zil_before_snapshot(&mut self, ds: u64) -> Result<()> {
        let Some(mut w) = self.datasets.remove(&ds) else { return Ok(()) };
        let r = if w.zil.has_chain() {
            w.zil.request_end();
            let txg = self.txg;
            self.sync_one_dataset(ds, &mut w, txg)
        } else {
            Ok(())
        };
        self.datasets.insert(ds, w);
        r
    }

    /// Dirty data held in memory for the open txg.
    pub fn dirty_bytes(&self) -> u64 {
        self.mos.dirty_bytes() + self.datasets.values().map(|d| d.os.dirty_bytes()).sum::<u64>()
    }

    /// Is anything waiting for a sync?
    pub fn is_dirty(&self) -> bool {
        self.config_dirty
            || self.config_obj_dirty
            || !self.pending_snapshots.is_empty()
            || !self.tasks.is_empty()
            || self.scan.dirty
            || self.dtl_pending()
            || self.spares_dirty
            || self.caches.dirty
            || self.mos.is_dirty()
            || self.mos_zaps.is_dirty()
            || self.datasets.values().any(|d| d.os.is_dirty() || d.zaps.is_dirty() || d.zil.sync_dirty(&d.os))
    }

    /// Is `hole_birth` active (it is from the moment it is enabled)? Without it holes stay
    /// all-zero pointers.
    fn hole_birth_active(&mut self) -> Result<bool> {
        Ok(self.feature_refcount("hole_birth")?.is_some_and(|c| c > 0))
    }

    fn sync_datasets(&mut self, txg: u64) -> Result<()> {
        let ids: Vec<u64> = self.datasets.keys().copied().collect();
        for ds in ids {
            let mut w = self.datasets.remove(&ds).ok_or_else(|| err("dataset vanished"))?;
            let r = self.sync_one_dataset(ds, &mut w, txg);
            self.datasets.insert(ds, w);
            r?;
        }
        Ok(())
    }

    fn sync_one_dataset(&mut self, ds: u64, w: &mut DatasetWriter, txg: u64) -> Result<()> {
        w.zaps.flush(&mut w.os, DATASET_ZAP_CACHE_KEEP).map_err(err)?;
        if w.zil.sync_dirty(&w.os) {
            w.zil.sync(&mut w.os, &self.alloc, txg)?;
        }
        if !w.os.is_dirty() && w.os.committed().is_some() {
            return Ok(());
        }
        let mut phys = dslw::ds_phys(&self.mos, ds)?;
        let sector = self.sector();
        let hole_birth = self.hole_birth_active()?;
        let ratios = self.ratios();
        let dsize = |bp: &BlkPtr| bp_dsize(&ratios, bp);
        let zio = self.reader.zio.clone();
        let accounting = Accounting {
            userobj: self.feature_refcount("userobj_accounting")?.is_some(),
            project: self.feature_refcount("project_quota")?.is_some(),
            apply: &apply_used_deltas,
        };
        let (bp, born, freed, dead, features) = {
            let mut sink = DatasetSink {
                alloc: &self.alloc,
                txg,
                prev_snap_txg: phys.prev_snap_txg,
                born: SpaceDelta::default(),
                freed: SpaceDelta::default(),
                dead: Vec::new(),
                dsize: &dsize,
                features: Vec::new(),
            };
            let dsz = |d: &Dva| dva_dsize(&ratios, d);
            let ctx = SyncCtx {
                zio: &zio,
                alloc: &self.alloc,
                txg,
                sector,
                policy: &w.policy,
                dsize: &dsz,
                hole_birth,
                accounting: Some(&accounting),
            };
            let bp = w.os.sync(&ctx, &mut sink)?;
            (bp, sink.born, sink.freed, sink.dead, sink.features)
        };
        phys.bp = bp.encode(ByteOrder::Little);
        dslw::set_ds_phys(&mut self.mos, ds, &phys)?;
        if let Some((obj, off, bytes)) = w.resume {
            for (k, v) in [(RESUME_OBJECT, obj), (RESUME_OFFSET, off), (RESUME_BYTES, bytes)] {
                self.mos_zaps.update(&self.mos, ds, k.as_bytes(), ZapVal::u64(v)).map_err(err)?;
            }
        }
        let origin_txg = dslw::dir_origin_txg(&self.mos, phys.dir_obj)?;
        let mut to_dl = SpaceDelta::default();
        let mut to_snap = 0;
        for (b, d) in &dead {
            to_dl.add(SpaceDelta::of(b, *d));
            if b.logical_birth() > origin_txg {
                to_snap += d;
            }
        }
        dslw::account_head(&mut self.mos, &mut self.mos_zaps, ds, born, freed, to_dl, to_snap)?;
        if !dead.is_empty() {
            dslw::deadlist_insert(&mut self.mos, &mut self.mos_zaps, ds, &dead)?;
        }
        self.ds_activate_for_blocks(ds, &features)?;
        Ok(())
    }

    fn sync_mos(&mut self, txg: u64) -> Result<()> {
        if self.config_dirty {
            self.ensure_vdev_zaps()?;
        }
        if self.config_dirty || self.config_obj_dirty {
            self.write_config_object(txg)?;
        }
        let sector = self.sector();
        let zio = self.reader.zio.clone();
        let hole_birth = self.hole_birth_active()?;
        let meta = meta_compress(self.feature_refcount("lz4_compress")?.is_some());
        let policy = Policy {
            mos: true,
            data_checksum: FLETCHER4,
            data_compress: meta,
            zstd_level: 0,
            copies: 3,
            meta_compress: meta,
            embed: false,
            redundant_metadata: 0,
        };
        self.fold_logs_mos()?;
        let mut pass = 0;
        loop {
            pass += 1;
            if pass > MAX_SYNC_PASSES {
                return Err(err(format!("txg {txg} did not converge after {MAX_SYNC_PASSES} sync passes")));
            }
            self.mos_zaps.flush(&mut self.mos, usize::MAX).map_err(err)?;
            if !self.mos.is_dirty() && pass > 1 {
                break;
            }
            if std::env::var_os("RZFS_DEBUG_SYNC").is_some() {
                let g = self.alloc.lock();
                eprintln!(
                    "txg {txg} pass {pass}: dirty {:?} allocs {} frees {}",
                    self.mos.dirty_objects(),
                    g.allocs.len(),
                    g.frees.len()
                );
            }
            let ratios = self.ratios();
            let delta = {
                let dsize = |bp: &BlkPtr| bp_dsize(&ratios, bp);
                let mut sink =
                    MosSink { alloc: &self.alloc, txg, delta: SpaceDelta::default(), dsize: &dsize };
                let dsz = |d: &Dva| dva_dsize(&ratios, d);
                let ctx = SyncCtx {
                    zio: &zio,
                    alloc: &self.alloc,
                    txg,
                    sector,
                    policy: &policy,
                    dsize: &dsz,
                    hole_birth,
                    accounting: None,
                };
                let bp = self.mos.sync(&ctx, &mut sink)?;
                self.pending_root = Some(bp);
                sink.delta
            };
            if !delta.is_zero() && self.mos_dir != 0 {
                dslw::dir_diduse(&mut self.mos, self.mos_dir, ondisk::dsl::DD_USED_HEAD, delta)?;
            }
            self.write_space_maps(txg, pass)?;
        }
        Ok(())
    }
}

impl PoolWriter {
    /// The space reserved and not used anywhere in the pool
    /// ([`dsl::quota::unused_reservations`]) as the DSL stands now: in syncing context,
    /// after the changes made so far in the txg.
    pub fn unused_reservations_now(&mut self) -> Result<u64> {
        let root = self
            .mos_zaps
            .lookup_u64(&self.mos, 1, "root_dataset")
            .map_err(|e| PoolError::Invalid(e.to_string()))?
            .ok_or_else(|| PoolError::Invalid("the MOS directory has no root_dataset".into()))?;
        let (mos, zaps) = (&self.mos, &mut self.mos_zaps);
        let v = dsl::quota::unused_reservations(root, &mut |d| dslw::dir_phys(mos, d), &mut |p| {
            if p.child_dir_zapobj == 0 {
                return Ok(Vec::new());
            }
            let kids = zaps
                .entries(mos, p.child_dir_zapobj)
                .map_err(|e| dsl::DslError::Corrupt { what: "child directory ZAP", detail: e.to_string() })?;
            Ok(kids.iter().filter_map(|(_, v)| v.values.first().copied()).collect())
        })?;
        Ok(v)
    }

    /// [`PoolWriter::unused_reservations_now`] for open context, computed once per txg
    /// (the DSL's accounting changes only when a txg syncs). Not for syncing context.
    pub fn unused_reservations(&mut self) -> Result<u64> {
        if let Some((txg, v)) = self.unused_rsrv {
            if txg == self.txg {
                return Ok(v);
            }
        }
        let v = self.unused_reservations_now()?;
        self.unused_rsrv = Some((self.txg, v));
        Ok(v)
    }
}

impl PoolWriter {
    /// Rewrites this txg's tail of each touched metaslab's space map (see the module
    /// comment); dirties the MOS only when a tail changed since the previous pass.
    fn write_space_maps(&mut self, txg: u64, pass: u32) -> Result<()> {
        let (allocs, frees) = {
            let g = self.alloc.lock();
            (g.allocs.clone(), g.frees.clone())
        };
        let mut per_ms: BTreeMap<(u64, u64), (Runs, Runs)> = BTreeMap::new();
        for key in self.sm_tail.keys() {
            per_ms.entry(*key).or_default();
        }
        let fold = self.log_fold.as_ref().map(|f| f.runs.clone()).unwrap_or_default();
        for key in fold.keys() {
            per_ms.entry(*key).or_default();
        }
        for (is_free, map) in [(false, &allocs), (true, &frees)] {
            for (&(v, off), &len) in map {
                let shift =
                    self.top_info.get(v as usize).map(|t| t.ms_shift).ok_or_else(|| err("bad vdev"))?;
                let e = per_ms.entry((v, off >> shift)).or_default();
                let list = if is_free { &mut e.1 } else { &mut e.0 };
                list.push((off - ((off >> shift) << shift), len));
            }
        }
        for ((v, ms), (a, f)) in per_ms {
            let ashift = self.tops.get(v as usize).map(|t| t.ashift()).ok_or_else(|| err("bad vdev"))?;
            // The debug entries name sync pass 1: a tail that did not change must encode the same.
            let _ = pass;
            // What the logs held goes first: this txg's changes may undo it (a block the
            // logs freed allocated again now).
            let mut entries = Vec::new();
            let mut delta = 0i64;
            let net = |a: &Runs, f: &Runs| {
                a.iter().map(|x| x.1 as i64).sum::<i64>() - f.iter().map(|x| x.1 as i64).sum::<i64>()
            };
            if let Some((fa, ff)) = fold.get(&(v, ms)) {
                entries = sm_entries(fa, ff, ashift, txg, 1)?;
                delta = net(fa, ff);
            }
            entries.extend(sm_entries(&a, &f, ashift, txg, 1)?);
            delta += net(&a, &f);
            let bytes =
                ondisk::spacemap::encode_entries(&entries, ByteOrder::Little, SM_BLOCK_SIZE as usize)?;
            if self.sm_tail.get(&(v, ms)).is_some_and(|t| t.0 == bytes && t.1 == delta) {
                continue;
            }
            if bytes.is_empty() && !self.sm_tail.contains_key(&(v, ms)) {
                continue;
            }
            let (obj, len, alloc) = match self.sm.get(&(v, ms)) {
                Some(x) => *x,
                None => {
                    let obj = self.create_space_map(v, ms)?;
                    self.sm.insert((v, ms), (obj, 0, 0));
                    (obj, 0, 0)
                }
            };
            if !bytes.is_empty() {
                self.mos.write(obj, len, &bytes)?;
            }
            // A map with a histogram in its header (made while `spacemap_histogram` was
            // enabled, by rzfs or OpenZFS) keeps it up to date, rebuilt from the metaslab's
            // free segments as OpenZFS rebuilds it for a loaded metaslab (it only weighs
            // metaslabs for allocation; zdb checks the count of such maps, not the contents).
            let histogram = if self.sm_has_histogram(obj)? {
                Some(self.alloc.lock().ms.free_histogram(v, ms, ashift).map_err(|e| err(e.to_string()))?)
            } else {
                None
            };
            let phys = SpaceMapPhys {
                object: obj,
                length: len + bytes.len() as u64,
                alloc: alloc + delta,
                histogram,
            };
            self.mos.set_bonus(obj, phys.encode(ByteOrder::Little))?;
            self.sm_tail.insert((v, ms), (bytes, delta));
        }
        Ok(())
    }

    /// The MOS half of folding OpenZFS's log space maps (see [`LogFold`]): the logs freed,
    /// their ZAP emptied, every metaslab's unflushed txg set to 0. Runs before the sync
    /// passes of each attempt at the txg (a failed attempt's MOS changes are undone).
    fn fold_logs_mos(&mut self) -> Result<()> {
        let Some(f) = self.log_fold.clone() else { return Ok(()) };
        for &(txg, obj) in &f.logs {
            if self.mos.dnode(obj)?.is_some() {
                self.free_space_map(obj)?;
            }
            self.mos_zaps.remove(&self.mos, f.zap, format!("{txg:x}").as_bytes()).map_err(err)?;
        }
        for &(obj, size) in &f.unflushed {
            let size = usize::try_from(size).map_err(|_| err("unflushed txgs object too large"))?;
            self.mos.write(obj, 0, &vec![0u8; size])?;
        }
        Ok(())
    }

    /// Does space map object `obj` carry the histogram (its bonus is `space_map_phys_t`
    /// whole, `SPACE_MAP_SIZE_V1`, rather than the first three words)?
    pub(crate) fn sm_has_histogram(&self, obj: u64) -> Result<bool> {
        let dn = self.mos.dnode(obj)?.ok_or_else(|| err(format!("space map object {obj} is free")))?;
        Ok(usize::from(dn.bonuslen) >= ondisk::spacemap::SPACE_MAP_PHYS_SIZE)
    }

    /// Frees space map object `obj`; one with a histogram leaves the `spacemap_histogram`
    /// refcount (`space_map_free`).
    pub(crate) fn free_space_map(&mut self, obj: u64) -> Result<()> {
        if self.sm_has_histogram(obj)? {
            self.feature_adjust("spacemap_histogram", -1)?;
        }
        Ok(self.mos.free_object(obj)?)
    }

    /// Allocates a space map object of block size `blksz` (`space_map_alloc`): with
    /// `spacemap_histogram` enabled its header has room for the histogram and the feature
    /// counts it, as OpenZFS does; without, the header is the first three words.
    pub(crate) fn alloc_space_map(&mut self, blksz: u64) -> Result<u64> {
        let hist = self.feature_refcount("spacemap_histogram")?.is_some();
        let bonus = vec![0u8; if hist { ondisk::spacemap::SPACE_MAP_PHYS_SIZE } else { SM_BONUS_V0 }];
        let obj = self.mos.alloc_object(T::SpaceMap.to_u8(), blksz, T::SpaceMapHeader.to_u8(), bonus)?;
        if hist {
            self.feature_adjust("spacemap_histogram", 1)?;
        }
        Ok(obj)
    }

    fn create_space_map(&mut self, v: u64, ms: u64) -> Result<u64> {
        let obj = self.alloc_space_map(SM_BLOCK_SIZE)?;
        let arr = self.top_info.get(v as usize).map(|t| t.ms_array).ok_or_else(|| err("bad vdev"))?;
        self.mos.write(arr, ms * 8, &obj.to_le_bytes())?;
        Ok(obj)
    }

    /// Frees the metaslab array of top-level vdev `v` and every space map in it (the vdev is
    /// leaving the pool: `vdev_remove_empty`). Its metaslabs must hold nothing.
    pub(crate) fn forget_top_space(&mut self, v: u64) -> Result<()> {
        let keys: Vec<(u64, u64)> = self.sm.keys().filter(|k| k.0 == v).copied().collect();
        for k in keys {
            if let Some((obj, _, _)) = self.sm.remove(&k) {
                self.free_space_map(obj)?;
            }
            self.sm_tail.remove(&k);
        }
        let arr = self.top_info.get(v as usize).map(|t| t.ms_array).ok_or_else(|| err("bad vdev"))?;
        if arr != 0 {
            self.mos.free_object(arr)?;
        }
        Ok(())
    }

    /// The space map tails of this txg become committed.
    fn commit_space_maps(&mut self) {
        for ((v, ms), (bytes, delta)) in std::mem::take(&mut self.sm_tail) {
            if let Some(e) = self.sm.get_mut(&(v, ms)) {
                e.1 += bytes.len() as u64;
                e.2 += delta;
            }
        }
    }

    /// The full pool configuration (MOS `config` object; labels hold a per-top subset).
    pub fn config_nvlist(&self, txg: u64) -> NvList {
        let mut nv = self.config_header(txg);
        nv.add_u64("vdev_children", self.tops.len() as u64);
        let mut root = NvList::new();
        root.add_str("type", "root");
        root.add_u64("id", 0);
        root.add_u64("guid", self.guid);
        root.add_u64("create_txg", TXG_INITIAL);
        self.add_kept(&mut root, self.guid);
        root.add_nvlist_array("children", (0..self.tops.len()).map(|i| self.top_nvlist(i)).collect());
        nv.add_nvlist("vdev_tree", root);
        nv.add_nvlist("features_for_read", self.features_nv());
        nv
    }

    fn features_nv(&self) -> NvList {
        let mut f = NvList::new();
        for g in &self.features_for_read {
            f.add_boolean(g);
        }
        f
    }

    fn config_header(&self, txg: u64) -> NvList {
        let mut nv = NvList::new();
        nv.add_u64("version", SPA_VERSION);
        nv.add_str("name", self.label_name.as_deref().unwrap_or(&self.name));
        nv.add_u64("state", self.state as u64);
        nv.add_u64("txg", txg);
        nv.add_u64("pool_guid", self.guid);
        nv.add_u64("errata", 0);
        nv.add_str("hostname", &self.hostname);
        if self.hostid != 0 {
            nv.add_u64("hostid", self.hostid);
        }
        self.add_kept(&mut nv, 0);
        // vdev_top_config_generate: the ids of removed top-level vdevs.
        let holes: Vec<u64> = self
            .tops
            .iter()
            .enumerate()
            .filter(|(_, t)| *t.kind() == VdevKind::Hole)
            .map(|(i, _)| i as u64)
            .collect();
        if !holes.is_empty() {
            nv.add_u64_array("hole_array", holes);
        }
        nv
    }

    fn add_kept(&self, nv: &mut NvList, guid: u64) {
        for (k, v) in self.kept_config.get(&guid).into_iter().flatten() {
            if !nv.contains(k) {
                nv.add(k, v.clone());
            }
        }
    }

    fn top_nvlist(&self, i: usize) -> NvList {
        let top = &self.tops[i];
        let info = &self.top_info[i];
        if *top.kind() == VdevKind::Hole {
            // What vdev_config_generate gives a hole (a leaf of the hole type whose
            // guid, geometry and create txg are all zero).
            let mut nv = NvList::new();
            nv.add_str("type", "hole");
            nv.add_u64("id", i as u64);
            nv.add_u64("guid", 0);
            nv.add_u64("metaslab_array", 0);
            nv.add_u64("metaslab_shift", 0);
            nv.add_u64("ashift", 0);
            nv.add_u64("asize", 0);
            nv.add_u64("is_log", 0);
            nv.add_u64("is_hole", 1);
            return nv;
        }
        let mut nv = self.vdev_nvlist(top, i as u64);
        nv.add_u64("metaslab_array", info.ms_array);
        nv.add_u64("metaslab_shift", u64::from(info.ms_shift));
        nv.add_u64("ashift", u64::from(top.ashift()));
        nv.add_u64("asize", info.asize);
        nv.add_u64("is_log", u64::from(top.is_log()));
        nv.add_u64("create_txg", info.create_txg);
        self.add_children(&mut nv, top, info.create_txg);
        nv
    }

    /// The `children` array of an interior vdev, recursively (a replacing or spare vdev
    /// below a mirror or RAID-Z has children of its own).
    fn add_children(&self, nv: &mut NvList, v: &Vdev, create_txg: u64) {
        if v.children().is_empty() {
            return;
        }
        let kids = v.children().iter().enumerate().map(|(j, c)| {
            let mut k = self.vdev_nvlist(c, j as u64);
            k.add_u64("create_txg", create_txg);
            self.add_children(&mut k, c, create_txg);
            k
        });
        nv.add_nvlist_array("children", kids.collect());
    }

    fn vdev_nvlist(&self, v: &Vdev, id: u64) -> NvList {
        let mut nv = NvList::new();
        let kind = match v.kind() {
            VdevKind::Root | VdevKind::Hole | VdevKind::Draid { .. } => "missing",
            k => k.type_name(),
        };
        nv.add_str("type", kind);
        nv.add_u64("id", id);
        nv.add_u64("guid", v.guid());
        if let VdevKind::Raidz { nparity } = v.kind() {
            nv.add_u64("nparity", u64::from(*nparity));
        }
        if let Some(p) = self.paths.get(&v.guid()) {
            nv.add_str("path", p);
            if *v.kind() == VdevKind::Disk {
                nv.add_u64("whole_disk", 0);
            }
        }
        if let Some(obj) = self.dtl_objs.get(&v.guid()) {
            nv.add_u64("DTL", *obj);
        }
        if v.offline() == vdev::Offline::Persistent {
            nv.add_u64("offline", 1);
        }
        if v.kind().is_leaf() && self.spares.iter().any(|s| s.guid == v.guid()) {
            nv.add_u64("is_spare", 1);
        }
        if self.unspare.contains(&v.guid()) {
            nv.add_u64("unspare", 1);
        }
        self.add_kept(&mut nv, v.guid());
        nv
    }

    pub(crate) fn label_nvlist(&self, top: usize, leaf_guid: u64, txg: u64) -> NvList {
        let mut nv = self.config_header(txg);
        nv.add_u64("top_guid", self.tops[top].guid());
        nv.add_u64("guid", leaf_guid);
        nv.add_u64("vdev_children", self.tops.len() as u64);
        nv.add_nvlist("vdev_tree", self.top_nvlist(top));
        nv.add_nvlist("features_for_read", self.features_nv());
        crate::vdevzaps::strip_mos_only(&mut nv);
        nv
    }

    fn write_config_object(&mut self, txg: u64) -> Result<()> {
        if self.config_obj == 0 {
            return Ok(());
        }
        let packed = self.config_nvlist(txg).encode();
        let len = packed.len() as u64;
        self.mos.free_range(self.config_obj, 0, u64::MAX)?;
        self.mos.write(self.config_obj, 0, &packed)?;
        self.mos.set_bonus(self.config_obj, len.to_le_bytes().to_vec())?;
        Ok(())
    }

    /// Sum of every vdev guid, the root's (= pool guid) included (`ub_guid_sum`).
    pub fn guid_sum(&self) -> u64 {
        let mut sum = self.guid;
        for t in &self.tops {
            let mut stack = vec![t.as_ref()];
            while let Some(v) = stack.pop() {
                sum = sum.wrapping_add(v.guid());
                stack.extend(v.children().iter());
            }
        }
        sum
    }

    /// Writes labels `which` (0..4) of every healthy leaf; each top-level vdev must keep at
    /// least one good copy (a failing leaf is faulted).
    fn write_labels(&self, txg: u64, which: &[u32]) -> Result<()> {
        let ctx = ChecksumCtx::default();
        // A hole (a removed vdev) has no device to write.
        for (i, top) in self.tops.iter().enumerate().filter(|(_, t)| *t.kind() != VdevKind::Hole) {
            let mut bufs: BTreeMap<u64, Vec<(Vec<u8>, u64)>> = BTreeMap::new();
            for leaf in top.leaves() {
                let Some(dev) = leaf.device() else { continue };
                let area = label::encode_vdev_phys(&self.label_nvlist(i, leaf.guid(), txg))?;
                let mut v = Vec::new();
                for &l in which {
                    let off = label::vdev_phys_device_offset(dev.size(), l)?;
                    let mut buf = area.clone();
                    checksum::seal_embedded(
                        ChecksumKind::Sha256,
                        &mut buf,
                        checksum::label_verifier(off),
                        &ctx,
                    )
                    .map_err(|e| err(format!("sealing label: {e:?}")))?;
                    v.push((buf, off));
                }
                bufs.insert(leaf.guid(), v);
            }
            let good = top.write_leaves_raw(&|leaf, _| bufs.get(&leaf.guid()).cloned().unwrap_or_default());
            // A log vdev holds none of the pool's blocks: losing it costs the pool nothing
            // (OpenZFS counts good label writes over all vdevs).
            if good == 0 && !top.is_log() {
                return Err(PoolError::Io(format!(
                    "no device of top-level vdev {i} ({}) took the labels of txg {txg}",
                    top.name()
                )));
            }
        }
        Ok(())
    }

    /// Flushes every top-level vdev; fails when one of them can no longer guarantee what was
    /// written to it (more failed leaves than its redundancy covers).
    fn flush_tops(&self) -> Result<()> {
        for top in self.tops.iter().filter(|t| *t.kind() != VdevKind::Hole) {
            match top.flush_top() {
                // Only labels and uberblocks were written to a log vdev.
                Err(_) if top.is_log() => {}
                r => r.map_err(|e| PoolError::Io(format!("flushing {}: {e}", top.name())))?,
            }
        }
        Ok(())
    }

    /// The uberblock half of a sync (see the module comment): labels when the configuration
    /// changed, the uberblock of `txg` in every label of every healthy leaf, with flushes in
    /// between (`vdev_config_sync`). Retried until it succeeds, never undone.
    fn uberblock_phase(&mut self, txg: u64) -> Result<()> {
        let root = self.committed_root.ok_or_else(|| err("txg sync wrote no MOS"))?;
        if self.config_dirty {
            self.write_labels(txg, &[0, 2])?;
            self.flush_tops()?;
        }
        let ub = UberblockPhys {
            byte_order: ByteOrder::Little,
            version: SPA_VERSION,
            txg,
            guid_sum: self.guid_sum(),
            timestamp: (self.now)(),
            rootbp_raw: root.encode(ByteOrder::Little),
            software_version: SPA_VERSION,
            mmp_magic: 0,
            mmp_delay: 0,
            mmp_config: 0,
            checkpoint_txg: 0,
            raidz_reflow_info: 0,
        };
        let ctx = ChecksumCtx::default();
        for (i, top) in self.tops.iter().enumerate().filter(|(_, t)| *t.kind() != VdevKind::Hole) {
            let ashift = u32::from(top.ashift());
            let mut bufs: BTreeMap<u64, Vec<(Vec<u8>, u64)>> = BTreeMap::new();
            for leaf in top.leaves() {
                let Some(dev) = leaf.device() else { continue };
                let mut v = Vec::new();
                for l in 0..label::VDEV_LABELS {
                    let off = label::uberblock_device_offset(dev.size(), l, ashift, txg)?;
                    let mut buf = ub.encode(label::uberblock_slot_size(ashift));
                    checksum::seal_embedded(
                        ChecksumKind::Sha256,
                        &mut buf,
                        checksum::label_verifier(off),
                        &ctx,
                    )
                    .map_err(|e| err(format!("sealing uberblock: {e:?}")))?;
                    v.push((buf, off));
                }
                bufs.insert(leaf.guid(), v);
            }
            let good = top.write_leaves_raw(&|leaf, _| bufs.get(&leaf.guid()).cloned().unwrap_or_default());
            if good == 0 && !top.is_log() {
                return Err(PoolError::Io(format!(
                    "no device of top-level vdev {i} ({}) took the uberblock of txg {txg}",
                    top.name()
                )));
            }
        }
        self.flush_tops()?;
        if self.config_dirty {
            self.write_labels(txg, &[1, 3])?;
            self.flush_tops()?;
            self.config_dirty = false;
        }
        self.uberblock = Some(ub);
        self.durable_txg = txg;
        Ok(())
    }
}

/// (offset within the metaslab, length) pairs.
type Runs = Vec<(u64, u64)>;

/// This txg's space map entries of one metaslab: a debug entry then the allocations, a debug
/// entry then the frees (`space_map_write`), in units of sectors, runs split at `SM_RUN_MAX`.
fn sm_entries(
    allocs: &[(u64, u64)],
    frees: &[(u64, u64)],
    ashift: u8,
    txg: u64,
    pass: u32,
) -> Result<Vec<SmEntry>> {
    let mut out = Vec::new();
    for (kind, action, list) in [(SmType::Alloc, 0u8, allocs), (SmType::Free, 1u8, frees)] {
        if list.is_empty() {
            continue;
        }
        out.push(SmEntry::Debug { action, sync_pass: pass.min(1023) as u16, txg });
        let mut runs: Vec<(u64, u64)> = list.to_vec();
        runs.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (o, l) in runs {
            match merged.last_mut() {
                Some(m) if m.0 + m.1 == o => m.1 += l,
                _ => merged.push((o, l)),
            }
        }
        for (o, l) in merged {
            let mut start = o >> ashift;
            let mut left = l >> ashift;
            while left > 0 {
                let run = left.min(ondisk::spacemap::SM_RUN_MAX);
                out.push(SmEntry::range(kind, start, run, None)?);
                start += run;
                left -= run;
            }
        }
    }
    Ok(out)
}

/// Deflated size of a DVA given the per-top deflate ratios.
pub fn dva_dsize(ratios: &[u64], d: &Dva) -> u64 {
    let ratio = ratios.get(d.vdev() as usize).copied().unwrap_or(512);
    (d.asize() >> 9) * ratio
}

/// Deflated size of a block (every DVA).
pub fn bp_dsize(ratios: &[u64], bp: &BlkPtr) -> u64 {
    if bp.is_hole() || bp.is_embedded() {
        return 0;
    }
    bp.dvas().iter().map(|d| dva_dsize(ratios, d)).sum()
}

/// This host's id (`gethostid`, as OpenZFS's `spl_hostid` falls back to): `RZFS_HOSTID`
/// (hexadecimal, for tests that play a second host), else the 4 bytes of `/etc/hostid`
/// (native byte order), else 0: no id, and no foreign-host check (OpenZFS likewise records
/// none then).
pub fn host_id() -> u64 {
    if let Ok(v) = std::env::var("RZFS_HOSTID") {
        return u64::from_str_radix(v.trim().trim_start_matches("0x"), 16).unwrap_or(0);
    }
    match std::fs::read("/etc/hostid") {
        Ok(b) if b.len() >= 4 => u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
        _ => 0,
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Adds one sync's user/group/project accounting deltas to the objset's accounting ZAPs
/// (`zap_increment` of objects -1, -2, -3): missing ZAPs are created, entries reaching 0
/// removed. A fresh ZAP cache each time, so a sync that fails and is retried starts again
/// from the committed counts.
fn apply_used_deltas(os: &mut DirtyObjset, deltas: &UsedDeltas) -> dmu::Result<()> {
    let zerr = |e: zap::ZapError| match e {
        zap::ZapError::Dmu(e) => e,
        e => dmu::DmuError::Corrupt { what: "accounting ZAP", detail: e.to_string() },
    };
    let mut zaps = ZapCache::new();
    for (&obj, changes) in &deltas.by_object {
        if changes.values().all(|d| *d == 0) {
            continue;
        }
        if os.dnode(obj)?.is_none() {
            zaps.create_accounting(os, obj).map_err(zerr)?;
        }
        for (key, &delta) in changes {
            if delta == 0 {
                continue;
            }
            let now = zaps.lookup_u64(os, obj, key).map_err(zerr)?.unwrap_or(0);
            match useracct::incremented(now, delta) {
                0 => {
                    zaps.remove(os, obj, key.as_bytes()).map_err(zerr)?;
                }
                v => zaps.update_u64(os, obj, key, v).map_err(zerr)?,
            }
        }
    }
    zaps.flush(os, 0).map_err(zerr)
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    /// Copies of a block of type `ot` at `level` (`u8::MAX`: objset) under `redundant_metadata`
    /// value `rm`, for a dataset with `copies=1`.
    fn copies(rm: u8, ot: T, level: u8) -> u8 {
        let p = Policy { redundant_metadata: rm, ..Policy::dataset(7, 15, 1) };
        let dn = DnodePhys { object_type: ot.to_u8(), ..Default::default() };
        p.props(&dn, level).copies
    }

    #[test]
    fn redundant_metadata_picks_the_blocks_that_get_an_extra_copy() {
        use T::{DirectoryContents as Dir, Dnode, MasterNode, PlainFileContents as File};
        // all: every metadata block; data never.
        assert_eq!(
            [copies(0, File, 0), copies(0, File, 1), copies(0, Dir, 0), copies(0, Dnode, 0)],
            [1, 2, 2, 2]
        );
        // most: indirect blocks from level 2, and metadata objects at any level.
        assert_eq!(
            [copies(1, File, 1), copies(1, File, 2), copies(1, Dir, 0), copies(1, Dnode, 0)],
            [1, 2, 2, 2]
        );
        // some: critical metadata only (not level-0 dnode blocks, directories or SA).
        assert_eq!(
            [copies(2, File, 1), copies(2, Dir, 0), copies(2, Dnode, 0), copies(2, Dnode, 1)],
            [1, 1, 1, 2]
        );
        assert_eq!([copies(2, MasterNode, 0), copies(2, File, u8::MAX)], [2, 2]);
        // none: one copy of everything.
        assert_eq!([copies(3, Dnode, 1), copies(3, File, u8::MAX)], [1, 1]);
    }
}
