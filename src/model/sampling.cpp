// sampling.cpp — greedy, temperature, top-k and top-p sampling on the host (see sampling.h): the draws in
// row order, then the rows in parallel.
#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace ft {

void validate_sampling(const SamplingOptions& o) {
  FT_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "temperature must be >= 0 (0 = greedy), given ",
           o.temperature);
  FT_CHECK(o.top_k >= 0, "top-k must be >= 0 (0 = every token), given ", o.top_k);
  FT_CHECK(o.top_p > 0 && o.top_p <= 1, "top-p must be in (0, 1], given ", o.top_p);
  FT_CHECK(o.id_limit >= 0, "the id limit must be >= 0 (0 = none), given ", o.id_limit);
}

namespace {

std::int32_t argmax(std::span<const float> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// u in [0, total) from one 64-bit draw.
double uniform_below(std::uint64_t draw, double total) { return static_cast<double>(draw >> 11) * 0x1.0p-53 * total; }

// A draw from softmax(row / temperature) over every id, in id order: no candidate order is needed without
// top-k and top-p, which spares a sort of the vocabulary per row.
std::int32_t sample_all(std::span<const float> row, const SamplingOptions& o, std::uint64_t draw) {
  const double top = *std::max_element(row.begin(), row.end());
  std::vector<double> p(row.size());
  double total = 0;
  for (std::size_t i = 0; i < row.size(); ++i) total += p[i] = std::exp((row[i] - top) / o.temperature);
  const double u = uniform_below(draw, total);
  double acc = 0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    acc += p[i];
    if (u < acc) return static_cast<std::int32_t>(i);
  }
  return static_cast<std::int32_t>(row.size() - 1);  // unreachable: acc ends at total, summed the same way
}

std::int32_t sample_row(std::span<const float> row, const SamplingOptions& o, std::uint64_t draw) {
  if ((o.top_k == 0 || static_cast<std::size_t>(o.top_k) >= row.size()) && o.top_p >= 1)
    return sample_all(row, o, draw);
  // Candidates by decreasing logit (ties: lower id first), cut to top_k.
  std::vector<std::int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto by_logit = [&](std::int32_t a, std::int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
  std::size_t keep = ids.size();
  if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < keep) {
    keep = static_cast<std::size_t>(o.top_k);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  // Softmax of logit / temperature over the candidates, in double.
  std::vector<double> p(keep);
  const double top = row[ids[0]];
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((row[ids[i]] - top) / o.temperature);
  // Nucleus: the shortest prefix whose probability reaches top_p.
  double mass = 0;
  std::size_t n = 0;
  while (n < keep) {
    mass += p[n++] / sum;
    if (mass >= o.top_p) break;
  }
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += p[i];
  const double u = uniform_below(draw, total);
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids[n - 1];
}

}  // namespace

std::vector<std::int32_t> sample_tokens(std::span<const float> logits, std::int64_t rows, std::int64_t vocab,
                                        const SamplingOptions& options, Rng& rng) {
  validate_sampling(options);
  FT_CHECK(rows >= 1 && vocab >= 1 && static_cast<std::int64_t>(logits.size()) == rows * vocab,
           "sample_tokens: expected ", rows, " x ", vocab, " logits, given ", logits.size());
  const bool greedy = options.temperature == 0;
  // One draw per sampled row, in row order, before the rows are sampled (in parallel).
  std::vector<std::uint64_t> draws(static_cast<std::size_t>(rows));
  if (!greedy)
    for (auto& d : draws) d = rng.next();
  const std::int64_t n = options.id_limit > 0 ? std::min(options.id_limit, vocab) : vocab;
  std::vector<std::int32_t> out(static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static) if (!greedy && rows > 1)
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = logits.subspan(static_cast<std::size_t>(r * vocab), static_cast<std::size_t>(n));
    out[static_cast<std::size_t>(r)] = greedy ? argmax(row) : sample_row(row, options, draws[static_cast<std::size_t>(r)]);
  }
  return out;
}

}  // namespace ft
