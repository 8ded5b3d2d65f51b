// forced_flash_hook.h — a test hook of the CUDA flash kernels (attention_impls.h: forced persistent blocks,
// launch sections, addition order, kernel variants) set for a scope, shared by the GPU flash tests.
#pragma once

namespace ft::testing_util {

// `set(value)` now, `set(reset)` when the scope ends.
class ForcedFlashHook {
 public:
  ForcedFlashHook(void (*set)(int), int value, int reset) : set_(set), reset_(reset) { set_(value); }
  ~ForcedFlashHook() { set_(reset_); }
  ForcedFlashHook(const ForcedFlashHook&) = delete;
  ForcedFlashHook& operator=(const ForcedFlashHook&) = delete;

 private:
  void (*set_)(int);
  int reset_;
};

}  // namespace ft::testing_util
