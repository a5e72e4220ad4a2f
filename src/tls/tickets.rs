//! Stateless session tickets, the same in every shard, with keys that are
//! forgotten: a key that no longer exists cannot open a recorded ticket, so
//! a later compromise of the process or of the key file does not decrypt
//! the sessions (TLS 1.2 master secrets, TLS 1.3 resumption secrets) of
//! earlier periods.
//!
//! Two sources of keys:
//!
//! - **Random** (no `tls_ticket_key_file`): each [`ROTATION_SECS`] period
//!   gets a fresh random key. It seals tickets during its period, opens
//!   them during the next, and is dropped when the one after begins. Keys
//!   are never derived from anything long-lived.
//! - **Key file** (`tls_ticket_key_file`, for replicas behind one load
//!   balancer): 1 to [`MAX_FILE_KEYS`] keys of [`KEY_LEN`] random bytes,
//!   concatenated. As with nginx's `ssl_session_ticket_key` and HAProxy's
//!   `tls-ticket-keys`, the first key seals and every key opens. The
//!   operator rotates: prepends a new key and drops the oldest (README,
//!   "Session ticket keys"). The file is reread when it changes; a key
//!   dropped from it is gone from the process at once.
//!
//! Time comes from a [`Clock`], so tests can step through periods.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use arc_swap::ArcSwap;
use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::hmac;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

/// Length of one random key's period: it seals tickets for this long and
/// opens them for one period more. Also the lifetime hint with a key file,
/// whose keys should be rotated no faster (README).
pub const ROTATION_SECS: u64 = 6 * 3600;

/// Bytes of one key in `tls_ticket_key_file` (`openssl rand 32`).
pub const KEY_LEN: usize = 32;

/// Most keys a key file may hold: the sealing one, the previous one, and
/// room to stage a next key for decryption before it starts sealing.
pub const MAX_FILE_KEYS: usize = 4;

/// Bytes of a ticket before the sealed state: key name, then nonce.
const NAME_LEN: usize = 16;
const NONCE_LEN: usize = 12;

/// Most bytes accepted as a ticket; anything longer is not one of ours.
const MAX_TICKET: usize = 4096;

/// Wall-clock seconds since the Unix epoch.
pub trait Clock: Send + Sync {
    fn unix_secs(&self) -> u64;
}

/// The system's clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn unix_secs(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
}

/// The random key period that `unix_secs` falls in.
fn period_of(unix_secs: u64) -> u64 {
    unix_secs / ROTATION_SECS
}

/// One ticket key: a public name that says which key sealed a ticket, and
/// the AES-256-GCM key.
struct Key {
    name: [u8; NAME_LEN],
    aead: LessSafeKey,
}

impl Key {
    /// Name and AEAD key from 32 secret bytes (a key file's key, or random
    /// bytes): two HMAC-SHA256 outputs, so the public name says nothing
    /// about the AEAD key.
    fn from_secret(secret: &[u8; KEY_LEN]) -> Key {
        let prk = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let n = hmac::sign(&prk, b"shardhttpd ticket key name");
        let k = hmac::sign(&prk, b"shardhttpd ticket key aead");
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&n.as_ref()[..NAME_LEN]);
        let key = UnboundKey::new(&aead::AES_256_GCM, k.as_ref())
            .expect("an HMAC-SHA256 output is a valid AES-256 key");
        Key {
            name,
            aead: LessSafeKey::new(key),
        }
    }

    fn random(rng: &SystemRandom) -> anyhow::Result<Key> {
        let mut secret = [0u8; KEY_LEN];
        rng.fill(&mut secret)
            .map_err(|_| anyhow::anyhow!("no randomness for a ticket key"))?;
        let key = Key::from_secret(&secret);
        secret.fill(0);
        Ok(key)
    }
}

/// The keys in use: `keys[0]` seals, all open. Shared by reference, so a
/// key exists once in memory and is freed when the last set holding it is.
struct KeySet {
    keys: Vec<Arc<Key>>,
    /// Random keys: the period of `keys[0]`. Unused with a key file.
    period: u64,
}

/// Where the keys come from.
enum Source {
    Random,
    File {
        path: PathBuf,
        /// The file's (size, mtime ns, ctime, inode) when last read.
        stamp: Mutex<Option<Stamp>>,
    },
}

type Stamp = (u64, i64, i64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.size(),
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        m.ctime(),
        m.ino(),
    ))
}

/// Permission bits that make `tls_ticket_key_file` refused: whoever
/// reads the keys can decrypt every session they sealed a ticket for, and
/// whoever writes them can choose them. Its owner may read it, and so may
/// its group (a root-owned key read through a group the service joins is
/// how a rotated file is picked up without a restart, deploy/README.md),
/// with a warning at start; no one else, and no one but the owner writes.
const REFUSED_MODE: u32 = 0o027;

/// Group read: allowed, warned about at start.
const WARNED_MODE: u32 = 0o040;

/// Read and check `tls_ticket_key_file`: mode 600 or 640 (see
/// `REFUSED_MODE`); 1 to [`MAX_FILE_KEYS`] keys of exactly [`KEY_LEN`]
/// bytes each, the sealing key first, none of them all zero.
pub fn read_key_file(path: &Path) -> anyhow::Result<Vec<[u8; KEY_LEN]>> {
    let reading = || {
        format!(
            "config key `tls_ticket_key_file`: reading {}",
            path.display()
        )
    };
    let mut file = File::open(path).with_context(reading)?;
    let mode = file.metadata().with_context(reading)?.mode() & 0o777;
    if mode & REFUSED_MODE != 0 {
        bail!(
            "config key `tls_ticket_key_file`: {} (mode {mode:03o}) can be read by other users, or written by its group or other users: whoever reads the ticket keys can decrypt the sessions they sealed, whoever writes them chooses them; chmod 600 it (or 640, for a group only the server is in)",
            path.display(),
        );
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).with_context(reading)?;
    let n = bytes.len();
    if n == 0 || n % KEY_LEN != 0 || n / KEY_LEN > MAX_FILE_KEYS {
        bytes.fill(0);
        bail!(
            "config key `tls_ticket_key_file`: {} holds {n} bytes; it must hold 1 to {MAX_FILE_KEYS} keys of exactly {KEY_LEN} random bytes each, the sealing key first (`openssl rand {KEY_LEN} > ticket.key`)",
            path.display(),
        );
    }
    // A placeholder left in place (`head -c 32 /dev/zero`, a file
    // template): every ticket it seals opens for anyone.
    let zero = bytes
        .chunks_exact(KEY_LEN)
        .position(|k| k.iter().all(|&b| b == 0));
    if let Some(i) = zero {
        bytes.fill(0);
        bail!(
            "config key `tls_ticket_key_file`: key {} of {} is {KEY_LEN} zero bytes, not random: anyone could open the tickets it seals; write random bytes (`openssl rand {KEY_LEN}`)",
            i + 1,
            path.display(),
        );
    }
    let keys = bytes
        .chunks_exact(KEY_LEN)
        .map(|c| c.try_into().expect("chunks of KEY_LEN"))
        .collect();
    bytes.fill(0);
    Ok(keys)
}

/// Said once, at start: a key file its group may read.
fn warn_group_readable(path: &Path) {
    let mode = std::fs::metadata(path).map_or(0, |m| m.mode() & 0o777);
    if mode & WARNED_MODE != 0 {
        tracing::warn!(
            file = %path.display(),
            "the session-ticket key file is readable by its group (mode {mode:03o}); keep that group to the server's user alone, or chmod 600 it"
        );
    }
}

/// Ticket key changes, by result (a key file that fails to load keeps the
/// previous keys).
fn rotations_metric() -> prometheus::IntCounterVec {
    let metric = prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "shardhttpd_tls_ticket_key_rotations_total",
            "Session-ticket key changes (a new random key per period, or a reread key file), by result.",
        ),
        &["result"],
    )
    .expect("valid metric");
    // Every result exists at 0 from start.
    for result in ["success", "failure"] {
        metric.with_label_values(&[result]);
    }
    metric
}

fn changed_metric() -> prometheus::Gauge {
    prometheus::Gauge::new(
        "shardhttpd_tls_ticket_key_changed_timestamp_seconds",
        "When the session-ticket sealing key last changed, Unix seconds.",
    )
    .expect("valid metric")
}

/// Seals and opens session tickets for every shard.
pub struct Ticketer {
    source: Source,
    keys: ArcSwap<KeySet>,
    /// Held while replacing `keys`, so concurrent shards rotate once.
    rotating: Mutex<()>,
    clock: Arc<dyn Clock>,
    rng: SystemRandom,
    rotations: prometheus::IntCounterVec,
    changed: prometheus::Gauge,
}

impl fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Random => "random",
            Source::File { .. } => "file",
        };
        f.debug_struct("Ticketer")
            .field("source", &source)
            .field("keys", &self.keys.load().keys.len())
            .finish()
    }
}

impl Ticketer {
    /// Random keys, one per [`ROTATION_SECS`] period.
    pub fn random(clock: Arc<dyn Clock>) -> anyhow::Result<Ticketer> {
        let rng = SystemRandom::new();
        let now = clock.unix_secs();
        let set = KeySet {
            keys: vec![Arc::new(Key::random(&rng)?)],
            period: period_of(now),
        };
        Ok(Ticketer::with(Source::Random, set, clock, rng))
    }

    /// The keys of `tls_ticket_key_file`, reread by [`tick`](Self::tick)
    /// when the file changes.
    pub fn from_file(path: &Path, clock: Arc<dyn Clock>) -> anyhow::Result<Ticketer> {
        let before = stamp(path);
        let keys = read_key_file(path)?;
        warn_group_readable(path);
        let set = KeySet {
            keys: keys.iter().map(|k| Arc::new(Key::from_secret(k))).collect(),
            period: 0,
        };
        let source = Source::File {
            path: path.to_owned(),
            stamp: Mutex::new(before),
        };
        Ok(Ticketer::with(source, set, clock, SystemRandom::new()))
    }

    fn with(source: Source, set: KeySet, clock: Arc<dyn Clock>, rng: SystemRandom) -> Ticketer {
        let t = Ticketer {
            source,
            keys: ArcSwap::from_pointee(set),
            rotating: Mutex::new(()),
            rng,
            rotations: rotations_metric(),
            changed: changed_metric(),
            clock,
        };
        t.changed.set(t.clock.unix_secs() as f64);
        t
    }

    /// Collectors for the metrics registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.rotations.clone()),
            Box::new(self.changed.clone()),
        ]
    }

    /// Bring the keys up to date: a new random key when a period has
    /// begun (the one two periods old is dropped), or the key file reread
    /// when it changed. Called on every seal and open, and every 250 ms by
    /// the TLS watcher, so an expired key is forgotten even when no client
    /// comes.
    pub fn tick(&self) {
        match &self.source {
            Source::Random => {
                self.current();
            }
            Source::File { path, stamp: seen } => {
                let now = stamp(path);
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                if now != *seen {
                    *seen = now;
                    self.reread(path);
                }
            }
        }
    }

    fn reread(&self, path: &Path) {
        match read_key_file(path) {
            Ok(keys) => {
                let _guard = self.rotating.lock().unwrap_or_else(|e| e.into_inner());
                self.keys.store(Arc::new(KeySet {
                    keys: keys.iter().map(|k| Arc::new(Key::from_secret(k))).collect(),
                    period: 0,
                }));
                self.changed.set(self.clock.unix_secs() as f64);
                tracing::info!(
                    keys = keys.len(),
                    "session-ticket key file reread; its first key now seals tickets"
                );
                self.rotations.with_label_values(&["success"]).inc();
            }
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "session-ticket key file unusable; keeping the previous keys"
                );
                self.rotations.with_label_values(&["failure"]).inc();
            }
        }
    }

    /// The keys for now. For random keys, the first caller in a new period
    /// makes its key and keeps the previous period's to open tickets.
    fn current(&self) -> arc_swap::Guard<Arc<KeySet>> {
        let set = self.keys.load();
        if !matches!(self.source, Source::Random) {
            return set;
        }
        let period = period_of(self.clock.unix_secs());
        if set.period == period {
            return set;
        }
        drop(set);
        let _guard = self.rotating.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.keys.load_full();
        if old.period == period {
            return self.keys.load();
        }
        let Ok(fresh) = Key::random(&self.rng) else {
            // Without randomness keep sealing with the old key rather than
            // failing every handshake; its period will be retried.
            self.rotations.with_label_values(&["failure"]).inc();
            return self.keys.load();
        };
        let mut keys = vec![Arc::new(fresh)];
        // The previous period's key still opens; anything older (or a
        // clock that went back) is dropped.
        if old.period + 1 == period {
            keys.extend(old.keys.first().cloned());
        }
        self.keys.store(Arc::new(KeySet { keys, period }));
        self.rotations.with_label_values(&["success"]).inc();
        self.changed.set(self.clock.unix_secs() as f64);
        self.keys.load()
    }

    /// The lifetime hint sent with a ticket sealed now: with random keys,
    /// until the end of the next period (when its key is dropped), so
    /// between one and two periods; with a key file, one period.
    fn lifetime_at(&self, unix_secs: u64) -> u32 {
        match self.source {
            Source::Random => (2 * ROTATION_SECS - unix_secs % ROTATION_SECS) as u32,
            Source::File { .. } => ROTATION_SECS as u32,
        }
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.lifetime_at(self.clock.unix_secs())
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let set = self.current();
        let key = set.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&key.name);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = key
            .aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.name),
                &mut out[NAME_LEN + NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() > MAX_TICKET || cipher.len() < NAME_LEN + NONCE_LEN + 16 {
            return None;
        }
        let set = self.current();
        // Not secret: the name only says which key to try.
        let key = set.keys.iter().find(|k| cipher[..NAME_LEN] == k.name)?;
        let nonce: [u8; NONCE_LEN] = cipher[NAME_LEN..NAME_LEN + NONCE_LEN].try_into().ok()?;
        let mut buf = cipher[NAME_LEN + NONCE_LEN..].to_vec();
        let n = key
            .aead
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.name),
                &mut buf,
            )
            .ok()?
            .len();
        buf.truncate(n);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A clock the test sets.
    struct TestClock(AtomicU64);

    impl Clock for TestClock {
        fn unix_secs(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    impl TestClock {
        fn at(secs: u64) -> Arc<TestClock> {
            Arc::new(TestClock(AtomicU64::new(secs)))
        }
        fn set(&self, secs: u64) {
            self.0.store(secs, Ordering::Relaxed);
        }
    }

    /// The start of some period, well after the epoch.
    const T0: u64 = 20_000 * ROTATION_SECS;

    fn rotations(t: &Ticketer, result: &str) -> u64 {
        t.rotations.with_label_values(&[result]).get()
    }

    /// A key file in a fresh directory; replaced by rename, as the README
    /// tells operators to.
    struct KeyFile {
        dir: PathBuf,
        path: PathBuf,
    }

    impl KeyFile {
        fn new(tag: &str, bytes: &[u8]) -> KeyFile {
            let dir = std::env::temp_dir()
                .join(format!("shardhttpd-tickets-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let f = KeyFile {
                path: dir.join("ticket.key"),
                dir,
            };
            f.replace(bytes);
            f
        }
        fn replace(&self, bytes: &[u8]) {
            self.replace_with_mode(bytes, 0o600);
        }
        fn replace_with_mode(&self, bytes: &[u8], mode: u32) {
            use std::os::unix::fs::PermissionsExt;
            let tmp = self.dir.join("ticket.key.tmp");
            std::fs::write(&tmp, bytes).unwrap();
            // Whatever the umask.
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::rename(&tmp, &self.path).unwrap();
        }
    }

    impl Drop for KeyFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn keys(ks: &[u8]) -> Vec<u8> {
        ks.iter().flat_map(|&k| [k; KEY_LEN]).collect()
    }

    #[test]
    fn random_key_seals_for_its_period_opens_for_the_next_then_is_forgotten() {
        let clock = TestClock::at(T0 + 5);
        let t = Ticketer::random(clock.clone()).unwrap();
        let first = t.encrypt(b"state 1").unwrap();
        // Late in the same period: the same key, no rotation.
        clock.set(T0 + ROTATION_SECS - 1);
        assert_eq!(t.decrypt(&first).unwrap(), b"state 1");
        assert_eq!(t.encrypt(b"x").unwrap()[..NAME_LEN], first[..NAME_LEN]);
        assert_eq!(rotations(&t, "success"), 0);
        // The next period: a new key seals, the old one still opens.
        clock.set(T0 + ROTATION_SECS);
        let second = t.encrypt(b"state 2").unwrap();
        assert_ne!(second[..NAME_LEN], first[..NAME_LEN]);
        assert_eq!(t.decrypt(&first).unwrap(), b"state 1");
        assert_eq!(rotations(&t, "success"), 1);
        // The one after: the first key is gone, the second still opens.
        clock.set(T0 + 2 * ROTATION_SECS);
        t.tick();
        assert_eq!(rotations(&t, "success"), 2);
        assert!(t.decrypt(&first).is_none(), "a key outlived two periods");
        assert_eq!(t.decrypt(&second).unwrap(), b"state 2");
        assert_eq!(t.keys.load().keys.len(), 2);
        // A jump over a whole period forgets every earlier key.
        clock.set(T0 + 4 * ROTATION_SECS);
        t.tick();
        assert!(t.decrypt(&second).is_none());
        assert_eq!(t.keys.load().keys.len(), 1);
    }

    #[test]
    fn random_keys_are_not_shared_between_processes() {
        let clock = TestClock::at(T0);
        let a = Ticketer::random(clock.clone()).unwrap();
        let b = Ticketer::random(clock).unwrap();
        let ticket = a.encrypt(b"state").unwrap();
        assert!(b.decrypt(&ticket).is_none());
        assert_eq!(a.decrypt(&ticket).unwrap(), b"state");
    }

    /// The hint is how long the ticket will still open: to the end of the
    /// next period with random keys; one period with a key file.
    #[test]
    fn lifetime_hint_runs_to_the_end_of_the_next_period() {
        let clock = TestClock::at(T0);
        let t = Ticketer::random(clock.clone()).unwrap();
        for (at, hint) in [
            (T0, 2 * ROTATION_SECS),
            (T0 + 1, 2 * ROTATION_SECS - 1),
            (T0 + ROTATION_SECS - 1, ROTATION_SECS + 1),
            (T0 + ROTATION_SECS + 60, 2 * ROTATION_SECS - 60),
        ] {
            clock.set(at);
            assert_eq!(u64::from(t.lifetime()), hint, "at {at}");
        }
        let f = KeyFile::new("hint", &keys(&[1]));
        let t = Ticketer::from_file(&f.path, clock).unwrap();
        assert_eq!(u64::from(t.lifetime()), ROTATION_SECS);
    }

    #[test]
    fn key_file_sizes() {
        let f = KeyFile::new("sizes", &[7; KEY_LEN]);
        // Exactly one key, the documented size.
        assert_eq!(read_key_file(&f.path).unwrap(), vec![[7; KEY_LEN]]);
        f.replace(&keys(&[1, 2, 3, 4]));
        assert_eq!(read_key_file(&f.path).unwrap().len(), MAX_FILE_KEYS);
        for bad in [
            0,
            1,
            KEY_LEN - 1,
            KEY_LEN + 1,
            48,
            80,
            (MAX_FILE_KEYS + 1) * KEY_LEN,
        ] {
            f.replace(&vec![9; bad]);
            let e = format!("{:#}", read_key_file(&f.path).unwrap_err());
            assert!(
                e.contains("tls_ticket_key_file") && e.contains("32"),
                "{bad}: {e}"
            );
        }
    }

    /// A key of 32 zero bytes is a placeholder, not a key: refused
    /// wherever it is in the file, naming the file.
    #[test]
    fn key_file_with_a_zero_key_is_refused() {
        let f = KeyFile::new("zero", &[0; KEY_LEN]);
        for (bytes, which) in [
            (vec![0; KEY_LEN], "key 1 of"),
            (keys(&[1, 0]), "key 2 of"),
            (keys(&[1, 2, 3, 0]), "key 4 of"),
        ] {
            f.replace(&bytes);
            let e = format!("{:#}", read_key_file(&f.path).unwrap_err());
            assert!(
                e.contains("tls_ticket_key_file")
                    && e.contains(&f.path.display().to_string())
                    && e.contains("zero")
                    && e.contains(which),
                "{e}"
            );
        }
        // One zero byte is just a byte.
        let mut almost = vec![0; KEY_LEN];
        almost[KEY_LEN - 1] = 1;
        f.replace(&almost);
        assert_eq!(read_key_file(&f.path).unwrap().len(), 1);
    }

    /// Owner read/write and group read are accepted; other users' access
    /// and group write are refused, at start and on a reread (which keeps
    /// the previous keys).
    #[test]
    fn key_file_open_to_others_is_refused() {
        for mode in [0o400, 0o600, 0o640, 0o440] {
            let f = KeyFile::new("mode-ok", &[]);
            f.replace_with_mode(&[7; KEY_LEN], mode);
            assert!(read_key_file(&f.path).is_ok(), "mode {mode:o}");
        }
        for mode in [0o644, 0o604, 0o660, 0o602, 0o666, 0o601] {
            let f = KeyFile::new("mode-refused", &[]);
            f.replace_with_mode(&[7; KEY_LEN], mode);
            let e = format!("{:#}", read_key_file(&f.path).unwrap_err());
            assert!(
                e.contains("tls_ticket_key_file")
                    && e.contains(&f.path.display().to_string())
                    && e.contains(&format!("mode {mode:03o}")),
                "{mode:o}: {e}"
            );
        }
        let clock = TestClock::at(T0);
        let f = KeyFile::new("mode-reread", &keys(&[1]));
        let t = Ticketer::from_file(&f.path, clock).unwrap();
        let sealed = t.encrypt(b"sealed").unwrap();
        f.replace_with_mode(&keys(&[2]), 0o644);
        t.tick();
        assert_eq!(rotations(&t, "failure"), 1);
        assert_eq!(t.decrypt(&sealed).unwrap(), b"sealed", "the keys kept");
    }

    /// Replicas with the same file resume each other's tickets; the first
    /// key seals and every key opens; after a rotation a ticket sealed with
    /// a key that left the file no longer opens, and the file of a past
    /// period cannot open a current ticket.
    #[test]
    fn key_file_rotation_first_seals_all_open_dropped_keys_are_gone() {
        let clock = TestClock::at(T0);
        let f = KeyFile::new("rotate", &keys(&[1]));
        let a = Ticketer::from_file(&f.path, clock.clone()).unwrap();
        let b = Ticketer::from_file(&f.path, clock.clone()).unwrap();
        let old = a.encrypt(b"old").unwrap();
        assert_eq!(b.decrypt(&old).unwrap(), b"old");
        let mut forged = old.clone();
        *forged.last_mut().unwrap() ^= 1;
        assert!(a.decrypt(&forged).is_none());
        assert!(a.decrypt(&old[..20]).is_none());
        // The operator keeps the past file (an attacker's copy, say).
        let past = KeyFile::new("rotate-past", &keys(&[1]));
        let past = Ticketer::from_file(&past.path, clock.clone()).unwrap();

        // Rotation: a new first key, the old one second.
        f.replace(&keys(&[2, 1]));
        a.tick();
        assert_eq!(rotations(&a, "success"), 1);
        let current = a.encrypt(b"current").unwrap();
        assert_ne!(current[..NAME_LEN], old[..NAME_LEN]);
        assert_eq!(a.decrypt(&old).unwrap(), b"old", "the previous key opens");
        assert!(
            past.decrypt(&current).is_none(),
            "the past period's key file opened a current ticket"
        );
        // B has not looked at the file yet: it does not know the new key.
        assert!(b.decrypt(&current).is_none());
        b.tick();
        assert_eq!(b.decrypt(&current).unwrap(), b"current");

        // Next rotation: key 1 leaves the file and the process.
        f.replace(&keys(&[3, 2]));
        a.tick();
        assert!(a.decrypt(&old).is_none(), "a dropped key still opened");
        assert_eq!(a.decrypt(&current).unwrap(), b"current");
        // No change, no reread.
        a.tick();
        assert_eq!(rotations(&a, "success"), 2);

        // A broken file keeps the previous keys, counted as a failure.
        f.replace(b"short");
        a.tick();
        assert_eq!(rotations(&a, "failure"), 1);
        assert_eq!(a.decrypt(&current).unwrap(), b"current");
        // The clock does not rotate file keys.
        clock.set(T0 + 3 * ROTATION_SECS);
        a.tick();
        assert_eq!(a.decrypt(&current).unwrap(), b"current");
    }
}
