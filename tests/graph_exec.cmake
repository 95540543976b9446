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
# Every product on oneDNN (matmuls with packed weights, the batched attention products, the
# convolutions with their layout reorders): the same 1e-4 agreement; and a bad --products.
foreach(g small_encoder_block small_resnet_block)
  add_test(NAME graph_bench_${g}_onednn_products
           COMMAND tessera_cli bench --graph ${CMAKE_SOURCE_DIR}/graph/examples/${g}.graph
                   --optimize --reps 1 --threads 1,2 --products onednn)
  set_tests_properties(graph_bench_${g}_onednn_products PROPERTIES
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE}" LABELS graph)
endforeach()
add_test(NAME graph_bench_bad_products_refused
         COMMAND tessera_cli bench --graph ${CMAKE_SOURCE_DIR}/graph/examples/small_resnet_block.graph
                 --products mkl)
set_tests_properties(graph_bench_bad_products_refused PROPERTIES
  PASS_REGULAR_EXPRESSION "--products takes fastest, openblas or onednn" LABELS graph)
# The optimized graph (the attention rewrite: the fused attention node against an unfused
# sgemm + softmax + sgemm baseline), and `tessera run --check` of it against the float64
# reference of the whole graph.
add_test(NAME graph_bench_small_encoder_block_optimized
         COMMAND tessera_cli bench --graph ${CMAKE_SOURCE_DIR}/graph/examples/small_encoder_block.graph
                 --optimize --reps 1 --threads 1,2 --json)
add_test(NAME graph_run_small_encoder_block_optimized_check
         COMMAND tessera_cli run ${CMAKE_SOURCE_DIR}/graph/examples/small_encoder_block.graph
                 --optimize --check --threads 1)
set_tests_properties(graph_bench_small_encoder_block_optimized
                     graph_run_small_encoder_block_optimized_check PROPERTIES
  ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE}" LABELS graph)
# A graph without an 'output' line is refused with a message that says so.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/no_outputs.graph "input x f32[4,8]\ny = relu(x)\nz = relu(y)\n")
add_test(NAME graph_run_no_outputs_refused
         COMMAND tessera_cli run ${CMAKE_CURRENT_BINARY_DIR}/no_outputs.graph)
set_tests_properties(graph_run_no_outputs_refused PROPERTIES
  PASS_REGULAR_EXPRESSION "the graph has no outputs" LABELS graph)
if(TARGET test_graph_select)
  target_compile_definitions(test_graph_select PRIVATE TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules")
endif()
# Under the sanitizers, the benchmarks' leak check at exit is off: GCC 12's LeakSanitizer
# crashes ("Tracer caught signal 11" after "DTLS ... at 0x0001...") while it reads the dynamic
# TLS that the dlopen'ed oneDNN gave an OpenMP worker thread (its convolution primitives at two
# threads do it every time). AddressSanitizer and UBSan still check every access of these runs,
# and the library's own graph tests (test_graph_exec, test_graph_user) keep the leak check.
if(TESSERA_SANITIZE)
  foreach(t graph_bench_small_encoder_block graph_bench_small_resnet_block
            graph_bench_small_encoder_block_onednn_products
            graph_bench_small_resnet_block_onednn_products
            graph_bench_small_encoder_block_optimized)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  endforeach()
endif()
