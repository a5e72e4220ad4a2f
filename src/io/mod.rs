//! What moves a connection's bytes, below every protocol: the output queue
//! (owned bytes, snapshot ranges by reference, large files by the verified
//! copy) that HTTP/1, HTTP/2 and TLS all write into.

pub mod output;
