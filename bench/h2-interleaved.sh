#!/bin/bash
# HTTP/2 rounds behind docs/benchmarks.md, "HTTP/2": old and new shardhttpd
# binaries (./old, ./new) and h2o (h2o.conf: num-threads 1, no access log),
# server on CPU 1, h2load on CPU 0; a root with 100.txt and 100k.bin, cert.pem/key.pem.
# Interleaved rounds: old shardhttpd, new shardhttpd, h2o; h2c and TLS; 100 B and 100 KiB.
cd "${H2B:-/tmp/h2b}"
TCK=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
start() {
  case $1 in
    h2o) taskset -c 1 h2o -c ${H2B:-/tmp/h2b}/h2o.conf > h2o.out 2>&1 & sleep 1; PID=$(cat ${H2B:-/tmp/h2b}/h2o.pid); PLAIN=27080; TLS=27443 ;;
    *) taskset -c 1 ./$1 --root ${H2B:-/tmp/h2b}/root --listen 127.0.0.1:27081 --tls-listen 127.0.0.1:27444 --tls-cert cert.pem --tls-key key.pem --cores 1 --admin 127.0.0.1:27181 --watch false > $1.out 2>&1 & PID=$!; PLAIN=27081; TLS=27444 ;;
  esac
  for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$PLAIN/100.txt && break; sleep 0.2; done
}
echo "round server case rps us_per_req succeeded"
for round in 1 2 3; do
  for srv in old new h2o; do
    start $srv
    for c in "h2c 100 http://127.0.0.1:PLAIN/100.txt 100000" "tls 100 https://127.0.0.1:TLS/100.txt 100000" "h2c 100K http://127.0.0.1:PLAIN/100k.bin 5000" "tls 100K https://127.0.0.1:TLS/100k.bin 5000"; do
      set -- $c
      url=${3/PLAIN/$PLAIN}; url=${url/TLS/$TLS}
      h2load -n 2000 -c 100 -m 10 $url > /dev/null 2>&1   # warm-up
      a=$(cpu $PID)
      out=$(taskset -c 0 h2load -t 1 -n $4 -c 100 -m 10 $url 2>&1)
      b=$(cpu $PID)
      ok=$(echo "$out" | awk '/^requests:/{print $8}')
      rps=$(echo "$out" | awk '/^finished in/{print $4}')
      us=$(awk -v t=$((b-a)) -v n=$ok -v k=$TCK 'BEGIN{printf "%.2f", t/k*1e6/n}')
      echo "$round $srv $1-$2 $rps $us $ok"
    done
    kill $PID; wait $PID 2>/dev/null; sleep 0.5
  done
done
