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
use dmu::tx::DirtyObjset;
use ondisk::zap::build::{build_zap, BuildEntry, ZapBuildOpts};
use ondisk::ByteOrder;
use std::collections::{BTreeMap, HashMap};

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
}

/// One ZAP held in memory.
#[derive(Clone, Debug, Default)]
pub struct ZapState {
    pub entries: BTreeMap<Vec<u8>, ZapVal>,
    pub salt: u64,
    pub normflags: u64,
    pub dirty: bool,
}

/// The ZAPs of one objset that are being read or modified.
#[derive(Default)]
pub struct ZapCache {
    zaps: HashMap<u64, ZapState>,
    seed: u64,
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

    /// Treats existing object `obj` (whose dnode type the caller has just made a ZAP type) as
    /// a new, empty ZAP: written at the next flush into its first block, bonus untouched
    /// (`dmu_object_zapify`).
    pub fn adopt_empty(&mut self, obj: u64) {
        self.register_new(obj, 0);
    }

    fn register_new(&mut self, obj: u64, normflags: u64) {
        let salt = new_salt(&mut self.seed);
        self.zaps.insert(obj, ZapState { entries: BTreeMap::new(), salt, normflags, dirty: true });
    }

    /// The in-memory state of `obj`, loaded from the committed objset on first use.
    pub fn state(&mut self, os: &DirtyObjset, obj: u64) -> Result<&mut ZapState> {
        match self.zaps.entry(obj) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => Ok(e.insert(load_state(os, obj)?)),
        }
    }

    pub fn lookup(&mut self, os: &DirtyObjset, obj: u64, name: &[u8]) -> Result<Option<ZapVal>> {
        Ok(self.state(os, obj)?.entries.get(name).cloned())
    }

    pub fn lookup_u64(&mut self, os: &DirtyObjset, obj: u64, name: &str) -> Result<Option<u64>> {
        Ok(self.lookup(os, obj, name.as_bytes())?.and_then(|v| v.values.first().copied()))
    }

    /// Adds or replaces an entry.
    pub fn update(&mut self, os: &DirtyObjset, obj: u64, name: &[u8], val: ZapVal) -> Result<()> {
        let st = self.state(os, obj)?;
        st.entries.insert(name.to_vec(), val);
        st.dirty = true;
        Ok(())
    }

    pub fn update_u64(&mut self, os: &DirtyObjset, obj: u64, name: &str, v: u64) -> Result<()> {
        self.update(os, obj, name.as_bytes(), ZapVal::u64(v))
    }

    /// Removes an entry; false if it was absent.
    pub fn remove(&mut self, os: &DirtyObjset, obj: u64, name: &[u8]) -> Result<bool> {
        let st = self.state(os, obj)?;
        let had = st.entries.remove(name).is_some();
        st.dirty |= had;
        Ok(had)
    }

    /// All entries, sorted by name.
    pub fn entries(&mut self, os: &DirtyObjset, obj: u64) -> Result<Vec<(Vec<u8>, ZapVal)>> {
        Ok(self.state(os, obj)?.entries.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    pub fn len(&mut self, os: &DirtyObjset, obj: u64) -> Result<usize> {
        Ok(self.state(os, obj)?.entries.len())
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
    /// dropped (they reload from disk when needed).
    pub fn flush(&mut self, os: &mut DirtyObjset, keep: usize) -> Result<()> {
        let mut dirty: Vec<u64> = self.zaps.iter().filter(|(_, z)| z.dirty).map(|(&o, _)| o).collect();
        dirty.sort_unstable();
        for obj in dirty {
            let st = self.zaps.get_mut(&obj).ok_or(ZapError::Corrupt { obj, detail: "vanished".into() })?;
            write_zap(os, obj, st)?;
            st.dirty = false;
        }
        if self.zaps.len() > keep {
            self.zaps.retain(|_, z| z.dirty);
        }
        Ok(())
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
