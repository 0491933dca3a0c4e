/* A plain line copy: what copying an NDJSON file costs with nothing in
 * between (getline, buffered fwrite of each line, one fsync at the end). The
 * second ceiling of the file -> filter + map -> file workload.
 *
 *   line_copy IN_FILE OUT_FILE
 *
 * Prints "<lines/s> <bytes/s>", timed from the first read to the fsync. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
        if (argc != 3) {
                fprintf(stderr, "usage: line_copy IN_FILE OUT_FILE\n");
                return 2;
        }
        FILE *in = fopen(argv[1], "r");
        FILE *out = fopen(argv[2], "w");
        if (in == NULL || out == NULL) {
                perror("open");
                return 1;
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        long lines = 0;
        double bytes = 0;
        const double t0 = now_s();
        while ((len = getline(&line, &cap, in)) > 0) {
                if (fwrite(line, 1, (size_t)len, out) != (size_t)len) {
                        perror("fwrite");
                        return 1;
                }
                ++lines;
                bytes += (double)len;
        }
        if (fflush(out) != 0 || fsync(fileno(out)) != 0) {
                perror("fsync");
                return 1;
        }
        const double t = now_s() - t0;
        printf("%.0f %.0f\n", (double)lines / t, bytes / t);
        free(line);
        fclose(in);
        fclose(out);
        return 0;
}
