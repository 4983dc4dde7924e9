# Strata's everyday commands, wrapping the CMake presets (CMakePresets.json). Every target works
# from a fresh clone: it installs what is missing (scripts/setup), configures and builds first.
# JOBS sets the build and test parallelism (default 2: the reference machine has 2 cores).

JOBS ?= 2
# make fuzz: seconds of fuzzing per reader; make fuzz-ci: the same in CI (fuzz/README.md).
FUZZ_SECONDS ?= 60
FUZZ_CI_SECONDS ?= 20
STRATA := build/default/cli/strata
DEMO_TRACE := build/demo-trace.json
DEMO_ARGS := search --scenario scenarios/default.json --trace $(DEMO_TRACE)
CXX_SOURCES = $(shell find . -path ./build -prune -o -path './.*' -prune -o -type f \
                \( -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -print)

.DEFAULT_GOAL := help
.PHONY: help setup configure build demo test test-asan release bench gpu-bundle gpu-check fuzz \
        fuzz-ci format clean

help:
	@echo "Strata: plan, simulate and run distributed training of transformer models."
	@echo ""
	@echo "  make demo       build the strata program, then run 'strata $(DEMO_ARGS)'"
	@echo "  make test       build (preset default), run every test (ctest --preset default), then"
	@echo "                  make release and make fuzz-ci: what CI runs"
	@echo "  make test-asan  build with AddressSanitizer + UBSan (preset debug-asan) and run the tests"
	@echo "  make release    the Release build (-O3, warnings as errors; preset release, build/release)"
	@echo "  make bench      build, then run the benchmarks (bench/README.md)"
	@echo "  make gpu-bundle build, then bundle the CUDA tests, benchmark and CLI for a GPU machine"
	@echo "                  (build/gpu-bundle, at most 64 MiB; run build/gpu-bundle/gpu-check run there)"
	@echo "  make gpu-check  build, then run the standing GPU checks here (needs a GPU; results and"
	@echo "                  logs under bench/results, named by GPU; scripts/gpu-check)"
	@echo "  make fuzz       build the libFuzzer harnesses (preset fuzz) and fuzz every input reader"
	@echo "                  FUZZ_SECONDS=$(FUZZ_SECONDS) s each; fails on any finding (fuzz/README.md)"
	@echo "  make fuzz-ci    the same, replaying every corpus file first, $(FUZZ_CI_SECONDS) s per reader (CI)"
	@echo "  make build      install missing packages, configure and build (build/default)"
	@echo "  make setup      install the Debian packages the project needs (scripts/setup)"
	@echo "  make format     clang-format the C++ sources in place (.clang-format)"
	@echo "  make clean      remove build/default, build/debug-asan, build/release and build/fuzz"
	@echo ""
	@echo "JOBS=$(JOBS) sets the build and test parallelism."

setup:
	@scripts/setup

configure: setup
	cmake --preset default

build: configure
	cmake --build --preset default -j $(JOBS)

# The demo builds the strata program alone (not the tests, benchmarks or CUDA kernels) and says
# how long that took: the first build compiles every library the program links.
demo: configure
	@start=$$(date +%s); cmake --build --preset default -j $(JOBS) --target strata && \
	  echo "built $(STRATA) in $$(( $$(date +%s) - start )) s (a first build compiles every" \
	       "library it links, about 5 minutes on 2 cores; later builds only what changed)"
	$(STRATA) $(DEMO_ARGS)
	@echo ""
	@echo "make demo ran: $(STRATA) $(DEMO_ARGS)"
	@echo "(every plan of the default scenario's model and cluster, Llama 3 70B on 64 H100s with"
	@echo "512 sequences of 8192 tokens per step, ranked by simulated step time)"
	@echo "The best plan's step is in $(DEMO_TRACE): look at it with"
	@echo "  $(STRATA) view $(DEMO_TRACE)"
	@echo "(or --screenshot step.png without a display), or at https://ui.perfetto.dev; one lane"
	@echo "per pipeline stage's rank and stream (compute, tp-comm, dp-comm, pp-send, pp-recv, host, background)."

# Every test: the CTest suites, then the Release build users make (-O3, warnings as errors) and
# the fuzzing harnesses' corpus replay with a short fuzzing run (fuzz-ci). CI runs exactly this.
test: build
	ctest --preset default -j $(JOBS)
	$(MAKE) release
	$(MAKE) fuzz-ci

test-asan: setup
	cmake --preset debug-asan
	cmake --build --preset debug-asan -j $(JOBS)
	ctest --preset debug-asan -j $(JOBS)

release: setup
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

bench: build
	build/default/bench/strata_bench_plan
	build/default/bench/strata_bench_engine
	build/default/bench/strata_bench_simulate
	build/default/bench/strata_bench_reference_compare
	build/default/bench/strata_bench_nccl_compare
	build/default/bench/strata_bench_search
	build/default/bench/strata_bench_exec_cpu
	build/default/bench/strata_bench_exec_vs_sim
	build/default/bench/strata_bench_viewer
	@if [ -x build/default/bench/strata_bench_kernels ]; then \
	  echo build/default/bench/strata_bench_kernels; build/default/bench/strata_bench_kernels; \
	else echo "strata_bench_kernels: not built (no CUDA toolkit here), skipped"; fi

# The standing GPU checks (scripts/gpu-check, bench/README.md "GPU checks"): bundled here for a
# GPU machine, or run where the GPU is.
gpu-bundle: build
	scripts/gpu-check bundle build/gpu-bundle

gpu-check: build
	scripts/gpu-check run bench/results

fuzz: setup
	scripts/fuzz --seconds $(FUZZ_SECONDS) --jobs $(JOBS)

fuzz-ci: setup
	scripts/fuzz --replay --seconds $(FUZZ_CI_SECONDS) --jobs $(JOBS)

format:
	clang-format -i $(CXX_SOURCES)

clean:
	rm -rf build/default build/debug-asan build/release build/fuzz
