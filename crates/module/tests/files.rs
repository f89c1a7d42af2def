//! Module files are read only when they are regular files of bounded size, and reading
//! never blocks (issue 14 item 5): a FIFO, a device, a directory or an oversized file is
//! refused at once with the reason, by every loader of a file (`open_file`, `load`,
//! `Backend::of_file`; the agent's `ctl load` and `vassal sim --load` go through them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vassal_module::{open_file, Backend, MAX_MODULE_BYTES};

/// A directory of the test's own (removed at its end).
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vassal-module-files-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The refusal of `path` by `open_file` and `Backend::of_file`, each within 100 ms.
fn refusal(path: &Path) -> String {
    let t0 = Instant::now();
    let e = open_file(path, 1, &BTreeMap::new(), Default::default()).err().map(|e| e.to_string()).expect("refused");
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(100), "{} took {took:?}", path.display());
    let t0 = Instant::now();
    let e2 = Backend::of_file(path).expect_err("refused").to_string();
    assert!(t0.elapsed() < Duration::from_millis(100));
    assert_eq!(e, e2);
    e
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let d = dir("fifo");
    let fifo = d.join("module.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = refusal(&fifo);
    assert_eq!(e, format!("cannot read module file {}: not a regular file (a FIFO)", fifo.display()));
    // Through a symbolic link too (it is followed, and the target checked).
    let link = d.join("fifo-link.wasm");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    assert!(refusal(&link).ends_with("not a regular file (a FIFO)"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn devices_and_directories_are_refused() {
    assert_eq!(refusal(Path::new("/dev/zero")), "cannot read module file /dev/zero: not a regular file (a character device)");
    let d = dir("devices");
    assert!(refusal(&d).ends_with("not a regular file (a directory)"));
    std::fs::remove_dir_all(&d).unwrap();
    assert!(refusal(Path::new("/nonexistent/x.wasm")).contains("No such file"));
}

#[test]
fn a_file_over_the_bound_is_refused_by_its_size() {
    let d = dir("big");
    let big = d.join("big.wasm");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_MODULE_BYTES + 1).unwrap(); // sparse: no disk, and never read
    let e = refusal(&big);
    assert!(e.contains(&format!("{} bytes", MAX_MODULE_BYTES + 1)) && e.contains("64 MiB"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_regular_file_is_read() {
    // Not a module, but read: the refusal is the WebAssembly host's, not the reader's.
    let d = dir("text");
    let f = d.join("text.wasm");
    std::fs::write(&f, "not a module").unwrap();
    let e = open_file(&f, 1, &BTreeMap::new(), Default::default()).err().unwrap().to_string();
    assert!(e.starts_with("not a valid WebAssembly module"), "{e}");
    // One line, though the parser prints the bad magic number's bytes one per line.
    assert!(e.contains("magic") && !e.contains('\n'), "{e}");
    assert_eq!(Backend::of_file(&f).unwrap(), Backend::Wasm);
    std::fs::remove_dir_all(&d).unwrap();
}
