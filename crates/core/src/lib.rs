//! vassal-core: the policy interface and the Vassal dispatcher hierarchy.
//!
//! No I/O and no clock: a policy ([`Policy`]) is a state machine told what happened and
//! asked which task runs next; the [`Dispatcher`] keeps the hierarchy of registered
//! schedulers (paper 000, Vassal) and validates every decision. The simulator and the
//! Linux agent are two mechanisms driving the same dispatcher, each through the one
//! [`Driver`] that carries out what the policies ask (events, reschedules).

pub mod abi;
pub mod driver;
pub mod hierarchy;
pub mod ids;
pub mod param;
pub mod policy;
pub mod request;
pub mod shared;
pub mod time;
pub mod timers;
pub mod usage;

pub use driver::{Driver, Hooks};
pub use hierarchy::{Containment, DispatchStats, Dispatched, Dispatcher, Ejection, Position, RegisterError, SchedInfo};
pub use ids::{CpuId, CpuSet, SchedId, TaskId, MAX_CPUS};
pub use param::ParamValue;
pub use policy::{
    AttachInfo, Block, Ctx, CtxError, Decision, Detach, Effect, Job, Policy, PolicyLog, Preempt, Refusal, Sender, SwapAdvice, TaskParams,
    TaskState, TaskView, VirtualTime, Wake,
};
pub use request::{Reply, Request};
pub use shared::Shared;
pub use time::{fmt_duration, parse_duration, DurationError, Ns, MS, NS, SEC, US};
pub use timers::{TimerKey, Timers};
pub use usage::{check_conflict, HierarchyConfig, Usage, CPU_PPM};
