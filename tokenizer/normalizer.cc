#include "tokenizer/normalizer.h"

#include "base/status_macros.h"

namespace weir::tokenizer {

absl::StatusOr<std::unique_ptr<Normalizer>> Normalizer::FromJson(const Json& j) {
  std::unique_ptr<Normalizer> n(new Normalizer());
  if (!j.is_null()) {
    RETURN_IF_ERROR(n->Add(j, 0));
  }
  return n;
}

absl::Status Normalizer::Add(const Json& j, int depth) {
  if (depth > 16) return absl::InvalidArgumentError("normalizer nesting too deep");
  ASSIGN_OR_RETURN(std::string type, GetType(j, "normalizer"));
  if (type == "Sequence") {
    RETURN_IF_ERROR(CheckFields(j, {"type", "normalizers"}, "normalizer Sequence"));
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError("normalizer Sequence needs an array 'normalizers'");
    }
    for (const Json& child : *it) RETURN_IF_ERROR(Add(child, depth + 1));
    return absl::OkStatus();
  }
  NormalForm form;
  if (type == "NFC") {
    form = NormalForm::kNfc;
  } else if (type == "NFD") {
    form = NormalForm::kNfd;
  } else if (type == "NFKC") {
    form = NormalForm::kNfkc;
  } else if (type == "NFKD") {
    form = NormalForm::kNfkd;
  } else {
    return absl::InvalidArgumentError("unsupported normalizer type '" + type + "'");
  }
  RETURN_IF_ERROR(CheckFields(j, {"type"}, "normalizer " + type));
  steps_.push_back(form);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Normalizer::Apply(std::string_view text) const {
  std::string out(text);
  for (NormalForm form : steps_) {
    ASSIGN_OR_RETURN(out, Normalize(out, form));
  }
  return out;
}

}  // namespace weir::tokenizer
