// Defines the one c10 symbol that nvFuser wheels built for torch 2.10 use and torch 2.11 lacks:
//   c10::MessageLogger::MessageLogger(const char* file, int line, int severity, bool exit_on_fatal)
// torch 2.11's libc10 has MessageLogger(SourceLocation, int severity, bool exit_on_fatal) instead; this
// constructor forwards to it. Self-contained (no torch headers): only the two constructor declarations and
// SourceLocation's layout (function, file, line; c10/util/StringUtil.h) must match libc10.
// Built and preloaded by scripts/gpu_check.sh (LD_PRELOAD) when `import nvfuser_direct` fails without it:
//   g++ -shared -fPIC -O2 -Wl,-z,lazy -o libnvfuser_shim.so scripts/nvfuser_shim.cpp
// (no -lc10: the forwarded-to constructor is bound lazily, from the libc10 that torch loads).
#include <cstdint>

namespace c10 {
struct SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};

class MessageLogger {
 public:
  MessageLogger(SourceLocation source_location, int severity, bool exit_on_fatal);
  MessageLogger(const char* file, int line, int severity, bool exit_on_fatal);
};

MessageLogger::MessageLogger(const char* file, int line, int severity, bool exit_on_fatal)
    : MessageLogger(SourceLocation{"", file, static_cast<std::uint32_t>(line)}, severity, exit_on_fatal) {}
}  // namespace c10
