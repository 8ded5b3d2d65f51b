// errors.cpp — the nanobind exception translator for ft::Error.
#include "errors.h"

#include <exception>
#include <string_view>

#include <nanobind/nanobind.h>

#include "core/error.h"

namespace nb = nanobind;

namespace ft::python {

namespace {

PyObject* python_type_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return PyExc_ValueError;
    case ErrorKind::unsupported: return PyExc_NotImplementedError;
    case ErrorKind::out_of_memory: return PyExc_MemoryError;
    case ErrorKind::device:
    case ErrorKind::io:
    case ErrorKind::runtime: return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

void translate(const std::exception_ptr& error, void*) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    // Messages quote file names and contents: bytes that are not UTF-8 become \xNN escapes rather than
    // a UnicodeDecodeError in place of the documented type.
    const std::string_view text = e.what();
    PyObject* message = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
    if (!message) return;  // the decoder's own error (out of memory) is already set
    PyErr_SetObject(python_type_of(e.kind()), message);
    Py_DECREF(message);
  }
}

}  // namespace

void register_error_translator() { nb::register_exception_translator(&translate); }

}  // namespace ft::python
