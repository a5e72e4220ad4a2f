#!/usr/bin/env bash
# bench/mutation-table.sh: the hand-made mutation table of issue 15, rerunnable.
#
# Each bench/mutations/NN-name.patch is a small, meaningful regression of the
# server. For each one this script applies it (`git apply`), runs the
# integration suites that should notice, records which tests failed, and
# reverts it (`git apply -R`), so the tree ends as it started. A mutation
# that no test fails is a SURVIVOR and the script exits 1.
#
# Usage: bench/mutation-table.sh [--no-baseline] [NN...]   (default: every patch)
#   e.g. bench/mutation-table.sh 06 09
# First the named suites run on the unmutated tree and must pass (a failure
# there would make every "caught" below meaningless); --no-baseline skips that.
# Needs a clean src/ (it refuses to run over uncommitted changes there).
# Output: a Markdown table on stdout; per-mutation logs in
# target/mutation-table/NN.log. On 2 busy cores each row takes 3-8 minutes
# (one rebuild of the binary and of the named test crates).
#
# Not run by .ci/run; cargo-mutants (bench/mutants.sh) is the systematic
# tool, this table pins the regressions that once slipped through.
set -euo pipefail
cd "$(dirname "$0")/.."

# NN  test files (comma-separated) that must catch it.
suites() {
  case "$1" in
    01) echo compression ;;           # 416 sent without Vary
    02) echo errors ;;                # framing-error replies lose Connection: close
    03) echo metrics_values ;;        # idle timeout counted as reason="client"
    04) echo http_semantics ;;        # the 301 drops the query string
    05) echo metrics_values ;;        # /readyz always answers 200
    06) echo sendfile,flags ;;        # zero-copy mode flips the last byte
    07) echo metrics_values ;;        # response bytes never counted
    08) echo live_reload ;;           # watch=false rescans every 2 s anyway
    09) echo metrics_values ;;        # active gauge never decremented
    10) echo paths ;;                 # `..` above root clamped instead of refused
    11) echo errors ;;                # Transfer-Encoding from HTTP/1.0 accepted
    12) echo sites ;;                 # `*.a.test` also claims `a.test`
    13) echo sites ;;                 # a request for another site than the SNI's served
    14) echo sites ;;                 # unknown_host = "421" answered by the default site
    15) echo sites ;;                 # every site's requests counted as the default's
    16) echo sites ;;                 # a Host with capitals claims no site
    17) echo sites ;;                 # the Host field wins over an absolute-form target
    *) return 1 ;;
  esac
}

if ! git diff --quiet -- src crates; then
  echo "src/ or crates/ has uncommitted changes; refusing to mutate over them" >&2
  exit 2
fi

baseline=1
wanted=()
for arg in "$@"; do
  case "$arg" in
    --no-baseline) baseline=0 ;;
    [0-9][0-9]) wanted+=("$arg") ;;
    *) echo "usage: $0 [--no-baseline] [NN...]" >&2; exit 2 ;;
  esac
done
[ ${#wanted[@]} -gt 0 ] || wanted=($(ls bench/mutations/*.patch | sed 's|.*/\([0-9]*\)-.*|\1|'))

logs=target/mutation-table
mkdir -p "$logs"
current=""
revert() {
  if [ -n "$current" ]; then
    git apply -R "$current"
    current=""
  fi
}
trap revert EXIT

if [ "$baseline" -eq 1 ]; then
  all=()
  for f in $(for nn in "${wanted[@]}"; do suites "$nn" | tr , '\n'; done | sort -u); do
    all+=("$f::")
  done
  start=$SECONDS
  if ! cargo test --test it -- "${all[@]}" >"$logs/baseline.log" 2>&1; then
    echo "baseline: the unmutated tree fails its suites; see $logs/baseline.log" >&2
    exit 2
  fi
  echo "baseline: unmutated suites pass ($((SECONDS - start)) s)" >&2
fi

echo "| mutation | suites run | failing tests | time |"
echo "|---|---|---|---|"
survivors=0
for nn in "${wanted[@]}"; do
  patch=$(ls bench/mutations/"$nn"-*.patch)
  name=$(basename "$patch" .patch)
  files=$(suites "$nn")
  args=()
  for f in ${files//,/ }; do args+=("$f::"); done
  git apply "$patch"
  current=$patch
  start=$SECONDS
  # Building must succeed: a mutant that does not compile proves nothing.
  if ! cargo test --test it --no-run >"$logs/$nn.log" 2>&1; then
    echo "| $name | $files | BUILD FAILED (see $logs/$nn.log) | |"
    revert
    exit 2
  fi
  set +e
  cargo test --test it -- "${args[@]}" >>"$logs/$nn.log" 2>&1
  set -e
  revert
  # Each failure as `suite::test`, the suite taken from libtest's
  # "Running tests/NAME.rs" line above it.
  failed=$(awk '
    /^ *Running tests\// { suite = $2; sub(/^tests\//, "", suite); sub(/\.rs$/, "", suite) }
    /^test .* \.\.\. FAILED$/ { printf "%s`%s::%s`", sep, suite, $2; sep = ", " }
  ' "$logs/$nn.log")
  if [ -z "$failed" ]; then
    failed="**SURVIVED**"
    survivors=$((survivors + 1))
  fi
  echo "| $name | $files | $failed | $((SECONDS - start)) s |"
done
[ "$survivors" -eq 0 ]
