//! HAProxy in front of the server under test: `127.0.0.1:port` → one
//! backend server, in TCP mode (PROXY protocol tests) or HTTP mode (HAProxy
//! as an HTTP/1.1 front and an HTTP/2 client of the server).

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{find_program, loud, poll_until, TempDir};

pub struct Haproxy {
    child: Child,
    pub addr: SocketAddr,
    _dir: TempDir,
}

impl Haproxy {
    /// `mode` is `tcp` or `http`; `server_opts` follow the backend's
    /// address on its server line (`send-proxy-v2`, `proto h2`, `ssl
    /// verify none alpn h2`). None, loudly, when HAProxy is not installed.
    pub fn start(mode: &str, backend: SocketAddr, server_opts: &str) -> Option<Haproxy> {
        let Some(bin) = find_program(&["haproxy"]) else {
            loud("SKIP: haproxy is not installed (apt-get install -y haproxy)");
            return None;
        };
        let dir = TempDir::new("haproxy");
        let addr = SocketAddr::from(([127, 0, 0, 1], super::free_port()));
        let cfg = format!(
            "global\n  maxconn 100\n\
             defaults\n  mode {mode}\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend fe\n  bind {addr}\n  default_backend be\n\
             backend be\n  server s1 {backend} {server_opts}\n"
        );
        let path = dir.path().join("haproxy.cfg");
        fs::write(&path, cfg).unwrap();
        let child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn haproxy");
        let mut h = Haproxy {
            child,
            addr,
            _dir: dir,
        };
        // Listening: a probe from an address the tests do not look for.
        let up = poll_until(Duration::from_secs(10), || TcpStream::connect(addr).is_ok());
        assert!(
            up,
            "haproxy did not listen on {addr}: {:?}",
            h.child.try_wait()
        );
        Some(h)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
