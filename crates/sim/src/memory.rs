//! Main memory of a swapping UNIX (paper 004 §2, §4.3): a fixed-size store of contiguous
//! areas, kept as MOUSE's "complete map of main memory" — an array of areas ordered by
//! address, each used (by one task's image or by a shared text segment) or unused (a
//! hole), adjacent holes always merged. Standard UNIX keeps only the list of holes
//! (`coremap`); the full map holds the same holes, so both strategies allocate from it
//! alike.
//!
//! Placement: `first_fit` (V6/V7 `malloc(coremap, size)`: the lowest-addressed hole large
//! enough) or `best_fit` (the smallest hole large enough, lowest address on ties). An
//! area is placed at the start of its hole. Because areas are placed and freed where
//! they are, free memory fragments: a swap-in can fail although the holes add up to
//! enough.
//!
//! A process image changes size as V7 `expand()` (slp.c) changes it: shrinking frees its
//! tail in place; growing allocates a new area of the new size elsewhere while the old
//! one is still held, copies, and frees the old one ([`MemoryMap::realloc`]) — it never
//! grows in place, so a growing image needs a hole of its whole new size.
//!
//! Sizes and addresses are in KB (integers).

/// What occupies a used area: a task's image (data, stack and u-area: V7 `p_size`) or a
/// shared text segment (V7 `struct text`), each by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    Task(usize),
    Text(usize),
}

/// How a hole is chosen for a new image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    FirstFit,
    BestFit,
}

impl Placement {
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "first_fit" => Some(Placement::FirstFit),
            "best_fit" => Some(Placement::BestFit),
            _ => None,
        }
    }
}

/// One area of the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Area {
    pub addr: u64,
    pub size: u64,
    /// What occupies it; None: a hole.
    pub owner: Option<Owner>,
}

/// The memory map: areas in address order covering 0..size exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryMap {
    size: u64,
    placement: Placement,
    areas: Vec<Area>,
}

impl MemoryMap {
    /// An empty memory of `size` KB.
    pub fn new(size: u64, placement: Placement) -> Self {
        let areas = if size > 0 { vec![Area { addr: 0, size, owner: None }] } else { Vec::new() };
        MemoryMap { size, placement, areas }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The map, lowest address first.
    pub fn areas(&self) -> &[Area] {
        &self.areas
    }

    /// Unused KB in all.
    pub fn free(&self) -> u64 {
        self.areas.iter().filter(|a| a.owner.is_none()).map(|a| a.size).sum()
    }

    /// The largest hole.
    pub fn largest_hole(&self) -> u64 {
        self.areas.iter().filter(|a| a.owner.is_none()).map(|a| a.size).max().unwrap_or(0)
    }

    /// Where `owner`'s area is.
    pub fn find(&self, owner: Owner) -> Option<Area> {
        self.areas.iter().copied().find(|a| a.owner == Some(owner))
    }

    /// The hole the placement rule picks for `size` KB, by index.
    fn hole_for(&self, size: u64) -> Option<usize> {
        let holes = self.areas.iter().enumerate().filter(|(_, a)| a.owner.is_none() && a.size >= size);
        match self.placement {
            Placement::FirstFit => holes.map(|(k, _)| k).next(),
            // min_by_key keeps the first of equal sizes: the lowest address.
            Placement::BestFit => holes.min_by_key(|(_, a)| a.size).map(|(k, _)| k),
        }
    }

    /// Places an area of `size` KB for `owner` by the placement rule; its address, or
    /// None when no single hole is large enough (or `owner` already has an area, or the
    /// size is 0).
    pub fn alloc(&mut self, owner: Owner, size: u64) -> Option<u64> {
        if size == 0 || self.find(owner).is_some() {
            return None;
        }
        let k = self.hole_for(size)?;
        let hole = self.areas[k];
        self.areas[k] = Area { addr: hole.addr, size, owner: Some(owner) };
        if hole.size > size {
            self.areas.insert(k + 1, Area { addr: hole.addr + size, size: hole.size - size, owner: None });
        }
        Some(hole.addr)
    }

    /// Frees `owner`'s area, merging the hole with its neighbours. False if it had none.
    pub fn release(&mut self, owner: Owner) -> bool {
        let Some(k) = self.areas.iter().position(|a| a.owner == Some(owner)) else { return false };
        self.free_at(k);
        true
    }

    /// Makes area `k` a hole and merges it with its neighbours.
    fn free_at(&mut self, k: usize) {
        self.areas[k].owner = None;
        if k + 1 < self.areas.len() && self.areas[k + 1].owner.is_none() {
            self.areas[k].size += self.areas[k + 1].size;
            self.areas.remove(k + 1);
        }
        if k > 0 && self.areas[k - 1].owner.is_none() {
            self.areas[k - 1].size += self.areas[k].size;
            self.areas.remove(k);
        }
    }

    /// V7 `expand()` growing `owner`'s area to `size` KB: a new area from a hole (by the
    /// placement rule) while the old one is still held, then the old one freed. Its new
    /// address, or None when no hole takes the new size (nothing changes: V7 then swaps
    /// the process out). Also None if `owner` has no area or `size` is not larger.
    pub fn realloc(&mut self, owner: Owner, size: u64) -> Option<u64> {
        let old = self.find(owner)?;
        if size <= old.size {
            return None;
        }
        let k = self.hole_for(size)?;
        let hole = self.areas[k];
        let old_k = self.areas.iter().position(|a| a.owner == Some(owner))?;
        // Mark the old area a plain used area while the new one is placed, then free it.
        self.areas[k] = Area { addr: hole.addr, size, owner: Some(owner) };
        let mut old_k = old_k;
        if hole.size > size {
            self.areas.insert(k + 1, Area { addr: hole.addr + size, size: hole.size - size, owner: None });
            if old_k > k {
                old_k += 1;
            }
        }
        self.free_at(old_k);
        Some(hole.addr)
    }

    /// V7 `expand()` shrinking `owner`'s area to `size` KB (≥ 1): its tail is freed in
    /// place. False (nothing changes) if it has no area or `size` is not smaller.
    pub fn shrink(&mut self, owner: Owner, size: u64) -> bool {
        let Some(k) = self.areas.iter().position(|a| a.owner == Some(owner)) else { return false };
        let a = self.areas[k];
        if size == 0 || size >= a.size {
            return false;
        }
        self.areas[k].size = size;
        self.areas.insert(k + 1, Area { addr: a.addr + size, size: a.size - size, owner: Some(owner) });
        self.free_at(k + 1);
        true
    }

    /// The map's invariants: areas tile 0..size in order, no empty area, no two adjacent
    /// holes, each owner at most once.
    pub fn check(&self) -> Result<(), String> {
        let mut at = 0;
        let mut owners = std::collections::BTreeSet::new();
        for (k, a) in self.areas.iter().enumerate() {
            if a.addr != at || a.size == 0 {
                return Err(format!("memory map area {k} at {} size {} (expected address {at})", a.addr, a.size));
            }
            if k > 0 && a.owner.is_none() && self.areas[k - 1].owner.is_none() {
                return Err(format!("memory map: adjacent holes at {}", a.addr));
            }
            if let Some(o) = a.owner {
                if !owners.insert(o) {
                    return Err(format!("memory map: {o:?} has two areas"));
                }
            }
            at += a.size;
        }
        if at != self.size {
            return Err(format!("memory map covers {at} KB of {}", self.size));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(i: usize) -> Owner {
        Owner::Task(i)
    }

    fn layout(m: &MemoryMap) -> Vec<(u64, u64, Option<Owner>)> {
        m.areas().iter().map(|a| (a.addr, a.size, a.owner)).collect()
    }

    #[test]
    fn first_fit_takes_the_lowest_hole_and_splits_it() {
        let mut m = MemoryMap::new(100, Placement::FirstFit);
        assert_eq!(m.alloc(t(0), 30), Some(0));
        assert_eq!(m.alloc(t(1), 20), Some(30));
        assert_eq!(m.alloc(t(2), 40), Some(50));
        assert_eq!(layout(&m), vec![(0, 30, Some(t(0))), (30, 20, Some(t(1))), (50, 40, Some(t(2))), (90, 10, None)]);
        // Free the 30 KB at 0: holes 30@0 and 10@90; a 10 KB image goes to the first.
        assert!(m.release(t(0)));
        assert_eq!(m.alloc(t(3), 10), Some(0));
        assert_eq!(layout(&m), vec![(0, 10, Some(t(3))), (10, 20, None), (30, 20, Some(t(1))), (50, 40, Some(t(2))), (90, 10, None)]);
        m.check().unwrap();
    }

    #[test]
    fn best_fit_takes_the_smallest_hole_that_fits() {
        let mut m = MemoryMap::new(100, Placement::BestFit);
        m.alloc(t(0), 30);
        m.alloc(t(1), 20);
        m.alloc(t(2), 40);
        m.release(t(0)); // holes: 30@0, 10@90
        assert_eq!(m.alloc(t(3), 10), Some(90));
        assert_eq!(m.alloc(t(4), 25), Some(0));
        m.check().unwrap();
    }

    #[test]
    fn fragmentation_refuses_an_image_the_free_total_would_hold() {
        let mut m = MemoryMap::new(100, Placement::FirstFit);
        for (i, s) in [(0, 25), (1, 25), (2, 25), (3, 25)] {
            m.alloc(t(i), s);
        }
        m.release(t(0));
        m.release(t(2)); // holes 25@0 and 25@50: 50 KB free, none 30 KB long
        assert_eq!(m.free(), 50);
        assert_eq!(m.largest_hole(), 25);
        assert_eq!(m.alloc(t(9), 30), None);
        assert_eq!(layout(&m).len(), 4, "a refused allocation changes nothing");
    }

    #[test]
    fn release_merges_with_both_neighbours() {
        let mut m = MemoryMap::new(90, Placement::FirstFit);
        m.alloc(t(0), 30);
        m.alloc(t(1), 30);
        m.alloc(t(2), 30);
        m.release(t(0));
        m.release(t(2));
        assert_eq!(layout(&m), vec![(0, 30, None), (30, 30, Some(t(1))), (60, 30, None)]);
        m.release(t(1));
        assert_eq!(layout(&m), vec![(0, 90, None)]);
        assert!(!m.release(t(1)), "no image left to free");
        m.check().unwrap();
    }

    #[test]
    fn an_owner_has_one_image_and_zero_sizes_are_refused() {
        let mut m = MemoryMap::new(50, Placement::FirstFit);
        assert_eq!(m.alloc(t(0), 10), Some(0));
        assert_eq!(m.alloc(t(0), 10), None);
        assert_eq!(m.alloc(t(1), 0), None);
        assert_eq!(m.alloc(t(1), 51), None);
        assert_eq!(m.alloc(t(1), 40), Some(10));
        assert_eq!(m.free(), 0);
    }

    #[test]
    fn growth_takes_a_new_hole_of_the_whole_size_and_frees_the_old_area() {
        // V7 expand(): [A 20][hole 10][B 30][hole 40]; A grows to 25: not in place (the
        // 10 KB beside it is too small with A still held): 25@60, the old 20@0 freed.
        let mut m = MemoryMap::new(100, Placement::FirstFit);
        m.alloc(t(0), 20);
        m.alloc(t(9), 10);
        m.alloc(t(1), 30);
        m.release(t(9));
        assert_eq!(m.realloc(t(0), 25), Some(60));
        assert_eq!(layout(&m), vec![(0, 30, None), (30, 30, Some(t(1))), (60, 25, Some(t(0))), (85, 15, None)]);
        // B grows to 30 + 20: the only 50 KB hole would be B's own area and its
        // neighbours, which V7 does not use: refused, nothing changes.
        assert_eq!(m.realloc(t(1), 50), None);
        assert_eq!(m.find(t(1)).map(|a| (a.addr, a.size)), Some((30, 30)));
        // A text segment is an owner of its own.
        assert_eq!(m.alloc(Owner::Text(0), 8), Some(0));
        assert_eq!(m.realloc(t(0), 20), None, "not larger");
        m.check().unwrap();
    }

    #[test]
    fn shrinking_frees_the_tail_in_place() {
        let mut m = MemoryMap::new(100, Placement::FirstFit);
        m.alloc(t(0), 40);
        m.alloc(t(1), 20);
        m.release(t(1)); // one hole 60@40
        assert!(m.shrink(t(0), 30));
        assert_eq!(layout(&m), vec![(0, 30, Some(t(0))), (30, 70, None)]);
        assert!(!m.shrink(t(0), 30), "not smaller");
        assert!(!m.shrink(t(0), 0));
        assert!(!m.shrink(t(5), 1), "no area");
        m.check().unwrap();
    }
}
