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
# Targets run FUZZ_JOBS at a time (one per core), each for its own share of
# SECONDS, so two cores halve the wall time and every target still gets its
# seconds on a core of its own.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# One target: its lines into BUILD_DIR/fuzz/<name>.summary, its verdict (0 or
# 1) into <name>.rc.
fuzz_one() {
    name=$1 out="$build/fuzz/$1.summary"
    corpus="$build/fuzz/corpus/$name"
    mkdir -p "$corpus"
    dict=""
    [ -f "$here/$name.dict" ] && dict="-dict=$here/$name.dict"
    dirs="$corpus"
    for d in "$here/seeds/$name" "$here/regressions/$name"; do [ -d "$d" ] && dirs="$dirs $d"; done
    echo "fuzz: $name for ${each}s" >"$out"
    start=$(date +%s)
    # shellcheck disable=SC2086
    "$build/fuzz/fuzz_$name" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 \
        -max_len=8192 -print_final_stats=1 $dict \
        -artifact_prefix="$build/fuzz/crashes/$name-" $dirs > "$build/fuzz/$name.log" 2>&1
    rc=$?
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$build/fuzz/$name.log" | sed "s/^/fuzz: $name: /" >>"$out"
    echo "fuzz: $name: $(($(date +%s) - start))s, exit $rc" >>"$out"
    if [ "$rc" -ne 0 ]; then
        tail -40 "$build/fuzz/$name.log" >>"$out"
        echo "fuzz: $name FAILED: copy the input named above from $build/fuzz/crashes/ to" >>"$out"
        echo "      tests/fuzz/regressions/$name/, fix the bug, and commit both (make test replays it)" >>"$out"
    fi
    [ "$rc" -eq 0 ] && echo 0 >"$build/fuzz/$name.rc" || echo 1 >"$build/fuzz/$name.rc"
}

running=0
for name in "$@"; do
    rm -f "$build/fuzz/$name.rc"
    fuzz_one "$name" &
    running=$((running + 1))
    # every target runs exactly its seconds, so a batch ends together
    [ "$running" -lt "$jobs" ] || { wait; running=0; }
done
wait
status=0
for name in "$@"; do
    cat "$build/fuzz/$name.summary"
    [ "$(cat "$build/fuzz/$name.rc" 2>/dev/null)" = 0 ] || status=1
done
[ "$status" -eq 0 ] && echo "fuzz: PASS ($n targets, ${secs}s, $jobs at a time)"
exit $status
