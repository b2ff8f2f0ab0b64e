// Defines the one c10 constructor that nvFuser wheels built for torch 2.10 use and torch 2.11 lacks.
// Built and preloaded by scripts/gpu_check.sh only when `import nvfuser_direct` fails without it.
#include <c10/util/Logging.h>

namespace c10 {
MessageLogger::MessageLogger(const char* file, int line, int severity, bool /*exit_on_fatal*/)
    : MessageLogger(file, line, severity) {}
}  // namespace c10
