# Programs written for the CUDA runtime API, built by nvcc as a tenant builds them (nvcc links the
# static runtime by default; RUNTIME shared links libcudart.so). The project itself compiles no CUDA
# language code: these are test programs, run on the simulated GPU and, where one is lent, on a
# real one, so they target the H200's architecture (sm_90, with its PTX for newer GPUs).
#
#   tessera_nvcc_program(<target> SOURCE <file.cu> [RUNTIME static|shared] [FLAGS ...]
#                        [LIBRARIES cublas ...])
# builds ${CMAKE_CURRENT_BINARY_DIR}/programs/<target>; the target's TESSERA_PROGRAM property is its path.
find_program(TESSERA_NVCC nvcc HINTS ${CUDAToolkit_BIN_DIR} REQUIRED)
set(TESSERA_NVCC_ARCH sm_90 CACHE STRING "GPU architecture of the runtime-API test programs")

function(tessera_nvcc_program target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "SOURCE;RUNTIME" "FLAGS;LIBRARIES")
  if(NOT arg_RUNTIME)
    set(arg_RUNTIME static)
  endif()
  set(source ${CMAKE_CURRENT_SOURCE_DIR}/${arg_SOURCE})
  set(output ${CMAKE_CURRENT_BINARY_DIR}/programs/${target})
  set(libraries)
  foreach(library IN LISTS arg_LIBRARIES)
    list(APPEND libraries -l${library})
  endforeach()
  add_custom_command(
    OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/programs
    COMMAND ${TESSERA_NVCC} -arch=${TESSERA_NVCC_ARCH} -O2 -std=c++17 -cudart ${arg_RUNTIME}
            -Xcompiler=-Wall,-Wextra,-Werror ${arg_FLAGS} -o ${output} ${source}
            -L${CUDAToolkit_LIBRARY_DIR} ${libraries}
    DEPENDS ${source}
    COMMENT "nvcc ${arg_SOURCE} -> ${target} (${arg_RUNTIME} runtime ${arg_FLAGS})"
    VERBATIM)
  add_custom_target(${target} ALL DEPENDS ${output})
  set_target_properties(${target} PROPERTIES TESSERA_PROGRAM ${output})
endfunction()
