#!/usr/bin/env bash
# User-space instructions per request of a shardhttpd binary, by callgrind:
# the whole process under `valgrind --tool=callgrind` (one shard, epoll),
# h2load sending N1 and then N2 requests to fresh servers, and
# (total(N2) - total(N1)) / (N2 - N1), so start-up and shutdown cancel out.
#
#   bench/callgrind-request.sh BINARY h1|h2c [FILE] [CONNS] [N1] [N2]
#   bench/callgrind-request.sh target/release/shardhttpd h1 100.txt 1
#   bench/callgrind-request.sh target/release/shardhttpd h2c 100k.bin 10 500 2500
#
# FILE is made in a scratch root: `100.txt` (100 bytes) or `100k.bin`
# (100 KiB). With one HTTP/1.1 connection every request is one event and
# the count repeats exactly; h2c (CONNS connections x 10 streams) varies
# with how many frames share a read.
set -euo pipefail
bin=$1 mode=$2 file=${3:-100.txt} conns=${4:-1} n1=${5:-5000} n2=${6:-25000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/www"
head -c 100 /dev/zero | tr '\0' x > "$work/www/100.txt"
head -c 102400 /dev/urandom > "$work/www/100k.bin"
total() {
  local n=$1 out="$work/cg.$1.out" port=$((20000 + RANDOM % 20000))
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --root "$work/www" \
    --listen 127.0.0.1:$port --admin 127.0.0.1:$((port + 1)) --cores 1 --io epoll \
    >/dev/null 2>"$work/server.log" &
  local pid=$!
  until curl -s -o /dev/null "http://127.0.0.1:$port/$file"; do sleep 0.3; done
  if [ "$mode" = h1 ]; then
    h2load --h1 -n "$n" -c "$conns" -t1 "http://127.0.0.1:$port/$file" >/dev/null
  else
    h2load -n "$n" -c "$conns" -m 10 -t1 "http://127.0.0.1:$port/$file" >/dev/null
  fi
  kill -INT "$pid"
  wait "$pid" || true
  [ -s "$out" ] || { cat "$work/server.log" >&2; exit 1; }
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
a=$(total "$n1")
b=$(total "$n2")
echo "$mode $file c=$conns: $(( (b - a) / (n2 - n1) )) instructions per request"
