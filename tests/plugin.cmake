# test_plugin loads the example plugin (examples/plugin/gelu_gate.c) into the real CLI and into
# itself, and the broken ones of tests/plugin_fixture.c.
if(TARGET test_plugin)
  add_library(test_plugin_variant MODULE ${CMAKE_SOURCE_DIR}/examples/plugin/gelu_gate.c)
  target_compile_definitions(test_plugin_variant PRIVATE GELU_GATE_VARIANT=1)
  tessera_layer_includes(test_plugin_variant USES ${TESSERA_MODULES} PUBLIC_ONLY)
  set(fixture_defs "")
  foreach(k 1 2 3 4 5)
    add_library(test_plugin_fixture${k} MODULE ${CMAKE_CURRENT_SOURCE_DIR}/plugin_fixture.c)
    target_compile_definitions(test_plugin_fixture${k} PRIVATE FIXTURE=${k})
    tessera_layer_includes(test_plugin_fixture${k} USES ${TESSERA_MODULES} PUBLIC_ONLY)
    add_dependencies(test_plugin test_plugin_fixture${k})
    list(APPEND fixture_defs "PLUGIN_FIXTURE${k}=\"$<TARGET_FILE:test_plugin_fixture${k}>\"")
  endforeach()
  target_compile_definitions(test_plugin PRIVATE TESSERA_CLI="$<TARGET_FILE:tessera_cli>"
      PLUGIN_EXAMPLE="$<TARGET_FILE:tessera_gelu_gate>"
      PLUGIN_VARIANT="$<TARGET_FILE:test_plugin_variant>" ${fixture_defs})
  # The plugins take their symbols from the program that loads them.
  set_target_properties(test_plugin PROPERTIES ENABLE_EXPORTS ON)
  add_dependencies(test_plugin tessera_cli tessera_gelu_gate test_plugin_variant)
  set_tests_properties(test_plugin PROPERTIES TIMEOUT 600)
endif()
