// faultshim: an LD_PRELOAD recorder and fault injector for the crash suite.
//
// Tracks only files under the prefixes in FAULTSHIM_ROOTS (colon-separated,
// absolute). For those it
//   * records every mutating call, after it returned, to FAULTSHIM_LOG: one
//     text line per call, followed for writes by the bytes written. Calls on
//     tracked files are serialised by one lock, so the log's order is the
//     order in which they happened (a write recorded after an fsync was
//     issued after that fsync returned);
//   * fails calls on demand: FAULTSHIM_RULES names a file that is re-read
//     whenever it changes, one rule a line, `<op> <path-prefix> <errno>`,
//     op in write|fsync|rename|open|ftruncate|unlink|read|any|short, errno
//     ENOSPC|EIO. A matching call fails without running and is logged as
//     `F`. `read` (never matched by `any`) fails reads of tracked files, as
//     a bad sector does. `short` (never matched by `any`) is a short write: the call
//     writes the first half of its buffer and returns that count, and the
//     next write on that descriptor fails with the errno, as a disk that
//     fills up part way through a write does.
//
// Log lines (fields separated by a tab):
//   O path trunc        open that created or truncated (trunc 1) a file
//   W path offset len   followed by len raw bytes, then "\n"
//   T path len          ftruncate
//   S path              fsync/fdatasync of a file
//   D path              fsync of a directory
//   R from to           rename
//   U path              unlink
//   M path              mkdir
//   F op path errno     an injected failure
//
// Only what kayak calls is interposed (see `nm -D kayak`); a coverage check
// in the suite fails if the log misses the calls it must hold.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 4096
#define MAX_ROOTS 8
#define MAX_RULES 16

typedef struct {
  char op[16];
  char prefix[512];
  int err;
} Rule;

static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static char* fd_path[MAX_FDS];
static int fd_is_dir[MAX_FDS];
static int fd_owes[MAX_FDS];  // errno the next write fails with, after a short write
static char roots[MAX_ROOTS][512];
static int n_roots = -1;
static int log_fd = -1;
static const char* rules_path;
static struct timespec rules_mtime;
static off_t rules_size = -1;
static Rule rules[MAX_RULES];
static int n_rules;

static int (*real_open)(const char*, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_read)(int, void*, size_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_rename)(const char*, const char*);
static int (*real_unlink)(const char*);
static int (*real_mkdir)(const char*, mode_t);

static void* next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == NULL) {
    static const char msg[] = "faultshim: dlsym failed\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    abort();
  }
  return f;
}

static void init(void) {
  if (n_roots >= 0) return;
  real_open = next("open");
  real_close = next("close");
  real_write = next("write");
  real_read = next("read");
  real_pwrite = next("pwrite");
  real_fsync = next("fsync");
  real_fdatasync = next("fdatasync");
  real_ftruncate = next("ftruncate");
  real_rename = next("rename");
  real_unlink = next("unlink");
  real_mkdir = next("mkdir");
  n_roots = 0;
  const char* r = getenv("FAULTSHIM_ROOTS");
  while (r != NULL && *r != '\0' && n_roots < MAX_ROOTS) {
    const char* end = strchr(r, ':');
    size_t len = end ? (size_t)(end - r) : strlen(r);
    if (len > 0 && len < sizeof(roots[0])) {
      memcpy(roots[n_roots], r, len);
      roots[n_roots][len] = '\0';
      n_roots++;
    }
    r = end ? end + 1 : NULL;
  }
  const char* log = getenv("FAULTSHIM_LOG");
  if (log != NULL) log_fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  rules_path = getenv("FAULTSHIM_RULES");
}

__attribute__((constructor)) static void shim_start(void) {
  pthread_mutex_lock(&mu);
  init();
  pthread_mutex_unlock(&mu);
}

static int tracked(const char* path) {
  if (path == NULL || path[0] != '/') return 0;
  for (int i = 0; i < n_roots; i++) {
    size_t n = strlen(roots[i]);
    if (strncmp(path, roots[i], n) == 0 && (path[n] == '\0' || path[n] == '/')) return 1;
  }
  return 0;
}

static const char* fd_tracked(int fd) {
  return fd >= 0 && fd < MAX_FDS ? fd_path[fd] : NULL;
}

static void log_bytes(const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t w = real_write(log_fd, c, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    c += w;
    n -= (size_t)w;
  }
}

static void log_line(const char* fmt, ...) {
  if (log_fd < 0) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n > 0) log_bytes(buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static int errno_by_name(const char* s) {
  if (strcmp(s, "ENOSPC") == 0) return ENOSPC;
  if (strcmp(s, "EIO") == 0) return EIO;
  if (strcmp(s, "EDQUOT") == 0) return EDQUOT;
  return 0;
}

// Re-reads the rules file when its size or mtime changed. mu held.
static void load_rules(void) {
  if (rules_path == NULL) return;
  struct stat st;
  if (stat(rules_path, &st) != 0) {
    n_rules = 0;
    rules_size = -1;
    return;
  }
  if (st.st_size == rules_size && st.st_mtim.tv_sec == rules_mtime.tv_sec &&
      st.st_mtim.tv_nsec == rules_mtime.tv_nsec) {
    return;
  }
  rules_size = st.st_size;
  rules_mtime = st.st_mtim;
  n_rules = 0;
  int fd = real_open(rules_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char text[4096];
  ssize_t len = real_read(fd, text, sizeof(text) - 1);
  real_close(fd);
  if (len <= 0) return;
  text[len] = '\0';
  char* save = NULL;
  for (char* line = strtok_r(text, "\n", &save); line && n_rules < MAX_RULES;
       line = strtok_r(NULL, "\n", &save)) {
    char err[32];
    Rule* r = &rules[n_rules];
    if (sscanf(line, "%15s %511s %31s", r->op, r->prefix, err) == 3 &&
        (r->err = errno_by_name(err)) != 0) {
      n_rules++;
    }
  }
}

// Returns the errno to inject for `op` on `path`, or 0. mu held.
static int fault(const char* op, const char* path) {
  load_rules();
  for (int i = 0; i < n_rules; i++) {
    if ((strcmp(rules[i].op, op) == 0 ||
         (strcmp(rules[i].op, "any") == 0 && strcmp(op, "short") != 0 &&
          strcmp(op, "read") != 0)) &&
        strncmp(path, rules[i].prefix, strlen(rules[i].prefix)) == 0) {
      log_line("F\t%s\t%s\t%d\n", op, path, rules[i].err);
      return rules[i].err;
    }
  }
  return 0;
}

static void remember(int fd, const char* path) {
  if (fd < 0 || fd >= MAX_FDS) return;
  free(fd_path[fd]);
  fd_path[fd] = strdup(path);
  fd_owes[fd] = 0;
  struct stat st;
  fd_is_dir[fd] = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
}

static int do_open(const char* path, int flags, mode_t mode) {
  pthread_mutex_lock(&mu);
  init();
  if (!tracked(path)) {
    pthread_mutex_unlock(&mu);
    return real_open(path, flags, mode);
  }
  int err = (flags & (O_WRONLY | O_RDWR | O_CREAT)) ? fault("open", path) : 0;
  if (err) {
    pthread_mutex_unlock(&mu);
    errno = err;
    return -1;
  }
  struct stat before;
  int existed = stat(path, &before) == 0;
  int fd = real_open(path, flags, mode);
  int saved = errno;
  if (fd >= 0) {
    remember(fd, path);
    if ((!existed && (flags & O_CREAT)) || (flags & O_TRUNC)) {
      log_line("O\t%s\t%d\n", path, (flags & O_TRUNC) ? 1 : 0);
    }
  }
  pthread_mutex_unlock(&mu);
  errno = saved;
  return fd;
}

int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return do_open(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return do_open(path, flags, mode);
}

int close(int fd) {
  pthread_mutex_lock(&mu);
  init();
  if (fd >= 0 && fd < MAX_FDS && fd_path[fd] != NULL) {
    free(fd_path[fd]);
    fd_path[fd] = NULL;
  }
  int rc = real_close(fd);
  int saved = errno;
  pthread_mutex_unlock(&mu);
  errno = saved;
  return rc;
}

static ssize_t do_write(int fd, const void* buf, size_t n, off_t off, int positional) {
  pthread_mutex_lock(&mu);
  init();
  const char* path = fd_tracked(fd);
  if (path == NULL) {
    pthread_mutex_unlock(&mu);
    return positional ? real_pwrite(fd, buf, n, off) : real_write(fd, buf, n);
  }
  int err = fd_owes[fd];
  fd_owes[fd] = 0;
  if (err) log_line("F\tshort\t%s\t%d\n", path, err);
  if (!err) err = fault("write", path);
  if (err) {
    pthread_mutex_unlock(&mu);
    errno = err;
    return -1;
  }
  if (n > 1 && (fd_owes[fd] = fault("short", path)) != 0) n /= 2;
  ssize_t w = positional ? real_pwrite(fd, buf, n, off) : real_write(fd, buf, n);
  int saved = errno;
  if (w > 0) {
    off_t at = positional ? off : lseek(fd, 0, SEEK_CUR) - w;
    log_line("W\t%s\t%lld\t%lld\n", path, (long long)at, (long long)w);
    log_bytes(buf, (size_t)w);
    log_bytes("\n", 1);
  }
  pthread_mutex_unlock(&mu);
  errno = saved;
  return w;
}

ssize_t write(int fd, const void* buf, size_t n) { return do_write(fd, buf, n, 0, 0); }

ssize_t read(int fd, void* buf, size_t n) {
  pthread_mutex_lock(&mu);
  init();
  const char* path = fd_tracked(fd);
  int err = path != NULL ? fault("read", path) : 0;
  pthread_mutex_unlock(&mu);
  if (err) {
    errno = err;
    return -1;
  }
  return real_read(fd, buf, n);
}
ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) { return do_write(fd, buf, n, off, 1); }
ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  return do_write(fd, buf, n, off, 1);
}

static int do_sync(int fd, int data_only) {
  pthread_mutex_lock(&mu);
  init();
  const char* path = fd_tracked(fd);
  if (path == NULL) {
    pthread_mutex_unlock(&mu);
    return data_only ? real_fdatasync(fd) : real_fsync(fd);
  }
  int err = fault("fsync", path);
  if (err) {
    pthread_mutex_unlock(&mu);
    errno = err;
    return -1;
  }
  int rc = data_only ? real_fdatasync(fd) : real_fsync(fd);
  int saved = errno;
  if (rc == 0) log_line("%s\t%s\n", fd_is_dir[fd] ? "D" : "S", path);
  pthread_mutex_unlock(&mu);
  errno = saved;
  return rc;
}

int fsync(int fd) { return do_sync(fd, 0); }
int fdatasync(int fd) { return do_sync(fd, 1); }

int ftruncate(int fd, off_t len) {
  pthread_mutex_lock(&mu);
  init();
  const char* path = fd_tracked(fd);
  if (path == NULL) {
    pthread_mutex_unlock(&mu);
    return real_ftruncate(fd, len);
  }
  int err = fault("ftruncate", path);
  if (err) {
    pthread_mutex_unlock(&mu);
    errno = err;
    return -1;
  }
  int rc = real_ftruncate(fd, len);
  int saved = errno;
  if (rc == 0) log_line("T\t%s\t%lld\n", path, (long long)len);
  pthread_mutex_unlock(&mu);
  errno = saved;
  return rc;
}

int rename(const char* from, const char* to) {
  pthread_mutex_lock(&mu);
  init();
  if (!tracked(from) && !tracked(to)) {
    pthread_mutex_unlock(&mu);
    return real_rename(from, to);
  }
  int err = fault("rename", to);
  if (err) {
    pthread_mutex_unlock(&mu);
    errno = err;
    return -1;
  }
  int rc = real_rename(from, to);
  int saved = errno;
  if (rc == 0) log_line("R\t%s\t%s\n", from, to);
  pthread_mutex_unlock(&mu);
  errno = saved;
  return rc;
}

int unlink(const char* path) {
  pthread_mutex_lock(&mu);
  init();
  if (!tracked(path)) {
    pthread_mutex_unlock(&mu);
    return real_unlink(path);
  }
  int err = fault("unlink", path);
  if (err) {
    pthread_mutex_unlock(&mu);
    errno = err;
    return -1;
  }
  int rc = real_unlink(path);
  int saved = errno;
  if (rc == 0) log_line("U\t%s\n", path);
  pthread_mutex_unlock(&mu);
  errno = saved;
  return rc;
}

int mkdir(const char* path, mode_t mode) {
  pthread_mutex_lock(&mu);
  init();
  int rc = real_mkdir(path, mode);
  int saved = errno;
  if (rc == 0 && tracked(path)) log_line("M\t%s\n", path);
  pthread_mutex_unlock(&mu);
  errno = saved;
  return rc;
}
