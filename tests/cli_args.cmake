# test_cli_args unit-tests the CLI's shared parser, compiled in from tools/.
if(TARGET test_cli_args)
  target_sources(test_cli_args PRIVATE ${CMAKE_SOURCE_DIR}/tools/cli_args.c)
endif()
