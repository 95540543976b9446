# test_default_schedule reads the example graphs and fuses them with the shipped rules.
if(TARGET test_default_schedule)
  target_compile_definitions(test_default_schedule PRIVATE
    TE_RULES_DIR="${CMAKE_SOURCE_DIR}/rules" TE_EXAMPLES_DIR="${CMAKE_SOURCE_DIR}/graph/examples")
endif()
