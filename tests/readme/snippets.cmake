# Every ```cpp block of README.md and docs/*.md is compiled by the target
# specdec_doc_snippets (part of the default build, and run as the CTest test
# "docs: snippets compile"), so a snippet that no longer compiles fails the
# build. One translation unit per block, generated at configure time:
#
#   <!-- snippet: [words] [context=NAME] [body] -->   optional, the line right before the fence
#   ```cpp
#   ...
#   ```
#
# context=NAME: tests/readme/context/NAME.hpp is included first (the names a
#   fragment takes for granted: models, a prompt, a tokenizer). A context whose
#   text holds "snippet-needs: llama_cpp" (or cuda) makes its blocks compile
#   only where that target exists. Without context= the block must be a
#   complete translation unit.
# body: the block is statements; its #include lines go first and the rest is
#   wrapped in a function (compiled, never run).
# A #line directive points compiler messages at the markdown file and line.
# A fence with no language, or c++/cxx/cc, is an error: every other block must
# name its language (text, sh, cmake, ...).

set(_snippet_dir ${CMAKE_CURRENT_BINARY_DIR}/doc_snippets)
set(_snippet_context_dir ${CMAKE_CURRENT_SOURCE_DIR}/readme/context)
file(GLOB _snippet_docs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
list(PREPEND _snippet_docs ${PROJECT_SOURCE_DIR}/README.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_snippet_docs})

# Writes only when the text changed, so a reconfigure does not rebuild every snippet.
function(_specdec_write_if_changed path content)
  if(EXISTS ${path})
    file(READ ${path} _old)
    if(_old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE ${path} "${content}")
endfunction()

set(_snippet_sources)        # compiled everywhere
set(_snippet_llama_sources)  # need specdec::llama_cpp
set(_snippet_cuda_sources)   # need specdec::cuda
set(_snippet_errors)
set(_snippet_fence "```")
foreach(_doc IN LISTS _snippet_docs)
  file(RELATIVE_PATH _doc_rel ${PROJECT_SOURCE_DIR} ${_doc})
  string(MAKE_C_IDENTIFIER "${_doc_rel}" _doc_id)
  file(READ ${_doc} _text)
  set(_text "\n${_text}")    # every fence now follows a newline
  set(_consumed 0)           # characters of the original text before _rest
  set(_rest "${_text}")
  set(_count 0)
  while(TRUE)
    string(FIND "${_rest}" "\n${_snippet_fence}" _open)
    if(_open EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${_rest}" 0 ${_open} _before)
    math(EXPR _after_open "${_open} + 4")
    string(SUBSTRING "${_rest}" ${_after_open} -1 _rest)
    # The fence's language: the rest of its line.
    string(FIND "${_rest}" "\n" _eol)
    string(SUBSTRING "${_rest}" 0 ${_eol} _lang)
    string(STRIP "${_lang}" _lang)
    math(EXPR _after_eol "${_eol} + 1")
    string(SUBSTRING "${_rest}" ${_after_eol} -1 _rest)
    # The opening fence's line number (1-based, in the original file).
    string(SUBSTRING "${_text}" 0 ${_consumed} _prefix)
    string(APPEND _prefix "${_before}\n")
    string(REGEX MATCHALL "\n" _newlines "${_prefix}")
    list(LENGTH _newlines _fence_line)
    math(EXPR _consumed "${_consumed} + ${_after_open} + ${_after_eol}")
    # The block's body, up to the closing fence.
    string(FIND "${_rest}" "\n${_snippet_fence}" _close)
    if(_close EQUAL -1)
      list(APPEND _snippet_errors "${_doc_rel}:${_fence_line}: code block never closed")
      break()
    endif()
    string(SUBSTRING "${_rest}" 0 ${_close} _code)
    math(EXPR _after_close "${_close} + 4")
    string(SUBSTRING "${_rest}" ${_after_close} -1 _rest)
    string(FIND "${_rest}" "\n" _eol)
    if(_eol EQUAL -1)
      set(_rest "")
      math(EXPR _consumed "${_consumed} + ${_after_close}")
    else()
      string(SUBSTRING "${_rest}" ${_eol} -1 _rest)  # keep the newline: it precedes the next fence
      math(EXPR _consumed "${_consumed} + ${_after_close} + ${_eol}")
    endif()

    if(_lang STREQUAL "")
      list(APPEND _snippet_errors "${_doc_rel}:${_fence_line}: code block without a language (cpp, text, sh, cmake, ...)")
      continue()
    endif()
    if(_lang MATCHES "^(c\\+\\+|C\\+\\+|cxx|cc|CPP)$")
      list(APPEND _snippet_errors "${_doc_rel}:${_fence_line}: write C++ blocks as cpp, not ${_lang}, so that they are compiled")
      continue()
    endif()
    if(NOT _lang STREQUAL "cpp")
      continue()
    endif()

    # The marker: the last line before the fence.
    string(FIND "${_before}" "\n" _last_nl REVERSE)
    math(EXPR _last_start "${_last_nl} + 1")
    string(SUBSTRING "${_before}" ${_last_start} -1 _marker)
    set(_context "")
    set(_body OFF)
    if(_marker MATCHES "^<!-- snippet:")
      if(_marker MATCHES "context=([A-Za-z0-9_]+)")
        set(_context ${CMAKE_MATCH_1})
      endif()
      if(_marker MATCHES "[ :]body[ ]")
        set(_body ON)
      endif()
    endif()

    math(EXPR _count "${_count} + 1")
    math(EXPR _first_line "${_fence_line} + 1")
    set(_source "// Generated from ${_doc_rel}:${_fence_line} by tests/readme/snippets.cmake; edit the markdown.\n")
    set(_needs "")
    if(_context)
      set(_context_file ${_snippet_context_dir}/${_context}.hpp)
      if(NOT EXISTS ${_context_file})
        list(APPEND _snippet_errors "${_doc_rel}:${_fence_line}: context=${_context}: no file tests/readme/context/${_context}.hpp")
        continue()
      endif()
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_context_file})
      file(READ ${_context_file} _context_text)
      if(_context_text MATCHES "snippet-needs: (llama_cpp|cuda)")
        set(_needs ${CMAKE_MATCH_1})
      endif()
      string(APPEND _source "#include \"context/${_context}.hpp\"\n")
    endif()
    if(_body)
      # Hoist the #include lines (each leaves an empty line, so the lines stay aligned).
      # (A ";" in an include line's comment would split the CMake list: mask it.)
      string(REPLACE ";" "<specdec-semicolon>" _masked "${_code}")
      string(REGEX MATCHALL "#include[^\n]*" _includes "${_masked}")
      string(REGEX REPLACE "#include[^\n]*" "" _code "${_code}")
      foreach(_include IN LISTS _includes)
        string(REPLACE "<specdec-semicolon>" ";" _include "${_include}")
        string(APPEND _source "${_include}\n")
      endforeach()
      string(APPEND _source "namespace {\n[[maybe_unused]] void snippet_body() {\n")
      string(APPEND _source "#line ${_first_line} \"${_doc_rel}\"\n${_code}\n}\n}  // namespace\n")
    else()
      string(APPEND _source "#line ${_first_line} \"${_doc_rel}\"\n${_code}\n")
    endif()
    set(_ext cpp)
    if(_needs STREQUAL "cuda")
      set(_ext cu)
    endif()
    set(_path ${_snippet_dir}/${_doc_id}_${_count}.${_ext})
    _specdec_write_if_changed(${_path} "${_source}")
    if(_needs STREQUAL "llama_cpp")
      list(APPEND _snippet_llama_sources ${_path})
    elseif(_needs STREQUAL "cuda")
      list(APPEND _snippet_cuda_sources ${_path})
    else()
      list(APPEND _snippet_sources ${_path})
    endif()
  endwhile()
endforeach()

if(_snippet_errors)
  list(JOIN _snippet_errors "\n  " _snippet_errors)
  message(FATAL_ERROR "Code blocks of the documentation:\n  ${_snippet_errors}")
endif()

if(SPECDEC_HAS_LLAMA_CPP)
  list(APPEND _snippet_sources ${_snippet_llama_sources})
endif()
if(SPECDEC_HAS_CUDA)
  list(APPEND _snippet_sources ${_snippet_cuda_sources})
endif()
# Compiled, not linked: a fragment may name models and values its context only declares.
add_library(specdec_doc_snippets OBJECT ${_snippet_sources})
target_link_libraries(specdec_doc_snippets PRIVATE specdec::cpu)
if(SPECDEC_HAS_LLAMA_CPP)
  target_link_libraries(specdec_doc_snippets PRIVATE specdec::llama_cpp)
endif()
if(SPECDEC_HAS_CUDA)
  target_link_libraries(specdec_doc_snippets PRIVATE specdec::cuda)
endif()
target_include_directories(specdec_doc_snippets PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/readme ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(specdec_doc_snippets PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-missing-field-initializers -Wno-unused-variable -Wno-unused-but-set-variable -Wno-unused-parameter>)
# GCC 12 reports aggregates holding a vector as maybe-uninitialized in their
# destructors (a known false positive, silenced for the test binaries too).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(specdec_doc_snippets PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
endif()
# Compiled, never run: the programs' optimisation flag (scripts/test.sh's -O1) serves them too.
if(SPECDEC_PROGRAM_OPTIMIZATION)
  target_compile_options(specdec_doc_snippets PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${SPECDEC_PROGRAM_OPTIMIZATION}>)
endif()
list(LENGTH _snippet_sources _snippet_count)
message(STATUS "Documentation snippets compiled: ${_snippet_count}")
# The build is the test; CTest builds the target again so that a broken
# snippet also fails a test run that did not rebuild everything.
add_test(NAME "docs: snippets compile"
         COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target specdec_doc_snippets)
