// kernel_summary.h — what the kernel profiler's records (kernel_profiler.h) say, in host code that
// needs no GPU: per NVTX range (selected by name) a table of kernels by total time with count, mean and
// share of the range's device time; the split into classes (matmul / attention / communication / other /
// memory); markdown and CSV tables in the style of report_table.h; JSON forms; and the timeline document
// tools/plot_timeline.py draws (every record with its stream, start, end, name, class and ranges).
//
// Classes, from the record's kind and its demangled name (case-insensitive substrings, first rule wins):
//   memory         memcpy and memset records (not kernels)
//   communication  names containing "nccl" (ncclDevKernel_AllReduce_..., ncclKernel_...)
//   attention      our FlashAttention kernels: names containing "flash::" or starting with "flash_"
//                  (ft::flash::flash_fwd_kernel, flash_bwd_dkdv_kernel, flash_bwd_dq_kernel,
//                  flash_bwd_pre_kernel, flash_bwd_sink_kernel), and the naive attention's own kernels
//                  ("attention_impl::naive::", its softmax and row kernels; its GEMMs are matmul)
//   matmul         cuBLAS / cuBLASLt GEMM kernels: names containing "gemm" (sm80_xmma_gemm_...,
//                  ampere_bf16_s16816gemm_..., cutlass_80_tensorop_s1688gemm_..., gemmSN_...), "gemv",
//                  "xmma" (sm90_xmma_gemm_..._cublas), "cutlass" (cutlass3x_sm90_tensorop_..., and
//                  cutlass::Kernel2<...> wrappers), "nvjet" (cuBLASLt's Hopper/Blackwell kernels, e.g.
//                  nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN), "splitkreduce" (cuBLAS's split-K
//                  reduction, part of a GEMM)
//   other          every other kernel (norms, RoPE, SwiGLU, casts, cross-entropy, AdamW, ...)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/kernel_profiler.h"
#include "bench/stream_timeline.h"
#include "core/device.h"

namespace ft {

enum class KernelClass { matmul, attention, communication, other, memory };
constexpr std::size_t kKernelClasses = 5;
const char* name_of(KernelClass cls);  // "matmul", "attention", "communication", "other", "memory"
KernelClass classify_kernel_name(std::string_view name);  // the kernel rules above (never memory)
KernelClass classify(const KernelRecord& record);         // memory for memcpy / memset, else by name

// A kernel name for tables: without a leading "void " and the parameter list, at most max_chars
// characters (cut in the middle with "..."). The JSON keeps full names.
std::string short_kernel_name(std::string_view name, std::size_t max_chars = 90);

// Which ranges a summary covers: an NvtxRange name where '*' stands for any characters ("model forward";
// "step *" = "step 1", "step 2", ..., not "warmup step 1"; "layer * forward"). A summary of "*" alone
// covers every record, in a range or not.
bool range_matches(std::string_view pattern, std::string_view range_name);

struct KernelStat {
  std::string name;  // full demangled name ("memcpy HtoD", "memset" for copies and sets)
  KernelClass cls = KernelClass::other;
  std::int64_t count = 0;
  double total_ms = 0, mean_ms = 0;
  double share = 0;  // total_ms / the range's kernel_ms; the kernels' shares sum to 1
};

// The records of one range selection. A record counts once however many of its ranges match (nested
// ranges of one name); it belongs to the occurrence named by its ranges up to the outermost match
// ("step 2" > "model forward"), so occurrences are the distinct instances of the range (one per step
// for "model forward" when every step runs one forward). With "*" the whole profile is one occurrence.
struct RangeKernelSummary {
  std::string range;             // the pattern
  std::int64_t occurrences = 0;  // distinct instances of the range that launched work
  std::int64_t records = 0;      // kernels, memcpys and memsets
  double kernel_ms = 0;          // the sum of their durations
  double span_ms = 0;            // summed over occurrences: last end - first start of its records
  std::array<double, kKernelClasses> class_ms{};  // kernel_ms by KernelClass; sums to kernel_ms
  std::vector<KernelStat> kernels;                // by total_ms, longest first (then by name)
};

RangeKernelSummary summarize_kernels(const std::vector<KernelRecord>& records, std::string_view pattern);
// One summary per distinct outermost range (each "step N"), in order of first start; records launched
// outside every range are summarised as range "(no range)", last.
std::vector<RangeKernelSummary> summarize_outermost_ranges(const std::vector<KernelRecord>& records);

// Per range: occurrences, records (over all occurrences), kernel_ms and span_ms per occurrence, busy_% (kernel
// time over span; above 100 when streams overlap), and each class's share of the kernel time in %.
std::string format_range_overview(const std::vector<RangeKernelSummary>& summaries, bool csv);
// The kernels of one range: kernel (short name), class, count, total_ms, mean_us, share_%. top > 0 keeps
// the top kernels by total time and adds one row for the rest ("(N more kernels)").
std::string format_kernel_table(const RangeKernelSummary& summary, bool csv, std::size_t top = 0);

// {"range", "occurrences", "records", "kernel_ms", "span_ms", "class_ms": {class: ms},
//  "class_share": {class: fraction}, "kernels": [{"name", "class", "count", "total_ms", "mean_ms", "share"}]}
nlohmann::json kernel_summary_json(const RangeKernelSummary& summary);
// The overview row of a summary as a results row: {"range", "occurrences", "records", "kernel_ms",
// "span_ms", "<class>_share" for each class} with the figures per occurrence.
nlohmann::json kernel_overview_row(const RangeKernelSummary& summary);

// {"kind", "name", "class", "device", "stream", "start_ns", "end_ns", "correlation", "bytes", "ranges"}
// with start_ns and end_ns relative to origin_ns (the profile's start).
nlohmann::json kernel_record_json(const KernelRecord& record, std::uint64_t origin_ns);

// The timeline document (results_json.h): benchmark "kernel-timeline", config as given, rows = the
// overview row of each outermost range (summarize_outermost_ranges), plus
//   "origin_ns": the profile's start on CUPTI's clock; times below are relative to it,
//   "duration_ns": stop - start, "dropped": records CUPTI dropped,
//   "windows": [{"name", "start_ns", "end_ns"}]: each outermost range's first start to last end,
//   "streams": [{"device", "stream", "lane", "records"}]: lane "communication" when the stream ran a
//              communication kernel, else "compute",
//   "records": [kernel_record_json of every record, by start],
//   "host_calls": [{"name", "thread", "start_ns", "end_ns", "correlation", "ranges"}]: the slow CUDA calls,
//   "step_streams": [step_streams_json of each of `steps`: the profile's summarize_step_streams_by_range
//                   (stream_timeline.h; the caller's, which it may print too): busy time and span per stream, the
//                   compute stream's gaps and its time beside NCCL kernels].
nlohmann::json kernel_timeline_document(const KernelProfile& profile, const std::vector<StepStreamSummary>& steps,
                                        Device device, nlohmann::json config);

// The kernel-profile document: benchmark "kernel-profile", rows = kernel_overview_row of each summary,
// "ranges" = kernel_summary_json of each, "classes" = the classification rules in words, and the
// timeline document's "origin_ns", "duration_ns", "dropped", "windows", "streams", "records" when the
// profile holds at most max_records records (else "records_omitted": their count).
nlohmann::json kernel_profile_document(const KernelProfile& profile, const std::vector<RangeKernelSummary>& summaries,
                                       Device device, nlohmann::json config, std::size_t max_records);

}  // namespace ft
