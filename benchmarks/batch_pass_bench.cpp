// specdec-batch-pass-bench: what batch invariance costs. One multi-sequence
// pass (LlamaModel::forward_batch) of W columns in total, as min(W, 32) feeds
// of W / min(W, 32) tokens each (every slot holding a cached prefix), on the
// "100m" synthetic target, two ways over the same weights and thread pool:
//
//   invariant  batch_invariant = true (the default): the feeds share the
//              matrix-vector tiles, each row bitwise what its sequence gives alone
//   blocked    batch_invariant = false: one blocked matrix product over all W
//              columns once W > cpu::kWideColumns, rows equal only up to rounding
//
// The two run interleaved in rounds in one process (every width, both paths,
// per round), so that load from elsewhere hits both alike; each pass is rolled
// back (truncate per slot) so that every round sees the same caches. Printed:
// the median wall time per pass, tokens per second, the ratio invariant /
// blocked (> 1: invariance costs that factor), and the largest relative
// difference between the two paths' logits (0 at and below kWideColumns,
// where both are the tiles).
//
//   specdec-batch-pass-bench [--threads N] [--widths 8,16,...] [--rounds N] [--cached N]
//
// Exit status: 0 success, 2 bad command line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "machine_info.hpp"
#include "../tools/flag_table.hpp"
#include "specdec/models/synthetic.hpp"

namespace {

using namespace specdec;

constexpr std::size_t kMaxFeeds = 32;

std::vector<std::size_t> parse_list(std::string_view flag, std::string_view text) {
    return cli::parse_count_list(flag, text, 1);
}

double thread_cpu_seconds() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The feeds of a pass of `width` columns: min(width, 32) slots, width split evenly.
struct Batch {
    std::vector<std::vector<Token>> tokens;
    std::vector<SequenceFeed> feeds;
};

Batch make_batch(std::size_t width, std::size_t vocab) {
    const std::size_t feeds = std::min(width, kMaxFeeds), per_feed = width / feeds;
    Batch batch;
    batch.tokens.resize(feeds);
    for (std::size_t f = 0; f < feeds; ++f) {
        for (std::size_t j = 0; j < per_feed; ++j) batch.tokens[f].push_back(static_cast<Token>((f * 131 + j * 7919 + 11) % vocab));
    }
    for (std::size_t f = 0; f < feeds; ++f) batch.feeds.push_back({.slot = f, .tokens = batch.tokens[f]});
    return batch;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t threads = 0, rounds = 5, cached = 16;
    std::vector<std::size_t> widths{8, 16, 32, 64, 128, 256};
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string_view flag = argv[i];
            if (flag == "--help") {
                std::cout << "usage: specdec-batch-pass-bench [--threads N] [--widths LIST] [--rounds N] [--cached N]\n";
                return 0;
            }
            if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + ": missing value");
            const std::string_view value = argv[++i];
            if (flag == "--threads") threads = parse_list(flag, value).at(0);
            else if (flag == "--widths") widths = parse_list(flag, value);
            else if (flag == "--rounds") rounds = parse_list(flag, value).at(0);
            else if (flag == "--cached") cached = parse_list(flag, value).at(0);
            else throw std::invalid_argument("unknown option '" + std::string(flag) + "'");
        }
        for (const std::size_t w : widths) {
            if (w > kMaxFeeds && w % kMaxFeeds != 0) {
                throw std::invalid_argument("--widths: " + std::to_string(w) + " is not split evenly over 32 feeds; expected a multiple of 32 above 32");
            }
        }
    } catch (const std::exception& error) {
        std::cerr << "specdec-batch-pass-bench: " << error.what() << "\n";
        return 2;
    }

    const std::size_t max_width = *std::max_element(widths.begin(), widths.end());
    const std::size_t context = cached + max_width / std::min(max_width, kMaxFeeds);
    auto pool = std::make_shared<cpu::ThreadPool>(threads);
    LlamaModel invariant = make_synthetic_target(
        {.size = "100m", .max_context = context, .thread_pool = pool, .sequences = kMaxFeeds});
    // The same weights (their bytes shared) and pool, on the width-dependent path.
    LlamaModel blocked(invariant.weights(), LlamaOptions{.max_context = context,
                                                         .thread_pool = pool,
                                                         .name = invariant.name(),
                                                         .sequences = kMaxFeeds,
                                                         .batch_invariant = false});
    const std::size_t vocab = invariant.vocab_size();
    for (LlamaModel* model : {&invariant, &blocked}) {
        for (std::size_t slot = 0; slot < kMaxFeeds; ++slot) {
            std::vector<Token> prefix(cached);
            for (std::size_t i = 0; i < cached; ++i) prefix[i] = static_cast<Token>((slot * 17 + i * 31 + 1) % vocab);
            const SequenceFeed feed{.slot = slot, .tokens = prefix, .last_row_only = true};
            (void)model->forward_batch(std::span<const SequenceFeed>(&feed, 1));
        }
    }
    std::printf("%s on %s, %zu threads, load %.2f at start\n", invariant.name().c_str(), bench::cpu_model_name().c_str(),
                pool->size(), bench::load_average());
    std::printf("%zu KV cache slots of %zu positions: %.1f MiB (%zu bytes a position)\n", invariant.sequence_slots(),
                invariant.context_length(), static_cast<double>(invariant.kv_cache_bytes()) / (1 << 20),
                invariant.kv_bytes_per_position());
    std::printf("one forward_batch of W columns (min(W, 32) feeds of W / min(W, 32) tokens, every row returned), each slot "
                "holding %zu cached positions; median wall time of %zu rounds, both paths interleaved in each round\n",
                cached, rounds);

    std::vector<Batch> batches;
    for (const std::size_t w : widths) batches.push_back(make_batch(w, vocab));
    struct Timing {
        double wall, cpu;
    };
    std::vector<std::vector<Timing>> times[2];
    times[0].resize(widths.size());
    times[1].resize(widths.size());
    std::vector<float> difference(widths.size(), 0.0f);
    std::vector<std::vector<float>> first_rows;
    // One timed pass, rolled back afterwards. keep_rows: keep its logits;
    // otherwise returns their largest difference from the kept ones,
    // relative to each row's largest logit.
    auto pass = [&](LlamaModel& model, const Batch& batch, bool keep_rows) {
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = thread_cpu_seconds();
        const LogitsView view = model.forward_batch(batch.feeds);
        const Timing timing{std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                            thread_cpu_seconds() - cpu_start};
        float worst = 0.0f;
        if (keep_rows) first_rows.clear();
        for (std::size_t r = 0; r < view.rows; ++r) {
            if (keep_rows) {
                first_rows.emplace_back(view.row(r).begin(), view.row(r).end());
                continue;
            }
            float scale = 0.0f, diff = 0.0f;
            for (std::size_t v = 0; v < view.vocab; ++v) {
                scale = std::max(scale, std::fabs(first_rows[r][v]));
                diff = std::max(diff, std::fabs(view.row(r)[v] - first_rows[r][v]));
            }
            worst = std::max(worst, diff / std::max(scale, 1e-30f));
        }
        for (const SequenceFeed& feed : batch.feeds) model.truncate(feed.slot, cached);
        return std::pair{timing, worst};
    };
    // Round 0 warms both up (pages of the caches, thread-local buffers) and is not counted.
    for (std::size_t round = 0; round <= rounds; ++round) {
        for (std::size_t i = 0; i < widths.size(); ++i) {
            // Alternate which path goes first, so that neither always follows the other.
            const bool invariant_first = (round + i) % 2 == 0;
            if (invariant_first) {
                const Timing a = pass(invariant, batches[i], true).first;
                const auto [b, diff] = pass(blocked, batches[i], false);
                if (round > 0) {
                    times[0][i].push_back(a);
                    times[1][i].push_back(b);
                }
                difference[i] = std::max(difference[i], diff);
            } else {
                const Timing b = pass(blocked, batches[i], true).first;
                const Timing a = pass(invariant, batches[i], true).first;
                if (round > 0) {
                    times[0][i].push_back(a);
                    times[1][i].push_back(b);
                }
            }
        }
        if (round > 0) std::fprintf(stderr, "round %zu of %zu done\n", round, rounds);
    }

    // Wall time counts every thread of the pool; the calling thread's CPU
    // time is the whole compute time only with --threads 1 (then it barely
    // moves with load from other processes; with more threads it counts the
    // caller's share and its spinning).
    std::printf("\n%6s %8s %13s %13s %10s %10s %8s %13s %13s %8s %12s\n", "W", "feeds", "inv wall ms", "blk wall ms",
                "inv tok/s", "blk tok/s", "inv/blk", "inv cpu ms", "blk cpu ms", "inv/blk", "max rel diff");
    for (std::size_t i = 0; i < widths.size(); ++i) {
        auto med = [&](int path, double Timing::*field) {
            std::vector<double> values;
            for (const Timing& t : times[path][i]) values.push_back(t.*field);
            return median(values);
        };
        const double a = med(0, &Timing::wall), b = med(1, &Timing::wall);
        const double ac = med(0, &Timing::cpu), bc = med(1, &Timing::cpu);
        const std::size_t feeds = batches[i].feeds.size();
        const std::string shape = std::to_string(feeds) + "x" + std::to_string(widths[i] / feeds);
        std::printf("%6zu %8s %13.2f %13.2f %10.0f %10.0f %8.3f %13.2f %13.2f %8.3f %12.2e\n", widths[i], shape.c_str(),
                    1e3 * a, 1e3 * b, static_cast<double>(widths[i]) / a, static_cast<double>(widths[i]) / b, a / b, 1e3 * ac,
                    1e3 * bc, ac / bc, static_cast<double>(difference[i]));
    }
    std::printf("load %.2f at the end\n", bench::load_average());
    return 0;
}
