# LeakSanitizer's stop-the-world tracer (gcc 12's libsanitizer) crashes with SIGSEGV at exit in
# a process that enabled AMX tile state (arch_prctl XTILEDATA: seen here as "Tracer caught
# signal 11", every cmocka test passed before it). test_tensorize runs AMX
# kernels on machines that have AMX, so under the sanitizers it runs without leak detection;
# AddressSanitizer and UBSan still check it, and the leak checks of every other test stay.
if(TESSERA_SANITIZE AND TEST test_tensorize)
  set_tests_properties(test_tensorize PROPERTIES
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};OMP_NUM_THREADS=2;ASAN_OPTIONS=detect_leaks=0")
endif()
