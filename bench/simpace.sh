#!/usr/bin/env bash
# simpace.sh: the simulator's one-core speed on a shared machine, as a ratio
# to a reference build measured on the same machine when it was calm.
#
#   bash bench/simpace.sh [-r ROUNDS] [SCENARIO_REGEX]
#
# The machine's speed moves by up to half with its other tenants' load, and
# a figure in frames per second measured in a slow stretch says as much
# about them as about the simulator. So this runs BenchmarkOneCore (one
# second per scenario) in ROUNDS rounds (default 3), each round the
# reference build then the working tree's, each from its own tree (the
# scenarios are the same files; the script checks), and prints per scenario
# both medians, the median of the rounds' ratios (working tree / reference),
# the reference's figure in the calm stretch, and what the ratio makes of it:
# the working tree's speed in that stretch, estimated. The last line says
# how fast the machine runs now against that stretch (the reference's
# figures today against then).
#
# The reference is 18b5273, measured late on 2026-11-28 in a calm stretch
# (medians of three runs alternating with another build, README): every
# library scenario at 1 M frames/s or more. The working tree is built as
# the softroce binary is, with cmd/softroce/default.pgo; the reference had
# no profile.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go > /dev/null || export PATH=$PATH:/usr/local/go/bin

ref=18b5273
# The reference's calm figures, M frames/s.
calm='bursty-loss 1.52
cm-connect 1.60
corruption 1.13
dcqcn-convergence 1.38
fat-tree-websearch 3.40
heavy-reordering 1.60
incast 2.67
incast-dcqcn-pfc 1.05
long-messages-loss 1.88
lossy-link 1.42
partition-fatal 1.76
partition-heal 1.85
pfc-deadlock 2.42
pfc-priorities 1.53
pfc-storm 1.77
pfc-victim 1.50
rnr-storm 2.64
scale 1.00'

rounds=3
while getopts "r:" opt; do
	case $opt in
	r) rounds=$OPTARG ;;
	*) echo "usage: simpace.sh [-r ROUNDS] [SCENARIO_REGEX]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "simpace.sh: -r wants a number of rounds, 1 or more, not '$rounds'" >&2; exit 2; }
re=${1:-.*}
git cat-file -e "$ref^{commit}" 2> /dev/null || {
	echo "simpace.sh: the reference revision $ref is not in this clone: fetch the full history (git fetch --unshallow)" >&2
	exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ref"
git archive "$ref" | tar -x -C "$tmp/ref"
if ! diff -rq "$tmp/ref/testdata/scenarios" testdata/scenarios > /dev/null; then
	echo "simpace.sh: the library's scenarios changed since $ref; its calm figures no longer apply:" >&2
	diff -rq "$tmp/ref/testdata/scenarios" testdata/scenarios >&2 || true
	exit 1
fi
(cd "$tmp/ref/sim" && go test -c -o "$tmp/ref.test" .)
(cd sim && go test -c -pgo=../cmd/softroce/default.pgo -o "$tmp/head.test" .)

# bench BINARY DIR LABEL: one pass, "LABEL scenario frames/s" lines.
bench() {
	(cd "$2" && "$1" -test.run '^$' -test.bench "BenchmarkOneCore/($re)\$" -test.benchtime 1s) |
		awk -v l="$3" '/^BenchmarkOneCore\// {
			for (i = 1; i < NF; i++) if ($(i + 1) == "frames/s") f = $i
			n = $1; sub(/^BenchmarkOneCore\//, "", n); sub(/-[0-9]+$/, "", n)
			print l, n, f / 1e6 }'
}
for r in $(seq "$rounds"); do
	bench "$tmp/ref.test" "$tmp/ref/sim" ref
	bench "$tmp/head.test" sim head
done > "$tmp/runs"

printf '%s\n' "$calm" > "$tmp/calm"
awk -v ref="$ref" '
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	FNR == NR { calm[$1] = $2; next }
	$1 == "ref" { k = ++nr[$2]; r[$2, k] = $3; names[$2] = 1; next }
	$1 == "head" { k = ++nh[$2]; h[$2, k] = $3; next }
	END {
		printf "%-20s %8s %8s %7s %11s %11s\n", "scenario", ref, "tree", "ratio", "calm " ref, "calm tree"
		n = 0; under = 0
		for (s in names) order[++n] = s
		for (i = 2; i <= n; i++) for (j = i; j > 1 && order[j-1] > order[j]; j--) { t = order[j]; order[j] = order[j-1]; order[j-1] = t }
		for (i = 1; i <= n; i++) {
			s = order[i]; m = nr[s] < nh[s] ? nr[s] : nh[s]
			for (k = 1; k <= m; k++) { a[k] = r[s, k]; b[k] = h[s, k]; q[k] = h[s, k] / r[s, k] }
			mr = median(a, m); mh = median(b, m); mq = median(q, m)
			est = calm[s] * mq
			if (est < 1) under++
			pace[i] = mr / calm[s]
			printf "%-20s %8.3f %8.3f %7.3f %11.2f %11.2f\n", s, mr, mh, mq, calm[s], est
		}
		printf "machine pace against the calm stretch: %.2f (median of the reference'"'"'s figures now / then); estimated under 1 M frames/s in it: %d of %d\n", median(pace, n), under, n
	}' "$tmp/calm" "$tmp/runs"
