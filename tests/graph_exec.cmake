# test_graph_exec fuses with the shipped rules.
if(TARGET test_graph_exec)
  target_compile_definitions(test_graph_exec PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
if(TARGET test_graph_user)
  target_compile_definitions(test_graph_user PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
# `tessera bench --graph` at test sizes: it runs both paths and exits 1 when their outputs
# differ by more than 1e-4 (no timing is checked).
foreach(g small_encoder_block small_resnet_block)
  add_test(NAME graph_bench_${g}
           COMMAND tessera_cli bench --graph ${CMAKE_SOURCE_DIR}/graph/examples/${g}.graph
                   --reps 1 --threads 1,2 --json)
endforeach()
