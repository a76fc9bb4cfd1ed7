# tpserve_test(NAME SOURCES... LIBS ...): one GoogleTest program, registered with ctest.
function(tpserve_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT TPSERVE_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE TPSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "unit;${ARG_LABELS}")
endfunction()

# tpserve_tests(LIBS ... [SOURCES FILES... | GLOB PATTERNS...] [PREFIX P] [LABELS ...]
#               [COMPILE_OPTIONS ...]):
# one tpserve_test program per test source of the calling directory, named P<file stem>, each
# linked with LIBS. The sources are the files SOURCES lists, or else the files matching GLOB
# (paths relative to the directory; default *_test.cc), found again whenever one is added or
# removed.
function(tpserve_tests)
  cmake_parse_arguments(ARG "" "PREFIX" "SOURCES;GLOB;LIBS;LABELS;COMPILE_OPTIONS" ${ARGN})
  if(NOT TPSERVE_TESTS)
    return()
  endif()
  if(ARG_SOURCES)
    list(TRANSFORM ARG_SOURCES PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/ OUTPUT_VARIABLE sources)
  else()
    if(NOT ARG_GLOB)
      set(ARG_GLOB *_test.cc)
    endif()
    list(TRANSFORM ARG_GLOB PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/)
    file(GLOB sources CONFIGURE_DEPENDS ${ARG_GLOB})
  endif()
  foreach(source ${sources})
    get_filename_component(stem ${source} NAME_WE)
    tpserve_test(${ARG_PREFIX}${stem} SOURCES ${source} LIBS ${ARG_LIBS} LABELS ${ARG_LABELS})
    if(ARG_COMPILE_OPTIONS)
      target_compile_options(${ARG_PREFIX}${stem} PRIVATE ${ARG_COMPILE_OPTIONS})
    endif()
  endforeach()
endfunction()

# tpserve_warnings(TARGET): the project's warning set.
function(tpserve_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()

# tpserve_library(NAME SOURCES...): a static library, or (while a part has no sources yet)
# an empty interface library so the rest of the tree still configures.
function(tpserve_library name)
  if(ARGN)
    add_library(${name} STATIC ${ARGN})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    tpserve_warnings(${name})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
  endif()
endfunction()

# tpserve_link(NAME LIBS...): links publicly, whatever kind of library NAME is.
function(tpserve_link name)
  get_target_property(kind ${name} TYPE)
  if(kind STREQUAL "INTERFACE_LIBRARY")
    target_link_libraries(${name} INTERFACE ${ARGN})
  else()
    target_link_libraries(${name} PUBLIC ${ARGN})
  endif()
endfunction()
