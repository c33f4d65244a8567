#pragma once
// The server's counters in Prometheus' text format (GET /metrics): requests
// by endpoint and status, decoder requests by how they ended, tokens, time to
// first token and inter-token histograms, draft acceptance (in all and per
// draft position), mean draft length per request-step, the target pass's
// width and the step's time, prefill chunks, and the queue. Updated from the
// HTTP threads and the decoding thread under one mutex.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <specdec/decoding/batch_requests.hpp>
#include <specdec/decoding/generation_result.hpp>

namespace specdec::server {

class Histogram {
public:
    static constexpr std::array<double, 12> kBounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                    0.1,   0.25,   0.5,   1.0,  2.5,   10.0};
    void observe(double seconds) {
        for (std::size_t i = 0; i < kBounds.size(); ++i)
            if (seconds <= kBounds[i]) ++counts_[i];
        ++count_;
        sum_ += seconds;
    }
    void write(std::string& out, const char* name, const char* help) const {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
        char line[160];
        for (std::size_t i = 0; i < kBounds.size(); ++i) {
            std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %zu\n", name, kBounds[i], counts_[i]);
            out += line;
        }
        std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %zu\n%s_sum %.9g\n%s_count %zu\n", name, count_, name,
                      sum_, name, count_);
        out += line;
    }

private:
    std::array<std::size_t, kBounds.size()> counts_{};
    std::size_t count_ = 0;
    double sum_ = 0.0;
};

class Metrics {
public:
    // Back to zero (after the server's own warm-up request).
    void reset() {
        std::lock_guard lock(mutex_);
        requests_.clear();
        ended_.clear();
        prompt_tokens_ = generated_tokens_ = steps_ = sequence_steps_ = drafts_ = proposed_ = accepted_ = 0;
        waiting_ = running_ = target_tokens_ = prefill_tokens_ = 0;
        longest_prefill_ = 0.0;
        tested_at_.clear();
        accepted_at_.clear();
        ttft_ = inter_token_ = step_seconds_ = prefill_seconds_ = Histogram{};
    }
    void request(const std::string& endpoint, int status) {
        std::lock_guard lock(mutex_);
        ++requests_[{endpoint, status}];
    }
    void first_token(double seconds) {
        std::lock_guard lock(mutex_);
        ttft_.observe(seconds);
    }
    void inter_token(double seconds) {
        std::lock_guard lock(mutex_);
        inter_token_.observe(seconds);
    }
    // A request that ended: its counts (drafts as its own statistics count them).
    void finished(const std::string& status, std::size_t prompt, std::size_t generated, const GenerationStats& stats) {
        std::lock_guard lock(mutex_);
        ++ended_[status];
        prompt_tokens_ += prompt;
        generated_tokens_ += generated;
        proposed_ += stats.draft_tokens_proposed;
        accepted_ += stats.draft_tokens_accepted;
        add(tested_at_, stats.tested_at_position);
        add(accepted_at_, stats.accepted_at_position);
    }
    // One decoder step: the requests in its target pass, the drafts they
    // held, the pass's tokens, the step's time, and what it prefilled first.
    void step(const BatchStepReport& report) {
        std::lock_guard lock(mutex_);
        ++steps_;
        sequence_steps_ += report.sequences;
        drafts_ += report.drafts;
        target_tokens_ += report.target_tokens;
        if (report.sequences > 0) step_seconds_.observe(report.seconds - report.prefill_seconds);
        if (report.prefill_tokens > 0) {
            prefill_tokens_ += report.prefill_tokens;
            prefill_seconds_.observe(report.prefill_seconds);
            longest_prefill_ = std::max(longest_prefill_, report.prefill_seconds);
        }
    }
    void queue(std::size_t waiting, std::size_t running) {
        std::lock_guard lock(mutex_);
        waiting_ = waiting;
        running_ = running;
    }

    [[nodiscard]] std::string text() const {
        std::lock_guard lock(mutex_);
        std::string out;
        char line[512];
        out += "# HELP specdec_requests_total HTTP requests by endpoint and status.\n# TYPE specdec_requests_total counter\n";
        for (const auto& [key, n] : requests_) {
            std::snprintf(line, sizeof line, "specdec_requests_total{endpoint=\"%s\",status=\"%d\"} %zu\n", key.first.c_str(),
                          key.second, n);
            out += line;
        }
        out += "# HELP specdec_requests_ended_total Decoder requests by how they ended.\n"
               "# TYPE specdec_requests_ended_total counter\n";
        for (const auto& [status, n] : ended_) {
            std::snprintf(line, sizeof line, "specdec_requests_ended_total{status=\"%s\"} %zu\n", status.c_str(), n);
            out += line;
        }
        auto counter = [&](const char* name, const char* help, double value, const char* type = "counter") {
            std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.9g\n", name, help, name, type, name, value);
            out += line;
        };
        counter("specdec_prompt_tokens_total", "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
        counter("specdec_generated_tokens_total", "Tokens generated by finished requests.", static_cast<double>(generated_tokens_));
        counter("specdec_steps_total", "Decoder steps (one target pass each).", static_cast<double>(steps_));
        counter("specdec_draft_tokens_total", "Draft tokens proposed (finished requests).", static_cast<double>(proposed_));
        counter("specdec_draft_tokens_accepted_total", "Draft tokens accepted and emitted (finished requests).",
                static_cast<double>(accepted_));
        counter("specdec_acceptance_rate", "Accepted over proposed draft tokens of finished requests.",
                proposed_ == 0 ? 0.0 : static_cast<double>(accepted_) / static_cast<double>(proposed_), "gauge");
        counter("specdec_mean_draft_length", "Draft tokens per request per step since start.",
                sequence_steps_ == 0 ? 0.0 : static_cast<double>(drafts_) / static_cast<double>(sequence_steps_), "gauge");
        counter("specdec_target_pass_tokens_total", "Tokens in the target passes (mean pass width: over specdec_steps_total).",
                static_cast<double>(target_tokens_));
        counter("specdec_prefill_tokens_total", "Prompt tokens prefilled (not in a slot's cache already).",
                static_cast<double>(prefill_tokens_));
        counter("specdec_prefill_step_seconds_max", "The longest time one step spent prefilling (a chunk, or a whole prompt).",
                longest_prefill_, "gauge");
        out += "# HELP specdec_draft_acceptance Accepted over tested drafts at each draft position (finished requests).\n"
               "# TYPE specdec_draft_acceptance gauge\n";
        for (std::size_t i = 0; i < tested_at_.size(); ++i) {
            if (tested_at_[i] == 0) continue;
            std::snprintf(line, sizeof line, "specdec_draft_acceptance{position=\"%zu\"} %.6g\n", i + 1,
                          static_cast<double>(i < accepted_at_.size() ? accepted_at_[i] : 0) / static_cast<double>(tested_at_[i]));
            out += line;
        }
        counter("specdec_requests_waiting", "Requests queued for a slot.", static_cast<double>(waiting_), "gauge");
        counter("specdec_requests_running", "Requests decoding in a slot.", static_cast<double>(running_), "gauge");
        ttft_.write(out, "specdec_time_to_first_token_seconds", "From a request's arrival to its first token.");
        inter_token_.write(out, "specdec_inter_token_seconds", "Between consecutive tokens of a request.");
        step_seconds_.write(out, "specdec_step_seconds", "A decoder step (drafts, the target pass, verification), prefill aside.");
        prefill_seconds_.write(out, "specdec_prefill_seconds", "What a step spent prefilling, when it prefilled.");
        return out;
    }

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, std::size_t> requests_;
    std::map<std::string, std::size_t> ended_;
    std::size_t prompt_tokens_ = 0, generated_tokens_ = 0, steps_ = 0, sequence_steps_ = 0, drafts_ = 0, proposed_ = 0,
                accepted_ = 0;
    std::size_t waiting_ = 0, running_ = 0, target_tokens_ = 0, prefill_tokens_ = 0;
    double longest_prefill_ = 0.0;
    std::vector<std::size_t> tested_at_, accepted_at_;  // per draft position
    Histogram ttft_, inter_token_, step_seconds_, prefill_seconds_;

    static void add(std::vector<std::size_t>& into, const std::vector<std::size_t>& from) {
        if (into.size() < from.size()) into.resize(from.size(), 0);
        for (std::size_t i = 0; i < from.size(); ++i) into[i] += from[i];
    }
};

}  // namespace specdec::server
