# Extra CMake for the tuning database tests (included by tests/CMakeLists.txt, which already
# made test_tuning_db*.c into CTest executables).

# The CLI test runs the real `tessera` binary.
if(TARGET test_tuning_db_cli)
  target_compile_definitions(test_tuning_db_cli PRIVATE
                             TESSERA_CLI="$<TARGET_FILE:tessera_cli>")
  add_dependencies(test_tuning_db_cli tessera_cli)
endif()
# The documentation test runs every SQL snippet of docs/TUNING_DB.md.
if(TARGET test_tuning_db_docs)
  target_compile_definitions(test_tuning_db_docs PRIVATE
                             TESSERA_DOCS_TUNING_DB="${CMAKE_SOURCE_DIR}/docs/TUNING_DB.md")
endif()
# The tests write to temporary directories and fork writer processes; keep them off the
# kernel-compile cache and give the SIGKILL/concurrency test a sane limit.
foreach(t test_tuning_db test_tuning_db_files test_tuning_db_jsonl test_tuning_db_concurrency
          test_tuning_db_cli test_tuning_db_docs)
  if(TEST ${t})
    set_tests_properties(${t} PROPERTIES TIMEOUT 120 LABELS tuning_db)
  endif()
endforeach()

# The JSON-lines import fuzz target, as a plain replay program: every compiler builds it, and
# CTest feeds it the seed corpus (under ASan/UBSan in a TESSERA_SANITIZE build).
set(TESSERA_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
add_executable(fuzz_db_import_replay ${TESSERA_FUZZ_DIR}/fuzz_db_import.c)
target_compile_definitions(fuzz_db_import_replay PRIVATE TE_FUZZ_REPLAY=1)
target_include_directories(fuzz_db_import_replay PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(fuzz_db_import_replay PRIVATE tessera)
add_test(NAME fuzz_db_import_replay COMMAND fuzz_db_import_replay ${TESSERA_FUZZ_DIR}/corpus)
set_tests_properties(fuzz_db_import_replay PROPERTIES LABELS tuning_db TIMEOUT 60)

# The libFuzzer build: with clang as the C compiler, a normal target; otherwise, when a clang
# is installed, a custom command that compiles the importer's sources with it directly.
# tests/fuzz/run-fuzz.sh builds and runs the same thing without CMake.
file(GLOB TESSERA_TUNING_DB_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tuning_db/*.c)
set(TESSERA_FUZZ_SOURCES ${TESSERA_FUZZ_DIR}/fuzz_db_import.c ${TESSERA_TUNING_DB_SOURCES}
    ${CMAKE_SOURCE_DIR}/te/status.c ${CMAKE_SOURCE_DIR}/te/strbuf.c ${CMAKE_SOURCE_DIR}/te/ctx.c)
option(TESSERA_BUILD_FUZZ "Build the libFuzzer target for the tuning database importer" ON)
if(TESSERA_BUILD_FUZZ)
  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    add_executable(fuzz_db_import ${TESSERA_FUZZ_SOURCES})
    target_include_directories(fuzz_db_import PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_BINARY_DIR}/include
                               ${CMAKE_SOURCE_DIR})
    target_compile_options(fuzz_db_import PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_db_import PRIVATE -fsanitize=fuzzer,address,undefined)
    target_include_directories(fuzz_db_import PRIVATE ${JANSSON_INCLUDE_DIRS})
    target_link_libraries(fuzz_db_import PRIVATE ${SQLITE3_LINK_LIBRARIES} ${JANSSON_LINK_LIBRARIES} m)
  else()
    find_program(TESSERA_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
    if(TESSERA_CLANG)
      set(fuzz_bin ${CMAKE_CURRENT_BINARY_DIR}/fuzz_db_import)
      set(sqlite_cflags)
      foreach(d ${SQLITE3_INCLUDE_DIRS} ${JANSSON_INCLUDE_DIRS})
        list(APPEND sqlite_cflags -I${d})
      endforeach()
      add_custom_command(
        OUTPUT ${fuzz_bin}
        COMMAND ${TESSERA_CLANG} -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined
                -Wall -Wextra -Werror -I${CMAKE_SOURCE_DIR}/include -I${CMAKE_BINARY_DIR}/include
                -I${CMAKE_SOURCE_DIR}
                ${sqlite_cflags} ${TESSERA_FUZZ_SOURCES} ${SQLITE3_LINK_LIBRARIES} ${JANSSON_LINK_LIBRARIES} -lm
                -o ${fuzz_bin}
        DEPENDS ${TESSERA_FUZZ_SOURCES}
        COMMENT "Building the libFuzzer target fuzz_db_import with ${TESSERA_CLANG}"
        VERBATIM)
      add_custom_target(fuzz_db_import ALL DEPENDS ${fuzz_bin})
    endif()
  endif()
endif()
