#include "coordinator/startup.h"

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/read_file.h"
#include "coordinator/api_key_interceptor.h"
#include "coordinator/batch_client.h"

namespace weir::coordinator {

absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> LoadTokenizer(const std::string& model_dir,
                                                                     std::string& fingerprint) {
  absl::StatusOr<std::string> json = ReadFile(model_dir + "/tokenizer.json");
  if (!json.ok()) return std::unique_ptr<tokenizer::Tokenizer>();
  const std::string config = ReadFile(model_dir + "/tokenizer_config.json").value_or("");
  fingerprint = absl::StrFormat("xxh64:%016x", XXH64(json->data(), json->size(), 0));
  return tokenizer::Tokenizer::FromJson(*json, config);
}

bool WriteAddressFile(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << address << "\n";
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

std::string HttpAddress(const std::string& flag, const std::string& grpc_listen) {
  if (flag == "off") return "";
  if (flag != "auto") return flag;
  const size_t colon = grpc_listen.rfind(':');
  const std::string host = grpc_listen.substr(0, colon);
  const bool any_port = colon != std::string::npos && grpc_listen.substr(colon + 1) == "0";
  return host + (any_port ? ":0" : ":8000");
}

std::shared_ptr<grpc::Channel> InProcessChannel(grpc::Server& server,
                                                const grpc::ChannelArguments& args,
                                                const std::string& api_key) {
  if (api_key.empty()) return server.InProcessChannel(args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(MakeApiKeyClientInterceptorFactory(api_key));
  return server.experimental().InProcessChannelWithInterceptors(args, std::move(creators));
}

std::string Locate(const bazel::tools::cpp::runfiles::Runfiles* runfiles,
                   const std::string& flag_value, const std::string& runfile) {
  if (!flag_value.empty()) return flag_value;
  return runfiles == nullptr ? "" : runfiles->Rlocation(runfile);
}

int RunOffline(const std::string& input, const std::string& output, const std::string& address) {
  const absl::StatusOr<std::string> text = ReadFile(input);
  if (!text.ok()) {
    std::cerr << "weir: cannot read --input " << input << "\n";
    return 1;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<BatchCounts> counts =
      RunJsonlBatchToOutput(MakeChannel(address, kPublicMaxRequestBytes), *text, output);
  if (!counts.ok()) {
    std::cerr << "weir: batch failed: " << counts.status() << "\n";
    return 1;
  }
  std::cerr << "weir: " << counts->completed << " completed, " << counts->failed << " failed in "
            << absl::FormatDuration(absl::Now() - start) << "\n";
  return 0;
}

}  // namespace weir::coordinator
