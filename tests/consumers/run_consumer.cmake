# Builds and runs tests/consumers/project against specdec in one MODE.
# Invoked by CTest: cmake -DMODE=... -DSOURCE=... -DBUILD=... -DEXPECT_CPU=... [-DOPTIMIZATION=-O1] -P run_consumer.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "command failed (${code}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

set(work ${BUILD}/consumer-${MODE})
file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${work})
# specdec::cpu is compiled and run through the installed package only (the
# mode most likely to break: installed headers and exported targets); the
# other modes check that the target is there.
set(build_cpu OFF)
if(MODE STREQUAL "find_package")
  set(build_cpu ${EXPECT_CPU})
endif()
set(args -DSPECDEC_CONSUME=${MODE} -DSPECDEC_EXPECT_CPU=${EXPECT_CPU} -DSPECDEC_BUILD_CPU_CONSUMER=${build_cpu}
         -DCMAKE_BUILD_TYPE=Release)
# The consumer programs are run once, like the examples: the build's
# SPECDEC_PROGRAM_OPTIMIZATION (scripts/test.sh: -O1) serves them too.
if(OPTIMIZATION)
  list(APPEND args "-DCMAKE_CXX_FLAGS_RELEASE=${OPTIMIZATION} -DNDEBUG")
endif()

if(MODE STREQUAL "find_package")
  # Install the package as a user would: a fresh configure of the source tree
  # with the default options (tests, benchmarks, examples and tools enabled),
  # then `cmake --install` WITHOUT building anything. A header-only library
  # must install from an unbuilt tree: headers and CMake package, no programs.
  run(${CMAKE_COMMAND} -S ${SOURCE} -B ${work}/specdec-build -DSPECDEC_CUDA=OFF)
  run(${CMAKE_COMMAND} --install ${work}/specdec-build --prefix ${work}/prefix)
  foreach(installed include/specdec/specdec.hpp include/specdec/cpu.hpp
                    share/cmake/specdec/specdecConfig.cmake share/cmake/specdec/specdecTargets.cmake)
    if(NOT EXISTS ${work}/prefix/${installed})
      message(FATAL_ERROR "cmake --install of an unbuilt tree did not install ${installed}")
    endif()
  endforeach()
  if(EXISTS ${work}/prefix/bin)
    message(FATAL_ERROR "cmake --install installed programs by default (${work}/prefix/bin): tools need SPECDEC_INSTALL_TOOLS")
  endif()
  list(APPEND args -DCMAKE_PREFIX_PATH=${work}/prefix)
elseif(MODE STREQUAL "add_subdirectory")
  list(APPEND args -DSPECDEC_SOURCE=${SOURCE} -DSPECDEC_CUDA=OFF)
elseif(MODE STREQUAL "fetch_content")
  # Pack the package's files into an archive and let FetchContent download it by URL.
  run(${CMAKE_COMMAND} -E chdir ${SOURCE} ${CMAKE_COMMAND} -E tar czf ${work}/specdec.tar.gz
      CMakeLists.txt LICENSE include cmake)
  list(APPEND args -DSPECDEC_ARCHIVE=file://${work}/specdec.tar.gz -DSPECDEC_CUDA=OFF)
endif()

run(${CMAKE_COMMAND} -S ${SOURCE}/tests/consumers/project -B ${work}/build ${args})
run(${CMAKE_COMMAND} --build ${work}/build)
run(${work}/build/consumer)
if(build_cpu)
  if(NOT EXISTS ${work}/build/consumer_cpu)
    message(FATAL_ERROR "specdec::cpu was expected but the consumer_cpu program was not built")
  endif()
  run(${work}/build/consumer_cpu)
endif()
message(STATUS "consumer via ${MODE}: ok")
