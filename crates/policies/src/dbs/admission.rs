//! Admission control for deadline-based scheduling (DBS, BVT paper 001 §5), kept apart
//! from the dispatching policy ([`crate::dbs`]), which only runs what this module accepted.
//!
//! §5: "a thread requests a reservation in the form (s, t, d), requesting t units of CPU
//! between times s and d. The scheduler accepts the request if and only if it is
//! feasible to satisfy it and all previous requests accepted at that point."
//!
//! Rules:
//! - **Validation** ([`validate`]): a request is refused, with a reason, when its need `t`
//!   is 0, its deadline is not after its start (`d <= s`), its need exceeds its window
//!   (`t > d - s`), its start is in the past (`s < now`), or a time is beyond
//!   [`MAX_TIME`] (an overflowed or absurd time). Times are integer ns, so there is no
//!   NaN to refuse.
//! - **Feasibility** ([`feasible`]): on one CPU, a set of jobs with release times
//!   `r_j`, remaining needs `c_j` and deadlines `d_j` can be run preemptively so that every
//!   one gets its need by its deadline if and only if, for every interval `[a, b]` with
//!   `a` one of the release times and `b` one of the deadlines, the needs of the jobs
//!   lying wholly inside it fit: `Σ_{a ≤ r_j, d_j ≤ b} c_j ≤ b − a` (the processor-demand
//!   condition; earliest-deadline-first then meets every deadline — Horn 1974). An
//!   accepted reservation that has started counts from `now` with what is left of its
//!   need. The test is exact, in integers (sums in u128), O(n²) for n reservations.
//! - A refused request leaves the set untouched: the caller adds the reservation only
//!   after `feasible` said yes.
//!
//! The caller's accounting of a running task's use may lag the clock; its remaining need
//! is then overstated, which can only refuse more, never accept an infeasible set.

use vassal_core::Ns;

/// The largest start or deadline accepted (2^62 ns, about 146 years): later times are
/// treated as an overflowed computation and refused.
pub const MAX_TIME: Ns = 1 << 62;

/// A reservation as the feasibility test sees it: `need` ns still owed between `start`
/// and `deadline` (absolute ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    pub start: Ns,
    pub need: Ns,
    pub deadline: Ns,
}

/// Checks a request `(start, need, deadline)` made at `now` on its own, before any
/// feasibility arithmetic. The error says what is wrong, with the numbers.
pub fn validate(now: Ns, start: Ns, need: Ns, deadline: Ns) -> Result<(), String> {
    if start > MAX_TIME || deadline > MAX_TIME {
        return Err(format!("start {start} ns or deadline {deadline} ns is beyond {MAX_TIME} ns (an overflowed time?)"));
    }
    if need == 0 {
        return Err("a need of 0 ns is not a reservation".into());
    }
    if deadline <= start {
        return Err(format!("deadline {deadline} ns is not after start {start} ns"));
    }
    if need > deadline - start {
        return Err(format!(
            "need {need} ns exceeds the window of {} ns between start {start} ns and deadline {deadline} ns",
            deadline - start
        ));
    }
    if start < now {
        return Err(format!("start {start} ns is in the past (now {now} ns)"));
    }
    Ok(())
}

/// Whether `set` can all be met on one CPU from `now` on (see the module
/// documentation). Entries whose deadline has passed or whose need is 0 are ignored.
/// The error names the first overloaded interval found.
pub fn feasible(now: Ns, set: &[Demand]) -> Result<(), String> {
    // (release, need, deadline), released no earlier than now.
    let mut jobs: Vec<(Ns, Ns, Ns)> =
        set.iter().filter(|d| d.need > 0 && d.deadline > now).map(|d| (d.start.max(now), d.need, d.deadline)).collect();
    // In deadline order, so that one pass per candidate interval start sums the demand
    // of every interval [a, d_j].
    jobs.sort_by_key(|&(r, _, d)| (d, r));
    let mut starts: Vec<Ns> = jobs.iter().map(|j| j.0).collect();
    starts.sort_unstable();
    starts.dedup();
    for &a in &starts {
        let mut demand: u128 = 0;
        for &(r, c, d) in &jobs {
            if r < a {
                continue;
            }
            demand += c as u128;
            // d >= r >= a here (validated requests have d > s).
            let room = d.saturating_sub(a) as u128;
            if demand > room {
                return Err(format!(
                    "infeasible: {demand} ns of reserved CPU would be due between {a} ns and {d} ns, a window of {room} ns"
                ));
            }
        }
    }
    Ok(())
}

/// Validates `request` and tests it together with the accepted `set`.
pub fn admit(now: Ns, set: &[Demand], request: Demand) -> Result<(), String> {
    validate(now, request.start, request.need, request.deadline)?;
    let mut all = Vec::with_capacity(set.len() + 1);
    all.extend_from_slice(set);
    all.push(request);
    feasible(now, &all)
}
