//! BVT configuration tooling (paper 001 §6.1): from the CPU shares of a static set of
//! reserved-effort (RE) threads, the mcu advances, the virtual and physical scheduling
//! windows, and (§6.1.3) the warp values that mimic a priority scheduler. Pure and exact:
//! shares are rationals, every result an integer; no floating point.
//!
//! - **MCU advances** (§6.1.1): "taking the reciprocals of the weights and then scaling so
//!   they are small integers". With shares s_i = a_i/b_i the reciprocals are b_i/a_i; we
//!   multiply by D = lcm(a_i) and divide by the gcd of the results, giving the smallest
//!   integers m_i proportional to 1/s_i. Shares 10/30/60 % → 6, 2, 1.
//! - **Virtual window V** (§6.1.1): "the least common multiple of the MCU advances times
//!   C/mcu": V = (C/mcu)·lcm(m_i). With C = 2 mcu: V = 2·lcm(6, 2, 1) = 12.
//! - **Physical window W** (§6.1.1): the real time for every thread to consume V units of
//!   virtual time: thread i needs V/m_i mcu, so W = Σ V/m_i mcu. Example: 2 + 6 + 12 = 20.
//! - **BVT weights**: the policy ([`crate::bvt`]) takes weights, not advances; w_i =
//!   lcm(m)/m_i gives the same advances (m_i = mcu/w_i in its units): 1, 3, 6.
//! - **Warp per priority** (§6.1.3; priority 1 is the most latency-sensitive, larger numbers
//!   are lower priorities, as in §6.2.2): (1) the current warp is 0 at the lowest priority
//!   level; (2) every thread at the level gets the current warp; (3) at the next higher
//!   level the current warp grows by the largest L_i/w_i there — "the amount the thread's
//!   AVT increases by running for the full L_i"; (4) repeat. A warp time limit of 0 (no
//!   limit) counts as L_i = C ("we assume a value of L_i = C"). Because BVT charges whole
//!   mcu (§2), running L_i advances the AVT by ⌈L_i/mcu⌉·m_i units of the plan's virtual
//!   time (the units of V), which is what we add. Warps are also given in the policy's
//!   units (virtual ns for the weights above: one plan unit is mcu/lcm(m) virtual ns,
//!   rounded up).
//!
//! Input rules: every share is > 0 and their sum is at most 100 % (less leaves room for
//! threads sized by their warp limits, §6.1.1, or for a best-effort aggregate, §6.3);
//! C is at least one mcu, a whole number of mcu; the mcu is > 0.

use vassal_core::Ns;

/// A non-negative rational, always in lowest terms (den > 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    pub num: u128,
    pub den: u128,
}

pub fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn lcm(a: u128, b: u128) -> Result<u128, String> {
    if a == 0 || b == 0 {
        return Ok(0);
    }
    (a / gcd(a, b)).checked_mul(b).ok_or_else(too_large)
}

fn too_large() -> String {
    "bvt plan: the numbers grow too large (shares with very fine fractions?)".to_string()
}

impl Ratio {
    pub fn new(num: u128, den: u128) -> Result<Ratio, String> {
        if den == 0 {
            return Err("bvt plan: a share with denominator 0".into());
        }
        let g = gcd(num, den).max(1);
        Ok(Ratio { num: num / g, den: den / g })
    }
    pub fn int(n: u128) -> Ratio {
        Ratio { num: n, den: 1 }
    }
    pub fn checked_add(self, o: Ratio) -> Result<Ratio, String> {
        let d = lcm(self.den, o.den)?;
        let n = (self.num.checked_mul(d / self.den).ok_or_else(too_large)?)
            .checked_add(o.num.checked_mul(d / o.den).ok_or_else(too_large)?)
            .ok_or_else(too_large)?;
        Ratio::new(n, d)
    }
    /// self ≤ o, exactly.
    pub fn le(self, o: Ratio) -> bool {
        self.num * o.den <= o.num * self.den
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else if 1_000_000u128.is_multiple_of(self.den) || (self.den.is_power_of_two() && self.den <= 1024) {
            // A terminating decimal: print it exactly.
            let mut digits = 0;
            let mut d = 1u128;
            while !(self.num * d).is_multiple_of(self.den) {
                d *= 10;
                digits += 1;
            }
            let scaled = self.num * d / self.den;
            let p = 10u128.pow(digits);
            write!(f, "{}.{:0width$}", scaled / p, scaled % p, width = digits as usize)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// Parses a share in percent, exactly: "10", "12.5", "100/3", optionally with a
/// trailing "%". Refuses negatives, NaN, infinities and anything that is not a number.
pub fn parse_share(s: &str) -> Result<Ratio, String> {
    let t = s.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    let bad = || format!("bvt plan: share '{s}' is not a non-negative number (like 10, 12.5 or 100/3)");
    if let Some((a, b)) = t.split_once('/') {
        let a = parse_share(a).map_err(|_| bad())?;
        let b = parse_share(b).map_err(|_| bad())?;
        if b.num == 0 {
            return Err(format!("bvt plan: share '{s}' divides by zero"));
        }
        let n = a.num.checked_mul(b.den).ok_or_else(too_large)?;
        let d = a.den.checked_mul(b.num).ok_or_else(too_large)?;
        return Ratio::new(n, d);
    }
    let (ip, fp) = t.split_once('.').unwrap_or((t, ""));
    if (ip.is_empty() && fp.is_empty())
        || !ip.chars().all(|c| c.is_ascii_digit())
        || !fp.chars().all(|c| c.is_ascii_digit())
        || ip.len() + fp.len() > 30
    {
        return Err(bad());
    }
    let digits = format!("{ip}{fp}");
    let n: u128 = digits.parse().map_err(|_| bad())?;
    Ratio::new(n, 10u128.pow(fp.len() as u32))
}

/// One thread of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanThread {
    /// Its CPU share, percent.
    pub share_pct: Ratio,
    /// m_i, the mcu advance (§6.1.1).
    pub advance: u64,
    /// The BVT weight giving that advance: lcm(m)/m_i.
    pub weight: u64,
    /// mcu it runs in each physical window (V/m_i).
    pub run_mcu: u64,
    /// Its priority (1 = most latency-sensitive), when priorities were given.
    pub priority: Option<u32>,
    /// L_i as given (0: no limit, counted as C in the warp computation).
    pub warp_limit: Ns,
    /// W_i in the plan's virtual-time units (those of V), §6.1.3.
    pub warp: u64,
    /// W_i in the BVT policy's units (virtual ns, for `weight` above), rounded up.
    pub warp_ns: u64,
}

/// The result of [`plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub threads: Vec<PlanThread>,
    /// Virtual window, in the units of the advances.
    pub v: u64,
    /// Physical window, mcu.
    pub w: u64,
    pub c_mcu: u64,
    pub mcu: Ns,
    /// Σ shares and 100 % − Σ shares, percent.
    pub allocated_pct: Ratio,
    pub unallocated_pct: Ratio,
}

fn to_u64(x: u128) -> Result<u64, String> {
    u64::try_from(x).map_err(|_| too_large())
}

/// Computes a plan (see the module documentation).
///
/// - `shares_pct`: the RE threads' shares in percent (each > 0, sum ≤ 100);
/// - `c_mcu`: the context switch allowance C in mcu (≥ 1);
/// - `priorities`: empty (no warps), or one per thread, 1 = highest;
/// - `warp_limits`: empty (all 0 = no limit), or one L_i per thread in ns;
/// - `mcu`: the minimum charging unit in ns (for L_i and for warps in ns).
pub fn plan(shares_pct: &[Ratio], c_mcu: u64, priorities: &[u32], warp_limits: &[Ns], mcu: Ns) -> Result<Plan, String> {
    if shares_pct.is_empty() {
        return Err("bvt plan: give at least one share".into());
    }
    if c_mcu == 0 {
        return Err("bvt plan: C must be at least 1 mcu (V = C/mcu · lcm of the advances)".into());
    }
    if mcu == 0 {
        return Err("bvt plan: the mcu must be more than 0".into());
    }
    let mut total = Ratio::int(0);
    for (i, s) in shares_pct.iter().enumerate() {
        if s.num == 0 || s.den == 0 {
            return Err(format!("bvt plan: share {i} is {s}%; every share must be more than 0"));
        }
        total = total.checked_add(*s)?;
    }
    if !total.le(Ratio::int(100)) {
        return Err(format!("bvt plan: the shares add up to {total}%, more than 100%"));
    }
    if !priorities.is_empty() && priorities.len() != shares_pct.len() {
        return Err(format!("bvt plan: {} priorities for {} shares; give one per thread (or none)", priorities.len(), shares_pct.len()));
    }
    if !warp_limits.is_empty() && warp_limits.len() != shares_pct.len() {
        return Err(format!("bvt plan: {} warp limits for {} shares; give one per thread (or none)", warp_limits.len(), shares_pct.len()));
    }
    if !warp_limits.is_empty() && priorities.is_empty() {
        return Err("bvt plan: warp limits are used only with priorities (§6.1.3)".into());
    }
    // §6.1.1: reciprocals b_i/a_i, scaled to the smallest integers.
    let d = shares_pct.iter().try_fold(1u128, |acc, s| lcm(acc, s.num))?;
    let n: Vec<u128> = shares_pct.iter().map(|s| s.den.checked_mul(d / s.num).ok_or_else(too_large)).collect::<Result<_, _>>()?;
    let g = n.iter().fold(0u128, |acc, &x| gcd(acc, x));
    let m: Vec<u128> = n.iter().map(|&x| x / g).collect();
    let l = m.iter().try_fold(1u128, |acc, &x| lcm(acc, x))?;
    // V = C/mcu · lcm(m); W = Σ V/m_i.
    let v = (c_mcu as u128).checked_mul(l).ok_or_else(too_large)?;
    let runs: Vec<u128> = m.iter().map(|&mi| v / mi).collect();
    let w = runs.iter().try_fold(0u128, |acc, &r| acc.checked_add(r).ok_or_else(too_large))?;
    // §6.1.3: warps per priority level, from the lowest priority (largest number) up.
    let mut warps = vec![0u128; m.len()];
    if !priorities.is_empty() {
        let limit = |i: usize| warp_limits.get(i).copied().unwrap_or(0);
        // AVT increase for running the full L_i (L_i = 0 counts as C), in whole mcu (§2).
        let gain = |i: usize| -> Result<u128, String> {
            let l_mcu = match limit(i) {
                0 => c_mcu as u128,
                li => (li as u128).div_ceil(mcu as u128),
            };
            l_mcu.checked_mul(m[i]).ok_or_else(too_large)
        };
        let mut levels: Vec<u32> = priorities.to_vec();
        levels.sort_unstable();
        levels.dedup();
        let mut current = 0u128; // step 1
        for (k, &p) in levels.iter().rev().enumerate() {
            if k > 0 {
                // step 3: the largest L_i/w_i at this (higher) level.
                let mut inc = 0u128;
                for i in (0..m.len()).filter(|&i| priorities[i] == p) {
                    inc = inc.max(gain(i)?);
                }
                current = current.checked_add(inc).ok_or_else(too_large)?;
            }
            // step 2
            for i in (0..m.len()).filter(|&i| priorities[i] == p) {
                warps[i] = current;
            }
        }
    }
    let mut threads = Vec::with_capacity(m.len());
    for i in 0..m.len() {
        let warp_ns = warps[i].checked_mul(mcu as u128).ok_or_else(too_large)?.div_ceil(l);
        threads.push(PlanThread {
            share_pct: shares_pct[i],
            advance: to_u64(m[i])?,
            weight: to_u64(l / m[i])?,
            run_mcu: to_u64(runs[i])?,
            priority: priorities.get(i).copied(),
            warp_limit: warp_limits.get(i).copied().unwrap_or(0),
            warp: to_u64(warps[i])?,
            warp_ns: to_u64(warp_ns)?,
        });
    }
    let unallocated = {
        // 100 − total, exactly.
        let n = 100u128 * total.den - total.num;
        Ratio::new(n, total.den)?
    };
    Ok(Plan { threads, v: to_u64(v)?, w: to_u64(w)?, c_mcu, mcu, allocated_pct: total, unallocated_pct: unallocated })
}

/// The paper-style metrics of a plan, by name: `advance.i`, `weight.i`, `run.i` (mcu per
/// window), `V`, `W` (mcu), `warp.i` (plan units) and `warp_ns.i` when priorities were given.
pub fn metrics(p: &Plan) -> Vec<(String, u64)> {
    let mut out = vec![("V".to_string(), p.v), ("W".to_string(), p.w)];
    for (i, t) in p.threads.iter().enumerate() {
        out.push((format!("advance.{i}"), t.advance));
        out.push((format!("weight.{i}"), t.weight));
        out.push((format!("run.{i}"), t.run_mcu));
        if t.priority.is_some() {
            out.push((format!("warp.{i}"), t.warp));
            out.push((format!("warp_ns.{i}"), t.warp_ns));
        }
    }
    out
}

impl Plan {
    /// A readable table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "BVT plan (paper 001 §6.1): C = {} mcu, mcu = {}; shares allocated {}%, unallocated {}%\n",
            self.c_mcu,
            vassal_core::fmt_duration(self.mcu),
            self.allocated_pct,
            self.unallocated_pct
        ));
        s.push_str(&format!(
            "{:>3} {:>10} {:>8} {:>8} {:>10} {:>8} {:>10} {:>10} {:>14}\n",
            "#", "share %", "advance", "weight", "run/W mcu", "prio", "L", "warp", "warp (bvt ns)"
        ));
        for (i, t) in self.threads.iter().enumerate() {
            let (prio, l, warp, warp_ns) = match t.priority {
                Some(p) => (
                    p.to_string(),
                    if t.warp_limit == 0 { "C".to_string() } else { vassal_core::fmt_duration(t.warp_limit) },
                    t.warp.to_string(),
                    t.warp_ns.to_string(),
                ),
                None => ("-".into(), "-".into(), "-".into(), "-".into()),
            };
            s.push_str(&format!(
                "{:>3} {:>10} {:>8} {:>8} {:>10} {:>8} {:>10} {:>10} {:>14}\n",
                i,
                t.share_pct.to_string(),
                t.advance,
                t.weight,
                t.run_mcu,
                prio,
                l,
                warp,
                warp_ns
            ));
        }
        s.push_str(&format!(
            "virtual window V = {} (C/mcu x lcm of the advances); physical window W = {} mcu = {}\n",
            self.v,
            self.w,
            vassal_core::fmt_duration((self.w as u128 * self.mcu as u128).min(u64::MAX as u128) as u64)
        ));
        s
    }
}
