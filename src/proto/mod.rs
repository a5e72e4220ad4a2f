//! The protocols, side by side and sans-I/O: bytes in, requests out; a
//! [`Response`](crate::serve::Response) in, bytes and output pieces out.
//! None knows the event source or imports `conn`. `proxy` is the PROXY
//! protocol header a load balancer sends before any of them.

pub mod body;
pub mod h2;
pub mod h3;
pub mod http1;
pub mod proxy;
