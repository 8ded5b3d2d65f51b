// varlen_bench.cpp — packed-document cases of `flashtrain bench attention`.
#include "flashtrain/varlen_bench.h"

#include <algorithm>
#include <numeric>

#include "core/buffer.h"
#include "core/error.h"
#include "model/data_loader.h"
#include "model/token_staging.h"
#include "ops/attention_varlen.h"

namespace ft::cli {

std::vector<std::int32_t> document_lengths(std::int64_t total, std::int64_t min_length, std::int64_t max_length,
                                           std::uint64_t seed) {
  FT_CHECK(min_length >= 1 && min_length <= max_length, "--doc-lengths: expected 1 <= min <= max, given ",
           min_length, ",", max_length);
  FT_CHECK(total >= 1 && total < (std::int64_t{1} << 31), "varlen benchmark: expected 1 to 2^31 - 1 tokens, given ",
           total);
  Rng rng(seed);
  std::vector<std::int32_t> lengths;
  for (std::int64_t covered = 0; covered < total;) {
    const auto drawn = min_length + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(max_length - min_length + 1)));
    const std::int64_t length = std::min(drawn, total - covered);
    lengths.push_back(static_cast<std::int32_t>(length));
    covered += length;
  }
  return lengths;
}

void time_varlen_case(AttentionBenchRow& row, const AttentionBenchConfig& config) {
  const AttentionBenchCase& c = row.c;
  const Device device = config.device;
  const std::int64_t total = c.seqlen;
  const Shape shape{total, c.heads, c.head_dim}, kv_shape{total, kv_heads_of(c), c.head_dim};
  OwnedTensor q(shape, c.dtype, device, "bench.q"), k(kv_shape, c.dtype, device, "bench.k"),
      v(kv_shape, c.dtype, device, "bench.v"), o(shape, c.dtype, device, "bench.o"),
      d_o(shape, c.dtype, device, "bench.d_o"), dq(shape, c.dtype, device, "bench.dq"),
      dk(kv_shape, c.dtype, device, "bench.dk"), dv(kv_shape, c.dtype, device, "bench.dv");
  OwnedTensor lse({c.heads, total}, DType::f32, device, "bench.lse");
  fill_bench_inputs(q, k, v, d_o, config);

  std::vector<std::int32_t> cu(c.documents.size() + 1, 0);  // (B + 1) on the host: the lengths' mirror
  std::partial_sum(c.documents.begin(), c.documents.end(), cu.begin() + 1);
  FT_CHECK(cu.back() == total, "varlen benchmark: the documents hold ", cu.back(), " tokens, the case ", total);
  Buffer cu_device(cu.size() * sizeof(std::int32_t), device, "bench.cu_seqlens");
  const std::int32_t* cu_data = cu.data();
  if (device.is_cuda()) {
    upload_ids(cu_device, device, cu);
    cu_data = static_cast<const std::int32_t*>(cu_device.data());
  }
  const CumulativeLengths lengths{cu_data, cu.data(), static_cast<std::int64_t>(cu.size()), device};
  const std::int64_t longest = *std::max_element(c.documents.begin(), c.documents.end());
  const VarlenAttentionTensors t{.q = q, .k = k, .v = v, .cu_seqlens_q = lengths, .cu_seqlens_k = lengths,
                                 .max_seqlen_q = longest, .max_seqlen_k = longest, .sinks = {}, .o = o, .lse = lse};
  const VarlenAttentionGrads g{.d_o = d_o, .dq = dq, .dk = dk, .dv = dv, .dsinks = {}};
  const AttentionOptions options = bench_options(c);
  if (device.is_cuda() && c.impl == AttentionImpl::flash) {
    // The family the dense rule picks for these tensors seen as one (1, H, total, D) sequence: same dtype,
    // head dim and alignment.
    auto dense = [](const Tensor& x) {
      return Tensor(x.data(), x.dtype(), x.device(), {1, x.size(1), x.size(0), x.size(2)},
                    {x.numel(), x.stride(1), x.stride(0), 1});
    };
    const OwnedTensor dense_lse({1, c.heads, total}, DType::f32, device, "bench.dense_lse");
    row.c.kernels = flash_kernels_for({dense(q), dense(k), dense(v), {}, dense(o), dense_lse}, options);
  }
  time_attention_passes(row, [&] { attention_varlen_forward(t, options); },
                        [&] { attention_varlen_backward(t, g, options); }, config);
}

nlohmann::json varlen_row_fields(const std::vector<std::int32_t>& documents) {
  const std::int64_t total = std::accumulate(documents.begin(), documents.end(), std::int64_t{0});
  return {{"varlen", true},
          {"documents", documents.size()},
          {"total_tokens", total},
          {"max_seqlen", *std::max_element(documents.begin(), documents.end())}};
}

}  // namespace ft::cli
