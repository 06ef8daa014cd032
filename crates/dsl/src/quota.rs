//! # Quotas: `quota`, `refquota`, and the space a dataset has left
//!
//! Theory. ZFS limits space at two levels:
//!
//! * `quota` limits a directory: everything it and its descendants use, snapshots and
//!   reservations included (`dd_used_bytes`). OpenZFS keeps the value twice, as the
//!   property and in `dsl_dir_phys_t.dd_quota` (offset 64), which is what its kernel
//!   reads; rzfs writes both (`write::set_head_entry`).
//! * `refquota` limits what a head dataset references (`ds_referenced_bytes`): snapshots
//!   are not charged. It lives only in the props ZAP.
//!
//! A write is checked before it is accepted, while the txg that will carry it is still
//! open, so the check works with what is on disk plus an estimate of what the open txg
//! holds ("in flight"), and follows OpenZFS's `dsl_dir_tempreserve_impl` and
//! `dsl_dataset_check_quota` rather than a strict sum:
//!
//! 1. The change itself is not counted ("one free hit"): a quota can be overshot by one
//!    change, but a dataset below its quota can always make progress.
//! 2. What is on disk already at or over the limit: `EDQUOT`.
//! 3. On disk plus in flight at or over the limit: the estimate may be what is wrong (it
//!    is a worst case: no compression, full parity), so the caller syncs the open txg and
//!    asks again ([`Verdict::Wait`]); after the sync nothing is in flight and the answer is
//!    exact. No slack beyond the limit: with one, the in-flight part could take a file past
//!    the quota by more than the one change the rule allows (ZTS's quota tests allow a
//!    quota plus one 128 KiB record); near a quota, writes sync more often, as OpenZFS's.
//!
//! Changes that free space (unlink, truncate, destroy) are not checked at all, so a
//! dataset over its quota can always be emptied.
//!
//! The space a dataset has left (`available`, `statfs`) is the least of what each
//! ancestor's quota leaves, the pool's free space, and its refquota
//! (`dsl_dir_space_available`, `dsl_dataset_space`); a directory's unused `reservation`
//! adds to what its parent gives it, a head's unused `refreservation` to its own.
//!
//! Reservations. `reservation` is kept twice like `quota` (the property, and
//! `dd_reserved` at offset 80 of the directory); a directory takes max(used, reserved)
//! from its parent, the part beyond its use charged to the parent's CHILD_RSRV breakdown
//! (`write::dir_diduse`, `write::set_dir_reserved`). `refreservation` is charged to the
//! head's own directory (REFRSRV). OpenZFS gives the root directory the pool's size less
//! its `dd_used_bytes`, which includes both; rzfs takes the pool's free space from the
//! allocator, which knows nothing of reservations, so it takes off the unused
//! reservations of the whole pool ([`unused_reservations`]) before passing space down a
//! directory chain: a dataset's own reservations come back to it on the way down, the
//! others' do not. Writes of a dataset with nothing left that way get ENOSPC (the pool
//! layer's `check_quotas`), and a reservation that would take more than its parent has
//! left, or exceed the dataset's `quota` (`refquota`), is refused.

use crate::Result;
use ondisk::dsl::DslDirPhys;

/// What a change may do under the quotas above it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Fits,
    /// The estimate of the open txg is over a limit: sync, then ask again.
    Wait,
    /// A limit is reached on disk (`EDQUOT`); the text names it.
    Over(String),
}

/// What a head dataset's change is checked against.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadSpace {
    /// Its directory.
    pub dir: u64,
    pub referenced: u64,
    pub unique: u64,
    /// Effective `refquota` (0: none).
    pub refquota: u64,
    /// Effective `refreservation` (0: none).
    pub refreservation: u64,
}

/// Decides whether a change of head `head` may go ahead. `in_flight(dir)` is the estimate
/// of what the open txg will add at or below directory `dir` (deflated bytes), and
/// `dir_phys` reads a directory as of the open txg.
pub fn verdict(
    head: &HeadSpace,
    in_flight: &mut dyn FnMut(u64) -> u64,
    dir_phys: &mut dyn FnMut(u64) -> Result<DslDirPhys>,
) -> Result<Verdict> {
    if head.refquota != 0 {
        let inflight = in_flight(head.dir);
        if head.referenced.saturating_add(inflight) >= head.refquota {
            if inflight > 0 || head.referenced < head.refquota {
                return Ok(Verdict::Wait);
            }
            return Ok(Verdict::Over("refquota exceeded".into()));
        }
    }
    // A head writing into its own unused refreservation is not charged for it again.
    let own_unused_rsrv = head.refreservation.saturating_sub(head.unique);
    let mut dir = head.dir;
    for _ in 0..=crate::write::MAX_NESTING {
        let p = dir_phys(dir)?;
        if p.quota != 0 {
            let mut used = p.used_bytes;
            if dir == head.dir {
                used = used.saturating_sub(own_unused_rsrv);
            }
            if used >= p.quota {
                return Ok(Verdict::Over("quota exceeded".into()));
            }
            let inflight = in_flight(dir);
            if used.saturating_add(inflight) >= p.quota {
                return Ok(Verdict::Wait);
            }
        }
        if p.parent_obj == 0 {
            return Ok(Verdict::Fits);
        }
        dir = p.parent_obj;
    }
    Err(crate::DslError::Corrupt {
        what: "directory chain",
        detail: format!("directory {} is nested too deep", head.dir),
    })
}

/// The space directory `dir` has left: what its parent leaves it (plus its own unused
/// `reservation`), within its `quota`; the pool's root directory has `pool_avail`.
pub fn dir_available(
    dir: u64,
    pool_avail: u64,
    dir_phys: &mut dyn FnMut(u64) -> Result<DslDirPhys>,
) -> Result<u64> {
    let mut chain = Vec::new();
    let mut d = dir;
    loop {
        let p = dir_phys(d)?;
        let parent = p.parent_obj;
        chain.push(p);
        if parent == 0 {
            break;
        }
        if chain.len() > crate::write::MAX_NESTING {
            return Err(crate::DslError::Corrupt {
                what: "directory chain",
                detail: format!("directory {dir} is nested too deep"),
            });
        }
        d = parent;
    }
    // From the root down.
    let mut avail = pool_avail;
    for (i, p) in chain.iter().rev().enumerate() {
        if i > 0 && p.reserved > p.used_bytes {
            avail = avail.saturating_add(p.reserved - p.used_bytes);
        }
        if p.quota != 0 {
            avail = if p.used_bytes > p.quota { 0 } else { avail.min(p.quota - p.used_bytes) };
        }
    }
    Ok(avail)
}

/// The space head dataset `head` has left (`available`): its directory's, plus its unused
/// `refreservation`, within its `refquota`.
pub fn head_available(
    head: &HeadSpace,
    pool_avail: u64,
    dir_phys: &mut dyn FnMut(u64) -> Result<DslDirPhys>,
) -> Result<u64> {
    let mut avail = dir_available(head.dir, pool_avail, dir_phys)?;
    avail = avail.saturating_add(head.refreservation.saturating_sub(head.unique));
    if head.refquota != 0 {
        avail = avail.min(head.refquota.saturating_sub(head.referenced));
    }
    Ok(avail)
}

/// The space held by reservations and not used, anywhere in the pool: the sum over
/// every directory of its CHILD_RSRV breakdown (the unused `reservation` of each child
/// directory, beyond what that child uses) and its REFRSRV one (its head's unused
/// `refreservation`). OpenZFS gives the root directory the pool's size less
/// `dd_used_bytes`, which includes these; rzfs takes the pool's free space from the
/// allocator, which does not know them, so this is what to take off it. `children(dir)`
/// lists a directory's child directories.
pub fn unused_reservations(
    root_dir: u64,
    dir_phys: &mut dyn FnMut(u64) -> Result<DslDirPhys>,
    children: &mut dyn FnMut(&DslDirPhys) -> Result<Vec<u64>>,
) -> Result<u64> {
    use ondisk::dsl::{DD_USED_CHILD_RSRV, DD_USED_REFRSRV};
    let mut total = 0u64;
    let mut todo = vec![(root_dir, 0usize)];
    let mut seen = 0usize;
    while let Some((d, depth)) = todo.pop() {
        seen += 1;
        if depth > crate::write::MAX_NESTING || seen > MAX_DIRS {
            return Err(crate::DslError::Corrupt {
                what: "directory tree",
                detail: format!("more than {MAX_DIRS} directories or nested too deep under {root_dir}"),
            });
        }
        let p = dir_phys(d)?;
        total = total
            .saturating_add(p.used_breakdown[DD_USED_CHILD_RSRV])
            .saturating_add(p.used_breakdown[DD_USED_REFRSRV]);
        for c in children(&p)? {
            todo.push((c, depth + 1));
        }
    }
    Ok(total)
}

/// Bound on the directories [`unused_reservations`] walks (a loop in a damaged tree ends).
const MAX_DIRS: usize = 1 << 22;

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(v: &[(u64, u64, u64, u64, u64)]) -> impl FnMut(u64) -> Result<DslDirPhys> + '_ {
        // (obj, parent, used, quota, reserved)
        move |obj| {
            let &(_, parent, used, quota, reserved) = v
                .iter()
                .find(|d| d.0 == obj)
                .ok_or_else(|| crate::DslError::Corrupt { what: "test", detail: "no dir".into() })?;
            Ok(DslDirPhys { parent_obj: parent, used_bytes: used, quota, reserved, ..Default::default() })
        }
    }

    #[test]
    fn quota_on_an_ancestor() {
        let t = [(1, 0, 500, 0, 0), (2, 1, 300, 400, 0), (3, 2, 200, 0, 0)];
        let head = HeadSpace { dir: 3, ..Default::default() };
        let mut none = |_| 0;
        assert_eq!(verdict(&head, &mut none, &mut dirs(&t)).unwrap(), Verdict::Fits);
        // In flight below dir 2 beyond 400 + 400/32: sync and ask again.
        let mut busy = |d| if d == 2 { 120 } else { 0 };
        assert_eq!(verdict(&head, &mut busy, &mut dirs(&t)).unwrap(), Verdict::Wait);
        let full = [(1, 0, 500, 0, 0), (2, 1, 400, 400, 0), (3, 2, 200, 0, 0)];
        assert!(matches!(verdict(&head, &mut none, &mut dirs(&full)).unwrap(), Verdict::Over(_)));
        assert_eq!(dir_available(3, 1000, &mut dirs(&t)).unwrap(), 100);
        assert_eq!(dir_available(3, 1000, &mut dirs(&full)).unwrap(), 0);
        assert_eq!(dir_available(1, 1000, &mut dirs(&t)).unwrap(), 1000);
    }

    #[test]
    fn refquota_and_reservations() {
        let t = [(1, 0, 500, 0, 0), (2, 1, 300, 0, 350)];
        let mut head = HeadSpace { dir: 2, referenced: 90, unique: 90, refquota: 100, refreservation: 0 };
        let mut none = |_| 0;
        assert_eq!(verdict(&head, &mut none, &mut dirs(&t)).unwrap(), Verdict::Fits);
        let mut busy = |_| 20;
        assert_eq!(verdict(&head, &mut busy, &mut dirs(&t)).unwrap(), Verdict::Wait);
        head.referenced = 100;
        assert!(matches!(verdict(&head, &mut none, &mut dirs(&t)).unwrap(), Verdict::Over(_)));
        // available: the pool's 1000 plus the directory's unused reservation (50), within
        // the refquota.
        (head.referenced, head.unique) = (10, 10);
        assert_eq!(head_available(&head, 1000, &mut dirs(&t)).unwrap(), 90);
        head.refquota = 0;
        assert_eq!(head_available(&head, 1000, &mut dirs(&t)).unwrap(), 1050);
        head.refreservation = 100;
        assert_eq!(head_available(&head, 1000, &mut dirs(&t)).unwrap(), 1140);
    }
}
