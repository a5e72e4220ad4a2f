//! Drivers shared by the fuzz targets and their seed tests: code that sets
//! up more than a pure function call lives here, so `cargo test` in this
//! directory runs the committed seeds through it on a stable toolchain.

pub mod connection;
