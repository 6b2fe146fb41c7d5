//! The project's fault-injecting proxy ([`guideloom_testkit::s3::FaultProxy`]) as a standalone
//! program, so that a process that is not Rust (benches/remote.py's MosaicML Streaming peer)
//! can go through the same proxy as guideloom.
//!
//! Usage: `fault_proxy UPSTREAM_PORT LATENCY_MS`. Listens on a free port of 127.0.0.1 in front
//! of `127.0.0.1:UPSTREAM_PORT`, adds `LATENCY_MS` to every request, prints its port on the
//! first line of stdout, then reads commands from stdin, one a line:
//!
//! - `stats`: prints the counters so far as one JSON object (`requests`, `gets`, `puts`,
//!   `body_bytes`: body bytes of 2xx answers sent to clients);
//! - `latency MS`: replaces the added latency;
//!
//! and stops at the end of stdin.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::time::Duration;

use guideloom_testkit::s3::{FaultProxy, Faults};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: fault_proxy UPSTREAM_PORT LATENCY_MS";
    let [port, latency] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let (Ok(port), Ok(latency)) = (port.parse::<u16>(), latency.parse::<u64>()) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let faults = |ms: u64| Faults { latency: Duration::from_millis(ms), ..Faults::none() };
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], port)), faults(latency));
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", proxy.addr().port());
    let _ = out.flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["stats"] => {
                let s = proxy.stats();
                let _ = writeln!(
                    out,
                    "{{\"requests\": {}, \"gets\": {}, \"puts\": {}, \"body_bytes\": {}, \"errors\": {}, \"resets\": {}, \"truncated\": {}}}",
                    s.requests, s.gets, s.puts, s.body_bytes, s.errors, s.resets, s.truncated
                );
            }
            ["latency", ms] => match ms.parse::<u64>() {
                Ok(ms) => {
                    proxy.set_faults(faults(ms));
                    let _ = writeln!(out, "ok");
                }
                Err(_) => {
                    let _ = writeln!(out, "error: not a number of milliseconds: {ms}");
                }
            },
            _ => {
                let _ = writeln!(out, "error: unknown command: {line}");
            }
        }
        let _ = out.flush();
    }
}
