// skinny_linear.cpp — validation of skinny_linear calls, the CPU path composed of the unfused ops (the
// reference), and dispatch to the CUDA kernel (cuda/skinny_linear.cu).
#include "ops/skinny_linear.h"

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/buffer.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/tensor_io.h"
#include "ops/cuda/decode_ops.h"
#include "ops/linear.h"
#include "ops/op_common.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace ft {

namespace {

constexpr const char* kOp = "skinny_linear";
constexpr std::int64_t kMaxStagedBytes = 160 * 1024;  // x' staged in shared memory (H100/H200: 227 KB a block)

std::int64_t padded_rows(std::int64_t rows) { return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8; }

void check_matrix(const Tensor& t, const char* name, std::initializer_list<DType> dtypes, Device device) {
  ops::check_defined(kOp, t, name);
  ops::check_dtype(kOp, t, name, dtypes);
  ops::check_device(kOp, t, name, device);
  FT_CHECK(t.dim() == 2 && t.stride(1) == 1, kOp, ": ", name,
           " must be a (rows, cols) matrix with a contiguous last dim, given ", t.describe());
}

// The CUDA kernel reads its operands in 16-byte chunks.
void check_chunks(const Tensor& t, const char* name) {
  const std::int64_t per_chunk = 16 / static_cast<std::int64_t>(t.element_size());
  FT_CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 16 == 0 && (t.size(0) <= 1 || t.stride(0) % per_chunk == 0),
           kOp, ": ", name, " on CUDA must start 16-byte aligned with rows a multiple of ", per_chunk,
           " elements apart, given ", t.describe());
}

void validate(const SkinnyLinearArgs& a) {
  const bool norm = a.norm_weight.defined();
  const Device dev = a.x.defined() ? a.x.device() : Device::cpu();
  FT_CHECK(!norm || a.epilogue != SkinnyEpilogue::residual, kOp,
           ": the residual epilogue takes a bf16 x without the fused RMSNorm, given a norm weight");
  check_matrix(a.x, "x", {norm ? DType::f32 : DType::bf16}, dev);
  check_matrix(a.w, "w", {DType::bf16}, dev);
  const std::int64_t M = a.x.size(0), K = a.x.size(1), N = a.w.size(0);
  FT_CHECK(skinny_linear_fits(M, K), kOp, ": expected 1 to ", kSkinnyMaxRows,
           " rows of a multiple of 8 inputs that fit the staging buffer, given x ", a.x.describe());
  ops::check_shape(kOp, a.w, "w", {N, K});
  ops::check_contiguous(kOp, a.w, "w");
  if (norm) {
    ops::check_dtype(kOp, a.norm_weight, "norm_weight", {DType::f32});
    ops::check_device(kOp, a.norm_weight, "norm_weight", dev);
    ops::check_shape(kOp, a.norm_weight, "norm_weight", {K});
    ops::check_contiguous(kOp, a.norm_weight, "norm_weight");
  }
  switch (a.epilogue) {
    case SkinnyEpilogue::store: check_matrix(a.y, "y", {DType::bf16, DType::f32}, dev); break;
    case SkinnyEpilogue::residual:
      check_matrix(a.y, "y", {DType::f32}, dev);
      check_matrix(a.residual, "residual", {DType::f32}, dev);
      ops::check_shape(kOp, a.residual, "residual", {M, N});
      break;
    case SkinnyEpilogue::swiglu:
      check_matrix(a.y, "y", {DType::bf16}, dev);
      check_matrix(a.w3, "w3", {DType::bf16}, dev);
      ops::check_shape(kOp, a.w3, "w3", {N, K});
      ops::check_contiguous(kOp, a.w3, "w3");
      break;
    case SkinnyEpilogue::rope_append: {
      check_matrix(a.y, "y", {DType::bf16}, dev);
      FT_CHECK(N % 3 == 0, kOp, ": rope_append needs w = q_proj | k_proj | v_proj (3 d rows), given ", N, " rows");
      for (const auto& [t, name] : {std::pair{&a.k_cache, "k_cache"}, std::pair{&a.v_cache, "v_cache"}}) {
        ops::check_defined(kOp, *t, name);
        ops::check_dtype(kOp, *t, name, {DType::bf16});
        ops::check_device(kOp, *t, name, dev);
        FT_CHECK(t->dim() == 4 && t->stride(3) == 1, kOp, ": ", name,
                 " must be (M, H, capacity, Dh) with a contiguous last dim, given ", t->describe());
      }
      const std::int64_t H = a.k_cache.size(1), Dh = a.k_cache.size(3);
      FT_CHECK(H * Dh == N / 3 && Dh % 2 == 0, kOp, ": the caches' heads x head dim (", H, " x ", Dh,
               ", even) must be the width of q, k and v (", N / 3, ")");
      ops::check_shape(kOp, a.k_cache, "k_cache", {M, H, a.k_cache.size(2), Dh});
      ops::check_shape(kOp, a.v_cache, "v_cache", a.k_cache.shape());
      FT_CHECK(a.position != nullptr, kOp, ": rope_append needs the position, given none");
      if (a.rope_table.defined()) {
        ops::check_dtype(kOp, a.rope_table, "rope_table", {DType::f32});
        ops::check_device(kOp, a.rope_table, "rope_table", dev);
        const Tensor& t = a.rope_table;
        FT_CHECK(t.dim() == 3 && t.size(1) == Dh / 2 && t.size(2) == 2, kOp, ": rope_table must be (T, Dh/2 = ",
                 Dh / 2, ", 2), given ", t.describe());
        ops::check_contiguous(kOp, a.rope_table, "rope_table");
      }
      break;
    }
  }
  const std::int64_t width = a.epilogue == SkinnyEpilogue::rope_append ? N / 3 : N;
  ops::check_shape(kOp, a.y, "y", {M, width});
  if (dev.is_cuda()) {
    check_chunks(a.x, "x");
    if (norm) {
      FT_CHECK(reinterpret_cast<std::uintptr_t>(a.norm_weight.data()) % 16 == 0, kOp,
               ": norm_weight on CUDA must start 16-byte aligned, given ", a.norm_weight.describe());
    }
    check_chunks(a.w, "w");
    if (a.epilogue == SkinnyEpilogue::swiglu) check_chunks(a.w3, "w3");
  }
}

// The unfused reference: the ops the generator would run without this one.
void compose(const SkinnyLinearArgs& a) {
  const Device dev = a.x.device();
  const Stream& stream = a.stream;
  const std::int64_t M = a.x.size(0), K = a.x.size(1), N = a.w.size(0);
  Tensor x = a.x;
  OwnedTensor normed, rstd;
  if (a.norm_weight.defined()) {
    normed = OwnedTensor({M, K}, DType::bf16, dev, "skinny_linear norm", stream);
    rstd = OwnedTensor({M}, DType::f32, dev, "skinny_linear rstd", stream);
    rmsnorm_forward(normed, rstd, a.x, a.norm_weight, {a.norm_eps, stream});
    x = normed;
  }
  const LinearOptions lin{false, stream};
  switch (a.epilogue) {
    case SkinnyEpilogue::store: linear_forward(a.y, x, a.w, lin); return;
    case SkinnyEpilogue::residual: {
      OwnedTensor t({M, N}, DType::f32, dev, "skinny_linear product", stream);
      linear_forward(t, x, a.w, lin);
      residual_add(t, a.residual, stream);
      copy(a.y, t);
      return;
    }
    case SkinnyEpilogue::swiglu: {
      OwnedTensor p({M, N}, DType::bf16, dev, "skinny_linear a", stream), q({M, N}, DType::bf16, dev,
                                                                             "skinny_linear b", stream);
      linear_forward(p, x, a.w, lin);
      linear_forward(q, x, a.w3, lin);
      swiglu_forward(a.y, p, q, stream);
      return;
    }
    case SkinnyEpilogue::rope_append: {
      const std::int64_t d = N / 3, H = a.k_cache.size(1), Dh = a.k_cache.size(3);
      OwnedTensor qkv({M, N}, DType::bf16, dev, "skinny_linear qkv", stream);
      linear_forward(qkv, x, a.w, lin);
      const auto part = [&](std::int64_t which) {  // (M, H, 1, Dh) view of q, k or v
        return Tensor(static_cast<char*>(qkv->data()) + which * d * 2, DType::bf16, dev, {M, H, 1, Dh},
                      {N, Dh, N, 1});
      };
      rope_append(part(0), part(1), part(2), a.k_cache, a.v_cache, a.position, {a.rope_theta, 0, stream});
      copy(a.y, Tensor(qkv->data(), DType::bf16, dev, {M, d}, {N, 1}));
      return;
    }
  }
}

}  // namespace

bool skinny_linear_fits(std::int64_t rows, std::int64_t k) {
  return rows >= 1 && rows <= kSkinnyMaxRows && k >= 8 && k % 8 == 0 && padded_rows(rows) * k * 2 <= kMaxStagedBytes;
}

void skinny_linear(const SkinnyLinearArgs& args) {
  NvtxRange range(kOp);
  validate(args);
  if (args.x.device().is_cuda()) {
#if FT_HAS_CUDA
    return gpu::skinny_linear(args);
#else
    ops::no_cuda_build(kOp, args.x.device());
#endif
  }
  compose(args);
}

}  // namespace ft
