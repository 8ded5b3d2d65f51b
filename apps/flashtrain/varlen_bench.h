// varlen_bench.h — the varlen cases of `flashtrain bench attention` (--sweep varlen): packed documents of
// random lengths through attention_varlen_forward / _backward, timed like the dense cases
// (attention_bench.h) and counted on the FLOPs the documents need.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashtrain/attention_bench.h"

namespace ft::cli {

// Lengths uniform in [min_length, max_length] drawn from a SplitMix64 stream of `seed` until they cover
// `total` tokens; the last one is cut to the total (so it may be shorter than min_length).
std::vector<std::int32_t> document_lengths(std::int64_t total, std::int64_t min_length, std::int64_t max_length,
                                           std::uint64_t seed);

// Times row.c (documents set) into row: q (total, Hq, D), k, v (total, Hkv, D), the cumulative lengths on the
// device with their host mirror (no synchronisation in the timed calls).
void time_varlen_case(AttentionBenchRow& row, const AttentionBenchConfig& config);

// The results row's fields of a varlen case: "varlen": true, "documents", "total_tokens", "max_seqlen".
nlohmann::json varlen_row_fields(const std::vector<std::int32_t>& documents);

}  // namespace ft::cli
