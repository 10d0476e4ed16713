/* core/platform.h - every platform and compiler condition the library
 * tests, spelled once (as Lua's luaconf.h does): the rest of the sources
 * use these names, never the compiler's own macros. These are compile-time
 * facts; what the CPU the program runs on can execute is asked at run
 * time, once, by kernels/cpu.c.
 *
 * One condition lives in a public header instead: the printf-format
 * attribute NB_PRINTF_LIKE(fmt, args) is in nabla/core.h, because a public
 * declaration (nb_ctx_fail) uses it and the installed headers cannot
 * include this file; the library and the tools use that one macro. */
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

/* NB_WASM_KERNELS: the WebAssembly SIMD128 kernels (kernels/sgemm_wasm.c)
 * are built, for a wasm build with -msimd128 (which every engine that runs
 * the wasm build has); no other build compiles them. */
#if defined(__wasm_simd128__)
#define NB_WASM_KERNELS 1
#else
#define NB_WASM_KERNELS 0
#endif

/* NB_FMAF(x, y, z): x * y + z rounded once (fmaf). WebAssembly has no
 * fused multiply-add, and musl's software fmaf there is slow enough to be a
 * third of a training step's time (exp's polynomial runs on it): the float
 * product is exact in double, so one double add and the rounding to float
 * give fmaf's value but for rare double-rounding ties (one ulp). */
#if defined(__wasm__)
#define NB_FMAF(x, y, z) ((float)((double)(x) * (double)(y) + (double)(z)))
#else
#define NB_FMAF(x, y, z) fmaf((x), (y), (z))
#endif

/* NB_ASAN: built under AddressSanitizer (clang says so with __has_feature,
 * gcc with __SANITIZE_ADDRESS__); the arena then poisons its free space
 * (core/context.c). NB_SANITIZED: under any sanitizer nabla's builds use
 * (address, thread, memory). */
#if defined(__SANITIZE_ADDRESS__)
#define NB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NB_ASAN 1
#endif
#endif
#ifndef NB_ASAN
#define NB_ASAN 0
#endif
#if NB_ASAN || defined(__SANITIZE_THREAD__)
#define NB_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define NB_SANITIZED 1
#endif
#endif
#ifndef NB_SANITIZED
#define NB_SANITIZED 0
#endif

/* NB_UNROLL(n) before a loop: unroll it n times. gcc needs it for the gemm
 * tiles' accumulators to live in registers (it does not unroll them by
 * itself at -O2); clang unrolls them unasked and reads "GCC unroll" as an
 * unknown pragma, so there it is empty. */
#define NB_PRAGMA(text) _Pragma(#text)
#if defined(__GNUC__) && !defined(__clang__)
#define NB_UNROLL(n) NB_PRAGMA(GCC unroll n)
#else
#define NB_UNROLL(n)
#endif

/* NB_CPU_RELAX(): the hint in a spin-wait loop that the thread is polling
 * (x86's pause: it yields the core to its hyperthread twin and saves the
 * pipeline flush when the awaited value arrives); nothing elsewhere. */
#if defined(__x86_64__) || defined(__i386__)
#define NB_CPU_RELAX() __builtin_ia32_pause()
#else
#define NB_CPU_RELAX() ((void)0)
#endif

/* NB_HUGE_PAGES: madvise(MADV_HUGEPAGE) exists (Linux), so the arena's big
 * chunks can ask for transparent huge pages (core/context.c, which defines
 * _DEFAULT_SOURCE for it). */
#if defined(__linux__)
#define NB_HUGE_PAGES 1
#else
#define NB_HUGE_PAGES 0
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
#if NB_X86_KERNELS && defined(__GLIBC__) && !NB_SANITIZED
#define NB_HOT __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define NB_HOT
#endif

#endif
