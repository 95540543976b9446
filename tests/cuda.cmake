# Extra CMake for the CUDA backend tests (included by tests/CMakeLists.txt, which already made
# test_cuda.c a CTest executable). test_cuda skips its NVRTC and device checks with a message
# when libnvrtc or libcuda.so.1 cannot be loaded; test_cuda_no_nvrtc runs it with NVRTC turned
# off, so the skip path is exercised on machines that do have the toolkit.
if(TEST test_cuda)
  set_tests_properties(test_cuda PROPERTIES TIMEOUT 180 LABELS cuda)
  add_test(NAME test_cuda_no_nvrtc COMMAND test_cuda)
  set_tests_properties(test_cuda_no_nvrtc PROPERTIES TIMEOUT 180 LABELS cuda
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};OMP_NUM_THREADS=2;TESSERA_NVRTC=off")
endif()

# `tessera tune OP --target cuda --dry-run`: the candidates of the GPU search spaces compile
# through NVRTC (skips where NVRTC cannot be loaded).
add_test(NAME tune_cuda_dry_run
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tune_cuda_dry_run.sh $<TARGET_FILE:tessera_cli>)
set_tests_properties(tune_cuda_dry_run PROPERTIES TIMEOUT 300 LABELS cuda SKIP_RETURN_CODE 77)
