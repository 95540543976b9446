# Build-time C for ONNX's ModelProto: protoc-c (Debian protobuf-c-compiler) turns the onnx.proto
# of Debian's libonnx-dev into onnx.pb-c.c/.h under ${CMAKE_BINARY_DIR}/onnx_pb; the runtime is
# libprotobuf-c (libprotobuf-c-dev). Neither the schema nor the generated code is in the
# repository. tools/install-deps.sh installs all three packages.
find_program(PROTOC_C_EXECUTABLE NAMES protoc-c)
if(NOT PROTOC_C_EXECUTABLE)
  message(FATAL_ERROR "protoc-c not found: install Debian package protobuf-c-compiler "
                      "(bash tools/install-deps.sh)")
endif()
find_file(TESSERA_ONNX_PROTO NAMES onnx.proto PATHS /usr/include/onnx NO_DEFAULT_PATH)
if(NOT TESSERA_ONNX_PROTO)
  message(FATAL_ERROR "onnx.proto not found in /usr/include/onnx: install Debian package "
                      "libonnx-dev (bash tools/install-deps.sh)")
endif()
pkg_check_modules(PROTOBUF_C libprotobuf-c)
if(NOT PROTOBUF_C_FOUND)
  message(FATAL_ERROR "libprotobuf-c not found: install Debian package libprotobuf-c-dev "
                      "(bash tools/install-deps.sh)")
endif()
get_filename_component(TESSERA_ONNX_PROTO_DIR ${TESSERA_ONNX_PROTO} DIRECTORY)
set(TESSERA_ONNX_PB_DIR ${CMAKE_BINARY_DIR}/onnx_pb)
set(TESSERA_ONNX_PB_C ${TESSERA_ONNX_PB_DIR}/onnx.pb-c.c)
set(TESSERA_ONNX_PB_H ${TESSERA_ONNX_PB_DIR}/onnx.pb-c.h)
file(MAKE_DIRECTORY ${TESSERA_ONNX_PB_DIR})
add_custom_command(
  OUTPUT ${TESSERA_ONNX_PB_C} ${TESSERA_ONNX_PB_H}
  COMMAND ${PROTOC_C_EXECUTABLE} --c_out=${TESSERA_ONNX_PB_DIR} -I${TESSERA_ONNX_PROTO_DIR}
          ${TESSERA_ONNX_PROTO}
  DEPENDS ${TESSERA_ONNX_PROTO}
  COMMENT "protoc-c: generating the C for onnx.proto"
  VERBATIM)
add_custom_target(tessera_onnx_pb DEPENDS ${TESSERA_ONNX_PB_C} ${TESSERA_ONNX_PB_H})

# Compiles the generated code into `target` (the onnx module's object library) with the
# generated include directory private to it. Generated code gets its own relaxed warnings.
function(tessera_onnx_generated target)
  target_sources(${target} PRIVATE ${TESSERA_ONNX_PB_C})
  add_dependencies(${target} tessera_onnx_pb)
  target_include_directories(${target} PRIVATE ${TESSERA_ONNX_PB_DIR} ${PROTOBUF_C_INCLUDE_DIRS})
  set_source_files_properties(${TESSERA_ONNX_PB_C} PROPERTIES GENERATED TRUE
      COMPILE_OPTIONS "-Wno-error;-Wno-missing-prototypes;-Wno-strict-prototypes;-Wno-shadow;-Wno-unused-parameter")
endfunction()
