// specdec-matmul-bench: the matrix-vector tile path against the blocked
// matrix-product path of the CPU matmul, on the products of one layer and the
// output head of the "100m" synthetic shape, for every dense storage type and a
// range of widths (columns = tokens of a pass). Both paths run interleaved in
// one process on the same pool, so that load from elsewhere hits both alike;
// the printed ratio (tile time / blocked time, median of the repetitions) says
// from which width on the blocked path wins: cpu::kWideColumns is set from it.
//
//   specdec-matmul-bench [--threads N] [--widths 4,8,...] [--repetitions N]
//   specdec-matmul-bench --prefill [--threads N] [--widths 128,512] [--cached N]
//
// --prefill times whole passes of the "100m" target instead: a one-token
// decode after a 16-token prompt, and prompts of each width through forward
// (every logits row) and forward_last (the last row), on the wall clock and on
// the calling thread's CPU clock. With --threads 1 the CPU clock is the
// compute time alone, comparable across runs even on a loaded machine. With
// --cached N every pass follows N cached tokens, as a verification pass deep
// into a generation does (attention then reads N cached positions a row).
//
// Exit status: 0 success, 2 bad command line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../tools/flag_table.hpp"
#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/models/synthetic.hpp"

namespace {

using namespace specdec;

std::vector<std::size_t> parse_list(std::string_view flag, std::string_view text) {
    return cli::parse_count_list(flag, text, 1);
}

struct Product {
    std::string name;
    std::vector<WeightMatrix> weights;  // sharing one input
};

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double thread_cpu_seconds() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

int run_prefill(std::size_t threads, const std::vector<std::size_t>& widths, std::size_t repetitions, std::size_t context) {
    LlamaModel model = make_synthetic_target({.size = "100m", .threads = threads});
    const std::size_t widest = *std::max_element(widths.begin(), widths.end());
    if (context + widest > model.context_length()) {
        std::cerr << "specdec-matmul-bench: --cached " << context << " plus a pass of " << widest << " tokens exceeds the "
                  << model.context_length() << "-token context of " << model.name() << "\n";
        return 2;
    }
    std::printf("%s, %zu threads: median wall time and best calling-thread CPU time of %zu passes\n", model.name().c_str(),
                model.threads(), repetitions);
    auto measure = [&](const char* what, std::size_t cached, std::size_t n, bool last_only) {
        std::vector<Token> tokens(cached + n);
        for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<Token>((i * 7919 + 3) % model.vocab_size());
        const std::span<const Token> prefix(tokens.data(), cached), pass(tokens.data() + cached, n);
        std::vector<double> wall, cpu;
        for (std::size_t rep = 0; rep <= repetitions; ++rep) {
            model.truncate(0);
            if (cached > 0) (void)model.forward(prefix);
            const auto start = std::chrono::steady_clock::now();
            const double cpu_start = thread_cpu_seconds();
            if (last_only) (void)model.forward_last(pass);
            else (void)model.forward(pass);
            if (rep == 0) continue;  // warms caches and buffers
            cpu.push_back(thread_cpu_seconds() - cpu_start);
            wall.push_back(seconds_since(start));
        }
        std::sort(wall.begin(), wall.end());
        const double median = wall[wall.size() / 2], best_cpu = *std::min_element(cpu.begin(), cpu.end());
        std::printf("%-13s %4zu tokens: wall %9.2f ms = %7.1f tok/s   cpu %9.2f ms = %7.1f tok/s\n", what, n, 1e3 * median,
                    static_cast<double>(n) / median, 1e3 * best_cpu, static_cast<double>(n) / best_cpu);
        std::fflush(stdout);
    };
    measure("decode", 16, 1, false);
    if (context > 0) std::printf("the passes below follow %zu cached tokens\n", context);
    for (const std::size_t n : widths) {
        measure("forward", context, n, false);
        measure("forward_last", context, n, true);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t threads = 0, repetitions = 7, cached = 0;
    std::vector<std::size_t> widths{4, 8, 12, 16, 24, 32, 48, 64, 128, 512};
    bool prefill = false, widths_given = false;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string_view flag = argv[i];
            if (flag == "--help") {
                std::cout << "usage: specdec-matmul-bench [--prefill [--cached N]] [--threads N] [--widths LIST] [--repetitions N]\n";
                return 0;
            }
            if (flag == "--prefill") {
                prefill = true;
                continue;
            }
            if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + ": missing value");
            const std::string_view value = argv[++i];
            if (flag == "--threads") threads = parse_list(flag, value).at(0);
            else if (flag == "--widths") {
                widths = parse_list(flag, value);
                widths_given = true;
            }
            else if (flag == "--repetitions") repetitions = parse_list(flag, value).at(0);
            else if (flag == "--cached") cached = cli::parse_count_list(flag, value, 0).at(0);
            else throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
        }
    } catch (const std::exception& error) {
        std::cerr << "specdec-matmul-bench: " << error.what() << "\n";
        return 2;
    }

    if (prefill) {
        if (!widths_given) widths = {128, 512};
        return run_prefill(threads, widths, std::min<std::size_t>(repetitions, 3), cached);
    }
    auto pool = std::make_shared<cpu::ThreadPool>(threads);
    const SyntheticShape shape = synthetic_shape("100m");
    const std::size_t max_width = *std::max_element(widths.begin(), widths.end());
    std::printf("tile time / blocked time per product (median of %zu), %zu threads; > 1: the blocked path is faster\n",
                repetitions, pool->size());
    std::printf("%-6s %-10s", "type", "product");
    for (const std::size_t n : widths) std::printf(" %6zu", n);
    std::printf("\n");
    // The dense types: block-quantised weights stay on the integer kernels at every width (see cpu::matmul).
    const WeightType types[] = {WeightType::f16, WeightType::bf16, WeightType::f32};
    for (const WeightType type : types) {
        // One layer and the head of the 100m shape, in this storage type.
        const LlamaWeights w = detail::synthetic_weights(*pool, shape, 1, 1, type, type);
        const LlamaLayerWeights& l = w.layers[0];
        const std::vector<Product> products = {
            {"qkv", {l.query, l.key, l.value}},
            {"out", {l.attention_output}},
            {"gate+up", {l.ffn_gate, l.ffn_up}},
            {"down", {l.ffn_down}},
            {"head", {w.output}},
        };
        std::vector<double> total_tiles(widths.size()), total_wide(widths.size());
        for (const Product& product : products) {
            const std::size_t depth = product.weights.front().cols;
            std::vector<float> x(max_width * depth);
            std::mt19937 rng(7);
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (float& v : x) v = normal(rng);
            std::vector<std::vector<float>> y(product.weights.size());
            std::vector<cpu::MatmulTarget> targets;
            for (std::size_t i = 0; i < product.weights.size(); ++i) {
                y[i].resize(max_width * product.weights[i].rows);
                targets.push_back({&product.weights[i], y[i].data(), product.weights[i].rows, false});
            }
            std::printf("%-6s %-10s", weight_type_name(type), product.name.c_str());
            for (std::size_t wi = 0; wi < widths.size(); ++wi) {
                const std::size_t n = widths[wi];
                std::vector<double> tiles, wide;
                for (std::size_t rep = 0; rep <= repetitions; ++rep) {
                    auto start = std::chrono::steady_clock::now();
                    cpu::detail::matmul_tiles(*pool, targets, x.data(), depth, n);
                    const double t = seconds_since(start);
                    start = std::chrono::steady_clock::now();
                    cpu::detail::matmul_wide(*pool, targets, x.data(), depth, n);
                    const double b = seconds_since(start);
                    if (rep > 0) {  // the first pair warms caches and buffers
                        tiles.push_back(t);
                        wide.push_back(b);
                    }
                }
                std::nth_element(tiles.begin(), tiles.begin() + tiles.size() / 2, tiles.end());
                std::nth_element(wide.begin(), wide.begin() + wide.size() / 2, wide.end());
                const double t = tiles[tiles.size() / 2], b = wide[wide.size() / 2];
                total_tiles[wi] += t;
                total_wide[wi] += b;
                std::printf(" %6.2f", t / b);
            }
            std::printf("\n");
        }
        std::printf("%-6s %-10s", weight_type_name(type), "all");
        for (std::size_t wi = 0; wi < widths.size(); ++wi) std::printf(" %6.2f", total_tiles[wi] / total_wide[wi]);
        std::printf("\n");
        std::fflush(stdout);
    }
    std::printf("current crossover: passes wider than %zu columns take the blocked path\n", cpu::kWideColumns);
    return 0;
}
