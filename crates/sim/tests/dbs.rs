//! DBS reservations from scripts: a bad request is refused without harm.

use vassal_sim::scenario::parse_scenario;

#[test]
fn a_script_reserves_from_dbs_and_a_bad_request_is_refused_without_harm() {
    // s1 reserves 5 ms in [10, 20] ms (relative to the send) and runs; s2's requests are
    // malformed (need beyond the window; deadline before start) or infeasible, and are
    // refused; s1's reservation is still served: it runs from 10 ms although the hog and
    // s2 are runnable.
    let text = r#"until = "100ms"
[machine]
cpus = 1
switch_cost = "0ns"
[default]
name = "sched"
policy = "dbs"
[[task]]
name = "hog"
behaviour = { kind = "cpu" }
[[task]]
name = "s1"
behaviour = { kind = "script", phases = [
  { send = { to = "sched", request = "deadline", start = "10ms", need = "5ms", deadline = "20ms" } },
  { sleep = "10ms" },
  { run = "5ms" },
] }
[[task]]
name = "s2"
start = "1ms"
behaviour = { kind = "script", phases = [
  { send = { to = "sched", request = "deadline", start = "10ms", need = "11ms", deadline = "20ms" } },
  { send = { to = "sched", request = "deadline", start = "10ms", need = "1ms", deadline = "5ms" } },
  { send = { to = "sched", request = "deadline", start = "9ms", need = "6ms", deadline = "19ms" } },
  { run = "1ms" },
] }
"#;
    let sc = parse_scenario(text, "t.toml").unwrap();
    let mut sim = vassal_sim::Sim::new(sc).unwrap();
    sim.record_trace();
    let (r, trace) = sim.run_traced().unwrap();
    let s2 = r.task("s2").unwrap();
    assert_eq!((s2.messages, s2.refused_messages), (3, 3));
    for why in ["exceeds the window", "not after start", "infeasible"] {
        assert!(r.log.iter().any(|l| l.contains("s2") && l.contains(why)), "no '{why}' in {:?}", r.log);
    }
    let s1 = r.task("s1").unwrap();
    assert_eq!((s1.messages, s1.refused_messages), (1, 0));
    // s1 ran its 5 ms within [10, 20] ms, from the start of its reservation.
    let s1_idx = 1;
    let ran: Vec<(u64, u64)> = trace.slices.iter().filter(|s| s.task == s1_idx).map(|s| (s.start, s.end)).collect();
    assert_eq!(ran, vec![(10_000_000, 15_000_000)], "{ran:?}");
}
