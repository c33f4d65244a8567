#pragma once
// Tiny recurrent models as GGUF files that llama.cpp loads, written by the
// tests themselves (no fixture file): llama.cpp's "mamba" architecture (every
// layer a Mamba block: a recurrent state only), its "jamba" architecture
// (Mamba blocks and attention layers: a recurrent state and a KV cache, a
// hybrid memory) and "lfm2" (short convolutions and attention layers with
// RoPE: a hybrid whose recurrent state llama.cpp can also roll back itself
// within a pass, n_rs_seq). Seeded random weights at scales that keep the activations
// of a few layers in a sane range, and the synthetic SentencePiece-style
// vocabulary of specdec-bench's exporter. A draft is the same model with
// noise added to every matrix, so that it agrees with its target often but
// not always.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../../benchmarks/gguf_export.hpp"
#include "specdec/formats/gguf_writer.hpp"

namespace specdec::test::llama_cpp {

enum class RecurrentArchitecture { mamba, jamba, lfm2 };

struct TinyRecurrentModel {
    RecurrentArchitecture architecture = RecurrentArchitecture::mamba;
    std::uint64_t seed = 1;
    double noise = 0.0;            // a draft: N(0, noise^2) added to every matrix entry, from seed + 1
    std::size_t vocab_size = 320;  // at least the synthetic vocabulary's 260 reserved tokens
    std::size_t embedding = 32;    // Mamba blocks expand by 2: inner size 64
    std::size_t layers = 2;        // jamba, lfm2: recurrent blocks at even layers, attention at odd ones
    std::size_t context = 256;
};

inline void write_tiny_recurrent_gguf(const TinyRecurrentModel& spec, const std::filesystem::path& path) {
    const bool jamba = spec.architecture == RecurrentArchitecture::jamba;
    const bool lfm2 = spec.architecture == RecurrentArchitecture::lfm2;
    const std::string arch = jamba ? "jamba" : lfm2 ? "lfm2" : "mamba";
    const std::size_t embd = spec.embedding, inner = 2 * embd, state = 8, conv = 4, dt_rank = 4;
    const std::size_t heads = 4, kv_heads = 2, head_dim = embd / heads, ff = 2 * embd;
    std::mt19937_64 rng(spec.seed), noise_rng(spec.seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::deque<std::vector<float>> values;  // the writer keeps spans into these until write()
    gguf::Writer writer;
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    writer.add_string("general.architecture", arch).add_string("general.name", "tiny-" + arch);
    writer.add_uint32(arch + ".context_length", u32(spec.context));
    writer.add_uint32(arch + ".embedding_length", u32(embd));
    writer.add_uint32(arch + ".block_count", u32(spec.layers));
    writer.add_uint32(arch + ".vocab_size", u32(spec.vocab_size));
    writer.add_uint32(arch + ".ssm.conv_kernel", u32(conv));
    writer.add_uint32(arch + ".ssm.inner_size", u32(inner));
    writer.add_uint32(arch + ".ssm.state_size", u32(state));
    writer.add_uint32(arch + ".ssm.time_step_rank", u32(dt_rank));
    writer.add_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    if (lfm2) {
        writer.add_uint32(arch + ".shortconv.l_cache", 3);
        writer.add_float32(arch + ".rope.freq_base", 10000.0f);
    }
    if (jamba || lfm2) {
        std::vector<std::int32_t> kv(spec.layers);
        for (std::size_t i = 0; i < spec.layers; ++i) kv[i] = i % 2 == 1 ? static_cast<std::int32_t>(kv_heads) : 0;
        writer.add_uint32(arch + ".attention.head_count", u32(heads));
        writer.add_int32_array(arch + ".attention.head_count_kv", kv);
        writer.add_uint32(arch + ".feed_forward_length", u32(ff));
    } else {
        writer.add_uint32(arch + ".feed_forward_length", 0).add_uint32(arch + ".attention.head_count", 0);
    }
    bench::add_synthetic_vocabulary(writer, spec.vocab_size);

    // ne0 first, as GGUF lists dimensions; a matrix of `cols` x `rows` has `cols` contiguous.
    const auto tensor = [&](const std::string& name, std::vector<std::uint64_t> shape, std::vector<float> v) {
        values.push_back(std::move(v));
        writer.add_tensor_f32(name, std::move(shape), values.back());
    };
    const auto random = [&](const std::string& name, std::size_t cols, std::size_t rows, float scale) {
        std::vector<float> v(cols * rows);
        for (float& x : v) x = scale * normal(rng);
        if (spec.noise > 0.0)
            for (float& x : v) x += static_cast<float>(spec.noise) * normal(noise_rng);
        tensor(name, {cols, rows}, std::move(v));
    };
    const auto constant = [&](const std::string& name, std::vector<std::uint64_t> shape, float value) {
        std::size_t n = 1;
        for (const std::uint64_t d : shape) n *= d;
        tensor(name, std::move(shape), std::vector<float>(n, value));
    };
    const auto over_sqrt = [](std::size_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };

    random("token_embd.weight", embd, spec.vocab_size, 1.0f);
    for (std::size_t i = 0; i < spec.layers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        constant(p + "attn_norm.weight", {embd}, 1.0f);
        if (lfm2 && i % 2 == 0) {
            random(p + "shortconv.conv.weight", 3, embd, 0.5f);
            random(p + "shortconv.in_proj.weight", embd, 3 * embd, over_sqrt(embd));
            random(p + "shortconv.out_proj.weight", embd, embd, over_sqrt(embd));
        } else if (!(jamba || lfm2) || i % 2 == 0) {
            random(p + "ssm_in.weight", embd, 2 * inner, over_sqrt(embd));
            random(p + "ssm_conv1d.weight", conv, inner, 0.5f);
            constant(p + "ssm_conv1d.bias", {inner}, 0.0f);
            random(p + "ssm_x.weight", inner, dt_rank + 2 * state, over_sqrt(inner));
            random(p + "ssm_dt.weight", dt_rank, inner, over_sqrt(dt_rank));
            constant(p + "ssm_dt.bias", {inner}, -2.0f);  // softplus(-2): steps of about 0.13
            std::vector<float> a(state * inner);
            for (std::size_t c = 0; c < inner; ++c)
                for (std::size_t s = 0; s < state; ++s) a[c * state + s] = -static_cast<float>(s + 1);  // decays
            tensor(p + "ssm_a", {state, inner}, std::move(a));
            constant(p + "ssm_d", {inner}, 1.0f);
            random(p + "ssm_out.weight", inner, embd, over_sqrt(inner));
            if (jamba) {
                constant(p + "ssm_dt_norm.weight", {dt_rank}, 1.0f);
                constant(p + "ssm_b_norm.weight", {state}, 1.0f);
                constant(p + "ssm_c_norm.weight", {state}, 1.0f);
            }
        } else {
            if (lfm2) {
                constant(p + "attn_q_norm.weight", {head_dim}, 1.0f);
                constant(p + "attn_k_norm.weight", {head_dim}, 1.0f);
            }
            random(p + "attn_q.weight", embd, embd, over_sqrt(embd));
            random(p + "attn_k.weight", embd, kv_heads * head_dim, over_sqrt(embd));
            random(p + "attn_v.weight", embd, kv_heads * head_dim, over_sqrt(embd));
            random(p + "attn_output.weight", embd, embd, over_sqrt(embd));
        }
        if (jamba || lfm2) {
            constant(p + "ffn_norm.weight", {embd}, 1.0f);
            random(p + "ffn_gate.weight", embd, ff, over_sqrt(embd));
            random(p + "ffn_up.weight", embd, ff, over_sqrt(embd));
            random(p + "ffn_down.weight", ff, embd, over_sqrt(ff));
        }
    }
    constant(lfm2 ? "token_embd_norm.weight" : "output_norm.weight", {embd}, 1.0f);
    random("output.weight", embd, spec.vocab_size, 2.0f * over_sqrt(embd));
    writer.write(path);
}

}  // namespace specdec::test::llama_cpp
