# Every example program is built and run as a test (quietly: no generated source printed).
foreach(src ${TESSERA_EXAMPLES})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME example_${name} COMMAND example_${name} --quiet)
  set_tests_properties(example_${name} PROPERTIES
    ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};OMP_NUM_THREADS=2" TIMEOUT 300)
endforeach()
