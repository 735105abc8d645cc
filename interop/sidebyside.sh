#!/usr/bin/env bash
# sidebyside.sh: Debian's ib_write_bw, ib_send_lat and ib_read_lat in the same
# two QEMU guests over kernel rxe and then over softroce's drop-in library
# (rdma_rxe unloaded), the median of three runs each: issue 14's side-by-side
# ratio. A measurement for the README, not part of CI: about 5 minutes under
# TCG. Needs root and /dev/net/tun, like run.sh. The table is logged and
# written to $SOFTROCE_INTEROP_OUT/sidebyside.json.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
export SOFTROCE_SIDEBYSIDE=1
exec go test -count=1 -timeout 45m -v ./interop -run '^TestSideBySide$' "$@"
