# test_tuple_reduce_ops runs a graph of the tuple-reducer operators fused with the shipped rules.
if(TARGET test_tuple_reduce_ops)
  target_compile_definitions(test_tuple_reduce_ops PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
