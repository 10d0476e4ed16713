#!/bin/sh
# Runs every example of a build once, quickly, for the sanitizer targets:
#   sh tools/run-examples.sh BUILD_DIR [THREADS]
# The seed walkthroughs run as they are, demo_reverse for a few steps and
# teach_backprop writing its picture; outputs go to a temporary directory.
# Fails on the first example that exits with another status than expected
# (demo_reverse may exit 1: a few steps do not reach its accuracy goal) or
# whose output holds a sanitizer report.
set -e
dir=$1
threads=${2:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for e in "$dir"/examples/*; do
    name=$(basename "$e")
    ok=0
    case $name in
    demo_reverse) set -- --steps 40 --threads "$threads" --out "$tmp/demo"; ok="0 1" ;;
    teach_backprop) set -- "$tmp/tape.dot" ;;
    *) set -- ;;
    esac
    echo "example: $name $*"
    rc=0
    "$e" "$@" >"$tmp/out.txt" 2>&1 || rc=$?
    case " $ok " in *" $rc "*) ;; *) bad="exit status $rc" ;; esac
    grep -q "Sanitizer\|runtime error:" "$tmp/out.txt" && bad="a sanitizer report"
    if [ -n "${bad:-}" ]; then
        cat "$tmp/out.txt"
        echo "example $name failed: $bad" >&2
        exit 1
    fi
done
