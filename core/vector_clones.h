// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// MANTISSA_VECTOR_CLONES before a function compiles it three times (SSE2, AVX2, AVX-512), and
// the widest one the CPU runs is picked when the program starts. For the element loops of the
// fused CPU kernels: they use plain float and integer lanes, and core is compiled with
// -ffp-contract=off (the AVX-512 clone has FMA, and GCC would otherwise fuse a*b+c into one
// rounding), so every clone gives the same bits. Put it on a function that runs a whole range
// of elements or blocks: the dispatch is one indirect call.

// Not under ThreadSanitizer: the clones' resolvers (ifuncs) run while the program is being
// relocated, before TSan's runtime exists, and instrumented code there crashes at start-up.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MANTISSA_NO_VECTOR_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define MANTISSA_NO_VECTOR_CLONES 1
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__) && \
    (!defined(__clang__) || __clang_major__ >= 14) && !defined(MANTISSA_NO_VECTOR_CLONES)
#define MANTISSA_VECTOR_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
// For loops that need a fused multiply-add: GCC's "avx2" target has no FMA (std::fma would be
// a call per element there); Haswell, the first AVX2 core, has it.
#define MANTISSA_FMA_CLONES __attribute__((target_clones("default", "arch=haswell", "avx512f")))
#else
#define MANTISSA_VECTOR_CLONES
#define MANTISSA_FMA_CLONES
#endif
