#pragma once
// The reference CPU models in one include (target specdec::cpu): the Llama
// model loaded from GGUF with its tokenizer, and the seeded synthetic family
// that needs no model file.
#include "specdec/specdec.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"
