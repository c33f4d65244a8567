#pragma once
// A dependency-free SVG plot of a report: left, measured (solid) and predicted
// (dashed) speedup against draft length; right, per-token acceptance alpha
// against draft length. One colour per temperature.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_results.hpp"

namespace specdec::bench {

namespace detail {

struct PlotArea {
    double left, top, width, height;  // pixels
    double x_min, x_max, y_min, y_max;  // data

    [[nodiscard]] double x(double value) const {
        const double span = x_max > x_min ? x_max - x_min : 1.0;
        return left + (value - x_min) / span * width;
    }
    [[nodiscard]] double y(double value) const {
        const double span = y_max > y_min ? y_max - y_min : 1.0;
        return top + height - (value - y_min) / span * height;
    }
};

[[nodiscard]] inline std::string svg_number(double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f", value);
    return buffer;
}

[[nodiscard]] inline std::string escape_xml(const std::string& text) {
    std::string out;
    for (const char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

// A tick step of 1, 2 or 5 times a power of ten giving about five ticks.
[[nodiscard]] inline double nice_step(double range) {
    const double raw = range / 5.0;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    for (const double factor : {1.0, 2.0, 5.0}) {
        if (factor * magnitude >= raw) return factor * magnitude;
    }
    return 10.0 * magnitude;
}

// x_ticks: (position in data units, label) pairs.
inline void draw_axes(std::ostringstream& svg, const PlotArea& area, const std::vector<std::pair<double, std::string>>& x_ticks,
                      double y_step, const std::string& title, const std::string& y_label, const std::string& x_label) {
    svg << "<text x=\"" << svg_number(area.left + area.width / 2) << "\" y=\"" << svg_number(area.top - 12)
        << "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << escape_xml(title) << "</text>\n";
    for (double tick = area.y_min; tick <= area.y_max + 1e-9; tick += y_step) {
        const std::string y = svg_number(area.y(tick));
        svg << "<line x1=\"" << svg_number(area.left) << "\" y1=\"" << y << "\" x2=\"" << svg_number(area.left + area.width)
            << "\" y2=\"" << y << "\" stroke=\"#e4e4e4\"/>\n";
        char label[32];
        std::snprintf(label, sizeof label, y_step < 0.1 ? "%.2f" : "%.1f", tick);
        svg << "<text x=\"" << svg_number(area.left - 6) << "\" y=\"" << svg_number(area.y(tick) + 4)
            << "\" text-anchor=\"end\" font-size=\"11\">" << label << "</text>\n";
    }
    for (const auto& [position, tick_label] : x_ticks) {
        const std::string x = svg_number(area.x(position));
        svg << "<line x1=\"" << x << "\" y1=\"" << svg_number(area.top + area.height) << "\" x2=\"" << x << "\" y2=\""
            << svg_number(area.top + area.height + 5) << "\" stroke=\"#333\"/>\n";
        svg << "<text x=\"" << x << "\" y=\"" << svg_number(area.top + area.height + 18)
            << "\" text-anchor=\"middle\" font-size=\"11\">" << escape_xml(tick_label) << "</text>\n";
    }
    svg << "<rect x=\"" << svg_number(area.left) << "\" y=\"" << svg_number(area.top) << "\" width=\""
        << svg_number(area.width) << "\" height=\"" << svg_number(area.height)
        << "\" fill=\"none\" stroke=\"#333\"/>\n";
    svg << "<text x=\"" << svg_number(area.left + area.width / 2) << "\" y=\"" << svg_number(area.top + area.height + 36)
        << "\" text-anchor=\"middle\" font-size=\"12\">" << escape_xml(x_label) << "</text>\n";
    const std::string label_x = svg_number(area.left - 40), label_y = svg_number(area.top + area.height / 2);
    svg << "<text x=\"" << label_x << "\" y=\"" << label_y << "\" text-anchor=\"middle\" font-size=\"12\" transform=\"rotate(-90 "
        << label_x << " " << label_y << ")\">" << escape_xml(y_label) << "</text>\n";
}

inline void draw_axes(std::ostringstream& svg, const PlotArea& area, const std::vector<std::size_t>& x_ticks,
                      double y_step, const std::string& title, const std::string& y_label) {
    std::vector<std::pair<double, std::string>> ticks;
    for (const std::size_t k : x_ticks) ticks.emplace_back(static_cast<double>(k), std::to_string(k));
    draw_axes(svg, area, ticks, y_step, title, y_label, "draft length k");
}

struct Series {
    std::vector<std::pair<double, double>> points;
};

inline void draw_series(std::ostringstream& svg, const PlotArea& area, const Series& series, const std::string& colour,
                        bool dashed, bool markers) {
    if (series.points.empty()) return;
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\""
        << (dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
    for (const auto& [x, y] : series.points) svg << svg_number(area.x(x)) << "," << svg_number(area.y(y)) << " ";
    svg << "\"/>\n";
    if (!markers) return;
    for (const auto& [x, y] : series.points) {
        svg << "<circle cx=\"" << svg_number(area.x(x)) << "\" cy=\"" << svg_number(area.y(y)) << "\" r=\"3.5\" fill=\""
            << colour << "\"/>\n";
    }
}

}  // namespace detail

[[nodiscard]] inline std::string report_to_svg(const BenchReport& report) {
    using detail::svg_number;
    static const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

    // Group configurations by temperature, in the order they were run.
    std::vector<double> temperatures;
    std::map<double, std::vector<const ConfigurationResult*>> by_temperature;
    std::vector<std::size_t> draft_lengths;
    double top_speedup = 1.0;
    for (const ConfigurationResult& r : report.configurations) {
        if (!r.plotted_against_k()) continue;  // auto and block rows have their own table rows
        if (!by_temperature.count(r.temperature)) temperatures.push_back(r.temperature);
        by_temperature[r.temperature].push_back(&r);
        if (std::find(draft_lengths.begin(), draft_lengths.end(), r.draft_tokens) == draft_lengths.end())
            draft_lengths.push_back(r.draft_tokens);
        top_speedup = std::max({top_speedup, r.speedup(), r.predicted_speedup()});
    }
    std::sort(draft_lengths.begin(), draft_lengths.end());
    const double k_min = draft_lengths.empty() ? 0.0 : static_cast<double>(draft_lengths.front());
    double k_max = draft_lengths.empty() ? 1.0 : static_cast<double>(draft_lengths.back());
    if (k_max == k_min) k_max = k_min + 1.0;

    const double speedup_step = detail::nice_step(top_speedup * 1.1);
    const double speedup_top = std::ceil(top_speedup * 1.1 / speedup_step) * speedup_step;
    const detail::PlotArea speedup_area{70, 60, 380, 280, k_min, k_max, 0.0, speedup_top};
    const detail::PlotArea acceptance_area{560, 60, 380, 280, k_min, k_max, 0.0, 1.0};

    // Room below the plots for one legend line per temperature.
    const std::string height = svg_number(420.0 + 18.0 * static_cast<double>(std::max<std::size_t>(2, temperatures.size())));
    std::ostringstream svg;
    svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"" << height
        << "\" font-family=\"sans-serif\">\n";
    svg << "<rect width=\"1000\" height=\"" << height << "\" fill=\"white\"/>\n";
    svg << "<text x=\"500\" y=\"22\" text-anchor=\"middle\" font-size=\"13\">"
        << detail::escape_xml("target " + report.target.name + ", draft " + report.draft.name + " — " +
                              report.machine.cpu + ", " + std::to_string(report.machine.threads) + " threads, " +
                              report.machine.backend + (report.machine.device.empty() ? "" : " " + report.machine.device))
        << "</text>\n";
    detail::draw_axes(svg, speedup_area, draft_lengths, speedup_step, "speedup over autoregressive", "speedup (x)");
    detail::draw_axes(svg, acceptance_area, draft_lengths, 0.2, "per-token acceptance alpha", "alpha");
    // Break-even line: below it speculation loses.
    svg << "<line x1=\"" << svg_number(speedup_area.left) << "\" y1=\"" << svg_number(speedup_area.y(1.0)) << "\" x2=\""
        << svg_number(speedup_area.left + speedup_area.width) << "\" y2=\"" << svg_number(speedup_area.y(1.0))
        << "\" stroke=\"#777\" stroke-dasharray=\"2 3\"/>\n";

    for (std::size_t t = 0; t < temperatures.size(); ++t) {
        const std::string colour = kColours[t % std::size(kColours)];
        detail::Series measured, predicted, alpha;
        for (const ConfigurationResult* r : by_temperature[temperatures[t]]) {
            const double k = static_cast<double>(r->draft_tokens);
            measured.points.emplace_back(k, r->speedup());
            predicted.points.emplace_back(k, r->predicted_speedup());
            alpha.points.emplace_back(k, r->alpha());
        }
        for (detail::Series* series : {&measured, &predicted, &alpha})
            std::sort(series->points.begin(), series->points.end());
        detail::draw_series(svg, speedup_area, measured, colour, false, true);
        detail::draw_series(svg, speedup_area, predicted, colour, true, false);
        detail::draw_series(svg, acceptance_area, alpha, colour, false, true);

        char label[64];
        std::snprintf(label, sizeof label, temperatures[t] == 0.0 ? "T = 0 (greedy)" : "T = %g", temperatures[t]);
        const double legend_y = 400 + 18.0 * static_cast<double>(t);
        svg << "<line x1=\"70\" y1=\"" << svg_number(legend_y) << "\" x2=\"100\" y2=\"" << svg_number(legend_y)
            << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
        svg << "<text x=\"106\" y=\"" << svg_number(legend_y + 4) << "\" font-size=\"12\">" << label << "</text>\n";
    }
    svg << "<text x=\"300\" y=\"404\" font-size=\"12\">solid: measured · dashed: predicted E/(k·c + v_k)</text>\n";
    svg << "</svg>\n";
    return svg.str();
}

}  // namespace specdec::bench
