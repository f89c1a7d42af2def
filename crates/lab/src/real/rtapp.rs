//! `real.rtapp_video` (issue 17): rt-app's video workload (Debian's
//! /usr/share/doc/rt-app/examples/video-short.json: 17 threads of a video player woken by
//! two timers, 60 and 30 Hz, and by each other) run by rt-app itself, under the kernel's
//! default and under `vassal run` (every thread a task of the agent's default BVT),
//! alternately, ten times 10 s each. rt-app logs each timer-driven thread's wake-up latency
//! (`wu_lat`: from its timer's expiry to its run); target: no thread's p99 worse than
//! under the kernel's default in the same run, by more than 10% + 50 µs — and "worse"
//! means worse beyond what the rounds' own spread explains (`worse_by_at_least`).
//!
//! Why the spread matters: the p99 of the 30 Hz thread is made of the periods where both
//! timers fire on one CPU and it waits ~200 µs behind the 60 Hz one, and how often that
//! happens is settled per round (where the kernel left the two threads). Measured on
//! 2026-11-29, 30 rounds per mode: one round's p99 of the 30 Hz thread ranged 179–481 µs
//! under the kernel alone (184–690 under the agent); pooled, kernel 352–380 µs against
//! the agent's 319–362. Comparing one set of kernel rounds with another set of kernel
//! rounds by the plain rule (pooled p99 ≤ the other's + 10% + 50 µs) failed 17% of
//! random 5-against-5 splits (all threads pooled) and 15% of 10-against-10 ones: the
//! plain rule failed the kernel against itself. With the bootstrap over rounds below, 0%
//! of 10-against-10 kernel splits fail, while an agent that added 400 µs to 2% of wakes
//! fails in 93–100% of trials (the starting point was a p99 of 0.86–2.9 ms).
//!
//! The Debian file does not parse as it is with rt-app 1.0 and json-c 0.16 (bare
//! `"suspend",` keys without a value): each becomes `"suspend" : "<its thread>"` (what
//! rt-app's bare suspend means: wait on the thread's own name, which `resume` names).
//! The first run calibrates rt-app's loop (`pLoad`); every measured run then uses that
//! calibration, so each does the same work. Skipped, saying why, without rt-app.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vassal_agent::workers::quantile;

use super::{at_most, baseline, AgentProcess, RealRow};

const EXAMPLE: &str = "/usr/share/doc/rt-app/examples/video-short.json";
/// Each measured run's duration (s), and how many times the kernel and the agent take
/// turns: 10 × 10 s each, ~6,000 wake-ups of its 60 Hz thread and ~3,000 of its 30 Hz one
/// per mode, so a p99 is not one host stall (see the header for the spread of a round).
const RUN_S: u64 = 10;
const ROUNDS: usize = 10;
/// Bootstrap resamples of the rounds, and the one-sided level: the agent is worse only
/// if the 5th percentile of (agent's p99 − kernel's p99) over resampled rounds is.
const RESAMPLES: usize = 1000;
const LOWER: f64 = 0.05;

/// The example made parseable: bare `"suspend"` keys given their thread's name.
fn fix_suspends(text: &str) -> String {
    let mut task = String::new();
    let mut out = String::with_capacity(text.len() + 1024);
    for line in text.lines() {
        // A thread opens at depth 2: `\t\t"NAME" : {`.
        let t = line.trim_start_matches('\t');
        if line.len() - t.len() == 2 && t.ends_with('{') && t.starts_with('"') {
            if let Some(name) = t[1..].split('"').next() {
                task = name.to_string();
            }
        }
        let body = t.trim_end();
        let fixed = match body {
            "\"suspend\"," => Some(format!("\"suspend\" : \"{task}\",")),
            "\"suspend\"" => Some(format!("\"suspend\" : \"{task}\"")),
            _ => None,
        };
        match fixed {
            Some(f) => out.push_str(&format!("{}{f}\n", &line[..line.len() - t.len()])),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The global `key` set to `value` (e.g. `"calibration" : 27`: rt-app then skips its
/// calibration; `"duration" : 10`).
fn set_global(text: &str, key: &str, value: u64) -> String {
    let quoted = format!("\"{key}\"");
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with(&quoted) {
                let comma = if t.trim_end().ends_with(',') { "," } else { "" };
                format!("\t\t{quoted} : {value}{comma}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs rt-app on `json` in `dir` (its logs go there), under `vassal run` on `sock` if
/// given, killed after `limit_s`; returns its output.
fn run_rtapp(exe: &Path, dir: &Path, json: &Path, sock: Option<&str>, limit_s: u32) -> io::Result<String> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::remove_file(p)?;
        }
    }
    let mut cmd = Command::new("timeout");
    cmd.args(["-s", "KILL", &limit_s.to_string()]);
    match sock {
        Some(s) => cmd.arg(exe).args(["run", "--socket", s, "--", "rt-app"]),
        None => cmd.arg("rt-app"),
    };
    let out = cmd.arg(json).current_dir(dir).stdin(Stdio::null()).output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(io::Error::other(format!("rt-app failed ({}): {}", out.status, text.lines().last().unwrap_or(""))));
    }
    Ok(text)
}

/// Each timer-driven thread's wake-up latencies (µs), from rt-app's logs in `dir`
/// (`<basename>-<thread>-<idx>.log`: the rows whose timer period, `c_period`, is set).
fn wake_latencies(dir: &Path) -> io::Result<Latencies> {
    let mut by = Latencies::new();
    for e in std::fs::read_dir(dir)? {
        let p: PathBuf = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()).filter(|n| n.ends_with(".log")) else {
            continue;
        };
        // video-NAME-IDX.log
        let stem = name.trim_end_matches(".log");
        let Some((rest, _idx)) = stem.rsplit_once('-') else { continue };
        let thread = rest.split_once('-').map_or(rest, |x| x.1).to_string();
        for line in std::fs::read_to_string(&p)?.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some(period), Some(wu)) = (f.get(9).and_then(|x| x.parse::<u64>().ok()), f.get(10).and_then(|x| x.parse::<u64>().ok()))
            {
                if period > 0 {
                    by.entry(thread.clone()).or_default().push(wu);
                }
            }
        }
    }
    Ok(by)
}

/// One round's wake-up latencies (µs), by thread.
type Latencies = BTreeMap<String, Vec<u64>>;

/// The `q` quantile of the wake-up latencies of `thread` (every thread: `None`) over
/// `rounds` pooled.
fn pooled<'a>(rounds: impl IntoIterator<Item = &'a Latencies>, thread: Option<&str>, q: f64) -> f64 {
    let mut v: Vec<u64> = rounds
        .into_iter()
        .flat_map(|r| r.iter().filter(|(t, _)| thread.is_none_or(|w| w == t.as_str())).flat_map(|(_, v)| v.iter().copied()))
        .collect();
    quantile(&mut v, q) as f64
}

/// The one-sided lower bound (level [`LOWER`]) of (agent's pooled p99 − kernel's) when
/// the rounds of each mode are resampled with replacement: how much worse the agent is
/// at least, given how much a p99 moves with which rounds it is made of. Deterministic
/// (a fixed seed), so a run's verdict follows from its data.
fn worse_by_at_least(kernel: &[Latencies], agent: &[Latencies], thread: Option<&str>) -> f64 {
    if kernel.is_empty() || agent.is_empty() {
        return f64::NAN;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x0072_7461_7070);
    let resample = |rounds: &[Latencies], rng: &mut ChaCha8Rng| {
        let n = rounds.len();
        pooled((0..n).map(|_| &rounds[rng.gen_range(0..n)]), thread, 0.99)
    };
    let mut d: Vec<f64> = (0..RESAMPLES).map(|_| resample(agent, &mut rng) - resample(kernel, &mut rng)).collect();
    d.sort_by(f64::total_cmp);
    d[((RESAMPLES - 1) as f64 * LOWER).round() as usize]
}

/// The row: the agent's pooled p99 against the kernel's, failing only if the agent is
/// worse by more than 10% + 50 µs even at the bootstrap's lower bound. The tolerance
/// shown is that margin plus the rounds' allowance (the point difference less its lower
/// bound), so `ours ≤ paper + tolerance` is the verdict.
fn no_worse(id: &str, kernel: &[Latencies], agent: &[Latencies], thread: Option<&str>, why: &str) -> RealRow {
    let (k99, a99) = (pooled(kernel, thread, 0.99), pooled(agent, thread, 0.99));
    let margin = 0.1 * k99 + 50.0;
    let allowance = (a99 - k99 - worse_by_at_least(kernel, agent, thread)).max(0.0);
    at_most(id, k99, margin + allowance, a99, why)
}

pub(super) fn rtapp_video(exe: &Path) -> io::Result<Vec<RealRow>> {
    if Command::new("rt-app").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        eprintln!("real.rtapp_video: skipped: no rt-app (apt-get install rt-app; scripts/test.sh installs it)");
        return Ok(Vec::new());
    }
    let Ok(text) = std::fs::read_to_string(EXAMPLE) else {
        eprintln!("real.rtapp_video: skipped: no {EXAMPLE} (Debian's rt-app package ships it)");
        return Ok(Vec::new());
    };
    let dir = std::env::temp_dir().join(format!("vassal-rtapp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let json = dir.join("video.json");
    let fixed = fix_suspends(&text);
    std::fs::write(&json, &fixed)?;
    // Calibrate once (a kernel run; rt-app's calibration alone took 10-40 s on this VM
    // when other work loaded it), then fix the calibration.
    let out = run_rtapp(exe, &dir, &json, None, 180)?;
    let ns = out
        .lines()
        .find_map(|l| l.split("pLoad = ").nth(1).and_then(|r| r.split("ns").next()).and_then(|n| n.trim().parse::<u64>().ok()))
        .ok_or_else(|| io::Error::other(format!("rt-app printed no pLoad: {out}")))?;
    std::fs::write(&json, set_global(&set_global(&fixed, "calibration", ns), "duration", RUN_S))?;
    // The agent's hard limit: every round of both modes (each run is killed after 60 s).
    let agent = AgentProcess::start(exe, "", (ROUNDS as u64 * 2 * (RUN_S + 5) + 60) as u32)?;
    // rounds[mode][round]: each thread's wake-up latencies in that round (0 kernel, 1 agent).
    let mut rounds: [Vec<Latencies>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (k, sock) in [None, Some(agent.sock.as_str())].into_iter().enumerate() {
            run_rtapp(exe, &dir, &json, sock, 60)?;
            rounds[k].push(wake_latencies(&dir)?);
        }
    }
    let managed_threads = agent.client().ok().and_then(|mut c| c.status().ok()).map(|s| s.managed_threads);
    drop(agent);
    let _ = std::fs::remove_dir_all(&dir);
    let mut rows = vec![baseline("real.rtapp_video.calibration_ns", ns as f64, "rt-app's loop calibration (pLoad), used by every run")];
    let [kernel, agent] = &rounds;
    let threads: BTreeSet<&String> = kernel.iter().flat_map(|r| r.keys()).filter(|t| agent.iter().any(|r| r.contains_key(*t))).collect();
    for t in threads {
        let only = Some(t.as_str());
        let id = |m: &str| format!("real.rtapp_video.{t}.{m}");
        rows.push(baseline(&id("kernel_p50_us"), pooled(kernel, only, 0.5), "kernel default: rt-app's wu_lat p50 (timer expiry to run)"));
        rows.push(baseline(&id("kernel_p99_us"), pooled(kernel, only, 0.99), "kernel default: wu_lat p99"));
        rows.push(baseline(&id("agent_p50_us"), pooled(agent, only, 0.5), "under vassal run (every thread a task of BVT): wu_lat p50"));
        rows.push(no_worse(
            &id("agent_p99_us"),
            kernel,
            agent,
            only,
            "target: p99 no worse than the kernel's in the same run (+10% + 50 us; beyond the rounds' spread: 95% one-sided bootstrap)",
        ));
    }
    rows.push(baseline(
        "real.rtapp_video.all.kernel_p99_us",
        pooled(kernel, None, 0.99),
        "kernel default: wu_lat p99 over all its timer-driven threads",
    ));
    rows.push(no_worse(
        "real.rtapp_video.all.agent_p99_us",
        kernel,
        agent,
        None,
        "target: p99 over all its threads no worse than the kernel's (as above)",
    ));
    if let Some(n) = managed_threads {
        rows.push(baseline(
            "real.rtapp_video.threads_managed_at_end",
            n as f64,
            "threads the agent managed after the last run (0: every process was forgotten)",
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_suspends_get_their_threads_name_and_calibration_is_fixed() {
        let text = "{\n\t\"tasks\" : {\n\t\t\"a\" : {\n\t\t\t\"suspend\",\n\t\t\t\"run\" : 5\n\t\t},\n\t\t\"b\" : {\n\t\t\t\"phases\" : {\n\t\t\t\t\"p\" : {\n\t\t\t\t\t\"suspend\"\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t},\n\t\"global\" : {\n\t\t\"calibration\" : \"CPU0\"\n\t}\n}\n";
        let f = fix_suspends(text);
        assert!(f.contains("\t\t\t\"suspend\" : \"a\",\n"), "{f}");
        assert!(f.contains("\t\t\t\t\t\"suspend\" : \"b\"\n"), "{f}");
        let g = set_global(&f, "calibration", 27);
        assert!(g.contains("\t\t\"calibration\" : 27\n"), "{g}");
        assert!(set_global("\t\t\"duration\" : 6,\n\t\t\"x\" : 1", "duration", 10).starts_with("\t\t\"duration\" : 10,\n"));
    }

    /// Rounds like the video's 30 Hz thread: 300 wakes each, most at 100–190 µs; in a
    /// "coincident" round (`slow`) every tenth waits ~200 µs more.
    fn rounds(slow: &[bool], extra: impl Fn(usize) -> u64) -> Vec<Latencies> {
        slow.iter()
            .map(|&s| {
                let v = (0..300).map(|i| 100 + (i as u64 * 37) % 90 + if s && i % 10 == 0 { 200 } else { 0 } + extra(i)).collect();
                BTreeMap::from([("waker".to_string(), v)])
            })
            .collect()
    }

    #[test]
    fn the_kernel_against_itself_passes_and_a_worse_tail_fails() {
        let k = rounds(&[false, true, false, false, false, false, false, false, false, false], |_| 0);
        // The same kind of rounds, more of them coincident: the plain rule fails it
        // (pooled p99 350 µs against 189 + 69: three coincident rounds against one), the
        // rounds' spread explains it.
        let k2 = rounds(&[true, false, true, false, false, false, false, true, false, false], |_| 0);
        let (p, q) = (pooled(&k, Some("waker"), 0.99), pooled(&k2, Some("waker"), 0.99));
        assert!(q > p + 0.1 * p + 50.0, "plain rule would fail: {p} vs {q}");
        let row = no_worse("x", &k, &k2, Some("waker"), "");
        assert!(row.pass, "{row:?}");
        assert!(no_worse("x", &k, &k, None, "").pass);
        // Every round 400 µs late on 5% of wakes: worse, whatever the rounds.
        let bad = rounds(&[false, true, false, false, true, false, false, false, false, false], |i| if i % 20 == 3 { 400 } else { 0 });
        let row = no_worse("x", &k, &bad, Some("waker"), "");
        assert!(!row.pass, "{row:?}");
        let w = worse_by_at_least(&k, &bad, None);
        assert!(w > 200.0, "{w}");
    }
}
