# Extra CMake for the tuner tests (included by tests/CMakeLists.txt, which already made
# test_tuner*.c into CTest executables).

# test_tuner runs the real `tessera` binary for its command-line cases.
if(TARGET test_tuner)
  target_compile_definitions(test_tuner PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_tuner tessera_cli)
endif()
foreach(t test_tuner test_tuner_measure)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES TIMEOUT 300 LABELS tuner)
  endif()
endforeach()
