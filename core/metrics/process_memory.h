// The resident memory of a process, from /proc/.../statm: what every Baton process reports as
// baton_process_resident_memory_bytes at each scrape (core/metrics/metrics_server.h); the device's memory is
// core/device/device_memory.h's.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace baton {

// Resident set size in bytes of this process (or of `pid`), or -1 when its /proc/.../statm cannot be read.
int64_t ResidentMemoryBytes(pid_t pid = 0);

}  // namespace baton
