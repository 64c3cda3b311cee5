// grammar/stack_dfa.cc

#include "grammar/stack_dfa.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace weir::grammar {

StackDfa::StackDfa(const Pda& pda) : pda_(pda) {
  stacks_ = {Frame{-1, -1}, Frame{-1, -1}};  // kRootStack, kBoundaryStack
}

StackDfa::StackDfa(const StackDfa& other)
    : pda_(other.pda_), stacks_(other.stacks_), stack_ids_(other.stack_ids_) {}

StackId StackDfa::InternStack(int32_t node, StackId parent) {
  const Frame key{node, parent};
  auto [it, inserted] = stack_ids_.try_emplace(key, static_cast<StackId>(stacks_.size()));
  if (inserted) stacks_.push_back(key);
  return it->second;
}

// Expands calls and returns until only frames that consume bytes remain.
void StackDfa::Close(State& state) {
  absl::flat_hash_set<Frame> seen;
  work_.assign(state.frames.begin(), state.frames.end());
  seen.insert(work_.begin(), work_.end());
  auto visit = [&](Frame f) {
    if (seen.insert(f).second) work_.push_back(f);
  };
  while (!work_.empty()) {
    const Frame f = work_.back();
    work_.pop_back();
    const PdaNode& node = pda_.node(f.node);
    if (node.byte_begin != node.byte_end) state.ready.push_back(f);
    const RuleEdge* calls = pda_.rule_edges(node);
    for (int32_t i = 0; i < node.rule_end - node.rule_begin; ++i) {
      const int32_t start = pda_.rule_start(calls[i].rule);
      // A call whose return point can only end is a tail call.
      const StackId parent =
          pda_.node(calls[i].target).pure_end ? f.parent : InternStack(calls[i].target, f.parent);
      visit(Frame{start, parent});
    }
    if (node.can_end) {
      if (f.parent == kRootStack) {
        state.can_finish = true;
      } else if (f.parent == kBoundaryStack) {
        state.hits_boundary = true;
      } else {
        visit(stacks_[f.parent]);
      }
    }
  }
  std::sort(state.ready.begin(), state.ready.end());
}

StackDfa::StateId StackDfa::Intern(const FrameSet& frames) {
  auto it = state_ids_.find(frames);
  if (it != state_ids_.end()) return it->second;
  const StateId id = static_cast<StateId>(states_.size());
  states_.emplace_back();
  states_.back().frames = frames;
  Close(states_.back());
  state_ids_.emplace(frames, id);
  return id;
}

void StackDfa::Successors(const FrameSet& ready, uint8_t byte, FrameSet* out) const {
  out->clear();
  for (const Frame& f : ready) {
    const PdaNode& node = pda_.node(f.node);
    const ByteEdge* edges = pda_.byte_edges(node);
    for (int32_t i = 0; i < node.byte_end - node.byte_begin; ++i) {
      if (edges[i].lo <= byte && byte <= edges[i].hi)
        out->push_back(Frame{edges[i].target, f.parent});
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

const ByteSet& StackDfa::SelfLoops(StateId s) {
  State& state = states_[s];
  if (!state.self_loops_known) {
    FrameSet out;
    for (int b = 0; b < 256; ++b) {
      Successors(state.ready, static_cast<uint8_t>(b), &out);
      if (!out.empty() && out == state.frames) state.self_loops.set(b);
    }
    state.self_loops_known = true;
    state.has_self_loops = state.self_loops.any();
  }
  return state.self_loops;
}

StackDfa::StateId StackDfa::Next(StateId s, uint8_t byte) {
  if (states_[s].next == nullptr) {
    states_[s].next = std::make_unique<std::array<StateId, 256>>();
    states_[s].next->fill(-2);
  }
  StateId cached = (*states_[s].next)[byte];
  if (cached != -2) return cached;
  FrameSet out;
  Successors(states_[s].ready, byte, &out);
  const StateId result = out.empty() ? kDead : Intern(out);
  (*states_[s].next)[byte] = result;  // states_ may have grown: index again
  return result;
}

void StackDfa::TrimMemo(int32_t max_states) {
  if (static_cast<int32_t>(states_.size()) <= max_states) return;
  states_.clear();
  state_ids_.clear();
}

int64_t StackDfa::MemoryBytes() const {
  int64_t bytes = static_cast<int64_t>(stacks_.size()) * sizeof(Frame) * 3;
  for (const State& s : states_) {
    bytes += static_cast<int64_t>((s.frames.size() + s.ready.size()) * sizeof(Frame) * 2) + 64;
    if (s.next) bytes += sizeof(std::array<StateId, 256>);
  }
  return bytes;
}

}  // namespace weir::grammar
