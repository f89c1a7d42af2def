//! The raw file structure: the scenario as users write it, deserialized by serde. Every
//! table refuses unknown keys (`deny_unknown_fields`), and values are the self-checking
//! types of `values.rs`, kept with their spans ([`toml::Spanned`]) where `build.rs`
//! needs them to point an error at its place. Nothing here is validated across values.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::values::{Clock, DistV, Dur, Finite, Param, SizeV, TaskParam};

pub(super) type ParamMap = BTreeMap<String, Spanned<Param>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) name: Option<Spanned<String>>,
    pub(super) until: Spanned<Dur>,
    pub(super) seed: Option<u64>,
    pub(super) machine: Spanned<RawMachine>,
    pub(super) default: Option<Spanned<RawDefault>>,
    #[serde(default)]
    pub(super) scheduler: Vec<RawScheduler>,
    #[serde(default)]
    pub(super) task: Vec<RawTask>,
    #[serde(default)]
    pub(super) interrupt: Vec<RawInterrupt>,
    pub(super) memory: Option<Spanned<RawMemory>>,
    /// Result rows of an experiment file; read and checked by `repro`, not by the simulator.
    #[serde(default, rename = "expect")]
    pub(super) _expect: Option<toml::Value>,
    /// The variants and tables of a sweep (docs/sweep.md); read by `repro` and `sweep`.
    #[serde(default, rename = "axis")]
    pub(super) _axis: Option<toml::Value>,
    #[serde(default, rename = "run")]
    pub(super) _run: Option<toml::Value>,
    #[serde(default, rename = "metrics")]
    pub(super) _metrics: Option<toml::Value>,
    #[serde(default, rename = "plot")]
    pub(super) _plot: Option<toml::Value>,
    #[serde(default, rename = "seeds")]
    pub(super) _seeds: Option<toml::Value>,
    /// An experiment's control run (docs/repro.md); read by `repro`.
    #[serde(default, rename = "control")]
    pub(super) _control: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMachine {
    pub(super) cpus: Spanned<i64>,
    pub(super) clock: Option<Clock>,
    pub(super) hz: Option<Spanned<u32>>,
    pub(super) tick: Option<Spanned<Dur>>,
    pub(super) switch_cost: Option<Dur>,
    pub(super) migration_cost: Option<Dur>,
    pub(super) wake_latency: Option<Dur>,
    pub(super) min_best_effort: Option<Spanned<Finite>>,
    pub(super) unscheduled: Option<RawUnscheduled>,
}

/// `[memory]` (paper 004 §2): sizes in KB.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMemory {
    pub(super) size_kb: Spanned<i64>,
    pub(super) placement: Option<Spanned<String>>,
    pub(super) swap_seek: Dur,
    pub(super) swap_transfer: Dur,
    pub(super) swap_cpu: Option<Dur>,
    pub(super) min_resident: Option<Dur>,
    pub(super) swap_in: Option<Spanned<String>>,
    pub(super) swap_out: Option<Spanned<String>>,
    pub(super) scan_entry: Option<Dur>,
    pub(super) nproc: Option<Spanned<i64>>,
    pub(super) dma_steal: Option<Spanned<Finite>>,
    pub(super) min_swapped_out: Option<Dur>,
    pub(super) wake_on_ready: Option<bool>,
    pub(super) u_area_kb: Option<Spanned<i64>>,
    /// Shared text segments by name: their sizes in KB.
    pub(super) texts: Option<Spanned<BTreeMap<String, Spanned<i64>>>>,
    pub(super) copy_per_kb: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUnscheduled {
    pub(super) interval: Spanned<DistV>,
    pub(super) duration: DistV,
    #[serde(default)]
    pub(super) also: Vec<RawUnscheduledSource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUnscheduledSource {
    pub(super) interval: Spanned<DistV>,
    pub(super) duration: DistV,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefault {
    pub(super) name: Option<Spanned<String>>,
    pub(super) policy: Option<Spanned<String>>,
    pub(super) params: Option<Spanned<ParamMap>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub(super) enum RawUsage {
    HardTime { cpus: Spanned<Vec<Spanned<i64>>>, util: Spanned<Finite> },
    Reserved(Spanned<Finite>),
    BestEffort,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduler {
    pub(super) name: Spanned<String>,
    pub(super) policy: Option<Spanned<String>>,
    /// A loadable module (docs/modules.md) instead of a built-in policy.
    pub(super) module: Option<Spanned<String>>,
    pub(super) params: Option<Spanned<ParamMap>>,
    pub(super) usage: Option<Spanned<RawUsage>>,
    pub(super) load_at: Option<Dur>,
    pub(super) unload_at: Option<Spanned<Dur>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTask {
    pub(super) name: Spanned<String>,
    pub(super) count: Option<Spanned<i64>>,
    pub(super) start: Option<Dur>,
    pub(super) scheduler: Option<Spanned<String>>,
    pub(super) affinity: Option<Spanned<Vec<Spanned<i64>>>>,
    pub(super) uid: Option<u32>,
    pub(super) params: Option<BTreeMap<String, TaskParam>>,
    pub(super) loop_at: Option<Dur>,
    pub(super) size_kb: Option<Spanned<SizeV>>,
    /// The shared text segment it runs (a name in `[memory] texts`).
    pub(super) text: Option<Spanned<String>>,
    #[serde(alias = "behavior")]
    pub(super) behaviour: Spanned<RawBehaviour>,
}

/// A behaviour table. The built-in kinds' keys are typed; any other key is kept as a
/// raw value for a kind the scenario language does not know (`other`, in file order):
/// `build.rs` refuses it for a built-in kind.
#[derive(Default)]
pub(super) struct RawBehaviour {
    pub(super) kind: Option<Spanned<String>>,
    pub(super) work: Option<Spanned<DistV>>,
    pub(super) period: Option<Spanned<Dur>>,
    pub(super) exec: Option<Spanned<DistV>>,
    pub(super) deadline: Option<Spanned<Dur>>,
    pub(super) late_after: Option<Spanned<Dur>>,
    pub(super) offset: Option<Spanned<Dur>>,
    pub(super) jobs: Option<Spanned<u64>>,
    pub(super) burst: Option<Spanned<DistV>>,
    pub(super) think: Option<Spanned<DistV>>,
    pub(super) run: Option<Spanned<DistV>>,
    pub(super) sleep: Option<Spanned<DistV>>,
    pub(super) voluntary: Option<Spanned<bool>>,
    pub(super) vector: Option<Spanned<u32>>,
    pub(super) phases: Option<Spanned<Vec<Spanned<RawPhase>>>>,
    pub(super) repeat: Option<Spanned<bool>>,
    pub(super) disk: Option<Spanned<String>>,
    pub(super) read: Option<Spanned<DistV>>,
    pub(super) other: Vec<(String, Spanned<toml::Value>)>,
}

impl<'de> Deserialize<'de> for RawBehaviour {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawBehaviour;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("struct RawBehaviour")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<RawBehaviour, A::Error> {
                let mut b = RawBehaviour::default();
                while let Some(key) = m.next_key::<String>()? {
                    match key.as_str() {
                        "kind" => b.kind = Some(m.next_value()?),
                        "work" => b.work = Some(m.next_value()?),
                        "period" => b.period = Some(m.next_value()?),
                        "exec" => b.exec = Some(m.next_value()?),
                        "deadline" => b.deadline = Some(m.next_value()?),
                        "late_after" => b.late_after = Some(m.next_value()?),
                        "offset" => b.offset = Some(m.next_value()?),
                        "jobs" => b.jobs = Some(m.next_value()?),
                        "burst" => b.burst = Some(m.next_value()?),
                        "think" => b.think = Some(m.next_value()?),
                        "run" => b.run = Some(m.next_value()?),
                        "sleep" => b.sleep = Some(m.next_value()?),
                        "voluntary" => b.voluntary = Some(m.next_value()?),
                        "vector" => b.vector = Some(m.next_value()?),
                        "phases" => b.phases = Some(m.next_value()?),
                        "repeat" => b.repeat = Some(m.next_value()?),
                        "disk" => b.disk = Some(m.next_value()?),
                        "read" => b.read = Some(m.next_value()?),
                        _ => b.other.push((key, m.next_value()?)),
                    }
                }
                if b.kind.is_none() {
                    return Err(A::Error::missing_field("kind"));
                }
                Ok(b)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPhase {
    pub(super) run: Option<Spanned<DistV>>,
    pub(super) sleep: Option<Spanned<DistV>>,
    pub(super) fault: Option<Spanned<DistV>>,
    pub(super) timer: Option<Spanned<Dur>>,
    #[serde(rename = "yield")]
    pub(super) yield_: Option<Spanned<bool>>,
    pub(super) send: Option<Spanned<RawSend>>,
    pub(super) join: Option<Spanned<String>>,
    pub(super) leave: Option<Spanned<bool>>,
    pub(super) hand_off: Option<Spanned<RawHandOff>>,
    pub(super) terminal: Option<Spanned<DistV>>,
    pub(super) times: Option<Spanned<i64>>,
    pub(super) io: Option<Spanned<RawIo>>,
    pub(super) grow: Option<Spanned<i64>>,
    pub(super) grow_once: Option<Spanned<i64>>,
}

/// `{ io = { disk = "rl1", time = ... } }`: a transfer on a drive.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIo {
    pub(super) disk: Spanned<String>,
    pub(super) time: DistV,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSend {
    pub(super) to: Spanned<String>,
    pub(super) request: Spanned<String>,
    pub(super) delay: Option<Spanned<Dur>>,
    pub(super) on: Option<Spanned<bool>>,
    pub(super) name: Option<Spanned<String>>,
    pub(super) value: Option<Spanned<TaskParam>>,
    pub(super) util: Option<Spanned<f64>>,
    pub(super) period: Option<Spanned<Dur>>,
    pub(super) start: Option<Spanned<Dur>>,
    pub(super) need: Option<Spanned<Dur>>,
    pub(super) deadline: Option<Spanned<Dur>>,
    pub(super) task: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHandOff {
    pub(super) to: Spanned<String>,
    pub(super) sleep: Spanned<DistV>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInterrupt {
    pub(super) vector: Spanned<u32>,
    pub(super) every: Spanned<DistV>,
    pub(super) start: Option<Dur>,
    pub(super) warp: Option<bool>,
}
