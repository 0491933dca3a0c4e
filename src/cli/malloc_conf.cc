// jemalloc's options, read once at start from this symbol (MALLOC_CONF in
// the environment adds to them and wins where both say something).
//
// thp:always: jemalloc asks for transparent huge pages (MADV_HUGEPAGE) for
// the memory it maps, so a growing buffer costs a page fault per 2 MiB
// instead of per 4 KiB. On the virtual machines kayak is measured on a page
// fault costs tens of microseconds: a pipeline with 1M keys in a window and
// a bucket, checkpointed every second, took 20,000-40,000 faults on its
// thread and 80,000-120,000 on the checkpoint coordinator's in a 4 s run
// (growing lists of the keys written, the encoded chunks), and 1,300-3,000
// with this (docs/benchmarks.md, "Measured design choices").
//
// narenas:2: two arenas instead of four a CPU. Each arena keeps the pages
// freed into it for reuse; with librdkafka's threads, the pipelines' and
// the checkpoint coordinator's spread over eight arenas, a kafka -> window
// + bucket -> kafka run under a backlog peaked at 313 MB, and at 231 MB with
// two, at the same rate within the runs' spread (docs/benchmarks.md,
// "Memory"). Each thread's cache still serves most allocations without
// the arena's lock.
// Linked only where jemalloc is (not into the sanitizer builds).
extern "C" {
// NOLINTNEXTLINE: the name and type are jemalloc's.
const char* malloc_conf = "thp:always,narenas:2";
}
