#!/usr/bin/env bash
# pgo.sh: remakes cmd/softroce/default.pgo, the CPU profile that go build,
# go run and go install use to optimize the softroce binary (profile-guided
# optimization: the compiler inlines and lays out the hot paths it names).
#
#   bash bench/pgo.sh
#
# The profile is the simulator's work, which is where the binary's time goes
# when it has much to do: every library scenario under BenchmarkOneCore for
# a second each, and the HPCC reference run (testdata/experiments), merged.
# Both are built without a profile, so that the new one does not depend on
# the old. A profile made from older code still applies (the compiler
# matches functions by name and line offset, and ignores what it cannot
# match); remake it when the hot paths move. It takes about two minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -pgo=off -o "$tmp/sim.test" ./sim
go build -pgo=off -o "$tmp/softroce" ./cmd/softroce
(cd sim && "$tmp/sim.test" -test.run '^$' -test.bench OneCore -test.benchtime 1s \
	-test.cpuprofile "$tmp/library.pprof" >/dev/null)
"$tmp/softroce" sim run testdata/experiments/hpcc-ws30.json --cpuprofile "$tmp/hpcc.pprof" >/dev/null
go tool pprof -proto "$tmp/library.pprof" "$tmp/hpcc.pprof" >"$tmp/default.pgo" 2>/dev/null
mv "$tmp/default.pgo" cmd/softroce/default.pgo
echo "pgo.sh: wrote cmd/softroce/default.pgo ($(wc -c <cmd/softroce/default.pgo) bytes)"
