#!/usr/bin/env bash
# The test command: installs dependencies, configures, builds and runs every test.
#
#   bash tools/test.sh                 # build/ (RelWithDebInfo), all tests
#   bash tools/test.sh --sanitize      # build-asan/ with ASan + UBSan (and LeakSanitizer)
#   bash tools/test.sh --no-deps       # skip tools/install-deps.sh
#   bash tools/test.sh -- -R test_cc   # arguments after -- go to ctest
#
# Exits non-zero when any step or any test fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

usage() {
    sed -n '2,9s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

sanitize=0
deps=1
ctest_args=()
while [ $# -gt 0 ]; do
    case $1 in
    --sanitize) sanitize=1 ;;
    --no-deps) deps=0 ;;
    -h | --help)
        usage
        exit 0
        ;;
    --)
        shift
        ctest_args=("$@")
        break
        ;;
    *)
        echo "test.sh: unknown option '$1'" >&2
        usage >&2
        exit 2
        ;;
    esac
    shift
done

if [ "$deps" -eq 1 ]; then
    bash tools/install-deps.sh
fi

if [ "$sanitize" -eq 1 ]; then
    build=build-asan
    # -O1 keeps the sanitized tests fast enough; asserts stay on (no -DNDEBUG).
    config=(-DTESSERA_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
        "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g")
    # Generated kernels are never sanitized (only the library and the tests are), so the
    # kernels the normal build's tests compiled are reused rather than compiled again.
    if [ -d build/kcache ]; then
        config+=("-DTESSERA_TEST_KERNEL_CACHE=$root/build/kcache")
    fi
    # Ours first, so that options already in the environment win.
    export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
else
    build=build
    config=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
fi

cmake -S . -B "$build" -DTESSERA_BUILD_TESTS=ON "${config[@]}"
cmake --build "$build" -j "$(nproc)"
cd "$build"
# --no-tests=error: a suite that registered nothing is a failure, not a pass.
ctest --output-on-failure -j2 --no-tests=error "${ctest_args[@]}"
