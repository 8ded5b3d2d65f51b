// arena.cpp — aligned packing of named tensors for ArenaLayout.
#include "model/arena.h"

#include <algorithm>

#include "core/error.h"

namespace ft {

std::size_t ArenaLayout::add(std::string name, std::size_t elements, DType dtype) {
  const std::size_t offset = (end_ + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  const std::size_t bytes = elements * size_of(dtype);
  entries_.push_back({std::move(name), offset, bytes});
  end_ = offset + bytes;
  bytes_ = std::max(bytes_, end_);
  return offset;
}

void ArenaLayout::rewind_to(std::size_t base) {
  FT_CHECK(base <= end_, "arena layout: cannot rewind to ", base, " bytes, past the end at ", end_);
  end_ = base;
}

}  // namespace ft
