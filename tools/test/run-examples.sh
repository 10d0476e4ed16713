#!/bin/sh
# Runs every example of a build once, quickly, for the sanitizer targets:
#   sh tools/test/run-examples.sh BUILD_DIR [THREADS]
# The seed walkthroughs run as they are, demo_reverse for a few steps and
# teach_backprop writing its picture; everything runs in a temporary
# directory, so nothing lands in the tree.
# Fails on the first example that exits with another status than expected
# (demo_reverse may exit 1: a few steps do not reach its accuracy goal, but
# it must have trained) or whose output holds a sanitizer report.
set -e
dir=$(cd "$1" && pwd)
threads=${2:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" # whatever an example writes by default lands here
for e in "$dir"/examples/*; do
    name=$(basename "$e")
    ok=0
    case $name in
    demo_reverse) set -- --steps 40 --threads "$threads" --out "$tmp/demo"; ok="0 1" ;;
    teach_backprop) set -- --model=gpt --dot="$tmp/tape.dot" --html="$tmp/tape.html" --json="$tmp/tape.json" ;;
    teach_scalar | custom_op_silu) set -- --html="$tmp/$name.html" ;;
    *) set -- ;;
    esac
    echo "example: $name $*"
    rc=0
    "$e" "$@" >"$tmp/out.txt" 2>&1 || rc=$?
    case " $ok " in *" $rc "*) ;; *) bad="exit status $rc" ;; esac
    grep -q "Sanitizer\|runtime error:" "$tmp/out.txt" && bad="a sanitizer report"
    # exit 1 is demo_reverse's verdict only once it has trained
    [ "$name" = demo_reverse ] && ! grep -q "^trained 40 steps" "$tmp/out.txt" && bad="no training"
    if [ -n "${bad:-}" ]; then
        cat "$tmp/out.txt"
        echo "example $name failed: $bad" >&2
        exit 1
    fi
done
