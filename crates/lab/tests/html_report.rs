//! The HTML reports (`vassal sim --report`, `vassal repro --report`; docs/report.md):
//! self-contained, every reproduced row and figure present, BVT's virtual times recorded
//! as the policy keeps them, and the page renders in headless Chromium (skipped, with a
//! message, when Chromium is not installed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vassal_lab::expect::ExperimentRun;
use vassal_lab::html::{repro_page, sim_page};
use vassal_lab::repro::{find_experiments, run_experiment_full};
use vassal_sim::scenario::load_scenario;
use vassal_sim::{Sim, Trace};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn traced(file: &str) -> (vassal_sim::model::Scenario, vassal_sim::Report, Trace) {
    let sc = load_scenario(&root().join(file)).unwrap();
    let mut sim = Sim::with_registry(sc.clone(), &vassal_lab::workloads::registry()).unwrap();
    sim.record_trace();
    let (r, t) = sim.run_traced().unwrap();
    (sc, r, t)
}

fn all_experiments() -> (PathBuf, Vec<ExperimentRun>) {
    let dir = root().join("experiments");
    let files = find_experiments(&dir, &[]).unwrap();
    assert!(!files.is_empty());
    let runs = files.iter().map(|f| run_experiment_full(f, true).unwrap()).collect();
    (dir, runs)
}

/// Nothing that would load a resource: no script, stylesheet link, image, frame or
/// object, no `src`, no `url(...)`, no `@import`, no http(s) reference in an attribute.
fn assert_self_contained(page: &str) {
    let lower = page.to_ascii_lowercase();
    for bad in
        ["<script", "<link", "<img", "<iframe", "<object", "<embed", "src=", "url(http", "@import", "=\"http:", "=\"https:", "='http"]
    {
        assert!(!lower.contains(bad), "the page contains {bad:?}");
    }
    assert!(!lower.contains("http://") && !lower.contains("https://"), "the page references a URL");
    assert_eq!(page.matches("<svg").count(), page.matches("</svg>").count());
}

#[test]
fn sim_page_is_self_contained_and_has_the_figures() {
    let (sc, r, t) = traced("experiments/bvt/fig3.toml");
    let page = sim_page(&sc, &r, &t);
    assert_self_contained(&page);
    for want in [
        "CPU timeline, whole run",
        "CPU timeline, first 300 ms",
        "Share of the CPU",
        "Dispatch latency",
        "Actual virtual time A_i",
        "Effective virtual time E_i",
    ] {
        assert!(page.contains(want), "missing {want}");
    }
    for task in &sc.tasks {
        assert!(page.contains(&task.name));
    }
    // The task table: the text report's columns and cells (one table for both).
    let table = r.task_table();
    let text = r.to_table();
    for c in &table.columns {
        assert!(page.contains(&format!(">{}</th>", c.head)) && text.contains(c.head), "column {} missing", c.head);
    }
    for row in &table.rows {
        let cells: String =
            row.iter().zip(&table.columns).map(|(v, c)| format!("<td{}>{v}</td>", if c.numeric { " class=num" } else { "" })).collect();
        assert!(page.contains(&format!("<tr>{cells}</tr>")), "row {} missing", row[0]);
    }
    // A policy without virtual times: no virtual-time plots.
    let (sc, r, t) = traced("experiments/baselines/wrr-weights.toml");
    assert!(t.vtimes.is_empty());
    let page = sim_page(&sc, &r, &t);
    assert_self_contained(&page);
    assert!(!page.contains("virtual time A_i"));
}

#[test]
fn repro_page_shows_every_row_beside_the_paper() {
    let (dir, runs) = all_experiments();
    let page = repro_page(&runs, &dir);
    assert_self_contained(&page);
    for run in &runs {
        let rel = run.path.strip_prefix(&dir).unwrap().to_string_lossy().replace('\\', "/");
        assert!(page.contains(&rel), "experiment {rel} missing");
        for (e, row) in run.expects.iter().zip(&run.rows) {
            // the row: id, metric, paper, ours, in that order in one table row
            let num = vassal_lab::fmt::num;
            let cells = format!(
                "<td>{}</td><td>{}</td><td class=num>{}</td><td class=num>{}</td>",
                row.id,
                e.metric,
                num(row.paper),
                num(row.ours)
            );
            assert!(page.contains(&cells), "row {} missing: {cells}", row.id);
        }
        if run.run.is_some() {
            assert!(page.contains(&format!("id=\"e-{}\"", rel.replace(|c: char| !c.is_ascii_alphanumeric(), "-"))));
        }
    }
    // Every sweep's curves: one plot per metric it lists (paper 004 Figures 3-7, paper
    // 001 Figures 5-8), each on the page.
    for name in ["unix/throughput.toml", "unix/response.toml", "dbs/fig5.toml", "dbs/fig6-8.toml"] {
        let run = runs.iter().find(|r| r.path.ends_with(name)).unwrap_or_else(|| panic!("{name} missing"));
        assert!(run.run.is_none() && !run.plots.is_empty(), "{name} has no plots");
        for p in &run.plots {
            assert!(p.starts_with("<svg") && (p.contains("<path")), "{name}: not a line plot");
            assert!(page.contains(p.as_str()), "{name}: a plot is not on the page");
        }
    }
    // Every BVT figure's virtual-time plot: Figures 1-4 simulate under bvt.
    for fig in ["fig1", "fig2", "fig3", "fig4"] {
        let run = runs.iter().find(|r| r.path.ends_with(format!("bvt/{fig}.toml"))).unwrap();
        assert!(!run.run.as_ref().unwrap().trace.vtimes.is_empty(), "{fig} has no virtual times");
    }
    let verdicts = ["<td>pass</td>", "<td>DIFFERS</td>", "<td>INCONSISTENT</td>", "<td>FAIL</td>"]
        .iter()
        .map(|v| page.matches(v).count())
        .sum::<usize>();
    assert_eq!(verdicts, runs.iter().map(|r| r.rows.len()).sum::<usize>());
}

/// Figure 3 (paper 001 §2.2): the warped player's E_i is its A_i less W_i = 50 ms while it
/// runs warped; the others' E_i is their A_i. Figure 2 (§2.1): gcc, waking after 15 mcu,
/// gets A = max(A, SVT) = bigsim's A, the only runnable task's.
#[test]
fn virtual_times_are_the_policys() {
    let (sc, _, t) = traced("experiments/bvt/fig3.toml");
    let idx = |name: &str| sc.tasks.iter().position(|x| x.name == name).unwrap();
    let mpeg = idx("f3_mpeg");
    let warped: Vec<_> = t.vtimes.iter().filter(|s| s.task == mpeg && s.effective != s.actual).collect();
    assert!(!warped.is_empty());
    for s in &warped {
        assert!((s.actual - s.effective - 50e6).abs() < 1e-3, "{s:?}");
    }
    for s in t.vtimes.iter().filter(|s| s.task != mpeg) {
        assert_eq!(s.actual, s.effective);
    }
    // each task's A_i never decreases
    for i in 0..sc.tasks.len() {
        let a: Vec<f64> = t.vtimes.iter().filter(|s| s.task == i).map(|s| s.actual).collect();
        assert!(a.windows(2).all(|w| w[1] >= w[0]), "task {i}");
    }

    let (sc, _, t) = traced("experiments/bvt/fig2.toml");
    let gcc = sc.tasks.iter().position(|x| x.name == "f2_gcc").unwrap();
    let bigsim = 1 - gcc;
    let wake = 150_000_000;
    let at = |task: usize, when: u64| t.vtimes.iter().rfind(|s| s.task == task && s.at <= when).map(|s| s.actual).unwrap();
    assert_eq!(at(gcc, wake - 1), 0.0);
    assert!(at(bigsim, wake) > 100e6);
    assert_eq!(at(gcc, wake), at(bigsim, wake));
}

/// Runs `chromium --headless` on `html`, writing `png`; None when Chromium is missing.
fn screenshot(html: &Path, png: &Path, size: (u32, u32)) -> Option<()> {
    let bin = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()))?;
    let _ = std::fs::remove_file(png);
    let profile = png.with_extension("profile");
    let mut child = Command::new(bin)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    // A hard timeout: a hung browser fails the test instead of hanging it.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_dir_all(&profile);
    Some(())
}

/// The fraction of pixels that are not (near) white, and the variance of luminance.
fn ink(png_file: &Path) -> (f64, f64, u32, u32) {
    let decoder = png::Decoder::new(std::fs::File::open(png_file).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(info.bit_depth == png::BitDepth::Eight && channels >= 3, "{:?} {:?}", info.color_type, info.bit_depth);
    let px = &buf[..info.buffer_size()];
    let lum: Vec<f64> = px.chunks(channels).map(|p| 0.2126 * p[0] as f64 + 0.7152 * p[1] as f64 + 0.0722 * p[2] as f64).collect();
    let n = lum.len() as f64;
    let mean = lum.iter().sum::<f64>() / n;
    let var = lum.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / n;
    let inked = lum.iter().filter(|l| **l < 200.0).count() as f64 / n;
    (inked, var, info.width, info.height)
}

#[test]
fn reports_render_in_headless_chromium() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html_report");
    std::fs::create_dir_all(&out).unwrap();
    let (sc, r, t) = traced("experiments/bvt/fig3.toml");
    let sim_html = out.join("fig3.html");
    std::fs::write(&sim_html, sim_page(&sc, &r, &t)).unwrap();
    let (dir, runs) = all_experiments();
    let repro_html = out.join("repro.html");
    std::fs::write(&repro_html, repro_page(&runs, &dir)).unwrap();
    for (html, size) in [(&sim_html, (1200, 1600)), (&repro_html, (1200, 3000))] {
        let png = html.with_extension("png");
        if screenshot(html, &png, size).is_none() {
            vassal_agent::skip::skip("chromium is not installed (Debian: apt-get install chromium): the HTML render check");
            eprintln!("the pages are in {}", out.display());
            return;
        }
        let (inked, var, w, h) = ink(&png);
        println!("{}: {w}x{h}, {:.1}% inked, luminance variance {var:.0}", png.display(), inked * 100.0);
        assert_eq!((w, h), size);
        // A blank page is one colour (variance 0, nothing inked); ours has text, tables
        // and coloured charts.
        assert!(var > 100.0, "{} looks blank: luminance variance {var}", png.display());
        assert!(inked > 0.02, "{} looks blank: {:.2}% of pixels inked", png.display(), inked * 100.0);
    }
}
