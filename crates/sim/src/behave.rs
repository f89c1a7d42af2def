//! Task behaviours defined outside the engine. The scenario language keeps a behaviour
//! table whose `kind` it does not know ([`crate::model::OtherKind`]: the raw keys with
//! their file positions); a [`Registry`] passed to the simulation
//! ([`crate::Sim::with_registry`]) maps the kind to a [`Factory`] that validates the keys
//! ([`Params`]: errors name the file, line and key as the scenario language's own do)
//! and makes one [`Behave`] per task. The engine asks it for the task's next step
//! ([`Next`]) and calls it back on its own keyed timers; through [`Cx`] it reads the
//! clock, draws from the task's RNG, sends requests to schedulers and records deadlines.
//!
//! Invariants: a behaviour sees nothing of the engine but [`Cx`]; its random draws come
//! from the task's own RNG, so runs stay deterministic; a registered kind never shadows
//! a built-in one, and its keys are not built-in behaviour keys (those the scenario
//! language parses itself).

use std::collections::BTreeMap;

use toml::Value;
use vassal_core::Ns;

pub use crate::engine::Cx;
use crate::model::{OtherKind, Scenario};
use crate::scenario::{ScenarioError, BUILTIN_BEHAVIOURS, BUILTIN_BEHAVIOUR_KEYS};
pub use rand::Rng;
pub use rand_chacha::ChaCha8Rng;

/// What a behaviour's task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run `work` ns of CPU. With `job = Some((release, deadline))` the burst is a job:
    /// done by `deadline`, it is a met job with its response from `release`, else missed.
    Run {
        work: Ns,
        job: Option<(Ns, Ns)>,
    },
    /// Block until `until` (a voluntary sleep, or an involuntary block such as a fault).
    Block {
        until: Ns,
        voluntary: bool,
    },
    Yield,
    Exit,
}

/// One task's behaviour.
pub trait Behave: Send {
    /// The task's next step (at its start, after each burst, and when it wakes).
    fn step(&mut self, cx: &mut Cx<'_>) -> Next;
    /// Its timer `key` (see [`Cx::set_timer`]) fired. True: the job the task is running
    /// ends now (if short of its need it is a missed job), and the task takes its next step.
    fn timer(&mut self, _cx: &mut Cx<'_>, _key: u32) -> bool {
        false
    }
}

/// Makes the behaviour of each task of one kind.
pub trait Factory: Send + Sync {
    /// The keys its behaviour table may have besides `kind`.
    fn keys(&self) -> &'static [&'static str];
    /// Validates the task's keys and makes its behaviour.
    fn build(&self, p: &Params<'_>) -> Result<Box<dyn Behave>, ScenarioError>;
}

/// The behaviour kinds known besides the built-in ones.
#[derive(Default)]
pub struct Registry {
    kinds: BTreeMap<&'static str, Box<dyn Factory>>,
}

impl Registry {
    /// Registers `kind`. Panics (a bug in the caller, not in user input) if the kind is a
    /// built-in one or one of its keys is a built-in behaviour key.
    pub fn register(&mut self, kind: &'static str, factory: impl Factory + 'static) {
        assert!(!BUILTIN_BEHAVIOURS.contains(&kind), "behaviour kind '{kind}' is built in");
        for k in factory.keys() {
            assert!(!BUILTIN_BEHAVIOUR_KEYS.contains(k), "behaviour kind '{kind}': key `{k}` is a built-in key");
        }
        self.kinds.insert(kind, Box::new(factory));
    }

    /// Validates every task of a registered kind in `sc` without running it.
    pub fn check(&self, sc: &Scenario) -> Result<(), ScenarioError> {
        self.behaviours(sc).map(|_| ())
    }

    /// Makes the behaviour of each task whose kind is not built in (None for the others).
    pub(crate) fn behaviours(&self, sc: &Scenario) -> Result<Vec<Option<Box<dyn Behave>>>, ScenarioError> {
        sc.tasks
            .iter()
            .map(|t| match &t.behaviour {
                crate::model::Behaviour::Other(o) => self.build(o, sc).map(Some),
                _ => Ok(None),
            })
            .collect()
    }

    fn build(&self, o: &OtherKind, sc: &Scenario) -> Result<Box<dyn Behave>, ScenarioError> {
        let p = Params { o, sc };
        let Some(f) = self.kinds.get(o.kind.as_str()) else {
            let known: Vec<&str> = BUILTIN_BEHAVIOURS.iter().copied().chain(self.kinds.keys().copied()).collect();
            return Err(p.err_kind(format!("unknown behaviour kind '{}'; expected one of {}", o.kind, known.join(", "))));
        };
        let allowed = f.keys();
        if let Some((key, _)) = o.params.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            let expected = allowed.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
            return Err(p.err(key, format!("unknown key `{key}` for behaviour kind '{}'; expected one of {expected}", o.kind)));
        }
        f.build(&p)
    }
}

/// A task's behaviour table, for its factory: typed reads that fail with the key's
/// position.
pub struct Params<'a> {
    o: &'a OtherKind,
    sc: &'a Scenario,
}

impl Params<'_> {
    pub fn task(&self) -> &str {
        &self.o.task
    }

    /// The value of `key` (None: absent, or a built-in key whose value is not kept).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.o.params.iter().find(|(k, _)| k == key).and_then(|(_, p)| p.value.as_ref())
    }

    /// An error at `key` (at the `kind` if the key is absent).
    pub fn err(&self, key: &str, msg: impl Into<String>) -> ScenarioError {
        let (line, col) = self.o.params.iter().find(|(k, _)| k == key).map_or(self.o.at, |(_, p)| p.at);
        ScenarioError { file: self.o.file.clone(), line, col, msg: msg.into() }
    }

    /// An error at the `kind`.
    pub fn err_kind(&self, msg: impl Into<String>) -> ScenarioError {
        ScenarioError { file: self.o.file.clone(), line: self.o.at.0, col: self.o.at.1, msg: msg.into() }
    }

    /// A duration ("10ms", or 0).
    pub fn dur(&self, key: &str) -> Result<Option<Ns>, ScenarioError> {
        self.get(key).map(|v| crate::scenario::dur_of(v).map_err(|m| self.err(key, m))).transpose()
    }

    /// A finite number (an integer or a float).
    pub fn number(&self, key: &str) -> Result<Option<f64>, ScenarioError> {
        self.get(key).map(|v| crate::scenario::finite_of(v).map_err(|m| self.err(key, m))).transpose()
    }

    pub fn string(&self, key: &str) -> Result<Option<&str>, ScenarioError> {
        self.get(key).map(|v| v.as_str().ok_or_else(|| self.err(key, format!("{key} must be a string")))).transpose()
    }

    /// An array of non-negative integers (None if absent; Err(()) if not one).
    pub fn u64s(&self, key: &str) -> Option<Result<Vec<u64>, ()>> {
        let v = self.get(key)?;
        let a = v.as_array().map(|a| a.iter().map(|x| x.as_integer().and_then(|i| u64::try_from(i).ok())).collect::<Option<Vec<u64>>>());
        Some(a.flatten().ok_or(()))
    }

    /// The name of a scheduler of the scenario.
    pub fn scheduler(&self, key: &str) -> Result<Option<String>, ScenarioError> {
        let Some(name) = self.string(key)? else { return Ok(None) };
        let sc = self.sc;
        if name == sc.default_name || sc.schedulers.iter().any(|s| s.name == name) {
            return Ok(Some(name.to_string()));
        }
        let others: std::collections::BTreeSet<&str> = sc.schedulers.iter().map(|s| s.name.as_str()).collect();
        let list = std::iter::once(sc.default_name.as_str()).chain(others).map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ");
        Err(self.err(key, format!("no scheduler named '{name}'; expected one of {list}")))
    }
}
