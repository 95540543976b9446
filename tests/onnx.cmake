# test_onnx writes its models with the protobuf-c code the build generates from onnx.proto
# (cmake/Onnx.cmake): it needs the generated header, and writes its files under the build tree.
if(TARGET test_onnx)
  add_dependencies(test_onnx tessera_onnx_pb)
  target_include_directories(test_onnx PRIVATE ${TESSERA_ONNX_PB_DIR} ${PROTOBUF_C_INCLUDE_DIRS})
  target_link_libraries(test_onnx PRIVATE ${PROTOBUF_C_LINK_LIBRARIES})
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/onnx_models)
  target_compile_definitions(test_onnx PRIVATE
    TE_ONNX_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/onnx_models"
    TE_FUZZ_ONNX_CORPUS="${CMAKE_SOURCE_DIR}/tests/fuzz/corpus_onnx")
  set_tests_properties(test_onnx PROPERTIES LABELS onnx)
endif()

# `tessera import` on the models test_onnx writes: a good one (the graph it writes must load
# and pass `tessera fuse --check`), and a bad one (exit status 1, the unsupported ops listed).
if(TARGET test_onnx)
  set_tests_properties(test_onnx PROPERTIES FIXTURES_SETUP onnx_models)
  set(models ${CMAKE_CURRENT_BINARY_DIR}/onnx_models)
  add_test(NAME onnx_cli_import
           COMMAND sh -c "cd '${models}' && '$<TARGET_FILE:tessera_cli>' import mlp_gelu.onnx --shape batch=2 -o mlp.graph && '$<TARGET_FILE:tessera_cli>' fuse mlp.graph --check")
  set_tests_properties(onnx_cli_import PROPERTIES FIXTURES_REQUIRED onnx_models LABELS onnx
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};TESSERA_RULES=${CMAKE_SOURCE_DIR}/rules/cpu.rules"
    PASS_REGULAR_EXPRESSION "outputs.*y f32\\[2,3\\].*all outputs match")
  # Models with int64 and bool inputs: --check fills them (gather indices within the axis).
  add_test(NAME onnx_cli_import_int_inputs
           COMMAND sh -c "cd '${models}' && '$<TARGET_FILE:tessera_cli>' import compare_ops.onnx -o cmp.graph && '$<TARGET_FILE:tessera_cli>' fuse cmp.graph --check && '$<TARGET_FILE:tessera_cli>' import index_ops.onnx -o ix.graph && '$<TARGET_FILE:tessera_cli>' fuse ix.graph --check")
  set_tests_properties(onnx_cli_import_int_inputs PROPERTIES FIXTURES_REQUIRED onnx_models
    LABELS onnx
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};TESSERA_RULES=${CMAKE_SOURCE_DIR}/rules/cpu.rules"
    PASS_REGULAR_EXPRESSION "ids i64\\[2,6\\].*flag u8\\[2,6\\].*equal.*all outputs match.*ids i64\\[3\\].*gather.*all outputs match"
    FAIL_REGULAR_EXPRESSION "FAILED|fills")
  # `tessera fuse` on the model itself: imported, optimized, planned and checked.
  add_test(NAME onnx_cli_fuse_model
           COMMAND tessera_cli fuse ${models}/mlp_gelu.onnx --shape batch=2 --check)
  set_tests_properties(onnx_cli_fuse_model PROPERTIES FIXTURES_REQUIRED onnx_models LABELS onnx
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};TESSERA_RULES=${CMAKE_SOURCE_DIR}/rules/cpu.rules"
    PASS_REGULAR_EXPRESSION "check: [0-9]+ kernels, all outputs match")
  add_test(NAME onnx_cli_import_refused
           COMMAND sh -c "'$<TARGET_FILE:tessera_cli>' import '${models}/unknown_op.onnx' -o '${models}/unknown.graph'; echo rc=$?")
  set_tests_properties(onnx_cli_import_refused PROPERTIES FIXTURES_REQUIRED onnx_models
    LABELS onnx PASS_REGULAR_EXPRESSION "FooBar \\(node 'foo_1'\\), LSTM \\(node 'lstm_0'\\).*rc=1")
endif()

# The ONNX import fuzz target (tests/fuzz/fuzz_onnx_import.c) as a plain replay program over
# its committed seed corpus (models test_onnx writes; regenerate them with
# TE_ONNX_WRITE_CORPUS=tests/fuzz/corpus_onnx build/tests/test_onnx). tests/fuzz/run-fuzz.sh
# builds the libFuzzer version with clang.
add_executable(fuzz_onnx_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_onnx_import.c)
target_compile_definitions(fuzz_onnx_replay PRIVATE TE_FUZZ_REPLAY=1)
target_link_libraries(fuzz_onnx_replay PRIVATE tessera)
add_test(NAME fuzz_onnx_replay COMMAND fuzz_onnx_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus_onnx)
set_tests_properties(fuzz_onnx_replay PROPERTIES LABELS onnx TIMEOUT 60)

# The peer check against onnxruntime (tests/onnx_peer/): models built with the PyPI `onnx`
# package, expected outputs from onnxruntime, both in a venv under the build directory that
# run.sh creates the first time (pip needs PyPI once; later runs reuse it offline). Part of the
# default suite: skipped with a message (exit 77) when the venv cannot be made, e.g. without
# python3-venv or the network. The kernel cache under the build directory makes reruns quick.
add_executable(onnx_peer_check ${CMAKE_CURRENT_SOURCE_DIR}/onnx_peer/peer_check.c)
target_link_libraries(onnx_peer_check PRIVATE tessera)
add_test(NAME onnx_peer
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/onnx_peer/run.sh ${CMAKE_BINARY_DIR}
                 $<TARGET_FILE:onnx_peer_check>)
set_tests_properties(onnx_peer PROPERTIES LABELS "onnx;onnx_peer" SKIP_RETURN_CODE 77
  TIMEOUT 1200 ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};OMP_NUM_THREADS=1;TESSERA_PEER_JOBS=2")
