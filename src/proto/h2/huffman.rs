//! HPACK Huffman decoding (RFC 7541 §5.2 and Appendix B), table-driven.
//!
//! The code is walked four bits at a time: a state is an internal node of
//! the code's tree (256 of them for 257 symbols), and each of its 16
//! nibbles leads to the next state, emitting at most one symbol (the
//! shortest code is 5 bits). The table, 12 KiB, is built at compile time
//! from [`CODES`] by a `const fn`. `loona-hpack`'s own decoder walks one
//! bit at a time with a hash map lookup per bit; this one costs two table
//! loads per input byte.

/// RFC 7541 Appendix B: (code, length in bits) for each symbol, the code
/// right-aligned; symbol 256 is EOS.
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),     //  (0)
    (0x7fffd8, 23),   //  (1)
    (0xfffffe2, 28),  //  (2)
    (0xfffffe3, 28),  //  (3)
    (0xfffffe4, 28),  //  (4)
    (0xfffffe5, 28),  //  (5)
    (0xfffffe6, 28),  //  (6)
    (0xfffffe7, 28),  //  (7)
    (0xfffffe8, 28),  //  (8)
    (0xffffea, 24),   //  (9)
    (0x3ffffffc, 30), //  (10)
    (0xfffffe9, 28),  //  (11)
    (0xfffffea, 28),  //  (12)
    (0x3ffffffd, 30), //  (13)
    (0xfffffeb, 28),  //  (14)
    (0xfffffec, 28),  //  (15)
    (0xfffffed, 28),  //  (16)
    (0xfffffee, 28),  //  (17)
    (0xfffffef, 28),  //  (18)
    (0xffffff0, 28),  //  (19)
    (0xffffff1, 28),  //  (20)
    (0xffffff2, 28),  //  (21)
    (0x3ffffffe, 30), //  (22)
    (0xffffff3, 28),  //  (23)
    (0xffffff4, 28),  //  (24)
    (0xffffff5, 28),  //  (25)
    (0xffffff6, 28),  //  (26)
    (0xffffff7, 28),  //  (27)
    (0xffffff8, 28),  //  (28)
    (0xffffff9, 28),  //  (29)
    (0xffffffa, 28),  //  (30)
    (0xffffffb, 28),  //  (31)
    (0x14, 6),        // ' ' (32)
    (0x3f8, 10),      // '!' (33)
    (0x3f9, 10),      // '"' (34)
    (0xffa, 12),      // '#' (35)
    (0x1ff9, 13),     // '$' (36)
    (0x15, 6),        // '%' (37)
    (0xf8, 8),        // '&' (38)
    (0x7fa, 11),      // "'" (39)
    (0x3fa, 10),      // '(' (40)
    (0x3fb, 10),      // ')' (41)
    (0xf9, 8),        // '*' (42)
    (0x7fb, 11),      // '+' (43)
    (0xfa, 8),        // ',' (44)
    (0x16, 6),        // '-' (45)
    (0x17, 6),        // '.' (46)
    (0x18, 6),        // '/' (47)
    (0x0, 5),         // '0' (48)
    (0x1, 5),         // '1' (49)
    (0x2, 5),         // '2' (50)
    (0x19, 6),        // '3' (51)
    (0x1a, 6),        // '4' (52)
    (0x1b, 6),        // '5' (53)
    (0x1c, 6),        // '6' (54)
    (0x1d, 6),        // '7' (55)
    (0x1e, 6),        // '8' (56)
    (0x1f, 6),        // '9' (57)
    (0x5c, 7),        // ':' (58)
    (0xfb, 8),        // ';' (59)
    (0x7ffc, 15),     // '<' (60)
    (0x20, 6),        // '=' (61)
    (0xffb, 12),      // '>' (62)
    (0x3fc, 10),      // '?' (63)
    (0x1ffa, 13),     // '@' (64)
    (0x21, 6),        // 'A' (65)
    (0x5d, 7),        // 'B' (66)
    (0x5e, 7),        // 'C' (67)
    (0x5f, 7),        // 'D' (68)
    (0x60, 7),        // 'E' (69)
    (0x61, 7),        // 'F' (70)
    (0x62, 7),        // 'G' (71)
    (0x63, 7),        // 'H' (72)
    (0x64, 7),        // 'I' (73)
    (0x65, 7),        // 'J' (74)
    (0x66, 7),        // 'K' (75)
    (0x67, 7),        // 'L' (76)
    (0x68, 7),        // 'M' (77)
    (0x69, 7),        // 'N' (78)
    (0x6a, 7),        // 'O' (79)
    (0x6b, 7),        // 'P' (80)
    (0x6c, 7),        // 'Q' (81)
    (0x6d, 7),        // 'R' (82)
    (0x6e, 7),        // 'S' (83)
    (0x6f, 7),        // 'T' (84)
    (0x70, 7),        // 'U' (85)
    (0x71, 7),        // 'V' (86)
    (0x72, 7),        // 'W' (87)
    (0xfc, 8),        // 'X' (88)
    (0x73, 7),        // 'Y' (89)
    (0xfd, 8),        // 'Z' (90)
    (0x1ffb, 13),     // '[' (91)
    (0x7fff0, 19),    // '\\' (92)
    (0x1ffc, 13),     // ']' (93)
    (0x3ffc, 14),     // '^' (94)
    (0x22, 6),        // '_' (95)
    (0x7ffd, 15),     // '`' (96)
    (0x3, 5),         // 'a' (97)
    (0x23, 6),        // 'b' (98)
    (0x4, 5),         // 'c' (99)
    (0x24, 6),        // 'd' (100)
    (0x5, 5),         // 'e' (101)
    (0x25, 6),        // 'f' (102)
    (0x26, 6),        // 'g' (103)
    (0x27, 6),        // 'h' (104)
    (0x6, 5),         // 'i' (105)
    (0x74, 7),        // 'j' (106)
    (0x75, 7),        // 'k' (107)
    (0x28, 6),        // 'l' (108)
    (0x29, 6),        // 'm' (109)
    (0x2a, 6),        // 'n' (110)
    (0x7, 5),         // 'o' (111)
    (0x2b, 6),        // 'p' (112)
    (0x76, 7),        // 'q' (113)
    (0x2c, 6),        // 'r' (114)
    (0x8, 5),         // 's' (115)
    (0x9, 5),         // 't' (116)
    (0x2d, 6),        // 'u' (117)
    (0x77, 7),        // 'v' (118)
    (0x78, 7),        // 'w' (119)
    (0x79, 7),        // 'x' (120)
    (0x7a, 7),        // 'y' (121)
    (0x7b, 7),        // 'z' (122)
    (0x7ffe, 15),     // '{' (123)
    (0x7fc, 11),      // '|' (124)
    (0x3ffd, 14),     // '}' (125)
    (0x1ffd, 13),     // '~' (126)
    (0xffffffc, 28),  //  (127)
    (0xfffe6, 20),    //  (128)
    (0x3fffd2, 22),   //  (129)
    (0xfffe7, 20),    //  (130)
    (0xfffe8, 20),    //  (131)
    (0x3fffd3, 22),   //  (132)
    (0x3fffd4, 22),   //  (133)
    (0x3fffd5, 22),   //  (134)
    (0x7fffd9, 23),   //  (135)
    (0x3fffd6, 22),   //  (136)
    (0x7fffda, 23),   //  (137)
    (0x7fffdb, 23),   //  (138)
    (0x7fffdc, 23),   //  (139)
    (0x7fffdd, 23),   //  (140)
    (0x7fffde, 23),   //  (141)
    (0xffffeb, 24),   //  (142)
    (0x7fffdf, 23),   //  (143)
    (0xffffec, 24),   //  (144)
    (0xffffed, 24),   //  (145)
    (0x3fffd7, 22),   //  (146)
    (0x7fffe0, 23),   //  (147)
    (0xffffee, 24),   //  (148)
    (0x7fffe1, 23),   //  (149)
    (0x7fffe2, 23),   //  (150)
    (0x7fffe3, 23),   //  (151)
    (0x7fffe4, 23),   //  (152)
    (0x1fffdc, 21),   //  (153)
    (0x3fffd8, 22),   //  (154)
    (0x7fffe5, 23),   //  (155)
    (0x3fffd9, 22),   //  (156)
    (0x7fffe6, 23),   //  (157)
    (0x7fffe7, 23),   //  (158)
    (0xffffef, 24),   //  (159)
    (0x3fffda, 22),   //  (160)
    (0x1fffdd, 21),   //  (161)
    (0xfffe9, 20),    //  (162)
    (0x3fffdb, 22),   //  (163)
    (0x3fffdc, 22),   //  (164)
    (0x7fffe8, 23),   //  (165)
    (0x7fffe9, 23),   //  (166)
    (0x1fffde, 21),   //  (167)
    (0x7fffea, 23),   //  (168)
    (0x3fffdd, 22),   //  (169)
    (0x3fffde, 22),   //  (170)
    (0xfffff0, 24),   //  (171)
    (0x1fffdf, 21),   //  (172)
    (0x3fffdf, 22),   //  (173)
    (0x7fffeb, 23),   //  (174)
    (0x7fffec, 23),   //  (175)
    (0x1fffe0, 21),   //  (176)
    (0x1fffe1, 21),   //  (177)
    (0x3fffe0, 22),   //  (178)
    (0x1fffe2, 21),   //  (179)
    (0x7fffed, 23),   //  (180)
    (0x3fffe1, 22),   //  (181)
    (0x7fffee, 23),   //  (182)
    (0x7fffef, 23),   //  (183)
    (0xfffea, 20),    //  (184)
    (0x3fffe2, 22),   //  (185)
    (0x3fffe3, 22),   //  (186)
    (0x3fffe4, 22),   //  (187)
    (0x7ffff0, 23),   //  (188)
    (0x3fffe5, 22),   //  (189)
    (0x3fffe6, 22),   //  (190)
    (0x7ffff1, 23),   //  (191)
    (0x3ffffe0, 26),  //  (192)
    (0x3ffffe1, 26),  //  (193)
    (0xfffeb, 20),    //  (194)
    (0x7fff1, 19),    //  (195)
    (0x3fffe7, 22),   //  (196)
    (0x7ffff2, 23),   //  (197)
    (0x3fffe8, 22),   //  (198)
    (0x1ffffec, 25),  //  (199)
    (0x3ffffe2, 26),  //  (200)
    (0x3ffffe3, 26),  //  (201)
    (0x3ffffe4, 26),  //  (202)
    (0x7ffffde, 27),  //  (203)
    (0x7ffffdf, 27),  //  (204)
    (0x3ffffe5, 26),  //  (205)
    (0xfffff1, 24),   //  (206)
    (0x1ffffed, 25),  //  (207)
    (0x7fff2, 19),    //  (208)
    (0x1fffe3, 21),   //  (209)
    (0x3ffffe6, 26),  //  (210)
    (0x7ffffe0, 27),  //  (211)
    (0x7ffffe1, 27),  //  (212)
    (0x3ffffe7, 26),  //  (213)
    (0x7ffffe2, 27),  //  (214)
    (0xfffff2, 24),   //  (215)
    (0x1fffe4, 21),   //  (216)
    (0x1fffe5, 21),   //  (217)
    (0x3ffffe8, 26),  //  (218)
    (0x3ffffe9, 26),  //  (219)
    (0xffffffd, 28),  //  (220)
    (0x7ffffe3, 27),  //  (221)
    (0x7ffffe4, 27),  //  (222)
    (0x7ffffe5, 27),  //  (223)
    (0xfffec, 20),    //  (224)
    (0xfffff3, 24),   //  (225)
    (0xfffed, 20),    //  (226)
    (0x1fffe6, 21),   //  (227)
    (0x3fffe9, 22),   //  (228)
    (0x1fffe7, 21),   //  (229)
    (0x1fffe8, 21),   //  (230)
    (0x7ffff3, 23),   //  (231)
    (0x3fffea, 22),   //  (232)
    (0x3fffeb, 22),   //  (233)
    (0x1ffffee, 25),  //  (234)
    (0x1ffffef, 25),  //  (235)
    (0xfffff4, 24),   //  (236)
    (0xfffff5, 24),   //  (237)
    (0x3ffffea, 26),  //  (238)
    (0x7ffff4, 23),   //  (239)
    (0x3ffffeb, 26),  //  (240)
    (0x7ffffe6, 27),  //  (241)
    (0x3ffffec, 26),  //  (242)
    (0x3ffffed, 26),  //  (243)
    (0x7ffffe7, 27),  //  (244)
    (0x7ffffe8, 27),  //  (245)
    (0x7ffffe9, 27),  //  (246)
    (0x7ffffea, 27),  //  (247)
    (0x7ffffeb, 27),  //  (248)
    (0xffffffe, 28),  //  (249)
    (0x7ffffec, 27),  //  (250)
    (0x7ffffed, 27),  //  (251)
    (0x7ffffee, 27),  //  (252)
    (0x7ffffef, 27),  //  (253)
    (0x7fffff0, 27),  //  (254)
    (0x3ffffee, 26),  //  (255)
    (0x3fffffff, 30), // EOS (256)
];

const EOS: u16 = 256;

/// Why a Huffman-coded string was refused (RFC 7541 §5.2): each is a
/// COMPRESSION_ERROR for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The EOS symbol appeared in the string.
    Eos,
    /// More than 7 bits of padding.
    PaddingTooLong,
    /// Padding that is not a prefix of EOS (all ones).
    PaddingNotEos,
}

/// The step's symbol is output.
const EMIT: u8 = 1;
/// The nibble completes EOS: the string is invalid.
const FAIL: u8 = 2;

/// One transition: from a state, on a nibble.
#[derive(Clone, Copy)]
struct Step {
    next: u8,
    flags: u8,
    sym: u8,
}

/// What ending the string in a state means.
const END_OK: u8 = 0;
const END_TOO_LONG: u8 = 1;
const END_NOT_EOS: u8 = 2;

struct Machine {
    steps: [[Step; 16]; 256],
    end: [u8; 256],
}

/// A tree child that is a leaf: the low bits are its symbol.
const LEAF: u16 = 0x8000;

static MACHINE: Machine = build();

const fn build() -> Machine {
    // The code's tree: internal nodes by index, the root at 0 (never a
    // child, so 0 also means "no child yet").
    let mut tree = [[0u16; 2]; 256];
    let mut nodes = 1;
    let mut sym = 0;
    while sym < CODES.len() {
        let (code, len) = CODES[sym];
        let mut node = 0;
        let mut bit = len;
        while bit > 1 {
            bit -= 1;
            let b = ((code >> bit) & 1) as usize;
            if tree[node][b] == 0 {
                assert!(nodes < 256, "not a prefix code");
                tree[node][b] = nodes as u16;
                nodes += 1;
            }
            assert!(tree[node][b] & LEAF == 0, "not a prefix code");
            node = tree[node][b] as usize;
        }
        assert!(tree[node][(code & 1) as usize] == 0, "not a prefix code");
        tree[node][(code & 1) as usize] = LEAF | sym as u16;
        sym += 1;
    }
    // 257 leaves in a full binary tree: every node has both children.
    assert!(nodes == 256, "not a complete code");

    let mut steps = [[Step {
        next: 0,
        flags: 0,
        sym: 0,
    }; 16]; 256];
    let mut state = 0;
    while state < 256 {
        let mut nib = 0;
        while nib < 16 {
            let mut node = state;
            let mut flags = 0;
            let mut out = 0;
            let mut i = 4;
            while i > 0 {
                i -= 1;
                let child = tree[node][(nib >> i) & 1];
                if child & LEAF == 0 {
                    node = child as usize;
                } else if child & !LEAF == EOS {
                    flags = FAIL;
                    node = 0;
                    break;
                } else {
                    assert!(flags & EMIT == 0, "two symbols in a nibble");
                    flags |= EMIT;
                    out = (child & !LEAF) as u8;
                    node = 0;
                }
            }
            steps[state][nib] = Step {
                next: node as u8,
                flags,
                sym: out,
            };
            nib += 1;
        }
        state += 1;
    }

    // Ending at the root is a clean end; ending on the all-ones path (a
    // prefix of EOS) is padding, allowed up to 7 bits; anything else is
    // the start of a real symbol.
    let mut end = [END_NOT_EOS; 256];
    end[0] = END_OK;
    let mut node = 0;
    let mut depth = 0;
    while tree[node][1] & LEAF == 0 {
        node = tree[node][1] as usize;
        depth += 1;
        end[node] = if depth <= 7 { END_OK } else { END_TOO_LONG };
    }
    Machine { steps, end }
}

/// Decode the Huffman-coded `data`, appending to `out`. On error `out` is
/// left as it was.
pub fn decode(data: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    let start = out.len();
    // At most 8/5 symbols per byte: one reservation per string, none once
    // a reused buffer has grown.
    out.reserve(data.len() * 8 / 5);
    let mut state = 0usize;
    for &byte in data {
        for nib in [byte >> 4, byte & 0x0f] {
            let step = MACHINE.steps[state][usize::from(nib)];
            if step.flags & FAIL != 0 {
                out.truncate(start);
                return Err(Error::Eos);
            }
            if step.flags & EMIT != 0 {
                out.push(step.sym);
            }
            state = usize::from(step.next);
        }
    }
    match MACHINE.end[state] {
        END_OK => Ok(()),
        end => {
            out.truncate(start);
            Err(if end == END_TOO_LONG {
                Error::PaddingTooLong
            } else {
                Error::PaddingNotEos
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test-only encoder from the same table: codes packed MSB first,
    /// the last byte padded with the top bits of EOS (ones).
    fn encode(symbols: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut acc = 0u64;
        let mut bits = 0;
        for &s in symbols {
            let (code, len) = CODES[usize::from(s)];
            acc = (acc << len) | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits > 0 {
            out.push((acc << (8 - bits)) as u8 | (0xff >> bits));
        }
        out
    }

    fn bytes(s: &[u8]) -> Vec<u16> {
        s.iter().map(|&b| u16::from(b)).collect()
    }

    fn decoded(data: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        decode(data, &mut out).map(|()| out)
    }

    /// SplitMix64: a fixed sequence, so a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn the_table_is_canonical_and_complete() {
        // RFC 7541's code is canonical: codes in order of length, then
        // symbol, each one more than the last (shifted when longer).
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut next = 0u64;
        let mut prev_len = CODES[order[0]].1;
        for s in order {
            let (code, len) = CODES[s];
            next <<= len - prev_len;
            prev_len = len;
            assert_eq!(u64::from(code), next, "symbol {s}");
            next += 1;
        }
        assert_eq!(CODES[256], (0x3fff_ffff, 30));
        assert_eq!(CODES[usize::from(b'a')], (0x3, 5));
    }

    #[test]
    fn every_symbol_round_trips() {
        for s in 0..=255u16 {
            assert_eq!(decoded(&encode(&[s])), Ok(vec![s as u8]), "symbol {s}");
            // Behind a symbol that leaves the state mid-byte.
            assert_eq!(
                decoded(&encode(&[u16::from(b'a'), s, u16::from(b'!')])),
                Ok(vec![b'a', s as u8, b'!']),
                "symbol {s}"
            );
        }
        let all: Vec<u16> = (0..=255).chain((0..=255).rev()).collect();
        let want: Vec<u8> = all.iter().map(|&s| s as u8).collect();
        assert_eq!(decoded(&encode(&all)), Ok(want));
        assert_eq!(decoded(&[]), Ok(vec![]));
    }

    #[test]
    fn rfc_7541_appendix_c4_examples() {
        let cases: [(&[u8], &[u8]); 4] = [
            (
                &[
                    0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
                ],
                b"www.example.com",
            ),
            (&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], b"no-cache"),
            (
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f],
                b"custom-key",
            ),
            (
                &[0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf],
                b"custom-value",
            ),
        ];
        for (coded, plain) in cases {
            assert_eq!(decoded(coded).as_deref(), Ok(plain));
            assert_eq!(encode(&bytes(plain)), coded);
        }
    }

    #[test]
    fn the_three_errors_of_section_5_2() {
        let a = u16::from(b'a'); // 00011
                                 // EOS in the string, between symbols and at the end.
        assert_eq!(decoded(&encode(&[a, EOS, a])), Err(Error::Eos));
        assert_eq!(decoded(&encode(&[a, a, EOS])), Err(Error::Eos));
        assert_eq!(decoded(&[0xff, 0xff, 0xff, 0xff]), Err(Error::Eos));
        // 'a' then 3 bits of ones is fine; 11 bits, or 8 alone, are not.
        assert_eq!(decoded(&[0x1f]), Ok(b"a".to_vec()));
        assert_eq!(decoded(&[0x1f, 0xff]), Err(Error::PaddingTooLong));
        assert_eq!(decoded(&[0xff]), Err(Error::PaddingTooLong));
        // 7 bits of ones after a whole-byte symbol ('&' is 11111000).
        assert_eq!(decoded(&[0xf8, 0xfe]), Err(Error::PaddingNotEos));
        assert_eq!(decoded(&[0xf8]), Ok(b"&".to_vec()));
        // Padding with a zero in it.
        assert_eq!(decoded(&[0x18]), Err(Error::PaddingNotEos));
        assert_eq!(decoded(&[0x1e]), Err(Error::PaddingNotEos));
    }

    #[test]
    fn decoding_appends_and_an_error_leaves_the_buffer_alone() {
        let mut out = b"head:".to_vec();
        decode(&encode(&bytes(b"value")), &mut out).unwrap();
        assert_eq!(out, b"head:value");
        assert_eq!(
            decode(&encode(&[u16::from(b'x'), EOS]), &mut out),
            Err(Error::Eos)
        );
        assert_eq!(out, b"head:value");
        assert_eq!(decode(&[0x18], &mut out), Err(Error::PaddingNotEos));
        assert_eq!(out, b"head:value");
    }

    #[test]
    fn agrees_with_loona_hpack_on_random_strings() {
        let mut rng = Rng(7541);
        let mut theirs = loona_hpack::huffman::HuffmanDecoder::new();
        let (mut ok, mut err) = (0, 0);
        for round in 0..20_000 {
            let data: Vec<u8> = match round % 4 {
                // Arbitrary bytes: mostly bad padding, some valid.
                0 => (0..rng.below(24)).map(|_| rng.next() as u8).collect(),
                // Valid strings of any bytes, short symbols weighted.
                1 | 2 => {
                    let n = rng.below(40);
                    let s: Vec<u16> = (0..n)
                        .map(|_| match rng.below(3) {
                            0 => rng.below(256) as u16,
                            _ => u16::from(
                                b"abcdefghijklmnopqrstuvwxyz/.-_0123456789"[rng.below(40)],
                            ),
                        })
                        .collect();
                    let mut d = encode(&s);
                    if round % 4 == 2 && !d.is_empty() {
                        // Damaged: a flipped bit, a cut, a byte of ones
                        // more, or EOS spliced in.
                        match rng.below(4) {
                            0 => {
                                let i = rng.below(d.len());
                                d[i] ^= 1 << rng.below(8);
                            }
                            1 => d.truncate(rng.below(d.len())),
                            2 => d.push(0xff),
                            _ => {
                                let mut s = s;
                                s.insert(rng.below(s.len() + 1), EOS);
                                d = encode(&s);
                            }
                        }
                    }
                    d
                }
                // Runs of ones: EOS and long padding.
                _ => {
                    let mut d = vec![0xff; rng.below(6)];
                    d.insert(0, rng.next() as u8);
                    d
                }
            };
            let ours = decoded(&data);
            let want = theirs.decode(&data);
            match (&ours, &want) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "{data:02x?}");
                    ok += 1;
                }
                (Err(_), Err(_)) => err += 1,
                _ => panic!("{data:02x?}: ours {ours:?}, loona-hpack {want:?}"),
            }
        }
        assert!(ok > 5_000 && err > 5_000, "ok {ok}, err {err}");
    }
}
