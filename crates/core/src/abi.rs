//! The module ABI, version 1: the integer and text encodings shared by the host
//! (vassal-module's `WasmPolicy` and `NativePolicy`) and the guest side in
//! `sdk/vassal-sdk`. Both sides use this one file (the SDK depends on vassal-core), so
//! there is no copy to keep in step; docs/modules.md is the reference.
//!
//! The host calls the module's exports with plain integers (`now` is always the first
//! argument, an `i64` of nanoseconds); the module calls the host's imports (module name
//! `"vassal"`) for the `Ctx` effects and queries. Bytes (parameters, a request's name, a
//! refusal's reason, log text) pass through the module's linear memory: the host writes
//! into a buffer the module hands out (`vassal_buffer`), the module passes pointer and
//! length to an import.
//!
//! Invariants: [`decode_request`] undoes [`encode_request`] for every request a policy
//! may get, and [`decode_params`] undoes [`encode_params`] for every parameter value
//! (the tests below check each variant); `encode_request` matches every variant of
//! [`Request`] with no catch-all, so a new request does not compile until it has an
//! encoding here (or is declared one no module gets).

use std::collections::BTreeMap;

use crate::param::ParamValue;
use crate::policy::TaskParams;
use crate::request::Request;

/// The ABI version a module must report from `vassal_abi()`.
pub const ABI_VERSION: i32 = 1;

/// `state(task)` results: a CPU number (>= 0) means running there.
pub const STATE_RUNNABLE: i32 = -1;
pub const STATE_BLOCKED: i32 = -2;
pub const STATE_DEAD: i32 = -3;

/// `vassal_detach` reasons.
pub const DETACH_EXIT: i32 = 0;
pub const DETACH_MOVED: i32 = 1;
pub const DETACH_RELEASED: i32 = 2;

/// `vassal_preempt` reasons.
pub const PREEMPT_SLICE: i32 = 0;
pub const PREEMPT_RESCHED: i32 = 1;
pub const PREEMPT_YIELD: i32 = 2;

/// `vassal_wake` flags.
pub const WAKE_VOLUNTARY: i32 = 1;
pub const WAKE_WARP: i32 = 2;

/// `vassal_refused` reasons (the CPU argument carries `RunningElsewhere`'s CPU).
pub const REFUSAL_NO_SUCH_TASK: i32 = 0;
pub const REFUSAL_NOT_YOURS: i32 = 1;
pub const REFUSAL_NOT_RUNNABLE: i32 = 2;
pub const REFUSAL_RUNNING_ELSEWHERE: i32 = 3;
pub const REFUSAL_NOT_ALLOWED: i32 = 4;
pub const REFUSAL_ZERO_SLICE: i32 = 5;

/// `vassal_message` request kinds (`Join`/`Leave` never reach a policy).
pub const REQ_SET: i32 = 1;
pub const REQ_WARP: i32 = 2;
pub const REQ_PARAM: i32 = 3;
pub const REQ_RESERVE: i32 = 4;
pub const REQ_FREE: i32 = 5;
pub const REQ_MODIFY: i32 = 6;
pub const REQ_AVAIL: i32 = 7;
pub const REQ_DEADLINE: i32 = 8;

/// `reply(kind, a, b, ptr, len)` kinds.
pub const REPLY_OK: i32 = 0;
pub const REPLY_VALUE: i32 = 1;
pub const REPLY_FRACTION: i32 = 2;
pub const REPLY_REFUSED: i32 = 3;

/// `vassal_usage_kind()` results.
pub const USAGE_BEST_EFFORT: i32 = 0;
pub const USAGE_RESERVED: i32 = 1;
pub const USAGE_HARD_TIME: i32 = 2;

/// `vassal_pick` returns this for "no opinion"; otherwise the task id. The slice is the
/// `u64` the module stored at the address `vassal_mailbox()` returned (`u64::MAX`: run
/// until it blocks).
pub const PICK_NONE: i64 = -1;
pub const SLICE_NONE: u64 = u64::MAX;

/// `vassal_message`'s (kind, a, b, c, util, name) for `req`; None: a request no policy
/// gets (`Join`/`Leave` are the dispatcher's, `SetAt` is resolved before it is handed over).
pub fn encode_request(req: &Request) -> Option<(i32, i64, i64, i64, f64, &str)> {
    Some(match req {
        Request::Join | Request::Leave | Request::SetAt { .. } => return None,
        Request::Set { delay } => (REQ_SET, *delay as i64, 0, 0, 0.0, ""),
        Request::Warp { on } => (REQ_WARP, i64::from(*on), 0, 0, 0.0, ""),
        Request::Param { name, value } => (REQ_PARAM, *value, 0, 0, 0.0, name.as_str()),
        Request::Reserve { util, period } => (REQ_RESERVE, *period as i64, 0, 0, *util, ""),
        Request::Free => (REQ_FREE, 0, 0, 0, 0.0, ""),
        Request::Modify { util, period } => (REQ_MODIFY, *period as i64, 0, 0, *util, ""),
        Request::Avail => (REQ_AVAIL, 0, 0, 0, 0.0, ""),
        Request::Deadline { start, need, deadline } => (REQ_DEADLINE, *start as i64, *need as i64, *deadline as i64, 0.0, ""),
    })
}

/// The request `vassal_message`'s arguments encode (`name` is read only for `REQ_PARAM`);
/// None: an unknown kind.
pub fn decode_request(kind: i32, a: i64, b: i64, c: i64, util: f64, name: impl FnOnce() -> String) -> Option<Request> {
    Some(match kind {
        REQ_SET => Request::Set { delay: a as u64 },
        REQ_WARP => Request::Warp { on: a != 0 },
        REQ_PARAM => Request::Param { name: name(), value: a },
        REQ_RESERVE => Request::Reserve { util, period: a as u64 },
        REQ_FREE => Request::Free,
        REQ_MODIFY => Request::Modify { util, period: a as u64 },
        REQ_AVAIL => Request::Avail,
        REQ_DEADLINE => Request::Deadline { start: a as u64, need: b as u64, deadline: c as u64 },
        _ => return None,
    })
}

/// The scheduler's parameters as `vassal_init` reads them: `name=T:value` lines (T: `i`
/// integer, `f` number, `s` string, `b` bool as 0/1). Err: the name of a parameter the
/// text form cannot carry (a name with `=` or a line break, a value with a line break).
pub fn encode_params(params: &BTreeMap<String, ParamValue>) -> Result<String, String> {
    let mut out = String::new();
    for (k, v) in params {
        let val = match v {
            ParamValue::Int(i) => format!("i:{i}"),
            ParamValue::Float(f) => format!("f:{f}"),
            ParamValue::Str(s) => format!("s:{s}"),
            ParamValue::Bool(b) => format!("b:{}", u8::from(*b)),
        };
        if k.contains(['=', '\n']) || val.contains('\n') {
            return Err(k.clone());
        }
        out.push_str(&format!("{k}={val}\n"));
    }
    Ok(out)
}

/// What [`encode_params`] wrote. Err: why a line is malformed.
pub fn decode_params(text: &str) -> Result<BTreeMap<String, ParamValue>, String> {
    let mut map = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once('=').ok_or_else(|| format!("malformed parameter line '{line}'"))?;
        let (t, v) = v.split_once(':').ok_or_else(|| format!("malformed parameter value '{v}'"))?;
        let p = match t {
            "i" => ParamValue::Int(v.parse().map_err(|_| format!("parameter '{k}': bad integer"))?),
            "f" => ParamValue::Float(v.parse().map_err(|_| format!("parameter '{k}': bad number"))?),
            "b" => ParamValue::Bool(v == "1"),
            _ => ParamValue::Str(v.to_string()),
        };
        map.insert(k.to_string(), p);
    }
    Ok(map)
}

/// The per-task parameters as the module sees them at `vassal_attach`: `name=i:value`
/// lines. Names that the text form cannot carry are left out.
pub fn encode_task_params(params: &TaskParams) -> String {
    let mut out = String::new();
    for (k, v) in params {
        if !k.contains(['=', '\n']) {
            out.push_str(&format!("{k}=i:{v}\n"));
        }
    }
    out
}

/// What [`encode_task_params`] wrote (a malformed line is skipped).
pub fn decode_task_params(text: &str) -> TaskParams {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.to_string(), v.strip_prefix("i:")?.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each request a policy may get. The match has no catch-all: a new variant
    /// must be added here (and so gets checked below).
    fn every_request() -> Vec<Request> {
        let all = vec![
            Request::Set { delay: 930_000 },
            Request::Warp { on: true },
            Request::Warp { on: false },
            Request::Param { name: "weight".into(), value: -7 },
            Request::Reserve { util: 0.25, period: 20_000_000 },
            Request::Free,
            Request::Modify { util: f64::INFINITY, period: u64::MAX },
            Request::Avail,
            Request::Deadline { start: 1, need: 2, deadline: 3 },
        ];
        for r in &all {
            match r {
                Request::Join | Request::Leave | Request::SetAt { .. } => unreachable!("never reaches a module"),
                Request::Set { .. }
                | Request::Warp { .. }
                | Request::Param { .. }
                | Request::Reserve { .. }
                | Request::Free
                | Request::Modify { .. }
                | Request::Avail
                | Request::Deadline { .. } => {}
            }
        }
        all
    }

    #[test]
    fn every_request_decodes_as_encoded() {
        for r in every_request() {
            let (kind, a, b, c, util, name) = encode_request(&r).expect("a policy's request has an encoding");
            assert_eq!(decode_request(kind, a, b, c, util, || name.to_string()), Some(r));
        }
        for r in [Request::Join, Request::Leave, Request::SetAt { at: 5 }] {
            assert_eq!(encode_request(&r), None);
        }
        assert_eq!(decode_request(99, 0, 0, 0, 0.0, String::new), None);
    }

    #[test]
    fn every_param_decodes_as_encoded() {
        let params: BTreeMap<String, ParamValue> = [
            ("b".to_string(), ParamValue::Bool(true)),
            ("f".to_string(), ParamValue::Bool(false)),
            ("i".to_string(), ParamValue::Int(i64::MIN)),
            ("x".to_string(), ParamValue::Float(0.1)),
            ("y".to_string(), ParamValue::Float(-1e300)),
            ("s".to_string(), ParamValue::Str("10ms: a=b".into())),
            ("e".to_string(), ParamValue::Str(String::new())),
        ]
        .into();
        assert_eq!(decode_params(&encode_params(&params).unwrap()), Ok(params));
        for bad in ["a=b", "a\nb"] {
            assert_eq!(encode_params(&[(bad.to_string(), ParamValue::Int(1))].into()), Err(bad.to_string()));
        }
        assert!(encode_params(&[("k".to_string(), ParamValue::Str("a\nb".into()))].into()).is_err());
        let task: TaskParams = [("weight".to_string(), 3), ("warp".to_string(), -1)].into();
        assert_eq!(decode_task_params(&encode_task_params(&task)), task);
    }
}
