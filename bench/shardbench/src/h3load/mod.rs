//! `shardbench h3load`: HTTP/3 load, as h2load makes HTTP/2 load (Debian's
//! h2load is built without QUIC). quinn-proto drives each connection on
//! its own UDP socket, with GSO and GRO through quinn-udp; `-t` threads
//! share the connections, each thread one `ppoll` loop over its sockets.
//! It takes h2load's flags (`-c -m -n -D -t -N --log-file`) and prints
//! h2load's report lines, so the study reads both alike. The server's
//! certificate is not verified: a load generator, like h2load.

mod conn;
mod wire;

use std::fmt::Write as _;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quinn_proto::crypto::rustls::QuicClientConfig;
use quinn_proto::{ClientConfig, TransportConfig, VarInt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use conn::{Conn, Scratch};

/// GET one https:// URL over HTTP/3, `-c` connections with `-m` requests
/// in flight on each, `-n` requests in all or for `-D` seconds. The
/// server's certificate is not verified (a load generator, as h2load).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The https:// URL to GET.
    url: String,
    /// Connections, each on its own UDP socket.
    #[arg(short = 'c', long = "clients", default_value_t = 1)]
    clients: usize,
    /// Requests in flight on each connection.
    #[arg(short = 'm', long = "max-concurrent-streams", default_value_t = 1)]
    streams: usize,
    /// Requests in all; the run ends when every one is answered.
    #[arg(short = 'n', long = "requests", conflicts_with = "duration")]
    requests: Option<u64>,
    /// Seconds to run instead of a request count.
    #[arg(short = 'D', long = "duration")]
    duration: Option<f64>,
    /// Threads; connection i runs on thread i mod t.
    #[arg(short = 't', long = "threads", default_value_t = 1)]
    threads: usize,
    /// Seconds of silence after which a connection is given up, its
    /// requests in flight counted as errored.
    #[arg(short = 'N', long = "conn-inactivity-timeout", default_value_t = 10)]
    idle: u32,
    /// One line per answered request: start time (Unix seconds), status,
    /// duration in microseconds, tab-separated (h2load's format).
    #[arg(long = "log-file")]
    log_file: Option<PathBuf>,
}

impl Args {
    pub fn run(self) -> io::Result<()> {
        let target = Target::parse(&self.url)?;
        let config = client_config(self.idle)?;
        let threads = self.threads.clamp(1, self.clients.max(1));
        let deadline = self
            .duration
            .map(|s| Instant::now() + Duration::from_secs_f64(s));
        println!("starting benchmark...");
        let start = Instant::now();
        let mut handles = Vec::new();
        for t in 0..threads {
            let mut conns = Vec::new();
            for _ in (t..self.clients).step_by(threads) {
                conns.push(Conn::open(
                    &config,
                    target.addr,
                    &target.host,
                    &target.authority,
                    &target.path,
                    self.streams.max(1),
                )?);
            }
            println!("spawning thread #{t}: {} total client(s).", conns.len());
            let share = self.requests.map(|n| {
                let t = t as u64;
                n / threads as u64 + u64::from(t < n % threads as u64)
            });
            let logged = self.log_file.is_some();
            handles.push(std::thread::spawn(move || {
                run_thread(conns, Budget { left: share }, deadline, logged)
            }));
        }
        let mut total = Tally::default();
        for h in handles {
            let t = h
                .join()
                .map_err(|_| io::Error::other("a load thread panicked"))?;
            total.add(t);
        }
        let elapsed = total.end.map_or(start.elapsed(), |e| e - start);
        if let Some(path) = &self.log_file {
            std::fs::write(path, &total.log)?;
        }
        print!("{}", total.report(elapsed, self.requests));
        Ok(())
    }
}

/// Where the load goes.
struct Target {
    addr: SocketAddr,
    host: String,
    authority: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> io::Result<Target> {
        let bad = || io::Error::other(format!("{url}: not an https://HOST[:PORT]/PATH URL"));
        let rest = url.strip_prefix("https://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                (h, p.parse::<u16>().map_err(|_| bad())?)
            }
            _ => (authority, 443),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let mut addrs: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
        addrs.sort_by_key(|a| !a.is_ipv4());
        let addr = *addrs.first().ok_or_else(bad)?;
        Ok(Target {
            addr,
            host: host.to_owned(),
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// TLS 1.3 with ALPN h3 on aws-lc-rs, any certificate accepted (its
/// signature still checked); no 0-RTT; the idle timeout from `-N`.
fn client_config(idle_secs: u32) -> io::Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(io::Error::other)?;
    let mut config = ClientConfig::new(Arc::new(quic));
    let mut transport = TransportConfig::default();
    let idle = VarInt::from_u32(idle_secs.saturating_mul(1000));
    transport.max_idle_timeout(Some(idle.into()));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// Accepts the server's certificate whatever it is; checks the handshake
/// signature made with it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A thread's requests still to start; `None` under `-D` (until the time
/// is up).
pub struct Budget {
    left: Option<u64>,
}

impl Budget {
    pub fn take(&mut self) -> bool {
        match &mut self.left {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }

    pub fn give_back(&mut self) {
        if let Some(n) = &mut self.left {
            *n += 1;
        }
    }

    fn spent(&self) -> bool {
        self.left == Some(0)
    }
}

/// What a thread counted.
#[derive(Debug, Default)]
pub struct Tally {
    started: u64,
    /// Answered, by status class (index 1–5).
    classes: [u64; 6],
    /// Reset, malformed or cut short.
    failed: u64,
    /// In flight on a connection that was lost.
    errored: u64,
    handshakes: u64,
    body: u64,
    /// When the last request of a `-n` run was answered.
    end: Option<Instant>,
    /// Distinct reasons, for the report (the first few).
    errors: Vec<String>,
    /// `--log-file` lines, when asked for.
    log: String,
    logging: bool,
}

impl Tally {
    fn done(&mut self, status: u16, body: u64, at: SystemTime, took: Duration) {
        self.classes[usize::from(status / 100).min(5)] += 1;
        self.body += body;
        if self.logging {
            let at = at.duration_since(UNIX_EPOCH).unwrap_or_default();
            let us = took.as_micros();
            let (s, sub) = (at.as_secs(), at.subsec_micros());
            let _ = writeln!(self.log, "{s}.{sub:06}\t{status}\t{us}");
        }
    }

    fn failure(&mut self, why: &str) {
        self.failed += 1;
        self.note(why);
    }

    fn lost(&mut self, why: &str) {
        self.note(&format!("connection lost: {why}"));
    }

    fn note(&mut self, why: &str) {
        if self.errors.len() < 8 && !self.errors.iter().any(|e| e == why) {
            self.errors.push(why.to_owned());
        }
    }

    fn answered(&self) -> u64 {
        self.classes.iter().sum()
    }

    fn add(&mut self, t: Tally) {
        self.started += t.started;
        for (a, b) in self.classes.iter_mut().zip(t.classes) {
            *a += b;
        }
        self.failed += t.failed;
        self.errored += t.errored;
        self.handshakes += t.handshakes;
        self.body += t.body;
        self.end = self.end.max(t.end);
        for e in t.errors {
            self.note(&e);
        }
        self.log.push_str(&t.log);
    }

    /// h2load's report lines.
    fn report(&self, elapsed: Duration, asked: Option<u64>) -> String {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let [_, _, ok2, ok3, c4, c5] = self.classes;
        let succeeded = ok2 + ok3;
        let done = self.answered() + self.failed;
        let mut out = String::new();
        for e in &self.errors {
            let _ = writeln!(out, "error: {e}");
        }
        if self.handshakes > 0 {
            let _ = writeln!(out, "Application protocol: h3");
        }
        let _ = writeln!(
            out,
            "\nfinished in {secs:.2}s, {:.2} req/s, {:.2}MB/s",
            succeeded as f64 / secs,
            self.body as f64 / secs / 1e6
        );
        let _ = writeln!(
            out,
            "requests: {} total, {} started, {done} done, {succeeded} succeeded, {} failed, {} errored, 0 timeout",
            asked.unwrap_or(self.started),
            self.started,
            self.failed,
            self.errored
        );
        let _ = writeln!(
            out,
            "status codes: {ok2} 2xx, {ok3} 3xx, {c4} 4xx, {c5} 5xx"
        );
        let _ = writeln!(out, "traffic: {} bytes of response bodies", self.body);
        out
    }
}

/// Longest wait in one `ppoll`: a `-D` deadline is noticed within it.
const MAX_WAIT: Duration = Duration::from_millis(100);

/// One thread's connections to their end: every request of its share
/// answered (or its connections lost), or the `-D` deadline.
fn run_thread(
    mut conns: Vec<Conn>,
    mut budget: Budget,
    deadline: Option<Instant>,
    logging: bool,
) -> Tally {
    let mut tally = Tally {
        logging,
        ..Tally::default()
    };
    let mut scratch = Scratch::new();
    let mut dirty = vec![true; conns.len()];
    let mut fds: Vec<libc::pollfd> = conns
        .iter()
        .map(|c| libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&c.sock),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        let now = Instant::now();
        let time_up = deadline.is_some_and(|d| now >= d);
        let all_answered = budget.spent() && conns.iter().all(|c| c.in_flight() == 0);
        if time_up || all_answered || conns.iter().all(|c| c.closed) {
            tally.end = Some(if time_up {
                deadline.unwrap_or(now)
            } else {
                now
            });
            for c in &mut conns {
                c.close(&mut scratch, now);
            }
            break;
        }
        let mut next = deadline.unwrap_or(now + MAX_WAIT).min(now + MAX_WAIT);
        for (i, c) in conns.iter_mut().enumerate() {
            if let Some(at) = c.deadline() {
                if at <= now {
                    c.timeout(now);
                    dirty[i] = true;
                }
            }
            if std::mem::take(&mut dirty[i]) {
                c.drive(&mut scratch, &mut tally, &mut budget, now);
            }
            if let Some(at) = c.deadline() {
                next = next.min(at);
            }
        }
        let wait = next.saturating_duration_since(Instant::now());
        if !wait_readable(&mut fds, wait) {
            continue;
        }
        let now = Instant::now();
        for (i, fd) in fds.iter().enumerate() {
            if fd.revents != 0 {
                conns[i].receive(&mut scratch, now);
                dirty[i] = true;
            }
        }
    }
    tally.handshakes = conns.iter().filter(|c| c.handshaken()).count() as u64;
    tally
}

/// `ppoll` on `fds` for up to `wait`: whether any is readable.
fn wait_readable(fds: &mut [libc::pollfd], wait: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()`
    // pollfd structs and `ts` a valid timespec, both live for the call; a
    // null signal mask leaves the mask alone.
    let n = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    n > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_address_the_authority_and_the_path() {
        let t = Target::parse("https://127.0.0.1:8443/100.html").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(
            (&*t.host, &*t.authority, &*t.path),
            ("127.0.0.1", "127.0.0.1:8443", "/100.html")
        );
        let t = Target::parse("https://localhost:9443").unwrap();
        assert!(t.addr.is_ipv4(), "IPv4 first: {}", t.addr);
        assert_eq!((t.addr.port(), &*t.path), (9443, "/"));
        let t = Target::parse("https://[::1]:7443/a").unwrap();
        assert_eq!(t.addr, "[::1]:7443".parse().unwrap());
        assert!(Target::parse("http://127.0.0.1:8080/").is_err());
        assert!(Target::parse("https://127.0.0.1:x/").is_err());
    }

    #[test]
    fn budgets_split_and_give_back() {
        let mut b = Budget { left: Some(2) };
        assert!(b.take() && b.take() && !b.take());
        assert!(b.spent());
        b.give_back();
        assert!(b.take());
        let mut d = Budget { left: None };
        assert!((0..1000).all(|_| d.take()) && !d.spent());
    }

    #[test]
    fn the_report_reads_as_h2loads() {
        let mut t = Tally {
            started: 12,
            failed: 1,
            errored: 1,
            handshakes: 2,
            body: 1000,
            ..Tally::default()
        };
        t.classes = [0, 0, 8, 1, 1, 0];
        let text = t.report(Duration::from_secs(2), Some(12));
        let o = crate::load::parse_h2load(&text).expect("parsed");
        assert_eq!(o.requests, 9);
        assert!((o.rps - 4.5).abs() < 1e-9, "{}", o.rps);
        assert_eq!(o.errors, 1 + 1 + 1);
        assert!(o.note.is_empty(), "{}", o.note);
    }
}
