//! A keyed timer table: entries due at a time, each under a key that cancels or replaces it.
//!
//! A mechanism arms timers that later become wrong (a slice end moved, a task woken early,
//! a scheduler event re-armed): rather than leaving the old entry queued and recognising
//! it by a generation counter when it falls due, the entry is cancelled by its key, as
//! nexosim cancels a scheduled action by its key. Keyless entries are one-shot events
//! that nothing cancels.
//!
//! Invariants: every key names at most one entry; entries come out in time order, and
//! entries due at one instant in the order they were inserted (a sequence number breaks
//! ties; a replaced entry takes a new one); nothing iterates a hash map, so the order is
//! deterministic.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

use crate::time::Ns;

/// Entries of type `V` due at times, each optionally under a key `K`. See the module doc.
///
/// A binary heap by (time, sequence number) holds the entries; a cancelled or replaced
/// entry is only forgotten by the key index and is discarded when it reaches the top of
/// the heap (the top is always live, so `next_deadline` needs no search). One B-tree
/// operation and one heap operation per insert: this table is the simulator's event
/// queue, its hottest structure (issue 16's profile).
#[derive(Clone, Debug)]
pub struct Timers<K, V> {
    seq: u64,
    heap: BinaryHeap<Reverse<Entry<K, V>>>,
    /// The (time, sequence number) of each key's live entry.
    keys: BTreeMap<K, (Ns, u64)>,
    /// Entries armed and neither popped nor cancelled.
    live: usize,
    /// Entries removed before they fell due (cancelled or replaced).
    dropped: u64,
}

/// A queued entry, ordered by (time, sequence number) only.
#[derive(Clone, Debug)]
struct Entry<K, V> {
    at: Ns,
    seq: u64,
    key: Option<K>,
    value: V,
}

impl<K, V> PartialEq for Entry<K, V> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<K, V> Eq for Entry<K, V> {}

impl<K, V> PartialOrd for Entry<K, V> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K, V> Ord for Entry<K, V> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl<K, V> Default for Timers<K, V> {
    fn default() -> Self {
        Timers { seq: 0, heap: BinaryHeap::new(), keys: BTreeMap::new(), live: 0, dropped: 0 }
    }
}

impl<K: Ord + Clone, V> Timers<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `value` at `at` under `key`, replacing the key's previous entry (whose time
    /// is returned).
    pub fn insert(&mut self, at: Ns, key: K, value: V) -> Option<Ns> {
        let old = self.forget(&key);
        self.seq += 1;
        self.keys.insert(key.clone(), (at, self.seq));
        self.heap.push(Reverse(Entry { at, seq: self.seq, key: Some(key), value }));
        self.live += 1;
        self.trim();
        old
    }

    /// Queues a keyless one-shot entry at `at`.
    pub fn push(&mut self, at: Ns, value: V) {
        self.seq += 1;
        self.heap.push(Reverse(Entry { at, seq: self.seq, key: None, value }));
        self.live += 1;
    }

    /// Removes the entry under `key`, if one is armed; returns its time.
    pub fn cancel(&mut self, key: &K) -> Option<Ns> {
        let old = self.forget(key);
        self.trim();
        old
    }

    /// Forgets the key's entry (it stays in the heap, dead, until it reaches the top).
    fn forget(&mut self, key: &K) -> Option<Ns> {
        let (at, _) = self.keys.remove(key)?;
        self.live -= 1;
        self.dropped += 1;
        Some(at)
    }

    /// Whether a queued entry was cancelled or replaced.
    fn dead(&self, e: &Entry<K, V>) -> bool {
        e.key.as_ref().is_some_and(|k| self.keys.get(k) != Some(&(e.at, e.seq)))
    }

    /// Discards dead entries from the top of the heap.
    fn trim(&mut self) {
        while self.heap.peek().is_some_and(|Reverse(e)| self.dead(e)) {
            self.heap.pop();
        }
    }

    /// When the entry under `key` is due, if one is armed.
    pub fn at(&self, key: &K) -> Option<Ns> {
        self.keys.get(key).map(|&(at, _)| at)
    }

    /// When the earliest entry is due.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    /// Removes and returns the earliest entry (the first inserted among those due at
    /// its instant): its time, key and value.
    pub fn pop(&mut self) -> Option<(Ns, Option<K>, V)> {
        let Reverse(e) = self.heap.pop()?;
        if let Some(k) = &e.key {
            self.keys.remove(k);
        }
        self.live -= 1;
        self.trim();
        Some((e.at, e.key, e.value))
    }

    /// [`Timers::pop`], if the earliest entry is due by `now`.
    pub fn pop_due(&mut self, now: Ns) -> Option<(Ns, Option<K>, V)> {
        if self.next_deadline()? > now {
            return None;
        }
        self.pop()
    }

    /// Entries armed.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// How many entries were removed before they fell due (cancelled or replaced).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(t: &mut Timers<&'static str, u32>) -> Vec<(Ns, u32)> {
        std::iter::from_fn(|| t.pop().map(|(at, _, v)| (at, v))).collect()
    }

    #[test]
    fn entries_come_out_in_time_order_and_ties_in_insertion_order() {
        let mut t = Timers::new();
        t.insert(20, "b", 1);
        t.push(10, 2);
        t.insert(10, "a", 3);
        t.push(20, 4);
        t.push(5, 5);
        assert_eq!(t.next_deadline(), Some(5));
        assert_eq!(drain(&mut t), vec![(5, 5), (10, 2), (10, 3), (20, 1), (20, 4)]);
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn inserting_under_a_key_replaces_its_entry_and_goes_behind_the_ties() {
        let mut t = Timers::new();
        t.insert(10, "a", 1);
        t.insert(10, "b", 2);
        assert_eq!(t.insert(10, "a", 3), Some(10));
        assert_eq!(t.len(), 2);
        assert_eq!(t.at(&"a"), Some(10));
        assert_eq!(drain(&mut t), vec![(10, 2), (10, 3)]);
        assert_eq!(t.dropped(), 1);
    }

    #[test]
    fn cancel_removes_only_the_keys_entry() {
        let mut t = Timers::new();
        t.insert(10, "a", 1);
        t.insert(5, "b", 2);
        t.push(7, 3);
        assert_eq!(t.cancel(&"b"), Some(5));
        assert_eq!(t.cancel(&"b"), None);
        assert_eq!(t.cancel(&"zz"), None);
        assert_eq!(t.at(&"b"), None);
        assert_eq!(t.next_deadline(), Some(7));
        assert_eq!(drain(&mut t), vec![(7, 3), (10, 1)]);
        assert_eq!(t.dropped(), 1);
    }

    #[test]
    fn a_popped_key_may_be_armed_again_and_pop_due_waits_for_its_time() {
        let mut t = Timers::new();
        t.insert(10, "a", 1);
        assert_eq!(t.pop_due(9), None);
        assert_eq!(t.pop_due(10), Some((10, Some("a"), 1)));
        assert_eq!(t.at(&"a"), None);
        assert_eq!(t.cancel(&"a"), None, "a popped entry is not cancelled again");
        t.insert(3, "a", 2);
        assert_eq!(t.pop_due(100), Some((3, Some("a"), 2)));
        assert_eq!(t.dropped(), 0);
    }

    /// The heap keeps cancelled and replaced entries until they reach its top: whatever
    /// the sequence of operations, what comes out, `len` and `next_deadline` are those of
    /// a plain ordered map of the live entries.
    #[test]
    fn dead_entries_never_come_out_and_never_count() {
        let mut t: Timers<u8, u64> = Timers::new();
        let mut model: BTreeMap<(Ns, u64), u64> = BTreeMap::new();
        let mut live: BTreeMap<u8, (Ns, u64)> = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (key, at) = ((x % 8) as u8, (x >> 8) % 50);
            match x % 5 {
                0 | 1 => {
                    if let Some(old) = live.remove(&key) {
                        model.remove(&old);
                    }
                    t.insert(at, key, step);
                    live.insert(key, (at, t.seq));
                    model.insert((at, t.seq), step);
                }
                2 => {
                    if let Some(old) = live.remove(&key) {
                        model.remove(&old);
                    }
                    t.cancel(&key);
                }
                3 => {
                    t.push(at, step);
                    model.insert((at, t.seq), step);
                }
                _ => {
                    let got = t.pop();
                    let want = model.pop_first();
                    assert_eq!(got.as_ref().map(|(at, _, v)| (*at, *v)), want.map(|((at, _), v)| (at, v)), "step {step}");
                    if let Some((_, Some(k), _)) = got {
                        live.remove(&k);
                    }
                }
            }
            assert_eq!(t.len(), model.len(), "step {step}");
            assert_eq!(t.next_deadline(), model.first_key_value().map(|(&(at, _), _)| at), "step {step}");
        }
    }
}
