//! An S3-compatible server for tests ([`MotoServer`]: moto's `moto_server`, installed by
//! `tests/s3/setup.sh` into `target/s3-venv`) and a fault-injecting HTTP proxy
//! ([`FaultProxy`]) to put between a client and it. Both listen on 127.0.0.1 only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Environment variable: the `moto_server` executable to use instead of
/// `target/s3-venv/bin/moto_server`.
pub const MOTO_ENV: &str = "GUIDELOOM_MOTO_SERVER";

/// Environment variable: when set (CI sets it), a missing `moto_server` fails the test
/// instead of skipping it.
pub const REQUIRE_S3_ENV: &str = "GUIDELOOM_REQUIRE_S3";

/// The `moto_server` executable, when installed.
pub fn moto_server_path() -> Option<PathBuf> {
    let p = std::env::var_os(MOTO_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target/s3-venv/bin/moto_server"));
    p.is_file().then_some(p)
}

/// A running `moto_server` on 127.0.0.1 (killed when dropped).
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    addr: SocketAddr,
}

/// A free TCP port on 127.0.0.1 (bound and released; a race with another process is possible
/// and shows as a failed start).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

impl MotoServer {
    /// Starts `moto_server` on a free port of 127.0.0.1 and waits (at most 60 s) until it
    /// answers. `None`, with the reason reported as a skip ([`crate::skipped`]), when it is not installed (run
    /// `bash tests/s3/setup.sh`) or does not start, unless [`REQUIRE_S3_ENV`] is set: then it
    /// panics.
    pub fn start(test: &str) -> Option<MotoServer> {
        let skip = |why: String| {
            if std::env::var_os(REQUIRE_S3_ENV).is_some_and(|v| !v.is_empty()) {
                panic!("{test}: {why} ({REQUIRE_S3_ENV} is set)");
            }
            crate::skipped(test, &format!("{why}; run `bash tests/s3/setup.sh` to install moto_server"));
            None
        };
        let Some(exe) = moto_server_path() else {
            return skip("moto_server is not installed (target/s3-venv/bin/moto_server)".into());
        };
        for _ in 0..3 {
            let port = free_port();
            let child = Command::new(&exe)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let mut child = match child {
                Ok(c) => c,
                Err(e) => return skip(format!("cannot run {}: {e}", exe.display())),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(addr).is_ok() {
                    // The port answers; make sure it is this server (not another test's that
                    // took the same free port, which would make this one exit).
                    std::thread::sleep(Duration::from_millis(100));
                    if let Ok(None) = child.try_wait() {
                        return Some(MotoServer { child, addr });
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        skip("moto_server did not start".into())
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The environment a `guideloom` process needs to reach this server through object_store's
    /// S3 builder: the endpoint, plain HTTP allowed, moto's test credentials and a region.
    pub fn client_env(&self) -> [(&'static str, String); 5] {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
        ]
    }

    /// The object_store options that reach this server (`RemoteOptions::store_options`): the
    /// endpoint, plain HTTP allowed, moto's test credentials and a region.
    pub fn store_options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint", self.endpoint()),
            ("aws_allow_http", "true".to_string()),
            ("aws_access_key_id", "test".to_string()),
            ("aws_secret_access_key", "test".to_string()),
            ("aws_region", "us-east-1".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Creates bucket `name` (an unsigned `PUT /name`, which moto accepts).
    pub fn create_bucket(&self, name: &str) {
        let (status, _) = http_request(self.addr, "PUT", &format!("/{name}"), b"");
        assert!(status == 200, "creating bucket {name}: status {status}");
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request with `Connection: close`; the status and the body.
pub fn http_request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let answer = http_request_with(addr, method, path, &[], body);
    (answer.status, answer.body)
}

/// The answer to [`http_request_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    /// The status code.
    pub status: u16,
    /// The header fields, names in lower case (the last of repeated ones).
    pub headers: std::collections::BTreeMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
}

/// One HTTP/1.1 request with the header fields `headers` and `Connection: close`.
pub fn http_request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpAnswer {
    let mut s = TcpStream::connect(addr).expect("connect");
    let extra: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("receive");
    let split = find(&out, b"\r\n\r\n").expect("a response head");
    let head = std::str::from_utf8(&out[..split]).expect("a text response head");
    let mut lines = head.split("\r\n");
    let status =
        lines.next().and_then(|h| h.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    HttpAnswer { status, headers, body: out[split + 4..].to_vec() }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What [`FaultProxy`] does to requests: each request draws one number from a seeded
/// generator and is answered `503 SlowDown` with probability `error_5xx`, closed without an
/// answer with probability `reset`, forwarded with its body cut in half with probability
/// `truncate`, and forwarded whole otherwise; every answer waits `latency` first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Added before every answer.
    pub latency: Duration,
    /// Share of requests answered `503 Slow Down`.
    pub error_5xx: f64,
    /// Share of requests whose connection is closed without an answer.
    pub reset: f64,
    /// Share of requests whose body is cut in half (the header still announces it whole).
    pub truncate: f64,
    /// The generator's seed.
    pub seed: u64,
}

impl Faults {
    /// No fault and no latency.
    pub fn none() -> Self {
        Faults { latency: Duration::ZERO, error_5xx: 0.0, reset: 0.0, truncate: 0.0, seed: 0 }
    }
}

/// Counters of a [`FaultProxy`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Requests received.
    pub requests: u64,
    /// `GET` requests received.
    pub gets: u64,
    /// `PUT` requests received.
    pub puts: u64,
    /// Body bytes of successful (2xx) answers sent to the client.
    pub body_bytes: u64,
    /// Requests answered 503.
    pub errors: u64,
    /// Connections closed without an answer.
    pub resets: u64,
    /// Answers whose body was cut.
    pub truncated: u64,
    /// The most requests in progress at once (received, not yet answered), so far.
    pub max_in_flight: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    gets: AtomicU64,
    puts: AtomicU64,
    body_bytes: AtomicU64,
    errors: AtomicU64,
    resets: AtomicU64,
    truncated: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// One request in progress at the proxy (counted in `in_flight` while it lives).
struct InFlight<'a>(&'a Counters);

impl<'a> InFlight<'a> {
    fn new(c: &'a Counters) -> Self {
        let now = c.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        c.max_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(c)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Shared {
    upstream: SocketAddr,
    faults: Mutex<(Faults, u64)>,
    counters: Counters,
    stop: AtomicBool,
}

/// A fault-injecting HTTP/1.1 proxy on 127.0.0.1 in front of `upstream` (std threads, one
/// per connection; each request is forwarded on a new upstream connection). Stops when
/// dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy").field("addr", &self.addr).field("stats", &self.stats()).finish()
    }
}

impl FaultProxy {
    /// Starts the proxy in front of `upstream` with `faults`.
    pub fn start(upstream: SocketAddr, faults: Faults) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::new((faults, faults.seed)),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || serve(&s, conn));
            }
        });
        FaultProxy { shared, addr }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the faults (the generator restarts from the new seed).
    pub fn set_faults(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap_or_else(PoisonError::into_inner) = (faults, faults.seed);
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        ProxyStats {
            requests: c.requests.load(Ordering::Relaxed),
            gets: c.gets.load(Ordering::Relaxed),
            puts: c.puts.load(Ordering::Relaxed),
            body_bytes: c.body_bytes.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            resets: c.resets.load(Ordering::Relaxed),
            truncated: c.truncated.load(Ordering::Relaxed),
            max_in_flight: c.max_in_flight.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// splitmix64: the next state and a number in `[0, 1)`.
fn draw(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

enum Action {
    Forward,
    Error,
    Reset,
    Truncate,
}

/// Serves the requests of one client connection until it closes.
fn serve(s: &Shared, client: TcpStream) {
    let Ok(read_half) = client.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut client = client;
    loop {
        let Some((head, body)) = read_request(&mut reader) else { return };
        let c = &s.counters;
        let _in_flight = InFlight::new(c);
        c.requests.fetch_add(1, Ordering::Relaxed);
        let method = head.split(' ').next().unwrap_or("").to_string();
        match method.as_str() {
            "GET" => c.gets.fetch_add(1, Ordering::Relaxed),
            "PUT" => c.puts.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        let (faults, action) = {
            let mut g = s.faults.lock().unwrap_or_else(PoisonError::into_inner);
            let f = g.0;
            let x = draw(&mut g.1);
            let action = if x < f.error_5xx {
                Action::Error
            } else if x < f.error_5xx + f.reset {
                Action::Reset
            } else if x < f.error_5xx + f.reset + f.truncate {
                Action::Truncate
            } else {
                Action::Forward
            };
            (f, action)
        };
        if !faults.latency.is_zero() {
            std::thread::sleep(faults.latency);
        }
        match action {
            Action::Error => {
                c.errors.fetch_add(1, Ordering::Relaxed);
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                let resp = format!(
                    "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if client.write_all(resp.as_bytes()).is_err() {
                    return;
                }
            }
            Action::Reset => {
                c.resets.fetch_add(1, Ordering::Relaxed);
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
            Action::Forward | Action::Truncate => {
                let Some(resp) = forward(s.upstream, &head, &body) else {
                    let _ = client.shutdown(Shutdown::Both);
                    return;
                };
                let Some(split) = find(&resp, b"\r\n\r\n") else { return };
                let (rhead, rbody) = (&resp[..split], &resp[split + 4..]);
                let status: u16 = std::str::from_utf8(rhead)
                    .ok()
                    .and_then(|h| h.split(' ').nth(1))
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                let rhead: String = String::from_utf8_lossy(rhead)
                    .split("\r\n")
                    .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
                    .collect::<Vec<_>>()
                    .join("\r\n");
                let cut = matches!(action, Action::Truncate) && rbody.len() > 1 && method == "GET";
                let send = if cut { &rbody[..rbody.len() / 2] } else { rbody };
                let ok = client
                    .write_all(rhead.as_bytes())
                    .and_then(|()| client.write_all(b"\r\n\r\n"))
                    .and_then(|()| client.write_all(send))
                    .is_ok();
                if (200..300).contains(&status) {
                    c.body_bytes.fetch_add(send.len() as u64, Ordering::Relaxed);
                }
                if cut {
                    c.truncated.fetch_add(1, Ordering::Relaxed);
                    let _ = client.shutdown(Shutdown::Both);
                    return;
                }
                if !ok {
                    return;
                }
            }
        }
    }
}

/// One request from `r`: its head (without the final blank line) and its body
/// (`Content-Length` or chunked); `None` at the end of the connection or on a malformed one.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
    }
    let lower = head.to_ascii_lowercase();
    let len = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    if lower.lines().any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked")) {
        // Chunked request body: read it whole and forward it de-chunked.
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        head = head
            .split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("transfer-encoding:"))
            .collect::<Vec<_>>()
            .join("\r\n");
        head.push_str(&format!("\r\nContent-Length: {}\r\n", body.len()));
    }
    Some((head, body))
}

/// Sends the request to `upstream` with `Connection: close` and returns the whole answer.
fn forward(upstream: SocketAddr, head: &str, body: &[u8]) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(upstream).ok()?;
    let mut h: String = head
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
        .collect::<Vec<_>>()
        .join("\r\n");
    h.push_str("\r\nConnection: close\r\n\r\n");
    up.write_all(h.as_bytes()).ok()?;
    up.write_all(body).ok()?;
    let mut out = Vec::new();
    up.read_to_end(&mut out).ok()?;
    Some(out)
}
