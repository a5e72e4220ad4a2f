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
# with how many frames share a read. SITES=N serves the root as N
# `[[sites]]` of ten names each (as bench/sites-scale.sh does) and asks for
# `www2.sN/2.test`; WILDCARD=1 asks for a name a wildcard covers instead.
set -euo pipefail
bin=$1 mode=$2 file=${3:-100.txt} conns=${4:-1} n1=${5:-5000} n2=${6:-25000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/www"
head -c 100 /dev/zero | tr '\0' x > "$work/www/100.txt"
head -c 102400 /dev/urandom > "$work/www/100k.bin"
server=(--root "$work/www")
host=localhost
if [ -n "${SITES:-}" ]; then
  {
    mkdir "$work/empty"
    echo "root = \"$work/empty\""
    for i in $(seq 0 $((SITES - 1))); do
      echo "[[sites]]"
      echo "names = [\"s$i.test\", \"www0.s$i.test\", \"www1.s$i.test\", \"www2.s$i.test\", \"www3.s$i.test\", \"*.s$i.test\", \"*.zone0.s$i.test\", \"*.zone1.s$i.test\", \"*.zone2.s$i.test\", \"*.zone3.s$i.test\"]"
      echo "root = \"$work/www\""
    done
  } > "$work/sites.toml"
  server=(--config "$work/sites.toml" --watch false)
  host=www2.s$((SITES / 2)).test
  [ -n "${WILDCARD:-}" ] && host=img.zone3.s$((SITES / 2)).test
fi
total() {
  local n=$1 out="$work/cg.$1.out" port=$((20000 + RANDOM % 20000))
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" "${server[@]}" \
    --listen 127.0.0.1:$port --admin 127.0.0.1:$((port + 1)) --cores 1 --io epoll \
    >/dev/null 2>"$work/server.log" &
  local pid=$!
  until curl -s -o /dev/null "http://127.0.0.1:$port/$file"; do sleep 0.3; done
  local load
  if [ "$mode" = h1 ]; then
    load=$(h2load --h1 -n "$n" -c "$conns" -t1 -H ":authority: $host" "http://127.0.0.1:$port/$file")
  else
    load=$(h2load -n "$n" -c "$conns" -m 10 -t1 -H ":authority: $host" "http://127.0.0.1:$port/$file")
  fi
  # Every answer a 200 (a name no site claimed would get the empty
  # default root's 404).
  grep -q "status codes: $n 2xx" <<<"$load" || { echo "$load" >&2; exit 1; }
  kill -INT "$pid"
  wait "$pid" || true
  [ -s "$out" ] || { cat "$work/server.log" >&2; exit 1; }
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
a=$(total "$n1")
b=$(total "$n2")
echo "$mode $file c=$conns${SITES:+ sites=$SITES $host}: $(( (b - a) / (n2 - n1) )) instructions per request"
