//! The broker of the soft real-time server (paper 002 §2.2): the admission test and the
//! placement of reservations on CPUs, kept apart from dispatching ("the admission and
//! schedulability test in the broker may have variable computation time, hence it may
//! affect the timing of dispatching").
//!
//! The admission test, exactly as printed (all integer ns, exact):
//! - eq. 1: Σ_{i=1..m} e_i / p_i ≤ r·N over all reservations on all N CPUs, where r is
//!   the administrator's real-time fraction (1 − r stays free for time-sharing);
//! - on one CPU, its reservations sorted by period so that the m-th has the smallest:
//!   - eq. 2: p_m ≥ e_m + max_{1≤i<m} e_i;
//!   - eq. 3: p_i ≥ e_i + max_{1≤j≤m, j≠i} e_j + Σ_{j=i+1..m} e_j · F(p_i − e_j, p_j),
//!     with F(x, y) = ceil(x / y) + 1. It is checked for i < m (for i = m it is eq. 2).
//!
//!   Equal periods are ordered by admission: the earlier reservation counts as the
//!   shorter period (the table builder gives it the higher priority too).
//! - "all equations must be satisfied"; on N CPUs the broker "tries to place the new RT
//!   process in each of the processors (1..N)" and admits it on the first whose set
//!   passes eqs. 2 and 3, else rejects it.
//!
//! Besides the printed equations the trial requires that the CPU's column of the dispatch
//! table can be built ([`super::table::build_column`]): the dispatcher gives whole slots,
//! so e is rounded up to slots and the equations alone do not guarantee the slotted
//! schedule. With `mode = Table` eqs. 2 and 3 are skipped and the table construction is
//! the whole per-CPU test (exact for the slotted dispatcher; see docs/rtserver.md for why
//! the paper's own Table 2 needs it). A task may only be placed on CPUs in its affinity.

use std::collections::BTreeMap;

use vassal_core::{CpuSet, Ns, TaskId};

use super::table::{build_column, Job, Table};

/// The per-CPU test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Eqs. 2 and 3 as printed, and the table must build (default).
    Eqs,
    /// Only the table construction (the exact test for slotted non-preemptive RM).
    Table,
}

/// An admitted reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub task: TaskId,
    /// CPU time per period, ns: util · period.
    pub e: Ns,
    pub p: Ns,
    /// The CPU it was placed on.
    pub cpu: u16,
    /// The uid that made it: only it or root may modify or free it.
    pub owner: u32,
    /// Admission order.
    pub seq: u64,
}

/// Which check refused a reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// eq. 1: Σ e/p (num/den CPUs) would exceed r·N.
    Eq1 { sum_num: u128, sum_den: u128 },
    /// eq. 2 on a CPU: p_m < e_m + max e_i.
    Eq2 { cpu: u16, lhs: Ns, rhs: u128 },
    /// eq. 3 on a CPU, for reservation `task`: p_i < rhs.
    Eq3 { cpu: u16, task: TaskId, lhs: Ns, rhs: u128 },
    /// The CPU's dispatch-table column cannot be built: `task` misses a deadline.
    Table { cpu: u16, task: TaskId },
    /// The task may not run on this CPU.
    Affinity { cpu: u16 },
}

impl Failure {
    /// 1, 2, 3 for the equations; 4 for the table; 5 for affinity.
    pub fn code(&self) -> u8 {
        match self {
            Failure::Eq1 { .. } => 1,
            Failure::Eq2 { .. } => 2,
            Failure::Eq3 { .. } => 3,
            Failure::Table { .. } => 4,
            Failure::Affinity { .. } => 5,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Eq1 { sum_num, sum_den } => {
                write!(f, "eq. 1 fails: the utilisations would sum to {sum_num}/{sum_den} CPUs, over r·N")
            }
            Failure::Eq2 { cpu, lhs, rhs } => {
                write!(f, "CPU {cpu}: eq. 2 fails: p_m = {lhs} ns < e_m + max e_i = {rhs} ns")
            }
            Failure::Eq3 { cpu, task, lhs, rhs } => {
                write!(f, "CPU {cpu}: eq. 3 fails for {task}: p_i = {lhs} ns < e_i + max e_j + Σ e_j·F(p_i − e_j, p_j) = {rhs} ns")
            }
            Failure::Table { cpu, task } => {
                write!(f, "CPU {cpu}: no dispatch table: {task} would miss a deadline in the slotted schedule")
            }
            Failure::Affinity { cpu } => write!(f, "CPU {cpu}: not in the task's affinity"),
        }
    }
}

/// A refused request: eq. 1, or the reason each CPU's trial failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection(pub Vec<Failure>);

impl Rejection {
    /// The first failure on each CPU's trial (eq. 1: one entry).
    pub fn codes(&self) -> Vec<u8> {
        self.0.iter().map(|f| f.code()).collect()
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|x| x.to_string()).collect();
        write!(f, "not schedulable: {}", parts.join("; "))
    }
}

/// F(x, y) = ceil(x / y) + 1 (paper 002 eq. 3), exact for any sign of x, y > 0.
pub fn f(x: i128, y: i128) -> i128 {
    -(-x).div_euclid(y) + 1
}

/// eqs. 2 and 3 for one CPU's set of reservations (e, p, seq). Returns the first failure.
pub fn eqs_2_3(cpu: u16, set: &[Job]) -> Result<(), Failure> {
    if set.is_empty() {
        return Ok(());
    }
    // Sorted so that the m-th (last) has the smallest period: descending periods, and
    // among equal periods the earlier reservation last.
    let mut s: Vec<&Job> = set.iter().collect();
    s.sort_by(|a, b| b.p.cmp(&a.p).then(b.seq.cmp(&a.seq)).then(b.task.cmp(&a.task)));
    let m = s.len() - 1; // 0-based index of the m-th
                         // eq. 2: p_m ≥ e_m + max_{i<m} e_i
    let max_before = s[..m].iter().map(|j| j.e).max().unwrap_or(0);
    let rhs2 = s[m].e as u128 + max_before as u128;
    if (s[m].p as u128) < rhs2 {
        return Err(Failure::Eq2 { cpu, lhs: s[m].p, rhs: rhs2 });
    }
    // eq. 3 for i < m
    for i in 0..m {
        let max_other = s.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, j)| j.e).max().unwrap_or(0);
        let mut rhs: i128 = s[i].e as i128 + max_other as i128;
        for j in &s[i + 1..] {
            rhs += j.e as i128 * f(s[i].p as i128 - j.e as i128, j.p as i128);
        }
        if (s[i].p as i128) < rhs {
            return Err(Failure::Eq3 { cpu, task: s[i].task, lhs: s[i].p, rhs: rhs as u128 });
        }
    }
    Ok(())
}

/// The broker: the admitted reservations, their placement, and the dispatch table.
#[derive(Clone, Debug)]
pub struct Broker {
    pub slot: Ns,
    pub frame: Ns,
    pub ncpus: u16,
    /// r = r_num / r_den, the real-time fraction of each CPU (eq. 1).
    pub r_num: u64,
    pub r_den: u64,
    pub mode: Mode,
    res: BTreeMap<TaskId, Reservation>,
    seq: u64,
}

impl Broker {
    /// `slot` > 0 divides `frame`; 0 < r_num ≤ r_den.
    pub fn new(slot: Ns, frame: Ns, ncpus: u16, r_num: u64, r_den: u64, mode: Mode) -> Broker {
        Broker { slot, frame, ncpus, r_num, r_den, mode, res: BTreeMap::new(), seq: 0 }
    }
    pub fn get(&self, task: TaskId) -> Option<&Reservation> {
        self.res.get(&task)
    }
    /// All reservations, by task.
    pub fn reservations(&self) -> impl Iterator<Item = &Reservation> {
        self.res.values()
    }
    pub fn is_empty(&self) -> bool {
        self.res.is_empty()
    }

    /// Checks a period: a positive multiple of the slot that divides the frame.
    pub fn check_period(&self, period: Ns) -> Result<(), String> {
        if period == 0 {
            return Err("period 0: a reservation needs a period greater than zero".into());
        }
        if period > self.frame {
            return Err(format!(
                "period {period} ns is longer than the dispatch table's frame of {} ns; periods must divide the frame",
                self.frame
            ));
        }
        if !period.is_multiple_of(self.slot) || !self.frame.is_multiple_of(period) {
            return Err(format!(
                "period {period} ns must be a multiple of the {} ns slot that divides the {} ns frame",
                self.slot, self.frame
            ));
        }
        Ok(())
    }

    /// Σ e_i / p_i over all reservations (except `without`), exactly: numerator over the
    /// frame (every period divides it).
    fn util_num(&self, without: Option<TaskId>) -> u128 {
        self.res.values().filter(|r| Some(r.task) != without).map(|r| r.e as u128 * (self.frame / r.p) as u128).sum()
    }

    /// Reservable CPU left: r·N − Σ e_i/p_i, in CPUs, as a reduced fraction.
    pub fn avail(&self) -> (u128, u128) {
        let den = self.r_den as u128 * self.frame as u128;
        let cap = self.r_num as u128 * self.ncpus as u128 * self.frame as u128;
        let used = self.util_num(None) * self.r_den as u128;
        let num = cap.saturating_sub(used);
        let g = gcd(num, den);
        (num / g, den / g)
    }

    fn jobs_on(&self, cpu: u16, without: Option<TaskId>) -> Vec<Job> {
        self.res
            .values()
            .filter(|r| r.cpu == cpu && Some(r.task) != without)
            .map(|r| Job { task: r.task, e: r.e, p: r.p, seq: r.seq })
            .collect()
    }

    /// The admission test for `e` every `p` for `task` (replacing its own reservation, if
    /// any, as `modify` does), on the CPUs in `affinity`: the CPU it would be placed on,
    /// or why not. Changes nothing.
    pub fn trial(&self, task: TaskId, e: Ns, p: Ns, affinity: CpuSet) -> Result<u16, Rejection> {
        // eq. 1: Σ e_i/p_i ≤ rN  ⇔  (Σ e_i·(F/p_i) + e·(F/p))·r_den ≤ r_num·N·F
        let num = self.util_num(Some(task)) + e as u128 * (self.frame / p) as u128;
        if num * self.r_den as u128 > self.r_num as u128 * self.ncpus as u128 * self.frame as u128 {
            let g = gcd(num, self.frame as u128);
            return Err(Rejection(vec![Failure::Eq1 { sum_num: num / g, sum_den: self.frame as u128 / g }]));
        }
        let seq = self.res.get(&task).map_or(self.seq, |r| r.seq);
        let mut why = Vec::new();
        for cpu in 0..self.ncpus {
            if !affinity.contains(vassal_core::CpuId(cpu)) {
                why.push(Failure::Affinity { cpu });
                continue;
            }
            let mut set = self.jobs_on(cpu, Some(task));
            set.push(Job { task, e, p, seq });
            if self.mode == Mode::Eqs {
                if let Err(f) = eqs_2_3(cpu, &set) {
                    why.push(f);
                    continue;
                }
            }
            if let Err(miss) = build_column(self.slot, self.frame, &set) {
                why.push(Failure::Table { cpu, task: miss.task });
                continue;
            }
            return Ok(cpu);
        }
        Err(Rejection(why))
    }

    /// Admits (or, for a task that has one, replaces) a reservation; on refusal nothing
    /// changes.
    pub fn admit(&mut self, task: TaskId, e: Ns, p: Ns, affinity: CpuSet, owner: u32) -> Result<u16, Rejection> {
        let cpu = self.trial(task, e, p, affinity)?;
        let seq = match self.res.get(&task) {
            Some(r) => r.seq,
            None => {
                self.seq += 1;
                self.seq - 1
            }
        };
        let owner = self.res.get(&task).map_or(owner, |r| r.owner);
        self.res.insert(task, Reservation { task, e, p, cpu, owner, seq });
        Ok(cpu)
    }

    pub fn remove(&mut self, task: TaskId) -> Option<Reservation> {
        self.res.remove(&task)
    }

    /// The dispatch table of the admitted reservations.
    pub fn table(&self) -> Table {
        let mut t = Table::empty(self.ncpus, self.slot, self.frame);
        for cpu in 0..self.ncpus {
            // Every admitted set passed the same construction at admission.
            if let Ok(col) = build_column(self.slot, self.frame, &self.jobs_on(cpu, None)) {
                t.cols[cpu as usize] = col;
            }
        }
        t
    }
}

pub fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}
