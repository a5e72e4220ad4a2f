#!/usr/bin/env bash
#
# bench/run.sh: compare shardhttpd with h2o, nginx and lighttpd on loopback.
#
# Usage (from anywhere; it works from the repository root):
#
#   bench/run.sh [--quick] [--full] [--rounds N] [--duration SECS]
#                [--servers LIST] [--server-cpu N] [--client-cpu N]
#                [--port-base PORT] [--no-build] [--keep]
#
#   --quick          3 s per measurement and 1 round (default: 10 s, 3 rounds)
#   --full           also run keep-alive with c=10000 (raises `ulimit -n`)
#   --rounds N       interleaved rounds; the median is reported
#   --duration SECS  length of each measured wrk run (a 1 s warm-up precedes it)
#   --servers LIST   comma-separated subset of shardhttpd,h2o,nginx,lighttpd
#   --server-cpu N   CPU the servers are pinned to (default 1)
#   --client-cpu N   CPU wrk is pinned to (default 0)
#   --port-base PORT first of four loopback ports, one per server (default
#                    18080: shardhttpd, h2o, nginx, lighttpd in that order)
#   --no-build       do not run `cargo build --release` first
#   --keep           keep the temporary directory (docroot, configs, logs)
#
# What it does (method: bench/README.md, "Method"):
#
#   1. `cargo build --release`, then uses the binary cargo reports (so
#      CARGO_TARGET_DIR is honoured; SHARDHTTPD_BIN overrides it).
#   2. Creates a temporary docroot with 100.txt (100 bytes) and 100k.bin
#      (102400 bytes), and a config per peer server with the fair settings
#      bench/README.md lists (one worker/thread, no access log, sendfile, high
#      keep-alive request limits, fd limits enough for c=10000).
#   3. Starts every installed server on its own port (shardhttpd PORT, h2o
#      PORT+1, nginx PORT+2, lighttpd PORT+3 on 127.0.0.1), pinned with
#      `taskset -c SERVER_CPU`; a server that is not installed is skipped with
#      a loud message. Each must answer 200 with the right body size for both
#      files before anything is measured.
#   4. For each workload, for each round, runs wrk against each server in
#      turn (interleaved, so drift hits every server alike):
#        keep-alive     c=100,  GET /100.txt
#        pipelined-16   c=100,  GET /100.txt x16 per write (bench/pipeline.lua)
#        close          c=50,   GET /100.txt with `Connection: close`
#        100k-file      c=100,  GET /100k.bin
#        c10k           c=10000, GET /100.txt (only with --full)
#      wrk runs as `taskset -c CLIENT_CPU wrk -t1`, after a 1 s warm-up.
#   5. Server CPU per request = utime+stime ticks (fields 14, 15 of
#      /proc/PID/stat, summed over the server's process tree) consumed during
#      the measured run, divided by the requests wrk reports. It remains
#      meaningful when wrk, not the server, is the bottleneck (~190k req/s on
#      a 2-vCPU machine), so compare µs/req first and req/s second.
#   6. Prints a Markdown table of medians (req/s, µs/req, errors summed over
#      rounds), the shardhttpd/h2o and shardhttpd/nginx ratios, and writes it
#      with every raw run to bench/results/<UTC timestamp>.md (ignored by git).
#      Each run also records how much of the server CPU other tasks took;
#      above 5% the report is marked noisy. wrk's full output is kept in the
#      results file for any run with errors.
#
# Every server the script started (and only those) is stopped on exit.
# Exit status: 0, or 1 if an installed server failed to start or to serve.

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

full=0
server_cpu=1
client_cpu=0
servers_wanted=shardhttpd,h2o,nginx,lighttpd
port_base=18080
cmdline="bench/run.sh $*"

# Options of this script; parse_opts (lib.sh) takes the common ones.
script_opt() {
    case $1 in
    --full) full=1 ;;
    --servers) servers_wanted=${2:?--servers needs a list} OPT_WORDS=2 ;;
    --server-cpu) server_cpu=${2:?--server-cpu needs a CPU} OPT_WORDS=2 ;;
    --client-cpu) client_cpu=${2:?--client-cpu needs a CPU} OPT_WORDS=2 ;;
    --port-base) port_base=${2:?--port-base needs a port} OPT_WORDS=2 ;;
    *) return 1 ;;
    esac
}
parse_opts "$@"
port_opt --port-base "$port_base"
((port_base <= 65532)) || die "--port-base leaves no room for four ports"
[[ $server_cpu != "$client_cpu" ]] || die "server and client must be on different CPUs"
for cpu in "$server_cpu" "$client_cpu"; do
    taskset -c "$cpu" true 2>/dev/null || die "CPU $cpu is not available to this process"
done

if ((full)); then
    hard=$(ulimit -Hn)
    if [[ $hard != unlimited && $hard -lt 20000 ]]; then
        die "--full needs 20000 fds per process; the hard limit is $hard"
    fi
    ulimit -n 20000
fi

# ---------------------------------------------------------------- build ----

build_release

# -------------------------------------------------------------- docroot ----

make_tmp shardhttpd-bench
docroot=$tmp/www
mkdir -p "$docroot"
write_100 "$docroot/100.txt"
head -c 102400 /dev/urandom >"$docroot/100k.bin"
[[ $(stat -c %s "$docroot/100.txt") == 100 ]] || die "100.txt is not 100 bytes"
# Peers started as root drop to an unprivileged user by default; let them read.
chmod 755 "$tmp" "$docroot"
chmod 644 "$docroot"/*

if ((EUID == 0)); then run_as_root=1; else run_as_root=0; fi

# ------------------------------------------------------- peer configs ----

# One worker pinned to the server CPU, no access log, sendfile + TCP_NOPUSH,
# open_file_cache, keep-alive requests effectively unlimited, fds for c=10000.
gen_nginx() {
    local port=$1 mask
    # worker_cpu_affinity takes a bitmask, CPU 0 rightmost.
    mask=1$(printf '%*s' "$server_cpu" '' | tr ' ' 0)
    mkdir -p "$tmp/nginx"
    cat >"$tmp/nginx.conf" <<EOF
$( ((run_as_root)) && echo "user root;")
daemon off;
master_process on;
worker_processes 1;
worker_cpu_affinity $mask;
worker_rlimit_nofile 20000;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log warn;

events {
    use epoll;
    worker_connections 20000;
}

http {
    types {
        text/plain txt;
        application/octet-stream bin;
    }
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    keepalive_requests 1000000;
    keepalive_timeout 65s;
    client_body_temp_path $tmp/nginx/body;
    proxy_temp_path $tmp/nginx/proxy;
    fastcgi_temp_path $tmp/nginx/fastcgi;
    uwsgi_temp_path $tmp/nginx/uwsgi;
    scgi_temp_path $tmp/nginx/scgi;

    server {
        listen 127.0.0.1:$port backlog=4096;
        root $docroot;
    }
}
EOF
}

# One thread (taskset pins it), no access log, connections for c=10000.
gen_h2o() {
    local port=$1
    cat >"$tmp/h2o.conf" <<EOF
$( ((run_as_root)) && echo "user: root")
num-threads: 1
max-connections: 20000
pid-file: $tmp/h2o.pid
error-log: $tmp/h2o-error.log
listen:
  host: 127.0.0.1
  port: $port
hosts:
  default:
    paths:
      /:
        file.dir: $docroot
EOF
}

# Single process (taskset pins it), no mod_accesslog, keep-alive requests
# effectively unlimited, fds for c=10000 (lighttpd caps connections at fds/2).
gen_lighttpd() {
    local port=$1
    cat >"$tmp/lighttpd.conf" <<EOF
server.modules = ()
server.document-root = "$docroot"
server.bind = "127.0.0.1"
server.port = $port
server.pid-file = "$tmp/lighttpd.pid"
server.errorlog = "$tmp/lighttpd-error.log"
server.event-handler = "linux-sysepoll"
server.network-backend = "sendfile"
server.max-fds = 20000
server.max-connections = 10000
server.listen-backlog = 4096
server.max-keep-alive-requests = 1000000
server.max-keep-alive-idle = 65
mimetype.assign = (".txt" => "text/plain", ".bin" => "application/octet-stream")
EOF
}

# ------------------------------------------------------- start servers ----

declare -A port=([shardhttpd]=$port_base [h2o]=$((port_base + 1)) [nginx]=$((port_base + 2)) [lighttpd]=$((port_base + 3)))
declare -A pid=()
servers=()
failed=0

IFS=, read -r -a wanted <<<"$servers_wanted"
for s in "${wanted[@]}"; do
    [[ -n ${port[$s]:-} ]] || die "unknown server '$s' (known: shardhttpd,h2o,nginx,lighttpd)"
done

for s in "${wanted[@]}"; do
    log=$tmp/$s.log
    p=${port[$s]}
    case $s in
    shardhttpd)
        bin=$BIN
        # `--cores 1` is a count: the first CPU of the taskset mask.
        cmd=(taskset -c "$server_cpu" "$bin" --root "$docroot" --listen "127.0.0.1:$p"
            --admin 127.0.0.1:0 --cores 1)
        ;;
    h2o | nginx | lighttpd)
        if ! command -v "$s" >/dev/null; then
            warn "SKIPPING $s: not installed (apt-get install $s)"
            continue
        fi
        "gen_$s" "$p"
        case $s in
        h2o) cmd=(taskset -c "$server_cpu" h2o -c "$tmp/h2o.conf") ;;
        nginx) cmd=(taskset -c "$server_cpu" nginx -p "$tmp/nginx" -c "$tmp/nginx.conf" -e "$tmp/nginx-error.log") ;;
        lighttpd) cmd=(taskset -c "$server_cpu" lighttpd -D -f "$tmp/lighttpd.conf") ;;
        esac
        ;;
    esac
    say "== starting $s on 127.0.0.1:$p: ${cmd[*]}"
    if start_server "$s" "$p" "$log" "${cmd[@]}" &&
        check_body "$s" "$p" /100.txt 100 &&
        check_body "$s" "$p" /100k.bin 102400; then
        pid[$s]=$STARTED_PID
        servers+=("$s")
    else
        warn "NOT MEASURING $s: it failed to start or to serve the docroot (log: $log)"
        failed=1
    fi
done

((${#servers[@]})) || die "no server to measure"

# ------------------------------------------------------------ workloads ----

# name|connections|path; extra wrk arguments per workload are in set_wrk.
workloads=(
    "keep-alive|100|/100.txt"
    "pipelined-16|100|/100.txt"
    "close|50|/100.txt"
    "100k-file|100|/100k.bin"
)
((full)) && workloads+=("c10k|10000|/100.txt")

# set_wrk WORKLOAD PORT SECONDS: the pinned wrk command line, into WRK.
set_wrk() {
    local name conns path
    IFS='|' read -r name conns path <<<"$1"
    # --timeout 10s: slow accepts under load show as latency, not as errors.
    WRK=(taskset -c "$client_cpu" wrk -t1 -c"$conns" -d"$3"s --timeout 10s)
    case $name in
    pipelined-16) WRK+=(-s bench/pipeline.lua) ;;
    # wrk only takes headers written "Name: value", with the space.
    close) WRK+=(-H "Connection: close") ;;
    esac
    WRK+=("http://127.0.0.1:$2$path")
}

declare -A rps_runs=() us_runs=() err_sum=()
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p bench/results
results=bench/results/$stamp.md
raw=$tmp/raw.md
{
    echo "| round | workload | server | requests | req/s | server CPU ticks | µs/req | errors | other load on server CPU % |"
    echo "|---|---|---|---|---|---|---|---|---|"
} >"$raw"

total=$((${#workloads[@]} * rounds * ${#servers[@]}))
n=0
noisy=0
for w in "${workloads[@]}"; do
    wname=${w%%|*}
    for ((r = 1; r <= rounds; r++)); do
        for s in "${servers[@]}"; do
            n=$((n + 1))
            kill -0 "${pid[$s]}" 2>/dev/null || die "$s (pid ${pid[$s]}) died; log: $tmp/$s.log"
            wrk_warm_up "$w" "${port[$s]}"
            read -r req rps ticks us err other < <(measure "${pid[$s]}" "$server_cpu" \
                "$tmp/wrk-$wname-$s-$r.txt" -- "${WRK[@]}")
            printf '[%d/%d] %-12s %-10s round %d: %10.0f req/s  %6s µs/req  %s errors  (other load on CPU %s: %s%%)\n' \
                "$n" "$total" "$wname" "$s" "$r" "$rps" "$us" "$err" "$server_cpu" "$other" >&2
            echo "| $r | $wname | $s | $req | $rps | $ticks | $us | $err | $other |" >>"$raw"
            if awk -v o="$other" 'BEGIN { exit !(o > 5) }'; then noisy=1; fi
            if ((err > 0)); then
                # Keep wrk's own breakdown (connect/read/write/timeout, non-2xx).
                # shellcheck disable=SC2016 # the backticks are Markdown
                printf '### %s, %s, round %d\n\n```\n%s\n```\n\n' "$wname" "$s" "$r" \
                    "$(cat "$tmp/wrk-$wname-$s-$r.txt")" >>"$tmp/errors.md"
            fi
            rps_runs[$wname|$s]+=" $rps"
            us_runs[$wname|$s]+=" $us"
            err_sum[$wname|$s]=$((${err_sum[$wname|$s]:-0} + err))
        done
    done
done

# --------------------------------------------------------------- report ----

declare -A med_rps=() med_us=()
report() {
    echo "| workload | server | req/s | server CPU µs/req | errors |"
    echo "|---|---|---:|---:|---:|"
    local w wname s
    for w in "${workloads[@]}"; do
        wname=${w%%|*}
        for s in "${servers[@]}"; do
            # shellcheck disable=SC2086
            med_rps[$wname|$s]=$(median ${rps_runs[$wname|$s]})
            # shellcheck disable=SC2086
            med_us[$wname|$s]=$(median ${us_runs[$wname|$s]})
            printf '| %s | %s | %.0f | %s | %s |\n' "$wname" "$s" \
                "${med_rps[$wname|$s]}" "${med_us[$wname|$s]}" "${err_sum[$wname|$s]}"
        done
    done
    echo
    echo "Ratios (req/s ratio: higher is better for shardhttpd; CPU ratio: lower is better):"
    echo
    local peer line
    for w in "${workloads[@]}"; do
        wname=${w%%|*}
        line="- $wname:"
        for peer in h2o nginx; do
            if [[ -n ${med_rps[$wname|shardhttpd]:-} && -n ${med_rps[$wname|$peer]:-} ]]; then
                line+=" shardhttpd/$peer req/s $(ratio "${med_rps[$wname|shardhttpd]}" "${med_rps[$wname|$peer]}"),"
                line+=" CPU $(ratio "${med_us[$wname|shardhttpd]}" "${med_us[$wname|$peer]}");"
            else
                line+=" shardhttpd/$peer n/a;"
            fi
        done
        echo "${line%;}"
    done
}

table=$(report)
if ((noisy)); then
    table+=$'\n\n'"**Noisy:** other tasks took more than 5% of CPU $server_cpu during at least one run (see \"other load\" per run); rerun on a quiet machine before quoting."
fi
echo
echo "$table"
intro="Command: \`$cmdline\` ($duration s per run after a 1 s warm-up, $rounds round(s), medians;
servers on CPU $server_cpu, \`wrk -t1\` on CPU $client_cpu; errors summed over rounds)."
{
    results_md "shardhttpd benchmark $stamp" "$intro" "$table" "$raw"
    if [[ -s $tmp/errors.md ]]; then
        echo
        echo "## wrk output of runs with errors"
        echo
        cat "$tmp/errors.md"
    fi
} >"$results"
say
say "results written to $results"

if ((failed)); then
    warn "at least one installed server failed to start or serve; see above"
    exit 1
fi
