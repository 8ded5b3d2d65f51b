// test_kernel_summary.cpp — the kernel profiler's host side without a GPU: kernel classification (real
// cuBLAS/cuBLASLt, FlashAttention, NCCL and model-op names), short names, range patterns, per-range
// summaries of a synthetic two-step profile (nested ranges, occurrences, spans, shares summing to 1),
// the tables, the JSON and timeline documents; the NvtxRange observer hook; and the errors of a build
// without CUDA/CUPTI, in the library and through the `flashtrain bench model --profile kernels` binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench/kernel_profiler.h"
#include "bench/kernel_summary.h"
#include "core/error.h"
#include "core/nvtx.h"

namespace ft {
namespace {

constexpr const char* kFwdGemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
                                 "execute_segment_k_off_kernel__5x_cublas";
constexpr const char* kBwdGemm = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN";
constexpr const char* kFlash = "void ft::flash::flash_fwd_kernel<__nv_bfloat16, 64, true>(ft::flash::FlashFwdParams)";
constexpr const char* kLoss = "void ft::gpu::(anonymous namespace)::row_kernel<float>(const float*, long, const int*)";
constexpr const char* kAdamw = "void ft::gpu::(anonymous namespace)::adamw_kernel(float*, const float*, float*, "
                               "float*, long, float, float, float, float, float, float)";
constexpr const char* kNccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

KernelRecord kernel(const char* name, std::uint64_t start_us, std::uint64_t duration_us,
                    std::vector<std::string> ranges, std::uint32_t stream = 7) {
  KernelRecord r;
  r.name = name;
  r.stream = stream;
  r.start_ns = start_us * 1000;
  r.end_ns = (start_us + duration_us) * 1000;
  r.ranges = std::move(ranges);
  return r;
}

KernelRecord copy(ActivityKind kind, const char* name, std::uint64_t start_us, std::uint64_t duration_us,
                  std::vector<std::string> ranges) {
  KernelRecord r = kernel(name, start_us, duration_us, std::move(ranges));
  r.kind = kind;
  r.bytes = 4096;
  return r;
}

// Two training steps 1000 us apart (times in us from 100): per step a forward GEMM (100), flash attention
// (50) and the loss (10) in "model forward", a memset (5) in the step only, a backward GEMM (200) in
// "model backward", AdamW (40) in "optimizer step"; then a memcpy (20) outside every range.
std::vector<KernelRecord> two_steps() {
  std::vector<KernelRecord> out;
  for (int s = 0; s < 2; ++s) {
    const std::uint64_t t = 100 + 1000 * static_cast<std::uint64_t>(s);
    const std::string step = "step " + std::to_string(s + 1);
    out.push_back(copy(ActivityKind::memset, "memset", t, 5, {step}));
    out.push_back(kernel(kFwdGemm, t + 10, 100, {step, "model forward", "layer 0 forward", "linear.forward"}));
    out.push_back(kernel(kFlash, t + 110, 50, {step, "model forward", "layer 0 forward", "attention.forward.flash"}));
    out.push_back(kernel(kLoss, t + 160, 10, {step, "model forward", "cross_entropy"}));
    out.push_back(kernel(kBwdGemm, t + 200, 200, {step, "model backward", "layer 0 backward", "linear.backward"}));
    out.push_back(kernel(kAdamw, t + 500, 40, {step, "optimizer step", "adamw"}));
  }
  out.push_back(copy(ActivityKind::memcpy, "memcpy DtoH", 2500, 20, {}));
  return out;
}

double class_ms(const RangeKernelSummary& s, KernelClass c) { return s.class_ms[static_cast<std::size_t>(c)]; }

double sum_of_shares(const RangeKernelSummary& s) {
  double total = 0;
  for (const KernelStat& k : s.kernels) total += k.share;
  return total;
}

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(KernelClassification, RealKernelNames) {
  struct Case {
    const char* name;
    KernelClass expected;
  };
  const Case cases[] = {
      {kFwdGemm, KernelClass::matmul},
      {kBwdGemm, KernelClass::matmul},
      {"void cutlass::Kernel2<cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_"
       "warpspecialized_cooperative_epi_tma>(cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64::"
       "Params)",
       KernelClass::matmul},
      {"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", KernelClass::matmul},
      {"cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4", KernelClass::matmul},
      {"void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, "
       "false>(cublasLt::cublasSplitKParams<float>, const float*, const __nv_bfloat16*, __nv_bfloat16*)",
       KernelClass::matmul},
      {"void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float)",
       KernelClass::matmul},
      {kFlash, KernelClass::attention},
      {"void ft::flash::flash_bwd_dkdv_kernel<__nv_bfloat16, 128, false>(ft::flash::FlashBwdParams)",
       KernelClass::attention},
      {"void ft::flash::(anonymous namespace)::flash_bwd_sink_kernel(ft::flash::FlashBwdParams)",
       KernelClass::attention},
      {"flash_bwd_pre_kernel", KernelClass::attention},
      {"void ft::attention_impl::naive::(anonymous namespace)::softmax_rows_kernel<float>(const float*, float*, "
       "float*)",
       KernelClass::attention},
      {kNccl, KernelClass::communication},
      {"ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", KernelClass::communication},
      {kLoss, KernelClass::other},
      {kAdamw, KernelClass::other},
      {"void ft::gpu::(anonymous namespace)::rotate_kernel<__nv_bfloat16>(__nv_bfloat16*, long, long)",
       KernelClass::other},
      {"flashy_copy_kernel", KernelClass::other},   // not "flash_"
      {"my_flash_kernel", KernelClass::other},      // "flash_" not at the start, no "flash::"
  };
  for (const Case& c : cases)
    EXPECT_EQ(classify_kernel_name(c.name), c.expected)
        << c.name << " classified " << name_of(classify_kernel_name(c.name));
  // Copies and sets are memory whatever they are called; kernels never are.
  EXPECT_EQ(classify(copy(ActivityKind::memcpy, "memcpy HtoD", 0, 1, {})), KernelClass::memory);
  EXPECT_EQ(classify(copy(ActivityKind::memset, "memset", 0, 1, {})), KernelClass::memory);
  EXPECT_EQ(classify(kernel("memset", 0, 1, {})), KernelClass::other);
  EXPECT_STREQ(name_of(KernelClass::communication), "communication");
  EXPECT_STREQ(name_of(ActivityKind::memset), "memset");
}

TEST(KernelClassification, ShortNames) {
  EXPECT_EQ(short_kernel_name(kFlash), "ft::flash::flash_fwd_kernel<__nv_bfloat16, 64, true>");
  EXPECT_EQ(short_kernel_name("void f<(int)3>(float*)"), "f<(int)3>");
  EXPECT_EQ(short_kernel_name(kBwdGemm), kBwdGemm);
  const std::string cut = short_kernel_name(kFwdGemm, 30);
  EXPECT_EQ(cut.size(), 30u);
  EXPECT_EQ(cut, "sm90_xmma_gem...nel__5x_cublas");
}

TEST(KernelSummary, RangePatterns) {
  EXPECT_TRUE(range_matches("model forward", "model forward"));
  EXPECT_FALSE(range_matches("model forward", "model forward 2"));
  EXPECT_TRUE(range_matches("step *", "step 1"));
  EXPECT_TRUE(range_matches("step *", "step 10"));
  EXPECT_FALSE(range_matches("step *", "warmup step 1"));
  EXPECT_FALSE(range_matches("step *", "step"));
  EXPECT_TRUE(range_matches("*", "anything"));
  EXPECT_TRUE(range_matches("layer * forward", "layer 11 forward"));
  EXPECT_FALSE(range_matches("layer * forward", "layer 11 backward"));
  EXPECT_TRUE(range_matches("*.forward.*", "attention.forward.flash"));
  EXPECT_TRUE(range_matches("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(range_matches("a*b*c", "aXbYcZ"));
  EXPECT_THROW(summarize_kernels(two_steps(), ""), Error);
}

TEST(KernelSummary, WholeStepsGroupKernelsByName) {
  const RangeKernelSummary s = summarize_kernels(two_steps(), "step *");
  EXPECT_EQ(s.range, "step *");
  EXPECT_EQ(s.occurrences, 2);
  EXPECT_EQ(s.records, 12);  // the memcpy outside the steps is not in them
  EXPECT_NEAR(s.kernel_ms, 2 * 0.405, 1e-12);
  EXPECT_NEAR(s.span_ms, 2 * 0.540, 1e-12);  // each step: memset at t to AdamW's end at t + 540 us
  EXPECT_NEAR(class_ms(s, KernelClass::matmul), 2 * 0.300, 1e-12);
  EXPECT_NEAR(class_ms(s, KernelClass::attention), 2 * 0.050, 1e-12);
  EXPECT_NEAR(class_ms(s, KernelClass::other), 2 * 0.050, 1e-12);
  EXPECT_NEAR(class_ms(s, KernelClass::memory), 2 * 0.005, 1e-12);
  EXPECT_EQ(class_ms(s, KernelClass::communication), 0.0);
  EXPECT_NEAR(std::accumulate(s.class_ms.begin(), s.class_ms.end(), 0.0), s.kernel_ms, 1e-12);
  ASSERT_EQ(s.kernels.size(), 6u);
  EXPECT_EQ(s.kernels[0].name, kBwdGemm);  // longest total first
  EXPECT_EQ(s.kernels[0].count, 2);
  EXPECT_NEAR(s.kernels[0].total_ms, 0.4, 1e-12);
  EXPECT_NEAR(s.kernels[0].mean_ms, 0.2, 1e-12);
  EXPECT_NEAR(s.kernels[0].share, 0.4 / 0.81, 1e-12);
  EXPECT_EQ(s.kernels[0].cls, KernelClass::matmul);
  EXPECT_EQ(s.kernels[1].name, kFwdGemm);
  EXPECT_EQ(s.kernels.back().name, "memset");
  EXPECT_EQ(s.kernels.back().cls, KernelClass::memory);
  EXPECT_NEAR(sum_of_shares(s), 1.0, 1e-12);
}

TEST(KernelSummary, PhasesOfTheStep) {
  const std::vector<KernelRecord> records = two_steps();
  const RangeKernelSummary fwd = summarize_kernels(records, "model forward");
  EXPECT_EQ(fwd.occurrences, 2);
  EXPECT_EQ(fwd.records, 6);
  EXPECT_NEAR(fwd.kernel_ms, 2 * 0.160, 1e-12);
  EXPECT_NEAR(fwd.span_ms, 2 * 0.160, 1e-12);
  EXPECT_NEAR(class_ms(fwd, KernelClass::matmul) / fwd.kernel_ms, 100.0 / 160.0, 1e-12);
  EXPECT_NEAR(class_ms(fwd, KernelClass::attention) / fwd.kernel_ms, 50.0 / 160.0, 1e-12);
  EXPECT_NEAR(sum_of_shares(fwd), 1.0, 1e-12);

  const RangeKernelSummary bwd = summarize_kernels(records, "model backward");
  EXPECT_EQ(bwd.records, 2);
  ASSERT_EQ(bwd.kernels.size(), 1u);
  EXPECT_EQ(bwd.kernels[0].share, 1.0);

  const RangeKernelSummary opt = summarize_kernels(records, "optimizer step");
  EXPECT_EQ(opt.occurrences, 2);
  EXPECT_NEAR(opt.kernel_ms, 0.080, 1e-12);

  const RangeKernelSummary layer = summarize_kernels(records, "layer * forward");
  EXPECT_EQ(layer.records, 4);
  EXPECT_EQ(layer.occurrences, 2);  // "layer 0 forward" of step 1 and of step 2

  const RangeKernelSummary none = summarize_kernels(records, "no such range");
  EXPECT_EQ(none.occurrences, 0);
  EXPECT_EQ(none.records, 0);
  EXPECT_EQ(none.kernel_ms, 0.0);
  EXPECT_TRUE(none.kernels.empty());
  EXPECT_EQ(kernel_overview_row(none)["matmul_share"], 0.0);

  const RangeKernelSummary all = summarize_kernels(records, "*");
  EXPECT_EQ(all.occurrences, 1);
  EXPECT_EQ(all.records, 13);
  EXPECT_NEAR(all.span_ms, (2520 - 100) * 1e-3, 1e-12);
  EXPECT_NEAR(class_ms(all, KernelClass::memory), 0.030, 1e-12);
}

TEST(KernelSummary, NestedRangesOfOneNameCountOnce) {
  const std::vector<KernelRecord> records = {
      kernel(kLoss, 0, 10, {"outer", "block", "block"}),
      kernel(kLoss, 20, 10, {"outer", "block"}),
      kernel(kAdamw, 40, 10, {"outer", "block", "inner", "block"}),
      kernel(kAdamw, 100, 30, {"other", "block"}),
  };
  const RangeKernelSummary s = summarize_kernels(records, "block");
  EXPECT_EQ(s.records, 4);
  EXPECT_NEAR(s.kernel_ms, 0.060, 1e-12);
  EXPECT_EQ(s.occurrences, 2);  // outer > block and other > block
  EXPECT_NEAR(s.span_ms, 0.050 + 0.030, 1e-12);
  const RangeKernelSummary inner = summarize_kernels(records, "inner");
  EXPECT_EQ(inner.records, 1);
  EXPECT_NEAR(inner.kernel_ms, 0.010, 1e-12);
}

TEST(KernelSummary, OutermostRangesInOrderThenOutside) {
  const std::vector<RangeKernelSummary> s = summarize_outermost_ranges(two_steps());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].range, "step 1");
  EXPECT_EQ(s[1].range, "step 2");
  EXPECT_EQ(s[2].range, "(no range)");
  EXPECT_EQ(s[0].records, 6);
  EXPECT_EQ(s[0].occurrences, 1);
  EXPECT_NEAR(s[1].kernel_ms, 0.405, 1e-12);
  EXPECT_EQ(s[2].records, 1);
  EXPECT_EQ(s[2].kernels[0].name, "memcpy DtoH");
}

TEST(KernelSummary, Tables) {
  const std::vector<KernelRecord> records = two_steps();
  const std::vector<RangeKernelSummary> s = {summarize_kernels(records, "step *"),
                                             summarize_kernels(records, "model forward")};
  const std::string overview = format_range_overview(s, false);
  EXPECT_NE(overview.find("| range "), std::string::npos) << overview;
  EXPECT_NE(overview.find("kernel_ms/occ"), std::string::npos);
  EXPECT_NE(overview.find("matmul_%"), std::string::npos);
  // model forward: 0.160 ms per step, matmul 62.5 %, attention 31.3 %, other 6.3 %.
  EXPECT_NE(overview.find("| model forward | 2           | 6       | 0.160"), std::string::npos) << overview;
  EXPECT_NE(overview.find("62.5"), std::string::npos);
  EXPECT_EQ(lines(overview), 4u);
  const std::string csv = format_range_overview(s, true);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "range,occurrences,records,kernel_ms/occ,span_ms/occ,busy_%,matmul_%,attention_%,communication_%,"
            "other_%,memory_%");
  EXPECT_NE(csv.find("step *,2,12,0.405,0.540,75.0,74.1,12.3,0.0,12.3,1.2"), std::string::npos) << csv;

  const std::string top2 = format_kernel_table(s[0], false, 2);
  EXPECT_EQ(lines(top2), 5u) << top2;  // header, rule, two kernels, the rest
  EXPECT_NE(top2.find("(4 more kernels)"), std::string::npos);
  EXPECT_NE(top2.find("| 8     |"), std::string::npos) << top2;  // the rest: 8 records
  const std::string full = format_kernel_table(s[0], true);
  EXPECT_EQ(lines(full), 7u);
  EXPECT_NE(full.find("\"ft::flash::flash_fwd_kernel<__nv_bfloat16, 64, true>(ft::flash::FlashFwdParams)\",attention,"
                      "2,0.100,50.0,12.3"),
            std::string::npos)
      << full;
}

TEST(KernelSummary, Json) {
  const std::vector<KernelRecord> records = two_steps();
  const nlohmann::json j = kernel_summary_json(summarize_kernels(records, "model forward"));
  EXPECT_EQ(j["range"], "model forward");
  EXPECT_EQ(j["occurrences"], 2);
  EXPECT_EQ(j["kernels"].size(), 3u);
  EXPECT_EQ(j["kernels"][0]["name"], kFwdGemm);
  EXPECT_EQ(j["kernels"][0]["class"], "matmul");
  double shares = 0;
  for (const auto& [name, share] : j["class_share"].items()) shares += share.get<double>();
  EXPECT_NEAR(shares, 1.0, 1e-12);
  EXPECT_NEAR(j["class_ms"]["attention"].get<double>(), 0.1, 1e-12);

  KernelRecord r = records[1];
  r.device = 1;
  r.correlation = 42;
  const nlohmann::json rec = kernel_record_json(r, 50'000);
  EXPECT_EQ(rec["kind"], "kernel");
  EXPECT_EQ(rec["class"], "matmul");
  EXPECT_EQ(rec["device"], 1);
  EXPECT_EQ(rec["stream"], 7);
  EXPECT_EQ(rec["start_ns"], 110'000 - 50'000);
  EXPECT_EQ(rec["end_ns"], 210'000 - 50'000);
  EXPECT_EQ(rec["correlation"], 42);
  EXPECT_EQ(rec["ranges"].size(), 4u);
  EXPECT_EQ(rec["ranges"][1], "model forward");
}

TEST(KernelSummary, TimelineDocument) {
  KernelProfile p;
  p.start_ns = 50'000;
  p.end_ns = 3'000'000;
  p.records = two_steps();
  p.records.push_back(kernel(kNccl, 300, 400, {"step 1", "all-reduce"}, 9));  // a communication stream
  const nlohmann::json doc =
      kernel_timeline_document(p, summarize_step_streams_by_range(p.records, p.host_calls), Device::cpu(),
                               {{"size", "tiny"}});
  EXPECT_EQ(doc["benchmark"], "kernel-timeline");
  EXPECT_EQ(doc["config"]["size"], "tiny");
  EXPECT_EQ(doc["origin_ns"], 50'000);
  EXPECT_EQ(doc["duration_ns"], 2'950'000);
  EXPECT_EQ(doc["dropped"], 0);
  EXPECT_EQ(doc["records"].size(), 14u);
  ASSERT_EQ(doc["windows"].size(), 2u);
  EXPECT_EQ(doc["windows"][0]["name"], "step 1");
  EXPECT_EQ(doc["windows"][0]["start_ns"], 100'000 - 50'000);
  EXPECT_EQ(doc["windows"][0]["end_ns"], 700'000 - 50'000);  // the all-reduce ends last
  EXPECT_EQ(doc["windows"][1]["start_ns"], 1'100'000 - 50'000);
  ASSERT_EQ(doc["streams"].size(), 2u);
  EXPECT_EQ(doc["streams"][0]["stream"], 7);
  EXPECT_EQ(doc["streams"][0]["lane"], "compute");
  EXPECT_EQ(doc["streams"][0]["records"], 13);
  EXPECT_EQ(doc["streams"][1]["lane"], "communication");
  ASSERT_EQ(doc["rows"].size(), 3u);  // step 1, step 2, (no range)
  EXPECT_EQ(doc["rows"][0]["range"], "step 1");
  EXPECT_GT(doc["rows"][0]["communication_share"].get<double>(), 0.4);

  const std::vector<RangeKernelSummary> s = {summarize_kernels(p.records, "step *")};
  const nlohmann::json full = kernel_profile_document(p, s, Device::cpu(), nlohmann::json::object(), 100);
  EXPECT_EQ(full["benchmark"], "kernel-profile");
  EXPECT_EQ(full["rows"].size(), 1u);
  EXPECT_EQ(full["ranges"][0]["range"], "step *");
  EXPECT_TRUE(full.contains("classes"));
  EXPECT_EQ(full["records"].size(), 14u);
  const nlohmann::json brief = kernel_profile_document(p, s, Device::cpu(), nlohmann::json::object(), 10);
  EXPECT_FALSE(brief.contains("records"));
  EXPECT_EQ(brief["records_omitted"], 14);
  EXPECT_EQ(brief["ranges"][0]["records"], 13);
}

// A test observer: logs "+name" and "-" per thread of this test (one thread).
std::vector<std::string>& observed() {
  static std::vector<std::string> log;
  return log;
}
void log_push(const char* name) { observed().push_back(std::string("+") + name); }
void log_pop() { observed().push_back("-"); }
void other_push(const char* name) { observed().push_back(std::string("other+") + name); }
void other_pop() { observed().push_back("other-"); }
const NvtxObserver kLogger{log_push, log_pop};
const NvtxObserver kOther{other_push, other_pop};

TEST(NvtxObserver, SeesRangesInPairsPerObserver) {
  observed().clear();
  auto before = std::make_unique<NvtxRange>("before");  // opened with no observer: never reported
  EXPECT_EQ(set_nvtx_observer(&kLogger), nullptr);
  {
    NvtxRange outer("outer");
    {
      NvtxRange inner(std::string("inner"));
    }
    before.reset();
    auto open = std::make_unique<NvtxRange>("open");
    EXPECT_EQ(set_nvtx_observer(&kOther), &kLogger);
    NvtxRange late("late");
    open.reset();  // closes at the observer that saw it open
  }
  EXPECT_EQ(set_nvtx_observer(nullptr), &kOther);
  { NvtxRange unseen("unseen"); }
  const std::vector<std::string> expected = {"+outer", "+inner", "-", "+open", "other+late", "-", "other-", "-"};
  EXPECT_EQ(observed(), expected);
}

TEST(KernelProfilerBuild, AvailabilityMatchesTheBuild) {
  EXPECT_EQ(kernel_profiler_available(), FT_HAS_CUDA && FT_HAS_CUPTI);
  EXPECT_EQ(kernel_profiler_missing().empty(), kernel_profiler_available());
  KernelProfiler profiler;
  EXPECT_FALSE(profiler.active());
  try {
    profiler.stop();
    ADD_FAILURE() << "stop() without start() did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::runtime);
    EXPECT_NE(e.message().find("not running"), std::string::npos) << e.message();
  }
  if (kernel_profiler_available()) return;  // starting needs a GPU: tests/gpu/test_kernel_profiler.cpp
  try {
    profiler.start();
    ADD_FAILURE() << "start() did not throw in a build without " << (FT_HAS_CUDA ? "CUPTI" : "CUDA");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(e.message().find(FT_HAS_CUDA ? "has no CUPTI" : "has no CUDA"), std::string::npos) << e.message();
  }
  EXPECT_FALSE(profiler.active());
}

// The flashtrain binary beside this test (both in build/bin): exit status and output (stdout and stderr).
struct CliRun {
  int status = -1;
  std::string output;
};

CliRun run_flashtrain(const std::string& arguments) {
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "flashtrain";
  CliRun run;
  if (!std::filesystem::exists(binary)) {
    run.output = "no " + binary.string() + ": build the flashtrain target first";
    return run;
  }
  FILE* pipe = ::popen(("'" + binary.string() + "' " + arguments + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char chunk[4096];
  for (std::size_t n; (n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) run.output.append(chunk, n);
  const int status = ::pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

TEST(BenchModelProfileKernels, CpuRunsGiveAClearError) {
  const CliRun cpu = run_flashtrain("bench model --size tiny --mode fwd --context 16 --warmup 0 --steps 1 "
                                    "--profile kernels --device cpu");
  EXPECT_EQ(cpu.status, 2) << cpu.output;
  EXPECT_NE(cpu.output.find("flashtrain: error: --profile kernels"), std::string::npos) << cpu.output;
  EXPECT_NE(cpu.output.find(kernel_profiler_available() ? "needs a CUDA device, given --device cpu"
                                                        : kernel_profiler_missing()),
            std::string::npos)
      << cpu.output;
  if (!kernel_profiler_available()) {  // --device auto too: the build, not the device, is what is missing
    const CliRun automatic = run_flashtrain("bench model --size tiny --context 16 --profile kernels");
    EXPECT_EQ(automatic.status, 2) << automatic.output;
    EXPECT_NE(automatic.output.find(FT_HAS_CUDA ? "this CUDA build has no CUPTI" : "this build has no CUDA"),
              std::string::npos)
        << automatic.output;
  }
  if (kernel_profiler_available()) {  // a CUDA build with CUPTI checks the rest of the request too
    const CliRun modes = run_flashtrain("bench model --size tiny --mode fwd,train --profile kernels --device cpu");
    EXPECT_EQ(modes.status, 2) << modes.output;
    EXPECT_NE(modes.output.find("--profile kernels profiles the timed steps of one case: give one --size, --context, "
                                "--precision and --mode (one run per mode); given 1 size(s), 1 context(s), 1 "
                                "precision(s), 2 mode(s)"),
              std::string::npos)
        << modes.output;
  }
  const CliRun timing = run_flashtrain("bench model --size tiny --profile kernels --json r.json --device cpu");
  EXPECT_EQ(timing.status, 2) << timing.output;
  EXPECT_NE(timing.output.find("--json r.json writes timing results, which --profile kernels does not produce; use "
                               "--kernels-json"),
            std::string::npos)
      << timing.output;
  const CliRun json = run_flashtrain("bench model --size tiny --kernels-json k.json --device cpu");
  EXPECT_EQ(json.status, 2) << json.output;
  EXPECT_NE(json.output.find("--kernels-json k.json needs --profile kernels"), std::string::npos) << json.output;
  const CliRun help = run_flashtrain("bench model --help");
  EXPECT_EQ(help.status, 0) << help.output;
  EXPECT_NE(help.output.find("--profile kernels (CUDA builds with CUPTI, one case)"), std::string::npos);
  EXPECT_NE(help.output.find("--kernels-json"), std::string::npos);
}

}  // namespace
}  // namespace ft
