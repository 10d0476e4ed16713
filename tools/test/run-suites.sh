#!/bin/sh
# Runs the Check runner's suites as separate processes, JOBS at a time:
#   sh tools/test/run-suites.sh JOBS CHECK_BIN [SUITE...]
# No SUITE: every suite `CHECK_BIN --list` names. Suites named in
# NB_SLOW_SUITES start first (the longest ones, so the processes finish
# together), the others in the runner's order. NB_SUITE_WRAP is a command
# each run goes through (valgrind ...). The environment (NB_BUILD_DIR,
# ASAN_OPTIONS, ...) passes to every run.
# Prints a line per suite as it ends (its time and Check's summary); at the
# end, the whole output of every suite that failed, which fails the script.
# A suite that ran no test (a name CK_RUN_SUITE does not know) fails too.
# Every suite gets its own process and log; what the tests write goes to
# mkdtemp directories, so two suites at once share no file.
set -eu
[ $# -ge 2 ] || { echo "usage: run-suites.sh JOBS CHECK_BIN [SUITE...]" >&2; exit 2; }
jobs=$1 bin=$2
shift 2
[ -x "$bin" ] || { echo "run-suites.sh: $bin is not a program" >&2; exit 2; }
if [ $# -eq 0 ]; then
    all=$("$bin" --list)
    [ -n "$all" ] || { echo "run-suites.sh: $bin --list named no suite" >&2; exit 1; }
    first=""
    for s in ${NB_SLOW_SUITES:-}; do
        case " $(echo $all) " in *" $s "*) first="$first $s" ;; esac
    done
    rest=""
    for s in $all; do
        case " $first " in *" $s "*) ;; *) rest="$rest $s" ;; esac
    done
    set -- $first $rest
fi
# Check's timeouts guard against hangs; with several suites at once on a
# shared machine a test can take twice its time alone, so they are doubled
# (unless CK_TIMEOUT_MULTIPLIER is set). No assertion changes.
[ "$jobs" -le 1 ] || export CK_TIMEOUT_MULTIPLIER="${CK_TIMEOUT_MULTIPLIER:-2}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
export NB_RUN_BIN="$bin" NB_RUN_LOGS="$logs" NB_SUITE_WRAP="${NB_SUITE_WRAP:-}"
start=$(date +%s)
# one suite: its output into LOGS/NAME.log, its exit status into LOGS/NAME.rc
printf '%s\n' "$@" | xargs -P "$jobs" -I{} sh -c '
    s=$1 log="$NB_RUN_LOGS/$1.log" t0=$(date +%s)
    rc=0
    CK_RUN_SUITE=$s $NB_SUITE_WRAP "$NB_RUN_BIN" >"$log" 2>&1 </dev/null || rc=$?
    summary=$(grep -o "[0-9]*%: Checks: .*" "$log" | tail -n 1)
    case $summary in "" | *"Checks: 0,"*) [ $rc -ne 0 ] || rc=125 ;; esac
    echo $rc >"$NB_RUN_LOGS/$s.rc"
    verdict=passed
    [ $rc -eq 0 ] || verdict="FAILED (exit $rc)"
    echo "suite $s: $verdict in $(($(date +%s) - t0)) s: ${summary:-no Check summary}"
' sh {} || true
failed=""
for s in "$@"; do
    rc=$(cat "$logs/$s.rc" 2>/dev/null || echo missing)
    [ "$rc" = 0 ] || failed="$failed $s"
done
for s in $failed; do
    echo "==== suite $s failed; its output:"
    cat "$logs/$s.log" 2>/dev/null || echo "(no log: the suite did not run)"
done
n=$#
if [ -n "$failed" ]; then
    echo "run-suites: $n suites in $(($(date +%s) - start)) s; failed:$failed" >&2
    exit 1
fi
echo "run-suites: $n suites passed in $(($(date +%s) - start)) s ($jobs at a time)"
