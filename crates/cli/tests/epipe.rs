//! Every `vassal` command into a closed pipe ends as coreutils do (issue 14 item 5): killed
//! by SIGPIPE at its first write after the reader left (status 141 in a shell), with
//! nothing on stderr — not a panic ("failed printing to stdout: Broken pipe", exit 101).
//! The agent case (`vassal ctl hierarchy`) is in agent_clients.rs (root).

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

fn vassal(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vassal"));
    c.args(args).stderr(Stdio::piped());
    c
}

#[test]
fn output_into_a_closed_pipe_ends_by_sigpipe_quietly() {
    for args in [&["policies"][..], &["--help"], &["bvt", "plan", "--shares", "10,30,60", "--c-mcu", "2"]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // `vassal ... | (exec 0<&-; true)`
        let out = vassal(args).stdout(Stdio::from(writer)).output().unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "vassal {args:?}: {:?}", out.status);
        assert!(out.stderr.is_empty(), "vassal {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn a_reader_that_leaves_early_gets_what_it_read() {
    // `vassal policies | head -1`: the first line arrives; the rest either fits in the pipe
    // (exit 0) or meets a closed pipe (SIGPIPE) — never an error message.
    let mut child = vassal(&["policies"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("rr "), "{first:?}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success() || out.status.signal() == Some(libc::SIGPIPE), "{:?}", out.status);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}
