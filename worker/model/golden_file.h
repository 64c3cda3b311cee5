// worker/model/golden_file.h
//
// testonly: reads the named tensors of a golden safetensors file (tests/golden)
// as flat vectors of their element type; a missing file or tensor is a test
// failure (and an empty result), not a crash. Used by golden_test and
// golden_trained_test.

#ifndef WEIR_WORKER_MODEL_GOLDEN_FILE_H_
#define WEIR_WORKER_MODEL_GOLDEN_FILE_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/safetensors.h"

namespace weir::model {

class Golden {
 public:
  explicit Golden(const std::string& path) {
    auto f = SafetensorsFile::Open(path);
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) file_ = std::move(*f);
  }
  bool ok() const { return file_ != nullptr; }

  template <typename T>
  std::vector<T> Get(const std::string& name) const {
    const TensorInfo* info = file_->Find(name);
    EXPECT_NE(info, nullptr) << name;
    if (info == nullptr) return {};
    std::span<const uint8_t> bytes = file_->Data(*info);
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }

 private:
  std::unique_ptr<SafetensorsFile> file_;
};

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_GOLDEN_FILE_H_
