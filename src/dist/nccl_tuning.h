// nccl_tuning.h — the resources one NCCL communicator may take from the GPU, set per communicator through
// ncclConfig_t rather than process-wide NCCL_* environment variables (Note [Communication beside compute]):
//   min_ctas, max_ctas  the CTAs (thread blocks, one per channel, each holding an SM for the collective's
//                       whole duration) NCCL may launch per collective; 0 leaves NCCL's default (up to 32
//                       over NVLink on H100/H200). Fewer CTAs leave more SMs and memory bandwidth to the
//                       model's kernels and make each collective slower.
//   cta_policy          NCCL 2.27+: default, efficiency (the fewest CTAs that still perform decently) or,
//                       NCCL 2.28+, zero (no CTA wherever NCCL can: copy engines, symmetric memory).
//   low_priority        the communication stream at the lowest priority instead of the highest: the model's
//                       pending blocks are scheduled before the collectives' when SMs free up.
// DistributedContext::make_device_communicator and NcclCommunicator take one; a host communicator has none.
// Plain data, no CUDA or NCCL types: it is parsed and checked in builds without NCCL too.
#pragma once

#include <string>
#include <string_view>

namespace ft {

enum class CtaPolicy { nccl_default, efficiency, zero };
const char* name_of(CtaPolicy policy);          // "default", "efficiency", "zero"
CtaPolicy parse_cta_policy(std::string_view text);  // ft::Error (invalid_argument) naming the choices

struct NcclTuning {
  static constexpr int kMaxCtas = 64;  // NCCL's channel limit (MAXCHANNELS)
  int min_ctas = 0;                    // 0 or 1 .. kMaxCtas
  int max_ctas = 0;                    // 0 or min_ctas .. kMaxCtas
  CtaPolicy cta_policy = CtaPolicy::nccl_default;
  bool low_priority = false;

  bool is_default() const {
    return min_ctas == 0 && max_ctas == 0 && cta_policy == CtaPolicy::nccl_default && !low_priority;
  }
  // "default", or e.g. "max_ctas 4, policy efficiency, low priority".
  std::string describe() const;
  // ft::Error (invalid_argument) naming the field, the allowed range and the value given.
  void check() const;
};

}  // namespace ft
