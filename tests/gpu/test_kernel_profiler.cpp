// test_kernel_profiler.cpp — the CUPTI kernel profiler on a GPU: known work launched under two nested
// NvtxRanges (a cudaMemsetAsync, a cuBLASLt GEMM through ops/gemm_cuda.h, the cast op's templated kernel,
// and a spin kernel of this test loaded from PTX at run time, also launched outside every range) is
// recorded once each with the right kind, name (demangled), bytes, stream, range path and a plausible
// duration; stop() leaves CUPTI disabled (work between two profiles is in neither) and a second
// start/stop works; ranges opened before start() are not attributed; a host call that waits for the GPU is
// kept as a slow host call with its range, the fast calls are not; one profiler runs at a time.
// Run on a GPU machine: ./build/bin/gpu_test_kernel_profiler
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/kernel_profiler.h"
#include "bench/kernel_summary.h"
#include "core/buffer.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/nvtx.h"
#include "core/stream.h"
#include "ops/cast.h"
#include "ops/gemm_cuda.h"

namespace ft {
namespace {

const Device kGpu = Device::cuda(0);
constexpr const char* kOuter = "profiler test outer";
constexpr const char* kInner = "profiler test inner";
constexpr const char* kSpinName = "ft_test_spin_kernel";
constexpr std::uint64_t kSpinNs = 200'000;       // the spin kernel's busy wait
constexpr std::size_t kMemsetBytes = 1 << 20;
constexpr std::int64_t kGemmSize = 512;          // m = n = k
constexpr std::int64_t kCastElements = 1 << 16;

// ft_test_spin_kernel(ns, out): one thread waits ns nanoseconds on %globaltimer, then stores the time it
// waited to *out. An extern "C"-style name, so its record's name is exactly kSpinName.
constexpr const char* kSpinPtx = R"(
.version 7.0
.target sm_80
.address_size 64

.visible .entry ft_test_spin_kernel(
    .param .u64 ft_test_spin_kernel_param_0,
    .param .u64 ft_test_spin_kernel_param_1
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [ft_test_spin_kernel_param_0];
    ld.param.u64 %rd2, [ft_test_spin_kernel_param_1];
    mov.u64 %rd3, %globaltimer;
    add.u64 %rd4, %rd3, %rd1;
$L_spin:
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p1, %rd5, %rd4;
    @%p1 bra $L_spin;
    cvta.to.global.u64 %rd6, %rd2;
    sub.u64 %rd7, %rd5, %rd3;
    st.global.u64 [%rd6], %rd7;
    ret;
}
)";

// The test's own kernel, JIT-compiled from kSpinPtx by the driver (the test is compiled without nvcc).
class SpinKernel {
 public:
  SpinKernel() {
    FT_CUDA_CHECK(cudaLibraryLoadData(&library_, kSpinPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
    FT_CUDA_CHECK(cudaLibraryGetKernel(&kernel_, library_, kSpinName));
  }
  ~SpinKernel() { cudaLibraryUnload(library_); }
  SpinKernel(const SpinKernel&) = delete;
  SpinKernel& operator=(const SpinKernel&) = delete;

  void launch(std::uint64_t* waited_ns, cudaStream_t stream) const {
    std::uint64_t ns = kSpinNs;
    void* args[] = {&ns, &waited_ns};
    FT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel_), dim3(1), dim3(1), args, 0, stream));
  }

 private:
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
};

// Device buffers and a stream for the known work; every piece runs once before profiling, so cuBLASLt's
// handle, the PTX module and the allocations exist before start().
class KernelProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    wrapped_ = Stream::wrap(stream_, kGpu);
    const Shape square{kGemmSize, kGemmSize};
    a_ = OwnedTensor(square, DType::bf16, kGpu, "test.a", wrapped_);
    b_ = OwnedTensor(square, DType::bf16, kGpu, "test.b", wrapped_);
    d_ = OwnedTensor(square, DType::bf16, kGpu, "test.d", wrapped_);
    cast_src_ = OwnedTensor({kCastElements}, DType::f32, kGpu, "test.cast_src", wrapped_);
    cast_dst_ = OwnedTensor({kCastElements}, DType::bf16, kGpu, "test.cast_dst", wrapped_);
    memset_target_ = OwnedTensor({static_cast<std::int64_t>(kMemsetBytes / 4)}, DType::f32, kGpu, "test.memset",
                                 wrapped_);
    waited_ = OwnedTensor({8}, DType::f32, kGpu, "test.waited", wrapped_);  // 4 x u64 (32 bytes)
    for (const Tensor* t : {&a_.tensor(), &b_.tensor(), &cast_src_.tensor()})
      FT_CUDA_CHECK(cudaMemsetAsync(t->data(), 0, static_cast<std::size_t>(t->numel()) * size_of(t->dtype()), stream_));
    spin_ = std::make_unique<SpinKernel>();
    set_memory();
    run_gemm();
    run_cast();
    spin(0);
    FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void TearDown() override {
    if (stream_) {
      cudaStreamSynchronize(stream_);
      spin_.reset();
      // The buffers are freed on their stream: before it is destroyed, not by the fixture's destructor.
      for (OwnedTensor* t : {&a_, &b_, &d_, &cast_src_, &cast_dst_, &memset_target_, &waited_}) *t = OwnedTensor();
      cudaStreamDestroy(stream_);
    }
  }

  void set_memory() const { FT_CUDA_CHECK(cudaMemsetAsync(memset_target_->data(), 0, kMemsetBytes, stream_)); }

  void run_gemm() const {
    gemm::Args args;
    args.m = args.n = args.k = kGemmSize;
    args.a = {a_->data(), DType::bf16, kGemmSize, 0, false};
    args.b = {b_->data(), DType::bf16, kGemmSize, 0, true};
    args.d = {d_->data(), DType::bf16, kGemmSize, 0, false};
    gemm::matmul(args, kGpu, stream_);
  }

  void run_cast() const { cast(cast_dst_, cast_src_, wrapped_); }

  void spin(int slot) const { spin_->launch(static_cast<std::uint64_t*>(waited_->data()) + slot, stream_); }

  // The time the spin kernel in slot waited, read back from the device (ns).
  std::uint64_t waited(int slot) const {
    std::uint64_t ns = 0;
    FT_CUDA_CHECK(cudaMemcpy(&ns, static_cast<std::uint64_t*>(waited_->data()) + slot, sizeof(ns),
                             cudaMemcpyDeviceToHost));
    return ns;
  }

  cudaStream_t stream_ = nullptr;
  Stream wrapped_;
  OwnedTensor a_, b_, d_, cast_src_, cast_dst_, memset_target_, waited_;
  std::unique_ptr<SpinKernel> spin_;
};

using Ranges = std::vector<std::string>;

std::vector<const KernelRecord*> named(const KernelProfile& p, const std::string& name) {
  std::vector<const KernelRecord*> out;
  for (const KernelRecord& r : p.records)
    if (r.name == name) out.push_back(&r);
  return out;
}

std::string describe(const KernelProfile& p) {
  std::string out;
  for (const KernelRecord& r : p.records) {
    out += str("  ", name_of(r.kind), " '", r.name, "' stream ", r.stream, " ", r.duration_ms() * 1e3, " us [");
    for (const std::string& range : r.ranges) out += range + ";";
    out += "]\n";
  }
  return out;
}

TEST_F(KernelProfilerTest, AttributesWorkToTheRangesThatLaunchedIt) {
  KernelProfiler profiler;
  profiler.start();
  EXPECT_TRUE(profiler.active());
  spin(0);  // outside every range
  {
    NvtxRange outer(kOuter);
    set_memory();
    {
      NvtxRange inner(kInner);
      run_gemm();
      run_cast();
      spin(1);
    }
  }
  const KernelProfile p = profiler.stop();
  EXPECT_FALSE(profiler.active());
  const std::string all = describe(p);
  SCOPED_TRACE("records:\n" + all);

  EXPECT_EQ(p.dropped, 0u);
  EXPECT_LT(p.start_ns, p.end_ns);
  EXPECT_TRUE(std::is_sorted(p.records.begin(), p.records.end(),
                             [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; }));
  // ops::cast opens a range of its own ("cast", as every op does), nested in inner.
  const Ranges outer{kOuter}, inner{kOuter, kInner}, in_cast{kOuter, kInner, "cast"};
  for (const KernelRecord& r : p.records) {
    EXPECT_EQ(r.device, 0);
    EXPECT_EQ(r.stream, p.records.front().stream) << r.name;  // all on the test's stream
    EXPECT_GE(r.start_ns, p.start_ns) << r.name;
    EXPECT_LE(r.end_ns, p.end_ns) << r.name;
    EXPECT_LT(r.duration_ms(), 100.0) << r.name;
    EXPECT_TRUE(r.ranges.empty() || r.ranges == outer || r.ranges == inner || r.ranges == in_cast) << r.name;
  }

  const auto spins = named(p, kSpinName);
  ASSERT_EQ(spins.size(), 2u);
  EXPECT_TRUE(spins[0]->ranges.empty());
  EXPECT_EQ(spins[1]->ranges, inner);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(spins[i]->kind, ActivityKind::kernel);
    EXPECT_EQ(classify(*spins[i]), KernelClass::other);
    EXPECT_GE(spins[i]->end_ns - spins[i]->start_ns, kSpinNs * 9 / 10);  // %globaltimer ticks are ~1 us
    EXPECT_GE(waited(i), kSpinNs);
    EXPECT_NE(spins[i]->correlation, 0u);
  }
  EXPECT_NE(spins[0]->correlation, spins[1]->correlation);

  std::vector<const KernelRecord*> memsets;  // the test's (cuBLASLt may zero its own buffers inside inner)
  for (const KernelRecord& r : p.records)
    if (r.kind == ActivityKind::memset && r.ranges != inner) memsets.push_back(&r);
  ASSERT_EQ(memsets.size(), 1u);
  EXPECT_EQ(memsets[0]->name, "memset");
  EXPECT_EQ(memsets[0]->bytes, kMemsetBytes);
  EXPECT_EQ(memsets[0]->ranges, outer);
  EXPECT_EQ(classify(*memsets[0]), KernelClass::memory);
  const auto with_ranges = [&](const Ranges& ranges) {
    return std::count_if(p.records.begin(), p.records.end(), [&](const KernelRecord& r) { return r.ranges == ranges; });
  };
  EXPECT_EQ(with_ranges(outer), 1);   // the memset
  EXPECT_EQ(with_ranges(Ranges{}), 1);  // the first spin

  std::vector<const KernelRecord*> casts, matmuls;
  for (const KernelRecord& r : p.records) {
    if (r.name.find("cast_kernel<") != std::string::npos) casts.push_back(&r);
    if (r.kind == ActivityKind::kernel && classify(r) == KernelClass::matmul) matmuls.push_back(&r);
  }
  ASSERT_EQ(casts.size(), 1u);  // demangled: "void ft::gpu::(anonymous namespace)::cast_kernel<...>(...)"
  EXPECT_EQ(casts[0]->ranges, in_cast);
  EXPECT_EQ(casts[0]->name.rfind("_Z", 0), std::string::npos);
  EXPECT_NE(casts[0]->name.find("ft::gpu::"), std::string::npos);
  // cuBLASLt: one GEMM kernel (or a GEMM and its split-K reduction), every one classified matmul.
  ASSERT_GE(matmuls.size(), 1u) << "no kernel classified matmul: check the names against kernel_summary.h";
  EXPECT_LE(matmuls.size(), 2u);
  for (const KernelRecord* m : matmuls) {
    EXPECT_EQ(m->ranges, inner);
    EXPECT_GT(m->end_ns, m->start_ns);
  }
  std::size_t in_inner = 0, inner_memsets = 0;
  for (const KernelRecord& r : p.records) {
    in_inner += r.ranges == inner;
    inner_memsets += r.ranges == inner && r.kind == ActivityKind::memset;
  }
  EXPECT_EQ(in_inner, matmuls.size() + inner_memsets + 1)
      << "inner itself holds the GEMM's kernel(s) (and memsets) and one spin only";
  EXPECT_EQ(with_ranges(in_cast), 1);  // the cast

  const RangeKernelSummary summary = summarize_kernels(p.records, kOuter);
  EXPECT_EQ(summary.occurrences, 1);
  EXPECT_EQ(summary.records, static_cast<std::int64_t>(in_inner + 2));  // + the memset and the cast
  EXPECT_GT(summary.class_ms[static_cast<std::size_t>(KernelClass::matmul)], 0.0);
  const RangeKernelSummary everything = summarize_kernels(p.records, "*");
  EXPECT_EQ(everything.records, static_cast<std::int64_t>(p.records.size()));
}

TEST_F(KernelProfilerTest, StopLeavesCuptiDisabledAndASecondProfileWorks) {
  KernelProfiler profiler;
  profiler.start();
  {
    NvtxRange first("first profile");
    spin(0);
  }
  const KernelProfile first = profiler.stop();
  ASSERT_EQ(named(first, kSpinName).size(), 1u) << describe(first);
  EXPECT_EQ(named(first, kSpinName)[0]->ranges, Ranges{"first profile"});

  {  // not profiled: CUPTI must not hand these to the next profile
    NvtxRange between("between profiles");
    spin(1);
    set_memory();
    run_gemm();
  }
  FT_CUDA_CHECK(cudaStreamSynchronize(stream_));

  auto early = std::make_unique<NvtxRange>("opened before start");
  profiler.start();
  {
    NvtxRange second("second profile");
    spin(2);
  }
  early.reset();  // closes inside the profile, unseen by it
  spin(3);
  const KernelProfile second = profiler.stop();
  SCOPED_TRACE("second profile:\n" + describe(second));
  const auto spins = named(second, kSpinName);
  ASSERT_EQ(spins.size(), 2u);
  EXPECT_EQ(spins[0]->ranges, Ranges{"second profile"});
  EXPECT_TRUE(spins[1]->ranges.empty());
  for (const KernelRecord& r : second.records) {
    EXPECT_NE(r.kind, ActivityKind::memset);
    EXPECT_NE(classify(r), KernelClass::matmul);
    EXPECT_GE(r.start_ns, second.start_ns);
  }
  EXPECT_GT(second.start_ns, first.end_ns);
}

TEST_F(KernelProfilerTest, KeepsSlowHostCallsWithTheirRanges) {
  KernelProfiler profiler;
  profiler.start();
  {
    NvtxRange outer(kOuter);
    spin(0);
    spin(1);
    FT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host waits for both spins: about 2 x kSpinNs
  }
  const KernelProfile p = profiler.stop();
  std::string names;
  for (const HostCallRecord& h : p.host_calls) {
    names += str(" ", h.name, " ", h.duration_ms(), " ms;");
    EXPECT_GE(h.end_ns - h.start_ns, kSlowHostCallNs) << h.name;  // the fast calls are not kept
  }
  EXPECT_TRUE(std::is_sorted(p.host_calls.begin(), p.host_calls.end(),
                             [](const HostCallRecord& a, const HostCallRecord& b) { return a.start_ns < b.start_ns; }));
  const auto sync = std::find_if(p.host_calls.begin(), p.host_calls.end(), [](const HostCallRecord& h) {
    return h.name.rfind("cudaStreamSynchronize", 0) == 0;  // CUPTI may add a version suffix ("_v3020")
  });
  ASSERT_NE(sync, p.host_calls.end()) << "slow host calls:" << names;
  EXPECT_EQ(sync->ranges, Ranges{kOuter});
  EXPECT_GE(sync->start_ns, p.start_ns);
  EXPECT_LE(sync->end_ns, p.end_ns);
  EXPECT_NE(sync->correlation, 0u);
}

TEST_F(KernelProfilerTest, OneProfileAtATime) {
  KernelProfiler a, b;
  a.start();
  try {
    b.start();
    ADD_FAILURE() << "a second profiler started while one runs";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("one at a time"), std::string::npos) << e.message();
  }
  EXPECT_THROW(a.start(), Error);  // already running
  a.stop();
  {
    KernelProfiler dropped;
    dropped.start();
    spin(0);
  }  // the destructor stops it
  b.start();
  spin(1);
  const KernelProfile p = b.stop();
  EXPECT_EQ(named(p, kSpinName).size(), 1u) << describe(p);
}

}  // namespace
}  // namespace ft
