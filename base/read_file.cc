#include "base/read_file.h"

#include <fstream>
#include <sstream>

namespace weir {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError("error reading " + path);
  return text.str();
}

}  // namespace weir
