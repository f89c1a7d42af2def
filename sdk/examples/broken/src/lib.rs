//! A deliberately broken module, for the containment tests (issue 8, item 3): it
//! schedules like a plain FIFO for its first `after` decisions (parameter, default 3),
//! then fails in the way the `fail` parameter names:
//!
//! | `fail` | what it does | what the host sees |
//! |---|---|---|
//! | `"trap"` | panics (a WebAssembly `unreachable`) | a trap; natively, the SDK catches the panic and reports it as the module's fault |
//! | `"fuel"` | loops forever inside `pick` | the call runs past its fuel budget |
//! | `"memory"` | allocates 64 MiB | memory growth past the limit |
//! | `"not_yours"` | returns a runnable task another scheduler owns | the dispatcher refuses the decision |
//! | `"not_runnable"` | returns one of its own tasks that is blocked | the dispatcher refuses the decision |
//! | `"starve"` | marks its tasks exclusive and stops answering | a runnable task waits past the watchdog |
//! | `"none"` | never fails (a control) | nothing |

use std::collections::{BTreeSet, VecDeque};
use vassal_sdk::*;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fail {
    Trap,
    Fuel,
    Memory,
    NotYours,
    NotRunnable,
    Starve,
    None,
}

struct Broken {
    fail: Fail,
    after: u64,
    picks: u64,
    queue: VecDeque<TaskId>,
    mine: BTreeSet<TaskId>,
    /// Memory kept alive by the "memory" failure.
    hoard: Vec<Vec<u8>>,
}

impl Broken {
    fn failing(&self) -> bool {
        self.picks > self.after
    }
}

impl Policy for Broken {
    fn kind(&self) -> &str {
        "broken.wasm"
    }
    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        self.mine.insert(task);
        if self.fail == Fail::Starve {
            // No guest runs of these by the default scheduler: only this module serves them.
            ctx.set_exclusive(task, true).map_err(|e| e.to_string())?;
        }
        if info.state == TaskState::Runnable {
            self.queue.push_back(task);
        }
        Ok(())
    }
    fn on_detach(&mut self, _ctx: &mut Ctx, task: TaskId, _why: Detach) {
        self.mine.remove(&task);
        self.queue.retain(|&t| t != task);
    }
    fn on_wake(&mut self, _ctx: &mut Ctx, task: TaskId, _wake: Wake) {
        self.queue.push_back(task);
    }
    fn on_block(&mut self, _ctx: &mut Ctx, task: TaskId, _block: Block) {
        self.queue.retain(|&t| t != task);
    }
    fn on_dispatch(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId) {
        self.queue.retain(|&t| t != task);
    }
    fn on_preempt(&mut self, _ctx: &mut Ctx, task: TaskId, _cpu: CpuId, _why: Preempt) {
        self.queue.push_back(task);
    }
    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        // Count only the decisions made while it has tasks: it fails with tasks in hand.
        if !self.mine.is_empty() {
            self.picks += 1;
        }
        if self.failing() {
            match self.fail {
                Fail::Trap => panic!("deliberate failure"),
                Fail::Fuel => {
                    let mut x = 0u64;
                    loop {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                Fail::Memory => {
                    let mut v = vec![0u8; 64 << 20];
                    v[12345] = 1;
                    self.hoard.push(v);
                }
                Fail::NotYours => {
                    // Any live runnable task some other scheduler owns.
                    let other = (0..4096u32)
                        .map(TaskId)
                        .find(|&t| ctx.owner(t).is_some_and(|o| o != ctx.sched()) && ctx.state(t) == TaskState::Runnable);
                    if let Some(t) = other {
                        return Some(Decision::run(t, 10 * MS));
                    }
                }
                Fail::NotRunnable => {
                    let blocked = self.mine.iter().copied().find(|&t| ctx.state(t) == TaskState::Blocked);
                    if let Some(t) = blocked {
                        return Some(Decision::run(t, 10 * MS));
                    }
                }
                Fail::Starve => return None,
                Fail::None => {}
            }
        }
        let i = self.queue.iter().position(|&t| ctx.allowed(t, cpu))?;
        let t = self.queue.remove(i)?;
        Some(Decision::run(t, 10 * MS))
    }
    fn on_refused(&mut self, _ctx: &mut Ctx, _cpu: CpuId, d: Decision, _why: Refusal) {
        if self.mine.contains(&d.task) && !self.queue.contains(&d.task) {
            self.queue.push_front(d.task);
        }
    }
}

fn build(p: &Params, _ncpus: u16) -> Result<Setup, String> {
    let fail = match p.str("fail", "none")?.as_str() {
        "trap" => Fail::Trap,
        "fuel" => Fail::Fuel,
        "memory" => Fail::Memory,
        "not_yours" => Fail::NotYours,
        "not_runnable" => Fail::NotRunnable,
        "starve" => Fail::Starve,
        "none" => Fail::None,
        other => return Err(format!("parameter 'fail': unknown failure '{other}'")),
    };
    let after = p.int("after", 3)?.max(0) as u64;
    let usage = p.reserved_usage(0.5)?;
    let policy = Broken { fail, after, picks: 0, queue: VecDeque::new(), mine: BTreeSet::new(), hoard: Vec::new() };
    Ok(Setup { policy: Box::new(policy), usage })
}

vassal_sdk::export_policy!(build);
