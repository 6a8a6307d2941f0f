# tessera_fuzz_test(NAME <test> BINARY <file> SOURCES ... INCLUDES ... DEPENDS ...)
# Builds a libFuzzer target with clang (-fsanitize=fuzzer,address,undefined) when clang is
# installed, and runs it for 20 s as a test. Its seeds are fuzz_corpus/<BINARY>/ beside the calling
# CMakeLists.txt, one folder per target so each holds inputs meaningful to that target alone; they
# are only read. What a run finds goes into the build tree (fuzz_corpus/<BINARY>/ and crash
# artifacts in the binary's folder), never into the sources. The sources are compiled by clang
# directly, outside the project's toolchain, because libFuzzer needs clang. Without clang nothing is
# built, and CMake says so.
#
# The seeds are a minimal set keeping every coverage edge of a larger corpus. To fold new inputs in
# (from the build tree, or a longer run), minimise again into an empty folder and replace the seeds:
#   mkdir /tmp/seeds && <binary> -set_cover_merge=1 -use_counters=0 /tmp/seeds <seeds> <found>
find_program(TESSERA_FUZZ_CXX NAMES clang++-14 clang++)

function(tessera_fuzz_test)
  cmake_parse_arguments(FUZZ "" "NAME;BINARY" "SOURCES;INCLUDES;DEPENDS" ${ARGN})
  if(NOT TESSERA_FUZZ_CXX)
    message(STATUS "clang++ not found: the fuzz test ${FUZZ_NAME} is not built")
    return()
  endif()
  set(binary ${CMAKE_CURRENT_BINARY_DIR}/${FUZZ_BINARY})
  set(seeds ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_corpus/${FUZZ_BINARY})
  set(found ${CMAKE_CURRENT_BINARY_DIR}/fuzz_corpus/${FUZZ_BINARY})
  if(NOT IS_DIRECTORY ${seeds})
    message(FATAL_ERROR "The fuzz test ${FUZZ_NAME} has no seed folder ${seeds}")
  endif()
  list(TRANSFORM FUZZ_INCLUDES PREPEND -I OUTPUT_VARIABLE include_flags)
  add_custom_command(
    OUTPUT ${binary}
    COMMAND ${TESSERA_FUZZ_CXX} -std=c++20 -O1 -g -Wall -Wextra -Werror
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all ${include_flags}
            ${FUZZ_SOURCES} -o ${binary}
    DEPENDS ${FUZZ_SOURCES} ${FUZZ_DEPENDS}
    COMMENT "Building the fuzzer ${FUZZ_BINARY} with ${TESSERA_FUZZ_CXX}"
    VERBATIM)
  add_custom_target(${FUZZ_BINARY}_fuzzer ALL DEPENDS ${binary})
  file(MAKE_DIRECTORY ${found})
  # libFuzzer writes new inputs into the first corpus folder only: the build tree's.
  add_test(NAME ${FUZZ_NAME}
           COMMAND ${binary} -max_total_time=20 -rss_limit_mb=2048
                   -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/${FUZZ_BINARY}- ${found} ${seeds}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(${FUZZ_NAME} PROPERTIES TIMEOUT 120)
endfunction()
