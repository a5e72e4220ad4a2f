use super::*;

type Fields = Vec<(String, String)>;

fn decoded(decoder: &mut loona_hpack::Decoder<'_>, block: &[u8]) -> Fields {
    decoder
        .decode(block)
        .unwrap()
        .into_iter()
        .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
        .collect()
}

fn fields(list: &[(&str, &str)]) -> Fields {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

const HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nServer: shardhttpd\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\
Content-Type: text/html\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\
Transfer-Encoding: chunked\r\nX-Custom-Header-That-Is-Rather-Long-Indeed-Longer-Than-Sixty-Four-Bytes: 1\r\n\r\n";

fn head_fields() -> Fields {
    fields(&[
        (":status", "200"),
        ("server", "shardhttpd"),
        ("date", "Thu, 01 Jan 2026 00:00:00 GMT"),
        ("content-type", "text/html"),
        ("content-length", "5"),
        (
            "x-custom-header-that-is-rather-long-indeed-longer-than-sixty-four-bytes",
            "1",
        ),
    ])
}

#[test]
fn a_head_encodes_to_what_a_decoder_reads_back() {
    let mut enc = Encoder::default();
    let mut block = Vec::new();
    assert_eq!(enc.head(HEAD, &mut block), Some((200, HEAD.len())));
    let mut dec = loona_hpack::Decoder::new();
    assert_eq!(decoded(&mut dec, &block), head_fields());
}

#[test]
fn a_repeated_head_is_one_byte_per_field() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let mut first = Vec::new();
    enc.head(HEAD, &mut first);
    let mut second = Vec::new();
    enc.head(HEAD, &mut second);
    // :status from the static table, five fields from the dynamic one.
    assert_eq!(second.len(), 6, "{second:x?}");
    assert!(second.iter().all(|b| b & 0x80 != 0));
    assert!(first.len() > 100);
    assert_eq!(decoded(&mut dec, &first), head_fields());
    assert_eq!(decoded(&mut dec, &second), head_fields());
    // A changed value is a literal naming the static (or indexed) name.
    let third_head = String::from_utf8(HEAD.to_vec())
        .unwrap()
        .replace("00:00:00", "00:00:01");
    let mut third = Vec::new();
    enc.head(third_head.as_bytes(), &mut third);
    let mut want = head_fields();
    want[2].1 = "Thu, 01 Jan 2026 00:00:01 GMT".into();
    assert_eq!(decoded(&mut dec, &third), want);
    assert!(third.len() < 40, "{}", third.len());
}

#[test]
fn statuses_outside_the_static_table_are_literals() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    for (line, code) in [
        (&b"HTTP/1.1 416 Range Not Satisfiable\r\n\r\n"[..], 416),
        (b"HTTP/1.1 304 Not Modified\r\n\r\n", 304),
        (b"HTTP/1.1 416 Range Not Satisfiable\r\n\r\n", 416),
        (b"HTTP/1.1 301 Moved Permanently\r\n\r\n", 301),
    ] {
        let mut block = Vec::new();
        assert_eq!(enc.head(line, &mut block), Some((code, line.len())));
        assert_eq!(
            decoded(&mut dec, &block),
            fields(&[(":status", &code.to_string())])
        );
    }
    let mut block = Vec::new();
    assert_eq!(enc.head(b"HTTP/1.1 2x0 OK\r\n\r\n", &mut block), None);
    assert_eq!(enc.head(b"garbage", &mut block), None);
    assert!(block.is_empty());
}

#[test]
fn the_table_stays_within_its_bound_and_in_step_with_the_decoder() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    // Many distinct values: the oldest are evicted on both sides alike.
    for i in 0..400 {
        let head = format!(
            "HTTP/1.1 200 OK\r\nServer: shardhttpd\r\nETag: \"{i:08x}-{}\"\r\nContent-Length: {i}\r\n\r\n",
            "v".repeat(i % 90)
        );
        let mut block = Vec::new();
        enc.head(head.as_bytes(), &mut block);
        assert!(enc.table_size() <= ENCODER_TABLE);
        let want = fields(&[
            (":status", "200"),
            ("server", "shardhttpd"),
            ("etag", &format!("\"{i:08x}-{}\"", "v".repeat(i % 90))),
            ("content-length", &i.to_string()),
        ]);
        assert_eq!(decoded(&mut dec, &block), want, "response {i}");
    }
}

#[test]
fn the_peers_table_size_is_announced_and_obeyed() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let mut block = Vec::new();
    enc.head(HEAD, &mut block);
    assert_eq!(decoded(&mut dec, &block), head_fields());
    // SETTINGS_HEADER_TABLE_SIZE 0, then 256 in one frame: both updates.
    enc.peer_table_size(0);
    enc.peer_table_size(256);
    block.clear();
    enc.head(HEAD, &mut block);
    assert_eq!(block[0], 0x20, "{block:x?}");
    assert_eq!(block[1..4], [0x3f, 0xe1, 0x01], "{block:x?}");
    assert_eq!(decoded(&mut dec, &block), head_fields());
    assert!(enc.table_size() <= 256);
    // A table of 0: nothing indexed, every field a literal each time.
    enc.peer_table_size(0);
    for _ in 0..2 {
        block.clear();
        enc.head(HEAD, &mut block);
        assert_eq!(decoded(&mut dec, &block), head_fields());
        assert_eq!(enc.table_size(), 0);
    }
    // A peer asking for more than our bound gets our bound.
    enc.peer_table_size(1 << 20);
    block.clear();
    enc.head(HEAD, &mut block);
    assert_eq!(block[..3], [0x3f, 0xe1, 0x1f], "{block:x?}");
    assert_eq!(decoded(&mut dec, &block), head_fields());
}

#[test]
fn large_and_unindexed_fields_stay_out_of_the_table() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let big = "x".repeat(600);
    for _ in 0..2 {
        let mut block = Vec::new();
        enc.begin(&mut block);
        enc.status(200, &mut block);
        enc.field(b"link", big.as_bytes(), Indexing::Incremental, &mut block);
        enc.field(b"x-request-id", b"abc", Indexing::Without, &mut block);
        assert_eq!(enc.table_size(), 0);
        assert_eq!(
            decoded(&mut dec, &block),
            fields(&[(":status", "200"), ("link", &big), ("x-request-id", "abc")])
        );
    }
}

#[test]
fn the_head_ends_at_its_blank_line_and_the_body_is_not_read() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let mut rendered = HEAD.to_vec();
    rendered.extend_from_slice(b"Body: not a field\r\n\r\n");
    let mut block = Vec::new();
    assert_eq!(enc.head(&rendered, &mut block), Some((200, HEAD.len())));
    assert_eq!(decoded(&mut dec, &block), head_fields());
}

#[test]
fn bytes_without_a_blank_line_are_not_a_head_and_change_nothing() {
    let mut enc = Encoder::default();
    let mut block = Vec::new();
    let cut = &HEAD[..HEAD.len() - 2];
    assert_eq!(enc.head(cut, &mut block), None);
    assert_eq!(
        enc.head(b"HTTP/1.1 200 OK\r\nServer: x\r\n", &mut block),
        None
    );
    assert!(block.is_empty());
    assert_eq!(enc.table_size(), 0);
    // The table is as new: the whole head is literals again.
    let mut dec = loona_hpack::Decoder::new();
    assert_eq!(enc.head(HEAD, &mut block), Some((200, HEAD.len())));
    assert_eq!(decoded(&mut dec, &block), head_fields());
}

#[test]
fn a_head_with_more_lines_than_are_remembered_encodes_them_all() {
    let mut head = String::from("HTTP/1.1 200 OK\r\n");
    let mut want = vec![(":status".to_string(), "200".to_string())];
    for i in 0..41 {
        head.push_str(&format!("X-Field-{i}: value {i}\r\n"));
        want.push((format!("x-field-{i}"), format!("value {i}")));
    }
    head.push_str("\r\n");
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    for _ in 0..2 {
        let mut block = Vec::new();
        assert_eq!(
            enc.head(head.as_bytes(), &mut block),
            Some((200, head.len()))
        );
        assert_eq!(decoded(&mut dec, &block), want);
    }
}

#[test]
fn a_line_spelled_differently_still_finds_its_entry() {
    // `Vary` then `vary`: the second misses the line hash, finds the
    // entry by name and value, and is one byte.
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let want = fields(&[(":status", "200"), ("vary", "Accept-Encoding")]);
    for head in [
        &b"HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nvary:  Accept-Encoding\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\n\r\n",
    ] {
        let mut block = Vec::new();
        enc.head(head, &mut block);
        assert_eq!(decoded(&mut dec, &block), want);
    }
    let mut block = Vec::new();
    enc.head(
        b"HTTP/1.1 200 OK\r\nVARY: Accept-Encoding\r\n\r\n",
        &mut block,
    );
    assert_eq!(block, [0x88, 0x80 | 62]);
}

#[test]
fn a_line_slot_that_names_another_lines_entry_is_not_trusted() {
    // Forge a collision: the slot of `Server: other` names the entry of
    // `Server: shardhttpd`. The bytes decide, so `other` is still sent.
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let mut block = Vec::new();
    enc.head(b"HTTP/1.1 200 OK\r\nServer: shardhttpd\r\n\r\n", &mut block);
    decoded(&mut dec, &block);
    let bucket = line_bucket(b"Server: other");
    enc.slots[bucket] = enc.inserted - 1;
    enc.slots[bucket + 1] = enc.inserted - 1;
    for _ in 0..2 {
        let mut block = Vec::new();
        enc.head(b"HTTP/1.1 200 OK\r\nServer: other\r\n\r\n", &mut block);
        assert_eq!(
            decoded(&mut dec, &block),
            fields(&[(":status", "200"), ("server", "other")])
        );
    }
}

#[test]
fn lines_whose_entries_were_evicted_are_sent_again_as_literals() {
    // A table of 64 bytes holds one of these entries (34 bytes): each new
    // line evicts the last, whose slot then names an id no longer there.
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    enc.peer_table_size(64);
    let lines = ["A: 1", "B: 2", "C: 3", "A: 1", "B: 2", "C: 3", "C: 3"];
    for line in lines {
        let head = format!("HTTP/1.1 200 OK\r\n{line}\r\n\r\n");
        let mut block = Vec::new();
        enc.head(head.as_bytes(), &mut block);
        let (name, value) = line.split_once(": ").unwrap();
        assert_eq!(
            decoded(&mut dec, &block),
            fields(&[(":status", "200"), (&name.to_lowercase(), value)]),
            "{line}"
        );
        assert!(enc.table_size() <= 64);
    }
    // The last `C: 3` was an index, the table holding it.
    let mut block = Vec::new();
    enc.head(b"HTTP/1.1 200 OK\r\nC: 3\r\n\r\n", &mut block);
    assert_eq!(block, [0x88, 0x80 | 62]);
}

#[test]
fn a_name_lowers_to_its_entry_only_when_only_case_differs() {
    for (name, lower, want) in [
        (&b"Content-Type"[..], &b"content-type"[..], true),
        (b"content-type", b"content-type", true),
        (b"ETag", b"etag", true),
        (b"ETag", b"etags", false),
        (b"X^Y", b"x~y", false),
        (b"X_Y", b"x\x7fy", false),
        (b"", b"", true),
        (
            b"Strict-Transport-Security",
            b"strict-transport-security",
            true,
        ),
        (
            b"Strict-Transport-Securitx",
            b"strict-transport-security",
            false,
        ),
        (
            b"Xtrict-Transport-Security",
            b"strict-transport-security",
            false,
        ),
        (b"Last-Modified", b"last-modified", true),
        (b"Last-Modified", b"last-modifies", false),
        (b"X-Abc^Def_Ghi", b"x-abc~def_ghi", false),
        (b"X-Abc_Def-Ghi", b"x-abc\x7fdef-ghi", false),
        (b"X-ABC@DEF[GHI", b"x-abc`def{ghi", false),
        // Two bytes off by the same bits: the differences must not cancel.
        (b"AA", b"cc", false),
    ] {
        assert_eq!(lowers_to(name, lower), want, "{name:?} {lower:?}");
    }
}

#[test]
fn eight_bytes_lower_case_as_the_standard_library_lowers_them() {
    let mut bytes: Vec<u8> = (0..=255).collect();
    bytes.extend_from_slice(b"@AZ[`az{");
    for chunk in bytes.chunks(8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap());
        let want: Vec<u8> = chunk.iter().map(u8::to_ascii_lowercase).collect();
        assert_eq!(lower8(word).to_le_bytes()[..], want[..], "{chunk:x?}");
    }
}

#[test]
fn a_line_rendered_otherwise_than_name_colon_space_value_is_still_sent_right() {
    // No space, two spaces, a tab, trailing space: the whole-line check
    // fails, the slow path finds the entry by name and value.
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let want = fields(&[(":status", "200"), ("etag", "\"x\"")]);
    for line in [
        "ETag: \"x\"",
        "ETag:\"x\"",
        "ETag:  \"x\"",
        "ETag:\t\"x\" ",
        "ETag: \"x\"",
    ] {
        let head = format!("HTTP/1.1 200 OK\r\n{line}\r\n\r\n");
        let mut block = Vec::new();
        enc.head(head.as_bytes(), &mut block);
        assert_eq!(decoded(&mut dec, &block), want, "{line:?}");
    }
    assert_eq!(enc.entries.len(), 1);
}

#[test]
fn lines_sharing_a_bucket_are_all_found_after_a_third_evicts_one() {
    // Three lines of one bucket: the first two are found by the table,
    // the third pushes the oldest out, which is then found by the walk
    // and put back. Every block decodes right throughout.
    let mut names = Vec::new();
    let bucket = line_bucket(b"X-0: v");
    for i in 0.. {
        let line = format!("X-{i}: v");
        if line_bucket(line.as_bytes()) == bucket {
            names.push(format!("X-{i}"));
            if names.len() == 3 {
                break;
            }
        }
    }
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    for round in 0..3 {
        for name in &names {
            let head = format!("HTTP/1.1 200 OK\r\n{name}: v\r\n\r\n");
            let mut block = Vec::new();
            enc.head(head.as_bytes(), &mut block);
            assert_eq!(
                decoded(&mut dec, &block),
                fields(&[(":status", "200"), (&name.to_lowercase(), "v")])
            );
            if round > 0 {
                assert_eq!(block.len(), 2, "{name}: an index");
            }
        }
    }
    assert!(LINE_SLOTS.is_power_of_two() && bucket + 1 < LINE_SLOTS);
}

#[test]
fn a_field_is_found_by_the_walk_among_many_of_its_name() {
    // Many `etag` entries: a new value is a literal naming the static
    // `etag`, an old one (whose line slot another line took) an index.
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    for i in 0..20 {
        let mut block = Vec::new();
        enc.begin(&mut block);
        enc.field(
            b"etag",
            format!("\"{i}\"").as_bytes(),
            Indexing::Incremental,
            &mut block,
        );
        assert_eq!(block[0], 0x40 | 34, "{i}: literal, static name");
        decoded(&mut dec, &block);
    }
    let mut block = Vec::new();
    enc.field(b"etag", b"\"3\"", Indexing::Without, &mut block);
    assert_eq!(block, [0x80 | (DYNAMIC_BASE + 16) as u8]);
    assert_eq!(decoded(&mut dec, &block), fields(&[("etag", "\"3\"")]));
    // A name outside the static table: the newest entry of that name.
    for v in ["a", "b"] {
        let mut block = Vec::new();
        enc.field(b"x-own", v.as_bytes(), Indexing::Incremental, &mut block);
        decoded(&mut dec, &block);
    }
    let mut block = Vec::new();
    enc.field(b"x-own", b"c", Indexing::Without, &mut block);
    assert_eq!(block, [0x0f, DYNAMIC_BASE as u8 - 15, 1, b'c']);
    assert_eq!(decoded(&mut dec, &block), fields(&[("x-own", "c")]));
}

/// The statuses the static table holds (RFC 7541 Appendix A, indexes 8
/// to 14) are one byte each; the others are literals.
#[test]
fn static_table_statuses_are_one_byte_each() {
    let mut enc = Encoder::default();
    for (code, index) in [
        (200u16, 8u8),
        (204, 9),
        (206, 10),
        (304, 11),
        (400, 12),
        (404, 13),
        (500, 14),
    ] {
        let mut block = Vec::new();
        enc.status(code, &mut block);
        assert_eq!(block, [0x80 | index], "{code}");
    }
    let mut block = Vec::new();
    enc.status(301, &mut block);
    assert!(block.len() > 1, "{block:x?}");
}

/// One change of the peer's table size is announced once; a drop and a
/// rise in one SETTINGS frame are two updates, unless the table is
/// already within the lower bound (then only the final one is needed).
#[test]
fn each_table_size_change_is_announced_once() {
    let mut enc = Encoder::default();
    let mut block = Vec::new();
    enc.peer_table_size(1000);
    enc.begin(&mut block);
    // 1000 as a 5-bit-prefix integer: 31, then 969 in two 7-bit groups.
    assert_eq!(block, [0x3f, 0xc9, 0x07], "one update");
    block.clear();
    enc.begin(&mut block);
    assert!(block.is_empty(), "announced already: {block:x?}");
    enc.peer_table_size(1000);
    enc.peer_table_size(2000);
    enc.begin(&mut block);
    assert_eq!(block, [0x3f, 0xb1, 0x0f], "only the final 2000");
    block.clear();
    enc.peer_table_size(500);
    enc.peer_table_size(2000);
    enc.begin(&mut block);
    assert_eq!(
        block,
        [0x3f, 0xd5, 0x03, 0x3f, 0xb1, 0x0f],
        "500 (below 2000), then 2000"
    );
}

/// Entries fill the table to the byte: a field that makes it exactly
/// full evicts nothing, and the table's size counts every entry.
#[test]
fn a_table_filled_to_the_byte_keeps_every_entry() {
    let mut enc = Encoder::default();
    enc.peer_table_size(100);
    let mut block = Vec::new();
    enc.begin(&mut block);
    // Each entry is 3 + 15 + 32 = 50 bytes.
    enc.field(b"x-a", &[b'a'; 15], Indexing::Incremental, &mut block);
    enc.field(b"x-b", &[b'b'; 15], Indexing::Incremental, &mut block);
    assert_eq!(enc.table_size(), 100);
    // Both are still there: x-a, the older, is index 63.
    let mut again = Vec::new();
    enc.field(b"x-a", &[b'a'; 15], Indexing::Incremental, &mut again);
    assert_eq!(again, [0x80 | 63]);
    // One byte more than fits evicts the oldest.
    enc.field(b"x-c", &[b'c'; 16], Indexing::Incremental, &mut again);
    assert_eq!(enc.table_size(), 51);
}

/// A new value for a name only the dynamic table holds names that entry
/// by its index, wherever it stands in the table.
#[test]
fn a_new_value_names_its_dynamic_entry_by_index() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let mut block = Vec::new();
    enc.begin(&mut block);
    enc.field(b"x-a", b"1", Indexing::Incremental, &mut block);
    enc.field(b"x-b", b"1", Indexing::Incremental, &mut block);
    let mut third = Vec::new();
    enc.field(b"x-a", b"2", Indexing::Incremental, &mut third);
    // Literal with incremental indexing naming index 63 (x-a, behind
    // x-b): 63 fills the 6-bit prefix, so a zero byte follows.
    assert_eq!(third, [0x7f, 0x00, 0x01, b'2']);
    block.extend_from_slice(&third);
    assert_eq!(
        decoded(&mut dec, &block),
        fields(&[("x-a", "1"), ("x-b", "1"), ("x-a", "2")])
    );
}

/// A one-byte line is a line, not the blank line that ends the head.
#[test]
fn a_one_byte_line_does_not_end_the_head() {
    let mut enc = Encoder::default();
    let head = b"HTTP/1.1 200 OK\r\nB\nC: 1\r\n\r\n";
    let mut block = Vec::new();
    assert_eq!(enc.head(head, &mut block), Some((200, head.len())));
    let mut dec = loona_hpack::Decoder::new();
    assert_eq!(
        decoded(&mut dec, &block),
        fields(&[(":status", "200"), ("c", "1")])
    );
}

/// The 66th entry is index 127, which no longer fits the one-byte form:
/// it is sent as 127 in the 7-bit prefix and a zero byte.
#[test]
fn the_entry_at_index_127_takes_two_bytes() {
    let mut enc = Encoder::default();
    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..66 {
        head.extend_from_slice(format!("X: {i:02}\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    let mut block = Vec::new();
    enc.head(&head, &mut block);
    let mut again = Vec::new();
    enc.head(b"HTTP/1.1 200 OK\r\nX: 00\r\n\r\n", &mut again);
    assert_eq!(again, [0x88, 0xff, 0x00]);
    let mut dec = loona_hpack::Decoder::new();
    decoded(&mut dec, &block);
    assert_eq!(
        decoded(&mut dec, &again),
        fields(&[(":status", "200"), ("x", "00")])
    );
}

/// A line whose bucket names an entry of its name, with the entry's value
/// two bytes after the name but not after `: `, is not that entry.
#[test]
fn a_line_matches_its_entry_only_after_colon_space() {
    let mut enc = Encoder::default();
    let mut dec = loona_hpack::Decoder::new();
    let mut block = Vec::new();
    enc.head(b"HTTP/1.1 200 OK\r\nx-a: 1\r\n\r\n", &mut block);
    decoded(&mut dec, &block);
    let bucket = line_bucket(b"x-a: 1");
    // `X-a:c1` (any case of the name, any c): one lands in the bucket.
    let line = ["x-a", "X-a", "x-A", "X-A"]
        .iter()
        .flat_map(|n| (b'!'..=b'~').map(move |c| format!("{n}:{}1", c as char)))
        .find(|l| line_bucket(l.as_bytes()) == bucket)
        .expect("a line in the same bucket");
    let value = line[4..].to_string();
    let mut block = Vec::new();
    let head = format!("HTTP/1.1 200 OK\r\n{line}\r\n\r\n");
    enc.head(head.as_bytes(), &mut block);
    assert_eq!(
        decoded(&mut dec, &block),
        fields(&[(":status", "200"), ("x-a", &value)]),
        "{line}"
    );
}

/// A field whose name the static table holds names it by that index
/// (RFC 7541 Appendix A: the first entry with the name).
#[test]
fn static_table_names_are_sent_by_index() {
    for (name, index) in [
        (":status", 8usize),
        ("accept-ranges", 18),
        ("access-control-allow-origin", 20),
        ("age", 21),
        ("allow", 22),
        ("cache-control", 24),
        ("content-disposition", 25),
        ("content-encoding", 26),
        ("content-language", 27),
        ("content-length", 28),
        ("content-location", 29),
        ("content-range", 30),
        ("content-type", 31),
        ("date", 33),
        ("etag", 34),
        ("expires", 36),
        ("last-modified", 44),
        ("link", 45),
        ("location", 46),
        ("retry-after", 53),
        ("server", 54),
        ("set-cookie", 55),
        ("strict-transport-security", 56),
        ("vary", 59),
        ("via", 60),
        ("www-authenticate", 61),
    ] {
        let mut enc = Encoder::default();
        let mut block = Vec::new();
        enc.field(name.as_bytes(), b"v", Indexing::Without, &mut block);
        // A literal without indexing: the name's index in a 4-bit prefix.
        let mut want = Vec::new();
        integer(&mut want, index, 4, 0x00);
        want.extend_from_slice(&[1, b'v']);
        assert_eq!(block, want, "{name}");
    }
}

/// Whitespace around a value is not part of it (RFC 9110 §5.5), at
/// either end.
#[test]
fn values_are_sent_without_surrounding_whitespace() {
    let mut enc = Encoder::default();
    let head = b"HTTP/1.1 200 OK\r\nA: x \t\r\nB:\ty\r\nC:  z\r\n\r\n";
    let mut block = Vec::new();
    enc.head(head, &mut block);
    let mut dec = loona_hpack::Decoder::new();
    assert_eq!(
        decoded(&mut dec, &block),
        fields(&[(":status", "200"), ("a", "x"), ("b", "y"), ("c", "z")])
    );
}
