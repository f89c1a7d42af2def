//! The workload as the real rt-app 1.0 gets it on the machine: strict JSON (repeated keys
//! numbered, bare `"suspend"` filled in, as workgen would: [`json::to_strict`]), with
//! the run's settings in `global` (duration, log directory and name, loop calibration,
//! logs buffered in memory rather than written inside the loops, no ftrace or gnuplot),
//! every thread delayed by [`super::HOLD`] more, and — under the agent — every thread
//! left at SCHED_OTHER: the agent gives it its scheduling (rt-app would otherwise set
//! its own policy behind the agent's back).
//!
//! What the agent cannot follow is refused by name with its line: a phase that changes
//! its thread's scheduling (the agent learns nothing of rt-app's phases), and a `cpus`
//! list smaller than the machine (the agent binds each selected thread itself).

use vassal_core::US;
use vassal_sim::rtapp::json::{self, Kind, Member, Pos, Value};
use vassal_sim::rtapp::model::{EventKind, RtApp};

/// How the real run is set up.
pub struct Setup<'a> {
    /// rt-app's `duration`, s.
    pub duration_s: u64,
    pub logdir: &'a str,
    pub basename: &'a str,
    /// Loop calibration, ns (None: rt-app measures it itself).
    pub calibration: Option<u64>,
    /// The threads run under the agent (their policies are taken out).
    pub agent: bool,
    /// Added to every thread's `delay`, ns.
    pub hold: u64,
    pub cpus: u16,
}

const SCHED_KEYS: &[&str] = &["policy", "priority", "dl-runtime", "dl-period", "dl-deadline"];

fn val(kind: Kind) -> Value {
    Value { at: Pos::default(), kind }
}

fn set(members: &mut Vec<Member>, key: &str, v: Value) {
    match members.iter_mut().find(|m| m.key == key) {
        Some(m) => m.value = Some(v),
        None => members.push(Member { key: key.to_string(), at: Pos::default(), value: Some(v) }),
    }
}

fn obj(v: &mut Value) -> Option<&mut Vec<Member>> {
    match &mut v.kind {
        Kind::Obj(m) => Some(m),
        _ => None,
    }
}

/// Checks what the agent cannot follow (errors "LINE:COL: PATH: message").
pub fn check_for_agent(app: &RtApp, cpus: u16) -> Result<(), String> {
    for t in &app.threads {
        for p in &t.phases {
            if let Some(s) = &p.sched {
                return Err(format!(
                    "{}: tasks.{}.phases.{}: a phase that sets its thread's scheduling cannot run under the agent (it learns nothing of rt-app's phases); run it with --kernel, or give the thread one policy",
                    s.at, t.name, p.name
                ));
            }
        }
        let cpus_lists = t.cpus.iter().chain(t.phases.iter().filter_map(|p| p.cpus.as_ref()));
        for c in cpus_lists {
            if c.list.len() < cpus as usize {
                return Err(format!(
                    "{}: tasks.{}.cpus: a thread bound to some CPUs cannot run under the agent (the agent binds each thread it selects itself and does not know the binding); run it with --kernel",
                    c.at, t.name
                ));
            }
        }
    }
    Ok(())
}

/// The strict JSON text for rt-app.
pub fn strict(text: &str, app: &RtApp, s: &Setup) -> Result<String, String> {
    let mut root = json::parse(text).map_err(|e| e.to_string())?;
    let top = obj(&mut root).ok_or("1:1: an rt-app file is an object")?;
    if !top.iter().any(|m| m.key == "global") {
        top.insert(0, Member { key: "global".into(), at: Pos::default(), value: Some(val(Kind::Obj(Vec::new()))) });
    }
    for m in top.iter_mut() {
        let Some(v) = m.value.as_mut() else { continue };
        match m.key.as_str() {
            "global" => {
                let g = obj(v).ok_or("global is not an object")?;
                set(g, "duration", val(Kind::Int(s.duration_s as i64)));
                set(g, "logdir", val(Kind::Str(s.logdir.into())));
                set(g, "log_basename", val(Kind::Str(s.basename.into())));
                // a buffer per thread, written at the end: no file I/O inside the loops
                set(g, "log_size", val(Kind::Int(4)));
                set(g, "ftrace", val(Kind::Bool(false)));
                set(g, "gnuplot", val(Kind::Bool(false)));
                if let Some(c) = s.calibration {
                    set(g, "calibration", val(Kind::Int(c as i64)));
                }
                if s.agent {
                    set(g, "default_policy", val(Kind::Str("SCHED_OTHER".into())));
                }
            }
            "tasks" => {
                let tasks = obj(v).ok_or("tasks is not an object")?;
                for t in tasks.iter_mut() {
                    let Some(tv) = t.value.as_mut() else { continue };
                    let Some(tm) = obj(tv) else { continue };
                    let delay = tm
                        .iter()
                        .find(|m| m.key == "delay")
                        .and_then(|m| m.value.as_ref())
                        .and_then(|v| if let Kind::Int(i) = v.kind { Some(i) } else { None })
                        .unwrap_or(0);
                    set(tm, "delay", val(Kind::Int(delay + (s.hold / US) as i64)));
                    if s.agent {
                        tm.retain(|m| !SCHED_KEYS.contains(&m.key.as_str()));
                        set(tm, "policy", val(Kind::Str("SCHED_OTHER".into())));
                    }
                }
            }
            _ => {}
        }
    }
    // a bare `"suspend"` gets its thread's name, as workgen gives it
    let bare: Vec<(Pos, String)> = app
        .threads
        .iter()
        .flat_map(|t| t.phases.iter().flat_map(|p| p.events.iter()))
        .filter_map(|e| match &e.kind {
            EventKind::Suspend(n) => Some((e.at, n.clone())),
            _ => None,
        })
        .collect();
    Ok(json::to_strict(&root, &|at| bare.iter().find(|(p, _)| *p == at).map_or_else(|| "suspend".to_string(), |(_, n)| n.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{
  /* a comment */
  "global": { "duration": 2, "calibration": "CPU0", "logdir": "./" },
  "tasks": {
    "rt": { "policy": "SCHED_FIFO", "priority": 20, "run": 1000, "timer": { "ref": "unique", "period": 10000 }, },
    "pipe": { "delay": 1000, "suspend", "run": 500, "run": 700 },
  }
}"#;

    fn setup(agent: bool) -> Setup<'static> {
        Setup { duration_s: 3, logdir: "/tmp/x", basename: "twin", calibration: Some(16), agent, hold: 500_000_000, cpus: 2 }
    }

    #[test]
    fn the_real_file_is_strict_json_with_the_runs_settings() {
        let app = vassal_sim::rtapp::read(FILE).unwrap();
        let out = strict(FILE, &app, &setup(true)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let g = &v["global"];
        assert_eq!((g["duration"].as_i64(), g["calibration"].as_i64(), g["logdir"].as_str()), (Some(3), Some(16), Some("/tmp/x")));
        assert_eq!((g["log_size"].as_i64(), g["default_policy"].as_str()), (Some(4), Some("SCHED_OTHER")));
        let rt = &v["tasks"]["rt"];
        assert_eq!((rt["policy"].as_str(), rt.get("priority"), rt["delay"].as_i64()), (Some("SCHED_OTHER"), None, Some(500_000)));
        let pipe = &v["tasks"]["pipe"];
        assert_eq!((pipe["delay"].as_i64(), pipe["suspend"].as_str()), (Some(501_000), Some("pipe")));
        assert_eq!((pipe["run"].as_i64(), pipe["run1"].as_i64()), (Some(500), Some(700)), "{out}");
        // under the kernel the policies stay
        let out = strict(FILE, &app, &setup(false)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((v["tasks"]["rt"]["policy"].as_str(), v["tasks"]["rt"]["priority"].as_i64()), (Some("SCHED_FIFO"), Some(20)));
        assert_eq!(v["global"].get("default_policy"), None);
    }

    #[test]
    fn what_the_agent_cannot_follow_is_refused_with_its_line() {
        let f = r#"{ "global": { "duration": 1 }, "tasks": { "a": { "phases": {
            "p": { "run": 10 },
            "q": { "policy": "SCHED_FIFO", "run": 10 } } } } }"#;
        let app = vassal_sim::rtapp::read(f).unwrap();
        let e = check_for_agent(&app, 2).unwrap_err();
        assert!(e.starts_with("3:20: tasks.a.phases.q: a phase that sets its thread's scheduling"), "{e}");
        let f = "{ \"global\": { \"duration\": 1 },\n \"tasks\": { \"a\": { \"cpus\": [1], \"run\": 10 } } }";
        let app = vassal_sim::rtapp::read(f).unwrap();
        let e = check_for_agent(&app, 2).unwrap_err();
        assert!(e.starts_with("2:28: tasks.a.cpus: a thread bound to some CPUs"), "{e}");
        assert!(check_for_agent(&app, 1).is_ok(), "one CPU of one is all of them");
    }
}
