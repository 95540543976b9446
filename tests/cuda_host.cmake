# The emitted CUDA run on the CPU (tests/test_cuda_host.c with tests/cuda_shim/): the test
# compiles kernels with a host C++ compiler found here (TESSERA_HOST_CXX; -DTESSERA_HOST_CXX=none
# turns the test off), and skips (77) without one or without its sanitizer runtimes.
if(TEST test_cuda_host)
  find_program(TESSERA_HOST_CXX NAMES g++ c++ clang++)
  if(NOT TESSERA_HOST_CXX)
    set(TESSERA_HOST_CXX "")
  endif()
  target_compile_definitions(test_cuda_host PRIVATE
    TSH_CXX="${TESSERA_HOST_CXX}" TSH_SHIM_DIR="${CMAKE_CURRENT_SOURCE_DIR}/cuda_shim")
  # COST: about 45 s of CPU, started early under ctest -j2
  set_tests_properties(test_cuda_host PROPERTIES TIMEOUT 300 LABELS cuda SKIP_RETURN_CODE 77
    COST 45)
endif()
# The test builds every kernel with -fsanitize=address,undefined itself; the sanitizer build of
# the suite (tools/test.sh --sanitize) would only run the same programs again under an
# instrumented driver, so it leaves this test out.
if(TEST test_cuda_host AND TESSERA_SANITIZE)
  set_tests_properties(test_cuda_host PROPERTIES DISABLED TRUE)
endif()
