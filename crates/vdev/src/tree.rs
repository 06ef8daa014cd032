//! The vdev tree: configuration ([`VdevSpec`]), the live tree ([`Vdev`]) with per-vdev error
//! counters and states, and the dispatch of block reads and writes by vdev type.
//!
//! Offsets handed to a top-level vdev are DVA offsets. Interior vdevs pass them down unchanged
//! (mirror) or split them into per-child column offsets (RAID-Z); only a leaf adds
//! [`VDEV_LABEL_START_SIZE`] to reach the device byte offset, as OpenZFS's zio_vdev_io_start
//! does for leaf vdevs.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::device::BlockDevice;
use crate::dtl::Dtl;
use crate::error::{Result, VdevError};
use crate::{mirror, raidz};

/// Bytes in front of every leaf's allocatable space: labels 0 and 1 (2 × 256 KiB) plus the
/// 3.5 MiB boot area — `VDEV_LABEL_START_SIZE` in OpenZFS include/sys/vdev_impl.h.
pub const VDEV_LABEL_START_SIZE: u64 = 4 << 20;
/// Bytes after a leaf's allocatable space: labels 2 and 3 (`VDEV_LABEL_END_SIZE`, same header).
pub const VDEV_LABEL_END_SIZE: u64 = 512 << 10;
/// Smallest and largest sector shift OpenZFS accepts (`ASHIFT_MIN`/`ASHIFT_MAX`, spa.h).
pub const ASHIFT_MIN: u8 = 9;
/// See [`ASHIFT_MIN`].
pub const ASHIFT_MAX: u8 = 16;
/// Deepest vdev tree accepted (root → top → replacing/spare → spare → leaf fits easily).
const MAX_DEPTH: usize = 8;

/// Vdev types, as in the `type` string of a label's vdev tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VdevKind {
    /// Leaf: a block device.
    Disk,
    /// Leaf: a regular file.
    File,
    /// N-way mirror.
    Mirror,
    /// RAID-Z with 1..=3 parity columns.
    Raidz { nparity: u8 },
    /// Old and new device during `zpool replace` (read like a mirror).
    Replacing,
    /// A device and the hot spare standing in for it (read like a mirror).
    Spare,
    /// The pool's root.
    Root,
    /// A leaf the configuration names but that could not be found.
    Missing,
    /// A hole left by a removed top-level vdev.
    Hole,
    /// Distributed RAID; configuration only, I/O not implemented yet.
    Draid { nparity: u8, ndata: u8, nspares: u8, children: u64 },
}

impl VdevKind {
    /// The `type` of the configuration nvlist (`VDEV_TYPE_*`).
    pub fn type_name(&self) -> &'static str {
        match self {
            VdevKind::Disk => "disk",
            VdevKind::File => "file",
            VdevKind::Mirror => "mirror",
            VdevKind::Raidz { .. } => "raidz",
            VdevKind::Replacing => "replacing",
            VdevKind::Spare => "spare",
            VdevKind::Root => "root",
            VdevKind::Missing => "missing",
            VdevKind::Hole => "hole",
            VdevKind::Draid { .. } => "draid",
        }
    }
    /// A device (disk, file) or a leaf that could not be found.
    pub fn is_leaf(&self) -> bool {
        matches!(self, VdevKind::Disk | VdevKind::File | VdevKind::Missing)
    }
    /// Mirror, replacing or spare: every child holds a full copy.
    pub fn is_mirror_like(&self) -> bool {
        matches!(self, VdevKind::Mirror | VdevKind::Replacing | VdevKind::Spare)
    }
}

/// One node of a pool configuration, from which a [`Vdev`] tree is built.
#[derive(Clone)]
pub struct VdevSpec {
    pub kind: VdevKind,
    pub id: u64,
    pub guid: u64,
    /// Sector shift; 0 means "inherit from the parent" (leaves under a top-level vdev).
    pub ashift: u8,
    pub children: Vec<VdevSpec>,
    /// The opened device of a leaf; `None` means the device is missing.
    pub device: Option<Arc<dyn BlockDevice>>,
}

impl fmt::Debug for VdevSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VdevSpec")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("guid", &self.guid)
            .field("ashift", &self.ashift)
            .field("device", &self.device.as_ref().map(|d| d.name().to_string()))
            .field("children", &self.children)
            .finish()
    }
}

/// Health of a vdev as `zpool status` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VdevState {
    Online,
    Degraded,
    Faulted,
    Unavail,
    /// Taken offline by the administrator (`zpool offline`): no I/O until `zpool online`.
    Offline,
}

impl VdevState {
    /// Can no longer serve I/O (what a parent's redundancy has to cover).
    pub fn is_lost(self) -> bool {
        matches!(self, VdevState::Faulted | VdevState::Unavail | VdevState::Offline)
    }
}

impl fmt::Display for VdevState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VdevState::Online => "ONLINE",
            VdevState::Degraded => "DEGRADED",
            VdevState::Faulted => "FAULTED",
            VdevState::Unavail => "UNAVAIL",
            VdevState::Offline => "OFFLINE",
        })
    }
}

/// One line of `zpool status`: a vdev, its depth in the tree, state and error counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevStat {
    pub depth: usize,
    pub name: String,
    pub guid: u64,
    pub state: VdevState,
    pub read_errors: u64,
    pub write_errors: u64,
    pub cksum_errors: u64,
}

/// A rewrite the caller should issue to heal a child that returned bad data or an I/O error:
/// write `data` at `offset` (allocatable-space offset, label area excluded) of the vdev whose
/// guid is `vdev_guid`, e.g. with [`Vdev::apply_repairs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub vdev_guid: u64,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// A successful block read: the verified bytes (exactly `psize` long) and the repairs it found
/// necessary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome {
    pub data: Vec<u8>,
    pub repairs: Vec<Repair>,
}

/// What kind of error a vdev counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Read,
    Write,
    Checksum,
}

/// One error a vdev counted, kept until the pool turns it into an error report
/// (`ereport.fs.zfs.io` / `.checksum`, see [`Vdev::take_error_reports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorRecord {
    pub kind: ErrorKind,
    /// Offset within the vdev's allocatable space (after the front labels), as OpenZFS's
    /// `zio_offset`; `None` for a flush.
    pub offset: Option<u64>,
    pub size: u64,
    /// When it happened: (seconds, nanoseconds) since the epoch.
    pub time: (u64, u64),
}

/// An [`ErrorRecord`] with the vdev it happened on and that vdev's parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReport {
    pub vdev_guid: u64,
    pub vdev_type: &'static str,
    pub parent_guid: u64,
    pub parent_type: &'static str,
    /// The vdev's (read, write, checksum) counters when the report was taken.
    pub counts: (u64, u64, u64),
    pub record: ErrorRecord,
}

/// Records kept per vdev between two [`Vdev::take_error_reports`]: errors beyond it are
/// counted but not reported (OpenZFS rate-limits its ereports per vdev the same way,
/// `zfs_checksum_events_per_second`).
pub const ERROR_RECORDS_MAX: usize = 20;

/// Error counters of one vdev (OpenZFS vdev_stat_t's vs_read/write/checksum_errors), and
/// the errors not yet reported.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) read: AtomicU64,
    pub(crate) write: AtomicU64,
    pub(crate) cksum: AtomicU64,
    records: Mutex<Vec<ErrorRecord>>,
    /// Completed I/O of a leaf (vdev_stat_t's vs_ops and vs_bytes for reads and writes):
    /// what `zpool iostat` shows.
    read_ops: AtomicU64,
    write_ops: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

/// I/O a vdev completed since it was opened (`zpool iostat`): an interior vdev's are the sum
/// of its children's, as OpenZFS's vdev_get_stats adds them up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounts {
    pub read_ops: u64,
    pub write_ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl IoCounts {
    fn add(&mut self, o: IoCounts) {
        self.read_ops += o.read_ops;
        self.write_ops += o.write_ops;
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
    }
}

impl Counters {
    fn count_read(&self, bytes: usize) {
        self.read_ops.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn count_write(&self, bytes: usize) {
        self.write_ops.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Counts an error of `kind` over `size` bytes at `offset` and keeps a record of it.
    pub(crate) fn note(&self, kind: ErrorKind, offset: Option<u64>, size: u64) {
        let counter = match kind {
            ErrorKind::Read => &self.read,
            ErrorKind::Write => &self.write,
            ErrorKind::Checksum => &self.cksum,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut r = lock(&self.records);
        if r.len() < ERROR_RECORDS_MAX {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            r.push(ErrorRecord { kind, offset, size, time: (now.as_secs(), u64::from(now.subsec_nanos())) });
        }
    }
}

const FORCED_NONE: u8 = 0;
const FORCED_DEGRADED: u8 = 1;
const FORCED_FAULTED: u8 = 2;

/// Whether a leaf is offline (`zpool offline`), and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offline {
    No,
    /// Recorded in the configuration (`offline` = 1): stays offline across imports.
    Persistent,
    /// `zpool offline -t`: back online at the next import.
    Temporary,
}

/// How a block read goes about it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadCtx {
    /// Read and check every copy, not just the first that verifies (scrub, resilver).
    pub thorough: bool,
    /// The block's physical birth txg, when known: a child whose DTL holds it is *stale*
    /// (it may never have received the block), so it is read only when nothing else
    /// verifies, and a thorough read rewrites it without reading it first.
    pub txg: Option<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A node of the live vdev tree.
pub struct Vdev {
    pub(crate) kind: VdevKind,
    id: u64,
    guid: u64,
    pub(crate) ashift: u8,
    pub(crate) children: Vec<Vdev>,
    device: Option<Arc<dyn BlockDevice>>,
    pub(crate) counters: Counters,
    forced: AtomicU8,
    /// A write or flush of this leaf failed since the top-level vdev last settled faults
    /// ([`Vdev::settle_faults`]).
    failed: AtomicBool,
    offline: AtomicU8,
    /// The txgs this leaf is missing (see [`crate::dtl`]).
    dtl: Mutex<Dtl>,
    /// A write to this leaf failed since the txg owner last looked ([`Vdev::take_missed`]):
    /// the txg being written is missing on it.
    missed: AtomicBool,
    /// Bytes the running scan rewrote on this vdev (`vs_scan_processed`).
    scan_processed: AtomicU64,
    /// The leaf could not take writes at some point of the running scan, so the scan does not
    /// prove it complete (OpenZFS excises DTLs only of leaves available throughout).
    scan_gap: AtomicBool,
    /// When this vdev was opened: `zpool iostat` averages over the time since.
    opened: std::time::Instant,
    /// A separate intent log (`is_log` in its configuration): a top-level vdev of the log
    /// allocation class, which holds no pool data and no pool space.
    is_log: AtomicBool,
}

impl fmt::Debug for Vdev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vdev")
            .field("name", &self.name())
            .field("guid", &self.guid)
            .field("state", &self.state())
            .field("children", &self.children)
            .finish()
    }
}

impl Vdev {
    /// Build and validate a tree from its configuration.
    pub fn new(spec: VdevSpec) -> Result<Vdev> {
        Self::build(spec, 0, 0)
    }

    fn build(spec: VdevSpec, parent_ashift: u8, depth: usize) -> Result<Vdev> {
        if depth > MAX_DEPTH {
            return Err(VdevError::InvalidConfig(format!("vdev tree deeper than {MAX_DEPTH}")));
        }
        let ashift = if spec.ashift == 0 { parent_ashift } else { spec.ashift };
        validate(&spec, ashift)?;
        let children = spec
            .children
            .into_iter()
            .map(|c| Self::build(c, ashift, depth + 1))
            .collect::<Result<Vec<_>>>()?;
        Ok(Vdev {
            kind: spec.kind,
            id: spec.id,
            guid: spec.guid,
            ashift,
            children,
            device: spec.device,
            counters: Counters::default(),
            forced: AtomicU8::new(FORCED_NONE),
            failed: AtomicBool::new(false),
            offline: AtomicU8::new(0),
            dtl: Mutex::new(Dtl::new()),
            missed: AtomicBool::new(false),
            scan_processed: AtomicU64::new(0),
            scan_gap: AtomicBool::new(false),
            opened: std::time::Instant::now(),
            is_log: AtomicBool::new(false),
        })
    }

    pub fn kind(&self) -> &VdevKind {
        &self.kind
    }
    /// Is this a top-level log vdev (set by whoever assembles the tree from its config)?
    pub fn is_log(&self) -> bool {
        self.is_log.load(Ordering::Relaxed)
    }
    pub fn set_log(&self, log: bool) {
        self.is_log.store(log, Ordering::Relaxed);
    }
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn guid(&self) -> u64 {
        self.guid
    }
    /// Effective sector shift (a leaf inherits its top-level vdev's).
    pub fn ashift(&self) -> u8 {
        self.ashift
    }
    pub fn children(&self) -> &[Vdev] {
        &self.children
    }
    pub fn device(&self) -> Option<&Arc<dyn BlockDevice>> {
        self.device.as_ref()
    }

    /// The vdev with this guid anywhere in the subtree.
    pub fn find(&self, guid: u64) -> Option<&Vdev> {
        if self.guid == guid {
            return Some(self);
        }
        self.children.iter().find_map(|c| c.find(guid))
    }

    /// Mark a leaf FAULTED (no more I/O to it) or clear it.
    pub fn set_faulted(&self, on: bool) {
        self.forced.store(if on { FORCED_FAULTED } else { FORCED_NONE }, Ordering::SeqCst);
        if on {
            self.mark_scan_gap();
        }
    }
    /// Mark a leaf DEGRADED (still used; e.g. too many checksum errors) or clear it.
    pub fn set_degraded(&self, on: bool) {
        self.forced.store(if on { FORCED_DEGRADED } else { FORCED_NONE }, Ordering::SeqCst);
    }
    /// (read, write, checksum) error counts of this vdev alone.
    pub fn errors(&self) -> (u64, u64, u64) {
        let c = &self.counters;
        (c.read.load(Ordering::Relaxed), c.write.load(Ordering::Relaxed), c.cksum.load(Ordering::Relaxed))
    }
    /// The I/O this subtree completed (a leaf's own; an interior vdev's children's summed).
    pub fn io_counts(&self) -> IoCounts {
        if self.kind.is_leaf() {
            let c = &self.counters;
            return IoCounts {
                read_ops: c.read_ops.load(Ordering::Relaxed),
                write_ops: c.write_ops.load(Ordering::Relaxed),
                read_bytes: c.read_bytes.load(Ordering::Relaxed),
                write_bytes: c.write_bytes.load(Ordering::Relaxed),
            };
        }
        let mut sum = IoCounts::default();
        self.children.iter().for_each(|c| sum.add(c.io_counts()));
        sum
    }

    /// When this vdev was opened (built from its configuration).
    pub fn opened(&self) -> std::time::Instant {
        self.opened
    }

    /// Reset the error counters of the whole subtree (`zpool clear`).
    pub fn clear_errors(&self) {
        for c in [&self.counters.read, &self.counters.write, &self.counters.cksum] {
            c.store(0, Ordering::Relaxed);
        }
        self.children.iter().for_each(Vdev::clear_errors);
    }

    /// The errors counted in this subtree since the last call, oldest first per vdev, each
    /// with its vdev and parent (what an error report names); the records are taken. A
    /// top-level vdev's parent is the root (guid `root_guid`).
    pub fn take_error_reports(&self, root_guid: u64) -> Vec<ErrorReport> {
        let mut out = Vec::new();
        self.collect_reports((root_guid, "root"), &mut out);
        out
    }

    fn collect_reports(&self, parent: (u64, &'static str), out: &mut Vec<ErrorReport>) {
        let records = std::mem::take(&mut *lock(&self.counters.records));
        let counts = self.errors();
        out.extend(records.into_iter().map(|record| ErrorReport {
            vdev_guid: self.guid,
            vdev_type: self.kind.type_name(),
            parent_guid: parent.0,
            parent_type: parent.1,
            counts,
            record,
        }));
        for c in &self.children {
            c.collect_reports((self.guid, self.kind.type_name()), out);
        }
    }

    /// Current health, derived bottom-up from the leaves.
    pub fn state(&self) -> VdevState {
        match &self.kind {
            k if k.is_leaf() => self.leaf_state(),
            VdevKind::Hole => VdevState::Online,
            VdevKind::Raidz { nparity } => self.redundant_state(*nparity as usize),
            VdevKind::Draid { nparity, .. } => self.redundant_state(*nparity as usize),
            k if k.is_mirror_like() => self.redundant_state(self.children.len().saturating_sub(1)),
            _ => self.root_state(),
        }
    }

    /// The root needs every top-level vdev but the separate logs: a lost log vdev leaves
    /// the pool DEGRADED (OpenZFS `vdev_propagate_state` counts it as degraded, not lost).
    fn root_state(&self) -> VdevState {
        let mut state = VdevState::Online;
        for c in &self.children {
            match c.state() {
                s if s.is_lost() && !c.is_log() => return VdevState::Unavail,
                VdevState::Online => {}
                _ => state = VdevState::Degraded,
            }
        }
        state
    }

    fn leaf_state(&self) -> VdevState {
        if self.offline() != Offline::No {
            return VdevState::Offline;
        }
        if self.device.is_none() || self.kind == VdevKind::Missing {
            return VdevState::Unavail;
        }
        match self.forced.load(Ordering::SeqCst) {
            FORCED_FAULTED => VdevState::Faulted,
            FORCED_DEGRADED => VdevState::Degraded,
            _ => VdevState::Online,
        }
    }

    /// State of a vdev that survives the loss of up to `tolerate` children.
    fn redundant_state(&self, tolerate: usize) -> VdevState {
        let states: Vec<VdevState> = self.children.iter().map(Vdev::state).collect();
        let lost = states.iter().filter(|s| s.is_lost()).count();
        if lost > tolerate || (self.children.is_empty() && self.kind != VdevKind::Root) {
            VdevState::Unavail
        } else if lost > 0 || states.contains(&VdevState::Degraded) {
            VdevState::Degraded
        } else {
            VdevState::Online
        }
    }

    /// Can reads be served at all?
    pub(crate) fn readable(&self) -> bool {
        !self.state().is_lost()
    }

    /// Is this leaf taking writes (present, neither offline nor faulted)?
    pub fn writable(&self) -> bool {
        self.kind.is_leaf() && self.leaf_device().is_ok()
    }

    /// Takes a leaf offline (`zpool offline [-t]`) or brings it back (`Offline::No`).
    pub fn set_offline(&self, how: Offline) {
        let v = match how {
            Offline::No => 0,
            Offline::Persistent => 1,
            Offline::Temporary => 2,
        };
        self.offline.store(v, Ordering::SeqCst);
        if v != 0 {
            self.mark_scan_gap();
        }
    }

    /// Whether this leaf is offline, and how.
    pub fn offline(&self) -> Offline {
        match self.offline.load(Ordering::SeqCst) {
            1 => Offline::Persistent,
            2 => Offline::Temporary,
            _ => Offline::No,
        }
    }

    /// Is this leaf FAULTED (by failed writes, until `zpool clear`)?
    pub fn is_faulted(&self) -> bool {
        self.forced.load(Ordering::SeqCst) == FORCED_FAULTED
    }

    /// This leaf's DTL (a copy).
    pub fn dtl(&self) -> Dtl {
        lock(&self.dtl).clone()
    }

    /// Replaces this leaf's DTL (import, resilver completion).
    pub fn set_dtl(&self, d: Dtl) {
        *lock(&self.dtl) = d;
    }

    /// Records txgs `[start, start + count)` as missing on this leaf.
    pub fn dtl_add(&self, start: u64, count: u64) {
        lock(&self.dtl).add(start, count);
    }

    /// Did a write to this leaf fail since the last call? (Clears the flag.)
    pub fn take_missed(&self) -> bool {
        self.missed.swap(false, Ordering::SeqCst)
    }

    /// Is this vdev stale for a block born in `txg`: a leaf whose DTL holds it, or a
    /// mirror-like vdev all of whose readable children are stale?
    pub(crate) fn stale(&self, txg: Option<u64>) -> bool {
        let Some(t) = txg else { return false };
        if self.kind.is_leaf() {
            return lock(&self.dtl).contains(t);
        }
        self.kind.is_mirror_like() && self.children.iter().filter(|c| c.readable()).all(|c| c.stale(txg))
    }

    /// The txgs this vdev cannot produce the data of (OpenZFS's DTL_OUTAGE folded upward),
    /// if leaf `gone` (a guid; 0 for none) were taken away as well: a lost leaf misses
    /// everything, a present one its DTL; a mirror misses what every child misses, a RAID-Z
    /// what more than `nparity` children miss. Non-empty at a top-level vdev means some
    /// blocks would be unreadable (`vdev_dtl_required`).
    pub fn outage(&self, gone: u64) -> Dtl {
        if self.kind.is_leaf() {
            if self.guid == gone || self.state().is_lost() {
                let mut all = Dtl::new();
                all.add(0, u64::MAX);
                return all;
            }
            return self.dtl();
        }
        let kids: Vec<Dtl> = self.children.iter().map(|c| c.outage(gone)).collect();
        let need = match &self.kind {
            VdevKind::Raidz { nparity } => usize::from(*nparity) + 1,
            k if k.is_mirror_like() => kids.len().max(1),
            VdevKind::Hole => return Dtl::new(),
            _ => 1,
        };
        crate::dtl::at_least(&kids, need)
    }

    /// Leaves of this subtree whose DTL is not empty.
    pub fn leaves_with_dtl(&self) -> Vec<&Vdev> {
        self.leaves().into_iter().filter(|l| !lock(&l.dtl).is_empty()).collect()
    }

    /// Bytes the running scan rewrote on this vdev.
    pub fn scan_processed(&self) -> u64 {
        self.scan_processed.load(Ordering::Relaxed)
    }

    /// Counts `bytes` rewritten on this vdev by the running scan.
    pub fn add_scan_processed(&self, bytes: u64) {
        self.scan_processed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A new scan starts: no bytes processed, no gaps.
    pub fn scan_reset(&self) {
        self.scan_processed.store(0, Ordering::Relaxed);
        self.scan_gap.store(false, Ordering::Relaxed);
        self.children.iter().for_each(Vdev::scan_reset);
    }

    /// Notes that this leaf could not take writes during the running scan.
    pub fn mark_scan_gap(&self) {
        self.scan_gap.store(true, Ordering::Relaxed);
    }

    /// Was this leaf unable to take writes at some point of the running scan?
    pub fn scan_gap(&self) -> bool {
        self.scan_gap.load(Ordering::Relaxed)
    }

    /// Carries the live state of the leaves of `old` that are also in this tree (same
    /// guid) over to them: error counters, faults, offline state, DTL, scan progress. Used
    /// when the tree is rebuilt around a configuration change (attach, detach, replace).
    pub fn adopt_state(&self, old: &Vdev) {
        if let Some(o) = old.find(self.guid).filter(|o| o.kind.is_leaf() == self.kind.is_leaf()) {
            self.copy_state_from(o);
        }
        for c in &self.children {
            c.adopt_state(old);
        }
    }

    /// Takes over `o`'s live state (this node alone): counters and, for leaves, faults,
    /// offline state, DTL and scan progress.
    pub fn copy_state_from(&self, o: &Vdev) {
        for (a, b) in [
            (&self.counters.read, &o.counters.read),
            (&self.counters.write, &o.counters.write),
            (&self.counters.cksum, &o.counters.cksum),
            (&self.scan_processed, &o.scan_processed),
        ] {
            a.store(b.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        let pending = lock(&o.counters.records).clone();
        *lock(&self.counters.records) = pending;
        if self.kind.is_leaf() && o.kind.is_leaf() {
            self.forced.store(o.forced.load(Ordering::SeqCst), Ordering::SeqCst);
            self.offline.store(o.offline.load(Ordering::SeqCst), Ordering::SeqCst);
            self.missed.store(o.missed.load(Ordering::SeqCst), Ordering::SeqCst);
            self.scan_gap.store(o.scan_gap.load(Ordering::SeqCst), Ordering::SeqCst);
            self.set_dtl(o.dtl());
        }
    }

    /// This tree's shape as a spec (same kinds, ids, guids, effective ashifts and devices),
    /// to build a changed tree from (attach, detach, replace).
    pub fn to_spec(&self) -> VdevSpec {
        VdevSpec {
            kind: self.kind.clone(),
            id: self.id,
            guid: self.guid,
            ashift: self.ashift,
            children: self.children.iter().map(Vdev::to_spec).collect(),
            device: self.device.clone(),
        }
    }

    /// Display name as `zpool status` shows it.
    pub fn name(&self) -> String {
        match &self.kind {
            VdevKind::Root => "root".into(),
            VdevKind::Mirror => format!("mirror-{}", self.id),
            VdevKind::Raidz { nparity } => format!("raidz{nparity}-{}", self.id),
            VdevKind::Replacing => format!("replacing-{}", self.id),
            VdevKind::Spare => format!("spare-{}", self.id),
            VdevKind::Hole => format!("hole-{}", self.id),
            VdevKind::Draid { nparity, ndata, nspares, children } => {
                format!("draid{nparity}:{ndata}d:{children}c:{nspares}s-{}", self.id)
            }
            VdevKind::Disk | VdevKind::File | VdevKind::Missing => match &self.device {
                Some(d) => d.name().to_string(),
                None => self.guid.to_string(),
            },
        }
    }

    /// Pre-order walk of the tree for `zpool status` (holes omitted).
    pub fn stats(&self) -> Vec<VdevStat> {
        let mut out = Vec::new();
        self.collect_stats(0, &mut out);
        out
    }

    fn collect_stats(&self, depth: usize, out: &mut Vec<VdevStat>) {
        if self.kind == VdevKind::Hole {
            return;
        }
        let (read_errors, write_errors, cksum_errors) = self.errors();
        out.push(VdevStat {
            depth,
            name: self.name(),
            guid: self.guid,
            state: self.state(),
            read_errors,
            write_errors,
            cksum_errors,
        });
        for c in &self.children {
            c.collect_stats(depth + 1, out);
        }
    }

    fn sector(&self) -> u64 {
        1u64 << self.ashift
    }

    /// Allocated size of a block of `psize` bytes on this (top-level) vdev: RAID-Z adds parity
    /// and padding (vdev_raidz_psize_to_asize); everything else rounds up to a sector, or takes
    /// the largest of its children's sizes when that is more — a mirror of RAID-Z vdevs (which
    /// `ztest` builds) allocates what one RAID-Z side needs (OpenZFS `vdev_default_asize`).
    pub fn asize(&self, psize: u64) -> u64 {
        self.asize_within(psize, self.ashift)
    }

    /// [`Vdev::asize`] of this vdev inside a top-level vdev of sector shift `ashift`.
    fn asize_within(&self, psize: u64, ashift: u8) -> u64 {
        match &self.kind {
            VdevKind::Raidz { nparity } => {
                raidz::raidz_asize(psize, ashift, self.children.len() as u64, u64::from(*nparity))
            }
            _ => {
                let sector = 1u64 << ashift;
                let own = psize.div_ceil(sector) * sector;
                self.children.iter().map(|c| c.asize_within(psize, ashift)).fold(own, u64::max)
            }
        }
    }

    /// Read `psize` bytes at DVA offset `offset` of this top-level vdev. `verify` checks the
    /// block's checksum over exactly `psize` bytes; copies or reconstructions that fail it are
    /// rejected (and counted as checksum errors on the children proven wrong).
    pub fn read(&self, offset: u64, psize: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<ReadOutcome> {
        self.read_born(offset, psize, None, verify)
    }

    /// [`Vdev::read`] of a block born in txg `birth` (when known): children whose DTL holds
    /// it are read only if no other copy verifies.
    pub fn read_born(
        &self,
        offset: u64,
        psize: u64,
        birth: Option<u64>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<ReadOutcome> {
        let size = self.sectors_of(psize)?;
        let plen = psize as usize;
        let check = |b: &[u8]| b.get(..plen).is_some_and(verify);
        let mut repairs = Vec::new();
        let ctx = ReadCtx { thorough: false, txg: birth };
        let mut data = self.read_block(offset, size, &check, &mut repairs, ctx)?;
        data.truncate(plen);
        Ok(ReadOutcome { data, repairs })
    }

    /// A scrub read (OpenZFS `ZIO_FLAG_SCRUB`): like [`Vdev::read`], but every copy is read
    /// and checked, not just the first that verifies: every child of a mirror, every RAID-Z
    /// column including parity (parity regenerated from the verified data and compared), and
    /// every child of a replacing or spare vdev standing as a RAID-Z column. Each copy that
    /// failed I/O or differs from the verified bytes gets a [`Repair`]; copies that returned
    /// wrong bytes count a checksum error on their leaf.
    pub fn scrub(&self, offset: u64, psize: u64, verify: &dyn Fn(&[u8]) -> bool) -> Result<ReadOutcome> {
        self.scrub_born(offset, psize, None, verify)
    }

    /// [`Vdev::scrub`] of a block born in txg `birth`: children whose DTL holds it are not
    /// read but rewritten with the verified bytes (the resilver of that block), without
    /// counting an error against them.
    pub fn scrub_born(
        &self,
        offset: u64,
        psize: u64,
        birth: Option<u64>,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<ReadOutcome> {
        let size = self.sectors_of(psize)?;
        let plen = psize as usize;
        // The bytes between psize and the sector end are written as zeros (OpenZFS zero-pads
        // too) but not checksummed; a scrub holds them to that, or damage there would be
        // blamed on the parity that no longer matches them.
        let check = |b: &[u8]| b.get(..plen).is_some_and(verify) && b[plen..].iter().all(|&x| x == 0);
        let mut repairs = Vec::new();
        match self.read_block(offset, size, &check, &mut repairs, ReadCtx { thorough: true, txg: birth }) {
            Ok(mut data) => {
                data.truncate(plen);
                Ok(ReadOutcome { data, repairs })
            }
            // No copy with a clean tail: settle for what an ordinary read accepts.
            Err(VdevError::Checksum { .. }) if size as usize != plen => {
                self.read_born(offset, psize, birth, verify)
            }
            Err(e) => Err(e),
        }
    }

    /// `psize` rounded up to whole sectors (what a read of it transfers).
    fn sectors_of(&self, psize: u64) -> Result<u64> {
        if psize == 0 {
            return Err(VdevError::InvalidRequest("zero-length read".into()));
        }
        psize
            .checked_next_multiple_of(self.sector())
            .ok_or_else(|| VdevError::InvalidRequest(format!("psize {psize:#x} overflows")))
    }

    /// Read and verify a sector-aligned block through this vdev (any level).
    pub(crate) fn read_block(
        &self,
        offset: u64,
        size: u64,
        check: &dyn Fn(&[u8]) -> bool,
        repairs: &mut Vec<Repair>,
        ctx: ReadCtx,
    ) -> Result<Vec<u8>> {
        match &self.kind {
            k if k.is_leaf() => {
                let data = self.leaf_read(offset, size)?;
                if check(&data) {
                    Ok(data)
                } else {
                    self.counters.note(ErrorKind::Checksum, Some(offset), size);
                    Err(self.checksum_error(offset, size))
                }
            }
            k if k.is_mirror_like() => mirror::read(self, offset, size, check, repairs, ctx),
            VdevKind::Raidz { .. } => raidz::read(self, offset, size, check, repairs, ctx),
            _ => Err(self.no_io("reads")),
        }
    }

    pub(crate) fn checksum_error(&self, offset: u64, size: u64) -> VdevError {
        VdevError::Checksum { vdev: self.name(), offset, size }
    }

    fn no_io(&self, what: &str) -> VdevError {
        match self.kind {
            VdevKind::Draid { .. } => VdevError::Unsupported(format!("dRAID {what} ({})", self.name())),
            _ => VdevError::InvalidRequest(format!("{what} are not possible on {}", self.name())),
        }
    }

    fn unavailable(&self, detail: &str) -> VdevError {
        VdevError::Unavailable { vdev: self.name(), detail: detail.into() }
    }

    /// Raw read of a leaf's allocatable space; counts I/O errors.
    fn leaf_read(&self, offset: u64, size: u64) -> Result<Vec<u8>> {
        let dev = self.leaf_device()?;
        let len = usize::try_from(size).map_err(|_| VdevError::InvalidRequest(format!("size {size:#x}")))?;
        let off = leaf_offset(offset)?;
        let mut buf = vec![0u8; len];
        dev.read_at(&mut buf, off).map_err(|e| {
            self.counters.note(ErrorKind::Read, Some(offset), size);
            VdevError::Io { device: dev.name().to_string(), source: e }
        })?;
        self.counters.count_read(len);
        Ok(buf)
    }

    fn leaf_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let dev = self.leaf_device()?;
        let off = leaf_offset(offset)?;
        dev.write_at(data, off).map_err(|e| self.write_failed(dev, e, Some(offset), data.len() as u64))?;
        self.counters.count_write(data.len());
        Ok(())
    }

    /// A write or flush of this leaf failed: count it and mark the leaf for
    /// [`Vdev::settle_faults`], which the top-level vdev runs once the request is done.
    fn write_failed(
        &self,
        dev: &Arc<dyn BlockDevice>,
        e: std::io::Error,
        at: Option<u64>,
        size: u64,
    ) -> VdevError {
        self.counters.note(ErrorKind::Write, at, size);
        self.failed.store(true, Ordering::SeqCst);
        self.missed.store(true, Ordering::SeqCst);
        VdevError::Io { device: dev.name().to_string(), source: e }
    }

    /// Faults the leaves of this top-level vdev whose writes or flushes failed: their copy
    /// of what is being written is incomplete, so no more I/O goes to them until `zpool
    /// clear`, and the vdev serves reads and writes from its other children. A leaf the
    /// vdev cannot do without (faulting it would leave the vdev unavailable) is only marked
    /// DEGRADED and kept in use, as OpenZFS's `vdev_fault` backs off for a device holding
    /// the only valid copy. (OpenZFS leaves faulting to zed after repeated errors; a
    /// userspace daemon has no zed, and a leaf that failed a write of the txg being synced
    /// cannot hold that txg anyway.) Returns how many failed leaves could not be faulted.
    pub fn settle_faults(&self) -> usize {
        let mut kept = 0;
        for leaf in self.leaves() {
            if leaf.failed.swap(false, Ordering::SeqCst) {
                leaf.set_faulted(true);
                // A log vdev holds no block of the pool, only intent log blocks whose
                // records the txg being synced makes obsolete: it may go whole (OpenZFS
                // then logs to the pool's own vdevs).
                if !self.readable() && !self.is_log() {
                    leaf.set_degraded(true);
                    kept += 1;
                }
            }
        }
        kept
    }

    fn leaf_device(&self) -> Result<&Arc<dyn BlockDevice>> {
        match (&self.device, self.leaf_state()) {
            (Some(d), VdevState::Online | VdevState::Degraded) => Ok(d),
            (_, state) => Err(self.unavailable(&format!("leaf is {state}"))),
        }
    }

    /// Unverified read of one RAID-Z column from a child: a leaf reads its device; a
    /// replacing/spare child returns the first copy that reads without error, trying the
    /// children not stale for `txg` first.
    pub(crate) fn column_read(&self, offset: u64, size: u64, txg: Option<u64>) -> Result<Vec<u8>> {
        if self.kind.is_leaf() {
            return self.leaf_read(offset, size);
        }
        if !self.kind.is_mirror_like() {
            return Err(self.no_io("column reads"));
        }
        let mut last = None;
        let readable = self.children.iter().filter(|c| c.readable());
        let (fresh, stale): (Vec<&Vdev>, Vec<&Vdev>) = readable.partition(|c| !c.stale(txg));
        for c in fresh.into_iter().chain(stale) {
            match c.column_read(offset, size, txg) {
                Ok(d) => return Ok(d),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| self.unavailable("no readable child")))
    }

    /// Scrub of one RAID-Z column held by a mirror-like child (replacing, spare): every
    /// readable copy is compared with the column's verified bytes `expected`; a copy that
    /// differs counts a checksum error and, like one that fails I/O, gets a repair.
    pub(crate) fn column_check(
        &self,
        offset: u64,
        expected: &[u8],
        repairs: &mut Vec<Repair>,
        txg: Option<u64>,
    ) {
        if !self.kind.is_mirror_like() {
            return;
        }
        for c in self.children.iter().filter(|c| c.readable()) {
            if c.stale(txg) {
                // Missing this txg: rewritten, not read, and no error of its own.
                repairs.push(Repair { vdev_guid: c.guid, offset, data: expected.to_vec() });
                continue;
            }
            if c.kind.is_mirror_like() {
                c.column_check(offset, expected, repairs, txg);
                continue;
            }
            match c.leaf_read(offset, expected.len() as u64) {
                Ok(d) if d == expected => {}
                Ok(_) => {
                    c.counters.note(ErrorKind::Checksum, Some(offset), expected.len() as u64);
                    repairs.push(Repair { vdev_guid: c.guid, offset, data: expected.to_vec() });
                }
                Err(_) => repairs.push(Repair { vdev_guid: c.guid, offset, data: expected.to_vec() }),
            }
        }
    }

    /// Write raw bytes through this vdev without parity (leaf, or every child of a
    /// mirror-like vdev; succeeds if at least one copy was written).
    pub(crate) fn column_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        if self.kind.is_leaf() {
            return self.leaf_write(offset, data);
        }
        if !self.kind.is_mirror_like() {
            return Err(self.no_io("column writes"));
        }
        let mut ok = false;
        let mut last = None;
        for c in self.children.iter().filter(|c| c.readable()) {
            match c.column_write(offset, data) {
                Ok(()) => ok = true,
                Err(e) => last = Some(e),
            }
        }
        match (ok, last) {
            (true, _) => Ok(()),
            (false, Some(e)) => Err(e),
            (false, None) => Err(self.unavailable("no writable child")),
        }
    }

    /// Write a block at DVA offset `offset` of this top-level vdev: the data is zero-padded to
    /// a whole sector; RAID-Z computes and writes parity; mirrors write every child.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Err(VdevError::InvalidRequest("zero-length write".into()));
        }
        let padded;
        let data = if data.len() as u64 & (self.sector() - 1) == 0 {
            data
        } else {
            let mut v = data.to_vec();
            v.resize((data.len() as u64).next_multiple_of(self.sector()) as usize, 0);
            padded = v;
            &padded
        };
        let r = match &self.kind {
            VdevKind::Raidz { .. } => raidz::write(self, offset, data),
            k if k.is_leaf() || k.is_mirror_like() => self.column_write(offset, data),
            _ => Err(self.no_io("writes")),
        };
        self.settle_faults();
        r
    }

    /// Issue the repair writes a read asked for.
    pub fn apply_repairs(&self, repairs: &[Repair]) -> Result<()> {
        for r in repairs {
            let vd = self
                .find(r.vdev_guid)
                .ok_or_else(|| VdevError::InvalidRequest(format!("no vdev with guid {}", r.vdev_guid)))?;
            // A read-only import never writes: repairs wait for a writable one. A repair of
            // an interior vdev (a replacing or spare column) goes to its leaves.
            if vd.leaves().iter().any(|l| l.device.as_ref().is_some_and(|d| d.writable())) {
                let w = vd.column_write(r.offset, &r.data);
                self.settle_faults();
                w?;
            }
        }
        Ok(())
    }

    /// Flush every present leaf device.
    pub fn flush(&self) -> Result<()> {
        if let Some(d) = &self.device {
            d.flush().map_err(|e| VdevError::Io { device: d.name().to_string(), source: e })?;
        }
        self.children.iter().try_for_each(Vdev::flush)
    }

    /// Every leaf of the subtree, depth first.
    pub fn leaves(&self) -> Vec<&Vdev> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(v) = stack.pop() {
            if v.kind.is_leaf() {
                out.push(v);
            }
            stack.extend(v.children.iter().rev());
        }
        out
    }

    /// Flushes every healthy leaf of this top-level vdev. A leaf whose flush fails is
    /// faulted (what it acknowledged may not be durable); the flush fails only when the
    /// vdev has lost more children than its redundancy covers, i.e. when data written to
    /// it since the last good flush may be lost.
    pub fn flush_top(&self) -> Result<()> {
        let mut last = None;
        for leaf in self.leaves() {
            let Ok(dev) = leaf.leaf_device() else { continue };
            if let Err(e) = dev.flush() {
                last = Some(leaf.write_failed(dev, e, None, 0));
            }
        }
        // A leaf that failed but could not be faulted holds data the vdev needs, and what
        // it acknowledged may not be durable.
        if self.settle_faults() > 0 {
            return Err(last.unwrap_or_else(|| self.unavailable("a flush failed")));
        }
        self.check_writable()
    }

    /// Fails when this vdev can no longer hold new data (more children lost than its
    /// redundancy covers).
    pub fn check_writable(&self) -> Result<()> {
        match self.state() {
            VdevState::Unavail | VdevState::Faulted => {
                Err(self.unavailable("too many devices failed to take writes"))
            }
            _ => Ok(()),
        }
    }

    /// Writes raw bytes to every healthy leaf of this top-level vdev (labels and
    /// uberblocks, which each leaf holds whole): `data(leaf, device)` lists the (bytes,
    /// device offset) pairs for a leaf. A leaf that fails any of them is faulted. Returns how
    /// many leaves took all their writes: the caller decides whether that is enough (OpenZFS
    /// wants at least one good copy per top-level vdev, `vdev_label_sync_top_done`).
    pub fn write_leaves_raw(&self, data: &LeafWrites<'_>) -> usize {
        let mut good = 0;
        for leaf in self.leaves() {
            let Ok(dev) = leaf.leaf_device() else { continue };
            let writes = data(leaf, dev.as_ref());
            // Label and uberblock writes are at raw device offsets: reported without one.
            let mut write = |(buf, off): &(Vec<u8>, u64)| {
                dev.write_at(buf, *off).map_err(|e| (e, buf.len()))?;
                leaf.counters.count_write(buf.len());
                Ok(())
            };
            match writes.iter().try_for_each(&mut write) {
                Ok(()) => good += 1,
                Err((e, len)) => {
                    let _ = leaf.write_failed(dev, e, None, len as u64);
                }
            }
        }
        self.settle_faults();
        good
    }
}

/// The raw writes one leaf gets from [`Vdev::write_leaves_raw`]: (bytes, device offset) pairs.
pub type LeafWrites<'a> = dyn Fn(&Vdev, &dyn BlockDevice) -> Vec<(Vec<u8>, u64)> + 'a;

/// Device byte offset of an allocatable-space offset.
fn leaf_offset(offset: u64) -> Result<u64> {
    offset
        .checked_add(VDEV_LABEL_START_SIZE)
        .ok_or_else(|| VdevError::InvalidRequest(format!("offset {offset:#x} overflows")))
}

/// Check one node's own shape (children are checked when built). `ashift` is the effective
/// one: 0 (not yet known, e.g. the root) or within [`ASHIFT_MIN`]..=[`ASHIFT_MAX`].
fn validate(spec: &VdevSpec, ashift: u8) -> Result<()> {
    let bad = |m: String| Err(VdevError::InvalidConfig(m));
    let n = spec.children.len();
    if ashift != 0 && !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
        return bad(format!("vdev {} has ashift {ashift}", spec.guid));
    }
    match &spec.kind {
        VdevKind::Disk | VdevKind::File | VdevKind::Missing | VdevKind::Hole if n != 0 => {
            bad(format!("leaf/hole vdev {} has {n} children", spec.guid))
        }
        VdevKind::Mirror | VdevKind::Replacing | VdevKind::Spare if n == 0 => {
            bad(format!("{:?} vdev {} has no children", spec.kind, spec.guid))
        }
        VdevKind::Raidz { nparity } => {
            let p = *nparity as usize;
            if !(1..=codec::raidz::MAX_PARITY).contains(&p) {
                return bad(format!("raidz nparity {p}"));
            }
            if n <= p || n > 255 {
                return bad(format!("raidz{p} with {n} children"));
            }
            if ashift == 0 {
                return bad(format!("raidz vdev {} without ashift", spec.guid));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
