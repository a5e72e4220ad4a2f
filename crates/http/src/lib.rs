//! shardhttpd's pure HTTP layer, a crate of its own so that it cannot
//! import the server. No sockets here, only bytes in and bytes out, so every
//! rule can be tested from a table.
#![forbid(unsafe_code)]

pub mod accept;
pub mod chunked;
pub mod conditional;
pub mod date;
pub mod host;
pub mod path;
pub mod range;
pub mod request;

/// The statuses this server ever sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    NoContent,
    PartialContent,
    MovedPermanently,
    NotModified,
    BadRequest,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    RequestTimeout,
    PreconditionFailed,
    PayloadTooLarge,
    UriTooLong,
    RangeNotSatisfiable,
    MisdirectedRequest,
    HeaderFieldsTooLarge,
    InternalServerError,
    NotImplemented,
    ServiceUnavailable,
    VersionNotSupported,
}

impl Status {
    /// Every status, in declaration order (`Status::X as usize` indexes it).
    pub const ALL: [Status; Status::VersionNotSupported as usize + 1] = [
        Status::Ok,
        Status::NoContent,
        Status::PartialContent,
        Status::MovedPermanently,
        Status::NotModified,
        Status::BadRequest,
        Status::Forbidden,
        Status::NotFound,
        Status::MethodNotAllowed,
        Status::RequestTimeout,
        Status::PreconditionFailed,
        Status::PayloadTooLarge,
        Status::UriTooLong,
        Status::RangeNotSatisfiable,
        Status::MisdirectedRequest,
        Status::HeaderFieldsTooLarge,
        Status::InternalServerError,
        Status::NotImplemented,
        Status::ServiceUnavailable,
        Status::VersionNotSupported,
    ];

    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::NoContent => 204,
            Status::PartialContent => 206,
            Status::MovedPermanently => 301,
            Status::NotModified => 304,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::RequestTimeout => 408,
            Status::PreconditionFailed => 412,
            Status::PayloadTooLarge => 413,
            Status::UriTooLong => 414,
            Status::RangeNotSatisfiable => 416,
            Status::MisdirectedRequest => 421,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::NotImplemented => 501,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }

    /// The full status line, CRLF included.
    pub fn line(self) -> &'static [u8] {
        match self {
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::NoContent => b"HTTP/1.1 204 No Content\r\n",
            Status::PartialContent => b"HTTP/1.1 206 Partial Content\r\n",
            Status::MovedPermanently => b"HTTP/1.1 301 Moved Permanently\r\n",
            Status::NotModified => b"HTTP/1.1 304 Not Modified\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::Forbidden => b"HTTP/1.1 403 Forbidden\r\n",
            Status::NotFound => b"HTTP/1.1 404 Not Found\r\n",
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\n",
            Status::RequestTimeout => b"HTTP/1.1 408 Request Timeout\r\n",
            Status::PreconditionFailed => b"HTTP/1.1 412 Precondition Failed\r\n",
            Status::PayloadTooLarge => b"HTTP/1.1 413 Content Too Large\r\n",
            Status::UriTooLong => b"HTTP/1.1 414 URI Too Long\r\n",
            Status::RangeNotSatisfiable => b"HTTP/1.1 416 Range Not Satisfiable\r\n",
            Status::MisdirectedRequest => b"HTTP/1.1 421 Misdirected Request\r\n",
            Status::HeaderFieldsTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Status::InternalServerError => b"HTTP/1.1 500 Internal Server Error\r\n",
            Status::NotImplemented => b"HTTP/1.1 501 Not Implemented\r\n",
            Status::ServiceUnavailable => b"HTTP/1.1 503 Service Unavailable\r\n",
            Status::VersionNotSupported => b"HTTP/1.1 505 HTTP Version Not Supported\r\n",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Status;

    #[test]
    fn status_line_carries_the_code_and_a_reason() {
        for (i, status) in Status::ALL.into_iter().enumerate() {
            assert_eq!(status as usize, i, "ALL is in declaration order");
            let line = std::str::from_utf8(status.line()).unwrap();
            let rest = line
                .strip_prefix(&format!("HTTP/1.1 {} ", status.code()))
                .unwrap_or_else(|| panic!("{status:?}: {line:?}"));
            let reason = rest.strip_suffix("\r\n").expect("CRLF");
            assert!(
                reason.len() > 1 && !reason.contains('\r'),
                "{status:?}: {line:?}"
            );
        }
        assert_eq!(Status::NotFound.line(), b"HTTP/1.1 404 Not Found\r\n");
        let codes: std::collections::BTreeSet<u16> = Status::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes.len(), Status::ALL.len(), "codes are distinct");
    }
}
