//! The classic document set: a 100-byte page, a 1 010-byte GIF, a 4 KiB
//! page, a 100 KiB file and an index page linking them, written with one
//! fixed mtime so `If-Modified-Since` can match exactly.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// One document of the set.
#[derive(Debug, Clone, Copy)]
pub struct Doc {
    /// Size label used in tables and the CSV (`size` column).
    pub label: &'static str,
    pub path: &'static str,
    pub bytes: usize,
}

/// The documents the matrix requests, smallest first.
pub const DOCS: [Doc; 4] = [
    Doc {
        label: "100B",
        path: "/100.html",
        bytes: 100,
    },
    Doc {
        label: "1KB",
        path: "/1k.gif",
        bytes: 1010,
    },
    Doc {
        label: "4KB",
        path: "/4k.html",
        bytes: 4096,
    },
    Doc {
        label: "100KiB",
        path: "/100k.bin",
        bytes: 102_400,
    },
];

/// The 100-byte page, the one the floor's response matches.
pub const SMALL: Doc = DOCS[0];

/// The 100 KiB document, the floor's other body.
pub const LARGE: Doc = DOCS[DOCS.len() - 1];

/// Write the set under `root` (created).
pub fn write(root: &Path) -> io::Result<()> {
    fs::create_dir_all(root)?;
    fs::write(root.join("100.html"), page(100))?;
    fs::write(root.join("1k.gif"), gif(1010))?;
    fs::write(root.join("4k.html"), page(4096))?;
    // Not compressible and not text: what a download looks like.
    let mut x: u32 = 0x9e37_79b9;
    let bin: Vec<u8> = (0..102_400)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    fs::write(root.join("100k.bin"), bin)?;
    let mut index = String::from("<!doctype html>\n<title>shardbench</title>\n<ul>\n");
    for d in DOCS {
        index.push_str(&format!("<li><a href=\"{}\">{}</a>\n", d.path, d.label));
    }
    index.push_str("</ul>\n");
    fs::write(root.join("index.html"), index)?;
    // One fixed, settled mtime (2020-01-01) for every file.
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800);
    for name in ["100.html", "1k.gif", "4k.html", "100k.bin", "index.html"] {
        fs::File::options()
            .write(true)
            .open(root.join(name))?
            .set_modified(t)?;
    }
    Ok(())
}

/// An HTML page of exactly `n` bytes.
fn page(n: usize) -> Vec<u8> {
    let head = b"<!doctype html><title>x</title><p>";
    let mut v = head.to_vec();
    while v.len() < n - 1 {
        v.push(b'a' + (v.len() % 26) as u8);
    }
    v.push(b'\n');
    v
}

/// A valid 1x1 GIF89a padded to exactly `n` bytes with a comment extension.
fn gif(n: usize) -> Vec<u8> {
    let mut v: Vec<u8> = b"GIF89a".to_vec();
    // Logical screen 1x1, global colour table of 2 entries.
    v.extend_from_slice(&[1, 0, 1, 0, 0x80, 0, 0, 0xff, 0xff, 0xff, 0, 0, 0]);
    // Comment extension: sub-blocks of up to 255 bytes, then a terminator.
    // The image and trailer after it take 24 bytes.
    let mut left = n - v.len() - 2 - 1 - 24;
    v.extend_from_slice(&[0x21, 0xfe]);
    while left > 0 {
        let len = (left - 1).min(255);
        v.push(len as u8);
        v.extend(std::iter::repeat_n(b'c', len));
        left -= len + 1;
    }
    v.push(0);
    // Graphic control, image descriptor, LZW data, trailer.
    v.extend_from_slice(&[0x21, 0xf9, 4, 1, 0, 0, 0, 0]);
    v.extend_from_slice(&[0x2c, 0, 0, 0, 0, 1, 0, 1, 0, 0]);
    v.extend_from_slice(&[2, 2, 0x44, 1, 0, 0x3b]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_exact() {
        assert_eq!(page(100).len(), 100);
        assert_eq!(page(4096).len(), 4096);
        let g = gif(1010);
        assert_eq!(g.len(), 1010);
        assert!(g.starts_with(b"GIF89a") && g.ends_with(b"\x3b"));
    }
}
