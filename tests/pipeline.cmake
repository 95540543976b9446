# test_pipeline reads docs/ARCHITECTURE.md (whose pass table it checks against the code) and
# runs the real `tessera lower`.
if(TARGET test_pipeline)
  target_compile_definitions(test_pipeline PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>"
                             TE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_dependencies(test_pipeline tessera_cli)
endif()
