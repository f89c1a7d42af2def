//! The client library against a scripted stand-in for the agent (no root needed): what a
//! caller sees when the agent refuses the connection, closes it while idle, or closes it
//! (dies) in the middle of a call (issue 14, items 3 and 5).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use vassal_agent::client::{Client, ClientError};
use vassal_agent::wire::{Answer, Call};

/// What the stand-in does with one connection.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Reads a call and answers it with an empty hierarchy.
    Answer,
    /// Reads a call and closes without answering (an agent that died handling it).
    Die,
    /// Writes a `closing` line and closes (an idle connection dropped).
    Closing,
    /// Reads a call, then writes `closing` and closes: the agent's idle timeout crossed
    /// the call (it closes without handling what came after its decision).
    CrossedByClosing,
    /// Writes a refusal at once, shuts its side, and closes after the client did (a
    /// connection over the limits).
    Refuse,
}

const HIERARCHY: &str = "{\"reply\":\"hierarchy\",\"schedulers\":[]}\n";

/// Serves one connection per list (`acts` in order; each list acts on successive calls of
/// one connection), then removes its socket.
fn stand_in(name: &str, conns: Vec<Vec<Act>>) -> (String, JoinHandle<()>) {
    let path: PathBuf = std::env::temp_dir().join(format!("vassal-client-{}-{name}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let p = path.clone();
    let h = std::thread::spawn(move || {
        for acts in conns {
            let (s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            for act in acts {
                let mut line = String::new();
                match act {
                    Act::Answer => {
                        r.read_line(&mut line).unwrap();
                        w.write_all(HIERARCHY.as_bytes()).unwrap();
                    }
                    Act::Die => {
                        r.read_line(&mut line).unwrap();
                        break;
                    }
                    Act::CrossedByClosing => {
                        r.read_line(&mut line).unwrap();
                        w.write_all(b"{\"reply\":\"closing\",\"reason\":\"idle for 5s: the connection is closed\"}\n").unwrap();
                        break;
                    }
                    Act::Closing => {
                        w.write_all(b"{\"reply\":\"closing\",\"reason\":\"idle for 5s: the connection is closed\"}\n").unwrap();
                        break;
                    }
                    Act::Refuse => {
                        let _ =
                            w.write_all(b"{\"reply\":\"refused\",\"reason\":\"too many connections for uid 65534 (at most 8 at once)\"}\n");
                        let _ = w.shutdown(std::net::Shutdown::Write);
                        let _ = r.read_line(&mut line); // drain until the client closes
                        break;
                    }
                }
            }
        }
        drop(listener);
        let _ = std::fs::remove_file(&p);
    });
    (path.to_string_lossy().into_owned(), h)
}

#[test]
fn a_connection_ended_mid_call_is_a_readable_error() {
    let (sock, h) = stand_in("die", vec![vec![Act::Die]]);
    let mut c = Client::connect(&sock).unwrap();
    let e = c.call(&Call::Hierarchy).unwrap_err();
    assert!(matches!(e, ClientError::Closed), "{e:?}");
    assert_eq!(e.to_string(), "the agent closed the connection before answering — it may have died; see its log");
    h.join().unwrap();
    // And the next call, with the agent gone for good, says so too.
    let e = c.call(&Call::Hierarchy).unwrap_err().to_string();
    assert!(e.contains("the agent closed the connection, and a new one to") && e.contains("it may have died"), "{e}");
}

#[test]
fn a_refused_connection_reads_the_refusal() {
    let (sock, h) = stand_in("refuse", vec![vec![Act::Refuse]]);
    let mut c = Client::connect(&sock).unwrap();
    std::thread::sleep(Duration::from_millis(50)); // the refusal is there before the call
    let e = c.ok(&Call::Hierarchy).unwrap_err();
    assert_eq!(e.to_string(), "refused: too many connections for uid 65534 (at most 8 at once)");
    drop(c);
    h.join().unwrap();
}

#[test]
fn an_idle_close_is_transparent() {
    // First connection: one answer, then `closing` (idle). The next call goes over a new
    // connection, which answers.
    let (sock, h) = stand_in("idle", vec![vec![Act::Answer, Act::Closing], vec![Act::Answer, Act::Answer]]);
    let mut c = Client::connect(&sock).unwrap();
    assert!(matches!(c.call(&Call::Hierarchy).unwrap(), Answer::Hierarchy { .. }));
    std::thread::sleep(Duration::from_millis(100)); // the `closing` line has come
    assert!(matches!(c.call(&Call::Hierarchy).unwrap(), Answer::Hierarchy { .. }));
    assert!(matches!(c.call(&Call::Hierarchy).unwrap(), Answer::Hierarchy { .. }));
    drop(c);
    h.join().unwrap();
}

#[test]
fn a_call_met_by_closing_is_sent_again_once() {
    // The call crosses the `closing` line (sent before the agent read it): not carried
    // out, so it is sent again on a new connection.
    let (sock, h) = stand_in("cross", vec![vec![Act::CrossedByClosing], vec![Act::Answer]]);
    let mut c = Client::connect(&sock).unwrap();
    assert!(matches!(c.call(&Call::Hierarchy).unwrap(), Answer::Hierarchy { .. }));
    drop(c);
    h.join().unwrap();
    // Twice `closing` in a row is not retried forever.
    let (sock, h) = stand_in("cross2", vec![vec![Act::CrossedByClosing], vec![Act::CrossedByClosing]]);
    let mut c = Client::connect(&sock).unwrap();
    assert!(matches!(c.call(&Call::Hierarchy).unwrap_err(), ClientError::Closed));
    drop(c);
    h.join().unwrap();
}
