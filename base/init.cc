#include "base/init.h"

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "base/logging.h"

namespace weir {

std::vector<std::string> InitProcess(int argc, char** argv, std::string_view usage,
                                     std::string_view log_tag) {
  absl::SetProgramUsageMessage(absl::string_view(usage.data(), usage.size()));
  absl::InitializeSymbolizer(argv[0]);
  absl::FailureSignalHandlerOptions options;
  absl::InstallFailureSignalHandler(options);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  SetLogTag(log_tag);
  return std::vector<std::string>(positional.begin(), positional.end());
}

}  // namespace weir
