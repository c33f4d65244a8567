// Exactness at T > 0 through the llama.cpp adapter, with the sequence
// chi-square harness (support/exactness_harness.hpp): speculative sampling
// with token-wise rejection on the tiny synthetic pair exported as GGUF and
// run by llama.cpp must produce whole sequences distributed as the target's.
//
// The harness enumerates every sequence, so the models are seen through a
// window of 3 consecutive token ids (VocabularyWindow in
// llama_cpp_test_support.hpp): rows restricted to the window, everything else
// (passes, rows of a verification pass, rollback of the cache) is llama.cpp's
// through the adapter. The reference is the target's window row after each
// prefix from a fresh pass over the whole prefix (no rollback involved).
// The negative control is an adapter bug of the kind the batch-splitting
// trap produces: the rows of a pass shifted by one (row i holds row i - 1's
// logits for i >= 1), which only draft positions >= 1 see.
#include <cstddef>
#include <span>
#include <vector>

#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"

namespace llama_cpp_exactness {

using specdec::LlamaCppModel;
using specdec::LogitsView;
using specdec::SamplingOptions;
using specdec::Token;
namespace support = specdec::test::llama_cpp;
using Window = support::VocabularyWindow<LlamaCppModel>;

constexpr Token kWindowStart = 300;  // made-up word pieces of the synthetic vocabulary
constexpr std::size_t kWindow = 3;
constexpr std::size_t kDraftTokens = 3;
// Enough for the exact run to test deep positions; the negative control is
// rejected by a wide margin already at a quarter of that (chi-square ~1e6).
constexpr std::size_t kSamples = 4000;
constexpr std::size_t kControlSamples = 1000;

// The buggy adapter of the negative control: every row after the first of a
// pass is the row before it.
class RowsShiftedByOne {
public:
    explicit RowsShiftedByOne(Window& model) : model_(&model) {}
    std::size_t vocab_size() const { return model_->vocab_size(); }
    std::size_t context_length() const { return model_->context_length(); }
    std::size_t cached_tokens() const { return model_->cached_tokens(); }
    void truncate(std::size_t n) { model_->truncate(n); }
    LogitsView forward(std::span<const Token> tokens) {
        const LogitsView view = model_->forward(tokens);
        rows_.resize(view.rows * view.vocab);
        for (std::size_t r = 0; r < view.rows; ++r) {
            const auto source = view.row(r == 0 ? 0 : r - 1);
            std::copy(source.begin(), source.end(), rows_.begin() + static_cast<std::ptrdiff_t>(r * view.vocab));
        }
        return specdec::dense_logits(rows_, view.rows, view.vocab);
    }

private:
    Window* model_;
    std::vector<float> rows_;
};

struct WindowPair {
    support::TempFolder folder{"exactness"};
    support::ExportedPair files = support::export_synthetic_pair(folder.path());
    LlamaCppModel target = LlamaCppModel::from_gguf(files.target.string(), support::small_options(1, 64));
    LlamaCppModel draft = LlamaCppModel::from_gguf(files.draft.string(), support::small_options(1, 64));
    Window target_window{target, kWindowStart, kWindow};
    Window draft_window{draft, kWindowStart, kWindow};
};

specdec::test::ExactnessSetup setup_for(Window& target, const SamplingOptions& sampling, const std::string& name,
                                        std::size_t samples) {
    return support::window_exactness_setup(target, kWindow, kDraftTokens, sampling, name, samples);
}

}  // namespace llama_cpp_exactness

using namespace llama_cpp_exactness;

TEST_CASE("llama.cpp adapter: speculative sampling at T = 1 passes the sequence chi-square with every draft "
          "position reached, and rows shifted by one are caught",
          "[llama_cpp][exactness]") {
    WindowPair pair;
    const SamplingOptions sampling{.temperature = 1.0};
    const specdec::DecodingOptions options{.draft_tokens = kDraftTokens, .sampling = sampling,
                                           .max_new_tokens = kDraftTokens + 1};
    {
        const auto setup = setup_for(pair.target_window, sampling, "llama.cpp adapter, token-wise, k 3", kSamples);
        const auto report = specdec::test::run_exactness(
            setup, specdec::test::speculative_runner(pair.target_window, pair.draft_window, options, setup.prompt));
        specdec::test::check_exact(report, kDraftTokens);
        // Deep positions were not only drafted but accepted: the rollback of
        // a partly accepted draft was exercised at every depth.
        for (std::size_t i = 0; i < kDraftTokens; ++i) CHECK(report.accepted[i] > 0);
    }
    {
        RowsShiftedByOne buggy(pair.target_window);
        const auto setup = setup_for(pair.target_window, sampling, "negative control: rows shifted by one", kControlSamples);
        const auto report = specdec::test::run_exactness(
            setup, specdec::test::speculative_runner(buggy, pair.draft_window, options, setup.prompt));
        specdec::test::check_caught(report, kDraftTokens);
    }
}
