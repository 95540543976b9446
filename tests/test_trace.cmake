# test_trace compiles the C that te_trace_to_c prints against the public headers (the source
# tree's and the generated version.h) and loads it into the test process, which therefore
# exports the library's symbols.
if(TARGET test_trace)
  target_compile_definitions(test_trace PRIVATE TT_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
                             TT_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set_target_properties(test_trace PROPERTIES ENABLE_EXPORTS ON)
endif()
