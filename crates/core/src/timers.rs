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

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::time::Ns;

/// Entries of type `V` due at times, each optionally under a key `K`. See the module doc.
///
/// The entries live in slots; a binary heap of small (time, sequence number, slot) triples
/// orders them. A cancelled or replaced entry only marks its slot, and its triple is
/// discarded when it reaches the top of the heap (the top is always live, so
/// `next_deadline` needs no search). A key keeps its slot after its entry falls due or is
/// cancelled, so re-arming a key costs one B-tree search and no B-tree insertion or
/// removal; keys left without an entry are swept out when they outnumber the entries.
/// This table is the simulator's event queue, its hottest structure (issue 16's profile).
#[derive(Clone, Debug)]
pub struct Timers<K, V> {
    seq: u64,
    heap: BinaryHeap<Reverse<(Ns, u64, u32)>>,
    slots: Vec<Slot<K, V>>,
    /// Slots neither armed nor held by a key.
    free: Vec<u32>,
    /// The slot of each key (armed or not).
    keys: BTreeMap<K, u32>,
    /// Entries armed and neither popped nor cancelled.
    live: usize,
    /// Entries removed before they fell due (cancelled or replaced).
    dropped: u64,
}

/// One entry's place: armed while `seq` is that of its entry in the heap (sequence
/// numbers start at 1, so 0 never matches).
#[derive(Clone, Debug)]
struct Slot<K, V> {
    seq: u64,
    at: Ns,
    key: Option<K>,
    value: Option<V>,
}

impl<K, V> Default for Timers<K, V> {
    fn default() -> Self {
        Timers { seq: 0, heap: BinaryHeap::new(), slots: Vec::new(), free: Vec::new(), keys: BTreeMap::new(), live: 0, dropped: 0 }
    }
}

impl<K: Ord + Clone, V> Timers<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A slot for a new entry (reusing a free one).
    fn alloc(&mut self, key: Option<K>) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].key = key;
                i
            }
            None => {
                self.slots.push(Slot { seq: 0, at: 0, key, value: None });
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Fills slot `i` with an entry due at `at` and queues it.
    fn arm(&mut self, i: u32, at: Ns, value: V) {
        self.seq += 1;
        let slot = &mut self.slots[i as usize];
        slot.seq = self.seq;
        slot.at = at;
        slot.value = Some(value);
        self.heap.push(Reverse((at, self.seq, i)));
        self.live += 1;
    }

    /// Arms `value` at `at` under `key`, replacing the key's previous entry (whose time
    /// is returned).
    pub fn insert(&mut self, at: Ns, key: K, value: V) -> Option<Ns> {
        let (i, old) = match self.keys.get(&key) {
            Some(&i) => (i, self.disarm(i)),
            None => {
                self.sweep();
                let i = self.alloc(Some(key.clone()));
                self.keys.insert(key, i);
                (i, None)
            }
        };
        self.arm(i, at, value);
        self.trim();
        old
    }

    /// Queues a keyless one-shot entry at `at`.
    pub fn push(&mut self, at: Ns, value: V) {
        let i = self.alloc(None);
        self.arm(i, at, value);
    }

    /// Removes the entry under `key`, if one is armed; returns its time.
    pub fn cancel(&mut self, key: &K) -> Option<Ns> {
        let i = *self.keys.get(key)?;
        let old = self.disarm(i);
        self.trim();
        old
    }

    /// Drops slot `i`'s entry, if armed (its triple stays in the heap, dead, until it
    /// reaches the top); returns its time.
    fn disarm(&mut self, i: u32) -> Option<Ns> {
        let slot = &mut self.slots[i as usize];
        if slot.seq == 0 {
            return None;
        }
        slot.seq = 0;
        slot.value = None;
        self.live -= 1;
        self.dropped += 1;
        Some(slot.at)
    }

    /// Forgets the keys that hold no entry once they outnumber the entries (amortised:
    /// each sweep frees at least as many keys as are armed).
    fn sweep(&mut self) {
        if self.keys.len() < 2 * self.live + 64 {
            return;
        }
        let (slots, free) = (&self.slots, &mut self.free);
        self.keys.retain(|_, &mut i| {
            let armed = slots[i as usize].seq != 0;
            if !armed {
                free.push(i);
            }
            armed
        });
    }

    /// Discards dead triples from the top of the heap.
    fn trim(&mut self) {
        while let Some(&Reverse((_, seq, i))) = self.heap.peek() {
            if self.slots[i as usize].seq == seq {
                break;
            }
            self.heap.pop();
        }
    }

    /// When the entry under `key` is due, if one is armed.
    pub fn at(&self, key: &K) -> Option<Ns> {
        let slot = &self.slots[*self.keys.get(key)? as usize];
        (slot.seq != 0).then_some(slot.at)
    }

    /// When the earliest entry is due.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.heap.peek().map(|&Reverse((at, _, _))| at)
    }

    /// Removes and returns the earliest entry (the first inserted among those due at
    /// its instant): its time, key and value.
    pub fn pop(&mut self) -> Option<(Ns, Option<K>, V)> {
        let Reverse((at, _, i)) = self.heap.pop()?;
        let slot = &mut self.slots[i as usize];
        slot.seq = 0;
        let value = slot.value.take().expect("the heap's top is armed");
        let key = match &slot.key {
            Some(k) => Some(k.clone()),
            None => {
                self.free.push(i);
                None
            }
        };
        self.live -= 1;
        self.trim();
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
    /// a plain ordered map of the live entries. With few keys (each keeps its slot) and
    /// with many (keys without an entry are swept out and their slots reused).
    #[test]
    fn dead_entries_never_come_out_and_never_count() {
        check_against_a_map(8, 1, 5_000);
        check_against_a_map(500, 4, 20_000);
    }

    fn check_against_a_map(nkeys: u64, pops: u64, steps: u64) {
        let mut t: Timers<u16, u64> = Timers::new();
        let mut model: BTreeMap<(Ns, u64), u64> = BTreeMap::new();
        let mut live: BTreeMap<u16, (Ns, u64)> = BTreeMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (key, at) = ((x % nkeys) as u16, (x >> 8) % 50);
            match x % (4 + pops) {
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
            assert_eq!(t.at(&key), live.get(&key).map(|&(at, _)| at), "step {step}");
        }
    }
}
