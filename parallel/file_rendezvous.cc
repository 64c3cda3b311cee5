// parallel/file_rendezvous.cc

#include "parallel/file_rendezvous.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weir::parallel {

absl::StatusOr<std::vector<std::string>> ExchangeThroughDirectory(const std::string& dir, int rank,
                                                                  int world_size,
                                                                  const std::string& mine,
                                                                  absl::Duration timeout) {
  const std::string path = absl::StrCat(dir, "/rank.", rank);
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(mine.data(), static_cast<std::streamsize>(mine.size()));
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp));
  }
  std::vector<std::string> table(world_size);
  std::vector<bool> have(world_size, false);
  int missing = world_size;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    for (int r = 0; r < world_size; ++r) {
      if (have[r]) continue;
      std::ifstream in(absl::StrCat(dir, "/rank.", r), std::ios::binary);
      if (!in.is_open()) continue;
      table[r].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      have[r] = true;
      --missing;
    }
    if (missing == 0) return table;
    if (absl::Now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (!have[r]) {
          return absl::UnavailableError(absl::StrCat("rank ", r, " did not publish in ", dir));
        }
      }
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

}  // namespace weir::parallel
