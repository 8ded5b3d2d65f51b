// naive_attention.cu — the naive CUDA attention baseline ("standard attention"): S and P materialised
// in (B, Hq, Nq, Nk) workspaces, GEMMs through cuBLASLt (ops/gemm_cuda.h), row kernels in naive_kernels.cu.
//
// Forward:  S = scale Q K^T (fp32) -> softmax with mask and sink logit -> P (input dtype), lse -> O = P V.
// Backward: the public API keeps nothing between the passes, so P is recomputed from S = scale Q K^T and
//           the saved lse; then dV = P^T dO, dP = dO V^T (into the S buffer), dS = P (dP - delta) (over
//           P in place), dQ = scale dS K, dK = scale dS^T Q, dsinks from lse and delta.
// Workspace per call: S (fp32) + P (input dtype) per (b, h, i, j), i.e. (4 + 2) B Hq Nq Nk bytes for
// bf16/fp16 and 8 B Hq Nq Nk for fp32; backward adds O(B Hq Nq) for delta and, for GQA with 16-bit
// dtypes, fp32 dK/dV accumulators of the kv-head shape.
// GQA: K and V are never expanded. Query head h = kvh * group + r reads kv head kvh; each r is one
// strided-batched GEMM over (b, kvh), and dK/dV accumulate over r with beta = 1 (in fp32 accumulators
// for 16-bit dtypes, stored to dK/dV at the end).
#include <string>

#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/cuda/naive_kernels.h"
#include "ops/gemm_cuda.h"

namespace ft::attention_impl {

namespace {

using naive::RowStrides;

// Per-head matrices of a 4-d operand: matrix (b, head) is (rows, cols) row-major with leading dimension
// `ld`, starting at data + b * batch_stride + head * head_stride elements.
struct HeadMatrix {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;
  std::int64_t head_stride = 0;
};

// Which head of a GQA group an operand is indexed by: the query head h or its kv head h / group.
enum class HeadIndex { query, kv };

struct Operand {
  HeadMatrix matrix;
  HeadIndex heads = HeadIndex::query;
  bool transpose = false;
};

RowStrides row_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// t (B, H, N, D) with any strides whose rows do not overlap.
HeadMatrix head_matrix(const Tensor& t, const char* name) {
  const std::int64_t rows = t.size(2), cols = t.size(3);
  const std::int64_t ld = rows > 1 ? t.stride(2) : cols;
  FT_CHECK_KIND(unsupported, ld >= cols, "naive CUDA attention: the rows of ", name,
                " must not overlap: expected a row stride >= the head dim ", cols, ", given ", ld, " (",
                t.describe(), ")");
  return {t.data(), t.dtype(), ld, t.stride(0), t.stride(1)};
}

// A contiguous (B, heads, rows, cols) workspace.
HeadMatrix workspace_matrix(const void* data, DType dtype, std::int64_t heads, std::int64_t rows,
                            std::int64_t cols) {
  return {data, dtype, cols, heads * rows * cols, rows * cols};
}

// For every batch b and query head h = kvh * group + r:
//   D[b, .] = alpha * op(A[b, .]) @ op(B[b, .])  (+ D[b, .] when accumulate_group and r > 0)
// with op(A) (m, k), op(B) (k, n), D (m, n), each operand at head h or kvh per its HeadIndex.
void group_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const Operand& a, const Operand& b,
                const Operand& d, float alpha, bool accumulate_group, const AttentionShape& s, Device device,
                cudaStream_t stream) {
  const std::int64_t group = s.heads_q / s.heads_kv;
  for (std::int64_t r = 0; r < group; ++r) {
    // Operand x for this r: its (b, kvh) matrix starts at base + b * batch_step + kvh * head_step.
    struct Placed {
      const char* base;
      std::int64_t batch_step, head_step, element_bytes;
    };
    auto place = [&](const Operand& x) {
      const auto bytes = static_cast<std::int64_t>(size_of(x.matrix.dtype));
      const auto* base = static_cast<const char*>(x.matrix.data);
      if (x.heads == HeadIndex::query)
        return Placed{base + r * x.matrix.head_stride * bytes, x.matrix.batch_stride, group * x.matrix.head_stride,
                      bytes};
      return Placed{base, x.matrix.batch_stride, x.matrix.head_stride, bytes};
    };
    const Placed pa = place(a), pb = place(b), pd = place(d);
    auto folds = [&](const Placed& p) { return p.batch_step == s.heads_kv * p.head_step; };

    // One GEMM batched over (b, kvh) when the offsets fold into one stride, else one per b over kvh.
    enum class Batch { heads, batches, both, heads_per_batch } mode;
    if (s.batch == 1)
      mode = Batch::heads;
    else if (s.heads_kv == 1)
      mode = Batch::batches;
    else if (folds(pa) && folds(pb) && folds(pd))
      mode = Batch::both;
    else
      mode = Batch::heads_per_batch;
    const std::int64_t count =
        mode == Batch::batches ? s.batch : mode == Batch::both ? s.batch * s.heads_kv : s.heads_kv;
    const std::int64_t loops = mode == Batch::heads_per_batch ? s.batch : 1;

    for (std::int64_t l = 0; l < loops; ++l) {
      auto matrix = [&](const Operand& x, const Placed& p) {
        gemm::Matrix out;
        out.data = p.base + l * p.batch_step * p.element_bytes;
        out.dtype = x.matrix.dtype;
        out.ld = x.matrix.ld;
        out.batch_stride = mode == Batch::batches ? p.batch_step : p.head_step;
        out.transpose = x.transpose;
        return out;
      };
      gemm::Args args;
      args.m = m;
      args.n = n;
      args.k = k;
      args.batch = count;
      args.a = matrix(a, pa);
      args.b = matrix(b, pb);
      args.d = matrix(d, pd);
      args.alpha = alpha;
      args.beta = accumulate_group && r > 0 ? 1.0f : 0.0f;
      gemm::matmul(args, device, stream);
    }
  }
}

std::string gib(double bytes) { return str(bytes / (1ull << 30), " GiB"); }

// The S-sized fp32 buffer (S, then dP in backward) and the P-sized buffer in the input dtype (P, then dS).
struct Workspace {
  Buffer scores;  // (B, Hq, Nq, Nk) fp32
  Buffer probs;   // (B, Hq, Nq, Nk) dtype
};

// Allocates the workspace; running out of memory raises out_of_memory naming the bytes S and P need.
Workspace allocate_workspace(const AttentionShape& s, DType dtype, Device device, const Stream& stream,
                             const char* pass) {
  const double entries = static_cast<double>(s.batch) * s.heads_q * s.len_q * s.len_k;
  const double s_bytes = entries * 4, p_bytes = entries * static_cast<double>(size_of(dtype));
  const std::string need = str("naive CUDA attention (", pass, ") materialises S (fp32 [", s.batch, ", ", s.heads_q,
                               ", ", s.len_q, ", ", s.len_k, "]) = ", gib(s_bytes), " and P (", name_of(dtype),
                               ", same shape) = ", gib(p_bytes), ", ", gib(s_bytes + p_bytes), " in all");
  std::size_t free_bytes = 0, total_bytes = 0;
  FT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (s_bytes + p_bytes > static_cast<double>(total_bytes))
    FT_THROW(out_of_memory, need, ": more than the ", gib(static_cast<double>(total_bytes)), " of ",
             device.to_string(), " (use the flash implementation)");
  try {
    Workspace w;
    w.scores = Buffer(static_cast<std::size_t>(s_bytes), device, "attention.naive.S", stream);
    w.probs = Buffer(static_cast<std::size_t>(p_bytes), device, "attention.naive.P", stream);
    return w;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::out_of_memory) throw;
    FT_THROW(out_of_memory, need, ": ", e.message());
  }
}

// S[b, h] (Nq, Nk) fp32 = scale * Q[b, h] (Nq, D) @ K[b, h / group]^T (D, Nk).
void compute_scores(const AttentionTensors& t, const AttentionShape& s, const HeadMatrix& scores, Device device,
                    cudaStream_t stream) {
  group_gemm(s.len_q, s.len_k, s.head_dim, {head_matrix(t.q, "q"), HeadIndex::query},
             {head_matrix(t.k, "k"), HeadIndex::kv, true}, {scores, HeadIndex::query}, static_cast<float>(s.scale),
             false, s, device, stream);
}

}  // namespace

void cuda_naive_forward(const AttentionTensors& t, const AttentionShape& s, const Stream& stream) {
  const Device device = t.q.device();
  const DType dtype = t.q.dtype();
  CudaDeviceGuard guard(device.index);
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());

  Workspace w = allocate_workspace(s, dtype, device, stream, "forward");
  const HeadMatrix scores = workspace_matrix(w.scores.data(), DType::f32, s.heads_q, s.len_q, s.len_k);  // S
  const HeadMatrix probs = workspace_matrix(w.probs.data(), dtype, s.heads_q, s.len_q, s.len_k);         // P
  {
    NvtxRange range("attention.naive.scores");
    compute_scores(t, s, scores, device, cuda_stream);
  }
  {
    NvtxRange range("attention.naive.softmax");
    naive::softmax_forward(static_cast<const float*>(scores.data), w.probs.data(), dtype, t.lse.data_as<float>(),
                           row_strides(t.lse), s.has_sinks ? t.sinks.data_as<const float>() : nullptr, s,
                           cuda_stream);
  }
  {
    NvtxRange range("attention.naive.output");
    // O[b, h] (Nq, D) = P[b, h] (Nq, Nk) @ V[b, h / group] (Nk, D)
    group_gemm(s.len_q, s.head_dim, s.len_k, {probs, HeadIndex::query}, {head_matrix(t.v, "v"), HeadIndex::kv},
               {head_matrix(t.o, "o"), HeadIndex::query}, 1.0f, false, s, device, cuda_stream);
  }
}

void cuda_naive_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s,
                         const Stream& stream) {
  const Device device = t.q.device();
  const DType dtype = t.q.dtype();
  CudaDeviceGuard guard(device.index);
  auto cuda_stream = static_cast<cudaStream_t>(stream.handle());

  Workspace w = allocate_workspace(s, dtype, device, stream, "backward");
  const HeadMatrix scores = workspace_matrix(w.scores.data(), DType::f32, s.heads_q, s.len_q, s.len_k);  // S, dP
  const HeadMatrix probs = workspace_matrix(w.probs.data(), dtype, s.heads_q, s.len_q, s.len_k);         // P, dS
  Buffer delta(static_cast<std::size_t>(s.batch * s.heads_q * s.len_q) * sizeof(float), device,
               "attention.naive.delta", stream);  // (B, Hq, Nq) fp32

  // 16-bit GQA: dK and dV sum over the group in fp32 accumulators (B, Hkv, Nk, D), stored at the end.
  const bool fp32_accumulators = s.heads_q != s.heads_kv && dtype != DType::f32;
  const std::size_t accumulator_bytes =
      fp32_accumulators ? static_cast<std::size_t>(s.batch * s.heads_kv * s.len_k * s.head_dim) * sizeof(float) : 0;
  Buffer dk_accumulator(accumulator_bytes, device, "attention.naive.dk", stream);
  Buffer dv_accumulator(accumulator_bytes, device, "attention.naive.dv", stream);
  const HeadMatrix dk_target = fp32_accumulators ? workspace_matrix(dk_accumulator.data(), DType::f32, s.heads_kv,
                                                                    s.len_k, s.head_dim)
                                                 : head_matrix(g.dk, "dk");
  const HeadMatrix dv_target = fp32_accumulators ? workspace_matrix(dv_accumulator.data(), DType::f32, s.heads_kv,
                                                                    s.len_k, s.head_dim)
                                                 : head_matrix(g.dv, "dv");
  const HeadMatrix d_o = head_matrix(g.d_o, "d_o");
  {
    NvtxRange range("attention.naive.backward.scores");
    compute_scores(t, s, scores, device, cuda_stream);
    naive::probabilities(static_cast<const float*>(scores.data), w.probs.data(), dtype, t.lse.data_as<const float>(),
                         row_strides(t.lse), s, cuda_stream);
  }
  {
    NvtxRange range("attention.naive.backward.dv_dp");
    // dV[b, kvh] (Nk, D) = sum_r P[b, h]^T (Nk, Nq) @ dO[b, h] (Nq, D)
    group_gemm(s.len_k, s.head_dim, s.len_q, {probs, HeadIndex::query, true}, {d_o, HeadIndex::query},
               {dv_target, HeadIndex::kv}, 1.0f, true, s, device, cuda_stream);
    // dP[b, h] (Nq, Nk) fp32 = dO[b, h] (Nq, D) @ V[b, kvh]^T (D, Nk), over S
    group_gemm(s.len_q, s.len_k, s.head_dim, {d_o, HeadIndex::query}, {head_matrix(t.v, "v"), HeadIndex::kv, true},
               {scores, HeadIndex::query}, 1.0f, false, s, device, cuda_stream);
  }
  {
    NvtxRange range("attention.naive.backward.softmax");
    naive::row_dot(g.d_o.data(), row_strides(g.d_o), t.o.data(), row_strides(t.o), dtype,
                   static_cast<float*>(delta.data()), s, cuda_stream);
    naive::softmax_backward(w.probs.data(), dtype, static_cast<const float*>(scores.data),
                            static_cast<const float*>(delta.data()), s, cuda_stream);
    if (s.has_sinks)
      naive::sink_grad(t.sinks.data_as<const float>(), t.lse.data_as<const float>(), row_strides(t.lse),
                       static_cast<const float*>(delta.data()), g.dsinks.data_as<float>(), s, cuda_stream);
  }
  {
    NvtxRange range("attention.naive.backward.dq_dk");
    const auto scale = static_cast<float>(s.scale);
    // dQ[b, h] (Nq, D) = scale * dS[b, h] (Nq, Nk) @ K[b, kvh] (Nk, D)
    group_gemm(s.len_q, s.head_dim, s.len_k, {probs, HeadIndex::query}, {head_matrix(t.k, "k"), HeadIndex::kv},
               {head_matrix(g.dq, "dq"), HeadIndex::query}, scale, false, s, device, cuda_stream);
    // dK[b, kvh] (Nk, D) = scale * sum_r dS[b, h]^T (Nk, Nq) @ Q[b, h] (Nq, D)
    group_gemm(s.len_k, s.head_dim, s.len_q, {probs, HeadIndex::query, true}, {head_matrix(t.q, "q"), HeadIndex::query},
               {dk_target, HeadIndex::kv}, scale, true, s, device, cuda_stream);
    if (fp32_accumulators) {
      naive::store_rows(static_cast<const float*>(dk_accumulator.data()), g.dk.data(), dtype, row_strides(g.dk),
                        s.batch, s.heads_kv, s.len_k, s.head_dim, cuda_stream);
      naive::store_rows(static_cast<const float*>(dv_accumulator.data()), g.dv.data(), dtype, row_strides(g.dv),
                        s.batch, s.heads_kv, s.len_k, s.head_dim, cuda_stream);
    }
  }
}

}  // namespace ft::attention_impl
