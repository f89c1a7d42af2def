//! The swap scheduler of a swapping UNIX (paper 004 §2–§4.3): the kernel process that
//! moves whole process images between main memory ([`crate::memory`]) and the swap area.
//!
//! Process states (§2): a task is *ready* (runnable, running included), *sleeping*
//! (blocked for a short I/O: a script's `sleep`, every block but a terminal wait) or
//! *waiting* (blocked for a long one: a script's `terminal` phase). Its image is *loaded*
//! or *swapped out*; only the swap scheduler swaps an image in (§2).
//!
//! The swap scheduler's loop (V7 `sched()`, which §3 describes):
//! 1. the swap-in decision picks a ready, swapped-out task; none: sleep until one appears
//!    (V7 `runout`).
//! 2. if holes large enough exist (placement, [`crate::memory`]) — for its image and, if
//!    its shared text is not in memory, for the text too (V7 `swapin()`: the image
//!    first, then the text) — swap it in: the memory is taken at once, the image is
//!    loaded when the transfers end.
//! 3. else the swap-out decision picks loaded images to write out; each is not
//!    dispatchable from the moment it is chosen, and its memory is freed when its write
//!    ends. Then go to 1.
//! 4. nothing to swap out: sleep until the next second or until memory is freed (V7
//!    `runin`, woken by the clock once a second and by `mfree`).
//!
//! Shared text (V7 text.c): tasks running the same program share one read-only text
//! segment, placed in memory apart from their images. It is in memory while any of its
//! users is (`x_ccount`); when the last of them is swapped out it is freed, written to
//! the swap area first if it never was (`xccdec`: XWRIT), and it is read back with the
//! first user swapped in again. It goes when its last user exits (`xfree`).
//!
//! Growth (V7 `expand()`, [`Swapper::grow`]): a shrinking image frees its tail; a growing
//! one needs a hole of its whole new size; if there is none it swaps itself out — the
//! paper's "voluntary swapouts" (§2) — writing its old image, and the swap scheduler
//! brings it back in at the new size.
//!
//! Swap-in decisions (§3, §4.2):
//! - `standard`: the ready swapped-out task that has been swapped out longest (§3: "the
//!   ready, swapped-out process which has been in the swap area for the longest time").
//! - `priority`: the first swapped-out task in the CPU scheduler's ready order (§4.2: "the
//!   first swapped-out process in the CPU scheduler's ready process list"), from
//!   [`vassal_core::Policy::swap_advice`]. A policy that gives no order gets `standard`.
//!
//! Swap-out decisions (§3, §4.3). Never eligible: an image in transfer, a task at a
//! real-time level (§4.1: "never swapped out by the swap scheduler", told by
//! `swap_advice`), a task not yet started or exited. A ready or sleeping task must also
//! have been loaded at least `min_resident` (§3: 2 s, "to prevent excessive swapping";
//! §2: the eligibility rules are "essentially the same in the standard and modified
//! schedulers", so MOUSE's second pass applies it too). Waiting tasks are always eligible.
//! - `standard`: the largest eligible waiting image (§3); else the eligible ready or
//!   sleeping task loaded longest; one image per decision.
//! - `mouse` (§4.3): scan the memory map from low addresses for the first run of adjacent
//!   areas, each a hole or a swappable image, whose sizes add up to what the incoming
//!   task needs (its image, and its text if that is not in memory); swap out every image
//!   in it. First pass: only waiting images are swappable; second pass: waiting, sleeping
//!   and ready ones. No such run: swap nothing. A shared text's area is neither a process
//!   image nor unused (§4.3: each used entry points to "the process image occupying the
//!   area"), so no run crosses it.
//!
//! The swap device (V7's one swap buffer `swbuf`) does one transfer at a time, first come
//! first served: the swap scheduler's, and those of processes that swap themselves out
//! to grow. Ties are broken by the lower task index. All times are integer ns; a transfer
//! takes `seek + size × transfer` (per KB), a text's a transfer of its own.

use std::collections::VecDeque;

use vassal_core::Ns;

use crate::memory::{MemoryMap, Owner, Placement};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapIn {
    Standard,
    Priority,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwapOut {
    Standard,
    Mouse,
}

/// The `[memory]` section of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Main memory for process images, KB.
    pub size_kb: u64,
    pub placement: Placement,
    /// Seek and rotational delay of one swap transfer.
    pub seek: Ns,
    /// Transfer time per KB.
    pub transfer_per_kb: Ns,
    /// CPU time of one activation of the swap scheduler (charged as overhead).
    pub swap_cpu: Ns,
    /// §3's minimum residence of a ready or sleeping task before it may be swapped out.
    pub min_resident: Ns,
    pub swap_in: SwapIn,
    pub swap_out: SwapOut,
    /// CPU time to examine one entry of the structure a decision searches: a process
    /// table entry (the standard strategies, §6: "linear searches through the entire
    /// process table"), a ready-list entry (priority swap-in) or a memory-map entry
    /// (MOUSE: "much smaller data structures").
    pub scan_entry: Ns,
    /// The process table's size (V7 `NPROC`): what the standard strategies search.
    pub nproc: u64,
    /// The fraction of CPU time (ppm) lost while a swap transfer moves data: the drive's
    /// DMA steals bus cycles from the CPU.
    pub dma_steal_ppm: u64,
    /// A ready or sleeping image is swapped out for an incoming one only if that one has
    /// been out this long (V7 `sched()`: "the swapped-out process has spent at least 3
    /// seconds out"); 0: no such rule.
    pub min_swapped_out: Ns,
    /// A swapped-out task that becomes ready as the CPU scheduler's best ready task wakes
    /// the swap scheduler at once even while it waits for a victim (`runin`); V7 wakes it
    /// only from `runout`.
    pub wake_on_ready: bool,
    /// CPU time to copy one KB of an image in memory (V7 `expand()`'s `copyseg` loop when
    /// a growing image moves to a larger hole), charged to the growing task's CPU.
    pub copy_per_kb: Ns,
}

impl MemoryConfig {
    /// The time one image of `size` KB takes to move.
    pub fn transfer(&self, size: u64) -> Ns {
        self.seek.saturating_add(self.transfer_per_kb.saturating_mul(size))
    }

    /// The CPU time the DMA of a `size` KB transfer steals (its data phase, not its seek).
    pub fn steal(&self, size: u64) -> Ns {
        (self.transfer_per_kb.saturating_mul(size) as u128 * self.dma_steal_ppm as u128 / 1_000_000) as Ns
    }
}

/// A task's state as the swap scheduler sees it (§2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcState {
    NotStarted,
    Ready,
    /// Blocked for a short I/O.
    Sleeping,
    /// Blocked for a long one (terminal).
    Waiting,
    Exited,
}

/// One task's image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Image {
    /// V7 `p_size`: u-area, data and stack, KB.
    pub size: u64,
    pub loaded: bool,
    /// When it was last loaded (loaded) or chosen for swap-out / created out (swapped out).
    pub since: Ns,
    pub state: ProcState,
    /// Being swapped in or out.
    pub moving: bool,
    pub swap_ins: u64,
    pub swap_outs: u64,
    /// Its shared text segment, by index.
    pub text: Option<usize>,
    /// Counted among its text's users in memory (loaded or on its way in: V7 `x_ccount`).
    pub holds_text: bool,
}

impl Image {
    pub fn new(size: u64) -> Self {
        Image {
            size,
            loaded: false,
            since: 0,
            state: ProcState::NotStarted,
            moving: false,
            swap_ins: 0,
            swap_outs: 0,
            text: None,
            holds_text: false,
        }
    }
    fn alive(&self) -> bool {
        !matches!(self.state, ProcState::NotStarted | ProcState::Exited)
    }
    /// Ready and swapped out (and not on its way in or out).
    pub fn wants_in(&self) -> bool {
        self.state == ProcState::Ready && !self.loaded && !self.moving
    }
}

/// A shared text segment (V7 `struct text`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Text {
    pub size: u64,
    /// Users alive (V7 `x_count`).
    pub count: u64,
    /// Users in memory or on their way in (V7 `x_ccount`); the text is in memory while
    /// this is above 0 (and until the write of its last user ends).
    pub ccount: u64,
    /// A copy is in the swap area (V7: XWRIT cleared by its first write).
    pub on_swap: bool,
}

/// The standard swap-in choice: the ready swapped-out task out longest.
pub fn swap_in_standard(imgs: &[Image]) -> Option<usize> {
    imgs.iter().enumerate().filter(|(_, m)| m.wants_in()).min_by_key(|(i, m)| (m.since, *i)).map(|(i, _)| i)
}

/// The priority swap-in choice: the first ready swapped-out task in `order` (the CPU
/// scheduler's ready order, best first).
pub fn swap_in_priority(imgs: &[Image], order: &[usize]) -> Option<usize> {
    order.iter().copied().find(|&i| imgs.get(i).is_some_and(|m| m.wants_in()))
}

/// Whether a loaded image may be swapped out now; `waiting_only`: MOUSE's first pass.
/// `min_resident` is 0 when the incoming image has not been out `min_swapped_out` (V7:
/// then only waiting images go); callers pass `Ns::MAX` for that.
fn eligible(m: &Image, i: usize, now: Ns, min_resident: Ns, pinned: &[usize], waiting_only: bool) -> bool {
    if !m.loaded || m.moving || !m.alive() || pinned.contains(&i) {
        return false;
    }
    match m.state {
        ProcState::Waiting => true,
        ProcState::Ready | ProcState::Sleeping => !waiting_only && now.saturating_sub(m.since) >= min_resident,
        _ => false,
    }
}

/// The standard swap-out choice (§3): the largest eligible waiting image; else the
/// eligible ready or sleeping task loaded longest.
pub fn swap_out_standard(imgs: &[Image], now: Ns, min_resident: Ns, pinned: &[usize]) -> Option<usize> {
    let waiting = imgs
        .iter()
        .enumerate()
        .filter(|(i, m)| m.state == ProcState::Waiting && eligible(m, *i, now, min_resident, pinned, true))
        // largest first; the lower index on ties
        .min_by_key(|(i, m)| (std::cmp::Reverse(m.size), *i))
        .map(|(i, _)| i);
    waiting.or_else(|| {
        imgs.iter()
            .enumerate()
            .filter(|(i, m)| m.state != ProcState::Waiting && eligible(m, *i, now, min_resident, pinned, false))
            .min_by_key(|(i, m)| (m.since, *i))
            .map(|(i, _)| i)
    })
}

/// MOUSE (§4.3): the images of the first adjacent cluster of swappable images and holes
/// of at least `need` KB, scanning the map from low addresses; first pass waiting images
/// only, second pass all eligible ones. A text segment's area ends a cluster. None: no
/// cluster fits (swap nothing).
pub fn swap_out_mouse(map: &MemoryMap, imgs: &[Image], need: u64, now: Ns, min_resident: Ns, pinned: &[usize]) -> Option<Vec<usize>> {
    for waiting_only in [true, false] {
        let swappable = |owner: Option<Owner>| match owner {
            None => true,
            Some(Owner::Task(i)) => imgs.get(i).is_some_and(|m| eligible(m, i, now, min_resident, pinned, waiting_only)),
            Some(Owner::Text(_)) => false,
        };
        let areas = map.areas();
        for start in 0..areas.len() {
            let mut total = 0;
            for end in start..areas.len() {
                if !swappable(areas[end].owner) {
                    break;
                }
                total += areas[end].size;
                if total >= need {
                    return Some(
                        areas[start..=end]
                            .iter()
                            .filter_map(|b| match b.owner {
                                Some(Owner::Task(i)) => Some(i),
                                _ => None,
                            })
                            .collect(),
                    );
                }
            }
        }
    }
    None
}

/// What the swap scheduler is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Asleep: no ready task is swapped out (V7 `runout`).
    Runout,
    /// Asleep: a task is to come in but nothing can go out yet (V7 `runin`): retried at
    /// the next second or when memory is freed.
    Runin,
    /// Waiting for its transfers on the swap device to end.
    Busy,
}

/// What one step of the swap scheduler did, for the engine to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Swapping `task` in; it is loaded (dispatchable) when its transfer ends.
    In { task: usize },
    /// Swapping these images out, one after another: none is dispatchable from now on.
    Out { tasks: Vec<usize> },
    /// Went to sleep.
    Sleep(Activity),
}

/// Whose transfer it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XferKind {
    /// The swap scheduler swaps a task in.
    In,
    /// The swap scheduler swaps a task out.
    Out,
    /// A task swaps itself out to grow (V7 `expand()` → `xswap`).
    Grow,
}

/// One transfer on the swap device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Xfer {
    task: usize,
    kind: XferKind,
    ns: Ns,
    steal: Ns,
    /// A text whose memory is freed when this write ends (its last user in memory went).
    text_free: Option<usize>,
}

/// A finished transfer: its task and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub task: usize,
    pub kind: XferKind,
}

/// What [`Swapper::grow`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// The image kept its place (shrunk, or the same size); memory may have been freed.
    InPlace,
    /// The image moved to a larger hole; `copied` KB were copied.
    Moved { copied: u64 },
    /// No hole took it: it swaps itself out (a transfer on the swap device).
    Swapped,
    /// Refused: the task is not loaded, or the new size is 0 or above the memory.
    Refused,
}

/// The swap scheduler, its memory map, every task's image and every shared text.
#[derive(Clone, Debug)]
pub struct Swapper {
    pub cfg: MemoryConfig,
    pub map: MemoryMap,
    pub imgs: Vec<Image>,
    pub texts: Vec<Text>,
    activity: Activity,
    /// The transfer under way and when it ends.
    current: Option<(Xfer, Ns)>,
    /// Transfers queued behind it.
    queue: VecDeque<Xfer>,
    pub swap_ins: u64,
    pub swap_outs: u64,
    /// Of the swap-outs, those of tasks growing (V7 `expand()`).
    pub growth_swaps: u64,
    /// Entries the last run's decisions examined (for its CPU cost).
    pub scanned: u64,
    /// CPU time stolen by transfers started since the engine last took it.
    stolen: Ns,
}

impl Swapper {
    /// `sizes`: each task's image in KB; no shared texts.
    pub fn new(cfg: MemoryConfig, sizes: &[u64]) -> Self {
        Swapper::with_texts(cfg, sizes, &[], &[])
    }

    /// `sizes`: each task's image in KB; `text_of`: each task's text (an index into
    /// `texts`, their sizes in KB), or none for tasks past its end.
    pub fn with_texts(cfg: MemoryConfig, sizes: &[u64], text_of: &[Option<usize>], texts: &[u64]) -> Self {
        let imgs = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| Image { text: text_of.get(i).copied().flatten().filter(|&k| k < texts.len()), ..Image::new(s) })
            .collect();
        Swapper {
            map: MemoryMap::new(cfg.size_kb, cfg.placement),
            imgs,
            texts: texts.iter().map(|&size| Text { size, count: 0, ccount: 0, on_swap: false }).collect(),
            cfg,
            activity: Activity::Runout,
            current: None,
            queue: VecDeque::new(),
            swap_ins: 0,
            swap_outs: 0,
            growth_swaps: 0,
            scanned: 0,
            stolen: 0,
        }
    }

    /// The CPU time stolen by the transfers started since the last call.
    pub fn take_stolen(&mut self) -> Ns {
        std::mem::take(&mut self.stolen)
    }

    pub fn activity(&self) -> Activity {
        self.activity
    }

    pub fn loaded(&self, i: usize) -> bool {
        self.imgs.get(i).is_some_and(|m| m.loaded)
    }

    /// A ready task is swapped out (the CPU idles for want of it if nothing else runs).
    pub fn any_ready_out(&self) -> bool {
        self.imgs.iter().any(|m| m.state == ProcState::Ready && !m.loaded)
    }

    /// Tasks loaded now (alive).
    pub fn resident(&self) -> u64 {
        self.imgs.iter().filter(|m| m.loaded && m.alive()).count() as u64
    }

    /// When the transfer under way on the swap device ends.
    pub fn device_end(&self) -> Option<Ns> {
        self.current.map(|(_, end)| end)
    }

    /// Whether any of the swap scheduler's own transfers is under way or queued.
    fn own_transfers(&self) -> bool {
        self.current.iter().map(|(x, _)| x).chain(self.queue.iter()).any(|x| x.kind != XferKind::Grow)
    }

    fn text_in_memory(&self, k: usize) -> bool {
        self.map.find(Owner::Text(k)).is_some()
    }

    /// Task `i` starts: its image is created in memory if holes take it and its text (if
    /// that is not in memory), else it starts swapped out (V7 `newproc` and `exec`,
    /// without the cost of writing the copy or reading the program). Returns whether it
    /// is loaded.
    pub fn start(&mut self, i: usize, now: Ns) -> bool {
        let size = self.imgs[i].size;
        let mut loaded = self.map.alloc(Owner::Task(i), size).is_some();
        if let Some(k) = self.imgs[i].text {
            self.texts[k].count += 1;
            if loaded && !self.text_in_memory(k) && self.map.alloc(Owner::Text(k), self.texts[k].size).is_none() {
                self.map.release(Owner::Task(i));
                loaded = false;
            }
            if loaded {
                self.texts[k].ccount += 1;
            }
        }
        let m = &mut self.imgs[i];
        m.loaded = loaded;
        m.holds_text = loaded && m.text.is_some();
        m.since = now;
        m.state = ProcState::Ready;
        loaded
    }

    /// Task `i` changed state (ready / sleeping / waiting).
    pub fn set_state(&mut self, i: usize, st: ProcState) {
        if let Some(m) = self.imgs.get_mut(i) {
            if m.alive() {
                m.state = st;
            }
        }
    }

    /// Task `i` leaves memory (or gives up its way in): its text loses a user in memory
    /// (V7 `xccdec`). If that was the last, the text goes with it: the time and stolen
    /// CPU of writing it first if it never was, and the text to free when the write ends.
    fn leave_text(&mut self, i: usize) -> (Ns, Ns, Option<usize>) {
        let m = &mut self.imgs[i];
        let Some(k) = m.text.filter(|_| m.holds_text) else { return (0, 0, None) };
        m.holds_text = false;
        let x = &mut self.texts[k];
        x.ccount -= 1;
        if x.ccount > 0 {
            return (0, 0, None);
        }
        let write = !x.on_swap;
        x.on_swap = true;
        let size = x.size;
        if write {
            (self.cfg.transfer(size), self.cfg.steal(size), Some(k))
        } else {
            (0, 0, Some(k))
        }
    }

    /// Frees text `k`'s memory if no user in memory needs it.
    fn free_text(&mut self, k: usize) {
        if self.texts[k].ccount == 0 {
            self.map.release(Owner::Text(k));
        }
    }

    /// Queues a transfer; starts it if the device is idle.
    fn enqueue(&mut self, now: Ns, x: Xfer) {
        self.queue.push_back(x);
        if self.current.is_none() {
            self.start_next(now);
        }
    }

    fn start_next(&mut self, now: Ns) {
        if let Some(x) = self.queue.pop_front() {
            self.stolen = self.stolen.saturating_add(x.steal);
            self.current = Some((x, now.saturating_add(x.ns)));
        }
    }

    /// A swap-out of task `i`'s image (chosen by the swap scheduler, or growing).
    fn write_out(&mut self, now: Ns, i: usize, kind: XferKind, size: u64) {
        let (text_ns, text_steal, text_free) = self.leave_text(i);
        let m = &mut self.imgs[i];
        m.loaded = false;
        m.moving = true;
        m.since = now;
        let x = Xfer {
            task: i,
            kind,
            ns: self.cfg.transfer(size).saturating_add(text_ns),
            steal: self.cfg.steal(size).saturating_add(text_steal),
            text_free,
        };
        self.enqueue(now, x);
    }

    /// Task `i` exited; its memory is freed (an image being written out is freed when
    /// its write ends; one queued to be written is not written; one on its way in is
    /// freed when its read ends). Its text loses a user, and goes with its last (V7
    /// `xfree`; a text left with users none of which is in memory is kept in the swap
    /// area, its write not costed). True if that freed any memory.
    pub fn exit(&mut self, i: usize) -> bool {
        self.imgs[i].state = ProcState::Exited;
        let mut freed = false;
        if let Some(k) = self.imgs[i].text {
            if self.imgs[i].holds_text {
                self.imgs[i].holds_text = false;
                self.texts[k].ccount -= 1;
            }
            let x = &mut self.texts[k];
            x.count = x.count.saturating_sub(1);
            if x.ccount == 0 {
                // V7 xccdec/xfree: written if it never was (costless here), or gone.
                x.on_swap = x.count > 0;
                freed |= self.map.release(Owner::Text(k));
            }
        }
        if self.current.is_some_and(|(x, _)| x.task == i) {
            return freed;
        }
        let before = self.queue.len();
        self.queue.retain(|x| x.task != i);
        let dequeued = self.queue.len() != before;
        let m = &mut self.imgs[i];
        m.moving = false;
        m.loaded = false;
        freed |= self.map.release(Owner::Task(i));
        if dequeued && !self.own_transfers() && self.activity == Activity::Busy {
            self.activity = Activity::Runout;
        }
        freed
    }

    /// Whether a freed hole should wake the sleeping swap scheduler (V7 `mfree` wakes
    /// `runin`).
    pub fn wake_on_free(&self) -> bool {
        self.activity == Activity::Runin
    }

    /// What task `i` needs to come in: its image, and its text if that is not in memory.
    fn need(&self, i: usize) -> (u64, Option<usize>) {
        let m = &self.imgs[i];
        let text = m.text.filter(|&k| !self.text_in_memory(k));
        (m.size, text)
    }

    /// One pass of the loop: a decision, given the CPU scheduler's ready order (task
    /// indices, best first; None: it gives none) and the tasks that must stay resident.
    pub fn run(&mut self, now: Ns, order: Option<&[usize]>, pinned: &[usize]) -> Step {
        if self.activity == Activity::Busy {
            return Step::Sleep(Activity::Busy); // its transfers are under way
        }
        let nproc = self.cfg.nproc.max(self.imgs.len() as u64);
        let (choice, scanned) = match (self.cfg.swap_in, order) {
            (SwapIn::Priority, Some(o)) => {
                // The ready list, up to the first swapped-out task (§6).
                let c = swap_in_priority(&self.imgs, o);
                let seen = c.and_then(|c| o.iter().position(|&t| t == c)).map_or(o.len(), |k| k + 1) as u64;
                match c {
                    Some(c) => (Some(c), seen),
                    None => (swap_in_standard(&self.imgs), seen + nproc),
                }
            }
            // A linear search through the whole process table (§3).
            _ => (swap_in_standard(&self.imgs), nproc),
        };
        self.scanned = scanned;
        let Some(i) = choice else {
            self.activity = Activity::Runout;
            return Step::Sleep(Activity::Runout);
        };
        let (size, text) = self.need(i);
        if self.swap_in(now, i, size, text) {
            return Step::In { task: i };
        }
        // V7: a ready or sleeping image goes only for one that has been out long enough.
        let min_resident = if now.saturating_sub(self.imgs[i].since) >= self.cfg.min_swapped_out { self.cfg.min_resident } else { Ns::MAX };
        let victims = match self.cfg.swap_out {
            SwapOut::Standard => {
                self.scanned += nproc;
                swap_out_standard(&self.imgs, now, min_resident, pinned).map(|v| vec![v])
            }
            SwapOut::Mouse => {
                // One or two passes over the memory map.
                self.scanned += 2 * self.map.areas().len() as u64;
                let need = size + text.map_or(0, |k| self.texts[k].size);
                swap_out_mouse(&self.map, &self.imgs, need, now, min_resident, pinned)
            }
        };
        match victims {
            Some(v) if !v.is_empty() => {
                for &t in &v {
                    let size = self.imgs[t].size;
                    self.write_out(now, t, XferKind::Out, size);
                }
                self.activity = Activity::Busy;
                Step::Out { tasks: v }
            }
            _ => {
                self.activity = Activity::Runin;
                Step::Sleep(Activity::Runin)
            }
        }
    }

    /// V7 `swapin()`: memory for the image, then for the text if it is not in memory
    /// (else give the image's back); the reads are queued. False: no room.
    fn swap_in(&mut self, now: Ns, i: usize, size: u64, text: Option<usize>) -> bool {
        if self.map.alloc(Owner::Task(i), size).is_none() {
            return false;
        }
        let (mut ns, mut steal) = (self.cfg.transfer(size), self.cfg.steal(size));
        if let Some(k) = text {
            if self.map.alloc(Owner::Text(k), self.texts[k].size).is_none() {
                self.map.release(Owner::Task(i));
                return false;
            }
            ns = ns.saturating_add(self.cfg.transfer(self.texts[k].size));
            steal = steal.saturating_add(self.cfg.steal(self.texts[k].size));
        }
        let m = &mut self.imgs[i];
        if let Some(k) = m.text {
            m.holds_text = true;
            self.texts[k].ccount += 1;
        }
        self.imgs[i].moving = true;
        self.activity = Activity::Busy;
        self.enqueue(now, Xfer { task: i, kind: XferKind::In, ns, steal, text_free: None });
        true
    }

    /// V7 `expand()`: loaded task `i`'s image changes to `size` KB (u-area included).
    /// Shrinking frees its tail; growing takes a hole of the whole new size and copies the
    /// image there; with no such hole the task swaps itself out — its old image is
    /// written — and comes back in at the new size (`xswap(p, 1, n)`).
    pub fn grow(&mut self, now: Ns, i: usize, size: u64) -> Growth {
        let m = self.imgs[i];
        if !m.loaded || m.moving || !m.alive() || size == 0 || size > self.cfg.size_kb {
            return Growth::Refused;
        }
        if size <= m.size {
            self.map.shrink(Owner::Task(i), size);
            self.imgs[i].size = size;
            return Growth::InPlace;
        }
        if self.map.realloc(Owner::Task(i), size).is_some() {
            self.imgs[i].size = size;
            return Growth::Moved { copied: m.size };
        }
        self.imgs[i].size = size;
        self.write_out(now, i, XferKind::Grow, m.size);
        Growth::Swapped
    }

    /// The transfer under way ended (at `now`); the next queued one starts.
    pub fn finish(&mut self, now: Ns) -> Option<Done> {
        let (x, _) = self.current.take()?;
        let t = x.task;
        let m = &mut self.imgs[t];
        m.moving = false;
        match x.kind {
            XferKind::In if m.state == ProcState::Exited => {
                self.map.release(Owner::Task(t));
            }
            XferKind::In => {
                m.loaded = true;
                m.since = now;
                m.swap_ins += 1;
                self.swap_ins += 1;
            }
            XferKind::Out | XferKind::Grow => {
                m.swap_outs += 1;
                self.swap_outs += 1;
                if x.kind == XferKind::Grow {
                    self.growth_swaps += 1;
                }
                self.map.release(Owner::Task(t));
                if let Some(k) = x.text_free {
                    self.free_text(k);
                }
            }
        }
        self.start_next(now);
        if x.kind != XferKind::Grow && !self.own_transfers() {
            self.activity = Activity::Runout; // awake: the engine runs its loop
        }
        Some(Done { task: t, kind: x.kind })
    }

    /// The swapper's, the map's and the texts' invariants.
    pub fn check(&self) -> Result<(), String> {
        self.map.check()?;
        let in_transfer = |i: usize| self.current.iter().map(|(x, _)| x).chain(self.queue.iter()).any(|x| x.task == i);
        for (i, m) in self.imgs.iter().enumerate() {
            let placed = self.map.find(Owner::Task(i)).is_some();
            if m.loaded && !placed {
                return Err(format!("task {i} is loaded but has no memory"));
            }
            if !m.loaded && !m.moving && placed {
                return Err(format!("task {i} is swapped out but holds memory"));
            }
            if let Some(a) = self.map.find(Owner::Task(i)) {
                if m.loaded && a.size != m.size {
                    return Err(format!("task {i}: image of {} KB in an area of {} KB", m.size, a.size));
                }
            }
            if m.state == ProcState::Exited && (placed || m.moving) && !in_transfer(i) {
                return Err(format!("task {i} exited but holds memory"));
            }
            if m.moving && !in_transfer(i) {
                return Err(format!("task {i} is moving but has no transfer"));
            }
            if m.holds_text && !(m.loaded || m.moving) {
                return Err(format!("task {i} counts as its text's user in memory but is out"));
            }
        }
        for (k, x) in self.texts.iter().enumerate() {
            let users = self.imgs.iter().filter(|m| m.text == Some(k) && m.holds_text).count() as u64;
            if users != x.ccount {
                return Err(format!("text {k}: {} users in memory counted, {users} found", x.ccount));
            }
            let freeing = self.current.iter().map(|(x, _)| x).chain(self.queue.iter()).any(|t| t.text_free == Some(k));
            if x.ccount > 0 && !self.text_in_memory(k) {
                return Err(format!("text {k} has users in memory but no memory"));
            }
            if x.ccount == 0 && self.text_in_memory(k) && !freeing {
                return Err(format!("text {k} holds memory with no user in it"));
            }
        }
        if (self.activity == Activity::Busy) != self.own_transfers() {
            return Err(format!(
                "swap scheduler {:?} with its transfers {}",
                self.activity,
                if self.own_transfers() { "queued" } else { "done" }
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vassal_core::SEC;

    fn cfg(swap_in: SwapIn, swap_out: SwapOut) -> MemoryConfig {
        MemoryConfig {
            size_kb: 100,
            placement: Placement::FirstFit,
            seek: 10,
            transfer_per_kb: 1,
            swap_cpu: 0,
            min_resident: 2 * SEC,
            swap_in,
            swap_out,
            scan_entry: 0,
            nproc: 0,
            dma_steal_ppm: 0,
            min_swapped_out: 0,
            wake_on_ready: false,
            copy_per_kb: 0,
        }
    }

    fn img(size: u64, loaded: bool, since: Ns, state: ProcState) -> Image {
        Image { loaded, since, state, ..Image::new(size) }
    }

    #[test]
    fn standard_swap_in_takes_the_task_out_longest() {
        let imgs = [
            img(10, false, 5, ProcState::Ready),
            img(10, false, 3, ProcState::Ready),
            img(10, false, 1, ProcState::Sleeping), // out longest, but not ready
            img(10, true, 0, ProcState::Ready),
        ];
        assert_eq!(swap_in_standard(&imgs), Some(1));
    }

    #[test]
    fn priority_swap_in_takes_the_first_swapped_out_task_in_ready_order() {
        let imgs = [img(10, false, 1, ProcState::Ready), img(10, true, 0, ProcState::Ready), img(10, false, 9, ProcState::Ready)];
        // ready order: 1 (loaded), 2, 0 -> 2, although 0 has been out longer
        assert_eq!(swap_in_priority(&imgs, &[1, 2, 0]), Some(2));
        assert_eq!(swap_in_priority(&imgs, &[1]), None);
    }

    #[test]
    fn standard_swap_out_prefers_the_largest_waiting_image() {
        let now = 10 * SEC;
        let imgs = [
            img(30, true, 0, ProcState::Ready),
            img(20, true, 9 * SEC, ProcState::Waiting),
            img(40, true, 9 * SEC, ProcState::Waiting),
            img(50, true, 0, ProcState::Sleeping),
        ];
        assert_eq!(swap_out_standard(&imgs, now, 2 * SEC, &[]), Some(2));
        // a pinned (real-time) waiting image is never chosen
        assert_eq!(swap_out_standard(&imgs, now, 2 * SEC, &[2]), Some(1));
    }

    #[test]
    fn standard_swap_out_else_takes_the_oldest_resident_of_at_least_two_seconds() {
        let imgs =
            [img(30, true, 3 * SEC, ProcState::Ready), img(20, true, SEC, ProcState::Sleeping), img(40, true, 4 * SEC, ProcState::Ready)];
        assert_eq!(swap_out_standard(&imgs, 5 * SEC, 2 * SEC, &[]), Some(1));
        // at 4.5 s only task 1 (3.5 s) and task 0 (1.5 s: too young) are candidates
        assert_eq!(swap_out_standard(&imgs, 4 * SEC + SEC / 2, 2 * SEC, &[1]), None);
        assert_eq!(swap_out_standard(&imgs, 5 * SEC, 2 * SEC, &[1]), Some(0));
    }

    /// A map: [A 20 ready][B 30 waiting][hole 10][C 25 ready][D 15 waiting] in 100 KB.
    fn mouse_map() -> (MemoryMap, Vec<Image>) {
        let mut map = MemoryMap::new(100, Placement::FirstFit);
        let sizes = [20, 30, 10, 25, 15];
        for (i, s) in sizes.iter().enumerate() {
            map.alloc(Owner::Task(i), *s);
        }
        map.release(Owner::Task(2)); // the hole
        let imgs = vec![
            img(20, true, 0, ProcState::Ready),
            img(30, true, 0, ProcState::Waiting),
            img(10, false, 0, ProcState::Ready),
            img(25, true, 0, ProcState::Ready),
            img(15, true, 0, ProcState::Waiting),
        ];
        (map, imgs)
    }

    #[test]
    fn mouse_first_pass_uses_waiting_images_and_holes_only() {
        let (map, imgs) = mouse_map();
        // 40 KB: B (30) + hole (10) at 20..60 — waiting only.
        assert_eq!(swap_out_mouse(&map, &imgs, 40, 10 * SEC, 2 * SEC, &[]), Some(vec![1]));
        // 15 KB: B alone at 20 is the first cluster (D at 85 would also do).
        assert_eq!(swap_out_mouse(&map, &imgs, 15, 10 * SEC, 2 * SEC, &[]), Some(vec![1]));
    }

    #[test]
    fn mouse_second_pass_takes_the_first_cluster_of_any_swappable_images() {
        let (map, imgs) = mouse_map();
        // 45 KB: no waiting-only cluster (B+hole = 40, D = 15); second pass from address
        // 0: A (20) + B (30) = 50 -> A and B.
        assert_eq!(swap_out_mouse(&map, &imgs, 45, 10 * SEC, 2 * SEC, &[]), Some(vec![0, 1]));
        // A pinned: from B: B + hole + C = 65 >= 45 -> B and C.
        assert_eq!(swap_out_mouse(&map, &imgs, 45, 10 * SEC, 2 * SEC, &[0]), Some(vec![1, 3]));
    }

    #[test]
    fn mouse_swaps_nothing_when_no_cluster_fits() {
        let (map, imgs) = mouse_map();
        // C pinned splits memory into [A B hole] = 60 and [D] = 15: 70 KB fits nowhere.
        assert_eq!(swap_out_mouse(&map, &imgs, 70, 10 * SEC, 2 * SEC, &[3]), None);
        // Too young ready images are not swappable: at 1 s only B, hole, D qualify.
        assert_eq!(swap_out_mouse(&map, &imgs, 45, SEC, 2 * SEC, &[]), None);
    }

    #[test]
    fn the_loop_swaps_in_when_a_hole_fits_and_else_swaps_out() {
        let mut s = Swapper::new(cfg(SwapIn::Standard, SwapOut::Standard), &[60, 30, 50]);
        assert!(s.start(0, 0));
        assert!(s.start(1, 0));
        assert!(!s.start(2, 0), "50 KB does not fit in the 10 KB left");
        s.set_state(1, ProcState::Waiting);
        // at 3 s: task 2 wants in; no hole; the largest waiting image (1) goes out.
        let step = s.run(3 * SEC, None, &[]);
        assert_eq!(step, Step::Out { tasks: vec![1] });
        assert_eq!(s.device_end(), Some(3 * SEC + 10 + 30));
        assert!(!s.loaded(1));
        assert_eq!(s.run(3 * SEC + 1, None, &[]), Step::Sleep(Activity::Busy), "it waits for its write");
        assert_eq!(s.finish(3 * SEC + 40), Some(Done { task: 1, kind: XferKind::Out }));
        assert_eq!(s.device_end(), None);
        // 40 KB free (one hole at 60..100): still not 50 -> task 0 (ready, 3 s) goes out.
        let step = s.run(3 * SEC + 40, None, &[]);
        assert_eq!(step, Step::Out { tasks: vec![0] });
        assert_eq!(s.device_end(), Some(3 * SEC + 40 + 70));
        s.finish(3 * SEC + 110);
        let step = s.run(3 * SEC + 110, None, &[]);
        assert_eq!(step, Step::In { task: 2 });
        assert_eq!(s.device_end(), Some(3 * SEC + 110 + 60));
        assert!(!s.loaded(2), "loaded only when the transfer ends");
        assert_eq!(s.finish(3 * SEC + 170), Some(Done { task: 2, kind: XferKind::In }));
        assert!(s.loaded(2));
        assert_eq!((s.swap_ins, s.swap_outs), (1, 2));
        s.check().unwrap();
    }

    #[test]
    fn the_loop_sleeps_when_nothing_may_go_out_and_when_nothing_wants_in() {
        let mut s = Swapper::new(cfg(SwapIn::Standard, SwapOut::Mouse), &[60, 50]);
        s.start(0, 0);
        s.start(1, 0);
        // task 0 is ready and only 1 s resident: MOUSE finds no cluster.
        assert_eq!(s.run(SEC, None, &[]), Step::Sleep(Activity::Runin));
        assert!(s.wake_on_free());
        // task 0 exits: its memory is freed; the next pass swaps 1 in.
        assert!(s.exit(0));
        assert_eq!(s.run(SEC, None, &[]), Step::In { task: 1 });
        assert_eq!(s.device_end(), Some(SEC + 60));
        s.finish(SEC + 60);
        assert_eq!(s.run(SEC + 60, None, &[]), Step::Sleep(Activity::Runout));
        s.check().unwrap();
    }

    #[test]
    fn a_task_exiting_while_chosen_for_swap_out_frees_its_memory() {
        // A swapped-out task's script may end when it wakes (no CPU needed to exit).
        let mut s = Swapper::new(cfg(SwapIn::Standard, SwapOut::Mouse), &[30, 30, 50]);
        for i in 0..3 {
            s.start(i, 0);
        }
        s.set_state(0, ProcState::Waiting);
        s.set_state(1, ProcState::Waiting);
        assert_eq!(s.run(5 * SEC, None, &[]), Step::Out { tasks: vec![0, 1] });
        assert_eq!(s.device_end(), Some(5 * SEC + 40));
        // 1 exits before its write: freed at once, never written.
        assert!(s.exit(1));
        s.check().unwrap();
        // 0 exits during its write: freed when the write ends.
        assert!(!s.exit(0));
        s.check().unwrap();
        assert_eq!(s.finish(5 * SEC + 40), Some(Done { task: 0, kind: XferKind::Out }));
        assert_eq!(s.activity(), Activity::Runout, "its last write ended");
        assert_eq!(s.map.free(), 100);
        s.check().unwrap();
    }

    #[test]
    fn a_mouse_cluster_is_written_out_image_by_image() {
        let mut s = Swapper::new(cfg(SwapIn::Priority, SwapOut::Mouse), &[30, 30, 40, 50]);
        for i in 0..3 {
            s.start(i, 0);
        }
        s.start(3, 0); // out
        s.set_state(0, ProcState::Waiting);
        s.set_state(1, ProcState::Waiting);
        // 50 KB: first pass: A (30) + B (30) = 60 at address 0.
        let step = s.run(5 * SEC, Some(&[3]), &[]);
        assert_eq!(step, Step::Out { tasks: vec![0, 1] });
        assert_eq!(s.device_end(), Some(5 * SEC + 40));
        assert_eq!(s.finish(5 * SEC + 40), Some(Done { task: 0, kind: XferKind::Out }));
        assert_eq!(s.device_end(), Some(5 * SEC + 80), "the next write of the cluster");
        assert_eq!(s.activity(), Activity::Busy);
        assert_eq!(s.finish(5 * SEC + 80), Some(Done { task: 1, kind: XferKind::Out }));
        assert_eq!(s.run(5 * SEC + 80, Some(&[3]), &[]), Step::In { task: 3 });
        assert_eq!(s.device_end(), Some(5 * SEC + 140));
        s.check().unwrap();
    }

    #[test]
    fn a_shared_text_stays_while_a_user_is_in_memory_and_is_written_once() {
        // 100 KB: A and B (30 KB each) share a 10 KB text; C (50 KB) has none.
        let mut s = Swapper::with_texts(cfg(SwapIn::Standard, SwapOut::Standard), &[30, 30, 50], &[Some(0), Some(0), None], &[10]);
        assert!(s.start(0, 0)); // A 0..30, its text 30..40
        assert!(s.start(1, 0)); // B 40..70, the text already in memory
        assert!(!s.start(2, 0), "30 KB left");
        assert_eq!(s.map.find(Owner::Text(0)).map(|a| (a.addr, a.size)), Some((30, 10)));
        assert_eq!((s.texts[0].count, s.texts[0].ccount), (2, 2));
        s.set_state(0, ProcState::Waiting);
        s.set_state(1, ProcState::Waiting);
        // C wants in: A (the lower index of two equal waiting images) goes; B still
        // uses the text, so only A's 30 KB are written.
        assert_eq!(s.run(3 * SEC, None, &[]), Step::Out { tasks: vec![0] });
        assert_eq!(s.device_end(), Some(3 * SEC + 10 + 30));
        s.finish(3 * SEC + 40);
        assert!(s.map.find(Owner::Text(0)).is_some());
        // Holes 0..30 and 70..100, the text between: no 50. B goes, and the text with
        // it, written first (never written before): 40 + 20.
        assert_eq!(s.run(3 * SEC + 40, None, &[]), Step::Out { tasks: vec![1] });
        assert_eq!(s.device_end(), Some(3 * SEC + 40 + 60));
        s.check().unwrap();
        s.finish(3 * SEC + 100);
        assert_eq!(s.map.free(), 100);
        assert!(s.texts[0].on_swap);
        assert_eq!(s.run(3 * SEC + 100, None, &[]), Step::In { task: 2 });
        s.finish(3 * SEC + 160);
        // A comes back: its image (0..30 is taken by C? no: C is at 0..50) and its text.
        s.set_state(0, ProcState::Ready);
        assert_eq!(s.run(4 * SEC, None, &[]), Step::In { task: 0 });
        assert_eq!(s.device_end(), Some(4 * SEC + 40 + 20), "image and text read");
        assert_eq!(s.map.find(Owner::Task(0)).map(|a| a.addr), Some(50));
        assert_eq!(s.map.find(Owner::Text(0)).map(|a| a.addr), Some(80));
        s.finish(4 * SEC + 60);
        s.check().unwrap();
        // A swapped out again frees the text at once: it is in the swap area already.
        s.set_state(1, ProcState::Ready);
        s.set_state(0, ProcState::Waiting);
        assert_eq!(s.run(5 * SEC, None, &[]), Step::Out { tasks: vec![0] });
        assert_eq!(s.device_end(), Some(5 * SEC + 40), "no text write");
        s.finish(5 * SEC + 40);
        assert_eq!(s.map.find(Owner::Text(0)), None);
        // B exits while out, A exits: the text is gone.
        s.exit(1);
        assert_eq!(s.texts[0].count, 1);
        s.exit(0);
        assert_eq!(s.texts[0].count, 0);
        s.check().unwrap();
    }

    #[test]
    fn a_swap_in_needs_room_for_its_text_too() {
        // 60 KB: A (30 KB, text 0 of 20 KB) at 0..30, its text at 30..50; B (20 KB)
        // does not fit in the 10 KB left and starts swapped out.
        let mut s = Swapper::with_texts(
            MemoryConfig { size_kb: 60, ..cfg(SwapIn::Standard, SwapOut::Standard) },
            &[30, 20],
            &[Some(0), None],
            &[20],
        );
        assert!(s.start(0, 0));
        assert!(!s.start(1, 0), "10 KB left");
        s.set_state(0, ProcState::Waiting);
        // B wants in: A goes, its never-written text with it: (10 + 30) + (10 + 20).
        assert_eq!(s.run(SEC, None, &[]), Step::Out { tasks: vec![0] });
        assert_eq!(s.device_end(), Some(SEC + 70));
        s.finish(SEC + 70);
        assert_eq!(s.map.free(), 60);
        assert_eq!(s.run(SEC + 70, None, &[]), Step::In { task: 1 });
        s.finish(SEC + 100);
        assert_eq!(s.map.find(Owner::Task(1)).map(|a| a.addr), Some(0));
        // A is ready: 40 KB free at 20..60: its image fits at 20..50, but its text's 20 KB
        // then do not (10 left): V7 swapin() gives the image's memory back, and the swap
        // scheduler makes room instead (B, waiting, goes).
        s.set_state(0, ProcState::Ready);
        s.set_state(1, ProcState::Waiting);
        assert_eq!(s.run(5 * SEC, None, &[]), Step::Out { tasks: vec![1] });
        assert_eq!(s.map.find(Owner::Task(0)), None, "the image's memory was given back");
        s.check().unwrap();
        s.finish(5 * SEC + 30);
        // Now both fit: the image and the text are read, one transfer after the other.
        assert_eq!(s.run(5 * SEC + 30, None, &[]), Step::In { task: 0 });
        assert_eq!(s.device_end(), Some(5 * SEC + 30 + 40 + 30));
        assert_eq!(s.map.find(Owner::Text(0)).map(|a| (a.addr, a.size)), Some((30, 20)));
        s.finish(5 * SEC + 100);
        assert!(s.loaded(0));
        assert_eq!(s.texts[0].ccount, 1);
        s.check().unwrap();
    }

    #[test]
    fn mouse_clusters_stop_at_a_text_segment() {
        // [A 20 ready][T 10][B 30 waiting][hole 40] in 100 KB.
        let mut s = Swapper::with_texts(cfg(SwapIn::Standard, SwapOut::Mouse), &[20, 30], &[Some(0), None], &[10]);
        s.start(0, 0);
        s.start(1, 0);
        s.set_state(1, ProcState::Waiting);
        let (map, imgs) = (&s.map, &s.imgs);
        assert_eq!(swap_out_mouse(map, imgs, 50, 10 * SEC, 2 * SEC, &[]), Some(vec![1]));
        // 75 KB: from A the run ends at the text (20); from B: 30 + 40 = 70.
        assert_eq!(swap_out_mouse(map, imgs, 75, 10 * SEC, 2 * SEC, &[]), None);
    }

    #[test]
    fn growth_moves_to_a_larger_hole_or_swaps_itself_out() {
        let mut s = Swapper::new(cfg(SwapIn::Standard, SwapOut::Standard), &[30, 30]);
        s.start(0, 0); // 0..30
        s.start(1, 0); // 30..60
        assert_eq!(s.grow(SEC, 0, 40), Growth::Moved { copied: 30 }); // 60..100
        assert_eq!(s.map.find(Owner::Task(0)).map(|a| (a.addr, a.size)), Some((60, 40)));
        // B to 50: the only hole is 0..30 (B's own area is held): it swaps itself out,
        // writing its old 30 KB.
        assert_eq!(s.grow(2 * SEC, 1, 50), Growth::Swapped);
        assert!(!s.loaded(1));
        assert_eq!(s.device_end(), Some(2 * SEC + 10 + 30));
        assert_eq!(s.activity(), Activity::Runout, "not the swap scheduler's transfer");
        s.check().unwrap();
        assert_eq!(s.finish(2 * SEC + 40), Some(Done { task: 1, kind: XferKind::Grow }));
        assert_eq!((s.swap_outs, s.growth_swaps), (1, 1));
        assert!(s.imgs[1].wants_in());
        // Brought back at its new size: 50 KB read into 0..60.
        assert_eq!(s.run(2 * SEC + 40, None, &[]), Step::In { task: 1 });
        assert_eq!(s.device_end(), Some(2 * SEC + 40 + 60));
        s.finish(2 * SEC + 100);
        assert_eq!(s.map.find(Owner::Task(1)).map(|a| (a.addr, a.size)), Some((0, 50)));
        // Shrinking frees the tail in place; a size above the memory is refused.
        assert_eq!(s.grow(3 * SEC, 0, 35), Growth::InPlace);
        assert_eq!(s.map.free(), 15);
        assert_eq!(s.grow(3 * SEC, 0, 101), Growth::Refused);
        s.check().unwrap();
    }

    #[test]
    fn a_growth_write_queues_behind_the_swap_schedulers_transfer() {
        let mut s = Swapper::new(cfg(SwapIn::Standard, SwapOut::Standard), &[40, 40, 30]);
        s.start(0, 0);
        s.start(1, 0);
        assert!(!s.start(2, 0));
        s.set_state(0, ProcState::Waiting);
        assert_eq!(s.run(SEC, None, &[]), Step::Out { tasks: vec![0] }); // ends at +50
                                                                         // B grows to 45 meanwhile: no hole yet (A's memory is freed when its write
                                                                         // ends): its own write of 40 KB follows.
        assert_eq!(s.grow(SEC + 5, 1, 45), Growth::Swapped);
        assert_eq!(s.device_end(), Some(SEC + 50));
        assert_eq!(s.finish(SEC + 50), Some(Done { task: 0, kind: XferKind::Out }));
        assert_eq!(s.device_end(), Some(SEC + 100));
        assert_eq!(s.activity(), Activity::Runout, "its own write ended");
        // The swap scheduler's next transfer waits for the growth write.
        assert_eq!(s.run(SEC + 50, None, &[]), Step::In { task: 2 });
        assert_eq!(s.device_end(), Some(SEC + 100));
        s.finish(SEC + 100);
        assert_eq!(s.device_end(), Some(SEC + 140), "then the read of task 2");
        s.check().unwrap();
    }
}
