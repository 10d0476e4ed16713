#!/bin/sh
# add-op-copy.sh SRC DEST - copies the tree at SRC to DEST (the files a build
# of the library, the tools and the tests needs) and applies the change that
# docs/contributing.md's "Adding an op" walks through: the diff blocks of that
# section, in order. tests/check_add_op.c builds the copy and checks the new
# op; tools/ref/gen_add_op_fixture.sh makes its PyTorch fixture from it.
set -e
src=$1
dest=$2
if [ -z "$src" ] || [ -z "$dest" ]; then
    echo "usage: add-op-copy.sh SRC DEST" >&2
    exit 2
fi
mkdir -p "$dest/tests/fixtures"
cp -r "$src/Makefile" "$src/include" "$src/src" "$src/tools" "$src/examples" "$dest/"
cp "$src"/tests/*.c "$src"/tests/*.h "$dest/tests/"
cp -r "$src/tests/fixtures/parity" "$dest/tests/fixtures/"
awk '/^## /{ in_section = ($0 == "## Adding an op"); next }
     in_section && /^```diff$/ { in_diff = 1; next }
     in_diff && /^```$/ { in_diff = 0; next }
     in_diff' "$src/docs/contributing.md" > "$dest/add-op.diff"
if ! [ -s "$dest/add-op.diff" ]; then
    echo "add-op-copy.sh: no diff blocks under '## Adding an op' in docs/contributing.md" >&2
    exit 1
fi
patch -s -p1 -d "$dest" < "$dest/add-op.diff"
