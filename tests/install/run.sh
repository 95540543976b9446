#!/usr/bin/env bash
# Installs the build tree $1 into a temporary prefix, then builds and runs tests/install's
# consumer through find_package and through pkg-config.
set -euo pipefail
build=$1
flags=${TESSERA_CONSUMER_FLAGS:-} # e.g. the sanitizer flags the library was built with
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
"$tmp/prefix/bin/tessera" --version

echo "== find_package"
cmake -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$tmp/cm" >/dev/null
"$tmp/cm/consumer"

echo "== pkg-config (shared library)"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib64/pkgconfig"
cc -std=c11 -Wall -Wextra -Werror $flags "$here/consumer.c" $(pkg-config --cflags --libs tessera) \
    -fopenmp -lm -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/consumer_pc"
"$tmp/consumer_pc"
echo "== pkg-config (static library)"
cc -std=c11 -Wall -Wextra -Werror $flags "$here/consumer.c" $(pkg-config --static --cflags tessera) \
    "$tmp/prefix/lib/libtessera.a" $(pkg-config --static --libs-only-l --libs-only-other sqlite3 jansson) \
    -fopenmp -ldl -lm -o "$tmp/consumer_static"
"$tmp/consumer_static"
