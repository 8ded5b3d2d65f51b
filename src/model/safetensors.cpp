// safetensors.cpp — safetensors writing (atomic: temporary file, fsync, rename) and reading (memory map,
// full validation of header and offsets, copies into tensors on any device).
#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/safetensors_header.h"

namespace ft {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so must the host be");

namespace {

struct DTypeInfo {
  SafetensorsDType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::boolean, "BOOL", 1}, {SafetensorsDType::u8, "U8", 1},
    {SafetensorsDType::i8, "I8", 1},        {SafetensorsDType::f8_e5m2, "F8_E5M2", 1},
    {SafetensorsDType::f8_e4m3, "F8_E4M3", 1}, {SafetensorsDType::i16, "I16", 2},
    {SafetensorsDType::u16, "U16", 2},      {SafetensorsDType::f16, "F16", 2},
    {SafetensorsDType::bf16, "BF16", 2},    {SafetensorsDType::i32, "I32", 4},
    {SafetensorsDType::u32, "U32", 4},      {SafetensorsDType::f32, "F32", 4},
    {SafetensorsDType::f64, "F64", 8},      {SafetensorsDType::i64, "I64", 8},
    {SafetensorsDType::u64, "U64", 8},
};

const DTypeInfo& info_of(SafetensorsDType dtype) {
  for (const auto& info : kDTypes)
    if (info.dtype == dtype) return info;
  FT_THROW(invalid_argument, "unknown safetensors dtype ", static_cast<int>(dtype));
}

// Throws the io error for a corrupt file, "safetensors file PATH is corrupt: WHAT", at the caller's line.
#define FT_CORRUPT(path, ...) FT_THROW(io, "safetensors file ", path, " is corrupt: ", __VA_ARGS__)

}  // namespace

const char* name_of(SafetensorsDType dtype) { return info_of(dtype).name; }

std::size_t size_of(SafetensorsDType dtype) { return info_of(dtype).size; }

std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view text) {
  for (const auto& info : kDTypes)
    if (text == info.name) return info.dtype;
  return std::nullopt;
}

SafetensorsDType safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return SafetensorsDType::f32;
    case DType::f16: return SafetensorsDType::f16;
    case DType::bf16: return SafetensorsDType::bf16;
  }
  FT_THROW(invalid_argument, "unknown DType ", static_cast<int>(dtype));
}

std::optional<DType> ft_dtype(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::f32: return DType::f32;
    case SafetensorsDType::f16: return DType::f16;
    case SafetensorsDType::bf16: return DType::bf16;
    default: return std::nullopt;
  }
}

std::string SafetensorsEntry::describe() const { return std::string(name_of(dtype)) + shape_string(shape); }

// ---- writing ------------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const SafetensorsMetadata& metadata) {
  FT_CHECK_KIND(io, !path.empty(), "save_safetensors: the output path is empty");
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    FT_CHECK(!name.empty(), "save_safetensors ", path, ": a tensor has an empty name");
    FT_CHECK(name != "__metadata__", "save_safetensors ", path, ": \"__metadata__\" is reserved, not a tensor name");
    FT_CHECK(names.insert(name).second, "save_safetensors ", path, ": tensor name '", name, "' is given twice");
    FT_CHECK(tensor.defined(), "save_safetensors ", path, ": tensor '", name, "' is undefined");
  }

  std::vector<std::size_t> order(tensors.size());  // data order: descending element size, stable
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return tensors[a].tensor.element_size() > tensors[b].tensor.element_size();
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (std::size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    header[tensors[i].name] = {{"dtype", name_of(safetensors_dtype(t.dtype()))},
                               {"shape", t.shape()},
                               {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t header_bytes = text.size();

  AtomicFile file(path);
  file.write(&header_bytes, sizeof(header_bytes));
  file.write(text);
  for (std::size_t i : order) {
    const Tensor& t = tensors[i].tensor;
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
    if (t.device().is_cpu() && t.is_contiguous()) {
      file.write(t.data(), bytes);
    } else {
      OwnedTensor staging(t.shape(), t.dtype(), Device::cpu(), "safetensors staging");  // t's shape, contiguous
      copy(staging, t);
      file.write(staging->data(), bytes);
    }
  }
  file.commit();
}

// ---- reading -----------------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const std::uint64_t size = file_.size();
  if (size < 8) FT_CORRUPT(path, "the file is ", size, " bytes, shorter than the 8-byte header length");
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file_.data(), 8);
  if (header_bytes > size - 8)
    FT_CORRUPT(path, "the header length is ", header_bytes, " bytes but only ", size - 8, " bytes follow it");
  if (header_bytes > kMaxHeaderBytes)
    FT_CORRUPT(path, "the header length ", header_bytes, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  data_start_ = 8 + header_bytes;
  const std::uint64_t data_bytes = size - data_start_;
  const std::string_view text(reinterpret_cast<const char*>(file_.data() + 8), header_bytes);
  SafetensorsHeader header = parse_safetensors_header(text, data_bytes, path);
  metadata_ = std::move(header.metadata);
  entries_ = std::move(header.entries);

  // The tensors must tile the data section: sorted by offsets, each starts where the previous ended.
  std::sort(entries_.begin(), entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const auto& e = entries_[i];
    if (e.begin < covered)
      FT_CORRUPT(path, "tensor '", e.name, "' at bytes [", e.begin, ", ", e.end, ") overlaps tensor '",
              entries_[i - 1].name, "' at [", entries_[i - 1].begin, ", ", entries_[i - 1].end, ")");
    if (e.begin > covered)
      FT_CORRUPT(path, "bytes [", covered, ", ", e.begin, ") of the data section belong to no tensor (gap before '",
              e.name, "')");
    covered = e.end;
  }
  if (covered != data_bytes)
    FT_CORRUPT(path, "the tensors cover ", covered, " bytes but the data section holds ", data_bytes,
            " (trailing bytes, or a truncated header)");
  for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsFile::entry(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  FT_CHECK_KIND(io, e != nullptr, "safetensors file ", path(), " has no tensor '", name, "' (it holds ",
                entries_.size(), " tensors)");
  return *e;
}

const std::uint8_t* SafetensorsFile::bytes(const SafetensorsEntry& entry) const {
  return file_.data() + data_start_ + entry.begin;
}

void SafetensorsFile::read_into(std::string_view name, const Tensor& dst) const {
  FT_CHECK(dst.defined(), "read_into: the destination for '", name, "' is undefined");
  const SafetensorsEntry& e = entry(name);
  const std::optional<DType> dtype = ft_dtype(e.dtype);
  FT_CHECK_KIND(io, dtype && *dtype == dst.dtype() && e.shape == dst.shape(), "tensor '", name, "' in ", path(),
                " is ", e.describe(), " but the destination is ", dst.describe());
  if (e.bytes() == 0) return;
  // The mapped bytes may be unaligned for the element type: only byte copies touch them directly.
  const void* source = bytes(e);
  if (dst.is_contiguous()) {
    copy(dst, Tensor(const_cast<void*>(source), *dtype, Device::cpu(), e.shape));
    return;
  }
  OwnedTensor staging(e.shape, *dtype, Device::cpu(), "safetensors staging");  // e.shape, contiguous
  std::memcpy(staging->data(), source, e.bytes());
  copy(dst, staging);
}

OwnedTensor SafetensorsFile::load(std::string_view name, Device device) const {
  const SafetensorsEntry& e = entry(name);
  const std::optional<DType> dtype = ft_dtype(e.dtype);
  FT_CHECK_KIND(io, dtype.has_value(), "tensor '", name, "' in ", path(), " is ", e.describe(),
                ", which no flashtrain tensor holds (F32, F16 or BF16 expected)");
  OwnedTensor out(e.shape, *dtype, device, "safetensors load");  // e.shape, contiguous
  read_into(name, out);
  return out;
}

}  // namespace ft
