#!/usr/bin/env bash
# simcost.sh: what the simulator costs per scenario, counted rather than
# timed, so that two revisions compare on a shared machine whose speed moves
# by a third with its other tenants' load.
#
#   bash bench/simcost.sh [-n RUNS] [-l LL_BYTES] SCENARIO_REGEX REV...
#
# For each git revision (or "." for the working tree) it builds the sim
# package's test binary (with the revision's cmd/softroce/default.pgo, as
# go build builds the softroce binary) and runs BenchmarkOneCore on the scenarios matching
# SCENARIO_REGEX, RUNS times (default 10), under valgrind's cachegrind with
# a 32 KiB first-level data cache and an 8 MiB last level (-l to change it:
# a smaller one stands for a machine whose cache other programs share). It
# prints the instructions, the first- and last-level data-cache misses and
# an estimate of cycles: instructions + 10 x first-level misses + 100 x
# last-level misses. SHA-256 (the event log's digest) is left out of the
# estimate: under valgrind it runs the AVX2 code, not the SHA extensions the
# machine has, and takes a fifth of all instructions where on the machine it
# takes 3% of the time; a change that keeps the event log does the same
# hashing either way. The counts repeat to within about half a percent; the
# percentage is against the first revision named.
#
# Valgrind's processor has no VPCLMULQDQ, so the ICRC is counted on
# hash/crc32's 128-bit folding rather than packet's 256-bit one.
#
# Needs valgrind (apt-get install valgrind). Go's runtime reads the clock
# with RDTSCP, which valgrind does not emulate: GODEBUG=cpu.rdtscp=off makes
# it use RDTSC.
set -euo pipefail

runs=10
ll=8388608
while getopts "n:l:" opt; do
	case $opt in
	n) runs=$OPTARG ;;
	l) ll=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -lt 2 ]; then
	echo "usage: simcost.sh [-n RUNS] [-l LL_BYTES] SCENARIO_REGEX REV..." >&2
	exit 2
fi
if ! command -v valgrind > /dev/null; then
	echo "simcost.sh: valgrind is missing: apt-get install valgrind" >&2
	exit 1
fi
re=$1
shift
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for rev in "$@"; do
	name=$(printf '%s' "$rev" | tr -c 'A-Za-z0-9._' '_')
	if [ "$rev" = . ]; then
		src=$root
	else
		src=$tmp/src-$name
		mkdir -p "$src"
		git -C "$root" archive "$rev" | tar -x -C "$src"
	fi
	# Built as the softroce binary is: with the revision's profile for
	# profile-guided optimization, where it has one (bench/pgo.sh).
	pgo=off
	if [ -f "$src/cmd/softroce/default.pgo" ]; then
		pgo=$src/cmd/softroce/default.pgo
	fi
	(cd "$src/sim" && go test -c -pgo="$pgo" -o "$tmp/sim-$name.test" .)
	out=$tmp/cg-$name.out
	# The benchmark runs from the sim directory (it reads the scenarios
	# from ../testdata), always the working tree's: the same scenarios
	# for every revision.
	(cd "$root/sim" && GOMAXPROCS=1 GODEBUG=cpu.rdtscp=off valgrind --tool=cachegrind \
		--cache-sim=yes --D1=32768,8,64 --LL="$ll",16,64 --cachegrind-out-file="$out" \
		"$tmp/sim-$name.test" -test.run '^$' -test.bench "BenchmarkOneCore/($re)\$" \
		-test.benchtime "${runs}x" > "$tmp/bench-$name.txt" 2>&1) || {
		echo "simcost.sh: $rev: the benchmark failed:" >&2
		tail -20 "$tmp/bench-$name.txt" >&2
		exit 1
	}
	awk -v rev="$rev" '
		/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1; next }
		/^fn=/ { sha = ($0 ~ /sha256/); next }
		/^[0-9+*-]/ {
			ir = $(1 + col["Ir"]); d1 = $(1 + col["D1mr"]) + $(1 + col["D1mw"])
			lld = $(1 + col["DLmr"]) + $(1 + col["DLmw"])
			tir += ir; td1 += d1; tll += lld
			if (!sha) est += ir + 10 * d1 + 100 * lld
		}
		END { print tir, td1, tll, est }' "$out" > "$tmp/counts"
	read -r ir d1 lld est < "$tmp/counts"
	first=${first:-$est}
	awk -v rev="$rev" -v ir="$ir" -v d1="$d1" -v lld="$lld" -v est="$est" -v first="$first" 'BEGIN {
		printf "%-12s instructions %.4g  D1 misses %.4g  LL data misses %.4g  estimate %.4g (%+.1f%%)\n",
			rev, ir, d1, lld, est, 100 * (est / first - 1)
	}'
done
