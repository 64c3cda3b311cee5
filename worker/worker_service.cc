#include "worker/worker_service.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/grpc_util.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "grammar/structured_output.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/ucx_communicator.h"
#include "tokenizer/engram_vocab.h"
#include "tokenizer/tokenizer.h"
#include "worker/fault_injection.h"
#include "worker/kv_cache/kv_cache_layout.h"
#include "worker/model/cuda_ops.h"
#include "worker/model/device_arena.h"
#include "worker/model/expert_parallel_model.h"
#include "worker/model/host_decode_backend.h"
#include "worker/step_sequencer.h"
#include "worker/verify_length.h"
#include "worker/verify_profile.h"
#include "worker/worker_service_internal.h"

namespace weir::worker {
namespace {

using internal::CudaDeviceOfRank;
using internal::CudaOpsOptionsFor;
using internal::Error;
using internal::FromProto;
using internal::ToPlacement;
using internal::WorkerArena;

void ToProto(const TokenLogprob& in, v1::TokenLogprobs& out) {
  out.set_token_id(static_cast<uint32_t>(in.token));
  out.set_logprob(in.logprob);
  out.set_rank(static_cast<uint32_t>(in.rank));
  for (const auto& [id, logprob] : in.top) {
    v1::TopLogprob* top = out.add_top();
    top->set_token_id(static_cast<uint32_t>(id));
    top->set_logprob(logprob);
  }
}

}  // namespace

namespace internal {

grpc::Status Error(grpc::StatusCode code, const std::string& message) {
  return grpc::Status(code, message);
}

ExpertMap FromProto(const v1::ExpertMap& proto) {
  ExpertMap map;
  map.version = proto.version();
  map.num_layers = static_cast<int>(proto.num_layers());
  map.num_physical = static_cast<int>(proto.num_physical());
  map.num_logical = static_cast<int>(proto.num_logical());
  map.slots_per_rank = static_cast<int>(proto.slots_per_rank());
  map.physical_to_logical.assign(proto.physical_to_logical().begin(),
                                 proto.physical_to_logical().end());
  return map;
}

model::ExpertPlacement ToPlacement(const ExpertMap& map, int world) {
  return {.num_layers = map.num_layers,
          .num_logical = map.num_logical,
          .slots_per_rank = map.slots_per_rank,
          .world_size = world,
          .physical_to_logical = map.physical_to_logical};
}

}  // namespace internal

WorkerService::WorkerService(WorkerHooks hooks, WorkerOptions options)
    : hooks_(std::move(hooks)),
      options_(options),
      group_abort_(std::make_unique<parallel::AbortSignal>()) {}

WorkerService::~WorkerService() {
  // The group's communicators close without waiting for peers that may be
  // gone already (a flush to them would wait for the collective timeout).
  group_abort_->Abort("the worker is stopping");
}

grpc::Status WorkerService::Init(grpc::ServerContext* context, const v1::InitRequest* request,
                                 v1::InitResponse* response) {
  if (grpc::Status s = CheckEpoch(request->coordinator_epoch()); !s.ok()) return s;
  const uint64_t group_epoch = request->group_epoch();
  {
    absl::MutexLock lock(&mu_);
    if (group_epoch < group_epoch_) {  // checked again below, with the layout
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   absl::StrCat("Init of group epoch ", group_epoch, " refused: this worker is ",
                                "at group epoch ", group_epoch_,
                                " (the call's epoch is fenced off)"));
    }
  }
  const int world = static_cast<int>(request->layout().world_size());
  if (request->rank() != rank_) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("Init for rank ", request->rank(), " sent to rank ", rank_));
  }
  if (world < 1 || rank_ >= world || request->peers_size() != world) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("Init: world size ", world, " with ", request->peers_size(),
                              " peers does not fit rank ", rank_));
  }
  std::vector<std::string> peers(world);
  absl::flat_hash_set<int> seen;
  for (const v1::PeerInfo& peer : request->peers()) {
    if (peer.rank() < 0 || peer.rank() >= world || !seen.insert(peer.rank()).second) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat("Init: peer rank ", peer.rank(), " is out of range or repeated"));
    }
    peers[peer.rank()] = peer.address();
  }
  {
    // A newer group: end the old group's work in flight (a collective
    // blocked on a lost peer returns at once, the Steps stream is
    // cancelled) and let its Steps stream and LoadWeights calls return,
    // without staging_mu_ (a commit on that stream, or a prepare that the
    // abort ends, may hold it).
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !steps_active_ && loads_active_ == 0;
    };
    if (group_epoch > group_epoch_ && initialized_) {
      EndGroupWork(absl::StrCat("group epoch ", group_epoch, " replaces ", group_epoch_));
      mu_.AwaitWithTimeout(absl::Condition(&idle),
                           options_.collective_timeout + absl::Seconds(10));
    }
  }
  absl::MutexLock staging_lock(&staging_mu_);
  absl::MutexLock lock(&mu_);
  if (group_epoch < group_epoch_) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 absl::StrCat("Init of group epoch ", group_epoch, " refused: this worker is at ",
                              "group epoch ", group_epoch_, " (the call's epoch is fenced off)"));
  }
  if (group_epoch > group_epoch_ && initialized_) {
    if (grpc::Status s = ResetForNewGroup(group_epoch); !s.ok()) return s;
  }
  group_epoch_ = group_epoch;
  if (initialized_ && (world != world_size_ || peers != peer_addresses_)) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "Init: already initialized with a different layout");
  }
  if (world > 1 && ucx_ == nullptr) {
    absl::StatusOr<std::unique_ptr<parallel::UcxContext>> ucx =
        parallel::UcxContext::Create({.transports = options_.ucx_transports});
    if (!ucx.ok()) return ToGrpcStatus(ucx.status());
    ucx_ = std::move(*ucx);
  }
  if (world > 1 && staging_ucx_ == nullptr) {
    absl::StatusOr<std::unique_ptr<parallel::UcxContext>> ucx =
        parallel::UcxContext::Create({.transports = options_.ucx_transports});
    if (!ucx.ok()) return ToGrpcStatus(ucx.status());
    staging_ucx_ = std::move(*ucx);
  }
  if (staging_ucx_ != nullptr) response->set_staging_address(staging_ucx_->address());
  if (ucx_ != nullptr) response->set_tensor_address(ucx_->address());
  if (!request->eplb_address().empty() && load_reporter_ == nullptr) {
    load_reporter_ = std::make_unique<eplb::LoadReporter>(request->eplb_address());
  }
  if (options_.backend == "cuda") {
    absl::StatusOr<int> device = CudaDeviceOfRank(rank_);
    if (!device.ok()) return ToGrpcStatus(device.status());
    cuda_device_ = *device;
    if (rank_ == 0 && nccl_unique_id_.empty()) {
      absl::StatusOr<std::string> id = parallel::NcclCommunicator::MakeUniqueId();
      if (!id.ok()) return ToGrpcStatus(id.status());
      nccl_unique_id_ = std::move(*id);
    }
    response->set_nccl_unique_id(nccl_unique_id_);
  }
  initialized_ = true;
  world_size_ = world;
  peer_addresses_ = std::move(peers);
  WEIR_LOG(INFO) << "rank " << rank_ << " of " << world << " initialized";
  return grpc::Status::OK;
}

grpc::Status WorkerService::LoadWeights(grpc::ServerContext* context,
                                        const v1::LoadWeightsRequest* request,
                                        v1::LoadWeightsResponse* response) {
  if (grpc::Status s = CheckEpoch(request->coordinator_epoch()); !s.ok()) return s;
  if (grpc::Status s = CheckGroupEpoch(request->group_epoch(), "LoadWeights"); !s.ok()) return s;
  int world = 0;
  const parallel::AbortSignal* group_abort = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!initialized_) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "LoadWeights before Init");
    }
    // Again with the call counted, so a newer Init waits for it or it sees
    // that Init's epoch.
    if (grpc::Status s = CheckGroupEpochLocked(request->group_epoch(), "LoadWeights"); !s.ok()) {
      return s;
    }
    world = world_size_;
    // Stays this group's until the call returns: a newer Init waits for it.
    group_abort = group_abort_.get();
    ++loads_active_;
  }
  absl::Cleanup load_ended = [this] {
    absl::MutexLock lock(&mu_);
    --loads_active_;
  };
  absl::StatusOr<ModelSummary> model = LoadModelSummary(request->model_dir());
  if (!model.ok()) return ToGrpcStatus(model.status());
  {
    absl::MutexLock lock(&mu_);
    if (steps_active_) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "LoadWeights while Steps is open");
    }
  }
  absl::StatusOr<std::unique_ptr<model::Checkpoint>> checkpoint =
      model::Checkpoint::Open(request->model_dir());
  if (!checkpoint.ok()) return ToGrpcStatus(checkpoint.status());
  model::ModelOptions model_options;
  std::unique_ptr<grammar::GrammarCompiler> grammar;
  if (absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok =
          tokenizer::Tokenizer::FromDirectory(request->model_dir());
      tok.ok()) {
    // Structured output: token id -> bytes of the served vocabulary.
    std::vector<int32_t> eos(model->eos_token_ids.begin(), model->eos_token_ids.end());
    absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> vocab = grammar::BuildGrammarVocabulary(
        **tok, (*checkpoint)->config().vocab_size, std::move(eos));
    if (!vocab.ok()) return ToGrpcStatus(vocab.status());
    grammar = std::make_unique<grammar::GrammarCompiler>(
        *vocab, grammar::CompilerOptions{.num_threads = 1});
    // The tokenizer's compressed vocabulary is used when the config
    // declares its size; otherwise (the tiny test model) Engram hashes the
    // raw ids, which the model accepts only when the sizes equal the vocab.
    absl::StatusOr<std::vector<int64_t>> engram =
        tokenizer::EngramTokenMap(**tok, (*checkpoint)->config().engram_compressed_vocab_size);
    if (!engram.ok()) return ToGrpcStatus(engram.status());
    model_options.engram_token_map = *std::move(engram);
  }
  const model::ModelConfig& config = (*checkpoint)->config();
  // Prompt lookup may verify more drafts than DSpark's block: the sequences
  // roll back as many (ModelOptions' default holds a block and one more).
  const int32_t lookup_tokens = static_cast<int32_t>(std::min<uint32_t>(
      request->ngram_lookup() > 0 ? request->ngram_lookup_tokens() : 0, kMaxNgramMatch + 1));
  if (lookup_tokens > config.dspark_block_size + 1) model_options.max_rollback = lookup_tokens;
  const model::ActivationPrecision precision = model_options.precision;
  const std::vector<int64_t> engram_token_map = model_options.engram_token_map;
  ExpertMap map = request->has_expert_map()
                      ? FromProto(request->expert_map())
                      : IdentityExpertMap(static_cast<int>(config.n_layers),
                                          static_cast<int>(config.n_routed_experts), world);
  if (absl::Status s = ValidateExpertMap(map, world); !s.ok()) return ToGrpcStatus(s);
  const bool cuda = options_.backend == "cuda";
  // Decode on a DeviceDecoder, its MoE exchange over this rank's NCCL
  // communicator on device buffers (a world of 1: device copies). The CUDA ops
  // (prefill) then get half of the memory share, the decoder the rest. With
  // more ranks (--device_decode_ep) the executor steps it collectively.
  const bool device_decode =
      cuda && options_.device_decode && (world == 1 || options_.device_decode_ep);
  if (cuda && options_.device_decode && !device_decode) {
    WEIR_LOG(INFO) << "device decode off with " << world << " ranks (--device_decode_ep)";
  }
  std::shared_ptr<model::DeviceArena> device_memory;
  if (cuda) {
    absl::StatusOr<std::shared_ptr<model::DeviceArena>> arena =
        WorkerArena(cuda_device_, options_.gpu_memory_fraction);
    if (!arena.ok()) return ToGrpcStatus(arena.status());
    device_memory = *arena;
    absl::StatusOr<model::CudaOpsOptions> ops_options =
        CudaOpsOptionsFor(device_memory, device_decode ? 0.5 : 1.0);
    if (!ops_options.ok()) return ToGrpcStatus(ops_options.status());
    model_options.make_ops =
        [o = *ops_options](
            model::ActivationPrecision precision) -> absl::StatusOr<std::unique_ptr<model::Ops>> {
      ASSIGN_OR_RETURN(std::unique_ptr<model::CudaOps> ops, model::CudaOps::Create(precision, o));
      return std::unique_ptr<model::Ops>(std::move(ops));
    };
  }
  absl::StatusOr<std::unique_ptr<model::Model>> runtime;
  model::CommunicatorExpertExecutor* ep_executor = nullptr;
  if (world == 1 && !cuda) {
    runtime = model::Model::Create(config, **checkpoint, std::move(model_options));
  } else {
    // UCX addresses: the tensor plane (CPU backend) and the staging plane.
    std::vector<std::string> table(world), staging(world);
    if (world > 1) {
      if (request->peers_size() != world) {
        return Error(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("LoadWeights: ", request->peers_size(), " peer addresses for ",
                                  world, " ranks"));
      }
      for (const v1::PeerInfo& peer : request->peers()) {
        if (peer.rank() < 0 || peer.rank() >= world || peer.tensor_address().empty()) {
          return Error(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("LoadWeights: bad tensor address of rank ", peer.rank()));
        }
        table[peer.rank()] = peer.tensor_address();
        staging[peer.rank()] = peer.staging_address();
      }
      absl::MutexLock lock(&staging_mu_);
      staging_table_ = std::move(staging);
    }
    if (cuda && communicator_ == nullptr) {
      // The expert-parallel exchange over NCCL (collective: every rank is in
      // LoadWeights now); one rank is a world of 1.
      absl::StatusOr<std::unique_ptr<parallel::NcclCommunicator>> nccl =
          parallel::NcclCommunicator::Create(
              Rank(rank_), world, request->nccl_unique_id(),
              {.timeout = options_.collective_timeout,
               .device = DeviceOrdinal(cuda_device_),
               .abort = group_abort});
      if (!nccl.ok()) {
      int count = 0;
      cudaGetDeviceCount(&count);
      return ToGrpcStatus(absl::Status(
          nccl.status().code(),
          absl::StrCat(nccl.status().message(), " (rank ", rank_, " on GPU ", cuda_device_, " of ",
                       count, "; NCCL needs each rank of a host on a GPU of its own)")));
    }
      absl::StatusOr<std::unique_ptr<parallel::HostStagedCommunicator>> staged =
          parallel::HostStagedCommunicator::Create(std::move(*nccl));
      if (!staged.ok()) return ToGrpcStatus(staged.status());
      communicator_ = std::move(*staged);
    }
    if (communicator_ == nullptr && !cuda) {
      absl::StatusOr<std::unique_ptr<parallel::UcxCommunicator>> comm =
          parallel::UcxCommunicator::Create(
              *ucx_, Rank(rank_), table,
              {.timeout = options_.collective_timeout, .abort = group_abort});
      if (!comm.ok()) return ToGrpcStatus(comm.status());
      // A rank that leaves Create stops progressing UCX until its next
      // collective, while a slower peer may still be flushing its endpoint to
      // it; the barrier keeps every rank progressing until all are connected.
      if (absl::Status s = (*comm)->Barrier(); !s.ok()) return ToGrpcStatus(s);
      communicator_ = std::move(*comm);
    }
    absl::StatusOr<model::ExpertParallelModel> ep = model::CreateExpertParallelModel(
        config, **checkpoint, ToPlacement(map, world), *communicator_, std::move(model_options));
    if (!ep.ok()) return ToGrpcStatus(ep.status());
    ep_executor = ep->executor;
    runtime = std::move(ep->model);
  }
  if (!runtime.ok()) return ToGrpcStatus(runtime.status());
  const int32_t block_tokens = request->kv_block_tokens() > 0
                                   ? static_cast<int32_t>(request->kv_block_tokens())
                                   : options_.kv_block_tokens;
  if (block_tokens < 1 || block_tokens > (1 << 16)) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("kv_block_tokens must be in [1, 65536], got ", block_tokens));
  }
  absl::StatusOr<kv_cache::KvCacheLayout> kv_layout =
      kv_cache::MakeKvCacheLayout(config, (*runtime)->roles(), block_tokens);
  if (!kv_layout.ok()) return ToGrpcStatus(kv_layout.status());
  const int64_t slot_bytes = kv_cache::SequenceSlotBytes(config, (*runtime)->roles(),
                                                         (*runtime)->NewSequence()->max_rollback());
  const int32_t num_draft_tokens =
      static_cast<int32_t>(std::min<uint32_t>(request->num_draft_tokens(), INT32_MAX));
  std::unique_ptr<model::DeviceDecoder> device_decoder;
  if (device_decode) {
    // The rest of the worker's arena (the CUDA ops took half), as many
    // positions per sequence as fit (at most --device_decode_max_positions).
    model::DeviceDecoderOptions dd_options{
        .device = cuda_device_, .max_sequences = options_.max_slots,
        .max_positions = options_.device_decode_max_positions,
        .max_batch = options_.device_decode_max_batch, .engram_token_map = engram_token_map};
    // Prefill chunks: at one rank the batch grows to hold a piece (graphs
    // are per padded size, so small decode steps do not pay for it); a
    // collective step is always its full batch, so there pieces fit in it.
    const int prefill_rows = std::max(1, options_.device_prefill_rows);
    if (world == 1) {
      dd_options.max_batch = std::max(dd_options.max_batch, prefill_rows);
      dd_options.max_rows_per_slot = prefill_rows;
    } else {
      dd_options.max_rows_per_slot = std::min(dd_options.max_batch, prefill_rows);
    }
    // Speculation: the DSpark stages on the device (every rank holds all
    // their experts: drafting is no collective), verification runs of the
    // token and its drafts, their rollback.
    if (num_draft_tokens > 0 && config.n_mtp_layers > 0) {
      // A verification holds DSpark's drafts or a lookup's, whichever is longer.
      const int verified = std::max(num_draft_tokens, lookup_tokens);
      dd_options.drafting = true;
      dd_options.max_rollback = verified;
      dd_options.max_rows_per_slot = std::max(dd_options.max_rows_per_slot, verified + 1);
      dd_options.max_batch = std::max<int>(
          {dd_options.max_batch, dd_options.max_rows_per_slot,
           static_cast<int>(config.dspark_block_size)});
    } else if (num_draft_tokens == 0 && lookup_tokens > 0) {
      // Prompt lookup alone: verification runs and their rollback, no stages.
      dd_options.max_rollback = lookup_tokens;
      dd_options.max_rows_per_slot = std::max(dd_options.max_rows_per_slot, lookup_tokens + 1);
      dd_options.max_batch = std::max(dd_options.max_batch, dd_options.max_rows_per_slot);
    }
    dd_options.numerics = options_.numerics;
    dd_options.fast_mhc = options_.fast_mhc;
    dd_options.expert_wgmma = options_.expert_wgmma;
    dd_options.expert_prefill_tiles = options_.expert_prefill_tiles;
    dd_options.expert_tiles_resident = options_.expert_tiles_resident;
    dd_options.dense_wgmma = options_.dense_wgmma;
    dd_options.attention_wgmma = options_.attention_wgmma;
    dd_options.attention_range_tiles = options_.attention_range_tiles;
    dd_options.prompt_range_tiles = options_.prompt_range_tiles;
    dd_options.prompt_bf16_linears = options_.prompt_bf16_linears;
    dd_options.prompt_bf16_experts = options_.prompt_bf16_experts;
    dd_options.fused_expert_swiglu_fp8 = options_.fused_expert_swiglu_fp8;
    dd_options.bf16_route_widener_warps = options_.bf16_route_widener_warps;
    dd_options.bf16_ws_m256 = options_.bf16_ws_m256;
    dd_options.bf16_ws_persistent = options_.bf16_ws_persistent;
    dd_options.expert_out_bf16 = options_.expert_out_bf16;
    dd_options.bf16_route_deep_ring = options_.bf16_route_deep_ring;
    dd_options.bf16_route_swiglu = options_.bf16_route_swiglu;
    dd_options.indexer_mma_bf16 = options_.indexer_mma_bf16;
    dd_options.indexer_decode_mma = options_.indexer_decode_mma;
    dd_options.bf16_route_decode_mma = options_.bf16_route_decode_mma;
    dd_options.bf16_route_multicast = options_.bf16_route_multicast;
    dd_options.bf16_experts_every_row = options_.bf16_experts_every_row;
    dd_options.bf16_ws_m256_large = options_.bf16_ws_m256_large;
    dd_options.bf16_cutlass = options_.bf16_cutlass;
    dd_options.prompt_bf16_unsplit = options_.prompt_bf16_unsplit;
    dd_options.prompt_bf16_gate = options_.prompt_bf16_gate;
    dd_options.prompt_tf32_mhc = options_.prompt_tf32_mhc;
    // A world of one exchanges by device copies; the symmetric windows need peers.
    dd_options.ep_lsa_exchange = options_.ep_lsa_exchange && world > 1;
    if (options_.ep_lsa_exchange && world == 1) {
      WEIR_LOG(INFO) << "--ep_lsa_exchange: one rank, nothing to exchange (device copies)";
    }
    dd_options.memory = device_memory;
    // The host-staged communicator of the CUDA path wraps the NCCL one.
    if (auto* staged = dynamic_cast<parallel::HostStagedCommunicator*>(communicator_.get())) {
      dd_options.communicator = &staged->device();
      dd_options.placement = ToPlacement(map, world);
    }
    // The worker's KV blocks are the decoder's: its compressed pools are
    // addressed by the plans' block tables, and it holds as many blocks as
    // the rest of the arena fits (--kv_cache_blocks, for tests, caps them).
    // The host pool mirrors them as address space (below), so the host
    // budget does not cap them.
    dd_options.kv_block_tokens = block_tokens;
    dd_options.external_block_tables = true;
    absl::StatusOr<int64_t> fit = model::DeviceDecoder::MaxKvBlocksFor(
        **runtime, precision, dd_options, device_memory->available());
    if (fit.ok()) {
      dd_options.kv_blocks = std::max<int64_t>(
          1, options_.kv_cache_blocks > 0 ? std::min(*fit, options_.kv_cache_blocks) : *fit);
    }
    absl::StatusOr<std::unique_ptr<model::DeviceDecoder>> dd =
        fit.ok() ? model::DeviceDecoder::Create(**runtime, precision, dd_options)
                 : absl::StatusOr<std::unique_ptr<model::DeviceDecoder>>(fit.status());
    if (!dd.ok()) {  // the CUDA ops decode instead
      WEIR_LOG(WARNING) << "device decode off: " << dd.status();
    } else {
      device_decoder = std::move(*dd);
      WEIR_LOG(INFO) << "device decode on: " << device_decoder->stats().arena_bytes / (1 << 20)
                     << " MiB of the worker's " << device_memory->capacity() / (1 << 20)
                     << " MiB device arena, " << device_decoder->options().max_positions
                     << " positions per sequence, " << device_decoder->kv_blocks()
                     << " KV blocks of " << block_tokens << " positions, "
                     << model::DecodeNumericsName(options_.numerics) << " numerics ("
                     << device_decoder->stats().fast_dense << " dense layers and "
                     << device_decoder->stats().fast_moe_layers << " MoE layers on tensor cores)";
    }
  }
  // The paged KV pool: blocks of kv_block_tokens positions over every
  // kv-source layer, sized from the host budget after max_slots slots, or,
  // with a device decoder, the blocks its arena holds (it pages its
  // compressed KV by the same blocks: external_block_tables). The host pool
  // then mirrors them: address space whose pages are backed only where a
  // sequence runs on the host model (prompt logprobs, CED replays, a
  // sequence brought back), given back when its blocks are released.
  absl::StatusOr<kv_cache::KvCacheSize> kv_size = kv_cache::SizeKvCache(
      *kv_layout, slot_bytes, options_.kv_cache_bytes, options_.max_slots,
      device_decoder != nullptr ? device_decoder->kv_blocks() : options_.kv_cache_blocks);
  if (!kv_size.ok()) return ToGrpcStatus(kv_size.status());
  absl::StatusOr<std::unique_ptr<kv_cache::BlockPool>> kv_pool = kv_cache::BlockPool::Create(
      *kv_layout, kv_size->num_blocks, {.mirror = device_decoder != nullptr});
  if (!kv_pool.ok()) return ToGrpcStatus(kv_pool.status());
  v1::KvCacheInfo* kv_info = response->mutable_kv_cache();
  kv_info->set_block_tokens(static_cast<uint32_t>(block_tokens));
  for (int32_t ratio : kv_layout->compress_ratios()) {
    kv_info->add_compress_ratios(static_cast<uint32_t>(ratio));
  }
  kv_info->set_num_blocks(static_cast<uint64_t>(kv_size->num_blocks));
  kv_info->set_num_seq_slots(static_cast<uint32_t>(kv_size->num_slots));
  kv_info->set_block_bytes(static_cast<uint64_t>(kv_size->block_bytes));
  kv_info->set_slot_bytes(static_cast<uint64_t>(kv_size->slot_bytes));
  kv_info->set_budget_bytes(static_cast<uint64_t>(options_.kv_cache_bytes));
  if (device_decoder != nullptr) {
    WEIR_LOG(INFO) << "KV cache: " << kv_size->num_blocks << " blocks of " << block_tokens
                   << " positions on the device decoder (its arena's), mirrored on the host "
                      "as address space ("
                   << kv_size->block_bytes << " bytes a block, backed only where a sequence "
                   << "runs on the host); " << kv_size->num_slots << " sequence slots of "
                   << kv_size->slot_bytes << " bytes";
  } else {
    WEIR_LOG(INFO) << "KV cache: " << kv_size->num_blocks << " blocks of " << block_tokens
                   << " positions (" << kv_size->block_bytes << " bytes each), "
                   << kv_size->num_slots << " sequence slots of " << kv_size->slot_bytes
                   << " bytes; " << kv_size->used_bytes << " of " << options_.kv_cache_bytes
                   << " budget bytes";
  }
  if (num_draft_tokens > 0 && options_.backend == "cuda" &&
      (device_decoder == nullptr || !device_decoder->drafts())) {
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "speculative decoding on --backend=cuda needs the device decoder drafting "
                 "(--device_decode, and --device_decode_ep with more than one rank); it is off "
                 "on this worker");
  }
  if (num_draft_tokens > 0) {
    StepExecutor probe(**runtime, 1);
    if (absl::Status s = probe.SetSpeculation(num_draft_tokens); !s.ok()) return ToGrpcStatus(s);
    WEIR_LOG(INFO) << "speculative decoding: DSpark, " << num_draft_tokens << " drafts a row"
                   << (request->ngram_lookup() > 0
                           ? absl::StrCat(", prompt lookup after ", request->ngram_lookup(),
                                          "-token matches")
                           : std::string());
  }
  const int32_t ngram_lookup =
      static_cast<int32_t>(std::min<uint32_t>(request->ngram_lookup(), INT32_MAX));
  if (num_draft_tokens == 0 && ngram_lookup > 0) {
    if (lookup_tokens == 0) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   "ngram_lookup without DSpark drafts (num_draft_tokens 0) needs "
                   "ngram_lookup_tokens, the tokens a lookup proposes");
    }
    WEIR_LOG(INFO) << "speculative decoding: prompt lookup alone, " << lookup_tokens
                   << " tokens after matches of "
                   << (request->ngram_lookup_max() > static_cast<uint32_t>(ngram_lookup)
                           ? absl::StrCat(request->ngram_lookup_max(), " .. ")
                           : std::string())
                   << ngram_lookup << " tokens"
                   << (device_decoder != nullptr
                           ? absl::StrCat(", verified on the device decoder (rollback ",
                                          device_decoder->max_rollback(), ")")
                           : std::string());
  }
  const int32_t ngram_lookup_max =
      static_cast<int32_t>(std::min<uint32_t>(request->ngram_lookup_max(), INT32_MAX));
  if (absl::Status s =
          StepExecutor(**runtime, 1).SetNgramLookup(ngram_lookup, lookup_tokens, ngram_lookup_max);
      !s.ok()) {
    return ToGrpcStatus(s);
  }
  std::optional<VerifyCostCurve> cost_curve;
  // Prompt lookup alone verifies lookups' drafts only: its curve has no
  // draft pass (draft_ms 0), so it is always measured here, on what verifies.
  const bool lookup_alone = num_draft_tokens == 0 && ngram_lookup > 0;
  // A measured curve covers the longest verification: DSpark's block or a
  // longer lookup's.
  const int32_t curve_drafts =
      lookup_alone ? lookup_tokens
                   : std::max(num_draft_tokens, ngram_lookup > 0 ? lookup_tokens : 0);
  const char* const confidence_from =
      lookup_alone ? "the lookups' match lengths" : "the DSpark confidence";
  if (request->verify_length() == "confidence" && curve_drafts == 0) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 "verify_length confidence needs speculation (num_draft_tokens > 0, or "
                 "ngram_lookup with ngram_lookup_tokens)");
  }
  if (request->verify_length() == "confidence" && device_decoder != nullptr &&
      (device_decoder->drafts() || lookup_alone)) {
    // Verifying on the device: the curve of this decoder on this GPU,
    // measured now (a curve of the CPU model says nothing about it).
    const int64_t batches[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    VerifyProfileOptions profile{
        .drafts = curve_drafts,
        .reps = 3,
        .backend = "cuda",
        .measured_on = "this worker's start-up",
        .model = std::filesystem::path(request->model_dir()).filename().string()};
    profile.blocks_per_slot = device_decoder->BlocksFor(
        ProfileVerifyPositions(static_cast<int64_t>(std::size(batches)), profile));
    absl::StatusOr<VerifyCostCurve> curve = ProfileVerifyCost(*device_decoder, batches, profile);
    if (!curve.ok()) return ToGrpcStatus(curve.status());
    WEIR_LOG(INFO) << "verify length: from " << confidence_from
                   << " against the decoder's curve, measured now: "
                   << VerifyCostCurveToJson(*curve);
    cost_curve = std::move(*curve);
  } else if (request->verify_length() == "confidence" &&
             (request->measure_verify_cost() || lookup_alone)) {
    // No curve in the model directory (or lookup alone, whose curve has no
    // draft pass): this machine's, measured now on the model (a second or so
    // on tiny). Batch sizes up to 16 (the curve's
    // last point stands for larger steps: a row's choice compares costs at
    // one batch size). Every rank takes the same steps (a collective each
    // over an expert-parallel group).
    const int64_t batches[] = {1, 2, 4, 8, 16};
    VerifyProfileOptions profile{
        .drafts = curve_drafts,
        .reps = 2,
        .backend = "cpu",
        .measured_on = "this worker's start-up",
        .model = std::filesystem::path(request->model_dir()).filename().string()};
    const int slots = std::clamp(options_.max_slots, 1, 16);
    model::HostDecodeBackend backend(
        **runtime, slots, slots * (curve_drafts + 1),
        ProfileVerifyPositions(static_cast<int64_t>(std::size(batches)), profile) + 1,
        /*collective=*/world > 1, curve_drafts + 1);
    if (lookup_alone) {
      backend.EnableRollback(curve_drafts);
    } else {
      backend.EnableDrafting(curve_drafts);
    }
    const auto t0 = absl::Now();
    absl::StatusOr<VerifyCostCurve> curve = ProfileVerifyCost(backend, batches, profile);
    if (!curve.ok()) return ToGrpcStatus(curve.status());
    WEIR_LOG(INFO) << "verify length: from " << confidence_from
                   << " against this machine's curve, measured now in "
                   << absl::FormatDuration(absl::Now() - t0) << ": "
                   << VerifyCostCurveToJson(*curve);
    cost_curve = std::move(*curve);
  } else if (request->verify_length() == "confidence") {
    absl::StatusOr<VerifyCostCurve> curve = LoadVerifyCostCurve(request->model_dir());
    if (absl::IsNotFound(curve.status())) {
      return Error(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("--verify_length=confidence needs the model's cost curve ", kVerifyCostFile,
                       " (tools/bench:speculative --profile_verify): ", curve.status().message()));
    }
    if (!curve.ok()) return ToGrpcStatus(curve.status());
    if (curve->max_drafts() < num_draft_tokens) {
      return Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat(kVerifyCostFile, " covers ", curve->max_drafts(),
                                " drafts a row; this worker drafts ", num_draft_tokens));
    }
    WEIR_LOG(INFO) << "verify length: from the DSpark confidence against " << kVerifyCostFile
                   << " (" << curve->backend << ", " << curve->measured_on << ")";
    if (curve->max_drafts() < curve_drafts) {
      WEIR_LOG(WARNING) << "verify length: " << kVerifyCostFile << " covers " << curve->max_drafts()
                        << " drafts a row, so lookups of " << curve_drafts
                        << " tokens verify at most that many";
    }
    cost_curve = std::move(*curve);
  } else if (!request->verify_length().empty() && request->verify_length() != "fixed") {
    return Error(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("verify_length must be fixed or confidence, got ", request->verify_length()));
  }
  const bool ced_replay = request->ced_replay();
  if (ced_replay && options_.backend == "cuda") {
    // The replay is in Model::ForwardBatch, which CudaOps would run too, but
    // it has not been run on a GPU (nor the device decoder after it).
    return Error(grpc::StatusCode::FAILED_PRECONDITION,
                 "CED bounded replay runs on the CPU backend only (not yet run on a GPU); this "
                 "worker runs --backend=cuda");
  }
  if (ced_replay) {
    StepExecutor probe(**runtime, 1);
    if (absl::Status s = probe.SetCedReplay(true); !s.ok()) return ToGrpcStatus(s);
    WEIR_LOG(INFO) << "CED bounded replay: prompts run the decoder layers over their last "
                   << (*runtime)->config().window_size << " positions";
  }
  std::optional<ExpertMapState> experts(std::move(map));
  uint64_t bytes = 0;
  for (const std::string& name : (*checkpoint)->tensors().Names()) {
    if (const model::TensorInfo* info = (*checkpoint)->Info(name)) bytes += info->num_bytes();
  }
  response->set_model_name(model->name);
  response->set_revision(model->revision);
  response->set_bytes_loaded(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (!fenced_.empty()) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION,
                   absl::StrCat("this worker is fenced off: ", fenced_));
    }
    executor_.reset();
    device_decoder_ = std::move(device_decoder);
    grammar_ = std::move(grammar);
    kv_pool_ = std::move(*kv_pool);
    executor_ = std::make_unique<StepExecutor>(**runtime, options_.max_slots, grammar_.get());
    // Validated before the model was swapped in (below the KV pool).
    executor_->SetSpeculation(num_draft_tokens).IgnoreError();
    executor_->SetVerifyCostCurve(std::move(cost_curve));
    executor_->SetSpeculationMaxBatch(request->speculative_max_batch());
    executor_->SetNgramLookup(ngram_lookup, lookup_tokens, ngram_lookup_max).IgnoreError();
    executor_->SetCedReplay(ced_replay).IgnoreError();
    executor_->SetDecodeBackend(device_decoder_.get());
    executor_->SetKvCache(kv_pool_.get());
    model_runtime_ = std::move(*runtime);
    ep_executor_ = ep_executor;
    map_broken_ = absl::OkStatus();
    checkpoint_ = std::move(*checkpoint);
    model_ = std::move(*model);
    experts_ = std::move(experts);
  }
  if (hooks_.set_serving) hooks_.set_serving(true);
  return grpc::Status::OK;
}

void WorkerService::ExecutePlan(const v1::StepPlan& plan, v1::StepResult& result) {
  result.set_step_id(plan.step_id());
  std::vector<RowPlan> rows;
  rows.reserve(plan.rows_size());
  // Rows whose constraint message is malformed fail alone, after the step.
  std::vector<std::pair<size_t, absl::Status>> bad_constraints;
  for (const v1::StepRow& in : plan.rows()) {
    RowPlan row{.slot = in.seq_slot(),
                .start_pos = in.start_pos(),
                .tokens = {in.input_tokens().begin(), in.input_tokens().end()},
                .remap = in.has_remap() ? in.remap() : -1,
                .sample = in.sample(),
                .return_top_k = static_cast<int32_t>(in.return_top_k())};
    for (int32_t block : in.new_blocks()) row.new_blocks.push_back(BlockId(block));
    const v1::SamplingParams& p = in.sampling();
    row.sampling.temperature = p.has_temperature() ? p.temperature() : 1.0f;
    row.sampling.top_k = p.has_top_k() ? p.top_k() : 0;
    row.sampling.top_p = p.has_top_p() ? p.top_p() : 1.0f;
    row.sampling.min_p = p.has_min_p() ? p.min_p() : 0.0f;
    row.sampling.repetition_penalty = p.has_repetition_penalty() ? p.repetition_penalty() : 1.0f;
    row.sampling.frequency_penalty = p.has_frequency_penalty() ? p.frequency_penalty() : 0.0f;
    row.sampling.presence_penalty = p.has_presence_penalty() ? p.presence_penalty() : 0.0f;
    for (const auto& [id, bias] : p.logit_bias()) {
      row.sampling.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
    }
    std::sort(row.sampling.logit_bias.begin(), row.sampling.logit_bias.end());
    row.sampling.seed = in.seed();
    row.output_from = in.output_from();
    row.exact_prefill = in.exact_prefill();
    if (in.has_logprobs()) {
      row.logprobs = static_cast<int32_t>(std::min<uint32_t>(in.logprobs(), INT32_MAX));
    }
    if (in.has_prompt_logprobs()) {
      row.prompt_logprobs =
          static_cast<int32_t>(std::min<uint32_t>(in.prompt_logprobs(), INT32_MAX));
      row.prompt_end = in.prompt_end();
    }
    if (in.has_fork_from()) row.fork_from = in.fork_from();
    if (in.has_draft_tokens()) {
      row.draft_tokens = static_cast<int32_t>(std::min<uint32_t>(in.draft_tokens(), INT32_MAX));
    }
    if ((in.start_pos() == 0 || in.has_fork_from()) && grammar::HasConstraint(in.constraint())) {
      absl::StatusOr<grammar::Constraint> constraint = grammar::ConstraintFromProto(in.constraint());
      if (constraint.ok()) {
        row.constraint = std::move(*constraint);
        row.constrained_from = in.constrained_from();
      } else {
        bad_constraints.emplace_back(rows.size(), constraint.status());
      }
    }
    rows.push_back(std::move(row));
  }
  std::vector<int32_t> release(plan.release_slots().begin(), plan.release_slots().end());
  if (executor_ == nullptr) {
    result.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kFailedPrecondition));
    result.mutable_error()->set_message("no model loaded");
    return;
  }
  if (plan.commit_expert_map() != 0) {
    if (absl::Status s = CommitStaged(plan.commit_expert_map()); !s.ok()) {
      WEIR_LOG(ERROR) << "rank " << rank_ << " cannot commit expert map "
                      << plan.commit_expert_map() << ": " << s;
      absl::MutexLock lock(&mu_);
      if (map_broken_.ok()) {
        map_broken_ = absl::FailedPreconditionError(absl::StrCat(
            "rank ", rank_, " could not switch to expert map ", plan.commit_expert_map(), ": ",
            s.message()));
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (!map_broken_.ok()) {
      // Running on another placement than the peers would be silently wrong.
      result.mutable_error()->set_code(static_cast<int>(map_broken_.code()));
      result.mutable_error()->set_message(std::string(map_broken_.message()));
      return;
    }
    result.set_expert_map_version(experts_.has_value() ? experts_->committed().version : 0);
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<RowOutcome>> outcomes = executor_->Execute(rows, release);
  result.set_forward_ms(absl::ToDoubleMilliseconds(absl::Now() - start));
  if (!outcomes.ok()) {
    result.mutable_error()->set_code(static_cast<int>(outcomes.status().code()));
    result.mutable_error()->set_message(std::string(outcomes.status().message()));
    return;
  }
  if (plan.return_expert_load()) {
    // Routed (token, expert) pairs of this rank's rows since the last report,
    // [n_layers, n_routed_experts] (backbone layers only).
    model::ExpertLoad& load = model_runtime_->expert_load();
    const model::ModelConfig& config = model_runtime_->config();
    // Rows this rank's experts computed per layer: the executor's served
    // counts when expert-parallel, else every routed pair (all local).
    model::ExpertLoad& served = ep_executor_ != nullptr ? ep_executor_->served() : load;
    std::vector<uint64_t> counts, served_rows;
    const int layers = static_cast<int>(std::min<int64_t>(config.n_layers, load.num_layers()));
    for (int layer = 0; layer < layers; ++layer) {
      for (int64_t count : load.layer_counts(layer)) counts.push_back(static_cast<uint64_t>(count));
      uint64_t rows = 0;
      for (int64_t count : served.layer_counts(layer)) rows += static_cast<uint64_t>(count);
      served_rows.push_back(rows);
    }
    load.Reset();
    if (ep_executor_ != nullptr) ep_executor_->served().Reset();
    if (device_decoder_ != nullptr) {
      // Decode rows ran on the device decoder, which counts on the device.
      const int64_t experts = config.n_routed_experts;
      std::vector<int64_t> routed(config.n_layers * experts, 0), served(config.n_layers, 0);
      if (absl::Status s = device_decoder_->TakeExpertLoad(routed, served); !s.ok()) {
        WEIR_LOG(WARNING) << "expert load of the device decoder: " << s;
      }
      for (int layer = 0; layer < layers; ++layer) {
        for (int64_t e = 0; e < experts; ++e) {
          counts[layer * experts + e] += static_cast<uint64_t>(routed[layer * experts + e]);
        }
        served_rows[layer] += static_cast<uint64_t>(served[layer]);
      }
    }
    if (load_reporter_ != nullptr) {
      // Straight to EPLB, off this thread; the step result stays small.
      load_reporter_->Enqueue(rank_, plan.step_id(), layers,
                              static_cast<int>(config.n_routed_experts), std::move(counts),
                              result.expert_map_version(), std::move(served_rows));
    } else {
      result.mutable_expert_load()->Add(counts.begin(), counts.end());
      result.mutable_served_load()->Add(served_rows.begin(), served_rows.end());
    }
  }
  for (auto& [index, status] : bad_constraints) {
    (*outcomes)[index].status = status;
    (*outcomes)[index].token.reset();
  }
  for (const RowOutcome& outcome : *outcomes) {
    v1::RowResult* row = result.add_rows();
    row->set_finished(outcome.finished);
    row->set_verified_drafts(static_cast<uint32_t>(outcome.verified_drafts));
    row->set_drafts_paused(outcome.drafts_paused);
    row->set_lookup_drafts(outcome.lookup_drafts);
    if (outcome.token.has_value()) {
      for (size_t k = 0; k < outcome.accepted.size(); ++k) {
        row->add_tokens(static_cast<uint32_t>(outcome.accepted[k]));
        row->add_logprobs(outcome.accepted_logprobs[k]);
      }
      row->add_tokens(static_cast<uint32_t>(*outcome.token));
      row->add_logprobs(outcome.logprob);
    }
    for (size_t k = 0; k < outcome.top_ids.size(); ++k) {
      row->add_top_ids(static_cast<uint32_t>(outcome.top_ids[k]));
      row->add_top_logits(outcome.top_logits[k]);
    }
    if (outcome.sampled_logprobs.has_value()) {
      for (const TokenLogprob& scored : outcome.accepted_scored) {
        ToProto(scored, *row->add_accepted_logprobs());
      }
      ToProto(*outcome.sampled_logprobs, *row->mutable_sampled_logprobs());
    }
    row->set_prompt_logprobs_from(static_cast<uint32_t>(outcome.prompt_logprobs_from));
    for (const TokenLogprob& scored : outcome.prompt_logprobs) {
      ToProto(scored, *row->add_prompt_logprobs());
    }
    if (!outcome.status.ok()) {
      row->mutable_error()->set_code(static_cast<int>(outcome.status.code()));
      row->mutable_error()->set_message(std::string(outcome.status.message()));
    }
  }
}

grpc::Status WorkerService::Steps(grpc::ServerContext* context,
                                  grpc::ServerReaderWriter<v1::StepResult, v1::StepPlan>* stream) {
  uint64_t group_epoch = 0;
  bool busy = false;
  const parallel::AbortSignal* group_abort = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!model_.has_value()) {
      return Error(grpc::StatusCode::FAILED_PRECONDITION, "Steps before LoadWeights");
    }
    busy = steps_active_;
    steps_active_ = true;
    group_epoch = group_epoch_;
    if (!busy) {
      steps_context_ = context;
      // This group's until the stream ends: a newer Init waits for that.
      group_abort = group_abort_.get();
    }
  }
  if (busy) {
    // A second stream: a plan of another group epoch is refused as such
    // (the fence), anything else because one stream is open.
    v1::StepPlan first;
    if (stream->Read(&first)) {
      if (grpc::Status s = CheckGroupEpoch(first.group_epoch(), "Steps plan"); !s.ok()) return s;
    }
    return Error(grpc::StatusCode::FAILED_PRECONDITION, "a Steps stream is already open");
  }
  if (grpc::Status s = CheckEpoch(epoch_); !s.ok()) {  // Waits for identity.
    absl::MutexLock lock(&mu_);
    steps_active_ = false;
    steps_context_ = nullptr;
    return s;
  }
  StepSequencer sequencer(epoch_);
  v1::StepPlan plan;
  grpc::Status outcome = grpc::Status::OK;
  while (stream->Read(&plan)) {
    if (plan.group_epoch() != group_epoch) {
      // A plan of another worker group (the fence): this stream ends.
      outcome = CheckGroupEpoch(plan.group_epoch(), absl::StrCat("Steps plan ", plan.step_id()));
      if (outcome.ok()) {
        outcome = Error(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("Steps plan of group epoch ", plan.group_epoch(),
                                     " on a stream of group epoch ", group_epoch));
      }
      break;
    }
    if (absl::Status s = sequencer.Accept(plan.coordinator_epoch(), plan.step_id()); !s.ok()) {
      outcome = ToGrpcStatus(s);  // A broken sequence ends the stream.
      break;
    }
    v1::StepResult result;
    ExecutePlan(plan, result);
    if (absl::Status ended = group_abort->Check("the group's work"); !ended.ok()) {
      // A newer Init or a fence ended this group: its step (most likely
      // failed ABORTED) is the stream's last.
      stream->Write(result);
      outcome = ToGrpcStatus(ended);
      break;
    }
    if (options_.fault_injection && StallRequested()) {
      WEIR_LOG(WARNING) << "rank " << rank_
                        << ": fault injection: the Steps stream stops answering";
      while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(20));
      outcome = grpc::Status(grpc::StatusCode::CANCELLED, "stalled by fault injection");
      break;
    }
    if (!stream->Write(result)) break;
  }
  absl::MutexLock lock(&mu_);
  steps_active_ = false;
  steps_context_ = nullptr;
  return outcome;
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext* context,
                                     const v1::ShutdownRequest* request,
                                     v1::ShutdownResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::OK;
    stopping_ = true;
  }
  {
    absl::MutexLock lock(&mu_);
    if (executor_ != nullptr && device_decoder_ != nullptr) {
      WEIR_LOG(INFO) << "device decoder: " << executor_->device_rows() << " positions stepped, "
                     << executor_->device_prefill_rows() << " of them prompt chunks";
    }
  }
  WEIR_LOG(INFO) << "shutdown requested: " << request->reason();
  if (hooks_.set_serving) hooks_.set_serving(false);
  if (hooks_.request_stop) hooks_.request_stop(request->reason());
  return grpc::Status::OK;
}

}  // namespace weir::worker
