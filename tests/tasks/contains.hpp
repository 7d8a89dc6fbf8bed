// Substring matcher under one name for Catch2 v2 (development machines) and v3 (GPU machine).
#pragma once
#include <string>

#include "catch.hpp"

#if __has_include(<catch2/catch_all.hpp>)
using Catch::Matchers::ContainsSubstring;
#else
inline Catch::Matchers::StdString::ContainsMatcher ContainsSubstring(const std::string& s) {
  return Catch::Matchers::Contains(s);
}
#endif
