//! The `randres` behaviour (BVT paper 001 §5.1): a task with one deadline after another,
//! that asks a deadline scheduler for a reservation (s_i, t_i, d_i) for each and stops
//! at each deadline it cannot make. An experiment workload, run through the simulator's
//! behaviour registry ([`vassal_sim::behave`]).
//!
//! §5.1: "When a request is denied, it counts the deadline as missed and does not run
//! until its next reservation. If randres reaches its deadline time d_i but has not
//! received the desired quanta, it counts the deadline as missed and does not run again
//! until its next reservation." Deadlines made and missed go to the job metrics (a made
//! deadline is a met job, with its response time from s_i).
//!
//! The rules. Window i ends at deadline d_i = d_{i-1} + gap, gap uniform in whole mcu in
//! `gap` (the first window starts when the task starts); its actual need a_i is uniform
//! in whole mcu in `need`; its start s_i = d_{i-1} + f·gap (that is, (1 − f)·d_{i-1} +
//! f·d_i, f the `fussiness`); its prediction t_i = a_i + e_i, |e_i| uniform in
//! [0, 2·`error_mean`] with the sign `error` gives (a mixed error is positive or negative
//! with equal odds), at least 1 ns. At d_{i-1} it asks the scheduler named `reserve` (if
//! any) for the reservation (s_i, t_i, d_i); refused, the deadline counts as missed and
//! it sleeps until d_i. Otherwise it sleeps until s_i, then needs a_i of CPU; done by
//! d_i, the deadline is made (a met job), else at d_i it counts it missed and stops.
//!
//! Where the paper is silent: the request for window i is made at d_{i-1}, the earliest
//! point at which randres knows its previous deadline is over; s_i ≥ d_{i-1}, so the
//! request is never late. Without a `reserve` scheduler (BVT, FPS, WRR) it asks nothing
//! and simply runs from s_i.

use vassal_core::{Ns, Request, MS};
use vassal_sim::behave::{Behave, Cx, Factory, Next, Params, Rng};
use vassal_sim::scenario::ScenarioError;

/// The sign of the prediction error (§5.1: "overpredict, underpredict, and best guess,
/// corresponding to positive, negative and mixed e_i").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorMode {
    Over,
    Under,
    Mixed,
}

/// A randres task's parameters (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub mcu: Ns,
    /// Gap between deadlines, in whole mcu: [lo, hi].
    pub gap: (u64, u64),
    /// Actual need, in whole mcu: [lo, hi].
    pub need: (u64, u64),
    /// f, in millionths (0..1_000_000).
    pub fussiness_ppm: u64,
    pub error: ErrorMode,
    /// Mean magnitude of the prediction error, ns.
    pub error_mean: Ns,
    /// The scheduler to ask for reservations (None: it never asks, it just runs).
    pub reserve: Option<String>,
}

/// One window: the job's start s_i, actual need a_i, prediction t_i and deadline d_i.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
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

/// The timer of d_i.
const DEADLINE: u32 = 0;

/// Draws window i after the previous deadline `prev` (§5.1).
pub fn draw(spec: &Spec, prev: Ns, rng: &mut impl Rng) -> Window {
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

/// A randres task's progress.
struct Randres {
    spec: Spec,
    /// d_{i-1}, the end of the previous window (None before the first).
    prev: Option<Ns>,
    window: Window,
    stage: Stage,
}

impl Behave for Randres {
    fn step(&mut self, cx: &mut Cx<'_>) -> Next {
        let now = cx.now();
        loop {
            match self.stage {
                Stage::Window => {
                    let prev = self.prev.unwrap_or(now);
                    let w = draw(&self.spec, prev, cx.rng());
                    self.window = w;
                    if let Some(to) = &self.spec.reserve {
                        let req = Request::Deadline { start: w.start, need: w.predicted, deadline: w.deadline };
                        if !cx.send(to, req).is_ok() {
                            // Refused: the deadline is missed; nothing runs until the next window.
                            cx.job_missed();
                            self.prev = Some(w.deadline);
                            return Next::Block { until: w.deadline, voluntary: true };
                        }
                    }
                    self.stage = Stage::Start;
                    if w.start > now {
                        return Next::Block { until: w.start, voluntary: true };
                    }
                }
                Stage::Start => {
                    let w = self.window;
                    self.stage = Stage::Job;
                    cx.set_timer(DEADLINE, w.deadline);
                    return Next::Run { work: w.need, job: Some((w.start, w.deadline)) };
                }
                Stage::Job => {
                    // Done (recorded by the engine) or aborted: the window ends at d_i.
                    self.prev = Some(self.window.deadline);
                    self.stage = Stage::Window;
                    if self.window.deadline > now {
                        return Next::Block { until: self.window.deadline, voluntary: true };
                    }
                }
            }
        }
    }

    /// d_i: a job still short of its need misses its deadline and stops.
    fn timer(&mut self, _cx: &mut Cx<'_>, _key: u32) -> bool {
        self.stage == Stage::Job
    }
}

/// Makes `kind = "randres"` tasks.
pub struct RandresKind;

impl Factory for RandresKind {
    fn keys(&self) -> &'static [&'static str] {
        &["mcu", "gap", "need", "fussiness", "error", "error_mean", "reserve"]
    }

    fn build(&self, p: &Params<'_>) -> Result<Box<dyn Behave>, ScenarioError> {
        Ok(Box::new(Randres { spec: spec(p)?, prev: None, window: Window::default(), stage: Stage::Window }))
    }
}

/// Validates a randres table.
pub fn spec(p: &Params<'_>) -> Result<Spec, ScenarioError> {
    let mcu = p.dur("mcu")?.unwrap_or(10 * MS);
    if mcu == 0 {
        return Err(p.err("mcu", "mcu must be greater than 0"));
    }
    let range = |key: &str, default: (u64, u64)| -> Result<(u64, u64), ScenarioError> {
        match p.u64s(key) {
            None => Ok(default),
            Some(Ok(v)) if matches!(v.as_slice(), &[lo, hi] if lo <= hi && hi > 0 && hi.checked_mul(mcu).is_some_and(|n| n <= 1 << 50)) => {
                Ok((v[0], v[1]))
            }
            Some(_) => Err(p.err(key, format!("{key} must be two whole numbers of mcu [lo, hi] with lo <= hi, hi > 0 (e.g. [26, 34])"))),
        }
    };
    let gap = range("gap", (26, 34))?;
    let need = range("need", (6, 12))?;
    if gap.0 == 0 {
        return Err(p.err("gap", "gap must be at least 1 mcu"));
    }
    let fussiness_ppm = match p.number("fussiness")? {
        None => 0,
        Some(f) if (0.0..1.0).contains(&f) => ((f * 1e6).round() as u64).min(999_999),
        Some(f) => return Err(p.err("fussiness", format!("fussiness {f} must be at least 0 and below 1"))),
    };
    let error = match p.string("error")? {
        None | Some("mixed") => ErrorMode::Mixed,
        Some("over") => ErrorMode::Over,
        Some("under") => ErrorMode::Under,
        Some(other) => return Err(p.err("error", format!("unknown error mode '{other}'; expected over, under or mixed"))),
    };
    let error_mean = match p.number("error_mean")? {
        None => 0,
        Some(e) if (0.0..=1000.0).contains(&e) => (e * mcu as f64).round() as Ns,
        Some(e) => return Err(p.err("error_mean", format!("error_mean {e} must be between 0 and 1000 (mcu)"))),
    };
    let reserve = p.scheduler("reserve")?;
    Ok(Spec { mcu, gap, need, fussiness_ppm, error, error_mean, reserve })
}
