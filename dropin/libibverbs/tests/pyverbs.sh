#!/bin/sh
# pyverbs.sh: run rdma-core's pyverbs test suite (Debian's python3-pyverbs,
# tests shipped under /usr/share/doc/rdma-core/tests, partly gzipped) against
# softroce through the drop-in libibverbs.so.1, and print one row per test
# module: passed/skipped/failed/errors and the commonest reason. Issue #7 item 3.
#
#   make -C dropin/libibverbs && dropin/libibverbs/tests/pyverbs.sh              # whole suite
#   dropin/libibverbs/tests/pyverbs.sh -- -k test_qp                       # unittest args after --
#
# The suite runs under `softroce run`: it uses a daemon that answers on the
# socket (--socket, else $SOFTROCE_SOCKET, ...) or starts a device of its own
# (mem link) for the suite's lifetime. With --direct it needs no softroce
# binary: a daemon must already serve --socket, and the suite runs with
# SOFTROCE_SOCKET and LD_LIBRARY_PATH set, which is what `softroce run` does.
# The tests' traffic runs between two QPs of one process, looped back by the
# device.
#
# Modules are grouped as vendor (test_mlx5_*, test_efa*, test_cuda_*: need
# mlx5/efa/CUDA), rdmacm (test_rdmacm: needs rdma_cm and a net interface),
# and generic (all others). Exit status: 0 when no generic test failed or
# errored, 1 otherwise, 2 on trouble (missing tools, unbuildable library).
set -eu

usage() {
	cat <<'EOF'
usage: pyverbs.sh [options] [-- unittest args (-k PATTERN, test names)]
  --dev NAME        RDMA device the tests use (default rxe0)
  --gid N           GID index (default 1: the IPv4 RoCE v2 GID)
  --port N          port (default 1)
  --softroce BIN    softroce binary (default: $SOFTROCE, softroce on PATH, else go build)
  --lib DIR         directory of the built libibverbs.so.1 (default: this repo's dropin/libibverbs/)
  --socket PATH     daemon socket for softroce run (default: softroce run's rule)
  --direct          no softroce run: use the daemon already serving --socket
  --log FILE        full unittest -v output (default: ${TMPDIR:-/tmp}/softroce-pyverbs-PID.log)
  --test-timeout S  seconds one test may take before it is counted as an error (default 300)
  --tests DIR       rdma-core tests to run (default /usr/share/doc/rdma-core/tests)
  --keep            keep the unpacked tests
EOF
}

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
dev=rxe0 gid=1 port=1 softroce=${SOFTROCE:-} lib= socket= keep= direct=
log=${TMPDIR:-/tmp}/softroce-pyverbs-$$.log
test_timeout=300
src=/usr/share/doc/rdma-core/tests
python=/usr/bin/python3 # Debian's: pyverbs is installed for it, not for a pyenv python

while [ $# -gt 0 ]; do
	case $1 in
	--dev) dev=$2; shift 2 ;;
	--gid) gid=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--softroce) softroce=$2; shift 2 ;;
	--lib) lib=$2; shift 2 ;;
	--socket) socket=$2; shift 2 ;;
	--log) log=$2; shift 2 ;;
	--test-timeout) test_timeout=$2; shift 2 ;;
	--tests) src=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	--direct) direct=1; shift ;;
	-h|--help) usage; exit 0 ;;
	--) shift; break ;;
	*) echo "pyverbs.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done

die() { echo "pyverbs.sh: $*" >&2; exit 2; }

[ -x "$python" ] || die "$python not found (apt-get install python3)"
"$python" -c 'import pyverbs.device' 2>/dev/null || die "pyverbs not importable by $python (apt-get install python3-pyverbs)"
[ -f "$src/run_tests.py" ] || die "$src/run_tests.py not found (apt-get install python3-pyverbs rdma-core)"

work=$(mktemp -d "${TMPDIR:-/tmp}/softroce-pyverbs.XXXXXX")
if [ -z "$keep" ]; then
	trap 'rm -rf "$work"' EXIT
else
	echo "pyverbs.sh: tests unpacked in $work" >&2
fi

# The library: given, or this repo's, built if needed.
if [ -z "$lib" ]; then
	lib=$repo/dropin/libibverbs
	make -s -C "$lib" libibverbs.so.1 >&2 || die "make -C $lib failed"
fi
[ -f "$lib/libibverbs.so.1" ] || die "$lib/libibverbs.so.1 not built (make -C dropin/libibverbs)"

# softroce: given, on PATH, or built from this repo.
if [ -n "$direct" ]; then
	[ -S "$socket" ] || die "--direct needs --socket with a running daemon ($socket is not a socket)"
elif [ -z "$softroce" ]; then
	if command -v softroce >/dev/null 2>&1; then
		softroce=$(command -v softroce)
	else
		gobin=$(command -v go || echo /usr/local/go/bin/go)
		(cd "$repo" && "$gobin" build -o "$work/softroce" ./cmd/softroce) || die "go build ./cmd/softroce failed"
		softroce=$work/softroce
	fi
fi

# The tests, unpacked: run_tests.py loads every tests/test_*.py.
mkdir "$work/tests"
cp -r "$src/." "$work/tests/"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +

# A runner like run_tests.py that also records each test's outcome and
# prints the per-module table.
cat >"$work/tests/softroce_run.py" <<'EOF'
import collections
import os
import re
import signal
import sys
import unittest
from importlib.machinery import SourceFileLoader

from args_parser import parser

TIMEOUT = int(os.environ.get('SOFTROCE_TEST_TIMEOUT', '300'))


class TestTimeout(Exception):
    pass


def on_alarm(signum, frame):
    raise TestTimeout(f'test took more than {TIMEOUT}s')


def module_of(test):
    m = re.search(r'\btests\.(test_\w+)', test.id())
    return m.group(1) if m else test.id()


def kind_of(mod):
    if mod.startswith(('test_mlx5', 'test_efa', 'test_cuda')):
        return 'vendor'
    if mod.startswith('test_rdmacm'):
        return 'rdmacm'
    return 'generic'


def reason_of(err):
    """The last line of a traceback: the exception and its message."""
    lines = [l.strip() for l in err.strip().splitlines() if l.strip()]
    r = lines[-1] if lines else '?'
    # pyverbs.pyverbs_error.PyverbsRDMAError: ... -> PyverbsRDMAError: ...
    r = re.sub(r'^(?:\w+\.)+(\w+:)', r'\1', r)
    return r[:150]


class Recorder(unittest.TextTestResult):
    outcomes = []  # (module, outcome, reason, test id)

    def startTest(self, test):
        signal.alarm(TIMEOUT)
        super().startTest(test)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)

    def _rec(self, test, outcome, reason=''):
        Recorder.outcomes.append((module_of(test), outcome, reason, test.id()))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec(test, 'passed')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._rec(test, 'skipped', 'skip: ' + str(reason)[:150])

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec(test, 'failed', reason_of(self.failures[-1][1]))

    def addError(self, test, err):
        super().addError(test, err)
        self._rec(test, 'errors', reason_of(self.errors[-1][1]))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec(test, 'passed')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec(test, 'failed', 'unexpected success')


def table(out):
    mods = collections.OrderedDict()
    for mod, outcome, reason, _ in sorted(Recorder.outcomes):
        m = mods.setdefault(mod, {'passed': 0, 'skipped': 0, 'failed': 0, 'errors': 0,
                                  'reasons': collections.Counter()})
        m[outcome] += 1
        if reason:
            m['reasons'][reason] += 1
    cols = ('passed', 'skipped', 'failed', 'errors')
    totals = collections.defaultdict(collections.Counter)
    print('\n| module | group | passed | skipped | failed | errors | reason (commonest first) |', file=out)
    print('|---|---|---|---|---|---|---|', file=out)
    for kind in ('generic', 'rdmacm', 'vendor'):
        for mod, m in mods.items():
            if kind_of(mod) != kind:
                continue
            # Failures and errors explain more than skips.
            bad = [(r, n) for r, n in m['reasons'].most_common() if not r.startswith('skip: ')]
            rest = [(r, n) for r, n in m['reasons'].most_common() if r.startswith('skip: ')]
            rs = (bad + rest)
            why = ''
            if rs:
                why = f'{rs[0][1]}x {rs[0][0]}'.replace('|', '/')
                if len(rs) > 1:
                    why += f' (+{len(rs) - 1} other reasons)'
            print(f'| {mod} | {kind} | ' + ' | '.join(str(m[c]) for c in cols) + f' | {why} |', file=out)
            for c in cols:
                totals[kind][c] += m[c]
    print('', file=out)
    for kind in ('generic', 'rdmacm', 'vendor'):
        t = totals[kind]
        print(f'{kind}: ' + ', '.join(f'{c} {t[c]}' for c in cols), file=out)
    return totals['generic']['failed'] + totals['generic']['errors']


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    tests = SourceFileLoader('tests', os.path.join(os.path.dirname(__file__), '__init__.py')).load_module()
    parser.parse_args()
    runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2, stream=sys.stderr)
    unittest.main(module=tests, testRunner=runner, exit=False)
    if parser.args['list_tests']:
        return 0
    with open(os.environ['SOFTROCE_TABLE'], 'w') as f:
        bad = table(f)
    return 1 if bad else 0


sys.exit(main())
EOF

set -- --dev "$dev" --port "$port" --gid "$gid" "$@"
runflags="--lib $lib -d $dev"
[ -n "$socket" ] && runflags="$runflags --socket $socket"

start=$(date +%s)
rc=0
export SOFTROCE_TABLE="$work/table" SOFTROCE_TEST_TIMEOUT="$test_timeout"
if [ -n "$direct" ]; then
	how="SOFTROCE_SOCKET=$socket LD_LIBRARY_PATH=$lib"
	SOFTROCE_SOCKET=$socket LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
		"$python" "$work/tests/softroce_run.py" "$@" >"$log" 2>&1 || rc=$?
else
	how="$softroce run $runflags --"
	# shellcheck disable=SC2086 # runflags holds separate flags
	"$softroce" run $runflags -- "$python" "$work/tests/softroce_run.py" "$@" >"$log" 2>&1 || rc=$?
fi
end=$(date +%s)

if [ ! -s "$work/table" ]; then
	tail -20 "$log" >&2
	die "the suite did not finish (status $rc); full output in $log"
fi
cat "$work/table"
tail -3 "$log" | grep -E '^(Ran|OK|FAILED)' || true
echo "time: $((end - start)) s; full output: $log"
echo "ran: $how $python tests/run_tests.py $*"
exit "$rc"
