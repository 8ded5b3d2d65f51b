// flash_sm90_scheduler.cu — the host side of the Hopper kernels' tile scheduling (flash_sm90_scheduler.h)
// and the test hooks that force it (force_flash_*, attention_impls.h).
#include "ops/attention/cuda/flash_sm90_scheduler.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/cuda/flash_sm90_scheduler.cuh"

namespace ft {

namespace {
std::atomic<int> forced_section_heads{0};     // force_flash_section_heads; 0: sized to the L2
std::atomic<int> forced_ascending_heads{-1};  // force_flash_ascending_heads; -1: ascending_heads_for
std::atomic<int> forced_forward_blocks{0};    // force_flash_forward_blocks; 0: one per SM
}  // namespace

namespace flash {

int sm90_section_heads(std::int64_t bytes_per_head, std::int64_t grid_heads, int device) {
  std::int64_t heads = forced_section_heads.load();
  if (heads == 0) {
    int l2_bytes = 0;
    FT_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    const std::int64_t fit = l2_bytes / 3 / std::max<std::int64_t>(1, bytes_per_head);
    heads = section_heads_for(fit, grid_heads);
  }
  return static_cast<int>(std::clamp<std::int64_t>(heads, 1, grid_heads));
}

int sm90_forward_blocks(std::int64_t grid_heads, std::int64_t len_q, std::int64_t block_m, int device) {
  const std::int64_t tiles = grid_heads * ((len_q + block_m - 1) / block_m);
  // The blocks number tiles as int, up to tiles + blocks - 1 (the claims that find none left).
  constexpr std::int64_t kMaxTiles = std::numeric_limits<int>::max() / 2;
  FT_CHECK_KIND(unsupported, tiles <= kMaxTiles, "flash attention (CUDA, sm90): ", tiles, " query tiles of ",
                block_m, " rows (B x Hq = ", grid_heads, ", Nq = ", len_q, ") exceed the forward's ", kMaxTiles);
  int blocks = forced_forward_blocks.load();
  if (blocks == 0) FT_CUDA_CHECK(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, device));
  return static_cast<int>(std::min<std::int64_t>(tiles, blocks));
}

int sm90_ascending_heads(std::int64_t grid_heads, std::int64_t len_k, std::int64_t block_n) {
  const int forced = forced_ascending_heads.load();
  return static_cast<int>(forced >= 0 ? std::min<std::int64_t>(forced, grid_heads)
                                      : ascending_heads_for(grid_heads, (len_k + block_n - 1) / block_n));
}

}  // namespace flash

namespace attention_impl {

void force_flash_ascending_heads(int heads) {
  FT_CHECK(heads >= -1, "force_flash_ascending_heads: heads must be >= -1, given ", heads);
  forced_ascending_heads.store(heads);
}

void force_flash_forward_blocks(int blocks) {
  FT_CHECK(blocks >= 0, "force_flash_forward_blocks: blocks must be >= 0, given ", blocks);
  forced_forward_blocks.store(blocks);
}

void force_flash_section_heads(int heads) {
  FT_CHECK(heads >= 0, "force_flash_section_heads: heads must be >= 0, given ", heads);
  forced_section_heads.store(heads);
}

}  // namespace attention_impl

}  // namespace ft
