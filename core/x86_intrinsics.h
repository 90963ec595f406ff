// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// <immintrin.h> for the CPU kernels written with AVX-512 intrinsics in functions of their own
// target (core/cpu_binade_count.cpp, core/cpu_cast_compare.cpp), where the compiler is GCC or
// Clang on x86-64: MANTISSA_X86_INTRINSICS is defined there. Include it in those files only: the
// pragmas below hold for the rest of the file that includes it.

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MANTISSA_X86_INTRINSICS 1
#include <immintrin.h>
// GCC 12's intrinsics make their "undefined" vectors by self-initialization (`__m512i __Y = __Y`),
// which -Wuninitialized reports at every inlined use.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif
