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

# The emulated GPU (tests/cuda_emu/): a CUDA driver and an NVRTC wrapper that run the emitted
# CUDA C++ as host code with tests/cuda_shim/ (TESSERA_LIBCUDA / TESSERA_NVRTC point Tessera at
# them). Needs a host C++ compiler at test time (the driver compiles each module).
find_program(TESSERA_EMU_CXX NAMES g++ c++ clang++)
add_library(tessera_emu_cuda SHARED cuda_emu/emu_cuda.c)
target_compile_definitions(tessera_emu_cuda PRIVATE
  EMU_DEFAULT_SHIM_DIR="${CMAKE_CURRENT_SOURCE_DIR}/cuda_shim")
target_link_libraries(tessera_emu_cuda PRIVATE ${CMAKE_DL_LIBS})
add_library(tessera_emu_nvrtc SHARED cuda_emu/emu_nvrtc.c)
target_link_libraries(tessera_emu_nvrtc PRIVATE ${CMAKE_DL_LIBS})
# Sanitizer builds: the libraries are dlopen'ed by an instrumented process; keep them plain.
# Their functions are the driver's and NVRTC's exported ABI, declared by no header of ours.
foreach(t tessera_emu_cuda tessera_emu_nvrtc)
  target_compile_options(${t} PRIVATE -fno-sanitize=all -Wno-missing-prototypes)
  target_link_options(${t} PRIVATE -fno-sanitize=all)
endforeach()
# test_cuda's device half (every GPU template run and compared with the reference) on the
# emulated GPU: the emitted kernels execute, launched through the driver API as on a GPU.
if(TEST test_cuda AND TESSERA_EMU_CXX)
  add_test(NAME test_cuda_emulated COMMAND test_cuda)
  set_tests_properties(test_cuda_emulated PROPERTIES TIMEOUT 300 LABELS cuda
    ENVIRONMENT "TESSERA_LIBCUDA=$<TARGET_FILE:tessera_emu_cuda>;TESSERA_NVRTC=$<TARGET_FILE:tessera_emu_nvrtc>;EMU_CXX=${TESSERA_EMU_CXX};EMU_CACHE=${CMAKE_BINARY_DIR}/emu-cache;OMP_NUM_THREADS=2;TESSERA_TEST_REQUIRE_DEVICE=1")
  add_dependencies(test_cuda tessera_emu_cuda tessera_emu_nvrtc)
endif()
# `tessera tune --target cuda` measuring on the emulated GPU (children, checks, faults, records).
if(TESSERA_EMU_CXX)
  add_test(NAME tune_cuda_emulated
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tune_cuda_emulated.sh $<TARGET_FILE:tessera_cli>
                   $<TARGET_FILE:tessera_emu_cuda> $<TARGET_FILE:tessera_emu_nvrtc>)
  set_tests_properties(tune_cuda_emulated PROPERTIES TIMEOUT 300 LABELS cuda SKIP_RETURN_CODE 77
    ENVIRONMENT "EMU_CXX=${TESSERA_EMU_CXX};EMU_CACHE=${CMAKE_BINARY_DIR}/emu-cache")
endif()
