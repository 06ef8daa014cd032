//! `rzpool attach`, `rzpool replace`, `rzpool detach` (zpool-attach(8), zpool-replace(8),
//! zpool-detach(8)) for a pool imported read-write.
//!
//! The new device is checked as `rzpool create` checks devices (it must exist, be large
//! enough, and not belong to another pool unless `-f` allows an exported one's), opened
//! exclusively, and handed to the pool layer (`pool::attach`), which changes the tree,
//! syncs the configuration and starts the resilver. `-w` waits for the resilver. `-s`
//! (sequential rebuild) is accepted and done as a healing resilver, which verifies every
//! checksum (a sequential rebuild would not, and would need a scrub after).

use crate::daemon::State;
use pool::create::NewLeaf;
use pool::vdevspec::TopSpec;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `attach`/`replace` arguments after parsing.
pub struct AttachArgs {
    pub pool: String,
    pub device: String,
    /// The new device; `None` for `replace` of a device by the one now at its path.
    pub new_device: Option<String>,
    pub force: bool,
    pub wait: bool,
    pub replacing: bool,
    pub cwd: PathBuf,
}

fn abs(cwd: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Runs `rzpool attach` or `rzpool replace`.
pub fn attach(state: &Arc<State>, a: &AttachArgs) -> Result<String, String> {
    let verb = if a.replacing { "replace" } else { "attach" };
    let name = &a.pool;
    state.pool(name)?;
    let rw = crate::rwpool::writer_of(state, name)
        .ok_or_else(|| format!("cannot {verb} devices of '{name}': pool is read-only"))?;
    // A replace without a new device means the device now at the old one's path.
    let new_path = match &a.new_device {
        Some(n) => abs(&a.cwd, n),
        None => {
            let old = a.device.clone();
            let path = rw.spa.read(|w| w.find_vdev(&old).and_then(|v| w.paths.get(&v.guid()).cloned()));
            PathBuf::from(path.ok_or_else(|| format!("cannot {verb} {old}: no such device in pool"))?)
        }
    };
    let old =
        if a.device.contains('/') { abs(&a.cwd, &a.device).display().to_string() } else { a.device.clone() };
    // One of the pool's hot spares stands in (a `spare` vdev rather than `replacing`).
    let spare = rw.spa.read(|w| w.spare_named(&new_path.to_string_lossy()).map(|s| s.guid));
    if let Some(guid) = spare.filter(|_| a.replacing) {
        rw.spa.replace_with_spare(&old, guid, a.wait).map_err(|e| match e {
            pool::PoolError::NotFound(m)
            | pool::PoolError::Busy(m)
            | pool::PoolError::Unsupported(m)
            | pool::PoolError::Invalid(m) => m,
            e => format!("cannot replace {old} with {}: {e}", new_path.display()),
        })?;
        return Ok(String::new());
    }
    let infos = pool::vdevspec::validate(&[TopSpec::Disk(new_path.clone())], a.force)
        .map_err(|e| format!("cannot {verb} {} with {}: {e}", a.device, new_path.display()))?;
    let dev = vdev::FileDevice::open_exclusive(&new_path)
        .map_err(|e| format!("cannot open '{}': {e}", new_path.display()))?;
    let p = new_path.to_string_lossy().into_owned();
    let leaf = NewLeaf {
        device: vdev::inject::InjectDevice::wrap(Arc::new(dev), &p),
        path: p,
        is_disk: infos.first().is_some_and(|d| d.is_block),
    };
    rw.spa.attach(&old, &leaf, a.replacing, a.wait).map_err(|e| match e {
        pool::PoolError::NotFound(m)
        | pool::PoolError::Busy(m)
        | pool::PoolError::Unsupported(m)
        | pool::PoolError::Invalid(m) => m,
        e => format!("cannot {verb} {old}: {e}"),
    })?;
    Ok(String::new())
}

/// Runs `rzpool detach POOL DEVICE`.
pub fn detach(state: &Arc<State>, name: &str, device: &str, cwd: &Path) -> Result<String, String> {
    state.pool(name)?;
    let rw = crate::rwpool::writer_of(state, name)
        .ok_or_else(|| format!("cannot detach devices of '{name}': pool is read-only"))?;
    let d = if device.contains('/') { abs(cwd, device).display().to_string() } else { device.to_string() };
    rw.spa.detach(&d).map_err(|e| match e {
        pool::PoolError::NotFound(m)
        | pool::PoolError::Busy(m)
        | pool::PoolError::Unsupported(m)
        | pool::PoolError::Invalid(m) => m,
        e => format!("cannot detach {d}: {e}"),
    })?;
    Ok(String::new())
}
