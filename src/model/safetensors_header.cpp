// safetensors_header.cpp — the SAX handler that turns a safetensors header into entries and metadata
// (see Note [Safetensors header limits]): a stack of the open containers, each knowing what it holds.
#include "model/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/printable.h"

namespace ft {

// Throws the io error for a corrupt file, "safetensors file PATH is corrupt: WHAT", at the caller's line.
#define FT_CORRUPT(path, ...) FT_THROW(io, "safetensors file ", path, " is corrupt: ", __VA_ARGS__)

namespace {

using json = nlohmann::json;

// What an open container holds.
enum class Frame { root, metadata, entry, shape, offsets, skipped };

// The field of an entry whose value comes next.
enum class Field { dtype, shape, data_offsets, other };

class HeaderHandler {
 public:
  HeaderHandler(std::uint64_t data_bytes, const std::string& path) : data_bytes_(data_bytes), path_(path) {}

  // The header, once the parse has succeeded: io error when a tensor name is given twice (found by sorting,
  // which is faster than hashing each name as it comes).
  SafetensorsHeader take() {
    std::vector<std::string_view> names;
    names.reserve(header_.entries.size());
    for (const auto& entry : header_.entries) names.push_back(entry.name);
    std::sort(names.begin(), names.end());
    const auto twice = std::adjacent_find(names.begin(), names.end());
    if (twice != names.end()) FT_CORRUPT(path_, "the header names '", printable_excerpt(*twice), "' twice");
    return std::move(header_);
  }

  bool null() { return scalar({.text = "null"}); }
  bool boolean(bool value) { return scalar({.text = value ? "true" : "false"}); }
  bool number_integer(json::number_integer_t value) {
    if (value >= 0) return number_unsigned(static_cast<std::uint64_t>(value));
    return scalar({.negative = value});
  }
  bool number_unsigned(json::number_unsigned_t value) { return scalar({.unsigned_value = value}); }
  bool number_float(json::number_float_t, const json::string_t& text) { return scalar({.text = text}); }
  bool binary(json::binary_t&) { return scalar({.text = "binary"}); }

  bool string(json::string_t& value) {
    if (!stack_.empty() && stack_.back() == Frame::metadata) {
      header_.metadata[metadata_key_] = value;
      return true;
    }
    if (!stack_.empty() && stack_.back() == Frame::entry && field_ == Field::dtype) {
      const auto parsed = parse_safetensors_dtype(value);
      if (!parsed) FT_CORRUPT(path_, where(), ": unknown dtype \"", printable_excerpt(value), "\" (expected one of ", dtype_list(), ")");
      entry_.dtype = *parsed;
      return true;
    }
    return scalar({.text = value, .quoted = true});
  }

  bool start_object(std::size_t) {
    if (stack_.empty()) return open(Frame::root);
    switch (stack_.back()) {
      case Frame::root:
        if (name_ == "__metadata__") return open(Frame::metadata);
        entry_ = SafetensorsEntry{};
        entry_.name = name_;
        fields_ = 0;
        return open(Frame::entry);
      case Frame::entry:
        if (field_ == Field::other) return open(Frame::skipped);
        return wrong("an object");
      case Frame::skipped: return open(Frame::skipped);
      default: return wrong("an object");
    }
  }

  bool start_array(std::size_t) {
    if (stack_.empty()) FT_CORRUPT(path_, "the header is a JSON array, expected an object");
    switch (stack_.back()) {
      case Frame::entry:
        if (field_ == Field::shape) return open(Frame::shape);
        if (field_ == Field::data_offsets) return open(Frame::offsets);
        if (field_ == Field::other) return open(Frame::skipped);
        return wrong("an array");
      case Frame::skipped: return open(Frame::skipped);
      default: return wrong("an array");
    }
  }

  bool key(json::string_t& key) {
    switch (stack_.back()) {
      case Frame::root:
        if (key == "__metadata__") {
          if (metadata_seen_) FT_CORRUPT(path_, "the header names '__metadata__' twice");
          metadata_seen_ = true;
        }
        name_ = std::move(key);  // tensor names given twice are found once all are read (see take)
        return true;
      case Frame::metadata:
        if (header_.metadata.count(key))
          FT_CORRUPT(path_, "__metadata__ names '", printable_excerpt(key), "' twice");
        metadata_key_ = key;
        return true;
      case Frame::entry: {
        field_ = key == "dtype" ? Field::dtype : key == "shape" ? Field::shape
               : key == "data_offsets" ? Field::data_offsets : Field::other;
        if (field_ == Field::other) return true;
        const unsigned bit = 1u << static_cast<unsigned>(field_);
        if (fields_ & bit) FT_CORRUPT(path_, where(), " names \"", key, "\" twice");
        fields_ |= bit;
        return true;
      }
      default: return true;  // skipped
    }
  }

  bool end_object() {
    const Frame closed = stack_.back();
    stack_.pop_back();
    if (closed == Frame::entry) finish_entry();
    return true;
  }

  bool end_array() {
    const Frame closed = stack_.back();
    stack_.pop_back();
    if (closed == Frame::offsets && offsets_.size() != 2)
      FT_CORRUPT(path_, where(), ": data_offsets is ", list_text(offsets_), ", expected [begin, end]");
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& error) {
    FT_CORRUPT(path_, "the ", header_bytes_, "-byte header is not valid JSON (at byte ", position, "): ",
               printable_excerpt(error.what(), 300));
  }

  void set_header_bytes(std::uint64_t bytes) { header_bytes_ = bytes; }

 private:
  bool open(Frame frame) {
    if (stack_.size() >= static_cast<std::size_t>(kMaxHeaderDepth))
      FT_CORRUPT(path_, "the header nests deeper than ", kMaxHeaderDepth, " levels");
    stack_.push_back(frame);
    if (frame == Frame::shape) shape_dims_.clear();
    if (frame == Frame::offsets) offsets_.clear();
    return true;
  }

  std::string where() const { return "tensor '" + printable_excerpt(entry_.name) + "'"; }

  static std::string dtype_list() {
    std::string names;
    for (auto d = 0; d <= static_cast<int>(SafetensorsDType::u64); ++d)
      names += std::string(names.empty() ? "" : ", ") + name_of(static_cast<SafetensorsDType>(d));
    return names;
  }

  static std::string list_text(const std::vector<std::uint64_t>& values) {
    std::string text = "[";
    for (std::size_t i = 0; i < values.size(); ++i) text += (i ? "," : "") + std::to_string(values[i]);
    return text + "]";
  }

  // A value that is not a container, rendered only for a message.
  struct Scalar {
    std::optional<std::uint64_t> unsigned_value;
    std::optional<std::int64_t> negative;
    std::string_view text;  // null, true, false, a float's spelling, a string's contents
    bool quoted = false;    // a string

    std::string render() const {
      if (unsigned_value) return std::to_string(*unsigned_value);
      if (negative) return std::to_string(*negative);
      return quoted ? "\"" + printable_excerpt(text) + "\"" : printable_excerpt(text);
    }
  };

  bool scalar(const Scalar& value) {
    const std::optional<std::uint64_t>& unsigned_value = value.unsigned_value;
    if (stack_.empty()) FT_CORRUPT(path_, "the header is the JSON value ", value.render(), ", expected an object");
    switch (stack_.back()) {
      case Frame::shape:
        if (!unsigned_value)
          FT_CORRUPT(path_, where(), " shape dimension is ", value.render(), ", expected a non-negative integer");
        shape_dims_.push_back(*unsigned_value);
        return true;
      case Frame::offsets:
        if (!unsigned_value)
          FT_CORRUPT(path_, where(), " data_offsets ", offsets_.empty() ? "begin" : "end", " is ", value.render(),
                     ", expected a non-negative integer");
        offsets_.push_back(*unsigned_value);
        if (offsets_.size() > 2) FT_CORRUPT(path_, where(), ": data_offsets has more than 2 values, expected [begin, end]");
        return true;
      case Frame::skipped: return true;
      case Frame::entry:
        if (field_ == Field::other) return true;
        return wrong(value.render());
      default: return wrong(value.render());
    }
  }

  // `what` (a rendered value or "an object"/"an array") where the open frame wants something else.
  bool wrong(const std::string& what) {
    switch (stack_.back()) {
      case Frame::root:
        if (name_ == "__metadata__") FT_CORRUPT(path_, "__metadata__ is ", what, ", expected an object of strings");
        FT_CORRUPT(path_, "tensor '", printable_excerpt(name_), "' is ", what, ", expected an object");
      case Frame::metadata:
        FT_CORRUPT(path_, "__metadata__ entry '", printable_excerpt(metadata_key_), "' is ", what, ", expected a string");
      case Frame::entry:
        if (field_ == Field::dtype) FT_CORRUPT(path_, where(), ": dtype is ", what, ", expected a string");
        if (field_ == Field::shape) FT_CORRUPT(path_, where(), ": shape is ", what, ", expected an array");
        FT_CORRUPT(path_, where(), ": data_offsets is ", what, ", expected [begin, end]");
      case Frame::shape:
        FT_CORRUPT(path_, where(), " shape dimension is ", what, ", expected a non-negative integer");
      case Frame::offsets:
        FT_CORRUPT(path_, where(), " data_offsets value is ", what, ", expected a non-negative integer");
      case Frame::skipped: return true;
    }
    return true;
  }

  void finish_entry() {
    for (const auto& [field, key] : {std::pair{Field::dtype, "dtype"}, std::pair{Field::shape, "shape"},
                                     std::pair{Field::data_offsets, "data_offsets"}})
      if (!(fields_ & (1u << static_cast<unsigned>(field)))) FT_CORRUPT(path_, where(), " has no \"", key, "\"");
    std::uint64_t bytes = size_of(entry_.dtype);
    bool overflow = false;
    entry_.shape.clear();
    for (const std::uint64_t size : shape_dims_) {
      if (size > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) overflow = true;
      else if (size != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / size) overflow = true;
      else bytes *= size;
      entry_.shape.push_back(static_cast<std::int64_t>(size));
    }
    if (overflow) FT_CORRUPT(path_, where(), ": shape ", list_text(shape_dims_), " overflows the byte count");
    entry_.begin = offsets_[0];
    entry_.end = offsets_[1];
    if (entry_.begin > entry_.end)
      FT_CORRUPT(path_, where(), ": data_offsets ", list_text(offsets_), " end before they begin");
    if (entry_.end > data_bytes_)
      FT_CORRUPT(path_, where(), ": data_offsets ", list_text(offsets_), " are out of range: the data section holds ",
                 data_bytes_, " bytes");
    if (entry_.bytes() != bytes)
      FT_CORRUPT(path_, where(), ": ", entry_.describe(), " is ", bytes, " bytes but data_offsets ",
                 list_text(offsets_), " span ", entry_.bytes());
    header_.entries.push_back(std::move(entry_));
  }

  std::uint64_t data_bytes_;
  const std::string& path_;
  std::uint64_t header_bytes_ = 0;
  SafetensorsHeader header_;
  std::vector<Frame> stack_;            // the open containers, outermost first
  bool metadata_seen_ = false;
  std::string name_;                    // the top-level key whose value comes next
  std::string metadata_key_;            // the __metadata__ key whose value comes next
  SafetensorsEntry entry_;              // the entry being read
  Field field_ = Field::other;          // its field whose value comes next
  unsigned fields_ = 0;                 // bit per Field seen in this entry
  std::vector<std::uint64_t> shape_dims_, offsets_;
};

}  // namespace

SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_bytes, const std::string& path) {
  if (text.size() > kMaxHeaderBytes)
    FT_CORRUPT(path, "the header length ", text.size(), " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  if (text.starts_with("\xEF\xBB\xBF"))
    FT_CORRUPT(path, "the header starts with a UTF-8 byte-order mark, which the format does not allow");
  HeaderHandler handler(data_bytes, path);
  handler.set_header_bytes(text.size());
  json::sax_parse(text.begin(), text.end(), &handler, json::input_format_t::json, /*strict=*/true);
  return handler.take();
}

}  // namespace ft
