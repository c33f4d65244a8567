#pragma once
// The human-readable report. It answers first: a few verdict lines (the best
// speedup per temperature, auto against the best fixed k, greedy identity, the
// plain decoder against the memory roofline, the machine), then one compact
// table (at most kReportColumns wide), then what was run. --verbose adds the
// per-position acceptance and the time breakdown per step; --format md prints
// the tables as Markdown. The column legend lives in --help (usage_text).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "bench_results.hpp"
#include "cost_model.hpp"

namespace specdec::bench {

// Terminal width the default output keeps to (rows and lines).
inline constexpr std::size_t kReportColumns = 100;

enum class ReportFormat { text, markdown };

struct ReportStyle {
    bool verbose = false;                     // per-position and time-breakdown tables
    ReportFormat format = ReportFormat::text;
};

namespace detail {

template <class... Args>
[[nodiscard]] std::string format(const char* pattern, Args... args) {
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, pattern, args...);
    return buffer;
}

// Breaks `text` at spaces into lines of at most `width` columns; lines after
// the first start with `indent` spaces.
[[nodiscard]] inline std::string wrap(const std::string& text, std::size_t indent, std::size_t width = kReportColumns) {
    std::string out, line;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t space = text.find(' ', start);
        if (space == std::string::npos) space = text.size();
        const std::string word = text.substr(start, space - start);
        if (!line.empty() && line.size() + 1 + word.size() > width) {
            out += line + "\n";
            line = std::string(indent, ' ') + word;
        } else {
            if (!line.empty()) line += ' ';
            line += word;
        }
        start = space + 1;
    }
    return out + line + "\n";
}

[[nodiscard]] inline std::string describe_size(const ModelInfo& model) {
    if (model.parameters == 0 && model.bytes == 0) return "";
    return format(", %.1fM parameters, %.1f MiB", model.parameters / 1e6, model.bytes / (1024.0 * 1024.0));
}

[[nodiscard]] inline std::string describe_model(const ModelInfo& model) {
    return model.name + " (" + model.type + describe_size(model) + (model.synthetic ? ", synthetic" : "") + ")";
}

// Seconds as a person reads them: "51 s", "4.2 s", "380 ms".
[[nodiscard]] inline std::string rounded_seconds(double seconds) {
    if (seconds >= 10.0) return format("%.0f s", seconds);
    if (seconds >= 1.0) return format("%.1f s", seconds);
    return format("%.0f ms", seconds * 1e3);
}

[[nodiscard]] inline std::string greedy_text(const std::optional<bool>& match) {
    return !match ? "-" : (*match ? "match" : "DIFFER");
}

// A table rendered either as aligned text (first `left` columns left-aligned,
// the rest right-aligned) or as a Markdown table.
struct Table {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    std::size_t left = 2;

    void print(std::ostream& out, ReportFormat style) const {
        if (style == ReportFormat::markdown) {
            auto line = [&](const std::vector<std::string>& cells) {
                out << "|";
                for (const std::string& cell : cells) out << ' ' << cell << " |";
                out << "\n";
            };
            line(header);
            out << "|";
            for (std::size_t c = 0; c < header.size(); ++c) out << (c < left ? "---|" : "---:|");
            out << "\n";
            for (const auto& row : rows) line(row);
            return;
        }
        std::vector<std::size_t> widths(header.size(), 0);
        for (std::size_t c = 0; c < header.size(); ++c) widths[c] = header[c].size();
        for (const auto& row : rows)
            for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
        auto line = [&](const std::vector<std::string>& cells) {
            std::string text;
            for (std::size_t c = 0; c < cells.size(); ++c) {
                const std::string pad(widths[c] - cells[c].size(), ' ');
                if (c > 0) text += "  ";
                text += c < left ? cells[c] + pad : pad + cells[c];
            }
            while (!text.empty() && text.back() == ' ') text.pop_back();
            out << text << "\n";
        };
        line(header);
        for (const auto& row : rows) line(row);
    }
};

// Accepted / proposed drafts at each position, "-" under the sample floor.
[[nodiscard]] inline std::vector<std::string> per_position_cells(const GenerationStats& s, std::size_t positions) {
    std::vector<std::string> cells;
    for (std::size_t i = 0; i < positions; ++i) {
        const std::size_t proposed = i < s.proposed_at_position.size() ? s.proposed_at_position[i] : 0;
        const std::size_t accepted = i < s.accepted_at_position.size() ? s.accepted_at_position[i] : 0;
        cells.push_back(proposed < kPositionSampleFloor ? "-" : format("%.2f", double(accepted) / double(proposed)));
    }
    return cells;
}

[[nodiscard]] inline std::vector<double> temperatures_of(const BenchReport& report) {
    std::vector<double> temperatures;
    for (const ConfigurationResult& r : report.configurations)
        if (std::find(temperatures.begin(), temperatures.end(), r.temperature) == temperatures.end())
            temperatures.push_back(r.temperature);
    return temperatures;
}

[[nodiscard]] inline const ConfigurationResult* best_fixed_for(const BenchReport& report, const ConfigurationResult& a) {
    const ConfigurationResult* best = nullptr;
    for (const ConfigurationResult& r : report.configurations)
        if (!r.auto_length && r.rule == a.rule && r.temperature == a.temperature &&
            (best == nullptr || r.speedup() > best->speedup()))
            best = &r;
    return best;
}

// Auto against the best fixed k, paired by repetition (same round, prompt and
// seed, same baseline): the standard error of the mean of the per-repetition
// ratios. At T > 0 the two rows sample different continuations, so their
// acceptance differs by chance besides by policy. Negative: fewer than two pairs.
[[nodiscard]] inline double paired_ratio_standard_error(const ConfigurationResult& a, const ConfigurationResult& b) {
    const std::size_t paired = std::min(a.speedup_per_repetition.size(), b.speedup_per_repetition.size());
    if (paired < 2) return -1.0;
    double sum = 0.0, squares = 0.0;
    for (std::size_t i = 0; i < paired; ++i) {
        const double ratio = a.speedup_per_repetition[i] / b.speedup_per_repetition[i];
        sum += ratio;
        squares += ratio * ratio;
    }
    const double n = static_cast<double>(paired), mean = sum / n;
    return std::sqrt(std::max(0.0, (squares - n * mean * mean) / (n - 1.0)) / n);
}

}  // namespace detail

// The answer: one line per fact, each at most kReportColumns wide.
inline void print_verdict(std::ostream& out, const BenchReport& report, ReportStyle style = {}) {
    const char* bullet = style.format == ReportFormat::markdown ? "- " : "";
    auto line = [&](const std::string& text) { out << bullet << detail::wrap(text, 9); };
    for (const double t : detail::temperatures_of(report)) {
        const ConfigurationResult* best = nullptr;
        for (const ConfigurationResult& r : report.configurations)
            if (r.temperature == t && (best == nullptr || r.speedup() > best->speedup())) best = &r;
        if (best == nullptr) continue;
        const std::string row = (best->auto_length ? "" : "k=") + best->label();
        line(detail::format("best     T=%g  %.2fx  %s  (%.1f -> %.1f tok/s)", t, best->speedup(), row.c_str(),
                            best->autoregressive_tokens_per_second(), best->speculative_tokens_per_second()));
    }
    for (const ConfigurationResult& a : report.configurations) {
        if (!a.auto_length) continue;
        const ConfigurationResult* fixed = detail::best_fixed_for(report, a);
        if (fixed == nullptr || fixed->speedup() <= 0.0) continue;
        std::string text = detail::format("auto     T=%g %s: %.2fx = %.0f%% of the best fixed k (k=%zu: %.2fx)", a.temperature,
                                          std::string(to_string(a.rule)).c_str(), a.speedup(),
                                          100.0 * a.speedup() / fixed->speedup(), fixed->draft_tokens, fixed->speedup());
        if (const double se = detail::paired_ratio_standard_error(a, *fixed); se >= 0.0)
            text += detail::format(", s.e. %.0f%%", 100.0 * se);
        line(text);
    }
    bool any_greedy = false;
    for (const ConfigurationResult& r : report.configurations) any_greedy = any_greedy || r.greedy_match.has_value();
    for (const TreeResult& r : report.trees) any_greedy = any_greedy || r.greedy_match.has_value();
    bool trees_match = true;
    for (const TreeResult& r : report.trees) trees_match = trees_match && (!r.greedy_match || *r.greedy_match);
    if (any_greedy)
        line(report.all_greedy_runs_match() && trees_match
                 ? "greedy   identical: yes (at T=0 speculative decoding reproduced the autoregressive tokens "
                   "exactly in every run)"
                 : "greedy   identical: NO (see GREEDY MISMATCH below)");
    if (const double roofline = report.roofline_tokens_per_second(); roofline > 0.0) {
        const double achieved = report.autoregressive_tokens_per_second();
        line(detail::format("plain    %.1f tok/s = %.0f%% of the memory roofline (%.1f GB/s, %.1f MB/token)", achieved,
                            100.0 * achieved / roofline, report.machine.read_bandwidth / 1e9,
                            static_cast<double>(report.target.bytes_read_per_token) / 1e6));
    }
    std::string machine = "machine  " + report.machine.cpu + ", " + std::to_string(report.machine.threads) + " threads, " +
                          report.machine.backend + (report.machine.device.empty() ? "" : " (" + report.machine.device + ")");
    if (report.machine.load_average >= 0.0) {
        const bool shared =
            report.machine.hardware_threads > 0 && report.machine.load_average > 0.5 * report.machine.hardware_threads;
        machine += detail::format(", load %.2f at start", report.machine.load_average) +
                   (shared ? " (shared machine: timings are inflated and noisy)" : "");
    }
    line(machine);
    for (const ConfigurationResult& r : report.configurations)
        if (r.greedy_match && !*r.greedy_match)
            out << detail::wrap(detail::format("!!! GREEDY MISMATCH at T=0 k=%s: speculative tokens differ from "
                                               "autoregressive ones from token %zu on. Greedy speculative decoding must "
                                               "reproduce the target exactly; if the target's batched and single-token "
                                               "forwards round differently, near-ties can flip. !!!",
                                               r.label().c_str(), r.first_mismatch.value_or(0)),
                                4);
    for (const TreeResult& r : report.trees)
        if (r.greedy_match && !*r.greedy_match)
            out << detail::format("!!! GREEDY MISMATCH at T=0 tree %s from token %zu on !!!", r.label.c_str(),
                                  r.first_mismatch.value_or(0))
                << "\n";
    bool any_faster = false;
    for (const ConfigurationResult& r : report.configurations) any_faster = any_faster || r.speedup() >= 1.0;
    if (!report.configurations.empty() && !any_faster)
        line("note     no configuration beat autoregressive decoding here: a step must cost less than the tokens it "
             "yields (k*c + v_k < E); compare the measured c and v_k with alpha");
}

// What ran: models, prompt, rounds, the measured forward costs.
inline void print_header(std::ostream& out, const BenchReport& report) {
    out << detail::wrap("target:  " + detail::describe_model(report.target), 9);
    out << detail::wrap("draft:   " + detail::describe_model(report.draft), 9);
    if (report.target.synthetic || report.draft.synthetic)
        out << detail::wrap("note:    synthetic models have random weights: their acceptance depends on how the draft was "
                            "derived, not on language; use --target/--draft for real models",
                            9);
    std::string prompt = "prompt:  " + std::to_string(report.prompt_tokens) + " tokens ";
    if (report.prompt_text) prompt += '"' + *report.prompt_text + '"';
    else prompt += report.prompt_per_repetition ? "(seeded random ids, one prompt per repetition)" : "(seeded random ids)";
    prompt += ", " + std::to_string(report.new_tokens) + " new tokens, " + std::to_string(report.repetitions) +
              " repetitions (rounds over every row";
    if (report.time_budget_seconds > 0.0)
        prompt += detail::format("; as many as fit in %.0f s, at most %zu", report.time_budget_seconds, report.max_repetitions);
    prompt += report.interleaved_rows
                  ? "; within a round all rows step by step in turn, the baseline whole before or after them"
                  : "; one row after another";
    prompt += "), seed " + std::to_string(report.seed);
    out << detail::wrap(prompt, 9);
    out << detail::wrap(detail::format("costs:   target forward %.2f ms/token, draft %.3f ms/token, c = %.3f",
                                       report.costs.target_step_seconds * 1e3, report.costs.draft_step_seconds * 1e3,
                                       report.costs.cost_ratio()),
                        9);
}

// Prefill speed and time to first token (one line per measured prompt).
inline void print_prefill(std::ostream& out, const BenchReport& report) {
    const double decode = report.costs.decode_tokens_per_second();
    for (const PrefillMeasurement& p : report.costs.prefill)
        out << detail::wrap(detail::format("prefill: %zu-token prompt at %.1f tok/s, time to first token %.1f ms; "
                                           "one-token decode %.1f tok/s (prefill %.1fx decode)",
                                           p.tokens, p.tokens_per_second(), 1e3 * p.seconds, decode,
                                           decode > 0.0 ? p.tokens_per_second() / decode : 0.0),
                            9);
}

// The chain rows. c, the same for every row, is on the costs line. Auto rows
// print "-" for v_k (their length varied; the prediction averages the model
// over the lengths chosen) and the mean of the lengths they chose.
inline void print_table(std::ostream& out, const BenchReport& report, ReportStyle style = {}) {
    detail::Table table{{"T", "k", "tok/s", "speedup", "per rep.", "alpha", "tok/pass", "mean k", "v_k", "pred.", "effic.",
                         "greedy"},
                        {},
                        2};
    for (const ConfigurationResult& r : report.configurations)
        table.rows.push_back({detail::format("%g", r.temperature), r.label(),
                              detail::format("%.1f", r.speculative_tokens_per_second()),
                              detail::format("%.2fx", r.speedup()),
                              detail::format("%.2f-%.2f", r.slowest_repetition_speedup(), r.fastest_repetition_speedup()),
                              detail::format("%.3f", r.alpha()), detail::format("%.2f", r.mean_tokens_per_target_pass()),
                              detail::format("%.2f", r.mean_draft_length()),
                              r.auto_length ? "-" : detail::format("%.2f", r.verification_cost_ratio),
                              detail::format("%.2fx", r.predicted_speedup()), detail::format("%.2f", r.efficiency()),
                              detail::greedy_text(r.greedy_match)});
    out << "\n";
    table.print(out, style.format);
    if (!style.verbose) return;

    std::size_t positions = 0;
    for (const ConfigurationResult& r : report.configurations)
        positions = std::max(positions, r.speculative.proposed_at_position.size());
    out << "\n"
        << detail::wrap(detail::format("acceptance by draft position (accepted / proposed; - : proposed fewer than %zu "
                                       "times), acc.rate = accepted / proposed drafts",
                                       kPositionSampleFloor),
                        0);
    detail::Table acceptance{{"T", "k", "acc.rate"}, {}, 2};
    for (std::size_t i = 0; i < positions; ++i) acceptance.header.push_back(std::to_string(i + 1));
    for (const ConfigurationResult& r : report.configurations) {
        std::vector<std::string> row{detail::format("%g", r.temperature), r.label(), detail::format("%.3f", r.acceptance_rate())};
        for (std::string& cell : detail::per_position_cells(r.speculative, positions)) row.push_back(std::move(cell));
        acceptance.rows.push_back(std::move(row));
    }
    acceptance.print(out, style.format);

    out << "\n"
        << detail::wrap("where a step's time goes (ms per target pass): measured draft + verify + accept + other vs the "
                        "model's k*c + v_k; lengths = count of steps with n = 0, 1, ... drafts",
                        0);
    detail::Table times{{"T", "k", "draft", "verify", "accept", "other", "total", "model", "lengths"}, {}, 2};
    for (const ConfigurationResult& r : report.configurations) {
        const ConfigurationResult::StepTimes t = r.step_times();
        std::string lengths;
        for (const std::size_t count : r.speculative.draft_length_counts) {
            if (!lengths.empty()) lengths += ' ';
            lengths += std::to_string(count);
        }
        times.rows.push_back({detail::format("%g", r.temperature), r.label(), detail::format("%.2f", t.draft * 1e3),
                              detail::format("%.2f", t.target * 1e3), detail::format("%.2f", t.acceptance * 1e3),
                              detail::format("%.2f", t.other * 1e3),
                              detail::format("%.2f", (t.draft + t.target + t.acceptance + t.other) * 1e3),
                              detail::format("%.2f", t.predicted * 1e3), lengths});
    }
    times.print(out, style.format);
}

// The --tree rows: shape, nodes and tokens per target pass, speedup against
// the interleaved autoregressive runs, predicted speedup and efficiency, and
// per temperature the best tree against the best chain.
inline void print_tree_table(std::ostream& out, const BenchReport& report, ReportStyle style = {}) {
    if (report.trees_skipped) out << "\n" << detail::wrap("token trees not run: " + *report.trees_skipped, 4);
    if (report.trees.empty()) return;
    out << "\ntoken trees (one target pass verifies every node)\n";
    detail::Table table{{"T", "tree", "shape drafted", "nodes/pass", "tok/pass", "tok/s", "speedup", "per rep.", "pred.",
                         "effic.", "greedy"},
                        {},
                        3};
    for (const TreeResult& r : report.trees)
        table.rows.push_back({detail::format("%g", r.temperature), r.label, r.shape, detail::format("%.2f", r.nodes_per_pass()),
                              detail::format("%.2f", r.tokens_per_pass()),
                              detail::format("%.1f", r.speculative_tokens_per_second()), detail::format("%.2fx", r.speedup()),
                              detail::format("%.2f-%.2f", r.slowest_repetition_speedup(), r.fastest_repetition_speedup()),
                              detail::format("%.2fx", r.predicted_speedup), detail::format("%.2f", r.efficiency()),
                              detail::greedy_text(r.greedy_match)});
    table.print(out, style.format);
    if (style.verbose) {
        out << "\n"
            << detail::wrap("per target pass: draft, verify and accept ms, draft passes and pass width; acceptance of "
                            "ranks 0, 1, 2 at depth 1",
                            0);
        detail::Table times{{"T", "tree", "draft", "verify", "accept", "drafts", "width", "a(1,0)", "a(1,1)", "a(1,2)"}, {}, 2};
        for (const TreeResult& r : report.trees) {
            const GenerationStats& s = r.speculative;
            const double passes = static_cast<double>(std::max<std::size_t>(1, s.target_forward_passes));
            const double after_prefill = static_cast<double>(s.target_tokens - s.prefill_tokens);
            times.rows.push_back({detail::format("%g", r.temperature), r.label,
                                  detail::format("%.2f", 1e3 * s.draft_seconds / passes),
                                  detail::format("%.2f", 1e3 * s.target_seconds / passes),
                                  detail::format("%.2f", 1e3 * s.acceptance_seconds / passes),
                                  detail::format("%.2f", static_cast<double>(s.draft_forward_passes) / passes),
                                  detail::format("%.2f", after_prefill / passes), detail::format("%.2f", r.acceptance(0, 0)),
                                  detail::format("%.2f", r.acceptance(0, 1)), detail::format("%.2f", r.acceptance(0, 2))});
        }
        times.print(out, style.format);
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
        std::string text = detail::format("best tree at T=%g: %s (%s) %.2fx", t, best_tree->label.c_str(),
                                          best_tree->shape.c_str(), best_tree->speedup());
        if (best_chain != nullptr)
            text += detail::format(", best chain k=%s %.2fx: tree/chain %.2f", best_chain->label().c_str(),
                                   best_chain->speedup(), best_tree->speedup() / best_chain->speedup());
        out << detail::wrap(text, 4);
        // Each --tree-auto-variant against the default auto row: the A/B of its settings.
        const TreeResult* automatic = nullptr;
        for (const TreeResult& r : report.trees)
            if (r.temperature == t && r.label == "auto") automatic = &r;
        for (const TreeResult& r : report.trees) {
            if (r.temperature != t || !r.label.starts_with("auto:") || automatic == nullptr || automatic->speedup() <= 0.0)
                continue;
            out << detail::wrap(detail::format("%s / auto at T=%g: %.2f (%s against %s)", r.label.c_str(), t,
                                               r.speedup() / automatic->speedup(), r.shape.c_str(),
                                               automatic->shape.c_str()),
                                4);
        }
    }
}

// The whole console report, answer first.
inline void print_report(std::ostream& out, const BenchReport& report, ReportStyle style = {}) {
    out << detail::wrap("specdec-bench  " + report.target.name + " target / " + report.draft.name + " draft", 15);
    print_verdict(out, report, style);
    print_table(out, report, style);
    print_tree_table(out, report, style);
    out << "\n";
    print_header(out, report);
    print_prefill(out, report);
    out << "wall time " << detail::rounded_seconds(report.wall_seconds) << "\n";
    if (!style.verbose && style.format == ReportFormat::text)
        out << "--verbose: per-position acceptance, time per step   --format md: Markdown   --help: the columns\n";
}

}  // namespace specdec::bench
