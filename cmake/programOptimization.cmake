# Included by examples/, tools/ and benchmarks/: where SPECDEC_PROGRAM_OPTIMIZATION
# is set (scripts/test.sh sets -O1), the optimisation flag of this directory's
# programs, C++ and CUDA host code alike. The test command runs them once, for
# their output, and -O1 compiles them much faster than -O3 (docs/results.md,
# "The test command's time").
# Their timings are then not the library's: specdec-bench and specdec-server
# say so when they start (SPECDEC_PROGRAM_OPTIMIZATION_NOTE).
if(SPECDEC_PROGRAM_OPTIMIZATION)
  foreach(_specdec_lang CXX CUDA)
    foreach(_specdec_config RELEASE RELWITHDEBINFO MINSIZEREL DEBUG)
      set(_specdec_flags_var CMAKE_${_specdec_lang}_FLAGS_${_specdec_config})
      if(DEFINED ${_specdec_flags_var})
        string(REGEX REPLACE "(^| )-O[0-9sg]?( |$)" " " _specdec_flags "${${_specdec_flags_var}}")
        set(${_specdec_flags_var} "${_specdec_flags} ${SPECDEC_PROGRAM_OPTIMIZATION}")
      endif()
    endforeach()
  endforeach()
  add_compile_definitions(SPECDEC_PROGRAM_OPTIMIZATION_NOTE="${SPECDEC_PROGRAM_OPTIMIZATION}")
endif()
