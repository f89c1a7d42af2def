//! vassal-sdk: write a scheduling policy against vassal's policy interface and compile it
//! to a module that vassal loads at run time (issue 8; Vassal's loadable scheduler
//! drivers, paper 000 §3–4).
//!
//! A policy is an ordinary implementation of [`Policy`] (the same trait vassal's built-in
//! policies implement: `on_attach`, `on_wake`, ..., `pick`). [`export_policy!`] turns a
//! crate of type `cdylib` into a module: it generates the exports of the module ABI, which
//! call your policy with a real [`Ctx`] whose effects (`set_event`, `cancel_event`,
//! `resched`, `set_exclusive`) and queries (`state`, `affinity`, ...) go to the host.
//!
//! ```ignore
//! use vassal_sdk::*;
//!
//! struct Fifo { queue: std::collections::VecDeque<TaskId> }
//! impl Policy for Fifo {
//!     fn kind(&self) -> &str { "fifo" }
//!     fn on_wake(&mut self, _: &mut Ctx, t: TaskId, _: Wake) { self.queue.push_back(t) }
//!     fn pick(&mut self, _: &mut Ctx, _: CpuId) -> Option<Decision> {
//!         self.queue.pop_front().map(Decision::run_until_block)
//!     }
//! }
//! fn build(_: &Params, _ncpus: u16) -> Result<Setup, String> {
//!     Ok(Setup { policy: Box::new(Fifo { queue: Default::default() }), usage: Usage::Reserved { cpu_ppm: 500_000 } })
//! }
//! vassal_sdk::export_policy!(build);
//! ```
//!
//! Build with `cargo build --release --target wasm32-unknown-unknown`; load the `.wasm`
//! with `vassal sim SCENARIO --load FILE --name N` (docs/modules.md has the whole loop).
//! Built for the host target instead, the same crate is a native shared library: no
//! sandbox, a decision as cheap as a built-in policy's, for trusted policies only
//! ([`native`], docs/modules.md "Native modules").
//! The module is sandboxed and distrusted: a trap (a panic included), a call running past
//! its fuel budget, memory past its limit, an invalid decision, or a runnable task left
//! unserved past the watchdog gets it ejected, and its tasks go to the scheduler below.
//!
//! A panic in the policy is caught at the module's boundary in both forms: every export
//! runs the policy under `catch_unwind`, and after a panic the module is inert (no
//! opinion, refusals, no effects) and reports the fault, which gets it ejected like a
//! trap. In WebAssembly a panic is a trap anyway; in the native form this needs the
//! crate built with `panic = "unwind"` (the default — with `panic = "abort"` a panic
//! aborts the host), and cannot cover what is not a panic: a bad pointer (SIGSEGV), an
//! abort, a stack overflow, an endless loop (docs/modules.md, "Native modules").

use std::cell::UnsafeCell;
use std::collections::BTreeMap;

use vassal_core::abi;

pub use vassal_core::{
    AttachInfo, Block, CpuId, CpuSet, Ctx, CtxError, Decision, Detach, Effect, Job, Ns, Policy, PolicyLog, Preempt, Refusal, Reply,
    Request, SchedId, Sender, TaskId, TaskParams, TaskState, TaskView, Usage, Wake, CPU_PPM, MS, NS, SEC, US,
};

/// The ABI version this SDK speaks (the host refuses another). The ABI's encodings are
/// vassal-core's [`vassal_core::abi`], the very code the host uses: nothing is copied.
pub const ABI_VERSION: i32 = abi::ABI_VERSION;

/// A scheduler parameter, as written in a scenario's `params` table: vassal-core's
/// `ParamValue`, the type the host and the built-in policies use.
pub use vassal_core::ParamValue as Param;

/// The scheduler's parameters, given to the builder.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Params {
    pub map: BTreeMap<String, Param>,
}

impl Params {
    pub fn get(&self, key: &str) -> Option<&Param> {
        self.map.get(key)
    }
    pub fn int(&self, key: &str, default: i64) -> Result<i64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Param::Int(i)) => Ok(*i),
            Some(v) => Err(format!("parameter '{key}': expected an integer, found {v:?}")),
        }
    }
    pub fn float(&self, key: &str, default: f64) -> Result<f64, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Param::Float(f)) => Ok(*f),
            Some(Param::Int(i)) => Ok(*i as f64),
            Some(v) => Err(format!("parameter '{key}': expected a number, found {v:?}")),
        }
    }
    pub fn str(&self, key: &str, default: &str) -> Result<String, String> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(Param::Str(s)) => Ok(s.clone()),
            Some(v) => Err(format!("parameter '{key}': expected a string, found {v:?}")),
        }
    }
    /// A duration written like "10ms".
    pub fn duration(&self, key: &str, default: Ns) -> Result<Ns, String> {
        match self.get(key) {
            None => Ok(default),
            Some(Param::Str(s)) => vassal_core::parse_duration(s).map_err(|e| format!("parameter '{key}': {e}")),
            Some(v) => Err(format!("parameter '{key}': expected a duration like \"10ms\", found {v:?}")),
        }
    }
    /// The declared share `reserved` (in CPUs, e.g. 0.5) as `Usage::Reserved`, with a default.
    pub fn reserved_usage(&self, default_cpus: f64) -> Result<Usage, String> {
        let share = self.float("reserved", default_cpus)?;
        if !(share.is_finite() && share > 0.0) {
            return Err(format!("parameter 'reserved': expected a positive share of CPUs, found {share}"));
        }
        Ok(Usage::Reserved { cpu_ppm: (share * CPU_PPM as f64).round() as u64 })
    }

    fn decode(text: &str) -> Result<Params, String> {
        abi::decode_params(text).map(|map| Params { map })
    }
}

/// What a module's builder returns: the policy and the CPU usage it declares (Vassal §8;
/// checked against the loaded schedulers when the module is loaded).
pub struct Setup {
    pub policy: Box<dyn Policy>,
    pub usage: Usage,
}

/// The builder a module exports with [`export_policy!`]: parameters and the number of CPUs in.
pub type Builder = fn(&Params, u16) -> Result<Setup, String>;

// ----- host imports -----

#[cfg(target_arch = "wasm32")]
mod host {
    // Pointers and lengths are `i32` in the wasm32 ABI (docs/modules.md's tables).
    #[link(wasm_import_module = "vassal")]
    extern "C" {
        pub fn state(task: i32) -> i32;
        pub fn affinity(task: i32) -> i64;
        pub fn owner(task: i32) -> i64;
        pub fn last_cpu(task: i32) -> i32;
        pub fn running_on(cpu: i32) -> i64;
        pub fn sched_id() -> i64;
        pub fn set_event(at: i64, token: i64) -> i32;
        pub fn cancel_event(token: i64);
        pub fn resched(cpu: i32) -> i32;
        pub fn set_exclusive(task: i32, on: i32) -> i32;
        pub fn set_kind(ptr: *const u8, len: usize);
        pub fn reason(ptr: *const u8, len: usize);
        pub fn reply(kind: i32, a: i64, b: i64, ptr: *const u8, len: usize);
        pub fn log(at: i64, task: i64, ptr: *const u8, len: usize);
    }
}

/// The native form of a module (a shared library built for the host target, for
/// trusted policies): the host's functions arrive as a table of function pointers,
/// [`native::HostFns`], through the `vassal_native_host` export before any other call.
/// Without a table (a module crate's own unit tests) stand-ins answer: no task exists
/// and effects go nowhere.
#[cfg(not(target_arch = "wasm32"))]
pub mod native {
    use std::ffi::c_void;

    /// The host's functions for a native module, in the order and with the meaning of
    /// the WebAssembly imports (docs/modules.md), each with the host's `env` first.
    /// crates/module/src/native.rs repeats this layout; `abi` and `size` are checked.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct HostFns {
        pub abi: u32,
        pub size: u32,
        pub env: *mut c_void,
        pub state: unsafe extern "C" fn(*mut c_void, i32) -> i32,
        pub affinity: unsafe extern "C" fn(*mut c_void, i32) -> i64,
        pub owner: unsafe extern "C" fn(*mut c_void, i32) -> i64,
        pub last_cpu: unsafe extern "C" fn(*mut c_void, i32) -> i32,
        pub running_on: unsafe extern "C" fn(*mut c_void, i32) -> i64,
        pub sched_id: unsafe extern "C" fn(*mut c_void) -> i64,
        pub set_event: unsafe extern "C" fn(*mut c_void, i64, i64) -> i32,
        pub cancel_event: unsafe extern "C" fn(*mut c_void, i64),
        pub resched: unsafe extern "C" fn(*mut c_void, i32) -> i32,
        pub set_exclusive: unsafe extern "C" fn(*mut c_void, i32, i32) -> i32,
        pub set_kind: unsafe extern "C" fn(*mut c_void, *const u8, usize),
        pub reason: unsafe extern "C" fn(*mut c_void, *const u8, usize),
        pub reply: unsafe extern "C" fn(*mut c_void, i32, i64, i64, *const u8, usize),
        pub log: unsafe extern "C" fn(*mut c_void, i64, i64, *const u8, usize),
    }

    unsafe extern "C" fn no_task(_: *mut c_void, _: i32) -> i32 {
        vassal_core::abi::STATE_DEAD
    }
    unsafe extern "C" fn zero(_: *mut c_void, _: i32) -> i64 {
        0
    }
    unsafe extern "C" fn none64(_: *mut c_void, _: i32) -> i64 {
        -1
    }
    unsafe extern "C" fn none32(_: *mut c_void, _: i32) -> i32 {
        -1
    }
    unsafe extern "C" fn no_sched(_: *mut c_void) -> i64 {
        -1
    }
    unsafe extern "C" fn ok2(_: *mut c_void, _: i64, _: i64) -> i32 {
        0
    }
    unsafe extern "C" fn nothing(_: *mut c_void, _: i64) {}
    unsafe extern "C" fn ok1(_: *mut c_void, _: i32) -> i32 {
        0
    }
    unsafe extern "C" fn ok_ii(_: *mut c_void, _: i32, _: i32) -> i32 {
        0
    }
    unsafe extern "C" fn text(_: *mut c_void, _: *const u8, _: usize) {}
    unsafe extern "C" fn reply(_: *mut c_void, _: i32, _: i64, _: i64, _: *const u8, _: usize) {}
    unsafe extern "C" fn log(_: *mut c_void, _: i64, _: i64, _: *const u8, _: usize) {}

    /// The stand-ins in force until the host hands its table.
    pub const STANDIN: HostFns = HostFns {
        abi: super::ABI_VERSION as u32,
        size: std::mem::size_of::<HostFns>() as u32,
        env: std::ptr::null_mut(),
        state: no_task,
        affinity: zero,
        owner: none64,
        last_cpu: none32,
        running_on: none64,
        sched_id: no_sched,
        set_event: ok2,
        cancel_event: nothing,
        resched: ok1,
        set_exclusive: ok_ii,
        set_kind: text,
        reason: text,
        reply,
        log,
    };

    pub(crate) static TABLE: super::Global<HostFns> = super::Global(std::cell::UnsafeCell::new(STANDIN));

    /// Takes the host's table (the `vassal_native_host` export): 0 = accepted, −1 = the
    /// table is of another ABI version or size.
    ///
    /// # Safety
    /// `table` points to a valid [`HostFns`] whose functions stay callable with its `env`
    /// for as long as the module is loaded.
    pub unsafe fn set_host(table: *const HostFns) -> i32 {
        if table.is_null() {
            return -1;
        }
        let t = &*table;
        if t.abi != super::ABI_VERSION as u32 || t.size as usize != std::mem::size_of::<HostFns>() {
            return -1;
        }
        *TABLE.0.get() = *t;
        install_panic_hook();
        0
    }

    /// Records where a panic happens, for the fault's text, then lets the previous hook
    /// (the default prints it on stderr: the host's log) do its part. This is the
    /// module's own copy of std's hook: a shared library carries its own std.
    fn install_panic_hook() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if let (Some(l), Ok(mut at)) = (info.location(), super::PANIC_AT.lock()) {
                    *at = Some(format!("{}:{}:{}", l.file(), l.line(), l.column()));
                }
                prev(info);
            }));
        });
    }

    /// The `vassal_fault` export: where the module's fault is (see [`super::Fault`]).
    pub fn fault() -> *const super::Fault {
        super::FAULT.0.get()
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[allow(clippy::missing_safety_doc)]
mod host {
    use super::native::{HostFns, TABLE};

    fn t() -> &'static HostFns {
        // SAFETY: see `Global`; the table is written only by `set_host`, before any call.
        unsafe { &*TABLE.0.get() }
    }
    pub unsafe fn state(task: i32) -> i32 {
        (t().state)(t().env, task)
    }
    pub unsafe fn affinity(task: i32) -> i64 {
        (t().affinity)(t().env, task)
    }
    pub unsafe fn owner(task: i32) -> i64 {
        (t().owner)(t().env, task)
    }
    pub unsafe fn last_cpu(task: i32) -> i32 {
        (t().last_cpu)(t().env, task)
    }
    pub unsafe fn running_on(cpu: i32) -> i64 {
        (t().running_on)(t().env, cpu)
    }
    pub unsafe fn sched_id() -> i64 {
        (t().sched_id)(t().env)
    }
    pub unsafe fn set_event(at: i64, token: i64) -> i32 {
        (t().set_event)(t().env, at, token)
    }
    pub unsafe fn cancel_event(token: i64) {
        (t().cancel_event)(t().env, token)
    }
    pub unsafe fn resched(cpu: i32) -> i32 {
        (t().resched)(t().env, cpu)
    }
    pub unsafe fn set_exclusive(task: i32, on: i32) -> i32 {
        (t().set_exclusive)(t().env, task, on)
    }
    pub unsafe fn set_kind(ptr: *const u8, len: usize) {
        (t().set_kind)(t().env, ptr, len)
    }
    pub unsafe fn reason(ptr: *const u8, len: usize) {
        (t().reason)(t().env, ptr, len)
    }
    pub unsafe fn reply(kind: i32, a: i64, b: i64, ptr: *const u8, len: usize) {
        (t().reply)(t().env, kind, a, b, ptr, len)
    }
    pub unsafe fn log(at: i64, task: i64, ptr: *const u8, len: usize) {
        (t().log)(t().env, at, task, ptr, len)
    }
}

/// A task's state from its ABI code (a CPU number >= 0: running there).
fn state_of(code: i32) -> TaskState {
    match code {
        abi::STATE_RUNNABLE => TaskState::Runnable,
        abi::STATE_BLOCKED => TaskState::Blocked,
        c if c >= 0 => TaskState::Running(CpuId(c as u16)),
        _ => TaskState::Dead,
    }
}

/// The task view a module's `Ctx` reads: each query is a host call.
struct HostView;

impl TaskView for HostView {
    fn state(&self, task: TaskId) -> TaskState {
        state_of(unsafe { host::state(task.0 as i32) })
    }
    fn affinity(&self, task: TaskId) -> CpuSet {
        CpuSet(unsafe { host::affinity(task.0 as i32) } as u64)
    }
    fn owner(&self, task: TaskId) -> Option<SchedId> {
        let s = unsafe { host::owner(task.0 as i32) };
        (s >= 0).then_some(SchedId(s as u32))
    }
    fn last_cpu(&self, task: TaskId) -> Option<CpuId> {
        let c = unsafe { host::last_cpu(task.0 as i32) };
        (c >= 0).then_some(CpuId(c as u16))
    }
    fn running_on(&self, cpu: CpuId) -> Option<TaskId> {
        let t = unsafe { host::running_on(cpu.0 as i32) };
        (t >= 0).then_some(TaskId(t as u32))
    }
}

// ----- the runtime behind the exports (called by the code `export_policy!` generates) -----

/// A cell for the module's single-threaded globals (WebAssembly modules have one thread).
struct Global<T>(UnsafeCell<T>);
// SAFETY: a wasm32 module instance runs on one thread; the host never re-enters it.
unsafe impl<T> Sync for Global<T> {}

struct Guest {
    policy: Box<dyn Policy>,
    usage: Usage,
    ncpus: u16,
    sched: Option<SchedId>,
    effects: Vec<Effect>,
    exclusive: Vec<(TaskId, bool)>,
}

static GUEST: Global<Option<Guest>> = Global(UnsafeCell::new(None));
static BUFFER: Global<Vec<u8>> = Global(UnsafeCell::new(Vec::new()));
static MAILBOX: Global<u64> = Global(UnsafeCell::new(0));

/// Why the module failed (a panic caught at its boundary), as the host reads it through
/// the native form's `vassal_fault` export: `len` bytes of UTF-8 at `ptr` (`len` 0: no
/// fault). Set once; from then on the module is inert.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Fault {
    pub len: usize,
    pub ptr: *const u8,
}

static FAULT: Global<Fault> = Global(UnsafeCell::new(Fault { len: 0, ptr: std::ptr::null() }));

/// Where the last panic happened (set by the hook the native form installs).
#[cfg(not(target_arch = "wasm32"))]
static PANIC_AT: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn fault_text() -> Option<&'static str> {
    // SAFETY: see `Global`; written once by `set_fault`, never freed.
    let f = unsafe { *FAULT.0.get() };
    // SAFETY: `set_fault` leaked `len` bytes of a String at `ptr`.
    (f.len > 0).then(|| unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(f.ptr, f.len)) })
}

fn set_fault(payload: Box<dyn std::any::Any + Send>) {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    #[cfg(not(target_arch = "wasm32"))]
    let at = PANIC_AT.lock().ok().and_then(|mut a| a.take());
    #[cfg(target_arch = "wasm32")]
    let at: Option<String> = None;
    let text = match at {
        Some(at) => format!("panicked at {at}: {msg}"),
        None => format!("panicked: {msg}"),
    };
    let text: &'static str = Box::leak(text.into_boxed_str());
    // SAFETY: see `Global`.
    unsafe { *FAULT.0.get() = Fault { len: text.len(), ptr: text.as_ptr() } };
}

/// Runs one entry of the module, catching a panic: the fault is kept (see [`Fault`]) and
/// `failed` returned; after a fault every entry returns `failed` without running.
fn guard<R>(failed: R, f: impl FnOnce() -> R) -> R {
    if fault_text().is_some() {
        return failed;
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            set_fault(payload);
            failed
        }
    }
}

fn guest() -> Option<&'static mut Guest> {
    // SAFETY: single-threaded and not re-entered (see `Global`); each export takes the
    // reference once and drops it before returning.
    unsafe { (*GUEST.0.get()).as_mut() }
}

fn buffer_text(len: i32) -> String {
    // SAFETY: as above.
    let buf = unsafe { &*BUFFER.0.get() };
    let len = (len.max(0) as usize).min(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

fn send_str(f: impl FnOnce(*const u8, usize), s: &str) {
    f(s.as_ptr(), s.len())
}

/// The runtime functions the generated exports call. Not for direct use.
#[doc(hidden)]
pub mod rt {
    use super::*;

    pub fn abi() -> i32 {
        ABI_VERSION
    }

    pub fn buffer(len: usize) -> *mut u8 {
        guard(std::ptr::null_mut(), || {
            // SAFETY: see `Global`.
            let buf = unsafe { &mut *BUFFER.0.get() };
            buf.clear();
            buf.resize(len, 0);
            buf.as_mut_ptr()
        })
    }

    pub fn mailbox() -> *mut u64 {
        MAILBOX.0.get()
    }

    pub fn init(build: Builder, ncpus: i32, params_len: i32) -> i32 {
        let text = buffer_text(params_len);
        let r = guard(Err(String::new()), || {
            let mut s = Params::decode(&text).and_then(|p| build(&p, ncpus.clamp(1, 64) as u16))?;
            // The module is the policy's dispatcher: it sizes its per-CPU state once.
            s.policy.init(ncpus.clamp(1, 64) as u16);
            send_str(|p, l| unsafe { host::set_kind(p, l) }, s.policy.kind());
            // SAFETY: see `Global`.
            unsafe {
                *GUEST.0.get() = Some(Guest {
                    policy: s.policy,
                    usage: s.usage,
                    ncpus: ncpus.clamp(1, 64) as u16,
                    sched: None,
                    effects: Vec::new(),
                    exclusive: Vec::new(),
                })
            };
            Ok(())
        });
        match r {
            Ok(()) => 0,
            Err(e) => {
                let e = fault_text().map_or(e, |f| format!("its builder {f}"));
                send_str(|p, l| unsafe { host::reason(p, l) }, &e);
                1
            }
        }
    }

    pub fn usage_kind() -> i32 {
        match guest().filter(|_| fault_text().is_none()).map(|g| g.usage) {
            Some(Usage::Reserved { .. }) => abi::USAGE_RESERVED,
            Some(Usage::HardTime { .. }) => abi::USAGE_HARD_TIME,
            _ => abi::USAGE_BEST_EFFORT,
        }
    }
    pub fn usage_ppm() -> i64 {
        match guest().filter(|_| fault_text().is_none()).map(|g| g.usage) {
            Some(Usage::Reserved { cpu_ppm }) => cpu_ppm as i64,
            Some(Usage::HardTime { util_ppm, .. }) => util_ppm as i64,
            _ => 0,
        }
    }
    pub fn usage_cpus() -> i64 {
        match guest().filter(|_| fault_text().is_none()).map(|g| g.usage) {
            Some(Usage::HardTime { cpus, .. }) => cpus.0 as i64,
            _ => 0,
        }
    }

    /// Runs one callback with a `Ctx`, then hands its effects to the host; a panic is
    /// caught ([`guard`]) and the default returned.
    fn with<R: Default>(now: i64, f: impl FnOnce(&mut dyn Policy, &mut Ctx) -> R) -> R {
        guard(R::default(), || with_inner(now, f))
    }

    fn with_inner<R: Default>(now: i64, f: impl FnOnce(&mut dyn Policy, &mut Ctx) -> R) -> R {
        let Some(g) = guest() else { return R::default() };
        let sched = *g.sched.get_or_insert_with(|| SchedId(unsafe { host::sched_id() }.max(0) as u32));
        let mut effects = std::mem::take(&mut g.effects);
        let mut exclusive = std::mem::take(&mut g.exclusive);
        let r = {
            let mut ctx = Ctx::new(now as u64, g.ncpus, sched, &mut effects, &mut exclusive, &HostView);
            f(g.policy.as_mut(), &mut ctx)
        };
        for e in effects.drain(..) {
            // SAFETY: plain host calls with integers.
            unsafe {
                match e {
                    Effect::SetEvent { token, at, .. } => {
                        host::set_event(at as i64, token as i64);
                    }
                    Effect::CancelEvent { token, .. } => host::cancel_event(token as i64),
                    Effect::Resched(cpu) => {
                        host::resched(cpu.0 as i32);
                    }
                }
            }
        }
        for (t, on) in exclusive.drain(..) {
            unsafe { host::set_exclusive(t.0 as i32, i32::from(on)) };
        }
        g.effects = effects;
        g.exclusive = exclusive;
        r
    }

    #[allow(clippy::too_many_arguments)]
    pub fn attach(now: i64, task: i32, state: i32, affinity: i64, parent: i64, guest_: i32, params_len: i32) -> i32 {
        let text = buffer_text(params_len);
        let params = abi::decode_task_params(&text);
        let info = AttachInfo {
            state: state_of(state),
            params: &params,
            affinity: CpuSet(affinity as u64),
            parent: (parent >= 0).then_some(TaskId(parent as u32)),
            guest: guest_ != 0,
        };
        let r = with(now, |p, ctx| Some(p.on_attach(ctx, TaskId(task as u32), &info)));
        match r {
            None if fault_text().is_some() => {
                send_str(|p, l| unsafe { host::reason(p, l) }, fault_text().unwrap_or_default());
                1
            }
            Some(Ok(())) | None => 0,
            Some(Err(e)) => {
                send_str(|p, l| unsafe { host::reason(p, l) }, &e);
                1
            }
        }
    }

    pub fn detach(now: i64, task: i32, why: i32) {
        let why = match why {
            abi::DETACH_EXIT => Detach::Exit,
            abi::DETACH_MOVED => Detach::Moved,
            _ => Detach::Released,
        };
        with(now, |p, ctx| p.on_detach(ctx, TaskId(task as u32), why))
    }
    pub fn wake(now: i64, task: i32, flags: i32, irq: i64) {
        let w = Wake {
            voluntary: flags & abi::WAKE_VOLUNTARY != 0,
            warp: flags & abi::WAKE_WARP != 0,
            interrupt: (irq >= 0).then_some(irq as u32),
            cpu: None,
        };
        with(now, |p, ctx| p.on_wake(ctx, TaskId(task as u32), w))
    }
    pub fn job(now: i64, task: i32, release: i64, deadline: i64) {
        let job = Job { release: release.max(0) as u64, deadline: deadline.max(0) as u64 };
        with(now, |p, ctx| p.on_job(ctx, TaskId(task as u32), job))
    }
    pub fn block(now: i64, task: i32, voluntary: i32) {
        with(now, |p, ctx| p.on_block(ctx, TaskId(task as u32), Block { voluntary: voluntary != 0 }))
    }
    pub fn dispatch(now: i64, task: i32, cpu: i32) {
        with(now, |p, ctx| p.on_dispatch(ctx, TaskId(task as u32), CpuId(cpu as u16)))
    }
    pub fn preempt(now: i64, task: i32, cpu: i32, why: i32) {
        let why = match why {
            abi::PREEMPT_SLICE => Preempt::SliceExpired,
            abi::PREEMPT_RESCHED => Preempt::Resched,
            _ => Preempt::Yield,
        };
        with(now, |p, ctx| p.on_preempt(ctx, TaskId(task as u32), CpuId(cpu as u16), why))
    }
    pub fn run(now: i64, task: i32, cpu: i32, ran: i64) {
        with(now, |p, ctx| p.on_run(ctx, TaskId(task as u32), CpuId(cpu as u16), ran as u64))
    }
    pub fn tick(now: i64, cpu: i32) {
        with(now, |p, ctx| p.on_tick(ctx, CpuId(cpu as u16)))
    }
    pub fn event(now: i64, token: i64) {
        with(now, |p, ctx| p.on_event(ctx, token as u64))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn message(now: i64, from_task: i64, uid: i32, task: i32, kind: i32, a: i64, b: i64, c: i64, util: f64, name_len: i32) {
        let Some(req) = abi::decode_request(kind, a, b, c, util, || buffer_text(name_len)) else {
            send_str_reply(&format!("unknown request kind {kind}"));
            return;
        };
        let from = Sender { task: (from_task >= 0).then_some(TaskId(from_task as u32)), uid: uid as u32 };
        let reply = with(now, |p, ctx| Some(p.on_message(ctx, from, TaskId(task as u32), &req)));
        if let (None, Some(why)) = (&reply, fault_text()) {
            send_str_reply(why);
            return;
        }
        unsafe {
            match reply {
                Some(Reply::Ok) | None => host::reply(abi::REPLY_OK, 0, 0, std::ptr::null(), 0),
                Some(Reply::Value(v)) => host::reply(abi::REPLY_VALUE, v, 0, std::ptr::null(), 0),
                Some(Reply::Fraction { num, den }) => host::reply(abi::REPLY_FRACTION, num as i64, den as i64, std::ptr::null(), 0),
                Some(Reply::Refused(why)) => send_str_reply(&why),
            }
        }
    }

    fn send_str_reply(why: &str) {
        unsafe { host::reply(abi::REPLY_REFUSED, 0, 0, why.as_ptr(), why.len()) }
    }

    pub fn pick(now: i64, cpu: i32) -> i64 {
        match with(now, |p, ctx| p.pick(ctx, CpuId(cpu as u16))) {
            None => abi::PICK_NONE,
            Some(d) => {
                // SAFETY: see `Global`.
                unsafe { *MAILBOX.0.get() = d.slice.unwrap_or(abi::SLICE_NONE) };
                d.task.0 as i64
            }
        }
    }

    pub fn refused(now: i64, cpu: i32, task: i32, slice: i64, why: i32, at: i32) {
        let why = match why {
            abi::REFUSAL_NO_SUCH_TASK => Refusal::NoSuchTask,
            abi::REFUSAL_NOT_YOURS => Refusal::NotYours,
            abi::REFUSAL_NOT_RUNNABLE => Refusal::NotRunnable,
            abi::REFUSAL_RUNNING_ELSEWHERE => Refusal::RunningElsewhere(CpuId(at.max(0) as u16)),
            abi::REFUSAL_NOT_ALLOWED => Refusal::NotAllowed,
            _ => Refusal::ZeroSlice,
        };
        let d = Decision { task: TaskId(task as u32), slice: (slice >= 0).then_some(slice as u64) };
        with(now, |p, ctx| p.on_refused(ctx, CpuId(cpu as u16), d, why))
    }

    pub fn drain_log() {
        guard((), drain_log_inner)
    }

    fn drain_log_inner() {
        let Some(g) = guest() else { return };
        let mut out = Vec::new();
        g.policy.drain_log(&mut out);
        for l in out {
            let task = l.task.map_or(-1, |t| t.0 as i64);
            unsafe { host::log(l.at as i64, task, l.text.as_ptr(), l.text.len()) };
        }
    }
}

/// Exports a policy as a vassal module: `export_policy!(build)` with
/// `fn build(&Params, ncpus: u16) -> Result<Setup, String>`. Generates the ABI's exports
/// (`vassal_abi`, `vassal_init`, `vassal_pick`, ...); see docs/modules.md.
#[macro_export]
macro_rules! export_policy {
    ($build:path) => {
        #[no_mangle]
        pub extern "C" fn vassal_abi() -> i32 {
            $crate::rt::abi()
        }
        #[no_mangle]
        pub extern "C" fn vassal_buffer(len: usize) -> *mut u8 {
            $crate::rt::buffer(len)
        }
        #[no_mangle]
        pub extern "C" fn vassal_mailbox() -> *mut u64 {
            $crate::rt::mailbox()
        }
        /// The native form only: the host's function table, before any other call.
        ///
        /// # Safety
        /// `table` points to a valid `HostFns` (see `vassal_sdk::native::set_host`).
        #[cfg(not(target_arch = "wasm32"))]
        #[no_mangle]
        pub unsafe extern "C" fn vassal_native_host(table: *const $crate::native::HostFns) -> i32 {
            $crate::native::set_host(table)
        }
        /// The native form only, and only when panics unwind (so the module catches
        /// them): where its fault is, read by the host after each call (docs/modules.md).
        #[cfg(all(not(target_arch = "wasm32"), panic = "unwind"))]
        #[no_mangle]
        pub extern "C" fn vassal_fault() -> *const $crate::Fault {
            $crate::native::fault()
        }
        #[no_mangle]
        pub extern "C" fn vassal_init(ncpus: i32, params_len: i32) -> i32 {
            $crate::rt::init($build, ncpus, params_len)
        }
        #[no_mangle]
        pub extern "C" fn vassal_usage_kind() -> i32 {
            $crate::rt::usage_kind()
        }
        #[no_mangle]
        pub extern "C" fn vassal_usage_ppm() -> i64 {
            $crate::rt::usage_ppm()
        }
        #[no_mangle]
        pub extern "C" fn vassal_usage_cpus() -> i64 {
            $crate::rt::usage_cpus()
        }
        #[no_mangle]
        pub extern "C" fn vassal_attach(now: i64, task: i32, state: i32, aff: i64, parent: i64, guest: i32, len: i32) -> i32 {
            $crate::rt::attach(now, task, state, aff, parent, guest, len)
        }
        #[no_mangle]
        pub extern "C" fn vassal_detach(now: i64, task: i32, why: i32) {
            $crate::rt::detach(now, task, why)
        }
        #[no_mangle]
        pub extern "C" fn vassal_wake(now: i64, task: i32, flags: i32, irq: i64) {
            $crate::rt::wake(now, task, flags, irq)
        }
        #[no_mangle]
        pub extern "C" fn vassal_job(now: i64, task: i32, release: i64, deadline: i64) {
            $crate::rt::job(now, task, release, deadline)
        }
        #[no_mangle]
        pub extern "C" fn vassal_block(now: i64, task: i32, voluntary: i32) {
            $crate::rt::block(now, task, voluntary)
        }
        #[no_mangle]
        pub extern "C" fn vassal_dispatch(now: i64, task: i32, cpu: i32) {
            $crate::rt::dispatch(now, task, cpu)
        }
        #[no_mangle]
        pub extern "C" fn vassal_preempt(now: i64, task: i32, cpu: i32, why: i32) {
            $crate::rt::preempt(now, task, cpu, why)
        }
        #[no_mangle]
        pub extern "C" fn vassal_run(now: i64, task: i32, cpu: i32, ran: i64) {
            $crate::rt::run(now, task, cpu, ran)
        }
        #[no_mangle]
        pub extern "C" fn vassal_tick(now: i64, cpu: i32) {
            $crate::rt::tick(now, cpu)
        }
        #[no_mangle]
        pub extern "C" fn vassal_event(now: i64, token: i64) {
            $crate::rt::event(now, token)
        }
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn vassal_message(now: i64, from: i64, uid: i32, task: i32, kind: i32, a: i64, b: i64, c: i64, util: f64, len: i32) {
            $crate::rt::message(now, from, uid, task, kind, a, b, c, util, len)
        }
        #[no_mangle]
        pub extern "C" fn vassal_pick(now: i64, cpu: i32) -> i64 {
            $crate::rt::pick(now, cpu)
        }
        #[no_mangle]
        pub extern "C" fn vassal_refused(now: i64, cpu: i32, task: i32, slice: i64, why: i32, at: i32) {
            $crate::rt::refused(now, cpu, task, slice, why, at)
        }
        #[no_mangle]
        pub extern "C" fn vassal_drain_log() {
            $crate::rt::drain_log()
        }
    };
}
