# Convenience targets; the scripts in scripts/ do the work.
.PHONY: build test test-asan test-tsan soak fuzz bench bench-micro run clean screenshots

build:
	./scripts/build.sh

test:
	./scripts/test.sh

# ASan + UBSan build of everything, then the whole suite against it.
test-asan:
	BUILD_DIR=build-asan KAYAK_SANITIZE=address ./scripts/test.sh

# TSan build of everything, then the whole suite against it.
test-tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp" \
	  BUILD_DIR=build-tsan KAYAK_SANITIZE=thread ./scripts/test.sh

# Hundreds of kill points against the batch oracle; prints one summary line.
soak: build
	KAYAK_BIN=$(CURDIR)/build/kayak KAYAK_FAULTSHIM=$(CURDIR)/build/tests/faultshim.so \
	  KAYAK_KAFKATOOL=$(CURDIR)/build/tests/kafkatool \
	  python3 tests/crash/crash_suite.py --kills 460 --messages 60000 --crash-states 12 \
	  --kafka-kills 40 --http-kills 20 -v

# The libFuzzer targets for five minutes each: the http input's request path,
# the opcua input's decoder and the config reader (tests/CMakeLists.txt).
fuzz: build
	for run in build/tests/*_fuzz.run; do sh $$run 300 || exit 1; done

# Every benchmark (micro, pipelines next to the fwrite ceiling, checkpoints,
# memory, http next to nginx, kafka next to kcat), one table at the end;
# about 7 minutes on 2 cores; then the database connectors next to psql's
# \copy and clickhouse-client (about 4 minutes), the brokers, s3, and opcua
# next to node-opcua's own client (about 2 minutes).
bench: build
	./scripts/install-deps.sh --bench
	python3 -u bench/pipelines.py --with-micro --with-http --with-kafka
	python3 -u bench/state_interval.py
	cmake build >/dev/null && cmake --build build -j2 --target state_backends
	build/tests/state_backends --keys 1000000 --rounds 3
	python3 -u bench/databases.py
	python3 -u bench/brokers.py
	python3 -u bench/s3.py
	python3 -u bench/opcua_ingest.py
	cmake --build build -j2 --target io_uring_answers && build/tests/io_uring_answers
	./bench/http_threads.sh 5 64

# Per-message costs (bench/micro): medians of 5 repetitions.
bench-micro: build
	build/tests/micro_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

run:
	./scripts/quickstart.sh

# The dashboard's pictures in docs/img, taken in Debian's chromium on the
# quickstart example (about 40 s).
screenshots: build
	./scripts/install-deps.sh
	KAYAK_BIN=$(CURDIR)/build/kayak node tests/browser/screenshots.mjs

clean:
	rm -rf build build-asan build-tsan
