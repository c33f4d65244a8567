// specdec-quant-bench: decode speed of the synthetic model in each weight type,
// measured side by side in one process (types interleaved round by round, so
// that a slower period of a shared machine hits every type alike).
//
//   specdec-quant-bench [--size 100m] [--threads N] [--rounds R] [--types Q8_0,Q4_K,...]
//
// Per type: the weights' bytes, the median seconds of a one-token forward
// (autoregressive decoding: tokens/s = 1 / that) and of a five-token forward
// (a verify pass of four drafted tokens), and the bytes of weights read per
// second during the one-token forward.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

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
    std::printf("synthetic-%s, %zu threads, %zu rounds x 8 samples, medians\n", size.c_str(), pool->size(), rounds);
    std::printf("%-6s %10s %12s %14s %12s %12s\n", "type", "weights MB", "1-token ms", "tokens/s (AR)", "5-token ms", "read GB/s");
    for (std::size_t t = 0; t < types.size(); ++t) {
        const double s1 = median(one[t]), s5 = median(five[t]);
        const double megabytes = static_cast<double>(models[t].weight_bytes()) / 1e6;
        std::printf("%-6s %10.1f %12.2f %14.1f %12.2f %12.2f\n", specdec::weight_type_name(types[t]), megabytes, 1e3 * s1,
                    1.0 / s1, 1e3 * s5, megabytes / 1e3 / s1);
    }
    return 0;
}
