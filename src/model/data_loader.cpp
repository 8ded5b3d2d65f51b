// data_loader.cpp — the SplitMix64 counter generator, the uint16/uint32 token file (raw or .npy header
// parsing, told apart by content), window sampling with vocabulary checks, and random benchmark batches.
#include "model/data_loader.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "core/printable.h"

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

constexpr std::int64_t kUint16Ids = std::int64_t{1} << 16;  // vocabularies up to this fit uint16 ids

struct NpyLayout {
  std::uint64_t data_offset = 0;
  std::uint64_t elements = 0;
  int id_bytes = 2;
};

bool has_npy_magic(const MappedFile& file) {
  return file.size() >= 6 && std::memcmp(file.data(), "\x93NUMPY", 6) == 0;
}

// Parses the .npy header of a file that starts with the magic: the array must be '<u2' or '<u4' in C
// order (or at most one dimension).
NpyLayout parse_npy(const MappedFile& file) {
  const std::string& path = file.path();
  const std::uint8_t* p = file.data();
  const std::uint64_t size = file.size();
  FT_CHECK_KIND(io, size >= 10, "token file ", path, " starts with the .npy magic but is truncated inside its .npy "
                "preamble (", size, " bytes)");
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
                ": no dtype ('descr') in the .npy header ", printable_excerpt(header));
  descr = descr.substr(1, descr.find(descr.front(), 1) - 1);
  FT_CHECK_KIND(io, descr == "<u2" || descr == "<u4", "token file ", path, " holds dtype '", printable_excerpt(descr),
                "', expected '<u2' (little-endian uint16) or '<u4' (little-endian uint32)");
  const int id_bytes = descr == "<u2" ? 2 : 4;

  const std::string_view fortran = npy_value(header, "fortran_order");
  FT_CHECK_KIND(io, fortran.starts_with("True") || fortran.starts_with("False"), "token file ", path,
                ": no fortran_order in the .npy header ", printable_excerpt(header));

  std::string_view shape = npy_value(header, "shape");
  FT_CHECK_KIND(io, shape.starts_with("(") && shape.find(')') != std::string_view::npos, "token file ", path,
                ": no shape tuple in the .npy header ", printable_excerpt(header));
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
                  ": shape entry '", printable_excerpt(item), "' in the .npy header is not a size");
    FT_CHECK_KIND(io, dim == 0 || elements <= std::numeric_limits<std::uint64_t>::max() / dim, "token file ",
                  path, ": the .npy shape overflows");
    elements *= dim;
    ++dims;
  }
  FT_CHECK_KIND(io, !fortran.starts_with("True") || dims <= 1, "token file ", path,
                " is a Fortran-order .npy array of ", dims, " dimensions; save it in C order");

  NpyLayout layout{start + header_bytes, elements, id_bytes};
  FT_CHECK_KIND(io, layout.data_offset % id_bytes == 0, "token file ", path, ": the .npy data starts at offset ",
                layout.data_offset, ", not a multiple of its ", id_bytes, "-byte ids");
  const std::uint64_t data_bytes = size - layout.data_offset;
  FT_CHECK_KIND(io, data_bytes / id_bytes == elements && data_bytes % id_bytes == 0, "token file ", path,
                ": the .npy header says ", elements, " ", id_bytes == 2 ? "uint16" : "uint32", " ids (",
                elements > data_bytes ? std::string("more") : std::to_string(elements * id_bytes), " bytes) but ",
                data_bytes, " bytes of data follow it");
  return layout;
}

}  // namespace

TokenFile::TokenFile(const std::string& path, std::int64_t vocab) : file_(path) {
  FT_CHECK(vocab >= 1, "token file ", path, ": the vocabulary must hold at least 1 id, given ", vocab);
  std::uint64_t offset = 0, elements = 0;
  npy_ = has_npy_magic(file_);
  if (npy_) {
    const NpyLayout layout = parse_npy(file_);
    offset = layout.data_offset;
    elements = layout.elements;
    id_bytes_ = layout.id_bytes;
  } else {
    id_bytes_ = vocab > kUint16Ids ? 4 : 2;
    FT_CHECK_KIND(io, file_.size() % id_bytes_ == 0, "token file ", path, " is ", file_.size(),
                  " bytes, not a multiple of ", id_bytes_, ": expected raw little-endian ",
                  id_bytes_ == 2 ? "uint16" : "uint32", " ids (", id_bytes_ == 2 ? "uint16 for a vocabulary of up to 65536"
                  : "uint32 for a vocabulary above 65536", ", given ", vocab, ")");
    elements = file_.size() / id_bytes_;
  }
  tokens_ = file_.data() + offset;  // mmap base and offset are multiples of the id size
  size_ = static_cast<std::int64_t>(elements);
}

std::string TokenFile::describe() const {
  return str(path(), " (", size_, " ", id_bytes_ == 2 ? "uint16" : "uint32", " tokens, ", npy_ ? ".npy" : "raw", ")");
}

namespace {

// The largest id of tokens [begin, end) of width Id.
template <class Id>
Id max_id(const Id* tokens, std::int64_t begin, std::int64_t end) {
  Id largest = 0;
#pragma omp simd reduction(max : largest)
  for (std::int64_t i = begin; i < end; ++i) largest = tokens[i] > largest ? tokens[i] : largest;
  return largest;
}

// The first position in [begin, begin + count) whose id is >= vocab, or -1.
template <class Id>
std::int64_t first_bad_id(const Id* tokens, std::int64_t vocab, std::int64_t begin, std::int64_t count) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;  // ids per chunk: a bad chunk is searched alone
  const std::int64_t chunks = (count + kChunk - 1) / kChunk;
  std::int64_t first_bad_chunk = std::numeric_limits<std::int64_t>::max();
#pragma omp parallel for reduction(min : first_bad_chunk) schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t lo = begin + c * kChunk, hi = std::min(begin + count, lo + kChunk);
    if (static_cast<std::int64_t>(max_id(tokens, lo, hi)) >= vocab && c < first_bad_chunk) first_bad_chunk = c;
  }
  if (first_bad_chunk == std::numeric_limits<std::int64_t>::max()) return -1;
  const std::int64_t lo = begin + first_bad_chunk * kChunk, hi = std::min(begin + count, lo + kChunk);
  for (std::int64_t i = lo; i < hi; ++i)
    if (static_cast<std::int64_t>(tokens[i]) >= vocab) return i;
  return -1;
}

}  // namespace

void TokenFile::check_ids(std::int64_t vocab, std::int64_t begin, std::int64_t count) const {
  FT_CHECK(begin >= 0 && count >= 0 && begin + count <= size_, "check_ids: tokens [", begin, ", ", begin + count,
           ") are outside the file's ", size_);
  if (vocab > (id_bytes_ == 2 ? kUint16Ids : (std::int64_t{1} << 32))) return;  // every id of this width fits
  const std::int64_t bad =
      id_bytes_ == 2 ? first_bad_id(reinterpret_cast<const std::uint16_t*>(tokens_), vocab, begin, count)
                     : first_bad_id(reinterpret_cast<const std::uint32_t*>(tokens_), vocab, begin, count);
  FT_CHECK_KIND(io, bad < 0, "token file ", path(), ": token id ", bad >= 0 ? (*this)[bad] : 0, " at position ", bad,
                " is outside the vocabulary of ", vocab, " ids");
}

// ---- loader ------------------------------------------------------------------------------------------

DataLoader::DataLoader(const std::string& path, const DataLoaderOptions& options)
    : file_(path, options.vocab), options_(options), rng_(options.seed) {
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
      inputs[t] = static_cast<std::int32_t>(file_[start + t]);  // < vocab < 2^31 once checked
      targets[t] = static_cast<std::int32_t>(file_[start + t + 1]);
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
