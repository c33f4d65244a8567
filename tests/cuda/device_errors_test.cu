// Availability and errors: every failure of the CUDA backend is a
// specdec::Error with a message that says what went wrong; nothing aborts.
#include <cstddef>
#include <string>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/models/synthetic.hpp"

using specdec::Token;
using specdec::cuda::CudaLlamaModel;

TEST_CASE("available() and device_description() answer without throwing, with or without a GPU", "[cuda][errors]") {
    bool available = false;
    std::string description;
    REQUIRE_NOTHROW(available = specdec::cuda::available());
    REQUIRE_NOTHROW(description = specdec::cuda::device_description());
    INFO("device: " << description);
    CHECK(!description.empty());
    // Without a device the description says so; with one it names the device.
    CHECK((description.rfind("no CUDA device", 0) == 0) == !available);
}

TEST_CASE("without a CUDA device, creating a model throws specdec::Error saying there is no device", "[cuda][errors]") {
    if (specdec::cuda::available()) {
        WARN("skipped: needs a machine without a CUDA device (found " << specdec::cuda::device_description() << ")");
        return;
    }
    const specdec::SyntheticShape tiny = specdec::synthetic_shape("tiny");
    REQUIRE_THROWS_AS(CudaLlamaModel::synthetic(tiny, 1), specdec::Error);
    REQUIRE_THROWS_WITH(CudaLlamaModel::synthetic(tiny, 1), Catch::Contains("no CUDA device"));
    const specdec::LlamaModel cpu = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
    REQUIRE_THROWS_WITH(CudaLlamaModel(cpu.weights()), Catch::Contains("no CUDA device"));
    // The building blocks fail the same way, as errors rather than aborts.
    REQUIRE_THROWS_AS(specdec::cuda::DeviceBuffer<float>(16), specdec::Error);
    REQUIRE_THROWS_AS(specdec::cuda::Stream(), specdec::Error);
    REQUIRE_THROWS_AS(specdec::cuda::make_cuda_synthetic_target({.size = "tiny"}), specdec::Error);
}

TEST_CASE("an allocation larger than the device throws specdec::Error naming out-of-memory", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    constexpr std::size_t kOnePebibyte = std::size_t{1} << 50;
    REQUIRE_THROWS_WITH(specdec::cuda::DeviceBuffer<std::byte>(kOnePebibyte), Catch::Contains("out of memory"));
    // The failed allocation leaves the device usable.
    specdec::cuda::DeviceBuffer<float> small(1024);
    CHECK(small.size() == 1024);
}

TEST_CASE("a CUDA model rejects bad token ids, context overflow and truncation beyond the cache", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    CudaLlamaModel model = CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 1, 0, {.max_context = 8});
    const std::vector<Token> out_of_range{1, 512};
    REQUIRE_THROWS_WITH(model.forward(out_of_range), Catch::Contains("outside the vocabulary"));
    const std::vector<Token> negative{-1};
    REQUIRE_THROWS_WITH(model.forward(negative), Catch::Contains("outside the vocabulary"));
    CHECK(model.cached_tokens() == 0);
    const std::vector<Token> six{1, 2, 3, 4, 5, 6};
    (void)model.forward(six);
    REQUIRE_THROWS_WITH(model.forward(std::vector<Token>{1, 2, 3}), Catch::Contains("overflows the context length 8"));
    CHECK(model.cached_tokens() == 6);
    REQUIRE_THROWS_WITH(model.truncate(7), Catch::Contains("beyond the 6 cached positions"));
}

TEST_CASE("device verification rejects a draft whose distributions do not match the vocabulary", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    CudaLlamaModel model = CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 1);
    specdec::DraftProposal draft;
    draft.tokens = {3, 4};
    draft.vocab = 100;  // the model has 512
    draft.probabilities.assign(2 * 100, 0.01f);
    const std::vector<Token> feed{1, 3, 4};
    REQUIRE_THROWS_WITH(model.forward_and_verify(feed, draft, {.temperature = 1.0}, specdec::CounterRng{1}, 1),
                        Catch::Contains("vocabulary"));
    CHECK(model.cached_tokens() == 0);
}
