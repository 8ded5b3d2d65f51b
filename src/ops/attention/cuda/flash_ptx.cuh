// flash_ptx.cuh — internal (CUDA builds only): the few PTX instructions the FlashAttention-2 kernels
// are built from — cp.async global->shared copies, ldmatrix, mma.sync (bf16/fp16 m16n8k16 and tf32
// m16n8k8, fp32 accumulation), ex2.approx, fp32 atomic adds — and the per-dtype packing of operands
// into mma registers.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ft::flash {

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared; valid = false writes 16 zero bytes instead.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Generic-proxy writes to shared memory (cp.async, st.shared) made visible to the async proxy (wgmma);
// each writing thread issues it before the barrier that precedes the reads. sm_90 and newer.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// The head of step `it` of a tile loop over a ring of STAGES shared-memory buffers that prefetch(i)
// fills with step i's tiles by cp.async (one commit group per call; the prologue issued steps 0 ..
// STAGES - 2). With STAGES >= 2: wait for step it's group, then the barrier after which every thread is
// done with step it - 1, then refill that step's slot with step it + STAGES - 1 — one barrier per step.
// With one buffer: load step it, wait, barrier; ring_step_end then adds the barrier before the refill.
template <int STAGES, class Prefetch>
__device__ __forceinline__ void ring_step_begin(int it, Prefetch&& prefetch) {
  if constexpr (STAGES >= 2) {
    cp_async_wait<STAGES - 2>();
  } else {
    prefetch(it);
    cp_async_wait<0>();
  }
  __syncthreads();
  if constexpr (STAGES >= 2) prefetch(it + STAGES - 1);
}

template <int STAGES>
__device__ __forceinline__ void ring_step_end() {
  if constexpr (STAGES == 1) __syncthreads();  // the single buffer is refilled at the next head
}

// Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem)));
}

// dst[0], dst[1] += x, y in fp32 global memory, atomically (dst 8-byte aligned): one vector reduction
// on sm_90, two scalar ones before. The sum's order, hence its rounding, depends on scheduling.
__device__ __forceinline__ void atomic_add2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ std::uint32_t to_tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// Per input dtype: the mma shape's k (kK), the mma itself, and packing of fp32 values into operand
// registers. Fragments are 4 registers for A (16 x kK) and 2 for B (kK x 8) in every case.
template <class T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static constexpr int kK = 16;
  static __device__ __forceinline__ void run(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
};

template <>
struct Mma<__half> {
  static constexpr int kK = 16;
  static __device__ __forceinline__ void run(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
};

// fp32 inputs run on the TF32 tensor cores (operands rounded to tf32, fp32 accumulation).
template <>
struct Mma<float> {
  static constexpr int kK = 8;
  static __device__ __forceinline__ void run(float (&c)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <class T>
inline constexpr bool kIs16Bit = sizeof(T) == 2;

}  // namespace ft::flash
