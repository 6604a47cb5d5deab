# A friendly front to CMake.  `make help' lists the targets.

EMACS      ?= emacs
BUILD      ?= build
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# Warnings are errors in CI (which sets CI=true) and whenever WERROR=ON.
WERROR     ?= $(if $(CI),ON,OFF)
CMAKE_ARGS ?=
FUZZ_SECONDS ?= 60

# Debian packages the build and the tests need.
# ccache lets the package tests' module builds share their compiling.  The
# remote-file tests run an sshd of their own on loopback, on a "remote" host
# that has inotifywait, and fswatch for the tests of a host without it.
# The LSP tests run Debian's clangd under eglot (elpa-eglot on Debian 12;
# Emacs 30 has eglot built in, so its root goes without) and lsp-mode;
# xz-utils unpacks the Emacs source that Emacs's own eglot-tests.el comes from.
DEPS_PACKAGES := emacs-nox cmake g++ pkg-config libuv1-dev catch2 git elpa-magit mercurial ccache \
  openssh-server openssh-client inotify-tools fswatch clangd elpa-eglot elpa-lsp-mode xz-utils \
  rapidjson-dev

# The package manager `make deps' speaks to: apt-get where it exists (Debian,
# Ubuntu), else the first of these found.
PKG_MANAGER ?= $(firstword $(foreach manager,apt-get brew port pkg apk dnf pacman,\
  $(if $(shell command -v $(manager) 2>/dev/null),$(manager))))
# What the others call the build's and the tests' packages.  Magit, which
# the Magit tests load as Debian's elpa-magit installs it, is left out; the
# compiler is Xcode's on macOS and the base system's on FreeBSD.
DEPS_brew   := emacs cmake pkgconf libuv catch2 rapidjson git mercurial fswatch
DEPS_port   := emacs cmake pkgconfig libuv catch2 rapidjson git mercurial fswatch
DEPS_pkg    := emacs-nox cmake pkgconf libuv catch2 rapidjson git mercurial gmake
DEPS_apk    := emacs-nox cmake g++ make pkgconf libuv-dev catch2 rapidjson-dev git mercurial \
  openssh-server openssh-client inotify-tools
DEPS_dnf    := emacs-nox emacs-devel cmake gcc-c++ make pkgconf-pkg-config libuv-devel \
  catch2-devel rapidjson-devel git mercurial openssh-server openssh-clients inotify-tools
DEPS_pacman := emacs-nox cmake gcc make pkgconf libuv catch2 rapidjson git mercurial openssh inotify-tools
INSTALL_brew   := brew install
INSTALL_port   := port install
INSTALL_pkg    := pkg install -y
INSTALL_apk    := apk add
INSTALL_dnf    := dnf install -y
INSTALL_pacman := pacman -S --needed --noconfirm
# Where these systems put headers that the compiler may not search itself.
EXTRA_INCLUDES := -I/usr/local/include -I/opt/homebrew/include -I/opt/local/include
FUZZ_PACKAGES := clang libclang-rt-14-dev
# And the benchmarks: gnuplot for the plot.
BENCH_PACKAGES := gnuplot-nox
# Where `make bench' writes its plots (PNG), next to bench/RESULTS.md: seconds
# against files (the full run's checkout and burst series) and stock /
# fastrevert per process workload.
FASTREVERT_BENCH_PLOT ?= $(CURDIR)/bench/fastrevert-bench.png
FASTREVERT_BENCH_PROCESS_PLOT ?= $(CURDIR)/bench/fastrevert-bench-process.png

# The Emacs 30 suite runs in a Debian 13 (trixie) root made by debootstrap and
# kept in EMACS30_ROOT; it builds into a directory of its own, module and
# compiled Lisp included, so that it never loads this machine's build.
EMACS30_ROOT     ?= $(HOME)/.cache/fastrevert/trixie-root
EMACS30_BUILD    ?= build-emacs30
DEBIAN_MIRROR    ?= http://deb.debian.org/debian
EMACS30_PACKAGES := $(sort $(filter-out elpa-eglot,$(DEPS_PACKAGES)) make)
# Where the module and compiled Lisp go; empty means lisp/, next to the sources.
MODULE_DIR       ?=

# The portable build: every Linux-only facility left unused, as on macOS
# and the BSDs, in a build directory of its own with its own module.
PORTABLE_BUILD   ?= $(BUILD)-portable

# The cross builds: zig from npm and libuv from Debian's source package,
# kept in CROSS_CACHE; each target's build and module go to CROSS_BUILD.
CROSS_TARGETS    ?= aarch64-macos x86_64-macos x86_64-linux-musl x86_64-linux-gnu.2.28
CROSS_CACHE      ?= $(HOME)/.cache/fastrevert/cross
CROSS_BUILD      ?= $(BUILD)-cross
CROSS_PACKAGES   := npm dpkg-dev llvm

# `make package': fastrevert-VERSION.tar in PACKAGE_OUT (default: here), the
# tarball package-install-file takes, as a MELPA build makes it (the recipe
# in recipes/fastrevert names the same files): the Lisp at the top, the
# module's sources and CMake files beside it, nothing of test/ or bench/.
VERSION      := $(shell sed -n 's/^;; Version: *//p' lisp/fastrevert.el)
PACKAGE_OUT  ?= .
PACKAGE_NAME := fastrevert-$(VERSION)
PACKAGE_STAGE = $(BUILD)/package
# fastrevert-pkg.el, from the headers of fastrevert.el as package.el reads them,
# and saying, as Emacs 30 asks every file to, which binding it is written for.
PACKAGE_PKG_EL = $(PACKAGE_STAGE)/$(PACKAGE_NAME)/fastrevert-pkg.el
PACKAGE_DESCRIBE = (progn (with-temp-buffer (insert-file-contents "lisp/fastrevert.el") \
  (package-generate-description-file (package-buffer-info) "$(PACKAGE_PKG_EL)")) \
  (with-temp-file "$(PACKAGE_PKG_EL)" (insert-file-contents "$(PACKAGE_PKG_EL)") \
    (when (search-forward "-*- no-byte-compile: t -*-" (line-end-position) t) \
      (replace-match "-*- no-byte-compile: t; lexical-binding: nil -*-" t t))))

.PHONY: all build deps package deps-fuzz deps-root deps-bench deps-cross test test-emacs30 test-portable \
  test-portable-emacs30 cross bench bench-build bench-full bench-emacs30 bench-run bench-full-run \
  asan tsan asan-emacs fuzz lint stress clean help

all: build

help:
	@echo "make          build the module (into lisp/) and the native tests"
	@echo "make test     install missing dependencies, build, run every test (Catch2 + ERT)"
	@echo "make test-emacs30  the same in a Debian 13 root (Emacs 30, GCC 14, Catch2 3); as root"
	@echo "make test-portable  the whole suite against the portable build (no Linux-only call)"
	@echo "make test-portable-emacs30  the same in the Debian 13 root; as root"
	@echo "make cross    compile and link the module for macOS, musl and glibc 2.28 with zig"
	@echo "make bench    build in Release mode and print the headline benchmark tables (minutes)"
	@echo "make bench-full  the same with every section: scale, memory, details (half an hour)"
	@echo "make bench-emacs30  make bench in the Debian 13 root (Emacs 30); as root"
	@echo "make asan     run the native tests under AddressSanitizer + UBSan"
	@echo "make tsan     run the native tests under ThreadSanitizer"
	@echo "make asan-emacs  run the ERT tests in Emacs with the module under ASan + UBSan"
	@echo "make fuzz     fuzz the LSP framer for FUZZ_SECONDS (default 60) seconds"
	@echo "make stress TESTS=\"call-process vc\" N=20  run those test files N times under load"
	@echo "make lint     byte-compile the Lisp with warnings as errors and run checkdoc"
	@echo "make package  write fastrevert-VERSION.tar, for M-x package-install-file"
	@echo "make clean    remove build directories and the built module"

# Checks for every dependency; installs what is missing when run as root,
# otherwise prints the exact command and stops.
define install_missing
	@missing=""; \
	for need in $(1); do \
	  case $$need in \
	    emacs-nox)   command -v $(EMACS) >/dev/null 2>&1 && echo '#include <emacs-module.h>' | cpp -x c - >/dev/null 2>&1 || missing="$$missing emacs-nox" ;; \
	    cmake)       command -v cmake >/dev/null 2>&1 || missing="$$missing cmake" ;; \
	    g++)         command -v g++ >/dev/null 2>&1 || missing="$$missing g++" ;; \
	    pkg-config)  command -v pkg-config >/dev/null 2>&1 || missing="$$missing pkg-config" ;; \
	    libuv1-dev)  pkg-config --exists libuv 2>/dev/null || missing="$$missing libuv1-dev" ;; \
	    catch2)      test -f /usr/include/catch2/catch.hpp || \
	                 test -f /usr/include/catch2/catch_test_macros.hpp || missing="$$missing catch2" ;; \
	    clang)       command -v clang++ >/dev/null 2>&1 || missing="$$missing clang" ;; \
	    git)         command -v git >/dev/null 2>&1 || missing="$$missing git" ;; \
	    mercurial)   command -v hg >/dev/null 2>&1 || missing="$$missing mercurial" ;; \
	    ccache)      command -v ccache >/dev/null 2>&1 || missing="$$missing ccache" ;; \
	    gnuplot-nox) command -v gnuplot >/dev/null 2>&1 || missing="$$missing gnuplot-nox" ;; \
	    npm)         command -v npm >/dev/null 2>&1 || missing="$$missing npm" ;; \
	    dpkg-dev)    command -v dpkg-source >/dev/null 2>&1 || missing="$$missing dpkg-dev" ;; \
	    llvm)        command -v llvm-nm >/dev/null 2>&1 || missing="$$missing llvm" ;; \
	    *)           dpkg-query -W -f='$${Status}' $$need 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$need" ;; \
	  esac; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "Installing:$$missing"; \
	    apt-get update -q && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing || \
	      exit 1; \
	  else \
	    echo "Missing Debian packages:$$missing"; \
	    echo "Install them with:  sudo apt-get update &&" \
	         "sudo apt-get install -y --no-install-recommends$$missing"; \
	    exit 1; \
	  fi; \
	fi
endef

# The same checks off Debian: when anything is missing, the whole list for
# the package manager found is installed (each skips what is installed), as
# root; Homebrew, which refuses root, as the user.  Otherwise it prints the
# exact command and stops.
define install_elsewhere
	@missing=""; \
	command -v $(EMACS) >/dev/null 2>&1 || missing="$$missing emacs"; \
	echo '#include <emacs-module.h>' | c++ -E -x c++ $(EXTRA_INCLUDES) - >/dev/null 2>&1 || \
	  missing="$$missing emacs-module.h"; \
	command -v cmake >/dev/null 2>&1 || missing="$$missing cmake"; \
	command -v c++ >/dev/null 2>&1 || missing="$$missing c++"; \
	command -v pkg-config >/dev/null 2>&1 || missing="$$missing pkg-config"; \
	pkg-config --exists libuv 2>/dev/null || missing="$$missing libuv"; \
	{ echo '#include <catch2/catch.hpp>' | c++ -E -x c++ $(EXTRA_INCLUDES) - || \
	  echo '#include <catch2/catch_test_macros.hpp>' | c++ -E -x c++ $(EXTRA_INCLUDES) -; } \
	  >/dev/null 2>&1 || missing="$$missing catch2"; \
	command -v git >/dev/null 2>&1 || missing="$$missing git"; \
	command -v hg >/dev/null 2>&1 || missing="$$missing mercurial"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "Missing:$$missing"; \
	case "$(PKG_MANAGER)" in \
	  brew) command="$(INSTALL_brew) $(DEPS_brew)" ;; \
	  port) command="$(INSTALL_port) $(DEPS_port)" ;; \
	  pkg) command="$(INSTALL_pkg) $(DEPS_pkg)" ;; \
	  apk) command="$(INSTALL_apk) $(DEPS_apk)" ;; \
	  dnf) command="$(INSTALL_dnf) $(DEPS_dnf)" ;; \
	  pacman) command="$(INSTALL_pacman) $(DEPS_pacman)" ;; \
	  *) echo "No package manager that fastrevert knows was found: install these by hand" \
	          "(see README.md)"; exit 1 ;; \
	esac; \
	if [ "$(PKG_MANAGER)" = brew ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "Installing: $$command"; $$command || exit 1; \
	  else echo "Homebrew refuses root; as yourself, run:  $$command"; exit 1; fi; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "Installing: $$command"; $$command || exit 1; \
	else \
	  echo "Install them with:  sudo $$command"; exit 1; \
	fi
endef

deps:
ifeq ($(PKG_MANAGER),apt-get)
	$(call install_missing,$(DEPS_PACKAGES))
else
	$(install_elsewhere)
endif

deps-fuzz:
	$(call install_missing,$(FUZZ_PACKAGES))

deps-bench:
	$(call install_missing,$(BENCH_PACKAGES))

deps-root:
	$(call install_missing,debootstrap)

deps-cross:
	$(call install_missing,$(CROSS_PACKAGES))

CONFIGURE_ARGS = -DFASTREVERT_WERROR=$(WERROR) \
  $(if $(MODULE_DIR),-DFASTREVERT_MODULE_DIR=$(abspath $(MODULE_DIR))) $(CMAKE_ARGS)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CONFIGURE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) $(CONFIGURE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite again, on Debian 13: `make test' inside the root, with the
# build, module and compiled Lisp in EMACS30_BUILD.
test-emacs30: deps-root
	test/debian-root.sh $(EMACS30_ROOT) trixie $(DEBIAN_MIRROR) "$(EMACS30_PACKAGES)" $(CURDIR) -- \
	  make test BUILD=$(EMACS30_BUILD) MODULE_DIR=$(CURDIR)/$(EMACS30_BUILD)/lisp \
	    WERROR=$(WERROR) JOBS=$(JOBS)

# The whole suite, Catch2 and ERT, against the portable build: every
# Linux-only facility left unused, as macOS and the BSDs have them, so that
# their code runs here.
test-portable:
	$(MAKE) test BUILD=$(PORTABLE_BUILD) MODULE_DIR=$(CURDIR)/$(PORTABLE_BUILD)/lisp \
	  CMAKE_ARGS="$(CMAKE_ARGS) -DFASTREVERT_PORTABLE=ON"

# And in the Debian 13 root, into EMACS30_BUILD-portable.
test-portable-emacs30: deps-root
	test/debian-root.sh $(EMACS30_ROOT) trixie $(DEBIAN_MIRROR) "$(EMACS30_PACKAGES)" $(CURDIR) -- \
	  make test-portable BUILD=$(EMACS30_BUILD) WERROR=$(WERROR) JOBS=$(JOBS)

# The module compiled and linked for macOS (arm64 and x86_64), musl and
# glibc 2.28 (see test/cross.sh).
cross: deps deps-cross
	JOBS=$(JOBS) test/cross.sh $(CROSS_CACHE) $(DEBIAN_MIRROR) $(CURDIR) $(CROSS_BUILD) \
	  $(CROSS_TARGETS)

# `make bench' prints the headline tables (idle tick, burst, checkout at the
# smallest size, the workload table) in a few minutes; `make bench-full' adds
# the scale, memory and detail sections.  Sections register themselves on
# `fastrevert-bench-sections' or `fastrevert-bench-full-sections' (bench/README.md).
BENCH_LISP = $(if $(MODULE_DIR),$(abspath $(MODULE_DIR)),lisp)
BENCH_ENV = FASTREVERT_CBASELINE=$(CURDIR)/$(BUILD)-release/cbaseline \
  FASTREVERT_BENCH_PLOT=$(FASTREVERT_BENCH_PLOT) \
  FASTREVERT_BENCH_PROCESS_PLOT=$(FASTREVERT_BENCH_PROCESS_PLOT)
BENCH_EMACS = $(EMACS) -Q --batch -L $(BENCH_LISP) -L bench -l bench/fastrevert-bench.el

bench-build: deps
	cmake -S . -B $(BUILD)-release -DCMAKE_BUILD_TYPE=Release -DFASTREVERT_BUILD_TESTS=OFF \
	  $(if $(MODULE_DIR),-DFASTREVERT_MODULE_DIR=$(abspath $(MODULE_DIR)))
	cmake --build $(BUILD)-release -j $(JOBS) --target fastrevert-module fastrevert-lisp
	cc -O2 -Wall -Wextra -o $(BUILD)-release/cbaseline bench/cbaseline.c

bench: bench-build deps-bench
	$(BENCH_ENV) $(BENCH_EMACS) -f fastrevert-bench-run

bench-full: bench-build deps-bench
	$(BENCH_ENV) $(BENCH_EMACS) -f fastrevert-bench-run-full

# The benchmarks again on Debian 13 (Emacs 30), in the root `make test-emacs30'
# uses, built into EMACS30_BUILD; no plot (the root has no gnuplot).
# BENCH_TARGET=bench-full runs them all.
BENCH_TARGET ?= bench
bench-emacs30: deps-root
	test/debian-root.sh $(EMACS30_ROOT) trixie $(DEBIAN_MIRROR) "$(EMACS30_PACKAGES)" $(CURDIR) -- \
	  make bench-build $(BENCH_TARGET)-run BUILD=$(EMACS30_BUILD) \
	    MODULE_DIR=$(CURDIR)/$(EMACS30_BUILD)-release/lisp JOBS=$(JOBS) \
	    FASTREVERT_BENCH_PLOT= FASTREVERT_BENCH_PROCESS_PLOT=

# The runs alone, for a build already made (as inside the Debian 13 root).
bench-run:
	$(BENCH_ENV) $(BENCH_EMACS) -f fastrevert-bench-run
bench-full-run:
	$(BENCH_ENV) $(BENCH_EMACS) -f fastrevert-bench-run-full

# The sanitizer builds leave the module alone (it is loaded into an
# uninstrumented Emacs) and run the native tests.
asan tsan: SANITIZER = $(if $(filter asan,$@),address$(comma)undefined,thread)
asan tsan: deps
	cmake -S . -B $(BUILD)-$@ -DCMAKE_BUILD_TYPE=Debug -DFASTREVERT_BUILD_MODULE=OFF \
	  -DFASTREVERT_WERROR=$(WERROR) -DFASTREVERT_SANITIZE=$(SANITIZER)
	cmake --build $(BUILD)-$@ -j $(JOBS)
	cd $(BUILD)-$@ && ctest --output-on-failure -j $(JOBS)

comma := ,

# The module built with AddressSanitizer and UBSan, loaded into an ordinary
# Emacs whose start preloads the ASan runtime, runs the ERT tests.  Emacs's
# garbage collector scans its whole stack, red zones included, with memcpy:
# replace_intrin=0 keeps ASan's memcpy checks out of that.  Emacs does not
# free what it holds at exit, so leak detection is off, and a huge request
# returns null for Emacs to report as `memory-full', as it does without ASan.
# The tests hand the preload on to the Emacsen they start, not to other
# programs (see test/lisp/fastrevert-test-helpers.el).  The lint test is left
# to `make lint': it compiles natively, and libgccjit deadlocks in gettext's
# lock under the preloaded runtime.  The package tests are left to `make test'
# too: they build and load a module of their own, without the sanitizer, and
# their Emacsen compile natively (a trampoline for an advised `message'), which
# deadlocks the same way.
ASAN_RUNTIME = $(shell $(CXX) -print-file-name=libasan.so)
ASAN_EMACS_ENV = LD_PRELOAD=$(ASAN_RUNTIME) \
  ASAN_OPTIONS=replace_intrin=0:detect_leaks=0:detect_stack_use_after_return=0:$\
allocator_may_return_null=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
asan-emacs: deps
	cmake -S . -B $(BUILD)-asan-emacs -DCMAKE_BUILD_TYPE=Debug -DFASTREVERT_WERROR=$(WERROR) \
	  -DFASTREVERT_SANITIZE=address$(comma)undefined \
	  -DFASTREVERT_MODULE_DIR=$(CURDIR)/$(BUILD)-asan-emacs/lisp -DFASTREVERT_ERT_TIMEOUT=3600 \
	  $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan-emacs -j $(JOBS) --target fastrevert-module fastrevert-test-writer
	$(ASAN_EMACS_ENV) cmake --build $(BUILD)-asan-emacs --target fastrevert-lisp
	cd $(BUILD)-asan-emacs && $(ASAN_EMACS_ENV) \
	  ctest --output-on-failure -j $(JOBS) -R '^ert\.' -E '^ert\.fastrevert-(lint|package.*)-test$$' \
	    $(CTEST_ARGS)

# The framer includes the platform header that CMake generates.
fuzz: deps deps-fuzz $(BUILD)/CMakeCache.txt
	mkdir -p $(BUILD)-fuzz/corpus
	clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  -D_GNU_SOURCE -Wall -Wextra -Werror -Imodule -I$(BUILD)/module/generated \
	  test/fuzz/lsp_framer_fuzz.cpp module/core/framing.cpp -o $(BUILD)-fuzz/lsp_framer_fuzz
	$(BUILD)-fuzz/lsp_framer_fuzz -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	  -artifact_prefix=$(BUILD)-fuzz/ $(BUILD)-fuzz/corpus

# Chosen tests run N times each beside BUSY busy loops; each failure is
# reported with its seed and log (test/stress.sh).
TESTS ?=
N     ?= 20
BUSY  ?= 2
stress: build
	test/stress.sh $(BUILD) $(N) $(BUSY) "$(TESTS)"

package:
	rm -rf $(PACKAGE_STAGE)
	mkdir -p $(PACKAGE_STAGE)/$(PACKAGE_NAME)
	cp lisp/*.el CMakeLists.txt $(PACKAGE_STAGE)/$(PACKAGE_NAME)/
	cp -R cmake module $(PACKAGE_STAGE)/$(PACKAGE_NAME)/
	$(EMACS) -Q --batch -l package --eval '$(PACKAGE_DESCRIBE)'
	mkdir -p $(PACKAGE_OUT)
	tar -cf $(PACKAGE_OUT)/$(PACKAGE_NAME).tar -C $(PACKAGE_STAGE) $(PACKAGE_NAME)
	@echo "Wrote $(PACKAGE_OUT)/$(PACKAGE_NAME).tar"

lint: deps
	$(EMACS) -Q --batch -L lisp -L test/lisp --eval '(setq load-prefer-newer t)' \
	  -l ert -l test/lisp/fastrevert-lint-test.el -f ert-run-tests-batch-and-exit

clean:
	rm -rf $(BUILD) $(BUILD)-release $(BUILD)-asan $(BUILD)-tsan $(BUILD)-asan-emacs $(BUILD)-fuzz \
	  $(EMACS30_BUILD) $(EMACS30_BUILD)-release $(PORTABLE_BUILD) $(EMACS30_BUILD)-portable \
	  $(CROSS_BUILD)
	rm -rf build-module
	rm -f lisp/fastrevert-module*.so lisp/fastrevert-module*.dylib lisp/*.elc bench/*.elc \
	  test/lisp/*.elc fastrevert-*.tar
