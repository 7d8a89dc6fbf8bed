#pragma once
namespace d2k {
inline constexpr const char* kVersionString = "0.1.0";
}
