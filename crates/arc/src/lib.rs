//! # arc — the block cache, with a hard byte limit
//!
//! Theory. The cache maps a block's identity (its first DVA and birth txg: a block's contents
//! never change while that pair names it, because ZFS never overwrites live blocks) to its
//! verified, decompressed contents. Every entry is charged its byte length; the sum never
//! exceeds `limit_bytes` after an insert returns (the memory bound is a product promise).
//!
//! Eviction is least-recently-used over a logical clock:
//! 1. every hit or insert stamps the entry with a fresh tick;
//! 2. `order` maps tick → key and holds exactly one tick per entry;
//! 3. an insert evicts the smallest ticks until the new entry fits; an entry larger than the
//!    whole limit is not cached at all.
//!
//! The adaptive MRU/MFU balance of OpenZFS's ARC is not implemented yet; LRU keeps the bound
//! and is simple to reason about. Values are [`Block`]s (shared, immutable buffers), so an evicted
//! block stays valid for
//! readers that still hold it (their memory is theirs, not the cache's). A `Block` wraps the
//! `Vec` the pipeline produced, so caching a block never copies it.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// A cached block: the verified, decompressed bytes, shared without copying.
pub type Block = Arc<Vec<u8>>;

/// Default cache size: 64 MiB, the smallest ARC our small-board users found workable with
/// OpenZFS (USERS.md); rzfs must be at least as frugal.
pub const DEFAULT_LIMIT_BYTES: usize = 64 << 20;

/// Counters, for `arcstat`-like reporting and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub size_bytes: usize,
    pub entries: usize,
}

struct State<K> {
    map: HashMap<K, (Block, u64)>,
    order: BTreeMap<u64, K>,
    tick: u64,
    size_bytes: usize,
    stats: CacheStats,
}

/// A byte-bounded LRU cache of immutable blocks.
pub struct BlockCache<K> {
    limit_bytes: usize,
    state: Mutex<State<K>>,
}

impl<K: Hash + Eq + Clone> BlockCache<K> {
    /// A cache that never holds more than `limit_bytes` of block data.
    pub fn new(limit_bytes: usize) -> Self {
        BlockCache {
            limit_bytes,
            state: Mutex::new(State {
                map: HashMap::new(),
                order: BTreeMap::new(),
                tick: 0,
                size_bytes: 0,
                stats: CacheStats::default(),
            }),
        }
    }

    /// The configured bound.
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that
        // matters for a cache (worst case: a stale entry), so recover from poisoning.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks a block up, refreshing its recency.
    pub fn get(&self, key: &K) -> Option<Block> {
        let mut st = self.lock();
        st.tick += 1;
        let tick = st.tick;
        let found = st.map.get_mut(key).map(|(v, t)| {
            let old = *t;
            *t = tick;
            (v.clone(), old)
        });
        match found {
            Some((v, old)) => {
                st.order.remove(&old);
                st.order.insert(tick, key.clone());
                st.stats.hits += 1;
                Some(v)
            }
            None => {
                st.stats.misses += 1;
                None
            }
        }
    }

    /// Inserts a block, evicting the least recently used ones to stay within the bound.
    pub fn insert(&self, key: K, value: Block) {
        let len = value.len();
        if len > self.limit_bytes {
            return;
        }
        let mut st = self.lock();
        if let Some((old, t)) = st.map.remove(&key) {
            st.order.remove(&t);
            st.size_bytes -= old.len();
        }
        while st.size_bytes + len > self.limit_bytes {
            let Some((&t, _)) = st.order.iter().next() else {
                break;
            };
            if let Some(k) = st.order.remove(&t) {
                if let Some((v, _)) = st.map.remove(&k) {
                    st.size_bytes -= v.len();
                    st.stats.evictions += 1;
                }
            }
        }
        st.tick += 1;
        let tick = st.tick;
        st.order.insert(tick, key.clone());
        st.map.insert(key, (value, tick));
        st.size_bytes += len;
    }

    /// Drops one entry (e.g. a block that was freed).
    pub fn remove(&self, key: &K) {
        let mut st = self.lock();
        if let Some((v, t)) = st.map.remove(key) {
            st.order.remove(&t);
            st.size_bytes -= v.len();
        }
    }

    /// Drops every entry whose key fails `keep` (a txg sync that is rolled back forgets the
    /// blocks it wrote: their (DVA, birth) keys will name other contents when it is retried).
    pub fn retain(&self, keep: impl Fn(&K) -> bool) {
        let mut st = self.lock();
        let gone: Vec<(K, u64)> =
            st.map.iter().filter(|(k, _)| !keep(k)).map(|(k, (_, t))| (k.clone(), *t)).collect();
        for (k, t) in gone {
            st.order.remove(&t);
            if let Some((v, _)) = st.map.remove(&k) {
                st.size_bytes -= v.len();
            }
        }
    }

    /// Current counters.
    pub fn stats(&self) -> CacheStats {
        let st = self.lock();
        CacheStats { size_bytes: st.size_bytes, entries: st.map.len(), ..st.stats }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn evicts_least_recent_first() {
        let c = BlockCache::new(300);
        c.insert(1, Arc::new(vec![0u8; 100]));
        c.insert(2, Arc::new(vec![0u8; 100]));
        c.insert(3, Arc::new(vec![0u8; 100]));
        assert!(c.get(&1).is_some()); // 2 is now the oldest
        c.insert(4, Arc::new(vec![0u8; 100]));
        assert!(c.get(&2).is_none());
        assert!(c.get(&1).is_some() && c.get(&3).is_some() && c.get(&4).is_some());
        assert_eq!(c.stats().size_bytes, 300);
    }

    #[test]
    fn oversized_blocks_are_not_cached() {
        let c = BlockCache::new(10);
        c.insert(1, Arc::new(vec![0u8; 11]));
        assert_eq!(c.stats().entries, 0);
    }

    #[test]
    fn retain_drops_and_uncharges() {
        let c = BlockCache::new(1000);
        for k in 0..5u64 {
            c.insert(k, Arc::new(vec![0u8; 100]));
        }
        c.retain(|k| k % 2 == 0);
        assert_eq!(c.stats().entries, 3);
        assert_eq!(c.stats().size_bytes, 300);
        assert!(c.get(&1).is_none() && c.get(&2).is_some());
    }

    proptest! {
        /// The bound holds after every operation, whatever the sequence.
        #[test]
        fn never_exceeds_limit(ops in proptest::collection::vec((0u8..20, 0usize..400, any::<bool>()), 1..200)) {
            let c = BlockCache::new(1000);
            for (k, len, ins) in ops {
                if ins { c.insert(k, Arc::new(vec![0u8; len])); } else { let _ = c.get(&k); }
                let s = c.stats();
                prop_assert!(s.size_bytes <= 1000);
            }
        }
    }
}
