# Extra CMake for `tessera gen` (included by tests/CMakeLists.txt, which already made
# tests/test_gen.c a CTest executable).

# test_gen runs the real `tessera` binary for its command-line cases and compiles what it
# writes with the system compiler (and nvcc when installed).
if(TARGET test_gen)
  target_compile_definitions(test_gen PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_gen tessera_cli)
  set_tests_properties(test_gen PROPERTIES TIMEOUT 300 LABELS gen)
endif()

# The consumer project: Tessera writes a database and reference data (gen_consumer_prep),
# `tessera gen` writes kernels, and tests/gen_consumer builds and checks them with plain cc and
# no Tessera include path or library (tests/gen_consumer/run.sh).
add_executable(gen_consumer_prep ${CMAKE_CURRENT_SOURCE_DIR}/gen_consumer/prep.c)
target_link_libraries(gen_consumer_prep PRIVATE tessera)
target_include_directories(gen_consumer_prep PRIVATE ${CMAKE_SOURCE_DIR})
add_test(NAME gen_consumer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gen_consumer/run.sh
                 $<TARGET_FILE:tessera_cli> $<TARGET_FILE:gen_consumer_prep>
                 ${CMAKE_CURRENT_BINARY_DIR}/gen_consumer ${OPENBLAS_INCLUDE} ${OPENBLAS_LIB})
set_tests_properties(gen_consumer PROPERTIES TIMEOUT 300 LABELS gen
  ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};TESSERA_DB=")
