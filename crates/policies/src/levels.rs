//! A priority array: the ends of one FIFO per priority level, in order, with a bitmap of
//! the levels that hold a queued task — Linux's `rt_prio_array` (kernel/sched/rt.c:
//! `queue[MAX_RT_PRIO]` and its bitmap), for any ordered rank instead of 100 numbers.
//! `fps` keeps its FIFOs' links in its task table and the ends here.
//!
//! A level exists while some attached task has its rank ([`Levels::add_user`],
//! [`Levels::remove_user`]), queued or not, so the usual wake / pick / block cycle of a
//! task neither allocates nor searches: the user keeps each task's level index, and the
//! first non-empty level is found by the bitmap. Adding or removing a rank (attach,
//! detach, a priority change) shifts the arrays, O(L) for L levels, and the indices
//! after it: both calls say where, so the user can shift the indices it keeps.
//!
//! Invariant: `ranks` is sorted and duplicate-free; bit k of `nonempty` is set iff
//! `ends[k].head != NIL`; `users[k] > 0` for every level.

/// The end of a FIFO: no task.
pub const NIL: u32 = u32::MAX;

/// The first and last task of one level's FIFO ([`NIL`] when it is empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    pub head: u32,
    pub tail: u32,
}

impl Ends {
    pub const EMPTY: Ends = Ends { head: NIL, tail: NIL };
}

/// See the module documentation. `R` is the rank: smaller is more important.
#[derive(Clone, Debug)]
pub struct Levels<R> {
    ranks: Vec<R>,
    ends: Vec<Ends>,
    users: Vec<u32>,
    nonempty: Vec<u64>,
}

impl<R> Default for Levels<R> {
    fn default() -> Self {
        Levels { ranks: Vec::new(), ends: Vec::new(), users: Vec::new(), nonempty: Vec::new() }
    }
}

impl<R: Ord + Copy> Levels<R> {
    /// The level of `rank`, if some attached task has it.
    pub fn index(&self, rank: R) -> Option<usize> {
        self.ranks.binary_search(&rank).ok()
    }

    /// One more attached task has `rank`. Returns where a new level was made (the
    /// levels from there on moved up by one), or None if it existed.
    #[must_use]
    pub fn add_user(&mut self, rank: R) -> Option<usize> {
        match self.ranks.binary_search(&rank) {
            Ok(k) => {
                self.users[k] += 1;
                None
            }
            Err(k) => {
                self.ranks.insert(k, rank);
                self.ends.insert(k, Ends::EMPTY);
                self.users.insert(k, 1);
                self.rebuild_bits();
                Some(k)
            }
        }
    }

    /// One attached task less has `rank`; its level goes when none has, and must then be
    /// empty (its tasks are unlinked first). Returns where a level went (the levels after
    /// it moved down by one).
    #[must_use]
    pub fn remove_user(&mut self, rank: R) -> Option<usize> {
        let k = self.ranks.binary_search(&rank).ok()?;
        self.users[k] -= 1;
        if self.users[k] > 0 {
            return None;
        }
        debug_assert_eq!(self.ends[k], Ends::EMPTY, "a level is left by its last task only when that task is unlinked");
        self.ranks.remove(k);
        self.ends.remove(k);
        self.users.remove(k);
        self.rebuild_bits();
        Some(k)
    }

    fn rebuild_bits(&mut self) {
        self.nonempty = vec![0; self.ranks.len().div_ceil(64)];
        for (k, e) in self.ends.iter().enumerate() {
            if e.head != NIL {
                self.nonempty[k / 64] |= 1 << (k % 64);
            }
        }
    }

    pub fn ends(&self, k: usize) -> Ends {
        self.ends[k]
    }

    /// Sets level `k`'s ends (and its bit).
    pub fn set_ends(&mut self, k: usize, e: Ends) {
        self.ends[k] = e;
        let (w, b) = (k / 64, 1u64 << (k % 64));
        if e.head == NIL {
            self.nonempty[w] &= !b;
        } else {
            self.nonempty[w] |= b;
        }
    }

    /// The levels holding a queued task, most important first.
    pub fn queued(&self) -> impl Iterator<Item = Ends> + '_ {
        self.nonempty.iter().enumerate().flat_map(move |(w, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    self.ends[w * 64 + b]
                })
            })
        })
    }

    /// The most important level holding a queued task.
    pub fn first(&self) -> Option<Ends> {
        self.queued().next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_levels_come_in_rank_order_across_words() {
        let mut l: Levels<i64> = Levels::default();
        for r in (0..150).rev() {
            assert_eq!(l.add_user(r), Some(0), "each smaller rank goes first");
        }
        for r in [149, 3, 70, 64, 63] {
            let k = l.index(r).unwrap();
            l.set_ends(k, Ends { head: r as u32, tail: r as u32 });
        }
        let heads: Vec<u32> = l.queued().map(|e| e.head).collect();
        assert_eq!(heads, vec![3, 63, 64, 70, 149]);
        assert_eq!(l.first().map(|e| e.head), Some(3));
        let k = l.index(3).unwrap();
        l.set_ends(k, Ends::EMPTY);
        assert_eq!(l.first().map(|e| e.head), Some(63));
    }

    #[test]
    fn a_rank_added_or_removed_keeps_the_others_queued() {
        let mut l: Levels<i64> = Levels::default();
        assert_eq!(l.add_user(10), Some(0));
        assert_eq!(l.add_user(30), Some(1));
        let k = l.index(30).unwrap();
        l.set_ends(k, Ends { head: 7, tail: 8 });
        assert_eq!(l.add_user(20), Some(1), "30's level moves up");
        assert_eq!(l.add_user(20), None);
        assert_eq!(l.index(30), Some(2));
        assert_eq!(l.first(), Some(Ends { head: 7, tail: 8 }));
        assert_eq!(l.remove_user(20), None);
        assert_eq!(l.index(20), Some(1), "a second task still has rank 20");
        assert_eq!(l.remove_user(20), Some(1));
        assert_eq!(l.index(20), None);
        assert_eq!(l.remove_user(10), Some(0));
        assert_eq!(l.index(30), Some(0));
        assert_eq!(l.queued().collect::<Vec<_>>(), vec![Ends { head: 7, tail: 8 }]);
    }
}
