#!/usr/bin/env bash
# redis.sh: issue 17's Redis figures in one run. Debian's redis-server and
# redis-benchmark, unmodified, SET and GET from 50 clients, plain and
# pipelined (-P 16), over:
#
#   TCP loopback (127.0.0.1, the kernel's TCP: the baseline)
#   rsockets on one softroce device (mem link; server and client share the daemon)
#   rsockets between two softroce devices over UDP loopback (one daemon each)
#
# The rsocket runs preload softroce's librspreload.so (softroce run --rsocket).
# Prints a table with requests per second, the median latency and the ratio
# to TCP, and writes it as JSON.
#
#   bash bench/redis.sh [-o results.json] [-n REQUESTS]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
out=bench-redis.json
n=100000
while getopts "o:n:" o; do
	case $o in
	o) out=$OPTARG ;;
	n) n=$OPTARG ;;
	*) echo "usage: $0 [-o results.json] [-n REQUESTS]" >&2; exit 2 ;;
	esac
done
for t in redis-server redis-benchmark gcc make; do
	command -v $t >/dev/null || { echo "redis.sh: $t is missing: apt-get install redis-server redis-tools gcc make librdmacm-dev" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/softroce" ./cmd/softroce
sr=$tmp/softroce
port=6400

daemon() { # daemon NAME LINK ADDR: a device on its own socket
	"$sr" daemon --socket "$tmp/$1.sock" --link "$2" --addr "$3" 2>"$tmp/$1.log" & pids+=($!)
	for _ in $(seq 100); do [ -S "$tmp/$1.sock" ] && return; sleep 0.1; done
	echo "redis.sh: daemon $1 did not start:" >&2; cat "$tmp/$1.log" >&2; exit 1
}

# bench NAME HOST SERVER-PREFIX CLIENT-PREFIX: redis-server under the first
# prefix, redis-benchmark under the second; prints "SET GET SETP50 GETP50"
# for plain and pipelined runs, one line each.
bench() {
	local name=$1 host=$2 spre=$3 cpre=$4
	port=$((port + 1))
	$spre redis-server --port $port --save "" --appendonly no --protected-mode no >"$tmp/$name.srv" 2>&1 & local s=$!
	for _ in $(seq 100); do
		$cpre redis-cli -h "$host" -p $port ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	for p in 1 16; do
		$cpre redis-benchmark -h "$host" -p $port -n "$n" -c 50 -P $p -t set,get --csv >"$tmp/$name.$p.csv" 2>"$tmp/$name.$p.err" ||
			{ echo "redis.sh: redis-benchmark ($name, -P $p) failed:" >&2; cat "$tmp/$name.$p.err" "$tmp/$name.srv" >&2; exit 1; }
		awk -F'"' '$2 == "SET" { s = $4; sp = $10 } $2 == "GET" { g = $4; gp = $10 } END { print s, g, sp, gp }' "$tmp/$name.$p.csv"
	done
	kill $s; wait $s 2>/dev/null || true
}

daemon mem mem 10.0.0.1
daemon a udp 127.0.0.2
daemon b udp 127.0.0.3
tcp=$(bench tcp 127.0.0.1 "" "")
mem=$(bench mem 10.0.0.1 "$sr run --socket $tmp/mem.sock --rsocket --" "$sr run --socket $tmp/mem.sock --rsocket --")
udp=$(bench udp 127.0.0.2 "$sr run --socket $tmp/a.sock --rsocket --" "$sr run --socket $tmp/b.sock --rsocket --")

echo "# Redis over rsockets, $(date -u +%F), $(nproc) CPUs, $n requests, 50 clients; $(redis-server --version | awk '{print $3}')"
echo
echo "| path | SET req/s | GET req/s | SET p50 ms | GET p50 ms | pipelined -P 16 SET req/s | GET req/s | SET / TCP | SET -P 16 / TCP |"
echo "|---|---|---|---|---|---|---|---|---|"
rows=()
line() { # line NAME RESULTS
	local name=$1 plain piped
	plain=$(echo "$2" | sed -n 1p)
	piped=$(echo "$2" | sed -n 2p)
	read -r s g sp gp <<<"$plain"
	read -r ps pg _ _ <<<"$piped"
	read -r ts _ _ _ <<<"$(echo "$tcp" | sed -n 1p)"
	read -r tps _ _ _ <<<"$(echo "$tcp" | sed -n 2p)"
	local r1 r2
	r1=$(awk -v a="$s" -v b="$ts" 'BEGIN { printf "%.2f", a / b }')
	r2=$(awk -v a="$ps" -v b="$tps" 'BEGIN { printf "%.2f", a / b }')
	printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$s" "$g" "$sp" "$gp" "$ps" "$pg" "$r1" "$r2"
	rows+=("$(printf '{"path": "%s", "set_rps": %s, "get_rps": %s, "set_p50_ms": %s, "get_p50_ms": %s, "set_rps_p16": %s, "get_rps_p16": %s}' \
		"$name" "$s" "$g" "$sp" "$gp" "$ps" "$pg")")
}
line "TCP loopback (kernel)" "$tcp"
line "rsockets, one softroce device (mem link)" "$mem"
line "rsockets, two softroce devices over UDP loopback" "$udp"
{
	echo "["
	for i in "${!rows[@]}"; do
		sep=,
		[ "$i" -eq $((${#rows[@]} - 1)) ] && sep=
		echo "  ${rows[$i]}$sep"
	done
	echo "]"
} >"$out"
echo
echo "written to $out"
