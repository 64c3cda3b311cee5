// parallel/ucx_context.cc

#include "parallel/ucx_context.h"

#include <sched.h>
#include <ucp/api/ucp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weir::parallel {

absl::StatusOr<std::unique_ptr<UcxContext>> UcxContext::Create(const UcxContextOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucp_config_read: ", ucs_status_string(st)));
  }
  if (!options.transports.empty()) {
    st = ucp_config_modify(config, "TLS", options.transports.c_str());
    if (st != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("UCX transports '", options.transports, "': ", ucs_status_string(st)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("ucp_init: ", ucs_status_string(st)));
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  st = ucp_worker_create(context, &worker_params, &worker);
  if (st != UCS_OK) {
    ucp_cleanup(context);
    return absl::UnavailableError(absl::StrCat("ucp_worker_create: ", ucs_status_string(st)));
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  st = ucp_worker_get_address(worker, &address, &length);
  if (st != UCS_OK) {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return absl::UnavailableError(absl::StrCat("ucp_worker_get_address: ", ucs_status_string(st)));
  }
  std::string bytes(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  return std::unique_ptr<UcxContext>(new UcxContext(context, worker, std::move(bytes)));
}

UcxContext::UcxContext(ucp_context_h context, ucp_worker_h worker, std::string address)
    : context_(context), worker_(worker), address_(std::move(address)) {}

UcxContext::~UcxContext() {
  // Let UCX finish its own connection messages (e.g. after endpoints were
  // force-closed) before the worker goes: UCX 1.13 asserts when
  // ucp_worker_destroy purges a pending wire-up reply.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
  absl::Time last_event = absl::Now();
  while (absl::Now() < deadline && absl::Now() - last_event < absl::Milliseconds(20)) {
    if (ucp_worker_progress(worker_) > 0) {
      last_event = absl::Now();
    } else {
      sched_yield();
    }
  }
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

}  // namespace weir::parallel
