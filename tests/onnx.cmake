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
