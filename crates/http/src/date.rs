//! The `Date` header, rendered at most once a second per shard.

use std::time::{SystemTime, UNIX_EPOCH};

/// `Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n`
const LEN: usize = 6 + 29 + 2;

/// A per-shard cache of the rendered Date header line.
pub struct DateCache {
    secs: u64,
    line: [u8; LEN],
}

impl DateCache {
    pub fn new(now: SystemTime) -> Self {
        let mut cache = DateCache {
            secs: u64::MAX,
            line: [0; LEN],
        };
        cache.refresh(now);
        cache
    }

    /// Re-render if the second changed. Cheap enough to call every loop turn.
    pub fn refresh(&mut self, now: SystemTime) {
        let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if secs == self.secs {
            return;
        }
        self.secs = secs;
        let text = httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(secs));
        self.line[..6].copy_from_slice(b"Date: ");
        self.line[6..35].copy_from_slice(text.as_bytes());
        self.line[35..].copy_from_slice(b"\r\n");
    }

    /// The second currently rendered, as Unix seconds.
    pub fn secs(&self) -> u64 {
        self.secs
    }

    /// The whole header line, CRLF included (a fixed size: copied
    /// without a call).
    pub fn line(&self) -> &[u8; LEN] {
        &self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn renders_imf_fixdate() {
        let d = DateCache::new(UNIX_EPOCH + Duration::from_secs(784_111_777));
        assert_eq!(d.line(), b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
    }

    #[test]
    fn refresh_changes_only_on_new_second() {
        let mut d = DateCache::new(UNIX_EPOCH + Duration::from_secs(784_111_777));
        d.refresh(UNIX_EPOCH + Duration::from_millis(784_111_777_900));
        assert_eq!(d.line(), b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        // The access log stamps each line with `secs`: the rendered second.
        assert_eq!(d.secs(), 784_111_777);
        d.refresh(UNIX_EPOCH + Duration::from_secs(784_111_778));
        assert_eq!(d.line(), b"Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n");
        assert_eq!(d.secs(), 784_111_778);
    }
}
