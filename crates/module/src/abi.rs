//! The module ABI, version 1: the integer encodings shared by the host ([`crate::WasmPolicy`])
//! and the guest side in `sdk/vassal-sdk` (which repeats these numbers; docs/modules.md
//! is the reference for both).
//!
//! The host calls the module's exports with plain integers (`now` is always the first
//! argument, an `i64` of nanoseconds); the module calls the host's imports (module name
//! `"vassal"`) for the `Ctx` effects and queries. Bytes (parameters, a request's name, a
//! refusal's reason, log text) pass through the module's linear memory: the host writes
//! into a buffer the module hands out (`vassal_buffer`), the module passes pointer and
//! length to an import.

/// The ABI version a module must report from `vassal_abi()`.
pub const ABI_VERSION: i32 = 1;

/// `state(task)` results: a CPU number (>= 0) means running there.
pub const STATE_RUNNABLE: i32 = -1;
pub const STATE_BLOCKED: i32 = -2;
pub const STATE_DEAD: i32 = -3;

/// `vassal_detach` reasons.
pub const DETACH_EXIT: i32 = 0;
pub const DETACH_MOVED: i32 = 1;
pub const DETACH_RELEASED: i32 = 2;

/// `vassal_preempt` reasons.
pub const PREEMPT_SLICE: i32 = 0;
pub const PREEMPT_RESCHED: i32 = 1;
pub const PREEMPT_YIELD: i32 = 2;

/// `vassal_wake` flags.
pub const WAKE_VOLUNTARY: i32 = 1;
pub const WAKE_WARP: i32 = 2;

/// `vassal_refused` reasons (the CPU argument carries `RunningElsewhere`'s CPU).
pub const REFUSAL_NO_SUCH_TASK: i32 = 0;
pub const REFUSAL_NOT_YOURS: i32 = 1;
pub const REFUSAL_NOT_RUNNABLE: i32 = 2;
pub const REFUSAL_RUNNING_ELSEWHERE: i32 = 3;
pub const REFUSAL_NOT_ALLOWED: i32 = 4;
pub const REFUSAL_ZERO_SLICE: i32 = 5;

/// `vassal_message` request kinds (`Join`/`Leave` never reach a policy).
pub const REQ_SET: i32 = 1;
pub const REQ_WARP: i32 = 2;
pub const REQ_PARAM: i32 = 3;
pub const REQ_RESERVE: i32 = 4;
pub const REQ_FREE: i32 = 5;
pub const REQ_MODIFY: i32 = 6;
pub const REQ_AVAIL: i32 = 7;
pub const REQ_DEADLINE: i32 = 8;

/// `reply(kind, a, b, ptr, len)` kinds.
pub const REPLY_OK: i32 = 0;
pub const REPLY_VALUE: i32 = 1;
pub const REPLY_FRACTION: i32 = 2;
pub const REPLY_REFUSED: i32 = 3;

/// `vassal_usage_kind()` results.
pub const USAGE_BEST_EFFORT: i32 = 0;
pub const USAGE_RESERVED: i32 = 1;
pub const USAGE_HARD_TIME: i32 = 2;

/// `vassal_pick` returns this for "no opinion"; otherwise the task id. The slice is the
/// `u64` the module stored at the address `vassal_mailbox()` returned (`u64::MAX`: run
/// until it blocks).
pub const PICK_NONE: i64 = -1;
pub const SLICE_NONE: u64 = u64::MAX;
