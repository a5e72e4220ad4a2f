#!/bin/bash
# HTTP/2 rounds behind docs/benchmarks.md, "HTTP/2": old and new shardhttpd
# binaries (./old, ./new), h2o (h2o.conf: num-threads 1, no access log) and
# nginx (nginx.conf, written here: one process, access_log off, sendfile
# on, open_file_cache on, `http2` listeners for h2c and TLS),
# server on CPU 1, h2load (and wrk) on CPU 0; a root with 100.txt and
# 100k.bin, cert.pem/key.pem, and for the distinct-path case uris.txt (one
# URI per line, e.g. 3000 files of 100 B under root/d/, with PORT where the
# port goes: `for i in $(seq 3000); do echo "http://127.0.0.1:PORT/d/f$i.txt"; done`).
# Interleaved rounds (ROUNDS, default 5), the order of old and new swapped
# every other round: h2c and TLS, 100 B and 100 KiB, distinct paths over
# h2c, and HTTP/1.1 keep-alive over TLS (wrk) for comparison. Each line
# ends with the client's CPU share of its wall time (near 100: its core
# saturates).
# CASES (an extended regex on the case names, e.g. 'h2c-100$|tls-100$')
# runs some of them; SERVERS (default "old new h2o"; add nginx) names the
# servers.
# Ports: PORT_BASE (default 27080): h2o on +0 (h2c) and +363 (TLS), as in
# h2o.conf; shardhttpd on +1 and +364, admin +101; nginx on +2 (h2c only,
# as nginx speaks it on a listener of its own) and +365.
cd "${H2B:-/tmp/h2b}"
B=${PORT_BASE:-27080}
TCK=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
# nginx as shardbench's peer config (bench/shardbench/src/servers.rs), in
# one process (master_process off), so its CPU is one /proc entry.
nginx_conf() {
  mkdir -p nginx
  cat > nginx.conf <<EOF
user root;
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid $PWD/nginx.pid;
error_log $PWD/nginx-error.log warn;
events { use epoll; worker_connections 10000; }
http {
  types { text/plain txt; application/octet-stream bin; }
  default_type application/octet-stream;
  access_log off;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  open_file_cache max=1000 inactive=60s;
  open_file_cache_valid 60s;
  keepalive_requests 100000000;
  keepalive_timeout 65s;
  client_body_temp_path $PWD/nginx/body;
  proxy_temp_path $PWD/nginx/proxy;
  fastcgi_temp_path $PWD/nginx/fastcgi;
  uwsgi_temp_path $PWD/nginx/uwsgi;
  scgi_temp_path $PWD/nginx/scgi;
  server { listen 127.0.0.1:$((B+2)) http2 backlog=4096; root $PWD/root; }
  server { listen 127.0.0.1:$((B+365)) ssl http2 backlog=4096; root $PWD/root;
    ssl_certificate $PWD/cert.pem; ssl_certificate_key $PWD/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; }
}
EOF
}
start() {
  case $1 in
    h2o) rm -f $PWD/h2o.pid; taskset -c 1 h2o -c $PWD/h2o.conf > h2o.out 2>&1 &
       for i in $(seq 50); do [ -s $PWD/h2o.pid ] && break; sleep 0.2; done
       PID=$(cat $PWD/h2o.pid); PLAIN=$B; TLS=$((B+363)) ;;
    nginx) nginx_conf; taskset -c 1 nginx -p $PWD/nginx -c $PWD/nginx.conf -e $PWD/nginx-error.log > nginx.out 2>&1 & PID=$!; PLAIN=$((B+2)); TLS=$((B+365)) ;;
    *) taskset -c 1 ./$1 --root $PWD/root --listen 127.0.0.1:$((B+1)) --tls-listen 127.0.0.1:$((B+364)) --tls-cert cert.pem --tls-key key.pem --cores 1 --admin 127.0.0.1:$((B+101)) --watch false > $1.out 2>&1 & PID=$!; PLAIN=$((B+1)); TLS=$((B+364)) ;;
  esac
  for i in $(seq 50); do curl -s -o /dev/null --http2-prior-knowledge http://127.0.0.1:$PLAIN/100.txt && break; sleep 0.2; done
}
echo "round server case rps us_per_req succeeded client_cpu_pct"
for round in $(seq ${ROUNDS:-5}); do
  order=${SERVERS:-old new h2o}
  [ $((round % 2)) = 0 ] && order=$(echo $order | awk '{t=$1; $1=$2; $2=t; print}')
  for srv in $order; do
    start $srv
    sed "s/PORT/$PLAIN/" uris.txt > uris.$srv.txt 2>/dev/null
    for c in "h2c 100 http://127.0.0.1:PLAIN/100.txt 300000" "tls 100 https://127.0.0.1:TLS/100.txt 300000" \
             "h2c 100K http://127.0.0.1:PLAIN/100k.bin 10000" "tls 100K https://127.0.0.1:TLS/100k.bin 10000" \
             "h2c distinct -i 300000" "h1tls 100 https://127.0.0.1:TLS/100.txt 3"; do
      set -- $c
      [ -n "$CASES" ] && ! [[ $1-$2 =~ $CASES ]] && continue
      url=${3/PLAIN/$PLAIN}; url=${url/TLS/$TLS}
      [ "$url" = -i ] && url="-i uris.$srv.txt"
      if [ $1 = h1tls ]; then
        taskset -c 0 wrk -t1 -c100 -d1 $url > /dev/null 2>&1   # warm-up
        a=$(cpu $PID)
        out=$(/usr/bin/time -f "%U %S %e" -o client.time taskset -c 0 wrk -t1 -c100 -d$4 $url 2>&1)
        b=$(cpu $PID)
        ok=$(echo "$out" | awk '/requests in/{print $1}')
        rps=$(echo "$out" | awk '/^Requests\/sec/{print $2}')
      else
        h2load -n 2000 -c 100 -m 10 $url > /dev/null 2>&1   # warm-up
        a=$(cpu $PID)
        out=$(/usr/bin/time -f "%U %S %e" -o client.time taskset -c 0 h2load -t 1 -n $4 -c 100 -m 10 $url 2>&1)
        b=$(cpu $PID)
        ok=$(echo "$out" | awk '/^requests:/{print $8}')
        rps=$(echo "$out" | awk '/^finished in/{print $4}')
      fi
      us=$(awk -v t=$((b-a)) -v n=$ok -v k=$TCK 'BEGIN{printf "%.2f", t/k*1e6/n}')
      # The client's CPU over its wall time: near 100, its core saturates
      # and requests/s says more about the client than the server.
      client=$(awk '{printf "%.0f", ($1+$2)/$3*100}' client.time)
      echo "$round $srv $1-$2 $rps $us $ok $client"
    done
    kill $PID; wait $PID 2>/dev/null; sleep 0.5
  done
done
