// base/init.h
//
// Process start-up shared by every weir binary: parses absl flags, installs
// the failure signal handler (stack trace on SIGSEGV/SIGABRT), and sets the
// log tag.
//
// Thread safety: call once, from main(), before starting any thread.

#ifndef WEIR_BASE_INIT_H_
#define WEIR_BASE_INIT_H_

#include <string>
#include <string_view>
#include <vector>

namespace weir {

// Parses flags from argv (exits with usage on --help or a bad flag) and
// returns the positional arguments, argv[0] included.
std::vector<std::string> InitProcess(int argc, char** argv, std::string_view usage,
                                     std::string_view log_tag);

}  // namespace weir

#endif  // WEIR_BASE_INIT_H_
