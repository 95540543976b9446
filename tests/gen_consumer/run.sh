#!/usr/bin/env bash
# The consumer test of `tessera gen` (registered with CTest by tests/gen.cmake):
#
#   run.sh TESSERA PREP WORKDIR [BLAS_INCLUDE_DIR BLAS_LIBRARY]
#
# 1. PREP (gen_consumer_prep, Tessera's side) writes WORKDIR/tune.db with one record per
#    workload and WORKDIR/data/ with inputs and float64 reference outputs;
# 2. TESSERA gen writes the kernels (matmul, two matmul shapes behind one dispatcher, conv2d,
#    softmax, the MLP gate) into WORKDIR/kernels;
# 3. the consumer project (consumer.c + Makefile, copied to WORKDIR) builds them with plain cc
#    (-std=c99 -Wall -Wextra -Werror -pedantic; serial, and with -fopenmp -march=native), with
#    no Tessera include path or library, and checks every result (and matmul vs OpenBLAS);
#    then the same with clang when it is installed;
# 4. when nvcc is installed, the CUDA files of matmul and softmax compile with nvcc -c, and
#    with a GPU present a CUDA consumer runs them against the same reference values.
set -euo pipefail
tessera=$1 prep=$2 work=$3 blas_inc=${4:-} blas_lib=${5:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work"
mkdir -p "$work"
"$prep" "$work"
db=$work/tune.db k=$work/kernels

echo "== tessera gen"
"$tessera" gen matmul --shape m=64,n=48,k=40 --db "$db" -o "$k"
"$tessera" gen matmul --name matmul_multi --shape m=32,n=64,k=16 --shape m=24,n=40,k=72 \
    --db "$db" -o "$k" 2> "$work/multi.err"
cat "$work/multi.err"
grep -q "warning: matmul;k=72,m=24,n=40;f32: no record" "$work/multi.err" ||
    { echo "no warning for the shape without a record"; exit 1; }
"$tessera" gen conv2d --shape n=1,c=3,h=16,w=16,oc=8,kh=3,kw=3,pad=1 --db "$db" -o "$k"
"$tessera" gen softmax --shape m=32,n=100 --db "$db" -o "$k"
"$tessera" gen mlp_gate --shape m=16,n=64,k=48 --db "$db" -o "$k"
for f in "$k"/*.c "$k"/*.h; do
    if grep -q '#include.*tessera' "$f"; then echo "$f includes Tessera"; exit 1; fi
    grep -q "tessera gen" "$f" || { echo "$f has no regeneration command"; exit 1; }
done
grep -q "trial:" "$k/matmul.h" || { echo "matmul.h names no trial"; exit 1; }

echo "== the consumer: cc -std=c99 -Wall -Wextra -Werror -pedantic, no Tessera"
cp "$here/consumer.c" "$here/Makefile" "$work/"
blas=()
if [ -n "$blas_inc" ] && [ -n "$blas_lib" ] && [ -f "$blas_inc/cblas.h" ]; then
    blas=(BLAS_CFLAGS="-DHAVE_CBLAS -I$blas_inc" BLAS_LIBS="$blas_lib")
else
    echo "(OpenBLAS not given: the matmul is checked against the reference only)"
fi
make -s -C "$work" "${blas[@]}"
echo "-- serial, portable build"
"$work/consumer" "$work/data"
echo "-- OpenMP build, 2 threads"
OMP_NUM_THREADS=2 "$work/consumer_omp" "$work/data"
# The same sources with clang, when it is installed (its warnings differ from gcc's: -Wpsabi,
# unused static helpers; the generated prelude silences both).
if command -v clang > /dev/null; then
    echo "-- clang: the same two builds"
    make -s -C "$work" clean
    make -s -C "$work" CC=clang "${blas[@]}"
    "$work/consumer" "$work/data"
    OMP_NUM_THREADS=2 "$work/consumer_omp" "$work/data"
else
    echo "SKIP: clang not found; the consumer is built with cc only"
fi

echo "== CUDA"
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
    echo "SKIP: nvcc not found; the CUDA files are not compiled"
    exit 0
fi
cu=$work/cuda
"$tessera" gen matmul --shape m=64,n=48,k=40 --target cuda --sm 80 --db "$db" -o "$cu" --quiet
"$tessera" gen softmax --shape m=32,n=100 --target cuda --sm 80 --db "$db" -o "$cu" --quiet
"$nvcc" -O2 -arch=sm_80 -c "$cu/matmul.cu" -o "$cu/matmul.o"
"$nvcc" -O2 -arch=sm_80 -c "$cu/softmax.cu" -o "$cu/softmax.o"
echo "nvcc -c: matmul.cu and softmax.cu compile"
if ! nvidia-smi -L > /dev/null 2>&1; then
    echo "SKIP: no GPU; the CUDA kernels are compiled, not run"
    exit 0
fi
sm=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
"$tessera" gen matmul --shape m=64,n=48,k=40 --target cuda --sm "$sm" --db "$db" -o "$cu" --quiet
"$tessera" gen softmax --shape m=32,n=100 --target cuda --sm "$sm" --db "$db" -o "$cu" --quiet
"$nvcc" -O2 -arch=sm_"$sm" -I"$cu" -o "$cu/consumer_cuda" "$here/consumer_cuda.c" \
    "$cu/matmul.cu" "$cu/softmax.cu"
"$cu/consumer_cuda" "$work/data"
