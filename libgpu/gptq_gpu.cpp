#include "libgpu/gptq_gpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include "core/error.h"
#include "core/group_size.h"
#include "cuda/device_buffer.h"
#include "cuda/gptq_ops.h"
#include "libgpu/launch_check.h"

namespace tl::gpu {

namespace {

using cuda::DeviceBuffer;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class T>
void to_host(T* dst, const T* src, size_t n) {
  if (n) TL_CUDA_THROW(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost));
}
template <class T>
void to_device(T* dst, const T* src, size_t n) {
  if (n) TL_CUDA_THROW(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
}

}  // namespace

struct GpuGptq::Impl {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  DeviceBuffer<float> W, Wc, Hp, Hw, err, scale, zq, E, HE, diag, tie, w_hat, work;
  DeviceBuffer<uint8_t> dead, q;
  DeviceBuffer<int32_t> order;
  DeviceBuffer<double> loss, dots;
  DeviceBuffer<__half> scale16, zero16;
  DeviceBuffer<float> H_host_copy;  // quantize_host's upload
  DeviceBuffer<int> info, bad;
  cusolverDnParams_t params = nullptr;  // the 64-bit potrf's (default algorithm)
  // The largest matrix (elements) the factor gives the 32-bit potrf and a whole trtri; trtri
  // refuses more than 2^31 - 1, and past it the factor takes the 64-bit potrf (the documented
  // API for such sizes) and splits the inverse. set_max_whole_elements lowers it for tests.
  int64_t max_whole = kMaxWholeElements;

  ~Impl() {
    if (params) cusolverDnDestroyParams(params);
    if (solver) cusolverDnDestroy(solver);
    if (blas) cublasDestroy(blas);
  }

  Factor method = Factor::kReversed;

  // cuSOLVER's info: 0 done, > 0 not positive definite (or a zero pivot); < 0 a wrong argument,
  // which is this code's bug, not the matrix's (no damping retry for it).
  int info_value(const char* what) {
    int h = 0;
    to_host(&h, info.get(), 1);
    if (h < 0) throw Error(std::string(what) + ": cuSOLVER reports argument " + std::to_string(-h) + " invalid");
    return h;
  }
  float* workspace_bytes(size_t bytes) {
    work.reserve((bytes + sizeof(float) - 1) / sizeof(float) + 1);
    return work.get();
  }

  // One Cholesky-based step of upstream's sequence on Hw in place (column-major view of a
  // symmetric matrix); false when cuSOLVER reports the matrix not positive definite.
  bool solver_step(bool inverse, int K) {
    int lwork = 0;
    float* A = Hw.get();
    if (inverse) check_solver(cusolverDnSpotri_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, K, A, K, &lwork), "potri_bufferSize");
    else check_solver(cusolverDnSpotrf_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, K, A, K, &lwork), "potrf_bufferSize");
    float* w = workspace_bytes(size_t(std::max(lwork, 1)) * sizeof(float));
    if (inverse) check_solver(cusolverDnSpotri(solver, CUBLAS_FILL_MODE_LOWER, K, A, K, w, lwork, info.get()), "potri");
    else check_solver(cusolverDnSpotrf(solver, CUBLAS_FILL_MODE_LOWER, K, A, K, w, lwork, info.get()), "potrf");
    return info_value(inverse ? "potri" : "potrf") == 0;
  }

  // The CPU's factor (libconvert/gptq.cpp, gptq_inverse_hessian_factor) on Hw, row-major
  // throughout (cuSOLVER's column-major view of it is the transpose):
  //   R = J (H + damp I) J   flat reversal;
  //   R = L L^T              potrf, upper in the column-major view = L lower in row-major;
  //   V = J L J              flat reversal: upper, and H + damp I = V V^T;
  //   U = V^-1               lower_inverse (trtri), lower in the column-major view (V^T) = U upper
  //                          in row-major;
  // so (H + damp I)^-1 = V^-T V^-1 = U^T U. Two factorizations of K^3 / 3 flops each where
  // upstream's sequence takes four (potri is a triangular inverse and a triangular product).
  // potrf reads R's upper triangle in the column-major view (the row-major lower), the CPU's
  // LLT the other one: they agree because the Hessians are symmetric bit for bit (the calibration
  // symmetrizes them). The triangle below U holds the reversed input; nothing reads it.
  // A matrix of more than max_whole elements (mlp_down of the 405B shape: K = 53248) takes the
  // 64-bit potrf and the split inverse.
  bool reversed_factor(int64_t K) {
    float* A = Hw.get();
    check_launch(cuda::gptq_reverse(A, int(K), nullptr), "gptq_reverse");
    if (K * K <= max_whole) {
      int lwork = 0;
      check_solver(cusolverDnSpotrf_bufferSize(solver, CUBLAS_FILL_MODE_UPPER, int(K), A, int(K), &lwork), "potrf_bufferSize");
      float* w = workspace_bytes(size_t(std::max(lwork, 1)) * sizeof(float));
      check_solver(cusolverDnSpotrf(solver, CUBLAS_FILL_MODE_UPPER, int(K), A, int(K), w, lwork, info.get()), "potrf");
    } else {
      size_t dev_bytes = 0, host_bytes = 0;
      check_solver(cusolverDnXpotrf_bufferSize(solver, params, CUBLAS_FILL_MODE_UPPER, K, CUDA_R_32F, A, K, CUDA_R_32F,
                                               &dev_bytes, &host_bytes),
                   "potrf_bufferSize (64-bit)");
      std::vector<char> host_work(std::max<size_t>(host_bytes, 1));
      float* w = workspace_bytes(std::max<size_t>(dev_bytes, 1));
      check_solver(cusolverDnXpotrf(solver, params, CUBLAS_FILL_MODE_UPPER, K, CUDA_R_32F, A, K, CUDA_R_32F, w, dev_bytes,
                                    host_work.data(), host_bytes, info.get()),
                   "potrf (64-bit)");
    }
    if (info_value("potrf") != 0) return false;
    check_launch(cuda::gptq_reverse(A, int(K), nullptr), "gptq_reverse");
    return lower_inverse(A, K, K);
  }

  // The lower triangle L of the n x n column-major matrix at A (leading dimension lda) replaced by
  // L^-1, the strict upper triangle untouched; false when a diagonal entry is zero. cuSOLVER's
  // trtri takes it whole up to max_whole elements (n * lda): past 2^31 it refuses the call
  // (CUSOLVER_STATUS_INVALID_VALUE for n = lda = 53248 on the H200, cuSOLVER of CUDA 13.0).
  // Larger, it is split:
  //     [ A  0 ]^-1   [      A^-1        0   ]
  //     [ B  C ]    = [ -C^-1 B A^-1   C^-1  ]
  // the diagonal blocks inverted in place (recursively), then the corner by two in-place trmm
  // (B <- B A^-1, B <- -C^-1 B): K^3 / 3 flops in all, as trtri's.
  bool lower_inverse(float* A, int64_t n, int64_t lda) {
    if (n == 1 || n * lda <= max_whole) {
      size_t dev_bytes = 0, host_bytes = 0;
      check_solver(cusolverDnXtrtri_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, CUBLAS_DIAG_NON_UNIT, n, CUDA_R_32F, A, lda,
                                               &dev_bytes, &host_bytes),
                   "trtri_bufferSize");
      std::vector<char> host_work(std::max<size_t>(host_bytes, 1));
      float* w = workspace_bytes(std::max<size_t>(dev_bytes, 1));
      check_solver(cusolverDnXtrtri(solver, CUBLAS_FILL_MODE_LOWER, CUBLAS_DIAG_NON_UNIT, n, CUDA_R_32F, A, lda, w, dev_bytes,
                                    host_work.data(), host_bytes, info.get()),
                   "trtri");
      return info_value("trtri") == 0;
    }
    int64_t n1 = n / 2;
    if (n1 >= 512) n1 -= n1 % 256;  // the blocks' edges on the GEMM tiles
    const int64_t n2 = n - n1;
    float* A11 = A;
    float* B = A + n1;
    float* C = A + n1 + n1 * lda;
    if (!lower_inverse(A11, n1, lda) || !lower_inverse(C, n2, lda)) return false;
    const float one = 1.0f, minus_one = -1.0f;
    check_blas(cublasStrmm_64(blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n2, n1, &one,
                              A11, lda, B, lda, B, lda),
               "cublasStrmm (B A^-1)");
    check_blas(cublasStrmm_64(blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n2, n1,
                              &minus_one, C, lda, B, lda, B, lda),
               "cublasStrmm (-C^-1 B)");
    return true;
  }

  // U (row-major upper) with (Hp + damp I)^-1 = U^T U into Hw, by `method`. kPotri: potrf ->
  // potri -> potrf on the column-major view (lower), whose last factor L gives H^-1 = L L^T;
  // read row-major, L's storage is U = L^T. False when some step finds the matrix not positive
  // definite or the factor is not finite with a positive diagonal.
  bool factor(int64_t K, float damp) {
    TL_CUDA_THROW(cudaMemcpy(Hw.get(), Hp.get(), size_t(K) * K * sizeof(float), cudaMemcpyDeviceToDevice));
    check_launch(cuda::gptq_add_diagonal(Hw.get(), K, damp, nullptr), "gptq_add_diagonal");
    if (method == Factor::kReversed) {
      if (!reversed_factor(K)) return false;
    } else if (K * K > max_whole) {
      throw Error("upstream's potri factor takes matrices of at most " + std::to_string(max_whole) + " elements (K = " +
                  std::to_string(K) + ")");
    } else if (!solver_step(false, int(K)) || !solver_step(true, int(K)) || !solver_step(false, int(K))) {
      return false;
    }
    check_launch(cuda::gptq_check_factor(Hw.get(), K, bad.get(), nullptr), "gptq_check_factor");
    int b = 0;
    to_host(&b, bad.get(), 1);
    return b == 0;
  }
};

GpuGptq::GpuGptq() : impl_(std::make_unique<Impl>()) {
  const std::string why = cuda::cuda_device_unavailable_reason();
  if (!why.empty()) throw Error(why);
  check_blas(cublasCreate(&impl_->blas), "cublasCreate");
  // FP32 everywhere: no TF32 for the lazy-update GEMMs (they must round like the CPU's float32).
  check_blas(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  check_solver(cusolverDnCreate(&impl_->solver), "cusolverDnCreate");
  check_solver(cusolverDnCreateParams(&impl_->params), "cusolverDnCreateParams");
  impl_->info.reserve(1);
  impl_->bad.reserve(1);
}

GpuGptq::~GpuGptq() = default;

void GpuGptq::set_factor(Factor f) { impl_->method = f; }

void GpuGptq::set_max_whole_elements(int64_t elements) { impl_->max_whole = std::max<int64_t>(1, elements); }

bool GpuGptq::invert_lower(float* A, int64_t n, int64_t lda) {
  if (n <= 0 || lda < n) throw Error("invert_lower: n " + std::to_string(n) + ", lda " + std::to_string(lda));
  return impl_->lower_inverse(A, n, lda);
}

uint64_t GpuGptq::device_bytes(int64_t K, int64_t N, bool resident) {
  const uint64_t k = uint64_t(K), n = uint64_t(N);
  // W (not when resident), Wc, E, HE (float), q (+ tie in tests); Hp, Hw; err; parameters;
  // cuSOLVER's workspace.
  return (resident ? 13 : 17) * k * n + 8 * k * k + 4 * uint64_t(cuda::kGptqMaxBlock) * n + 64 * n + 16 * k +
         (64ull << 20);
}

GptqResult GpuGptq::quantize_host(const float* W, int64_t K, int64_t N, const float* H, const GptqOptions& opt,
                                  GptqGpuTimes* times) {
  Impl& m = *impl_;
  m.H_host_copy.reserve(size_t(K) * size_t(K));
  to_device(m.H_host_copy.get(), H, size_t(K) * size_t(K));
  return quantize(W, K, N, m.H_host_copy.get(), opt, nullptr, times);
}

namespace {

// What the GPU path takes, checked before anything is allocated or uploaded.
void check_problem(int64_t K64, int64_t N64, const GptqOptions& opt) {
  if (K64 <= 0 || N64 <= 0) throw Error("empty weight", "", opt.name);
  if (K64 > 65535 || N64 > (int64_t(1) << 30))
    throw Error("weight [" + std::to_string(K64) + ", " + std::to_string(N64) + "] is larger than the GPU path takes (K <= 65535)",
                "", opt.name);
  check_effective_group_size(K64, opt.group_size, "", opt.name);
  if (opt.block_size <= 0 || opt.block_size > cuda::kGptqMaxBlock)
    throw Error("block size " + std::to_string(opt.block_size) + ": the GPU path takes 1.." +
                    std::to_string(cuda::kGptqMaxBlock) + " rows per lazy-update block", "", opt.name);
  if (opt.range_search && opt.zero_mode != ZeroMode::kInt)
    throw Error("the range search applies to integer zero points (--zero int)", "", opt.name);
}

}  // namespace

GptqResult GpuGptq::quantize(const float* W, int64_t K64, int64_t N64, float* H, const GptqOptions& opt,
                             __half* w_hat_dev, GptqGpuTimes* times) {
  check_problem(K64, N64, opt);
  const auto t0 = Clock::now();
  const size_t KN = size_t(K64) * size_t(N64);
  impl_->W.reserve(KN);
  to_device(impl_->W.get(), W, KN);
  if (times) times->cholesky += since(t0);  // the upload, as the factor's preparation
  return quantize_resident(impl_->W.get(), K64, N64, H, opt, w_hat_dev, times);
}

GptqResult GpuGptq::quantize_resident(const float* Wd, int64_t K64, int64_t N64, float* H, const GptqOptions& opt,
                                      __half* w_hat_dev, GptqGpuTimes* times) {
  check_problem(K64, N64, opt);
  const int K = int(K64), N = int(N64);
  const int gs = int(opt.group_size), bs = int(opt.block_size);
  const int G = int(group_count(K64, opt.group_size));
  const bool grouped = G > 1, dynamic = grouped && !opt.static_groups;
  const bool fz = opt.zero_mode == ZeroMode::kFloat;
  const size_t KN = size_t(K) * size_t(N), KK = size_t(K) * size_t(K);
  Impl& m = *impl_;
  const auto t0 = Clock::now();

  m.Wc.reserve(KN);
  for (auto* b : {&m.Hp, &m.Hw}) b->reserve(KK);
  m.err.reserve(size_t(bs) * N);
  for (auto* b : {&m.scale, &m.zq}) b->reserve(size_t(G) * N);
  for (auto* b : {&m.scale16, &m.zero16}) b->reserve(size_t(G) * N);
  m.diag.reserve(size_t(K));
  m.dead.reserve(size_t(K));
  m.q.reserve(KN);
  m.order.reserve(size_t(K));
  m.loss.reserve(size_t(N));

  GptqResult r;
  r.K = K64;
  r.N = N64;
  r.group_size = gs;
  r.G = G;
  r.q.assign(KN, 0);
  r.scale.assign(size_t(G) * N, 0.0f);
  r.zq.assign(size_t(G) * N, 0.0f);

  // Step 2 (per row): parameters of the untouched W.
  if (!grouped)
    check_launch(cuda::gptq_minmax_params(Wd, N, K, N, nullptr, fz, opt.range_search, m.scale.get(), m.zq.get(), nullptr),
                 "minmax params");
  // Step 1: dead inputs.
  check_launch(cuda::gptq_mark_dead(H, K, m.dead.get(), m.diag.get(), nullptr), "gptq_mark_dead");
  std::vector<float> diag(static_cast<size_t>(K));
  std::vector<uint8_t> dead(static_cast<size_t>(K));
  to_host(diag.data(), m.diag.get(), size_t(K));
  to_host(dead.data(), m.dead.get(), size_t(K));
  for (int k = 0; k < K; ++k) {
    if (!std::isfinite(diag[size_t(k)])) throw Error("Hessian diagonal is not finite at " + std::to_string(k), "", opt.name);
    if (dead[size_t(k)]) r.dead.push_back(k);
  }
  // Step 2 (static groups): contiguous groups of the dead-zeroed W.
  if (grouped && !dynamic)
    for (int g = 0; g < G; ++g) {
      const int k0 = g * gs, rows = std::min(K, k0 + gs) - k0;
      check_launch(cuda::gptq_minmax_params(Wd + size_t(k0) * N, N, rows, N, m.dead.get() + k0, fz, opt.range_search,
                                     m.scale.get() + size_t(g) * N, m.zq.get() + size_t(g) * N, nullptr),
            "minmax params");
    }
  // Step 3: order, then H and W permuted (W's dead rows zeroed).
  std::vector<int32_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  if (opt.act_order) {
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return diag[size_t(a)] > diag[size_t(b)]; });
    r.perm = order;
  }
  to_device(m.order.get(), order.data(), size_t(K));
  check_launch(cuda::gptq_permute(H, Wd, m.order.get(), m.dead.get(), m.Hp.get(), m.Wc.get(), K, N, nullptr), "gptq_permute");

  // Step 4: damping (the mean of the permuted diagonal, summed in double in the CPU's order).
  double diag_sum = 0;
  for (int k = 0; k < K; ++k) diag_sum += diag[size_t(order[size_t(k)])];
  const float mean_diag = float(diag_sum / double(K));
  if (opt.hinv_upper) {
    to_device(m.Hw.get(), opt.hinv_upper, KK);
    r.percdamp = opt.percdamp;
    r.damp = float(opt.percdamp) * mean_diag;
  } else {
    gptq_damped_factor(opt, mean_diag, [&](float damp) { return m.factor(K, damp); }, &r);
  }
  TL_CUDA_THROW(cudaDeviceSynchronize());
  const auto t1 = Clock::now();
  if (times) times->cholesky += std::chrono::duration<double>(t1 - t0).count();

  // RTN's loss 0.5 tr(E^T (H + damp I) E) (H with the dead fix, original order; E = 0 on dead rows).
  if (opt.want_rtn_loss) {
    for (auto* b : {&m.E, &m.HE}) b->reserve(KN);
    m.dots.reserve(size_t(N));
    check_launch(cuda::gptq_rtn_error(Wd, K, N, gs, fz, m.dead.get(), m.E.get(), nullptr), "gptq_rtn_error");
    check_launch(cuda::gptq_add_diagonal(H, K, r.damp, nullptr), "gptq_add_diagonal");
    const float one = 1.0f, zero = 0.0f;
    // Row-major HE [K, N] = H [K, K] E [K, N]  <=>  column-major HE^T = E^T H (H symmetric).
    check_blas(cublasSgemm(m.blas, CUBLAS_OP_N, CUBLAS_OP_N, N, K, K, &one, m.E.get(), N, H, K, &zero, m.HE.get(), N),
               "cublasSgemm (RTN loss)");
    check_launch(cuda::gptq_column_dots(m.HE.get(), m.E.get(), K, N, m.dots.get(), nullptr), "gptq_column_dots");
    std::vector<double> dots(static_cast<size_t>(N));
    to_host(dots.data(), m.dots.get(), size_t(N));
    double s = 0;
    for (double d : dots) s += d;
    r.rtn_loss = 0.5 * s;
  }

  // Step 5: the blocked sweep. After each block, Wc[i2:, :] -= U[i1:i2, i2:]^T Err, which in
  // cuBLAS's column-major view is Wc^T[:, i2:] -= Err^T U[i1:i2, i2:] (U read transposed).
  if (opt.want_tie_margin) {
    m.tie.reserve(KN);
    r.tie_margin.assign(KN, 1.0f);
  }
  if (opt.want_w_hat) {
    m.w_hat.reserve(KN);
    r.w_hat.assign(KN, 0.0f);
  }
  TL_CUDA_THROW(cudaMemset(m.loss.get(), 0, size_t(N) * sizeof(double)));
  cuda::GptqSweep s;
  s.Wc = m.Wc.get();
  s.U = m.Hw.get();
  s.err = m.err.get();
  s.q = m.q.get();
  s.tie = opt.want_tie_margin ? m.tie.get() : nullptr;
  s.w_hat = opt.want_w_hat ? m.w_hat.get() : nullptr;
  s.order = m.order.get();
  s.scale = m.scale.get();
  s.zq = m.zq.get();
  s.loss = m.loss.get();
  s.K = K;
  s.N = N;
  s.gs = gs;
  s.params = !grouped ? cuda::GptqParams::kPerRow : dynamic ? cuda::GptqParams::kDynamic : cuda::GptqParams::kStatic;
  s.float_zero = fz;
  s.range_search = opt.range_search;
  const float minus_one = -1.0f, one = 1.0f;
  for (int i1 = 0; i1 < K; i1 += bs) {
    const int cnt = std::min(bs, K - i1), i2 = i1 + cnt;
    check_launch(cuda::gptq_sweep_block(s, i1, cnt, nullptr), "gptq_sweep_block");
    if (i2 < K)
      check_blas(cublasSgemm(m.blas, CUBLAS_OP_N, CUBLAS_OP_T, N, K - i2, cnt, &minus_one, m.err.get(), N,
                             m.Hw.get() + size_t(i1) * K + i2, K, &one, m.Wc.get() + size_t(i2) * N, N),
                 "cublasSgemm (lazy update)");
  }
  check_launch(cuda::gptq_storage_params(m.scale.get(), m.zq.get(), int64_t(G) * N, fz, m.scale16.get(), m.zero16.get(), nullptr),
        "gptq_storage_params");
  if (w_hat_dev)
    check_launch(cuda::gptq_dequant_fp16(m.q.get(), m.scale16.get(), m.zero16.get(), K, N, gs, w_hat_dev, nullptr),
          "gptq_dequant_fp16");

  to_host(r.q.data(), m.q.get(), KN);
  to_host(r.scale.data(), m.scale.get(), size_t(G) * N);
  to_host(r.zq.data(), m.zq.get(), size_t(G) * N);
  r.scale16.resize(size_t(G) * N);
  r.zero16.resize(size_t(G) * N);
  to_host(reinterpret_cast<__half*>(r.scale16.data()), m.scale16.get(), size_t(G) * N);
  to_host(reinterpret_cast<__half*>(r.zero16.data()), m.zero16.get(), size_t(G) * N);
  if (opt.want_tie_margin) to_host(r.tie_margin.data(), m.tie.get(), KN);
  if (opt.want_w_hat) to_host(r.w_hat.data(), m.w_hat.get(), KN);
  std::vector<double> loss(static_cast<size_t>(N));
  to_host(loss.data(), m.loss.get(), size_t(N));
  for (double l : loss) r.loss += l;
  r.loss /= 2;
  r.g_idx.resize(size_t(K));
  for (int j = 0; j < K; ++j) {
    const int k = order[size_t(j)];
    r.g_idx[size_t(k)] = dynamic ? j / gs : k / gs;
  }
  if (times) times->sweep += since(t1);
  return r;
}

}  // namespace tl::gpu
