//! What a request path resolves to, and one file of the snapshot: its
//! [`Entry`] (representations, validators, the source it was read from),
//! read through [`EntryRef`] beside its chunk's head bytes, and the
//! [`Frame`] of head lines shared by every file of one type and rule set.

use crate::http::accept::Coding;

use super::rules;
use super::{Body, Repr, ReprRef, Source};

/// What a normalised request path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A file (or a directory's `index.html`): index into [`Snapshot::entry`](super::Snapshot::entry).
    File(u32),
    /// A directory named without its trailing slash: 301 to `path + "/"`.
    AddSlash,
    /// Present but not servable (unreadable, or a directory without index): 403.
    Forbidden,
}

/// One file of the snapshot. Kept small (a root can hold millions): its
/// heads are not here but in the head bytes of its chunk of
/// [`Entries`](super::Entries), which it addresses by offset, in a [`Frame`] shared by
/// every file of its type and rules; read it through [`EntryRef`], which pairs the
/// two.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Last-Modified as Unix seconds.
    pub last_modified: u64,
    /// The uncompressed representation.
    pub identity: Repr,
    /// Compressed representations, in server preference order (br, zstd,
    /// gzip): ties in `Accept-Encoding` go to the first. In memory, except
    /// a sidecar of at least `sendfile_threshold`, sent from its own fd.
    pub encoded: Box<[(Coding, Repr)]>,
    /// What the files looked like when read; a rebuild reuses the entry
    /// while they still look the same.
    pub source: Source,
    /// The lines of its 200 heads that other files share.
    pub(super) frame: &'static Frame,
    /// The codings of `encoded`, same order, for `http::accept::negotiate`
    /// (the first `encoded.len()` count; inline, not one more allocation).
    pub(super) codings: [Coding; 3],
    /// Responses depend on `Accept-Encoding` (there is at least one
    /// variant), so every head carries `Vary: Accept-Encoding`.
    pub vary: bool,
}

impl Entry {
    /// An entry whose 200 heads are framed by `frame`.
    pub(crate) fn new(
        frame: &'static Frame,
        last_modified: u64,
        identity: Repr,
        encoded: Box<[(Coding, Repr)]>,
        vary: bool,
        source: Source,
    ) -> Entry {
        let mut codings = [Coding::Identity; 3];
        for (slot, (c, _)) in codings.iter_mut().zip(encoded.iter()) {
            *slot = *c;
        }
        debug_assert!(encoded.len() <= codings.len());
        Entry {
            last_modified,
            identity,
            encoded,
            source,
            frame,
            codings,
            vary,
        }
    }

    /// What fills a slot no path points to any more.
    pub(crate) fn vacant(source: Source) -> Entry {
        Entry::new(
            &Frame::EMPTY,
            0,
            Repr::new(0, 0..0, 0, 0..0, Body::Mem { off: 0 }),
            Box::default(),
            false,
            source,
        )
    }

    /// The codings of [`Entry::encoded`], in the same order.
    #[inline]
    pub fn codings(&self) -> &[Coding] {
        &self.codings[..self.encoded.len().min(3)]
    }

    /// Every representation, identity first.
    pub(crate) fn reprs(&self) -> impl Iterator<Item = &Repr> {
        std::iter::once(&self.identity).chain(self.encoded.iter().map(|(_, r)| r))
    }

    pub(crate) fn reprs_mut(&mut self) -> impl Iterator<Item = &mut Repr> {
        std::iter::once(&mut self.identity).chain(self.encoded.iter_mut().map(|(_, r)| r))
    }
}

/// An [`Entry`] with the head bytes its representations point into: what
/// [`Snapshot::entry`](super::Snapshot::entry) hands out. Derefs to the entry.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    pub(super) entry: &'a Entry,
    pub(super) heads: &'a [u8],
}

impl std::ops::Deref for EntryRef<'_> {
    type Target = Entry;

    #[inline]
    fn deref(&self) -> &Entry {
        self.entry
    }
}

impl<'a> EntryRef<'a> {
    #[inline]
    pub(crate) fn new(entry: &'a Entry, heads: &'a [u8]) -> Self {
        EntryRef { entry, heads }
    }

    /// The entry itself (the heads are its chunk's).
    pub fn entry(&self) -> &'a Entry {
        self.entry
    }

    /// The head bytes its representations point into.
    pub(crate) fn heads(&self) -> &'a [u8] {
        self.heads
    }

    /// The uncompressed representation.
    #[inline]
    pub fn identity(&self) -> ReprRef<'a> {
        ReprRef {
            repr: &self.entry.identity,
            heads: self.heads,
            frame: self.entry.frame,
            coding: Coding::Identity,
        }
    }

    /// The representation for a negotiated coding (identity when the entry
    /// has no such variant).
    #[inline]
    pub fn repr(&self, coding: Coding) -> ReprRef<'a> {
        match self.entry.encoded.iter().find(|(c, _)| *c == coding) {
            Some((c, repr)) => ReprRef {
                repr,
                heads: self.heads,
                frame: self.entry.frame,
                coding: *c,
            },
            None => self.identity(),
        }
    }

    /// The compressed representations, in [`Entry::encoded`] order.
    pub fn variants(&self) -> impl Iterator<Item = ReprRef<'a>> + 'a {
        let (heads, frame) = (self.heads, self.entry.frame);
        self.entry.encoded.iter().map(move |(c, repr)| ReprRef {
            repr,
            heads,
            frame,
            coding: *c,
        })
    }

    /// `Content-Type: …\r\n`, with `; charset=utf-8` for text types.
    #[inline]
    pub fn content_type_line(&self) -> &'static [u8] {
        self.entry.frame.content_type_line()
    }
}

/// The lines of a 200 head that every file of one media type under the
/// same rules shares: before its own lines, `HTTP/1.1 200 OK`, `Server`
/// and `Content-Type` (77 bytes for HTML); after them, `Accept-Ranges`,
/// then `Cache-Control`, `Vary` and custom headers where they apply. Kept
/// once per process rather than once per file: interned by the build and
/// never freed, there are as many as the media types the roots have had
/// times the rule sets of the configuration (the server line is fixed for
/// the process).
#[derive(Debug)]
pub struct Frame {
    /// The lines before, then the lines after.
    pub(super) bytes: &'static [u8],
    /// Where `Content-Type: …\r\n` starts: it runs to `tail_at`.
    pub(super) content_type_at: usize,
    /// Where the lines after start.
    pub(super) tail_at: usize,
    /// Where the tail's lines sent over TLS only start (a `[[headers]]`
    /// `Strict-Transport-Security`): they run to the end.
    pub(super) tls_at: usize,
}

impl Frame {
    /// The frame of entries that are never served (vacant slots).
    pub(crate) const EMPTY: Frame = Frame {
        bytes: b"",
        content_type_at: 0,
        tail_at: 0,
        tls_at: 0,
    };

    /// The frame `status_and_server` + `content_type_line` … `tail`,
    /// interned.
    pub(crate) fn intern(
        status_and_server: &[u8],
        content_type_line: &[u8],
        tail: &[u8],
    ) -> &'static Frame {
        use std::collections::HashMap;
        use std::sync::Mutex;
        type Interned = HashMap<(usize, usize, Vec<u8>), &'static Frame>;
        static FRAMES: Mutex<Option<Interned>> = Mutex::new(None);
        let bytes = [status_and_server, content_type_line, tail].concat();
        let content_type_at = status_and_server.len();
        let tail_at = content_type_at + content_type_line.len();
        // The bytes and these two offsets decide the third.
        let key = (content_type_at, tail_at, bytes);
        let mut interned = FRAMES.lock().unwrap_or_else(|e| e.into_inner());
        let interned = interned.get_or_insert_with(HashMap::new);
        if let Some(found) = interned.get(&key) {
            return found;
        }
        let leaked: &'static Frame = Box::leak(Box::new(Frame {
            bytes: Box::leak(key.2.clone().into_boxed_slice()),
            content_type_at,
            tail_at,
            tls_at: tail_at + rules::tls_only_at(tail),
        }));
        interned.insert(key, leaked);
        leaked
    }

    /// Status line, `Server`, `Content-Type`.
    #[inline]
    pub fn head(&self) -> &'static [u8] {
        &self.bytes[..self.tail_at]
    }

    /// `Accept-Ranges` and what follows it, except the lines sent over
    /// TLS only.
    #[inline]
    pub fn tail(&self) -> &'static [u8] {
        &self.bytes[self.tail_at..self.tls_at]
    }

    /// The tail's lines sent over TLS only (`Strict-Transport-Security`
    /// from a `[[headers]]` rule); usually empty.
    #[inline]
    pub fn tls_lines(&self) -> &'static [u8] {
        &self.bytes[self.tls_at..]
    }

    #[inline]
    pub fn content_type_line(&self) -> &'static [u8] {
        &self.bytes[self.content_type_at..self.tail_at]
    }
}
