# shellcheck shell=bash
#
# bench/lib.sh: helpers shared by bench/run.sh and bench/scaling.sh.
# Sourced, never run. Nothing here starts traffic to anything but 127.0.0.1,
# and nothing here signals a process the caller did not start itself.
#
# Method (bench/README.md, "Method"):
#   - server CPU per request = (utime + stime) ticks of the server's whole
#     process tree, read from /proc/PID/stat before and after a wrk run,
#     divided by the requests wrk reports. This stays meaningful when wrk
#     saturates its own CPU, which req/s alone does not.
#   - rounds are interleaved across servers and the median is reported.

export LC_ALL=C

CLK_TCK=$(getconf CLK_TCK)

# PIDs of every server this script started (roots of process trees).
declare -a BENCH_PIDS=()

# Options every bench script takes (see common_opt); a script may change the
# defaults after sourcing this file.
duration=10
rounds=3
build=1
keep=0

say() { printf '%s\n' "$*" >&2; }
warn() { printf '\n!!! %s\n\n' "$*" >&2; }
die() {
    printf '\nerror: %s\n' "$*" >&2
    exit 1
}

# parse_opts "$@": applies every argument, dying at one nobody knows. Each
# goes to the script's own script_opt first, then to common_opt; either sets
# OPT_WORDS to the words it used (1, or 2 with a value) or returns 1.
parse_opts() {
    while (($#)); do
        OPT_WORDS=1
        script_opt "$@" || common_opt "$@" || die "unknown argument '$1' (see --help)"
        shift "$OPT_WORDS"
    done
    check_common_opts
}

# common_opt "$@": applies $1 if it is an option every bench script takes:
# --quick, --rounds N, --duration SECS, --no-build, --keep, --help. --help
# prints the script's header comment, from line 3 to the first blank line.
common_opt() {
    case $1 in
    --quick) duration=3 rounds=1 ;;
    --rounds) rounds=${2:?--rounds needs a number} OPT_WORDS=2 ;;
    --duration) duration=${2:?--duration needs seconds} OPT_WORDS=2 ;;
    --no-build) build=0 ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '3,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) return 1 ;;
    esac
}

# check_common_opts: dies unless the common options hold and the tools every
# bench script runs (wrk, taskset) are installed.
check_common_opts() {
    [[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
    [[ $duration =~ ^[1-9][0-9]*$ ]] || die "--duration must be a positive integer (seconds)"
    command -v wrk >/dev/null || die "wrk is not installed (apt-get install wrk)"
    command -v taskset >/dev/null || die "taskset is not installed (util-linux)"
}

# build_release: `cargo build --release` (unless --no-build), and BIN set to
# the shardhttpd binary cargo reports, so CARGO_TARGET_DIR and
# .cargo/config.toml are honoured. $SHARDHTTPD_BIN, if set, is used instead.
build_release() {
    if [[ -n ${SHARDHTTPD_BIN:-} ]]; then
        BIN=$SHARDHTTPD_BIN
    elif ((build)); then
        say "== cargo build --release"
        BIN=$(cargo build --release -p shardhttpd --bin shardhttpd --message-format=json-render-diagnostics |
            sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
    else
        local target
        target=$(cargo metadata --format-version 1 --no-deps |
            sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
        BIN=$target/release/shardhttpd
    fi
    [[ -n $BIN && -x $BIN ]] || die "no shardhttpd binary at '${BIN:-}' (build it, or set SHARDHTTPD_BIN)"
    say "== using $BIN"
}

# port_opt NAME VALUE: dies unless VALUE is a port number 1-65535.
port_opt() {
    [[ $2 =~ ^[0-9]+$ ]] && (($2 >= 1 && $2 <= 65535)) || die "$1 needs a port number 1-65535, not '$2'"
}

# make_tmp NAME: a new temporary directory in $tmp. On exit every server
# started is stopped and the directory removed (kept with --keep); INT and
# TERM exit through the same path with the usual 130 and 143.
make_tmp() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

cleanup() {
    local rc=$?
    stop_servers
    if ((keep)); then
        say "kept $tmp"
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}

# write_100 FILE: 99 'x' and a newline, the 100-byte body the small-file
# workloads GET.
write_100() {
    head -c 99 /dev/zero | tr '\0' 'x' >"$1"
    echo >>"$1"
}

# expand_cpus "0-3,6" -> "0 1 2 3 6"
expand_cpus() {
    local spec=$1 part lo hi c list=() parts=()
    IFS=, read -r -a parts <<<"$spec"
    for part in "${parts[@]}"; do
        part=${part// /}
        [[ -n $part ]] || continue
        if [[ $part == *-* ]]; then
            lo=${part%-*} hi=${part#*-}
        else
            lo=$part hi=$part
        fi
        [[ $lo =~ ^[0-9]+$ && $hi =~ ^[0-9]+$ && $lo -le $hi ]] || die "bad CPU list '$spec'"
        for ((c = lo; c <= hi; c++)); do list+=("$c"); done
    done
    echo "${list[*]}"
}

# The given PID and all its descendants, one per line. Walks the ppid field
# (field 4) of /proc/*/stat; comm (field 2) may hold spaces and parentheses,
# so fields are counted from the last ')'.
proc_tree() {
    local root=$1 f line rest pid ppid
    declare -A children=()
    for f in /proc/[0-9]*/stat; do
        read -r line 2>/dev/null <"$f" || continue
        pid=${f#/proc/}
        pid=${pid%/stat}
        rest=${line##*) }
        read -r _ ppid _ <<<"$rest"
        children[$ppid]+=" $pid"
    done
    local -a queue=("$root")
    while ((${#queue[@]})); do
        pid=${queue[0]}
        queue=("${queue[@]:1}")
        [[ -e /proc/$pid ]] || continue
        echo "$pid"
        if [[ -n ${children[$pid]:-} ]]; then
            # shellcheck disable=SC2206
            queue+=(${children[$pid]})
        fi
    done
    return 0
}

# Sum of utime + stime (fields 14 and 15, clock ticks) over a process tree.
# Covers nginx's master + worker and h2o's helper child alike.
tree_ticks() {
    local total=0 pid line rest
    local -a f
    for pid in $(proc_tree "$1"); do
        read -r line 2>/dev/null <"/proc/$pid/stat" || continue
        rest=${line##*) }
        read -r -a f <<<"$rest"
        # rest starts at field 3 (state): field N is f[N-3].
        total=$((total + f[11] + f[12]))
    done
    echo "$total"
}

# True if something accepts connections on 127.0.0.1:PORT.
port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# wait_ready NAME PID PORT LOG: wait up to 15 s for the server to answer.
# Uses curl when present (a real HTTP answer), else a bare TCP connect.
wait_ready() {
    local name=$1 pid=$2 port=$3 log=$4 i
    for ((i = 0; i < 150; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            warn "$name exited during start-up; last lines of $log:"
            tail -n 20 "$log" >&2 || true
            return 1
        fi
        if command -v curl >/dev/null; then
            curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/" && return 0
        else
            port_open "$port" && return 0
        fi
        sleep 0.1
    done
    warn "$name did not accept on 127.0.0.1:$port within 15 s; last lines of $log:"
    tail -n 20 "$log" >&2 || true
    return 1
}

# check_body NAME PORT PATH SIZE: the server must answer 200 with SIZE bytes,
# otherwise the servers are not doing the same work and the comparison is void.
check_body() {
    local name=$1 port=$2 path=$3 size=$4 got
    if ! command -v curl >/dev/null; then
        say "(curl not found: skipping the body check for $name $path; wrk still counts non-2xx)"
        return 0
    fi
    got=$(curl -s -o /dev/null --max-time 5 -w '%{http_code} %{size_download}' "http://127.0.0.1:$port$path") || true
    if [[ $got != "200 $size" ]]; then
        warn "$name answered '$got' for $path, expected '200 $size'"
        return 1
    fi
}

# start_server NAME PORT LOG CMD...: start CMD in the background, record its
# PID, wait until it answers. Returns 1 (after saying why) if it did not.
# The PID is left in STARTED_PID.
start_server() {
    local name=$1 port=$2 log=$3
    shift 3
    if port_open "$port"; then
        die "port 127.0.0.1:$port is already in use; something else would be measured"
    fi
    "$@" </dev/null >"$log" 2>&1 &
    STARTED_PID=$!
    BENCH_PIDS+=("$STARTED_PID")
    wait_ready "$name" "$STARTED_PID" "$port" "$log"
}

# True while PID exists and is not a zombie (an exited child not yet reaped
# still answers `kill -0`).
running() {
    local line rest
    read -r line 2>/dev/null <"/proc/$1/stat" || return 1
    rest=${line##*) }
    [[ ${rest:0:1} != Z ]]
}

# Stop every server this script started: TERM the tree, then KILL what is
# left after 5 s. Only PIDs recorded by start_server and their descendants.
# Safe to call from an EXIT trap under `set -e`: every status is tested.
stop_servers() {
    local root pid i left
    local -a all=()
    for root in "${BENCH_PIDS[@]}"; do
        if running "$root"; then
            # shellcheck disable=SC2207
            all+=($(proc_tree "$root"))
        fi
    done
    if ((${#all[@]})); then
        kill -TERM "${all[@]}" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            left=0
            for pid in "${all[@]}"; do
                if running "$pid"; then left=1; fi
            done
            ((left)) || break
            sleep 0.1
        done
        for pid in "${all[@]}"; do
            if running "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
        done
    fi
    for root in "${BENCH_PIDS[@]}"; do
        wait "$root" 2>/dev/null || true
    done
    BENCH_PIDS=()
}

# Parsers over a saved wrk report.
wrk_requests() { awk '/ requests in /{print $1; exit}' "$1"; }
wrk_rps() { awk '/^Requests\/sec:/{print $2; exit}' "$1"; }
# Socket errors (connect+read+write+timeout) plus non-2xx/3xx responses.
wrk_errors() {
    awk '
        /Socket errors:/ { gsub(/,/, ""); e += $4 + $6 + $8 + $10 }
        /Non-2xx or 3xx responses:/ { e += $NF }
        END { print e + 0 }' "$1"
}

# cpu_ticks "CPU..." -> "busy irq total" ticks of those CPUs from /proc/stat:
# busy = user+nice+system, irq = irq+softirq, total = every field. They are
# kept apart because with IRQ time accounting (as on Debian kernels) softirq
# time is charged to no task: loopback TCP receive work done on the server's
# CPU shows up here and not in the server's utime+stime. That holds alike for
# every server, so µs/req stays comparable; it just is not the whole cost.
cpu_ticks() {
    awk -v want=" $1 " '
        $1 ~ /^cpu[0-9]+$/ && index(want, " " substr($1, 4) " ") {
            busy += $2 + $3 + $4
            irq += $7 + $8
            for (i = 2; i <= NF; i++) total += $i
        }
        END { print busy + 0, irq + 0, total + 0 }' /proc/stat
}

# measure PID "CPUS" OUT -- CMD...: run CMD (a pinned wrk), bracketing it with
# the CPU ticks of the server's process tree and of the server's CPUs. Saves
# wrk's report to OUT and prints
#   "requests rps server_ticks us_per_req errors other_pct"
# where other_pct is the share of the server CPUs' time that went to other
# tasks during the run: anything above a few percent means a noisy run.
measure() {
    local pid=$1 cpus=$2 out=$3 t0 t1 b0 a0 b1 a1 req rps err us other
    shift 4
    read -r b0 _ a0 < <(cpu_ticks "$cpus")
    t0=$(tree_ticks "$pid")
    "$@" >"$out" 2>&1 || true
    t1=$(tree_ticks "$pid")
    read -r b1 _ a1 < <(cpu_ticks "$cpus")
    other=$(awk -v b=$((b1 - b0 - (t1 - t0))) -v a=$((a1 - a0)) \
        'BEGIN { if (a > 0 && b > 0) printf "%.1f", 100 * b / a; else print "0.0" }')
    req=$(wrk_requests "$out")
    rps=$(wrk_rps "$out")
    err=$(wrk_errors "$out")
    if [[ -z $req || -z $rps || $req -eq 0 ]]; then
        warn "wrk produced no requests; its output:"
        cat "$out" >&2
        echo "0 0 $((t1 - t0)) nan $err $other"
        return 0
    fi
    us=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$req" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
    echo "$req $rps $((t1 - t0)) $us $err $other"
}

# wrk_warm_up ARGS...: runs `set_wrk ARGS... 1` unmeasured for one second,
# then leaves the measured command line, `set_wrk ARGS... $duration`, in WRK.
# Each script defines set_wrk with the run length as its last argument.
wrk_warm_up() {
    set_wrk "$@" 1
    "${WRK[@]}" >/dev/null 2>&1 || true
    set_wrk "$@" "$duration"
}

# Median of the numbers given as arguments ("nan" ignored).
median() {
    printf '%s\n' "$@" | grep -v nan | sort -g | awk '
        { v[NR] = $1 }
        END {
            if (NR == 0) { print "nan"; exit }
            if (NR % 2) print v[(NR + 1) / 2]
            else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
        }'
}

# ratio A B -> "A/B" with two decimals, or n/a.
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "nan" || b == "nan" || a == "" || b == "" || b + 0 == 0) print "n/a"
        else printf "%.2f", a / b }'
}

# Short description of the machine and tools, for the results file.
environment_md() {
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- host: $(uname -srm), $(nproc) CPUs ($(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo))"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty tree)')"
    echo "- wrk: $(wrk -v 2>&1 | head -n1 | awk '{print $1, $2}')"
    command -v h2o >/dev/null && echo "- h2o: $(h2o --version 2>&1 | head -n1)"
    command -v nginx >/dev/null && echo "- nginx: $(nginx -v 2>&1)"
    command -v lighttpd >/dev/null && echo "- lighttpd: $(lighttpd -v 2>&1 | head -n1)"
    echo "- CLK_TCK: $CLK_TCK (CPU per request resolution: 1 tick = $((1000000 / CLK_TCK)) µs over the whole run)"
}

# results_md TITLE INTRO TABLE RAW: the body of a results file: TITLE, the
# INTRO paragraph, the environment, the TABLE of medians and the Markdown
# file RAW holding every run. A caller appends its own sections after it.
results_md() {
    echo "# $1"
    echo
    echo "$2"
    echo
    environment_md
    echo
    echo "## Medians"
    echo
    echo "$3"
    echo
    echo "## Every run"
    echo
    cat "$4"
}
