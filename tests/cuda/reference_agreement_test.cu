// The CUDA model held against the float64 reference transformer
// (support/reference_transformer.hpp, compiled as plain C++ with Eigen and
// linked in) at every width the chain decoders use: one-token passes, passes
// of 2..9 tokens, a wide pass and a rollback followed by a wide pass. The
// CUDA model has no tree passes (it is not a TreeLM), nor attention biases or
// RoPE on head halves, so qwen2 is left out.
//
// The device decodes every storage type with cpu::dequantize_row and rounds
// once to its precision, so at Precision::f32 every storage type is held to
// the float32 bound against its dequantised weights. At f16 / bf16 the
// weights and GEMM inputs carry 11 / 8 significant bits; those bounds follow
// the relative L2 bounds of logits_agreement_test.cu (1e-2 / 4e-2) with room
// for a row's maximum error. See docs/reference-model.md.
#if SPECDEC_HAS_REFERENCE_TRANSFORMER

#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/reference_transformer.hpp"
#include "support/reference_widths.hpp"

namespace cuda_reference_agreement {

using specdec::LlamaWeights;
using specdec::WeightType;
using specdec::cuda::CudaLlamaModel;
using specdec::cuda::Precision;
using specdec::test::ReferenceOptions;
using specdec::test::ReferenceTransformer;

double bound_for(Precision precision) {
    switch (precision) {
        case Precision::f32: return 1e-4;
        case Precision::f16: return 3e-2;
        default: return 1e-1;
    }
}

// Every width of the device model against the reference of `weights`; at
// f32, the same rows must disagree with a reference whose queries are
// rotated one position ahead of their keys.
void require_agreement(const LlamaWeights& weights, Precision precision, const std::string& label) {
    CudaLlamaModel model(weights, {.precision = precision, .max_context = 128});
    const auto passes = specdec::test::passes_at_every_width(model);
    const double bound = bound_for(precision);
    for (const auto& [width, agreement] : specdec::test::agreement_by_width(passes, ReferenceTransformer(weights))) {
        INFO(label << " on the GPU, " << width << ": worst row error " << agreement.worst << " at position "
                   << agreement.worst_row << " over " << agreement.rows << " rows; bound " << bound);
        CHECK(agreement.rows > 0);
        CHECK(agreement.worst <= bound);
    }
    if (precision == Precision::f32) {
        const ReferenceTransformer wrong(weights, ReferenceOptions{.query_rope_offset = 1});
        const auto agreement = specdec::test::agreement_by_width(passes, wrong).at("all");
        INFO(label << " on the GPU against a reference with RoPE off by one: worst row error " << agreement.worst);
        CHECK(agreement.worst > bound);
    }
}

// The shape of the CPU reference agreement test: rows that fit every block size.
specdec::SyntheticShape reference_shape(WeightType storage) {
    return {.size = "reference",
            .config = {.vocab_size = 256, .context_length = 128, .embedding_dim = 256, .layer_count = 2, .head_count = 4,
                       .kv_head_count = 2, .feed_forward_dim = 512},
            .storage = storage};
}

TEST_CASE("the CUDA model agrees with the float64 reference on the synthetic family in every storage type",
          "[cuda][reference]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    specdec::cpu::ThreadPool pool(2);
    for (const WeightType type : specdec::kAllWeightTypes) {
        const auto shape = reference_shape(type);
        const LlamaWeights weights = specdec::detail::synthetic_weights(pool, shape, 7, shape.config.layer_count, type, type);
        require_agreement(weights, Precision::f32, std::string("synthetic ") + weight_type_name(type));
    }
    const auto shape = reference_shape(WeightType::f32);
    const LlamaWeights weights = specdec::detail::synthetic_weights(pool, shape, 7, shape.config.layer_count, WeightType::f32, WeightType::f32);
    require_agreement(weights, Precision::f16, "synthetic F32 at f16");
    require_agreement(weights, Precision::bf16, "synthetic F32 at bf16");
}

TEST_CASE("the CUDA model agrees with the float64 reference on the architecture fixtures", "[cuda][reference][fixture]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    for (const std::string name : {"llama3-f32", "llama3-q8_0", "llama-gqa-f32", "llama-gqa-q8_0", "mistral-f32", "mistral-q8_0"}) {
        // The source tree's fixtures, or those of a checkout copied to the GPU machine (run from its root).
        auto path = std::filesystem::path(SPECDEC_REPO_FIXTURES) / (name + ".gguf");
        if (!std::filesystem::exists(path)) path = std::filesystem::path("tests/fixtures") / (name + ".gguf");
        if (!std::filesystem::exists(path)) {
            WARN("fixture " << path << " not found");
            continue;
        }
        const specdec::LlamaModel host = specdec::LlamaModel::from_gguf(path, {.threads = 1});
        require_agreement(host.weights(), Precision::f32, name);
    }
}

}  // namespace cuda_reference_agreement

#endif  // SPECDEC_HAS_REFERENCE_TRANSFORMER
