// dtype.cpp — sizes, names and parsing of DType.
#include "core/dtype.h"

#include "core/error.h"

namespace ft {

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  FT_THROW(invalid_argument, "unknown dtype value ", static_cast<int>(dtype));
}

const char* name_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  return "unknown";
}

DType parse_dtype(std::string_view text) {
  if (text == "fp32" || text == "float32" || text == "f32") return DType::f32;
  if (text == "fp16" || text == "float16" || text == "f16" || text == "half") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  FT_THROW(invalid_argument, "unknown dtype '", text, "': expected one of fp32, fp16, bf16");
}

}  // namespace ft
