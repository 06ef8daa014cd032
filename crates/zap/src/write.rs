//! # Writing ZAP objects
//!
//! Theory. A ZAP being modified lives in memory as a sorted map from name to value
//! ([`ZapState`]), loaded from its committed blocks on first use. At txg sync,
//! [`ZapCache::flush`] re-encodes each dirty ZAP from scratch (micro when its entries allow,
//! fat otherwise: `ondisk::zap::build`) and writes the result over the object through the
//! DMU, which copy-on-writes only what changed on disk. This trades CPU per sync (a dirty
//! ZAP is re-encoded whole) for simplicity and for layouts that are always compact; it is
//! fine for the MOS and ordinary directories and is the thing to change for directories of
//! millions of entries (see docs/ARCHITECTURE.md).
//!
//! Invariant: a ZAP in the cache is authoritative; the committed blocks are read only
//! when the ZAP is first touched.

use crate::{list, Result, ZapError};
use dmu::tx::{DirtyObjset, TxgCost};
use ondisk::zap::build::{build_zap, BuildEntry, ZapBuildOpts};
use ondisk::ByteOrder;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A value: `values.len()` integers of `int_size` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapVal {
    pub int_size: u8,
    pub values: Vec<u64>,
}

impl ZapVal {
    pub fn u64(v: u64) -> ZapVal {
        ZapVal { int_size: 8, values: vec![v] }
    }
    pub fn bytes(b: &[u8]) -> ZapVal {
        ZapVal { int_size: 1, values: b.iter().map(|&x| u64::from(x)).collect() }
    }
    /// A NUL-terminated string, as OpenZFS stores string properties.
    pub fn string(s: &str) -> ZapVal {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        ZapVal::bytes(&b)
    }
    /// The text of a [`ZapVal::string`] value (up to its NUL; lossy).
    pub fn text(&self) -> String {
        let bytes: Vec<u8> = self.values.iter().take_while(|&&b| b != 0).map(|&b| b as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// One ZAP held in memory.
#[derive(Clone, Debug, Default)]
pub struct ZapState {
    pub entries: BTreeMap<Vec<u8>, ZapVal>,
    pub salt: u64,
    pub normflags: u64,
    pub dirty: bool,
    /// A normalized ZAP's names by the hash of their normalized form, built on first use by
    /// a normalized lookup or a collision check, then kept up to date by every change.
    norm_index: Option<HashMap<u64, Vec<Vec<u8>>>>,
}

/// The ZAPs of one objset that are being read or modified.
///
/// A flush writes the dirty ZAPs into the open txg of their objset and marks them clean;
/// until that txg is durable ([`ZapCache::flush_committed`]) the cache keeps them (their
/// committed blocks are older than what the cache holds), and if the sync fails
/// ([`ZapCache::flush_failed`]) they become dirty again, so the retried sync writes them.
#[derive(Clone, Default)]
pub struct ZapCache {
    /// Shared with the copies a txg checkpoint takes (`Clone`): a ZAP is copied only when
    /// changed while a copy holds it, so a checkpoint costs a pointer per cached ZAP, not
    /// a copy of every entry (the MOS caches a ZAP per dataset directory, snapshot list,
    /// deadlist and props object).
    zaps: HashMap<u64, Arc<ZapState>>,
    seed: u64,
    /// ZAPs written by the last flush whose txg is not yet durable.
    flushed: std::collections::HashSet<u64>,
    /// Upper bound of what writing the dirty ZAPs costs (see [`ZapCache::cost`]).
    dirty_cost: TxgCost,
}

/// Chunks (24 bytes each) one entry takes in a fat-ZAP leaf: the entry chunk, then the
/// name and the value in array chunks of 21 bytes (`ZAP_LEAF_ARRAY_BYTES`).
fn entry_chunks(name: &[u8], v: &ZapVal) -> u64 {
    let value_bytes = v.values.len() as u64 * u64::from(v.int_size.max(1));
    1 + (name.len() as u64 + 1).div_ceil(21) + value_bytes.div_ceil(21)
}

/// Leaf and header blocks of a fat ZAP are 16 KiB (`fzap_default_block_shift`).
const FAT_BLOCK: u64 = 16 << 10;
/// Chunks a 16 KiB leaf holds (after its header and hash table), halved: leaves split when
/// full, so they are at least about half full.
const CHUNKS_PER_LEAF_MIN: u64 = 300;

/// Chunks a fat ZAP leaf of [`FAT_BLOCK`] bytes holds (`ZAP_LEAF_NUMCHUNKS`: the block less
/// its two header chunks and its 2-byte hash table of `block / 32` entries, in 24-byte chunks).
const LEAF_NUMCHUNKS: u64 = (FAT_BLOCK - 2 * (FAT_BLOCK / 32)) / 24 - 2;

impl ZapState {
    /// The (masked) hash `name` is stored under: the hash of its normalized form.
    fn norm_hash(&self, name: &[u8]) -> u64 {
        let key = ondisk::zap::norm::normalize(name, self.normflags);
        // A string key of a ZAP without flags cannot fail to hash.
        ondisk::zap::zap_hash(self.salt, ondisk::zap::ZapKey::Str(&key), 0).unwrap_or(0)
    }

    /// The normalized-name index, built when first needed.
    fn index(&mut self) -> &mut HashMap<u64, Vec<Vec<u8>>> {
        if self.norm_index.is_none() {
            let mut ix: HashMap<u64, Vec<Vec<u8>>> = HashMap::new();
            for k in self.entries.keys() {
                ix.entry(self.norm_hash(k)).or_default().push(k.clone());
            }
            self.norm_index = Some(ix);
        }
        self.norm_index.get_or_insert_with(HashMap::new)
    }

    /// An upper bound of the bytes and blocks this ZAP takes when encoded (fat layout: a
    /// header block, leaves at least half full, one more leaf of slack; a micro ZAP is
    /// always smaller).
    pub fn encoded_cost(&self) -> TxgCost {
        let chunks: u64 = self.entries.iter().map(|(k, v)| entry_chunks(k, v)).sum();
        let blocks = 2 + chunks.div_ceil(CHUNKS_PER_LEAF_MIN);
        TxgCost { meta_blocks: blocks, meta_bytes: blocks * FAT_BLOCK, ..TxgCost::default() }
    }
}

/// `U8_TEXTPREP_TOUPPER`: snapshot-name ZAPs are created with it (names hash upper-cased).
pub const U8_TEXTPREP_TOUPPER: u64 = ondisk::zap::build::U8_TEXTPREP_TOUPPER;

fn new_salt(seed: &mut u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    h.write_u64(*seed);
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    // OpenZFS salts are non-zero; micro ZAP salts are arbitrary 64-bit values.
    h.finish() | 1
}

impl ZapCache {
    pub fn new() -> ZapCache {
        ZapCache::default()
    }

    /// Creates an empty ZAP object of type `ot` (bonus as given) and returns its number.
    pub fn create(&mut self, os: &mut DirtyObjset, ot: u8, bonus_type: u8, bonus: Vec<u8>) -> Result<u64> {
        let obj = os.alloc_object(ot, 512, bonus_type, bonus)?;
        self.register_new(obj, 0);
        Ok(obj)
    }

    /// Like [`ZapCache::create`] with a dnode of `slots` slots (a directory of a file system
    /// with `dnodesize` above 512).
    pub fn create_dnsize(
        &mut self,
        os: &mut DirtyObjset,
        ot: u8,
        bonus_type: u8,
        bonus: Vec<u8>,
        slots: u8,
    ) -> Result<u64> {
        self.create_dnsize_norm(os, ot, bonus_type, bonus, slots, 0)
    }

    /// [`ZapCache::create_dnsize`] with name normalization flags (the directories of a file
    /// system with `normalization` or `casesensitivity` set).
    pub fn create_dnsize_norm(
        &mut self,
        os: &mut DirtyObjset,
        ot: u8,
        bonus_type: u8,
        bonus: Vec<u8>,
        slots: u8,
        normflags: u64,
    ) -> Result<u64> {
        let obj = os.alloc_object_dnsize(ot, 512, bonus_type, bonus, slots)?;
        self.register_new(obj, normflags);
        Ok(obj)
    }

    /// Like [`ZapCache::create`] with name normalization flags (snapshot maps).
    pub fn create_norm(&mut self, os: &mut DirtyObjset, ot: u8, normflags: u64) -> Result<u64> {
        let obj = os.alloc_object(ot, 512, 0, Vec::new())?;
        self.register_new(obj, normflags);
        Ok(obj)
    }

    /// Creates an empty ZAP at a fixed object number.
    pub fn create_claim(&mut self, os: &mut DirtyObjset, obj: u64, ot: u8) -> Result<()> {
        os.claim_object(obj, ot, 512, 0, Vec::new())?;
        self.register_new(obj, 0);
        Ok(())
    }

    /// Creates an empty accounting ZAP (object -1, -2 or -3 of a ZPL objset) while a sync
    /// updates the accounting ([`DirtyObjset::claim_accounting`]).
    pub fn create_accounting(&mut self, os: &mut DirtyObjset, obj: u64) -> Result<()> {
        os.claim_accounting(obj)?;
        self.register_new(obj, 0);
        Ok(())
    }

    /// Treats existing object `obj` (whose dnode type the caller has just made a ZAP type) as
    /// a new, empty ZAP: written at the next flush into its first block, bonus untouched
    /// (`dmu_object_zapify`).
    pub fn adopt_empty(&mut self, obj: u64) {
        self.register_new(obj, 0);
    }

    fn register_new(&mut self, obj: u64, normflags: u64) {
        let salt = new_salt(&mut self.seed);
        let st = ZapState { entries: BTreeMap::new(), salt, normflags, dirty: true, norm_index: None };
        self.dirty_cost.add(&st.encoded_cost());
        self.zaps.insert(obj, Arc::new(st));
    }

    /// What writing the dirty ZAPs at the next flush may cost (an upper bound kept up to
    /// date by every change: the space a txg reserves must cover ZAPs before they are
    /// encoded).
    pub fn cost(&self) -> TxgCost {
        self.dirty_cost
    }

    /// Marks `obj` dirty, charging its encoded size the first time in a txg.
    fn mark_dirty(&mut self, obj: u64) {
        if let Some(st) = self.zaps.get_mut(&obj) {
            if !st.dirty {
                let st = Arc::make_mut(st);
                st.dirty = true;
                let c = st.encoded_cost();
                self.dirty_cost.add(&c);
            }
        }
    }

    /// The in-memory state of `obj` to change, loaded from the committed objset on first
    /// use (and copied first if a checkpoint shares it).
    pub fn state(&mut self, os: &DirtyObjset, obj: u64) -> Result<&mut ZapState> {
        let st = match self.zaps.entry(obj) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Arc::new(load_state(os, obj)?)),
        };
        Ok(Arc::make_mut(st))
    }

    /// The in-memory state of `obj` to read (never copied).
    fn loaded(&mut self, os: &DirtyObjset, obj: u64) -> Result<&ZapState> {
        let st = match self.zaps.entry(obj) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Arc::new(load_state(os, obj)?)),
        };
        Ok(st)
    }

    pub fn lookup(&mut self, os: &DirtyObjset, obj: u64, name: &[u8]) -> Result<Option<ZapVal>> {
        Ok(self.loaded(os, obj)?.entries.get(name).cloned())
    }

    /// The stored name that `name` finds in a normalized ZAP (`MT_NORMALIZE`): the name
    /// itself when stored, else one that normalizes alike under the ZAP's flags — without
    /// the case fold when `match_case` (a case-sensitive lookup in a mixed-case directory).
    /// On a ZAP without normalization, an exact lookup.
    pub fn lookup_norm(
        &mut self,
        os: &DirtyObjset,
        obj: u64,
        name: &[u8],
        match_case: bool,
    ) -> Result<Option<Vec<u8>>> {
        let st = self.state(os, obj)?;
        if st.entries.contains_key(name) {
            return Ok(Some(name.to_vec()));
        }
        if st.normflags == 0 {
            return Ok(None);
        }
        let flags = if match_case { st.normflags & !U8_TEXTPREP_TOUPPER } else { st.normflags };
        let want = ondisk::zap::norm::normalize(name, flags);
        let h = st.norm_hash(name);
        Ok(st
            .index()
            .get(&h)
            .and_then(|names| names.iter().find(|n| ondisk::zap::norm::normalize(n, flags) == want).cloned()))
    }

    /// Whether a new entry `name` with a value of `value_bytes` bytes can be added. Only a
    /// normalized ZAP can refuse: every spelling of a name hashes alike there, and all the
    /// entries of one hash must fit one fat leaf (a leaf cannot be split between equal
    /// hashes; OpenZFS fails such an add with ENOSPC once its pointer table can grow no
    /// more, `zap_grow_ptrtbl`). Refusing here keeps the txg sync from meeting it.
    pub fn can_add(&mut self, os: &DirtyObjset, obj: u64, name: &[u8], value_bytes: u64) -> Result<bool> {
        let st = self.state(os, obj)?;
        if st.normflags == 0 || st.entries.contains_key(name) {
            return Ok(true);
        }
        let h = st.norm_hash(name);
        let names = st.index().get(&h).cloned().unwrap_or_default();
        let mut chunks = 1 + (name.len() as u64 + 1).div_ceil(21) + value_bytes.div_ceil(21);
        for n in &names {
            if let Some(v) = st.entries.get(n) {
                chunks += entry_chunks(n, v);
            }
        }
        Ok(chunks <= LEAF_NUMCHUNKS)
    }

    pub fn lookup_u64(&mut self, os: &DirtyObjset, obj: u64, name: &str) -> Result<Option<u64>> {
        Ok(self.lookup(os, obj, name.as_bytes())?.and_then(|v| v.values.first().copied()))
    }

    /// Adds or replaces an entry.
    pub fn update(&mut self, os: &DirtyObjset, obj: u64, name: &[u8], val: ZapVal) -> Result<()> {
        let st = self.state(os, obj)?;
        let was_dirty = st.dirty;
        let chunks = entry_chunks(name, &val);
        let new = st.entries.insert(name.to_vec(), val).is_none();
        if new && st.norm_index.is_some() {
            let h = st.norm_hash(name);
            st.index().entry(h).or_default().push(name.to_vec());
        }
        if was_dirty {
            // A new entry may need a new leaf: charge its chunks as a share of one.
            let extra = (chunks * FAT_BLOCK).div_ceil(CHUNKS_PER_LEAF_MIN);
            self.dirty_cost.meta_bytes += extra;
        } else {
            self.mark_dirty(obj);
        }
        Ok(())
    }

    pub fn update_u64(&mut self, os: &DirtyObjset, obj: u64, name: &str, v: u64) -> Result<()> {
        self.update(os, obj, name.as_bytes(), ZapVal::u64(v))
    }

    /// Removes an entry; false if it was absent.
    pub fn remove(&mut self, os: &DirtyObjset, obj: u64, name: &[u8]) -> Result<bool> {
        let st = self.state(os, obj)?;
        let had = st.entries.remove(name).is_some();
        if had && st.norm_index.is_some() {
            let h = st.norm_hash(name);
            if let Some(v) = st.index().get_mut(&h) {
                v.retain(|n| n != name);
            }
        }
        if had {
            self.mark_dirty(obj);
        }
        Ok(had)
    }

    /// All entries, sorted by name.
    pub fn entries(&mut self, os: &DirtyObjset, obj: u64) -> Result<Vec<(Vec<u8>, ZapVal)>> {
        Ok(self.loaded(os, obj)?.entries.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    pub fn len(&mut self, os: &DirtyObjset, obj: u64) -> Result<usize> {
        Ok(self.loaded(os, obj)?.entries.len())
    }

    /// Frees the ZAP object.
    pub fn destroy(&mut self, os: &mut DirtyObjset, obj: u64) -> Result<()> {
        self.zaps.remove(&obj);
        os.free_object(obj)?;
        Ok(())
    }

    /// Is any ZAP waiting to be written?
    pub fn is_dirty(&self) -> bool {
        self.zaps.values().any(|z| z.dirty)
    }

    /// Writes every dirty ZAP into its object. Clean ZAPs beyond `keep` cached ones are
    /// dropped first (they reload from their committed blocks when needed); the ZAPs
    /// written stay cached until [`ZapCache::flush_committed`].
    pub fn flush(&mut self, os: &mut DirtyObjset, keep: usize) -> Result<()> {
        if self.zaps.len() > keep {
            let pinned = &self.flushed;
            self.zaps.retain(|o, z| z.dirty || pinned.contains(o));
        }
        let mut dirty: Vec<u64> = self.zaps.iter().filter(|(_, z)| z.dirty).map(|(&o, _)| o).collect();
        dirty.sort_unstable();
        for obj in dirty {
            let st = self.zaps.get_mut(&obj).ok_or(ZapError::Corrupt { obj, detail: "vanished".into() })?;
            let st = Arc::make_mut(st);
            write_zap(os, obj, st)?;
            st.dirty = false;
            self.flushed.insert(obj);
        }
        self.dirty_cost = TxgCost::default();
        Ok(())
    }

    /// The txg the last flushes wrote into is durable: their ZAPs' committed blocks are
    /// current again.
    pub fn flush_committed(&mut self) {
        self.flushed.clear();
    }

    /// The txg the last flushes wrote into was abandoned (its sync failed and the objset was
    /// restored to its state before the flush): the ZAPs they wrote are dirty again.
    pub fn flush_failed(&mut self) {
        for obj in std::mem::take(&mut self.flushed) {
            self.mark_dirty(obj);
        }
    }
}

/// Reads a committed ZAP into memory.
fn load_state(os: &DirtyObjset, obj: u64) -> Result<ZapState> {
    let committed = os.committed().ok_or(ZapError::Corrupt { obj, detail: "not a ZAP yet".into() })?;
    let mut st = ZapState::default();
    for e in list(committed, obj)? {
        st.entries.insert(e.name, ZapVal { int_size: e.int_size, values: e.values });
    }
    let (salt, normflags) = crate::salt_and_norm(committed, obj)?;
    st.salt = salt;
    st.normflags = normflags;
    Ok(st)
}

fn write_zap(os: &mut DirtyObjset, obj: u64, st: &ZapState) -> Result<()> {
    let entries: Vec<BuildEntry> = st
        .entries
        .iter()
        .map(|(k, v)| BuildEntry { name: k.clone(), int_size: v.int_size, values: v.values.clone() })
        .collect();
    let mut opts = ZapBuildOpts::new(st.salt);
    opts.normflags = st.normflags;
    let img = build_zap(&entries, &opts, ByteOrder::Little)
        .map_err(|e| ZapError::Corrupt { obj, detail: e.to_string() })?;
    let bs = img.block_size as u64;
    let dn = os.dnode(obj)?.ok_or(dmu::DmuError::NoSuchObject(obj))?;
    let n = img.blocks.len() as u64;
    if dn.data_block_size() != bs {
        os.free_range(obj, 0, u64::MAX)?;
        os.set_block_size(obj, bs)?;
    } else if dn.maxblkid >= n {
        os.free_range(obj, n * bs, u64::MAX)?;
    }
    for (i, b) in img.blocks.iter().enumerate() {
        os.write(obj, i as u64 * bs, b)?;
    }
    Ok(())
}
