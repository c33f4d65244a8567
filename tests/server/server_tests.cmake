# specdec-server's tests, included by tools/CMakeLists.txt where the server is
# built. Each starts the server on 127.0.0.1 with a free port, mostly on the
# embedded synthetic pair (no model files), and stops it with SIGINT.
add_executable(specdec-server-reference ${CMAKE_CURRENT_LIST_DIR}/server_reference.cpp)
target_link_libraries(specdec-server-reference PRIVATE specdec::cpu)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(_server $<TARGET_FILE:specdec-server>)
  set(_reference $<TARGET_FILE:specdec-server-reference>)
  add_test(NAME "server: raw HTTP, bad input, greedy equals the library, 1-16 clients, seeded T = 1 among 15 others"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_server.py ${_server} ${_reference})
  add_test(NAME "server: disconnect mid-stream, --max-queue 503, --api-key 401, text prompts on a GGUF pair"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_server_limits.py ${_server}
                   ${PROJECT_SOURCE_DIR}/tests/fixtures)
  add_test(NAME "server: chat completions equal the library's chat template + greedy, stop strings, bad messages"
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_server_text.py ${_server} ${_reference}
                   ${PROJECT_SOURCE_DIR}/tests/fixtures)
  # The openai package, where it is installed (build/openai-venv, or the
  # interpreter's own); without it the test is reported as skipped.
  set(SPECDEC_OPENAI_PYTHON "${PROJECT_BINARY_DIR}/openai-venv/bin/python3" CACHE FILEPATH
      "Python interpreter with the openai package, for specdec-server's client test")
    set(_python ${Python3_EXECUTABLE})
  if(EXISTS ${SPECDEC_OPENAI_PYTHON})
    set(_python ${SPECDEC_OPENAI_PYTHON})
  endif()
  add_test(NAME "server: the openai Python client (completions, streaming, seed, logprobs, chat, stop strings)"
           COMMAND ${_python} ${CMAKE_CURRENT_LIST_DIR}/test_openai_client.py ${_server} ${_reference}
                   ${PROJECT_SOURCE_DIR}/tests/fixtures)
  if(TARGET specdec::llama_cpp)
    add_test(NAME "server: --engine llama.cpp, speculative = plain = specdec engine, chat template, 8 clients, seeded T = 1"
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_server_llama_cpp.py ${_server} ${_reference}
                     ${PROJECT_SOURCE_DIR}/tests/fixtures)
    set_tests_properties("server: --engine llama.cpp, speculative = plain = specdec engine, chat template, 8 clients, seeded T = 1"
                         PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  endif()
  # scripts/load_test.py, short: its two-minute run is in docs/serving.md. Memory
  # is not judged here (a sanitizer's allocator holds on to freed memory).
  add_test(NAME "server: load, 16 clients on 4 slots for 5 s: every request served, refused 503 or 400 as it should"
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/load_test.py --server ${_server} --clients 16
                   --slots 4 --max-queue 4 --seconds 5 --threads 1 --rss-growth 100)
  set_tests_properties("server: raw HTTP, bad input, greedy equals the library, 1-16 clients, seeded T = 1 among 15 others"
                       "server: disconnect mid-stream, --max-queue 503, --api-key 401, text prompts on a GGUF pair"
                       "server: chat completions equal the library's chat template + greedy, stop strings, bad messages"
                       "server: the openai Python client (completions, streaming, seed, logprobs, chat, stop strings)"
                       "server: load, 16 clients on 4 slots for 5 s: every request served, refused 503 or 400 as it should"
                       PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
else()
  message(STATUS "specdec-server: its tests need Python 3 (not found)")
endif()
foreach(case "--engine llama.cpp with the synthetic pair|--engine llama.cpp --synthetic"
             "-ngl without --engine llama.cpp|--synthetic -ngl 4" "unknown flag|--synthetic --no-such-flag"
             "no model|-np 2" "a port beyond 65535|--synthetic --port 4294967376"
             "a target without a draft|-m x.gguf" "non-numeric slots|--synthetic -np many"
             "an unknown chat template|-m x.gguf -md y.gguf --chat-template llama2"
             "a chat template on the synthetic pair|--synthetic --chat-template chatml")
  string(FIND "${case}" "|" bar)
  string(SUBSTRING "${case}" 0 ${bar} name)
  math(EXPR bar "${bar} + 1")
  string(SUBSTRING "${case}" ${bar} -1 arguments)
  string(REPLACE " " ";" arguments "${arguments}")
  add_test(NAME "server: ${name}: exits with code 2"
           COMMAND ${CMAKE_COMMAND} -DBENCH=$<TARGET_FILE:specdec-server> -DEXPECTED_CODE=2 "-DARGS=${arguments}"
                   -P ${PROJECT_SOURCE_DIR}/benchmarks/expect_exit_code.cmake)
  set_tests_properties("server: ${name}: exits with code 2" PROPERTIES TIMEOUT 30)
endforeach()
