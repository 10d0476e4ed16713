#!/bin/sh
# Writes the demo's English corpus to OUT: every fortune of Debian's
# `fortunes` package (/usr/share/games/fortunes; BSD licence, see
# /usr/share/doc/fortunes/copyright) except the ASCII art, with the '%'
# lines that separate fortunes removed. About 2.5 MB of UTF-8 text.
#   sh tools/fortunes-corpus.sh OUT
set -e
out=$1
[ -n "$out" ] || { echo "usage: sh tools/fortunes-corpus.sh OUT" >&2; exit 2; }
dir=/usr/share/games/fortunes
[ -f $dir/fortunes ] || { echo "fortunes-corpus: $dir/fortunes missing: install the Debian package 'fortunes'" >&2; exit 1; }
files=$(find $dir -maxdepth 1 -type f ! -name '*.*' ! -name ascii-art | LC_ALL=C sort)
grep -hv '^%$' $files > "$out.tmp"
mv "$out.tmp" "$out"
