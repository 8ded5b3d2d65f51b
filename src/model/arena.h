// arena.h — ArenaLayout: named tensors packed into one allocation at aligned offsets, with per-tensor byte
// accounting (the activation arena and the workspace of the model). Only offsets live here; views are made
// from the arena's base pointer and the shapes of the current call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ft {

struct ArenaEntry {
  std::string name;        // e.g. "layers.3.attn.qkv"
  std::size_t offset = 0;  // bytes from the arena base, a multiple of kArenaAlignment
  std::size_t bytes = 0;   // at capacity
};

constexpr std::size_t kArenaAlignment = 256;

class ArenaLayout {
 public:
  // Reserves elements of dtype at the next aligned offset; returns the offset in bytes.
  std::size_t add(std::string name, std::size_t elements, DType dtype);
  // Starts a region that overlays the one before it (from `base`): tensors used in different phases
  // share memory; the arena is as large as the largest overlay.
  void rewind_to(std::size_t base);
  // Ends an overlay: the next tensor goes after every tensor reserved so far.
  void skip_to_end() { end_ = bytes_; }
  std::size_t end() const { return end_; }      // the current offset
  std::size_t bytes() const { return bytes_; }  // the arena size
  const std::vector<ArenaEntry>& entries() const { return entries_; }

 private:
  std::size_t end_ = 0;
  std::size_t bytes_ = 0;
  std::vector<ArenaEntry> entries_;
};

}  // namespace ft
