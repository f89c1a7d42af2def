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

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;

use crate::time::Ns;

/// A key of [`Timers`]. A key may name a small dense index ([`TimerKey::dense`]): such
/// keys are found through a vector instead of an ordered map, which matters for the keys
/// a mechanism re-arms at every decision (a CPU's timer, a task's wake).
pub trait TimerKey: Ord + Clone {
    /// A small index, distinct for distinct keys, or None for a key kept in the ordered
    /// map. The table's vector grows to the largest index used.
    fn dense(&self) -> Option<usize> {
        None
    }

    /// A lane, below [`LANES`], for one of the few keys re-armed at nearly every
    /// decision (a CPU's burst completion): its entry is kept beside the heap, not in it,
    /// so arming and cancelling it move nothing (distinct keys, distinct lanes; a key
    /// with a lane needs no dense index).
    fn lane(&self) -> Option<usize> {
        None
    }
}

/// How many lanes a [`Timers`] has (see [`TimerKey::lane`]).
pub const LANES: usize = 64;

impl TimerKey for Infallible {}
impl TimerKey for &str {}
impl TimerKey for u8 {
    fn dense(&self) -> Option<usize> {
        Some(*self as usize)
    }
}
impl TimerKey for u16 {
    fn dense(&self) -> Option<usize> {
        Some(*self as usize)
    }
    /// Keys 0-3 (so that the table's tests use lanes, dense keys and the B-tree alike).
    fn lane(&self) -> Option<usize> {
        (*self < 4).then_some(*self as usize)
    }
}

/// Entries of type `V` due at times, each optionally under a key `K`. See the module doc.
///
/// The entries live in slots; a 4-ary min-heap of (time, sequence number, slot) triples
/// orders them, and each slot knows where its triple is, so a cancelled entry leaves the
/// heap at once and a re-armed one moves in place: the heap holds the armed entries and
/// nothing else. A key keeps its slot after its entry falls due or is cancelled, so
/// re-arming a key costs one index search and no index insertion or removal (keys left
/// without an entry are swept out when they outnumber the entries); the last few keys
/// looked up are remembered, which spares most searches (a mechanism re-arms the timer
/// that just fell due). This table is the simulator's event queue, its hottest structure
/// (issue 16's profile). Keys with a lane ([`TimerKey::lane`]) keep their entry beside
/// the heap: the earliest entry is the heap's top or the earliest lane's, whichever
/// comes first in (time, sequence number), so the order is the same as if they were in
/// the heap. Keyless entries armed a recurring delay after the last entry taken out (a
/// periodic task's next release, a tick) go to that delay's [`Queue`] instead, where
/// they are already in order; the heap holds only each queue's first entry.
#[derive(Clone, Debug)]
pub struct Timers<K, V> {
    seq: u64,
    heap: Vec<Entry>,
    /// The heap's top was taken out and its place not yet filled: `heap[0]` is stale. The
    /// next fresh entry fills it (one sift down for the pop and the push together: a
    /// mechanism usually arms a timer as it handles the one that fell due, e.g. a
    /// periodic task's next release); any other change fills it with the last entry first.
    hole: bool,
    /// The entry of each lane: (order as in [`Entry`], key, value).
    lanes: Vec<Option<(u128, K, V)>>,
    /// The lane with the earliest entry, if any lane is armed.
    first_lane: Option<usize>,
    /// Lanes armed.
    lanes_armed: usize,
    slots: Vec<Slot<K, V>>,
    /// Slots neither armed nor held by a key.
    free: Vec<u32>,
    /// The slot of each key with a dense index, by index (armed or not; [`NO_SLOT`]: none).
    dense: Vec<u32>,
    /// The slot of each other key (armed or not).
    keys: BTreeMap<K, u32>,
    /// Keys recently looked up, with their slots (round robin from `next_recent`).
    recent: [Option<(K, u32)>; RECENT],
    next_recent: usize,
    /// Entries removed before they fell due (cancelled or replaced).
    dropped: u64,
    /// The delay queues (at most [`QUEUES`]; never removed).
    queues: Vec<Queue<V>>,
    /// Entries in the queues behind their first (which is in the heap).
    queued: usize,
    /// By a hash of its delay ([`delay_hash`]): the delay queue of that delay (its index
    /// plus one; 0: none), and the last entry of that hash armed outside a queue (its
    /// delay and time): see [`Timers::queue_for`].
    by_delay: [(u8, Ns, Ns); DELAYS],
    /// When the last entry taken out was due: the instant delays are measured from.
    last: Ns,
}

/// Keyless entries armed `delay` after the last entry taken out, in order (each is due
/// no earlier than the one before it, and was armed after it): a FIFO, not a heap. An
/// entry that would come before the queue's last goes to the heap instead. The queue's
/// first entry is in the heap under the queue's own slot, so the order of everything that
/// comes out is the same as if every entry were in the heap.
#[derive(Clone, Debug)]
struct Queue<V> {
    delay: Ns,
    slot: u32,
    entries: VecDeque<(u128, V)>,
}

/// How many entries a [`Timers`] holds before a keyless one may go to a delay queue: a
/// heap of fewer is at most three levels deep, and looking for a queue costs more than
/// it saves (the periodic sets of `vassal bench`, 20 timers, 1.4 % more instructions per
/// job when every push looked).
const QUEUE_FROM: usize = 64;

/// How many delay queues a [`Timers`] may have.
const QUEUES: usize = 16;

/// How many hashes of delays a [`Timers`] tells apart (a power of two).
const DELAYS: usize = 64;

/// A delay's place in [`Timers::by_delay`] (Fibonacci hashing: the top bits of its
/// product with 2^64 / φ).
fn delay_hash(delay: Ns) -> usize {
    (delay.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - DELAYS.trailing_zeros())) as usize
}

/// A slot that is not a delay queue's.
const NO_QUEUE: u32 = u32::MAX;

/// How many recently used keys [`Timers`] remembers.
const RECENT: usize = 4;

/// One armed entry in the heap: its order (time, then sequence number, packed so that one
/// integer comparison orders two entries) and its slot.
#[derive(Clone, Copy, Debug)]
struct Entry {
    order: u128,
    slot: u32,
}

impl Entry {
    fn new(at: Ns, seq: u64, slot: u32) -> Entry {
        Entry { order: order(at, seq), slot }
    }

    fn at(&self) -> Ns {
        at_of(self.order)
    }
}

/// (time, sequence number) as one integer in their order.
fn order(at: Ns, seq: u64) -> u128 {
    (at as u128) << 64 | seq as u128
}

fn at_of(order: u128) -> Ns {
    (order >> 64) as Ns
}

/// Children per node of the heap.
const ARITY: usize = 4;

/// A slot not in the heap.
const UNARMED: u32 = u32::MAX;

/// A dense index with no slot.
const NO_SLOT: u32 = u32::MAX;

/// One entry's place: `pos` is its triple's index in the heap while it is armed.
#[derive(Clone, Debug)]
struct Slot<K, V> {
    pos: u32,
    /// The delay queue whose first entry this slot holds, or [`NO_QUEUE`].
    queue: u32,
    key: Option<K>,
    value: Option<V>,
}

impl<K, V> Default for Timers<K, V> {
    fn default() -> Self {
        Timers {
            seq: 0,
            heap: Vec::new(),
            hole: false,
            lanes: Vec::new(),
            first_lane: None,
            lanes_armed: 0,
            slots: Vec::new(),
            free: Vec::new(),
            dense: Vec::new(),
            keys: BTreeMap::new(),
            recent: [const { None }; RECENT],
            next_recent: 0,
            dropped: 0,
            queues: Vec::new(),
            queued: 0,
            by_delay: [(0, Ns::MAX, 0); DELAYS],
            last: 0,
        }
    }
}

impl<K: TimerKey, V> Timers<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The slot of `key`, if it has one, without remembering it.
    fn find(&self, key: &K) -> Option<u32> {
        if let Some(d) = key.dense() {
            return self.dense.get(d).copied().filter(|&i| i != NO_SLOT);
        }
        match self.recent.iter().flatten().find(|(k, _)| k == key) {
            Some(&(_, i)) => Some(i),
            None => self.keys.get(key).copied(),
        }
    }

    /// Remembers that `key` has slot `i` (a sparse key: a dense one is found at once).
    fn remember(&mut self, key: &K, i: u32) {
        if key.dense().is_none() && !self.recent.iter().flatten().any(|&(_, j)| j == i) {
            self.recent[self.next_recent] = Some((key.clone(), i));
            self.next_recent = (self.next_recent + 1) % RECENT;
        }
    }

    /// A slot for a new entry (reusing a free one).
    fn alloc(&mut self, key: Option<K>) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].key = key;
                i
            }
            None => {
                self.slots.push(Slot { pos: UNARMED, queue: NO_QUEUE, key, value: None });
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Puts heap element `e` at `pos` (and tells its slot).
    fn place(&mut self, pos: usize, e: Entry) {
        self.heap[pos] = e;
        self.slots[e.slot as usize].pos = pos as u32;
    }

    /// Restores the heap order around `pos`, whose element may be out of place. The heap
    /// is 4-ary (children of `p`: 4p+1 ..= 4p+4): half the levels of a binary heap, and
    /// a level's children share a cache line.
    fn sift(&mut self, pos: usize) {
        let pos = self.sift_up(pos);
        self.sift_down(pos);
    }

    /// Moves the element at `pos` up while it is earlier than its parent; returns where
    /// it ends (the whole of a sift for an element just pushed at the end).
    #[inline]
    fn sift_up(&mut self, mut pos: usize) -> usize {
        let e = self.heap[pos];
        let start = pos;
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            let p = self.heap[parent];
            if p.order <= e.order {
                break;
            }
            self.place(pos, p);
            pos = parent;
        }
        if pos != start {
            self.place(pos, e);
        }
        pos
    }

    /// Moves the element at `pos` down while a child is earlier (the whole of a sift for
    /// the element that replaced the top).
    fn sift_down(&mut self, mut pos: usize) {
        let e = self.heap[pos];
        let start = pos;
        let len = self.heap.len();
        loop {
            let first = ARITY * pos + 1;
            let Some(child) = self.least_child(first, len) else { break };
            let c = self.heap[child];
            if e.order <= c.order {
                break;
            }
            self.place(pos, c);
            pos = child;
        }
        if pos != start {
            self.place(pos, e);
        }
    }

    /// The index of the earliest of the children `first ..` (at most [`ARITY`]) in a heap
    /// of `len`, if there is one. A node with all its children, the usual case, is
    /// decided by a tournament of selects rather than branches: which child is earliest
    /// is data the branch predictor cannot learn (the profile's hottest function).
    #[inline]
    fn least_child(&self, first: usize, len: usize) -> Option<usize> {
        if first + ARITY <= len {
            let k = &self.heap[first..first + ARITY];
            let a = usize::from(k[1].order < k[0].order);
            let b = 2 + usize::from(k[3].order < k[2].order);
            return Some(first + if k[b].order < k[a].order { b } else { a });
        }
        if first >= len {
            return None;
        }
        let mut child = first;
        for c in first + 1..len {
            if self.heap[c].order < self.heap[child].order {
                child = c;
            }
        }
        Some(child)
    }

    /// Entries in the heap.
    #[inline]
    fn heap_len(&self) -> usize {
        self.heap.len() - usize::from(self.hole)
    }

    /// The heap's earliest entry (with a hole at the top: the earliest of its children).
    #[inline]
    fn top(&self) -> Option<&Entry> {
        if !self.hole {
            return self.heap.first();
        }
        let end = self.heap.len().min(1 + ARITY);
        self.heap[1..end].iter().min_by_key(|e| e.order)
    }

    /// Fills the hole at the top, if there is one, with the last entry.
    #[inline]
    fn fill(&mut self) {
        if self.hole {
            self.hole = false;
            let last = self.heap.pop().expect("a hole is a place in the heap");
            if !self.heap.is_empty() {
                self.place(0, last);
                self.sift_down(0);
            }
        }
    }

    /// Takes the entry at `pos` out of the heap (which has no hole); returns it.
    fn remove_at(&mut self, pos: usize) -> Entry {
        let e = self.heap.swap_remove(pos);
        self.slots[e.slot as usize].pos = UNARMED;
        if pos < self.heap.len() {
            // the last element, now at `pos`, rises or sinks (a cancel: a pop of the top
            // leaves a hole instead, `Timers::hole`)
            self.slots[self.heap[pos].slot as usize].pos = pos as u32;
            self.sift(pos);
        }
        e
    }

    /// Fills slot `i` with an entry due at `at` and queues it (replacing its entry, if
    /// armed: the replaced entry's time is returned).
    fn arm(&mut self, i: u32, at: Ns, value: V) -> Option<Ns> {
        self.seq += 1;
        self.slots[i as usize].value = Some(value);
        self.arm_entry(Entry::new(at, self.seq, i))
    }

    /// Queues heap entry `e` (replacing its slot's entry, if armed: the replaced entry's
    /// time is returned).
    #[inline]
    fn arm_entry(&mut self, e: Entry) -> Option<Ns> {
        let i = e.slot;
        if self.hole && self.slots[i as usize].pos == UNARMED {
            self.hole = false;
            self.place(0, e);
            self.sift_down(0);
            return None;
        }
        self.fill();
        let slot = &mut self.slots[i as usize];
        let pos = slot.pos;
        if pos == UNARMED {
            let end = self.heap.len();
            self.heap.push(e);
            slot.pos = end as u32;
            self.sift_up(end);
            None
        } else {
            let old = self.heap[pos as usize].at();
            self.dropped += 1;
            self.heap[pos as usize] = e;
            self.sift(pos as usize);
            Some(old)
        }
    }

    /// Arms `value` at `at` under `key`, replacing the key's previous entry (whose time
    /// is returned).
    pub fn insert(&mut self, at: Ns, key: K, value: V) -> Option<Ns> {
        if let Some(l) = key.lane() {
            return self.arm_lane(l, at, key, value);
        }
        let i = match self.find(&key) {
            Some(i) => i,
            None => match key.dense() {
                Some(d) => {
                    let i = self.alloc(Some(key.clone()));
                    if d >= self.dense.len() {
                        self.dense.resize(d + 1, NO_SLOT);
                    }
                    self.dense[d] = i;
                    i
                }
                None => {
                    self.sweep();
                    let i = self.alloc(Some(key.clone()));
                    self.keys.insert(key.clone(), i);
                    i
                }
            },
        };
        self.remember(&key, i);
        self.arm(i, at, value)
    }

    /// Arms lane `l` (see [`TimerKey::lane`]).
    fn arm_lane(&mut self, l: usize, at: Ns, key: K, value: V) -> Option<Ns> {
        assert!(l < LANES, "timer lane {l} out of range");
        if l >= self.lanes.len() {
            self.lanes.resize_with(l + 1, || None);
        }
        self.seq += 1;
        let o = order(at, self.seq);
        let old = self.lanes[l].replace((o, key, value)).map(|(o, _, _)| at_of(o));
        match old {
            Some(_) => self.dropped += 1,
            None => self.lanes_armed += 1,
        }
        match self.first_lane {
            Some(f) if f == l => self.find_first_lane(),
            Some(f) if self.lanes[f].as_ref().is_some_and(|e| e.0 < o) => {}
            _ => self.first_lane = Some(l),
        }
        old
    }

    /// Takes lane `l`'s entry out.
    fn take_lane(&mut self, l: usize) -> Option<(u128, K, V)> {
        let e = self.lanes.get_mut(l)?.take()?;
        self.lanes_armed -= 1;
        if self.first_lane == Some(l) {
            self.find_first_lane();
        }
        Some(e)
    }

    fn find_first_lane(&mut self) {
        let mut first: Option<(u128, usize)> = None;
        if self.lanes_armed > 0 {
            for (l, e) in self.lanes.iter().enumerate() {
                if let Some((o, _, _)) = e {
                    if first.is_none_or(|(f, _)| *o < f) {
                        first = Some((*o, l));
                    }
                }
            }
        }
        self.first_lane = first.map(|(_, l)| l);
    }

    /// The order of the earliest lane entry.
    fn first_lane_order(&self) -> Option<u128> {
        self.first_lane.and_then(|l| self.lanes[l].as_ref()).map(|e| e.0)
    }

    /// Queues a keyless one-shot entry at `at`.
    pub fn push(&mut self, at: Ns, value: V) {
        if self.heap.len() + self.queued >= QUEUE_FROM {
            if let Some(q) = self.queue_for(at) {
                return self.enqueue(q, at, value);
            }
        }
        let i = self.alloc(None);
        self.arm(i, at, value);
    }

    /// The delay queue an entry due at `at` may join: the queue of its delay from the last
    /// entry taken out, if its last entry is due no later. A delay gets a queue (if
    /// neither its hash nor all [`QUEUES`] are taken) when an entry of that delay is
    /// still armed outside a queue: two or more would be queued, as when tasks of one
    /// period release their jobs (a lone task's next release is armed as its last falls
    /// due; a queue of one entry would cost more than the heap).
    fn queue_for(&mut self, at: Ns) -> Option<usize> {
        let delay = at.checked_sub(self.last)?;
        let h = delay_hash(delay);
        let (q, seen, seen_at) = self.by_delay[h];
        if q > 0 {
            let queue = &self.queues[q as usize - 1];
            if queue.delay == delay {
                let q_at = queue.entries.back().map_or(0, |&(o, _)| at_of(o));
                return (q_at <= at).then_some(q as usize - 1);
            }
            return None;
        }
        let pending = seen_at > self.last || (seen_at == self.last && delay == 0);
        if seen == delay && pending && self.queues.len() < QUEUES {
            let slot = self.alloc(None);
            self.slots[slot as usize].queue = self.queues.len() as u32;
            self.queues.push(Queue { delay, slot, entries: VecDeque::new() });
            self.by_delay[h].0 = self.queues.len() as u8;
            return Some(self.queues.len() - 1);
        }
        self.by_delay[h] = (0, delay, at);
        None
    }

    /// Appends an entry due at `at` to queue `q` (whose last entry is due no later); an
    /// empty queue's first entry enters the heap.
    fn enqueue(&mut self, q: usize, at: Ns, value: V) {
        self.seq += 1;
        let o = order(at, self.seq);
        let queue = &mut self.queues[q];
        queue.entries.push_back((o, value));
        if queue.entries.len() > 1 {
            self.queued += 1;
        } else {
            let slot = queue.slot;
            self.arm_entry(Entry { order: o, slot });
        }
    }

    /// Removes the entry under `key`, if one is armed; returns its time.
    pub fn cancel(&mut self, key: &K) -> Option<Ns> {
        if let Some(l) = key.lane() {
            let (o, _, _) = self.take_lane(l)?;
            self.dropped += 1;
            return Some(at_of(o));
        }
        let i = self.find(key)?;
        self.remember(key, i);
        if self.slots[i as usize].pos == UNARMED {
            return None;
        }
        self.fill();
        let pos = self.slots[i as usize].pos;
        let at = self.remove_at(pos as usize).at();
        self.slots[i as usize].value = None;
        self.dropped += 1;
        Some(at)
    }

    /// Forgets the sparse keys that hold no entry once they outnumber the entries
    /// (amortised: each sweep frees at least as many keys as are armed). Dense keys keep
    /// their slots: there are at most as many as the largest index.
    fn sweep(&mut self) {
        if self.keys.len() < 2 * self.heap_len() + 64 {
            return;
        }
        self.recent = [const { None }; RECENT];
        let (slots, free) = (&self.slots, &mut self.free);
        self.keys.retain(|_, &mut i| {
            let armed = slots[i as usize].pos != UNARMED;
            if !armed {
                free.push(i);
            }
            armed
        });
    }

    /// When the entry under `key` is due, if one is armed.
    pub fn at(&self, key: &K) -> Option<Ns> {
        if let Some(l) = key.lane() {
            return self.lanes.get(l)?.as_ref().map(|e| at_of(e.0));
        }
        let pos = self.slots[self.find(key)? as usize].pos;
        (pos != UNARMED).then(|| self.heap[pos as usize].at())
    }

    /// The order of the earliest entry, and whether it is a lane's (else the heap's top).
    #[inline]
    fn earliest(&self) -> Option<(u128, bool)> {
        match (self.top(), self.first_lane_order()) {
            (Some(e), Some(o)) if o < e.order => Some((o, true)),
            (Some(e), _) => Some((e.order, false)),
            (None, o) => o.map(|o| (o, true)),
        }
    }

    /// When the earliest entry of a lane is due, if a lane is armed.
    #[inline]
    pub fn next_lane_deadline(&self) -> Option<Ns> {
        self.first_lane_order().map(at_of)
    }

    /// When the earliest entry is due.
    pub fn next_deadline(&self) -> Option<Ns> {
        self.earliest().map(|(o, _)| at_of(o))
    }

    /// Removes and returns the earliest entry (the first inserted among those due at
    /// its instant): its time, key and value.
    pub fn pop(&mut self) -> Option<(Ns, Option<K>, V)> {
        let (_, lane) = self.earliest()?;
        self.take_earliest(lane)
    }

    /// [`Timers::pop`], if the earliest entry is due by `now`. Inline: most calls find
    /// nothing due (the last look of each instant).
    #[inline]
    pub fn pop_due(&mut self, now: Ns) -> Option<(Ns, Option<K>, V)> {
        match self.earliest()? {
            (o, _) if at_of(o) > now => None,
            (_, lane) => self.take_earliest(lane),
        }
    }

    /// Takes the earliest entry out: the first lane's (`lane`) or the heap's top.
    #[inline(never)]
    fn take_earliest(&mut self, lane: bool) -> Option<(Ns, Option<K>, V)> {
        if lane {
            let (o, key, value) = self.take_lane(self.first_lane?)?;
            self.last = at_of(o);
            return Some((at_of(o), Some(key), value));
        }
        // The top leaves a hole (see `hole`), filled by the next entry armed.
        self.fill();
        let e = *self.heap.first()?;
        self.last = e.at();
        let q = self.slots[e.slot as usize].queue;
        if q != NO_QUEUE {
            return Some(self.take_queued(q as usize, e));
        }
        self.hole = true;
        self.slots[e.slot as usize].pos = UNARMED;
        let (at, i) = (e.at(), e.slot);
        let slot = &mut self.slots[i as usize];
        let value = slot.value.take().expect("an armed slot holds its value");
        let key = slot.key.clone();
        match &key {
            Some(k) => self.remember(k, i),
            None => self.free.push(i),
        }
        Some((at, key, value))
    }

    /// Takes queue `q`'s first entry out (`e`, the heap's top): the queue's next entry
    /// takes its place in the heap, or the queue leaves a hole.
    fn take_queued(&mut self, q: usize, e: Entry) -> (Ns, Option<K>, V) {
        let queue = &mut self.queues[q];
        let (_, value) = queue.entries.pop_front().expect("a queue in the heap has an entry");
        match queue.entries.front() {
            Some(&(next, _)) => {
                self.queued -= 1;
                self.heap[0].order = next;
                self.sift_down(0);
            }
            None => {
                self.hole = true;
                self.slots[e.slot as usize].pos = UNARMED;
            }
        }
        (e.at(), None, value)
    }

    /// Entries armed.
    pub fn len(&self) -> usize {
        self.heap_len() + self.lanes_armed + self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// The place a pop leaves at the top is filled by the next fresh entry, early or late,
    /// or by the last entry before anything else looks at or changes the heap.
    #[test]
    fn the_top_a_pop_leaves_is_filled_by_the_next_entry_or_the_last() {
        let mut t: Timers<&'static str, u32> = Timers::new();
        for (k, at) in [("a", 10), ("b", 20), ("c", 30), ("d", 40), ("e", 50), ("f", 60)] {
            t.insert(at, k, at as u32);
        }
        assert_eq!(t.pop(), Some((10, Some("a"), 10)));
        // looked at with the hole: the earliest of the rest
        assert_eq!((t.len(), t.next_deadline(), t.at(&"b")), (5, Some(20), Some(20)));
        t.push(15, 15); // earlier than every entry left: stays on top
        assert_eq!(t.pop(), Some((15, None, 15)));
        t.push(100, 100); // later than every one: sinks
        assert_eq!(t.pop(), Some((20, Some("b"), 20)));
        assert_eq!(t.cancel(&"d"), Some(40)); // a cancel fills the hole first
        assert_eq!(t.pop(), Some((30, Some("c"), 30)));
        assert_eq!(t.insert(5, "f", 5), Some(60)); // a re-armed key fills it first too
        assert_eq!(drain(&mut t), vec![(5, 5), (50, 50), (100, 100)]);
        assert_eq!(t.pop(), None);
        t.push(1, 1); // the hole of the last entry: the heap is empty
        assert_eq!((t.len(), drain(&mut t)), (1, vec![(1, 1)]));
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

    /// Periodic releases as the simulator arms them (each popped release arms the next,
    /// one period later: tasks of a period share a delay queue), mixed with keyed entries,
    /// cancels and keyless entries at random times, some in the past: what comes out, and
    /// when, is what a plain ordered map gives, and the queues are used.
    #[test]
    fn delay_queues_keep_the_order_of_one_heap() {
        let mut t: Timers<u16, u64> = Timers::new();
        let mut model: BTreeMap<(Ns, u64), u64> = BTreeMap::new();
        let mut live: BTreeMap<u16, (Ns, u64)> = BTreeMap::new();
        let period = |task: u64| 10 + 10 * (task % 5);
        const TASKS: u64 = 80; // with the keys, more than `QUEUE_FROM` entries
        for task in 0..TASKS {
            t.push(task % 3, task);
            model.insert((task % 3, t.seq), task);
        }
        let (mut x, mut most_queued) = (0x9e37_79b9_7f4a_7c15u64, 0);
        for step in 0..50_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let now = t.last;
            let (key, at) = (5 + (x % 20) as u16, now + (x >> 8) % 60);
            match x % 16 {
                0 => {
                    if let Some(old) = live.remove(&key) {
                        model.remove(&old);
                    }
                    t.insert(at, key, TASKS + step);
                    live.insert(key, (at, t.seq));
                    model.insert((at, t.seq), TASKS + step);
                }
                1 => {
                    if let Some(old) = live.remove(&key) {
                        model.remove(&old);
                    }
                    t.cancel(&key);
                }
                2 => {
                    let at = at.saturating_sub(30);
                    t.push(at, TASKS + step);
                    model.insert((at, t.seq), TASKS + step);
                }
                _ => {
                    let got = t.pop();
                    let want = model.pop_first();
                    assert_eq!(got.as_ref().map(|(at, _, v)| (*at, *v)), want.map(|((at, _), v)| (at, v)), "step {step}");
                    match got {
                        Some((at, None, task)) if task < TASKS => {
                            t.push(at + period(task), task);
                            model.insert((at + period(task), t.seq), task);
                        }
                        Some((_, Some(k), _)) => _ = live.remove(&k),
                        _ => {}
                    }
                }
            }
            most_queued = most_queued.max(t.queued);
            assert_eq!(t.len(), model.len(), "step {step}");
            assert_eq!(t.next_deadline(), model.first_key_value().map(|(&(at, _), _)| at), "step {step}");
        }
        assert!(t.queues.len() >= 5 && most_queued >= TASKS as usize / 2, "{} queues, {most_queued} queued", t.queues.len());
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
            let lanes = live.iter().filter(|(k, _)| k.lane().is_some()).map(|(_, &(at, _))| at).min();
            assert_eq!(t.next_lane_deadline(), lanes, "step {step}");
        }
    }
}
