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
