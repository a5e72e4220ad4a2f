//! Stateless session tickets whose keys rotate on a schedule and are the
//! same in every shard, and in every replica given the same
//! `tls_ticket_key_file`.
//!
//! One 32-byte secret (random per process, or read from the key file)
//! derives the key of each period: `HMAC-SHA256(secret, "key" ‖ period)`,
//! and a 16-byte key name the same way. Tickets are sealed with the current
//! period's key and opened with the current or the previous one, so a
//! ticket lives at most two periods and a key is forgotten after that:
//! tickets cannot be opened for ever with a key that leaked later. Nothing
//! is stored and nothing needs coordination: replicas whose clocks agree to
//! within a period compute the same keys.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

/// Length of one key period. Tickets are accepted for up to two.
pub const ROTATION_SECS: u64 = 6 * 3600;

/// Bytes of a ticket before the sealed state: key name, then nonce.
const NAME_LEN: usize = 16;
const NONCE_LEN: usize = 12;

/// Most bytes accepted as a ticket; anything longer is not one of ours.
const MAX_TICKET: usize = 4096;

pub struct Ticketer {
    secret: hmac::Key,
    rng: SystemRandom,
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticketer")
    }
}

impl Ticketer {
    /// A random secret: tickets resume on any shard of this process.
    pub fn random() -> anyhow::Result<Ticketer> {
        let rng = SystemRandom::new();
        let mut secret = [0u8; 32];
        rng.fill(&mut secret)
            .map_err(|_| anyhow::anyhow!("no randomness for the ticket secret"))?;
        Ok(Ticketer::with_secret(&secret))
    }

    /// The secret from `tls_ticket_key_file`: at least 32 bytes (e.g.
    /// `openssl rand 48 > ticket.key`); all of it is the HMAC key.
    pub fn from_file(path: &Path) -> anyhow::Result<Ticketer> {
        let bytes = std::fs::read(path).with_context(|| {
            format!(
                "config key `tls_ticket_key_file`: reading {}",
                path.display()
            )
        })?;
        if bytes.len() < 32 {
            bail!(
                "config key `tls_ticket_key_file`: {} holds {} bytes; at least 32 random bytes are needed",
                path.display(),
                bytes.len()
            );
        }
        Ok(Ticketer::with_secret(&bytes))
    }

    fn with_secret(secret: &[u8]) -> Ticketer {
        Ticketer {
            secret: hmac::Key::new(hmac::HMAC_SHA256, secret),
            rng: SystemRandom::new(),
        }
    }

    fn period_now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            / ROTATION_SECS
    }

    /// The key and key name of `period`.
    fn key(&self, period: u64) -> (LessSafeKey, [u8; NAME_LEN]) {
        let mut label = [0u8; 12];
        label[..4].copy_from_slice(b"key:");
        label[4..].copy_from_slice(&period.to_be_bytes());
        let k = hmac::sign(&self.secret, &label);
        label[..4].copy_from_slice(b"nam:");
        let n = hmac::sign(&self.secret, &label);
        let mut name = [0u8; NAME_LEN];
        name.copy_from_slice(&n.as_ref()[..NAME_LEN]);
        let key = UnboundKey::new(&aead::AES_256_GCM, k.as_ref())
            .expect("an HMAC-SHA256 output is a valid AES-256 key");
        (LessSafeKey::new(key), name)
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        // The client may keep it this long; we accept it for 1-2 periods.
        ROTATION_SECS as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let (key, name) = self.key(Ticketer::period_now());
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(&name);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name),
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
        let now = Ticketer::period_now();
        for period in [now, now.saturating_sub(1)] {
            let (key, name) = self.key(period);
            // Not secret: the name only says which key to try.
            if cipher[..NAME_LEN] != name {
                continue;
            }
            let nonce: [u8; NONCE_LEN] = cipher[NAME_LEN..NAME_LEN + NONCE_LEN].try_into().ok()?;
            let mut buf = cipher[NAME_LEN + NONCE_LEN..].to_vec();
            let plain = key
                .open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(name),
                    &mut buf,
                )
                .ok()?;
            let n = plain.len();
            buf.truncate(n);
            return Some(buf);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_secret_opens_the_other_replicas_ticket() {
        let a = Ticketer::with_secret(&[7; 48]);
        let b = Ticketer::with_secret(&[7; 48]);
        let t = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&t).unwrap(), b"session state");
        let other = Ticketer::with_secret(&[8; 48]);
        assert!(other.decrypt(&t).is_none());
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(a.decrypt(&bad).is_none());
        assert!(a.decrypt(&t[..20]).is_none());
    }

    #[test]
    fn previous_period_still_opens_older_does_not() {
        let t = Ticketer::with_secret(&[1; 32]);
        let now = Ticketer::period_now();
        for (period, opens) in [(now - 1, true), (now - 2, false)] {
            let (key, name) = t.key(period);
            let nonce = [3u8; NONCE_LEN];
            let mut sealed = b"state".to_vec();
            let tag = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(name),
                    &mut sealed,
                )
                .unwrap();
            let mut ticket = name.to_vec();
            ticket.extend_from_slice(&nonce);
            ticket.extend_from_slice(&sealed);
            ticket.extend_from_slice(tag.as_ref());
            assert_eq!(t.decrypt(&ticket).is_some(), opens, "period {period}");
        }
    }
}
