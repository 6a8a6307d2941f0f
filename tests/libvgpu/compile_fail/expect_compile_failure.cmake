# Compiles SOURCE twice with COMPILER (-fsyntax-only, FLAGS: a ;-list of -I/-std flags): with
# -DTESSERA_FIXTURE_CONTROL it must compile; as it is it must fail with an error whose text matches
# EXPECT (the misuse, named by the compiler). Used by libvgpu.index_spaces_compile_fail.
foreach(variable COMPILER SOURCE FLAGS EXPECT)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "expect_compile_failure.cmake: ${variable} is not set")
  endif()
endforeach()
execute_process(COMMAND ${COMPILER} ${FLAGS} -fsyntax-only -DTESSERA_FIXTURE_CONTROL ${SOURCE}
                RESULT_VARIABLE control_result OUTPUT_VARIABLE control_out
                ERROR_VARIABLE control_out)
if(NOT control_result EQUAL 0)
  message(FATAL_ERROR "the control build of ${SOURCE} failed, so the fixture proves nothing:\n"
                      "${control_out}")
endif()
execute_process(COMMAND ${COMPILER} ${FLAGS} -fsyntax-only ${SOURCE}
                RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(result EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but a LimitsIndex passed as a CudaOrdinal must not")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} failed to compile, but not with an error matching "
                      "'${EXPECT}':\n${out}")
endif()
message(STATUS "${SOURCE} fails to compile as it must:\n${out}")
