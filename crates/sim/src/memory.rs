//! Main memory of a swapping UNIX (paper 004 §2, §4.3): a fixed-size store of contiguous
//! process images, kept as MOUSE's "complete map of main memory" — an array of areas
//! ordered by address, each used (by one task's image) or unused (a hole), adjacent holes
//! always merged. Standard UNIX keeps only the list of holes (`coremap`); the full map
//! holds the same holes, so both strategies allocate from it alike.
//!
//! Placement: `first_fit` (V6/V7 `malloc(coremap, size)`: the lowest-addressed hole large
//! enough) or `best_fit` (the smallest hole large enough, lowest address on ties). An
//! image is placed at the start of its hole. Because images are placed and freed where
//! they are, free memory fragments: a swap-in can fail although the holes add up to
//! enough.
//!
//! Sizes and addresses are in KB (integers).

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
    /// The task whose image occupies it (index into the scenario's tasks); None: a hole.
    pub owner: Option<usize>,
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

    /// Where `owner`'s image is.
    pub fn find(&self, owner: usize) -> Option<Area> {
        self.areas.iter().copied().find(|a| a.owner == Some(owner))
    }

    /// Places an image of `size` KB for `owner` by the placement rule; its address, or
    /// None when no single hole is large enough (or `owner` already has an image, or the
    /// size is 0).
    pub fn alloc(&mut self, owner: usize, size: u64) -> Option<u64> {
        if size == 0 || self.find(owner).is_some() {
            return None;
        }
        let holes = self.areas.iter().enumerate().filter(|(_, a)| a.owner.is_none() && a.size >= size);
        let k = match self.placement {
            Placement::FirstFit => holes.map(|(k, _)| k).next(),
            // min_by_key keeps the first of equal sizes: the lowest address.
            Placement::BestFit => holes.min_by_key(|(_, a)| a.size).map(|(k, _)| k),
        }?;
        let hole = self.areas[k];
        self.areas[k] = Area { addr: hole.addr, size, owner: Some(owner) };
        if hole.size > size {
            self.areas.insert(k + 1, Area { addr: hole.addr + size, size: hole.size - size, owner: None });
        }
        Some(hole.addr)
    }

    /// Frees `owner`'s image, merging the hole with its neighbours. False if it had none.
    pub fn release(&mut self, owner: usize) -> bool {
        let Some(mut k) = self.areas.iter().position(|a| a.owner == Some(owner)) else { return false };
        self.areas[k].owner = None;
        if k + 1 < self.areas.len() && self.areas[k + 1].owner.is_none() {
            self.areas[k].size += self.areas[k + 1].size;
            self.areas.remove(k + 1);
        }
        if k > 0 && self.areas[k - 1].owner.is_none() {
            self.areas[k - 1].size += self.areas[k].size;
            self.areas.remove(k);
            k -= 1;
        }
        let _ = k;
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
                    return Err(format!("memory map: task {o} has two images"));
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

    fn layout(m: &MemoryMap) -> Vec<(u64, u64, Option<usize>)> {
        m.areas().iter().map(|a| (a.addr, a.size, a.owner)).collect()
    }

    #[test]
    fn first_fit_takes_the_lowest_hole_and_splits_it() {
        let mut m = MemoryMap::new(100, Placement::FirstFit);
        assert_eq!(m.alloc(0, 30), Some(0));
        assert_eq!(m.alloc(1, 20), Some(30));
        assert_eq!(m.alloc(2, 40), Some(50));
        assert_eq!(layout(&m), vec![(0, 30, Some(0)), (30, 20, Some(1)), (50, 40, Some(2)), (90, 10, None)]);
        // Free the 30 KB at 0: holes 30@0 and 10@90; a 10 KB image goes to the first.
        assert!(m.release(0));
        assert_eq!(m.alloc(3, 10), Some(0));
        assert_eq!(layout(&m), vec![(0, 10, Some(3)), (10, 20, None), (30, 20, Some(1)), (50, 40, Some(2)), (90, 10, None)]);
        m.check().unwrap();
    }

    #[test]
    fn best_fit_takes_the_smallest_hole_that_fits() {
        let mut m = MemoryMap::new(100, Placement::BestFit);
        m.alloc(0, 30);
        m.alloc(1, 20);
        m.alloc(2, 40);
        m.release(0); // holes: 30@0, 10@90
        assert_eq!(m.alloc(3, 10), Some(90));
        assert_eq!(m.alloc(4, 25), Some(0));
        m.check().unwrap();
    }

    #[test]
    fn fragmentation_refuses_an_image_the_free_total_would_hold() {
        let mut m = MemoryMap::new(100, Placement::FirstFit);
        for (t, s) in [(0, 25), (1, 25), (2, 25), (3, 25)] {
            m.alloc(t, s);
        }
        m.release(0);
        m.release(2); // holes 25@0 and 25@50: 50 KB free, none 30 KB long
        assert_eq!(m.free(), 50);
        assert_eq!(m.largest_hole(), 25);
        assert_eq!(m.alloc(9, 30), None);
        assert_eq!(layout(&m).len(), 4, "a refused allocation changes nothing");
    }

    #[test]
    fn release_merges_with_both_neighbours() {
        let mut m = MemoryMap::new(90, Placement::FirstFit);
        m.alloc(0, 30);
        m.alloc(1, 30);
        m.alloc(2, 30);
        m.release(0);
        m.release(2);
        assert_eq!(layout(&m), vec![(0, 30, None), (30, 30, Some(1)), (60, 30, None)]);
        m.release(1);
        assert_eq!(layout(&m), vec![(0, 90, None)]);
        assert!(!m.release(1), "no image left to free");
        m.check().unwrap();
    }

    #[test]
    fn an_owner_has_one_image_and_zero_sizes_are_refused() {
        let mut m = MemoryMap::new(50, Placement::FirstFit);
        assert_eq!(m.alloc(0, 10), Some(0));
        assert_eq!(m.alloc(0, 10), None);
        assert_eq!(m.alloc(1, 0), None);
        assert_eq!(m.alloc(1, 51), None);
        assert_eq!(m.alloc(1, 40), Some(10));
        assert_eq!(m.free(), 0);
    }
}
