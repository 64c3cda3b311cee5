// DeviceDecoder: the upload of the weights into the arena (dense layers,
// routed experts as MXFP4 where they re-encode exactly, synthetic draws) and
// the RoPE tables.

#include <optional>
#include <span>

#include "worker/model/device_decoder_impl.h"

namespace weir::model {
using device_decoder_internal::EncodeMxfp4Exactly;

namespace device_decoder_internal {

// Encodes `w` as MXFP4; false unless decoding gives `w` back bit for bit.
bool EncodeMxfp4Exactly(const DenseWeight& w, std::vector<uint8_t>& codes,
                        std::vector<uint8_t>& scales) {
  if (w.in % 32 != 0 || w.out <= 0 || static_cast<int64_t>(w.w.size()) != w.out * w.in) {
    return false;
  }
  codes.assign(w.out * w.in / 2, 0);
  scales.assign(w.out * w.in / 32, 0);
  std::vector<float> back(w.w.size());
  return kernels::cpu::QuantizeMxfp4Weight(w.w, w.out, w.in, codes, scales).ok() &&
         kernels::cpu::DequantizeMxfp4Weight(codes, scales, w.out, w.in, back).ok() &&
         std::memcmp(back.data(), w.w.data(), back.size() * sizeof(float)) == 0;
}

}  // namespace device_decoder_internal

const device_decoder_internal::EncodedDense* DeviceDecoder::Impl::Fp8Form(const DenseWeight& w,
                                                                          bool any_activation) {
  if ((!w.fp8_activation && !any_activation) || w.in % 32 != 0 || w.out <= 0 ||
      static_cast<int64_t>(w.w.size()) != w.out * w.in) {
    return nullptr;
  }
  auto [it, fresh] = fp8_dense.try_emplace(&w);
  EncodedDense& e = it->second;
  if (fresh) {
    e.codes.assign(w.out * w.in, 0);
    e.scales.assign(cpu::Fp8WeightScaleCount(w.out, w.in, 32), 0);
    std::vector<float> back(w.w.size());
    e.exact = cpu::QuantizeFp8Weight(w.w, w.out, w.in, 32, e.codes, e.scales).ok() &&
              cpu::DequantizeFp8Weight(e.codes, e.scales, w.out, w.in, 32, back).ok() &&
              std::memcmp(back.data(), w.w.data(), back.size() * sizeof(float)) == 0;
    if (!e.exact) {
      e.codes.clear();
      e.scales.clear();
    }
  }
  return e.exact ? &e : nullptr;
}

// Encodes the routed experts as MXFP4 where every expert of a layer
// re-encodes exactly (real weights only).
void DeviceDecoder::Impl::EncodeExperts() {
  encoded.assign(held_layers(), {});
  if (!options.mxfp4_experts || seed != 0) return;
  for (int l = 0; l < held_layers(); ++l) {
    std::vector<EncodedExpert> layer;
    bool exact = true;
    for (int slot : ex.local[l]) {
      const ExpertWeightsF32& e = wts.layers[l].ffn.experts[slot];
      EncodedExpert enc;
      const DenseWeight* m[3] = {&e.w1, &e.w3, &e.w2};
      for (int k = 0; k < 3 && exact; ++k) {
        exact = EncodeMxfp4Exactly(*m[k], enc.codes[k], enc.scales[k]);
      }
      if (!exact) break;
      layer.push_back(std::move(enc));
    }
    if (exact && !layer.empty()) encoded[l] = std::move(layer);
  }
}

absl::Status DeviceDecoder::Impl::LayoutWeights(Region& r, int64_t& max_in) {
  const ModelWeights& w = wts;
  const int64_t d = c.dim;
  const bool live = r.live();
  fills = 0;
  expert_bytes = 0;
  mxfp4_layers = 0;
  fast_dense = bf16_dense = reference_dense = fast_moe_layers = stored_wo_a = 0;
  // --- weights
  if (w.embed.empty() && seed != 0) {
    float* e = r.Alloc<float>(c.vocab_size * d);
    if (live) Fill(e, c.vocab_size * d, 1.0f);
    embed = e;
  } else {
    embed = r.Put(w.embed);
  }
  embed_bytes = static_cast<size_t>(c.vocab_size * d) * sizeof(float);
  final_norm = r.Put(w.norm);
  layers.assign(held_layers(), LayerDev{});
  max_in = std::max<int64_t>(w.head.in, 1);
  // kFast: a dense FP8 linear in its stored form (real weights: when they
  // re-encode exactly; synthetic: random e4m3 codes without NaN, one scale
  // so values stay below about 2 / sqrt(in)).
  auto fp8_form = [&](const DenseWeight& dw) -> std::optional<DevDense> {
    if (!fast() || dw.out * dw.in == 0) return std::nullopt;
    DevDense d{.out = dw.out, .in = dw.in, .fp8 = true};
    if (seed != 0 && dw.w.empty()) {
      if (!dw.fp8_activation || dw.in % 32 != 0) return std::nullopt;
      uint8_t* cp = r.Alloc<uint8_t>(dw.out * dw.in);
      const int64_t n_scales = cpu::Fp8WeightScaleCount(dw.out, dw.in, 32);
      uint8_t* sp = r.Alloc<uint8_t>(n_scales);
      if (live && fill_status.ok()) {
        ++fills;
        fill_status = dec::RandomBytes(
            {.x = cp, .n = dw.out * dw.in, .seed = seed * 7919 + fills, .mask = 0xBF}, stream);
        const int exponent = static_cast<int>(
            std::lround(std::log2(1.0 / std::sqrt(static_cast<double>(dw.in)))));
        if (cudaError_t e2 = cudaMemsetAsync(sp, 127 + exponent, n_scales, stream);
            e2 != cudaSuccess && fill_status.ok()) {
          fill_status = device_decoder_internal::CudaError("synthetic scales", e2);
        }
      }
      d.codes = cp;
      d.scales = sp;
      return d;
    }
    const EncodedDense* e = Fp8Form(dw);
    if (e == nullptr) return std::nullopt;
    d.codes = r.Put(e->codes);
    d.scales = r.Put(e->scales);
    return d;
  };
  // Whether every value of a real weight is a bf16 value: decided once per
  // weight, by its values' address (every layout pass must agree).
  auto bf16_values = [&](std::span<const float> w) {
    auto [it, fresh] = bf16_exact.try_emplace(w.data(), true);
    if (fresh) {
      for (float v : w) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        if ((b & 0xFFFFu) != 0) {  // not a bf16 value
          it->second = false;
          break;
        }
      }
    }
    return it->second;
  };
  // Room for bf16 values' bits (the measuring pass), or their bits uploaded.
  auto put_bf16 = [&](std::span<const float> w) -> const uint16_t* {
    if (!live) return r.Alloc<uint16_t>(static_cast<int64_t>(w.size()));
    std::vector<uint16_t> bits(w.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      uint32_t b;
      std::memcpy(&b, &w[i], 4);
      bits[i] = static_cast<uint16_t>(b >> 16);
    }
    return r.Put(bits);
  };
  // kFast with bf16 activations: a bf16 linear in bf16 (real weights: when
  // every value is a bf16 value; synthetic: drawn as bf16).
  auto bf16_form = [&](const DenseWeight& dw) -> std::optional<DevDense> {
    if (!fast() || !bf16() || !options.fast_bf16 || dw.fp8_activation || dw.out * dw.in == 0 ||
        dw.in % 8 != 0) {
      return std::nullopt;
    }
    DevDense d{.out = dw.out, .in = dw.in};
    if (dw.w.empty()) {
      if (seed == 0) return std::nullopt;
      uint16_t* p = r.Alloc<uint16_t>(dw.out * dw.in);
      ++fills;
      if (live && fill_status.ok()) {
        fill_status = dec::RandomFill({.bf16 = p, .n = dw.out * dw.in,
                                       .seed = seed * 1000003 + fills,
                                       .scale = 1.0f / std::sqrt(static_cast<float>(dw.in))},
                                      stream);
      }
      d.bf16 = p;
      return d;
    }
    if (!bf16_values(dw.w)) return std::nullopt;
    d.bf16 = put_bf16(dw.w);
    return d;
  };
  // The fp32 form (the reference kernel's).
  auto dense_fp32 = [&](const DenseWeight& dw) {
    max_in = std::max(max_in, dw.in);
    if (!dw.w.empty() || seed == 0 || dw.out * dw.in == 0) return r.Put(dw);
    float* p = r.Alloc<float>(dw.out * dw.in);
    if (live) Fill(p, dw.out * dw.in, 1.0f / std::sqrt(static_cast<float>(dw.in)));
    return DevDense{.w = p, .out = dw.out, .in = dw.in, .fp8 = dw.fp8_activation};
  };
  // A linear run by Mm: stored FP8 with kFast where it has that form.
  auto dense = [&](const DenseWeight& dw) {
    max_in = std::max(max_in, dw.in);
    if (std::optional<DevDense> f = fp8_form(dw)) {
      ++fast_dense;
      return *f;
    }
    if (std::optional<DevDense> f = bf16_form(dw)) {
      ++fast_dense;
      ++bf16_dense;
      return *f;
    }
    if (fast() && dw.out * dw.in > 0) ++reference_dense;
    return dense_fp32(dw);
  };
  // stored_wo_a: a bf16 wo_a group held as the FP8 it re-encodes to exactly
  // (real weights: bf16 values that QuantizeFp8Weight gives back bit for bit,
  // which V4.1's checkpoint wo_a, stored FP8, always does; synthetic: random
  // e4m3 codes as fp8_form draws them), half the bf16 bytes; Bf16Gemm widens
  // it (the same bits as the bf16 form).
  auto wo_a_form = [&](const DenseWeight& dw) -> DevDense {
    max_in = std::max(max_in, dw.in);  // as dense() counts it
    const bool eligible = options.stored_wo_a && fast() && bf16() && options.fast_bf16 &&
                          !dw.fp8_activation && dw.in % 32 == 0 && dw.out * dw.in > 0;
    if (eligible && dw.w.empty() && seed != 0) {  // synthetic
      std::optional<DevDense> f =
          fp8_form(DenseWeight{.out = dw.out, .in = dw.in, .fp8_activation = true});
      if (f) {
        f->fp8 = false;
        f->w8 = true;
        ++fast_dense;
        ++bf16_dense;
        ++stored_wo_a;
        return *f;
      }
    } else if (eligible && !dw.w.empty() && bf16_values(dw.w)) {
      if (const EncodedDense* e = Fp8Form(dw, /*any_activation=*/true)) {
        ++fast_dense;
        ++bf16_dense;
        ++stored_wo_a;
        return DevDense{.out = dw.out,
                        .in = dw.in,
                        .codes = r.Put(e->codes),
                        .scales = r.Put(e->scales),
                        .w8 = true};
      }
    }
    return dense(dw);
  };
  // The head has its own product (row-stable, cuBLASLt, DotRows or Bf16Gemm).
  if (std::optional<DevDense> f = bf16_form(w.head)) {
    max_in = std::max(max_in, w.head.in);
    ++fast_dense;
    ++bf16_dense;
    head = *f;
  } else {
    head = dense_fp32(w.head);
  }
  for (int l = 0; l < held_layers(); ++l) {
    const BlockWeights& bw = w.layers[l];
    const LayerRole& role = roles[l];
    LayerDev& L = layers[l];
    L.attn_norm = r.Put(bw.attn_norm);
    L.ffn_norm = r.Put(bw.ffn_norm);
    L.hc_attn = {r.Put(bw.hc_attn.fn), r.Put(bw.hc_attn.base), r.Put(bw.hc_attn.scale)};
    L.hc_ffn = {r.Put(bw.hc_ffn.fn), r.Put(bw.hc_ffn.base), r.Put(bw.hc_ffn.scale)};
    const AttentionWeights& a = bw.attn;
    L.wq_a = dense(a.wq_a);
    L.wq_b = dense(a.wq_b);
    L.wkv = dense(a.wkv);
    L.wo_b = dense(a.wo_b);
    L.wo_a.clear();
    for (const DenseWeight& g : a.wo_a) L.wo_a.push_back(wo_a_form(g));
    L.q_norm = r.Put(a.q_norm);
    L.kv_norm = r.Put(a.kv_norm);
    L.sink = r.Put(a.attn_sink);
    if (role.has_compressor) {
      L.comp_wkv = dense(a.comp_wkv);
      if (role.ratio > 1) L.comp_wgate = dense(a.comp_wgate);
      L.comp_norm = r.Put(a.comp_norm);
      L.index_wk = dense(a.index_wk);
      L.index_k_norm = r.Put(a.index_k_norm);
    }
    if (role.has_indexer) {
      L.index_wq_b = dense(a.index_wq_b);
      L.index_weights_proj = dense(a.index_weights_proj);
    }
    const MoeWeights& f = bw.ffn;
    L.gate = r.Put(f.gate);
    // prompt_bf16_gate: the gate's bf16 bits beside its fp32 values (the
    // generated rows' MoeGateLogits and MoeGate read those), where every
    // value is a bf16 value (decided once per gate: both layout passes agree).
    if (fast() && bf16() && options.prompt_bf16_gate && options.prompt_bf16_linears &&
        !f.gate.empty() && d % 8 == 0 && bf16_values(f.gate)) {
      L.gate16 = put_bf16(f.gate);
    }
    L.bias = r.Put(f.bias);
    L.bias_vl = r.Put(f.bias_vl);
    const std::vector<int>& local = ex.local[l];
    L.experts = static_cast<int>(local.size());
    L.logical = static_cast<int>(MoeExperts(c, role));
    L.route_topk = MoeTopk(c, role);
    if (!local.empty()) {
      const ExpertWeightsF32& first = f.experts[local[0]];
      L.inter = first.w1.out;
      L.w13_fp8 = first.w1.fp8_activation;
      L.w2_fp8 = first.w2.fp8_activation;
    }
    if (options.communicator != nullptr && l < c.n_layers) {  // DSpark stages: all local
      L.ep_offsets = r.Put(ex.replicas[l].offsets);
      L.ep_slots = r.Put(ex.replicas[l].slots);
    }
    const size_t before_experts = r.used();
    L.mxfp4 = !encoded[l].empty() ||
              (seed != 0 && options.mxfp4_experts && d % 32 == 0 && L.inter % 32 == 0);
    if (L.mxfp4) {
      ++mxfp4_layers;
      std::vector<const uint8_t*> codes[3], scales[3];
      for (int k = 0; k < 3; ++k) {
        L.slot_codes[k].clear();
        L.slot_scales[k].clear();
      }
      for (size_t e = 0; e < local.size(); ++e) {
        const ExpertWeightsF32& ew = f.experts[local[e]];
        const DenseWeight* m[3] = {&ew.w1, &ew.w3, &ew.w2};
        for (int k = 0; k < 3; ++k) {
          max_in = std::max(max_in, m[k]->in);
          if (!encoded[l].empty()) {
            codes[k].push_back(r.Put(encoded[l][e].codes[k]));
            scales[k].push_back(r.Put(encoded[l][e].scales[k]));
            continue;
          }
          // Synthetic: random codes, one scale so values reach about 3 / sqrt(in).
          const int64_t count = m[k]->out * m[k]->in;
          uint8_t* cp = r.Alloc<uint8_t>(count / 2);
          uint8_t* sp = r.Alloc<uint8_t>(count / 32);
          if (live && fill_status.ok()) {
            ++fills;
            fill_status = dec::RandomBytes({.x = cp, .n = count / 2, .seed = seed * 7919 + fills},
                                           stream);
            const int exponent = static_cast<int>(
                std::lround(std::log2(3.0 / std::sqrt(static_cast<double>(m[k]->in)) / 6.0)));
            if (cudaError_t e2 = cudaMemsetAsync(sp, 127 + exponent, count / 32, stream);
                e2 != cudaSuccess && fill_status.ok()) {
              fill_status = device_decoder_internal::CudaError("synthetic scales", e2);
            }
          }
          codes[k].push_back(cp);
          scales[k].push_back(sp);
        }
      }
      for (int k = 0; k < 3; ++k) {
        for (const uint8_t* p : codes[k]) L.slot_codes[k].push_back(const_cast<uint8_t*>(p));
        for (const uint8_t* p : scales[k]) L.slot_scales[k].push_back(const_cast<uint8_t*>(p));
      }
      L.w1c = r.Put(std::span<const uint8_t* const>(codes[0]));
      L.w1q = r.Put(std::span<const uint8_t* const>(scales[0]));
      L.w3c = r.Put(std::span<const uint8_t* const>(codes[1]));
      L.w3q = r.Put(std::span<const uint8_t* const>(scales[1]));
      L.w2c = r.Put(std::span<const uint8_t* const>(codes[2]));
      L.w2q = r.Put(std::span<const uint8_t* const>(scales[2]));
    } else {
      std::vector<const float*> p1, p2, p3;
      for (int slot : local) {
        const ExpertWeightsF32& e = f.experts[slot];
        p1.push_back(dense_fp32(e.w1).w);
        p3.push_back(dense_fp32(e.w3).w);
        p2.push_back(dense_fp32(e.w2).w);
      }
      L.slot_w[0].clear();
      L.slot_w[1].clear();
      L.slot_w[2].clear();
      for (size_t e = 0; e < p1.size(); ++e) {
        L.slot_w[0].push_back(const_cast<float*>(p1[e]));
        L.slot_w[1].push_back(const_cast<float*>(p3[e]));
        L.slot_w[2].push_back(const_cast<float*>(p2[e]));
      }
      L.w1s = r.Put(std::span<const float* const>(p1));
      L.w3s = r.Put(std::span<const float* const>(p3));
      L.w2s = r.Put(std::span<const float* const>(p2));
    }
    expert_bytes += r.used() - before_experts;
    if (FastExperts(L)) ++fast_moe_layers;
    L.sw1 = dense(f.shared.w1);
    L.sw2 = dense(f.shared.w2);
    L.sw3 = dense(f.shared.w3);
    if (role.has_engram) {
      const EngramWeights& e = bw.engram;
      L.etable = r.Put(e.table);
      L.escales = r.Put(e.scales);
      L.erows = e.rows;
      L.ewkv = dense(e.wkv);
      L.egate = r.Put(e.gate_weight);
    }
  }
  if (options.drafting) {  // DSpark: main_proj and its norm, the last stage's heads
    const DsparkWeights& dw = w.dspark;
    main_proj = dense(dw.main_proj);
    main_norm = r.Put(dw.main_norm);
    dspark_norm = r.Put(dw.norm);
    markov_embed = r.Put(dw.markov_embed);
    markov_head = dense_fp32(dw.markov_head);  // the head's products (HeadProduct)
    confidence = dense_fp32(dw.confidence);    // row-stable, as the CPU's Matmul
  }
  // RoPE cos/sin for every position a slot can hold, the CPU's values.
  {
    std::vector<int64_t> positions(options.max_positions);
    for (int64_t p = 0; p < options.max_positions; ++p) positions[p] = p;
    const int64_t half = c.rope_head_dim / 2;
    std::vector<float> table(options.max_positions * half * 2);
    auto make = [&](int ratio) -> absl::StatusOr<const float*> {
      ASSIGN_OR_RETURN(cpu::RopeTable t,
                       cpu::RopeTable::Create(cpu::LayerRopeConfig(
                           ratio, static_cast<int>(c.rope_head_dim),
                           static_cast<float>(c.rope_theta),
                           static_cast<float>(c.compress_rope_theta), c.original_seq_len,
                           static_cast<float>(c.rope_factor), static_cast<float>(c.beta_fast),
                           static_cast<float>(c.beta_slow))));
      RETURN_IF_ERROR(cpu::RopeCosSin(t, positions, table));
      return r.Put(table);
    };
    ASSIGN_OR_RETURN(cos_sin_swa, make(0));
    ASSIGN_OR_RETURN(cos_sin_compressed, make(1));
  }
  return absl::OkStatus();
}

}  // namespace weir::model
