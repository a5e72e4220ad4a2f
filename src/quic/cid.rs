//! Connection IDs that name their shard, and the classic BPF program that
//! sends each packet to the shard its destination connection ID names.
//!
//! Every connection ID the server issues is [`CID_LEN`] bytes: the shard's
//! index (two bytes, big-endian), the process generation (one byte: 0 for
//! a process started afresh, one more for each SIGUSR2 upgrade), then
//! nine random bytes. Shard and generation are visible on the wire, as
//! nginx's worker id and QUIC-LB's plaintext server ids are; they say
//! which of this server's cores and processes holds the connection,
//! nothing about the connection itself. The generation lets the process
//! that took over the sockets pass an older connection's packets to the
//! process that holds it (`forward`).
//!
//! The program runs on each datagram that reaches the `SO_REUSEPORT`
//! group of a QUIC address (the UDP payload starts at offset 0). A short
//! header (first bit 0) has the destination ID at byte 1; a long header
//! has its length at byte 5 and the ID from byte 6. When the ID has our
//! length and its first two bytes are below the number of shards, they
//! are the index of the socket to wake; otherwise the program returns an
//! index past the group, and the kernel uses its flow hash instead. A
//! client's first Initial carries an ID of its own choosing, so new
//! connections spread by either, and every later packet, whatever address
//! it comes from (NAT rebinding, migration), finds its shard.

use quinn_proto::{ConnectionId, ConnectionIdGenerator};

use crate::sys::bpf::{
    Insn, BPF_A, BPF_ABS, BPF_B, BPF_H, BPF_JA, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_JSET, BPF_K, BPF_LD,
    BPF_RET,
};

/// Bytes of every connection ID the server issues.
pub const CID_LEN: usize = 12;

/// Issues the connection IDs of one shard.
pub struct ShardCids {
    shard: u16,
    generation: u8,
}

impl ShardCids {
    pub fn new(shard: usize, generation: u8) -> ShardCids {
        ShardCids {
            shard: shard as u16,
            generation,
        }
    }
}

impl ConnectionIdGenerator for ShardCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        id[..2].copy_from_slice(&self.shard.to_be_bytes());
        id[2] = self.generation;
        // aws-lc's DRBG, the randomness of the TLS keys.
        aws_lc_rs::rand::fill(&mut id[3..]).expect("the system random source works");
        ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Where a packet's destination ID says it belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routed {
    pub shard: usize,
    pub generation: u8,
    /// The ID is surely one the server chose (a short header or a
    /// Handshake packet). An Initial's is the server's once the server
    /// has answered, but the client's own, random, in its first Initial.
    pub ours: bool,
}

/// Where the destination ID of a short-header packet, or of a QUIC v1
/// Initial or Handshake packet with an ID of our length, says the packet
/// belongs (a datagram's first packet decides for the packets coalesced
/// after it). A 0-RTT packet's ID is always the client's.
pub fn routed(packet: &[u8]) -> Option<Routed> {
    let first = *packet.first()?;
    let (at, ours) = if first & 0x80 == 0 {
        (1, true)
    } else {
        let kind = first & 0x30;
        if !matches!(kind, 0x00 | 0x20)
            || packet.get(1..5)? != [0, 0, 0, 1]
            || usize::from(*packet.get(5)?) != CID_LEN
        {
            return None;
        }
        (6, kind == 0x20)
    };
    let id = packet.get(at..at + 3)?;
    Some(Routed {
        shard: usize::from(u16::from_be_bytes([id[0], id[1]])),
        generation: id[2],
        ours,
    })
}

const LD_B_ABS: u16 = BPF_LD | BPF_B | BPF_ABS;
const LD_H_ABS: u16 = BPF_LD | BPF_H | BPF_ABS;
const JMP_JA: u16 = BPF_JMP | BPF_JA;
const JMP_JEQ_K: u16 = BPF_JMP | BPF_JEQ | BPF_K;
const JMP_JGE_K: u16 = BPF_JMP | BPF_JGE | BPF_K;
const JMP_JSET_K: u16 = BPF_JMP | BPF_JSET | BPF_K;
const RET_A: u16 = BPF_RET | BPF_A;
const RET_K: u16 = BPF_RET | BPF_K;

/// An index no group has: the kernel falls back to its flow hash.
const NO_INDEX: u32 = u32::MAX;

/// The steering program for a group of `shards` sockets, socket `i`
/// being shard `i`'s.
pub fn steer_program(shards: usize) -> Vec<Insn> {
    let insn = Insn::new;
    vec![
        insn(LD_B_ABS, 0, 0, 0),
        // Long header: to 4.
        insn(JMP_JSET_K, 2, 0, 0x80),
        insn(LD_H_ABS, 0, 0, 1),
        insn(JMP_JA, 0, 0, 3),
        insn(LD_B_ABS, 0, 0, 5),
        insn(JMP_JEQ_K, 0, 3, CID_LEN as u32),
        insn(LD_H_ABS, 0, 0, 6),
        // Not a shard: the hash.
        insn(JMP_JGE_K, 1, 0, shards as u32),
        insn(RET_A, 0, 0, 0),
        insn(RET_K, 0, 0, NO_INDEX),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the classic BPF that `steer_program` emits over `packet`, as
    /// the kernel does (a load past the end returns 0).
    fn run(prog: &[Insn], packet: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            let k = i.k as usize;
            match i.code {
                LD_B_ABS => match packet.get(k) {
                    Some(&b) => a = u32::from(b),
                    None => return 0,
                },
                LD_H_ABS => match packet.get(k..k + 2) {
                    Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                    None => return 0,
                },
                JMP_JA => pc += k,
                JMP_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JMP_JGE_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
                JMP_JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                RET_A => return a,
                RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn short(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[0; 20]);
        p
    }

    fn long(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc0, 0, 0, 0, 1, cid.len() as u8];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8]);
        p
    }

    #[test]
    fn our_ids_reach_their_shard_in_both_headers() {
        for shards in [1, 2, 7, 64, 300] {
            let prog = steer_program(shards);
            for shard in [0, 1, shards / 2, shards - 1]
                .into_iter()
                .filter(|&s| s < shards)
            {
                let cid = ShardCids::new(shard, 0).generate_cid();
                assert_eq!(cid.len(), CID_LEN);
                for packet in [short(&cid), long(&cid)] {
                    assert_eq!(run(&prog, &packet), shard as u32, "{shards} shards");
                    assert_eq!(routed(&packet).map(|r| r.shard), Some(shard));
                }
            }
        }
    }

    #[test]
    fn other_ids_fall_to_the_hash() {
        let prog = steer_program(4);
        // A client's own Initial ID of another length, or naming no shard.
        assert_eq!(run(&prog, &long(&[0; 8])), NO_INDEX);
        assert_eq!(routed(&long(&[0; 8])), None);
        let mut cid = [0xffu8; CID_LEN];
        assert_eq!(run(&prog, &long(&cid)), NO_INDEX);
        assert_eq!(run(&prog, &short(&cid)), NO_INDEX);
        cid[..2].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(run(&prog, &short(&cid)), NO_INDEX);
        // Too short to hold an ID: the kernel's load fails, socket 0.
        assert_eq!(run(&prog, &[0x40]), 0);
    }

    #[test]
    fn ids_are_random_past_the_shard_and_generation() {
        let mut g = ShardCids::new(3, 7);
        let (a, b) = (g.generate_cid(), g.generate_cid());
        assert_eq!(a[..3], [0, 3, 7]);
        assert_eq!(a[..3], b[..3]);
        assert_ne!(a[3..], b[3..]);
    }

    #[test]
    fn routed_names_shard_and_generation_of_ids_the_server_chose() {
        let cid = ShardCids::new(5, 9).generate_cid();
        let at = |ours| {
            Some(Routed {
                shard: 5,
                generation: 9,
                ours,
            })
        };
        assert_eq!(routed(&short(&cid)), at(true));
        let mut handshake = long(&cid);
        handshake[0] = 0xe0;
        assert_eq!(routed(&handshake), at(true));
        // An Initial of our ID length may carry the client's own ID.
        assert_eq!(routed(&long(&cid)), at(false), "Initial");
        let mut zero_rtt = long(&cid);
        zero_rtt[0] = 0xd0;
        assert_eq!(routed(&zero_rtt), None);
        // Another version, another length, or too short.
        let mut draft = handshake.clone();
        draft[4] = 2;
        assert_eq!(routed(&draft), None);
        let mut short_id = long(&[0; 8]);
        short_id[0] = 0xe0;
        assert_eq!(routed(&short_id), None);
        assert_eq!(routed(&[0x40, 0, 1]), None);
        assert_eq!(routed(&[]), None);
    }
}
