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
//! 2. if a hole large enough for its image exists (placement, [`crate::memory`]), swap it
//!    in: the memory is taken at once, the image is loaded when the transfer ends.
//! 3. else the swap-out decision picks loaded images to write out; each is not
//!    dispatchable from the moment it is chosen, and its memory is freed when its write
//!    ends. Then go to 1.
//! 4. nothing to swap out: sleep until the next second or until memory is freed (V7
//!    `runin`, woken by the clock once a second and by `mfree`).
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
//!   areas, each a hole or a swappable image, whose sizes add up to the incoming image's;
//!   swap out every image in it. First pass: only waiting images are swappable; second
//!   pass: waiting, sleeping and ready ones. No such run: swap nothing.
//!
//! Ties are broken by the lower task index. All times are integer ns; a transfer takes
//! `seek + size × transfer` (per KB).

use std::collections::VecDeque;

use vassal_core::Ns;

use crate::memory::{MemoryMap, Placement};

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
    pub size: u64,
    pub loaded: bool,
    /// When it was last loaded (loaded) or chosen for swap-out / created out (swapped out).
    pub since: Ns,
    pub state: ProcState,
    /// Being swapped in or out.
    pub moving: bool,
    pub swap_ins: u64,
    pub swap_outs: u64,
}

impl Image {
    pub fn new(size: u64) -> Self {
        Image { size, loaded: false, since: 0, state: ProcState::NotStarted, moving: false, swap_ins: 0, swap_outs: 0 }
    }
    fn alive(&self) -> bool {
        !matches!(self.state, ProcState::NotStarted | ProcState::Exited)
    }
    /// Ready and swapped out (and not on its way in).
    pub fn wants_in(&self) -> bool {
        self.state == ProcState::Ready && !self.loaded && !self.moving
    }
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
/// only, second pass all eligible ones. None: no cluster fits (swap nothing).
pub fn swap_out_mouse(map: &MemoryMap, imgs: &[Image], need: u64, now: Ns, min_resident: Ns, pinned: &[usize]) -> Option<Vec<usize>> {
    for waiting_only in [true, false] {
        let swappable = |owner: Option<usize>| match owner {
            None => true,
            Some(i) => imgs.get(i).is_some_and(|m| eligible(m, i, now, min_resident, pinned, waiting_only)),
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
                    return Some(areas[start..=end].iter().filter_map(|b| b.owner).collect());
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
    /// A transfer is under way and ends at this time.
    Busy(Ns),
}

/// What one step of the swap scheduler did, for the engine to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Swapping `task` in; it is loaded (dispatchable) when the transfer ends at `until`.
    In { task: usize, until: Ns },
    /// Swapping these images out, one after another: none is dispatchable from now on;
    /// the first write ends at `until`.
    Out { tasks: Vec<usize>, until: Ns },
    /// Went to sleep.
    Sleep(Activity),
}

/// A finished transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// The task's image is loaded.
    In(usize),
    /// The task's image is in the swap area and its memory free; `next`: the next write
    /// of the same cluster ends then.
    Out { task: usize, next: Option<Ns> },
}

/// The swap scheduler, its memory map and every task's image.
#[derive(Clone, Debug)]
pub struct Swapper {
    pub cfg: MemoryConfig,
    pub map: MemoryMap,
    pub imgs: Vec<Image>,
    activity: Activity,
    /// The transfer under way: (task, in?).
    current: Option<(usize, bool)>,
    /// Images chosen for swap-out still to be written.
    pending: VecDeque<usize>,
    pub swap_ins: u64,
    pub swap_outs: u64,
    /// Entries the last run's decisions examined (for its CPU cost).
    pub scanned: u64,
    /// CPU time stolen by transfers started since the engine last took it.
    stolen: Ns,
}

impl Swapper {
    /// `sizes`: each task's image in KB.
    pub fn new(cfg: MemoryConfig, sizes: &[u64]) -> Self {
        Swapper {
            map: MemoryMap::new(cfg.size_kb, cfg.placement),
            imgs: sizes.iter().map(|&s| Image::new(s)).collect(),
            cfg,
            activity: Activity::Runout,
            current: None,
            pending: VecDeque::new(),
            swap_ins: 0,
            swap_outs: 0,
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

    /// Task `i` starts: it is created in memory if a hole takes it, else swapped out
    /// (V7 `newproc`). Returns whether it is loaded.
    pub fn start(&mut self, i: usize, now: Ns) -> bool {
        let size = self.imgs[i].size;
        let loaded = self.map.alloc(i, size).is_some();
        let m = &mut self.imgs[i];
        m.loaded = loaded;
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

    /// Task `i` exited; its memory is freed (an image being written out is freed when
    /// its write ends; one waiting to be written is not written). True if that freed any.
    pub fn exit(&mut self, i: usize) -> bool {
        self.imgs[i].state = ProcState::Exited;
        if self.current.is_some_and(|(t, _)| t == i) {
            return false;
        }
        self.pending.retain(|&p| p != i);
        let m = &mut self.imgs[i];
        m.moving = false;
        m.loaded = false;
        self.map.release(i)
    }

    /// Whether a freed hole should wake the sleeping swap scheduler (V7 `mfree` wakes
    /// `runin`).
    pub fn wake_on_free(&self) -> bool {
        self.activity == Activity::Runin
    }

    /// One pass of the loop: a decision, given the CPU scheduler's ready order (task
    /// indices, best first; None: it gives none) and the tasks that must stay resident.
    pub fn run(&mut self, now: Ns, order: Option<&[usize]>, pinned: &[usize]) -> Step {
        if let Activity::Busy(until) = self.activity {
            return Step::Sleep(Activity::Busy(until)); // a transfer is under way
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
        let size = self.imgs[i].size;
        if self.map.alloc(i, size).is_some() {
            let until = now.saturating_add(self.cfg.transfer(size));
            self.stolen = self.stolen.saturating_add(self.cfg.steal(size));
            self.imgs[i].moving = true;
            self.current = Some((i, true));
            self.activity = Activity::Busy(until);
            return Step::In { task: i, until };
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
                swap_out_mouse(&self.map, &self.imgs, size, now, min_resident, pinned)
            }
        };
        match victims {
            Some(v) if !v.is_empty() => {
                for &t in &v {
                    let m = &mut self.imgs[t];
                    m.loaded = false;
                    m.moving = true;
                    m.since = now;
                }
                self.pending = v.iter().copied().collect();
                let until = self.next_write(now).expect("a victim is pending");
                Step::Out { tasks: v, until }
            }
            _ => {
                self.activity = Activity::Runin;
                Step::Sleep(Activity::Runin)
            }
        }
    }

    /// Starts the next pending write; its end time.
    fn next_write(&mut self, now: Ns) -> Option<Ns> {
        let t = self.pending.pop_front()?;
        let until = now.saturating_add(self.cfg.transfer(self.imgs[t].size));
        self.stolen = self.stolen.saturating_add(self.cfg.steal(self.imgs[t].size));
        self.current = Some((t, false));
        self.activity = Activity::Busy(until);
        Some(until)
    }

    /// The transfer under way ended (at `now`).
    pub fn finish(&mut self, now: Ns) -> Option<Done> {
        let (t, incoming) = self.current.take()?;
        self.activity = Activity::Runout;
        let m = &mut self.imgs[t];
        m.moving = false;
        if incoming && m.state == ProcState::Exited {
            self.map.release(t);
            return Some(Done::Out { task: t, next: None });
        }
        if incoming {
            m.loaded = true;
            m.since = now;
            m.swap_ins += 1;
            self.swap_ins += 1;
            Some(Done::In(t))
        } else {
            m.swap_outs += 1;
            self.swap_outs += 1;
            self.map.release(t);
            Some(Done::Out { task: t, next: self.next_write(now) })
        }
    }

    /// The swapper's and the map's invariants.
    pub fn check(&self) -> Result<(), String> {
        self.map.check()?;
        for (i, m) in self.imgs.iter().enumerate() {
            let placed = self.map.find(i).is_some();
            if m.loaded && !placed {
                return Err(format!("task {i} is loaded but has no memory"));
            }
            if !m.loaded && !m.moving && placed {
                return Err(format!("task {i} is swapped out but holds memory"));
            }
            let in_transfer = self.current.is_some_and(|(t, _)| t == i);
            if m.state == ProcState::Exited && (placed || m.moving) && !in_transfer {
                return Err(format!("task {i} exited but holds memory"));
            }
            if m.moving && !in_transfer && !self.pending.contains(&i) {
                return Err(format!("task {i} is moving but neither in transfer nor pending"));
            }
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
        }
    }

    fn img(size: u64, loaded: bool, since: Ns, state: ProcState) -> Image {
        Image { size, loaded, since, state, moving: false, swap_ins: 0, swap_outs: 0 }
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
            map.alloc(i, *s);
        }
        map.release(2); // the hole
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
        assert_eq!(step, Step::Out { tasks: vec![1], until: 3 * SEC + 10 + 30 });
        assert!(!s.loaded(1));
        assert_eq!(s.finish(3 * SEC + 40), Some(Done::Out { task: 1, next: None }));
        // 40 KB free (one hole at 60..100): still not 50 -> task 0 (ready, 3 s) goes out.
        let step = s.run(3 * SEC + 40, None, &[]);
        assert_eq!(step, Step::Out { tasks: vec![0], until: 3 * SEC + 40 + 70 });
        s.finish(3 * SEC + 110);
        let step = s.run(3 * SEC + 110, None, &[]);
        assert_eq!(step, Step::In { task: 2, until: 3 * SEC + 110 + 60 });
        assert!(!s.loaded(2), "loaded only when the transfer ends");
        assert_eq!(s.finish(3 * SEC + 170), Some(Done::In(2)));
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
        assert_eq!(s.run(SEC, None, &[]), Step::In { task: 1, until: SEC + 60 });
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
        assert_eq!(s.run(5 * SEC, None, &[]), Step::Out { tasks: vec![0, 1], until: 5 * SEC + 40 });
        // 1 exits before its write: freed at once, never written.
        assert!(s.exit(1));
        s.check().unwrap();
        // 0 exits during its write: freed when the write ends.
        assert!(!s.exit(0));
        s.check().unwrap();
        assert_eq!(s.finish(5 * SEC + 40), Some(Done::Out { task: 0, next: None }));
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
        assert_eq!(step, Step::Out { tasks: vec![0, 1], until: 5 * SEC + 40 });
        assert_eq!(s.finish(5 * SEC + 40), Some(Done::Out { task: 0, next: Some(5 * SEC + 80) }));
        assert_eq!(s.finish(5 * SEC + 80), Some(Done::Out { task: 1, next: None }));
        assert_eq!(s.run(5 * SEC + 80, Some(&[3]), &[]), Step::In { task: 3, until: 5 * SEC + 140 });
        s.check().unwrap();
    }
}
