//! A coalescing set of disjoint byte ranges, the in-memory form of free (or pending) space.
//!
//! Plays the role of OpenZFS's `zfs_range_tree_t` (module/zfs/range_tree.c): segments are kept
//! sorted by start in a `BTreeMap<start, end>`; adjacent segments are always merged, so a range
//! that is wholly inside the set lies inside exactly one segment. A second index ordered by
//! (length, start) answers "smallest segment that fits" and "largest segment" in O(log n), which
//! is what the by-size fallback of the dynamic-fit allocator needs (OpenZFS keeps the same
//! second view as `ms_allocatable_by_size`).
//!
//! Every mutation checks its precondition (adding over present space or removing absent space
//! is an error, never a silent merge), because trees are also rebuilt from on-disk space maps.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound::{Excluded, Included, Unbounded};

use crate::{Error, Result};

/// Disjoint, coalesced half-open ranges `[start, end)`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RangeTree {
    segs: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    space: u64,
}

impl fmt::Debug for RangeTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RangeTree {{ space: {:#x}, segs: [", self.space)?;
        for (i, (s, e)) in self.iter().enumerate() {
            if i == 8 {
                write!(f, ", ... {} more", self.segs.len() - 8)?;
                break;
            }
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{s:#x}..{e:#x}")?;
        }
        write!(f, "] }}")
    }
}

fn end_of(start: u64, len: u64) -> Result<u64> {
    if len == 0 {
        return Err(Error::Invalid(format!("empty range at {start:#x}")));
    }
    start.checked_add(len).ok_or_else(|| Error::Invalid(format!("range {start:#x}+{len:#x} overflows")))
}

impl RangeTree {
    pub fn new() -> RangeTree {
        RangeTree::default()
    }

    /// A tree holding the single range `[start, start + len)`.
    pub fn full(start: u64, len: u64) -> Result<RangeTree> {
        let mut t = RangeTree::new();
        t.add(start, len)?;
        Ok(t)
    }

    /// Total bytes in the set.
    pub fn space(&self) -> u64 {
        self.space
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Number of segments.
    pub fn num_segs(&self) -> usize {
        self.segs.len()
    }

    /// Segments as `(start, end)`, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segs.iter().map(|(&s, &e)| (s, e))
    }

    /// Length of the largest segment (0 when empty).
    pub fn largest(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    fn insert_seg(&mut self, s: u64, e: u64) {
        self.segs.insert(s, e);
        self.by_size.insert((e - s, s));
    }

    fn remove_seg(&mut self, s: u64, e: u64) {
        self.segs.remove(&s);
        self.by_size.remove(&(e - s, s));
    }

    /// The segment containing byte `off`, if any.
    fn seg_at(&self, off: u64) -> Option<(u64, u64)> {
        let (&s, &e) = self.segs.range(..=off).next_back()?;
        (off < e).then_some((s, e))
    }

    /// Does any byte of `[start, start + len)` belong to the set?
    pub fn intersects(&self, start: u64, len: u64) -> bool {
        let Ok(end) = end_of(start, len) else { return false };
        if self.seg_at(start).is_some() {
            return true;
        }
        self.segs.range((Excluded(start), Excluded(end))).next().is_some()
    }

    /// Is all of `[start, start + len)` in the set?
    pub fn contains(&self, start: u64, len: u64) -> bool {
        let Ok(end) = end_of(start, len) else { return false };
        self.seg_at(start).is_some_and(|(_, e)| end <= e)
    }

    /// Adds `[start, start + len)`, merging with neighbours; fails if any of it is present.
    pub fn add(&mut self, start: u64, len: u64) -> Result<()> {
        let end = end_of(start, len)?;
        if self.intersects(start, len) {
            return Err(Error::Range(format!("add {start:#x}..{end:#x}: overlaps space already present")));
        }
        let (mut s, mut e) = (start, end);
        if let Some((&ps, &pe)) = self.segs.range(..start).next_back() {
            if pe == start {
                self.remove_seg(ps, pe);
                s = ps;
            }
        }
        if let Some(&ne) = self.segs.get(&end) {
            self.remove_seg(end, ne);
            e = ne;
        }
        self.insert_seg(s, e);
        self.space += len;
        Ok(())
    }

    /// Removes `[start, start + len)`; fails unless all of it is present.
    pub fn remove(&mut self, start: u64, len: u64) -> Result<()> {
        let end = end_of(start, len)?;
        let Some((s, e)) = self.seg_at(start).filter(|&(_, e)| end <= e) else {
            return Err(Error::Range(format!("remove {start:#x}..{end:#x}: not all of it is present")));
        };
        self.remove_seg(s, e);
        if s < start {
            self.insert_seg(s, start);
        }
        if end < e {
            self.insert_seg(end, e);
        }
        self.space -= len;
        Ok(())
    }

    /// The parts of `[start, start + len)` that are in the set, as `(start, end)`.
    pub fn overlaps(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let Ok(end) = end_of(start, len) else { return Vec::new() };
        let mut out = Vec::new();
        if let Some((_, e)) = self.seg_at(start) {
            out.push((start, e.min(end)));
        }
        for (&s, &e) in self.segs.range((Excluded(start), Excluded(end))) {
            out.push((s, e.min(end)));
        }
        out
    }

    /// Removes everything, returning the segments.
    pub fn drain(&mut self) -> Vec<(u64, u64)> {
        let out = self.iter().collect();
        *self = RangeTree::new();
        out
    }

    /// Adds every segment of `other` (which must be disjoint from `self`).
    pub fn add_tree(&mut self, other: &RangeTree) -> Result<()> {
        for (s, e) in other.iter() {
            self.add(s, e - s)?;
        }
        Ok(())
    }

    /// Cursor-based first fit, in the manner of OpenZFS `metaslab_block_picker`: start at the
    /// segment that overlaps `[cursor, cursor + size)` (or the next one after it) and walk forward
    /// until a segment of at least `size` bytes is found. Gives up once the walk has gone
    /// `max_search` bytes past the first segment looked at and has seen at least
    /// `min_count` segments. Returns the start of the fitting segment.
    pub fn first_fit_from(&self, cursor: u64, size: u64, max_search: u64, min_count: usize) -> Option<u64> {
        let first = match self.seg_at(cursor) {
            Some((s, _)) => s,
            None => *self.segs.range((Excluded(cursor), Unbounded)).next()?.0,
        };
        for (n, (&s, &e)) in self.segs.range((Included(first), Unbounded)).enumerate() {
            if s - first > max_search && n >= min_count {
                break;
            }
            if e - s >= size {
                return Some(s);
            }
        }
        None
    }

    /// Best fit: the start of the smallest segment of at least `size` bytes (lowest start on ties).
    pub fn best_fit(&self, size: u64) -> Option<u64> {
        self.by_size.range((size, 0)..).next().map(|&(_, s)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_coalesces_and_remove_splits() {
        let mut t = RangeTree::new();
        t.add(0x1000, 0x1000).unwrap();
        t.add(0x3000, 0x1000).unwrap();
        assert_eq!(t.num_segs(), 2);
        t.add(0x2000, 0x1000).unwrap();
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(0x1000, 0x4000)]);
        assert_eq!(t.space(), 0x3000);
        assert_eq!(t.largest(), 0x3000);
        t.remove(0x2000, 0x800).unwrap();
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![(0x1000, 0x2000), (0x2800, 0x4000)]);
        assert_eq!(t.largest(), 0x1800);
        assert!(t.contains(0x2800, 0x1800));
        assert!(!t.contains(0x1800, 0x1000));
        assert!(t.intersects(0x1800, 0x1000));
        assert!(!t.intersects(0x2000, 0x800));
        assert_eq!(t.overlaps(0x1800, 0x1800), vec![(0x1800, 0x2000), (0x2800, 0x3000)]);
    }

    #[test]
    fn bad_adds_and_removes_are_errors() {
        let mut t = RangeTree::full(0, 0x1000).unwrap();
        assert!(t.add(0x800, 0x1000).is_err());
        assert!(t.add(0, 0).is_err());
        assert!(t.add(u64::MAX, 2).is_err());
        assert!(t.remove(0x800, 0x1000).is_err());
        assert!(t.remove(0x2000, 1).is_err());
        assert_eq!(t.space(), 0x1000);
        assert_eq!(t.num_segs(), 1);
    }

    #[test]
    fn fits() {
        let mut t = RangeTree::new();
        for (s, l) in [(0, 0x1000), (0x10000, 0x4000), (0x20000, 0x2000), (0x30000, 0x8000)] {
            t.add(s, l).unwrap();
        }
        assert_eq!(t.first_fit_from(0, 0x2000, u64::MAX, 0), Some(0x10000));
        assert_eq!(t.first_fit_from(0x14000, 0x2000, u64::MAX, 0), Some(0x20000));
        assert_eq!(t.first_fit_from(0x21000, 0x2000, u64::MAX, 0), Some(0x20000));
        assert_eq!(t.first_fit_from(0x38000, 0x1000, u64::MAX, 0), None);
        // The walk stops after max_search bytes once min_count segments were seen.
        assert_eq!(t.first_fit_from(0, 0x8000, 0x100, 2), None);
        assert_eq!(t.best_fit(0x2000), Some(0x20000));
        assert_eq!(t.best_fit(0x5000), Some(0x30000));
        assert_eq!(t.best_fit(0x9000), None);
    }
}
