//! # Adding top-level vdevs to a pool open for writing (`zpool add`, OpenZFS `spa_vdev_add`)
//!
//! Theory. A new top-level vdev gets id = the current number of tops, fresh guids (unique
//! across the pool), the ashift asked for, an allocatable size computed from its leaves exactly
//! as `create` does, a metaslab shift from [`metaslab::metaslab_shift`], and an empty
//! metaslab array (`DMU_OT_OBJECT_ARRAY`) in the MOS. Its `create_txg` is the txg that adds it.
//!
//! Order of work, as in OpenZFS (see the comment about added-but-not-initialized vdevs in
//! module/zfs/spa.c `spa_vdev_add`): nothing may be allocated on a new vdev before a
//! configuration naming it is on disk, or a crash would leave DVAs no config can translate.
//! So:
//!
//! 1. validate everything and build the vdevs in memory (nothing written);
//! 2. sync what is pending, so that step 6 reopens exactly the committed state;
//! 3. zero the label areas of the new leaves (they must not carry another pool's uberblocks);
//! 4. add the metaslab array objects and the vdevs to the writer, mark the config dirty;
//! 5. sync: this txg's blocks all go to the old tops (the allocator does not know the new
//!    ones yet); the new config goes into the MOS and into the labels of every leaf, old
//!    and new, then the uberblock into every leaf;
//! 6. the read pipeline (`zio::Zio`) has a fixed vdev table, so a new one is built over all
//!    tops and the MOS and every open dataset objset are reopened on it from their
//!    committed roots (they are clean after step 5: nothing is lost);
//! 7. the allocator learns the new tops: from the next txg on, writes spread onto them.
//!
//! A new vdev may differ from the pool's in type, width and ashift: the allocator asks each
//! top-level vdev for the allocated size of a block (see `writer::AllocShared`). As zpool, a
//! replication level that differs from the pool's is refused unless the caller overrides it
//! ([`replication_error`]), and the ashift is the caller's choice (zpool's `-o ashift`, the
//! pool's `ashift` property, else the pool's first vdev's).

use crate::create::{build_top, clear_top_labels, deflate_ratio, NewTop};
use crate::writer::{PoolWriter, TopInfo};
use crate::{PoolError, Result};
use codec::checksum::ChecksumCtx;
use dmu::tx::DirtyObjset;
use dmu::Reader;
use ondisk::dmu_types::DmuObjectType as T;
use ondisk::dsl::mos_keys as K;
use std::sync::Arc;
use vdev::{Vdev, VdevKind};
use zap::write::ZapCache;

/// A new top-level vdev built and checked, not yet part of the pool.
struct Prepared {
    vdev: Arc<Vdev>,
    asize: u64,
    ms_shift: u32,
    paths: Vec<(u64, String)>,
}

/// The replication level of a top-level vdev as zpool names it (`replication_level_t`):
/// type (`disk`, `file`, `mirror`, `raidz`), number of children, parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rep {
    kind: &'static str,
    children: usize,
    parity: u8,
}

fn rep_of_vdev(v: &Vdev) -> Rep {
    match v.kind() {
        VdevKind::Disk => Rep { kind: "disk", children: 1, parity: 0 },
        VdevKind::Mirror => Rep { kind: "mirror", children: v.children().len(), parity: 0 },
        VdevKind::Raidz { nparity } => Rep { kind: "raidz", children: v.children().len(), parity: *nparity },
        _ => Rep { kind: "file", children: 1, parity: 0 },
    }
}

fn rep_of_new(t: &NewTop) -> Rep {
    match t {
        NewTop::Single(l) => Rep { kind: if l.is_disk { "disk" } else { "file" }, children: 1, parity: 0 },
        NewTop::Mirror(ls) => Rep { kind: "mirror", children: ls.len(), parity: 0 },
        NewTop::Raidz { parity, leaves } => Rep { kind: "raidz", children: leaves.len(), parity: *parity },
    }
}

/// zpool's complaint (cmd/zpool/zpool_vdev.c `check_replication`) about a new vdev whose
/// replication level differs from the pool's, if zpool would have one.
fn zpool_mismatch(pool: Rep, new: Rep) -> Option<String> {
    let raidz_mirror = match (pool.kind, new.kind) {
        ("raidz", "mirror") => Some((pool, new)),
        ("mirror", "raidz") => Some((new, pool)),
        _ => None,
    };
    if let Some((rz, m)) = raidz_mirror {
        if usize::from(rz.parity) + 1 == m.children {
            return None;
        }
        return Some(format!(
            "mismatched replication level: pool and new vdev with different redundancy, raidz and mirror vdevs, {} vs. {} ({}-way)",
            rz.parity,
            m.children - 1,
            m.children
        ));
    }
    if pool.kind != new.kind {
        return Some(format!(
            "mismatched replication level: pool uses {} and new vdev is {}",
            pool.kind, new.kind
        ));
    }
    if pool.parity != new.parity {
        return Some(format!(
            "mismatched replication level: pool uses {} device parity and new vdev uses {}",
            pool.parity, new.parity
        ));
    }
    if pool.children != new.children {
        return Some(format!(
            "mismatched replication level: pool uses {}-way {} and new vdev uses {}-way {}",
            pool.children, pool.kind, new.children, new.kind
        ));
    }
    None
}

/// zpool's refusal of new top-level vdevs whose replication level differs from the pool's
/// (cmd/zpool/zpool_vdev.c `check_replication`), unless `-f` or
/// `--allow-replication-mismatch` overrides it. The pool's level is its last top-level
/// vdev's when every neighbouring pair agrees (a raidz next to a mirror agrees when both
/// survive as many failures); a pool whose vdevs disagree has none, and zpool then checks
/// nothing (`get_replication` without `fatal`). Log vdevs take no part.
pub fn replication_error(existing: &[Arc<Vdev>], new: &[NewTop], log: &[bool]) -> Option<String> {
    let reps: Vec<Rep> = existing
        .iter()
        .filter(|t| !matches!(t.kind(), VdevKind::Hole) && !t.is_log())
        .map(|t| rep_of_vdev(t))
        .collect();
    let mut pool = *reps.first()?;
    for r in &reps[1..] {
        if zpool_mismatch(pool, *r).is_some() {
            return None;
        }
        pool = *r;
    }
    let msgs: Vec<String> = new
        .iter()
        .enumerate()
        .filter(|(i, _)| !log.get(*i).copied().unwrap_or(false))
        .filter_map(|(_, t)| zpool_mismatch(pool, rep_of_new(t)))
        .collect();
    let first = msgs.first()?;
    Some(format!("invalid vdev specification\nuse '-f' to override the following errors:\n{first}"))
}

impl PoolWriter {
    /// Every guid in use: the pool's (the root vdev's) and every vdev's.
    pub(crate) fn all_guids(&self) -> Vec<u64> {
        let mut out = vec![self.guid];
        for t in &self.tops {
            let mut stack = vec![t.as_ref()];
            while let Some(v) = stack.pop() {
                out.push(v.guid());
                stack.extend(v.children().iter());
            }
        }
        out.extend(self.spares.iter().map(|s| s.guid));
        out.extend(self.caches.devs.iter().map(|c| c.guid));
        out
    }

    /// Builds and checks the new top-level vdevs, of sector shift `ashift` (`None`: the
    /// first vdev's); writes nothing.
    fn prepare_add(&self, tops: &[NewTop], log: &[bool], ashift: Option<u8>) -> Result<Vec<Prepared>> {
        if tops.is_empty() {
            return Err(PoolError::Invalid("invalid vdev specification: no top-level vdev to add".into()));
        }
        let first =
            self.tops.first().ok_or_else(|| PoolError::Invalid("pool has no top-level vdev".into()))?;
        let ashift = ashift.unwrap_or(first.ashift());
        if !(9..=16).contains(&ashift) {
            return Err(PoolError::Invalid(format!("ashift {ashift} is out of range (9 to 16)")));
        }
        let mut guids = self.all_guids();
        // A scratch allocator checks the metaslab geometry before anything is written.
        let mut scratch = metaslab::Allocator::new();
        let mut out = Vec::new();
        for (i, t) in tops.iter().enumerate() {
            let id = (self.tops.len() + i) as u64;
            let (vdev, asize, paths) = build_top(t, id, ashift, &mut guids)?;
            vdev.set_log(log.get(i).copied().unwrap_or(false));
            for (_, p) in &paths {
                if self.paths.values().any(|q| q == p) {
                    return Err(PoolError::Invalid(format!("{p} is already part of pool '{}'", self.name)));
                }
            }
            let ms_shift = metaslab::metaslab_shift(asize);
            scratch
                .add_top(id, asize, ashift, ms_shift)
                .map_err(|e| PoolError::Invalid(format!("top-level vdev {id}: {e}")))?;
            out.push(Prepared { vdev, asize, ms_shift, paths });
        }
        Ok(out)
    }

    /// Checks that `tops` could be added (`zpool add -n`); writes nothing.
    pub fn check_add(&self, tops: &[NewTop], log: &[bool], ashift: Option<u8>) -> Result<()> {
        self.prepare_add(tops, log, ashift).map(|_| ())
    }

    /// Adds `tops` as new top-level vdevs and syncs (see the module comment for the order).
    /// On an error after validation the pool should be exported and imported again.
    /// `log[i]` makes new vdev `i` a separate intent log.
    pub fn add_tops(&mut self, tops: &[NewTop], log: &[bool], ashift: Option<u8>) -> Result<()> {
        let prepared = self.prepare_add(tops, log, ashift)?;
        self.sync()?;
        for p in &prepared {
            clear_top_labels(&p.vdev)?;
        }
        let txg = self.txg;
        for p in &prepared {
            let count = p.asize >> p.ms_shift;
            let arr = self.mos.alloc_object(T::ObjectArray.to_u8(), 16 << 10, 0, Vec::new())?;
            self.mos.write(arr, 0, &vec![0u8; (count * 8) as usize])?;
            self.top_info.push(TopInfo {
                ms_array: arr,
                ms_shift: p.ms_shift,
                asize: p.asize,
                create_txg: txg,
                deflate_ratio: deflate_ratio(&p.vdev),
            });
            self.tops.push(p.vdev.clone());
            self.paths.extend(p.paths.iter().cloned());
        }
        self.config_dirty = true;
        self.sync()?;
        self.reopen_on_all_tops()?;
        for p in &prepared {
            self.alloc.add_top(p.vdev.id(), p.asize, p.vdev.ashift(), p.ms_shift)?;
            self.alloc.set_log(p.vdev.id(), p.vdev.is_log())?;
        }
        Ok(())
    }

    /// A new read pipeline over every top-level vdev; the MOS and the open datasets are
    /// reopened on it from their committed roots. Only valid right after a sync.
    fn reopen_on_all_tops(&mut self) -> Result<()> {
        if self.is_dirty() {
            return Err(PoolError::Invalid("reopening a pool with unsynced changes".into()));
        }
        let io: Vec<Option<Arc<dyn zio::VdevIo>>> = self
            .tops
            .iter()
            .map(|t| (*t.kind() != VdevKind::Hole).then(|| t.clone() as Arc<dyn zio::VdevIo>))
            .collect();
        let zio = Arc::new(zio::Zio::new(io, ChecksumCtx::default()));
        let committed = self.mos.committed().ok_or_else(|| PoolError::Invalid("MOS never synced".into()))?;
        if let Some(salt) = checksum_salt(committed)? {
            zio.set_checksum_ctx(ChecksumCtx::new(salt));
        }
        let mos_bp = committed.bp;
        // The block cache is keyed by DVA and birth, which do not depend on the pipeline.
        let reader = Reader::new(zio, self.reader.cache.clone());
        let mos = DirtyObjset::open(&reader, &mos_bp)?;
        let mut reopened = Vec::new();
        for (&ds, d) in &self.datasets {
            let bp =
                d.os.committed().map(|o| o.bp).ok_or_else(|| {
                    PoolError::Invalid(format!("dataset object {ds} has never been synced"))
                })?;
            reopened.push((ds, DirtyObjset::open(&reader, &bp)?));
        }
        self.mos = mos;
        self.mos_zaps = ZapCache::new();
        for (ds, os) in reopened {
            if let Some(d) = self.datasets.get_mut(&ds) {
                d.os = os;
                d.zaps = ZapCache::new();
            }
        }
        self.reader = reader;
        Ok(())
    }
}

/// The 32-byte salt of salted checksums from the MOS object directory, if the pool has one.
fn checksum_salt(mos: &dmu::Objset) -> Result<Option<[u8; 32]>> {
    let e = zap::lookup(mos, K::DIRECTORY_OBJECT, K::CHECKSUM_SALT)
        .map_err(|e| PoolError::Invalid(format!("reading the checksum salt: {e}")))?;
    Ok(e.and_then(|e| e.bytes().get(..32).and_then(|b| <[u8; 32]>::try_from(b).ok())))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn r(kind: &'static str, children: usize, parity: u8) -> Rep {
        Rep { kind, children, parity }
    }

    #[test]
    fn zpool_messages() {
        assert_eq!(
            zpool_mismatch(r("raidz", 3, 1), r("mirror", 3, 0)).unwrap(),
            "mismatched replication level: pool and new vdev with different redundancy, raidz and mirror vdevs, 1 vs. 2 (3-way)"
        );
        // Same redundancy: zpool accepts it.
        assert_eq!(zpool_mismatch(r("raidz", 3, 1), r("mirror", 2, 0)), None);
        assert_eq!(
            zpool_mismatch(r("file", 1, 0), r("mirror", 2, 0)).unwrap(),
            "mismatched replication level: pool uses file and new vdev is mirror"
        );
        assert_eq!(
            zpool_mismatch(r("raidz", 4, 1), r("raidz", 4, 2)).unwrap(),
            "mismatched replication level: pool uses 1 device parity and new vdev uses 2"
        );
        assert_eq!(
            zpool_mismatch(r("mirror", 2, 0), r("mirror", 3, 0)).unwrap(),
            "mismatched replication level: pool uses 2-way mirror and new vdev uses 3-way mirror"
        );
        assert_eq!(zpool_mismatch(r("raidz", 3, 1), r("raidz", 3, 1)), None);
    }

    /// A scratch directory with `n` sparse 64 MiB files.
    pub(crate) fn devices(tag: &str, n: usize) -> (std::path::PathBuf, Vec<crate::create::NewLeaf>) {
        let dir = std::env::temp_dir().join(format!("rzfs-pool-add-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let leaves = (0..n)
            .map(|i| {
                let p = dir.join(format!("d{i}"));
                std::fs::File::create(&p).unwrap().set_len(64 << 20).unwrap();
                crate::create::NewLeaf {
                    path: p.to_string_lossy().into_owned(),
                    device: Arc::new(vdev::FileDevice::open(&p, true).unwrap()),
                    is_disk: false,
                }
            })
            .collect();
        (dir, leaves)
    }

    /// A pool of `tops` written in-process (ashift 9, a few features).
    pub(crate) fn create(name: &str, tops: Vec<NewTop>) -> PoolWriter {
        let features: Vec<_> = ["async_destroy", "empty_bpobj", "lz4_compress", "enabled_txg"]
            .iter()
            .map(|n| crate::feature_table::by_name(n).unwrap())
            .collect();
        let init = |_: &mut DirtyObjset, _: &mut ZapCache| Ok(());
        let spec = crate::create::CreateSpec {
            name: name.into(),
            tops,
            log: Vec::new(),
            ashift: 9,
            features,
            root_props: vec![],
            pool_props: vec![],
            init_root: &init,
            root_policy: crate::writer::Policy::dataset(7, 15, 1),
            cache_bytes: 8 << 20,
            label_name: None,
        };
        crate::create::create(&spec).unwrap()
    }

    /// The pool's replication level as zpool's check_replication sees it: a mirror beside a
    /// raidz of the same redundancy still has one (a lone disk is refused next to it), a
    /// mirror beside a raidz2 has none (anything goes); log vdevs are left out both ways.
    #[test]
    fn replication_level_of_mixed_pools() {
        let (_dir, l) = devices("rep", 11);
        let w = create(
            "addrep",
            vec![
                NewTop::Mirror(vec![l[0].clone(), l[1].clone()]),
                NewTop::Raidz { parity: 1, leaves: vec![l[2].clone(), l[3].clone(), l[4].clone()] },
            ],
        );
        let single = NewTop::Single(l[8].clone());
        let e = replication_error(&w.tops, std::slice::from_ref(&single), &[]).unwrap();
        assert!(e.ends_with("pool uses raidz and new vdev is file"), "{e}");
        assert_eq!(replication_error(&w.tops, std::slice::from_ref(&single), &[true]), None);
        let w2 = create(
            "addrep2",
            vec![
                NewTop::Mirror(vec![l[5].clone(), l[6].clone()]),
                NewTop::Raidz { parity: 2, leaves: vec![l[7].clone(), l[9].clone(), l[10].clone()] },
            ],
        );
        assert_eq!(replication_error(&w2.tops, &[single], &[]), None);
    }

    /// Add a vdev, write a MOS object large enough to reach it, import the pool again from
    /// its labels: two tops, the object reads back, the new top holds allocated space.
    #[test]
    fn add_then_import() {
        let (dir, mut l) = devices("ok", 3);
        let mut w = create("addok", vec![NewTop::Single(l.remove(0))]);
        // zpool's replication check objects to a mirror next to a lone file; with the
        // override the pool takes it (mixed layouts allocate per vdev).
        let mirror = NewTop::Mirror(vec![l[0].clone(), l[1].clone()]);
        let refused = replication_error(&w.tops, std::slice::from_ref(&mirror), &[]).unwrap();
        assert!(refused.ends_with("pool uses file and new vdev is mirror"), "{refused}");
        assert_eq!(replication_error(&w.tops, &[NewTop::Single(l[0].clone())], &[]), None);
        w.add_tops(&[mirror], &[], None).unwrap();
        assert_eq!(w.tops.len(), 2);
        assert_eq!(w.top_info[1].create_txg + 1, w.txg);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..2u32 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let obj = w.mos.alloc_object(T::ObjectArray.to_u8(), 128 << 10, 0, Vec::new()).unwrap();
        w.mos.write(obj, 0, &data).unwrap();
        w.close(ondisk::label::PoolState::Exported).unwrap();
        drop(w);
        let cands = crate::discover(std::slice::from_ref(&dir), false).unwrap();
        let cand = crate::discover::select(&cands, "addok").unwrap();
        let pool = crate::import(cand, &crate::ImportOpts::default()).unwrap();
        assert_eq!(pool.tops.len(), 2);
        let dn = pool.mos.dnode(obj).unwrap();
        assert!(pool.mos.read_all(&dn, Some(data.len() as u64), 4 << 20).unwrap() == data);
        let cfg = crate::mos_config(&pool).unwrap();
        let on_new = crate::metaslab_alloc(&pool, cfg[1].metaslab_array.unwrap()).unwrap();
        assert!(on_new >= 1 << 20, "new top holds {on_new} bytes");
        // A read-write open replays the space maps of both tops.
        let opts = crate::ImportOpts { readonly: false, ..Default::default() };
        let w = crate::open_rw::open_rw(&crate::import(cand, &opts).unwrap()).unwrap();
        assert_eq!((w.tops.len(), w.top_info[1].ms_array), (2, cfg[1].metaslab_array.unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
