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
