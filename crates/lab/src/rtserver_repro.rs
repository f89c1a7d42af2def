//! Computed experiments for the soft real-time server (paper 002 §2.2): the broker of
//! `vassal_policies::rtserver` run on the paper's inputs. Used by `repro` for
//! `[computed] kind = "rtserver_table"` and `"rtserver_admission"`.

use std::collections::BTreeMap;

use vassal_core::{parse_duration, CpuId, CpuSet, Ns, TaskId};
use vassal_policies::rtserver::{exec_time, fraction, Broker, Failure, Mode};
use vassal_policies::ParamValue;

/// One `reserve(pid, util, period)` request, with the CPUs the process may run on.
struct Req {
    pid: u32,
    util: f64,
    period: Ns,
    affinity: Option<CpuSet>,
}

fn get_str<'a>(t: &'a toml::Table, key: &str, default: &'a str) -> Result<&'a str, String> {
    match t.get(key) {
        None => Ok(default),
        Some(toml::Value::String(s)) => Ok(s),
        Some(v) => Err(format!("'{key}' must be a string, found {v}")),
    }
}

fn duration(t: &toml::Table, key: &str, default: &str) -> Result<Ns, String> {
    parse_duration(get_str(t, key, default)?).map_err(|e| format!("'{key}': {e}"))
}

/// The broker described by the input's `slot`, `frame`, `cpus`, `r`, `admission`.
fn broker(t: &toml::Table) -> Result<Broker, String> {
    let slot = duration(t, "slot", "20ms")?;
    let frame = duration(t, "frame", "160ms")?;
    if slot == 0 || frame % slot != 0 {
        return Err("'frame' must be a whole number of slots".into());
    }
    let cpus = match t.get("cpus") {
        Some(toml::Value::Integer(n)) if (1..=64).contains(n) => *n as u16,
        None => 1,
        Some(v) => return Err(format!("'cpus' must be an integer in 1..=64, found {v}")),
    };
    let r = match t.get("r") {
        None => None,
        Some(toml::Value::Float(f)) => Some(ParamValue::Float(*f)),
        Some(toml::Value::Integer(i)) => Some(ParamValue::Int(*i)),
        Some(toml::Value::String(s)) => Some(ParamValue::Str(s.clone())),
        Some(v) => return Err(format!("'r' must be a number or \"num/den\", found {v}")),
    };
    let (r_num, r_den) = fraction("rtserver", "r", r.as_ref(), (4, 5))?;
    if r_num == 0 || r_num > r_den {
        return Err(format!("'r' = {r_num}/{r_den} is not in (0, 1]"));
    }
    let mode = match get_str(t, "admission", "eqs")? {
        "eqs" => Mode::Eqs,
        "table" => Mode::Table,
        other => return Err(format!("'admission' must be \"eqs\" or \"table\", found \"{other}\"")),
    };
    Ok(Broker::new(slot, frame, cpus, r_num, r_den, mode))
}

fn requests(t: &toml::Table, key: &str) -> Result<Vec<Req>, String> {
    let Some(v) = t.get(key) else { return Ok(Vec::new()) };
    let arr = v.as_array().ok_or_else(|| format!("'{key}' must be an array of {{ pid, util, period }}"))?;
    arr.iter()
        .map(|r| {
            let r = r.as_table().ok_or_else(|| format!("'{key}': each request is a table {{ pid, util, period }}"))?;
            for k in r.keys() {
                if !["pid", "util", "period", "cpus"].contains(&k.as_str()) {
                    return Err(format!("'{key}': unknown key '{k}' (expected pid, util, period, cpus)"));
                }
            }
            let pid = match r.get("pid") {
                Some(toml::Value::Integer(p)) if (1..=u32::MAX as i64).contains(p) => *p as u32,
                _ => return Err(format!("'{key}': each request needs pid = a positive integer")),
            };
            let util = match r.get("util") {
                Some(toml::Value::Float(f)) => *f,
                Some(toml::Value::Integer(i)) => *i as f64,
                _ => return Err(format!("'{key}': pid {pid} needs util = a number")),
            };
            let period = match r.get("period") {
                Some(toml::Value::String(s)) => parse_duration(s).map_err(|e| format!("'{key}': pid {pid}: period: {e}"))?,
                _ => return Err(format!("'{key}': pid {pid} needs period = a duration like \"40ms\"")),
            };
            let affinity = match r.get("cpus") {
                None => None,
                Some(toml::Value::Array(a)) => Some(
                    a.iter()
                        .map(|c| match c {
                            toml::Value::Integer(c) if (0..64).contains(c) => Ok(CpuId(*c as u16)),
                            other => Err(format!("'{key}': pid {pid}: CPU {other} is not in 0..64")),
                        })
                        .collect::<Result<CpuSet, _>>()?,
                ),
                Some(v) => return Err(format!("'{key}': pid {pid}: cpus must be an array, found {v}")),
            };
            Ok(Req { pid, util, period, affinity })
        })
        .collect()
}

/// Submits one request to the broker: Ok(cpu) or the failures.
fn submit(b: &mut Broker, r: &Req) -> Result<u16, Vec<Failure>> {
    b.check_period(r.period).map_err(|_| Vec::new())?;
    let e = exec_time(r.util, r.period).map_err(|_| Vec::new())?;
    let aff = r.affinity.unwrap_or(CpuSet::first(b.ncpus));
    b.admit(TaskId(r.pid), e, r.period, aff, 0).map_err(|rej| rej.0)
}

fn check_keys(t: &toml::Table, allowed: &[&str]) -> Result<(), String> {
    for k in t.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(format!("unknown input '{k}' (expected {})", allowed.join(", ")));
        }
    }
    Ok(())
}

/// `kind = "rtserver_table"`: the broker admits `requests` in order and builds its
/// dispatch table. Metrics: `admitted`, `cpu.PID` (CPU index, −1 if refused),
/// `refused_eq.PID.CPU` (the check that refused PID on CPU: 1–3 for the equations, 4 the
/// table, 5 affinity), `slot.S.cpuC` (the owning pid, 0 = free), `slots.PID` (slots per
/// frame), `free_slots`, `ts_pct` (the share left to time-sharing, %).
pub fn table_metrics(t: &toml::Table) -> Result<BTreeMap<String, f64>, String> {
    check_keys(t, &["kind", "slot", "frame", "cpus", "r", "admission", "requests"])?;
    let mut b = broker(t)?;
    let reqs = requests(t, "requests")?;
    let mut m = BTreeMap::new();
    let mut admitted = 0;
    for r in &reqs {
        match submit(&mut b, r) {
            Ok(cpu) => {
                admitted += 1;
                m.insert(format!("cpu.{}", r.pid), cpu as f64);
            }
            Err(fails) => {
                m.insert(format!("cpu.{}", r.pid), -1.0);
                for (c, f) in fails.iter().enumerate() {
                    let cpu = match f {
                        Failure::Eq2 { cpu, .. } | Failure::Eq3 { cpu, .. } | Failure::Table { cpu, .. } | Failure::Affinity { cpu } => {
                            *cpu as usize
                        }
                        Failure::Eq1 { .. } => c,
                    };
                    m.insert(format!("refused_eq.{}.{cpu}", r.pid), f.code() as f64);
                }
            }
        }
    }
    m.insert("admitted".into(), admitted as f64);
    let table = b.table();
    for (c, col) in table.cols.iter().enumerate() {
        for (s, owner) in col.iter().enumerate() {
            m.insert(format!("slot.{s}.cpu{c}"), owner.map_or(0.0, |t| t.0 as f64));
        }
    }
    for r in &reqs {
        m.insert(format!("slots.{}", r.pid), table.slots_of(TaskId(r.pid)) as f64);
    }
    let (free, all) = table.free_slots();
    m.insert("free_slots".into(), free as f64);
    m.insert("ts_pct".into(), if all == 0 { 0.0 } else { free as f64 * 100.0 / all as f64 });
    Ok(m)
}

/// `kind = "rtserver_admission"`: `cases = [{ name, existing = [requests], request }]`,
/// each on a fresh broker (the file's `slot`, `frame`, `cpus`, `r`, `admission`; a case
/// may override `cpus` and `r`). The existing requests must all be admitted. Metrics per
/// case: `NAME.code` (0 admitted; else the check that refused it on the last CPU tried:
/// 1–3 the equations, 4 the table), `NAME.cpu` (−1 if refused), and for a refusal by
/// eq. 2 or 3 `NAME.lhs_ms` / `NAME.rhs_ms` (the two sides that failed).
pub fn admission_metrics(t: &toml::Table) -> Result<BTreeMap<String, f64>, String> {
    check_keys(t, &["kind", "slot", "frame", "cpus", "r", "admission", "cases"])?;
    let cases = t.get("cases").and_then(|c| c.as_array()).ok_or("needs cases = [{ name, existing, request }]")?;
    let mut m = BTreeMap::new();
    for c in cases {
        let c = c.as_table().ok_or("each case is a table { name, existing, request }")?;
        check_keys(c, &["name", "existing", "request", "cpus", "r"])?;
        let name = get_str(c, "name", "")?;
        if name.is_empty() {
            return Err("each case needs a name".into());
        }
        let mut input = t.clone();
        for k in ["cpus", "r"] {
            if let Some(v) = c.get(k) {
                input.insert(k.into(), v.clone());
            }
        }
        let mut b = broker(&input)?;
        for r in requests(c, "existing")? {
            submit(&mut b, &r).map_err(|f| format!("case '{name}': existing pid {} is refused: {f:?}", r.pid))?;
        }
        let mut one = toml::Table::new();
        one.insert(
            "request".into(),
            toml::Value::Array(vec![c.get("request").cloned().ok_or_else(|| format!("case '{name}' needs a request"))?]),
        );
        let req = requests(&one, "request")?.pop().unwrap();
        let before: Vec<_> = b.reservations().copied().collect();
        match submit(&mut b, &req) {
            Ok(cpu) => {
                m.insert(format!("{name}.code"), 0.0);
                m.insert(format!("{name}.cpu"), cpu as f64);
            }
            Err(fails) => {
                let after: Vec<_> = b.reservations().copied().collect();
                if before != after {
                    return Err(format!("case '{name}': a refused request changed the reservations"));
                }
                let last = fails.last().ok_or_else(|| format!("case '{name}': the request is malformed"))?;
                m.insert(format!("{name}.code"), last.code() as f64);
                m.insert(format!("{name}.cpu"), -1.0);
                if let Failure::Eq2 { lhs, rhs, .. } | Failure::Eq3 { lhs, rhs, .. } = last {
                    m.insert(format!("{name}.lhs_ms"), *lhs as f64 / 1e6);
                    m.insert(format!("{name}.rhs_ms"), *rhs as f64 / 1e6);
                }
            }
        }
    }
    Ok(m)
}
