//! Task behaviours: what each task does next ([`Sim::step`]: bursts, jobs, frames,
//! phases of a script, interrupts), what happens when a burst completes, when a task
//! wakes, blocks (with hand-off), exits or turns into a runaway loop, job releases,
//! interrupt delivery, and the messages tasks send to their schedulers.
//!
//! Invariant: a task's `wait` says why it is not runnable (`Wait::None` exactly when
//! the dispatcher has it runnable or running), and all its random draws come from its
//! own RNG, in the order its behaviour makes them.

use std::collections::VecDeque;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::Distribution;
use vassal_core::{Block, CpuId, Job, Ns, Preempt, Reply, Request, Sender, TaskId, TaskState, Wake};

use super::queue::{Ev, Timer};
use super::{MarkKind, Sim, FOREVER};
use crate::behave::Next;
use crate::model::{Behaviour, ClockMode, Dist, Phase, SyncOp};

/// What the current burst of work is for, to record its response when it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Work {
    Plain,
    Job {
        release: Ns,
        deadline: Ns,
    },
    /// A player's frame, to be shown at `ideal`.
    Frame {
        ideal: Ns,
    },
    Burst {
        start: Ns,
    },
    Irq {
        arrival: Ns,
    },
}

/// What a task not running or runnable waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wait {
    None,
    NotStarted,
    Timer {
        voluntary: bool,
    },
    Job,
    Interrupt,
    /// A mutex, condition variable or barrier (engine/sync.rs).
    Sync,
    /// A disk transfer, queued or under way ([`crate::disk`]).
    Io,
    Exited,
}

pub(super) struct SimTask {
    pub(super) id: TaskId,
    pub(super) rng: ChaCha8Rng,
    pub(super) remaining: Ns,
    pub(super) work: Work,
    pub(super) wait: Wait,
    pub(super) phase: usize,
    pub(super) timer_target: Option<Ns>,
    pub(super) jobs: VecDeque<(Ns, Ns)>,
    pub(super) released: u64,
    pub(super) irqs: VecDeque<Ns>,
    pub(super) looping: bool,
    /// Its current block is a long (terminal) wait, not a short I/O (paper 004 §2).
    pub(super) waiting: bool,
    /// Per script phase: how many times a `times` phase has sent the script back.
    pub(super) loops: Vec<u64>,
    /// During a `RunWall` phase: the real time at which it ends.
    pub(super) run_until: Option<Ns>,
    /// The last expiry of each of the task's rt-app timers (`RtTimer`), by number.
    pub(super) rt_timers: Vec<Option<Ns>>,
    /// An rt-app thread's iteration under way is a job released here: the expiry its
    /// last timer wait was for (None: its start; docs/jobs.md).
    pub(super) rt_release: Option<Ns>,
    /// A disk transfer the task asked for as it blocked, not yet queued: (drive, time).
    pub(super) io: Option<(usize, Ns)>,
}

/// What a task does next, decided by its behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Run,
    Yield,
    Block { voluntary: bool, wake_at: Option<Ns>, hand_off: Option<usize> },
    Exit,
}

pub(super) fn sample(d: &Dist, rng: &mut ChaCha8Rng) -> Ns {
    match *d {
        Dist::Const(v) => v,
        Dist::Uniform(lo, hi) => rng.gen_range(lo.min(hi)..=hi.max(lo)),
        Dist::Exp(mean) => {
            if mean == 0 {
                return 0;
            }
            let e = rand_distr::Exp1;
            let x: f64 = e.sample(rng);
            (x * mean as f64).round().min(u64::MAX as f64 / 2.0) as Ns
        }
        Dist::Normal(mean, sd) => {
            let z: f64 = rand_distr::StandardNormal.sample(rng);
            (mean as f64 + z * sd as f64).round().max(0.0) as Ns
        }
    }
}

pub(super) fn rng_for(seed: u64, salt: u64, index: u64) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index);
    r
}

impl Sim {
    /// Sends a message from task `i` to the scheduler named `to`, about task `about`
    /// (None: task `i` itself).
    pub(super) fn send(&mut self, i: usize, to: &str, req: Request) -> Reply {
        self.send_about(i, None, to, req)
    }

    pub(super) fn send_about(&mut self, i: usize, about: Option<usize>, to: &str, req: Request) -> Reply {
        let spec = &self.sc.tasks[i];
        let from = Sender { task: Some(self.tasks[i].id), uid: spec.uid };
        let subject = self.tasks[about.unwrap_or(i)].id;
        let sched = match req {
            Request::Leave => self.drv.disp.owner(self.tasks[i].id),
            _ => self.drv.disp.lookup(to),
        };
        self.metrics.tasks[i].messages += 1;
        self.kernel.syscalls += 1;
        let reply = match sched {
            Some(s) => {
                self.settle_all();
                self.drv.disp.message(self.now, s, from, subject, &req)
            }
            None => Reply::refused(format!("no scheduler named '{to}' is loaded")),
        };
        if let Reply::Refused(why) = &reply {
            self.metrics.tasks[i].refused_messages += 1;
            let name = self.sc.tasks[i].name.clone();
            self.metrics.note(self.now, format!("{name}: {req:?} to '{to}' refused: {why}"));
        }
        reply
    }

    // ----- task behaviour -----

    /// Decides what task `i` does next; loads its next burst of work when it is `Run`.
    /// A burst that is a job (a periodic job, a player's frame, a registered behaviour's
    /// job) is announced to the task's scheduler ([`vassal_core::Policy::on_job`]) before
    /// the task goes on (here) or wakes (with the wake, [`Sim::resume_with`];
    /// docs/jobs.md).
    pub(super) fn step(&mut self, i: usize) -> Step {
        let step = self.next_step(i);
        if step == Step::Run && self.drv.disp.state(self.tasks[i].id) != TaskState::Blocked {
            if let Some(job) = self.job_of(i) {
                self.drv.disp.job(self.now, self.tasks[i].id, job);
            }
        }
        step
    }

    /// The job task `i`'s loaded burst is, if it is one.
    fn job_of(&self, i: usize) -> Option<Job> {
        match (self.tasks[i].work, &self.sc.tasks[i].behaviour) {
            (Work::Job { release, deadline }, _) => Some(Job { release, deadline }),
            (Work::Frame { ideal }, &Behaviour::Player { period, late_after, .. }) => {
                Some(Job { release: ideal.saturating_sub(period), deadline: ideal.saturating_add(late_after) })
            }
            _ => None,
        }
    }

    fn next_step(&mut self, i: usize) -> Step {
        let now = self.now;
        self.tasks[i].waiting = false;
        if self.tasks[i].looping {
            let t = &mut self.tasks[i];
            t.remaining = FOREVER;
            t.work = Work::Plain;
            return Step::Run;
        }
        let behaviour = &self.sc.tasks[i].behaviour;
        let t = &mut self.tasks[i];
        match behaviour {
            Behaviour::Cpu { work } => {
                if t.phase == 0 {
                    t.phase = 1;
                    t.remaining = work.unwrap_or(FOREVER);
                    t.work = Work::Plain;
                    Step::Run
                } else {
                    Step::Exit
                }
            }
            Behaviour::Periodic { exec, jobs, .. } => {
                if let Some(&(release, deadline)) = t.jobs.front() {
                    t.remaining = sample(exec, &mut t.rng);
                    t.work = Work::Job { release, deadline };
                    Step::Run
                } else if jobs.is_some_and(|n| t.released >= n) {
                    Step::Exit
                } else {
                    t.wait = Wait::Job;
                    Step::Block { voluntary: true, wake_at: None, hand_off: None }
                }
            }
            Behaviour::Player { period, offset, exec, read, .. } => {
                // phase 2: the decoded frame waits for its display time (the next ideal
                // time minus one period); phase 3: the next frame's data has been read;
                // otherwise read it (if the player reads from a drive), then decode it.
                if t.phase == 2 {
                    t.phase = 1;
                    let show = t.timer_target.map_or(now, |next| next - period);
                    return Step::Block { voluntary: true, wake_at: Some(show), hand_off: None };
                }
                if let Some((disk, d)) = read {
                    if t.phase != 3 {
                        t.phase = 3;
                        let service = sample(d, &mut t.rng);
                        let k = self.disk_index.get(disk).copied().unwrap_or(0);
                        self.tasks[i].io = Some((k, service));
                        return Step::Block { voluntary: true, wake_at: None, hand_off: None };
                    }
                }
                let t = &mut self.tasks[i];
                t.phase = 1;
                let ideal = *t.timer_target.get_or_insert(now.saturating_add(*offset).saturating_add(*period));
                t.remaining = sample(exec, &mut t.rng);
                t.work = Work::Frame { ideal };
                Step::Run
            }
            Behaviour::Interactive { burst, think } => {
                t.phase ^= 1;
                if t.phase == 1 {
                    t.remaining = sample(burst, &mut t.rng);
                    t.work = Work::Burst { start: now };
                    Step::Run
                } else {
                    let wake_at = now.saturating_add(sample(think, &mut t.rng));
                    Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off: None }
                }
            }
            Behaviour::Io { run, sleep, voluntary, disk: Some(disk) } => {
                t.phase ^= 1;
                if t.phase == 1 {
                    t.remaining = sample(run, &mut t.rng);
                    t.work = Work::Plain;
                    Step::Run
                } else {
                    let service = sample(sleep, &mut t.rng);
                    let k = self.disk_index.get(disk).copied().unwrap_or(0);
                    self.tasks[i].io = Some((k, service));
                    Step::Block { voluntary: *voluntary, wake_at: None, hand_off: None }
                }
            }
            Behaviour::Io { run, sleep, voluntary, disk: None } => {
                t.phase ^= 1;
                if t.phase == 1 {
                    t.remaining = sample(run, &mut t.rng);
                    t.work = Work::Plain;
                    Step::Run
                } else {
                    let wake_at = now.saturating_add(sample(sleep, &mut t.rng));
                    Step::Block { voluntary: *voluntary, wake_at: Some(wake_at), hand_off: None }
                }
            }
            Behaviour::Handler { work, .. } => {
                if let Some(arrival) = t.irqs.pop_front() {
                    t.remaining = sample(work, &mut t.rng);
                    t.work = Work::Irq { arrival };
                    Step::Run
                } else {
                    t.wait = Wait::Interrupt;
                    Step::Block { voluntary: true, wake_at: None, hand_off: None }
                }
            }
            Behaviour::Script { .. } => self.step_script(i),
            Behaviour::Other(_) => self.step_other(i),
        }
    }

    pub(super) fn step_script(&mut self, i: usize) -> Step {
        let sc = Arc::clone(&self.sc);
        let Behaviour::Script { phases, repeat } = &sc.tasks[i].behaviour else { unreachable!() };
        let (len, repeat) = (phases.len(), *repeat);
        // A script whose whole loop takes no time would spin forever at one instant.
        for _ in 0..=2 * len {
            let now = self.now;
            let t = &mut self.tasks[i];
            if t.phase >= len {
                if !repeat || len == 0 {
                    return Step::Exit;
                }
                t.phase = 0;
            }
            if let Some(tr) = &mut self.trace {
                tr.steps.push(super::StepMark { at: now, task: i, step: t.phase, expiry: None });
            }
            let t = &mut self.tasks[i];
            let phase = &phases[t.phase];
            t.phase += 1;
            t.run_until = None;
            match phase {
                Phase::Run(d) => {
                    t.remaining = sample(d, &mut t.rng);
                    t.work = Work::Plain;
                    return Step::Run;
                }
                Phase::Sleep(d) => {
                    let wake_at = now.saturating_add(sample(d, &mut t.rng));
                    return Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off: None };
                }
                Phase::Io { disk, time } => {
                    let service = sample(time, &mut t.rng);
                    // Drives are indexed when the simulation is built: every name is there.
                    let d = self.disk_index.get(disk).copied().unwrap_or(0);
                    self.tasks[i].io = Some((d, service));
                    return Step::Block { voluntary: true, wake_at: None, hand_off: None };
                }
                Phase::Terminal(d) => {
                    t.waiting = true;
                    let wake_at = now.saturating_add(sample(d, &mut t.rng));
                    return Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off: None };
                }
                &Phase::Times(k) => {
                    let p = t.phase - 1;
                    if t.loops.len() <= p {
                        t.loops.resize(p + 1, 0);
                    }
                    t.loops[p] += 1;
                    if t.loops[p] < k {
                        t.phase = 0;
                    } else {
                        t.loops[p] = 0;
                    }
                }
                Phase::Fault(d) => {
                    let wake_at = now.saturating_add(sample(d, &mut t.rng));
                    return Step::Block { voluntary: false, wake_at: Some(wake_at), hand_off: None };
                }
                &Phase::Timer(period) => {
                    // A periodic timer is a signalled object (an NT periodic timer, paper
                    // 000 §6; Linux's timerfd): each expiry signals it, and a wait on a
                    // signalled timer completes at once. Expiries that passed while the
                    // task was busy leave one signal, not a count: the wait completes at
                    // once and the next is for the first expiry after now. Under the tick
                    // clock an expiry signals at the tick that services it.
                    self.metrics.iteration(i, false, now);
                    let period = period.max(1);
                    let serviced = match self.sc.machine.clock {
                        ClockMode::OneShot => now,
                        ClockMode::Tick => now - now % self.tick.max(1),
                    };
                    let last = self.tasks[i].timer_target;
                    let target = last.map_or(now, |p| p).saturating_add(period);
                    // The iteration that reaches the timer here is a job released at the
                    // expiry its last wait completed for, due at the expiry this one
                    // waits for; there is none before the timer's first use, which
                    // starts it (docs/jobs.md).
                    if let Some(release) = last.filter(|&r| now > r) {
                        self.job_done(i, release, now, target);
                    }
                    let t = &mut self.tasks[i];
                    if target > serviced {
                        t.timer_target = Some(target);
                        return Step::Block { voluntary: true, wake_at: Some(target), hand_off: None };
                    }
                    // Signalled already: consume it (and every expiry serviced up to now).
                    t.timer_target = Some(target.saturating_add((serviced - target) / period * period));
                }
                Phase::Yield => {
                    t.remaining = 0;
                    return Step::Yield;
                }
                Phase::RunWall(d) => {
                    let wall = sample(d, &mut t.rng);
                    t.remaining = wall;
                    t.run_until = Some(now.saturating_add(wall));
                    t.work = Work::Plain;
                    return Step::Run;
                }
                &Phase::RtTimer { period, relative, timer, shared } => {
                    self.metrics.iteration(i, false, now);
                    let next = self.rt_next_expiry(i, timer, shared, period);
                    if let Some(m) = self.trace.as_mut().and_then(|tr| tr.steps.last_mut()) {
                        m.expiry = Some(next);
                    }
                    // The iteration that reaches its timer here is a job due at the expiry
                    // it waits for (rt-app's slack is the time left to it), released at
                    // the expiry its last wait was for; a loop that starts with its timer
                    // has nothing before the first one (docs/jobs.md).
                    let release = self.tasks[i].rt_release.unwrap_or(self.sc.tasks[i].start);
                    if now > release {
                        self.job_done(i, release, now, next);
                    }
                    // late: no sleep (rt-app); relative mode restarts the timer from now
                    let expiry = if now < next || !relative { next } else { now };
                    self.tasks[i].rt_release = Some(expiry);
                    let timers = match (shared, self.sync.as_deref_mut()) {
                        (true, Some(s)) => &mut s.timers,
                        _ => &mut self.tasks[i].rt_timers,
                    };
                    if timers.len() <= timer {
                        timers.resize(timer + 1, None);
                    }
                    timers[timer] = Some(expiry);
                    if now < next {
                        return Step::Block { voluntary: true, wake_at: Some(next), hand_off: None };
                    }
                }
                Phase::Sync(op) => {
                    // carried out on a CPU: a task reaching it while waking runs first
                    let running = matches!(self.drv.disp.state(t.id), TaskState::Running(_));
                    if !running && !matches!(op, SyncOp::Init(_)) {
                        if let Some(tr) = &mut self.trace {
                            tr.steps.pop(); // recorded again when it is taken on a CPU
                        }
                        let t = &mut self.tasks[i];
                        t.phase -= 1;
                        t.remaining = 0;
                        t.work = Work::Plain;
                        return Step::Run;
                    }
                    if !self.sync_step(i, op) {
                        return Step::Block { voluntary: true, wake_at: None, hand_off: None };
                    }
                }
                Phase::HandOff { to, sleep } => {
                    let wake_at = now.saturating_add(sample(sleep, &mut t.rng));
                    let hand_off = self.task_index.get(to).copied();
                    return Step::Block { voluntary: true, wake_at: Some(wake_at), hand_off };
                }
                Phase::Send(s) => {
                    if matches!(s.request, Request::Set { .. }) {
                        self.metrics.iteration(i, true, now);
                    }
                    let about = s.task.as_ref().and_then(|n| self.task_index.get(n).copied());
                    let req = match s.request {
                        // A script's deadline request is relative to when it is sent.
                        Request::Deadline { start, need, deadline } => {
                            Request::Deadline { start: now.saturating_add(start), need, deadline: now.saturating_add(deadline) }
                        }
                        ref r => r.clone(),
                    };
                    self.send_about(i, about, &s.to, req);
                }
                Phase::Join(name) => {
                    self.send(i, name, Request::Join);
                }
                &Phase::Grow { kb, once } => {
                    // A once-only growth done before: `loops` at its index marks it.
                    let p = t.phase - 1;
                    if once && t.loops.get(p).is_some_and(|&d| d > 0) {
                        continue;
                    }
                    // V7 expand() runs in the process: a task reaching it while waking
                    // first gets dispatched.
                    if !matches!(self.drv.disp.state(t.id), TaskState::Running(_)) {
                        t.phase -= 1;
                        t.remaining = 0;
                        t.work = Work::Plain;
                        return Step::Run;
                    }
                    if once {
                        if t.loops.len() <= p {
                            t.loops.resize(p + 1, 0);
                        }
                        t.loops[p] = 1;
                    }
                    self.swap_grow(i, kb);
                }
                Phase::Leave => {
                    self.send(i, "", Request::Leave);
                }
            }
        }
        let name = self.sc.tasks[i].name.clone();
        self.metrics.note(self.now, format!("{name}: script makes no progress; task exits"));
        Step::Exit
    }

    /// Records the response of the burst that just completed.
    pub(super) fn complete(&mut self, i: usize) {
        let now = self.now;
        match self.tasks[i].work {
            Work::Plain => {}
            Work::Job { release, deadline } => {
                self.tasks[i].jobs.pop_front();
                self.job_done(i, release, now, deadline);
            }
            Work::Burst { start } | Work::Irq { arrival: start } => self.metrics.response(i, now - start),
            Work::Frame { ideal } => {
                let Behaviour::Player { period, late_after, .. } = self.sc.tasks[i].behaviour else { unreachable!() };
                // Shown at its ideal time, or now if decoding ran past it (§4: "on time"
                // is within late_after of the ideal time based on the previous frame).
                let shown = now.max(ideal);
                self.job_done(i, ideal.saturating_sub(period), shown, ideal.saturating_add(late_after));
                let t = &mut self.tasks[i];
                t.timer_target = Some(shown.saturating_add(period));
                if now < ideal {
                    t.phase = 2; // sleep until it is shown
                }
            }
        }
        self.tasks[i].work = Work::Plain;
    }

    /// A job of task `i` released at `release`, due at `deadline`, finished at `end`.
    fn job_done(&mut self, i: usize, release: Ns, end: Ns, deadline: Ns) {
        self.metrics.job(i, release, end, deadline);
        if let Some(t) = &mut self.trace {
            t.jobs.push(super::JobRecord { task: i, release, deadline, end: Some(end) });
        }
    }

    /// At the horizon: each job still unfinished is a miss if its deadline has passed
    /// (it can no longer finish by it), else pending (docs/jobs.md).
    pub(super) fn unfinished_jobs(&mut self) {
        let until = self.sc.until;
        for i in 0..self.tasks.len() {
            let t = &self.tasks[i];
            let mut open: Vec<(Ns, Ns)> = match (&self.sc.tasks[i].behaviour, t.work) {
                // A periodic task's queue holds every released job not finished, the one
                // in progress first.
                (Behaviour::Periodic { .. }, _) => t.jobs.iter().copied().collect(),
                (_, Work::Job { release, deadline }) => vec![(release, deadline)],
                (&Behaviour::Player { period, late_after, .. }, Work::Frame { ideal }) => {
                    vec![(ideal.saturating_sub(period), ideal.saturating_add(late_after))]
                }
                (Behaviour::Script { phases, repeat }, _) => {
                    self.rt_open_job(i, phases, *repeat).into_iter().chain(self.timer_open_job(i, phases, *repeat)).collect()
                }
                _ => Vec::new(),
            };
            if matches!(t.wait, Wait::NotStarted) {
                open.clear();
            }
            for (release, deadline) in open {
                if deadline <= until {
                    self.metrics.job_missed(i);
                } else {
                    self.metrics.job_pending(i);
                }
                if let Some(tr) = &mut self.trace {
                    tr.jobs.push(super::JobRecord { task: i, release, deadline, end: None });
                }
            }
        }
    }

    /// An rt-app thread's iteration under way at the horizon (None for a script without
    /// rt-app timers, one waiting for an expiry past the horizon, or one that reaches no
    /// further timer): released at the expiry its last timer wait was for (or its start),
    /// due at the expiry its next timer would wait for if it reached it now.
    fn rt_open_job(&self, i: usize, phases: &[Phase], repeat: bool) -> Option<(Ns, Ns)> {
        let (period, timer, shared) = self.next_phase(i, phases, repeat, |ph| match *ph {
            Phase::RtTimer { period, timer, shared, .. } => Some((period, timer, shared)),
            _ => None,
        })?;
        let release = self.tasks[i].rt_release.unwrap_or(self.sc.tasks[i].start);
        (release <= self.sc.until).then(|| (release, self.rt_next_expiry(i, timer, shared, period)))
    }

    /// A script's iteration under way at the horizon between two `timer` waits (None
    /// before the timer's first use, while the wait is for an expiry past the horizon, or
    /// when the script reaches no further `timer` phase): released at the expiry its last
    /// wait completed for, due one period of the next `timer` phase it reaches later.
    fn timer_open_job(&self, i: usize, phases: &[Phase], repeat: bool) -> Option<(Ns, Ns)> {
        let release = self.tasks[i].timer_target.filter(|&r| r <= self.sc.until)?;
        let period = self.next_phase(i, phases, repeat, |ph| match *ph {
            Phase::Timer(period) => Some(period.max(1)),
            _ => None,
        })?;
        Some((release, release.saturating_add(period)))
    }

    /// What `find` says of the first phase of task `i`'s script that it matches and the
    /// script will reach from where it is (None: it exits first). The walk goes as
    /// `step_script` would: a `times` phase that goes back reaches the first match before
    /// it, if any (else its passes reach none and the walk goes on past it); the end
    /// wraps round only if the script repeats.
    fn next_phase<T>(&self, i: usize, phases: &[Phase], repeat: bool, find: impl Fn(&Phase) -> Option<T>) -> Option<T> {
        let t = &self.tasks[i];
        if matches!(t.wait, Wait::Exited) {
            return None;
        }
        let n = phases.len();
        let mut p = t.phase;
        for _ in 0..=2 * n {
            if p >= n {
                if !repeat || n == 0 {
                    return None;
                }
                p = 0;
            }
            if let Some(x) = find(&phases[p]) {
                return Some(x);
            }
            if let Phase::Times(k) = phases[p] {
                if t.loops.get(p).copied().unwrap_or(0) + 1 < k {
                    if let Some(x) = phases[..p].iter().find_map(&find) {
                        return Some(x);
                    }
                }
            }
            p += 1;
        }
        None
    }

    /// The expiry a use of task `i`'s rt-app timer `timer` (every thread's when `shared`)
    /// of `period` waits for now: its last expiry plus the period. rt-app 1.0 (Debian's,
    /// measured: docs/rtapp.md) starts a timer at the thread's start (its `delay`), not
    /// at its first use.
    fn rt_next_expiry(&self, i: usize, timer: usize, shared: bool, period: Ns) -> Ns {
        let timers = match (shared, self.sync.as_deref()) {
            (true, Some(s)) => &s.timers,
            _ => &self.tasks[i].rt_timers,
        };
        timers.get(timer).copied().flatten().unwrap_or(self.sc.tasks[i].start).saturating_add(period)
    }

    /// A task that is not runnable continues its behaviour (start, timer, job, interrupt).
    pub(super) fn resume(&mut self, i: usize) {
        let voluntary = match self.tasks[i].wait {
            Wait::Timer { voluntary } => voluntary,
            Wait::Exited | Wait::None => return,
            _ => true,
        };
        let step = self.step(i);
        self.resume_with(i, step, Wake { voluntary, ..Wake::default() });
    }

    pub(super) fn resume_with(&mut self, i: usize, step: Step, wake: Wake) {
        match step {
            Step::Run | Step::Yield => {
                self.tasks[i].wait = Wait::None;
                self.mark(i, MarkKind::Wake);
                // Policies compare the waking task with the running ones, and the swap
                // model judges idle time by the swap state the wake changes: settle
                // accounts first. Without either, the CPUs are accounted at their next
                // event, in one step instead of two (issue 16).
                if self.drv.disp.accounts_runs() || self.swap.is_some() {
                    self.settle_all();
                }
                // A job's start comes with the wake (one visit of its scheduler).
                let job = if step == Step::Run { self.job_of(i) } else { None };
                self.drv.disp.wake_job(self.now, self.tasks[i].id, wake, job);
                self.metrics.runnable(i, self.now);
                self.swap_ready(i);
            }
            Step::Block { voluntary, wake_at, .. } => {
                self.swap_blocked(i);
                self.arm_wait(i, voluntary, wake_at);
                self.start_io(i);
            }
            Step::Exit => self.exit(i),
        }
    }

    pub(super) fn arm_wait(&mut self, i: usize, voluntary: bool, wake_at: Option<Ns>) {
        if let Some(at) = wake_at {
            self.tasks[i].wait = Wait::Timer { voluntary };
            // a task's own timer wakes it `wake_latency` after its time (the machine's
            // timer interrupt and wake-up path); an I/O completion is not delayed
            let at = if voluntary { self.quantise(at).saturating_add(self.sc.machine.wake_latency) } else { at };
            self.set_timer(at.max(self.now), Timer::Wake(i), Ev::TaskWake(i));
        }
    }

    /// The running task `i` on CPU `c` finished its burst of work.
    pub(super) fn after_burst(&mut self, i: usize, c: usize) {
        self.complete(i);
        match self.step(i) {
            Step::Run => self.replan(c),
            Step::Yield => {
                self.kernel.syscalls += 1;
                self.drv.request(CpuId(c as u16), Preempt::Yield)
            }
            Step::Block { voluntary, wake_at, hand_off } => {
                // A hand-off target finishes the giver's slice (Go!'s directed yield
                // donates the rest of the time slice).
                let inherited = self.cpus[c].slice_end;
                self.drv.disp.block(self.now, self.tasks[i].id, Block { voluntary });
                self.kernel.syscalls += u64::from(voluntary);
                self.swap_blocked(i);
                self.metrics.blocked(i);
                self.mark(i, MarkKind::Block);
                self.cpus[c].current = None;
                self.slice(c, None);
                if wake_at.is_some() {
                    self.arm_wait(i, voluntary, wake_at);
                }
                self.start_io(i);
                let handed = hand_off.and_then(|h| self.drv.disp.hand_off(self.now, CpuId(c as u16), self.tasks[h].id).ok());
                match handed {
                    Some(d) => {
                        self.start(c, d);
                        self.cpus[c].slice_end = inherited;
                        self.replan(c);
                    }
                    None => self.drv.request(CpuId(c as u16), Preempt::Resched),
                }
            }
            Step::Exit => self.exit(i), // frees the CPU; its next decision is pending
        }
    }

    pub(super) fn exit(&mut self, i: usize) {
        self.tasks[i].io = None;
        for d in &mut self.disks {
            d.forget(i);
        }
        self.swap_exit(i);
        self.mark(i, MarkKind::Exit);
        let t = &mut self.tasks[i];
        t.wait = Wait::Exited;
        let id = t.id;
        self.drv.cancel_timer(Timer::Wake(i));
        if let Some(c) = self.drv.disp.remove_task(self.now, id) {
            let c = c.0 as usize;
            self.cpus[c].current = None;
            self.slice(c, None);
            self.drv.request(CpuId(c as u16), Preempt::Resched);
        }
        self.metrics.blocked(i);
    }

    pub(super) fn release_job(&mut self, i: usize) {
        let Behaviour::Periodic { period, deadline, jobs, .. } = self.sc.tasks[i].behaviour else { return };
        let t = &mut self.tasks[i];
        if matches!(t.wait, Wait::Exited | Wait::NotStarted) || jobs.is_some_and(|n| t.released >= n) {
            return;
        }
        t.released += 1;
        t.jobs.push_back((self.now, self.now.saturating_add(deadline)));
        let more = jobs.is_none_or(|n| t.released < n);
        if matches!(t.wait, Wait::Job) {
            self.resume(i);
        }
        if more {
            self.push(self.now.saturating_add(period), Ev::JobRelease(i));
        }
    }

    pub(super) fn interrupt(&mut self, k: usize) {
        let src = self.sc.interrupts[k].clone();
        self.metrics.interrupts += 1;
        let handlers = self.handlers.get(&src.vector).cloned().unwrap_or_default();
        for h in handlers {
            if matches!(self.tasks[h].wait, Wait::Exited | Wait::NotStarted) {
                continue;
            }
            self.tasks[h].irqs.push_back(self.now);
            if self.tasks[h].wait == Wait::Interrupt {
                let step = self.step(h);
                let wake = Wake { voluntary: true, interrupt: Some(src.vector), warp: src.warp, cpu: None };
                self.resume_with(h, step, wake);
            }
        }
        let gap = sample(&src.every, &mut self.irq_rngs[k]).max(1);
        self.push(self.now.saturating_add(gap), Ev::Interrupt(k));
    }

    /// The task turns into an infinite loop.
    pub(super) fn loop_fault(&mut self, i: usize) {
        let name = self.sc.tasks[i].name.clone();
        let t = &mut self.tasks[i];
        if matches!(t.wait, Wait::Exited) {
            return;
        }
        t.looping = true;
        t.remaining = FOREVER;
        t.work = Work::Plain;
        self.metrics.note(self.now, format!("{name}: fault — now an infinite loop"));
        match self.drv.disp.state(self.tasks[i].id) {
            TaskState::Running(c) => {
                self.settle(c.0 as usize);
                self.tasks[i].remaining = FOREVER;
                self.replan(c.0 as usize);
            }
            TaskState::Blocked => {
                if matches!(self.tasks[i].wait, Wait::NotStarted) {
                    return; // it starts looping when it starts
                }
                self.drv.cancel_timer(Timer::Wake(i));
                self.resume_with(i, Step::Run, Wake { voluntary: true, ..Wake::default() });
            }
            _ => {}
        }
    }
}

/// What a registered behaviour ([`crate::behave::Behave`]) may do to its task and the
/// engine.
pub struct Cx<'a> {
    sim: &'a mut Sim,
    task: usize,
}

impl Cx<'_> {
    pub fn now(&self) -> Ns {
        self.sim.now
    }

    /// The task's own RNG.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.sim.tasks[self.task].rng
    }

    /// Sends `req` to the scheduler named `to` (counted as the task's message).
    pub fn send(&mut self, to: &str, req: Request) -> Reply {
        self.sim.send(self.task, to, req)
    }

    /// Records a missed deadline (a job that never ran).
    pub fn job_missed(&mut self) {
        self.sim.metrics.job_missed(self.task);
    }

    /// Arms the task's timer `key` at `at` (exact, not quantised), replacing its previous
    /// expiry; [`crate::behave::Behave::timer`] is called when it fires.
    pub fn set_timer(&mut self, key: u32, at: Ns) {
        let i = self.task;
        self.sim.set_timer(at, Timer::Behave(i, key), Ev::Behave(i, key));
    }

    pub fn cancel_timer(&mut self, key: u32) {
        self.sim.drv.cancel_timer(Timer::Behave(self.task, key));
    }
}

impl Sim {
    /// Calls task `i`'s registered behaviour.
    fn with_behave<T>(&mut self, i: usize, f: impl FnOnce(&mut dyn crate::behave::Behave, &mut Cx<'_>) -> T) -> T {
        let mut b = self.behaves[i].take().expect("a task of a registered kind has its behaviour");
        let out = f(b.as_mut(), &mut Cx { sim: self, task: i });
        self.behaves[i] = Some(b);
        out
    }

    /// What a task of a registered kind does next.
    fn step_other(&mut self, i: usize) -> Step {
        match self.with_behave(i, |b, cx| b.step(cx)) {
            Next::Run { work, job } => {
                let t = &mut self.tasks[i];
                t.remaining = work;
                t.work = job.map_or(Work::Plain, |(release, deadline)| Work::Job { release, deadline });
                Step::Run
            }
            Next::Block { until, voluntary } => Step::Block { voluntary, wake_at: Some(until), hand_off: None },
            Next::Yield => {
                self.tasks[i].remaining = 0;
                Step::Yield
            }
            Next::Exit => Step::Exit,
        }
    }

    /// Task `i`'s behaviour timer `key` fired; if the behaviour says so, the job in
    /// progress ends now: short of its need it is missed and dropped, and the task goes on.
    pub(super) fn behave_timer(&mut self, i: usize, key: u32) {
        if !self.with_behave(i, |b, cx| b.timer(cx, key)) || !matches!(self.tasks[i].work, Work::Job { .. }) {
            return; // done already
        }
        let id = self.tasks[i].id;
        match self.drv.disp.state(id) {
            TaskState::Running(c) => {
                let c = c.0 as usize;
                self.settle(c);
                if self.tasks[i].remaining > 0 {
                    self.abandon(i);
                }
                // Complete (made exactly at the deadline) or abandoned: the next step.
                self.after_burst(i, c);
            }
            TaskState::Runnable => {
                // Preempted at the very instant its need was met (e.g. by a reservation
                // ending at the deadline), the job is done; otherwise it is abandoned.
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
                        self.mark(i, MarkKind::Block);
                        self.arm_wait(i, voluntary, wake_at);
                        self.start_io(i);
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
