//! # pool::txg — the one owner of a pool's open txg
//!
//! Theory. A pool imported read-write is one [`Spa`]: it owns the [`PoolWriter`] (the open
//! txg, the allocator, the devices) behind a private lock, runs the sync thread, applies the
//! tunables, and decides what happens when a sync fails. Everything that changes the pool
//! comes through it:
//! * file system changes through [`Spa::with_dataset`] (the open txg of one dataset, after
//!   the space check of [`crate::space`]);
//! * administrative changes as sync tasks through [`Spa::sync_task`] (OpenZFS
//!   `dsl_sync_task`: checked in open context, applied in syncing context, all or nothing);
//! * durability through [`Spa::sync_now`] (`fsync`, `syncfs`, `txg_wait_synced`).
//!
//! States (`Mode`):
//! 1. **Active** — syncs run every `txg_timeout`, when dirty data passes `dirty_max`, or
//!    when asked.
//! 2. **Suspended** — a sync failed twice in a row (each failure undone, see
//!    [`crate::writer`]), or its uberblock could not be written. Nothing is synced until
//!    [`Spa::clear`] (`zpool clear`) succeeds in syncing; the open txg keeps every change
//!    in memory. New changes and `fsync` wait (`failmode=wait`, the default) or fail with
//!    `EIO` (`failmode=continue`); reads go on. `failmode=panic` is treated as `wait`: a
//!    userspace daemon does not panic the machine. A panic while changing the open txg
//!    also suspends the pool, *poisoned*: its memory can no longer be trusted, so it is
//!    never synced again; only a forced export (then a new import) leaves that state.
//! 3. **Closed** — exported (after a last successful sync), or fenced by a forced export:
//!    every later call fails and no I/O reaches the devices.
//!
//! Lock order: the state lock is never held while taking the writer lock; the writer lock
//! may be held while taking the state lock briefly.

use crate::space::{self, Layout, Reserve, SpaceCheck};
use crate::writer::{DatasetWriter, PoolWriter, SyncTask};
use crate::{PoolError, Result};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a pool does when its devices fail writes (`failmode` pool property).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// Block changes and `fsync` until `zpool clear` resumes the pool (the default).
    Wait,
    /// Fail changes and `fsync` with EIO while suspended; reads go on.
    Continue,
}

impl FailMode {
    /// From the stored property value (0 wait, 1 continue, 2 panic → wait).
    pub fn from_prop(v: u64) -> FailMode {
        if v == 1 {
            FailMode::Continue
        } else {
            FailMode::Wait
        }
    }
}

/// The knobs of a pool's txgs (OpenZFS module parameters of the same meaning).
#[derive(Clone, Debug)]
pub struct Tunables {
    /// Dirty data of the open txg that makes a writer sync it (`zfs_dirty_data_max`).
    pub dirty_max: u64,
    /// How long changes wait before the sync thread writes them (`zfs_txg_timeout`).
    pub txg_timeout: Duration,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables { dirty_max: 64 << 20, txg_timeout: Duration::from_secs(5) }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Mode {
    Active,
    Suspended { reason: String, poisoned: bool },
    Closed { reason: String },
}

struct State {
    mode: Mode,
    failmode: FailMode,
    /// Results of finished sync tasks not yet collected by their callers.
    results: BTreeMap<u64, Result<()>>,
    /// When the open txg first became dirty (for the timeout).
    dirty_since: Option<Instant>,
}

/// The pool's health as the txg owner sees it, for `zpool status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpaHealth {
    Active,
    Suspended { reason: String, poisoned: bool },
    Closed,
}

/// A callback run after every successful sync with the committed writer (the daemon
/// refreshes its read-only view of the pool there). It must not call back into the [`Spa`].
pub type OnSynced = Box<dyn Fn(&PoolWriter) + Send + Sync>;

/// A pool imported read-write: the owner of its open txg.
pub struct Spa {
    name: String,
    w: Mutex<PoolWriter>,
    st: Mutex<State>,
    cv: Condvar,
    tun: Tunables,
    on_synced: Mutex<Option<OnSynced>>,
    next_task: AtomicU64,
    /// A panic armed by fault injection (`rzinject -p`): the next change panics inside the
    /// open txg, to test what a real bug there does.
    panic_armed: std::sync::atomic::AtomicBool,
    /// The scan's memory-only state (counters of this pass, errors found, thread running).
    scan_run: Mutex<crate::scan::ScanRun>,
    /// `zpool freeze` (a debugging aid, as OpenZFS's `spa_freeze`): nothing after the txg
    /// synced at the freeze reaches the devices. Changes go on in memory (unbounded) and
    /// are dropped at export, which leaves the labels as a crash would (state active).
    frozen: std::sync::atomic::AtomicBool,
    /// Permanent errors met by reads outside a scan (a file's block no copy of which
    /// verifies, read through a mount): (dataset object, object, what failed), once each.
    /// OpenZFS logs every such read in its error list; `status -v` shows them with the
    /// scan's own until a completed scan, which meets whatever is still damaged itself.
    data_errors: Mutex<Vec<(u64, u64, String)>>,
    scan_cv: Condvar,
    /// Set when the pool closes: a scan batch under way stops issuing (so the thread lets go
    /// of the pool, and with it the devices, promptly).
    pub(crate) scan_abort: std::sync::atomic::AtomicBool,
    /// Set while a device leaves the tree (`zpool detach`): the batch under way stops
    /// issuing and is not installed (its walk is done again on the new tree).
    pub(crate) scan_retree: std::sync::atomic::AtomicBool,
    /// Scan batches holding a copy of the vdev tree (0 or 1): the devices of a detached leaf
    /// are closed, and its exclusive lock let go, only once none does.
    pub(crate) scan_batch_live: std::sync::atomic::AtomicUsize,
    /// Each leaf's state as last reported (`resource.fs.zfs.statechange` events).
    leaf_states: Mutex<BTreeMap<u64, vdev::VdevState>>,
}

/// The open txg of one dataset, lent to a change.
pub struct DatasetTx<'a> {
    pub ds: &'a mut DatasetWriter,
    /// The open txg (generation numbers of new znodes).
    pub txg: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Syncs a txg a writer short of space may force to release deferred frees.
const FORCED_TXGS_FOR_SPACE: usize = metaslab::TXG_DEFER_SIZE as usize + 1;

impl Spa {
    /// Takes ownership of `w` and starts its sync thread.
    pub fn start(w: PoolWriter, tun: Tunables, failmode: FailMode) -> Arc<Spa> {
        let spa = Arc::new(Spa {
            name: w.name.clone(),
            w: Mutex::new(w),
            st: Mutex::new(State {
                mode: Mode::Active,
                failmode,
                results: BTreeMap::new(),
                dirty_since: None,
            }),
            cv: Condvar::new(),
            tun,
            on_synced: Mutex::new(None),
            next_task: AtomicU64::new(1),
            panic_armed: std::sync::atomic::AtomicBool::new(false),
            scan_run: Mutex::new(crate::scan::ScanRun::default()),
            data_errors: Mutex::new(Vec::new()),
            frozen: std::sync::atomic::AtomicBool::new(false),
            scan_cv: Condvar::new(),
            scan_abort: std::sync::atomic::AtomicBool::new(false),
            scan_retree: std::sync::atomic::AtomicBool::new(false),
            scan_batch_live: std::sync::atomic::AtomicUsize::new(0),
            leaf_states: Mutex::new(BTreeMap::new()),
        });
        let weak = Arc::downgrade(&spa);
        std::thread::Builder::new()
            .name(format!("txg_sync {}", spa.name))
            .spawn(move || sync_thread(weak))
            .expect("spawning the sync thread");
        // A scan the pool was exported or crashed in the middle of goes on (OpenZFS resumes
        // it at import too), unless it was paused.
        let resume = {
            let w = lock(&spa.w);
            // What earlier passes examined was issued too (OpenZFS's issued-before-pass).
            lock(&spa.scan_run).status.issued =
                if w.scan.phys.is_scanning() { w.scan.phys.examined } else { 0 };
            w.scan.phys.is_scanning() && !w.scan.phys.is_paused()
        };
        if resume {
            spa.spawn_scan();
        } else {
            // Leaves that miss txgs (offline, absent or failing at the last export) and can
            // take writes again are resilvered, as OpenZFS does at import.
            spa.request_resilver();
        }
        // Devices missing at import get a hot spare (or, with autoreplace, the new device
        // at their path), as zed would do.
        spa.retire_check();
        spa
    }

    /// The writer, locked (for the scan thread).
    pub(crate) fn writer_locked(&self) -> MutexGuard<'_, PoolWriter> {
        lock(&self.w)
    }

    /// Is the pool neither suspended nor closed?
    pub(crate) fn is_active(&self) -> bool {
        matches!(lock(&self.st).mode, Mode::Active)
    }

    /// Notes that the open txg has changes for the sync thread to write.
    pub(crate) fn mark_dirty(&self) {
        self.note_dirty();
    }

    pub(crate) fn scan_run(&self) -> MutexGuard<'_, crate::scan::ScanRun> {
        lock(&self.scan_run)
    }

    pub(crate) fn wake_scan_waiters(&self) {
        self.scan_cv.notify_all();
    }

    /// Starts the scan thread unless one runs.
    fn spawn_scan(self: &Arc<Self>) {
        {
            let mut run = lock(&self.scan_run);
            if run.running {
                return;
            }
            run.running = true;
            let now = crate::writer::now_secs();
            if run.status.pass_paused_at != 0 {
                run.status.pass_spent_paused += now.saturating_sub(run.status.pass_paused_at);
                run.status.pass_paused_at = 0;
            }
            if run.status.pass_start == 0 {
                run.status.pass_start = now;
            }
        }
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("scan {}", self.name))
            .spawn(move || crate::scan::scan_thread(weak));
        if spawned.is_err() {
            lock(&self.scan_run).running = false;
        }
    }

    /// `zpool scrub` / `zpool resilver`: starts a scan, or resumes a paused scrub. Refused
    /// while a scan of the same kind runs (OpenZFS: "currently scrubbing").
    pub fn scan_start(self: &Arc<Self>, func: crate::scan::ScanFunc) -> Result<()> {
        use crate::scan::{ScanFunc, DSF_SCRUB_PAUSED};
        // Set by the task when it only unpauses a scrub (its counters then carry on).
        let resumed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r2 = resumed.clone();
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| {
                let p = &w.scan.phys;
                if p.is_scanning() && !(p.is_paused() && func == ScanFunc::Scrub) {
                    let what = if p.func == ScanFunc::Resilver as u64 { "resilvering" } else { "scrubbing" };
                    if func == ScanFunc::Scrub || p.func == ScanFunc::Resilver as u64 {
                        return Err(PoolError::Busy(format!(
                            "currently {what}; use 'zpool scrub -s' to cancel the current scrub"
                        )));
                    }
                }
                Ok(())
            },
            move |w| {
                if w.scan.phys.is_paused() && func == ScanFunc::Scrub {
                    w.scan.phys.flags &= !DSF_SCRUB_PAUSED;
                    w.scan.dirty = true;
                    w.event("scrub_resume", None);
                    r2.store(true, Ordering::SeqCst);
                    return Ok(());
                }
                w.scan_setup(func)
            },
        )?;
        if !resumed.load(Ordering::SeqCst) {
            self.reset_scan_run();
        }
        // A thread still finishing the previous scan's batch sees the new state and goes on.
        self.spawn_scan();
        Ok(())
    }

    /// A new scan starts: this pass's counters and errors start over.
    fn reset_scan_run(&self) {
        let mut run = lock(&self.scan_run);
        let running = run.running;
        run.status = crate::scan::ScanStatus::default();
        run.errors.clear();
        run.running = running;
    }

    /// Starts a resilver when some writable leaf misses txgs (its DTL is not empty): after
    /// `zpool online`, `zpool clear`, an import, or a scan that could not cover a leaf that
    /// was away. A resilver already running starts over to cover the new txgs too, and a
    /// scrub gives way to it (as OpenZFS's `dsl_scan_restart_resilver` without
    /// resilver_defer). The new scan state is the open txg's, written by whatever sync comes
    /// next: a request forces no sync of its own (OpenZFS sets the restart up in syncing
    /// context too).
    ///
    /// When nothing needs resilvering and no resilver runs, replaces whose new device is
    /// already whole are finished instead (OpenZFS's `spa_scan` asks its async thread for
    /// `spa_vdev_resilver_done` then): a pool whose resilver another system completed
    /// (OpenZFS ends it but detaches only later, in its async thread, which an export
    /// cancels) would otherwise keep its `replacing` vdev forever.
    pub fn request_resilver(self: &Arc<Self>) {
        {
            let mut w = lock(&self.w);
            if !self.is_active() {
                return;
            }
            if w.resilver_range().is_none() {
                let resilvering =
                    w.scan.phys.is_scanning() && w.scan.phys.func == crate::scan::ScanFunc::Resilver as u64;
                if resilvering {
                    return;
                }
                let gone = match w.resilver_done() {
                    Ok(g) => g,
                    Err(e) => {
                        eprintln!("rzfsd: pool '{}': finishing a replace: {e}", self.name);
                        return;
                    }
                };
                if gone.is_empty() {
                    return;
                }
                for p in &gone {
                    eprintln!("rzfsd: pool '{}': replace done, {p} detached", self.name);
                }
                self.refresh_view(&w);
                drop(w);
                self.mark_dirty();
                if let Err(e) = self.sync_or_fail() {
                    eprintln!("rzfsd: pool '{}': syncing a finished replace: {e}", self.name);
                }
                return;
            }
            if let Err(e) = w.scan_setup(crate::scan::ScanFunc::Resilver) {
                eprintln!("rzfsd: pool '{}': cannot start a resilver: {e}", self.name);
                return;
            }
        }
        self.note_dirty();
        self.reset_scan_run();
        self.spawn_scan();
    }

    /// `zpool scrub -p`: pauses the running scrub (its place is kept in the MOS).
    pub fn scan_pause(&self) -> Result<()> {
        use crate::scan::{ScanFunc, DSF_SCRUB_PAUSED};
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| {
                let p = &w.scan.phys;
                if !p.is_scanning() || p.func != ScanFunc::Scrub as u64 {
                    return Err(PoolError::Invalid("there is no active scrub".into()));
                }
                if p.is_paused() {
                    return Err(PoolError::Invalid("scrub is already paused".into()));
                }
                Ok(())
            },
            |w| {
                w.scan.phys.flags |= DSF_SCRUB_PAUSED;
                w.scan.dirty = true;
                w.event("scrub_paused", None);
                Ok(())
            },
        )?;
        lock(&self.scan_run).status.pass_paused_at = crate::writer::now_secs();
        self.scan_cv.notify_all();
        Ok(())
    }

    /// `zpool scrub -s`: cancels the running scan (`dsl_scan_cancel`).
    pub fn scan_cancel(&self) -> Result<()> {
        self.sync_task(
            SpaceCheck::Reserved,
            Reserve::Meta,
            |w| {
                if !w.scan.phys.is_scanning() {
                    return Err(PoolError::Invalid("there is no active scrub".into()));
                }
                Ok(())
            },
            |w| {
                w.scan.phys.state = crate::scan::state::CANCELED;
                w.scan.phys.end_time = (w.now)();
                w.scan.phys.flags &= !crate::scan::DSF_SCRUB_PAUSED;
                w.scan.queue.clear();
                w.scan.dirty = true;
                w.scan_ended(false);
                Ok(())
            },
        )?;
        self.scan_cv.notify_all();
        Ok(())
    }

    /// The scan as `zpool status` shows it (`None`: never scanned).
    pub fn scan_status(&self) -> Option<crate::scan::ScanStatus> {
        let phys = lock(&self.w).scan.phys.clone();
        if phys.func == crate::scan::ScanFunc::None as u64 {
            return None;
        }
        let mut st = lock(&self.scan_run).status.clone();
        st.phys = phys;
        Some(st)
    }

    /// Permanent errors the scan found: (dataset object, object, detail).
    pub fn scan_errors(&self) -> Vec<(u64, u64, String)> {
        lock(&self.scan_run).errors.clone()
    }

    /// Most reads' errors kept: a disk gone bad under a large file must not grow the list
    /// without bound (OpenZFS's error list has one entry per damaged block too, but on disk).
    const DATA_ERRORS_MAX: usize = 4096;

    /// Records a permanent error a read outside the scan met (see `data_errors`).
    pub fn record_data_error(&self, ds: u64, object: u64, detail: String) {
        let mut v = lock(&self.data_errors);
        if v.len() < Self::DATA_ERRORS_MAX && !v.iter().any(|(d, o, _)| *d == ds && *o == object) {
            v.push((ds, object, detail));
        }
    }

    /// Permanent errors reads outside a scan met since import or the last completed scan:
    /// (dataset object, object, detail).
    pub fn data_errors(&self) -> Vec<(u64, u64, String)> {
        lock(&self.data_errors).clone()
    }

    /// A completed scan read every block: what reads met before is either in its own list
    /// now or no longer damaged.
    pub(crate) fn clear_data_errors(&self) {
        lock(&self.data_errors).clear();
    }

    /// Drops the permanent errors (the scan's and the reads') `gone(dataset object,
    /// object)` says were healed.
    pub fn forget_scan_errors(&self, gone: impl Fn(u64, u64) -> bool) {
        lock(&self.scan_run).errors.retain(|(ds, obj, _)| !gone(*ds, *obj));
        lock(&self.data_errors).retain(|(ds, obj, _)| !gone(*ds, *obj));
    }

    /// Waits until no scan runs (finished, cancelled or paused): `zpool scrub -w`,
    /// `zpool wait -t scrub`. Fails if the pool goes away meanwhile.
    pub fn scan_wait(&self) -> Result<()> {
        loop {
            // Lock order: the writer before the scan's state, never the other way round.
            let active = {
                let w = lock(&self.w);
                w.scan.phys.is_scanning() && !w.scan.phys.is_paused()
            };
            if let Mode::Closed { reason } = &lock(&self.st).mode {
                return Err(PoolError::Io(reason.clone()));
            }
            let run = lock(&self.scan_run);
            // Done once the thread is gone too: it syncs the scan's end (and a replace's
            // detach) before it leaves.
            if !active && !run.running {
                return Ok(());
            }
            // Nothing makes progress while the pool is suspended: do not hang forever.
            if active && !self.is_active() {
                return Err(PoolError::Suspended(
                    "the pool is suspended; the scan waits for 'zpool clear'".into(),
                ));
            }
            drop(
                self.scan_cv
                    .wait_timeout(run, Duration::from_millis(200))
                    .unwrap_or_else(|p| p.into_inner())
                    .0,
            );
        }
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the callback run after every successful sync.
    pub fn set_on_synced(&self, f: OnSynced) {
        *lock(&self.on_synced) = Some(f);
    }

    /// Runs the view callback now: for the owner that registers its callback after
    /// [`Spa::start`], whose import-time work (a finished replace detached, a spare
    /// stepping in) may already have synced without anyone to tell.
    pub fn refresh_view_now(&self) {
        let w = lock(&self.w);
        self.refresh_view(&w);
    }

    /// Runs the view callback without a sync: the tree changed in memory (a replace
    /// finished, a spare stepped in) and `status` should show it now; the MOS it shows is
    /// still the last durable one.
    pub(crate) fn refresh_view(&self, w: &PoolWriter) {
        if let Some(cb) = lock(&self.on_synced).as_ref() {
            cb(w);
        }
    }

    /// Posts the vdevs' error reports, then a state-change event for every leaf whose
    /// state changed since the last look (a fault follows the errors that caused it).
    /// Returns whether a state changed.
    pub fn post_state_changes(&self) -> bool {
        let failmode = match lock(&self.st).failmode {
            FailMode::Wait => "wait",
            FailMode::Continue => "continue",
        };
        let w = lock(&self.w);
        w.post_error_reports(failmode);
        w.post_state_changes(&mut lock(&self.leaf_states))
    }

    /// Changes the failure mode (`zpool set failmode=`).
    pub fn set_failmode(&self, f: FailMode) {
        lock(&self.st).failmode = f;
        self.cv.notify_all();
    }

    /// The pool's state.
    pub fn health(&self) -> SpaHealth {
        match &lock(&self.st).mode {
            Mode::Active => SpaHealth::Active,
            Mode::Suspended { reason, poisoned } => {
                SpaHealth::Suspended { reason: reason.clone(), poisoned: *poisoned }
            }
            Mode::Closed { .. } => SpaHealth::Closed,
        }
    }

    /// Runs `f` on the writer with nothing else changing the pool meanwhile, without any
    /// admission check: for reading the open txg (properties, listings) and for the
    /// integration of layers above (the ZPL's per-dataset state). `f` must not sync.
    pub fn read<R>(&self, f: impl FnOnce(&mut PoolWriter) -> R) -> R {
        f(&mut lock(&self.w))
    }

    /// Waits while the pool is suspended with failmode=wait; fails when it is closed, or
    /// suspended with failmode=continue (or poisoned).
    fn admit(&self) -> Result<()> {
        let mut st = lock(&self.st);
        loop {
            match &st.mode {
                Mode::Active => return Ok(()),
                Mode::Closed { reason } => return Err(PoolError::Io(reason.clone())),
                Mode::Suspended { reason, poisoned } => {
                    if *poisoned || st.failmode == FailMode::Continue {
                        return Err(PoolError::Suspended(reason.clone()));
                    }
                }
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Fails unless the pool is active (no waiting): for administrative commands, which
    /// should answer rather than hang.
    pub(crate) fn check_active(&self) -> Result<()> {
        match &lock(&self.st).mode {
            Mode::Active => Ok(()),
            Mode::Closed { reason } => Err(PoolError::Io(reason.clone())),
            Mode::Suspended { reason, .. } => Err(PoolError::Suspended(reason.clone())),
        }
    }

    /// Runs a change on the open txg of dataset `ds` (opened with
    /// [`PoolWriter::open_dataset`]): admission (suspension, space for `reserve` within
    /// `check`), the change, then the write throttle. `Reserve::None` marks a read: no
    /// admission, no throttle.
    pub fn with_dataset<R>(
        &self,
        ds: u64,
        check: SpaceCheck,
        reserve: Reserve,
        f: impl FnOnce(DatasetTx<'_>) -> Result<R>,
    ) -> Result<R> {
        self.with_dataset_held(ds, check, reserve, true, f)
    }

    /// [`Spa::with_dataset`] for `zfs receive`, whose writes are not held to the head's
    /// `refquota`: OpenZFS receives into a clone (`FS/%recv`) whose dataset has none of its
    /// own, and sets a received refquota only after the data. Quotas of directories still
    /// apply.
    pub fn with_dataset_receiving<R>(
        &self,
        ds: u64,
        reserve: Reserve,
        f: impl FnOnce(DatasetTx<'_>) -> Result<R>,
    ) -> Result<R> {
        self.with_dataset_held(ds, SpaceCheck::Normal, reserve, false, f)
    }

    fn with_dataset_held<R>(
        &self,
        ds: u64,
        check: SpaceCheck,
        reserve: Reserve,
        refquota: bool,
        f: impl FnOnce(DatasetTx<'_>) -> Result<R>,
    ) -> Result<R> {
        let changes = reserve != Reserve::None;
        if changes {
            self.admit()?;
        } else if let Mode::Closed { reason } = &lock(&self.st).mode {
            return Err(PoolError::Io(reason.clone()));
        }
        let mut w = lock(&self.w);
        if changes {
            let (recordsize, copies) =
                w.datasets.get(&ds).map_or((128 << 10, 1), |d| (d.recordsize, d.policy.copies));
            let reserve = match reserve {
                Reserve::Write { len, block: 0 } => Reserve::Write { len, block: recordsize },
                r => r,
            };
            self.reserve(&mut w, check, reserve, copies)?;
            // Changes that free space are not held to quotas: a dataset over its quota
            // can always be emptied.
            if check == SpaceCheck::Normal {
                self.check_quotas(&mut w, ds, refquota)?;
            }
        }
        let txg = w.txg;
        let d = w
            .datasets
            .get_mut(&ds)
            .ok_or_else(|| PoolError::Io(format!("dataset object {ds} is not open for writing")))?;
        let armed = changes && self.panic_armed.swap(false, Ordering::SeqCst);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let r = f(DatasetTx { ds: d, txg });
            if armed {
                panic!("injected panic (rzinject -p) after a change of dataset object {ds}");
            }
            r
        }));
        let r = match r {
            Ok(r) => r,
            Err(p) => {
                let what = panic_text(&p);
                drop(w);
                self.poison(&format!("internal error while changing dataset object {ds}: {what}"));
                return Err(PoolError::Io(format!("internal error: {what}")));
            }
        };
        if changes {
            self.note_dirty();
            if w.dirty_bytes() > self.tun.dirty_max {
                // The change is in the open txg whatever the sync does: a failed sync is
                // undone and keeps it, and the pool suspends (which later changes see).
                let _ = self.sync_locked(&mut w);
            }
        }
        r
    }

    /// Runs `f` on the writer in open context after admission (for the few changes that
    /// are neither dataset changes nor sync tasks: opening datasets, pool history).
    pub fn with_writer<R>(&self, f: impl FnOnce(&mut PoolWriter) -> Result<R>) -> Result<R> {
        self.admit()?;
        let mut w = lock(&self.w);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut w)));
        match r {
            Ok(r) => {
                if w.is_dirty() {
                    self.note_dirty();
                }
                r
            }
            Err(p) => {
                let what = panic_text(&p);
                drop(w);
                self.poison(&format!("internal error: {what}"));
                Err(PoolError::Io(format!("internal error: {what}")))
            }
        }
    }

    /// Runs a change that syncs by itself, over several txgs (`zpool add`), with the writer
    /// locked. When it fails with a txg committed but not durable, the pool suspends.
    pub fn run_syncing<R>(&self, f: impl FnOnce(&mut PoolWriter) -> Result<R>) -> Result<R> {
        self.check_active()?;
        let mut w = lock(&self.w);
        let r = f(&mut w);
        self.collect_results(&mut w);
        match &r {
            Ok(_) => {
                if let Some(cb) = lock(&self.on_synced).as_ref() {
                    cb(&w);
                }
            }
            Err(e) if !w.is_durable() => self.suspend(&format!("txg {} could not be written: {e}", w.txg)),
            Err(_) => {}
        }
        r
    }

    /// Checks that `reserve` fits on top of what the open txg already reserved; syncs txgs
    /// to release space that is waiting to become free before giving up with ENOSPC.
    fn reserve(&self, w: &mut PoolWriter, check: SpaceCheck, reserve: Reserve, copies: u8) -> Result<()> {
        let extra = reserve.cost();
        for attempt in 0..=FORCED_TXGS_FOR_SPACE {
            let a = Accounting::of(w);
            let need = a.reserved.saturating_add(a.asize_of(&extra, copies));
            if need <= a.allocatable_for(check) {
                return Ok(());
            }
            // Freed space becomes allocatable two txgs after its free; frees of the open
            // txg need a sync first. Only worth waiting for if it would be enough.
            let waiting = a.deferred.saturating_add(u64::from(w.has_pending_frees()) * a.size);
            if attempt == FORCED_TXGS_FOR_SPACE || a.allocatable_for(check).saturating_add(waiting) < need {
                break;
            }
            self.sync_locked_forced(w)?;
        }
        Err(PoolError::NoSpace(format!("out of space in pool '{}'", self.name)))
    }

    /// Refuses a change of head dataset `ds` that a `quota` above it or its `refquota`
    /// forbids ([`dsl::quota`]: EDQUOT); when only the open txg's estimate is over a limit,
    /// syncs it and asks again.
    fn check_quotas(&self, w: &mut PoolWriter, ds: u64, refquota: bool) -> Result<()> {
        let mut out_of_room = false;
        for _ in 0..=FORCED_TXGS_FOR_SPACE {
            let mut head = head_space(w, ds)?;
            if !refquota {
                head.refquota = 0;
            }
            // What each open dataset's part of the open txg will add, deflated, with the
            // directories it is charged to; computed only if a quota asks for it (most
            // writes have none above them and pay only for reading the directory chain).
            let mut flights: Option<Vec<(Vec<u64>, u64)>> = None;
            let w_ref: &PoolWriter = w;
            let (mos, datasets) = (&w_ref.mos, &w_ref.datasets);
            let mut in_flight = |dir: u64| -> u64 {
                let f = flights.get_or_insert_with(|| {
                    let a = Accounting::of(w_ref);
                    datasets
                        .iter()
                        .map(|(&obj, d)| {
                            let mut c = d.os.cost();
                            c.add(&d.zaps.cost());
                            let bytes = a.deflate(a.asize_of(&c, d.policy.copies));
                            (dir_chain(mos, obj).unwrap_or_default(), bytes)
                        })
                        .collect()
                });
                f.iter().filter(|(chain, _)| chain.contains(&dir)).map(|(_, b)| *b).sum()
            };
            let mut dirs = |d: u64| dsl::write::dir_phys(mos, d);
            match dsl::quota::verdict(&head, &mut in_flight, &mut dirs)? {
                dsl::quota::Verdict::Fits => {
                    if reservations_leave_room(w, &head)? {
                        return Ok(());
                    }
                    // What the open txg holds may be what is counted twice (a dataset
                    // writing into its own reservation): after a sync the answer is exact.
                    if out_of_room {
                        return Err(PoolError::NoSpace(format!(
                            "out of space in pool '{}' (the rest is reserved by other datasets)",
                            self.name
                        )));
                    }
                    out_of_room = true;
                    self.sync_locked_forced(w)?;
                }
                dsl::quota::Verdict::Over(why) => {
                    return Err(PoolError::QuotaExceeded(format!("disk quota exceeded ({why})")));
                }
                dsl::quota::Verdict::Wait => self.sync_locked_forced(w)?,
            }
        }
        Err(PoolError::QuotaExceeded("disk quota exceeded".into()))
    }

    /// Queues a sync task and waits until the txg that runs it is durable. `check` runs
    /// first in open context (cheap validation; nothing may be changed there); `task` then
    /// runs in syncing context (see [`SyncTask`]). `reserve` is checked against `space`.
    pub fn sync_task(
        &self,
        space: SpaceCheck,
        reserve: Reserve,
        check: impl FnOnce(&mut PoolWriter) -> Result<()>,
        task: impl FnMut(&mut PoolWriter) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        self.check_active()?;
        let id = self.next_task.fetch_add(1, Ordering::Relaxed);
        {
            let mut w = lock(&self.w);
            check(&mut w)?;
            self.reserve(&mut w, space, reserve, 1)?;
            w.queue_task(SyncTask { id, run: Box::new(task) });
            let synced = self.sync_locked(&mut w);
            if let Some(r) = lock(&self.st).results.remove(&id) {
                return r.and(synced);
            }
            if let Err(e) = synced {
                // The txg did not make it: the task does not happen.
                w.cancel_task(id);
                lock(&self.st).results.remove(&id);
                return Err(e);
            }
        }
        Err(PoolError::Io("sync task vanished".into()))
    }

    /// Makes everything changed so far durable (`fsync`, `syncfs`): returns only once the
    /// txg holding it is on disk; waits or fails while suspended, per failmode.
    pub fn sync_now(&self) -> Result<()> {
        loop {
            self.admit()?;
            let mut w = lock(&self.w);
            if !w.is_dirty() && w.is_durable() {
                return Ok(());
            }
            match self.sync_locked(&mut w) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    drop(w);
                    if lock(&self.st).failmode == FailMode::Continue {
                        return Err(e);
                    }
                    // failmode=wait: admit() blocks until `zpool clear` resumes the pool.
                }
            }
        }
    }

    /// `fsync` of dataset `ds`: the intent log writes what the open txg changed in files
    /// (see [`crate::zil`]) when it can describe it; otherwise, or when the pool is not
    /// active, the txg is synced as by [`Spa::sync_now`]. With `sync=disabled` nothing is
    /// done (OpenZFS's `zil_commit` returns at once).
    pub fn zil_commit(&self, ds: u64) -> Result<()> {
        if lock(&self.w).datasets.get(&ds).is_some_and(|d| d.zil.sync_mode == crate::zil::SYNC_DISABLED) {
            return Ok(());
        }
        if self.check_active().is_ok() {
            let mut g = lock(&self.w);
            let w = &mut *g;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.zil_commit(ds)));
            match r {
                Ok(Ok(crate::zil::Commit::Done)) => return Ok(()),
                Ok(_) => {}
                Err(p) => {
                    let what = panic_text(&p);
                    drop(g);
                    self.poison(&format!("internal error in the intent log of dataset object {ds}: {what}"));
                    return Err(PoolError::Io(format!("internal error: {what}")));
                }
            }
        }
        self.sync_now()
    }

    /// The intent log counters of dataset `ds` (None when it is not open for writing).
    pub fn zil_stats(&self, ds: u64) -> Option<crate::zil::ZilStats> {
        lock(&self.w).datasets.get(&ds).map(|d| d.zil.stats)
    }

    /// Syncs now and reports failure instead of waiting out a suspension (administrative
    /// callers that must answer: the first txg of an import).
    pub fn sync_or_fail(&self) -> Result<()> {
        self.check_active()?;
        let mut w = lock(&self.w);
        if !w.is_dirty() && w.is_durable() {
            return Ok(());
        }
        self.sync_locked(&mut w)
    }

    fn note_dirty(&self) {
        let mut st = lock(&self.st);
        if st.dirty_since.is_none() {
            st.dirty_since = Some(Instant::now());
        }
    }

    /// Syncs with the writer locked: on success the callback runs; a failure is retried
    /// once (each attempt is undone when it fails), then the pool suspends.
    fn sync_locked(&self, w: &mut PoolWriter) -> Result<()> {
        self.sync_with(w, PoolWriter::sync)
    }

    fn sync_locked_forced(&self, w: &mut PoolWriter) -> Result<()> {
        self.sync_with(w, PoolWriter::sync_forced)
    }

    fn sync_with(&self, w: &mut PoolWriter, sync: fn(&mut PoolWriter) -> Result<()>) -> Result<()> {
        if let Mode::Suspended { reason, .. } | Mode::Closed { reason } = &lock(&self.st).mode {
            return Err(PoolError::Suspended(reason.clone()));
        }
        if self.is_frozen() {
            // Nothing is written; the open txg keeps growing in memory. (Not "dirty since"
            // any more, so the sync thread does not come back every tick.)
            lock(&self.st).dirty_since = None;
            return Ok(());
        }
        let mut r = sync(w);
        if r.is_err() && w.is_durable() {
            // The data half failed and was undone: devices may have recovered, or a leaf
            // may have been faulted and the retry goes around it.
            r = sync(w);
        }
        self.collect_results(w);
        match r {
            Ok(()) => {
                lock(&self.st).dirty_since = None;
                if let Some(cb) = lock(&self.on_synced).as_ref() {
                    cb(w);
                }
                Ok(())
            }
            Err(e) => {
                self.suspend(&format!("txg {} could not be written: {e}", w.txg));
                Err(PoolError::Suspended(e.to_string()))
            }
        }
    }

    fn collect_results(&self, w: &mut PoolWriter) {
        let done = w.take_task_results();
        if !done.is_empty() {
            lock(&self.st).results.extend(done);
            self.cv.notify_all();
        }
    }

    fn suspend(&self, reason: &str) {
        let mut st = lock(&self.st);
        if matches!(st.mode, Mode::Active) {
            eprintln!("rzfsd: pool '{}' suspended: {reason}", self.name);
            st.mode = Mode::Suspended { reason: reason.to_string(), poisoned: false };
        }
        self.cv.notify_all();
    }

    /// A panic left the open txg in an unknown state: suspend for good (see the module
    /// comment).
    fn poison(&self, reason: &str) {
        let mut st = lock(&self.st);
        eprintln!("rzfsd: pool '{}' suspended: {reason}", self.name);
        if !matches!(st.mode, Mode::Closed { .. }) {
            st.mode = Mode::Suspended { reason: reason.to_string(), poisoned: true };
        }
        self.cv.notify_all();
    }

    /// Arms a panic in the next change of the open txg (fault injection, `zinject -p`).
    pub fn inject_panic(&self) {
        self.panic_armed.store(true, Ordering::SeqCst);
    }

    /// Suspends the pool from outside (a panic in a layer above while it held pool state).
    pub fn poison_from(&self, reason: &str) {
        self.poison(reason);
    }

    /// `zpool clear`: resets device error counts and faults, then, if the pool is
    /// suspended, tries to sync; success resumes it.
    pub fn clear(self: &Arc<Self>) -> Result<()> {
        let r = self.clear_faults();
        // Leaves back from a fault resilver the txgs they missed.
        if r.is_ok() {
            self.request_resilver();
        }
        r
    }

    fn clear_faults(&self) -> Result<()> {
        let mut w = lock(&self.w);
        let mut cleared = Vec::new();
        for t in &w.tops {
            for leaf in t.leaves() {
                let (r, wr, c) = leaf.errors();
                if leaf.is_faulted() || r + wr + c > 0 {
                    cleared.push(leaf.guid());
                }
                leaf.set_faulted(false);
            }
            t.clear_errors();
        }
        for g in cleared {
            w.event("vdev_clear", Some(g));
        }
        // A device a spare stood in for is back: the spare goes once it has resilvered.
        w.mark_unspare();
        let mode = lock(&self.st).mode.clone();
        match mode {
            Mode::Active => Ok(()),
            Mode::Closed { reason } => Err(PoolError::Io(reason)),
            Mode::Suspended { poisoned: true, reason } => Err(PoolError::Suspended(format!(
                "{reason}; the pool's memory cannot be trusted: export it with -f and import it again"
            ))),
            Mode::Suspended { .. } => {
                let r = w.sync();
                self.collect_results(&mut w);
                match r {
                    Ok(()) => {
                        {
                            let mut st = lock(&self.st);
                            st.mode = Mode::Active;
                            st.dirty_since = None;
                        }
                        self.cv.notify_all();
                        if let Some(cb) = lock(&self.on_synced).as_ref() {
                            cb(&w);
                        }
                        eprintln!("rzfsd: pool '{}' resumed", self.name);
                        Ok(())
                    }
                    Err(e) => Err(PoolError::Io(format!("cannot resume: {e}"))),
                }
            }
        }
    }

    /// Exports: syncs everything, marks the pool exported on disk and closes it. A failure
    /// leaves the pool imported with every change kept in memory; trying again syncs. With
    /// `force`, a pool that cannot be synced is fenced instead: its devices get no more I/O
    /// and changes not yet durable are dropped (as a crash would), so the last durable txg
    /// is what the next import sees.
    pub fn export(&self, force: bool, destroy: bool) -> Result<()> {
        let state =
            if destroy { ondisk::label::PoolState::Destroyed } else { ondisk::label::PoolState::Exported };
        self.export_as(force, state)
    }

    /// [`Spa::export`] leaving `state` in the labels: `Active` for `zpool export -F` (the
    /// pool closes as it would at a crash, everything synced, as OpenZFS's hardforce
    /// export skips the label update).
    pub fn export_as(&self, force: bool, state: ondisk::label::PoolState) -> Result<()> {
        let mut w = lock(&self.w);
        let poisoned = matches!(lock(&self.st).mode, Mode::Suspended { poisoned: true, .. });
        if self.is_frozen() && !matches!(lock(&self.st).mode, Mode::Closed { .. }) {
            // What changed since the freeze is dropped and the labels stay as they are:
            // the next import finds the pool as a crash at the freeze would have left it.
            self.close_unsynced(w, "pool is frozen");
            return Ok(());
        }
        let r = if poisoned {
            Err(PoolError::Suspended("the pool's memory cannot be trusted after an internal error".into()))
        } else if let Mode::Closed { reason } = &lock(&self.st).mode {
            return Err(PoolError::Io(reason.clone()));
        } else {
            w.close(state)
        };
        self.collect_results(&mut w);
        match r {
            Ok(()) => {
                self.close(&mut w, "pool is exported");
                drop(w);
                self.wait_scan_stopped();
                self.release_devices();
                Ok(())
            }
            Err(e) if force => {
                self.close_unsynced(w, "pool was exported with -f");
                eprintln!("rzfsd: pool '{}' exported with -f without a final sync: {e}", self.name);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// `zpool freeze`: syncs what is open now, then writes nothing more (see `frozen`).
    pub fn freeze(&self) -> Result<()> {
        self.check_active()?;
        let mut w = lock(&self.w);
        self.sync_locked(&mut w)?;
        self.frozen.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Frozen by `zpool freeze`.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Export without a final sync (a forced export that could not sync, a frozen pool):
    /// pending tasks fail with `why`, the devices are fenced, the pool closes and lets go of
    /// them.
    fn close_unsynced(&self, mut w: MutexGuard<'_, PoolWriter>, why: &str) {
        w.cancel_tasks(why);
        self.collect_results(&mut w);
        self.fence(&mut w);
        self.close(&mut w, "pool is exported");
        drop(w);
        self.wait_scan_stopped();
        self.release_devices();
    }

    /// Stops every device of the pool: later I/O fails at once.
    fn fence(&self, w: &mut PoolWriter) {
        for t in &w.tops {
            for leaf in t.leaves() {
                leaf.set_faulted(true);
            }
        }
    }

    fn close(&self, _w: &mut PoolWriter, reason: &str) {
        lock(&self.st).mode = Mode::Closed { reason: reason.to_string() };
        self.scan_abort.store(true, Ordering::SeqCst);
        self.cv.notify_all();
        self.scan_cv.notify_all();
    }

    /// After a close, once the scan thread is gone: nothing more is written, so the devices
    /// are free for the next importer at once, whatever thread still holds a reference to
    /// this pool for a moment (the sync thread finishing a tick).
    fn release_devices(&self) {
        let mut w = lock(&self.w);
        w.close_l2arc();
        for leaf in w.tops.iter().flat_map(|t| t.leaves()) {
            if let Some(d) = leaf.device() {
                d.release();
            }
        }
        for s in &w.spares {
            if let Some(d) = &s.device {
                d.release();
            }
        }
        for c in &w.caches.devs {
            if let Some(d) = &c.device {
                d.release();
            }
        }
    }

    /// Waits (a bounded time) until no scan thread runs: after a close, so that the thread
    /// has let go of the pool and its devices can be opened again at once.
    fn wait_scan_stopped(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut run = lock(&self.scan_run);
        while run.running && Instant::now() < deadline {
            run = self
                .scan_cv
                .wait_timeout(run, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stops the pool as a crash would: nothing more is synced, no I/O reaches the devices,
    /// the scan thread is stopped. The devices are released when the last reference to the
    /// pool goes. For tests that simulate a crash in-process.
    pub fn halt(&self) {
        {
            let mut w = lock(&self.w);
            self.fence(&mut w);
            self.close(&mut w, "pool was halted");
        }
        self.wait_scan_stopped();
        self.release_devices();
    }

    /// Space as `statfs` and `zfs list` should show it: (usable size, available), in
    /// deflated bytes: available is what can still be written (free and soon-free space less
    /// the slop and what the open txg reserved).
    pub fn space(&self) -> (u64, u64) {
        let w = lock(&self.w);
        let a = Accounting::of(&w);
        let avail = (a.free + a.deferred).saturating_sub(a.slop + a.reserved);
        (a.deflate(a.size), a.deflate(avail))
    }

    /// (referenced, available) of head dataset `ds` for `statfs`: what it references, and
    /// the pool's available space within the quotas above it and its refquota
    /// ([`dsl::quota::head_available`]).
    pub fn head_space(&self, ds: u64) -> Result<(u64, u64)> {
        let (_, pool_avail) = self.space();
        let mut w = lock(&self.w);
        // Space reserved elsewhere is not available here (its own comes back to it).
        let pool_avail = pool_avail.saturating_sub(w.unused_reservations()?);
        let head = head_space(&mut w, ds)?;
        let avail = dsl::quota::head_available(&head, pool_avail, &mut |d| dsl::write::dir_phys(&w.mos, d))?;
        Ok((head.referenced, avail))
    }

    /// (size, allocated) in raw bytes as the allocator keeps them — what `zpool list`
    /// shows, without reading space maps from the devices (which may be failing).
    /// Deferred frees still count as allocated, as in the space maps.
    pub fn raw_space(&self) -> (u64, u64) {
        let w = lock(&self.w);
        let s = w.alloc.space();
        (s.size, s.size.saturating_sub(s.free))
    }

    /// (top-level vdev id, size, allocated) of each top-level vdev, as [`Spa::raw_space`]
    /// counts them (`zpool iostat -v`, `zpool list -v`).
    pub fn top_space(&self) -> Vec<(u64, u64, u64)> {
        let w = lock(&self.w);
        w.alloc.space().tops.iter().map(|t| (t.vdev, t.size, t.size.saturating_sub(t.free))).collect()
    }

    /// The sync thread's step: sync when the open txg has been dirty for `txg_timeout`.
    fn tick(&self) {
        let due = {
            let st = lock(&self.st);
            matches!(st.mode, Mode::Active)
                && st.dirty_since.is_some_and(|t| t.elapsed() >= self.tun.txg_timeout)
        };
        if due {
            let mut w = lock(&self.w);
            let _ = self.sync_locked(&mut w);
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(lock(&self.st).mode, Mode::Closed { .. })
    }
}

/// The sync thread: wakes up a few times per timeout until the pool is closed or dropped.
fn sync_thread(spa: std::sync::Weak<Spa>) {
    let mut ticks: u64 = 0;
    loop {
        ticks += 1;
        let period = match spa.upgrade() {
            Some(s) if !s.is_closed() => {
                s.tick();
                // Devices that changed state get a spare at once; otherwise the retire
                // check (which may open devices for autoreplace) runs every tenth tick.
                if s.post_state_changes() || ticks.is_multiple_of(10) {
                    s.retire_check();
                }
                s.tun.txg_timeout
            }
            _ => return,
        };
        std::thread::sleep((period / 4).clamp(Duration::from_millis(20), Duration::from_millis(200)));
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// What a change of head dataset `ds` is held to by [`dsl::quota::verdict`], as of the
/// open txg.
pub(crate) fn head_space(w: &mut PoolWriter, ds: u64) -> Result<dsl::quota::HeadSpace> {
    let p = dsl::write::ds_phys(&w.mos, ds)?;
    let pz = dsl::write::dir_phys(&w.mos, p.dir_obj)?.props_zapobj;
    let refquota = dsl::write::dir_value(&w.mos, &mut w.mos_zaps, pz, "refquota")?
        .and_then(|v| v.values.first().copied())
        .unwrap_or(0);
    Ok(dsl::quota::HeadSpace {
        dir: p.dir_obj,
        referenced: p.referenced_bytes,
        unique: p.unique_bytes,
        refquota,
        refreservation: dsl::write::head_reserved(&w.mos, &mut w.mos_zaps, ds)?,
    })
}

/// The directories head dataset `ds` is charged to: its own, then each ancestor's.
fn dir_chain(mos: &dmu::tx::DirtyObjset, ds: u64) -> Result<Vec<u64>> {
    let mut d = dsl::write::ds_phys(mos, ds)?.dir_obj;
    let mut out = Vec::new();
    while d != 0 && out.len() <= 256 {
        out.push(d);
        d = dsl::write::dir_phys(mos, d)?.parent_obj;
    }
    Ok(out)
}

/// Whether head `head` may write when `reservation`s and `refreservation`s of other
/// datasets hold space: what it has left ([`dsl::quota::head_available`] of the pool's
/// available space, the open txg's worst case taken off, less the unused reservations,
/// its own coming back to it) is not zero. Without reservations in the pool this is
/// the allocator's check alone ([`Spa::reserve`]).
fn reservations_leave_room(w: &mut PoolWriter, head: &dsl::quota::HeadSpace) -> Result<bool> {
    let r = w.unused_reservations()?;
    if r == 0 {
        return Ok(true);
    }
    let a = Accounting::of(w);
    let avail = a.deflate((a.free + a.deferred).saturating_sub(a.slop + a.reserved)).saturating_sub(r);
    let h = dsl::quota::HeadSpace { refquota: 0, ..*head };
    let left = dsl::quota::head_available(&h, avail, &mut |d| dsl::write::dir_phys(&w.mos, d))?;
    Ok(left > 0)
}

/// The space the DSL can still give out, deflated, as of now (syncing context too): the
/// pool's available space less what reservations hold unused. What a directory has left
/// is this, passed down its chain ([`dsl::quota::dir_available`]).
pub(crate) fn dsl_pool_avail(w: &mut PoolWriter) -> Result<u64> {
    let a = Accounting::of(w);
    let avail = a.deflate((a.free + a.deferred).saturating_sub(a.slop + a.reserved));
    Ok(avail.saturating_sub(w.unused_reservations_now()?))
}

/// Space figures of a pool, in allocated (asize) bytes unless said otherwise.
struct Accounting {
    size: u64,
    free: u64,
    deferred: u64,
    /// Worst-case allocation of the open txg.
    reserved: u64,
    slop: u64,
    layout: Layout,
    /// Deflated bytes per 512 allocated bytes (`vdev_deflate_ratio`).
    ratio: u64,
}

impl Accounting {
    fn of(w: &PoolWriter) -> Accounting {
        let s = w.alloc.space();
        // Top-level vdevs may differ: the ratio is their average weighted by size (exact for
        // the pool's total, as `spa_get_dspace` sums per vdev), and worst cases take the
        // costliest shape of any of them (largest sector and parity, fewest data columns).
        // Log vdevs hold none of the pool's blocks and none of its space.
        let normal = |i: &usize| w.tops.get(*i).is_some_and(|t| !t.is_log());
        let (weighted, total) = w.top_info.iter().enumerate().filter(|(i, _)| normal(i)).fold(
            (0u128, 0u128),
            |(sum, n), (_, t)| {
                (sum + u128::from(t.asize >> 9) * u128::from(t.deflate_ratio), n + u128::from(t.asize >> 9))
            },
        );
        let ratio = weighted.checked_div(total).and_then(|r| u64::try_from(r).ok()).unwrap_or(512).max(1);
        let layout = w
            .tops
            .iter()
            .filter(|t| !matches!(t.kind(), vdev::VdevKind::Hole | vdev::VdevKind::Missing) && !t.is_log())
            .map(|t| Layout::of(t))
            .reduce(|a, b| Layout {
                ashift: a.ashift.max(b.ashift),
                nparity: a.nparity.max(b.nparity),
                ndata: a.ndata.min(b.ndata),
            })
            .unwrap_or(Layout { ashift: 9, nparity: 0, ndata: 1 });
        let dspace = (s.size >> 9).saturating_mul(ratio);
        // The slop is computed on deflated space (`spa_get_dspace`) and kept in allocated
        // bytes here.
        let slop = space::slop_space(dspace).saturating_mul(512) / ratio;
        let mut reserved = 0u64;
        for d in w.datasets.values() {
            let mut c = d.os.cost();
            c.add(&d.zaps.cost());
            reserved = reserved.saturating_add(space::cost_asize(&layout, &c, d.policy.copies));
        }
        Accounting { size: s.size, free: s.free, deferred: s.deferred, reserved, slop, layout, ratio }
    }

    fn asize_of(&self, c: &dmu::tx::TxgCost, copies: u8) -> u64 {
        space::cost_asize(&self.layout, c, copies)
    }

    /// Allocatable bytes a change checked with `check` may count on.
    fn allocatable_for(&self, check: SpaceCheck) -> u64 {
        self.free.saturating_sub(check.kept(self.slop))
    }

    fn deflate(&self, asize: u64) -> u64 {
        (asize >> 9).saturating_mul(self.ratio)
    }
}
