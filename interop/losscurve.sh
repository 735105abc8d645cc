#!/usr/bin/env bash
# losscurve.sh: RDMA WRITE and READ goodput against loss (0.1-10%, netem on
# both guests), kernel rxe beside softroce in the same two QEMU guests. A
# measurement for the README, not part of CI: about 10 minutes under TCG (three runs per point, the median).
# Needs root and /dev/net/tun, like run.sh. The table is logged and written
# to $SOFTROCE_INTEROP_OUT/losscurve.json.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
export SOFTROCE_LOSSCURVE=1
exec go test -count=1 -timeout 70m -v ./interop -run '^TestLossCurve$' "$@"
