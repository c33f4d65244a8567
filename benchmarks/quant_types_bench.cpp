// specdec-quant-bench: decode speed of the synthetic model in each weight type,
// measured side by side in one process (types interleaved round by round, so
// that a slower period of a shared machine hits every type alike).
//
//   specdec-quant-bench [--size 100m] [--threads N] [--rounds R] [--types Q8_0,Q4_K,...]
//
// Per type: the weights' bytes, the seconds of a one-token forward
// (autoregressive decoding: tokens/s = 1 / that) and of a five-token forward
// (a verify pass of four drafted tokens), and the bytes of weights read per
// second during the one-token forward; then the matrix kernel alone on one
// thread (a 2048 x 768 matrix, as the feed-forward's, times 1 and 5 columns).
// Medians and minima: on a machine shared with other work the minimum is the
// steadier estimate of what the code costs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/models/synthetic.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

specdec::WeightType parse_type(std::string_view name) {
    for (const specdec::WeightType type : specdec::kAllWeightTypes) {
        if (name == specdec::weight_type_name(type)) return type;
    }
    std::fprintf(stderr, "unknown weight type \"%.*s\"; expected one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K\n",
                 static_cast<int>(name.size()), name.data());
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::string size = "100m";
    std::size_t threads = 0, rounds = 5;
    std::vector<specdec::WeightType> types = {specdec::WeightType::q8_0, specdec::WeightType::q4_0, specdec::WeightType::q4_1,
                                              specdec::WeightType::q5_0, specdec::WeightType::q5_1, specdec::WeightType::q4_k,
                                              specdec::WeightType::q5_k, specdec::WeightType::q6_k};
    for (int i = 1; i < argc; ++i) {
        const std::string_view flag = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "%s: missing value; expected --size, --threads, --rounds or --types with a value\n", argv[i]);
            return 2;
        }
        const std::string value = argv[++i];
        if (flag == "--size") {
            size = value;
        } else if (flag == "--threads") {
            threads = std::stoul(value);
        } else if (flag == "--rounds") {
            rounds = std::max<std::size_t>(1, std::stoul(value));
        } else if (flag == "--types") {
            types.clear();
            for (std::size_t start = 0; start <= value.size();) {
                const std::size_t end = std::min(value.find(',', start), value.size());
                types.push_back(parse_type(std::string_view(value).substr(start, end - start)));
                start = end + 1;
            }
        } else {
            std::fprintf(stderr, "unknown flag %s; expected --size, --threads, --rounds or --types\n", argv[i - 1]);
            return 2;
        }
    }
    auto pool = std::make_shared<specdec::cpu::ThreadPool>(threads);
    std::vector<specdec::LlamaModel> models;
    for (const auto type : types) {
        models.push_back(specdec::make_synthetic_target({.size = size, .seed = 1, .target_storage = type, .thread_pool = pool}));
    }
    const std::vector<specdec::Token> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const std::vector<specdec::Token> verify = {17, 18, 19, 20, 21};
    std::vector<std::vector<double>> one(types.size()), five(types.size());
    for (std::size_t round = 0; round <= rounds; ++round) {  // round 0: untimed warm-up
        for (std::size_t t = 0; t < types.size(); ++t) {
            auto& model = models[t];
            model.truncate(0);
            (void)model.forward(prompt);
            for (int repeat = 0; repeat < 8; ++repeat) {
                model.truncate(prompt.size());
                auto start = Clock::now();
                (void)model.forward(std::span<const specdec::Token>(verify.data(), 1));
                const double single = std::chrono::duration<double>(Clock::now() - start).count();
                model.truncate(prompt.size());
                start = Clock::now();
                (void)model.forward(verify);
                const double batch = std::chrono::duration<double>(Clock::now() - start).count();
                if (round > 0) {
                    one[t].push_back(single);
                    five[t].push_back(batch);
                }
            }
        }
    }
    std::printf("synthetic-%s, %zu threads, %zu rounds x 8 samples; median (min)\n", size.c_str(), pool->size(), rounds);
    std::printf("%-6s %10s %16s %16s %16s %14s\n", "type", "weights MB", "1-token ms", "tokens/s (AR)", "5-token ms",
                "read GB/s");
    for (std::size_t t = 0; t < types.size(); ++t) {
        const double s1 = median(one[t]), s5 = median(five[t]);
        const double m1 = *std::min_element(one[t].begin(), one[t].end()), m5 = *std::min_element(five[t].begin(), five[t].end());
        const double megabytes = static_cast<double>(models[t].weight_bytes()) / 1e6;
        std::printf("%-6s %10.1f %7.2f (%6.2f) %7.1f (%6.1f) %7.2f (%6.2f) %6.2f (%5.2f)\n", specdec::weight_type_name(types[t]),
                    megabytes, 1e3 * s1, 1e3 * m1, 1.0 / s1, 1.0 / m1, 1e3 * s5, 1e3 * m5, megabytes / 1e3 / s1, megabytes / 1e3 / m1);
    }
    models.clear();

    // The kernel alone, one thread, types interleaved.
    const std::size_t rows = 2048, cols = 768;
    std::vector<std::vector<std::byte>> matrices;
    std::vector<float> values(cols), x(5 * cols), y(5 * rows);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(2, i);
    for (const auto type : types) {
        const std::size_t row_bytes = specdec::weight_row_bytes(type, cols);
        matrices.emplace_back(rows * row_bytes);
        for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t k = 0; k < cols; ++k) values[k] = specdec::detail::synthetic_normal(1, r * cols + k) / 28.0f;
            specdec::cpu::quantize_row(type, values.data(), cols, matrices.back().data() + r * row_bytes);
        }
    }
    specdec::cpu::ThreadPool single(1);
    std::vector<std::vector<double>> kernel1(types.size()), kernel5(types.size());
    for (std::size_t round = 0; round <= 10 * rounds; ++round) {
        for (std::size_t t = 0; t < types.size(); ++t) {
            const specdec::WeightMatrix w{types[t], rows, cols, matrices[t].data()};
            for (const std::size_t n : {std::size_t{1}, std::size_t{5}}) {
                const auto start = Clock::now();
                specdec::cpu::matmul(single, w, x.data(), cols, n, y.data(), rows);
                const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
                if (round > 0) (n == 1 ? kernel1 : kernel5)[t].push_back(seconds);
            }
        }
    }
    std::printf("\nkernel: %zu x %zu matrix, 1 thread, %zu samples; median (min) microseconds and weight GB/s\n", rows, cols,
                kernel1.front().size());
    std::printf("%-6s %18s %16s %18s\n", "type", "1 column us", "1 column GB/s", "5 columns us");
    for (std::size_t t = 0; t < types.size(); ++t) {
        const double k1 = median(kernel1[t]), k5 = median(kernel5[t]);
        const double n1 = *std::min_element(kernel1[t].begin(), kernel1[t].end());
        const double n5 = *std::min_element(kernel5[t].begin(), kernel5[t].end());
        const double gigabytes = static_cast<double>(matrices[t].size()) / 1e9;
        std::printf("%-6s %9.1f (%6.1f) %7.2f (%5.2f) %9.1f (%6.1f)\n", specdec::weight_type_name(types[t]), 1e6 * k1, 1e6 * n1,
                    gigabytes / k1, gigabytes / n1, 1e6 * k5, 1e6 * n5);
    }
    return 0;
}
