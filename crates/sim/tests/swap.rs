//! Swapping in the simulator (paper 004 §2, §4.2–4.3): the `[memory]` scenario section and
//! its errors, and whole runs checked against the engine's invariants after every event.

use vassal_sim::scenario::parse_scenario;
use vassal_sim::{Report, Sim};

fn run_checked(text: &str) -> Report {
    let sc = parse_scenario(text, "t.toml").unwrap();
    let mut sim = Sim::new(sc).unwrap();
    sim.set_checks(true);
    sim.run().unwrap()
}

fn err(text: &str) -> String {
    parse_scenario(text, "bad.toml").unwrap_err().to_string()
}

const MEM: &str = "[memory]\nsize_kb = 100\nswap_seek = \"10ms\"\nswap_transfer = \"1ms\"\n";

fn with_memory(policy: &str, swap_in: &str, swap_out: &str, tasks: &str, until: &str) -> String {
    format!(
        "until = \"{until}\"\n[machine]\ncpus = 1\n[default]\npolicy = \"{policy}\"\n{MEM}swap_in = \"{swap_in}\"\nswap_out = \"{swap_out}\"\n{tasks}"
    )
}

#[test]
fn bad_memory_values_are_refused_where_they_are() {
    let base = "until = \"1s\"\n[machine]\ncpus = 1\n";
    let task = "[[task]]\nname = \"a\"\nsize_kb = 10\nbehaviour = { kind = \"cpu\" }\n";
    assert_eq!(
        err(&format!("{base}{MEM}swap_in = \"fastest\"\n{task}")),
        "bad.toml:8:11: unknown swap_in 'fastest'; expected one of \"standard\", \"priority\""
    );
    assert_eq!(
        err(&format!("{base}{MEM}swap_out = \"lru\"\n{task}")),
        "bad.toml:8:12: unknown swap_out 'lru'; expected one of \"standard\", \"mouse\""
    );
    assert_eq!(
        err(&format!("{base}{MEM}placement = \"worst_fit\"\n{task}")),
        "bad.toml:8:13: unknown placement 'worst_fit'; expected one of \"first_fit\", \"best_fit\""
    );
    assert_eq!(
        err(&format!("{base}[memory]\nsize_kb = 0\nswap_seek = \"10ms\"\nswap_transfer = \"1ms\"\n{task}")),
        "bad.toml:5:11: memory size_kb must be at least 1, found 0"
    );
    assert_eq!(
        err(&format!("{base}[memory]\nsize_kb = 100\nswap_seek = \"10\"\nswap_transfer = \"1ms\"\n{task}")),
        "bad.toml:6:13: duration \"10\" has no unit; a unit is needed, e.g. \"10ms\" (units: ns, us, ms, s)"
    );
    assert!(err(&format!("{base}[memory]\nsize_kb = 100\nswap_seek = \"10ms\"\n{task}")).contains("swap_transfer"));
    // sizes
    assert_eq!(
        err(&format!("{base}{MEM}[[task]]\nname = \"a\"\nbehaviour = {{ kind = \"cpu\" }}\n")),
        "bad.toml:9:8: task 'a' needs size_kb (its image size in KB) when there is a [memory] section"
    );
    assert_eq!(
        err(&format!("{base}{MEM}[[task]]\nname = \"a\"\nsize_kb = 101\nbehaviour = {{ kind = \"cpu\" }}\n")),
        "bad.toml:10:11: image size 101 KB is out of range; expected 1 to the memory size (100 KB)"
    );
    assert_eq!(
        err(&format!("{base}{MEM}[[task]]\nname = \"a\"\ncount = 2\nsize_kb = [10, 0]\nbehaviour = {{ kind = \"cpu\" }}\n")),
        "bad.toml:11:11: image size 0 KB is out of range; expected 1 to the memory size (100 KB)"
    );
    assert_eq!(
        err(&format!("{base}{MEM}[[task]]\nname = \"a\"\nsize_kb = []\nbehaviour = {{ kind = \"cpu\" }}\n")),
        "bad.toml:10:11: size_kb list is empty; expected one or more sizes in KB"
    );
    assert_eq!(
        err(&format!("{base}[[task]]\nname = \"a\"\nsize_kb = 10\nbehaviour = {{ kind = \"cpu\" }}\n")),
        "bad.toml:6:11: size_kb needs a [memory] section (main memory and the swap device)"
    );
    assert!(err(&format!("{base}{MEM}size = 3\n{task}")).contains("unknown key `size`"));
    // phases
    let script = |p: &str| format!("{base}[[task]]\nname = \"a\"\nbehaviour = {{ kind = \"script\", phases = [{p}] }}\n");
    assert_eq!(
        err(&script("{ run = \"1ms\" }, { times = 0 }")),
        "bad.toml:6:69: times must be at least 1 (the phases before it run that many times in all), found 0"
    );
    assert!(err(&script("{ terminal = \"-1s\" }")).contains("negative"));
}

#[test]
fn a_count_group_takes_its_sizes_in_turn() {
    let sc = parse_scenario(
        &with_memory("fb", "standard", "standard", "[[task]]\nname = \"a\"\ncount = 3\nsize_kb = [24, 40]\nbehaviour = { kind = \"cpu\" }\n[[task]]\nname = \"b\"\nsize_kb = 7\nbehaviour = { kind = \"cpu\" }\n", "1s"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(sc.memory.unwrap().sizes, vec![24, 40, 24, 7]);
}

#[test]
fn what_does_not_fit_is_swapped_in_turn_and_never_runs_while_out() {
    // Three 40 KB hogs in 100 KB: one is always out. Each swap moves 40 KB in 10 + 40 ms.
    let tasks = "[[task]]\nname = \"hog\"\ncount = 3\nsize_kb = 40\nbehaviour = { kind = \"cpu\" }\n";
    for swap_out in ["standard", "mouse"] {
        let r = run_checked(&with_memory("fb", "standard", swap_out, tasks, "20s"));
        let k = &r.kernel;
        // The 2 s minimum residence paces the rotation: at most one swap-out per second
        // per resident image, and each swap-in follows a swap-out.
        assert!(k.swap_outs >= 5 && k.swap_outs <= 20, "{swap_out}: {} swap-outs", k.swap_outs);
        assert!(k.swap_ins + 1 >= k.swap_outs && k.swap_ins <= k.swap_outs + 1, "{swap_out}: {k:?}");
        // every hog gets CPU time in turn
        for t in &r.tasks {
            assert!(t.cpu_ns > 2_000_000_000, "{swap_out}: {} ran only {} ns", t.name, t.cpu_ns);
        }
        // the CPU never idles: two hogs are always in memory
        assert_eq!(k.swap_idle_ns, 0, "{swap_out}");
        assert_eq!(k.images.iter().map(|m| m.swap_outs).sum::<u64>(), k.swap_outs);
    }
}

#[test]
fn memory_that_holds_everyone_never_swaps() {
    let tasks = "[[task]]\nname = \"hog\"\ncount = 2\nsize_kb = 50\nbehaviour = { kind = \"cpu\" }\n";
    let r = run_checked(&with_memory("unix", "standard", "standard", tasks, "5s"));
    assert_eq!((r.kernel.swap_ins, r.kernel.swap_outs, r.kernel.swapper_runs), (0, 0, 0));
}

/// Paper 004 §6, Figure 7 in small: an interactive task reading the terminal beside CPU
/// hogs that do not all fit. Priority swap-in brings it back at once after each wait;
/// the standard one takes whoever has been out longest.
#[test]
fn priority_swap_in_serves_the_interactive_task_first() {
    let tasks = "[[task]]\nname = \"ia\"\nsize_kb = 10\nparams = { wake_boost = 6 }\nbehaviour = { kind = \"script\", phases = [{ terminal = \"1s\" }, { run = \"5ms\" }, { times = 10 }] }\n[[task]]\nname = \"hog\"\ncount = 8\nsize_kb = 45\nbehaviour = { kind = \"cpu\" }\n";
    let exit = |swap_in: &str| {
        let r = run_checked(&with_memory("fb", swap_in, "standard", tasks, "120s"));
        r.kernel.images.iter().find(|m| m.name == "ia").unwrap().exit_ns.expect("ia finishes") as f64 / 1e9
    };
    let (pri, std) = (exit("priority"), exit("standard"));
    // Alone it would take 10 × 1.005 s. Priority: each wake costs at most a swap-out and
    // a swap-in and the wait for a victim's 2 s residence.
    assert!(pri < 10.05 + 10.0 * 2.2, "priority swap-in: {pri} s");
    assert!(std > pri * 1.5, "standard {std} s vs priority {pri} s");
}

/// §4.1: real-time FB levels are never swapped out.
#[test]
fn a_real_time_fb_task_stays_in_memory() {
    let tasks = "[[task]]\nname = \"rt\"\nsize_kb = 40\nparams = { base = 16 }\nbehaviour = { kind = \"script\", phases = [{ terminal = \"500ms\" }, { run = \"1ms\" }, { times = 30 }] }\n[[task]]\nname = \"hog\"\ncount = 3\nsize_kb = 40\nbehaviour = { kind = \"cpu\" }\n";
    for swap_out in ["standard", "mouse"] {
        let r = run_checked(&with_memory("fb", "priority", swap_out, tasks, "20s"));
        let rt = r.kernel.images.iter().find(|m| m.name == "rt").unwrap();
        assert_eq!(rt.swap_outs, 0, "{swap_out}");
        assert!(r.kernel.swap_outs > 0, "{swap_out}: the hogs still swap");
    }
}

#[test]
fn kernel_counts_system_calls_and_dispatches() {
    // One task: 10 × (run, sleep) then exit: 10 sleeps + 1 exit = 11 system calls, and a
    // dispatch after each sleep plus the first; it exits when its 10th sleep ends, 20 ms.
    let tasks = "[[task]]\nname = \"a\"\nsize_kb = 10\nbehaviour = { kind = \"script\", phases = [{ run = \"1ms\" }, { sleep = \"1ms\" }, { times = 10 }] }\n";
    let r = run_checked(&with_memory("fb", "standard", "standard", tasks, "1s"));
    assert_eq!(r.kernel.syscalls, 11);
    assert_eq!(r.kernel.dispatches, 10);
    assert_eq!(r.kernel.last_exit_ns, Some(20_000_000));
    let table = r.to_table();
    assert!(table.contains("kernel: 10 dispatches, 11 system calls, 0 swap-ins, 0 swap-outs"), "{table}");
    assert!(r.to_json().contains("\"swap_idle_ns\": 0"));
}

/// Random scenarios with memory — every policy kind that runs best-effort tasks, both
/// placements and all four strategy pairs, two CPUs sometimes, tasks that run, sleep,
/// wait on the terminal, yield, exit early — run with the invariants checked after every
/// event (the swapper's map agrees with the dispatcher, no swapped-out task runs, no
/// exited task holds memory).
#[test]
fn random_scenarios_with_memory_keep_the_invariants() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2024);
    let policies = ["fb", "unix", "rr", "bvt", "linux22", "wrr"];
    let (mut swapped, mut grown) = (0, 0);
    for case in 0..150 {
        let policy = policies[case % policies.len()];
        let mem = rng.gen_range(40..200);
        let u_area = rng.gen_range(0..3);
        let cpus = if rng.gen_bool(0.3) { 2 } else { 1 };
        let placement = if rng.gen_bool(0.5) { "first_fit" } else { "best_fit" };
        let swap_in = if rng.gen_bool(0.5) { "standard" } else { "priority" };
        let swap_out = if rng.gen_bool(0.5) { "standard" } else { "mouse" };
        let mut text = format!(
            "until = \"30s\"\nseed = {case}\n[machine]\ncpus = {cpus}\n[default]\npolicy = \"{policy}\"\n[memory]\nsize_kb = {mem}\nplacement = \"{placement}\"\nswap_seek = \"{}ms\"\nswap_transfer = \"{}us\"\nswap_cpu = \"{}us\"\nmin_resident = \"{}ms\"\nswap_in = \"{swap_in}\"\nswap_out = \"{swap_out}\"\nu_area_kb = {u_area}\nnproc = 20\nscan_entry = \"{}us\"\ndma_steal = {}\nmin_swapped_out = \"{}ms\"\nwake_on_ready = {}\n",
            rng.gen_range(0..50),
            rng.gen_range(0..3000),
            rng.gen_range(0..2000),
            rng.gen_range(0..3000),
            rng.gen_range(0..30),
            rng.gen_range(0..=10) as f64 / 10.0,
            rng.gen_range(0..4000),
            rng.gen_bool(0.5),
        );
        // Shared texts (V7 text.c) and a copy cost for growth moves, half the time.
        let texts = rng.gen_bool(0.5);
        if texts {
            text += &format!(
                "texts = {{ p = {}, q = {} }}\ncopy_per_kb = \"{}us\"\n",
                rng.gen_range(1..mem / 4),
                rng.gen_range(1..mem / 4),
                rng.gen_range(0..100)
            );
        }
        for t in 0..rng.gen_range(1..12) {
            let size = rng.gen_range(1..=mem - u_area);
            let mut phases = vec![format!("{{ run = \"{}ms\" }}", rng.gen_range(1..50))];
            for _ in 0..rng.gen_range(0..5) {
                phases.push(match rng.gen_range(0..8) {
                    6 | 7 => format!(
                        "{{ {} = {} }}",
                        if rng.gen_bool(0.5) { "grow" } else { "grow_once" },
                        rng.gen_range(1..mem / 3) as i64 * if rng.gen_bool(0.3) { -1 } else { 1 }
                    ),
                    0 | 1 => format!("{{ run = {{ exp = \"{}ms\" }} }}", rng.gen_range(1..200)),
                    2 => format!("{{ sleep = {{ uniform = [\"1ms\", \"{}ms\"] }} }}", rng.gen_range(2..300)),
                    3 => format!("{{ terminal = \"{}ms\" }}", rng.gen_range(1..3000)),
                    4 => format!(
                        "{{ io = {{ disk = \"d{}\", time = {{ uniform = [\"1ms\", \"{}ms\"] }} }} }}",
                        rng.gen_range(0..2),
                        rng.gen_range(2..200)
                    ),
                    _ => "{ yield = true }".to_string(),
                });
            }
            phases.push(format!("{{ times = {} }}", rng.gen_range(1..50)));
            let repeat = rng.gen_bool(0.5);
            if texts && rng.gen_bool(0.7) {
                text += if rng.gen_bool(0.5) { "[[task]]\ntext = \"p\"\n" } else { "[[task]]\ntext = \"q\"\n" };
            } else {
                text += "[[task]]\n";
            }
            text += &format!(
                "name = \"t{t}\"\nstart = \"{}ms\"\nsize_kb = {size}\nparams = {{ base = {} }}\nbehaviour = {{ kind = \"script\", repeat = {repeat}, phases = [{}] }}\n",
                rng.gen_range(0..5000),
                rng.gen_range(0..20),
                phases.join(", ")
            );
        }
        let sc = parse_scenario(&text, "random.toml").unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let mut sim = Sim::new(sc).unwrap();
        sim.set_checks(true);
        let r = sim.run().unwrap_or_else(|e| panic!("case {case}: {e}\n{text}"));
        let k = &r.kernel;
        assert!(k.swap_ins <= k.swap_outs + r.tasks.len() as u64, "case {case}: {k:?}");
        swapped += (k.swap_outs > 0) as u32;
        grown += (k.growth_swaps > 0) as u32;
    }
    assert!(swapped > 50, "only {swapped} of 150 cases swapped");
    assert!(grown > 10, "only {grown} of 150 cases swapped to grow");
}

fn exit_ms(r: &Report, name: &str) -> u64 {
    r.kernel.images.iter().find(|m| m.name == name).and_then(|m| m.exit_ns).expect("it exits") / 1_000_000
}

/// A drive serves one transfer at a time, first come first served (V7 raw I/O: one
/// buffer per drive); everyone fits in memory, so every task may take its turn.
#[test]
fn a_drive_serves_one_transfer_at_a_time() {
    let r = run_checked(
        "until = \"1s\"\n[machine]\ncpus = 2\n[memory]\nsize_kb = 1000\nswap_seek = \"10ms\"\nswap_transfer = \"1ms\"\n[[task]]\nname = \"a\"\ncount = 3\nsize_kb = 10\nbehaviour = { kind = \"script\", phases = [{ io = { disk = \"rl1\", time = \"10ms\" } }] }\n[[task]]\nname = \"b\"\nsize_kb = 10\nbehaviour = { kind = \"script\", phases = [{ io = { disk = \"rl2\", time = \"10ms\" } }] }\n",
    );
    let mut ends: Vec<u64> = ["a.0", "a.1", "a.2"].iter().map(|n| exit_ms(&r, n)).collect();
    ends.sort();
    assert_eq!(ends, [10, 20, 30], "three transfers queue on rl1");
    assert_eq!(exit_ms(&r, "b"), 10, "rl2 is another drive");
    let d: Vec<(&str, u64, u64)> = r.kernel.disks.iter().map(|d| (d.name.as_str(), d.served, d.busy_ns / 1_000_000)).collect();
    assert_eq!(d, [("rl1", 3, 30), ("rl2", 1, 10)]);
}

/// A task whose transfer is under way is locked in memory (V7 physio's SLOCK): here the
/// only image that could make room is transferring for 5 s, so the swapped-out hog waits
/// for it; with a plain sleep of the same length it comes in after the 2 s residence.
#[test]
fn a_task_in_transfer_is_locked_in_memory() {
    let tasks = |block: &str| {
        format!(
            "[[task]]\nname = \"io\"\nsize_kb = 60\nbehaviour = {{ kind = \"script\", phases = [{{ run = \"1ms\" }}, {block}, {{ run = \"1s\" }}] }}\n[[task]]\nname = \"hog\"\nsize_kb = 60\nbehaviour = {{ kind = \"cpu\" }}\n"
        )
    };
    let hog_cpu = |block: &str| {
        let r = run_checked(&with_memory("fb", "standard", "standard", &tasks(block), "6s"));
        r.tasks.iter().find(|t| t.name == "hog").unwrap().cpu_ns as f64 / 1e9
    };
    let locked = hog_cpu("{ io = { disk = \"rl1\", time = \"5s\" } }");
    let free = hog_cpu("{ sleep = \"5s\" }");
    assert!(locked < 1.0, "the hog waited for the transfer: {locked} s of CPU");
    assert!(free > 2.5, "the sleeper went out after 2 s: {free} s of CPU");
}

/// A swapped-out task queued on a drive cannot take its turn: the drive serves the next
/// task in memory, and the swapped-out one is brought in to take the buffer when the
/// drive is free (V7 wakes every process sleeping on the buffer).
#[test]
fn a_queued_task_that_is_swapped_out_is_brought_in_to_take_its_turn() {
    let tasks = "[[task]]\nname = \"w\"\ncount = 4\nsize_kb = 40\nbehaviour = { kind = \"script\", phases = [{ run = { exp = \"30ms\" } }, { io = { disk = \"rl1\", time = { uniform = [\"10ms\", \"50ms\"] } } }, { times = 100 }] }\n";
    for swap_out in ["standard", "mouse"] {
        let r = run_checked(&with_memory("fb", "priority", swap_out, tasks, "200s"));
        assert_eq!(r.kernel.disks[0].served, 400, "{swap_out}: every transfer done");
        assert_eq!(r.kernel.images.iter().filter(|m| m.exit_ns.is_some()).count(), 4, "{swap_out}");
        assert!(r.kernel.swap_outs > 0, "{swap_out}: it swapped");
    }
}

/// The swap scheduler's CPU: its transfers' DMA steals `dma_steal` of each data phase
/// (not the seek), and each decision searches entries at `scan_entry` each.
#[test]
fn swapping_costs_the_cpu_its_stolen_cycles_and_searches() {
    // x (50 KB) waits on the terminal; y (60 KB) cannot come in until x goes out:
    // x out (10 + 50 ms), y in (10 + 60 ms).
    let tasks = "[[task]]\nname = \"x\"\nsize_kb = 50\nbehaviour = { kind = \"script\", phases = [{ terminal = \"100s\" }] }\n[[task]]\nname = \"y\"\nsize_kb = 60\nbehaviour = { kind = \"cpu\" }\n";
    let cost = |extra: &str| {
        let text = with_memory("fb", "standard", "standard", tasks, "2s").replacen("[[task]]", &format!("{extra}[[task]]"), 1);
        let r = run_checked(&text);
        assert_eq!((r.kernel.swap_outs, r.kernel.swap_ins), (1, 1));
        r.kernel.swap_cpu_ns
    };
    assert_eq!(cost(""), 0);
    // half of 50 ms + half of 60 ms
    assert_eq!(cost("dma_steal = 0.5\n"), 55_000_000);
    // three runs (swap x out; swap y in; nothing more to do), standard searches of the
    // 10-entry table: 2 + 1 + 1 of them
    assert_eq!(cost("nproc = 10\nscan_entry = \"1us\"\n"), 40_000);
}

/// V7's `sched()` swaps a ready image out only for one that has been out 3 s (`outage
/// >= 3`): the rotation of hogs that do not fit slows down.
#[test]
fn a_ready_image_goes_out_only_for_one_out_long_enough() {
    let tasks = "[[task]]\nname = \"hog\"\ncount = 3\nsize_kb = 40\nbehaviour = { kind = \"cpu\" }\n";
    let outs = |extra: &str| {
        let text = with_memory("fb", "standard", "standard", tasks, "30s").replacen("[[task]]", &format!("{extra}[[task]]"), 1);
        run_checked(&text).kernel.swap_outs
    };
    let (v7, free) = (outs("min_swapped_out = \"3s\"\n"), outs(""));
    assert!(v7 < free, "{v7} swap-outs with the 3 s rule, {free} without");
}

#[test]
fn bad_texts_and_growth_are_refused_where_they_are() {
    let base = "until = \"1s\"\n[machine]\ncpus = 1\n";
    let task = "[[task]]\nname = \"a\"\nsize_kb = 10\ntext = \"ed\"\nbehaviour = { kind = \"cpu\" }\n";
    assert_eq!(
        err(&format!("{base}{MEM}texts = {{ ed = 0 }}\n{task}")),
        "bad.toml:8:16: text 'ed' size must be from 1 to the memory size (100 KB), found 0"
    );
    assert_eq!(
        err(&format!("{base}{MEM}texts = {{ sh = 5 }}\n{task}")),
        "bad.toml:12:8: text 'ed' is not in [memory] texts; expected one of sh"
    );
    assert_eq!(err(&format!("{base}{MEM}{task}")), "bad.toml:11:8: text 'ed' is not in [memory] texts; none is defined");
    assert_eq!(
        err(&format!("{base}[[task]]\nname = \"a\"\ntext = \"ed\"\nbehaviour = {{ kind = \"cpu\" }}\n")),
        "bad.toml:6:8: text needs a [memory] section with the shared texts"
    );
    assert!(err(&format!("{base}{MEM}copy_per_kb = \"3\"\n{task}")).contains("has no unit"));
    let script =
        |p: &str| format!("{base}{MEM}[[task]]\nname = \"a\"\nsize_kb = 10\nbehaviour = {{ kind = \"script\", phases = [{p}] }}\n");
    assert_eq!(err(&script("{ grow = 0 }")), "bad.toml:11:51: grow is a change of the image in KB, not 0 (negative: shrink), found 0");
    assert!(err(&script("{ grow = 4, run = \"1ms\" }")).contains("one key"));
}

/// Two tasks running one program share its text: 40 + 40 KB of images and one 20 KB
/// text fill 100 KB exactly, so nothing swaps; with a text each they do not fit.
#[test]
fn a_shared_text_is_loaded_once() {
    let tasks = |a: &str, b: &str| {
        format!("[[task]]\nname = \"a\"\nsize_kb = 40\ntext = \"{a}\"\nbehaviour = {{ kind = \"cpu\" }}\n[[task]]\nname = \"b\"\nsize_kb = 40\ntext = \"{b}\"\nbehaviour = {{ kind = \"cpu\" }}\n")
    };
    let run = |a: &str, b: &str| {
        let text =
            with_memory("fb", "standard", "standard", &tasks(a, b), "10s").replacen("[[task]]", "texts = { p = 20, q = 20 }\n[[task]]", 1);
        run_checked(&text).kernel
    };
    let shared = run("p", "p");
    assert_eq!((shared.swap_ins, shared.swap_outs), (0, 0));
    let apart = run("p", "q");
    assert!(apart.swap_outs > 0 && apart.swap_ins > 0, "{apart:?}");
}

/// A task that grows with no hole for its new size swaps itself out (V7 `expand()`) and
/// comes back at the new size: each of the hogs' growths is counted, and every one ends.
#[test]
fn a_growing_image_swaps_itself_out_and_comes_back_bigger() {
    // 100 KB: a (30 KB) and b (30 KB) fit; a grows by 50 KB: 80 KB needs the whole
    // memory but b's: a swaps itself out, then b must go for a to come back.
    let tasks = "[[task]]\nname = \"a\"\nsize_kb = 30\nbehaviour = { kind = \"script\", phases = [{ run = \"100ms\" }, { grow = 50 }, { run = \"100ms\" }] }\n[[task]]\nname = \"b\"\nsize_kb = 30\nbehaviour = { kind = \"script\", phases = [{ sleep = \"3s\" }] }\n";
    let r = run_checked(&with_memory("fb", "standard", "standard", tasks, "20s"));
    let k = &r.kernel;
    assert_eq!(k.growth_swaps, 1, "{k:?}");
    let a = k.images.iter().find(|m| m.name == "a").unwrap();
    assert_eq!((a.swap_outs, a.swap_ins), (1, 1), "{a:?}");
    // a's 30 KB written (10 + 30 ms); b (asleep, in 2 s) goes (10 + 30 ms); a's 80 KB
    // read (10 + 80 ms): a finishes its 200 ms of CPU after those.
    let end = a.exit_ns.unwrap() as f64 / 1e9;
    assert!(end > 0.2 + 0.04 && end < 3.0, "a ended at {end} s");
    assert_eq!(r.tasks.iter().find(|t| t.name == "a").unwrap().cpu_ns, 200_000_000);
}

/// `grow_once` in a loop grows the image the first time only (V7 `malloc` never gives
/// its `sbrk` back); `grow` in a loop grows every pass.
#[test]
fn a_once_only_growth_in_a_loop_grows_once() {
    let tasks = |key: &str| {
        format!("[[task]]\nname = \"a\"\nsize_kb = 10\nbehaviour = {{ kind = \"script\", phases = [{{ {key} = 5 }}, {{ run = \"10ms\" }}, {{ times = 4 }}] }}\n")
    };
    let size = |key: &str| {
        let r = run_checked(&with_memory("fb", "standard", "standard", &tasks(key), "2s"));
        (r.kernel.images[0].size_kb, r.kernel.syscalls)
    };
    // 4 passes: 15 KB and 1 sbrk (+ the exit), or 30 KB and 4 sbrks.
    assert_eq!(size("grow_once"), (15, 2));
    assert_eq!(size("grow"), (30, 5));
}
