#!/usr/bin/env bash
# bench/mutants.sh: mutation testing with cargo-mutants on the files whose
# behaviour the tests must pin down, each judged by the tests that cover it:
#
#   http      crates/http/src/*.rs  pure parsing: the unit tables (its crate's unit tests)
#   respond   src/serve/*.rs, src/proto/http1.rs  request → response: the HTTP
#             and large-file suites
#   output    src/io/output.rs  the output queue: large-file, pipelining, output_queue suites
#   counters  src/metrics/counters.rs  per-shard counters: the exact-metrics and histogram suites
#   tls       src/tls/*.rs, src/conn/tls.rs  TLS: the unit tests (ticket keys under a
#             test clock, validity bounds, the sans-I/O reader) and every TLS suite
#   acme      src/acme/*.rs, src/challenge.rs, src/config/acme.rs  ACME: the unit tables and the
#             pebble suite (tests/it/acme.rs; ~40 s a mutant, skipped without pebble)
#   h2codec   src/proto/h2/{huffman,frame,hpack,encode}.rs  HTTP/2's codecs: their
#             unit tables (round trips, RFC 7541 examples, the cross-check
#             against loona-hpack's decoder, frame layouts, the encoder's
#             dynamic table and line cache)
#   h2conn    src/proto/h2/{conn,stream,request,mod}.rs  HTTP/2's connection core:
#             the frame-level tables of proto::h2::tests, driven with bytes (no
#             socket: ~3 s a mutant); the h2spec, defences and semantics
#             suites judge the same code end to end but take minutes
#   uring     src/sys/uring.rs, src/shard/{backend,ring}.rs  the io_uring
#             backend: its unit tests and, forced to the ring
#             (SHARDHTTPD_TEST_IO=uring), the uring, lifecycle, output_queue
#             suites and a shutdown test (~35 s of tests a mutant)
#   uringconn src/conn/ring.rs   a connection driven by completions: the same
#             tests (159 mutants; not in the default sets)
#
# Usage: bench/mutants.sh [--iterate] [--in-place] [SET...]   (default: the first five)
#   --iterate   re-test only the mutants a previous run of the set missed
#               (or timed out on), keeping its caught ones.
#   --in-place  mutate this checkout instead of a copy: no copy of target/
#               (whose copied timestamps make cargo rebuild every dependency
#               once), but src/ is rewritten while it runs, so only in a
#               worktree nobody edits meanwhile.
#
# The test selection goes in --cargo-arg, which cargo-mutants passes to the
# build phase too: after a bare `--` it reaches only `cargo test`, and every
# mutant would first build all ~40 integration-test crates.
# Results: target/mutants/<set>/mutants.out/{outcomes.json,missed.txt,...}
#
# Not part of .ci/run: with one job on 2 cores the four sets take hours.
# Run it before each release; every survivor must be caught by a new test or
# be listed as equivalent in the release notes. Needs `cargo install
# cargo-mutants` (27.x). Exclusions, with reasons: .cargo/mutants.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

iterate=()
inplace=()
sets=()
for arg in "$@"; do
  case "$arg" in
    --iterate) iterate=(--iterate) ;;
    --in-place) inplace=(--in-place) ;;
    http | respond | output | counters | tls | acme | h2codec | h2conn | uring | uringconn) sets+=("$arg") ;;
    *) echo "usage: $0 [--iterate] [--in-place] [http|respond|output|counters|tls|acme|h2codec|h2conn|uring|uringconn]..." >&2; exit 2 ;;
  esac
done
[ ${#sets[@]} -gt 0 ] || sets=(http respond output counters tls)

command -v cargo-mutants >/dev/null || {
  echo "cargo-mutants not installed: cargo install cargo-mutants" >&2
  exit 1
}

run() {
  local set=$1
  shift
  local out=target/mutants/$set
  mkdir -p "$out"
  local start=$SECONDS
  echo "== $set: cargo mutants $*" >&2
  # Exit status 2 means "some mutants survived": report, don't abort the rest.
  # (--in-place runs one job by nature; --jobs may not be given with it.)
  local jobs=(--jobs 1)
  [ ${#inplace[@]} -eq 0 ] || jobs=()
  cargo mutants "${jobs[@]}" "${inplace[@]}" --no-shuffle "${iterate[@]}" --output "$out" "$@" || {
    rc=$?
    [ "$rc" -eq 2 ] || [ "$rc" -eq 3 ] || return "$rc"
  }
  echo "== $set: $((SECONDS - start)) s" >&2
}

for set in "${sets[@]}"; do
  case "$set" in
    http)
      # The unit tables take ~2 s; a mutant that loops (split_tag returning
      # a fixed tag) would otherwise hold the run for the 60 s minimum.
      run http --file 'crates/http/src/*.rs' --cargo-arg=--lib --timeout 20
      ;;
    respond)
      # The suites are modules of the one `it` test binary: filters pick them.
      run respond --file 'src/serve/*.rs' --file src/proto/http1.rs --cargo-arg=--test=it -- -- \
        http_semantics:: errors:: paths:: compression:: redirects:: sendfile::
      ;;
    output)
      # The write-timeout scenarios only wait for a timer; the rest of the
      # large-file suite (both modes), the pipelining tests and the output
      # queue's own suite (copy or reference, backlog bounds, piece sizes,
      # zero-copy's last-byte check, resets) exercise every path through it.
      run output --file src/io/output.rs --cargo-arg=--test=it -- -- \
        sendfile:: lifecycle:: process_invariants:: output_queue:: downloads:: \
        --skip write_timeout --skip idle --skip sig --skip shutdown \
        --skip builder --skip descriptor
      ;;
    counters)
      run counters --file src/metrics/counters.rs --cargo-arg=--test=it -- -- \
        metrics_values:: metrics_histograms::
      ;;
    tls)
      # One filter for both binaries: `tls` selects the unit tests of
      # tls::* and conn::tls and the integration suites tls, tls_hostile,
      # tls_reload, tls_suites, tls_tickets and the TLS memory tests; the
      # testssl scan is skipped (minutes per mutant).
      run tls --file 'src/tls/*.rs' --file src/conn/tls.rs \
        --cargo-arg=--lib --cargo-arg=--test=it -- -- tls --skip tls_scan
      ;;
    acme)
      # `acme` and `challenge::` select the unit tests of acme::* and challenge, and the acme suite.
      run acme --file 'src/acme/*.rs' --file src/challenge.rs --file src/config/acme.rs \
        --cargo-arg=--lib --cargo-arg=--test=it -- -- acme challenge::
      ;;
    h2codec)
      # `h2::` selects the unit tests of every h2 module (the codecs' own
      # and the connection's frame-level tables, which decode through them).
      run h2codec --file src/proto/h2/huffman.rs --file src/proto/h2/frame.rs \
        --file src/proto/h2/hpack.rs --file 'src/proto/h2/encode.rs' \
        --cargo-arg=--lib --timeout 30 -- -- h2::
      ;;
    h2conn)
      run h2conn --file src/proto/h2/conn.rs --file src/proto/h2/stream.rs \
        --file src/proto/h2/request.rs --file src/proto/h2/mod.rs \
        --cargo-arg=--lib --timeout 30 -- -- h2::
      ;;
    uring | uringconn)
      # Forced to the ring: unset, the suites run on `auto`, which is the
      # ring here but epoll where io_uring is forbidden (and a mutant that
      # broke the ring's self-check would pass on the fallback). `uring::`
      # selects the unit tests of sys::uring and the uring suite; `ring::`
      # adds conn::ring's sans-I/O unit tests (a filter is a substring of
      # the test's path, and `uring::` is not one of `conn::ring::tests`:
      # until 2026-12-04 they were left out). The uring suite: auto,
      # fallback, closes, back-pressure, ring sends; lifecycle drives
      # keep-alive, pipelining, timeouts and a SIGTERM with a response in
      # flight; output_queue the sends that stop part way and resets (its
      # two slowest backlog tests left out: ~20 s); one shutdown test a
      # drain during a rebuild; errors::slow_head the 408 written just
      # before a close (`flush_now`). The drain suite (upgrades, minutes)
      # is not in it. (Lifecycle's SIGTERM/SIGINT of idle connections were
      # left out of the runs in docs/testing.md: before polls were given
      # up by cancellation, a shard's drain on the ring could take past
      # their 3 s. They are back in since.)
      files=(--file src/sys/uring.rs --file src/shard/backend.rs --file src/shard/ring.rs)
      [ "$set" = uring ] || files=(--file src/conn/ring.rs)
      # --timeout: the tests take ~45 s on 2 busy cores; a mutant that
      # stalls the loop would otherwise hold the run for the auto 228 s.
      SHARDHTTPD_TEST_IO=uring run "$set" "${files[@]}" --timeout 100 \
        --cargo-arg=--lib --cargo-arg=--test=it -- -- \
        uring:: ring:: backend:: lifecycle:: output_queue:: shutdown::repeated \
        errors::slow_head --skip backlog_of_referenced --skip backlog_of_file
      ;;
  esac
done
for set in "${sets[@]}"; do
  o=target/mutants/$set/mutants.out
  [ -f "$o/outcomes.json" ] || continue
  printf '%-9s caught %4s  missed %4s  timeout %4s  unviable %4s\n' "$set" \
    "$(wc -l <"$o/caught.txt")" "$(wc -l <"$o/missed.txt")" \
    "$(wc -l <"$o/timeout.txt")" "$(wc -l <"$o/unviable.txt")"
done
