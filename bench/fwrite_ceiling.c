/* The machine's ceiling for writing NDJSON: the lines the pipeline benchmarks
 * write (bench/pipelines.py's template, its {{seq}} filled in), with buffered
 * fwrite into one file, then one fsync.
 *
 *   fwrite_ceiling OUT_FILE N TEMPLATE
 *
 * Prints "<messages/s> <bytes/s>", timed from the first write to the fsync. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
        if (argc != 4) {
                fprintf(stderr, "usage: fwrite_ceiling OUT_FILE N TEMPLATE\n");
                return 2;
        }
        const long n = atol(argv[2]);
        const char *tmpl = argv[3];
        const char *hole = strstr(tmpl, "{{seq}}");
        if (hole == NULL) {
                fprintf(stderr, "the template has no {{seq}}\n");
                return 2;
        }
        const int head = (int)(hole - tmpl);
        const char *tail = hole + strlen("{{seq}}");
        FILE *f = fopen(argv[1], "w");
        if (f == NULL) {
                perror(argv[1]);
                return 1;
        }
        char line[4096];
        double bytes = 0;
        const double t0 = now_s();
        for (long i = 1; i <= n; ++i) {
                const int len = snprintf(line, sizeof(line), "%.*s%ld%s\n", head, tmpl, i, tail);
                if (fwrite(line, 1, (size_t)len, f) != (size_t)len) {
                        perror("fwrite");
                        return 1;
                }
                bytes += len;
        }
        if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
                perror("flush");
                return 1;
        }
        const double secs = now_s() - t0;
        fclose(f);
        printf("%.0f %.0f\n", (double)n / secs, bytes / secs);
        return 0;
}
