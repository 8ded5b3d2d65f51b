// flash_sm90_scheduler.h — internal (CUDA builds only): the host side of the Hopper kernels' tile
// scheduling (flash_sm90_scheduler.cuh holds the rules and the device side): the launch-section size, the
// persistent forward's block count and the ascending-heads count of a call, each from the shape and the
// device unless a test hook (force_flash_*, attention_impls.h) forces it.
#pragma once

#include <cstdint>

namespace ft::flash {

// Grid heads per launch section for operands of bytes_per_head bytes per grid head, on `device`: as many
// as a third of its L2 holds, balanced over grid_heads (section_heads_for). See Note [L2 head sections].
int sm90_section_heads(std::int64_t bytes_per_head, std::int64_t grid_heads, int device);

// Blocks of the persistent forward over grid_heads heads of len_q query rows in tiles of block_m rows on
// `device`: one per SM, at most one per tile. Throws `unsupported` when the tiles are too many for the
// tile counter. See Note [Persistent forward tiles].
int sm90_forward_blocks(std::int64_t grid_heads, std::int64_t len_q, std::int64_t block_m, int device);

// Grid heads (batch x kv head) of the deterministic backward that add first key tile first, for keys of
// len_k rows in tiles of block_n rows (ascending_heads_for). See Note [Ordered dQ additions].
int sm90_ascending_heads(std::int64_t grid_heads, std::int64_t len_k, std::int64_t block_n);

}  // namespace ft::flash
