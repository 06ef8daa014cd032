//! An independent check of the DSL's space accounting, by brute force.
//!
//! zdb checks that every allocated block is referenced and nothing leaks, but not how the
//! DSL charges them: the `usedby*` breakdowns of each directory and each dataset's
//! referenced and unique bytes, which rzfs keeps incrementally (births, kills, deadlists,
//! snapshot destroys, clones, promotes). Here every dataset's block tree is walked and the
//! same figures are computed from the sets of blocks each dataset references, with the
//! rules OpenZFS charges by (`dsl_dataset_block_born/kill`):
//!
//! - `referenced(X)`: every block X references (its objset block included);
//! - `unique(S)` of a snapshot: blocks S references and its next (snapshot or head) does
//!   not, born after S's previous snapshot; `unique(H)` of a head: blocks born after its
//!   previous snapshot;
//! - a directory D whose origin was created in txg `t0` (0 without an origin) is charged
//!   only blocks born after `t0`: HEAD = those its head references; SNAP = those only its
//!   snapshots reference;
//! - `used` = the sum of the breakdowns, CHILD = the children's `used`.
//!
//! Space is `dsize`, which equals the allocated size only without RAID-Z (deflate ratio
//! 1), so the check takes pools of plain or mirrored vdevs. Refreservations are not
//! modelled (directories charged one are skipped for HEAD).
#![allow(dead_code)]

use dmu::traverse::{traverse_objset, TraverseOpts};
use dsl::DatasetKind;
use ondisk::blkptr::BlkPtr;
use ondisk::dsl::{DslDatasetPhys, DD_USED_CHILD, DD_USED_HEAD, DD_USED_REFRSRV, DD_USED_SNAP};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// A block by its first DVA.
type Key = (u64, u64);

fn key_of(bp: &BlkPtr) -> Option<(Key, u64)> {
    if bp.is_hole() || bp.is_embedded() {
        return None;
    }
    let dvas = bp.dvas();
    let first = dvas.first()?;
    Some(((first.vdev(), first.offset()), dvas.iter().map(|d| d.asize()).sum()))
}

/// Returns every difference between what the DSL records and what the blocks say (empty:
/// all agree). The pool must be exported.
pub fn dsl_space_mismatches(dir: &Path, pool: &str) -> Vec<String> {
    let p = super::open(dir, pool).expect("open pool");
    let dsl = p.dsl();
    let all: Vec<dsl::Dataset> =
        dsl.list().expect("list").into_iter().filter(|d| d.kind != DatasetKind::Bookmark).collect();
    let mut size: HashMap<Key, (u64, u64)> = HashMap::new();
    let mut refs: HashMap<u64, HashSet<Key>> = HashMap::new();
    for d in &all {
        let mut set = HashSet::new();
        let root = d.objset_bp().expect("objset bp");
        if let Some((k, s)) = key_of(&root) {
            set.insert(k);
            size.insert(k, (s, root.logical_birth()));
            let os = dsl.open_objset(d).expect("open objset");
            let mut errors = Vec::new();
            traverse_objset(
                &os,
                TraverseOpts::default(),
                &mut |v| {
                    if let Some((k, s)) = key_of(v.bp) {
                        set.insert(k);
                        size.insert(k, (s, v.bp.logical_birth()));
                    }
                    Ok(())
                },
                &mut |_, _, e| errors.push(e.to_string()),
            )
            .expect("traverse");
            assert!(errors.is_empty(), "{}: {errors:?}", d.name);
        }
        refs.insert(d.ds_obj, set);
    }
    let sum = |keys: &mut dyn Iterator<Item = &Key>, after: u64| -> u64 {
        keys.filter_map(|k| size.get(k)).filter(|(_, b)| *b > after).map(|(s, _)| s).sum()
    };
    let ds_phys = |obj: u64| -> DslDatasetPhys {
        let dn = dsl.mos().dnode(obj).expect("dataset dnode");
        DslDatasetPhys::parse(&dn.bonus, dsl.mos().dnode_byte_order()).expect("dataset phys")
    };
    let mut out = Vec::new();
    let empty = HashSet::new();
    for d in &all {
        let mine = &refs[&d.ds_obj];
        let referenced = sum(&mut mine.iter(), 0);
        if referenced != d.ds.referenced_bytes {
            out.push(format!(
                "{}: referenced {} but its blocks sum to {referenced}",
                d.name, d.ds.referenced_bytes
            ));
        }
        let unique = if d.kind == DatasetKind::Snapshot {
            let next = refs.get(&d.ds.next_snap_obj).unwrap_or(&empty);
            sum(&mut mine.difference(next), d.ds.prev_snap_txg)
        } else {
            sum(&mut mine.iter(), d.ds.prev_snap_txg)
        };
        if unique != d.ds.unique_bytes {
            out.push(format!("{}: unique {} but by its blocks {unique}", d.name, d.ds.unique_bytes));
        }
    }
    for head in all.iter().filter(|d| d.kind != DatasetKind::Snapshot) {
        let dp = &head.dir;
        let t0 = if dp.origin_obj == 0 { 0 } else { ds_phys(dp.origin_obj).creation_txg };
        let mine = &refs[&head.ds_obj];
        let snaps: HashSet<Key> = all
            .iter()
            .filter(|s| s.kind == DatasetKind::Snapshot && s.dir_obj == head.dir_obj)
            .flat_map(|s| refs[&s.ds_obj].iter().copied())
            .collect();
        let want_head = sum(&mut mine.iter(), t0);
        let want_snap = sum(&mut snaps.difference(mine), t0);
        let b = dp.used_breakdown;
        if b[DD_USED_REFRSRV] == 0 && b[DD_USED_HEAD] != want_head {
            out.push(format!(
                "{}: usedbydataset {} but by its blocks {want_head}",
                head.name, b[DD_USED_HEAD]
            ));
        }
        if b[DD_USED_SNAP] != want_snap {
            out.push(format!(
                "{}: usedbysnapshots {} but by its blocks {want_snap}",
                head.name, b[DD_USED_SNAP]
            ));
        }
        let total: u64 = b.iter().sum();
        if total != dp.used_bytes {
            out.push(format!("{}: used {} but its breakdown sums to {total}", head.name, dp.used_bytes));
        }
        if dp.parent_obj != 0 {
            // The root directory's CHILD also holds $MOS, $FREE and $ORIGIN: not checked.
            let children: u64 = all
                .iter()
                .filter(|c| c.kind != DatasetKind::Snapshot && c.dir.parent_obj == head.dir_obj)
                .map(|c| c.dir.used_bytes)
                .sum();
            if children != b[DD_USED_CHILD] {
                out.push(format!(
                    "{}: usedbychildren {} but its children use {children}",
                    head.name, b[DD_USED_CHILD]
                ));
            }
        }
    }
    out
}

/// Asserts [`dsl_space_mismatches`] finds nothing.
pub fn dsl_space_check(dir: &Path, pool: &str) {
    let m = dsl_space_mismatches(dir, pool);
    assert!(m.is_empty(), "DSL space accounting of {pool} disagrees with its blocks:\n{}", m.join("\n"));
}
