#!/usr/bin/env bash
#
# bench/scaling.sh: shardhttpd at 1…N shards, with reuseport hashing and with
# `--steer cpu`, per-core requests and balance from the server's /metrics.
# A thin wrapper for `shardbench --sweep-only` (bench/shardbench); method and
# flags in docs/benchmarks.md.
#
#   bench/scaling.sh                                      # client: first third of the CPUs
#   bench/scaling.sh --client-cpus 0-7 --server-cpus 8-15 --sweep-concurrency 512
#
# SHARDHTTPD_BIN=/path measures that binary instead of building one.
# Results go to bench/results/scaling-<UTC timestamp>/ (ignored by git)
# unless --out is given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=(--out "bench/results/scaling-$(date -u +%Y%m%dT%H%M%SZ)")
for a in "$@"; do
    [[ $a == --out || $a == --out=* || $a == -h || $a == --help ]] && out=()
done
bin=()
[[ -n ${SHARDHTTPD_BIN:-} ]] && bin=(--server-bin "$SHARDHTTPD_BIN")
exec cargo run --release --quiet -p shardbench -- --sweep-only "${out[@]}" "${bin[@]}" "$@"
