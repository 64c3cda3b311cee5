// A weir worker: one rank of the cluster. Starts its gRPC server, registers
// with the coordinator (--coordinator=HOST:PORT), then serves Init,
// LoadWeights, Steps, expert-map and Shutdown calls. Exits when asked to,
// on SIGINT/SIGTERM (code 0), when the coordinator has been unreachable for
// --coordinator_timeout_s (self-fencing, code 1), or when the coordinator no
// longer counts it as its rank's worker: replaced by a newer registration
// (e.g. it was stopped and woke up after its replacement took over), found
// lost and forgotten, or a new coordinator run (code 3, kExitSuperseded; it
// aborts its old group's work in flight first). Bad flags: code 2.

#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/grpc_util.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/peer_watchdog.h"
#include "base/registration_client.h"
#include "base/signals.h"
#include "worker/fault_injection.h"
#include "worker/rank_watch.h"
#include "worker/sampling/sampler.h"
#include "worker/worker_service.h"

ABSL_FLAG(std::string, coordinator, "", "Coordinator address HOST:PORT (required).");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "Address of this worker's gRPC server.");
ABSL_FLAG(std::string, advertise_host, "",
          "Host peers use to reach this worker; default: the --listen host.");
ABSL_FLAG(int, rank, -1, "Rank to ask for (-1: any free rank).");
ABSL_FLAG(int, register_timeout_s, 60, "How long to retry registering.");
ABSL_FLAG(int, coordinator_timeout_s, 10, "Exit after the coordinator is gone this long.");
ABSL_FLAG(int, max_slots, 256, "Sequence slots (concurrent sequences) of this rank.");
ABSL_FLAG(int64_t, kv_cache_bytes, int64_t{512} << 20,
          "Host memory of the KV cache: --max_slots sequence slots, then as many paged blocks "
          "of compressed KV as the rest holds (reported to the coordinator at LoadWeights). "
          "A CUDA worker with a device decoder reports the blocks its decoder's arena holds "
          "instead (the host mirrors them as address space, backed only where a sequence "
          "runs on the host).");
ABSL_FLAG(int64_t, kv_cache_blocks, 0,
          "Tests: exactly this many KV blocks, whatever --kv_cache_bytes says (0: from the "
          "budget; on a device decoder at most this many).");
ABSL_FLAG(int, sampler_threads, -1,
          "Threads that sample a step's rows besides the step's own (rows of 2^19 logits or "
          "more in all: batch 64 of a large vocabulary): -1 = half the machine's hardware "
          "threads less one, at most 8; 0 = none.");
ABSL_FLAG(int, kv_block_tokens, 64,
          "Positions per KV block when the coordinator does not say (it normally does).");
ABSL_FLAG(std::string, ucx_transports, "tcp,self",
          "UCX transports of the tensor plane (UCX_TLS syntax), e.g. sm,self on one host.");
ABSL_FLAG(int, collective_timeout_s, 60, "A collective fails after waiting this long for a peer.");
ABSL_FLAG(std::string, backend, "cpu",
          "cpu, or cuda: the model's ops on GPU (rank mod the visible devices) and the "
          "expert-parallel exchange over NCCL.");
ABSL_FLAG(double, gpu_memory_fraction, 0.9,
          "CUDA backend: share of the device memory this worker takes.");
ABSL_FLAG(bool, device_decode, true,
          "CUDA backend, one rank: decode steps on the device-resident decoder (CUDA graphs, "
          "the MoE exchange over NCCL on device buffers); the CUDA ops get half of the worker's "
          "device arena for prefill.");
ABSL_FLAG(bool, device_decode_ep, false,
          "CUDA backend, several ranks: also decode on the device decoder, every step a "
          "collective of the ranks (the MoE exchange over NCCL inside its CUDA graphs). Off by "
          "default until it has run on a multi-GPU machine (tools/gpu/multi_gpu.sh serve_ep).");
ABSL_FLAG(int64_t, device_decode_max_positions, 4096,
          "Device decode: positions one sequence may reach on the device (longer ones decode "
          "on the CUDA ops).");
ABSL_FLAG(int, device_decode_max_batch, 64, "Device decode: rows of one graph replay.");
ABSL_FLAG(int, device_prefill_rows, 2048,
          "Device decode: prompt chunks run on the device decoder too (device-resident "
          "prefill), up to this many positions of a sequence a step (steps of more than 256 "
          "rows launch eagerly); 1: prefill on the CUDA ops. Not while speculating or with "
          "--ced_replay.");
ABSL_FLAG(std::string, numerics, "fast",
          "Device decode numerics: fast (tensor cores on the stored FP8/MXFP4 weights, "
          "batch-invariant, held to the reference by tolerances) or reference (every op in "
          "the CPU's order: logits bit-identical to --backend=cpu).");
ABSL_FLAG(bool, fast_mhc, true,
          "With --numerics=fast: the mHC coefficients in one split-K launch (HcMixSplitK; "
          "batch-invariant, ~1e-7 relative from the reference's mixes); false: the "
          "reference's row-stable products (slower; fewer near-tie flips on random weights).");
ABSL_FLAG(bool, expert_wgmma, false,
          "With --numerics=fast: the routed experts' block sums on FP8 wgmma (faster at "
          "batch 8-64; Hopper's FP8 sums keep ~13 bits a 32-element block against the "
          "default f16 mma's fp32, so logits move more; kernels/cuda/moe README).");
ABSL_FLAG(bool, expert_prefill_tiles, true,
          "With --expert_wgmma: prompt chunks of at least 96 rows an expert run the routed "
          "experts on the FP8 tile form (the same bits as the MXFP4 wgmma kernel, faster at "
          "prefill; DeviceDecoderOptions::expert_prefill_tiles).");
ABSL_FLAG(bool, expert_tiles_resident, false,
          "With the experts' tile form: every layer's experts converted once at load and kept "
          "in the device arena (about twice the MXFP4 experts' bytes, taken before the KV "
          "pools) instead of converted at every prefill step; the same outputs "
          "(DeviceDecoderOptions::expert_tiles_resident).");
ABSL_FLAG(bool, ep_lsa_exchange, false,
          "With --device_decode_ep on several GPUs of one node: the MoE exchange written by "
          "the device into the peers' NCCL symmetric windows, a token's row only to the ranks "
          "that serve it (same outputs; not yet run on several GPUs; "
          "DeviceDecoderOptions::ep_lsa_exchange).");
ABSL_FLAG(bool, attention_wgmma, true,
          "With --numerics=fast: the sparse attention on one thread-block cluster a query for "
          "its 64 heads (wgmma; each listed KV row gathered once) instead of one CTA a query and "
          "16 heads (mma.sync). With the default --attention_range_tiles it shortens decode "
          "steps at batch 1 - 8; with --attention_range_tiles=16 it speeds prefill up "
          "(DeviceDecoderOptions::attention_wgmma).");
ABSL_FLAG(int32_t, attention_range_tiles, 0,
          "With --attention_wgmma: the least 64-entry tiles of a query's list one CTA takes "
          "(0: 2, five CTAs a query at V4.1's 640-entry lists, for decode latency; 16: one CTA a "
          "query, for prefill throughput). Each value has its own bits (all batch-invariant).");
ABSL_FLAG(int32_t, prompt_range_tiles, 16,
          "With --numerics=fast: a prompt's positions run the sparse attention on wgmma with "
          "this many 64-entry tiles a CTA (16: one CTA a query, the prefill throughput), the "
          "generated ones as --attention_wgmma / --attention_range_tiles say (0: off; a "
          "4,096-position prefill of the V4.1 EP8 slice 12 % faster, decode unchanged; "
          "DeviceDecoderOptions::prompt_range_tiles).");
ABSL_FLAG(bool, prompt_bf16_linears, true,
          "With --numerics=fast: a prompt's FP8 linears as bf16 tensor-core products over the "
          "operands' exact values (no per-32 fold; other low bits than the generated "
          "positions' FP8 products, chosen by role; DeviceDecoderOptions::prompt_bf16_linears).");
ABSL_FLAG(bool, prompt_bf16_experts, true,
          "With --prompt_bf16_linears: a prompt's routed experts on the bf16 route too (the "
          "MXFP4 codes widened to bf16 in the product's stages; "
          "DeviceDecoderOptions::prompt_bf16_experts).");
ABSL_FLAG(bool, fused_expert_swiglu_fp8, true,
          "With --numerics=fast: the routed experts' prefill SwiGLU writes h's FP8 form in its "
          "own launch, one pass fewer, the same bits "
          "(DeviceDecoderOptions::fused_expert_swiglu_fp8).");
ABSL_FLAG(int32_t, bf16_route_widener_warps, 0,
          "With --prompt_bf16_experts: the warps widening the MXFP4 codes in each CTA of the "
          "experts' bf16 route, 4 or 8 (0: the kernel's default); the same bits "
          "(DeviceDecoderOptions::bf16_route_widener_warps).");
ABSL_FLAG(bool, bf16_ws_m256, false,
          "With --numerics=fast: the bf16 products' warp-specialized prefill tile over 256 rows a "
          "CTA; the same bits (DeviceDecoderOptions::bf16_ws_m256).");
ABSL_FLAG(bool, bf16_ws_m256_large, false,
          "With --numerics=fast: the 256-row bf16 prefill tile only for large weights (2,048 rows "
          "and more, 32 Mi elements and more); the same bits "
          "(DeviceDecoderOptions::bf16_ws_m256_large).");
ABSL_FLAG(bool, bf16_cutlass, true,
          "With --numerics=fast: the unsplit bf16 prefill products on CUTLASS's Hopper GEMM; the "
          "same bits (DeviceDecoderOptions::bf16_cutlass; pair with --prompt_bf16_unsplit).");
ABSL_FLAG(bool, prompt_bf16_gate, true,
          "With --numerics=fast and --bf16: the prompt rows' gate logits as one bf16 GEMM over the "
          "gate's bf16 bits; other bits for prompt rows' logits "
          "(DeviceDecoderOptions::prompt_bf16_gate).");
ABSL_FLAG(bool, prompt_tf32_mhc, true,
          "With --numerics=fast: the prompt rows' mHC coefficients on TF32 tensor cores (three "
          "products a pair); other bits for prompt rows (DeviceDecoderOptions::prompt_tf32_mhc).");
ABSL_FLAG(bool, prompt_bf16_unsplit, true,
          "With --numerics=fast: the prompt's bf16 products unsplit at every chunk length; other "
          "bits for prompt rows, batch-invariant (DeviceDecoderOptions::prompt_bf16_unsplit).");
ABSL_FLAG(bool, bf16_ws_persistent, true,
          "With --numerics=fast: the bf16 products' warp-specialized prefill tile persistent; the "
          "same bits (DeviceDecoderOptions::bf16_ws_persistent).");
ABSL_FLAG(bool, expert_out_bf16, true,
          "With --numerics=fast: the experts' prefill forms hand their outputs to the combine as "
          "bf16 bits; the same bits (DeviceDecoderOptions::expert_out_bf16).");
ABSL_FLAG(bool, bf16_route_deep_ring, true,
          "With --numerics=fast: the experts' bf16 route's producer completes its copies on the "
          "ring's barriers; the same bits (DeviceDecoderOptions::bf16_route_deep_ring).");
ABSL_FLAG(bool, bf16_route_swiglu, true,
          "With --numerics=fast and the route's 256-row tile: the experts' gate and up products "
          "and the SwiGLU in one launch; the same bits (DeviceDecoderOptions::bf16_route_swiglu).");
ABSL_FLAG(bool, indexer_mma_bf16, true,
          "With --numerics=fast: the prefill indexer's q and key tiles staged once as bf16 for "
          "its tensor-core form; the same bits (DeviceDecoderOptions::indexer_mma_bf16).");
ABSL_FLAG(bool, indexer_decode_mma, false,
          "With --numerics=fast: decode steps' indexer on the tensor cores, a block a query; "
          "the same bits (DeviceDecoderOptions::indexer_decode_mma; not yet run on a GPU).");
ABSL_FLAG(bool, bf16_route_multicast, false,
          "With --numerics=fast and the route's 256-row tile: the experts' route in clusters of "
          "two CTAs sharing each X stage by a TMA multicast; the same bits "
          "(DeviceDecoderOptions::bf16_route_multicast).");
ABSL_FLAG(bool, bf16_experts_every_row, false,
          "With --numerics=fast: every row's routed experts on the bf16 route, decode's too; "
          "changes decode's fast numerics (DeviceDecoderOptions::bf16_experts_every_row).");
ABSL_FLAG(bool, bf16_route_decode_mma, false,
          "With --bf16_experts_every_row: decode steps' experts on the route's decode form "
          "(mma.sync over 8 or 16 rows a CTA); the same bits "
          "(DeviceDecoderOptions::bf16_route_decode_mma; not yet run on a GPU).");
ABSL_FLAG(bool, dense_wgmma, false,
          "With --numerics=fast: the FP8 linears' block sums on FP8 wgmma (faster at small "
          "batches, slower at 32-64; the same precision trade as --expert_wgmma).");

ABSL_FLAG(bool, fault_injection, false,
          "Testing only: SIGUSR1 makes this worker stop answering its Steps stream (a hang "
          "the coordinator's step deadline must catch) while its process and health stay up.");

namespace weir::worker {
namespace {

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

int Run(int argc, char** argv) {
  absl::Notification stop;
  InitProcess(argc, argv, "weir worker: --coordinator=HOST:PORT [--listen=HOST:PORT]", "worker");
  HoldGrpcForProcess();
  InstallTerminationHandler([&stop](int signo, int count) {
    if (count > 1) _exit(1);
    if (!stop.HasBeenNotified()) stop.Notify();
  });
  if (absl::GetFlag(FLAGS_max_slots) < 1) {
    std::cerr << "worker: --max_slots must be >= 1\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_kv_cache_bytes) < 0 || absl::GetFlag(FLAGS_kv_cache_blocks) < 0 ||
      absl::GetFlag(FLAGS_kv_block_tokens) < 1) {
    std::cerr << "worker: --kv_cache_bytes and --kv_cache_blocks must be >= 0, "
                 "--kv_block_tokens >= 1\n";
    return 2;
  }
  if (absl::Status s =
          weir::worker::sampling::SetSamplerThreads(absl::GetFlag(FLAGS_sampler_threads));
      !s.ok()) {
    std::cerr << "worker: --sampler_threads: " << s.message() << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_backend) != "cpu" && absl::GetFlag(FLAGS_backend) != "cuda") {
    std::cerr << "worker: --backend must be cpu or cuda\n";
    return 2;
  }
  absl::StatusOr<model::DecodeNumerics> numerics =
      model::ParseDecodeNumerics(absl::GetFlag(FLAGS_numerics));
  if (!numerics.ok()) {
    std::cerr << "worker: --numerics: " << numerics.status().message() << "\n";
    return 2;
  }
  if (!(absl::GetFlag(FLAGS_gpu_memory_fraction) > 0 &&
        absl::GetFlag(FLAGS_gpu_memory_fraction) <= 1)) {
    std::cerr << "worker: --gpu_memory_fraction must be in (0, 1]\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_attention_range_tiles) < 0 ||
      absl::GetFlag(FLAGS_prompt_range_tiles) < 0) {
    std::cerr << "worker: --attention_range_tiles and --prompt_range_tiles must be >= 0\n";
    return 2;
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::cerr << "worker: --coordinator=HOST:PORT is required\n";
    return 2;
  }

  grpc::HealthCheckServiceInterface* health = nullptr;
  WorkerService service(
      WorkerHooks{.set_serving =
                      [&health](bool serving) {
                        if (health != nullptr) health->SetServingStatus("weir.v1.Worker", serving);
                      },
                  .request_stop =
                      [&stop](const std::string&) {
                        if (!stop.HasBeenNotified()) stop.Notify();
                      }},
      WorkerOptions{.max_slots = absl::GetFlag(FLAGS_max_slots),
                    .kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes),
                    .kv_cache_blocks = absl::GetFlag(FLAGS_kv_cache_blocks),
                    .kv_block_tokens = absl::GetFlag(FLAGS_kv_block_tokens),
                    .ucx_transports = absl::GetFlag(FLAGS_ucx_transports),
                    .collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_s)),
                    .backend = absl::GetFlag(FLAGS_backend),
                    .gpu_memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction),
                    .device_decode = absl::GetFlag(FLAGS_device_decode),
                    .device_decode_ep = absl::GetFlag(FLAGS_device_decode_ep),
                    .device_decode_max_positions = absl::GetFlag(FLAGS_device_decode_max_positions),
                    .device_decode_max_batch = absl::GetFlag(FLAGS_device_decode_max_batch),
                    .device_prefill_rows = absl::GetFlag(FLAGS_device_prefill_rows),
                    .numerics = *numerics,
                    .fast_mhc = absl::GetFlag(FLAGS_fast_mhc),
                    .expert_wgmma = absl::GetFlag(FLAGS_expert_wgmma),
                    .expert_prefill_tiles = absl::GetFlag(FLAGS_expert_prefill_tiles),
                    .expert_tiles_resident = absl::GetFlag(FLAGS_expert_tiles_resident),
                    .dense_wgmma = absl::GetFlag(FLAGS_dense_wgmma),
                    .attention_wgmma = absl::GetFlag(FLAGS_attention_wgmma),
                    .attention_range_tiles = absl::GetFlag(FLAGS_attention_range_tiles),
                    .prompt_range_tiles = absl::GetFlag(FLAGS_prompt_range_tiles),
                    .prompt_bf16_linears = absl::GetFlag(FLAGS_prompt_bf16_linears),
                    .prompt_bf16_experts = absl::GetFlag(FLAGS_prompt_bf16_experts),
                    .fused_expert_swiglu_fp8 = absl::GetFlag(FLAGS_fused_expert_swiglu_fp8),
                    .bf16_route_widener_warps = absl::GetFlag(FLAGS_bf16_route_widener_warps),
                    .bf16_ws_m256 = absl::GetFlag(FLAGS_bf16_ws_m256),
                    .bf16_ws_persistent = absl::GetFlag(FLAGS_bf16_ws_persistent),
                    .expert_out_bf16 = absl::GetFlag(FLAGS_expert_out_bf16),
                    .bf16_route_deep_ring = absl::GetFlag(FLAGS_bf16_route_deep_ring),
                    .bf16_experts_every_row = absl::GetFlag(FLAGS_bf16_experts_every_row),
                    .bf16_route_decode_mma = absl::GetFlag(FLAGS_bf16_route_decode_mma),
                    .bf16_route_swiglu = absl::GetFlag(FLAGS_bf16_route_swiglu),
                    .indexer_mma_bf16 = absl::GetFlag(FLAGS_indexer_mma_bf16),
                    .indexer_decode_mma = absl::GetFlag(FLAGS_indexer_decode_mma),
                    .bf16_route_multicast = absl::GetFlag(FLAGS_bf16_route_multicast),
                    .bf16_ws_m256_large = absl::GetFlag(FLAGS_bf16_ws_m256_large),
                    .bf16_cutlass = absl::GetFlag(FLAGS_bf16_cutlass),
                    .prompt_bf16_unsplit = absl::GetFlag(FLAGS_prompt_bf16_unsplit),
                    .prompt_bf16_gate = absl::GetFlag(FLAGS_prompt_bf16_gate),
                    .prompt_tf32_mhc = absl::GetFlag(FLAGS_prompt_tf32_mhc),
                    .ep_lsa_exchange = absl::GetFlag(FLAGS_ep_lsa_exchange),
                    .fault_injection = absl::GetFlag(FLAGS_fault_injection)});
  if (absl::GetFlag(FLAGS_fault_injection)) InstallStallSignal();
  absl::StatusOr<StartedServer> server =
      StartServer({.address = absl::GetFlag(FLAGS_listen)}, {&service});
  if (!server.ok()) {
    std::cerr << "worker: " << server.status() << "\n";
    return 1;
  }
  health = server->server->GetHealthCheckService();
  health->SetServingStatus("weir.v1.Worker", false);

  std::string host = server->address.substr(0, server->address.rfind(':'));
  if (!absl::GetFlag(FLAGS_advertise_host).empty()) host = absl::GetFlag(FLAGS_advertise_host);
  if (host == "0.0.0.0" || host == "[::]" || host.empty()) host = HostName();
  const std::string address = absl::StrCat(host, ":", server->port);

  v1::RegisterRequest request;
  request.set_role(v1::PROCESS_ROLE_WORKER);
  request.set_address(address);
  request.set_hostname(HostName());
  request.set_pid(getpid());
  request.set_requested_rank(absl::GetFlag(FLAGS_rank));
  absl::StatusOr<v1::RegisterResponse> reply = RegisterWithCoordinator(
      coordinator, request, absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s)));
  if (!reply.ok()) {
    std::cerr << "worker: registration failed: " << reply.status() << "\n";
    server->server->Shutdown(DeadlineIn(std::chrono::seconds(1)));
    return 1;
  }
  service.SetIdentity(reply->coordinator_epoch(), reply->rank());
  SetLogTag(absl::StrCat("worker ", reply->rank()));
  WEIR_LOG(INFO) << "serving at " << address << " as rank " << reply->rank() << " of "
                 << reply->world_size();

  // Replaced, forgotten or orphaned by the coordinator: nothing will call
  // this worker again, so it fences itself off and exits.
  std::atomic<bool> superseded{false};
  int code = 0;
  {
    RankWatch watch(coordinator,
                    RankIdentity{.coordinator_epoch = reply->coordinator_epoch(),
                                 .rank = reply->rank(),
                                 .address = address},
                    absl::Seconds(1), [&](const std::string& why) {
                      WEIR_LOG(ERROR) << "superseded: " << why << "; exiting with code "
                                      << kExitSuperseded;
                      service.Fence(why);
                      superseded = true;
                      if (!stop.HasBeenNotified()) stop.Notify();
                    });
    code = ServeUntilStoppedOrFenced(*server->server, "weir.v1.Worker", coordinator,
                                     absl::Seconds(absl::GetFlag(FLAGS_coordinator_timeout_s)),
                                     stop);
  }
  return superseded ? kExitSuperseded : code;
}

}  // namespace
}  // namespace weir::worker

int main(int argc, char** argv) { return weir::worker::Run(argc, argv); }
