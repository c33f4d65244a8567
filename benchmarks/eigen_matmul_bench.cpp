// specdec-eigen-matmul-bench: Eigen's float matrix product against the
// library's cpu::matmul on the products of the "100m" synthetic shape (one
// layer's q, k, v, o, gate, up, down and the 32000-row output head), for a
// one-token pass and a 64-token pass, on one thread (Eigen without OpenMP is
// single-threaded; cpu::matmul gets a pool of one). cpu::matmul runs on F32
// and on F16 weights (the 100m target's storage); Eigen on F32. Medians of
// the repetitions, interleaved so that load from elsewhere hits all alike.
// Numbers and their reading: docs/reference-model.md.
//
//   specdec-eigen-matmul-bench [--repetitions N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/models/synthetic.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Shape {
    std::size_t rows, cols;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int repetitions = 7;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--repetitions") == 0 && i + 1 < argc) repetitions = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: specdec-eigen-matmul-bench [--repetitions N]\n");
            return 2;
        }
    }
    const std::vector<Shape> shapes = {{768, 768}, {768, 768}, {768, 768}, {768, 768}, {2048, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
    double flop_per_column = 0.0;
    for (const Shape& s : shapes) flop_per_column += 2.0 * double(s.rows) * double(s.cols);

    specdec::cpu::ThreadPool pool(1);
    std::vector<std::shared_ptr<const void>> storage;
    std::vector<specdec::WeightMatrix> f32, f16;
    std::vector<RowMatrix> eigen;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        const Shape s = shapes[i];
        const float std_dev = 1.0f / std::sqrt(float(s.cols));
        f32.push_back(specdec::detail::synthetic_matrix(pool, storage, 100 + i, s.rows, s.cols, std_dev, specdec::WeightType::f32));
        f16.push_back(specdec::detail::synthetic_matrix(pool, storage, 100 + i, s.rows, s.cols, std_dev, specdec::WeightType::f16));
        eigen.emplace_back(s.rows, s.cols);
        std::memcpy(eigen.back().data(), f32.back().data, s.rows * s.cols * sizeof(float));
    }

    std::printf("single thread, one layer of the 100m shape + output head (%.0f MFLOP per token); median of %d\n",
                flop_per_column / 1e6, repetitions);
    std::printf("%-8s %-26s %10s %10s\n", "tokens", "kernel", "ms", "GFLOP/s");
    for (const std::size_t n : {std::size_t{1}, std::size_t{64}}) {
        // Token-major activations (column c at x + c * cols), as the model lays them out.
        std::vector<float> x(n * 2048), y(n * 32000);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = float((i * 7919) % 1000) / 1000.0f - 0.5f;
        std::vector<double> times[3];
        for (int r = 0; r < repetitions; ++r) {
            for (int kernel = 0; kernel < 3; ++kernel) {
                const auto start = Clock::now();
                for (std::size_t i = 0; i < shapes.size(); ++i) {
                    const Shape s = shapes[i];
                    if (kernel == 2) {
                        const Eigen::Map<const RowMatrix> xs(x.data(), Eigen::Index(n), Eigen::Index(s.cols));
                        Eigen::Map<RowMatrix> ys(y.data(), Eigen::Index(n), Eigen::Index(s.rows));
                        ys.noalias() = xs * eigen[i].transpose();
                    } else {
                        specdec::cpu::matmul(pool, kernel == 0 ? f32[i] : f16[i], x.data(), s.cols, n, y.data(), s.rows);
                    }
                }
                times[kernel].push_back(std::chrono::duration<double>(Clock::now() - start).count());
            }
        }
        const char* names[3] = {"cpu::matmul, F32 weights", "cpu::matmul, F16 weights", "Eigen, F32 weights"};
        for (int kernel = 0; kernel < 3; ++kernel) {
            const double t = median(times[kernel]);
            std::printf("%-8zu %-26s %10.3f %10.1f\n", n, names[kernel], t * 1e3, flop_per_column * double(n) / t / 1e9);
        }
    }
}
