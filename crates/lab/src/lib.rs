//! vassal-lab: what runs and presents experiments, apart from the product (the simulator
//! in vassal-sim, the agent in vassal-agent): the paper reproductions (`vassal repro`,
//! simulated and `--real`), sweeps (`vassal sweep`), the benchmark (`vassal bench`), and
//! their reports — HTML pages, SVG charts and Chrome JSON traces.
//!
//! The modules are layered; each imports only modules of lower layers, never a sibling
//! or a higher one (so there is no import circle):
//!
//! 0. `fmt` (number and text formatting), `expect` (an experiment's rows and results:
//!    data), `metric` (the metric language: report paths and expressions),
//!    `workloads` (experiment-only task behaviours, e.g. randres, registered with the
//!    simulator's behaviour registry);
//! 1. `bench` (`vassal bench`: simulator speed and decision costs), `check` (`vassal
//!    check`: two policy versions on seeded scenarios; uses `workloads`), `svg` (charts; uses
//!    `fmt`), `chrome_trace` and `perfetto` (the trace writers), `rtserver_repro`
//!    (computed rtserver tables), `real` (the real-process experiments, over the
//!    agent's client), `calibrate` (`vassal calibrate`: this machine's costs as a
//!    machine model), `ftrace` (the kernel's switches of a real run, as a Perfetto trace);
//! 2. `html` (the report pages; uses `svg`, `fmt`, `expect`);
//! 3. `sweep` (variants, their runs, tables, CSV, JSON, plots; uses `metric`, `expect`,
//!    `svg`, `fmt`);
//! 4. `repro` (experiment files: simulated, computed or sweeps; uses `sweep`, `metric`,
//!    `expect`, `rtserver_repro`); `twin` (`vassal twin`: an rt-app workload simulated
//!    and run for real, side by side; uses `calibrate`, `ftrace`, `real`, `perfetto`,
//!    `workloads`, `html`, `svg`, `fmt`).
//!
//! The per-task table of a run is vassal-sim's (`Report::task_table`): one definition of
//! its columns for the text report there and the HTML page here.

pub mod bench;
pub mod calibrate;
pub mod check;
pub mod chrome_trace;
pub mod expect;
pub mod fmt;
pub mod ftrace;
pub mod html;
pub mod metric;
pub mod perfetto;
pub mod real;
pub mod repro;
pub mod rtserver_repro;
pub mod svg;
pub mod sweep;
pub mod twin;
pub mod workloads;
