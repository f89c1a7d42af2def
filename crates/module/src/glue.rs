//! The host side of the ABI that both backends share ([`crate::WasmPolicy`] and
//! [`crate::NativePolicy`]): the answers to the module's queries and effects (checked again
//! by the host's own `Ctx`), and the integer encodings of the callbacks' arguments (a
//! request's and the parameters' are [`vassal_core::abi`]'s, shared with the SDK).

use std::collections::BTreeMap;

use vassal_core::{CpuId, CpuSet, Ctx, Detach, Job, Ns, ParamValue, PolicyLog, Preempt, Refusal, Reply, TaskId, TaskState, Usage, Wake};

use crate::abi::*;
use crate::LoadError;

// ----- the imports' answers (`ctx` is None outside a call: tasks are "dead", effects refused) -----

pub(crate) fn state(ctx: Option<&mut Ctx>, task: i32) -> i32 {
    match ctx.map(|x| x.state(TaskId(task as u32))) {
        Some(s) => state_code(s),
        None => STATE_DEAD,
    }
}

pub(crate) fn affinity(ctx: Option<&mut Ctx>, task: i32) -> i64 {
    ctx.map_or(0, |x| x.affinity(TaskId(task as u32)).0 as i64)
}

pub(crate) fn owner(ctx: Option<&mut Ctx>, task: i32) -> i64 {
    ctx.and_then(|x| x.owner(TaskId(task as u32))).map_or(-1, |s| s.0 as i64)
}

pub(crate) fn last_cpu(ctx: Option<&mut Ctx>, task: i32) -> i32 {
    ctx.and_then(|x| x.last_cpu(TaskId(task as u32))).map_or(-1, |c| c.0 as i32)
}

pub(crate) fn running_on(ctx: Option<&mut Ctx>, cpu: i32) -> i64 {
    if !(0..=u16::MAX as i32).contains(&cpu) {
        return -1;
    }
    ctx.and_then(|x| x.running_on(CpuId(cpu as u16))).map_or(-1, |t| t.0 as i64)
}

pub(crate) fn sched_id(ctx: Option<&mut Ctx>) -> i64 {
    ctx.map_or(-1, |x| x.sched().0 as i64)
}

pub(crate) fn set_event(ctx: Option<&mut Ctx>, at: i64, token: i64) -> i32 {
    ctx.map_or(-1, |x| if x.set_event(at as u64, token as u64).is_ok() { 0 } else { -1 })
}

pub(crate) fn cancel_event(ctx: Option<&mut Ctx>, token: i64) {
    if let Some(x) = ctx {
        x.cancel_event(token as u64)
    }
}

pub(crate) fn resched(ctx: Option<&mut Ctx>, cpu: i32) -> i32 {
    if !(0..=u16::MAX as i32).contains(&cpu) {
        return -1;
    }
    ctx.map_or(-1, |x| if x.resched(CpuId(cpu as u16)).is_ok() { 0 } else { -1 })
}

pub(crate) fn set_exclusive(ctx: Option<&mut Ctx>, task: i32, on: i32) -> i32 {
    ctx.map_or(-1, |x| if x.set_exclusive(TaskId(task as u32), on != 0).is_ok() { 0 } else { -1 })
}

/// `reply(kind, a, b, text)`; `text` is read only for a refusal.
pub(crate) fn reply(kind: i32, a: i64, b: i64, text: impl FnOnce() -> String) -> Reply {
    match kind {
        REPLY_OK => Reply::Ok,
        REPLY_VALUE => Reply::Value(a),
        REPLY_FRACTION => Reply::Fraction { num: a as u64, den: b as u64 },
        _ => Reply::Refused(text()),
    }
}

/// Keeps one `log` entry (at most 65,536 between drains).
pub(crate) fn log(logs: &mut Vec<PolicyLog>, at: i64, task: i64, text: String) {
    if logs.len() < 65_536 {
        let task = (0..=u32::MAX as i64).contains(&task).then_some(TaskId(task as u32));
        logs.push(PolicyLog { at: at as u64, task, text });
    }
}

/// The longest string a module may pass to the host.
pub(crate) const MAX_TEXT: usize = 64 << 10;

// ----- the callbacks' arguments -----

pub(crate) fn state_code(s: TaskState) -> i32 {
    match s {
        TaskState::Runnable => STATE_RUNNABLE,
        TaskState::Blocked => STATE_BLOCKED,
        TaskState::Running(c) => c.0 as i32,
        TaskState::Dead => STATE_DEAD,
    }
}

pub(crate) fn detach_code(why: Detach) -> i32 {
    match why {
        Detach::Exit => DETACH_EXIT,
        Detach::Moved => DETACH_MOVED,
        Detach::Released => DETACH_RELEASED,
    }
}

/// `vassal_wake`'s (flags, irq).
pub(crate) fn wake_args(wake: Wake) -> (i32, i64) {
    let flags = if wake.voluntary { WAKE_VOLUNTARY } else { 0 } | if wake.warp { WAKE_WARP } else { 0 };
    (flags, wake.interrupt.map_or(-1, i64::from))
}

/// `vassal_job`'s (release, deadline): ns as `i64`, as `now` is (a time past `i64::MAX`,
/// some 292 years, is passed as `i64::MAX`).
pub(crate) fn job_args(job: Job) -> (i64, i64) {
    let ns = |t: Ns| i64::try_from(t).unwrap_or(i64::MAX);
    (ns(job.release), ns(job.deadline))
}

pub(crate) fn preempt_code(why: Preempt) -> i32 {
    match why {
        Preempt::SliceExpired => PREEMPT_SLICE,
        Preempt::Resched => PREEMPT_RESCHED,
        Preempt::Yield => PREEMPT_YIELD,
    }
}

/// `vassal_refused`'s (why, at_cpu).
pub(crate) fn refusal_args(why: Refusal) -> (i32, i32) {
    match why {
        Refusal::NoSuchTask => (REFUSAL_NO_SUCH_TASK, -1),
        Refusal::NotYours => (REFUSAL_NOT_YOURS, -1),
        Refusal::NotRunnable => (REFUSAL_NOT_RUNNABLE, -1),
        Refusal::RunningElsewhere(c) => (REFUSAL_RUNNING_ELSEWHERE, c.0 as i32),
        Refusal::NotAllowed => (REFUSAL_NOT_ALLOWED, -1),
        Refusal::ZeroSlice => (REFUSAL_ZERO_SLICE, -1),
    }
}

/// The declared usage from `vassal_usage_kind` / `_ppm` / `_cpus`.
pub(crate) fn usage(kind: i32, ppm: i64, cpus: i64) -> Result<Usage, LoadError> {
    Ok(match kind {
        USAGE_BEST_EFFORT => Usage::BestEffort,
        USAGE_RESERVED if ppm > 0 => Usage::Reserved { cpu_ppm: ppm as u64 },
        USAGE_HARD_TIME if ppm > 0 && cpus != 0 => Usage::HardTime { cpus: CpuSet(cpus as u64), util_ppm: ppm as u64 },
        _ => return Err(LoadError::Abi(format!("invalid usage declaration (kind {kind}, ppm {ppm}, cpus {cpus:#x})"))),
    })
}

/// The scheduler's parameters as `vassal_init` reads them ([`encode_params`]).
pub(crate) fn init_params(params: &BTreeMap<String, ParamValue>) -> Result<Vec<u8>, LoadError> {
    encode_params(params).map(String::into_bytes).map_err(LoadError::BadParam)
}

/// A backend's `Exports`, each entry point found by name with the loader's own `$req`
/// (required: a missing one refuses the module) and `$opt` (optional) macros; `mailbox`
/// is where the module leaves its last pick's slice. One list of the ABI's exports for
/// both backends (docs/modules.md).
macro_rules! exports {
    ($req:ident, $opt:ident, $mailbox:expr) => {
        Exports {
            buffer: $req!("vassal_buffer"),
            attach: $opt!("vassal_attach"),
            detach: $opt!("vassal_detach"),
            wake: $opt!("vassal_wake"),
            job: $opt!("vassal_job"),
            block: $opt!("vassal_block"),
            dispatch: $opt!("vassal_dispatch"),
            preempt: $opt!("vassal_preempt"),
            run: $opt!("vassal_run"),
            tick: $opt!("vassal_tick"),
            event: $opt!("vassal_event"),
            message: $opt!("vassal_message"),
            pick: $req!("vassal_pick"),
            refused: $opt!("vassal_refused"),
            drain_log: $opt!("vassal_drain_log"),
            mailbox: $mailbox,
        }
    };
}
pub(crate) use exports;
