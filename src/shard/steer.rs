//! `--steer cpu`: the classic BPF program that picks, for each incoming
//! connection, the listener of the shard on the CPU whose softirq handled its
//! SYN. Pure code (the program is data); `sys::attach_reuseport_cbpf` hands it
//! to the kernel.
//!
//! The program returns an index into the `SO_REUSEPORT` group. The group's
//! order is the order its sockets started listening, which `server::run`
//! makes the shard order, so shard `i`'s listener is index `i`.
//!
//! A CPU with no shard is never black-holed: it maps to shard `cpu % n`, a
//! live listener of the group. If the group has shrunk below the returned
//! index (a listener closed while draining) the kernel ignores the answer
//! and falls back to its flow hash.

use crate::sys::bpf::{
    Insn, BPF_A, BPF_ABS, BPF_ALU, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_MOD, BPF_RET, BPF_W,
};

/// `SKF_AD_OFF + SKF_AD_CPU`: the ancillary load of the current CPU id
/// (`raw_smp_processor_id()`: the CPU running the SYN's softirq).
const LD_CPU: u32 = (-0x1000i32 + 36) as u32;
/// `BPF_MAXINSNS`: the kernel refuses longer classic programs.
const MAX_INSNS: usize = 4096;

/// The program for shards pinned to `cpus` (shard `i` on `cpus[i]`): a table
/// of `cpu == cpus[i] → i`, then `cpu % n` for CPUs without a shard. Shards
/// past what fits in `BPF_MAXINSNS` are reached through the modulo only.
pub fn cpu_program(cpus: &[usize]) -> Vec<Insn> {
    let n = cpus.len().max(1) as u32;
    let table = cpus.len().min((MAX_INSNS - 3) / 2);
    let mut prog = Vec::with_capacity(3 + 2 * table);
    prog.push(Insn::new(BPF_LD | BPF_W | BPF_ABS, 0, 0, LD_CPU));
    for (i, &cpu) in cpus.iter().take(table).enumerate() {
        // Equal: fall through to `ret #i`; otherwise skip it.
        prog.push(Insn::new(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, cpu as u32));
        prog.push(Insn::new(BPF_RET | BPF_K, 0, 0, i as u32));
    }
    prog.push(Insn::new(BPF_ALU | BPF_MOD | BPF_K, 0, 0, n));
    prog.push(Insn::new(BPF_RET | BPF_A, 0, 0, 0));
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the subset of classic BPF that `cpu_program` emits, as the
    /// kernel would on a packet handled by `cpu`.
    fn run(prog: &[Insn], cpu: u32) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                c if c == BPF_LD | BPF_W | BPF_ABS => {
                    assert_eq!(i.k, LD_CPU, "only the CPU is loaded");
                    a = cpu;
                }
                c if c == BPF_JMP | BPF_JEQ | BPF_K => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf });
                }
                c if c == BPF_ALU | BPF_MOD | BPF_K => a %= i.k,
                c if c == BPF_RET | BPF_K => return i.k,
                c if c == BPF_RET | BPF_A => return a,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn each_shard_cpu_maps_to_its_own_index() {
        for cpus in [
            vec![0],
            vec![1],
            vec![0, 1],
            vec![1, 3, 5],
            vec![7, 2, 0, 4],
        ] {
            let prog = cpu_program(&cpus);
            for (i, &cpu) in cpus.iter().enumerate() {
                assert_eq!(run(&prog, cpu as u32), i as u32, "cpus {cpus:?}");
            }
        }
    }

    #[test]
    fn cpus_without_a_shard_land_on_a_live_index() {
        let cpus = [1, 3, 5];
        let prog = cpu_program(&cpus);
        for cpu in [0, 2, 4, 6, 7, 63, 4095] {
            let index = run(&prog, cpu);
            assert!(index < cpus.len() as u32, "cpu {cpu} → {index}");
            assert_eq!(index, cpu % 3);
        }
        // One shard on CPU 1: every other CPU goes to it.
        let prog = cpu_program(&[1]);
        for cpu in 0..8 {
            assert_eq!(run(&prog, cpu), 0);
        }
    }

    #[test]
    fn huge_groups_fit_the_kernel_limit() {
        let cpus: Vec<usize> = (0..5000).collect();
        let prog = cpu_program(&cpus);
        assert!(prog.len() <= MAX_INSNS);
        assert_eq!(run(&prog, 10), 10);
        assert_eq!(
            run(&prog, 4999),
            4999,
            "past the table, the modulo still maps"
        );
    }
}
