//! vassal-lab: what runs and presents experiments, apart from the product (the simulator
//! in vassal-sim, the agent in vassal-agent): the paper reproductions (`vassal repro`,
//! simulated and `--real`), sweeps (`vassal sweep`), and their reports — HTML pages, SVG
//! charts and Chrome JSON traces.

pub mod chrome_trace;
pub mod html;
pub mod real;
pub mod repro;
pub mod rtserver_repro;
pub mod svg;
pub mod sweep;
