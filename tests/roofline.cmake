# Extra CMake for the roofline test (tests/test_roofline.c): it runs the real `tessera` binary
# (`tessera target --measure --quick`, `tessera db roofline --svg`).
if(TARGET test_roofline)
  target_compile_definitions(test_roofline PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_roofline tessera_cli)
  set_tests_properties(test_roofline PROPERTIES TIMEOUT 120 LABELS tuning_db)
endif()
