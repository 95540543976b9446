# The trace-parser fuzz target (tests/fuzz/fuzz_trace.c) as a plain replay program: every
# compiler builds it, and CTest feeds it the seed corpus (under ASan/UBSan in a
# TESSERA_SANITIZE build). tests/fuzz/run-fuzz.sh builds the libFuzzer version with clang.
add_executable(fuzz_trace_replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_trace.c)
target_compile_definitions(fuzz_trace_replay PRIVATE TE_FUZZ_REPLAY=1)
target_link_libraries(fuzz_trace_replay PRIVATE tessera)
add_test(NAME fuzz_trace_replay COMMAND fuzz_trace_replay
         ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus_trace)
set_tests_properties(fuzz_trace_replay PROPERTIES LABELS schedule TIMEOUT 60)
