// The CUDA model computes what the CPU reference model computes: logits
// compared row by row with stated tolerances, on the synthetic family and on
// the real stories260K checkpoint.
//
// Tolerances: f32 weights reproduce the CPU to rounding (different summation
// order in GEMMs and attention): max |difference| <= 2e-3 on logits of
// magnitude ~10. f16 / bf16 weights and GEMM inputs carry 11 / 8 significant
// bits: the row's relative L2 error is bounded by 1e-2 / 4e-2.
#include <fstream>
#include <memory>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/fixtures.hpp"

using specdec::LlamaModel;
using specdec::LogitsView;
using specdec::Token;
using specdec::cuda::CudaLlamaModel;
using specdec::cuda::Precision;

namespace {

std::vector<Token> test_tokens(std::size_t count, std::size_t vocab) {
    std::vector<Token> tokens(count);
    for (std::size_t i = 0; i < count; ++i) tokens[i] = static_cast<Token>((i * 37 + 11) % vocab);
    return tokens;
}

void require_logits_close(const LogitsView& gpu, const LogitsView& cpu, float tolerance) {
    REQUIRE(gpu.rows == cpu.rows);
    REQUIRE(gpu.vocab == cpu.vocab);
    for (std::size_t row = 0; row < gpu.rows; ++row) {
        INFO("row " << row);
        CHECK(specdec::test::max_abs_difference(gpu, row, cpu, row) <= tolerance);
    }
}

void require_relative_error_below(const LogitsView& gpu, const LogitsView& cpu, double bound) {
    REQUIRE(gpu.rows == cpu.rows);
    for (std::size_t row = 0; row < gpu.rows; ++row) {
        INFO("row " << row);
        CHECK(specdec::test::relative_l2_error(gpu.row(row), cpu.row(row)) <= bound);
    }
}

}  // namespace

TEST_CASE("GPU f32 logits match the CPU model on the tiny synthetic model", "[cuda][logits]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    LlamaModel cpu = specdec::make_synthetic_target({.size = "tiny", .seed = 5, .threads = 2});
    CudaLlamaModel gpu(cpu.weights(), {.precision = Precision::f32});
    const auto tokens = test_tokens(40, cpu.vocab_size());
    const LogitsView expected = cpu.forward(tokens);
    require_logits_close(gpu.forward(tokens), expected, 2e-3f);
}

TEST_CASE("GPU f16 and bf16 logits stay within the reduced-precision bound of the CPU model", "[cuda][logits]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    LlamaModel cpu = specdec::make_synthetic_target({.size = "tiny", .seed = 5, .threads = 2});
    const auto tokens = test_tokens(40, cpu.vocab_size());
    const LogitsView expected = cpu.forward(tokens);
    CudaLlamaModel half(cpu.weights(), {.precision = Precision::f16});
    require_relative_error_below(half.forward(tokens), expected, 1e-2);
    CudaLlamaModel bfloat(cpu.weights(), {.precision = Precision::bf16});
    require_relative_error_below(bfloat.forward(tokens), expected, 4e-2);
}

TEST_CASE("weights generated on the device reproduce the CPU synthetic generator", "[cuda][logits][synthetic]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    // The tiny shape stores F32 on the CPU, so the device f32 model has the very same weights.
    LlamaModel cpu_target = specdec::make_synthetic_target({.size = "tiny", .seed = 9, .threads = 2});
    CudaLlamaModel gpu_target =
        CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 9, 0, {.precision = Precision::f32});
    const auto tokens = test_tokens(24, cpu_target.vocab_size());
    require_logits_close(gpu_target.forward(tokens), cpu_target.forward(tokens), 2e-3f);

    // The early-exit draft: the first layers with the target's embedding and head.
    LlamaModel cpu_draft = specdec::make_synthetic_draft({.size = "tiny", .seed = 9, .threads = 2},
                                                         specdec::SyntheticDraftKind::early_exit);
    const specdec::SyntheticShape shape = specdec::synthetic_shape("tiny");
    CudaLlamaModel gpu_draft = CudaLlamaModel::synthetic(shape, 9, shape.early_exit_layers, {.precision = Precision::f32});
    require_logits_close(gpu_draft.forward(tokens), cpu_draft.forward(tokens), 2e-3f);
}

TEST_CASE("GPU logits match the CPU model and the float64 reference on stories260K", "[cuda][logits][fixture]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    SPECDEC_REQUIRE_FIXTURE(reference_path, "stories260K.reference.json");
    const auto json = nlohmann::json::parse(std::ifstream(reference_path));
    const auto tokens = json.at("tokens").get<std::vector<Token>>();
    const auto reference = json.at("logits").get<std::vector<std::vector<float>>>();
    REQUIRE(reference.size() <= tokens.size());

    LlamaModel cpu = LlamaModel::from_gguf(model_path, {.threads = 2});
    CudaLlamaModel gpu(cpu.weights(), {.precision = Precision::f32});
    const std::span<const Token> prefix(tokens.data(), reference.size());
    const LogitsView gpu_logits = gpu.forward(prefix);
    // The fixture's README: float32 implementations agree with the float64 reference to about 1e-3.
    for (std::size_t row = 0; row < reference.size(); ++row) {
        INFO("row " << row);
        REQUIRE(reference[row].size() == gpu_logits.vocab);
        float worst = 0.0f;
        for (std::size_t x = 0; x < gpu_logits.vocab; ++x)
            worst = std::max(worst, std::fabs(gpu_logits.row(row)[x] - reference[row][x]));
        CHECK(worst <= 2e-3f);
    }
    require_logits_close(gpu_logits, cpu.forward(prefix), 2e-3f);
}

namespace {

// A copy of `weights` with every matrix decoded to F32 by cpu::dequantize_row:
// the values the CUDA backend uploads for a quantised file.
specdec::LlamaWeights dequantized_copy(const specdec::LlamaWeights& weights) {
    specdec::LlamaWeights copy = weights;
    auto decode = [&](specdec::WeightMatrix& w) {
        auto values = std::make_shared<std::vector<float>>(w.rows * w.cols);
        for (std::size_t r = 0; r < w.rows; ++r) specdec::cpu::dequantize_row(w, r, values->data() + r * w.cols);
        w = specdec::WeightMatrix{specdec::WeightType::f32, w.rows, w.cols, reinterpret_cast<const std::byte*>(values->data())};
        copy.storage.push_back(std::move(values));
    };
    const bool tied = weights.tied_output();
    decode(copy.token_embedding);
    if (tied) copy.output = copy.token_embedding;
    else decode(copy.output);
    for (auto& layer : copy.layers) {
        for (specdec::WeightMatrix* w : {&layer.query, &layer.key, &layer.value, &layer.attention_output, &layer.ffn_gate,
                                         &layer.ffn_up, &layer.ffn_down})
            decode(*w);
    }
    return copy;
}

}  // namespace

// The CPU model multiplies block-quantised weights by activations rounded to
// 8-bit blocks (llama.cpp's scheme, backends/cpu/quant_matmul.hpp); the CUDA
// backend decodes the weights on upload and multiplies in f32. So the GPU must
// reproduce, to f32 rounding, a CPU model holding the decoded values, and stays
// within the activation rounding of the quantised CPU model: measured on the
// CPU (the quantised model against the decoded one, the rows below), that
// rounding moves a stories260K logits row by a relative L2 error of at most
// 0.0096 (Q8_0) and 0.0081 (Q4_0), up to 0.22 in absolute terms; the bound is 3e-2.
TEST_CASE("quantised GGUF weights (Q8_0, Q4_0) are dequantised on upload to the CPU model's values",
          "[cuda][logits][fixture]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    for (const char* name : {"stories260K-q8_0.gguf", "stories260K-q4_0.gguf"}) {
        const auto path = specdec::test::fixture_path(name);
        if (!path) {
            WARN("skipped: fixture " << name << " not found (set SPECDEC_FIXTURES or provide ../shared/fixtures)");
            return;
        }
        INFO(name);
        LlamaModel quantized = LlamaModel::from_gguf(*path, {.threads = 2});
        LlamaModel decoded(dequantized_copy(quantized.weights()), {.threads = 2});
        CudaLlamaModel gpu = CudaLlamaModel::from_gguf(*path, {.precision = Precision::f32});
        const auto tokens = test_tokens(32, quantized.vocab_size());
        const LogitsView gpu_logits = gpu.forward(tokens);
        require_logits_close(gpu_logits, decoded.forward(tokens), 2e-3f);
        require_relative_error_below(gpu_logits, quantized.forward(tokens), 3e-2);
    }
}
