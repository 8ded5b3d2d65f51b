// model_bindings.h — registers flashtrain._C.TransformerLM, the Transformer LM of src/model for inference
// from Python (model_bindings.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace ft::python {

void register_model_bindings(nanobind::module_& m);

}  // namespace ft::python
