// data_loader.cpp — the SplitMix64 counter generator, the uint16 token file (raw or .npy header parsing),
// window sampling with vocabulary checks, and random benchmark batches.
#include "model/data_loader.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.h"

namespace ft {

// ---- generator ---------------------------------------------------------------------------------------

std::uint64_t Rng::next() {
  std::uint64_t z = state_.seed + (state_.counter + 1) * 0x9e3779b97f4a7c15ull;
  ++state_.counter;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t Rng::below(std::uint64_t n) {
  FT_CHECK(n >= 1, "Rng::below: the range must hold at least one value, given ", n);
  // Lemire: the high word of x * n is uniform in [0, n) once the low word clears the biased sliver.
  unsigned __int128 product = static_cast<unsigned __int128>(next()) * n;
  auto low = static_cast<std::uint64_t>(product);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (low < threshold) {
      product = static_cast<unsigned __int128>(next()) * n;
      low = static_cast<std::uint64_t>(product);
    }
  }
  return static_cast<std::uint64_t>(product >> 64);
}

// ---- token file --------------------------------------------------------------------------------------

namespace {

// The text after "'key':" in a .npy header dict, spaces skipped; empty when the key is absent.
std::string_view npy_value(std::string_view header, std::string_view key) {
  std::string quoted(1, '\'');
  quoted.append(key).push_back('\'');
  std::size_t at = header.find(quoted);
  if (at == std::string_view::npos) return {};
  at = header.find(':', at + quoted.size());
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + 1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return rest;
}

struct NpyLayout {
  std::uint64_t data_offset = 0;
  std::uint64_t elements = 0;
};

// Parses a .npy header: the array must be '<u2' in C order (or at most one dimension).
NpyLayout parse_npy(const MappedFile& file) {
  const std::string& path = file.path();
  const std::uint8_t* p = file.data();
  const std::uint64_t size = file.size();
  FT_CHECK_KIND(io, size >= 10 && std::memcmp(p, "\x93NUMPY", 6) == 0, "token file ", path,
                " is not a .npy file: it does not start with the \\x93NUMPY magic");
  const int major = p[6];
  std::uint64_t header_bytes = 0, start = 0;
  if (major == 1) {
    header_bytes = static_cast<std::uint64_t>(p[8]) | (static_cast<std::uint64_t>(p[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    FT_CHECK_KIND(io, size >= 12, "token file ", path, " is truncated inside its .npy preamble");
    std::uint32_t length = 0;
    std::memcpy(&length, p + 8, 4);
    header_bytes = length;
    start = 12;
  } else {
    FT_THROW(io, "token file ", path, " has .npy format version ", major, ", expected 1, 2 or 3");
  }
  FT_CHECK_KIND(io, start + header_bytes <= size, "token file ", path, ": the .npy header claims ", header_bytes,
                " bytes but the file has ", size - start, " after the preamble");
  const std::string_view header(reinterpret_cast<const char*>(p + start), header_bytes);

  std::string_view descr = npy_value(header, "descr");
  FT_CHECK_KIND(io, descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"'), "token file ", path,
                ": no dtype ('descr') in the .npy header ", header);
  descr = descr.substr(1, descr.find(descr.front(), 1) - 1);
  FT_CHECK_KIND(io, descr == "<u2", "token file ", path, " holds dtype '", descr,
                "', expected '<u2' (little-endian uint16)");

  const std::string_view fortran = npy_value(header, "fortran_order");
  FT_CHECK_KIND(io, fortran.starts_with("True") || fortran.starts_with("False"), "token file ", path,
                ": no fortran_order in the .npy header ", header);

  std::string_view shape = npy_value(header, "shape");
  FT_CHECK_KIND(io, shape.starts_with("(") && shape.find(')') != std::string_view::npos, "token file ", path,
                ": no shape tuple in the .npy header ", header);
  shape = shape.substr(1, shape.find(')') - 1);
  std::uint64_t elements = 1;
  int dims = 0;
  while (!shape.empty()) {
    const std::size_t comma = std::min(shape.find(','), shape.size());
    std::string_view item = shape.substr(0, comma);
    shape.remove_prefix(std::min(comma + 1, shape.size()));
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    std::uint64_t dim = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), dim);
    FT_CHECK_KIND(io, error == std::errc() && end == item.data() + item.size(), "token file ", path,
                  ": shape entry '", item, "' in the .npy header is not a size");
    FT_CHECK_KIND(io, dim == 0 || elements <= std::numeric_limits<std::uint64_t>::max() / dim, "token file ",
                  path, ": the .npy shape overflows");
    elements *= dim;
    ++dims;
  }
  FT_CHECK_KIND(io, !fortran.starts_with("True") || dims <= 1, "token file ", path,
                " is a Fortran-order .npy array of ", dims, " dimensions; save it in C order");

  NpyLayout layout{start + header_bytes, elements};
  FT_CHECK_KIND(io, layout.data_offset % 2 == 0, "token file ", path, ": the .npy data starts at odd offset ",
                layout.data_offset);
  const std::uint64_t data_bytes = size - layout.data_offset;
  FT_CHECK_KIND(io, data_bytes / 2 == elements && data_bytes % 2 == 0, "token file ", path,
                ": the .npy header says ", elements, " uint16 ids (", elements * 2, " bytes) but ", data_bytes,
                " bytes of data follow it");
  return layout;
}

}  // namespace

TokenFile::TokenFile(const std::string& path) : file_(path) {
  const bool npy = path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
  std::uint64_t offset = 0, elements = 0;
  if (npy) {
    const NpyLayout layout = parse_npy(file_);
    offset = layout.data_offset;
    elements = layout.elements;
  } else {
    FT_CHECK_KIND(io, file_.size() % 2 == 0, "token file ", path, " has an odd byte length (", file_.size(),
                  "): expected raw uint16 ids, 2 bytes each");
    elements = file_.size() / 2;
  }
  tokens_ = reinterpret_cast<const std::uint16_t*>(file_.data() + offset);  // mmap base and offset are even
  size_ = static_cast<std::int64_t>(elements);
}

void TokenFile::check_ids(std::int64_t vocab, std::int64_t begin, std::int64_t count) const {
  FT_CHECK(begin >= 0 && count >= 0 && begin + count <= size_, "check_ids: tokens [", begin, ", ", begin + count,
           ") are outside the file's ", size_);
  if (vocab > std::numeric_limits<std::uint16_t>::max()) return;  // every uint16 id fits
  std::int64_t first_bad = std::numeric_limits<std::int64_t>::max();
  // Threads only pay for whole-file scans, not for the windows of one batch.
#pragma omp parallel for reduction(min : first_bad) schedule(static) if (count >= (1 << 22))
  for (std::int64_t i = begin; i < begin + count; ++i)
    if (tokens_[i] >= vocab && i < first_bad) first_bad = i;
  FT_CHECK_KIND(io, first_bad == std::numeric_limits<std::int64_t>::max(), "token file ", path(), ": token id ",
                first_bad < size_ ? tokens_[first_bad] : 0, " at position ", first_bad,
                " is outside the vocabulary of ", vocab, " ids");
}

// ---- loader ------------------------------------------------------------------------------------------

DataLoader::DataLoader(const std::string& path, const DataLoaderOptions& options)
    : file_(path), options_(options), rng_(options.seed) {
  FT_CHECK(options.batch >= 1, "DataLoader: batch must be at least 1, given ", options.batch);
  FT_CHECK(options.context >= 1, "DataLoader: context must be at least 1, given ", options.context);
  FT_CHECK(options.vocab >= 1 && options.vocab <= std::numeric_limits<std::int32_t>::max(),
           "DataLoader: vocab must be in [1, 2^31), given ", options.vocab);
  FT_CHECK_KIND(io, file_.size() >= options.context + 1, "token file ", path, " holds ", file_.size(),
                " tokens, fewer than the ", options.context + 1, " one window of context ", options.context,
                " needs");
  if (options.check == IdCheck::whole_file) file_.check_ids(options.vocab, 0, file_.size());
}

void DataLoader::next(TokenBatch& out) {
  const std::int64_t B = options_.batch, T = options_.context;
  out.batch = B;
  out.context = T;
  out.inputs.resize(static_cast<std::size_t>(B * T));
  out.targets.resize(static_cast<std::size_t>(B * T));
  Rng rng = rng_;  // committed only once the batch is complete and checked
  const auto starts = static_cast<std::uint64_t>(file_.size() - T);  // window starts in [0, size - T - 1]
  for (std::int64_t b = 0; b < B; ++b) {
    const auto start = static_cast<std::int64_t>(rng.below(starts));
    if (options_.check == IdCheck::per_batch) file_.check_ids(options_.vocab, start, T + 1);
    std::int32_t* inputs = out.inputs.data() + b * T;    // (T)
    std::int32_t* targets = out.targets.data() + b * T;  // (T)
    for (std::int64_t t = 0; t < T; ++t) {
      inputs[t] = file_[start + t];
      targets[t] = file_[start + t + 1];
    }
  }
  rng_ = rng;
}

void random_token_batch(Rng& rng, std::int64_t batch, std::int64_t context, std::int64_t vocab, TokenBatch& out) {
  FT_CHECK(batch >= 1 && context >= 1, "random_token_batch: batch and context must be >= 1, given ", batch, " and ",
           context);
  FT_CHECK(vocab >= 1 && vocab <= std::numeric_limits<std::int32_t>::max(),
           "random_token_batch: vocab must be in [1, 2^31), given ", vocab);
  out.batch = batch;
  out.context = context;
  out.inputs.resize(static_cast<std::size_t>(batch * context));
  out.targets.resize(static_cast<std::size_t>(batch * context));
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int32_t* inputs = out.inputs.data() + b * context;    // (context)
    std::int32_t* targets = out.targets.data() + b * context;  // (context)
    auto previous = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
    for (std::int64_t t = 0; t < context; ++t) {
      inputs[t] = previous;
      previous = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
      targets[t] = previous;
    }
  }
}

}  // namespace ft
