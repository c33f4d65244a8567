// The float64 reference forward pass (see reference_transformer.hpp). Each
// step is written as its textbook formula over whole matrices: rows are
// positions, columns are features.
#include "support/reference_transformer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <Eigen/Dense>

#include "specdec/tensors/weight_matrix.hpp"

namespace specdec::test {

namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;
using RowVector = Eigen::RowVectorXd;

// The matrix as the model sees it: row r is the library's dequantisation of
// stored row r, widened to double.
Matrix dequantized(const WeightMatrix& w) {
    Matrix m(w.rows, w.cols);
    std::vector<float> row(w.cols);
    for (std::size_t r = 0; r < w.rows; ++r) {
        cpu::dequantize_row(w, r, row.data());
        for (std::size_t c = 0; c < w.cols; ++c) m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = row[c];
    }
    return m;
}

RowVector widened(const std::vector<float>& v) {
    RowVector out(static_cast<Eigen::Index>(v.size()));
    for (std::size_t i = 0; i < v.size(); ++i) out(static_cast<Eigen::Index>(i)) = v[i];
    return out;
}

struct Layer {
    RowVector attention_norm, ffn_norm;
    Matrix query, key, value, attention_output, gate, up, down;
    RowVector query_bias, key_bias, value_bias;  // empty = no bias
};

}  // namespace

struct ReferenceTransformer::Weights {
    LlamaConfig config;
    Matrix embedding, output;
    RowVector output_norm;
    std::vector<Layer> layers;
    Vector inverse_frequencies;  // one per rotary pair, computed here in double
};

ReferenceTransformer::ReferenceTransformer(const LlamaWeights& weights, ReferenceOptions options) : options_(options) {
    weights.validate();
    auto w = std::make_unique<Weights>();
    w->config = weights.config;
    w->embedding = dequantized(weights.token_embedding);
    w->output = dequantized(weights.output);
    w->output_norm = widened(weights.output_norm);
    for (const LlamaLayerWeights& l : weights.layers) {
        w->layers.push_back(Layer{widened(l.attention_norm), widened(l.ffn_norm), dequantized(l.query), dequantized(l.key),
                                  dequantized(l.value), dequantized(l.attention_output), dequantized(l.ffn_gate),
                                  dequantized(l.ffn_up), dequantized(l.ffn_down), widened(l.query_bias),
                                  widened(l.key_bias), widened(l.value_bias)});
    }
    const LlamaConfig& c = w->config;
    const std::size_t pairs = c.rotary_dim() / 2;
    w->inverse_frequencies.resize(static_cast<Eigen::Index>(pairs));
    for (std::size_t i = 0; i < pairs; ++i) {
        double f = std::pow(double(c.rope_freq_base), -2.0 * double(i) / double(c.rotary_dim()));
        if (!c.rope_frequency_factors.empty()) f /= double(c.rope_frequency_factors[i]);
        w->inverse_frequencies(static_cast<Eigen::Index>(i)) = f;
    }
    weights_ = std::move(w);
}

ReferenceTransformer::~ReferenceTransformer() = default;
ReferenceTransformer::ReferenceTransformer(ReferenceTransformer&&) noexcept = default;
ReferenceTransformer& ReferenceTransformer::operator=(ReferenceTransformer&&) noexcept = default;

std::size_t ReferenceTransformer::vocab_size() const noexcept { return weights_->config.vocab_size; }

namespace {

// x / sqrt(mean(x^2) + eps) * weight, row by row.
Matrix rms_norm(const Matrix& x, const RowVector& weight, double eps) {
    Matrix out(x.rows(), x.cols());
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
        const double mean_square = x.row(i).squaredNorm() / double(x.cols());
        out.row(i) = x.row(i).cwiseProduct(weight) / std::sqrt(mean_square + eps);
    }
    return out;
}

// x W^T (+ bias on every row).
Matrix project(const Matrix& x, const Matrix& w, const RowVector& bias) {
    Matrix out = x * w.transpose();
    if (bias.size() != 0) out.rowwise() += bias;
    return out;
}

// Rotates every head of row `row` by position * inverse_frequencies, pairing
// (x[2i], x[2i+1]) or (x[i], x[i + pairs]) as the config says; values past
// the rotary dimensions are left alone.
void rotate(Matrix& heads, Eigen::Index row, std::size_t head_count, const LlamaConfig& c, const Vector& inverse_frequencies,
            double position) {
    const std::size_t hd = c.head_dim(), pairs = static_cast<std::size_t>(inverse_frequencies.size());
    for (std::size_t h = 0; h < head_count; ++h) {
        for (std::size_t i = 0; i < pairs; ++i) {
            const double angle = position * inverse_frequencies(static_cast<Eigen::Index>(i));
            const std::size_t first = c.rope_style == RopeStyle::halves ? i : 2 * i;
            const std::size_t second = c.rope_style == RopeStyle::halves ? i + pairs : 2 * i + 1;
            double& a = heads(row, static_cast<Eigen::Index>(h * hd + first));
            double& b = heads(row, static_cast<Eigen::Index>(h * hd + second));
            const double a0 = a, b0 = b;
            a = a0 * std::cos(angle) - b0 * std::sin(angle);
            b = a0 * std::sin(angle) + b0 * std::cos(angle);
        }
    }
}

}  // namespace

ReferenceLogits ReferenceTransformer::logits(std::span<const Token> tokens) const {
    const Weights& w = *weights_;
    const LlamaConfig& c = w.config;
    const auto n = static_cast<Eigen::Index>(tokens.size());
    const auto dim = static_cast<Eigen::Index>(c.embedding_dim);
    const auto hd = static_cast<Eigen::Index>(c.head_dim());
    const std::size_t group = c.head_count / c.kv_heads();
    const double eps = c.rms_norm_eps, scale = 1.0 / std::sqrt(double(hd));

    Matrix x(n, dim);
    for (Eigen::Index i = 0; i < n; ++i) {
        const Token t = tokens[static_cast<std::size_t>(i)];
        if (t < 0 || static_cast<std::size_t>(t) >= c.vocab_size) throw std::out_of_range("reference: token id out of range");
        x.row(i) = w.embedding.row(t);
    }
    for (const Layer& l : w.layers) {
        const Matrix normed = rms_norm(x, l.attention_norm, eps);
        Matrix q = project(normed, l.query, l.query_bias);
        Matrix k = project(normed, l.key, l.key_bias);
        const Matrix v = project(normed, l.value, l.value_bias);
        for (Eigen::Index i = 0; i < n; ++i) {
            const double position = double(i) / double(c.rope_linear_scale);
            const double query_position = double(i + options_.query_rope_offset) / double(c.rope_linear_scale);
            rotate(q, i, c.head_count, c, w.inverse_frequencies, query_position);
            rotate(k, i, c.kv_heads(), c, w.inverse_frequencies, position);
        }
        // Causal softmax attention; query head h reads key/value head h / group.
        Matrix attended(n, dim);
        for (std::size_t h = 0; h < c.head_count; ++h) {
            const Eigen::Index qc = static_cast<Eigen::Index>(h) * hd, kc = static_cast<Eigen::Index>(h / group) * hd;
            Matrix scores = q.middleCols(qc, hd) * k.middleCols(kc, hd).transpose() * scale;
            for (Eigen::Index i = 0; i < n; ++i) {
                const Eigen::Index visible = options_.attention_skips_own_key && i > 0 ? i : i + 1;
                scores.row(i).tail(n - visible).setConstant(-std::numeric_limits<double>::infinity());
                const double top = scores.row(i).maxCoeff();
                scores.row(i) = (scores.row(i).array() - top).exp().matrix();
                scores.row(i) /= scores.row(i).sum();
            }
            attended.middleCols(qc, hd) = scores * v.middleCols(kc, hd);
        }
        x += attended * l.attention_output.transpose();

        const Matrix ffn_in = rms_norm(x, l.ffn_norm, eps);
        const Matrix gate = ffn_in * l.gate.transpose();
        const Matrix up = ffn_in * l.up.transpose();
        const Matrix silu = (gate.array() / (1.0 + (-gate.array()).exp())).matrix();
        x += silu.cwiseProduct(up) * l.down.transpose();
    }
    const Matrix logits = rms_norm(x, w.output_norm, eps) * w.output.transpose();
    ReferenceLogits rows(static_cast<std::size_t>(n));
    for (Eigen::Index i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)].assign(logits.row(i).data(), logits.row(i).data() + logits.cols());
    return rows;
}

std::vector<ReferenceLogits> ReferenceTransformer::logits(const std::vector<std::vector<Token>>& sequences) const {
    std::vector<ReferenceLogits> out;
    out.reserve(sequences.size());
    for (const auto& sequence : sequences) out.push_back(logits(std::span<const Token>(sequence)));
    return out;
}

double relative_row_error(std::span<const float> model, std::span<const double> reference) {
    if (model.size() != reference.size()) return std::numeric_limits<double>::infinity();
    double worst = 0.0, scale = 0.0;
    for (std::size_t j = 0; j < model.size(); ++j) {
        const double difference = std::fabs(double(model[j]) - reference[j]);
        // A NaN in the model's row must not compare as agreement.
        worst = std::isnan(difference) ? std::numeric_limits<double>::infinity() : std::max(worst, difference);
        scale = std::max(scale, std::fabs(reference[j]));
    }
    return worst / std::max(scale, std::numeric_limits<double>::min());
}

void compare_rows(ReferenceAgreement& agreement, const std::vector<std::vector<float>>& model_rows,
                  const ReferenceLogits& reference_rows, std::size_t first_reference_row) {
    for (std::size_t i = 0; i < model_rows.size(); ++i) {
        const std::size_t r = first_reference_row + i;
        const double error = r < reference_rows.size() ? relative_row_error(model_rows[i], reference_rows[r])
                                                       : std::numeric_limits<double>::infinity();
        if (error > agreement.worst) {
            agreement.worst = error;
            agreement.worst_row = r;
        }
        ++agreement.rows;
    }
}

}  // namespace specdec::test
