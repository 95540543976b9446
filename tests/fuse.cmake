# test_fuse reads the shipped rules (rules/*.rules) and runs the real `tessera fuse`.
if(TARGET test_fuse)
  target_compile_definitions(test_fuse PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules"
                             TE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                             TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_fuse tessera_cli)
endif()
# test_fuse_attention fuses the rewritten graphs with the shipped CPU rules.
if(TARGET test_fuse_attention)
  target_compile_definitions(test_fuse_attention PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
