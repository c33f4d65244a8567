#pragma once
// The decoding loop: one thread owns the BatchedDecoder, the thread that
// calls run() (the server's main thread, which also loaded the models: a
// llama.cpp built with OpenMP keeps a team of worker threads per calling
// thread, and a second team on the same cores slows every pass). HTTP threads
// hand it jobs through a locked queue and read each request's tokens from its
// Channel; the decoding thread submits jobs between steps, cancels the
// requests whose client went away (the stream callback also returns false,
// so a running request ends inside the step that notices), steps, hands the
// step's logprobs to the channels that asked for them (a token's logprob is
// known once its step ends), and each result to its channel.
//
// Draft lengths: AutoBatchLength's for the batch, up to each request's cap;
// speculative.n_max = 0 drafts nothing. A seeded request verifies with coupled
// sampling (job_rule), so that its tokens are a function of its own prompt,
// options and seed whatever its batch mates and lengths (the CPU rows are
// batch-invariant); the others with token-wise rejection.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <specdec/decoding/batch_lengths.hpp>
#include <specdec/decoding/batched_decoder.hpp>

#include "api_error.hpp"
#include "metrics.hpp"

namespace specdec::server {

using Clock = std::chrono::steady_clock;

// A request's tokens on their way from the decoding thread to its HTTP thread.
class Channel {
public:
    // Decoding thread.
    void accept() { update([&] { accepted_ = true; }); }
    void refuse(ApiError error) { update([&] { refused_ = std::move(error); }); }
    void push(Token token) { update([&] { tokens_.push_back(token); }); }
    // The logprobs of pushed tokens, in order (they arrive after each step).
    void push_logprobs(std::span<const TokenLogprob> more) {
        update([&] { logprobs_.insert(logprobs_.end(), more.begin(), more.end()); });
    }
    void finish(RequestResult result) { update([&] { result_ = std::move(result); }); }

    // HTTP thread: ends the request (the client went away, or the server stops).
    void cancel() { cancelled_.store(true); }
    // HTTP thread: ends the request because its answer is complete (a stop
    // string): the decoder drops it as for cancel(), counted as finished.
    void end_early() {
        ended_early_.store(true);
        cancelled_.store(true);
    }
    [[nodiscard]] bool cancelled() const { return cancelled_.load(); }
    [[nodiscard]] bool ended_early() const { return ended_early_.load(); }

    // HTTP thread: waits until the request was submitted or refused (timeout: false).
    bool wait_submitted(std::optional<ApiError>& refused, std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        const bool ok = changed_.wait_for(lock, timeout, [&] { return accepted_ || refused_.has_value(); });
        refused = refused_;
        return ok;
    }
    struct Fresh {
        std::vector<Token> tokens;
        std::vector<TokenLogprob> logprobs;  // those of `tokens`, when asked for
    };
    // HTTP thread: the tokens after the first `seen`, waiting up to `timeout`
    // for some; `done` holds the result once the request ended. with_logprobs:
    // only tokens whose logprobs arrived, with them.
    Fresh next(std::size_t seen, std::chrono::milliseconds timeout, std::optional<RequestResult>& done,
               bool with_logprobs = false) {
        std::unique_lock lock(mutex_);
        const auto ready = [&] {
            return with_logprobs && !result_ ? std::min(tokens_.size(), logprobs_.size()) : tokens_.size();
        };
        changed_.wait_for(lock, timeout, [&] { return ready() > seen || result_.has_value(); });
        const std::size_t from = std::min(seen, ready()), to = ready();
        Fresh fresh;
        fresh.tokens.assign(tokens_.begin() + static_cast<std::ptrdiff_t>(from), tokens_.begin() + static_cast<std::ptrdiff_t>(to));
        if (with_logprobs)
            fresh.logprobs.assign(logprobs_.begin() + static_cast<std::ptrdiff_t>(std::min(from, logprobs_.size())),
                                  logprobs_.begin() + static_cast<std::ptrdiff_t>(std::min(to, logprobs_.size())));
        if (result_ && fresh.tokens.empty()) done = result_;
        return fresh;
    }

private:
    template <class F>
    void update(F&& f) {
        {
            std::lock_guard lock(mutex_);
            f();
        }
        changed_.notify_all();
    }
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<Token> tokens_;
    std::vector<TokenLogprob> logprobs_;
    bool accepted_ = false;
    std::optional<ApiError> refused_;
    std::optional<RequestResult> result_;
    std::atomic<bool> cancelled_{false};
    std::atomic<bool> ended_early_{false};
};

struct Job {
    std::vector<Token> prompt;
    DecodingOptions options;  // options.drafting: the length policy's, a fixed length, or none
    ChosenRule rule{};        // job_rule
    std::shared_ptr<Channel> channel;
    Clock::time_point arrived = Clock::now();
};

template <class Target, class Draft>
class Engine {
public:
    using Decoder = BatchedDecoder<Target, Draft, ChosenRule, AutoBatchLength>;

    // prefill_chunk: BatchOptions::prefill_chunk (0: whole prompts).
    Engine(Target& target, Draft& draft, Metrics& metrics, std::size_t slots, std::size_t prefill_chunk,
           AutoBatchLength policy = {})
        : decoder_(specdec::target(target), specdec::draft(draft),
                   BatchOptions{.max_sequences = slots, .prefill_chunk = prefill_chunk}, ChosenRule{},
                   std::move(policy)),
          metrics_(&metrics) {}

    // The decoding loop, on the calling thread, until stop(); then it ends
    // what still runs and refuses what waits.
    // An exception out of the loop (not one request's error: the decoder
    // fails those alone) fails every request and ends the loop with it.
    void run() {
        try {
            loop();
        } catch (...) {
            std::string why = "unknown error";
            try {
                throw;
            } catch (const std::exception& error) {
                why = error.what();
            } catch (...) {
            }
            abandon(why);
            mark_ended();
            throw;
        }
        mark_ended();
    }

    // Runs one short request through both models before the server takes
    // requests (as llama-server's warm-up does): a model's first passes pay
    // one-time costs (buffers, kernels' first touch) a client should not.
    // On the thread that will call run(), before it.
    void warm_up() {
        const std::vector<Token> prompt(4, 0);
        decoder_.submit(prompt, DecodingOptions{.draft_tokens = 2, .max_new_tokens = 4, .drafting = Drafting::fixed});
        while (!decoder_.idle()) decoder_.step();
        (void)decoder_.take_finished();
    }
    ~Engine() = default;
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    [[nodiscard]] std::size_t slots() const { return decoder_.slots(); }

    // Writes one line per step to `out` (null: none), from the decoding
    // thread: what the length policy chose and what it cost (--log-steps).
    void log_steps(std::FILE* out) { step_log_ = out; }

    // Queues a job; refuses it (503) when `limit` requests are already
    // outstanding (queued, waiting or running) or the engine is stopping.
    std::optional<ApiError> enqueue(Job job, std::size_t limit) {
        {
            std::lock_guard lock(mutex_);
            if (stopping_) return ApiError{503, "the server is shutting down", {}, "server_error"};
            if (outstanding_ >= limit)
                return ApiError{503, "the server is busy: " + std::to_string(limit) +
                                         " requests are already running or waiting for a slot (-np + --max-queue)",
                                {}, "server_error", "queue_full"};
            ++outstanding_;
            queue_.push_back(std::move(job));
        }
        wake_.notify_one();
        return std::nullopt;
    }

    // Asks run() to end; returns at once.
    void stop() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_one();
    }

    // Waits until run() has returned.
    void wait_ended() {
        std::unique_lock lock(mutex_);
        ended_changed_.wait(lock, [&] { return ended_; });
    }

private:
    struct Live {
        std::shared_ptr<Channel> channel;
        std::size_t prompt = 0;
        bool logprobs = false;          // streamed to the channel after each step
        std::size_t logprobs_sent = 0;
    };

    void abandon(const std::string& why) {
        for (auto& [id, live] : live_)
            live.channel->finish(RequestResult{.id = id, .status = RequestStatus::failed, .generation = {}, .error = why});
        live_.clear();
        std::lock_guard lock(mutex_);
        stopping_ = true;
        for (Job& job : queue_) job.channel->refuse(ApiError{500, "the server failed: " + why, {}, "server_error"});
        queue_.clear();
    }

    void mark_ended() {
        {
            std::lock_guard lock(mutex_);
            ended_ = true;
        }
        ended_changed_.notify_all();
    }

    void loop() {
        std::vector<Job> jobs;
        for (;;) {
            {
                std::unique_lock lock(mutex_);
                wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !decoder_.idle(); });
                if (stopping_) break;
                jobs.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
                queue_.clear();
            }
            for (Job& job : jobs) submit(job);
            jobs.clear();
            for (auto& [id, live] : live_)
                if (live.channel->cancelled()) decoder_.cancel(id);
            if (!decoder_.idle()) {
                const BatchStepReport report = decoder_.step();
                metrics_->step(report);
                if (step_log_) write_step(report);
                for (auto& [id, live] : live_)
                    if (const GenerationResult* so_far = live.logprobs ? decoder_.progress(id) : nullptr)
                        send_logprobs(live, so_far->logprobs);
            }
            for (RequestResult& result : decoder_.take_finished()) retire(std::move(result));
            metrics_->queue(decoder_.waiting_requests(), decoder_.running_requests());
        }
        for (auto& [id, live] : live_) decoder_.cancel(id);
        while (!decoder_.idle()) decoder_.step();
        for (RequestResult& result : decoder_.take_finished()) retire(std::move(result));
        std::lock_guard lock(mutex_);
        for (Job& job : queue_) job.channel->refuse(ApiError{503, "the server is shutting down", {}, "server_error"});
    }

    void submit(Job& job) {
        if (job.channel->cancelled()) {
            release();
            job.channel->refuse(ApiError{503, "the request was cancelled before it started", {}, "server_error"});
            return;
        }
        const std::shared_ptr<Channel> channel = job.channel;
        RequestId id = 0;
        try {
            auto stream = [this, channel, last = job.arrived, first = true](Token token) mutable {
                const Clock::time_point now = Clock::now();
                const double seconds = std::chrono::duration<double>(now - last).count();
                first ? metrics_->first_token(seconds) : metrics_->inter_token(seconds);
                first = false;
                last = now;
                channel->push(token);
                return !channel->cancelled();
            };
            id = decoder_.submit(job.prompt, job.options, std::move(stream), job.rule);
        } catch (const Error& error) {
            release();
            channel->refuse(bad_request(error.what()));
            return;
        }
        live_[id] = Live{channel, job.prompt.size(), job.options.logprobs.enabled};
        channel->accept();
    }

    void retire(RequestResult result) {
        const auto it = live_.find(result.id);
        if (it == live_.end()) return;
        const GenerationStats& stats = result.generation.stats;
        // A stream callback that returned false is a cancellation seen inside a step.
        const bool cancelled = !it->second.channel->ended_early() &&
                               (result.status == RequestStatus::cancelled ||
                                (result.status == RequestStatus::finished && result.generation.stop_reason == StopReason::callback));
        const bool failed = result.status == RequestStatus::failed;
        metrics_->finished(cancelled ? "cancelled" : failed ? "failed" : "finished", it->second.prompt,
                           result.generation.tokens.size(), stats);
        if (it->second.logprobs) send_logprobs(it->second, result.generation.logprobs);
        it->second.channel->finish(std::move(result));
        live_.erase(it);
        release();
    }

    void write_step(const BatchStepReport& r) {
        std::fprintf(step_log_,
                     "step %zu: requests %zu, target tokens %zu, drafts %zu in %zu rounds, emitted %zu, %.2f ms"
                     " (prefill %zu tokens, %.2f ms; admitted %zu, retired %zu)\n",
                     ++logged_steps_, r.sequences, r.target_tokens, r.drafts, r.draft_rounds, r.emitted,
                     1e3 * (r.seconds - r.prefill_seconds), r.prefill_tokens, 1e3 * r.prefill_seconds, r.admitted, r.retired);
        std::fflush(step_log_);
    }

    static void send_logprobs(Live& live, const std::vector<TokenLogprob>& all) {
        if (all.size() <= live.logprobs_sent) return;
        live.channel->push_logprobs(std::span(all).subspan(live.logprobs_sent));
        live.logprobs_sent = all.size();
    }

    void release() {
        std::lock_guard lock(mutex_);
        --outstanding_;
    }

    Decoder decoder_;
    Metrics* metrics_;
    std::FILE* step_log_ = nullptr;
    std::size_t logged_steps_ = 0;
    std::unordered_map<RequestId, Live> live_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> queue_;
    std::size_t outstanding_ = 0;
    bool stopping_ = false;
    bool ended_ = false;  // run() returned
    std::condition_variable ended_changed_;
};

}  // namespace specdec::server
