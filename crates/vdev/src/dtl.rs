//! Dirty time logs (DTLs): the txgs whose writes a leaf vdev is missing.
//!
//! OpenZFS keeps, per leaf, a range tree of txgs (`vdev_dtl[DTL_MISSING]`) to which it adds
//! every txg whose writes the leaf did not get: it was offline, faulted, absent, or a write
//! to it failed. A block born in such a txg may be missing or stale on that leaf, so reads
//! avoid the leaf for it and a resilver rewrites exactly those blocks (those born in the
//! DTL's txgs) instead of the whole pool. The tree is stored as a space map object in the
//! MOS whose "offsets" are txgs (shift 0, start 0), named by the leaf's `DTL` config entry.
//!
//! [`Dtl`] is that range set: disjoint, non-adjacent half-open ranges `[start, end)`.

use std::collections::BTreeMap;

/// A set of txgs, kept as disjoint ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dtl {
    /// start → end (exclusive); ranges neither overlap nor touch.
    ranges: BTreeMap<u64, u64>,
}

impl Dtl {
    pub fn new() -> Dtl {
        Dtl::default()
    }

    /// Adds `count` txgs from `start` (saturating at the top of the txg space).
    pub fn add(&mut self, start: u64, count: u64) {
        if count == 0 {
            return;
        }
        let mut lo = start;
        let mut hi = start.saturating_add(count);
        // Absorb every range that overlaps or touches [lo, hi).
        let touching: Vec<(u64, u64)> =
            self.ranges.range(..=hi).rev().take_while(|(_, &e)| e >= lo).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            self.ranges.remove(&s);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.ranges.insert(lo, hi);
    }

    /// Removes every txg in `[start, end)`.
    pub fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let hit: Vec<(u64, u64)> =
            self.ranges.range(..end).rev().take_while(|(_, &e)| e > start).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in hit {
            self.ranges.remove(&s);
            if s < start {
                self.ranges.insert(s, start);
            }
            if e > end {
                self.ranges.insert(end, e);
            }
        }
    }

    /// Adds every txg of `other`.
    pub fn union(&mut self, other: &Dtl) {
        for (s, c) in other.ranges() {
            self.add(s, c);
        }
    }

    /// Is `txg` in the set?
    pub fn contains(&self, txg: u64) -> bool {
        self.ranges.range(..=txg).next_back().is_some_and(|(_, &e)| txg < e)
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Smallest txg in the set.
    pub fn min(&self) -> Option<u64> {
        self.ranges.keys().next().copied()
    }

    /// Largest txg in the set.
    pub fn max(&self) -> Option<u64> {
        self.ranges.values().next_back().map(|e| e - 1)
    }

    /// Number of txgs in the set.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    /// The ranges as (start, count), in order.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e - s))
    }
}

/// The txgs that at least `n` of `sets` contain (`n` = 0 is treated as 1).
pub fn at_least(sets: &[Dtl], n: usize) -> Dtl {
    let n = n.max(1) as i64;
    // +1 where a range starts, -1 where it ends; a sweep keeps the running count.
    let mut edges: BTreeMap<u64, i64> = BTreeMap::new();
    for d in sets {
        for (&s, &e) in &d.ranges {
            *edges.entry(s).or_default() += 1;
            *edges.entry(e).or_default() -= 1;
        }
    }
    let mut out = Dtl::new();
    let mut count = 0i64;
    let mut open: Option<u64> = None;
    for (&at, &delta) in &edges {
        count += delta;
        match (open, count >= n) {
            (None, true) => open = Some(at),
            (Some(s), false) => {
                out.add(s, at - s);
                open = None;
            }
            _ => {}
        }
    }
    if let Some(s) = open {
        out.add(s, u64::MAX - s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn merges_and_splits() {
        let mut d = Dtl::new();
        d.add(10, 1);
        d.add(12, 1);
        assert_eq!(d.ranges().collect::<Vec<_>>(), vec![(10, 1), (12, 1)]);
        d.add(11, 1);
        assert_eq!(d.ranges().collect::<Vec<_>>(), vec![(10, 3)]);
        assert_eq!((d.min(), d.max(), d.len()), (Some(10), Some(12), 3));
        d.remove(0, 11);
        assert_eq!(d.ranges().collect::<Vec<_>>(), vec![(11, 2)]);
        d.add(4, 100);
        d.remove(50, 60);
        assert_eq!(d.ranges().collect::<Vec<_>>(), vec![(4, 46), (60, 44)]);
        assert!(d.contains(49) && !d.contains(50) && !d.contains(59) && d.contains(60));
        assert!(!d.contains(104) && d.contains(103));
        d.add(u64::MAX - 1, 5);
        assert_eq!(d.max(), Some(u64::MAX - 1));
    }

    #[test]
    fn at_least_counts_overlaps() {
        let mk = |r: &[(u64, u64)]| {
            let mut d = Dtl::new();
            r.iter().for_each(|&(s, c)| d.add(s, c));
            d
        };
        let sets = [mk(&[(0, 10)]), mk(&[(5, 10)]), mk(&[(8, 1), (30, 2)])];
        assert_eq!(at_least(&sets, 1).ranges().collect::<Vec<_>>(), vec![(0, 15), (30, 2)]);
        assert_eq!(at_least(&sets, 2).ranges().collect::<Vec<_>>(), vec![(5, 5)]);
        assert_eq!(at_least(&sets, 3).ranges().collect::<Vec<_>>(), vec![(8, 1)]);
        assert!(at_least(&sets, 4).is_empty());
        let mut all = Dtl::new();
        all.add(0, u64::MAX);
        assert_eq!(at_least(&[all.clone(), mk(&[(3, 1)])], 2).ranges().collect::<Vec<_>>(), vec![(3, 1)]);
        assert_eq!(at_least(&[all.clone()], 1), all);
    }

    proptest! {
        /// The range set agrees with a plain set of txgs under any sequence of adds and removes.
        #[test]
        fn matches_a_set(ops in proptest::collection::vec((any::<bool>(), 0u64..64, 0u64..8), 0..40)) {
            let mut d = Dtl::new();
            let mut set = std::collections::BTreeSet::new();
            for (add, start, n) in ops {
                if add {
                    d.add(start, n);
                    set.extend(start..start + n);
                } else {
                    d.remove(start, start + n);
                    for t in start..start + n {
                        set.remove(&t);
                    }
                }
                for t in 0..80 {
                    prop_assert_eq!(d.contains(t), set.contains(&t));
                }
                prop_assert_eq!(d.len(), set.len() as u64);
                let v: Vec<_> = d.ranges().collect();
                for w in v.windows(2) {
                    prop_assert!(w[0].0 + w[0].1 < w[1].0, "ranges touch: {:?}", v);
                }
            }
        }
    }
}
