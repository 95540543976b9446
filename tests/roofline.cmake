# Extra CMake for the roofline test (tests/test_roofline.c): it runs the real `tessera` binary
# (`tessera target --measure --quick`, `tessera db roofline --svg`).
if(TARGET test_roofline)
  target_compile_definitions(test_roofline PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_roofline tessera_cli)
  set_tests_properties(test_roofline PROPERTIES TIMEOUT 120 LABELS tuning_db)
endif()

# `tessera bench --roofline` at test sizes (the gemv rows of --quick, one thread), under quick
# peaks recorded first, and the plot parsed as XML.
find_program(TESSERA_PYTHON3 python3)
add_test(NAME bench_roofline
         COMMAND bash -c "set -e; d=$(mktemp -d); trap 'rm -rf $d' EXIT; \
\"$1\" target --measure --quick --db $d/p.db >/dev/null; \
TESSERA_DB=$d/p.db \"$1\" bench --only gemv --quick --threads 1 --roofline $d/r.svg >$d/out.txt; \
grep -q 'roofline (flops' $d/out.txt; grep -q 'gemv 96x768' $d/out.txt; \
grep -q '<circle' $d/r.svg; \
if [ -n \"$2\" ]; then \"$2\" -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' $d/r.svg; fi"
         bench_roofline $<TARGET_FILE:tessera_cli> "${TESSERA_PYTHON3}")
set_tests_properties(bench_roofline PROPERTIES TIMEOUT 300 LABELS bench
                     ENVIRONMENT "TESSERA_CACHE_DIR=${CMAKE_BINARY_DIR}/kcache;OMP_NUM_THREADS=2")
