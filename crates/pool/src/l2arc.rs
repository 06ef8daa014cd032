//! # The second-level cache on cache devices (rzfs's L2ARC)
//!
//! Theory. The ARC keeps decompressed blocks in memory under a hard bound; a cache device
//! (`zpool add POOL cache DEV`, [`crate::l2cache`]) extends it with a device that is faster
//! than the pool's, as OpenZFS's L2ARC does. What it holds is only ever a copy: the pool
//! never needs it, and every block served from it is verified against its block pointer's
//! checksum by the read pipeline (`zio::SecondLevel`), so a damaged, stale or lost cache
//! device can cost speed, never data.
//!
//! * **What is cached.** The physical bytes (compressed as on disk) of every block the
//!   read pipeline had to fetch from the pool's vdevs for a file or metadata read, keyed by
//!   its first DVA and physical birth. Scrub, heal and verification reads never use it.
//! * **Layout.** Each device is a ring from `VDEV_LABEL_START_SIZE` + 4 KiB (OpenZFS's
//!   L2ARC header lives at the start of that area and is kept zeroed, so OpenZFS finds no
//!   header and starts the device empty) to the end labels. Blocks are written one after
//!   another at the device's hand, each rounded up to its sector size; when the hand
//!   reaches the end it wraps, and whatever the next block overwrites is dropped from the
//!   index *before* it is written. Devices take blocks in turn.
//! * **Feeding never blocks reads.** Offers are queued to one feeder thread, bounded by
//!   [`FEED_MAX_BYTES`] of pending data; an offer that does not fit is dropped.
//! * **Memory.** The index costs about 80 bytes per cached block (OpenZFS's L2ARC headers
//!   cost about as much); it is not counted against the ARC's bound.
//! * **Not kept across imports.** The index lives in memory only: after an import the
//!   device starts empty (OpenZFS's persistent L2ARC log blocks are not written).
//!
//! Lookups take the index lock only to find the extent; the device read runs unlocked,
//! and if the feeder overwrote the extent meanwhile the checksum catches it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use vdev::{BlockDevice, IoCounts};
use zio::BlockKey;

/// Bytes of offered blocks waiting for the feeder, at most.
pub const FEED_MAX_BYTES: usize = 32 << 20;
/// Blocks larger than this are not cached (the largest ZFS block).
const MAX_CACHED: usize = 16 << 20;
/// Where the ring starts: after the front labels and boot area, and the 4 KiB OpenZFS's
/// L2ARC device header would use.
const RING_START: u64 = ondisk::label::VDEV_LABEL_START_SIZE + 4096;

struct Dev {
    guid: u64,
    dev: Arc<dyn BlockDevice>,
    align: u64,
    end: u64,
    hand: u64,
    /// Cached extents by offset: (key, aligned length).
    by_off: BTreeMap<u64, (BlockKey, u64)>,
    used: u64,
    failed: bool,
    io: IoCounts,
}

#[derive(Default)]
struct Inner {
    devs: Vec<Dev>,
    /// key → (device index, offset, length of the data).
    index: HashMap<BlockKey, (usize, u64, usize)>,
    next: usize,
}

impl Inner {
    fn drop_key(&mut self, key: BlockKey) {
        if let Some((d, off, _)) = self.index.remove(&key) {
            if let Some((_, alen)) = self.devs[d].by_off.remove(&off) {
                self.devs[d].used = self.devs[d].used.saturating_sub(alen);
            }
        }
    }
}

/// A block offered to the feeder.
type Offer = (BlockKey, Vec<u8>);

/// The second-level cache of one pool (see the module comment).
pub struct L2Arc {
    inner: Arc<Mutex<Inner>>,
    feed: Mutex<Option<SyncSender<Offer>>>,
    pending: Arc<AtomicUsize>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A cache device's counters, for `iostat -v`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheDevStats {
    pub guid: u64,
    pub io: IoCounts,
    /// Bytes of cached blocks on it.
    pub used: u64,
    /// Bytes its ring can hold.
    pub capacity: u64,
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl L2Arc {
    /// A cache over `devs` (guid, device, sector shift); devices too small for a ring are
    /// left out. The OpenZFS L2ARC header area of each is zeroed first.
    pub fn new(devs: Vec<(u64, Arc<dyn BlockDevice>, u64)>) -> Arc<L2Arc> {
        let mut inner = Inner::default();
        for (guid, dev, ashift) in devs {
            let align = 1u64 << ashift.clamp(9, 16);
            let end = dev.size().saturating_sub(ondisk::label::VDEV_LABEL_END_SIZE) / align * align;
            if end <= RING_START + (1 << 20) {
                continue;
            }
            if dev.write_at(&[0u8; 512], ondisk::label::VDEV_LABEL_START_SIZE).is_err() {
                continue;
            }
            inner.devs.push(Dev {
                guid,
                dev,
                align,
                end,
                hand: RING_START,
                by_off: BTreeMap::new(),
                used: 0,
                failed: false,
                io: IoCounts::default(),
            });
        }
        let inner = Arc::new(Mutex::new(inner));
        let pending = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = sync_channel(1024);
        let (i2, p2) = (inner.clone(), pending.clone());
        let thread =
            std::thread::Builder::new().name("l2arc-feed".into()).spawn(move || feeder(&i2, &p2, rx)).ok();
        let feed = if thread.is_some() { Some(tx) } else { None };
        Arc::new(L2Arc { inner, feed: Mutex::new(feed), pending, thread: Mutex::new(thread) })
    }

    /// Stops feeding and waits for the feeder: no write reaches a cache device after this
    /// returns (the pool is closing or the device list changes).
    pub fn close(&self) {
        self.feed.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }

    /// Each device's counters.
    pub fn stats(&self) -> Vec<CacheDevStats> {
        lock(&self.inner)
            .devs
            .iter()
            .map(|d| CacheDevStats { guid: d.guid, io: d.io, used: d.used, capacity: d.end - RING_START })
            .collect()
    }

    /// Blocks indexed now.
    pub fn blocks(&self) -> usize {
        lock(&self.inner).index.len()
    }

    /// Waits (a bounded time) until every offer queued so far is written (tests, and the
    /// benchmark's warm-up).
    pub fn settle(&self, timeout: std::time::Duration) -> bool {
        let t0 = std::time::Instant::now();
        while self.pending.load(Ordering::SeqCst) > 0 {
            if t0.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        true
    }
}

impl Drop for L2Arc {
    fn drop(&mut self) {
        self.close();
    }
}

impl zio::SecondLevel for L2Arc {
    fn lookup(&self, key: BlockKey, psize: usize) -> Option<Vec<u8>> {
        let (d, dev, off, len) = {
            let g = lock(&self.inner);
            let &(d, off, len) = g.index.get(&key)?;
            (d, g.devs[d].dev.clone(), off, len)
        };
        if len != psize {
            return None;
        }
        let mut buf = vec![0u8; len];
        let ok = dev.read_at(&mut buf, off).is_ok();
        let mut g = lock(&self.inner);
        if let Some(x) = g.devs.get_mut(d) {
            x.io.read_ops += 1;
            x.io.read_bytes += len as u64;
        }
        if !ok {
            g.drop_key(key);
            return None;
        }
        Some(buf)
    }

    fn offer(&self, key: BlockKey, data: &[u8]) {
        if data.is_empty() || data.len() > MAX_CACHED {
            return;
        }
        {
            let g = lock(&self.inner);
            if g.devs.iter().all(|d| d.failed) || g.index.contains_key(&key) {
                return;
            }
        }
        let len = data.len();
        if self.pending.fetch_add(len, Ordering::SeqCst) + len > FEED_MAX_BYTES {
            self.pending.fetch_sub(len, Ordering::SeqCst);
            return;
        }
        let sent = match &*self.feed.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(tx) => tx.try_send((key, data.to_vec())).is_ok(),
            None => false,
        };
        if !sent {
            self.pending.fetch_sub(len, Ordering::SeqCst);
        }
    }

    fn invalidate(&self, key: BlockKey) {
        lock(&self.inner).drop_key(key);
    }
}

/// The feeder: writes offered blocks at the hand of the next device, dropping from the
/// index whatever each write is about to overwrite, before writing it.
fn feeder(inner: &Mutex<Inner>, pending: &AtomicUsize, rx: Receiver<Offer>) {
    while let Ok((key, data)) = rx.recv() {
        let len = data.len();
        write_one(inner, key, data);
        pending.fetch_sub(len, Ordering::SeqCst);
    }
}

fn write_one(inner: &Mutex<Inner>, key: BlockKey, mut data: Vec<u8>) {
    let len = data.len();
    let (d, dev, off, alen) = {
        let mut g = lock(inner);
        if g.index.contains_key(&key) {
            return;
        }
        let n = g.devs.len();
        let Some(d) = (0..n).map(|i| (g.next + i) % n).find(|&i| !g.devs[i].failed) else { return };
        g.next = d + 1;
        let (align, end) = (g.devs[d].align, g.devs[d].end);
        let alen = (len as u64).div_ceil(align) * align;
        if RING_START + alen > end {
            return;
        }
        let mut hand = g.devs[d].hand;
        if hand + alen > end {
            hand = RING_START;
        }
        // Whatever [hand, hand + alen) overlaps goes first. Extents never overlap one
        // another, so walking down from the end of the range stops at the first one that
        // ends at or before the hand.
        let doomed: Vec<(u64, BlockKey)> = g.devs[d]
            .by_off
            .range(..hand + alen)
            .rev()
            .take_while(|(&o, &(_, l))| o + l > hand)
            .map(|(&o, &(k, _))| (o, k))
            .collect();
        for (o, k) in doomed {
            g.index.remove(&k);
            if let Some((_, l)) = g.devs[d].by_off.remove(&o) {
                g.devs[d].used = g.devs[d].used.saturating_sub(l);
            }
        }
        g.devs[d].hand = hand + alen;
        (d, g.devs[d].dev.clone(), hand, alen)
    };
    data.resize(alen as usize, 0);
    let ok = dev.write_at(&data, off).is_ok();
    let mut g = lock(inner);
    let x = &mut g.devs[d];
    if !ok {
        // A cache device that fails a write takes no more (it holds nothing the pool needs).
        x.failed = true;
        return;
    }
    x.io.write_ops += 1;
    x.io.write_bytes += alen;
    x.by_off.insert(off, (key, alen));
    x.used += alen;
    g.index.insert(key, (d, off, len));
}

#[cfg(test)]
mod tests {
    use super::*;
    use zio::SecondLevel;

    fn mem_dev(size: u64) -> Arc<dyn BlockDevice> {
        Arc::new(vdev::MemDevice::new("cache", size as usize))
    }

    #[test]
    fn caches_wraps_and_forgets_what_it_overwrites() {
        // A ring of 2 MiB: 16 blocks of 128 KiB fill it; later ones overwrite the first.
        let size = RING_START + (2 << 20) + ondisk::label::VDEV_LABEL_END_SIZE;
        let l2 = L2Arc::new(vec![(7, mem_dev(size), 9)]);
        let block = |i: u64| vec![i as u8; 128 << 10];
        for i in 0..16u64 {
            l2.offer((0, i, 1), &block(i));
            assert!(l2.settle(std::time::Duration::from_secs(5)));
        }
        for i in 0..16u64 {
            assert_eq!(l2.lookup((0, i, 1), 128 << 10), Some(block(i)), "block {i}");
        }
        // The 17th wraps to the start and takes the first block's place.
        l2.offer((0, 16, 1), &block(16));
        assert!(l2.settle(std::time::Duration::from_secs(5)));
        assert_eq!(l2.lookup((0, 0, 1), 128 << 10), None);
        assert_eq!(l2.lookup((0, 16, 1), 128 << 10), Some(block(16)));
        assert_eq!(l2.lookup((0, 1, 1), 128 << 10), Some(block(1)));
        // A wrong size or an invalidated key is a miss.
        assert_eq!(l2.lookup((0, 1, 1), 4096), None);
        l2.invalidate((0, 1, 1));
        assert_eq!(l2.lookup((0, 1, 1), 128 << 10), None);
        let st = l2.stats();
        assert_eq!(st[0].guid, 7);
        assert_eq!(st[0].io.write_ops, 17);
        assert_eq!(st[0].used, 15 * (128 << 10));
        // Odd sizes are padded to the sector; after close nothing more is written.
        l2.offer((1, 0, 2), &[5u8; 1000]);
        assert!(l2.settle(std::time::Duration::from_secs(5)));
        assert_eq!(l2.lookup((1, 0, 2), 1000), Some(vec![5u8; 1000]));
        l2.close();
        l2.offer((1, 1, 2), &[6u8; 1000]);
        assert_eq!(l2.lookup((1, 1, 2), 1000), None);
    }
}
