#!/usr/bin/env bash
# losscurve.sh: RDMA WRITE and READ goodput against loss (0.1-10%, netem on
# both guests), kernel rxe beside softroce in the same two QEMU guests. A
# measurement for the README, not part of CI: about 10 minutes under TCG (three runs per point, the median).
# Needs root and /dev/net/tun, like run.sh. The table is logged and written
# to $SOFTROCE_INTEROP_OUT/losscurve.json. Narrow or change a run with
# SOFTROCE_LOSSCURVE_IMPLS (rxe,softroce,softroce-fast), _VERBS (write,read),
# _LEVELS (0,0.1,1,5,10) and _RATE (a netem rate such as 20mbit on both
# guests' sends, so that the link, not the emulated CPU, bounds both stacks).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
export SOFTROCE_LOSSCURVE=1
exec go test -count=1 -timeout 70m -v ./interop -run '^TestLossCurve$' "$@"
