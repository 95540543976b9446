# test_graph_cli runs the real `tessera run` and `tessera tune --graph` with the shipped rules.
if(TARGET test_graph_cli)
  target_compile_definitions(test_graph_cli PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules"
                             TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_graph_cli tessera_cli)
endif()
