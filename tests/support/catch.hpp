// Builds with Catch2 v2 (Debian 12, the development machines) and v3 (the H200 machine).
#pragma once
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
