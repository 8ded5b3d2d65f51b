// errors.h — how ft::Error reaches Python: one exception type per ErrorKind, the message unchanged.
#pragma once

namespace ft::python {

// ValueError (invalid_argument), NotImplementedError (unsupported), MemoryError (out_of_memory),
// RuntimeError (device, io, runtime). The message is the C++ one, "(file:line)" included, with any bytes
// that are not UTF-8 written as \xNN.
void register_error_translator();

}  // namespace ft::python
