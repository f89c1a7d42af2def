//! An ordered set for ready queues: a sorted vector while it is small, a B-tree once large.
//!
//! A ready queue holds the runnable tasks of one scheduler — usually a few tens — and is
//! changed at nearly every decision (a wake inserts, a pick removes, a preemption
//! inserts again). For tens of keys a binary search and a short move in one vector cost
//! less than a B-tree's node walk, splits and merges (issue 16's profile of global EDF:
//! the B-tree's insert, remove and node moves took 12 % of the run); for many thousands
//! of keys the B-tree's O(log n) wins. The set moves between the two forms with
//! hysteresis (up at [`GROW`] keys, down at [`SHRINK`]), so a size at the boundary does
//! not convert at every change. Iteration is in key order in both forms.

use std::collections::BTreeSet;

/// Keys at which the sorted vector becomes a B-tree.
const GROW: usize = 128;
/// Keys at which the B-tree becomes a sorted vector again.
const SHRINK: usize = 64;

/// An ordered set of `K` (see the module documentation).
#[derive(Clone, Debug)]
pub enum OrderedSet<K> {
    /// The keys in order, while the set is small.
    Small(Vec<K>),
    /// The keys, once the set grew to [`GROW`] (until it shrinks to [`SHRINK`]).
    Large(BTreeSet<K>),
}

impl<K> Default for OrderedSet<K> {
    fn default() -> Self {
        OrderedSet::Small(Vec::new())
    }
}

impl<K: Ord + Copy> OrderedSet<K> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        match self {
            OrderedSet::Small(v) => v.len(),
            OrderedSet::Large(b) => b.len(),
        }
    }

    /// Adds `k`; false if it was already there.
    pub fn insert(&mut self, k: K) -> bool {
        match self {
            OrderedSet::Large(b) => b.insert(k),
            OrderedSet::Small(v) => match v.binary_search(&k) {
                Ok(_) => false,
                Err(pos) => {
                    v.insert(pos, k);
                    if v.len() >= GROW {
                        *self = OrderedSet::Large(std::mem::take(v).into_iter().collect());
                    }
                    true
                }
            },
        }
    }

    /// Takes `k` out; false if it was not there.
    pub fn remove(&mut self, k: &K) -> bool {
        match self {
            OrderedSet::Large(b) => {
                let removed = b.remove(k);
                if b.len() <= SHRINK {
                    *self = OrderedSet::Small(std::mem::take(b).into_iter().collect());
                }
                removed
            }
            OrderedSet::Small(v) => match v.binary_search(k) {
                Ok(pos) => {
                    v.remove(pos);
                    true
                }
                Err(_) => false,
            },
        }
    }

    /// The least key.
    pub fn first(&self) -> Option<&K> {
        match self {
            OrderedSet::Small(v) => v.first(),
            OrderedSet::Large(b) => b.first(),
        }
    }

    pub fn clear(&mut self) {
        *self = OrderedSet::default();
    }

    /// The keys in order.
    pub fn iter(&self) -> Iter<'_, K> {
        match self {
            OrderedSet::Small(v) => Iter::Small(v.iter()),
            OrderedSet::Large(b) => Iter::Large(b.iter()),
        }
    }
}

impl<K: Ord + Copy> FromIterator<K> for OrderedSet<K> {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        let mut s = OrderedSet::new();
        for k in iter {
            s.insert(k);
        }
        s
    }
}

/// An [`OrderedSet`]'s keys in order.
pub enum Iter<'a, K> {
    Small(std::slice::Iter<'a, K>),
    Large(std::collections::btree_set::Iter<'a, K>),
}

impl<'a, K> Iterator for Iter<'a, K> {
    type Item = &'a K;
    fn next(&mut self) -> Option<&'a K> {
        match self {
            Iter::Small(i) => i.next(),
            Iter::Large(i) => i.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of inserts and removes, across both forms, leaves the same keys in
        /// the same order as a B-tree set, with the same answers on the way.
        #[test]
        fn behaves_as_a_btree_set(ops in prop::collection::vec((any::<bool>(), 0u16..400), 0..1500)) {
            let mut s = OrderedSet::new();
            let mut b = BTreeSet::new();
            for (add, k) in ops {
                if add {
                    prop_assert_eq!(s.insert(k), b.insert(k));
                } else {
                    prop_assert_eq!(s.remove(&k), b.remove(&k));
                }
                prop_assert_eq!(s.len(), b.len());
                prop_assert_eq!(s.first(), b.first());
            }
            prop_assert!(s.iter().eq(b.iter()));
        }
    }

    #[test]
    fn grows_into_a_btree_and_shrinks_back() {
        let mut s: OrderedSet<u32> = (0..GROW as u32).rev().collect();
        assert!(matches!(s, OrderedSet::Large(_)));
        assert!(s.iter().copied().eq(0..GROW as u32));
        for k in 0..(GROW - SHRINK) as u32 {
            assert!(s.remove(&k));
        }
        assert!(matches!(&s, OrderedSet::Small(v) if v.len() == SHRINK));
        assert!(s.iter().copied().eq((GROW - SHRINK) as u32..GROW as u32));
        assert!(!s.remove(&0) && !s.insert(GROW as u32 - 1));
    }
}
