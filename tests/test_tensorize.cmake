# LeakSanitizer's stop-the-world tracer (gcc 12's libsanitizer) crashes with SIGSEGV at exit in
# a process that enabled AMX tile state (arch_prctl XTILEDATA: seen as "Tracer caught signal
# 11" after every cmocka test passed; the AMX signal frame is larger than the tracer's stack
# allows for). The tests below run AMX kernels on machines that have AMX, so under the
# sanitizers on such a machine they run without leak detection; AddressSanitizer and UBSan
# still check every access, and on machines without AMX (where these tests run the AVX-512 or
# plain kernels) the leak check stays. test_tensorize runs without it everywhere (it calls the
# AMX runtime's permission request on every machine that has the instructions).
set(TESSERA_HOST_AMX OFF)
if(EXISTS /proc/cpuinfo)
  file(STRINGS /proc/cpuinfo TESSERA_AMX_LINE REGEX "amx_tile" LIMIT_COUNT 1)
  if(TESSERA_AMX_LINE)
    set(TESSERA_HOST_AMX ON)
  endif()
endif()
if(TESSERA_SANITIZE)
  set(TESSERA_AMX_TESTS test_tensorize)
  if(TESSERA_HOST_AMX)
    list(APPEND TESSERA_AMX_TESTS test_graph_bf16 test_graph_int8 test_graph_cli bench_lowp_from_db)
  endif()
  foreach(t ${TESSERA_AMX_TESTS})
    if(TEST ${t})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
    endif()
  endforeach()
endif()
