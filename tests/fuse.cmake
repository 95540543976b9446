# test_fuse reads the shipped rules (rules/*.rules) and runs the real `tessera fuse`.
if(TARGET test_fuse)
  target_compile_definitions(test_fuse PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules"
                             TE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                             TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_fuse tessera_cli)
endif()
