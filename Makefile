# Convenience targets; the scripts in scripts/ do the work.
.PHONY: build test test-asan test-tsan run clean

build:
	./scripts/build.sh

test:
	./scripts/test.sh

# ASan + UBSan build of everything, then the whole suite against it.
test-asan:
	BUILD_DIR=build-asan KAYAK_SANITIZE=address ./scripts/test.sh

# TSan build of everything, then the whole suite against it.
test-tsan:
	BUILD_DIR=build-tsan KAYAK_SANITIZE=thread ./scripts/test.sh

run:
	./scripts/quickstart.sh

clean:
	rm -rf build build-asan build-tsan
