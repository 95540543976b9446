# The module layering (cmake/Layers.cmake) is enforced by the compiler: each test compiles one
# include line with exactly the include directories of one module and expects it to compile
# (a header of the module itself or of a module below) or to fail (a header above).
set(TE_LAYER_CASES
    "te|te/internal.h|ok"
    "te|tessera/te.h|ok"
    "te|schedule/passes.h|fail"
    "te|tessera/schedule.h|fail"
    "schedule|te/arith.h|ok"
    "schedule|backends/backend_impl.h|fail"
    "schedule|tessera/backend.h|fail"
    "backends|schedule/passes.h|ok"
    "backends|autotune/tune_impl.h|fail"
    "backends|tessera/tuner.h|fail"
    "tuning_db|schedule/sched_impl.h|fail"
    "autotune|backends/c/c_backend.h|ok"
    "autotune|gen/gen_impl.h|fail"
    "onnx|tessera/graph.h|ok"
    "onnx|tessera/onnx.h|ok"
    "onnx|gen/gen_impl.h|fail"
    "onnx|tessera/gen.h|fail"
    "graph|tessera/onnx.h|fail"
    "graph|onnx/onnx_internal.h|fail"
    "graph|tessera/gen.h|fail"
    "gen|tessera/graph.h|ok"
    "tessera_cli|onnx/onnx_internal.h|fail"
    "tessera_cli|tessera/onnx.h|ok"
    "tessera_cli|tessera.h|ok"
    "tessera_cli|te/internal.h|fail"
    "tessera_cli|autotune/tune_impl.h|fail")
foreach(case IN LISTS TE_LAYER_CASES)
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 layer)
  list(GET parts 1 header)
  list(GET parts 2 expect)
  string(MAKE_C_IDENTIFIER "layering_${layer}_includes_${header}" tname)
  add_test(NAME ${tname}
           COMMAND sh -c "printf '#include \"%s\"\\n' '${header}' | ${CMAKE_C_COMPILER} -std=c11 -fsyntax-only -I'${CMAKE_BINARY_DIR}/layers/${layer}' -I'${CMAKE_BINARY_DIR}/include' -x c -")
  set_tests_properties(${tname} PROPERTIES LABELS layering)
  if(expect STREQUAL "fail")
    # Refused because the header is out of reach, not for any other reason.
    set_tests_properties(${tname} PROPERTIES PASS_REGULAR_EXPRESSION "No such file or directory")
  endif()
endforeach()
