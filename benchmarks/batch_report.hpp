#pragma once
// The reports of --batch (batch_bench.hpp): the console report (verdict
// first, then one row per batch size and variant, at most kReportColumns
// wide; --verbose adds what the auto policy learned and chose), the JSON
// report (its "batch" section) and the SVG (tokens per second and the ratio
// to batched autoregressive decoding against the batch size, one line per
// variant, measured solid and predicted dashed).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "batch_results.hpp"
#include "report_json.hpp"
#include "report_svg.hpp"
#include "report_table.hpp"

namespace specdec::bench {

// The bar for the auto variant (docs/benchmark.md, "--batch").
inline constexpr double kBatchAutoFloor = 0.97;        // of batched autoregressive, every batch size
inline constexpr double kBatchAutoSingleFloor = 1.8;   // of batched autoregressive at batch size 1
inline constexpr double kBatchAutoOfBestFloor = 0.95;  // of the best of {autoregressive, each fixed k}

namespace detail {

// Ratio of variant v to the autoregressive variant, round by round (the
// rounds pair them: same requests, same moment of the machine).
[[nodiscard]] inline std::pair<double, double> per_round_ratio_range(const BatchSizeResult& size, const BatchVariantResult& v) {
    const auto& baseline = size.autoregressive().tokens_per_second_per_round;
    double low = 0.0, high = 0.0;
    bool first = true;
    for (std::size_t r = 0; r < std::min(baseline.size(), v.tokens_per_second_per_round.size()); ++r) {
        if (baseline[r] <= 0.0) continue;
        const double ratio = v.tokens_per_second_per_round[r] / baseline[r];
        low = first ? ratio : std::min(low, ratio);
        high = first ? ratio : std::max(high, ratio);
        first = false;
    }
    return {low, high};
}

[[nodiscard]] inline std::string chosen_lengths_text(const BatchVariantResult& v) {
    std::string text;
    for (std::size_t n = 0; n < v.length_counts.size(); ++n) {
        if (v.length_counts[n] == 0) continue;
        if (!text.empty()) text += ", ";
        text += format("k=%zu x%zu", n, v.length_counts[n]);
    }
    return text.empty() ? "none" : text;
}

// Each steady-state step of the last round as its lengths ("4444", "0000"),
// or its mean length where the batch is wider than 8.
[[nodiscard]] inline std::string per_step_lengths_text(const BatchVariantResult& v) {
    std::string text;
    for (const PlannedLengths& step : v.last_round_lengths) {
        if (!text.empty()) text += ' ';
        if (step.size() <= 8) {
            for (const std::uint8_t k : step) text += k < 10 ? char('0' + k) : '+';
        } else {
            double sum = 0.0;
            for (const std::uint8_t k : step) sum += k;
            text += format("%.1f", sum / double(step.size()));
        }
    }
    return text;
}

}  // namespace detail

inline void print_batch_verdict(std::ostream& out, const BatchReport& report, ReportStyle style = {}) {
    const char* bullet = style.format == ReportFormat::markdown ? "- " : "";
    auto line = [&](const std::string& text) { out << bullet << detail::wrap(text, 9); };
    std::string versus_ar = "auto     / batched AR:", versus_best = "auto     / best of {AR, fixed k}:",
                fixed = "best k   / batched AR:";
    double lowest_ar = 1e9, lowest_best = 1e9;
    bool bar = true;
    for (const BatchSizeResult& s : report.sizes) {
        const BatchVariantResult* a = s.automatic();
        const BatchVariantResult* best_fixed = s.best_fixed();
        const BatchVariantResult& best = s.best_static();
        if (!a) continue;
        const double ar_ratio = s.ratio_to_autoregressive(*a);
        const double best_ratio = best.tokens_per_second() > 0.0 ? a->tokens_per_second() / best.tokens_per_second() : 0.0;
        versus_ar += detail::format(" B=%zu %.2fx", s.batch, ar_ratio);
        versus_best += detail::format(" B=%zu %.0f%% (%s)", s.batch, 100.0 * best_ratio, best.label().c_str());
        if (best_fixed)
            fixed += detail::format(" B=%zu %s %.2fx", s.batch, best_fixed->label().c_str(), s.ratio_to_autoregressive(*best_fixed));
        lowest_ar = std::min(lowest_ar, ar_ratio);
        lowest_best = std::min(lowest_best, best_ratio);
        bar = bar && ar_ratio >= kBatchAutoFloor && best_ratio >= kBatchAutoOfBestFloor &&
              (s.batch != 1 || ar_ratio >= kBatchAutoSingleFloor);
    }
    line(versus_ar);
    line(versus_best);
    line(fixed);
    // Each --auto-variant against the default auto: the A/B of its settings.
    if (!report.sizes.empty())
        for (const BatchVariantResult& v : report.sizes.front().variants) {
            if (v.kind != BatchVariantKind::automatic || v.auto_variant.empty()) continue;
            std::string ab = detail::format("%-8s / auto:", v.label().c_str());
            for (const BatchSizeResult& s : report.sizes) {
                const BatchVariantResult* a = s.automatic();
                for (const BatchVariantResult& w : s.variants)
                    if (a && w.auto_variant == v.auto_variant && a->tokens_per_second() > 0.0)
                        ab += detail::format(" B=%zu %.2fx", s.batch, w.tokens_per_second() / a->tokens_per_second());
            }
            line(ab);
        }
    if (const auto crossover = report.crossover()) {
        line(detail::format("crossover from B=%zu no fixed k is faster than batched autoregressive decoding", *crossover));
    } else {
        line("crossover none: some fixed k beat batched autoregressive decoding at every batch size measured");
    }
    // Where each fixed k loses to plain batched decoding.
    std::string loses = "fixed k  loses to AR:";
    bool any_loss = false;
    if (!report.sizes.empty()) {
        for (const BatchVariantResult& v : report.sizes.front().variants) {
            if (v.kind != BatchVariantKind::fixed) continue;
            std::string at;
            for (const BatchSizeResult& s : report.sizes)
                for (const BatchVariantResult& w : s.variants)
                    if (w.kind == BatchVariantKind::fixed && w.draft_tokens == v.draft_tokens &&
                        s.ratio_to_autoregressive(w) < 1.0)
                        at += (at.empty() ? "" : ",") + std::to_string(s.batch);
            if (at.empty()) continue;
            loses += " " + v.label() + " at B=" + at + ";";
            any_loss = true;
        }
    }
    if (any_loss) {
        loses.pop_back();
        line(loses);
    } else {
        line("fixed k  loses to AR: nowhere in the batch sizes measured");
    }
    line(detail::format("bar      auto >= %.2fx AR at every B, >= %.1fx at B=1, >= %.0f%% of the best of {AR, fixed k}: "
                        "%s (lowest %.2fx AR, %.0f%% of the best)",
                        kBatchAutoFloor, kBatchAutoSingleFloor, 100.0 * kBatchAutoOfBestFloor, bar ? "met" : "NOT met",
                        lowest_ar, 100.0 * lowest_best));
    bool any_greedy = false;
    for (const BatchSizeResult& s : report.sizes)
        for (const BatchVariantResult& v : s.variants) any_greedy = any_greedy || v.greedy_match.has_value();
    if (any_greedy)
        line(report.all_greedy_runs_match()
                 ? "greedy   identical: yes (at T=0 every request of every speculative variant emitted the batched "
                   "autoregressive tokens exactly)"
                 : "greedy   identical: NO (a speculative variant's tokens differ from batched autoregressive ones; "
                   "see the greedy column)");
    std::string machine = "machine  " + report.machine.cpu + ", " + std::to_string(report.machine.threads) + " threads, " +
                          report.machine.backend;
    if (report.machine.load_average >= 0.0) {
        const bool shared =
            report.machine.hardware_threads > 0 && report.machine.load_average > 0.5 * report.machine.hardware_threads;
        machine += detail::format(", load %.2f at start", report.machine.load_average) +
                   (shared ? " (shared machine: timings are inflated and noisy)" : "");
    }
    line(machine);
}

inline void print_batch_table(std::ostream& out, const BatchReport& report, ReportStyle style = {}) {
    detail::Table table{{"B", "variant", "tok/s", "x AR", "per round", "pred.", "x AR", "effic.", "latency", "tok/seq",
                         "mean k", "greedy"},
                        {},
                        2};
    for (const BatchSizeResult& s : report.sizes) {
        for (const BatchVariantResult& v : s.variants) {
            const auto [low, high] = detail::per_round_ratio_range(s, v);
            table.rows.push_back({std::to_string(s.batch), v.label(), detail::format("%.1f", v.tokens_per_second()),
                                  detail::format("%.2fx", s.ratio_to_autoregressive(v)),
                                  detail::format("%.2f-%.2f", low, high),
                                  detail::format("%.1f", v.predicted_tokens_per_second()),
                                  detail::format("%.2fx", s.predicted_ratio_to_autoregressive(v)),
                                  detail::format("%.2f", v.efficiency()), detail::rounded_seconds(v.mean_latency_seconds()),
                                  detail::format("%.2f", v.tokens_per_sequence_step()),
                                  detail::format("%.2f", v.mean_draft_length()), detail::greedy_text(v.greedy_match)});
        }
    }
    out << "\n";
    table.print(out, style.format);
    if (!style.verbose) return;

    out << "\n"
        << detail::wrap("what the auto policy learned at each batch size: V(n) = target pass over n tokens, D(b) = "
                        "draft round over b sequences (ms), a_m = pooled acceptance of draft m, s = pseudo-samples of "
                        "the pooled a_m in a request's own estimate (learned from how much the requests differ), "
                        "plain: steps run plain to time the plain rate of the plan's own time, and plain probes left "
                        "out while drafting clearly won (every round)",
                        0);
    for (const BatchSizeResult& s : report.sizes) {
        std::string text = detail::format("B=%zu  V:", s.batch);
        for (const auto& [n, v] : s.auto_costs.target_pass_seconds) text += detail::format(" %zu:%.1f", n, 1e3 * v);
        text += "  D:";
        for (const auto& [b, d] : s.auto_costs.draft_round_seconds) text += detail::format(" %zu:%.2f", b, 1e3 * d);
        text += "  a:";
        for (const double a : s.auto_costs.pooled_acceptance) text += detail::format(" %.2f", a);
        text += detail::format("  s: %.0f", s.auto_costs.request_prior_strength);
        text += detail::format("  plain: %zu run, %zu left out", s.auto_costs.plain_refreshes,
                               s.auto_costs.plain_probes_skipped);
        out << detail::wrap(text, 6);
    }
    out << "\n"
        << detail::wrap("the lengths auto chose: (request, step) pairs of the steady state per length; then each step "
                        "of the last round (a digit per request, or the mean where B > 8)",
                        0);
    for (const BatchSizeResult& s : report.sizes) {
        const BatchVariantResult* a = s.automatic();
        if (!a) continue;
        out << detail::wrap(detail::format("B=%zu  %s; %zu of %zu steps without drafts", s.batch,
                                           detail::chosen_lengths_text(*a).c_str(), a->steps_without_drafts(),
                                           a->last_round_lengths.size()),
                            6);
        out << detail::wrap(detail::format("B=%zu  steps: ", s.batch) + detail::per_step_lengths_text(*a), 6);
    }
}

inline void print_batch_report(std::ostream& out, const BatchReport& report, ReportStyle style = {}) {
    out << detail::wrap("specdec-bench --batch  " + report.target.name + " target / " + report.draft.name + " draft", 15);
    print_batch_verdict(out, report, style);
    print_batch_table(out, report, style);
    out << "\n";
    out << detail::wrap("target:  " + detail::describe_model(report.target), 9);
    out << detail::wrap("draft:   " + detail::describe_model(report.draft), 9);
    const BatchSettings& s = report.settings;
    out << detail::wrap(
        detail::format("requests: %zu x B (at least %zu) per batch size and variant, each a %zu-token seeded prompt and %zu new tokens "
                       "at T=%g, %s verification; B slots, a finished request replaced by a waiting one; counted: the steps with all B "
                       "slots decoding, their prompts' prefill left out; %zu rounds, the variants stepping in turn%s; "
                       "seed %llu",
                       s.waves, s.min_requests, s.prompt_tokens, s.new_tokens, s.temperature,
                       verification_name(s),
                       s.rounds,
                       s.learn_auto_first ? ", auto first serving one untimed run and the others one request per slot" : "",
                       static_cast<unsigned long long>(s.seed)),
        9);
    out << detail::wrap("columns: x AR = tok/s / batched autoregressive tok/s (per round: the lowest-highest round); "
                        "pred. = sum E_i(k_i) / step_seconds (V(sum (k_i + 1)) + sum_r D(b_r) + r rows + o), asked of the "
                        "batch model before each step, from the variant's own timings and acceptance; latency = mean seconds from admission to a request's last token; tok/seq = tokens "
                        "per request per step",
                        9);
    out << "wall time " << detail::rounded_seconds(report.wall_seconds) << "\n";
    if (!style.verbose && style.format == ReportFormat::text)
        out << "--verbose: the auto policy's learned costs and chosen lengths   --format md: Markdown\n";
}

[[nodiscard]] inline nlohmann::ordered_json batch_variant_to_json(const BatchSizeResult& size, const BatchVariantResult& v) {
    using json = nlohmann::ordered_json;
    json lengths = json::array();
    if (v.kind == BatchVariantKind::automatic)
        for (const PlannedLengths& step : v.last_round_lengths) {
            json row = json::array();
            for (const std::uint8_t k : step) row.push_back(k);
            lengths.push_back(row);
        }
    return {{"variant", v.label()},
            {"method", v.kind == BatchVariantKind::autoregressive ? "autoregressive"
                       : v.kind == BatchVariantKind::fixed        ? "fixed"
                                                                  : "auto"},
            {"draft_tokens", v.draft_tokens},
            {"rounds", v.rounds},
            {"steps", v.steps},
            {"tokens", v.tokens},
            {"seconds", v.seconds},
            {"tokens_per_second", v.tokens_per_second()},
            {"ratio_to_autoregressive", size.ratio_to_autoregressive(v)},
            {"tokens_per_second_per_round", v.tokens_per_second_per_round},
            {"predicted_tokens_per_second", v.predicted_tokens_per_second()},
            {"predicted_ratio_to_autoregressive", size.predicted_ratio_to_autoregressive(v)},
            {"efficiency", v.efficiency()},
            {"requests", v.requests},
            {"mean_latency_seconds", v.mean_latency_seconds()},
            {"target_tokens", v.target_tokens},
            {"drafts", v.drafts},
            {"draft_rounds", v.draft_rounds},
            {"mean_draft_length", v.mean_draft_length()},
            {"tokens_per_sequence_step", v.tokens_per_sequence_step()},
            {"acceptance_rate", v.drafts ? json(v.acceptance_rate()) : json(nullptr)},
            {"length_counts", v.length_counts},
            {"chosen_lengths_last_round", lengths},
            {"greedy_match", v.greedy_match ? json(*v.greedy_match) : json(nullptr)}};
}

[[nodiscard]] inline nlohmann::ordered_json batch_section_to_json(const BatchReport& report) {
    using json = nlohmann::ordered_json;
    json sizes = json::array();
    for (const BatchSizeResult& s : report.sizes) {
        json variants = json::array();
        for (const BatchVariantResult& v : s.variants) variants.push_back(batch_variant_to_json(s, v));
        const BatchVariantResult* a = s.automatic();
        const BatchVariantResult* fixed = s.best_fixed();
        const BatchVariantResult& best = s.best_static();
        json target = json::array(), draft = json::array();
        for (const auto& [n, v] : s.auto_costs.target_pass_seconds) target.push_back({{"tokens", n}, {"seconds", v}});
        for (const auto& [b, d] : s.auto_costs.draft_round_seconds) draft.push_back({{"sequences", b}, {"seconds", d}});
        sizes.push_back(
            {{"batch", s.batch},
             {"auto_over_autoregressive", a ? json(s.ratio_to_autoregressive(*a)) : json(nullptr)},
             {"best_fixed", fixed ? json(fixed->label()) : json(nullptr)},
             {"best_fixed_over_autoregressive", fixed ? json(s.ratio_to_autoregressive(*fixed)) : json(nullptr)},
             {"best_of_autoregressive_and_fixed", best.label()},
             {"auto_over_best", a && best.tokens_per_second() > 0.0 ? json(a->tokens_per_second() / best.tokens_per_second())
                                                                    : json(nullptr)},
             {"variants", variants},
             {"auto_learned",
              {{"target_pass_seconds", target}, {"draft_round_seconds", draft}, {"pooled_acceptance", s.auto_costs.pooled_acceptance},
               {"request_prior_strength", s.auto_costs.request_prior_strength},
               {"plain_refreshes", s.auto_costs.plain_refreshes},
               {"plain_probes_skipped", s.auto_costs.plain_probes_skipped}}}});
    }
    const BatchSettings& st = report.settings;
    const auto crossover = report.crossover();
    return {{"settings",
             {{"batch_sizes", st.batch_sizes},
              {"fixed_draft_tokens", st.fixed_lengths},
              {"auto_max_draft_tokens", st.auto_max_draft_tokens},
              {"temperature", st.temperature},
              {"verification", verification_name(st)},
              {"new_tokens", st.new_tokens},
              {"requests_per_slot", st.waves},
              {"min_requests", st.min_requests},
              {"rounds", st.rounds},
              {"prompt_tokens", st.prompt_tokens},
              {"auto_learned_first", st.learn_auto_first},
              {"seed", st.seed}}},
            {"crossover_batch", crossover ? json(*crossover) : json(nullptr)},
            {"greedy_match", report.all_greedy_runs_match()},
            {"wall_seconds", report.wall_seconds},
            {"sizes", sizes}};
}

// The --batch run's whole JSON file: machine and models as in the default
// report, the measurements under "batch".
[[nodiscard]] inline nlohmann::ordered_json batch_report_to_json(const BatchReport& report) {
    using json = nlohmann::ordered_json;
    return {{"format_version", kReportFormatVersion},
            {"machine",
             {{"cpu", report.machine.cpu},
              {"threads", report.machine.threads},
              {"backend", report.machine.backend},
              {"hardware_threads", report.machine.hardware_threads},
              {"load_average", report.machine.load_average >= 0.0 ? json(report.machine.load_average) : json(nullptr)}}},
            {"models", {{"target", model_to_json(report.target)}, {"draft", model_to_json(report.draft)}}},
            {"batch", batch_section_to_json(report)}};
}

// Left: tokens per second against the batch size (log scale), one colour per
// variant, measured solid, predicted dashed. Right: the ratio to batched
// autoregressive decoding, with the break-even line.
[[nodiscard]] inline std::string batch_report_to_svg(const BatchReport& report) {
    using detail::svg_number;
    static const char* const kColours[] = {"#333333", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"};
    const char* const auto_colour = "#d62728";
    std::vector<std::pair<double, std::string>> ticks;
    double top_rate = 1.0, top_ratio = 1.0;
    for (const BatchSizeResult& s : report.sizes) {
        ticks.emplace_back(std::log2(double(std::max<std::size_t>(1, s.batch))), std::to_string(s.batch));
        for (const BatchVariantResult& v : s.variants) {
            top_rate = std::max({top_rate, v.tokens_per_second(), v.predicted_tokens_per_second()});
            top_ratio = std::max(top_ratio, s.ratio_to_autoregressive(v));
        }
    }
    const double x_min = ticks.empty() ? 0.0 : ticks.front().first;
    double x_max = ticks.empty() ? 1.0 : ticks.back().first;
    if (x_max <= x_min) x_max = x_min + 1.0;
    const double rate_step = detail::nice_step(top_rate * 1.1), ratio_step = detail::nice_step(top_ratio * 1.1);
    const detail::PlotArea rate_area{70, 60, 380, 280, x_min, x_max, 0.0, std::ceil(top_rate * 1.1 / rate_step) * rate_step};
    const detail::PlotArea ratio_area{560, 60, 380, 280, x_min, x_max, 0.0, std::ceil(top_ratio * 1.1 / ratio_step) * ratio_step};

    const std::size_t variants = report.sizes.empty() ? 0 : report.sizes.front().variants.size();
    const std::string height = svg_number(420.0 + 18.0 * static_cast<double>(std::max<std::size_t>(2, variants)));
    std::ostringstream svg;
    svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"" << height << "\" font-family=\"sans-serif\">\n";
    svg << "<rect width=\"1000\" height=\"" << height << "\" fill=\"white\"/>\n";
    svg << "<text x=\"500\" y=\"22\" text-anchor=\"middle\" font-size=\"13\">"
        << detail::escape_xml("batched decoding: target " + report.target.name + ", draft " + report.draft.name + " — " +
                              report.machine.cpu + ", " + std::to_string(report.machine.threads) + " threads")
        << "</text>\n";
    detail::draw_axes(svg, rate_area, ticks, rate_step, "total tokens per second", "tok/s", "batch size B");
    detail::draw_axes(svg, ratio_area, ticks, ratio_step, "over batched autoregressive", "ratio (x)", "batch size B");
    svg << "<line x1=\"" << svg_number(ratio_area.left) << "\" y1=\"" << svg_number(ratio_area.y(1.0)) << "\" x2=\""
        << svg_number(ratio_area.left + ratio_area.width) << "\" y2=\"" << svg_number(ratio_area.y(1.0))
        << "\" stroke=\"#777\" stroke-dasharray=\"2 3\"/>\n";
    for (std::size_t v = 0; v < variants; ++v) {
        const BatchVariantResult& first = report.sizes.front().variants[v];
        const std::string colour = first.kind == BatchVariantKind::automatic ? auto_colour : kColours[v % std::size(kColours)];
        detail::Series measured, predicted, ratio;
        for (const BatchSizeResult& s : report.sizes) {
            if (v >= s.variants.size()) continue;
            const double x = std::log2(double(std::max<std::size_t>(1, s.batch)));
            measured.points.emplace_back(x, s.variants[v].tokens_per_second());
            if (s.variants[v].predicted_tokens_per_second() > 0.0)
                predicted.points.emplace_back(x, s.variants[v].predicted_tokens_per_second());
            ratio.points.emplace_back(x, s.ratio_to_autoregressive(s.variants[v]));
        }
        detail::draw_series(svg, rate_area, measured, colour, false, true);
        detail::draw_series(svg, rate_area, predicted, colour, true, false);
        detail::draw_series(svg, ratio_area, ratio, colour, false, true);
        const double legend_y = 400 + 18.0 * static_cast<double>(v);
        svg << "<line x1=\"70\" y1=\"" << svg_number(legend_y) << "\" x2=\"100\" y2=\"" << svg_number(legend_y)
            << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
        svg << "<text x=\"106\" y=\"" << svg_number(legend_y + 4) << "\" font-size=\"12\">"
            << detail::escape_xml(first.kind == BatchVariantKind::autoregressive ? "batched autoregressive" : first.label())
            << "</text>\n";
    }
    svg << "<text x=\"300\" y=\"404\" font-size=\"12\">solid: measured · dashed: predicted from the timed passes and "
           "acceptance</text>\n";
    svg << "</svg>\n";
    return svg.str();
}

}  // namespace specdec::bench
