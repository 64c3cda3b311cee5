// base/read_file.h
//
// ReadFile: a whole file's bytes, the one helper for the config, tokenizer,
// index and test-data reads of every process and tool.
//
// Thread safety: thread-safe (no shared state).

#ifndef WEIR_BASE_READ_FILE_H_
#define WEIR_BASE_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace weir {

// The contents of the file at `path`, read as binary. NOT_FOUND
// ("cannot read <path>") when it cannot be opened, DATA_LOSS when reading
// fails part way.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace weir

#endif  // WEIR_BASE_READ_FILE_H_
