#pragma once
// specdec's llama.cpp adapter: LlamaCppModel, a llama.cpp model and context
// as a specdec model, so that every decoder of the library runs on any model
// llama.cpp loads. See docs/llama_cpp.md for building against llama.cpp and
// for what is refused. The parts, one idea each:
//   llama_cpp_options.hpp   LlamaCppOptions, LlamaCppParams, LlamaCppBorrowOptions
//   llama_cpp_model.hpp     LlamaCppModel: the model contract over one context
//   llama_cpp_context.hpp   loading, context setup, the checks and probes
//   llama_cpp_passes.hpp    tokens in, logits rows out (llama_decode calls)
//   llama_cpp_handles.hpp   owned or borrowed llama.cpp model and context
//   llama_cpp_recurrent.hpp rollback of recurrent and hybrid models
//   llama_cpp_tree.hpp      token trees in llama.cpp's cache
#include "specdec/adapters/llama_cpp_model.hpp"
#include "specdec/adapters/llama_cpp_options.hpp"
