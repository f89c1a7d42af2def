//! The native host: [`NativePolicy`] runs a policy built with the SDK for the host target
//! (a shared library with the same `extern "C"` exports as the WebAssembly form, loaded
//! with `libloading`) as a `vassal_core::Policy`, for trusted policies where a decision
//! must cost what a built-in one costs — as Vassal's scheduler drivers were trusted kernel
//! code (paper 000 §3–4).
//!
//! What still contains a native module: the dispatcher's own checks (an invalid decision
//! and the watchdog eject it, [`vassal_core::Containment`]), the ABI checks at load, and a
//! panic, which the SDK catches at the module's boundary (built with `panic = "unwind"`,
//! the default): the module turns inert and reports it through its `vassal_fault` export,
//! read after every call ([`Policy::fault`]), and the dispatcher ejects it as it ejects a
//! trapping WebAssembly module. What does not: there is no fuel and no memory limit, and
//! a fault that is not a panic (a bad pointer, an abort, a stack overflow, an endless
//! loop) — or any panic in a module built with `panic = "abort"`, which exports no
//! `vassal_fault` — crashes or hangs the host. Load native modules only from those you
//! would let run code as the agent ([`crate::Backend::sandboxed`] tells the forms apart
//! before loading).
//!
//! The host's functions go to the module as a table of function pointers
//! ([`HostFns`], the SDK's `vassal_sdk::native::HostFns`) through the module's
//! `vassal_native_host` export, before any other call. A module's state lives in the
//! library's statics, so each load opens its own private copy of the file: two loads of
//! one file are two independent instances.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

use vassal_core::{
    AttachInfo, Block, CpuId, Ctx, Decision, Detach, Job, Ns, ParamValue, Policy, PolicyLog, Preempt, Refusal, Reply, Request, Sender,
    TaskId, Usage, Wake,
};

use crate::abi::*;
use crate::glue::exports;
use crate::{glue, LoadError};

/// The host's function table, the layout of `vassal_sdk::native::HostFns` (checked by the
/// module through `abi` and `size`).
#[repr(C)]
struct HostFns {
    abi: u32,
    size: u32,
    env: *mut c_void,
    state: unsafe extern "C" fn(*mut c_void, i32) -> i32,
    affinity: unsafe extern "C" fn(*mut c_void, i32) -> i64,
    owner: unsafe extern "C" fn(*mut c_void, i32) -> i64,
    last_cpu: unsafe extern "C" fn(*mut c_void, i32) -> i32,
    running_on: unsafe extern "C" fn(*mut c_void, i32) -> i64,
    sched_id: unsafe extern "C" fn(*mut c_void) -> i64,
    set_event: unsafe extern "C" fn(*mut c_void, i64, i64) -> i32,
    cancel_event: unsafe extern "C" fn(*mut c_void, i64),
    resched: unsafe extern "C" fn(*mut c_void, i32) -> i32,
    set_exclusive: unsafe extern "C" fn(*mut c_void, i32, i32) -> i32,
    set_kind: unsafe extern "C" fn(*mut c_void, *const u8, usize),
    reason: unsafe extern "C" fn(*mut c_void, *const u8, usize),
    reply: unsafe extern "C" fn(*mut c_void, i32, i64, i64, *const u8, usize),
    log: unsafe extern "C" fn(*mut c_void, i64, i64, *const u8, usize),
}

/// What the host functions reach through `env`: the `Ctx` of the call in progress (null
/// between calls) and what the module hands back.
struct Host {
    ctx: *mut (),
    kind: String,
    reason: Option<String>,
    reply: Option<Reply>,
    logs: Vec<PolicyLog>,
}

/// # Safety
/// `env` is the `Host` the table was made for (boxed by its `NativePolicy`, which outlives
/// the library's calls).
unsafe fn host<'a>(env: *mut c_void) -> &'a mut Host {
    &mut *(env as *mut Host)
}

/// # Safety
/// As [`host`]; the `Ctx` pointer is set only for the duration of one call into the module.
unsafe fn ctx<'a>(env: *mut c_void) -> Option<&'a mut Ctx<'static>> {
    let p = host(env).ctx;
    (!p.is_null()).then(|| &mut *(p as *mut Ctx<'static>))
}

/// A string the module passes (pointer and length in its own memory, i.e. ours).
unsafe fn text(ptr: *const u8, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    String::from_utf8_lossy(std::slice::from_raw_parts(ptr, len.min(glue::MAX_TEXT))).into_owned()
}

unsafe extern "C" fn h_state(env: *mut c_void, task: i32) -> i32 {
    glue::state(ctx(env), task)
}
unsafe extern "C" fn h_affinity(env: *mut c_void, task: i32) -> i64 {
    glue::affinity(ctx(env), task)
}
unsafe extern "C" fn h_owner(env: *mut c_void, task: i32) -> i64 {
    glue::owner(ctx(env), task)
}
unsafe extern "C" fn h_last_cpu(env: *mut c_void, task: i32) -> i32 {
    glue::last_cpu(ctx(env), task)
}
unsafe extern "C" fn h_running_on(env: *mut c_void, cpu: i32) -> i64 {
    glue::running_on(ctx(env), cpu)
}
unsafe extern "C" fn h_sched_id(env: *mut c_void) -> i64 {
    glue::sched_id(ctx(env))
}
unsafe extern "C" fn h_set_event(env: *mut c_void, at: i64, token: i64) -> i32 {
    glue::set_event(ctx(env), at, token)
}
unsafe extern "C" fn h_cancel_event(env: *mut c_void, token: i64) {
    glue::cancel_event(ctx(env), token)
}
unsafe extern "C" fn h_resched(env: *mut c_void, cpu: i32) -> i32 {
    glue::resched(ctx(env), cpu)
}
unsafe extern "C" fn h_set_exclusive(env: *mut c_void, task: i32, on: i32) -> i32 {
    glue::set_exclusive(ctx(env), task, on)
}
unsafe extern "C" fn h_set_kind(env: *mut c_void, ptr: *const u8, len: usize) {
    host(env).kind = text(ptr, len);
}
unsafe extern "C" fn h_reason(env: *mut c_void, ptr: *const u8, len: usize) {
    host(env).reason = Some(text(ptr, len));
}
unsafe extern "C" fn h_reply(env: *mut c_void, kind: i32, a: i64, b: i64, ptr: *const u8, len: usize) {
    host(env).reply = Some(glue::reply(kind, a, b, || text(ptr, len)));
}
unsafe extern "C" fn h_log(env: *mut c_void, at: i64, task: i64, ptr: *const u8, len: usize) {
    let t = text(ptr, len);
    glue::log(&mut host(env).logs, at, task, t);
}

/// The module's exports, resolved once at load.
#[allow(clippy::type_complexity)]
struct Exports {
    buffer: unsafe extern "C" fn(usize) -> *mut u8,
    attach: Option<unsafe extern "C" fn(i64, i32, i32, i64, i64, i32, i32) -> i32>,
    detach: Option<unsafe extern "C" fn(i64, i32, i32)>,
    wake: Option<unsafe extern "C" fn(i64, i32, i32, i64)>,
    job: Option<unsafe extern "C" fn(i64, i32, i64, i64)>,
    block: Option<unsafe extern "C" fn(i64, i32, i32)>,
    dispatch: Option<unsafe extern "C" fn(i64, i32, i32)>,
    preempt: Option<unsafe extern "C" fn(i64, i32, i32, i32)>,
    run: Option<unsafe extern "C" fn(i64, i32, i32, i64)>,
    tick: Option<unsafe extern "C" fn(i64, i32)>,
    event: Option<unsafe extern "C" fn(i64, i64)>,
    message: Option<unsafe extern "C" fn(i64, i64, i32, i32, i32, i64, i64, i64, f64, i32)>,
    pick: unsafe extern "C" fn(i64, i32) -> i64,
    refused: Option<unsafe extern "C" fn(i64, i32, i32, i64, i32, i32)>,
    drain_log: Option<unsafe extern "C" fn()>,
    /// Where the module leaves the slice of its last pick.
    mailbox: *const u64,
}

/// The SDK's `Fault` (`vassal_sdk::Fault`): `len` bytes of UTF-8 at `ptr`, `len` 0 until
/// the module fails.
#[repr(C)]
struct Fault {
    len: usize,
    ptr: *const u8,
}

/// A native (shared-library) module running as a scheduling policy: trusted, not
/// sandboxed. See the module documentation.
pub struct NativePolicy {
    ex: Exports,
    /// The module's fault record (`vassal_fault`); null if it exports none (built with
    /// `panic = "abort"`, or an older SDK: a panic aborts the host).
    fault: *const Fault,
    host: Box<Host>,
    /// Read by the module through `env` pointers; boxed so its address is stable.
    _table: Box<HostFns>,
    usage: Usage,
    label: String,
    /// Dropped last: the code behind `ex`.
    _lib: libloading::Library,
}

// SAFETY: the raw pointers (the mailbox, the table's env, the Ctx pointer) point into this
// policy's own library copy and boxes; all calls come through `&mut self`, one at a time,
// on whichever thread owns the policy. The SDK's module state is plain statics with no
// thread affinity.
unsafe impl Send for NativePolicy {}

/// Gives each load its own file name (see the module documentation).
static COPIES: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
fn open_private_copy(bytes: &[u8], label: &str) -> Result<libloading::Library, LoadError> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    let n = COPIES.fetch_add(1, Ordering::Relaxed);
    let safe: String = label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '_' { c } else { '_' }).collect();
    let path = std::env::temp_dir().join(format!("vassal-native-{}-{n}-{safe}", std::process::id()));
    // A new file only (O_CREAT|O_EXCL: never through a symlink or into someone else's file
    // planted at the name), readable by us alone; the temp dir's sticky bit keeps others
    // from swapping it before it is opened.
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(&path)?;
        f.write_all(bytes)
    };
    write().map_err(|err| LoadError::Read { path: path.display().to_string(), err })?;
    // SAFETY: loading a library runs its initialisers: the trust a native module is given.
    let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_LOCAL) };
    let _ = std::fs::remove_file(&path); // the mapping stays
    lib.map(Into::into).map_err(|e| LoadError::Invalid(format!("cannot load native module {label}: {e}")))
}

#[cfg(not(unix))]
fn open_private_copy(_: &[u8], label: &str) -> Result<libloading::Library, LoadError> {
    Err(LoadError::Invalid(format!("{label}: native modules are supported on Unix only")))
}

impl NativePolicy {
    /// Loads a native module from its bytes (an ELF shared library built with the SDK for
    /// this machine), hands it the host's table, runs its `vassal_init` with `params` and
    /// reads its declared CPU usage. `label` names it in messages.
    pub fn from_bytes(bytes: &[u8], label: &str, ncpus: u16, params: &BTreeMap<String, ParamValue>) -> Result<NativePolicy, LoadError> {
        let lib = open_private_copy(bytes, label)?;
        macro_rules! req {
            ($name:literal) => {
                // SAFETY: the signature is the ABI's (docs/modules.md); a library that
                // exports the name with another signature breaks the trust it was given.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|_| LoadError::Abi(format!("it exports no '{}'", $name)))?
            };
        }
        macro_rules! opt {
            ($name:literal) => {
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s| *s)
            };
        }
        let abi: unsafe extern "C" fn() -> i32 = req!("vassal_abi");
        let version = unsafe { abi() };
        if version != ABI_VERSION {
            return Err(LoadError::Abi(format!("it speaks ABI version {version}, the host speaks {ABI_VERSION}")));
        }
        let set_host: unsafe extern "C" fn(*const HostFns) -> i32 = req!("vassal_native_host");
        let mailbox: unsafe extern "C" fn() -> *mut u64 = req!("vassal_mailbox");
        let init: unsafe extern "C" fn(i32, i32) -> i32 = req!("vassal_init");
        let usage_kind: unsafe extern "C" fn() -> i32 = req!("vassal_usage_kind");
        let usage_ppm: unsafe extern "C" fn() -> i64 = req!("vassal_usage_ppm");
        let usage_cpus: unsafe extern "C" fn() -> i64 = req!("vassal_usage_cpus");
        let ex = exports!(req, opt, unsafe { mailbox() });
        let fault_at: Option<unsafe extern "C" fn() -> *const Fault> = opt!("vassal_fault");
        let fault = fault_at.map_or(std::ptr::null(), |f| unsafe { f() });
        let mut host = Box::new(Host { ctx: std::ptr::null_mut(), kind: String::new(), reason: None, reply: None, logs: Vec::new() });
        let table = Box::new(HostFns {
            abi: ABI_VERSION as u32,
            size: size_of::<HostFns>() as u32,
            env: &mut *host as *mut Host as *mut c_void,
            state: h_state,
            affinity: h_affinity,
            owner: h_owner,
            last_cpu: h_last_cpu,
            running_on: h_running_on,
            sched_id: h_sched_id,
            set_event: h_set_event,
            cancel_event: h_cancel_event,
            resched: h_resched,
            set_exclusive: h_set_exclusive,
            set_kind: h_set_kind,
            reason: h_reason,
            reply: h_reply,
            log: h_log,
        });
        if unsafe { set_host(&*table) } != 0 {
            return Err(LoadError::Abi("it refused the host's function table (another SDK version?)".into()));
        }
        if ex.mailbox.is_null() {
            return Err(LoadError::Abi("null mailbox address".into()));
        }
        let mut p = NativePolicy { ex, fault, host, _table: table, usage: Usage::BestEffort, label: label.to_string(), _lib: lib };
        let bytes = glue::init_params(params)?;
        p.write_buffer(&bytes)?;
        let rc = unsafe { init(ncpus as i32, bytes.len() as i32) };
        if rc != 0 {
            let why = p.host.reason.take().unwrap_or_else(|| format!("vassal_init returned {rc}"));
            return Err(LoadError::Init(why));
        }
        if let Some(f) = p.fault() {
            return Err(LoadError::Init(f));
        }
        let (kind, ppm, cpus) = unsafe { (usage_kind(), usage_ppm(), usage_cpus()) };
        p.usage = glue::usage(kind, ppm, cpus)?;
        if p.host.kind.is_empty() {
            p.host.kind = "module".to_string();
        }
        Ok(p)
    }

    /// The CPU usage the module declared (Vassal §8), for the conflict check at load.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Always false: a native module runs unconfined in the host's process.
    pub fn sandboxed(&self) -> bool {
        false
    }

    /// Whether a panic in the module is caught and reported as its fault (it exports
    /// `vassal_fault`: built with the SDK and `panic = "unwind"`), rather than aborting
    /// the host.
    pub fn catches_panics(&self) -> bool {
        !self.fault.is_null()
    }

    fn write_buffer(&mut self, bytes: &[u8]) -> Result<(), LoadError> {
        let ptr = unsafe { (self.ex.buffer)(bytes.len()) };
        if ptr.is_null() {
            return Err(LoadError::Abi("vassal_buffer returned a null address".into()));
        }
        // SAFETY: the module handed out `bytes.len()` bytes at `ptr`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
        Ok(())
    }

    /// Runs `f` (one call into the module) with `ctx` visible to the host functions.
    fn enter<R>(&mut self, ctx: &mut Ctx, f: impl FnOnce(&mut Self) -> R) -> R {
        self.host.ctx = ctx as *mut Ctx as *mut ();
        let r = f(self);
        self.host.ctx = std::ptr::null_mut();
        r
    }
}

fn task_arg(t: TaskId) -> i32 {
    t.0 as i32
}

impl Policy for NativePolicy {
    fn kind(&self) -> &str {
        &self.host.kind
    }

    fn on_attach(&mut self, ctx: &mut Ctx, task: TaskId, info: &AttachInfo) -> Result<(), String> {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.attach else { return Ok(()) };
        let state = glue::state_code(info.state);
        let bytes = encode_task_params(info.params).into_bytes();
        let parent = info.parent.map_or(-1, |p| p.0 as i64);
        let (aff, guest) = (info.affinity.0 as i64, i32::from(info.guest));
        let rc = self.enter(ctx, |p| {
            p.host.reason = None;
            p.write_buffer(&bytes).map_err(|e| e.to_string())?;
            Ok::<_, String>(unsafe { f(now, task_arg(task), state, aff, parent, guest, bytes.len() as i32) })
        })?;
        match rc {
            0 => Ok(()),
            _ if self.fault().is_some() => Err(self.fault().unwrap_or_default()),
            rc => Err(self.host.reason.take().unwrap_or_else(|| format!("refused (code {rc})"))),
        }
    }

    fn on_detach(&mut self, ctx: &mut Ctx, task: TaskId, why: Detach) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.detach else { return };
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), glue::detach_code(why)) });
    }

    fn on_wake(&mut self, ctx: &mut Ctx, task: TaskId, wake: Wake) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.wake else { return };
        let (flags, irq) = glue::wake_args(wake);
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), flags, irq) });
    }

    fn on_job(&mut self, ctx: &mut Ctx, task: TaskId, job: Job) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.job else { return };
        let (release, deadline) = glue::job_args(job);
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), release, deadline) });
    }

    fn on_block(&mut self, ctx: &mut Ctx, task: TaskId, block: Block) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.block else { return };
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), i32::from(block.voluntary)) });
    }

    fn on_dispatch(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.dispatch else { return };
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), cpu.0 as i32) });
    }

    fn on_preempt(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, why: Preempt) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.preempt else { return };
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), cpu.0 as i32, glue::preempt_code(why)) });
    }

    fn on_run(&mut self, ctx: &mut Ctx, task: TaskId, cpu: CpuId, ran: Ns) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.run else { return };
        self.enter(ctx, |_| unsafe { f(now, task_arg(task), cpu.0 as i32, ran as i64) });
    }

    fn on_tick(&mut self, ctx: &mut Ctx, cpu: CpuId) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.tick else { return };
        self.enter(ctx, |_| unsafe { f(now, cpu.0 as i32) });
    }

    fn on_event(&mut self, ctx: &mut Ctx, token: u64) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.event else { return };
        self.enter(ctx, |_| unsafe { f(now, token as i64) });
    }

    fn on_message(&mut self, ctx: &mut Ctx, from: Sender, task: TaskId, req: &Request) -> Reply {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.message else {
            return Reply::refused(format!("{} does not understand {req:?}", self.kind()));
        };
        let Some((kind, a, b, c, util, name)) = encode_request(req) else {
            return Reply::refused(format!("{} does not understand {req:?}", self.kind()));
        };
        let from_task = from.task.map_or(-1, |t| t.0 as i64);
        let uid = from.uid as i32;
        let name = name.as_bytes().to_vec();
        let r = self.enter(ctx, |p| {
            p.host.reply = None;
            p.write_buffer(&name)?;
            unsafe { f(now, from_task, uid, task_arg(task), kind, a, b, c, util, name.len() as i32) };
            Ok::<_, LoadError>(())
        });
        match r {
            Ok(()) if self.fault().is_some() => Reply::refused(self.fault().unwrap_or_default()),
            Ok(()) => self.host.reply.take().unwrap_or(Reply::Ok),
            Err(e) => Reply::refused(format!("module {}: {e}", self.label)),
        }
    }

    fn pick(&mut self, ctx: &mut Ctx, cpu: CpuId) -> Option<Decision> {
        let now = ctx.now() as i64;
        let f = self.ex.pick;
        let t = self.enter(ctx, |_| unsafe { f(now, cpu.0 as i32) });
        if t < 0 {
            return None;
        }
        // SAFETY: the module's own address, checked non-null at load.
        let slice = unsafe { self.ex.mailbox.read() };
        // A task id that does not fit is no task: the dispatcher refuses it (and ejects).
        let task = TaskId(u32::try_from(t).unwrap_or(u32::MAX));
        Some(Decision { task, slice: (slice != SLICE_NONE).then_some(slice) })
    }

    fn on_refused(&mut self, ctx: &mut Ctx, cpu: CpuId, d: Decision, why: Refusal) {
        let now = ctx.now() as i64;
        let Some(f) = self.ex.refused else { return };
        let (why, at) = glue::refusal_args(why);
        let slice = d.slice.map_or(-1, |s| s as i64);
        self.enter(ctx, |_| unsafe { f(now, cpu.0 as i32, task_arg(d.task), slice, why, at) });
    }

    fn drain_log(&mut self, out: &mut Vec<PolicyLog>) {
        if let Some(f) = self.ex.drain_log {
            unsafe { f() };
        }
        out.append(&mut self.host.logs);
    }

    /// A panic the module caught (see the module documentation): one read of its fault
    /// record per call.
    fn fault(&self) -> Option<String> {
        if self.fault.is_null() {
            return None;
        }
        // SAFETY: the module's own static, valid while its library is loaded (it is
        // dropped last); written once, by the module, during a call that has returned.
        let f = unsafe { std::ptr::read_volatile(self.fault) };
        if f.len == 0 || f.ptr.is_null() {
            return None;
        }
        // SAFETY: the SDK leaked `len` bytes of a String at `ptr` and never frees them.
        let text = unsafe { std::slice::from_raw_parts(f.ptr, f.len.min(4096)) };
        Some(format!("module {} {}", self.label, String::from_utf8_lossy(text)))
    }
}
