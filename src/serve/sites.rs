//! Which site answers a request. The [`Sites`] table holds every site's
//! snapshot pointer and settings; a request's `Host` (HTTP/1) or
//! `:authority` (HTTP/2) chooses one by exact name, then by the longest
//! wildcard, then by `unknown_host`. Over TLS the site the SNI names is
//! fixed for the connection: a request for another site gets 421, so a
//! client that coalesced connections (RFC 9113 §9.1.1) retries on its own.
//! A shard reads the table through [`Local`], one `arc_swap::Cache` per
//! site.

use std::sync::Arc;

use arc_swap::{ArcSwap, Cache};

use crate::cache::Snapshot;
use crate::http::host::Names;
use crate::http::Status;

/// What a request for a name no site claims gets (`unknown_host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownHost {
    /// The default site (the top level) answers, as nginx's
    /// `default_server` does.
    Default,
    /// 421 Misdirected Request (RFC 9110 §15.5.20).
    Misdirected,
    /// 404 Not Found, with no site's error page.
    NotFound,
}

/// One site as a request sees it.
pub struct Site {
    /// Its first name (`default` for the top level): the `site` label.
    pub label: Arc<str>,
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// What its successful TLS responses add: `Strict-Transport-Security`
    /// (`hsts`) and `Alt-Svc` (with `h3`) lines, or nothing.
    pub tls_lines: Vec<u8>,
    /// Its cleartext requests get a 301 to HTTPS.
    pub redirect_https: bool,
}

/// Every site, the default first, and the names that choose them.
pub struct Sites {
    names: Names<u32>,
    list: Vec<Site>,
    unknown: UnknownHost,
    /// No name and `unknown_host = "default"`: every request is the
    /// default site's.
    single: bool,
}

/// The index of the default site.
pub const DEFAULT: u32 = 0;

impl Sites {
    /// The table: `list[0]` is the default site; `names` maps to indices
    /// of `list`.
    pub fn new(list: Vec<Site>, names: Names<u32>, unknown: UnknownHost) -> Sites {
        assert!(!list.is_empty(), "the default site is always there");
        Sites {
            single: names.is_empty() && unknown == UnknownHost::Default,
            names,
            list,
            unknown,
        }
    }

    /// Only the default site: every request goes to it unread.
    #[inline]
    pub fn single(&self) -> bool {
        self.single
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn get(&self, site: u32) -> &Site {
        &self.list[site as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = &Site> {
        self.list.iter()
    }

    /// `site`'s label for the access log, on a server with `[[sites]]`.
    pub fn label(&self, site: u32) -> Option<&str> {
        (self.list.len() > 1).then(|| &*self.list[site as usize].label)
    }

    /// The site a TLS client named in its SNI, if one claims it.
    pub fn by_sni(&self, name: &str) -> Option<u32> {
        self.names.get(name.as_bytes())
    }

    /// The site that answers a request for `host` (none: HTTP/1.0 without
    /// `Host`) on a connection whose SNI chose `sni`; `Err` is the
    /// status that refuses it.
    #[inline]
    pub fn choose(&self, host: Option<&[u8]>, sni: Option<u32>) -> Result<u32, Status> {
        if self.single() {
            return Ok(DEFAULT);
        }
        let site = match host.and_then(|h| self.names.get(h)) {
            Some(site) => site,
            None => match self.unknown {
                UnknownHost::Default => DEFAULT,
                UnknownHost::Misdirected => return Err(Status::MisdirectedRequest),
                UnknownHost::NotFound => return Err(Status::NotFound),
            },
        };
        match sni {
            Some(fixed) if fixed != site => Err(Status::MisdirectedRequest),
            _ => Ok(site),
        }
    }
}

/// One shard's caches of every site's snapshot pointer, so a request
/// reads no shared cache line but the pointer's.
pub struct Local {
    caches: Vec<Cache<Arc<ArcSwap<Snapshot>>, Arc<Snapshot>>>,
}

impl Local {
    pub fn new(table: &Sites) -> Local {
        Local {
            caches: table
                .iter()
                .map(|s| Cache::new(Arc::clone(&s.snapshot)))
                .collect(),
        }
    }

    /// `site`'s current snapshot.
    #[inline]
    pub fn load(&mut self, site: u32) -> &Arc<Snapshot> {
        self.caches[site as usize].load()
    }

    /// Let go of replaced snapshots (on the shard's tick, so one no
    /// request asked for is not held).
    pub fn refresh(&mut self) {
        for c in &mut self.caches {
            c.load();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(unknown: UnknownHost) -> Sites {
        let site = |label: &str| Site {
            label: label.into(),
            snapshot: Arc::new(ArcSwap::from_pointee(Snapshot::empty())),
            tls_lines: Vec::new(),
            redirect_https: false,
        };
        let mut names = Names::default();
        names.insert("a.test", 1).unwrap();
        names.insert("*.a.test", 1).unwrap();
        names.insert("b.test", 2).unwrap();
        Sites::new(
            vec![site("default"), site("a.test"), site("b.test")],
            names,
            unknown,
        )
    }

    #[test]
    fn host_then_unknown_host_then_sni() {
        let t = table(UnknownHost::Default);
        assert!(!t.single());
        assert_eq!(t.choose(Some(b"A.test:8080"), None), Ok(1));
        assert_eq!(t.choose(Some(b"x.a.test"), None), Ok(1));
        assert_eq!(t.choose(Some(b"b.test"), None), Ok(2));
        assert_eq!(t.choose(Some(b"c.test"), None), Ok(DEFAULT));
        assert_eq!(t.choose(None, None), Ok(DEFAULT));
        // SNI fixed a site: another one's Host, or an unknown one that
        // falls to the default, is misdirected.
        assert_eq!(t.choose(Some(b"b.test"), Some(2)), Ok(2));
        assert_eq!(
            t.choose(Some(b"a.test"), Some(2)),
            Err(Status::MisdirectedRequest)
        );
        assert_eq!(
            t.choose(Some(b"c.test"), Some(2)),
            Err(Status::MisdirectedRequest)
        );
        assert_eq!(t.by_sni("X.A.test"), Some(1));
        assert_eq!(t.by_sni("c.test"), None);

        let t = table(UnknownHost::Misdirected);
        assert_eq!(
            t.choose(Some(b"c.test"), None),
            Err(Status::MisdirectedRequest)
        );
        assert_eq!(t.choose(None, None), Err(Status::MisdirectedRequest));
        let t = table(UnknownHost::NotFound);
        assert_eq!(t.choose(Some(b"c.test"), None), Err(Status::NotFound));
        assert_eq!(t.choose(Some(b"a.test"), None), Ok(1));
    }

    #[test]
    fn one_site_reads_no_host() {
        let site = Site {
            label: "default".into(),
            snapshot: Arc::new(ArcSwap::from_pointee(Snapshot::empty())),
            tls_lines: Vec::new(),
            redirect_https: false,
        };
        let t = Sites::new(vec![site], Names::default(), UnknownHost::Default);
        assert!(t.single());
        assert_eq!(t.choose(Some(b"anything"), Some(7)), Ok(DEFAULT));
        let mut local = Local::new(&t);
        assert_eq!(local.load(DEFAULT).len(), 0);
    }
}
