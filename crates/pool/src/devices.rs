//! # Device management: `zpool offline`, `zpool online`
//!
//! Theory. Taking a leaf offline stops all I/O to it; every txg synced meanwhile goes into
//! its DTL (`crate::dtl`), so bringing it back online resilvers exactly those txgs. A leaf
//! may go offline only if its top-level vdev can still produce every block without it
//! (`Vdev::outage` with the leaf taken away must be empty: OpenZFS's
//! `vdev_dtl_required`): in a mirror whose other side is itself missing txgs, offlining
//! the complete side would lose them, and is refused. A persistent offline is written
//! into the configuration (`offline` = 1 on the leaf) and survives export and import;
//! `-t` lasts until the pool is imported again. Both change the configuration and sync it
//! before returning, as `spa_vdev_state_exit` does.

use crate::txg::Spa;
use crate::writer::PoolWriter;
use crate::{PoolError, Result};
use std::sync::Arc;
use vdev::{Offline, Vdev};

/// How the command line names a device: its path, the path without `/dev/`, the last
/// component of the path when no other leaf shares it, or its guid.
fn names(path: &str) -> Vec<&str> {
    let mut v = vec![path];
    if let Some(p) = path.strip_prefix("/dev/") {
        v.push(p);
    }
    v
}

impl PoolWriter {
    /// The vdev `name` designates (a leaf by path or guid, or an interior vdev by its
    /// `zpool status` name such as `mirror-0`).
    pub fn find_vdev(&self, name: &str) -> Option<&Vdev> {
        let all: Vec<&Vdev> = self.tops.iter().flat_map(|t| subtree(t)).collect();
        if let Ok(g) = name.parse::<u64>() {
            if let Some(v) = all.iter().find(|v| v.guid() == g) {
                return Some(v);
            }
        }
        let path_of = |v: &Vdev| self.paths.get(&v.guid()).cloned();
        if let Some(v) = all.iter().find(|v| path_of(v).is_some_and(|p| names(&p).contains(&name))) {
            return Some(v);
        }
        let base: Vec<&&Vdev> = all
            .iter()
            .filter(|v| {
                path_of(v).is_some_and(|p| std::path::Path::new(&p).file_name().is_some_and(|f| f == name))
            })
            .collect();
        if base.len() == 1 {
            return Some(base[0]);
        }
        all.into_iter().find(|v| !v.kind().is_leaf() && v.name() == name)
    }

    /// The path recorded for a leaf, or its status name.
    pub fn vdev_label(&self, v: &Vdev) -> String {
        self.paths.get(&v.guid()).cloned().unwrap_or_else(|| v.name())
    }

    /// The top-level vdev holding `guid`.
    pub fn top_of(&self, guid: u64) -> Option<&Arc<Vdev>> {
        self.tops.iter().find(|t| t.find(guid).is_some())
    }

    fn leaf_named(&self, name: &str, verb: &str) -> Result<&Vdev> {
        let v = self
            .find_vdev(name)
            .ok_or_else(|| PoolError::NotFound(format!("cannot {verb} {name}: no such device in pool")))?;
        if !v.kind().is_leaf() {
            return Err(PoolError::Unsupported(format!(
                "cannot {verb} {name}: operation not supported on this type of vdev"
            )));
        }
        Ok(v)
    }
}

/// Every vdev of a subtree, pre-order.
fn subtree(v: &Vdev) -> Vec<&Vdev> {
    let mut out = vec![v];
    for c in v.children() {
        out.extend(subtree(c));
    }
    out
}

impl Spa {
    /// `zpool offline [-t] POOL DEV`: stops I/O to a leaf. Refused when the pool would lose
    /// access to some of its blocks without it.
    pub fn offline(self: &Arc<Self>, name: &str, temporary: bool) -> Result<()> {
        self.run_syncing(|w| {
            let leaf = w.leaf_named(name, "offline")?;
            if leaf.offline() != Offline::No {
                // Already offline: only a temporary offline may become persistent.
                if !temporary && leaf.offline() == Offline::Temporary {
                    leaf.set_offline(Offline::Persistent);
                    w.config_dirty = true;
                    w.sync()?;
                }
                return Ok(());
            }
            let top = w.top_of(leaf.guid()).ok_or_else(|| PoolError::NotFound(name.into()))?;
            if !top.outage(leaf.guid()).is_empty() {
                return Err(PoolError::Busy(format!("cannot offline {name}: no valid replicas")));
            }
            leaf.set_offline(if temporary { Offline::Temporary } else { Offline::Persistent });
            w.config_dirty = true;
            w.sync()
        })
    }

    /// `zpool offline -f [-t] POOL DEV`: faults a leaf (as if it had failed), under the same
    /// rule as offline. rzfs keeps faults until `zpool clear` or `zpool online` in memory
    /// only; the txgs the leaf misses go to its DTL either way.
    pub fn fault(self: &Arc<Self>, name: &str, _temporary: bool) -> Result<()> {
        self.run_syncing(|w| {
            let leaf = w.leaf_named(name, "fault")?;
            let top = w.top_of(leaf.guid()).ok_or_else(|| PoolError::NotFound(name.into()))?;
            if !leaf.is_faulted() && !top.outage(leaf.guid()).is_empty() {
                return Err(PoolError::Busy(format!("cannot fault {name}: no valid replicas")));
            }
            leaf.set_faulted(true);
            w.sync()
        })
    }

    /// `zpool online POOL DEV`: brings an offline or faulted leaf back; a resilver of the
    /// txgs it missed starts. Returns a warning to print when the leaf stays unusable.
    pub fn online(self: &Arc<Self>, name: &str) -> Result<Option<String>> {
        let warn = self.run_syncing(|w| {
            let leaf = w.leaf_named(name, "online")?;
            let guid = leaf.guid();
            let was_offline = leaf.offline() != Offline::No;
            leaf.set_offline(Offline::No);
            leaf.set_faulted(false);
            if leaf.device().is_none() {
                return Ok(Some(format!(
                    "warning: device '{name}' onlined, but remains in faulted state\nuse 'zpool replace' to replace devices that are no longer present"
                )));
            }
            if was_offline {
                w.config_dirty = true;
            }
            w.mark_unspare();
            w.event("vdev_online", Some(guid));
            w.sync()?;
            Ok(None)
        })?;
        self.request_resilver();
        Ok(warn)
    }
}

impl Spa {
    /// `zpool attach` (`replacing` false) and `zpool replace` (true): `new` joins the tree
    /// next to leaf `old`, the configuration is synced, and a resilver writes the new
    /// device every block (a replace then detaches `old` by itself). With `wait`, returns
    /// once that resilver is done.
    pub fn attach(
        self: &Arc<Self>,
        old: &str,
        new: &crate::create::NewLeaf,
        replacing: bool,
        wait: bool,
    ) -> Result<()> {
        let verb = if replacing { "replace" } else { "attach" };
        self.run_syncing(|w| {
            let leaf = w.leaf_named(old, verb)?.guid();
            w.attach(leaf, new, replacing)?;
            w.sync()
        })?;
        self.request_resilver();
        if wait {
            self.scan_wait()?;
        }
        Ok(())
    }

    /// `zpool detach POOL DEV`: takes a leaf out of its mirror, replacing or spare vdev.
    /// `zpool remove POOL LOG` ([`PoolWriter::remove_log`]): once the pool no longer names
    /// the vdev, its devices get the label of a removed device.
    pub fn remove_log(self: &Arc<Self>, name: &str) -> Result<()> {
        let labels = self.run_syncing(|w| {
            // Intent log chains may live on the log vdev: they end (every record is in a
            // synced txg then), and their freed space becomes free a few txgs later.
            if w.zil_end_all() {
                w.sync()?;
                for _ in 0..=metaslab::TXG_DEFER_SIZE {
                    w.sync_forced()?;
                }
            }
            let labels = w.remove_log(name)?;
            w.sync()?;
            Ok(labels)
        })?;
        for (d, nv) in labels {
            if crate::spares::write_bare_label(d.as_ref(), &nv).is_err() {
                let _ = crate::create::clear_leaf_labels(d.as_ref());
            }
        }
        Ok(())
    }

    pub fn detach(self: &Arc<Self>, name: &str) -> Result<()> {
        self.run_syncing(|w| {
            let leaf = w.leaf_named(name, "detach")?.guid();
            w.detach(leaf)?;
            w.sync()
        })?;
        self.scan_quiesce();
        Ok(())
    }
}

/// The leaves that stand first under a `spare` vdev (the devices a spare stands in for).
fn spared_originals(v: &Vdev, out: &mut Vec<u64>) {
    if *v.kind() == vdev::VdevKind::Spare {
        if let Some(first) = v.children().first().filter(|c| c.kind().is_leaf()) {
            out.push(first.guid());
        }
    }
    for c in v.children() {
        spared_originals(c, out);
    }
}

impl PoolWriter {
    /// Leaves a spare stands in for that can take writes again are marked `unspare`: once
    /// they have resilvered, the spare goes back to the list (`vdev_clear`, `vdev_online`).
    pub(crate) fn mark_unspare(&mut self) {
        let mut originals = Vec::new();
        for t in &self.tops {
            spared_originals(t, &mut originals);
        }
        for g in originals {
            let back = self.tops.iter().find_map(|t| t.find(g)).is_some_and(|l| l.writable());
            if back && self.unspare.insert(g) {
                self.config_dirty = true;
            }
        }
    }

    /// One step of what zed does when devices fail or are swapped: with `autoreplace=on`, a
    /// leaf that cannot be opened is replaced by a blank device now at its path; otherwise a
    /// failed leaf gets an available hot spare. Returns what was done, for the log.
    pub fn retire_step(&mut self) -> Result<Option<String>> {
        if self.pool_prop_u64("autoreplace").ok().flatten().unwrap_or(0) == 1 {
            if let Some((guid, path)) = self.autoreplace_candidate() {
                let dev = vdev::FileDevice::open_exclusive(std::path::Path::new(&path))
                    .map_err(|e| PoolError::Io(format!("{path}: {e}")))?;
                let is_disk = std::fs::metadata(&path).is_ok_and(|m| {
                    use std::os::unix::fs::FileTypeExt;
                    m.file_type().is_block_device()
                });
                let leaf = crate::create::NewLeaf {
                    device: vdev::inject::InjectDevice::wrap(Arc::new(dev), &path),
                    path: path.clone(),
                    is_disk,
                };
                self.attach(guid, &leaf, true)?;
                return Ok(Some(format!("autoreplace: {path} replaced by the new device at its path")));
            }
        }
        if let Some((leaf, spare)) = self.spare_candidate() {
            let name = self.paths.get(&leaf).cloned().unwrap_or_else(|| leaf.to_string());
            self.activate_spare(leaf, spare.guid)?;
            return Ok(Some(format!("hot spare {} stands in for {name}", spare.path)));
        }
        Ok(None)
    }

    /// A leaf that cannot be opened whose configured path now holds a device the size of
    /// its place and without any pool's label (a new disk in the old slot).
    fn autoreplace_candidate(&self) -> Option<(u64, String)> {
        for t in &self.tops {
            if t.state().is_lost() {
                continue;
            }
            for leaf in t.leaves() {
                if leaf.device().is_some() || leaf.offline() != Offline::No {
                    continue;
                }
                let Some(path) = self.paths.get(&leaf.guid()) else { continue };
                let p = std::path::Path::new(path);
                let Ok(dev) = vdev::FileDevice::open(p, false) else { continue };
                let labelled =
                    (0..ondisk::label::VDEV_LABELS).any(|l| crate::discover::read_label(&dev, l).is_some());
                if !labelled && crate::create::leaf_asize(&dev) >= self.leaf_need(t) {
                    return Some((leaf.guid(), path.clone()));
                }
            }
        }
        None
    }
}

impl Spa {
    /// The paths of every device the pool knows (leaves and hot spares).
    pub fn leaf_paths(&self) -> Vec<String> {
        self.writer_locked().paths.values().cloned().collect()
    }

    /// The pool's guid.
    pub fn guid(&self) -> u64 {
        self.writer_locked().guid
    }

    /// `zpool add POOL spare DEV...`.
    pub fn add_spares(self: &Arc<Self>, leaves: &[crate::create::NewLeaf]) -> Result<()> {
        self.run_syncing(|w| {
            w.add_spares(leaves)?;
            w.sync()
        })?;
        // A failed device may have been waiting for one.
        self.retire_check();
        Ok(())
    }

    /// `zpool add POOL cache DEV...` (sector shift `ashift`).
    pub fn add_caches(self: &Arc<Self>, leaves: &[crate::create::NewLeaf], ashift: u64) -> Result<()> {
        self.run_syncing(|w| {
            w.add_caches(leaves, ashift)?;
            w.sync()?;
            w.install_l2arc();
            Ok(())
        })
    }

    /// The cache devices' counters (`iostat -v`), when the pool keeps a second-level cache.
    pub fn cache_stats(&self) -> Vec<crate::l2arc::CacheDevStats> {
        self.read(|w| w.l2arc.as_ref().map(|l| l.stats()).unwrap_or_default())
    }

    /// `zpool remove POOL CACHEDEV`.
    pub fn remove_cache(self: &Arc<Self>, name: &str) -> Result<()> {
        self.remove_aux(|w| {
            let dev = w.remove_cache(name)?;
            w.sync()?;
            w.install_l2arc();
            Ok(dev)
        })
    }

    /// Runs `remove` (an aux device leaves its list, which is synced) and lets go of the
    /// device it returns only once the list without it is on disk.
    fn remove_aux(
        self: &Arc<Self>,
        remove: impl FnOnce(&mut PoolWriter) -> Result<Option<Arc<dyn vdev::BlockDevice>>>,
    ) -> Result<()> {
        if let Some(d) = self.run_syncing(remove)? {
            d.release();
        }
        Ok(())
    }

    /// `zpool remove POOL SPARE`: an inactive hot spare leaves the pool.
    pub fn remove_spare(self: &Arc<Self>, name: &str) -> Result<()> {
        self.remove_aux(|w| {
            let dev = w.remove_spare(name)?;
            w.sync()?;
            Ok(dev)
        })
    }

    /// `zpool replace POOL DEV SPARE` with one of the pool's hot spares.
    pub fn replace_with_spare(self: &Arc<Self>, old: &str, spare: u64, wait: bool) -> Result<()> {
        self.run_syncing(|w| {
            let leaf = w.leaf_named(old, "replace")?.guid();
            w.activate_spare(leaf, spare)?;
            w.sync()
        })?;
        self.request_resilver();
        if wait {
            self.scan_wait()?;
        }
        Ok(())
    }

    /// What zed would do about failed or swapped devices (see
    /// [`PoolWriter::retire_step`]), until there is nothing left to do. The changes are the
    /// open txg's (the next sync writes the configuration); each starts a resilver. Run by
    /// the sync thread and after the pool's devices change.
    pub fn retire_check(self: &Arc<Self>) {
        let mut did = false;
        loop {
            let r = {
                let mut w = self.writer_locked();
                if !self.is_active() {
                    return;
                }
                w.retire_step()
            };
            match r {
                Ok(Some(what)) => {
                    eprintln!("rzfsd: pool '{}': {what}", self.name());
                    self.refresh_view(&self.writer_locked());
                    did = true;
                }
                Ok(None) => break,
                Err(e) => {
                    eprintln!("rzfsd: pool '{}': {e}", self.name());
                    break;
                }
            }
        }
        if did {
            self.mark_dirty();
            self.request_resilver();
        }
        self.autoexpand_check();
    }
}
