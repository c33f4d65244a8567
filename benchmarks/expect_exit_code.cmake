# cmake -DBENCH=<exe> -DARGS=<;-list> -DEXPECTED_CODE=<n> -P expect_exit_code.cmake
# Runs the benchmark and fails unless it exits with EXPECTED_CODE; for a
# non-zero code it also requires a one-line message on stderr.
execute_process(COMMAND ${BENCH} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code STREQUAL EXPECTED_CODE)
  message(FATAL_ERROR "expected exit code ${EXPECTED_CODE}, got '${code}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT EXPECTED_CODE STREQUAL "0")
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" newline)
  if(err STREQUAL "" OR NOT newline EQUAL -1)
    message(FATAL_ERROR "expected a one-line error on stderr, got:\n${err}")
  endif()
  message(STATUS "exit code ${code}: ${err}")
endif()
