// worker/worker_service.h
//
// WorkerService implements weir.v1.Worker for one rank: it takes its rank
// and peer table (Init), loads the model (LoadWeights), executes StepPlans in
// order on the Steps stream, keeps the versioned expert map, and stops on
// Shutdown. Health ("weir.v1.Worker") is SERVING only after LoadWeights.
//
// Init also opens the rank's UCX context (its address goes back to the
// coordinator); LoadWeights connects the communicator to every peer, opens
// the checkpoint and builds the Model — expert-parallel over the
// communicator when there is more than one rank, loading only the experts
// the expert map gives this rank. Steps runs each plan's rows through a
// StepExecutor (one batched forward per step; an empty plan still joins
// every MoE exchange, so all ranks take part in every step). With a
// tokenizer in the model directory, LoadWeights also builds the grammar
// vocabulary and a GrammarCompiler, so rows may carry constraints.
//
// KV memory: LoadWeights sizes the rank's paged KV pool (a
// kv_cache::BlockPool of WorkerOptions::kv_cache_bytes on the host, blocks
// of LoadWeightsRequest.kv_block_tokens positions) and reports it
// (LoadWeightsResponse.kv_cache); the coordinator's block manager hands out
// exactly those blocks and slots, and the executor keeps every sequence's
// compressed KV in the blocks its plans name.
//
// Expert re-placement (EPLB): Init also opens a second UCX context, the
// staging plane. PrepareExpertMap (collective over the ranks) validates the
// map, plans the expert moves from the committed placement and exchanges
// the weights over a staging communicator (connected at the first prepare),
// on the gRPC thread, while steps go on. A StepPlan with commit_expert_map
// installs the staged experts, frees the dropped ones and switches the
// executor before that step runs, on every rank at the same step. A rank
// that cannot commit fails that step and every later one.
//
// Thread safety: gRPC calls it from many threads; state is guarded by mu_;
// the staging plane and the staged experts by staging_mu_, which the step
// thread also takes for a commit (so weights are never written while a
// prepare reads them). Lock order: staging_mu_, then mu_.

#ifndef WEIR_WORKER_WORKER_SERVICE_H_
#define WEIR_WORKER_WORKER_SERVICE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/model_summary.h"
#include "eplb/load_reporter.h"
#include "grammar/compiler.h"
#include "parallel/abort_signal.h"
#include "parallel/communicator.h"
#include "parallel/ucx_context.h"
#include "proto/worker.grpc.pb.h"
#include "worker/expert_map_state.h"
#include "worker/kv_cache/block_pool.h"
#include "worker/model/checkpoint.h"
#include "worker/model/communicator_expert_executor.h"
#include "worker/model/device_decoder.h"
#include "worker/model/expert_moves.h"
#include "worker/model/model.h"
#include "worker/step_executor.h"

namespace weir::worker {

struct WorkerOptions {
  // Sequence slots (concurrent sequences) this rank holds.
  int32_t max_slots = 256;
  // Host memory for the KV cache: max_slots sequence slots (the state that is
  // not paged) and as many paged blocks of compressed KV as the rest holds
  // (kv_cache/kv_cache_layout.h). Sized at LoadWeights, reported in its
  // response; pages are touched only as blocks are first written.
  int64_t kv_cache_bytes = int64_t{512} << 20;
  // > 0: exactly this many blocks, whatever kv_cache_bytes says (tests).
  int64_t kv_cache_blocks = 0;
  // Positions per block when LoadWeightsRequest.kv_block_tokens is 0.
  int32_t kv_block_tokens = 64;
  // UCX transports of the tensor plane (UCX_TLS syntax). tcp detects a dead
  // peer at once; shared memory only through the timeout.
  std::string ucx_transports = "tcp,self";
  // Longest a collective may wait for a peer before the step fails.
  absl::Duration collective_timeout = absl::Seconds(60);
  // "cpu" or "cuda". With "cuda" the model's ops run on GPU rank % devices
  // (model/cuda_ops.h) and the expert-parallel exchange goes over NCCL (host
  // staged; a world of 1 too), the UCX context serving only expert staging.
  std::string backend = "cpu";
  // CUDA backend: the share of the device's memory the worker takes (the
  // ops' arena and weight region come out of it).
  double gpu_memory_fraction = 0.9;
  // CUDA backend, one rank: decode rows run on a model::DeviceDecoder
  // (activations and KV on the device, one CUDA graph replay per step, the
  // MoE exchange over the rank's NCCL communicator) sized for max_slots
  // sequences of up to device_decode_max_positions positions and batches of
  // up to device_decode_max_batch rows (more rows in one plan: the model runs
  // them).
  bool device_decode = true;
  // Also with several ranks (expert parallelism): the decoder's steps are
  // collectives of the ranks (StepExecutor steps a collective backend once
  // per plan). Expert-map commits re-place its experts, and its expert load
  // goes into the EPLB reports, as at one rank.
  bool device_decode_ep = false;
  int64_t device_decode_max_positions = 4096;
  int32_t device_decode_max_batch = 64;
  // Device-resident prefill: prompt chunks run on the device decoder too, in
  // pieces of up to this many positions of a sequence a step (the default
  // matches the coordinator's --max_prefill_tokens; one rank: the decoder's
  // batch grows to at least this, its activations and window staging rows
  // with it; several ranks: at most device_decode_max_batch, the collective
  // step's size). 1: prefill on the CUDA ops (host-staged), as before. Off
  // while the executor speculates or replays (CED): drafts and replays need
  // the model's own state.
  int32_t device_prefill_rows = 2048;
  // The device decoder's arithmetic (model::DecodeNumerics).
  model::DecodeNumerics numerics = model::DecodeNumerics::kFast;
  // kFast: the mHC coefficients on HcMixSplitK (DeviceDecoderOptions::fast_mhc).
  bool fast_mhc = true;
  // kFast: block sums on FP8 wgmma (DeviceDecoderOptions::expert_wgmma /
  // dense_wgmma; off: the f16 mma maths).
  bool expert_wgmma = false;
  // With expert_wgmma: prefill chunks on the experts' FP8 tile form
  // (DeviceDecoderOptions::expert_prefill_tiles).
  bool expert_prefill_tiles = true;
  // The tile form converted once and kept in the arena
  // (DeviceDecoderOptions::expert_tiles_resident).
  bool expert_tiles_resident = false;
  bool dense_wgmma = false;
  // kFast: the sparse attention on kWgmma64 and its least tiles a range
  // (DeviceDecoderOptions::attention_wgmma / attention_range_tiles).
  bool attention_wgmma = true;
  int attention_range_tiles = 0;
  // kFast: a prompt's positions in their own attention shape
  // (DeviceDecoderOptions::prompt_range_tiles; 0: off).
  int prompt_range_tiles = 16;
  // kFast: a prompt's FP8 linears as bf16 products over their exact values
  // (DeviceDecoderOptions::prompt_bf16_linears).
  bool prompt_bf16_linears = true;
  // With it, the prompt's routed experts too
  // (DeviceDecoderOptions::prompt_bf16_experts).
  bool prompt_bf16_experts = true;
  // The experts' prefill SwiGLU writing h's FP8 form itself
  // (DeviceDecoderOptions::fused_expert_swiglu_fp8) and the warps widening
  // MXFP4 codes in the experts' bf16 route
  // (DeviceDecoderOptions::bf16_route_widener_warps): the same bits, time only.
  bool fused_expert_swiglu_fp8 = true;
  int bf16_route_widener_warps = 0;
  // The bf16 prefill tile's forms (DeviceDecoderOptions::bf16_ws_m256,
  // bf16_ws_persistent) and the experts' outputs as bf16 for the combine
  // (expert_out_bf16): the same bits, time only.
  bool bf16_ws_m256 = false;
  bool bf16_ws_persistent = true;
  bool expert_out_bf16 = true;
  // The experts' bf16 route's deep ring (DeviceDecoderOptions::
  // bf16_route_deep_ring: time only) and every row's experts on the route,
  // decode's too (bf16_experts_every_row: changes decode's fast numerics).
  bool bf16_route_deep_ring = true;
  bool bf16_experts_every_row = false;
  // With it, decode steps' experts on the route's decode form
  // (DeviceDecoderOptions::bf16_route_decode_mma: time only; not yet run on
  // a GPU).
  bool bf16_route_decode_mma = false;
  // The route's gate / up / SwiGLU launch (DeviceDecoderOptions::
  // bf16_route_swiglu: time only).
  bool bf16_route_swiglu = true;
  // The prefill indexer's operands staged once as bf16
  // (DeviceDecoderOptions::indexer_mma_bf16: time only).
  bool indexer_mma_bf16 = true;
  // Decode steps' indexer on the tensor cores, a block a query
  // (DeviceDecoderOptions::indexer_decode_mma: time only; not yet run on a GPU).
  bool indexer_decode_mma = false;
  // The route's 256-row tile by CTA pairs sharing each X stage
  // (DeviceDecoderOptions::bf16_route_multicast: time only; its tests pass
  // but the EP8 chunk is slower with it, forty-fifth session).
  bool bf16_route_multicast = false;
  // The bf16 prefill products' thirty-seventh-session forms
  // (DeviceDecoderOptions::bf16_ws_m256_large, bf16_cutlass: the same bits;
  // prompt_bf16_unsplit: other bits for prompt rows, batch-invariant).
  bool bf16_ws_m256_large = false;
  bool bf16_cutlass = true;
  bool prompt_bf16_unsplit = true;
  // DeviceDecoderOptions::prompt_bf16_gate (other bits for prompt rows' gate logits).
  bool prompt_bf16_gate = true;
  // DeviceDecoderOptions::prompt_tf32_mhc (other bits for prompt rows' mHC coefficients).
  bool prompt_tf32_mhc = true;
  // With device_decode_ep on several GPUs of one node: the MoE exchange
  // written by the device into the peers' NCCL symmetric windows
  // (DeviceDecoderOptions::ep_lsa_exchange).
  bool ep_lsa_exchange = false;
  // Testing: after SIGUSR1 (fault_injection.h) the Steps stream stops
  // answering, as a hung worker would; health keeps answering.
  bool fault_injection = false;
};

struct WorkerHooks {
  // Called with true once the model is loaded (and false if it is unloaded).
  std::function<void(bool serving)> set_serving;
  // Called once when Shutdown is requested.
  std::function<void(const std::string& reason)> request_stop;
};

class WorkerService final : public v1::Worker::Service {
 public:
  explicit WorkerService(WorkerHooks hooks, WorkerOptions options = {});
  // Raises the group's AbortSignal first, so that its communicators close
  // without waiting for peers that are gone.
  // REQUIRES: no call is running (the server has shut down).
  ~WorkerService() override;

  // Sets the coordinator epoch and rank that registration returned. The
  // server runs before registration (its address is registered), so calls
  // that arrive first wait up to 10 s for this, then fail UNAVAILABLE.
  void SetIdentity(uint64_t epoch, int rank);

  grpc::Status Init(grpc::ServerContext* context, const v1::InitRequest* request,
                    v1::InitResponse* response) override;
  grpc::Status LoadWeights(grpc::ServerContext* context, const v1::LoadWeightsRequest* request,
                           v1::LoadWeightsResponse* response) override;
  grpc::Status Steps(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) override;
  grpc::Status PrepareExpertMap(grpc::ServerContext* context,
                                const v1::PrepareExpertMapRequest* request,
                                v1::PrepareExpertMapResponse* response) override;
  grpc::Status CommitExpertMap(grpc::ServerContext* context,
                               const v1::CommitExpertMapRequest* request,
                               v1::CommitExpertMapResponse* response) override;
  grpc::Status Shutdown(grpc::ServerContext* context, const v1::ShutdownRequest* request,
                        v1::ShutdownResponse* response) override;

  // Fences this worker off for good: the coordinator replaced it (another
  // worker registered for its rank), forgot it (its rank was freed for a
  // rejoin) or is a new coordinator run. Aborts the group's communicator
  // operations in flight (a Steps stream blocked in a collective returns),
  // cancels the open Steps stream, makes health NOT_SERVING, and refuses
  // every later call FAILED_PRECONDITION naming `reason`. The process is
  // expected to exit next (worker/main.cc). Idempotent; any thread.
  void Fence(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

  // Executes one plan (validated by the caller's sequencer) into `result`.
  // Exposed for tests of the step contract without a stream.
  void ExecutePlan(const v1::StepPlan& plan, v1::StepResult& result);

 private:
  // Waits for SetIdentity, then checks `epoch` against it; after Fence,
  // FAILED_PRECONDITION.
  grpc::Status CheckEpoch(uint64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the current group's work in flight: raises its AbortSignal (every
  // collective, connect and staging exchange of the group returns ABORTED)
  // and cancels the open Steps stream, whose thread then returns.
  void EndGroupWork(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION naming both epochs unless `group_epoch` is the one
  // of the last Init (`what` names the call).
  grpc::Status CheckGroupEpoch(uint64_t group_epoch, const std::string& what)
      ABSL_LOCKS_EXCLUDED(mu_);
  grpc::Status CheckGroupEpochLocked(uint64_t group_epoch, const std::string& what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An Init at a newer group epoch, once the old epoch's Steps stream and
  // LoadWeights calls ended (Init first ends their work with EndGroupWork,
  // then waits up to the collective timeout and 10 s more; UNAVAILABLE if
  // one is still running): drops the model, KV pool, communicators and UCX
  // contexts of the old group, and gives the new group a fresh AbortSignal.
  // REQUIRES: staging_mu_ and mu_ held by the caller.
  grpc::Status ResetForNewGroup(uint64_t group_epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(staging_mu_, mu_);
  // Switches to the staged map `version` (step thread, or no stream open).
  absl::Status CommitStaged(uint64_t version);

  WorkerHooks hooks_;
  const WorkerOptions options_;
  absl::Notification identity_set_;
  // Written once before identity_set_ is notified; read-only afterwards.
  uint64_t epoch_ = 0;
  int rank_ = -1;

  absl::Mutex mu_;
  // Guarded by mu_.
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  // The group epoch of the last Init (InitRequest.group_epoch).
  uint64_t group_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Why Fence was called; empty while not fenced.
  std::string fenced_ ABSL_GUARDED_BY(mu_);
  // The open Steps stream's context (null when none), for EndGroupWork.
  grpc::ServerContext* steps_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  // LoadWeights calls running (a newer Init waits for them to end).
  int loads_active_ ABSL_GUARDED_BY(mu_) = 0;
  int world_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> peer_addresses_ ABSL_GUARDED_BY(mu_);
  std::optional<ModelSummary> model_ ABSL_GUARDED_BY(mu_);
  std::optional<ExpertMapState> experts_ ABSL_GUARDED_BY(mu_);
  // Raised to end the current group's communicator operations (a newer
  // Init, Fence); every communicator of the group polls it. One per group:
  // replaced by ResetForNewGroup once the group's communicators are gone.
  // Declared before them, so it outlives them. The pointer is written with
  // staging_mu_ and mu_ held and read under either.
  std::unique_ptr<parallel::AbortSignal> group_abort_;
  // The loaded model; the Steps thread uses it without mu_ (one stream at a
  // time, and LoadWeights refuses to replace it while a stream is open).
  // The tensor plane (more than one rank): UCX context from Init, the
  // communicator connected at LoadWeights. Declared before the model, which
  // uses them, so they are destroyed after it.
  std::unique_ptr<parallel::UcxContext> ucx_;
  // Streams expert load to the EPLB service (its address comes with Init);
  // null without one.
  std::unique_ptr<eplb::LoadReporter> load_reporter_;
  // CUDA backend: this rank's device, and (rank 0) the NCCL unique id made at Init.
  int cuda_device_ = -1;
  std::string nccl_unique_id_;
  std::unique_ptr<parallel::Communicator> communicator_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  std::unique_ptr<model::Model> model_runtime_;
  // The backbone executor of an expert-parallel model (owned by it), else null.
  model::CommunicatorExpertExecutor* ep_executor_ = nullptr;
  // Set when a commit failed: every later step fails with it.
  absl::Status map_broken_ ABSL_GUARDED_BY(mu_);

  // Staging plane (more than one rank).
  absl::Mutex staging_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::unique_ptr<parallel::UcxContext> staging_ucx_ ABSL_GUARDED_BY(staging_mu_);
  std::vector<std::string> staging_table_ ABSL_GUARDED_BY(staging_mu_);
  std::unique_ptr<parallel::Communicator> staging_comm_ ABSL_GUARDED_BY(staging_mu_);
  // The experts received for the staged map, and its version.
  uint64_t staged_version_ ABSL_GUARDED_BY(staging_mu_) = 0;
  model::StagedExperts staged_experts_ ABSL_GUARDED_BY(staging_mu_);
  // Structured output: compiles constraints against the model's tokenizer
  // vocabulary (null when the model directory has no tokenizer). Declared
  // before the executor, which uses it.
  std::unique_ptr<grammar::GrammarCompiler> grammar_;
  // Decode steps on the device (see WorkerOptions::device_decode), or null.
  // Declared before the executor, which uses it.
  std::unique_ptr<model::DeviceDecoder> device_decoder_;
  // The paged KV blocks of this rank (made at LoadWeights). Declared before
  // the executor, whose block tables hold its blocks until destroyed.
  std::unique_ptr<kv_cache::BlockPool> kv_pool_;
  std::unique_ptr<StepExecutor> executor_;
  bool steps_active_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_WORKER_SERVICE_H_
