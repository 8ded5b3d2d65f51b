// dtype.h — element types flashtrain tensors hold (fp32, fp16, bf16), their sizes and names.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ft {

enum class DType { f32, f16, bf16 };

std::size_t size_of(DType dtype);
const char* name_of(DType dtype);  // "fp32", "fp16", "bf16"
// Accepts "fp32"/"float32"/"f32", "fp16"/"float16"/"f16"/"half", "bf16"/"bfloat16".
DType parse_dtype(std::string_view text);

}  // namespace ft
