# Extra CMake for test_baselines (included by tests/CMakeLists.txt, which already made
# test_baselines.c a CTest executable): it tests the CLI's baseline code (tools/baselines.c)
# directly and runs the real `tessera bench`. It never sets OPENBLAS_CORETYPE.
if(TARGET test_baselines)
  target_sources(test_baselines PRIVATE ${CMAKE_SOURCE_DIR}/tools/baselines.c
                                        ${CMAKE_SOURCE_DIR}/tools/bl_vec.c)
  target_compile_definitions(test_baselines PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_baselines tessera_cli)
  set_tests_properties(test_baselines PROPERTIES TIMEOUT 300 LABELS bench)
endif()

# `tessera bench --only` with a name no workload starts with: a usage error naming the workloads.
add_test(NAME bench_only_unknown_refused COMMAND tessera_cli bench --only no_such_workload)
set_tests_properties(bench_only_unknown_refused PROPERTIES
  PASS_REGULAR_EXPRESSION "no workload's name starts with it; the names: matmul mlp_gate softmax"
  LABELS bench)

# `tessera bench --db` on a low-precision row: tune matmul_vnni with weights in blocks of 32
# columns (the row's layout) for a few trials, then the row is built from the database's best
# record and checked against oneDNN's product. Skipped where the CPU has no bf16 instructions.
add_test(NAME bench_lowp_from_db
         COMMAND bash -c "set -e; \"$1\" target | grep -q 'avx512_bf16\\|amx_bf16' || { echo 'SKIP: no bf16 instructions'; exit 0; }; \
d=$(mktemp -d); trap 'rm -rf $d' EXIT; \
\"$1\" tune matmul_vnni --shape m=512,n=3072,k=768,a_dtype=bf16,group=2,nb=32 --trials 4 --db $d/t.db >/dev/null; \
\"$1\" bench --db $d/t.db --only matmul_bf16 --threads 2 --reps 1 --json >$d/o.json 2>$d/e.txt; \
grep -q 'tuned: the database' $d/o.json; grep -q 'no record for matmul_vnni;a_dtype=bf16,group=2,k=1024' $d/e.txt; \
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; e=r[\"max_rel_err\"]; assert e != e or e < 1e-3, r' $d/o.json"
         bench_lowp_from_db $<TARGET_FILE:tessera_cli>)
set_tests_properties(bench_lowp_from_db PROPERTIES TIMEOUT 300 LABELS bench
                     ENVIRONMENT "TESSERA_CACHE_DIR=${CMAKE_BINARY_DIR}/kcache")
