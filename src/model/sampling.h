// sampling.h — the next token of each row of a batch of logits: greedy (temperature 0: the first id of
// the largest logit) or a draw from softmax(logits / temperature) restricted to the top_k largest logits
// and then to the smallest set of most probable ids whose probability reaches top_p (nucleus), renormalised.
// Draws come from the counter-based Rng of data_loader.h, one per sampled row in row order, so a seed
// reproduces a generation. A draw picks along the candidates by decreasing logit — or, with neither top-k nor
// top-p, along the ids in order, which needs no sort of the vocabulary. Rows are sampled in parallel.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/data_loader.h"

namespace ft {

struct SamplingOptions {
  double temperature = 1.0;  // >= 0; 0 = greedy
  std::int64_t top_k = 0;    // >= 0; 0 = every id
  double top_p = 1.0;        // in (0, 1]
  // Ids >= this are never chosen (0 = none barred): a model vocabulary padded past its tokenizer's.
  std::int64_t id_limit = 0;
};

// Throws ft::Error (invalid_argument) naming the option outside its range.
void validate_sampling(const SamplingOptions& options);

// logits: (rows, vocab) fp32 on the host, row-major. Returns one id per row.
std::vector<std::int32_t> sample_tokens(std::span<const float> logits, std::int64_t rows, std::int64_t vocab,
                                        const SamplingOptions& options, Rng& rng);

}  // namespace ft
