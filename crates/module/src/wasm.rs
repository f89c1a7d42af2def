//! The WebAssembly host: [`WasmPolicy`] runs a module as a `vassal_core::Policy`, in a
//! wasmtime sandbox (compiled by Cranelift) with a fuel budget per call and a memory
//! limit. docs/modules.md ("Cost") says why wasmtime and not an interpreter.
//!
//! Containment (issue 8, after sched_ext): the adapter catches every trap, fuel
//! exhaustion and memory denial, turns the module inert (`pick` answers `None`, callbacks
//! do nothing) and reports the reason through [`Policy::fault`]; the dispatcher ejects it
//! ([`vassal_core::Dispatcher::eject_failed`]). Invalid decisions and the watchdog are
//! the dispatcher's own checks ([`vassal_core::Containment`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Job, Ns, ParamValue, Policy, PolicyLog, Preempt, Refusal, Reply, Request, Sender,
    TaskId, Usage, Wake,
};
use wasmtime::{Caller, Config, Engine, Extern, Linker, Memory, Module, Store, TypedFunc};

use crate::abi::*;
use crate::glue::{self, exports};

/// Resource limits of one loaded module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Fuel (wasmtime: about one unit per WebAssembly instruction executed, so the same
    /// module runs out at the same point in every run) for one call.
    pub fuel_per_call: u64,
    /// The most linear memory the module may have, in bytes.
    pub memory_bytes: usize,
}

impl Default for Limits {
    /// 10 million fuel units per call (a few ms; a BVT decision takes a few thousand),
    /// and 16 MiB of memory.
    fn default() -> Self {
        Limits { fuel_per_call: 10_000_000, memory_bytes: 16 << 20 }
    }
}

/// Why a module could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read module file {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("not a valid WebAssembly module: {0}")]
    Invalid(String),
    #[error("the module does not follow the vassal module ABI: {0}")]
    Abi(String),
    #[error("the module refused its parameters: {0}")]
    Init(String),
    #[error("parameter '{0}': names may not contain '=' or a line break, and values may not contain a line break")]
    BadParam(String),
    #[error(transparent)]
    Register(#[from] vassal_core::RegisterError),
}

/// The raw Ctx pointer of the call in progress (null between calls). Host functions only
/// dereference it while the call that set it is on the stack.
struct CtxPtr(*mut ());
// SAFETY: the pointer is only set for the duration of a call made on the thread that owns
// the `WasmPolicy` (and so the store); it is null whenever the store could move.
unsafe impl Send for CtxPtr {}
unsafe impl Sync for CtxPtr {}

struct Host {
    ctx: CtxPtr,
    memory: Option<Memory>,
    memory_limit: usize,
    memory_denied: bool,
    kind: String,
    reason: Option<String>,
    reply: Option<Reply>,
    logs: Vec<PolicyLog>,
    /// A host-side detected misuse of the ABI (bad pointer), reported as a fault.
    abi_fault: Option<String>,
}

impl Host {
    fn ctx(&mut self) -> Option<&mut Ctx<'static>> {
        if self.ctx.0.is_null() {
            None
        } else {
            // SAFETY: see `CtxPtr`: set by `WasmPolicy::enter` from a live `&mut Ctx` for
            // exactly the duration of one call into the module.
            Some(unsafe { &mut *(self.ctx.0 as *mut Ctx<'static>) })
        }
    }
}

impl wasmtime::ResourceLimiter for Host {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.memory_denied = true;
            return Ok(false);
        }
        Ok(true)
    }
    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 65_536)
    }
    fn instances(&self) -> usize {
        1
    }
    fn tables(&self) -> usize {
        4
    }
    fn memories(&self) -> usize {
        1
    }
}

fn read_bytes(caller: &mut Caller<'_, Host>, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let mem = caller.data().memory?;
    let (ptr, len) = (usize::try_from(ptr).ok()?, usize::try_from(len).ok()?);
    if len > glue::MAX_TEXT {
        return None;
    }
    let data = mem.data(&*caller);
    data.get(ptr..ptr.checked_add(len)?).map(|b| b.to_vec())
}

fn read_text(caller: &mut Caller<'_, Host>, ptr: i32, len: i32) -> String {
    match read_bytes(caller, ptr, len) {
        Some(b) => String::from_utf8_lossy(&b).into_owned(),
        None => {
            caller.data_mut().abi_fault = Some(format!("passed an out-of-bounds string ({len} bytes at {ptr})"));
            String::new()
        }
    }
}

fn linker(engine: &Engine) -> Linker<Host> {
    let mut l = Linker::<Host>::new(engine);
    let m = "vassal";
    // Queries (TaskView) and effects, answered by the shared glue with the host's own Ctx
    // (which checks every effect again). Outside a call they answer "dead"/none.
    l.func_wrap(m, "state", |mut c: Caller<'_, Host>, task: i32| glue::state(c.data_mut().ctx(), task)).unwrap();
    l.func_wrap(m, "affinity", |mut c: Caller<'_, Host>, task: i32| glue::affinity(c.data_mut().ctx(), task)).unwrap();
    l.func_wrap(m, "owner", |mut c: Caller<'_, Host>, task: i32| glue::owner(c.data_mut().ctx(), task)).unwrap();
    l.func_wrap(m, "last_cpu", |mut c: Caller<'_, Host>, task: i32| glue::last_cpu(c.data_mut().ctx(), task)).unwrap();
    l.func_wrap(m, "running_on", |mut c: Caller<'_, Host>, cpu: i32| glue::running_on(c.data_mut().ctx(), cpu)).unwrap();
    l.func_wrap(m, "sched_id", |mut c: Caller<'_, Host>| glue::sched_id(c.data_mut().ctx())).unwrap();
    l.func_wrap(m, "set_event", |mut c: Caller<'_, Host>, at: i64, token: i64| glue::set_event(c.data_mut().ctx(), at, token)).unwrap();
    l.func_wrap(m, "cancel_event", |mut c: Caller<'_, Host>, token: i64| glue::cancel_event(c.data_mut().ctx(), token)).unwrap();
    l.func_wrap(m, "resched", |mut c: Caller<'_, Host>, cpu: i32| glue::resched(c.data_mut().ctx(), cpu)).unwrap();
    l.func_wrap(m, "set_exclusive", |mut c: Caller<'_, Host>, task: i32, on: i32| glue::set_exclusive(c.data_mut().ctx(), task, on))
        .unwrap();
    // Bytes from the module.
    l.func_wrap(m, "set_kind", |mut c: Caller<'_, Host>, ptr: i32, len: i32| {
        let s = read_text(&mut c, ptr, len);
        c.data_mut().kind = s;
    })
    .unwrap();
    l.func_wrap(m, "reason", |mut c: Caller<'_, Host>, ptr: i32, len: i32| {
        let s = read_text(&mut c, ptr, len);
        c.data_mut().reason = Some(s);
    })
    .unwrap();
    l.func_wrap(m, "reply", |mut c: Caller<'_, Host>, kind: i32, a: i64, b: i64, ptr: i32, len: i32| {
        let r = glue::reply(kind, a, b, || read_text(&mut c, ptr, len));
        c.data_mut().reply = Some(r);
    })
    .unwrap();
    l.func_wrap(m, "log", |mut c: Caller<'_, Host>, at: i64, task: i64, ptr: i32, len: i32| {
        let text = read_text(&mut c, ptr, len);
        glue::log(&mut c.data_mut().logs, at, task, text);
    })
    .unwrap();
    l
}

/// The module's exports the host calls. Only `vassal_pick` is required of a policy
/// beside the setup exports; the others default to doing nothing.
#[allow(clippy::type_complexity)]
struct Exports {
    buffer: TypedFunc<i32, i32>,
    attach: Option<TypedFunc<(i64, i32, i32, i64, i64, i32, i32), i32>>,
    detach: Option<TypedFunc<(i64, i32, i32), ()>>,
    wake: Option<TypedFunc<(i64, i32, i32, i64), ()>>,
    job: Option<TypedFunc<(i64, i32, i64, i64), ()>>,
    block: Option<TypedFunc<(i64, i32, i32), ()>>,
    dispatch: Option<TypedFunc<(i64, i32, i32), ()>>,
    preempt: Option<TypedFunc<(i64, i32, i32, i32), ()>>,
    run: Option<TypedFunc<(i64, i32, i32, i64), ()>>,
    tick: Option<TypedFunc<(i64, i32), ()>>,
    event: Option<TypedFunc<(i64, i64), ()>>,
    message: Option<TypedFunc<(i64, i64, i32, i32, i32, i64, i64, i64, f64, i32), ()>>,
    pick: TypedFunc<(i64, i32), i64>,
    refused: Option<TypedFunc<(i64, i32, i32, i64, i32, i32), ()>>,
    drain_log: Option<TypedFunc<(), ()>>,
    /// The address of the module's decision mailbox (the slice of the last pick).
    mailbox: usize,
}

/// The engine every module runs in (fuel metering on), made once per process.
fn engine() -> Result<&'static Engine, LoadError> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut config = Config::default();
            config.consume_fuel(true);
            Engine::new(&config).map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| LoadError::Invalid(format!("cannot start the WebAssembly engine: {e}")))
}

/// Compiles `bytes` (Cranelift: about a second for the BVT example on this machine), or
/// reuses the compiled module of identical bytes loaded before in this process (a
/// scenario is probed when parsed and loaded again when run; tests load the same
/// examples many times). A compiled module holds no state: each load instantiates it in
/// a store of its own.
fn compiled(bytes: &[u8]) -> Result<(&'static Engine, Module), LoadError> {
    static CACHE: Mutex<Vec<(Vec<u8>, Module)>> = Mutex::new(Vec::new());
    const KEEP: usize = 16;
    let engine = engine()?;
    if let Some((_, m)) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(b, _)| b == bytes) {
        return Ok((engine, m.clone()));
    }
    // On one line: the parser's messages may print byte arrays one per line.
    let module =
        Module::new(engine, bytes).map_err(|e| LoadError::Invalid(format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" ")))?;
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= KEEP {
        cache.remove(0);
    }
    cache.push((bytes.to_vec(), module.clone()));
    Ok((engine, module))
}

/// A loaded module running as a scheduling policy. See the module documentation.
pub struct WasmPolicy {
    store: Store<Host>,
    ex: Exports,
    limits: Limits,
    usage: Usage,
    fault: Option<String>,
    label: String,
}

fn describe_error(e: &wasmtime::Error, limits: &Limits, memory_denied: bool) -> String {
    if memory_denied {
        return format!("exceeded its memory limit ({} bytes)", limits.memory_bytes);
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => {
            format!("ran past its time budget ({} fuel units in one call)", limits.fuel_per_call)
        }
        Some(code) => format!("trapped: {}", code.to_string().trim_start_matches("wasm trap: ")),
        None => format!("failed: {e:#}"),
    }
}

impl WasmPolicy {
    /// Compiles and instantiates a module from a file, runs its `vassal_init` with
    /// `params`, and reads its declared CPU usage.
    pub fn from_file(path: &Path, ncpus: u16, params: &BTreeMap<String, ParamValue>, limits: Limits) -> Result<WasmPolicy, LoadError> {
        let (bytes, label) = crate::read_file(path)?;
        WasmPolicy::from_bytes(&bytes, &label, ncpus, params, limits)
    }

    /// Like [`WasmPolicy::from_file`], from the module's bytes; `label` names it in
    /// messages (e.g. the file name).
    pub fn from_bytes(
        bytes: &[u8],
        label: &str,
        ncpus: u16,
        params: &BTreeMap<String, ParamValue>,
        limits: Limits,
    ) -> Result<WasmPolicy, LoadError> {
        let (engine, module) = compiled(bytes)?;
        let host = Host {
            ctx: CtxPtr(std::ptr::null_mut()),
            memory: None,
            memory_limit: limits.memory_bytes,
            memory_denied: false,
            kind: String::new(),
            reason: None,
            reply: None,
            logs: Vec::new(),
            abi_fault: None,
        };
        let mut store = Store::new(engine, host);
        store.limiter(|h| h as &mut dyn wasmtime::ResourceLimiter);
        store.set_fuel(limits.fuel_per_call).map_err(|e| LoadError::Invalid(e.to_string()))?;
        let instance = linker(engine)
            .instantiate(&mut store, &module)
            .map_err(|e| LoadError::Abi(describe_error(&e, &limits, store.data().memory_denied)))?;
        let memory = match instance.get_export(&mut store, "memory") {
            Some(Extern::Memory(m)) => m,
            _ => return Err(LoadError::Abi("it exports no memory named 'memory'".into())),
        };
        store.data_mut().memory = Some(memory);
        macro_rules! req {
            ($name:literal) => {
                instance.get_typed_func(&mut store, $name).map_err(|e| LoadError::Abi(format!("export '{}': {e}", $name)))?
            };
        }
        macro_rules! opt {
            ($name:literal) => {
                match instance.get_export(&mut store, $name) {
                    None => None,
                    Some(_) => Some(req!($name)),
                }
            };
        }
        let abi: TypedFunc<(), i32> = req!("vassal_abi");
        let version = abi.call(&mut store, ()).map_err(|e| LoadError::Init(describe_error(&e, &limits, false)))?;
        if version != ABI_VERSION {
            return Err(LoadError::Abi(format!("it speaks ABI version {version}, the host speaks {ABI_VERSION}")));
        }
        let mailbox_f: TypedFunc<(), i32> = req!("vassal_mailbox");
        let mailbox = mailbox_f.call(&mut store, ()).map_err(|e| LoadError::Init(describe_error(&e, &limits, false)))?;
        let init: TypedFunc<(i32, i32), i32> = req!("vassal_init");
        let usage_kind: TypedFunc<(), i32> = req!("vassal_usage_kind");
        let usage_ppm: TypedFunc<(), i64> = req!("vassal_usage_ppm");
        let usage_cpus: TypedFunc<(), i64> = req!("vassal_usage_cpus");
        let ex = exports!(req, opt, usize::try_from(mailbox).map_err(|_| LoadError::Abi("negative mailbox address".into()))?);
        let mut p = WasmPolicy { store, ex, limits, usage: Usage::BestEffort, fault: None, label: label.to_string() };
        let bytes = glue::init_params(params)?;
        let fail = |p: &WasmPolicy, e: wasmtime::Error| LoadError::Init(describe_error(&e, &p.limits, p.store.data().memory_denied));
        p.store.set_fuel(limits.fuel_per_call).ok();
        let ptr = p.write_buffer(&bytes).map_err(|e| fail(&p, e))?;
        let _ = ptr;
        p.store.data_mut().reason = None;
        let rc = init.call(&mut p.store, (ncpus as i32, bytes.len() as i32)).map_err(|e| fail(&p, e))?;
        if rc != 0 {
            let why = p.store.data_mut().reason.take().unwrap_or_else(|| format!("vassal_init returned {rc}"));
            return Err(LoadError::Init(why));
        }
        let kind = usage_kind.call(&mut p.store, ()).map_err(|e| fail(&p, e))?;
        let ppm = usage_ppm.call(&mut p.store, ()).map_err(|e| fail(&p, e))?;
        let cpus = usage_cpus.call(&mut p.store, ()).map_err(|e| fail(&p, e))?;
        p.usage = glue::usage(kind, ppm, cpus)?;
        if p.store.data().kind.is_empty() {
            p.store.data_mut().kind = "module".to_string();
        }
        Ok(p)
    }

    /// The CPU usage the module declared (Vassal §8), for the conflict check at load.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Always true: a WebAssembly module runs in wasmtime's sandbox.
    pub fn sandboxed(&self) -> bool {
        true
    }

    /// Copies `bytes` into the buffer the module hands out; returns its address.
    fn write_buffer(&mut self, bytes: &[u8]) -> Result<usize, wasmtime::Error> {
        let ptr = self.ex.buffer.call(&mut self.store, bytes.len() as i32)?;
        let mem = self.store.data().memory.expect("set at load");
        let ptr = usize::try_from(ptr).map_err(|_| wasmtime::Error::msg("vassal_buffer returned a negative address"))?;
        mem.write(&mut self.store, ptr, bytes).map_err(|e| wasmtime::Error::msg(format!("vassal_buffer: {e}")))?;
        Ok(ptr)
    }

    /// Runs `f` (one call into the module) with `ctx` visible to the host functions and a
    /// fresh fuel budget. A failure makes the module inert for good.
    fn enter<R>(&mut self, ctx: &mut Ctx, f: impl FnOnce(&mut Self) -> Result<R, wasmtime::Error>) -> Option<R> {
        if self.fault.is_some() {
            return None;
        }
        self.store.data_mut().ctx = CtxPtr(ctx as *mut Ctx as *mut ());
        let _ = self.store.set_fuel(self.limits.fuel_per_call);
        let r = f(self);
        let host = self.store.data_mut();
        host.ctx = CtxPtr(std::ptr::null_mut());
        let (denied, abi) = (host.memory_denied, host.abi_fault.take());
        match r {
            Err(e) => {
                self.fault = Some(describe_error(&e, &self.limits, denied));
                None
            }
            Ok(_) if denied => {
                self.fault = Some(format!("exceeded its memory limit ({} bytes)", self.limits.memory_bytes));
                None
            }
            Ok(_) if abi.is_some() => {
                self.fault = abi;
                None
            }
            Ok(v) => Some(v),
        }
    }

    fn read_mailbox_u64(&self) -> Option<u64> {
        let mem = self.store.data().memory?;
        let mut b = [0u8; 8];
        mem.read(&self.store, self.ex.mailbox, &mut b).ok()?;
        Some(u64::from_le_bytes(b))
    }
}

fn task_arg(t: TaskId) -> i32 {
    t.0 as i32
}

impl Policy for WasmPolicy {
    fn kind(&self) -> &str {
        &self.store.data().kind
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.attach.clone() else { return Ok(()) };
        let state = glue::state_code(info.state);
        let bytes = encode_task_params(info.params).into_bytes();
        let parent = info.parent.map_or(-1, |p| p.0 as i64);
        let aff = info.affinity.0 as i64;
        let guest = i32::from(info.guest);
        let r = self.enter(ctx, |p| {
            p.store.data_mut().reason = None;
            p.write_buffer(&bytes)?;
            f.call(&mut p.store, (now, task_arg(task), state, aff, parent, guest, bytes.len() as i32))
        });
        match r {
            Some(0) => Ok(()),
            Some(rc) => Err(self.store.data_mut().reason.take().unwrap_or_else(|| format!("refused (code {rc})"))),
            None => Err(format!("module {} failed: {}", self.label, self.fault.clone().unwrap_or_default())),
        }
    }

    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, why: Detach) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.detach.clone() else { return };
        let why = glue::detach_code(why);
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), why)));
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, wake: Wake) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.wake.clone() else { return };
        let (flags, irq) = glue::wake_args(wake);
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), flags, irq)));
    }

    fn on_job(&mut self, ctx: &mut Ctx, task: TaskId, job: Job) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.job.clone() else { return };
        let (release, deadline) = glue::job_args(job);
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), release, deadline)));
    }

    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, block: Block) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.block.clone() else { return };
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), i32::from(block.voluntary))));
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.dispatch.clone() else { return };
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), cpu.0 as i32)));
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.preempt.clone() else { return };
        let why = glue::preempt_code(why);
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), cpu.0 as i32, why)));
    }

    fn on_run(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.run.clone() else { return };
        self.enter(ctx, |p| f.call(&mut p.store, (now, task_arg(task), cpu.0 as i32, ran as i64)));
    }

    fn on_tick(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.tick.clone() else { return };
        self.enter(ctx, |p| f.call(&mut p.store, (now, cpu.0 as i32)));
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.event.clone() else { return };
        self.enter(ctx, |p| f.call(&mut p.store, (now, token as i64)));
    }

    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.message.clone() else {
            return Reply::refused(format!("{} does not understand {req:?}", self.kind()));
        };
        let Some((kind, a, b, c, util, name)) = encode_request(req) else {
            return Reply::refused(format!("{} does not understand {req:?}", self.kind()));
        };
        let from_task = from.task.map_or(-1, |t| t.0 as i64);
        let uid = from.uid as i32;
        let name = name.as_bytes().to_vec();
        let r = self.enter(ctx, |p| {
            p.store.data_mut().reply = None;
            p.write_buffer(&name)?;
            let args = (now, from_task, uid, task_arg(task), kind, a, b, c, util, name.len() as i32);
            f.call(&mut p.store, args)
        });
        match r {
            Some(()) => self.store.data_mut().reply.take().unwrap_or(Reply::Ok),
            None => Reply::refused(format!("module {} failed: {}", self.label, self.fault.clone().unwrap_or_default())),
        }
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let now = ctx.now() as i64;
        let f = self.ex.pick.clone();
        let t = self.enter(ctx, |p| f.call(&mut p.store, (now, cpu.0 as i32)))?;
        if t < 0 {
            return None;
        }
        let slice = self.read_mailbox_u64()?;
        // A task id that does not fit is no task: the dispatcher refuses it (and ejects).
        let task = TaskId(u32::try_from(t).unwrap_or(u32::MAX));
        Some(Decision { task, slice: (slice != SLICE_NONE).then_some(slice) })
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, d: Decision, why: Refusal) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.refused.clone() else { return };
        let (why, at) = glue::refusal_args(why);
        let slice = d.slice.map_or(-1, |s| s as i64);
        self.enter(ctx, |p| f.call(&mut p.store, (now, cpu.0 as i32, task_arg(d.task), slice, why, at)));
    }

    fn drain_log(&mut self, out: &mut Vec<PolicyLog>) {
        if let (Some(f), None) = (self.ex.drain_log.clone(), &self.fault) {
            let _ = self.store.set_fuel(self.limits.fuel_per_call);
            if let Err(e) = f.call(&mut self.store, ()) {
                self.fault = Some(describe_error(&e, &self.limits, self.store.data().memory_denied));
            }
        }
        out.append(&mut self.store.data_mut().logs);
    }

    fn fault(&self) -> Option<String> {
        self.fault.as_ref().map(|f| format!("module {} {f}", self.label))
    }
}
