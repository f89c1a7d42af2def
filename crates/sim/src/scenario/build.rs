//! Semantic checks: the raw file (`raw.rs`) built into a validated
//! [`Scenario`](crate::model::Scenario). What needs more than one value is checked here
//! (references between names, duplicates, CPU ranges, the policy builder), and each
//! error points at the offending value through the span serde kept for it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::path::Path;

use toml::Spanned;

use vassal_core::{CpuId, CpuSet, Request, TaskParams, Usage, CPU_PPM, MAX_CPUS, SEC};
use vassal_policies::ParamValue;

use super::raw::{ParamMap, RawBehaviour, RawMachine, RawPhase, RawScenario, RawScheduler, RawUsage};
use super::values::{DistV, Dur};
use super::{ScenarioError, Source, DEFAULT_HZ, DEFAULT_POLICY, DEFAULT_SCHEDULER_NAME, MAX_COUNT, MAX_TASKS};
use crate::memory::Placement;
use crate::model::{
    Behaviour, ClockMode, Dist, InterruptSpec, Machine, Memory, OtherKind, OtherParam, Phase, PolicySpec, Scenario, SchedulerSpec,
    SendSpec, TaskSpec, Unscheduled, UnscheduledSource,
};
use crate::swap::{MemoryConfig, SwapIn, SwapOut};

type R<T> = Result<T, ScenarioError>;

pub(super) struct Builder<'a> {
    pub(super) src: Source<'a>,
}

/// Names of the schedulers, for references from tasks.
struct Names {
    default: String,
    schedulers: BTreeSet<String>,
    tasks: BTreeSet<String>,
}

impl Names {
    fn scheduler_list(&self) -> String {
        std::iter::once(&self.default).chain(self.schedulers.iter()).map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
    }
}

fn positive_mean(d: &Dist) -> bool {
    match *d {
        Dist::Const(n) | Dist::Exp(n) | Dist::Normal(n, _) => n > 0,
        Dist::Uniform(_, hi) => hi > 0,
    }
}

fn ppm_of(fraction: f64) -> Option<u64> {
    let ppm = (fraction * CPU_PPM as f64).round();
    // Finite and in range by the callers' checks; guard anyway so the cast is exact.
    (ppm.is_finite() && ppm >= 0.0 && ppm <= u64::MAX as f64 / 2.0).then_some(ppm as u64)
}

impl Builder<'_> {
    fn err(&self, span: Range<usize>, msg: impl Into<String>) -> ScenarioError {
        self.src.err(span, msg)
    }

    pub(super) fn scenario(&self, raw: RawScenario) -> R<Scenario> {
        let name = match &raw.name {
            Some(n) if n.get_ref().trim().is_empty() => return Err(self.err(n.span(), "name must not be empty")),
            Some(n) => n.get_ref().clone(),
            None => Path::new(self.src.file)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "scenario".to_string()),
        };
        let until = raw.until.get_ref().0;
        if until == 0 {
            return Err(self.err(raw.until.span(), "until must be greater than 0, e.g. \"10s\""));
        }
        let machine = self.machine(&raw.machine)?;
        let ncpus = machine.cpus;

        // The default scheduler.
        let (default_name, default_policy) = match &raw.default {
            None => {
                let params = BTreeMap::new();
                if let Err(e) = vassal_policies::build(DEFAULT_POLICY, &params) {
                    return Err(self.err(0..0, format!("the default policy '{DEFAULT_POLICY}' (no [default] table): {e}")));
                }
                (DEFAULT_SCHEDULER_NAME.to_string(), PolicySpec { kind: DEFAULT_POLICY.to_string(), params })
            }
            Some(d) => {
                let dref = d.get_ref();
                let name = match &dref.name {
                    Some(n) => self.check_name(n, "scheduler")?,
                    None => DEFAULT_SCHEDULER_NAME.to_string(),
                };
                let (kind, kind_span) = match &dref.policy {
                    Some(p) => (p.get_ref().clone(), p.span()),
                    None => (DEFAULT_POLICY.to_string(), d.span()),
                };
                (name, self.policy(kind, kind_span, dref.params.as_ref())?)
            }
        };

        // Other schedulers.
        let mut sched_lines: HashMap<String, usize> = HashMap::new();
        let mut schedulers = Vec::new();
        for s in &raw.scheduler {
            let name = self.check_name(&s.name, "scheduler")?;
            if name == default_name {
                return Err(self.err(s.name.span(), format!("scheduler name '{name}' is already the default scheduler's name")));
            }
            if let Some(line) = sched_lines.get(&name) {
                return Err(self.err(s.name.span(), format!("duplicate scheduler name '{name}' (also defined at line {line})")));
            }
            sched_lines.insert(name.clone(), self.src.line_of(&s.name.span()));
            let (policy, usage) = match (&s.policy, &s.module) {
                (Some(p), None) => {
                    let policy = self.policy(p.get_ref().clone(), p.span(), s.params.as_ref())?;
                    let Some(u) = &s.usage else {
                        return Err(self.err(self.table_header(&s.name), "missing required key `usage`"));
                    };
                    (policy, self.usage(u, ncpus)?)
                }
                (None, Some(m)) => self.module_scheduler(&name, m, s, ncpus)?,
                (Some(p), Some(_)) => {
                    return Err(self.err(p.span(), format!("scheduler '{name}' has both a policy and a module; give one")))
                }
                (None, None) => return Err(self.err(self.table_header(&s.name), "missing required key `policy` (or `module`)")),
            };
            let load_at = s.load_at.map_or(0, |d| d.0);
            let unload_at = match &s.unload_at {
                Some(u) if u.get_ref().0 <= load_at => {
                    return Err(self.err(
                        u.span(),
                        format!(
                            "unload_at ({}) must be later than load_at ({})",
                            vassal_core::fmt_duration(u.get_ref().0),
                            vassal_core::fmt_duration(load_at)
                        ),
                    ))
                }
                Some(u) => Some(u.get_ref().0),
                None => None,
            };
            schedulers.push(SchedulerSpec { name, policy, usage, load_at, unload_at });
        }

        // Task names after count expansion (first pass, so scripts may name later tasks).
        let mut task_lines: HashMap<String, usize> = HashMap::new();
        let mut expanded: Vec<Vec<String>> = Vec::new();
        let mut total = 0usize;
        for t in &raw.task {
            let base = self.check_name(&t.name, "task")?;
            let names = match &t.count {
                None => vec![base],
                Some(c) => {
                    let n = *c.get_ref();
                    if !(1..=MAX_COUNT).contains(&n) {
                        return Err(self.err(c.span(), format!("count must be between 1 and {MAX_COUNT}, found {n}")));
                    }
                    (0..n).map(|i| format!("{base}.{i}")).collect()
                }
            };
            total += names.len();
            if total > MAX_TASKS {
                return Err(self.err(t.name.span(), format!("too many tasks (more than {MAX_TASKS})")));
            }
            for n in &names {
                if let Some(line) = task_lines.get(n) {
                    return Err(self.err(t.name.span(), format!("duplicate task name '{n}' (also defined at line {line})")));
                }
                task_lines.insert(n.clone(), self.src.line_of(&t.name.span()));
            }
            expanded.push(names);
        }
        let names = Names {
            default: default_name.clone(),
            schedulers: schedulers.iter().map(|s| s.name.clone()).collect(),
            tasks: task_lines.keys().cloned().collect(),
        };

        // Interrupts.
        let mut interrupts = Vec::new();
        for i in &raw.interrupt {
            let every = i.every.get_ref().0.clone();
            if !positive_mean(&every) {
                return Err(self.err(i.every.span(), "interrupt interval `every` must have a mean greater than 0"));
            }
            interrupts.push(InterruptSpec {
                vector: *i.vector.get_ref(),
                every,
                start: i.start.map_or(0, |d| d.0),
                warp: i.warp.unwrap_or(false),
            });
        }
        let vectors: BTreeSet<u32> = interrupts.iter().map(|i| i.vector).collect();

        // Tasks.
        let mut tasks = Vec::new();
        let mut handlers: BTreeMap<u32, String> = BTreeMap::new();
        for (t, task_names) in raw.task.iter().zip(&expanded) {
            let scheduler = match &t.scheduler {
                None => None,
                Some(s) if *s.get_ref() == names.default => None,
                Some(s) if names.schedulers.contains(s.get_ref()) => Some(s.get_ref().clone()),
                Some(s) => {
                    return Err(self.err(
                        s.span(),
                        format!(
                            "task '{}' names scheduler '{}', which does not exist; expected one of {}",
                            t.name.get_ref(),
                            s.get_ref(),
                            names.scheduler_list()
                        ),
                    ))
                }
            };
            let affinity = match &t.affinity {
                None => CpuSet::first(ncpus),
                Some(a) => self.cpu_list(a, ncpus, "affinity")?,
            };
            let params: TaskParams = t.params.as_ref().map(|p| p.iter().map(|(k, v)| (k.clone(), v.0)).collect()).unwrap_or_default();
            for tn in task_names {
                let behaviour = self.behaviour(&t.behaviour, tn, &names)?;
                if let Behaviour::Handler { vector, .. } = &behaviour {
                    let span = t.behaviour.get_ref().vector.as_ref().map_or(t.behaviour.span(), |v| v.span());
                    if let Some(other) = handlers.get(vector) {
                        return Err(self.err(span, format!("vector {vector} already has handler task '{other}'; one handler per vector")));
                    }
                    if !vectors.contains(vector) {
                        return Err(self.err(
                            span,
                            format!("handler task '{tn}' waits on vector {vector}, but no [[interrupt]] has vector = {vector}"),
                        ));
                    }
                    handlers.insert(*vector, tn.clone());
                }
                tasks.push(TaskSpec {
                    name: tn.clone(),
                    start: t.start.map_or(0, |d| d.0),
                    scheduler: scheduler.clone(),
                    affinity,
                    params: params.clone(),
                    uid: t.uid.unwrap_or(0),
                    behaviour,
                    loop_at: t.loop_at.map(|d| d.0),
                });
            }
        }
        for i in &raw.interrupt {
            let v = *i.vector.get_ref();
            if !handlers.contains_key(&v) {
                return Err(self.err(
                    i.vector.span(),
                    format!(
                        "interrupt vector {v} has no handler task; add a [[task]] with behaviour = {{ kind = \"handler\", vector = {v}, work = \"50us\" }}"
                    ),
                ));
            }
        }

        let memory = self.memory(&raw, &tasks)?;
        Ok(Scenario {
            name,
            machine,
            default_name,
            default_policy,
            schedulers,
            tasks,
            interrupts,
            memory,
            until,
            seed: raw.seed.unwrap_or(1),
        })
    }

    /// `[memory]` and the tasks' `size_kb` (docs/scenario.md, "[memory]").
    fn memory(&self, raw: &RawScenario, tasks: &[TaskSpec]) -> R<Option<Memory>> {
        let Some(m) = &raw.memory else {
            if let Some(t) = raw.task.iter().find(|t| t.size_kb.is_some()) {
                let span = t.size_kb.as_ref().map_or(t.name.span(), |s| s.span());
                return Err(self.err(span, "size_kb needs a [memory] section (main memory and the swap device)"));
            }
            if let Some(n) = raw.task.iter().find_map(|t| t.text.as_ref()) {
                return Err(self.err(n.span(), "text needs a [memory] section with the shared texts"));
            }
            return Ok(None);
        };
        let mr = m.get_ref();
        let size_kb = *mr.size_kb.get_ref();
        if size_kb < 1 {
            return Err(self.err(mr.size_kb.span(), format!("memory size_kb must be at least 1, found {size_kb}")));
        }
        let size_kb = size_kb as u64;
        let choice = |v: &Option<Spanned<String>>, key: &str, opts: &[&str]| -> R<String> {
            match v {
                None => Ok(opts[0].to_string()),
                Some(s) if opts.contains(&s.get_ref().as_str()) => Ok(s.get_ref().clone()),
                Some(s) => Err(self.err(
                    s.span(),
                    format!(
                        "unknown {key} '{}'; expected one of {}",
                        s.get_ref(),
                        opts.iter().map(|o| format!("\"{o}\"")).collect::<Vec<_>>().join(", ")
                    ),
                )),
            }
        };
        let placement = Placement::parse(&choice(&mr.placement, "placement", &["first_fit", "best_fit"])?).unwrap_or(Placement::FirstFit);
        let swap_in =
            if choice(&mr.swap_in, "swap_in", &["standard", "priority"])? == "priority" { SwapIn::Priority } else { SwapIn::Standard };
        let swap_out =
            if choice(&mr.swap_out, "swap_out", &["standard", "mouse"])? == "mouse" { SwapOut::Mouse } else { SwapOut::Standard };
        let nproc = match &mr.nproc {
            None => tasks.len() as u64,
            Some(n) if *n.get_ref() >= tasks.len() as i64 && *n.get_ref() <= 100_000 => *n.get_ref() as u64,
            Some(n) => {
                return Err(self.err(
                    n.span(),
                    format!(
                        "nproc (the process table's size) must be from the number of tasks ({}) to 100000, found {}",
                        tasks.len(),
                        n.get_ref()
                    ),
                ))
            }
        };
        let dma_steal_ppm = match &mr.dma_steal {
            None => 0,
            Some(f) if (0.0..=1.0).contains(&f.get_ref().0) => (f.get_ref().0 * 1e6).round() as u64,
            Some(f) => return Err(self.err(f.span(), format!("dma_steal is a fraction of the CPU from 0 to 1, found {}", f.get_ref().0))),
        };
        let u_area_kb = match &mr.u_area_kb {
            None => 0,
            Some(u) if (0..=size_kb as i64).contains(u.get_ref()) => *u.get_ref() as u64,
            Some(u) => return Err(self.err(u.span(), format!("u_area_kb must be from 0 to the memory size, found {}", u.get_ref()))),
        };
        let config = MemoryConfig {
            size_kb,
            placement,
            seek: mr.swap_seek.0,
            transfer_per_kb: mr.swap_transfer.0,
            swap_cpu: mr.swap_cpu.map_or(0, |d| d.0),
            min_resident: mr.min_resident.map_or(2 * SEC, |d| d.0),
            swap_in,
            swap_out,
            scan_entry: mr.scan_entry.map_or(0, |d| d.0),
            nproc,
            dma_steal_ppm,
            min_swapped_out: mr.min_swapped_out.map_or(0, |d| d.0),
            wake_on_ready: mr.wake_on_ready.unwrap_or(false),
            copy_per_kb: mr.copy_per_kb.map_or(0, |d| d.0),
        };
        // Shared texts, in the order of their names.
        let mut text_names = Vec::new();
        let mut texts = Vec::new();
        if let Some(ts) = &mr.texts {
            for (name, kb) in ts.get_ref() {
                if !(1..=size_kb as i64).contains(kb.get_ref()) {
                    return Err(self.err(
                        kb.span(),
                        format!("text '{name}' size must be from 1 to the memory size ({size_kb} KB), found {}", kb.get_ref()),
                    ));
                }
                text_names.push(name.clone());
                texts.push(*kb.get_ref() as u64);
            }
        }
        let mut text_of = Vec::with_capacity(tasks.len());
        // Sizes, task by task in file order (a count group's copies are consecutive).
        let mut sizes = Vec::with_capacity(tasks.len());
        for t in &raw.task {
            let copies = t.count.as_ref().map_or(1, |c| *c.get_ref()) as usize;
            let Some(sv) = &t.size_kb else {
                return Err(self.err(
                    t.name.span(),
                    format!("task '{}' needs size_kb (its image size in KB) when there is a [memory] section", t.name.get_ref()),
                ));
            };
            let list = &sv.get_ref().0;
            if list.is_empty() {
                return Err(self.err(sv.span(), "size_kb list is empty; expected one or more sizes in KB"));
            }
            if let Some(bad) = list.iter().find(|&&k| k < 1 || k as u64 + u_area_kb > size_kb) {
                let less = if u_area_kb > 0 { format!(" less the u-area ({u_area_kb} KB)") } else { String::new() };
                return Err(
                    self.err(sv.span(), format!("image size {bad} KB is out of range; expected 1 to the memory size ({size_kb} KB){less}"))
                );
            }
            // Every image carries its u-area (V7: the per-process `user` structure and
            // kernel stack, swapped with the data segment).
            sizes.extend((0..copies).map(|k| list[k % list.len()] as u64 + u_area_kb));
            let text = match &t.text {
                None => None,
                Some(n) => match text_names.iter().position(|x| x == n.get_ref()) {
                    Some(k) => Some(k),
                    None => {
                        let known = if text_names.is_empty() {
                            "none is defined".to_string()
                        } else {
                            format!("expected one of {}", text_names.join(", "))
                        };
                        return Err(self.err(n.span(), format!("text '{}' is not in [memory] texts; {known}", n.get_ref())));
                    }
                },
            };
            text_of.extend((0..copies).map(|_| text));
        }
        debug_assert_eq!(sizes.len(), tasks.len());
        Ok(Some(Memory { config, sizes, text_of, texts }))
    }

    fn check_name(&self, n: &Spanned<String>, what: &str) -> R<String> {
        let s = n.get_ref();
        if s.trim().is_empty() {
            return Err(self.err(n.span(), format!("{what} name must not be empty")));
        }
        Ok(s.clone())
    }

    fn machine(&self, m: &Spanned<RawMachine>) -> R<Machine> {
        let raw = m.get_ref();
        let cpus = *raw.cpus.get_ref();
        if !(1..=MAX_CPUS as i64).contains(&cpus) {
            return Err(self.err(raw.cpus.span(), format!("cpus must be between 1 and {MAX_CPUS}, found {cpus}")));
        }
        let cpus = cpus as u16;
        let clock = raw.clock.map_or(ClockMode::OneShot, |c| c.0);
        let tick = match (&raw.tick, &raw.hz) {
            (None, _) => None,
            (Some(t), Some(h)) => {
                let (a, b) = (t.span(), h.span());
                let span = a.start.min(b.start)..a.end.max(b.end);
                return Err(self.err(span, "give the tick as hz (ticks per second) or as tick (its period), not both"));
            }
            (Some(t), None) if t.get_ref().0 == 0 => return Err(self.err(t.span(), "tick must be a period greater than 0")),
            (Some(t), None) => Some(t.get_ref().0),
        };
        // A tick given by its period: hz is its rate, rounded (for whatever reads a rate).
        let hz = match tick {
            Some(t) => (SEC as f64 / t as f64).round().max(1.0) as u32,
            None => raw.hz.as_ref().map_or(DEFAULT_HZ, |h| *h.get_ref()),
        };
        if clock == ClockMode::Tick && hz == 0 {
            let span = raw.hz.as_ref().map_or(m.span(), |h| h.span());
            return Err(self.err(span, "clock = \"tick\" needs hz greater than 0 (ticks per second), e.g. hz = 250"));
        }
        let min_best_effort_ppm = match &raw.min_best_effort {
            None => None,
            Some(f) => {
                let v = f.get_ref().0;
                if !(0.0..=1.0).contains(&v) {
                    return Err(self.err(f.span(), format!("min_best_effort is a fraction of the machine between 0 and 1, found {v}")));
                }
                match ppm_of(v * cpus as f64) {
                    Some(p) => Some(p),
                    None => return Err(self.err(f.span(), "min_best_effort is out of range")),
                }
            }
        };
        let unscheduled = match &raw.unscheduled {
            None => None,
            Some(u) => {
                let interval = u.interval.get_ref().0.clone();
                if !positive_mean(&interval) {
                    return Err(self.err(u.interval.span(), "unscheduled interval must have a mean greater than 0"));
                }
                let mut also = Vec::new();
                for a in &u.also {
                    let interval = a.interval.get_ref().0.clone();
                    if !positive_mean(&interval) {
                        return Err(self.err(a.interval.span(), "unscheduled interval must have a mean greater than 0"));
                    }
                    also.push(UnscheduledSource { interval, duration: a.duration.0.clone() });
                }
                Some(Unscheduled { interval, duration: u.duration.0.clone(), also })
            }
        };
        Ok(Machine {
            cpus,
            clock,
            hz,
            tick,
            switch_cost: raw.switch_cost.map_or(0, |d| d.0),
            migration_cost: raw.migration_cost.map_or(0, |d| d.0),
            wake_latency: raw.wake_latency.map_or(0, |d| d.0),
            unscheduled,
            min_best_effort_ppm,
        })
    }

    /// Builds the policy once to validate its kind and parameters.
    fn policy(&self, kind: String, kind_span: Range<usize>, params: Option<&Spanned<ParamMap>>) -> R<PolicySpec> {
        let map: BTreeMap<String, ParamValue> =
            params.map(|p| p.get_ref().iter().map(|(k, v)| (k.clone(), v.get_ref().0.clone())).collect()).unwrap_or_default();
        if let Err(e) = vassal_policies::build(&kind, &map) {
            // Is the kind itself refused, or only these parameters?
            let span = match params {
                Some(p) if vassal_policies::build(&kind, &BTreeMap::new()).is_ok() => p
                    .get_ref()
                    .iter()
                    .find(|(k, _)| e.contains(&format!("'{k}'")) || e.contains(&format!(" {k}")))
                    .map_or(p.span(), |(_, v)| v.span()),
                _ => kind_span,
            };
            return Err(self.err(span, format!("policy '{kind}': {e}")));
        }
        Ok(PolicySpec { kind, params: map })
    }

    /// The `[[scheduler]]` header of the table holding `name` (for errors about a key
    /// that is missing from the table).
    fn table_header(&self, name: &Spanned<String>) -> Range<usize> {
        let at = name.span().start;
        self.src.text[..at].rfind("[[scheduler]]").map_or(name.span(), |i| i..i + "[[scheduler]]".len())
    }

    /// A `[[scheduler]]` with `module = "FILE"`: loads the module once to check it and to
    /// read the CPU usage it declares (which the scenario may not restate).
    fn module_scheduler(&self, name: &str, m: &Spanned<String>, s: &RawScheduler, ncpus: u16) -> R<(PolicySpec, Usage)> {
        if let Some(u) = &s.usage {
            return Err(self.err(u.span(), format!("scheduler '{name}': a module declares its own usage; remove `usage`")));
        }
        let map: BTreeMap<String, ParamValue> =
            s.params.as_ref().map(|p| p.get_ref().iter().map(|(k, v)| (k.clone(), v.get_ref().0.clone())).collect()).unwrap_or_default();
        let path = crate::modules::resolve(self.src.file, m.get_ref());
        let spec = crate::modules::module_spec(&path, map);
        let usage = crate::modules::probe(&spec, ncpus).map_err(|e| self.err(m.span(), e))?;
        Ok((spec, usage))
    }

    fn cpu_list(&self, list: &Spanned<Vec<Spanned<i64>>>, ncpus: u16, what: &str) -> R<CpuSet> {
        if list.get_ref().is_empty() {
            return Err(self.err(list.span(), format!("{what} must list at least one CPU")));
        }
        let mut set = CpuSet::NONE;
        for c in list.get_ref() {
            let n = *c.get_ref();
            if n < 0 || n >= ncpus as i64 {
                return Err(self
                    .err(c.span(), format!("{what} CPU {n} is out of range; the machine has {ncpus} CPU(s), numbered 0..={}", ncpus - 1)));
            }
            let cpu = CpuId(n as u16);
            if set.contains(cpu) {
                return Err(self.err(c.span(), format!("{what} lists CPU {n} twice")));
            }
            set = CpuSet(set.0 | CpuSet::only(cpu).0);
        }
        Ok(set)
    }

    fn usage(&self, u: &Spanned<RawUsage>, ncpus: u16) -> R<Usage> {
        Ok(match u.get_ref() {
            RawUsage::BestEffort => Usage::BestEffort,
            RawUsage::Reserved(f) => {
                let v = f.get_ref().0;
                if !(v > 0.0 && v <= ncpus as f64) {
                    return Err(self
                        .err(f.span(), format!("reserved is a share in CPUs, greater than 0 and at most the {ncpus} CPU(s), found {v}")));
                }
                let cpu_ppm = ppm_of(v).filter(|&p| p > 0).ok_or_else(|| self.err(f.span(), "reserved share is too small"))?;
                Usage::Reserved { cpu_ppm }
            }
            RawUsage::HardTime { cpus, util } => {
                let set = self.cpu_list(cpus, ncpus, "hard_time")?;
                let v = util.get_ref().0;
                if !(v > 0.0 && v <= 1.0) {
                    return Err(self.err(util.span(), format!("util is the fraction of each CPU, greater than 0 and at most 1, found {v}")));
                }
                let util_ppm = ppm_of(v).filter(|&p| p > 0).ok_or_else(|| self.err(util.span(), "util is too small"))?;
                Usage::HardTime { cpus: set, util_ppm }
            }
        })
    }

    fn behaviour(&self, b: &Spanned<RawBehaviour>, task: &str, names: &Names) -> R<Behaviour> {
        let raw = b.get_ref();
        let Some(kind_sp) = &raw.kind else { return Err(self.err(b.span(), "missing required key `kind`")) };
        let kind = kind_sp.get_ref().as_str();
        let present: [(&str, Option<Range<usize>>); 17] = [
            ("late_after", raw.late_after.as_ref().map(Spanned::span)),
            ("work", raw.work.as_ref().map(Spanned::span)),
            ("period", raw.period.as_ref().map(Spanned::span)),
            ("exec", raw.exec.as_ref().map(Spanned::span)),
            ("deadline", raw.deadline.as_ref().map(Spanned::span)),
            ("offset", raw.offset.as_ref().map(Spanned::span)),
            ("jobs", raw.jobs.as_ref().map(Spanned::span)),
            ("burst", raw.burst.as_ref().map(Spanned::span)),
            ("think", raw.think.as_ref().map(Spanned::span)),
            ("run", raw.run.as_ref().map(Spanned::span)),
            ("sleep", raw.sleep.as_ref().map(Spanned::span)),
            ("voluntary", raw.voluntary.as_ref().map(Spanned::span)),
            ("vector", raw.vector.as_ref().map(Spanned::span)),
            ("phases", raw.phases.as_ref().map(Spanned::span)),
            ("repeat", raw.repeat.as_ref().map(Spanned::span)),
            ("disk", raw.disk.as_ref().map(Spanned::span)),
            ("read", raw.read.as_ref().map(Spanned::span)),
        ];
        let allowed: &[&str] = match kind {
            "cpu" => &["work"],
            "periodic" => &["period", "exec", "deadline", "offset", "jobs"],
            "player" => &["period", "exec", "late_after", "offset", "read", "disk"],
            "interactive" => &["burst", "think"],
            "io" => &["run", "sleep", "voluntary", "disk"],
            "handler" => &["vector", "work"],
            "script" => &["phases", "repeat"],
            _ => {
                // A kind run by a registered behaviour (crate::behave): its keys go to its
                // factory as they are; a built-in key is kept without its value.
                let at = |span: Range<usize>| self.src.line_col(span.start);
                let other = raw.other.iter().map(|(k, v)| (k.clone(), OtherParam { value: Some(v.get_ref().clone()), at: at(v.span()) }));
                let builtin = present.iter().filter_map(|(k, s)| s.clone().map(|s| (k.to_string(), OtherParam { value: None, at: at(s) })));
                let mut params: Vec<(String, OtherParam)> = other.chain(builtin).collect();
                params.sort_by_key(|(_, p)| p.at);
                return Ok(Behaviour::Other(OtherKind {
                    kind: kind.to_string(),
                    task: task.to_string(),
                    file: self.src.file.to_string(),
                    at: at(kind_sp.span()),
                    params,
                }));
            }
        };
        let unknown = raw.other.iter().map(|(k, v)| (k.as_str(), Some(v.span())));
        for (key, span) in unknown.chain(present) {
            if let Some(span) = span {
                if !allowed.contains(&key) {
                    return Err(self.err(
                        span,
                        format!(
                            "unknown key `{key}` for behaviour kind '{kind}'; expected one of {}",
                            allowed.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        let need = |key: &str| self.err(kind_sp.span(), format!("behaviour kind '{kind}' needs key `{key}`"));
        let dist = |v: &Option<Spanned<DistV>>, key: &str| v.as_ref().map(|d| d.get_ref().0.clone()).ok_or_else(|| need(key));
        Ok(match kind {
            "cpu" => {
                let work = match &raw.work {
                    None => None,
                    Some(w) => match w.get_ref().0 {
                        Dist::Const(n) => Some(n),
                        _ => return Err(self.err(w.span(), "cpu work must be a fixed duration such as \"1s\"")),
                    },
                };
                Behaviour::Cpu { work }
            }
            "periodic" => {
                let period = raw.period.as_ref().ok_or_else(|| need("period"))?;
                if period.get_ref().0 == 0 {
                    return Err(self.err(period.span(), "period must be greater than 0"));
                }
                let exec = dist(&raw.exec, "exec")?;
                let deadline = match &raw.deadline {
                    None => period.get_ref().0,
                    Some(d) if d.get_ref().0 == 0 => return Err(self.err(d.span(), "deadline must be greater than 0")),
                    Some(d) => d.get_ref().0,
                };
                let jobs = match &raw.jobs {
                    None => None,
                    Some(j) if *j.get_ref() == 0 => return Err(self.err(j.span(), "jobs must be at least 1")),
                    Some(j) => Some(*j.get_ref()),
                };
                Behaviour::Periodic {
                    period: period.get_ref().0,
                    offset: raw.offset.as_ref().map_or(0, |o| o.get_ref().0),
                    exec,
                    deadline,
                    jobs,
                }
            }
            "player" => {
                let period = raw.period.as_ref().ok_or_else(|| need("period"))?;
                if period.get_ref().0 == 0 {
                    return Err(self.err(period.span(), "period must be greater than 0"));
                }
                if let Some(d) = raw.disk.as_ref().filter(|d| d.get_ref().is_empty()) {
                    return Err(self.err(d.span(), "disk needs a drive's name, e.g. disk = \"hda\""));
                }
                let read = match (&raw.read, &raw.disk) {
                    (None, None) => None,
                    (Some(r), Some(d)) => Some((d.get_ref().clone(), r.get_ref().0.clone())),
                    (Some(r), None) => return Err(self.err(r.span(), "a player's `read` needs `disk`, the drive it reads from")),
                    (None, Some(d)) => return Err(self.err(d.span(), "a player's `disk` needs `read`, the length of each frame's read")),
                };
                Behaviour::Player {
                    period: period.get_ref().0,
                    offset: raw.offset.as_ref().map_or(0, |o| o.get_ref().0),
                    exec: dist(&raw.exec, "exec")?,
                    late_after: raw.late_after.as_ref().ok_or_else(|| need("late_after"))?.get_ref().0,
                    read,
                }
            }
            "interactive" => Behaviour::Interactive { burst: dist(&raw.burst, "burst")?, think: dist(&raw.think, "think")? },
            "io" if raw.disk.as_ref().is_some_and(|d| d.get_ref().is_empty()) => {
                let d = raw.disk.as_ref().expect("checked");
                return Err(self.err(d.span(), "disk needs a drive's name, e.g. disk = \"hda\""));
            }
            "io" => Behaviour::Io {
                run: dist(&raw.run, "run")?,
                sleep: dist(&raw.sleep, "sleep")?,
                voluntary: raw.voluntary.as_ref().map(|v| *v.get_ref()).unwrap_or(true),
                disk: raw.disk.as_ref().map(|d| d.get_ref().clone()),
            },
            "handler" => {
                Behaviour::Handler { vector: *raw.vector.as_ref().ok_or_else(|| need("vector"))?.get_ref(), work: dist(&raw.work, "work")? }
            }
            _ => {
                // "script"
                let phases_raw = raw.phases.as_ref().ok_or_else(|| need("phases"))?;
                if phases_raw.get_ref().is_empty() {
                    return Err(self.err(phases_raw.span(), "a script needs at least one phase"));
                }
                let mut phases = Vec::new();
                for p in phases_raw.get_ref() {
                    phases.push(self.phase(p, task, names)?);
                }
                let repeat = raw.repeat.as_ref().is_some_and(|r| *r.get_ref());
                if repeat && !phases.iter().any(phase_takes_time) {
                    return Err(self.err(
                        phases_raw.span(),
                        "a repeating script needs a phase that takes time (run, sleep, fault, timer or hand_off with a duration above 0); otherwise it loops forever at one instant",
                    ));
                }
                Behaviour::Script { phases, repeat }
            }
        })
    }

    fn phase(&self, p: &Spanned<RawPhase>, task: &str, names: &Names) -> R<Phase> {
        let raw = p.get_ref();
        let given: Vec<(&str, Range<usize>)> = [
            ("run", raw.run.as_ref().map(Spanned::span)),
            ("sleep", raw.sleep.as_ref().map(Spanned::span)),
            ("fault", raw.fault.as_ref().map(Spanned::span)),
            ("timer", raw.timer.as_ref().map(Spanned::span)),
            ("yield", raw.yield_.as_ref().map(Spanned::span)),
            ("send", raw.send.as_ref().map(Spanned::span)),
            ("join", raw.join.as_ref().map(Spanned::span)),
            ("leave", raw.leave.as_ref().map(Spanned::span)),
            ("hand_off", raw.hand_off.as_ref().map(Spanned::span)),
            ("terminal", raw.terminal.as_ref().map(Spanned::span)),
            ("times", raw.times.as_ref().map(Spanned::span)),
            ("io", raw.io.as_ref().map(Spanned::span)),
            ("grow", raw.grow.as_ref().map(Spanned::span)),
            ("grow_once", raw.grow_once.as_ref().map(Spanned::span)),
        ]
        .into_iter()
        .filter_map(|(k, s)| s.map(|s| (k, s)))
        .collect();
        const KEYS: &str = "run, sleep, fault, timer, yield, send, join, leave, hand_off, terminal, times, io, grow, grow_once";
        match given.as_slice() {
            [] => return Err(self.err(p.span(), format!("empty phase; expected one key of {KEYS}"))),
            [_] => {}
            [(a, _), (b, span), ..] => {
                return Err(self.err(
                    span.clone(),
                    format!("a phase has exactly one key, but both `{a}` and `{b}` are given; write them as two phases"),
                ))
            }
        }
        let sched_ref = |s: &Spanned<String>, what: &str| -> R<String> {
            let n = s.get_ref();
            if *n == names.default || names.schedulers.contains(n) {
                Ok(n.clone())
            } else {
                Err(self.err(
                    s.span(),
                    format!("{what} names scheduler '{n}', which does not exist; expected one of {}", names.scheduler_list()),
                ))
            }
        };
        let must_be_true = |b: &Spanned<bool>, key: &str| -> R<()> {
            if *b.get_ref() {
                Ok(())
            } else {
                Err(self.err(b.span(), format!("write the phase as {{ {key} = true }}")))
            }
        };
        if let Some(d) = &raw.run {
            return Ok(Phase::Run(d.get_ref().0.clone()));
        }
        if let Some(d) = &raw.sleep {
            return Ok(Phase::Sleep(d.get_ref().0.clone()));
        }
        if let Some(d) = &raw.fault {
            return Ok(Phase::Fault(d.get_ref().0.clone()));
        }
        if let Some(d) = &raw.terminal {
            return Ok(Phase::Terminal(d.get_ref().0.clone()));
        }
        if let Some(io) = &raw.io {
            let io = io.get_ref();
            if io.disk.get_ref().is_empty() {
                return Err(self.err(io.disk.span(), "io needs a disk name, e.g. disk = \"rl1\""));
            }
            return Ok(Phase::Io { disk: io.disk.get_ref().clone(), time: io.time.0.clone() });
        }
        for (key, g, once) in [("grow", &raw.grow, false), ("grow_once", &raw.grow_once, true)] {
            if let Some(g) = g {
                let kb = *g.get_ref();
                if kb == 0 || kb.unsigned_abs() > 1 << 30 {
                    return Err(self.err(g.span(), format!("{key} is a change of the image in KB, not 0 (negative: shrink), found {kb}")));
                }
                return Ok(Phase::Grow { kb, once });
            }
        }
        if let Some(n) = &raw.times {
            let k = *n.get_ref();
            if k < 1 {
                return Err(
                    self.err(n.span(), format!("times must be at least 1 (the phases before it run that many times in all), found {k}"))
                );
            }
            return Ok(Phase::Times(k as u64));
        }
        if let Some(t) = &raw.timer {
            if t.get_ref().0 == 0 {
                return Err(self.err(t.span(), "timer period must be greater than 0"));
            }
            return Ok(Phase::Timer(t.get_ref().0));
        }
        if let Some(y) = &raw.yield_ {
            must_be_true(y, "yield")?;
            return Ok(Phase::Yield);
        }
        if let Some(l) = &raw.leave {
            must_be_true(l, "leave")?;
            return Ok(Phase::Leave);
        }
        if let Some(j) = &raw.join {
            return Ok(Phase::Join(sched_ref(j, "join")?));
        }
        if let Some(h) = &raw.hand_off {
            let h = h.get_ref();
            let to = h.to.get_ref();
            if !names.tasks.contains(to) {
                return Err(self.err(h.to.span(), format!("hand_off names task '{to}', which does not exist")));
            }
            if to == task {
                return Err(self.err(h.to.span(), format!("task '{task}' cannot hand off to itself")));
            }
            return Ok(Phase::HandOff { to: to.clone(), sleep: h.sleep.get_ref().0.clone() });
        }
        let Some(send) = &raw.send else {
            return Err(self.err(p.span(), format!("empty phase; expected one key of {KEYS}")));
        };
        let s = send.get_ref();
        let to = sched_ref(&s.to, "send")?;
        let req = s.request.get_ref().as_str();
        let extras: [(&str, Option<Range<usize>>); 10] = [
            ("delay", s.delay.as_ref().map(Spanned::span)),
            ("on", s.on.as_ref().map(Spanned::span)),
            ("name", s.name.as_ref().map(Spanned::span)),
            ("value", s.value.as_ref().map(Spanned::span)),
            ("util", s.util.as_ref().map(Spanned::span)),
            ("period", s.period.as_ref().map(Spanned::span)),
            ("start", s.start.as_ref().map(Spanned::span)),
            ("need", s.need.as_ref().map(Spanned::span)),
            ("deadline", s.deadline.as_ref().map(Spanned::span)),
            ("task", s.task.as_ref().map(Spanned::span)),
        ];
        let allowed: &[&str] = match req {
            "join" | "leave" => &[],
            "set" => &["delay"],
            "warp" => &["on"],
            "param" => &["name", "value"],
            "reserve" | "modify" => &["util", "period", "task"],
            "free" => &["task"],
            "avail" => &[],
            "deadline" => &["start", "need", "deadline"],
            other => {
                return Err(self.err(
                    s.request.span(),
                    format!(
                        "unknown request '{other}'; expected one of join, leave, set, warp, param, reserve, free, modify, avail, deadline"
                    ),
                ))
            }
        };
        for (key, span) in extras {
            if let Some(span) = span {
                if !allowed.contains(&key) {
                    return Err(self.err(span, format!("key `{key}` does not apply to request '{req}'")));
                }
            }
        }
        let need = |key: &str| self.err(s.request.span(), format!("request '{req}' needs key `{key}`"));
        let dur = |d: &Option<Spanned<Dur>>, key: &str| d.as_ref().map(|d| d.get_ref().0).ok_or_else(|| need(key));
        // `util` is passed to the scheduler as written, NaN included: judging it is the
        // scheduler's job (a bad request is refused there, with a reason).
        let util = || s.util.as_ref().map(|u| *u.get_ref()).ok_or_else(|| need("util"));
        let request = match req {
            "join" => Request::Join,
            "leave" => Request::Leave,
            "set" => Request::Set { delay: dur(&s.delay, "delay")? },
            "warp" => Request::Warp { on: *s.on.as_ref().ok_or_else(|| need("on"))?.get_ref() },
            "reserve" => Request::Reserve { util: util()?, period: dur(&s.period, "period")? },
            "modify" => Request::Modify { util: util()?, period: dur(&s.period, "period")? },
            "free" => Request::Free,
            "avail" => Request::Avail,
            // Times relative to the send; the engine makes them absolute when it sends.
            "deadline" => Request::Deadline {
                start: s.start.as_ref().map_or(0, |d| d.get_ref().0),
                need: dur(&s.need, "need")?,
                deadline: dur(&s.deadline, "deadline")?,
            },
            _ => Request::Param {
                name: s.name.as_ref().ok_or_else(|| need("name"))?.get_ref().clone(),
                value: s.value.as_ref().ok_or_else(|| need("value"))?.get_ref().0,
            },
        };
        let target = match &s.task {
            Some(t) => {
                let name = t.get_ref();
                if !names.tasks.contains(name) {
                    return Err(self.err(t.span(), format!("send names task '{name}', which does not exist")));
                }
                Some(name.clone())
            }
            None => None,
        };
        Ok(Phase::Send(SendSpec { to, request, task: target }))
    }
}

pub(crate) fn phase_takes_time(p: &Phase) -> bool {
    match p {
        Phase::Run(d) | Phase::Sleep(d) | Phase::Fault(d) | Phase::Terminal(d) | Phase::RunWall(d) | Phase::Io { time: d, .. } => {
            positive_mean(d)
        }
        Phase::Times(_) => false,
        Phase::RtTimer { period, .. } => *period > 0,
        Phase::HandOff { sleep, .. } => positive_mean(sleep),
        Phase::Timer(n) => *n > 0,
        Phase::Yield | Phase::Send(_) | Phase::Join(_) | Phase::Leave | Phase::Grow { .. } => false,
        // a task may block here, but need not (an uncontended lock, a barrier of one)
        Phase::Sync(_) => false,
    }
}
