//! The `player` behaviour's per-frame read on a shared drive (BVT paper 001 §4.1: the
//! player's late frames "likely due to I/O conflicts" with the greps): the read queues
//! first come, first served behind the other tasks' transfers on the same drive
//! (`crate::disk`, the drive paper 004's model uses), and the paced player slows down.

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

/// A 60 fps player that reads 2 ms and decodes 1 ms per frame, alone or with `greps`
/// tasks that each run 1 ms of CPU between 10 ms transfers on the same drive; 2 s, one CPU
/// shared round robin.
fn player_with(greps: usize) -> Report {
    let mut text = String::from(
        "until = \"2s\"\n[machine]\ncpus = 1\n[default]\npolicy = \"rr\"\n[[task]]\nname = \"mpeg\"\nbehaviour = { kind = \"player\", period = \"16666667ns\", exec = \"1ms\", late_after = \"30ms\", disk = \"hda\", read = \"2ms\" }\n",
    );
    if greps > 0 {
        text.push_str(&format!(
            "[[task]]\nname = \"grep\"\ncount = {greps}\nbehaviour = {{ kind = \"io\", run = \"1ms\", sleep = \"10ms\", disk = \"hda\" }}\n"
        ));
    }
    run_checked(&text)
}

#[test]
fn a_player_alone_reads_and_keeps_its_frame_rate() {
    let r = player_with(0);
    let mpeg = r.task("mpeg").unwrap();
    // 2 ms read + 1 ms decode fit a 16.7 ms period: 119-120 frames in 2 s, none late.
    assert!((119..=120).contains(&mpeg.response.count), "{}", mpeg.response.count);
    assert_eq!(mpeg.jobs_missed, 0);
    let hda = r.kernel.disks.iter().find(|d| d.name == "hda").unwrap();
    assert_eq!(hda.served, mpeg.response.count + mpeg.jobs_pending, "one read per frame");
}

#[test]
fn a_player_read_queues_behind_the_greps_transfers() {
    let r = player_with(3);
    let mpeg = r.task("mpeg").unwrap();
    // The drive is saturated (3 greps want 10 ms of it per 11 ms): first come, first served,
    // each of the player's reads waits for the three greps' transfers queued before it,
    // so a frame takes 3 x 10 + 2 ms of disk: 30-34 ms apart, not 16.7 ms.
    let frames = mpeg.response.count;
    assert!((2000 / 34..=2000 / 30 + 1).contains(&frames), "{frames} frames: not paced by the drive's queue");
    let hda = r.kernel.disks.iter().find(|d| d.name == "hda").unwrap();
    assert!(hda.busy_ns > 1_900_000_000, "the drive is busy almost all the time: {}", hda.busy_ns);
    // Each grep gets a third of the drive's transfers besides the player's.
    let greps: u64 = (0..3).map(|k| r.task(&format!("grep.{k}")).unwrap().cpu_ns).sum();
    assert!(greps < 3 * 2_000_000_000 / 11, "greps are held back by the queue too: {greps} ns of CPU");
}

#[test]
fn a_player_read_needs_its_drive_and_the_drive_a_read() {
    let base = "until = \"1s\"\n[machine]\ncpus = 1\n[[task]]\nname = \"p\"\n";
    let e = err(&format!(
        "{base}behaviour = {{ kind = \"player\", period = \"10ms\", exec = \"1ms\", late_after = \"5ms\", read = \"2ms\" }}\n"
    ));
    assert!(e.contains("bad.toml:6:") && e.contains("`read` needs `disk`"), "{e}");
    let e = err(&format!(
        "{base}behaviour = {{ kind = \"player\", period = \"10ms\", exec = \"1ms\", late_after = \"5ms\", disk = \"hda\" }}\n"
    ));
    assert!(e.contains("bad.toml:6:") && e.contains("`disk` needs `read`"), "{e}");
    let e = err(&format!(
        "{base}behaviour = {{ kind = \"player\", period = \"10ms\", exec = \"1ms\", late_after = \"5ms\", disk = \"hda\", read = \"-2ms\" }}\n"
    ));
    assert!(e.contains("bad.toml:6:"), "{e}");
}

#[test]
fn an_empty_drive_name_is_refused_where_it_is() {
    let base = "until = \"1s\"\n[machine]\ncpus = 1\n[[task]]\nname = \"p\"\n";
    let e = err(&format!(
        "{base}behaviour = {{ kind = \"player\", period = \"10ms\", exec = \"1ms\", late_after = \"5ms\", disk = \"\", read = \"2ms\" }}\n"
    ));
    assert!(e.contains("bad.toml:6:") && e.contains("disk needs a drive's name"), "{e}");
    let e = err(&format!("{base}behaviour = {{ kind = \"io\", run = \"1ms\", sleep = \"2ms\", disk = \"\" }}\n"));
    assert!(e.contains("bad.toml:6:") && e.contains("disk needs a drive's name"), "{e}");
}
