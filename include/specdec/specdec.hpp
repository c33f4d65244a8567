#pragma once
// specdec: exact speculative decoding for any causal language model.
//
// This umbrella header is the model-agnostic part (no Eigen, no CUDA): the
// CausalLM concept, sampling, acceptance rules, drafters and the decoders.
// The reference models live in specdec/models/ (target specdec::cpu) and
// specdec/backends/cuda/ (target specdec::cuda).
#include "specdec/core/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/prompt_lookup_drafter.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/decoding/verification.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "specdec/sampling/draft_proposal.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "specdec/sampling/sampling_options.hpp"
