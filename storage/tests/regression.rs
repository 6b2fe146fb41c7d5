//! Regression tests: each pins a bug that was found and fixed, and carries its issue number in
//! its name (`issue12_...` = issue 12: a safe function built the mmap backend, and
//! `GUIDELOOM_IO=mmap` turned every default reader into mmap). Regressions that need another
//! module's fixtures stay there, named the same way (`backends::issue8_...`).

use guideloom_formats::TokenFormat;
use guideloom_storage::{
    auto_backend_choice, choose_backend, io_uring_probe, AutoBackend, DirectBackend, MmapBackend,
    PreadBackend, ReadBackend, ReadOptions, StreamReader, UringBackend, Window,
};
use std::path::Path;

use crate::backends::{run_child, token_storage};

/// Every safe public way to obtain a read backend, with what it yields (`name()`).
fn safe_backends(dir: &Path) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("ReadOptions::default()", ReadOptions::default().backend.name()),
        ("AutoBackend::new()", AutoBackend::new().name()),
        ("AutoBackend::default()", AutoBackend::default().name()),
        ("auto_backend_choice()", auto_backend_choice().kind.name()),
        ("PreadBackend", PreadBackend.name()),
        ("DirectBackend::pread()", DirectBackend::pread().name()),
        (
            "a reader opened with default options",
            StreamReader::open(dir, TokenFormat::<u16>::new()).unwrap().options().backend.name(),
        ),
    ];
    for value in [None, Some(""), Some("auto"), Some("pread"), Some("io_uring"), Some("mmap"), Some(" MMAP ")]
    {
        v.push(("AutoBackend::for_env_value", AutoBackend::for_env_value(value).name()));
        v.push(("choose_backend", choose_backend(value).kind.name()));
    }
    if let Ok(u) = UringBackend::new() {
        v.push(("UringBackend::new()", u.name()));
    }
    if let Ok(d) = DirectBackend::io_uring() {
        v.push(("DirectBackend::io_uring()", d.name()));
    }
    v
}

#[test]
fn issue12_no_safe_constructor_yields_mmap_whatever_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    token_storage(dir.path());
    for (what, name) in safe_backends(dir.path()) {
        assert_ne!(name, "mmap", "{what}");
    }
    // The same with GUIDELOOM_IO=mmap set before the process first reads it.
    run_child("regression::no_mmap_child", &[("GUIDELOOM_IO", "mmap"), ("GUIDELOOM_TEST_EXPECT", "mmap")]);
    run_child("regression::no_mmap_child", &[("GUIDELOOM_IO", " MMAP "), ("GUIDELOOM_TEST_EXPECT", "MMAP")]);
    // The mmap backend itself stays reachable through its unsafe constructor.
    // SAFETY: nothing truncates or rewrites this private temp storage while it is mapped.
    let mmap = unsafe { MmapBackend::new() };
    assert_eq!(mmap.name(), "mmap");
}

/// Child half of [`issue12_no_safe_constructor_yields_mmap_whatever_the_environment`]; does nothing
/// in a normal run.
#[test]
fn no_mmap_child() {
    let Ok(expect) = std::env::var("GUIDELOOM_TEST_EXPECT") else { return };
    let want = if io_uring_probe().is_ok() { "io_uring" } else { "pread" };
    let dir = tempfile::tempdir().unwrap();
    let all = token_storage(dir.path());
    for (what, name) in safe_backends(dir.path()) {
        assert_ne!(name, "mmap", "{what}");
    }
    let choice = auto_backend_choice();
    assert_eq!(choice.kind.name(), want);
    assert!(choice.reason.contains(&format!("GUIDELOOM_IO={expect} not honoured")), "{}", choice.reason);
    let opts = ReadOptions::default();
    assert_eq!(opts.backend.name(), want);
    let r = StreamReader::open_with(dir.path(), TokenFormat::<u16>::new(), opts).unwrap();
    let mut raw = Vec::new();
    r.read_many_raw(&[Window::new(0, r.len())], &mut raw).unwrap();
    assert!(raw == all);
    println!("child-checked");
}
