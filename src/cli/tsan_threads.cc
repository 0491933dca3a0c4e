// TSan builds only (KAYAK_SANITIZE=thread). librdkafka starts its threads
// with C11 thrd_create, which glibc implements without going through the
// pthread_create that ThreadSanitizer intercepts; TSan then meets threads it
// never set up and crashes. Defining the C11 thread calls in the executable
// interposes them for librdkafka.so, so its threads are created (and joined)
// through pthreads, which TSan sees.
#include <pthread.h>
#include <threads.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace {

struct Start {
  thrd_start_t func;
  void* arg;
};

void* Trampoline(void* p) {
  Start s = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  return reinterpret_cast<void*>(static_cast<intptr_t>(s.func(s.arg)));
}

}  // namespace

extern "C" int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) {
  auto* s = new (std::nothrow) Start{func, arg};
  if (s == nullptr) return thrd_nomem;
  const int rc = pthread_create(thr, nullptr, Trampoline, s);
  if (rc != 0) {
    delete s;
    return rc == EAGAIN ? thrd_nomem : thrd_error;
  }
  return thrd_success;
}

extern "C" int thrd_join(thrd_t thr, int* res) {
  void* ret = nullptr;
  if (pthread_join(thr, &ret) != 0) return thrd_error;
  if (res != nullptr) *res = static_cast<int>(reinterpret_cast<intptr_t>(ret));
  return thrd_success;
}

extern "C" int thrd_detach(thrd_t thr) {
  return pthread_detach(thr) == 0 ? thrd_success : thrd_error;
}

// Its C11 mutexes and condition variables likewise: glibc's are pthread
// objects under another name (same layout), locked by calls TSan does not
// intercept, so without these it sees librdkafka's memory handed between
// threads with no lock and reports races that are not there.
extern "C" int mtx_init(mtx_t* m, int type) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (type & mtx_recursive) pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  const int rc = pthread_mutex_init(reinterpret_cast<pthread_mutex_t*>(m), &a);
  pthread_mutexattr_destroy(&a);
  return rc == 0 ? thrd_success : thrd_error;
}
extern "C" int mtx_lock(mtx_t* m) {
  return pthread_mutex_lock(reinterpret_cast<pthread_mutex_t*>(m)) == 0 ? thrd_success
                                                                       : thrd_error;
}
extern "C" int mtx_trylock(mtx_t* m) {
  const int rc = pthread_mutex_trylock(reinterpret_cast<pthread_mutex_t*>(m));
  return rc == 0 ? thrd_success : rc == EBUSY ? thrd_busy : thrd_error;
}
extern "C" int mtx_timedlock(mtx_t* m, const struct timespec* ts) {
  const int rc = pthread_mutex_timedlock(reinterpret_cast<pthread_mutex_t*>(m), ts);
  return rc == 0 ? thrd_success : rc == ETIMEDOUT ? thrd_timedout : thrd_error;
}
extern "C" int mtx_unlock(mtx_t* m) {
  return pthread_mutex_unlock(reinterpret_cast<pthread_mutex_t*>(m)) == 0 ? thrd_success
                                                                         : thrd_error;
}
extern "C" void mtx_destroy(mtx_t* m) { pthread_mutex_destroy(reinterpret_cast<pthread_mutex_t*>(m)); }

extern "C" int cnd_init(cnd_t* c) {
  return pthread_cond_init(reinterpret_cast<pthread_cond_t*>(c), nullptr) == 0 ? thrd_success
                                                                               : thrd_error;
}
extern "C" int cnd_signal(cnd_t* c) {
  return pthread_cond_signal(reinterpret_cast<pthread_cond_t*>(c)) == 0 ? thrd_success
                                                                       : thrd_error;
}
extern "C" int cnd_broadcast(cnd_t* c) {
  return pthread_cond_broadcast(reinterpret_cast<pthread_cond_t*>(c)) == 0 ? thrd_success
                                                                          : thrd_error;
}
extern "C" int cnd_wait(cnd_t* c, mtx_t* m) {
  return pthread_cond_wait(reinterpret_cast<pthread_cond_t*>(c),
                           reinterpret_cast<pthread_mutex_t*>(m)) == 0
             ? thrd_success
             : thrd_error;
}
extern "C" int cnd_timedwait(cnd_t* c, mtx_t* m, const struct timespec* ts) {
  const int rc = pthread_cond_timedwait(reinterpret_cast<pthread_cond_t*>(c),
                                        reinterpret_cast<pthread_mutex_t*>(m), ts);
  return rc == 0 ? thrd_success : rc == ETIMEDOUT ? thrd_timedout : thrd_error;
}
extern "C" void cnd_destroy(cnd_t* c) { pthread_cond_destroy(reinterpret_cast<pthread_cond_t*>(c)); }
