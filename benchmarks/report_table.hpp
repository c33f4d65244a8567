#pragma once
// The human-readable report: what ran where, one table row per configuration,
// and a closing line naming the best configuration. Greedy mismatches are
// printed loudly, since they would mean the "exact" claim is broken.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "bench_results.hpp"
#include "cost_model.hpp"

namespace specdec::bench {

namespace detail {

template <class... Args>
[[nodiscard]] std::string format(const char* pattern, Args... args) {
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, pattern, args...);
    return buffer;
}

[[nodiscard]] inline std::string describe_size(const ModelInfo& model) {
    if (model.parameters == 0 && model.bytes == 0) return "";
    return format(", %.1fM parameters, %.1f MiB", model.parameters / 1e6, model.bytes / (1024.0 * 1024.0));
}

[[nodiscard]] inline std::string describe_model(const ModelInfo& model) {
    return model.name + " (" + model.type + describe_size(model) + (model.synthetic ? ", synthetic" : "") + ")";
}

[[nodiscard]] inline std::string per_position_text(const ConfigurationResult& result) {
    std::string text;
    for (const double rate : result.per_position_acceptance()) {
        if (!text.empty()) text += ' ';
        text += format("%.2f", rate);
    }
    return text;
}

}  // namespace detail

inline void print_header(std::ostream& out, const BenchReport& report) {
    out << "machine: " << report.machine.cpu << ", " << report.machine.threads << " threads, backend "
        << report.machine.backend << (report.machine.device.empty() ? "" : " (" + report.machine.device + ")");
    if (report.machine.load_average >= 0.0) {
        out << detail::format(", load average %.2f at start", report.machine.load_average);
        if (report.machine.hardware_threads > 0 && report.machine.load_average > 0.5 * report.machine.hardware_threads)
            out << " (shared machine: timings are inflated and noisy)";
    }
    out << "\n";
    out << "target:  " << detail::describe_model(report.target) << "\n";
    out << "draft:   " << detail::describe_model(report.draft) << "\n";
    if (report.target.synthetic || report.draft.synthetic)
        out << "note:    synthetic models have random weights: their acceptance depends on how the draft was derived, "
               "not on language; use --target/--draft for real models\n";
    out << "prompt:  " << report.prompt_tokens << " tokens ";
    if (report.prompt_text) out << '"' << *report.prompt_text << '"';
    else out << (report.prompt_per_repetition ? "(seeded random ids, one prompt per repetition)" : "(seeded random ids)");
    out << ", " << report.new_tokens << " new tokens, " << report.repetitions << " repetitions (rounds over every row";
    if (report.time_budget_seconds > 0.0)
        out << detail::format("; as many as fit in %.0f s, at most %zu", report.time_budget_seconds, report.max_repetitions);
    out << (report.interleaved_rows ? "; within a round all rows step by step in turn, the baseline whole before or after them" : "; one row after another");
    out << "), seed " << report.seed << "\n";
    out << detail::format("costs:   target forward %.2f ms/token, draft %.3f ms/token, c = %.3f", report.costs.target_step_seconds * 1e3,
                          report.costs.draft_step_seconds * 1e3, report.costs.cost_ratio())
        << "\n";
}

// Where plain decoding stands against the memory roofline (printed after the
// runs: it needs their autoregressive tokens/s).
inline void print_roofline(std::ostream& out, const BenchReport& report) {
    const double roofline = report.roofline_tokens_per_second();
    if (roofline <= 0.0) return;
    const double achieved = report.autoregressive_tokens_per_second();
    out << detail::format("memory:  %.1f GB/s read with %zu threads; the target streams %.1f MB of weights per token: "
                          "roofline %.1f tok/s, autoregressive decoding reached %.1f tok/s (%.0f%% of it)",
                          report.machine.read_bandwidth / 1e9, report.machine.threads,
                          static_cast<double>(report.target.bytes_read_per_token) / 1e6, roofline, achieved,
                          100.0 * achieved / roofline)
        << "\n";
}

inline void print_prefill(std::ostream& out, const BenchReport& report) {
    const double decode = report.costs.decode_tokens_per_second();
    for (const PrefillMeasurement& p : report.costs.prefill) {
        out << detail::format("prefill: %zu-token prompt at %.1f tok/s, time to first token %.1f ms; "
                              "one-token decode %.1f tok/s (prefill %.1fx decode)",
                              p.tokens, p.tokens_per_second(), 1e3 * p.seconds, decode,
                              decode > 0.0 ? p.tokens_per_second() / decode : 0.0)
            << "\n";
    }
}

inline void print_table(std::ostream& out, const BenchReport& report) {
    out << "\n";
    out << "   T  k              AR tok/s  spec tok/s  speedup  (per rep.)   alpha  acc.rate  tok/pass     c     v_k  predicted  effic.  "
           "greedy  per-position acceptance\n";
    for (const ConfigurationResult& r : report.configurations) {
        const std::string greedy = !r.greedy_match ? "-" : (*r.greedy_match ? "match" : "DIFFER");
        const std::string spread = detail::format("%.2f-%.2f", r.slowest_repetition_speedup(), r.fastest_repetition_speedup());
        out << detail::format("%4.2g  %-13s %9.1f %11.1f %7.2fx %11s %6.3f %9.3f %9.2f %5.3f %7.2f %9.2fx %7.2f  %-6s  ",
                              r.temperature, r.label().c_str(), r.autoregressive_tokens_per_second(),
                              r.speculative_tokens_per_second(), r.speedup(), spread.c_str(), r.alpha(), r.acceptance_rate(),
                              r.mean_tokens_per_target_pass(), r.cost_ratio, r.verification_cost_ratio,
                              r.predicted_speedup(), r.efficiency(), greedy.c_str())
            << detail::per_position_text(r) << "\n";
    }
    out << "\n";
    out << "tok/s = generated tokens / time of the steps after the prompt (prefill: see below); speedup = summed over "
           "the repetitions; per rep. = slowest-fastest single repetition (each against the autoregressive run of its round)\n";
    out << "alpha = accepted / tested drafts (per-token acceptance); acc.rate = accepted / proposed drafts; "
           "tok/pass = tokens per target pass\n";
    out << kPredictedSpeedupFormula << "; efficiency = measured / predicted\n";
    out << "auto<=N: the decoder chose each step's length (at most N) by its online cost model"
        << (report.auto_learned_first ? ", after one untimed generation on another prompt (--cold-auto: from its first step)"
                                      : ", from its first step")
        << "; its c and v_k columns are those of N, its prediction averages the model over the lengths it chose; "
           "block: block verification (Sun et al. 2025)\n";

    out << "\nwhere a step's time goes (ms per target pass): measured draft + verify + accept + other vs the "
           "model's k*c + v_k (in ms); drafts per step\n";
    out << "   T  k                draft  verify  accept   other   total   model  mean k  lengths (count of steps with n = 0, 1, ...)\n";
    for (const ConfigurationResult& r : report.configurations) {
        const ConfigurationResult::StepTimes t = r.step_times();
        std::string lengths;
        for (const std::size_t count : r.speculative.draft_length_counts) {
            if (!lengths.empty()) lengths += ' ';
            lengths += std::to_string(count);
        }
        out << detail::format("%4.2g  %-13s %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f  ", r.temperature, r.label().c_str(),
                              t.draft * 1e3, t.target * 1e3, t.acceptance * 1e3, t.other * 1e3,
                              (t.draft + t.target + t.acceptance + t.other) * 1e3, t.predicted * 1e3, r.mean_draft_length())
            << lengths << "\n";
    }

    const ConfigurationResult* best = nullptr;
    for (const ConfigurationResult& r : report.configurations) {
        if (best == nullptr || r.speedup() > best->speedup()) best = &r;
    }
    if (best != nullptr) {
        out << detail::format("best: T=%g k=%s, %.2fx (%.1f -> %.1f tokens/s)", best->temperature, best->label().c_str(),
                              best->speedup(), best->autoregressive_tokens_per_second(),
                              best->speculative_tokens_per_second())
            << "\n";
        if (best->speedup() < 1.0) {
            out << "no configuration beat autoregressive decoding here: a step must cost less than the tokens it "
                   "yields (k*c + v_k < E); compare the measured c and v_k with alpha\n";
        }
    }
    for (const ConfigurationResult& r : report.configurations) {
        if (r.greedy_match && !*r.greedy_match) {
            out << detail::format(
                       "!!! GREEDY MISMATCH at T=0 k=%s: speculative tokens differ from autoregressive ones from "
                       "token %zu on. Greedy speculative decoding must reproduce the target exactly; if the target's "
                       "batched and single-token forwards round differently, near-ties can flip. !!!",
                       r.label().c_str(), r.first_mismatch.value_or(0))
                << "\n";
        }
    }
    // Per temperature: the best fixed k against the auto row (which needs no sweep).
    for (const ConfigurationResult& a : report.configurations) {
        if (!a.auto_length) continue;
        const ConfigurationResult* best_fixed = nullptr;
        for (const ConfigurationResult& r : report.configurations)
            if (!r.auto_length && r.rule == a.rule && r.temperature == a.temperature &&
                (best_fixed == nullptr || r.speedup() > best_fixed->speedup()))
                best_fixed = &r;
        if (best_fixed == nullptr) continue;
        out << detail::format("auto at T=%g (%s): %.2fx, %.0f%% of the best fixed k (k=%zu, %.2fx)", a.temperature,
                              std::string(to_string(a.rule)).c_str(), a.speedup(),
                              100.0 * a.speedup() / best_fixed->speedup(), best_fixed->draft_tokens, best_fixed->speedup());
        // Paired by repetition (same round, prompt and seed, same baseline):
        // how far single repetitions scatter around that ratio, and the
        // standard error that scatter puts on a mean of them. At T > 0 the two
        // rows sample different continuations, so their acceptance differs
        // by chance (a few percent at the default size) besides by policy.
        const std::size_t paired = std::min(a.speedup_per_repetition.size(), best_fixed->speedup_per_repetition.size());
        if (paired > 1) {
            double low = 1e300, high = 0.0, sum = 0.0, squares = 0.0;
            for (std::size_t i = 0; i < paired; ++i) {
                const double ratio = a.speedup_per_repetition[i] / best_fixed->speedup_per_repetition[i];
                low = std::min(low, ratio);
                high = std::max(high, ratio);
                sum += ratio;
                squares += ratio * ratio;
            }
            const double n = static_cast<double>(paired), mean = sum / n;
            const double variance = std::max(0.0, (squares - n * mean * mean) / (n - 1.0));
            out << detail::format("; single repetitions %.0f-%.0f%%, standard error of their mean %.0f%%", 100.0 * low,
                                  100.0 * high, 100.0 * std::sqrt(variance / n));
        }
        out << "\n";
    }
    bool any_greedy = false;
    for (const ConfigurationResult& r : report.configurations) any_greedy = any_greedy || r.greedy_match.has_value();
    if (any_greedy && report.all_greedy_runs_match())
        out << "greedy check: at T=0 speculative decoding reproduced the autoregressive tokens exactly in every run\n";
}

// The --tree rows: shape, nodes and tokens per target pass, speedup against
// the interleaved autoregressive runs, predicted speedup and efficiency, and
// per temperature the best tree against the best chain.
inline void print_tree_table(std::ostream& out, const BenchReport& report) {
    if (report.trees_skipped) out << "\ntoken trees not run: " << *report.trees_skipped << "\n";
    if (report.trees.empty()) return;
    out << "\ntoken trees (one target pass verifies every node; recursive rejection sampling without replacement)\n";
    out << "   T  tree        shape drafted          nodes/pass  acc./pass  tok/pass   AR tok/s  spec tok/s  speedup  (per rep.)  "
           "predicted  effic.  greedy  acceptance of ranks 0,1,2 at depth 1\n";
    for (const TreeResult& r : report.trees) {
        const std::string greedy = !r.greedy_match ? "-" : (*r.greedy_match ? "match" : "DIFFER");
        const std::string spread = detail::format("%.2f-%.2f", r.slowest_repetition_speedup(), r.fastest_repetition_speedup());
        out << detail::format("%4.2g  %-10s  %-22s %10.2f %10.2f %9.2f %10.1f %11.1f %7.2fx %11s %9.2fx %7.2f  %-6s  %.2f %.2f %.2f",
                              r.temperature, r.label.c_str(), r.shape.c_str(), r.nodes_per_pass(), r.accepted_per_pass(),
                              r.tokens_per_pass(), r.autoregressive.tokens_per_second(), r.speculative.tokens_per_second(),
                              r.speedup(), spread.c_str(), r.predicted_speedup, r.efficiency(), greedy.c_str(),
                              r.acceptance(0, 0), r.acceptance(0, 1), r.acceptance(0, 2))
            << "\n";
    }
    out << "   T  tree        draft ms  verify ms  accept ms  (per target pass)  draft passes/step  target pass width\n";
    for (const TreeResult& r : report.trees) {
        const GenerationStats& s = r.speculative;
        const double passes = static_cast<double>(std::max<std::size_t>(1, s.target_forward_passes));
        const double after_prefill = static_cast<double>(s.target_tokens - s.prefill_tokens);
        out << detail::format("%4.2g  %-10s %9.2f %10.2f %10.2f %37.2f %19.2f", r.temperature, r.label.c_str(),
                              1e3 * s.draft_seconds / passes, 1e3 * s.target_seconds / passes,
                              1e3 * s.acceptance_seconds / passes, static_cast<double>(s.draft_forward_passes) / passes,
                              after_prefill / passes)
            << "\n";
    }
    out << "auto: AutoTree chose each step's tree from its online cost model (shape drafted = its plan at the end, "
           "predicted = its own model); a fixed tree's prediction uses the measured acceptance by depth and rank and "
           "v of a chain pass as wide as the tree\n";
    for (const TreeResult& r : report.trees) {
        if (r.greedy_match && !*r.greedy_match)
            out << detail::format("!!! GREEDY MISMATCH at T=0 tree %s from token %zu on !!!", r.label.c_str(),
                                  r.first_mismatch.value_or(0))
                << "\n";
    }
    std::vector<double> temperatures;
    for (const TreeResult& r : report.trees)
        if (std::find(temperatures.begin(), temperatures.end(), r.temperature) == temperatures.end())
            temperatures.push_back(r.temperature);
    for (const double t : temperatures) {
        const TreeResult* best_tree = nullptr;
        for (const TreeResult& r : report.trees)
            if (r.temperature == t && (best_tree == nullptr || r.speedup() > best_tree->speedup())) best_tree = &r;
        const ConfigurationResult* best_chain = nullptr;
        for (const ConfigurationResult& c : report.configurations)
            if (c.temperature == t && (best_chain == nullptr || c.speedup() > best_chain->speedup())) best_chain = &c;
        if (best_tree == nullptr) continue;
        out << detail::format("best tree at T=%g: %s (%s) %.2fx", t, best_tree->label.c_str(), best_tree->shape.c_str(),
                              best_tree->speedup());
        if (best_chain != nullptr)
            out << detail::format(", best chain k=%s %.2fx: tree/chain %.2f", best_chain->label().c_str(),
                                  best_chain->speedup(), best_tree->speedup() / best_chain->speedup());
        out << "\n";
    }
}

}  // namespace specdec::bench
