// Makes explicit thread stack sizes work in a process with a large static TLS (see thread_stack.cc).
#pragma once

#include <cstddef>

namespace baton {

// Bytes of static TLS of the objects loaded now (sum of their PT_TLS segments, aligned).
size_t StaticTlsBytes();

// Called by MetricsServer::Start: links in the pthread_attr_setstacksize wrapper of thread_stack.cc and checks
// it is the one the process uses. False when it is not (the executable lacks --export-dynamic-symbol).
bool ThreadStacksIncludeStaticTls();

}  // namespace baton
