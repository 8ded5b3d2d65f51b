// test_stream_timeline.cpp — the profiled step's stream summary (bench/stream_timeline.h) on synthetic records
// whose figures are worked out by hand: the compute stream picked by its non-NCCL kernel time, each stream's
// busy time and span (overlapping records counted once), the compute stream's gaps with what filled them
// (NCCL, copies on other streams, nothing) and the records around them, the largest gaps in order, the
// compute kernels' time beside NCCL kernels, steps split by their outermost range (unranged records joining
// the step they start in), the table and the JSON.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/kernel_summary.h"
#include "bench/stream_timeline.h"
#include "core/error.h"

namespace ft {
namespace {

constexpr std::uint32_t kCompute = 7, kComm = 13, kCopy = 9;
constexpr double kEps = 1e-12;  // ms: the sums of a few ns figures scaled to ms
constexpr const char* kNccl = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

// A record on the given stream from start_us to end_us (µs), in range `step`.
KernelRecord record(const std::string& name, std::uint32_t stream, std::uint64_t start_us, std::uint64_t end_us,
                    const std::string& step = "step 1", ActivityKind kind = ActivityKind::kernel) {
  KernelRecord r;
  r.kind = kind;
  r.name = name;
  r.stream = stream;
  r.start_ns = start_us * 1000;
  r.end_ns = end_us * 1000;
  r.ranges = {step, "model forward"};
  return r;
}

// One step (offset by base_us): the compute stream runs A [0,10], B [12,20], C [20,30], D [40,50] and a short
// E [42,44] beside D (another kernel overlapping on the same stream: counted once); NCCL kernels [5,15] and
// [32,35] on the communication stream, which also runs a cast [36,37]; a DtoH copy [33,45] on the copy stream.
// Compute gaps: [10,12] (NCCL all of it) and [30,40] (NCCL 32-35 = 3, copy 33-40 = 7, anything 32-40 = 8, so
// idle 2), the second before the optimizer step's D. The compute kernels beside NCCL: A 5-10 and B 12-15 = 8.
std::vector<KernelRecord> step(std::uint64_t base_us, const std::string& name) {
  const auto at = [base_us](std::uint64_t t) { return base_us + t; };
  KernelRecord d = record("gemm_D", kCompute, at(40), at(50), name);
  d.ranges = {name, "optimizer step", "adamw"};
  return {record("gemm_A", kCompute, at(0), at(10), name),
          record(kNccl, kComm, at(5), at(15), name),
          record("rmsnorm_B", kCompute, at(12), at(20), name),
          record("flash_fwd_C", kCompute, at(20), at(30), name),
          record(kNccl, kComm, at(32), at(35), name),
          record("memcpy DtoH", kCopy, at(33), at(45), name, ActivityKind::memcpy),
          record("cast_bf16", kComm, at(36), at(37), name),
          d,
          record("rope_E", kCompute, at(42), at(44), name)};
}

// A slow host call from start_us to end_us.
HostCallRecord host_call(const std::string& name, std::uint64_t start_us, std::uint64_t end_us) {
  return {.name = name, .thread = 1, .start_ns = start_us * 1000, .end_ns = end_us * 1000, .correlation = 0,
          .ranges = {}};
}

TEST(StreamTimeline, StreamsGapsAndOverlapOfOneStep) {
  // Host calls during the gaps [110,112] and [130,140]: a synchronisation covering 8 µs of the second, an
  // allocation inside it covering 3, a launch covering 1 µs of the first; one after the step covers none.
  const std::vector<HostCallRecord> calls = {host_call("cudaStreamSynchronize", 129, 138),
                                             host_call("cudaMalloc", 133, 136), host_call("cuLaunchKernel", 111, 113),
                                             host_call("cudaFree", 150, 170)};
  const StepStreamSummary s = summarize_step_streams("step 1", step(100, "step 1"), calls);
  EXPECT_EQ(s.range, "step 1");
  EXPECT_NEAR(s.span_ms, 0.050, kEps);
  ASSERT_EQ(s.streams.size(), 3u);  // by (device, stream)
  EXPECT_EQ(s.streams[0].stream, kCompute);
  EXPECT_EQ(s.streams[1].stream, kCopy);
  EXPECT_EQ(s.streams[2].stream, kComm);
  EXPECT_EQ(s.compute, 0u);
  const StreamActivity& compute = s.streams[0];
  EXPECT_EQ(compute.lane, "compute");
  EXPECT_EQ(compute.records, 5);
  EXPECT_NEAR(compute.first_ms, 0, kEps);
  EXPECT_NEAR(compute.busy_ms, 0.038, kEps);  // 10 + 8 + 10 + 10, E inside D
  EXPECT_NEAR(compute.span_ms, 0.050, kEps);
  EXPECT_EQ(s.streams[1].lane, "copy");
  EXPECT_NEAR(s.streams[1].first_ms, 0.033, kEps);
  EXPECT_NEAR(s.streams[1].busy_ms, 0.012, kEps);
  EXPECT_EQ(s.streams[2].lane, "communication");
  EXPECT_NEAR(s.streams[2].busy_ms, 0.014, kEps);  // 10 + 3 + 1
  EXPECT_NEAR(s.streams[2].span_ms, 0.032, kEps);  // 5 to 37

  EXPECT_EQ(s.gaps, 2);
  EXPECT_NEAR(s.gap_ms, compute.span_ms - compute.busy_ms, kEps);
  EXPECT_NEAR(s.gap_communication_ms, 0.002 + 0.003, kEps);
  EXPECT_NEAR(s.gap_copy_ms, 0.007, kEps);
  EXPECT_NEAR(s.gap_idle_ms, 0.002, kEps);
  EXPECT_NEAR(s.gap_host_call_ms, 0.008 + 0.001, kEps);
  EXPECT_NEAR(s.nccl_overlap_ms, 0.008, kEps);

  ASSERT_EQ(s.largest_gaps.size(), 2u);
  const ComputeGap& longest = s.largest_gaps[0];
  EXPECT_NEAR(longest.start_ms, 0.030, kEps);
  EXPECT_NEAR(longest.length_ms, 0.010, kEps);
  EXPECT_EQ(longest.before, "flash_fwd_C");
  EXPECT_EQ(longest.after, "gemm_D");
  EXPECT_EQ(longest.phase, "optimizer step");
  EXPECT_EQ(longest.start_ns, 130'000u);
  EXPECT_EQ(longest.end_ns, 140'000u);
  EXPECT_EQ(longest.host_call, "cudaStreamSynchronize");
  EXPECT_NEAR(longest.host_call_ms, 0.008, kEps);
  EXPECT_NEAR(longest.communication_ms, 0.003, kEps);
  EXPECT_NEAR(longest.copy_ms, 0.007, kEps);
  EXPECT_NEAR(longest.idle_ms, 0.002, kEps);
  const ComputeGap& shorter = s.largest_gaps[1];
  EXPECT_NEAR(shorter.start_ms, 0.010, kEps);
  EXPECT_NEAR(shorter.length_ms, 0.002, kEps);
  EXPECT_EQ(shorter.before, "gemm_A");
  EXPECT_EQ(shorter.after, "rmsnorm_B");
  EXPECT_EQ(shorter.phase, "model forward");
  EXPECT_EQ(shorter.host_call, "cuLaunchKernel");
  EXPECT_NEAR(shorter.host_call_ms, 0.001, kEps);
  EXPECT_NEAR(shorter.communication_ms, 0.002, kEps);
  EXPECT_NEAR(shorter.idle_ms, 0, kEps);

  ASSERT_EQ(s.gaps_by_phase.size(), 2u);  // in the order of their first gap
  EXPECT_EQ(s.gaps_by_phase[0].phase, "model forward");
  EXPECT_EQ(s.gaps_by_phase[0].gaps, 1);
  EXPECT_NEAR(s.gaps_by_phase[0].gap_ms, 0.002, kEps);
  EXPECT_EQ(s.gaps_by_phase[1].phase, "optimizer step");
  EXPECT_NEAR(s.gaps_by_phase[1].gap_ms, 0.010, kEps);

  // top keeps the longest only; the sums still cover every gap.
  const StepStreamSummary one = summarize_step_streams("step 1", step(0, "step 1"), {}, 1);
  ASSERT_EQ(one.largest_gaps.size(), 1u);
  EXPECT_NEAR(one.largest_gaps[0].length_ms, 0.010, kEps);
  EXPECT_NEAR(one.gap_ms, 0.012, kEps);
}

TEST(StreamTimeline, ComputeStreamIsTheLongestNonNcclKernelTime) {
  // The communication stream runs more kernel time, but NCCL's; the copy stream's memcpy is no kernel.
  std::vector<KernelRecord> records = {record(kNccl, kComm, 0, 100), record("cast_bf16", kComm, 100, 103),
                                       record("gemm", kCompute, 0, 5), record("memcpy HtoD", kCopy, 0, 50, "step 1",
                                                                              ActivityKind::memcpy)};
  StepStreamSummary s = summarize_step_streams("step 1", records, {});
  EXPECT_EQ(s.streams.at(s.compute).stream, kCompute);
  EXPECT_NEAR(s.nccl_overlap_ms, 0.005, kEps);
  records[1].end_ns = 106'000;  // the cast now outlasts the GEMM: its stream is the compute stream
  s = summarize_step_streams("step 1", records, {});
  EXPECT_EQ(s.streams.at(s.compute).stream, kComm);
  EXPECT_EQ(s.streams.at(s.compute).lane, "compute");
  // Only NCCL kernels and copies: no compute stream.
  EXPECT_THROW(summarize_step_streams("step 1", {record(kNccl, kComm, 0, 1)}, {}), Error);
}

TEST(StreamTimeline, StepsByOutermostRangeTableAndJson) {
  std::vector<KernelRecord> records = step(1000, "step 2");
  for (const KernelRecord& r : step(0, "step 1")) records.push_back(r);
  records.push_back(record("gemm_outside", kCompute, 500, 600));
  records.back().ranges.clear();  // launched outside every range, between the steps: left out
  records.push_back(record("memcpy PtoP", 21, 20, 60, "", ActivityKind::memcpy));
  records.back().ranges.clear();  // outside every range, starting within step 1: part of it
  records.push_back(record(kNccl, kComm, 2000, 2001, "barrier"));  // a range with NCCL alone: no summary
  const std::vector<HostCallRecord> calls = {host_call("cudaStreamSynchronize", 1031, 1039)};  // step 2's gap
  const std::vector<StepStreamSummary> steps = summarize_step_streams_by_range(records, calls);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].range, "step 1");
  EXPECT_EQ(steps[1].range, "step 2");
  EXPECT_EQ(steps[0].streams.size(), 4u);
  EXPECT_EQ(steps[0].streams[3].stream, 21u);
  EXPECT_NEAR(steps[0].span_ms, 0.060, kEps);
  EXPECT_EQ(steps[1].streams.size(), 3u);
  EXPECT_NEAR(steps[1].span_ms, 0.050, kEps);
  for (const StepStreamSummary& s : steps) {
    EXPECT_EQ(s.streams.at(s.compute).records, 5);
    EXPECT_NEAR(s.gap_ms, 0.012, kEps);
  }

  const std::string text = format_step_streams(steps[1]);
  EXPECT_NE(text.find("step 2: 0.05 ms; compute stream 7 busy 0.04 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("| communication |"), std::string::npos) << text;
  EXPECT_NE(text.find("Largest gaps of the compute stream"), std::string::npos) << text;
  EXPECT_NE(text.find("| cudaStreamSynchronize 0.008 |"), std::string::npos) << text;
  EXPECT_NE(text.find("phase of the record after them: model forward 1 (0.00 ms); optimizer step 1 (0.01 ms);"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("flash_fwd_C"), std::string::npos) << text;

  const nlohmann::json j = step_streams_json(steps[1]);
  EXPECT_EQ(j["range"], "step 2");
  EXPECT_EQ(j["compute_stream"], kCompute);
  EXPECT_EQ(j["gaps"], 2);
  EXPECT_NEAR(j["nccl_overlap_ms"].get<double>(), 0.008, kEps);
  ASSERT_EQ(j["streams"].size(), 3u);
  EXPECT_EQ(j["streams"][2]["lane"], "communication");
  ASSERT_EQ(j["largest_gaps"].size(), 2u);
  EXPECT_NEAR(j["largest_gaps"][0]["idle_ms"].get<double>(), 0.002, kEps);
  EXPECT_EQ(j["largest_gaps"][1]["after"], "rmsnorm_B");
  EXPECT_EQ(j["largest_gaps"][0]["phase"], "optimizer step");
  EXPECT_EQ(j["largest_gaps"][0]["host_call"], "cudaStreamSynchronize");
  EXPECT_NEAR(j["gap_host_call_ms"].get<double>(), 0.008, kEps);
  EXPECT_EQ(steps[0].largest_gaps[0].host_call, "");  // the call lies in step 2
  ASSERT_EQ(j["gaps_by_phase"].size(), 2u);
  EXPECT_EQ(j["gaps_by_phase"][1]["phase"], "optimizer step");
  EXPECT_EQ(j["gaps_by_phase"][1]["gaps"], 1);

  // The timeline document carries the summary of each step.
  KernelProfile profile;
  profile.start_ns = 0;
  profile.end_ns = 3'000'000;
  profile.records = records;
  profile.host_calls = calls;
  const nlohmann::json doc = kernel_timeline_document(profile, steps, Device::cpu(), {{"size", "tiny"}});
  ASSERT_EQ(doc["host_calls"].size(), 1u);
  EXPECT_EQ(doc["host_calls"][0]["name"], "cudaStreamSynchronize");
  EXPECT_EQ(doc["host_calls"][0]["end_ns"], 1'039'000);
  ASSERT_EQ(doc["step_streams"].size(), 2u);
  EXPECT_EQ(doc["step_streams"][1], j);
}

}  // namespace
}  // namespace ft
