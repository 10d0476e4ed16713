#!/bin/sh
# run.sh SECONDS BUILD_DIR TARGET... - the `make fuzz` campaign: runs each
# libFuzzer binary BUILD_DIR/fuzz/fuzz_<name> for SECONDS / (number of
# targets) seconds, starting from tests/fuzz/seeds/<name>/ and
# tests/fuzz/regressions/<name>/, with tests/fuzz/<name>.dict when present.
# New coverage goes to BUILD_DIR/fuzz/corpus/<name>/ (not committed); a crash
# is written to BUILD_DIR/fuzz/crashes/ and stops the campaign with a failure.
set -u
secs=$1 build=$2
shift 2
n=$#
[ "$n" -gt 0 ] || { echo "fuzz: no targets"; exit 1; }
each=$((secs / n))
[ "$each" -ge 1 ] || each=1
here=$(dirname "$0")
mkdir -p "$build/fuzz/crashes"
status=0
for name in "$@"; do
    corpus="$build/fuzz/corpus/$name"
    mkdir -p "$corpus"
    dict=""
    [ -f "$here/$name.dict" ] && dict="-dict=$here/$name.dict"
    dirs="$corpus"
    for d in "$here/seeds/$name" "$here/regressions/$name"; do [ -d "$d" ] && dirs="$dirs $d"; done
    echo "fuzz: $name for ${each}s"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$build/fuzz/fuzz_$name" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 \
        -max_len=8192 -print_final_stats=1 $dict \
        -artifact_prefix="$build/fuzz/crashes/$name-" $dirs > "$build/fuzz/$name.log" 2>&1
    rc=$?
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$build/fuzz/$name.log" | sed "s/^/fuzz: $name: /"
    echo "fuzz: $name: $(($(date +%s) - start))s, exit $rc"
    if [ "$rc" -ne 0 ]; then
        tail -40 "$build/fuzz/$name.log"
        echo "fuzz: $name FAILED: copy the input named above from $build/fuzz/crashes/ to"
        echo "      tests/fuzz/regressions/$name/, fix the bug, and commit both (make test replays it)"
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "fuzz: PASS ($n targets, ${secs}s)"
exit $status
