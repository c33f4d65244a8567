// Context of documentation fragments that use the llama.cpp adapter.
// snippet-needs: llama_cpp
#include "context/doc.hpp"

#include <specdec/adapters/llama_cpp.hpp>
