# tessera_fuzz_test(NAME <test> BINARY <file> SOURCES ... INCLUDES ... DEPENDS ...)
# Builds a libFuzzer target with clang (-fsanitize=fuzzer,address,undefined) when clang is
# installed, and runs it for 20 s as a test over its corpus folder (fuzz_corpus/ beside the
# calling CMakeLists.txt). The sources are compiled by clang directly, outside the project's
# toolchain, because libFuzzer needs clang. Without clang nothing is built, and CMake says so.
find_program(TESSERA_FUZZ_CXX NAMES clang++-14 clang++)

function(tessera_fuzz_test)
  cmake_parse_arguments(FUZZ "" "NAME;BINARY" "SOURCES;INCLUDES;DEPENDS" ${ARGN})
  if(NOT TESSERA_FUZZ_CXX)
    message(STATUS "clang++ not found: the fuzz test ${FUZZ_NAME} is not built")
    return()
  endif()
  set(binary ${CMAKE_CURRENT_BINARY_DIR}/${FUZZ_BINARY})
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
  file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fuzz_corpus)
  add_test(NAME ${FUZZ_NAME}
           COMMAND ${binary} -max_total_time=20 -rss_limit_mb=2048
                   ${CMAKE_CURRENT_BINARY_DIR}/fuzz_corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_corpus)
  set_tests_properties(${FUZZ_NAME} PROPERTIES TIMEOUT 120)
endfunction()
