#!/bin/sh
# Installs the Debian packages nabla's build and tests need, if missing:
#   check + libsubunit-dev (the test framework), pkg-config, libcjson-dev
#   (the safetensors JSON header and the tokenizer's vocabulary),
#   libpcre2-dev (the GPT-2 tokenizer's pre-tokenizer), g++ (the header is
#   checked as C++17). Extra package names may be given.
# Uses apt-get as root, or through sudo; says what to run otherwise.
set -e
need=""
pkg-config --version >/dev/null 2>&1 || need="$need pkg-config"
command -v c++ >/dev/null 2>&1 || need="$need g++"
pkg-config --exists check 2>/dev/null || need="$need check"
[ -e /usr/include/subunit/child.h ] || need="$need libsubunit-dev"
pkg-config --exists libcjson 2>/dev/null || [ -e /usr/include/cjson/cJSON.h ] || need="$need libcjson-dev"
pkg-config --exists libpcre2-8 2>/dev/null || [ -e /usr/include/pcre2.h ] || need="$need libpcre2-dev"
for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
echo "nabla: installing Debian packages:$need"
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "nabla: please install as root: apt-get install$need" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a parallel make, a boot-time update) may hold dpkg's lock:
# wait for it rather than fail. A fresh machine has no package lists yet;
# refresh them when the install cannot find a package.
APT="$SUDO apt-get -o DPkg::Lock::Timeout=600"
$APT install -y -q $need || { $APT update -q && $APT install -y -q $need; }
