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

use std::collections::BTreeMap;

use crate::time::Ns;

/// Entries of type `V` due at times, each optionally under a key `K`. See the module doc.
#[derive(Clone, Debug)]
pub struct Timers<K, V> {
    seq: u64,
    /// By (time, sequence number): the entry's key (None: keyless) and value.
    queue: BTreeMap<(Ns, u64), (Option<K>, V)>,
    /// Where each keyed entry sits in `queue`.
    keys: BTreeMap<K, (Ns, u64)>,
    /// Entries removed before they fell due (cancelled or replaced).
    dropped: u64,
}

impl<K, V> Default for Timers<K, V> {
    fn default() -> Self {
        Timers { seq: 0, queue: BTreeMap::new(), keys: BTreeMap::new(), dropped: 0 }
    }
}

impl<K: Ord + Clone, V> Timers<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `value` at `at` under `key`, replacing the key's previous entry (returned).
    pub fn insert(&mut self, at: Ns, key: K, value: V) -> Option<(Ns, V)> {
        let old = self.cancel(&key);
        self.seq += 1;
        self.keys.insert(key.clone(), (at, self.seq));
        self.queue.insert((at, self.seq), (Some(key), value));
        old
    }

    /// Queues a keyless one-shot entry at `at`.
    pub fn push(&mut self, at: Ns, value: V) {
        self.seq += 1;
        self.queue.insert((at, self.seq), (None, value));
    }

    /// Removes the entry under `key` (returned), if one is armed.
    pub fn cancel(&mut self, key: &K) -> Option<(Ns, V)> {
        let slot = self.keys.remove(key)?;
        let (_, value) = self.queue.remove(&slot)?;
        self.dropped += 1;
        Some((slot.0, value))
    }

    /// When the entry under `key` is due, if one is armed.
    pub fn at(&self, key: &K) -> Option<Ns> {
        self.keys.get(key).map(|&(at, _)| at)
    }

    /// When the earliest entry is due.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.queue.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Removes and returns the earliest entry (the first inserted among those due at
    /// its instant): its time, key and value.
    pub fn pop(&mut self) -> Option<(Ns, Option<K>, V)> {
        let ((at, _), (key, value)) = self.queue.pop_first()?;
        if let Some(k) = &key {
            self.keys.remove(k);
        }
        Some((at, key, value))
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
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
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
        assert_eq!(t.insert(10, "a", 3), Some((10, 1)));
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
        assert_eq!(t.cancel(&"b"), Some((5, 2)));
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
}
