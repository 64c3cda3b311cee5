#include "coordinator/http/generate_calls.h"

#include "absl/time/clock.h"

namespace weir::coordinator::http {

GenerateCalls::GenerateCalls(v1::Inference::Stub& stub, std::vector<v1::GenerateRequest> requests,
                             const std::string& authorization) {
  tags_.reserve(requests.size() * 3);
  for (size_t i = 0; i < requests.size(); ++i) {
    for (Op op : {Op::kStart, Op::kRead, Op::kFinish}) tags_.push_back(Tag{i, op});
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    auto call = std::make_unique<Call>();
    if (!authorization.empty()) call->context.AddMetadata("authorization", authorization);
    call->reader = stub.PrepareAsyncGenerate(&call->context, requests[i], &cq_);
    call->reader->StartCall(TagFor(i, Op::kStart));
    calls_.push_back(std::move(call));
    ++running_;
  }
}

GenerateCalls::~GenerateCalls() {
  if (running_ > 0) {
    CancelAll();
    while (running_ > 0) Next(absl::Seconds(1));
  }
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
  }
}

void* GenerateCalls::TagFor(size_t call, Op op) { return &tags_[call * 3 + static_cast<int>(op)]; }

void GenerateCalls::CancelAll() {
  for (const std::unique_ptr<Call>& call : calls_) {
    if (!call->ended) call->context.TryCancel();
  }
}

std::optional<GenerateCalls::Event> GenerateCalls::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (running_ > 0) {
    void* raw = nullptr;
    bool ok = false;
    const grpc::CompletionQueue::NextStatus next =
        cq_.AsyncNext(&raw, &ok, absl::ToChronoTime(deadline));
    if (next != grpc::CompletionQueue::GOT_EVENT) return std::nullopt;
    const Tag& tag = *static_cast<const Tag*>(raw);
    Call& call = *calls_[tag.call];
    switch (tag.op) {
      case Op::kStart:
        if (ok) {
          call.reader->Read(&call.message, TagFor(tag.call, Op::kRead));
        } else {
          call.reader->Finish(&call.status, TagFor(tag.call, Op::kFinish));
        }
        break;
      case Op::kRead:
        if (ok) {
          Event event{.call = tag.call, .ended = false, .message = std::move(call.message)};
          call.message.Clear();
          call.reader->Read(&call.message, TagFor(tag.call, Op::kRead));
          return event;
        }
        call.reader->Finish(&call.status, TagFor(tag.call, Op::kFinish));
        break;
      case Op::kFinish:
        call.ended = true;
        --running_;
        return Event{.call = tag.call, .ended = true, .status = call.status};
    }
  }
  return std::nullopt;
}

}  // namespace weir::coordinator::http
