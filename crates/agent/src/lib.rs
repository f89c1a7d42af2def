//! vassal-agent: the Linux agent (issue 6). A user-level scheduling server in the manner
//! of paper 002 (Lin, Chu & Nahrstedt): a **broker** serves clients over a Unix socket
//! (credentials from SO_PEERCRED, permission and ceiling checks, the hierarchy's
//! admission control), a **dispatcher** thread at a high SCHED_FIFO priority drives
//! `vassal_core::Dispatcher` with real time and enforces its decisions through kernel
//! priorities (paper 002's priority technique), and a **guardian** process returns every
//! managed task to its original scheduling if the agent dies. docs/agent.md describes
//! the design, the protocol and the numbers.

pub mod agent;
pub mod bpf;
pub mod broker;
pub mod budget;
pub mod chrome;
pub mod client;
pub mod config;
pub mod decisions;
pub mod guardian;
pub mod kernel;
pub mod skip;
pub mod state;
pub mod wait;
pub mod wire;
pub mod workers;

pub use config::Config;
