//! A request to a scheduler and its answer: Vassal's MessageToScheduler (paper 000 §5).
//!
//! [`Request`] is the one type a request has everywhere: a policy's `on_message` gets it,
//! the simulator's scenarios build it, the Linux agent's clients send it as JSON (with the
//! `serde` feature: `{"kind":"set","delay_ns":1000000}`; times on the wire carry an `_ns`
//! suffix), and a loaded module gets it through the ABI's integers ([`crate::abi`]).
//! Adding a request is adding a variant here: the compiler then asks for its ABI
//! encoding in [`crate::abi`], and the tests there check both sides agree.
//!
//! Invariants: `Join` and `Leave` never cross the agent's wire (a client joins with its
//! own call, which the broker checks); `SetAt` never reaches a policy (the mechanism
//! turns it into `Set` with [`Request::resolve`] at the instant it hands it over).

use crate::time::Ns;

/// A typed request to a scheduler (Vassal's MessageToScheduler buffer).
/// `Join` and `Leave` are handled by the dispatcher (it moves the task and the new
/// owner's `on_attach` may refuse); the rest go to the named scheduler's `on_message`.
/// A policy that does not understand a request refuses it.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields))]
#[non_exhaustive]
pub enum Request {
    /// Move the sending task (or `task`) to this scheduler.
    #[cfg_attr(feature = "serde", serde(skip))]
    Join,
    /// Return the task to the default scheduler.
    #[cfg_attr(feature = "serde", serde(skip))]
    Leave,
    /// Vassal sample real-time scheduler: run me `delay` ns from now (paper 000 §5).
    Set {
        #[cfg_attr(feature = "serde", serde(rename = "delay_ns"))]
        delay: Ns,
    },
    /// SET for an absolute time `at` on the mechanism's clock (the agent's
    /// CLOCK_MONOTONIC): [`Request::resolve`] turns it into `Set` with the delay from the
    /// instant the request is handed to the scheduler, so the time the message spent in
    /// transit is not added to the target (refused if already past).
    SetAt {
        #[cfg_attr(feature = "serde", serde(rename = "at_ns"))]
        at: Ns,
    },
    /// Turn warp on or off (BVT §2.2).
    Warp { on: bool },
    /// Set one of the task's named parameters.
    Param { name: String, value: i64 },
    /// Reservation server (paper 002 §2, `Cpu::reserve(pid, util, period)`): reserve
    /// `util` of a CPU every `period` ns for the task. `util` arrives as the client sent
    /// it (it may be NaN or out of range); the policy validates it and converts it to
    /// exact integer time before any admission arithmetic.
    Reserve {
        util: f64,
        #[cfg_attr(feature = "serde", serde(rename = "period_ns"))]
        period: Ns,
    },
    /// `Cpu::freeReserve(pid)`: drop the task's reservation.
    Free,
    /// `Cpu::modifyReserve(pid, newUtil, newPeriod)`: replace the task's reservation,
    /// admitted as if the old one were gone; on refusal the old one stays.
    Modify {
        util: f64,
        #[cfg_attr(feature = "serde", serde(rename = "period_ns"))]
        period: Ns,
    },
    /// `Cpu::getAvailResource()`: how much reservable CPU is left (answered with
    /// `Reply::Fraction`, in CPUs).
    Avail,
    /// Deadline-based scheduling (BVT paper 001 §5): `need` ns of CPU between the
    /// absolute times `start` and `deadline`.
    Deadline {
        #[cfg_attr(feature = "serde", serde(rename = "start_ns"))]
        start: Ns,
        #[cfg_attr(feature = "serde", serde(rename = "need_ns"))]
        need: Ns,
        #[cfg_attr(feature = "serde", serde(rename = "deadline_ns"))]
        deadline: Ns,
    },
}

impl Request {
    /// The request as a scheduler gets it at time `now`: `SetAt` becomes `Set` with the
    /// delay left until its time (an error if that time is not in the future); any other
    /// request is itself.
    pub fn resolve(self, now: Ns) -> Result<Request, String> {
        match self {
            Request::SetAt { at } if at <= now => Err(format!("time {at} ns is already past (now {now} ns)")),
            Request::SetAt { at } => Ok(Request::Set { delay: at - now }),
            r => Ok(r),
        }
    }
}

/// A scheduler's answer to a request. A refusal is immediate, with a reason (Vassal §5:
/// a request that cannot be met is refused at once, not discovered after the deadline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok,
    Value(i64),
    /// An exact rational answer, `num / den` (e.g. available CPU for `Request::Avail`).
    Fraction {
        num: u64,
        den: u64,
    },
    Refused(String),
}

impl Reply {
    pub fn refused(why: impl Into<String>) -> Reply {
        Reply::Refused(why.into())
    }
    pub fn is_ok(&self) -> bool {
        !matches!(self, Reply::Refused(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_at_resolves_against_now() {
        assert_eq!(Request::SetAt { at: 30 }.resolve(10), Ok(Request::Set { delay: 20 }));
        assert!(Request::SetAt { at: 10 }.resolve(10).unwrap_err().contains("already past"));
        assert_eq!(Request::Free.resolve(10), Ok(Request::Free));
    }
}
