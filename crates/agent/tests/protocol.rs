//! The wire protocol under random and malformed input: decoding never panics, every
//! decodable call handled for an unprivileged caller gets exactly one answer, and a
//! malformed one gets an `error` answer naming the problem (issue 6, tests).

use proptest::prelude::*;
use vassal_agent::broker::{handle, Caller, Shared};
use vassal_agent::guardian::Ledger;
use vassal_agent::state::Agent;
use vassal_agent::wire::{decode, encode, Answer, Call};
use vassal_agent::Config;

fn shared() -> Shared {
    let agent = Agent::new(Config::default(), Ledger::new().unwrap(), vassal_agent::kernel::now_ns()).unwrap();
    Shared::new(agent)
}

/// Fragments that make near-miss calls more likely than uniform bytes would.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("\"op\":".to_string()),
        Just("\"pid\":".to_string()),
        Just(",".to_string()),
        prop_oneof![
            Just("join"),
            Just("leave"),
            Just("release"),
            Just("param"),
            Just("message"),
            Just("tasks"),
            Just("hierarchy"),
            Just("register"),
            Just("unregister"),
            Just("status"),
            Just("kind"),
            Just("set"),
            Just("reserve"),
            Just("util"),
            Just("period_ns"),
            Just("delay_ns"),
            Just("request"),
            Just("usage"),
        ]
        .prop_map(|s| format!("\"{s}\"")),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
        "[a-z:\\[\\]\"{},0-9.-]{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn near_miss_calls_are_answered(parts in proptest::collection::vec(fragment(), 0..24)) {
        let line = parts.concat();
        let sh = shared();
        let nobody = Caller { pid: 1, uid: 65534 };
        let answer = match decode(line.as_bytes()) {
            Ok(call) => handle(&sh, nobody, call),
            Err(e) => {
                prop_assert!(!e.is_empty());
                Answer::error(e)
            }
        };
        // Exactly one line, which decodes back to the same answer.
        let text = encode(&answer);
        prop_assert_eq!(text.matches('\n').count(), 1);
        let back: Answer = serde_json::from_str(text.trim_end()).unwrap();
        prop_assert_eq!(back, answer);
    }

    #[test]
    fn well_formed_calls_round_trip(pid in 1i32..i32::MAX, w in any::<i64>(), name in "[a-z_]{1,12}") {
        for call in [
            Call::Param { pid, tid: None, name: name.clone(), value: w },
            Call::Leave { pid, tid: None },
            Call::Join { pid, tid: None, sched: Some(name.clone()), params: [(name.clone(), w)].into() },
        ] {
            let line = encode(&call);
            prop_assert_eq!(decode(line.trim_end().as_bytes()), Ok(call));
        }
    }
}

#[test]
fn an_unprivileged_caller_cannot_register_or_touch_root_processes() {
    let sh = shared();
    let nobody = Caller { pid: 1, uid: 65534 };
    let me = std::process::id() as i32;
    let a = handle(&sh, nobody, decode(format!(r#"{{"op":"join","pid":{me}}}"#).as_bytes()).unwrap());
    if vassal_agent::kernel::is_root() {
        assert!(matches!(a, Answer::Refused { ref reason } if reason.contains("does not belong")), "{a:?}");
    }
    let a = handle(&sh, nobody, decode(br#"{"op":"register","name":"t","kind":"timed","usage":{"reserved":{"cpus":0.1}}}"#).unwrap());
    assert!(matches!(a, Answer::Refused { ref reason } if reason.contains("only root")), "{a:?}");
    let a = handle(&sh, nobody, decode(br#"{"op":"hierarchy"}"#).unwrap());
    assert!(matches!(a, Answer::Hierarchy { ref schedulers } if schedulers.len() == 1));
}
