#!/usr/bin/env bash
# Applies .clang-format to every tracked C file, or checks that it would change nothing.
#
#   bash tools/format.sh           # rewrite files in place
#   bash tools/format.sh --check   # list the files clang-format would change; exit 1 if any
#
# The check runs in CI (.ci/run): a formatting difference fails the build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=0
case ${1:-} in
--check) check=1 ;;
"") ;;
-h | --help)
    sed -n '2,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    exit 0
    ;;
*)
    echo "format.sh: unknown option '$1'" >&2
    exit 2
    ;;
esac

if ! command -v clang-format >/dev/null 2>&1; then
    echo "format.sh: clang-format is not installed (bash tools/install-deps.sh installs it)" >&2
    exit 1
fi

mapfile -t files < <(git ls-files '*.c' '*.h')
if [ "$check" -eq 0 ]; then
    clang-format -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version)):"
    printf '  %s\n' "${bad[@]}"
    echo "run 'bash tools/format.sh' and commit the result"
    exit 1
fi
echo "format.sh: ${#files[@]} files formatted as .clang-format says"
