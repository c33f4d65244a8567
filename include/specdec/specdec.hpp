#pragma once
// specdec: exact speculative decoding for any causal language model.
//
// This umbrella header is the model-agnostic part (target specdec::specdec: no
// reference models, no CUDA): what a user who brings their own model includes.
//
// Folders are layers and includes only point downwards (no cycles): the
// layer map is in docs/design.md ("Floors and arrows"), checked by the CTest
// test "layers: includes point to the same floor or below".
#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logprobs.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/batch_lengths.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/generation_result.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/prompt_lookup_drafter.hpp"
#include "specdec/decoding/roles.hpp"
#include "specdec/decoding/session.hpp"
#include "specdec/decoding/step_record.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/decoding/model_tree_drafter.hpp"
#include "specdec/decoding/pair_statistics.hpp"
#include "specdec/decoding/tree_decoder.hpp"
#include "specdec/decoding/tree_policy.hpp"
#include "specdec/decoding/tree_shape.hpp"
#include "specdec/decoding/verification.hpp"
#include "specdec/decoding/verify_only.hpp"
#include "specdec/decoding/verify_tree.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "specdec/sampling/logit_adjustments.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "specdec/sampling/token_constraint.hpp"
#include "specdec/sampling/token_logprobs.hpp"
#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/constraints/token_texts.hpp"
#include "specdec/sampling/tree_acceptance.hpp"
