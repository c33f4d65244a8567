#pragma once
// One generation advanced a step at a time (prefill, then step() until it
// has finished), timed around each call: the runner steps several of them in
// turn so that a slow phase of the machine slows all of them alike.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "specdec/specdec.hpp"

#include "cost_measurement.hpp"

namespace specdec::bench {
namespace detail {

// One generation in progress, advanced a step at a time. Its prefill and each
// step are timed around the call, so time spent on other generations between
// its steps is not counted: the result is what generate() would return.
class Generation {
public:
    virtual ~Generation() = default;
    virtual void step() = 0;
    [[nodiscard]] virtual bool finished() const = 0;
    [[nodiscard]] virtual double progress() const = 0;  // emitted / max_new_tokens
    [[nodiscard]] virtual GenerationResult take() = 0;
};

template <class Decoder>
class DecoderGeneration final : public Generation {
public:
    // Builds the decoder from `decoder_arguments`, empties its caches (every
    // generation of a run pays the same prefill) and prefills `prompt`.
    template <class... Args>
    explicit DecoderGeneration(std::span<const Token> prompt, Args&&... decoder_arguments)
        : decoder_(std::forward<Args>(decoder_arguments)...), max_new_tokens_(decoder_.options().max_new_tokens) {
        decoder_.reset();
        const auto start = Clock::now();
        result_.stats = decoder_.prefill(prompt);
        seconds_ = specdec::detail::seconds_since(start);
        result_.stats.total_seconds = seconds_;
        finished_ = max_new_tokens_ == 0;
        if (finished_) result_.stop_reason = StopReason::max_new_tokens;
    }

    void step() override {
        const auto start = Clock::now();
        const StepResult step = decoder_.step(max_new_tokens_ - result_.tokens.size());
        seconds_ += specdec::detail::seconds_since(start);
        finished_ = add_step(result_, step, max_new_tokens_);
        result_.stats.total_seconds = seconds_;
    }
    [[nodiscard]] bool finished() const override { return finished_; }
    [[nodiscard]] double progress() const override {
        return static_cast<double>(result_.tokens.size()) / static_cast<double>(std::max<std::size_t>(1, max_new_tokens_));
    }
    [[nodiscard]] GenerationResult take() override { return std::move(result_); }

private:
    Decoder decoder_;
    std::size_t max_new_tokens_;
    GenerationResult result_;
    double seconds_ = 0.0;
    bool finished_ = false;
};

inline GenerationResult run_to_end(Generation& generation) {
    while (!generation.finished()) generation.step();
    return generation.take();
}

// Steps the generations in turn until all have finished: always the one
// furthest behind (by the fraction of its tokens emitted; the first in order
// among equals), so that all of them run through the same seconds and end
// together, and a slow phase of the machine slows every one alike.
inline void run_interleaved(std::span<Generation* const> generations) {
    while (true) {
        Generation* next = nullptr;
        for (Generation* g : generations)
            if (!g->finished() && (next == nullptr || g->progress() < next->progress())) next = g;
        if (next == nullptr) return;
        next->step();
    }
}

}  // namespace detail

// One row's speculative generation: called with (options, prompt), it builds
// a decoder with the row's rule and its length (or tree) policy, which lives as long as
// the row (one policy over all of the row's repetitions), prefills the prompt
// and returns the generation, ready to step.
using RowGenerator =
    std::function<std::unique_ptr<detail::Generation>(const DecodingOptions&, std::span<const Token>)>;

}  // namespace specdec::bench
