#pragma once
// The machine-readable report. Each configuration becomes two entries of
// "runs": the autoregressive baseline and the speculative run measured against
// it, so that a reader can plot either without knowing how they were paired.
// Fields that do not apply to a method are null rather than invented. Keys
// keep the order written here (ordered_json), so the file reads top-down.
#include <nlohmann/json.hpp>

#include "bench_results.hpp"
#include "cost_model.hpp"

namespace specdec::bench {

inline constexpr int kReportFormatVersion = 1;

[[nodiscard]] inline nlohmann::ordered_json model_to_json(const ModelInfo& model) {
    return {{"name", model.name},
            {"parameters", model.parameters},
            {"bytes", model.bytes},
            {"bytes_read_per_token", model.bytes_read_per_token > 0 ? nlohmann::ordered_json(model.bytes_read_per_token)
                                                                    : nlohmann::ordered_json(nullptr)},
            {"type", model.type},
            {"synthetic", model.synthetic}};
}

[[nodiscard]] inline nlohmann::ordered_json autoregressive_run_to_json(const ConfigurationResult& r) {
    return {{"method", "autoregressive"},
            {"draft_tokens", r.draft_tokens},  // the row this baseline was paired with (one baseline per repetition serves every row of a temperature)
            {"draft_length", r.auto_length ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(r.draft_tokens)},
            {"rule", to_string(r.rule)},
            {"temperature", r.temperature},
            {"repetitions", r.repetitions},
            {"generated_tokens", r.autoregressive.generated_tokens},
            {"seconds", r.autoregressive.total_seconds},
            {"tokens_per_second", r.autoregressive_tokens_per_second()},
            {"speedup", 1.0},
            {"acceptance_rate", nullptr},
            {"alpha", nullptr},
            {"mean_accepted", nullptr},
            {"mean_tokens_per_target_pass", 1.0},
            {"predicted_speedup", nullptr},
            {"efficiency", nullptr},
            {"greedy_match", nullptr},
            {"per_position_acceptance", nlohmann::ordered_json::array()},
            {"cost_ratio", nullptr},
            {"verification_cost_ratio", nullptr}};
}

[[nodiscard]] inline nlohmann::ordered_json speculative_run_to_json(const ConfigurationResult& r) {
    const ConfigurationResult::StepTimes times = r.step_times();
    nlohmann::ordered_json run = {{"method", "speculative"},
                          {"draft_tokens", r.draft_tokens},
                          {"draft_length", r.auto_length ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(r.draft_tokens)},
                          {"rule", to_string(r.rule)},
                          {"draft_length_counts", r.speculative.draft_length_counts},
                          {"mean_draft_length", r.mean_draft_length()},
                          {"temperature", r.temperature},
                          {"repetitions", r.repetitions},
                          {"generated_tokens", r.speculative.generated_tokens},
                          {"seconds", r.speculative.total_seconds},
                          {"tokens_per_second", r.speculative_tokens_per_second()},
                          {"speedup", r.speedup()},
                          {"speedup_per_repetition", r.speedup_per_repetition},
                          {"acceptance_rate", r.acceptance_rate()},
                          {"alpha", r.alpha()},
                          {"mean_accepted", r.mean_accepted()},
                          {"mean_tokens_per_target_pass", r.mean_tokens_per_target_pass()},
                          {"expected_tokens_per_pass", r.expected_tokens_per_pass()},
                          {"predicted_speedup", r.predicted_speedup()},
                          {"efficiency", r.efficiency()},
                          {"per_position_acceptance", r.per_position_acceptance()},
                          {"per_position_conditional_acceptance",
                           conditional_acceptance_at_position(r.speculative.tested_at_position, r.speculative.accepted_at_position)},
                          {"proposed_at_position", r.speculative.proposed_at_position},
                          {"accepted_at_position", r.speculative.accepted_at_position},
                          {"tested_at_position", r.speculative.tested_at_position},
                          {"cost_ratio", r.cost_ratio},
                          {"verification_cost_ratio", r.verification_cost_ratio},
                          {"target_forward_passes", r.speculative.target_forward_passes},
                          {"draft_forward_passes", r.speculative.draft_forward_passes},
                          {"draft_seconds", r.speculative.draft_seconds},
                          {"target_seconds", r.speculative.target_seconds},
                          {"acceptance_seconds", r.speculative.acceptance_seconds},
                          {"step_seconds",
                           {{"draft", times.draft},
                            {"verify", times.target},
                            {"acceptance", times.acceptance},
                            {"other", times.other},
                            {"model", times.predicted}}}};
    run["greedy_match"] = r.greedy_match ? nlohmann::ordered_json(*r.greedy_match) : nlohmann::ordered_json(nullptr);
    if (r.first_mismatch) run["first_mismatch"] = *r.first_mismatch;
    return run;
}

// A token-tree configuration: its shape, nodes and tokens per target pass,
// speedup, prediction and acceptance by depth and sibling rank.
[[nodiscard]] inline nlohmann::ordered_json tree_run_to_json(const TreeResult& r) {
    nlohmann::ordered_json acceptance = nlohmann::ordered_json::array();
    for (std::size_t d = 0; d < r.speculative.tested_at_depth_rank.size(); ++d) {
        nlohmann::ordered_json row = nlohmann::ordered_json::array();
        for (std::size_t rank = 0; rank < r.speculative.tested_at_depth_rank[d].size(); ++rank)
            row.push_back({{"tested", r.speculative.tested_at_depth_rank[d][rank]}, {"acceptance", r.acceptance(d, rank)}});
        acceptance.push_back(row);
    }
    nlohmann::ordered_json run{{"tree", r.label},
                               {"shape", r.shape},
                               {"temperature", r.temperature},
                               {"repetitions", r.repetitions},
                               {"generated_tokens", r.speculative.generated_tokens},
                               {"autoregressive_tokens_per_second", r.autoregressive_tokens_per_second()},
                               {"tokens_per_second", r.speculative_tokens_per_second()},
                               {"speedup", r.speedup()},
                               {"speedup_per_repetition", r.speedup_per_repetition},
                               {"predicted_speedup", r.predicted_speedup},
                               {"efficiency", r.efficiency()},
                               {"nodes_per_target_pass", r.nodes_per_pass()},
                               {"accepted_per_target_pass", r.accepted_per_pass()},
                               {"mean_tokens_per_target_pass", r.tokens_per_pass()},
                               {"draft_seconds", r.speculative.draft_seconds},
                               {"target_seconds", r.speculative.target_seconds},
                               {"acceptance_seconds", r.speculative.acceptance_seconds},
                               {"draft_forward_passes", r.speculative.draft_forward_passes},
                               {"target_forward_passes", r.speculative.target_forward_passes},
                               {"acceptance_by_depth_and_rank", acceptance},
                               {"greedy_match", r.greedy_match ? nlohmann::ordered_json(*r.greedy_match) : nlohmann::ordered_json(nullptr)}};
    if (r.first_mismatch) run["first_mismatch"] = *r.first_mismatch;
    return run;
}

[[nodiscard]] inline nlohmann::ordered_json report_to_json(const BenchReport& report) {
    nlohmann::ordered_json trees = nlohmann::ordered_json::array();
    for (const TreeResult& r : report.trees) trees.push_back(tree_run_to_json(r));
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const ConfigurationResult& r : report.configurations) {
        runs.push_back(autoregressive_run_to_json(r));
        runs.push_back(speculative_run_to_json(r));
    }
    nlohmann::ordered_json verification = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < report.costs.verified_tokens.size(); ++i) {
        verification.push_back({{"tokens", report.costs.verified_tokens[i]},
                                {"seconds", report.costs.verification_seconds[i]},
                                {"cost_ratio", report.costs.target_step_seconds > 0.0
                                                   ? report.costs.verification_seconds[i] / report.costs.target_step_seconds
                                                   : 0.0}});
    }
    nlohmann::ordered_json prefill = nlohmann::ordered_json::array();
    for (const PrefillMeasurement& p : report.costs.prefill) {
        prefill.push_back({{"tokens", p.tokens}, {"seconds", p.seconds}, {"tokens_per_second", p.tokens_per_second()}});
    }
    return {{"format_version", kReportFormatVersion},
            {"machine",
             {{"cpu", report.machine.cpu},
              {"threads", report.machine.threads},
              {"backend", report.machine.backend},
              {"device", report.machine.device.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(report.machine.device)},
              {"hardware_threads", report.machine.hardware_threads},
              {"load_average", report.machine.load_average >= 0.0 ? nlohmann::ordered_json(report.machine.load_average)
                                                                  : nlohmann::ordered_json(nullptr)},
              {"read_bandwidth_bytes_per_second", report.machine.read_bandwidth > 0.0
                                                      ? nlohmann::ordered_json(report.machine.read_bandwidth)
                                                      : nlohmann::ordered_json(nullptr)}}},
            {"roofline",
             report.roofline_tokens_per_second() > 0.0
                 ? nlohmann::ordered_json{{"tokens_per_second", report.roofline_tokens_per_second()},
                                          {"autoregressive_tokens_per_second", report.autoregressive_tokens_per_second()},
                                          {"autoregressive_fraction",
                                           report.autoregressive_tokens_per_second() / report.roofline_tokens_per_second()}}
                 : nlohmann::ordered_json(nullptr)},
            {"models", {{"target", model_to_json(report.target)}, {"draft", model_to_json(report.draft)}}},
            {"settings",
             {{"prompt_tokens", report.prompt_tokens},
              {"prompt", report.prompt_text ? nlohmann::ordered_json(*report.prompt_text) : nlohmann::ordered_json(nullptr)},
              {"prompt_per_repetition", report.prompt_per_repetition},
              {"new_tokens", report.new_tokens},
              {"repetitions", report.repetitions},
              {"max_repetitions", report.max_repetitions},
              {"time_budget_seconds", report.time_budget_seconds > 0.0 ? nlohmann::ordered_json(report.time_budget_seconds)
                                                                       : nlohmann::ordered_json(nullptr)},
              {"interleaved_rows", report.interleaved_rows},
              {"auto_learned_first", report.auto_learned_first},
              {"seed", report.seed}}},
            {"costs",
             {{"target_step_seconds", report.costs.target_step_seconds},
              {"draft_step_seconds", report.costs.draft_step_seconds},
              {"cost_ratio", report.costs.cost_ratio()},
              {"verification", verification},
              {"prefill", prefill},
              {"decode_tokens_per_second", report.costs.decode_tokens_per_second()}}},
            {"formula", std::string(kPredictedSpeedupFormula)},
            {"greedy_match", report.all_greedy_runs_match()},
            {"wall_seconds", report.wall_seconds},
            {"runs", runs},
            {"trees", trees},
            {"trees_skipped", report.trees_skipped ? nlohmann::ordered_json(*report.trees_skipped) : nlohmann::ordered_json(nullptr)}};
}

}  // namespace specdec::bench
