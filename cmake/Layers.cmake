# The module layering, enforced by the build (docs/ARCHITECTURE.md draws the same graph).
#
# Every module is an object library whose sources see only
#   - the private headers of the module itself and of the modules it USES (as "te/internal.h",
#     "schedule/passes.h", ...), and
#   - the public headers (include/tessera/*.h) that belong to those modules,
# through a directory of symbolic links made for it under ${CMAKE_BINARY_DIR}/layers/<module>.
# An upward include (te -> schedule, schedule -> backends, backends -> autotune, the CLI -> a
# private header) therefore fails to compile with "No such file or directory".
#
# tessera_module(NAME DIRS <dir>... USES <module>... HEADERS <public header>...)
#   declares a module; its sources are every .c under DIRS. Modules must be declared after
#   the modules they use.
# tessera_layer_includes(<target> USES <module>... [PUBLIC_ONLY] [EXTRA_DIRS <dir>...])
#   gives another target (the CLI, examples) the same kind of restricted view: with
#   PUBLIC_ONLY only the modules' public headers (and the umbrella tessera.h), plus the
#   target's own EXTRA_DIRS (the CLI's "tools/cli.h").

set(TESSERA_MODULES "")

# Makes (once per configure) the link directory for a consumer that may use `uses`, and returns
# its path in `out`. With public_only, no module directory is linked: only public headers.
function(tessera_make_layer name uses public_only extra out)
    set(dir ${CMAKE_BINARY_DIR}/layers/${name})
    file(REMOVE_RECURSE ${dir})
    file(MAKE_DIRECTORY ${dir}/tessera)
    foreach(d IN LISTS extra)
        file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${d} ${dir}/${d} SYMBOLIC)
    endforeach()
    if(public_only)
        file(CREATE_LINK ${CMAKE_SOURCE_DIR}/include/tessera.h ${dir}/tessera.h SYMBOLIC)
    endif()
    foreach(m IN LISTS uses)
        if(NOT public_only)
            foreach(d IN LISTS TESSERA_MODULE_${m}_DIRS)
                get_filename_component(top ${d} NAME)
                if(NOT EXISTS ${dir}/${top})
                    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${d} ${dir}/${top} SYMBOLIC)
                endif()
            endforeach()
        endif()
        foreach(h IN LISTS TESSERA_MODULE_${m}_HEADERS)
            if(EXISTS ${CMAKE_SOURCE_DIR}/include/tessera/${h})
                file(CREATE_LINK ${CMAKE_SOURCE_DIR}/include/tessera/${h} ${dir}/tessera/${h}
                     SYMBOLIC)
            elseif(EXISTS ${CMAKE_BINARY_DIR}/include/tessera/${h})
                file(CREATE_LINK ${CMAKE_BINARY_DIR}/include/tessera/${h} ${dir}/tessera/${h}
                     SYMBOLIC)
            else()
                message(FATAL_ERROR "module ${m}: public header tessera/${h} does not exist")
            endif()
        endforeach()
    endforeach()
    set(${out} ${dir} PARENT_SCOPE)
endfunction()

# Every module that `uses` reaches, directly or through the modules it uses.
function(tessera_closure uses out)
    set(all "")
    foreach(m IN LISTS uses)
        if(NOT DEFINED TESSERA_MODULE_${m}_CLOSURE)
            message(FATAL_ERROR "module '${m}' is used before it is declared")
        endif()
        list(APPEND all ${TESSERA_MODULE_${m}_CLOSURE})
    endforeach()
    list(REMOVE_DUPLICATES all)
    set(${out} ${all} PARENT_SCOPE)
endfunction()

function(tessera_module name)
    cmake_parse_arguments(M "" "" "DIRS;USES;HEADERS" ${ARGN})
    set(TESSERA_MODULE_${name}_DIRS ${M_DIRS} CACHE INTERNAL "")
    set(TESSERA_MODULE_${name}_HEADERS ${M_HEADERS} CACHE INTERNAL "")
    tessera_closure("${M_USES}" closure)
    list(PREPEND closure ${name})
    set(TESSERA_MODULE_${name}_CLOSURE ${closure} CACHE INTERNAL "")
    set(globs "")
    foreach(d IN LISTS M_DIRS)
        list(APPEND globs ${CMAKE_SOURCE_DIR}/${d}/*.c)
    endforeach()
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${globs})
    tessera_make_layer(${name} "${closure}" FALSE "" layer)
    add_library(tessera_${name} OBJECT ${sources})
    set_target_properties(tessera_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_include_directories(tessera_${name} PRIVATE ${layer})
    target_compile_definitions(tessera_${name} PRIVATE TE_VERSION_STRING="${PROJECT_VERSION}"
                               TE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
    target_link_libraries(tessera_${name} PRIVATE OpenMP::OpenMP_C Threads::Threads)
    target_include_directories(tessera_${name} PRIVATE ${SQLITE3_INCLUDE_DIRS} ${JANSSON_INCLUDE_DIRS})
    set(TESSERA_MODULES ${TESSERA_MODULES} ${name} PARENT_SCOPE)
endfunction()

function(tessera_layer_includes target)
    cmake_parse_arguments(L "PUBLIC_ONLY" "" "USES;EXTRA_DIRS" ${ARGN})
    tessera_closure("${L_USES}" closure)
    tessera_make_layer(${target} "${closure}" ${L_PUBLIC_ONLY} "${L_EXTRA_DIRS}" layer)
    target_include_directories(${target} PRIVATE ${layer})
endfunction()
