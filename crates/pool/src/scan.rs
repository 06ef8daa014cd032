//! # Scrub and resilver: the pool scan
//!
//! Theory. A scan visits every block the pool references once and reads *every copy* of it
//! (all mirror sides, all RAID-Z columns including parity, every DVA of a multi-copy block),
//! rewriting the copies that are missing, fail I/O or hold wrong bytes. It is OpenZFS's
//! `dsl_scan` in outcome and in its persistent state, so a scan paused or interrupted here
//! resumes in OpenZFS and the reverse:
//!
//! * **State in the MOS.** The `scan` entry of the MOS directory holds `dsl_scan_phys_t`
//!   (24 words: function, state, queue object, min/max txg, the current dataset's txg window,
//!   times, byte counters, error count, DDT bookmark, the *bookmark* where the walk stands,
//!   flags). The queue object (`DMU_OT_SCAN_QUEUE`, a ZAP from hex dataset object to txg)
//!   holds the datasets still to visit. Both are written in syncing context by
//!   [`PoolWriter::sync_scan`] whenever they changed ([`ScanState::dirty`]).
//! * **Order** (OpenZFS `dsl_scan_visit`): the MOS first, then `$ORIGIN@$ORIGIN`; visiting a
//!   dataset queues its next snapshot and its clones with the dataset's creation txg, and
//!   the queue is drained in object order. A dataset is walked for blocks born after the txg
//!   it was queued with (its previous snapshot's), up to the scan's max txg (a snapshot's
//!   creation txg), so each block is read once, by the oldest dataset that holds it, and
//!   blocks written after the scan started (which went to every device) are not.
//! * **Datasets changing underneath** (`dsl_scan_ds_snapshotted/destroyed`): a snapshot of a
//!   queued (or current) head takes its place; a destroyed snapshot hands its place to its
//!   next snapshot. These hooks run in syncing context and bump [`ScanState::gen`].
//! * **Sorted, bounded, concurrent.** The scan thread takes a committed view (the durable
//!   uberblock's MOS) and, with no pool lock held, walks it from the bookmark, gathering
//!   block pointers until a batch is full (`RZFS_SCAN_BATCH` pointers, 1 GiB of data at
//!   most) — memory is bounded by the batch whatever the pool's size. The batch is sorted by
//!   device offset and issued by several threads, so the disks see large forward sweeps
//!   (OpenZFS's sorted scan, without its per-vdev range trees). Then, under the writer
//!   lock, the new bookmark, queue and counters are installed — unless the DSL changed
//!   the queue meanwhile (`gen`), in which case the batch's reads stand but the walk
//!   resumes from the old bookmark. While a batch is out, the allocator keeps space freed
//!   after the view deferred (`Allocator::hold_frees`), so no block of the view can be
//!   reallocated and overwritten under a read or a repair.
//! * **Repair.** A copy proven bad is rewritten in place with the verified bytes: the block
//!   is live (or held), so writing its own contents back is always safe. A block no copy of
//!   which verifies is a permanent error: counted in `scn_errors` and reported by
//!   `zpool status -v` with its dataset and object.
//!
//! * **Resilver by DTL.** A resilver covers the txgs the writable leaves' DTLs hold
//!   (`min_txg`/`max_txg`), and issues only the blocks born in one of them with a copy on a
//!   top-level vdev whose leaves miss it; the vdev layer rewrites the stale copies without
//!   reading them (`Vdev::scrub_born`). A scan that finishes without errors excises the
//!   txgs up to its `max_txg` from the DTL of every leaf that could take writes throughout
//!   (`crate::dtl`); leaves that were away meanwhile start another resilver. A resilver with
//!   no DTL to go by (`zpool resilver` on a healthy pool) scans everything, as a scrub.
//!
//! Not done yet: the intent log of heads, dedup tables (rzfs writes none).

use crate::txg::Spa;
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use dmu::traverse::{traverse_objset, TraverseOpts, Visit};
use dmu::{Objset, Reader};
use ondisk::blkptr::BlkPtr;
use ondisk::dsl::DslDatasetPhys;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use vdev::dtl::Dtl;
use vdev::Vdev;
use zap::write::ZapVal;

/// Words of `dsl_scan_phys_t` (`SCAN_PHYS_NUMINTS`).
pub const SCAN_PHYS_NUMINTS: usize = 24;
/// MOS directory entry holding it (`DMU_POOL_SCAN`).
pub const DMU_POOL_SCAN: &str = "scan";
/// `DMU_OT_SCAN_QUEUE`.
const OT_SCAN_QUEUE: u8 = 38;
/// `zb_objset` of a bookmark whose dataset was destroyed or finished (`ZB_DESTROYED_OBJSET`).
pub const ZB_DESTROYED_OBJSET: u64 = u64::MAX;
/// `DSF_SCRUB_PAUSED`.
pub const DSF_SCRUB_PAUSED: u64 = 1 << 1;
/// `zfs_scrub_ddt_class_max` default (`DDT_CLASS_DUPLICATE`).
const DDT_CLASS_DUPLICATE: u64 = 1;
/// `DDT_CLASSES`: the class a DDT bookmark holds once the dedup-table phase of a scan is
/// over (`ddt_walk` ends with it). rzfs visits dedup'd blocks in the dataset walk (it
/// writes no dedup tables, and does not import pools using dedup read-write), so its scans
/// start past that phase; OpenZFS, resuming one, then goes on from `scn_bookmark` (it
/// asserts a zero bookmark while its DDT phase is open).
const DDT_CLASSES: u64 = 3;

/// `pool_scan_func_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanFunc {
    None = 0,
    Scrub = 1,
    Resilver = 2,
}

/// `dsl_scan_state_t`.
pub mod state {
    pub const NONE: u64 = 0;
    pub const SCANNING: u64 = 1;
    pub const FINISHED: u64 = 2;
    pub const CANCELED: u64 = 3;
}

/// `dsl_scan_phys_t`, word for word.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanPhys {
    pub func: u64,
    pub state: u64,
    pub queue_obj: u64,
    pub min_txg: u64,
    pub max_txg: u64,
    pub cur_min_txg: u64,
    pub cur_max_txg: u64,
    pub start_time: u64,
    pub end_time: u64,
    pub to_examine: u64,
    pub examined: u64,
    pub skipped: u64,
    pub processed: u64,
    pub errors: u64,
    pub ddt_class_max: u64,
    pub ddt_bookmark: [u64; 4],
    /// `zbookmark_phys_t`: objset (dataset object; 0 = the MOS), object, level, blkid.
    pub bookmark: [u64; 4],
    pub flags: u64,
}

impl ScanPhys {
    /// The 24 words in on-disk order.
    pub fn to_words(&self) -> Vec<u64> {
        let mut v = vec![
            self.func,
            self.state,
            self.queue_obj,
            self.min_txg,
            self.max_txg,
            self.cur_min_txg,
            self.cur_max_txg,
            self.start_time,
            self.end_time,
            self.to_examine,
            self.examined,
            self.skipped,
            self.processed,
            self.errors,
            self.ddt_class_max,
        ];
        v.extend_from_slice(&self.ddt_bookmark);
        v.extend_from_slice(&self.bookmark);
        v.push(self.flags);
        v
    }

    /// Parses the words of a `scan` entry; `None` when there are too few.
    pub fn from_words(w: &[u64]) -> Option<ScanPhys> {
        if w.len() < SCAN_PHYS_NUMINTS {
            return None;
        }
        Some(ScanPhys {
            func: w[0],
            state: w[1],
            queue_obj: w[2],
            min_txg: w[3],
            max_txg: w[4],
            cur_min_txg: w[5],
            cur_max_txg: w[6],
            start_time: w[7],
            end_time: w[8],
            to_examine: w[9],
            examined: w[10],
            skipped: w[11],
            processed: w[12],
            errors: w[13],
            ddt_class_max: w[14],
            ddt_bookmark: [w[15], w[16], w[17], w[18]],
            bookmark: [w[19], w[20], w[21], w[22]],
            flags: w[23],
        })
    }

    /// A scan is under way (possibly paused).
    pub fn is_scanning(&self) -> bool {
        self.state == state::SCANNING
    }

    /// A scrub paused by `zpool scrub -p`.
    pub fn is_paused(&self) -> bool {
        self.is_scanning() && self.flags & DSF_SCRUB_PAUSED != 0
    }
}

/// The scan's part of the MOS, kept by the [`PoolWriter`] (and so saved and restored with
/// the open txg's checkpoint).
#[derive(Clone, Debug, Default)]
pub struct ScanState {
    pub phys: ScanPhys,
    /// Datasets to visit: object → txg (`scn_queue`).
    pub queue: BTreeMap<u64, u64>,
    /// `phys` or `queue` changed since the last sync.
    pub dirty: bool,
    /// Bumped whenever the DSL rewrites the queue or bookmark (snapshot, destroy): a batch
    /// gathered from an older generation must not install its cursor.
    pub gen: u64,
    /// Bumped by every new scan ([`PoolWriter::scan_setup`]): a batch of the scan it
    /// replaced (a resilver that starts over) counts nothing toward this one.
    pub pass: u64,
}

impl ScanState {
    /// A snapshot `snap` of head `head` was taken: the snapshot holds what the head held when
    /// it was queued, so it takes the head's place (`dsl_scan_ds_snapshotted`).
    pub fn ds_snapshotted(&mut self, head: u64, snap: u64) {
        if !self.phys.is_scanning() {
            return;
        }
        if self.phys.bookmark[0] == head && head != 0 {
            self.phys.bookmark[0] = snap;
        }
        if let Some(t) = self.queue.remove(&head) {
            self.queue.insert(snap, t);
        }
        self.gen += 1;
        self.dirty = true;
    }

    /// Dataset `ds` (with its record `phys`) is being destroyed (`dsl_scan_ds_destroyed`):
    /// a snapshot hands its place to its next snapshot, which now holds its blocks.
    pub fn ds_destroyed(&mut self, ds: u64, phys: &DslDatasetPhys) {
        if !self.phys.is_scanning() {
            return;
        }
        let next = (phys.next_snap_obj != 0).then_some(phys.next_snap_obj);
        if self.phys.bookmark[0] == ds && ds != 0 {
            match next {
                Some(n) => self.phys.bookmark = [n, 0, 0, 0],
                None => self.phys.bookmark = [ZB_DESTROYED_OBJSET, 0, 0, 0],
            }
        }
        if let Some(t) = self.queue.remove(&ds) {
            if let Some(n) = next {
                let e = self.queue.entry(n).or_insert(t);
                *e = (*e).min(t);
            }
        }
        self.gen += 1;
        self.dirty = true;
    }
}

impl PoolWriter {
    /// Loads the scan state from the MOS (import).
    pub fn load_scan(&mut self) -> Result<()> {
        let bad = |e: zap::ZapError| PoolError::Invalid(format!("scan state: {e}"));
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        let Some(v) = self.mos_zaps.lookup(&self.mos, dir, DMU_POOL_SCAN.as_bytes()).map_err(bad)? else {
            return Ok(());
        };
        let Some(phys) = ScanPhys::from_words(&v.values) else {
            return Err(PoolError::Invalid(format!("scan state has {} words", v.values.len())));
        };
        let mut queue = BTreeMap::new();
        if phys.is_scanning() && phys.queue_obj != 0 {
            for (k, v) in self.mos_zaps.entries(&self.mos, phys.queue_obj).map_err(bad)? {
                let name = String::from_utf8_lossy(&k).trim_end_matches('\0').to_string();
                if let (Ok(ds), Some(&txg)) = (u64::from_str_radix(&name, 16), v.values.first()) {
                    queue.insert(ds, txg);
                }
            }
        }
        self.scan = ScanState { phys, queue, dirty: false, gen: 0, pass: 0 };
        Ok(())
    }

    /// Writes the scan state into the MOS of the txg being synced when it changed.
    pub(crate) fn sync_scan(&mut self) -> Result<()> {
        if !self.scan.dirty {
            return Ok(());
        }
        let bad = |e: zap::ZapError| PoolError::Invalid(format!("scan state: {e}"));
        let dir = ondisk::dsl::mos_keys::DIRECTORY_OBJECT;
        let scanning = self.scan.phys.is_scanning();
        if scanning && self.scan.phys.queue_obj == 0 {
            self.scan.phys.queue_obj =
                self.mos_zaps.create(&mut self.mos, OT_SCAN_QUEUE, 0, Vec::new()).map_err(bad)?;
        }
        if !scanning && self.scan.phys.queue_obj != 0 {
            self.mos_zaps.destroy(&mut self.mos, self.scan.phys.queue_obj).map_err(bad)?;
            self.scan.phys.queue_obj = 0;
        }
        if scanning {
            let q = self.scan.phys.queue_obj;
            let want: BTreeMap<Vec<u8>, u64> =
                self.scan.queue.iter().map(|(ds, txg)| (format!("{ds:x}").into_bytes(), *txg)).collect();
            for (k, _) in self.mos_zaps.entries(&self.mos, q).map_err(bad)? {
                if !want.contains_key(&k) {
                    self.mos_zaps.remove(&self.mos, q, &k).map_err(bad)?;
                }
            }
            for (k, txg) in want {
                self.mos_zaps.update(&self.mos, q, &k, ZapVal::u64(txg)).map_err(bad)?;
            }
        }
        let words = ZapVal { int_size: 8, values: self.scan.phys.to_words() };
        self.mos_zaps.update(&self.mos, dir, DMU_POOL_SCAN.as_bytes(), words).map_err(bad)?;
        self.scan.dirty = false;
        Ok(())
    }

    /// Sets up a new scan in syncing context (`dsl_scan_setup_sync`). A resilver covers the
    /// txgs the writable leaves' DTLs hold (`vdev_resilver_needed`: from one before the
    /// first to one past the last), or everything when no DTL says what is missing.
    pub(crate) fn scan_setup(&mut self, func: ScanFunc) -> Result<()> {
        let allocated = {
            let s = self.alloc.space();
            s.size.saturating_sub(s.free)
        };
        let (min_txg, max_txg) = match (func, self.resilver_range()) {
            (ScanFunc::Resilver, Some((lo, hi))) => (lo.saturating_sub(1), (hi + 1).min(self.txg)),
            _ => (0, self.txg),
        };
        for t in &self.tops {
            t.scan_reset();
            for l in t.leaves().into_iter().filter(|l| !l.writable()) {
                l.mark_scan_gap();
            }
        }
        let old_queue = self.scan.phys.queue_obj;
        self.scan.phys = ScanPhys {
            func: func as u64,
            state: state::SCANNING,
            queue_obj: old_queue,
            min_txg,
            max_txg,
            start_time: (self.now)(),
            to_examine: allocated,
            ddt_class_max: DDT_CLASS_DUPLICATE,
            ddt_bookmark: [DDT_CLASSES, 0, 0, 0],
            ..ScanPhys::default()
        };
        self.scan.queue.clear();
        self.scan.gen += 1;
        self.scan.pass += 1;
        self.scan.dirty = true;
        self.note_internal("scan setup", &format!("func={} mintxg={min_txg} maxtxg={max_txg}", func as u64));
        self.event(if func == ScanFunc::Resilver { "resilver_start" } else { "scrub_start" }, None);
        Ok(())
    }

    /// The scan ended (finished, or cancelled): history and event, as `dsl_scan_done`, and
    /// the MOS error logs rotated.
    pub(crate) fn scan_ended(&mut self, complete: bool) {
        if let Err(e) = self.errlog_rotate() {
            eprintln!("rzfs: pool {}: cannot rotate the error logs: {e}", self.name);
        }
        let errors = self.scan.phys.errors;
        self.note_internal(
            if complete { "scan done" } else { "scan cancelled" },
            &format!("errors={errors}"),
        );
        let resilver = self.scan.phys.func == ScanFunc::Resilver as u64;
        let what = match (complete, resilver) {
            (true, true) => "resilver_finish",
            (true, false) => "scrub_finish",
            (false, _) => "scrub_abort",
        };
        self.event(what, None);
    }
}

impl PoolWriter {
    /// At the end of a scan, the MOS error logs rotate as OpenZFS's `spa_errlog_sync` does
    /// once a scan is done (finished or cancelled): `errlog_last` is deleted, the scan's own
    /// log (`errlog_scrub`) becomes the last one, and `errlog_scrub` is 0. rzfs adds no entry
    /// to either (it reports the errors a scan of its own found from memory), so a pool OpenZFS
    /// left errors in loses them at rzfs's next scan, as it would at OpenZFS's.
    ///
    /// With `head_errlog` enabled each log is a ZAP from head dataset to a ZAP of that
    /// dataset's errors, and deleting one frees those too (`delete_errlog`).
    pub(crate) fn errlog_rotate(&mut self) -> Result<()> {
        use ondisk::dsl::mos_keys as K;
        let dir = K::DIRECTORY_OBJECT;
        let look = |w: &mut PoolWriter, k: &str| -> Result<u64> {
            Ok(w.mos_zaps.lookup_u64(&w.mos, dir, k).map_err(|e| PoolError::Io(e.to_string()))?.unwrap_or(0))
        };
        let (last, scrub) = (look(self, K::ERRLOG_LAST)?, look(self, K::ERRLOG_SCRUB)?);
        if last == 0 && scrub == 0 {
            return Ok(());
        }
        if last != 0 && self.mos.dnode(last)?.is_some() {
            if self.feature_refcount("head_errlog")?.is_some() {
                let heads =
                    self.mos_zaps.entries(&self.mos, last).map_err(|e| PoolError::Io(e.to_string()))?;
                for (_, v) in heads {
                    if let Some(obj) = v.values.first().copied().filter(|&o| o != 0 && v.int_size == 8) {
                        if self.mos.dnode(obj)?.is_some() {
                            self.mos_zaps
                                .destroy(&mut self.mos, obj)
                                .map_err(|e| PoolError::Io(e.to_string()))?;
                        }
                    }
                }
            }
            self.mos_zaps.destroy(&mut self.mos, last).map_err(|e| PoolError::Io(e.to_string()))?;
        }
        self.mos_zaps
            .update_u64(&self.mos, dir, K::ERRLOG_LAST, scrub)
            .map_err(|e| PoolError::Io(e.to_string()))?;
        self.mos_zaps
            .update_u64(&self.mos, dir, K::ERRLOG_SCRUB, 0)
            .map_err(|e| PoolError::Io(e.to_string()))?;
        Ok(())
    }
}

impl PoolWriter {
    /// Head dataset `ds` is destroyed: with `head_errlog` its entries in both MOS error logs
    /// go, and the ZAP of its errors is freed (OpenZFS's `spa_delete_dataset_errlog`; keys
    /// are the head's object number in hex, as `zap_lookup_int_key` writes them).
    pub(crate) fn errlog_drop_head(&mut self, ds: u64) -> Result<()> {
        use ondisk::dsl::mos_keys as K;
        if self.feature_refcount("head_errlog")?.is_none() {
            return Ok(());
        }
        let io = |e: zap::ZapError| PoolError::Io(e.to_string());
        for key in [K::ERRLOG_SCRUB, K::ERRLOG_LAST] {
            let log = self.mos_zaps.lookup_u64(&self.mos, K::DIRECTORY_OBJECT, key).map_err(io)?.unwrap_or(0);
            if log == 0 || self.mos.dnode(log)?.is_none() {
                continue;
            }
            let entries = self.mos_zaps.entries(&self.mos, log).map_err(io)?;
            let mine = entries.into_iter().find(|(name, _)| {
                std::str::from_utf8(name).ok().and_then(|n| u64::from_str_radix(n, 16).ok()) == Some(ds)
            });
            if let Some((name, v)) = mine {
                self.mos_zaps.remove(&self.mos, log, &name).map_err(io)?;
                if let Some(obj) = v.values.first().copied().filter(|&o| o != 0 && v.int_size == 8) {
                    if self.mos.dnode(obj)?.is_some() {
                        self.mos_zaps.destroy(&mut self.mos, obj).map_err(io)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// What `zpool status` shows of a scan: the persistent state plus this pass's counters.
#[derive(Clone, Debug, Default)]
pub struct ScanStatus {
    pub phys: ScanPhys,
    /// Bytes issued (read and checked) in total and in this pass.
    pub issued: u64,
    pub pass_issued: u64,
    pub pass_examined: u64,
    pub pass_start: u64,
    /// When the scrub was paused (0: not paused) and the time spent paused in this pass.
    pub pass_paused_at: u64,
    pub pass_spent_paused: u64,
}

/// The scan's memory-only bookkeeping, kept by the [`Spa`].
#[derive(Default)]
pub struct ScanRun {
    pub status: ScanStatus,
    /// Permanent errors found: (dataset object, object, what failed).
    pub errors: Vec<(u64, u64, String)>,
    /// A scan thread is running.
    pub running: bool,
}

/// One block to check: the pointer and where it was found.
#[derive(Clone, Debug)]
struct Item {
    bp: BlkPtr,
    ds: u64,
    object: u64,
}

/// Batch limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_items: usize,
    pub max_bytes: u64,
    pub threads: usize,
    /// Pause between batches (`RZFS_SCAN_DELAY_MS`, default 0): throttles a scan on a busy
    /// pool, and lets tests catch one in the middle.
    pub delay: std::time::Duration,
}

impl Limits {
    /// From `RZFS_SCAN_BATCH` (block pointers per batch, default 65536) and
    /// `RZFS_SCAN_THREADS` (default 4), `RZFS_SCAN_DELAY_MS` (default 0).
    pub fn from_env() -> Limits {
        let num = |k: &str, d: usize| {
            std::env::var(k).ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(d)
        };
        Limits {
            max_items: num("RZFS_SCAN_BATCH", 65536),
            max_bytes: 1 << 30,
            threads: num("RZFS_SCAN_THREADS", 4),
            delay: std::time::Duration::from_millis(num("RZFS_SCAN_DELAY_MS", 0) as u64),
        }
    }
}

/// The walk's result for one batch.
struct Gathered {
    items: Vec<Item>,
    phys: ScanPhys,
    queue: BTreeMap<u64, u64>,
    examined: u64,
    finished: bool,
}

/// Dataset record from the committed MOS; `None` if the object is no dataset (destroyed).
fn ds_phys(mos: &Objset, obj: u64) -> Option<DslDatasetPhys> {
    const DMU_OT_DSL_DATASET: u8 = 16;
    let dn = mos.dnode(obj).ok()?;
    if dn.bonustype != DMU_OT_DSL_DATASET {
        return None;
    }
    DslDatasetPhys::parse(&dn.bonus, mos.dnode_byte_order()).ok()
}

/// `$ORIGIN@$ORIGIN`'s object in the committed MOS, if the pool has one.
fn origin_snapshot(mos: &Objset) -> Option<u64> {
    let root = zap::lookup_u64(mos, 1, "root_dataset").ok()??;
    let dn = mos.dnode(root).ok()?;
    let dir = ondisk::dsl::DslDirPhys::parse(&dn.bonus, mos.dnode_byte_order()).ok()?;
    let odir = zap::lookup_u64(mos, dir.child_dir_zapobj, "$ORIGIN").ok()??;
    let dn = mos.dnode(odir).ok()?;
    let od = ondisk::dsl::DslDirPhys::parse(&dn.bonus, mos.dnode_byte_order()).ok()?;
    let head = ds_phys(mos, od.head_dataset_obj)?;
    (head.prev_snap_obj != 0).then_some(head.prev_snap_obj)
}

/// Every head dataset's oldest snapshot (or the head), for pools without `$ORIGIN`
/// (versions before 11; OpenZFS `enqueue_cb`).
fn roots_without_origin(mos: &Objset) -> Vec<(u64, u64)> {
    const DMU_OT_DSL_DATASET: u8 = 16;
    let mut heads = Vec::new();
    let _ = mos.for_each_dnode(|dn| {
        if dn.bonustype == DMU_OT_DSL_DATASET {
            if let Ok(p) = DslDatasetPhys::parse(&dn.bonus, mos.dnode_byte_order()) {
                if !p.is_snapshot() {
                    heads.push(dn.object);
                }
            }
        }
        Ok(())
    });
    let mut out = Vec::new();
    'heads: for h in heads {
        let mut cur = h;
        for _ in 0..1_000_000 {
            let Some(p) = ds_phys(mos, cur) else { continue 'heads };
            if p.prev_snap_obj == 0 {
                out.push((cur, p.prev_snap_txg));
                continue 'heads;
            }
            match ds_phys(mos, p.prev_snap_obj) {
                // A clone: its origin's walk reaches it.
                Some(prev) if prev.next_snap_obj != cur => continue 'heads,
                Some(_) => cur = p.prev_snap_obj,
                None => continue 'heads,
            }
        }
    }
    out
}

struct Walk<'a> {
    reader: &'a Reader,
    mos: &'a Objset,
    lim: Limits,
    g: Gathered,
    bytes: u64,
    /// For a resilver driven by DTLs: per top-level vdev, the txgs some writable leaf of it
    /// is missing. Only blocks with a copy there born in one of them are issued
    /// (`dsl_scan_need_resilver`).
    need: Option<Vec<Dtl>>,
}

fn asize_of(bp: &BlkPtr) -> u64 {
    bp.dvas().iter().map(|d| d.asize()).sum()
}

/// Does block `bp` have a copy on a top-level vdev whose leaves miss its birth txg?
fn needs_resilver(need: &[Dtl], bp: &BlkPtr) -> bool {
    let birth = bp.physical_birth();
    bp.dvas().iter().any(|d| need.get(d.vdev() as usize).is_some_and(|n| n.contains(birth)))
}

/// Per top-level vdev, the union of the DTLs of its writable leaves.
fn resilver_need(tops: &[Arc<Vdev>]) -> Vec<Dtl> {
    tops.iter()
        .map(|t| {
            let mut u = Dtl::new();
            for l in t.leaves().into_iter().filter(|l| l.writable()) {
                u.union(&l.dtl());
            }
            u
        })
        .collect()
}

impl Walk<'_> {
    /// Walks objset `os` (dataset `ds`, 0 = MOS) from `resume`; true when suspended (the
    /// bookmark then says where to go on).
    fn objset(&mut self, ds: u64, os: &Objset, resume: Option<(u64, u64)>) -> bool {
        let (min, max) = (self.g.phys.cur_min_txg, self.g.phys.cur_max_txg);
        let opts = TraverseOpts { min_birth: min, read_data: false, resume };
        let mut suspended_at = None;
        let lim = self.lim;
        let items = &mut self.g.items;
        let bytes = &mut self.bytes;
        let examined = &mut self.g.examined;
        let dnodes_per_block = (u64::from(os.phys.meta_dnode.datablkszsec) << 9) / 512;
        let need = self.need.as_deref();
        let mut visit = |v: &Visit| -> dmu::Result<()> {
            if v.bp.physical_birth() > max {
                return Ok(());
            }
            if need.is_some_and(|n| !needs_resilver(n, v.bp)) {
                *examined += asize_of(v.bp);
                return Ok(());
            }
            if !items.is_empty() && (items.len() >= lim.max_items || *bytes >= lim.max_bytes) {
                let at = if v.object == 0 {
                    (first_object(v, os, dnodes_per_block), 0)
                } else {
                    (v.object, first_blkid(v, os))
                };
                suspended_at = Some(at);
                return Err(dmu::DmuError::Corrupt { what: "scan", detail: "batch full".into() });
            }
            *examined += asize_of(v.bp);
            *bytes += v.bp.psize();
            items.push(Item { bp: *v.bp, ds, object: v.object });
            Ok(())
        };
        // Blocks that do not read are the issue phase's to report (they are in the batch).
        let mut on_err = |_: &BlkPtr, _: u64, _: &dmu::DmuError| {};
        let _ = traverse_objset(os, opts, &mut visit, &mut on_err);
        match suspended_at {
            Some((object, blkid)) => {
                self.g.phys.bookmark = [ds, object, 0, blkid];
                true
            }
            None => false,
        }
    }

    /// Visits dataset `dsobj` (`dsl_scan_visitds`); true when suspended inside it.
    fn dataset(&mut self, dsobj: u64, resume: Option<(u64, u64)>) -> bool {
        let Some(p) = ds_phys(self.mos, dsobj) else { return false };
        if self.g.phys.cur_min_txg >= self.g.phys.max_txg {
            return false;
        }
        let Ok(root) = BlkPtr::parse(&p.bp, self.mos.dnode_byte_order()) else { return false };
        if !root.is_hole() {
            if resume.is_none()
                && root.birth > self.g.phys.cur_min_txg
                && root.physical_birth() <= self.g.phys.cur_max_txg
                && self.need.as_deref().is_none_or(|n| needs_resilver(n, &root))
            {
                self.g.examined += asize_of(&root);
                self.bytes += root.psize();
                self.g.items.push(Item { bp: root, ds: dsobj, object: 0 });
            }
            if root.birth > self.g.phys.cur_min_txg {
                // An unreadable root block is in the batch: its failure is reported there.
                if let Ok(os) = Objset::open(self.reader, &root) {
                    if self.objset(dsobj, &os, resume) {
                        return true;
                    }
                }
            }
        }
        // This dataset is done: queue what descends from it.
        if p.next_snap_obj != 0 {
            self.g.queue.entry(p.next_snap_obj).or_insert(p.creation_txg);
        }
        if p.num_children > 1 && p.next_clones_obj != 0 {
            if let Ok(list) = zap::list(self.mos, p.next_clones_obj) {
                for e in list {
                    let clone = if e.name.len() == 8 && e.int_size == 8 {
                        // u64-keyed ZAP: the key is the object.
                        Some(u64::from_be_bytes(e.name[..8].try_into().unwrap_or([0; 8])))
                    } else {
                        u64::from_str_radix(e.name_string().trim_end_matches('\0'), 16).ok()
                    };
                    if let Some(c) = clone.filter(|&c| c != 0) {
                        self.g.queue.entry(c).or_insert(p.creation_txg);
                    }
                }
            }
        }
        false
    }

    /// The dataset to visit for a queue entry `(ds, txg)`: a head snapshotted since it was
    /// queued hands over to its oldest snapshot taken after `txg`, which holds what the head
    /// held then (`dsl_scan_ds_snapshotted` does this as it happens; doing it here too also
    /// copes with pools whose next-clones entries still name a snapshotted clone head).
    fn oldest_since(&self, ds: u64, txg: u64) -> u64 {
        let mut cur = ds;
        for _ in 0..100_000 {
            let Some(p) = ds_phys(self.mos, cur) else { return cur };
            if p.prev_snap_obj == 0 {
                return cur;
            }
            match ds_phys(self.mos, p.prev_snap_obj) {
                Some(prev) if prev.creation_txg > txg && prev.next_snap_obj == cur => cur = p.prev_snap_obj,
                _ => return cur,
            }
        }
        cur
    }

    /// Runs the walk from the state's bookmark until the batch is full or nothing is left
    /// (`dsl_scan_visit`).
    fn run(&mut self, mos_os: &Objset) {
        let bm = self.g.phys.bookmark;
        if bm[0] == 0 {
            self.g.phys.cur_min_txg = self.g.phys.min_txg;
            self.g.phys.cur_max_txg = self.g.phys.max_txg;
            let resume = (bm != [0; 4]).then_some((bm[1], bm[3]));
            if self.objset(0, mos_os, resume) {
                return;
            }
            match origin_snapshot(self.mos) {
                Some(o) => {
                    self.g.phys.bookmark = [o, 0, 0, 0];
                    if self.dataset(o, None) {
                        return;
                    }
                }
                None => {
                    for (ds, txg) in roots_without_origin(self.mos) {
                        self.g.queue.entry(ds).or_insert(txg);
                    }
                }
            }
        } else if bm[0] != ZB_DESTROYED_OBJSET {
            let resume = (bm[1..] != [0; 3]).then_some((bm[1], bm[3]));
            if self.dataset(bm[0], resume) {
                return;
            }
        }
        self.g.phys.bookmark = [0; 4];
        while let Some((&queued, &txg)) = self.g.queue.iter().next() {
            self.g.queue.remove(&queued);
            let ds = self.oldest_since(queued, txg);
            let Some(p) = ds_phys(self.mos, ds) else { continue };
            let min = self.g.phys.min_txg;
            self.g.phys.cur_min_txg = if txg != 0 { min.max(txg) } else { min.max(p.prev_snap_txg) };
            self.g.phys.cur_max_txg =
                if p.is_snapshot() { self.g.phys.max_txg.min(p.creation_txg) } else { self.g.phys.max_txg };
            self.g.phys.bookmark = [ds, 0, 0, 0];
            if self.dataset(ds, None) {
                return;
            }
            self.g.phys.bookmark = [0; 4];
        }
        self.g.phys.bookmark = [ZB_DESTROYED_OBJSET, 0, 0, 0];
        self.g.finished = true;
    }
}

/// First level-0 block id a visited pointer covers.
fn first_blkid(v: &Visit, os: &Objset) -> u64 {
    if v.blkid == u64::MAX {
        return u64::MAX; // spill
    }
    let epbs = os.dnode(v.object).map(|d| u32::from(d.indblkshift.saturating_sub(7))).unwrap_or(0);
    let shift = epbs.saturating_mul(u32::from(v.level));
    v.blkid.checked_shl(shift).filter(|x| x >> shift == v.blkid).unwrap_or(u64::MAX)
}

/// First object a visited pointer of the meta-dnode covers.
fn first_object(v: &Visit, os: &Objset, dnodes_per_block: u64) -> u64 {
    let epbs = u32::from(os.phys.meta_dnode.indblkshift.saturating_sub(7));
    let shift = epbs.saturating_mul(u32::from(v.level));
    let l0 = v.blkid.checked_shl(shift).filter(|x| x >> shift == v.blkid).unwrap_or(u64::MAX);
    l0.saturating_mul(dnodes_per_block)
}

/// What issuing a batch found.
#[derive(Default)]
struct Issued {
    issued: AtomicU64,
    repaired: AtomicU64,
    errors: Mutex<Vec<(u64, u64, String)>>,
    /// An abort flag stopped the issue before every item was checked.
    cut_short: AtomicBool,
}

/// Reads every copy of every item, sorted by device offset, on `threads` threads; stops
/// early when one of `abort` is set (then not every item was checked).
fn issue(
    tops: &[Arc<Vdev>],
    reader: &Reader,
    mut items: Vec<Item>,
    threads: usize,
    abort: &[&AtomicBool],
) -> Issued {
    items.sort_by_key(|it| it.bp.dvas().first().map(|d| (d.vdev(), d.offset())).unwrap_or((u64::MAX, 0)));
    let out = Issued::default();
    let next = AtomicUsize::new(0);
    const CHUNK: usize = 32;
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                if start >= items.len() {
                    break;
                }
                if abort.iter().any(|a| a.load(Ordering::Relaxed)) {
                    out.cut_short.store(true, Ordering::Relaxed);
                    break;
                }
                for it in &items[start..(start + CHUNK).min(items.len())] {
                    check_block(tops, reader, it, &out);
                }
            });
        }
    });
    out
}

/// Scrubs one block: every DVA through the vdev's thorough read; DVAs that fail are
/// rewritten from one that verified.
fn check_block(tops: &[Arc<Vdev>], reader: &Reader, it: &Item, out: &Issued) {
    let bp = &it.bp;
    if bp.is_hole() || bp.is_embedded() {
        return;
    }
    let zio = &reader.zio;
    let asize = asize_of(bp);
    if bp.dvas().iter().any(|d| d.is_gang()) {
        // Gang trees are read through the ordinary pipeline (every child verified, one copy).
        if let Err(e) = zio.read_physical(bp) {
            lock(&out.errors).push((it.ds, it.object, e.to_string()));
        }
        out.issued.fetch_add(asize, Ordering::Relaxed);
        return;
    }
    let verify = |d: &[u8]| zio.checksum_ok(bp, d);
    let mut good: Option<Vec<u8>> = None;
    let mut failed = Vec::new();
    let mut last_err = String::new();
    for dva in bp.dvas() {
        let Some(top) = tops.iter().find(|t| t.id() == dva.vdev()) else {
            last_err = format!("top-level vdev {} is missing", dva.vdev());
            continue;
        };
        match top.scrub_born(dva.offset(), bp.psize(), Some(bp.physical_birth()), &verify) {
            Ok(r) => {
                if std::env::var_os("RZFS_DEBUG_SCAN").is_some() {
                    eprintln!("scan: ds {} obj {} {bp}: {} repairs", it.ds, it.object, r.repairs.len());
                }
                let fixed: u64 = r.repairs.iter().map(|x| x.data.len() as u64).sum();
                if fixed > 0 && top.apply_repairs(&r.repairs).is_ok() {
                    out.repaired.fetch_add(fixed, Ordering::Relaxed);
                    // Charged to the leaves written (those of a replacing or spare column).
                    for x in &r.repairs {
                        if let Some(v) = top.find(x.vdev_guid) {
                            for l in v.leaves().into_iter().filter(|l| l.writable()) {
                                l.add_scan_processed(x.data.len() as u64);
                            }
                        }
                    }
                }
                good.get_or_insert(r.data);
            }
            Err(e) => {
                last_err = e.to_string();
                failed.push((top, dva));
            }
        }
    }
    match good {
        Some(data) => {
            // Ditto copies that did not verify get the good bytes back.
            for (top, dva) in failed {
                if top.write(dva.offset(), &data).is_ok() {
                    out.repaired.fetch_add(dva.asize(), Ordering::Relaxed);
                }
            }
        }
        None => lock(&out.errors).push((it.ds, it.object, format!("{bp}: {last_err}"))),
    }
    out.issued.fetch_add(asize, Ordering::Relaxed);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Outcome of one step of the scan thread.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    More,
    /// The pool is suspended: try again later.
    Wait,
    Stop,
}

/// The scan thread: runs batches until the scan finishes, is paused or cancelled, or the
/// pool goes away.
pub(crate) fn scan_thread(spa: std::sync::Weak<Spa>) {
    let lim = Limits::from_env();
    loop {
        let Some(s) = spa.upgrade() else { return };
        // A panic in a batch stops the scan (the state stays SCANNING: the next import resumes,
        // `zpool scrub -s` cancels it) instead of leaving a dead thread marked running.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(&s, lim)))
            .unwrap_or_else(|_| Err(PoolError::Io("scan thread panicked".into())));
        match r {
            Ok(Step::More) => {
                drop(s);
                if !lim.delay.is_zero() {
                    std::thread::sleep(lim.delay);
                }
            }
            Ok(Step::Wait) => {
                drop(s);
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            Ok(Step::Stop) | Err(_) => {
                // A new scan set up meanwhile (a resilver requested as this one ended, or
                // while the thread was finishing a batch) is this thread's to run. The writer
                // lock is held across the check and the flag (lock order: writer, then the
                // scan's), so a setup either is seen here or finds the thread gone.
                let w = s.writer_locked();
                let mut run = s.scan_run();
                let more =
                    r.is_ok() && w.scan.phys.is_scanning() && !w.scan.phys.is_paused() && !s.is_closed();
                if more {
                    continue;
                }
                run.running = false;
                drop(run);
                drop(w);
                s.wake_scan_waiters();
                return;
            }
        }
    }
}

/// A batch's copy of the vdev tree: counted in `scan_batch_live` while held, so a detach can
/// wait for the batch to let go of the detached leaf's device.
struct BatchTree<'a> {
    spa: &'a Arc<Spa>,
    tops: Vec<Arc<Vdev>>,
}

impl Drop for BatchTree<'_> {
    fn drop(&mut self) {
        self.tops.clear();
        self.spa.scan_batch_live.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Spa {
    /// After a leaf left the tree: the scan batch under way (if any) stops issuing, and
    /// this waits (bounded) until it has dropped its copy of the old tree, so the detached
    /// device is closed and free for another use (`zpool attach` of it again).
    pub(crate) fn scan_quiesce(&self) {
        self.scan_retree.store(true, Ordering::SeqCst);
        let t0 = std::time::Instant::now();
        while self.scan_batch_live.load(Ordering::SeqCst) > 0
            && t0.elapsed() < std::time::Duration::from_secs(30)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.scan_retree.store(false, Ordering::SeqCst);
    }
}

/// Releases the allocator's hold on frees when a batch has been issued or ends early.
struct HoldGuard<'a> {
    spa: &'a Arc<Spa>,
}

impl Drop for HoldGuard<'_> {
    fn drop(&mut self) {
        self.spa.writer_locked().alloc.hold_frees(None);
    }
}

/// One scan step: a batch gathered, issued and installed.
fn step(spa: &Arc<Spa>, lim: Limits) -> Result<Step> {
    match take_batch(spa, lim)? {
        Ok(batch) => Ok(install(spa, batch)),
        Err(step) => Ok(step),
    }
}

/// A batch gathered and issued, with the scan and generation it was gathered for.
struct Batch {
    gen: u64,
    pass: u64,
    g: Gathered,
    issued: Issued,
}

/// Steps 1–3: takes a view and the cursor, gathers a batch from the view and issues it (no pool
/// lock held meanwhile). `Err(step)` when there is nothing to do now.
fn take_batch(spa: &Arc<Spa>, lim: Limits) -> Result<std::result::Result<Batch, Step>> {
    // `zfs_scan_suspend_progress`: the scan stays open but issues nothing (read before the
    // lock: it is a file).
    let suspended = crate::tunables::scan_suspend_progress();
    // 1. A view and the cursor, under the writer lock.
    let (view, (gen, pass), phys, queue, reader, tops) = {
        let w = spa.writer_locked();
        if !w.scan.phys.is_scanning() || w.scan.phys.is_paused() || spa.is_closed() {
            return Ok(Err(Step::Stop));
        }
        if !spa.is_active() || suspended {
            return Ok(Err(Step::Wait));
        }
        let ub = w.uberblock.clone().ok_or_else(|| PoolError::Io("no uberblock".into()))?;
        let root = BlkPtr::parse(&ub.rootbp_raw, ondisk::ByteOrder::Little)?;
        w.alloc.hold_frees(Some(w.durable_txg() + 1));
        let cursor = (w.scan.gen, w.scan.pass);
        spa.scan_batch_live.fetch_add(1, Ordering::SeqCst);
        let tops = BatchTree { spa, tops: w.tops.clone() };
        (root, cursor, w.scan.phys.clone(), w.scan.queue.clone(), w.reader.clone(), tops)
    };
    // Whatever happens from here (an error, a panic in the walk or the reads), the hold
    // must not outlive the batch, or freed space would never become allocatable again; once
    // the batch is issued nothing of it is read or repaired any more, and it goes.
    let _hold = HoldGuard { spa };
    // 2. Gather a batch from the view, no lock held.
    let mos =
        Objset::open(&reader, &view).map_err(|e| PoolError::Io(format!("scan: cannot read the MOS: {e}")))?;
    // A resilver issues what the DTLs say is missing; with no DTL to go by (`zpool
    // resilver` of a pool whose devices miss nothing), everything, as a scrub.
    let need = (phys.func == ScanFunc::Resilver as u64)
        .then(|| resilver_need(&tops.tops))
        .filter(|n| n.iter().any(|d| !d.is_empty()));
    let mut walk = Walk {
        reader: &reader,
        mos: &mos,
        lim,
        g: Gathered { items: Vec::new(), phys, queue, examined: 0, finished: false },
        bytes: 0,
        need,
    };
    walk.run(&mos);
    let mut g = walk.g;
    // 3. Issue it.
    let aborts = [&spa.scan_abort, &spa.scan_retree];
    let issued = issue(&tops.tops, &reader, std::mem::take(&mut g.items), lim.threads, &aborts);
    drop(tops);
    if spa.scan_abort.load(Ordering::Relaxed) {
        // The pool closed: this batch's progress is not installed.
        return Ok(Err(Step::Stop));
    }
    if issued.cut_short.load(Ordering::Relaxed) {
        // A leaf left the tree: the walk is done again from the bookmark, on the new tree
        // (the reads and repairs done stand).
        return Ok(Err(Step::More));
    }
    Ok(Ok(Batch { gen, pass, g, issued }))
}

/// Step 4: installs a batch's progress under the writer lock; a finished scan ends (DTLs,
/// replaces done, another resilver if leaves still miss txgs).
fn install(spa: &Arc<Spa>, b: Batch) -> Step {
    let mut w = spa.writer_locked();
    if !w.scan.phys.is_scanning() {
        return Step::Stop;
    }
    if w.scan.pass != b.pass {
        // A new scan replaced the one this batch belongs to (a resilver started over): its
        // reads and repairs are done, but they are not the new scan's, which covers them
        // again from the start.
        return Step::More;
    }
    let g = b.g;
    let (iss, rep) = (b.issued.issued.load(Ordering::Relaxed), b.issued.repaired.load(Ordering::Relaxed));
    let errs = std::mem::take(&mut *lock(&b.issued.errors));
    let nerr = errs.len() as u64;
    {
        let mut run = spa.scan_run();
        run.status.issued += iss;
        run.status.pass_issued += iss;
        run.status.pass_examined += g.examined;
        run.errors.extend(errs);
    }
    let now = (w.now)();
    let s = &mut w.scan;
    s.phys.processed += rep;
    s.phys.errors += nerr;
    if s.gen == b.gen {
        s.phys.examined += g.examined;
        s.phys.bookmark = g.phys.bookmark;
        s.phys.cur_min_txg = g.phys.cur_min_txg;
        s.phys.cur_max_txg = g.phys.cur_max_txg;
        s.queue = g.queue;
        if g.finished {
            s.phys.state = state::FINISHED;
            s.phys.end_time = now;
        }
    }
    w.scan.dirty = true;
    let done = !w.scan.phys.is_scanning();
    let (detached, again) = if done { scan_done(&mut w) } else { (false, false) };
    if done {
        spa.clear_data_errors();
    }
    if detached {
        spa.refresh_view(&w);
    }
    drop(w);
    // The progress (and a finished scan's result and DTLs) is the open txg's: the next sync
    // writes it (an export always does). The scan forces no sync of its own, so it never
    // makes changes durable that nobody asked to sync yet — except a finished replace: its
    // detach changes the configuration, and OpenZFS's `spa_vdev_resilver_done` detaches in
    // a txg of its own and waits for it (`spa_vdev_exit`). The scan thread syncs it before
    // it leaves, so `zpool wait` and `replace -w` return with the old device gone from
    // `status` (which shows the durable tree) and from the labels.
    spa.mark_dirty();
    if !done {
        return Step::More;
    }
    if detached {
        if let Err(e) = spa.sync_or_fail() {
            eprintln!("rzfsd: pool '{}': syncing a finished replace: {e}", spa.name());
        }
    }
    if again {
        spa.request_resilver();
    }
    Step::Stop
}

/// A scan just finished: DTLs excised, replaces whose new device is whole done. Returns
/// (a device was detached, another resilver is needed).
fn scan_done(w: &mut PoolWriter) -> (bool, bool) {
    w.scan_ended(true);
    let (max_txg, errors) = (w.scan.phys.max_txg, w.scan.phys.errors);
    w.dtl_scan_done(max_txg, errors);
    let mut detached = false;
    // Replacements whose new device is now whole are done: the old one goes.
    if errors == 0 {
        match w.resilver_done() {
            Ok(gone) => {
                detached = !gone.is_empty();
                for p in gone {
                    eprintln!("rzfsd: pool '{}': replace done, {p} detached", w.name);
                }
            }
            Err(e) => eprintln!("rzfsd: pool '{}': finishing a replace: {e}", w.name),
        }
    }
    // Leaves that were away for part of this scan still miss txgs: resilver again (unless
    // the scan found damage it could not repair: another pass would too).
    (detached, errors == 0 && w.resilver_range().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phys_words_round_trip_in_openzfs_order() {
        let p = ScanPhys {
            func: 1,
            state: state::SCANNING,
            queue_obj: 77,
            max_txg: 9,
            examined: 4096,
            bookmark: [54, 3, 0, 12],
            flags: DSF_SCRUB_PAUSED,
            ..ScanPhys::default()
        };
        let w = p.to_words();
        assert_eq!(w.len(), SCAN_PHYS_NUMINTS);
        assert_eq!((w[0], w[1], w[2], w[4], w[10]), (1, 1, 77, 9, 4096));
        assert_eq!(&w[19..23], &[54, 3, 0, 12]);
        assert_eq!(w[23], DSF_SCRUB_PAUSED);
        assert_eq!(ScanPhys::from_words(&w), Some(p.clone()));
        assert!(p.is_paused());
        assert_eq!(ScanPhys::from_words(&w[..23]), None);
    }

    #[test]
    fn snapshots_and_destroys_move_the_queue() {
        let mut s = ScanState::default();
        s.phys.state = state::SCANNING;
        s.queue.insert(10, 5);
        s.phys.bookmark = [20, 7, 0, 3];
        // A queued head is snapshotted: the snapshot takes its place.
        s.ds_snapshotted(10, 11);
        assert_eq!(s.queue.get(&11), Some(&5));
        assert!(!s.queue.contains_key(&10));
        // The head being walked is snapshotted: the bookmark follows.
        s.ds_snapshotted(20, 21);
        assert_eq!(s.phys.bookmark, [21, 7, 0, 3]);
        // A queued snapshot is destroyed: its next snapshot inherits the entry.
        let phys = DslDatasetPhys { next_snap_obj: 12, ..DslDatasetPhys::default() };
        s.ds_destroyed(11, &phys);
        assert_eq!(s.queue.get(&12), Some(&5));
        // The current head is destroyed: the walk goes on with the queue.
        s.ds_destroyed(21, &DslDatasetPhys::default());
        assert_eq!(s.phys.bookmark[0], ZB_DESTROYED_OBJSET);
        assert_eq!(s.gen, 4);
        assert!(s.dirty);
        // No scan: nothing moves.
        let mut idle = ScanState::default();
        idle.queue.insert(1, 1);
        idle.ds_snapshotted(1, 2);
        assert!(idle.queue.contains_key(&1) && !idle.dirty);
    }

    /// A resilver that starts over (a second device back while the first one's batch was
    /// out) must not count the abandoned batch: its repairs are not the new scan's, which
    /// covers them again. Found by the fault atlas, whose `stale` mirror3 case saw status
    /// report a two-device resilver as three or four devices' worth.
    #[test]
    fn a_batch_of_a_replaced_scan_counts_nothing() {
        use crate::add::tests::{create, devices};
        use crate::txg::{FailMode, Tunables};
        use std::os::unix::fs::FileExt;
        let (dir, l) = devices("scan-pass", 2);
        let leg = l[0].path.clone();
        let mut w = create("scanpass", vec![crate::create::NewTop::Mirror(l)]);
        let obj = w.mos.alloc_object(
            ondisk::dmu_types::DmuObjectType::ObjectArray.to_u8(),
            128 << 10,
            0,
            Vec::new(),
        );
        w.mos.write(obj.unwrap(), 0, &vec![0x5a; 2 << 20]).unwrap();
        w.sync().unwrap();
        // One leg loses what the pool wrote (past the front labels): a scrub repairs it.
        let f = std::fs::OpenOptions::new().write(true).open(&leg).unwrap();
        f.write_all_at(&vec![0xa5; 8 << 20], 4 << 20).unwrap();
        let tun = Tunables { txg_timeout: std::time::Duration::from_secs(3600), ..Default::default() };
        let spa = Spa::start(w, tun, FailMode::Wait);
        let lim = Limits { max_items: 1 << 20, max_bytes: 1 << 30, threads: 2, delay: Default::default() };
        spa.writer_locked().scan_setup(ScanFunc::Scrub).unwrap();
        let old = take_batch(&spa, lim).unwrap().unwrap();
        assert!(old.issued.repaired.load(Ordering::Relaxed) > 0, "the batch repaired nothing");
        // The scan is replaced before the batch is installed.
        spa.writer_locked().scan_setup(ScanFunc::Scrub).unwrap();
        assert_eq!(install(&spa, old), Step::More);
        let phys = spa.writer_locked().scan.phys.clone();
        assert_eq!((phys.processed, phys.examined, phys.state), (0, 0, state::SCANNING), "{phys:?}");
        // The new scan's own batch counts (the old one left nothing to repair).
        let new = take_batch(&spa, lim).unwrap().unwrap();
        assert_eq!(install(&spa, new), Step::Stop);
        let phys = spa.writer_locked().scan.phys.clone();
        assert!(phys.examined > 0 && phys.processed == 0 && phys.state == state::FINISHED, "{phys:?}");
        spa.export(false, false).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
