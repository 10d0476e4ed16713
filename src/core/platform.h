/* core/platform.h - every platform and compiler condition the library
 * tests, spelled once (as Lua's luaconf.h does): the rest of the sources
 * use these names, never the compiler's own macros. */
#ifndef NB_PLATFORM_H
#define NB_PLATFORM_H

/* Library-internal symbols: hidden from the shared library's exports. */
#if defined(__GNUC__)
#define NB_HIDDEN __attribute__((visibility("hidden")))
#else
#define NB_HIDDEN
#endif

/* NB_X86_KERNELS: the x86-64 SIMD kernels (AVX2 + FMA, AVX-512) are built,
 * with GCC or clang target attributes, and chosen at run time by
 * kernels/cpu.c. Off with -DNB_NO_AVX2 and on other targets, where the
 * portable kernels run. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(NB_NO_AVX2)
#define NB_X86_KERNELS 1
#else
#define NB_X86_KERNELS 0
#endif


/* NB_HOT marks the plain-C row loops that dominate a step outside the gemm
 * (layer_norm's rows and columns, the fused attention's tiles): the
 * compiler builds each twice, for x86-64 with AVX-512 (x86-64-v4) and for
 * the baseline, and the loader picks one for the CPU (an ifunc). Both
 * clones compute the same bits: the build has -ffp-contract=off (no fused
 * multiply-adds the source does not write) and no reassociation, so wider
 * vectors only do the same elementwise operations more at a time, and
 * every sum keeps the partial sums its source spells out. Off with
 * -DNB_NO_AVX2, off the x86-64 glibc targets, and under the sanitizers,
 * whose start-up runs after the loader resolves ifuncs. */
#if NB_X86_KERNELS && defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define NB_HOT_OFF 1
#endif
#endif
#ifndef NB_HOT_OFF
#define NB_HOT __attribute__((target_clones("arch=x86-64-v4", "default")))
#endif
#endif
#ifndef NB_HOT
#define NB_HOT
#endif

#endif
