// The message of the dpt::Error a piece of code throws, for tests that check what an
// error says, not only that there is one.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace dpt::testing {

// Returns e.what() of the dpt::Error that `f` throws; "" and a test failure if none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a dpt::Error";
  return "";
}

}  // namespace dpt::testing
