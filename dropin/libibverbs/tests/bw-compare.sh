#!/usr/bin/env bash
# bw-compare.sh: RDMA WRITE bandwidth between two processes over UDP loopback,
# measured twice in one run: Debian's unmodified ib_write_bw on the drop-in
# libibverbs.so.1 (each end its own `softroce daemon`), then `softroce perf
# write`, softroce's own perftest twin, with the same size, count and links.
# The difference is the cost of the drop-in's socket round trip per verb.
#
#   bash dropin/libibverbs/tests/bw-compare.sh [SIZE [ITERS]]     (default 65536 5000)
set -euo pipefail
cd "$(dirname "$0")/../../.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
size=${1:-65536}
iters=${2:-5000}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/softroce" ./cmd/softroce
make -s -C dropin/libibverbs >/dev/null
lib=$PWD/dropin/libibverbs
port=18600

row() { grep -E "^ *$size +$iters " "$1" || { echo "no result row in $1:"; cat "$1"; exit 1; }; }

echo "# size $size, iters $iters, UDP loopback 127.0.0.2 <-> 127.0.0.3, path MTU 1024"
echo "# #bytes #iterations BW_peak[MB/s] BW_average[MB/s] MsgRate[Mpps]"

"$tmp/softroce" daemon --socket "$tmp/a.sock" --link udp --addr 127.0.0.2 2>/dev/null & pids+=($!)
"$tmp/softroce" daemon --socket "$tmp/b.sock" --link udp --addr 127.0.0.3 2>/dev/null & pids+=($!)
for s in a b; do
	for _ in $(seq 50); do [ -S "$tmp/$s.sock" ] && break; sleep 0.1; done
done
SOFTROCE_SOCKET=$tmp/a.sock LD_LIBRARY_PATH=$lib \
	ib_write_bw -d rxe0 -x 1 -F -s "$size" -n "$iters" -p $port >"$tmp/srv.out" 2>&1 & srv=$!
sleep 0.5
SOFTROCE_SOCKET=$tmp/b.sock LD_LIBRARY_PATH=$lib timeout 120 \
	ib_write_bw -d rxe0 -x 1 -F -s "$size" -n "$iters" -p $port 127.0.0.1 >"$tmp/cli.out" 2>&1
wait $srv
echo "ib_write_bw (drop-in):   $(row "$tmp/cli.out")"
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true
pids=()

"$tmp/softroce" perf write --addr 127.0.0.2 -p $((port + 1)) >"$tmp/psrv.out" 2>&1 & srv=$!
sleep 0.5
timeout 120 "$tmp/softroce" perf write --addr 127.0.0.3 -p $((port + 1)) -s "$size" -n "$iters" 127.0.0.2 >"$tmp/pcli.out" 2>&1
wait $srv
echo "softroce perf write:     $(row "$tmp/pcli.out")"
