// safetensors.h — the safetensors file format (huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {str: str}}, then the data section that the offsets index. save_safetensors writes named tensors from
// any device atomically; SafetensorsFile maps a file, validates all of it and copies tensors out by name.
// Every problem with a file is an ft::Error of kind io naming the file and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/mapped_file.h"
#include "core/tensor.h"

namespace ft {

// A tensor with the name it is stored under (a state-dict key such as "layers.0.attn.q_proj.weight").
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// The header's "__metadata__": free-form string pairs.
using SafetensorsMetadata = std::map<std::string, std::string>;

// The element types the format names. F32, F16 and BF16 are ft::DTypes; the rest can be inspected and
// read as raw bytes (e.g. the integer buffers of an exported PyTorch state dict).
enum class SafetensorsDType { boolean, u8, i8, f8_e5m2, f8_e4m3, i16, u16, f16, bf16, i32, u32, f32, f64, i64, u64 };

const char* name_of(SafetensorsDType dtype);  // the header's spelling: "F32", "BF16", "I64", ...
std::size_t size_of(SafetensorsDType dtype);
std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view text);  // nullopt when unknown
SafetensorsDType safetensors_dtype(DType dtype);
std::optional<DType> ft_dtype(SafetensorsDType dtype);  // nullopt for types no ft::Tensor holds

// Writes tensors (any device, any strides; device tensors are staged through the host) and metadata to
// path. Atomic: a temporary file beside path is written, fsync'ed and renamed over it (then the folder is
// fsync'ed), so path holds either its old contents or the whole new file, and no temporary file remains
// after a failure. As the Python library does, the data is ordered by descending element size (the given
// order within one size) so every tensor starts aligned to its element size, and the header is padded
// with spaces to a multiple of 8 bytes. Names must be unique, non-empty and not "__metadata__".
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const SafetensorsMetadata& metadata = {});

// One tensor of a file. begin/end are byte offsets within the data section.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::f32;
  Shape shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  std::uint64_t bytes() const { return end - begin; }
  std::string describe() const;  // "F32[2, 3]"
};

// A validated safetensors file. The constructor checks the header length against the file size, that
// the header is JSON (an object, with unique names), every entry's dtype, shape and offsets, that each
// tensor's byte size matches its dtype and shape, and that the tensors cover the data section exactly
// (no overlap, no gap, nothing past its end, no trailing bytes).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const SafetensorsMetadata& metadata() const { return metadata_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in data order

  const SafetensorsEntry* find(std::string_view name) const;  // nullptr when absent
  const SafetensorsEntry& entry(std::string_view name) const;  // io error naming file and tensor when absent
  const std::uint8_t* bytes(const SafetensorsEntry& entry) const;  // entry.bytes() of them, possibly unaligned

  // dst <- the tensor `name` (dst on any device, any strides). io error when the tensor is absent or its
  // dtype or shape differ from dst's (both named).
  void read_into(std::string_view name, const Tensor& dst) const;
  // A new contiguous tensor on device holding the tensor `name` (F32, F16 or BF16 only).
  OwnedTensor load(std::string_view name, Device device = Device::cpu()) const;

 private:
  MappedFile file_;
  std::uint64_t data_start_ = 0;               // byte offset of the data section in the file
  SafetensorsMetadata metadata_;
  std::vector<SafetensorsEntry> entries_;      // sorted by begin
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in entries_
};

}  // namespace ft
