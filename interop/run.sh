#!/usr/bin/env bash
# run.sh: the whole interop suite, kernel rxe (rdma_rxe in QEMU) against
# itself and against softroce. Needs root and /dev/net/tun; installs what it
# needs with apt-get (see build-image.sh). Extra arguments go to go test,
# e.g. `bash interop/run.sh -run 'Interop/softroce_udp'`.
#
#   SOFTROCE_INTEROP_CACHE  image and .deb cache (default: ~/.cache/softroce-interop)
#   SOFTROCE_INTEROP_OUT    keep the captures here (default: a temp dir, removed)
#   SOFTROCE_INTEROP_REPEAT run each softroce case this many times (default 1)
#   SOFTROCE_INTEROP_KVM    1 force KVM, 0 force TCG (default: KVM only with vmx/svm)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
export SOFTROCE_INTEROP=1
exec go test -count=1 -timeout 14m -v ./interop -run Interop "$@"
