#!/usr/bin/env bash
# ci.sh: run the interop suite from .ci/run when this machine can (root and
# /dev/net/tun, for network namespaces, bridges and TAPs); otherwise say why
# in one line. Under CI (CI=true) that is a failure: the kernel-interop
# evidence must not vanish from a green run. Elsewhere it skips and succeeds.
# The suite installs its own packages with apt-get and caches the guest image
# in SOFTROCE_INTEROP_CACHE.
set -uo pipefail
cd "$(dirname "$0")/.."
cannot() {
	if [ "${CI:-}" = true ]; then
		echo "interop: FAILED: cannot run here ($1); CI needs root, /dev/net/tun and apt-get" >&2
		exit 1
	fi
	echo "interop: skipped ($1)"
	exit 0
}
[ "$(id -u)" -eq 0 ] || cannot "not root: network namespaces and TAPs need root"
[ -c /dev/net/tun ] || cannot "no /dev/net/tun"
command -v apt-get >/dev/null 2>&1 || cannot "no apt-get to install qemu and the kernel from"
exec timeout --kill-after=30 14m bash interop/run.sh "$@"
