# test_graph_exec fuses with the shipped rules.
if(TARGET test_graph_exec)
  target_compile_definitions(test_graph_exec PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
if(TARGET test_graph_user)
  target_compile_definitions(test_graph_user PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
