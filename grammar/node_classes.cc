// grammar/node_classes.cc
//
// Partition refinement: round 0 separates nodes by pops, calls (rule and
// return node, by identity) and first-byte ranges; round i adds the round
// i-1 classes of byte-edge targets. Equal classes after round i mean equal
// behavior on every input of at most i + 1 bytes.

#include "grammar/node_classes.h"

#include <numeric>

#include "absl/container/flat_hash_map.h"

namespace weir::grammar {

std::vector<int32_t> TokenCacheRepresentatives(const Pda& pda, int32_t max_token_bytes,
                                               int64_t max_work) {
  const int32_t n = pda.num_nodes();
  std::vector<int32_t> rep(n);
  std::iota(rep.begin(), rep.end(), 0);
  int64_t edges = 0;
  for (int32_t v = 0; v < n; ++v) {
    const PdaNode& node = pda.node(v);
    edges += 1 + (node.byte_end - node.byte_begin) + (node.rule_end - node.rule_begin);
  }
  if (edges * std::max(1, max_token_bytes) > max_work) return rep;

  std::vector<int32_t> cls(n), next(n);
  absl::flat_hash_map<std::vector<int64_t>, int32_t> ids;
  std::vector<int64_t> sig;
  auto intern = [&](int32_t v) {
    auto [it, inserted] = ids.try_emplace(sig, static_cast<int32_t>(ids.size()));
    next[v] = it->second;
  };
  for (int32_t v = 0; v < n; ++v) {
    const PdaNode& node = pda.node(v);
    sig.assign({node.can_end ? 1 : 0, node.rule_end - node.rule_begin});
    const RuleEdge* calls = pda.rule_edges(node);
    for (int32_t i = 0; i < node.rule_end - node.rule_begin; ++i) {
      sig.push_back((int64_t{calls[i].rule} << 32) | static_cast<uint32_t>(calls[i].target));
    }
    const ByteEdge* bytes = pda.byte_edges(node);
    for (int32_t i = 0; i < node.byte_end - node.byte_begin; ++i) {
      sig.push_back((bytes[i].lo << 8) | bytes[i].hi);
    }
    intern(v);
  }
  size_t num_classes = ids.size();
  for (int32_t round = 1; round < max_token_bytes; ++round) {
    cls.swap(next);
    ids.clear();
    for (int32_t v = 0; v < n; ++v) {
      const PdaNode& node = pda.node(v);
      sig.assign({cls[v]});
      const ByteEdge* bytes = pda.byte_edges(node);
      for (int32_t i = 0; i < node.byte_end - node.byte_begin; ++i) {
        sig.push_back((int64_t{bytes[i].lo} << 40) | (int64_t{bytes[i].hi} << 32) |
                      static_cast<uint32_t>(cls[bytes[i].target]));
      }
      intern(v);
    }
    if (ids.size() == num_classes) break;  // stable: full bisimulation reached
    num_classes = ids.size();
  }
  std::vector<int32_t> first(ids.size(), -1);
  for (int32_t v = 0; v < n; ++v) {
    if (first[next[v]] < 0) first[next[v]] = v;
    rep[v] = first[next[v]];
  }
  return rep;
}

}  // namespace weir::grammar
