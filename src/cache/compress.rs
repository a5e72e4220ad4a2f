//! Building compressed variants: which media types are worth it, and the
//! three encoders. Runs only on the builder's threads, never on a shard.

use std::io::{self, Read, Write};

use xxhash_rust::xxh3::Xxh3Default;

use crate::http::accept::Coding;

/// A variant is kept only when it is at most this fraction of the original
/// (in percent): a few saved bytes do not pay for a `Vary` split in caches.
pub const KEEP_PERCENT: u64 = 90;

/// brotli's window (log2 bytes). 22 is the encoder's default and decoders'
/// common limit.
const BROTLI_LGWIN: u32 = 22;

/// How variants are built; derived once from the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressOptions {
    /// Files smaller than this are not compressed (sidecars still count).
    pub min_bytes: u64,
    /// 0..=11.
    pub brotli_level: u32,
    /// 1..=9.
    pub gzip_level: u32,
    /// 1..=22.
    pub zstd_level: i32,
    /// A root with more in-memory identity bytes than this is compressed
    /// at [`FAST_LEVELS`] at most (0: never).
    pub fast_above: u64,
}

/// The levels a large root is compressed at, at most (brotli, gzip, zstd):
/// about 12× the throughput of the defaults (11, 9, 19) for variants about
/// 7% larger (12 MB of HTML on two busy cores: 4.9 s instead of 59 s).
pub const FAST_LEVELS: (u32, u32, i32) = (5, 6, 9);

/// Default of `compress_fast_above`.
pub const DEFAULT_FAST_ABOVE: u64 = 64 * 1024 * 1024;

impl CompressOptions {
    /// The levels to compress a root of `identity_mem` in-memory body bytes
    /// at: the configured ones, or at most [`FAST_LEVELS`] for a root above
    /// `fast_above`.
    pub fn for_root(self, identity_mem: u64) -> CompressOptions {
        if self.fast_above == 0 || identity_mem <= self.fast_above {
            return self;
        }
        let (brotli, gzip, zstd) = FAST_LEVELS;
        CompressOptions {
            brotli_level: self.brotli_level.min(brotli),
            gzip_level: self.gzip_level.min(gzip),
            zstd_level: self.zstd_level.min(zstd),
            ..self
        }
    }
}

impl Default for CompressOptions {
    fn default() -> Self {
        CompressOptions {
            min_bytes: 256,
            brotli_level: 11,
            gzip_level: 9,
            zstd_level: 19,
            fast_above: DEFAULT_FAST_ABOVE,
        }
    }
}

/// Whether a media type (essence, e.g. `text/html`) is worth compressing:
/// text and structured text, wasm, and font formats without their own
/// compression (woff/woff2 already have it; images other than SVG, ICO and
/// BMP are compressed already).
pub fn compressible(essence: &str) -> bool {
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/json"
                | "application/xml"
                | "application/wasm"
                | "application/x-ndjson"
                | "application/vnd.ms-fontobject"
                | "application/x-font-ttf"
                | "application/x-font-otf"
                | "application/font-sfnt"
                | "font/ttf"
                | "font/otf"
                | "font/collection"
                | "image/svg+xml"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "image/bmp"
        )
}

/// Whether a variant of `encoded` bytes is worth keeping for an original of
/// `original` bytes.
pub fn worth_keeping(original: u64, encoded: u64) -> bool {
    encoded.saturating_mul(100) <= original.saturating_mul(KEEP_PERCENT)
}

/// Compress `data` with `coding` at the configured level.
pub fn encode(coding: Coding, data: &[u8], opts: &CompressOptions) -> io::Result<Vec<u8>> {
    match coding {
        Coding::Identity => Ok(data.to_vec()),
        Coding::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(data.len() / 2),
                flate2::Compression::new(opts.gzip_level),
            );
            enc.write_all(data)?;
            enc.finish()
        }
        Coding::Brotli => {
            let mut out = Vec::with_capacity(data.len() / 2);
            {
                let mut enc =
                    brotli::CompressorWriter::new(&mut out, 4096, opts.brotli_level, BROTLI_LGWIN);
                enc.write_all(data)?;
                enc.flush()?;
            }
            Ok(out)
        }
        Coding::Zstd => zstd::bulk::compress(data, opts.zstd_level),
    }
}

/// Decode buffer for [`decodes_to`]: the hasher streams, so this is all the
/// memory a check takes however large the file.
const DECODE_CHUNK: usize = 64 * 1024;

/// Whether `encoded` (a precompressed sidecar) decodes with `coding` to
/// exactly `len` bytes whose xxh3-128 is `hash`, the source file's. Stops
/// reading as soon as the output runs past `len`, so a sidecar that
/// decompresses to far more than its source costs no more than the source.
/// Undecodable input is a mismatch, not an error.
pub fn decodes_to(coding: Coding, encoded: &[u8], len: u64, hash: u128) -> bool {
    let mut reader: Box<dyn Read + '_> = match coding {
        Coding::Identity => Box::new(encoded),
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(encoded)),
        Coding::Brotli => Box::new(brotli::Decompressor::new(encoded, 4096)),
        Coding::Zstd => match zstd::stream::read::Decoder::new(encoded) {
            Ok(d) => Box::new(d),
            Err(_) => return false,
        },
    };
    let mut hasher = Xxh3Default::new();
    let mut chunk = vec![0u8; DECODE_CHUNK];
    let mut total = 0u64;
    loop {
        match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                if total > len {
                    return false;
                }
                hasher.update(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    total == len && hasher.digest128() == hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Identity => out.extend_from_slice(data),
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::stream::decode_all(data).unwrap(),
        }
        out
    }

    #[test]
    fn every_coding_round_trips() {
        let text: Vec<u8> = b"<p>hello, compressible world</p>\n".repeat(200);
        let opts = CompressOptions::default();
        for coding in [Coding::Brotli, Coding::Zstd, Coding::Gzip] {
            let enc = encode(coding, &text, &opts).unwrap();
            assert!(
                worth_keeping(text.len() as u64, enc.len() as u64),
                "{coding:?}"
            );
            assert_eq!(decode(coding, &enc), text, "{coding:?}");
        }
        let empty = encode(Coding::Gzip, b"", &opts).unwrap();
        assert_eq!(decode(Coding::Gzip, &empty), b"");
    }

    #[test]
    fn compressible_types() {
        for t in [
            "text/html",
            "text/css",
            "application/javascript",
            "application/json",
            "image/svg+xml",
            "application/wasm",
            "application/manifest+json",
            "font/ttf",
        ] {
            assert!(compressible(t), "{t}");
        }
        for t in ["image/png", "font/woff2", "application/gzip", "video/mp4"] {
            assert!(!compressible(t), "{t}");
        }
    }

    #[test]
    fn keep_threshold() {
        assert!(worth_keeping(1000, 900));
        assert!(!worth_keeping(1000, 901));
        assert!(!worth_keeping(0, 0) || worth_keeping(0, 0));
    }

    #[test]
    fn sidecar_check_decodes_and_compares() {
        use xxhash_rust::xxh3::xxh3_128;
        let text: Vec<u8> = b"current content of the source file\n".repeat(100);
        let (len, hash) = (text.len() as u64, xxh3_128(&text));
        let old: Vec<u8> = b"previous content of the source\n".repeat(100);
        let opts = CompressOptions::default();
        for coding in [Coding::Brotli, Coding::Zstd, Coding::Gzip] {
            let good = encode(coding, &text, &opts).unwrap();
            assert!(decodes_to(coding, &good, len, hash), "{coding:?}");
            let stale = encode(coding, &old, &opts).unwrap();
            assert!(!decodes_to(coding, &stale, len, hash), "{coding:?} stale");
            // A prefix of the right content, and garbage.
            let short = encode(coding, &text[..text.len() - 1], &opts).unwrap();
            assert!(!decodes_to(coding, &short, len, hash), "{coding:?} short");
            assert!(!decodes_to(coding, b"not compressed at all", len, hash));
            // Decoding past the source's length stops early.
            let long = encode(coding, &[text.clone(), text.clone()].concat(), &opts).unwrap();
            assert!(!decodes_to(coding, &long, len, hash), "{coding:?} long");
        }
    }

    #[test]
    fn a_root_above_compress_fast_above_gets_the_fast_levels() {
        let opts = CompressOptions {
            fast_above: 100,
            ..CompressOptions::default()
        };
        assert_eq!(opts.for_root(100), opts);
        let fast = opts.for_root(101);
        assert_eq!(
            (fast.brotli_level, fast.gzip_level, fast.zstd_level),
            FAST_LEVELS
        );
        assert_eq!(fast.min_bytes, opts.min_bytes);
        // Levels already below the fast ones stay.
        let low = CompressOptions {
            brotli_level: 2,
            ..opts
        };
        assert_eq!(low.for_root(1 << 40).brotli_level, 2);
        let never = CompressOptions {
            fast_above: 0,
            ..opts
        };
        assert_eq!(never.for_root(u64::MAX), never);
    }
}
