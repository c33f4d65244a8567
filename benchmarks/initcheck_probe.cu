// Decides whether compute-sanitizer's initcheck sees the stores of cuBLAS's
// GEMM kernels on the device at hand (benchmarks/gpu_check.sh runs it under
// initcheck before checking the model). It writes a never-initialised buffer
// twice: once with a kernel of its own (the control, which initcheck must
// accept), once through cublasGemmEx with the shapes and types the CUDA model
// uses; a kernel then reads each. A report on read_buffer after a GEMM means
// initcheck missed cuBLAS's stores, so its reports on kernels that read a GEMM
// output (the model's rope kernel reads the QKV projection) are not evidence of
// a bug on that device.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cstdio>

namespace {

__global__ void read_buffer(const float* values, int count, float* sum) {
    float partial = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) partial += values[i];
    atomicAdd(sum, partial);
}

__global__ void write_buffer(float* values, int count) {
    for (int i = threadIdx.x; i < count; i += blockDim.x) values[i] = 1.0f;
}

int failures = 0;

void check(bool ok, const char* what) {
    if (!ok) {
        std::printf("probe: %s failed\n", what);
        ++failures;
    }
}

// y [n x out] = x [n x in] W^T, as detail::gemm computes it, into a fresh buffer; then read y.
template <class T>
void gemm_then_read(cudaDataType_t type, const char* label, int out_features, int in_features, int n) {
    cublasHandle_t handle = nullptr;
    check(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    T *weights = nullptr, *x = nullptr;
    float *y = nullptr, *sum = nullptr;
    check(cudaMalloc(&weights, sizeof(T) * out_features * in_features) == cudaSuccess, "cudaMalloc");
    check(cudaMalloc(&x, sizeof(T) * in_features * n) == cudaSuccess, "cudaMalloc");
    check(cudaMalloc(&y, sizeof(float) * out_features * n) == cudaSuccess, "cudaMalloc");
    check(cudaMalloc(&sum, sizeof(float)) == cudaSuccess, "cudaMalloc");
    cudaMemset(weights, 0, sizeof(T) * out_features * in_features);
    cudaMemset(x, 0, sizeof(T) * in_features * n);
    cudaMemset(sum, 0, sizeof(float));
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, out_features, n, in_features, &alpha, weights, type, in_features, x,
                       type, in_features, &beta, y, CUDA_R_32F, out_features, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "cublasGemmEx");
    read_buffer<<<1, 256>>>(y, out_features * n, sum);
    check(cudaDeviceSynchronize() == cudaSuccess, label);
    std::printf("probe: read the %s GEMM output %dx%d (n = %d)\n", label, out_features, in_features, n);
    cudaFree(weights);
    cudaFree(x);
    cudaFree(y);
    cudaFree(sum);
    cublasDestroy(handle);
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("probe: no CUDA device\n");
        return 1;
    }
    float *values = nullptr, *sum = nullptr;
    check(cudaMalloc(&values, 4096 * sizeof(float)) == cudaSuccess, "cudaMalloc");
    check(cudaMalloc(&sum, sizeof(float)) == cudaSuccess, "cudaMalloc");
    cudaMemset(sum, 0, sizeof(float));
    write_buffer<<<1, 256>>>(values, 4096);
    read_buffer<<<1, 256>>>(values, 4096, sum);
    check(cudaDeviceSynchronize() == cudaSuccess, "control");
    std::printf("probe: read a buffer written by a kernel of its own (control)\n");
    cudaFree(values);
    cudaFree(sum);
    // The tiny synthetic model's QKV projection (96 -> 192, 40 tokens) in f32 and f16, and a wide one.
    gemm_then_read<float>(CUDA_R_32F, "f32", 192, 96, 40);
    gemm_then_read<__half>(CUDA_R_16F, "f16", 192, 96, 40);
    gemm_then_read<float>(CUDA_R_32F, "f32", 4096, 4096, 8);
    return failures == 0 ? 0 : 1;
}
