//! The `randres` behaviour (BVT paper 001 §5.1): a task with one deadline after another,
//! that asks a deadline scheduler for a reservation (s_i, t_i, d_i) for each and stops
//! at each deadline it cannot make. See [`crate::model::Randres`] for the rules.
//!
//! §5.1: "When a request is denied, it counts the deadline as missed and does not run
//! until its next reservation. If randres reaches its deadline time d_i but has not
//! received the desired quanta, it counts the deadline as missed and does not run again
//! until its next reservation." Deadlines made and missed go to the job metrics (a made
//! deadline is a met job, with its response time from s_i).
//!
//! Where the paper is silent: the request for window i is made at d_{i-1} (the end of
//! the previous window; the task's start for the first), the earliest point at which
//! randres knows its previous deadline is over; s_i ≥ d_{i-1}, so the request is never
//! late. Without a `reserve` scheduler (BVT, FPS, WRR) it asks nothing and simply runs
//! from s_i.

use rand::Rng;
use vassal_core::{Block, Ns, Request, TaskState};

use super::{Ev, Sim, Step, Timer, Work};
use crate::model::{Behaviour, ErrorMode, Randres};

/// One window: the job's start s_i, actual need a_i, prediction t_i and deadline d_i.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Window {
    pub start: Ns,
    pub need: Ns,
    pub predicted: Ns,
    pub deadline: Ns,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    /// At d_{i-1}: draw window i (and ask for its reservation).
    #[default]
    Window,
    /// At s_i: the job starts.
    Start,
    /// The job is running (or done, or aborted): next, wait for d_i.
    Job,
}

/// A randres task's progress.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct State {
    /// d_{i-1}, the end of the previous window (None before the first).
    prev: Option<Ns>,
    window: Window,
    stage: Stage,
}

/// Draws window i after the previous deadline `prev` (§5.1).
pub(super) fn draw(spec: &Randres, prev: Ns, rng: &mut impl Rng) -> Window {
    let gap = rng.gen_range(spec.gap.0..=spec.gap.1) * spec.mcu;
    let need = rng.gen_range(spec.need.0..=spec.need.1) * spec.mcu;
    // s_i = (1 − f)·d_{i−1} + f·d_i = d_{i−1} + f·gap, f in millionths (exact integers).
    let start = prev + (gap as u128 * spec.fussiness_ppm as u128 / 1_000_000) as Ns;
    let deadline = prev + gap;
    // |e_i| uniform in [0, 2·mean], so its mean is `error_mean`. Both draws are made
    // whatever the mode and mean, so that runs differing only in them see the same
    // windows and needs (common random numbers).
    let magnitude = rng.gen_range(0..=2 * spec.error_mean);
    let coin: bool = rng.gen();
    let positive = match spec.error {
        ErrorMode::Over => true,
        ErrorMode::Under => false,
        ErrorMode::Mixed => coin,
    };
    let predicted = if positive { need + magnitude } else { need.saturating_sub(magnitude).max(1) };
    Window { start, need, predicted, deadline }
}

impl Sim {
    /// What randres task `i` does next.
    pub(super) fn step_randres(&mut self, i: usize) -> Step {
        let Behaviour::Randres(spec) = &self.sc.tasks[i].behaviour else { unreachable!() };
        let spec = spec.clone();
        let now = self.now;
        loop {
            let st = self.tasks[i].randres;
            match st.stage {
                Stage::Window => {
                    let prev = st.prev.unwrap_or(now);
                    let w = draw(&spec, prev, &mut self.tasks[i].rng);
                    self.tasks[i].randres.window = w;
                    if let Some(to) = &spec.reserve {
                        let req = Request::Deadline { start: w.start, need: w.predicted, deadline: w.deadline };
                        if !self.send(i, to, req).is_ok() {
                            // Refused: the deadline is missed; nothing runs until the next window.
                            self.metrics.job_missed(i);
                            let r = &mut self.tasks[i].randres;
                            r.prev = Some(w.deadline);
                            return Step::Block { voluntary: true, wake_at: Some(w.deadline), hand_off: None };
                        }
                    }
                    self.tasks[i].randres.stage = Stage::Start;
                    if w.start > now {
                        return Step::Block { voluntary: true, wake_at: Some(w.start), hand_off: None };
                    }
                }
                Stage::Start => {
                    let w = st.window;
                    let t = &mut self.tasks[i];
                    t.remaining = w.need;
                    t.work = Work::Job { release: w.start, deadline: w.deadline };
                    t.randres.stage = Stage::Job;
                    self.set_timer(w.deadline, Timer::Randres(i), Ev::RandresDeadline(i));
                    return Step::Run;
                }
                Stage::Job => {
                    // Done (recorded by `complete`) or aborted: the window ends at d_i.
                    let r = &mut self.tasks[i].randres;
                    r.prev = Some(st.window.deadline);
                    r.stage = Stage::Window;
                    if st.window.deadline > now {
                        return Step::Block { voluntary: true, wake_at: Some(st.window.deadline), hand_off: None };
                    }
                }
            }
        }
    }

    /// d_i of randres task `i`'s job: a job still short of its need misses its deadline
    /// and stops.
    pub(super) fn randres_deadline(&mut self, i: usize) {
        let t = &self.tasks[i];
        if t.randres.stage != Stage::Job || !matches!(t.work, Work::Job { .. }) {
            return; // done already
        }
        let id = t.id;
        match self.drv.disp.state(id) {
            TaskState::Running(c) => {
                let c = c.0 as usize;
                self.settle(c);
                if self.tasks[i].remaining > 0 {
                    self.abandon(i);
                }
                // Complete (made exactly at d_i) or abandoned: on to the next window.
                self.after_burst(i, c);
            }
            TaskState::Runnable => {
                // Preempted at the very instant its need was met (e.g. by its reservation
                // ending at d_i), the job is done; otherwise it is abandoned.
                if self.tasks[i].remaining > 0 {
                    self.abandon(i);
                } else {
                    self.complete(i);
                }
                match self.step(i) {
                    Step::Run | Step::Yield => {} // the next job starts at once
                    Step::Block { voluntary, wake_at, .. } => {
                        self.settle_all();
                        self.drv.disp.block(self.now, id, Block { voluntary });
                        self.metrics.blocked(i);
                        self.mark(i, super::MarkKind::Block);
                        self.arm_wait(i, voluntary, wake_at);
                    }
                    Step::Exit => self.exit(i),
                }
            }
            TaskState::Blocked | TaskState::Dead => {}
        }
    }

    /// The job in progress misses its deadline: counted, and its remaining need dropped.
    fn abandon(&mut self, i: usize) {
        self.metrics.job_missed(i);
        let t = &mut self.tasks[i];
        t.remaining = 0;
        t.work = Work::Plain;
    }
}
