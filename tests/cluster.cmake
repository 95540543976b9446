# Tuning on a cluster (docs/CLUSTER.md): tests/cluster/test_cluster.c (shards, resume, merge by
# target; runs the real `tessera` binary), tests/cluster/slurm_test.sh (a real single-node
# Slurm running tools/cluster/submit.sh; skipped, exit code 77, where Slurm cannot start) and
# tests/cluster/k8s_manifest_test.sh (the Kubernetes manifest's pod commands, run here).
# Included by tests/CMakeLists.txt. COST: rough seconds on 2 cores, so that ctest -j2 starts
# them early.
add_executable(test_cluster ${CMAKE_CURRENT_SOURCE_DIR}/cluster/test_cluster.c
                            ${CMAKE_CURRENT_SOURCE_DIR}/testutil.c)
target_include_directories(test_cluster PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}
                           ${SQLITE3_INCLUDE_DIRS})
target_link_libraries(test_cluster PRIVATE tessera PkgConfig::CMOCKA ${SQLITE3_LINK_LIBRARIES})
target_compile_definitions(test_cluster PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
add_dependencies(test_cluster tessera_cli)
add_test(NAME test_cluster COMMAND test_cluster)
set_tests_properties(test_cluster PROPERTIES
  ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};OMP_NUM_THREADS=2"
  TIMEOUT 300 LABELS "cluster;tuner" COST 20)

add_test(NAME slurm_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/slurm_test.sh $<TARGET_FILE:tessera_cli>)
set_tests_properties(slurm_test PROPERTIES
  ENVIRONMENT "OMP_NUM_THREADS=1"
  SKIP_RETURN_CODE 77 TIMEOUT 240 LABELS cluster COST 30)

add_test(NAME k8s_manifest_test
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/k8s_manifest_test.sh
                 $<TARGET_FILE:tessera_cli>)
set_tests_properties(k8s_manifest_test PROPERTIES
  SKIP_RETURN_CODE 77 TIMEOUT 240 LABELS cluster COST 20)
