#!/bin/sh
# Builds the JSON-lines import fuzzer with clang's libFuzzer (+ ASan/UBSan) and runs it for
# $FUZZ_SECONDS seconds (default 30) from the seed corpus. CI calls this script.
#
#   tests/fuzz/run-fuzz.sh                 # 30 s
#   FUZZ_SECONDS=300 tests/fuzz/run-fuzz.sh
#
# Environment: CLANG (compiler, default clang or clang-14), FUZZ_OUT (build/work directory,
# default build-fuzz/ in the repository), FUZZ_SECONDS. New interesting inputs go to
# $FUZZ_OUT/corpus; crashes to $FUZZ_OUT/crash-*. Exit status is libFuzzer's (0 = no crash).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
clang=${CLANG:-$(command -v clang || command -v clang-14 || true)}
if [ -z "$clang" ]; then
    echo "run-fuzz.sh: clang not found (set CLANG)" >&2
    exit 2
fi
out=${FUZZ_OUT:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-30}
mkdir -p "$out/corpus"
# shellcheck disable=SC2046
"$clang" -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra -Werror -I"$root/include" -I"$root" $(pkg-config --cflags sqlite3) \
    "$root/tests/fuzz/fuzz_db_import.c" "$root"/tuning_db/*.c "$root/te/status.c" \
    $(pkg-config --libs sqlite3) -lm -o "$out/fuzz_db_import"
cd "$out"
exec ./fuzz_db_import -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -dict="$root/tests/fuzz/import.dict" -print_final_stats=1 \
    "$out/corpus" "$root/tests/fuzz/corpus"
