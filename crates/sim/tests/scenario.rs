//! The scenario file format: every documented example parses, every documented error is
//! caught with its file, line and a phrase saying what was expected, and no input panics.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use vassal_core::{CpuId, CpuSet, Request, Usage, MS, SEC, US};
use vassal_policies::ParamValue;
use vassal_sim::model::{Behaviour, ClockMode, Dist, Phase, SendSpec, UnscheduledSource};
use vassal_sim::scenario::{load_scenario, parse_scenario, ScenarioError};

/// Lines 1-3; whatever is appended starts at line 4.
const BASE: &str = "until = \"1s\"\n[machine]\ncpus = 2\n";

fn bad(text: &str) -> ScenarioError {
    match parse_scenario(text, "bad.toml") {
        Ok(s) => panic!("expected an error, got {s:?}\n--- input ---\n{text}"),
        Err(e) => e,
    }
}

/// Asserts the error is at `line` and mentions `phrase`.
#[track_caller]
fn assert_err(text: &str, line: usize, phrase: &str) -> ScenarioError {
    let e = bad(text);
    assert_eq!(e.file, "bad.toml");
    assert!(e.line == line && e.msg.contains(phrase), "expected line {line} with {phrase:?}, got: {e}\n--- input ---\n{text}");
    assert!(e.col >= 1, "{e}");
    e
}

fn with(extra: &str) -> String {
    format!("{BASE}{extra}")
}

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples")
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("docs/examples exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

// ---------------------------------------------------------------------------------------
// Valid input

#[test]
fn every_example_parses() {
    let files = example_files();
    assert!(files.len() >= 4, "expected at least 4 examples, found {files:?}");
    for f in &files {
        let s = load_scenario(f).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.tasks.is_empty(), "{}: no tasks", f.display());
        assert!(s.until > 0);
    }
}

#[test]
fn examples_cover_the_brief() {
    let dir = examples_dir();
    let rr = load_scenario(&dir.join("rr-hogs.toml")).unwrap();
    assert_eq!(rr.machine.cpus, 2);
    assert_eq!(rr.default_policy.kind, "rr");
    assert_eq!(rr.tasks.len(), 3);
    assert!(rr.tasks.iter().all(|t| matches!(t.behaviour, Behaviour::Cpu { .. })));

    let fps = load_scenario(&dir.join("fps-rm.toml")).unwrap();
    assert_eq!(fps.default_policy.kind, "fps");
    assert!(fps.tasks.iter().filter(|t| matches!(t.behaviour, Behaviour::Periodic { .. })).count() >= 3);

    let h = load_scenario(&dir.join("hierarchy.toml")).unwrap();
    let rt = &h.schedulers[0];
    assert_eq!(rt.policy.kind, "fps");
    assert!(matches!(rt.usage, Usage::HardTime { .. }));
    assert_eq!((rt.load_at, rt.unload_at), (SEC, Some(3 * SEC)));
    assert!(h.tasks.iter().any(|t| match &t.behaviour {
        Behaviour::Script { phases, .. } => phases.contains(&Phase::Join(rt.name.clone())),
        _ => false,
    }));

    let irq = load_scenario(&dir.join("interrupts.toml")).unwrap();
    assert!(!irq.interrupts.is_empty());
    assert!(irq.tasks.iter().any(|t| matches!(t.behaviour, Behaviour::Handler { .. })));
    assert!(irq.tasks.iter().any(|t| match &t.behaviour {
        Behaviour::Script { phases, .. } => phases.iter().any(|p| matches!(p, Phase::HandOff { .. })),
        _ => false,
    }));
}

#[test]
fn minimal_scenario_gets_the_defaults() {
    let s = parse_scenario(&with("[[task]]\nname = \"t\"\nbehaviour = { kind = \"cpu\" }\n"), "dir/my-test.toml").unwrap();
    assert_eq!(s.name, "my-test");
    assert_eq!(s.seed, 1);
    assert_eq!(s.until, SEC);
    assert_eq!(s.machine.clock, ClockMode::OneShot);
    assert_eq!(s.machine.hz, 250);
    assert_eq!((s.machine.switch_cost, s.machine.migration_cost), (0, 0));
    assert_eq!(s.machine.unscheduled, None);
    assert_eq!(s.machine.min_best_effort_ppm, None);
    assert_eq!(s.default_name, "default");
    assert_eq!(s.default_policy.kind, "bvt");
    assert!(s.default_policy.params.is_empty());
    let t = &s.tasks[0];
    assert_eq!(t.name, "t");
    assert_eq!((t.start, t.uid, t.loop_at, t.scheduler.as_deref()), (0, 0, None, None));
    assert_eq!(t.affinity, CpuSet::first(2));
    assert_eq!(t.behaviour, Behaviour::Cpu { work: None });
}

#[test]
fn full_scenario_maps_every_key() {
    let text = r#"
name = "everything"
until = "2.5s"
seed = 42

[machine]
cpus = 4
clock = "tick"
hz = 1000
switch_cost = "5us"
migration_cost = "20us"
wake_latency = "30us"
min_best_effort = 0.05
[machine.unscheduled]
interval = { exp = "1ms" }
duration = { uniform = ["5us", "50us"] }
also = [{ interval = { exp = "500ms" }, duration = "500us" }]

[default]
name = "ts"
policy = "rr"
params = { quantum = "20ms" }

[[scheduler]]
name = "rt"
policy = "fps"
params = { rm = true }
usage = { hard_time = { cpus = [0, 2], util = 0.3 } }
load_at = "1s"
unload_at = "2s"

[[scheduler]]
name = "share"
policy = "wrr"
usage = { reserved = 1.5 }

[[task]]
name = "hog"
count = 3
start = "10ms"
scheduler = "share"
affinity = [1, 3]
uid = 1000
params = { priority = 5, period = "10ms", weight = 2, urgent = true }
loop_at = "2s"
behaviour = { kind = "cpu", work = "1s" }

[[task]]
name = "p"
scheduler = "ts"
behaviour = { kind = "periodic", period = "10ms", exec = { normal = ["2ms", "100us"] }, deadline = "20ms", offset = "1ms", jobs = 100 }

[[task]]
name = "i"
behavior = { kind = "interactive", burst = { exp = "5ms" }, think = { uniform = ["50ms", "150ms"] } }

[[task]]
name = "io"
behaviour = { kind = "io", run = "1ms", sleep = { exp = "4ms" }, voluntary = false }

[[task]]
name = "h"
behaviour = { kind = "handler", vector = 3, work = "50us" }

[[task]]
name = "s"
[task.behaviour]
kind = "script"
repeat = true
phases = [
  { run = "1ms" }, { sleep = "2ms" }, { fault = "1ms" }, { timer = "1ms" }, { yield = true },
  { send = { to = "rt", request = "set", delay = "1ms" } },
  { send = { to = "rt", request = "warp", on = true } },
  { send = { to = "share", request = "param", name = "weight", value = 3 } },
  { send = { to = "rt", request = "join" } },
  { send = { to = "rt", request = "leave" } },
  { join = "rt" }, { leave = true }, { hand_off = { to = "hog.1", sleep = "1ms" } },
]

[[interrupt]]
vector = 3
every = { exp = "10ms" }
start = "5ms"
warp = true
"#;
    let s = parse_scenario(text, "x.toml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.name, "everything");
    assert_eq!(s.until, 2_500 * MS);
    assert_eq!(s.seed, 42);
    let m = &s.machine;
    assert_eq!((m.cpus, m.clock, m.hz), (4, ClockMode::Tick, 1000));
    assert_eq!((m.switch_cost, m.migration_cost, m.wake_latency), (5 * US, 20 * US, 30 * US));
    assert_eq!(m.min_best_effort_ppm, Some(200_000)); // 5% of 4 CPUs = 0.2 of one CPU
    let u = m.unscheduled.as_ref().unwrap();
    assert_eq!(u.interval, Dist::Exp(MS));
    assert_eq!(u.duration, Dist::Uniform(5 * US, 50 * US));
    assert_eq!(u.also, vec![UnscheduledSource { interval: Dist::Exp(500 * MS), duration: Dist::Const(500 * US) }]);
    assert_eq!(u.source(1), Some((&Dist::Exp(500 * MS), &Dist::Const(500 * US))));
    assert_eq!(u.source(2), None);

    assert_eq!(s.default_name, "ts");
    assert_eq!(s.default_policy.params.get("quantum"), Some(&ParamValue::Str("20ms".into())));

    assert_eq!(s.schedulers.len(), 2);
    let rt = &s.schedulers[0];
    assert_eq!(rt.policy.params.get("rm"), Some(&ParamValue::Bool(true)));
    assert_eq!(rt.usage, Usage::HardTime { cpus: [CpuId(0), CpuId(2)].into_iter().collect(), util_ppm: 300_000 });
    assert_eq!((rt.load_at, rt.unload_at), (SEC, Some(2 * SEC)));
    assert_eq!(s.schedulers[1].usage, Usage::Reserved { cpu_ppm: 1_500_000 });
    assert_eq!((s.schedulers[1].load_at, s.schedulers[1].unload_at), (0, None));

    let names: Vec<&str> = s.tasks.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["hog.0", "hog.1", "hog.2", "p", "i", "io", "h", "s"]);
    let hog = &s.tasks[1];
    assert_eq!(hog.start, 10 * MS);
    assert_eq!(hog.scheduler.as_deref(), Some("share"));
    assert_eq!(hog.affinity, [CpuId(1), CpuId(3)].into_iter().collect());
    assert_eq!(hog.uid, 1000);
    assert_eq!(hog.params.get("priority"), Some(&5));
    assert_eq!(hog.params.get("period"), Some(&(10 * MS as i64)));
    assert_eq!(hog.params.get("weight"), Some(&2));
    assert_eq!(hog.params.get("urgent"), Some(&1));
    assert_eq!(hog.loop_at, Some(2 * SEC));
    assert_eq!(hog.behaviour, Behaviour::Cpu { work: Some(SEC) });

    // Naming the default scheduler means staying with it.
    assert_eq!(s.tasks[3].scheduler, None);
    assert_eq!(
        s.tasks[3].behaviour,
        Behaviour::Periodic { period: 10 * MS, offset: MS, exec: Dist::Normal(2 * MS, 100 * US), deadline: 20 * MS, jobs: Some(100) }
    );
    assert_eq!(s.tasks[4].behaviour, Behaviour::Interactive { burst: Dist::Exp(5 * MS), think: Dist::Uniform(50 * MS, 150 * MS) });
    assert_eq!(s.tasks[5].behaviour, Behaviour::Io { run: Dist::Const(MS), sleep: Dist::Exp(4 * MS), voluntary: false, disk: None });
    assert_eq!(s.tasks[6].behaviour, Behaviour::Handler { vector: 3, work: Dist::Const(50 * US) });
    let Behaviour::Script { phases, repeat } = &s.tasks[7].behaviour else { panic!() };
    assert!(repeat);
    let send = |to: &str, request| Phase::Send(SendSpec { to: to.into(), request, task: None });
    assert_eq!(
        phases,
        &[
            Phase::Run(Dist::Const(MS)),
            Phase::Sleep(Dist::Const(2 * MS)),
            Phase::Fault(Dist::Const(MS)),
            Phase::Timer(MS),
            Phase::Yield,
            send("rt", Request::Set { delay: MS }),
            send("rt", Request::Warp { on: true }),
            send("share", Request::Param { name: "weight".into(), value: 3 }),
            send("rt", Request::Join),
            send("rt", Request::Leave),
            Phase::Join("rt".into()),
            Phase::Leave,
            Phase::HandOff { to: "hog.1".into(), sleep: Dist::Const(MS) },
        ]
    );
    assert_eq!(s.interrupts.len(), 1);
    let i = &s.interrupts[0];
    assert_eq!((i.vector, i.start, i.warp), (3, 5 * MS, true));
    assert_eq!(i.every, Dist::Exp(10 * MS));
}

#[test]
fn periodic_deadline_defaults_to_period_and_may_exceed_it() {
    let s = parse_scenario(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"periodic\", period = \"10ms\", exec = \"2ms\" }\n[[task]]\nname = \"b\"\nbehaviour = { kind = \"periodic\", period = \"10ms\", exec = \"2ms\", deadline = \"25ms\" }\n"),
        "ok.toml",
    )
    .unwrap();
    assert!(matches!(s.tasks[0].behaviour, Behaviour::Periodic { deadline, offset: 0, jobs: None, .. } if deadline == 10 * MS));
    assert!(matches!(s.tasks[1].behaviour, Behaviour::Periodic { deadline, .. } if deadline == 25 * MS));
}

#[test]
fn best_effort_usage_parses_and_hz_zero_is_fine_with_oneshot() {
    let s = parse_scenario(
        "until = \"1s\"\n[machine]\ncpus = 1\nhz = 0\n[[scheduler]]\nname = \"x\"\npolicy = \"rr\"\nusage = \"best_effort\"\n[[task]]\nname = \"t\"\nbehaviour = { kind = \"cpu\" }\n",
        "ok.toml",
    )
    .unwrap();
    assert_eq!(s.machine.hz, 0);
    assert_eq!(s.schedulers[0].usage, Usage::BestEffort);
}

// ---------------------------------------------------------------------------------------
// Errors: file, line, column and what was expected

#[test]
fn error_display_is_file_line_col_msg() {
    let e = assert_err("until = \"1s\"\n[machine]\ncpus = 0\n", 3, "cpus must be between 1 and 64");
    assert_eq!(e.col, 8);
    assert_eq!(e.to_string(), "bad.toml:3:8: cpus must be between 1 and 64, found 0");
    let _: &dyn std::error::Error = &e;
}

#[test]
fn unreadable_file_is_line_zero() {
    let e = load_scenario(Path::new("/nonexistent/dir/none.toml")).unwrap_err();
    assert_eq!((e.line, e.col), (0, 0));
    assert_eq!(e.file, "/nonexistent/dir/none.toml");
    assert!(e.msg.contains("cannot read"), "{e}");
}

#[test]
fn syntax_errors_have_positions() {
    assert_err("until = \"1s\"\n[machine\ncpus = 2\n", 2, "");
    assert_err("until = \"1s\"\n[machine]\ncpus = = 2\n", 3, "");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\ncpus = 3\n", 4, "");
}

#[test]
fn missing_required_keys() {
    assert_err("[machine]\ncpus = 2\n", 1, "missing required key `until`");
    assert_err("until = \"1s\"\n", 1, "missing required key `machine`");
    assert_err("until = \"1s\"\n[machine]\nhz = 100\n", 2, "missing required key `cpus`");
    assert_err(&with("[[task]]\nbehaviour = { kind = \"cpu\" }\n"), 4, "missing required key `name`");
    assert_err(&with("[[task]]\nname = \"a\"\n"), 4, "missing required key `behaviour`");
    assert_err(&with("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\n"), 4, "missing required key `usage`");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"periodic\", exec = \"1ms\" }\n"), 6, "needs key `period`");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"io\", run = \"1ms\" }\n"), 6, "needs key `sleep`");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"handler\", vector = 1 }\n"), 6, "needs key `work`");
}

#[test]
fn unknown_keys_everywhere() {
    assert_err("until = \"1s\"\nbogus = 1\n[machine]\ncpus = 2\n", 2, "unknown key `bogus`");
    assert_err(&with("bogus = 1\n"), 4, "unknown key `bogus`, expected one of `cpus`");
    assert_err(&with("[machine.unscheduled]\ninterval = \"1ms\"\nduration = \"1us\"\nbogus = 1\n"), 7, "unknown key `bogus`");
    assert_err(&with("[default]\npolicy = \"rr\"\nbogus = 1\n"), 6, "unknown key `bogus`");
    assert_err(&with("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = { reserved = 0.5 }\nbogus = 1\n"), 8, "unknown key `bogus`");
    assert_err(
        &with("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = { hard_time = { cpus = [0], util = 0.3, bogus = 1 } }\n"),
        7,
        "unknown key `bogus`",
    );
    assert_err(&with("[[task]]\nname = \"a\"\nbogus = 1\nbehaviour = { kind = \"cpu\" }\n"), 6, "unknown key `bogus`");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\", bogus = 1 }\n"), 6, "unknown key `bogus`");
    // A key another kind uses is still wrong for this one.
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\", period = \"1s\" }\n"),
        6,
        "unknown key `period` for behaviour kind 'cpu'",
    );
    assert_err(
        &with("[[task]]\nname = \"a\"\n[task.behaviour]\nkind = \"io\"\nrun = \"1ms\"\nsleep = \"1ms\"\nbogus = 2\n"),
        10,
        "unknown key `bogus`",
    );
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"script\", phases = [{ walk = \"1ms\" }] }\n"),
        6,
        "unknown key `walk`",
    );
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"script\", phases = [{ send = { to = \"default\", request = \"join\", bogus = 1 } }] }\n"),
        6,
        "unknown key `bogus`",
    );
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"script\", phases = [{ send = { to = \"default\", request = \"join\", delay = \"1ms\" } }] }\n"),
        6,
        "does not apply to request 'join'",
    );
    assert_err(&with("[[task]]\nname = \"h\"\nbehaviour = { kind = \"handler\", vector = 1, work = \"1us\" }\n[[interrupt]]\nvector = 1\nevery = \"1ms\"\nbogus = 1\n"), 10, "unknown key `bogus`");
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\", work = { exponential = \"1ms\" } }\n"),
        6,
        "unknown distribution `exponential`",
    );
}

#[test]
fn durations_need_units_and_must_not_be_negative() {
    assert_err("until = \"10\"\n[machine]\ncpus = 2\n", 1, "a unit is needed");
    assert_err("until = 10\n[machine]\ncpus = 2\n", 1, "a unit is needed");
    assert_err(&with("switch_cost = 5\n"), 4, "a unit is needed");
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"periodic\", period = \"10\", exec = \"1ms\" }\n"),
        6,
        "a unit is needed",
    );
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"periodic\", period = \"-10ms\", exec = \"1ms\" }\n"), 6, "negative");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"periodic\", period = -10, exec = \"1ms\" }\n"), 6, "negative");
    assert_err(&with("[[task]]\nname = \"a\"\nstart = \"-1s\"\nbehaviour = { kind = \"cpu\" }\n"), 6, "negative");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"io\", run = { exp = \"-1ms\" }, sleep = \"1ms\" }\n"), 6, "negative");
    assert_err(&with("[[task]]\nname = \"a\"\nstart = \"5 parsecs\"\nbehaviour = { kind = \"cpu\" }\n"), 6, "unknown unit");
    assert_err(&with("[[task]]\nname = \"a\"\nstart = true\nbehaviour = { kind = \"cpu\" }\n"), 6, "duration string with a unit");
    assert_err("until = \"0s\"\n[machine]\ncpus = 2\n", 1, "until must be greater than 0");
}

#[test]
fn period_zero_refused() {
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"periodic\", period = \"0ms\", exec = \"1ms\" }\n"),
        6,
        "period must be greater than 0",
    );
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"script\", phases = [{ timer = \"0s\" }] }\n"),
        6,
        "timer period must be greater than 0",
    );
}

#[test]
fn machine_checks() {
    assert_err("until = \"1s\"\n[machine]\ncpus = 0\n", 3, "cpus must be between 1 and 64, found 0");
    assert_err("until = \"1s\"\n[machine]\ncpus = 65\n", 3, "cpus must be between 1 and 64");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\nclock = \"tick\"\nhz = 0\n", 5, "needs hz greater than 0");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\nclock = \"tock\"\n", 4, "expected `oneshot` or `tick`");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\nclock = \"tick\"\nhz = 1000\ntick = \"1ms\"\n", 5, "not both");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\nclock = \"tick\"\ntick = \"0ms\"\n", 5, "tick must be a period greater than 0");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\nmin_best_effort = 1.5\n", 4, "between 0 and 1");
    assert_err("until = \"1s\"\n[machine]\ncpus = 2\nmin_best_effort = inf\n", 4, "not a finite number");
    assert_err(&with("[machine.unscheduled]\ninterval = \"0ms\"\nduration = \"1us\"\n"), 5, "mean greater than 0");
    assert_err(
        &with("[machine.unscheduled]\ninterval = \"1ms\"\nduration = \"1us\"\nalso = [{ interval = \"0ms\", duration = \"1us\" }]\n"),
        7,
        "mean greater than 0",
    );
}

#[test]
fn uniform_lo_above_hi_refused() {
    let e = assert_err(&with("[machine.unscheduled]\ninterval = \"1ms\"\nduration = { uniform = [\"50us\", \"5us\"] }\n"), 6, "lo <= hi");
    assert!(e.msg.contains("lo (50us) greater than hi (5us)"), "{e}");
    assert_err(&with("[machine.unscheduled]\ninterval = \"1ms\"\nduration = { uniform = [\"5us\"] }\n"), 6, "exactly two durations");
    assert_err(
        &with("[machine.unscheduled]\ninterval = \"1ms\"\nduration = { uniform = [\"5us\", \"6us\"], exp = \"1us\" }\n"),
        6,
        "exactly one key",
    );
}

#[test]
fn nan_and_infinite_floats_refused() {
    let sched = |usage: &str| with(&format!("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = {usage}\n"));
    assert_err(&sched("{ hard_time = { cpus = [0], util = nan } }"), 7, "not a finite number");
    assert_err(&sched("{ reserved = inf }"), 7, "not a finite number");
    assert_err(&sched("{ reserved = -inf }"), 7, "not a finite number");
    assert_err(&with("[default]\nparams = { quantum = nan }\n"), 5, "not a finite number");
    assert_err(
        &with("[[task]]\nname = \"a\"\nparams = { weight = 1.5 }\nbehaviour = { kind = \"cpu\" }\n"),
        6,
        "an integer, a duration string",
    );
}

#[test]
fn usage_checks() {
    let sched = |usage: &str| with(&format!("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = {usage}\n"));
    assert_err(&sched("{ hard_time = { cpus = [0, 2], util = 0.3 } }"), 7, "hard_time CPU 2 is out of range");
    assert_err(&sched("{ hard_time = { cpus = [-1], util = 0.3 } }"), 7, "out of range");
    assert_err(&sched("{ hard_time = { cpus = [], util = 0.3 } }"), 7, "at least one CPU");
    assert_err(&sched("{ hard_time = { cpus = [0], util = 1.5 } }"), 7, "at most 1");
    assert_err(&sched("{ hard_time = { cpus = [0], util = -0.1 } }"), 7, "greater than 0");
    assert_err(&sched("{ reserved = 2.5 }"), 7, "at most the 2 CPU(s)");
    assert_err(&sched("{ reserved = 0 }"), 7, "greater than 0");
    assert_err(&sched("{ soft = 1 }"), 7, "expected one of `hard_time`, `reserved`, `best_effort`");
    assert_err(&sched("\"whatever\""), 7, "expected one of `hard_time`, `reserved`, `best_effort`");
}

#[test]
fn policy_checks() {
    assert_err(&with("[default]\npolicy = \"cfs\"\n"), 5, "unknown policy 'cfs'");
    assert_err(&with("[[scheduler]]\nname = \"a\"\npolicy = \"cfs\"\nusage = { reserved = 0.5 }\n"), 6, "unknown policy 'cfs'");
    // Parameter errors point at the parameter.
    let e = assert_err(&with("[default]\npolicy = \"rr\"\nparams = { quantum = 10 }\n"), 6, "quantum");
    assert_eq!(e.col, 22);
    assert_err(&with("[default]\npolicy = \"rr\"\n[default.params]\nquantum = \"0ms\"\n"), 7, "quantum");
    assert_err(&with("[default]\npolicy = \"rr\"\nparams = { quantm = \"10ms\" }\n"), 6, "quantm");
    assert_err(&with("[default]\npolicy = \"rr\"\nparams = { quantum = [1] }\n"), 6, "policy parameter");
}

#[test]
fn name_checks() {
    assert_err(
        &with("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = { reserved = 0.5 }\n[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = { reserved = 0.5 }\n"),
        9,
        "duplicate scheduler name 'a' (also defined at line 5)",
    );
    assert_err(&with("[[scheduler]]\nname = \"default\"\npolicy = \"rr\"\nusage = { reserved = 0.5 }\n"), 5, "default scheduler's name");
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\" }\n[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\" }\n"),
        8,
        "duplicate task name 'a'",
    );
    // After count expansion.
    let e = assert_err(
        &with(
            "[[task]]\nname = \"a\"\ncount = 2\nbehaviour = { kind = \"cpu\" }\n[[task]]\nname = \"a.1\"\nbehaviour = { kind = \"cpu\" }\n",
        ),
        9,
        "duplicate task name 'a.1'",
    );
    assert!(e.msg.contains("line 5"), "{e}");
    assert_err(&with("[[task]]\nname = \"\"\nbehaviour = { kind = \"cpu\" }\n"), 5, "must not be empty");
    assert_err(&with("[[task]]\nname = \"a\"\ncount = 0\nbehaviour = { kind = \"cpu\" }\n"), 6, "count must be between 1");
}

#[test]
fn task_reference_checks() {
    let e = assert_err(
        &with("[[task]]\nname = \"a\"\nscheduler = \"rt\"\nbehaviour = { kind = \"cpu\" }\n"),
        6,
        "scheduler 'rt', which does not exist",
    );
    assert!(e.msg.contains("'default'"), "{e}");
    assert_err(&with("[[task]]\nname = \"a\"\naffinity = [0, 2]\nbehaviour = { kind = \"cpu\" }\n"), 6, "affinity CPU 2 is out of range");
    assert_err(&with("[[task]]\nname = \"a\"\naffinity = []\nbehaviour = { kind = \"cpu\" }\n"), 6, "at least one CPU");
    // A kind the scenario language does not know is kept for a registered behaviour; with
    // none registered, the simulation refuses it where it is written.
    let spin = parse_scenario(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"spin\" }\n"), "bad.toml").unwrap();
    let e = vassal_sim::Sim::new(spin).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.starts_with("bad.toml:6:") && e.contains("unknown behaviour kind 'spin'"), "{e}");
    let script = |phase: &str| with(&format!("[[task]]\nname = \"a\"\nbehaviour = {{ kind = \"script\", phases = [{phase}] }}\n"));
    assert_err(&script("{ hand_off = { to = \"ghost\", sleep = \"1ms\" } }"), 6, "hand_off names task 'ghost', which does not exist");
    assert_err(&script("{ hand_off = { to = \"a\", sleep = \"1ms\" } }"), 6, "cannot hand off to itself");
    assert_err(&script("{ send = { to = \"ghost\", request = \"join\" } }"), 6, "send names scheduler 'ghost', which does not exist");
    assert_err(&script("{ join = \"ghost\" }"), 6, "join names scheduler 'ghost'");
    assert_err(&script("{ send = { to = \"default\", request = \"fly\" } }"), 6, "unknown request 'fly'");
    assert_err(&script("{ send = { to = \"default\", request = \"warp\" } }"), 6, "needs key `on`");
    assert_err(&script("{ send = { to = \"default\", request = \"param\", name = \"w\" } }"), 6, "needs key `value`");
    assert_err(&script("{ yield = false }"), 6, "yield = true");
    assert_err(&script("{ }"), 6, "empty phase");
    assert_err(&script("{ run = \"1ms\", sleep = \"1ms\" }"), 6, "exactly one key");
    assert_err(&with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"script\", phases = [] }\n"), 6, "at least one phase");
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"script\", repeat = true, phases = [{ yield = true }] }\n"),
        6,
        "loops forever",
    );
}

#[test]
fn scheduler_times() {
    let s = |times: &str| with(&format!("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = {{ reserved = 0.5 }}\n{times}"));
    assert_err(&s("load_at = \"2s\"\nunload_at = \"2s\"\n"), 9, "unload_at (2s) must be later than load_at (2s)");
    assert_err(&s("load_at = \"2s\"\nunload_at = \"1s\"\n"), 9, "must be later than load_at");
    assert_err(&s("unload_at = \"0s\"\n"), 8, "must be later than load_at");
}

#[test]
fn handler_and_interrupt_must_match() {
    assert_err(
        &with("[[task]]\nname = \"h\"\nbehaviour = { kind = \"handler\", vector = 3, work = \"50us\" }\n"),
        6,
        "no [[interrupt]] has vector = 3",
    );
    assert_err(
        &with("[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\" }\n[[interrupt]]\nvector = 4\nevery = \"1ms\"\n"),
        8,
        "interrupt vector 4 has no handler task",
    );
    assert_err(
        &with("[[task]]\nname = \"h\"\ncount = 2\nbehaviour = { kind = \"handler\", vector = 3, work = \"50us\" }\n[[interrupt]]\nvector = 3\nevery = \"1ms\"\n"),
        7,
        "vector 3 already has handler task 'h.0'",
    );
    assert_err(
        &with("[[task]]\nname = \"h\"\nbehaviour = { kind = \"handler\", vector = 3, work = \"50us\" }\n[[interrupt]]\nvector = 3\nevery = \"0ms\"\n"),
        9,
        "mean greater than 0",
    );
    assert_err(
        &with("[[task]]\nname = \"h\"\nbehaviour = { kind = \"handler\", vector = -3, work = \"50us\" }\n"),
        6,
        "expected an integer from 0 to 4294967295",
    );
}

#[test]
fn columns_count_characters() {
    // A multi-byte character before the error must count as one column.
    let e = assert_err("name = \"µ\"; until = \"1s\"\n", 1, "");
    assert!(e.col >= 1);
    let e = assert_err(&with("[[task]]\nname = \"ü\"\nbehaviour = { kind = \"cpu\", period = \"1s\" }\n"), 6, "unknown key `period`");
    assert_eq!(e.col, 38);
}

// ---------------------------------------------------------------------------------------
// Never panics

/// Deterministic mutations of every example: truncations, deletions, and insertions of
/// characters that tend to break TOML and the semantics.
#[test]
fn mutated_examples_never_panic() {
    const INSERTS: &[&str] = &["\"", "=", "[", "]", "{", "}", ",", "\n", "-", "0", "9", "nan", "x", "\u{e9}", "#"];
    for f in example_files() {
        let text = std::fs::read_to_string(&f).unwrap();
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        for (n, &(i, c)) in chars.iter().enumerate() {
            let _ = parse_scenario(&text[..i], "m.toml");
            let mut deleted = text.clone();
            deleted.replace_range(i..i + c.len_utf8(), "");
            let _ = parse_scenario(&deleted, "m.toml");
            let ins = INSERTS[n % INSERTS.len()];
            let mut inserted = text.clone();
            inserted.insert_str(i, ins);
            let _ = parse_scenario(&inserted, "m.toml");
        }
    }
}

#[test]
fn hostile_values_never_panic() {
    for v in [
        "\"18446744073709551615ns\"",
        "\"18446744073709551616ns\"",
        "\"99999999999999999999s\"",
        "9223372036854775807",
        "-9223372036854775808",
        "1e308",
        "-0.0",
        "nan",
        "-inf",
        "\"\"",
        "\"µs\"",
        "\"1.0000000000000000001ms\"",
        "[]",
        "{}",
        "[[[[]]]]",
        "1979-05-27T07:32:00Z",
        "{ uniform = [\"1s\", \"1s\", \"1s\"] }",
        "{ normal = [] }",
    ] {
        for key in ["until", "seed", "name"] {
            let _ = parse_scenario(&format!("{key} = {v}\n[machine]\ncpus = 2\n"), "h.toml");
        }
        for key in ["cpus", "hz", "switch_cost", "min_best_effort", "clock", "unscheduled"] {
            let _ = parse_scenario(&format!("until = \"1s\"\n[machine]\n{key} = {v}\n"), "h.toml");
        }
        for key in ["count", "start", "affinity", "uid", "params", "loop_at", "behaviour", "scheduler"] {
            let _ = parse_scenario(&with(&format!("[[task]]\nname = \"a\"\n{key} = {v}\n")), "h.toml");
        }
        for key in ["work", "period", "exec", "deadline", "offset", "jobs", "vector", "phases", "repeat"] {
            let _ =
                parse_scenario(&with(&format!("[[task]]\nname = \"a\"\nbehaviour = {{ kind = \"periodic\", {key} = {v} }}\n")), "h.toml");
            let _ = parse_scenario(
                &with(&format!("[[task]]\nname = \"a\"\nbehaviour = {{ kind = \"script\", phases = [{{ {key} = {v} }}] }}\n")),
                "h.toml",
            );
        }
        for key in ["usage", "params", "load_at", "unload_at"] {
            let _ = parse_scenario(&with(&format!("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\n{key} = {v}\n")), "h.toml");
        }
        let _ = parse_scenario(&with(&format!("[default]\nparams = {{ quantum = {v} }}\n")), "h.toml");
        let _ = parse_scenario(
            &with(&format!("[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = {{ hard_time = {{ cpus = {v}, util = {v} }} }}\n")),
            "h.toml",
        );
    }
    // Deep nesting stays within the TOML parser's recursion limit.
    let deep = format!("until = {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    assert!(parse_scenario(&deep, "d.toml").is_err());
    let deep = format!("until = {}\n", "{ a = ".repeat(5_000));
    assert!(parse_scenario(&deep, "d.toml").is_err());
    // Huge counts are refused before anything is allocated for them.
    assert_err(&with("[[task]]\nname = \"a\"\ncount = 9223372036854775807\nbehaviour = { kind = \"cpu\" }\n"), 6, "count must be between");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        let _ = parse_scenario(&text, "p.toml");
    }

    #[test]
    fn scenario_shaped_text_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("until = \"1s\"".to_string()),
                Just("[machine]".to_string()),
                Just("cpus = 2".to_string()),
                Just("[[task]]".to_string()),
                Just("[[scheduler]]".to_string()),
                Just("[[interrupt]]".to_string()),
                Just("[default]".to_string()),
                Just("name = \"a\"".to_string()),
                Just("policy = \"rr\"".to_string()),
                Just("vector = 3".to_string()),
                Just("every = \"1ms\"".to_string()),
                Just("usage = { reserved = 0.5 }".to_string()),
                Just("behaviour = { kind = \"handler\", vector = 3, work = \"1us\" }".to_string()),
                Just("behaviour = { kind = \"script\", repeat = true, phases = [{ hand_off = { to = \"a\", sleep = \"1ms\" } }, { join = \"a\" }] }".to_string()),
                "[a-z_]{1,10} = (\"[0-9]{1,4}(ms|us|s|)\"|-?[0-9]{1,3}|true|nan|\\[\\]|\\{\\})",
            ],
            0..25,
        )
    ) {
        let text = lines.join("\n");
        let _ = parse_scenario(&text, "p.toml");
    }
}

/// The messages shown in docs/scenario.md, verbatim.
#[test]
fn documented_error_texts() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scenario.md")).unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "bad-unit.toml",
            "until = \"10s\"\n\n[machine]\ncpus = 2\n\n[[task]]\nname = \"ticker\"\nbehaviour = { kind = \"periodic\", period = \"10\", exec = \"2ms\" }\n",
        ),
        (
            "bad-ref.toml",
            "until = \"10s\"\n\n[machine]\ncpus = 2\n\n[[scheduler]]\nname = \"rt\"\npolicy = \"fps\"\nusage = { hard_time = { cpus = [0], util = 0.3 } }\n\n[[task]]\nname = \"audio\"\nscheduler = \"realtime\"\nbehaviour = { kind = \"cpu\" }\n",
        ),
        ("bad.toml", "until = \"1s\"\nbogus = 1\n[machine]\ncpus = 2\n"),
        ("bad.toml", "until = \"1s\"\n[machine]\ncpus = 0\n"),
        ("bad.toml", "until = \"1s\"\n[machine]\ncpus = 2\n[default]\npolicy = \"cfs\"\n"),
        ("bad.toml", "until = \"1s\"\n[machine]\ncpus = 2\n[default]\npolicy = \"rr\"\nparams = { quantum = 10 }\n"),
        ("bad.toml", "until = \"1s\"\n[machine]\ncpus = 2\n[[task]]\nname = \"a\"\nbehaviour = { kind = \"cpu\", period = \"1s\" }\n"),
        (
            "bad.toml",
            "until = \"1s\"\n[machine]\ncpus = 2\n[[task]]\nname = \"a\"\ncount = 2\nbehaviour = { kind = \"cpu\" }\n[[task]]\nname = \"a.1\"\nbehaviour = { kind = \"cpu\" }\n",
        ),
        ("bad.toml", "until = \"1s\"\n[machine]\ncpus = 2\n[[task]]\nname = \"a\"\naffinity = [0, 2]\nbehaviour = { kind = \"cpu\" }\n"),
        (
            "bad.toml",
            "until = \"1s\"\n[machine]\ncpus = 2\n[machine.unscheduled]\ninterval = \"1ms\"\nduration = { uniform = [\"50us\", \"5us\"] }\n",
        ),
        (
            "bad.toml",
            "until = \"1s\"\n[machine]\ncpus = 2\n[[task]]\nname = \"h\"\nbehaviour = { kind = \"handler\", vector = 3, work = \"50us\" }\n",
        ),
        (
            "bad.toml",
            "until = \"1s\"\n[machine]\ncpus = 2\n[[scheduler]]\nname = \"a\"\npolicy = \"rr\"\nusage = { reserved = 0.5 }\nload_at = \"2s\"\nunload_at = \"2s\"\n",
        ),
    ];
    let missing: Vec<String> = cases
        .iter()
        .map(|(file, text)| parse_scenario(text, file).unwrap_err().to_string())
        .filter(|e| !doc.contains(e.as_str()))
        .collect();
    assert!(missing.is_empty(), "docs/scenario.md does not show these errors verbatim:\n{}", missing.join("\n"));
}

/// Every whole scenario shown in docs/scenario.md (a block with `until` and `[machine]`)
/// runs as shown, unless it is there to show an error, which the page then shows
/// verbatim (after the file name): a reader who copies one gets what the page says.
#[test]
fn documented_scenarios_run_or_show_their_error() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scenario.md")).unwrap();
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split_once("```").map(|(code, _)| code))
        .filter(|b| b.contains("until =") && b.contains("[machine]"))
        .collect();
    assert!(blocks.len() >= 3, "{} blocks", blocks.len());
    let mut ran = 0;
    for b in blocks {
        match parse_scenario(b, "doc.toml") {
            Ok(sc) => {
                let mut sim = vassal_sim::Sim::new(sc).unwrap_or_else(|e| panic!("{e}\n{b}"));
                sim.set_checks(true);
                sim.run().unwrap_or_else(|e| panic!("{e}\n{b}"));
                ran += 1;
            }
            Err(e) => {
                let e = e.to_string();
                let shown = e.strip_prefix("doc.toml").unwrap_or(&e);
                assert!(doc.contains(shown), "a scenario in docs/scenario.md fails with an error the page does not show: {e}\n{b}");
            }
        }
    }
    assert!(ran >= 1);
}
