#!/usr/bin/env bash
#
# bench/run.sh: shardhttpd side by side with h2o, nginx, lighttpd and the
# syscall floor. A thin wrapper: the measuring is done by shardbench
# (bench/shardbench), so that nothing is measured two ways. Method, flags
# and how to read the results: docs/benchmarks.md.
#
#   bench/run.sh --quick          # under 3 minutes on 2 cores
#   bench/run.sh                  # the full matrix, at most 15 minutes on 2 cores
#   bench/run.sh --help           # every shardbench flag
#
# SHARDHTTPD_BIN=/path measures that binary instead of building one.
# Results go to bench/results/<UTC timestamp>/ (ignored by git) unless --out
# is given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=(--out "bench/results/$(date -u +%Y%m%dT%H%M%SZ)")
for a in "$@"; do
    [[ $a == --out || $a == --out=* || $a == -h || $a == --help ]] && out=()
done
bin=()
[[ -n ${SHARDHTTPD_BIN:-} ]] && bin=(--server-bin "$SHARDHTTPD_BIN")
exec cargo run --release --quiet -p shardbench -- "${out[@]}" "${bin[@]}" "$@"
