// error_of.h — the ft::Error a call throws, for tests that check an error's kind and message; a call that
// throws none fails the test (and yields an empty runtime error).
#pragma once

#include <gtest/gtest.h>

#include "core/error.h"

namespace ft::testing_util {

template <class Fn>
Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an ft::Error, none was thrown";
  return Error(ErrorKind::runtime, "", "", 0);
}

}  // namespace ft::testing_util
