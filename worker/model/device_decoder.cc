#include "worker/model/device_decoder.h"

#include <chrono>

#include "kernels/cpu/quant.h"
#include "kernels/cuda/programmatic_graph.h"
#include "worker/model/device_decoder_impl.h"

namespace weir::model {
namespace device_decoder_internal {

absl::Status CudaError(const char* what, cudaError_t err) {
  return absl::InternalError(absl::StrCat("DeviceDecoder: ", what, ": ", cudaGetErrorString(err)));
}

}  // namespace device_decoder_internal

using device_decoder_internal::CheckDecodable;
using device_decoder_internal::CudaError;
using device_decoder_internal::LayerDev;
using device_decoder_internal::LocalExperts;

namespace {

using Clock = std::chrono::steady_clock;

// The stored form of fp32 KV rows: window rows FP8 (e4m3 + UE8M0 per 32),
// compressed rows FP4 (e2m1 + E4M3 per 16). Rows a sequence state holds are
// values the model's quantization kept, so they re-encode exactly; anything
// else is INTERNAL (the state is not one this model wrote).
// The stored forms of the pools: the window FP8 + UE8M0 per 32, the
// compressed KV FP4 + E4M3 per 16, the index keys MXFP4 (FP4 + E8M0 per 32).
enum class StoredKind { kWindow, kCompressed, kIndexKeys };

const char* StoredKindName(StoredKind kind) {
  switch (kind) {
    case StoredKind::kWindow:
      return "window KV";
    case StoredKind::kCompressed:
      return "compressed KV";
    case StoredKind::kIndexKeys:
      return "index key";
  }
  return "?";
}

absl::Status EncodeKvRows(std::span<const float> rows, StoredKind kind, std::vector<uint8_t>& codes,
                          std::vector<uint8_t>& scales) {
  namespace cpu = kernels::cpu;
  const bool fp8 = kind == StoredKind::kWindow;
  const int block = kind == StoredKind::kCompressed ? 16 : 32;
  const cpu::Fp4Scale scale =
      kind == StoredKind::kCompressed ? cpu::Fp4Scale::kE4m3 : cpu::Fp4Scale::kE8m0;
  codes.assign(fp8 ? rows.size() : rows.size() / 2, 0);
  scales.assign(rows.size() / block, 0);
  std::vector<float> back(rows.size());
  if (fp8) {
    RETURN_IF_ERROR(cpu::QuantizeFp8(rows, block, codes, scales));
    RETURN_IF_ERROR(cpu::DequantizeFp8(codes, scales, block, back));
  } else {
    RETURN_IF_ERROR(cpu::QuantizeFp4(rows, block, scale, codes, scales));
    RETURN_IF_ERROR(cpu::DequantizeFp4(codes, scales, block, scale, back));
  }
  if (std::memcmp(back.data(), rows.data(), rows.size() * sizeof(float)) != 0) {
    return absl::InternalError(absl::StrCat("Import: a ", StoredKindName(kind),
                                            " row does not re-encode exactly in its stored "
                                            "form"));
  }
  return absl::OkStatus();
}

absl::Status DecodeKvRows(const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales,
                          StoredKind kind, std::span<float> rows) {
  namespace cpu = kernels::cpu;
  switch (kind) {
    case StoredKind::kWindow:
      return cpu::DequantizeFp8(codes, scales, 32, rows);
    case StoredKind::kCompressed:
      return cpu::DequantizeFp4(codes, scales, 16, cpu::Fp4Scale::kE4m3, rows);
    case StoredKind::kIndexKeys:
      break;
  }
  return cpu::DequantizeFp4(codes, scales, 32, cpu::Fp4Scale::kE8m0, rows);
}

}  // namespace

bool DeviceDecoder::Impl::GrowTable(int s, int64_t blocks) {
  Slot& slot = slot_state[s];
  if (blocks <= slot.blocks) return true;
  if (blocks > table_width || blocks - slot.blocks > static_cast<int64_t>(free_blocks.size())) {
    return false;
  }
  for (int32_t* row = table_row(s); slot.blocks < blocks; ++slot.blocks) {
    const int32_t b = free_blocks.back();
    free_blocks.pop_back();
    block_owner[b] = s;
    row[slot.blocks] = b;
  }
  table_dirty[s] = 1;
  return true;
}

void DeviceDecoder::Impl::DropTable(int s) {
  Slot& slot = slot_state[s];
  int32_t* row = table_row(s);
  for (int64_t j = 0; j < slot.blocks; ++j) {
    block_owner[row[j]] = -1;
    if (!options.external_block_tables) free_blocks.push_back(row[j]);
    row[j] = -1;
  }
  if (slot.blocks > 0) table_dirty[s] = 1;
  slot.blocks = 0;
}

absl::Status DeviceDecoder::Impl::UploadTables() {
  for (int s = 0; s < slots; ++s) {
    if (table_dirty[s] == 0) continue;
    WEIR_DD_CUDA("block tables",
                 cudaMemcpyAsync(tables_dev + int64_t{s} * table_width, table_row(s),
                                 table_width * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    table_dirty[s] = 0;
  }
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::UploadKv(std::span<const float> rows, bool window,
                                           int64_t first_row) {
  const int64_t hd = c.head_dim;
  if (!stored_kv) {
    WEIR_DD_CUDA("import KV", cudaMemcpy(kv_pool + first_row * hd, rows.data(),
                                         rows.size() * sizeof(float), cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<uint8_t> codes, scales;
  RETURN_IF_ERROR(
      EncodeKvRows(rows, window ? StoredKind::kWindow : StoredKind::kCompressed, codes, scales));
  const int64_t r = window ? first_row : first_row - window_rows_total;
  uint8_t* cd = window ? win_codes + r * hd : comp_codes + r * hd / 2;
  uint8_t* sd = window ? win_scales + r * hd / 32 : comp_scales + r * hd / 16;
  WEIR_DD_CUDA("import KV", cudaMemcpy(cd, codes.data(), codes.size(), cudaMemcpyHostToDevice));
  WEIR_DD_CUDA("import KV", cudaMemcpy(sd, scales.data(), scales.size(), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::DownloadKv(std::span<float> rows, bool window,
                                             int64_t first_row) {
  const int64_t hd = c.head_dim;
  if (!stored_kv) {
    WEIR_DD_CUDA("export KV", cudaMemcpy(rows.data(), kv_pool + first_row * hd,
                                         rows.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<uint8_t> codes(window ? n : n / 2), scales(n / (window ? 32 : 16));
  const int64_t r = window ? first_row : first_row - window_rows_total;
  const uint8_t* cs = window ? win_codes + r * hd : comp_codes + r * hd / 2;
  const uint8_t* ss = window ? win_scales + r * hd / 32 : comp_scales + r * hd / 16;
  WEIR_DD_CUDA("export KV", cudaMemcpy(codes.data(), cs, codes.size(), cudaMemcpyDeviceToHost));
  WEIR_DD_CUDA("export KV", cudaMemcpy(scales.data(), ss, scales.size(), cudaMemcpyDeviceToHost));
  return DecodeKvRows(codes, scales, window ? StoredKind::kWindow : StoredKind::kCompressed, rows);
}

absl::Status DeviceDecoder::Impl::UploadIndexKeys(const LayerDev& L, std::span<const float> keys,
                                                  int64_t first_entry) {
  const int64_t di = c.index_head_dim;
  if (!stored_kv) {
    WEIR_DD_CUDA("import index keys",
                 cudaMemcpy(L.index_k + first_entry * di, keys.data(), keys.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
    return absl::OkStatus();
  }
  std::vector<uint8_t> codes, scales;
  RETURN_IF_ERROR(EncodeKvRows(keys, StoredKind::kIndexKeys, codes, scales));
  WEIR_DD_CUDA("import index keys", cudaMemcpy(L.index_k_codes + first_entry * di / 2, codes.data(),
                                               codes.size(), cudaMemcpyHostToDevice));
  WEIR_DD_CUDA("import index keys",
               cudaMemcpy(L.index_k_scales + first_entry * di / 32, scales.data(), scales.size(),
                          cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Impl::DownloadIndexKeys(const LayerDev& L, std::span<float> keys,
                                                    int64_t first_entry) {
  const int64_t di = c.index_head_dim;
  if (!stored_kv) {
    WEIR_DD_CUDA("export index keys",
                 cudaMemcpy(keys.data(), L.index_k + first_entry * di, keys.size() * sizeof(float),
                            cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<uint8_t> codes(n / 2), scales(n / 32);
  WEIR_DD_CUDA("export index keys", cudaMemcpy(codes.data(), L.index_k_codes + first_entry * di / 2,
                                               codes.size(), cudaMemcpyDeviceToHost));
  WEIR_DD_CUDA("export index keys",
               cudaMemcpy(scales.data(), L.index_k_scales + first_entry * di / 32, scales.size(),
                          cudaMemcpyDeviceToHost));
  return DecodeKvRows(codes, scales, StoredKind::kIndexKeys, keys);
}

const char* DecodeNumericsName(DecodeNumerics n) {
  return n == DecodeNumerics::kFast ? "fast" : "reference";
}

absl::StatusOr<DecodeNumerics> ParseDecodeNumerics(std::string_view name) {
  if (name == "fast") return DecodeNumerics::kFast;
  if (name == "reference") return DecodeNumerics::kReference;
  return absl::InvalidArgumentError(
      absl::StrCat("numerics \"", std::string(name), "\": expected \"fast\" or \"reference\""));
}

DeviceDecoder::DeviceDecoder(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), options_(impl_->options) {}

DeviceDecoder::~DeviceDecoder() = default;

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::Create(
    const Model& model, ActivationPrecision precision, const DeviceDecoderOptions& options) {
  ASSIGN_OR_RETURN(LocalExperts slots,
                   CheckDecodable(model.config(), model.roles(), model.weights(), options));
  ASSIGN_OR_RETURN(EngramHasher hasher,
                   EngramHasher::Create(model.config(), options.engram_token_map));
  auto impl = std::make_unique<Impl>(nullptr, model.config(), model.roles(), model.weights(),
                                     precision, options, std::move(hasher));
  impl->ex = std::move(slots);
  impl->EncodeExperts();
  size_t budget = options.arena_budget_bytes;
  if (budget == 0 && options.memory != nullptr) budget = options.memory->available();
  if (budget > 0) RETURN_IF_ERROR(impl->FitPositions(budget).status());
  Impl* raw = impl.get();
  return raw->Build(std::move(impl));
}

absl::StatusOr<std::unique_ptr<DeviceDecoder>> DeviceDecoder::Impl::Build(
    std::unique_ptr<Impl> self) {
  Impl& m = *this;
  const DeviceDecoderOptions& options = m.options;
  m.Plan();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return absl::UnavailableError("DeviceDecoder: no CUDA device");
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::UnavailableError(absl::StrCat("DeviceDecoder: device ", options.device,
                                               " of ", devices));
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options.device));
  WEIR_DD_CUDA("stream", cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  WEIR_DD_CUDA("stream", cudaStreamCreateWithFlags(&m.side, cudaStreamNonBlocking));
  WEIR_DD_CUDA("event", cudaEventCreateWithFlags(&m.fork_ev, cudaEventDisableTiming));
  WEIR_DD_CUDA("event", cudaEventCreateWithFlags(&m.join_ev, cudaEventDisableTiming));
  WEIR_DD_CUDA("stream", cudaStreamCreateWithFlags(&m.mix_side, cudaStreamNonBlocking));
  WEIR_DD_CUDA("event", cudaEventCreateWithFlags(&m.mix_fork_ev, cudaEventDisableTiming));
  WEIR_DD_CUDA("event", cudaEventCreateWithFlags(&m.mix_join_ev, cudaEventDisableTiming));
  WEIR_DD_CUDA("event", cudaEventCreate(&m.ev_begin));
  WEIR_DD_CUDA("event", cudaEventCreate(&m.ev_end));
  if (m.lsa_exchange()) {  // collective: every rank builds its decoder alike
    const int64_t rows_all = m.ex.world * m.batch_cap,
                  k = std::max<int64_t>(c.n_activated_experts, 1);
    const size_t windows[] = {static_cast<size_t>(rows_all * c.dim) * sizeof(float),
                              static_cast<size_t>(rows_all * k) * sizeof(int32_t),
                              static_cast<size_t>(rows_all * k) * sizeof(float),
                              static_cast<size_t>(m.batch_cap * k * c.dim) * sizeof(float),
                              kc::MoeLsaBarrierBytes(m.ex.world)};
    ASSIGN_OR_RETURN(m.ep_sym,
                     parallel::NcclSymmetricMemory::Create(*options.communicator, windows, 0));
    WEIR_DD_CUDA("abort word", cudaHostAlloc(reinterpret_cast<void**>(&m.lsa_abort_host),
                                             sizeof(int32_t), cudaHostAllocMapped));
    *m.lsa_abort_host = 0;
    void* abort_dev = nullptr;
    WEIR_DD_CUDA("abort word", cudaHostGetDevicePointer(&abort_dev, m.lsa_abort_host, 0));
    m.lsa_abort = static_cast<const int32_t*>(abort_dev);
  }
  Region measure;
  measure.Begin(nullptr);
  RETURN_IF_ERROR(m.Layout(measure));
  m.arena_bytes = measure.used();
  if (options.memory != nullptr) {
    if (options.memory->device() != options.device) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceDecoder: the memory is on device ",
                                                     options.memory->device()));
    }
    ASSIGN_OR_RETURN(m.arena, options.memory->Take(m.arena_bytes, "device decoder"));
  } else if (cudaError_t e = cudaMalloc(&m.arena, m.arena_bytes); e != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat("DeviceDecoder: arena of ", m.arena_bytes,
                                                     " bytes: ", cudaGetErrorString(e)));
  }
  Region region;
  region.Begin(m.arena);
  RETURN_IF_ERROR(m.Layout(region));
  if (m.stored_kv) {
    const int64_t hd = c.head_dim, w = m.window_rows_total, cr = m.pool_rows - w;
    WEIR_DD_CUDA("pool clear", cudaMemset(m.win_codes, 0, w * hd));
    WEIR_DD_CUDA("pool clear", cudaMemset(m.win_scales, 0, w * hd / 32));
    WEIR_DD_CUDA("pool clear", cudaMemset(m.comp_codes, 0, cr * hd / 2));
    WEIR_DD_CUDA("pool clear", cudaMemset(m.comp_scales, 0, cr * hd / 16));
  } else {
    WEIR_DD_CUDA("pool clear",
                 cudaMemset(m.kv_pool, 0, m.pool_rows * c.head_dim * sizeof(float)));
  }
  WEIR_DD_CUDA("load clear", cudaMemset(m.load_routed, 0,
                                        c.n_layers * c.n_routed_experts * sizeof(int64_t)));
  WEIR_DD_CUDA("load clear", cudaMemset(m.load_served, 0, c.n_layers * sizeof(int64_t)));
  WEIR_DD_CUDA("pinned inputs", cudaMallocHost(&m.meta_host, m.meta_bytes));
  std::memset(m.meta_host, 0, m.meta_bytes);
  size_t bytes = 0;
  m.LayoutMeta(m.meta_host, m.meta_h, bytes);
  WEIR_DD_CUDA("pinned logits",
               cudaMallocHost(&m.logits_host, m.batch_cap * c.vocab_size * sizeof(float)));
  WEIR_DD_CUDA("pinned greedy ids", cudaMallocHost(&m.greedy_host, m.batch_cap * sizeof(int32_t)));
  if (options.drafting) {
    WEIR_DD_CUDA("pinned drafts",
                 cudaMallocHost(&m.draft_host, m.batch_cap * (sizeof(int64_t) + sizeof(float))));
  }
  if (!options.row_stable_logits) {
    ASSIGN_OR_RETURN(m.gemm, dense::GemmHandle::Create());
  }
  if (options.prompt_fp8_lt && m.PromptLinears()) {
    ASSIGN_OR_RETURN(m.fp8_lt, dense::Fp8LtGemm::Create());
  }
  m.slot_state.assign(m.slots, {});
  // Block tables: every block free but the padding slot's (the last).
  m.table_dirty.assign(m.slots, 0);
  m.block_owner.assign(m.num_blocks, -1);
  m.free_blocks.clear();
  if (m.table_width > 0) {
    WEIR_DD_CUDA("pinned tables",
                 cudaMallocHost(&m.tables_host, m.slots * m.table_width * sizeof(int32_t)));
    std::fill_n(m.tables_host, m.slots * m.table_width, -1);
    const int pad = m.slots - 1;
    m.table_row(pad)[0] = static_cast<int32_t>(m.num_blocks - 1);
    m.block_owner[m.num_blocks - 1] = pad;
    m.slot_state[pad].blocks = 1;
    if (!options.external_block_tables) {
      for (int64_t b = m.num_blocks - 2; b >= 0; --b) {
        m.free_blocks.push_back(static_cast<int32_t>(b));
      }
    }
    WEIR_DD_CUDA("block tables",
                 cudaMemcpy(m.tables_dev, m.tables_host, m.slots * m.table_width * sizeof(int32_t),
                            cudaMemcpyHostToDevice));
  }
  WEIR_DD_CUDA("upload", cudaStreamSynchronize(m.stream));
  WEIR_DD_CUDA("upload", cudaDeviceSynchronize());
  RETURN_IF_ERROR(m.CheckTileForm());
  m.encoded.clear();  // the host copies are on the device now
  m.fp8_dense.clear();
  m.bf16_exact.clear();
  std::unique_ptr<DeviceDecoder> dd(new DeviceDecoder(std::move(self)));
  DeviceDecoderStats& st = dd->stats_;
  st.arena_bytes = m.arena_bytes;
  st.weight_bytes = m.weight_bytes;
  st.pool_bytes = m.pool_bytes;
  st.kv_pools = m.kv_pools;
  st.expert_bytes = m.expert_bytes;
  st.embed_bytes = m.embed_bytes;
  st.mxfp4_layers = m.mxfp4_layers;
  st.tile_form_layers = m.tile_form_layers;
  st.tile_resident_bytes = m.tile_resident_bytes;
  st.fast_dense = m.fast_dense;
  st.bf16_dense = m.bf16_dense;
  st.stored_kv = m.stored_kv;
  st.stored_wo_a = m.stored_wo_a;
  st.reference_dense = m.reference_dense;
  st.fast_moe_layers = m.fast_moe_layers;
  return dd;
}

absl::Status DeviceDecoder::Start(int slot) {
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("Start: slot ", slot, " of ",
                                                   options_.max_sequences));
  }
  Impl& m = *impl_;
  if (!options_.external_block_tables) m.DropTable(slot);
  Impl::Slot& s = m.slot_state[slot];
  s.used = true;
  s.length = 0;
  s.history.clear();
  s.prompt_end = 0;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::SetPromptEnd(int slot, int64_t positions) {
  if (slot < 0 || slot >= options_.max_sequences || !impl_->slot_state[slot].used ||
      positions < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetPromptEnd: slot ", slot, " of ", options_.max_sequences,
                     " holding a sequence, positions ", positions, " >= 0"));
  }
  impl_->slot_state[slot].prompt_end = positions;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Import(int slot, const SequenceState& state) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("Import: slot ", slot, " of ",
                                                   options_.max_sequences));
  }
  if (state.num_layers() != m.roles.size() || state.broken()) {
    return absl::InvalidArgumentError("Import: the state is broken or of another model");
  }
  const int64_t len = state.length();
  if (len < 1 || len >= options_.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat("Import: the state holds ", len,
                                                   " positions; the slot takes 1 to ",
                                                   options_.max_positions - 1));
  }
  if (m.hasher.num_layers() > 0 && static_cast<int64_t>(state.engram_history().size()) != len) {
    return absl::InvalidArgumentError("Import: the Engram history does not match the length");
  }
  // The blocks of its compressed entries: from the free list (own tables;
  // the slot's old ones first go back) or the table set by the caller.
  if (!options_.external_block_tables) {
    m.DropTable(slot);
    if (!m.GrowTable(slot, m.BlocksFor(len))) {
      return absl::InvalidArgumentError(
          absl::StrCat("Import: ", len, " positions need ", m.BlocksFor(len), " KV blocks; ",
                       m.free_blocks.size(), " of ", m.num_blocks - 1, " are free"));
    }
  } else if (m.slot_state[slot].blocks < m.BlocksFor(len)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Import: ", len, " positions need ", m.BlocksFor(len), " KV blocks; slot ",
                     slot, "'s table holds ", m.slot_state[slot].blocks, " (SetBlockTable)"));
  }
  // A failed copy leaves the slot empty (its own blocks back in the pool).
  m.slot_state[slot].used = false;
  absl::Status copied = [&]() -> absl::Status {
    WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
    const int64_t win = m.window(), rg = m.ring(), hd = c.head_dim, di = c.index_head_dim;
    std::vector<float> block;
    for (int l = 0; l < m.held_layers(); ++l) {  // the DSpark stages' rings too
      const LayerRole& role = m.roles[l];
      const LayerDev& L = m.layers[l];
      block.assign(rg * hd, 0.0f);
      for (int64_t p = std::max<int64_t>(0, len - win); p < len; ++p) {
        std::span<const float> row = state.window(l).Row(p);
        std::copy(row.begin(), row.end(), block.begin() + (p % rg) * hd);
      }
      RETURN_IF_ERROR(m.UploadKv(block, /*window=*/true, L.window_base + int64_t{slot} * rg));
      if (role.attention != AttentionRole::kFull) continue;
      const int r = role.ratio;
      const int64_t e = m.entries_per_block(r), entries = len / r;
      const KvSourceState& src = state.kv_source(l);
      const CompressedKvStore& store = state.compressed();
      if (store.entries(l) != entries) {
        return absl::InvalidArgumentError(absl::StrCat("Import: layer ", l, " holds ",
                                                       store.entries(l),
                                                       " compressed entries, expected ", entries));
      }
      if (entries > 0) {
        // Gathered from the state's store (paged blocks on a worker), then
        // into the slot's blocks, block by block.
        std::vector<float> kv_rows(entries * hd), key_rows(entries * di);
        store.ReadKv(l, 0, kv_rows);
        store.ReadIndexK(l, 0, key_rows);
        for (int64_t j = 0; j < entries; j += e) {
          const int64_t n = std::min(e, entries - j), row = m.EntryRow(slot, r, j);
          RETURN_IF_ERROR(m.UploadKv(std::span<const float>(kv_rows).subspan(j * hd, n * hd),
                                     /*window=*/false, L.comp_base + row));
          RETURN_IF_ERROR(
              m.UploadIndexKeys(L, std::span<const float>(key_rows).subspan(j * di, n * di), row));
        }
      }
      if (r > 1) {  // the partial group, position p at ring row p % sr
        const int64_t sr = m.state_rows(r);
        std::vector<float> kv(sr * hd, 0.0f), score(sr * hd, 0.0f);
        for (int64_t p = len - len % r; p < len; ++p) {
          std::span<const float> row = src.pending.Row(p);
          std::copy_n(row.data(), hd, kv.data() + (p % sr) * hd);
          std::copy_n(row.data() + hd, hd, score.data() + (p % sr) * hd);
        }
        WEIR_DD_CUDA("import compressor",
                     cudaMemcpy(L.comp_kv_state + int64_t{slot} * sr * hd, kv.data(),
                                kv.size() * sizeof(float), cudaMemcpyHostToDevice));
        WEIR_DD_CUDA("import compressor",
                     cudaMemcpy(L.comp_score_state + int64_t{slot} * sr * hd, score.data(),
                                score.size() * sizeof(float), cudaMemcpyHostToDevice));
      }
    }
    return absl::OkStatus();
  }();
  if (!copied.ok()) {
    if (!options_.external_block_tables) m.DropTable(slot);
    return copied;
  }
  Impl::Slot& s = m.slot_state[slot];
  s.used = true;
  s.length = len;
  s.history = state.engram_history();
  s.prompt_end = 0;
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Export(int slot, SequenceState& state) {
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  if (slot < 0 || slot >= options_.max_sequences || !m.slot_state[slot].used) {
    return absl::InvalidArgumentError(absl::StrCat("Export: slot ", slot, " holds no sequence"));
  }
  const Impl::Slot& s = m.slot_state[slot];
  const int64_t len = s.length;
  if (state.num_layers() != m.roles.size() || state.length() > len) {
    return absl::InvalidArgumentError(absl::StrCat("Export: the state holds ", state.length(),
                                                   " positions, the slot ", len,
                                                   ", or belongs to another model"));
  }
  WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
  const int64_t win = m.window(), rg = m.ring(), hd = c.head_dim, di = c.index_head_dim;
  std::vector<float> block(rg * hd);
  for (int l = 0; l < m.held_layers(); ++l) {  // the DSpark stages' rings too
    const LayerRole& role = m.roles[l];
    const LayerDev& L = m.layers[l];
    RETURN_IF_ERROR(m.DownloadKv(block, /*window=*/true, L.window_base + int64_t{slot} * rg));
    for (int64_t p = std::max<int64_t>(0, len - win); p < len; ++p) {
      std::span<float> row = state.window(l).Row(p);
      std::copy_n(block.data() + (p % rg) * hd, hd, row.data());
    }
    if (role.attention != AttentionRole::kFull) continue;
    const int r = role.ratio;
    const int64_t e = m.entries_per_block(r), entries = len / r;
    KvSourceState& src = state.kv_source(l);
    std::vector<float> kv_rows(entries * hd), key_rows(entries * di);
    for (int64_t j = 0; j < entries; j += e) {  // block by block through the table
      const int64_t n = std::min(e, entries - j), row = m.EntryRow(slot, r, j);
      RETURN_IF_ERROR(m.DownloadKv(std::span<float>(kv_rows).subspan(j * hd, n * hd),
                                   /*window=*/false, L.comp_base + row));
      RETURN_IF_ERROR(
          m.DownloadIndexKeys(L, std::span<float>(key_rows).subspan(j * di, n * di), row));
    }
    // Into the state's own store (a worker's paged blocks, which the plans
    // kept growing while the sequence lived here).
    state.compressed().Truncate(l, 0);
    if (absl::Status st = state.compressed().Append(l, kv_rows, key_rows); !st.ok()) {
      state.MarkBroken();
      return absl::Status(st.code(), absl::StrCat("Export: layer ", l, ": ", st.message()));
    }
    if (r > 1) {
      const int64_t sr = m.state_rows(r);  // position p at ring row p % sr
      std::vector<float> kv(sr * hd), score(sr * hd);
      WEIR_DD_CUDA("export compressor",
                   cudaMemcpy(kv.data(), L.comp_kv_state + int64_t{slot} * sr * hd,
                              kv.size() * sizeof(float), cudaMemcpyDeviceToHost));
      WEIR_DD_CUDA("export compressor",
                   cudaMemcpy(score.data(), L.comp_score_state + int64_t{slot} * sr * hd,
                              score.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (int64_t p = len - len % r; p < len; ++p) {
        std::span<float> row = src.pending.Row(p);
        std::copy_n(kv.data() + (p % sr) * hd, hd, row.data());
        std::copy_n(score.data() + (p % sr) * hd, hd, row.data() + hd);
      }
    }
  }
  state.engram_history() = s.history;
  state.Advance(len - state.length());
  return absl::OkStatus();
}

absl::Status DeviceDecoder::Release(int slot) {
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat("Release: slot ", slot));
  }
  impl_->DropTable(slot);
  impl_->slot_state[slot] = {};
  return absl::OkStatus();
}

absl::Status DeviceDecoder::SetBlockTable(int slot, std::span<const int32_t> blocks) {
  Impl& m = *impl_;
  if (!options_.external_block_tables) {
    return absl::InvalidArgumentError(
        "SetBlockTable: the decoder keeps its own tables (options.external_block_tables)");
  }
  if (slot < 0 || slot >= options_.max_sequences) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetBlockTable: slot ", slot, " of ", options_.max_sequences));
  }
  const int64_t n = static_cast<int64_t>(blocks.size());
  const int64_t needed = m.slot_state[slot].used ? m.BlocksFor(m.slot_state[slot].length) : 0;
  if (n > m.table_width || n < needed) {
    return absl::InvalidArgumentError(absl::StrCat("SetBlockTable: ", n, " blocks for slot ", slot,
                                                   " (", needed, " to ", m.table_width, ")"));
  }
  absl::flat_hash_set<int32_t> seen;
  for (int32_t b : blocks) {
    if (b < 0 || b >= m.num_blocks - 1 || !seen.insert(b).second ||
        (m.block_owner[b] != -1 && m.block_owner[b] != slot)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetBlockTable: block ", b, " for slot ", slot, " is outside the pool's ",
                       m.num_blocks - 1, ", repeated or held by slot ",
                       b >= 0 && b < m.num_blocks - 1 ? m.block_owner[b] : -1));
    }
  }
  // The entries of a sequence that lives on stay where they are: its blocks
  // must keep their places in the table.
  const int32_t* row = m.table_row(slot);
  for (int64_t j = 0; j < needed; ++j) {
    if (row[j] != blocks[j]) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetBlockTable: slot ", slot, "'s block ", j, " holds entries (block ",
                       row[j], "), the new table puts block ", blocks[j], " there"));
    }
  }
  m.DropTable(slot);
  int32_t* out = m.table_row(slot);
  for (int64_t j = 0; j < n; ++j) {
    out[j] = blocks[j];
    m.block_owner[blocks[j]] = slot;
  }
  m.slot_state[slot].blocks = n;
  m.table_dirty[slot] = 1;
  return absl::OkStatus();
}

int DeviceDecoder::kv_block_tokens() const { return impl_->block_tokens; }
int64_t DeviceDecoder::table_width() const { return impl_->table_width; }
int64_t DeviceDecoder::kv_blocks() const { return impl_->num_blocks - 1; }
int64_t DeviceDecoder::free_kv_blocks() const {
  if (!options_.external_block_tables) return static_cast<int64_t>(impl_->free_blocks.size());
  return std::count(impl_->block_owner.begin(), impl_->block_owner.end() - 1, -1);
}
int64_t DeviceDecoder::BlocksFor(int64_t positions) const { return impl_->BlocksFor(positions); }

bool DeviceDecoder::collective() const { return impl_->ex.world > 1; }

int64_t DeviceDecoder::length(int slot) const {
  if (slot < 0 || slot >= options_.max_sequences) return 0;
  return impl_->slot_state[slot].length;
}

absl::Status DeviceDecoder::Rollback(int slot, int64_t length) {
  if (slot < 0 || slot >= options_.max_sequences || !impl_->slot_state[slot].used) {
    return absl::InvalidArgumentError(absl::StrCat("Rollback: slot ", slot, " holds no sequence"));
  }
  Impl::Slot& s = impl_->slot_state[slot];
  if (length < 0 || length > s.length || s.length - length > options_.max_rollback) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rollback: slot ", slot, " holds ", s.length, " positions; it can go back to ",
                     std::max<int64_t>(0, s.length - options_.max_rollback), " .. ", s.length,
                     ", not ", length, " (max_rollback ", options_.max_rollback, ")"));
  }
  // Everything on the device is addressed by position: the rings' rows of
  // the undone positions are rewritten before they are read again, entries
  // past the length are invisible until rewritten, and the blocks stay with
  // the slot. The host keeps the length and the Engram history.
  s.length = length;
  if (static_cast<int64_t>(s.history.size()) > length) s.history.resize(length);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DeviceDecoder::Step(std::span<const int> slots,
                                                       std::span<const int64_t> tokens) {
  absl::StatusOr<std::span<const float>> view = StepView(slots, tokens);
  if (!view.ok()) return view.status();
  return std::vector<float>(view->begin(), view->end());
}

absl::StatusOr<std::span<const float>> DeviceDecoder::StepView(std::span<const int> slots,
                                                               std::span<const int64_t> tokens) {
  return StepRows(slots, tokens, std::nullopt);
}

absl::Status DeviceDecoder::LaunchGraph(int64_t key, absl::FunctionRef<absl::Status()> enqueue) {
  Impl& m = *impl_;
  auto it = m.graphs.find(key);
  if (it == m.graphs.end()) {
    WEIR_DD_CUDA("begin capture",
                 cudaStreamBeginCapture(m.stream, cudaStreamCaptureModeThreadLocal));
    absl::Status enq = enqueue();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(m.stream, &graph);
    if (!enq.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return enq;
    }
    if (end != cudaSuccess) return CudaError("end capture", end);
    size_t nodes = 0;
    if (cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess) {
      stats_.graph_nodes = static_cast<int64_t>(nodes);
    }
    stats_.programmatic_edges = 0;
    if (options_.programmatic_launch) {
      absl::StatusOr<int64_t> edges = kernels::cuda::MakeKernelEdgesProgrammatic(graph);
      if (!edges.ok()) {
        cudaGraphDestroy(graph);
        return edges.status();
      }
      stats_.programmatic_edges = *edges;
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (inst != cudaSuccess) return CudaError("instantiate", inst);
    it = m.graphs.emplace(key, exec).first;
    ++stats_.graph_captures;
  }
  WEIR_DD_CUDA("graph launch", cudaGraphLaunch(it->second, m.stream));
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> DeviceDecoder::StepRows(
    std::span<const int> slots, std::span<const int64_t> tokens,
    std::optional<std::span<const int>> logit_rows) {
  ASSIGN_OR_RETURN(const int64_t asked, StepInto(slots, tokens, logit_rows, /*greedy=*/false));
  return std::span<const float>(impl_->logits_host, asked * impl_->c.vocab_size);
}

static_assert(DecodeBackend::kGreedyNonFinite == kernels::cuda::dense::kArgmaxNonFinite &&
              DecodeBackend::kGreedyAllMasked == kernels::cuda::dense::kArgmaxAllMasked);

absl::StatusOr<std::span<const int32_t>> DeviceDecoder::StepRowsGreedy(
    std::span<const int> slots, std::span<const int64_t> tokens,
    std::optional<std::span<const int>> logit_rows) {
  ASSIGN_OR_RETURN(const int64_t asked, StepInto(slots, tokens, logit_rows, /*greedy=*/true));
  return std::span<const int32_t>(impl_->greedy_host, asked);
}

absl::StatusOr<int64_t> DeviceDecoder::StepInto(std::span<const int> slots,
                                                std::span<const int64_t> tokens,
                                                std::optional<std::span<const int>> logit_rows,
                                                bool greedy) {
  const auto t0 = Clock::now();
  Impl& m = *impl_;
  const ModelConfig& c = m.c;
  const int64_t rows = static_cast<int64_t>(slots.size());
  const bool collective = m.ex.world > 1;
  absl::Status valid = [&]() -> absl::Status {
    if ((rows == 0 && !collective) || rows > options_.max_batch || tokens.size() != slots.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Step: ", rows, " slots and ", tokens.size(),
                                                     " tokens (", collective ? 0 : 1, " to ",
                                                     options_.max_batch, ")"));
    }
    absl::flat_hash_set<int> seen;
    int64_t run = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const int s = slots[i];
      if (s < 0 || s >= options_.max_sequences || !m.slot_state[s].used) {
        return absl::InvalidArgumentError(absl::StrCat("Step: row ", i, " names slot ", s,
                                                       ", which holds no sequence"));
      }
      run = i > 0 && slots[i - 1] == s ? run + 1 : 1;
      if (run == 1 && !seen.insert(s).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("Step: slot ", s, " appears in rows that are not adjacent"));
      }
      if (run > options_.max_rows_per_slot) {
        return absl::InvalidArgumentError(absl::StrCat("Step: slot ", s, " has more than ",
                                                       options_.max_rows_per_slot,
                                                       " rows (max_rows_per_slot)"));
      }
      if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("Step: token ", tokens[i], " of row ", i,
                                                       ", vocabulary has ", c.vocab_size));
      }
      if (m.slot_state[s].length + run > options_.max_positions) {
        return absl::OutOfRangeError(absl::StrCat("Step: slot ", s, " is full (",
                                                  options_.max_positions, " positions)"));
      }
    }
    RETURN_IF_ERROR(CheckLogitRows(logit_rows, rows));
    // The KV blocks the rows write: each slot's table must cover its new
    // length (own tables grow here, all or nothing).
    std::vector<std::pair<int, int64_t>> grow;  // slot, blocks it needs
    int64_t wanted = 0;
    for (int64_t i = 0; i < rows; ++i) {
      if (i + 1 < rows && slots[i + 1] == slots[i]) continue;  // a run's last row
      const int s = slots[i];
      int64_t run = 1;
      while (i - run >= 0 && slots[i - run] == s) ++run;
      const int64_t need = m.BlocksFor(m.slot_state[s].length + run);
      if (need <= m.slot_state[s].blocks) continue;
      if (options_.external_block_tables) {
        return absl::OutOfRangeError(absl::StrCat(
            "Step: slot ", s, " needs ", need, " KV blocks for ", m.slot_state[s].length + run,
            " positions; its table holds ", m.slot_state[s].blocks, " (SetBlockTable)"));
      }
      grow.emplace_back(s, need);
      wanted += need - m.slot_state[s].blocks;
    }
    if (wanted > static_cast<int64_t>(m.free_blocks.size())) {
      return absl::OutOfRangeError(absl::StrCat("Step: the rows need ", wanted, " more KV blocks; ",
                                                m.free_blocks.size(), " of ", m.num_blocks - 1,
                                                " are free"));
    }
    for (const auto& [s, need] : grow) m.GrowTable(s, need);
    return absl::OkStatus();
  }();
  if (!valid.ok()) {
    // The peers of a collective step wait for this rank's blocks: join with
    // no rows, then refuse.
    if (collective) {
      if (absl::Status joined = StepView({}, {}).status(); !joined.ok()) return joined;
    }
    return valid;
  }
  // Every row asked, in order: the plain head (no gather).
  if (logit_rows.has_value() && static_cast<int64_t>(logit_rows->size()) == rows) {
    logit_rows = std::nullopt;  // validated ascending and in range: 0 .. rows - 1
  }
  const int64_t interval = options_.batch_interval;
  // A collective step has the same padded size on every rank (block sizes).
  const int64_t padded = collective ? m.batch_cap : (rows + interval - 1) / interval * interval;
  // The head's rows: every row (-1), or the asked ones padded the same way.
  const int64_t asked = logit_rows.has_value() ? static_cast<int64_t>(logit_rows->size()) : rows;
  const int64_t head_padded =
      logit_rows.has_value() ? std::min(padded, (asked + interval - 1) / interval * interval) : -1;
  const std::span<const int> head_rows =
      logit_rows.has_value() ? *logit_rows : std::span<const int>();
  absl::Status st = [&]() -> absl::Status {
    WEIR_DD_CUDA("set device", cudaSetDevice(options_.device));
    ASSIGN_OR_RETURN(const bool runs, m.PrepareMeta(slots, tokens, padded, head_rows, head_padded));
    // Large steps (prefill chunks) launch eagerly: their launch overhead is
    // small beside their work, and a graph per padded size would be
    // captured on first use.
    const bool graph_step = options_.use_graphs && padded <= options_.graph_max_rows;
    // prompt_kv_mirror on eager steps only: a captured graph would replay one
    // step's mirror grid (its sequences and rows) for another; the same for
    // the FP8 products over the generated rows' ranges alone.
    m.mirror_step_ = m.mirror_sequences_ > 0 && !graph_step;
    m.fp8_span_step_ = options_.fp8_span_products && !m.fp8_spans_.empty() && !graph_step;
    WEIR_DD_CUDA("event", cudaEventRecord(m.ev_begin, m.stream));
    if (graph_step) {
      const int64_t key =
          (((padded * (m.batch_cap + 2) + head_padded + 1) * 2 + (runs ? 1 : 0)) * 4 + m.roles_) *
              4 +
          m.linear_roles_;
      RETURN_IF_ERROR(LaunchGraph(key, [&] { return m.Enqueue(padded, head_padded, runs); }));
      ++stats_.graph_launches;
    } else {
      m.profiling = options_.profile;
      m.prof_used = 0;
      absl::Status enq = m.Enqueue(padded, head_padded, runs);
      m.Mark(nullptr);
      m.profiling = false;
      RETURN_IF_ERROR(enq);
      ++stats_.eager_steps;
    }
    stats_.x16_panels = m.x16_panels;
    stats_.shared_key_scores = m.shared_key_scores;
    stats_.mma_key_scores = m.mma_key_scores;
    stats_.decode_mma_key_scores = m.decode_mma_key_scores;
    stats_.expert_out_bf16_layers = m.expert_out_bf16_layers;
    stats_.kv_mirrors = m.kv_mirrors;
    stats_.fused_ropes = m.fused_ropes;
    stats_.fused_kv_rows = m.fused_kv_rows;
    stats_.folded_row_ops = m.folded_row_ops;
    stats_.direct_wo_a = m.direct_wo_a;
    stats_.fused_swiglu_fp8 = m.fused_swiglu_fp8;
    stats_.fused_expert_swiglus = m.fused_expert_swiglus;
    stats_.bf16_gate_up_layers = m.bf16_gate_up_layers;
    stats_.route_x256_layers = m.route_x256_layers;
    stats_.route_decode_mma_layers = m.route_decode_mma_layers;
    stats_.route_h_bf16_layers = m.route_h_bf16_layers;
    stats_.route_x_gathered_layers = m.route_x_gathered_layers;
    stats_.route_swiglu_layers = m.route_swiglu_layers;
    stats_.bf16_branches = m.bf16_branches;
    stats_.reduce_fp8_out = m.reduce_fp8_out;
    stats_.widened_wo_a = m.widened_wo_a;
    stats_.prompt_bf16_products = m.prompt_bf16_products;
    stats_.cutlass_products = m.cutlass_products;
    stats_.fp8_lt_products = m.fp8_lt_products;
    stats_.prompt_gate_products = m.prompt_gate_products;
    stats_.prompt_gate_norm_inputs = m.prompt_gate_norm_inputs;
    stats_.prompt_norm_dequant_inputs = m.prompt_norm_dequant_inputs;
    stats_.prompt_tf32_mixes = m.prompt_tf32_mixes;
    stats_.prompt_bf16_expert_layers = m.prompt_bf16_expert_layers;
    stats_.fp8_span_products = m.fp8_span_products;
    WEIR_DD_CUDA("event", cudaEventRecord(m.ev_end, m.stream));
    if (asked > 0 && greedy) {  // the argmax of each asked row, 4 bytes a row back
      RETURN_IF_ERROR(kernels::cuda::dense::ArgmaxRows(
          {.logits = m.logits, .rows = asked, .vocab = c.vocab_size, .ids = m.greedy_ids},
          m.stream));
      WEIR_DD_CUDA("greedy ids",
                   cudaMemcpyAsync(m.greedy_host, m.greedy_ids, asked * sizeof(int32_t),
                                   cudaMemcpyDeviceToHost, m.stream));
    } else if (asked > 0) {
      WEIR_DD_CUDA("logits",
                   cudaMemcpyAsync(m.logits_host, m.logits, asked * c.vocab_size * sizeof(float),
                                   cudaMemcpyDeviceToHost, m.stream));
    }
    if (options_.communicator != nullptr) {
      // Bounded by the communicator's timeout (a dead peer does not hang the step).
      if (absl::Status synced = options_.communicator->Synchronize(
              {.memory = parallel::MemoryKind::kDevice, .stream = m.stream});
          !synced.ok()) {
        // A lost peer: the exchange's barriers stop waiting, the stream
        // drains, and the decoder stays broken with its communicator.
        if (m.lsa_abort_host != nullptr) {
          *m.lsa_abort_host = 1;
          cudaStreamSynchronize(m.stream);
        }
        return synced;
      }
      const int64_t k = c.n_activated_experts;
      // The fixed blocks' bytes (the device-initiated exchange sends what the
      // routing asks for: not counted here).
      if (!m.lsa_exchange()) {
        stats_.exchange_bytes +=
            int64_t{c.n_layers} * (m.ex.world - 1) * padded * (c.dim + 2 * k + k * c.dim) * 4;
      }
    } else {
      WEIR_DD_CUDA("step", cudaStreamSynchronize(m.stream));
    }
    float ms = 0;
    WEIR_DD_CUDA("event", cudaEventElapsedTime(&ms, m.ev_begin, m.ev_end));
    stats_.device_seconds += ms / 1e3;
    for (size_t i = 0; i + 1 < m.prof_used; ++i) {
      float section = 0;
      if (cudaEventElapsedTime(&section, m.prof_events[i], m.prof_events[i + 1]) == cudaSuccess) {
        stats_.section_seconds[m.prof_names[i]] += section / 1e3;
      }
    }
    m.prof_used = 0;
    return absl::OkStatus();
  }();
  if (!st.ok()) {
    // After an NCCL failure the communicator has aborted its kernels, so the
    // stream drains.
    cudaStreamSynchronize(m.stream);
    cudaGetLastError();
    for (int s : slots) {
      m.DropTable(s);
      m.slot_state[s] = {};
    }
    return absl::Status(
        st.code() == absl::StatusCode::kUnavailable ? st.code() : absl::StatusCode::kInternal,
        absl::StrCat("DeviceDecoder step: ", st.message()));
  }
  for (int64_t i = 0; i < rows; ++i) {
    Impl::Slot& s = m.slot_state[slots[i]];
    s.history.push_back(m.hasher.Compress(tokens[i]));
    ++s.length;
  }
  ++stats_.steps;
  stats_.rows += rows;
  stats_.prompt_shape_rows += m.prompt_shape_rows_;
  stats_.host_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  return asked;
}

}  // namespace weir::model
