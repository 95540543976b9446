# test_graph_cli runs the real `tessera run` and `tessera tune --graph` with the shipped rules.
if(TARGET test_graph_cli)
  target_compile_definitions(test_graph_cli PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules"
                             TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_graph_cli tessera_cli)
endif()

# test_model_cli runs `tessera run/tune/gen MODEL.onnx` on the model examples/onnx_model.c
# writes, and compiles the runner `tessera gen` writes with cc.
if(TARGET test_model_cli)
  target_compile_definitions(test_model_cli PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>"
                             EXAMPLE_ONNX_MODEL="$<TARGET_FILE:example_onnx_model>")
  add_dependencies(test_model_cli tessera_cli example_onnx_model)
  set_tests_properties(test_model_cli PROPERTIES TIMEOUT 600 LABELS graph)
endif()

# The .npy reader's fuzz target (tests/fuzz/fuzz_npy.c) as a plain replay program over its seed
# corpus; with clang and libFuzzer it is a fuzz target like the others.
add_executable(fuzz_npy_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_npy.c)
target_compile_definitions(fuzz_npy_replay PRIVATE TE_FUZZ_REPLAY=1)
target_link_libraries(fuzz_npy_replay PRIVATE tessera)
add_test(NAME fuzz_npy_replay COMMAND fuzz_npy_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus_npy)
set_tests_properties(fuzz_npy_replay PROPERTIES LABELS graph TIMEOUT 60)
