#!/usr/bin/env bash
#
# bench/scaling.sh: how shardhttpd scales with the number of shards (SMP).
#
# Usage (from anywhere; it works from the repository root):
#
#   bench/scaling.sh [--cpus-server LIST] [--cpus-client LIST] [--shards LIST]
#                    [--connections N] [--duration SECS] [--rounds N]
#                    [--port-base PORT] [--quick] [--no-build] [--keep]
#
#   --cpus-server LIST  CPUs for the server, e.g. 8-15 (default: see below)
#   --cpus-client LIST  CPUs for wrk, e.g. 0-7; wrk gets one thread per CPU
#   --shards LIST       shard counts to try (default 1,2,4,8; counts larger
#                       than the server CPU list are dropped)
#   --connections N     wrk connections (default 256)
#   --duration SECS     measured run length (default 10; a 1 s warm-up precedes)
#   --rounds N          interleaved rounds, median reported (default 3)
#   --port-base PORT    first loopback port; shard count i gets PORT+i
#                       (default 18090)
#   --quick             3 s runs, 1 round
#   --no-build          skip `cargo build --release` (the binary is still
#                       the one cargo's target directory holds; SHARDHTTPD_BIN
#                       overrides it)
#   --keep              keep the temporary directory (docroot, logs)
#
# Default CPU split: on 2 CPUs, server 1 and client 0 (only N=1 is possible,
# which is still a useful smoke test). On more, the first third of the CPUs
# (at least one) runs wrk and the rest run the server. On a real study pass
# both lists: keep SMT siblings of server CPUs out of the client list, and
# keep everything on one NUMA node unless that is what you are measuring.
#
# For each N, shardhttpd runs pinned to the first N server CPUs with
#   taskset -c CPUS shardhttpd --cores CPUS --listen 127.0.0.1:PORT ...
# (a single CPU c is written `c-c`, because a bare number is a shard *count*
# to --cores). All N-variants run at once on their own ports, idle unless
# measured, and rounds are interleaved across them.
#
# Workload: keep-alive, c=256, GET /100.txt (100 bytes), wrk with one thread
# per client CPU. Reported per N: req/s, server CPU µs/req (process ticks from
# /proc/PID/stat over requests), speed-up in req/s vs N=1, and how busy the
# client CPUs were: near 100% means wrk, not the server, set the req/s, and
# only µs/req is telling. Results also go to bench/results/scaling-<UTC>.md.

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

connections=256
shards_spec=1,2,4,8
cpus_server=
cpus_client=
port_base=18090
cmdline="bench/scaling.sh $*"

# Options of this script; parse_opts (lib.sh) takes the common ones.
script_opt() {
    case $1 in
    --cpus-server) cpus_server=${2:?--cpus-server needs a CPU list} OPT_WORDS=2 ;;
    --cpus-client) cpus_client=${2:?--cpus-client needs a CPU list} OPT_WORDS=2 ;;
    --shards) shards_spec=${2:?--shards needs a list} OPT_WORDS=2 ;;
    --connections) connections=${2:?--connections needs a number} OPT_WORDS=2 ;;
    --port-base) port_base=${2:?--port-base needs a port} OPT_WORDS=2 ;;
    *) return 1 ;;
    esac
}
parse_opts "$@"
port_opt --port-base "$port_base"

# CPUs this process may use, in order.
read -r -a avail <<<"$(expand_cpus "$(taskset -pc $$ | awk -F': ' '{print $2}')")"
((${#avail[@]} >= 2)) || die "need at least 2 CPUs (one for wrk, one for the server)"
if [[ -z $cpus_client ]]; then
    nclient=$((${#avail[@]} / 3))
    ((nclient >= 1)) || nclient=1
    cpus_client=$(IFS=,; echo "${avail[*]:0:nclient}")
fi
if [[ -z $cpus_server ]]; then
    read -r -a client_arr <<<"$(expand_cpus "$cpus_client")"
    rest=()
    for c in "${avail[@]}"; do
        [[ " ${client_arr[*]} " == *" $c "* ]] || rest+=("$c")
    done
    ((${#rest[@]})) || die "no CPU left for the server; pass --cpus-server"
    cpus_server=$(IFS=,; echo "${rest[*]}")
fi
read -r -a server_arr <<<"$(expand_cpus "$cpus_server")"
read -r -a client_arr <<<"$(expand_cpus "$cpus_client")"
((${#server_arr[@]})) || die "bad --cpus-server '$cpus_server'"
((${#client_arr[@]})) || die "bad --cpus-client '$cpus_client'"
for c in "${server_arr[@]}"; do
    [[ " ${client_arr[*]} " != *" $c "* ]] || die "CPU $c is in both the server and the client list"
done
for c in "${server_arr[@]}" "${client_arr[@]}"; do
    taskset -c "$c" true 2>/dev/null || die "CPU $c is not available to this process"
done
nthreads=${#client_arr[@]}
((connections >= nthreads)) || die "--connections must be at least the number of client CPUs"

shards=()
IFS=, read -r -a want <<<"$shards_spec"
for n in "${want[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "bad shard count '$n'"
    if ((n > ${#server_arr[@]})); then
        say "(skipping N=$n: only ${#server_arr[@]} server CPU(s): $cpus_server)"
        continue
    fi
    shards+=("$n")
done
((${#shards[@]})) || die "no shard count fits in the server CPUs ($cpus_server)"

if ((connections > 1000)); then
    ulimit -n "$(ulimit -Hn)"
fi

build_release
bin=$BIN

make_tmp shardhttpd-scaling
docroot=$tmp/www
mkdir -p "$docroot"
write_100 "$docroot/100.txt"

# --cores argument for the first N server CPUs: a list, never a bare count.
cores_arg() {
    local n=$1
    if ((n == 1)); then
        echo "${server_arr[0]}-${server_arr[0]}"
    else
        (IFS=,; echo "${server_arr[*]:0:n}")
    fi
}

declare -A pid=() port=()
i=0
for n in "${shards[@]}"; do
    port[$n]=$((port_base + i))
    i=$((i + 1))
    cpus=$(IFS=,; echo "${server_arr[*]:0:n}")
    cmd=(taskset -c "$cpus" "$bin" --root "$docroot" --listen "127.0.0.1:${port[$n]}"
        --admin 127.0.0.1:0 --cores "$(cores_arg "$n")")
    say "== N=$n: ${cmd[*]}"
    start_server "shardhttpd N=$n" "${port[$n]}" "$tmp/shardhttpd-$n.log" "${cmd[@]}" ||
        die "shardhttpd with $n shard(s) did not start"
    check_body "shardhttpd N=$n" "${port[$n]}" /100.txt 100 || die "shardhttpd N=$n serves the wrong body"
    pid[$n]=$STARTED_PID
done

client_list=$(IFS=,; echo "${client_arr[*]}")
set_wrk() { # port seconds
    WRK=(taskset -c "$client_list" wrk -t"$nthreads" -c"$connections" -d"$2"s --timeout 10s
        "http://127.0.0.1:$1/100.txt")
}

declare -A rps_runs=() us_runs=() busy_runs=() err_sum=()
raw=$tmp/raw.md
{
    echo "| round | shards | requests | req/s | server CPU ticks | µs/req | errors | client CPUs busy % | other load on server CPUs % |"
    echo "|---|---|---|---|---|---|---|---|---|"
} >"$raw"
for ((r = 1; r <= rounds; r++)); do
    for n in "${shards[@]}"; do
        running "${pid[$n]}" || die "shardhttpd N=$n died; log: $tmp/shardhttpd-$n.log"
        wrk_warm_up "${port[$n]}"
        read -r cb0 ci0 ca0 < <(cpu_ticks "${client_arr[*]}")
        read -r req rps ticks us err other < <(measure "${pid[$n]}" "${server_arr[*]:0:n}" \
            "$tmp/wrk-$n-$r.txt" -- "${WRK[@]}")
        read -r cb1 ci1 ca1 < <(cpu_ticks "${client_arr[*]}")
        # Client busy includes softirq: loopback TCP work is done there too.
        busy=$(awk -v b=$((cb1 - cb0 + ci1 - ci0)) -v a=$((ca1 - ca0)) 'BEGIN { printf "%.0f", (a > 0 ? 100 * b / a : 0) }')
        printf 'round %d N=%-2d %10.0f req/s  %6s µs/req  %s errors  client CPUs %s%% busy  other load %s%%\n' \
            "$r" "$n" "$rps" "$us" "$err" "$busy" "$other" >&2
        echo "| $r | $n | $req | $rps | $ticks | $us | $err | $busy | $other |" >>"$raw"
        rps_runs[$n]+=" $rps"
        us_runs[$n]+=" $us"
        busy_runs[$n]+=" $busy"
        err_sum[$n]=$((${err_sum[$n]:-0} + err))
    done
done

report() {
    local n base rps us busy
    echo "| shards | server CPUs | req/s | server CPU µs/req | speed-up vs N=1 | client CPUs busy % | errors |"
    echo "|---:|---|---:|---:|---:|---:|---:|"
    base=
    for n in "${shards[@]}"; do
        # shellcheck disable=SC2086
        rps=$(median ${rps_runs[$n]})
        # shellcheck disable=SC2086
        us=$(median ${us_runs[$n]})
        # shellcheck disable=SC2086
        busy=$(median ${busy_runs[$n]})
        [[ $n == 1 ]] && base=$rps
        printf '| %d | %s | %.0f | %s | %s | %s | %s |\n' "$n" "$(IFS=,; echo "${server_arr[*]:0:n}")" \
            "$rps" "$us" "$([[ -n $base ]] && ratio "$rps" "$base" || echo n/a)" "$busy" "${err_sum[$n]}"
    done
    echo
    echo "wrk: $nthreads thread(s) on CPUs $client_list, c=$connections, keep-alive, GET /100.txt;" \
        "$duration s runs, $rounds round(s), medians. Client CPUs near 100% busy cap req/s; µs/req still holds."
}

table=$(report)
echo
echo "$table"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p bench/results
results=bench/results/scaling-$stamp.md
results_md "shardhttpd scaling $stamp" "Command: \`$cmdline\`" "$table" "$raw" >"$results"
say
say "results written to $results"
