//! The reference: a deliberately simple scheduler of periodic jobs written from the
//! textbook definitions (Liu & Layland 1973 for RM and EDF; global scheduling on m
//! identical CPUs, e.g. Davis & Burns' survey, 2011), sharing no code with the engine or
//! the policies — only std. It takes plain numbers (integer ns) and is exact: zero
//! overheads, one-shot time, no clock granularity.
//!
//! Event-driven: time jumps to the next instant (a completion or a release, at most the
//! horizon); at each instant (1) every running job whose work is done completes (end =
//! now), (2) every release due now happens, (3) the decision is made (the rules are in the
//! header of `textbook.rs`). Invariants: at most m jobs run, each the first unfinished
//! job of its task; a swap in the decision strictly lowers the worst running primary key,
//! so a decision ends; clarity over speed (O(n log n) per instant).

use std::collections::VecDeque;

/// A periodic task: job k is released at `offset + k·period`, needs `exec`, and is due
/// `deadline` after its release. All in ns; `period` and `exec` > 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    pub period: u64,
    pub exec: u64,
    pub deadline: u64,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alg {
    /// Rate monotonic: the primary key is the period.
    Rm,
    /// Earliest deadline first: the primary key is the job's absolute deadline.
    Edf,
}

/// One released job and when it completed (None: unfinished at the horizon).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub task: usize,
    pub k: u64,
    pub release: u64,
    pub deadline: u64,
    pub end: Option<u64>,
}

/// A job's fate under the horizon rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Met,
    Missed,
    Pending,
}

impl Job {
    /// Met: ended by its deadline; missed: ended after it, or unfinished at `horizon`
    /// with its deadline ≤ `horizon`; pending: unfinished, due after the horizon.
    pub fn fate(&self, horizon: u64) -> Fate {
        match self.end {
            Some(end) if end <= self.deadline => Fate::Met,
            Some(_) => Fate::Missed,
            None if self.deadline <= horizon => Fate::Missed,
            None => Fate::Pending,
        }
    }
}

/// Every job released at or before `horizon` of `tasks` scheduled on `m` CPUs by `alg`,
/// in release order (ties by task index).
pub fn schedule(tasks: &[Task], m: usize, horizon: u64, alg: Alg) -> Vec<Job> {
    assert!(m > 0 && tasks.iter().all(|t| t.period > 0 && t.exec > 0), "bad input");
    let mut jobs: Vec<Job> = Vec::new();
    let mut left: Vec<u64> = Vec::new(); // work left of each job
    let mut queue: Vec<VecDeque<usize>> = vec![VecDeque::new(); tasks.len()]; // unfinished jobs of each task, in order
    let mut next_k: Vec<u64> = vec![0; tasks.len()];
    let mut running: Vec<usize> = Vec::new();
    let release_of = |i: usize, k: u64| tasks[i].offset + k * tasks[i].period;
    // (primary, release, task): smaller is more important.
    let key = |jobs: &[Job], j: usize| {
        let job = &jobs[j];
        let primary = match alg {
            Alg::Rm => tasks[job.task].period,
            Alg::Edf => job.deadline,
        };
        (primary, job.release, job.task)
    };
    let mut now = 0;
    loop {
        // (1) completions.
        running.retain(|&j| {
            if left[j] > 0 {
                return true;
            }
            jobs[j].end = Some(now);
            let front = queue[jobs[j].task].pop_front();
            assert_eq!(front, Some(j), "a job completed out of order");
            false
        });
        // (2) releases.
        for i in 0..tasks.len() {
            if release_of(i, next_k[i]) == now {
                let k = next_k[i];
                next_k[i] += 1;
                queue[i].push_back(jobs.len());
                jobs.push(Job { task: i, k, release: now, deadline: now + tasks[i].deadline, end: None });
                left.push(tasks[i].exec);
            }
        }
        // (3) the decision.
        let mut ready: Vec<usize> = queue.iter().filter_map(|q| q.front().copied()).filter(|j| !running.contains(j)).collect();
        ready.sort_by_key(|&j| std::cmp::Reverse(key(&jobs, j))); // the best last
        while running.len() < m {
            match ready.pop() {
                Some(j) => running.push(j),
                None => break,
            }
        }
        while let Some(&best) = ready.last() {
            let (w, &worst) = running.iter().enumerate().max_by_key(|&(_, &j)| key(&jobs, j)).expect("m > 0 CPUs are busy");
            if key(&jobs, best).0 >= key(&jobs, worst).0 {
                break;
            }
            ready.pop();
            running[w] = best;
            let at = ready.partition_point(|&j| key(&jobs, j) > key(&jobs, worst));
            ready.insert(at, worst);
        }
        // The next instant: a completion or a release, up to the horizon.
        let completion = running.iter().map(|&j| now + left[j]).min();
        let release = (0..tasks.len()).map(|i| release_of(i, next_k[i])).min();
        let Some(next) = completion.into_iter().chain(release).min().filter(|&t| t <= horizon) else { break };
        for &j in &running {
            left[j] -= next - now;
        }
        now = next;
    }
    jobs
}

/// (met, missed, pending) of task `i`'s jobs.
pub fn counts(jobs: &[Job], i: usize, horizon: u64) -> (u64, u64, u64) {
    let mut c = (0, 0, 0);
    for j in jobs.iter().filter(|j| j.task == i) {
        match j.fate(horizon) {
            Fate::Met => c.0 += 1,
            Fate::Missed => c.1 += 1,
            Fate::Pending => c.2 += 1,
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn task(period: u64, exec: u64) -> Task {
        Task { period: period * MS, exec: exec * MS, deadline: period * MS, offset: 0 }
    }

    /// Task `i`'s (release, end) in ms, None for unfinished.
    fn ends(jobs: &[Job], i: usize) -> Vec<(u64, Option<u64>)> {
        jobs.iter().filter(|j| j.task == i).map(|j| (j.release / MS, j.end.map(|e| e / MS))).collect()
    }

    #[test]
    fn rm_on_one_cpu_finishes_b_at_its_deadlines() {
        // Issue 16's first case: A (10, 5), B (20, 10), 60 ms. A runs [0,5) [10,15) ...;
        // B runs [5,10) [15,20): done at 20, its deadline; again at 40; the jobs released
        // at 60 are pending (due at 70 and 80).
        let jobs = schedule(&[task(10, 5), task(20, 10)], 1, 60 * MS, Alg::Rm);
        assert_eq!(
            ends(&jobs, 0),
            vec![(0, Some(5)), (10, Some(15)), (20, Some(25)), (30, Some(35)), (40, Some(45)), (50, Some(55)), (60, None)]
        );
        assert_eq!(ends(&jobs, 1), vec![(0, Some(20)), (20, Some(40)), (40, Some(60)), (60, None)]);
        assert_eq!(counts(&jobs, 0, 60 * MS), (6, 0, 1));
        assert_eq!(counts(&jobs, 1, 60 * MS), (3, 0, 1));
    }

    #[test]
    fn edf_on_one_cpu_issue_16s_second_case() {
        // Issue 16's second case: A (3, 2) and B (5, 2) on one CPU, U = 1.067, 30 ms.
        // Worked by hand: A0 [0,2) B0 [2,4) (A1 due 6 does not preempt B0 due 5) A1 [4,6)
        // A2 [6,8) B1 [8,10) A3 [10,12). At 12 A4 (due 15, released 12) and B2 (due 15,
        // released 10) tie on the deadline: the earlier release, B2, goes first [12,14)
        // (met); A4 runs [14,16): late at 15, it keeps running (A5, released at 15, waits
        // behind it) and ends at 16, missed by 1 ms. (With ties by task index instead,
        // A4 would run first and B2 would be the job due at 15 that ends at 16.) Then A5
        // [16,18) B3 [18,20) A6 [20,22) (due 21, missed) A7 [22,24) B4 [24,26) (due 25, missed) A8 [26,28)
        // (due 27, missed); at 28 B5 (due 30, released 25) before A9 (due 30, released
        // 27): B5 [28,30); A9 is unfinished at 30, due at 30: missed. The jobs released at
        // 30 are pending.
        let jobs = schedule(&[task(3, 2), task(5, 2)], 1, 30 * MS, Alg::Edf);
        let a = [2, 6, 8, 12, 16, 18, 22, 24, 28].map(Some).into_iter().chain([None, None]);
        assert_eq!(ends(&jobs, 0), (0..).step_by(3).zip(a).collect::<Vec<_>>());
        let b = [4, 10, 14, 20, 26, 30].map(Some).into_iter().chain([None]);
        assert_eq!(ends(&jobs, 1), (0..).step_by(5).zip(b).collect::<Vec<_>>());
        assert_eq!(counts(&jobs, 0, 30 * MS), (6, 4, 1));
        assert_eq!(counts(&jobs, 1, 30 * MS), (5, 1, 1));
    }

    #[test]
    fn edf_keeps_a_late_jobs_deadline() {
        // One CPU, EDF. A (period 10, exec 7, deadline 5) and B (offset 4, exec 2,
        // deadline 3, so due at 7). A0 runs from 0; B0 released at 4 (due 7) waits (5 is
        // earlier). At 5 A0 is late but keeps its deadline 5, still earlier than 7: it runs
        // to 7, and B0 runs [7, 9), missed. (Were A0's deadline postponed to 15 at 5, B0
        // would preempt it then.)
        let t = [
            Task { period: 10 * MS, exec: 7 * MS, deadline: 5 * MS, offset: 0 },
            Task { period: 10 * MS, exec: 2 * MS, deadline: 3 * MS, offset: 4 * MS },
        ];
        let jobs = schedule(&t, 1, 10 * MS, Alg::Edf);
        assert_eq!(ends(&jobs, 0), vec![(0, Some(7)), (10, None)]);
        assert_eq!(ends(&jobs, 1), vec![(4, Some(9))]);
    }

    #[test]
    fn an_equal_deadline_does_not_preempt_and_the_earlier_release_goes_first() {
        // EDF, one CPU: A (release 0, exec 4, due 10), B released at 2 due 10 (offset 2,
        // deadline 8): equal deadlines, B waits. C released at 0 with deadline 10 too but
        // task index 2: A and C tie on (deadline, release), A (lower index) goes first;
        // after A, B and C wait with equal deadlines: C was released earlier, so C.
        let t = [
            Task { period: 100 * MS, exec: 4 * MS, deadline: 10 * MS, offset: 0 },
            Task { period: 100 * MS, exec: MS, deadline: 8 * MS, offset: 2 * MS },
            Task { period: 100 * MS, exec: MS, deadline: 10 * MS, offset: 0 },
        ];
        let jobs = schedule(&t, 1, 20 * MS, Alg::Edf);
        assert_eq!(ends(&jobs, 0), vec![(0, Some(4))]);
        assert_eq!(ends(&jobs, 2), vec![(0, Some(5))]);
        assert_eq!(ends(&jobs, 1), vec![(2, Some(6))]);
        // Under RM with equal periods the same: no preemption, then release order.
        let jobs = schedule(&t, 1, 20 * MS, Alg::Rm);
        assert_eq!((ends(&jobs, 0), ends(&jobs, 2), ends(&jobs, 1)), (vec![(0, Some(4))], vec![(0, Some(5))], vec![(2, Some(6))]));
    }

    #[test]
    fn global_edf_on_two_cpus_with_a_tie() {
        // Two CPUs. A (10, 6), B (10, 6), C (offset 1, exec 3, deadline 9 → due 10, period
        // 10). At 0 A and B run. At 1 C is released due 10: equal to the worst running
        // (A, B both due 10), not strictly earlier: no preemption. At 6 A and B complete
        // (both at once); C runs [6, 9): met. Under RM (all periods 10) the same.
        let t = [task(10, 6), task(10, 6), Task { period: 10 * MS, exec: 3 * MS, deadline: 9 * MS, offset: MS }];
        for alg in [Alg::Edf, Alg::Rm] {
            let jobs = schedule(&t, 2, 10 * MS, alg);
            assert_eq!(ends(&jobs, 0)[0], (0, Some(6)), "{alg:?}");
            assert_eq!(ends(&jobs, 1)[0], (0, Some(6)), "{alg:?}");
            assert_eq!(ends(&jobs, 2), vec![(1, Some(9))], "{alg:?}");
        }
        // With C due at 9 (deadline 8) it preempts the worst running job by full key:
        // A and B both (10, 0, _), B has the larger index: B is preempted at 1, resumes at
        // 4 when C completes, and ends at 9.
        let t = [task(10, 6), task(10, 6), Task { period: 10 * MS, exec: 3 * MS, deadline: 8 * MS, offset: MS }];
        let jobs = schedule(&t, 2, 10 * MS, Alg::Edf);
        assert_eq!((ends(&jobs, 0)[0], ends(&jobs, 1)[0], ends(&jobs, 2)[0]), ((0, Some(6)), (0, Some(9)), (1, Some(4))));
    }

    #[test]
    fn simultaneous_releases_each_take_a_cpu_or_preempt() {
        // Two CPUs: A (10, 5), B (10, 2), C (40, 20). B ends at 2, C starts; A ends at 5.
        // At 10 A and B release together with one CPU idle: A takes it, B (due 20, period
        // 10) preempts C (due 40, period 40) and ends at 12; C resumes at 12, is preempted
        // again at 20 by B (A takes the CPU idle since 15), resumes at 22 with 4 ms left
        // and ends at 26, met.
        for alg in [Alg::Rm, Alg::Edf] {
            let jobs = schedule(&[task(10, 5), task(10, 2), task(40, 20)], 2, 40 * MS, alg);
            assert_eq!(ends(&jobs, 1)[..3], [(0, Some(2)), (10, Some(12)), (20, Some(22))], "{alg:?}");
            assert_eq!(ends(&jobs, 0)[..3], [(0, Some(5)), (10, Some(15)), (20, Some(25))], "{alg:?}");
            assert_eq!(ends(&jobs, 2), vec![(0, Some(26)), (40, None)], "{alg:?}");
        }
    }

    #[test]
    fn global_rm_dhalls_effect() {
        // Dhall's effect on 2 CPUs: two light tasks (period 10, exec 2) and a heavy one
        // (period 11, exec 10): RM runs the light ones first; the heavy job starts at 2 and
        // cannot end before 12 > 11: missed, though the utilisation is only 1.31 of 2. At
        // the horizon 11 it is unfinished and due: missed; the job released at 11 counts,
        // pending.
        let jobs = schedule(&[task(10, 2), task(10, 2), task(11, 10)], 2, 11 * MS, Alg::Rm);
        assert_eq!(ends(&jobs, 2), vec![(0, None), (11, None)]);
        assert_eq!(counts(&jobs, 2, 11 * MS), (0, 1, 1));
        // At 10 the light jobs return: one takes the idle CPU, the other preempts the heavy
        // job (period 10 < 11), which resumes at 12 and ends at 14; its next job
        // (released 11) waits behind it, and is pending at 20 (due 22).
        let jobs = schedule(&[task(10, 2), task(10, 2), task(11, 10)], 2, 20 * MS, Alg::Rm);
        assert_eq!(ends(&jobs, 2), vec![(0, Some(14)), (11, None)]);
        assert_eq!(counts(&jobs, 2, 20 * MS), (0, 1, 1));
    }

    #[test]
    fn a_late_job_delays_its_successor_and_keeps_its_deadline() {
        // One task (4, 6) alone on one CPU: job k ends at 6(k+1); job 1 (released 4, due
        // 8) waits behind job 0 and runs [6, 12). At horizon 13: jobs released 0, 4, 8,
        // 12; ends 6, 12; job 2 (due 12) unfinished and missed; job 3 (due 16) pending.
        let jobs = schedule(&[task(4, 6)], 1, 13 * MS, Alg::Edf);
        assert_eq!(ends(&jobs, 0), vec![(0, Some(6)), (4, Some(12)), (8, None), (12, None)]);
        assert_eq!(jobs.iter().map(|j| j.deadline / MS).collect::<Vec<_>>(), vec![4, 8, 12, 16]);
        assert_eq!(counts(&jobs, 0, 13 * MS), (0, 3, 1));
        // On two CPUs the same: a task's jobs never run in parallel.
        assert_eq!(schedule(&[task(4, 6)], 2, 13 * MS, Alg::Edf), jobs);
    }

    #[test]
    fn offsets_and_the_horizon() {
        // A job completing exactly at the horizon completes; one released at it counts.
        let t = [Task { period: 5 * MS, exec: 2 * MS, deadline: 5 * MS, offset: 3 * MS }];
        let jobs = schedule(&t, 1, 13 * MS, Alg::Rm);
        assert_eq!(ends(&jobs, 0), vec![(3, Some(5)), (8, Some(10)), (13, None)]);
        let jobs = schedule(&t, 1, 10 * MS, Alg::Rm);
        assert_eq!(ends(&jobs, 0), vec![(3, Some(5)), (8, Some(10))]);
    }
}
