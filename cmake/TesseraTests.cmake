# How the test suites are built (docs/build.md has the figures):
#
# - One GoogleTest executable per component (tests/<component>/), not one per file: the headers
#   every test file includes (GoogleTest, nlohmann-json, the standard library) are precompiled once
#   per executable, and the suite links a handful of programs instead of seventy.
# - Test code is compiled without optimisation (-O0), in a sanitizer configuration too: it is
#   compiled far more often than it runs, and what it tests, the product's libraries, keeps the
#   configuration's flags. The programs the tests run (probes, hostile tenants) are not test code:
#   they keep the configuration's optimisation. Benchmark and tool harnesses whose measured code
#   is the product's libraries are built at -O1 (tessera_harness_flags).
# - TESSERA_TEST_SCOPE picks the tests. `all` (the release preset) builds and registers every test.
#   `sanitized` (the asan preset) builds only the tests of the code that handles native memory or
#   input a tenant or a file can forge (tessera_test_sources(SANITIZED ...) below) and the fuzzers,
#   and builds of the product only what those tests need: every test runs in at least one
#   configuration, and the tree is not compiled twice.

set(TESSERA_TEST_SCOPE "all" CACHE STRING
    "Which tests to build: all, or sanitized (the code handling native memory and untrusted input)")
set_property(CACHE TESSERA_TEST_SCOPE PROPERTY STRINGS all sanitized)
if(NOT TESSERA_TEST_SCOPE MATCHES "^(all|sanitized)$")
  message(FATAL_ERROR "TESSERA_TEST_SCOPE is '${TESSERA_TEST_SCOPE}': it must be all or sanitized")
endif()
if(TESSERA_TEST_SCOPE STREQUAL "sanitized" AND NOT TESSERA_SANITIZE)
  message(FATAL_ERROR "TESSERA_TEST_SCOPE=sanitized builds the tests for a sanitizer build: set "
                      "TESSERA_SANITIZE too (the asan preset does), or use TESSERA_TEST_SCOPE=all")
endif()

# True in the `all` scope: a test registered only there (timing, whole-agent scenarios, charts,
# images) runs in the release suite.
if(TESSERA_TEST_SCOPE STREQUAL "all")
  set(TESSERA_ALL_TESTS ON)
else()
  set(TESSERA_ALL_TESTS OFF)
endif()

# tessera_test_sources(<out-var> SANITIZED <files>... [ALL <files>...])
# The test sources of one executable in this scope: SANITIZED files in every scope, ALL files only
# in the `all` scope.
function(tessera_test_sources out)
  cmake_parse_arguments(ARG "" "" "SANITIZED;ALL" ${ARGN})
  set(sources ${ARG_SANITIZED})
  if(TESSERA_ALL_TESTS)
    list(APPEND sources ${ARG_ALL})
  endif()
  set(${out} ${sources} PARENT_SCOPE)
endfunction()

# The headers nearly every test file includes, precompiled once per test executable.
set(TESSERA_TEST_PRECOMPILED_HEADERS
    <gtest/gtest.h> <nlohmann/json.hpp> <algorithm> <atomic> <chrono> <cstdint> <cstring>
    <filesystem> <fstream> <functional> <map> <memory> <optional> <sstream> <string> <thread>
    <vector>)

# Test code's optimisation (see the top of this file). Under the sanitizers too: ASan and UBSan
# instrument -O0 code fully, and -O1 cost a heavy test file twice the compile time.
function(tessera_test_code_flags target)
  target_compile_options(${target} PRIVATE -O0)
endfunction()

# A benchmark's or tool's harness whose measured code is the product's (the libraries it links,
# which keep -O3): -O1 in an optimised configuration, as compiling its fixtures (the fake API
# server, cpp-httplib) at -O3 costs far more than it buys. A benchmark whose measured loop is in
# its own file keeps the configuration's flags. The debug configuration keeps -O0.
function(tessera_harness_flags target)
  target_compile_options(${target} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-O1>)
endfunction()

# tessera_test_executable(<target> SOURCES ... [LIBRARIES ...] [INCLUDES ...] [DEFINITIONS ...])
# A GoogleTest executable (gtest_main) of our warnings, test-code flags and precompiled headers.
function(tessera_test_executable target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;INCLUDES;DEFINITIONS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  find_package(nlohmann_json 3 REQUIRED)
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES} GTest::gtest_main
                                          nlohmann_json::nlohmann_json)
  target_include_directories(${target} PRIVATE ${ARG_INCLUDES} ${PROJECT_SOURCE_DIR}/tests/support)
  target_compile_definitions(${target} PRIVATE ${ARG_DEFINITIONS})
  target_precompile_headers(${target} PRIVATE ${TESSERA_TEST_PRECOMPILED_HEADERS})
  tessera_warnings(${target})
  tessera_test_code_flags(${target})
endfunction()

# GoogleTest filter patterns for whole suites, parameterised instances (Prefix/Suite) included.
function(tessera_suite_patterns out)
  set(patterns)
  foreach(suite IN LISTS ARGN)
    list(APPEND patterns "${suite}.*" "*/${suite}.*")
  endforeach()
  list(JOIN patterns ":" joined)
  set(${out} ${joined} PARENT_SCOPE)
endfunction()

# tessera_discover_tests(<target> PREFIX <prefix> [SUITES <suite>...] [EXCEPT <suite>...]
#                        [PROPERTIES ...])
# Registers the target's tests with ctest as <prefix><Suite>.<Test>: those of SUITES (every suite
# when none is given; a suite name may end in *), less those of EXCEPT. Calls with other suites give other properties
# (RUN_SERIAL for the timing suites) to parts of one executable.
function(tessera_discover_tests target)
  cmake_parse_arguments(ARG "" "PREFIX" "SUITES;EXCEPT;PROPERTIES" ${ARGN})
  set(filter "*")
  if(ARG_SUITES)
    tessera_suite_patterns(filter ${ARG_SUITES})
  endif()
  if(ARG_EXCEPT)
    tessera_suite_patterns(negative ${ARG_EXCEPT})
    set(filter "${filter}-${negative}")
  endif()
  gtest_discover_tests(${target} TEST_PREFIX "${ARG_PREFIX}" TEST_FILTER "${filter}"
                       DISCOVERY_TIMEOUT 60 PROPERTIES ${ARG_PROPERTIES})
endfunction()
