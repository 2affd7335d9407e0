// civetweb, prometheus-cpp's HTTP server, starts its threads with a fixed 100 KiB stack (Debian builds it with
// USE_STACK_SIZE=102400). glibc carves a process' static TLS out of an explicitly sized stack and refuses
// (EINVAL) a stack smaller than that TLS plus a little, and libtorch with its CUDA libraries brings ~220 KB of
// static TLS: every civetweb thread would fail to start and the Exposer throw "null context when constructing
// CivetServer". This pthread_attr_setstacksize, exported from the executable (core/CMakeLists.txt:
// --export-dynamic-symbol) and so found before libc's, adds the static TLS to every explicit stack size: each
// caller gets the usable stack it asked for. Callers that pass no size (glibc's default) are untouched.
#include "core/util/thread_stack.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <cerrno>

namespace baton {
namespace {

using SetStackSizeFn = int (*)(pthread_attr_t*, size_t);

SetStackSizeFn LibcSetStackSize() {
  static SetStackSizeFn real = reinterpret_cast<SetStackSizeFn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

int AddTls(dl_phdr_info* info, size_t, void* data) {
  size_t* total = static_cast<size_t*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_TLS) continue;
    const size_t align = ph.p_align > 0 ? ph.p_align : 1;
    *total += (ph.p_memsz + align - 1) / align * align;
  }
  return 0;
}

}  // namespace

size_t StaticTlsBytes() {
  size_t total = 0;
  dl_iterate_phdr(AddTls, &total);
  return total;
}

bool ThreadStacksIncludeStaticTls() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  size_t asked = 64 << 10, got = 0;
  pthread_attr_setstacksize(&attr, asked);
  pthread_attr_getstacksize(&attr, &got);
  pthread_attr_destroy(&attr);
  return got > asked || StaticTlsBytes() == 0;
}

}  // namespace baton

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  static const size_t tls = baton::StaticTlsBytes();
  baton::SetStackSizeFn real = baton::LibcSetStackSize();
  if (real == nullptr) return ENOSYS;
  return real(attr, size + tls);
}
