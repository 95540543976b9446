# test_graph_bf16 fuses with the shipped rules (the mlp_gate_vnni rule puts the gate in one group).
if(TARGET test_graph_bf16)
  target_compile_definitions(test_graph_bf16 PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
