# Installs the build into a temporary prefix and builds a consumer against it, through
# find_package and pkg-config (tests/install/run.sh).
add_test(NAME install_consumer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install/run.sh ${CMAKE_BINARY_DIR})
# A sanitized library needs the sanitizer runtime in the consumer as well.
set(consumer_flags "")
if(TESSERA_SANITIZE)
  set(consumer_flags "-fsanitize=address,undefined")
endif()
set_tests_properties(install_consumer PROPERTIES TIMEOUT 300
  ENVIRONMENT "TESSERA_CACHE_DIR=${TESSERA_TEST_KERNEL_CACHE};TESSERA_CONSUMER_FLAGS=${consumer_flags}")
