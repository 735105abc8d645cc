#!/usr/bin/env bash
# ci.sh: run the interop suite from .ci/run when this machine can (root and
# /dev/net/tun, for network namespaces, bridges and TAPs); otherwise say why
# in one line and succeed. The suite installs its own packages with apt-get
# and caches the guest image in SOFTROCE_INTEROP_CACHE.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
	echo "interop: skipped (not root: network namespaces and TAPs need root)"
	exit 0
fi
if [ ! -c /dev/net/tun ]; then
	echo "interop: skipped (no /dev/net/tun)"
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "interop: skipped (no apt-get to install qemu and the kernel from)"
	exit 0
fi
exec timeout --kill-after=30 14m bash interop/run.sh "$@"
