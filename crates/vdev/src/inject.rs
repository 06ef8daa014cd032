//! # Fault injection: the `zinject` of rzfs
//!
//! Theory. Every leaf device the daemon opens for writing is wrapped in an [`InjectDevice`]
//! whose faults live in a process-wide registry keyed by the device's path, so faults can
//! be added to and cleared from a live pool (`rzinject`) and by tests. With no rule on a
//! device the wrapper costs one relaxed atomic load per I/O.
//!
//! A [`FaultRule`] matches I/Os of one kind ([`IoKind`]: reads, writes, flushes, or all)
//! and acts on them ([`FaultKind`]): fail with EIO, corrupt the data (bits flipped in what a
//! read returns, or in what a write stores), or make the device vanish (ENXIO for every
//! call, whatever its kind). A rule may let the first `after` matching I/Os through, fire at
//! most `count` times, and fire on `freq_pct` percent of the I/Os it matches (a per-device
//! deterministic sequence, so a test run can be replayed). This is OpenZFS's `zinject -d
//! DEV -e io|nxio|checksum -T read|write|flush|all -f PCT`, plus `after` and `count`.

use crate::BlockDevice;
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// What a rule does to an I/O it fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The I/O fails with EIO (`zinject -e io`).
    Error,
    /// The data is corrupted: bits flipped in what is read or written (`-e checksum`).
    Corrupt,
    /// The device is gone: every call fails with ENXIO (`-e nxio`).
    Vanish,
}

/// Which I/Os a rule matches (`zinject -T`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Flush,
    All,
}

impl IoKind {
    fn matches(self, io: IoKind) -> bool {
        self == IoKind::All || self == io
    }
}

/// One injected fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    pub kind: FaultKind,
    pub io: IoKind,
    /// Matching I/Os let through before the rule fires.
    pub after: u64,
    /// Most firings (0: no limit).
    pub count: u64,
    /// Percentage of matching I/Os it fires on (1..=100).
    pub freq_pct: u32,
}

impl FaultRule {
    /// A rule firing on every matching I/O.
    pub fn always(kind: FaultKind, io: IoKind) -> FaultRule {
        FaultRule { kind, io, after: 0, count: 0, freq_pct: 100 }
    }
}

/// A rule as registered: its id, device and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleStatus {
    pub id: u64,
    pub device: String,
    pub rule: FaultRule,
    /// Matching I/Os seen.
    pub seen: u64,
    /// Times it fired.
    pub fired: u64,
}

#[derive(Default)]
struct Faults {
    rules: Mutex<Vec<RuleStatus>>,
    any: AtomicBool,
    rng: AtomicU64,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, Vec<RuleStatus>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fault to apply to an I/O of kind `io`, if any rule fires.
    fn check(&self, io: IoKind) -> Option<FaultKind> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let mut rules = self.lock();
        let mut out = None;
        for r in rules.iter_mut() {
            let hit = r.rule.kind == FaultKind::Vanish || r.rule.io.matches(io);
            if !hit {
                continue;
            }
            r.seen += 1;
            if r.seen <= r.rule.after || (r.rule.count != 0 && r.fired >= r.rule.count) {
                continue;
            }
            if r.rule.freq_pct < 100 && self.next_pct() >= u64::from(r.rule.freq_pct) {
                continue;
            }
            r.fired += 1;
            // Vanishing wins over an error, an error over corruption.
            out = match (out, r.rule.kind) {
                (Some(FaultKind::Vanish), _) | (_, FaultKind::Vanish) => Some(FaultKind::Vanish),
                (Some(FaultKind::Error), _) | (_, FaultKind::Error) => Some(FaultKind::Error),
                _ => Some(FaultKind::Corrupt),
            };
        }
        out
    }

    /// A deterministic pseudo-random number in 0..100 (xorshift64).
    fn next_pct(&self) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x % 100
    }
}

struct Registry {
    devices: BTreeMap<String, Arc<Faults>>,
    next_id: u64,
}

fn registry() -> MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Registry { devices: BTreeMap::new(), next_id: 1 }))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn faults_of(path: &str) -> Arc<Faults> {
    let mut r = registry();
    r.devices
        .entry(path.to_string())
        .or_insert_with(|| {
            Arc::new(Faults { rng: AtomicU64::new(0x9e37_79b9_7f4a_7c15), ..Faults::default() })
        })
        .clone()
}

/// Adds a fault to device `path` (whether or not it is open yet); returns the rule's id.
pub fn add(path: &str, rule: FaultRule) -> u64 {
    let f = faults_of(path);
    let id = {
        let mut r = registry();
        let id = r.next_id;
        r.next_id += 1;
        id
    };
    f.lock().push(RuleStatus { id, device: path.to_string(), rule, seen: 0, fired: 0 });
    f.any.store(true, Ordering::Relaxed);
    id
}

/// Removes rule `id`; false if there is none.
pub fn clear(id: u64) -> bool {
    let devs: Vec<Arc<Faults>> = registry().devices.values().cloned().collect();
    let mut found = false;
    for f in devs {
        let mut rules = f.lock();
        let before = rules.len();
        rules.retain(|r| r.id != id);
        found |= rules.len() != before;
        f.any.store(!rules.is_empty(), Ordering::Relaxed);
    }
    found
}

/// Removes every rule (of one device, or of all); returns how many.
pub fn clear_all(path: Option<&str>) -> usize {
    let devs: Vec<(String, Arc<Faults>)> =
        registry().devices.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut n = 0;
    for (p, f) in devs {
        if path.is_some_and(|want| want != p) {
            continue;
        }
        let mut rules = f.lock();
        n += rules.len();
        rules.clear();
        f.any.store(false, Ordering::Relaxed);
    }
    n
}

/// Every registered rule, by id.
pub fn list() -> Vec<RuleStatus> {
    let devs: Vec<Arc<Faults>> = registry().devices.values().cloned().collect();
    let mut out: Vec<RuleStatus> = devs.iter().flat_map(|f| f.lock().clone()).collect();
    out.sort_by_key(|r| r.id);
    out
}

/// A device whose I/O goes through the fault registry.
pub struct InjectDevice {
    inner: Arc<dyn BlockDevice>,
    faults: Arc<Faults>,
}

impl InjectDevice {
    /// Wraps `inner` (opened from `path`) so faults registered for `path` apply to it.
    pub fn wrap(inner: Arc<dyn BlockDevice>, path: &str) -> Arc<dyn BlockDevice> {
        Arc::new(InjectDevice { faults: faults_of(path), inner })
    }

    fn fail(&self, kind: FaultKind, what: &str) -> io::Error {
        match kind {
            FaultKind::Vanish => io::Error::from_raw_os_error(6), // ENXIO
            _ => io::Error::other(format!("{}: injected {what} error", self.inner.name())),
        }
    }
}

/// Flips one bit in every 512 bytes (so every sector's checksum breaks).
fn corrupt(buf: &mut [u8]) {
    for chunk in buf.chunks_mut(512) {
        chunk[chunk.len() / 2] ^= 0x10;
    }
}

impl BlockDevice for InjectDevice {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        match self.faults.check(IoKind::Read) {
            Some(k @ (FaultKind::Error | FaultKind::Vanish)) => Err(self.fail(k, "read")),
            Some(FaultKind::Corrupt) => {
                self.inner.read_at(buf, off)?;
                corrupt(buf);
                Ok(())
            }
            None => self.inner.read_at(buf, off),
        }
    }
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        match self.faults.check(IoKind::Write) {
            Some(k @ (FaultKind::Error | FaultKind::Vanish)) => Err(self.fail(k, "write")),
            Some(FaultKind::Corrupt) => {
                let mut bad = buf.to_vec();
                corrupt(&mut bad);
                self.inner.write_at(&bad, off)
            }
            None => self.inner.write_at(buf, off),
        }
    }
    fn flush(&self) -> io::Result<()> {
        match self.faults.check(IoKind::Flush) {
            Some(k @ (FaultKind::Error | FaultKind::Vanish)) => Err(self.fail(k, "flush")),
            _ => self.inner.flush(),
        }
    }
    fn release(&self) {
        self.inner.release()
    }
    fn refresh_size(&self) -> io::Result<u64> {
        self.inner.refresh_size()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn writable(&self) -> bool {
        self.inner.writable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    #[test]
    fn rules_fire_after_count_and_clear() {
        let path = "/test/inject-a";
        let d = InjectDevice::wrap(Arc::new(MemDevice::new("m", 4096)), path);
        d.write_at(&[1u8; 512], 0).unwrap();
        let id = add(
            path,
            FaultRule { kind: FaultKind::Error, io: IoKind::Write, after: 2, count: 1, freq_pct: 100 },
        );
        d.write_at(&[1u8; 512], 0).unwrap();
        d.write_at(&[1u8; 512], 0).unwrap();
        assert!(d.write_at(&[1u8; 512], 0).is_err(), "third write fires");
        d.write_at(&[1u8; 512], 0).unwrap();
        d.flush().unwrap();
        let st = list().into_iter().find(|r| r.id == id).unwrap();
        assert_eq!((st.seen, st.fired), (4, 1));
        assert!(clear(id));
        assert!(!clear(id));
    }

    #[test]
    fn vanish_fails_everything_and_corrupt_flips() {
        let path = "/test/inject-b";
        let d = InjectDevice::wrap(Arc::new(MemDevice::new("m", 4096)), path);
        d.write_at(&[0u8; 1024], 0).unwrap();
        let c = add(path, FaultRule::always(FaultKind::Corrupt, IoKind::Read));
        let mut b = [0u8; 1024];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 2, "one flipped byte per sector");
        clear(c);
        let v = add(path, FaultRule::always(FaultKind::Vanish, IoKind::Read));
        assert_eq!(d.flush().unwrap_err().raw_os_error(), Some(6));
        assert!(d.write_at(&[0u8; 512], 0).is_err());
        assert_eq!(clear_all(Some(path)), 1);
        let _ = v;
        d.flush().unwrap();
    }

    #[test]
    fn frequency_is_a_share() {
        let path = "/test/inject-c";
        let d = InjectDevice::wrap(Arc::new(MemDevice::new("m", 4096)), path);
        add(path, FaultRule { kind: FaultKind::Error, io: IoKind::Read, after: 0, count: 0, freq_pct: 25 });
        let mut b = [0u8; 512];
        let fails = (0..2000).filter(|_| d.read_at(&mut b, 0).is_err()).count();
        assert!((300..700).contains(&fails), "{fails} of 2000 at 25%");
        clear_all(Some(path));
    }
}
