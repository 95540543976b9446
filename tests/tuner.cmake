# Extra CMake for the tuner tests (included by tests/CMakeLists.txt, which already made
# test_tuner*.c into CTest executables).

# test_tuner runs the real `tessera` binary for its command-line cases.
foreach(t test_tuner test_tuner_claims test_cc_kill)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
    add_dependencies(${t} tessera_cli)
  endif()
endforeach()
foreach(t test_tuner test_tuner_measure test_tuner_claims test_cc_kill)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES TIMEOUT 300 LABELS tuner)
  endif()
endforeach()
