#!/usr/bin/env bash
# losscurve.sh: RDMA WRITE and READ goodput against loss over UDP loopback,
# two `softroce perf` processes, each dropping that share of its own sends
# (--fault loss=P%), perftest's shape (64 KiB messages, path MTU 1024, 128
# outstanding, timeout 14, retry count 7): softroce's default recovery
# (kernel rxe's) beside --fast-recovery, in one run. The guests' curve against kernel
# rxe itself is interop/losscurve.sh.
#
#   bash bench/losscurve.sh [-s SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
seed=3
while getopts "s:" o; do
	case $o in
	s) seed=$OPTARG ;;
	*) echo "usage: $0 [-s SEED]" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/softroce" ./cmd/softroce

# run VERB LOSS ITERS [FLAGS...]: the client's BW average in MB/s, or
# "timeout" when the pair took longer than 300 s.
run() {
	local verb=$1 loss=$2 n=$3
	shift 3
	local f=(-s 65536 -n "$n" -m 1024 "$@")
	[ "$loss" = 0 ] || f+=(--fault "loss=$loss%,seed=$seed")
	"$tmp/softroce" perf "$verb" --addr 127.0.77.1 --port 18600 "${f[@]}" >"$tmp/server" 2>&1 &
	local srv=$!
	sleep 0.5
	if timeout 300 "$tmp/softroce" perf "$verb" --addr 127.0.77.2 --port 18600 "${f[@]}" 127.0.77.1 >"$tmp/client" 2>&1; then
		awk '$1 == 65536 {print $4}' "$tmp/client"
	else
		echo timeout
	fi
	kill $srv 2>/dev/null || true
	wait $srv 2>/dev/null || true
}

iters() { case $1 in 0 | 0.1) echo 2000 ;; 1) echo 1000 ;; 5) echo 300 ;; *) echo 100 ;; esac; }

echo "| verb | loss | softroce MB/s | --fast-recovery MB/s | ratio |"
echo "|---|---|---|---|---|"
for verb in write read; do
	for loss in 0 0.1 1 5 10; do
		n=$(iters "$loss")
		plain=$(run "$verb" "$loss" "$n")
		fast=$(run "$verb" "$loss" "$n" --fast-recovery)
		ratio=$(awk -v a="$fast" -v b="$plain" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.1f", a / b; else print "-" }')
		echo "| $verb | $loss% | $plain | $fast | $ratio |"
	done
done
