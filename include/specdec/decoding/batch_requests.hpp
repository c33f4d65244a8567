#pragma once
// What a caller of BatchedDecoder (batched_decoder.hpp) hands in and gets
// back: request ids and statuses, a request's result and token stream, the
// decoder's options, and what one step did.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "specdec/core/types.hpp"
#include "specdec/decoding/generation_result.hpp"

namespace specdec {

using RequestId = std::uint64_t;

enum class RequestStatus {
    waiting,    // submitted, no slot free yet
    running,    // in a slot, decoding
    finished,   // ended normally (generation.stop_reason says why)
    cancelled,  // cancel() ended it (generation holds the tokens emitted before)
    failed,     // an error inside a step ended it (error says which)
};

[[nodiscard]] inline std::string_view to_string(RequestStatus status) {
    switch (status) {
        case RequestStatus::waiting: return "waiting";
        case RequestStatus::running: return "running";
        case RequestStatus::finished: return "finished";
        case RequestStatus::cancelled: return "cancelled";
        case RequestStatus::failed: return "failed";
    }
    return "unknown";
}

struct RequestResult {
    RequestId id = 0;
    RequestStatus status = RequestStatus::finished;
    GenerationResult generation;  // tokens and stats, also of a cancelled or failed request
    std::string error;            // failed: the error's message
};

// A request's stream: called with each token as it is committed; returning
// false ends the request (StopReason::callback).
using TokenStream = std::function<bool(Token)>;

struct BatchOptions {
    std::size_t max_sequences = 0;  // requests decoded at once; 0 = every slot the models have
    // Chunked prefill: the most prompt tokens a step prefills, over all the
    // requests being admitted, so that a long prompt delays the running
    // requests' steps by a chunk's pass at a time instead of its whole
    // prefill; a request decodes once its prompt is in. 0: each admitted
    // prompt whole, in the step that admits it.
    std::size_t prefill_chunk = 0;
};

// What one step() did.
struct BatchStepReport {
    std::size_t admitted = 0;       // requests given a slot at the start of the step
    std::size_t prefill_tokens = 0; // prompt tokens prefilled at the start of the step (BatchOptions::prefill_chunk)
    double prefill_seconds = 0.0;
    std::size_t sequences = 0;      // requests in the target pass
    std::size_t target_tokens = 0;  // tokens in the target pass
    std::size_t drafts = 0;         // draft tokens proposed
    std::size_t draft_rounds = 0;   // draft passes (lockstep rounds)
    std::size_t emitted = 0;        // tokens committed
    std::size_t retired = 0;        // requests that ended in the step
    double seconds = 0.0;
};

}  // namespace specdec
