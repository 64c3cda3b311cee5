// worker/model/device_decoder_synthetic.h
//
// The synthetic slice generator: a DeviceDecoder whose weights are drawn on
// the device from the config's shapes, for step-time benchmarks of
// configurations whose weights do not fit the host in fp32 (one
// expert-parallel rank's slice of V4.1-Flash: tools/bench decode_gpu
// --ep_slice). Testonly: the worker never links it.
//
// Thread safety: as DeviceDecoder.

#ifndef WEIR_WORKER_MODEL_DEVICE_DECODER_SYNTHETIC_H_
#define WEIR_WORKER_MODEL_DEVICE_DECODER_SYNTHETIC_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/config.h"
#include "worker/model/device_decoder.h"

namespace weir::model {

// A decoder with synthetic weights drawn on the device (dense and head
// uniform, bf16-rounded, scaled by in^-1/2; experts random MXFP4 codes; the
// small vectors drawn on the host from `seed`); the same seed draws the same
// weights. Sequences start empty (DeviceDecoder::Start). INVALID_ARGUMENT if
// `config` is invalid or has Engram layers (their tables are not
// synthesized); errors as DeviceDecoder::Create otherwise. `bf16_wo_a`: the
// grouped wo_a as checkpoints load it (worker/model/weights.cc: bf16 values,
// no act_quant, so the fast decoder runs it as a bf16 product); false keeps
// the FP8 product with act_quant the slice had before 2026-12-06 (half the
// bytes of V4.1's real wo_a).
absl::StatusOr<std::unique_ptr<DeviceDecoder>> CreateSyntheticDeviceDecoder(
    const ModelConfig& config, ActivationPrecision precision,
    const DeviceDecoderOptions& options = {}, uint64_t seed = 1, bool bf16_wo_a = false);

}  // namespace weir::model

#endif  // WEIR_WORKER_MODEL_DEVICE_DECODER_SYNTHETIC_H_
